"""The Epipolar-DPO protocol (geocon_torch.epipolar.dpo) against a re-implementation of the
reference per-pair loop of KupynOrest/epipolar-dpo (metrics/video_evaluation/epipolar.py):
OpenCV SIFT + BFMatcher knn 2 / ratio 0.75 + kornia find_fundamental (8-point, all matches) +
kornia Sampson distance, one frame pair at a time. Bounds: error within 2 %, inlier rate within
0.01, same valid pairs."""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Dict, List, Optional, Sequence

import numpy as np
import pytest
import torch

from geocon_torch.epipolar import dpo
from geocon_torch.epipolar.dpo import (EpipolarDPOConfig, byte_ratio_match, consecutive_pairs,
                                       extract_sift, measure_dpo, one_torch_thread,
                                       sample_positions, sift_extractor)
from geocon_torch.features.matching import match_descriptors
from geocon_torch.io import read_clip
from geocon_torch.pipeline import score_clips
from geocon_torch.rewards import geometric_reward, reward_from_result
from geocon_torch.sections.epipolar_dpo import (epipolar_dpo_block, epipolar_dpo_section,
                                               epipolar_dpo_sections)
from geocon_torch.config import GeoConConfig
from geocon_torch.synth import render_scene

from conftest import DEVICES, SHARED_DATA

cv2 = pytest.importorskip("cv2")
kornia_epi = pytest.importorskip("kornia.geometry.epipolar")

FAST_CLIPS = ("real/realshort.mp4",)
ERR_RTOL, RATE_ATOL = 0.02, 0.01


# ------------------------------------------------------------------------- the reference loop
def reference_pair(g1: np.ndarray, g2: np.ndarray) -> Optional[Dict[str, float]]:
    """Their ``compute_metric_for_pair`` on two gray uint8 frames (None: invalid pair)."""
    sift = cv2.SIFT_create()
    kp1, d1 = sift.detectAndCompute(g1, None)
    kp2, d2 = sift.detectAndCompute(g2, None)
    if len(kp1) < 8 or len(kp2) < 8 or d1 is None or d2 is None:
        return None
    good = []
    for pair in cv2.BFMatcher().knnMatch(d1, d2, k=2):
        if len(pair) == 2 and pair[0].distance < 0.75 * pair[1].distance:
            good.append(pair[0])
    if len(good) < 20:
        return None
    p1 = torch.from_numpy(np.array([kp1[m.queryIdx].pt for m in good], np.float32))[None]
    p2 = torch.from_numpy(np.array([kp2[m.trainIdx].pt for m in good], np.float32))[None]
    F = kornia_epi.find_fundamental(p1, p2)
    if torch.isnan(F).any():
        return None
    d = torch.sqrt(kornia_epi.sampson_epipolar_distance(p1, p2, F, squared=True) + 1e-8)
    d = d.squeeze().numpy()
    if not np.isfinite(d.mean()):
        return None
    return {"error": float(d.mean()), "inlier_rate": float((d <= 5.0).mean()),
            "matches": len(good)}


def reference_video(frames_rgb: torch.Tensor) -> List[Optional[Dict[str, float]]]:
    """Per consecutive pair of already-sampled (T, 3, H, W) uint8 RGB frames (their BGR2GRAY of
    the BGR frame = RGB2GRAY of the RGB frame)."""
    grays = [cv2.cvtColor(f.permute(1, 2, 0).cpu().numpy(), cv2.COLOR_RGB2GRAY)
             for f in frames_rgb]
    return [reference_pair(grays[k], grays[k + 1]) for k in range(len(grays) - 1)]


def sampled(frames: torch.Tensor) -> torch.Tensor:
    return frames[torch.as_tensor(sample_positions(frames.shape[0], 15))]


