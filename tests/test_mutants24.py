"""Mutation round 24 (session 33's new code: held dips, Epipolar-DPO frames under a stride / cap,
the winner bound, chunked mask counts, the SIFT detection budget, the score table's digits and
the per-clip text surfaces): tests that kill the mutants the existing suite let through. Every
number is closed-form or read off a synthetic pan whose frames are known."""
from __future__ import annotations

import copy
import threading
import warnings
from typing import Any, Dict

import numpy as np
import pytest
import torch

from geocon_torch.io import clips_from_tensor
from geocon_torch.io.sampling import FROZEN_MAX_MAD, _Chain, held_flags

from helpers import stored_gate

# --- io.sampling.held_flags: the two-pair windows, the cap, the HDR scale --------------------


def test_held_flags_windows_span_two_pairs_on_each_side():
    # every frame three times through a lossy encode: copies 2 grey levels apart, motion 18
    thrice = [2.0, 2.0, 18.0, 2.0, 2.0, 18.0, 2.0, 2.0]
    # pair 3 sees 18 two pairs back (its left neighbour is a dip), pair 4 sees 18 two pairs on;
    # pairs 0 / 1 and 6 / 7 have no motion within two pairs on one side
    assert held_flags(thrice, [False] * 8) == [False, False, False, True, True, False, False,
                                               False]


def test_held_flags_cap_is_8_grey_levels():
    assert held_flags([100.0, 100.0, 8.0, 100.0, 100.0], [False] * 5)[2] is True
    assert held_flags([100.0, 100.0, 8.5, 100.0, 100.0], [False] * 5)[2] is False
    assert held_flags([100.0, 100.0, 8.5, 100.0, 100.0], [False] * 5, scale=1.1)[2] is True


def _chain(mads) -> _Chain:
    chain = _Chain()
    for m in mads:
        chain.fold(float(m), False)
    return chain


def test_chain_still_flags_scale_the_cap_and_keep_the_exact_threshold_for_hdr():
    hdr = 2.0 * FROZEN_MAX_MAD  # an HDR source's frozen threshold: twice the SDR one
    # a dip of 12 grey levels: over the SDR cap of 8, within the HDR cap of 16
    chain = _chain([100.0, 100.0, 12.0, 100.0, 100.0])
    assert chain.still_flags() == [False] * 5
    assert chain.still_flags(hdr) == [False, False, True, False, False]
    # the end pairs are held by the threshold alone, inclusive
    ends = _chain([hdr, 50.0, 50.0, hdr, hdr * 1.01])
    assert ends.still_flags(hdr) == [True, False, False, True, False]


# --- readers / Epipolar-DPO: which source frames the sampled chain and the protocol read ------

def _texture() -> torch.Tensor:
    rng = np.random.default_rng(0)
    tex = torch.from_numpy(rng.integers(0, 256, (3, 160, 400), dtype=np.uint8))
    return torch.nn.functional.avg_pool2d(tex[None].float(), 3, 1, 1)[0].to(torch.uint8)


TEXTURE = _texture()


def pan(n: int) -> torch.Tensor:
    """(n, 3, 128, 192) uint8: a window moving 4 px per frame over a blurred noise texture."""
    return torch.stack([TEXTURE[:, 16:144, 4 * t: 4 * t + 192] for t in range(n)])


def test_sampled_motion_of_a_capped_read_ending_on_a_sampled_frame():
    # stride 3, max_frames 6 keeps 0, 3, ..., 15: frame 15 is kept, so frames 0 and 15 are
    # one sampled pair
    clip = clips_from_tensor(pan(46)[None], stride=3, max_frames=6, motion_every=15)[0]
    assert clip.meta["motion"]["sampled"]["pairs"] == 1
    # explicit indices sample only up to the last frame they name (not the whole source)
    clip = clips_from_tensor(pan(46)[None], indices=[0, 5], motion_every=15)[0]
    assert clip.meta["motion"]["sampled"]["pairs"] == 0


