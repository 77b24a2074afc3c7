"""Closed-form amplitudes of the corruptions, camera trajectories and plane layouts that no
other default test pins (mutation audit s22): each corruption's displacement field is read
back exactly from a linear-ramp clip (bilinear resampling of a linear function is exact), the
flicker's gain and boil from two flat clips, and the camera / plane helpers are checked against
their documented formulas."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch.synth import apply_corruption, render_scene
from geocon_torch.synth import camera as cam
from geocon_torch.synth.planes import build_planes, render_planes, render_planes_frames
from geocon_torch.synth.scenes import _capped, build_scene

F64 = torch.float64


def _grid(h: int, w: int):
    return torch.meshgrid(torch.arange(h, dtype=F64), torch.arange(w, dtype=F64), indexing="ij")


def _ramp(t: int, h: int, w: int) -> torch.Tensor:
    """(T, 3, H, W) float64: red = x / (W - 1), green = y / (H - 1), blue 0.5."""
    ys, xs = _grid(h, w)
    return torch.stack([xs / (w - 1), ys / (h - 1), torch.full_like(xs, 0.5)]).expand(
        t, 3, h, w).clone()


def _displacement(out: torch.Tensor) -> torch.Tensor:
    """(T, H, W, 2) backward displacement d with out(p) = ramp(p + d), read from the ramp."""
    _, _, h, w = out.shape
    ys, xs = _grid(h, w)
    return torch.stack([out[:, 0] * (w - 1) - xs, out[:, 1] * (h - 1) - ys], -1)


# ------------------------------------------------------------------ corruption amplitudes

def test_rubber_sheet_amplitude_is_bounded_by_its_four_half_sinusoids():
    """Per axis four sinusoids of amplitude 1/2 times 0.03 s severity: |d| <= 0.06 s sev, and
    the peak reaches most of that on every seed."""
    t, h, w, sev = 6, 48, 80, 0.5
    s = min(h, w)
    for seed in range(4):
        d = _displacement(apply_corruption(_ramp(t, h, w), "rubber_sheet", sev, seed=seed))
        peak = float(d[:, 8:-8, 8:-8].abs().amax()) / (s * sev)
        assert 0.045 < peak <= 0.06 + 1e-9, (seed, peak)


def test_rubber_sheet_is_low_frequency():
    """0.5-2 cycles per image per sinusoid: the RMS spatial frequency of the field (RMS of
    its finite differences over its RMS, in cycles per image) lies in that band along x and
    y (measured 1.2-1.6; sinusoids up to 3.5 cycles give 2-2.6 along x)."""
    t, h, w = 6, 64, 96
    for seed in range(6):
        d = _displacement(apply_corruption(_ramp(t, h, w), "rubber_sheet", 0.3, seed=seed))
        d = d[:, 4:-4, 4:-4]
        gx, gy = d[:, :, 1:] - d[:, :, :-1], d[:, 1:] - d[:, :-1]
        cx = float((gx.pow(2).mean() / d.pow(2).mean()).sqrt()) * w / (2 * math.pi)
        cy = float((gy.pow(2).mean() / d.pow(2).mean()).sqrt()) * h / (2 * math.pi)
        assert 0.5 < cx < 1.8 and 0.5 < cy < 1.8, (seed, cx, cy)


def test_background_slide_offset_is_0_06_w_sin_quarter_t():
    """One rectangle moves rigidly by 0.06 W sin(0.25 t) severity px (W, not H), the rest
    stays: the largest displacement of frame t is exactly that."""
    t, h, w, sev = 6, 48, 96, 0.5
    for seed in range(3):
        d = _displacement(apply_corruption(_ramp(t, h, w), "background_slide", sev, seed=seed))
        peak = d.norm(dim=-1).amax((1, 2))
        want = torch.tensor([0.06 * w * sev * abs(math.sin(0.25 * k)) for k in range(t)],
                            dtype=F64)
        torch.testing.assert_close(peak, want, atol=1e-9, rtol=0)
        moved = d.norm(dim=-1)[-1] > 1e-6
        share = float(moved.double().mean())  # a 0.3-0.45 W by 0.4-0.6 H rectangle
        assert 0.3 * 0.4 - 0.02 < share < 0.45 * 0.6 + 0.02


def test_breathing_is_a_centred_gaussian_falloff_with_period_16():
    """d = -eps_t (p - c) exp(-|p - c|^2 / R^2), c the image centre, R = min(H, W) / 2, and
    eps_t = 0.06 sev sin(2 pi t / 16 + phase): one eps per frame explains the whole field, and
    the 16 eps values are one sinusoid of period 16 and amplitude 0.06 sev."""
    t, h, w, sev = 16, 48, 80, 0.5
    ys, xs = _grid(h, w)
    rel = torch.stack([xs - (w - 1) / 2, ys - (h - 1) / 2], -1)
    basis = rel * torch.exp(-(rel * rel).sum(-1, keepdim=True) / (min(h, w) / 2) ** 2)
    d = _displacement(apply_corruption(_ramp(t, h, w), "breathing", sev, seed=0))
    inner, b = d[:, 3:-3, 3:-3], basis[3:-3, 3:-3]
    eps = -(inner * b).sum((1, 2, 3)) / (b * b).sum()
    assert float((inner + eps.view(-1, 1, 1, 1) * b).abs().max()) < 1e-6
    tt = torch.arange(t, dtype=F64)
    design = torch.stack([torch.sin(2 * math.pi * tt / 16), torch.cos(2 * math.pi * tt / 16)], 1)
    coef = torch.linalg.lstsq(design, eps[:, None]).solution[:, 0]
    assert float((design @ coef - eps).abs().max()) < 1e-6
    assert float(coef.norm()) == pytest.approx(0.06 * sev, rel=1e-6)


def test_nonrigid_ripple_amplitude_and_wavelength():
    """Inside a square object (side 24 px: size 24) the ripple is amp sin(2 pi a / lam + 0.8 t)
    along one fixed direction, amp = 0.06 size sev and lam = 0.7 size (the mask's feathering
    only touches 2 px at its edge)."""
    t, h, w, sev, side = 3, 64, 96, 1.0, 24
    masks = torch.zeros(t, 1, h, w, dtype=torch.bool)
    masks[:, 0, 20:20 + side, 36:36 + side] = True
    out = apply_corruption(_ramp(t, h, w), "nonrigid_object", sev, masks=masks, seed=0)
    d = _displacement(out)[:, 23:20 + side - 3, 39:36 + side - 3]  # 3 px inside the edge
    amp = 0.06 * side * sev
    flat = d.reshape(-1, 2)
    u = flat[flat.norm(dim=1).argmax()]
    u = u / u.norm()  # the ripple's (perpendicular) displacement direction
    assert float((flat[:, 0] * u[1] - flat[:, 1] * u[0]).abs().max()) < 1e-6  # all along u
    ys, xs = _grid(h, w)
    cen = (36 + (side - 1) / 2, 20 + (side - 1) / 2)
    along = (-(xs - cen[0]) * u[1] + (ys - cen[1]) * u[0])[23:20 + side - 3, 39:36 + side - 3]
    lam = 0.7 * side
    for k in range(t):
        sig = (d[k] * u).sum(-1).flatten() / amp
        a = along.flatten()
        design = torch.stack([torch.sin(2 * math.pi * a / lam), torch.cos(2 * math.pi * a / lam)],
                             1)
        coef = torch.linalg.lstsq(design, sig[:, None]).solution[:, 0]
        assert float((design @ coef - sig).abs().max()) < 1e-6, k
        assert float(coef.norm()) == pytest.approx(1.0, rel=1e-6), k


def test_flicker_gain_and_boil_amplitudes():
    """Two flat clips (0.25 and 0.5) with one seed share the gain and boil fields: the gain is
    (out_b - out_a) / 0.25, the boil out_a - 0.25 gain. |gain - 1| reaches ~0.25 sev (the
    bicubic noise overshoots [-1, 1] by up to ~1.5x), |boil| ~0.08 sev; both equal in every
    channel."""
    t, h, w, sev = 6, 48, 80, 0.5
    a = torch.full((t, 3, h, w), 0.25, dtype=F64)
    for seed in range(3):
        oa = apply_corruption(a, "flicker", sev, seed=seed)
        ob = apply_corruption(2 * a, "flicker", sev, seed=seed)
        gain = (ob - oa) / 0.25
        boil = oa - 0.25 * gain
        g = float((gain - 1).abs().max()) / sev
        bo = float(boil.abs().max()) / sev
        assert 0.2 < g < 0.4 and 0.06 < bo < 0.14, (seed, g, bo)
        assert torch.equal(gain[:, 0], gain[:, 2]) and torch.equal(boil[:, 0], boil[:, 1])


# ------------------------------------------------------------------ cameras

def test_intrinsics_principal_point_and_normalised_rotation_homography():
    K = cam.intrinsics((96, 160))
    assert K[1, 2] == 47.5 and K[0, 2] == 79.5 and K[1, 1] == K[0, 0]
    rel = cam.make_pose(cam.rotation((1.0, 0.3, 0.0), torch.tensor(0.2, dtype=F64)),
                        torch.zeros(3, dtype=F64))
    assert float(cam.rotation_homography(K, rel)[2, 2]) == 1.0
    clip = render_scene("C2", motion="tilt", num_frames=3, size=(32, 48))
    assert torch.equal(clip.true_homographies[:, 2, 2], torch.ones(2, dtype=F64))


def _tilted_base():
    return cam.look_at((1.0, -0.5, 0.3), (0.0, 0.8, 6.0))


def test_translate_trajectory_moves_along_the_camera_axes():
    """Frame 0 -> 1 of a tilted base: no rotation, and the camera-frame translation is
    -speed * direction_cam (a dolly moves along the optical axis, not the world z)."""
    base = _tilted_base()
    for direction in ((0.0, 0.0, 1.0), (1.0, 0.0, 0.0), (0.3, -0.2, 1.0)):
        poses = cam.translate_trajectory(base, 3, direction, 0.25)
        rel = cam.relative_pose(poses[0], poses[1])
        d = torch.tensor(direction, dtype=F64)
        torch.testing.assert_close(rel[:3, :3], torch.eye(3, dtype=F64), atol=1e-12, rtol=0)
        torch.testing.assert_close(rel[:3, 3], -0.25 * d / d.norm(), atol=1e-12, rtol=0)


def test_rotate_trajectory_turns_about_the_camera_axis():
    """The relative rotation of adjacent frames is ``rotation(axis, rate)`` with the axis in the
    camera frame (a pan of a tilted camera turns about its own y), centre fixed."""
    base = _tilted_base()
    for axis in ((0.0, 1.0, 0.0), (1.0, 0.0, 0.0), (0.0, 0.0, 1.0)):
        poses = cam.rotate_trajectory(base, 3, axis, 2.0)
        rel = cam.relative_pose(poses[1], poses[2])
        want = cam.rotation(axis, torch.tensor(math.radians(2.0), dtype=F64))
        torch.testing.assert_close(rel[:3, :3], want, atol=1e-12, rtol=0)
        c = cam.camera_centers(poses)
        torch.testing.assert_close(c, c[:1].expand_as(c), atol=1e-12, rtol=0)


def test_orbit_starts_at_minus_z_and_rises_with_height_rate():
    """Azimuth 0: the camera sits at -z of the target; its height is target_y + height +
    t * height_rate; it always looks at the target from ``radius``."""
    poses = cam.orbit_trajectory((1.0, 0.5, 4.0), 3.0, 4, 0.0, 10.0, height=-0.4,
                                 height_rate=-0.1)
    c = cam.camera_centers(poses)
    torch.testing.assert_close(c[0], torch.tensor([1.0, 0.1, 1.0], dtype=F64), atol=1e-12,
                               rtol=0)
    torch.testing.assert_close(c[:, 1], 0.1 - 0.1 * torch.arange(4, dtype=F64), atol=1e-12,
                               rtol=0)
    az = torch.deg2rad(torch.tensor(30.0, dtype=F64))
    assert float(c[3, 0]) == pytest.approx(1.0 + 3.0 * float(az.sin()), abs=1e-12)
    assert float(c[3, 2]) == pytest.approx(4.0 - 3.0 * float(az.cos()), abs=1e-12)


def test_triangle_wave_period_is_four_amplitudes():
    t = torch.tensor([0.0, 1.0, 2.0, 3.0, 4.0, 5.0], dtype=F64)
    got = cam.triangle_wave(t, 1.5, 1.5)  # one amplitude per step
    torch.testing.assert_close(got, torch.tensor([-1.5, 0.0, 1.5, 0.0, -1.5, 0.0], dtype=F64),
                               atol=1e-12, rtol=0)


def test_capped_rate_spreads_the_total_over_t_minus_one_steps():
    assert _capped(1.0, 61, 30.0) == 0.5
    assert _capped(-2.0, 11, 5.0) == -0.5
    assert _capped(0.4, 10, 30.0) == 0.4 and _capped(7.0, 1, 1.0) == 7.0


def test_grounded_scenes_default_focal_is_0_9_w():
    scene = build_scene("C1", num_frames=1, size=(32, 48))
    assert float(scene.K[0, 0]) == pytest.approx(0.9 * 48)
    assert float(build_scene("C1", num_frames=1, size=(32, 48), focal_scale=0.5).K[0, 0]) == 24


# ------------------------------------------------------------------ planes

def test_plane_depths_are_log_strata_of_near_to_0_8_far():
    """Rectangle k of n sits at depth near * (0.8 far / near) ** u, u in [(k + 0.2) / n,
    (k + 0.8) / n]; the backdrop at far."""
    near, far = 2.0, 10.0
    for seed in range(3):
        for n in (1, 3, 6):
            sc = build_planes("pan", num_frames=1, size=(32, 48), seed=seed, num_planes=n,
                              depth_range=(near, far))
            centres = sc.origins + 0.5 * (sc.axis_u * sc.extent[:, :1]
                                          + sc.axis_v * sc.extent[:, 1:])
            assert float(centres[0, 2]) == pytest.approx(far)
            u = torch.log(centres[1:, 2] / near) / math.log(0.8 * far / near)
            k = torch.arange(n, dtype=F64)
            assert bool(((u >= (k + 0.2) / n - 1e-9) & (u <= (k + 0.8) / n + 1e-9)).all()), \
                (seed, n, u)


def test_plane_turns_reach_but_never_exceed_25_degrees():
    worst = 0.0
    for seed in range(4):
        sc = build_planes("pan", num_frames=1, size=(32, 48), seed=seed, num_planes=6)
        u, v = sc.axis_u[1:], sc.axis_v[1:]
        about_y = torch.rad2deg(torch.atan2(-u[:, 2], u[:, 0])).abs()
        about_x = torch.rad2deg(torch.acos(v[:, 1].clamp(-1, 1))).abs()
        assert float(about_y.max()) <= 25 + 1e-9 and float(about_x.max()) <= 25 + 1e-9
        worst = max(worst, float(about_y.max()), float(about_x.max()))
    assert worst > 20.0


@pytest.mark.parametrize("motion,rate_deg", [("roll", 0.8), ("arc", 0.7), ("pan", 0.45)])
def test_plane_rotation_rates(motion, rate_deg):
    sc = build_planes(motion, num_frames=4, size=(32, 48), speed=2.0)
    rel = cam.relative_pose(sc.poses[1], sc.poses[2])[:3, :3]
    angle = math.degrees(math.acos(max(-1.0, min(1.0, (float(torch.trace(rel)) - 1) / 2))))
    assert angle == pytest.approx(2.0 * rate_deg, rel=1e-6)


def test_plane_dolly_and_arc_camera_paths():
    near, far = 2.0, 10.0
    mid = math.sqrt(near * far)
    sc = build_planes("dolly", num_frames=3, size=(32, 48), speed=1.5)
    c = cam.camera_centers(sc.poses)
    d = torch.tensor([0.05, 0.0, 1.0], dtype=F64)
    torch.testing.assert_close(c[1] - c[0], 0.012 * mid * 1.5 * d / d.norm(), atol=1e-12,
                               rtol=0)
    arc = build_planes("arc", num_frames=5, size=(32, 48))
    c = cam.camera_centers(arc.poses)
    dist = (c - torch.tensor([0.0, 0.0, mid], dtype=F64)).norm(dim=1)
    torch.testing.assert_close(dist, torch.full_like(dist, mid), atol=1e-9, rtol=0)
    start = math.radians(-0.5 * 0.7 * 5)  # azimuth of frame 0
    assert float(c[0, 0]) == pytest.approx(mid * math.sin(start), abs=1e-9)


def test_supersampled_planes_keep_pixel_centres_exact():
    """A backdrop textured with a horizontal ramp (texel value = s): the box-filtered 2x
    render equals s(x) at each pixel centre, x = (s, t) through the plane's own G^-1 (a
    half-pixel offset of the high-resolution grid would shift it by 0.25 px)."""
    sc = build_planes("pan", num_frames=1, size=(24, 32), num_planes=0)
    tw = 64
    ramp = torch.linspace(0.0, 1.0, tw).view(1, 1, tw).expand(3, 8, tw).contiguous()
    sc.textures = [ramp]
    img = render_planes_frames(sc, supersample=2)[0, 0].double()
    g_inv = torch.linalg.inv(sc.plane_to_image()[0, 0])
    ys, xs = _grid(24, 32)
    p = torch.stack([xs, ys, torch.ones_like(xs)], -1) @ g_inv.T
    s = p[..., 0] / p[..., 2]
    err = (img - s).abs().max()
    slope = float((s[:, 1:] - s[:, :-1]).abs().mean())  # ramp change per pixel
    assert float(err) < 0.05 * slope


def test_render_planes_meta_and_regime():
    clip = render_planes("dolly", num_frames=2, size=(24, 32), seed=1)
    assert clip.category == "C3" and clip.true_homographies is None
    assert clip.meta["expected_regime"] == "F" and clip.clip_id == "planes_dolly_seed1"
