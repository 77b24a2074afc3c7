"""``read_clip`` / ``read_clips``: any supported source -> :class:`~geocon_torch.types.Clip` at
working resolution.

Sources: a video file (mp4, webm, avi, mkv, mov, gif, anything PyAV decodes), a folder of images,
one image file, or an in-memory tensor (T, C, H, W) / (B, T, C, H, W), C in {1, 3}, uint8 or
float in [0, 1].

Tensors take **one path** in the whole package: :func:`check_clip_tensor` (the rule) and
:func:`clips_from_tensor` / :func:`clip_from_tensor` (the conversion), used by ``read_clip``,
``score_clip``, the epipolar sections and every Metric class, so one batch is accepted or
rejected the same way everywhere. A malformed tensor raises
:class:`~geocon_torch.errors.ClipTensorError` (a VideoReadError and a ShapeError); nothing is
clamped silently. Files are decoded frame by frame; an unselected frame is never converted to RGB
and a kept frame is resized to the working resolution at once, so memory holds the working-res
clip plus one source frame (two: the previous one is kept for the motion statistic).

A clip read from a tensor at a resampled working size keeps a reference to that tensor (the
caller's, or its row of a batch: no copy) in ``meta["source_tensor"]`` (:class:`TensorSource`),
as a file's clip keeps ``meta["path"]``: :func:`source_of` is what the gate's view reads again
(:mod:`geocon_torch.gate.view`). It is never pickled, copied or compared by value.

Every reader records ``meta["motion"]``, how much the frames kept move at native resolution
(:mod:`geocon_torch.io.sampling`: ``max_mad``, ``pairs``, ``frozen``), measured while the frames
are decoded (files, eager or streamed: the same numbers) or on the tensor before it is resized,
in the one host copy that also reads the content fractions. A video file's ``meta["color"]``
(:func:`~geocon_torch.io.decode.frame_color`: pixel format, bit depth, transfer, primaries,
matrix, range) is read as SDR code values whatever it says; for a PQ or HLG transfer the frozen
threshold is scaled to the transfer's compressed code values
(:func:`~geocon_torch.io.sampling.frozen_max_mad`).
"""
from __future__ import annotations

import math
import numbers
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .._checks import check_integer
from .._tensor_utils import to_device
from ..errors import ArgumentTypeError, ClipTensorError, InputError, VideoReadError
from ..types import Clip
from .decode import (Decoded, TransparencyCount, check_file, decode_stable,
                     timestamp_gap_count)
from .images import IMAGE_SUFFIXES, animated_frames, frame_numbers, list_images, read_image_alpha
from .framestore import ImageFrames, VideoFrames
from .lens import LensLike, as_lens, lens_record, undistort_frames, undistort_mask
from .letterbox import ContentMaskAccumulator, detect_content_mask
from .resize import RESIZE_CHUNK_VALUES, WorkingSize, resize_frames, resize_image, working_size
from .sampling import (FrameMotion, FrameSelection, check_indices_in_range, frame_selection,
                       consecutive_pair_sums, frozen_max_mad, held_flags, held_positions,
                       is_still, max_pair_sums, motion_record, with_held)

#: Frame rate assumed for sources that carry none (tensors, image folders) when ``fps`` is not
#: given: 24 fps, the rate of the paper's generated clips. ``meta["fps_source"]`` says "default".
DEFAULT_FPS = 24.0
_TENSOR_DTYPES = (torch.uint8, torch.float16, torch.bfloat16, torch.float32, torch.float64)
_RANGE_TOL = 1e-6
#: frames per letterbox-accumulator update while streaming (bounds the float copy)
_MASK_CHUNK = 16
#: the likely mistake behind a uint8 clip tensor whose values are all 0 or 1 (and not all 0):
#: [0, 1] floats cast with ``.to(torch.uint8)``, which reads as an almost black clip with too
#: little texture. The reader warns with it and sets ``meta["uint8_unit_values"]``; the
#: background's texture reason ends with it (:func:`cast_hint`).
UINT8_CAST_HINT = ("uint8 values are all 0 or 1: were [0, 1] floats cast without x 255? pass "
                   "(x * 255).round().to(torch.uint8) or the float tensor itself")

Source = Union[str, os.PathLike, torch.Tensor]


