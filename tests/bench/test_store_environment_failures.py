"""The SQLite store when the environment fails under a run: the store file deleted or replaced
while ``geocon bench`` writes it, and a full disk (SQLite has already rolled back).

A deleted store file is still written by SQLite (the unlinked inode), so the run must notice
it (the file's device and inode, compared after each commit and before the end-of-run check)
instead of reporting every clip stored, and nothing may create a new empty store in its place.
"""
from __future__ import annotations

import os
import shutil
import sqlite3
from pathlib import Path

import pytest
from helpers import CountingScorer, fake_result, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, run_manifest
from geocon_torch.bench import runner as runner_mod
from geocon_torch.bench.store import SQLiteStore, StoreError
from geocon_torch.cli import main


class VanishingScorer(CountingScorer):
    """A CountingScorer that, when asked for clip ``at``, runs ``act()`` first (deletes or
    replaces the store, as a cleanup job or a user would while the run goes on)."""

    def __init__(self, at: str, act, **kw):
        super().__init__(**kw)
        self.at, self.act = at, act

    def __call__(self, entry, config, device):
        if entry.clip_id == self.at:
            self.act()
        return super().__call__(entry, config, device)


def _manifest(tmp_path: Path, n: int = 4) -> Path:
    return write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))


def _vanished(exc: pytest.ExceptionInfo, db: Path) -> None:
    text = str(exc.value)
    assert str(db) in text and "deleted or replaced during the run" in text, text
    assert "\n" not in text and "re-run the same command" in text, text


def test_store_folder_removed_mid_run_is_a_store_error(tmp_path: Path):
    m, db = _manifest(tmp_path), tmp_path / "out" / "r.sqlite"
    scorer = VanishingScorer("c1", lambda: shutil.rmtree(db.parent))
    with pytest.raises(StoreError) as exc:
        run_manifest(m, db, score_fn=scorer, progress=False, batch_clips=1)
    _vanished(exc, db)
    assert scorer.calls == ["c0", "c1"]  # stopped at the first commit into the deleted file
    assert not db.parent.exists()  # no new empty store in its place


def test_store_file_replaced_mid_run_is_a_store_error(tmp_path: Path):
    m, db = _manifest(tmp_path), tmp_path / "r.sqlite"
    other = tmp_path / "other.sqlite"

    def replace() -> None:
        other.write_bytes(b"")
        os.replace(other, db)

    scorer = VanishingScorer("c2", replace)
    with pytest.raises(StoreError) as exc:
        run_manifest(m, db, score_fn=scorer, progress=False, batch_clips=1)
    _vanished(exc, db)
    assert scorer.calls == ["c0", "c1", "c2"]
    assert db.stat().st_size == 0  # the replacement is left as it is


def test_store_deleted_after_the_last_commit_fails_the_end_check(tmp_path: Path, monkeypatch):
    m, db = _manifest(tmp_path, 3), tmp_path / "out" / "r.sqlite"
    static = runner_mod._run_static

    def then_delete(*args, **kwargs):
        summary = static(*args, **kwargs)
        shutil.rmtree(db.parent)  # after every row was committed, before the end check
        return summary

    monkeypatch.setattr(runner_mod, "_run_static", then_delete)
    scorer = CountingScorer()
    with pytest.raises(StoreError) as exc:
        run_manifest(m, db, score_fn=scorer, progress=False)
    _vanished(exc, db)
    assert scorer.calls == ["c0", "c1", "c2"] and not db.parent.exists()


def test_bench_cli_store_folder_removed_is_one_line_exit_2(tmp_path: Path, capsys,
                                                             monkeypatch):
    m, db = _manifest(tmp_path), tmp_path / "out" / "r.sqlite"
    csv = tmp_path / "t.csv"
    scorer = VanishingScorer("c1", lambda: shutil.rmtree(db.parent))
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", scorer)
    rc = main(["bench", str(m), "--db", str(db), "--no-progress", "--batch-clips", "1",
               "--export-csv", str(csv)])
    out, err = capsys.readouterr()
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("geocon bench: error: ") and str(db) in lines[0], lines[0]
    assert "deleted or replaced during the run" in lines[0]
    assert "wrote" not in out and not csv.exists() and not db.parent.exists()


