"""The Epipolar-DPO protocol (Kupyn et al. 2025, "Epipolar Geometry Improves Video Generation
Models"; public code ``KupynOrest/epipolar-dpo``, ``metrics/video_evaluation/epipolar.py``),
batched over all frame pairs of all clips.

Protocol (their defaults, :class:`EpipolarDPOConfig`):

* frames 0, 15, 30, ... of the clip (``sampling_rate``); pairs of consecutive sampled frames;
* gray = ``cv2.cvtColor(RGB2GRAY)`` of the uint8 frame at native resolution (their BGR2GRAY of
  the BGR frame: the same pixels for the same frames; a video file is decoded by PyAV /
  swscale, theirs by ``cv2.VideoCapture``, whose levels differ by ~1.2 on average, enough to
  move a clip's error by 4-29 % on the shared clips: README, preset ``epipolar-dpo``);
* OpenCV SIFT with default settings and no keypoint cap; OpenCV's raw keypoint positions
  (the Sampson distances do not depend on a common shift of all points anyway);
* brute-force L2 2-NN, Lowe ratio 0.75 (``d1 < 0.75 d2``), no mutual check;
* a pair is invalid with fewer than 8 keypoints in either frame or fewer than 20 matches;
* F from the unweighted Hartley-normalised 8-point solver (rank 2) on **all** matches, no RANSAC;
* per match ``d = sqrt(sampson^2 + 1e-8)`` (px); per pair the mean ``d`` (``epipolar_error``)
  and the fraction with ``d <= 5`` px (``inlier_rate``);
* per clip the means over valid pairs (``mean_epipolar_error``, ``mean_inlier_rate``); a clip
  with no valid pair is ``not_applicable``.

Execution: the gray images of all sampled frames of one size are computed in one batched op
(:func:`gray_images`) and reach the host in one copy; SIFT runs per frame on the CPU over the
extractor's thread pool (OpenCV releases the GIL; each sampled frame is detected once, where the
reference loop detects the inner frames of a clip twice; a clip's lone sampled frame, in no
pair, is not detected); the keypoints then move to ``device`` (one padded copy per field) and
everything else is batched over all pairs of all clips there (in windows of consecutive frames
of at most :data:`WINDOW_PIXELS` pixels, so memory does not grow with clip length or batch size;
one window holds 9 frames of 720p or 682 of 96 x 128; per-pair numbers do not depend on the
windows): 2-NN ratio matching (on the CPU
:func:`byte_ratio_match`: exact int8 GEMMs of the byte descriptors, one per pair, mapped over
the same pool; elsewhere :func:`~geocon_torch.features.matching.match_descriptors`, chunked
float32 batched matmuls, exact too as SIFT descriptors are integers), one padded 8-point solve
(:func:`~geocon_torch.geometry.fundamental_8pt`, float64, padding weighted 0), one Sampson pass
and masked per-pair / per-clip reductions (padding-invariant sums, so a clip's numbers are bit
for bit those it gets alone, whatever the other clips of the batch); torch stays on one CPU
thread meanwhile (:func:`one_torch_thread`). The per-clip blocks are built from one host copy of
all the results (:meth:`DPOMeasurement.lists`). Their code fits in float32 with kornia
(``find_fundamental`` + ``sampson_epipolar_distance``); agreement: error within 2 %, inlier rate
within 0.01 on the shared clips (tests/epipolar/test_epipolar_dpo.py).

Conventions: pixels (x, y) at the clip's native resolution; ``x2^T F x1 = 0`` with x1 in the
earlier frame of the pair.
"""
from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .._memory import release_freed_memory
from .._tensor_utils import to_device
from .._thread_settings import thread_settings
from ..config import EpipolarDPOConfig  # the ``epipolar_dpo`` section of GeoConConfig
from ..errors import ShapeError
from ..features.base import pad_keypoints
from ..features.matching import match_descriptors, pack_matches
from ..features.opencv_sift import OpenCVSIFT
from ..geometry import fundamental_8pt, sampson_distance
from ..geometry._reduce import padded_sum
from ..types import Correspondences, Keypoints
from .torch_path import GRAY_OPENCV_MAJOR, gray_uint8

