"""Dynamic work claiming on a PostgreSQL store: ranks take the next unscored manifest row
instead of a fixed ``r::N`` share, so one rank with long clips does not hold the whole job.

One run is one *job* (an id every rank of the run shares: rank 0 draws it and broadcasts it).
Every rank enqueues the manifest's clip ids into the ``work`` table (idempotent: the first
rank's insert wins), then loops:

1. claim the next rows in manifest order (up to the runner's ``batch_clips`` at a time):
   ``SELECT ... FOR UPDATE SKIP LOCKED`` picks rows that are not done and not leased (or whose
   lease has expired, or that this rank already owns and is not scoring: a claim whose reply
   was lost), then ``lease_until = now() + lease`` on the server's clock; a clip leased by
   another live job on the same config is left alone. Claims on one config are serialised by
   a transaction advisory lock (per config hash), so the claim query of one job sees every
   lease another job committed before it (two jobs never claim the same clip at once);
2. score them (as one batch) and commit each result together with its ``done = TRUE`` (one
   transaction per clip), or mark a row done when the store already holds it. A rank scores a
   content only while it holds a session advisory lock on (config, content key)
   (:meth:`WorkQueue.lock_content`): a clip whose bytes another rank or job scores right now
   (the same file under another clip id) is handed back for a moment
   (:meth:`WorkQueue.defer`) and linked once that result is stored, so identical bytes are
   scored once across ranks and jobs, as within one rank;
3. when nothing is claimable but rows are still leased by other ranks, wait and look again:
   a killed rank's leases expire and its rows are taken by the others.

A :class:`LeaseKeeper` thread (its own connection) renews this rank's leases every
``lease_s / 3`` s while it scores, so a clip is never taken from a live rank however long it
takes; a killed rank stops renewing and its claim expires after ``lease_s``, while a rank
stopped by an exception (Ctrl-C, SIGTERM through the CLI, SystemExit, a bug; not a lost
server) hands its unfinished claims back on the way out (:meth:`WorkQueue.release`), so the
other ranks or a re-run take them at once. The same thread renews the job's heartbeat
(``work_jobs.alive_until``, set when the job enqueues its rows; a renewal only extends a heartbeat
that is there, never re-creates one). A job whose ranks all stalled longer than ``lease_s`` (a
suspended node, a partition shorter than the store timeout) may meanwhile be taken for a crashed
one and lose its rows: its keeper then finds no heartbeat, and a rank that finds no open row
puts back the manifest's clips the store lacks (:meth:`WorkQueue.resume`, under a grace lease so
no rank's clip in flight is handed out twice) instead of ending with them unscored. A re-run is
a new job: it re-checks every row against the results (exactly what is missing is scored), and
its rank 0 first deletes the work rows of crashed jobs of any config (:func:`drop_stale_jobs`:
heartbeat expired and no live lease; a live job is never touched); ``geocon prune
--stale-jobs`` does the same without a run (:func:`stale_jobs`); :func:`live_jobs` lists the
jobs that live.
"""
from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import uuid
from collections import Counter
from typing import Callable, Dict, List, Optional, Sequence, Set, Tuple

from ..errors import InputError
from .pg_store import PostgresStore
from .store import Statement, StoreConnectionError

log = logging.getLogger("geocon_torch.bench")

#: the most seconds a rank on its way out spends handing its claims back (a lost server is not
#: waited for: the claims then expire after lease_s, as a killed rank's)
RELEASE_TIMEOUT_S = 5.0

#: advisory lock class of the per-config claim lock (two-key form: its own key space)
CLAIM_LOCK_CLASS = 0x636C_6D00  # "clm"
_CLAIM_LOCK = "SELECT pg_advisory_xact_lock(?::integer, hashtext(?))"
#: advisory lock class of the per-(config, content) scoring lock (session level, two-key form)
CONTENT_LOCK_CLASS = 0x636E_7400  # "cnt"
_HEARTBEAT = ("INSERT INTO work_jobs (job, config_hash, alive_until) "
              "VALUES (?, ?, now() + ? * interval '1 second') ON CONFLICT (job) DO UPDATE "
              "SET alive_until = GREATEST(work_jobs.alive_until, excluded.alive_until)")
# a renewal extends the heartbeat that is there: no row back means the job was reaped
_RENEW_JOB = ("UPDATE work_jobs SET alive_until = GREATEST(alive_until, now() + ? * interval "
              "'1 second') WHERE job = ? RETURNING job")
