"""One store from per-node shards (``geocon merge OUT SHARD...``).

A leaderboard scored without a server runs one job per node, each into its own SQLite file;
:func:`merge_stores` copies their rows into one store (a SQLite file or a PostgreSQL URL):

* a ``results`` row is keyed by (content hash, config hash): a key OUT lacks is copied as it
  was stored; a key OUT holds with the same result is left alone. Results are compared in the
  current result schema (an older row is read through
  :func:`~geocon_torch.result.migrate_result`, so a 2.x and a 3.x row of the same scores are the
  same) without the fields that legitimately differ between nodes: ``timing_s``, ``path``
  (mount points) and ``clip`` (the id the bytes were first scored under), and without the
  ``config`` block, which the config hash of the key stands for (a row written before a config
  field existed records no default for it); numbers that are
  equal are the same (``0.0`` and ``-0.0``, ``1`` and ``1.0``: a signed zero or an int / float
  spelling changes no statistic), ``true`` and ``1`` are not. Versions are compared in release
  order (:func:`~geocon_torch.bench.stats.version_order`; a row that records none, or text
  that is no version, is older than any release), and a row is never replaced by one of an
  older version. A scored result (status ok / not_applicable) replaces an ``error`` row of
  OUT of the same or an older version (as ``--retry-errors`` does in one store: a node's
  retried clip reaches OUT), listed in ``updates``; a shard's error row never replaces a
  result, nor another error row. A scored result of the running geocon_torch version replaces
  a scored result of an older version (``version``: a node's ``geocon bench
  --rescore-versions`` reaches OUT after an upgrade), listed in ``updates`` with its differing
  fields. Two *different* scored results otherwise are a conflict: OUT keeps its row and the
  conflict lists the differing fields with both values (:func:`listed_differences`: the ones
  that matter first, a field one row lacks as :func:`absent`, at most :data:`MAX_DIFFS` and
  then ``more_differences``: how many were left out); when their versions differ the
  conflict's ``hint`` says what to do: re-score the store(s) holding an older version's row
  (:func:`store_advice`: ``geocon bench MANIFEST --db STORE --rescore-versions`` with the
  options of the config, then merge again), or, where a row is of a version newer than the
  running one, upgrade geocon_torch (OUT's newer row is kept; a shard's newer row replaces
  OUT's older one once the merging install is that version); when both rows record different
  numeric environments (``result["numeric_env"]``: CPU class and library builds, which can
  move the last digits), the conflict lists both under ``numeric_env`` and its hint says so.
  The environment itself is never a difference (two machines that give the same numbers give
  the same row). Scored rows of another version than the running one that a shard adds (keys
  OUT lacked) are counted per shard in ``other_versions`` (:func:`other_version_notes` says
  which store to re-score): a shard still holding an older version's rows is named even where
  OUT had none of its keys;
* a ``clips`` row is keyed by (clip_id, config hash): copied when new; a conflict when OUT's
  row points at other bytes. Rows pointing at the same bytes are compared field by field
  (generator, prompt_category, prompt, seed, scene, path, the manifest entry as sorted-key
  JSON (its key order is no difference), ...; not ``updated_at``): the row written last
  (``updated_at``) wins, so a manifest fix re-run on a node reaches OUT (listed in
  ``updates``); equal timestamps with different fields are a conflict. The write times come
  from each node's own clock: with ``clock_skew_s`` > 0 (``geocon merge --clock-skew
  SECONDS``), rows with different fields written less than that many seconds apart are a
  conflict too, since a node whose clock runs ahead would otherwise win with an older row.
  Keep the nodes' clocks synchronised (NTP) either way.

Shards are read in the order given (an earlier shard wins a conflict with a later one), each in
one snapshot (results and clip rows in one read transaction: a shard a job still writes never
gives a clip row without its result), and written in batches of one transaction each, so a
merge killed midway is completed by running it again, and re-running a finished merge changes
nothing.

OUT may be a store a job writes meanwhile (a live PostgreSQL leaderboard). A key that the job
commits in OUT after the merge read OUT is never overwritten by an insert nor counted as added:
the insert keeps OUT's row (``ON CONFLICT DO NOTHING RETURNING``; SQLite before 3.35 looks the
key up inside its write transaction) and the shard's row is decided again against OUT's row as
it is now (the same, a replacement listed in ``updates``, a conflict). A replacement itself
(an error row, a row of another version, an older clip row of OUT) is decided on the row the
merge read: if the job rewrites that very row meanwhile (``--retry-errors``,
``--rescore-versions``), the shard's row may replace the job's; merge again once the job is
done to have every such row decided on OUT's final rows.
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .._version import __version__
from ..errors import InputError
from ..result import migrate_result
from .stats import rescore_advice, version_order
from .store import CLIP_FIELDS, ResultStore, is_server_url, open_readable

#: result fields never compared: they differ between nodes, or (``config``) follow from the key
#: (the config hash; a row written before a config field existed records no default for it)
VOLATILE_FIELDS = ("timing_s", "path", "clip", "numeric_env", "config")
#: the fields a listing of differences names first, in this order (the rest follow: the
#: sections' own fields, then the nested ones such as per-pair and per-object values, each
#: alphabetically)
FIRST_FIELDS = ("status", "reason", "score", "regime", "version",
                "background.status", "background.reason", "background.ir", "background.ge_px",
                "background.ir_h", "background.ge_h_px", "background.ir_f", "background.ge_f_px",
                "background.pass", "gate.decision", "gate.statistic")
#: clip row fields compared between stores (the key, the bytes and the write time aside)
CLIP_METADATA = tuple(k for k in CLIP_FIELDS
                      if k not in ("clip_id", "config_hash", "content_hash", "updated_at"))
BATCH = 500  # rows per transaction
MAX_DIFFS = 12  # differing fields listed per conflict
ResultKey = Tuple[str, str]


@dataclass
class MergeReport:
    """What a merge did; ``conflicts`` are JSON-ready dicts (module doc)."""

    out: str
    shards: List[str]
    results_added: int = 0
    results_same: int = 0
    results_replaced: int = 0  # OUT's error rows replaced by a shard's scored result
    #: OUT's scored rows of an older version replaced by a shard's row of the running version
    results_upgraded: int = 0
    results_errors_skipped: int = 0  # a shard's error rows where OUT holds another row
    clips_added: int = 0
    clips_same: int = 0
    clips_updated: int = 0  # OUT's clip rows replaced by a newer shard row
    clips_older: int = 0  # a shard's older clip rows (OUT's newer row kept)
    conflicts: List[Dict[str, Any]] = field(default_factory=list)
    updates: List[Dict[str, Any]] = field(default_factory=list)  # rows of OUT replaced
    #: scored rows a shard added (keys OUT lacked) that record another geocon_torch version
    #: than the running one: {shard: {version: rows}}, and {shard: {config hash: rows}}
    other_versions: Dict[str, Dict[str, int]] = field(default_factory=dict)
    other_version_configs: Dict[str, Dict[str, int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        #: key -> (shard, version) of each row counted in other_versions (not reported)
        self._added_other: Dict[ResultKey, Tuple[str, str]] = {}

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


def comparable(result_json: str) -> Dict[str, Any]:
    """A stored result in the current schema, without :data:`VOLATILE_FIELDS` (what two rows
    of one key are compared on)."""
    res = migrate_result(json.loads(result_json))
    return {k: v for k, v in res.items() if k not in VOLATILE_FIELDS}


def _canonical(obj: Any) -> Any:
    """``obj`` with every integral float written as its int (``-0.0`` -> ``0``, ``1.0`` ->
    ``1``): numbers that are equal get one spelling, so a signed zero or an int / float
    spelling is never a conflict (module doc); booleans and other values are kept."""
    if isinstance(obj, float):
        return int(obj) if obj.is_integer() else obj
    if isinstance(obj, dict):
        return {k: _canonical(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_canonical(v) for v in obj]
    return obj


def _text(obj: Any) -> str:
    """The canonical JSON text of a (part of a) comparable result: what "same" means."""
    return json.dumps(_canonical(obj), sort_keys=True, separators=(",", ":"))


def _digest(result_json: str) -> str:
    return hashlib.sha256(_text(comparable(result_json)).encode()).hexdigest()


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


def absent() -> Dict[str, bool]:
    """The value a listing of differences gives a field that one of two results lacks:
    ``{"absent": true}`` in JSON, which no field of a result can hold (a leaf is never a
    non-empty object), so it is never mistaken for a stored ``null``."""
    return {"absent": True}


def _field_order(path: str) -> Tuple[int, int, str]:
    """The sort key of a differing field: :data:`FIRST_FIELDS` in their order, then the
    top-level fields and the sections' own fields, then the nested ones (per-pair, per-object
    values), each alphabetically."""
    if path in FIRST_FIELDS:
        return (0, FIRST_FIELDS.index(path), path)
    return (1 if "[" not in path and path.count(".") <= 1 else 2, 0, path)


def listed_differences(kept_json: str, other_json: str, limit: Optional[int] = MAX_DIFFS
                       ) -> Tuple[Dict[str, List[Any]], int]:
    """The differing fields of two stored results of one key, the ones that matter first, and
    how many were left out.

    Args:
        kept_json, other_json: the stored results (JSON text).
        limit: the most fields listed (None: all).

    Returns:
        ``({field path: [kept value, other value]}, fields left out)``: fields compared in
        the current schema without :data:`VOLATILE_FIELDS` (the ``config`` block follows from
        the config hash of the key), by the rule of the conflict digest (canonical JSON:
        ``true`` and ``1`` differ, ``0.0`` and ``-0.0`` do not), so a conflict always lists a
        field; a field one result lacks is :func:`absent` there. Ordered by
        :func:`_field_order` (status, reason, score, regime, version, the background
        headline, the gate, then the rest). Results that differ only in how their fields
        nest (no field differs) are listed whole as ``result_json``.
    """
    kept, other = comparable(kept_json), comparable(other_json)
    a, b = _leaves(kept, "", {}), _leaves(other, "", {})
    keys = sorted((k for k in set(a) | set(b)
                   if k not in a or k not in b or _text(a[k]) != _text(b[k])), key=_field_order)
    if not keys and _text(kept) != _text(other):
        return {"result_json": [kept_json, other_json]}, 0
    shown = keys if limit is None else keys[:limit]
    return ({k: [a[k] if k in a else absent(), b[k] if k in b else absent()] for k in shown},
            len(keys) - len(shown))


def differences(kept_json: str, other_json: str) -> Dict[str, List[Any]]:
    """``{field path: [kept value, other value]}`` of two stored results, at most
    :data:`MAX_DIFFS`, the ones that matter first (:func:`listed_differences`, which also
    says how many were left out)."""
    return listed_differences(kept_json, other_json)[0]


def _listing(kept_json: str, other_json: str) -> Dict[str, Any]:
    """The ``differences`` of a conflict / update entry, with ``more_differences`` (the number
    of fields left out) when the listing was cut at :data:`MAX_DIFFS`."""
    diffs, more = listed_differences(kept_json, other_json)
    return {"differences": diffs, **({"more_differences": more} if more else {})}


def numeric_envs(kept_json: str, other_json: str) -> Optional[List[Any]]:
    """[kept, other] ``numeric_env`` of two stored results (:mod:`geocon_torch._numeric_env`)
    when both record one and they differ; None otherwise (the same environment, or a row
    written before it was recorded)."""
    a, b = (json.loads(t).get("numeric_env") for t in (kept_json, other_json))
    return [a, b] if isinstance(a, dict) and isinstance(b, dict) and a != b else None


def _entry(text: Any) -> Any:
    """A clip row's stored manifest entry (``entry_json``) as data (the text if not JSON)."""
    try:
        return json.loads(text) if isinstance(text, str) else text
    except ValueError:
        return text