def assert_agrees(m, b: int, ref: Sequence[Optional[Dict[str, float]]], label: str) -> None:
    sel = (m.pair_clip == b).nonzero()[:, 0].cpu()
    valid = m.valid.cpu()[sel].tolist()
    assert valid == [r is not None for r in ref], label
    err, rate = m.epipolar_error.cpu()[sel], m.inlier_rate.cpu()[sel]
    for k, r in enumerate(ref):
        if r is None:
            continue
        assert int(m.num_matches.cpu()[sel[k]]) == pytest.approx(r["matches"], rel=0.01), label
        assert float(err[k]) == pytest.approx(r["error"], rel=ERR_RTOL), (label, k)
        assert abs(float(rate[k]) - r["inlier_rate"]) <= RATE_ATOL, (label, k)
    ok = [r for r in ref if r is not None]
    if ok:
        mean_err = float(np.mean([r["error"] for r in ok]))
        mean_rate = float(np.mean([r["inlier_rate"] for r in ok]))
        assert float(m.mean_epipolar_error[b]) == pytest.approx(mean_err, rel=ERR_RTOL), label
        assert abs(float(m.mean_inlier_rate[b]) - mean_rate) <= RATE_ATOL, label
    assert int(m.valid_pairs[b]) == len(ok) and int(m.total_pairs[b]) == len(ref)


def shared_frames(rel: str) -> torch.Tensor:
    """Frames 0, 15, 30, 45 (those present) of a shared clip at native resolution."""
    path = SHARED_DATA / rel
    if not path.is_file():
        pytest.skip(f"shared clip {path} not found (see ../shared/data/README.md)")
    return sampled(read_clip(path, long_side=None, max_frames=46).frames)


def all_shared_clips() -> List[str]:
    if not SHARED_DATA.is_dir():
        return []
    return sorted(str(p.relative_to(SHARED_DATA)) for p in SHARED_DATA.rglob("*.mp4"))


@pytest.fixture(scope="module")
def grounded() -> List[torch.Tensor]:
    """Sampled frames (0, 15) of grounded translation (C3) and arc (C5) scenes."""
    return [sampled(render_scene(c, num_frames=16, size=(180, 240), seed=0).frames)
            for c in ("C3", "C5")]


# ------------------------------------------------------------------------------ the tests
def test_pairs_and_positions():
    pairs, owner, local = consecutive_pairs(torch.tensor([3, 1, 0, 2]))
    assert pairs.tolist() == [[0, 1], [1, 2], [4, 5]]
    assert owner.tolist() == [0, 0, 3] and local.tolist() == [[0, 1], [1, 2], [0, 1]]
    assert sample_positions(49) == [0, 15, 30, 45] and sample_positions(15) == [0]


def test_byte_matcher_equals_float_matcher(grounded):
    """The CPU byte matcher (exact int8 GEMMs over the pool) gives exactly the matches of the
    float matcher, including a flat frame (no keypoints) and a pair into it."""
    frames = [grounded[0], grounded[1], torch.cat([grounded[0][:1], grounded[0][:1] * 0])]
    cfg = EpipolarDPOConfig(workers=2)
    sift = sift_extractor(cfg)
    kps = extract_sift(frames, cfg, None, sift)
    assert int(kps.counts[-1]) == 0 and kps.descriptors.dtype == torch.uint8
    pairs = torch.tensor([[0, 1], [2, 3], [4, 5], [5, 4], [1, 0]])
    want = match_descriptors(replace(kps, descriptors=kps.descriptors.float()), pairs, ratio=0.75)
    with one_torch_thread():
        got = byte_ratio_match(kps, pairs, 0.75, sift.parallel_map)
        assert torch.get_num_threads() == 1
    assert got.mask.sum(1).tolist() == want.mask.sum(1).tolist()
    assert int(got.mask.sum()) > 100 and not got.mask[2:4].any()
    for key in ("mask", "x1", "x2", "num_kp1", "num_kp2"):
        assert torch.equal(getattr(got, key), getattr(want, key)), key
    assert torch.allclose(got.scores, want.scores, atol=1e-6)


def test_byte_matcher_blocks_rows_without_changing_matches(grounded, monkeypatch):
    """Frame i's keypoints are matched in blocks of rows (bounded memory at any keypoint
    count): tiny blocks (7 rows, one row) give exactly the matches of one block."""
    cfg = EpipolarDPOConfig(workers=1)
    kps = extract_sift([grounded[0], grounded[1]], cfg, None, sift_extractor(cfg))
    pairs = torch.tensor([[0, 1], [1, 0], [2, 3]])
    want = byte_ratio_match(kps, pairs, 0.75)
    n = int(kps.xy.shape[1])
    assert n > 100
    for rows in (7, 1):
        monkeypatch.setattr(dpo, "BLOCK_DISTANCES", rows * n)
        got = byte_ratio_match(kps, pairs, 0.75)
        for key in ("mask", "x1", "x2", "scores", "num_kp1", "num_kp2"):
            assert torch.equal(getattr(got, key), getattr(want, key)), (rows, key)


