"""The original GVGC protocol (Li et al. 2024, "Sora generates videos with stunning geometrical
consistency"), reproduced from its public code (``PatchAutoEvaluate.py`` + ``core_function.py``).

* frames 0..70 of the clip (``epipolar.gvgc.min_frames`` = 71; shorter clips are
  not_applicable), each resized to 1280x720 (cv2.resize default, bilinear) and converted to
  grayscale;
* pairs (i, i + d) for d in (60, 50, 40, 30, 20, 10), i = 0, s, 2s, ... with
  s = int((70 - d) / 10) while i + d <= 70: 11 pairs per interval, 66 in all, less the pairs
  of two identical frames of a clip with held frames (``Clip.meta["motion"]["held"]``: every
  frame i + 1 .. i + d held, a still stretch of d + 1 frames; :func:`gvgc_clip_rows`);
* SIFT with up to 40,000 features, FLANN 2-NN (the original's ``cv2.FlannBasedMatcher()``;
  ``epipolar.gvgc.matcher="bf"`` for exact 2-NN), Lowe ratio 0.85;
* ``cv2.findFundamentalMat(FM_RANSAC, 3 px)`` (OpenCV defaults: confidence 0.99, 1000 iterations;
  ``epipolar.gvgc.ransac``);
* per pair over the RANSAC inliers: the one-sided distance of x2 to the epipolar line F x1 (px at
  1280x720, :func:`geocon_torch.geometry.epipolar_line_distance`): mean, median, RMSE, MAE, and
  the keep rate = inliers / ratio-filtered matches;
* per interval d and overall: mean of the means, median of the medians, sqrt(mean(RMSE^2)),
  mean MAE, mean keep rate, mean inlier and match counts (the original's ``*_err_whole.csv``).

Two paths: :func:`gvgc_section_opencv` (the original, pair by pair) and
:func:`gvgc_sections_torch` (batched: features and exact 2-NN ``match_descriptors`` over all
clips, then per clip one ``ransac_fundamental(residual="epipolar_max", scoring="ransac")`` over
its 66 pairs with per-pair seeds from the source frame numbers (``protocol.pair_seeds``), so a
clip's numbers do not depend on the batch; the pair layout, validity and aggregation above are
shared).

Differences from the original, on purpose: a pair with fewer than 8 matches, no F or fewer than
``min_inliers`` inliers is reported invalid and left out of the aggregates (the original crashes);
frames come from the clip tensor instead of PNG files on disk.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import cv2
import numpy as np
import torch

from .._tensor_utils import masked_mean, masked_median
from ..config import GVGC_MATCHER_CHOICES, EpipolarConfig
from ..errors import InputError
from ..features import get_extractor, match_descriptors
from ..geometry import epipolar_line_distance, ransac_fundamental
from ..io.pairs import gvgc_pairs, held_of
from ..types import Clip
from .opencv_path import clip_frame_rgb, ratio_matches, run_opencv
from .protocol import pair_seeds, source_frames_of
from .torch_path import gray_uint8_levels

MIN_MATCHES = 8  # below this OpenCV's 8-point / RANSAC F estimation is not attempted


def line_error_stats(F: np.ndarray, p1: np.ndarray, p2: np.ndarray) -> Dict[str, float]:
    """mean / median / rmse / mae of the one-sided epipolar line distance (px)."""
    d = epipolar_line_distance(torch.from_numpy(np.asarray(F, np.float64))[None],
                               torch.from_numpy(p1.astype(np.float64))[None],
                               torch.from_numpy(p2.astype(np.float64))[None])[0].numpy()
    return {"mean_error": float(d.mean()), "median_error": float(np.median(d)),
            "rmse": float(np.sqrt(np.mean(d ** 2))), "mae": float(np.abs(d).mean())}


def aggregate(records: Sequence[Dict[str, Any]]) -> Dict[str, Any]:
    """The original's clip summary over the valid pair records."""
    valid = [r for r in records if r["valid"]]
    out: Dict[str, Any] = {"pairs": len(records), "valid_pairs": len(valid)}
    if not valid:
        out.update({k: None for k in ("mean_error", "median_error", "rmse", "mae", "keep_rate",
                                      "num_inliers", "num_pts")})
        return out
    col = lambda k: np.asarray([r[k] for r in valid], np.float64)  # noqa: E731
    out.update({"mean_error": float(col("mean_error").mean()),
                "median_error": float(np.median(col("median_error"))),
                "rmse": float(np.sqrt(np.mean(col("rmse") ** 2))),
                "mae": float(col("mae").mean()),
                "keep_rate": float(col("keep_rate").mean()),
                "num_inliers": float(col("num_inliers").mean()),
                "num_pts": float(col("num_pts").mean())})
    return out


