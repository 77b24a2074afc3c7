"""A dynamic (PostgreSQL) job whose ranks all stall longer than ``lease_s`` (a suspended node, a
swap storm, a partition shorter than ``--store-timeout``) has its work rows deleted as a crashed
job's (``geocon prune --stale-jobs``, or another job's start): on resuming it must notice, put
its unscored clips back and store every clip, scoring none twice (audit s22 pgconc F1). And a
run never ends as if done while a clip of its manifest has no stored row
(tests/pg_server.py's throw-away server; the last test on SQLite)."""
from __future__ import annotations

import threading
import time

import pytest
from helpers import CountingScorer, PruningScorer, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, StoreError, run_manifest
from geocon_torch.bench.claims import LeaseKeeper, WorkQueue
from geocon_torch.bench.pg_store import PostgresStore
from geocon_torch.bench.prune import prune_store

LEASE_S = 1.0


class _Gated:
    """A store whose transactions wait while ``paused`` is set (a lease keeper that stalls
    with its process); everything else is the wrapped store's."""

    def __init__(self, store, paused: threading.Event):
        self._store, self._paused = store, paused

    def transaction(self, fn):
        while self._paused.is_set():
            time.sleep(0.02)
        return self._store.transaction(fn)

    def __getattr__(self, name):
        return getattr(self._store, name)


def _counts(url: str):
    """(results, work rows, heartbeats) of the store."""
    with ResultStore(url) as s:
        return tuple(s.select("SELECT (SELECT count(*) FROM results), "
                              "(SELECT count(*) FROM work), (SELECT count(*) FROM work_jobs)")[0])


def test_a_job_reaped_while_it_stalled_puts_its_clips_back_and_stores_all(tmp_path, pg_url,
                                                                          monkeypatch, caplog):
    """The audit's reproducer in-process: the scorer stalls on c2 (and the lease keeper with
    it) past the lease, ``geocon prune --stale-jobs`` deletes the job's 8 rows meanwhile.
    Before the fix the job resumed, found no open row and returned with 5 of 8 clips never
    scored (and no word said)."""
    n = 8
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))
    paused = threading.Event()
    real_clone = PostgresStore.clone
    monkeypatch.setattr(PostgresStore, "clone", lambda self: _Gated(real_clone(self), paused))
    reaped = []

    class Stalling(CountingScorer):
        def __call__(self, entry, config, device):
            if entry.clip_id == "c2" and not reaped:
                paused.set()  # the whole process stalls: the keeper renews nothing
                time.sleep(LEASE_S * 1.6)  # heartbeat and c2's lease run out
                reaped.append(prune_store(pg_url, stale=True).counts())
                paused.clear()
            return super().__call__(entry, config, device)

    scorer = Stalling()
    s = run_manifest(m, pg_url, score_fn=scorer, progress=False, batch_clips=1, lease_s=LEASE_S)
    assert reaped == [{"clips": 0, "orphans": 0, "jobs": 1, "work_rows": n}]
    assert sorted(scorer.calls) == [f"c{i}" for i in range(n)]  # every clip once, none twice
    assert (s.computed, s.ok, s.requeued, s.missing) == (n, n, 5, [])  # c3..c7 put back
    assert _counts(pg_url) == (n, 0, 0)  # all stored; no work row nor heartbeat left behind
    assert any("was reaped" in r.getMessage() and "put 5 clip(s)" in r.getMessage()
               for r in caplog.records)


def test_the_lease_keeper_never_revives_a_reaped_job(pg_url):
    """Its renewal was an upsert: it re-created the heartbeat of a job whose rows were deleted,
    so the job looked alive and finished. Now a renewal that finds no heartbeat says so."""
    with ResultStore(pg_url) as s:
        q = WorkQueue(s, "job1", "cfg", "A", lease_s=0.3)
        q.enqueue(["x", "y"])
        assert q.claim() == "x"
        s.transaction(lambda: (s.execute("DELETE FROM work"), s.execute("DELETE FROM work_jobs")))
        with LeaseKeeper(q):
            time.sleep(0.5)  # a renewal or more
        assert s.select("SELECT count(*) FROM work_jobs") == [(0,)]
        assert q.reaped.is_set()


def test_put_back_rows_wait_for_the_ranks_still_scoring_them(pg_url):
    """After the job is reaped, rank A puts the unscored clips back. Rank B is still scoring x
    (its claim went with the rows): x must not be handed to A, B's keeper takes it back within
    the put-back rows' grace lease; y (nobody's) is A's once the grace is over."""
    with ResultStore(pg_url) as sa, ResultStore(pg_url) as sb:
        a = WorkQueue(sa, "job1", "cfg", "A", lease_s=LEASE_S)
        b = WorkQueue(sb, "job1", "cfg", "B", lease_s=LEASE_S)
        a.enqueue(["x", "y"])
        b.enqueue(["x", "y"])
        assert b.claim() == "x"
        sa.transaction(lambda: (sa.execute("DELETE FROM work"),
                                sa.execute("DELETE FROM work_jobs")))
        assert a.resume(lambda: ["x", "y"]) == 2
        assert a.resume(lambda: ["x", "y"]) == 2  # the job lives again: nothing put back twice
        assert a.claim_many(2) == []  # the grace lease: no rank's clip taken at once
        with LeaseKeeper(b):
            time.sleep(LEASE_S * 1.3)  # B's keeper renews x as B's; the grace runs out
            assert a.claim_many(2) == ["y"]
        assert sa.select("SELECT owner FROM work WHERE clip_id = 'x'") == [("B",)]
        # reaped again; this time B (still scoring x) puts the rows back: x is its own at once
        sa.transaction(lambda: (sa.execute("DELETE FROM work"),
                                sa.execute("DELETE FROM work_jobs")))
        assert b.resume(lambda: ["y", "x"]) == 2 and b.put_back == 2
        assert sa.select("SELECT clip_id, owner FROM work ORDER BY position") == [
            ("x", "B"), ("y", None)]


def test_a_run_that_ends_with_a_clip_of_its_manifest_unstored_fails(tmp_path):
    """A clip row deleted while the run goes on (here by the scorer of c3, standing in for a
    concurrent prune) leaves c1 of the manifest without any stored row: the run names it and
    fails instead of reporting the manifest done."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 5))
    db = tmp_path / "r.sqlite"

    with pytest.raises(StoreError, match=r"1 of the 5 clips of the manifest have no stored "
                                         r"row .*: c1; ") as err:
        run_manifest(m, db, score_fn=PruningScorer(db, at="c3", victim="c1"), progress=False)
    assert err.value.summary.missing == ["c1"] and err.value.summary.computed == 5
    again = run_manifest(m, db, score_fn=CountingScorer(), progress=False)
    assert (again.computed, again.skipped, again.linked, again.missing) == (0, 4, 1, [])
