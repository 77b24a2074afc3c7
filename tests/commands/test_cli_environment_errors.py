"""Errors of the environment (audit s25 "iofail": a full disk, a read-only file system, an I/O
error) while a command writes its output: one line ``geocon <command>: error: <strerror>:
<path>`` naming the real output (never the hidden temporary of an atomic write), exit status 2,
no partial file; ``score --json OUT`` opens OUT at its first line and cuts a failed write back
to its last complete line; a results file whose last line was cut off by such a write is read
without that line (a warning naming it).

Full disks are simulated by monkeypatched writes raising ``OSError(errno.ENOSPC, ...)`` as
the system does (a partial write first, then the error, naming no file)."""
from __future__ import annotations

import errno
import json
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Dict, List

import av
import pytest
from helpers import cli_error_line, fake_result, write_jsonl

from geocon_torch import __version__
from geocon_torch.bench.store import load_results
from geocon_torch.cli import is_user_error, main
from geocon_torch.commands import _common
from geocon_torch.commands import score as score_cmd
from geocon_torch.commands._common import check_output_dir, check_output_file
from geocon_torch.errors import InputError
from geocon_torch.io._atomic import atomic_output, atomic_write_text

DATA = Path(__file__).resolve().parents[2] / "geocon_torch" / "data" / "calibration"
ENOSPC = os.strerror(errno.ENOSPC)  # "No space left on device"
SCORE = ["--no-progress", "--device", "cpu", "--preset", "background"]


def _refit_source(tmp_path: Path) -> str:
    """A calibration file to refit from (its scores kept: nothing rendered or scored)."""
    doc = json.loads((DATA / "opencv-sift.json").read_text())
    doc["score_config_hash"] = None  # the plan and rows as they are (no rescoring here)
    doc["version"] = __version__  # no "scored by another version" warning
    path = tmp_path / "source.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _full_disk() -> OSError:
    """The error a write to a full disk raises (it names no file)."""
    return OSError(errno.ENOSPC, ENOSPC)


_error_line = cli_error_line


def _names(folder: Path) -> List[str]:
    """Every file name under ``folder`` (hidden temporaries included), sorted."""
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())


# ------------------------------------------------------ finding 2: one line, exit status 2

def test_environment_oserrors_are_user_errors_and_bugs_keep_their_traceback():
    """Any OSError with an errno (ENOSPC, EROFS, EDQUOT, EIO, PyAV's) is the environment's
    doing; an OSError without one and other exception types stay bugs."""
    for code in (errno.ENOSPC, errno.EROFS, errno.EDQUOT, errno.EIO):
        assert is_user_error(OSError(code, os.strerror(code)))
    assert is_user_error(av.error.OSError(errno.ENOSPC, ENOSPC, "x.mp4"))
    assert not is_user_error(OSError("cannot identify image file"))
    assert not is_user_error(RuntimeError("a bug"))
    assert not is_user_error(TypeError("a bug"))


def test_a_bug_oserror_keeps_its_traceback(tmp_path: Path, monkeypatch):
    """An OSError made with a bare message (no errno) is a bug: it goes on out of main."""
    def boom(*args: Any, **kwargs: Any) -> None:
        raise OSError("a bug")
    monkeypatch.setattr("geocon_torch.commands.calibrate.run_calibration", boom)
    with pytest.raises(OSError, match="a bug"):
        main(["calibrate", str(tmp_path / "cal"), "--refit", _refit_source(tmp_path)])


