"""The give-up bound of the torch LK (features.lk._GIVE_UP_ITER): on frames nothing can be
tracked in (independent noise, a black frame) a level stops the pair's non-matching points after
a few Gauss-Newton steps instead of running all 30 for every point; trackable frames are
bit-identical to the unbounded tracker."""
from __future__ import annotations

import numpy as np
import torch
from helpers import hill_gray, to_gray_tensor  # noqa: F401

import geocon_torch.features.lk as lk
from geocon_torch.features import lk_tracks

PAIRS = torch.tensor([[0, 1], [1, 0]])


def _point_steps(monkeypatch, gray, **kw):
    """(Correspondences, number of (point, Gauss-Newton step) samples of the 1-channel
    windows, i.e. the refinement work, not the window systems)."""
    count = [0]
    real = lk.sample_patches

    def counting(img, centres, off):
        if img.shape[1] == 1:
            count[0] += centres.shape[0] * centres.shape[1]
        return real(img, centres, off)

    monkeypatch.setattr(lk, "sample_patches", counting)
    c = lk_tracks(gray, PAIRS, **kw)
    monkeypatch.setattr(lk, "sample_patches", real)
    return c, count[0]


def _noise(h=96, w=128, frames=2, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(frames, 1, h, w, generator=g)


def test_noise_gives_up_after_a_few_steps(monkeypatch):
    gray = _noise()
    bounded, work = _point_steps(monkeypatch, gray, max_corners=300)
    monkeypatch.setattr(lk, "_GIVE_UP_ITER", 10 ** 9)  # the unbounded tracker
    full, full_work = _point_steps(monkeypatch, gray, max_corners=300)
    n = int(bounded.num_kp1[0]) + int(bounded.num_kp1[1])
    assert n == 600
    # 96 x 128 px: 3 levels (96, 48, 24 px high; OpenCV's cap drops the 12 px one, not larger
    # than the 21 px window; the tracker used 4 levels before that cap)
    levels = 1 + lk._opencv_max_level(96, 128, 21, 3)
    assert levels == 3
    # before: (nearly) every corner ran all 30 steps on each level, both directions
    assert full_work > 0.6 * 30 * levels * 2 * n
    # now: 3 steps per level and direction for the non-matching points, and a handful more
    assert work < 0.15 * full_work
    assert work < 5 * levels * 2 * n
    # the noise is still "tracked" (FB-consistent spurious minima), as the guard tests expect
    assert int(bounded.mask.sum()) >= 8


def test_black_frame_gives_up(monkeypatch):
    gray = _noise()
    gray[1] = 0.0  # tracking into a black frame: the window never correlates
    _, work = _point_steps(monkeypatch, gray, max_corners=300)
    monkeypatch.setattr(lk, "_GIVE_UP_ITER", 10 ** 9)
    _, full_work = _point_steps(monkeypatch, gray, max_corners=300)
    assert work < 0.2 * full_work


def test_trackable_frames_bit_identical_to_the_unbounded_tracker(shared_data, monkeypatch):
    import cv2

    img = hill_gray(shared_data)
    m = np.float32([[1, 0, 6.3], [0, 1, -4.45]])
    w = cv2.warpAffine(img.astype(np.float32), m, (img.shape[1], img.shape[0]),
                       flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REFLECT)
    gray = to_gray_tensor(np.stack([img.astype(np.float32), w]))
    got, work = _point_steps(monkeypatch, gray, max_corners=400)
    monkeypatch.setattr(lk, "_GIVE_UP_ITER", 10 ** 9)
    ref, ref_work = _point_steps(monkeypatch, gray, max_corners=400)
    assert work == ref_work  # the rule never fired
    assert int(got.mask.sum()) > 600
    for a in ("x1", "x2", "mask", "scores"):
        assert torch.equal(getattr(got, a), getattr(ref, a)), a
