"""A ``geocon synth`` / ``demo`` clip's JSON is a valid pose log: its per-frame world-to-camera
poses are read as such (they were once chained as relative poses, giving a static camera a
made-up translation and the F regime)."""
import json

import torch

from geocon_torch import score_clip
from geocon_torch.gate.poses import load_pose_log
from geocon_torch.synth import render_scene


def _true_first_last(poses: torch.Tensor) -> torch.Tensor:
    return poses[-1] @ torch.linalg.inv(poses[0])


def test_synth_json_poses_are_per_frame(tmp_path):
    clip = render_scene("C3", num_frames=6, size=(48, 64), seed=1)
    path = clip.save(tmp_path)
    gt = json.loads(path.read_text())
    assert gt["absolute_poses"] == gt["poses"]
    truth = _true_first_last(clip.poses.double())
    got, present = load_pose_log(path).first_last(5)
    assert present and torch.allclose(got, truth, atol=1e-9)
    del gt["absolute_poses"]  # a JSON written before the key existed: still per frame
    legacy = tmp_path / "legacy.json"
    legacy.write_text(json.dumps(gt))
    got, _ = load_pose_log(legacy).first_last(5)
    assert torch.allclose(got, truth, atol=1e-9)
    # the same list without the synth marker is a relative pose log, as documented
    chained, _ = load_pose_log({"poses": gt["poses"]}).first_last(5)
    assert not torch.allclose(chained, truth, atol=1e-3)


def test_static_camera_synth_poses_give_h(tmp_path):
    clip = render_scene("C4", num_frames=6, size=(96, 160), seed=0)
    assert float(clip.poses[0, :3, 3].abs().max()) > 0.05  # the camera is off the origin
    path = clip.save(tmp_path)
    out = score_clip(clip.frames, poses=path, preset="background", progress=False).to_dict()
    assert out["gate"]["method"] == "poses"
    assert out["regime"] == "H" and out["gate"]["evidence"]["t_inf"] < 1e-9