# this owner's open rows, and the rows of the job it holds that were put back ownerless
# (:meth:`WorkQueue.resume`) while it still scores them
_RENEW_LEASES = """
UPDATE work SET owner = ?, lease_until = now() + ? * interval '1 second'
WHERE NOT done AND (owner = ? OR (job = ? AND owner IS NULL AND clip_id = ANY(?::text[])))
RETURNING clip_id
"""
# rows put back after a reaping: the caller's held clips as its own, the others ownerless, all
# under a lease (the grace: no rank claims them before every live rank's keeper took back
# the clips it is still scoring)
_PUT_BACK = """
INSERT INTO work (job, clip_id, config_hash, position, owner, lease_until)
SELECT ?, u.clip_id, ?, u.position, CASE WHEN u.clip_id = ANY(?::text[]) THEN ? END,
       now() + ? * interval '1 second'
FROM unnest(?::text[], ?::bigint[]) AS u(clip_id, position)
ON CONFLICT (job, clip_id) DO NOTHING
"""
# a job lives while its heartbeat runs or one of its rows holds a live lease (the complement
# of _STALE_JOBS)
_LIVE_JOBS = """
SELECT j.job, j.config_hash,
       (SELECT count(*) FROM work w WHERE w.job = j.job AND NOT w.done)
FROM work_jobs j
WHERE (j.alive_until >= now() OR EXISTS (SELECT 1 FROM work w WHERE w.job = j.job
                                         AND NOT w.done AND w.lease_until >= now())){config}
ORDER BY j.job
"""
# jobs (of one config, or of every config), other than the caller's, whose heartbeat expired
# and that hold no live lease; their heartbeat rows are locked (a keeper renewing one right now
# is skipped). {config} is "" or the config filter below.
_STALE_JOBS = """
SELECT j.job, j.config_hash FROM work_jobs j
WHERE j.job <> ? AND j.alive_until < now(){config}
  AND NOT EXISTS (SELECT 1 FROM work w
                  WHERE w.job = j.job AND NOT w.done AND w.lease_until >= now())
FOR UPDATE OF j SKIP LOCKED
"""
_STALE_CONFIG = " AND j.config_hash = ?"
# the job's open rows that another job's live lease on the same clip (and config) keeps from
# being claimed: per other job, the clips and the seconds until its last lease runs out
_BLOCKED = """
SELECT o.job, COUNT(DISTINCT w.clip_id), EXTRACT(EPOCH FROM MAX(o.lease_until) - now())
FROM work w JOIN work o ON o.config_hash = w.config_hash AND o.clip_id = w.clip_id
WHERE w.job = ? AND NOT w.done AND o.job <> w.job AND NOT o.done AND o.lease_until >= now()
GROUP BY o.job ORDER BY o.job
"""
# the job's rows, inserted once (ranks racing here wait on the job's advisory lock)
_ENQUEUE = """
INSERT INTO work (job, clip_id, config_hash, position)
SELECT ?, u.clip_id, ?, u.position FROM unnest(?::text[], ?::bigint[]) AS u(clip_id, position)
ON CONFLICT DO NOTHING
"""

_CLAIM = """
WITH pick AS (
    SELECT w.job, w.clip_id FROM work w
    WHERE w.job = ? AND NOT w.done
      AND (w.lease_until IS NULL OR w.lease_until < now() OR w.owner = ?)
      AND NOT (w.clip_id = ANY(?::text[]))
      AND NOT EXISTS (SELECT 1 FROM work o
                      WHERE o.config_hash = w.config_hash AND o.clip_id = w.clip_id
                        AND o.job <> w.job AND NOT o.done AND o.lease_until >= now())
    ORDER BY w.position LIMIT ?
    FOR UPDATE OF w SKIP LOCKED)
UPDATE work SET owner = ?, lease_until = now() + ? * interval '1 second',
    claims = work.claims + 1
FROM pick WHERE work.job = pick.job AND work.clip_id = pick.clip_id
RETURNING work.clip_id, work.position
"""


