"""A machine resource that runs out while a clip is hashed or scored (too many open files, no
memory / threads, a full disk or quota, an out-of-memory GPU) is the run's failure, not the
clip's: nothing is stored for that clip, the rows stored before stay, the run raises
:class:`ResourceExhaustedError` (``geocon bench``: exit 2, one line) and a plain re-run scores
the clip. Any other exception stays the clip's error row; a batch that runs out of memory as
a whole is still scored clip by clip (audit s33 F4)."""
from __future__ import annotations

import errno
import sqlite3
from pathlib import Path
from typing import Callable, Dict, Optional

import cv2
import pytest
import torch
from helpers import CountingScorer, write_clips, write_jsonl

from geocon_torch.bench import run_manifest
from geocon_torch.bench import runner as runner_mod
from geocon_torch.bench.preferences import preference_pairs
from geocon_torch.cli import main
from geocon_torch.errors import GeoConError, ResourceExhaustedError, VideoReadError

Fault = Callable[[], BaseException]


def _emfile() -> BaseException:
    return OSError(errno.EMFILE, "Too many open files", "/some/clip.mp4")


def _eagain_read() -> BaseException:
    """A VideoReadError raised from PyAV's EAGAIN, as ``open_container`` chains it."""
    try:
        raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable",
                              'avcodec_open2("h264", {})')
    except BlockingIOError as exc:
        try:
            raise VideoReadError(f"c.mp4: cannot open ({exc})") from exc
        except VideoReadError as wrapped:
            return wrapped


def _cv2_no_memory() -> BaseException:
    exc = cv2.error("OpenCV(5.1.0) alloc.cpp:73: error: (-4:Insufficient memory) Failed to "
                    "allocate 12582912 bytes in function 'OutOfMemoryError'\n")
    exc.code = -4
    return exc


FAULTS: Dict[str, tuple] = {  # name: (exception factory, words of the message)
    "emfile": (_emfile, "too many open files"),
    "eagain": (_eagain_read, "no memory or threads"),
    "eagain_text": (lambda: VideoReadError(  # decode errors are kept as text, no chain
        "c.mp4: 0 frames could be decoded (decode: [Errno 11] Resource temporarily "
        "unavailable: 'avcodec_open2(\"h264\", {})'); the file is empty, truncated before "
        "the first frame, or not a video"), "no memory or threads"),
    "memory": (MemoryError, "out of memory"),
    "torch_cpu": (lambda: RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. "
                                       "DefaultCPUAllocator: can't allocate memory: you tried "
                                       "to allocate 1125899906842624 bytes."), "out of memory"),
    "cv2": (_cv2_no_memory, "out of memory"),
    "gpu": (lambda: torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"),
            "out of GPU memory"),
    "enospc": (lambda: OSError(errno.ENOSPC, "No space left on device"),
               "no space left on device"),
    "edquot": (lambda: OSError(errno.EDQUOT, "Disk quota exceeded"), "disk quota exceeded"),
}


class FaultScorer(CountingScorer):
    """CountingScorer raising ``fault()`` for the clips of ``on`` (``alone``: when scored alone;
    ``in_batch``: in a ``batch`` call's slot; ``whole``: the whole batch call raises it)."""

    def __init__(self, fault: Optional[Fault] = None, on=(), *, alone: bool = True,
                 in_batch: bool = False, whole: Optional[Fault] = None, **kw):
        super().__init__(**kw)
        self.fault, self.on, self.alone, self.in_batch = fault, set(on), alone, in_batch
        self.whole = whole
        self.groups: list = []

    def __call__(self, entry, config, device):
        if self.alone and entry.clip_id in self.on:
            self.calls.append(entry.clip_id)
            raise self.fault()
        return super().__call__(entry, config, device)

    def batch(self, entries, config, device):
        self.groups.append([e.clip_id for e in entries])
        if self.whole is not None:
            raise self.whole()
        out = []
        for e in entries:
            if self.in_batch and e.clip_id in self.on:
                out.append(self.fault())
            else:
                out.append(CountingScorer.__call__(self, e, config, device))
        return out


