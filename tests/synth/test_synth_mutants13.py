"""Closed-form checks of the synthetic renderers that no other default test pins (mutation
audit s26, area m13b): ray-plane depth and texture coordinates of the ray caster, the mip level
of its shading, sub-pixel ray grids, the held-out planes renderer's z-test / layout / seeds /
ground truth, trajectories that start at their base pose, the severity-0 identity and
rounding of the corruptions, and the texture atlas layout."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch.errors import InputError
from geocon_torch.synth import apply_corruption
from geocon_torch.synth import camera as cam
from geocon_torch.synth.planes import (
    PlaneScene,
    build_planes,
    render_planes,
    render_planes_frames,
    spectral_texture,
)
from geocon_torch.synth.raycast import Hits, Rects, intersect, pixel_rays, render, shade
from geocon_torch.synth.textures import TextureAtlas, make_texture, pack_atlas

F64 = torch.float64
EYE = cam.make_pose(torch.eye(3, dtype=F64), torch.zeros(3, dtype=F64))


def _grid(h: int, w: int):
    return torch.meshgrid(torch.arange(h, dtype=F64), torch.arange(w, dtype=F64), indexing="ij")


def _one_rect(origin, u, v, t: int = 1, object_id: int = 0) -> Rects:
    """One two-sided rectangle, static over t frames."""
    def rep(x):
        return torch.tensor(x, dtype=F64).view(1, 1, 3).expand(t, 1, 3).clone()

    return Rects(rep(origin), rep(u), rep(v), torch.tensor([object_id]), torch.tensor([0]))


def _level_atlas(num_levels: int = 4, side: int = 64) -> TextureAtlas:
    """A mip pyramid whose level l is the constant l / (num_levels - 1): shading it returns the
    (trilinear) mip level itself, scaled to [0, 1]."""
    levels = [torch.full((1, 3, side >> li, side >> li), li / (num_levels - 1))
              for li in range(num_levels)]
    return TextureAtlas(levels, torch.tensor([[8.0, 8.0, 32.0, 32.0]], dtype=F64))


# ------------------------------------------------------------------ ray caster

def test_ray_plane_depth_texture_coordinates_and_cosine_are_closed_form():
    """A rectangle in the plane z = 5 (|u| = 4, |v| = 3) seen from the identity pose: every
    pixel-centre ray K^-1 x hits it at camera depth 5, at texture coordinates
    a = (X - o).u / |u|^2, b = (X - o).v / |v|^2, with |cos| = 1 / |K^-1 x|."""
    h, w = 24, 32
    K = cam.intrinsics((h, w))
    rects = _one_rect((-2.0, -1.5, 5.0), (4.0, 0.0, 0.0), (0.0, 3.0, 0.0))
    rays = pixel_rays(K, (h, w), dtype=F64)
    hits = intersect(rays, EYE[None], rects)
    ys, xs = _grid(h, w)
    d = torch.stack([xs, ys, torch.ones_like(xs)], -1) @ torch.linalg.inv(K).T
    X = 5.0 * d
    want_a = (X[..., 0] + 2.0) / 4.0
    want_b = (X[..., 1] + 1.5) / 3.0
    inside = (want_a > 1e-6) & (want_a < 1 - 1e-6) & (want_b > 1e-6) & (want_b < 1 - 1e-6)
    assert int(inside.sum()) > 200 and not bool(inside.all())
    dep, a, b, c = hits.depth[0], hits.a[0], hits.b[0], hits.cos[0]
    torch.testing.assert_close(dep[inside], torch.full_like(dep[inside], 5.0), atol=1e-9, rtol=0)
    torch.testing.assert_close(a[inside], want_a[inside], atol=1e-9, rtol=0)
    torch.testing.assert_close(b[inside], want_b[inside], atol=1e-9, rtol=0)
    torch.testing.assert_close(c[inside], 1.0 / d.norm(dim=-1)[inside], atol=1e-9, rtol=0)
    assert bool((hits.rect[0][inside] == 0).all())
    outside = (want_a < -1e-6) | (want_a > 1 + 1e-6) | (want_b < -1e-6) | (want_b > 1 + 1e-6)
    assert bool(torch.isinf(dep[outside]).all()) and bool((hits.rect[0][outside] == -1).all())


def test_tilted_plane_depth_follows_the_ray_plane_formula():
    """A rectangle through P0 = (0, 0, 6) with unit normal n = (0, 0.6, 0.8), seen from a
    camera translated by (0.3, -0.2, 0.5): the hit's camera depth is ((P0 - C).n) / (R^T d).n
    for d = K^-1 x (z = 1), C the camera centre."""
    h, w = 24, 32
    K = cam.intrinsics((h, w))
    u = torch.tensor([20.0, 0.0, 0.0], dtype=F64)
    v = torch.tensor([0.0, 0.8, -0.6], dtype=F64) * 12.0
    p0 = torch.tensor([0.0, 0.0, 6.0], dtype=F64)
    origin = p0 - 0.5 * (u + v)
    rects = _one_rect(origin.tolist(), u.tolist(), v.tolist())
    pose = cam.make_pose(cam.rotation((0.0, 1.0, 0.0), torch.tensor(0.1, dtype=F64)),
                         torch.tensor([0.3, -0.2, 0.5], dtype=F64))
    hits = intersect(pixel_rays(K, (h, w), dtype=F64), pose[None], rects)
    ys, xs = _grid(h, w)
    d = torch.stack([xs, ys, torch.ones_like(xs)], -1) @ torch.linalg.inv(K).T
    n = torch.tensor([0.0, 0.6, 0.8], dtype=F64)
    C = cam.camera_centers(pose[None])[0]
    want = float((p0 - C) @ n) / ((d @ pose[:3, :3]) @ n)
    assert bool(torch.isfinite(hits.depth).all())
    torch.testing.assert_close(hits.depth[0], want, atol=1e-9, rtol=0)


def test_supersampled_rays_average_to_the_pixel_centre_ray():
    """Rays are linear in pixel coordinates, so the s x s sub-samples of a pixel (offsets
    (i + 0.5) / s - 0.5) average exactly to its centre ray, for s = 2 and 3."""
    K = cam.intrinsics((6, 8))
    centre = pixel_rays(K, (6, 8), 1, dtype=F64)
    for s in (2, 3):
        fine = pixel_rays(K, (6, 8), s, dtype=F64)
        assert fine.shape == (6 * s, 8 * s, 3)
        mean = fine.view(6, s, 8, s, 3).mean((1, 3))
        torch.testing.assert_close(mean, centre, atol=1e-12, rtol=0)


def test_shade_mip_level_is_log2_of_texel_footprint():
    """level = log2(density * depth / (focal * sqrt(cos))), clamped to [0, L - 1], blended
    linearly between the two nearest levels: shading a pyramid whose level l is l / 3 returns
    level / 3."""
    atlas = _level_atlas()
    rects = _one_rect((0.0, 0.0, 1.0), (1.0, 0.0, 0.0), (0.0, 1.0, 0.0))
    depth = torch.tensor([20.0, 15.0, 40.0, 10.0, 5.0, 1e4], dtype=F64)
    cos = torch.tensor([1.0, 1.0, 0.25, 0.25, 1.0, 1.0], dtype=F64)
    n = depth.numel()
    hits = Hits(depth.view(1, 1, n), torch.zeros(1, 1, n, dtype=torch.long),
                torch.full((1, 1, n), 0.5, dtype=F64), torch.full((1, 1, n), 0.5, dtype=F64),
                cos.view(1, 1, n))
    out = shade(hits, rects, atlas, torch.tensor([1.0], dtype=F64), 10.0)
    assert out.shape == (1, 3, 1, n)
    level = torch.log2(depth / (10.0 * cos.sqrt())).clamp(0, 3)
    torch.testing.assert_close(out[0, 0, 0].double(), level / 3, atol=1e-6, rtol=0)
    assert torch.equal(out[0, 0], out[0, 2])


def test_render_supersampling_shades_at_the_finer_focal():
    """A fronto-parallel rectangle at depth z filling the view: at supersample 1 the centre
    pixels shade at level log2(z / f); at supersample 2 the sub-pixel grid has focal 2 f, one
    level finer. Pixels that see no rectangle take MISS_COLOR 0.5; rectangle 0 is a hit."""
    h, w = 16, 24
    K = cam.intrinsics((h, w))  # f = 21.6
    f = float(K[0, 0])
    z = 4.0 * f  # level 2 on the optical axis
    rects = _one_rect((-z, -z, z), (2 * z, 0.0, 0.0), (0.0, 2 * z, 0.0))
    atlas = _level_atlas()
    dens = torch.tensor([1.0], dtype=F64)
    centre = (slice(h // 2 - 1, h // 2 + 1), slice(w // 2 - 1, w // 2 + 1))
    for s, want in ((1, 2.0), (2, 1.0)):
        rgb, obj, depth = render(K, EYE[None], (h, w), rects, atlas, dens, supersample=s)
        got = rgb[0, 0][centre].double()
        assert float((got - want / 3).abs().max()) < 0.01, (s, got)
        torch.testing.assert_close(depth[0], torch.full((h, w), z, dtype=torch.float32))
    # half the view covered: the rest is the miss colour, the rectangle (index 0) is not
    half = _one_rect((0.0, -z, z), (2 * z, 0.0, 0.0), (0.0, 2 * z, 0.0))
    rgb, obj, depth = render(K, EYE[None], (h, w), half, atlas, dens)
    hit = torch.isfinite(depth[0])
    assert 0 < int(hit.sum()) < h * w
    assert bool((rgb[0, :, ~hit] == 0.5).all())
    assert float((rgb[0, 0, hit] - 2.0 / 3).abs().max()) < 0.05
    assert bool((obj == 0).all())
    with pytest.raises(InputError, match="supersample"):
        render(K, EYE[None], (h, w), rects, atlas, dens, supersample=0)


# ------------------------------------------------------------------ camera paths

def test_trajectories_start_at_their_base_pose():
    """Frame 0 of a rotation or translation trajectory is the base pose itself (the first
    frame is not already moved by one step); the planes' clips start at the identity."""
    base = cam.look_at((1.0, -0.5, 0.3), (0.0, 0.8, 6.0))
    torch.testing.assert_close(cam.rotate_trajectory(base, 3, (0.0, 1.0, 0.0), 2.0)[0], base,
                               atol=1e-12, rtol=0)
    torch.testing.assert_close(cam.translate_trajectory(base, 3, (1.0, 0.0, 0.0), 0.3)[0], base,
                               atol=1e-12, rtol=0)
    for motion in ("pan", "roll", "truck", "dolly"):
        sc = build_planes(motion, num_frames=3, size=(16, 24), num_planes=0)
        torch.testing.assert_close(sc.poses[0], EYE, atol=1e-12, rtol=0)


