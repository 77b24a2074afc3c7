"""Epipolar trio (WorldAtlas, GVGC-style): ``epipolar_error``, ``epipolar_inlier_rate``,
``feature_match_coverage``, plus the original GVGC protocol.

``geocon_torch.sections.epipolar.epipolar_section(clip, config, preset="worldatlas" | "gvgc",
implementation="opencv" | "torch" | "auto", device=None)`` returns the ``epipolar`` block of a
result (a JSON-ready dict);
``epipolar_sections(clips, ...)`` does several clips at once (one batch on the torch path).

WorldAtlas protocol (preset "worldatlas", the default; seed document 003)
-------------------------------------------------------------------------
* grayscale frames (``cv2.COLOR_RGB2GRAY``) downscaled to width <= 640 (aspect kept,
  ``cv2.INTER_AREA`` by default: ours, the reference resizes with ``cv2.resize``'s default
  INTER_LINEAR, ``resize_interpolation="linear"``; README *Epipolar trio* has the measured
  difference); pixel values below are at this *analysis* resolution;
* pairs (i, i + s), i = 0, s, 2s, ... (``pair_stride`` s = 1), at most 8 spread evenly;
* SIFT (2000 features), brute-force L2 2-NN, Lowe ratio 0.75, at least 12 matches;
* F by ``cv2.findFundamentalMat(USAC_MAGSAC, 1.0 px, confidence 0.999, maxIters 10000)`` (OpenCV
  path; where OpenCV raises on a near-still pair, the same fit by ``FM_RANSAC``: the reference
  marks such a pair invalid) or one batched
  ``geometry.ransac_fundamental(residual="sampson", threshold=1.0)`` over all pairs (torch
  path); a pair with < 8 inliers is invalid;
* per pair: median Sampson distance over the inliers (px, eq. 1, not squared),
  r = inliers / matches, c = min(inliers / min(kp_left, kp_right), 1);
* per clip: ``epipolar_error`` = median of the per-pair medians, ``epipolar_error_score`` =
  clip(1 - error / 5, 0, 1), ``epipolar_inlier_rate`` = mean r, ``feature_match_coverage`` =
  mean c;
* fallbacks, only when no pair is valid, in order: relaxed matching (ratio max(ratio, 0.85), at
  least 8 matches), then Shi-Tomasi (quality 0.001, min distance 3, block 3) + pyramidal LK
  (window 21, 3 levels, forward-backward error <= 1.5 px, at least 8 tracks; coverage against the
  detected corners). ``fallback_used``, ``method``, ``reason`` and the ``attempts`` trail say what
  happened; with nothing valid: ``status: not_applicable``, values None, and the reason.

Fallback guards (ours, both paths, :mod:`.protocol`): an LK track is kept only when the
zero-mean NCC of the 11x11 patches (``tracking.ncc_window``, bilinear samples) around the corner
in frame i and its tracked position in frame j is >= ``tracking.min_ncc`` = 0.8 (real content
tracked between adjacent frames: median NCC ~0.99; independent noise: ~0.1, never above 0.5),
and a fallback pair is valid only when its inlier set is meaningful a contrario (ORSA, Moisan &
Stival 2004): NFA = (n - 7) C(n, k) C(k, 7) alpha^(k - 7) <= ``fallback_max_nfa`` = 0.01 for k
inliers of n matches, alpha = 2 * threshold * diagonal / area. Random-noise frames are then
not_applicable. The primary stage keeps the reference's rules otherwise unchanged.

Execution paths: ``opencv`` (CPU reference, one pair at a time) and ``torch`` (features
``opencv-sift`` on CPU / ``torch-sift`` on CUDA by default, batched matching, one batched RANSAC
for all pairs of all clips, padded to a constant width with per-pair seeds from (seed, source
frames, stage): a clip gives bit-identical numbers alone or anywhere in a batch). Both share
:mod:`.protocol` (pairs, stages, guards, validity, aggregation).

GVGC preset (preset "gvgc"; :mod:`.gvgc`)
-----------------------------------------
The original code of Li et al. 2024: frames 0..70 resized to 1280x720, pairs (i, i + d) for
d in (60, 50, 40, 30, 20, 10), 11 per d; SIFT 40,000, FLANN 2-NN, ratio 0.85, FM_RANSAC 3 px;
one-sided point-to-epipolar-line distance over inliers; mean / median / RMSE / MAE and keep rate
per interval and overall. Clips shorter than 71 frames are not_applicable. Both paths: OpenCV
(the original, FLANN) and torch (exact 2-NN, one batched RANSAC per clip with OpenCV's FM_RANSAC
error).

Batched functions: :mod:`geocon_torch.metrics.functional` (``epipolar_error``,
``epipolar_inlier_rate``, ``feature_match_coverage``: (B, T, C, H, W) -> (B,) float64, NaN for a
not_applicable clip). torchmetrics: :mod:`geocon_torch.metrics.epipolar` (``EpipolarError``,
``EpipolarInlierRate``, ``FeatureMatchCoverage``, ``epipolar_collection``). Tensors become
Clips through the one io path (:func:`geocon_torch.io.clip_from_tensor`, native pixels).
"""
from .protocol import decode_plan, protocol_stages

__all__ = ["decode_plan", "protocol_stages"]
