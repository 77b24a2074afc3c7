"""The feature-extractor interface, the backend registry and padded-keypoint helpers.

Every backend turns a batch of grayscale frames ``(T, 1, H, W)`` float in [0, 1] into padded
:class:`~geocon_torch.types.Keypoints`: ``xy (T, N, 2)`` pixels (x, y) with pixel centres at
integers, ``descriptors (T, N, D)``, ``scores (T, N)`` (detector response, higher is stronger) and
``mask (T, N)``. Valid keypoints come first in each row; padded slots hold zeros.

Frames whose shorter side is below :data:`MIN_SIDE` (16 px) hold no keypoint: every registered
extractor class returns empty Keypoints for them (:func:`register_extractor`), without running.
"""
from __future__ import annotations

import functools
import inspect
import sys
from typing import (Any, Callable, Dict, List, Optional, Protocol, Sequence, Tuple, Union,
                    runtime_checkable)

import torch

from .._checks import check_device, check_integer
from .._tensor_utils import mask_at_pixels, to_device
from ..errors import InputError, ShapeError
from ..io.reader import check_unit_range
from ..types import Keypoints

DeviceLike = Union[str, torch.device, None]

#: frames whose shorter side is below this (px) hold no keypoint: every extractor returns empty
#: Keypoints ``(T, 0, 2)`` with its descriptor width and ``lk_tracks`` / ``shi_tomasi`` no
#: tracks / corners (no detector window or network patch fits; XFeat and ALIKED invented
#: keypoints there). The pipeline never detects on such frames: it skips the feature scales
#: below the same size (``features.multiscale.MIN_SIDE``)
MIN_SIDE = 16


def too_small(gray: torch.Tensor) -> bool:
    """Whether the frames ``gray (..., H, W)`` have a side below :data:`MIN_SIDE` px (a shape
    check: no host sync)."""
    return min(int(gray.shape[-2]), int(gray.shape[-1])) < MIN_SIDE


@runtime_checkable
class FeatureExtractor(Protocol):
    """What every backend provides.

    Attributes:
        name: registry name of the backend (recorded in results as ``backends.features``).
        max_keypoints: upper bound on keypoints per frame.
        device: where the work runs (inputs are moved there).
    """

    name: str
    max_keypoints: int
    device: torch.device

    def extract(self, gray: torch.Tensor, mask: Optional[torch.Tensor] = None) -> Keypoints:
        """Keypoints of every frame.

        Args:
            gray: (T, 1, H, W) float in [0, 1].
            mask: (H, W) bool content mask (False on letterbox bars) or None; keypoints whose
                nearest pixel is False are dropped.
        Returns:
            Keypoints with N <= max_keypoints, on ``gray.device``.
        """
        ...


_REGISTRY: Dict[str, Callable[..., FeatureExtractor]] = {}


def register_extractor(name: str) -> Callable:
    """Class decorator adding a backend to :func:`get_extractor` under ``name``. A class with
    ``extract`` and ``descriptor_dim`` gets the small-frame rule (:data:`MIN_SIDE`): frames
    below it are checked (:func:`check_gray`) and give empty Keypoints without running."""

    def wrap(factory: Callable[..., FeatureExtractor]) -> Callable[..., FeatureExtractor]:
        extract = getattr(factory, "extract", None)
        if (isinstance(factory, type) and callable(extract) and hasattr(factory, "descriptor_dim")
                and not getattr(extract, "small_frames_empty", False)):
            setattr(factory, "extract", _small_frames_empty(extract))
        _REGISTRY[name] = factory
        return factory

    return wrap


def _small_frames_empty(extract: Callable[..., Keypoints]) -> Callable[..., Keypoints]:
    """``extract`` that returns empty Keypoints (``T`` rows, N = 0, the class's
    ``descriptor_dim``, in :func:`full_precision` of the frames' dtype, no ``extra``) for frames
    below :data:`MIN_SIDE`, after the usual shape checks; other frames go to ``extract``. A
    call from outside the package (:func:`called_from_outside`) has its values tested too
    (:func:`check_gray`: in [0, 1]); the package's own calls do not pay that host read."""

    @functools.wraps(extract)
    def guarded(self: Any, gray: torch.Tensor, mask: Optional[torch.Tensor] = None) -> Keypoints:
        if isinstance(gray, torch.Tensor) and gray.ndim == 4:
            small = too_small(gray)
            if small or called_from_outside(1):
                # a bad shape / dtype / mask is still a ShapeError; a user's call (not the
                # package's: ``extract``'s own check then sees this wrapper) tests the values
                check_gray(gray, mask)
            if small:
                return empty_keypoints(int(gray.shape[0]), int(self.descriptor_dim),
                                       gray.device, full_precision(gray).dtype)
        return extract(self, gray, mask)

    setattr(guarded, "small_frames_empty", True)
    return guarded


