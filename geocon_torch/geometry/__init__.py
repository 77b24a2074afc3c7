"""Batched geometry core: normalisation, H / F solvers, residuals, robust estimation, affine LS.

Every function is batched over a leading pair dimension ``P``: points are padded ``(P, N, 2)``
tensors with a ``(P, N)`` bool mask (padded entries hold finite zeros), on CPU or CUDA, in float32
or float64. Nothing loops over pairs or hypotheses in Python. A mask of another dtype must hold
only 0 / 1 (one host read checks it); NaN or a weight such as 0.01 is an InputError: threshold
weights first (``mask=weights > 0``).

Convention: pixel ``(x, y)`` at working resolution; ``x2 ~ H x1`` and ``x2^T F x1 = 0`` with
``x1`` in the first frame of the pair.

Solvers
    ``hartley_normalize(points, mask)`` (paper eq. 9) -> ``(points_norm, T)``;
    ``homography_dlt(x1, x2, weights)`` weighted DLT (N = 4: the 4-point solver);
    ``fundamental_8pt(x1, x2, weights)`` weighted normalised 8-point, rank 2;
    ``fundamental_7pt(x1, x2)`` -> ``(F (P, 3, 3, 3), valid (P, 3))`` all real roots (closed-form
    cubic).

Residuals (``(P, N)``, differentiable)
    ``symmetric_transfer_error`` (eq. 7, px, mean of forward and backward distances),
    ``transfer_error`` (forward, OpenCV findHomography's), ``sampson_distance`` (eq. 11, px),
    ``sampson_distance_normalized`` (unitless, what tau_F = 0.1 is compared with),
    ``epipolar_line_distance`` (one-sided, GVGC), ``epipolar_max_distance`` (OpenCV's classic
    findFundamentalMat error: the larger of the two point-line distances). Where F defines no
    epipolar line (F = 0, the model of a failed fit) they are huge (``finfo.max`` squared),
    never 0. ``fundamental_residuals(fit, ...)`` / ``homography_residuals(fit, ...)`` of a
    whole Fit are NaN on its invalid rows.

Robust estimation -> :class:`geocon_torch.types.Fit`
    ``ransac_homography(x1, x2, mask, scores, threshold=2.0, residual="symmetric"|"forward")``,
    ``ransac_fundamental(x1, x2, mask, scores, threshold=0.1,
    residual="sampson_normalized"|"sampson"|"epipolar_max")``: rounds of ``batch_size`` minimal
    samples per pair (PROSAC-style growth when ``scores`` are given), degenerate samples rejected,
    pre-verification on 32 random points, MSAC (or RANSAC) scoring, local optimisation (iterated
    weighted refits), adaptive stopping per pair at ``confidence`` with a ``max_iterations`` cap,
    and a final least-squares refit. Unfit pairs come back ``valid=False`` with finite values.
    OpenCV parity: ``residual="forward"`` matches findHomography's mask, ``residual="sampson"``
    findFundamentalMat(USAC_MAGSAC)'s, ``residual="epipolar_max"`` FM_RANSAC's.

Randomness: a counter-based hash keyed by ``seed + pair index`` (no global RNG, no generator
state): the same seed gives the same result, pair ``p`` of a batch equals a single-pair call with
``seed + p``, and CPU and CUDA draw the same samples. A ``(P,)`` integer tensor ``seed`` gives
each pair its own stream.

Padding invariance: the robust estimators compact each pair's valid points before anything
else, draw every random choice from the pair's own key and valid count, decide per-pair
switches from that count, and sum over the point axis in fixed chunks, so a pair's Fit is
bit-identical (on CPU) whether it is fitted alone or padded into a wider batch beside other
pairs, wherever its masked entries sit and whatever they hold.

Affine
    ``weighted_affine_lstsq(positions, motions, weights)`` -> ``(A, b, wmse, valid)``,
    ``motion ~ A p + b`` (eqs. 14-15).

Precision: every function whose numbers rest on matrix products (``fundamental_8pt``,
``fundamental_7pt``, ``homography_dlt``, ``sampson_distance_normalized`` and
``fundamental_residuals`` through it, ``weighted_affine_lstsq``, the robust estimators) runs
under :func:`geocon_torch._precision.scoring_precision`: the caller's autocast and reduced
float32 matmul precision (TF32, bfloat16) do not apply inside; the other residuals and
``hartley_normalize`` are elementwise and autocast leaves them alone. The least-squares fits
(the DLT / 8-point solvers, the robust estimators' local optimisation and final refit) sum
their normal equations in float64 whatever the points' dtype and return the model in the
points' dtype; the solvers also normalise and denormalise in float64.
"""
from .affine import weighted_affine_lstsq
from .fit_residuals import fundamental_residuals, homography_residuals
from .fundamental import fundamental_7pt, fundamental_8pt
from .homography import homography_dlt
from .normalization import hartley_normalize
from .ransac import ransac_fundamental, ransac_homography
from .residuals import (epipolar_line_distance, epipolar_max_distance, sampson_distance,
                        sampson_distance_normalized, symmetric_transfer_error, transfer_error,
                        transfer_points)

__all__ = [
    "epipolar_line_distance", "epipolar_max_distance", "fundamental_7pt", "fundamental_8pt",
    "fundamental_residuals", "homography_residuals",
    "hartley_normalize", "homography_dlt", "ransac_fundamental", "ransac_homography",
    "sampson_distance", "sampson_distance_normalized", "symmetric_transfer_error",
    "transfer_error", "transfer_points", "weighted_affine_lstsq",
]
