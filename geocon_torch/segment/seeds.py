"""Seeding the weight-free motion segmentation from the background fits (paper sec. 4.3).

The matches a preliminary background model cannot explain are the seeds of moving objects;
each seed carries its motion relative to the background homography (what the points of a rigid
mover share), and the adjacent pairs' homographies give the dense photometric residuals of
:func:`~.motion.motion_segment`.
"""
from __future__ import annotations

from typing import Any, Dict, Optional, Tuple

import torch

from ..config import GeoConConfig
from ..geometry import fundamental_residuals, homography_residuals, transfer_points
from ..types import Clip, Fit
from .motion import motion_segment, pooled_gray, segmentation_factor

Seeds = Tuple[torch.Tensor, torch.Tensor, torch.Tensor]


def outlier_seeds(pairs: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor,
                  fits: Tuple[Fit, Fit], config: GeoConConfig, regime: Optional[str]) -> Seeds:
    """Background-model outliers of the P evaluated pairs as motion seeds.

    A match is a seed when its residual under the regime's model (F: normalised Sampson, else
    H: symmetric transfer px) exceeds ``segment.motion_seed_factor`` times that model's
    threshold, on a pair whose fit is valid.

    Args:
        pairs: (P, 2) long frame pairs (i, j); x1, x2: (P, N, 2) px; mask: (P, N) bool.
        fits: (H fit, F fit) of the P rows.
    Returns:
        points (2M, 2) px (the seeds in frame i, then in frame j), frames (2M,) long, motion
        (2M, 2) px relative to the background homography.
    """
    bc, factor = config.background, config.segment.motion_seed_factor
    fit_h, fit_f = fits
    if regime == "F":
        r = fundamental_residuals(fit_f, x1, x2, mask)[0]
        outlier = mask & (r > factor * bc.tau_f) & fit_f.valid.view(-1, 1)
    else:
        r = homography_residuals(fit_h, x1, x2)
        outlier = mask & (r > factor * bc.tau_h) & fit_h.valid.view(-1, 1)
    rel = x2 - transfer_points(fit_h.model.to(x1.dtype), x1)
    frame = lambda col: pairs[:, col].to(x1.device).view(-1, 1).expand_as(outlier)  # noqa: E731
    pts = torch.cat([x1[outlier], x2[outlier]])
    frames = torch.cat([frame(0)[outlier], frame(1)[outlier]])
    vec = torch.cat([rel[outlier], rel[outlier]])
    return pts, frames, vec


def adjacent_homographies(pairs: torch.Tensor, fit_h: Fit, num_frames: int
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(T-1, 3, 3) float64 homography and (T-1,) bool validity of every adjacent pair
    (t, t+1), taken from the rows of ``pairs`` (P, 2) that are adjacent (identity / invalid for
    the others)."""
    dev = fit_h.model.device
    n = max(num_frames - 1, 0)
    hs = torch.eye(3, dtype=torch.float64, device=dev).repeat(n, 1, 1)
    ok = torch.zeros(n, dtype=torch.bool, device=dev)
    adj = (pairs[:, 1] - pairs[:, 0] == 1).to(dev)
    idx = pairs[:, 0].to(dev)[adj]
    hs[idx] = fit_h.model[adj].to(torch.float64)
    ok[idx] = fit_h.valid[adj].to(dev)
    return hs, ok


def motion_masks(clip: Clip, pairs: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                 mask: torch.Tensor, fits: Tuple[Fit, Fit], config: GeoConConfig,
                 regime: Optional[str]) -> Tuple[torch.Tensor, Dict[str, Any]]:
    """Weight-free object masks from the preliminary fits of the evaluated pairs.

    Args:
        clip: the clip (working resolution).
        pairs: (P, 2) long evaluated frame pairs.
        x1, x2: (R, N, 2) px, mask (R, N) bool, fits (H, F) of R >= P rows whose first P rows
            are the evaluated pairs (later rows, e.g. gate pairs, are ignored).
        regime: the preliminary regime (:func:`~geocon_torch.gate.preliminary_regime`): under F
            no dense residuals are computed (the frames are never read).
    Returns:
        objects (T, K, H, W) bool and the evidence of :func:`~.motion.motion_segment` plus
        ``pre_regime``.
    """
    p = int(pairs.shape[0])
    adjacent = torch.arange(p, device=x1.device)
    fits = (fits[0].rows(adjacent), fits[1].rows(adjacent))
    x1, x2, mask = x1[:p], x2[:p], mask[:p]
    seeds = outlier_seeds(pairs, x1, x2, mask, fits, config, regime)
    t = clip.num_frames
    hs, ok = adjacent_homographies(pairs, fits[0], t)
    f = segmentation_factor(clip.size)
    if regime == "F":  # no dense residuals under translation: the frames are never read
        h, w = clip.size
        gray = torch.zeros(1, 1, 1, 1, device=x1.device).expand(t, 1, -(-h // f), -(-w // f))
    else:
        gray = pooled_gray(clip, f).to(x1.device)
    objects, evidence = motion_segment(gray, hs, ok, clip.content_mask.to(x1.device),
                                       config.segment, regime, seeds=seeds)
    evidence["pre_regime"] = regime
    return objects, evidence
