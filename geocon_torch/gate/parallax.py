"""Weight-free translation gate: parallax the best homography cannot explain (no pose model).

Rotation about the optical centre (or a planar scene) moves every background point by one
homography; camera translation past a scene with depth adds *parallax* that no homography removes
but the epipolar geometry explains. From the two robust fits every pair gets anyway (H at tau_H,
F at tau_F on the same background correspondences), per pair, over the F-inliers (normalised
Sampson <= tau_F):

* ``parallax_excess`` (default): the fraction of F-inliers the best H misses by more than
  ``6 sigma`` (symmetric transfer), sigma = median F-inlier pixel Sampson distance / 0.6745
  (>= 0.1 px): parallax measured against the clip's own noise level;
* ``parallax_fraction``: the fraction of F-inliers that are H-outliers at tau_H (2 px);
* ``residual_parallax``: median symmetric transfer error of the F-inliers under H / tau_H;
* ``gric_delta``: (GRIC(H) - GRIC(F)) / n, Torr's geometric robust information criterion
  (r = 4, lambda1 = ln 4, lambda2 = ln 4n, lambda3 = 2; H: d = 2, k = 8 with e^2 = r_sym^2 / 2; F:
  d = 3, k = 7 with e^2 = Sampson^2); > 0 favours F. It helps settle the U band.

The pipeline evaluates the statistic on wide-baseline gate pairs (the near-first/last pairs, as
the paper's first/last DUSt3R gate; parallax grows with the baseline), pooled by their median:
H if <= ``parallax_low``, F if >= ``parallax_high``, otherwise U (F when GRIC prefers F or F's
inlier ratio beats H's by more than ``u_margin``). Defaults calibrated by
``benchmarks/gate_sweep.py`` on 42 grounded clips (C1/C2/C4 vs C3/C5/C6: balanced accuracy 1.0).
Pixels are at working resolution.
"""
from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch

from .._tensor_utils import masked_median
from ..config import GATE_STATISTIC_CHOICES, GateConfig
from ..geometry import fundamental_residuals, homography_residuals
from ..types import Fit
from .decision import (GateDecision, codes_to_names, hysteresis, resolve_u_clip,
                       threshold_decision)
from ..errors import InputError

STATISTICS = GATE_STATISTIC_CHOICES  # the one list (config.gate.statistic)


def parallax_statistics(fit_h: Fit, fit_f: Fit, x1: torch.Tensor, x2: torch.Tensor,
                        mask: torch.Tensor, *, tau_h: float = 2.0, tau_f: float = 0.1,
                        min_inliers: int = 30, sigma_floor_px: float = 0.1,
                        excess_k: float = 6.0,
                        residuals: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None
                        ) -> Dict[str, torch.Tensor]:
    """Per-pair gate statistics from the H and F fits of the same correspondences.

    Args:
        fit_h, fit_f: fits of (P,) pairs (models in pixels).
        x1, x2: (P, N, 2) pixel points; mask: (P, N) bool background matches.
        residuals: (symmetric transfer px, normalised Sampson, pixel Sampson) (P, N) of the two
            fits when already computed (``homography_residuals`` / ``fundamental_residuals``).
    Returns:
        dict of (P,) tensors: ``parallax_excess``, ``parallax_fraction``, ``residual_parallax``,
        ``gric_delta``,
        ``valid`` (bool: both fits valid and >= min_inliers F-inliers).
    """
    if residuals is None:
        r_h = homography_residuals(fit_h, x1, x2)
        r_fn, r_fpx = fundamental_residuals(fit_f, x1, x2, mask)
    else:
        r_h, r_fn, r_fpx = residuals
    f_in = mask & (r_fn <= tau_f)
    h_in = mask & (r_h <= tau_h)
    n_f = f_in.sum(-1)
    valid = (n_f >= min_inliers) & fit_h.valid.to(x1.device) & fit_f.valid.to(x1.device)
    frac = (f_in & ~h_in).sum(-1).to(x1.dtype) / n_f.clamp_min(1).to(x1.dtype)
    resid = masked_median(r_h, f_in)[0] / tau_h
    # GRIC (Torr 1998), residuals in px^2, sigma from the F-inliers' Sampson distances
    n = mask.sum(-1).clamp_min(1).to(x1.dtype)
    sigma = (masked_median(r_fpx, f_in)[0] / 0.6745).clamp_min(sigma_floor_px)
    s2 = (sigma * sigma).unsqueeze(-1)
    r_dim, lam3 = 4.0, 2.0

    def gric(e2: torch.Tensor, d: int, k: int) -> torch.Tensor:
        rho = torch.clamp(e2 / s2, max=lam3 * (r_dim - d))
        rho = torch.where(mask, rho, torch.zeros_like(rho)).sum(-1)
        return rho + math.log(r_dim) * d * n + torch.log(r_dim * n) * k

    delta = (gric(r_h * r_h / 2, 2, 8) - gric(r_fpx * r_fpx, 3, 7)) / n
    # noise-relative parallax: F-inliers the best H misses by more than excess_k x sigma
    excess_thr = (excess_k * sigma).unsqueeze(-1)
    excess = ((f_in & (r_h > excess_thr)).sum(-1).to(x1.dtype)
              / n_f.clamp_min(1).to(x1.dtype))
    zero = torch.zeros_like(frac)
    return {"parallax_excess": torch.where(valid, excess, zero),
            "parallax_fraction": torch.where(valid, frac, zero),
            "residual_parallax": torch.where(valid, resid, zero),
            "gric_delta": torch.where(valid, delta, zero), "valid": valid}


def gate_from_parallax(stats: Dict[str, torch.Tensor], cfg: GateConfig) -> GateDecision:
    """Clip (and optionally per-pair) decision from :func:`parallax_statistics` of the finest
    scale's pairs (in temporal order). The U band is resolved by GRIC in ``evidence``."""
    name = cfg.statistic
    if name not in STATISTICS:
        raise InputError(f"gate.statistic must be one of {STATISTICS}, got {name!r}")
    s, valid = stats[name], stats["valid"]
    thresholds = {"low": cfg.parallax_low, "high": cfg.parallax_high}
    evidence: Dict[str, object] = {
        "statistic_name": name, "valid_pairs": int(valid.sum()),
        "pair_statistic": [float(v) if ok else None for v, ok in zip(s.tolist(), valid.tolist())],
    }
    for other in STATISTICS:
        if bool(valid.any()):
            evidence[f"median_{other}"] = float(masked_median(stats[other], valid)[0])
    if not bool(valid.any()):
        evidence["why"] = "no pair with enough F-inliers to measure parallax"
        return GateDecision("parallax", None, thresholds, None, None, evidence)
    clip_s = float(masked_median(s, valid)[0])
    code = int(threshold_decision(torch.tensor([clip_s]), cfg.parallax_low, cfg.parallax_high)[0])
    decision = codes_to_names(torch.tensor([code]))[0]
    evidence["u_resolved"] = resolve_u_clip(float(masked_median(stats["gric_delta"], valid)[0]))
    per_pair = None
    if cfg.per_pair:
        per_pair = codes_to_names(hysteresis(s, cfg.parallax_low, cfg.parallax_high,
                                             present=valid))
    return GateDecision("parallax", clip_s, thresholds, decision, per_pair, evidence)
