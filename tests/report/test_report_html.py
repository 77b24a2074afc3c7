"""HTML report from a synthetic results table: numbers on the page equal the statistics,
every figure is written, failures are listed, and headless Chromium renders the page."""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from helpers import fake_result, write_jsonl

from geocon_torch.bench import ResultSchemaError, ResultStore
from geocon_torch.report import build_report, gate_rationale, timeline_series

CHROMIUM = Path("/usr/bin/chromium")


def _rows():
    rng = np.random.default_rng(0)
    rows = []
    for generator in ("A", "B"):
        for cat in ("C1", "C2", "C3", "C4", "C5", "C6"):
            for seed in range(4):
                cid = f"{generator}_{cat}_{seed}"
                f = cat in ("C3", "C5", "C6")
                t = float(rng.uniform(0.03, 0.2) if f else rng.uniform(0.0, 0.06))
                res = fake_result(cid, ir=float(rng.uniform(0.9, 1.0)),
                                  ge=float(rng.uniform(0.2, 3)), regime="F" if t > 0.04 else "H",
                                  prompt_category=cat, statistic=t,
                                  objects=list(rng.uniform(1, 20, 2)), config_hash="cfg",
                                  score=float(rng.uniform(0.3, 1.0)) * (
                                      0.5 if generator == "A" else 1.0))  # B ranks first
                res["background"]["sensitivity"] = {
                    "tau_h": [1.0, 2.0, 3.0], "ir_h": [0.8, 0.9, 0.95], "ge_h_px": [0.5, 0.8, 1.0],
                    "tau_f": [0.05, 0.1], "ir_f": [0.9, 0.95], "ge_f_px": [0.3, 0.4]}
                rows.append({"clip_id": cid, "generator": generator, "prompt_category": cat,
                             "prompt": "p",
                             "seed": seed, "scene": f"{cat}|p|{seed}", "config_hash": "cfg",
                             "status": "ok", "result": res})
    bad = fake_result("broken", status="error", config_hash="cfg")
    bad["reason"] = "VideoReadError: zero-byte file"
    rows.append({"clip_id": "broken", "generator": "A", "prompt_category": "C1", "seed": 9,
                 "scene": "C1|p|9", "config_hash": "cfg", "status": "error", "result": bad})
    return rows


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    rows = _rows()
    return build_report(rows, out, draw=False, n_boot=1000, cards=3), rows


def test_page_numbers_match_statistics(report):
    page, rows = report
    text = page.read_text()
    # generator A, Table-1 IR %: mean over scenes of the clip IR (one clip per scene) * 100
    ir_a = np.mean([r["result"]["background"]["ir"] for r in rows
                    if r["generator"] == "A" and r["status"] == "ok"]) * 100
    assert f"{ir_a:.4g}" in text
    ge_b = np.mean([r["result"]["background"]["ge_px"] for r in rows if r["generator"] == "B"])
    assert f"{ge_b:.4g}" in text
    means = {}
    for generator in ("A", "B"):  # the headline score column: mean over scenes, 3 digits
        score = np.mean([r["result"]["score"] for r in rows
                         if r["generator"] == generator and r["status"] == "ok"])
        assert f"<td class=''>{score:.3g} <span" in text
        means[generator] = score
    # the leaderboard ranks generators by that score, highest first
    board = text[text.index("id='leaderboard'"):text.index("id='prompt-categories'")]
    first, second = sorted(means, key=means.get, reverse=True)
    assert board.index(f">{first}<") < board.index(f">{second}<")
    for generator in ("A", "B"):  # pass (paper): the fraction of scenes passing (1 clip each)
        rate = np.mean([r["result"]["background"]["pass"] for r in rows
                        if r["generator"] == generator and r["status"] == "ok"])
        row = board[board.index(f">{generator}<"):]
        row = row[:row.index("</tr>")]
        cells = re.findall(r"<td class='[^']*'>(.*?)</td>", row)  # after the name cell
        assert cells[4].startswith(f"{rate:.3g} <span") and cells[5] == "-", cells  # no verdicts
    assert "pass (paper)" in board and "pass (calibrated)" in board
    assert "VideoReadError: zero-byte file" in text and "Clips not scored (1)" in text
    assert "24 / 0 / 1" in text and "24 / 0 / 0" in text  # ok / n.a. / error per generator
    for section in ("Leaderboard", "Per prompt category", "Translation gate", "Calibration",
                    "Net benefit", "Threshold-score sensitivity", "Percentile-aligned",
                    "AdaP90", "Audit cards (3)"):
        assert section in text
    assert len(re.findall(r"class=\"card\"", text)) == 3