def test_file_read_with_explicit_indices_samples_up_to_the_last_index(tmp_path):
    from geocon_torch.io import read_clip
    from geocon_torch.io.writer import write_video

    video = write_video(tmp_path / "pan.mp4", pan(46))
    for stream in (False, True):
        clip = read_clip(video, long_side=None, indices=[0, 5], motion_every=15, stream=stream)
        assert clip.meta["motion"]["sampled"]["pairs"] == 0, stream
        clip = read_clip(video, long_side=None, stride=3, max_frames=6, motion_every=15,
                         stream=stream)
        assert clip.meta["motion"]["sampled"]["pairs"] == 1, stream


def _dpo(video: Any, io: Dict[str, Any]) -> Dict[str, Any]:
    from geocon_torch import score_clip

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return score_clip(video, preset="epipolar-dpo", device="cpu",
                          config={"io": io}).to_dict()["epipolar_dpo"]


def test_capped_dpo_read_keeps_a_sampled_last_kept_frame():
    pytest.importorskip("cv2")
    from geocon_torch.rewards import geometric_reward

    io = {"stride": 3, "max_frames": 6}  # kept 0, 3, ..., 15: frames 0 and 15 are read
    block = _dpo(pan(16), io)
    assert block["frames"] == [0, 15] and block["status"] == "ok"
    reward, diag = geometric_reward(pan(16)[None], "epipolar-dpo", config={"io": io})
    assert diag.status == ["ok"] and diag.clips[0].total_pairs == 1
    assert float(reward[0]) == pytest.approx(float(np.exp(-block["mean_epipolar_error"] / 5)))


def test_capped_dpo_reason_names_the_frames_read_and_a_short_clip_stays_short():
    pytest.importorskip("cv2")
    capped = _dpo(pan(46), {"stride": 2, "max_frames": 8})  # kept 0, 2, ..., 14
    assert capped["reason"].endswith("io.max_frames = 8 at io.stride = 2 reads source frames "
                                     "0..14 only)"), capped["reason"]
    assert "the clip has 46 frames" in capped["reason"]
    # 15 frames hold only frame 0 of 0, 15, ...: short by its length, whatever the cap
    short = _dpo(pan(15), {"stride": 1, "max_frames": 8})
    assert short["status"] == "not_applicable"
    assert "a clip needs at least 16 frames" in short["reason"], short["reason"]
    assert "io.max_frames" not in short["reason"]


# --- commands._common.summary_row: digits, thresholds, reasons, objects, epipolar columns -----

def _row(res: Dict[str, Any]) -> Dict[str, str]:
    from geocon_torch.commands._common import SUMMARY_COLUMNS, summary_row

    return dict(zip(SUMMARY_COLUMNS, summary_row({"clip": "c", "status": "ok", **res})))


def test_table_digits_against_the_default_thresholds_closed_form():
    # a fail within 1e-10 of the bound: up to 17 decimals, never the bound itself
    assert _row({"background": {"ir": 0.97 - 1e-10, "ge_px": 0.2, "pass": False}})["IR"] == \
        "0.9699999999"
    assert _row({"background": {"ir": 1.0, "ge_px": 3.5 + 1e-10, "pass": False}})["GE px"] == \
        "3.5000000001"
    # a pass that close: at most 8 decimals (it may print as the bound it meets)
    assert _row({"background": {"ir": 0.97 + 1e-10, "ge_px": 0.2, "pass": True}})["IR"] == \
        "0.97000000"
    assert _row({"background": {"ir": 1.0, "ge_px": 3.5 - 1e-10, "pass": True}})["GE px"] == \
        "3.50000000"
    # one number without the other still gets its digits
    assert _row({"background": {"ir": 32 / 33, "ge_px": None, "pass": False}})["IR"] == "0.9697"
    assert _row({"background": {"ir": None, "ge_px": 3.5004, "pass": False}})["GE px"] == \
        "3.5004"


def test_table_reason_column_cuts_and_statuses():
    from geocon_torch.commands._common import summary_row

    # not ok and no reason: the warnings stay out of the reason column
    assert summary_row({"clip": "c", "status": "error", "reason": None,
                        "warnings": ["w1"]})[-1] == ""
    # no space in the second half of the first 58 characters: a hard cut at 57 + "..."
    w = "x" * 10 + " " + "y" * 65
    assert _row({"warnings": [w]})["reason"] == "warning: " + "x" * 10 + " " + "y" * 46 + "..."
    # 64 characters (over 60) are cut at the last space before 58
    words = " ".join(["word"] * 13)
    assert _row({"warnings": [words]})["reason"] == "warning: " + " ".join(["word"] * 11) + \
        "..."


