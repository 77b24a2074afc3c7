"""Report numbers, verdicts and picks that no other default test pins (mutation audit s21,
area mut6_report): ``geocon explain`` margins, failing-pair and scan boundaries, gate flip
points, the calibrated-gate text, audit-card facts and drawings, HTML card / leaderboard
picks and the data the report's plots are drawn from. Hand-made rows with closed-form
answers; no video is scored."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from geocon_torch.config import GeoConConfig
from geocon_torch.errors import InputError
from geocon_torch.report import PairEvidence, plots
from geocon_torch.report.audit import _draw_pair, _facts, _pick_pair, gate_rationale
from geocon_torch.report.audit import timeline_series
from geocon_torch.report.explain import (calibrated_lines, change_lines, explain_result,
                                         failing_pairs, gate_lines, outlier_lines, worst_pair)
from geocon_torch.report.html import (_chosen_rows, _gate_calibration, _gate_section,
                                      _leaderboard_section, _Page, _pick_cards,
                                      _prompt_category_section, _sensitivity_section)
from geocon_torch.report.text import (calibrated_checks, calibrated_verdict, calibration_off,
                                      counts, is_missing)

CFG = GeoConConfig()  # report_ir 0.97, report_ge_px 3.5


def _explain(bg, **res):
    return explain_result({"clip": "c", "status": "ok", "regime": "H", "background": bg, **res},
                          evidence=False).splitlines()


# --- explain: the paper report gate -----------------------------------------------------------

def test_ge_margin_is_threshold_minus_ge():
    """GE 4 px against 3.5 px: 0.5 px over (margin -0.5); GE 1 px: 2.5 px to spare."""
    lines = _explain({"status": "ok", "ir": 0.98, "ge_px": 4.0, "pass": False})
    assert "  GE 4 px > report_ge_px 3.5: FAILS (margin -0.5 px)" in lines
    lines = _explain({"status": "ok", "ir": 0.98, "ge_px": 1.0, "pass": True})
    assert "  GE 1 px <= report_ge_px 3.5: ok (margin +2.5 px)" in lines


def _row(k, ir, ge=1.0, valid=True):
    return {"pair": [k, k + 1], "scale": 1.0, "model": "H", "ir_h": ir, "ge_h_px": ge,
            "valid_h": valid}


def test_failing_pairs_at_the_thresholds_and_by_ge():
    """IR == report_ir and GE == report_ge_px pass (inclusive, as the clip gate); a pair whose
    only fault is GE 3.6 px > 3.5 px is listed with that reason."""
    bg = {"per_pair": [_row(0, 0.97), _row(1, 0.99, ge=3.5), _row(2, 0.99, ge=3.6)]}
    bad = failing_pairs(bg, CFG)
    assert [(r["index"], r["why"]) for r in bad] == [(2, "GE 3.6 px > 3.5")]


def test_worst_pair_without_a_valid_pair_is_the_middle_one():
    bg = {"per_pair": [_row(k, 0.0, valid=False) for k in range(5)]}
    assert worst_pair(bg) == 2


def test_scan_pass_point_is_inclusive_and_the_smallest_tau():
    """The scan's pass point: IR == 0.97 and GE == 3.5 px pass; taus stored out of order still
    give the smallest passing one."""
    scan = {"tau_h": [4.0, 1.0, 2.0], "ir_h": [0.99, 0.9, 0.97], "ge_h_px": [1.0, 1.0, 3.5]}
    lines = _explain({"status": "ok", "ir": 0.9, "ge_px": 1.0, "pass": False,
                      "sensitivity": scan})
    assert "  the report gate would pass at tau_H >= 2 px (scan: IR 0.9700, GE 3.5 px)." in lines


def test_explain_pair_out_of_range_by_one():
    bg = {"status": "ok", "ir": 0.98, "ge_px": 1.0, "pass": True,
          "per_pair": [_row(k, 0.99) for k in range(3)]}
    with pytest.raises(InputError, match=r"--pair must be in \[0, 3\), got 3"):
        explain_result({"clip": "c", "status": "ok", "background": bg}, pair=3, evidence=False)


# --- explain: the gate --------------------------------------------------------------------------

GATE = {"method": "parallax", "thresholds": {"low": 11.98, "high": 16.0},
        "evidence": {"statistic_name": "pm"}}


def test_gate_side_at_the_thresholds_and_a_stray_why_u():
    """The statistic at a threshold is on its side (H at <= low, F at >= high); a ``why_u``
    left in the evidence of an H / F decision does not turn it into a U line."""
    h = gate_lines(dict(GATE, decision="H", statistic=11.98), "H")
    assert h[1] == "  pm = 11.98, <= low 11.98 -> H (H if <= 11.98, F if >= 16)."
    f = gate_lines(dict(GATE, decision="F", statistic=16.0,
                        evidence={"statistic_name": "pm", "why_u": "noise floor"}), "F")
    assert f[1] == "  pm = 16, >= high 16 -> F (H if <= 11.98, F if >= 16)."


def _change(gate):
    return change_lines({"gate": gate, "background": {}}, CFG)[1]


def test_gate_flip_points_name_the_right_threshold():
    assert _change(dict(GATE, decision="F", statistic=20.0)) == (
        "  the gate would flip to H if pm fell to <= 11.98 (now 20; U below 16).")
    assert _change(dict(GATE, decision="H", statistic=3.0)) == (
        "  the gate would flip to F if pm rose to >= 16 (now 3; U above 11.98).")
    assert _change(dict(GATE, decision="U", statistic=13.0)) == (
        "  the gate would decide H at pm <= 11.98 or F at >= 16 (now 13, inside the band).")
    why = dict(GATE, decision="U", statistic=13.0,
               evidence={"statistic_name": "pm", "why_u": "interval",
                         "magnitude_ci_ref_px": [5.1, 13.2]})
    assert _change(why).endswith("F when it lies at or above 16 (now 13, interval [5.1, 13.2]).")


# --- explain / card: the calibrated gate --------------------------------------------------------

def test_calibrated_gate_without_a_verdict_says_why():
    bg = {"pass_calibrated": None, "pass_calibrated_reason": "no calibration of backend x"}
    assert calibrated_lines(bg) == [
        "Report gate (calibrated, unknown): n/a (no calibration of backend x)"]


REC = {"regime": "F", "ir": 0.999, "ge_px": 0.175, "ge_fine_px": 0.11, "ge_spread_px": 0.25,
       "ge_peak_px": 0.3}


def _cal_bg(**kw):
    bg = {"status": "ok", "ir": 1.0, "ge_px": 0.1, "ge_fine_px": 0.1, "ge_peak_px": 0.2,
          "pass": True, "pass_calibrated": True,
          "calibration": {"name": "n", "hash": "h", "thresholds": dict(REC)}}
    bg.update(kw)
    return bg


def test_peak_bound_is_read_from_the_record_and_from_ge_peak():
    """The record's ``ge_peak_px`` is a bound (GE_peak 0.2 px <= 0.3 px), and GE_spread is
    the peak minus GE: 0.2 - 0.1 = 0.1 px."""
    checks = {c.key: c for c in calibrated_checks(_cal_bg())}
    assert "ge_peak_norm_max" in checks
    assert checks["ge_spread_norm_max"].describe() == "GE_spread 0.1 px <= 0.25 px: ok"
    failed = {c.key for c in calibrated_checks(_cal_bg(ge_peak_px=0.34)) if not c.passed}
    assert failed == {"ge_peak_norm_max"}


def test_verdict_names_the_last_failed_bound_and_lists_bounds_beside_a_reason():
    """The last bound of the list (GE_peak here) is named when it fails; a stored reason does
    not hide the bounds when there are some."""
    bg = _cal_bg(ge_peak_px=0.34, pass_calibrated=False)
    keys = [c.key for c in calibrated_checks(bg)]
    assert keys[-1] == "ge_peak_norm_max"
    text = calibrated_verdict(bg)
    assert text.startswith("calibrated: no (fails GE_peak 0.34 px > 0.3 px; ")
    with_reason = calibrated_verdict(dict(bg, pass_calibrated_reason="stale"))
    assert with_reason == text


def test_text_helpers():
    assert is_missing(float("inf")) and is_missing(float("-inf")) and not is_missing(0.0)
    assert counts({"H": 2, "F": 31, "U": 5}) == "F (31); U (5); H (2)"
    assert calibration_off({"ir": 0.9}) == "n/a (not scored)"
    assert calibration_off({"ir": 0.9, "ge_px": 1.0}) == "off"


# --- explain: outliers --------------------------------------------------------------------------

def _evidence(points, outlier, objects=None, model="H"):
    """A PairEvidence on a 100 x 200 (H x W) frame with matches at ``points`` (x, y) px."""
    x = torch.tensor(points, dtype=torch.float32)
    eye = torch.eye(3, dtype=torch.float64)
    frame = torch.zeros((3, 100, 200), dtype=torch.uint8)
    inl = ~torch.tensor(outlier)
    return PairEvidence(index=0, pair=(0, 1), scale=1.0, x1=x, x2=x, inliers=inl, model=model,
                        regime=model, ir=float(inl.float().mean()), valid=True, H=eye, F=eye,
                        H_valid=True, F_valid=True, frame1=frame, frame2=frame, objects=objects)


def test_quadrant_boundary_is_the_right_half():
    """x == W / 2 (100 px) is in the right half: the one outlier at (100, 10) is top-right."""
    ev = _evidence([(100, 10), (10, 10), (20, 10), (30, 10)], [True, False, False, False])
    assert outlier_lines(ev)[1].startswith(
        "  outliers by quadrant (frame i): top-left 0% (matches 75%), top-right 100%")


def test_outliers_near_the_object_mask():
    """An object at x, y in [40, 60): the 2 outliers sit on it, the 2 inliers far away."""
    obj = torch.zeros((1, 100, 200), dtype=torch.bool)
    obj[0, 40:60, 40:60] = True
    ev = _evidence([(50, 50), (45, 45), (180, 90), (190, 10)], [True, True, False, False],
                   objects=obj)
    assert outlier_lines(ev)[3] == ("  100% of outliers lie within 8 px of an object mask "
                                    "(50% of all matches); 1 object mask(s).")


# --- audit card ---------------------------------------------------------------------------------

def test_gate_rationale_names_u_resolution_only_for_a_u():
    gate = dict(GATE, decision="H", statistic=3.0,
                evidence={"statistic_name": "pm", "u_resolved": "F", "gric_delta": 1.0})
    assert "U resolved" not in gate_rationale(gate, "H")


def test_timeline_validity_defaults_to_valid_and_pick_without_rows():
    s = timeline_series({"per_pair": [{"pair": [0, 1], "ir_h": 0.5}, {"pair": [1, 2],
                                                                       "ir_h": 0.4}]})
    assert s["valid"] == [True, True] and _pick_pair(s, 2) == 1
    assert _pick_pair(None, 7) == 3


def test_card_facts_show_each_model_numbers():
    res = {"status": "ok", "background": {"ir": 0.9, "ge_px": 1.5, "ir_h": 0.8, "ge_h_px": 2.5,
                                          "ir_f": 0.9, "ge_f_px": 1.5},
           "epipolar": {"epipolar_error": 0.7, "epipolar_inlier_rate": 0.6,
                        "feature_match_coverage": 0.3}}
    facts = dict(_facts({}, res))
    assert facts["IR / GE (px)"] == "0.9 / 1.5 (H: 0.8 / 2.5, F: 0.9 / 1.5)"
    assert facts["epipolar trio"] == "error 0.7 px, inlier rate 0.6, coverage 0.3"


def test_card_drawings_count_outliers_and_draw_lines_of_inliers(tmp_path, monkeypatch):
    """The matches title counts 3 inliers and 1 outlier; the epipolar lines are drawn through
    inlier matches."""
    calls = {}

    def fake(name):
        def draw(*args, **kwargs):
            calls[name] = (args, kwargs)
            return Path(tmp_path / f"{name}.png")
        return draw

    monkeypatch.setattr(plots, "matches", fake("matches"))
    monkeypatch.setattr(plots, "epipolar_lines", fake("epipolar_lines"))
    ev = _evidence([(10, 10), (20, 20), (30, 30), (150, 80)], [False, False, False, True])
    _draw_pair(ev, tmp_path, "s", {})
    assert "3 H-inliers (green) / 1 outliers (red)" in calls["matches"][1]["title"]
    x1 = calls["epipolar_lines"][0][2]
    assert x1.tolist() == [[10.0, 10.0], [20.0, 20.0], [30.0, 30.0]]


# --- HTML page: cards, leaderboard, config choice ----------------------------------------------

def _flat(cid, ir, passed=True, ge=1.0, status="ok"):
    return {"clip_id": cid, "generator": "g", "status": status, "ir": ir,
            "background_pass": passed, "ge_px": ge, "reason": None, "warnings": None}


def test_cards_take_the_best_clip_too_and_break_ir_ties_by_larger_ge():
    """6 ok clips, 3 cards: the 2 worst then the best; of two clips with the same IR the one
    with the larger GE is worse."""
    flat = [_flat(f"c{k}", 0.90 + k / 100) for k in range(6)]
    assert _pick_cards(flat, 3, None) == ["c0", "c1", "c5"]
    tie = [_flat("small_ge", 0.9, ge=1.0), _flat("large_ge", 0.9, ge=3.0)]
    assert _pick_cards(tie, 1, None) == ["large_ge"]


def test_chosen_rows_are_those_of_the_most_common_config():
    rows = [{"config_hash": "a"}, {"config_hash": "b"}, {"config_hash": "b"}]
    got, _, _, chosen = _chosen_rows(rows, None)
    assert chosen == "b" and len(got) == 2


def _board_rows(with_score):
    rows = []
    for gen, score in (("alpha", None), ("beta", 0.4)):
        for seed in range(2):
            rows.append({"clip_id": f"{gen}{seed}", "generator": gen, "prompt_category": "C1",
                         "scene": f"C1|p|{seed}", "status": "ok", "ir": 0.9, "ge_px": 1.0,
                         "adadfrc": None, "background_pass": True,
                         "background_pass_calibrated": gen == "beta",
                         "score": score if with_score else None, "_result": {}})
    return rows


def _board(tmp_path, rows):
    page = _Page(flat=rows, out=tmp_path, img=tmp_path, n_boot=20, seed=0)
    text = _leaderboard_section(page)
    return text[text.index("<table>"):text.index("</table>")]


def _cells(board, generator):
    import re

    row = board[board.index(f">{generator}<"):]
    return re.findall(r"<td class='[^']*'>(.*?)</td>", row[:row.index("</tr>")])


def test_leaderboard_generator_without_a_score_is_last_and_calibrated_column(tmp_path):
    board = _board(tmp_path, _board_rows(True))
    assert board.index(">beta<") < board.index(">alpha<")
    assert _cells(board, "beta")[5].startswith("1 <span")  # pass (calibrated): both pass
    assert _cells(board, "alpha")[5].startswith("0 <span")  # neither passes


# --- HTML page: the data handed to the plots ----------------------------------------------------

def _capture(monkeypatch, name, out):
    """Replace ``plots.<name>`` by a recorder of its arguments: [(args, kwargs)]."""
    calls = []

    def draw(*args, **kwargs):
        calls.append((args, kwargs))
        return Path(out) / f"{name}.png"

    monkeypatch.setattr(plots, name, draw)
    return calls


def _gate_rows():
    rows = []
    for k, cat in enumerate(("C1", "C3", "C2", "C5", "C4", "C6", "C1", "C3")):
        f = cat in ("C3", "C5", "C6")
        gate = {"method": "poses", "statistic": 0.1 if f else 0.01,
                "thresholds": {"low": 0.03, "high": 0.05}}
        rows.append({"clip_id": f"c{k}", "generator": "g", "prompt_category": cat,
                     "scene": f"{cat}|p|{k}", "status": "ok", "gate_method": "poses",
                     "gate_statistic": gate["statistic"], "gate_decision": "F" if f else "H",
                     "ir": 0.9 + k / 100, "ge_px": 1.0, "_result": {"gate": gate}})
    return rows


def test_gate_histogram_labels_are_f_expected(tmp_path, monkeypatch):
    calls = _capture(monkeypatch, "gate_histogram", tmp_path)
    _capture(monkeypatch, "calibration", tmp_path)
    _capture(monkeypatch, "net_benefit", tmp_path)
    rows = _gate_rows()
    _gate_section(_Page(flat=rows, out=tmp_path, img=tmp_path, n_boot=20, seed=0))
    (args, kwargs), = calls
    assert kwargs["labels"] == [r["prompt_category"] in ("C3", "C5", "C6") for r in rows]


def test_calibration_table_has_one_row_per_five_clips(tmp_path, monkeypatch):
    """20 observations: 20 // 5 = 4 equal-count bins."""
    _capture(monkeypatch, "calibration", tmp_path)
    obs = {"t": np.linspace(0.0, 0.2, 20), "is_f": np.arange(20) >= 10}
    page = _Page(flat=[], out=tmp_path, img=tmp_path, n_boot=20, seed=0)
    table = _gate_calibration(page, obs, {})[1]
    assert table.count("<tr>") == 1 + 4


