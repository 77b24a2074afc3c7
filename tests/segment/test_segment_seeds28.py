"""Band seeds and crossing movers in the weight-free motion segmentation (audit s28 fgseg F3,
F2).

A mover 2-4 px per frame off the background homography is an H outlier (> tau_H = 2 px) but
was never a seed (seed threshold ``motion_seed_factor x tau_H`` = 4 px): it stayed unmasked and
its matches lowered the background IR (0.9385 and ``pass`` False for a rigid 56x44 object at
3 px/frame on a static camera). Such *band* seeds now count where their frame's dense change
masks confirm them (near changing pixels, or near seeds that count); an H outlier on a still
part of the frame (a mismatch, keypoint noise) never does.

Two rigid movers that cross were one space-time component, so one object over the whole clip
(scored as strongly non-rigid). Blobs of consecutive frames are now linked, where blobs meet or
part, only when their seeds agree on the motion.
"""
from __future__ import annotations

from typing import Tuple

import pytest
import torch
import torch.nn.functional as F
from helpers import identity_fits, smooth_colour_noise

from geocon_torch import score_clip
from geocon_torch.config import GeoConConfig
from geocon_torch.segment import motion as seg_motion
from geocon_torch.segment.motion import _cell_components, _coherent_of_labels, motion_segment
from geocon_torch.segment.seeds import (_band_threshold, _seed_threshold, adjacent_homographies,
                                        motion_masks, motion_masks_batch, outlier_seeds)
from geocon_torch.types import Clip

_H, _W, _T = 96, 128, 6
_OBJ = (32, 40)  # (h, w) px of the moving patch
_Y0, _X0 = 30, 20


def _scene(speed: int, moving: bool = True, noise: bool = False, seed: int = 0
           ) -> Tuple[Clip, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, tuple,
                      torch.Tensor]:
    """A static textured background and a textured patch that moves ``speed`` px/frame (x)
    (``moving`` False: drawn still, the matches still say it moves: mismatches with no
    photometric change); ``noise``: +-1 grey level per pixel. Matches per adjacent pair: a
    grid of exact background matches and 24 on the patch displaced ``speed`` px; identity H.
    Returns the clip, pairs, x1, x2, mask, fits and the true masks (T, 1, H, W)."""
    g = torch.Generator().manual_seed(seed)
    bg, obj = smooth_colour_noise(_H, _W, g), smooth_colour_noise(*_OBJ, g)
    frames = bg.expand(_T, 3, _H, _W).clone()
    truth = torch.zeros(_T, 1, _H, _W, dtype=torch.bool)
    for t in range(_T):
        x = _X0 + (speed * t if moving else 0)
        frames[t, :, _Y0:_Y0 + _OBJ[0], x:x + _OBJ[1]] = obj
        truth[t, 0, _Y0:_Y0 + _OBJ[0], x:x + _OBJ[1]] = True
    if noise:
        frames = frames + torch.randint(-1, 2, frames.shape, generator=g)
    frames = frames.round().clamp(0, 255).to(torch.uint8)
    clip = Clip(frames=frames, fps=10.0, content_mask=torch.ones(_H, _W, dtype=torch.bool),
                frame_indices=torch.arange(_T), source_size=(_H, _W))
    pairs = torch.tensor([(k, k + 1) for k in range(_T - 1)])
    ys, xs = torch.meshgrid(torch.arange(4.0, _H, 8.0), torch.arange(4.0, _W, 8.0),
                            indexing="ij")
    grid = torch.stack([xs.flatten(), ys.flatten()], -1)
    rows1, rows2 = [], []
    for t in range(_T - 1):
        x = _X0 + (speed * t if moving else 0)
        inside = (grid[:, 0] >= x) & (grid[:, 0] < x + _OBJ[1] + speed) \
            & (grid[:, 1] >= _Y0) & (grid[:, 1] < _Y0 + _OBJ[0])
        bgp = grid[~inside][:120]
        on = torch.rand(24, 2, generator=g) * torch.tensor([_OBJ[1] - 4.0, _OBJ[0] - 4.0]) \
            + torch.tensor([x + 2.0, _Y0 + 2.0])
        rows1.append(torch.cat([bgp, on]))
        rows2.append(torch.cat([bgp, on + torch.tensor([float(speed), 0.0])]))
    x1, x2 = torch.stack(rows1), torch.stack(rows2)
    mask = torch.ones(x1.shape[:2], dtype=torch.bool)
    return clip, pairs, x1, x2, mask, identity_fits(mask), truth