def test_triangle_wave_of_zero_amplitude_stays_at_zero():
    t = torch.arange(5, dtype=F64)
    assert torch.equal(cam.triangle_wave(t, 0.0, 1.0), torch.zeros(5, dtype=F64))


def test_fundamental_keeps_small_but_real_translations():
    """Only |t| <= 1e-9 (pose-inversion round-off) counts as a still camera: a 1e-6 move still
    gives a unit-norm F satisfying x_j^T F x_i = 0 on projected points."""
    K = cam.intrinsics((48, 64))
    rel = cam.make_pose(cam.rotation((0.0, 1.0, 0.0), torch.tensor(0.01, dtype=F64)),
                        torch.tensor([1e-6, 0.0, 0.0], dtype=F64))
    F = cam.fundamental_from_pose(K, rel)
    assert float(F.norm()) == pytest.approx(1.0)
    pts = torch.tensor([[0.3, -0.2, 4.0], [-1.0, 0.5, 7.0], [0.8, 0.9, 3.0]], dtype=F64)
    pix, _ = cam.project(K, torch.stack([EYE, rel]), pts)
    x = torch.cat([pix, torch.ones_like(pix[..., :1])], -1)
    res = ((x[1] @ F) * x[0]).sum(-1)
    assert float(res.abs().max()) < 1e-9
    still = cam.make_pose(torch.eye(3, dtype=F64), torch.tensor([1e-12, 0.0, 0.0], dtype=F64))
    assert bool((cam.fundamental_from_pose(K, still) == 0).all())


