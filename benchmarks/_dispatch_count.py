"""Count what a GPU would pay for a piece of torch code, measured on the CPU (issue 21).

:class:`DispatchCounter` is a ``TorchDispatchMode`` that counts every aten op (each one a kernel
launch on CUDA) and the host syncs a CUDA run would make:

* ``scalar``: ``aten._local_scalar_dense`` (``.item()``, ``int(t)``, ``float(t)``, ``bool(t)``);
* ``data_dependent``: ops whose output size depends on the data (``nonzero``, boolean-mask
  indexing, ``masked_select``, ``unique``, ``repeat_interleave`` without ``output_size``): on CUDA
  each one waits for the device;
* ``transfer``: ``Tensor.tolist()``, ``.numpy()`` and ``.cpu()`` calls (a device-to-host copy on
  CUDA; on the CPU they dispatch no op, so they are caught by wrapping the three methods).

``syncs`` is their sum. ``linalg`` counts apart the linear-algebra ops that check their error
codes on the host: on CUDA ``torch.linalg.eigh`` / ``svd`` / ``inv`` / ``solve`` / ``cholesky``
read the kernel's ``info`` back (``_linalg_check_errors``: a device wait, as PyTorch documents),
on the CPU the check runs inside the op, so ``syncs`` misses them (:data:`LINALG_SYNC`,
:data:`LINALG_CHECKED`; the ``*_ex`` forms with ``check_errors=False`` do not wait).

:class:`HostToDeviceCounter` finds the host-to-device copies a CUDA run would make (from
pageable memory each one is a ``cudaStreamSynchronize``, a drained stream like any other host
sync, but invisible to a dispatch count on the CPU, where ``.to(device)`` is a no-op): a
``TorchFunctionMode`` that follows which tensors would live on the host (module constants,
tensors built from Python data or NumPy without ``device=``, ``.cpu()`` results and whatever is
computed from host tensors alone) and counts, with the code line that did it, every
``torch.tensor`` / ``as_tensor`` of host data with ``device=``, every ``t.new_tensor(host
data)`` of a device tensor ``t``, every ``.to(device)`` / ``.cuda()`` of a host tensor (but a
``non_blocking=True`` one: the toolkit's ``to_device`` pins the host copy on CUDA, so it queues
without a sync) and every op that mixes a host tensor (more than one element) into device ones.
:class:`OpenCVCounter` wraps every function and class of the ``cv2`` module with a counting
proxy (objects built by a class or a ``*_create`` factory count their method calls too), so
OpenCV steps on a path that should stay on the device show up.

Usage::

    with DispatchCounter() as ops, OpenCVCounter() as cv:
        run()
    ops.ops, ops.syncs, ops.linalg, cv.calls
"""
from __future__ import annotations

import collections
import functools
import importlib
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode

SCALAR = "aten._local_scalar_dense"
#: ops whose output size depends on tensor values (a device wait on CUDA)
DATA_DEPENDENT = ("aten.nonzero", "aten.masked_select", "aten._unique", "aten.unique",
                  "aten._unique2", "aten.unique_consecutive", "aten.unique_dim",
                  "aten.argwhere", "aten.nonzero_static")
TRANSFER_METHODS = ("tolist", "numpy", "cpu")
#: linalg ops that read their error codes on the host after the kernel on CUDA (a device wait
#: each; on the CPU the check runs inside the op, or is the dispatched ``_linalg_check_errors``
#: of ``inv`` / ``solve`` / ``cholesky`` / ``lu_factor``)
LINALG_SYNC = ("aten._linalg_eigh", "aten._linalg_svd", "aten.linalg_eig",
               "aten._linalg_check_errors")
#: ``*_ex`` linalg ops that wait only when called with ``check_errors=True``
LINALG_CHECKED = ("aten.linalg_inv_ex", "aten._linalg_solve_ex", "aten.linalg_cholesky_ex",
                  "aten.linalg_lu_factor_ex", "aten.linalg_ldl_factor_ex")


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


