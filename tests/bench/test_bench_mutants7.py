"""Mutation-found gaps of store maintenance and the store's read path (session 22):
``prune_store`` chunked deletes, its "store changed meanwhile" note, which configs it accepts,
crashed jobs of one config and a job holding a live lease, VACUUM alone; the cheap
per-config counts, JSONL clip-id de-duplication per config, JSONL rows of one config, the
foreign-file check of readers, and the mixed-version warning of flat rows. Each test pins one
behaviour no other default test pinned."""
from __future__ import annotations

import json
import sqlite3
import time
import warnings
from pathlib import Path

import pytest
from helpers import CountingScorer, _clip, fake_result, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, StoreError, load_results, run_manifest
from geocon_torch.bench import prune as prune_mod
from geocon_torch.bench.claims import WorkQueue
from geocon_torch.bench.prune import prune_store
from geocon_torch.bench.store import config_counts


def _counts(db):
    with ResultStore(db) as s:
        return s.count("clips"), s.count("results")


def _store(tmp_path: Path, n: int):
    """``n`` clips scored into a SQLite store: (rows, store path, config hash)."""
    rows = write_clips(tmp_path / "clips", n)
    db = str(tmp_path / "r.sqlite")
    s = run_manifest(write_jsonl(tmp_path / "m.jsonl", rows), db, score_fn=CountingScorer(),
                     progress=False)
    return rows, db, s.config_hash


# --- bench/prune.py ---------------------------------------------------------------------------
def test_prune_deletes_every_key_of_every_chunk(tmp_path: Path, monkeypatch):
    """Chunks of 2 keys: the 5 clip rows and 5 results not kept all go, none left at a chunk's
    end, and the counts agree (no "store changed" note)."""
    rows, db, _ = _store(tmp_path, 6)
    monkeypatch.setattr(prune_mod, "CHUNK", 2)
    got = prune_store(db, keep_manifest=write_jsonl(tmp_path / "k.jsonl", rows[:1]),
                      orphans=True)
    assert got.counts()["clips"] == 5 and got.counts()["orphans"] == 5 and got.notes == []
    assert _counts(db) == (1, 1)


def test_a_count_that_differs_from_what_was_found_becomes_a_note(tmp_path: Path, monkeypatch):
    """A clip row found but gone when deleted (another writer): 2 of 3 deleted, said so."""
    rows, db, cfg = _store(tmp_path, 3)
    real = prune_mod.clips_not_in

    def with_a_ghost(store, keep, configs=None):
        found = real(store, keep, configs)
        return {c: ids + ["ghost"] for c, ids in found.items()}

    monkeypatch.setattr(prune_mod, "clips_not_in", with_a_ghost)
    got = prune_store(db, keep_manifest=write_jsonl(tmp_path / "k.jsonl", rows[:1]))
    assert got.notes == ["clip rows: 2 deleted of the 3 found (the store changed meanwhile: "
                         "prune while no bench job writes it)"]
    assert _counts(db) == (1, 3)


def test_config_hash_held_only_by_orphaned_results_is_accepted(tmp_path: Path):
    """After its clip rows went, a config lives on in its results only: --orphans
    --config-hash H still finds it (and deletes them), the other config's rows stay."""
    db = str(tmp_path / "r.sqlite")
    with ResultStore(db) as s:
        s.put(_clip("a"), "h-a", "cfg-gone", fake_result("a", config_hash="cfg-gone"))
        s.put(_clip("b"), "h-b", "cfg-kept", fake_result("b", config_hash="cfg-kept"))
    with sqlite3.connect(db) as conn:
        conn.execute("DELETE FROM clips WHERE config_hash = 'cfg-gone'")
    got = prune_store(db, orphans=True, config_hash="cfg-gone")
    assert got.orphans == {"cfg-gone": ["h-a"]} and _counts(db) == (1, 1)


def test_vacuum_alone_is_a_kind_to_run(tmp_path: Path):
    """--vacuum with no other kind runs (it deletes nothing); no kind at all is refused."""
    _, db, _ = _store(tmp_path, 2)
    got = prune_store(db, vacuum_store=True)
    assert got.vacuumed and got.counts()["clips"] == 0 and _counts(db) == (2, 2)
    assert got.size_after == Path(db).stat().st_size


def test_a_sqlite_file_without_the_meta_table_is_no_store(tmp_path: Path):
    db = tmp_path / "x.sqlite"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE results (x TEXT)")
        conn.execute("CREATE TABLE clips (x TEXT)")
    with pytest.raises(StoreError, match="no meta table"):
        prune_store(str(db), orphans=True)


def _crashed(store, job, config, ids, lease_s=0.3):
    q = WorkQueue(store, job, config, job.upper(), lease_s=lease_s)
    q.enqueue(ids)
    assert q.claim() == ids[0]
    return q


