"""config_hash covers exactly the protocol (issue 23 items 1, 4, 5): every protocol field moves
the hash, no runtime setting does (and none changes a number), local paths enter only as given /
not given; every way of changing a config (construction, replace, file, CLI, attribute
assignment) runs the same field and cross-field checks; the Epipolar-DPO and soft-score settings
are sections of GeoConConfig."""
from __future__ import annotations

import argparse
import dataclasses
import json
from typing import Any, Iterator, List, Tuple

import pytest
import torch

from geocon_torch import ConfigError, GeoConConfig, load_config
from geocon_torch.commands._common import build_config
from geocon_torch.config import (RUNTIME_FIELDS, EpipolarDPOConfig, GateConfig, GvgcConfig, Rule,
                                 SoftConsistencyConfig)
from geocon_torch.pipeline import score_clip
from geocon_torch.synth import grounded_clip


def _leaves(cls: type = GeoConConfig, prefix: str = "") -> Iterator[Tuple[str, Any]]:
    """(dotted name, field) of every leaf field reachable from GeoConConfig."""
    for f in dataclasses.fields(cls):
        name = f"{prefix}.{f.name}" if prefix else f.name
        if f.metadata.get("section") is not None:
            yield from _leaves(f.metadata["section"], name)
        else:
            yield name, f


LEAVES = list(_leaves())
PROTOCOL = [(n, f) for n, f in LEAVES if n not in RUNTIME_FIELDS]
SETTINGS = {"io.stream_min_frames": 0, "features.chunk_frames": 2, "foreground.batch_pairs": 1,
            "epipolar.opencv_threads": 2, "epipolar_dpo.workers": 1}


def _nested(dotted: str, value: Any) -> dict:
    keys = dotted.split(".")
    out: dict = {keys[-1]: value}
    for key in reversed(keys[:-1]):
        out = {key: out}
    return out


def _candidates(rule: Rule, default: Any) -> List[Any]:
    """Valid values other than ``default`` (the first one the cross-checks accept is used)."""
    if rule.kind == "bool":
        return [not default]
    if rule.kind == "choice":
        return [c for c in rule.choices if c != default]
    if rule.kind == "str":
        return ["/some/file.json"] if default is None else [None]
    if rule.kind in ("ints", "floats"):
        step = 1 if rule.kind == "ints" else 0.5 * default[0]
        return [(default[0] + step,) + tuple(default[1:]), (default[0] - step,) + default[1:]]
    if default is None or isinstance(default, str):
        return [int(rule.low) + (2 if rule.odd else 0) if rule.low is not None else 1, 64]
    step = 2 if rule.odd else 1 if rule.kind == "int" else max(abs(default) * 0.5, 1e-3)
    if rule.kind == "float" and rule.high is not None:
        step = min(step, (rule.high - default) / 2 or (default - (rule.low or 0)) / 2)
    return [default + step, default - step]


#: a lens that distorts: a lens enters the hash only then (io.lens: a lens with every
#: coefficient 0 changes no pixel and keeps the hash of no lens), so its other fields are
#: changed from this one
LENS = {"size": [640, 480], "fx": 300.0, "k1": -0.1}


def _base(name: str) -> GeoConConfig:
    """The config a field is changed from: the default, or one with :data:`LENS`."""
    lens = name.startswith("io.lens.") and name.split(".")[-1] not in (
        "k1", "k2", "p1", "p2", "k3")
    return GeoConConfig().replace(io={"lens": LENS}) if lens else GeoConConfig()


def _changed(name: str, spec: Any) -> GeoConConfig:
    base = _base(name)
    for value in _candidates(spec.metadata["rule"], spec.default):
        try:
            return base.replace(**_nested(name, value))
        except ConfigError:
            continue
    raise AssertionError(f"no valid changed value for {name}")


def test_every_field_is_protocol_or_runtime():
    assert set(RUNTIME_FIELDS) < {n for n, _ in LEAVES}
    assert set(SETTINGS) == {n for n, kind in RUNTIME_FIELDS.items() if kind == "setting"}
    assert {n for n, kind in RUNTIME_FIELDS.items() if kind == "path"} == {
        "features.checkpoint", "gate.dust3r_checkpoint", "gate.dust3r_path",
        "segment.sam2_checkpoint", "foreground.flow_checkpoint"}
    # the record keeps both parts; the hash reads the protocol part only
    cfg = GeoConConfig()
    assert cfg.to_dict()["features"]["chunk_frames"] == "auto"
    assert "chunk_frames" not in cfg.protocol_dict()["features"]
    assert cfg.runtime_dict()["epipolar"] == {"opencv_threads": 1}