def available_extractors() -> List[str]:
    """Registered backend names (plus "auto")."""
    return ["auto"] + sorted(_REGISTRY)


def resolve_device(device: DeviceLike, *, available: bool = True) -> torch.device:
    """``torch.device`` of ``device``; None (or "auto") means CUDA when available, else CPU.
    ``available=False``: a device only named (to pick what would run there), not used.

    Raises:
        InputError: ``device`` is no torch device ("gpu"), or (``available``) one this
            machine lacks ("cuda" without a GPU: :func:`~geocon_torch._checks.check_device`).
    """
    device = check_device(device, available=available)
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


#: what "auto" picks: torch-sift on CUDA (batched, a fixed op count and two host syncs per call;
#: chosen by benchmarks/learned_accuracy.py, see benchmarks/README.md), opencv-sift on the CPU
AUTO_BACKENDS = {"cuda": "torch-sift", "cpu": "opencv-sift"}


def resolve_backend(name: str, device: DeviceLike = None) -> str:
    """The backend ``name`` stands for: "auto" is torch-sift on CUDA and opencv-sift on the CPU
    (``device`` None: CUDA when available); any other name is itself."""
    if name != "auto":
        return name
    named = resolve_device(device, available=False)  # "auto" of a device absent here is named
    return AUTO_BACKENDS["cuda" if named.type == "cuda" else "cpu"]


def get_extractor(name: str = "auto", *, max_keypoints: int = 2000, device: DeviceLike = None,
                  checkpoint: Optional[str] = None, **options) -> FeatureExtractor:
    """Build a feature extractor.

    Args:
        name: "auto" (torch-sift on CUDA, opencv-sift on CPU), "torch-sift", "kornia-sift",
            "opencv-sift", "xfeat", "aliked" or "disk" (learned; needs ``checkpoint``).
        max_keypoints: keypoints kept per frame (strongest first), an integer >= 1.
        device: where the backend runs (None: CUDA if available). opencv-sift always computes on
            the CPU and returns tensors on the input's device.
        checkpoint: local weights file for learned backends (never downloaded).
        options: backend-specific keyword arguments (e.g. ``chunk_frames`` for kornia-sift).
    Returns:
        FeatureExtractor whose ``extract(gray, mask)`` turns (T, 1, H, W) float frames in
        [0, 1] into :class:`~geocon_torch.types.Keypoints` (N <= ``max_keypoints`` per frame).
    Raises:
        GeoConError: unknown name; CheckpointError: learned backend without a usable checkpoint.
        ArgumentTypeError, InputError: ``max_keypoints`` not an integer >= 1.
        InputError: ``device`` is no torch device or one this machine lacks ("gpu", "cuda"
            without a GPU: :func:`resolve_device`).
    """
    # the backends register themselves on import; the package __init__ imports every one of
    # them, and it runs before anything of this module can be called
    dev = resolve_device(device)
    name = resolve_backend(name, dev)
    if name not in _REGISTRY:
        raise InputError(f"unknown feature backend {name!r}; available: {available_extractors()}"
                          " (lk-tracks, loftr and lightglue produce correspondences directly: use"
                          " lk_tracks / get_matcher / extract_correspondences)")
    max_keypoints = check_integer(max_keypoints, "max_keypoints", 1)
    kwargs = dict(options)
    if checkpoint is not None:
        if "checkpoint" not in inspect.signature(_REGISTRY[name]).parameters:
            raise InputError(f"features.checkpoint is set ({checkpoint}) but the backend {name!r} "
                             f"loads no checkpoint (its weights, if any, ship with it): unset it "
                             f"or pick a learned backend that takes one")
        kwargs["checkpoint"] = checkpoint
    return _REGISTRY[name](max_keypoints=max_keypoints, device=dev, **kwargs)


#: how far outside [0, 1] gray frames may reach: a bicubic resample or warp of [0, 1] frames
#: overshoots at sharp edges (a cubic warp of a photo: [-0.03, 1.07]), which every extractor
#: takes; 0..255 floats (max >> 1.25) and [-1, 1] frames (min near -1) are far beyond it
GRAY_OVERSHOOT = 0.25


