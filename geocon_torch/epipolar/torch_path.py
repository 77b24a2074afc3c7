"""Batched torch path of the WorldAtlas protocol (CPU or CUDA).

The same protocol as :mod:`.opencv_path` (stages, validity and aggregation live in
:mod:`.protocol`), measured in batches: the analysis frames of all clips go through one feature
extraction per frame size (``features.get_extractor``), all pairs through one
``features.match_descriptors`` (or one ``features.lk_tracks`` in the tracking stage) per size,
and the pairs of *all* clips through ONE ``geometry.ransac_fundamental`` call (residual
"sampson", ``epipolar.ransac``: threshold_px, confidence, max_iterations), followed by batched
masked medians of the Sampson distances. No Python loop over pairs on the hot path. The LK
stage's patch-NCC guard samples all patches of all pairs with one ``grid_sample`` per chunk of
pairs.

RANSAC seeds are per pair (``protocol.pair_seeds``: config seed, the pair's source frame numbers
and the stage), so a clip's numbers do not depend on the other clips of the batch or on its
position in it.

Grayscale and resizing reproduce OpenCV on the same uint8 frames: ``cv2.COLOR_RGB2GRAY``'s
fixed-point weights (bit-exact) and an exact area-weighted (``cv2.INTER_AREA``) resize written as
two matrix products, rounded to uint8 levels (equal to OpenCV's within one grey level, at
rounding ties only).
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from .._tensor_utils import masked_mean, masked_median, to_device
from ..config import RESIZE_INTERPOLATION_CHOICES, EpipolarConfig
from ..errors import InputError
from ..features import get_extractor, lk_tracks, match_descriptors
from ..features.base import resolve_backend
from ..features.lk import patch_ncc
from ..geometry import ransac_fundamental, sampson_distance
from ..io.pairs import held_of
from ..types import Clip, Correspondences, Keypoints, concat_correspondences
from .protocol import (LOCATION_GRID_PX, PairMeasurements, Stage, TrackingGuard, analysis_size,
                       clip_info, clip_pairs, enough_matches, pair_seeds, run_protocol,
                       source_frames_of, tracking_guard)

# cv2.COLOR_RGB2GRAY of OpenCV 5 on 8-bit images, bit-exact over all 2^24 colours:
# (19596 R + 38470 G + 7470 B + 2^15) >> 16 (OpenCV 4 uses 14-bit weights; <0.3% differ by 1)
_GRAY_WEIGHTS = (19596, 38470, 7470)
_GRAY_SHIFT = 16


#: the OpenCV major version whose RGB2GRAY the weights above reproduce bit for bit
GRAY_OPENCV_MAJOR = 5


def _gray_levels(frames: torch.Tensor) -> torch.Tensor:
    """(T, 3, H, W) uint8 RGB -> (T, H, W) int32 gray levels 0..255 (the weights above)."""
    f = frames.to(torch.int32)
    return (f[:, 0] * _GRAY_WEIGHTS[0] + f[:, 1] * _GRAY_WEIGHTS[1] + f[:, 2] * _GRAY_WEIGHTS[2]
            + (1 << (_GRAY_SHIFT - 1))) >> _GRAY_SHIFT


def gray_uint8_levels(frames: torch.Tensor) -> torch.Tensor:
    """(T, 3, H, W) uint8 RGB -> (T, 1, H, W) float32 gray in 0..255 (integers), as OpenCV."""
    return _gray_levels(frames).unsqueeze(1).to(torch.float32)


def gray_uint8(frames: torch.Tensor) -> torch.Tensor:
    """(T, 3, H, W) uint8 RGB -> (T, H, W) uint8 gray: ``cv2.cvtColor(RGB2GRAY)`` of each frame
    (bit for bit with OpenCV ``GRAY_OPENCV_MAJOR``), all frames in one batched op."""
    return _gray_levels(frames).to(torch.uint8)


def area_matrix(n_in: int, n_out: int, device: torch.device,
                dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """(n_out, n_in) weights of an exact area (box) downscale: output cell k averages the
    source interval [k s, (k + 1) s), s = n_in / n_out, weighting pixels by their overlap."""
    s = n_in / n_out
    lo = torch.arange(n_out, device=device, dtype=dtype)[:, None] * s
    src = torch.arange(n_in, device=device, dtype=dtype)[None, :]
    overlap = (torch.minimum(src + 1, lo + s) - torch.maximum(src, lo)).clamp_min(0)
    return overlap / overlap.sum(1, keepdim=True)


def resize_gray(gray: torch.Tensor, size: Tuple[int, int], interpolation: str) -> torch.Tensor:
    """Resize (T, 1, H, W) gray levels (0..255) to ``size`` and round to integer levels."""
    h, w = size
    if (h, w) == tuple(gray.shape[-2:]):
        return gray
    if interpolation == "area":
        ah = area_matrix(gray.shape[-2], h, gray.device)
        aw = area_matrix(gray.shape[-1], w, gray.device)
        out = torch.einsum("hy,tcyx,wx->tchw", ah, gray.to(torch.float64), aw)
        if gray.shape[-2] % h == 0 and gray.shape[-1] % w == 0:
            # OpenCV's integer-factor fast path rounds half up: (sum + n / 2) // n
            return (out + 0.5).floor().clamp(0, 255).to(torch.float32)
    elif interpolation == "linear":
        out = F.interpolate(gray, size=(h, w), mode="bilinear", align_corners=False)
    else:
        raise InputError(f"resize_interpolation must be one of {RESIZE_INTERPOLATION_CHOICES}, "
                         f"got {interpolation!r}")
    return out.round().clamp(0, 255).to(torch.float32)


def analysis_frames(clip: Clip, indices: Sequence[int], config: EpipolarConfig,
                    device: torch.device) -> torch.Tensor:
    """(len(indices), 1, H', W') float gray in [0, 1] at the analysis size, on ``device``."""
    idx = to_device(list(indices), clip.frames.device, torch.long)
    gray = gray_uint8_levels(clip.frames.index_select(0, idx).to(device))
    size = analysis_size(gray.shape[-2], gray.shape[-1], int(config.max_width))
    return resize_gray(gray, size, config.resize_interpolation) / 255.0


class _Batch:
    """Analysis frames, features and pair indices of several clips, grouped by frame size."""

    def __init__(self, clips: Sequence[Clip], pairs: Sequence[np.ndarray],
                 config: EpipolarConfig, device: torch.device, features: str):
        self.config, self.device, self.features = config, device, features
        self.pairs = pairs
        self.frames: Dict[int, torch.Tensor] = {}  # clip -> (F, 1, H, W) used frames
        self.local_pairs: Dict[int, torch.Tensor] = {}  # clip -> (P, 2) into its used frames
        self.source_pairs: Dict[int, np.ndarray] = {}  # clip -> (P, 2) source frame numbers
        sources = source_frames_of(clips)  # one host transfer for the batch
        for k, (clip, pr) in enumerate(zip(clips, pairs)):
            if len(pr) == 0:
                continue
            self.source_pairs[k] = sources[k][pr]
            used, inverse = np.unique(pr, return_inverse=True)
            self.frames[k] = analysis_frames(clip, used.tolist(), config, device)
            self.local_pairs[k] = to_device(inverse.reshape(-1, 2), device, torch.long)
        # frame size -> (keypoints of every clip of that size, clip -> first row)
        self._keypoints: Dict[Tuple[int, int], Tuple[Keypoints, Dict[int, int]]] = {}
        self._extractor = None

    def groups(self, ids: Sequence[int]) -> List[List[int]]:
        by_size: Dict[Tuple[int, int], List[int]] = {}
        for k in ids:
            by_size.setdefault(tuple(self.frames[k].shape[-2:]), []).append(k)
        return list(by_size.values())

    def stacked(self, group: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor]:
        """Frames of the group's clips stacked (T, 1, H, W) and their pairs offset into it."""
        offsets = np.cumsum([0] + [len(self.frames[k]) for k in group])
        gray = torch.cat([self.frames[k] for k in group])
        pairs = torch.cat([self.local_pairs[k] + int(o) for k, o in zip(group, offsets)])
        return gray, pairs

    def extractor(self):
        if self._extractor is None:
            self._extractor = get_extractor(self.features,
                                            max_keypoints=int(self.config.sift_features),
                                            device=self.device)
        return self._extractor

    def correspondences(self, stage: Stage, group: Sequence[int]
                        ) -> Tuple[Correspondences, Optional[TrackingGuard]]:
        """Matches of the group's pairs; in the LK stage the tracks after the patch-NCC guard
        (mask = kept tracks) and the guard's per-pair report."""
        gray, pairs = self.stacked(group)
        if not stage.uses_descriptors:
            c = self.config
            corr = lk_tracks(gray, pairs, **c.tracking.lk_kwargs(c.sift_features, "torch"))
            ncc = patch_ncc(gray, pairs, corr.x1, corr.x2, int(c.tracking.ncc_window))
            guard = tracking_guard(corr.mask, corr.scores, ncc, stage, c)
            # coverage is counted against the detected corners of frame i (both sides)
            return Correspondences(corr.x1, corr.x2, guard.kept, corr.scores, corr.pairs,
                                   corr.num_kp1, corr.num_kp1), guard
        return match_descriptors(self.keypoints(group), pairs, ratio=float(stage.ratio)), None

    def keypoints(self, group: Sequence[int]) -> Keypoints:
        """Keypoints of the group's frames (stacked as :meth:`stacked`). Every frame is
        described once: the first request for a frame size extracts the frames of all clips
        of that size, and later stages (the relaxed retry of a few clips) take their rows."""
        size = tuple(self.frames[group[0]].shape[-2:])
        if size not in self._keypoints:
            same = [k for k in self.frames if tuple(self.frames[k].shape[-2:]) == size]
            starts = np.cumsum([0] + [len(self.frames[k]) for k in same])
            kps = self.extractor().extract(torch.cat([self.frames[k] for k in same]))
            self._keypoints[size] = kps, {k: int(s) for k, s in zip(same, starts)}
        kps, first = self._keypoints[size]
        rows = torch.cat([torch.arange(first[k], first[k] + len(self.frames[k])) for k in group])
        if rows.numel() == kps.xy.shape[0] and bool((rows == torch.arange(rows.numel())).all()):
            return kps
        rows = rows.to(kps.xy.device)
        return Keypoints(kps.xy[rows], kps.descriptors[rows], kps.scores[rows], kps.mask[rows],
                         {name: v[rows] for name, v in kps.extra.items()})