def pair_record(d: int, i: int, j: int, kp: Tuple[int, int], num_pts: int,
                num_inliers: int, stats: Optional[Dict[str, float]], config: EpipolarConfig,
                error: Optional[str] = None) -> Dict[str, Any]:
    """One per-pair dict; ``valid`` when F was fitted with at least ``min_inliers`` inliers."""
    rec: Dict[str, Any] = {"interval": int(d), "left_index": int(i), "right_index": int(j),
                           "keypoints_left": int(kp[0]), "keypoints_right": int(kp[1]),
                           "num_pts": int(num_pts), "num_inliers": int(num_inliers)}
    if error is None and (stats is None or num_inliers < int(config.min_inliers)):
        error = ("not enough feature matches" if num_pts < MIN_MATCHES else
                 "fundamental matrix estimation failed" if stats is None else
                 "not enough epipolar inliers")
    rec["valid"] = error is None
    if error is None:
        rec.update(stats)
        rec["keep_rate"] = num_inliers / float(num_pts)
    else:
        rec["error"] = error
    return rec


def gvgc_summary(records: List[Dict[str, Any]], config: EpipolarConfig,
                 info: Dict[str, Any]) -> Dict[str, Any]:
    """Section dict of the gvgc preset from its per-pair records."""
    overall = aggregate(records)
    per_interval = {str(int(d)): aggregate([r for r in records if r["interval"] == int(d)])
                    for d in config.gvgc.intervals}
    ok = overall["valid_pairs"] > 0
    section: Dict[str, Any] = {"preset": "gvgc", **info, **overall, "per_interval": per_interval,
                               "fallback_used": False, "method": "sift_fm_ransac",
                               "status": "ok" if ok else "not_applicable",
                               "reason": None if ok else "no valid GVGC frame pairs",
                               "per_pair": records}
    return section


def too_short(clip: Clip, config: EpipolarConfig, implementation: str
              ) -> Optional[Dict[str, Any]]:
    """The not_applicable section of a clip shorter than ``gvgc.min_frames``, else None."""
    need = int(config.gvgc.min_frames)
    if clip.num_frames >= need:
        return None
    return {"preset": "gvgc", "implementation": implementation, "frames": clip.num_frames,
            "pairs": 0, "valid_pairs": 0, "per_interval": {}, "per_pair": [],
            "fallback_used": False, "method": None, "status": "not_applicable",
            "reason": (f"gvgc preset needs at least {need} frames (pairs up to "
                       f"{max(config.gvgc.intervals)} frames apart over frames 0..{need - 1}); "
                       f"clip has {clip.num_frames}")}


def gvgc_frame_rgb(clip: Clip, index: int, config: EpipolarConfig) -> np.ndarray:
    """(720, 1280, 3) uint8 RGB frame resized as the original (cv2.resize, bilinear)."""
    h, w = (int(v) for v in config.gvgc.size)
    return cv2.resize(clip_frame_rgb(clip, index), (w, h))


def _matcher(config: EpipolarConfig):
    if config.gvgc.matcher == "flann":
        return cv2.FlannBasedMatcher()
    if config.gvgc.matcher == "bf":
        return cv2.BFMatcher(cv2.NORM_L2)
    raise InputError(f"epipolar.gvgc.matcher must be one of {GVGC_MATCHER_CHOICES}, got "
                     f"{config.gvgc.matcher!r}")


