"""torchmetrics class for AdaDFRC-W2 (the math lives in ``measures.foreground``)."""
from __future__ import annotations

from typing import Any, Dict, Optional

import torch
from torchmetrics import Metric
from torchmetrics.utilities.data import dim_zero_cat

from ..measures.foreground import SCORES, adadfrc
from ..errors import InputError


class AdaDFRC(Metric):
    """AdaDFRC-W2 pooled over every valid (pair, object) sample seen by :meth:`update`.

    ``update(flow (P, 2, H, W), masks (P, K, H, W) bool, reliability (P, H, W) | None)`` scores
    each pair's objects with :func:`~geocon_torch.measures.foreground.adadfrc`.
    ``compute()`` returns a dict of scalar tensors: ``adadfrc_mean`` (mean D over all valid
    samples, px^2), ``adap90`` (the ``percentile`` quantile of those samples) and ``samples``
    (their count). With no valid sample the two scores are NaN (undefined, never 0).

    States (reduce correctly under torch.distributed): ``sum_d`` and ``count`` (``sum``) and
    ``values`` (``cat``; needed for the quantile).
    """

    higher_is_better = False
    is_differentiable = False
    full_state_update = False

    def __init__(self, grid: int = 8, score: str = "wmse", min_pixels: int = 64,
                 percentile: float = 0.9, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if score not in SCORES:
            raise InputError(f"score must be one of {SCORES}, got {score!r}")
        if not 0.0 <= percentile <= 1.0:
            raise InputError(f"percentile must be in [0, 1], got {percentile}")
        self.grid = int(grid)
        self.score = score
        self.min_pixels = int(min_pixels)
        self.percentile = float(percentile)
        self.add_state("sum_d", default=torch.tensor(0.0, dtype=torch.float64),
                       dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("values", default=[], dist_reduce_fx="cat")

    def update(self, flow: torch.Tensor, masks: torch.Tensor,
               reliability: Optional[torch.Tensor] = None) -> None:
        d, valid = adadfrc(flow, masks, reliability, grid=self.grid, score=self.score,
                           min_pixels=self.min_pixels)
        vals = d[valid].to(torch.float64)
        self.sum_d += vals.sum()
        self.count += vals.numel()
        self.values.append(vals)

    def compute(self) -> Dict[str, torch.Tensor]:
        vals = dim_zero_cat(self.values) if len(self.values) else \
            torch.zeros(0, dtype=torch.float64, device=self.sum_d.device)
        nan = torch.tensor(float("nan"), dtype=torch.float64, device=self.sum_d.device)
        if vals.numel() == 0:
            return {"adadfrc_mean": nan, "adap90": nan.clone(), "samples": self.count.clone()}
        return {"adadfrc_mean": self.sum_d / self.count,
                "adap90": torch.quantile(vals, self.percentile),
                "samples": self.count.clone()}
