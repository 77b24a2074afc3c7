"""RAFT adapter, torch-LK chunking, the DUSt3R gate and pose-log checks pinned by mutation testing
round 11 (area "flowgate"): what RAFT's network is fed (range [-1, 1], replicate padding to
multiples of 8, no downscale of large frames, the pairs of each batch, the refinement count) and
how its flow comes back (cropped at the top left, scaled back per axis); checkpoint messages;
the DUSt3R view sizes, the direction of its relative pose, a failed reconstruction, the cache
key; pose-log rigidity, 'valid' length and per-frame composition with rotations.

RAFT and DUSt3R run with stub networks (closed-form outputs) behind the real adapters; RAFT's
adapter is built from a tiny random-init checkpoint through the real loader."""
from __future__ import annotations

import argparse
import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from geocon_torch.checkpoints import _MODEL_CACHE
from geocon_torch.config import GateConfig
from geocon_torch.errors import CheckpointError, InputError, ShapeError
from geocon_torch.flow import get_flow
from geocon_torch.flow.factory import cached_flow, flow_weights
from geocon_torch.flow.lk_dense import DenseLKFlow, gaussian_blur
from geocon_torch.gate import gate_from_poses, load_pose_log
from helpers import adjacent, pose, shifted_texture_frames

of = pytest.importorskip("torchvision.models.optical_flow")


# --- RAFT -----------------------------------------------------------------------------------


class _StubRaft(torch.nn.Module):
    """Records what RAFT would be fed; returns ``make(a, b)`` as its last flow estimate."""

    def __init__(self, make):
        super().__init__()
        self.make, self.calls = make, []

    def forward(self, a, b, num_flow_updates=12):
        self.calls.append((a.clone(), b.clone(), num_flow_updates))
        return [self.make(a, b)]


def _stubbed(ckpt, make, **options):
    est = get_flow("raft_small", checkpoint=str(ckpt), **options)
    est.model = _StubRaft(make)
    return est


def _grid_flow(a, b):
    """u = the network grid's column index, v = its row index."""
    n, _, h, w = a.shape
    ys, xs = torch.meshgrid(torch.arange(h, dtype=a.dtype), torch.arange(w, dtype=a.dtype),
                            indexing="ij")
    return torch.stack([xs, ys])[None].expand(n, 2, h, w).clone()


def test_raft_input_range_padding_native_size_and_crop(small_ckpt):
    """130 x 150 frames (short side above min_size 128) go in at their own size, replicate-padded
    to 136 x 152, mapped to [-1, 1], with the configured refinement count; the flow comes back
    cropped from the top-left corner (u = x, v = y of the stub's grid)."""
    est = _stubbed(small_ckpt, _grid_flow, num_flow_updates=3)
    a = torch.full((1, 1, 130, 150), 0.5)
    b = torch.ones(1, 1, 130, 150)
    flow = est(a, b)
    (fa, fb, updates), = est.model.calls
    assert fa.shape == fb.shape == (1, 3, 136, 152) and updates == 3
    assert torch.equal(fa, torch.zeros_like(fa)) and torch.equal(fb, torch.ones_like(fb))
    assert flow.shape == (1, 2, 130, 150)
    torch.testing.assert_close(flow[0, 0], torch.arange(150.0).expand(130, 150), rtol=0, atol=0)
    torch.testing.assert_close(flow[0, 1], torch.arange(130.0)[:, None].expand(130, 150),
                               rtol=0, atol=0)


def test_raft_flow_of_upsampled_frames_is_scaled_back_per_axis(small_ckpt):
    """60 x 100 frames run at 128 x 213 (padded to 216): a network flow (1, 2) px is
    (100 / 213, 2 * 60 / 128) px of the frames."""
    est = _stubbed(small_ckpt, lambda a, b: torch.tensor([1.0, 2.0]).view(1, 2, 1, 1).expand(
        a.shape[0], 2, a.shape[2], a.shape[3]).clone())
    flow = est(torch.rand(1, 3, 60, 100), torch.rand(1, 3, 60, 100))
    assert est.model.calls[0][0].shape == (1, 3, 128, 216)
    torch.testing.assert_close(flow[0, 0], torch.full((60, 100), 100 / 213), rtol=0, atol=1e-6)
    torch.testing.assert_close(flow[0, 1], torch.full((60, 100), 2 * 60 / 128), rtol=0,
                               atol=1e-6)