def check_gray(gray: torch.Tensor, mask: Optional[torch.Tensor] = None) -> Optional[torch.Tensor]:
    """Validate a (T, 1, H, W) float frame batch in [0, 1] and an optional (H, W) mask; return
    the mask as bool on ``gray.device`` (None stays None).

    The values are tested (:func:`~geocon_torch.io.reader.check_unit_range`: 0..255 floats
    and [-1, 1] frames are refused with a hint, a resampling overshoot of up to
    :data:`GRAY_OVERSHOOT` passes) only when the function that called ``check_gray`` was
    called from outside the package (:func:`called_from_outside`): a user's ``extract`` /
    ``lk_tracks`` call pays that host read, the package's own calls, whose frames are in
    [0, 1] by construction (uint8 / 255), do not (no host sync on the scoring path).

    Raises:
        ShapeError: not a (T, 1, H, W) float tensor, values beyond [0, 1] or NaN (a public
            call), or a mask of another shape.
    """
    if not isinstance(gray, torch.Tensor) or gray.ndim != 4 or gray.shape[1] != 1:
        got = tuple(gray.shape) if isinstance(gray, torch.Tensor) else type(gray).__name__
        raise ShapeError(f"gray frames must have shape (T, 1, H, W), got {got}")
    if not gray.is_floating_point():
        raise ShapeError(f"gray frames must be float in [0, 1], got {gray.dtype}")
    if gray.numel() and called_from_outside(2):
        check_unit_range(gray, "gray frames", ShapeError, GRAY_OVERSHOOT)
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or tuple(mask.shape) != tuple(gray.shape[-2:]):
        got = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ShapeError(f"content mask must have shape {tuple(gray.shape[-2:])}, got {got}")
    return mask.to(device=gray.device, dtype=torch.bool)


#: the package's name: frames of its modules are the package's own calls
_PACKAGE = __name__.split(".")[0]
#: modules whose frames only pass a call on (``torch.no_grad()`` and other decorators):
#: :func:`called_from_outside` looks through them to the code that made the call
_PASS_THROUGH = ("torch", "contextlib", "functools")


def _in_modules(frame: Any, tops: Tuple[str, ...]) -> bool:
    """Whether ``frame`` runs code of a module named ``top`` or ``top.*`` for a top of ``tops``."""
    name = str(frame.f_globals.get("__name__", ""))
    return any(name == top or name.startswith(top + ".") for top in tops)