def test_project_returns_pinhole_pixels_and_camera_depth():
    K = cam.intrinsics((48, 64))
    pose = cam.make_pose(torch.eye(3, dtype=F64), torch.tensor([0.5, 0.0, 2.0], dtype=F64))
    pix, z = cam.project(K, pose[None], torch.tensor([[1.0, 2.0, 8.0]], dtype=F64))
    f = float(K[0, 0])
    torch.testing.assert_close(z, torch.tensor([[10.0]], dtype=F64))
    torch.testing.assert_close(pix[0, 0], torch.tensor([31.5 + f * 0.15, 23.5 + f * 0.2],
                                                       dtype=F64))


# ------------------------------------------------------------------ planes renderer

def _flat(value: float) -> torch.Tensor:
    return torch.full((3, 8, 8), value)


def _fronto_scene(depths, values, size=(16, 24)) -> PlaneScene:
    """Fronto-parallel planes at ``depths`` (listed in that order), each 4x the view wide, in
    flat colours ``values``, seen from the identity pose."""
    h, w = size
    K = cam.intrinsics(size, 0.85)
    half = 0.5 * w / float(K[0, 0])
    k = len(depths)
    d = torch.tensor(depths, dtype=F64)
    ext = (8 * half * d.abs()).view(k, 1).expand(k, 2).clone()
    origins = torch.stack([-0.5 * ext[:, 0], -0.5 * ext[:, 1], d], -1)
    u = torch.tensor([[1.0, 0.0, 0.0]], dtype=F64).expand(k, 3).clone()
    v = torch.tensor([[0.0, 1.0, 0.0]], dtype=F64).expand(k, 3).clone()
    return PlaneScene(origins, u, v, ext, [_flat(x) for x in values], K, EYE[None].clone(),
                      (h, w), "pan")


