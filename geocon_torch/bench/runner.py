"""Resumable, shardable leaderboard runs: manifest -> SQLite store.

Resume: before scoring a clip the runner hashes its bytes; if (content hash, config hash) is in
the store the clip is skipped (a clip row is linked if the bytes were stored under another id).
Each scored clip is committed in one transaction, so a run killed at any moment loses at most
the clips in flight and a re-run neither recomputes nor duplicates anything. A clip whose
scorer raises is stored with ``status: "error"`` and the exception as ``reason``; the run goes
on (``retry_errors=True`` recomputes those rows).

Sharding (``torchrun --nproc_per_node N -m geocon_torch.cli bench ...``): rank r takes clips
``r::N`` of the manifest and writes its rows itself to the SAME SQLite file (WAL mode, busy
timeout and retried ``BEGIN IMMEDIATE`` transactions: one small write per clip, so lock waits
are milliseconds). A gloo process group is only used for a final barrier and to gather the
per-rank summaries. This is safe on one machine (the file must be on a local disk); a job
spanning several nodes is refused, because SQLite locking over a network file system is not
reliable — run one job per node with its own database instead.
"""
from __future__ import annotations

import datetime
import hashlib
import os
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist
from tqdm.auto import tqdm

from ..config import GeoConConfig
from ..errors import InputError, VideoReadError
from ..io import content_hash
from ..pipeline import pinned_config, score_clip
from ..result import ClipResult, migrate_result
from .manifest import ManifestEntry, check_unique_ids, load_manifest
from .schema import result_problems
from .store import ResultStore

ScoreFn = Callable[[ManifestEntry, GeoConConfig, Optional[str]], Dict[str, Any]]


def default_score_fn(entry: ManifestEntry, config: GeoConConfig,
                     device: Optional[str]) -> Dict[str, Any]:
    """Score one manifest entry with :func:`geocon_torch.pipeline.score_clip`."""
    result = score_clip(entry.path, masks=entry.masks_path, poses=entry.poses_path,
                        config=config, device=device, progress=False)  # the runner has a bar
    return result.to_dict()


def content_key(path: Union[str, Path]) -> Tuple[str, Optional[str]]:
    """(key, problem) for a video file / image folder: the key is
    :func:`geocon_torch.io.content_hash` (SHA-256 of the bytes); a path that cannot be hashed
    (missing, zero-byte, folder without images) gets ``"unreadable:<sha256 of the absolute
    path>"`` and the reason, so its error row is found again on resume and a file that appears
    later is scored under its real hash."""
    p = Path(path)
    try:
        return str(content_hash(p)), None
    except Exception as exc:  # noqa: BLE001 - any unreadable path gets a stable stand-in key
        key = "unreadable:" + hashlib.sha256(str(p.resolve()).encode()).hexdigest()[:32]
        return key, f"{type(exc).__name__}: {exc}"


def error_result(entry: ManifestEntry, config: GeoConConfig, reason: str,
                 content_hash: Optional[str] = None) -> Dict[str, Any]:
    """A schema-conforming ``status: "error"`` result for a clip the scorer could not handle
    (its ``prompt_category`` is the manifest's)."""
    return ClipResult.failed(entry.clip_id, "error", reason, config, path=entry.path,
                             content_hash=content_hash,
                             prompt_category=entry.prompt_category).to_dict()


def _clip_row(entry: ManifestEntry) -> Dict[str, Any]:
    return {"clip_id": entry.clip_id, "model": entry.model, "model_version": entry.model_version,
            "prompt_category": entry.prompt_category, "prompt": entry.prompt, "seed": entry.seed,
            "scene": entry.scene, "path": entry.path, "entry": entry.to_dict()}


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

    def merge(self, other: "RunSummary") -> "RunSummary":
        out = RunSummary(rank=0, world_size=self.world_size)
        for k in ("total", "computed", "skipped", "linked", "ok", "not_applicable", "error"):
            setattr(out, k, getattr(self, k) + getattr(other, k))
        out.elapsed_s = max(self.elapsed_s, other.elapsed_s)
        out.errors = self.errors + other.errors
        return out

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


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


