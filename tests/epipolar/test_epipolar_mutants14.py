"""The NFA's distinct-correspondence counts pinned by mutation testing round 14 (audit s27):
the 1e-3 px location grid (rounded, not floored), the torch path's int64 location keys, the
raw counts that still decide "enough matches / inliers", both paths' distinct (n, k) on a
synthetic two-view scene with repeated matches, and small checks of the shared helpers."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from geocon_torch.config import EpipolarConfig
from geocon_torch.epipolar import opencv_path as op
from geocon_torch.epipolar import torch_path as tp
from geocon_torch.epipolar.protocol import (PRIMARY, PairMeasurements, Stage,
                                            distinct_correspondences, evaluate, protocol_stages)
from geocon_torch.types import Correspondences


def _both(x1, x2, mask=None):
    """(numpy count, torch count) of one pair's distinct correspondences."""
    x1, x2 = np.array(x1, np.float64), np.array(x2, np.float64)  # copies
    m = np.ones(len(x1), bool) if mask is None else np.asarray(mask, bool)
    ref = distinct_correspondences(x1[m], x2[m])
    got = tp.distinct_counts(torch.from_numpy(x1)[None], torch.from_numpy(x2)[None],
                             torch.from_numpy(m)[None])
    return ref, int(got[0])


def test_locations_are_one_within_the_1e_3_px_grid_rounded():
    """Frame i: 99.9996 and 100.0003 px both round to 100.000 (one location), 100.002 is
    another. A 1e-2 px grid would merge all three, a 1e-5 px one split the first two, and
    flooring (99.999 vs 100.000) would split them too. Frame j is all distinct."""
    xs = np.array([99.9996, 100.0003, 100.002])
    x1 = np.stack([xs, np.full(3, 50.0)], 1)
    x2 = np.array([[10.0, 10.0], [20.0, 20.0], [30.0, 30.0]])
    assert _both(x1, x2) == (2, 2)
    # the same along y, and in frame j (the count is the min of both frames)
    assert _both(x2, x1[:, ::-1]) == (2, 2)
    # 0.0004 px apart on either side of a grid point: still one location
    assert _both([[5.0004, 1.0], [4.9996, 1.0]], [[1.0, 1.0], [2.0, 2.0]]) == (1, 1)


def test_torch_location_keys_do_not_collide():
    """The torch path packs a grid location into one int64 (x * 2^32 + y): swapped
    coordinates (1, 2) / (2, 1) px, and (0.001, 0) / (0, 65.536) px (equal keys were y
    packed with 2^16) are distinct locations, as NumPy counts them."""
    x1 = np.array([[1.0, 2.0], [2.0, 1.0], [0.001, 0.0], [0.0, 65.536], [3.0, 3.0]])
    x2 = np.array([[10.0, 10.0], [20.0, 20.0], [30.0, 30.0], [40.0, 40.0], [50.0, 50.0]])
    assert _both(x1, x2) == (5, 5)
    assert _both(x2, x1) == (5, 5)
    # the grid division is float64 as NumPy's: 20000.0009 px is grid 20000001, not 20000000
    far = np.array([[20000.0, 3.0], [20000.0009, 3.0]])
    assert _both(far, far[::-1] + 5.0) == (2, 2)


def test_torch_masked_out_entries_never_count_or_hide_a_location():
    """Padding entries (mask False) share a valid entry's location, or sit at (0, 0) beside a
    valid point at (0, 0): the count is that of the valid entries alone."""
    x1 = np.array([[0.0, 0.0], [0.0, 0.0], [7.0, 7.0], [7.0, 7.0], [0.0, 0.0], [9.0, 9.0]])
    x2 = np.array([[0.0, 0.0], [0.0, 0.0], [8.0, 8.0], [8.0, 8.0], [0.0, 0.0], [6.0, 6.0]])
    mask = np.array([False, True, False, True, False, False])
    assert _both(x1, x2, mask) == (2, 2)
    # a row with nothing valid counts 0, a row with everything valid counts its locations
    assert _both(x1, x2, np.zeros(6, bool)) == (0, 0)
    assert _both(x1, x2) == (3, 3)


def _one(v):
    return np.array([v], np.int64)


