"""Mutation round 22a (session 32's new code): the texture rule's counts (median and textured
rows of the finest evaluated pairs), the textured share of the headline / background reward,
the background kind's raw and the epipolar protocol key's letterbox fields, asserted on
closed-form inputs (hand-built match stacks, hand-written result dicts)."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch.config import GeoConConfig
from geocon_torch.measures.headline import headline_terms, textured_share
from geocon_torch.metrics.epipolar import _frame_choice
from geocon_torch.rewards import reward_from_result
from geocon_torch.sections.background import _median_matches, _Stack

from helpers import fade_after, score_background


def _stack(coarse, fine, gate=(), n=64):
    """A 2-scale stack whose evaluated pairs have ``coarse`` / ``fine`` matches (mask counts)
    and ``gate`` gate pairs (their counts at both scales: 999, never read by the check)."""
    p, g = len(fine), len(gate)
    q = p + g
    counts = list(coarse) + [999] * g + list(fine) + [999] * g
    mask = torch.arange(n)[None, :] < torch.tensor(counts)[:, None]
    pairs = torch.tensor([[k, k + 1] for k in range(q)])
    pts = torch.zeros(2 * q, n, 2)
    return _Stack(scales=[0.5, 1.0], pairs=pairs, num_evaluated=p, x1=pts, x2=pts.clone(),
                  mask=mask, scores=torch.zeros(2 * q, n), working_long_side=160)


def test_median_and_textured_rows_of_the_finest_pairs_closed_form():
    """Median: the lower middle value of the finest evaluated rows; textured: rows with at
    least ``need`` matches (exactly ``need`` counts); coarse and gate rows never count; a
    shorter clip in the same pass gets no padding rows."""
    a = _stack(coarse=[60, 60, 60, 60], fine=[10, 30, 31, 0], gate=[5])
    b = _stack(coarse=[0, 0], fine=[30, 29])
    got = _median_matches([a, b], 30)
    assert got.shape == (2, 2) and got.dtype == torch.float64
    # a: sorted 0 10 30 31 -> lower middle 10; b: 29 30 -> 29
    assert got[0].tolist() == [10.0, 29.0]
    assert got[1].tolist() == [2.0, 1.0]
    # b first: a padding entry of the short clip must not count (its counts are b's row 0)
    got = _median_matches([b, a], 30)
    assert got.tolist() == [[29.0, 10.0], [1.0, 2.0]]
    one = _stack(coarse=[0, 0, 0], fine=[40, 40, 0])
    assert _median_matches([one, b, a], 30).tolist() == [[40.0, 29.0, 10.0], [2.0, 1.0, 2.0]]


@pytest.mark.parametrize("block, want", [
    ({"pairs": 10, "textured_pairs": 4}, 0.4),
    ({"pairs": 10}, 1.0),
    ({"pairs": 0, "textured_pairs": 3}, 1.0),
    ({"textured_pairs": 3}, 1.0),
    ({"pairs": 4, "textured_pairs": 6}, 1.0),
    ({"pairs": 4, "textured_pairs": -2}, 0.0),
    ({"pairs": 8, "textured_pairs": 6, "valid_pairs": 24}, 0.75),
])
def test_textured_share_closed_form(block, want):
    assert textured_share(block) == want


def _ok_result(**bg):
    block = {"status": "ok", "ir": 0.9, "ge_px": 0.7, "pairs": 10, "valid_pairs": 30,
             "content_long_side": 512, "parallax_ref": 12.5, **bg}
    return {"status": "ok", "regime": "F", "behaviour": "Translation",
            "motion": {"max_mad": 21.0, "mean_mad": 7.0}, "working_size": [512, 384],
            "background": block, "gate": {"parallax_ref": 99.0}}


def test_background_reward_and_headline_ge_are_scaled_by_the_textured_share():
    fold = 0.9 * math.exp(-0.7 / 3.5)
    ge = math.exp(-0.7 * 1024 / 512 / 3.5)
    full, part = _ok_result(), _ok_result(textured_pairs=4)
    assert reward_from_result(full, "background").reward == pytest.approx(fold, rel=1e-12)
    assert reward_from_result(part, "background").reward == pytest.approx(0.4 * fold, rel=1e-12)
    assert headline_terms(full)["ge"] == pytest.approx(ge, rel=1e-12)
    assert headline_terms(part)["ge"] == pytest.approx(0.4 * ge, rel=1e-12)


def test_background_raw_reads_behaviour_max_mad_and_the_blocks_parallax():
    raw = reward_from_result(_ok_result(), "background").raw
    assert raw == {"ir": 0.9, "ge_px": 0.7, "regime": "F", "behaviour": "Translation",
                   "max_mad": 21.0, "parallax_ref": 12.5}


def test_letterbox_fields_each_get_into_the_protocol_key():
    frac = _frame_choice(GeoConConfig().replace(io={"letterbox_min_fraction": 0.25}))
    assert frac == [{"io.letterbox_min_fraction": 0.25}]
    both = _frame_choice(GeoConConfig().replace(
        io={"letterbox_min_fraction": 0.25, "letterbox_threshold": 0.1, "max_frames": 7}))
    assert both == [{"io.stride": 1, "io.max_frames": 7, "io.letterbox_threshold": 0.1,
                     "io.letterbox_min_fraction": 0.25}]


SIZE = (120, 160)
OFF = {"features": {"fallback": None}}


_score = score_background


def _c3() -> torch.Tensor:
    """(8, 3, 120, 160) uint8 grounded C3 frames (translation, F truth)."""
    from geocon_torch.synth import grounded_clip  # lazy: the unit tests above need no render
    return grounded_clip("C3", num_frames=8, size=SIZE).frames


@pytest.fixture(scope="module")
def fade():
    """5 textured frames then 6 flat grey ones: 4 textured pairs of 10, median 0 matches."""
    return fade_after(_c3())


@pytest.mark.parametrize("config", [OFF, None], ids=["no-fallback", "fallback"])
def test_exactly_min_valid_pairs_textured_pairs_are_enough(fade, config):
    """4 textured pairs and ``min_valid_pairs`` 4 (the bound itself): scored on them, with the
    scoring backend's matches, with or without the (failing) lk-tracks fallback."""
    cfg = {**(config or {}), "background": {"min_valid_pairs": 4}}
    d = _score(fade, cfg)
    b = d["background"]
    assert d["status"] == "ok" and b["status"] == "ok", b.get("reason")
    assert (b["textured_pairs"], b["pairs"], b["median_matches"]) == (4, 10, 0)
    assert d["backends"]["features"] == "opencv-sift"
    assert ("fallback" in b) == (config is None)
    if config is None:
        assert b["fallback"]["status"] == "not_applicable"
        assert b["fallback"]["reason"].startswith("too little texture")