def test_distributions_plot_only_ok_clips(tmp_path, monkeypatch):
    calls = _capture(monkeypatch, "distributions", tmp_path)
    _capture(monkeypatch, "prompt_category_cis", tmp_path)
    rows = [dict(r, status="ok") for r in _gate_rows()[:2]]
    rows.append(dict(rows[0], clip_id="bad", status="error", ir=0.1, ge_px=9.0))
    _prompt_category_section(_Page(flat=rows, out=tmp_path, img=tmp_path, n_boot=20, seed=0))
    values = calls[0][0][0]
    assert sorted(v for per in values.values() for vs in per.values() for v in vs) == [0.9, 0.91]


def test_report_gate_sensitivity_curve_is_at_ir_097(tmp_path, monkeypatch):
    """One ok clip with IR 0.96 and GE 1 px: it passes at IR >= 0.95 and fails at 0.97, so
    the curve drawn (IR >= 0.97) is 0 at every GE threshold."""
    calls = _capture(monkeypatch, "sensitivity", tmp_path)
    rows = [{"clip_id": "c", "generator": "g", "prompt_category": "C1", "scene": "s",
             "status": "ok", "ir": 0.96, "ge_px": 1.0, "_result": {}}]
    _sensitivity_section(_Page(flat=rows, out=tmp_path, img=tmp_path, n_boot=20, seed=0))
    curves = calls[0][0][0]
    assert len(curves) == 1 and all(v == 0 for v in curves[0]["pass"])


