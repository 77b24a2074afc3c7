import json

import pytest

from geocon_torch import GeoConConfig, GeoConError, load_config


def test_defaults_are_paper_values():
    cfg = GeoConConfig()
    assert cfg.background.tau_h == 2.0 and cfg.background.tau_f == 0.1
    assert cfg.background.min_inliers == 30
    assert (cfg.background.report_ir, cfg.background.report_ge_px) == (0.97, 3.5)
    assert cfg.gate.tau_t == 0.04
    assert (cfg.gate.hysteresis_low, cfg.gate.hysteresis_high) == (0.03, 0.05)
    assert cfg.features.scales == (0.25, 0.5, 1.0) and cfg.io.long_side == "auto"
    assert cfg.foreground.grid == 8 and cfg.foreground.percentile == 0.9


def test_round_trip_and_hash(tmp_path):
    cfg = GeoConConfig().replace(background={"tau_h": 3.0}, features={"scales": [1.0]})
    assert cfg.background.tau_h == 3.0 and cfg.features.scales == (1.0,)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(cfg.to_dict()))
    back = load_config(path)
    assert back == cfg and back.config_hash() == cfg.config_hash()
    assert back.config_hash() != GeoConConfig().config_hash()
    assert len(cfg.config_hash()) == 16


def test_unknown_key_and_missing_file_raise(tmp_path):
    with pytest.raises(GeoConError, match="unknown config key config.background.tau_x"):
        GeoConConfig.from_dict({"background": {"tau_x": 1}})
    with pytest.raises(GeoConError, match="not found"):
        load_config(tmp_path / "nope.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(GeoConError, match="not valid JSON"):
        load_config(bad)