DeviceLike = Union[None, str, torch.device]
#: ``pool_map(fn, n) -> [fn(0), ..., fn(n - 1)]`` (e.g. :meth:`OpenCVSIFT.parallel_map`)
PoolMap = Callable[[Callable[[int], Any], int], List[Any]]
#: one frame's SIFT on the host: xy (n, 2) float32 px, descriptors (n, 128) uint8, responses (n,)
Features = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]

#: OpenCV's ``nfeatures`` standing for "no cap" (OpenCV only trims above this count)
NO_KEYPOINT_CAP = 2 ** 31 - 1
#: squared norm given to padded keypoints in the byte matcher: never a nearest neighbour, and
#: ``PAD + 2 * 128 * 128^2`` still fits in int32
BYTE_PAD = 2 ** 30

#: device types on which the pairs are matched by :func:`byte_ratio_match` (exact int8 GEMMs,
#: one per pair: torch has no batched int8 GEMM on the CPU); on any other device by the batched
#: float matcher (one chunked batched matmul, exact too). benchmarks/batching.py empties it while
#: it counts the CUDA path on the CPU.
BYTE_MATCH_DEVICES = {"cpu"}

OK, NOT_ENOUGH_KEYPOINTS, TOO_FEW_MATCHES, FIT_FAILED = 0, 1, 2, 3
#: pair reason code -> text (``{k}`` / ``{m}``: the config's thresholds)
PAIR_REASONS = {NOT_ENOUGH_KEYPOINTS: "not enough keypoints (< {k} in a frame)",
                TOO_FEW_MATCHES: "too few matches (< {m})",
                FIT_FAILED: "fundamental matrix estimation failed"}


@dataclass
class DPOMeasurement:
    """What :func:`measure_dpo` returns for B clips with P pairs in all.

    Attributes:
        mean_epipolar_error: (B,) float64 px, mean over valid pairs (0 where none is valid).
        mean_inlier_rate: (B,) float64 in [0, 1] (0 where no pair is valid).
        valid_pairs, total_pairs: (B,) long.
        pair_clip: (P,) long, the clip of each pair; pair_frames: (P, 2) long positions of the
            pair's frames in its clip (source frame numbers are in ``frames[b]``).
        num_kp1, num_kp2, num_matches: (P,) long; epipolar_error, inlier_rate: (P,) float64
            (meaningful where valid); valid: (P,) bool; reason: (P,) long code (``PAIR_REASONS``).
        frames: per clip, the source frame numbers of its sampled frames.
        sizes: per clip, (H, W) of the analysed frames.
    """

    mean_epipolar_error: torch.Tensor
    mean_inlier_rate: torch.Tensor
    valid_pairs: torch.Tensor
    total_pairs: torch.Tensor
    pair_clip: torch.Tensor
    pair_frames: torch.Tensor
    num_kp1: torch.Tensor
    num_kp2: torch.Tensor
    num_matches: torch.Tensor
    epipolar_error: torch.Tensor
    inlier_rate: torch.Tensor
    valid: torch.Tensor
    reason: torch.Tensor
    frames: List[List[int]]
    sizes: List[Tuple[int, int]]

    def lists(self) -> DPOLists:
        """Every per-clip and per-pair tensor as Python lists, in two host copies for the whole
        batch (the integer columns, then the float64 ones), however many clips and pairs."""
        b, p = int(self.valid_pairs.shape[0]), int(self.pair_clip.shape[0])
        ints = torch.cat([t.long().reshape(-1) for t in (
            self.valid_pairs, self.total_pairs, self.pair_clip, self.num_kp1, self.num_kp2,
            self.num_matches, self.valid, self.reason, self.pair_frames)]).tolist()
        flts = torch.cat([self.mean_epipolar_error, self.mean_inlier_rate, self.epipolar_error,
                          self.inlier_rate]).double().tolist()
        cut = [b, b] + [p] * 6
        cols = [ints[sum(cut[:k]):sum(cut[:k + 1])] for k in range(len(cut))]
        frames_at = sum(cut)
        pair_frames = [ints[frames_at + 2 * k:frames_at + 2 * k + 2] for k in range(p)]
        return DPOLists(flts[:b], flts[b:2 * b], cols[0], cols[1], cols[2], pair_frames,
                        cols[3], cols[4], cols[5], flts[2 * b:2 * b + p], flts[2 * b + p:],
                        [bool(v) for v in cols[6]], cols[7], self.frames, self.sizes)


