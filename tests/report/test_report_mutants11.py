"""Report numbers, picks and drawings that no other default test pins (mutation audit s25,
area report): the report plots (legend cut, error bars, tau line, invalid pairs, vertical
epipolar lines, cost labels), the HTML page's number cells, card picks, IR digits near 1,
gate calibration / net-benefit grids, the per-clip band range, the sensitivity and AdaP90
tables, the calibrated-gate text and the stored-row check of the pair evidence. Hand-made
rows with closed-form answers; no video is scored."""
from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from test_report_mutants6 import REC, _cal_bg, _capture, _gate_rows, figs  # noqa: F401

from geocon_torch.bench import stats
from geocon_torch.errors import InputError
from geocon_torch.report import plots
from geocon_torch.report.evidence import _check_stored
from geocon_torch.report.html import (_dynamics_section, _f, _gate_band, _gate_calibration,
                                      _gate_net_benefit, _gate_section, _Page, _pick_cards,
                                      _problems_section, _prompt_category_section,
                                      _sensitivity_section, _thresholds)
from geocon_torch.report.text import (calibrated_checks, calibrated_verdict, calibration_source,
                                      configured_band, score_line)


def _page(tmp_path, flat):
    return _Page(flat=flat, out=tmp_path, img=tmp_path, n_boot=20, seed=0)


def _cells(row_html):
    return re.findall(r"<td[^>]*>(.*?)</td>", row_html)


# --- plots --------------------------------------------------------------------------------------

def test_a_name_of_exactly_the_legend_limit_is_kept_whole(tmp_path, figs):  # noqa: F811
    """LEGEND_CHARS = 32: a 32-character name is drawn whole, a 33-character one is cut."""
    curves = [{"generator": name, "ge": [1.0, 2.0], "pass": [0.5, 0.6]}
              for name in ("a" * 32, "b" * 33)]
    plots.sensitivity(curves, tmp_path / "s.png", x_key="ge", y_key="pass",
                      label_key="generator", xlabel="x", ylabel="y", title="t")
    texts = [t.get_text() for t in figs[0].axes[0].get_legend().get_texts()]
    assert texts == ["a" * 32, "b" * 31 + "\u2026"]


def test_prompt_category_ci_of_a_value_outside_its_interval_is_drawn(tmp_path, figs):  # noqa: F811
    """A median 0.5 above its bootstrap interval [0.55, 0.7] (a skewed resample): the lower
    bar is clipped to 0 instead of failing the page, the upper one reaches 0.7."""
    groups = [{"generator": "g", "prompt_category": "C1", "value": 0.5, "lo": 0.55, "hi": 0.7}]
    plots.prompt_category_cis(groups, "ir", tmp_path / "c.png")
    segs = [s for c in figs[0].axes[0].collections for s in c.get_segments()]
    (_, y0), (_, y1) = segs[0]
    assert (min(y0, y1), max(y0, y1)) == pytest.approx((0.5, 0.7))


def test_calibration_bars_span_lo_to_hi_and_a_zero_tau_is_drawn(tmp_path, figs):  # noqa: F811
    """P(F) 0.5 with Wilson CI [0.2, 0.6]: the bar spans 0.2 - 0.6 (not 0.4 - 0.8), and a
    threshold tau = 0 is still drawn as the dashed line x = 0."""
    curve = {"t_mean": np.array([1.0]), "p_hat": np.array([0.5]), "lo": np.array([0.2]),
             "hi": np.array([0.6])}
    plots.calibration(curve, tmp_path / "c.png", tau=0.0)
    ax = figs[0].axes[0]
    (_, y0), (_, y1) = [s for c in ax.collections for s in c.get_segments()][0]
    assert (min(y0, y1), max(y0, y1)) == pytest.approx((0.2, 0.6))
    dashed = [ln for ln in ax.lines if ln.get_linestyle() == "--"]
    assert len(dashed) == 1 and list(dashed[0].get_xdata()) == [0.0, 0.0]