def _entry_text(text: Any) -> str:
    """A stored manifest entry as sorted-key JSON text: entries that differ only in key order
    or spacing get one text (``true`` and ``1``, ``1`` and ``1.0`` still differ)."""
    return json.dumps(_entry(text), sort_keys=True)


def clip_differences(kept: Dict[str, Any], other: Dict[str, Any]) -> Dict[str, List[Any]]:
    """``{field: [kept value, other value]}`` of two clip rows of one key: the columns of
    :data:`CLIP_METADATA`, the manifest entry field by field (``entry.<field>``; entries
    compared as sorted-key JSON, so key order is no difference; ones whose text differs with no
    field that does, e.g. ``true`` and ``1``, are listed whole as ``entry_json``)."""
    diffs = {k: [kept[k], other[k]] for k in CLIP_METADATA
             if k != "entry_json" and kept[k] != other[k]}
    if _entry_text(kept["entry_json"]) != _entry_text(other["entry_json"]):
        a = _leaves(_entry(kept["entry_json"]), "entry", {})
        b = _leaves(_entry(other["entry_json"]), "entry", {})
        keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        diffs.update({k: [a.get(k), b.get(k)] for k in keys} if keys else
                     {"entry_json": [kept["entry_json"], other["entry_json"]]})
    return diffs


