"""Resumable, shardable leaderboard runs: manifest -> result store (SQLite or PostgreSQL).

Resume: before scoring a clip the runner hashes its bytes (and those of the masks / poses files
its manifest row gives: :func:`entry_key`); if (content key, config hash) is in the store the
clip is skipped (a clip row is linked if the same content was stored under another id).
Each scored clip is committed in one transaction, so a run killed at any moment loses at most
the clips in flight and a re-run neither recomputes nor duplicates anything. A clip whose
scorer raises is stored with ``status: "error"`` and the exception as ``reason``; the run goes
on (``retry_errors=True`` recomputes those rows). Not so a resource of the machine that runs out
while a clip is hashed or scored (too many open files, no memory or threads, an out-of-memory
GPU, a full disk or quota: :func:`resource_exhausted`, through the exception's ``__cause__`` /
``__context__`` chain): that is the run's failure, not the clip's, so nothing is stored for the
clip and the run raises :class:`~geocon_torch.errors.ResourceExhaustedError` (the rows stored
before stay; the same command, run again, scores the clip). A clip that runs out in a group
(below) is first scored again alone, as is a group whose batch call fails as a whole.
The config hash leaves the package version out (it names the protocol, so a release keeps every
row): ``rescore_versions=True`` recomputes the rows that record an older version than the running
``geocon_torch.__version__`` (by release order, :func:`~.stats.is_newer_version`; "unknown" is
older), in place, error rows included (an older release's refusal is as stale as its numbers; error
rows of the running version stay for ``retry_errors``). Rows of a NEWER release are never replaced
by this older one. :class:`RunSummary` counts the kept rows by the version they record (error rows
apart: :class:`VersionCounts`), and the replaced ones, so a run can name rows of an older or a
newer release (:func:`kept_versions_note`). A
misconfigured optional model (a missing or corrupt checkpoint, a package that is not
importable) is no clip's error: with the default scorer the run raises it before any clip is
read and stores nothing.

Batches: a rank gathers its next ``batch_clips`` clips that the store lacks and scores them with
one ``score_fn.batch`` call (:class:`PipelineScorer`: one
:func:`~geocon_torch.pipeline.score_clips` call, each clip isolated), then stores each clip as
above; the rows are those of scoring clip by clip (``batch_clips=1``), error reasons included.
A clip whose bytes are already in the gathered group waits for the group to be stored (it is
then linked); a killed rank loses only its group in flight. Under dynamic claiming a rank
scores a content only while it holds the (config, content) advisory lock
(:meth:`~.claims.WorkQueue.lock_content`): a clip whose bytes another rank or job is scoring
right now is handed back for a moment and linked once that result is stored, so identical
files under several clip ids are scored once across ranks and concurrent jobs too.

Several ranks (``torchrun ... -m geocon_torch.cli bench ...``) give out the rows in one of two
ways (``assign``):

* static (a SQLite file, the default there): rank r takes clips ``r::N`` of the manifest and
  writes its rows itself to the SAME file (WAL mode, busy timeout and retried ``BEGIN
  IMMEDIATE`` transactions: one small write per clip, so lock waits are milliseconds). Safe on
  one machine (the file on a local disk); a job spanning several nodes is refused, because
  SQLite locking over a network file system is not reliable: use a PostgreSQL store, or one
  file per node combined with ``geocon merge``.
* dynamic (a PostgreSQL store, the default there; also across nodes): ranks claim the next
  unscored row with an expiring lease (:mod:`.claims`), so long clips do not pile up on one
  rank and a killed rank's rows are taken by the others; the work rows a crashed job left
  behind are deleted by the next job, of any config (at its start and end, once the crashed
  job's heartbeat and leases have run out), or by ``geocon prune --stale-jobs``. A job whose
  ranks all stalled that long (a suspended node) loses its rows the same way: when it resumes
  it puts back the manifest's clips the store lacks and scores them
  (:meth:`~.claims.WorkQueue.resume`).

Whatever happened meanwhile, a run never ends as done while a clip of its manifest has no
stored row (a result or an error row) under its config: rank 0 checks the store at the end
and raises :class:`IncompleteRunError` naming the missing clips (its ``summary`` is the run's).
A SQLite store file deleted or replaced while the run writes it (SQLite goes on writing the
deleted file) is a :class:`~.store.StoreError` at the next commit, or at that end check.

A gloo process group is only used to share the dynamic job id, for a final barrier and to
gather the per-rank summaries.
"""
from __future__ import annotations

import datetime
import errno
import hashlib
import itertools
import logging
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from .._progress_bar import tqdm
from .._version import __version__
from ..config import GeoConConfig
from ..errors import GeoConError, InputError, ResourceExhaustedError, VideoReadError
from ..io import content_hash
from ..io.hashing import input_digest
from ..pipeline import pinned_config, preflight_models, score_clip, score_clips
from ..result import ClipResult, migrate_result
from .claims import LeaseKeeper, WorkQueue, drop_job, drop_stale_jobs, new_job, new_owner
from .manifest import ManifestEntry, check_unique_ids, load_manifest, storable_text
from .schema import result_problems
from .stats import error_rows_text, is_newer_version, is_older_version
from .store import (CLIP_COLUMNS, ResultStore, StoreError, checked_clip_row, entry_json,
                    is_server_url)

log = logging.getLogger("geocon_torch.bench")
ScoreFn = Callable[[ManifestEntry, GeoConConfig, Optional[str]], Dict[str, Any]]
#: one outcome per entry of a group: the result dict, or the exception scoring it raised
Outcome = Union[Dict[str, Any], Exception]


class PipelineScorer:
    """The runner's default scorer: one entry with :func:`geocon_torch.pipeline.score_clip`
    (``scorer(entry, config, device)``), a group with one
    :func:`~geocon_torch.pipeline.score_clips` call (``scorer.batch(entries, config,
    device)``). Any ``score_fn`` may have such a ``batch`` method (one outcome per entry, in
    order); one without it scores a group clip by clip."""

    def __call__(self, entry: ManifestEntry, config: GeoConConfig,
                 device: Optional[str]) -> Dict[str, Any]:
        result = score_clip(entry.path, masks=entry.masks_path, poses=entry.poses_path,
                            config=config, device=device, progress=False)  # the runner's bar
        return result.to_dict()

    def batch(self, entries: Sequence[ManifestEntry], config: GeoConConfig,
              device: Optional[str]) -> List[Outcome]:
        """One outcome per entry: its result dict, or the exception :meth:`__call__` would
        raise for it (the others of the group are scored as usual)."""
        results = score_clips([e.path for e in entries],
                              masks=[e.masks_path for e in entries],
                              poses=[e.poses_path for e in entries], config=config,
                              device=device, progress=False, return_exceptions=True)
        return [r if isinstance(r, Exception) else r.to_dict() for r in results]