def read_clip(source: Source, *, long_side: Optional[int] = 1024, stride: int = 1,
              max_frames: Optional[int] = None, indices: Optional[Iterable[int]] = None,
              device: Union[None, str, torch.device] = None, name: Optional[str] = None,
              letterbox_threshold: float = 16.0 / 255.0, letterbox_min_fraction: float = 0.02,
              fps: Optional[float] = None, upscale: bool = True, stream: bool = False,
              motion_every: Optional[int] = None, stream_limit: Optional[int] = None,
              lens: LensLike = None) -> Clip:
    """Read one clip at working resolution.

    Args:
        source: path to a video / gif / image / folder of images, or a (T, C, H, W) tensor
            (C in {1, 3}; uint8, or float in [0, 1]).
        long_side: working long side in px (aspect kept, sizes rounded to even); None keeps the
            native size (an odd side loses its last row / column). Every pixel result downstream
            is in this working resolution; ``Clip.scale`` = working / source long side and
            ``meta["scale_xy"]`` the exact (sx, sy).
        stride, max_frames: keep source frames 0, stride, 2 * stride, ... (at most
            ``max_frames`` of them, the first ones; decoding stops there).
        indices: explicit source frame indices instead (any order, repeats allowed); an index
            past the end raises VideoReadError.
        device: where ``frames`` and ``content_mask`` live (default: CPU for files, the tensor's
            device for tensors; tensors are resized on that device).
        name: clip identifier (default: file stem, folder name, or "tensor").
        letterbox_threshold, letterbox_min_fraction: see :func:`detect_content_mask`.
        fps: frame rate for sources that carry none (tensors, image folders); default 24.
        upscale: when False, sources smaller than ``long_side`` are not enlarged.
        stream: video files and image folders: ``frames`` is a
            :class:`~geocon_torch.io.framestore.VideoFrames` (a folder's:
            :class:`~geocon_torch.io.framestore.ImageFrames`), read on demand and bit-identical
            to the eager tensor, instead of a tensor, so memory does not grow with the clip's
            length; the file (the folder's images) is decoded once here (metadata, letterbox
            mask, motion) and again by each stage that reads frames. One image file is one
            frame: always a tensor.
        stream_limit: with ``stream`` False, the most frames of a video file (or animated
            image) held in memory: a file that turns out to keep more (its container
            under-announced its frames) is read streamed instead, as with ``stream=True``
            (bit-identical frames; the eager decode is dropped once it holds this many).
            None: no limit. :func:`~geocon_torch.pipeline.load_clip` passes
            ``io.stream_min_frames``.
        motion_every: also measure the motion of source frames 0, k, 2k, ... of the whole
            source for a stride without ``max_frames``, else up to the last frame kept
            (``meta["motion"]["sampled"]``; the frames Epipolar-DPO reads, k = 15); None: only
            the frames kept (``meta["motion"]``, always recorded).
        lens: the camera's lens (``io.lens``: a :class:`~geocon_torch.config.LensConfig`, a
            mapping of its keys or a :class:`~geocon_torch.io.lens.Lens`): the working frames
            are undistorted (:mod:`geocon_torch.io.lens`), the content mask found on the
            distorted frames is mapped through the same map (black corners left out) and
            ``meta["lens"]`` records it. None, or all coefficients 0: frames as decoded.

    Example:
        >>> import torch
        >>> from geocon_torch.io import read_clip
        >>> clip = read_clip(torch.rand(5, 3, 60, 80), long_side=40, stride=2)
        >>> tuple(clip.frames.shape), clip.frame_indices.tolist(), clip.fps
        ((3, 3, 30, 40), [0, 2, 4], 12.0)

    Returns:
        Clip with ``frames`` (T, 3, h, w) uint8 RGB, ``fps`` = source fps / stride,
        ``content_mask`` (h, w) bool, ``frame_indices`` (T,) source indices, ``source_size``
        (H, W), ``scale`` and ``meta`` (path, codec, source_fps, container_frames,
        decoded_frames, decode_complete, num_source_frames, truncated, motion, ...; for an
        unusual container also preroll_frames, corrupt_packets, truncation,
        container_count_mismatch, length_known: :meth:`~.decode.Decoded.container_meta`).
        T = 1 is valid.

    Raises:
        VideoReadError: missing path, zero-byte or non-video file, a file truncated before its
            first frame, 0 frames, images of different sizes, out-of-range indices, bad sampling
            arguments; ClipTensorError (a VideoReadError) for a bad tensor shape / dtype /
            value range. A file cut mid-way returns the
            frames that decode, with ``meta["truncated"] = True``. ConfigError: a bad
            ``lens`` (before anything is decoded), or one stated for another aspect ratio.
    """
    lens = as_lens(lens)
    if isinstance(source, torch.Tensor):
        if source.ndim == 5:
            raise ClipTensorError(f"read_clip takes one clip (T, C, H, W); got a batch "
                                  f"{tuple(source.shape)}: use read_clips")
        return clip_from_tensor(source, name=name or "tensor", long_side=long_side,
                                stride=stride, max_frames=max_frames, indices=indices,
                                device=device, fps=fps, letterbox_threshold=letterbox_threshold,
                                letterbox_min_fraction=letterbox_min_fraction, upscale=upscale,
                                motion_every=motion_every, lens=lens)
    if isinstance(source, (str, os.PathLike)):
        sel = frame_selection(stride, max_frames, indices)
        opts = dict(long_side=long_side, upscale=upscale, thr=letterbox_threshold,
                    frac=letterbox_min_fraction, stream=bool(stream), lens=lens,
                    motion_every=_check_every(motion_every),
                    motion_whole=sel.indices is None and sel.max_frames is None,
                    stream_limit=None if stream_limit is None else check_integer(
                        stream_limit, "stream_limit", 0))
        return _file_clip(Path(source), sel, device, name, fps, opts)
    raise VideoReadError(f"cannot read a {type(source).__name__}: give a file / folder path or a "
                         f"(T, C, H, W) tensor")


def read_clips(source: Union[Source, Sequence[Source]], **kwargs: Any) -> List[Clip]:
    """Read several clips: a (B, T, C, H, W) tensor (resized in one batched call on its
    device), a list of paths / (T, C, H, W) tensors, or a single source (-> one-element list).

    Keyword arguments are those of :func:`read_clip`; with ``name`` the clips are named
    ``name[b]``. Raises VideoReadError on the first unreadable source.
    """
    name = kwargs.pop("name", None)
    if isinstance(source, torch.Tensor):
        if source.ndim == 4:
            return [read_clip(source, name=name, **kwargs)]
        unknown = sorted(set(kwargs) - set(_TENSOR_OPTIONS))
        if unknown:
            raise ArgumentTypeError(f"read_clips got unexpected arguments {unknown}")
        return clips_from_tensor(source, name=name or "tensor", **{"long_side": 1024, **kwargs})
    if isinstance(source, (str, os.PathLike)):
        return [read_clip(source, name=name, **kwargs)]
    if isinstance(source, (list, tuple)):
        return [read_clip(s, name=None if name is None else f"{name}[{b}]", **kwargs)
                for b, s in enumerate(source)]
    raise VideoReadError(f"cannot read a {type(source).__name__}: give a path, a tensor or a list")


# ----------------------------------------------------------------------------------- files

def _file_clip(path: Path, sel: FrameSelection, device, name: Optional[str],
               fps: Optional[float], opts: Dict[str, Any]) -> Clip:
    check_file(path)
    if path.is_dir() and opts.get("stream"):
        return _streamed_images(path, sel, device, name, fps, opts)
    if path.is_dir():
        images, idx, ws, meta = _read_images(list_images(path), sel, opts, path)
        meta["source"] = "images"
    elif path.suffix.lower() in IMAGE_SUFFIXES and animated_frames(path)[1] <= 1:
        images, idx, ws, meta = _read_images([path], sel, opts, path)
        meta["source"] = "image"
    elif opts.get("stream"):
        return _streamed_clip(path, sel, device, name, fps, opts)
    else:
        read = _read_video(path, sel, opts)
        if read is None:  # more frames than opts["stream_limit"]: the container under-counted
            return _streamed_clip(path, sel, device, name, fps, opts)
        images, idx, ws, meta = read
        meta["source"] = "video"
    meta["path"] = str(path)
    source_fps, fps_source = _pick_fps(meta.get("source_fps"), fps)
    meta.update(source_fps=source_fps, fps_source=fps_source)
    frames = _stack_chw(images)
    if device is not None:
        frames = frames.to(device)
    return _finish(frames, idx, ws, sel.fps(source_fps), name or path.stem, meta, opts)


