"""Per-clip text surfaces of session 33 (audit s33 surfaces F2, F3, F5-F7): the audit card and
``geocon explain`` state the gate rule the gate applies (no H bound on a noise-limited band, the
U reason, the term that resolved a U), every epipolar protocol's numbers, the textured-pairs
factor of the ``ge`` term, the lk-tracks fallback, the result's warnings; the report's frozen
note and the card's gate / objects rows of a clip that was not scored."""
from __future__ import annotations

import copy
from pathlib import Path
from typing import Any, Dict

import torch

from geocon_torch import score_clip
from geocon_torch.config import GeoConConfig
from geocon_torch.gate.parallax import _magnitude_decision
from geocon_torch.report import audit_card
from geocon_torch.report.audit import _facts, gate_rationale
from geocon_torch.report.explain import change_lines, explain_result, gate_lines
from geocon_torch.report.html import _frozen_note
from geocon_torch.report.text import score_line
from geocon_torch.synth import grounded_clip

from helpers import stored_gate

WHY_U = ("noise floor 4.5 x 2.30 ref px reaches half the F threshold 16: H cannot be told "
         "from a small parallax")


_gate = stored_gate


# realshort (12 frames at 256 px): U below the H bound, resolved F by the support margin
REALSHORT = _gate("U", 6.899421691894531, (10.348158717155457, 16.0), 2.299590826034546,
                  why_u=WHY_U, u_resolved="F", gric_delta=-0.04709164425730705,
                  u_support_margin=0.07485800981521606)
# rubber sheet: F with a band collapsed to the noise floor 57.68 ref px (H impossible)
RUBBER = _gate("F", 132.56414794921875, (57.677879333496094, 57.677879333496094),
               12.817306518554688, u_resolved="F", gric_delta=0.7383899688720703)


def _res(gate: Dict[str, Any], regime: str = "F", **extra: Any) -> Dict[str, Any]:
    res = {"clip": "c", "status": "ok", "reason": None, "regime": regime, "gate": gate,
           "score": 0.9, "score_terms": {"ge": 0.9}, "warnings": [],
           "background": {"status": "ok", "ir": 1.0, "ge_px": 0.05, "pass": True,
                          "pairs": 7, "valid_pairs": 7},
           "config": {"preset": "background"}, "backends": {"features": "opencv-sift"}}
    res.update(extra)
    return res


# --- F2: the gate rule as the gate applies it ---------------------------------------------------

def test_card_gives_the_u_reason_and_no_h_bound_when_the_band_is_noise_limited():
    card = gate_rationale(REALSHORT, "F")
    assert "H if <=" not in card  # 6.899 < 10.35 and still U: H is not possible at this noise
    assert "H not possible" in card and WHY_U in card
    explain = gate_lines(REALSHORT, "F")
    assert "H if <=" not in explain[1] and "H not possible" in explain[1]


def test_u_resolution_names_the_term_that_decided():
    card = gate_rationale(REALSHORT, "F")
    assert "support margin" in card and "0.0749 > u_margin 0.05" in card
    assert "GRIC delta -0.0471 <= 0 favours H" in card  # not cited as the reason for F
    explain = gate_lines(REALSHORT, "F")[-1]
    assert "by the support margin" in explain and "favours H" in explain
    by_gric = copy.deepcopy(REALSHORT)
    by_gric["evidence"].update(gric_delta=0.2, u_support_margin=0.01)
    assert "U resolved to F by GRIC" in gate_rationale(by_gric, "F")
    to_h = copy.deepcopy(REALSHORT)
    to_h["evidence"].update(u_resolved="H", u_support_margin=0.01)
    assert "neither" in gate_rationale(to_h, "H")


def test_a_noisy_f_clip_never_reads_would_flip_to_h():
    card = gate_rationale(RUBBER, "F")
    assert "H if <=" not in card and "H not possible" in card
    change = change_lines(_res(RUBBER), GeoConConfig())[-1]
    assert "flip to H" not in change and "H is not possible" in change
    # the gate itself: an interval entirely below the H bound at this noise is U, not H
    low = RUBBER["evidence"]["band_ref_px"][0]
    med = {"parallax_magnitude": low - 2, "parallax_magnitude_lo": low - 3,
           "parallax_magnitude_hi": low - 1, "noise_ref_px": RUBBER["evidence"]["noise_ref_px"]}
    assert _magnitude_decision(med, [200, 200], GeoConConfig().gate, {}) == "U"
    # a quiet band keeps its H bound and its flip point
    quiet = _gate("H", 2.29, (4.915431, 16.0), 1.09)
    assert "H if <= 4.915 ref px" in gate_rationale(quiet, "H")
    assert "flip to F" in change_lines(_res(quiet, "H"), GeoConConfig())[-1]


# --- F3: epipolar protocols in geocon explain / on the card -------------------------------------

WORLDATLAS = {"preset": "worldatlas", "implementation": "opencv", "status": "ok", "reason": None,
              "epipolar_error": 0.028195378955277833, "epipolar_inlier_rate": 1.0,
              "feature_match_coverage": 0.7886551922602025, "pairs": 7, "valid_pairs": 7}
GVGC = {"preset": "gvgc", "implementation": "opencv", "status": "ok", "reason": None,
        "mean_error": 0.5825566011015934, "median_error": 0.32316458774823387,
        "keep_rate": 0.6211159221903019, "pairs": 66, "valid_pairs": 66}
DPO = {"preset": "epipolar-dpo", "status": "ok", "reason": None,
       "mean_epipolar_error": 0.12980458813749465, "mean_inlier_rate": 1.0,
       "valid_pairs": 1, "total_pairs": 1, "frames": [0, 15]}