def _segment(speed: int, **kw) -> Tuple[torch.Tensor, dict, torch.Tensor]:
    clip, pairs, x1, x2, mask, fits, truth = _scene(speed, **kw)
    masks, ev = motion_masks(clip, pairs, x1, x2, mask, fits, GeoConConfig(), "H")
    return _dense(masks), ev, truth


def _dense(masks) -> torch.Tensor:
    """(T, K, H, W) bool of motion masks (a BlockMasks or an empty tensor)."""
    return masks.materialize() if hasattr(masks, "materialize") else masks


def test_band_threshold_is_the_inlier_gate_under_h_only():
    """Band seeds start at tau_H (2 px, the background's inlier gate), below the seed
    threshold (4 px); not below a source pixel on upscaled frames; none under F; none when
    ``motion_seed_factor`` <= 1 (then the seed threshold is already at or below tau_H)."""
    cfg = GeoConConfig()
    assert _band_threshold(cfg, "H") == 2.0 and _seed_threshold(cfg, "H") == 4.0
    assert _band_threshold(cfg, None) == 2.0
    assert _band_threshold(cfg, "H", 3.0) == 3.0 and _band_threshold(cfg, "H", 5.0) == 5.0
    assert _band_threshold(cfg, "F") == float("inf")
    low = cfg.replace(segment={"motion_seed_factor": 0.75})
    assert _band_threshold(low, "H") == _seed_threshold(low, "H") == 1.5


def test_slow_rigid_mover_between_tau_h_and_seed_threshold_is_segmented():
    """A patch at 3 px/frame (H outliers of 3 px, no seed above 4 px) is one object covering
    the patch (before: no object, no seed)."""
    masks, ev, truth = _segment(3)
    assert ev["objects"] == 1, ev
    assert ev["band_seeds"] > 0 and ev["object_seeds"][0] >= ev["band_seeds"] // 2, ev
    obj, true = masks[:, 0], truth[:, 0]
    for t in range(1, _T - 1):  # most of the patch, little else
        inter = (obj[t] & true[t]).sum().item()
        assert inter / true[t].sum().item() > 0.8, t
        assert inter / obj[t].sum().item() > 0.5, t


def test_band_outliers_without_photometric_change_never_seed():
    """The same 3 px matches on a patch that does not move (mismatches: nothing changes in
    the frames), with or without +-1 grey level noise: no object, no band seed."""
    for noise in (False, True):
        masks, ev, _ = _segment(3, moving=False, noise=noise)
        assert ev["objects"] == 0 and "band_seeds" not in ev, (noise, ev)


def test_incoherent_band_outliers_on_changing_pixels_never_seed():
    """Flicker: the still patch's brightness changes every frame (its pixels change against
    the background model) and its 3 px mismatches point every way: they disagree with the
    band seeds around them and with the component's near-zero median motion, so no object
    (before both checks: one object, 45 % of the frame on the grounded C1 clip with flicker
    1.0, which lifted its IR 0.908 -> 0.988)."""
    clip, pairs, x1, x2, mask, fits, truth = _scene(3, moving=False)
    gain = torch.tensor([1.0, 0.6, 1.0, 0.6, 1.0, 0.6]).view(-1, 1, 1, 1)
    lit = torch.where(truth, clip.frames.float() * gain, clip.frames.float())
    clip = Clip(frames=lit.round().clamp(0, 255).to(torch.uint8), fps=10.0,
                content_mask=clip.content_mask, frame_indices=clip.frame_indices,
                source_size=clip.source_size)
    ang = torch.rand(x1.shape[:2], generator=torch.Generator().manual_seed(3)) * 6.2832
    x2 = x1 + (x2 - x1).norm(dim=-1, keepdim=True) * torch.stack([ang.cos(), ang.sin()], -1)
    masks, ev = motion_masks(clip, pairs, x1, x2, mask, fits, GeoConConfig(), "H")
    assert ev["objects"] == 0 and ev.get("band_seeds", 0) < 12, ev


