"""The WorldAtlas protocol pinned by mutation testing round 8: explicit pairs must index the
clip's frames (the last frame is T - 1), ..."""
from __future__ import annotations

import numpy as np
import pytest

from geocon_torch.config import EpipolarConfig
from geocon_torch.epipolar.protocol import clip_pairs
from geocon_torch.errors import ShapeError


def test_explicit_pairs_must_index_frames_below_t():
    """Pairs (i, j) of a 4-frame clip index frames 0..3: (0, 3) is kept, (0, 4) and (-1, 2)
    are a ShapeError naming the range."""
    cfg = EpipolarConfig()
    np.testing.assert_array_equal(clip_pairs(4, cfg, [[0, 3], [1, 2]]), [[0, 3], [1, 2]])
    with pytest.raises(ShapeError, match=r"0\.\.3, got range \[0, 4\]"):
        clip_pairs(4, cfg, [[0, 4]])
    with pytest.raises(ShapeError, match=r"got range \[-1, 2\]"):
        clip_pairs(4, cfg, np.array([[-1, 2]]))


def test_tracking_guard_keeps_a_track_at_exactly_min_ncc():
    """The photometric guard keeps tracks with patch NCC >= tracking.min_ncc (0.8): a pair
    whose 10 tracks all score exactly 0.8 keeps them all, one at 0.79 loses them."""
    import torch

    from geocon_torch.epipolar.protocol import protocol_stages, tracking_guard

    cfg = EpipolarConfig()
    stage = protocol_stages(cfg)[-1]
    fb_ok = torch.ones(2, 10, dtype=torch.bool)
    ncc = torch.tensor([[0.8] * 10, [0.79] * 10], dtype=torch.float64)
    scores = torch.full((2, 10), 0.5, dtype=torch.float64)  # forward-backward error 1 px
    g = tracking_guard(fb_ok, scores, ncc, stage, cfg)
    assert g.kept.sum(1).tolist() == [10, 0]
    assert g.notes == [None, "not enough LK tracks with patch NCC >= 0.8"]


def _meas(matches, inliers):
    from geocon_torch.epipolar.protocol import PairMeasurements

    n = len(matches)
    return PairMeasurements(
        pairs=np.stack([np.arange(n), np.arange(1, n + 1)], 1), kp_left=np.full(n, 100),
        kp_right=np.full(n, 100), matches=np.asarray(matches), fitted=np.ones(n, bool),
        inliers=np.asarray(inliers), median_error=np.full(n, 0.5), mean_error=np.full(n, 0.6))


def test_a_pair_with_exactly_min_inliers_is_valid():
    """The primary stage's pair validity is inliers >= epipolar.min_inliers (8): 8 inliers of
    12 matches count, 7 do not; the clip's inlier rate is that of the valid pair alone."""
    from geocon_torch.epipolar.protocol import clip_values, evaluate, protocol_stages

    cfg = EpipolarConfig()
    assert cfg.min_inliers == 8
    att = evaluate(_meas([12, 12], [8, 7]), protocol_stages(cfg)[0], cfg)
    assert att.valid.tolist() == [True, False]
    assert att.failures == [None, "not enough epipolar inliers"]
    assert clip_values(att, cfg)["epipolar_inlier_rate"] == pytest.approx(8 / 12)


def test_nfa_chance_is_capped_at_one_on_a_tiny_frame():
    """alpha, the chance a uniform point falls within the threshold of a line, is at most 1:
    on a 20 x 20 frame with a 10 px threshold (2 * 10 * 28.3 / 400 > 1) the NFA of 10 inliers
    among 20 matches is (n - 7) C(n, k) C(k, 7), with no alpha^(k - 7) factor above 1."""
    import math

    from geocon_torch.epipolar.protocol import log10_nfa

    got = log10_nfa(np.array([20]), np.array([10]), (20, 20), 10.0)
    want = math.log10(13 * math.comb(20, 10) * math.comb(10, 7))
    assert got[0] == pytest.approx(want, rel=1e-12)


def test_a_fallback_pair_at_exactly_the_nfa_bound_is_meaningful():
    """A fallback stage keeps a pair whose NFA equals fallback_max_nfa (NFA <= bound) and
    drops it under a bound a hair smaller (9 inliers of 12 matches on 640 x 384: NFA ~1.46)."""
    from geocon_torch.epipolar.protocol import evaluate, log10_nfa, protocol_stages

    v = float(log10_nfa(np.array([12]), np.array([9]), (384, 640), 1.0)[0])
    bound = float(10 ** v)
    assert np.log10(bound) == v  # the bound round-trips exactly (the boundary is reachable)
    meas = _meas([12], [9])
    at = EpipolarConfig(fallback_max_nfa=bound)
    assert evaluate(meas, protocol_stages(at)[1], at, (384, 640)).valid.tolist() == [True]
    below = EpipolarConfig(fallback_max_nfa=bound * (1 - 1e-9))
    att = evaluate(meas, protocol_stages(below)[1], below, (384, 640))
    assert att.valid.tolist() == [False] and att.failures[0].startswith("inlier set not")


def test_one_valid_primary_pair_ends_the_protocol():
    """A clip with a single valid pair in the primary stage is scored on it: no fallback stage
    is measured, the trio is that pair's and fallback_used is False."""
    from geocon_torch.epipolar.protocol import run_protocol

    cfg = EpipolarConfig()
    calls = []

    def measure(stage, ids):
        calls.append(stage.method)
        # primary: pair 0 valid (9 of 12), pair 1 too few matches; any fallback: all valid
        return [_meas([12, 3], [9, 0]) if stage.method == "sift" else _meas([50, 50], [45, 45])
                for _ in ids]

    (out,) = run_protocol(measure, [np.array([[0, 1], [1, 2]])], cfg,
                          [{"analysis_size": [384, 640]}])
    assert calls == ["sift"]
    assert out["method"] == "sift" and out["fallback_used"] is False
    assert out["valid_pairs"] == 1 and out["epipolar_inlier_rate"] == pytest.approx(9 / 12)
