"""The report page as a reader uses it (audit s21 htmlux): the gate section's configured band
and unit whatever the row order, numbers that never round into a contradiction, units on every
column, accessibility markup and contrast, long names, figure styles beyond colour, the card's
calibrated-gate and not-scored wording, and unique card ids. Hand-made rows; no video."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import fake_result
from matplotlib.colors import to_hex

from geocon_torch.measures.calibration import BoundCheck
from geocon_torch.report import PairEvidence, build_report, plots
from geocon_torch.report.audit import _bounds_html, _draw_pair, _facts, gate_rationale
from geocon_torch.report.explain import explain_result
from geocon_torch.report.html import CSS, _pick_cards

STAMP = re.compile(r"generated \d{4}-\d\d-\d\d \d\d:\d\d UTC")


@pytest.fixture
def gate_calls(monkeypatch):
    """Figures are made but not written (speed); the gate histogram's arguments are kept."""
    calls = []
    draw = plots.gate_histogram

    def keep(t, thresholds, path, **kw):
        calls.append((list(t), dict(thresholds), kw))
        return draw(t, thresholds, path, **kw)

    def close(fig, path):
        plots._plt().close(fig)
        return Path(path)

    monkeypatch.setattr(plots, "_save", close)
    monkeypatch.setattr(plots, "gate_histogram", keep)
    return calls


def _parallax_gate(stat: float, band: tuple, decision: str) -> dict:
    """A parallax_magnitude gate block as gate/parallax.py writes it (reference px)."""
    return {"method": "parallax", "statistic": stat, "decision": decision, "per_pair": None,
            "thresholds": {"low": band[0], "high": band[1]},
            "evidence": {"statistic_name": "parallax_magnitude", "band_ref_px": list(band),
                         "configured_band_ref_px": [3.0, 16.0], "magnitude_ref_px": stat}}


def _row(cid: str, res: dict, seed: int, cat: str = "C1", gen: str = "g") -> dict:
    res = dict(res, clip=cid)
    return {"clip_id": cid, "generator": gen, "prompt_category": cat, "seed": seed,
            "scene": f"{cat}|p|{seed}", "config_hash": res["config_hash"],
            "status": res["status"], "result": res}


def _gate_rows() -> list:
    """Two ok clips whose noise-adaptive bands differ: (4.915, 16) and (53.3, 53.3) ref px."""
    a = fake_result("rot", prompt_category="C2", statistic=2.29)
    a["gate"] = _parallax_gate(2.29, (4.915431, 16.0), "H")
    b = fake_result("sheet", prompt_category="C3", regime="F", statistic=80.15)
    b["gate"] = _parallax_gate(80.15, (53.29886, 53.29886), "F")
    return [_row("rot", a, 0, "C2"), _row("sheet", b, 1, "C3")]


def _section(page: str, start: str, end: str) -> str:
    return page[page.index(f"id='{start}'"):page.index(f"id='{end}'")]


def test_gate_section_shows_the_configured_band_in_either_row_order(tmp_path, gate_calls):
    """The band text and the histogram lines are the configured 3 / 16 ref px and the range of
    the per-clip bands, in ref px, the same page whichever row comes first (one clip's band,
    picked by row order, was shown as "the" thresholds, without a unit)."""
    rows = _gate_rows()
    pages = [STAMP.sub("generated -", build_report(order, tmp_path / name, cards=0, draw=False,
                                                   n_boot=20).read_text())
             for name, order in (("as_given", rows), ("reversed", rows[::-1]))]
    assert pages[0] == pages[1]
    gate = _section(pages[0], "gate", "sensitivity")
    assert ("thresholds (ref px): configured low 3, high 16 (drawn on the histogram); per clip, "
            "noise-adaptive: low 4.915 - 53.3, high 16 - 53.3.") in gate
    assert len(gate_calls) == 2
    for t, thresholds, kw in gate_calls:
        assert thresholds == {"configured low": 3.0, "configured high": 16.0}
        assert kw["name"] == "parallax_magnitude (ref px)"
    # every clip on the configured band: no range, the plain keys
    same = copy.deepcopy(rows)
    for r in same:
        r["result"]["gate"]["thresholds"] = {"low": 3.0, "high": 16.0}
    gate = _section(build_report(same, tmp_path / "same", cards=0, draw=False,
                                 n_boot=20).read_text(), "gate", "sensitivity")
    assert "; thresholds (ref px): low 3, high 16.</p>" in gate
    assert gate_calls[-1][1] == {"low": 3.0, "high": 16.0}


