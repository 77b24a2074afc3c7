"""Small argument checks shared by the tensor functions (messages show the offending shape)."""
from __future__ import annotations

import numbers
import warnings
from typing import Any, Dict, Optional, Sequence, Union

import torch

from .errors import ArgumentTypeError, InputError, ShapeError

FLOAT_DTYPES = (torch.float32, torch.float64)


def describe(x: Any) -> str:
    """``(shape) dtype`` of a tensor, else its type name (for error messages)."""
    return f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (Python / NumPy; a bool is not)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_integer(value: Any, name: str, low: Optional[int], why: str = "") -> int:
    """``value`` as an int: ArgumentTypeError unless :func:`is_integer` (Python / NumPy
    integers; a float such as 2.0 or a bool is refused, never truncated), InputError unless it
    is >= ``low`` (None: no lower bound; ``why`` appended to that message)."""
    if not is_integer(value):
        bound = "" if low is None else f" >= {low}"
        raise ArgumentTypeError(f"{name} must be an integer{bound}, got "
                                f"{type(value).__name__} {value!r}")
    if low is not None and value < low:
        raise InputError(f"{name} must be an integer >= {low}, got {value}{why}")
    return int(value)


def check_number(value: Any, name: str, low: Optional[float] = None,
                 high: Optional[float] = None, *, low_open: bool = False,
                 high_open: bool = False, why: str = "") -> float:
    """``value`` as a float: ArgumentTypeError unless it is a real number (a Python / NumPy int
    or float; a bool, a str such as ``"0.9"``, None or a tensor is refused, never converted),
    InputError unless it lies within ``low`` / ``high`` (None: no bound; each inclusive unless
    ``low_open`` / ``high_open``; ``why`` appended to that message). NaN is always refused, an
    infinity only by a bound. A host-side check of a Python value: no tensor op, no sync."""
    ends = [f"{'>' if low_open else '>='} {low:g}"] if low is not None else []
    ends += [f"{'<' if high_open else '<='} {high:g}"] if high is not None else []
    if len(ends) == 2:
        ends = [f"in {'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"]
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise ArgumentTypeError(f"{name} must be a number{''.join(' ' + e for e in ends)}, got "
                                f"{type(value).__name__} {value!r}")
    x = float(value)
    below = low is not None and (x <= low if low_open else x < low)
    above = high is not None and (x >= high if high_open else x > high)
    if x != x or below or above:  # x != x: NaN
        raise InputError(f"{name} must be {ends[0] if ends else 'a number, not NaN'}, got "
                         f"{value}{why}")
    return x


def check_device(device: Union[None, str, int, torch.device], name: str = "device", *,
                 available: bool = True) -> Union[None, str, int, torch.device]:
    """A device argument (``name``: how the caller calls it, ``--device`` for the CLI) that
    exists on this machine, checked once before any clip is read: None and "auto" (any case)
    -> None (the automatic choice); a string, ``torch.device`` or CUDA index naming a device
    here -> itself. ``available=False``: only the name is checked (a device named to pick
    what runs there, e.g. the "auto" backend of CUDA, on a machine without one). No tensor is
    touched (no host sync).

    Raises:
        InputError: not a torch device ("gpu", "xyz", a float), and with ``available``:
            "cuda" without a CUDA GPU, "cuda:3" on a machine with fewer GPUs, "mps" without
            Apple MPS.
    """
    if device is None or (isinstance(device, str) and device.strip().lower() == "auto"):
        return None
    use = f"{name} cpu" if name.startswith("-") else f"{name}='cpu'"
    bad = InputError(f"{name} {device!r} is not a torch device (use cpu, cuda, cuda:N or mps)")
    if isinstance(device, bool) or not isinstance(device, (str, torch.device, int)):
        raise bad  # an int is a CUDA index, as for torch.device
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError, TypeError):
        raise bad from None
    if not available:
        return device
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise InputError(f"{name} {device}: no CUDA GPU is available on this machine "
                             f"(torch.cuda.is_available() is False); use {use}")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            raise InputError(f"{name} {device}: only {torch.cuda.device_count()} CUDA "
                             "device(s) here")
    if dev.type == "mps" and not torch.backends.mps.is_available():
        raise InputError(f"{name} {device}: Apple MPS is not available on this machine")
    return device