def _open_shard(shard: Union[str, Path]) -> ResultStore:
    """A shard to read (read-only where it may not be written: :func:`~.store.open_readable`)."""
    if not is_server_url(shard) and not Path(shard).is_file():
        raise InputError(f"shard not found: {shard}")
    return open_readable(shard)


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


def _flush(dest: ResultStore, table: str, added: List[Dict[str, Any]],
           replaced: List[Dict[str, Any]], force: bool = False) -> List[Dict[str, Any]]:
    """Write the pending rows of ``table`` once :data:`BATCH` of them wait (or ``force``):
    new keys inserted, replaced ones upserted; the lists are emptied. Returns the ``added``
    rows that were not written: another writer (a live job) committed their key in ``dest``
    after the merge read it (:func:`_late_results`, :func:`_late_clips` decide them again)."""
    if not force and len(added) + len(replaced) < BATCH:
        return []
    late: List[Dict[str, Any]] = []
    if added:
        kept = dest.insert_raw(added if table == "results" else [],
                               added if table == "clips" else [])[table == "clips"]
        keys = set(kept)
        late = [r for r in added if _key(table, r) in keys]
        added.clear()
    if replaced:
        dest.insert_raw(replaced if table == "results" else [],
                        replaced if table == "clips" else [], replace=True)
        replaced.clear()
    return late