def test_card_gate_row_has_the_unit_and_the_configured_band():
    gate = _parallax_gate(2.29, (4.915431, 16.0), "H")
    assert gate_rationale(gate, "H") == (
        "gate method 'parallax'; parallax_magnitude = 2.29 ref px; H if <= 4.915 ref px, F if "
        ">= 16 ref px, U in between (noise-adaptive band; configured 3 / 16 ref px); decision H; "
        "background scored with H")
    plain = _parallax_gate(0.03, (3.0, 16.0), "H")
    assert "H if <= 3 ref px, F if >= 16 ref px, U in between; decision H" in \
        gate_rationale(plain, "H")


# --- rounding -----------------------------------------------------------------------------------

def test_bound_near_its_threshold_prints_the_digits_that_differ():
    """The demo's F bound ir 0.99915826: an IR of 0.999155 fails and read "IR 0.9992 < 0.9992:
    FAILS"; an IR of 0.99996 read "IR 1"."""
    from geocon_torch.measures.calibration import digits_apart

    bound = 0.9991582632064819
    assert BoundCheck("ir_min", "ir", 0.999155, bound, True, False).describe() == \
        "IR 0.999155 < 0.999158: FAILS"
    assert BoundCheck("ir_min", "ir", 0.99996, bound, True, True).describe() == \
        "IR 0.99996 >= 0.99916: ok"
    assert BoundCheck("ge_norm_max", "ge_norm", 0.3500001, 0.35, False, False).describe() == \
        "GE 0.3500001 px > 0.35 px: FAILS"
    # met within the 1e-9 tolerance: the same text at 8 digits is not a contradiction
    assert BoundCheck("ge_norm_max", "ge_norm", 0.35 * (1 + 1e-10), 0.35, False,
                      True).describe() == "GE 0.35 px <= 0.35 px: ok"
    assert BoundCheck("ir_min", "ir", 1.0, 0.97, True, True).describe() == "IR 1 >= 0.97: ok"
    assert digits_apart((0.999155, bound)) == 6 and digits_apart((2.0, 2.0, float("inf"))) == 4
    # a failed bound never prints value == threshold, even 2e-9 apart (relative)
    for v in (0.97 * (1 - 2e-9), 12.5 * (1 - 3e-9)):
        text = BoundCheck("ir_min", "ir", v, v / (1 - 2e-9), True, False).describe()
        lhs, rhs = text.split(": ")[0].split(" < ")
        assert lhs.split()[-1] != rhs


def _near_bound_result(cid: str, ir: float) -> dict:
    res = fake_result(cid, ir=ir, ge=0.02, regime="F", prompt_category="C3")
    res["background"].update(
        pass_calibrated=False if ir < 0.9991582632064819 else True,
        calibration={"name": "default:opencv-sift", "hash": "002e", "thresholds": {
            "regime": "F", "ir": 0.9991582632064819, "ge_px": 0.065}})
    return res


def test_page_states_rounding_and_keeps_near_one_values_apart(tmp_path, gate_calls):
    rows = [_row("near_one", _near_bound_result("near_one", 0.99996), 0, "C3")]
    page = build_report(rows, tmp_path, cards=1, draw=False, n_boot=20).read_text()
    assert page.count("Numbers are rounded to 4 significant digits") == 1
    board = _section(page, "leaderboard", "prompt-categories")
    assert re.search(r"<td class=''>99\.996 <span", board)  # IR (%): not "100"
    card = page[page.index("near_one</h3>"):]
    assert "IR / GE (px)</th><td>0.99996 / 0.02 (H: 0.99996" in card
    assert "<li>IR 0.99996 &gt;= 0.99916: ok</li>" in card
    failing = _near_bound_result("near_bound", 0.999155)
    assert "  IR 0.999155 < 0.999158: FAILS (rigid" in explain_result(failing, evidence=False)


# --- units --------------------------------------------------------------------------------------