def test_planes_nearest_plane_wins_in_any_list_order():
    for depths, values in (((3.0, 6.0), (0.2, 0.8)), ((6.0, 3.0), (0.8, 0.2))):
        img = render_planes_frames(_fronto_scene(depths, values), supersample=1)
        torch.testing.assert_close(img, torch.full_like(img, 0.2))


def test_planes_behind_the_camera_are_not_drawn():
    for depths, values in (((-3.0, 6.0), (0.2, 0.8)), ((6.0, -3.0), (0.8, 0.2))):
        img = render_planes_frames(_fronto_scene(depths, values), supersample=1)
        torch.testing.assert_close(img, torch.full_like(img, 0.8))


def test_planes_backdrop_covers_every_frame_of_every_motion():
    """The backdrop is big enough that no pixel of any frame misses every plane (a miss is
    black; every texture is >= 0.12)."""
    for motion in ("pan", "roll", "truck", "arc", "dolly"):
        sc = build_planes(motion, num_frames=24, size=(24, 32), num_planes=0)
        img = render_planes_frames(sc, supersample=1)
        assert float(img.amax(1).min()) > 0.05, motion


def test_planes_seed_changes_layout_and_frames():
    a = build_planes("truck", num_frames=1, size=(24, 32), seed=0)
    b = build_planes("truck", num_frames=1, size=(24, 32), seed=1)
    assert not torch.allclose(a.origins[1:], b.origins[1:])
    fa = render_planes("truck", num_frames=2, size=(24, 32), seed=0).frames
    fb = render_planes("truck", num_frames=2, size=(24, 32), seed=1).frames
    assert float((fa.float() - fb.float()).abs().mean()) > 5


def test_planes_sizes_and_positions_within_the_view():
    """Rectangle sides are 30-55 % of the view width at their depth, aspect 0.6-1; centres
    within +-60 % of the half-view along x and y (and reaching past 45 % along x)."""
    reach = 0.0
    for seed in range(4):
        sc = build_planes("pan", num_frames=1, size=(32, 48), seed=seed, num_planes=6)
        f = float(sc.K[0, 0])
        hx, hy = 0.5 * 48 / f, 0.5 * 32 / f
        c = sc.origins[1:] + 0.5 * (sc.axis_u[1:] * sc.extent[1:, :1]
                                    + sc.axis_v[1:] * sc.extent[1:, 1:])
        side = sc.extent[1:, 0] / (2 * hx * c[:, 2])
        aspect = sc.extent[1:, 1] / sc.extent[1:, 0]
        assert bool(((side >= 0.3) & (side <= 0.55)).all()), (seed, side)
        assert bool(((aspect >= 0.6) & (aspect <= 1.0)).all()), (seed, aspect)
        px, py = c[:, 0] / (hx * c[:, 2]), c[:, 1] / (hy * c[:, 2])
        assert float(px.abs().max()) <= 0.6 and float(py.abs().max()) <= 0.6
        reach = max(reach, float(px.abs().max()))
    assert reach > 0.45