def gvgc_clip_rows(clip: Clip, config: EpipolarConfig) -> np.ndarray:
    """(P, 3) int64 rows (d, i, i + d) a clip is measured on: ``io.pairs.gvgc_pairs`` over
    frames 0..min_frames-1, less the rows of two identical frames of its held positions
    (``io.pairs.held_of``; a clip without held frames: all 66 rows of the defaults)."""
    return gvgc_pairs(config.gvgc.min_frames, config.gvgc.intervals, held_of(clip))


def gvgc_section_opencv(clip: Clip, config: EpipolarConfig) -> Dict[str, Any]:
    """The gvgc preset through OpenCV, one pair at a time, as the original code."""
    short = too_short(clip, config, "opencv")
    if short is not None:
        return short
    rows = gvgc_clip_rows(clip, config)
    info = {"implementation": "opencv", "features": "opencv-sift", "frames": clip.num_frames,
            "analysis_size": [int(v) for v in config.gvgc.size]}
    def work() -> List[Dict[str, Any]]:
        sift = cv2.SIFT_create(int(config.gvgc.sift_features))
        feats = {}
        for f in np.unique(rows[:, 1:]).tolist():
            gray = cv2.cvtColor(gvgc_frame_rgb(clip, f, config), cv2.COLOR_RGB2GRAY)
            kps, des = sift.detectAndCompute(gray, None)
            feats[f] = (list(kps or []), des)
        matcher = _matcher(config)
        return [_gvgc_pair(int(d), int(i), int(j), feats, matcher, config)
                for d, i, j in rows.tolist()]

    return gvgc_summary(run_opencv(work, config.opencv_threads, config.seed), config, info)


def _gvgc_pair(d: int, i: int, j: int, feats: Dict, matcher, config: EpipolarConfig
               ) -> Dict[str, Any]:
    (kp1, d1), (kp2, d2) = feats[i], feats[j]
    kp = (len(kp1), len(kp2))
    if d1 is None or d2 is None or len(kp1) < 2 or len(kp2) < 2:
        return pair_record(d, i, j, kp, 0, 0, None, config)
    p1, p2 = ratio_matches(kp1, d1, kp2, d2, config.gvgc.ratio, matcher)
    good = p1.shape[0]
    if good < MIN_MATCHES:
        return pair_record(d, i, j, kp, good, 0, None, config)
    try:
        rc = config.gvgc.ransac
        F, mask = cv2.findFundamentalMat(p1, p2, cv2.FM_RANSAC, float(rc.threshold_px),
                                         float(rc.confidence), int(rc.max_iterations))
    except cv2.error as exc:
        return pair_record(d, i, j, kp, good, 0, None, config,
                           error=f"fundamental matrix estimation error: {str(exc).strip()[:200]}")
    if F is None or mask is None or F.shape[0] < 3:
        return pair_record(d, i, j, kp, good, 0, None, config)
    inl = mask.reshape(-1).astype(bool)
    n = int(inl.sum())
    stats = line_error_stats(F[:3, :3], p1[inl], p2[inl]) if n > 0 else None
    return pair_record(d, i, j, kp, good, n, stats, config)


def gvgc_frames_torch(clip: Clip, config: EpipolarConfig, device: torch.device) -> torch.Tensor:
    """(71, 1, 720, 1280) float gray in [0, 1]: frames 0..70 resized as RGB (bilinear, half-pixel
    centres like cv2.resize) to uint8 levels, then cv2's RGB2GRAY weights."""
    rgb = clip.frames[: int(config.gvgc.min_frames)].to(device).to(torch.float32)
    rgb = torch.nn.functional.interpolate(rgb, size=tuple(int(v) for v in config.gvgc.size),
                                          mode="bilinear", align_corners=False)
    return gray_uint8_levels(rgb.round().clamp(0, 255).to(torch.uint8)) / 255.0