def test_units_on_the_columns_and_the_card(tmp_path, gate_calls):
    rows = [_row(f"c{k}", fake_result(f"c{k}", ir=0.98, ge=0.5 + k, objects=[2.0 + k],
                                      prompt_category="C1"), k) for k in range(3)]
    page = build_report(rows, tmp_path, card_clips=["c0"], draw=False, n_boot=20).read_text()
    for header in ("AdaDFRC (px²)", "median IR (fraction)", "median GE (px)", "P80 (px²)",
                   "median (px²)", "max (px²)", "IR&gt;=0.97, GE&lt;=1 px", "P50: IR / GE (px)"):
        assert f"<th scope='col' class=''>{header}</th>" in page, header
    assert "#0: AdaDFRC 1.6 px², AdaP90 2 px²" in page


# --- accessibility ------------------------------------------------------------------------------

def _luminance(hex_colour: str) -> float:
    h = hex_colour.lstrip("#")
    h = "".join(c * 2 for c in h) if len(h) == 3 else h
    c = np.array([int(h[i:i + 2], 16) / 255 for i in (0, 2, 4)])
    c = np.where(c <= 0.04045, c / 12.92, ((c + 0.055) / 1.055) ** 2.4)
    return float(c @ [0.2126, 0.7152, 0.0722])


def test_markup_lang_scope_captions_and_alts(tmp_path, gate_calls):
    rows = _gate_rows() + [_row("bad", fake_result("bad", status="not_applicable"), 2)]
    page = build_report(rows, tmp_path, cards=3, draw=False, n_boot=20).read_text()
    assert page.startswith("<!DOCTYPE html><html lang='en'>") and "<nav>" in page
    assert len(re.findall(r"<th[ >]", page)) == page.count("<th scope=") > 0
    tables = re.findall(r"<table[^>]*>(<caption>)?", page)
    labelled = re.findall(r"<table class='facts' aria-labelledby='([^']+)'>", page)
    assert len(labelled) == 3 and all(f'id="{i}"' in page for i in labelled)
    assert all(cap for cap in tables[:len(tables) - 3])  # every page table has a caption
    figs = re.findall(r'alt="([^"]*)"><figcaption>([^<]*)</figcaption>', page)
    assert figs and all(alt != cap for alt, cap in figs)
    assert len({alt for alt, _ in figs}) == len(figs)
    assert any(alt.startswith("rot: per-pair IR (left axis) and GE in px (right axis) of 4 "
                              "frame pairs at scale 1; 0 invalid pairs") for alt, _ in figs)


def test_muted_text_contrast_passes_wcag_aa():
    """``.muted`` (every CI bracket, the provenance line) on white: #777 was 4.48:1."""
    muted = re.search(r"\.muted\{color:(#\w+)", CSS).group(1)
    assert 1.05 / (_luminance(muted) + 0.05) >= 4.5


def test_card_drawing_alts_name_the_pair_and_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(plots, "matches", lambda *a, **k: tmp_path / "m.png")
    monkeypatch.setattr(plots, "epipolar_lines", lambda *a, **k: tmp_path / "e.png")
    x = torch.tensor([[10.0, 10.0], [20.0, 20.0], [30.0, 30.0], [150.0, 80.0]])
    frame = torch.zeros((3, 100, 200), dtype=torch.uint8)
    eye = torch.eye(3, dtype=torch.float64)
    ev = PairEvidence(index=0, pair=(2, 3), scale=1.0, x1=x, x2=x,
                      inliers=torch.tensor([True, True, True, False]), model="F", regime="F",
                      ir=0.75, valid=True, H=eye, F=eye, H_valid=True, F_valid=True,
                      frame1=frame, frame2=frame, objects=None)
    imgs, _ = _draw_pair(ev, tmp_path, "s", {})
    assert [(cap, alt) for _, cap, alt in imgs] == [
        ("matches on the frame pair (as scored)",
         "frames 2 and 3 side by side: 3 F-inlier matches (green solid lines, dots) and 1 "
         "outlier (red dashed lines, crosses); pair IR 0.75"),
        ("epipolar lines", "frame 3 with the epipolar lines F x1 of 3 matches of pair (2, 3) "
                           "and their matched points")]


# --- long names and figure styles ---------------------------------------------------------------

@pytest.fixture
def figs(monkeypatch):
    kept = []
    monkeypatch.setattr(plots, "_save", lambda fig, path: kept.append(fig) or Path(path))
    yield kept
    for fig in kept:
        plots._plt().close(fig)


