"""Differentiable background consistency: dense flow -> IRLS-weighted H / F -> soft inlier ratio.

Every step is a differentiable torch op, so ``score.backward()`` reaches the pixels:

1. **Correspondences**: dense pyramidal Lucas-Kanade flow
   (:class:`geocon_torch.flow.lk_dense.DenseLKFlow` with its median filters switched off, so
   each Gauss-Newton step is a smooth function of the pixels: bilinear sampling, Gaussian
   windows and a closed-form 2x2 solve) between frames ``t`` and ``t + 1``; a regular grid of
   points ``x1`` (every ``grid_step`` px, ``border`` px inside) and ``x2 = x1 + flow(x1)``.
2. **Confidence** of each grid point: the smaller eigenvalue of the 2x2 structure tensor of
   frame ``t`` (Gaussian window), mapped to ``lambda / (lambda + mean lambda)`` in [0, 1)
   (it says where flow is measurable; smooth, so it is differentiated too).
3. **Model**: weighted DLT homography (:func:`geocon_torch.geometry.homography_dlt`) or weighted
   normalised 8-point F (:func:`geocon_torch.geometry.fundamental_8pt`), refitted ``irls_iters``
   times with weights ``confidence * sigmoid((c_k tau - r) / temperature)``, ``c_k`` shrinking
   from 4 to 1 (iteratively reweighted least squares; no random sampling, so the map from
   pixels to the model is smooth).
4. **Soft inlier ratio** (as the soft inlier count of DSAC / DSAC*):
   ``sum_i conf_i * sigmoid((tau - r_i) / temperature) / sum_i conf_i`` per pair, where ``r``
   is the paper's residual of the model: the symmetric transfer error in px (H, compared with
   ``tau_h``) or the Sampson distance in Hartley-normalised coordinates (F, unitless, compared
   with ``tau_f``). As ``temperature -> 0`` this is the hard IR of the IRLS fit.
5. **Contrast evidence**: the ratio is multiplied by ``1 - exp(-(c / MIN_CONTRAST)^2)`` with
   ``c`` the smaller grey-level standard deviation of the two frames (in [0, 1] units, so the
   same at every resolution): 1 to 1e-10 for any frame with visible content (c >= 0.05), 0 for
   a blank one. Without it a flat or black frame, whose zero flow every model explains, would
   get the largest score there is, and a generator trained on the score would be rewarded for
   blank output.
6. **Motion evidence**: it is also multiplied by
   ``1 - exp(-((m - FROZEN_MAX_MAD) / MOTION_RAMP)^2)`` (0 while ``m <= FROZEN_MAX_MAD``),
   ``m`` the pair's mean absolute difference in grey levels of 255
   over pixels and channels: the statistic and the tolerance of the reward's frozen rule
   (:func:`geocon_torch.rewards.frozen_clips`, :func:`geocon_torch.io.sampling.is_still`), so
   a pair that rule calls still counts 0, as a blank one does; 1 to within 1e-7 from
   ``2 * FROZEN_MAX_MAD`` = 1 grey level on (measurable motion: a 0.1 px shift of a textured
   scene is ~0.9), exactly 1 in float32 above ~1.02. Without it a still pair, whose zero flow
   every model explains, got the largest score there is (sigmoid(4) = 0.982, above consistent
   moving clips), and a generator trained on the score would be rewarded for not moving.

A pair whose evidence (5 times 6) is exactly 0 counts 0 whatever its fit; its correspondences
are swapped for a fixed, detached stand-in set before the fits (a "double where"): the zero
flow of a blank or still pair makes the H / F normal matrices' spectra degenerate, whose eigh /
svd backward is NaN, and NaN times 0 is NaN. So such a pair sends an exact zero gradient back,
and every other pair's values and gradients are bit for bit what they were.

Shapes: frames (P, C, H, W) pairs in, (P,) scores out; see :func:`soft_pair_scores`.
"""
from __future__ import annotations

from typing import Tuple

import torch

from ..config import SOFT_MODEL_CHOICES, SoftConsistencyConfig  # GeoConConfig.soft
from ..flow.base import to_gray
from ..flow.lk_dense import DenseLKFlow, _gradients, gaussian_blur
from ..geometry import (fundamental_8pt, homography_dlt, sampson_distance_normalized,
                        symmetric_transfer_error)
from ..io.sampling import FROZEN_MAX_MAD, is_still, pair_abs_diff_sums

SOFT_MODELS = SOFT_MODEL_CHOICES


def differentiable_flow(img1: torch.Tensor, img2: torch.Tensor,
                        cfg: SoftConsistencyConfig) -> torch.Tensor:
    """Dense LK flow ``img1 -> img2`` without median filtering: (P, C, H, W) float in [0, 1]
    -> (P, 2, H, W) px, differentiable with respect to both images."""
    lk = DenseLKFlow(levels=cfg.levels, iterations=cfg.iterations, fine_iterations=0,
                     window_sigma=cfg.window_sigma, median=1, level_median=1,
                     min_level_size=8)
    return lk(img1, img2)


