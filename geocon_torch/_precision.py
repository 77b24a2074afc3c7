"""Scoring computes in the dtypes and the float32 precision it was written for, whatever its
caller has set.

A training step usually runs under ``torch.autocast``; left on, it would turn the geometry's
matrix products into bfloat16 / float16 (the background GE x5 under bfloat16, no matches at all
under float16) and break the float32 / float64 checks of the solvers. Training code also lowers
the precision of float32 products: ``torch.set_float32_matmul_precision("high")`` (TF32 GEMMs on
CUDA) or ``"medium"`` (bfloat16 GEMMs through oneDNN on CPUs with AMX / avx512_bf16),
``torch.backends.cudnn.allow_tf32`` (TF32 convolutions, torch's default) and, from torch 2.9,
the per-backend ``fp32_precision`` switches. Left on, the RANSAC residuals, descriptor distances
and SIFT stencils would follow them (a clean clip's background GE 0.003 -> 0.07 px under TF32).

Every public entry point that scores (``score_clip`` / ``score_clips``, ``geometric_reward``,
the functional metrics and the Metric classes' ``update``, the robust estimators, and the
geometry functions built on matrix products: the DLT / 8-point / 7-point solvers,
``sampson_distance_normalized``, ``weighted_affine_lstsq``) is wrapped in
:func:`scoring_precision` (historical name :func:`autocast_off`): autocast is off on the device
types where the caller had it on, and float32 matmuls and convolutions run in full float32
(cuBLAS, cuDNN and oneDNN). Inside, parts that choose a lower precision on purpose (SAM-2 under
bfloat16) turn it on again themselves. Autograd is unaffected. Only what is not already full
precision is changed, and the caller's settings come back exactly on the way out (also after an
exception; a nested call finds full precision and changes nothing): the legacy switches read
back what they read before, and the per-backend values keep inheriting from their parents where
they did. Inside, torch's legacy query ``torch.backends.cudnn.allow_tf32`` may raise (cuDNN's
convolutions are IEEE while its legacy switch still says TF32: the state torch's own
``torch.backends.cudnn.conv.fp32_precision = "ieee"`` gives).

The host-driven ones among them (``score_clip`` / ``score_clips``, ``geometric_reward``, the
functional metrics but ``soft_background_consistency``, the Metric classes' ``update``) also run
eagerly inside ``torch.compile`` (:func:`eager_entry`: a graph break), and the per-clip
isolation re-raises the compiler's failures (:func:`compile_failure`) instead of making them
a clip's error.

Caveat: these precision settings are process-wide, not per thread. While one thread scores,
another thread running torch at the same time also gets full-precision float32 matmuls and
convolutions. Threads that score at the same time share one pinning (:func:`full_float32`: the
first to start records the caller's settings, the last to finish restores them).
"""
from __future__ import annotations

import contextlib
import functools
import re
import sys
import threading
import warnings
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple, TypeVar

import torch

#: device types whose autocast state is turned off around scoring
AUTOCAST_DEVICES = ("cpu", "cuda")
F = TypeVar("F", bound=Callable[..., Any])
Undo = Callable[[], None]