def test_long_names_wrap_and_legends_are_cut(tmp_path, figs):
    assert re.search(r"td,th,h2,h3[^{]*\{overflow-wrap:anywhere", CSS)
    long = "g" * 200
    curves = [{"generator": name, "ge": [1.0, 2.0], "pass": [0.5, 0.6]}
              for name in (long, "short")]
    plots.sensitivity(curves, tmp_path / "s.png", x_key="ge", y_key="pass",
                      label_key="generator", xlabel="x", ylabel="y", title="t")
    texts = [t.get_text() for t in figs[0].axes[0].get_legend().get_texts()]
    assert texts == ["g" * 31 + "\u2026", "short"]


def test_series_beyond_ten_differ_by_marker_and_line_style(tmp_path, figs):
    curves = [{"generator": f"g{k:02d}", "ge": [1.0, 2.0], "pass": [0.1, 0.2]}
              for k in range(12)]
    plots.sensitivity(curves, tmp_path / "s.png", x_key="ge", y_key="pass",
                      label_key="generator", xlabel="x", ylabel="y", title="t")
    lines = figs[0].axes[0].lines
    styles = {(to_hex(ln.get_color()), ln.get_marker(), ln.get_linestyle()) for ln in lines}
    assert len(lines) == 12 and len(styles) == 12
    assert (lines[0].get_marker(), lines[10].get_marker()) == ("o", "s")


def test_matches_outliers_differ_by_marker_and_line_style(tmp_path, figs):
    frame = np.zeros((20, 30, 3), dtype=np.uint8)
    x1 = np.array([[1.0, 1.0], [2.0, 2.0], [3.0, 3.0]])
    plots.matches(frame, frame, x1, x1, np.array([True, True, False]), tmp_path / "m.png")
    ax = figs[0].axes[0]
    assert {ln.get_linestyle() for ln in ax.lines} == {"-", "--"}
    markers = [c.get_paths()[0].vertices.shape[0] for c in ax.collections]
    assert len(set(markers)) == 2  # an "x" and an "o" path


# --- card wording -------------------------------------------------------------------------------

def test_card_calibrated_row_gives_the_reason_and_the_bounds_applied():
    bg = {"ir": 1.0, "ge_px": 0.1, "pass": True, "pass_calibrated": None,
          "pass_calibrated_reason": "no calibration for features backend lk-tracks",
          "calibration": {"name": "default:opencv-sift", "hash": "002e"}}
    assert _bounds_html(bg) == ("n/a (no calibration for features backend lk-tracks); "
                                "calibration default:opencv-sift (002e)")
    assert "calibrated: n/a (no calibration" in dict(_facts({}, {"status": "ok",
                                                                 "background": bg}))["valid pairs"]
    res = _near_bound_result("c", 0.999155)
    html_row = _bounds_html(res["background"])
    assert html_row.startswith("FAIL (failed: IR)<ul")
    assert html_row.endswith("<span class='muted'>applied: F bounds of default:opencv-sift "
                             "(002e)</span>")


def test_not_scored_card_and_empty_sensitivity_say_not_applicable(tmp_path, gate_calls):
    bad = fake_result("n0", status="not_applicable")
    bad["reason"] = "no texture: blank frames"
    facts = dict(_facts({}, bad))
    assert facts["score"] == "Score n/a (not_applicable: no texture: blank frames)"
    assert facts["IR / GE (px)"] == "n/a (not scored)"
    assert facts["valid pairs"] == "n/a (not scored)"
    assert "Score n/a (not_applicable: no texture" in explain_result(bad, evidence=False)
    page = build_report([_row("n0", bad, 0)], tmp_path, cards=1, draw=False,
                        n_boot=20).read_text()
    sens = _section(page, "sensitivity", "dynamics")
    assert "No scored clip (status ok with IR and GE): no sensitivity curves" in sens


def test_a_clip_named_twice_gets_one_card(tmp_path, gate_calls):
    rows = _gate_rows()
    flat = [{"clip_id": r["clip_id"], "status": "ok", "ir": 0.9} for r in rows]
    assert _pick_cards(flat, 6, ["sheet", "rot", "sheet"]) == ["sheet", "rot"]
    page = build_report(rows, tmp_path, card_clips=["rot", "rot"], draw=False,
                        n_boot=20).read_text()
    ids = re.findall(r' id="([^"]+)"', page)
    assert "Audit cards (1)" in page and len(ids) == len(set(ids)) == 2  # card + heading