class NoBatch(FaultScorer):
    batch = None  # type: ignore[assignment] - clip by clip only


def _manifest(tmp_path: Path, n: int = 3) -> Path:
    return write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))


def _stored(db: Path) -> Dict[str, str]:
    with sqlite3.connect(db) as con:
        return dict(con.execute("SELECT c.clip_id, r.status FROM clips c JOIN results r ON "
                                "r.content_hash = c.content_hash AND "
                                "r.config_hash = c.config_hash"))


def _results(db: Path) -> int:
    with sqlite3.connect(db) as con:
        return con.execute("SELECT COUNT(*) FROM results").fetchone()[0]


@pytest.mark.parametrize("name", list(FAULTS))
def test_an_exhausted_resource_stores_nothing_and_stops_the_run(tmp_path: Path, name: str):
    fault, words = FAULTS[name]
    m, db = _manifest(tmp_path), tmp_path / "r.sqlite"
    scorer = NoBatch(fault, on={"c1"})
    with pytest.raises(ResourceExhaustedError) as info:
        run_manifest(m, db, score_fn=scorer, progress=False, batch_clips=1)
    exc = info.value
    assert isinstance(exc, GeoConError) and isinstance(exc, OSError)
    text = str(exc)
    assert "\n" not in text and text.startswith(f"{words} while scoring clip 'c1' (")
    assert "nothing stored for it" in text and "run the same command again" in text
    assert scorer.calls == ["c0", "c1"]  # the run stopped at c1
    assert _stored(db) == {"c0": "ok"} and _results(db) == 1  # c0 kept, no row for c1
    again = NoBatch()  # the fault is gone: a plain re-run scores c1 and c2
    s = run_manifest(m, db, score_fn=again, progress=False, batch_clips=1)
    assert again.calls == ["c1", "c2"] and (s.skipped, s.ok, s.error) == (1, 2, 0)
    assert _stored(db) == {"c0": "ok", "c1": "ok", "c2": "ok"}


