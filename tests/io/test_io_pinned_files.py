"""Weights and prompt files pinned by content (geocon_torch.io.pinned_files): other weights at
the same path give another config_hash, a moved file the same one, a changed file under a
recorded config a ConfigError; configs without such files keep their hash; only the files the
run reads are hashed (geocon_torch.sections.stage_models.files_read), RAFT weights from the
torch hub cache included."""
from __future__ import annotations

import hashlib
import re
from pathlib import Path

import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.config import GeoConConfig
from geocon_torch.errors import ConfigError
from geocon_torch.io.pinned_files import file_digest, pin_files
from geocon_torch.pipeline import pinned_config
from geocon_torch.presets import PRESET_NAMES, get_preset
from geocon_torch.sections.stage_models import files_read

of = pytest.importorskip("torchvision.models.optical_flow")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _pin(cfg: GeoConConfig) -> GeoConConfig:
    """pin_files with the files the config's preset reads (as pinned_config calls it)."""
    return pin_files(cfg, files_read(cfg, get_preset(cfg.preset).sections))


def test_config_without_files_keeps_its_hash():
    cfg = GeoConConfig()
    assert pin_files(cfg, {}) is cfg and _pin(cfg) is cfg
    for name in PRESET_NAMES:
        preset = cfg.with_preset(name)
        assert _pin(preset) is preset
    assert "checkpoint_sha256" not in cfg.protocol_dict()["features"]
    assert cfg.to_dict()["features"]["checkpoint_sha256"] is None
    assert pinned_config(cfg, "cpu").config_hash() == pinned_config({}, "cpu").config_hash()


def test_other_weights_at_the_same_path_change_the_hash(tmp_path: Path):
    ckpt = tmp_path / "raft.pth"
    ckpt.write_bytes(b"weights A")
    cfg = GeoConConfig().replace(foreground={"flow": "raft_small", "flow_checkpoint": str(ckpt)})
    first = _pin(cfg)
    assert first.foreground.flow_checkpoint_sha256 == _sha(b"weights A")
    moved = tmp_path / "elsewhere.pth"
    moved.write_bytes(b"weights A")
    same = _pin(cfg.replace(foreground={"flow_checkpoint": str(moved)}))
    assert same.config_hash() == first.config_hash() != cfg.config_hash()
    ckpt.write_bytes(b"weights B, another size")
    second = _pin(cfg)
    assert second.foreground.flow_checkpoint_sha256 == _sha(b"weights B, another size")
    assert second.config_hash() != first.config_hash()
    with pytest.raises(ConfigError, match="flow_checkpoint_sha256 is .* the file changed"):
        _pin(first)  # the recorded config names the old weights
    assert _pin(GeoConConfig.from_dict(second.to_dict())).config_hash() == \
        second.config_hash()


def test_folder_digest_covers_names_and_contents(tmp_path: Path):
    (tmp_path / "ckpt" / "sub").mkdir(parents=True)
    (tmp_path / "ckpt" / "a.bin").write_bytes(b"1")
    (tmp_path / "ckpt" / "sub" / "b.bin").write_bytes(b"2")
    before = file_digest(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "sub" / "b.bin").write_bytes(b"3")
    after = file_digest(tmp_path / "ckpt")
    assert before is not None and after is not None and before != after
    assert file_digest(tmp_path / "missing.pth") is None
    (tmp_path / "real").mkdir()
    (tmp_path / "real" / "w.bin").write_bytes(b"4")
    (tmp_path / "ckpt" / "linked").symlink_to(tmp_path / "real", target_is_directory=True)
    linked = file_digest(tmp_path / "ckpt")
    (tmp_path / "real" / "w.bin").write_bytes(b"5")  # weights behind a linked folder count
    assert linked != after and file_digest(tmp_path / "ckpt") != linked


def test_missing_file_keeps_the_given_state(tmp_path: Path):
    cfg = GeoConConfig().replace(gate={"dust3r_checkpoint": str(tmp_path / "none.pth")})
    assert _pin(cfg).gate.dust3r_checkpoint_sha256 is None
    noted = cfg.replace(gate={"dust3r_checkpoint_sha256": "0123456789abcdef" * 4})
    assert _pin(noted) is noted  # nothing to compare with: the loader reports the file
    assert _pin(noted.replace(gate={"dust3r_checkpoint": None})
                ).gate.dust3r_checkpoint_sha256 is None
    with pytest.raises(ConfigError, match="64 lowercase hex"):
        _pin(cfg.replace(gate={"dust3r_checkpoint_sha256": "0123456789abcdef"}))


def test_scored_result_pins_no_file_it_does_not_read(tmp_path: Path):
    """A prompt file beside the weight-free motion masks is never read: not hashed, and
    another file there keeps the hash (was: hashed, and the hash moved with it)."""
    prompts = tmp_path / "prompts.json"
    prompts.write_text('[{"frame": 0, "box": [1, 1, 8, 8]}]')
    clip = torch.randint(0, 255, (3, 3, 32, 48), dtype=torch.uint8)
    cfg = {"segment": {"sam2_prompts": str(prompts)}, "io": {"long_side": None}}
    res = score_clip(clip, config=cfg, preset="background", progress=False).to_dict()
    assert res["config"]["segment"]["sam2_prompts_sha256"] is None
    assert res["config_hash"] == GeoConConfig.from_dict(res["config"]).config_hash()
    prompts.write_text('[{"frame": 0, "box": [2, 2, 9, 9]}]')
    assert pinned_config(res["config"], "cpu").config_hash() == res["config_hash"]


