"""AdaDFRC-W2 for the functional API and the ``_adadfrc_update`` / ``_adadfrc_compute`` helpers of
the ``AdaDFRC`` class.

:func:`adadfrc` returns exactly what :func:`geocon_torch.measures.foreground.adadfrc` returns
(one name, one meaning): flow (P, 2, H, W) + object masks (P, K, H, W) -> D (P, K) and its
validity. The class pools the valid D values of every (pair, object) sample it sees; its outputs
are named ``pooled_*`` because ``score_clip``'s foreground block reports ``adadfrc_mean`` /
``adap90`` *per object* (mean / 90th percentile of D over that object's pairs), a different
quantity.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
from torch import Tensor

from ..._precision import autocast_off, eager_entry
from ...measures.foreground import adadfrc as _adadfrc_measure


@eager_entry
@autocast_off
def adadfrc(flow: Tensor, masks: Tensor, reliability: Optional[Tensor] = None, *,
            grid: int = 8, score: str = "wmse", min_pixels: int = 64,
            w2_iterations: int = 200) -> Tuple[Tensor, Tensor]:
    """Per-pair, per-object AdaDFRC-W2 score D (paper eq. 15 or its W2 variant): how far each
    object's flow is from one affine motion on an adaptive ``grid`` x ``grid`` of cells.

    Args:
        flow: (P, 2, H, W) float forward flow t -> t+1 in px.
        masks: (P, K, H, W) bool (or 0 / 1 floats or integers; soft masks are an InputError:
            threshold them first), object k at the first frame of pair p.
        reliability: (P, H, W) weights in [0, 1] (forward-backward reliability; values outside
            are clamped to it) or None.
        grid, score ("wmse" | "w2"), min_pixels, w2_iterations: see
            :func:`geocon_torch.measures.foreground.adadfrc`.

    Returns:
        D (P, K) in px^2 (NaN where invalid: no data is NaN, never 0; lower = more rigid) and
        valid (P, K) bool (objects absent or smaller than ``min_pixels`` in a pair are invalid
        there).

    Example:
        >>> import torch
        >>> from geocon_torch.metrics.functional import adadfrc
        >>> flow = torch.zeros(1, 2, 32, 32)
        >>> flow[:, 0] = 2.0  # every pixel moves 2 px right: a rigid (affine) motion
        >>> masks = torch.zeros(1, 2, 32, 32, dtype=torch.bool)
        >>> masks[0, 0, 8:24, 8:24] = True  # object 1 stays empty: invalid
        >>> d, valid = adadfrc(flow, masks)
        >>> valid.tolist(), bool(d[0, 0] < 1e-6), bool(d[0, 1].isnan())
        ([[True, False]], True, True)
    """
    d, valid = _adadfrc_measure(flow, masks, reliability, grid=grid, score=score,
                                min_pixels=min_pixels, w2_iterations=w2_iterations)
    return torch.where(valid, d, torch.full_like(d, float("nan"))), valid


def _adadfrc_update(flow: Tensor, masks: Tensor, reliability: Optional[Tensor] = None, *,
                    grid: int = 8, score: str = "wmse", min_pixels: int = 64
                    ) -> Tuple[Tensor, int, int]:
    """Score one chunk of pairs.

    Returns:
        (N,) float64 D of the valid, finite (pair, object) samples (px^2), the number of
        not-applicable samples (object absent, below ``min_pixels`` or without a
        non-degenerate affine fit; a D that overflows is marked invalid by the measure and
        counted here too) and the number of erroneous ones (NaN / inf flow inside the
        object): those are left out of the pool instead of entering it as a silent 0 or NaN.
    """
    d, valid = _adadfrc_measure(flow, masks, reliability, grid=grid, score=score,
                                min_pixels=min_pixels)
    bad_px = ~torch.isfinite(flow).all(1)  # (P, H, W)
    bad = (bad_px[:, None] & masks.bool()).flatten(2).any(-1) | ~torch.isfinite(d)  # (P, K)
    keep = valid & ~bad
    # the measure already marks non-finite objects invalid: count them as errors, not as
    # not-applicable (absent / too small) slots
    return d[keep].to(torch.float64), int((~valid & ~bad).sum()), int(bad.sum())


def _adadfrc_compute(sum_d: Tensor, count: Tensor, values: Tensor, percentile: float
                     ) -> Dict[str, Tensor]:
    """Pooled summaries of N samples: ``pooled_adadfrc_mean`` = sum_d / count (px^2) and
    ``pooled_adadfrc_quantile`` (the ``percentile`` quantile of ``values`` (N,)), 0-d float64,
    NaN when N = 0."""
    if values.numel() == 0:
        nan = torch.tensor(float("nan"), dtype=torch.float64, device=values.device)
        return {"pooled_adadfrc_mean": nan, "pooled_adadfrc_quantile": nan.clone()}
    return {"pooled_adadfrc_mean": sum_d / count,
            "pooled_adadfrc_quantile": torch.quantile(values, percentile)}


__all__ = ["adadfrc"]
