"""Epipolar paths pinned by constructed inputs (mutation audit s24, round 9): the RANSAC
threshold of the torch and OpenCV WorldAtlas paths away from its 1 px default, the per-pair
mean / median Sampson errors, the Lowe ratio test at an exact tie, OpenCV's FM_RANSAC fallback,
the LK stage's corner count, the integer-factor area resize, the "linear" resize of both paths,
GVGC's frame resize, clip length, pair errors and aggregates."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from geocon_torch.config import EpipolarConfig
from geocon_torch.epipolar import gvgc, opencv_path as op, torch_path as tp
from geocon_torch.epipolar.protocol import protocol_stages
from geocon_torch.geometry import sampson_distance
from geocon_torch.types import Clip, Correspondences, Fit

N_GOOD, N_OFF, OFF_PX = 45, 15, 4.3


def _two_views(seed: int = 0, shift: float = OFF_PX):
    """Exact F of two views of 60 random 3D points (x2 exact for the first 45); the last 15
    x2 moved ``shift`` px along their epipolar line's normal (4.3: Sampson distance ~3.04
    px)."""
    rng = np.random.default_rng(seed)
    n = N_GOOD + N_OFF
    K = np.array([[300.0, 0, 160], [0, 300, 120], [0, 0, 1]])

    def proj(P, R, t):
        x = (K @ ((R @ P.T).T + t).T).T
        return x[:, :2] / x[:, 2:]

    P = np.c_[rng.uniform(-2, 2, n), rng.uniform(-1.5, 1.5, n), rng.uniform(4, 9, n)]
    th = 0.05
    R2 = np.array([[np.cos(th), 0, np.sin(th)], [0, 1, 0], [-np.sin(th), 0, np.cos(th)]])
    t2 = np.array([0.5, 0.1, 0.05])
    x1, x2 = proj(P, np.eye(3), np.zeros(3)), proj(P, R2, t2)
    tx = np.array([[0, -t2[2], t2[1]], [t2[2], 0, -t2[0]], [-t2[1], t2[0], 0]])
    Ki = np.linalg.inv(K)
    F = Ki.T @ tx @ R2 @ Ki
    F /= np.linalg.norm(F)
    line = (F @ np.c_[x1, np.ones(n)].T).T
    normal = line[:, :2] / np.linalg.norm(line[:, :2], axis=1, keepdims=True)
    x2[N_GOOD:] += shift * normal[N_GOOD:]
    return F, x1, x2


def _sampson(F, x1, x2) -> np.ndarray:
    return sampson_distance(torch.from_numpy(F)[None], torch.from_numpy(x1)[None],
                            torch.from_numpy(x2)[None])[0].numpy()


class _OnePairBatch:
    """What ``torch_path.measure_batch`` reads of a ``_Batch``: one clip, one pair (0, 1), the
    given matches; 200 / 150 keypoints detected in frames 0 / 1."""

    def __init__(self, config, x1, x2):
        self.config, self.device = config, torch.device("cpu")
        self.pairs = {0: np.array([[0, 1]])}
        self.source_pairs = {0: np.array([[0, 1]])}
        n = len(x1)
        self.corr = Correspondences(torch.from_numpy(x1)[None].float(),
                                    torch.from_numpy(x2)[None].float(),
                                    torch.ones(1, n, dtype=torch.bool),
                                    torch.linspace(1.0, 0.5, n)[None], torch.tensor([[0, 1]]),
                                    torch.tensor([200]), torch.tensor([150]))

    def groups(self, ids):
        return [list(ids)]

    def correspondences(self, stage, group):
        return self.corr, None


def _measure_torch(threshold_px: float, x1, x2):
    cfg = EpipolarConfig(ransac={"threshold_px": threshold_px})
    return tp.measure_batch(_OnePairBatch(cfg, x1, x2), protocol_stages(cfg)[0], [0])[0]


def test_torch_path_counts_inliers_at_the_configured_threshold():
    """Matches at ~3.04 px Sampson distance are outliers at ``threshold_px`` 2 and inliers at
    4 (the threshold is a distance in px, not its square: both agree only at 1 px)."""
    F, x1, x2 = _two_views()
    d = _sampson(F, x1, x2)
    assert d[:N_GOOD].max() < 1e-9 and 2.9 < d[N_GOOD:].min() and d[N_GOOD:].max() < 3.2
    two = _measure_torch(2.0, x1, x2)
    assert two.fitted.tolist() == [True] and two.inliers.tolist() == [N_GOOD]
    assert two.kp_left.tolist() == [200] and two.kp_right.tolist() == [150]
    assert _measure_torch(4.0, x1, x2).inliers.tolist() == [N_GOOD + N_OFF]


def test_torch_path_median_and_mean_sampson_error_over_the_inliers(monkeypatch):
    """With the fit replaced by the exact F (inliers: Sampson distance <= the threshold), the
    pair's median and mean errors are those of the 60 distances: 45 zeros and 15 at ~3.04 px
    give median 0 and mean sum / 60."""
    F, x1, x2 = _two_views()

    def exact_fit(x1_, x2_, mask, scores, *, threshold, **kw):
        model = torch.from_numpy(F)[None].to(x1_.dtype)
        inl = (sampson_distance(model, x1_, x2_) <= threshold) & mask
        one = torch.ones(1, dtype=torch.long)
        return Fit("F", model, inl, torch.zeros_like(x1_[..., 0]), one.bool(),
                   inl.sum(1), one, torch.zeros(1, dtype=x1_.dtype))

    monkeypatch.setattr(tp, "ransac_fundamental", exact_fit)
    d = _sampson(F, x1.astype(np.float32).astype(np.float64),
                 x2.astype(np.float32).astype(np.float64))
    m = _measure_torch(4.0, x1, x2)
    assert m.inliers.tolist() == [60]
    assert m.median_error[0] == pytest.approx(float(np.median(d)), abs=1e-6)
    assert m.mean_error[0] == pytest.approx(float(d.mean()), rel=1e-6)
    assert m.mean_error[0] == pytest.approx(N_OFF * 3.05 / 60, abs=0.02)
    m = _measure_torch(2.0, x1, x2)
    assert m.inliers.tolist() == [N_GOOD] and m.mean_error[0] < 1e-3


def test_opencv_path_counts_inliers_at_the_configured_threshold():
    """``cv2.findFundamentalMat`` gets ``threshold_px`` itself: the ~3.04 px matches are
    outliers at 2 px, inliers at 4 px."""
    F, x1, x2 = _two_views()
    p1, p2 = x1.astype(np.float32), x2.astype(np.float32)
    for thr, want in ((2.0, N_GOOD), (4.0, N_GOOD + N_OFF)):
        _, mask = op._fundamental(p1, p2, EpipolarConfig(ransac={"threshold_px": thr}).ransac)
        assert int(mask.sum()) == want and int(mask[:N_GOOD].sum()) == N_GOOD


def test_opencv_sampson_stats_are_median_then_mean():
    """x-translation F (epipolar lines y = const): Sampson distance |dy| / sqrt(2); offsets 0,
    1, 2, 2, 14 px give median 2 / sqrt 2 and mean 3.8 / sqrt 2."""
    F = np.array([[0.0, 0, 0], [0, 0, -1], [0, 1, 0]])
    p1 = np.array([[10, 20], [30, 40], [50, 60], [70, 80], [90, 5]], np.float32)
    dy = np.array([0, 1, 2, 2, 14], np.float32)
    p2 = p1 + np.stack([np.full(5, 7, np.float32), dy], 1)
    med, mean = op.sampson_stats(F, p1, p2)
    assert med == pytest.approx(2 / np.sqrt(2)) and mean == pytest.approx(19 / 5 / np.sqrt(2))


def test_opencv_falls_back_to_fm_ransac_when_usac_raises(monkeypatch):
    """Where USAC_MAGSAC raises (OpenCV 5.1 on near-still pairs), the fit is FM_RANSAC's with
    the same settings, not an estimator error."""
    F, x1, x2 = _two_views()
    p1, p2 = x1.astype(np.float32), x2.astype(np.float32)
    real = cv2.findFundamentalMat
    calls = []

    def usac_fails(a, b, method=None, **kw):
        calls.append(method)
        if method == cv2.USAC_MAGSAC:
            raise cv2.error("model.empty()")
        return real(a, b, method=method, **kw)

    rc = EpipolarConfig(ransac={"threshold_px": 2.0}).ransac
    ref = real(p1, p2, method=cv2.FM_RANSAC, ransacReprojThreshold=2.0,
               confidence=float(rc.confidence), maxIters=int(rc.max_iterations))
    monkeypatch.setattr(op.cv2, "findFundamentalMat", usac_fails)
    Fh, mask = op._fundamental(p1, p2, rc)
    assert calls == [cv2.USAC_MAGSAC, cv2.FM_RANSAC]
    np.testing.assert_array_equal(mask, ref[1])
    assert int(mask.sum()) == N_GOOD and np.allclose(Fh, ref[0])


def _kp(x: float) -> cv2.KeyPoint:
    return cv2.KeyPoint(float(x), 2.0 * float(x), 1.0)


def test_lowe_ratio_test_is_strict_at_an_exact_tie():
    """Query 0: nearest 4, second 5 (4 == 0.8 * 5: refused, ``d1 < ratio d2``); query 1:
    nearest 3, second 5 (kept). A frame j with one keypoint gives no 2-NN: no match."""
    d2 = np.zeros((2, 128), np.float32)
    d2[0, 0], d2[1, 1] = 4.0, 5.0
    d1 = np.zeros((2, 128), np.float32)  # query 0: distances 4, 5
    d1[1, 0] = 1.0  # query 1: distances 3, sqrt(1 + 25) = 5.1
    kp1, kp2 = [_kp(1), _kp(2)], [_kp(10), _kp(20)]
    p1, p2 = op.ratio_matches(kp1, d1, kp2, d2, 0.8)
    assert p1.tolist() == [[2.0, 4.0]] and p2.tolist() == [[10.0, 20.0]]
    p1, p2 = op.ratio_matches(kp1, d1, kp2[:1], d2[:1], 0.8)
    assert p1.shape == (0, 2) and p2.shape == (0, 2)


def test_lk_stage_counts_coverage_against_the_corners_of_frame_i():
    """Tracking stage of the torch path: both sides of the pair report the corners detected in
    frame i (as the OpenCV path), not those of frame j (here frame j has more corners)."""
    g = torch.Generator().manual_seed(0)
    base = (torch.rand(1, 1, 24, 32, generator=g) * 255)
    base = torch.nn.functional.interpolate(base, size=(96, 128), mode="bilinear")[0, 0]
    f0 = base.clone()
    f0[:, 64:] = 128.0  # right half flat in frame 0: fewer corners there
    f1 = torch.roll(base, 1, dims=1)
    rgb = torch.stack([f0, f1]).round().to(torch.uint8)[:, None].repeat(1, 3, 1, 1)
    clip = Clip(frames=rgb, fps=24.0, content_mask=torch.ones(96, 128, dtype=torch.bool),
                frame_indices=torch.arange(2), source_size=(96, 128))
    cfg = EpipolarConfig()
    batch = tp._Batch([clip], [np.array([[0, 1]])], cfg, torch.device("cpu"), "opencv-sift")
    stage = [s for s in protocol_stages(cfg) if not s.uses_descriptors][0]
    corr, guard = batch.correspondences(stage, [0])
    gray, pairs = batch.stacked([0])
    raw = tp.lk_tracks(gray, pairs, **cfg.tracking.lk_kwargs(cfg.sift_features, "torch"))
    assert int(raw.num_kp2[0]) > int(raw.num_kp1[0]) > 0  # frame j has more corners
    assert corr.num_kp1.tolist() == raw.num_kp1.tolist()
    assert corr.num_kp2.tolist() == raw.num_kp1.tolist()


def test_patch_ncc_at_the_frame_border_replicates_the_edge_on_both_paths():
    """Tracks 0-2 px from the border (window 11: patches reach 5 px outside the frame): the
    OpenCV path's patches replicate the edge pixels, as the torch path's sampler does."""
    rng = np.random.default_rng(1)
    fi = rng.random((40, 50)).astype(np.float32)
    fj = rng.random((40, 50)).astype(np.float32)
    x1 = np.array([[0, 0], [1, 20], [49, 39], [25, 0], [48, 2], [0, 39]], np.float64)
    x2 = x1[::-1].copy()
    gray = torch.from_numpy(np.stack([fi, fj])[:, None]).double()
    ours = tp.patch_ncc(gray, torch.tensor([[0, 1]]), torch.from_numpy(x1)[None],
                        torch.from_numpy(x2)[None], 11)[0].numpy()
    ref = op.patch_ncc_opencv(fi, fj, x1, x2, 11)
    np.testing.assert_allclose(ref, ours, atol=1e-5)


def test_integer_factor_area_resize_is_bit_exact_with_opencv():
    """An integer-factor INTER_AREA downscale rounds half up ((sum + n / 2) // n) as OpenCV's
    fast path: every level equal (a 2 x 2 block summing to 2 -> 0.5 -> 1, not 0)."""
    img = np.random.default_rng(0).integers(0, 256, (64, 128)).astype(np.uint8)
    img[:2, :2] = [[0, 1], [0, 1]]
    ref = cv2.resize(img, (64, 32), interpolation=cv2.INTER_AREA)
    ours = tp.resize_gray(torch.from_numpy(img).float()[None, None], (32, 64), "area")[0, 0]
    np.testing.assert_array_equal(ours.numpy(), ref.astype(np.float32))
    assert ours[0, 0] == 1.0


def _rgb_clip(h: int, w: int, seed: int = 0) -> Clip:
    rgb = np.random.default_rng(seed).integers(0, 256, (h, w, 3)).astype(np.uint8)
    return Clip(frames=torch.from_numpy(rgb).permute(2, 0, 1)[None].contiguous(), fps=24.0,
                content_mask=torch.ones(h, w, dtype=torch.bool), frame_indices=torch.arange(1),
                source_size=(h, w))


def test_linear_resize_interpolation_in_both_paths():
    """``resize_interpolation="linear"``: the OpenCV path is cv2 gray + INTER_LINEAR (not
    INTER_AREA); the torch path (half-pixel centres) equals it within one grey level."""
    clip = _rgb_clip(60, 100)
    rgb = op.clip_frame_rgb(clip, 0)
    cfg = EpipolarConfig(max_width=64, resize_interpolation="linear")
    gray = cv2.cvtColor(rgb, cv2.COLOR_RGB2GRAY)
    ours = op.analysis_gray(rgb, cfg)
    np.testing.assert_array_equal(ours, cv2.resize(gray, (64, 38),
                                                   interpolation=cv2.INTER_LINEAR))
    assert not np.array_equal(ours, cv2.resize(gray, (64, 38), interpolation=cv2.INTER_AREA))
    t = (tp.analysis_frames(clip, [0], cfg, torch.device("cpu"))[0, 0] * 255).round().numpy()
    diff = np.abs(t - ours)
    assert t.shape == (38, 64) and diff.max() <= 1 and (diff > 0).mean() < 0.25


def test_gvgc_torch_frames_resize_as_cv2_within_one_level():
    """GVGC's torch frames: bilinear with half-pixel centres (cv2.resize) then RGB2GRAY, equal
    to the OpenCV path's frames within one grey level."""
    clip = _rgb_clip(60, 100, seed=1)
    cfg = EpipolarConfig(gvgc={"size": (36, 64)})
    ours = gvgc.gvgc_frames_torch(clip, cfg, torch.device("cpu"))[0, 0].numpy() * 255
    ref = cv2.cvtColor(gvgc.gvgc_frame_rgb(clip, 0, cfg), cv2.COLOR_RGB2GRAY)
    diff = np.abs(ours.round() - ref)
    assert ours.shape == (36, 64) and diff.max() <= 1 and (diff > 0).mean() < 0.25


def test_gvgc_torch_fit_uses_the_3px_threshold_and_line_distance_stats():
    """GVGC's batched fit (real RANSAC, residual "epipolar_max"): 15 of 60 matches 2 px off
    their epipolar line are inliers at the default 3 px, outliers at 1 px; over the 60 inliers
    the one-sided line distances give mean 15 x 2 / 60 = 0.5 and RMSE sqrt(15 x 4 / 60) = 1."""
    _, x1, x2 = _two_views(shift=2.0)
    x1, x2 = torch.from_numpy(x1)[None], torch.from_numpy(x2)[None]
    mask, seeds = torch.ones(1, 60, dtype=torch.bool), torch.zeros(1, dtype=torch.long)
    n, valid, mean, med, rmse = gvgc._fit_line_errors(x1, x2, mask, seeds, EpipolarConfig())
    assert n.tolist() == [60] and valid.tolist() == [True]
    assert mean.tolist() == pytest.approx([0.5], abs=1e-3)
    assert rmse.tolist() == pytest.approx([1.0], abs=1e-3) and med.tolist()[0] < 1e-3
    one_px = EpipolarConfig(gvgc={"ransac": {"threshold_px": 1.0}})
    assert gvgc._fit_line_errors(x1, x2, mask, seeds, one_px)[0].tolist() == [N_GOOD]


def _frames_clip(t: int) -> Clip:
    return Clip(frames=torch.zeros(t, 3, 8, 8, dtype=torch.uint8), fps=24.0,
                content_mask=torch.ones(8, 8, dtype=torch.bool), frame_indices=torch.arange(t),
                source_size=(8, 8))


def test_gvgc_needs_exactly_min_frames():
    cfg = EpipolarConfig()
    assert gvgc.too_short(_frames_clip(71), cfg, "torch") is None
    short = gvgc.too_short(_frames_clip(70), cfg, "opencv")
    assert short["status"] == "not_applicable" and "clip has 70" in short["reason"]


def test_gvgc_pair_errors_at_eight_matches():
    """8 matches (the 8-point minimum) and no F: "fundamental matrix estimation failed"; 7:
    "not enough feature matches"."""
    cfg = EpipolarConfig()
    rec = gvgc.pair_record(10, 0, 10, (100, 90), 8, 0, None, cfg)
    assert rec["error"] == "fundamental matrix estimation failed" and not rec["valid"]
    rec = gvgc.pair_record(10, 0, 10, (100, 90), 7, 0, None, cfg)
    assert rec["error"] == "not enough feature matches"


def test_gvgc_aggregate_closed_form():
    """Clip summary over the valid pairs: mean of means, median of medians, root mean square of
    the RMSEs, mean MAE / keep rate / counts; invalid pairs left out."""
    def rec(mean, med, rmse, keep, n, pts, valid=True):
        return {"valid": valid, "mean_error": mean, "median_error": med, "rmse": rmse,
                "mae": mean, "keep_rate": keep, "num_inliers": n, "num_pts": pts}

    out = gvgc.aggregate([rec(1.0, 1.0, 3.0, 0.5, 10, 20), rec(2.0, 2.0, 4.0, 0.25, 20, 80),
                          rec(6.0, 9.0, 0.0, 1.0, 30, 30), rec(50.0, 50, 50, 1, 1, 1, False)])
    assert out["pairs"] == 4 and out["valid_pairs"] == 3
    assert out["mean_error"] == pytest.approx(3.0) and out["median_error"] == 2.0
    assert out["rmse"] == pytest.approx(np.sqrt(25.0 / 3.0))
    assert out["keep_rate"] == pytest.approx(1.75 / 3) and out["num_inliers"] == 20.0
    assert out["num_pts"] == pytest.approx(130 / 3) and out["mae"] == pytest.approx(3.0)
