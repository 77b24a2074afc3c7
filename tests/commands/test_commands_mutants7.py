"""Mutation-found gaps of the ``geocon`` subcommands (session 22): documented option defaults,
option bounds at their edges, exit statuses and printed summaries of prune, bench, merge,
score and pairs. Each test pins one behaviour no other default test pinned; none scores a
video (the scorers are replaced)."""
from __future__ import annotations

import argparse
from pathlib import Path
from types import SimpleNamespace

import pytest

from geocon_torch.bench.prune import PruneReport
from geocon_torch.bench.runner import RunSummary
from geocon_torch.cli import build_parser, main
from geocon_torch.commands import _common
from geocon_torch.commands import calibrate as calibrate_cmd
from geocon_torch.commands import prune as prune_cmd


def _args(*argv):
    return build_parser().parse_args(list(argv))


# --- documented defaults ------------------------------------------------------------------------
@pytest.mark.parametrize("argv, expected", [
    (["prune", "--db", "s.sqlite", "--orphans"], {"store_timeout": 120.0, "dry_run": False}),
    (["bench", "m.csv", "--db", "s.sqlite"],
     {"assign": "auto", "lease_s": 60.0, "batch_clips": 8, "store_timeout": 120.0,
      "strict": False, "all_configs": False}),
    (["report", "r.jsonl", "--out", "o"],
     {"cards": 6, "boot": 10_000, "seed": 0, "title": "geocon audit report"}),
    (["pairs", "m.csv", "--db", "s.sqlite", "--out", "p.jsonl"],
     {"kind": "epipolar-dpo", "min_margin": 0.0}),
    (["merge", "out.sqlite", "a.sqlite"], {"clock_skew": 0.0, "conflicts": None}),
    (["calibrate", "cal"],
     {"frames": 8, "size": (192, 256), "seeds": 2, "first_seed": 0, "backend": "opencv-sift",
      "device": "cpu", "target_false_pass": 0.05, "min_severity": 0.5,
      "severities": "0.25,0.5,1.0", "categories": "all"}),
    (["synth", "out"], {"category": "all", "corruption": "none", "severity": 0.5, "frames": 48,
                        "size": (640, 384), "seed": 0, "fps": 24.0, "num_objects": None}),
    (["demo"], {"frames": 6, "size": (192, 144), "seed": 0, "report": False}),
])
def test_option_defaults_are_the_documented_ones(argv, expected):
    args = _args(*argv)
    assert {k: getattr(args, k) for k in expected} == expected


# --- option bounds ------------------------------------------------------------------------------
def test_option_types_accept_their_bounds():
    assert _common.frame_size("8x8") == (8, 8)
    assert _common.bounded_frame_size(f"{_common.MAX_FRAME_SIDE}x8") == (8192, 8)
    assert _common.non_negative_float("0") == 0.0
    assert _common.unit_fraction("1") == 1.0 and _common.unit_fraction("0") == 0.0
    assert _common.at_least(1)("1") == 1
    with pytest.raises(argparse.ArgumentTypeError):
        _common.positive_float("0")


def test_calibrate_size_as_a_long_side_is_4_to_3():
    assert calibrate_cmd._size("512") == (384, 512)
    assert calibrate_cmd._size("320x240") == (240, 320)


def test_calibrate_plan_bounds_and_seeds():
    """--frames 2, a 16 x 16 setting, a severity equal to --min-severity are all accepted; the
    seeds start at --first-seed."""
    args = _args("calibrate", "cal", "--frames", "2", "--seeds", "2", "--first-seed", "3",
                 "--severities", "0.25,0.5", "--min-severity", "0.5",
                 "--setting", "16x16x2")
    plan = calibrate_cmd.plan_from_args(args)
    assert plan.frames == 2 and plan.seeds == (3, 4) and plan.severities == (0.25, 0.5)
    assert plan.settings[0]["size"] == [16, 16] and plan.settings[0]["seeds"] == [3, 4]


