"""CLI user errors (issue 16): one line on stderr, exit status 2, no traceback unless --debug;
--device checked once up front; the summary table wraps the full reason."""
from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from geocon_torch.bench import ResultStore, run_manifest
from geocon_torch.cli import main
from geocon_torch.commands import score as score_cmd
from geocon_torch.commands._common import SUMMARY_COLUMNS, print_table, summary_row
from geocon_torch.errors import ConfigError
from helpers import CountingScorer, PruningScorer, fake_result, write_clips, write_jsonl

NO_GPU_DEVICE = "cuda:99" if torch.cuda.is_available() else "cuda"


def _fail(capsys, argv, match: str) -> str:
    rc = main(argv)
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("geocon ") and match in lines[0], lines[0]
    return lines[0]


def test_user_errors_are_one_line_exit_2(tmp_path: Path, capsys):
    cfg = tmp_path / "typo.json"
    cfg.write_text(json.dumps({"background": {"tua_h": 3.0}}))
    _fail(capsys, ["score", "x.mp4", "--config", str(cfg)], "tua_h")
    _fail(capsys, ["score", "x.mp4", "--config", str(tmp_path / "none.json")], "not found")
    _fail(capsys, ["report", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o")],
          "results not found")
    m = tmp_path / "m.csv"
    m.write_text("clip_id,path\na,a.mp4\n")
    _fail(capsys, ["bench", str(m), "--db", str(tmp_path / "r.sqlite")],
          "lacks column(s) generator")
    m = tmp_path / "m.jsonl"
    m.write_text('{"clip_id": "a", "path": "a.mp4"}\n')
    _fail(capsys, ["bench", str(m), "--db", str(tmp_path / "r.sqlite")],
          "missing required field(s) generator")
    _fail(capsys, ["score", "x.mp4", "--long-side", "0"], "io.long_side")
    _fail(capsys, ["score", "x.mp4", "--device", "nonsense"], "not a torch device")
    with pytest.raises(SystemExit) as exc:  # argparse errors: one line too
        main(["synth", str(tmp_path / "s"), "--size", "12"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and "--size must be WxH" in err[0]


def test_device_without_gpu_fails_once_up_front(tmp_path: Path, capsys, monkeypatch):
    calls = []
    monkeypatch.setattr(score_cmd, "score_clips", lambda *a, **k: calls.append(a))
    line = _fail(capsys, ["score", "a.mp4", "b.mp4", "--device", NO_GPU_DEVICE], "--device")
    assert "cuda" in line and calls == []
    assert capsys.readouterr().out == ""  # no table, no per-clip errors


def test_debug_shows_the_traceback(tmp_path: Path, capsys):
    cfg = tmp_path / "typo.json"
    cfg.write_text(json.dumps({"io": {"long_sid": 3}}))
    with pytest.raises(ConfigError):
        main(["--debug", "score", "x.mp4", "--config", str(cfg)])
    with pytest.raises(ConfigError):
        main(["score", "x.mp4", "--config", str(cfg), "--debug"])


def test_entry_point_subprocess_no_traceback(tmp_path: Path):
    proc = subprocess.run([sys.executable, "-m", "geocon_torch.cli", "report",
                           str(tmp_path / "missing.sqlite"), "--out", str(tmp_path / "o")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"geocon report: error: results not found: {tmp_path / 'missing.sqlite'}"]


def test_table_shows_the_headline_score():
    res = {"clip": "a", "status": "ok", "score": 0.91234, "regime": "F",
           "background": {"ir": 1.0, "ge_px": 0.25, "pass": True}}
    row = dict(zip(SUMMARY_COLUMNS, summary_row(res)))
    assert (row["score"], row["regime"], row["GE px"], row["pass"]) == ("0.912", "F", "0.250",
                                                                        "yes/-")
    failed = dict(zip(SUMMARY_COLUMNS, summary_row({"clip": "b", "status": "error",
                                                    "reason": "VideoReadError: empty"})))
    assert failed["score"] == "-" and failed["reason"] == "VideoReadError: empty"
    buf = io.StringIO()
    print_table([summary_row(res)], out=buf, width=120)
    header, _, line = buf.getvalue().splitlines()
    assert header.split()[:4] == ["clip", "status", "score", "regime"]
    assert line.split()[:4] == ["a", "ok", "0.912", "F"]


def test_table_wraps_the_full_reason():
    reason = ("VideoReadError: " + "a very long explanation of what went wrong " * 6).strip()
    res = {"clip": "sora/3", "status": "error", "reason": reason}
    buf = io.StringIO()
    print_table([summary_row(res)], out=buf, width=100)
    lines = buf.getvalue().splitlines()
    assert max(len(x) for x in lines) <= 100 and len(lines) > 3
    lead = lines[1].rfind(" ") + 1  # where the reason column starts
    text = " ".join([lines[2][lead:]] + [x.strip() for x in lines[3:]])
    assert text == reason and lines[2].startswith("sora/3")


def test_score_two_files_with_the_same_stem(shared_data: Path, tmp_path: Path, capsys):
    src = shared_data / "real" / "realshort.mp4"
    for generator in ("cogvideox", "sora"):
        (tmp_path / generator).mkdir()
        (tmp_path / generator / "3.mp4").write_bytes(src.read_bytes())
    out = tmp_path / "r.jsonl"
    rc = main(["score", str(tmp_path / "cogvideox" / "3.mp4"), str(tmp_path / "sora"),
               "--json", str(out), "--no-progress", "--preset", "background",
               "--long-side", "128", "--max-frames", "4"])
    assert rc == 0
    table = capsys.readouterr().out.splitlines()
    assert any(x.startswith("cogvideox/3 ") for x in table)
    assert any(x.startswith("sora/3 ") for x in table)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert [r["clip"] for r in rows] == ["cogvideox/3", "sora/3"]
    rc = main(["report", str(out), "--out", str(tmp_path / "rep"), "--boot", "50",
               "--cards", "2", "--no-draw"])
    assert rc == 0
    cards = list((tmp_path / "rep" / "img").glob("card_*_timeline.png"))
    assert len(cards) == 2


def test_inputs_that_are_not_what_a_command_reads(tmp_path: Path, capsys):
    """One line, exit 2, naming the problem: a JSON object that is not a result (explain), a
    binary file as results, a bad --boot / --cards / --seed, a --config-hash or --clips that
    matches nothing (report: was an empty page with exit 0), a --db that is not a store."""
    not_result = tmp_path / "truth.json"
    not_result.write_text(json.dumps({"foo": 1}))
    _fail(capsys, ["explain", str(not_result)], "is not a geocon result")
    binary = tmp_path / "masks.npz"
    binary.write_bytes(bytes(range(256)) * 4)
    _fail(capsys, ["report", str(binary), "--out", str(tmp_path / "o")], "binary data")
    results = write_jsonl(tmp_path / "r.jsonl", [fake_result("a", config_hash="cfg1"),
                                                 fake_result("b", config_hash="cfg1")])
    out = ["--out", str(tmp_path / "o"), "--no-draw"]
    for flag, value in (("--boot", "0"), ("--cards", "-1"), ("--seed", "-1")):
        with pytest.raises(SystemExit) as exc:
            main(["report", str(results), *out, flag, value])
        err = capsys.readouterr().err
        assert exc.value.code == 2 and f"argument {flag}: must be >=" in err
    _fail(capsys, ["report", str(results), *out, "--config-hash", "deadbeef"],
          "no result in")
    _fail(capsys, ["report", str(results), *out, "--clips", "a,nosuch"], "no clip 'nosuch'")
    m = tmp_path / "m.csv"
    m.write_text("path,generator\na.mp4,g\n")
    _fail(capsys, ["bench", str(m), "--db", str(m)], "cannot open result store")


def test_manifest_header_byte_order_mark_and_repeats(tmp_path: Path, capsys):
    """A CSV saved by Excel (UTF-8 byte-order mark) reads like any other; a header that
    repeats a column is an error (the last one used to win silently)."""
    from geocon_torch.bench.manifest import load_manifest

    bom = tmp_path / "bom.csv"
    bom.write_bytes("\ufeffpath,generator\nclip.mp4,genA\n".encode("utf-8"))
    rows = load_manifest(bom)
    assert [(r.generator, Path(r.path).name) for r in rows] == [("genA", "clip.mp4")]
    dup = tmp_path / "dup.csv"
    dup.write_text("path,generator,path\na.mp4,g,b.mp4\n")
    _fail(capsys, ["bench", str(dup), "--db", str(tmp_path / "r.sqlite")],
          "the header repeats column(s) path")


def test_explain_picks_a_configuration(tmp_path: Path, capsys):
    """A clip stored under two configurations: explain names them and takes --config-hash."""
    results = write_jsonl(tmp_path / "r.jsonl", [fake_result("a", config_hash="cfg1", ir=0.91),
                                                 fake_result("a", config_hash="cfg2", ir=0.99)])
    _fail(capsys, ["explain", str(results), "--clip", "a"],
          "holds it under 2 configurations (cfg1, cfg2): pick one with --config-hash")
    assert main(["explain", str(results), "--clip", "a", "--config-hash", "cfg2",
                 "--no-evidence"]) == 0
    assert "IR 0.99" in capsys.readouterr().out


def test_synth_errors_are_one_line_on_stderr(tmp_path: Path, capsys):
    """geocon synth's own checks end like every command's: one line on stderr, exit 2 (they
    were printed on stdout without the command's name)."""
    out = str(tmp_path / "s")
    with pytest.raises(SystemExit) as exc:  # a usage error, checked by argparse
        main(["synth", out, "--severity", "2"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1
    assert "argument --severity: must be a number in [0, 1]" in err[0]
    _fail(capsys, ["synth", out, "--motion", "nosuch"], "no category has motion 'nosuch'")
    assert not (tmp_path / "s").exists()


def test_strict_counts_stored_error_rows_on_a_rerun(tmp_path: Path, capsys, monkeypatch):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 3))
    db = tmp_path / "r.sqlite"
    argv = ["bench", str(m), "--db", str(db), "--no-progress", "--strict"]
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn",
                        CountingScorer(fail_on=["c1"]))
    assert main(argv) == 1
    capsys.readouterr()
    again = CountingScorer(fail_on=["c1"])
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", again)
    assert main(argv) == 1 and again.calls == []  # nothing scored, the error row is stored
    err = capsys.readouterr().err
    assert "--strict: 1 clip(s) stored with status error" in err and "c1" in err
    assert main(argv[:-1]) == 0  # without --strict error rows do not change the status
    fixed = CountingScorer()
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", fixed)
    assert main(argv + ["--retry-errors"]) == 0 and fixed.calls == ["c1"]
    assert main(argv) == 0
    with ResultStore(db) as s:  # another manifest's error row is not this manifest's
        s.put({"clip_id": "other", "generator": "m"}, "h-other", s.config_hashes()[0],
              fake_result("other", status="error", config_hash=s.config_hashes()[0]))
    assert main(argv) == 0


def test_export_only_needs_an_existing_store(tmp_path: Path, capsys):
    typo = tmp_path / "typo.sqlite"
    _fail(capsys, ["bench", "--db", str(typo), "--export-csv", str(tmp_path / "t.csv")],
          "store not found")
    assert not typo.exists() and not (tmp_path / "t.csv").exists()
    with ResultStore(tmp_path / "r.sqlite") as s:
        s.put({"clip_id": "a", "generator": "m"}, "h", "cfg", fake_result("a"))
    assert main(["bench", "--db", str(tmp_path / "r.sqlite"), "--export-csv",
                 str(tmp_path / "t.csv"), "--all-configs"]) == 0
    assert len((tmp_path / "t.csv").read_text().splitlines()) == 2


def test_explain_clip_id_with_an_identical_twin(tmp_path: Path, capsys):
    """Two clip ids with identical bytes share one result (whose "clip" is the first id):
    --clip takes the exact clip_id first."""
    rows = write_clips(tmp_path / "clips", 2)
    (tmp_path / "clips" / "twin.mp4").write_bytes(Path(rows[0]["path"]).read_bytes())
    rows.append({"clip_id": "twin", "path": str(tmp_path / "clips" / "twin.mp4"),
                 "generator": "m2"})
    db = tmp_path / "r.sqlite"
    s = run_manifest(write_jsonl(tmp_path / "m.jsonl", rows), db, score_fn=CountingScorer(),
                     progress=False)
    assert (s.computed, s.linked) == (2, 1)
    for cid in ("c0", "twin", "c1"):
        assert main(["explain", str(db), "--clip", cid, "--no-evidence"]) == 0, cid
        capsys.readouterr()


# ------------------------------------------------ audit io_cli: device, options, outputs

def _fake_scorer(calls: list):
    """A score_clips stand-in that records each call's device and returns one fake ok row."""
    from types import SimpleNamespace

    def score_clips(paths, **kw):
        calls.append(kw.get("device"))
        return [SimpleNamespace(to_dict=lambda: fake_result(Path(paths[0]).stem))]
    return score_clips


def _usage_error(capsys, argv, match: str) -> None:
    """An argparse-level usage error: SystemExit 2 and one line on stderr holding ``match``."""
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1 and match in err[0], err


def test_device_auto_is_the_default_choice(tmp_path: Path, capsys, monkeypatch):
    """--device auto (any case) passes the check and reaches the scorer as None, the choice
    made without --device (it reached torch.device("auto") and crashed with a traceback)."""
    from geocon_torch.commands._common import check_device

    assert check_device("auto") is None and check_device("AUTO") is None
    assert check_device(None) is None and check_device("cpu") == "cpu"
    calls: list = []
    monkeypatch.setattr(score_cmd, "score_clips", _fake_scorer(calls))
    assert main(["score", str(tmp_path / "a.mp4"), "--device", "auto", "--no-progress"]) == 0
    assert calls == [None]


def test_score_json_target_is_checked_before_any_clip(tmp_path: Path, capsys, monkeypatch):
    """--json OUT that cannot be written (a folder, a parent that is a file) is one line and
    exit 2 before any clip is scored (it failed after scoring them all); a missing parent
    folder is created, as before."""
    calls: list = []
    monkeypatch.setattr(score_cmd, "score_clips", _fake_scorer(calls))
    clip = str(tmp_path / "a.mp4")
    (tmp_path / "file").write_text("x")
    _fail(capsys, ["score", clip, "--json", str(tmp_path / "file" / "r.jsonl")],
          "cannot be created")
    _fail(capsys, ["score", clip, "--json", str(tmp_path)], "is a folder")
    assert calls == []
    out = tmp_path / "new" / "r.jsonl"
    assert main(["score", clip, "--json", str(out), "--no-progress"]) == 0
    assert calls == [None] and json.loads(out.read_text())["clip"] == "a"


def test_synth_fps_must_be_finite_and_positive(tmp_path: Path, capsys):
    """--fps 0 / -1 / nan / inf: a usage error before anything is written (0 left a half
    written clip behind a ZeroDivisionError; -1 and nan gave tracebacks)."""
    out = tmp_path / "s"
    for fps in ("0", "-1", "nan", "inf"):
        _usage_error(capsys, ["synth", str(out), "--frames", "2", "--size", "32x32",
                              "--category", "C1", "--fps", fps],
                     "argument --fps: must be a finite number > 0")
    assert not out.exists()


def test_synth_nonrigid_on_another_category_is_one_line(tmp_path: Path, capsys):
    """nonrigid_object on C2 only: the standard one-line error on stderr (it was "error: ..."
    on stdout, after a "skipping C2" line)."""
    out = tmp_path / "s"
    rc = main(["synth", str(out), "--frames", "2", "--size", "32x32", "--category", "C2",
               "--corruption", "nonrigid_object"])
    cap = capsys.readouterr()
    assert rc == 2 and cap.out == "" and not out.exists()
    assert cap.err.strip().splitlines() == [
        "geocon synth: error: nonrigid_object applies to C4 (moving_object) only, not C2: "
        "give --category C4 (or all)"]


def test_bench_store_timeout_is_validated(tmp_path: Path, capsys):
    """--store-timeout nan / 0 / -1 / inf: a usage error like a bad --lease-s (nan gave a
    traceback, -1 ran with a negative busy timeout)."""
    for value in ("nan", "0", "-1", "inf"):
        _usage_error(capsys, ["bench", str(tmp_path / "m.csv"), "--db",
                              str(tmp_path / "r.sqlite"), "--store-timeout", value],
                     "argument --store-timeout: must be a finite number > 0")
    assert not (tmp_path / "r.sqlite").exists()


def test_calibrate_seed_range_must_not_be_empty(tmp_path: Path, capsys):
    """--setting ...:seeds3-1 is a usage error (the empty range fell back to --seeds)."""
    import argparse

    from geocon_torch.commands.calibrate import _setting

    assert _setting("32x32x2:seeds1-3")["seeds"] == [1, 2, 3]
    assert _setting("32x32x2:seeds2")["seeds"] == [2]
    with pytest.raises(argparse.ArgumentTypeError, match="first seed is above the last"):
        _setting("32x32x2:seeds3-1")
    _usage_error(capsys, ["calibrate", str(tmp_path / "cal"), "--setting", "32x32x2:seeds3-1"],
                 "argument --setting: --setting seeds3-1: the first seed is above the last")
    assert not (tmp_path / "cal").exists()


def test_explain_an_empty_results_file(tmp_path: Path, capsys):
    """A results file with no rows says so (it asked for --clip with an empty example)."""
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    line = _fail(capsys, ["explain", str(empty)], "holds no results (0 rows)")
    assert "--clip" not in line
    _fail(capsys, ["explain", str(empty), "--clip", "a"], "holds no results")


def test_unknown_option_names_the_command(capsys):
    """``geocon score --bogus`` says ``geocon score: error: unrecognized arguments`` (it said
    ``geocon: error:``, pointing to the top-level help)."""
    from geocon_torch.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["score", "--bogus", "x.mp4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1
    assert err[0].startswith("geocon score: error: unrecognized arguments: --bogus")
    assert "see geocon score --help" in err[0]


def test_bench_export_target_is_checked_before_the_run(tmp_path, capsys):
    """``--export-csv`` naming a folder fails before any clip is scored (exit 2, one line)."""
    from geocon_torch.cli import main

    manifest = tmp_path / "m.jsonl"
    manifest.write_text(json.dumps({"clip_id": "a", "path": str(tmp_path / "none.mp4"),
                                    "generator": "g"}) + "\n")
    (tmp_path / "out").mkdir()
    code = main(["bench", str(manifest), "--db", str(tmp_path / "r.sqlite"),
                 "--export-csv", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "--export-csv" in err[0] and "folder" in err[0]
    assert not (tmp_path / "r.sqlite").exists()  # nothing was scored or stored


def test_bench_incomplete_run_prints_its_summary_and_exits_1(tmp_path: Path, capsys,
                                                             monkeypatch):
    """A run that ends with a manifest clip unstored (its row deleted while the run went on, as
    a concurrent prune would) is not a usage error: the summary line of what was scored, the
    export and the missing ids, exit 1; the same command then scores exactly what is missing."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 4))
    db, csv = tmp_path / "r.sqlite", tmp_path / "t.csv"

    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn",
                        PruningScorer(db, at="c2", victim="c0"))
    argv = ["bench", str(m), "--db", str(db), "--no-progress", "--export-csv", str(csv)]
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out.startswith("geocon bench: 4 clips on 1 rank(s): 4 scored (4 ok, ") and \
        f"wrote {csv}" in out
    assert err.startswith("geocon bench: error: ") and len(err.strip().splitlines()) == 1
    assert "1 of the 4 clips of the manifest have no stored row" in err and ": c0; " in err
    assert len(csv.read_text().strip().splitlines()) == 1 + 3  # header + the stored clips
    again = CountingScorer()
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", again)
    assert main(argv) == 0 and capsys.readouterr().err == ""
    assert len(csv.read_text().strip().splitlines()) == 1 + 4
