"""Store maintenance for a leaderboard that runs for months: ``geocon prune``.

A store only grows: clip rows stay when clips or generators leave the manifest, a clip
re-rendered under the same id leaves its old result behind with no clip row pointing at it (an
*orphan*: no reader shows it, ``geocon merge`` copies it), and on PostgreSQL a crashed job's
work rows stay until a later job starts. :func:`prune_store` removes them, kind by kind:

* ``keep_manifest``: the clip rows (of the chosen configs) of clips the manifest left out:
  clip id not in the manifest, the ids read exactly as :func:`~.runner.run_manifest` reads them
  (:func:`~.manifest.load_manifest`: explicit ids, or ids derived from the paths), nor path (a
  clip still listed whose derived id changed as rows left: the next run re-links its row under
  the new id, without scoring it again). Their results stay (keyed by content, maybe shared
  with another clip id) unless ``orphans`` is given too.
* ``orphans``: ``results`` rows no clip row references (after the clip rows above are gone).
  Each delete re-checks, in the same statement, that no clip row points at the result.
* ``stale_jobs`` (PostgreSQL): the work rows and heartbeats of crashed jobs of any config
  (:func:`~.claims.stale_jobs`: heartbeat expired and no live lease; a live job is never
  touched). A SQLite store has no work queue.
* ``vacuum``: SQLite ``VACUUM`` (and a WAL checkpoint, so the files shrink; a connection still
  reading the store keeps the WAL from being truncated, which the report says:
  ``checkpoint_busy``); PostgreSQL ``VACUUM (ANALYZE)`` of the store's tables, outside a
  transaction (it makes the space reusable; it seldom gives it back to the operating system).

Deletes run in short transactions of :data:`CHUNK` rows (idempotent: a killed prune is finished
by running it again); ``dry_run`` reads and counts, and deletes nothing. Prune while no bench job
writes the store: a job running on an older manifest would write back the clip rows pruned. On
PostgreSQL the running jobs are known (``work_jobs``): deleting clip rows or orphans while a
job of the chosen config(s) lives is refused (:class:`StoreError` naming the jobs) unless
``force``; a dry run lists them. A SQLite store has no job registry: a commit of another
connection while the prune ran (``PRAGMA data_version``) becomes a note.
"""
from __future__ import annotations

import sqlite3
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Set, Tuple, Union

from ..errors import InputError
from .claims import live_jobs, stale_jobs
from .manifest import check_unique_ids, load_manifest
from .store import (ResultStore, StoreError, _is_sqlite, _probe_uri, _schema_names, _writable,
                    is_server_url)

#: keys deleted per transaction (SQLite's 999 parameters per statement are never reached)
CHUNK = 400
#: seconds SQLite's WAL checkpoint after VACUUM waits for readers to finish (then it reports
#: busy: :attr:`PruneReport.checkpoint_busy`) instead of the whole store timeout
CHECKPOINT_WAIT_S = 5.0
_STORE_TABLES = ("meta", "results", "clips")
_PG_TABLES = ("results", "clips", "work", "work_jobs")
_CLIPS = "SELECT clip_id, config_hash, content_hash, path FROM clips"
_RESULTS = "SELECT content_hash, config_hash FROM results"
_DELETE_CLIPS = "DELETE FROM clips WHERE config_hash = ? AND clip_id IN ({keys}) RETURNING 1"
_DELETE_ORPHANS = (
    "DELETE FROM results WHERE config_hash = ? AND content_hash IN ({keys}) AND NOT EXISTS "
    "(SELECT 1 FROM clips c WHERE c.content_hash = results.content_hash "
    "AND c.config_hash = results.config_hash) RETURNING 1")