def test_enough_matches_and_inliers_use_the_raw_counts():
    """Only the NFA reads the distinct counts: 12 matches (11 distinct) with 8 inliers (7
    distinct) pass the primary stage's min_matches 12 and min_inliers 8 (no NFA test there)."""
    cfg = EpipolarConfig()
    assert (cfg.min_matches, cfg.min_inliers, cfg.primary_max_nfa) == (12, 8, None)
    meas = PairMeasurements(np.array([[0, 1]]), _one(100), _one(100), _one(12),
                            np.array([True]), _one(8), np.full(1, 0.25), np.full(1, 0.3),
                            distinct_matches=_one(11), distinct_inliers=_one(7))
    att = evaluate(meas, protocol_stages(cfg)[0], cfg)
    assert att.valid.tolist() == [True] and att.failures == [None]
    assert att.log10_nfa is None


def _scene(seed: int = 0, n_in: int = 40, n_out: int = 10):
    """Two views of ``n_in`` 3D points (exact x2) plus ``n_out`` matches whose x2 moved 25 px
    off the epipolar line, in pixels of a 320 x 240 frame."""
    rng = np.random.default_rng(seed)
    K = np.array([[300.0, 0, 160], [0, 300, 120], [0, 0, 1]])
    n = n_in + n_out
    P = np.c_[rng.uniform(-2, 2, n), rng.uniform(-1.5, 1.5, n), rng.uniform(4, 9, n)]
    th = 0.05
    R = np.array([[np.cos(th), 0, np.sin(th)], [0, 1, 0], [-np.sin(th), 0, np.cos(th)]])
    t = np.array([0.5, 0.1, 0.05])

    def proj(X):
        x = (K @ X.T).T
        return x[:, :2] / x[:, 2:]

    x1, x2 = proj(P), proj((R @ P.T).T + t)
    tx = np.array([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]])
    F = np.linalg.inv(K).T @ tx @ R @ np.linalg.inv(K)
    line = (F @ np.c_[x1, np.ones(n)].T).T
    normal = line[:, :2] / np.linalg.norm(line[:, :2], axis=1, keepdims=True)
    x2[n_in:] += 25.0 * normal[n_in:]
    return x1.astype(np.float32), x2.astype(np.float32)


# rows repeated (a keypoint matched again): 6 inliers and 2 outliers
REPEAT = np.array([0, 1, 2, 3, 4, 5, 42, 45])


def _repeated_pairs():
    """Pair 0: the scene's 50 matches + 8 repeats (58 matches, 50 distinct, 46 inliers of
    which 40 distinct). Pair 1: 8 matches + 2 repeats (10 < min_matches 12: not fitted)."""
    x1, x2 = _scene()
    a = (np.concatenate([x1, x1[REPEAT]]), np.concatenate([x2, x2[REPEAT]]))
    b = (np.concatenate([x1[:8], x1[:2]]), np.concatenate([x2[:8], x2[:2]]))
    return a, b


class _Batch:
    """What ``torch_path.measure_batch`` reads of a ``_Batch``: one clip, the given pairs."""

    def __init__(self, config, pairs):
        self.config, self.device = config, torch.device("cpu")
        self.pairs = {0: np.array([[0, 1], [1, 2]])}
        self.source_pairs = {0: np.array([[0, 1], [1, 2]])}
        n = max(len(p[0]) for p in pairs)
        x1 = torch.zeros(len(pairs), n, 2)
        x2 = torch.zeros(len(pairs), n, 2)
        mask = torch.zeros(len(pairs), n, dtype=torch.bool)
        for k, (p1, p2) in enumerate(pairs):
            x1[k, :len(p1)], x2[k, :len(p2)] = torch.from_numpy(p1), torch.from_numpy(p2)
            mask[k, :len(p1)] = True
        self.corr = Correspondences(x1, x2, mask, torch.linspace(1.0, 0.5, n).expand(
            len(pairs), n).contiguous(), torch.tensor([[0, 1], [1, 2]]),
            torch.tensor([200, 200]), torch.tensor([150, 150]))

    def groups(self, ids):
        return [list(ids)]

    def correspondences(self, stage, group):
        return self.corr, None


def _check_counts(m):
    assert m.matches.tolist() == [58, 10]
    assert m.fitted.tolist() == [True, False]
    assert m.inliers.tolist() == [46, 0]
    assert m.distinct_matches.tolist() == [50, 8]
    assert m.distinct_inliers.tolist() == [40, 0]
    assert m.nfa_counts()[0].tolist() == [50, 8] and m.nfa_counts()[1].tolist() == [40, 0]


