"""Metric classes: states merged across instances (``merge_state``, what a DDP sync reduces),
the first-reason state, the protocol key that keeps differently configured metrics out of one
compute group, and the counts / NaN "no data" outputs, with numbers worked out by hand.

The background and epipolar analyses are replaced by fixed per-clip values (monkeypatched
``_background_consistency_update`` / ``_epipolar_update``), so every test is fast and its
expected numbers are exact."""
from __future__ import annotations

import math
import warnings
from typing import Dict, List, Optional

import pytest
import torch
from torchmetrics import MetricCollection

import geocon_torch.metrics.background as mb
import geocon_torch.metrics.epipolar as me
from geocon_torch.config import GeoConConfig
from geocon_torch.metrics import AdaDFRC, BackgroundConsistency, EpipolarError
from geocon_torch.metrics import EpipolarInlierRate, FeatureMatchCoverage
from geocon_torch.metrics.functional._common import ClipValues

NAN = float("nan")
BG_CFG = {"io": {"long_side": None}, "segment": {"method": "none"}}


# ---------------------------------------------------------------------------------------------
# AdaDFRC: a (pair, object) batch with known validity
def _fg_batch(p: int, absent: int, big: int = 24) -> tuple:
    """Flow (p, 2, 32, 32) of a rigid 1.5 px shift (D = 0) and masks (p, 1, 32, 32): the first
    ``absent`` pairs have no object (not applicable), the others a ``big`` x ``big`` square."""
    flow = torch.zeros(p, 2, 32, 32)
    flow[:, 0] = 1.5
    masks = torch.zeros(p, 1, 32, 32, dtype=torch.bool)
    masks[absent:, 0, 4:4 + big, 4:4 + big] = True
    return flow, masks


def test_adadfrc_counts_and_key_merge_as_sums_and_constants():
    """a: 1 valid + 2 not applicable; b: 3 valid + 1 not applicable. Merged: 4 samples, 3
    not applicable (sums, not the max 3 / 2), the key unchanged (every rank holds one key)."""
    a, b = AdaDFRC(), AdaDFRC()
    a.update(*_fg_batch(3, absent=2))
    b.update(*_fg_batch(4, absent=1))
    key = a.protocol_key.clone()
    assert torch.equal(key, b.protocol_key)
    a.merge_state(b)
    out = a.compute()
    assert int(out["num_samples"]) == 4
    assert int(out["num_not_applicable"]) == 3
    assert int(out["num_error"]) == 0
    assert float(out["pooled_adadfrc_mean"]) < 1e-6
    assert torch.equal(a.protocol_key, key)


def test_adadfrc_error_reason_wins_over_not_applicable_in_one_batch():
    """A batch with both an absent object and NaN flow inside another records the error
    reason (errors first), with both counts."""
    flow, masks = _fg_batch(2, absent=1)
    flow[1, :, 10, 10] = NAN
    m = AdaDFRC()
    m.update(flow, masks)
    assert (int(m.num_not_applicable), int(m.num_error)) == (1, 1)
    assert m.first_reason().startswith("error: NaN / inf flow")


def test_adadfrc_keeps_only_its_first_reason():
    """Two batches with different reasons: the ``reasons`` state holds one entry, the first."""
    m = AdaDFRC()
    m.update(*_fg_batch(2, absent=2))  # not applicable
    flow, masks = _fg_batch(1, absent=0)
    flow[0, :, 10, 10] = NAN
    m.update(flow, masks)  # error
    assert len(m.reasons) == 1
    assert m.first_reason().startswith("not_applicable: object absent")


