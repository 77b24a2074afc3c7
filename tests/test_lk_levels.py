"""The torch LK's pyramid depth follows OpenCV's cap (``features.lk._opencv_max_level``).

OpenCV's ``buildOpticalFlowPyramid`` (modules/video/src/lkpyramid.cpp), which
``calcOpticalFlowPyrLK`` calls on both images, stops after level l when the next level's size
(each side halved, rounding up) is not larger than the window on either side, and tracks with
that l as ``maxLevel``. The torch path always built ``levels`` + 1 images, so on small frames
its coarse levels were a few pixels of mostly padding and wide-baseline pairs lost their tracks
(grounded C3 at 16 px, frames 0 -> 15: 0 torch tracks vs 7 OpenCV; at 64 px 2 vs 46). Frames
with every level larger than the window (e.g. 240 x 320 with window 21, levels 3) are untouched.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

import geocon_torch.features.lk as lk
from geocon_torch.features import lk_tracks
from geocon_torch.synth import render_scene

PAIRS = torch.tensor([[0, 1], [0, 5], [0, 15], [8, 3]])


def _cv_max_level(h: int, w: int, window: int, levels: int) -> int:
    import cv2

    level, _ = cv2.buildOpticalFlowPyramid(np.zeros((h, w), np.uint8), (window, window), levels,
                                           withDerivatives=False)
    return int(level)


def test_the_level_count_of_the_default_window():
    """window 21, levels 3: a side of 16-42 px -> 0 coarse levels, 43-84 -> 1, 85-168 -> 2,
    169 and up -> 3 (the smaller side decides)."""
    got = {s: lk._opencv_max_level(s, s, 21, 3) for s in (16, 42, 43, 84, 85, 168, 169, 640)}
    assert got == {16: 0, 42: 0, 43: 1, 84: 1, 85: 2, 168: 2, 169: 3, 640: 3}
    assert lk._opencv_max_level(240, 320, 21, 3) == 3
    assert lk._opencv_max_level(120, 160, 21, 3) == 2
    assert lk._opencv_max_level(480, 40, 21, 3) == 0
    assert lk._opencv_max_level(480, 640, 21, 0) == 0


@pytest.mark.parametrize("window,levels", [(21, 3), (15, 5), (7, 2), (3, 8)])
def test_the_level_count_is_opencvs(window, levels):
    """Every side from 3 to 400 px (square and 3:4 frames) against cv2's own pyramid depth."""
    for s in range(3, 401):
        for h, w in ((s, s), (s, s * 4 // 3), (s * 4 // 3, s)):
            assert lk._opencv_max_level(h, w, window, levels) == \
                _cv_max_level(h, w, window, levels), (h, w)


@pytest.mark.parametrize("side,images", [(16, 1), (43, 2), (85, 3), (168, 3), (169, 4)])
def test_the_torch_tracker_uses_that_many_levels(monkeypatch, side, images):
    """The pyramid images the torch tracker refines on (level sizes seen by ``_refine_level``)."""
    seen = []
    real = lk._refine_level

    def spy(nxt, *args):
        seen.append(tuple(nxt.shape[-2:]))
        return real(nxt, *args)

    monkeypatch.setattr(lk, "_refine_level", spy)
    gray = torch.rand(2, 1, side, side, generator=torch.Generator().manual_seed(0))
    lk_tracks(gray, torch.tensor([[0, 1]]), max_corners=20)
    sizes = [side]
    for _ in range(images - 1):
        sizes.append((sizes[-1] + 1) // 2)
    want = [(s, s) for s in reversed(sizes)]
    assert seen[:images] == want  # forward direction, coarse to fine
    assert len(seen) == 2 * images  # and the backward one


def _counts(cat: str, side: int, pairs: torch.Tensor = PAIRS):
    fr = render_scene(cat, num_frames=16, size=(side, side), seed=0).frames
    gray = fr.float().mean(1, keepdim=True) / 255
    a = lk_tracks(gray, pairs, backend="torch").mask.sum(1).tolist()
    b = lk_tracks(gray, pairs, backend="opencv").mask.sum(1).tolist()
    return a, b


@pytest.mark.parametrize("cat", ["C3", "C2"])
@pytest.mark.parametrize("side", [16, 24, 32, 64, 128, 160])
def test_track_counts_match_opencv_on_small_frames(cat, side):
    """Kept tracks of the pairs 0 -> 1, 0 -> 5 and 8 -> 3 within 10 % of OpenCV's
    (test_torch_path_agrees_with_opencv's tolerance), or 2 tracks on frames with a handful of
    corners. Before: C2 at 24 px kept 11 / 13 / 9 (OpenCV 13 / 13 / 12)."""
    torch_n, cv_n = _counts(cat, side, PAIRS[[0, 1, 3]])
    for p, (a, b) in enumerate(zip(torch_n, cv_n)):
        assert abs(a - b) <= max(2, 0.1 * max(a, b)), (p, torch_n, cv_n)


@pytest.mark.parametrize("cat,side,before,after,opencv", [
    ("C3", 16, 0, 6, 7), ("C2", 48, 18, 47, 50), ("C3", 64, 2, 32, 46)])
def test_the_reported_wide_baseline_pairs(cat, side, before, after, opencv):
    """Frames 0 -> 15 (up to ~35 px of motion): the torch path lost nearly every track on its
    mostly-padding coarse levels; with OpenCV's levels it keeps about as many as OpenCV
    (``before`` -> ``after`` tracks). The tracks kept before and after agree to 0.01 px."""
    torch_n, cv_n = _counts(cat, side, PAIRS[2:3])
    assert torch_n == [after] and cv_n == [opencv] and after > before


def test_seeded_noise_at_32_px():
    """Independent noise frames, 32 px: both paths now track on level 0 only and keep
    forward-backward-consistent spurious minima (45 torch, 32 OpenCV); the torch path kept 0
    with its 16 / 8 / 4 px levels."""
    gray = torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(0))
    pair = torch.tensor([[0, 1]])
    assert int(lk_tracks(gray, pair).mask.sum()) == 45
    assert int(lk_tracks(gray, pair, backend="opencv").mask.sum()) == 32


@pytest.mark.parametrize("size", [(240, 320), pytest.param((480, 640), marks=pytest.mark.slow)])
def test_frames_above_the_cap_are_bit_identical(monkeypatch, size):
    """Every level of a 240 x 320 or 480 x 640 frame is larger than the window: the tracks equal
    those of the uncapped tracker (the code before the fix) bit for bit."""
    fr = render_scene("C3", num_frames=4, size=size, seed=0).frames
    gray = fr.float().mean(1, keepdim=True) / 255
    pairs = torch.tensor([[0, 1], [0, 3], [2, 1]])
    got = lk_tracks(gray, pairs, max_corners=300)
    assert lk._opencv_max_level(*size, 21, 3) == 3
    monkeypatch.setattr(lk, "_opencv_max_level", lambda h, w, window, levels: levels)
    ref = lk_tracks(gray, pairs, max_corners=300)
    assert int(got.mask.sum()) > 600
    for a in ("x1", "x2", "mask", "scores", "num_kp1", "num_kp2"):
        assert torch.equal(getattr(got, a), getattr(ref, a)), a