def test_every_figure_exists_and_is_not_blank(report):
    page, _ = report
    img = page.parent / "img"
    names = {"ci_ir.png", "ci_ge_px.png", "dist_ir.png", "dist_ge_px.png", "gate_hist.png",
             "gate_calibration.png", "net_benefit.png", "sens_report_gate.png",
             "sens_tau_h.png", "sens_tau_f.png"}
    assert names <= {p.name for p in img.iterdir()}
    import matplotlib.image as mpimg

    for name in names:
        a = mpimg.imread(img / name)
        assert a.shape[0] > 100 and a[..., :3].std() > 0.02, name
    for src in re.findall(r'src="([^"]+)"', page.read_text()):
        assert (page.parent / src).is_file(), src


def test_gate_histogram_counts_ok_clips_only(report):
    """The error row "broken" carries a gate statistic too; the histogram and the calibration
    count the ok clips only."""
    page, rows = report
    text = page.read_text()
    gate = text[text.index("id='gate'"):text.index("id='sensitivity'")]
    n_ok = sum(r["status"] == "ok" for r in rows)
    assert n_ok == len(rows) - 1 and f"<b>poses</b>, {n_ok} clips" in gate


def test_sensitivity_row_of_a_generator_without_scored_clips_is_dashes(tmp_path: Path):
    rows = _rows()
    for i in range(2):  # generator Z: two clips, neither scored
        bad = fake_result(f"z{i}", status="error", config_hash="cfg")
        rows.append({"clip_id": f"z{i}", "generator": "Z", "prompt_category": "C1", "seed": i,
                     "scene": f"C1|z|{i}", "config_hash": "cfg", "status": "error",
                     "result": bad})
    text = build_report(rows, tmp_path, draw=False, n_boot=100, cards=0).read_text()
    sens = text[text.index("id='sensitivity'"):text.index("id='dynamics'")]
    row = re.search(r"<tr><td class='l'>Z</td>.*?</tr>", sens).group(0)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells[:2] == ["Z", "0"] and len(cells) == 12 and set(cells[2:]) == {"-"}
    row_a = re.search(r"<tr><td class='l'>A</td>.*?</tr>", sens).group(0)
    assert "-" not in re.findall(r"<td[^>]*>(.*?)</td>", row_a)[2:]