def test_exactly_min_valid_pairs_unmasked_pairs_are_enough():
    """6 frames, the given mask fills frames 3-5: 2 clean pairs, ``min_valid_pairs`` 2."""
    frames = _c3()
    masks = torch.zeros(6, 1, *SIZE, dtype=torch.bool)
    masks[3:, 0] = True
    d = _score(frames[:6], {"background": {"min_valid_pairs": 2}}, masks=masks)
    b = d["background"]
    assert d["status"] == "ok" and b["status"] == "ok", b.get("reason")
    assert (b["textured_pairs"], b["median_matches"]) == (2, 0)
    d = _score(frames[:6], {"background": {"min_valid_pairs": 3}}, masks=masks)
    assert d["status"] == "not_applicable" and "textured_pairs" not in d["background"]


def test_a_rows_rescoring_that_raises_is_the_clips_error(fade, monkeypatch):
    """The fallback fails for texture, then the scoring backend raises on the textured-rows
    rescoring (its second call): that exception is the clip's entry, as with no fallback."""
    from geocon_torch import score_clips
    from geocon_torch.sections import background as bg
    real, calls = bg.extract_correspondences, []

    def flaky(clip, pairs, features, **kw):
        calls.append(features.backend)
        if features.backend == "opencv-sift" and calls.count("opencv-sift") == 2:
            raise RuntimeError("rows rescoring broke")
        return real(clip, pairs, features, **kw)

    monkeypatch.setattr(bg, "extract_correspondences", flaky)
    d = score_clips([fade], preset="background", device="cpu")[0].to_dict()
    assert calls == ["opencv-sift", "lk-tracks", "opencv-sift"]
    assert d["status"] == "error" and d["reason"] == "RuntimeError: rows rescoring broke"


def test_a_rows_rescoring_stopped_by_the_masks_keeps_the_first_result(fade, monkeypatch):
    """4 textured pairs before the masks, 1 after them (frames 0-2 masked), min_valid_pairs 2:
    the rescoring on textured rows stops for texture, so the first result stays, its reason
    naming the failed fallback; that rescoring runs no fallback of its own."""
    from geocon_torch.sections import background as bg
    real, calls = bg.extract_correspondences, []

    def spy(clip, pairs, features, **kw):
        calls.append(features.backend)
        return real(clip, pairs, features, **kw)

    monkeypatch.setattr(bg, "extract_correspondences", spy)
    masks = torch.zeros(fade.shape[0], 1, *SIZE, dtype=torch.bool)
    masks[:3, 0] = True
    d = _score(fade, {"background": {"min_valid_pairs": 2}}, masks=masks)
    b = d["background"]
    texture = "too little texture: median 0 matches per pair at scale 1.0 (< 30)"
    assert d["status"] == "not_applicable" and "textured_pairs" not in b
    assert b["reason"].startswith(f"{texture}; lk-tracks fallback: "), b["reason"]
    assert b["fallback"]["from_reason"] == texture and b["fallback"]["backend"] == "lk-tracks"
    assert calls == ["opencv-sift", "lk-tracks", "opencv-sift"]


def test_a_fallback_naming_the_scoring_backend_is_no_fallback(fade, monkeypatch):
    """``features.fallback`` = the scoring backend (no fallback to run): the rows rule, as with
    a null fallback (the same block, never a stopped clip)."""
    d = _score(fade, {"features": {"fallback": "opencv-sift"}})
    b, ref = d["background"], _score(fade, OFF)["background"]
    assert d["status"] == "ok" and b["textured_pairs"] == 4 and "fallback" not in b
    assert b == ref


def test_a_fallback_config_that_raises_is_recorded_and_the_rows_scored(fade, monkeypatch):
    """Building the fallback's config raises: the clip is scored on its textured rows all the
    same, the error recorded in ``background.fallback`` (the rule stays "fallback")."""
    from geocon_torch.sections import background as bg

    def broken(cfg, device=None):
        raise RuntimeError("no fallback today")

    monkeypatch.setattr(bg, "fallback_config", broken)
    d = _score(fade)
    b = d["background"]
    assert d["status"] == "ok" and b["textured_pairs"] == 4
    assert b["fallback"]["status"] == "error"
    assert b["fallback"]["reason"] == "RuntimeError: no fallback today"
