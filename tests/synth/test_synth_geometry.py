"""Grounded scenes obey their recorded geometry: true H for pure rotation, true F for
translation, exact object masks, and the tiled ray caster equals the brute-force one."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from geocon_torch.synth import camera as cam
from geocon_torch.synth import render_scene
from geocon_torch.synth.raycast import Rects, intersect, pixel_rays
from geocon_torch.synth.scenes import build_scene

SIZE = (96, 160)


def _gray(clip, i):
    return cv2.cvtColor(clip.frames[i].permute(1, 2, 0).numpy(), cv2.COLOR_RGB2GRAY)


def _scene_points(scene):
    """World corners of every static rectangle (texture-space points a=0/1, b=0/1)."""
    r = scene.rects
    o, u, v = r.origin[0], r.u[0], r.v[0]
    static = r.object_id == 0
    pts = torch.cat([o, o + u, o + v, o + u + v])
    return pts[static.repeat(4)]


def _sift_matches(clip, i, j):
    """OpenCV SIFT + Lowe ratio 0.75 matches between frames i and j: (x_i (N, 2), x_j (N, 2))."""
    sift = cv2.SIFT_create(2000)
    ki, di = sift.detectAndCompute(_gray(clip, i), None)
    kj, dj = sift.detectAndCompute(_gray(clip, j), None)
    good = [a for a, b in cv2.BFMatcher().knnMatch(di, dj, k=2) if a.distance < 0.75 * b.distance]
    return (np.float32([ki[m.queryIdx].pt for m in good]),
            np.float32([kj[m.trainIdx].pt for m in good]))


def _sampson(F, x1, x2):
    x1h = np.c_[x1, np.ones(len(x1))]
    x2h = np.c_[x2, np.ones(len(x2))]
    fx1, ftx2 = x1h @ F.T, x2h @ F
    num = np.abs(np.sum(x2h * fx1, 1))
    return num / np.sqrt(fx1[:, 0] ** 2 + fx1[:, 1] ** 2 + ftx2[:, 0] ** 2 + ftx2[:, 1] ** 2)


@pytest.mark.parametrize("motion", ["pan", "tilt", "roll"])
def test_rotation_true_h_maps_texture_points(motion):
    scene = build_scene("C2", motion=motion, num_frames=6, size=SIZE)
    clip = render_scene("C2", motion=motion, num_frames=6, size=SIZE)
    assert clip.true_homographies.shape == (5, 3, 3)
    # camera centre fixed: pure rotation
    centers = cam.camera_centers(clip.poses)
    assert torch.allclose(centers, centers[:1].expand_as(centers), atol=1e-12)
    pts = _scene_points(scene)
    pix, z = cam.project(clip.intrinsics, clip.poses, pts)
    front = (z[:-1] > 0.1) & (z[1:] > 0.1)
    hx = clip.true_homographies @ torch.cat([pix[:-1], torch.ones_like(pix[:-1, :, :1])],
                                            -1).transpose(1, 2)
    hx = (hx[:, :2] / hx[:, 2:]).transpose(1, 2)
    err = (hx - pix[1:]).norm(dim=-1)[front]
    assert front.sum() > 20 and float(err.max()) < 0.5 and float(err.median()) < 1e-6


@pytest.mark.parametrize("motion", ["pan", "tilt", "roll"])
def test_rotation_frames_related_by_true_h(motion):
    """Image content: corners tracked by OpenCV LK land where H says (median < 0.5 px), and
    warping frame t by H matches frame t+1 better than H shifted by half a pixel."""
    clip = render_scene("C2", motion=motion, num_frames=3, size=SIZE)
    g0, g2 = _gray(clip, 0), _gray(clip, 2)
    H = (clip.true_homographies[1] @ clip.true_homographies[0]).numpy()
    pts = cv2.goodFeaturesToTrack(g0, 300, 0.01, 4)
    p2, st, _ = cv2.calcOpticalFlowPyrLK(g0, g2, pts, None, winSize=(15, 15), maxLevel=2)
    ok = st[:, 0] == 1
    d = np.linalg.norm((p2 - cv2.perspectiveTransform(pts, H))[ok], axis=-1)
    assert ok.sum() > 40 and np.median(d) < 0.5

    h, w = g0.shape

    def photometric(hm):
        warped = cv2.warpPerspective(g0.astype(np.float32), hm, (w, h), borderValue=-1)
        ov = cv2.erode((warped >= 0).astype(np.uint8), np.ones((5, 5), np.uint8)) > 0
        return float(np.abs(warped - g2)[ov].mean())

    err = photometric(H)
    for dx, dy in [(0.5, 0), (-0.5, 0), (0, 0.5), (0, -0.5)]:
        shifted = np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1.0]]) @ H
        assert err < photometric(shifted)
    assert err < 0.6 * float(np.abs(g0.astype(np.float32) - g2).mean())


def test_textures_give_unambiguous_sift_matches():
    """Distinctive textures: nearly every SIFT ratio-test match between pure-rotation frames is
    correct (within 2 px of the true H), which IR-based tests downstream rely on."""
    clip = render_scene("C2", num_frames=2, size=(240, 320))
    x0, x1 = _sift_matches(clip, 0, 1)
    pred = cv2.perspectiveTransform(x0[:, None], clip.true_homographies[0].numpy())[:, 0]
    err = np.linalg.norm(pred - x1, axis=-1)
    assert len(err) > 300 and (err < 2).mean() > 0.985 and np.median(err) < 0.2


def test_supersampling_keeps_exact_masks():
    one = render_scene("C4", num_frames=2, size=(48, 64))
    two = render_scene("C4", num_frames=2, size=(48, 64), supersample=2)
    assert torch.equal(one.masks, two.masks)
    diff = (one.frames.float() - two.frames.float()).abs().mean()
    assert 0 < float(diff) < 20


@pytest.mark.parametrize("category,motion", [("C3", "truck"), ("C3", "dolly"), ("C5", "arc"),
                                             ("C5", "orbit"), ("C6", "truck")])
def test_translation_true_epipolar_constraint(category, motion):
    scene = build_scene(category, motion=motion, num_frames=3, size=(192, 320))
    clip = render_scene(category, motion=motion, num_frames=3, size=(192, 320))
    assert clip.true_homographies is None
    F = clip.fundamental(0, 2)
    # projected 3D points satisfy the constraint exactly
    pix, z = cam.project(clip.intrinsics, clip.poses[[0, 2]], _scene_points(scene))
    front = (z > 0.1).all(0)
    s = _sampson(F.numpy(), pix[0][front].numpy(), pix[1][front].numpy())
    assert front.sum() > 20 and s.max() < 1e-6
    # SIFT matches between the rendered frames satisfy it to sub-pixel accuracy
    x0, x2 = _sift_matches(clip, 0, 2)
    dist = _sampson(F.numpy(), x0, x2)
    assert len(x0) > 80 and np.median(dist) < 0.5
    # there is parallax: the camera centre moved
    assert float(clip.relative_pose(0, 2)[:3, 3].norm()) > 0.05


def test_truck_has_parallax_no_single_homography():
    clip = render_scene("C3", num_frames=5, size=(192, 320))
    x0, x4 = _sift_matches(clip, 0, 4)
    _, inl = cv2.findHomography(x0, x4, cv2.RANSAC, 1.0)
    s = _sampson(clip.fundamental(0, 4).numpy(), x0, x4)
    assert (s < 1.0).mean() > 0.9 and inl.mean() < 0.85


def _hull_inside(pix, size, margin=1e-3):
    """Pixel centres strictly inside (by > margin px) / outside the convex hull of pix (N, 2)."""
    from scipy.spatial import ConvexHull

    pix = pix.astype(np.float64)
    hull = pix[ConvexHull(pix).vertices]
    h, w = size
    ys, xs = np.mgrid[0:h, 0:w]
    p = np.stack([xs, ys], -1).astype(np.float64)
    nxt = np.roll(hull, -1, axis=0)
    edge = nxt - hull
    normal = np.stack([edge[:, 1], -edge[:, 0]], -1) / np.linalg.norm(edge, axis=-1)[:, None]
    sd = ((p[:, :, None, :] - hull[None, None]) * normal[None, None]).sum(-1)
    # orientation: "inside" is the side of every edge that holds the hull's centroid
    cen = hull.mean(0)
    sign = np.sign(((cen - hull) * normal).sum(-1))
    sd = sd * sign[None, None]
    return (sd > margin).all(-1), (sd < -margin).any(-1)


def test_moving_object_mask_equals_projected_box_silhouette():
    clip = render_scene("C4", num_frames=8, size=SIZE, num_objects=1)
    scene = build_scene("C4", num_frames=8, size=SIZE, num_objects=1)
    assert clip.masks.shape == (8, 1) + SIZE and clip.masks.dtype == torch.bool
    r = scene.rects
    sel = r.object_id == 1
    corners = torch.cat([r.origin[:, sel], (r.origin + r.u + r.v)[:, sel]], 1)  # (T, 12, 3)
    moved = []
    for t in range(clip.num_frames):
        pix, z = cam.project(clip.intrinsics, clip.poses[t:t + 1], corners[t])
        assert bool((z > 0).all())
        inside, outside = _hull_inside(pix[0].numpy(), SIZE)
        m = clip.masks[t, 0].numpy()
        assert inside.sum() > 50
        assert m[inside].all() and not m[outside].any()
        moved.append(inside)
    assert (moved[0] != moved[-1]).sum() > 20  # the object moved


def test_masks_equal_object_rendered_alone():
    clip = render_scene("C4", num_frames=6, size=SIZE, num_objects=2)
    scene = build_scene("C4", num_frames=6, size=SIZE, num_objects=2)
    r = scene.rects
    rays = pixel_rays(clip.intrinsics, SIZE)
    for k in (1, 2):
        sel = r.object_id == k
        alone = intersect(rays, clip.poses, Rects(r.origin[:, sel], r.u[:, sel], r.v[:, sel],
                                                  r.object_id[sel], r.texture[sel],
                                                  r.facing[:, sel]))
        expected = torch.isfinite(alone.depth) & (alone.depth <= clip.depth)
        assert torch.equal(clip.masks[:, k - 1], expected)
        assert int(expected.sum()) > 100
    assert not (clip.masks[:, 0] & clip.masks[:, 1]).any()


@pytest.mark.parametrize("category", ["C2", "C4", "C6"])
def test_tiled_intersection_equals_single_tile(category):
    extra = {"num_objects": 2} if category == "C4" else {}
    scene = build_scene(category, num_frames=3, size=(64, 96), **extra)
    rays = pixel_rays(scene.K, (64, 96))
    tiled = intersect(rays, scene.poses, scene.rects, tile=16)
    whole = intersect(rays, scene.poses, scene.rects, tile=96)
    assert torch.equal(tiled.rect, whole.rect)
    assert torch.equal(tiled.depth, whole.depth)
    assert (tiled.rect >= 0).all()  # the room encloses the camera: every ray hits


def test_static_and_moving_object_backgrounds_have_identity_h():
    c1 = render_scene("C1", num_frames=4, size=(48, 64))
    assert torch.equal(c1.frames[0], c1.frames[-1])
    assert torch.allclose(c1.true_homographies, torch.eye(3, dtype=torch.float64).expand(3, 3, 3))
    c4 = render_scene("C4", num_frames=4, size=(48, 64))
    assert torch.allclose(c4.true_homographies, torch.eye(3, dtype=torch.float64).expand(3, 3, 3))
    bg = ~c4.masks.any(1)
    still = bg[0] & bg[1]
    assert torch.equal(c4.frames[0][:, still], c4.frames[1][:, still])
    assert not torch.equal(c4.frames[0], c4.frames[1])


def test_camera_helpers_closed_form():
    K = cam.intrinsics((96, 160))
    assert K[0, 0] == pytest.approx(0.9 * 160) and K[0, 2] == pytest.approx(79.5)
    pose = cam.look_at((0, 0, 0), (0, 0, 5))
    assert torch.allclose(pose, torch.eye(4, dtype=torch.float64))
    angle = torch.tensor(0.1, dtype=torch.float64)
    rel = cam.make_pose(cam.rotation((0, 1, 0), angle), torch.zeros(3))
    Hm = cam.rotation_homography(K, rel)
    # a point on the optical axis moves by f tan(angle) under a rotation about y
    x = Hm @ torch.tensor([79.5, 47.5, 1.0], dtype=torch.float64)
    assert float(x[0] / x[2] - 79.5) == pytest.approx(144 * np.tan(0.1), abs=1e-9)
    rel_t = cam.make_pose(torch.eye(3, dtype=torch.float64), torch.tensor([1.0, 0, 0]))
    F = cam.fundamental_from_pose(K, rel_t)
    # pure x-translation: epipolar lines are horizontal (y2 = y1)
    x1 = torch.tensor([10.0, 30.0, 1.0], dtype=torch.float64)
    line = F @ x1
    assert float(line[0]) == pytest.approx(0.0, abs=1e-12)
    assert float(line @ torch.tensor([70.0, 30.0, 1.0], dtype=torch.float64)) == pytest.approx(
        0.0, abs=1e-12)


def test_still_cameras_have_no_fundamental_matrix():
    """C4's camera does not move: inverting its pose leaves a ~1e-17 translation, whose
    direction set an arbitrary unit-norm "true" F in the ground truth. Now zeros / None, as
    for C1; a moving camera keeps its F."""
    for cat in ("C1", "C4"):
        clip = render_scene(cat, num_frames=3, size=(48, 64), seed=0)
        assert bool((clip.true_fundamentals == 0).all()), cat
        assert clip.ground_truth()["true_fundamentals"] is None, cat
    moving = render_scene("C3", num_frames=3, size=(48, 64), seed=0)
    assert bool((moving.true_fundamentals.flatten(1).norm(dim=1) > 0.99).all())