def _fit_line_errors(x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor,
                     seeds: torch.Tensor, config: EpipolarConfig) -> List[torch.Tensor]:
    """One batched FM_RANSAC-like fit of (P, N) matches -> [inliers (P,), valid (P,), mean,
    median, RMSE (P,) of the one-sided epipolar line distance over the inliers (px)]."""
    rc = config.gvgc.ransac
    fit = ransac_fundamental(x1, x2, mask, threshold=float(rc.threshold_px),
                             residual="epipolar_max", confidence=float(rc.confidence),
                             max_iterations=int(rc.max_iterations), scoring="ransac",
                             local_optimization=False, seed=seeds,
                             min_inliers=int(config.min_inliers))
    inl = fit.inliers & mask & fit.valid[:, None]
    d = epipolar_line_distance(fit.model.to(torch.float64), x1, x2)
    mean, _ = masked_mean(d, inl)
    med, _ = masked_median(d, inl)
    ms, _ = masked_mean(d * d, inl)
    return [inl.sum(1), fit.valid, mean, med, ms.sqrt()]


def gvgc_sections_torch(clips: Sequence[Clip], config: EpipolarConfig, device: torch.device,
                        features: str) -> List[Dict[str, Any]]:
    """The gvgc preset batched: one feature extraction over the frames of all clips, one
    ``match_descriptors`` (exact 2-NN, ratio 0.85) over all their pairs, and per clip ONE
    ``ransac_fundamental`` (residual "epipolar_max" = OpenCV's FM_RANSAC error, 3 px, plain
    inlier counting, confidence 0.99, 1000 iterations) over its 66 pairs (less those of two
    identical frames: :func:`gvgc_clip_rows`). The fit runs per clip,
    on the clip's own match width and with per-pair seeds (``protocol.pair_seeds``), so a
    clip's numbers do not depend on the other clips (a common width would pad every pair to the
    batch's largest match count, up to 40,000)."""
    out: List[Optional[Dict[str, Any]]] = [too_short(c, config, "torch") for c in clips]
    todo = [k for k, s in enumerate(out) if s is None]
    if not todo:
        return out  # type: ignore[return-value]
    rows = [gvgc_clip_rows(clips[k], config) for k in todo]  # per clip: its held frames
    first = np.cumsum([0] + [len(r) for r in rows]).tolist()  # clip b: pairs first[b]..
    n = int(config.gvgc.min_frames)
    gray = torch.cat([gvgc_frames_torch(clips[k], config, device) for k in todo])
    kps = get_extractor(features, max_keypoints=int(config.gvgc.sift_features),
                        device=device).extract(gray)
    pairs = torch.cat([torch.as_tensor(r[:, 1:], device=device) + b * n
                       for b, r in enumerate(rows)])
    corr = match_descriptors(kps, pairs, ratio=float(config.gvgc.ratio))
    x1, x2 = corr.x1.to(torch.float64), corr.x2.to(torch.float64)
    matches = corr.mask.sum(1)
    mask = corr.mask & (matches >= MIN_MATCHES)[:, None]
    stats: List[List[torch.Tensor]] = []
    sources = source_frames_of([clips[k] for k in todo])  # one host transfer
    for b, k in enumerate(todo):  # per clip: its (up to 66) pairs in one batched fit
        sl = slice(first[b], first[b + 1])
        used = corr.mask[sl].any(0).nonzero()
        width = int(used.max()) + 1 if used.numel() else 0
        seeds = torch.from_numpy(pair_seeds(config.seed, sources[b][rows[b][:, 1:]],
                                            "gvgc"))
        stats.append(_fit_line_errors(x1[sl, :width], x2[sl, :width], mask[sl, :width], seeds,
                                      config))
    host = [t.cpu().numpy() for t in (corr.num_kp1, corr.num_kp2, matches)] + [
        torch.cat([s[i] for s in stats]).cpu().numpy() for i in range(5)]
    info = {"implementation": "torch", "features": features,
            "analysis_size": [int(v) for v in config.gvgc.size]}
    for b, k in enumerate(todo):
        records = []
        for p, (dd, i, j) in enumerate(rows[b].tolist()):
            q = first[b] + p
            kp1, kp2, m, ni, ok, mu, md, rm = (h[q] for h in host)
            stats = ({"mean_error": float(mu), "median_error": float(md), "rmse": float(rm),
                      "mae": float(mu)} if ok and ni > 0 else None)
            records.append(pair_record(dd, i, j, (kp1, kp2), int(m), int(ni), stats, config))
        out[k] = gvgc_summary(records, config, {**info, "frames": clips[k].num_frames})
    return out  # type: ignore[return-value]
