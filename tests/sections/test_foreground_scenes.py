"""AdaDFRC-W2 end to end (flow + score) on synthetic rigid / non-rigid objects and on box.mp4.

``render_object_pair`` (also used by the flow tests) renders a noise-textured disc moving over a
static noise background with an exact similarity transform, optionally plus a sinusoidal ripple
inside the object; frames are supersampled so that the warp is exact at the pixel scale.
"""
from __future__ import annotations

import math

import pytest
import torch
from helpers import make_clip, render_object_pair

from geocon_torch.flow.lk_dense import gaussian_blur
from geocon_torch.sections.foreground import foreground_block as foreground_section
from geocon_torch.types import Clip

CFG = {"foreground": {"flow": "torch-lk", "max_objects": None}}  # 7 scenes = 7 objects: no cap

SIZE = (144, 192)
SIM = dict(angle_deg=4.0, scale=1.04, shift=(2.5, -1.5))
SCENES = {  # full-size disc: radius 44 px; half size: 22 px (ripple wavelength scales with it)
    "translate": dict(shift=(3.0, -2.0)),
    "rotate": dict(angle_deg=6.0),
    "scale": dict(scale=1.06),
    "similarity": SIM,
    "ripple": dict(ripple_px=1.5, **SIM),
    "half_similarity": dict(radius=22.0, **SIM),
    "half_ripple": dict(radius=22.0, ripple_px=1.5, **SIM),
}


@pytest.fixture(scope="module")
def scene_scores():
    """All scenes scored in one foreground_section call: scene i occupies frames 2i, 2i+1 and
    object channel i (empty elsewhere, so only pair (2i, 2i+1) scores object i)."""
    frames, masks = [], []
    names = list(SCENES)
    for i, name in enumerate(names):
        f, m, _ = render_object_pair(seed=1, size=SIZE, **{"radius": 44.0, **SCENES[name]})
        frames.append(f)
        mk = torch.zeros(2, len(names), *m.shape, dtype=torch.bool)
        mk[0, i] = m
        masks.append(mk)
    res = foreground_section(make_clip(torch.cat(frames)), torch.cat(masks), CFG)
    assert res["status"] == "ok", res
    out = {}
    for name, obj in zip(names, res["objects"]):
        assert obj["frames"] == 1, obj
        out[name] = obj["adadfrc_mean"]
    return out


@pytest.mark.parametrize("motion", ["translate", "rotate", "scale", "similarity"])
def test_rigid_scores_at_most_a_fifth_of_ripple(motion, scene_scores):
    ripple = scene_scores["ripple"]
    assert ripple > 0.5  # the ripple's true residual is ~2.3 px^2
    assert scene_scores[motion] <= ripple / 5, scene_scores


def test_adaptive_grid_half_size_object(scene_scores):
    full, half = scene_scores["ripple"], scene_scores["half_ripple"]
    assert abs(half - full) / full < 0.2, scene_scores
    assert scene_scores["half_similarity"] <= half / 5, scene_scores


def _box_mask(frames: torch.Tensor) -> torch.Tensor:
    """Object mask of the yellow-orange box in box.mp4 (T, 3, H, W) uint8 -> (T, H, W) bool:
    saturated warm pixels (the box print), holes filled, largest component per frame."""
    from scipy import ndimage

    x = frames.float() / 255.0
    r, g, b = x[:, 0], x[:, 1], x[:, 2]
    mx, mn = x.amax(1), x.amin(1)
    sat = (mx - mn) / mx.clamp_min(1e-6)
    warm = (sat > 0.5) & (r > 0.45) & (r >= g) & (g > b + 0.1)
    out = []
    for m in warm.numpy():
        m = ndimage.binary_closing(m, iterations=2)
        m = ndimage.binary_fill_holes(m)
        lab, n = ndimage.label(m)
        if n:
            sizes = ndimage.sum(m, lab, range(1, n + 1))
            m = lab == (1 + int(sizes.argmax()))
        out.append(torch.from_numpy(ndimage.binary_erosion(m, iterations=1)))
    return torch.stack(out)


def _ripple_warp(frames: torch.Tensor, masks: torch.Tensor, amp: float) -> torch.Tensor:
    """Non-rigid copy: frame i >= 1 warped by (-1)^i times a sinusoidal displacement inside the
    box of mask i-1, so every pair sees a ripple of amplitude 2 * amp (pair 0: amp)."""
    from geocon_torch.flow.lk_dense import warp

    f = frames.float() / 255.0
    t, _, h, w = f.shape
    yy, xx = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    out = [f[0]]
    for i in range(1, t):
        ys, xs = torch.nonzero(masks[i - 1], as_tuple=True)
        y0, y1, x0, x1 = ys.min(), ys.max(), xs.min(), xs.max()
        lam = 0.5 * float(max(x1 - x0, y1 - y0))
        win = ((xx >= x0) & (xx <= x1) & (yy >= y0) & (yy <= y1)).float()[None, None]
        win = gaussian_blur(win, 3.0)[0, 0]
        a = amp * (-1) ** i
        disp = torch.stack([a * torch.sin(2 * math.pi * (yy - y0) / lam),
                            a * torch.sin(2 * math.pi * (xx - x0) / lam)]) * win
        out.append(warp(f[i][None], disp[None])[0][0])
    return (torch.stack(out) * 255).round().to(torch.uint8)


def test_box_video_rigid_scores_lower_than_nonrigid_warp(shared_data):
    from geocon_torch.io import read_clip

    path = shared_data / "real" / "box.mp4"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    clip = read_clip(path, long_side=320, indices=range(100, 104))
    masks = _box_mask(clip.frames)
    assert masks.flatten(1).sum(1).min() > 2000  # the box covers ~10% of the frame
    real = foreground_section(clip, masks[:, None], CFG)
    warped = Clip(frames=_ripple_warp(clip.frames, masks, amp=1.5), fps=clip.fps,
                  content_mask=clip.content_mask, frame_indices=clip.frame_indices,
                  source_size=clip.source_size, name="box_rippled")
    fake = foreground_section(warped, masks[:, None], CFG)
    assert real["status"] == fake["status"] == "ok"
    r, f = real["objects"][0], fake["objects"][0]
    assert r["frames"] == f["frames"] == 3
    assert r["adadfrc_mean"] < f["adadfrc_mean"] / 2, (r, f)
    assert r["adap90"] < f["adap90"]
