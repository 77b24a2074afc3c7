"""Weight-free motion segmentation pieces: connected components, change masks, coherence."""
from dataclasses import replace

import numpy as np
import torch

from geocon_torch.config import SegmentConfig
from geocon_torch.segment.motion import (change_masks, coherent_seeds, connected_components,
                                         motion_segment, motion_segments)


def test_connected_components_match_opencv_per_frame():
    import cv2

    g = torch.Generator().manual_seed(1)
    blobs = torch.rand(1, 1, 12, 16, generator=g) > 0.7
    mask = torch.nn.functional.interpolate(blobs.float(), size=(48, 64))[0].bool()
    mask = mask.expand(2, 48, 64).clone()
    mask[1] = False  # an empty frame
    lab = connected_components(mask, downsample=1)
    n_cv, lab_cv = cv2.connectedComponents(mask[0].numpy().astype(np.uint8), connectivity=8)
    assert int(lab.max()) == n_cv - 1 and not lab[1].any()
    # same partition (labels may be numbered differently)
    pairs = set(zip(lab[0][mask[0]].tolist(), lab_cv[mask[0].numpy()].tolist()))
    assert len(pairs) == n_cv - 1


def test_change_masks_find_a_moving_square_on_static_texture():
    g = torch.Generator().manual_seed(0)
    bg = torch.rand(1, 1, 60, 80, generator=g)
    frames = bg.repeat(4, 1, 1, 1)
    true = torch.zeros(4, 60, 80, dtype=torch.bool)
    patch = torch.rand(1, 12, 12, generator=g)
    for t in range(4):  # a textured square moving 4 px per frame over a static camera
        frames[t, :, 20:32, 10 + 4 * t: 22 + 4 * t] = patch
        true[t, 20:32, 10 + 4 * t: 22 + 4 * t] = True
    eye = torch.eye(3).expand(3, 3, 3)
    ch = change_masks(frames, eye, torch.ones(3, dtype=torch.bool),
                      torch.ones(60, 80, dtype=torch.bool), 0.08)
    from geocon_torch.segment.background import dilate

    inner, near = ch[1:3], dilate(true[1:3], 1)  # interior frames see both neighbours
    assert (inner & ~near).sum() == 0  # three-frame differencing: no ghosts of old / new place
    assert (inner & true[1:3]).sum() >= 0.5 * true[1:3].sum()


def test_change_masks_of_a_one_frame_clip_are_empty():
    """No pair, no change: (1, h, w) all False (typing audit s24: a torch.cat error before)."""
    ch = change_masks(torch.rand(1, 1, 8, 8), torch.zeros(0, 3, 3),
                      torch.zeros(0, dtype=torch.bool), torch.ones(8, 8, dtype=torch.bool), 0.1)
    assert ch.shape == (1, 8, 8) and ch.dtype == torch.bool and not bool(ch.any())


def test_coherent_seeds_reject_scattered_outliers():
    labels = torch.zeros(1, 40, 40, dtype=torch.long)
    labels[0, :20] = 1
    labels[0, 20:] = 2
    pts = torch.tensor([[5.0, 5.0], [8.0, 6.0], [10.0, 3.0], [12.0, 8.0],
                        [5.0, 30.0], [8.0, 32.0], [10.0, 25.0], [12.0, 35.0]])
    vec = torch.tensor([[4.0, 0.0], [4.2, 0.1], [3.9, -0.1], [4.1, 0.0],  # rigid: one motion
                        [9.0, 0.0], [-7.0, 3.0], [0.0, -8.0], [3.0, 9.0]])  # scattered
    n = coherent_seeds(labels, (pts, torch.zeros(8, dtype=torch.long), vec), 2)
    assert n.tolist()[0] == 4 and n.tolist()[1] <= 2


def test_motion_segment_in_f_regime_uses_no_dense_residuals():
    gray = torch.rand(3, 1, 30, 40, generator=torch.Generator().manual_seed(0))
    obj, ev = motion_segment(gray, torch.eye(3).expand(2, 3, 3), torch.ones(2, dtype=torch.bool),
                             torch.ones(30, 40, dtype=torch.bool), SegmentConfig(), "F")
    assert obj.shape == (3, 0, 30, 40) and "parallax" in ev["dense"]