default_score_fn = PipelineScorer()


def content_key(path: Union[str, Path]) -> Tuple[str, Optional[str]]:
    """(key, problem) for a video file / image folder: the key is
    :func:`geocon_torch.io.content_hash` (SHA-256 of the bytes); a path that cannot be hashed
    (missing, zero-byte, folder without images) gets ``"unreadable:<sha256 of the absolute
    path>"`` and the reason, so its error row is found again on resume and a file that appears
    later is scored under its real hash. An exhausted resource (:func:`resource_exhausted`:
    too many open files, ...) is raised as it came, never such a key."""
    p = Path(path)
    try:
        return str(content_hash(p)), None
    except Exception as exc:  # noqa: BLE001 - any unreadable path gets a stable stand-in key
        if resource_exhausted(exc) is not None:  # the machine's, not the path's
            raise
        key = "unreadable:" + hashlib.sha256(str(p.resolve()).encode()).hexdigest()[:32]
        return key, f"{type(exc).__name__}: {exc}"


def entry_key(entry: ManifestEntry) -> Tuple[str, Optional[str]]:
    """(key, problem): the store key of a manifest entry's content. The video's
    :func:`content_key`, followed by ``+masks:<digest>`` / ``+poses:<digest>`` (32 hex digits of
    :func:`input_digest`) when the entry gives object masks / camera poses: they change the
    numbers (masks from a file instead of motion segmentation, the pose gate instead of the
    parallax gate), so a resumed run whose manifest now gives other or new side inputs rescores
    the clip instead of keeping the row scored without them.

    Raises:
        ResourceExhaustedError: a resource of the machine ran out while the files were read
            (:func:`resource_exhausted`), naming the clip.
    """
    try:
        key, problem = content_key(entry.path)
        if problem is None:
            for name, side in (("masks", entry.masks_path), ("poses", entry.poses_path)):
                if side is not None:
                    key += f"+{name}:{input_digest(side)[:32]}"
    except Exception as exc:  # noqa: BLE001 - re-raised, named when a resource ran out
        if resource_exhausted(exc) is None:
            raise
        raise _exhausted_error(entry, exc, "reading") from exc
    return key, problem


_FREE_MEMORY = ("free memory (other processes, a smaller --batch-clips; a clip that alone needs "
                "more than the machine has: leave it out of the manifest)")
#: errno of an exhausted machine resource -> (what ran out, what to do about it)
RESOURCE_ERRNOS: Dict[int, Tuple[str, str]] = {
    errno.EMFILE: ("too many open files", "raise `ulimit -n`"),
    errno.ENFILE: ("too many open files in the system", "close files of other programs or "
                   "raise the system's limit (fs.file-max)"),
    errno.EAGAIN: ("no memory or threads",
                   _FREE_MEMORY + " or raise `ulimit -u` / `ulimit -v`"),
    errno.ENOMEM: ("out of memory", _FREE_MEMORY),
    errno.ENOSPC: ("no space left on device", "free disk space"),
    errno.EDQUOT: ("disk quota exceeded", "free space under the quota"),
}
_TORCH_OOM = getattr(torch, "OutOfMemoryError", torch.cuda.OutOfMemoryError)
#: the text of a torch CPU allocation that failed (a RuntimeError, not a MemoryError)
_TORCH_CPU_OOM = "DefaultCPUAllocator: can't allocate memory"


def resource_exhausted(exc: BaseException) -> Optional[Tuple[str, str, Optional[int]]]:
    """(what ran out, what to do, errno or None) when ``exc`` or an exception of its
    ``__cause__`` / ``__context__`` chain says a resource of the machine ran out: an OSError
    whose errno is in :data:`RESOURCE_ERRNOS` (EMFILE, ENFILE, EAGAIN, ENOMEM, ENOSPC, EDQUOT),
    a GeoConError whose text quotes one (``[Errno 11] Resource temporarily unavailable``: a
    decode error kept as text), MemoryError, a torch out-of-memory error (GPU, or the CPU
    allocator's), an OpenCV ``cv2.error`` of code -4 (Insufficient memory); None else."""
    seen = set()
    todo: List[Optional[BaseException]] = [exc]
    while todo:
        e = todo.pop(0)
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        found = _exhausted_one(e)
        if found is not None:
            return found
        todo += [e.__cause__, e.__context__]
    return None


def _exhausted_one(e: BaseException) -> Optional[Tuple[str, str, Optional[int]]]:
    """:func:`resource_exhausted` of one exception, its chain aside."""
    if isinstance(e, OSError) and e.errno in RESOURCE_ERRNOS:
        return (*RESOURCE_ERRNOS[e.errno], e.errno)
    if isinstance(e, _TORCH_OOM):
        return ("out of GPU memory", "free GPU memory (other processes on the device, a "
                "smaller --batch-clips) or score on another device", errno.ENOMEM)
    if isinstance(e, MemoryError) or (isinstance(e, RuntimeError) and _TORCH_CPU_OOM in str(e)):
        return ("out of memory", _FREE_MEMORY, errno.ENOMEM)
    kind = type(e)
    if kind.__module__ == "cv2" and kind.__name__ == "error" and (
            "(-4:" in str(e) or vars(e).get("code") == -4):  # cv2's class-wide code: not read
        return ("out of memory", _FREE_MEMORY, errno.ENOMEM)
    if isinstance(e, GeoConError):
        text = str(e)
        for code, found in RESOURCE_ERRNOS.items():
            if f"[Errno {code}] {os.strerror(code)}" in text:
                return (*found, code)
    return None