def test_torch_path_counts_distinct_matches_and_inliers():
    cfg = EpipolarConfig()
    m = tp.measure_batch(_Batch(cfg, _repeated_pairs()), protocol_stages(cfg)[0], [0])[0]
    _check_counts(m)
    # the primary NFA test reads (50, 40): log10((n - 7) C(n, k) C(k, 7) alpha^(k - 7))
    alpha = 2.0 * math.hypot(240, 320) / (240 * 320)
    want = math.log10(43 * math.comb(50, 40) * math.comb(40, 7) * alpha ** 33)
    att = evaluate(m, Stage(PRIMARY, 0.75, 12), EpipolarConfig(primary_max_nfa=0.01), (240, 320))
    assert att.log10_nfa[0] == pytest.approx(want, abs=1e-9) and np.isinf(att.log10_nfa[1])


def test_opencv_path_counts_distinct_matches_and_inliers(monkeypatch):
    from types import SimpleNamespace

    cfg = EpipolarConfig()
    pairs = _repeated_pairs()
    monkeypatch.setattr(op, "_match", lambda state, i, j, ratio: (200, 150) + pairs[i])
    state = SimpleNamespace(config=cfg, pairs=np.array([[0, 1], [1, 2]]))
    _check_counts(op._measure_clip(state, protocol_stages(cfg)[0]))


def test_guard_note_when_exactly_min_tracks_passed_forward_backward():
    """8 forward-backward tracks (= tracking.min_tracks) of which the patch-NCC guard keeps 7:
    the guard (not the tracker) left too few, so the pair gets the guard's note."""
    from geocon_torch.epipolar.protocol import tracking_guard

    cfg = EpipolarConfig()
    stage = protocol_stages(cfg)[-1]
    assert stage.min_matches == 8
    fb_ok = torch.zeros(2, 9, dtype=torch.bool)
    fb_ok[0, :8] = fb_ok[1, :9] = True
    ncc = torch.full((2, 9), 0.9, dtype=torch.float64)
    ncc[:, 0] = 0.1
    scores = torch.full((2, 9), 0.5, dtype=torch.float64)
    g = tracking_guard(fb_ok, scores, ncc, stage, cfg)
    assert g.kept.sum(1).tolist() == [7, 8]
    assert g.notes == ["not enough LK tracks with patch NCC >= 0.8", None]


def test_a_backend_note_is_the_failure_of_a_pair_that_was_not_fitted():
    """An estimator error note (OpenCV path) replaces "fundamental matrix estimation failed"
    for a pair with enough matches that was not fitted; a valid pair ignores its note."""
    cfg = EpipolarConfig()
    note = "fundamental matrix estimation error: boom"
    meas = PairMeasurements(np.array([[0, 1], [1, 2], [2, 3]]), np.full(3, 100),
                            np.full(3, 100), np.array([20, 20, 20]),
                            np.array([False, False, True]), np.array([0, 0, 15]),
                            np.zeros(3), np.zeros(3), notes=[note, None, "ignored"])
    att = evaluate(meas, protocol_stages(cfg)[0], cfg)
    assert att.failures == [note, "fundamental matrix estimation failed", None]


def _left_to_right(parts):
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def test_padded_sum_is_64_entry_chunks_added_left_to_right():
    """``padded_sum``: chunks of 64 entries from position 0, each summed alone, the chunk
    totals added left to right -- bit for bit, and the same bits with 3796 trailing zeros."""
    from geocon_torch.geometry._reduce import padded_sum

    g = torch.Generator().manual_seed(0)
    x = (torch.randn(4, 300, generator=g) * torch.logspace(-3, 3, 300)).float()
    chunks = torch.nn.functional.pad(x, (0, 20)).view(4, 5, 64).sum(-1)
    want = _left_to_right([chunks[:, i] for i in range(5)])
    assert torch.equal(padded_sum(x), want)
    assert torch.equal(padded_sum(torch.nn.functional.pad(x, (0, 3796))), want)
    assert padded_sum(x[:, :64]).tolist() == x[:, :64].sum(-1).tolist()
    assert padded_sum(x[:, :0]).tolist() == [0.0] * 4