def called_from_outside(depth: int) -> bool:
    """Whether the function ``depth`` frames above the caller of this one (1: the caller's
    caller) belongs to no module of the package: a user's call (a script, a test, a
    notebook), not one of the package's own. Frames of :data:`_PASS_THROUGH` modules (the
    wrapper of a ``@torch.no_grad()`` method) are looked through. A frame-name lookup, no
    tensor work."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:  # the stack is shallower: called from the top level
        return True
    while frame is not None and _in_modules(frame, _PASS_THROUGH):
        frame = frame.f_back
    return frame is None or not _in_modules(frame, (_PACKAGE,))


def full_precision(gray: torch.Tensor) -> torch.Tensor:
    """``gray`` in float32 when it is float16 / bfloat16, else as is: keypoint coordinates in
    half precision are off by up to 0.5 px at x >= 512 (bfloat16: 8 mantissa bits), so every
    extractor and matcher works on and returns float32 or float64."""
    return gray.float() if gray.dtype in (torch.float16, torch.bfloat16) else gray


def inside_mask(xy: torch.Tensor, mask: Optional[torch.Tensor]) -> torch.Tensor:
    """(..., N) bool: the pixel nearest to each point ``xy (..., N, 2)`` is inside the image and
    True in ``mask (H, W)`` (all True when mask is None)."""
    if mask is None:
        return torch.ones(xy.shape[:-1], dtype=torch.bool, device=xy.device)
    return mask_at_pixels(mask, xy)


def compact_keypoints(kps: Keypoints, keep: Optional[torch.Tensor] = None,
                      max_keypoints: Optional[int] = None) -> Keypoints:
    """Restrict to ``kps.mask & keep``, keep the ``max_keypoints`` strongest per frame, move valid
    entries to the front (strongest first), zero the padding and trim N to the largest count.

    Args:
        kps: padded keypoints: xy (T, N, 2) px, descriptors (T, N, D), scores (T, N),
            mask (T, N) bool, extra (T, N, ...) tensors.
        keep: (T, N) bool, the entries to keep besides ``kps.mask``, or None (all).
        max_keypoints: cap per frame (the highest scores) or None (no cap).
    Returns:
        Keypoints of width N' <= N (the largest count kept in a frame, capped at
        ``max_keypoints``): every field gathered in the same order, the same dtypes and
        device; padding entries are 0 with mask False.
    """
    valid = kps.mask if keep is None else kps.mask & keep
    big = torch.finfo(kps.scores.dtype).max
    key = torch.where(valid, kps.scores, torch.full_like(kps.scores, -big))
    # stable sort: strongest first, ties keep their order; padding last
    order = torch.sort(key, dim=1, descending=True, stable=True).indices
    valid = valid.gather(1, order)
    counts = valid.sum(1)
    n = int(counts.max()) if counts.numel() else 0
    if max_keypoints is not None:
        n = min(n, max_keypoints)
    order, valid = order[:, :n], valid[:, :n]

    pad = ~valid
    index: Dict[tuple, Tuple[torch.Tensor, torch.Tensor]] = {(): (order, pad)}

    def take(t: torch.Tensor) -> torch.Tensor:  # (T, N, ...): the index and padding per shape
        tail = tuple(t.shape[2:])
        if tail not in index:
            ones = (1,) * len(tail)
            index[tail] = (order.reshape(order.shape + ones).expand(order.shape + tail),
                           pad.reshape(pad.shape + ones))
        idx, off = index[tail]
        return t.gather(1, idx).masked_fill(off, 0)

    return Keypoints(xy=take(kps.xy), descriptors=take(kps.descriptors), scores=take(kps.scores),
                     mask=valid, extra={k: take(v) for k, v in kps.extra.items()})


def pad_keypoints(xys: Sequence[torch.Tensor], descs: Sequence[torch.Tensor],
                  scores: Sequence[torch.Tensor], desc_dim: int, device: torch.device,
                  dtype: torch.dtype = torch.float32,
                  extras: Optional[Dict[str, Sequence[torch.Tensor]]] = None,
                  desc_dtype: Optional[torch.dtype] = None) -> Keypoints:
    """Stack per-frame results ((n_t, 2), (n_t, D), (n_t,)) into padded Keypoints (zeros where
    padded); descriptors in ``desc_dtype`` (default ``dtype``; e.g. uint8 for SIFT bytes).

    All frames at once: each field is concatenated, moved and cast once, then scattered to its
    (frame, slot) cells (no per-frame ops; the sizes are known on the host)."""
    t = len(xys)
    counts = [int(x.shape[0]) for x in xys]
    n, total = max(counts, default=0), sum(counts)
    cnt = torch.tensor(counts, dtype=torch.long)
    mk = to_device(torch.arange(n) < cnt[:, None], device)  # (t, n): slot k of frame i is filled
    frame = to_device(torch.repeat_interleave(torch.arange(t), cnt, output_size=total), device)
    slot = to_device(torch.arange(total) - torch.repeat_interleave(
        torch.cumsum(cnt, 0) - cnt, cnt, output_size=total), device)

    def padded(values: Sequence[torch.Tensor], tail: Tuple[int, ...], to: torch.dtype
               ) -> torch.Tensor:
        out = torch.zeros((t, n) + tail, dtype=to, device=device)
        if total:
            flat = [v if tuple(v.shape[1:]) == tail else v.reshape((-1,) + tail)
                    for v in values]  # e.g. an empty frame given as (0,)
            out[frame, slot] = to_device(torch.cat(flat), device, to)
        return out

    ex = {}
    for name, values in (extras or {}).items():
        tail = tuple(values[0].shape[1:]) if len(values) else ()
        ex[name] = padded(values, tail, dtype)
    return Keypoints(xy=padded(xys, (2,), dtype),
                     descriptors=padded(descs, (desc_dim,), desc_dtype or dtype),
                     scores=padded(scores, (), dtype), mask=mk, extra=ex)


def empty_keypoints(t: int, desc_dim: int, device: torch.device,
                    dtype: torch.dtype = torch.float32) -> Keypoints:
    """Keypoints of ``t`` frames with none valid (N = 0)."""
    return pad_keypoints([torch.zeros(0, 2)] * t, [torch.zeros(0, desc_dim)] * t,
                         [torch.zeros(0)] * t, desc_dim, device, dtype)