class _MaskChunks:
    """The letterbox accumulator of a streamed read, fed (h, w, 3) uint8 working-size frames
    in chunks of :data:`_MASK_CHUNK` (bounds the float copy)."""

    def __init__(self, threshold: float) -> None:
        self.acc = ContentMaskAccumulator(threshold)
        self.buf: List[torch.Tensor] = []

    def sink(self, image: np.ndarray) -> None:  # chunks of frames into the mask accumulator
        self.buf.append(torch.from_numpy(image).permute(2, 0, 1))
        if len(self.buf) == _MASK_CHUNK:
            self.flush()

    def flush(self) -> None:
        """Feed the frames still buffered to the accumulator."""
        if self.buf:
            self.acc.update(torch.stack(self.buf))
            self.buf.clear()


class _VideoPass:
    """What one decode of a video file feeds (:func:`~geocon_torch.io.decode.decode_stable`
    starts a fresh one for a second decode): the working size, planned from the first frame, the
    motion statistic and, streaming, the letterbox accumulator fed in chunks of frames."""

    def __init__(self, opts: Dict[str, Any], stream: bool) -> None:
        self.opts = opts
        self.size: Optional[WorkingSize] = None
        self.motion = FrameMotion(opts["motion_every"], opts.get("motion_whole", False))
        self.chunks = _MaskChunks(opts["thr"]) if stream else None

    def start(self):
        """(plan, sink, motion) for :func:`~geocon_torch.io.decode.decode_selected`."""
        return self.plan, (self.chunks.sink if self.chunks is not None else None), self.motion

    def plan(self, h: int, w: int):
        """The per-frame resize to the working size of an (h, w) source."""
        self.size = working_size(h, w, self.opts["long_side"], self.opts["upscale"])
        size = self.size
        return lambda rgb: resize_image(rgb, size)


def _decode_video(path: Path, sel: FrameSelection, opts: Dict[str, Any], stream: bool
                  ) -> Tuple[Decoded, _VideoPass, Dict[str, Any]]:
    """(Decoded, the pass that fed it, meta) of a video file: a damaged stream is decoded twice
    (:func:`~geocon_torch.io.decode.decode_stable`), the second pass with fresh consumers. An
    eager decode holds at most ``opts["stream_limit"]`` frames (``Decoded.overflowed``)."""
    passes: List[_VideoPass] = []

    def start():
        passes.append(_VideoPass(opts, stream))
        return passes[-1].start()

    dec = decode_stable(path, sel, start, max_keep=None if stream else opts.get("stream_limit"))
    last = passes[-1]
    frozen_at = frozen_max_mad(dec.color.get("transfer"))  # PQ / HLG: compressed code values
    motion = last.motion.record(frozen_at, sel.indices, held=True)  # held: in clip positions
    return dec, last, dict(dec.metadata(path), motion=motion)


def _read_video(path: Path, sel: FrameSelection, opts: Dict[str, Any]):
    """(list of (h, w, 3) uint8 frames in clip order, indices, working size, meta) of a video
    file read eagerly; None when it would hold more than ``opts["stream_limit"]`` frames."""
    dec, vp, meta = _decode_video(path, sel, opts, stream=False)
    if dec.overflowed:
        return None
    if sel.indices is None:
        return dec.images, dec.indices, vp.size, meta
    check_indices_in_range(sel.indices, dec.decoded, path, dec.expected_frames)
    pos = {src: k for k, src in enumerate(dec.indices)}
    return [dec.images[pos[i]] for i in sel.indices], list(sel.indices), vp.size, meta


def _streamed_clip(path: Path, sel: FrameSelection, device, name: Optional[str],
                   fps: Optional[float], opts: Dict[str, Any]) -> Clip:
    """A video file as a Clip whose ``frames`` are a :class:`VideoFrames` store: one decoding
    pass now (metadata, and the letterbox mask from running maxima), frames on demand later,
    decoded on the thread count of that pass (``Decoded.threads``)."""
    dec, vp, meta = _decode_video(path, sel, opts, stream=True)
    idx = list(dec.indices)
    if sel.indices is not None:
        check_indices_in_range(sel.indices, dec.decoded, path, dec.expected_frames)
        idx = list(sel.indices)
    meta["source"] = "video"
    frames = VideoFrames(path, idx, vp.size, device, threads=dec.threads, lens=opts["lens"])
    return _streamed_finish(frames, vp.chunks, sel, path, name, fps, meta, opts)


def _streamed_images(path: Path, sel: FrameSelection, device, name: Optional[str],
                     fps: Optional[float], opts: Dict[str, Any]) -> Clip:
    """A folder of images as a Clip whose ``frames`` are an :class:`ImageFrames` store: every
    selected image read once now (:func:`_scan_images`: sizes, motion, the letterbox mask from
    running maxima), each read again on demand later; meta, mask and frames equal the eager
    read's."""
    files = list_images(path)
    chunks = _MaskChunks(opts["thr"])
    idx, ws, meta = _scan_images(files, sel, opts, path, lambda i, image: chunks.sink(image))
    meta["source"] = "images"
    frames = ImageFrames(path, files, idx, ws, device, lens=opts["lens"])
    return _streamed_finish(frames, chunks, sel, path, name, fps, meta, opts)


def _streamed_finish(frames: VideoFrames, chunks: _MaskChunks, sel: FrameSelection, path: Path,
                     name: Optional[str], fps: Optional[float], meta: Dict[str, Any],
                     opts: Dict[str, Any]) -> Clip:
    """The Clip of a streamed read: ``frames`` the store, the content mask that of the
    accumulated chunks (moved to the store's device), meta completed as the eager read's."""
    chunks.flush()
    meta["path"] = str(path)
    source_fps, fps_source = _pick_fps(meta.get("source_fps"), fps)
    meta.update(source_fps=source_fps, fps_source=fps_source)
    mask = chunks.acc.mask(opts["frac"]).to(frames.device)
    return _finish(frames, frames.source, frames.size, sel.fps(source_fps), name or path.stem,
                   meta, opts, mask=mask)


def _read_images(files: List[Path], sel: FrameSelection, opts: Dict[str, Any], where: Path):
    """The selected frames of image ``files`` (those of the folder / image file ``where``,
    which an out-of-range index error names): (list of (h, w, 3) uint8 in clip order, indices,
    working size, meta)."""
    cache: Dict[int, np.ndarray] = {}
    idx, ws, meta = _scan_images(files, sel, opts, where, cache.__setitem__)
    return [cache[i] for i in idx], idx, ws, meta


