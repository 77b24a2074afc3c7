"""Mutation-audit pins (round 10) for the metric classes and the functional metrics: status
codes, the "no data" reasons, pooling in compute and argument checks. Constructed inputs: the
scoring back ends are replaced by fakes where the number under test is the metric's own
arithmetic (fast, deterministic)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

import geocon_torch.metrics.functional.background as fb
import geocon_torch.metrics.functional.epipolar as fe
from geocon_torch.errors import ClipTensorError
from geocon_torch.metrics.functional._common import (ClipValues, check_videos, encode_reason,
                                                     first_reason, per_clip, status_codes)

NAN = float("nan")


def _grey(b: int) -> torch.Tensor:
    return torch.full((b, 2, 1, 24, 24), 128, dtype=torch.uint8)


# --- _common ----------------------------------------------------------------------------------

def test_status_codes_map_an_unknown_status_to_error():
    codes = status_codes(["ok", "not_applicable", "error", "crashed"])
    assert codes.tolist() == [0, 1, 2, 2] and codes.dtype == torch.int64


def test_clip_values_first_reason_is_the_first_clip_that_is_not_ok():
    got = ClipValues({}, torch.tensor([0, 1, 2]), ["", "too flat", "boom"])
    assert got.first_reason() == "not_applicable: too flat"
    assert ClipValues({}, torch.tensor([0, 0]), ["", ""]).first_reason() is None


def test_encoded_reason_is_capped_at_240_bytes_and_zero_terminated():
    codes = encode_reason("x" * 300)
    assert codes.shape == (241,) and codes.dtype == torch.float32
    assert float(codes[-1]) == 0.0 and first_reason([codes]) == "x" * 240


def test_first_reason_of_a_gathered_state_is_the_first_entry_only():
    state = [encode_reason("not_applicable: a"), encode_reason("error: b")]
    assert first_reason(state) == "not_applicable: a"
    assert first_reason(torch.cat(state)) == "not_applicable: a"
    assert first_reason([]) is None


def test_check_videos_refuses_a_string():
    with pytest.raises(ClipTensorError, match="got str"):
        check_videos("clip.mp4")


def test_per_clip_none_is_nan_never_zero():
    out = per_clip([None, 0.25])
    assert out.dtype == torch.float64 and math.isnan(out[0]) and float(out[1]) == 0.25


# --- background ---------------------------------------------------------------------------------

def test_background_compute_median_and_pass_rate_over_ok_clips():
    vals = {name: torch.tensor([0.2, 0.4, 0.9], dtype=torch.float64)
            for name in fb.BACKGROUND_VALUES}
    vals["ge_px"] = torch.tensor([1.0, 3.0, 4.0, 10.0], dtype=torch.float64)  # even count
    counts = {"num_clips": 5, "num_ok": 4, "num_not_applicable": 1, "num_error": 0,
              "num_pass": 3}
    out = fb._background_consistency_compute(
        vals, {k: torch.tensor(v) for k, v in counts.items()})
    assert float(out["ir"]) == pytest.approx(0.4)  # the median, not the mean (0.5)
    assert float(out["ge_px"]) == pytest.approx(3.5)
    assert float(out["pass_rate"]) == pytest.approx(0.75)  # num_pass / num_ok, not / num_clips
    assert out["pass_rate"].dtype == torch.float64


def _fake_results(monkeypatch):
    def result(status, reason, bg):
        return SimpleNamespace(status=status, reason=reason, background=bg)

    bg = {"ir": 0.9, "ge_px": 0.5, "ir_h": 0.8, "ge_h_px": 0.6, "ir_f": 0.7, "ge_f_px": 0.4}
    results = [result("ok", None, dict(bg, **{"pass": True})),
               result("ok", None, dict(bg, ir=0.5, **{"pass": False})),
               result("not_applicable", "too flat", {"ir": 0.1, "pass": True}),
               result("error", "boom", {})]
    monkeypatch.setattr(fb, "score_clips", lambda videos, **kw: results)


def test_background_functional_pass_flag_status_and_reason(monkeypatch):
    from geocon_torch.metrics.functional import background_consistency

    _fake_results(monkeypatch)
    out = background_consistency(_grey(4))
    assert out["status"].tolist() == [0, 0, 1, 2]
    assert out["passed"][:2].tolist() == [1.0, 0.0] and out["passed"][2:].isnan().all()
    assert out["ir"][:2].tolist() == [0.9, 0.5] and out["ir"][2:].isnan().all()
    got = fb._background_consistency_update(_grey(4))
    assert got.reasons == ["", "", "too flat", "boom"]
    assert got.first_reason() == "not_applicable: too flat"


def test_background_metric_counts_pass_rate_and_reason(monkeypatch):
    from geocon_torch.metrics import BackgroundConsistency

    _fake_results(monkeypatch)
    m = BackgroundConsistency()
    m.update(_grey(4))
    out = m.compute()
    assert [int(out[k]) for k in fb.BACKGROUND_COUNTS] == [4, 2, 1, 1, 1]
    assert float(out["pass_rate"]) == 0.5 and float(out["ir"]) == pytest.approx(0.7)
    assert m.first_reason() == "not_applicable: too flat"


def test_background_single_value_classes_return_ir_and_ge(monkeypatch):
    from geocon_torch.metrics import BackgroundGeometricError, BackgroundInlierRatio

    _fake_results(monkeypatch)  # ir 0.9 / 0.5, ir_h 0.8, ge_px 0.5, ge_h_px 0.6
    ir, ge = BackgroundInlierRatio(), BackgroundGeometricError()
    ir.update(_grey(4))
    ge.update(_grey(4))
    assert float(ir.compute()) == pytest.approx(0.7) and float(ge.compute()) == 0.5
    assert BackgroundInlierRatio.higher_is_better is True
    assert BackgroundGeometricError.higher_is_better is False


# --- epipolar ------------------------------------------------------------------------------------

SECTIONS = [
    {"status": "ok", "epipolar_error": 1.0, "epipolar_error_score": 0.8,
     "epipolar_inlier_rate": 0.6, "feature_match_coverage": 0.3},
    {"status": "not_applicable", "reason": "too little texture"},
    {"status": "ok", "epipolar_error": 3.0, "epipolar_error_score": 0.4,
     "epipolar_inlier_rate": 0.2, "feature_match_coverage": 0.5},
]


@pytest.fixture
def fake_sections(monkeypatch):
    monkeypatch.setattr(fe, "epipolar_sections", lambda clips, *a, **k: SECTIONS[:len(clips)])


def test_epipolar_functional_fields(fake_sections):
    from geocon_torch.metrics.functional import (epipolar_error, epipolar_inlier_rate,
                                                 feature_match_coverage)

    err, status = epipolar_error(_grey(3), return_status=True)
    assert status.tolist() == [0, 1, 0] and err.dtype == torch.float64
    assert err[[0, 2]].tolist() == [1.0, 3.0] and bool(err[1].isnan())
    assert epipolar_error(_grey(3), normalized=True)[[0, 2]].tolist() == [0.8, 0.4]
    assert epipolar_inlier_rate(_grey(3))[[0, 2]].tolist() == [0.6, 0.2]
    assert feature_match_coverage(_grey(3))[[0, 2]].tolist() == [0.3, 0.5]


def test_epipolar_classes_average_over_ok_clips_only(fake_sections):
    from geocon_torch.metrics import EpipolarError, EpipolarInlierRate, FeatureMatchCoverage

    err, rate, cov = EpipolarError(), EpipolarInlierRate(), FeatureMatchCoverage()
    for m in (err, rate, cov):
        m.update(_grey(3))
    assert float(err.compute()) == pytest.approx(2.0)  # (1 + 3) / 2 ok clips, not / 3
    assert float(err.compute_score()) == pytest.approx(0.6)
    assert float(rate.compute()) == pytest.approx(0.4)
    assert float(cov.compute()) == pytest.approx(0.4)
    counts = {k: int(v) for k, v in err.counts().items()}
    assert counts == {"num_clips": 3, "num_ok": 2, "num_not_applicable": 1, "num_error": 0}
    assert err.first_reason() == "not_applicable: too little texture"


# --- foreground ---------------------------------------------------------------------------------

def _flow_masks():
    flow = torch.zeros(2, 2, 32, 32)
    flow[:, 0] = 1.5
    masks = torch.zeros(2, 2, 32, 32, dtype=torch.bool)
    masks[:, 0, 4:28, 4:28] = True  # object 1 is absent: not applicable
    return flow, masks


def test_adadfrc_reason_prefers_error_over_not_applicable():
    from geocon_torch.metrics import AdaDFRC

    flow, masks = _flow_masks()
    flow[0, 0, 10, 10] = float("nan")  # inside object 0 of pair 0: an error slot
    m = AdaDFRC()
    m.update(flow, masks)
    out = m.compute()
    assert [int(out[k]) for k in ("num_samples", "num_not_applicable", "num_error")] == [1, 2, 1]
    assert m.first_reason().startswith("error: NaN / inf flow or D in 1")