def test_table_objects_and_epipolar_columns_of_partial_blocks():
    assert _row({"foreground": {}})["objects"] == "-"  # an empty block: not counted
    one = _row({"epipolar_dpo": {"mean_epipolar_error": 0.25}})  # error only
    assert (one["epi err"], one["epi inl"]) == ("0.250", "-")


# --- bench.store.flatten_row / result.gvgc_block ----------------------------------------------

GVGC = {"preset": "gvgc", "implementation": "opencv", "status": "ok", "reason": None,
        "mean_error": 0.5825566011015934, "median_error": 0.32316458774823387,
        "keep_rate": 0.6211159221903019, "pairs": 66, "valid_pairs": 66}


def test_flat_row_of_an_empty_foreground_block_counts_no_objects():
    from geocon_torch.bench.store import flatten_row

    res = {"status": "ok", "score": 0.5, "foreground": {}, "background": {"ir": 1.0}}
    assert flatten_row({"clip_id": "e", "result": res})["num_objects"] is None


def test_gvgc_block_rules():
    from geocon_torch.result import gvgc_block

    # an empty epipolar_gvgc does not hide preset gvgc's block in ``epipolar``
    assert gvgc_block({"epipolar_gvgc": {}, "epipolar": dict(GVGC)}) == GVGC
    # a block with the WorldAtlas error is never GVGC's, whatever else it holds
    assert gvgc_block({"epipolar": {"epipolar_error": 0.1, "median_error": 0.2,
                                    "keep_rate": 0.5, "preset": "gvgc"}}) == {}
    # each of preset / median_error / keep_rate marks a GVGC block
    assert gvgc_block({"epipolar": {"preset": "gvgc", "status": "error"}}) == {
        "preset": "gvgc", "status": "error"}
    assert gvgc_block({"epipolar": {"keep_rate": 0.5}}) == {"keep_rate": 0.5}
    assert gvgc_block({"epipolar": {"status": "ok"}}) == {}


# --- features.opencv_sift.DetectionBudget: a share that exactly fills the budget ---------------

def test_detection_budget_admits_a_share_that_exactly_fills_it():
    from geocon_torch.features.opencv_sift import DetectionBudget

    budget = DetectionBudget(100)
    inside, release = threading.Event(), threading.Event()

    def second() -> None:
        with budget.hold(40):
            inside.set()
            release.wait(10)

    with budget.hold(60):
        t = threading.Thread(target=second, daemon=True)
        t.start()
        entered = inside.wait(10)  # 60 + 40 = 100 fits: it enters while the first holds
        used = budget.used
        release.set()
    t.join(10)
    assert entered and used == 100 and budget.used == 0


# --- report.text helpers -----------------------------------------------------------------------

def test_epipolar_text_and_blocks_closed_form():
    from geocon_torch.report.text import epipolar_blocks, epipolar_text

    assert epipolar_text("gvgc", GVGC) == ("median error 0.3232 px, mean error 0.5826 px, keep "
                                           "rate 0.6211 (66 of 66 valid pairs)")
    wa = {"epipolar_error": 0.1, "epipolar_inlier_rate": 0.9, "feature_match_coverage": 0.5,
          "pairs": 4, "valid_pairs": 3, "fallback_used": True, "method": "lk"}
    assert epipolar_text("worldatlas", wa) == ("error 0.1 px, inlier rate 0.9, coverage 0.5 (3 of "
                                               "4 valid pairs); matched by its fallback method lk")
    assert epipolar_text("epipolar-dpo", {"status": "error", "reason": "boom"}) == "error: boom"
    # preset gvgc's ``epipolar`` block is GVGC's only, not also a WorldAtlas trio
    assert epipolar_blocks({"epipolar": dict(GVGC)}) == [("gvgc", GVGC)]


