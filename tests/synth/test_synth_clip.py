"""SynthClip: determinism, metadata, save/load round trip, the `geocon synth` command, and
input validation."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from geocon_torch.cli import main
from geocon_torch.synth import (CATEGORIES, EXPECTED_REGIME, MOTIONS, grounded_clip, load_synth,
                                render_scene)
from geocon_torch.types import Clip


def test_same_seed_identical_different_seed_different():
    a = render_scene("C3", num_frames=3, size=(48, 64), seed=3)
    b = render_scene("C3", num_frames=3, size=(48, 64), seed=3)
    c = render_scene("C3", num_frames=3, size=(48, 64), seed=4)
    assert torch.equal(a.frames, b.frames) and torch.equal(a.poses, b.poses)
    assert not torch.equal(a.frames, c.frames)
    assert float((a.frames.float() - c.frames.float()).abs().mean()) > 5


@pytest.mark.parametrize("category", CATEGORIES)
def test_every_category_and_motion_renders(category):
    for motion in MOTIONS[category]:
        clip = render_scene(category, motion=motion, num_frames=3, size=(32, 48))
        assert clip.frames.shape == (3, 3, 32, 48) and clip.frames.dtype == torch.uint8
        assert clip.poses.shape == (3, 4, 4) and clip.intrinsics.shape == (3, 3)
        assert clip.meta["expected_regime"] == EXPECTED_REGIME[category]
        moved = float(clip.relative_pose(0, 2)[:3, 3].norm())
        assert (moved > 1e-3) == (EXPECTED_REGIME[category] == "F")
        assert (clip.true_homographies is not None) == (EXPECTED_REGIME[category] == "H")
        assert clip.frames.float().std() > 20  # textured, not blank


def test_grounded_clip_defaults_and_to_clip():
    clip = grounded_clip("rotation")
    assert clip.frames.shape == (12, 3, 240, 320) and clip.category == "C2"
    assert torch.equal(clip.frames, grounded_clip("C2").frames)
    c = clip.to_clip()
    assert isinstance(c, Clip) and c.num_frames == 12 and c.size == (240, 320)
    assert bool(c.content_mask.all()) and c.meta["synth"]["category"] == "C2"


def test_ground_truth_json_fields():
    clip = render_scene("C4", num_frames=4, size=(32, 48), seed=2, num_objects=2)
    gt = clip.ground_truth()
    for key in ("prompt", "generator", "generator_version", "seed", "resolution", "fps", "duration",
                "clip_id", "masks_path", "category", "corruption", "severity", "poses",
                "intrinsics", "true_homographies"):
        assert key in gt
    assert gt["generator"] == "geocon-synth" and gt["resolution"] == "48x32"
    assert gt["duration"] == pytest.approx(4 / 24.0) and gt["num_objects"] == 2
    json.dumps(gt)


def test_save_load_round_trip(tmp_path):
    clip = render_scene("C4", num_frames=5, size=(48, 64), seed=1, num_objects=2,
                        corruption="flicker", severity=0.3)
    path = clip.save(tmp_path)
    stem = clip.clip_id
    assert path == tmp_path / f"{stem}.json"
    assert (tmp_path / f"{stem}.mp4").stat().st_size > 0
    with np.load(tmp_path / f"{stem}_masks.npz") as data:
        assert data["masks"].shape == (5, 2, 48, 64) and data["masks"].dtype == bool
    back = load_synth(path)
    assert back.clip_id == stem and back.category == "C4" and back.seed == 1
    assert back.corruption == "flicker" and back.severity == pytest.approx(0.3)
    assert torch.equal(back.masks, clip.masks)
    assert torch.equal(back.poses, clip.poses) and torch.equal(back.intrinsics, clip.intrinsics)
    assert torch.equal(back.true_homographies, clip.true_homographies)
    assert back.frames.shape == clip.frames.shape
    mse = float(((back.frames.float() - clip.frames.float()) ** 2).mean())
    assert 10 * np.log10(255 ** 2 / max(mse, 1e-9)) > 22  # yuv420 chroma loss
    luma = torch.tensor([0.299, 0.587, 0.114]).view(1, 3, 1, 1)
    y_mse = float((((back.frames.float() - clip.frames.float()) * luma).sum(1) ** 2).mean())
    assert 10 * np.log10(255 ** 2 / max(y_mse, 1e-9)) > 35  # crf 12: luma near-lossless
    gt = json.loads(path.read_text())
    assert gt["masks_path"] == f"{stem}_masks.npz" and gt["fps"] == 24.0


def test_cli_writes_mp4_json_npz(tmp_path, capsys):
    rc = main(["synth", str(tmp_path), "--category", "C2", "--motion", "tilt", "--frames", "3",
               "--size", "64x48", "--seed", "5", "--fps", "12"])
    assert rc == 0
    out = capsys.readouterr().out
    stem = "C2_tilt_seed5"
    for suffix in (".mp4", ".json", "_masks.npz"):
        assert (tmp_path / f"{stem}{suffix}").is_file()
        assert f"{stem}{suffix}" in out
    gt = json.loads((tmp_path / f"{stem}.json").read_text())
    assert gt["fps"] == 12.0 and gt["num_frames"] == 3 and gt["resolution"] == "64x48"


def test_cli_all_categories(tmp_path):
    rc = main(["synth", str(tmp_path), "--category", "all", "--frames", "2", "--size", "32x32",
               "--corruption", "breathing", "--severity", "0.2"])
    assert rc == 0
    written = sorted(p.name for p in tmp_path.glob("*.json"))
    assert len(written) == sum(len(m) for m in MOTIONS.values())
    assert all("breathing" in name for name in written)


def test_cli_rejects_bad_arguments(tmp_path, capsys):
    assert main(["synth", str(tmp_path), "--category", "C9"]) == 2
    assert "geocon synth: error: unknown category" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["synth", str(tmp_path), "--size", "65x48"])


def test_render_scene_rejects_bad_input():
    with pytest.raises(ValueError, match="unknown category"):
        render_scene("C7")
    with pytest.raises(ValueError, match="motion"):
        render_scene("C2", motion="truck", num_frames=2, size=(16, 16))
    with pytest.raises(ValueError, match="unknown render_scene options"):
        render_scene("C1", num_frames=2, size=(16, 16), colour="red")
    with pytest.raises(ValueError, match="severity"):
        render_scene("C1", num_frames=2, size=(16, 16), corruption="flicker", severity=-0.1)
    with pytest.raises(ValueError, match="num_frames"):
        render_scene("C1", num_frames=0)
    one = render_scene("C1", num_frames=1, size=(16, 16))
    assert one.true_homographies is None and one.true_fundamentals is None


def test_cli_nonrigid_only_renders_object_scenes(tmp_path, capsys):
    rc = main(["synth", str(tmp_path), "--frames", "2", "--size", "48x32",
               "--corruption", "nonrigid_object", "--severity", "0.5"])
    assert rc == 0
    assert [p.name for p in tmp_path.glob("*.json")] == ["C4_static_nonrigid_object0.50_seed0.json"]
    assert "skipping C1, C2, C3, C5, C6" in capsys.readouterr().out
    assert main(["synth", str(tmp_path), "--category", "C2", "--corruption",
                 "nonrigid_object"]) == 2


def test_clip_id_names_the_object_count_of_c4():
    """Two or three objects are another clip: saved side by side, not over the 1-object one."""
    ids = [render_scene("C4", num_frames=2, size=(32, 48), num_objects=n).clip_id
           for n in (1, 2, 3)]
    assert ids == ["C4_static_seed0", "C4_static_2obj_seed0", "C4_static_3obj_seed0"]
    bad = render_scene("C4", num_frames=2, size=(32, 48), num_objects=2,
                       corruption="flicker", severity=0.5)
    assert bad.clip_id == "C4_static_2obj_flicker0.50_seed0"
