"""Small argument checks shared by the tensor functions (messages show the offending shape)."""
from __future__ import annotations

import numbers
import warnings
from typing import Any, Dict, Optional, Sequence

import torch

from .errors import ArgumentTypeError, InputError, ShapeError

FLOAT_DTYPES = (torch.float32, torch.float64)


def describe(x: Any) -> str:
    """``(shape) dtype`` of a tensor, else its type name (for error messages)."""
    return f"{tuple(x.shape)} {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__


def is_integer(value: Any) -> bool:
    """Whether ``value`` is an integer (Python / NumPy; a bool is not)."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def check_integer(value: Any, name: str, low: int, why: str = "") -> int:
    """``value`` as an int: ArgumentTypeError unless :func:`is_integer`, InputError unless it
    is >= ``low`` (``why`` appended to that message)."""
    if not is_integer(value):
        raise ArgumentTypeError(f"{name} must be an integer >= {low}, got "
                                f"{type(value).__name__} {value!r}")
    if value < low:
        raise InputError(f"{name} must be an integer >= {low}, got {value}{why}")
    return int(value)


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


def check_mask(mask: Optional[torch.Tensor], like: torch.Tensor, name: str = "mask") -> torch.Tensor:
    """Return a bool (P, N) mask matching ``like`` (P, N, ...); all-True when ``mask`` is None."""
    lead = tuple(like.shape[:2])
    if mask is None:
        return torch.ones(lead, dtype=torch.bool, device=like.device)
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != lead:
        got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ShapeError(f"{name} must have shape {lead}, got {got}")
    return mask.to(device=like.device, dtype=torch.bool)


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