def test_padded_gram_is_256_entry_gemms_added_left_to_right():
    """``padded_gram``: one GEMM per 256 entries, products added left to right (bits), leading
    dims broadcast, the same bits with trailing zeros, and zeros (r, c) for N = 0."""
    from geocon_torch.geometry._reduce import padded_gram

    g = torch.Generator().manual_seed(1)
    a = (torch.randn(2, 3, 600, generator=g) * torch.logspace(-3, 3, 600)).float()
    b = torch.randn(1, 4, 600, generator=g)
    pa, pb = torch.nn.functional.pad(a, (0, 168)), torch.nn.functional.pad(b, (0, 168))
    want = _left_to_right([pa[..., i:i + 256].contiguous()
                           @ pb[..., i:i + 256].transpose(-1, -2).contiguous()
                           for i in (0, 256, 512)])
    got = padded_gram(a, b)
    assert got.shape == (2, 3, 4) and torch.equal(got, want)
    assert torch.equal(padded_gram(pa, pb), want)
    torch.testing.assert_close(got.double(), a.double() @ b.double().transpose(-1, -2),
                               rtol=1e-4, atol=1e-3)
    empty = padded_gram(a[..., :0], b[..., :0])
    assert empty.shape == (2, 3, 4) and not empty.any()


def test_soft_consistency_is_the_mean_of_its_forward_pair_scores():
    """A clip's score is the mean over its T - 1 pairs (t, t + 1), frame t first, of the soft
    pair score, each clip of the batch on its own pairs."""
    from geocon_torch.config import SoftConsistencyConfig
    from geocon_torch.measures.soft import soft_pair_scores
    from geocon_torch.metrics.functional import soft_background_consistency

    x = torch.rand(2, 3, 1, 24, 24, dtype=torch.float64,
                   generator=torch.Generator().manual_seed(3))
    x[0, 1] = torch.roll(x[0, 0], (1, 2), (-2, -1))  # clip 0, pair 0: a consistent shift
    cfg = SoftConsistencyConfig()
    fwd = [[float(soft_pair_scores(x[b, t:t + 1], x[b, t + 1:t + 2], cfg)[0]) for t in (0, 1)]
           for b in (0, 1)]
    bwd = float(soft_pair_scores(x[1, 1:2], x[1, 0:1], cfg)[0])
    assert abs(bwd - fwd[1][0]) > 1e-3  # the direction matters
    assert fwd[0][0] - fwd[0][1] > 0.1  # the shift scores above noise
    got = soft_background_consistency(x)
    assert got.dtype == torch.float64
    assert got.tolist() == pytest.approx([np.mean(f) for f in fwd], abs=1e-9)


def test_shared_integer_and_number_checks_at_their_bounds():
    from geocon_torch._checks import check_integer, check_number
    from geocon_torch.errors import ArgumentTypeError, InputError

    assert check_integer(3, "n", 3) == 3 and check_integer(np.int64(5), "n", 3) == 5
    assert check_integer(-7, "n", None) == -7
    with pytest.raises(InputError, match=r"^n must be an integer >= 3, got 2 \(w\)$"):
        check_integer(2, "n", 3, " (w)")
    for bad in (True, 4.0):
        with pytest.raises(ArgumentTypeError, match=r"^n must be an integer >= 3, got "):
            check_integer(bad, "n", 3)
    assert check_number(0, "p", 0, 1) == 0.0 and check_number(1.0, "p", 0, 1) == 1.0
    assert check_number(0.999, "p", 0, 1, high_open=True) == 0.999
    with pytest.raises(InputError, match=r"^p must be in \[0, 1\), got 1.0$"):
        check_number(1.0, "p", 0, 1, high_open=True)
    with pytest.raises(InputError, match=r"^p must be < 2, got 2$"):
        check_number(2, "p", high=2, high_open=True)
    with pytest.raises(InputError, match=r"^p must be <= 2, got 2.5$"):
        check_number(2.5, "p", high=2)