def test_adadfrc_settings_keep_two_metrics_out_of_one_compute_group():
    """min_pixels 64 vs 1000: equal states after an all-absent batch, different samples
    after a 576-px object (the second must count it not applicable, not copy the first)."""
    coll = MetricCollection({"small": AdaDFRC(min_pixels=64), "large": AdaDFRC(min_pixels=1000)})
    coll.update(*_fg_batch(2, absent=2))
    coll.update(*_fg_batch(3, absent=0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = coll.compute()
    assert int(out["small_num_samples"]) == 3 and int(out["small_num_not_applicable"]) == 2
    assert int(out["large_num_samples"]) == 0 and int(out["large_num_not_applicable"]) == 5
    assert math.isnan(float(out["large_pooled_adadfrc_mean"]))


def test_adadfrc_quantile_interpolates_linearly():
    """Pooled values 0..9 (set as states): the 0.25 quantile is 2.25 (linear), mean 4.5."""
    m = AdaDFRC(percentile=0.25)
    m.update(*_fg_batch(1, absent=1))  # one not-applicable slot: no value
    m.values.append(torch.arange(10, dtype=torch.float64))
    m.sum_d = torch.tensor(45.0, dtype=torch.float64)
    m.count = torch.tensor(10)
    out = m.compute()
    assert float(out["pooled_adadfrc_quantile"]) == pytest.approx(2.25, abs=1e-12)
    assert float(out["pooled_adadfrc_mean"]) == pytest.approx(4.5, abs=1e-12)


def test_adadfrc_no_data_warning_names_every_nan_output():
    m = AdaDFRC()
    m.update(*_fg_batch(2, absent=2))
    with pytest.warns(UserWarning) as caught:
        m.compute()
    msg = str(caught[0].message)
    assert "pooled_adadfrc_mean, pooled_adadfrc_quantile" in msg
    assert "num_not_applicable 2" in msg


# ---------------------------------------------------------------------------------------------
# epipolar trio with fixed per-clip values
def _epi_values(error: List[float], status: List[int], reason: str = "too few matches"
                ) -> ClipValues:
    err = torch.tensor(error, dtype=torch.float64)
    vals = {"epipolar_error": err, "epipolar_error_score": (1 - err / 5).clamp(0, 1),
            "epipolar_inlier_rate": 1 - err / 10, "feature_match_coverage": 1 - err / 20}
    return ClipValues(vals, torch.tensor(status),
                      ["" if s == 0 else reason for s in status])


@pytest.fixture
def fake_epipolar(monkeypatch):
    """``_epipolar_update`` replaced: each call pops the next ClipValues of ``queue``; when
    ``by_features`` / ``by_frames`` is set the values depend on the metric's settings."""
    state: Dict[str, list] = {"queue": []}

    def update(videos, config, implementation, features, device):
        got = state["queue"].pop(0)
        if callable(got):
            got = got(config, features)
        return got, []

    monkeypatch.setattr(me, "_epipolar_update", update)
    return state


def test_epipolar_merge_sums_every_count_and_sum(fake_epipolar):
    """a: errors 1, 3 (ok) + 1 not applicable; b: error 5 (ok) + 2 errors. Merged: 6 clips,
    3 ok, 1 n/a, 2 errors, mean error 3, mean score (0.8 + 0.4 + 0) / 3."""
    fake_epipolar["queue"] += [_epi_values([1.0, 3.0, NAN], [0, 0, 1]),
                               _epi_values([5.0, NAN, NAN], [0, 2, 2], "decode failed")]
    a, b = EpipolarError(), EpipolarError()
    a.update(None)
    b.update(None)
    a.merge_state(b)
    assert {k: int(v) for k, v in a.counts().items()} == {
        "num_clips": 6, "num_ok": 3, "num_not_applicable": 1, "num_error": 2}
    assert float(a.compute()) == pytest.approx(3.0, abs=1e-12)
    assert float(a.compute_score()) == pytest.approx(1.2 / 3, abs=1e-12)
    # one reason per instance survives the merge (torchmetrics puts the incoming one first)
    assert len(a.reasons) == 2
    assert a.first_reason() in ("not_applicable: too few matches", "error: decode failed")


def test_epipolar_trio_values_and_all_not_applicable_is_nan(fake_epipolar):
    fake_epipolar["queue"] += [_epi_values([2.0, 4.0], [0, 0])] * 2
    rate, cov = EpipolarInlierRate(), FeatureMatchCoverage()
    rate.update(None)
    cov.update(None)
    assert float(rate.compute()) == pytest.approx(0.7, abs=1e-12)
    assert float(cov.compute()) == pytest.approx(0.85, abs=1e-12)
    fake_epipolar["queue"].append(_epi_values([NAN, NAN], [1, 1]))
    m = EpipolarError()
    m.update(None)
    with pytest.warns(UserWarning, match="no applicable clip"):
        assert math.isnan(float(m.compute()))
    assert int(m.counts()["num_clips"]) == 2 and int(m.counts()["num_ok"]) == 0


def test_a_retired_state_name_does_not_override_the_current_one(fake_epipolar):
    """A state_dict with both ``error_sum`` (retired) and ``epipolar_error_sum_px`` loads the
    current name's value."""
    m = EpipolarError()
    m.persistent(True)
    sd = m.state_dict()
    sd["epipolar_error_sum_px"] = torch.tensor(7.0, dtype=torch.float64)
    sd["error_sum"] = torch.tensor(99.0, dtype=torch.float64)
    with pytest.warns(DeprecationWarning):
        m.load_state_dict(sd)
    assert float(m.epipolar_error_sum_px) == 7.0


def _by_features(config, features):
    """All clips not applicable on the first batch; afterwards the error depends on the
    features backend (1 px for opencv-sift, 2 px otherwise)."""
    return _epi_values([1.0 if features == "opencv-sift" else 2.0], [0])


def test_epipolar_features_keep_two_metrics_apart(fake_epipolar):
    """Equal states after an all-not-applicable batch must not group two metrics that match
    with different backends: each keeps its own numbers afterwards."""
    fake_epipolar["queue"] += [_epi_values([NAN], [1])] * 2 + [_by_features] * 2
    coll = MetricCollection({"ocv": EpipolarError(features="opencv-sift"),
                             "kornia": EpipolarError(features="kornia-sift")})
    coll.update(None)
    coll.update(None)
    out = coll.compute()
    assert float(out["ocv"]) == 1.0 and float(out["kornia"]) == 2.0


def _by_frames(config, features):
    capped = isinstance(config, GeoConConfig) and config.io.max_frames is not None
    return _epi_values([3.0 if capped else 1.0], [0])


def test_epipolar_frame_cap_keeps_two_metrics_apart(fake_epipolar):
    """io.max_frames (stride 1) selects other frames: a capped and an uncapped metric are
    never grouped (after an all-not-applicable batch) and keep their own numbers."""
    fake_epipolar["queue"] += [_epi_values([NAN], [1])] * 2 + [_by_frames] * 2
    capped = GeoConConfig().replace(io={"max_frames": 5})
    coll = MetricCollection({"all": EpipolarError(), "capped": EpipolarError(capped)})
    coll.update(None)
    coll.update(None)
    out = coll.compute()
    assert float(out["all"]) == 1.0 and float(out["capped"]) == 3.0


# ---------------------------------------------------------------------------------------------
# background family with fixed per-clip values
def _bg_values(ir: List[float], passed: List[float], status: List[int]) -> ClipValues:
    t = torch.tensor(ir, dtype=torch.float64)
    vals = {"ir": t, "ge_px": 1 - t, "ir_h": t, "ge_h_px": 1 - t, "ir_f": t, "ge_f_px": 1 - t,
            "passed": torch.tensor(passed, dtype=torch.float64)}
    return ClipValues(vals, torch.tensor(status), ["" if s == 0 else "flat" for s in status])


def test_background_merge_medians_pass_rate_and_counts(monkeypatch):
    """a: IR 0.9 (pass), 0.5 (fail), n/a; b: IR 0.8 (pass), 0.7 (pass). Merged: median IR of
    (0.9, 0.5, 0.8, 0.7) = 0.75 (mean of the middle two), pass_rate 3 / 4 (num_pass / num_ok,
    not / num_clips = 5), counts summed."""
    queue = [_bg_values([0.9, 0.5, NAN], [1.0, 0.0, NAN], [0, 0, 1]),
             _bg_values([0.8, 0.7], [1.0, 1.0], [0, 0])]
    monkeypatch.setattr(mb, "_background_consistency_update", lambda *a, **k: queue.pop(0))
    a, b = BackgroundConsistency(config=BG_CFG), BackgroundConsistency(config=BG_CFG)
    a.update(None)
    b.update(None)
    key = a.protocol_key.clone()
    a.merge_state(b)
    out = a.compute()
    assert {k: int(out[k]) for k in ("num_clips", "num_ok", "num_not_applicable", "num_error",
                                     "num_pass")} == {"num_clips": 5, "num_ok": 4,
                                                      "num_not_applicable": 1, "num_error": 0,
                                                      "num_pass": 3}
    assert float(out["ir"]) == pytest.approx(0.75, abs=1e-12)
    assert float(out["pass_rate"]) == pytest.approx(0.75, abs=1e-12)
    assert torch.equal(a.protocol_key, key)
    assert a.first_reason() == "not_applicable: flat"


def _cfg_key(config: Optional[dict]) -> torch.Tensor:
    return BackgroundConsistency(config=config).protocol_key


def test_background_key_follows_the_config_not_only_the_preset():
    assert not torch.equal(_cfg_key(BG_CFG), _cfg_key({**BG_CFG,
                                                        "background": {"tau_h": 3.0}}))
    assert torch.equal(_cfg_key(BG_CFG), _cfg_key(dict(BG_CFG)))
