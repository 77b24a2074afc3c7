"""torchmetrics classes for background consistency (IR / GE), e.g. inside a training loop.

``BackgroundConsistency`` scores every clip of a batch with :func:`geocon_torch.score_clips`
(background only by default) and keeps the per-clip values as ``cat`` states, so the clip-level
medians are exact after a ``torch.distributed`` sync (every rank's clips are gathered before the
median; counts are ``sum`` states). ``compute()`` returns a dict of 0-d float64 tensors (``None``
for a value no clip produced). ``BackgroundInlierRatio`` / ``BackgroundGeometricError`` return
one number each.

    metric = BackgroundConsistency(config={"io": {"long_side": 480}})
    metric.update(videos)          # (B, T, C, H, W) uint8 / float [0, 1], any device; or paths
    metric.compute()["ir"]         # median clip IR over every clip seen (all ranks)
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Union

import torch
from torchmetrics import Metric
from torchmetrics.utilities import dim_zero_cat

from .._tensor_utils import masked_median
from ..config import GeoConConfig, load_config

_VALUES = ("ir", "ge_px", "ir_h", "ge_h_px", "ir_f", "ge_f_px")
_COUNTS = ("num_clips", "num_ok", "num_not_applicable", "num_error", "num_pass")

Videos = Union[torch.Tensor, Sequence[Union[str, Path, torch.Tensor]]]


class BackgroundConsistency(Metric):
    """Median clip IR / GE (and both model families, pass rate, status counts) over all clips.

    Args:
        config: GeoConConfig / dict / JSON path for :func:`score_clip` (paper defaults).
        preset: score_clip preset (default "background": no foreground / epipolar work).
        scoring_device: where features and fits run (default: each clip tensor's device).
        **kwargs: torchmetrics ``Metric`` options (``sync_on_compute``, ``process_group``...).
    """

    higher_is_better: Optional[bool] = None
    is_differentiable = False
    full_state_update = False

    def __init__(self, config: Union[None, str, Path, dict, GeoConConfig] = None, *,
                 preset: str = "background", scoring_device: Optional[torch.device] = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = load_config(config)
        self.preset = preset
        self.scoring_device = scoring_device
        for name in _VALUES:  # one entry per clip (list states gather uneven ranks)
            self.add_state(name, default=[], dist_reduce_fx="cat")
        for name in _COUNTS:
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")

    def update(self, videos: Videos, masks: Any = None, poses: Any = None) -> None:
        """Score a batch: ``videos`` (B, T, C, H, W) tensor or a list of paths / (T, C, H, W)
        tensors; ``masks`` / ``poses`` optional, one entry per clip (or a batched tensor)."""
        from ..pipeline import score_clips

        results = score_clips(videos, masks=masks, poses=poses, config=self.config,
                              device=self.scoring_device, preset=self.preset)
        dev = self.num_clips.device
        for name in _VALUES:  # only clips that produced the value (no NaN, no fake 0)
            vals = [float(r.background[name]) for r in results
                    if r.status == "ok" and r.background.get(name) is not None]
            getattr(self, name).append(torch.tensor(vals, dtype=torch.float64, device=dev))
        status = [r.status for r in results]
        self.num_clips += len(results)
        self.num_ok += status.count("ok")
        self.num_not_applicable += status.count("not_applicable")
        self.num_error += status.count("error")
        self.num_pass += sum(1 for r in results if r.background.get("pass") is True)

    def compute(self) -> Dict[str, Optional[torch.Tensor]]:
        out: Dict[str, Optional[torch.Tensor]] = {}
        for name in _VALUES:
            state = getattr(self, name)
            v = dim_zero_cat(state) if (isinstance(state, torch.Tensor) or state) else None
            out[name] = (masked_median(v, torch.ones_like(v, dtype=torch.bool))[0]
                         if v is not None and v.numel() else None)
        for name in _COUNTS:
            out[name] = getattr(self, name).clone()
        out["pass_rate"] = (self.num_pass.double() / self.num_ok.double()
                            if int(self.num_ok) > 0 else None)
        return out


class BackgroundInlierRatio(BackgroundConsistency):
    """Median clip background IR of the gated regime (higher is better)."""

    higher_is_better = True

    def compute(self) -> Optional[torch.Tensor]:  # type: ignore[override]
        return super().compute()["ir"]


class BackgroundGeometricError(BackgroundConsistency):
    """Median clip background GE in px at working resolution (lower is better)."""

    higher_is_better = False

    def compute(self) -> Optional[torch.Tensor]:  # type: ignore[override]
        return super().compute()["ge_px"]