def test_matches_reference_on_grounded_clips(grounded):
    m = measure_dpo(grounded)
    for b, frames in enumerate(grounded):
        assert_agrees(m, b, reference_video(frames), f"grounded {b}")
    assert bool((m.valid_pairs == 1).all())
    # rigid scenes: most matches on their epipolar lines (no RANSAC: outliers stay in the mean)
    assert float(m.mean_inlier_rate.min()) > 0.6


@pytest.mark.parametrize("rel", FAST_CLIPS)
def test_matches_reference_on_a_shared_clip(rel):
    frames = shared_frames(rel)
    assert_agrees(measure_dpo([frames]), 0, reference_video(frames), rel)


@pytest.mark.slow
def test_matches_reference_on_every_shared_clip():
    """Every shared clip (first 46 frames -> up to 4 sampled frames), all in one batch."""
    names = all_shared_clips()
    if not names:
        pytest.skip(f"shared clips not found at {SHARED_DATA}")
    frames = [shared_frames(n) for n in names]
    m = measure_dpo(frames)
    for b, (name, f) in enumerate(zip(names, frames)):
        assert_agrees(m, b, reference_video(f), name)


@pytest.mark.parametrize("dev", DEVICES)
def test_device_path_same_keypoints(dev, grounded):
    """Keypoints computed once, then matching, fitting and Sampson on ``dev`` (CUDA when
    present): same bounds against the reference."""
    frames = [f.to(dev) for f in grounded]
    m = measure_dpo(frames, device=dev)
    assert m.epipolar_error.device.type == torch.device(dev).type
    for b, f in enumerate(grounded):
        assert_agrees(m, b, reference_video(f), f"{dev} grounded {b}")


def test_bad_clips_not_applicable(grounded):
    flat = torch.full_like(grounded[0], 90)
    single = grounded[0][:1]
    m = measure_dpo([grounded[0], flat, single])
    assert m.valid_pairs.tolist() == [1, 0, 0] and m.total_pairs.tolist() == [1, 1, 0]
    assert torch.isfinite(m.mean_epipolar_error).all()
    sec = epipolar_dpo_section(read_clip(torch.full((16, 3, 40, 60), 7, dtype=torch.uint8)))
    assert sec["status"] == "not_applicable" and sec["mean_epipolar_error"] is None
    assert "not enough keypoints" in sec["reason"] and sec["total_pairs"] == 1


def test_section_block_keys(grounded, tmp_path):
    frames = render_scene("C3", num_frames=16, size=(180, 240), seed=0).frames
    clip = read_clip(frames, long_side=None)
    sec = epipolar_dpo_section(clip)
    assert sec["status"] == "ok" and sec["valid_pairs"] == 1 and sec["total_pairs"] == 1
    assert sec["frames"] == [0, 15] and sec["analysis_size"] == [180, 240]
    assert sec["per_pair"][0]["left_frame"] == 0 and sec["per_pair"][0]["right_frame"] == 15
    ref = reference_video(grounded[0])[0]
    assert sec["mean_epipolar_error"] == pytest.approx(ref["error"], rel=ERR_RTOL)
    # score_clip's block re-reads frames 0, 15 at native size from a working-size clip
    small = read_clip(frames, long_side=120)
    block = epipolar_dpo_block(frames, small, GeoConConfig(), "cpu")
    assert block["analysis_size"] == [180, 240]
    assert block["mean_epipolar_error"] == pytest.approx(sec["mean_epipolar_error"], rel=1e-9)


