"""torchmetrics classes of the WorldAtlas epipolar trio: ``EpipolarError``, ``EpipolarInlierRate``,
``FeatureMatchCoverage``.

All three hold the same states and run the same analysis
(:func:`~geocon_torch.metrics.functional.epipolar._epipolar_update`, i.e.
:func:`epipolar_sections` on the batch converted by the one io tensor -> Clip path; given a
GeoConConfig, on the frames its ``io`` keeps, as ``score_clip(preset="worldatlas")`` reads
them). There is no module-level cache: in a ``MetricCollection`` torchmetrics' compute groups
share one update among the three (after the first update, or from the start with
:func:`epipolar_collection`); used as separate objects, each class analyses the batch itself.

The value over a run is the mean of the per-clip values over the *applicable* clips; clips that
come back not_applicable are counted in ``num_not_applicable`` and left out. With no applicable
clip ``compute()`` warns (counts and the first reason) and returns NaN. Every state is a
``sum`` (or the ``cat`` reason state), so ``merge_state`` and torch.distributed sync pool them:
the counts and reasons exactly; the float64 running sums are added per rank, then across ranks
(``(a + b) + (c + d)`` rather than one process's ``((a + b) + c) + d``), so a synced mean
agrees with one process over the same clips to within rounding (about 1 ulp), not always bit
for bit. ``compute()``, ``compute_score()``, ``counts()`` and ``first_reason()`` all read
synced states (collectives under DDP: call them on every rank). The states are the running sums
``epipolar_error_sum_px`` (the geometric error, px: never to be read as a count of failures,
which is ``num_error``), ``score_sum``, ``rate_sum``, ``coverage_sum`` and the counts
``num_clips``, ``num_ok``, ``num_not_applicable``, ``num_error``; a state_dict saved under the
retired state name ``error_sum`` still loads (DeprecationWarning, docs/GLOSSARY.md).
``last_sections`` (the sections of the last batch analysed by this object) is a local
diagnostic, not a metric value.

Example::

    trio = epipolar_collection()     # MetricCollection, one analysis per update
    trio.update(videos)              # (B, T, C, H, W) uint8 or float in [0, 1], any device
    trio.compute()                   # {"EpipolarError": px, "EpipolarInlierRate": .., ...}
"""
from __future__ import annotations

import warnings
from typing import Any, Dict, List, Optional

import torch
from torch import Tensor
from torchmetrics import MetricCollection

from .._precision import autocast_off, eager_entry
from .._checks import retired_argument, retired_name
from ..config import GeoConConfig, IOConfig
from ..sections.epipolar import resolve_implementation
from .functional._common import OK, VideosLike
from .functional.epipolar import (EPIPOLAR_FIELDS, EpipolarConfigArg, _epipolar_compute,
                                  _epipolar_update, epipolar_settings)
from ._base import GeoConMetric

_COUNTS = ("num_clips", "num_ok", "num_not_applicable", "num_error")
#: the running-sum state of each value (:data:`EPIPOLAR_FIELDS` key -> state name)
SUM_STATES = {"error": "epipolar_error_sum_px", "score": "score_sum", "rate": "rate_sum",
              "coverage": "coverage_sum"}
#: retired state name -> its name now (docs/GLOSSARY.md): old checkpoints still load
RETIRED_STATES = {"error_sum": "epipolar_error_sum_px"}


#: ``io`` fields besides the frame choice that change the pixels the protocol measures
_PIXEL_FIELDS = ("letterbox_threshold", "letterbox_min_fraction")


def _frame_choice(config: Optional[GeoConConfig]) -> List[Dict[str, Any]]:
    """What ``config.io`` changes in the frames the protocol measures, as protocol-key
    settings: the frame selection (``io.stride`` / ``io.max_frames``), the letterbox rule where
    it is not the default and a lens that distorts (``io.lens``: the frames are undistorted
    first); empty when none applies (None, or the defaults: the numbers of an EpipolarConfig),
    so two metrics that measure the same pixels share their key, and keys of the defaults and
    of a frame choice alone are those of earlier releases."""
    if config is None:
        return []
    io, default = config.io, IOConfig()
    out: Dict[str, Any] = {}
    if io.stride != 1 or io.max_frames is not None:
        out.update({"io.stride": io.stride, "io.max_frames": io.max_frames})
    out.update({f"io.{k}": getattr(io, k) for k in _PIXEL_FIELDS
                if getattr(io, k) != getattr(default, k)})
    lens = config.protocol_dict()["io"].get("lens")  # only a lens that distorts
    if lens is not None:
        out["io.lens"] = lens
    return [out] if out else []


