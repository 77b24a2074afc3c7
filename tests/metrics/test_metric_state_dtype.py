"""Metric classes inside a module that is converted to half precision (``model.to(torch.bfloat16)``:
what Lightning ``precision="bf16-true"`` / ``"16-true"`` and DeepSpeed do to the module tree):
the float64 running sums and per-clip values keep their dtype, so ``compute()`` is bit for bit
the unconverted metric's; only device moves apply. ``set_dtype`` (torchmetrics' explicit API)
still converts the states.

torchmetrics 1.9 guards ``.half()`` / ``.float()`` / ``.type()`` but not ``Module.to(dtype)``
(Lightning-AI/torchmetrics#2314, #1561): before the guard in ``GeoConMetric._apply``,
``AdaDFRC``'s pooled mean came out 0.64 instead of 2.29 after ``.to(torch.bfloat16)``.

The background and epipolar analyses are replaced by fixed per-clip values (as in
test_metric_state_merge.py), so the tests are fast and their numbers exact."""
from __future__ import annotations

import warnings
from typing import Any, Callable, Dict, List

import pytest
import torch

import geocon_torch.metrics.background as mb
import geocon_torch.metrics.epipolar as me
from geocon_torch.metrics import (AdaDFRC, BackgroundConsistency, BackgroundGeometricError,
                                  BackgroundInlierRatio, EpipolarError, EpipolarInlierRate,
                                  FeatureMatchCoverage)
from geocon_torch.metrics._base import GeoConMetric
from geocon_torch.metrics.functional._common import ClipValues

BG_CFG = {"io": {"long_side": None}, "segment": {"method": "none"}}
#: per-clip values with no exact bfloat16 / float16 form (1/3, 0.1, ...): a cast rounds them
CLIP_VALUES = [1 / 3, 0.1, 0.7071067811865476, float("nan"), 2.718281828459045, 0.123456789]
CLIP_STATUS = [0, 0, 0, 1, 0, 0]


def _fake_values(batch: int) -> ClipValues:
    """Values of clips ``2 * batch`` and ``2 * batch + 1`` of :data:`CLIP_VALUES`, the NaN one
    not applicable: shared by the background and the epipolar fakes."""
    sel = slice(2 * batch, 2 * batch + 2)
    t = torch.tensor(CLIP_VALUES[sel], dtype=torch.float64)
    status = CLIP_STATUS[sel]
    vals = {"ir": t / 3, "ge_px": t, "ir_h": t / 7, "ge_h_px": t * 1.1, "ir_f": t / 9,
            "ge_f_px": t * 1.3, "passed": (t > 0.5).to(torch.float64),
            "epipolar_error": t, "epipolar_error_score": (1 - t / 5).clamp(0, 1),
            "epipolar_inlier_rate": 1 - t / 10, "feature_match_coverage": 1 - t / 30}
    return ClipValues(vals, torch.tensor(status), ["" if s == 0 else "flat" for s in status])


@pytest.fixture
def fake_analyses(monkeypatch):
    """``_background_consistency_update`` / ``_epipolar_update`` give :func:`_fake_values` of
    their ``videos`` argument (an int batch index)."""
    monkeypatch.setattr(mb, "_background_consistency_update",
                        lambda videos, *a, **k: _fake_values(videos))
    monkeypatch.setattr(me, "_epipolar_update", lambda videos, *a, **k: (_fake_values(videos),
                                                                         []))


def _fg_batch(batch: int) -> tuple:
    """AdaDFRC inputs (4 pairs, 2 objects, 32 x 32): random flow, so D has no exact half form."""
    g = torch.Generator().manual_seed(batch)
    flow = torch.randn(4, 2, 32, 32, generator=g) * 3
    masks = torch.zeros(4, 2, 32, 32, dtype=torch.bool)
    masks[:, 0, 2:20, 2:20] = True
    masks[:, 1, 12:30, 8:28] = True
    return flow, masks


#: each Metric class with how it is built and what one update of batch ``k`` passes
CLASSES: Dict[str, tuple] = {
    "AdaDFRC": (AdaDFRC, _fg_batch),
    "BackgroundConsistency": (lambda: BackgroundConsistency(config=BG_CFG), lambda k: (k,)),
    "BackgroundInlierRatio": (lambda: BackgroundInlierRatio(config=BG_CFG), lambda k: (k,)),
    "BackgroundGeometricError": (lambda: BackgroundGeometricError(config=BG_CFG),
                                 lambda k: (k,)),
    "EpipolarError": (EpipolarError, lambda k: (k,)),
    "EpipolarInlierRate": (EpipolarInlierRate, lambda k: (k,)),
    "FeatureMatchCoverage": (FeatureMatchCoverage, lambda k: (k,)),
}


class _Model(torch.nn.Module):
    """A trainable layer and a metric, as a LightningModule holds them."""

    def __init__(self, metric: GeoConMetric) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(4, 4)
        self.metric = metric