def _key(table: str, row: Dict[str, Any]) -> Tuple[str, str]:
    """The key of a raw row of ``table``: (content hash, config hash) or (clip_id, config)."""
    return ((row["content_hash"] if table == "results" else row["clip_id"]),
            row["config_hash"])


#: what :func:`_merge_results` knows of a row of OUT: (digest, status, reason, version)
Seen = Tuple[str, str, Any, Any]


def store_advice(stores: Sequence[str], config_hash: Optional[str] = None) -> str:
    """How to re-score the rows of the store(s) ``stores`` (shards or OUT) with the running
    version: :func:`~geocon_torch.bench.stats.rescore_advice` of a store (the options of the
    config ``config_hash``), naming the store as its ``--db`` (several: ``--db STORE`` for
    each)."""
    how, names = rescore_advice("store", config_hash), " and ".join(stores)
    if "--db DB" not in how:
        return f"{how} (DB: {names})"
    if len(stores) == 1:
        return how.replace("--db DB", f"--db {stores[0]}")
    return f"{how.replace('--db DB', '--db STORE')} for each STORE of {names}"


def version_hint(kept: Tuple[str, Any], other: Tuple[str, Any],
                 config_hash: Optional[str] = None) -> Optional[str]:
    """How to resolve a conflict between two scored results of different geocon_torch
    versions, each given as (store name, version), of the config ``config_hash``; None when
    the versions are the same. Versions are ordered by :func:`~.stats.version_order`: when
    neither is newer than the running version, re-score the store(s) whose row is not of the
    running version; when OUT's (kept) row is newer, upgrade this geocon_torch and the
    shard's node and re-score the shard; when the shard's row is, upgrade this geocon_torch
    and merge again (its rows then replace older ones)."""
    if kept[1] == other[1]:
        return None
    head = (f"rows of different geocon_torch versions ({kept[1]} in {kept[0]}, {other[1]} in "
            f"{other[0]}; this is {__version__})")
    newest = max(kept[1], other[1], key=version_order)
    if version_order(newest) <= version_order(__version__):
        stale = [name for name, version in (kept, other) if version != __version__]
        return f"{head}: re-score with {store_advice(stale, config_hash)}, then merge again"
    if version_order(other[1]) > version_order(kept[1]):
        return (f"{head}: {newest} is newer than this geocon_torch {__version__}, so the "
                f"rows of {other[0]} replace no row: upgrade geocon_torch here to {newest} "
                f"and merge again")
    return (f"{head}: {newest} is newer than this geocon_torch {__version__}, so "
            f"{kept[0]} keeps its row (a row is never replaced by an older version's): "
            f"upgrade geocon_torch to {newest} here and where {other[0]} is scored, "
            f"re-score with {store_advice([other[0]], config_hash)}, then merge again")


