"""Mutation round 6 (segment): closed-form pins of the motion-mask thresholds, the seed
selection, the adjacent homographies, the background-mask composition and the mask provider
choice that no other default test pinned. Inputs are constructed (no media)."""
from __future__ import annotations

from dataclasses import replace

import torch

from geocon_torch.config import GeoConConfig, SegmentConfig
from geocon_torch.segment.background import background_mask
from geocon_torch.segment.motion import change_masks, coherent_seeds, motion_segment
from geocon_torch.segment.seeds import adjacent_homographies, outlier_seeds
from geocon_torch.types import Fit


def _fits(r, n, h_model, f_model, h_valid, f_valid):
    def fit(kind, model, valid):
        return Fit(kind, model.expand(r, 3, 3).clone(), torch.ones(r, n, dtype=torch.bool),
                   torch.zeros(r, n), torch.tensor(valid), torch.full((r,), n),
                   torch.ones(r, dtype=torch.long), torch.zeros(r))
    return fit("H", h_model, h_valid), fit("F", f_model, f_valid)


# ---- seeds.py ----------------------------------------------------------------------------

def test_seed_threshold_and_validity_follow_the_regime_model():
    """A seed's residual must exceed motion_seed_factor (2) x the regime's threshold: under F
    2 x tau_F = 0.2 normalised Sampson, under H 2 x tau_H = 4 px; strictly above; and only on
    rows whose regime fit is valid (F's validity under F, H's otherwise)."""
    cfg = GeoConConfig()
    pairs = torch.tensor([[0, 1], [1, 2]])
    x1 = torch.tensor([[[10.0, 10.0], [20.0, 20.0], [30.0, 30.0]]]).expand(2, 3, 2).clone()
    x2 = x1 + torch.tensor([2.0, 0.0])
    mask = torch.ones(2, 3, dtype=torch.bool)
    fits = _fits(2, 3, torch.eye(3), torch.zeros(3, 3), [True, False], [False, True])
    res = torch.tensor([[0.1, 4.0, 4.5], [0.3, 4.0, 0.15]], dtype=torch.float32)
    _, _, _, ok_f = outlier_seeds(pairs, x1, x2, mask, fits, cfg, "F", residuals=res)
    # F: row 0 is not valid under F; row 1: 0.3 > 0.2 and 4.0 > 0.2
    assert ok_f.view(2, 2, 3)[0].tolist() == [[False] * 3, [True, True, False]]
    _, _, _, ok_h = outlier_seeds(pairs, x1, x2, mask, fits, cfg, "H", residuals=res)
    # H: row 1 is not valid under H; row 0: 4.5 > 4 only (4.0 == 4 would not count)
    assert ok_h.view(2, 2, 3)[0].tolist() == [[False, False, True], [False] * 3]