def test_band_seeds_must_agree_with_a_component_median_to_half_its_length():
    """40 seeds of 3 px pointing every way: within 3 px of their near-zero median (coherent
    as ordinary seeds), none as band seeds; 40 seeds of (3, 0) +- 0.3 px: all coherent as
    band seeds too. Without band flags the counts are the ordinary ones."""
    g = torch.Generator().manual_seed(0)
    ang = torch.rand(40, generator=g) * 6.2832
    spread = 3.0 * torch.stack([ang.cos(), ang.sin()], -1)
    rigid = torch.tensor([3.0, 0.0]) + (torch.rand(40, 2, generator=g) - 0.5) * 0.6
    vec = torch.cat([spread, rigid])
    lab = torch.cat([torch.ones(40, dtype=torch.long), torch.full((40,), 2)])
    plain = _coherent_of_labels(lab, vec, 2)
    assert plain[0] >= 12 and plain[1] == 40  # >= motion_min_seeds: an object
    assert torch.equal(_coherent_of_labels(lab, vec, 2, None), plain)
    banded = _coherent_of_labels(lab, vec, 2, torch.ones(80, dtype=torch.bool))
    assert banded.tolist() == [0, 40]


def test_movers_above_the_seed_threshold_are_unchanged():
    """At 5 px/frame every matched object point is a seed already (no band seed): the same
    masks and evidence as segmenting without band seeds."""
    clip, pairs, x1, x2, mask, fits, _ = _scene(5)
    masks, ev = motion_masks(clip, pairs, x1, x2, mask, fits, GeoConConfig(), "H")
    assert ev["objects"] == 1 and "band_seeds" not in ev
    seeds = outlier_seeds(pairs, x1, x2, mask, fits, GeoConConfig(), "H")
    homs, ok = adjacent_homographies(pairs, fits[0], _T)
    gray = clip.gray()
    cfg = GeoConConfig().segment
    for extra in ((), (torch.zeros_like(seeds[3]),)):
        alone, ev2 = motion_segment(gray, homs, ok, clip.content_mask, cfg, "H",
                                    seeds=(*seeds, *extra))
        assert torch.equal(_dense(alone), _dense(masks))
        assert {k: v for k, v in ev2.items() if k != "pre_regime"} == \
            {k: v for k, v in ev.items() if k != "pre_regime"}


def test_band_seeds_in_a_batch_equal_each_clip_alone():
    """A slow mover, a still patch with band mismatches and a fast mover segmented as one
    batch get the masks and evidence each gets alone, bit for bit."""
    data = [_scene(3)[:6], _scene(3, moving=False, seed=1)[:6], _scene(5, seed=2)[:6]]
    cfg = GeoConConfig()
    cols = list(zip(*data))
    batch = motion_masks_batch(*cols[:5], cols[5], cfg, ["H"] * 3)
    for k, (clip, pairs, x1, x2, mask, fits) in enumerate(data):
        alone = motion_masks(clip, pairs, x1, x2, mask, fits, cfg, "H")
        assert torch.equal(_dense(batch[k][0]), _dense(alone[0])), k
        assert batch[k][1] == alone[1], k
    assert [ev["objects"] for _, ev in batch] == [1, 0, 1]


