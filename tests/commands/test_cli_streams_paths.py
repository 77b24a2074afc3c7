"""Output streams, exit statuses and real users' path values of the ``geocon`` CLI (audit s22 /
cli, F1 and F3-F9): file names that are not UTF-8, ``--json -`` of demo, empty path values,
``| head`` (a reader that goes away), Ctrl-C while the parser is built, ``~`` in CLI paths,
wide clip ids in the table, ``--clip=-id``, and the exit statuses every ``--help`` states. The
CLI runs in-process through ``geocon_torch.cli.main``; the scorers are replaced (no video is
scored), except in the slow subprocess test of a closed pipe."""
from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import List

import numpy as np
import pytest

from geocon_torch import cli
from geocon_torch.bench.runner import RunSummary
from geocon_torch.cli import build_parser, main
from geocon_torch.commands import _common
from geocon_torch.commands import demo as demo_cmd
from geocon_torch.commands import explain as explain_cmd
from geocon_torch.errors import InputError

from helpers import REPO_ROOT

LATIN1_NAME = "caf\udce9"  # b"caf\xe9" (latin-1 "café") as Python decodes a file name
COMMANDS = ("bench", "calibrate", "demo", "explain", "merge", "pairs", "prune", "report",
            "score", "synth")

#: (module, attribute) of each command's work: replaced by a stand-in that fails the test
WORK = (("score", "score_clips"), ("demo", "render_scene"), ("synth", "render_scene"),
        ("report", "build_report"), ("calibrate", "run_calibration"), ("bench", "run_manifest"),
        ("pairs", "preference_pairs"), ("merge", "merge_stores"), ("prune", "prune_store"),
        ("explain", "score_clip"), ("explain", "load_one_result"))


def _no_work(monkeypatch) -> List[str]:
    """Replace every command's work by a stand-in that records its name and fails."""
    calls: List[str] = []
    for module, name in WORK:
        def work(*args, _name=f"{module}.{name}", **kwargs):
            calls.append(_name)
            raise AssertionError(f"{_name} ran: the path value was not refused first")
        monkeypatch.setattr(f"geocon_torch.commands.{module}.{name}", work)
    return calls


class _Row:
    """A score_clips result stand-in."""

    def __init__(self, row: dict):
        self.row = row

    def to_dict(self) -> dict:
        return dict(self.row)


def _fake_pairs(monkeypatch, n: int = 2) -> None:
    """``geocon pairs`` without scoring: ``n`` records, a fixed summary."""
    records = [{"status": "pair", "prompt": f"p{i}", "margin": 0.5} for i in range(n)]
    summary = RunSummary(computed=n, skipped=0, linked=0)
    monkeypatch.setattr("geocon_torch.commands.pairs.preference_pairs",
                        lambda *a, **k: (records, summary))


# ------------------------------------------------------------------ F1: names not in UTF-8

def test_a_strict_utf8_stdout_prints_a_non_utf8_file_name_escaped(tmp_path: Path, monkeypatch):
    """Under an ordinary UTF-8 locale stdout is errors="strict": ``wrote caf\\udce9.jsonl``
    raised UnicodeEncodeError after the work (a traceback, exit 1). Now the name is escaped,
    exit 0, and the caller's stream is strict again afterwards."""
    _fake_pairs(monkeypatch)
    raw = io.BytesIO()
    stdout = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stdout", stdout)
    out = tmp_path / f"{LATIN1_NAME}.jsonl"
    assert main(["pairs", "m.csv", "--db", "r.sqlite", "--out", str(out)]) == 0
    assert raw.getvalue().decode("ascii").endswith(f"wrote {tmp_path}/caf\\udce9.jsonl\n")
    assert len(out.read_text().splitlines()) == 2
    assert stdout.errors == "strict"


def test_a_strict_stderr_prints_an_error_line_naming_a_non_utf8_file(tmp_path: Path,
                                                                      monkeypatch):
    """The one line of a user error may name such a file too (it raised in the handler)."""
    raw = io.BytesIO()
    stderr = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", write_through=True)
    monkeypatch.setattr(sys, "stderr", stderr)
    assert main(["explain", str(tmp_path / f"{LATIN1_NAME}.json")]) == 2
    assert raw.getvalue().decode("ascii") == (f"geocon explain: error: not found: "
                                              f"{tmp_path}/caf\\udce9.json\n")
    assert stderr.errors == "strict"


