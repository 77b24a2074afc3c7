"""The WorldAtlas epipolar trio as batched functions (``epipolar_error``,
``epipolar_inlier_rate``, ``feature_match_coverage``) and the ``_epipolar_update`` /
``_epipolar_compute`` helpers the three Metric classes share with them.

Each function analyses the whole batch with
:func:`geocon_torch.sections.epipolar.epipolar_sections` (one batch on the torch path) at the
clips' native pixels (the one tensor -> Clip path, ``long_side=None``) and returns one value per
clip; the protocol is described in :mod:`geocon_torch.epipolar`.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Tuple, Union

import torch
from torch import Tensor

from ..._precision import autocast_off
from ..._checks import retired_argument
from ...sections.epipolar import EpipolarConfigLike, epipolar_config, epipolar_sections
from ._common import ClipValues, VideosLike, as_clips, per_clip, status_codes

#: Metric-class state prefix -> per-clip field of the ``epipolar`` block.
EPIPOLAR_FIELDS = {"error": "epipolar_error", "score": "epipolar_error_score",
                   "rate": "epipolar_inlier_rate", "coverage": "feature_match_coverage"}


def _epipolar_update(videos: VideosLike, config: EpipolarConfigLike = None,
                     implementation: str = "auto",
                     features: Optional[str] = None,
                     out_device: Union[None, str, torch.device] = None
                     ) -> Tuple[ClipValues, List[Dict[str, Any]]]:
    """Analyse a batch once: ClipValues with (B,) float64 values of the four
    :data:`EPIPOLAR_FIELDS` (NaN for not_applicable clips) on ``out_device``, plus the B
    ``epipolar`` sections. Raises ClipTensorError for a malformed batch."""
    clips = as_clips(videos)
    device = clips[0].frames.device if clips else None
    sections = epipolar_sections(clips, epipolar_config(config), preset="worldatlas",
                                 implementation=implementation,
                                 device=device, features=features)
    ok = [s["status"] == "ok" for s in sections]
    values = {key: per_clip([s[key] if good else None for s, good in zip(sections, ok)],
                            out_device) for key in EPIPOLAR_FIELDS.values()}
    reasons = ["" if good else str(s.get("reason") or "") for s, good in zip(sections, ok)]
    return ClipValues(values, status_codes([s["status"] for s in sections], out_device),
                      reasons), sections


def _epipolar_compute(total: Tensor, num_ok: Tensor) -> Tensor:
    """Mean over scored clips: ``total / num_ok`` (0-d float64; NaN when 0)."""
    if int(num_ok) == 0:
        return torch.tensor(float("nan"), dtype=torch.float64, device=total.device)
    return total / num_ok


def _per_clip(key: str, videos: VideosLike, config: EpipolarConfigLike, implementation: str,
              features: Optional[str], return_status: bool, retired: Dict[str, Any]
              ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    implementation = retired_argument(retired, "path", "implementation", implementation)
    out_device = videos.device if isinstance(videos, Tensor) else None
    got, _ = _epipolar_update(videos, config, implementation, features, out_device)
    return (got.values[key], got.status) if return_status else got.values[key]


@autocast_off
def epipolar_error(videos: VideosLike, config: EpipolarConfigLike = None, *,
                   implementation: str = "auto", features: Optional[str] = None,
                   normalized: bool = False, return_status: bool = False,
                   **retired: Any) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Per-clip epipolar error: median over valid pairs of the per-pair median Sampson distance
    of the RANSAC inliers, px at the analysis resolution (width <= 640). Lower is better.

    Args:
        videos: (B, T, C, H, W) uint8 / float in [0, 1] (any device), or a list of
            (T, C, H, W) tensors / Clips.
        config: EpipolarConfig / GeoConConfig / None (defaults).
        implementation: "auto" (torch on CUDA inputs, OpenCV on CPU inputs), "opencv" or
            "torch" (the retired name ``path=`` still works, with a DeprecationWarning).
        features: torch-path feature backend ("auto", "torch-sift", "kornia-sift",
            "opencv-sift").
        normalized: return the score clip(1 - error / 5, 0, 1) instead (higher is better).
        return_status: also return the (B,) int64 status codes (``STATUSES``).

    Returns:
        (B,) float64 on the videos' device, NaN for a not_applicable clip (too little texture,
        no valid pair); with ``return_status`` a tuple (values, status).

    Raises:
        ClipTensorError: a malformed batch (the io tensor rule).

    Example:
        >>> import torch
        >>> from geocon_torch.metrics.functional import epipolar_error
        >>> err, status = epipolar_error(torch.full((1, 3, 3, 64, 64), 128, dtype=torch.uint8),
        ...                              return_status=True)
        >>> err, status
        (tensor([nan], dtype=torch.float64), tensor([1]))
    """
    key = "epipolar_error_score" if normalized else "epipolar_error"
    return _per_clip(key, videos, config, implementation, features, return_status,
                     retired)


@autocast_off
def epipolar_inlier_rate(videos: VideosLike, config: EpipolarConfigLike = None, *,
                         implementation: str = "auto", features: Optional[str] = None,
                         return_status: bool = False, **retired: Any
                         ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Per-clip epipolar inlier rate: RANSAC inliers / ratio-filtered matches, averaged over
    valid pairs, in [0, 1]. Higher is better. Arguments, return value and errors as in
    :func:`epipolar_error`.

    Example:
        >>> import torch
        >>> from geocon_torch.metrics.functional import epipolar_inlier_rate
        >>> epipolar_inlier_rate([torch.zeros(2, 1, 48, 48)])  # flat: not_applicable
        tensor([nan], dtype=torch.float64)
    """
    return _per_clip("epipolar_inlier_rate", videos, config, implementation, features,
                     return_status, retired)


@autocast_off
def feature_match_coverage(videos: VideosLike, config: EpipolarConfigLike = None, *,
                           implementation: str = "auto", features: Optional[str] = None,
                           return_status: bool = False, **retired: Any
                           ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Per-clip feature match coverage: min(inliers / min(kp_left, kp_right), 1), averaged
    over valid pairs, in [0, 1]. Higher is better. Arguments, return value and errors as in
    :func:`epipolar_error`.

    Example:
        >>> import torch
        >>> from geocon_torch.metrics.functional import feature_match_coverage
        >>> feature_match_coverage(torch.full((2, 2, 3, 48, 48), 0.5), return_status=True)[1]
        tensor([1, 1])
    """
    return _per_clip("feature_match_coverage", videos, config, implementation, features,
                     return_status, retired)
