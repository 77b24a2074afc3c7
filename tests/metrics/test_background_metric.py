"""torchmetrics BackgroundConsistency: values, counts (its 2-gloo-rank test: test_metrics_api)."""
import pytest
import torch
from helpers import make_clips

from geocon_torch.metrics.background import (
    BackgroundConsistency,
    BackgroundGeometricError,
    BackgroundInlierRatio,
)

CFG = {"io": {"long_side": None}, "features": {"mutual": True, "scales": [0.5, 1.0]},
       "segment": {"method": "none"}}




def test_metric_values_and_counts():
    videos = make_clips()
    m = BackgroundConsistency(config=CFG)
    m.update(videos[:2])
    m.update(list(videos[2:]))
    out = m.compute()
    assert int(out["num_clips"]) == 4 and int(out["num_ok"]) == 3
    assert int(out["num_not_applicable"]) == 1 and int(out["num_error"]) == 0
    assert float(out["ir"]) >= 0.97 and float(out["ge_px"]) < 1.0
    assert float(out["pass_rate"]) == 1.0
    ir = BackgroundInlierRatio(config=CFG)
    ge = BackgroundGeometricError(config=CFG)
    ir.update(videos)
    ge.update(videos)
    assert float(ir.compute()) == pytest.approx(float(out["ir"]))
    assert float(ge.compute()) == pytest.approx(float(out["ge_px"]))
    with pytest.warns(UserWarning, match="no applicable clip gave ir"):  # "no data": NaN + warning
        empty = BackgroundConsistency(config=CFG).compute()
    assert torch.isnan(empty["ir"]) and int(empty["num_clips"]) == 0


# The 2-gloo-rank test of this class (every output equal to one process) lives in
# tests/metrics/test_metrics_api.py, together with the other classes' (one spawn for all).


def test_update_keeps_each_values_non_nan_clips_in_order(monkeypatch):
    """update stores, per value, the clips that produced it (NaN dropped, clip order kept) and
    counts the passed clips (its counts come over in one transfer)."""
    import geocon_torch.metrics.background as mb
    from geocon_torch.metrics.functional._common import ClipValues

    nan = float("nan")
    cols = {"ir": [0.9, nan, 0.7, 0.6], "ge_px": [nan, nan, nan, nan],
            "ir_h": [nan, 0.5, nan, 0.4], "ge_h_px": [1.0, 2.0, 3.0, 4.0],
            "ir_f": [nan, nan, 0.3, nan], "ge_f_px": [0.1, nan, 0.2, nan],
            "passed": [1.0, nan, 0.0, 1.0]}
    got = ClipValues({k: torch.tensor(v, dtype=torch.float64) for k, v in cols.items()},
                     torch.tensor([0, 1, 0, 0]), ["", "not_applicable", "", ""])
    monkeypatch.setattr(mb, "_background_consistency_update", lambda *a, **k: got)
    m = BackgroundConsistency(config=CFG)
    m.update(None)
    for name in mb.BACKGROUND_VALUES:
        want = [v for v in cols[name] if v == v]
        assert getattr(m, name)[0].tolist() == want, name
    assert int(m.num_pass) == 2 and int(m.num_clips) == 4 and int(m.num_ok) == 3


def test_presets_without_a_background_are_refused():
    """A preset that does not run the background section ("worldatlas", "gvgc",
    "epipolar-dpo") would give NaN values under an ok status and a pass rate of 0: refused
    at construction and by the functional API."""
    from geocon_torch.errors import ConfigError
    from geocon_torch.metrics.functional import background_consistency

    for preset in ("worldatlas", "gvgc", "epipolar-dpo"):
        with pytest.raises(ConfigError, match=f"preset '{preset}' does not score the background"):
            BackgroundConsistency(preset=preset)
        with pytest.raises(ConfigError, match="does not score the background"):
            background_consistency(make_clips()[:1], preset=preset)
    assert BackgroundConsistency(preset="geocon").preset == "geocon"


def test_collection_keeps_differently_configured_copies_apart():
    """Two copies of one class with different working sizes in a MetricCollection: a first
    batch where every clip is not_applicable leaves their states equal, yet they are never put
    into one compute group (their protocol keys differ), so each keeps its own numbers."""
    from torchmetrics import MetricCollection

    videos = make_clips()
    grey = torch.full_like(videos[:1], 128)
    configs = {"a": {**CFG, "io": {"long_side": None}}, "b": {**CFG, "io": {"long_side": 64}}}
    alone = {}
    for k, cfg in configs.items():
        m = BackgroundGeometricError(config=cfg)
        m.update(grey)
        m.update(videos[:2])
        alone[k] = float(m.compute())
    assert alone["a"] != alone["b"]
    coll = MetricCollection({k: BackgroundGeometricError(config=cfg)
                             for k, cfg in configs.items()})
    coll.update(grey)
    coll.update(videos[:2])
    out = coll.compute()
    assert {k: float(v) for k, v in out.items()} == alone
    assert len(coll.compute_groups) == 2


def test_an_explicit_scoring_device_is_part_of_the_protocol_key():
    """"auto" backends resolve per scoring device (another detector on CUDA), so metrics scored
    on different devices must not share a compute group; the default (the tensors' own
    device, which a collection shares) keeps the key of the config alone."""
    keys = {name: BackgroundGeometricError(config=CFG, **kw).protocol_key for name, kw in (
        ("none", {}), ("none2", {}), ("cpu", {"scoring_device": "cpu"}),
        ("cuda", {"scoring_device": "cuda"}), ("cuda0", {"scoring_device": torch.device("cuda")}))}
    assert torch.equal(keys["none"], keys["none2"]) and torch.equal(keys["cuda"], keys["cuda0"])
    assert not torch.equal(keys["cpu"], keys["cuda"])
    assert not torch.equal(keys["none"], keys["cuda"])


def test_tensors_are_scored_on_their_own_device(monkeypatch):
    """device None scores a tensor batch on the tensors' device, as geometric_reward does
    (score_clips alone would move a CPU batch to CUDA on a GPU machine, where "auto" is
    another backend: the metric and the reward then differed on the same batch)."""
    import geocon_torch.metrics.functional.background as FB

    seen = []
    monkeypatch.setattr(FB, "score_clips", lambda videos, **kw: seen.append(kw["device"]) or [])
    FB._background_consistency_update(torch.zeros(0, 2, 3, 32, 32, dtype=torch.uint8))
    FB._background_consistency_update([torch.zeros(2, 3, 32, 32, dtype=torch.uint8)])
    FB._background_consistency_update(["a.mp4"])
    FB._background_consistency_update(["a.mp4"], device="cpu")
    assert seen == [torch.device("cpu"), torch.device("cpu"), None, "cpu"]
