"""A misconfigured optional model-backed stage raises its GeoConError before any clip is read
(geocon_torch.sections.stage_models.preflight): RAFT flow and a learned features backend here,
from score_clips / score_clip / the Metric classes / the bench runner; a stage the run does not
run is not built; the models the preflight builds are the ones the stages use (loaded once).
DUSt3R and SAM-2: tests/gate/test_gate_dust3r.py, tests/segment/test_segment_sam2.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from helpers import write_clips, write_jsonl

from geocon_torch import score_clip, score_clips
from geocon_torch.bench import run_manifest
from geocon_torch.checkpoints import _MODEL_CACHE
from geocon_torch.errors import CheckpointError
from geocon_torch.metrics import BackgroundConsistency
from geocon_torch.sections.stage_models import StagePlan, stage_plan
from geocon_torch.config import GeoConConfig
from geocon_torch.synth import grounded_clip

of = pytest.importorskip("torchvision.models.optical_flow")


@pytest.fixture(scope="module")
def raft_ckpt(tmp_path_factory) -> Path:
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("raft") / "raft_small_random.pth"
    torch.save(of.raft_small(weights=None).state_dict(), path)
    return path


def _frames(num_frames: int = 4) -> torch.Tensor:
    return grounded_clip("C1", num_frames=num_frames, size=(96, 128)).frames


def _raft(path) -> dict:
    return {"foreground": {"flow": "raft_small", "flow_checkpoint": str(path)}}


def test_unusable_raft_raises_before_any_clip_is_read(tmp_path: Path):
    """RAFT flow without usable weights raises for the run when the preset runs the
    foreground (was: every clip's foreground an "error" block); a preset without it builds
    nothing and scores on."""
    missing = tmp_path / "missing.mp4"
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"junk")
    for ckpt, phrase in ((tmp_path / "none.pth", f"RAFT checkpoint not found: "
                                                 f"{tmp_path / 'none.pth'}"),
                         (junk, f"RAFT checkpoint {junk} could not be read: it is not a torch "
                                f"checkpoint")):
        with pytest.raises(CheckpointError, match=re.escape(phrase)):
            score_clips([str(missing), _frames()], config=_raft(ckpt))
        with pytest.raises(CheckpointError, match=re.escape(phrase)):
            score_clip(str(missing), config=_raft(ckpt), preset="geocon")
    got = score_clips([str(missing)], config=_raft(junk), preset="background")
    assert got[0].status == "error" and got[0].reason.startswith("VideoReadError")


def test_auto_flow_with_a_broken_hub_file_raises(tmp_path: Path, monkeypatch):
    """foreground.flow "auto" picks RAFT-small from the torch hub cache: a corrupt file there
    is a CheckpointError for the run, not one error block per clip."""
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    name = of.Raft_Small_Weights.DEFAULT.url.rsplit("/", 1)[-1]
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / name).write_bytes(b"")
    with pytest.raises(CheckpointError, match=re.escape(
            f"RAFT checkpoint {tmp_path / 'checkpoints' / name} could not be read: the file is "
            f"empty")):
        score_clips([str(tmp_path / "missing.mp4")])


def test_unusable_features_checkpoint_raises_before_any_clip_is_read(tmp_path: Path):
    """A learned features backend without its checkpoint raises before any clip is read (was:
    raised from inside the batch, after the clips were decoded; a missing video was its own
    error row first), from score_clips, the Metric classes and the bench runner (no row is
    stored, no store is created); a preset without the background does not build it."""
    cfg = {"features": {"backend": "disk", "checkpoint": str(tmp_path / "none.pth")}}
    phrase = f"the 'disk' backend checkpoint not found: {tmp_path / 'none.pth'}"
    with pytest.raises(CheckpointError, match=re.escape(phrase)):
        score_clips([str(tmp_path / "missing.mp4")], config=cfg)
    with pytest.raises(CheckpointError, match=re.escape(phrase)):
        BackgroundConsistency(config=cfg).update(torch.stack([_frames(), _frames()]))
    manifest = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    db = tmp_path / "r.sqlite"
    with pytest.raises(CheckpointError, match=re.escape(phrase)):
        run_manifest(manifest, db, config=cfg, progress=False)
    assert not db.exists()
    got = score_clips([str(tmp_path / "missing.mp4")], config=cfg, preset="worldatlas")
    assert got[0].status == "error" and got[0].reason.startswith("VideoReadError")


def test_stage_plan_follows_the_stage_resolution():
    """One resolution for the preflight and the pinning: the gate method, the masks provider
    and the flow backend as the stages resolve them, per preset and given masks / poses."""
    cfg = GeoConConfig().replace(gate={"dust3r_checkpoint": "d.pth"},
                                 segment={"sam2_checkpoint": "s.pt"},
                                 foreground={"flow_checkpoint": "r.pth"},
                                 features={"backend": "disk", "checkpoint": "k.pth"})
    full = ("background", "foreground")
    assert stage_plan(cfg, full) == StagePlan("disk", "dust3r", "sam2", "raft_small")
    assert stage_plan(cfg, full, masks_given=True, poses_given=True) == StagePlan(
        "disk", "poses", "files", "raft_small")
    assert stage_plan(cfg, ("background",)) == StagePlan("disk", "dust3r", "sam2", None)
    assert stage_plan(cfg, ("epipolar",)) == StagePlan()
    named = cfg.replace(gate={"method": "poses"}, segment={"method": "files"},
                        foreground={"flow": "torch-lk"}, features={"backend": "torch-sift",
                                                                   "checkpoint": None})
    assert stage_plan(named, full) == StagePlan(None, None, None, None)  # the clip's errors


def test_raft_is_loaded_once_for_the_preflight_and_the_foreground(raft_ckpt, monkeypatch):
    """The preflight builds the foreground's RAFT through the cache the stage uses: one load
    for a batch, none for the next call (was: one per batch)."""
    import geocon_torch.flow.factory as factory

    loads = []
    real = factory.RaftFlow
    monkeypatch.setattr(factory, "RaftFlow", lambda *a, **k: loads.append(1) or real(*a, **k))
    _MODEL_CACHE.pop("flow", None)
    clip = grounded_clip("C4", num_frames=2, size=(64, 96))
    for n in (2, 1):
        cfg = GeoConConfig().replace(foreground={**_raft(raft_ckpt)["foreground"],
                                                 "scales": [1.0]})
        got = score_clips([clip.frames] * n, masks=[clip.masks] * n, config=cfg,
                          preset="geocon", device="cpu")
        assert [(r.foreground["flow"], r.foreground["status"]) for r in got] == [
            ("raft_small", "ok")] * n
    assert loads == [1]


def test_learned_features_are_built_once_for_the_preflight_and_the_batches(tmp_path,
                                                                            monkeypatch):
    """A learned features backend (DISK from a local checkpoint) is built by the preflight
    through the cache the feature stage uses: one build for two score_clips calls of two
    batches each (was: one for the preflight's check, then one per batch)."""
    import kornia.feature as KF

    import geocon_torch.features.multiscale as multiscale

    torch.manual_seed(0)
    path = tmp_path / "disk.pth"
    torch.save({"extractor": KF.DISK().eval().state_dict()}, path)
    builds = []
    real = multiscale.get_extractor
    monkeypatch.setattr(multiscale, "get_extractor",
                        lambda *a, **k: builds.append(a[0]) or real(*a, **k))
    _MODEL_CACHE.pop("features", None)
    cfg = {"features": {"backend": "disk", "checkpoint": str(path), "max_keypoints": 64,
                        "fallback": None}}
    clips = [_frames(3), grounded_clip("C3", num_frames=3, size=(96, 128)).frames]
    for _ in range(2):
        got = score_clips(clips, config=cfg, preset="background", device="cpu", batch_bytes=1)
        assert [r.backends["features"] for r in got] == ["disk", "disk"]
    assert [b for b in builds if b == "disk"] == ["disk"]  # the gate view: weight-free SIFT