def test_planes_texture_resolution_follows_extent_and_density():
    """Each texture is (3, th, tw) with tw / th the plane's extent ratio, and halving
    texel_density halves its texel counts (away from the 16..2048 clamp)."""
    one = build_planes("pan", num_frames=1, size=(96, 128), seed=0, num_planes=3)
    half = build_planes("pan", num_frames=1, size=(96, 128), seed=0, num_planes=3,
                        texel_density=0.5)
    for k, (a, b) in enumerate(zip(one.textures, half.textures)):
        th, tw = a.shape[-2:]
        ratio = float(one.extent[k, 0] / one.extent[k, 1])
        assert tw / th == pytest.approx(ratio, rel=0.1), k
        if min(th, tw) >= 40:
            assert b.shape[-1] == pytest.approx(tw / 2, abs=1), k
            assert b.shape[-2] == pytest.approx(th / 2, abs=1), k


def test_two_frame_rotation_clip_has_its_homography():
    """A 2-frame pan clip records its one homography K R K^-1: the principal point moves by
    f tan(0.45 deg * speed)."""
    clip = render_planes("pan", num_frames=2, size=(24, 32), speed=2.0)
    assert clip.frames.shape == (2, 3, 24, 32) and clip.poses.shape == (2, 4, 4)
    assert clip.true_homographies is not None and clip.true_homographies.shape == (1, 3, 3)
    K = clip.intrinsics
    c = clip.true_homographies[0] @ K[:, 2]
    shift = float((c[:2] / c[2] - K[:2, 2]).norm())
    assert shift == pytest.approx(float(K[0, 0]) * math.tan(math.radians(0.9)), rel=1e-9)


def test_planes_fundamentals_hold_on_plane_points():
    """Arc clips (rotation and translation): every plane point, projected through the exact
    plane-to-image maps of frames t and t+1, satisfies x_{t+1}^T F_t x_t = 0."""
    clip = render_planes("arc", num_frames=3, size=(24, 32), seed=2, speed=3.0)
    sc = build_planes("arc", num_frames=3, size=(24, 32), seed=2, speed=3.0)
    g = sc.plane_to_image()  # (T, K, 3, 3)
    st = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 1.0], [0.3, 0.7, 1.0], [1.0, 1.0, 1.0]],
                      dtype=F64)
    x = torch.einsum("tkij,nj->tkni", g, st)
    x = x / x[..., 2:]
    Fs = clip.true_fundamentals
    assert Fs.shape == (2, 3, 3)
    for t in range(2):
        res = ((x[t + 1] @ Fs[t]) * x[t]).sum(-1)
        assert float(res.abs().max()) < 1e-9, t
        assert float(((x[t] @ Fs[t]) * x[t + 1]).sum(-1).abs().max()) > 1e-4  # not F^T


def test_render_planes_honours_supersample():
    sc = build_planes("pan", num_frames=1, size=(24, 32), seed=3)
    for ss in (1, 3):
        want = (render_planes_frames(sc, ss) * 255).round().to(torch.uint8)
        got = render_planes("pan", num_frames=1, size=(24, 32), seed=3, supersample=ss)
        assert torch.equal(got.frames, want), ss


def test_spectral_texture_is_spatially_correlated():
    """1/f^2 noise: neighbouring texels of the luminance correlate strongly (measured 0.68-0.72;
    white noise would give ~0, a rising spectrum a negative value)."""
    for seed in range(3):
        lum = spectral_texture(64, 80, torch.Generator().manual_seed(seed)).mean(0).double()
        lum = lum - lum.mean()
        var = float((lum * lum).mean())
        assert float((lum[:, 1:] * lum[:, :-1]).mean()) / var > 0.5
        assert float((lum[1:] * lum[:-1]).mean()) / var > 0.5


# ------------------------------------------------------------------ corruptions

