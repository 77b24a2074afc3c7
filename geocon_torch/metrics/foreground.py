"""torchmetrics class for AdaDFRC-W2 (the math lives in ``measures.foreground``; the functional
split in :mod:`geocon_torch.metrics.functional.foreground`)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional

import torch
from torch import Tensor
from torchmetrics.utilities.data import dim_zero_cat

from .._precision import autocast_off, eager_entry
from .._checks import check_number
from ..measures.foreground import check_settings
from .functional.foreground import _adadfrc_compute, _adadfrc_update
from ._base import GeoConMetric

_PLOTTED = ("pooled_adadfrc_mean", "pooled_adadfrc_quantile")


class AdaDFRC(GeoConMetric):
    """AdaDFRC-W2 pooled over every valid (pair, object) sample seen by :meth:`update`.

    ``update(flow (P, 2, H, W), masks (P, K, H, W) bool, reliability (P, H, W) | None)`` scores
    each pair's objects with :func:`~geocon_torch.metrics.functional.adadfrc` (float16 /
    bfloat16 flow, e.g. a half-precision flow network's, is computed in float32; a flow that
    requires grad is detached: no state holds a graph): masks may also
    be 0 / 1 floats or integers (soft masks are an InputError: threshold them first, e.g.
    ``m > 0.5``); reliability weights outside [0, 1] are clamped to it, not checked.
    ``compute()`` returns a dict of 0-d tensors:

    * ``pooled_adadfrc_mean``: mean D over all valid samples (px^2);
    * ``pooled_adadfrc_quantile``: the ``percentile`` quantile of those samples;
    * ``num_samples`` (their count), ``num_not_applicable`` ((pair, object) slots where the
      object is absent or below ``min_pixels``, or has no non-degenerate fit, a D that
      overflows included) and ``num_error`` (slots with NaN / inf flow inside the object:
      left out of the pool).

    The names say *pooled*: ``score_clip``'s foreground block reports ``adadfrc_mean`` /
    ``adap90`` per object (over that object's pairs), a different quantity. With no valid
    sample both scores are NaN (never 0) and ``compute()`` warns with the first reason.

    States (reduce correctly under torch.distributed): ``sum_d``, ``count``,
    ``num_not_applicable``, ``num_error`` (``sum``), ``values`` and ``reasons`` (``cat``;
    ``values`` is needed for the quantile). The counts and the quantile are exact after a
    sync; the float64 ``sum_d`` is summed per rank, then across ranks, so the pooled mean can
    differ from one process's in the last bit (summation order; float32 D values rarely round).

    Args:
        grid: N of the adaptive N x N grid over each object's box, an integer >= 2.
        score: ``"wmse"`` (weighted mean squared affine residual) or ``"w2"`` (W2 variant).
        min_pixels: (pair, object) slots with fewer mask pixels are not applicable (an
            integer >= 0).
        percentile: quantile of ``pooled_adadfrc_quantile``, in [0, 1] (0.9: AdaP90).
        **kwargs: torchmetrics ``Metric`` options (``dist_sync_on_step``, ...).
    Raises:
        InputError, ArgumentTypeError: a bad ``grid`` / ``score`` / ``min_pixels`` /
            ``percentile`` (a str such as "0.9" is refused, not converted), at construction;
            InputError from :meth:`update`: masks that are not binary.

    Example:
        >>> import torch
        >>> from geocon_torch.metrics import AdaDFRC
        >>> flow = torch.zeros(2, 2, 32, 32)
        >>> flow[:, 0] = 1.5  # rigid translation
        >>> masks = torch.zeros(2, 1, 32, 32, dtype=torch.bool)
        >>> masks[:, 0, 4:28, 4:28] = True
        >>> metric = AdaDFRC()
        >>> metric.update(flow, masks)
        >>> out = metric.compute()
        >>> int(out["num_samples"]), bool(out["pooled_adadfrc_mean"] < 1e-6)
        (2, True)
    """

    higher_is_better = False
    is_differentiable = False
    full_state_update = False
    plot_lower_bound: Optional[float] = 0.0
    _unit = "(pair, object) sample"

    sum_d: Tensor
    count: Tensor
    values: List[Tensor]

    def __init__(self, grid: int = 8, score: str = "wmse", min_pixels: int = 64,
                 percentile: float = 0.9, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        check_settings(grid, score, min_pixels=min_pixels)  # at construction, not at update
        check_number(percentile, "percentile", 0, 1)
        self.grid = int(grid)
        self.score = score
        self.min_pixels = int(min_pixels)
        self.percentile = float(percentile)
        self.add_state("sum_d", default=torch.tensor(0.0, dtype=torch.float64),
                       dist_reduce_fx="sum")
        self.add_state("count", default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self._add_cat_state("values", torch.float64)
        self._add_no_data_states()
        self._add_protocol_state(self.grid, self.score, self.min_pixels, self.percentile)

    @eager_entry
    @autocast_off
    def update(self, flow: Tensor, masks: Tensor, reliability: Optional[Tensor] = None) -> None:
        # detached: forward runs this with grad enabled, and a state must never hold the flow
        # network's graph (clone / deepcopy / AveragedModel refuse non-leaf tensors)
        flow, reliability = (t.detach() if isinstance(t, Tensor) else t
                             for t in (flow, reliability))
        vals, n_na, n_err = _adadfrc_update(flow, masks, reliability, grid=self.grid,
                                            score=self.score, min_pixels=self.min_pixels)
        self._add_in_order("sum_d", vals)
        self.count += vals.numel()
        self._append("values", vals)
        reason = None
        if n_err:
            reason = f"error: NaN / inf flow or D in {n_err} (pair, object) samples"
        elif n_na:
            reason = (f"not_applicable: object absent, below min_pixels={self.min_pixels} px "
                      f"or without an affine fit (fewer than 3 weighted grid cells, or all on "
                      f"one line) in {n_na} (pair, object) slots")
        self._record(n_na, n_err, reason)

    def compute(self) -> Dict[str, Tensor]:
        vals = dim_zero_cat(self.values) if len(self.values) else \
            torch.zeros(0, dtype=torch.float64, device=self.sum_d.device)
        out = _adadfrc_compute(self.sum_d, self.count, vals.to(torch.float64), self.percentile)
        counts = {"num_samples": self.count.clone(),
                  "num_not_applicable": self.num_not_applicable.clone(),
                  "num_error": self.num_error.clone()}
        self._warn_nan(out, _PLOTTED, counts)
        return {**out, **counts}

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot the pooled mean and quantile (px^2, lower bound 0) of one ``compute()`` output
        or a list of them. Returns (figure, axes)."""
        return self._plot_subset(val, _PLOTTED, ax)
