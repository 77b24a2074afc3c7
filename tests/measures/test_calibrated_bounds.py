"""The calibrated gate's bounds, one by one: ``bound_checks`` agrees with ``calibrated_pass``,
and ``geocon explain`` / the audit card name every bound with the clip's value, the threshold,
pass / fail and the failed one(s)."""
import pytest

from geocon_torch import score_clip
from geocon_torch.measures.calibration import (bound_checks, calibrated_pass,
                                               clip_statistics)
from geocon_torch.report.audit import _bounds_html, _facts
from geocon_torch.report.explain import explain_result
from geocon_torch.report.text import calibrated_checks, calibrated_verdict
from geocon_torch.synth import grounded_clip

TH = {"F": {"ir_min": 0.999, "ge_norm_max": 0.35, "ge_fine_norm_max": 0.22,
            "ge_spread_norm_max": 0.5, "ge_h_norm_min": 0.3}}


def test_checks_name_the_failed_bound_and_agree_with_the_verdict():
    # 512-px clip: scale 2 -> GE 0.1 px = 0.2 norm (ok), fine 0.12 px = 0.24 (> 0.22 fails),
    # peak 0.2 px -> spread 0.16 (ok), GE_H 0.2 px = 0.4 (>= 0.3 ok)
    kw = dict(ge_fine_px=0.12, ge_peak_px=0.2, ge_h_px=0.2)
    stats = clip_statistics(1.0, 0.1, 2.0, **kw)
    assert stats["ge_norm"] == pytest.approx(0.2) and stats["ge_spread_norm"] == pytest.approx(0.16)
    checks = bound_checks(stats, TH["F"])
    assert [c.key for c in checks] == ["ir_min", "ge_norm_max", "ge_fine_norm_max",
                                       "ge_spread_norm_max", "ge_h_norm_min"]
    assert [c.key for c in checks if not c.passed] == ["ge_fine_norm_max"]
    assert checks[2].describe() == "GE_fine 0.24 px > 0.22 px: FAILS"
    assert checks[4].describe() == "GE_H 0.4 px >= 0.3 px: ok"
    assert calibrated_pass(1.0, 0.1, 512, "F", TH, **kw) is False
    assert calibrated_pass(1.0, 0.1, 512, "F", TH, ge_fine_px=0.1, ge_peak_px=0.2,
                           ge_h_px=0.2) is True
    # no valid H pair: GE_H is +inf and meets the lower bound
    assert bound_checks(clip_statistics(1.0, 0.1, 2.0), TH["F"])[4].passed


def _result(ge_fine_px, ge_h_px):
    """A stored result at 512 px with the record the background section writes (px at 512)."""
    rec = {"regime": "F", "ir": 0.999, "ge_px": 0.175, "ge_norm_max": 0.35,
           "ge_fine_px": 0.11, "ge_spread_px": 0.25, "ge_h_px_min": 0.15}
    passed = calibrated_pass(1.0, 0.1, 512, "F", TH, ge_fine_px=ge_fine_px, ge_peak_px=0.2,
                             ge_h_px=ge_h_px)
    bg = {"status": "ok", "ir": 1.0, "ge_px": 0.1, "ge_fine_px": ge_fine_px, "ge_peak_px": 0.2,
          "ge_h_px": ge_h_px, "pass": True, "pass_calibrated": passed,
          "calibration": {"name": "default:opencv-sift", "hash": "abc", "thresholds": rec}}
    return {"clip": "c", "status": "ok", "regime": "F", "background": bg}


def test_explain_and_card_name_every_bound():
    res = _result(0.12, 0.1)  # fine 0.12 > 0.11 and GE_H 0.1 < 0.15: two bounds fail
    assert res["background"]["pass_calibrated"] is False
    text = explain_result(res, evidence=False)
    assert ("Report gate (calibrated, F bounds, default:opencv-sift): FAIL -- failed: "
            "GE_fine 0.12 px > 0.11 px, GE_H 0.1 px < 0.15 px") in text
    for line in ("  IR 1 >= 0.999: ok", "  GE 0.1 px <= 0.175 px: ok",
                 "  GE_fine 0.12 px > 0.11 px: FAILS", "  GE_spread 0.08 px <= 0.25 px: ok",
                 "  GE_H 0.1 px < 0.15 px: FAILS"):
        assert line in text
    card = _bounds_html(res["background"])
    assert card.startswith("FAIL (failed: GE_fine, GE_H)")
    assert "<b>GE_fine 0.12 px &gt; 0.11 px: FAILS</b>" in card
    assert "<li>GE 0.1 px &lt;= 0.175 px: ok</li>" in card
    assert "fails GE_fine 0.12 px > 0.11 px, GE_H 0.1 px < 0.15 px" in \
        calibrated_verdict(res["background"])
    ok = _result(0.1, 0.2)
    assert ok["background"]["pass_calibrated"] is True
    assert "): PASS\n" in explain_result(ok, evidence=False) and \
        _bounds_html(ok["background"]).startswith("PASS<ul")


def test_no_calibrated_gate():
    res = _result(0.1, 0.2)
    del res["background"]["pass_calibrated"]
    assert calibrated_checks(res["background"]) is None
    assert "calibrated" not in explain_result(res, evidence=False)
    assert _bounds_html(res["background"]) == "off"