_VERSION = tuple(int(v) for v in re.findall(r"\d+", torch.__version__)[:2])
#: torch >= 2.9: per-backend fp32_precision values "ieee" / "tf32" / "bf16" / "none" (inherit
#: from the backend's "all", then from "generic"); torch 2.7 / 2.8 spell "none" "default" and
#: take the legacy path below
_PER_BACKEND = _VERSION >= (2, 9) and hasattr(torch._C, "_get_fp32_precision_getter")
#: effective per-backend values that mean full float32
_FULL = ("ieee", "none")
#: the ops scoring runs through each backend (cuDNN's RNNs and oneDNN's are never used)
_OPS = {"cuda": ("matmul", "conv"), "mkldnn": ("matmul", "conv")}


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` ("cpu" / "cuda"), on every torch the package
    supports (``torch.is_autocast_enabled(device_type)`` exists from torch 2.4)."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4: one flag per device type
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return bool(torch.is_autocast_enabled())


def _get(backend: str, op: str) -> str:
    """Effective per-backend value: the (backend, op)'s own, else inherited."""
    return torch._C._get_fp32_precision_getter(backend, op)


def _set(backend: str, op: str, value: str) -> None:
    torch._C._set_fp32_precision_setter(backend, op, value)


@contextlib.contextmanager
def _quiet_legacy() -> Iterator[None]:
    """torch 2.9 warns (UserWarning) that the legacy precision switches will be deprecated
    when they are used; the guard's own save / set / restore should not. torch 2.14 no longer
    warns and older torches never did (nothing is entered there); 2.10 - 2.13 are treated like
    2.9."""
    if not _PER_BACKEND or _VERSION >= (2, 14):
        yield
        return
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Please use the new API settings",
                                category=UserWarning)
        yield


def _own_all(backend: str) -> str:
    """The value ``backend``'s "all" holds itself ("none" when it inherits "generic"): read
    back, or (when it reads the same as "generic") probed by moving "generic" for a moment."""
    value, generic = _get(backend, "all"), _get("generic", "all")
    if value != ("none" if backend == "cuda" and generic == "bf16" else generic):
        return value  # not what inheriting gives (cuda reads a "generic" bf16 as none)
    probe = "tf32" if generic == "ieee" else "ieee"
    _set("generic", "all", probe)
    try:
        follows = _get(backend, "all") == probe
    finally:
        _set("generic", "all", generic)
    return "none" if follows else value


def _pin_backend(backend: str, target: str, ops: Tuple[str, ...]) -> Optional[Undo]:
    """Make ``ops`` of ``backend`` run at ``target`` ("ieee" / "tf32"): through the backend's
    "all" (which the ops inherit unless set on their own: cuDNN's convolutions at torch's
    start-up, which an explicit value could not bring back), then the ops that do not follow
    it. Returns how to put everything back, None when nothing had to change."""
    ok = _FULL if target == "ieee" else (target,)
    if all(_get(backend, op) in ok for op in ops):
        return None
    own_all = _own_all(backend)
    _set(backend, "all", target)
    own = {op: _get(backend, op) for op in ops if _get(backend, op) not in ok}
    for op in own:  # set on their own: they keep it against "all"
        _set(backend, op, target)

    def undo() -> None:
        for op, value in own.items():
            _set(backend, op, value)
        _set(backend, "all", own_all)

    return undo


def _pin_legacy_matmul() -> Optional[Undo]:
    """``torch.get_float32_matmul_precision()`` to "highest" while the matmul values are already
    pinned (it cannot raise then): the legacy switch and ``torch.backends.cuda.matmul.allow_tf32``
    read back full precision inside too. Setting it rewrites both matmul values, so they are
    put back after it."""
    with _quiet_legacy():
        before = torch._C._get_float32_matmul_precision()
        if before == "highest":
            return None
        own = {b: _own_op(b, "matmul") for b in ("cuda", "mkldnn")}
        torch._C._set_float32_matmul_precision("highest")

    def undo() -> None:
        with _quiet_legacy():
            torch._C._set_float32_matmul_precision(before)
        for b, value in own.items():
            _set(b, "matmul", value)

    return undo


def _own_op(backend: str, op: str) -> str:
    """The value (``backend``, ``op``) holds itself, "none" when it inherits "all" (probed by
    moving "all" for a moment)."""
    value, own_all = _get(backend, op), _own_all(backend)
    probe = "tf32" if value == "ieee" else "ieee"
    _set(backend, "all", probe)
    try:
        follows = _get(backend, op) == probe
    finally:
        _set(backend, "all", own_all)
    return "none" if follows else value


def _pin_legacy_api(cudnn_tf32: bool, matmul: bool) -> List[Undo]:
    """torch < 2.9: the legacy switches alone (cuDNN's TF32 to ``cudnn_tf32``; with ``matmul``
    the float32 matmul precision to "highest"). A state that torch 2.7 / 2.8 refuse to read
    back (legacy and per-backend switches mixed) is left as it is."""
    undo: List[Undo] = []
    try:
        cudnn_before = bool(torch._C._get_cudnn_allow_tf32())
        mm_before = torch.get_float32_matmul_precision() if matmul else "highest"
    except RuntimeError:
        return undo
    if cudnn_before != cudnn_tf32:
        torch._C._set_cudnn_allow_tf32(cudnn_tf32)
        undo.append(lambda: torch._C._set_cudnn_allow_tf32(cudnn_before))
    if mm_before != "highest":
        torch.set_float32_matmul_precision("highest")
        undo.append(lambda: torch.set_float32_matmul_precision(mm_before))
    return undo


@contextlib.contextmanager
def _pinned(pins: List[Callable[[], Any]]) -> Iterator[None]:
    """Run ``pins`` in order (each returns an undo, a list of them, or None), undo in reverse
    on the way out, also when a later pin or the block raises."""
    undo: List[Undo] = []
    try:
        for pin in pins:
            got = pin()
            undo.extend(got if isinstance(got, list) else [got] if got is not None else [])
        yield
    finally:
        for step in reversed(undo):
            step()


def _pin_full_float32() -> contextlib.AbstractContextManager:
    """The pinning :func:`full_float32` enters once for all its open blocks."""
    if not _PER_BACKEND:
        return _pinned([lambda: _pin_legacy_api(False, True)])
    # the legacy matmul switch is lowered only together with a matmul value (a caller who then
    # set the values back by hand has full-precision kernels already): not read otherwise
    lowered = any(_get(b, "matmul") not in _FULL for b in ("cuda", "mkldnn"))
    return _pinned([lambda: _pin_backend("cuda", "ieee", _OPS["cuda"]),
                    lambda: _pin_backend("mkldnn", "ieee", _OPS["mkldnn"]),
                    _pin_legacy_matmul if lowered else (lambda: None)])


_SHARED_LOCK = threading.Lock()
#: the open :func:`full_float32` blocks of every thread, and the pinning they share
_SHARED: Dict[str, Any] = {"depth": 0, "stack": None}


@contextlib.contextmanager
def full_float32() -> Iterator[None]:
    """Float32 matmuls and convolutions in full float32 inside the block (cuBLAS, cuDNN,
    oneDNN; TF32 / bfloat16 off), the caller's settings restored after it. The settings are
    process-wide, so the open blocks of every thread share one pinning under a lock: the first
    block to open records the caller's settings and pins them, the last one to close puts them
    back (overlapping calls in several threads never take a pinned value for the caller's)."""
    with _SHARED_LOCK:
        if _SHARED["depth"] == 0:
            stack = contextlib.ExitStack()
            stack.enter_context(_pin_full_float32())
            _SHARED["stack"] = stack
        _SHARED["depth"] += 1
    try:
        yield
    finally:
        with _SHARED_LOCK:
            _SHARED["depth"] -= 1
            if _SHARED["depth"] == 0:
                stack, _SHARED["stack"] = _SHARED["stack"], None
                stack.close()


def cudnn_conv_tf32(allowed: bool) -> contextlib.AbstractContextManager:
    """cuDNN's float32 convolutions in TF32 (``allowed``) or full float32 inside the block, the
    caller's settings restored after it (nothing changed when they already match)."""
    if not _PER_BACKEND:
        return _pinned([lambda: _pin_legacy_api(allowed, False)])
    return _pinned([lambda: _pin_backend("cuda", "tf32" if allowed else "ieee", ("conv",))])


def scoring_precision(fn: F) -> F:
    """``fn`` run in :func:`full_float32` and with ``torch.autocast(device_type,
    enabled=False)`` for each device type of :data:`AUTOCAST_DEVICES` whose autocast is on
    (nothing entered when none is). Cost: microseconds (flag reads; at torch's defaults, where
    cuDNN's convolutions are TF32, one switch set and restored)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with full_float32():
            on = [d for d in AUTOCAST_DEVICES if autocast_enabled(d)]
            if not on:
                return fn(*args, **kwargs)
            with contextlib.ExitStack() as stack:
                for device_type in on:
                    stack.enter_context(torch.autocast(device_type, enabled=False))
                return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


#: the decorator's historical name (it only turned autocast off then); imported package-wide
autocast_off = scoring_precision

#: ``torch.compiler.disable(_call)``, made on the first call once Dynamo is loaded
#: (:func:`eager_entry`)
_TRAMPOLINE: List[Callable[..., Any]] = []


def _call(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    return fn(*args, **kwargs)


def _run_eagerly(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)`` with Dynamo off for it and everything it calls (a graph break in
    the caller's compiled function)."""
    if not _TRAMPOLINE:
        _TRAMPOLINE.append(torch.compiler.disable(_call, recursive=True))
    return _TRAMPOLINE[0](fn, *args, **kwargs)


def eager_entry(fn: F) -> F:
    """``fn`` run eagerly when called inside ``torch.compile``. Name, signature and docstring
    are ``fn``'s (``functools.wraps``).

    The public entry points that score (``score_clip`` / ``score_clips``,
    ``geometric_reward``, the functional video metrics and ``adadfrc``, the Metric classes'
    ``update``) read values on the host, call OpenCV and NumPy and branch on data: compiling
    into them gains nothing, and Dynamo's tracing failures inside them were caught by the
    per-clip isolation as clip errors (a compiled training step got a batch of neutral
    rewards, status "error"). Each is a graph break of the caller's compiled function, run
    with ``torch.compiler.disable``: bitwise the values of an eager call.

    ``torch._dynamo`` is not imported here (it takes seconds, and ``import geocon_torch``
    would pay them in every process). Without it nothing compiles: a plain call. Once it is
    loaded, every call goes through one disabled trampoline (microseconds), also where this
    wrapper itself runs outside Dynamo's trace (e.g. a frame Dynamo skipped): only the
    trampoline keeps Dynamo out of the frames ``fn`` calls.
    """
    @functools.wraps(fn)
    def entry(*args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling() or "torch._dynamo" in sys.modules:
            return _run_eagerly(fn, *args, **kwargs)
        return fn(*args, **kwargs)

    return entry  # type: ignore[return-value]


def compile_failure(exc: BaseException) -> bool:
    """Whether ``exc`` is ``torch.compile``'s, not a clip's: a ``torch._dynamo`` exception
    (e.g. ``TorchRuntimeError``, ``Unsupported``), or any exception while Dynamo traces. The
    catch-all per-clip handlers re-raise it, as they re-raise configuration errors."""
    if torch.compiler.is_compiling():
        return True
    dynamo_exc = sys.modules.get("torch._dynamo.exc")  # not loaded: nothing has compiled
    return dynamo_exc is not None and isinstance(exc, dynamo_exc.TorchDynamoException)


__all__ = ["AUTOCAST_DEVICES", "autocast_enabled", "autocast_off", "compile_failure",
           "cudnn_conv_tf32", "eager_entry", "full_float32", "scoring_precision"]