def test_scoring_notes_only_when_scored_another_way():
    from geocon_torch.report.text import _textured_factor, scoring_notes

    assert _textured_factor(0.0, {"pairs": 7, "textured_pairs": 0}) == ""
    assert scoring_notes({"background": {"status": "ok", "pairs": 7, "textured_pairs": 7}}) == []
    ok_fb = {"backend": "lk-tracks", "status": "ok"}  # a fallback that did not take over
    assert scoring_notes({"background": {"status": "ok", "fallback": ok_fb},
                          "backends": {"features": "opencv-sift"}}) == []
    took = {"backend": "lk-tracks", "status": "ok", "from": "opencv-sift", "from_reason": "few"}
    assert scoring_notes({"background": {"status": "ok", "fallback": took},
                          "backends": {"features": "lk-tracks",
                                       "features_fallback_from": "opencv-sift"}}) == [
        "background scored by the lk-tracks fallback (opencv-sift: few)"]


def test_image_folder_capped_or_indexed_reads_sample_only_the_frames_read(tmp_path):
    from PIL import Image

    from geocon_torch.io import read_clip

    for t, frame in enumerate(pan(31)[:, :, :24, :32]):
        Image.fromarray(frame.permute(1, 2, 0).numpy()).save(tmp_path / f"f{t:03d}.png")
    for stream in (False, True):
        whole = read_clip(str(tmp_path), long_side=None, stride=2, motion_every=15,
                          stream=stream)
        assert whole.meta["motion"]["sampled"]["pairs"] == 2, stream  # 0, 15, 30
        capped = read_clip(str(tmp_path), long_side=None, stride=2, max_frames=8,
                           motion_every=15, stream=stream)  # kept 0..14
        assert capped.meta["motion"]["sampled"]["pairs"] == 0, stream
        indexed = read_clip(str(tmp_path), long_side=None, indices=[0, 5], motion_every=15,
                            stream=stream)
        assert indexed.meta["motion"]["sampled"]["pairs"] == 0, stream


# --- the gate's rule on the card / in geocon explain -------------------------------------------

WHY_U = "noise floor reaches half the F threshold"


_gate = stored_gate


# U under a noise-limited band, resolved to F by the support margin at u_margin 0.05
SHORT = _gate("U", 6.9, (10.35, 16.0), 2.3, why_u=WHY_U, u_resolved="F", gric_delta=-0.0471,
              u_support_margin=0.0749)
FLOOR = "noise floor 4.5 x 2.3 = 10.35 ref px reaches half the F threshold 16 ref px"


def test_h_impossible_names_the_bound_that_reaches_half_the_f_threshold():
    from geocon_torch.report.text import h_impossible

    assert h_impossible(SHORT) == FLOOR
    # a floor of 4.5 under 8 while the band's H bound 9 reaches it: the bound is named
    raised = _gate("U", 6.9, (9.0, 16.0), 1.0, why_u=WHY_U)
    assert h_impossible(raised) == "H bound 9 ref px reaches half the F threshold 16 ref px"
    other = copy.deepcopy(raised)
    other["evidence"]["statistic_name"] = "t_inf"  # another statistic: no such rule
    assert h_impossible(other) is None


def test_band_text_and_decision_of_f_and_u_gates():
    from geocon_torch.report.audit import gate_rationale
    from geocon_torch.report.text import band_text

    f_gate = _gate("F", 20.0, (10.35, 16.0), 2.3, why_u=WHY_U)  # a stale why_u on an F gate
    assert band_text(f_gate, 10.35, 16.0, " ref px") == (
        f"H not possible ({FLOOR}), F if >= 16 ref px")
    assert band_text(SHORT, 10.35, 16.0, " ref px") == "H not possible, F if >= 16 ref px"
    card = gate_rationale(f_gate, "F")
    assert "F if >= 16 ref px, U below (noise-adaptive" in card
    assert "decision F;" in card and WHY_U not in card
    assert f"decision U ({WHY_U})" in gate_rationale(SHORT, "F")


def test_u_resolution_of_other_gates_and_ties():
    from geocon_torch.report.text import u_resolution

    f_gate = _gate("F", 132.5, (57.68, 57.68), 12.82, u_resolved="F", gric_delta=0.738)
    assert u_resolution(f_gate, 0.05) is None  # not a U
    to_h = copy.deepcopy(SHORT)
    to_h["evidence"].update(u_resolved="H")  # the margin favours F, recorded H
    assert u_resolution(to_h, 0.05) == (
        "U resolved to H (as recorded; GRIC delta -0.0471 <= 0 favours H; support margin "
        "IR_F - IR_H 0.0749 > u_margin 0.05)")
    tie = copy.deepcopy(SHORT)
    tie["evidence"].update(u_resolved="H", gric_delta=0.0, u_support_margin=0.01)
    assert u_resolution(tie, 0.05) == (
        "U resolved to H: neither term favours F (GRIC delta 0 <= 0 favours H; support margin "
        "IR_F - IR_H 0.01 <= u_margin 0.05)")