def test_calibrate_on_a_full_disk_is_one_line_naming_calibration_json(tmp_path: Path, capsys,
                                                                       monkeypatch):
    """calibrate --refit whose calibration.json write fails (ENOSPC): one line naming
    OUTDIR/calibration.json (not its hidden temporary), exit 2, nothing left in OUTDIR (it
    was a traceback and exit status 1)."""
    monkeypatch.setattr("geocon_torch.bench.calibration.plot_roc", lambda *a, **k: [])
    real = Path.write_text

    def write_text(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self.name.startswith(".calibration.partial-"):
            real(self, data[: len(data) // 3], *args, **kwargs)  # what fitted, then the error
            raise _full_disk()
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    out = tmp_path / "cal"
    line = _error_line(capsys, ["calibrate", str(out), "--refit", _refit_source(tmp_path)])
    assert line == f"geocon calibrate: error: {ENOSPC}: {out / 'calibration.json'}"
    assert _names(out) == []


def test_atomic_output_names_the_real_file_not_the_temporary(tmp_path: Path):
    """Whatever the write's OSError named (the temporary, nothing, or both the temporary and
    the real file for os.replace), it names the output as the caller gave it; an error about
    another file keeps its name; PyAV's error (a read-only filename) becomes an OSError of the
    same errno."""
    out = tmp_path / "sub" / "x.mp4"
    out.parent.mkdir()
    makers = [lambda tmp: _full_disk(),
              lambda tmp: OSError(errno.EIO, os.strerror(errno.EIO), str(tmp)),
              lambda tmp: OSError(errno.EXDEV, "Invalid cross-device link", str(tmp), None,
                                  str(out)),
              lambda tmp: av.error.OSError(errno.ENOSPC, ENOSPC, str(tmp))]
    for make in makers:
        with pytest.raises(OSError) as exc:
            with atomic_output(out) as tmp:
                tmp.write_bytes(b"part")
                raise make(tmp)
        assert (exc.value.filename, exc.value.filename2) == (str(out), None), exc.value
        assert exc.value.errno in (errno.ENOSPC, errno.EIO, errno.EXDEV)
        assert _names(out.parent) == []
    with pytest.raises(FileNotFoundError) as missing:
        with atomic_output(out):
            open(tmp_path / "input.json")
    assert missing.value.filename == str(tmp_path / "input.json")


def test_synth_video_on_a_full_disk_names_the_mp4(tmp_path: Path, capsys, monkeypatch):
    """synth: PyAV's av.error.OSError naming the hidden ``.<stem>.partial-...mp4`` becomes
    one line naming OUTDIR/<clip>.mp4, exit 2 (it was a traceback and exit status 1)."""
    def full(path: Any, *args: Any, **kwargs: Any) -> None:  # PyAV's muxer on a full disk
        Path(path).write_bytes(b"part")
        raise av.error.OSError(errno.ENOSPC, ENOSPC, str(path))

    monkeypatch.setattr(av, "open", full)  # as geocon_torch.io.writer calls it
    out = tmp_path / "syn"
    line = _error_line(capsys, ["synth", str(out), "--category", "C2", "--frames", "4",
                                "--size", "64x48", "--no-progress"])
    assert line.startswith(f"geocon synth: error: {ENOSPC}: {out}{os.sep}"), line
    assert line.endswith(".mp4") and ".partial-" not in line, line
    assert not [n for n in _names(out) if n.startswith(".") or ".partial-" in n]


# --------------------------------------------------- finding 3: score --json OUT streaming

def _fake_groups(monkeypatch, stop_at: int = -1) -> List[int]:
    """score's groups scored by a stand-in (no video decoded): one row per clip, ``stop_at``
    (0-based group) raises KeyboardInterrupt. Returns the group sizes seen."""
    seen: List[int] = []

    def score_group(group, args, cfg, n_clips) -> List[Dict[str, Any]]:
        if len(seen) == stop_at:
            raise KeyboardInterrupt
        seen.append(len(group))
        return [dict(fake_result(cid), clip=cid) for _, cid in group]

    monkeypatch.setattr(score_cmd, "_score_group", score_group)
    monkeypatch.setattr(score_cmd, "GROUP_CLIPS", 2)
    return seen


def _clips(folder: Path, n: int) -> List[str]:
    """``n`` files named like videos (the stand-in scorer never reads them)."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        (folder / f"c{i}.mp4").write_bytes(b"not read")
        paths.append(str(folder / f"c{i}.mp4"))
    return paths


class _FillingFile:
    """A raw file that takes ``room`` bytes in all, then writes part of a line and raises
    ENOSPC as a full disk does."""

    def __init__(self, fh: Any, room: int) -> None:
        self.fh, self.room = fh, room

    def write(self, data: Any) -> int:
        if self.room <= 0:
            raise _full_disk()
        n = self.fh.write(data[: self.room])
        self.room -= n
        return n

    def __getattr__(self, name: str) -> Any:
        return getattr(self.fh, name)


def test_score_json_on_a_full_disk_keeps_the_complete_lines(tmp_path: Path, capsys,
                                                           monkeypatch):
    """The disk fills up in the middle of the third line: one line naming OUT, exit 2, and
    OUT holds the two complete lines (it was a traceback, exit 1 and half a line that made
    the whole file unreadable to geocon report)."""
    _fake_groups(monkeypatch)
    line_bytes = len(_common.json_line(dict(fake_result("c0"), clip="c0")))
    real_open = open

    def filling_open(path: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
        return _FillingFile(real_open(path, mode, *args, **kwargs), 2 * line_bytes + 100)

    monkeypatch.setattr(_common, "open", filling_open, raising=False)
    out = tmp_path / "r.jsonl"
    line = _error_line(capsys, ["score", *_clips(tmp_path / "v", 4), "--json", str(out),
                                *SCORE])
    assert line == f"geocon score: error: {ENOSPC}: {out}"
    text = out.read_text()
    assert text.endswith("\n") and len(text) == 2 * line_bytes
    assert [json.loads(x)["clip"] for x in text.splitlines()] == ["c0", "c1"]


def test_score_json_opens_out_at_its_first_line(tmp_path: Path, capsys, monkeypatch):
    """A run stopped before its first group is scored leaves the previous OUT as it was (it
    was emptied at the start); one stopped in its second group keeps the first group's lines
    (streamed, as documented); a finished run replaces OUT."""
    out = tmp_path / "r.jsonl"
    old = "".join(_common.json_line(dict(fake_result(c), clip=c)) for c in ("old1", "old2"))
    out.write_text(old)
    clips = _clips(tmp_path / "v", 4)
    _fake_groups(monkeypatch, stop_at=0)
    assert main(["score", *clips, "--json", str(out), *SCORE]) == 130
    assert out.read_text() == old
    _fake_groups(monkeypatch, stop_at=1)
    assert main(["score", *clips, "--json", str(out), *SCORE]) == 130
    assert [json.loads(x)["clip"] for x in out.read_text().splitlines()] == ["c0", "c1"]
    seen = _fake_groups(monkeypatch)
    assert main(["score", *clips, "--json", str(out), *SCORE]) == 0
    assert seen == [2, 2]
    assert [json.loads(x)["clip"] for x in out.read_text().splitlines()] == [
        "c0", "c1", "c2", "c3"]
    capsys.readouterr()


def test_jsonl_lines_of_a_run_that_wrote_nothing_leaves_an_empty_file(tmp_path: Path):
    """A run that ends normally without a line empties OUT (no stale results left behind)."""
    out = tmp_path / "r.jsonl"
    out.write_text('{"old": 1}\n')
    with _common.jsonl_lines(str(out)):
        pass
    assert out.read_bytes() == b""


# ------------------------------------------------- finding 2: report on a full disk

def test_report_on_a_full_disk_is_one_line_naming_the_page(tmp_path: Path, capsys,
                                                          monkeypatch):
    """report whose index.html write fails (ENOSPC): one line naming OUT/index.html, exit 2,
    no page and no temporary left."""
    results = write_jsonl(tmp_path / "r.jsonl", [fake_result(f"c{i}") for i in range(4)])
    real = Path.write_text

    def write_text(self: Path, data: str, *args: Any, **kwargs: Any) -> int:
        if self.suffix == ".html":
            raise _full_disk()
        return real(self, data, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    out = tmp_path / "rep"
    line = _error_line(capsys, ["report", str(results), "--out", str(out), "--no-draw",
                                "--boot", "20", "--no-progress"])
    assert line == f"geocon report: error: {ENOSPC}: {out / 'index.html'}"
    assert not [n for n in _names(out) if n.endswith(".html") or ".partial-" in n]


def test_report_figure_on_a_full_disk_names_the_png(tmp_path: Path, capsys, monkeypatch):
    """report whose first figure fails half-written (ENOSPC): one line naming that PNG, exit
    2, no partial image and no temporary left (savefig wrote the real name)."""
    pytest.importorskip("matplotlib")
    from matplotlib.figure import Figure
    results = write_jsonl(tmp_path / "r.jsonl", [fake_result(f"c{i}") for i in range(4)])

    def savefig(self, fname, *args: Any, **kwargs: Any) -> None:
        Path(fname).write_bytes(b"\x89PNG partial")
        raise OSError(errno.ENOSPC, ENOSPC)

    monkeypatch.setattr(Figure, "savefig", savefig)
    out = tmp_path / "rep"
    line = _error_line(capsys, ["report", str(results), "--out", str(out), "--boot", "20",
                                "--no-progress"])
    assert line.startswith(f"geocon report: error: {ENOSPC}: {out}{os.sep}")
    assert line.endswith(".png")
    assert not [n for n in _names(out) if n.endswith(".png") or ".partial-" in n]


# ------------------------------------------ finding 3: a results file cut off mid-write

def _results_file(tmp_path: Path, n: int) -> Path:
    return write_jsonl(tmp_path / "r.jsonl", [fake_result(f"c{i}") for i in range(n)])


def _show(message, category, filename, lineno, file=None, line=None) -> None:
    """What Python's default ``warnings.showwarning`` does: the formatted warning on stderr."""
    sys.stderr.write(warnings.formatwarning(message, category, filename, lineno, line))


def test_a_cut_off_last_line_is_skipped_with_a_warning(tmp_path: Path, capsys):
    """A results file whose last line is a part of a line (no newline: an interrupted write):
    load_results and geocon report read the complete lines and warn once, naming the file
    and line (report refused the whole file)."""
    path = _results_file(tmp_path, 3)
    text = path.read_text()
    path.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1])
    with pytest.warns(UserWarning) as record:
        rows = load_results(path)
    assert [r["clip_id"] for r in rows] == ["c0", "c1"]
    assert [str(w.message) for w in record] == [
        f"{path}, line 3 is cut off (an interrupted write): skipped"]
    with warnings.catch_warnings():  # shown on stderr as Python shows it (pytest records it)
        warnings.simplefilter("always")
        warnings.showwarning = _show
        rc = main(["report", str(path), "--out", str(tmp_path / "rep"), "--no-draw",
                   "--boot", "20", "--no-progress"])
    err = capsys.readouterr().err
    assert rc == 0 and (tmp_path / "rep" / "index.html").is_file(), err
    assert (f"geocon report: warning: {path}, line 3 is cut off (an interrupted write): "
            "skipped") in err.splitlines()


def test_other_malformed_lines_are_still_errors(tmp_path: Path):
    """A cut middle line, or a last line ending with a newline that does not parse, still
    refuses the file naming the line; a complete last line without a newline is read."""
    path = _results_file(tmp_path, 3)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text(lines[0] + lines[1][:40] + lines[2])
    with pytest.raises(ValueError, match=r"line 2: not JSON"):
        load_results(path)
    path.write_text(lines[0] + lines[1] + lines[2][:40] + "\n")
    with pytest.raises(ValueError, match=r"line 3: not JSON"):
        load_results(path)
    path.write_text("".join(lines).rstrip("\n"))
    assert [r["clip_id"] for r in load_results(path)] == ["c0", "c1", "c2"]


# ---------------------------------------- finding 5: why an output is not writable

def test_read_only_and_immutable_outputs_say_why(tmp_path: Path, monkeypatch):
    """A read-only mount says "read-only file system", an existing file that refuses a write
    open says its reason ("operation not permitted": chattr +i); a plain permission problem
    keeps "permission denied"."""
    out = tmp_path / "r.jsonl"
    out.write_text("old\n")
    monkeypatch.setattr(os, "access", lambda path, mode: False)

    class Vfs:
        f_flag = os.ST_RDONLY

    real_statvfs = os.statvfs
    monkeypatch.setattr(os, "statvfs", lambda path: Vfs())
    with pytest.raises(InputError, match=r"not writable \(read-only file system on "):
        check_output_file(str(out), "--json")
    with pytest.raises(InputError, match=r"not writable \(read-only file system on "):
        check_output_dir(str(tmp_path / "rep"), "--out")
    monkeypatch.setattr(os, "statvfs", real_statvfs)
    real_open = os.open

    def immutable(path: Any, flags: int, *args: Any) -> int:
        if Path(path) == out and flags & os.O_WRONLY:
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM), str(path))
        return real_open(path, flags, *args)

    monkeypatch.setattr(os, "open", immutable)
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != out)
    with pytest.raises(InputError) as exc:
        check_output_file(str(out), "--json")
    assert str(exc.value) == f"--json {out}: not writable (operation not permitted on {out})"
    assert out.read_text() == "old\n"  # the open attempt wrote nothing
    monkeypatch.setattr(os, "access", lambda path, mode: False)
    with pytest.raises(InputError) as exc:
        check_output_dir(str(tmp_path / "rep"), "--out")
    assert str(exc.value) == f"--out {tmp_path / 'rep'}: not writable (permission denied on " \
                             f"{tmp_path})"


def test_atomic_write_text_still_writes(tmp_path: Path):
    """The atomic writer is unchanged where nothing fails."""
    assert atomic_write_text(tmp_path / "a.txt", "x\n").read_text() == "x\n"
    assert _names(tmp_path) == ["a.txt"]