def _tracks(paths, t: int = 12, size=(96, 160), seed: int = 0):
    """Static background and one 20 x 24 textured patch per path (row y0, x per frame), drawn
    in order; per adjacent pair a grid of exact background matches and 16 matches on each
    patch moving with it; identity H. Returns (clip, pairs, x1, x2, mask, fits), true masks
    (T, K, H, W)."""
    h, w = size
    g = torch.Generator().manual_seed(seed)
    bg = smooth_colour_noise(h, w, g)
    patches = [smooth_colour_noise(20, 24, g) for _ in paths]
    frames = bg.expand(t, 3, h, w).clone()
    truth = torch.zeros(t, len(paths), h, w, dtype=torch.bool)
    for k, (y0, xs) in enumerate(paths):
        for f in range(t):
            frames[f, :, y0:y0 + 20, xs[f]:xs[f] + 24] = patches[k]
            truth[f, :, y0:y0 + 20, xs[f]:xs[f] + 24] = False
            truth[f, k, y0:y0 + 20, xs[f]:xs[f] + 24] = True
    ys, xs_ = torch.meshgrid(torch.arange(4.0, h, 8.0), torch.arange(4.0, w, 8.0), indexing="ij")
    grid = torch.stack([xs_.flatten(), ys.flatten()], -1)
    rows1, rows2 = [], []
    for f in range(t - 1):
        still = ~(truth[f].any(0) | truth[f + 1].any(0))[grid[:, 1].long(), grid[:, 0].long()]
        r1, r2 = [grid[still][:150]], [grid[still][:150]]
        for k, (y0, xs) in enumerate(paths):
            on = torch.rand(16, 2, generator=g) * torch.tensor([20.0, 16.0]) \
                + torch.tensor([xs[f] + 2.0, y0 + 2.0])
            r1.append(on)
            r2.append(on + torch.tensor([float(xs[f + 1] - xs[f]), 0.0]))
        rows1.append(torch.cat(r1))
        rows2.append(torch.cat(r2))
    x1, x2 = torch.stack(rows1), torch.stack(rows2)
    mask = torch.ones(x1.shape[:2], dtype=torch.bool)
    clip = Clip(frames=frames.round().to(torch.uint8), fps=10.0,
                content_mask=torch.ones(h, w, dtype=torch.bool), frame_indices=torch.arange(t),
                source_size=(h, w))
    pairs = torch.tensor([(k, k + 1) for k in range(t - 1)])
    return (clip, pairs, x1, x2, mask, identity_fits(mask)), truth


