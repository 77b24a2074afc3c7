"""Which frames to keep (stride / max_frames / explicit indices) and which frame pairs to score,
and how much the frames kept move (the frozen-video statistic).

Frame indices are 0-based positions in the *source* sequence (decode order = display order for
the clips we read). Pairs ``(i, j)`` index frames of a :class:`~geocon_torch.types.Clip`
(positions 0..T-1 of ``clip.frames``), with ``x2 ~ H x1`` / ``x2^T F x1 = 0`` for ``x1`` in
frame i.

**Motion of the frames kept** (``Clip.meta["motion"]``, recorded by ``score_clip`` as
``result["motion"]``): ``{"max_mad", "pairs", "frozen"}``, the largest mean absolute difference
(grey levels of 255, over pixels and channels) between consecutive frames of the *distinct
frames kept, in source order*, at the source's **native resolution** (before any working-size
resize or crop), the number of such pairs and whether the clip is frozen (``pairs >= 1`` and
``max_mad <= FROZEN_MAX_MAD``; :func:`geocon_torch.rewards.frozen_clips` is the same rule on a
tensor). The readers measure it while the frames are decoded (:class:`FrameMotion`: one previous
frame kept, files eager or streamed alike) or from the tensor before it is resized
(:func:`max_pair_sums`, batched on its device), so every path gives the same numbers; the
arithmetic is :func:`pair_abs_diff_sums` (uint8: exact integer sums; float in [0, 1]: float64
sums of the differences times 255; on the decoded frames :func:`image_abs_diff_sum`, the same
exact sums from OpenCV, with no torch threads). A pair of frames of different sizes (a stream
that changes resolution) counts as moving (``max_mad`` 255). With ``every = k`` the readers
also measure source frames 0, k, 2k, ... of the whole source for a stride without
``max_frames``, else up to the last frame kept (decoded for it when the stride skips them):
``motion["sampled"] = {"every", "max_mad", "pairs", "frozen"}``, the frames Epipolar-DPO
reads.

**Held frames** (``motion["held"]``, only when some but not all of them are): the sorted clip
positions t >= 1 whose frame is still against frame t - 1 (the pair rule of the frozen test,
with the same threshold: :func:`is_still`'s exact sums, or the HDR source's
:func:`frozen_max_mad`; or a dip of codec noise between the motion on both sides of it:
:func:`held_flags`), e.g. every frame shown twice by a 12 -> 24 fps conversion or a
generator that holds frames, also through a lossy encode (a frame repeated by explicit indices
is the caller's choice, not held). The readers take
it from the pairs they already measure (:func:`held_positions`; the tensor path in the same one
host copy); :func:`geocon_torch.io.pairs.drop_held_pairs` removes the protocol pairs of two
identical frames (a frozen clip, all of whose pairs would go, keeps them).
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import ShapeError, VideoReadError

PairSpec = Union[str, int, Sequence[Tuple[int, int]], torch.Tensor, np.ndarray]


def is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


@dataclass(frozen=True)
class FrameSelection:
    """A validated frame-selection rule, usable while streaming (total count unknown).

    Either ``stride`` / ``max_frames`` (keep frames 0, s, 2s, ... up to ``max_frames`` of them:
    the *first* ``max_frames`` after striding) or explicit ``indices`` (any order, repeats
    allowed; returned in the order given). Build it with :func:`frame_selection`.
    """

    stride: int = 1
    max_frames: Optional[int] = None
    indices: Optional[Tuple[int, ...]] = None

    @property
    def wanted(self) -> Optional[frozenset]:
        """The set of source indices to decode, or None for the stride rule."""
        return None if self.indices is None else frozenset(self.indices)

    def keeps(self, i: int, kept: int) -> bool:
        """Whether source frame ``i`` is kept, given ``kept`` frames kept so far (stride rule)."""
        if self.indices is not None:
            return i in self.wanted
        return i % self.stride == 0 and (self.max_frames is None or kept < self.max_frames)

    def finished(self, i: int, kept: int) -> bool:
        """True once no frame after source frame ``i`` can be kept (decoding may stop)."""
        if self.indices is not None:
            return i >= max(self.indices)
        return self.max_frames is not None and kept >= self.max_frames

    def resolve(self, num_frames: int,
                path: Optional[Union[str, os.PathLike]] = None) -> np.ndarray:
        """(T,) int64 source indices for a sequence of known length; raises VideoReadError
        (naming ``path`` when given) when an explicit index is out of range."""
        if self.indices is not None:
            check_indices_in_range(self.indices, num_frames, path)
            return np.asarray(self.indices, dtype=np.int64)
        idx = np.arange(0, num_frames, self.stride, dtype=np.int64)
        return idx if self.max_frames is None else idx[: self.max_frames]

    def fps(self, source_fps: float) -> float:
        """Frame rate of the kept frames: source fps / stride (source fps for explicit indices)."""
        return source_fps if self.indices is not None else source_fps / self.stride


def frame_selection(stride: int = 1, max_frames: Optional[int] = None,
                    indices: Optional[Iterable[int]] = None) -> FrameSelection:
    """Validate the sampling arguments of :func:`~geocon_torch.io.read_clip`.

    Raises:
        VideoReadError: stride < 1, max_frames < 1, negative / non-integer / empty indices, or
            indices combined with a non-default stride or max_frames.
    """
    if not is_int(stride) or stride < 1:
        raise VideoReadError(f"stride must be an integer >= 1, got {stride!r}")
    if max_frames is not None and (not is_int(max_frames) or max_frames < 1):
        raise VideoReadError(f"max_frames must be None or an integer >= 1, got {max_frames!r}")
    if indices is None:
        return FrameSelection(int(stride), None if max_frames is None else int(max_frames))
    if stride != 1 or max_frames is not None:
        raise VideoReadError("explicit indices cannot be combined with stride or max_frames; "
                             "select the frames you want in the indices list")
    if isinstance(indices, torch.Tensor):
        indices = indices.detach().cpu().reshape(-1).tolist()
    elif isinstance(indices, np.ndarray):
        indices = indices.reshape(-1).tolist()
    idx = tuple(indices)
    if not idx:
        raise VideoReadError("indices is empty: give at least one frame index")
    bad = [i for i in idx if not is_int(i) or i < 0]
    if bad:
        raise VideoReadError(f"frame indices must be integers >= 0, got {bad[:5]}")
    return FrameSelection(1, None, tuple(int(i) for i in idx))


def check_indices_in_range(indices: Iterable[int], num_frames: int,
                           path: Optional[Union[str, os.PathLike]] = None,
                           announced: Optional[int] = None) -> None:
    """Raise VideoReadError naming the indices that are >= ``num_frames`` (and ``path``, the
    clip's file or folder, when given). ``announced``: the frame count the container
    announces; when more than ``num_frames`` the message says the file decoded fewer frames."""
    out = sorted({int(i) for i in indices if int(i) >= num_frames})
    if out:
        where = f"{path}: " if path is not None else ""
        short = (f"; the file announces {announced} frames but only {num_frames} decode"
                 if announced is not None and announced > num_frames else "")
        raise VideoReadError(f"{where}frame indices {out[:10]} are out of range: the clip has "
                             f"{num_frames} frames (valid 0..{num_frames - 1}){short}")


#: a clip is frozen when no consecutive pair of the frames read differs by more than this mean
#: absolute difference (grey levels of 255, over pixels and channels): the scale of uint8 rounding
#: (at most 0.5 per pixel) and of most codec noise on a still (a still H.264 mp4 decodes with
#: 0-0.7 per pair: one pair above 0.5 lets such a clip through), under any measurable motion (a
#: 0.1 px shift of a textured scene gives 0.9; the grounded categories' consecutive frames, C4's
#: static camera with movers included, 1.5-20)
FROZEN_MAX_MAD = 0.5
#: the code-value slope of an HDR transfer relative to SDR, by transfer name (FFmpeg's, as in
#: ``io.color["transfer"]``): the frozen threshold of such a source is ``FROZEN_MAX_MAD`` times
#: it (:func:`frozen_max_mad`). Its frames are read as SDR code values without tone mapping, so
#: the same motion differs by fewer grey levels: SDR content placed in PQ / HLG as BT.2408 does
#: (SDR signal v shown as 203 v ** 2.4 cd/m2 by BT.1886, in PQ; scene light 0.2647 v ** 2.4,
#: 75 % HLG at reference white) changes its code value by dPQ/dv = 0.251 (HLG: 0.471) at
#: reference white, 0.445 (0.93) at mid-grey v = 0.5. The slope at reference white is the
#: smallest over the SDR signal range v in [0.2, 1] (PQ's slope falls with v; HLG's is lower
#: only in deep shadows, v < 0.13): a pair that moves by more than 0.5 SDR grey levels there
#: moves by more than the scaled threshold. Measured (audit s26 F3): a 0.07 px / frame pan
#: has max_mad 1.02 in SDR, 0.46 in PQ (frozen at 0.5, not at 0.126); a still libx265 PQ clip
#: stays at 0-0.08. Linear-light and other transfers keep 0.5 (warned about, not scaled).
HDR_MOTION_SLOPE = {"smpte2084": 0.251, "arib-std-b67": 0.471}
#: elements of one chunk of frame pairs in :func:`max_pair_sums` (bounds its temporaries)
MOTION_CHUNK = 32 * 2 ** 20
#: the mean absolute difference recorded for a pair of frames of different sizes
SIZE_CHANGE_MAD = 255.0
#: a pair is also held (a repeated frame through a lossy encode or dither) when its mean
#: absolute difference is at most this fraction of the motion on each side of it (the largest
#: of the up to two pairs before / after it; not at the chain's ends): :func:`held_flags`
HELD_DIP_RATIO = 0.35
#: ... and at most this many grey levels of 255 (SDR; times the HDR slope as the frozen
#: threshold): codec noise, not motion (a repeated frame through MPEG-4 part 2 at qscale 6
#: differs from its twin by up to 5.4)
HELD_DIP_MAX_MAD = 8.0


#: elements of a frame row summed in float32 by :func:`pair_abs_diff_sums`: every partial sum of
#: up to this many uint8 values is an integer under 2**24, so the float32 sum is exact
EXACT_ROW = 2 ** 24 // 255


def pair_abs_diff_sums(later: torch.Tensor, earlier: torch.Tensor, frame_dims: int = 3
                       ) -> torch.Tensor:
    """Sum of ``|later - earlier|`` over each frame (the last ``frame_dims`` dims: (C, H, W) of
    a tensor, (H, W * 3) of a decoded image) -> (...,) float64.

    uint8: ``max - min`` (no widening copy), summed exactly: each row (last dim, at most
    :data:`EXACT_ROW` elements) in float32, the rows in float64 (an integer-valued float64,
    the same whatever the layout or the order; ~5x faster on the CPU than an int64 sum).
    Float in [0, 1]: float64 sums of the differences, times 255 (grey levels)."""
    if later.is_floating_point():
        diff = (later - earlier).abs().flatten(-frame_dims)
        return diff.sum(-1, dtype=torch.float64) * 255.0
    diff = torch.maximum(later, earlier) - torch.minimum(later, earlier)
    if int(diff.shape[-1]) > EXACT_ROW:  # rows too long for float32: one float64 sum (exact)
        return diff.flatten(-frame_dims).sum(-1, dtype=torch.float64)
    rows = diff.sum(-1, dtype=torch.float32)  # (..., rows of the frame), exact integers
    return rows.sum(tuple(range(-(frame_dims - 1), 0)), dtype=torch.float64) \
        if frame_dims > 1 else rows.double()


def max_pair_sums(frames: torch.Tensor, chunk: int = MOTION_CHUNK) -> torch.Tensor:
    """The largest :func:`pair_abs_diff_sums` over the consecutive pairs of every clip.

    Args:
        frames: (B, n, C, H, W) uint8 or float in [0, 1], n >= 2 (any device, any strides).
        chunk: elements per chunk of pairs (bounds the temporaries).
    Returns:
        (B,) float64 on ``frames.device``, no host sync (integer-valued for uint8 frames).

    Raises:
        ShapeError: ``frames`` is not (B, n, ...) with n >= 2 (no consecutive pair).
    """
    if frames.dim() < 2 or int(frames.shape[1]) < 2:
        raise ShapeError(f"max_pair_sums needs (B, n, ...) frames with n >= 2, got shape "
                         f"{tuple(frames.shape)}")
    b, n = int(frames.shape[0]), int(frames.shape[1])
    per_frame = int(np.prod(frames.shape[2:]))
    per = max(1, chunk // max(1, b * per_frame))  # pairs per chunk
    best: Optional[torch.Tensor] = None
    for s in range(0, n - 1, per):
        e = min(s + per, n - 1)  # pairs (s, s + 1) .. (e - 1, e)
        top = pair_abs_diff_sums(frames[:, s + 1:e + 1], frames[:, s:e]).amax(1)
        best = top if best is None else torch.maximum(best, top)
    return best  # n >= 2 (checked above): never None


def frozen_max_mad(transfer: Optional[str]) -> float:
    """The frozen threshold (grey levels of 255) of a source read with ``transfer`` (FFmpeg's
    name; None: not known, an SDR tensor or image): :data:`FROZEN_MAX_MAD`, scaled by
    :data:`HDR_MOTION_SLOPE` for PQ and HLG."""
    return FROZEN_MAX_MAD * HDR_MOTION_SLOPE.get(str(transfer), 1.0)


def is_still(pair_sum: Any, per_frame: int) -> Any:
    """Whether a pair sum of :func:`pair_abs_diff_sums` (a float, or a float64 tensor: then
    elementwise, on its device) is within :data:`FROZEN_MAX_MAD` grey levels per element of a
    frame of ``per_frame`` elements."""
    return pair_sum <= FROZEN_MAX_MAD * int(per_frame)


def consecutive_pair_sums(frames: torch.Tensor, chunk: int = MOTION_CHUNK) -> torch.Tensor:
    """:func:`pair_abs_diff_sums` of every consecutive pair of every clip, chunked as
    :func:`max_pair_sums` (the same values: its maximum is theirs).

    Args:
        frames: (B, n, C, H, W) uint8 or float in [0, 1], n >= 2 (any device, any strides).
        chunk: elements per chunk of pairs (bounds the temporaries).
    Returns:
        (B, n - 1) float64 on ``frames.device`` (pair k: frames k and k + 1), no host sync.
    Raises:
        ShapeError: ``frames`` is not (B, n, ...) with n >= 2.
    """
    if frames.dim() < 2 or int(frames.shape[1]) < 2:
        raise ShapeError(f"consecutive_pair_sums needs (B, n, ...) frames with n >= 2, got "
                         f"shape {tuple(frames.shape)}")
    b, n = int(frames.shape[0]), int(frames.shape[1])
    per = max(1, chunk // max(1, b * int(np.prod(frames.shape[2:]))))  # pairs per chunk
    parts = [pair_abs_diff_sums(frames[:, s + 1:min(s + per, n - 1) + 1],
                                frames[:, s:min(s + per, n - 1)]) for s in range(0, n - 1, per)]
    return parts[0] if len(parts) == 1 else torch.cat(parts, 1)


def held_flags(mads: Sequence[float], still: Sequence[bool], scale: float = 1.0
               ) -> List[bool]:
    """Whether each consecutive pair of a chain shows one frame twice: still (the frozen
    rule's exact threshold), or a dip: its mean absolute difference is at most
    :data:`HELD_DIP_MAX_MAD` (times ``scale``) and at most :data:`HELD_DIP_RATIO` times the
    largest of the up to two pairs on each side of it (the smaller side; the first and the last
    pair, with one side only, are held by the exact rule alone). A repeated frame through a
    lossy encode differs from its twin by codec noise (0.3-5.4 grey levels), its neighbours by
    the motion (17+ on a truck); a slow pan, a camera that stops or starts and the grounded
    corruptions have no such dip (every pair of them >= 0.6 of its sides, bar pairs the exact
    rule already calls still), nor have the shared real clips but for near-still pairs of the
    handheld box.mp4 (0.32-0.55 against 1.0-1.7 around them).

    Args:
        mads: (n - 1,) mean absolute differences of the chain's pairs (grey levels of 255).
        still: (n - 1,) the pairs' exact still flags (:func:`is_still`).
        scale: the source's frozen threshold over :data:`FROZEN_MAX_MAD` (HDR transfers).
    Returns:
        (n - 1,) held flags of the pairs, in order.
    """
    m = np.asarray(mads, dtype=np.float64).reshape(-1)
    n = len(m)
    padded = np.concatenate([np.full(2, -np.inf), m, np.full(2, -np.inf)])  # m[k] at k + 2
    left = np.maximum(padded[0:n], padded[1:n + 1])  # the two pairs before (-inf: none)
    right = np.maximum(padded[3:n + 3], padded[4:n + 4])  # the two after
    dip = (m <= HELD_DIP_MAX_MAD * scale) & (m <= HELD_DIP_RATIO * np.minimum(left, right))
    return (np.asarray(still, dtype=bool).reshape(-1) | dip).tolist()


def held_positions(still: Sequence[bool], chain: Optional[Sequence[int]] = None,
                   order: Optional[Sequence[int]] = None) -> List[int]:
    """The held clip positions (module docstring) from the still flags of a chain's pairs.

    Args:
        still: (n - 1,) whether each consecutive pair of the chain is still.
        chain: (n,) the chain's source frame numbers, increasing (None: 0..n-1).
        order: (T,) the clip's source frame numbers in clip order, each one in ``chain``
            (None: the chain itself, T = n).
    Returns:
        Sorted positions t in 1..T-1 whose frame is still against frame t - 1: every pair of
        the chain between the two (different) source frames is still (the same source frame
        twice, explicit indices repeating it, is not held).
    """
    chain = list(range(len(still) + 1)) if chain is None else [int(i) for i in chain]
    order = chain if order is None else [int(i) for i in order]
    at = {src: k for k, src in enumerate(chain)}
    moving = np.concatenate([[0], np.cumsum(~np.asarray(still, dtype=bool))])  # (n,)
    out = []
    for t in range(1, len(order)):
        a, b = sorted((at[order[t - 1]], at[order[t]]))
        if a != b and moving[b] == moving[a]:
            out.append(t)
    return out


def with_held(record: Dict[str, Any], held: List[int], positions: int) -> Dict[str, Any]:
    """``record`` (:func:`motion_record`) with ``"held"`` when some of the ``positions - 1``
    positions t >= 1 of the clip are held and the clip is not frozen (no held frame, or a
    frozen clip: ``record`` as it is)."""
    if held and positions > 1 and not record.get("frozen"):
        record["held"] = list(held)
    return record


def motion_record(max_sum: Optional[float], pairs: int, per_frame: int) -> Dict[str, Any]:
    """``{"max_mad", "pairs", "frozen"}`` (module docstring) from the largest pair sum of
    :func:`pair_abs_diff_sums` (None: no pair) over frames of ``per_frame`` elements."""
    if not pairs or max_sum is None:
        return {"max_mad": None, "pairs": int(pairs), "frozen": False}
    return {"max_mad": float(max_sum) / int(per_frame), "pairs": int(pairs),
            "frozen": bool(is_still(max_sum, per_frame))}


def image_abs_diff_sum(later: np.ndarray, earlier: np.ndarray) -> float:
    """Sum of ``|later - earlier|`` over two uint8 images of one shape (e.g. (H, W * 3) rows of
    decoded frames): ``cv2.norm(NORM_L1)``, exact (OpenCV sums uint8 differences in integer
    blocks: an integer-valued float, :func:`pair_abs_diff_sums` of the same frames) and
    single-threaded (no torch thread team beside the decoder's threads: ~3 ms a 1080p frame,
    against ~22 ms for torch on one thread)."""
    import cv2  # lazy: only the file readers need it

    return float(cv2.norm(later, earlier, cv2.NORM_L1))


class _Chain:
    """The largest mean absolute difference of a sequence of frames fed one by one (the
    previous frame kept)."""

    def __init__(self) -> None:
        self.prev: Optional[np.ndarray] = None
        self.max_mad: Optional[float] = None
        self.still = True
        self.pairs = 0
        self.flags: List[Tuple[float, bool]] = []  # (mad, still) of each pair, in order

    def pair(self, frame: np.ndarray) -> Optional[Tuple[float, bool]]:
        """(mean absolute difference, still) of ``frame`` ((H, W * 3) uint8) against the
        previous one (None for the first); ``frame`` becomes the previous one."""
        prev, self.prev = self.prev, frame
        if prev is None:
            return None
        if prev.shape != frame.shape:
            return SIZE_CHANGE_MAD, False
        s = image_abs_diff_sum(frame, prev)
        return s / int(frame.size), bool(is_still(s, int(frame.size)))

    def fold(self, mad: float, still: bool) -> None:
        self.max_mad = mad if self.max_mad is None else max(self.max_mad, mad)
        self.still &= still
        self.pairs += 1
        self.flags.append((mad, still))

    def still_flags(self, max_mad: float = FROZEN_MAX_MAD) -> List[bool]:
        """Whether each pair shows one frame twice (:func:`held_flags`), still by the
        threshold of :meth:`record`."""
        mads = [mad for mad, _ in self.flags]
        if max_mad == FROZEN_MAX_MAD:
            return held_flags(mads, [still for _, still in self.flags])
        return held_flags(mads, [mad <= max_mad for mad in mads], max_mad / FROZEN_MAX_MAD)

    def record(self, max_mad: float = FROZEN_MAX_MAD) -> Dict[str, Any]:
        """``{"max_mad", "pairs", "frozen"}``: frozen by the exact sums of :func:`is_still`,
        or, with another threshold ``max_mad`` (:func:`frozen_max_mad` of an HDR source), when
        the largest mean absolute difference is within it."""
        still = self.still if max_mad == FROZEN_MAX_MAD else (
            self.max_mad is not None and self.max_mad <= max_mad)
        return {"max_mad": self.max_mad, "pairs": self.pairs,
                "frozen": bool(self.pairs and still)}


class FrameMotion:
    """The motion statistic (module docstring) of frames fed while they are decoded, in
    increasing source order, at native resolution: memory holds the previous frame (two with
    ``every``), never the clip.

    Args:
        every: also measure source frames 0, ``every``, 2 ``every``, ... up to the last frame
            kept (:meth:`wants` says which frames to feed besides the kept ones).
        whole: with ``every``, measure the sampled frames of the whole source, also those past
            the last frame kept (a stride without a frame cap: Epipolar-DPO reads frames 0,
            15, 30, ... of the whole source whatever the stride); the reader feeds them all.
    """

    def __init__(self, every: Optional[int] = None, whole: bool = False) -> None:
        self.every = None if every is None else int(every)
        self.whole = bool(whole)
        self._kept, self._sampled = _Chain(), _Chain()
        self._last = -1  # source index of the last frame kept
        self._pending: List[Tuple[int, float, bool]] = []  # sampled pairs past the last kept
        self._kept_at: List[int] = []  # source indices of the kept frames, increasing

    def wants(self, i: int) -> bool:
        """Whether source frame ``i`` is a sampled frame (fed even when it is not kept)."""
        return self.every is not None and i % self.every == 0

    def add(self, i: int, image: np.ndarray, kept: bool) -> None:
        """Feed source frame ``i`` ((H, W, 3) uint8 RGB at native resolution), kept by the
        selection or only sampled; frames come in increasing ``i``, a repeated kept frame is
        fed once."""
        self._add(i, image.reshape(image.shape[0], -1), kept)  # (H, W * 3) rows

    def _add(self, i: int, frame: np.ndarray, kept: bool) -> None:
        """:meth:`add` of the (H, W * 3) frame: a sampled pair past the last frame kept waits
        until a kept frame at or after it shows it lies within the frames read (with
        ``whole``, it counts at once)."""
        if kept and i > self._last:
            got = self._kept.pair(frame)
            if got is not None:
                self._kept.fold(*got)
            self._last = i
            self._kept_at.append(i)
            for _, mad, still in [p for p in self._pending if p[0] <= i]:
                self._sampled.fold(mad, still)
            self._pending = [p for p in self._pending if p[0] > i]
        if self.wants(i):
            got = self._sampled.pair(frame)
            if got is not None:
                if i <= self._last or self.whole:
                    self._sampled.fold(*got)
                else:  # counts once a kept frame at or after it shows it is read
                    self._pending.append((i, *got))

    def record(self, max_mad: float = FROZEN_MAX_MAD, order: Optional[Sequence[int]] = None,
               held: bool = False) -> Dict[str, Any]:
        """``{"max_mad", "pairs", "frozen"}`` of the frames kept (and ``"held"``, module
        docstring), with ``"sampled"`` (and its ``"every"``) when ``every`` was given;
        ``max_mad``: the frozen threshold (:func:`frozen_max_mad` of the source's transfer;
        grey levels of 255); ``order``: the clip's source frame numbers in clip order (explicit
        indices: any order, repeats), each one a kept frame (None: the kept frames, increasing);
        ``held``: add ``"held"`` (the readers do).
        """
        out = self._kept.record(max_mad)
        if held and self._kept_at and (order is None or set(order) <= set(self._kept_at)):
            order = self._kept_at if order is None else order
            with_held(out, held_positions(self._kept.still_flags(max_mad), self._kept_at,
                                          order), len(order))
        if self.every is not None:
            out["sampled"] = dict(self._sampled.record(max_mad), every=self.every)
        return out
