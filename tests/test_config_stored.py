"""Configs of stored results read back after a validation rule was added.

``features.fallback`` "disk" / "loftr" / "lightglue" and ``features.checkpoint`` with a backend
that loads none became config errors after results were stored with them. Reading such a row
(``GeoConConfig.from_dict(..., strict=False)``) keeps every value as stored and records why the
config can no longer score; scoring with it (``load_config``, ``score_clip``, ``replace``, a
section of it in a new config) still raises ConfigError.
"""
from __future__ import annotations

import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.config import GeoConConfig, load_config
from geocon_torch.errors import ConfigError


def stored_config(**features) -> dict:
    """A config dict as a result stored it, with ``features`` overridden (no check)."""
    cfg = GeoConConfig().to_dict()
    cfg["features"].update(features)
    cfg["background"]["report_ir"] = 0.975
    return cfg


def test_strict_read_still_refuses():
    with pytest.raises(ConfigError, match="features.fallback must be one of"):
        GeoConConfig.from_dict(stored_config(fallback="disk"))


def test_lenient_read_keeps_the_stored_values():
    data = stored_config(fallback="disk")
    cfg = GeoConConfig.from_dict(data, strict=False)
    assert cfg.features.fallback == "disk" and cfg.background.report_ir == 0.975
    assert cfg.to_dict() == data
    assert cfg.invalid_reason.startswith("features.fallback must be one of")
    assert "got 'disk'" in cfg.invalid_reason
    assert cfg.features.invalid_reason == cfg.invalid_reason  # every section carries it


def test_lenient_read_of_a_checkpoint_without_its_backend():
    data = stored_config(backend="opencv-sift", checkpoint="/w/disk.pt")
    cfg = GeoConConfig.from_dict(data, strict=False)
    assert cfg.features.checkpoint == "/w/disk.pt"
    assert "features.checkpoint is set (/w/disk.pt)" in cfg.invalid_reason
    assert "'opencv-sift' loads no checkpoint" in cfg.invalid_reason


def test_lenient_read_of_a_valid_config_is_the_strict_one():
    data = stored_config()
    cfg = GeoConConfig.from_dict(data, strict=False)
    assert cfg.invalid_reason is None
    assert cfg.config_hash() == GeoConConfig.from_dict(data).config_hash()
    assert load_config(cfg) is cfg


def test_scoring_with_a_leniently_read_config_raises():
    cfg = GeoConConfig.from_dict(stored_config(fallback="loftr"), strict=False)
    for build in (lambda: load_config(cfg),
                  lambda: cfg.replace(io={"long_side": 64}),
                  lambda: GeoConConfig(features=cfg.features),
                  lambda: GeoConConfig().replace(features=cfg.features)):
        with pytest.raises(ConfigError, match="not valid for scoring"):
            build()
    with pytest.raises(ConfigError, match="not valid for scoring.*features.fallback"):
        score_clip(torch.zeros(3, 3, 32, 32), config=cfg, device="cpu", progress=False)


def test_a_copy_stays_unscorable():
    import copy
    cfg = copy.deepcopy(GeoConConfig.from_dict(stored_config(fallback="disk"), strict=False))
    with pytest.raises(ConfigError, match="not valid for scoring"):
        load_config(cfg)


def test_a_lenient_read_around_an_unscorable_section_is_unscorable():
    section = GeoConConfig.from_dict(stored_config(fallback="disk"), strict=False).features
    cfg = GeoConConfig.from_dict({"features": section, "preset": "background"}, strict=False)
    assert cfg.features.fallback == "disk" and cfg.preset == "background"
    assert cfg.invalid_reason == section.invalid_reason  # the section's reason, at every level
    assert cfg.io.invalid_reason == section.invalid_reason
    with pytest.raises(ConfigError, match="not valid for scoring.*features.fallback"):
        load_config(cfg)