def _exhausted_error(entry: ManifestEntry, exc: BaseException,
                     doing: str) -> ResourceExhaustedError:
    """The :class:`ResourceExhaustedError` (its ``errno`` the cause's) naming the resource
    and the clip, for an ``exc`` that says a resource ran out (:func:`resource_exhausted`)
    while ``doing`` ("reading" / "scoring") the clip: one line, with the cause's text."""
    found = resource_exhausted(exc)
    assert found is not None, "only for an exhausted resource"
    what, advice, code = found
    cause = " ".join(f"{type(exc).__name__}: {exc}".split())
    err = ResourceExhaustedError(
        f"{what} while {doing} clip {entry.clip_id!r} ({entry.path}: {cause[:400]}): nothing "
        f"stored for it; {advice} and run the same command again")
    err.errno = code
    return err


def error_result(entry: ManifestEntry, config: GeoConConfig, reason: str,
                 content_hash: Optional[str] = None) -> Dict[str, Any]:
    """A schema-conforming ``status: "error"`` result for a clip the scorer could not handle
    (its ``prompt_category`` is the manifest's; a NUL or a lone surrogate in ``reason`` is
    written ``\\x00`` / ``\\udce9``, which every store can keep)."""
    reason = storable_text(reason)
    return ClipResult.failed(entry.clip_id, "error", reason, config, path=entry.path,
                             content_hash=content_hash,
                             prompt_category=entry.prompt_category).to_dict()


def _clip_row(entry: ManifestEntry) -> Dict[str, Any]:
    return {"clip_id": entry.clip_id, "generator": entry.generator,
            "generator_version": entry.generator_version,
            "prompt_category": entry.prompt_category, "prompt": entry.prompt, "seed": entry.seed,
            "scene": entry.scene, "path": entry.path, "entry": entry.to_dict()}


class VersionCounts(dict):
    """Kept scored rows (ok / not_applicable) by the package version they record, a dict;
    ``errors``: the kept error rows by version (:func:`kept_versions_note` names those of an
    older release, which ``rescore_versions`` re-scores)."""

    def __init__(self, counts: Any = (), errors: Optional[Dict[str, int]] = None) -> None:
        super().__init__(counts)
        self.errors: Dict[str, int] = dict(errors or {})


@dataclass
class RunSummary:
    """What one rank (or, on rank 0 after gathering, the whole job) did."""

    total: int = 0  # clips in this shard
    computed: int = 0  # scorer calls
    skipped: int = 0  # already stored under this config
    linked: int = 0  # same bytes stored under another clip_id: linked, not scored
    ok: int = 0
    not_applicable: int = 0
    error: int = 0
    rank: int = 0
    world_size: int = 1
    elapsed_s: float = 0.0
    errors: List[str] = field(default_factory=list)  # "clip_id: reason" of new error rows
    assign: str = "static"  # how rows were given to ranks: "static" (r::N) or "dynamic"
    job: Optional[str] = None  # the dynamic job id (work table)
    busy_s: float = 0.0  # seconds spent on clips (hash, score, write), not waiting
    rank_elapsed_s: List[float] = field(default_factory=list)  # per rank, rank order
    rank_busy_s: List[float] = field(default_factory=list)  # per rank, rank order
    rank_window: List[Tuple[float, float]] = field(default_factory=list)  # (start, end) unix s
    config_hash: Optional[str] = None  # the (pinned) config hash the rows are stored under
    requeued: int = 0  # clips put back after the dynamic job was reaped while it stalled
    missing: List[str] = field(default_factory=list)  # manifest clips with no row at the end
    #: the ok / not_applicable rows kept (skipped / linked), by the package version they record;
    #: the error rows kept in their ``errors`` (:class:`VersionCounts`)
    skipped_versions: Dict[str, int] = field(default_factory=VersionCounts)
    linked_versions: Dict[str, int] = field(default_factory=VersionCounts)
    #: rows of an older package version replaced under ``rescore_versions`` (error rows
    #: included), by that version
    rescored_versions: Dict[str, int] = field(default_factory=dict)

    def makespan_s(self) -> float:
        """Wall-clock seconds from the first rank's start to the last rank's end."""
        if not self.rank_window:
            return self.elapsed_s
        return max(e for _, e in self.rank_window) - min(s for s, _ in self.rank_window)

    def idle_fraction(self) -> float:
        """Share of the ranks' time spent idle while the slowest rank finishes:
        ``1 - sum(busy) / (ranks * makespan)`` (0 when every rank is busy to the end)."""
        span = self.makespan_s()
        busy = self.rank_busy_s or [self.busy_s]
        return max(0.0, 1.0 - sum(busy) / (len(busy) * span)) if span > 0 else 0.0

    def merge(self, other: "RunSummary") -> "RunSummary":
        out = RunSummary(rank=0, world_size=self.world_size, assign=self.assign, job=self.job,
                         config_hash=self.config_hash)
        for k in ("total", "computed", "skipped", "linked", "ok", "not_applicable", "error",
                  "requeued"):
            setattr(out, k, getattr(self, k) + getattr(other, k))
        out.elapsed_s = max(self.elapsed_s, other.elapsed_s)
        out.errors = self.errors + other.errors
        out.busy_s = self.busy_s + other.busy_s
        out.rank_elapsed_s = self.rank_elapsed_s + other.rank_elapsed_s
        out.rank_busy_s = self.rank_busy_s + other.rank_busy_s
        out.rank_window = self.rank_window + other.rank_window
        for k in ("skipped_versions", "linked_versions", "rescored_versions"):
            setattr(out, k, _add_counts(getattr(self, k), getattr(other, k)))
        return out

    @property
    def kept_versions(self) -> Dict[str, int]:
        """The scored rows this run kept, skipped or linked, by the version they record (the
        kept error rows in its ``errors``)."""
        return _add_counts(self.skipped_versions, self.linked_versions)

    @property
    def rescored(self) -> int:
        """Rows of an older package version this run re-scored in place
        (``rescore_versions``; counted in :attr:`computed` too)."""
        return sum(self.rescored_versions.values())

    def rescored_note(self) -> str:
        """``", 1 re-scored (replaced rows of 0.1.0)"`` (several versions: ``"... of 0.1.0
        (3), 0.2.0 (1))"``), or "" when the run re-scored no row: for a summary line."""
        if not self.rescored_versions:
            return ""
        old = self.rescored_versions
        listed = (next(iter(old)) if len(old) == 1
                  else ", ".join(f"{v} ({n})" for v, n in sorted(old.items())))
        return f", {self.rescored} re-scored (replaced rows of {listed})"

    def to_dict(self) -> Dict[str, Any]:
        """The fields as a dict, the kept error rows by version as ``skipped_error_versions``
        / ``linked_error_versions``."""
        out = asdict(self)
        for k in ("skipped", "linked"):
            out[f"{k}_error_versions"] = dict(_errors(getattr(self, f"{k}_versions")))
        return out