def test_score_refuses_a_non_utf8_clip_path_before_scoring(tmp_path: Path, monkeypatch,
                                                           capsys):
    """A folder holding ``caf\\xe9.mp4``: exit 2 with one line naming the file, as a manifest
    path is refused (it was scored, and its JSONL line was refused by report / explain)."""
    calls = _no_work(monkeypatch)
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / f"{LATIN1_NAME}.mp4").write_bytes(b"x")
    (tmp_path / "v" / "ok.mp4").write_bytes(b"x")
    out = tmp_path / "r.jsonl"
    assert main(["score", str(tmp_path / "v"), "--json", str(out), "--no-progress"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"geocon score: error: clip {tmp_path}/v/caf\\udce9.mp4 is not UTF-8 text "
                   f"(\\udce9 at character {len(str(tmp_path)) + 6}: a file or folder name in "
                   "another encoding?), which no result store can keep; rename it in UTF-8"]
    assert calls == [] and not out.exists()


def test_score_refuses_non_utf8_masks_and_demo_out(tmp_path: Path, monkeypatch, capsys):
    """--masks (its name can reach a reason) and demo --out (the results keep the clips'
    paths in it) are checked the same way, before any work."""
    calls = _no_work(monkeypatch)
    clip = tmp_path / "a.mp4"
    clip.write_bytes(b"x")
    assert main(["score", str(clip), "--masks", str(tmp_path / LATIN1_NAME)]) == 2
    assert "error: --masks " in capsys.readouterr().err
    assert main(["demo", "--out", str(tmp_path / LATIN1_NAME), "--no-progress"]) == 2
    assert "error: --out " in capsys.readouterr().err
    assert calls == []


# ------------------------------------------------------------------ F3: demo --json -

def _fake_demo(monkeypatch) -> None:
    """``geocon demo`` without rendering or scoring: one ok row per scene."""
    def render_scene(cat, num_frames, size, seed, **kw):
        def save(folder):
            (Path(folder) / "x.json").write_text("{}")
        return SimpleNamespace(clip_id=None, masks=np.zeros((num_frames, 0)), save=save)

    def score_clips(paths, **kw):
        return [_Row({"clip": Path(paths[0]).stem, "status": "ok", "score": 0.75,
                      "background": {"ir": 1.0}})]
    monkeypatch.setattr(demo_cmd, "render_scene", render_scene)
    monkeypatch.setattr(demo_cmd, "score_clips", score_clips)


def test_demo_json_to_stdout_keeps_the_table_on_stderr(tmp_path: Path, monkeypatch, capsys):
    """``geocon demo --json - > out.jsonl`` parses: the table and the "clips in" line go to
    stderr (they started stdout, so the first line was no JSON)."""
    _fake_demo(monkeypatch)
    assert main(["demo", "--out", str(tmp_path / "d"), "--json", "-", "--no-progress"]) == 0
    cap = capsys.readouterr()
    rows = [json.loads(line) for line in cap.out.splitlines()]
    assert [r["clip"] for r in rows] == [name for name, *_ in demo_cmd.SCENES]
    assert [r["score"] for r in rows] == [0.75] * 4
    assert cap.err.startswith("clip ") and f"clips in {tmp_path}/d/clips" in cap.err
    assert main(["demo", "--out", str(tmp_path / "d"), "--no-progress"]) == 0
    assert capsys.readouterr().out.startswith("clip ")  # without "-": stdout as before


# ------------------------------------------------------------------ F4: empty path values

EMPTY_PATHS = [
    ["score", ""], ["score", "a.mp4", "--json", ""], ["score", "a.mp4", "--masks", ""],
    ["score", "a.mp4", "--poses", ""], ["score", "a.mp4", "--config", ""],
    ["demo", "--out", ""], ["demo", "--json", ""],
    ["report", "", "--out", "rep"], ["report", "r.jsonl", "--out", ""],
    ["synth", ""], ["calibrate", ""], ["calibrate", "cal", "--refit", ""],
    ["bench", "", "--db", "s.sqlite"], ["bench", "m.csv", "--db", ""],
    ["bench", "m.csv", "--db", "s.sqlite", "--export-csv", ""],
    ["bench", "m.csv", "--db", "s.sqlite", "--export-parquet", ""],
    ["pairs", "", "--db", "s.sqlite", "--out", "p.jsonl"],
    ["pairs", "m.csv", "--db", "", "--out", "p.jsonl"],
    ["pairs", "m.csv", "--db", "s.sqlite", "--out", ""],
    ["pairs", "m.csv", "--db", "s.sqlite", "--out", "p.jsonl", "--config", ""],
    ["merge", "", "a.sqlite"], ["merge", "o.sqlite", ""],
    ["merge", "o.sqlite", "a.sqlite", "--conflicts", ""],
    ["prune", "--db", "", "--orphans"], ["prune", "--db", "s.sqlite", "--keep-manifest", ""],
    ["explain", ""], ["explain", "r.jsonl", "--masks", ""], ["explain", "r.jsonl", "--poses", ""],
]


@pytest.mark.parametrize("argv", EMPTY_PATHS, ids=lambda a: " ".join(a).replace('""', "''"))
def test_an_empty_path_value_is_a_usage_error_before_any_work(argv, tmp_path: Path,
                                                               monkeypatch, capsys):
    """``--json "$OUT"`` with OUT unset was "no output" (exit 0), ``score ""`` scored the
    current folder, ``report --out ""`` replaced ./index.html, ``pairs --out ""`` failed after
    scoring: now one line, exit 2, before any work, nothing written."""
    calls = _no_work(monkeypatch)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exc:
        main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert exc.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"geocon {argv[0]}: error: argument ")
    assert ": the path is empty (an unset shell variable?): give a file or folder" in err[0]
    assert calls == [] and list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------ F5: | head

