"""Count what a GPU would pay for a piece of torch code, measured on the CPU (issue 21).

:class:`DispatchCounter` is a ``TorchDispatchMode`` that counts every aten op (each one a kernel
launch on CUDA) and the host syncs a CUDA run would make:

* ``scalar``: ``aten._local_scalar_dense`` (``.item()``, ``int(t)``, ``float(t)``, ``bool(t)``);
* ``data_dependent``: ops whose output size depends on the data (``nonzero``, boolean-mask
  indexing, ``masked_select``, ``unique``, ``repeat_interleave`` without ``output_size``): on CUDA
  each one waits for the device;
* ``transfer``: ``Tensor.tolist()``, ``.numpy()`` and ``.cpu()`` calls (a device-to-host copy on
  CUDA; on the CPU they dispatch no op, so they are caught by wrapping the three methods).

``syncs`` is their sum. :class:`OpenCVCounter` wraps every function and class of the ``cv2``
module with a counting proxy (objects built by a class or a ``*_create`` factory count their
method calls too), so OpenCV steps on a path that should stay on the device show up.

Usage::

    with DispatchCounter() as ops, OpenCVCounter() as cv:
        run()
    ops.ops, ops.syncs, cv.calls
"""
from __future__ import annotations

import collections
import functools
import importlib
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

SCALAR = "aten._local_scalar_dense"
#: ops whose output size depends on tensor values (a device wait on CUDA)
DATA_DEPENDENT = ("aten.nonzero", "aten.masked_select", "aten._unique", "aten.unique",
                  "aten._unique2", "aten.unique_consecutive", "aten.unique_dim",
                  "aten.argwhere", "aten.nonzero_static")
TRANSFER_METHODS = ("tolist", "numpy", "cpu")


def _packet(func: Any) -> str:
    """"aten.add" of ``aten.add.Tensor``."""
    name = str(func)
    return name.rsplit(".", 1)[0] if name.count(".") >= 2 else name


def _is_data_dependent(func: Any, args: Tuple[Any, ...]) -> bool:
    packet = _packet(func)
    if packet in ("aten.nonzero_static",):
        return False
    if packet in DATA_DEPENDENT:
        return True
    if packet == "aten.repeat_interleave":
        return len(args) < 3 or args[-1] is None
    if packet in ("aten.index", "aten._unsafe_index"):  # boolean-mask indexing
        idx = args[1] if len(args) > 1 else ()
        return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in idx or ())
    return False


class DispatchCounter(TorchDispatchMode):
    """Counts aten ops and host syncs inside its ``with`` block (this thread only).

    Attributes:
        ops: every aten op dispatched.
        scalar, data_dependent, transfer: the three kinds of host sync (module docstring).
        by_op: ``collections.Counter`` of op packet name -> count.
        sync_ops: ``collections.Counter`` of what synced (op name or ``Tensor.<method>``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.scalar = 0
        self.data_dependent = 0
        self.transfer = 0
        self.by_op: collections.Counter = collections.Counter()
        self.sync_ops: collections.Counter = collections.Counter()
        self._saved: Dict[str, Callable] = {}

    @property
    def syncs(self) -> int:
        """Host syncs a CUDA run would make: scalar + data-dependent + transfers."""
        return self.scalar + self.data_dependent + self.transfer

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops += 1
        packet = _packet(func)
        self.by_op[packet] += 1
        if packet == SCALAR:
            self.scalar += 1
            self.sync_ops[packet] += 1
        elif _is_data_dependent(func, args):
            self.data_dependent += 1
            self.sync_ops[packet] += 1
        return func(*args, **(kwargs or {}))

    def _wrap_transfer(self, name: str) -> Callable:
        original = getattr(torch.Tensor, name)

        @functools.wraps(original)
        def counted(t, *a, **kw):
            self.transfer += 1
            self.sync_ops[f"Tensor.{name}"] += 1
            return original(t, *a, **kw)

        self._saved[name] = original
        return counted

    def __enter__(self) -> "DispatchCounter":
        for name in TRANSFER_METHODS:
            setattr(torch.Tensor, name, self._wrap_transfer(name))
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()
        return super().__exit__(*exc)

    def summary(self, top: int = 8) -> Dict[str, Any]:
        """Counts as a dict (JSON-ready), with the ``top`` most frequent ops and sync sites."""
        return {"ops": self.ops, "syncs": self.syncs, "scalar": self.scalar,
                "data_dependent": self.data_dependent, "transfer": self.transfer,
                "top_ops": dict(self.by_op.most_common(top)),
                "sync_sites": dict(self.sync_ops.most_common(top))}


class _CountedObject:
    """Proxy of an OpenCV object: every method call counts as one OpenCV call."""

    def __init__(self, obj: Any, counter: "OpenCVCounter", name: str) -> None:
        object.__setattr__(self, "_obj", obj)
        object.__setattr__(self, "_counter", counter)
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str) -> Any:
        value = getattr(self._obj, attr)
        if callable(value):
            return self._counter.wrap(value, f"{self._name}.{attr}", proxy=False)
        return value

    def __setattr__(self, attr: str, value: Any) -> None:
        setattr(self._obj, attr, value)


class OpenCVCounter:
    """Counts calls into OpenCV (``cv2`` module functions, classes and their objects' methods)
    inside its ``with`` block; ``calls`` total, ``by_name`` per function."""

    def __init__(self) -> None:
        self.calls = 0
        self.by_name: collections.Counter = collections.Counter()
        self._saved: List[Tuple[str, Any]] = []
        self._cv2 = importlib.import_module("cv2")

    def wrap(self, fn: Callable, name: str, proxy: bool) -> Callable:
        """``fn`` counting each call under ``name``; with ``proxy`` its result is proxied."""

        def counted(*a, **kw):
            self.calls += 1
            self.by_name[name] += 1
            out = fn(*a, **kw)
            return _CountedObject(out, self, name) if proxy and out is not None else out

        return counted

    def __enter__(self) -> "OpenCVCounter":
        for name in dir(self._cv2):
            if name.startswith("_"):
                continue
            value = getattr(self._cv2, name)
            if isinstance(value, type):
                if issubclass(value, BaseException):
                    continue
                wrapped = self.wrap(value, name, proxy=True)
            elif callable(value) and type(value).__name__ == "builtin_function_or_method":
                wrapped = self.wrap(value, name, proxy=name.endswith("_create"))
            else:
                continue
            self._saved.append((name, value))
            setattr(self._cv2, name, wrapped)
        return self

    def __exit__(self, *exc) -> None:
        for name, value in self._saved:
            setattr(self._cv2, name, value)
        self._saved.clear()


__all__ = ["DispatchCounter", "OpenCVCounter"]