@dataclass
class PruneReport:
    """What :func:`prune_store` deleted (or, with ``dry_run``, would delete).

    Attributes:
        store: the store's name (a PostgreSQL password masked).
        dry_run: nothing was deleted.
        store_kind: "sqlite" or "postgresql".
        clips: config hash -> clip ids of the clip rows not in the manifest, sorted.
        orphans: config hash -> content hashes of the results no clip row references, sorted.
        jobs: ``(job, config hash, work rows)`` of each crashed job (PostgreSQL).
        vacuumed: VACUUM ran.
        checkpoint_busy: SQLite: another connection was reading the store, so the WAL checkpoint
            after VACUUM could not truncate the ``-wal`` file (``size_after`` may exceed
            ``size_before`` until the last connection closes).
        size_before, size_after: bytes of the store before and after (SQLite: the file and its
            ``-wal``; PostgreSQL: the tables with their indexes), None when not measured.
        notes: lines for the reader (a kind that does not apply to the back end, live jobs, a
            store written meanwhile, a WAL that could not shrink).
    """

    store: str
    dry_run: bool
    store_kind: str = "sqlite"
    clips: Dict[str, List[str]] = field(default_factory=dict)
    orphans: Dict[str, List[str]] = field(default_factory=dict)
    jobs: List[Tuple[str, str, int]] = field(default_factory=list)
    vacuumed: bool = False
    checkpoint_busy: bool = False
    size_before: Optional[int] = None
    size_after: Optional[int] = None
    notes: List[str] = field(default_factory=list)

    def counts(self) -> Dict[str, int]:
        """Rows per kind: ``clips``, ``orphans``, ``jobs`` (crashed jobs) and ``work_rows``."""
        return {"clips": sum(map(len, self.clips.values())),
                "orphans": sum(map(len, self.orphans.values())),
                "jobs": len(self.jobs), "work_rows": sum(n for _, _, n in self.jobs)}


def _check_sqlite_store(path: Path) -> None:
    """Refuse a SQLite ``--db`` that prune must not open for writing: missing (InputError),
    read-only (the file or its folder), not SQLite or without the geocon tables (StoreError;
    opening it read-write would add them)."""
    if not path.exists():
        raise InputError(f"store not found: {path} (geocon prune maintains an existing store)")
    if not path.is_file():
        raise InputError(f"{path} is not a file: give a SQLite store or a PostgreSQL URL")
    folder = path.absolute().parent
    blocked = [what for what, where in ((f"the file {path}", path), (f"its folder {folder}",
                                                                       folder))
               if not _writable(where)]
    if blocked:
        raise StoreError(f"{path}: {' and '.join(blocked)} "
                         f"{'is' if len(blocked) == 1 else 'are'} read-only: geocon prune "
                         "deletes rows and needs write access (SQLite writes the -wal and -shm "
                         "files beside the store); nothing was changed")
    if not _is_sqlite(path):
        raise StoreError(f"{path}: not a SQLite file (geocon prune maintains a result store: "
                         "a SQLite file or a PostgreSQL URL)")
    conn = sqlite3.connect(_probe_uri(path), uri=True)
    try:
        tables = _schema_names(conn)
    except sqlite3.DatabaseError as exc:
        raise StoreError(f"{path}: cannot read the store ({exc})") from None
    finally:
        conn.close()
    missing = [t for t in _STORE_TABLES if t not in tables]
    if missing:
        raise StoreError(f"{path}: not a geocon result store (no {' / '.join(missing)} "
                         "table); nothing was changed")


def open_for_maintenance(db: Union[str, Path], *, timeout_s: float = 120.0) -> ResultStore:
    """The store ``db`` opened for writing, refusing (before anything is written) a SQLite path
    that does not exist, is read-only or is no geocon store (:func:`_check_sqlite_store`). A
    PostgreSQL store that refuses writes fails on open, with the server's message."""
    if not is_server_url(db):
        _check_sqlite_store(Path(db))
    return ResultStore(db, timeout_s=timeout_s)


def manifest_clips(manifest: Union[str, Path]) -> Tuple[Set[str], Set[str]]:
    """(clip ids, paths) of ``manifest`` as :func:`~.runner.run_manifest` stores them:
    explicit ``clip_id`` values or ids derived from the paths, paths absolute
    (:func:`~.manifest.load_manifest`); a duplicated id is a ManifestError, as in a run."""
    entries = load_manifest(manifest)
    check_unique_ids(entries, "manifest entries")
    return {e.clip_id for e in entries}, {e.path for e in entries}


