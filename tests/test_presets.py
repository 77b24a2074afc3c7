"""One preset table (issue 23 items 2, 3): the preset scored is the preset recorded (and hashed)
through every entry point -- Python, CLI, Metric classes, rewards, bench -- and the pipeline,
rewards, bench kinds and README all read geocon_torch.presets.PRESETS."""
from __future__ import annotations

import argparse
import dataclasses
import json

import pytest
from helpers import REPO_ROOT

from geocon_torch import ConfigError, GeoConConfig
from geocon_torch import presets as presets_module
from geocon_torch.bench import ResultStore, run_manifest
from geocon_torch.bench.preferences import KIND_PRESETS, kind_config
from geocon_torch.commands._common import build_config
from geocon_torch.config import PRESET_CHOICES
from geocon_torch.io.writer import write_image_folder
from geocon_torch.metrics import BackgroundConsistency
from geocon_torch.pipeline import SECTION_STEPS, pinned_config, score_clip, score_clips
from geocon_torch.presets import (
    PRESETS,
    REWARD_KINDS,
    SECTION_NAMES,
    InputError,
    get_preset,
    preset_for_kind,
    preset_table,
)
from geocon_torch.rewards import KINDS, geometric_reward, reward_from_result
from geocon_torch.synth import grounded_clip

README = REPO_ROOT / "README.md"


@pytest.fixture(scope="module")
def frames():
    return grounded_clip("C1", num_frames=6, size=(120, 160)).frames


def test_one_table_everywhere():
    assert PRESET_CHOICES == tuple(PRESETS) and tuple(SECTION_STEPS) == SECTION_NAMES
    assert KINDS == REWARD_KINDS == ("background", "epipolar", "epipolar-dpo")
    assert KIND_PRESETS == {"background": "background", "epipolar": "worldatlas",
                            "epipolar-dpo": "epipolar-dpo"}
    for kind in KINDS:  # a reward reads the block that decides its preset's status
        block = preset_for_kind(kind).status_from
        assert reward_from_result({}, kind).reason == (
            f"the result has no {block} block (scored with another preset?)")
    assert preset_table() in README.read_text()  # the README lists the table as it is
    with pytest.raises(InputError, match="reward kind must be one of"):
        preset_for_kind("fast")
    with pytest.raises(InputError, match="sections must be among"):
        presets_module.Preset("x", "x", ("foreground", "background"), "background")
    with pytest.raises(InputError, match="status_from must be one of its sections"):
        presets_module.Preset("x", "x", ("background",), "epipolar")


def test_one_clip_two_presets_two_hashes(frames):
    """Python: the preset argument is recorded in config.preset and keys the result."""
    a = score_clip(frames, preset="background", device="cpu", progress=False)
    b = score_clip(frames, preset="worldatlas", device="cpu", progress=False)
    assert (a.config["preset"], b.config["preset"]) == ("background", "worldatlas")
    assert a.config_hash != b.config_hash
    for res, name in ((a, "background"), (b, "worldatlas")):
        expected = pinned_config(GeoConConfig().with_preset(name), "cpu").config_hash()
        assert res.config_hash == expected and res.status == "ok"
    assert not a.epipolar and not b.background and b.epipolar["status"] == "ok"
    # the preset given beats the config's, and is what is recorded
    c = score_clips([frames], config={"preset": "gvgc"}, preset="background", device="cpu")[0]
    assert c.config["preset"] == "background" and c.config_hash == a.config_hash
    failed = score_clips(["/no/such/clip.mp4"], preset="worldatlas")[0]
    assert failed.status == "error" and failed.config_hash == pinned_config(
        GeoConConfig().with_preset("worldatlas")).config_hash()  # the record a scored clip has


def test_cli_metric_rewards_and_bench_record_the_preset(frames, tmp_path):
    ns = dict(config=None, long_side=None, max_frames=None, stride=None)
    cli = {p: build_config(argparse.Namespace(preset=p, **ns)) for p in ("gvgc", "background")}
    assert cli["gvgc"].preset == "gvgc" and len({c.config_hash() for c in cli.values()}) == 2
    assert BackgroundConsistency(preset="all").config.preset == "all"
    with pytest.raises(ConfigError, match="preset 'gvgc' does not score the background"):
        BackgroundConsistency(preset="gvgc")
    with pytest.raises(ConfigError, match="^preset must be one of"):
        BackgroundConsistency(preset="fast")
    # rewards: the kind's preset, and the hash score_clip records for it (a moving clip: the
    # rewards refuse a frozen one, such as this static C1 render, which score_clip scores)
    moving = grounded_clip("C2", num_frames=6, size=(120, 160)).frames
    _, diag = geometric_reward(moving[None], "background")
    ref = score_clip(moving, preset="background", device="cpu", progress=False)
    assert diag.preset == "background" and diag.config_hash == ref.config_hash
    assert diag.clips[0].reward == reward_from_result(ref.to_dict(), "background").reward
    _, diag2 = geometric_reward(moving[None], "epipolar")
    assert diag2.preset == "worldatlas" and diag2.config_hash != diag.config_hash
    # bench: one store, two kinds -> two config hashes, each row records its preset
    folder = write_image_folder(tmp_path / "clip", frames)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"clip_id": "a", "path": str(folder), "generator": "g"}) + "\n")
    db = tmp_path / "r.sqlite"
    for kind in ("background", "epipolar"):
        run_manifest(manifest, db, config=kind_config(None, kind), device="cpu", progress=False)
    with ResultStore(db) as store:
        rows = store.rows()
    assert sorted(r["result"]["config"]["preset"] for r in rows) == ["background", "worldatlas"]
    assert len({r["result"]["config_hash"] for r in rows}) == 2


def test_preset_overrides_are_applied_and_recorded(frames, monkeypatch):
    spec = dataclasses.replace(PRESETS["background"], overrides={"io": {"stride": 2}})
    monkeypatch.setitem(PRESETS, "background", spec)
    cfg = GeoConConfig().with_preset("background")
    assert cfg.io.stride == 2 and cfg.preset == "background"
    res = score_clip(frames, preset="background", device="cpu", progress=False)
    assert res.config["io"]["stride"] == 2 and res.extra["frames"] == 3
    assert get_preset("background") is spec