def _replacement(have: Seen, row: Dict[str, Any]) -> Optional[str]:
    """Why the shard's ``row`` replaces OUT's row ``have`` of the same key and another
    digest: "error" (OUT's error row, a scored result of the same or a newer version),
    "version" (OUT's scored row of an older version, a scored row of the running version),
    or None (kept: a row is never replaced by one of an older version, module doc)."""
    if row["status"] == "error" or version_order(row["version"]) < version_order(have[3]):
        return None
    if have[1] == "error":
        return "error"
    return "version" if row["version"] == __version__ != have[3] else None


def _merge_results(dest: ResultStore, shard: str, shard_rows: Iterable[Dict[str, Any]],
                   seen: Dict[ResultKey, Seen], report: MergeReport) -> None:
    """Copy the results ``shard_rows`` of the shard named ``shard`` into ``dest`` (module doc);
    ``seen`` maps every key of ``dest`` to (digest, status, reason, version) and follows the
    writes."""
    added: List[Dict[str, Any]] = []
    replaced: List[Dict[str, Any]] = []
    for row in shard_rows:
        _merge_result(dest, shard, row, seen, report, added, replaced)
        _late_results(dest, shard, _flush(dest, "results", added, replaced), seen, report,
                      added, replaced)
    while added or replaced:
        _late_results(dest, shard, _flush(dest, "results", added, replaced, force=True), seen,
                      report, added, replaced)


def _seen(row: Dict[str, Any]) -> Seen:
    """What :func:`_merge_results` keeps of a raw results row."""
    return (_digest(row["result_json"]), row["status"], row["reason"], row["version"])


def _late_results(dest: ResultStore, shard: str, late: List[Dict[str, Any]],
                  seen: Dict[ResultKey, Seen], report: MergeReport,
                  added: List[Dict[str, Any]], replaced: List[Dict[str, Any]]) -> None:
    """Decide again the shard rows counted as added whose key another writer committed in
    ``dest`` meanwhile (:func:`_flush`): against ``dest``'s row now (same, replaced,
    conflict, ...), never as added."""
    for row in late:
        report.results_added -= 1
        key = (row["content_hash"], row["config_hash"])
        _uncount_other_version(report, key)
        now = dest.raw_result(*key)
        if now is None:  # deleted again since: added after all
            seen.pop(key, None)
        else:
            seen[key] = _seen(now)
        _merge_result(dest, shard, row, seen, report, added, replaced)


def _merge_result(dest: ResultStore, shard: str, row: Dict[str, Any],
                  seen: Dict[ResultKey, Seen], report: MergeReport,
                  added: List[Dict[str, Any]], replaced: List[Dict[str, Any]]) -> None:
    """Decide one results row of the shard against ``seen`` (module doc): appended to
    ``added`` / ``replaced`` (to be written), or counted as the same, a skipped error row or a
    conflict."""
    key = (row["content_hash"], row["config_hash"])
    digest = _digest(row["result_json"])
    have = seen.get(key)
    why = None if have is None or have[0] == digest else _replacement(have, row)
    if have is None:
        added.append(row)
        report.results_added += 1
        _count_other_version(report, shard, row)
    elif have[0] == digest:
        report.results_same += 1
    elif why is not None:
        replaced.append(row)
        _uncount_other_version(report, key)
        if why == "error":
            report.results_replaced += 1
            diffs = {"status": [have[1], row["status"]], "reason": [have[2], row["reason"]]}
            listing: Dict[str, Any] = {"differences": diffs}
        else:
            report.results_upgraded += 1
            listing = _listing(dest.stored_result_json(*key), row["result_json"])
        report.updates.append({
            "table": "results", "content_hash": key[0], "config_hash": key[1],
            "from": shard, **listing})
    elif row["status"] == "error":
        report.results_errors_skipped += 1
        return
    else:
        report.conflicts.append(_result_conflict(dest, shard, key, have, row))
        return
    seen[key] = (digest, row["status"], row["reason"], row["version"])