def test_geocon_bench_exits_2_with_one_line(tmp_path: Path, monkeypatch, capsys):
    m, db = _manifest(tmp_path), tmp_path / "r.sqlite"
    monkeypatch.setattr(runner_mod, "default_score_fn", NoBatch(_emfile, on={"c2"}))
    argv = ["bench", str(m), "--db", str(db), "--no-progress"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(
        "geocon bench: error: too many open files while scoring clip 'c2' (")
    assert "raise `ulimit -n`" in err[0]
    assert _stored(db) == {"c0": "ok", "c1": "ok"}
    monkeypatch.setattr(runner_mod, "default_score_fn", NoBatch())
    assert main(argv) == 0
    assert _stored(db) == {"c0": "ok", "c1": "ok", "c2": "ok"}


def test_geocon_pairs_shares_it(tmp_path: Path, monkeypatch):
    rows = write_clips(tmp_path / "clips", 2)
    for r in rows:
        r["prompt"] = "p"
    m, db = write_jsonl(tmp_path / "m.jsonl", rows), tmp_path / "r.sqlite"
    monkeypatch.setattr(runner_mod, "default_score_fn", NoBatch(MemoryError, on={"c1"}))
    with pytest.raises(ResourceExhaustedError, match="out of memory while scoring clip 'c1'"):
        preference_pairs(m, db, progress=False)
    assert _results(db) == 1


def test_the_hash_running_out_of_files_stores_no_unreadable_row(tmp_path: Path, monkeypatch):
    m, db = _manifest(tmp_path), tmp_path / "r.sqlite"
    real = runner_mod.content_hash

    def hashing(path):
        if Path(path).name == "c1.mp4":
            raise _emfile()
        return real(path)

    monkeypatch.setattr(runner_mod, "content_hash", hashing)
    with pytest.raises(ResourceExhaustedError, match="too many open files while reading clip "
                                                     "'c1'"):
        run_manifest(m, db, score_fn=NoBatch(), progress=False, batch_clips=1)
    assert _stored(db) == {"c0": "ok"} and _results(db) == 1
    monkeypatch.setattr(runner_mod, "content_hash", real)
    run_manifest(m, db, score_fn=NoBatch(), progress=False, batch_clips=1)
    assert _stored(db) == {"c0": "ok", "c1": "ok", "c2": "ok"} and _results(db) == 3


@pytest.mark.parametrize("fault", [
    lambda: RuntimeError("boom"),
    lambda: OSError(errno.ENOENT, "No such file or directory", "x.mp4"),
    lambda: VideoReadError("c.mp4: not a readable video"),
    lambda: cv2.error("OpenCV(5.1.0) x.cpp:1: error: (-215:Assertion failed) !empty()\n"),
    lambda: OSError("a bare OSError without errno"),
])
def test_any_other_exception_is_still_the_clips_error_row(tmp_path: Path, fault):
    m, db = _manifest(tmp_path), tmp_path / "r.sqlite"
    s = run_manifest(m, db, score_fn=NoBatch(fault, on={"c1"}), progress=False, batch_clips=1)
    assert (s.ok, s.error) == (2, 1)
    assert _stored(db) == {"c0": "ok", "c1": "error", "c2": "ok"}
    again = NoBatch()
    run_manifest(m, db, score_fn=again, progress=False, batch_clips=1)
    assert again.calls == []  # kept: --retry-errors recomputes it, as before
    run_manifest(m, db, score_fn=again, progress=False, batch_clips=1, retry_errors=True)
    assert again.calls == ["c1"] and _stored(db)["c1"] == "ok"


def test_a_batch_out_of_memory_is_still_scored_clip_by_clip(tmp_path: Path, caplog):
    m, db = _manifest(tmp_path), tmp_path / "r.sqlite"
    scorer = FaultScorer(whole=lambda: torch.OutOfMemoryError("CUDA out of memory (batch)"))
    s = run_manifest(m, db, score_fn=scorer, progress=False, batch_clips=3)
    assert scorer.groups == [["c0", "c1", "c2"]] and scorer.calls == ["c0", "c1", "c2"]
    assert (s.ok, s.error) == (3, 0) and "scoring a group of 3 clips failed" in caplog.text


def test_a_clip_out_of_memory_in_a_batch_is_retried_alone(tmp_path: Path):
    m, db = _manifest(tmp_path), tmp_path / "r.sqlite"
    scorer = FaultScorer(MemoryError, on={"c1"}, alone=False, in_batch=True)
    s = run_manifest(m, db, score_fn=scorer, progress=False, batch_clips=3)
    assert scorer.calls == ["c0", "c2", "c1"]  # c1 scored again alone, and it fit
    assert (s.ok, s.error) == (3, 0)
    assert _stored(db) == {"c0": "ok", "c1": "ok", "c2": "ok"}


def test_a_batch_whose_clip_fails_alone_the_same_way_raises(tmp_path: Path):
    m, db = _manifest(tmp_path), tmp_path / "r.sqlite"
    scorer = FaultScorer(MemoryError, on={"c1"}, in_batch=True)
    with pytest.raises(ResourceExhaustedError, match="out of memory while scoring clip 'c1'"):
        run_manifest(m, db, score_fn=scorer, progress=False, batch_clips=3)
    assert scorer.calls == ["c0", "c2", "c1"]
    assert _stored(db) == {"c0": "ok"} and _results(db) == 1
    # the whole batch running out, then the clip alone too: the same
    db2 = tmp_path / "r2.sqlite"
    scorer = FaultScorer(MemoryError, on={"c1"}, whole=MemoryError)
    with pytest.raises(ResourceExhaustedError, match="out of memory while scoring clip 'c1'"):
        run_manifest(m, db2, score_fn=scorer, progress=False, batch_clips=3)
    assert _stored(db2) == {"c0": "ok"}
