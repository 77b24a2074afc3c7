"""``-`` as an output and the summary table in a pipe (audit s31 / cliscript, F1 and F2).

F1: ``bench --export-csv -``, ``--export-parquet -`` and ``merge --conflicts -`` passed the
up-front output check as "stdout" but wrote a file named ``-`` (bench printed ``wrote -``,
exit 0). Now the text outputs stream to stdout (which then holds only them: summaries and
notes go to stderr) and the binary Parquet refuses ``-`` (exit 2, one line); the shared check
refuses ``-`` unless the option says it streams. F2: with stdout a pipe and COLUMNS unset the
reason column was wrapped to ~16-20 characters and a clip's path was cut mid-word, so a grep
of a CI log for the failing clip found nothing. The CLI runs in-process through
``geocon_torch.cli.main`` on tiny stores of fake results (no video is scored), except the
one subprocess test of a real pipe."""
from __future__ import annotations

import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from geocon_torch.bench import ResultStore
from geocon_torch.cli import main
from geocon_torch.commands import _common
from geocon_torch.errors import InputError

from helpers import CountingScorer, fake_result, write_clips, write_jsonl


def _store(path: Path, ir: float = 0.98) -> Path:
    """A SQLite store of two fake clips (config hash "cfg")."""
    with ResultStore(path) as s:
        for cid in ("a", "b"):
            s.put({"clip_id": cid, "generator": "m"}, f"h{cid}", "cfg",
                  fake_result(cid, ir=ir if cid == "a" else 0.98))
    return path


def _one_error_line(capsys, command: str) -> str:
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert out == "" and len(lines) == 1 and "Traceback" not in err, (out, err)
    assert lines[0].startswith(f"geocon {command}: error: "), lines
    return lines[0]


# ------------------------------------------------------------------ F1: "-" as an output

def test_bench_export_csv_dash_streams_the_table_to_stdout(tmp_path: Path, monkeypatch,
                                                           capsys):
    monkeypatch.chdir(tmp_path)
    _store(tmp_path / "r.sqlite")
    with ResultStore(tmp_path / "r.sqlite") as s:  # the file export, to compare
        s.export_csv(tmp_path / "t.csv", None)
    capsys.readouterr()
    assert main(["bench", "--db", "r.sqlite", "--all-configs", "--export-csv", "-"]) == 0
    out, err = capsys.readouterr()
    rows = list(csv.DictReader(io.StringIO(out, newline="")))
    assert [r["clip_id"] for r in rows] == ["a", "b"]
    assert out == (tmp_path / "t.csv").read_bytes().decode()  # the file's bytes, nothing else
    assert "wrote" not in out and err == ""
    assert not (tmp_path / "-").exists()


def test_bench_run_with_export_csv_dash_puts_its_summary_on_stderr(tmp_path: Path,
                                                                    monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", CountingScorer())
    assert main(["bench", str(m), "--db", "r.sqlite", "--no-progress", "--export-csv", "-",
                 "--export-parquet", "t.parquet"]) in (0, 2)  # 2: no pyarrow here
    out, err = capsys.readouterr()
    assert [r["clip_id"] for r in csv.DictReader(io.StringIO(out, newline=""))] == ["c0", "c1"]
    assert "2 clips on 1 rank(s)" in err and "geocon bench:" not in out
    if (tmp_path / "t.parquet").exists():
        assert "wrote t.parquet" in err
    assert not (tmp_path / "-").exists()


def test_bench_export_parquet_dash_is_refused_before_any_work(tmp_path: Path, monkeypatch,
                                                              capsys):
    monkeypatch.chdir(tmp_path)
    _store(tmp_path / "r.sqlite")
    capsys.readouterr()
    for argv in (["--export-parquet", "-"], ["--export-csv", "t.csv", "--export-parquet", "-"]):
        assert main(["bench", "--db", "r.sqlite", "--all-configs", *argv]) == 2
        line = _one_error_line(capsys, "bench")
        assert "--export-parquet -:" in line and "give a file" in line, line
    assert not (tmp_path / "-").exists() and not (tmp_path / "t.csv").exists()


def test_merge_conflicts_dash_streams_json_lines_to_stdout(tmp_path: Path, monkeypatch,
                                                           capsys):
    monkeypatch.chdir(tmp_path)
    _store(tmp_path / "n0.sqlite", ir=0.91)
    _store(tmp_path / "n1.sqlite", ir=0.93)  # clip a: the same key, another result
    capsys.readouterr()
    assert main(["merge", "all.sqlite", "n0.sqlite", "n1.sqlite", "--conflicts", "-"]) == 1
    out, err = capsys.readouterr()
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 1 and rows[0]["content_hash"] == "ha"
    assert rows[0]["differences"]["background.ir"] == [0.91, 0.93]
    assert "geocon merge: 2 shard(s)" in err and "conflict" in err
    assert not (tmp_path / "-").exists()


def test_only_streaming_options_take_dash():
    """The rule is one place: check_output_file refuses "-" unless the option streams."""
    with pytest.raises(InputError, match=r"^--out -: .*give a file"):
        _common.check_output_file("-", "--out")
    _common.check_output_file("-", "--json", allow_stdout=True)


# ------------------------------------------------------------------ F2: the table in a pipe

LONG = "/tmp/tmp6twzb4lb/some_generated_clip_0001-of-the-night-run.mp4"


def test_table_to_a_stream_that_is_no_terminal_keeps_the_reason_on_one_line(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)
    reason = f"VideoReadError: {LONG}: no such file (checked twice, with a long tail of text)"
    buf = io.StringIO()
    _common.print_table([_common.summary_row({"clip": "c", "status": "error",
                                              "reason": reason})], out=buf)
    lines = buf.getvalue().splitlines()
    assert len(lines) == 3 and lines[2].endswith(reason)


def test_a_narrow_table_never_breaks_a_path():
    buf = io.StringIO()
    _common.print_table([_common.summary_row({"clip": "c", "status": "error",
                                              "reason": f"VideoReadError: {LONG}: gone"})],
                        out=buf, width=100)
    assert any(LONG in line for line in buf.getvalue().splitlines()), buf.getvalue()


def test_score_table_in_a_pipe_keeps_the_failing_path_whole(tmp_path: Path):
    missing = tmp_path / "some_generated_clip_0001_of_a_long_night_run.mp4"
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "geocon_torch.cli", "score", str(missing),
                           "--no-progress"], capture_output=True, text=True, env=env,
                          timeout=120)
    assert proc.returncode == 1, proc.stderr
    assert any(str(missing) in line for line in proc.stdout.splitlines()), proc.stdout
