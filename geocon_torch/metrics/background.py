"""torchmetrics classes for background consistency (IR / GE), e.g. inside a training loop.

``BackgroundConsistency`` scores every clip of a batch with
:func:`~geocon_torch.metrics.functional.background_consistency` (``score_clips``, background
preset by default) and keeps the per-clip values as ``cat`` states, so the clip-level medians
are exact after a ``torch.distributed`` sync (every rank's clips are gathered before the
median; counts are ``sum`` states). ``compute()`` returns a dict of 0-d tensors; a value no clip
produced is NaN with a warning naming the first not_applicable / error reason (the package's
"no data" convention, never None). ``BackgroundInlierRatio`` / ``BackgroundGeometricError``
return one number each. A malformed batch raises ClipTensorError in ``update`` (the io tensor
rule), exactly as ``read_clip`` and the epipolar classes do.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
from torch import Tensor
from torchmetrics.utilities import dim_zero_cat

from .._checks import check_device
from .._precision import autocast_off, eager_entry
from ..config import GeoConConfig
from ..pipeline import scoring_config
from .functional._common import ERROR, NOT_APPLICABLE, OK
from .functional.background import (BACKGROUND_COUNTS, BACKGROUND_VALUES, check_background_preset,
                                    _background_consistency_compute,
                                    _background_consistency_update)
from ._base import GeoConMetric, _protocol_text, _protocol_digest

Videos = Union[torch.Tensor, Sequence[Union[str, Path, torch.Tensor]]]
_PLOTTED = ("ir", "ir_h", "ir_f", "pass_rate")


class BackgroundConsistency(GeoConMetric):
    """Median clip IR / GE (and both model families, pass rate, status counts) over all clips.

    Args:
        config: GeoConConfig / dict / JSON path for :func:`score_clip` (paper defaults).
        preset: score_clip preset (default "background": no foreground / epipolar work); it
            replaces a preset given inside ``config``. ``metric.config`` is the config scored,
            with that preset chosen (the preset the clips' results record); the results record
            the ``config_hash`` of :func:`~geocon_torch.pipeline.pinned_config` of it ("auto"
            backends resolved for the scoring device, the calibration file's hash pinned), not
            ``metric.config.config_hash()``.
        scoring_device: where features and fits run (default: the tensors' device, the first
            tensor's for a list; for paths the CUDA device when available). One that is no
            torch device ("gpu") is an InputError here; one this machine lacks ("cuda" without
            a GPU) is the InputError of :func:`~geocon_torch.pipeline.score_clips` at the
            first ``update``, before any clip is read.
        **kwargs: torchmetrics ``Metric`` options (``sync_on_compute``, ``process_group``...).

    ``compute()`` returns 0-d tensors: the float64 medians ``ir``, ``ge_px``, ``ir_h``,
    ``ge_h_px``, ``ir_f``, ``ge_f_px`` over the clips that produced them, ``pass_rate``
    (num_pass / num_ok) and the int64 counts ``num_clips``, ``num_ok``, ``num_not_applicable``,
    ``num_error``, ``num_pass``. NaN (with one warning) where no clip gave a value.

    Example:
        >>> import torch
        >>> from geocon_torch.metrics import BackgroundConsistency
        >>> import torch.nn.functional as F
        >>> g = torch.Generator().manual_seed(0)
        >>> tex = F.avg_pool2d(torch.rand(1, 3, 80, 112, generator=g), 5, stride=1, padding=2)[0]
        >>> tex = ((tex - tex.min()) / (tex.max() - tex.min()) * 255).to(torch.uint8)
        >>> pan = torch.stack([tex[:, 8:72, 2 * t:2 * t + 96] for t in range(3)])  # (3, 3, 64, 96)
        >>> metric = BackgroundConsistency(config={"io": {"long_side": None}})
        >>> metric.update(pan[None])  # (B, T, C, H, W)
        >>> out = metric.compute()
        >>> out["ir"].item(), int(out["num_ok"]), int(out["num_error"])
        (1.0, 1, 0)
    """

    higher_is_better: Optional[bool] = None
    is_differentiable = False
    full_state_update = False
    plot_lower_bound: Optional[float] = 0.0
    plot_upper_bound: Optional[float] = 1.0

    ir: List[Tensor]
    ge_px: List[Tensor]
    ir_h: List[Tensor]
    ge_h_px: List[Tensor]
    ir_f: List[Tensor]
    ge_f_px: List[Tensor]
    num_clips: Tensor
    num_ok: Tensor
    num_pass: Tensor

    def __init__(self, config: Union[None, str, Path, dict, GeoConConfig] = None, *,
                 preset: str = "background", scoring_device: Optional[torch.device] = None,
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.config = scoring_config(config, preset)  # records the preset it scores with
        self.preset = self.config.preset
        check_background_preset(self.preset)
        # no torch device ("gpu") is the constructor's InputError; one absent here ("cuda" on a
        # CPU host) may still be named (its protocol key): score_clips refuses it at update
        scoring_device = check_device(scoring_device, "scoring_device", available=False)
        self.scoring_device = scoring_device
        for name in BACKGROUND_VALUES:  # one entry per clip (list states gather uneven ranks)
            self._add_cat_state(name, torch.float64)
        for name in ("num_clips", "num_ok", "num_pass"):
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self._add_no_data_states()
        # an explicit scoring device resolves "auto" backends for itself (torch-sift on CUDA,
        # opencv-sift on the CPU): two metrics scored on different device types never share a
        # group. Its type only: cuda:0 / cuda:1 / cuda (each DDP rank's own GPU) are one protocol
        self._add_protocol_state(self.config.config_hash(), *(
            () if scoring_device is None else (torch.device(scoring_device).type,)))

    def _same_legacy_protocol(self, key: str, settings: Optional[str]) -> bool:
        """Whether ``key`` (16 hex digits) is this metric's protocol as keyed before the device
        type alone was: ``[config_hash, str(torch.device(scoring_device))]``, the index
        included ("cuda:0"). With the recorded ``settings`` (a checkpoint's metadata): their
        key, their config hash, and their device's type must match; without them (an older
        checkpoint's ``protocol_key`` state), the keys of this device type with the indexes
        0-63 are tried (hashes of a few bytes, only when the keys differ)."""
        ours = json.loads(self._protocol)
        if len(ours) != 2:  # no explicit scoring device: its key never held one
            return False
        if settings is None:
            names = [ours[1]] + [f"{ours[1]}:{i}" for i in range(64)]
            return any(_protocol_digest(_protocol_text([ours[0], name])).hex() == key
                       for name in names)
        try:
            theirs = json.loads(settings)
            same = (_protocol_digest(settings).hex() == key and isinstance(theirs, list)
                    and len(theirs) == 2 and theirs[0] == ours[0]
                    and isinstance(theirs[1], str) and torch.device(theirs[1]).type == ours[1])
        except (ValueError, RuntimeError, TypeError):
            return False
        return bool(same)

    @eager_entry
    @autocast_off
    def update(self, videos: Videos, masks: Any = None, poses: Any = None) -> None:
        """Score a batch: ``videos`` (B, T, C, H, W) tensor or a list of paths / (T, C, H, W)
        tensors; ``masks`` / ``poses`` optional, one entry per clip (or a batched tensor)."""
        got = _background_consistency_update(videos, masks, poses, self.config, self.preset,
                                             self.scoring_device, self.num_clips.device)
        # only clips that produced the value (no NaN, no fake 0), in clip order; the counts
        # come over in one transfer
        vals = [got.values[name] for name in BACKGROUND_VALUES]
        nan = [torch.isnan(v) for v in vals]
        status = got.status.to(vals[0].device)
        counts = torch.stack([(~m).sum() for m in nan]
                             + [(got.values["passed"] == 1.0).sum()]
                             + [(status == code).sum() for code in (OK, NOT_APPLICABLE, ERROR)]
                             ).tolist()
        for name, v, m, n in zip(BACKGROUND_VALUES, vals, nan, counts):
            first = torch.sort(m.to(torch.uint8), stable=True).indices[:n]
            self._append(name, v[first])
        n_pass, n_ok, n_na, n_err = counts[-4:]
        self.num_clips += got.status.numel()
        self.num_ok += n_ok
        self.num_pass += n_pass
        self._record(n_na, n_err, got.first_reason() if n_na + n_err else None)

    def _counts(self) -> Dict[str, Tensor]:
        return {name: getattr(self, name) for name in BACKGROUND_COUNTS}

    def compute(self) -> Dict[str, Tensor]:
        values = {}
        for name in BACKGROUND_VALUES:
            state = getattr(self, name)
            values[name] = (dim_zero_cat(state) if isinstance(state, Tensor) or len(state) else
                            torch.zeros(0, dtype=torch.float64, device=self.num_clips.device))
        out = _background_consistency_compute(values, self._counts())
        self._warn_nan(out, BACKGROUND_VALUES + ("pass_rate",), self._counts())
        return out

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot ``ir``, ``ir_h``, ``ir_f`` and ``pass_rate`` (bounds [0, 1]) of one ``compute()``
        output or a list of them (default: the current value). Returns (figure, axes)."""
        return self._plot_subset(val, _PLOTTED, ax)


class BackgroundInlierRatio(BackgroundConsistency):
    """Median clip background IR of the gated regime, in [0, 1] (higher is better); NaN (with
    a warning) when no clip produced one.

    Example:
        >>> import torch
        >>> from geocon_torch.metrics import BackgroundInlierRatio
        >>> metric = BackgroundInlierRatio(config={"io": {"long_side": None}})
        >>> metric.update(torch.full((1, 3, 3, 48, 64), 128, dtype=torch.uint8))  # flat grey
        >>> import warnings
        >>> with warnings.catch_warnings(record=True) as caught:
        ...     warnings.simplefilter("always")
        ...     value = metric.compute()  # not_applicable: no texture
        >>> value, "no applicable clip gave ir" in str(caught[0].message)
        (tensor(nan, dtype=torch.float64), True)
    """

    higher_is_better = True

    def compute(self) -> Tensor:  # type: ignore[override]
        return super().compute()["ir"]

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot the IR (one value or a list of them); bounds [0, 1]."""
        return self._plot(val, ax)


class BackgroundGeometricError(BackgroundConsistency):
    """Median clip background GE in px at working resolution, >= 0 (lower is better)."""

    higher_is_better = False
    plot_upper_bound: Optional[float] = None

    def compute(self) -> Tensor:  # type: ignore[override]
        return super().compute()["ge_px"]

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot the GE in px (one value or a list of them); lower bound 0."""
        return self._plot(val, ax)