def test_bench_cli_never_creates_the_store_it_reopens_after_a_run(tmp_path: Path, capsys,
                                                                   monkeypatch):
    m, db = _manifest(tmp_path, 2), tmp_path / "out" / "r.sqlite"
    csv = tmp_path / "t.csv"
    run = runner_mod.run_manifest

    def run_then_delete(*args, **kwargs):
        summary = run(*args, **kwargs)
        shutil.rmtree(db.parent)  # after the run's own end check, before the export
        return summary

    monkeypatch.setattr("geocon_torch.commands.bench.run_manifest", run_then_delete)
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", CountingScorer())
    rc = main(["bench", str(m), "--db", str(db), "--no-progress", "--export-csv", str(csv)])
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert "store not found" in lines[0] and str(db) in lines[0], lines[0]
    assert not db.parent.exists() and not csv.exists()


def test_readable_open_without_create_refuses_a_missing_file(tmp_path: Path):
    db = tmp_path / "no" / "r.sqlite"
    with pytest.raises(StoreError, match="result store not found"):
        SQLiteStore(db, create=False)
    assert not db.parent.exists()
    with ResultStore(db) as s:  # the default still creates a store with its folder
        assert s.count() == 0
    with SQLiteStore(db, create=False) as s:
        assert s.count() == 0 and not s.read_only


def _big_result(clip: str) -> dict:
    res = fake_result(clip)
    res["warnings"] = ["w" * 1000] * 40  # ~40 kB: more than the pages left
    return res


def test_full_disk_names_the_full_disk_not_the_rollback(tmp_path: Path):
    db = tmp_path / "r.sqlite"
    with SQLiteStore(db, timeout_s=1) as s:
        pages = s._conn.execute("PRAGMA page_count").fetchone()[0]
        s._conn.execute(f"PRAGMA max_page_count = {pages}")  # SQLITE_FULL, as a full disk
        res = _big_result("a")
        with pytest.raises(StoreError) as exc:
            s.put({"clip_id": "a", "generator": "m"}, "h-a", res["config_hash"], res)
        assert str(exc.value) == f"{db}: database or disk is full"
        assert isinstance(exc.value.__cause__, sqlite3.OperationalError)
        assert not s._conn.in_transaction
        s._conn.execute(f"PRAGMA max_page_count = {10 * pages}")  # space freed: goes on
        s.put({"clip_id": "a", "generator": "m"}, "h-a", res["config_hash"], res)
        assert (s.count(), s.count("clips")) == (1, 1)


def _fails_after_rollback(store: SQLiteStore, message: str):
    """An ``_execute`` that, as SQLite on a full disk or an I/O error, rolls the open
    transaction back itself before it raises."""
    def execute(sql, params=()):
        store._conn.execute("ROLLBACK")
        raise sqlite3.OperationalError(message)
    return execute


def test_rolled_back_write_and_read_keep_their_error(tmp_path: Path, monkeypatch):
    db = tmp_path / "r.sqlite"
    with SQLiteStore(db, timeout_s=1) as s:
        res = fake_result("a")
        s.put({"clip_id": "a", "generator": "m"}, "h-a", res["config_hash"], res)
        monkeypatch.setattr(s, "_execute", _fails_after_rollback(s, "database or disk is full"))
        with pytest.raises(StoreError, match="database or disk is full$"):
            s.put({"clip_id": "b", "generator": "m"}, "h-b", res["config_hash"], res)
        monkeypatch.setattr(s, "_execute", _fails_after_rollback(s, "disk I/O error"))
        with pytest.raises(StoreError, match="disk I/O error$"):
            s.raw_snapshot()
        monkeypatch.undo()
        results, clips = s.raw_snapshot()
        assert [r["content_hash"] for r in results] == ["h-a"]
        assert [c["clip_id"] for c in clips] == ["a"] and not s._conn.in_transaction