def _errors(counts: Dict[str, int]) -> Dict[str, int]:
    return getattr(counts, "errors", None) or {}


def _add_counts(a: Dict[str, int], b: Dict[str, int]) -> Dict[str, int]:
    """The per-key sum of two count dicts, keys sorted (their ``errors`` summed alike)."""
    ea, eb = _errors(a), _errors(b)
    return VersionCounts({k: a.get(k, 0) + b.get(k, 0) for k in sorted({*a, *b})},
                         {k: ea.get(k, 0) + eb.get(k, 0) for k in sorted({*ea, *eb})})


def kept_versions_note(counts: Dict[str, int]) -> str:
    """For a summary line after "N already stored": ``" (4 by geocon_torch 0.1.0, this is
    0.2.1: --rescore-versions re-scores them)"`` naming the kept rows (``counts``: package
    version -> rows, :attr:`RunSummary.skipped_versions`, its error rows in ``errors``:
    ``"1 error row of 0.2.4"``) of versions older than the running ``__version__``, and
    ``" (2 rows by geocon_torch 0.2.8, newer than this 0.2.7: upgrade to compare)"`` those of
    a newer release (every status); "" when every kept row records the running one."""
    errors = _errors(counts)
    old = {v: n for v, n in sorted(counts.items()) if n and is_older_version(v)}
    old_err = {v: n for v, n in sorted(errors.items()) if n and is_older_version(v)}
    newer = {v: counts.get(v, 0) + errors.get(v, 0) for v in sorted({*counts, *errors})
             if is_newer_version(v, __version__)}
    parts = []
    if old or old_err:
        listed = [f"{n} by {'geocon_torch ' if i == 0 else ''}{v}"
                  for i, (v, n) in enumerate(old.items())]
        if old_err:
            err = error_rows_text(old_err)
            listed.append(err.replace("geocon_torch ", "", 1) if old else err)
        parts.append(f"{', '.join(listed)}, this is {__version__}: --rescore-versions "
                     "re-scores them")
    if newer:
        listed = ", ".join(f"{n}{' row' + ('s' if n != 1 else '') if i == 0 else ''} by "
                           f"{'geocon_torch ' if i == 0 else ''}{v}"
                           for i, (v, n) in enumerate(newer.items()))
        parts.append(f"{listed}, newer than this {__version__}: upgrade to compare")
    return f" ({'; '.join(parts)})" if parts else ""


class IncompleteRunError(StoreError):
    """A run ended with clips of its manifest that have no stored row under its config (rows
    deleted while it ran: a prune, a dynamic job's work rows reaped and not put back).
    ``summary`` is the run's :class:`RunSummary` (``summary.missing``: those clip ids)."""

    def __init__(self, summary: RunSummary, total: int, store: str):
        self.summary = summary
        ids = summary.missing
        shown = ", ".join(ids[:10]) + (f", ... ({len(ids) - 10} more)" if len(ids) > 10 else "")
        super().__init__(
            f"{store}: {len(ids)} of the {total} clips of the manifest have no stored row under "
            f"config {summary.config_hash} at the end of the run: {shown}; their rows were "
            "deleted while it ran (geocon prune?): run the same command again, it scores "
            "exactly what is missing")


#: clip ids looked up per query by :func:`missing_clips` (SQLite's 999 parameters never reached)
LOOKUP_CHUNK = 400


def missing_clips(store: ResultStore, clip_ids: Sequence[str], config_hash: str) -> List[str]:
    """The ``clip_ids`` (in their order) with no stored row under ``config_hash``: no clip row
    pointing at a result (ok, not_applicable or error) of that config. Looked up by key,
    :data:`LOOKUP_CHUNK` ids a query (the cost follows the manifest, not the store)."""
    stored = set()
    for start in range(0, len(clip_ids), LOOKUP_CHUNK):
        part = list(clip_ids[start:start + LOOKUP_CHUNK])
        stored.update(r[0] for r in store._select(
            f"SELECT clip_id FROM leaderboard WHERE config_hash = ? AND clip_id IN "
            f"({', '.join('?' * len(part))})", (config_hash, *part))[1])
    return [c for c in clip_ids if c not in stored]


def _dist_info():
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    return rank, world, local_rank, local_world


def _rank_device(device: Optional[str], local_rank: int, world: int) -> Optional[str]:
    if world <= 1:
        return device
    if (device in (None, "cuda", "auto")) and torch.cuda.is_available():
        return f"cuda:{local_rank % torch.cuda.device_count()}"
    return device


ASSIGNMENTS = ("auto", "static", "dynamic")


def _assignment(assign: str, db: Union[str, Path], world: int, local_world: int,
                use_dist: bool) -> str:
    """"static" (rank r takes r::N) or "dynamic" (claims on a server store); refuses a
    multi-node job on a SQLite file and dynamic claiming without a server."""
    if assign not in ASSIGNMENTS:
        raise InputError(f"assign must be one of {ASSIGNMENTS}, got {assign!r}")
    server = is_server_url(db)
    if use_dist and local_world != world and not server:
        raise InputError(
            f"geocon bench under torchrun spans {world // max(local_world, 1)} nodes: one SQLite "
            "file cannot be shared safely across machines; use a PostgreSQL store (--db "
            "postgresql://HOST/DB) for one live leaderboard, or run one job per node with its "
            "own --db file on a local disk and combine them with geocon merge OUT.sqlite "
            "NODE.sqlite...")
    if assign == "dynamic" and not server:
        raise InputError("dynamic work claiming needs a PostgreSQL store (--db "
                         "postgresql://HOST/DB); a SQLite file is shared statically (r::N)")
    return "dynamic" if assign == "dynamic" or (assign == "auto" and server) else "static"