# --- shared helpers -----------------------------------------------------------------------------
def test_a_masks_folder_without_the_clip_s_file_is_for_one_clip_only(tmp_path: Path):
    (tmp_path / "masks").mkdir()
    clip = tmp_path / "a.mp4"
    assert _common.per_clip_file(str(tmp_path / "masks"), clip, 1) == str(tmp_path / "masks")
    assert _common.per_clip_file(str(tmp_path / "masks"), clip, 2) is None
    assert _common.per_clip_file(str(tmp_path / "masks"), clip, 1, kind="poses") is None


def test_a_clip_given_twice_is_scored_once(tmp_path: Path):
    p = tmp_path / "a.mp4"
    p.write_bytes(b"x")
    assert _common.expand_inputs([str(p), str(p)]) == [p]


def test_summary_row_shows_the_worst_adap90():
    res = {"clip": "c", "status": "ok",
           "foreground": {"objects": [{"adap90": 0.2}, {"adap90": 0.7}, {"adap90": 0.4}]}}
    row = _common.summary_row(res)
    assert row[_common.SUMMARY_COLUMNS.index("objects")] == "3"
    assert row[_common.SUMMARY_COLUMNS.index("AdaP90")] == "0.700"


# --- geocon prune: printed lines ------------------------------------------------------------------
def _prune_args(**kw):
    base = dict(keep_manifest=None, orphans=False, stale_jobs=False, vacuum=False)
    return argparse.Namespace(**{**base, **kw})


def test_prune_listing_says_more_only_past_the_shown_keys():
    n = prune_cmd.SHOWN
    full = PruneReport(store="s", dry_run=True, clips={"cfg": [f"c{i:02d}" for i in range(n)]})
    lines = prune_cmd.report_lines(full, _prune_args(keep_manifest="m.csv"))
    assert sum(line.startswith("    clip ") for line in lines) == n
    assert not any("more" in line for line in lines)
    more = PruneReport(store="s", dry_run=True,
                       clips={"cfg": [f"c{i:02d}" for i in range(n + 1)]})
    lines = prune_cmd.report_lines(more, _prune_args(keep_manifest="m.csv"))
    assert lines[-1] == "    ... 1 more"


def test_prune_lists_crashed_jobs_only_in_a_dry_run():
    jobs = [("dead", "cfg", 3)]
    args = _prune_args(stale_jobs=True)
    done = PruneReport(store="s", dry_run=False, store_kind="postgresql", jobs=jobs)
    assert prune_cmd.report_lines(done, args)[1:] == [
        "  crashed jobs: 1 job(s) with 3 work row(s) deleted"]
    dry = PruneReport(store="s", dry_run=True, store_kind="postgresql", jobs=jobs)
    assert prune_cmd.report_lines(dry, args)[-1] == "    job dead (config cfg): 3 work row(s)"


def test_prune_on_sqlite_prints_no_crashed_jobs_line():
    rep = PruneReport(store="s", dry_run=False, store_kind="sqlite", notes=["a note"])
    assert prune_cmd.report_lines(rep, _prune_args(stale_jobs=True)) == [
        "geocon prune: store s", "  a note"]


def test_prune_sizes_switch_to_mib_at_one_mib():
    assert prune_cmd._size((1 << 20) - 1) == "1024 KiB"
    assert prune_cmd._size(1 << 20) == "1.0 MiB"


# --- geocon bench / merge / score / pairs: statuses and summaries ---------------------------------
def test_bench_rank_other_than_zero_prints_nothing_and_exits_0(tmp_path: Path, capsys,
                                                               monkeypatch):
    seen = {}

    def fake_run(manifest, db, **kw):
        seen.update(kw)
        return SimpleNamespace(rank=1)

    monkeypatch.setattr("geocon_torch.commands.bench.run_manifest", fake_run)
    assert main(["bench", "m.csv", "--db", str(tmp_path / "r.sqlite"), "--strict"]) == 0
    assert capsys.readouterr().out == ""
    assert (seen["batch_clips"], seen["lease_s"], seen["assign"]) == (8, 60.0, "auto")


def test_bench_without_manifest_or_export_is_exit_2(tmp_path: Path, capsys):
    assert main(["bench", "--db", str(tmp_path / "r.sqlite")]) == 2
    assert "give a MANIFEST to run or --export-csv" in capsys.readouterr().err