# --- plots: what each figure draws --------------------------------------------------------------

@pytest.fixture
def figs(monkeypatch):
    """Keep the figures plots would save: [matplotlib Figure]."""
    kept = []

    def keep(fig, path):
        kept.append(fig)
        return Path(path)

    monkeypatch.setattr(plots, "_save", keep)
    yield kept
    import matplotlib.pyplot as plt

    for fig in kept:
        plt.close(fig)


def test_timeline_draws_valid_pairs_ir_and_ge(tmp_path, figs):
    plots.timeline([0, 1, 2], [0.9, 0.0, 0.8], [1.0, 5.0, 2.0], [True, False, True],
                   tmp_path / "t.png")
    ax, ax2 = figs[0].axes
    assert ax.lines[0].get_xdata().tolist() == [0.0, 2.0]
    assert ax.lines[0].get_ydata().tolist() == [0.9, 0.8]
    assert ax2.lines[0].get_ydata().tolist() == [1.0, 2.0]


def test_gate_histogram_stacks_h_expected_first(tmp_path, figs):
    """2 H-expected clips at 0.01, 1 F-expected at 0.1: the first (blue, "H-expected") bars
    count the H clips."""
    plots.gate_histogram([0.01, 0.01, 0.1], {"tau": 0.05}, tmp_path / "h.png",
                         labels=[False, False, True])
    ax = figs[0].axes[0]
    first = ax.containers[0]
    assert ax.get_legend_handles_labels()[1] == ["H-expected", "F-expected"]
    assert sum(p.get_height() for p in first.patches) == 2


