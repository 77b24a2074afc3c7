"""Session 32 paper audit F1: a pair with fewer than ``background.min_inliers`` matches is an
invalid pair (paper eq. 12), not a reason to stop the whole clip.

A clip whose finest evaluated pairs have a median below ``min_inliers`` matches (before the masks:
"too little texture"; after them: :data:`MASKED_AWAY`) is still scored on its pairs with enough
matches when at least ``background.min_valid_pairs`` such pairs ("textured rows") exist: without
a ``features.fallback`` at once, with one (lk-tracks) after the fallback failed too. A clip the
fallback scores keeps the fallback's result, and a clip with no textured pair (blank, noise)
stays not_applicable with its old reason.

Clips: grounded C3 (translation, F truth) at 120 x 160 px; the "fade" clip is 5 textured frames
and 6 flat grey frames (4 textured pairs of 10: median 0 matches), the "half-masked" clip 6
textured frames whose given mask fills frames 3-5 (2 clean pairs of 5).
"""
import pytest
import torch

from geocon_torch import score_clips
from geocon_torch.measures.headline import MASKED_AWAY
from geocon_torch.synth import grounded_clip

from helpers import break_backend, fade_after, low_contrast, score_background

SIZE = (120, 160)
OFF = {"features": {"fallback": None}}
TEXTURE = "too little texture: median 0 matches per pair at scale 1.0 (< 30)"

# the result of the clip the lk-tracks fallback scores (3 textured frames, 5 faint ones: SIFT
# matches 2 of its 7 pairs), recorded with the code before this rule: these must not move
RESCUED = {"ir": 1.0, "ge_px": 0.03084600158035755, "valid_pairs": 18, "ir_h": 1.0,
           "ge_h_px": 0.35410642623901367, "ge_fine_px": 0.025520979426801205,
           "ge_peak_px": 0.059582605957984924, "median_matches": 469.0}


_score = score_background


@pytest.fixture(scope="module")
def frames():
    """(8, 3, 120, 160) uint8 grounded C3 frames."""
    return grounded_clip("C3", num_frames=8, size=SIZE).frames


@pytest.fixture(scope="module")
def fade(frames):
    return fade_after(frames)


@pytest.fixture(scope="module")
def textured_alone(frames):
    return _score(frames[:5])


@pytest.fixture(scope="module")
def fade_default(fade):
    return _score(fade)


def _valid_median(rows, key, pairs_ok):
    """The eq. 13 median of ``key`` (the gated model's) over the valid rows (numpy's linear
    interpolation), asserting that every valid row is one of ``pairs_ok``."""
    vals = []
    for r in rows:
        m = r["model"].lower()
        if r[f"valid_{m}"]:
            assert pairs_ok(r["pair"]), r
            vals.append(r[f"{key}_{m}" if key == "ir" else f"ge_{m}_px"])
    return float(torch.tensor(vals, dtype=torch.float64).quantile(0.5)), len(vals)


def test_fade_clip_is_scored_on_its_textured_pairs_after_the_fallback_failed(
        fade_default, textured_alone):
    d, ref = fade_default, textured_alone
    b = d["background"]
    assert d["status"] == "ok" and b["status"] == "ok" and b["reason"] is None, b.get("reason")
    assert b["median_matches"] == 0 and b["textured_pairs"] == 4 and b["pairs"] == 10
    # the fallback was tried and failed; the scoring backend's matches scored the clip
    assert b["fallback"] == {"from": "opencv-sift", "from_reason": TEXTURE,
                             "backend": "lk-tracks", "status": "not_applicable",
                             "reason": TEXTURE}
    assert d["backends"]["features"] == "opencv-sift"
    assert "features_fallback_from" not in d["backends"]
    # the user's config is the one recorded
    assert d["config"]["features"]["fallback"] == "lk-tracks"
    assert d["config_hash"] == ref["config_hash"]
    # closed form: the medians of the textured pairs' per-pair values
    ir, n = _valid_median(b["per_pair"], "ir", lambda p: p[1] < 5)
    ge, _ = _valid_median(b["per_pair"], "ge", lambda p: p[1] < 5)
    assert n == b["valid_pairs"] >= 4
    assert b["ir"] == pytest.approx(ir, rel=1e-6) and b["ge_px"] == pytest.approx(ge, rel=1e-6)
    # ... which are those of the textured frames alone: the same matches and H fits; the F
    # fits draw RANSAC's per-row stream at other row positions (``ransac.seed + row``), so F
    # agrees to a few hundredths of a px per pair (a few thousandths in the medians)
    rb = ref["background"]
    assert d["regime"] == ref["regime"] == "F"
    mine = {(tuple(r["pair"]), r["scale"]): r for r in b["per_pair"]}
    for r in rb["per_pair"]:
        m = mine[tuple(r["pair"]), r["scale"]]
        same = ("matches", "ir_h", "ge_h_px", "inliers_h", "valid_h", "valid_f", "model")
        assert {k: m[k] for k in same} == {k: r[k] for k in same}
        assert m["ir_f"] == pytest.approx(r["ir_f"], abs=0.01)
        assert m["ge_f_px"] == pytest.approx(r["ge_f_px"], abs=0.1)
    assert (b["ir"], b["valid_pairs"]) == (rb["ir"], rb["valid_pairs"]) == (1.0, 8)
    assert (b["ir_h"], b["ge_h_px"]) == (rb["ir_h"], rb["ge_h_px"])
    assert b["ge_px"] == pytest.approx(rb["ge_px"], abs=0.005) and b["ge_px"] < 0.1  # truth 0