@dataclass
class DPOLists:
    """A :class:`DPOMeasurement` on the host (:meth:`DPOMeasurement.lists`): the same fields as
    Python lists (B per-clip values, P per-pair values; ``pair_frames`` P [i, j] lists)."""

    mean_epipolar_error: List[float]
    mean_inlier_rate: List[float]
    valid_pairs: List[int]
    total_pairs: List[int]
    pair_clip: List[int]
    pair_frames: List[List[int]]
    num_kp1: List[int]
    num_kp2: List[int]
    num_matches: List[int]
    epipolar_error: List[float]
    inlier_rate: List[float]
    valid: List[bool]
    reason: List[int]
    frames: List[List[int]]
    sizes: List[Tuple[int, int]]

    def clip_pairs(self) -> List[List[int]]:
        """Per clip the indices of its pairs (in pair order)."""
        out: List[List[int]] = [[] for _ in self.valid_pairs]
        for k, b in enumerate(self.pair_clip):
            out[b].append(k)
        return out


def one_torch_thread() -> ContextManager[None]:
    """Run torch's CPU ops on one thread inside the block (also usable as a decorator): a
    :func:`~geocon_torch._thread_settings.thread_settings` block, so overlapping calls in
    several threads put the user's count back when the last one ends. The protocol's CPU work
    is spread over the SIFT pool's workers; torch's own thread team would only spin against
    them between its small ops (measured: ~25 % more process CPU time and slower wall time on
    two cores). Results do not depend on it."""
    return thread_settings(torch_threads=1)


def sample_positions(num_frames: int, sampling_rate: int = 15) -> List[int]:
    """Positions 0, r, 2r, ... < ``num_frames`` of the frames the protocol uses."""
    return list(range(0, max(int(num_frames), 0), int(sampling_rate)))