@pytest.mark.parametrize("name,spec", PROTOCOL, ids=[n for n, _ in PROTOCOL])
def test_every_protocol_field_moves_the_hash(name, spec):
    changed = _changed(name, spec)
    assert changed.config_hash() != _base(name).config_hash(), name


def test_runtime_settings_and_moved_paths_keep_the_hash():
    base = GeoConConfig().config_hash()
    for name, value in SETTINGS.items():
        assert GeoConConfig().replace(**_nested(name, value)).config_hash() == base, name
    for name, kind in RUNTIME_FIELDS.items():
        if kind != "path":
            continue
        # features.checkpoint only with a backend that loads one (a ConfigError otherwise)
        start = (GeoConConfig().replace(features={"backend": "disk"})
                 if name == "features.checkpoint" else GeoConConfig())
        here = start.replace(**_nested(name, "/disk1/weights.pt"))
        there = start.replace(**_nested(name, "/mnt/other/weights.pt"))
        assert here.config_hash() == there.config_hash() != start.config_hash(), name


def _numbers(result) -> dict:
    d = result.to_dict()
    for key in ("timing_s", "config"):
        d.pop(key)
    return d


def test_runtime_settings_change_no_number():
    """Every runtime setting at a non-default value: same numbers, same hash (background,
    foreground with the true object masks, WorldAtlas trio and Epipolar-DPO)."""
    synth = grounded_clip("C4", num_frames=6, size=(120, 160), num_objects=1)
    base = {"epipolar_dpo": {"sampling_rate": 2}}
    runtime = GeoConConfig().replace(**base)
    for name, value in SETTINGS.items():
        runtime = runtime.replace(**_nested(name, value))
    for preset in ("all", "epipolar-dpo"):
        ref = score_clip(synth.frames, masks=synth.masks, config=base, preset=preset,
                         device="cpu", progress=False)
        got = score_clip(synth.frames, masks=synth.masks, config=runtime, preset=preset,
                         device="cpu", progress=False)
        assert ref.status == "ok" and ref.config_hash == got.config_hash
        assert got.config["features"]["chunk_frames"] == 2  # recorded all the same
        assert _numbers(ref) == _numbers(got)
        if preset == "all":
            assert ref.foreground["status"] == "ok" and ref.epipolar["status"] == "ok"
        else:
            assert ref.epipolar_dpo["valid_pairs"] == 2


# --------------------------------------------------------------------------------------------
# validation on every path
CROSS = [("gate", "hysteresis_low", 0.9, "gate.hysteresis_low must be <= gate.hysteresis_high"),
         ("gate", "parallax_high", 0.01, "gate.parallax_low must be <= gate.parallax_high"),
         ("epipolar.gvgc", "min_frames", 60,
          "epipolar.gvgc.min_frames must exceed every epipolar.gvgc.intervals value")]


def _section(cfg: GeoConConfig, place: str) -> Any:
    for key in place.split("."):
        cfg = getattr(cfg, key)
    return cfg


@pytest.mark.parametrize("place,key,value,message", CROSS, ids=[c[1] for c in CROSS])
def test_cross_checks_on_every_path(tmp_path, place, key, value, message):
    data = _nested(f"{place}.{key}", value)
    with pytest.raises(ConfigError, match=message):
        GeoConConfig.from_dict(data)
    with pytest.raises(ConfigError, match=message):
        GeoConConfig().replace(**data)
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ConfigError, match=message):
        load_config(path)
    with pytest.raises(ConfigError, match=message):
        build_config(argparse.Namespace(config=str(path), preset=None))
    cls = {"gate": GateConfig, "epipolar.gvgc": GvgcConfig}[place]
    with pytest.raises(ConfigError, match=message):
        cls(**{key: value})
    cfg = GeoConConfig()
    before = cfg.config_hash()
    with pytest.raises(ConfigError, match=message):  # attribute assignment, refused as a whole
        setattr(_section(cfg, place), key, value)
    assert cfg.config_hash() == before and cfg == GeoConConfig()


def test_assignment_is_checked_and_typos_refused():
    cfg = GeoConConfig()
    cfg.gate.hysteresis_low = 0.04  # a valid change goes through, and moves the hash
    assert cfg.gate.hysteresis_low == 0.04 and cfg.config_hash() != GeoConConfig().config_hash()
    with pytest.raises(ConfigError, match="unknown config key config.gate.hysterisis_low"):
        cfg.gate.hysterisis_low = 0.02
    with pytest.raises(ConfigError, match="^preset must be one of"):
        cfg.preset = "fast"
    with pytest.raises(ConfigError, match="^preset must be one of"):
        cfg.with_preset("fast")