def _scan_images(files: List[Path], sel: FrameSelection, opts: Dict[str, Any], where: Path,
                 keep: Callable[[int, np.ndarray], None]
                 ) -> Tuple[List[int], WorkingSize, Dict[str, Any]]:
    """Read the selected image ``files`` once, in file order (also those only the sampled
    motion reads): sizes checked, motion measured at native size, and ``keep(i, image)`` called
    once per distinct selected file ``i`` with its (h, w, 3) uint8 working-size image. Returns
    (clip indices, working size, meta)."""
    idx = sel.resolve(len(files), where).tolist()
    ws: Optional[WorkingSize] = None
    whole = bool(opts.get("motion_whole"))  # a stride without a cap: sampled to the end
    motion, kept = FrameMotion(opts["motion_every"], whole), set(idx)
    transparency = TransparencyCount()
    sampled_end = len(files) if whole else max(idx) + 1
    for i in sorted(kept | {j for j in range(sampled_end) if motion.wants(j)}):
        rgb, partial = read_image_alpha(files[i])
        motion.add(i, rgb, kept=i in kept)
        if i not in kept:  # read for the sampled motion only
            continue
        transparency.add(rgb, partial)
        if ws is None:
            ws = working_size(rgb.shape[0], rgb.shape[1], opts["long_side"], opts["upscale"])
            first = files[i]
        elif rgb.shape[:2] != ws.source:
            raise VideoReadError(
                f"{files[i]}: image size {rgb.shape[1]}x{rgb.shape[0]} differs from "
                f"{ws.source[1]}x{ws.source[0]} of {first.name}; all frames must share one size")
        keep(i, resize_image(rgb, ws))
    # every file is a frame: those the stride / frame cap skip are not lost (a video decodes
    # them all and then subsamples); numbers missing from a numbered sequence are, as the
    # frames missing between a video's timestamps (the same rule: decode.timestamp_gap_count)
    numbers = frame_numbers(files)
    gaps, missing = timestamp_gap_count(numbers) if numbers else (0, 0)
    meta = {"codec": "images", "source_fps": None, "container_frames": len(files),
            "decoded_frames": len(files), "decode_complete": True,
            "num_source_frames": len(files), "truncated": False, "decode_errors": [],
            "timestamp_gaps": gaps, "timestamp_missing_frames": missing,
            "files": [files[i].name for i in idx[:1000]],
            "motion": motion.record(order=idx, held=True),
            **transparency.meta()}
    return idx, ws, meta


def _stack_chw(images: List[np.ndarray]) -> torch.Tensor:
    """List of (h, w, 3) uint8 -> (T, 3, h, w) uint8, freeing the list as it goes."""
    h, w = images[0].shape[:2]
    out = torch.empty((len(images), 3, h, w), dtype=torch.uint8)
    for k in range(len(images)):
        out[k] = torch.from_numpy(images[k]).permute(2, 0, 1)
        images[k] = None  # type: ignore[call-overload]
    return out


def _pick_fps(source_fps: Optional[float], given: Optional[float]) -> Tuple[float, str]:
    """(fps, where it came from): the container's, else the ``fps`` argument (checked by
    :func:`_check_fps` whenever given), else :data:`DEFAULT_FPS`."""
    if given is not None:
        _check_fps(given)
    if source_fps:
        return float(source_fps), "container"
    if given is not None:
        return float(given), "argument"
    return DEFAULT_FPS, "default"


def _check_every(every: Any) -> Optional[int]:
    """``motion_every`` as an int (None stays None); InputError unless an integer >= 1."""
    if every is None:
        return None
    if not isinstance(every, numbers.Integral) or isinstance(every, bool) or every < 1:
        raise InputError(f"motion_every must be None or an integer >= 1 (every k-th source "
                         f"frame, e.g. 15), got {every!r}")
    return int(every)


def _check_fps(fps: Any) -> None:
    """Raise InputError unless ``fps`` is a finite number > 0 (not a bool or a string)."""
    ok = isinstance(fps, numbers.Real) and not isinstance(fps, bool)
    if not (ok and math.isfinite(float(fps)) and float(fps) > 0):
        raise InputError(f"fps must be a finite number > 0 (frames per second), got {fps!r}")


# ---------------------------------------------------------------------------------- tensors

_TENSOR_OPTIONS = ("long_side", "stride", "max_frames", "indices", "device", "fps",
                   "letterbox_threshold", "letterbox_min_fraction", "upscale", "motion_every",
                   "lens")


class TensorSource:
    """The (T, C, H, W) tensor a Clip was read from (``Clip.meta["source_tensor"]``): a
    reference (detached, no copy), what :func:`source_of` gives the gate's view to read again.

    Not data of the clip: a copy of the clip shares it, pickling drops it (a clip sent to a
    DataLoader worker or saved has no source: its view reads its working frames, as a Clip
    built by hand), two compare equal when they refer to the same memory, and its repr shows
    no values.
    """

    __slots__ = ("tensor",)

    def __init__(self, tensor: Optional[torch.Tensor]) -> None:
        self.tensor = None if tensor is None else tensor.detach()

    def _key(self) -> Optional[tuple]:
        t = self.tensor
        if t is None:
            return None
        return (t.data_ptr(), tuple(t.shape), t.stride(), t.dtype, str(t.device))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TensorSource) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def __repr__(self) -> str:
        t = self.tensor
        return "TensorSource(None)" if t is None else (
            f"TensorSource({tuple(t.shape)}, {str(t.dtype).replace('torch.', '')}, {t.device})")

    def __reduce__(self) -> Tuple[type, Tuple[None]]:
        return TensorSource, (None,)

    def __copy__(self) -> "TensorSource":
        return self

    def __deepcopy__(self, memo: Dict[int, Any]) -> "TensorSource":
        return self


def source_of(clip: Clip) -> Union[None, str, torch.Tensor]:
    """What ``clip``'s frames can be read again from with :func:`read_clip` (its
    ``frame_indices`` index it): the path of the file or folder it was read from, the (T, C, H,
    W) tensor it was read from at a resampled working size (:class:`TensorSource`), else None
    (a tensor read at native pixels, a Clip built by hand, a pickled copy, a merged batch)."""
    meta = clip.meta if isinstance(clip.meta, dict) else {}
    if meta.get("path"):
        return str(meta["path"])
    ref = meta.get("source_tensor")
    return ref.tensor if isinstance(ref, TensorSource) else None


