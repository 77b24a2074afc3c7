"""Another program's SQLite file given as a store is refused by every command, writers included.

``geocon bench``, ``geocon pairs`` and ``geocon merge OUT`` (run_manifest, preference_pairs,
merge_stores) added geocon's tables to such a file and switched it to WAL mode, while every
reader refused the same file. Now each open of an existing non-empty SQLite file without the
store's tables is the reader's StoreError ("nothing was changed", exit status 2), and the file
is left byte for byte as it was; a new or empty file and a geocon store open as before.
"""
from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Tuple

import pytest
from helpers import CountingScorer, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, merge_stores, run_manifest
from geocon_torch.bench.preferences import preference_pairs
from geocon_torch.bench.store import SQLiteStore, StoreError, open_readable
from geocon_torch.cli import main

REFUSED = r"not a geocon result store \(no results / clips tables; it holds t\); nothing was"


def _foreign(path: Path, journal: str = "delete") -> Path:
    """Another program's database: one table ``t`` holding 42, in ``journal`` mode."""
    conn = sqlite3.connect(str(path))
    conn.execute(f"PRAGMA journal_mode = {journal}")
    conn.execute("CREATE TABLE t (x)")
    conn.execute("INSERT INTO t VALUES (42)")
    conn.commit()
    conn.close()
    return path


def _state(path: Path) -> Tuple[bytes, list]:
    """(the file's bytes, the names in its folder): what a refused open must leave as it was."""
    return path.read_bytes(), sorted(p.name for p in path.parent.iterdir())


def _tables_and_mode(path: Path) -> Tuple[list, str, list]:
    conn = sqlite3.connect(str(path))
    try:
        names = sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master"))
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        return names, mode, conn.execute("SELECT x FROM t").fetchall()
    finally:
        conn.close()


def _manifest(tmp_path: Path, n: int = 2) -> Path:
    return write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))


@pytest.fixture(params=["delete", "wal"])
def foreign(request, tmp_path: Path) -> Path:
    """A foreign database alone in its own folder (so the folder listing is checked too)."""
    folder = tmp_path / "app"
    folder.mkdir()
    return _foreign(folder / "app.db", request.param)


def _assert_unchanged(path: Path, before: Tuple[bytes, list], journal: str) -> None:
    assert _state(path) == before
    assert _tables_and_mode(path) == (["t"], journal, [(42,)])


def test_run_manifest_refuses_a_foreign_sqlite_file_and_scores_nothing(tmp_path, foreign):
    journal = _tables_and_mode(foreign)[1]
    before = _state(foreign)
    scorer = CountingScorer()
    with pytest.raises(StoreError, match=REFUSED):
        run_manifest(_manifest(tmp_path), foreign, score_fn=scorer, progress=False)
    assert scorer.calls == []
    _assert_unchanged(foreign, before, journal)


def test_preference_pairs_and_merge_refuse_a_foreign_sqlite_file(tmp_path, foreign):
    journal = _tables_and_mode(foreign)[1]
    before = _state(foreign)
    with pytest.raises(StoreError, match=REFUSED):
        preference_pairs(_manifest(tmp_path), foreign, kind="background", progress=False)
    shard = tmp_path / "shard.sqlite"
    run_manifest(_manifest(tmp_path), shard, score_fn=CountingScorer(), progress=False)
    with pytest.raises(StoreError, match=REFUSED):
        merge_stores(foreign, [shard])
    for open_store in (ResultStore, open_readable,
                       lambda p: SQLiteStore(p, read_only=True)):
        with pytest.raises(StoreError, match=REFUSED):
            open_store(foreign)
    _assert_unchanged(foreign, before, journal)


def test_bench_pairs_and_merge_commands_exit_2_and_leave_the_file(tmp_path, foreign, capsys):
    journal = _tables_and_mode(foreign)[1]
    before = _state(foreign)
    manifest = _manifest(tmp_path)
    shard = tmp_path / "shard.sqlite"
    run_manifest(manifest, shard, score_fn=CountingScorer(), progress=False)
    out = tmp_path / "p.jsonl"
    commands = {
        "bench": ["bench", str(manifest), "--db", str(foreign), "--no-progress"],
        "pairs": ["pairs", str(manifest), "--db", str(foreign), "--out", str(out),
                  "--kind", "background", "--no-progress"],
        "merge": ["merge", str(foreign), str(shard)],
    }
    for name, argv in commands.items():
        assert main(argv) == 2, name
        err = capsys.readouterr().err
        assert err.startswith(f"geocon {name}: error: {foreign}: "), err
        assert "not a geocon result store (no results / clips tables; it holds t); " \
               "nothing was changed" in err, err
        assert "Traceback" not in err
        _assert_unchanged(foreign, before, journal)
    assert not out.exists()


def test_new_empty_and_geocon_files_still_open_for_writing(tmp_path):
    """A missing file, a 0-byte file and a SQLite database without tables become stores; an
    existing store opens again with its rows."""
    empty_db = tmp_path / "empty_db.sqlite"
    sqlite3.connect(str(empty_db)).execute("PRAGMA user_version = 7").connection.close()
    zero = tmp_path / "zero.sqlite"
    zero.touch()
    manifest = _manifest(tmp_path, 3)
    for db in (tmp_path / "new" / "r.sqlite", zero, empty_db):
        summary = run_manifest(manifest, db, score_fn=CountingScorer(), progress=False)
        assert (summary.computed, summary.ok) == (3, 3)
        again = run_manifest(manifest, db, score_fn=CountingScorer(), progress=False)
        assert (again.computed, again.skipped) == (0, 3)
        with ResultStore(db) as store:
            assert sorted(r["clip_id"] for r in store.rows()) == ["c0", "c1", "c2"]
        with sqlite3.connect(str(db)) as conn:
            assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert main(["merge", str(tmp_path / "merged.sqlite"), str(zero)]) == 0