def check_points(x: torch.Tensor, name: str = "points", dim: int = 2) -> None:
    """Raise ShapeError unless ``x`` is a floating (P, N, dim) tensor."""
    if not isinstance(x, torch.Tensor):
        raise ShapeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 3 or x.shape[-1] != dim:
        raise ShapeError(f"{name} must have shape (P, N, {dim}), got {tuple(x.shape)}")
    if x.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{name} must be float32 or float64, got {x.dtype}")


def check_matrices(m: torch.Tensor, name: str = "model", size: int = 3) -> None:
    """Raise ShapeError unless ``m`` is a floating (P, size, size) tensor."""
    if not isinstance(m, torch.Tensor):
        raise ShapeError(f"{name} must be a torch.Tensor, got {type(m).__name__}")
    if m.ndim != 3 or m.shape[-2:] != (size, size):
        raise ShapeError(f"{name} must have shape (P, {size}, {size}), got {tuple(m.shape)}")
    if m.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"{name} must be float32 or float64, got {m.dtype}")


def check_mask(mask: Optional[torch.Tensor], like: torch.Tensor, name: str = "mask"
               ) -> torch.Tensor:
    """Return a bool (P, N) mask matching ``like`` (P, N, ...); all-True when ``mask`` is None.

    A bool mask is taken as it is (no tensor read: no host sync). A mask of another dtype
    (0 / 1 integers or floats) must hold only 0 and 1: one batched check, one host read on that
    path only; NaN or a weight such as 0.01 is an InputError (``.to(bool)`` would count every
    nonzero value, NaN included, as a valid match).

    Raises:
        ShapeError: not a tensor, or not of shape (P, N); InputError: a non-bool mask with a
            value other than 0 / 1.
    """
    lead = tuple(like.shape[:2])
    if mask is None:
        return torch.ones(lead, dtype=torch.bool, device=like.device)
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != lead:
        got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ShapeError(f"{name} must have shape {lead}, got {got}")
    if mask.dtype != torch.bool:
        _check_binary(mask, name)
    return mask.to(device=like.device, dtype=torch.bool)


def _check_binary(mask: torch.Tensor, name: str) -> None:
    """InputError unless the non-bool ``mask`` holds only 0 and 1 (one host read; the values
    of the message are read only when it raises)."""
    binary = (mask == 0) | (mask == 1)
    if bool(binary.all()):
        return
    bad = mask[~binary]
    raise InputError(f"{name} must be bool (or hold only 0 / 1), got {mask.dtype} with "
                     f"{bad.numel()} other value(s), e.g. {bad[0].item():g}: threshold "
                     f"weights first (e.g. {name}=weights > 0)")


def check_same_shape(tensors: Sequence[torch.Tensor], names: Sequence[str]) -> None:
    """Raise ShapeError unless all tensors share one shape."""
    shapes = [tuple(t.shape) for t in tensors]
    if len(set(shapes)) > 1:
        desc = ", ".join(f"{n}={s}" for n, s in zip(names, shapes))
        raise ShapeError(f"shapes must match: {desc}")


def retired_name(old: str, new: str, stacklevel: int = 3) -> None:
    """Warn (DeprecationWarning) that the retired name ``old`` is now ``new`` (docs/GLOSSARY.md);
    the one message of every retired attribute, column and key."""
    warnings.warn(f"{old} is deprecated; use {new} (docs/GLOSSARY.md)", DeprecationWarning,
                  stacklevel=stacklevel)


def retired_argument(extra: Dict[str, Any], old: str, new: str, value: Any) -> Any:
    """``value`` of argument ``new``, or of its retired name ``old`` when a caller still passes
    that (in the ``**extra`` keywords; a DeprecationWarning, see docs/GLOSSARY.md). Any other
    unexpected keyword is an ArgumentTypeError."""
    unknown = sorted(set(extra) - {old})
    if unknown:
        raise ArgumentTypeError(f"unexpected keyword argument(s) {', '.join(unknown)}")
    if old not in extra:
        return value
    warnings.warn(f"argument {old}= is deprecated; use {new}= (docs/GLOSSARY.md)",
                  DeprecationWarning, stacklevel=3)
    return extra[old]