def test_timeline_marks_each_invalid_pair_on_the_axis(tmp_path, figs):  # noqa: F811
    plots.timeline([0, 1, 2, 3], [0.9, 0.0, 0.8, 0.0], [1.0, None, 2.0, None],
                   [True, False, True, False], tmp_path / "t.png")
    ax = figs[0].axes[0]
    (bad,) = [ln for ln in ax.lines if ln.get_label() == "invalid pair"]
    assert bad.get_xdata().tolist() == [1.0, 3.0] and bad.get_ydata().tolist() == [0.0, 0.0]


def test_vertical_epipolar_line_is_at_minus_c_over_a(tmp_path, figs):  # noqa: F811
    """F = [[0, 0, -1], [0, 0, 0], [1, 0, 0]]: l = F x1 = (-1, 0, x1), the column x = x1 = 10
    (not -10)."""
    frame = np.zeros((50, 60, 3), dtype=np.uint8)
    f = np.array([[0.0, 0.0, -1.0], [0.0, 0.0, 0.0], [1.0, 0.0, 0.0]])
    x1 = np.array([[10.0, 20.0]])
    plots.epipolar_lines(frame, f, x1, x1, tmp_path / "e.png")
    assert list(figs[0].axes[0].lines[0].get_xdata()) == [10.0, 10.0]


def test_net_benefit_curves_carry_their_own_cost(tmp_path, figs):  # noqa: F811
    nb = {"thresholds": np.array([1.0, 2.0]), "costs": np.array([0.5, 1.0, 2.0]),
          "nb": np.array([[0.1, 0.2], [0.3, 0.4], [0.5, 0.6]])}
    plots.net_benefit(nb, tmp_path / "n.png")
    got = {ln.get_label(): ln.get_ydata().tolist() for ln in figs[0].axes[0].lines}
    assert got == {"c = 0.5": [0.1, 0.2], "c = 1": [0.3, 0.4], "c = 2": [0.5, 0.6]}


# --- HTML page: cells, thresholds, cards ---------------------------------------------------------

def test_number_cells_dash_non_finite_and_escape_text(tmp_path):
    assert [_f(float("nan")), _f(float("inf")), _f(None)] == ["-", "-", "-"]
    flat = [{"clip_id": "<img src=x onerror=alert(1)>", "generator": "g&h", "status": "error",
             "reason": "bad <tag>", "warnings": None}]
    section = _problems_section(_page(tmp_path, flat))
    assert "<img" not in section and "&lt;img src=x onerror=alert(1)&gt;" in section
    assert "g&amp;h" in section and "bad &lt;tag&gt;" in section


def test_gate_thresholds_keep_numbers_only():
    gate = {"thresholds": {"low": 0.03, "high": None, "name": "x", "tau": 1}}
    assert _thresholds(gate) == {"low": 0.03, "tau": 1}
    assert _thresholds({"thresholds": [0.1, None, 0.3]}) == {"t0": 0.1, "t2": 0.3}


def _ok(cid, ir):
    return {"clip_id": cid, "generator": "g", "status": "ok", "ir": ir, "background_pass": True,
            "ge_px": 1.0, "reason": None, "warnings": None}


def test_six_cards_are_four_worst_then_two_best_and_never_twice():
    """n = 6: n - n // 3 = 4 lowest-IR clips, then the n // 3 = 2 best; with 2 ok clips each
    gets one card (the best ones are already among the worst)."""
    flat = [_ok(f"c{k}", 0.90 + k / 100) for k in range(8)]
    assert _pick_cards(flat, 6, None) == ["c0", "c1", "c2", "c3", "c7", "c6"]
    assert _pick_cards(flat[:2], 6, None) == ["c0", "c1"]


# --- HTML page: per prompt category, gate, sensitivity, dynamics --------------------------------

