"""``soft_background_consistency``: a differentiable stand-in for the background inlier ratio.

What it is: for every pair of consecutive frames, dense Lucas-Kanade flow gives grid
correspondences, an IRLS-weighted DLT homography and / or 8-point fundamental matrix is fitted
to them, and the confidence-weighted **soft inlier ratio** ``sigmoid((tau - r) / temperature)``
(DSAC*-style) is averaged over the pairs of each clip. Gradients reach every pixel (the flow,
the fits and the sigmoid are all differentiable), so it can monitor or regularise a generator
during training. The math is in :mod:`geocon_torch.measures.soft`.

What it is not: it is **not** the paper's IR (no SIFT, no RANSAC, no translation gate, no object
masks, mean over pairs instead of the median); it tracks the hard IR across corruption severities
(Spearman >= 0.9 on the grounded scenes of the tests) but its values are not comparable with
published IR numbers. Use :func:`geocon_torch.score_clip` / ``geometric_reward`` for reported
scores. Moving objects count as outliers here (there is no masking).

Blank and still frames: a pair of blank frames (grey-level std well under 0.01) or of still
frames (a mean absolute difference of at most ``rewards.FROZEN_MAX_MAD`` = 0.5 grey levels of
255 over pixels and channels: the reward's frozen rule, per pair) counts 0, with an exact zero
gradient: their zero flow is explained by every model and would otherwise get the top score
(sigmoid(4) = 0.982, above consistent moving clips), so a generator trained on the score would
be rewarded for blank or frozen output. The motion evidence rises smoothly from 0 at 0.5 to 1
(within 1e-7) at 1 grey level; pairs moving more keep their values bit for bit. Per pair, so a
clip with held frames (a 12 -> 24 fps conversion) loses those pairs (about half its score),
where the reward drops held pairs and refuses only a clip with no moving pair. It is still no
motion incentive beyond that: a near-still clip (1 grey level) scores as high as any.
"""
from __future__ import annotations

from typing import Any, Union

import torch
from einops import rearrange
from torch import Tensor

from ..._precision import autocast_off
from ...errors import ShapeError
from ...io import check_clip_tensor
from ...config import GeoConConfig, SoftConsistencyConfig
from ...measures.soft import grid_lines, soft_pair_scores

#: fewest grid lines (rows and columns) of flow correspondences a frame must give: a 4 x 4 grid,
#: twice the 8 points of the F fit. With fewer the IRLS H / F fit passes (nearly) through every
#: point: frames of independent noise scored 0.98 at <= 16 px (3 x 3 grid at 20 px: 0.83 on
#: average), above a consistent grounded clip (0.97-0.98). At the smallest size accepted with the
#: defaults (21 x 21 px) noise scores 0.70 on average, 0.82 at most (32 clips), consistent
#: grounded C2 / C3 clips 0.97 / 0.97 (22 x 22 px; the still C1 clip 0, as every still clip).
MIN_GRID_LINES = 4


def _check_grid(h: int, w: int, cfg: SoftConsistencyConfig) -> None:
    """ShapeError when H x W px frames give fewer than :data:`MIN_GRID_LINES` grid rows or
    columns under ``cfg.grid_step`` / ``cfg.border`` (host-side ints, no tensor op)."""
    rows, cols = grid_lines(h, w, cfg.grid_step, cfg.border)
    if min(rows, cols) < MIN_GRID_LINES:
        side = 2 * cfg.border + (MIN_GRID_LINES - 1) * cfg.grid_step + 1
        raise ShapeError(
            f"soft_background_consistency: frames of {h} x {w} px give a {rows} x {cols} grid "
            f"of flow correspondences (grid_step={cfg.grid_step}, border={cfg.border}); the H / "
            f"F fit would pass through so few points and score even noise near 1. It needs at "
            f"least a {MIN_GRID_LINES} x {MIN_GRID_LINES} grid: frames >= {side} x {side} px at "
            f"these settings")