def _count_other_version(report: MergeReport, shard: str, row: Dict[str, Any]) -> None:
    """Count an added scored row of ``shard`` that records another version than the running
    one in ``report.other_versions`` / ``other_version_configs``."""
    version = str(row["version"] or "unknown")
    if row["status"] == "error" or version == __version__:
        return
    key = (row["content_hash"], row["config_hash"])
    report._added_other[key] = (shard, version)
    _step(report, shard, version, key[1], 1)


def _uncount_other_version(report: MergeReport, key: ResultKey) -> None:
    """Take back the count of :func:`_count_other_version` of the row added under ``key``
    when it leaves OUT again in this merge (replaced by a later shard's row) or was never
    added (a late row, :func:`_late_results`)."""
    if key in report._added_other:
        shard, version = report._added_other.pop(key)
        _step(report, shard, version, key[1], -1)


def _step(report: MergeReport, shard: str, version: str, config_hash: str, step: int) -> None:
    """Add ``step`` (1 or -1) to the shard's count of rows of ``version`` and of
    ``config_hash`` in the report (a count that reaches 0 is removed)."""
    for table, name in ((report.other_versions, version),
                        (report.other_version_configs, config_hash)):
        counts = table.setdefault(shard, {})
        counts[name] = counts.get(name, 0) + step
        if counts[name] <= 0:
            del counts[name]
        if not counts:
            del table[shard]


def other_version_notes(report: MergeReport) -> List[str]:
    """One line per shard of ``report.other_versions``: the rows of other geocon_torch versions
    it added and what to do (re-score the shard with the running version, or, for rows of a
    newer version, upgrade this one)."""
    lines = []
    for shard, counts in report.other_versions.items():
        listed = ", ".join(f"{n} row(s) of geocon_torch {v}" for v, n in counts.items())
        configs = sorted(report.other_version_configs.get(shard, {}))
        newer = sorted((v for v in counts if version_order(v) > version_order(__version__)),
                       key=version_order)
        if newer:
            todo = (f"{newer[-1]} is newer than this geocon_torch: upgrade it to {newer[-1]} "
                    f"and re-score the rows of older versions with it")
        else:
            todo = "re-score them with " + " and ".join(
                store_advice([shard], c) for c in (configs or [None]))
        lines.append(f"{shard}: added {listed}, and this is {__version__} (a release keeps "
                     f"the config hash, so their numbers may differ): {todo}, then merge again")
    return lines


def _result_conflict(dest: ResultStore, shard: str, key: ResultKey, have: Seen,
                     row: Dict[str, Any]) -> Dict[str, Any]:
    """The conflict entry of two different scored results of one key (module doc)."""
    kept = dest.stored_result_json(*key)
    conflict = {"table": "results", "content_hash": key[0], "config_hash": key[1],
                "kept_from": dest.name, "other_from": shard,
                **_listing(kept, row["result_json"])}
    hint = version_hint((dest.name, have[3]), (shard, row["version"]), key[1])
    envs = numeric_envs(kept, row["result_json"])
    if envs:
        conflict["numeric_env"] = envs
        hint = hint or ("the rows were computed in different numeric environments "
                        "(CPU class / library builds, result['numeric_env']): score "
                        "a leaderboard on one kind of machine, or re-score one store")
    if hint:
        conflict["hint"] = hint
    return conflict


def _merge_clips(dest: ResultStore, shard: str, shard_rows: Iterable[Dict[str, Any]],
                 rows: Dict[Tuple[str, str], Dict[str, Any]], report: MergeReport,
                 clock_skew_s: float = 0.0) -> None:
    """Copy the clip rows ``shard_rows`` of the shard named ``shard`` into ``dest`` (module
    doc); ``rows`` maps every key of ``dest`` to its row and follows the writes; rows with
    other fields written less than ``clock_skew_s`` seconds apart (or at the same time) are a
    conflict. A row counted as added whose key another writer committed in ``dest`` meanwhile
    is decided again against ``dest``'s row now."""
    added: List[Dict[str, Any]] = []
    newer: List[Dict[str, Any]] = []

    def late(found: List[Dict[str, Any]]) -> None:
        for row in found:
            report.clips_added -= 1
            key = (row["clip_id"], row["config_hash"])
            now = dest.raw_clip(*key)
            if now is None:  # deleted again since: added after all
                rows.pop(key, None)
            else:
                rows[key] = now
            _merge_clip(dest, shard, row, rows, report, clock_skew_s, added, newer)

    for row in shard_rows:
        _merge_clip(dest, shard, row, rows, report, clock_skew_s, added, newer)
        late(_flush(dest, "clips", added, newer))
    while added or newer:
        late(_flush(dest, "clips", added, newer, force=True))