def test_prompt_category_ir_near_one_keeps_the_digits_that_differ(tmp_path, monkeypatch):
    """Every clip at IR 0.99996: the median IR cell reads 0.99996, never a rounded 1."""
    _capture(monkeypatch, "prompt_category_cis", tmp_path)
    _capture(monkeypatch, "distributions", tmp_path)
    flat = [{"clip_id": f"c{k}", "generator": "g", "prompt_category": "C1",
             "scene": f"C1|p|{k}", "status": "ok", "ir": 0.99996, "ge_px": 1.0, "_result": {}}
            for k in range(3)]
    text = _prompt_category_section(_page(tmp_path, flat))
    ir_table = text[:text.index("</table>")]
    assert "<td class=''>0.99996 <span class='muted'>[0.99996, 0.99996]</span>" in ir_table


def _obs(n):
    return {"t": np.linspace(0.0, 1.0, n), "is_f": np.arange(n) >= n // 2}


def test_calibration_has_at_most_twelve_bins(tmp_path, monkeypatch):
    """100 observations: min(12, 100 // 5) = 12 equal-count bins (rows)."""
    _capture(monkeypatch, "calibration", tmp_path)
    table = _gate_calibration(_page(tmp_path, []), _obs(100), {})[1]
    assert table.count("<tr>") == 1 + 12


def test_dust3r_net_benefit_uses_the_fixed_translation_grid(tmp_path, monkeypatch):
    """poses and dust3r statistics are translations: the grid 0.02 ... 0.08 (6 rows), not the
    statistic's quantiles."""
    _capture(monkeypatch, "net_benefit", tmp_path)
    for method in ("dust3r", "poses"):
        table = _gate_net_benefit(_page(tmp_path, []), _obs(40), method)[1]
        firsts = re.findall(r"<tr><td class=''>(.*?)</td>", table)
        assert firsts == ["0.02", "0.03", "0.04", "0.05", "0.06", "0.08"], method


def _band_row(low, high):
    return {"_result": {"gate": {"thresholds": {"low": low, "high": high}}}}


def test_per_clip_band_range_spans_min_to_max():
    """Two clips at the configured (0.03, 0.05), one at (0.02, 0.08): the configured band is
    the common one and the per-clip range of each threshold is (min, max)."""
    same = [_band_row(0.03, 0.05), _band_row(0.03, 0.05), _band_row(0.02, 0.08)]
    conf, spread = _gate_band(same)
    assert conf == {"low": 0.03, "high": 0.05}
    assert spread == {"low": (0.02, 0.03), "high": (0.05, 0.08)}


def _gate(tmp_path, monkeypatch, rows):
    for name in ("gate_histogram", "calibration", "net_benefit"):
        _capture(monkeypatch, name, tmp_path)
    return _gate_section(_page(tmp_path, rows))


def test_gate_calibration_from_four_clips_of_both_regimes(tmp_path, monkeypatch):
    """4 clips (C1, C3, C2, C5: 2 H- and 2 F-expected) are enough for the calibration; 4
    H-expected clips (C1, C2, C4, C1) are not."""
    rows = _gate_rows()
    both = _gate(tmp_path, monkeypatch, rows[:4])
    assert "Calibration P(F-expected | statistic)" in both and "Calibration needs" not in both
    one = _gate(tmp_path, monkeypatch, [rows[k] for k in (0, 2, 4, 6)])
    assert "Calibration needs clips of both designed regimes" in one
    assert "Calibration P(F-expected" not in one


def test_sensitivity_table_shows_the_two_strictest_ir_thresholds(tmp_path, monkeypatch):
    """One ok clip at IR 0.96, GE 1 px: under the IR >= 0.97 and IR >= 0.99 columns every
    cell is 0 (it would pass every GE threshold at IR >= 0.90 / 0.93)."""
    _capture(monkeypatch, "sensitivity", tmp_path)
    rows = [{"clip_id": "c", "generator": "g", "prompt_category": "C1", "scene": "s",
             "status": "ok", "ir": 0.96, "ge_px": 1.0, "_result": {}}]
    text = _sensitivity_section(_page(tmp_path, rows))
    table = text[:text.index("</table>")]
    head = re.findall(r"<th[^>]*>(.*?)</th>", table)
    assert head[2] == "IR&gt;=0.97, GE&lt;=1 px" and head[-1] == "IR&gt;=0.99, GE&lt;=8 px"
    row = re.search(r"<tr><td class='l'>g</td>.*?</tr>", table).group(0)
    assert _cells(row) == ["g", "1"] + ["0"] * 10


def test_dynamics_table_and_line_are_the_statistics(tmp_path, monkeypatch):
    dyn = {"groups": [{"generator": "g", "prompt_category": "C1", "n_objects": 10, "p80": 5.0,
                       "anomaly_rate": 0.2, "lo": 0.057, "hi": 0.51, "median": 3.0, "p90": 6.0,
                       "max": 9.0}],
           "dynamic_anomaly_background_good": {"k": 1, "n": 4, "rate": 0.25, "lo": 0.0456,
                                               "hi": 0.699}}
    monkeypatch.setattr(stats, "adap90_anomalies", lambda *a, **k: dyn)
    text = _dynamics_section(_page(tmp_path, []))
    row = re.search(r"<tr><td class='l'>g</td>.*?</tr>", text).group(0)
    assert _cells(row) == ["g", "C1", "10", "5", "0.2", "[0.057, 0.51]", "3", "6", "9"]
    assert "1 of 4 clips with objects (0.25, Wilson [0.0456, 0.699])" in text


# --- text: score line and calibrated gate -------------------------------------------------------

def test_an_ok_clip_without_a_score_is_not_called_not_scored():
    assert score_line({"status": "ok", "score": None}) == (
        "Score unknown [0-1, higher is better]")


def test_calibrated_checks_need_ge_and_read_the_ge_h_bound():
    bg = _cal_bg(ge_px=None)
    assert calibrated_checks(bg) is None
    rec = dict(REC, ge_h_px_min=0.5)
    bg = _cal_bg(ge_h_px=0.3, calibration={"name": "n", "hash": "h", "thresholds": rec})
    failed = [c.key for c in calibrated_checks(bg) if not c.passed]
    assert failed == ["ge_h_norm_min"]


def test_configured_band_is_low_then_high():
    gate = {"evidence": {"configured_band_ref_px": [3, 16]}}
    assert configured_band(gate) == (3.0, 16.0)


def test_calibration_source_without_a_name_and_a_verdict_without_one():
    bg = {"calibration": {"hash": "h1", "thresholds": {"regime": "F"}}}
    assert calibration_source(bg) == "F bounds of (h1)"
    assert calibration_source({"calibration": {"name": None, "hash": "h1"}}) == (
        "calibration (h1)")
    assert calibrated_verdict(_cal_bg(pass_calibrated=None)).startswith("calibrated: n/a (IR ")


# --- pair evidence: the stored-row check --------------------------------------------------------

def test_stored_row_check_reads_the_models_ir_and_skips_rows_not_stored():
    """Pair (0, 1) scored with F at IR 0.5 (its H IR 0.9): it matches the stored row; a row
    past the stored ones has nothing to compare with; another IR is refused."""
    rows = SimpleNamespace(pairs=torch.tensor([[0, 1], [1, 2]]))
    res = {"background": {"per_pair": [
        {"pair": [0, 1], "model": "F", "ir_f": 0.5, "ir_h": 0.9},
        {"pair": [1, 2], "model": "H", "ir_f": 0.1, "ir_h": 0.8}]}}
    _check_stored(res, rows, 0, 0.5, "F")
    _check_stored(res, rows, 1, 0.8, "H")
    _check_stored(res, rows, 2, 0.7, "H")
    with pytest.raises(InputError, match="differs from the stored"):
        _check_stored(res, rows, 0, 0.9, "F")
