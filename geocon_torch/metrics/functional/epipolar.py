"""The WorldAtlas epipolar trio as batched functions (``epipolar_error``,
``epipolar_inlier_rate``, ``feature_match_coverage``) and the ``_epipolar_update`` /
``_epipolar_compute`` helpers the three Metric classes share with them.

Each function analyses the whole batch with
:func:`geocon_torch.sections.epipolar.epipolar_sections` (one batch on the torch path) at the
clips' native pixels (the one tensor -> Clip path, ``long_side=None``) and returns one value per
clip; the protocol is described in :mod:`geocon_torch.epipolar`. Given a GeoConConfig (or its
dict), the frames are those ``score_clip(preset="worldatlas")`` measures: the protocol's frames
among those ``io.stride`` / ``io.max_frames`` keep, at native pixels (bit for bit that call's
``epipolar`` block with the same implementation); an EpipolarConfig or None reads every frame.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import numpy as np
import torch
from torch import Tensor

from ..._precision import autocast_off, eager_entry
from ..._checks import retired_argument
from ...config import EpipolarConfig, GeoConConfig, load_config
from ...errors import ClipTensorError
from ...pipeline import read_options
from ...sections.epipolar import (EpipolarConfigLike, epipolar_config, epipolar_sections,
                                  native_tensor_clips)
from ...types import Clip
from ._common import ClipValues, VideosLike, as_clips, check_videos, per_clip, status_codes

#: Metric-class state prefix -> per-clip field of the ``epipolar`` block.
EPIPOLAR_FIELDS = {"error": "epipolar_error", "score": "epipolar_error_score",
                   "rate": "epipolar_inlier_rate", "coverage": "feature_match_coverage"}
#: a ``config=`` of the epipolar metrics: EpipolarConfig, GeoConConfig, a GeoConConfig's dict
#: or None
EpipolarConfigArg = Union[EpipolarConfigLike, Mapping[str, Any]]


def epipolar_settings(config: EpipolarConfigArg
                      ) -> Tuple[EpipolarConfig, Optional[GeoConConfig]]:
    """The settings of a ``config=`` argument: (its EpipolarConfig, the GeoConConfig whose
    ``io`` selects the frames, or None: every frame). A mapping is a GeoConConfig's dict
    (:func:`~geocon_torch.config.load_config`; ConfigError for an unknown key); an
    EpipolarConfig or None has no ``io`` section."""
    if isinstance(config, Mapping):
        config = load_config(config)
    return epipolar_config(config), config if isinstance(config, GeoConConfig) else None


def _native_clips(videos: VideosLike, cfg: GeoConConfig
                  ) -> Tuple[List[Clip], List[Optional[np.ndarray]]]:
    """The clips and pairs ``score_clip(preset="worldatlas")`` measures under ``cfg``: per
    tensor clip the protocol's frames among those ``cfg.io`` keeps (stride, frame cap,
    letterbox rule) at native pixels
    (:func:`~geocon_torch.sections.epipolar.native_tensor_clips`, one read per batch); a Clip
    as it is. Raises ClipTensorError for a malformed batch."""
    check_videos(videos)
    if isinstance(videos, Tensor):
        natives = native_tensor_clips(videos, cfg, read_options(cfg, videos))
    else:
        natives = []
        for b, video in enumerate(videos):
            if isinstance(video, Clip):
                natives.append((video, None))
            elif isinstance(video, Tensor):
                natives += native_tensor_clips(video[None], cfg, read_options(cfg, video))
            else:
                raise ClipTensorError(f"videos[{b}] must be a (T, C, H, W) tensor or a Clip, "
                                      f"got {type(video).__name__}")
    return [clip for clip, _ in natives], [pairs for _, pairs in natives]


def _epipolar_update(videos: VideosLike, config: EpipolarConfigArg = None,
                     implementation: str = "auto",
                     features: Optional[str] = None,
                     out_device: Union[None, str, torch.device] = None
                     ) -> Tuple[ClipValues, List[Dict[str, Any]]]:
    """Analyse a batch once: ClipValues with (B,) float64 values of the four
    :data:`EPIPOLAR_FIELDS` (NaN for not_applicable clips) on ``out_device``, plus the B
    ``epipolar`` sections. ``config``: a GeoConConfig (or its dict) reads the frames its
    ``io`` keeps as ``score_clip`` does (:func:`_native_clips`); an EpipolarConfig or None
    every frame at native pixels. Raises ClipTensorError for a malformed batch."""
    epi, geo = epipolar_settings(config)
    if geo is None:
        clips, pairs = as_clips(videos), None
    else:
        clips, pairs = _native_clips(videos, geo)
    device = clips[0].frames.device if clips else None
    sections = epipolar_sections(clips, epi, preset="worldatlas",
                                 implementation=implementation,
                                 device=device, features=features, pairs=pairs)
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


def _per_clip(key: str, videos: VideosLike, config: EpipolarConfigArg, implementation: str,
              features: Optional[str], return_status: bool, retired: Dict[str, Any]
              ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    implementation = retired_argument(retired, "path", "implementation", implementation)
    out_device = videos.device if isinstance(videos, Tensor) else None
    got, _ = _epipolar_update(videos, config, implementation, features, out_device)
    return (got.values[key], got.status) if return_status else got.values[key]


@eager_entry
@autocast_off
def epipolar_error(videos: VideosLike, config: EpipolarConfigArg = None, *,
                   implementation: str = "auto", features: Optional[str] = None,
                   normalized: bool = False, return_status: bool = False,
                   **retired: Any) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Per-clip epipolar error: median over valid pairs of the per-pair median Sampson distance
    of the RANSAC inliers, px at the analysis resolution (width <= 640). Lower is better.

    Args:
        videos: (B, T, C, H, W) uint8 / float in [0, 1] (any device), or a list of
            (T, C, H, W) tensors / Clips.
        config: EpipolarConfig / GeoConConfig / a GeoConConfig's dict / None (defaults). A
            GeoConConfig (or dict) also selects the frames as ``score_clip(preset=
            "worldatlas")`` reads them: ``io.stride`` / ``io.max_frames`` keep frames 0,
            stride, ... and the protocol's frames among them are analysed at native pixels
            (``io.long_side`` does not resize them), so the values equal that call's
            ``epipolar`` block; an EpipolarConfig or None reads every frame.
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


@eager_entry
@autocast_off
def epipolar_inlier_rate(videos: VideosLike, config: EpipolarConfigArg = None, *,
                         implementation: str = "auto", features: Optional[str] = None,
                         return_status: bool = False, **retired: Any
                         ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Per-clip epipolar inlier rate: RANSAC inliers / ratio-filtered matches, averaged over
    valid pairs, in [0, 1]. Higher is better.

    Args:
        videos: (B, T, C, H, W) uint8 / float in [0, 1] (any device), or a list of
            (T, C, H, W) tensors / Clips.
        config, implementation, features: as in :func:`epipolar_error`.
        return_status: also return the (B,) int64 status codes (``STATUSES``).

    Returns:
        (B,) float64 in [0, 1] on the videos' device, NaN for a not_applicable clip; with
        ``return_status`` a tuple (values, status).

    Raises:
        ClipTensorError: a malformed batch (the io tensor rule).

    Example:
        >>> import torch
        >>> from geocon_torch.metrics.functional import epipolar_inlier_rate
        >>> epipolar_inlier_rate([torch.zeros(2, 1, 48, 48)])  # flat: not_applicable
        tensor([nan], dtype=torch.float64)
    """
    return _per_clip("epipolar_inlier_rate", videos, config, implementation, features,
                     return_status, retired)