def test_prompt_category_ci_bars_span_lo_to_hi(tmp_path, figs):
    groups = [{"generator": "g", "prompt_category": "C1", "value": 0.5, "lo": 0.4, "hi": 0.7}]
    plots.prompt_category_cis(groups, "ir", tmp_path / "c.png")
    ax = figs[0].axes[0]
    segs = [s for c in ax.collections for s in c.get_segments()]
    assert len(segs) == 1
    (_, y0), (_, y1) = segs[0]
    assert (min(y0, y1), max(y0, y1)) == pytest.approx((0.4, 0.7))


def test_matches_inliers_green_outliers_red(tmp_path, figs):
    frame = np.zeros((20, 30, 3), dtype=np.uint8)
    x1 = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    plots.matches(frame, frame, x1, x1, np.array([True, True, False]), tmp_path / "m.png")
    ax = figs[0].axes[0]
    import matplotlib.colors as mcolors

    lime = [ln for ln in ax.lines if mcolors.same_color(ln.get_color(), "lime")]
    red = [ln for ln in ax.lines if mcolors.same_color(ln.get_color(), "tab:red")]
    assert len(lime) == 2 and len(red) == 1


def test_epipolar_line_is_f_x1(tmp_path, figs):
    """F = [[0, 0, 0], [0, 0, -1], [0, 1, 5]]: l = F x1 = (0, -1, y1 + 5) is the row
    y = y1 + 5 = 25, while F^T x1 = (0, 1, 5 - y1) would be the row y = 15."""
    frame = np.zeros((50, 60, 3), dtype=np.uint8)
    f = np.array([[0.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 5.0]])
    x1 = np.array([[10.0, 20.0]])
    plots.epipolar_lines(frame, f, x1, x1 + [5.0, 5.0], tmp_path / "e.png")
    line = figs[0].axes[0].lines[0]
    assert line.get_ydata().tolist() == pytest.approx([25.0, 25.0])
    assert not math.isnan(line.get_ydata()[0])