def test_fade_clip_without_fallback_is_scored_the_same(fade, fade_default):
    d = _score(fade, OFF)
    b, ref = d["background"], fade_default["background"]
    assert d["status"] == "ok" and b["textured_pairs"] == 4 and "fallback" not in b
    assert d["config"]["features"]["fallback"] is None
    assert {k: v for k, v in ref.items() if k != "fallback"} == b
    assert d["gate"] == fade_default["gate"]


@pytest.mark.parametrize("fallback", ["lk-tracks", None])
def test_fewer_textured_pairs_than_min_valid_pairs_keep_todays_reason(fade, fallback):
    """4 textured pairs, ``min_valid_pairs`` 5: not_applicable as before, with or without the
    fallback."""
    cfg = {"features": {"fallback": fallback}, "background": {"min_valid_pairs": 5}}
    d = _score(fade, cfg)
    b = d["background"]
    want = f"{TEXTURE}; lk-tracks fallback: {TEXTURE}" if fallback else TEXTURE
    assert d["status"] == "not_applicable" and b["reason"] == want
    assert "textured_pairs" not in b and ("fallback" in b) == bool(fallback)


def test_a_fallback_that_raises_is_followed_by_the_textured_pairs(fade, fade_default,
                                                                  monkeypatch):
    """The fallback's rescoring raising (as a backend without its checkpoint would): the clip is
    scored on its textured pairs all the same, the error in ``background.fallback``."""
    break_backend(monkeypatch, "lk-tracks")
    d = _score(fade)
    b, ref = d["background"], fade_default["background"]
    why = "CheckpointError: the 'lk-tracks' backend needs a local checkpoint"
    assert d["status"] == "ok" and b["fallback"] == {
        "from": "opencv-sift", "from_reason": TEXTURE, "backend": "lk-tracks",
        "status": "error", "reason": why}
    assert {k: v for k, v in b.items() if k != "fallback"} == {
        k: v for k, v in ref.items() if k != "fallback"}


def test_half_masked_clip_is_scored_on_its_unmasked_pairs(frames):
    f = frames[:6]
    masks = torch.zeros(6, 1, *SIZE, dtype=torch.bool)
    masks[3:, 0] = True  # a close-up object fills frames 3..5
    d = _score(f, masks=masks)
    b = d["background"]
    assert d["status"] == "ok" and b["status"] == "ok", b.get("reason")
    assert b["median_matches"] == 0 and b["textured_pairs"] == 2 and "fallback" not in b
    ir, n = _valid_median(b["per_pair"], "ir", lambda p: p[1] < 3)
    ge, _ = _valid_median(b["per_pair"], "ge", lambda p: p[1] < 3)
    assert n == b["valid_pairs"] >= 2
    assert b["ir"] == pytest.approx(ir, rel=1e-6) and b["ge_px"] == pytest.approx(ge, rel=1e-6)


def test_masks_over_everything_stay_masked_away(frames):
    masks = torch.ones(4, 1, *SIZE, dtype=torch.bool)
    b = _score(frames[:4], masks=masks)["background"]
    assert b["status"] == "not_applicable" and b["reason"].startswith(MASKED_AWAY)
    assert "textured_pairs" not in b


@pytest.mark.parametrize("config", [None, OFF], ids=["fallback", "no-fallback"])
@pytest.mark.parametrize("kind", ["blank", "noise"])
def test_clips_without_texture_keep_todays_reason(kind, config):
    if kind == "blank":
        clip = torch.full((6, 3, *SIZE), 128, dtype=torch.uint8)
    else:
        g = torch.Generator().manual_seed(0)
        clip = torch.randint(0, 256, (6, 3, *SIZE), generator=g, dtype=torch.uint8)
    d = _score(clip, config)
    b = d["background"]
    want = TEXTURE if config else f"{TEXTURE}; lk-tracks fallback: {TEXTURE}"
    assert d["status"] == "not_applicable" and b["reason"] == want
    assert "textured_pairs" not in b and b.get("ir") is None
    assert ("fallback" in b) == (config is None)


def test_a_clip_the_fallback_scores_keeps_todays_result(frames):
    """3 full-contrast frames, then 5 at a tenth of the contrast: SIFT matches 2 pairs of 7
    (median 0), lk-tracks all of them: scored by lk-tracks as before, numbers unchanged."""
    rescued = torch.cat([frames[:3], low_contrast(frames[3:])])
    d = _score(rescued)
    b = d["background"]
    assert d["status"] == "ok" and d["backends"]["features"] == "lk-tracks"
    assert {k: b[k] for k in RESCUED} == RESCUED
    assert b["fallback"] == {"from": "opencv-sift", "from_reason": TEXTURE,
                             "backend": "lk-tracks", "status": "ok", "reason": None}
    assert "textured_pairs" not in b


def test_batch_gives_each_clip_its_result_alone(fade, fade_default, frames):
    got = score_clips([fade, frames[:6]], preset="background", device="cpu")
    alone = _score(frames[:6])
    assert got[0].to_dict()["background"] == fade_default["background"]
    assert got[0].to_dict()["gate"] == fade_default["gate"]
    assert got[1].to_dict()["background"] == alone["background"]
    assert got[1].to_dict()["gate"] == alone["gate"]
    assert "textured_pairs" not in alone["background"]
