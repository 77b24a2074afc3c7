"""``prune_store`` while bench jobs use the store (audit s22 pgconc F2, F3, F5): on PostgreSQL a
live job refuses the deletes unless ``force``; on SQLite a write by another connection during
the prune is said; opening a PostgreSQL store does not queue behind VACUUM; a SQLite VACUUM
whose WAL a reader keeps says why the files did not shrink (tests/pg_server.py)."""
from __future__ import annotations

import sqlite3
import threading
import time

import pytest
from helpers import CountingScorer, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, StoreError, run_manifest
from geocon_torch.bench import prune as prune_mod
from geocon_torch.bench.claims import WorkQueue
from geocon_torch.bench.prune import prune_store


def _scored(tmp_path, db, n=6):
    """``n`` clips scored into ``db``; (config hash, manifest of the first 2 clips)."""
    rows = write_clips(tmp_path / "clips", n)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    cfg = run_manifest(m, db, score_fn=CountingScorer(), progress=False).config_hash
    return cfg, write_jsonl(tmp_path / "keep.jsonl", rows[:2])


def _counts(db):
    with ResultStore(db) as s:
        return s.count("clips"), s.count("results")


def test_a_live_postgresql_job_refuses_the_deletes_unless_forced(tmp_path, pg_url):
    cfg, keep = _scored(tmp_path, pg_url)
    with ResultStore(pg_url) as st:
        WorkQueue(st, "live-job", cfg, "A", lease_s=60).enqueue(["c4", "c5", "c9"])
        with pytest.raises(StoreError, match=r"1 geocon bench job is running on .*: job "
                                             r"live-job \(config " + cfg + r", 3 open work row"
                                             r"\(s\)\).*force=True"):
            prune_store(pg_url, keep_manifest=keep, orphans=True)
        assert _counts(pg_url) == (6, 6)  # refused before any delete
        dry = prune_store(pg_url, keep_manifest=keep, orphans=True, dry_run=True)
        assert dry.counts()["clips"] == 4 and any("live-job" in n for n in dry.notes)
        # kinds that never touch a live job's rows run: stale jobs, VACUUM
        assert prune_store(pg_url, stale=True, vacuum_store=True).vacuumed
        # a live job of another config does not hold this config's prune
        WorkQueue(st, "other", "cfg-other", "B", lease_s=60).enqueue(["z"])
        st.transaction(lambda: st.execute("DELETE FROM work_jobs WHERE job = 'live-job'"))
        st.transaction(lambda: st.execute("DELETE FROM work WHERE job = 'live-job'"))
        got = prune_store(pg_url, keep_manifest=keep, config_hash=cfg)
        assert got.counts()["clips"] == 4 and got.notes == []
        WorkQueue(st, "live-job", cfg, "A", lease_s=60).enqueue(["c0"])
        forced = prune_store(pg_url, orphans=True, force=True)
        assert forced.counts()["orphans"] == 4 and _counts(pg_url) == (2, 2)
        assert any("live-job" in n and "forced" in n for n in forced.notes)


def test_a_sqlite_write_during_the_prune_becomes_a_note(tmp_path, monkeypatch):
    """SQLite has no job registry: a commit of another connection between the prune's start and
    its end (PRAGMA data_version) is said, since it may be a job writing back what went."""
    db = str(tmp_path / "r.sqlite")
    cfg, keep = _scored(tmp_path, db)
    real = prune_mod.orphan_results

    def a_job_writes(store, configs=None, dropped=None):
        with ResultStore(db) as other:
            other._write([("UPDATE clips SET prompt = 'new' WHERE clip_id = 'c0'", ())])
        return real(store, configs, dropped)

    monkeypatch.setattr(prune_mod, "orphan_results", a_job_writes)
    got = prune_store(db, keep_manifest=keep, orphans=True)
    assert got.counts()["clips"] == 4 and got.notes == [
        "another connection wrote the store while prune ran (a geocon bench job?): what it "
        "wrote may bring back rows pruned; run the prune again once no job writes the store"]
    monkeypatch.setattr(prune_mod, "orphan_results", real)
    assert prune_store(db, orphans=True).notes == []  # nobody else writes: no note


def test_opening_a_postgresql_store_does_not_wait_behind_vacuum(tmp_path, pg_url):
    """VACUUM's lock (SHARE UPDATE EXCLUSIVE, taken here by LOCK TABLE) on clips and work: an
    open of a current store reads its schema version and runs no DDL, so it does not queue
    (before, CREATE INDEX IF NOT EXISTS waited for the lock and every writer behind it)."""
    import psycopg
    _scored(tmp_path, pg_url, n=2)
    opened = []
    with psycopg.connect(pg_url) as vac:
        vac.execute("LOCK TABLE clips, work IN SHARE UPDATE EXCLUSIVE MODE")
        t = threading.Thread(target=lambda: opened.append(ResultStore(pg_url).close()),
                             daemon=True)
        t0 = time.monotonic()
        t.start()
        t.join(5.0)
        waited = time.monotonic() - t0
        vac.rollback()
    t.join(10.0)
    assert opened and waited < 5.0, f"the open waited {waited:.1f} s behind the lock"
    with ResultStore(pg_url) as st:  # a missing index is still created on open
        st.transaction(lambda: st.execute("DROP INDEX work_open"))
    with ResultStore(pg_url) as st:
        assert st.select("SELECT to_regclass('work_open') IS NOT NULL") == [(True,)]


def test_a_sqlite_vacuum_with_a_reader_says_the_wal_could_not_shrink(tmp_path, monkeypatch):
    """Before, the report said nothing (the files grew: "vacuum: 836 KiB -> 945 KiB") and the
    TRUNCATE checkpoint waited the whole store timeout (120 s) for the reader."""
    db = str(tmp_path / "r.sqlite")
    _, keep = _scored(tmp_path, db, n=40)
    prune_store(db, keep_manifest=keep, orphans=True)  # 38 clips go: VACUUM has work
    monkeypatch.setattr(prune_mod, "CHECKPOINT_WAIT_S", 0.2)
    reader = sqlite3.connect(db, isolation_level=None)
    reader.execute("BEGIN")
    assert reader.execute("SELECT count(*) FROM meta").fetchone()[0] >= 1  # a read snapshot
    t0 = time.monotonic()
    busy = prune_store(db, vacuum_store=True)
    took = time.monotonic() - t0
    reader.execute("COMMIT")
    reader.close()
    assert busy.vacuumed and busy.checkpoint_busy and took < 20.0
    assert busy.notes == ["vacuum: another connection is reading the store, so the WAL could "
                          "not be truncated; the files shrink when the last connection closes "
                          "(or run prune --vacuum again when no job or report reads the store)"]
    free = prune_store(db, vacuum_store=True)
    assert not free.checkpoint_busy and free.notes == [] and free.size_after <= free.size_before