def test_raft_batches_keep_each_pair_together(small_ckpt):
    """5 pairs in batches of 2: every batch pairs img1[k] with img2[k] (stub: u = mean of the
    network's b - a = 2 (img2 - img1))."""
    est = _stubbed(small_ckpt, lambda a, b: (b - a).mean((1, 2, 3)).view(-1, 1, 1, 1).expand(
        a.shape[0], 2, a.shape[2], a.shape[3]).clone(), batch_size=2, min_size=8)
    img1 = torch.zeros(5, 3, 16, 16)
    img2 = torch.arange(5.0).div(10).view(5, 1, 1, 1).expand(5, 3, 16, 16).clone()
    flow = est(img1, img2)
    assert [c[0].shape[0] for c in est.model.calls] == [2, 2, 1]
    torch.testing.assert_close(flow[:, 0, 0, 0], torch.arange(5.0) * 0.2, rtol=0, atol=1e-6)


def test_raft_checkpoint_errors_name_the_facts(small_ckpt, tmp_path, monkeypatch):
    """A wrong architecture names the file and the architecture asked for; no local weights
    names the hub folder where torchvision's file would be read."""
    with pytest.raises(CheckpointError,
                       match=re.escape(f"checkpoint {small_ckpt} does not match raft_large: ")):
        get_flow("raft_large", checkpoint=str(small_ckpt))
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    with pytest.raises(CheckpointError, match=re.escape(
            f"place torchvision's file in {tmp_path / 'hub' / 'checkpoints'}; nothing is "
            f"downloaded")):
        get_flow("raft_large")


