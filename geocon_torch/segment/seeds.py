"""Seeding the weight-free motion segmentation from the background fits (paper sec. 4.3).

The matches a preliminary background model cannot explain are the seeds of moving objects;
each seed carries its motion relative to the background homography (what the points of a rigid
mover share), and the adjacent pairs' homographies give the dense photometric residuals of
:func:`~.motion.motion_segment`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .._memory import release_freed_memory
from ..config import GeoConConfig
from ..geometry import fundamental_residuals, homography_residuals, transfer_points
from ..types import Clip, Fit
from .motion import motion_segments, pooled_gray, segmentation_factor

Seeds = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]


def outlier_seeds(pairs: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor,
                  fits: Tuple[Fit, Fit], config: GeoConConfig, regime: Optional[str],
                  residuals: Optional[torch.Tensor] = None) -> Seeds:
    """Background-model outliers of the P evaluated pairs as motion seeds, fixed-size (no
    host sync): every match endpoint is a candidate, ``valid`` says which are seeds.

    A match is a seed when its residual under the regime's model (F: normalised Sampson, else
    H: symmetric transfer px) exceeds ``segment.motion_seed_factor`` times that model's
    threshold, on a pair whose fit is valid.

    Args:
        pairs: (P, 2) long frame pairs (i, j); x1, x2: (P, N, 2) px; mask: (P, N) bool.
        fits: (H fit, F fit) of the P rows.
        residuals: (P, N) residuals of the regime's model when already computed (None:
            computed here).
    Returns:
        points (2PN, 2) px (every match in frame i, then in frame j), frames (2PN,) long,
        motion (2PN, 2) px relative to the background homography, valid (2PN,) bool (the
        seeds: ``points[valid]`` are the outliers in row-major order).
    """
    bc, factor = config.background, config.segment.motion_seed_factor
    fit_h, fit_f = fits
    if regime == "F":
        r = fundamental_residuals(fit_f, x1, x2, mask)[0] if residuals is None else residuals
        outlier = mask & (r > factor * bc.tau_f) & fit_f.valid.view(-1, 1)
    else:
        r = homography_residuals(fit_h, x1, x2) if residuals is None else residuals
        outlier = mask & (r > factor * bc.tau_h) & fit_h.valid.view(-1, 1)
    rel = (x2 - transfer_points(fit_h.model.to(x1.dtype), x1)).reshape(-1, 2)
    frame = lambda col: pairs[:, col].to(x1.device).view(-1, 1).expand_as(outlier)  # noqa: E731
    pts = torch.cat([x1.reshape(-1, 2), x2.reshape(-1, 2)])
    frames = torch.cat([frame(0).reshape(-1), frame(1).reshape(-1)])
    valid = outlier.reshape(-1)
    return pts, frames, torch.cat([rel, rel]), torch.cat([valid, valid])


def adjacent_homographies(pairs: torch.Tensor, fit_h: Fit, num_frames: int
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(T-1, 3, 3) float64 homography and (T-1,) bool validity of every adjacent pair
    (t, t+1), taken from the rows of ``pairs`` (P, 2) that are adjacent (identity / invalid for
    the others); fixed-size scatters (no host sync)."""
    dev = fit_h.model.device
    n = max(num_frames - 1, 0)
    hs = torch.eye(3, dtype=torch.float64, device=dev).repeat(n + 1, 1, 1)  # n: discarded
    ok = torch.zeros(n + 1, dtype=torch.bool, device=dev)
    adj = (pairs[:, 1] - pairs[:, 0] == 1).to(dev)
    idx = torch.where(adj, pairs[:, 0].to(dev), torch.full_like(adj, n, dtype=torch.long))
    hs[idx] = torch.where(adj.view(-1, 1, 1), fit_h.model.to(torch.float64), hs[n])
    ok[idx] = fit_h.valid.to(dev) & adj
    return hs[:n], ok[:n]


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
    return motion_masks_batch([clip], [pairs], [x1], [x2], [mask], [fits], config, [regime])[0]


def motion_masks_batch(clips: Sequence[Clip], pairs: Sequence[torch.Tensor],
                       x1: Sequence[torch.Tensor], x2: Sequence[torch.Tensor],
                       mask: Sequence[torch.Tensor], fits: Sequence[Tuple[Fit, Fit]],
                       config: GeoConConfig, regimes: Sequence[Optional[str]],
                       residuals: Optional[Sequence[Optional[torch.Tensor]]] = None
                       ) -> List[Tuple[torch.Tensor, Dict[str, Any]]]:
    """:func:`motion_masks` of B clips (one entry each) as one batch: the seeds and adjacent
    homographies of every clip without host syncs, then one :func:`~.motion.motion_segments`
    call. Each clip gets what it gets alone (bit for bit on the CPU).

    Args:
        residuals: per clip, (P, N) residuals of its regime's model on its P evaluated rows
            (:func:`outlier_seeds`), or None.
    """
    grays, hs, oks, seeds, contents = [], [], [], [], []
    residuals = list(residuals) if residuals is not None else [None] * len(clips)
    for clip, pr, a, b, m, fit, regime, res in zip(clips, pairs, x1, x2, mask, fits, regimes,
                                                   residuals):
        p = int(pr.shape[0])
        rows = torch.arange(p, device=a.device)
        fit = (fit[0].rows(rows), fit[1].rows(rows))
        seeds.append(outlier_seeds(pr, a[:p], b[:p], m[:p], fit, config, regime, res))
        t = clip.num_frames
        h_t, ok = adjacent_homographies(pr, fit[0], t)
        hs.append(h_t)
        oks.append(ok)
        f = segmentation_factor(clip.size)
        if regime == "F":  # no dense residuals under translation: the frames are never read
            h, w = clip.size
            grays.append(torch.zeros(1, 1, 1, 1, device=a.device).expand(
                t, 1, -(-h // f), -(-w // f)))
        else:
            grays.append(pooled_gray(clip, f).to(a.device))
        contents.append(clip.content_mask.to(a.device))
    release_freed_memory()  # the decoded frames of pooled_gray: back to the OS before the maps
    out = motion_segments(grays, hs, oks, contents, config.segment, regimes, seeds=seeds)
    for (_, evidence), regime in zip(out, regimes):
        evidence["pre_regime"] = regime
    return out