def _where_config(sql: str, configs: Optional[Sequence[str]]) -> Tuple[str, tuple]:
    """``sql`` restricted to the ``configs`` (None: every config)."""
    if configs is None:
        return sql, ()
    return sql + f" WHERE config_hash IN ({', '.join('?' * len(configs))})", tuple(configs)


def clips_not_in(store: ResultStore, keep: Tuple[Set[str], Set[str]],
                 configs: Optional[Sequence[str]] = None) -> Dict[str, List[str]]:
    """Config hash -> the clip ids (sorted) of the clip rows of ``configs`` (None: every config)
    whose id is not among the ``keep`` (ids, paths) and whose path is not either."""
    ids, paths = keep
    out: Dict[str, List[str]] = {}
    for cid, cfg, _, path in store._select(*_where_config(_CLIPS, configs))[1]:
        if cid not in ids and path not in paths:
            out.setdefault(cfg, []).append(cid)
    return {cfg: sorted(ids) for cfg, ids in sorted(out.items())}


def orphan_results(store: ResultStore, configs: Optional[Sequence[str]] = None,
                   dropped: Optional[Dict[str, List[str]]] = None) -> Dict[str, List[str]]:
    """Config hash -> the content hashes (sorted) of the ``results`` rows of ``configs`` (None:
    every config) that no clip row references, the clip rows ``dropped`` (config hash -> clip
    ids, about to be deleted) left out."""
    gone = {(cfg, cid) for cfg, ids in (dropped or {}).items() for cid in ids}
    refs = {(content, cfg) for cid, cfg, content, _ in store._select(
        *_where_config(_CLIPS, configs))[1] if (cfg, cid) not in gone}
    out: Dict[str, List[str]] = {}
    for content, cfg in store._select(*_where_config(_RESULTS, configs))[1]:
        if (content, cfg) not in refs:
            out.setdefault(cfg, []).append(content)
    return {cfg: sorted(keys) for cfg, keys in sorted(out.items())}


def delete_keys(store: ResultStore, sql: str, keys: Dict[str, List[str]]) -> int:
    """Run the delete ``sql`` (:data:`_DELETE_CLIPS` / :data:`_DELETE_ORPHANS`: a config hash,
    then ``{keys}`` placeholders) for every config's keys, :data:`CHUNK` keys per transaction.
    Returns the number of rows deleted."""
    deleted = 0
    for cfg, values in keys.items():
        for start in range(0, len(values), CHUNK):
            part = values[start:start + CHUNK]
            stmt = sql.format(keys=", ".join("?" * len(part)))
            deleted += len(store._transaction(partial(store._execute, stmt, (cfg, *part))))
    return deleted


def store_size(store: ResultStore) -> Optional[int]:
    """Bytes the store takes: SQLite, the file and its ``-wal``; PostgreSQL, the store's
    tables with their indexes and TOAST."""
    if store.kind == "sqlite":
        path = Path(store.path)
        wal = path.with_name(path.name + "-wal")
        return path.stat().st_size + (wal.stat().st_size if wal.is_file() else 0)
    sizes = " + ".join(f"COALESCE(pg_total_relation_size(to_regclass('{t}')), 0)"
                       for t in _PG_TABLES)
    return int(store._select(f"SELECT {sizes}")[1][0][0])