@pytest.mark.parametrize("kw", [{}, {"corruption": "breathing", "severity": 1.0}])
def test_stored_bounds_reproduce_the_scored_verdict(kw):
    """On scored clips the bounds re-read from the result (px at the working size) give the
    verdict the scorer stored (normalised px)."""
    clip = grounded_clip("C3", num_frames=6, size=(120, 160), **kw)
    bg = score_clip(clip.frames, preset="background", device="cpu").background
    checks = calibrated_checks(bg)
    assert checks and len(checks) >= 4
    assert all(c.passed for c in checks) is bg["pass_calibrated"]


def test_score_line_in_explain_and_card():
    res = _result(0.1, 0.2)
    res.update(score=0.8712, score_terms={"match": 0.8, "inliers": 0.99, "ge": 0.97})
    line = "Score 0.871 (match 0.8, inliers 0.99, ge 0.97) [0-1, higher is better]"
    assert line in explain_result(res, evidence=False).splitlines()
    assert dict(_facts({}, res))["score"] == line
    assert "Score unknown [0-1" in explain_result(_result(0.1, 0.2), evidence=False)


TH_P = {"F": {"ir_min": 0.999, "ge_norm_max": 0.35, "ge_fine_norm_max": 0.22,
              "ge_spread_norm_max": 0.5, "parallax_ref_min": 11.0}}


def test_parallax_bound_reads_reference_px_at_every_size():
    """The gate's parallax magnitude is already in reference px: the same value passes or fails
    at 256 and 1024 px alike (no working-size scaling, unlike the GE bounds)."""
    kw = dict(ge_fine_px=0.02, ge_peak_px=0.03)
    for long_side in (256, 1024):
        stats = clip_statistics(1.0, 0.02, 1024 / long_side, parallax_ref=37.5, **kw)
        assert stats["parallax_ref"] == 37.5
        checks = bound_checks(stats, TH_P["F"])
        assert [c.key for c in checks][-1] == "parallax_ref_min"
        assert checks[-1].describe() == "parallax 37.5 ref px >= 11 ref px: ok"
        assert calibrated_pass(1.0, 0.02, long_side, "F", TH_P, parallax_ref=37.5, **kw)
        # a breathing-like clip gated F by GRIC with ~5 reference px of parallax fails
        assert calibrated_pass(1.0, 0.02, long_side, "F", TH_P, parallax_ref=5.2,
                               **kw) is False
    # no gate magnitude (another gate method): the bound is met
    assert bound_checks(clip_statistics(1.0, 0.02, 4.0, **kw), TH_P["F"])[-1].passed


def test_explain_names_the_parallax_bound():
    rec = {"regime": "F", "ir": 0.999, "ge_px": 0.0875, "ge_norm_max": 0.35,
           "ge_fine_px": 0.055, "ge_spread_px": 0.125, "parallax_ref_min": 11.0}
    bg = {"status": "ok", "ir": 1.0, "ge_px": 0.02, "ge_fine_px": 0.02, "ge_peak_px": 0.03,
          "parallax_ref": 6.0, "pass": True, "pass_calibrated": False,
          "calibration": {"name": "default:opencv-sift", "hash": "abc", "thresholds": rec}}
    text = explain_result({"clip": "c", "status": "ok", "regime": "F", "background": bg},
                          evidence=False)
    assert "failed: parallax 6 ref px < 11 ref px" in text


def test_lower_bounds_are_inclusive():
    """``ir_min``, ``parallax_ref_min`` and ``ge_h_norm_min`` are met by a value equal to the
    bound (IR is a ratio of counts: IR == ir_min happens), and within the relative 1e-9 slack
    below it; a value clearly below fails. The upper GE bound, also inclusive, is the control."""
    th = {"F": {"ir_min": 0.97, "ge_norm_max": 0.4, "parallax_ref_min": 16.0,
                "ge_h_norm_min": 0.3}}
    kw = dict(ge_h_px=0.3, parallax_ref=16.0)  # long side 1024: px = normalised px
    assert calibrated_pass(0.97, 0.1, 1024, "F", th, **kw) is True  # every bound met exactly
    assert calibrated_pass(0.97 * (1 - 5e-10), 0.1, 1024, "F", th, **kw) is True
    assert calibrated_pass(0.97 * (1 - 1e-8), 0.1, 1024, "F", th, **kw) is False
    assert calibrated_pass(0.96, 0.1, 1024, "F", th, **kw) is False
    assert calibrated_pass(1.0, 0.1, 1024, "F", th, ge_h_px=0.3, parallax_ref=15.99) is False
    assert calibrated_pass(1.0, 0.1, 1024, "F", th, ge_h_px=0.29, parallax_ref=16.0) is False
    checks = bound_checks(clip_statistics(0.97, 0.4, 1.0, ge_h_px=0.3, parallax_ref=16.0),
                          th["F"])
    assert [(c.key, c.value, c.passed) for c in checks] == [
        ("ir_min", 0.97, True), ("ge_norm_max", 0.4, True), ("parallax_ref_min", 16.0, True),
        ("ge_h_norm_min", 0.3, True)]
    assert checks[0].describe() == "IR 0.97 >= 0.97: ok"
    assert checks[2].describe() == "parallax 16 ref px >= 16 ref px: ok"
