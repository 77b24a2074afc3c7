"""One store from per-node shards (``geocon merge OUT SHARD...``).

A leaderboard scored without a server runs one job per node, each into its own SQLite file;
:func:`merge_stores` copies their rows into one store (a SQLite file or a PostgreSQL URL):

* a ``results`` row is keyed by (content hash, config hash): a key OUT lacks is copied as it
  was stored; a key OUT holds with the same result is left alone; a key with a *different*
  result is a conflict: OUT keeps its row and the conflict lists every differing field with
  both values. Results are compared in the current result schema (an older row is read through
  :func:`~geocon_torch.result.migrate_result`, so a 2.x and a 3.x row of the same scores are the
  same) without the fields that legitimately differ between nodes: ``timing_s``, ``path``
  (mount points) and ``clip`` (the id the bytes were first scored under);
* a ``clips`` row is keyed by (clip_id, config hash): copied when new, a conflict when OUT's row
  points at other bytes.

Shards are read in the order given (an earlier shard wins a conflict with a later one) and
written in batches of one transaction each, so a merge killed midway is completed by running
it again, and re-running a finished merge changes nothing.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple, Union

from ..errors import InputError
from ..result import migrate_result
from .store import ResultStore, is_server_url

VOLATILE_FIELDS = ("timing_s", "path", "clip")
BATCH = 500  # rows per transaction
MAX_DIFFS = 12  # differing fields listed per conflict


@dataclass
class MergeReport:
    """What a merge did; ``conflicts`` are JSON-ready dicts (module doc)."""

    out: str
    shards: List[str]
    results_added: int = 0
    results_same: int = 0
    clips_added: int = 0
    clips_same: int = 0
    conflicts: List[Dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def comparable(result_json: str) -> Dict[str, Any]:
    """A stored result in the current schema, without :data:`VOLATILE_FIELDS`."""
    res = migrate_result(json.loads(result_json))
    return {k: v for k, v in res.items() if k not in VOLATILE_FIELDS}


def _digest(result_json: str) -> str:
    text = json.dumps(comparable(result_json), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _leaves(obj: Any, prefix: str, out: Dict[str, Any]) -> Dict[str, Any]:
    if isinstance(obj, dict) and obj:
        for k, v in obj.items():
            _leaves(v, f"{prefix}.{k}" if prefix else str(k), out)
    elif isinstance(obj, list) and obj:
        for i, v in enumerate(obj):
            _leaves(v, f"{prefix}[{i}]", out)
    else:
        out[prefix] = obj
    return out


def differences(kept_json: str, other_json: str) -> Dict[str, List[Any]]:
    """``{field path: [kept value, other value]}`` of two stored results (volatile fields
    ignored; a field missing on one side is None there), at most :data:`MAX_DIFFS`."""
    a = _leaves(comparable(kept_json), "", {})
    b = _leaves(comparable(other_json), "", {})
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    return {k: [a.get(k), b.get(k)] for k in keys[:MAX_DIFFS]}


def _open_shard(shard: Union[str, Path]) -> ResultStore:
    if not is_server_url(shard) and not Path(shard).is_file():
        raise InputError(f"shard not found: {shard}")
    return ResultStore(shard)


def _check_names(out: Union[str, Path], shards: Sequence[Union[str, Path]]) -> None:
    if not shards:
        raise InputError("geocon merge needs at least one SHARD store")

    def ident(x: Union[str, Path]) -> str:
        return str(x) if is_server_url(x) else str(Path(x).resolve())

    ids = [ident(s) for s in shards]
    if ident(out) in ids:
        raise InputError(f"the output store {out} is also listed as a shard")
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        raise InputError(f"shard listed twice: {dup[0]}")


def _merge_results(dest: ResultStore, shard: ResultStore, digests: Dict[Tuple[str, str], str],
                   report: MergeReport) -> None:
    batch: List[Dict[str, Any]] = []
    for row in shard.raw_results():
        key = (row["content_hash"], row["config_hash"])
        digest = _digest(row["result_json"])
        if key not in digests:
            digests[key] = digest
            batch.append(row)
            report.results_added += 1
        elif digests[key] == digest:
            report.results_same += 1
        else:
            kept = dest.stored_result_json(*key)
            report.conflicts.append({
                "table": "results", "content_hash": key[0], "config_hash": key[1],
                "kept_from": dest.name, "other_from": shard.name,
                "differences": differences(kept, row["result_json"])})
        if len(batch) >= BATCH:
            dest.insert_raw(batch, [])
            batch = []
    if batch:
        dest.insert_raw(batch, [])


def _merge_clips(dest: ResultStore, shard: ResultStore, links: Dict[Tuple[str, str], str],
                 report: MergeReport) -> None:
    batch: List[Dict[str, Any]] = []
    for row in shard.raw_clips():
        key = (row["clip_id"], row["config_hash"])
        if key not in links:
            links[key] = row["content_hash"]
            batch.append(row)
            report.clips_added += 1
        elif links[key] == row["content_hash"]:
            report.clips_same += 1
        else:
            report.conflicts.append({
                "table": "clips", "clip_id": key[0], "config_hash": key[1],
                "kept_from": dest.name, "other_from": shard.name,
                "differences": {"content_hash": [links[key], row["content_hash"]]}})
        if len(batch) >= BATCH:
            dest.insert_raw([], batch)
            batch = []
    if batch:
        dest.insert_raw([], batch)


def merge_stores(out: Union[str, Path], shards: Sequence[Union[str, Path]]) -> MergeReport:
    """Merge ``shards`` (SQLite files or PostgreSQL URLs) into ``out`` (created if missing).

    Returns:
        a :class:`MergeReport` (rows added / already there per table, conflicts with both
        values); nothing in ``out`` is overwritten.
    """
    _check_names(out, shards)
    stores = [_open_shard(s) for s in shards]  # every shard readable before writing
    try:
        with ResultStore(out) as dest:
            report = MergeReport(out=dest.name, shards=[s.name for s in stores])
            digests = {(r["content_hash"], r["config_hash"]): _digest(r["result_json"])
                       for r in dest.raw_results()}
            links = {(c["clip_id"], c["config_hash"]): c["content_hash"]
                     for c in dest.raw_clips()}
            for shard in stores:
                _merge_results(dest, shard, digests, report)
                _merge_clips(dest, shard, links, report)
    finally:
        for s in stores:
            s.close()
    return report