def vacuum(store: ResultStore) -> bool:
    """VACUUM the store outside any transaction (retried while SQLite is busy or a server
    connection is lost): SQLite rewrites the file and truncates the WAL; PostgreSQL runs
    ``VACUUM (ANALYZE)`` on the store's tables. Returns True when SQLite's checkpoint was
    busy (another connection reads the store: the ``-wal`` file keeps the rewritten pages
    until the last connection closes; the checkpoint waits at most :data:`CHECKPOINT_WAIT_S`
    for readers, not the store timeout), else False."""
    if store.kind != "sqlite":
        store._retry(partial(store._execute, f"VACUUM (ANALYZE) {', '.join(_PG_TABLES)}"))
        return False
    store._retry(partial(store._execute, "VACUUM"))
    wait_ms = int(min(store.timeout_s, CHECKPOINT_WAIT_S) * 1000)
    store._execute(f"PRAGMA busy_timeout = {wait_ms}")
    try:
        rows = store._retry(partial(store._execute, "PRAGMA wal_checkpoint(TRUNCATE)"))
    finally:
        store._execute(f"PRAGMA busy_timeout = {int(store.timeout_s * 1000)}")
    busy, log, checkpointed = rows[0]  # log / checkpointed: WAL frames (-1: not in WAL mode)
    return bool(busy) or checkpointed < log


def _delete(store: ResultStore, report: PruneReport) -> None:
    """Delete the report's clip rows, then its orphans; a count that differs from what was
    found (a run wrote the store meanwhile) becomes a note."""
    for kind, sql, keys in (("clip rows", _DELETE_CLIPS, report.clips),
                            ("orphaned results", _DELETE_ORPHANS, report.orphans)):
        found = sum(map(len, keys.values()))
        deleted = delete_keys(store, sql, keys)
        if deleted != found:
            report.notes.append(f"{kind}: {deleted} deleted of the {found} found (the store "
                                "changed meanwhile: prune while no bench job writes it)")


def _chosen_configs(store: ResultStore, config_hash: Optional[str]) -> Optional[List[str]]:
    """``[config_hash]`` when the store holds a row of it (clips, results; on PostgreSQL also
    a job's heartbeat), else an InputError naming the held ones; None (every config) without
    one."""
    if config_hash is None:
        return None
    tables = ("clips", "results") + (("work_jobs",) if store.kind == "postgresql" else ())
    held = sorted({r[0] for r in store._select(" UNION ".join(
        f"SELECT DISTINCT config_hash FROM {t}" for t in tables))[1]})
    if config_hash not in held:
        raise InputError(f"{store.name} holds no row of config {config_hash!r} (it holds "
                         f"{', '.join(held[:5]) or 'none'}{', ...' if len(held) > 5 else ''})")
    return [config_hash]


def _check_live_jobs(store: ResultStore, configs: Optional[List[str]], report: PruneReport,
                     force: bool) -> None:
    """PostgreSQL: refuse (StoreError) deleting rows while a bench job of ``configs`` (None:
    any config) lives, unless ``force`` or a dry run (then a note names the jobs)."""
    live = live_jobs(store, configs)
    if not live:
        return
    names = ", ".join(f"job {job} (config {cfg}, {n} open work row(s))"
                      for job, cfg, n in live[:5]) + (", ..." if len(live) > 5 else "")
    if report.dry_run or force:
        report.notes.append(f"live jobs: {names} "
                            + ("running; pruning was forced" if force else
                               "running: without --dry-run this prune is refused unless "
                               "--force"))
        return
    one = len(live) == 1
    raise StoreError(
        f"{len(live)} geocon bench job{' is' if one else 's are'} running on {store.name}: "
        f"{names}; a prune of clip rows or orphans now races {'it' if one else 'them'} (a job "
        "writes back the clip rows of its manifest and the results they point at): prune once "
        f"{'it ends' if one else 'they end'}, or pass force=True (geocon prune --force) to "
        "prune anyway; nothing was changed")


def _written_meanwhile(store: ResultStore, configs: Optional[List[str]],
                       version: Optional[int], force: bool) -> List[str]:
    """The note when a job may have written the store while the prune deleted: SQLite, another
    connection committed since ``version`` (:func:`_data_version`); PostgreSQL, a job of
    ``configs`` started after the live-job check (not when ``force`` let live jobs run)."""
    if store.kind == "sqlite":
        if _data_version(store) == version:
            return []
        return ["another connection wrote the store while prune ran (a geocon bench job?): "
                "what it wrote may bring back rows pruned; run the prune again once no job "
                "writes the store"]
    late = [] if force else live_jobs(store, configs)
    return [f"a geocon bench job started while prune ran (job {late[0][0]}, config "
            f"{late[0][1]}): it may write back rows pruned; run the prune again once it ends"
            ] if late else []