def run_manifest(manifest: Union[str, Path, Sequence[ManifestEntry]],
                 db: Union[str, Path], *, config: Union[None, str, Path, dict,
                                                        GeoConConfig] = None,
                 score_fn: Optional[ScoreFn] = None, device: Optional[str] = None,
                 retry_errors: bool = False, progress: bool = True,
                 distributed: Optional[bool] = None,
                 dist_timeout_s: float = 7 * 24 * 3600.0) -> RunSummary:
    """Score every clip of ``manifest`` into the store ``db``; resumable and shardable.

    Args:
        manifest: a manifest path (CSV / JSONL) or a list of :class:`ManifestEntry`.
        db: the SQLite results file.
        config: a GeoConConfig, dict, JSON path or None (defaults); its hash keys the rows.
        score_fn: ``f(entry, config, device) -> result dict`` (default: the real pipeline).
        device: torch device string; under torchrun "cuda" becomes ``cuda:LOCAL_RANK``.
        retry_errors: recompute clips whose stored row has status "error".
        progress: show a tqdm bar (one per rank).
        distributed: None = auto (on when WORLD_SIZE > 1), False = ignore torchrun variables.
        dist_timeout_s: how long a finished rank waits at the final barrier for the others.

    Returns:
        the :class:`RunSummary` of this rank, or of the whole job on rank 0 when distributed.
    """
    entries = list(load_manifest(manifest) if isinstance(manifest, (str, Path)) else manifest)
    check_unique_ids(entries, "manifest entries")
    score_fn = score_fn or default_score_fn
    rank, world, local_rank, local_world = _dist_info()
    use_dist = (world > 1) if distributed is None else (bool(distributed) and world > 1)
    if not use_dist:
        rank, world, local_rank = 0, 1, 0
    elif local_world != world:
        raise InputError(
            f"geocon bench under torchrun spans {world // max(local_world, 1)} nodes: one SQLite "
            "file cannot be shared safely across machines; run one job per node, each with "
            "its own --db on a local disk")
    dev = _rank_device(device, local_rank, world)
    cfg = pinned_config(config, dev)  # results are keyed by the calibration file too
    cfg_hash = cfg.config_hash()
    created_group = False
    if use_dist:
        if not dist.is_initialized():
            dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=dist_timeout_s))
            created_group = True
    shard = entries[rank::world]
    summary = RunSummary(total=len(shard), rank=rank, world_size=world)
    t0 = time.monotonic()
    bar = tqdm(shard, desc=f"geocon bench [rank {rank}/{world}]" if world > 1 else "geocon bench",
               unit="clip", disable=not progress, position=rank, leave=True, dynamic_ncols=True)
    try:
        with ResultStore(db) as store:
            for entry in bar:
                _run_one(entry, store, cfg, cfg_hash, score_fn, dev, retry_errors, summary)
                bar.set_postfix(done=summary.computed, skip=summary.skipped + summary.linked,
                                err=summary.error, refresh=False)
    finally:
        bar.close()
        summary.elapsed_s = time.monotonic() - t0
    if use_dist:
        summary = _gather_summaries(summary, rank, world)
        if created_group:
            dist.destroy_process_group()
    return summary


def _gather_summaries(summary: RunSummary, rank: int, world: int) -> RunSummary:
    """Wait for every rank, then merge all ranks' summaries on rank 0 (others keep their own)."""
    dist.barrier()
    gathered: List[Optional[RunSummary]] = [None] * world if rank == 0 else []
    dist.gather_object(summary, gathered if rank == 0 else None, dst=0)
    if rank != 0:
        return summary
    total = gathered[0]
    for s in gathered[1:]:
        total = total.merge(s)
    total.world_size = world
    return total


class _Unreadable(VideoReadError):
    """The clip's path could not even be hashed (missing, empty, ...): an error row."""


def _run_one(entry: ManifestEntry, store: ResultStore, cfg: GeoConConfig, cfg_hash: str,
             score_fn: ScoreFn, device: Optional[str], retry_errors: bool,
             summary: RunSummary) -> None:
    key, unreadable = content_key(entry.path)
    clip = _clip_row(entry)
    status = store.status_of(key, cfg_hash)
    if status is not None and not (retry_errors and status == "error"):
        if store.linked(entry.clip_id, cfg_hash) == key:
            summary.skipped += 1
        else:
            store.put(clip, key, cfg_hash, None)
            summary.linked += 1
        return
    summary.computed += 1
    try:
        if unreadable is not None:
            raise _Unreadable(unreadable)
        result = score_fn(entry, cfg, device)
        problems = result_problems(result)
        if problems:
            raise InputError("scorer returned an invalid result: " + "; ".join(problems))
        result = migrate_result(result)
        result["clip"] = entry.clip_id  # the manifest's unique id, not the file stem
        if entry.prompt_category is not None:  # the manifest names the prompt family
            result["prompt_category"] = entry.prompt_category
        if result.get("content_hash") is None:
            result["content_hash"] = key
    except _Unreadable as exc:
        result = error_result(entry, cfg, str(exc))
    except Exception as exc:  # noqa: BLE001 - one bad clip must not stop the run
        reason = f"{type(exc).__name__}: {exc}".strip()
        tb = traceback.extract_tb(exc.__traceback__)
        if tb:
            reason += f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})"
        result = error_result(entry, cfg, reason, key)
    if result.get("config_hash") != cfg_hash:
        result["config_hash_reported"] = result.get("config_hash")
        result["config_hash"] = cfg_hash
    store.put(clip, key, cfg_hash, result, replace=status is not None)
    st = result["status"]
    setattr(summary, st, getattr(summary, st) + 1)
    if st == "error":
        summary.errors.append(f"{entry.clip_id}: {result.get('reason')}")
