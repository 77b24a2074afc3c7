"""Mutation-found gaps of the ``geocon`` subcommands and the version warnings (session 25):
which rows the version warning counts, what warn_mixed_versions / rescore_advice return, where
``geocon pairs --out -`` writes its summary, which kept rows its summary names, ... Each test
pins one behaviour no other default test pinned; none scores a video (scorers are replaced)."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from helpers import fake_result

from geocon_torch import __version__
from geocon_torch.bench import stats
from geocon_torch.bench.runner import RunSummary
from geocon_torch.cli import main
from geocon_torch.errors import InputError

OLD = "0.1.0"


def _row(i: int, version: str, status: str = "ok") -> dict:
    res = fake_result(f"c{i}", status=status)
    res["version"] = version
    return {"clip_id": f"c{i}", "generator": "m", "prompt_category": "C1", "prompt": "p",
            "seed": i, "scene": f"C1|p|{i}", "result": res, "status": status,
            "config_hash": "cfg"}


# --- bench.stats: the version warning -----------------------------------------------------------
def test_one_version_warning_counts_the_scored_rows_only():
    """4 ok rows of an older release and 1 error row (of any version): "(4 clips)", the clips
    whose numbers are pooled, not the 5 rows."""
    rows = [_row(i, OLD) for i in range(4)] + [_row(4, OLD, "error")]
    with pytest.warns(UserWarning) as caught:
        counts = stats.warn_mixed_versions(rows)
    (w,) = [w for w in caught if "geocon_torch" in str(w.message)]
    assert str(w.message).startswith(f"the rows hold results of geocon_torch {OLD} (4 clips), "
                                     f"and this is {__version__}:"), str(w.message)
    assert counts == {OLD: 4}


def test_warn_mixed_versions_returns_the_counts_also_when_it_does_not_warn():
    rows = [_row(i, __version__) for i in range(3)] + [_row(3, __version__, "error")]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert stats.warn_mixed_versions(rows) == {__version__: 3}
        assert stats.warn_mixed_versions([]) == {}


def test_rescore_advice_refuses_an_unknown_source():
    with pytest.raises(InputError, match="source must be store, pairs, jsonl or rows"):
        stats.rescore_advice("sqlite")


# --- geocon pairs -------------------------------------------------------------------------------
def _fake_pairs(monkeypatch, records, summary):
    monkeypatch.setattr("geocon_torch.commands.pairs.preference_pairs",
                        lambda *a, **k: (records, summary))


def test_pairs_to_stdout_writes_only_the_json_lines(monkeypatch, capsys):
    """--out -: stdout is the pairs file (one JSON object a line), no summary line in it."""
    records = [{"status": "pair", "prompt": "a"}, {"status": "skipped", "prompt": "b"}]
    _fake_pairs(monkeypatch, records, RunSummary(computed=2))
    assert main(["pairs", "m.csv", "--db", "r.sqlite", "--out", "-"]) == 0
    out = capsys.readouterr().out
    assert [json.loads(line) for line in out.splitlines()] == records


def test_pairs_summary_names_linked_rows_of_an_older_release(tmp_path: Path, monkeypatch,
                                                            capsys):
    """The "already stored" count holds skipped and linked rows: the version note names both
    (here only the linked ones are of another version)."""
    summary = RunSummary(skipped=1, linked=2, skipped_versions={__version__: 1},
                         linked_versions={OLD: 2})
    _fake_pairs(monkeypatch, [{"status": "pair"}], summary)
    out = tmp_path / "p.jsonl"
    assert main(["pairs", "m.csv", "--db", "r.sqlite", "--out", str(out)]) == 0
    text = capsys.readouterr().out
    assert f"3 already stored (2 by geocon_torch {OLD}, this is {__version__}" in text, text


# --- geocon explain -----------------------------------------------------------------------------
def test_explain_picks_a_result_file_by_its_clip_id(tmp_path: Path, capsys):
    """A one-result JSON file: --clip matches its ``clip`` name or its ``clip_id``."""
    res = fake_result("take2", ir=0.91)
    res["clip_id"] = "gen/take2"
    src = tmp_path / "r.json"
    src.write_text(json.dumps(res), encoding="utf-8")
    for clip in ("take2", "gen/take2"):
        assert main(["explain", str(src), "--clip", clip, "--no-evidence"]) == 0
        assert capsys.readouterr().out.startswith("Clip take2: status ok")
    assert main(["explain", str(src), "--clip", "other", "--no-evidence"]) == 2
    assert "holds clip 'take2'" in capsys.readouterr().err


def test_explain_of_a_store_row_without_a_result_path_reads_the_clip_row_path(tmp_path: Path,
                                                                              capsys):
    """A stored result that records no ``path`` (a hand-made or older row): the evidence is
    re-derived from the clip row's path (here a moved video: its path is named), not refused
    as "scored from a tensor"."""
    from geocon_torch.bench import ResultStore

    db, video = tmp_path / "r.sqlite", tmp_path / "gone.mp4"
    res = fake_result("c")
    del res["path"]
    with ResultStore(db) as s:
        s.put({"clip_id": "c", "generator": "m", "path": str(video)}, "hc", "cfg", res)
    assert main(["explain", str(db)]) == 0
    out = capsys.readouterr().out
    assert f"Pair #0: outlier locations unavailable ({video}: no such file" in out, out
    assert "no video path" not in out
    assert main(["explain", str(db), "--no-evidence"]) == 0  # stored numbers only
    assert "outlier locations" not in capsys.readouterr().out


# --- geocon merge -------------------------------------------------------------------------------
def _merge_report(conflicts: int):
    from types import SimpleNamespace

    con = [{"table": "results", "content_hash": f"{i:020d}", "config_hash": "cfg",
            "kept_from": "a", "other_from": "b", "differences": {"background.ir": [0.5, 0.6]}}
           for i in range(conflicts)]
    return SimpleNamespace(shards=["a", "b"], out="out", results_added=0, results_same=0,
                           results_replaced=0, results_upgraded=0, results_errors_skipped=0,
                           clips_added=0, clips_same=0, clips_updated=0, clips_older=0,
                           updates=[], conflicts=con)


def test_merge_says_more_conflicts_only_past_the_shown_and_the_file_lists_all(
        tmp_path: Path, capsys, monkeypatch):
    from geocon_torch.commands import merge as merge_cmd

    n = merge_cmd.SHOWN
    monkeypatch.setattr(merge_cmd, "merge_stores", lambda *a, **k: _merge_report(n))
    assert main(["merge", "out.sqlite", "a.sqlite", "b.sqlite"]) == 1
    err = capsys.readouterr().err
    assert err.count("  conflict (results) content ") == n and "more" not in err
    monkeypatch.setattr(merge_cmd, "merge_stores", lambda *a, **k: _merge_report(n + 1))
    file = tmp_path / "conflicts.jsonl"
    assert main(["merge", "out.sqlite", "a.sqlite", "b.sqlite", "--conflicts", str(file)]) == 1
    err = capsys.readouterr().err
    assert err.count("  conflict (results) content ") == n
    assert err.splitlines()[-1] == "  ... 1 more (--conflicts FILE lists all)"
    lines = [json.loads(line) for line in file.read_text().splitlines()]
    assert [c["content_hash"] for c in lines] == [f"{i:020d}" for i in range(n + 1)]


# --- geocon calibrate ---------------------------------------------------------------------------
def test_calibrate_setting_keeps_its_own_seed_range():
    """--setting ...:seedsA-B renders seeds A..B (a single seedsA: that one), not the --seeds
    range, which only a setting without seeds takes."""
    from geocon_torch.cli import build_parser
    from geocon_torch.commands import calibrate as calibrate_cmd

    args = build_parser().parse_args([
        "calibrate", "cal", "--seeds", "2", "--first-seed", "3",
        "--setting", "32x24x4:seeds5-7", "--setting", "32x24x4:seeds9", "--setting", "32x24x4"])
    plan = calibrate_cmd.plan_from_args(args)
    assert [st["seeds"] for st in plan.settings] == [[5, 6, 7], [9], [3, 4]]
    assert plan.seeds == (3, 4)


def test_calibrate_setting_refuses_a_zero_camera_speed():
    import argparse

    from geocon_torch.commands import calibrate as calibrate_cmd

    assert calibrate_cmd._setting("32x24x4:rate0.5")["rate"] == 0.5
    with pytest.raises(argparse.ArgumentTypeError, match="rate > 0"):
        calibrate_cmd._setting("32x24x4:rate0")


def test_calibrate_prints_the_ge_bound_at_the_working_long_side(tmp_path: Path, capsys,
                                                                monkeypatch):
    """GE_norm is px of a 1024-px frame: at --size 512x384 a 3.5 px bound is 1.75 px here
    (long side 512), not 1.3125 (the short side)."""
    from geocon_torch.commands import calibrate as calibrate_cmd

    th = {"ir_min": 0.97, "ge_norm_max": 3.5, "false_pass": 0.05, "n_corrupted": 20,
          "true_pass": 0.9, "n_clean": 10, "pooled": False}
    doc = {"content_hash": "abc", "plots": ["roc_H.png"], "thresholds": {"H": th},
           "rates": {"true_pass": 0.9, "false_pass": 0.05, "clean": {"paper_pass_rate": 0.8},
                     "corrupted": {"paper_pass_rate": 0.1}}}
    monkeypatch.setattr(calibrate_cmd, "run_calibration", lambda *a, **k: doc)
    assert main(["calibrate", str(tmp_path / "cal"), "--size", "512x384"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1] == ("  H: IR >= 0.9700, GE_norm <= 3.5 px (at 1024 px; 1.75 px here): "
                      "false-pass 0.050 of 20, true-pass 0.900 of 10"), out


# --- geocon bench -------------------------------------------------------------------------------
def _bench(tmp_path: Path, monkeypatch, summary: RunSummary, errors):
    from geocon_torch.bench import ResultStore
    from geocon_torch.commands import bench as bench_cmd

    db = tmp_path / "r.sqlite"
    ResultStore(db).close()
    monkeypatch.setattr(bench_cmd, "run_manifest", lambda *a, **k: summary)
    monkeypatch.setattr(bench_cmd, "_stored_errors", lambda *a: list(errors))
    return main(["bench", "m.csv", "--db", str(db), "--strict"])


@pytest.mark.parametrize("n, tail", [(10, "c9"), (11, "c9, ...")])
def test_bench_strict_lists_ten_error_clips_then_says_more(tmp_path: Path, capsys,
                                                          monkeypatch, n, tail):
    summary = RunSummary(total=n, config_hash="cfg")
    assert _bench(tmp_path, monkeypatch, summary, [f"c{i}" for i in range(n)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"geocon bench: --strict: {n} clip(s) stored with status error "
                          f"under config cfg"), err
    assert err.endswith(": " + ", ".join(f"c{i}" for i in range(9)) + ", " + tail), err



def test_bench_prints_the_first_twenty_new_error_rows(tmp_path: Path, capsys, monkeypatch):
    summary = RunSummary(total=25, computed=25, error=25, config_hash="cfg",
                         errors=[f"c{i}: bad" for i in range(25)])
    assert _bench(tmp_path, monkeypatch, summary, []) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [f"  error c{i}: bad" for i in range(20)]


# --- geocon prune -------------------------------------------------------------------------------
def test_prune_passes_force_and_every_option_to_the_store(monkeypatch, capsys):
    """--force reaches prune_store (a PostgreSQL store refuses the deletes while a bench job
    runs without it, exit 2); the PostgreSQL tests that show the refusal need a server."""
    from geocon_torch.bench.prune import PruneReport
    from geocon_torch.commands import prune as prune_cmd

    seen = {}

    def fake_prune(db, **kw):
        seen.update(kw, db=db)
        return PruneReport(store=str(db), dry_run=False)

    monkeypatch.setattr(prune_cmd, "prune_store", fake_prune)
    assert main(["prune", "--db", "postgresql://h/db", "--orphans", "--force",
                 "--config-hash", "abc", "--store-timeout", "5"]) == 0
    assert seen == {"db": "postgresql://h/db", "config_hash": "abc", "keep_manifest": None,
                    "orphans": True, "stale": False, "vacuum_store": False, "dry_run": False,
                    "force": True, "timeout_s": 5.0}
    assert main(["prune", "--db", "postgresql://h/db", "--orphans"]) == 0
    assert seen["force"] is False