def test_the_stored_u_margin_decides_the_resolution_text():
    from geocon_torch.report.audit import _facts, gate_rationale
    from geocon_torch.report.explain import explain_result, gate_lines
    from geocon_torch.report.text import stored_u_margin

    want = ("U resolved to F (as recorded; GRIC delta -0.0471 <= 0 favours H; support margin "
            "IR_F - IR_H 0.0749 <= u_margin 0.1)")
    assert stored_u_margin({"config": {"gate": {"u_margin": 0.1}}}) == 0.1
    assert want in gate_rationale(SHORT, "F", 0.1)
    assert gate_lines(SHORT, "F", 0.1)[-1] == f"  {want}."
    res = {"clip": "c", "status": "ok", "reason": None, "regime": "F", "gate": SHORT,
           "score": 0.9, "score_terms": {"ge": 0.9}, "warnings": [],
           "background": {"status": "ok", "ir": 1.0, "ge_px": 0.05, "pass": True, "pairs": 7,
                          "valid_pairs": 7},
           "config": {"preset": "background", "gate": {"u_margin": 0.1}},
           "backends": {"features": "opencv-sift"}}
    assert f"  {want}." in explain_result(res, evidence=False).splitlines()
    assert want.replace("<=", "&lt;=") in dict(_facts({}, res))["gate"]


def test_score_line_and_has_background_by_preset():
    from geocon_torch.report.text import has_background, score_line

    ok = {"status": "ok", "score": None, "score_terms": {}}
    assert score_line({**ok, "config": {"preset": "worldatlas"}}) == (
        "Score unknown [0-1, higher is better]")  # a preset with a headline term
    assert score_line({**ok, "config": {"preset": "gvgc"}}).startswith(
        "Score n/a (preset 'gvgc' folds no headline score")
    assert has_background({"config": {}, "background": {}}) is False
    assert has_background({"config": {"preset": "unknown"}, "background": {"ir": 1.0}}) is True


WA = {"epipolar_error": 0.1, "epipolar_inlier_rate": 0.9, "feature_match_coverage": 0.5,
      "pairs": 4, "valid_pairs": 3, "implementation": "torch"}


def test_card_and_explain_of_preset_all_list_every_epipolar_block():
    from geocon_torch.errors import InputError
    from geocon_torch.report.audit import _facts
    from geocon_torch.report.explain import epipolar_lines, explain_result

    res = {"clip": "c", "status": "ok", "score": None, "score_terms": {}, "background": {},
           "gate": {}, "config": {"preset": "all"}, "epipolar": WA, "epipolar_gvgc": GVGC}
    labels = [k for k, _ in _facts({}, res)]
    assert "epipolar trio" in labels and "epipolar (GVGC)" in labels
    assert epipolar_lines(res) == [
        "Epipolar (WorldAtlas, torch): error 0.1 px, inlier rate 0.9, coverage 0.5 (3 of 4 "
        "valid pairs).",
        "Epipolar (GVGC, opencv): median error 0.3232 px, mean error 0.5826 px, keep rate "
        "0.6211 (66 of 66 valid pairs)."]
    with pytest.raises(InputError, match="no background pairs"):
        explain_result({"clip": "c", "status": "ok", "config": {"preset": "gvgc"},
                        "epipolar": GVGC}, pair=0, evidence=False)


def test_card_objects_of_a_scored_clip_without_movers():
    from geocon_torch.report.audit import _facts

    res = {"clip": "c", "status": "ok", "score": 0.5, "score_terms": {"ge": 0.5},
           "config": {"preset": "geocon"}, "backends": {"masks": None},
           "background": {"status": "ok", "ir": 1.0, "ge_px": 0.1, "pairs": 4,
                          "valid_pairs": 4},
           "foreground": {"objects": [], "status": "not_applicable", "reason": "no movers"}}
    assert dict(_facts({}, res))["objects"] == "none (no movers)"