def test_flow_weights_of_raft_large_is_its_own_hub_file(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    (tmp_path / "checkpoints").mkdir()
    large = tmp_path / "checkpoints" / of.Raft_Large_Weights.DEFAULT.url.rsplit("/", 1)[-1]
    large.write_bytes(b"x")
    assert flow_weights("raft_large") == large
    assert flow_weights("raft_small") is None and flow_weights("torch-lk") is None


def test_cached_flow_keeps_architectures_apart(small_ckpt):
    """The cached RAFT-small model is not handed out for raft_large on the same file (which
    does not fit raft_large: CheckpointError)."""
    _MODEL_CACHE.pop("flow", None)
    try:
        assert cached_flow("raft_small", checkpoint=str(small_ckpt)).name == "raft_small"
        with pytest.raises(CheckpointError, match="does not match raft_large"):
            cached_flow("raft_large", checkpoint=str(small_ckpt))
    finally:
        _MODEL_CACHE.pop("flow", None)


# --- torch-LK -------------------------------------------------------------------------------

def test_lk_chunks_pair_each_img1_with_its_own_img2():
    """Pairs (f0, f1) and (f0, f2) in chunks of one pair give the batched flows (~-1 and ~-2 px:
    frame i is the texture shifted by (i, i) px)."""
    f = shifted_texture_frames(3, 48, 64)
    img1, img2 = torch.stack([f[0], f[0]]), torch.stack([f[1], f[2]])
    opts = dict(levels=3, iterations=3, fine_iterations=2)
    one = DenseLKFlow(batch_size=1, **opts)(img1, img2)
    torch.testing.assert_close(one, DenseLKFlow(batch_size=16, **opts)(img1, img2))
    mid = one[:, :, 16:32, 16:48].mean((2, 3))
    torch.testing.assert_close(mid, torch.tensor([[-1.0, -1.0], [-2.0, -2.0]]), rtol=0, atol=0.3)


def test_blur_and_lk_on_frames_as_small_as_the_blur_radius():
    """A side equal to the blur radius (reflect padding needs more) falls back to replicate."""
    x = torch.full((1, 1, 3, 8), 0.25)  # presmooth 0.7 px: radius 3
    torch.testing.assert_close(gaussian_blur(x, 0.7), x)
    g = torch.Generator().manual_seed(0)
    a, b = torch.rand(1, 3, 6, 9, generator=g), torch.rand(1, 3, 6, 9, generator=g)
    flow = DenseLKFlow()(a, b)  # window 2 px: radius 6 = the frame height
    assert flow.shape == (1, 2, 6, 9) and bool(torch.isfinite(flow).all())


# --- DUSt3R ---------------------------------------------------------------------------------

@pytest.fixture
def bare_estimator(dust3r_checkout):
    from geocon_torch.gate.dust3r import Dust3rPoseEstimator

    return Dust3rPoseEstimator(None, model=torch.nn.Identity(), image_size=64)


def test_dust3r_views_round_sides_to_multiples_of_16(bare_estimator):
    """Long side -> 64; 120 x 128 -> 60 -> rounded to 64 (not floored to 48); 48 x 64 keeps
    its (H, W) order in true_shape; uint8 0 / 255 -> -1 / 1."""
    v = bare_estimator._view(torch.full((3, 120, 128), 255, dtype=torch.uint8), 0)
    assert v["img"].shape == (1, 3, 64, 64) and v["true_shape"].tolist() == [[64, 64]]
    torch.testing.assert_close(v["img"], torch.ones(1, 3, 64, 64))
    v = bare_estimator._view(torch.zeros((3, 48, 64), dtype=torch.uint8), 1)
    assert v["img"].shape == (1, 3, 48, 64) and v["true_shape"].tolist() == [[48, 64]]
    assert v["idx"] == 1 and v["instance"] == "1"
    torch.testing.assert_close(v["img"], -torch.ones(1, 3, 48, 64))


def _stub_alignment(monkeypatch, cam_to_world):
    import dust3r.cloud_opt
    import dust3r.inference

    scene = SimpleNamespace(get_im_poses=lambda: torch.as_tensor(cam_to_world))
    monkeypatch.setattr(dust3r.inference, "inference", lambda *a, **k: {})
    monkeypatch.setattr(dust3r.cloud_opt, "global_aligner", lambda *a, **k: scene)


def test_dust3r_relative_pose_is_camera0_to_camera1(bare_estimator, monkeypatch):
    """inv(P_1) P_0 of the camera-to-world poses (rotated cameras: the other order has another
    translation and another t_inf); a non-finite pose is None."""
    p0, p1 = pose([0.1, 0.0, 0.0], 90.0), pose([0.3, 0.0, 0.0], 0.0)
    _stub_alignment(monkeypatch, np.stack([p0, p1]).astype(np.float32))
    frame = torch.zeros((3, 32, 32), dtype=torch.uint8)
    rel = bare_estimator.relative_pose(frame, frame)
    torch.testing.assert_close(rel, torch.from_numpy(np.linalg.inv(p1) @ p0), atol=1e-6, rtol=0)
    assert rel.dtype == torch.float64
    bad = np.stack([p0, p1])
    bad[1, 0, 3] = np.nan
    _stub_alignment(monkeypatch, bad)
    assert bare_estimator.relative_pose(frame, frame) is None


class _FixedPose:
    def __init__(self, rel):
        self.rel = rel

    def relative_pose(self, f0, f1):
        return self.rel


def _clip(t=5):
    return SimpleNamespace(frames=torch.zeros((t, 3, 8, 8), dtype=torch.uint8), num_frames=t)


def test_failed_dust3r_reconstruction_is_a_missing_pose():
    """relative_pose None: fail_to_F -> F, present_only -> no decision; t_inf None either way."""
    from geocon_torch.gate.dust3r import gate_from_dust3r

    for policy, want in (("fail_to_F", "F"), ("present_only", None)):
        cfg = GateConfig(missing_pose=policy, dust3r_checkpoint="x.pth")
        d = gate_from_dust3r(_clip(), adjacent(5), cfg, estimator=_FixedPose(None))
        assert d.decision == want and d.statistic is None and d.method == "dust3r"
        assert d.evidence["first_last_present"] is False


def test_dust3r_gate_is_one_per_clip_even_with_per_pair():
    """DUSt3R gives the first/last pose only: per_pair is switched off (no 'one pose for 4
    pairs' error), the clip decision follows the first/last t_inf."""
    from geocon_torch.gate.dust3r import gate_from_dust3r

    cfg = GateConfig(per_pair=True, dust3r_checkpoint="x.pth")
    rel = torch.from_numpy(pose([0.0, -0.2, 0.01]))
    d = gate_from_dust3r(_clip(), adjacent(5), cfg, estimator=_FixedPose(rel))
    assert d.decision == "F" and d.statistic == pytest.approx(0.2) and d.per_pair is None


def test_dust3r_estimator_is_rebuilt_for_another_image_size(dust3r_checkout, tmp_path,
                                                            monkeypatch):
    import geocon_torch.gate.dust3r as d3

    ckpt = tmp_path / "tiny.pth"
    ckpt.write_bytes(b"x")
    monkeypatch.setattr(d3, "load_dust3r_model", lambda p: torch.nn.Identity())
    _MODEL_CACHE.pop("dust3r", None)
    try:
        cfg = GateConfig(dust3r_checkpoint=str(ckpt), dust3r_path=str(dust3r_checkout),
                         dust3r_image_size=64)
        assert d3.dust3r_estimator(cfg).image_size == 64
        cfg32 = GateConfig(**{**cfg.__dict__, "dust3r_image_size": 32})
        assert d3.dust3r_estimator(cfg32).image_size == 32
    finally:
        _MODEL_CACHE.pop("dust3r", None)


def test_dust3r_missing_weights_message_counts_them(dust3r_checkout, tmp_path):
    from geocon_torch.gate.dust3r import Dust3rPoseEstimator
    from test_gate_dust3r import SPEC

    bad = tmp_path / "bad.pth"
    torch.save({"args": argparse.Namespace(model=SPEC), "model": {}}, bad)
    with pytest.raises(CheckpointError, match=r"lacks [1-9]\d* weights, e\.g\. \['"):
        Dust3rPoseEstimator(str(bad))


# --- pose logs ------------------------------------------------------------------------------

def test_reflections_and_bad_bottom_rows_are_not_rigid():
    flip = pose([0.1, 0.0, 0.0])
    flip[0, :3] *= -1  # orthonormal, determinant -1
    tilt = pose([0.1, 0.0, 0.0])
    tilt[3, 2] = 0.01
    for bad in (flip, tilt):
        with pytest.raises(InputError, match="pose 0 is not a rigid transform"):
            load_pose_log(bad)


def test_valid_flags_must_match_the_poses_one_to_one():
    poses = [pose([0.01 * k, 0, 0]).tolist() for k in range(3)]
    with pytest.raises(ShapeError, match="'valid' has 1 entries for 3 poses"):
        load_pose_log({"poses": poses, "valid": [False]})


def test_per_frame_poses_with_rotation_give_a_j_times_inverse_a_i():
    """world-to-camera A_0 (rotated 90 deg) and A_1: the relative pose is A_1 A_0^-1,
    translation (0.3, 0, -0.1), t_inf 0.3 (A_0^-1 A_1 would give (0, 0, 0.2))."""
    a0, a1 = pose([0.1, 0.0, 0.0], 90.0), pose([0.3, 0.0, 0.0])
    log = load_pose_log({"absolute_poses": [a0.tolist(), a1.tolist()]})
    rel, ok = log.for_pairs(torch.tensor([[0, 1]]))
    torch.testing.assert_close(rel[0], torch.from_numpy(a1 @ np.linalg.inv(a0)), atol=1e-12,
                               rtol=0)
    d = gate_from_poses({"absolute_poses": [a0.tolist(), a1.tolist()]}, adjacent(2), 2,
                        GateConfig())
    assert d.statistic == pytest.approx(0.3, abs=1e-12) and bool(ok[0])