def test_score_clip_preset_epipolar_dpo():
    """``score_clip(preset="epipolar-dpo")`` returns the ``epipolar_dpo`` block of the protocol
    (every 15th frame) at the tensor's own resolution, and the clip's status follows it."""
    from geocon_torch import score_clip
    from geocon_torch.io import clip_from_tensor

    frames = render_scene("C3", num_frames=31, size=(180, 240), seed=0).frames
    res = score_clip(frames, preset="epipolar-dpo").to_dict()
    want = epipolar_dpo_section(clip_from_tensor(frames, long_side=None))
    block = res["epipolar_dpo"]
    assert res["status"] == block["status"] == want["status"] == "ok"
    assert res["backends"]["epipolar"] == "epipolar-dpo" and not res["background"]
    assert block["total_pairs"] == 2 and block["valid_pairs"] == want["valid_pairs"]
    for key in ("mean_epipolar_error", "mean_inlier_rate"):
        assert block[key] == want[key]


def test_batch_of_clips_equals_each_clip_alone():
    """Three clips of different lengths in one batch (16 frames: one pair; 31 frames: two
    pairs; 5 frames: too short) give per clip exactly the block, reward and info of scoring
    each alone, through the sections and through score_clips (blocks built from one host copy
    of the whole batch, DPOMeasurement.lists)."""
    videos = [render_scene("C3", num_frames=16, size=(96, 128), seed=1).frames,
              render_scene("C5", num_frames=31, size=(96, 128), seed=2).frames,
              render_scene("C1", num_frames=5, size=(96, 128), seed=3).frames]
    clips = [read_clip(v, long_side=None) for v in videos]
    together = epipolar_dpo_sections(clips)
    assert together == [epipolar_dpo_sections([c])[0] for c in clips]
    assert [s["valid_pairs"] for s in together] == [1, 2, 0]
    assert [s["total_pairs"] for s in together] == [1, 2, 0]
    assert [len(s["per_pair"]) for s in together] == [1, 2, 0]
    assert together[1]["frames"] == [0, 15, 30] and together[2]["frames"] == [0]
    assert together[2]["status"] == "not_applicable"
    assert together[2]["reason"].startswith("fewer than two sampled frames")
    assert 0.0 < together[0]["mean_epipolar_error"] < 5.0
    results = [r.to_dict() for r in score_clips(videos, preset="epipolar-dpo")]
    alone = [score_clips([v], preset="epipolar-dpo")[0].to_dict() for v in videos]
    assert [r["epipolar_dpo"] for r in results] == [r["epipolar_dpo"] for r in alone]
    assert [r["epipolar_dpo"] for r in results] == together
    infos = [reward_from_result(r, "epipolar-dpo") for r in results]
    assert infos == [reward_from_result(r, "epipolar-dpo") for r in alone]
    assert [c.status for c in infos] == ["ok", "ok", "not_applicable"]
    assert infos[0].reward == pytest.approx(math.exp(-together[0]["mean_epipolar_error"] / 5.0))
    rewards, diag = geometric_reward(torch.stack([videos[0], videos[1][:16]]),
                                     kind="epipolar-dpo")
    for b, v in enumerate((videos[0], videos[1][:16])):
        r1, d1 = geometric_reward(v[None], kind="epipolar-dpo")
        assert float(rewards[b]) == float(r1[0]) and diag.clips[b] == d1.clips[0]


def test_gray_images_are_opencvs(monkeypatch):
    """The batched gray images (one op per frame size) equal cv2.cvtColor(RGB2GRAY) of every
    frame, and so does the per-frame OpenCV fallback used with another OpenCV version."""
    g = torch.Generator().manual_seed(0)
    frames = [torch.randint(0, 256, (t, 3, h, w), dtype=torch.uint8, generator=g)
              for t, h, w in ((2, 31, 45), (3, 20, 24), (1, 31, 45))]
    want = [cv2.cvtColor(f.permute(1, 2, 0).numpy(), cv2.COLOR_RGB2GRAY)
            for clip in frames for f in clip]
    for major in (dpo.GRAY_OPENCV_MAJOR, -1):
        monkeypatch.setattr(dpo, "GRAY_OPENCV_MAJOR", major)
        got = dpo.gray_images(frames)
        assert len(got) == 6 and all(a.dtype == np.uint8 for a in got)
        assert all(np.array_equal(a, b) for a, b in zip(got, want)), major