def _reference_labels(mask: np.ndarray) -> np.ndarray:
    """Brute-force 26-connected (3x3x3) components by breadth-first search."""
    from collections import deque

    lab = np.zeros(mask.shape, dtype=np.int64)
    n = 0
    for start in zip(*np.nonzero(mask)):
        if lab[start]:
            continue
        n += 1
        lab[start] = n
        queue = deque([start])
        while queue:
            c = queue.popleft()
            for d in np.ndindex(3, 3, 3):
                q = tuple(int(ci + di - 1) for ci, di in zip(c, d))
                if all(0 <= qi < si for qi, si in zip(q, mask.shape)) and mask[q] and not lab[q]:
                    lab[q] = n
                    queue.append(q)
    return lab


def test_connected_components_link_frames_and_follow_long_snakes():
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(4, 24, 30, generator=g) > 0.72  # many small blobs, linked across frames
    snake = torch.zeros(24, 30, dtype=torch.bool)
    for r in range(1, 23, 4):  # a serpentine: one component with a very long geodesic path
        snake[r, 1:29] = True
        snake[r: r + 4, 28 if (r // 4) % 2 == 0 else 1] = True
    mask[1] = snake
    lab = connected_components(mask, downsample=1)
    ref = _reference_labels(mask.numpy())
    assert int(lab.max()) == int(ref.max())
    pairs = set(zip(lab[mask].tolist(), ref[mask.numpy()].tolist()))
    assert len(pairs) == int(ref.max())  # the same partition, one-to-one
    assert not bool(lab[~mask].any())


def test_pooled_gray_equals_avg_pooling_the_luminance():
    from geocon_torch.segment.motion import pooled_gray
    from geocon_torch.types import Clip

    g = torch.Generator().manual_seed(5)
    frames = torch.randint(0, 256, (5, 3, 37, 50), generator=g, dtype=torch.uint8)
    clip = Clip(frames=frames, fps=10.0, content_mask=torch.ones(37, 50, dtype=torch.bool),
                frame_indices=torch.arange(5), source_size=(37, 50))
    for f in (1, 2, 3, 4):  # 37 x 50 is not a multiple of 2, 3 or 4: border blocks are partial
        ref = torch.nn.functional.avg_pool2d(clip.gray(), f, ceil_mode=True) if f > 1 else \
            clip.gray()
        got = pooled_gray(clip, f, chunk=2)
        assert got.shape == ref.shape
        torch.testing.assert_close(got, ref, atol=1e-6, rtol=0)


def test_connected_components_links_split_clips():
    """Frames concatenated from two clips with ``links`` False between them: each clip gets
    its own components, numbered after the first clip's."""
    g = torch.Generator().manual_seed(5)
    a, b = torch.rand(3, 20, 24, generator=g) > 0.7, torch.rand(2, 20, 24, generator=g) > 0.7
    links = torch.tensor([True, True, False, True])
    lab = connected_components(torch.cat([a, b]), downsample=1, links=links)
    lab_a, lab_b = connected_components(a, downsample=1), connected_components(b, downsample=1)
    assert torch.equal(lab[:3], lab_a)
    k = int(lab_a.max())
    assert torch.equal(lab[3:], torch.where(lab_b > 0, lab_b + k, lab_b))


def _moving_square(t: int, size, start: int, seed: int):
    """(T, 1, H, W) gray noise background with a bright square moving 3 px per frame, and seed
    points on the square's corners (each in its own frame) moving with it."""
    h, w = size
    g = torch.Generator().manual_seed(seed)
    gray = torch.rand(1, 1, h, w, generator=g).expand(t, 1, h, w).clone() * 0.3
    pts, frames = [], []
    for k in range(t):
        x = start + 3 * k
        gray[k, 0, 10:26, x:x + 16] = 0.9 + 0.05 * torch.rand(16, 16, generator=g)
        for cx, cy in ((x + 2, 12), (x + 13, 12), (x + 2, 23), (x + 13, 23), (x + 8, 18)):
            pts.append((float(cx), float(cy)))
            frames.append(k)
    pts, frames = torch.tensor(pts), torch.tensor(frames)
    vec = torch.tensor([3.0, 0.0]).expand(pts.shape[0], 2).clone()
    ok = torch.arange(pts.shape[0]) % 7 != 3  # fixed-size seeds: a few are not seeds
    return gray, (pts, frames, vec, ok)


def test_motion_segments_of_a_batch_equal_each_clip_alone():
    """Clips of two sizes and three lengths (one under F: no dense residuals) segmented as one
    batch get the masks and evidence they get alone, bit for bit."""
    cfg = SegmentConfig(motion_min_area=20, motion_min_frames=2, motion_min_seeds=3)
    specs = [(5, (48, 64), 4, "H"), (7, (48, 64), 10, "H"), (4, (40, 56), 6, "H"),
             (6, (48, 64), 8, "F")]
    grays, seeds = zip(*[_moving_square(t, s, x, k) for k, (t, s, x, _) in enumerate(specs)])
    hs = [torch.eye(3, dtype=torch.float64).repeat(t - 1, 1, 1) for t, *_ in specs]
    valid = [torch.ones(t - 1, dtype=torch.bool) for t, *_ in specs]
    content = [torch.ones(s, dtype=torch.bool) for _, s, _, _ in specs]
    regimes = [r for *_, r in specs]
    batch = motion_segments(grays, hs, valid, content, cfg, regimes, seeds=seeds)
    for k in range(len(specs)):
        obj, ev = motion_segment(grays[k], hs[k], valid[k], content[k], cfg, regimes[k],
                                 seeds=seeds[k])
        assert torch.equal(batch[k][0], obj) and batch[k][1] == ev, k
    assert [ev["objects"] for _, ev in batch] == [1, 1, 1, 1]
    assert batch[0][1]["object_seeds"] == [21]  # 25 corners, 4 not seeds and "dense" in batch[3][1]


def test_connected_components_empty_clip_and_bad_inputs():
    import pytest

    from geocon_torch.errors import InputError, ShapeError
    cm = torch.zeros(3, 16, 20, dtype=torch.bool)
    cm[:, 4:8, 4:8] = True
    for dtype in (torch.long, torch.int32):
        got = connected_components(cm[:0], dtype=dtype)
        assert got.shape == (0, 16, 20) and got.dtype == dtype
    with pytest.raises(ShapeError, match=r"mask must be a \(T, h, w\) bool tensor, got "
                                         r"\(16, 20\) torch.bool"):
        connected_components(cm[0])
    with pytest.raises(ShapeError, match=r"mask must be .*got \(3, 16, 20\) torch.float32"):
        connected_components(cm.float())
    for bad in (0, -2):
        with pytest.raises(InputError, match=rf"downsample must be an integer >= 1, got {bad}"):
            connected_components(cm, downsample=bad)
    with pytest.raises(ShapeError, match=r"links must be a \(2,\) tensor, got \(3,\)"):
        connected_components(cm, links=torch.ones(3, dtype=torch.bool))


def test_motion_segment_checks_its_inputs():
    import pytest

    from geocon_torch.errors import InputError, ShapeError
    cfg = SegmentConfig()
    gray = torch.rand(3, 1, 24, 32, generator=torch.Generator().manual_seed(0))
    hs, val = torch.eye(3).expand(2, 3, 3), torch.ones(2, dtype=torch.bool)
    content = torch.ones(24, 32, dtype=torch.bool)
    with pytest.raises(ShapeError, match=r"gray must be a \(T, 1, h, w\) float tensor, got "
                                         r"\(3, 24, 32\) torch.float32"):
        motion_segment(gray[:, 0], hs, val, content, cfg)
    with pytest.raises(ShapeError, match=r"gray must be .*got \(3, 1, 24, 32\) torch.uint8"):
        motion_segment((gray * 255).to(torch.uint8), hs, val, content, cfg)
    with pytest.raises(ShapeError, match=r"gray must have at least one frame"):
        motion_segment(gray[:0], hs[:0], val[:0], content, cfg)
    with pytest.raises(ShapeError, match=r"homographies must be a \(2, 3, 3\) tensor \(T - 1 "
                                         r"pairs\), got \(1, 3, 3\)"):
        motion_segment(gray, hs[:1], val[:1], content, cfg)
    with pytest.raises(ShapeError, match=r"valid must be a \(2,\) tensor \(T - 1 pairs\), got "
                                         r"\(1,\)"):
        motion_segment(gray, hs, val[:1], content, cfg)
    with pytest.raises(ShapeError, match=r"content must be an \(h, w\) tensor, got \(1, 24, 32\)"):
        motion_segment(gray, hs, val, content[None], cfg)
    with pytest.raises(InputError, match=r"regime must be 'H', 'F' or None, got 'X'"):
        motion_segment(gray, hs, val, content, cfg, "X")
    with pytest.raises(ShapeError, match=r"clip 1: valid must be a \(1,\) tensor"):
        motion_segments([gray, gray[:2]], [hs, hs[:1]], [val, val], [content, content], cfg,
                        ["H", "H"])
    obj, ev = motion_segment(gray[:1], hs[:0], val[:0], content, cfg, None)  # T = 1: fine
    assert obj.shape == (1, 0, 24, 32) and ev["objects"] == 0


def test_coherent_seeds_tolerance_is_3_px_or_30_percent_of_the_median_motion():
    """A seed is coherent when it lies within max(3 px, 30 % of |median|) of its component's
    median relative motion: a 2.9 px deviation counts at a 1 px median (the 3 px floor), 5.5 px
    counts and 7 px does not at a 20 px median (30 % = 6 px), and one wild seed does not move
    the centre (a median, not a mean)."""
    labels = torch.zeros(1, 30, 30, dtype=torch.long)
    labels[0, :10], labels[0, 10:20], labels[0, 20:] = 1, 2, 3
    vx = [[1.0, 1.0, 1.0, 1.0, 3.9, -1.9, 4.2],  # median 1: tolerance 3 px
          [20.0, 20.0, 20.0, 25.5, 27.0],  # median 20: tolerance 6 px
          [2.0, 2.0, 2.0, 2.0, 40.0]]  # median 2 (the mean, 9.6, would reject all five)
    rows = [5.0, 15.0, 25.0]
    pts = torch.tensor([[float(k), rows[c]] for c, xs in enumerate(vx) for k in range(len(xs))])
    vec = torch.tensor([[x, 0.0] for xs in vx for x in xs])
    n = coherent_seeds(labels, (pts, torch.zeros(len(pts), dtype=torch.long), vec), 3)
    assert n.tolist() == [6, 4, 4]


def _seed_scene(size, centres, radius: int = 3, **cfg):
    """A dark still clip whose only evidence is seed discs (regime F: no dense residuals; no
    opening / closing, so each disc is exactly a (2 radius + 1)^2 square): ``centres`` are
    (frame, (x, y)) seeds moving coherently 3 px to the right."""
    h, w = size
    t = 1 + max(f for f, _ in centres) if centres else 1
    t = max(t, cfg.pop("frames", t))
    pts = torch.tensor([c for _, c in centres], dtype=torch.float32)
    frames = torch.tensor([f for f, _ in centres])
    vec = torch.tensor([3.0, 0.0]).expand(len(centres), 2).clone()
    config = SegmentConfig(motion_open_px=0, motion_close_px=0, motion_seed_radius_px=radius,
                           motion_min_seeds=1, **cfg)
    return (torch.zeros(t, 1, h, w), torch.eye(3, dtype=torch.float64).repeat(t - 1, 1, 1),
            torch.ones(t - 1, dtype=torch.bool), (pts, frames, vec), config)


def test_min_area_is_per_frame_and_min_frames_is_inclusive():
    """A 7 x 7 px object (49 px in each of 4 frames, 196 px in all) is kept at
    motion_min_area 49 and dropped at 50 (the area counts per frame, not summed over the
    track); an object seen in exactly 2 frames is kept at motion_min_frames 2, not at 3."""
    content = torch.ones(40, 48, dtype=torch.bool)
    four = [(k, (20.0 + k, 20.0)) for k in range(4)]
    for area, want in ((49, [[49] * 4]), (50, [])):
        gray, hs, val, seeds, cfg = _seed_scene((40, 48), four, motion_min_area=area)
        obj, ev = motion_segment(gray, hs, val, content, cfg, "F", seeds=seeds)
        assert obj.flatten(2).sum(-1).T.tolist() == want, area
        assert ev["objects"] == len(want) and ev["candidates"] == 1
    two = [(1, (20.0, 20.0)), (2, (21.0, 20.0))]
    for frames, want in ((2, 1), (3, 0)):
        gray, hs, val, seeds, cfg = _seed_scene((40, 48), two, motion_min_area=1,
                                                motion_min_frames=frames, frames=4)
        obj, ev = motion_segment(gray, hs, val, content, cfg, "F", seeds=seeds)
        assert ev["objects"] == want, frames
        if want:
            assert obj[:, 0].flatten(1).sum(1).tolist() == [0, 49, 49, 0]


def test_max_fraction_is_a_fraction_of_the_content_not_of_the_frame():
    """A 21 x 21 px disc inside a letterboxed frame (content: rows 10..29 of 40 x 32) covers
    420 px = 0.656 of the 640 content px (0.328 of the frame): above motion_max_fraction 0.5
    every frame is unreliable and nothing is masked; at 0.7 the object is kept."""
    content = torch.zeros(40, 32, dtype=torch.bool)
    content[10:30] = True
    centres = [(k, (16.0, 20.0)) for k in range(3)]
    gray, hs, val, seeds, cfg = _seed_scene((40, 32), centres, radius=10, motion_min_area=1)
    obj, ev = motion_segment(gray, hs, val, content, cfg, "F", seeds=seeds)
    assert ev["unreliable_frames"] == 3 and ev["objects"] == 0 and obj.shape[1] == 0
    cfg = replace(cfg, motion_max_fraction=0.7)
    obj, ev = motion_segment(gray, hs, val, content, cfg, "F", seeds=seeds)
    assert ev["unreliable_frames"] == 0 and ev["objects"] == 1
    assert obj[:, 0].flatten(1).sum(1).tolist() == [420] * 3
    assert ev["max_object_fraction"] == 420 / 640


def test_min_area_at_the_reduced_scale_is_divided_by_the_factor_squared():
    """Frames of 48 x 656 px are segmented at 1/3 scale (f = 3): a seed radius of 3 px becomes
    1 cell, a 3 x 3 cell object = 9 x 9 = 81 px at full size; motion_min_area (px at full size)
    becomes min_area // 9 cells: 64 px keeps it (7 cells), 90 px drops it (10 cells). The seed
    pixel (32, 26) lies in cell (10, 8) (pixels 30..32, 24..26: x -> (x + 0.5) / 3 - 0.5), so
    the object covers pixels 27..35 x 21..29."""
    content = torch.ones(48, 656, dtype=torch.bool)
    centres = [(k, (32.0, 26.0)) for k in range(3)]
    for area, want in ((64, 1), (90, 0)):
        gray, hs, val, seeds, cfg = _seed_scene((48, 656), centres, motion_min_area=area)
        obj, ev = motion_segment(gray, hs, val, content, cfg, "F", seeds=seeds)
        assert ev["scale"] == 1 / 3 and ev["objects"] == want, area
        if want:
            full = obj.full()[:, 0]
            assert full.flatten(1).sum(1).tolist() == [81] * 3
            assert full[0, 21:30, 27:36].all()


def test_seed_points_are_read_at_their_nearest_pixel():
    """Seeds (x, y) px fall on the pixel round(x), round(y) (clamped into the frame): in
    seed_map (a radius-0 disc is that pixel) and in coherent_seeds (the component there)."""
    from geocon_torch.segment.motion import seed_map

    pts = torch.tensor([[20.6, 10.4], [3.4, 7.5], [-2.0, 40.0]])
    got = seed_map(pts, torch.tensor([0, 1, 1]), (2, 12, 30), 0)
    assert [tuple(v) for v in got.nonzero().tolist()] == [(0, 10, 21), (1, 8, 3), (1, 11, 0)]
    labels = torch.zeros(1, 12, 30, dtype=torch.long)
    labels[0, :, 21:] = 1  # the component starts at column 21
    vec = torch.tensor([[3.0, 0.0]]).expand(3, 2)
    n = coherent_seeds(labels, (torch.tensor([[20.6, 5.0], [20.7, 6.0], [20.4, 7.0]]),
                                torch.zeros(3, dtype=torch.long), vec), 1)
    assert n.tolist() == [2]