def _merge_clip(dest: ResultStore, shard: str, row: Dict[str, Any],
                rows: Dict[Tuple[str, str], Dict[str, Any]], report: MergeReport,
                clock_skew_s: float, added: List[Dict[str, Any]],
                newer: List[Dict[str, Any]]) -> None:
    """Decide one clip row of the shard against ``rows`` (:func:`_merge_clips`): appended to
    ``added`` / ``newer`` (to be written), or counted as the same, older or a conflict."""
    key = (row["clip_id"], row["config_hash"])
    have = rows.get(key)
    if have is None:
        added.append(row)
        report.clips_added += 1
        rows[key] = row
        return
    diffs = ({"content_hash": [have["content_hash"], row["content_hash"]]}
             if have["content_hash"] != row["content_hash"] else
             clip_differences(have, row))
    apart = abs(float(row["updated_at"]) - float(have["updated_at"]))
    ordered = "content_hash" not in diffs and apart > 0 and apart >= clock_skew_s
    if not diffs:
        report.clips_same += 1
    elif ordered and row["updated_at"] > have["updated_at"]:
        newer.append(row)
        report.clips_updated += 1
        report.updates.append({"table": "clips", "clip_id": key[0], "config_hash": key[1],
                               "from": shard, "differences": diffs})
        rows[key] = row
    elif ordered:
        report.clips_older += 1
    else:  # other bytes, or write times too close to order with other fields
        conflict = {"table": "clips", "clip_id": key[0], "config_hash": key[1],
                    "kept_from": dest.name, "other_from": shard, "differences": diffs}
        if "content_hash" not in diffs:
            conflict["updated_at"] = [have["updated_at"], row["updated_at"]]
        report.conflicts.append(conflict)


def merge_stores(out: Union[str, Path], shards: Sequence[Union[str, Path]], *,
                 clock_skew_s: float = 0.0) -> MergeReport:
    """Merge ``shards`` (SQLite files or PostgreSQL URLs) into ``out`` (created if missing).
    ``clock_skew_s``: clip rows with other fields written less than this many seconds apart
    (by the nodes' clocks) are a conflict rather than ordered by write time (module doc).

    Returns:
        a :class:`MergeReport` (rows added / already there / replaced per table, conflicts
        with both values); only an error result (by a scored one of the same or a newer
        version), a scored result of an older geocon_torch version (by one of the running
        version) and a clip row (by a newer one of the same bytes) in ``out`` are ever
        overwritten, each listed in ``updates``; ``other_versions`` counts the added rows of
        other versions per shard.
    """
    if not (isinstance(clock_skew_s, (int, float)) and 0 <= clock_skew_s < float("inf")):
        raise InputError(f"clock_skew_s must be a finite number of seconds >= 0, "
                         f"got {clock_skew_s!r}")
    _check_names(out, shards)
    stores = [_open_shard(s) for s in shards]  # every shard readable before writing
    try:
        with ResultStore(out) as dest:
            report = MergeReport(out=dest.name, shards=[s.name for s in stores])
            seen = {(r["content_hash"], r["config_hash"]):
                    (_digest(r["result_json"]), r["status"], r["reason"], r["version"])
                    for r in dest.raw_results()}
            clips = {(c["clip_id"], c["config_hash"]): c for c in dest.raw_clips()}
            for shard in stores:
                results, clip_rows = shard.raw_snapshot()  # one snapshot (module doc)
                _merge_results(dest, shard.name, results, seen, report)
                _merge_clips(dest, shard.name, clip_rows, clips, report, clock_skew_s)
    finally:
        for s in stores:
            s.close()
    return report
