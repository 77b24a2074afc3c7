"""torchmetrics classes of the WorldAtlas epipolar trio: ``EpipolarError``, ``EpipolarInlierRate``,
``FeatureMatchCoverage``.

All three hold the same states and run the same analysis (:func:`epipolar_sections`): in a
``MetricCollection`` torchmetrics puts them in one compute group (one update for the three), and
used separately they share a small cache keyed by the batch tensor, so a batch is analysed once.
The value over a run is the mean of the per-clip values over the *applicable* clips (clips that
come back not_applicable are counted in ``num_not_applicable`` and left out); with no applicable
clip ``compute()`` warns and returns NaN. States are sums (``dist_reduce_fx="sum"``), so
``merge_state`` and torch.distributed sync are exact.

Example::

    trio = MetricCollection([EpipolarError(), EpipolarInlierRate(), FeatureMatchCoverage()])
    trio.update(videos)          # (B, T, C, H, W) uint8 or float in [0, 1], any device
    trio.compute()               # {"EpipolarError": px, "EpipolarInlierRate": .., ...}
"""
from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torchmetrics import Metric
from torchmetrics.utilities import rank_zero_warn

from ..errors import ShapeError
from ..types import Clip
from ..sections.epipolar import (ConfigLike, clip_from_frames, epipolar_config,
                                 epipolar_sections)

VideosLike = Union[torch.Tensor, Sequence[Union[torch.Tensor, Clip]]]

_CACHE: "OrderedDict[Tuple, Tuple[Any, List[Dict[str, Any]]]]" = OrderedDict()
_CACHE_SIZE = 4
_FIELDS = {"error": "epipolar_error", "score": "epipolar_error_score",
           "rate": "epipolar_inlier_rate", "coverage": "feature_match_coverage"}


def as_clips(videos: VideosLike) -> List[Clip]:
    """(B, T, C, H, W) tensor, or a list of (T, C, H, W) tensors / Clips -> list of Clips."""
    if isinstance(videos, torch.Tensor):
        if videos.ndim != 5:
            raise ShapeError(f"videos must have shape (B, T, C, H, W), got {tuple(videos.shape)}")
        return [clip_from_frames(v, name=f"batch[{b}]") for b, v in enumerate(videos)]
    return [v if isinstance(v, Clip) else clip_from_frames(v, name=f"batch[{b}]")
            for b, v in enumerate(videos)]


def _cache_key(videos: VideosLike, config: Any, path: str, features: Optional[str]) -> Tuple:
    if isinstance(videos, torch.Tensor):
        ident: Tuple = (videos.data_ptr(), tuple(videos.shape), videos.dtype, str(videos.device),
                        videos._version)
    else:
        ident = tuple(id(v) for v in videos)
    return (id(videos), ident, repr(config), path, features)


def shared_sections(videos: VideosLike, config: ConfigLike = None, *, path: str = "auto",
                    features: Optional[str] = None) -> List[Dict[str, Any]]:
    """Epipolar sections of a batch, computed once per (batch, config, path, features)."""
    cfg = epipolar_config(config)
    key = _cache_key(videos, cfg, path, features)
    hit = _CACHE.get(key)
    if hit is not None and hit[0]() is videos:
        _CACHE.move_to_end(key)
        return hit[1]
    clips = as_clips(videos)
    device = clips[0].frames.device if clips else None
    sections = epipolar_sections(clips, cfg, preset="worldatlas", path=path, device=device,
                                 features=features)
    try:
        _CACHE[key] = (weakref.ref(videos), sections)
    except TypeError:  # a plain list cannot be weak-referenced: do not cache it
        return sections
    while len(_CACHE) > _CACHE_SIZE:
        _CACHE.popitem(last=False)
    return sections


class _EpipolarTrio(Metric):
    """Shared states and update of the three epipolar metrics (see the module docstring).

    Args:
        config: EpipolarConfig / GeoConConfig / None (defaults).
        path: "auto" (torch on CUDA inputs, OpenCV on CPU inputs), "opencv" or "torch".
        features: torch-path feature backend ("auto", "kornia-sift", "opencv-sift").
        kwargs: torchmetrics Metric options (dist_sync_on_step, process_group, ...).
    """

    is_differentiable = False
    full_state_update = False
    _field = "error"

    def __init__(self, config: ConfigLike = None, *, path: str = "auto",
                 features: Optional[str] = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.epipolar_config = epipolar_config(config)
        self.path = path
        self.features = features
        for name in _FIELDS:
            self.add_state(f"{name}_sum", torch.tensor(0.0, dtype=torch.float64),
                           dist_reduce_fx="sum")
        self.add_state("num_applicable", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("num_clips", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.last_sections: List[Dict[str, Any]] = []

    def update(self, videos: VideosLike) -> None:
        """Analyse a batch: (B, T, C, H, W) uint8 / float [0, 1] tensor (any device) or a list
        of (T, C, H, W) tensors or Clips."""
        sections = shared_sections(videos, self.epipolar_config, path=self.path,
                                   features=self.features)
        self.last_sections = sections
        ok = [s for s in sections if s["status"] == "ok"]
        for name, key in _FIELDS.items():
            total = sum(float(s[key]) for s in ok)
            state = getattr(self, f"{name}_sum")
            setattr(self, f"{name}_sum", state + torch.tensor(total, dtype=torch.float64,
                                                              device=state.device))
        self.num_applicable += len(ok)
        self.num_clips += len(sections)

    @property
    def num_not_applicable(self) -> int:
        return int(self.num_clips - self.num_applicable)

    def _mean(self, name: str) -> torch.Tensor:
        n = int(self.num_applicable)
        if n == 0:
            rank_zero_warn(f"{type(self).__name__}: no applicable clip among {int(self.num_clips)}"
                           " (all not_applicable); returning NaN")
            return torch.tensor(float("nan"), dtype=torch.float64, device=self.num_clips.device)
        return getattr(self, f"{name}_sum") / n

    def compute(self) -> torch.Tensor:
        return self._mean(self._field)


class EpipolarError(_EpipolarTrio):
    """Mean over applicable clips of ``epipolar_error`` (px at the analysis resolution: median
    over pairs of the per-pair median Sampson distance of the RANSAC inliers). Lower is better.
    ``compute_score()`` gives the mean normalised score clip(1 - error / 5, 0, 1)."""

    higher_is_better = False
    _field = "error"

    def compute_score(self) -> torch.Tensor:
        return self._mean("score")


class EpipolarInlierRate(_EpipolarTrio):
    """Mean over applicable clips of ``epipolar_inlier_rate`` (RANSAC inliers / ratio-filtered
    matches, averaged over pairs). Higher is better."""

    higher_is_better = True
    _field = "rate"


class FeatureMatchCoverage(_EpipolarTrio):
    """Mean over applicable clips of ``feature_match_coverage`` (min(inliers / min(kp_left,
    kp_right), 1), averaged over pairs). Higher is better."""

    higher_is_better = True
    _field = "coverage"