@eager_entry
@autocast_off
def feature_match_coverage(videos: VideosLike, config: EpipolarConfigArg = None, *,
                           implementation: str = "auto", features: Optional[str] = None,
                           return_status: bool = False, **retired: Any
                           ) -> Union[Tensor, Tuple[Tensor, Tensor]]:
    """Per-clip feature match coverage: min(inliers / min(kp_left, kp_right), 1), averaged
    over valid pairs, in [0, 1]. Higher is better.

    Args:
        videos: (B, T, C, H, W) uint8 / float in [0, 1] (any device), or a list of
            (T, C, H, W) tensors / Clips.
        config, implementation, features: as in :func:`epipolar_error`.
        return_status: also return the (B,) int64 status codes (``STATUSES``).

    Returns:
        (B,) float64 in [0, 1] on the videos' device, NaN for a not_applicable clip; with
        ``return_status`` a tuple (values, status).

    Raises:
        ClipTensorError: a malformed batch (the io tensor rule).

    Example:
        >>> import torch
        >>> from geocon_torch.metrics.functional import feature_match_coverage
        >>> feature_match_coverage(torch.full((2, 2, 3, 48, 48), 0.5), return_status=True)[1]
        tensor([1, 1])
    """
    return _per_clip("feature_match_coverage", videos, config, implementation, features,
                     return_status, retired)
