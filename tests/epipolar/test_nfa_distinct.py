"""The a contrario (NFA) test counts distinct correspondences, not repeated matches.

SIFT returns one location with several orientations and the ratio test can match one keypoint
several times; such repeats are not independent draws of the NFA's background model, and
counting them as inliers lowered the NFA of chance matches across a shot cut (bikes 241 -> 242)
below ``primary_max_nfa``.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from geocon_torch.config import EpipolarConfig
from geocon_torch.epipolar import opencv_path, torch_path
from geocon_torch.epipolar.protocol import (PRIMARY, PairMeasurements, Stage,
                                            distinct_correspondences, evaluate, log10_nfa)
from geocon_torch.sections.epipolar import epipolar_section

SIZE = (272, 640)  # bikes' analysis size (H, W)
THR = 1.0


def _closed_form(n: int, k: int) -> float:
    h, w = SIZE
    alpha = 2.0 * THR * math.hypot(h, w) / (h * w)
    return math.log10((n - 7) * math.comb(n, k) * math.comb(k, 7) * alpha ** (k - 7))


def _points(seed: int = 0):
    """10 inliers + 8 outliers at distinct locations (px), then the same with 4 inliers and
    2 outliers repeated (a keypoint matched again / a SIFT location with two orientations)."""
    g = np.random.default_rng(seed)
    x1 = g.uniform(0, 600, (18, 2)).astype(np.float32)
    x2 = g.uniform(0, 600, (18, 2)).astype(np.float32)
    inl = np.arange(18) < 10
    rep = np.array([0, 1, 2, 3, 12, 15])
    return (x1, x2, inl), (np.concatenate([x1, x1[rep]]), np.concatenate([x2, x2[rep]]),
                           np.concatenate([inl, inl[rep]]))


def _one(v):
    return None if v is None else np.array([v], np.int64)


def _meas(n, k, dn=None, dk=None) -> PairMeasurements:
    return PairMeasurements(np.array([[0, 1]]), _one(900), _one(500), _one(n), np.array([True]),
                            _one(k), np.zeros(1), np.zeros(1), distinct_matches=_one(dn),
                            distinct_inliers=_one(dk))


def test_log10_nfa_closed_form_and_repeats_do_not_lower_it():
    got = log10_nfa(np.array([18, 24, 10]), np.array([10, 14, 7]), SIZE, THR)
    assert got[0] == pytest.approx(_closed_form(18, 10), abs=1e-9)
    assert got[1] == pytest.approx(_closed_form(24, 14), abs=1e-9)
    assert got[2] == np.inf  # 7 points always fit
    (a1, a2, ai), (b1, b2, bi) = _points()
    counts = [(distinct_correspondences(x1, x2), distinct_correspondences(x1[m], x2[m]))
              for x1, x2, m in ((a1, a2, ai), (b1, b2, bi))]
    assert counts == [(18, 10), (18, 10)]
    stage, cfg = Stage(PRIMARY, 0.75, 8), EpipolarConfig(primary_max_nfa=0.01)
    clean = evaluate(_meas(18, 10, 18, 10), stage, cfg, SIZE).log10_nfa[0]
    repeated = evaluate(_meas(24, 14, *counts[1]), stage, cfg, SIZE).log10_nfa[0]
    assert repeated == clean == pytest.approx(_closed_form(18, 10), abs=1e-9)
    # the raw counts (what the NFA used before) call the repeated set 10^2.5 times rarer
    assert _closed_form(24, 14) < clean - 2.5
    # hand-built measurements without distinct counts keep the raw counts
    assert evaluate(_meas(24, 14), stage, cfg, SIZE).log10_nfa[0] == pytest.approx(
        _closed_form(24, 14), abs=1e-9)


def test_torch_distinct_counts_match_numpy_per_pair():
    g = np.random.default_rng(1)
    P, N = 5, 40
    x1 = np.round(g.uniform(-5, 700, (P, N, 2)), 1)  # coarse grid: many repeated locations
    x1[:, ::3] = x1[:, :1]
    x2 = np.round(g.uniform(0, 700, (P, N, 2)), 0)
    x2[:, 5::4] = x2[:, 1:2] + 4e-4  # within the 1e-3 px grid of a repeat
    x2[:, 2] = x2[:, 1] + 2e-3  # a different location
    mask = g.uniform(size=(P, N)) < 0.7
    mask[0] = False
    x1[~mask] = np.nan  # padding
    got = torch_path.distinct_counts(torch.from_numpy(x1), torch.from_numpy(x2),
                                     torch.from_numpy(mask)).numpy()
    want = [distinct_correspondences(x1[p][mask[p]], x2[p][mask[p]]) for p in range(P)]
    assert got.tolist() == want
    assert want[0] == 0 and all(0 < w < m for w, m in zip(want[1:], mask.sum(1)[1:]))


@pytest.mark.parametrize("impl", ["opencv", "torch"])
def test_primary_max_nfa_drops_the_cut_with_repeated_matches(shared_data, impl):
    """bikes 241 -> 242 (a cut): 18 chance matches, 12 inliers but only 6-7 distinct ones."""
    from geocon_torch.io import read_clip

    clip = read_clip(shared_data / "real" / "bikes.mp4", long_side=None, indices=[241, 242])
    got = epipolar_section(clip, EpipolarConfig(primary_max_nfa=0.01), implementation=impl,
                           features="opencv-sift")
    assert got["status"] == "not_applicable" and got["epipolar_error"] is None
    assert got["attempts"][0]["failures"] == {"inlier set not meaningful (NFA > 0.01)": 1}


def test_paths_agree_on_distinct_counts(shared_data):
    """Same SIFT matches -> the same distinct matches; inliers differ by RANSAC only."""
    from geocon_torch.io import read_clip

    cfg = EpipolarConfig()
    stage = Stage(PRIMARY, float(cfg.ratio), int(cfg.min_matches))
    got = []
    for name, idx in (("bikes.mp4", [241, 242, 186, 187]), ("realshort.mp4", [0, 1, 2, 3])):
        clip = read_clip(shared_data / "real" / name, long_side=None, indices=idx)
        pairs = np.array([[0, 1], [2, 3]])
        ref = opencv_path.run_opencv(lambda: opencv_path._measure_clip(
            opencv_path._ClipState(clip, pairs, cfg), stage), 1, cfg.seed)
        ours = torch_path.measure_batch(torch_path._Batch(
            [clip], [pairs], cfg, torch.device("cpu"), "opencv-sift"), stage, [0])[0]
        got.append((ref, ours))
    for ref, ours in got:
        assert ref.matches.tolist() == ours.matches.tolist()
        assert ref.distinct_matches.tolist() == ours.distinct_matches.tolist()
        assert (ref.distinct_matches < ref.matches).all()  # SIFT repeats locations
        assert (ours.distinct_inliers <= ours.inliers).all()
        gap = np.abs(ref.inliers - ours.inliers) + 2
        assert (np.abs(ref.distinct_inliers - ours.distinct_inliers) <= gap).all()
    assert got[0][0].distinct_matches.tolist() == [12, 25]  # bikes 241 -> 242, 186 -> 187