def _files(tmp_path: Path) -> dict:
    """A weights / prompt file for every pinned field (bytes only: nothing loads them)."""
    names = {"features": "disk.pth", "dust3r": "dust3r.pth", "sam2": "sam2.pt",
             "prompts": "prompts.json", "raft": "raft.pth"}
    out = {}
    for key, name in names.items():
        out[key] = tmp_path / name
        out[key].write_bytes(f"{key} v1".encode())
    return out


def _with_files(files: dict, **sections) -> GeoConConfig:
    base = {"features": {"backend": "disk", "checkpoint": str(files["features"])},
            "gate": {"dust3r_checkpoint": str(files["dust3r"])},
            "segment": {"sam2_checkpoint": str(files["sam2"]),
                        "sam2_prompts": str(files["prompts"])},
            "foreground": {"flow_checkpoint": str(files["raft"])}}
    for sec, changes in sections.items():
        base[sec] = {**base.get(sec, {}), **changes}
    return GeoConConfig.from_dict(base)


FIELDS = {"features": ("features", "checkpoint"), "dust3r": ("gate", "dust3r_checkpoint"),
          "sam2": ("segment", "sam2_checkpoint"), "prompts": ("segment", "sam2_prompts"),
          "raft": ("foreground", "flow_checkpoint")}


def _pinned(cfg: GeoConConfig) -> dict:
    return {k: getattr(getattr(cfg, sec), f"{name}_sha256") for k, (sec, name) in FIELDS.items()}


@pytest.mark.parametrize("changes, preset, read", [
    ({}, "geocon", {"features", "dust3r", "sam2", "prompts", "raft"}),
    ({}, "background", {"features", "dust3r", "sam2", "prompts"}),
    ({}, "worldatlas", set()),
    ({"gate": {"method": "parallax"}, "segment": {"method": "motion"},
      "foreground": {"flow": "torch-lk"}}, "geocon", {"features"}),
    ({"gate": {"method": "poses"}, "segment": {"method": "files"}}, "all", {"features", "raft"}),
])
def test_only_files_the_run_reads_are_pinned(tmp_path: Path, changes, preset, read):
    """pinned_config hashes the files of the stages the run runs and no other: a DUSt3R
    checkpoint under the parallax / poses gate, SAM-2 files under motion / given masks, a RAFT
    checkpoint under torch-lk or a preset without the foreground, a features checkpoint under
    a preset without the background are not hashed (were: each read in full, and the hash
    moved when such an unread file changed)."""
    files = _files(tmp_path)
    cfg = _with_files(files, **changes).with_preset(preset)
    pinned = pinned_config(cfg, "cpu")
    assert _pinned(pinned) == {k: _sha(f"{k} v1".encode()) if k in read else None
                               for k in FIELDS}
    for key, path in files.items():  # another file at an unread path: the same hash
        path.write_bytes(f"{key} v2, another size".encode())
        again = pinned_config(cfg, "cpu").config_hash()
        assert (again != pinned.config_hash()) == (key in read), key
        path.write_bytes(f"{key} v1".encode())


def test_raft_weights_from_the_hub_cache_are_pinned(tmp_path: Path, monkeypatch):
    """foreground.flow "auto" without a checkpoint runs RAFT-small from the torch hub cache
    when its file is there: that file's SHA-256 is pinned in flow_checkpoint_sha256 (was:
    nothing, so other weights there scored under the same config_hash)."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    name = of.Raft_Small_Weights.DEFAULT.url.rsplit("/", 1)[-1]
    hub = tmp_path / "checkpoints" / name
    hub.parent.mkdir()
    torch.save({"w": torch.zeros(2)}, hub)
    first = pinned_config(GeoConConfig(), "cpu")
    assert first.foreground.flow == "raft_small" and first.foreground.flow_checkpoint is None
    assert first.foreground.flow_checkpoint_sha256 == _sha(hub.read_bytes())
    assert pinned_config(GeoConConfig().with_preset("background"), "cpu"
                         ).foreground.flow_checkpoint_sha256 is None  # no foreground: not read
    torch.save({"w": torch.ones(3)}, hub)
    second = pinned_config(GeoConConfig(), "cpu")
    assert second.foreground.flow_checkpoint_sha256 == _sha(hub.read_bytes())
    assert second.config_hash() != first.config_hash()
    with pytest.raises(ConfigError, match=re.escape(
            f"foreground.flow_checkpoint_sha256 is {first.foreground.flow_checkpoint_sha256} "
            f"but {hub} has hash {second.foreground.flow_checkpoint_sha256}: the file changed")):
        pinned_config(first, "cpu")


def test_checkpoint_only_for_a_backend_that_loads_one(tmp_path: Path):
    with pytest.raises(ConfigError, match="loads no checkpoint"):
        GeoConConfig().replace(features={"backend": "opencv-sift", "checkpoint": "w.pth"})
    with pytest.raises(ConfigError, match="features.fallback"):
        GeoConConfig().replace(features={"fallback": "disk"})
    cfg = GeoConConfig().replace(features={"backend": "disk", "checkpoint": "w.pth"})
    assert cfg.features.checkpoint == "w.pth"
