"""A dynamic (PostgreSQL) bench run stopped by Ctrl-C / SystemExit / SIGTERM hands its unfinished
claims back on the way out (audit s20 F3): a re-run starts scoring them at once instead of
waiting up to ``lease_s`` for leases nobody renews (tests/pg_server.py's throw-away server)."""
from __future__ import annotations

import time

import pytest
from helpers import CountingScorer, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, StoreError, run_manifest
from geocon_torch.bench.claims import LeaseKeeper, WorkQueue
from geocon_torch.bench.store import StoreConnectionError

LEASE_S = 30.0  # a re-run waiting for a lease would take this long


def _work(url: str):
    """(rows, done, not done with a live lease, not done with an owner) of the work table."""
    with ResultStore(url) as s:
        return tuple(s.select(
            "SELECT count(*), count(*) FILTER (WHERE done), "
            "count(*) FILTER (WHERE NOT done AND lease_until >= now()), "
            "count(*) FILTER (WHERE NOT done AND owner IS NOT NULL) FROM work")[0])


class _StopAt(CountingScorer):
    """Scores clip by clip; raises ``exc`` at clip ``at`` (after its batch was claimed)."""

    def __init__(self, at: str, exc: BaseException):
        super().__init__()
        self.at, self.exc = at, exc

    def __call__(self, entry, config, device):
        if entry.clip_id == self.at:
            raise self.exc
        return super().__call__(entry, config, device)


@pytest.mark.parametrize("exc", [KeyboardInterrupt(), SystemExit(143)],
                         ids=["KeyboardInterrupt", "SystemExit"])
def test_interrupted_rank_hands_its_claims_back_and_a_rerun_starts_at_once(tmp_path, pg_url,
                                                                          exc):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 6))
    stop = _StopAt("c2", exc)
    with pytest.raises(type(exc)):  # batches (c0, c1) stored, (c2, c3) claimed when it stops
        run_manifest(m, pg_url, score_fn=stop, progress=False, batch_clips=2, lease_s=LEASE_S)
    assert stop.calls == ["c0", "c1"]
    # 6 rows, 2 done; before the fix c2 and c3 kept a live lease (and owner) for LEASE_S
    assert _work(pg_url) == (6, 2, 0, 0)
    again = CountingScorer()
    t0 = time.monotonic()
    s = run_manifest(m, pg_url, score_fn=again, progress=False, batch_clips=2, lease_s=LEASE_S)
    took = time.monotonic() - t0
    assert (s.computed, s.skipped) == (4, 2) and again.calls == ["c2", "c3", "c4", "c5"]
    assert took < LEASE_S / 3, f"the re-run waited {took:.1f} s for leases"
    with ResultStore(pg_url) as st:
        assert sorted(r["clip_id"] for r in st.rows()) == [f"c{i}" for i in range(6)]


def test_a_failed_release_never_hides_the_interrupt(tmp_path, pg_url, monkeypatch):
    """The release is best effort: a store error while handing claims back is logged and the
    interrupt goes on (the claims then expire after lease_s, as after a kill)."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 4))
    tried = []

    def broken(self):
        tried.append(self.owner)
        raise StoreError("server gone")

    monkeypatch.setattr(WorkQueue, "release", broken)
    with pytest.raises(KeyboardInterrupt):
        run_manifest(m, pg_url, score_fn=_StopAt("c1", KeyboardInterrupt()), progress=False,
                     batch_clips=2, lease_s=LEASE_S)
    assert len(tried) == 1
    assert _work(pg_url)[1:] == (1, 1, 1)  # c0 stored; c1 still leased: not released


def test_release_frees_only_this_owners_unfinished_rows(pg_url):
    with ResultStore(pg_url) as a_store, ResultStore(pg_url) as b_store:
        a = WorkQueue(a_store, "job1", "cfg", "A", lease_s=LEASE_S)
        b = WorkQueue(b_store, "job1", "cfg", "B", lease_s=LEASE_S)
        a.enqueue(["x", "y", "z"])
        assert a.claim_many(2) == ["x", "y"] and b.claim() == "z"
        a.finish("x")
        assert a.release() == 1  # y; x is done, z is B's
        assert b.claim() == "y"  # at once, no lease to wait for
        assert a.release() == 0 and a.claim() is None  # y and z are B's, x is done


def test_lease_keeper_hands_back_on_any_exception_but_a_lost_server(pg_url, monkeypatch):
    """A bug or an interrupt releases; a lost server is not asked again (the store already
    retried it for --store-timeout: the claims expire as a killed rank's); a normal end has
    nothing to release."""
    calls = []
    monkeypatch.setattr(WorkQueue, "release", lambda self: calls.append(self.owner) or 0)
    with ResultStore(pg_url) as s:
        q = WorkQueue(s, "job", "cfg", "A", lease_s=LEASE_S)
        for exc in (StoreConnectionError("gone"), RuntimeError("bug"), KeyboardInterrupt()):
            with pytest.raises(type(exc)):
                with LeaseKeeper(q):
                    raise exc
        with LeaseKeeper(q):
            pass
    assert calls == ["A", "A"]