def test_shared_tensor_shape_checks():
    from geocon_torch._checks import (check_mask, check_matrices, check_points,
                                      check_same_shape)
    from geocon_torch.errors import InputError, ShapeError

    pts = torch.zeros(2, 5, 2)
    check_points(pts)
    check_points(torch.zeros(2, 5, 3, dtype=torch.float64), dim=3)
    for bad, why in ((torch.zeros(2, 5, 3), r"\(P, N, 2\)"), (torch.zeros(5, 2), r"\(P, N, 2\)"),
                     (pts.half(), "float32 or float64"), (pts.long(), "float32 or float64")):
        with pytest.raises(ShapeError, match=why):
            check_points(bad)
    check_matrices(torch.zeros(4, 3, 3))
    for bad in (torch.zeros(4, 3, 4), torch.zeros(4, 4, 3)):
        with pytest.raises(ShapeError, match=r"\(P, 3, 3\)"):
            check_matrices(bad)
    m = check_mask(torch.tensor([[1.0, 0.0, 1.0, 0.0, 1.0]] * 2), pts)
    assert m.dtype == torch.bool and m[0].tolist() == [True, False, True, False, True]
    with pytest.raises(InputError, match="mask must be bool"):  # 2.0 is no 0 / 1 mask value
        check_mask(torch.tensor([[1.0, 0.0, 2.0, 0.0, 1.0]] * 2), pts)
    assert check_mask(None, pts).all() and check_mask(None, pts).shape == (2, 5)
    with pytest.raises(ShapeError, match=r"mask must have shape \(2, 5\)"):
        check_mask(torch.ones(2, 4, dtype=torch.bool), pts)
    check_same_shape([pts, pts.clone()], ["a", "b"])
    with pytest.raises(ShapeError, match="shapes must match"):
        check_same_shape([pts, pts, pts[:1]], ["a", "b", "c"])
    with pytest.raises(ShapeError, match="shapes must match"):
        check_same_shape([pts, pts[:1], pts[:, :1]], ["a", "b", "c"])


def test_shared_device_and_retired_argument_checks():
    from geocon_torch._checks import check_device, retired_argument
    from geocon_torch.errors import ArgumentTypeError, InputError

    assert check_device(None) is None and check_device(" AUTO ") is None
    assert check_device("cpu") == "cpu"
    if not torch.backends.mps.is_available():
        assert check_device("mps", available=False) == "mps"  # only the name is checked
        with pytest.raises(InputError, match="MPS is not available"):
            check_device("mps")
    with pytest.raises(InputError, match="is not a torch device"):
        check_device("gpu", available=False)
    with pytest.warns(DeprecationWarning, match="argument path= is deprecated"):
        assert retired_argument({"path": "torch"}, "path", "implementation", None) == "torch"
    assert retired_argument({}, "path", "implementation", "opencv") == "opencv"
    with pytest.raises(ArgumentTypeError, match="unexpected keyword argument"):
        retired_argument({"pth": 1}, "path", "implementation", None)


def test_relaxed_stage_runs_when_only_its_min_matches_differs():
    """ratio 0.9 (>= relaxed_ratio 0.85) but min_matches 12 vs relaxed_min_matches 8: the
    relaxed stage is a different attempt (0.9, 8) and runs."""
    stages = protocol_stages(EpipolarConfig(ratio=0.9))
    assert [(s.method, s.ratio, s.min_matches) for s in stages] == [
        ("sift", 0.9, 12), ("relaxed_matching", 0.9, 8), ("shi_tomasi_lk", None, 8)]


def test_per_pair_log10_nfa_only_where_finite():
    """A fitted fallback pair with 7 inliers (NFA +inf: 7 points always fit) reports its
    inliers but no log10_nfa (JSON has no infinity); 12 of 14 reports the closed form."""
    from geocon_torch.epipolar.protocol import per_pair_records

    cfg = EpipolarConfig()
    meas = PairMeasurements(np.array([[0, 1], [1, 2]]), np.full(2, 100), np.full(2, 100),
                            np.array([14, 14]), np.array([True, True]), np.array([7, 12]),
                            np.zeros(2), np.zeros(2))
    att = evaluate(meas, protocol_stages(cfg)[1], cfg, (240, 320))
    recs = per_pair_records(att)
    assert recs[0]["inliers"] == 7 and "log10_nfa" not in recs[0]
    alpha = 2.0 * math.hypot(240, 320) / (240 * 320)
    want = math.log10(7 * math.comb(14, 12) * math.comb(12, 7) * alpha ** 5)
    assert recs[1]["log10_nfa"] == pytest.approx(want, abs=1e-9)


