"""The shared WorldAtlas protocol: pair layout, analysis size, aggregation, stage order, and the
torch path's OpenCV-exact grayscale / area resize."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from geocon_torch.config import EpipolarConfig
from geocon_torch.epipolar.protocol import (PairMeasurements, analysis_size, clip_values,
                                            decode_plan, evaluate, protocol_stages, run_protocol)
from geocon_torch.io.pairs import worldatlas_pairs
from geocon_torch.epipolar.torch_path import area_matrix, gray_uint8_levels, resize_gray


def test_select_pairs_reference_layout():
    # 35 adjacent pairs of a 36-frame clip, 8 kept at round(linspace(0, 34, 8))
    got = worldatlas_pairs(36, 1, 8)
    starts = [0, 5, 10, 15, 19, 24, 29, 34]
    assert got.tolist() == [[s, s + 1] for s in starts]
    # stride 2 steps by 2 (non-overlapping), as the public reference
    assert worldatlas_pairs(7, 2, 8).tolist() == [[0, 2], [2, 4], [4, 6]]
    assert worldatlas_pairs(5, 1, 8).tolist() == [[0, 1], [1, 2], [2, 3], [3, 4]]
    assert worldatlas_pairs(1, 1, 8).shape == (0, 2)
    assert worldatlas_pairs(2, 2, 8).shape == (0, 2)
    assert worldatlas_pairs(3, 2, 8).tolist() == [[0, 2]]


def test_decode_plan_maps_back_to_full_clip_pairs():
    cfg = EpipolarConfig()
    indices, local = decode_plan(456, cfg)
    assert len(indices) == 16
    np.testing.assert_array_equal(indices[local], worldatlas_pairs(456, 1, 8))


@pytest.mark.parametrize("hw,expected", [((480, 720), (427, 640)), ((240, 320), (240, 320)),
                                         ((576, 768), (480, 640)), ((640, 800), (512, 640)),
                                         ((272, 640), (272, 640))])
def test_analysis_size(hw, expected):
    assert analysis_size(*hw, 640) == expected


def _meas(**kw):
    base = dict(pairs=np.array([[0, 1], [1, 2], [2, 3], [3, 4]]),
                kp_left=np.array([100, 50, 10, 200]), kp_right=np.array([80, 60, 10, 300]),
                matches=np.array([40, 30, 5, 100]), fitted=np.array([True, True, False, True]),
                inliers=np.array([36, 6, 0, 90]), median_error=np.array([0.2, 0.1, 0.0, 0.4]),
                mean_error=np.array([0.3, 0.2, 0.0, 0.5]))
    base.update(kw)
    return PairMeasurements(**base)


def test_evaluate_and_clip_values_closed_form():
    cfg = EpipolarConfig()
    stage = protocol_stages(cfg)[0]
    att = evaluate(_meas(), stage, cfg)
    # pair 1 has 6 < 8 inliers, pair 2 has 5 < 12 matches
    assert att.valid.tolist() == [True, False, False, True]
    assert att.failures == [None, "not enough epipolar inliers", "not enough feature matches", None]
    v = clip_values(att, cfg)
    assert v["epipolar_error"] == pytest.approx(np.median([0.2, 0.4]))
    assert v["epipolar_error_score"] == pytest.approx(1 - 0.3 / 5)
    assert v["epipolar_inlier_rate"] == pytest.approx((36 / 40 + 90 / 100) / 2)
    assert v["feature_match_coverage"] == pytest.approx((36 / 80 + 90 / 200) / 2)
    # coverage is capped at 1 and the score clipped to [0, 1]
    att = evaluate(_meas(kp_left=np.array([20, 50, 10, 200]),
                         median_error=np.array([7.0, 0.1, 0.0, 9.0])), stage, cfg)
    v = clip_values(att, cfg)
    assert v["feature_match_coverage"] == pytest.approx((1.0 + 90 / 200) / 2)
    assert v["epipolar_error"] == pytest.approx(8.0) and v["epipolar_error_score"] == 0.0


def test_stages_follow_config():
    cfg = EpipolarConfig()
    stages = protocol_stages(cfg)
    assert [s.method for s in stages] == ["sift", "relaxed_matching", "shi_tomasi_lk"]
    assert (stages[1].ratio, stages[1].min_matches) == (0.85, 8)
    assert stages[2].min_matches == 8 and stages[2].ratio is None
    # ratio above 0.85 keeps it; identical relaxed settings are skipped
    same = EpipolarConfig(ratio=0.9, min_matches=8)
    assert [s.method for s in protocol_stages(same)] == ["sift", "shi_tomasi_lk"]
    assert [s.method for s in protocol_stages(EpipolarConfig(fallback_enabled=False))] == ["sift"]


def test_run_protocol_batches_stages_and_records_trail():
    cfg = EpipolarConfig()
    pairs = [worldatlas_pairs(5, 1, 8), worldatlas_pairs(5, 1, 8), worldatlas_pairs(1, 1, 8)]
    calls = []
    bad = _meas(matches=np.array([3, 3, 3, 3]))

    def measure(stage, ids):
        calls.append((stage.method, list(ids)))
        if stage.method == "sift":  # clip 0 valid at once, clip 1 needs the LK fallback
            return [_meas() if k == 0 else bad for k in ids]
        return [bad if stage.method == "relaxed_matching" else _meas() for _ in ids]

    size = {"path": "x", "analysis_size": [240, 320]}
    out = run_protocol(measure, pairs, cfg, [size, size, {**size, "reason": "too short"}])
    assert calls == [("sift", [0, 1]), ("relaxed_matching", [1]), ("shi_tomasi_lk", [1])]
    assert out[0]["status"] == "ok" and out[0]["method"] == "sift"
    assert out[0]["fallback_used"] is False and out[0]["reason"] is None
    assert out[1]["status"] == "ok" and out[1]["method"] == "shi_tomasi_lk"
    assert out[1]["fallback_used"] is True
    assert "no valid epipolar frame pairs with descriptor matching" in out[1]["reason"]
    assert [a["method"] for a in out[1]["attempts"]] == ["sift", "relaxed_matching",
                                                        "shi_tomasi_lk"]
    assert out[1]["attempts"][0]["failures"] == {"not enough feature matches": 4}
    assert out[2]["status"] == "not_applicable" and out[2]["reason"] == "too short"
    assert out[2]["epipolar_error"] is None and out[2]["pairs"] == 0
    assert len(out[0]["per_pair"]) == 4 and out[0]["per_pair"][1]["valid"] is False


def test_gray_is_bit_exact_with_opencv():
    v = torch.arange(256, dtype=torch.uint8)
    r, g, b = torch.meshgrid(v, v[::3], v[::5], indexing="ij")
    rgb = torch.stack([r, g, b]).reshape(1, 3, 256, -1)
    ours = gray_uint8_levels(rgb)[0, 0].numpy()
    ref = cv2.cvtColor(rgb[0].permute(1, 2, 0).contiguous().numpy(), cv2.COLOR_RGB2GRAY)
    np.testing.assert_array_equal(ours, ref.astype(np.float32))


@pytest.mark.parametrize("src,dst", [((480, 720), (427, 640)), ((576, 768), (480, 640)),
                                     ((64, 128), (32, 64))])
def test_area_resize_matches_opencv(src, dst):
    img = np.random.default_rng(0).integers(0, 256, src).astype(np.uint8)
    ref = cv2.resize(img, dst[::-1], interpolation=cv2.INTER_AREA).astype(np.float64)
    ref_f = cv2.resize(img.astype(np.float32), dst[::-1], interpolation=cv2.INTER_AREA)
    t = torch.from_numpy(img).float()[None, None]
    exact = torch.einsum("hy,yx,wx->hw", area_matrix(src[0], dst[0], torch.device("cpu")),
                         t[0, 0].double(), area_matrix(src[1], dst[1], torch.device("cpu")))
    np.testing.assert_allclose(exact.numpy(), ref_f, atol=1e-3)  # the weights are OpenCV's
    ours = resize_gray(t, dst, "area")[0, 0].numpy()
    diff = np.abs(ours - ref)
    assert diff.max() <= 1.0 and (diff > 0).mean() < 0.06  # rounding ties only
    rows = area_matrix(10, 4, torch.device("cpu")).sum(1)
    assert rows.allclose(torch.ones(4, dtype=torch.float64))


def test_section_arguments_are_checked():
    from geocon_torch.config import GeoConConfig
    from geocon_torch.sections.epipolar import clip_from_frames, epipolar_section
    from geocon_torch.errors import GeoConError, ShapeError

    clip = clip_from_frames(torch.zeros(1, 1, 16, 16))  # float gray, 1 frame
    assert clip.frames.dtype == torch.uint8 and clip.frames.shape == (1, 3, 16, 16)
    s = epipolar_section(clip, GeoConConfig())  # a whole GeoConConfig is accepted
    assert s["status"] == "not_applicable" and s["implementation"] == "opencv"
    with pytest.raises(GeoConError, match="preset"):
        epipolar_section(clip, preset="geocon")
    with pytest.raises(GeoConError, match="implementation"):
        epipolar_section(clip, implementation="gpu")
    with pytest.raises(GeoConError, match="Clip"):
        epipolar_section(torch.zeros(2, 3, 8, 8))
    with pytest.raises(ShapeError, match="pairs"):
        epipolar_section(clip_from_frames(torch.zeros(3, 3, 16, 16)), pairs=[[0, 5]])
    with pytest.raises(ShapeError):
        clip_from_frames(torch.zeros(2, 4, 8, 8))


def test_pair_seeds_depend_on_source_frames_and_stage_only():
    from geocon_torch.epipolar.protocol import pair_seeds

    got = pair_seeds(0, np.array([[3, 4], [10, 11]]), "sift")
    assert got.tolist() == [3 * 7919 + 4, 10 * 7919 + 11]
    assert pair_seeds(2, np.array([[3, 4]]), "relaxed_matching").tolist() == [
        (2 * 1000003 + 104729 + 3 * 7919 + 4) % 2 ** 32]
    assert pair_seeds(0, np.array([[3, 4]]), "shi_tomasi_lk")[0] != got[0]
    huge = pair_seeds(2 ** 40 + 5, np.array([[2 ** 33, 1]]), "gvgc")  # wraps mod 2^32
    assert int(huge[0]) == ((2 ** 40 + 5) * 1000003 + 3 * 104729 + 2 ** 33 * 7919 + 1) % 2 ** 32


def test_source_frames_of_reads_every_clip_at_once():
    """The source frame numbers of a batch of clips (one host transfer): each clip's
    ``frame_indices``, or positions 0..T-1 when they do not list one number per frame."""
    from types import SimpleNamespace
    from geocon_torch.epipolar.protocol import source_frames, source_frames_of
    from geocon_torch.io import clips_from_tensor

    clips = clips_from_tensor(torch.zeros(2, 9, 3, 16, 24, dtype=torch.uint8), long_side=None,
                              stride=2)
    odd = SimpleNamespace(frame_indices=torch.tensor([7, 8]), num_frames=3)  # inconsistent
    got = source_frames_of(clips + [odd])
    assert [g.tolist() for g in got] == [[0, 2, 4, 6, 8], [0, 2, 4, 6, 8], [0, 1, 2]]
    assert all(g.dtype == np.int64 for g in got)
    assert source_frames(clips[1]).tolist() == [0, 2, 4, 6, 8]
    assert source_frames_of([]) == []


def test_zncc_closed_form(dtype):
    from geocon_torch.features.lk import zncc

    a = torch.tensor([[1.0, 2.0, 4.0, 8.0], [0.5, 0.5, 0.5, 0.5], [1.0, -1.0, 1.0, -1.0]],
                     dtype=dtype)
    b = torch.stack([2 * a[0] + 3, a[0], torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=dtype)])
    got = zncc(a, b)
    assert got.dtype == torch.float64
    assert got[0].item() == pytest.approx(1.0)  # affine brightness change
    assert got[1].item() == 0.0  # a flat patch correlates with nothing
    assert got[2].item() == pytest.approx(0.0, abs=1e-12)  # orthogonal zero-mean patterns
    assert zncc(a[:1], -a[:1] + 5).item() == pytest.approx(-1.0)
    x, y = torch.randn(2, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    assert zncc(x, y).item() == pytest.approx(np.corrcoef(x.numpy(), y.numpy())[0, 1])


def test_patch_ncc_torch_and_opencv_sample_the_same_patches(device, dtype):
    """Frame j is frame i moved by (+3, -2) px. Tracks at the true positions correlate at 1 on
    both paths; 1 px off, noise decorrelates; at sub-pixel positions (multiples of 1/32 px, where
    cv2.remap's fixed-point weights are exact) the two samplers agree."""
    from geocon_torch.epipolar.opencv_path import patch_ncc_opencv
    from geocon_torch.epipolar.torch_path import patch_ncc

    rng = np.random.default_rng(0)
    big = rng.random((70, 90)).astype(np.float32)
    fi, fj = big[10:60, 10:80], big[12:62, 7:77]  # content at x in frame i is at x + (3, -2)
    x1 = np.stack([rng.integers(8, 60, 40), rng.integers(8, 40, 40)], -1).astype(np.float64)
    x1[-10:] += rng.integers(0, 32, (10, 2)) / 32.0  # sub-pixel positions
    gray = torch.from_numpy(np.stack([fi, fj])[:, None]).to(device, dtype)
    pairs = torch.tensor([[0, 1], [0, 1]], device=device)
    shift = np.array([3.0, -2.0])
    x1t = torch.from_numpy(np.stack([x1, x1])).to(device, dtype)
    x2t = torch.from_numpy(np.stack([x1 + shift, x1 + shift + [1.0, 0.0]])).to(device, dtype)
    ours = patch_ncc(gray, pairs, x1t, x2t, 11).cpu().numpy()
    assert ours.shape == (2, 40)
    np.testing.assert_allclose(ours[0, :30], 1.0, atol=1e-5)
    assert np.abs(ours[1]).max() < 0.6 and np.median(np.abs(ours[1])) < 0.3
    for p in range(2):
        ref = patch_ncc_opencv(fi, fj, x1t[p].cpu().numpy(), x2t[p].cpu().numpy(), 11)
        np.testing.assert_allclose(ours[p], ref, atol=2e-4 if dtype == torch.float32 else 1e-6)
    # chunking over pairs does not change the numbers
    chunked = patch_ncc(gray, pairs, x1t, x2t, 11, max_elements=1).cpu().numpy()
    np.testing.assert_array_equal(chunked, ours)


def test_tracking_guard_closed_form():
    from geocon_torch.epipolar.protocol import tracking_guard
    from geocon_torch.features.lk import ncc_offsets

    cfg = EpipolarConfig()
    stage = protocol_stages(cfg)[-1]
    fb_ok = torch.zeros(3, 12, dtype=torch.bool)
    fb_ok[0, :10] = fb_ok[1, :12] = fb_ok[2, :4] = True
    ncc = torch.full((3, 12), 0.95, dtype=torch.float64)
    ncc[1, :6] = 0.1  # pair 1: 12 tracks, only 6 photometrically consistent
    scores = torch.full((3, 12), 1.0 / (1.0 + 0.5), dtype=torch.float64)  # FB error 0.5 px
    g = tracking_guard(fb_ok, scores, ncc, stage, cfg)
    assert g.kept.sum(1).tolist() == [10, 6, 4]
    assert g.extra["tracked_points"].tolist() == [10, 12, 4]
    np.testing.assert_allclose(g.extra["median_forward_backward_error"], 0.5)
    np.testing.assert_allclose(g.extra["median_track_ncc"], [0.95, 0.525, 0.95])
    # only pair 1 lost its pass to the guard (pair 2 had too few tracks anyway)
    assert g.notes == [None, "not enough LK tracks with patch NCC >= 0.8", None]
    off = tracking_guard(fb_ok, scores, ncc, stage, EpipolarConfig(tracking={"min_ncc": -1.0}))
    assert torch.equal(off.kept, fb_ok) and off.notes == [None] * 3
    assert ncc_offsets(3).tolist() == [[-1, -1], [0, -1], [1, -1], [-1, 0], [0, 0], [1, 0],
                                       [-1, 1], [0, 1], [1, 1]]
    with pytest.raises(ValueError, match="odd"):
        protocol_stages(EpipolarConfig(tracking={"ncc_window": 10}))
    with pytest.raises(ValueError, match="odd"):
        ncc_offsets(10)


def test_log10_nfa_closed_form_and_fallback_validity():
    import math

    from geocon_torch.epipolar.protocol import log10_nfa

    alpha = 2 * math.hypot(384, 640) / (384 * 640)
    got = log10_nfa(np.array([9, 300, 9, 20]), np.array([8, 290, 7, 30]), (384, 640), 1.0)
    assert got[0] == pytest.approx(math.log10(2 * math.comb(9, 8) * math.comb(8, 7) * alpha))
    assert got[1] == pytest.approx(math.log10(293 * math.comb(300, 290) * math.comb(290, 7))
                                   + 283 * math.log10(alpha))
    assert np.isinf(got[2:]).all()  # 7 points always fit an F; k > n is no inlier set
    assert got[0] == pytest.approx(-0.06, abs=0.01)  # 8 of 9: ~0.87 chance fits expected
    # 9 inliers of 12 matches on a 640x384 frame: NFA ~ 1.4 -> invalid in a fallback stage,
    # while the primary protocol keeps the spec's ">= 8 inliers" rule
    cfg = EpipolarConfig()
    primary, relaxed, _ = protocol_stages(cfg)
    meas = _meas(matches=np.array([12, 30, 5, 100]), inliers=np.array([9, 29, 0, 90]),
                 fitted=np.array([True, True, False, True]))
    assert evaluate(meas, primary, cfg).valid.tolist() == [True, True, False, True]
    att = evaluate(meas, relaxed, cfg, (384, 640))
    assert att.valid.tolist() == [False, True, False, True]
    assert att.failures[0] == "inlier set not meaningful (NFA > 0.01)"
    assert np.isinf(att.log10_nfa[2])
    assert 10 ** att.log10_nfa[0] == pytest.approx(1.4, abs=0.1)
    lenient = evaluate(meas, relaxed, EpipolarConfig(fallback_max_nfa=10.0), (384, 640))
    assert lenient.valid.tolist() == [True, True, False, True]
    with pytest.raises(ValueError, match="image size"):
        evaluate(meas, relaxed, cfg)


def test_gvgc_pair_validity_at_min_inliers_and_keep_rate():
    """A GVGC pair is valid with exactly epipolar.min_inliers (8) inliers, not with 7; its keep
    rate is inliers / ratio-filtered matches."""
    from geocon_torch.epipolar.gvgc import pair_record

    cfg = EpipolarConfig()
    stats = {"mean_error": 1.0, "median_error": 1.0, "rmse": 1.0, "mae": 1.0}
    rec = pair_record(10, 0, 10, (100, 90), 20, cfg.min_inliers, stats, cfg)
    assert rec["valid"] and rec["keep_rate"] == 8 / 20 and rec["num_inliers"] == 8
    rec = pair_record(10, 0, 10, (100, 90), 20, cfg.min_inliers - 1, stats, cfg)
    assert not rec["valid"] and rec["error"] == "not enough epipolar inliers"


def test_gvgc_torch_line_errors_closed_form(monkeypatch):
    """The torch GVGC path's per-pair statistics over the fit's inliers, with the fit replaced by
    the exact x-translation F (epipolar lines y = y1: the line distance is |y2 - y1|): offsets
    0, 1, 2, 2, 5 px give mean 2, median 2, RMSE sqrt(6.8); an outlier (50 px) and padding
    are left out."""
    from geocon_torch.epipolar import gvgc
    from geocon_torch.types import Fit

    F = torch.tensor([[0.0, 0, 0], [0, 0, -1], [0, 1, 0]], dtype=torch.float64)[None]
    x1 = torch.tensor([[[10.0, 20.0], [30.0, 40.0], [50.0, 60.0], [70.0, 80.0], [90.0, 5.0],
                        [15.0, 25.0], [0.0, 0.0]]], dtype=torch.float64)
    dy = torch.tensor([0.0, 1.0, -2.0, 2.0, 5.0, 50.0, 0.0], dtype=torch.float64)
    x2 = x1 + torch.stack([torch.full_like(dy, 7.0), dy], -1)
    mask = torch.tensor([[True] * 6 + [False]])
    inliers = torch.tensor([[True] * 5 + [False, False]])
    one = torch.ones(1, dtype=torch.long)
    fit = Fit("F", F, inliers, torch.zeros(1, 7, dtype=torch.float64), one.bool(), one * 5,
              one, torch.zeros(1, dtype=torch.float64))
    monkeypatch.setattr(gvgc, "ransac_fundamental", lambda *a, **k: fit)
    n, valid, mean, med, rmse = gvgc._fit_line_errors(x1, x2, mask, torch.zeros(1),
                                                      EpipolarConfig())
    assert n.tolist() == [5] and valid.tolist() == [True]
    assert mean.tolist() == pytest.approx([2.0]) and med.tolist() == pytest.approx([2.0])
    assert rmse.tolist() == pytest.approx([6.8 ** 0.5])
    ref = gvgc.line_error_stats(F[0].numpy(), x1[0, :5].numpy(), x2[0, :5].numpy())
    assert ref["rmse"] == pytest.approx(6.8 ** 0.5) and ref["mean_error"] == pytest.approx(2.0)