def test_stale_jobs_of_one_config_only(pg_url):
    """--config-hash H with --stale-jobs: only H's crashed job goes (H, held by a heartbeat
    row only, is a config the store holds)."""
    with ResultStore(pg_url) as st:
        _crashed(st, "dead-a", "cfgA", ["a0", "a1", "a2"])
        _crashed(st, "dead-b", "cfgB", ["b0", "b1"])
        time.sleep(0.6)  # the 0.3 s heartbeats and leases run out
        got = prune_store(pg_url, stale=True, config_hash="cfgB")
        assert got.jobs == [("dead-b", "cfgB", 2)]
        assert [r[0] for r in st.select("SELECT DISTINCT job FROM work")] == ["dead-a"]


def test_a_job_with_an_expired_heartbeat_but_a_live_lease_stays(pg_url):
    """A job whose heartbeat ran out while one of its rows still holds a live lease is not
    crashed: prune leaves its rows."""
    with ResultStore(pg_url) as st:
        _crashed(st, "slow", "cfg", ["x", "y"], lease_s=60)
        st.transaction(lambda: st.execute(
            "UPDATE work_jobs SET alive_until = now() - interval '1 minute' WHERE job = ?",
            ("slow",)))
        assert prune_store(pg_url, stale=True).jobs == []
        assert st.select("SELECT COUNT(*) FROM work WHERE job = 'slow'") == [(2,)]


# --- store.py: counts, JSONL ids, foreign files -------------------------------------------------
def test_config_counts_of_jsonl_put_a_non_string_hash_under_none(tmp_path: Path):
    lines = [fake_result("a", config_hash="cfg"), fake_result("b", config_hash="cfg"),
             {**fake_result("c"), "config_hash": 5}]
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert config_counts(p) == {"cfg": 2, None: 1}


def test_config_counts_of_a_store_count_the_rows_a_reader_gets(tmp_path: Path):
    """A re-rendered clip leaves its old result behind (no clip row points at it): the count is
    that of load_results (the clip rows joined to results), not of the results table."""
    rows, db, cfg = _store(tmp_path, 3)
    Path(rows[0]["path"]).write_bytes(b"re-rendered c0")
    run_manifest(tmp_path / "m.jsonl", db, score_fn=CountingScorer(), progress=False)
    assert _counts(db) == (3, 4)
    assert config_counts(db) == {cfg: 3} == {cfg: len(load_results(db, config_hash=cfg))}


def test_jsonl_clip_ids_are_unique_per_config_not_across_configs(tmp_path: Path):
    """One file scored under two configs: its id repeats across configs, which is no clash
    (neither an error nor a renamed id)."""
    lines = [{**fake_result("v", config_hash=c), "path": "/data/sora/v.mp4"}
             for c in ("cfg1", "cfg2")]
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in lines))
    got = load_results(p)
    assert sorted((r["config_hash"], r["clip_id"]) for r in got) == [("cfg1", "v"),
                                                                       ("cfg2", "v")]


def test_jsonl_rows_of_one_config_only(tmp_path: Path):
    """load_results(jsonl, config_hash=H) returns H's rows only (a report of one config never
    pools another's rows); config_counts tells both."""
    lines = [fake_result("a", config_hash="cfg1"), fake_result("b", config_hash="cfg2"),
             fake_result("c", config_hash="cfg1")]
    p = tmp_path / "r.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in lines))
    assert config_counts(p) == {"cfg1": 2, "cfg2": 1}
    got = load_results(p, config_hash="cfg1")
    assert sorted((r["config_hash"], r["clip_id"]) for r in got) == [("cfg1", "a"),
                                                                       ("cfg1", "c")]


def test_readers_refuse_a_foreign_file_with_a_results_table_only(tmp_path: Path):
    """Another program's database with a "results" table (but no clips table) is no store:
    refused, and left without geocon tables."""
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE results (x TEXT)")
    with pytest.raises(StoreError, match="not a geocon result store"):
        load_results(other)
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["results"]


# --- stats.py: mixed versions -----------------------------------------------------------------
def test_flat_rows_of_two_versions_warn():
    """Rows a caller flattened itself (no ``result``) are counted for the warning too."""
    from geocon_torch.bench import stats

    flat = [{"clip_id": "a", "generator": "g", "status": "ok", "seed": 1, "ir": 0.9,
             "version": "1.0"},
            {"clip_id": "b", "generator": "g", "status": "ok", "seed": 2, "ir": 0.5,
             "version": "2.0"}]
    with pytest.warns(UserWarning, match=r"2 geocon_torch versions \(1.0: 1 clip, 2.0: 1 clip"):
        stats.scene_values(flat, "ir")


def test_version_counts_read_the_result_when_the_row_has_no_version():
    from geocon_torch.bench import stats

    rows = [{"clip_id": c, "result": {**fake_result(c), "version": v}}
            for c, v in (("a", "1.0"), ("b", "1.0"), ("c", "2.0"))]
    assert stats.version_counts(rows) == {"1.0": 2, "2.0": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert stats.version_counts(rows[:2]) == {"1.0": 2}