def _is_linalg_sync(packet: str, kwargs: Optional[Dict[str, Any]]) -> bool:
    """Whether the op ``packet`` reads its error codes on the host on CUDA."""
    if packet in LINALG_SYNC:
        return True
    return packet in LINALG_CHECKED and bool((kwargs or {}).get("check_errors", False))


class DispatchCounter(TorchDispatchMode):
    """Counts aten ops and host syncs inside its ``with`` block (this thread only).

    Attributes:
        ops: every aten op dispatched.
        scalar, data_dependent, transfer: the three kinds of host sync (module docstring).
        linalg: linalg ops that would wait for the device on CUDA (error checks; not in
            ``syncs``).
        by_op: ``collections.Counter`` of op packet name -> count.
        sync_ops: ``collections.Counter`` of what synced (op name or ``Tensor.<method>``).
        linalg_ops: ``collections.Counter`` of the ``linalg`` ops by name.
    """

    def __init__(self) -> None:
        super().__init__()
        self.ops = 0
        self.scalar = 0
        self.data_dependent = 0
        self.transfer = 0
        self.linalg = 0
        self.by_op: collections.Counter = collections.Counter()
        self.sync_ops: collections.Counter = collections.Counter()
        self.linalg_ops: collections.Counter = collections.Counter()
        self._saved: Dict[str, Callable] = {}
        self._in_transfer = False

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
        if _is_linalg_sync(packet, kwargs):
            self.linalg += 1
            self.linalg_ops[packet] += 1
        return func(*args, **(kwargs or {}))

    def _wrap_transfer(self, name: str) -> Callable:
        original = getattr(torch.Tensor, name)

        @functools.wraps(original)
        def counted(t, *a, **kw):
            if self._in_transfer:  # re-entered (a TorchFunctionMode calling the method again)
                return original(t, *a, **kw)
            self.transfer += 1
            self.sync_ops[f"Tensor.{name}"] += 1
            self._in_transfer = True
            try:
                return original(t, *a, **kw)
            finally:
                self._in_transfer = False

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
                "linalg": self.linalg, "top_ops": dict(self.by_op.most_common(top)),
                "sync_sites": dict(self.sync_ops.most_common(top)),
                "linalg_ops": dict(self.linalg_ops.most_common(top))}


_TAG = "_h2d_host"  # attribute on tensors seen by HostToDeviceCounter: True host, False device
#: factories whose output lives where their ``device=`` says (the host without one)
_FACTORIES = {"zeros", "ones", "empty", "full", "arange", "linspace", "logspace", "eye", "rand",
              "randn", "randint", "randperm", "zeros_like", "ones_like", "empty_like",
              "full_like", "rand_like", "randn_like", "randint_like", "tensor", "as_tensor",
              "asarray", "scalar_tensor", "empty_strided"}
_FROM_DATA = {"tensor", "as_tensor", "asarray"}  # copy Python / NumPy / tensor data
#: Tensor methods that copy data to their tensor's device (or their ``device=``)
_NEW_FROM_DATA = {"new_tensor"}
_TO_HOST = {"cpu", "numpy", "tolist", "pin_memory"}


