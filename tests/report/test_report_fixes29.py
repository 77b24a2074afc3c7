"""Audit s29 (report output) fixes: ``geocon score --json`` records the masks / poses files
(the cards re-derive the pairs with them; a card without them says how to supply them), a
non-finite gate statistic is missing (not a crash), ``geocon explain`` prints its paper
report-gate values apart from the thresholds and from 1 and says n/a for an unscored clip or a
missing verdict, the gate table does not depend on the row order, free text is bidi-isolated
(HTML) and control characters escaped (text), the timeline's GE axis starts at 0 with a
minimum span, the net-benefit axis has its unit, a one-scene group has no zero-width CI,
out-of-range scores / IRs are flagged, and a score of 0.99999 is not printed as 1."""
from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers import fake_result, parallax_gate, write_jsonl

from geocon_torch.bench import stats
from geocon_torch.cli import main
from geocon_torch.config import GeoConConfig
from geocon_torch.errors import InputError
from geocon_torch.report import audit, build_report, evidence, plots
from geocon_torch.report.explain import explain_result
from geocon_torch.report.html import _frozen_note, _gate_net_benefit, _l, _Page
from geocon_torch.report.text import score_line
from geocon_torch.result import ClipResult


def _text(fragment: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", fragment)).strip()


# ------------------------------------------------------------------ F1: masks / poses paths

class _Row:
    def __init__(self, row: dict):
        self.row = row

    def to_dict(self) -> dict:
        return dict(self.row)


def test_score_json_records_the_absolute_masks_and_poses_files(tmp_path: Path, monkeypatch):
    """--masks / --poses folders typed relative: each clip's own files are recorded absolute
    in ``meta`` (as ``geocon demo`` / ``geocon bench`` record them); a clip with none gets no
    ``meta``."""
    seen = []

    def score_clips(paths, masks=None, poses=None, **kw):
        seen.append((list(masks), list(poses)))
        return [_Row({"clip": Path(p).stem, "path": str(p), "status": "ok", "score": 0.5})
                for p in paths]
    monkeypatch.setattr("geocon_torch.commands.score.score_clips", score_clips)
    for sub, name in (("clips", "a.mp4"), ("clips", "b.mp4"), ("m", "a_masks.npz"),
                      ("p", "a.json")):
        (tmp_path / sub).mkdir(exist_ok=True)
        (tmp_path / sub / name).write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    assert main(["score", "clips/a.mp4", "clips/b.mp4", "--masks", "m", "--poses", "p",
                 "--json", "r.jsonl", "--no-progress"]) == 0
    a, b = [json.loads(line) for line in Path("r.jsonl").read_text().splitlines()]
    assert a["meta"] == {"masks_path": str(tmp_path / "m" / "a_masks.npz"),
                         "poses_path": str(tmp_path / "p" / "a.json")}
    assert "meta" not in b
    assert seen == [(["m/a_masks.npz", None], ["p/a.json", None])]  # scored as before


def _mismatch() -> Exception:
    """The error ``pair_evidence`` raises when the re-derived pair is not the stored one."""
    res = {"background": {"per_pair": [{"pair": [0, 1], "model": "H", "ir_h": 0.98}]}}
    try:
        evidence._check_stored(res, SimpleNamespace(pairs=torch.tensor([[0, 1]])), 0, 1.0, "H")
    except InputError as exc:
        return exc
    raise AssertionError("no mismatch raised")


def test_a_card_without_recorded_masks_says_how_to_supply_them(tmp_path: Path, monkeypatch):
    """The card's note names how to give the masks / poses (geocon report has no option for
    them): score with --masks / --poses --json, or geocon explain --masks / --poses."""
    def fail(*args, **kwargs):
        raise _mismatch()
    monkeypatch.setattr(audit, "pair_evidence", fail)
    res = fake_result("c", path="/x/c.mp4")
    _, notes = audit._drawings({}, res, tmp_path, "c", None)
    assert notes[0].startswith("drawings unavailable: ")
    assert "geocon score --masks / --poses --json" in notes[0]
    assert "geocon explain" in notes[0]
    res["meta"] = {"masks_path": "/x/c_masks.npz", "poses_path": None}  # recorded: no advice
    _, notes = audit._drawings({}, res, tmp_path, "c", None)
    assert "geocon score --masks" not in notes[0]


# ------------------------------------------------------------------ F2: non-finite statistic

def test_a_non_finite_gate_statistic_is_missing_not_a_crash(tmp_path: Path):
    rows = []
    for i in range(4):
        res = fake_result(f"c{i}", prompt_category="C1" if i % 2 else "C3",
                          statistic=0.01 * i, score=0.5)
        rows.append({"clip_id": f"c{i}", "generator": "A", "prompt_category":
                     res["prompt_category"], "config_hash": "cfg", "status": "ok",
                     "result": res})
    rows[0]["result"]["gate"]["statistic"] = float("nan")
    rows[1]["result"]["gate"]["statistic"] = float("inf")
    obs = stats.gate_observations(rows)
    assert obs["clips"] == ["c2", "c3"] and np.isfinite(obs["t"]).all()
    page = build_report(rows, tmp_path, draw=False, n_boot=20, cards=0).read_text()
    assert "2 clips; decisions" in page
    assert audit._fmt(float("inf")) == "-" and audit._fmt(float("nan"), near=1.0) == "-"


# ------------------------------------------------------------------ F3: explain's paper lines

def _lines(res) -> list:
    return explain_result(res, evidence=False).splitlines()


def test_explain_paper_lines_print_values_apart_from_the_thresholds_and_from_1():
    lines = _lines(fake_result("a", ir=0.969996, ge=3.50004))
    assert "  IR 0.969996 < report_ir 0.97: FAILS (margin -0.000004)" in lines
    assert "  GE 3.50004 px > report_ge_px 3.5: FAILS (margin -4e-05 px)" in lines
    lines = _lines(fake_result("b", ir=0.99996, ge=1.0))
    assert "  IR 0.99996 >= report_ir 0.97: ok (margin +0.02996)" in lines
    assert any("fail if IR fell below 0.97 (now 0.99996)" in line for line in lines)
    missing = fake_result("c", ir=0.99, ge=1.0)
    del missing["background"]["pass"]
    assert "Report gate (paper): n/a" in _lines(missing)  # not "FAIL"


def test_explain_names_a_noise_adapted_parallax_band():
    res = dict(fake_result("c"), gate=parallax_gate(4.0, 5.80201))
    line = next(x for x in _lines(res) if x.startswith("  parallax_magnitude = 4"))
    assert "F if >= 16 ref px: the noise-adaptive band; configured 3 / 16 ref px)" in line


# ------------------------------------------------------------------ F4: explain, not scored

def test_explain_of_an_unscored_clip_says_not_scored_and_nothing_else():
    res = ClipResult.failed("zero", "error", "VideoReadError: the file is empty",
                            GeoConConfig()).to_dict()
    lines = _lines(res)
    assert "Report gate: n/a (clip not scored: error: VideoReadError: the file is empty)" \
        in lines
    assert not any(x.startswith("Pairs") or x.startswith("What would change") for x in lines)
    assert not any("unknown: unknown" in x for x in lines)


# ------------------------------------------------------------------ F5: row order

def _gate_rows():
    rng = np.random.default_rng(0)
    rows = []
    for i in range(24):
        cat = f"C{i % 6 + 1}"
        t = float(rng.uniform(0.03, 0.2) if cat in ("C3", "C5", "C6") else rng.uniform(0, 0.06))
        res = fake_result(f"c{i}", prompt_category=cat, statistic=round(t, 2), score=0.5)
        rows.append({"clip_id": f"c{i}", "generator": "A", "prompt_category": cat,
                     "config_hash": "cfg", "status": "ok", "result": res})
    return rows


def test_gate_observations_and_balanced_accuracy_ignore_the_row_order():
    rows = _gate_rows()
    a, b = stats.gate_observations(rows), stats.gate_observations(rows[::-1])
    assert a["t"].size == 24 and a["clips"] == b["clips"]
    np.testing.assert_array_equal(a["t"], b["t"])
    np.testing.assert_array_equal(a["is_f"], b["is_f"])
    ba = [stats.balanced_accuracy_bootstrap(o["t"], o["is_f"], n_boot=50) for o in (a, b)]
    for key in ("point", "lo", "hi", "best_counts"):
        np.testing.assert_array_equal(ba[0][key], ba[1][key])


def test_distribution_strips_ignore_the_row_order(tmp_path: Path):
    vals = [0.91, 0.95, 0.99, 0.93, 0.97]
    one = plots.distributions({"C1": {"A": vals}}, "IR", tmp_path / "a.png").read_bytes()
    two = plots.distributions({"C1": {"A": vals[::-1]}}, "IR", tmp_path / "b.png").read_bytes()
    assert one == two


# ------------------------------------------------------------------ F6: bidi, control chars

def test_free_text_is_bidi_isolated_in_the_html():
    note = _frozen_note([{"generator": "modelB\u202e", "frozen": True},
                         {"generator": "modelA", "frozen": True}])[0]
    assert "<bdi>modelB\u202e</bdi> (1)" in note
    assert _l("a\u202eb") == "<bdi>a\u202eb</bdi>" and _l("plain") == "plain"


def test_explain_escapes_control_characters_of_free_text():
    res = fake_result("c1\nReport gate (paper): PASS\x1b[2K\u202e")
    text = explain_result(res, evidence=False)
    assert "\x1b" not in text and "\u202e" not in text
    assert text.splitlines()[0].startswith(
        "Clip c1\\nReport gate (paper): PASS\\x1b[2K\\u202e: status ok")


# ------------------------------------------------------------------ F7: axes

@pytest.fixture
def saved(monkeypatch):
    """{png name: [(xlabel, ylabel, ylim) per axes]} of every figure saved."""
    seen = {}
    orig = plots._save

    def spy(fig, path):
        seen[Path(path).name] = [(ax.get_xlabel(), ax.get_ylabel(), ax.get_ylim())
                                 for ax in fig.axes]
        return orig(fig, path)
    monkeypatch.setattr(plots, "_save", spy)
    return seen


def test_timeline_ge_axis_starts_at_zero_with_a_minimum_span(tmp_path: Path, saved):
    ge = [3.05e-05, 3.05e-05, 3.05e-05, 3.05e-05, 8.6e-05]
    plots.timeline(range(5), [1.0] * 5, ge, [True] * 5, tmp_path / "tl.png")
    (_, _, ir_lim), (_, ge_label, ge_lim) = saved["tl.png"]
    assert ge_label == "GE (px)" and ge_lim[0] == 0 and ge_lim[1] >= 0.5
    plots.timeline(range(2), [1.5, 0.9], [2.0, 9.0], [True, True], tmp_path / "t2.png")
    (_, _, ir_lim), (_, _, ge_lim) = saved["t2.png"]
    assert ir_lim[1] >= 1.5 and ge_lim[1] >= 9.0  # nothing off the chart


def test_net_benefit_axis_names_the_statistics_unit(tmp_path: Path, saved):
    page = _Page(flat=[], out=tmp_path, img=tmp_path, n_boot=10, seed=0)
    obs = {"t": np.array([1.0, 2.0, 10.0, 20.0]), "is_f": np.array([False, False, True, True])}
    _gate_net_benefit(page, obs, "flow", "ref px")
    assert saved["net_benefit.png"][0][0] == "threshold tau (ref px)"


# ------------------------------------------------------------------ F8-F10: one page

@pytest.fixture(scope="module")
def page(tmp_path_factory) -> str:
    d = tmp_path_factory.mktemp("page")
    rows = [fake_result("one0", prompt_category="C1", ir=0.91, score=0.4),
            fake_result("near0", prompt_category="C1", ir=0.99999, score=0.99999),
            fake_result("near1", prompt_category="C2", ir=0.99999, score=0.99999),
            fake_result("odd0", prompt_category="C1", ir=1.5, score=1.7),
            fake_result("odd1", prompt_category="C2", ir=0.98, score=-0.3)]
    for r in rows:
        r["generator"] = r["clip"].rstrip("0123456789")
    write_jsonl(d / "r.jsonl", rows)
    return build_report(str(d / "r.jsonl"), d / "o", draw=False, n_boot=50,
                        card_clips=["near0"]).read_text()


def _board(page: str) -> dict:
    b = page[page.index("Leaderboard: generators"):]
    b = b[:b.index("</table>")]
    rows = [re.findall(r"<td[^>]*>(.*?)</td>", tr) for tr in re.findall(r"<tr>(.*?)</tr>", b)]
    return {_text(r[0]): [_text(c) for c in r[1:]] for r in rows if r}


def test_a_one_scene_group_has_no_zero_width_ci(page: str):
    assert _board(page)["one"][0] == "0.4 [n/a: 1 scene]"
    tab = page[page.index("Median IR (fraction) per generator"):]
    tab = _text(tab[:tab.index("</table>")])
    assert "one C1 0.91 [n/a: 1 scene] 1 1" in tab
    assert "[0.91, 0.91]" not in page


def test_out_of_range_scores_and_irs_are_flagged(page: str):
    boxes = [_text(p) for p in re.findall(r"<p class='warn'>(.*?)</p>", page, re.S)]
    (box,) = [b for b in boxes if "outside [0, 1]" in b]
    assert "odd0 (score 1.7, IR 1.5)" in box and "odd1 (score -0.3)" in box
    assert "near0" not in box and "one0" not in box


def test_a_score_near_1_is_told_from_1(page: str):
    assert _board(page)["near"][0] == "0.99999 [0.99999, 0.99999]"
    assert "Score 0.99999 [0-1, higher is better]" in page
    assert score_line({"status": "ok", "score": 1.0}) == "Score 1 [0-1, higher is better]"
