"""Epipolar trio on grounded synthetic clips (geocon_torch.synth) and on degenerate input:
translation with parallax, its rubber-sheet corruption, random noise, textureless clips, the
fallback trail, the gvgc preset."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from geocon_torch.config import EpipolarConfig
from geocon_torch.sections.epipolar import clip_from_frames, epipolar_section
from geocon_torch.io.pairs import gvgc_pairs


@pytest.fixture(scope="module")
def grounded71():
    """C3 translation with parallax (truck past objects at several depths), 71 frames."""
    from geocon_torch.synth import render_scene

    return render_scene("C3", num_frames=71, size=(144, 256), seed=0).frames


@pytest.fixture(scope="module")
def translation(grounded71):
    return clip_from_frames(grounded71[:9], name="c3")


@pytest.fixture(scope="module")
def rubber(grounded71):
    from geocon_torch.synth import apply_corruption

    return clip_from_frames(apply_corruption(grounded71[:9], "rubber_sheet", 0.5, seed=0),
                            name="c3-rubber")


@pytest.fixture(scope="module")
def clean_section(translation):
    return epipolar_section(translation, EpipolarConfig(), implementation="opencv")


def test_translation_clip_is_epipolar_consistent(clean_section):
    s = clean_section
    assert s["status"] == "ok" and s["method"] == "sift" and not s["fallback_used"]
    # OpenCV 5's USAC_MAGSAC occasionally throws on a clean pair ("!model.empty()"); the
    # protocol records such a pair as failed, with the OpenCV message, and goes on
    assert s["pairs"] == 8 and s["valid_pairs"] >= 6
    assert all(p["valid"] or p["error"] for p in s["per_pair"])
    assert s["epipolar_error"] < 0.5
    assert s["epipolar_inlier_rate"] > 0.9
    assert 0 < s["feature_match_coverage"] <= 1
    assert s["epipolar_error_score"] == pytest.approx(1 - s["epipolar_error"] / 5)
    assert s["analysis_size"] == [144, 256] and s["implementation"] == "opencv"
    valid = [p for p in s["per_pair"] if p["valid"]]
    errs = [p["median_epipolar_error"] for p in valid]
    assert s["epipolar_error"] == pytest.approx(float(np.median(errs)))
    assert s["epipolar_inlier_rate"] == pytest.approx(
        np.mean([p["inliers"] / p["good_matches"] for p in valid]))


def test_rubber_sheet_raises_error_and_lowers_inlier_rate(clean_section, rubber):
    bad = epipolar_section(rubber, EpipolarConfig(), implementation="opencv")
    assert bad["status"] == "ok"
    assert bad["epipolar_error"] > clean_section["epipolar_error"]
    assert bad["epipolar_inlier_rate"] < clean_section["epipolar_inlier_rate"]


def test_translation_torch_path(translation, clean_section):
    s = epipolar_section(translation, EpipolarConfig(),
                         implementation="torch", features="opencv-sift")
    assert s["status"] == "ok" and s["implementation"] == "torch" and s["valid_pairs"] >= 7
    assert s["epipolar_error"] < 0.5 and s["epipolar_inlier_rate"] > 0.9
    assert abs(s["epipolar_inlier_rate"] - clean_section["epipolar_inlier_rate"]) <= 0.03


def _noise(size, frames=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    h, w = size
    return clip_from_frames(torch.randint(0, 256, (frames, 3, h, w), generator=g,
                                          dtype=torch.uint8), name=f"noise-{w}x{h}")


@pytest.fixture(scope="module")
def noise_clip():
    return _noise((120, 160))


def test_random_noise_descriptor_protocol_not_applicable(noise_clip):
    s = epipolar_section(noise_clip, EpipolarConfig(fallback_enabled=False),
                         implementation="opencv")
    assert s["status"] == "not_applicable"
    assert s["epipolar_error"] is None and s["epipolar_inlier_rate"] is None
    assert s["feature_match_coverage"] is None and s["epipolar_error_score"] is None
    assert s["valid_pairs"] == 0 and s["pairs"] == 4
    assert "no valid epipolar frame pairs" in s["reason"]
    assert "not enough feature matches" in s["reason"]


def _assert_noise_not_applicable(s, pairs):
    """Every stage tried and failed; the LK tracker found forward-backward-consistent tracks
    but the patch-NCC guard rejected (nearly) all of them."""
    assert s["status"] == "not_applicable" and s["fallback_used"] is False
    assert s["method"] is None and s["valid_pairs"] == 0 and s["pairs"] == pairs
    for key in ("epipolar_error", "epipolar_error_score", "epipolar_inlier_rate",
                "feature_match_coverage"):
        assert s[key] is None
    assert [a["method"] for a in s["attempts"]] == ["sift", "relaxed_matching", "shi_tomasi_lk"]
    assert all(a["valid_pairs"] == 0 for a in s["attempts"])
    for stage in ("sift:", "relaxed_matching:", "shi_tomasi_lk:"):
        assert stage in s["reason"]
    assert "not enough LK tracks with patch NCC >= 0.8" in s["reason"]
    assert s["attempts"][2]["failures"] == {"not enough LK tracks with patch NCC >= 0.8": pairs}
    for rec in s["per_pair"]:  # the tracker alone would have passed these pairs on
        assert rec["tracked_points"] >= 8 and rec["good_matches"] < 8
        assert abs(rec["median_track_ncc"]) < 0.3  # independent noise: NCC ~ 0


@pytest.mark.parametrize("size", [(120, 160), (384, 640)])
def test_random_noise_not_applicable(size):
    _assert_noise_not_applicable(epipolar_section(_noise(size), EpipolarConfig(),
                                                  implementation="opencv"),
                                 4)


@pytest.fixture(scope="module")
def noise3():
    return _noise((120, 160), frames=3, seed=1)


@pytest.fixture(scope="module")
def noise3_torch_section(noise3):
    return epipolar_section(noise3, EpipolarConfig(),
                            implementation="torch", features="opencv-sift")


def test_random_noise_not_applicable_torch_path(noise3_torch_section):
    assert noise3_torch_section["implementation"] == "torch"
    _assert_noise_not_applicable(noise3_torch_section, 2)


@pytest.mark.slow
def test_random_noise_not_applicable_torch_path_large():
    s = epipolar_section(_noise((384, 640)), EpipolarConfig(), implementation="torch",
                         features="opencv-sift")
    _assert_noise_not_applicable(s, 4)


def test_random_noise_without_ncc_guard_reports_the_lk_fallback(noise_clip):
    """With the guard disabled (tracking.min_ncc = -1, the public reference's tracker alone) LK
    tracks noise to spurious forward-backward-consistent minima and F fits a part of them: the
    values then come from the fallback and the trail says so."""
    s = epipolar_section(noise_clip, EpipolarConfig(tracking={"min_ncc": -1.0}),
                         implementation="opencv")
    assert [a["method"] for a in s["attempts"]] == ["sift", "relaxed_matching", "shi_tomasi_lk"]
    assert s["attempts"][0]["valid_pairs"] == 0 and s["attempts"][1]["valid_pairs"] == 0
    assert s["status"] == "ok" and s["fallback_used"] and s["method"] == "shi_tomasi_lk"
    assert "no valid epipolar frame pairs with descriptor matching" in s["reason"]
    assert s["feature_match_coverage"] < 0.25  # far below the clean clips (> 0.5)
    assert all(r["good_matches"] == r["tracked_points"] for r in s["per_pair"])


def test_uniform_grey_not_applicable_with_full_trail():
    s = epipolar_section(clip_from_frames(torch.full((5, 3, 120, 160), 128, dtype=torch.uint8)),
                         EpipolarConfig(), implementation="opencv")
    assert s["status"] == "not_applicable" and s["fallback_used"] is False
    assert s["method"] is None and s["epipolar_error"] is None
    assert [a["method"] for a in s["attempts"]] == ["sift", "relaxed_matching", "shi_tomasi_lk"]
    assert all(a["valid_pairs"] == 0 for a in s["attempts"])
    assert "shi_tomasi_lk" in s["reason"] and "not enough LK tracks" in s["reason"]


@pytest.fixture(scope="module")
def low_texture():
    """A smooth low-contrast texture (+-10 grey levels) panning 4 px per frame: no SIFT
    keypoints survive the contrast threshold, Shi-Tomasi corners track fine."""
    import cv2

    rng = np.random.default_rng(0)
    base = cv2.GaussianBlur(rng.random((300, 420)).astype(np.float32), (0, 0), 6)
    base = (base - base.min()) / (base.max() - base.min())
    frames = [np.round(128 + 20 * (base[30:270, 4 * t:4 * t + 320] - 0.5)).astype(np.uint8)
              for t in range(5)]
    return clip_from_frames(torch.from_numpy(np.stack(frames))[:, None], name="low-texture")


@pytest.fixture(scope="module")
def low_texture_sections(low_texture):
    return {impl: epipolar_section(low_texture, EpipolarConfig(), implementation=impl,
                                   features="opencv-sift") for impl in ("opencv", "torch")}


@pytest.mark.parametrize("path", ["opencv", "torch"])
def test_low_texture_uses_tracking_fallback(low_texture_sections, path):
    s = low_texture_sections[path]
    assert s["status"] == "ok", s["reason"]
    assert s["fallback_used"] is True and s["method"] == "shi_tomasi_lk"
    assert s["reason"].startswith("no valid epipolar frame pairs with descriptor matching")
    assert [a["valid_pairs"] for a in s["attempts"]][:2] == [0, 0]
    assert s["epipolar_inlier_rate"] > 0.9 and s["epipolar_error"] < 0.5
    for rec in s["per_pair"]:
        assert rec["keypoints_left"] == rec["keypoints_right"]  # counted against detected corners
        # the patch-NCC guard keeps real texture: NCC ~ 1, (almost) every track survives
        assert rec["median_track_ncc"] > 0.99
        assert rec["tracked_points"] >= rec["good_matches"] >= 0.95 * rec["tracked_points"]
        assert rec["good_matches"] >= 8 and rec["median_forward_backward_error"] < 0.1


def test_torch_tracking_stage_batch_matches_one_by_one(noise3, noise3_torch_section,
                                                       low_texture, low_texture_sections):
    """A noise clip and the low-texture clip in one torch batch (both reach the LK stage, one
    batched lk_tracks + patch NCC + RANSAC): each equals its run alone, bit for bit."""
    from geocon_torch.sections.epipolar import epipolar_sections

    got = epipolar_sections([noise3, low_texture], EpipolarConfig(), implementation="torch",
                            features="opencv-sift")
    assert got[0]["status"] == "not_applicable" and got[1]["status"] == "ok"
    assert got[0]["per_pair"] == noise3_torch_section["per_pair"]
    one = low_texture_sections["torch"]
    assert got[1]["epipolar_error"] == one["epipolar_error"]
    assert got[1]["per_pair"] == one["per_pair"] and got[1]["attempts"] == one["attempts"]


def test_one_frame_clip_not_applicable():
    s = epipolar_section(clip_from_frames(torch.zeros(1, 3, 32, 32, dtype=torch.uint8)))
    assert s["status"] == "not_applicable" and "1 frame" in s["reason"] and s["pairs"] == 0


def test_gvgc_pair_layout_matches_original():
    rows = gvgc_pairs(EpipolarConfig().gvgc.min_frames, EpipolarConfig().gvgc.intervals)
    assert rows.shape == (66, 3)
    for d, step in zip((60, 50, 40, 30, 20, 10), (1, 2, 3, 4, 5, 6)):
        sel = rows[rows[:, 0] == d]
        assert sel[:, 1].tolist() == list(range(0, 11 * step, step))
        assert (sel[:, 2] - sel[:, 1] == d).all() and sel[:, 2].max() <= 70


def _check_gvgc_fields(s):
    assert s["preset"] == "gvgc" and s["status"] == "ok" and s["pairs"] == 66
    assert s["valid_pairs"] == 66
    for key in ("mean_error", "median_error", "rmse", "mae", "keep_rate", "num_inliers",
                "num_pts"):
        assert np.isfinite(s[key]), key
    assert s["rmse"] >= s["mean_error"] >= 0 and 0 < s["keep_rate"] <= 1
    assert sorted(s["per_interval"]) == sorted(["60", "50", "40", "30", "20", "10"])
    for d, block in s["per_interval"].items():
        assert block["pairs"] == 11 and block["valid_pairs"] == 11
        recs = [p for p in s["per_pair"] if p["interval"] == int(d)]
        assert block["mean_error"] == pytest.approx(np.mean([p["mean_error"] for p in recs]))
        assert block["median_error"] == pytest.approx(np.median([p["median_error"] for p in recs]))
        assert block["rmse"] == pytest.approx(np.sqrt(np.mean([p["rmse"] ** 2 for p in recs])))
        assert block["keep_rate"] == pytest.approx(np.mean([p["num_inliers"] / p["num_pts"]
                                                            for p in recs]))
    # a geometrically consistent clip: errors well under the 3 px RANSAC threshold
    assert s["median_error"] < 1.0


def test_gvgc_preset_fields_fast_and_deterministic(grounded71):
    """The gvgc protocol at a reduced size (320x180, 3000 features) to keep the suite fast;
    the full-size run is the slow test below. Same input -> the same numbers (FLANN included)."""
    cfg = EpipolarConfig(gvgc={"size": (180, 320), "sift_features": 3000})
    clip = clip_from_frames(grounded71)
    s = epipolar_section(clip, cfg, preset="gvgc")
    _check_gvgc_fields(s)
    assert s["analysis_size"] == [180, 320]
    again = epipolar_section(clip, cfg, preset="gvgc")
    assert again["per_pair"] == s["per_pair"]


@pytest.mark.slow
def test_gvgc_preset_fields_full(grounded71):
    s = epipolar_section(clip_from_frames(grounded71), EpipolarConfig(), preset="gvgc")
    _check_gvgc_fields(s)
    assert s["analysis_size"] == [720, 1280]


def test_gvgc_short_clip_not_applicable(translation):
    s = epipolar_section(translation, None, preset="gvgc")
    assert s["status"] == "not_applicable" and "71 frames" in s["reason"]
    assert "clip has 9" in s["reason"]


def test_torch_batch_of_clips_matches_one_by_one(translation, rubber):
    """Clips of two sizes and a 1-frame clip in one call (one RANSAC over all pairs of all
    clips). RANSAC seeds are per pair, from (config seed, source frames, stage) only
    (protocol.pair_seeds), so every clip is bit-identical to running it alone."""
    from geocon_torch.sections.epipolar import epipolar_sections

    crop = clip_from_frames(translation.frames[:, :, :128, :200], name="crop")
    single = clip_from_frames(translation.frames[:1], name="single")
    clips = [translation, crop, single, rubber]
    batch = epipolar_sections(clips, EpipolarConfig(),
                              implementation="torch", features="opencv-sift")
    assert [s["status"] for s in batch] == ["ok", "ok", "not_applicable", "ok"]
    assert batch[1]["analysis_size"] == [128, 200]
    keys = ("epipolar_error", "epipolar_error_score", "epipolar_inlier_rate",
            "feature_match_coverage", "pairs", "valid_pairs", "status", "reason", "method")
    for clip, s in zip(clips, batch):
        one = epipolar_section(clip, EpipolarConfig(),
                               implementation="torch", features="opencv-sift")
        assert {k: s[k] for k in keys} == {k: one[k] for k in keys}  # exact, floats included
        assert s["per_pair"] == one["per_pair"]
    # the batch order does not matter either
    flipped = epipolar_sections(clips[::-1], EpipolarConfig(), implementation="torch",
                                features="opencv-sift")
    assert [s["per_pair"] for s in flipped[::-1]] == [s["per_pair"] for s in batch]


@pytest.mark.slow
def test_gvgc_torch_path_agrees_with_opencv(grounded71):
    """Batched gvgc (one RANSAC over the 66 pairs) vs the OpenCV code with exact 2-NN."""
    cfg = EpipolarConfig(gvgc={"size": (180, 320), "sift_features": 1000, "matcher": "bf"})
    clip = clip_from_frames(grounded71)
    ref = epipolar_section(clip, cfg, preset="gvgc", implementation="opencv")
    ours = epipolar_section(clip, cfg, preset="gvgc",
                            implementation="torch", features="opencv-sift")
    _check_gvgc_fields(ours)
    assert ours["implementation"] == "torch"
    assert abs(ours["keep_rate"] - ref["keep_rate"]) <= 0.05
    assert abs(ours["num_pts"] - ref["num_pts"]) <= 0.02 * ref["num_pts"]  # same matching
    assert abs(ours["median_error"] - ref["median_error"]) <= 0.25 * ref["median_error"]


@pytest.mark.slow
def test_gvgc_torch_batch_matches_one_by_one(grounded71):
    """gvgc on the torch path: per-pair seeds from the source frames, so a clip batched with
    another gives exactly its numbers alone."""
    from geocon_torch.sections.epipolar import epipolar_sections
    from geocon_torch.synth import apply_corruption

    cfg = EpipolarConfig(gvgc={"size": (180, 320), "sift_features": 1000, "matcher": "bf"})
    clean = clip_from_frames(grounded71)
    warped = clip_from_frames(apply_corruption(grounded71, "rubber_sheet", 0.5, seed=0))
    both = epipolar_sections([warped, clean], cfg, preset="gvgc", implementation="torch",
                             features="opencv-sift")
    alone = epipolar_section(clean, cfg, preset="gvgc",
                             implementation="torch", features="opencv-sift")
    assert both[1]["per_pair"] == alone["per_pair"]
    assert both[1]["median_error"] == alone["median_error"]


def test_batch_describes_every_frame_once_across_stages(translation, grounded71):
    """The relaxed retry of a few clips takes their rows of the primary keypoints: one
    extraction per frame size, and the rows equal an extraction of those clips alone."""
    from geocon_torch.epipolar.protocol import clip_pairs, protocol_stages
    from geocon_torch.epipolar.torch_path import _Batch

    cfg = EpipolarConfig()
    other = clip_from_frames(grounded71[20:29], name="c3b")
    clips = [translation, other]
    pairs = [clip_pairs(c.num_frames, cfg) for c in clips]
    batch = _Batch(clips, pairs, cfg, torch.device("cpu"), "kornia-sift")
    calls = []
    ex = batch.extractor()
    real = ex.extract
    ex.extract = lambda gray, *a, **k: calls.append(gray.shape[0]) or real(gray, *a, **k)
    primary, relaxed = protocol_stages(cfg)[:2]
    both, _ = batch.correspondences(primary, [0, 1])
    again, _ = batch.correspondences(relaxed, [1])
    assert calls == [len(batch.frames[0]) + len(batch.frames[1])]
    alone = real(batch.frames[1])
    rows = batch.keypoints([1])
    n = int(alone.mask.sum(1).max())
    assert torch.equal(rows.mask[:, :n], alone.mask[:, :n]) and not bool(rows.mask[:, n:].any())
    torch.testing.assert_close(rows.xy[:, :n], alone.xy[:, :n], rtol=0, atol=0)
    assert int(again.mask.sum()) > 0 and again.pairs.shape[0] == len(pairs[1])