def _data_version(store: ResultStore) -> Optional[int]:
    """SQLite's ``PRAGMA data_version`` (changes when ANOTHER connection commits); None on
    PostgreSQL."""
    return int(store._select("PRAGMA data_version")[1][0][0]) if store.kind == "sqlite" else None


def prune_store(db: Union[str, Path], *, config_hash: Optional[str] = None,
                keep_manifest: Union[None, str, Path] = None, orphans: bool = False,
                stale: bool = False, vacuum_store: bool = False, dry_run: bool = False,
                timeout_s: float = 120.0, force: bool = False) -> PruneReport:
    """Delete what a long-running leaderboard store no longer needs (module doc).

    Args:
        db: a SQLite store (it must exist and be writable) or a PostgreSQL URL.
        config_hash: only rows (and, on PostgreSQL, crashed jobs) of this config; None: all.
        keep_manifest: delete the clip rows whose clip id and path are not in this manifest
            (ids as a run derives them).
        orphans: delete the results no clip row references (after the clip rows above).
        stale: delete crashed jobs' work rows and heartbeats (PostgreSQL).
        vacuum_store: VACUUM the store at the end.
        dry_run: find and count, delete nothing (and do not VACUUM).
        timeout_s: how long a store operation retries a busy or lost store.
        force: PostgreSQL: delete clip rows / orphans even while a bench job of the chosen
            config(s) lives (noted in the report).

    Returns:
        the :class:`PruneReport`.
    Raises:
        InputError: no kind chosen, a missing store, a config hash the store does not hold, a
            bad manifest (ManifestError); StoreError: a read-only or non-geocon store; on
            PostgreSQL, ``keep_manifest`` / ``orphans`` while a job of the chosen config(s)
            lives (heartbeat or lease not expired) and no ``force`` (nothing is deleted).
    """
    if not (keep_manifest is not None or orphans or stale or vacuum_store):
        raise InputError("nothing to prune: give --keep-manifest M, --orphans, --stale-jobs "
                         "and / or --vacuum")
    keep = manifest_clips(keep_manifest) if keep_manifest is not None else None
    with open_for_maintenance(db, timeout_s=timeout_s) as store:
        report = PruneReport(store=store.name, dry_run=dry_run, store_kind=store.kind)
        configs = _chosen_configs(store, config_hash)
        deletes = keep is not None or orphans
        if deletes and store.kind == "postgresql":
            _check_live_jobs(store, configs, report, force)
        version = _data_version(store)
        if vacuum_store:
            report.size_before = store_size(store)
        if keep is not None:
            report.clips = clips_not_in(store, keep, configs)
        if orphans:
            report.orphans = orphan_results(store, configs, report.clips)
        if not dry_run:
            _delete(store, report)
        if deletes and not dry_run:
            report.notes += _written_meanwhile(store, configs, version, force)
        if stale and store.kind == "postgresql":
            report.jobs = stale_jobs(store, config_hash, None, dry_run=dry_run)
        elif stale:
            report.notes.append("stale jobs: a SQLite store has no work queue (nothing to do)")
        if vacuum_store and not dry_run:
            _vacuum(store, report)
    return report


def _vacuum(store: ResultStore, report: PruneReport) -> None:
    """:func:`vacuum`, the sizes after it and a note when the WAL could not shrink."""
    report.checkpoint_busy = bool(vacuum(store))
    report.vacuumed = True
    report.size_after = store_size(store)
    if report.checkpoint_busy:
        report.notes.append("vacuum: another connection is reading the store, so the WAL could "
                            "not be truncated; the files shrink when the last connection "
                            "closes (or run prune --vacuum again when no job or report reads "
                            "the store)")