def test_card_bounds_head_is_the_stored_verdict():
    """The card's head is the verdict the result stored, even when its re-read bounds all
    pass (e.g. a verdict written with other thresholds): it never recomputes a PASS."""
    from geocon_torch.report.audit import _bounds_html

    bg = _cal_bg(pass_calibrated=False)
    assert all(c.passed for c in calibrated_checks(bg))
    assert _bounds_html(bg).startswith("FAIL<ul")


@pytest.mark.slow
def test_evidence_of_an_invalid_pair_says_it_is_invalid():
    """A 4-frame clip whose last frame is noise: pair (2, 3) has no model, so its evidence is
    ``valid`` False with IR 0 and no background match, as its stored row says."""
    from geocon_torch import score_clip
    from geocon_torch.report import pair_evidence
    from geocon_torch.synth import grounded_clip

    video = grounded_clip("C1", num_frames=4, size=(96, 128), corruption="breathing",
                          severity=1.0).frames.clone()
    gen = torch.Generator().manual_seed(0)
    video[3] = torch.randint(0, 256, video[3].shape, generator=gen, dtype=torch.uint8)
    res = score_clip(video, preset="background", config={"io": {"long_side": None}},
                     device="cpu").to_dict()
    rows = [r for r in res["background"]["per_pair"] if r["scale"] == 1.0]
    assert rows[2]["valid_h"] is False and rows[0]["valid_h"] is True
    ev = pair_evidence(res, 2, video=video, device="cpu")
    assert ev.valid is False and ev.ir == 0.0 and ev.x1.shape[0] == 0
    assert pair_evidence(res, 0, video=video, device="cpu").valid is True