def _grid_ranges(h: int, w: int, step: int, border: int) -> Tuple[range, range]:
    """The grid's row (y) and column (x) positions in px: every ``step`` px at least
    ``border`` px inside an H x W image (``border`` clamped for tiny frames)."""
    b = min(border, (min(h, w) - 1) // 2)
    return range(b, h - b, step), range(b, w - b, step)


def grid_lines(h: int, w: int, step: int, border: int) -> Tuple[int, int]:
    """(rows, columns) of :func:`grid_points`' grid for H x W px frames (host ints, no tensor
    op)."""
    ys, xs = _grid_ranges(h, w, step, border)
    return len(ys), len(xs)


def grid_points(h: int, w: int, step: int, border: int, dtype: torch.dtype,
                device: torch.device) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Integer grid ``(x, y)`` (N, 2) every ``step`` px at least ``border`` px inside an
    H x W image, and its row / column indices (N,), (N,)."""
    ry, rx = _grid_ranges(h, w, step, border)
    ys = torch.arange(ry.start, ry.stop, ry.step, device=device)
    xs = torch.arange(rx.start, rx.stop, rx.step, device=device)
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    yy, xx = yy.reshape(-1), xx.reshape(-1)
    return torch.stack([xx, yy], -1).to(dtype), yy, xx


def texture_confidence(img: torch.Tensor, sigma: float) -> torch.Tensor:
    """(P, C, H, W) -> (P, H, W) confidence in [0, 1): the smaller eigenvalue ``lambda`` of the
    structure tensor (Gaussian window ``sigma`` px) as ``lambda / (lambda + mean lambda)``
    (smooth, so it is differentiated like everything else)."""
    g = _gradients(to_gray(img))
    gx, gy = g[:, :1], g[:, 1:]
    j = gaussian_blur(torch.cat([gx * gx, gx * gy, gy * gy], 1), sigma)
    a, b, c = j[:, 0], j[:, 1], j[:, 2]
    lam = 0.5 * (a + c) - torch.sqrt(0.25 * (a - c) ** 2 + b * b + 1e-12)
    lam = torch.nn.functional.softplus(lam, beta=1e4)  # >= 0, smooth at 0
    mean = lam.flatten(1).mean(1).clamp_min(1e-12).view(-1, 1, 1)
    return lam / (lam + mean)


#: grey-level standard deviation (frames in [0, 1]) below which a pair counts as blank: the scale
#: of the contrast evidence (module docstring, step 5)
MIN_CONTRAST = 0.01


def contrast_evidence(img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
    """(P, C, H, W) frame pairs in [0, 1] -> (P,) ``1 - exp(-(c / MIN_CONTRAST)^2)``, ``c`` the
    smaller of the two frames' grey-level standard deviations (differentiable)."""
    std = torch.minimum(to_gray(img1).flatten(1).std(1, correction=0),
                        to_gray(img2).flatten(1).std(1, correction=0))
    return 1.0 - torch.exp(-(std / MIN_CONTRAST) ** 2)


#: grey levels (of 255) above :data:`~geocon_torch.io.sampling.FROZEN_MAX_MAD` over which the
#: motion evidence rises from 0 to ~1 (module docstring, step 6): 0.98 at 1.5 times the frozen
#: tolerance, 1 - 1e-7 at twice it
MOTION_RAMP = FROZEN_MAX_MAD / 4


def motion_evidence(img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
    """(P, C, H, W) frame pairs in [0, 1] -> (P,) ``1 - exp(-((m - FROZEN_MAX_MAD) /
    MOTION_RAMP)^2)`` in the frames' dtype, exactly 0 for a pair the reward's frozen rule calls
    still (:func:`~geocon_torch.io.sampling.is_still`: ``m <= FROZEN_MAX_MAD``), ``m`` the
    pair's mean absolute difference in grey levels of 255 over pixels and channels
    (:func:`~geocon_torch.io.sampling.pair_abs_diff_sums`, float64); differentiable (a still
    pair's gradient is 0)."""
    per_frame = int(img1.shape[1]) * int(img1.shape[2]) * int(img1.shape[3])
    sums = pair_abs_diff_sums(img2, img1)  # (P,) float64, grey levels summed over the frame
    excess = (sums / per_frame - FROZEN_MAX_MAD).clamp_min(0.0)
    ramp = 1.0 - torch.exp(-(excess / MOTION_RAMP) ** 2)
    return torch.where(is_still(sums, per_frame), torch.zeros_like(ramp), ramp).to(img1.dtype)


def _stand_in_targets(x1: torch.Tensor) -> torch.Tensor:
    """(P, N, 2) grid points px -> (P, N, 2) fixed targets ``x1 + d(x1)``, ``d`` a smooth,
    non-planar displacement of ~2 px (no two-view geometry explains it: the H and F fits of
    the stand-in set have distinct spectra), detached: the correspondences of a pair with no
    evidence (:func:`soft_pair_scores`)."""
    x, y = x1[..., 0], x1[..., 1]
    d = torch.stack([torch.sin(0.37 * x + 0.61 * y + 0.3), torch.cos(0.53 * x - 0.29 * y + 1.1)],
                    -1)
    return (x1 + 2.0 * d).detach()


def soft_ratio(residual: torch.Tensor, conf: torch.Tensor, tau: float,
               temperature: float) -> torch.Tensor:
    """Confidence-weighted soft inlier ratio: (P, N) residuals and weights -> (P,) in [0, 1]."""
    soft = torch.sigmoid((tau - residual) / temperature)
    return (conf * soft).sum(-1) / conf.sum(-1).clamp_min(1e-12)


def _residuals(model: str, M: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
               mask: torch.Tensor) -> torch.Tensor:
    if model == "homography":
        return symmetric_transfer_error(M, x1, x2)
    return sampson_distance_normalized(M, x1, x2, mask)


def irls_fit(model: str, x1: torch.Tensor, x2: torch.Tensor, conf: torch.Tensor,
             cfg: SoftConsistencyConfig) -> Tuple[torch.Tensor, torch.Tensor]:
    """IRLS H or F of (P, N, 2) points under (P, N) confidences -> (model (P, 3, 3),
    residuals (P, N): px for H, normalised Sampson for F)."""
    solve = homography_dlt if model == "homography" else fundamental_8pt
    tau, temp = (cfg.tau_h, cfg.temperature_h) if model == "homography" else \
        (cfg.tau_f, cfg.temperature_f)
    mask = conf > 0
    M = solve(x1, x2, conf)
    r = _residuals(model, M, x1, x2, mask)
    for k in range(cfg.irls_iters):
        scale = 4.0 ** (1.0 - k / max(cfg.irls_iters - 1, 1))  # 4 tau ... 1 tau
        M = solve(x1, x2, conf * torch.sigmoid((scale * tau - r) / temp))
        r = _residuals(model, M, x1, x2, mask)
    return M, r


def pair_correspondences(img1: torch.Tensor, img2: torch.Tensor, cfg: SoftConsistencyConfig
                         ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(P, C, H, W) frame pairs -> (x1 (P, N, 2), x2 (P, N, 2) px, confidence (P, N))."""
    p, _, h, w = img1.shape
    flow = differentiable_flow(img1, img2, cfg)
    grid, yy, xx = grid_points(h, w, cfg.grid_step, cfg.border, img1.dtype, img1.device)
    x1 = grid.unsqueeze(0).expand(p, -1, -1)
    x2 = x1 + flow[:, :, yy, xx].transpose(1, 2)
    conf = texture_confidence(img1, cfg.window_sigma)[:, yy, xx]
    return x1, x2, conf


def soft_pair_scores(img1: torch.Tensor, img2: torch.Tensor, cfg: SoftConsistencyConfig
                     ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Soft inlier ratio of every frame pair (module docstring).

    Args:
        img1, img2: (P, C, H, W) float in [0, 1] (C in {1, 3}), frames t and t + 1.
        cfg: :class:`SoftConsistencyConfig`.
    Returns:
        score (P,) in [0, 1] (differentiable), soft IR under H (P,), soft IR under F (P,)
        (NaN-free; the one of a model not fitted is all zeros), each times the contrast and
        motion evidence: exactly 0, with a zero gradient, for a blank or still pair.
    """
    x1, x2, conf = pair_correspondences(img1, img2, cfg)
    evidence = contrast_evidence(img1, img2) * motion_evidence(img1, img2)
    void = evidence == 0  # blank or still: counts 0; its fits must see no pixel (docstring)
    # a contrast term that rounds to 0 can still have a nonzero derivative: none for void pairs
    evidence = torch.where(void, evidence.detach(), evidence)
    x2 = torch.where(void[:, None, None], _stand_in_targets(x1), x2)
    conf = torch.where(void[:, None], torch.full_like(conf, 0.5).detach(), conf)
    zero = x1.new_zeros(x1.shape[0])
    ir_h = ir_f = zero
    if cfg.model in ("homography", "auto"):
        _, r = irls_fit("homography", x1, x2, conf, cfg)
        ir_h = soft_ratio(r, conf, cfg.tau_h, cfg.temperature_h)
    if cfg.model in ("fundamental", "auto"):
        _, r = irls_fit("fundamental", x1, x2, conf, cfg)
        ir_f = soft_ratio(r, conf, cfg.tau_f, cfg.temperature_f)
    ir_h, ir_f = ir_h * evidence, ir_f * evidence
    if cfg.model == "homography":
        return ir_h, ir_h, ir_f
    if cfg.model == "fundamental":
        return ir_f, ir_h, ir_f
    use_h = (ir_h >= ir_f - cfg.auto_margin).detach()
    return torch.where(use_h, ir_h, ir_f), ir_h, ir_f
