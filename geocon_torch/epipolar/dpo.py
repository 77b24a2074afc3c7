"""The Epipolar-DPO protocol (Kupyn et al. 2025, "Epipolar Geometry Improves Video Generation
Models"; public code ``KupynOrest/epipolar-dpo``, ``metrics/video_evaluation/epipolar.py``),
batched over all frame pairs of all clips.

Protocol (their defaults, :class:`EpipolarDPOConfig`):

* frames 0, 15, 30, ... of the clip (``sampling_rate``); pairs of consecutive sampled frames;
* gray = ``cv2.cvtColor(RGB2GRAY)`` of the uint8 frame at native resolution (their BGR2GRAY of
  the BGR frame: the same pixels);
* OpenCV SIFT with default settings and no keypoint cap; OpenCV's raw keypoint positions
  (the Sampson distances do not depend on a common shift of all points anyway);
* brute-force L2 2-NN, Lowe ratio 0.75 (``d1 < 0.75 d2``), no mutual check;
* a pair is invalid with fewer than 8 keypoints in either frame or fewer than 20 matches;
* F from the unweighted Hartley-normalised 8-point solver (rank 2) on **all** matches, no RANSAC;
* per match ``d = sqrt(sampson^2 + 1e-8)`` (px); per pair the mean ``d`` (``epipolar_error``)
  and the fraction with ``d <= 5`` px (``inlier_rate``);
* per clip the means over valid pairs (``mean_epipolar_error``, ``mean_inlier_rate``); a clip
  with no valid pair is ``not_applicable``.

Execution: SIFT runs per frame on the CPU over the extractor's thread pool (OpenCV releases the
GIL); the keypoints then move to ``device`` and everything else is batched over all pairs of all
clips there: one chunked 2-NN ratio matching (:func:`~geocon_torch.features.matching.
match_descriptors`; SIFT descriptors are integers, so float32 distances are exact), one padded
8-point solve (:func:`~geocon_torch.geometry.fundamental_8pt`, float64, padding weighted 0), one
Sampson pass and masked per-pair / per-clip reductions. Their code fits in float32 with kornia
(``find_fundamental`` + ``sampson_epipolar_distance``); agreement: error within 2 %, inlier rate
within 0.01 on the shared clips (tests/test_epipolar_dpo.py).

Conventions: pixels (x, y) at the clip's native resolution; ``x2^T F x1 = 0`` with x1 in the
earlier frame of the pair.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import InputError, ShapeError
from ..features.matching import match_descriptors
from ..features.opencv_sift import OpenCVSIFT
from ..geometry import fundamental_8pt, sampson_distance
from ..types import Keypoints

DeviceLike = Union[None, str, torch.device]

#: OpenCV's ``nfeatures`` standing for "no cap" (OpenCV only trims above this count)
NO_KEYPOINT_CAP = 2 ** 31 - 1

OK, NOT_ENOUGH_KEYPOINTS, TOO_FEW_MATCHES, FIT_FAILED = 0, 1, 2, 3
#: pair reason code -> text (``{k}`` / ``{m}``: the config's thresholds)
PAIR_REASONS = {NOT_ENOUGH_KEYPOINTS: "not enough keypoints (< {k} in a frame)",
                TOO_FEW_MATCHES: "too few matches (< {m})",
                FIT_FAILED: "fundamental matrix estimation failed"}


@dataclass(frozen=True)
class EpipolarDPOConfig:
    """Settings of the Epipolar-DPO protocol (defaults: the reference code's).

    Attributes:
        sampling_rate: every n-th frame is used (frames 0, n, 2n, ...).
        ratio: Lowe ratio of the 2-NN matching.
        min_keypoints: a pair needs at least this many SIFT keypoints in both frames.
        min_matches: a pair needs at least this many ratio-test matches.
        inlier_threshold_px: a match is an inlier when its Sampson distance is <= this (px).
        eps: added to the squared Sampson distance before the square root (px^2).
        workers: SIFT threads (None: ``os.cpu_count()``; results do not depend on it).
    """

    sampling_rate: int = 15
    ratio: float = 0.75
    min_keypoints: int = 8
    min_matches: int = 20
    inlier_threshold_px: float = 5.0
    eps: float = 1e-8
    workers: Optional[int] = None

    def __post_init__(self) -> None:
        if int(self.sampling_rate) < 1 or int(self.min_matches) < 8:
            raise InputError(f"epipolar-dpo needs sampling_rate >= 1 and min_matches >= 8, got "
                             f"{self.sampling_rate}, {self.min_matches}")
        if not 0 < float(self.ratio) <= 1 or float(self.inlier_threshold_px) <= 0:
            raise InputError(f"epipolar-dpo needs ratio in (0, 1] and a positive inlier "
                             f"threshold, got {self.ratio}, {self.inlier_threshold_px}")

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)


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


def extract_sift(frames: Sequence[torch.Tensor], config: EpipolarDPOConfig,
                 device: DeviceLike = None) -> Keypoints:
    """OpenCV SIFT (defaults, no cap, raw positions) of every frame of every clip.

    Args:
        frames: per clip (T_b, 3, H_b, W_b) uint8 RGB frames (any device).
        config: the protocol settings (``workers``).
        device: where the padded Keypoints go (default CPU).
    Returns:
        Keypoints (sum T_b, N, ...) float32, frames in clip order, descriptors OpenCV's raw
        (integer-valued) SIFT vectors.
    """
    import cv2  # lazy: OpenCV is needed only when this protocol runs

    _check_frames(frames)
    hwc = [f.detach().to("cpu").permute(0, 2, 3, 1).contiguous().numpy() for f in frames]
    flat = [(c, t) for c, clip in enumerate(hwc) for t in range(clip.shape[0])]
    sift = OpenCVSIFT(max_keypoints=NO_KEYPOINT_CAP, centre_correction=False,
                      workers=config.workers)

    def image(k: int) -> List[np.ndarray]:  # converted inside the worker thread
        c, t = flat[k]
        return [cv2.cvtColor(hwc[c][t], cv2.COLOR_RGB2GRAY)]

    return sift.extract_many(len(flat), image, [None], device, torch.float32)[0]


def _pair_stats(kps: Keypoints, pairs: torch.Tensor, config: EpipolarDPOConfig
                ) -> Tuple[torch.Tensor, ...]:
    """Matching, 8-point fit and Sampson statistics of all pairs at once.

    Returns (num_kp1, num_kp2, num_matches (P,) long, error, inlier_rate (P,) float64 px /
    fraction, valid (P,) bool, reason (P,) long)."""
    corr = match_descriptors(kps, pairs, ratio=config.ratio, mutual=False)
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
        e = torch.where(m, d, torch.zeros_like(d)).sum(1) / n
        r = (m & (d <= config.inlier_threshold_px)).sum(1).double() / n
        ok = torch.isfinite(F).flatten(1).all(1) & torch.isfinite(e)
        err[idx], rate[idx], finite[idx] = torch.where(ok, e, 0.0), torch.where(ok, r, 0.0), ok
    reason = torch.full_like(nm, OK)
    reason = torch.where(fit & ~finite, torch.full_like(nm, FIT_FAILED), reason)
    reason = torch.where(~(nm >= config.min_matches), torch.full_like(nm, TOO_FEW_MATCHES), reason)
    reason = torch.where(~enough_kp, torch.full_like(nm, NOT_ENOUGH_KEYPOINTS), reason)
    return corr.num_kp1, corr.num_kp2, nm, err, rate, fit & finite, reason


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
        :class:`DPOMeasurement` (per-clip tensors on ``device``).
    """
    cfg = config or EpipolarDPOConfig()
    dev = torch.device(device) if device is not None else (
        frames[0].device if len(frames) else torch.device("cpu"))
    counts = torch.tensor([int(f.shape[0]) for f in frames], dtype=torch.long)
    pairs, pair_clip, pair_frames = consecutive_pairs(counts)
    kps = extract_sift(frames, cfg, dev)
    stats = _pair_stats(kps, pairs.to(dev), cfg)
    owner = pair_clip.to(dev)
    valid = stats[5]
    b = len(frames)
    nv = torch.zeros(b, dtype=torch.long, device=dev).index_add_(0, owner, valid.long())
    total = torch.zeros(b, dtype=torch.long, device=dev).index_add_(
        0, owner, torch.ones_like(owner))
    sums = torch.zeros(2, b, dtype=torch.float64, device=dev).index_add_(
        1, owner, torch.stack(stats[3:5]) * valid.double())
    means = sums / nv.clamp_min(1).double()
    numbers = [list(map(int, n)) for n in frame_numbers] if frame_numbers is not None else \
        [list(range(0, int(c) * cfg.sampling_rate, cfg.sampling_rate)) for c in counts]
    return DPOMeasurement(means[0], means[1], nv, total, owner, pair_frames.to(dev), *stats,
                          frames=numbers, sizes=[(int(f.shape[-2]), int(f.shape[-1]))
                                                 for f in frames])


def clip_reason(m: DPOMeasurement, b: int, config: EpipolarDPOConfig) -> Optional[str]:
    """Why clip ``b`` of ``m`` has no valid pair (None when it has one)."""
    if int(m.valid_pairs[b]) > 0:
        return None
    if int(m.total_pairs[b]) == 0:
        return (f"fewer than two sampled frames (frames 0, {config.sampling_rate}, ...: a clip "
                f"needs at least {config.sampling_rate + 1} frames)")
    codes = m.reason[m.pair_clip == b].tolist()
    top = max(set(codes), key=lambda c: (codes.count(c), -c))
    text = PAIR_REASONS[top].format(k=config.min_keypoints, m=config.min_matches)
    return f"no valid pair: {codes.count(top)} of {len(codes)} pairs: {text}"


def pair_records(m: DPOMeasurement, b: int, config: EpipolarDPOConfig) -> List[Dict[str, Any]]:
    """The ``per_pair`` rows of clip ``b`` (source frame numbers, counts, error, rate)."""
    sel = (m.pair_clip == b).nonzero()[:, 0].cpu()
    cols = {k: getattr(m, k)[sel.to(m.valid.device)].tolist() for k in
            ("pair_frames", "num_kp1", "num_kp2", "num_matches", "epipolar_error",
             "inlier_rate", "valid", "reason")}
    rows = []
    for k in range(len(sel)):
        i, j = cols["pair_frames"][k]
        ok = bool(cols["valid"][k])
        code = cols["reason"][k]
        rows.append({"left_frame": m.frames[b][i], "right_frame": m.frames[b][j],
                     "keypoints": [cols["num_kp1"][k], cols["num_kp2"][k]],
                     "num_matches": cols["num_matches"][k],
                     "epipolar_error": cols["epipolar_error"][k] if ok else None,
                     "inlier_rate": cols["inlier_rate"][k] if ok else None, "valid": ok,
                     "reason": None if code == OK else PAIR_REASONS[code].format(
                         k=config.min_keypoints, m=config.min_matches)})
    return rows