def consecutive_pairs(counts: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Pairs of consecutive frames of several clips stacked along one frame axis.

    Args:
        counts: (B,) long, frames per clip (clip b owns rows ``sum(counts[:b]) + [0, counts[b])``).
    Returns:
        pairs (P, 2) long rows into the stacked frames, pair_clip (P,) long, pair_frames (P, 2)
        long positions inside the clip; P = sum(max(counts - 1, 0)).
    """
    counts = counts.long()
    per_clip = (counts - 1).clamp_min(0)
    pair_clip = torch.repeat_interleave(torch.arange(len(counts)), per_clip)
    first = torch.cumsum(per_clip, 0) - per_clip  # index of each clip's first pair
    local = torch.arange(int(per_clip.sum())) - first[pair_clip]
    offset = (torch.cumsum(counts, 0) - counts)[pair_clip]
    left = offset + local
    return torch.stack([left, left + 1], 1), pair_clip, torch.stack([local, local + 1], 1)


def _check_frames(frames: Sequence[torch.Tensor]) -> None:
    for k, f in enumerate(frames):
        if not isinstance(f, torch.Tensor) or f.ndim != 4 or f.shape[1] != 3 \
                or f.dtype != torch.uint8:
            got = (tuple(f.shape), f.dtype) if isinstance(f, torch.Tensor) else type(f).__name__
            raise ShapeError(f"clip {k}: epipolar-dpo takes (T, 3, H, W) uint8 RGB frames, "
                             f"got {got}")


def sift_extractor(config: EpipolarDPOConfig) -> OpenCVSIFT:
    """The protocol's OpenCV SIFT (defaults, no cap, raw positions) on ``config.workers``
    threads."""
    return OpenCVSIFT(max_keypoints=NO_KEYPOINT_CAP, centre_correction=False,
                      workers=config.workers)


def extract_sift(frames: Sequence[torch.Tensor], config: EpipolarDPOConfig,
                 device: DeviceLike = None, sift: Optional[OpenCVSIFT] = None) -> Keypoints:
    """OpenCV SIFT (defaults, no cap, raw positions) of every frame of every clip.

    Args:
        frames: per clip (T_b, 3, H_b, W_b) uint8 RGB frames (any device).
        config: the protocol settings (``workers``).
        device: where the padded Keypoints go (default CPU).
        sift: the extractor (default :func:`sift_extractor`).
    Returns:
        Keypoints (sum T_b, N, ...), frames in clip order, keypoints in OpenCV's order: xy and
        scores (responses) float32, descriptors **uint8** (OpenCV's SIFT values are bytes; use
        ``.float()`` for float matchers).
    """
    _check_frames(frames)
    return _pad_frames(_frame_features(frames, sift or sift_extractor(config)), device)


def _frame_features(frames: Sequence[torch.Tensor], sift: OpenCVSIFT) -> List[Features]:
    """Per frame of every clip (clip order) its SIFT (xy (n, 2) float32, descriptors (n, 128)
    uint8, responses (n,) float32) on the host, detected over the extractor's pool."""
    grays = gray_images(frames)

    def one(k: int) -> Features:  # in a worker thread
        xy, desc, response = sift.detect(grays[k])[:3]
        return xy.float(), desc.to(torch.uint8), response.float()

    return sift.parallel_map(one, len(grays))


def gray_images(frames: Sequence[torch.Tensor]) -> List[np.ndarray]:
    """Every frame of every clip (clip order) as its (H, W) uint8 gray image on the host, the
    protocol's ``cv2.cvtColor(RGB2GRAY)``. With the OpenCV whose weights
    :func:`~geocon_torch.epipolar.torch_path.gray_uint8` reproduces bit for bit, the frames of
    one size and device are converted in one batched op and reach the host in one copy; with
    another OpenCV each frame goes through ``cv2.cvtColor``.

    Args:
        frames: per clip (T_b, 3, H_b, W_b) uint8 RGB (any device).
    Returns:
        sum T_b arrays (H_b, W_b) uint8.
    """
    import cv2  # lazy: OpenCV is needed only when this protocol runs

    if int(cv2.__version__.split(".")[0]) != GRAY_OPENCV_MAJOR:
        return [cv2.cvtColor(f.permute(1, 2, 0).contiguous().numpy(), cv2.COLOR_RGB2GRAY)
                for clip in frames for f in clip.to("cpu")]
    groups: Dict[Tuple[Any, ...], List[int]] = {}
    for k, clip in enumerate(frames):
        groups.setdefault((tuple(clip.shape[-2:]), clip.device), []).append(k)
    out: List[Optional[List[np.ndarray]]] = [None] * len(frames)
    for ks in groups.values():
        batch = frames[ks[0]] if len(ks) == 1 else torch.cat([frames[k] for k in ks])
        gray = gray_uint8(batch).cpu().numpy()  # (sum T, H, W): one host copy per size
        start = 0
        for k in ks:
            t = int(frames[k].shape[0])
            out[k] = list(gray[start:start + t])
            start += t
    return [g for clip in out for g in clip or []]


def _pad_frames(feats: Sequence[Features], device: DeviceLike) -> Keypoints:
    """Per frame (xy (n, 2), descriptors (n, 128) uint8, response (n,)) -> padded Keypoints
    on ``device`` (zeros where padded; descriptors stay uint8)."""
    dev = torch.device("cpu") if device is None else torch.device(device)
    xys, descs, scores = zip(*feats) if feats else ((), (), ())
    return pad_keypoints(xys, descs, scores, 128, dev, torch.float32, desc_dtype=torch.uint8)


def byte_codes(kps: Keypoints) -> Tuple[torch.Tensor, torch.Tensor]:
    """uint8 SIFT descriptors -> ((T, N, 128) int8 codes ``descriptor - 128``, (T, N) int32
    squared code norms, ``BYTE_PAD`` where padded). Squared L2 distances are shift-invariant:
    ``|a - b|^2 = |a'|^2 + |b'|^2 - 2 a'.b'``."""
    desc = kps.descriptors
    if desc.dtype != torch.uint8:  # float copies of the byte values
        desc = desc.round().clamp(0, 255).to(torch.uint8)
    codes = desc.bitwise_xor(128).view(torch.int8)  # x ^ 0x80 read as int8 is x - 128
    shifted = codes.float()
    sq = (shifted * shifted).sum(-1).to(torch.int32)  # <= 128 * 128^2 < 2^24: exact in float32
    return codes, sq.masked_fill(~kps.mask, BYTE_PAD)


#: int32 distances held at once by one pair's matching (8 MiB): frame i's keypoints are matched
#: in blocks of rows, so memory stays bounded at any keypoint count (a 1080p frame has ~24k)
BLOCK_DISTANCES = 2 ** 21


def _nearest_two(codes: torch.Tensor, sq: torch.Tensor, i: int, j: int,
                 out: Optional[torch.Tensor] = None) -> torch.Tensor:
    """For every keypoint of frame i, its two smallest ``|b|^2 - 2 a.b`` over frame j's
    keypoints and the index of the smallest: (N, 3) long (exact int32 arithmetic), written into
    ``out`` ((N, 3) long, default a new tensor) and returned.

    Frame i's rows go in blocks of ``rows = BLOCK_DISTANCES // N`` (rows are independent, so the
    result does not depend on the block size) through one (rows, N) int32 buffer allocated once
    per pair (at most :data:`BLOCK_DISTANCES` entries, 8 MiB): each block's GEMM writes into it
    and its distances are formed in place, so a pair holds that buffer, the result and O(rows)
    more, however many blocks (a fresh (rows, N) output per block made glibc keep GBs of freed
    blocks: memory audit s30 F3). A tie of the best stays as the second best; the index of the
    best is ``min``'s."""
    n = int(codes.shape[1])
    out = torch.empty(n, 3, dtype=torch.long) if out is None else out
    if not n:
        return out
    rows = min(n, max(1, BLOCK_DISTANCES // n))
    dist_buf = torch.empty(rows, n, dtype=torch.int32)
    first_buf = torch.empty(rows, dtype=torch.int32)
    second_buf = torch.empty(rows, dtype=torch.int32)
    idx_buf = torch.empty(rows, dtype=torch.long)
    b, sq_b = codes[j].T, sq[j]
    for r in range(0, n, rows):
        a = codes[i, r:r + rows]
        k = int(a.shape[0])
        dist, first, second, idx = dist_buf[:k], first_buf[:k], second_buf[:k], idx_buf[:k]
        torch._int_mm(a, b, out=dist)
        dist.mul_(-2).add_(sq_b)  # |b|^2 - 2 a.b, exact in int32
        torch.min(dist, 1, out=(first, idx))
        dist.scatter_(1, idx[:, None], BYTE_PAD)  # a tie of the best stays as the second best
        torch.amin(dist, 1, out=second)
        out[r:r + k, 0], out[r:r + k, 1], out[r:r + k, 2] = first, second, idx
    return out


def byte_ratio_match(kps: Keypoints, pairs: torch.Tensor, ratio: float,
                     pool_map: Optional[PoolMap] = None) -> Correspondences:
    """Exact 2-NN ratio matching of byte descriptors (OpenCV SIFT's) on the CPU, as
    :func:`~geocon_torch.features.matching.match_descriptors` (``mutual=False``) computes it.

    One int8 GEMM per pair (``torch._int_mm``, int32 accumulation: distances are exact; the
    GEMM is ~6x and the whole matching ~2.5x cheaper than with the float32 batched matmul;
    torch has no batched int8 GEMM on the CPU),
    mapped over pairs by ``pool_map(fn, P)`` (default: in this thread); ratio test and packing
    are batched over all pairs. A match needs ``d1 < ratio * d2`` (L2, OpenCV's BFMatcher
    convention) and at least two keypoints in frame j.

    Args:
        kps: Keypoints (T, N, ...) with byte-valued descriptors; pairs: (P, 2) long (i, j).
    Returns:
        Correspondences (x1 from frame i, x2 from frame j, scores 1 - ratio).
    """
    codes, sq = byte_codes(kps)
    plist = pairs.tolist()
    n = int(kps.xy.shape[1])
    best = torch.zeros(len(plist), n, 3, dtype=torch.long)  # each pair writes its own row
    fn = lambda k: _nearest_two(codes, sq, *plist[k], out=best[k])  # noqa: E731
    todo = len(plist) if n else 0  # no keypoint anywhere: nothing to match
    (pool_map or (lambda f, m: [f(k) for k in range(m)]))(fn, todo)
    i, j = pairs[:, 0], pairs[:, 1]
    base = sq[i].long()  # |a'|^2 of frame i's keypoints
    d1 = (best[..., 0] + base).clamp_min(0).double().sqrt()
    d2 = (best[..., 1] + base).clamp_min(0).double().sqrt()
    counts = kps.counts
    ok = kps.mask[i] & (counts[j] >= 2)[:, None] & (d1 < ratio * d2)
    r = torch.where(ok, d1 / d2.clamp_min(1e-300), torch.ones_like(d1))
    x2 = kps.xy[j].gather(1, best[..., 2:].expand(-1, -1, 2))
    return pack_matches(kps.xy[i], x2, ok, (1.0 - r).to(kps.xy.dtype), pairs, counts[i],
                        counts[j])


def _pair_stats(kps: Keypoints, pairs: torch.Tensor, config: EpipolarDPOConfig,
                pool_map: Optional[PoolMap] = None) -> Tuple[torch.Tensor, ...]:
    """Matching, 8-point fit and Sampson statistics of all pairs at once (matching: the exact
    byte matcher on the devices of ``BYTE_MATCH_DEVICES`` (the CPU), mapped over ``pool_map``;
    the float matcher elsewhere).

    Returns (num_kp1, num_kp2, num_matches (P,) long, error, inlier_rate (P,) float64 px /
    fraction, valid (P,) bool, reason (P,) long)."""
    if kps.descriptors.device.type in BYTE_MATCH_DEVICES:
        corr = byte_ratio_match(kps, pairs, config.ratio, pool_map)
    else:  # float32 distances of byte descriptors are exact too
        corr = match_descriptors(dataclasses.replace(kps, descriptors=kps.descriptors.float()),
                                 pairs, ratio=config.ratio, mutual=False)
    mask = corr.mask
    nm = mask.sum(1)
    enough_kp = (corr.num_kp1 >= config.min_keypoints) & (corr.num_kp2 >= config.min_keypoints)
    fit = enough_kp & (nm >= config.min_matches)
    err = torch.zeros(nm.shape, dtype=torch.float64, device=nm.device)
    rate = torch.zeros_like(err)
    finite = torch.zeros_like(fit)
    if bool(fit.any()):
        idx = fit.nonzero()[:, 0]  # only fitted pairs are solved (one batched solve)
        m = mask[idx]
        width = int(m.sum(1).max())
        x1, x2, m = corr.x1[idx, :width].double(), corr.x2[idx, :width].double(), m[:, :width]
        F = fundamental_8pt(x1, x2, m.double())
        d = torch.sqrt(sampson_distance(F, x1, x2, squared=True) + config.eps)
        n = m.sum(1).double()
        e = padded_sum(torch.where(m, d, torch.zeros_like(d))) / n  # independent of width
        r = (m & (d <= config.inlier_threshold_px)).sum(1).double() / n
        ok = torch.isfinite(F).flatten(1).all(1) & torch.isfinite(e)
        err[idx], rate[idx], finite[idx] = torch.where(ok, e, 0.0), torch.where(ok, r, 0.0), ok
    reason = torch.full_like(nm, OK)
    reason = torch.where(fit & ~finite, torch.full_like(nm, FIT_FAILED), reason)
    reason = torch.where(~(nm >= config.min_matches), torch.full_like(nm, TOO_FEW_MATCHES), reason)
    reason = torch.where(~enough_kp, torch.full_like(nm, NOT_ENOUGH_KEYPOINTS), reason)
    return corr.num_kp1, corr.num_kp2, nm, err, rate, fit & finite, reason


#: pixels of frames whose gray images and keypoints :func:`measure_dpo` holds at once (8.4 Mpx:
#: 9 frames of 720p, 4 of 1080p; ~15 MB of gray images, keypoints and matching per Mpx of
#: textured frames): the consecutive frames of all clips are detected and their pairs matched in
#: windows of at most this many pixels (at least ``workers + 1`` frames, so every SIFT worker has
#: a pair), so memory stays bounded at any clip length and batch size (memory audit s30 F4).
#: A frame ending one window starts the next (detected once); per-pair results are the same.
WINDOW_PIXELS = 2 ** 23


def _windows(pixels: Sequence[int], last: Sequence[bool], min_frames: int
             ) -> List[Tuple[int, int]]:
    """Windows ``[s, e)`` over stacked frames of ``pixels[g]`` pixels each (``last[g]``: frame g
    ends its clip; every clip has >= 2 frames): each takes frames while they fit in
    :data:`WINDOW_PIXELS` or it has fewer than ``max(min_frames, 2)``; the next one starts at its
    last frame unless that frame ends its clip, so every pair ``(g, g + 1)`` of a clip lies in
    exactly one window."""
    out: List[Tuple[int, int]] = []
    s, least = 0, max(int(min_frames), 2)
    while s < len(pixels):
        e, total = s + 1, pixels[s]
        while e < len(pixels) and (e - s < least or total + pixels[e] <= WINDOW_PIXELS):
            total, e = total + pixels[e], e + 1
        out.append((s, e))
        s = e if last[e - 1] else e - 1
    return out


def _windowed_stats(clips: Sequence[torch.Tensor], pairs: torch.Tensor,
                    config: EpipolarDPOConfig, device: torch.device) -> Tuple[torch.Tensor, ...]:
    """:func:`_pair_stats` of the consecutive ``pairs`` (P, 2) (host, rows of the stacked frames
    of ``clips``, each (T_b >= 2, 3, H_b, W_b) uint8) in windows of :func:`_windows` (one window:
    :func:`extract_sift` of all frames, then all pairs). Each window detects its frames (the
    frame it shares with the previous window is carried over, not detected again), pads their
    keypoints and matches / fits its pairs, then gives the freed memory back to the OS
    (:func:`~geocon_torch._memory.release_freed_memory`; glibc would otherwise keep the
    windows' SIFT and matching temporaries); the per-pair tensors are concatenated (pair order).
    """
    _check_frames(clips)
    sift = sift_extractor(config)
    rows = [(k, t) for k, f in enumerate(clips) for t in range(int(f.shape[0]))]
    pixels = [int(clips[k].shape[-2]) * int(clips[k].shape[-1]) for k, _ in rows]
    last = [t == int(clips[k].shape[0]) - 1 for k, t in rows]
    windows = _windows(pixels, last, sift.workers + 1)
    if len(windows) == 1:
        kps = extract_sift(clips, config, device, sift)
        return _pair_stats(kps, to_device(pairs, device), config, sift.parallel_map)
    left = pairs[:, 0].tolist()  # host tensor: ascending rows
    parts, carry, p0 = [], [], 0
    for s, e in windows:
        new = rows[s + len(carry):e]  # (clip, frame) of the frames to detect, clip order
        runs: Dict[int, List[int]] = {}
        for k, t in new:
            runs.setdefault(k, []).append(t)
        feats = carry + _frame_features([clips[k][ts[0]:ts[-1] + 1] for k, ts in runs.items()],
                                        sift)
        p1 = bisect.bisect_left(left, e - 1, p0)  # the pairs whose left frame is in [s, e - 1)
        kps = _pad_frames(feats, device)
        parts.append(_pair_stats(kps, to_device(pairs[p0:p1] - s, device), config,
                                 sift.parallel_map))
        carry, p0 = ([] if last[e - 1] else feats[-1:]), p1
        del feats, kps
        release_freed_memory()  # the window's SIFT and matching temporaries: back to the OS
    return tuple(torch.cat(col) for col in zip(*parts))


@one_torch_thread()
def measure_dpo(frames: Sequence[torch.Tensor], config: Optional[EpipolarDPOConfig] = None,
                device: DeviceLike = None, frame_numbers: Optional[Sequence[Sequence[int]]] = None
                ) -> DPOMeasurement:
    """The Epipolar-DPO statistics of B clips whose frames are already sampled.

    Args:
        frames: per clip (T_b, 3, H_b, W_b) uint8 RGB, the sampled frames only (see
            :func:`sample_positions`); clips may differ in size and length.
        config: protocol settings (default :class:`EpipolarDPOConfig`).
        device: where matching and fitting run (default: the first clip's device).
        frame_numbers: per clip the source frame number of each given frame (recorded only;
            default 0, r, 2r, ...).
    Returns:
        :class:`DPOMeasurement` (per-clip tensors on ``device``). Torch runs on one CPU
        thread meanwhile (:func:`one_torch_thread`). A clip with fewer than two frames has no
        pair and is not detected; with no pair at all nothing is detected or matched. The
        frames of all clips are detected and matched in windows of consecutive frames
        (:data:`WINDOW_PIXELS`): only a window's gray images and keypoints are alive at once.
    """
    cfg = config or EpipolarDPOConfig()
    dev = torch.device(device) if device is not None else (
        frames[0].device if len(frames) else torch.device("cpu"))
    sizes = [int(f.shape[0]) for f in frames]
    counts = torch.tensor(sizes, dtype=torch.long)
    paired = [k for k, t in enumerate(sizes) if t > 1]  # a lone frame is in no pair
    pairs, pair_clip, pair_frames = consecutive_pairs(counts * (counts > 1))
    if paired:
        stats = _windowed_stats([frames[k] for k in paired], pairs, cfg, dev)
    else:  # no pair at all: nothing to detect or match
        none = torch.zeros(0, dtype=torch.long, device=dev)
        stats = (none, none, none, none.double(), none.double(), none.bool(), none)
    owner = to_device(pair_clip, dev)
    valid = stats[5]
    b = len(frames)
    nv = torch.zeros(b, dtype=torch.long, device=dev).index_add_(0, owner, valid.long())
    total = torch.zeros(b, dtype=torch.long, device=dev).index_add_(
        0, owner, torch.ones_like(owner))
    sums = torch.zeros(2, b, dtype=torch.float64, device=dev).index_add_(
        1, owner, torch.stack(stats[3:5]) * valid.double())
    means = sums / nv.clamp_min(1).double()
    numbers = [list(map(int, n)) for n in frame_numbers] if frame_numbers is not None else \
        [list(range(0, t * cfg.sampling_rate, cfg.sampling_rate)) for t in sizes]
    return DPOMeasurement(means[0], means[1], nv, total, owner, pair_frames.to(dev), *stats,
                          frames=numbers, sizes=[(int(f.shape[-2]), int(f.shape[-1]))
                                                 for f in frames])


def clip_reasons(h: DPOLists, config: EpipolarDPOConfig) -> List[Optional[str]]:
    """Per clip of ``h`` (:meth:`DPOMeasurement.lists`) why it has no valid pair (None when it
    has one)."""
    out: List[Optional[str]] = []
    for b, pairs in enumerate(h.clip_pairs()):
        if h.valid_pairs[b] > 0:
            out.append(None)
            continue
        if h.total_pairs[b] == 0:
            out.append(f"fewer than two sampled frames (frames 0, {config.sampling_rate}, ...: "
                       f"a clip needs at least {config.sampling_rate + 1} frames)")
            continue
        codes = [h.reason[k] for k in pairs]
        top = max(set(codes), key=lambda c: (codes.count(c), -c))
        text = PAIR_REASONS[top].format(k=config.min_keypoints, m=config.min_matches)
        out.append(f"no valid pair: {codes.count(top)} of {len(codes)} pairs: {text}")
    return out


def pair_records(h: DPOLists, config: EpipolarDPOConfig) -> List[List[Dict[str, Any]]]:
    """Per clip of ``h`` (:meth:`DPOMeasurement.lists`) its ``per_pair`` rows (source frame
    numbers, counts, error, rate)."""
    out = []
    for b, pairs in enumerate(h.clip_pairs()):
        rows = []
        for k in pairs:
            i, j = h.pair_frames[k]
            ok, code = h.valid[k], h.reason[k]
            rows.append({"left_frame": h.frames[b][i], "right_frame": h.frames[b][j],
                         "keypoints": [h.num_kp1[k], h.num_kp2[k]],
                         "num_matches": h.num_matches[k],
                         "epipolar_error": h.epipolar_error[k] if ok else None,
                         "inlier_rate": h.inlier_rate[k] if ok else None, "valid": ok,
                         "reason": None if code == OK else PAIR_REASONS[code].format(
                             k=config.min_keypoints, m=config.min_matches)})
        out.append(rows)
    return out