def _run(name: str, convert: Callable[[_Model], Any], at: int) -> tuple:
    """Three updates of metric ``name`` in a model, ``convert`` applied to the model before
    update ``at`` (3: after the last one, before compute). Returns (compute(), model)."""
    build, inputs = CLASSES[name]
    model = _Model(build())
    for k in range(3):
        if k == at:
            convert(model)
        model.metric.update(*inputs(k))
    if at == 3:
        convert(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a NaN-free run; keep other classes' warnings quiet
        return model.metric.compute(), model


def _same(a: Any, b: Any) -> bool:
    """Bitwise equality of two compute() outputs (tensors or dicts of them), dtypes included."""
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a.dtype == b.dtype and torch.equal(a.nan_to_num(-1.0), b.nan_to_num(-1.0))


def _float_states(metric: GeoConMetric) -> Dict[str, List[torch.dtype]]:
    """The dtypes of every floating state (a list state: of each entry) and of its default."""
    out = {}
    for key, default in metric._defaults.items():
        value = getattr(metric, key)
        got = [v.dtype for v in (value if isinstance(value, list) else [value])]
        got += [v.dtype for v in (default if isinstance(default, list) else [default])]
        out[key] = [d for d in got if d.is_floating_point]
    return out


CONVERSIONS = {
    "to_bf16": lambda m: m.to(torch.bfloat16),
    "to_f16": lambda m: m.to(torch.float16),
    "to_cpu_bf16": lambda m: m.to("cpu", torch.bfloat16),
    "half": lambda m: m.half(),
    "type_bf16": lambda m: m.type(torch.bfloat16),
    "double": lambda m: m.double(),
}


@pytest.mark.parametrize("convert", list(CONVERSIONS))
@pytest.mark.parametrize("at", [0, 1, 3], ids=["before", "between", "after"])
@pytest.mark.parametrize("name", list(CLASSES))
def test_module_dtype_conversion_changes_no_state_and_no_value(fake_analyses, name, at,
                                                               convert):
    ref, plain = _run(name, lambda m: None, at)
    got, model = _run(name, CONVERSIONS[convert], at)
    assert _same(got, ref), (got, ref)
    assert _float_states(model.metric) == _float_states(plain.metric)
    if convert != "double":
        assert model.layer.weight.dtype != torch.float32  # the rest of the model did convert
    assert model.metric.dtype == torch.float32  # torchmetrics' default dtype, unchanged


def test_adadfrc_pooled_mean_in_a_bf16_model_is_the_float64_one():
    """The audit's case (p06): 0.64 in bfloat16 instead of the float64 pooled mean."""
    ref, plain = _run("AdaDFRC", lambda m: None, 0)
    got, model = _run("AdaDFRC", lambda m: m.to(torch.bfloat16), 0)
    assert model.metric.sum_d.dtype == torch.float64
    assert got["pooled_adadfrc_mean"].dtype == torch.float64
    assert got["pooled_adadfrc_mean"].item() == ref["pooled_adadfrc_mean"].item()
    assert abs(got["pooled_adadfrc_mean"].item() - 3.5) < 2.0  # a real number, not 0 / NaN


def test_cached_compute_and_reset_keep_float64(fake_analyses):
    """A cached ``compute()`` result and the states after ``reset()`` keep float64 too."""
    model = _Model(EpipolarError())
    model.metric.update(0)
    first = model.metric.compute()
    model.to(torch.bfloat16)
    assert first.dtype == torch.float64 and _same(model.metric.compute(), first)
    model.metric.reset()
    assert model.metric.epipolar_error_sum_px.dtype == torch.float64


def test_state_dict_roundtrip_after_bf16_conversion(fake_analyses):
    """A checkpoint written from a bf16 model holds the float64 states and loads into a fresh
    metric bit for bit."""
    model = _Model(AdaDFRC())
    model.metric.persistent(True)
    model.metric.update(*_fg_batch(0))
    model.to(torch.bfloat16)
    sd = model.metric.state_dict()
    assert sd["sum_d"].dtype == torch.float64
    assert [v.dtype for v in sd["values"]] == [torch.float64]  # a list state: one entry
    fresh = AdaDFRC()
    fresh.persistent(True)
    fresh.load_state_dict(sd)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torchmetrics: compute() before any update()
        assert _same(fresh.compute(), model.metric.compute())


def test_set_dtype_still_converts_the_states_and_their_record():
    """``set_dtype`` is torchmetrics' explicit request: it converts, and the cat states'
    recorded dtype (the zero-length stand-in of an empty rank under DDP) follows."""
    metric = BackgroundConsistency(config=BG_CFG)
    metric.set_dtype(torch.float32)
    assert all(metric._cat_dtypes[n] == torch.float32 for n in mb.BACKGROUND_VALUES)
    ada = AdaDFRC()
    ada.update(*_fg_batch(0))
    ada.set_dtype(torch.float32)  # converts the states there are (an update appends its own)
    assert ada.sum_d.dtype == torch.float32 and ada.values[0].dtype == torch.float32
    assert ada._cat_dtypes["values"] == torch.float32
    model = _Model(ada)
    model.to(torch.bfloat16)  # a later module conversion leaves the chosen dtype alone
    assert ada.sum_d.dtype == torch.float32 and ada.values[0].dtype == torch.float32


def test_device_moves_still_apply(fake_analyses):
    """``.to(device)`` / ``.cpu()`` (and ``.to(device, dtype)``) move the states; on CUDA the
    states land there in float64."""
    metric = EpipolarError()
    metric.update(0)
    for move in (lambda m: m.to("cpu"), lambda m: m.cpu()):
        assert move(metric) is metric and metric.epipolar_error_sum_px.device.type == "cpu"
    if torch.cuda.is_available():
        model = _Model(metric).to("cuda", torch.bfloat16)
        assert metric.epipolar_error_sum_px.device.type == "cuda"
        assert metric.epipolar_error_sum_px.dtype == torch.float64
        assert metric.device.type == "cuda"
        assert model.layer.weight.dtype == torch.bfloat16