@autocast_off
def soft_background_consistency(frames: Tensor, *, model: str = "auto",
                                tau_h: float = 2.0, tau_f: float = 0.1,
                                temperature_h: float = 0.5, temperature_f: float = 0.025,
                                grid_step: int = 4,
                                config: Union[None, SoftConsistencyConfig,
                                              GeoConConfig] = None,
                                **options: Any) -> Tensor:
    """Differentiable background consistency of every clip of a batch (module docstring).

    Args:
        frames: (B, T, C, H, W) float in [0, 1] (C in {1, 3}; T >= 2); may require grad, any
            device. float32 / float64 frames are scored in their dtype; bfloat16 / float16
            frames (a generator's usual output) in float32 (a differentiable cast: gradients
            reach them, in their dtype). Pixel units below are pixels of these frames.
        model: "homography" (symmetric transfer error vs ``tau_h`` px), "fundamental"
            (Sampson distance in Hartley-normalised coordinates vs ``tau_f``, unitless) or
            "auto" (per pair: H unless F's soft IR is more than 0.05 higher; the switch
            itself carries no gradient).
        tau_h, tau_f: inlier thresholds (the paper's 2 px and 0.1).
        temperature_h, temperature_f: sigmoid temperatures in the residual's units (0.5 px and
            0.025): a residual ``tau + 2 * temperature`` counts as 0.12 of an inlier,
            ``tau - 2 * temperature`` as 0.88; as they go to 0 the score becomes the hard IR
            of the IRLS fit.
        grid_step: spacing of the grid of flow correspondences, px.
        config: a full :class:`~geocon_torch.config.SoftConsistencyConfig` or a GeoConConfig
            (its ``soft`` section; the keyword arguments above are then ignored); ``**options``
            sets its other fields (``irls_iters``, ``levels``, ``iterations``,
            ``window_sigma``, ``border``, ``auto_margin``), validated as the config is.
    Returns:
        (B,) scores in [0, 1] on ``frames.device``, in ``frames.dtype`` for float32 /
        float64 frames, float32 for half-precision ones, higher is better: the
        mean over the T - 1 consecutive pairs of the soft inlier ratio (a pair of blank frames,
        grey-level std well under 0.01, or of still ones, a mean absolute difference of at
        most ``FROZEN_MAX_MAD`` = 0.5 grey levels, counts 0 with a zero gradient: no evidence
        of consistency; module docstring); (0,) for B = 0.
    Raises:
        ClipTensorError: not a (B, T, C, H, W) float clip batch in [0, 1]; ShapeError: uint8
            frames (no gradient), fewer than 2 frames, or frames too small for a
            :data:`MIN_GRID_LINES` x :data:`MIN_GRID_LINES` grid of correspondences (H and W >=
            ``2 * border + 3 * grid_step + 1``: 21 px with the defaults); InputError: a bad
            setting.

    Example (gradients reach the pixels):

        >>> import torch
        >>> from geocon_torch.metrics.functional import soft_background_consistency
        >>> x = torch.rand(1, 2, 1, 24, 24, dtype=torch.float64, requires_grad=True)
        >>> score = soft_background_consistency(x)
        >>> score.shape, bool((0 <= score).all() and (score <= 1).all())
        (torch.Size([1]), True)
        >>> score.sum().backward(); x.grad.shape
        torch.Size([1, 2, 1, 24, 24])
    """
    check_clip_tensor(frames, batched=True)
    if not frames.is_floating_point():
        raise ShapeError("soft_background_consistency needs float frames in [0, 1] (uint8 "
                         "carries no gradient: pass frames.float() / 255)")
    b, t = int(frames.shape[0]), int(frames.shape[1])
    dtype = torch.promote_types(frames.dtype, torch.float32)  # half frames: float32
    if b == 0:  # an empty batch: no score
        return frames.new_zeros(0, dtype=dtype)
    if t < 2:
        raise ShapeError(f"soft_background_consistency needs T >= 2 frames, got shape "
                         f"{tuple(frames.shape)}")
    cfg = config if config is not None else SoftConsistencyConfig(
        model=model, tau_h=tau_h, tau_f=tau_f, temperature_h=temperature_h,
        temperature_f=temperature_f, grid_step=grid_step)
    cfg = cfg.soft if isinstance(cfg, GeoConConfig) else cfg
    cfg = SoftConsistencyConfig.from_dict({**cfg.to_dict(), **options}) if options else cfg
    _check_grid(int(frames.shape[-2]), int(frames.shape[-1]), cfg)
    x = frames.to(dtype)
    img1 = rearrange(x[:, :-1], "b t c h w -> (b t) c h w")
    img2 = rearrange(x[:, 1:], "b t c h w -> (b t) c h w")
    score, _, _ = soft_pair_scores(img1, img2, cfg)
    return rearrange(score, "(b t) -> b t", b=b).mean(1).to(dtype)