def new_owner() -> str:
    """A claim owner id: host, pid and a random suffix (unique per process start)."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


def new_job(config_hash: str, clip_ids: Sequence[str]) -> str:
    """A fresh job id (the run's nonce plus a digest of what it scores, for humans)."""
    digest = hashlib.sha256("\n".join([config_hash, *clip_ids]).encode()).hexdigest()[:12]
    return f"{digest}-{uuid.uuid4().hex[:12]}"


class WorkQueue:
    """The ``work`` rows of one job on a :class:`PostgresStore`.

    Args:
        store: the rank's store (claims and "done" marks go through its connection).
        job: the job id every rank of the run shares.
        config_hash: the run's config hash.
        owner: this rank's owner id (:func:`new_owner`).
        lease_s: seconds a claim holds without renewal.
    """

    def __init__(self, store: PostgresStore, job: str, config_hash: str, owner: str,
                 lease_s: float):
        self.store, self.job, self.config_hash = store, job, config_hash
        self.owner, self.lease_s = owner, float(lease_s)
        self.claimed = 0
        self.put_back = 0  # rows this rank put back after the job was reaped (:meth:`resume`)
        self.positions: Dict[str, int] = {}  # clip id -> manifest position (:meth:`enqueue`)
        #: set when a renewal found the job's heartbeat gone (its rows were deleted as a
        #: crashed job's); cleared when this rank puts the rows back
        self.reaped = threading.Event()
        self._held: Set[str] = set()  # claimed by this rank and not stored yet
        self._lock = threading.Lock()

    def enqueue(self, clip_ids: Sequence[str]) -> None:
        """Insert the job's rows once (ranks racing here wait on the job's advisory lock) and
        start (or renew) the job's heartbeat, in one transaction."""
        self.positions = {cid: pos for pos, cid in enumerate(clip_ids)}

        def tx():
            self.store.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (self.job,))
            self.store.execute(*self.heartbeat_statement())
            have = self.store.execute("SELECT COUNT(*) FROM work WHERE job = ?", (self.job,))
            if have[0][0] >= len(clip_ids):
                return
            self.store.execute(_ENQUEUE, (self.job, self.config_hash, list(clip_ids),
                                          list(range(len(clip_ids)))))
        self.store.transaction(tx)

    def blocked(self) -> List[Tuple[str, int, float]]:
        """``(job, clips, seconds)`` for each other job whose live lease on a clip of the same
        config keeps open rows of this job from being claimed (a live job scoring them, or a
        killed run's claims, which run out after its lease): the clips it holds, and the
        seconds until its last such lease runs out (one read)."""
        return [(str(j), int(n), max(0.0, float(left)))
                for j, n, left in self.store.select(_BLOCKED, (self.job,))]

    def claim(self) -> Optional[str]:
        """The clip id this rank now holds a lease on, or None when nothing is claimable."""
        got = self.claim_many(1)
        return got[0] if got else None

    def claim_many(self, n: int, exclude: Sequence[str] = ()) -> List[str]:
        """Up to ``n`` clip ids this rank now holds leases on (the next claimable rows, in
        manifest order; one transaction), or [] when nothing is claimable. ``exclude``: rows
        this rank holds and is still scoring (not to be handed out to it again)."""
        if n < 1:
            raise InputError(f"claim_many needs n >= 1, got {n!r}")

        def tx() -> List[tuple]:
            # one claim at a time per config: the claim query's snapshot (taken after the
            # lock) holds every lease another job's claim committed before
            self.store.execute(_CLAIM_LOCK, (CLAIM_LOCK_CLASS, self.config_hash))
            return self.store.execute(
                _CLAIM, (self.job, self.owner, list(exclude), int(n), self.owner, self.lease_s))

        rows = self.store.transaction(tx)
        self.claimed += len(rows)
        with self._lock:
            self._held.update(cid for cid, _ in rows)
        return [cid for cid, _ in sorted(rows, key=lambda r: r[1])]

    def lock_content(self, key: str) -> bool:
        """Take this rank's lock on scoring the content ``key`` under the job's config (a
        session advisory lock, :data:`CONTENT_LOCK_CLASS`; never waits): False when another
        rank or job holds it (it scores the same bytes right now). Held until
        :meth:`unlock_content`, or until the rank's connection ends (a killed rank)."""
        return bool(self.store.select("SELECT pg_try_advisory_lock(?::integer, hashtext(?))",
                                      (CONTENT_LOCK_CLASS, f"{self.config_hash}/{key}"))[0][0])

    def unlock_content(self, key: str) -> None:
        """Release :meth:`lock_content`'s lock on ``key`` (stored, or found stored)."""
        self.store.select("SELECT pg_advisory_unlock(?::integer, hashtext(?))",
                          (CONTENT_LOCK_CLASS, f"{self.config_hash}/{key}"))

    def defer_s(self) -> float:
        """Seconds a row handed back by :meth:`defer` stays unclaimable: a quarter of the
        lease, 0.5 s to 5 s."""
        return min(5.0, max(0.5, self.lease_s / 4.0))

    def defer(self, clip_id: str) -> None:
        """Hand ``clip_id`` back for :meth:`defer_s` seconds (owner cleared, lease kept that
        long): its bytes are scored by another rank or job right now; whoever claims it next
        finds the result stored and links it (or scores it, when that scorer died)."""
        def tx() -> None:
            self.store.execute(
                "UPDATE work SET owner = NULL, lease_until = now() + ? * interval '1 second' "
                "WHERE job = ? AND clip_id = ? AND owner = ? AND NOT done",
                (self.defer_s(), self.job, clip_id, self.owner))
        self.store.transaction(tx)
        self.settle(clip_id)

    def settle(self, clip_id: str) -> None:
        """``clip_id`` is stored (its row done): this rank no longer holds it."""
        with self._lock:
            self._held.discard(clip_id)

    def held(self) -> List[str]:
        """The clip ids this rank claimed and has not stored yet, sorted."""
        with self._lock:
            return sorted(self._held)

    def renew(self, store: PostgresStore) -> List[str]:
        """Extend the job's heartbeat and this rank's leases by ``lease_s`` (one transaction on
        ``store``: the lease keeper's own connection) and return the clip ids renewed. A
        heartbeat that is gone is not re-created: the job was reaped (its rows deleted as a
        crashed job's while every rank stalled), :attr:`reaped` is set and logged, and the
        first rank that finds no open row puts the clips back (:meth:`resume`). Rows put back
        ownerless that this rank still scores are taken back as its own."""
        def tx() -> Tuple[bool, List[tuple]]:
            alive = bool(store.execute(_RENEW_JOB, (self.lease_s, self.job)))
            rows = store.execute(_RENEW_LEASES, (self.owner, self.lease_s, self.owner,
                                                 self.job, self.held()))
            return alive, rows

        alive, rows = store.transaction(tx)
        if alive:
            self.reaped.clear()
        elif not self.reaped.is_set():
            self.reaped.set()
            log.warning("geocon store: job %s has no heartbeat any more: it was reaped as a "
                        "crashed job while its ranks stalled longer than the lease (%.0f s); "
                        "its clips the store lacks are put back when a rank finds no open row",
                        self.job, self.lease_s)
        return [r[0] for r in rows]

    def resume(self, remaining: Callable[[], Sequence[str]]) -> int:
        """What a rank that finds no open row of the job does before ending: the number of
        open rows the job has now (0: the job is done).

        When the job's heartbeat is gone (the job was reaped: its rows deleted as a crashed
        job's), the clip ids ``remaining()`` returns (called inside the transaction, on
        :attr:`store`: the manifest's clips the store lacks, :func:`~.runner.run_manifest`)
        are put back with a new heartbeat, in one transaction under the job's advisory lock
        (the first rank puts them back, the others find the heartbeat). Each row put back
        holds a lease of ``lease_s`` (this rank's held clips as its own, the others
        ownerless): a live rank still scoring one takes it back as its own at its next renewal
        (:meth:`renew`), the rest are claimable once the lease runs out, so no clip in flight
        is handed out twice. Nothing is put back (and no heartbeat re-created) when nothing
        remains."""
        def tx() -> Tuple[int, int]:
            self.store.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (self.job,))
            if self.store.execute("SELECT 1 FROM work_jobs WHERE job = ?", (self.job,)):
                return self._open(), 0
            todo = sorted({c for c in remaining() if c in self.positions},
                          key=self.positions.__getitem__)
            if not todo:
                return 0, 0
            self.store.execute(*self.heartbeat_statement())
            self.store.execute(_PUT_BACK, (
                self.job, self.config_hash, self.held(), self.owner, self.lease_s, todo,
                [self.positions[c] for c in todo]))
            return self._open(), len(todo)

        open_rows, put = self.store.transaction(tx)
        if put:
            self.put_back += put
            self.reaped.clear()
            log.warning("geocon store: job %s was reaped while its ranks stalled longer than the "
                        "lease (%.0f s): its work rows were deleted as a crashed job's (geocon "
                        "prune --stale-jobs, or another job's start); put %d clip(s) of the "
                        "manifest that the store lacks back in the queue (claimable in %.0f s, "
                        "once every live rank took back the clips it is scoring)",
                        self.job, self.lease_s, put, self.lease_s)
        return open_rows

    def _open(self) -> int:
        """Open rows of the job (inside a transaction)."""
        return int(self.store.execute("SELECT COUNT(*) FROM work WHERE job = ? AND NOT done",
                                      (self.job,))[0][0])

    def heartbeat_statement(self) -> Statement:
        """The statement that starts the job's heartbeat, or keeps it alive for ``lease_s``
        more seconds (``work_jobs.alive_until``; never shortened by another rank's renewal):
        :meth:`enqueue` and :meth:`resume` only; a renewal never re-creates it (:meth:`renew`)."""
        return _HEARTBEAT, (self.job, self.config_hash, self.lease_s)

    def done_statement(self, clip_id: str) -> Statement:
        """The statement that marks ``clip_id`` done (committed with its result)."""
        return ("UPDATE work SET done = TRUE, lease_until = NULL WHERE job = ? AND clip_id = ?",
                (self.job, clip_id))

    def release(self) -> int:
        """Hand this rank's unfinished claims back (owner and lease cleared, one transaction):
        another rank of the job, or a re-run's new job, claims them at once instead of waiting
        for the lease to expire. Returns the number of rows released."""
        def tx() -> List[tuple]:
            return self.store.execute(
                "UPDATE work SET owner = NULL, lease_until = NULL "
                "WHERE job = ? AND owner = ? AND NOT done RETURNING clip_id",
                (self.job, self.owner))
        n = len(self.store.transaction(tx))
        with self._lock:
            self._held.clear()
        return n

    def finish(self, clip_id: str) -> None:
        """Mark a row done on its own (the store already held its result)."""
        sql, params = self.done_statement(clip_id)
        self.store.transaction(lambda: self.store.execute(sql, params))
        self.settle(clip_id)

    def pending(self) -> int:
        """Rows of the job not done yet (claimed by someone or not)."""
        return int(self.store.select("SELECT COUNT(*) FROM work WHERE job = ? AND NOT done",
                                     (self.job,))[0][0])

    def finished(self) -> bool:
        """True when every row of the job is done (cheap: the partial index of open rows)."""
        return not self.store.select("SELECT 1 FROM work WHERE job = ? AND NOT done LIMIT 1",
                                     (self.job,))