def check_clip_tensor(x: Any, *, batched: bool = False) -> None:
    """Raise :class:`~geocon_torch.errors.ClipTensorError` unless ``x`` is a valid clip tensor.

    The one rule for in-memory video in the package (``read_clip``, ``clip_from_tensor``,
    ``score_clip``, the epipolar sections and every Metric class): shape (T, C, H, W), or
    (B, T, C, H, W) with ``batched=True``; C in {1, 3}; T >= 1; H, W >= 2; dtype uint8 or a
    float dtype with every value finite and in [0, 1] (1e-6 tolerance). Nothing is clamped: a
    float batch in [-1, 1] or 0..255, NaN, int64, bool or channels-last is rejected with a hint
    (one message for a clip and for a batch of it: the layout hints name both permutes).
    """
    if not isinstance(x, torch.Tensor):
        raise ClipTensorError(f"a clip must be a torch.Tensor, got {type(x).__name__}")
    want = 5 if batched else 4
    shape = tuple(x.shape[1:]) if batched and x.ndim == 5 else tuple(x.shape)
    if x.ndim != want:
        layout = "(B, T, C, H, W)" if batched else "(T, C, H, W)"
        raise ClipTensorError(f"a clip {'batch' if batched else 'tensor'} must be {layout} with C"
                              f" in {{1, 3}}, got shape {tuple(x.shape)}")
    if shape[1] not in (1, 3):
        hint = ""
        if shape[-1] in (1, 3):
            hint = (" (looks channels-last: a (B, T, H, W, C) batch needs "
                    ".permute(0, 1, 4, 2, 3), a (T, H, W, C) clip .permute(0, 3, 1, 2))")
        elif shape[0] in (1, 3):  # a generator's (B, C, T, H, W) / (C, T, H, W)
            hint = (" (looks channels-first: a (B, C, T, H, W) batch needs "
                    ".permute(0, 2, 1, 3, 4), a (C, T, H, W) clip .permute(1, 0, 2, 3))")
        raise ClipTensorError(f"a clip tensor must be (T, C, H, W) with C in {{1, 3}}, got "
                              f"{shape}{hint}")
    if x.dtype not in _TENSOR_DTYPES:
        raise ClipTensorError(f"a clip tensor must be uint8, or float in [0, 1]; got {x.dtype}")
    if shape[0] == 0:
        raise ClipTensorError(f"the clip tensor has 0 frames (shape {shape})")
    if min(shape[2], shape[3]) < 2:  # what every reader needs (io.resize.working_size)
        raise ClipTensorError(f"frames of {shape[3]} x {shape[2]} px are too small (need at "
                              f"least 2 x 2; shape {shape})")
    if x.is_floating_point() and x.numel():
        check_unit_range(x)


def check_unit_range(x: torch.Tensor, what: str = "float clip tensors",
                     error: type = ClipTensorError, tolerance: float = _RANGE_TOL) -> None:
    """Raise ``error`` unless every value of the float tensor ``x`` is finite and in [0, 1]
    (up to ``tolerance`` outside), with a hint for the usual mistakes (0..255 floats,
    [-1, 1]); ``what`` names the input in the message. One ``aminmax`` and one host read (a
    sync on a GPU)."""
    lo_t, hi_t = torch.aminmax(x.detach().float())
    lo, hi = float(lo_t), float(hi_t)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        raise error(f"{what} hold NaN or infinite values")
    if lo < -tolerance or hi > 1 + tolerance:

        def end(v: float) -> str:  # 4 digits, or as many more as keep an outside value outside
            for digits in (4, 7, 10):  # (an overshoot of 4e-05 is "1.00004", not "1")
                text = f"{v:.{digits}g}"
                if (0.0 <= float(text) <= 1.0) == (0.0 <= v <= 1.0):
                    return text
            return repr(v)

        raise error(f"{what} must lie in [0, 1]; got values in [{end(lo)}, {end(hi)}]"
                    f"{_range_hint(lo, hi)}")


def _range_hint(lo: float, hi: float) -> str:
    """The likely mistake behind values in [lo, hi] outside [0, 1]: a small overshoot (a
    resampling or colour conversion, within 0.05) is clamped, not rescaled; 0..255 floats and
    [-1, 1] frames are told by a clear excess only (beyond 0.25)."""
    near = 0.05
    if lo >= -near and hi <= 1 + near:
        return " (just outside: an overshoot of a resampling or colour conversion; pass " \
               "x.clamp(0, 1))"
    if lo >= -near and hi > 1.25:
        return " (looks like 0..255: pass x / 255 or uint8)"
    if lo < -0.25 and hi <= 1 + near:
        return " (looks like [-1, 1]: pass (x + 1) / 2)"
    return ""


def clips_from_tensor(videos: torch.Tensor, *, name: str = "tensor",
                      **kwargs: Any) -> List[Clip]:
    """The one tensor -> Clip path: a (B, T, C, H, W) batch -> B Clips named ``name[b]``.

    Checked by :func:`check_clip_tensor` (raises ClipTensorError), then frames are selected,
    floats mapped to uint8 (``round(x * 255)``), gray repeated to RGB, resized in one batched
    call on the tensor's (or ``device``'s) device and given a letterbox content mask.

    Args:
        videos: (B, T, C, H, W) uint8, or float in [0, 1]; C in {1, 3}.
        name: clip ``b`` is named ``f"{name}[{b}]"``.
        **kwargs: ``long_side`` (default None here: native pixels; an odd side loses its last
            row / column, as everywhere in the package), ``stride``, ``max_frames``,
            ``indices``, ``device``, ``fps``, ``letterbox_threshold``,
            ``letterbox_min_fraction``, ``upscale``, ``lens``: as in :func:`read_clip` (the
            batch undistorted in one call on its device).
    Returns:
        B Clips (an empty list for B = 0): frames (T', 3, H', W') uint8 RGB at the working
        size on the tensor's (or ``device``'s) device, content_mask (H', W') bool,
        frame_indices (T',) long.
    Raises:
        ClipTensorError: a malformed tensor (:func:`check_clip_tensor`).

    Example:
        >>> import torch
        >>> from geocon_torch.io import clips_from_tensor
        >>> clips = clips_from_tensor(torch.rand(2, 3, 3, 32, 48))
        >>> [c.name for c in clips], tuple(clips[0].frames.shape), clips[0].frames.dtype
        (['tensor[0]', 'tensor[1]'], (3, 3, 32, 48), torch.uint8)
    """
    check_clip_tensor(videos, batched=True)
    if videos.shape[0] == 0:  # an empty batch (e.g. a loader's last shard): no clip
        return []
    names = [f"{name}[{b}]" for b in range(videos.shape[0])]
    return _tensor_clips(videos, names, **kwargs)