def _tensors(obj: Any) -> List[torch.Tensor]:
    """The tensors in ``obj`` (nested lists / tuples / dicts, one level of each)."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, (list, tuple)):
        return [t for o in obj for t in _tensors(o)]
    if isinstance(obj, dict):
        return [t for o in obj.values() for t in _tensors(o)]
    return []


def _is_host(t: torch.Tensor) -> bool:
    """A tensor on an accelerator is not; a CPU tensor the mode never saw (a module constant, a
    cached one) counts as a host one."""
    return t.device.type == "cpu" and getattr(t, _TAG, True)


def _mark(out: Any, host: bool) -> Any:
    for t in _tensors(out):
        try:
            setattr(t, _TAG, host)
        except (AttributeError, RuntimeError):  # some views / subclasses take no attributes
            pass
    return out


def _site() -> str:
    """``file:line`` of the innermost geocon_torch frame of the caller."""
    f = sys._getframe(2)
    while f is not None:
        name = f.f_code.co_filename
        if "geocon_torch" in name:
            return f"{name.split('geocon_torch', 1)[1].lstrip('/')}:{f.f_lineno}"
        f = f.f_back
    return "outside geocon_torch"


def _moves(func_name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
    """Whether a ``Tensor.to`` / ``cuda`` call names a device (a move, not a dtype cast)."""
    if func_name == "cuda":
        return True
    if "device" in kwargs and kwargs["device"] is not None:
        return True
    return any(isinstance(a, (str, torch.device, torch.Tensor)) for a in args[1:])


class HostToDeviceCounter(TorchFunctionMode):
    """Host-to-device copies a CUDA run of the code in its ``with`` block would make, found on
    the CPU (module docstring). ``copies``: total; ``sites``: ``collections.Counter`` of
    ``file:line`` -> copies. ``device(t)`` marks an input tensor as already on the device (the
    clips a benchmark hands over); ``tracking_only=True`` follows tensors without counting (a
    warm-up, so the constants it caches are known to live on the device)."""

    def __init__(self, tracking_only: bool = False) -> None:
        super().__init__()
        self.copies = 0
        self.sites: collections.Counter = collections.Counter()
        self.tracking_only = tracking_only
        self.aliases = 0  # ``view`` ops it dispatched itself (one per no-op move on the CPU)
        self._from_numpy: Optional[Callable] = None

    @staticmethod
    def device(*tensors: torch.Tensor) -> None:
        _mark(list(tensors), False)

    def _count(self) -> None:
        if not self.tracking_only:
            self.copies += 1
            self.sites[_site()] += 1

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        out = func(*args, **kwargs)
        if name in _TO_HOST:
            return _mark(out, True)
        if name in ("to", "cuda") and args and isinstance(args[0], torch.Tensor):
            if not _moves(name, args, kwargs):
                return _mark(out, _is_host(args[0]))
            if _is_host(args[0]) and not kwargs.get("non_blocking", False):
                self._count()  # non_blocking: from pinned memory (geocon's to_device), no sync
            if out is args[0]:  # a no-op move on the CPU: tag an alias, not the source
                out = out.view_as(out)
                self.aliases += 1
            return _mark(out, False)
        if name in _NEW_FROM_DATA and args and isinstance(args[0], torch.Tensor):
            return self._new_from_data(out, args, kwargs)
        if name in _FACTORIES and not (args and isinstance(args[0], torch.Tensor)
                                       and name.endswith("_like")):
            on_device = kwargs.get("device") is not None
            if on_device and name in _FROM_DATA:
                src = _tensors(args[:1])
                if not src or any(_is_host(t) for t in src):
                    self._count()
            return _mark(out, not on_device)
        ins = _tensors(args) + _tensors(kwargs)
        if not ins:  # another factory (triu_indices, ...): where its device= says
            return _mark(out, kwargs.get("device") is None)
        host = [_is_host(t) for t in ins]
        if all(host):
            return _mark(out, True)
        if any(h and t.numel() > 1 for h, t in zip(host, ins)):
            self._count()  # a host tensor mixed into device ones: an implicit copy
        return _mark(out, False)

    def _new_from_data(self, out: Any, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> Any:
        """``t.new_tensor(data)``: lives on ``t``'s device (or ``device=``); a copy when that is
        the device and ``data`` is Python / NumPy data or a host tensor."""
        on_device = kwargs.get("device") is not None or not _is_host(args[0])
        if on_device:
            src = _tensors(args[1] if len(args) > 1 else kwargs.get("data"))
            if not src or any(_is_host(t) for t in src):
                self._count()
        return _mark(out, not on_device)

    def __enter__(self) -> "HostToDeviceCounter":
        self._from_numpy = torch.from_numpy
        torch.from_numpy = lambda a: _mark(self._from_numpy(a), True)
        return super().__enter__()

    def __exit__(self, *exc) -> None:
        torch.from_numpy = self._from_numpy
        return super().__exit__(*exc)


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


__all__ = ["DispatchCounter", "HostToDeviceCounter", "OpenCVCounter"]