def drop_job(store: PostgresStore, job: Optional[str]) -> None:
    """Delete the finished rows of ``job`` (rank 0, once every rank is done), and its heartbeat
    when no row of it is left."""
    if not job:
        return

    def tx() -> None:
        store.execute("DELETE FROM work WHERE job = ? AND done", (job,))
        store.execute("DELETE FROM work_jobs WHERE job = ? AND NOT EXISTS "
                      "(SELECT 1 FROM work WHERE job = ?)", (job, job))
    store.transaction(tx)


def stale_jobs(store: PostgresStore, config_hash: Optional[str] = None,
               keep: Optional[str] = None, *, dry_run: bool = False
               ) -> List[Tuple[str, str, int]]:
    """Delete the work rows and heartbeats of crashed jobs, in one transaction: jobs other than
    ``keep`` whose heartbeat expired (no rank of theirs renewed it for their own lease) and none
    of whose rows holds a live lease, of ``config_hash`` (None: of every config). A live job is
    never touched, whatever its config: its ranks' lease keepers renew its heartbeat every
    ``lease_s / 3`` s and its claims while they score; a heartbeat row that a keeper is renewing
    right now is skipped (locked). A job all of whose ranks stalled longer than their lease
    (a suspended node) looks crashed and goes: when it resumes it puts back what the store
    lacks (:meth:`WorkQueue.resume`). Work rows of a job without a heartbeat row (written by a
    geocon_torch older than the heartbeat) are left alone: nothing tells whether that job lives.

    Args:
        store: the PostgreSQL store holding the ``work`` / ``work_jobs`` tables.
        config_hash: only jobs of this config (None: every config).
        keep: a job id never deleted (the caller's own job; None: none).
        dry_run: find the jobs and count their rows, delete nothing.

    Returns:
        ``(job, config_hash, work rows)`` of each crashed job deleted (or, with ``dry_run``,
        that would be), by job id.
    """
    sql = _STALE_JOBS.format(config="" if config_hash is None else _STALE_CONFIG)
    params = ("" if keep is None else keep,) + (() if config_hash is None else (config_hash,))

    def tx() -> List[Tuple[str, str, int]]:
        jobs = dict(store.execute(sql, params))
        if not jobs:
            return []
        ids = sorted(jobs)
        if dry_run:
            counts = dict(store.execute("SELECT job, COUNT(*) FROM work WHERE job = "
                                        "ANY(?::text[]) GROUP BY job", (ids,)))
        else:
            gone = store.execute("DELETE FROM work WHERE job = ANY(?::text[]) RETURNING job",
                                 (ids,))
            store.execute("DELETE FROM work_jobs WHERE job = ANY(?::text[])", (ids,))
            counts = Counter(r[0] for r in gone)
        return [(j, jobs[j], int(counts.get(j, 0))) for j in ids]

    out = store.transaction(tx)
    if out and not dry_run:
        log.info("geocon store: removed %d work row(s) of %d crashed job(s) of config(s) %s",
                 sum(n for _, _, n in out), len(out), ", ".join(sorted({c for _, c, _ in out})))
    return out