def clip_from_tensor(frames: torch.Tensor, *, name: str = "tensor", **kwargs: Any) -> Clip:
    """One clip tensor -> Clip, by the rule of :func:`clips_from_tensor`.

    Args:
        frames: (T, C, H, W) uint8, or float in [0, 1]; C in {1, 3}; any device.
        name: the clip's name.
        **kwargs: as in :func:`clips_from_tensor` (``long_side`` default None = native
            pixels, ``stride``, ``max_frames``, ``indices``, ``device``, ``fps``, ...).
    Returns:
        Clip: frames (T', 3, H', W') uint8 RGB at the working size, content_mask (H', W') bool,
        frame_indices (T',) long.
    Raises:
        ClipTensorError: a malformed tensor, or a (B, T, C, H, W) batch.

    Example:
        >>> import torch
        >>> from geocon_torch.io import clip_from_tensor
        >>> clip = clip_from_tensor(torch.zeros(4, 1, 30, 40), long_side=20)
        >>> tuple(clip.frames.shape), clip.name
        ((4, 3, 16, 20), 'tensor')
        >>> clip_from_tensor(torch.full((4, 3, 30, 40), 2.0))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        geocon_torch.errors.ClipTensorError: float clip tensors must lie in [0, 1]; got ...
    """
    if isinstance(frames, torch.Tensor) and frames.ndim == 5:
        raise ClipTensorError(f"one clip is (T, C, H, W); got a batch {tuple(frames.shape)}: "
                              f"use clips_from_tensor / read_clips")
    check_clip_tensor(frames)
    return _tensor_clips(frames.unsqueeze(0), [name], sources=[frames], **kwargs)[0]


def clips_from_tensors(videos: Sequence[torch.Tensor], *, names: Optional[Sequence[str]] = None,
                       **kwargs: Any) -> List[Clip]:
    """:func:`clip_from_tensor` of every (T, C, H, W) tensor of ``videos`` (named ``names``,
    default "tensor"), the clips of one shape, dtype and device read as one batch (one resize
    and one letterbox detection per batch, :func:`clips_from_tensor`'s path): each clip equals
    the one :func:`clip_from_tensor` gives, bit for bit.

    Args:
        videos: (T_k, C_k, H_k, W_k) uint8 or float in [0, 1] tensors, shapes may differ.
        names: one name per tensor (None: all "tensor").
        **kwargs: as in :func:`clips_from_tensor`.
    Returns:
        One Clip per tensor, in order (as :func:`clip_from_tensor`).
    Raises:
        ClipTensorError: the first malformed tensor, before any work.

    Example:
        >>> import torch
        >>> from geocon_torch.io import clips_from_tensors
        >>> clips = clips_from_tensors([torch.rand(3, 3, 32, 48), torch.rand(2, 1, 20, 20)] * 2)
        >>> [tuple(c.frames.shape) for c in clips][:2], clips[0].name
        ([(3, 3, 32, 48), (2, 3, 20, 20)], 'tensor')
    """
    names = ["tensor"] * len(videos) if names is None else list(names)
    for frames in videos:
        if isinstance(frames, torch.Tensor) and frames.ndim == 5:
            raise ClipTensorError(f"one clip is (T, C, H, W); got a batch "
                                  f"{tuple(frames.shape)}: use clips_from_tensor / read_clips")
        check_clip_tensor(frames)
    groups: Dict[tuple, List[int]] = {}
    for k, frames in enumerate(videos):
        groups.setdefault((tuple(frames.shape), frames.dtype, str(frames.device)), []).append(k)
    out: List[Optional[Clip]] = [None] * len(videos)
    for g in groups.values():
        x = videos[g[0]].unsqueeze(0) if len(g) == 1 else torch.stack([videos[k] for k in g])
        clips = _tensor_clips(x, [names[k] for k in g], sources=[videos[k] for k in g],
                              **kwargs)
        for k, clip in zip(g, clips):
            out[k] = clip
    return out  # type: ignore[return-value]