def test_a_closed_stdout_ends_quietly_with_141(monkeypatch, capsys):
    """``geocon pairs ... --out - | head -1``: BrokenPipeError was a traceback and exit 1
    (score's "some clip is an error"); now no line on stderr and 128 + SIGPIPE."""
    _fake_pairs(monkeypatch)

    class ClosedPipe(io.StringIO):
        def write(self, text):
            raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(sys, "stdout", ClosedPipe())
    assert main(["pairs", "m.csv", "--db", "r.sqlite", "--out", "-"]) == 141
    assert capsys.readouterr().err == ""


@pytest.mark.slow
def test_a_real_pipe_closed_by_its_reader_ends_quietly_with_141(tmp_path: Path):
    """The real thing in a subprocess: stdout is a pipe whose reader closed it; exit 141,
    nothing on stderr (no traceback, no "Exception ignored" at the interpreter's exit)."""
    script = tmp_path / "run.py"
    script.write_text(textwrap.dedent("""
        import sys
        from types import SimpleNamespace
        from geocon_torch.cli import main
        records = [{"status": "pair", "prompt": "p%d" % i} for i in range(50000)]
        from geocon_torch.bench.runner import RunSummary
        summary = RunSummary(computed=0, skipped=0, linked=0)
        import geocon_torch.commands.pairs as pairs
        pairs.preference_pairs = lambda *a, **k: (records, summary)
        sys.exit(main(["pairs", "m.csv", "--db", "r.sqlite", "--out", "-"]))
    """))
    read, write = os.pipe()
    os.close(read)  # the reader (head) is gone before the first line
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.run([sys.executable, str(script)], stdout=write, stderr=subprocess.PIPE,
                          env=env, timeout=300)
    os.close(write)
    assert proc.returncode == 141 and proc.stderr == b"", proc.stderr.decode()


# ------------------------------------------------------------------ F6: Ctrl-C at start-up

def test_ctrl_c_while_the_parser_is_built_is_one_line_130(monkeypatch, capsys):
    """Building the parser imports every command (a second or more on a loaded machine):
    Ctrl-C there was a KeyboardInterrupt traceback."""
    def interrupted():
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    try:
        rc = main(["score", "a.mp4"])
    except KeyboardInterrupt:  # (pytest would take it for a Ctrl-C of its own)
        pytest.fail("KeyboardInterrupt escaped main: a traceback")
    assert rc == 130
    assert capsys.readouterr().err == "geocon: interrupted\n"
    with pytest.raises(KeyboardInterrupt):  # --debug: the traceback, as for a command
        main(["--debug", "score", "a.mp4"])


# ------------------------------------------------------------------ F7: ~ in CLI paths

