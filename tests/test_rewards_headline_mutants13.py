"""Mutation-audit round 13 (rewards, preference pairs, headline score, soft score): behaviour
that no other default test pinned, each checked on constructed inputs with closed-form
expectations (no media; scorers are stubbed where only a rule is tested)."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch import rewards as rw
from geocon_torch.bench.manifest import ManifestEntry
from geocon_torch.bench.preferences import (kind_config, preference_pairs,
                                            preference_records)
from geocon_torch.config import GeoConConfig, SoftConsistencyConfig
from geocon_torch.errors import InputError
from geocon_torch.measures import soft
from geocon_torch.measures.headline import GE_SCALE_PX, headline_score, headline_terms
from geocon_torch.rewards import FROZEN_REASON, ClipReward, frozen_clips, reward_from_result


# --------------------------------------------------------------------------- preferences
def test_nan_min_margin_is_refused_before_anything_is_scored(tmp_path):
    """``min_margin=nan`` would compare False with every margin and so silently accept every
    pair: it is refused like a negative one (the CLI's --min-margin is checked on its own)."""
    entries = [ManifestEntry("a", str(tmp_path / "a.mp4"), "m", prompt="cat")]
    db = tmp_path / "r.sqlite"
    for bad in (float("nan"), -0.1):
        with pytest.raises(InputError, match="min_margin"):
            preference_pairs(entries, db, kind="background", min_margin=bad)
    assert not db.exists()  # refused before the store is opened


def test_empty_prompt_is_no_prompt_and_never_pairs_two_clips():
    """An entry whose prompt is "" (built in code; the manifest reader drops blank cells) has
    no prompt: each such clip is its own skipped record, never paired with another clip."""
    entries = [ManifestEntry("a", "a.mp4", "m", prompt=""),
               ManifestEntry("b", "b.mp4", "m", prompt=""),
               ManifestEntry("c", "c.mp4", "m", prompt="cat"),
               ManifestEntry("d", "d.mp4", "m", prompt="cat")]
    res = {cid: {"status": "ok", "background": {"ir": ir, "ge_px": 0.0}}
           for cid, ir in (("a", 0.9), ("b", 0.2), ("c", 0.7), ("d", 0.6))}
    recs = preference_records(entries, res, "background", kind_config(None, "background"))
    assert [(r["prompt"], r["status"]) for r in recs] == [
        (None, "skipped"), (None, "skipped"), ("cat", "pair")]
    assert all("no prompt" in r["reason"] and r["num_clips"] == 1 for r in recs[:2])
    assert (recs[2]["chosen"], recs[2]["rejected"]) == ("c", "d")
    assert recs[2]["margin"] == pytest.approx(0.1)


# --------------------------------------------------------------------------- headline
def test_headline_ignores_the_numbers_of_an_epipolar_block_that_is_not_ok():
    """A not_applicable / error epipolar block contributes no ``match`` / ``inliers`` term,
    whatever numbers it carries: the score is the ``ge`` term alone."""
    for status in ("not_applicable", "error"):
        res = {"status": "ok", "working_size": [256, 512],
               "epipolar": {"status": status, "feature_match_coverage": 0.3,
                            "epipolar_inlier_rate": 0.4},
               "background": {"status": "ok", "ge_px": 0.35}}  # 0.7 px at 1024
        assert set(headline_terms(res)) == {"ge"}
        assert headline_score(res) == pytest.approx(math.exp(-0.7 / GE_SCALE_PX), rel=1e-12)
        del res["background"]
        assert headline_terms(res) == {} and headline_score(res) is None


# --------------------------------------------------------------------------- soft score
def test_irls_thresholds_anneal_from_4_tau_to_tau():
    """The IRLS refits weight each point by ``conf * sigmoid((c_k tau - r) / T)`` with c_k
    = 4, 2, 1 over 3 refits (4 ** (1 - k / (iters - 1))); recorded from the solver's calls
    with the model held at the identity, so ``r`` is the known displacement."""
    cfg = SoftConsistencyConfig(irls_iters=3)
    d = torch.tensor([0.0, 1.0, 3.0, 5.0, 7.0, 9.0], dtype=torch.float64)
    zeros = torch.zeros(6, dtype=torch.float64)
    x1 = torch.stack([torch.arange(6.0, dtype=torch.float64) * 10, zeros], -1)[None]
    x2 = x1 + torch.stack([d, zeros], -1)[None]
    conf = torch.full((1, 6), 0.5, dtype=torch.float64)
    seen = []

    def identity(a, b, w):
        seen.append(w.clone())
        return torch.eye(3, dtype=a.dtype).expand(a.shape[0], 3, 3)

    orig = soft.homography_dlt
    soft.homography_dlt = identity
    try:
        _, r = soft.irls_fit("homography", x1, x2, conf, cfg)
    finally:
        soft.homography_dlt = orig
    assert torch.allclose(r[0], d, atol=1e-9)
    assert len(seen) == 4 and torch.equal(seen[0], conf)
    for w, c in zip(seen[1:], (4.0, 2.0, 1.0)):
        want = conf * torch.sigmoid((c * cfg.tau_h - d) / cfg.temperature_h)
        assert torch.allclose(w, want, rtol=1e-9, atol=0), (c, w, want)


def _textured_pair() -> tuple:
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    img = 0.5 + 0.3 * torch.sin(0.6 * xx) * torch.cos(0.45 * yy)
    return img[None, None].clone(), img[None, None].clone()


@pytest.mark.parametrize("ir_h,ir_f,want", [(0.80, 0.83, "h"), (0.80, 0.85, "h"),
                                            (0.80, 0.86, "f"), (0.90, 0.70, "h")])
def test_auto_keeps_h_within_auto_margin_of_f(monkeypatch, ir_h, ir_f, want):
    """model "auto": H while ``ir_h >= ir_f - auto_margin`` (0.05), else F; the soft ratios
    are fixed here (by tau: H's 2 px, F's 0.1) so only the choice is tested."""
    monkeypatch.setattr(soft, "soft_ratio", lambda r, c, tau, t: torch.full(
        (r.shape[0],), ir_h if tau == 2.0 else ir_f, dtype=r.dtype))
    monkeypatch.setattr(soft, "contrast_evidence", lambda a, b: torch.ones(a.shape[0]))
    monkeypatch.setattr(soft, "motion_evidence", lambda a, b: torch.ones(a.shape[0]))
    img1, img2 = _textured_pair()
    score, h, f = soft.soft_pair_scores(img1, img2, SoftConsistencyConfig(model="auto"))
    assert float(h) == pytest.approx(ir_h) and float(f) == pytest.approx(ir_f)
    assert float(score) == pytest.approx(ir_h if want == "h" else ir_f)


def test_contrast_evidence_reads_the_flatter_frame():
    """A pair with one blank frame has no contrast evidence (the smaller of the two grey-level
    standard deviations): 0, whichever frame is blank; two textured frames: ~1."""
    tex, _ = _textured_pair()
    flat = torch.full_like(tex, 0.5)
    ev = soft.contrast_evidence(torch.cat([tex, flat, tex]), torch.cat([flat, tex, tex]))
    assert ev[:2].tolist() == [0.0, 0.0] and float(ev[2]) > 1 - 1e-10


def test_single_model_returns_the_other_models_ratio_as_zeros():
    """model "fundamental" / "homography": ``(score, ir_h, ir_f)`` with the model not fitted
    all zeros and the score the fitted one's ratio."""
    img1, img2 = _textured_pair()
    img2 = torch.roll(img2, 1, dims=-1)
    s, h, f = soft.soft_pair_scores(img1, img2, SoftConsistencyConfig(model="fundamental"))
    assert h.tolist() == [0.0] and float(f) > 0 and torch.equal(s, f)
    s, h, f = soft.soft_pair_scores(img1, img2, SoftConsistencyConfig(model="homography"))
    assert f.tolist() == [0.0] and float(h) > 0 and torch.equal(s, h)


def test_texture_confidence_is_the_smaller_eigenvalue():
    """Stripes (gradients along x only: the aperture problem) have a zero smaller eigenvalue
    everywhere, so no point is more confident than another (all ~0.5); a 2-D texture next to a
    flat half is confident on the texture only."""
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    stripes = (0.5 + 0.3 * torch.sin(0.6 * xx) + 0.0 * yy)[None, None]
    conf = soft.texture_confidence(stripes, 2.0)[0, 6:-6, 6:-6]
    assert float(conf.max() - conf.min()) < 1e-3 and abs(float(conf.mean()) - 0.5) < 1e-2
    half = 0.5 + 0.3 * torch.sin(0.6 * xx) * torch.cos(0.45 * yy)
    half[:, 16:] = 0.5
    conf = soft.texture_confidence(half[None, None], 2.0)[0]
    assert float(conf[8:24, 2:10].min()) > 0.5 > float(conf[8:24, 24:].max())


# --------------------------------------------------------------------------- rewards
def test_frozen_clips_needs_two_frames_read():
    """One frame read (T = 1, or ``count=1``) is never frozen: there is no pair to compare."""
    still = torch.zeros(2, 1, 3, 8, 8, dtype=torch.uint8)
    assert frozen_clips(still).tolist() == [False, False]
    still = torch.zeros(2, 4, 3, 8, 8, dtype=torch.uint8)
    assert frozen_clips(still, count=1).tolist() == [False, False]
    assert frozen_clips(still, count=2).tolist() == [True, True]


def test_frozen_clips_compares_the_last_frame_it_reads():
    """``step=2, count=3`` reads frames 0, 2, 4: a clip whose frame 4 moves is not frozen,
    one whose odd frames (never read) move is."""
    v = torch.zeros(2, 6, 3, 8, 8, dtype=torch.uint8)
    v[0, 4] = 200
    v[1, 1::2] = 200
    assert frozen_clips(v, step=2, count=3).tolist() == [False, True]


def test_epipolar_block_that_is_not_ok_is_never_folded():
    """A not_applicable epipolar block keeps its status and reason (neutral reward) even when
    it carries the whole trio."""
    row = {"status": "ok", "epipolar": {
        "status": "not_applicable", "reason": "few pairs", "epipolar_error_score": 0.9,
        "epipolar_inlier_rate": 0.6, "feature_match_coverage": 0.3}}
    got = reward_from_result(row, "epipolar", neutral=-1.0)
    assert (got.reward, got.status, got.reason) == (-1.0, "not_applicable", "few pairs")


def test_unfoldable_value_without_a_reason_says_so():
    """A non-finite fold whose block gives no reason: "no finite value to fold" (never None);
    a row with no status at all is an error, not a not_applicable."""
    row = {"status": "ok", "background": {"status": "ok", "ir": float("inf"), "ge_px": 0.0}}
    got = reward_from_result(row, "background")
    assert (got.status, got.reason) == ("not_applicable", "no finite value to fold")
    got = reward_from_result({"background": {"ir": 0.9, "ge_px": 0.1}}, "background")
    assert (got.reward, got.status) == (0.0, "error")


def test_background_fold_reads_the_report_bound_the_row_recorded():
    """Without ``config``, kind "background" folds with the row's recorded
    ``background.report_ge_px`` (7 px here: 0.9 * exp(-0.7 / 7)); a given config wins."""
    row = {"status": "ok", "background": {"status": "ok", "ir": 0.9, "ge_px": 0.7},
           "config": GeoConConfig().replace(background={"report_ge_px": 7.0}).to_dict()}
    assert reward_from_result(row, "background").reward == pytest.approx(
        0.9 * math.exp(-0.1), rel=1e-12)
    assert reward_from_result(row, "background", GeoConConfig()).reward == pytest.approx(
        0.9 * math.exp(-0.2), rel=1e-12)
    del row["config"]
    assert reward_from_result(row, "background").reward == pytest.approx(
        0.9 * math.exp(-0.2), rel=1e-12)


@pytest.mark.parametrize("kind", ["epipolar", "background"])
def test_frozen_rule_stops_at_the_io_frame_cap(monkeypatch, kind):
    """Kinds "epipolar" / "background" judge a clip frozen on the frames ``io.max_frames``
    keeps: frames 0-2 still and 3-5 moving is frozen at ``max_frames=3``, not without a cap
    (the scorer is stubbed to accept every clip, so only the rule is tested)."""
    stub = lambda videos, cfg, neutral: [ClipReward(0.7, "ok", None, 2, 2)  # noqa: E731
                                         for _ in range(len(videos))]
    monkeypatch.setattr(rw, "_epipolar_rewards", stub)
    monkeypatch.setattr(rw, "_background_rewards", stub)
    v = torch.zeros(1, 6, 3, 16, 16, dtype=torch.uint8)
    v[0, 3:] = torch.arange(3, dtype=torch.uint8).view(3, 1, 1, 1) * 60 + 60
    rewards, diag = rw.geometric_reward(v, kind, config={"io": {"max_frames": 3}})
    assert rewards.tolist() == [0.0]
    assert (diag.clips[0].status, diag.clips[0].reason) == ("not_applicable", FROZEN_REASON)
    rewards, diag = rw.geometric_reward(v, kind)
    assert rewards.tolist() == [pytest.approx(0.7)] and diag.status == ["ok"]