def test_float_matcher_path_gives_the_same_blocks(monkeypatch, grounded):
    """The batched float matcher (the CUDA path, BYTE_MATCH_DEVICES empty) and the CPU byte
    matcher give bit-identical blocks."""
    clips = [read_clip(render_scene(c, num_frames=16, size=(96, 128), seed=0).frames,
                       long_side=None) for c in ("C3", "C5")]
    byte = epipolar_dpo_sections(clips)
    monkeypatch.setattr(dpo, "BYTE_MATCH_DEVICES", set())
    assert epipolar_dpo_sections(clips) == byte and byte[0]["valid_pairs"] == 1


def _keypoint_frames(frames: Sequence[Sequence[int]], seed: int = 0):
    """Padded Keypoints of frames given as lists of scene-point ids: point k has one random
    uint8 descriptor (exact duplicates across frames: distance 0, ratio 0) and moves along x by
    8 px x its inverse depth per frame (pure x-translation; points 45.. jump 25 px in y in the
    odd frames: off the epipolar lines)."""
    from geocon_torch.types import Keypoints

    g = torch.Generator().manual_seed(seed)
    desc = torch.randint(0, 256, (60, 128), generator=g, dtype=torch.uint8)
    base = torch.rand(60, 2, generator=g, dtype=torch.float64) * torch.tensor([400.0, 300.0])
    inv_depth = 0.5 + torch.rand(60, generator=g, dtype=torch.float64)
    n = max(len(f) for f in frames)
    xy, d = torch.zeros(len(frames), n, 2), torch.zeros(len(frames), n, 128, dtype=torch.uint8)
    mask = torch.zeros(len(frames), n, dtype=torch.bool)
    for t, ids in enumerate(frames):
        ids = torch.tensor(ids)
        p = base[ids % 60].clone()
        p[:, 0] += 8.0 * t * inv_depth[ids % 60]
        p[:, 1] += torch.where(ids % 60 >= 45, 25.0 * (t % 2), 0.0)
        xy[t, :len(ids)], d[t, :len(ids)], mask[t, :len(ids)] = p.float(), desc[ids % 60], True
    return Keypoints(xy, d, torch.ones(len(frames), n), mask)


def test_pair_validity_thresholds_and_clip_means_over_valid_pairs(monkeypatch):
    """Keypoints given to measure_dpo (SIFT replaced): a frame with 7 keypoints makes its pair
    invalid whatever the other has (8 needed in both), exactly 20 matches are enough (>= 20),
    10 are not; the clip's mean error / inlier rate are the means over its valid pairs only."""
    clip_a = [[k % 7 for k in range(30)], list(range(7))]  # 30 matches into 7 keypoints
    clip_b = [list(range(10, 30)), list(range(10, 50)), list(range(10, 60)),
              list(range(10, 20))]  # matches: 20, 40, 10
    kps = _keypoint_frames(clip_a + clip_b)
    monkeypatch.setattr(dpo, "extract_sift", lambda frames, cfg, dev, sift: kps)
    frames = [torch.zeros(2, 3, 48, 64, dtype=torch.uint8),
              torch.zeros(4, 3, 48, 64, dtype=torch.uint8)]
    m = measure_dpo(frames, EpipolarDPOConfig(), device="cpu")
    assert m.num_matches.tolist() == [30, 20, 40, 10]
    assert m.reason.tolist() == [dpo.NOT_ENOUGH_KEYPOINTS, dpo.OK, dpo.OK, dpo.TOO_FEW_MATCHES]
    assert m.valid.tolist() == [False, True, True, False]
    assert m.valid_pairs.tolist() == [0, 2] and m.total_pairs.tolist() == [1, 3]
    err, rate = m.epipolar_error[1:3], m.inlier_rate[1:3]
    # exact x-translation: d = sqrt(Sampson^2 + 1e-8) = 1e-4 px; the jumping points cost more
    assert float(err[0]) == pytest.approx(1e-4, rel=1e-3) and float(err[1]) > 0.1
    assert float(rate[0]) == 1.0 and 0.0 < float(rate[1]) <= 1.0
    assert float(m.mean_epipolar_error[1]) == pytest.approx(float(err.mean()), rel=1e-12)
    assert float(m.mean_inlier_rate[1]) == pytest.approx(float(rate.mean()), rel=1e-12)
    assert m.mean_epipolar_error[0] == 0 and m.mean_inlier_rate[0] == 0