def test_tilde_is_expanded_in_every_cli_path(tmp_path: Path, monkeypatch):
    """``geocon score '~/h.mp4' --json=~/t.jsonl`` (a shell leaves ``~`` after ``=``) read
    ``./~/h.mp4`` and wrote a folder named ``~`` in the current one; a manifest line ``~/h.mp4``
    was already expanded. Every CLI path value now is; "-", URLs and libpq strings stay."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    parsed = {
        ("score", "~/a.mp4", "--json=~/t.jsonl", "--masks", "~/m", "--poses", "~/p",
         "--config", "~/c.json"): ("paths", "json", "masks", "poses", "config"),
        ("bench", "~/m.csv", "--db", "~/s.sqlite", "--export-csv", "~/t.csv",
         "--export-parquet", "~/t.parquet"): ("manifest", "db", "export_csv", "export_parquet"),
        ("pairs", "~/m.csv", "--db", "~/s.sqlite", "--out", "~/p.jsonl", "--config", "~/c"):
            ("manifest", "db", "out", "config"),
        ("merge", "~/o.sqlite", "~/a.sqlite", "--conflicts", "~/c.jsonl"):
            ("out", "shards", "conflicts"),
        ("prune", "--db", "~/s.sqlite", "--keep-manifest", "~/m.csv"): ("db", "keep_manifest"),
        ("report", "~/r.jsonl", "--out", "~/rep"): ("results", "out"),
        ("explain", "~/r.jsonl", "--masks", "~/m", "--poses", "~/p"): ("source", "masks",
                                                                       "poses"),
        ("synth", "~/s"): ("outdir",), ("calibrate", "~/c", "--refit", "~/c.json"):
            ("outdir", "refit"),
        ("demo", "--out", "~/d", "--json", "~/d.jsonl"): ("out", "json"),
    }
    for argv, dests in parsed.items():
        args = build_parser().parse_args(list(argv))
        for dest in dests:
            values = getattr(args, dest)
            for value in values if isinstance(values, list) else [values]:
                assert value.startswith(f"{home}/"), (argv, dest, value)
    keep = build_parser().parse_args(["bench", "--db", "postgresql://u@h/db", "--export-csv",
                                      "-"])
    assert (keep.db, keep.export_csv) == ("postgresql://u@h/db", "-")


def test_score_reads_and_writes_tilde_paths_under_home(tmp_path: Path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    (home / "h.mp4").write_bytes(b"x")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    seen = []

    def score_clips(paths, **kw):
        seen.extend(paths)
        return [_Row({"clip": "h", "status": "ok", "score": 0.5}) for _ in paths]
    monkeypatch.setattr("geocon_torch.commands.score.score_clips", score_clips)
    assert main(["score", "~/h.mp4", "--json=~/t.jsonl", "--no-progress"]) == 0
    assert seen == [str(home / "h.mp4")]
    assert json.loads((home / "t.jsonl").read_text())["score"] == 0.5
    assert not (tmp_path / "~").exists()


# ------------------------------------------------------------------ F8: wide ids, --clip=-id

def test_the_table_pads_wide_clip_ids_by_terminal_columns():
    """卡车 takes 4 terminal columns in 2 code points: the columns after it shifted left by 2;
    a decomposed "é" (e + combining accent, macOS file names) takes 1 column in 2."""
    buf = io.StringIO()
    rows = [["pan", "ok", "0.799"], ["卡车", "ok", "0.905"], ["cafe\u0301", "ok", "0.5"]]
    _common.print_table(rows, header=("clip", "status", "score"), out=buf, width=100)
    lines = buf.getvalue().splitlines()
    assert lines[0] == "clip  status  score"
    assert lines[2:] == ["pan   ok      0.799", "卡车  ok      0.905",
                         "cafe\u0301  ok      0.5"]
    starts = {_common.display_width(line[:line.index("ok")]) for line in lines[2:]}
    assert starts == {6}
    assert [_common.display_width(t) for t in ("abc", "卡车", "ＡＢ", "cafe\u0301")] == [3, 4, 4, 4]


def test_explain_suggests_clip_equals_for_an_id_starting_with_a_dash():
    """``--clip -dash`` is an option to argparse ("expected one argument"): the message shows
    ``--clip=ID`` (shell-quoted), which works for every id."""
    rows = [{"clip_id": "-dash"}, {"clip_id": "pan"}, {"clip_id": "my clip"}]
    with pytest.raises(InputError) as exc:
        explain_cmd._pick(rows, None, Path("r.jsonl"))
    assert str(exc.value) == ("r.jsonl holds 3 clips: pick one with --clip=ID (e.g. "
                              "--clip=-dash, --clip=pan, '--clip=my clip')")
    assert build_parser().parse_args(["explain", "r.jsonl", "--clip=-dash"]).clip == "-dash"


# ------------------------------------------------------------------ F9: exit statuses

@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_help_states_its_exit_status(command, capsys):
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())  # the description's lines joined
    assert exc.value.code == 0 and "Exit status" in out
    assert "2 for a user error" in out or "exit status 2" in out


def test_geocon_without_a_command_prints_its_help_on_stderr(capsys):
    """Exit 2 is a usage error: the help goes to stderr as argparse's usage errors do (it
    went to stdout); it lists the exit statuses of every command."""
    assert main([]) == 2
    cap = capsys.readouterr()
    assert cap.out == "" and cap.err.startswith("usage: geocon ")
    assert "141  the reader of stdout went away" in cap.err
    assert all(f"\n    {c}" in cap.err for c in COMMANDS)