def _tensor_clips(x: torch.Tensor, names: List[str], *, long_side: Optional[int] = None,
                  stride: int = 1, max_frames: Optional[int] = None,
                  indices: Optional[Iterable[int]] = None,
                  device: Union[None, str, torch.device] = None, fps: Optional[float] = None,
                  letterbox_threshold: float = 16.0 / 255.0,
                  letterbox_min_fraction: float = 0.02, upscale: bool = True,
                  motion_every: Optional[int] = None,
                  sources: Optional[Sequence[torch.Tensor]] = None,
                  motion_indices: Optional[Sequence[int]] = None,
                  lens: LensLike = None) -> List[Clip]:
    """A checked (B, T, C, H, W) batch -> B Clips (see :func:`clips_from_tensor`); the content
    fractions, the motion statistic and (uint8 only) each clip's largest value (a clip of 0 / 1
    values: :data:`UINT8_CAST_HINT`) come back in one host copy for the batch. ``sources``:
    the caller's (T, C, H, W) tensor of each clip (default the rows of ``x``), kept in
    ``meta["source_tensor"]`` when the frames are resampled (:class:`TensorSource`).
    ``motion_indices``: the source frames (in clip order) whose motion ``meta["motion"]``
    records, held positions included (default: the frames selected), e.g. every frame a
    score reads when only a few of them are selected here. ``lens``: the working frames are
    undistorted and the content masks mapped (:func:`_undistorted`), the batch in one call."""
    lens = as_lens(lens)
    if sources is None:
        sources = list(x.unbind(0))
    sel = frame_selection(stride, max_frames, indices)
    every = _check_every(motion_every)
    opts = dict(long_side=long_side, upscale=upscale, thr=letterbox_threshold,
                frac=letterbox_min_fraction)
    t, c, h, w = x.shape[1:]
    meta_base = {"source": "tensor", "shape": [t, c, h, w], "dtype": str(x.dtype).replace(
        "torch.", ""), "codec": None, "container_frames": t, "decoded_frames": t,
        "decode_complete": True, "num_source_frames": t, "truncated": False}
    idx = sel.resolve(t)
    x = x.detach() if device is None else x.detach().to(device)
    native = x[:, to_device(idx, x.device)]  # (B, T', C, H, W) as given
    order = idx if motion_indices is None else sel_motion(motion_indices, t)
    whole = sel.indices is None and sel.max_frames is None and motion_indices is None
    sums, chains = _motion_sums(x, native, idx, every, order, t if whole else None)
    out, ws = _working_frames(native, long_side, upscale)
    del native
    masks = detect_content_mask(out, opts["thr"], opts["frac"])
    if lens is not None:
        out, masks = _undistorted(out, masks, lens, ws)
    peak = [x.amax(dim=(1, 2, 3, 4)).double()] if x.dtype == torch.uint8 else []  # (B,)
    host = _host_rows([_content_fraction(masks).double()] + sums + peak
                      + [_content_box(masks)])  # one copy, the batch; the boxes last
    boxes, host = [row[-4:] for row in host], [row[:-4] for row in host]
    width = sum(int(c.shape[1]) if c.dim() == 2 else 1 for c in sums)
    kept = idx.tolist()  # the frame indices: the same for every clip of the batch
    source_fps, fps_source = _pick_fps(None, fps)
    per_frame = c * h * w
    clips = []
    for k, (frames, mask) in enumerate(zip(out.unbind(0), masks.unbind(0))):  # views
        motion = _motion_meta(host[k][1:1 + width], chains, per_frame, every, order)
        meta = dict(meta_base, device=str(out.device), source_fps=source_fps,
                    fps_source=fps_source, motion=motion)
        if lens is not None:
            meta["lens"] = lens_record(lens, ws, out.device)
        if peak and host[k][-1] == 1.0:  # all 0 or 1, not all 0 (a black clip)
            meta["uint8_unit_values"] = True
            warnings.warn(f"clip {names[k]!r}: {UINT8_CAST_HINT}", UserWarning, stacklevel=3)
        if not ws.crop:  # resampled: the gate's view may read the source again
            meta["source_tensor"] = TensorSource(sources[k])
        clips.append(_finish(frames, kept, ws, sel.fps(source_fps), names[k], meta,
                             opts, mask=mask, fraction=host[k][0], box=boxes[k]))
    return clips


def cast_hint(clip: Clip) -> Optional[str]:
    """:data:`UINT8_CAST_HINT` for a clip read from a uint8 tensor of 0 / 1 values (not all 0),
    else None (any other clip, a Clip built by hand)."""
    meta = clip.meta if isinstance(clip.meta, dict) else {}
    return UINT8_CAST_HINT if meta.get("uint8_unit_values") else None


def sel_motion(indices: Sequence[int], num_frames: int) -> np.ndarray:
    """``motion_indices`` of :func:`_tensor_clips` as (T',) int64 source frames, each checked
    to lie in 0..``num_frames`` - 1 (VideoReadError)."""
    return frame_selection(1, None, indices).resolve(num_frames)


def _motion_sums(x: torch.Tensor, native: torch.Tensor, idx: np.ndarray, every: Optional[int],
                 order: np.ndarray, end: Optional[int] = None
                 ) -> Tuple[List[torch.Tensor], List[int]]:
    """The pair sums of the motion chains (no host sync): (B, n - 1) float64 on the batch's
    device, every consecutive pair (:func:`~geocon_torch.io.sampling.consecutive_pair_sums`)
    of the distinct frames ``order`` in source order (the frames of the detached batch ``x``;
    ``native`` (B, T', C, H, W): its frames ``idx`` before any resize, read again when they
    are that chain) and, with ``every``, the (B,) largest pair sum
    (:func:`~geocon_torch.io.sampling.max_pair_sums`) of frames 0, every, 2 every, ... up to
    the last one kept (``end`` given: below ``end``, the whole source of a stride without a
    frame cap); and the pair count of each chain (a chain of fewer than two frames has no
    sums)."""
    distinct = np.unique(order)
    stop = int(distinct[-1]) + 1 if end is None else int(end)
    chains = [distinct] + ([np.arange(0, stop, every)] if every else [])
    sums, pairs = [], []
    for k, frames_at in enumerate(chains):
        pairs.append(len(frames_at) - 1)
        if len(frames_at) < 2:
            continue
        same = k == 0 and np.array_equal(frames_at, idx)  # idx increasing and distinct
        chain = native if same else x[:, to_device(frames_at, x.device)]
        sums.append(consecutive_pair_sums(chain) if k == 0 else max_pair_sums(chain))
    return sums, pairs


def _host_rows(columns: List[torch.Tensor]) -> List[List[float]]:
    """(B,) or (B, k) float64 columns of one device -> per clip the list of their values (a
    (B, k) column gives k values), read in one host copy."""
    b = int(columns[0].shape[0])
    if all(c.dim() == 1 for c in columns):
        flat = torch.cat(columns).tolist() if len(columns) > 1 else columns[0].tolist()
        return [flat[k::b] for k in range(b)]
    return torch.cat([c.reshape(b, -1) for c in columns], 1).tolist()


def _motion_meta(host: List[float], pairs: List[int], per_frame: int,
                 every: Optional[int], order: np.ndarray) -> Dict[str, Any]:
    """``meta["motion"]`` of one clip from its row of the host copy (the pair sums of the
    first chain, then the sampled chain's largest pair sum; those with a pair only), the
    chains' pair counts and the clip's source frames ``order`` (the held positions)."""
    first, rest = host[:max(pairs[0], 0)], iter(host[max(pairs[0], 0):])
    out = motion_record(max(first) if first else None, pairs[0], per_frame)
    still = held_flags([v / per_frame for v in first],
                       [bool(is_still(v, per_frame)) for v in first])
    with_held(out, held_positions(still, np.unique(order).tolist(), order.tolist()),
              len(order))
    if every is not None:
        out["sampled"] = dict(motion_record(next(rest) if pairs[1] > 0 else None, pairs[1],
                                            per_frame), every=every)
    return out