def test_opencv_lk_stage_keeps_only_the_tracks_the_guard_kept(monkeypatch):
    """OpenCV path, LK stage: with the patch NCC of every other track forced to 0 (< min_ncc
    0.8), the tracks handed to the fit are exactly the guard's kept ones."""
    from types import SimpleNamespace
    from helpers import shifted_texture_frames

    frames = (shifted_texture_frames(2, 64, 80) * 255).round().to(torch.uint8)[:, 0].numpy()
    cfg = EpipolarConfig()
    state = SimpleNamespace(config=cfg, pairs=np.array([[0, 1]]),
                            gray={0: frames[0], 1: frames[1]})
    real = op.patch_ncc_opencv

    def half_fail(gi, gj, x1, x2, window):
        ncc = real(gi, gj, x1, x2, window)
        ncc[::2] = 0.0
        return ncc

    monkeypatch.setattr(op, "patch_ncc_opencv", half_fail)
    [(corners, p1, p2)], guard = op._tracks(state, protocol_stages(cfg)[-1])
    tracked = int(guard.extra["tracked_points"][0])
    assert tracked > 20 and corners >= tracked
    assert len(p1) == len(p2) == int(guard.kept.sum()) < tracked
    # the kept tracks move with the content: (-1, -1) px from frame i to frame j
    np.testing.assert_allclose(p2 - p1, -1.0, atol=0.1)


def test_opencv_lk_stage_counts_coverage_against_corners_on_both_sides(monkeypatch):
    """LK stage of the OpenCV path: keypoints left AND right are the corners of frame i."""
    from geocon_torch.epipolar.protocol import TrackingGuard

    x1, x2 = _scene()
    guard = TrackingGuard(torch.ones(1, 50, dtype=torch.bool),
                          {"tracked_points": np.array([50])}, [None])
    monkeypatch.setattr(op, "_tracks", lambda state, stage: ([(300, x1, x2)], guard))
    from types import SimpleNamespace

    cfg = EpipolarConfig()
    state = SimpleNamespace(config=cfg, pairs=np.array([[0, 1]]))
    m = op._measure_clip(state, protocol_stages(cfg)[-1])
    assert m.kp_left.tolist() == [300] and m.kp_right.tolist() == [300]
    assert m.matches.tolist() == [50] and m.inliers.tolist() == [40]


def test_opencv_errors_of_a_pair_with_exactly_min_inliers(monkeypatch):
    """A pair fitted with exactly 8 inliers (a valid pair) reports the median / mean Sampson
    distance of those 8 (x-translation F: |dy| / sqrt 2), not 0."""
    from types import SimpleNamespace

    F = np.array([[0.0, 0, 0], [0, 0, -1], [0, 1, 0]])
    p1 = np.stack([np.arange(12) * 10.0, np.arange(12) * 7.0 + 3], 1).astype(np.float32)
    dy = np.array([0, 0.2, 0.2, 0.4, 0.4, 0.6, 0.8, 1.0, 30, 40, 50, 60], np.float32)
    p2 = p1 + np.stack([np.full(12, 5.0, np.float32), dy], 1)
    mask = (np.arange(12) < 8).astype(np.uint8)[:, None]
    monkeypatch.setattr(op, "_match", lambda state, i, j, ratio: (100, 100, p1, p2))
    monkeypatch.setattr(op, "_fundamental", lambda a, b, rc: (F, mask))
    cfg = EpipolarConfig()
    state = SimpleNamespace(config=cfg, pairs=np.array([[0, 1]]))
    m = op._measure_clip(state, protocol_stages(cfg)[0])
    assert m.fitted.tolist() == [True] and m.inliers.tolist() == [8]
    assert m.median_error[0] == pytest.approx(0.4 / math.sqrt(2), rel=1e-5)
    assert m.mean_error[0] == pytest.approx(3.6 / 8 / math.sqrt(2), rel=1e-5)
    assert evaluate(m, protocol_stages(cfg)[0], cfg).valid.tolist() == [True]


def test_opencv_estimator_error_is_the_pairs_failure(monkeypatch):
    """Where both estimators raise, the pair is not fitted and its failure is the OpenCV error
    text (not the generic "estimation failed")."""
    import cv2
    from types import SimpleNamespace

    x1, x2 = _scene()

    def boom(a, b, rc):
        raise cv2.error("degenerate configuration")

    monkeypatch.setattr(op, "_match", lambda state, i, j, ratio: (100, 100, x1, x2))
    monkeypatch.setattr(op, "_fundamental", boom)
    cfg = EpipolarConfig()
    state = SimpleNamespace(config=cfg, pairs=np.array([[0, 1]]))
    m = op._measure_clip(state, protocol_stages(cfg)[0])
    assert m.fitted.tolist() == [False] and m.inliers.tolist() == [0]
    att = evaluate(m, protocol_stages(cfg)[0], cfg)
    assert att.failures[0].startswith("fundamental matrix estimation error: ")
    assert "degenerate configuration" in att.failures[0]