def test_bench_exports_an_empty_store_of_no_config(tmp_path: Path, capsys):
    """An existing store without rows holds no other configuration: the export is a header
    line, exit 0 (not "holds no result of this configuration")."""
    from geocon_torch.bench import ResultStore

    db = tmp_path / "r.sqlite"
    ResultStore(db).close()
    csv = tmp_path / "t.csv"
    assert main(["bench", "--db", str(db), "--export-csv", str(csv)]) == 0
    assert len(csv.read_text().splitlines()) == 1


def _merge_report(updates=0, conflicts=0):
    upd = {"table": "clips", "clip_id": "x", "config_hash": "cfg", "from": "a.sqlite",
           "differences": {"generator": ["g1", "g2"]}}
    con = {"table": "results", "content_hash": "h" * 20, "config_hash": "cfg",
           "kept_from": "a", "other_from": "b", "differences": {"background.ir": [0.5, 0.6]}}
    return SimpleNamespace(shards=["a"], out="out", results_added=0, results_same=0,
                           results_replaced=0, results_upgraded=0, results_errors_skipped=0,
                           clips_added=0, clips_same=0, clips_updated=updates, clips_older=0,
                           updates=[upd] * updates, conflicts=[con] * conflicts)


def test_merge_lists_updates_and_says_more_only_past_the_shown(capsys, monkeypatch):
    from geocon_torch.commands import merge as merge_cmd

    monkeypatch.setattr(merge_cmd, "merge_stores", lambda *a, **k: _merge_report(20))
    assert main(["merge", "out.sqlite", "a.sqlite"]) == 0
    out = capsys.readouterr().out
    assert out.count("  updated (clips) clip x config cfg from a.sqlite") == 20
    assert "more update" not in out
    monkeypatch.setattr(merge_cmd, "merge_stores", lambda *a, **k: _merge_report(21, 1))
    assert main(["merge", "out.sqlite", "a.sqlite"]) == 1
    assert "  ... 1 more update(s)" in capsys.readouterr().out


class _Result:
    def __init__(self, status):
        self.status = status

    def to_dict(self):
        return {"clip": "?", "status": self.status, "reason": None if self.status == "ok"
                else f"{self.status} here"}


def _fake_score(statuses):
    def score_clips(paths, **kw):
        return [_Result(statuses[Path(p).stem]) for p in paths]
    return score_clips


def test_score_exit_status_is_1_for_errors_only(tmp_path: Path, capsys, monkeypatch):
    """A not_applicable clip (a frozen video, a regime the gate cannot tell) is a result, not
    a failure: exit 0, and the table points at --json for its reason; an error clip: exit 1."""
    for name in ("a", "b"):
        (tmp_path / f"{name}.mp4").write_bytes(b"x")
    monkeypatch.setattr("geocon_torch.commands.score.score_clips",
                        _fake_score({"a": "ok", "b": "not_applicable"}))
    argv = ["score", str(tmp_path / "a.mp4"), str(tmp_path / "b.mp4"), "--no-progress"]
    assert main(argv) == 0
    assert "(every field of every clip: add --json OUT)" in capsys.readouterr().out
    monkeypatch.setattr("geocon_torch.commands.score.score_clips",
                        _fake_score({"a": "ok", "b": "error"}))
    assert main(argv) == 1


def test_pairs_summary_counts_linked_clips_as_stored(tmp_path: Path, capsys, monkeypatch):
    records = [{"status": "pair"}, {"status": "skipped"}]
    summary = RunSummary(computed=1, skipped=2, linked=3)
    monkeypatch.setattr("geocon_torch.commands.pairs.preference_pairs",
                        lambda *a, **k: (records, summary))
    out = tmp_path / "p.jsonl"
    assert main(["pairs", "m.csv", "--db", "r.sqlite", "--out", str(out)]) == 0
    assert capsys.readouterr().out.strip() == (
        f"geocon pairs: 2 prompt(s): 1 pair(s), 1 skipped; 1 clip(s) scored, 5 already "
        f"stored; wrote {out}")
    assert len(out.read_text().splitlines()) == 2
