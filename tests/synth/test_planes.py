"""The held-out textured-planes renderer: exact plane homographies, z-order, corruptions."""
from __future__ import annotations

import pytest
import torch

from geocon_torch._tensor_utils import sample_at_pixels
from geocon_torch.errors import InputError
from geocon_torch.synth import apply_corruption
from geocon_torch.synth.planes import (
    PLANE_MOTIONS,
    build_planes,
    render_planes,
    render_planes_frames,
    spectral_texture,
)

SIZE = (96, 128)


def _warp_error(frames: torch.Tensor, h01: torch.Tensor, shift: float = 0.0) -> float:
    """Mean |frame0(x) - frame1(H x + shift)| (grey levels) over the interior pixels whose
    image under H stays inside frame 1."""
    f = frames.double()
    hh, ww = f.shape[-2:]
    ys, xs = torch.meshgrid(torch.arange(hh, dtype=torch.float64),
                            torch.arange(ww, dtype=torch.float64), indexing="ij")
    p = torch.stack([xs, ys, torch.ones_like(xs)], -1) @ h01.T
    q = p[..., :2] / p[..., 2:3] + shift
    ok = ((q[..., 0] > 2) & (q[..., 0] < ww - 3) & (q[..., 1] > 2) & (q[..., 1] < hh - 3)
          & (xs > 2) & (xs < ww - 3) & (ys > 2) & (ys < hh - 3))
    warped = sample_at_pixels(f[1:2], q.unsqueeze(0))[0]
    return float((warped - f[0]).abs().mean(0)[ok].mean())


def test_rotation_frames_follow_the_rotation_homography():
    clip = render_planes("pan", num_frames=3, size=SIZE, seed=3, speed=4.0)
    h01 = clip.true_homographies[0]
    assert clip.meta["expected_regime"] == "H" and clip.category == "C2"
    # the pan (4 x 0.45 deg) moves the principal point by f tan(1.8 deg) = 3.42 px
    c = h01 @ clip.intrinsics[:, 2]
    assert float((c[:2] / c[2] - clip.intrinsics[:2, 2]).norm()) == pytest.approx(3.42, abs=0.02)
    # grey-level error of the exact warp (bilinear resampling of fine texture: ~3 levels)
    # against the same warp off by a quarter / one pixel
    errs = [_warp_error(clip.frames[:2], h01, shift=s) for s in (0.0, 0.25, 1.0)]
    assert errs[0] < 3.5
    assert errs[1] > 1.5 * errs[0] and errs[2] > 4 * errs[0]


def test_translating_backdrop_follows_its_plane_homography():
    scene = build_planes("truck", num_frames=3, size=SIZE, seed=1, num_planes=0, speed=3.0)
    frames = (render_planes_frames(scene, supersample=2) * 255).round()
    h01 = scene.plane_homographies(0, 1)[0]
    # truck right: the backdrop slides left by f * speed / depth
    expected_dx = -float(scene.K[0, 0]) * 0.012 * (20.0 ** 0.5) * 3.0 / 10.0
    assert float(h01[0, 2]) == pytest.approx(expected_dx, rel=0.02)
    errs = [_warp_error(frames[:2], h01, shift=s) for s in (0.0, 0.25, 1.0)]
    assert errs[0] < 3.0
    assert errs[1] > 1.5 * errs[0] and errs[2] > 4 * errs[0]


def test_translating_planes_have_parallax():
    scene = build_planes("truck", num_frames=3, size=SIZE, seed=0, num_planes=3)
    hs = scene.plane_homographies(0, 2)
    # every plane at its own depth: the translations differ (parallax), the nearest most
    dx = hs[:, 0, 2]
    assert float(dx.abs().max() - dx.abs().min()) > 2.0


def test_near_plane_occludes_the_backdrop():
    scene = build_planes("pan", num_frames=1, size=SIZE, seed=2, num_planes=1)
    img = render_planes_frames(scene, supersample=1)[0]
    g = scene.plane_to_image()[0, 1]  # plane 1's centre (s, t) = (0.5, 0.5) in frame 0
    c = g @ torch.tensor([0.5, 0.5, 1.0], dtype=torch.float64)
    x, y = float(c[0] / c[2]), float(c[1] / c[2])
    tex = scene.textures[1]
    th, tw = tex.shape[-2:]
    want = sample_at_pixels(tex[None], torch.tensor([[[[(tw - 1) / 2, (th - 1) / 2]]]]))[0, :, 0, 0]
    got = sample_at_pixels(img[None], torch.tensor([[[[x, y]]]], dtype=torch.float32))[0, :, 0, 0]
    assert float((got - want).abs().max()) < 0.03


def test_corruptions_apply_and_rendering_is_deterministic():
    a = render_planes("arc", num_frames=4, size=SIZE, seed=5)
    b = render_planes("arc", num_frames=4, size=SIZE, seed=5)
    assert torch.equal(a.frames, b.frames) and a.true_homographies is None
    bad = render_planes("arc", num_frames=4, size=SIZE, seed=5, corruption="breathing",
                        severity=1.0)
    assert torch.equal(bad.frames, apply_corruption(a.frames, "breathing", 1.0, seed=5))
    assert float((bad.frames.float() - a.frames.float()).abs().mean()) > 1.0
    assert bad.clip_id == "planes_arc_seed5_breathing1.00"


def test_texture_and_argument_checks():
    tex = spectral_texture(64, 80, torch.Generator().manual_seed(0))
    assert tex.shape == (3, 64, 80) and 0.0 <= float(tex.min()) and float(tex.max()) <= 1.0
    assert float(tex.std()) > 0.08  # textured, not flat
    assert set(PLANE_MOTIONS.values()) == {"H", "F"}
    with pytest.raises(InputError, match="unknown plane motion"):
        build_planes("orbit")
    with pytest.raises(InputError, match="depth_range"):
        build_planes("pan", depth_range=(5.0, 2.0))