def _epi(preset: str, **blocks: Any) -> Dict[str, Any]:
    return {"clip": "c", "status": "ok", "reason": None, "regime": None, "gate": {},
            "background": {}, "score": None, "score_terms": {}, "warnings": [],
            "config": {"preset": preset}, **blocks}


def test_explain_of_epipolar_presets_prints_their_protocol():
    for preset, res, wanted in (
            ("worldatlas", _epi("worldatlas", epipolar=WORLDATLAS, score=0.924,
                                score_terms={"match": 0.789, "inliers": 1.0}),
             ["error 0.0282 px, inlier rate 1, coverage 0.7887"]),
            ("gvgc", _epi("gvgc", epipolar=GVGC), ["median error 0.3232 px", "keep rate 0.6211"]),
            ("epipolar-dpo", _epi("epipolar-dpo", epipolar_dpo=DPO),
             ["mean epipolar error 0.1298 px", "mean inlier rate 1", "1 of 1 valid pairs"])):
        text = explain_result(res, evidence=False)
        for w in wanted:
            assert w in text, (preset, text)
        for empty in ("Regime unknown", "Pairs: none of 0", "Report gate", "Score unknown",
                      "What would change it"):
            assert empty not in text, (preset, text)


def test_explain_of_preset_all_keeps_the_background_and_adds_both_blocks():
    gvgc = dict(GVGC, status="not_applicable", reason="gvgc preset needs at least 71 frames")
    res = _res(RUBBER, epipolar=WORLDATLAS, epipolar_gvgc=gvgc, config={"preset": "all"})
    text = explain_result(res, evidence=False)
    assert "Epipolar (WorldAtlas" in text and "Epipolar (GVGC" in text
    assert "not_applicable: gvgc preset needs at least 71 frames" in text
    assert "Regime F" in text and "What would change it" in text


def test_card_epipolar_row_of_a_gvgc_and_a_dpo_block():
    facts = dict(_facts({}, _epi("gvgc", epipolar=GVGC)))
    row = [v for k, v in facts.items() if "GVGC" in k or "gvgc" in k]
    assert row and "median error 0.3232 px" in row[0] and "keep rate 0.6211" in row[0]
    assert "-" not in row[0].split("px")[0]
    facts = dict(_facts({}, _epi("epipolar-dpo", epipolar_dpo=DPO)))
    row = [v for k, v in facts.items() if "DPO" in k]
    assert row and "mean epipolar error 0.1298 px" in row[0]


def test_explain_of_a_scored_dpo_result():
    frames = grounded_clip("C3", num_frames=16, size=(96, 128)).frames
    res = score_clip(frames, preset="epipolar-dpo").to_dict()
    text = explain_result(res, evidence=False)
    assert "Epipolar-DPO" in text and "Regime unknown" not in text


# --- F5: textured pairs and the fallback --------------------------------------------------------

def test_score_line_prints_the_textured_share_of_the_ge_term():
    res = _res(RUBBER, score=0.4110562136016609, score_terms={"ge": 0.4110562136016609})
    res["background"].update(pairs=7, textured_pairs=3)
    line = score_line(res)
    assert "ge 0.411 = 0.959 x 3/7 textured pairs" in line
    assert line in explain_result(res, evidence=False)
    assert dict(_facts({}, res))["score"] == line


def test_the_lk_tracks_fallback_is_named_without_a_calibration():
    res = _res(RUBBER)
    res["backends"] = {"features": "lk-tracks", "features_fallback_from": "opencv-sift"}
    res["background"]["fallback"] = {
        "from": "opencv-sift", "backend": "lk-tracks", "status": "ok", "reason": None,
        "from_reason": "too little texture: median 15 matches per pair at scale 1.0 (< 30)"}
    text = explain_result(res, evidence=False)
    assert "scored by the lk-tracks fallback" in text and "median 15 matches" in text
    assert "scored by the lk-tracks fallback" in " ".join(v for _, v in _facts({}, res))


# --- F6: warnings --------------------------------------------------------------------------------

def test_warnings_on_the_card_and_in_explain_escaped(tmp_path: Path):
    held = ("6 of 12 frames repeat the previous frame (held frames): pairs of two identical "
            "frames are not scored")
    res = _res(RUBBER, warnings=[held, "<b>x</b>\x1b[2J"])
    text = explain_result(res, evidence=False)
    assert f"Warning: {held}" in text.splitlines()
    assert "\x1b" not in text and "Warning: <b>x</b>\\x1b[2J" in text
    card = audit_card({"clip_id": "c", "result": res}, tmp_path / "img", draw=False)
    assert held in card and "<b>x</b>" not in card and "&lt;b&gt;x&lt;/b&gt;" in card


# --- F7: clips that were not scored ---------------------------------------------------------------

def test_frozen_note_does_not_promise_a_score_to_unscored_clips():
    note = " ".join(_frozen_note([{"generator": "g", "frozen": True,
                                   "status": "not_applicable"}]))
    assert "keep their geometric score" not in note and "not scored" in note
    both = " ".join(_frozen_note([{"generator": "g", "frozen": True, "status": "ok"},
                                  {"generator": "h", "frozen": True, "status": "error"}]))
    assert "g (1). They keep their geometric score" in both and "h (1)" in both


def test_card_gate_and_objects_rows_of_a_clip_never_scored():
    res = score_clip(torch.full((8, 3, 96, 128), 128, dtype=torch.uint8),
                     preset="geocon").to_dict()
    assert res["status"] == "not_applicable"
    assert "None" not in gate_rationale(res["gate"], res["regime"])
    assert gate_rationale({"method": None, "decision": None}, None) == (
        "no gate decision recorded")
    objects = dict(_facts({}, res))["objects"]
    assert "given or found" not in objects and "not run" in objects