def run_manifest(manifest: Union[str, Path, Sequence[ManifestEntry]],
                 db: Union[str, Path], *, config: Union[None, str, Path, dict,
                                                        GeoConConfig] = None,
                 score_fn: Optional[ScoreFn] = None, device: Optional[str] = None,
                 retry_errors: bool = False, progress: bool = True,
                 distributed: Optional[bool] = None,
                 dist_timeout_s: float = 7 * 24 * 3600.0, assign: str = "auto",
                 lease_s: float = 60.0, store_timeout_s: float = 120.0,
                 batch_clips: int = 8, confine_paths: bool = False,
                 rescore_versions: bool = False) -> RunSummary:
    """Score every clip of ``manifest`` into the store ``db``; resumable and shardable.

    Args:
        manifest: a manifest path (CSV / JSONL) or a list of :class:`ManifestEntry`.
        db: the SQLite results file, or a PostgreSQL URL / service string (see
            :mod:`.pg_store`).
        config: a GeoConConfig, dict, JSON path or None (defaults); its hash keys the rows.
        score_fn: ``f(entry, config, device) -> result dict`` (default: the real pipeline,
            :class:`PipelineScorer`); its optional ``batch(entries, config, device)`` method
            scores a group at once (one result dict or exception per entry).
        device: torch device string; under torchrun "cuda" becomes ``cuda:LOCAL_RANK``.
        retry_errors: recompute clips whose stored row has status "error".
        progress: show a tqdm bar (one per rank).
        distributed: None = auto (on when WORLD_SIZE > 1), False = ignore torchrun variables.
        dist_timeout_s: how long a finished rank waits at the final barrier for the others.
        assign: "auto" (dynamic on a server store, static on SQLite), "static" (rank r takes
            r::N) or "dynamic" (ranks claim rows with expiring leases: :mod:`.claims`).
        lease_s: seconds a dynamic claim holds without renewal (renewed every lease_s / 3
            while the rank lives).
        store_timeout_s: how long a store operation keeps retrying (a lock, a lost server).
        batch_clips: a rank scores its next ``batch_clips`` unscored clips (its own ``r::N``
            share, or up to that many claimed at once) with one ``score_fn.batch`` call
            (:func:`~geocon_torch.pipeline.score_clips`), then stores each clip in its own
            transaction as before; 1 scores clip by clip. The stored rows are the same.
        confine_paths: a manifest path's clip, masks and poses paths must lie inside its
            folder (:func:`~.manifest.load_manifest` ``confine``), checked before scoring.
        rescore_versions: recompute (and replace) the stored rows, error rows included,
            whose result records a ``version`` older than the running ``__version__`` (by
            release order, "unknown" older; the config hash does not change with the package;
            a newer release's rows are kept); ``RunSummary.rescored_versions`` counts them by
            version, ``skipped_versions`` / ``linked_versions`` the rows kept.

    Returns:
        the :class:`RunSummary` of this rank, or of the whole job on rank 0 when distributed.
    Raises:
        CheckpointError, OptionalDependencyError, ConfigError, InputError: with the default
            scorer, a model-backed stage of the config (learned features, DUSt3R gate, SAM-2
            masks, RAFT flow) cannot be built (:func:`~geocon_torch.pipeline.preflight_models`),
            before any clip is read or the store opened, not as an error row per clip.
        InputError: an entry no store can keep (a seed outside int64, text with a NUL or
            not UTF-8: :func:`~.store.checked_clip_row`), before any clip is scored.
        IncompleteRunError: (rank 0) at the end, a clip of the manifest has no stored row
            under the run's config (rows deleted while it ran); its ``summary`` names them.
        StoreError: the store failed (locked past ``store_timeout_s``, a full disk) or its
            SQLite file was deleted or replaced while the run wrote it.
        ResourceExhaustedError: a clip ran out of a resource (:func:`resource_exhausted`).
    """
    entries = list(load_manifest(manifest, confine=confine_paths)
                   if isinstance(manifest, (str, Path)) else manifest)
    check_unique_ids(entries, "manifest entries")
    for e in entries:  # entries built in code: refused here, not by the store mid-run
        checked_clip_row({k: getattr(e, k) for k in CLIP_COLUMNS}, "-", "-")
    score_fn = score_fn or default_score_fn
    rank, world, local_rank, local_world = _dist_info()
    use_dist = (world > 1) if distributed is None else (bool(distributed) and world > 1)
    if not use_dist:
        rank, world, local_rank, local_world = 0, 1, 0, 1
    mode = _assignment(assign, db, world, local_world, use_dist)
    if not lease_s > 0:
        raise InputError(f"lease_s must be > 0, got {lease_s!r}")
    if isinstance(batch_clips, bool) or not isinstance(batch_clips, int) or batch_clips < 1:
        raise InputError(f"batch_clips must be an integer >= 1, got {batch_clips!r}")
    dev = _rank_device(device, local_rank, world)
    cfg = pinned_config(config, dev)  # results are keyed by the calibration file too
    if isinstance(score_fn, PipelineScorer):  # a misconfigured model: raised, no error rows
        preflight_models(cfg, [e.path for e in entries], [e.masks_path for e in entries],
                         [e.poses_path for e in entries], dev)
    created_group = False
    if use_dist and not dist.is_initialized():
        dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=dist_timeout_s))
        created_group = True
    job = _Job(cfg, cfg.config_hash(), score_fn, dev, retry_errors, progress, rank, world,
               batch_clips, bool(rescore_versions))
    try:
        with ResultStore(db, timeout_s=store_timeout_s) as store:
            if rank == 0:
                store.drop_renamed_clips([(e.clip_id, e.path) for e in entries], job.cfg_hash)
            if mode == "dynamic":
                summary = _run_dynamic(entries, store, job, lease_s, use_dist)
            else:
                summary = _run_static(entries[rank::world], store, job)
            if use_dist:
                summary = _gather_summaries(summary, rank, world, mode, lease_s)
            summary.config_hash = job.cfg_hash
            if rank == 0:
                _finish_job(store, summary, entries, job, mode)
    finally:
        if created_group:
            dist.destroy_process_group()
    return summary