class _EpipolarTrio(GeoConMetric):
    """Shared states and update of the three epipolar metrics (see the module docstring).

    Args:
        config: EpipolarConfig / GeoConConfig / a GeoConConfig's dict / None (defaults). A
            GeoConConfig (or dict) also selects the frames as ``score_clip(preset=
            "worldatlas")`` does (``io.stride`` / ``io.max_frames``; the protocol's frames at
            native pixels), so each clip's value is that call's; an EpipolarConfig or None
            reads every frame.
        implementation: "auto" (torch on CUDA inputs, OpenCV on CPU inputs), "opencv" or
            "torch" (the retired name ``path=`` still works, with a DeprecationWarning).
        features: torch-path feature backend ("auto", "torch-sift", "kornia-sift",
            "opencv-sift").
        kwargs: torchmetrics Metric options (dist_sync_on_step, process_group, ...).
    """

    is_differentiable = False
    full_state_update = False
    _field = "error"

    epipolar_error_sum_px: Tensor
    score_sum: Tensor
    rate_sum: Tensor
    coverage_sum: Tensor
    num_ok: Tensor
    num_clips: Tensor

    def __init__(self, config: EpipolarConfigArg = None, *, implementation: str = "auto",
                 features: Optional[str] = None, **kwargs: Any) -> None:
        if "path" in kwargs:
            implementation = retired_argument({"path": kwargs.pop("path")}, "path",
                                              "implementation", implementation)
        super().__init__(**kwargs)
        self.epipolar_config, reading = epipolar_settings(config)
        #: what each update is scored with: the GeoConConfig whose ``io`` selects the frames,
        #: else the EpipolarConfig (every frame)
        self.scored_config = reading if reading is not None else self.epipolar_config
        resolve_implementation(implementation, self.epipolar_config, None)  # InputError now
        self.implementation = implementation
        self.features = features
        for state in SUM_STATES.values():
            self.add_state(state, torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("num_ok", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self.add_state("num_clips", torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self._add_no_data_states()
        self._add_protocol_state(self.epipolar_config.to_dict(), implementation, features,
                                 *_frame_choice(reading))
        self.last_sections: List[Dict[str, Any]] = []

    @eager_entry
    @autocast_off
    def update(self, videos: VideosLike) -> None:
        """Analyse a batch: (B, T, C, H, W) uint8 / float [0, 1] tensor (any device) or a list
        of (T, C, H, W) tensors or Clips. Raises ClipTensorError for a malformed batch."""
        got, self.last_sections = _epipolar_update(videos, self.scored_config,
                                                   self.implementation, self.features,
                                                   self.num_clips.device)
        ok = got.status == OK
        for name, key in EPIPOLAR_FIELDS.items():
            self._add_in_order(SUM_STATES[name], got.values[key][ok])
        self.num_ok += int(ok.sum())
        self.num_clips += got.status.numel()
        self._record_clips(got.status, got.first_reason())

    def _mean(self, name: str) -> Tensor:
        value = _epipolar_compute(getattr(self, SUM_STATES[name]), self.num_ok)
        field = EPIPOLAR_FIELDS[name]
        self._warn_nan({field: value}, (field,), {k: getattr(self, k) for k in _COUNTS})
        return value

    def compute(self) -> Tensor:
        return self._mean(self._field)

    def counts(self) -> Dict[str, Tensor]:
        """Synced 0-d int64 counts: ``num_clips``, ``num_ok``, ``num_not_applicable``,
        ``num_error`` (a collective under DDP: call it on every rank)."""
        return self._synced(lambda: {k: getattr(self, k).clone() for k in _COUNTS})

    @property
    def error_sum(self) -> Tensor:
        """Retired name of the state ``epipolar_error_sum_px`` (docs/GLOSSARY.md)."""
        retired_name("metric state error_sum", "epipolar_error_sum_px")
        return self.epipolar_error_sum_px

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str, *args: Any,
                              **kwargs: Any) -> None:
        """Load the states; a state saved under a retired name (:data:`RETIRED_STATES`, e.g. a
        checkpoint written before the rename) loads into its state now, with a
        DeprecationWarning."""
        for old, new in RETIRED_STATES.items():
            if prefix + old in state_dict:
                retired_name(f"metric state {prefix}{old}", f"{prefix}{new}")
                value = state_dict.pop(prefix + old)
                state_dict.setdefault(prefix + new, value)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    @property
    def num_applicable(self) -> Tensor:
        """Retired name of ``num_ok`` (docs/GLOSSARY.md)."""
        warnings.warn("num_applicable is deprecated; use num_ok (docs/GLOSSARY.md)",
                      DeprecationWarning, stacklevel=2)
        return self.num_ok

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot one ``compute()`` value or a list of them (torchmetrics ``_plot``, with this
        class's bounds). Returns (figure, axes)."""
        return self._plot(val, ax)


class EpipolarError(_EpipolarTrio):
    """Mean over applicable clips of ``epipolar_error`` (px at the analysis resolution: median
    over pairs of the per-pair median Sampson distance of the RANSAC inliers), >= 0. Lower is
    better. ``compute_score()`` gives the mean normalised score clip(1 - error / 5, 0, 1),
    synced like ``compute()``.

    Example:
        >>> import torch, warnings
        >>> from geocon_torch.metrics import EpipolarError
        >>> metric = EpipolarError()
        >>> metric.update(torch.full((2, 3, 3, 64, 64), 128, dtype=torch.uint8))  # flat grey
        >>> with warnings.catch_warnings(record=True):
        ...     warnings.simplefilter("always")
        ...     value, score = metric.compute(), metric.compute_score()
        >>> value, int(metric.counts()["num_not_applicable"])
        (tensor(nan, dtype=torch.float64), 2)
    """

    higher_is_better = False
    plot_lower_bound: Optional[float] = 0.0
    _field = "error"

    def compute_score(self) -> Tensor:
        """Mean normalised score over applicable clips, in [0, 1] (synced; NaN when none)."""
        return self._synced(lambda: self._mean("score"))


class EpipolarInlierRate(_EpipolarTrio):
    """Mean over applicable clips of ``epipolar_inlier_rate`` (RANSAC inliers / ratio-filtered
    matches, averaged over pairs), in [0, 1]. Higher is better.

    Example:
        >>> import torch
        >>> from geocon_torch.metrics import EpipolarInlierRate
        >>> metric = EpipolarInlierRate()
        >>> metric.update([torch.zeros(2, 1, 48, 48)])  # a list of (T, C, H, W) clips
        >>> int(metric.counts()["num_clips"]), metric.first_reason() is not None
        (1, True)
    """

    higher_is_better = True
    plot_lower_bound: Optional[float] = 0.0
    plot_upper_bound: Optional[float] = 1.0
    _field = "rate"


class FeatureMatchCoverage(_EpipolarTrio):
    """Mean over applicable clips of ``feature_match_coverage`` (min(inliers / min(kp_left,
    kp_right), 1), averaged over pairs), in [0, 1]. Higher is better.

    Example:
        >>> import torch
        >>> from geocon_torch.metrics import FeatureMatchCoverage
        >>> metric = FeatureMatchCoverage()
        >>> metric.update(torch.rand(1, 2, 3, 48, 48))  # float in [0, 1] is accepted
        >>> int(metric.num_clips)
        1
    """

    higher_is_better = True
    plot_lower_bound: Optional[float] = 0.0
    plot_upper_bound: Optional[float] = 1.0
    _field = "coverage"


def epipolar_collection(config: EpipolarConfigArg = None, **kwargs: Any) -> MetricCollection:
    """The trio as a MetricCollection with its compute group declared up front, so every
    ``update`` (the first one too) analyses the batch once for the three metrics.

    ``kwargs`` go to each class (``implementation``, ``features``, torchmetrics options)."""
    return MetricCollection(
        {"EpipolarError": EpipolarError(config, **kwargs),
         "EpipolarInlierRate": EpipolarInlierRate(config, **kwargs),
         "FeatureMatchCoverage": FeatureMatchCoverage(config, **kwargs)},
        compute_groups=[["EpipolarError", "EpipolarInlierRate", "FeatureMatchCoverage"]])