@pytest.mark.parametrize("kind", ["rubber_sheet", "background_slide", "breathing", "flicker"])
def test_severity_zero_is_bit_identical_for_float_frames(kind):
    g = torch.Generator().manual_seed(0)
    for dt in (torch.float32, torch.float64):
        frames = torch.rand((3, 3, 20, 28), generator=g, dtype=dt)
        out = apply_corruption(frames, kind, 0.0, seed=4)
        assert torch.equal(out, frames) and out.data_ptr() != frames.data_ptr()


@pytest.mark.parametrize("kind", ["rubber_sheet", "background_slide", "breathing"])
def test_tiny_severity_leaves_uint8_frames_unchanged(kind):
    """Continuity at 0: a 1e-7 severity moves nothing by a grey level (rounded, not
    truncated, back to uint8)."""
    g = torch.Generator().manual_seed(1)
    frames = torch.randint(0, 256, (3, 3, 20, 28), generator=g, dtype=torch.uint8)
    assert torch.equal(apply_corruption(frames, kind, 1e-7), frames)


def test_flicker_saturates_instead_of_wrapping():
    """A bright flat clip under full flicker: gains above 1 saturate at 255 (uint8) / 1.0
    (float); nothing wraps round to dark values."""
    frames = torch.full((4, 3, 32, 48), 250, dtype=torch.uint8)
    out = apply_corruption(frames, "flicker", 1.0, seed=2)
    assert int(out.max()) == 255 and int(out.min()) > 120
    fl = apply_corruption(frames.float() / 255, "flicker", 1.0, seed=2)
    assert float(fl.max()) == 1.0 and float(fl.min()) >= 0.0


@pytest.mark.parametrize("kind", ["rubber_sheet", "background_slide", "breathing"])
def test_geometric_corruptions_resample_the_masks_with_the_frames(kind):
    """The returned masks are warped by the same field as the pixels: they agree with the
    corrupted mask-as-image, and they move."""
    t, h, w = 6, 64, 96
    masks = torch.zeros(t, 1, h, w, dtype=torch.bool)
    masks[:, 0, 12:52, 20:76] = True
    img = masks[:, :1].expand(-1, 3, -1, -1).double()
    out, new = apply_corruption(img, kind, 1.0, seed=3, masks=masks, return_masks=True)
    warped = out[:, 0] > 0.5
    inter, union = float((warped & new[:, 0]).sum()), float((warped | new[:, 0]).sum())
    assert inter / union > 0.97
    assert not torch.equal(new, masks)


def test_returned_masks_are_never_the_callers_tensor():
    masks = torch.zeros(2, 1, 16, 16, dtype=torch.bool)
    masks[:, 0, 4:12, 4:12] = True
    frames = torch.full((2, 3, 16, 16), 100, dtype=torch.uint8)
    _, new = apply_corruption(frames, "flicker", 0.5, masks=masks, return_masks=True)
    assert torch.equal(new, masks) and new.data_ptr() != masks.data_ptr()


# ------------------------------------------------------------------ textures and atlas

def test_atlas_regions_hold_each_texture_exactly():
    """Shelf packing of textures of several heights and aspect ratios (two shelves): each
    region (x0, y0, w, h) of level 0 is exactly its texture, and starts on the 2^(L-1) grid
    whatever the padding."""
    sizes = [(40, 24), (20, 700), (64, 500), (30, 30), (12, 900)]
    texs = [torch.rand((3, h, w), generator=torch.Generator().manual_seed(i))
            for i, (h, w) in enumerate(sizes)]
    for pad in (3, 8):
        atlas = pack_atlas(texs, num_levels=4, pad=pad)
        lv0 = atlas.levels[0][0]
        assert len(atlas.levels) == 4
        for tex, (x0, y0, w, h) in zip(texs, atlas.regions.long().tolist()):
            assert (w, h) == (tex.shape[2], tex.shape[1])
            assert x0 % 8 == 0 and y0 % 8 == 0, (pad, x0, y0)
            assert torch.equal(lv0[:, y0:y0 + h, x0:x0 + w], tex)


def test_flat_texture_is_nearly_uniform():
    for seed in range(3):
        tex = make_texture(40, 56, seed, "flat")
        assert float(tex.std((1, 2)).max()) < 0.02