def _finish_job(store: ResultStore, summary: RunSummary, entries: Sequence[ManifestEntry],
                job: "_Job", mode: str) -> None:
    """Rank 0 after every rank is done: drop the dynamic job's rows (and crashed jobs' whose
    leases ran out meanwhile), then check that every manifest clip has a stored row.

    Raises:
        StoreError: the store file was deleted or replaced after the last commit (SQLite:
            :meth:`~.store.SQLiteStore.check_same_file`; the check below would read it).
        IncompleteRunError: a clip of the manifest has no stored row under the run's config.
    """
    if mode == "dynamic":
        drop_job(store, summary.job)
        if summary.job:  # a crashed job's leases ran out while this one ran
            drop_stale_jobs(store, None, summary.job)
    store.check_same_file()
    summary.missing = missing_clips(store, [e.clip_id for e in entries], job.cfg_hash)
    if summary.missing:
        raise IncompleteRunError(summary, len(entries), store.name)


@dataclass
class _Job:
    """What every clip of one rank's run shares."""

    cfg: GeoConConfig
    cfg_hash: str
    score_fn: ScoreFn
    device: Optional[str]
    retry_errors: bool
    progress: bool
    rank: int
    world: int
    batch_clips: int = 1
    rescore_versions: bool = False

    def bar(self, total: Optional[int]):
        desc = f"geocon bench [rank {self.rank}/{self.world}]" if self.world > 1 \
            else "geocon bench"
        return tqdm(total=total, desc=desc, unit="clip", disable=not self.progress,
                    position=self.rank, leave=True, dynamic_ncols=True)


Item = Tuple[ManifestEntry, Optional[WorkQueue]]
#: ``pull(n, wait, holding)``: up to ``n`` more (entry, its work queue or None) besides the
#: clip ids ``holding`` (the group being gathered); ``[]`` when none is ready now and ``wait``
#: is False (the rank has clips to score meanwhile), None when the rank's work is over
Pull = Callable[[int, bool, Sequence[str]], Optional[List[Item]]]


@dataclass
class _Todo:
    """A clip the store does not hold (under this config): to be scored and stored."""

    entry: ManifestEntry
    key: str  # content key (:func:`content_key`)
    unreadable: Optional[str]  # why the path cannot be hashed (an error row, never scored)
    replace: bool  # a stored row is recomputed (retry_errors, rescore_versions)
    also: List[Any]  # the work row's "done" statement, committed with the result
    work: Optional[WorkQueue] = None  # the rank's work queue (dynamic), told once it is stored
    rescores: Optional[str] = None  # the version of the scored row rescore_versions replaces


def _loop(pull: Pull, total: Optional[int], store: ResultStore, job: _Job,
          summary: RunSummary) -> RunSummary:
    """Take work from ``pull`` until it is over, skip / link what the store holds and score the
    rest in groups of ``job.batch_clips`` (:func:`_score_group`), timing the rank.

    A group holds distinct content keys: an entry whose bytes are already in the group waits
    for the group to be stored (it is then linked, as when clips are scored one by one)."""
    t0, wall0 = time.monotonic(), time.time()
    bar = job.bar(total)
    group: List[_Todo] = []

    def flush() -> None:
        _score_group(group, store, job, summary, bar)
        group.clear()

    try:
        while True:
            items = pull(job.batch_clips - len(group), not group,
                         [t.entry.clip_id for t in group])
            if items is None:
                break
            for entry, work in items:
                t1 = time.monotonic()
                key, unreadable = entry_key(entry)
                if any(t.key == key for t in group):
                    flush()
                if work is not None and not work.lock_content(key):
                    work.defer(entry.clip_id)  # its bytes are scored elsewhere right now
                    summary.busy_s += time.monotonic() - t1
                    continue
                summary.total += 1
                todo = _resolve(entry, key, unreadable, store, job, summary, work)
                if todo is not None and todo.unreadable is None:
                    group.append(todo)
                else:  # stored (skipped / linked), or an error row at once: nothing to score
                    if todo is not None:
                        _store(todo, _Unreadable(todo.unreadable), store, job, summary)
                    elif work is not None:
                        work.unlock_content(key)
                    _advance(bar, summary)
                summary.busy_s += time.monotonic() - t1
            if group and (len(group) >= job.batch_clips or not items):
                t1 = time.monotonic()
                flush()
                summary.busy_s += time.monotonic() - t1
    finally:
        bar.close()
        summary.elapsed_s = time.monotonic() - t0
        summary.rank_elapsed_s = [summary.elapsed_s]
        summary.rank_busy_s = [summary.busy_s]
        summary.rank_window = [(wall0, time.time())]
    return summary


def _advance(bar, summary: RunSummary) -> None:
    bar.update(1)
    bar.set_postfix(done=summary.computed, skip=summary.skipped + summary.linked,
                    err=summary.error, refresh=False)


def _run_static(shard: List[ManifestEntry], store: ResultStore, job: _Job) -> RunSummary:
    summary = RunSummary(rank=job.rank, world_size=job.world, assign="static")
    rest = iter(shard)

    def pull(n: int, wait: bool, holding: Sequence[str]) -> Optional[List[Item]]:
        items: List[Item] = [(e, None) for e in itertools.islice(rest, n)]
        return items if items or not wait else None

    return _loop(pull, len(shard), store, job, summary)


def _shared_job_id(cfg_hash: str, entries: Sequence[ManifestEntry], use_dist: bool) -> str:
    """One job id for every rank of the run (drawn on rank 0, broadcast over gloo)."""
    box: List[Optional[str]] = [new_job(cfg_hash, [e.clip_id for e in entries])]
    if use_dist:
        dist.broadcast_object_list(box, src=0)
    return str(box[0])