def test_score_line_of_a_gvgc_result_with_terms_is_not_termless():
    from geocon_torch.report.text import score_line

    res = {"status": "ok", "score": None, "score_terms": {"ge": 0.5},
           "config": {"preset": "gvgc"}}
    assert score_line(res) == "Score unknown (ge 0.5) [0-1, higher is better]"


def test_change_lines_of_a_quiet_u_keep_the_h_rule():
    from geocon_torch.config import GeoConConfig
    from geocon_torch.report.explain import change_lines

    quiet = _gate("U", 5.0, (4.9, 16.0), 1.0, why_u="the interval straddles the band")
    res = {"clip": "c", "status": "ok", "regime": "H", "gate": quiet,
           "config": {"preset": "background"},
           "background": {"status": "ok", "ir": 1.0, "ge_px": 0.1, "pairs": 4,
                          "valid_pairs": 4}}
    assert change_lines(res, GeoConConfig())[-1] == (
        "  the gate would decide H when the interval of parallax_magnitude lies at or below 4.9 "
        "ref px (and its noise floor under half the F threshold), F when it lies at or above 16 "
        "ref px (now 5 ref px, interval [4, 7] ref px).")


def test_detection_budget_wakes_every_waiter_that_fits():
    from geocon_torch.features.opencv_sift import DetectionBudget

    budget = DetectionBudget(100)
    inside = [threading.Event(), threading.Event()]
    release = threading.Event()

    def waiter(k: int) -> None:
        with budget.hold(40):
            inside[k].set()
            release.wait(10)

    with budget.hold(100):  # both waiters queue behind the whole budget
        threads = [threading.Thread(target=waiter, args=(k,), daemon=True) for k in (0, 1)]
        for t in threads:
            t.start()
        for _ in range(1000):  # until both wait on the condition
            if len(getattr(budget._cond, "_waiters", ())) == 2:
                break
            threading.Event().wait(0.005)
    both = inside[0].wait(10) and inside[1].wait(10)  # 40 + 40 fit at once: both enter
    release.set()
    for t in threads:
        t.join(10)
    assert both and budget.used == 0


def test_min_chosen_reward_of_1_is_accepted(tmp_path):
    from geocon_torch.bench.preferences import choose_pair, preference_pairs
    from geocon_torch.rewards import ClipReward

    assert preference_pairs([], tmp_path / "r.sqlite", min_chosen_reward=1.0)[0] == []
    rewards = [("a", ClipReward(1.0, "ok", None, 1, 1)), ("b", ClipReward(0.5, "ok", None, 1, 1))]
    rec = choose_pair("p", rewards, "epipolar-dpo", min_chosen_reward=1.0)
    assert rec["status"] == "pair" and (rec["chosen"], rec["rejected"]) == ("a", "b")


def test_capped_dpo_block_without_valid_pairs_keeps_its_own_reason():
    pytest.importorskip("cv2")
    flat = torch.full((46, 3, 64, 96), 128, dtype=torch.uint8)
    block = _dpo(flat, {"stride": 2, "max_frames": 16})  # frames 0, 15, 30 read: 2 pairs
    assert (block["valid_pairs"], block["total_pairs"]) == (0, 2)
    why = "no valid pair: 2 of 2 pairs: not enough keypoints (< 8 in a frame)"
    assert block["reason"] == why
    from geocon_torch.rewards import geometric_reward

    _, diag = geometric_reward(flat[None], "epipolar-dpo",
                               config={"io": {"stride": 2, "max_frames": 16}})
    assert diag.status == ["not_applicable"] and diag.clips[0].reason == why


def test_preference_pairs_apply_min_chosen_reward(tmp_path, monkeypatch):
    from helpers import CountingScorer, write_clips, write_jsonl

    from geocon_torch.bench.preferences import preference_pairs

    rows = write_clips(tmp_path / "clips", 2)
    for r in rows:
        r["prompt"] = "p"
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", CountingScorer())
    (rec,), _ = preference_pairs(m, tmp_path / "r.sqlite", kind="background")
    assert rec["status"] == "pair" and rec["chosen"] is not None
    (rec,), _ = preference_pairs(m, tmp_path / "r.sqlite", kind="background",
                                 min_chosen_reward=1.0)
    assert rec["status"] == "skipped" and "below the minimum chosen reward" in rec["reason"]