def stage_width(stage: Stage, config: EpipolarConfig) -> int:
    """The padded width N of a stage's RANSAC batch: the stage's bound on matches per pair
    (``sift_features`` keypoints, ``tracking.max_corners`` corners). A constant width makes a
    pair's RANSAC (pre-verification and LO subsets, masked sums) independent of the other pairs
    of the batch; only a pair above the bound (SIFT ties) widens it."""
    if stage.uses_descriptors:
        return int(config.sift_features)
    return config.tracking.corners(config.sift_features)


def distinct_locations(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(P,) int64 distinct locations among the masked points of each row: x (P, N, 2) px on the
    ``LOCATION_GRID_PX`` grid, mask (P, N) bool. Batched: each location becomes one int64 key
    (grid x * 2^32 + grid y: one key per location for |y| < 2e6 px), masked-out entries the
    largest int64 (sorted to the end); the count is the number of sorted valid keys that
    differ from their predecessor."""
    q = torch.round(x.to(torch.float64) / LOCATION_GRID_PX)
    key = q[..., 0].to(torch.int64) * (1 << 32) + q[..., 1].to(torch.int64)
    key = torch.where(mask, key, torch.full_like(key, torch.iinfo(torch.int64).max))
    srt, order = torch.sort(key, dim=1)
    valid = torch.gather(mask, 1, order)
    new = valid.clone()
    new[:, 1:] &= srt[:, 1:] != srt[:, :-1]
    return new.sum(1)


def distinct_counts(x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(P,) int64 distinct correspondences of each pair among the masked matches (P, N):
    min(distinct locations in frame i, in frame j), as ``protocol.distinct_correspondences``
    counts one pair of the OpenCV path."""
    return torch.minimum(distinct_locations(x1, mask), distinct_locations(x2, mask))


def measure_batch(batch: _Batch, stage: Stage, ids: Sequence[int]) -> List[PairMeasurements]:
    """Measure the pairs of the listed clips: one RANSAC call over all of their pairs, with
    per-pair seeds (``protocol.pair_seeds``) and the constant width ``stage_width``."""
    c = batch.config
    order: List[int] = []
    parts: List[Correspondences] = []
    guards: List[TrackingGuard] = []  # LK stage only
    for group in batch.groups(ids):
        corr, guard = batch.correspondences(stage, group)
        parts.append(corr)
        guards += [guard] if guard is not None else []
        order.extend(group)
    corr = concat_correspondences(parts, stage_width(stage, c)).to(batch.device)
    seeds = torch.from_numpy(np.concatenate([pair_seeds(c.seed, batch.source_pairs[k],
                                                        stage.method) for k in order]))
    x1, x2 = corr.x1.to(torch.float64), corr.x2.to(torch.float64)
    matches = corr.mask.sum(1)
    enough = enough_matches(matches, stage)
    mask = corr.mask & enough[:, None]
    fit = ransac_fundamental(x1, x2, mask, corr.scores.to(torch.float64),
                             threshold=float(c.ransac.threshold_px), residual="sampson",
                             confidence=float(c.ransac.confidence),
                             max_iterations=int(c.ransac.max_iterations), seed=seeds)
    fitted = fit.valid & enough
    inl = fit.inliers & mask & fitted[:, None]
    dist = sampson_distance(fit.model.to(torch.float64), x1, x2)
    med, _ = masked_median(dist, inl)  # 0 where a pair has no inlier (or no match at all)
    mean, _ = masked_mean(dist, inl)
    # matches, inliers and their distinct counts (the NFA's n, k) in one host read
    counts = torch.stack([matches, inl.sum(1), distinct_counts(x1, x2, corr.mask),
                          distinct_counts(x1, x2, inl)]).cpu().numpy()
    host = {k: v.cpu().numpy() for k, v in dict(
        kp1=corr.num_kp1, kp2=corr.num_kp2, fitted=fitted, med=med, mean=mean).items()}
    host.update(zip(("matches", "inliers", "d_matches", "d_inliers"), counts))
    extra_keys = list(guards[0].extra) if guards else []  # the guards' reports, in ``order``
    host.update({key: np.concatenate([g.extra[key] for g in guards]) for key in extra_keys})
    notes = [n for g in guards for n in g.notes]
    out: Dict[int, PairMeasurements] = {}
    start = 0
    for k in order:
        sl = slice(start, start + len(batch.pairs[k]))
        start = sl.stop
        extra = {key: host[key][sl] for key in extra_keys}
        out[k] = PairMeasurements(batch.pairs[k], host["kp1"][sl], host["kp2"][sl],
                                  host["matches"][sl], host["fitted"][sl], host["inliers"][sl],
                                  host["med"][sl].astype(np.float64),
                                  host["mean"][sl].astype(np.float64),
                                  notes=notes[sl], extra=extra,
                                  distinct_matches=host["d_matches"][sl],
                                  distinct_inliers=host["d_inliers"][sl])
    return [out[k] for k in ids]


def resolve_features(config: EpipolarConfig, device: torch.device,
                     features: Optional[str] = None) -> str:
    """Feature backend of the torch path: ``features`` or ``config.features``; "auto" means
    the features default of ``device`` (torch-sift on CUDA, opencv-sift on the CPU)."""
    return resolve_backend(features or config.features, device)


def torch_sections(clips: Sequence[Clip], config: EpipolarConfig,
                   device: Optional[torch.device] = None,
                   features: Optional[str] = None,
                   explicit: Optional[Sequence] = None) -> List[Dict[str, Any]]:
    """WorldAtlas sections of several clips through the batched torch path.

    Args:
        clips: clips at any size (grouped by analysis size for feature extraction).
        config: the epipolar section of the config.
        device: where features, matching and RANSAC run (None: the first clip's device).
        features: feature backend name overriding ``config.features``.
        explicit: optional per-clip (P, 2) pairs replacing the protocol's pair selection.
    """
    if device is None:
        device = clips[0].frames.device if clips else torch.device("cpu")
    device = torch.device(device)
    name = resolve_features(config, device, features)
    pairs = [clip_pairs(c.num_frames, config, None if explicit is None else explicit[k],
                        held_of(c)) for k, c in enumerate(clips)]
    infos = [clip_info(clip, pr, config, implementation="torch", features=name, device=str(device))
             for clip, pr in zip(clips, pairs)]
    batch = _Batch(clips, pairs, config, device, name)
    return run_protocol(lambda stage, ids: measure_batch(batch, stage, ids), pairs, config, infos)