def _run_dynamic(entries: List[ManifestEntry], store: ResultStore, job: _Job, lease_s: float,
                 use_dist: bool) -> RunSummary:
    """Claim rows (up to ``job.batch_clips`` at a time) until every row of the job is done
    (:mod:`.claims`); rank 0 first deletes the work rows of crashed jobs (of any config)."""
    queue = WorkQueue(store, _shared_job_id(job.cfg_hash, entries, use_dist), job.cfg_hash,
                      new_owner(), lease_s)
    if job.rank == 0:
        drop_stale_jobs(store, None, queue.job)
    since = time.time()
    queue.enqueue([e.clip_id for e in entries])
    by_id = {e.clip_id: e for e in entries}
    poll_s = min(0.2, lease_s / 4.0)
    note_at = [0.0]  # time.monotonic() of the next look at other jobs' leases (_note_wait)

    def remaining() -> List[str]:  # after a reaping: what this job has still to score
        return _unstored(store, list(by_id), job, since)

    def pull(n: int, wait: bool, holding: Sequence[str]) -> Optional[List[Item]]:
        while True:
            cids = queue.claim_many(n, exclude=holding)
            unknown = [c for c in cids if c not in by_id]
            if unknown:
                raise InputError(f"dynamic job {queue.job}: clip {unknown[0]!r} is not in this "
                                 "rank's manifest; every rank must read the same manifest")
            if cids or not wait:
                return [(by_id[c], queue) for c in cids]
            # no open row: done, unless the job was reaped (its rows deleted) meanwhile
            if queue.finished() and queue.resume(remaining) == 0:
                return None
            if time.monotonic() >= note_at[0]:  # at once, then about every lease_s / 2
                note_at[0] = time.monotonic() + lease_s / 2.0
                _note_wait(queue)
            time.sleep(poll_s)  # the rest is leased by other ranks: wait for them or leases

    summary = RunSummary(rank=job.rank, world_size=job.world, assign="dynamic", job=queue.job)
    with LeaseKeeper(queue):
        _loop(pull, None, store, job, summary)
    summary.requeued = queue.put_back
    return summary


def _note_wait(queue: WorkQueue) -> None:
    """One warning when open rows of the job wait for another job's leases
    (:meth:`~.claims.WorkQueue.blocked`): a re-run after a killed run waits up to the killed
    run's ``--lease-s`` and would otherwise look hung. Nothing when only this job's own
    ranks hold the rest."""
    blocked = queue.blocked()
    if not blocked:
        return
    jobs = ", ".join(j for j, _, _ in blocked)
    log.warning("geocon bench: waiting up to %.0f s for %d clip(s) leased by job %s (another "
                "job scoring them, or a killed run whose claims run out after its --lease-s)",
                max(s for _, _, s in blocked), sum(n for _, n, _ in blocked), jobs)


def _unstored(store: ResultStore, clip_ids: List[str], job: _Job, since: float) -> List[str]:
    """The ``clip_ids`` a dynamic job still has to score (read inside the caller's PostgreSQL
    transaction): no stored row under its config; with ``retry_errors``, an error row written
    before the job started (``since``, unix s: by the writers' clocks); with
    ``rescore_versions``, a row (error rows included) of an older package version
    (:func:`_stale`); never a row of a newer release, whatever the options."""
    rows = store.execute(
        "SELECT c.clip_id, r.status, r.version, r.created_at FROM clips c JOIN results r ON "
        "r.content_hash = c.content_hash AND r.config_hash = c.config_hash "
        "WHERE c.config_hash = ? AND c.clip_id = ANY(?::text[])", (job.cfg_hash, clip_ids))
    done = {cid for cid, status, version, created in rows
            if not (job.retry_errors and status == "error" and created < since
                    and not is_newer_version(str(version or "unknown"), __version__))
            and not (job.rescore_versions and _stale(version))}
    return [c for c in clip_ids if c not in done]


def _gather_summaries(summary: RunSummary, rank: int, world: int, mode: str,
                      lease_s: float) -> RunSummary:
    """Wait for every rank, then merge all ranks' summaries on rank 0 (others keep their own).

    Dynamic ranks finish together (each waits until the job's rows are done), so a rank that
    is still missing after ``4 * lease_s`` (at least a minute) is gone: the summary of this
    rank is returned with a warning; every row is stored either way."""
    try:
        if mode == "dynamic":
            dist.monitored_barrier(timeout=datetime.timedelta(seconds=max(60.0, 4 * lease_s)),
                                   wait_all_ranks=True)
        else:
            dist.barrier()
        gathered: List[Optional[RunSummary]] = [None] * world if rank == 0 else []
        dist.gather_object(summary, gathered if rank == 0 else None, dst=0)
    except RuntimeError as exc:
        if mode != "dynamic":
            raise
        log.warning("geocon bench: rank %d could not gather the other ranks' summaries (%s); "
                    "the store holds every finished row", rank, " ".join(str(exc).split())[:300])
        return summary
    if rank != 0:
        return summary
    total = gathered[0]
    for s in gathered[1:]:
        total = total.merge(s)
    total.world_size = world
    return total


class _Unreadable(VideoReadError):
    """The clip's path could not even be hashed (missing, empty, ...): an error row."""


def _reason(exc: BaseException) -> str:
    """``"Type: message (at file.py:line)"``: the line where the exception was raised (a NUL
    or a lone surrogate in the message written ``\\x00`` / ``\\udce9``: storable)."""
    reason = f"{type(exc).__name__}: {exc}".strip()
    tb = traceback.extract_tb(exc.__traceback__)
    if tb:
        reason += f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})"
    return storable_text(reason)


def _result(entry: ManifestEntry, job: _Job, key: str, outcome: Outcome) -> Dict[str, Any]:
    """The result dict of one clip from its scorer outcome: the scorer's dict (checked), or an
    error row with the reason of the exception it raised; an exhausted resource
    (:func:`resource_exhausted`) is raised as a :class:`ResourceExhaustedError` instead."""
    cfg = job.cfg
    if isinstance(outcome, Exception) and resource_exhausted(outcome) is not None:
        raise _exhausted_error(entry, outcome, "scoring") from outcome  # nothing stored
    try:
        if isinstance(outcome, _Unreadable):
            result = error_result(entry, cfg, str(outcome))
        else:
            if isinstance(outcome, Exception):
                raise outcome
            problems = result_problems(outcome)
            if problems:
                raise InputError("scorer returned an invalid result: " + "; ".join(problems))
            result = migrate_result(outcome)
            result["clip"] = entry.clip_id  # the manifest's unique id, not the file stem
            if entry.prompt_category is not None:  # the manifest names the prompt family
                result["prompt_category"] = entry.prompt_category
            if result.get("content_hash") is None:
                result["content_hash"] = key
    except Exception as exc:  # noqa: BLE001 - one bad clip must not stop the run
        result = error_result(entry, cfg, _reason(exc), key)
    if result.get("config_hash") != job.cfg_hash:
        result["config_hash_reported"] = result.get("config_hash")
        result["config_hash"] = job.cfg_hash
    return result