def tensor_frames(videos: torch.Tensor, *, long_side: Optional[int] = None,
                  indices: Optional[Iterable[int]] = None,
                  device: Union[None, str, torch.device] = None, upscale: bool = True,
                  lens: LensLike = None) -> torch.Tensor:
    """The frames :func:`clips_from_tensor` gives each clip, as one batch and without building
    Clips (no content masks, no per-clip work): (B, T', 3, H', W') uint8 on ``device`` (default
    the tensor's), bit for bit ``clips[b].frames``.

    Args:
        videos: (B, T, C, H, W) uint8, or float in [0, 1]; C in {1, 3} (checked).
        long_side, indices, device, upscale, lens: as in :func:`clips_from_tensor`.
    Returns:
        (B, T', 3, H', W') uint8 RGB on ``device`` (default the tensor's), T' = len(indices)
        (all frames when None), (H', W') the working size.
    Raises:
        ClipTensorError: a malformed tensor.
    Example:
        >>> import torch
        >>> from geocon_torch.io import tensor_frames
        >>> tuple(tensor_frames(torch.rand(2, 5, 1, 32, 48), indices=[0, 3]).shape)
        (2, 2, 3, 32, 48)
    """
    lens = as_lens(lens)
    check_clip_tensor(videos, batched=True)
    idx = frame_selection(1, None, indices).resolve(int(videos.shape[1]))
    out, ws = _working_frames(_select_frames(videos, idx, device), long_side, upscale)
    return out if lens is None else undistort_frames(out, lens, ws)


def _select_frames(x: torch.Tensor, idx: np.ndarray, device: Union[None, str, torch.device]
                   ) -> torch.Tensor:
    """Frames ``idx`` (T',) of a checked (B, T, C, H, W) batch on ``device`` (default its own),
    as they are: (B, T', C, H, W)."""
    x = x.detach()
    if device is not None:
        x = x.to(device)
    return x[:, to_device(idx, x.device)]


def _to_uint8(x: torch.Tensor) -> torch.Tensor:
    """(B, T, C, H, W) floats in [0, 1] -> uint8 ``round(x * 255)``, a few frames at a time
    (:data:`~geocon_torch.io.resize.RESIZE_CHUNK_VALUES` values: the float copy stays bounded)."""
    flat = x.reshape(-1, *x.shape[2:])
    out = torch.empty(flat.shape, dtype=torch.uint8, device=x.device)
    per = max(1, RESIZE_CHUNK_VALUES // max(1, flat[0].numel()))
    for start in range(0, flat.shape[0], per):
        chunk = flat[start:start + per].float() * 255.0
        out[start:start + per] = chunk.round_().clamp_(0, 255).to(torch.uint8)
    return out.view(x.shape)


def _working_frames(x: torch.Tensor, long_side: Optional[int], upscale: bool
                    ) -> Tuple[torch.Tensor, WorkingSize]:
    """Selected frames (B, T', C, H, W) (:func:`_select_frames`) -> ((B, T', 3, H', W') uint8
    contiguous, the working size): floats to uint8 (``round(x * 255)``), one batched resize,
    gray repeated to RGB."""
    b, t, c, h, w = x.shape
    if x.is_floating_point():
        x = _to_uint8(x)
    ws = working_size(h, w, long_side, upscale)
    out = resize_frames(x.reshape(b * t, c, h, w), ws).view(b, t, c, *ws.size)
    if c == 1:
        out = out.expand(-1, -1, 3, -1, -1)
    return out.contiguous(), ws


def _undistorted(frames: torch.Tensor, masks: torch.Tensor, lens: LensLike, ws: WorkingSize
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(frames (..., 3, h, w) uint8 undistorted, content masks (..., h, w) of the distorted
    frames mapped onto them) (:mod:`geocon_torch.io.lens`)."""
    return undistort_frames(frames, lens, ws), undistort_mask(masks, lens, ws)


# ----------------------------------------------------------------------------------- common

def _content_fraction(mask: torch.Tensor) -> torch.Tensor:
    """Fraction of True pixels of (..., H, W) content masks -> (...,) float32 (an exact count
    over H W: the same value for a mask alone or in a batch)."""
    return mask.float().mean((-2, -1))


def _content_box(mask: torch.Tensor) -> torch.Tensor:
    """Bounding box of the True pixels of (..., H, W) content masks -> (..., 4) float64
    ``[x0, y0, x1, y1]`` px, ends exclusive (the whole frame when no pixel is True); no host
    read."""
    h, w = mask.shape[-2:]
    rows, cols = mask.any(-1).to(torch.int32), mask.any(-2).to(torch.int32)
    return torch.stack([cols.argmax(-1), rows.argmax(-1), w - cols.flip(-1).argmax(-1),
                        h - rows.flip(-1).argmax(-1)], -1).double()


def _finish(frames: Union[torch.Tensor, VideoFrames], idx: List[int], ws: WorkingSize,
            fps: float, name: str, meta: Dict[str, Any], opts: Dict[str, Any],
            mask: Optional[torch.Tensor] = None, fraction: Optional[float] = None,
            box: Optional[List[float]] = None) -> Clip:
    """The Clip of decoded / resized ``frames``; ``fraction``, ``box``: the content fraction
    and box of ``mask`` when the caller computed them (:func:`_content_fraction`,
    :func:`_content_box`: ``meta["content_box"]``, read by the background section's
    reference-pixel scales). ``opts["lens"]`` (files): the frames are undistorted and the
    mask, found on the distorted frames, mapped through the same map."""
    if mask is None:
        mask = detect_content_mask(frames, opts["thr"], opts["frac"])
    lens = opts.get("lens")  # files (tensors: _tensor_clips undistorted the batch already)
    if lens is not None:  # a store undistorts the frames it gives (its ``lens``)
        # first: its checks word their errors with the display rotation (frames as shown)
        meta["lens"] = lens_record(lens, ws, frames.device, meta.get("display_rotation"))
        if isinstance(frames, torch.Tensor):
            frames, mask = _undistorted(frames, mask, lens, ws)
        else:
            mask = undistort_mask(mask, lens, ws)
        fraction = box = None
    if fraction is None or box is None:  # one host read for both
        fraction, *box = torch.cat([_content_fraction(mask).double().reshape(1),
                                    _content_box(mask).reshape(4)]).tolist()
    meta.update(long_side=opts["long_side"], working_size=list(ws.size),
                scale_xy=list(ws.scale_xy), resampled=not ws.crop,
                content_fraction=float(fraction), content_box=[int(v) for v in box])
    return Clip(frames=frames, fps=float(fps), content_mask=mask,
                frame_indices=to_device(idx, frames.device, torch.long),
                source_size=ws.source, scale=ws.scale, name=name, meta=meta)
