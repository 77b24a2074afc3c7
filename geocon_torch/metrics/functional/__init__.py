"""Functional metrics: batched, tensors in, tensors out (the torchmetrics ``functional`` API).

* :func:`background_consistency` (videos (B, T, C, H, W) -> dict of (B,) IR / GE / pass /
  status tensors), :func:`epipolar_error`, :func:`epipolar_inlier_rate`,
  :func:`feature_match_coverage` (videos -> (B,) float64, NaN where a clip has no value;
  ``return_status=True`` adds the (B,) status codes into :data:`STATUSES`);
* :func:`adadfrc` (flow (P, 2, H, W) + masks (P, K, H, W) -> D (P, K), valid (P, K));
* :func:`soft_background_consistency` (float videos (B, T, C, H, W) -> (B,) differentiable soft
  inlier ratio: a training-time monitor, not the paper's IR).

Each Metric class in :mod:`geocon_torch.metrics` shares its private ``_xxx_update`` /
``_xxx_compute`` helpers with these functions. The per-clip / per-pair math itself lives in
:mod:`geocon_torch.measures`; tensors become Clips through the one io path
(:func:`geocon_torch.io.clips_from_tensor`), so a malformed batch raises ClipTensorError here
exactly as in ``read_clip`` and every class. "No data" convention: see
:mod:`geocon_torch.metrics.functional._common`.

The video metrics (:func:`background_consistency`, :func:`epipolar_error`,
:func:`epipolar_inlier_rate`, :func:`feature_match_coverage`) are not differentiable: they
score without autograd (no gradient, also for videos that require grad); the differentiable
signal is :func:`soft_background_consistency`. (:func:`adadfrc` keeps autograd on: D carries
the flow's gradient.) All but :func:`soft_background_consistency` run eagerly inside
``torch.compile`` (a graph break).
"""
from ._common import STATUSES
from .background import background_consistency
from .epipolar import epipolar_error, epipolar_inlier_rate, feature_match_coverage
from .foreground import adadfrc
from .soft import soft_background_consistency

__all__ = ["background_consistency", "adadfrc", "epipolar_error", "epipolar_inlier_rate",
           "feature_match_coverage", "STATUSES", "soft_background_consistency"]
