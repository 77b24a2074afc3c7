"""Weights and prompt files pinned by content (geocon_torch.io.pinned_files): other weights at
the same path give another config_hash, a moved file the same one, a changed file under a
recorded config a ConfigError; configs without such files keep their hash."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.config import GeoConConfig
from geocon_torch.errors import ConfigError
from geocon_torch.io.pinned_files import file_digest, pin_files
from geocon_torch.pipeline import pinned_config


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def test_config_without_files_keeps_its_hash():
    cfg = GeoConConfig()
    assert pin_files(cfg) is cfg
    assert "checkpoint_sha256" not in cfg.protocol_dict()["features"]
    assert cfg.to_dict()["features"]["checkpoint_sha256"] is None
    assert pinned_config(cfg, "cpu").config_hash() == pinned_config({}, "cpu").config_hash()


def test_other_weights_at_the_same_path_change_the_hash(tmp_path: Path):
    ckpt = tmp_path / "raft.pth"
    ckpt.write_bytes(b"weights A")
    cfg = GeoConConfig().replace(foreground={"flow": "torch-lk", "flow_checkpoint": str(ckpt)})
    first = pin_files(cfg)
    assert first.foreground.flow_checkpoint_sha256 == _sha(b"weights A")
    moved = tmp_path / "elsewhere.pth"
    moved.write_bytes(b"weights A")
    same = pin_files(cfg.replace(foreground={"flow_checkpoint": str(moved)}))
    assert same.config_hash() == first.config_hash() != cfg.config_hash()
    ckpt.write_bytes(b"weights B, another size")
    second = pin_files(cfg)
    assert second.foreground.flow_checkpoint_sha256 == _sha(b"weights B, another size")
    assert second.config_hash() != first.config_hash()
    with pytest.raises(ConfigError, match="flow_checkpoint_sha256 is .* the file changed"):
        pin_files(first)  # the recorded config names the old weights
    assert pin_files(GeoConConfig.from_dict(second.to_dict())).config_hash() == \
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
    assert pin_files(cfg).gate.dust3r_checkpoint_sha256 is None
    noted = cfg.replace(gate={"dust3r_checkpoint_sha256": "0123456789abcdef" * 4})
    assert pin_files(noted) is noted  # nothing to compare with: the loader reports the file
    assert pin_files(noted.replace(gate={"dust3r_checkpoint": None})
                     ).gate.dust3r_checkpoint_sha256 is None
    with pytest.raises(ConfigError, match="64 lowercase hex"):
        pin_files(cfg.replace(gate={"dust3r_checkpoint_sha256": "0123456789abcdef"}))


def test_scored_result_records_the_prompt_file_hash(tmp_path: Path):
    prompts = tmp_path / "prompts.json"
    prompts.write_text('[{"frame": 0, "box": [1, 1, 8, 8]}]')
    clip = torch.randint(0, 255, (3, 3, 32, 48), dtype=torch.uint8)
    cfg = {"segment": {"sam2_prompts": str(prompts)}, "io": {"long_side": None}}
    res = score_clip(clip, config=cfg, preset="background", progress=False).to_dict()
    assert res["config"]["segment"]["sam2_prompts_sha256"] == _sha(prompts.read_bytes())
    assert res["config_hash"] == GeoConConfig.from_dict(res["config"]).config_hash()


def test_checkpoint_only_for_a_backend_that_loads_one(tmp_path: Path):
    with pytest.raises(ConfigError, match="loads no checkpoint"):
        GeoConConfig().replace(features={"backend": "opencv-sift", "checkpoint": "w.pth"})
    with pytest.raises(ConfigError, match="features.fallback"):
        GeoConConfig().replace(features={"fallback": "disk"})
    cfg = GeoConConfig().replace(features={"backend": "disk", "checkpoint": "w.pth"})
    assert cfg.features.checkpoint == "w.pth"