def test_gated_components_with_every_link_open_equal_the_plain_ones():
    """Gates with all 9 bits set give exactly the ungated space-time components (with and
    without cuts between clips); no bit set gives the 2-D components of every frame."""
    g = torch.Generator().manual_seed(0)
    mask = F.max_pool2d(torch.rand(7, 1, 48, 64, generator=g), 5, 1, 2)[:, 0] > 0.97
    cells = (-(-48 // 4), -(-64 // 4))
    full = torch.full((7, *cells), 0x1FF, dtype=torch.int16)
    for cuts in ((), (2, 4)):
        plain = _cell_components(mask, 4, 512, cuts)
        gated = _cell_components(mask, 4, 512, cuts, gates=full)
        assert torch.equal(plain[0], gated[0]) and torch.equal(plain[1], gated[1]), cuts
    shut = _cell_components(mask, 4, 512, gates=torch.zeros_like(full))
    flat = _cell_components(mask, 4, 512, spatial=True)
    assert torch.equal(shut[0], flat[0]) and torch.equal(shut[1], flat[1])
    assert int(flat[1].sum()) > int(_cell_components(mask, 4, 512)[1].sum())


def test_crossing_movers_are_not_one_object_over_the_clip():
    """A (left to right) and B (right to left) at 5 px/frame meet in the last frames: two
    objects, and while they are apart no object holds both (before: one object, both
    patches in every frame)."""
    (args, truth) = _tracks([(30, [10 + 5 * f for f in range(12)]),
                             (40, [126 - 5 * f for f in range(12)])])
    masks, ev = motion_masks(*args, GeoConConfig(), "H")
    assert ev["objects"] == 2, ev
    obj = _dense(masks)
    for f in range(5):  # 60+ px apart
        for k in range(2):
            on = [bool((obj[f, k] & truth[f, j]).any()) for j in range(2)]
            assert on.count(True) <= 1, (f, k, on)
    assert all(bool(obj[:5, :, ].any((0, 2, 3))[k]) for k in range(2))


def test_a_mover_that_turns_back_stays_one_object():
    """One patch 5 px/frame right, then 5 px/frame left (a bounce: no merge nor split of
    blobs): one object in every frame, as before."""
    xs = [20 + 5 * f for f in range(6)] + [45 - 5 * f for f in range(1, 7)]
    (args, truth) = _tracks([(30, xs)])
    masks, ev = motion_masks(*args, GeoConConfig(), "H")
    assert ev["objects"] == 1, ev
    assert bool(_dense(masks)[:, 0].any((1, 2)).all())


@pytest.mark.slow
def test_score_clip_slow_mover_keeps_background_ir():
    """The audit's reproducer: a rigid 56x44 object at 3 px/frame on a static 192x256 camera
    keeps the background IR of its true masks (before: IR 0.9385, pass False)."""
    g = torch.Generator().manual_seed(0)
    bg, obj = smooth_colour_noise(192, 256, g), smooth_colour_noise(44, 56, g)
    frames = bg.expand(8, 3, 192, 256).clone()
    for t in range(8):
        frames[t, :, 80:124, 50 + 3 * t:106 + 3 * t] = obj
    frames = frames.round().to(torch.uint8)
    d = score_clip(frames, config={"io": {"long_side": None}}, device="cpu",
                   preset="background", progress=False).to_dict()
    bgd = d["background"]
    assert bgd["segment"]["objects"] == 1 and bgd["ir"] > 0.99 and bgd["pass"], bgd["segment"]


def _gated_reference(x, gates):
    """_max_gated offset by offset (the first version): one link bit at a time."""
    t, h, w = x.shape
    out = seg_motion._max9(x)
    xp, gp = F.pad(x, (1, 1, 1, 1)), F.pad(gates, (1, 1, 1, 1))
    for i, (dy, dx) in enumerate(seg_motion._NEXT):
        ok = (gates[:-1] >> i) & 1 > 0
        nxt = xp[1:, 1 + dy:1 + dy + h, 1 + dx:1 + dx + w]
        out[:-1] = torch.maximum(out[:-1], torch.where(ok, nxt, 0))
        back = (gp[:-1, 1 - dy:1 - dy + h, 1 - dx:1 - dx + w] >> i) & 1 > 0
        out[1:] = torch.maximum(out[1:], torch.where(back, xp[:-1, 1 - dy:1 - dy + h,
                                                             1 - dx:1 - dx + w], 0))
    return out


@pytest.mark.parametrize("budget", [None, 27])
def test_gated_max_of_all_offsets_at_once_equals_one_offset_at_a_time(monkeypatch, budget):
    """The 9 link offsets in one windowed pass (in frame chunks: a budget of 27 cells forces
    chunks of 1-3 frames) give the per-offset maxima exactly, both link directions."""
    if budget is not None:
        monkeypatch.setattr(seg_motion, "_MAP_BUDGET", budget)
    g = torch.Generator().manual_seed(3)
    for t, h, w in ((1, 3, 4), (2, 1, 1), (5, 3, 2), (6, 7, 5)):
        x = torch.randint(0, 40, (t, h, w), generator=g, dtype=torch.int32)
        x = x * (torch.rand(t, h, w, generator=g) > 0.4)
        gates = torch.randint(0, 512, (t, h, w), generator=g).to(torch.int16)
        assert torch.equal(seg_motion._max_gated(x.clone(), gates), _gated_reference(x, gates))