def _one_by_one(job: _Job, entries: Sequence[ManifestEntry]) -> Iterator[Outcome]:
    """Each entry's outcome from ``job.score_fn``, scored when the runner asks for it."""
    for entry in entries:
        try:
            yield job.score_fn(entry, job.cfg, job.device)
        except Exception as exc:  # noqa: BLE001 - one bad clip must not stop the run
            yield exc


def _outcomes(job: _Job, entries: Sequence[ManifestEntry]) -> Iterator[Outcome]:
    """One outcome per entry, in order: one ``score_fn.batch`` call for a group of several
    (when the scorer has one), else clip by clip. A batch call that fails as a whole (or
    answers with the wrong count) is logged and its clips are scored one by one; a clip whose
    outcome in the batch is an exhausted resource (:func:`resource_exhausted`) is scored again
    alone (:func:`_alone_when_exhausted`)."""
    batch = getattr(job.score_fn, "batch", None)
    if batch is None or len(entries) < 2:
        return _one_by_one(job, entries)
    try:
        got = list(batch(entries, job.cfg, job.device))
        if len(got) != len(entries):
            raise InputError(f"score_fn.batch returned {len(got)} outcomes for "
                             f"{len(entries)} clips")
    except Exception as exc:  # noqa: BLE001 - fall back to one clip at a time
        log.warning("geocon bench: scoring a group of %d clips failed (%s); scoring them one "
                    "by one", len(entries), _reason(exc))
        return _one_by_one(job, entries)
    return _alone_when_exhausted(job, entries, got)


def _alone_when_exhausted(job: _Job, entries: Sequence[ManifestEntry],
                          got: Sequence[Outcome]) -> Iterator[Outcome]:
    """The batch's outcomes ``got``, in order; a clip whose outcome says a resource ran out
    (the group's memory, maybe) is scored again alone (:func:`_one_by_one`) and that outcome
    stands: :func:`_result` raises it if the clip runs out alone too."""
    for entry, outcome in zip(entries, got):
        if isinstance(outcome, Exception) and resource_exhausted(outcome) is not None:
            log.warning("geocon bench: clip %s ran out of a resource in a group of %d (%s); "
                        "scoring it alone", entry.clip_id, len(entries), _reason(outcome))
            yield from _one_by_one(job, [entry])
        else:
            yield outcome


def _resolve(entry: ManifestEntry, key: str, unreadable: Optional[str], store: ResultStore,
             job: _Job, summary: RunSummary, work: Optional[WorkQueue]) -> Optional[_Todo]:
    """Skip or link a clip the store holds (and mark its work row done); else the
    :class:`_Todo` that scores it."""
    cfg_hash = job.cfg_hash
    done = [work.done_statement(entry.clip_id)] if work is not None else []
    status, version, again = _stored_status(store, key, job)
    if status is None or again:
        rescores = version if again and job.rescore_versions and _stale(version) else None
        return _Todo(entry, key, unreadable, status is not None, done, work, rescores=rescores)
    link = store.clip_link(entry.clip_id, cfg_hash)
    kept = link is not None and link[0] == key
    # the rows kept, by version (the summary names older and newer ones), error rows apart
    counts = summary.skipped_versions if kept else summary.linked_versions
    if status == "error":
        if not isinstance(counts, VersionCounts):  # a summary built with plain dicts
            counts = VersionCounts(counts)
            setattr(summary, "skipped_versions" if kept else "linked_versions", counts)
        counts = counts.errors
    counts[version] = counts.get(version, 0) + 1
    if kept:
        summary.skipped += 1
        row = _clip_row(entry)
        if link[1] != entry_json(row["entry"]):
            store.put(row, key, cfg_hash, None)  # the manifest's metadata changed: keep it
        if work is not None:
            work.finish(entry.clip_id)
    else:
        store.put(_clip_row(entry), key, cfg_hash, None, also=done)
        summary.linked += 1
        if work is not None:
            work.settle(entry.clip_id)
    return None


def _stored_status(store: ResultStore, key: str, job: _Job
                   ) -> Tuple[Optional[str], str, bool]:
    """(status of the row stored under (``key``, the run's config), None when there is none;
    the package version it records, "unknown" when none; whether to score it again: an error
    row under ``retry_errors``, any row recording an older package version than the running
    one under ``rescore_versions`` (:func:`_stale`); never a row of a newer release). One
    query, whatever the options."""
    row = store._one("SELECT status, version FROM results WHERE content_hash=? AND "
                     "config_hash=?", (key, job.cfg_hash))
    if row is None:
        return None, "unknown", False
    status, version = row
    label = str(version or "unknown")
    stale = job.rescore_versions and _stale(version)
    retry = status == "error" and job.retry_errors and not is_newer_version(label, __version__)
    return status, label, stale or retry


def _stale(version: Optional[str]) -> bool:
    """Whether a stored row recording ``version`` (None: "unknown") is of an older release
    than the running one (by release order): what ``rescore_versions`` replaces. A row of
    the running version or of a newer release is never stale."""
    return is_older_version(str(version or "unknown"))


def _store(t: _Todo, outcome: Outcome, store: ResultStore, job: _Job,
           summary: RunSummary) -> None:
    """Store one scored clip with its work row's "done" in one transaction; count it."""
    summary.computed += 1
    result = _result(t.entry, job, t.key, outcome)
    store.put(_clip_row(t.entry), t.key, job.cfg_hash, result, replace=t.replace, also=t.also)
    if t.work is not None:
        t.work.settle(t.entry.clip_id)
        t.work.unlock_content(t.key)
    st = result["status"]
    setattr(summary, st, getattr(summary, st) + 1)
    if t.rescores is not None:
        summary.rescored_versions[t.rescores] = summary.rescored_versions.get(t.rescores, 0) + 1
    if st == "error":
        summary.errors.append(f"{t.entry.clip_id}: {result.get('reason')}")


def _score_group(group: Sequence[_Todo], store: ResultStore, job: _Job,
                 summary: RunSummary, bar) -> None:
    """Score the group and store each clip (:func:`_store`) as soon as its outcome is
    known."""
    outcomes = _outcomes(job, [t.entry for t in group])
    for t, outcome in zip(group, outcomes):
        _store(t, outcome, store, job, summary)
        _advance(bar, summary)