def test_seed_motion_is_relative_to_the_background_homography():
    """motion = x2 - H x1 (here H a 5 px shift: a match moving 7 px has motion 2 px)."""
    cfg = GeoConConfig()
    shift = torch.tensor([[1.0, 0.0, 5.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    x1 = torch.tensor([[[10.0, 10.0], [40.0, 12.0]]])
    x2 = x1 + torch.tensor([[[7.0, 1.0], [5.0, 0.0]]])
    fits = _fits(1, 2, shift, torch.zeros(3, 3), [True], [True])
    pts, frames, motion, ok = outlier_seeds(torch.tensor([[3, 4]]), x1, x2,
                                            torch.ones(1, 2, dtype=torch.bool), fits, cfg, "H",
                                            residuals=torch.tensor([[9.0, 0.0]]))
    assert motion.tolist() == [[2.0, 1.0], [0.0, 0.0]] * 2
    assert frames.tolist() == [3, 3, 4, 4] and ok.tolist() == [True, False, True, False]
    assert torch.equal(pts, torch.cat([x1[0], x2[0]]))


def test_adjacent_homographies_keep_the_fits_validity():
    """Adjacent pairs get their H and its validity; an invalid fit stays invalid; a
    non-adjacent pair (0, 2) is not used."""
    pairs = torch.tensor([[0, 1], [1, 2], [0, 2]])
    model = torch.stack([torch.eye(3) * k for k in (1.0, 2.0, 3.0)])
    fit = Fit("H", model, torch.ones(3, 1, dtype=torch.bool), torch.zeros(3, 1),
              torch.tensor([True, False, True]), torch.ones(3), torch.ones(3), torch.zeros(3))
    hs, ok = adjacent_homographies(pairs, fit, 4)
    assert ok.tolist() == [True, False, False]
    assert hs[0].tolist() == (torch.eye(3) * 1.0).tolist()
    assert hs[2].tolist() == torch.eye(3).tolist()


# ---- motion.py ---------------------------------------------------------------------------

def test_uncovered_border_after_a_pan_is_no_change():
    """A static textured scene panned 5 px per frame: H maps frame t to t+1 exactly; the strip
    with no counterpart (frame 0's first 5 columns, frame 2's last 5) is outside the warp: no
    change there (only the smoothing's one column next to it) nor anywhere inside."""
    g = torch.Generator().manual_seed(3)
    world = torch.rand(1, 1, 40, 80, generator=g)
    frames = torch.stack([world[0, :, :, 5 * t:5 * t + 60] for t in range(3)])
    # x_{t+1} = x_t - 5: the same world point moves 5 px left
    H = torch.tensor([[1.0, 0.0, -5.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]).expand(2, 3, 3)
    ch = change_masks(frames, H, torch.ones(2, dtype=torch.bool),
                      torch.ones(40, 60, dtype=torch.bool), 0.08)
    assert int(ch[0, :, :5].sum()) == 0 and int(ch[2, :, 55:].sum()) == 0
    assert int(ch[:, :, 6:54].sum()) == 0 and int(ch[1].sum()) == 0


def test_change_needs_a_residual_strictly_above_the_threshold():
    """A uniform step of exactly the threshold (0.25) is no change; just above it is."""
    frames = torch.zeros(2, 1, 8, 8)
    frames[1] = 0.25
    eye = torch.eye(3).expand(1, 3, 3)
    ok, content = torch.ones(1, dtype=torch.bool), torch.ones(8, 8, dtype=torch.bool)
    assert int(change_masks(frames, eye, ok, content, 0.25).sum()) == 0
    assert int(change_masks(frames, eye, ok, content, 0.2).sum()) == 2 * 64


def test_coherence_tolerance_is_inclusive():
    """A seed exactly 3 px (the floor) from its component's median motion is coherent."""
    labels = torch.ones(1, 10, 10, dtype=torch.long)
    vec = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0], [4.0, 0.0], [4.5, 0.0]])
    pts = torch.tensor([[float(k), 5.0] for k in range(5)])
    n = coherent_seeds(labels, (pts, torch.zeros(5, dtype=torch.long), vec), 1)
    assert n.tolist() == [4]


def _discs(centres, radius=3, t=3, size=(40, 64), **cfg):
    """Seed discs only (regime F: no dense residuals; no morphology): ``centres`` (x, y) each
    seeded once in every frame, moving coherently."""
    h, w = size
    pts = torch.tensor([c for _ in range(t) for c in centres], dtype=torch.float32)
    frames = torch.tensor([k for k in range(t) for _ in centres])
    vec = torch.tensor([3.0, 0.0]).expand(len(pts), 2).clone()
    config = SegmentConfig(motion_open_px=0, motion_close_px=0, motion_seed_radius_px=radius,
                           motion_min_area=1, **cfg)
    return (torch.zeros(t, 1, h, w), torch.eye(3, dtype=torch.float64).repeat(t - 1, 1, 1),
            torch.ones(t - 1, dtype=torch.bool), torch.ones(h, w, dtype=torch.bool),
            config, (pts, frames, vec))


def test_min_seeds_is_inclusive():
    """A component with exactly motion_min_seeds coherent seeds (3: one per frame) is kept."""
    gray, hs, val, content, cfg, seeds = _discs([(20.0, 20.0)], motion_min_seeds=3)
    obj, ev = motion_segment(gray, hs, val, content, cfg, "F", seeds=seeds)
    assert ev["objects"] == 1 and ev["object_seeds"] == [3]
    obj, ev = motion_segment(gray, hs, val, content, replace(cfg, motion_min_seeds=4), "F",
                             seeds=seeds)
    assert ev["objects"] == 0


def test_at_most_max_objects_largest_first():
    """Three separate objects (radii 2, 4, 3), max_objects 2: the two largest are kept, the
    largest first."""
    gray, hs, val, content, cfg, seeds = _discs([(8.0, 8.0), (30.0, 20.0), (52.0, 30.0)],
                                                radius=0, motion_min_seeds=1)
    # grow the discs by hand: radius 2, 4, 3 around the three centres (seeded pixels only)
    pts, frames, vec = seeds
    extra = [(8.0 + dx, 8.0 + dy) for dx in range(-2, 3) for dy in range(-2, 3)] + \
        [(30.0 + dx, 20.0 + dy) for dx in range(-4, 5) for dy in range(-4, 5)] + \
        [(52.0 + dx, 30.0 + dy) for dx in range(-3, 4) for dy in range(-3, 4)]
    pts = torch.tensor([c for _ in range(3) for c in extra])
    frames = torch.tensor([k for k in range(3) for _ in extra])
    vec = torch.tensor([3.0, 0.0]).expand(len(pts), 2).clone()
    obj, ev = motion_segment(gray, hs, val, content, cfg, "F", seeds=(pts, frames, vec),
                             max_objects=2)
    assert ev["objects"] == 2 and ev["candidates"] == 3
    assert obj.shape[1] == 2 and obj[0].flatten(1).sum(1).tolist() == [81, 49]


# ---- background.py / select.py -----------------------------------------------------------

def test_background_mask_removes_the_dilated_union_of_all_objects():
    """B_t = content minus the union of every object dilated by margin_px (a square)."""
    content = torch.ones(20, 20, dtype=torch.bool)
    content[:, :2] = False  # a bar
    objects = torch.zeros(1, 2, 20, 20, dtype=torch.bool)
    objects[0, 0, 5, 5] = True
    objects[0, 1, 12, 14] = True
    bg = background_mask(content, objects, margin_px=2)[0]
    want = content.clone()
    want[3:8, 3:8] = False
    want[10:15, 12:17] = False
    assert torch.equal(bg, want)


def test_auto_masks_use_sam2_when_a_checkpoint_is_configured():
    from geocon_torch.segment.select import masks_method

    cfg = GeoConConfig().replace(segment={"sam2_checkpoint": "sam2.pt"})
    assert masks_method(cfg, None) == "sam2"
    assert masks_method(cfg, "masks.npz") == "files"
    assert masks_method(GeoConConfig().replace(segment={"method": "none"}), None) == "none"


def test_max_fraction_is_exclusive():
    """An object covering exactly motion_max_fraction (0.5) of the content is still reliable:
    a 7 x 7 disc in a 7 x 14 content strip is kept; 0.49 marks the frames unreliable."""
    gray, hs, val, _, cfg, seeds = _discs([(20.0, 20.0)], motion_min_seeds=1)
    content = torch.zeros(40, 64, dtype=torch.bool)
    content[17:24, 17:31] = True  # 98 px; the disc covers rows 17..23, columns 17..23
    obj, ev = motion_segment(gray, hs, val, content, cfg, "F", seeds=seeds)
    assert ev["unreliable_frames"] == 0 and ev["objects"] == 1
    assert ev["max_object_fraction"] == 0.5
    obj, ev = motion_segment(gray, hs, val, content, replace(cfg, motion_max_fraction=0.49),
                             "F", seeds=seeds)
    assert ev["unreliable_frames"] == 3 and ev["objects"] == 0


def _moving_square(top, t=3, size=(40, 64)):
    """Black still frames with a white 8 x 8 square at rows top..top+7 moving 4 px per frame
    (identity background homographies)."""
    h, w = size
    gray = torch.zeros(t, 1, h, w)
    for k in range(t):
        gray[k, 0, top:top + 8, 10 + 4 * k:18 + 4 * k] = 1.0
    return gray, torch.eye(3, dtype=torch.float64).repeat(t - 1, 1, 1), \
        torch.ones(t - 1, dtype=torch.bool)


def test_no_dense_residuals_under_f():
    """Under F the photometric change is never used (parallax would look like motion): a
    moving square with no seeds gives an object under H and none under F."""
    gray, hs, val = _moving_square(16)
    content = torch.ones(40, 64, dtype=torch.bool)
    cfg = SegmentConfig(motion_min_seeds=0, motion_min_area=1, motion_open_px=0)
    _, ev_h = motion_segment(gray, hs, val, content, cfg, "H")
    obj, ev_f = motion_segment(gray, hs, val, content, cfg, "F")
    assert ev_h["objects"] == 1 and ev_f["objects"] == 0 and obj.shape[1] == 0
    assert ev_f["dense"].startswith("off: parallax")


def test_change_next_to_a_letterbox_bar_survives_the_closing():
    """Changed pixels inside the content are kept even where the closing's erosion would drop
    them at the content's edge (the square's top row touches the bar)."""
    gray, hs, val = _moving_square(12)
    content = torch.zeros(40, 64, dtype=torch.bool)
    content[12:] = True  # a bar above row 12
    cfg = SegmentConfig(motion_min_seeds=0, motion_min_area=1, motion_open_px=0)
    obj, ev = motion_segment(gray, hs, val, content, cfg, "H")
    assert ev["objects"] == 1
    ch = change_masks(gray, hs, val, content, cfg.motion_threshold)
    assert bool(obj[1, 0][ch[1]].all())  # every changed pixel of the middle frame is masked
    assert bool(obj[1, 0, 12].any())


def _square_clip(t=3, size=(40, 64)):
    """A Clip of black frames with a white 8 x 8 square moving 4 px per frame, its adjacent
    pairs, and per pair 16 matches on a compact cluster (x2 = x1 + 9 px: far off H)."""
    from geocon_torch.types import Clip

    gray, _, _ = _moving_square(16, t, size)
    frames = (gray * 255).to(torch.uint8).expand(t, 3, *size).contiguous()
    clip = Clip(frames=frames, fps=10.0, content_mask=torch.ones(*size, dtype=torch.bool),
                frame_indices=torch.arange(t), source_size=size)
    pairs = torch.tensor([(k, k + 1) for k in range(t - 1)])
    xy = torch.tensor([[40.0 + dx, 28.0 + dy] for dx in range(4) for dy in range(4)])
    x1 = xy.expand(t - 1, 16, 2).clone()
    return clip, pairs, x1, x1 + torch.tensor([9.0, 0.0])


def _masks_cfg():
    return GeoConConfig().replace(segment={"motion_min_seeds": 0, "motion_min_area": 1,
                                           "motion_open_px": 0})


def test_a_batched_f_clip_gets_no_dense_residuals():
    """Two clips of one size segmented as one batch (frames joined at full size): the clip
    under F gets no object from the photometric change, the clip under H does."""
    from geocon_torch.segment.seeds import motion_masks_batch

    clip, pairs, x1, x2 = _square_clip()
    mask = torch.zeros(2, 16, dtype=torch.bool)  # no match: no seed
    fits = _fits(2, 16, torch.eye(3), torch.zeros(3, 3), [True, True], [True, True])
    out = motion_masks_batch([clip, clip], [pairs] * 2, [x1] * 2, [x2] * 2, [mask] * 2,
                             [fits] * 2, _masks_cfg(), ["H", "F"])
    assert out[0][1]["objects"] == 1 and out[1][1]["objects"] == 0


def test_matches_of_an_invalid_fit_are_no_seeds():
    """motion_masks: off-model matches of a pair whose regime fit is invalid seed nothing (a
    black still clip: seeds are the only evidence); with a valid fit they make an object."""
    from geocon_torch.segment.seeds import motion_masks

    clip, pairs, x1, x2 = _square_clip()
    clip = replace(clip, frames=torch.zeros_like(clip.frames))
    mask = torch.ones(2, 16, dtype=torch.bool)
    cfg = _masks_cfg()
    for valid, want in (([False, False], 0), ([True, True], 1)):
        fits = _fits(2, 16, torch.eye(3), torch.zeros(3, 3), valid, valid)
        _, ev = motion_masks(clip, pairs, x1, x2, mask, fits, cfg, "H")
        assert ev["objects"] == want, valid