def test_report_from_store_and_invalid_jsonl(tmp_path: Path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        for i in range(3):
            s.put({"clip_id": f"c{i}", "generator": "m", "prompt_category": "C1", "seed": i,
                   "scene": f"s{i}"}, f"h{i}", "cfg", fake_result(f"c{i}", ir=0.9 + i / 100))
    page = build_report(tmp_path / "r.sqlite", tmp_path / "rep", draw=False, n_boot=200)
    assert "3 clips" in page.read_text()
    bad = fake_result("x")
    bad["status"] = "maybe"
    p = write_jsonl(tmp_path / "bad.jsonl", [bad])
    with pytest.raises(ResultSchemaError, match="line 1: status"):
        build_report(p, tmp_path / "rep2")


def test_gate_rationale_and_timeline():
    gate = {"method": "parallax", "statistic": 0.7, "thresholds": {"low": 0.5, "high": 1.0},
            "decision": "U", "evidence": {"statistic_name": "parallax_fraction",
                                          "u_resolved": "F", "gric_delta": 3.0}}
    text = gate_rationale(gate, "F")
    assert "parallax_fraction = 0.7" in text and "H if <= 0.5, F if >= 1" in text
    assert "U resolved to F" in text and "scored with F" in text
    assert "GRIC delta 3" in text
    gate["evidence"]["gric_delta"] = None  # a stored row whose delta was not finite
    assert "GRIC delta -" in gate_rationale(gate, "F")
    bg = {"per_pair": [
        {"pair": [0, 1], "scale": 0.5, "ir_h": 0.1, "valid_h": True, "model": "H"},
        {"pair": [0, 1], "scale": 1.0, "ir_h": 0.9, "ge_h_px": 1.0, "valid_h": True,
         "ir_f": 0.5, "model": "H"},
        {"pair": [1, 2], "scale": 1.0, "ir_f": 0.8, "ge_f_px": 0.2, "valid_f": False,
         "model": "F"}]}
    s = timeline_series(bg)
    assert s["ir"] == [0.9, 0.8] and s["ge"] == [1.0, 0.2] and s["valid"] == [True, False]
    assert s["pair"] == [[0, 1], [1, 2]] and timeline_series({}) is None


@pytest.mark.skipif(not CHROMIUM.exists(),
                    reason="headless Chromium not installed: apt-get update && "
                           "apt-get install -y chromium")
def test_headless_chromium_renders_the_page(report, tmp_path: Path):
    page, _ = report
    shot = tmp_path / "shot.png"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
           "--no-first-run", "--disable-background-networking", "--disable-component-update",
           "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
           f"--screenshot={shot}", "--window-size=1280,2000", page.resolve().as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=120)
    assert shot.is_file() and shot.stat().st_size > 20_000
    import matplotlib.image as mpimg

    a = mpimg.imread(shot)
    assert a.shape[:2] == (2000, 1280)
    # rendered text, tables and figures: many distinct grey levels, not a blank page
    assert a[..., :3].std() > 0.05 and len(np.unique((a[..., 0] * 255).astype(int))) > 50
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)


def test_page_reads_well_pairs_labels_and_no_reprs(tmp_path: Path):
    """Issue 16: pair counts say what they count, missing labels read "unknown", no raw dict
    reprs and no "None" anywhere on the page."""
    from geocon_torch.report.text import compact, pair_counts

    bg = {"valid_pairs": 69, "pairs": 23, "scales": [0.5, 0.75, 1.0]}
    assert pair_counts(bg) == "69 of 69 (pair, scale) entries valid (23 pairs x 3 scales)"
    assert pair_counts({"valid_pairs": 3, "pairs": 4}) == "3 of 4 pairs valid"
    assert compact({"b": {"x": 1.23456, "y": None}, "a": True}) == \
        "a: yes, b: (x: 1.235, y: unknown)"
    rows = []
    for i in range(6):
        res = fake_result(f"c{i}", ir=0.9 + i / 100, statistic=0.01 * i, config_hash="cfg",
                          prompt_category=None, behaviour=None)
        res["background"].update(pairs=2, valid_pairs=4, scales=[0.5, 1.0])
        rows.append({"clip_id": f"c{i}", "generator": None if i % 2 else "m",
                     "prompt_category": None, "seed": None, "scene": f"clip:c{i}",
                     "config_hash": "cfg", "status": "ok", "result": res})
    page = build_report(rows, tmp_path / "rep", draw=False, n_boot=50, cards=2).read_text()
    assert "4 of 4 (pair, scale) entries valid (2 pairs x 2 scales)" in page
    assert "None" not in page and "{'" not in page and '{"' not in page
    assert "<td class='l'>unknown</td>" in page and "behaviour</th><td>unknown" in page


def test_empty_source_and_unknown_card_clip_fail_before_writing(tmp_path: Path):
    """An empty results file is an InputError (it wrote an empty report, exit 0), and an
    unknown ``--clips`` id fails before the output folder is created."""
    from geocon_torch.errors import InputError

    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(InputError, match="holds no results"):
        build_report(empty, tmp_path / "rep_empty")
    assert not (tmp_path / "rep_empty").exists()
    src = write_jsonl(tmp_path / "r.jsonl", [fake_result("a", prompt_category="C3")])
    with pytest.raises(InputError, match="--clips: no clip 'nope'"):
        build_report(src, tmp_path / "rep_bad", card_clips=["nope"], draw=False)
    assert not (tmp_path / "rep_bad").exists()