def live_jobs(store: PostgresStore, configs: Optional[Sequence[str]] = None
              ) -> List[Tuple[str, str, int]]:
    """``(job, config hash, open work rows)`` of the jobs that live on ``store`` (heartbeat
    not expired, or a row with a live lease: what :func:`stale_jobs` never touches), of
    ``configs`` (None: of every config), by job id."""
    sql = _LIVE_JOBS.format(config="" if configs is None
                            else " AND j.config_hash = ANY(?::text[])")
    params = () if configs is None else (list(configs),)
    return [(j, c, int(n)) for j, c, n in store.select(sql, params)]


def drop_stale_jobs(store: PostgresStore, config_hash: Optional[str], keep: str) -> int:
    """Delete the work rows (and heartbeats) of the crashed jobs of ``config_hash`` (None: of
    every config) other than ``keep`` (:func:`stale_jobs`). Returns the number of work rows
    deleted (rank 0 calls this, for every config, when a new job starts and ends)."""
    return sum(n for _, _, n in stale_jobs(store, config_hash, keep))


class LeaseKeeper:
    """A daemon thread renewing ``queue.owner``'s leases and the job's heartbeat every
    ``lease_s / 3`` s on its own connection, while the rank scores. A failed renewal is logged
    and tried again. Leaving the block with an exception (KeyboardInterrupt and SystemExit
    included; not a lost server) hands the rank's unfinished claims back (best effort, at most
    :data:`RELEASE_TIMEOUT_S`; a failure is logged and the exception goes on)."""

    def __init__(self, queue: WorkQueue):
        self.queue = queue
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="geocon-lease", daemon=True)
        self._store: Optional[PostgresStore] = None
        self.renewals: List[int] = []

    def _loop(self) -> None:
        q = self.queue
        while not self._stop.wait(q.lease_s / 3.0):
            try:
                if self._store is None:
                    self._store = q.store.clone()
                self.renewals.append(len(q.renew(self._store)))
            except Exception as exc:  # noqa: BLE001 - the scorer thread must go on
                log.warning("geocon store: lease renewal failed (%s); trying again", exc)

    def __enter__(self) -> "LeaseKeeper":
        self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        if self._store is not None:
            self._store.close()
        # a lost server is not asked again: the claims then expire, as a killed rank's
        if exc_type is not None and not issubclass(exc_type, StoreConnectionError):
            self._release()

    def _release(self) -> None:
        """:meth:`WorkQueue.release` on the rank's own connection (the one that claimed, so no
        row lock of an interrupted claim stands in the way), retried for at most
        :data:`RELEASE_TIMEOUT_S`."""
        q = self.queue
        store = q.store
        timeout = getattr(store, "timeout_s", None)
        if timeout is not None:
            store.timeout_s = min(timeout, RELEASE_TIMEOUT_S)
        try:
            n = q.release()
            log.info("geocon store: handed back %d unfinished claim(s) of %s", n, q.owner)
        except Exception as exc:  # noqa: BLE001 - never hide the exception that stopped the rank
            log.warning("geocon store: could not hand back the claims of %s (%s); they are "
                        "taken again when their lease expires (%.0f s)", q.owner, exc, q.lease_s)
        finally:
            if timeout is not None:
                store.timeout_s = timeout