# --------------------------------------------------------------------------------------------
# Epipolar-DPO and soft-score settings are sections
def test_dpo_and_soft_settings_are_config_sections(tmp_path):
    from geocon_torch.epipolar.dpo import EpipolarDPOConfig as OldDPO
    from geocon_torch.measures.soft import SoftConsistencyConfig as OldSoft
    assert OldDPO is EpipolarDPOConfig and OldSoft is SoftConsistencyConfig
    cfg = load_config({"epipolar_dpo": {"sampling_rate": 5}, "soft": {"tau_h": 3}})
    assert cfg.epipolar_dpo == EpipolarDPOConfig(sampling_rate=5)
    assert cfg.soft.tau_h == 3.0 and cfg.to_dict()["soft"]["model"] == "auto"
    assert cfg.config_hash() != GeoConConfig().config_hash()
    with pytest.raises(ConfigError, match=r"^epipolar_dpo.min_matches must be an int >= 8"):
        EpipolarDPOConfig(min_matches=4)
    with pytest.raises(ConfigError, match=r"^soft.model must be one of"):
        GeoConConfig().replace(soft={"model": "affine"})
    with pytest.raises(ConfigError, match=r"^soft.temperature_h must be a positive number"):
        cfg.soft.temperature_h = 0


def test_soft_score_reads_the_config_section():
    from geocon_torch.metrics.functional import soft_background_consistency
    x = torch.rand(1, 2, 1, 24, 24, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    cfg = GeoConConfig().replace(soft={"tau_h": 3.0, "model": "homography", "irls_iters": 1})
    a = soft_background_consistency(x, config=cfg)
    b = soft_background_consistency(x, config=SoftConsistencyConfig(tau_h=3.0,
                                                                    model="homography"),
                                    irls_iters=1)
    c = soft_background_consistency(x, model="homography", tau_h=3.0, irls_iters=1)
    assert torch.equal(a, b) and torch.equal(a, c)
    with pytest.raises(ConfigError, match="unknown config key config.soft.iters"):
        soft_background_consistency(x, iters=2)


def test_machine_dependent_autos_are_pinned(monkeypatch):
    """Every "auto" that means another thing on another machine is recorded as what it meant,
    so one config hash never names two protocols (a CPU and a CUDA run, a machine with
    RAFT weights in its cache and one without)."""
    import geocon_torch.pipeline as pl

    off = GeoConConfig().replace(background={"calibration": None})
    cpu = pl.pinned_config(off, "cpu")
    assert (cpu.features.backend, cpu.epipolar.implementation, cpu.foreground.flow) == (
        "opencv-sift", "opencv", "torch-lk")
    torch_path = pl.pinned_config(off.replace(epipolar={"implementation": "torch"}), "cpu")
    assert torch_path.epipolar.features == "opencv-sift"  # the torch path's "auto" features
    raft = pl.pinned_config(off.replace(foreground={"flow_checkpoint": "/w/raft.pth"}), "cpu")
    assert raft.foreground.flow == "raft_small" and raft.config_hash() != cpu.config_hash()
    monkeypatch.setattr(pl, "resolve_device", lambda device: torch.device("cuda"))
    gpu = pl.pinned_config(off, None)
    assert (gpu.features.backend, gpu.epipolar.implementation, gpu.epipolar.features) == (
        "torch-sift", "torch", "torch-sift")
    assert gpu.config_hash() != cpu.config_hash()
    # pinning is idempotent: a pinned record re-pins to itself
    assert pl.pinned_config(cpu, "cpu").config_hash() == cpu.config_hash()


def test_set_valued_fields_and_bounds_match_what_scoring_accepts():
    """Scales are a set (their order and repeats change no number, so no hash either); a
    letterbox fraction of 0.5 or more and a foreground grid of 1 are refused when the config
    is built (they failed at scoring time: a ShapeError / a foreground error under an ok
    clip)."""
    shuffled = load_config({"features": {"scales": [1.0, 0.25, 0.5, 0.5]},
                            "foreground": {"scales": [0.5, 1.0, 0.25]}})
    assert shuffled.features.scales == (0.25, 0.5, 1.0)
    assert shuffled.config_hash() == GeoConConfig().config_hash()
    with pytest.raises(ConfigError, match=r"letterbox_min_fraction must be a number in \[0, 0.5\)"):
        load_config({"io": {"letterbox_min_fraction": 0.5}})
    with pytest.raises(ConfigError, match="foreground.grid must be an int >= 2"):
        load_config({"foreground": {"grid": 1}})
