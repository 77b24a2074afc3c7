"""The WorldAtlas epipolar protocol, written once and shared by both execution paths.

A *path* (OpenCV reference or batched torch) only measures: for each frame pair of a stage it
reports keypoint counts, ratio-filtered matches, whether F was estimated, the RANSAC inlier count
and the median / mean Sampson distance (px, not squared, eq. 1 of the WorldAtlas page) over the
inliers. Everything else lives here: the analysis size, the pair layout, the stage sequence
(primary -> relaxed matching -> Shi-Tomasi + LK), the LK stage's photometric (patch NCC) guard,
the per-pair RANSAC seeds, per-pair validity, clip aggregation, the fallback trail and the
section dict.

Conventions: pixels (x, y) at the *analysis* resolution (the clip's frames downscaled so the width
is at most ``max_width``); ``x2^T F x1 = 0`` with x1 in frame i of the pair (i, j).
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .._tensor_utils import masked_median
from ..config import EpipolarConfig
from ..errors import InputError, ShapeError
from ..io.pairs import worldatlas_pairs

PRIMARY = "sift"
RELAXED = "relaxed_matching"
TRACKING = "shi_tomasi_lk"

NOT_ENOUGH_MATCHES = "not enough feature matches"
NOT_ENOUGH_TRACKS = "not enough LK tracks"
FIT_FAILED = "fundamental matrix estimation failed"
NOT_ENOUGH_INLIERS = "not enough epipolar inliers"
NOT_ENOUGH_CONSISTENT_TRACKS = "not enough LK tracks with patch NCC >= {:g}"
NOT_MEANINGFUL = "inlier set not meaningful (NFA > {:g})"

#: grid (px) on which keypoint locations are compared when the NFA counts distinct
#: correspondences: two matches whose locations in a frame round to the same multiple of it
#: are one location (SIFT returns one location with several orientations)
LOCATION_GRID_PX = 1e-3

# stage codes of the per-pair RANSAC seeds (``pair_seeds``)
STAGE_CODES = {PRIMARY: 0, RELAXED: 1, TRACKING: 2, "gvgc": 3}
_M32 = 0xFFFFFFFF


@dataclass(frozen=True)
class Stage:
    """One attempt of the protocol.

    Attributes:
        method: "sift" (primary), "relaxed_matching" or "shi_tomasi_lk".
        ratio: Lowe ratio of the descriptor stages (None for LK tracking).
        min_matches: a pair with fewer matches (or tracks) is not fitted.
        reason: why this stage runs (None for the primary stage).
    """

    method: str
    ratio: Optional[float]
    min_matches: int
    reason: Optional[str] = None

    @property
    def uses_descriptors(self) -> bool:
        return self.method != TRACKING


def protocol_stages(config: EpipolarConfig) -> List[Stage]:
    """The stage sequence: primary, then (only when no pair is valid) relaxed matching with ratio
    max(ratio, relaxed_ratio) and at least ``relaxed_min_matches``, then Shi-Tomasi + LK tracks
    (``tracking``: forward-backward check, then the patch-NCC guard ``tracking_guard``)."""
    stages = [Stage(PRIMARY, float(config.ratio), int(config.min_matches))]
    if not config.fallback_enabled:
        return stages
    relaxed_ratio = max(float(config.ratio), float(config.relaxed_ratio))
    if (relaxed_ratio, int(config.relaxed_min_matches)) != (stages[0].ratio, stages[0].min_matches):
        stages.append(Stage(RELAXED, relaxed_ratio, int(config.relaxed_min_matches),
                            "no valid epipolar frame pairs with primary settings"))
    stages.append(Stage(TRACKING, None, int(config.tracking.min_tracks),
                        "no valid epipolar frame pairs with descriptor matching"))
    return stages


def analysis_size(height: int, width: int, max_width: int) -> Tuple[int, int]:
    """(H, W) the frames are analysed at: unchanged when ``width <= max_width``, else width
    ``max_width`` and height ``max(round(height * max_width / width), 1)`` (aspect kept)."""
    if width <= max_width:
        return int(height), int(width)
    scale = float(max_width) / float(width)
    return max(int(round(height * scale)), 1), int(max_width)


def decode_plan(num_frames: int, config: EpipolarConfig,
                held: Optional[Sequence[int]] = None) -> Tuple[np.ndarray, np.ndarray]:
    """What to decode of a long clip: (indices (F,) sorted frame numbers the protocol reads,
    pairs (P, 2) positions into those F frames). ``read_clip(path, indices=indices)`` and
    ``epipolar_section(clip, pairs=pairs)`` then measure exactly the pairs of the full clip.
    ``held``: the clip's held positions (``io.pairs.held_of``): its pairs of two identical
    frames are not measured (``io.pairs.drop_held_pairs``)."""
    full = worldatlas_pairs(num_frames, config.pair_stride, config.max_pairs, held)
    indices, inverse = np.unique(full, return_inverse=True)
    return indices, inverse.reshape(-1, 2).astype(np.int64)


def clip_pairs(num_frames: int, config: EpipolarConfig, pairs: Any = None,
               held: Optional[Sequence[int]] = None) -> np.ndarray:
    """The (P, 2) pairs of a clip: ``io.pairs.worldatlas_pairs`` (less the pairs of two
    identical frames of ``held``, the clip's held positions: ``io.pairs.held_of``) or the
    explicit ``pairs`` (positions, as given: ``held`` is not applied)."""
    if pairs is None:
        return worldatlas_pairs(num_frames, config.pair_stride, config.max_pairs, held)
    arr = np.asarray(pairs.cpu() if isinstance(pairs, torch.Tensor) else pairs, dtype=np.int64)
    arr = arr.reshape(-1, 2)
    if len(arr) and (arr.min() < 0 or arr.max() >= num_frames):
        raise ShapeError(f"pairs must index frames 0..{num_frames - 1}, got range "
                         f"[{arr.min()}, {arr.max()}]")
    return arr


def source_frames(clip: Any) -> np.ndarray:
    """(T,) int64 source frame numbers of a Clip's frames (``clip.frame_indices``; positions
    0..T-1 when that does not list one number per frame)."""
    return source_frames_of([clip])[0]


def source_frames_of(clips: Sequence[Any]) -> List[np.ndarray]:
    """:func:`source_frames` of every clip, read with one host transfer when the clips'
    ``frame_indices`` share a device (not one per clip)."""
    idx = [c.frame_indices.reshape(-1) for c in clips]
    if len({t.device for t in idx}) == 1 and idx:
        flat = np.asarray(torch.cat(idx).cpu(), np.int64)
        parts = np.split(flat, np.cumsum([int(t.numel()) for t in idx])[:-1])
    else:
        parts = [np.asarray(t.cpu(), np.int64) for t in idx]
    return [p if len(p) == c.num_frames else np.arange(c.num_frames, dtype=np.int64)
            for p, c in zip(parts, clips)]


def pair_seeds(seed: int, frames: np.ndarray, stage: str) -> np.ndarray:
    """(P,) int64 RANSAC seeds of pairs, from the config seed, the pair's *source* frame numbers
    (i, j) (``frames`` (P, 2)) and the stage only -- never from the pair's position in a batch,
    so a clip scored inside a batch gives the results it gives alone:
    ``(seed * 1000003 + stage_code * 104729 + i * 7919 + j) mod 2^32`` (stage codes in
    ``STAGE_CODES``; the geometry core hashes each seed into its pair's random stream)."""
    f = np.asarray(frames, np.int64).reshape(-1, 2) & _M32
    base = (int(seed) * 1000003 + STAGE_CODES[stage] * 104729) & _M32
    return (base + f[:, 0] * 7919 + f[:, 1]) & _M32


@dataclass
class TrackingGuard:
    """The LK stage after the photometric guard (both paths), for P pairs of N padded tracks.

    Attributes:
        kept: (P, N) bool tracks passing forward-backward AND ``ncc >= tracking.min_ncc``.
        extra: per-pair numpy arrays for ``per_pair``: ``tracked_points`` (forward-backward
            consistent tracks), ``median_forward_backward_error`` (px) and ``median_track_ncc``
            over those tracks (NaN -> null where there are none).
        notes: per-pair failure note where the guard (not the tracker) left too few tracks.
    """

    kept: torch.Tensor
    extra: Dict[str, np.ndarray]
    notes: List[Optional[str]]


def tracking_guard(fb_ok: torch.Tensor, scores: torch.Tensor, ncc: torch.Tensor,
                   stage: Stage, config: EpipolarConfig) -> TrackingGuard:
    """Apply the photometric guard to LK tracks.

    Args:
        fb_ok: (P, N) bool tracks that passed the forward-backward check (``lk_tracks`` mask).
        scores: (P, N) ``lk_tracks`` scores = 1 / (1 + forward-backward error px).
        ncc: (P, N) zero-mean NCC (:func:`~geocon_torch.features.lk.zncc`) of the patches
            around x1 in frame i and x2 in frame j (``tracking.ncc_window`` square, bilinear
            samples).
        stage: the tracking stage (its ``min_matches`` = ``tracking.min_tracks``).
    """
    thr = float(config.tracking.min_ncc)
    kept = fb_ok & (ncc >= thr)
    fb = torch.where(fb_ok, 1.0 / scores.to(torch.float64).clamp_min(1e-12) - 1.0,
                     torch.zeros_like(ncc, dtype=torch.float64))
    n_fb, n_kept = fb_ok.sum(1), kept.sum(1)
    med_fb, _ = masked_median(fb, fb_ok, fill=float("nan"))  # NaN where nothing was tracked
    med_ncc, _ = masked_median(ncc.to(torch.float64), fb_ok, fill=float("nan"))
    n_fb_h, n_kept_h = n_fb.cpu().numpy(), n_kept.cpu().numpy()
    note = NOT_ENOUGH_CONSISTENT_TRACKS.format(thr)
    notes = [note if (f >= stage.min_matches and k < stage.min_matches) else None
             for f, k in zip(n_fb_h.tolist(), n_kept_h.tolist())]
    extra = {"tracked_points": n_fb_h.astype(np.int64),
             "median_forward_backward_error": med_fb.cpu().numpy().astype(np.float64),
             "median_track_ncc": med_ncc.cpu().numpy().astype(np.float64)}
    return TrackingGuard(kept, extra, notes)


@dataclass
class PairMeasurements:
    """What a path measured for the P pairs of one clip in one stage (numpy, all shape (P,)).

    Attributes:
        pairs: (P, 2) frame positions (i, j).
        kp_left, kp_right: keypoints detected in frames i and j (detected corners of frame i,
            for both, in the LK stage: coverage is counted against detected corners).
        matches: ratio-filtered matches (LK: tracks passing the forward-backward check and the
            patch-NCC guard).
        fitted: F was estimated (False when skipped for too few matches or when it failed).
        inliers: RANSAC inliers (0 where not fitted).
        median_error, mean_error: Sampson distance over the inliers, px (0 where not fitted).
        notes: optional per-pair backend messages (e.g. an OpenCV exception text).
        extra: optional per-pair arrays reported in ``per_pair`` (e.g. "tracked_points").
        distinct_matches, distinct_inliers: optional distinct correspondences among the
            matches / inliers (``distinct_correspondences``), the (n, k) of the NFA; None:
            ``matches`` / ``inliers`` (hand-built measurements).
    """

    pairs: np.ndarray
    kp_left: np.ndarray
    kp_right: np.ndarray
    matches: np.ndarray
    fitted: np.ndarray
    inliers: np.ndarray
    median_error: np.ndarray
    mean_error: np.ndarray
    notes: List[Optional[str]] = field(default_factory=list)
    extra: Dict[str, np.ndarray] = field(default_factory=dict)
    distinct_matches: Optional[np.ndarray] = None
    distinct_inliers: Optional[np.ndarray] = None

    @property
    def num_pairs(self) -> int:
        return int(len(self.pairs))

    def nfa_counts(self) -> Tuple[np.ndarray, np.ndarray]:
        """(n, k) (P,) of the NFA: the distinct matches / inliers where the path counted them,
        else the raw ``matches`` / ``inliers``."""
        n = self.matches if self.distinct_matches is None else self.distinct_matches
        k = self.inliers if self.distinct_inliers is None else self.distinct_inliers
        return n, k


def distinct_correspondences(x1: np.ndarray, x2: np.ndarray) -> int:
    """Distinct correspondences among N matches (x1, x2) (N, 2) px of one pair: min(distinct
    locations in frame i, distinct locations in frame j), locations compared on the
    ``LOCATION_GRID_PX`` grid. A keypoint matched several times (repeated SIFT locations with
    other orientations, several matches to one keypoint) counts once, as the a contrario model
    of ``log10_nfa`` assumes independent correspondences. NumPy, one pair (the OpenCV path);
    the torch path counts all pairs at once (``torch_path.distinct_counts``)."""
    if len(x1) == 0:
        return 0
    return min(len(np.unique(np.round(np.asarray(x, np.float64).reshape(-1, 2)
                                      / LOCATION_GRID_PX).astype(np.int64), axis=0))
               for x in (x1, x2))


def enough_matches(matches: Any, stage: Stage) -> Any:
    """Pairs with enough matches to be fitted (works on numpy arrays and torch tensors)."""
    return matches >= stage.min_matches


@dataclass
class Attempt:
    """One evaluated stage of one clip."""

    stage: Stage
    measurements: PairMeasurements
    valid: np.ndarray  # (P,) bool
    failures: List[Optional[str]]  # per-pair failure reason (None where valid)
    log10_nfa: Optional[np.ndarray] = None  # (P,) fallback stages: ``log10_nfa`` where fitted

    @property
    def valid_pairs(self) -> int:
        return int(self.valid.sum())

    def failure_summary(self) -> str:
        counts = Counter(f for f in self.failures if f)
        parts = ", ".join(f"{reason} x{n}" for reason, n in sorted(counts.items()))
        return (f"{self.stage.method}: {self.measurements.num_pairs} pairs, "
                f"{self.valid_pairs} valid" + (f" ({parts})" if parts else ""))

    def trail_entry(self) -> Dict[str, Any]:
        counts = Counter(f for f in self.failures if f)
        return {"method": self.stage.method, "ratio": self.stage.ratio,
                "min_matches": self.stage.min_matches, "reason": self.stage.reason,
                "pairs": self.measurements.num_pairs, "valid_pairs": self.valid_pairs,
                "failures": dict(sorted(counts.items()))}


def log10_nfa(matches: np.ndarray, inliers: np.ndarray, image_size: Sequence[int],
              threshold_px: float) -> np.ndarray:
    """a contrario significance of an F inlier set (Moisan & Stival 2004, ORSA), per pair:
    log10 NFA = log10((n - 7) C(n, k) C(k, 7) alpha^(k - 7)) for k inliers among n matches,
    alpha = min(2 * threshold * diagonal / area, 1) the chance that a point uniform in the
    (H, W) image falls within ``threshold`` px of a given epipolar line. NFA bounds the
    expected number of inlier sets this good that matches without any geometric relation would
    produce. (n, k) are (P,) integer arrays; pairs with k <= 7 get +inf (7 points always fit).
    ``evaluate`` passes the *distinct* correspondences (``distinct_correspondences``): a
    repeated match is not an independent draw, and counting it again would lower the NFA."""
    h, w = (float(v) for v in image_size)
    alpha = min(2.0 * float(threshold_px) * float(np.hypot(h, w)) / max(h * w, 1.0), 1.0)
    ln10 = np.log(10.0)

    def log10_binom(a: float, b: float) -> float:
        return (math.lgamma(a + 1) - math.lgamma(b + 1) - math.lgamma(a - b + 1)) / ln10

    out = np.full(len(matches), np.inf)
    for p, (n, k) in enumerate(zip(np.asarray(matches).tolist(), np.asarray(inliers).tolist())):
        if 7 < k <= n:
            out[p] = (np.log10(n - 7) + log10_binom(n, k) + log10_binom(k, 7)
                      + (k - 7) * np.log10(alpha))
    return out


def evaluate(meas: PairMeasurements, stage: Stage, config: EpipolarConfig,
             image_size: Optional[Sequence[int]] = None) -> Attempt:
    """Per-pair validity: enough matches, F estimated, at least ``min_inliers`` inliers, and
    in the fallback stages a meaningful inlier set: NFA (``log10_nfa`` at the (H, W) analysis
    ``image_size``) <= ``fallback_max_nfa``; in the primary stage only when
    ``primary_max_nfa`` is set (the reference protocol has no such test). The NFA counts
    distinct matches / inliers (``PairMeasurements.nfa_counts``); the other rules the raw
    counts."""
    enough = enough_matches(meas.matches, stage)
    ok_fit = enough & meas.fitted
    enough_inliers = ok_fit & (meas.inliers >= int(config.min_inliers))
    nfa = None
    meaningful = np.ones(meas.num_pairs, bool)
    bound = config.fallback_max_nfa if stage.method != PRIMARY else config.primary_max_nfa
    if bound is not None:
        if image_size is None:
            raise InputError(f"the {stage.method} stage needs the analysis image size")
        n, k = meas.nfa_counts()
        nfa = np.where(ok_fit, log10_nfa(n, k, image_size, float(config.ransac.threshold_px)),
                       np.inf)
        meaningful = nfa <= np.log10(float(bound))
    valid = enough_inliers & meaningful
    too_few = NOT_ENOUGH_MATCHES if stage.uses_descriptors else NOT_ENOUGH_TRACKS
    notes = meas.notes or [None] * meas.num_pairs
    failures: List[Optional[str]] = []
    for p in range(meas.num_pairs):
        if valid[p]:
            failures.append(None)
        elif not enough[p]:
            failures.append(notes[p] or too_few)
        elif not ok_fit[p]:
            failures.append(notes[p] or FIT_FAILED)
        elif not enough_inliers[p]:
            failures.append(NOT_ENOUGH_INLIERS)
        else:
            failures.append(NOT_MEANINGFUL.format(float(bound)))
    return Attempt(stage, meas, valid, failures, nfa)


def pair_rates(meas: PairMeasurements) -> Tuple[np.ndarray, np.ndarray]:
    """(r, c) per pair: inlier rate = inliers / matches, coverage = min(inliers /
    max(min(kp_left, kp_right), 1), 1) (eq. 2 of the WorldAtlas page)."""
    r = meas.inliers / np.maximum(meas.matches, 1).astype(np.float64)
    floor = np.maximum(np.minimum(meas.kp_left, meas.kp_right), 1).astype(np.float64)
    c = np.minimum(meas.inliers / floor, 1.0)
    return r, c


def clip_values(attempt: Attempt, config: EpipolarConfig) -> Dict[str, Optional[float]]:
    """The trio over the valid pairs: median of per-pair median Sampson errors (px), its score
    clip(1 - error / error_norm_px, 0, 1), mean inlier rate, mean coverage."""
    v = attempt.valid
    if not v.any():
        return {"epipolar_error": None, "epipolar_error_score": None,
                "epipolar_inlier_rate": None, "feature_match_coverage": None}
    r, c = pair_rates(attempt.measurements)
    err = float(np.median(attempt.measurements.median_error[v]))
    return {"epipolar_error": err,
            "epipolar_error_score": float(np.clip(1.0 - err / float(config.error_norm_px), 0, 1)),
            "epipolar_inlier_rate": float(np.mean(r[v])),
            "feature_match_coverage": float(np.mean(c[v]))}


def per_pair_records(attempt: Attempt) -> List[Dict[str, Any]]:
    """One JSON-ready dict per pair of the attempt."""
    m = attempt.measurements
    r, c = pair_rates(m)
    out = []
    for p in range(m.num_pairs):
        rec: Dict[str, Any] = {
            "left_index": int(m.pairs[p, 0]), "right_index": int(m.pairs[p, 1]),
            "keypoints_left": int(m.kp_left[p]), "keypoints_right": int(m.kp_right[p]),
            "good_matches": int(m.matches[p]), "valid": bool(attempt.valid[p]),
        }
        for key, arr in m.extra.items():
            val = arr[p].item() if hasattr(arr[p], "item") else arr[p]
            rec[key] = None if isinstance(val, float) and not np.isfinite(val) else val
        if m.fitted[p]:
            rec["inliers"] = int(m.inliers[p])
            if attempt.log10_nfa is not None and np.isfinite(attempt.log10_nfa[p]):
                rec["log10_nfa"] = float(attempt.log10_nfa[p])
        if attempt.valid[p]:
            rec.update({"inlier_rate": float(r[p]), "feature_match_coverage": float(c[p]),
                        "median_epipolar_error": float(m.median_error[p]),
                        "mean_epipolar_error": float(m.mean_error[p])})
        else:
            rec["error"] = attempt.failures[p]
        out.append(rec)
    return out


def _section(trail: List[Attempt], config: EpipolarConfig, num_pairs: int,
             info: Dict[str, Any]) -> Dict[str, Any]:
    final = trail[-1] if trail and trail[-1].valid_pairs > 0 else None
    base: Dict[str, Any] = {"preset": "worldatlas"}
    base.update(info)
    attempts = [a.trail_entry() for a in trail]
    if final is None:
        if num_pairs == 0:
            reason = info.get("reason") or "no frame pairs"
        else:
            reason = "no valid epipolar frame pairs: " + "; ".join(a.failure_summary()
                                                                  for a in trail)
        base.update({"epipolar_error": None, "epipolar_error_score": None,
                     "epipolar_inlier_rate": None, "feature_match_coverage": None,
                     "pairs": num_pairs, "valid_pairs": 0, "fallback_used": False,
                     "method": None, "status": "not_applicable", "reason": reason,
                     "attempts": attempts,
                     "per_pair": per_pair_records(trail[-1]) if trail else []})
        return base
    fallback = final.stage.method != PRIMARY
    reason = None
    if fallback:
        reason = (f"{final.stage.reason}; used {final.stage.method} ("
                  + "; ".join(a.failure_summary() for a in trail[:-1]) + ")")
    base.update(clip_values(final, config))
    base.update({"pairs": final.measurements.num_pairs, "valid_pairs": final.valid_pairs,
                 "fallback_used": fallback, "method": final.stage.method, "status": "ok",
                 "reason": reason, "attempts": attempts, "per_pair": per_pair_records(final)})
    return base


MeasureFn = Callable[[Stage, Sequence[int]], Sequence[PairMeasurements]]


def run_protocol(measure: MeasureFn, clip_pairs: Sequence[np.ndarray], config: EpipolarConfig,
                 infos: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """Run the stages over several clips at once and build one section dict per clip.

    Args:
        measure: ``measure(stage, clip_ids)`` -> one PairMeasurements per listed clip; a batched
            path measures all listed clips in one go. Only clips without a valid pair so far are
            passed to the next stage.
        clip_pairs: per clip the (P, 2) pairs (``io.pairs.worldatlas_pairs``); clips with P = 0
            are not measured and come back not_applicable.
        infos: per clip extra keys of the section (implementation, ``analysis_size`` (H, W) --
            needed by the fallback stages' NFA check --, features, reason for an empty pair
            list, ...).
    """
    trails: List[List[Attempt]] = [[] for _ in clip_pairs]
    pending = [k for k, p in enumerate(clip_pairs) if len(p) > 0]
    for stage in protocol_stages(config):
        if not pending:
            break
        measured = measure(stage, pending)
        still = []
        for k, meas in zip(pending, measured):
            attempt = evaluate(meas, stage, config, infos[k].get("analysis_size"))
            trails[k].append(attempt)
            if attempt.valid_pairs == 0:
                still.append(k)
        pending = still
    return [_section(trails[k], config, len(clip_pairs[k]), dict(infos[k]))
            for k in range(len(clip_pairs))]


def clip_info(clip: Any, pairs: np.ndarray, config: EpipolarConfig, **keys: Any
              ) -> Dict[str, Any]:
    """The per-clip keys an implementation adds to the section: ``keys`` (implementation,
    features, ...), the ``analysis_size`` [H, W], ``frames``, and the ``reason`` when the clip
    has no pair."""
    h, w = analysis_size(*clip.size, int(config.max_width))
    info = dict(keys, analysis_size=[h, w], frames=clip.num_frames)
    if len(pairs) == 0:
        info["reason"] = too_short_reason(clip.num_frames, config)
    return info


def too_short_reason(num_frames: int, config: EpipolarConfig) -> str:
    need = max(int(config.pair_stride), 1) + 1
    return (f"clip has {num_frames} frame(s); the epipolar protocol needs at least {need} "
            f"(pair_stride={config.pair_stride})")
