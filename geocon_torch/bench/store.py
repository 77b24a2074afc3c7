"""Result stores: results keyed by (content hash, config hash), SQLite file or PostgreSQL server.

Two tables (a view ``leaderboard`` joins them), the same on both back ends:

* ``results(content_hash, config_hash, status, reason, result_json, ...)`` — one scored video
  per configuration. The primary key makes inserts idempotent: the same bytes under the same
  config are never scored twice, whatever their clip_id.
* ``clips(clip_id, config_hash, content_hash, generator, generator_version, prompt_category,
  prompt, seed, scene, path, ...)`` — the manifest row that points at a result (two clip_ids
  with identical bytes share a result); ``generator`` is the video generator that made the clip,
  ``prompt_category`` the manifest's prompt family (C1-C6 or a free label).

``ResultStore(db)`` opens the back end ``db`` names: a file path is a :class:`SQLiteStore` (the
embedded default); a ``postgresql://`` / ``postgres://`` URL or a libpq key=value string of
connection keywords (``service=NAME``, ``sslmode=require host=... dbname=...``) is a
:class:`~geocon_torch.bench.pg_store.PostgresStore` (a string of key=value tokens with a key
libpq does not know is refused, never taken for a file name). Every
query and write below is shared; a back end only supplies its connection, transactions,
placeholders and retry rule, so every reader (report, exports, preference pairs, statistics)
works on either.

Store formats (``meta.store_format``): "1" named the prompt family ``clips.category``; "2" named
it ``prompt_category`` and the generator ``clips.model`` / ``model_version``; "3" names the
generator ``generator`` / ``generator_version`` (docs/GLOSSARY.md: "model" is a geometric model
only). Opening a format-1 or format-2 store migrates it in place (one transaction: the columns
are renamed, the view rebuilt); a newer format is refused. Result rows keep the JSON they were
written with and are read through :func:`geocon_torch.result.migrate_result`, so 1.x and 2.x
rows come back in the current result schema (3).

SQLite concurrency: the database runs in WAL mode with a busy timeout; every write is one short
``BEGIN IMMEDIATE`` transaction (clip row + result row together, so a kill never leaves half a
clip) retried with back-off while another process holds the write lock. Several processes on
ONE machine may write the same file (that is how ``torchrun`` ranks share it); SQLite locking is
not reliable on network file systems, so keep the file on a local disk and use a PostgreSQL
store (or per-node files and ``geocon merge``) across machines. A reader
(:func:`open_readable`: :func:`load_results`, ``geocon report``, ``--export-*``, merge shards)
opens a store it may not write (a read-only file or folder), and every PostgreSQL store,
read-only: no schema is created, and a store of an older format, which needs migrating, is
refused. Every open, reader or writer, refuses an existing SQLite file or PostgreSQL database
that holds other tables but no geocon store (another program's database), before anything is
created in it or its journal mode is changed; a reader also refuses an empty database.

Order: every list a reader gets (:meth:`ResultStore.rows`, the raw rows, error clips, config
hashes) is sorted in Python by code point, which is SQLite's BINARY order of UTF-8 text, so a
PostgreSQL database with another collation (``en_US.UTF-8``, ICU) gives the same order.
"""
from __future__ import annotations

import csv
import json
import math
import os
import random
import re
import sqlite3
import time
import warnings
from collections import defaultdict
from pathlib import Path
from urllib.parse import quote
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple,
                    Union)

from .._checks import retired_name
from ..errors import GeoConError, InputError, OptionalDependencyError
from ..io._atomic import atomic_output
from ..result import gvgc_block, migrate_result
from .ids import _parts, derive_clip_ids
from .manifest import (RETIRED_COLUMNS, TOO_DEEP, _parse_seed, scene_key, spreadsheet_text,
                       storable_text, unstorable_text)
from .schema import ResultSchemaError, check_result, result_problems

#: "1": clips.category, clips.model; "2": clips.prompt_category, clips.model; "3":
#: clips.prompt_category, clips.generator (formats 1 and 2 are migrated on open)
STORE_FORMAT = "3"
#: the column renames that bring a store of format k up to format k + 1
_MIGRATIONS = {"1": (("category", "prompt_category"),),
               "2": tuple(RETIRED_COLUMNS.items())}

# {real} / {bigint}: the back end's 8-byte float and integer types
_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS results (
    content_hash TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    status TEXT NOT NULL,
    reason TEXT,
    schema_version TEXT,
    version TEXT,
    result_json TEXT NOT NULL,
    created_at {real} NOT NULL,
    PRIMARY KEY (content_hash, config_hash)
);
CREATE TABLE IF NOT EXISTS clips (
    clip_id TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    generator TEXT,
    generator_version TEXT,
    prompt_category TEXT,
    prompt TEXT,
    seed {bigint},
    scene TEXT,
    path TEXT,
    entry_json TEXT,
    updated_at {real} NOT NULL,
    PRIMARY KEY (clip_id, config_hash)
);
CREATE INDEX IF NOT EXISTS clips_by_result ON clips (content_hash, config_hash);
"""

_VIEW_BODY = """leaderboard AS
    SELECT c.clip_id, c.generator, c.generator_version, c.prompt_category, c.prompt, c.seed,
           c.scene, c.path, c.entry_json, r.status, r.reason, r.content_hash, r.config_hash,
           r.schema_version, r.version, r.result_json
    FROM clips c JOIN results r
      ON r.content_hash = c.content_hash AND r.config_hash = c.config_hash
"""

CLIP_COLUMNS = ("clip_id", "generator", "generator_version", "prompt_category", "prompt", "seed",
                "scene", "path")
# raw rows as stored (what geocon merge copies between stores)
RESULT_FIELDS = ("content_hash", "config_hash", "status", "reason", "schema_version", "version",
                 "result_json", "created_at")
CLIP_FIELDS = ("clip_id", "config_hash", "content_hash", "generator", "generator_version",
               "prompt_category", "prompt", "seed", "scene", "path", "entry_json", "updated_at")
_INSERT_RESULT = (f"INSERT INTO results ({', '.join(RESULT_FIELDS)}) VALUES "
                  f"({', '.join('?' * len(RESULT_FIELDS))})")
_INSERT_CLIP = (f"INSERT INTO clips ({', '.join(CLIP_FIELDS)}) VALUES "
                f"({', '.join('?' * len(CLIP_FIELDS))})")
_UPSERT_CLIP = _INSERT_CLIP + " ON CONFLICT (clip_id, config_hash) DO UPDATE SET " + ", ".join(
    f"{k}=excluded.{k}" for k in CLIP_FIELDS if k not in ("clip_id", "config_hash"))
_REPLACE_RESULT = (_INSERT_RESULT + " ON CONFLICT (content_hash, config_hash) DO UPDATE SET "
                   + ", ".join(f"{k}=excluded.{k}" for k in RESULT_FIELDS[2:]))

Statement = Tuple[str, Sequence[Any]]
_SERVER_PREFIXES = ("postgresql://", "postgres://")
#: libpq's connection keywords (PostgreSQL 17 "Parameter Key Words"): a ``--db`` string made
#: only of ``key=value`` tokens with these keys names a server, whatever key comes first
LIBPQ_KEYWORDS = frozenset((
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth",
    "channel_binding", "connect_timeout", "client_encoding", "options", "application_name",
    "fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode",
    "sslnegotiation", "requiressl", "sslcompression", "sslcert", "sslkey", "sslpassword",
    "sslcertmode", "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "requirepeer",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "krbsrvname", "gsslib",
    "gssdelegation", "service", "target_session_attrs", "load_balance_hosts"))
#: a libpq key=value token's value: single-quoted or bare, both with backslash escapes
CONNINFO_VALUE = r"('(?:[^'\\]|\\.)*'|(?:[^\s'\\]|\\.)*)"
# one libpq key=value token
_CONNINFO_TOKEN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*" + CONNINFO_VALUE + r"\s*")


class StoreError(GeoConError, RuntimeError):
    """The result database could not be opened or written (after retries)."""


class StoreConnectionError(StoreError, ConnectionError):
    """A store server refused the connection (bad database, role or password) or did not
    answer within the store timeout; the message names the store (password masked)."""


def entry_json(entry: Any) -> str:
    """A clip row's manifest entry as the store keeps it (``entry_json``): sorted-key JSON."""
    return json.dumps(entry, sort_keys=True, default=str)


def conninfo_keys(text: str) -> Optional[List[str]]:
    """The keys of ``text`` when it is made only of whitespace-separated libpq ``key=value``
    tokens (values bare or single-quoted, as libpq parses them), else None."""
    keys: List[str] = []
    pos = 0
    while pos < len(text):
        m = _CONNINFO_TOKEN.match(text, pos)
        if m is None:
            return None
        keys.append(m.group(1))
        pos = m.end()
    return keys or None


def is_server_url(db: Union[str, Path]) -> bool:
    """True when ``db`` names a PostgreSQL server, not a file: a ``postgresql://`` /
    ``postgres://`` URL, or a libpq key=value string whose keys are all libpq connection
    keywords (:data:`LIBPQ_KEYWORDS`; ``sslmode=require host=db dbname=lb`` as well as
    ``service=lb``)."""
    if not isinstance(db, str):
        return False
    if db.startswith(_SERVER_PREFIXES):
        return True
    keys = conninfo_keys(db)
    return keys is not None and all(k in LIBPQ_KEYWORDS for k in keys)


def check_file_name(db: Union[str, Path]) -> None:
    """Refuse a SQLite store name given as a string that parses as libpq ``key=value`` tokens
    with a key libpq does not know (``sslmod=require host=db``: a mistyped connection string,
    which would otherwise become a local file, password and all, in its name). An existing
    file of that name is opened as usual; ``./NAME`` names a new file of such a name. The
    message names the keys, never the values (one may be a password)."""
    if not isinstance(db, str) or Path(db).exists():
        return
    keys = conninfo_keys(db)
    if keys is None:
        return
    unknown = [k for k in keys if k not in LIBPQ_KEYWORDS]
    if not unknown:
        return
    raise InputError(
        f"--db: a key=value string with {', '.join(map(repr, unknown))}, which "
        f"{'is not a libpq keyword' if len(unknown) == 1 else 'are not libpq keywords'} "
        "(a PostgreSQL key=value string takes host, port, dbname, user, sslmode, service, "
        "...): fix the key, or write ./NAME for a SQLite file of that name")


#: the clip row's text columns (every CLIP_COLUMNS but the seed) and the keys
_TEXT_COLUMNS = tuple(k for k in CLIP_COLUMNS if k != "seed") + ("content_hash", "config_hash")


def checked_clip_row(clip: Dict[str, Any], content_hash: str, config_hash: str
                     ) -> Dict[str, Any]:
    """The clip row's columns (:data:`CLIP_COLUMNS` and the keys) as every back end stores
    them: the seed an integer in the signed 64-bit range (the manifest's rule; an integral
    float or a digit string becomes that integer) or None, each text column a str (or None)
    without a NUL and in UTF-8. Raises InputError naming the clip and the column otherwise."""
    row = {k: clip.get(k) for k in CLIP_COLUMNS}
    row.update(content_hash=content_hash, config_hash=config_hash)
    cid = storable_text(str(row["clip_id"]))
    try:
        if row["seed"] is not None:
            row["seed"] = _parse_seed(row["seed"])
        for k in _TEXT_COLUMNS:
            value = row[k]
            if value is not None and not isinstance(value, str):
                raise InputError(f"{k} must be a string or None, got {type(value).__name__} "
                                 f"{value!r}")
            problem = None if value is None else unstorable_text(value)
            if problem:
                raise InputError(f"{k} {problem}")
    except InputError as exc:
        raise InputError(f"clip row {cid!r}: {exc}") from None
    return row


def _column_text(value: Any) -> Any:
    """A result's text for its own column (``reason``, ...): a NUL written ``\\x00``."""
    return storable_text(value) if isinstance(value, str) else value


def _ordered(names: Sequence[str], rows: Iterable[tuple], *keys: str) -> List[tuple]:
    """``rows`` sorted by the ``keys`` columns in code-point order: SQLite's BINARY order
    (UTF-8 bytes), whatever collation a PostgreSQL database has (module doc: "Order")."""
    idx = [list(names).index(k) for k in keys]
    return sorted(rows, key=lambda r: tuple(r[i] for i in idx))


def _refuse_constant(text: str) -> float:
    """``json.loads`` ``parse_constant`` of a checked stored result: NaN / Infinity (never
    written: a store writes its JSON with ``allow_nan=False``) are corruption."""
    raise ResultSchemaError(f"a non-finite number ({text})")


def _finite_float(text: str) -> float:
    """``json.loads`` ``parse_float`` of a checked stored result: a number literal that
    overflows to infinity (``1e999``) is corruption."""
    value = float(text)
    if not math.isfinite(value):
        raise ResultSchemaError(f"a non-finite number ({text[:24]})")
    return value


#: an escaped UTF-16 surrogate in stored result JSON: a character outside the BMP (a pair of
#: them) or text that is not UTF-8 (a lone one, refused by the full check)
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def stored_result_problems(result: Dict[str, Any], text: str) -> List[str]:
    """:func:`~.schema.result_problems` of a result read from a store, at a fraction of the cost.

    A stored row was checked in full when it was written (:meth:`ResultStore.put`), so the walk
    over every nested value (``background.per_pair``, ...; about 4/5 of reading a store) is not
    repeated for it. The top-level fields are checked as before (schema_version, clip, status
    and reason, config_hash, the label fields, the types of the sections the readers flatten),
    on a copy whose nested objects and lists are left empty. The non-finite numbers the walk
    would find are refused while the JSON is parsed (:func:`_stored_result`), and text that is
    not UTF-8 can only come back through an escaped surrogate in ``text``: such a row (also one
    holding a character outside the BMP) gets the full check.

    Args:
        result: the parsed (and migrated) result object.
        text: its JSON text as stored.
    """
    if _SURROGATE_ESCAPE.search(text):
        return result_problems(result)
    return result_problems({k: {} if isinstance(v, dict) else [] if isinstance(v, list) else v
                            for k, v in result.items()})


def _stored_result(text: Any, where: str, checked: bool) -> Dict[str, Any]:
    """A stored result's JSON text parsed and migrated (:func:`~geocon_torch.result.
    migrate_result`). :class:`ResultSchemaError` naming ``where`` (the store and the clip) when
    it is no JSON object, or, when ``checked``, departs from the schema
    (:func:`stored_result_problems`, non-finite numbers included)."""
    if not isinstance(text, str):
        raise ResultSchemaError(f"{where}: the stored result is no JSON text (a "
                                f"{type(text).__name__})")
    try:
        result = (json.loads(text, parse_constant=_refuse_constant, parse_float=_finite_float)
                  if checked else json.loads(text))
    except json.JSONDecodeError as exc:
        raise ResultSchemaError(f"{where}: the stored result is not JSON ({exc.msg})") from None
    except RecursionError:
        raise ResultSchemaError(f"{where}: the stored result is not JSON ({TOO_DEEP})") from None
    except ResultSchemaError as exc:  # _refuse_constant, _finite_float
        raise ResultSchemaError(f"{where}: the stored result holds {exc}") from None
    if not isinstance(result, dict):
        raise ResultSchemaError(f"{where}: " + "; ".join(result_problems(result)))
    result = migrate_result(result)
    problems = stored_result_problems(result, text) if checked else []
    if problems:
        raise ResultSchemaError(f"{where}: " + "; ".join(problems))
    return result


class ResultStore:
    """A results database; ``ResultStore(db)`` opens the back end ``db`` names (module doc).
    Use as a context manager or call :meth:`close`.

    Back ends implement ``_transaction(fn)`` (run ``fn()`` in one retried write transaction),
    ``_execute(sql, params)`` (inside it; returns the fetched rows), ``_select(sql, params)``
    (a retried read: column names and rows), ``_init_schema()``, ``close()`` and ``name`` (for
    messages; never holds a password). SQL is written with ``?`` placeholders.
    """

    server_class: Optional[type] = None  # PostgresStore, registered by .pg_store
    _returning = True  # the back end's SQL has INSERT ... RETURNING
    name = "store"
    _create_view = "CREATE VIEW IF NOT EXISTS "
    kind = "sqlite"

    def __new__(cls, db: Union[str, Path], **kwargs: Any):
        if cls is ResultStore:
            if is_server_url(db):
                if ResultStore.server_class is None:
                    raise StoreError("no PostgreSQL store is registered (import "
                                     "geocon_torch.bench)")
                cls = ResultStore.server_class
            else:
                check_file_name(db)
                cls = SQLiteStore
        return super().__new__(cls)

    # -- back-end plumbing --------------------------------------------------------------------
    def _transaction(self, fn: Callable[[], Any]) -> Any:
        raise NotImplementedError

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        raise NotImplementedError

    def _select(self, sql: str, params: Sequence[Any] = ()) -> Tuple[List[str], List[tuple]]:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def check_same_file(self) -> None:
        """Raise :class:`StoreError` when the store this object writes is no longer the one it
        opened (a back end whose file can be deleted or replaced: :class:`SQLiteStore`); a
        server has no such file (no-op)."""

    def __enter__(self) -> "ResultStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _create_schema(self, real: str, bigint: str) -> None:
        """Tables, format check / migration and view (inside the open schema transaction)."""
        for stmt in filter(str.strip, _TABLES.format(real=real, bigint=bigint).split(";")):
            self._execute(stmt)
        self._check_format()
        self._execute(self._create_view + _VIEW_BODY)

    def _check_format(self) -> None:
        """Stamp a new store with :data:`STORE_FORMAT`, migrate an older one (the column
        renames of :data:`_MIGRATIONS`, format by format), refuse a newer one (inside the open
        schema transaction)."""
        rows = self._execute("SELECT value FROM meta WHERE key='store_format'")
        if not rows:
            self._execute("INSERT INTO meta VALUES ('store_format', ?)", (STORE_FORMAT,))
        elif rows[0][0] in _MIGRATIONS:
            self._execute("DROP VIEW IF EXISTS leaderboard")
            fmt = rows[0][0]
            while fmt != STORE_FORMAT:
                for old, new in _MIGRATIONS[fmt]:
                    self._execute(f"ALTER TABLE clips RENAME COLUMN {old} TO {new}")
                fmt = str(int(fmt) + 1)
            self._execute("UPDATE meta SET value=? WHERE key='store_format'", (STORE_FORMAT,))
        elif rows[0][0] != STORE_FORMAT:
            raise StoreError(f"{self.name}: store format {rows[0][0]} is newer than this "
                             f"geocon_torch reads (format {STORE_FORMAT}); upgrade geocon_torch "
                             "or write to a new --db store")

    def _write(self, statements: Sequence[Statement]) -> None:
        """Run ``statements`` in ONE transaction (retried as a whole)."""
        def tx():
            for sql, params in statements:
                self._execute(sql, params)
        self._transaction(tx)

    def _one(self, sql: str, params: Sequence[Any]) -> Optional[tuple]:
        rows = self._select(sql, params)[1]
        return rows[0] if rows else None

    # -- queries ------------------------------------------------------------------------------
    def has(self, content_hash: str, config_hash: str) -> bool:
        return self.stored_result_json(content_hash, config_hash) is not None

    def status_of(self, content_hash: str, config_hash: str) -> Optional[str]:
        row = self._one("SELECT status FROM results WHERE content_hash=? AND config_hash=?",
                        (content_hash, config_hash))
        return None if row is None else row[0]

    def linked(self, clip_id: str, config_hash: str) -> Optional[str]:
        """Content hash the clip row points at, or None."""
        row = self.clip_link(clip_id, config_hash)
        return None if row is None else row[0]

    def clip_link(self, clip_id: str, config_hash: str) -> Optional[Tuple[str, str]]:
        """(content hash, manifest entry as stored JSON) of the clip row, or None."""
        row = self._one("SELECT content_hash, entry_json FROM clips WHERE clip_id=? AND "
                        "config_hash=?", (clip_id, config_hash))
        return None if row is None else (row[0], row[1])

    def drop_renamed_clips(self, clips: Sequence[Tuple[str, str]], config_hash: str) -> int:
        """Delete this config's clip rows of the ``clips`` (clip_id, path) paths that are
        stored under another clip_id, not among ``clips`` (a manifest whose derived ids changed
        when rows were added: the old id would stay as a second row of the same file). Results
        are kept (they are keyed by content). Returns the number of rows deleted."""
        ids = {cid for cid, _ in clips}
        paths = {p for _, p in clips}
        stale = [cid for cid, path in self._select(
            "SELECT clip_id, path FROM clips WHERE config_hash=?", (config_hash,))[1]
            if path in paths and cid not in ids]
        if stale:
            self._write([("DELETE FROM clips WHERE clip_id=? AND config_hash=?",
                          (cid, config_hash)) for cid in stale])
        return len(stale)

    def count(self, table: str = "results") -> int:
        if table not in ("results", "clips", "leaderboard"):
            raise InputError(f"unknown table {table!r}")
        return int(self._select(f"SELECT COUNT(*) FROM {table}")[1][0][0])

    def config_hashes(self) -> List[str]:
        """The config hashes of the clip rows, in code-point order (module doc: "Order")."""
        return sorted(r[0] for r in self._select("SELECT DISTINCT config_hash FROM clips")[1])

    def config_counts(self) -> Dict[str, int]:
        """Joined rows (those :meth:`rows` returns) per config hash, the hashes in code-point
        order (module doc: "Order"); cheap: counted in SQL on the tables' indexes, no result
        JSON is read."""
        return {h: int(n) for h, n in sorted(self._select(
            "SELECT config_hash, COUNT(*) FROM leaderboard GROUP BY config_hash")[1])}

    def rows(self, config_hash: Optional[str] = None, *, checked: bool = False
             ) -> List[Dict[str, Any]]:
        """Joined rows (clip metadata + ``result`` dict), sorted by (config_hash, clip_id).

        A stored result that is not a JSON object is a :class:`ResultSchemaError` naming the
        store and the clip. ``checked``: each result is also checked against the schema the
        cheap way a stored row allows (:func:`stored_result_problems`; it was checked in full
        when written), as :func:`load_results` does.
        """
        sql = "SELECT * FROM leaderboard"
        params: tuple = ()
        if config_hash is not None:
            sql += " WHERE config_hash = ?"
            params = (config_hash,)
        names, values = self._select(sql, params)
        out = []
        for vals in _ordered(names, values, "config_hash", "clip_id"):
            row = dict(zip(names, vals))
            row["result"] = _stored_result(row.pop("result_json"),
                                           f"{self.name}: clip {row['clip_id']}", checked)
            out.append(row)
        return out

    def error_clips(self, config_hash: str) -> List[Tuple[str, Optional[str]]]:
        """(clip_id, reason) of every clip stored with status "error" under ``config_hash``,
        by clip_id (cheap: no result JSON is read)."""
        return sorted((r[0], r[1]) for r in self._select(
            "SELECT clip_id, reason FROM leaderboard WHERE config_hash = ? AND status = 'error'",
            (config_hash,))[1])

    def stored_result_json(self, content_hash: str, config_hash: str) -> Optional[str]:
        """The result JSON stored under a key, as written (None if absent)."""
        row = self._one("SELECT result_json FROM results WHERE content_hash=? AND "
                        "config_hash=?", (content_hash, config_hash))
        return None if row is None else row[0]

    def raw_results(self) -> Iterator[Dict[str, Any]]:
        """Every ``results`` row as stored (:data:`RESULT_FIELDS`), by key."""
        names, rows = self._select(f"SELECT {', '.join(RESULT_FIELDS)} FROM results")
        return (dict(zip(names, r)) for r in _ordered(names, rows, "config_hash",
                                                      "content_hash"))

    def raw_clips(self) -> Iterator[Dict[str, Any]]:
        """Every ``clips`` row as stored (:data:`CLIP_FIELDS`), by key."""
        names, rows = self._select(f"SELECT {', '.join(CLIP_FIELDS)} FROM clips")
        return (dict(zip(names, r)) for r in _ordered(names, rows, "config_hash", "clip_id"))

    def raw_snapshot(self) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
        """(:meth:`raw_results`, :meth:`raw_clips`) read in ONE snapshot of the store (a read
        transaction, retried as a whole): while a job writes the store, a clip row never
        comes without the result it points at (a result is committed with its clip row)."""
        def read() -> Tuple[List[tuple], List[tuple]]:
            return (self._execute(f"SELECT {', '.join(RESULT_FIELDS)} FROM results"),
                    self._execute(f"SELECT {', '.join(CLIP_FIELDS)} FROM clips"))

        results, clips = self._read_snapshot(read)
        return ([dict(zip(RESULT_FIELDS, r))
                 for r in _ordered(RESULT_FIELDS, results, "config_hash", "content_hash")],
                [dict(zip(CLIP_FIELDS, r))
                 for r in _ordered(CLIP_FIELDS, clips, "config_hash", "clip_id")])

    def _read_snapshot(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` (reads through :meth:`_execute`) in one read transaction, retried as a
        whole (back ends)."""
        raise NotImplementedError

    # -- writes -------------------------------------------------------------------------------
    def put_statements(self, clip: Dict[str, Any], content_hash: str, config_hash: str,
                       result: Optional[Dict[str, Any]] = None, *,
                       replace: bool = False) -> List[Statement]:
        """The statements :meth:`put` runs (validated), for callers adding their own to the
        same transaction."""
        if not clip.get("clip_id"):
            raise InputError("clip row needs a clip_id")
        if "category" in clip:
            raise InputError("clip rows name the manifest's prompt family 'prompt_category' "
                             "(the store's 'category' column was renamed)")
        clip = _renamed_clip(clip)
        row = checked_clip_row(clip, content_hash, config_hash)
        now = time.time()
        stmts: List[Statement] = []
        if result is not None:
            result = migrate_result(check_result(result))
            sql = _REPLACE_RESULT if replace else _INSERT_RESULT + " ON CONFLICT DO NOTHING"
            text = [_column_text(result.get(k)) for k in ("reason", "schema_version", "version")]
            stmts.append((sql, (content_hash, config_hash, result["status"], *text,
                                json.dumps(result, sort_keys=True, allow_nan=False), now)))
        row.update(updated_at=now, entry_json=entry_json(clip.get("entry")))
        stmts.append((_UPSERT_CLIP, tuple(row[k] for k in CLIP_FIELDS)))
        return stmts

    def put(self, clip: Dict[str, Any], content_hash: str, config_hash: str,
            result: Optional[Dict[str, Any]] = None, *, replace: bool = False,
            also: Sequence[Statement] = ()) -> None:
        """Record a clip row and (if given) its result in ONE transaction.

        ``clip`` holds the CLIP_COLUMNS (clip_id required) and optionally ``entry`` (the whole
        manifest row, stored as JSON); the retired keys ``model`` / ``model_version`` still
        name the generator (DeprecationWarning). With ``result=None`` only the clip row is
        (re)linked to an existing result. Re-putting the same key is a no-op unless ``replace``
        (used to retry error rows). A 1.x or 2.x result is stored migrated to the current
        schema. ``also``: more statements committed in the same transaction (the work queue's
        "done" mark).

        Both back ends store the same values or refuse the same input: the clip row is checked
        by :func:`checked_clip_row` (InputError: a seed that is no signed 64-bit integer, text
        with a NUL or not UTF-8); the result by :func:`~.schema.check_result` (its text must be
        UTF-8); a NUL in the result's ``reason`` / ``version`` / ``schema_version`` columns is
        written ``\\x00`` there (the result JSON keeps it, escaped).
        """
        self._write(self.put_statements(clip, content_hash, config_hash, result,
                                        replace=replace) + list(also))

    def insert_raw(self, results: Sequence[Dict[str, Any]],
                   clips: Sequence[Dict[str, Any]], *, replace: bool = False
                   ) -> Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]:
        """Insert raw rows (:meth:`raw_results` / :meth:`raw_clips`) in ONE transaction; keys
        already present are left as they are, or with ``replace`` overwritten by the given
        rows (the upserts :meth:`put` uses to retry error rows and relink clips).

        Returns:
            the keys of the given rows that were NOT written because the store held them at
            the write (another writer may have committed them since the caller read the
            store): ((content_hash, config_hash) of results, (clip_id, config_hash) of clips);
            always empty with ``replace``.
        """
        if replace:
            self._write([(_REPLACE_RESULT, tuple(r[k] for k in RESULT_FIELDS)) for r in results]
                        + [(_UPSERT_CLIP, tuple(c[k] for k in CLIP_FIELDS)) for c in clips])
            return [], []

        def tx() -> Tuple[List[Tuple[str, str]], List[Tuple[str, str]]]:
            kept_results = [(r["content_hash"], r["config_hash"]) for r in results
                            if not self._insert_new("results", r, RESULT_FIELDS,
                                                    ("content_hash", "config_hash"))]
            kept_clips = [(c["clip_id"], c["config_hash"]) for c in clips
                          if not self._insert_new("clips", c, CLIP_FIELDS,
                                                  ("clip_id", "config_hash"))]
            return kept_results, kept_clips
        return self._transaction(tx)

    def _insert_new(self, table: str, row: Dict[str, Any], fields: Sequence[str],
                    key: Sequence[str]) -> bool:
        """Insert ``row`` into ``table`` unless its ``key`` is there (inside a write
        transaction); True when it was written. ``INSERT ... ON CONFLICT DO NOTHING
        RETURNING``, or, where the back end lacks ``RETURNING`` (SQLite < 3.35), a look-up
        first (exact there: the transaction holds SQLite's write lock)."""
        insert = (f"INSERT INTO {table} ({', '.join(fields)}) VALUES "
                  f"({', '.join('?' * len(fields))}) ON CONFLICT DO NOTHING")
        params = tuple(row[k] for k in fields)
        if self._returning:
            return bool(self._execute(f"{insert} RETURNING {key[0]}", params))
        where = " AND ".join(f"{k}=?" for k in key)
        if self._execute(f"SELECT 1 FROM {table} WHERE {where}", tuple(row[k] for k in key)):
            return False
        self._execute(insert, params)
        return True

    def raw_result(self, content_hash: str, config_hash: str) -> Optional[Dict[str, Any]]:
        """The ``results`` row of a key as stored (:data:`RESULT_FIELDS`), or None."""
        row = self._one(f"SELECT {', '.join(RESULT_FIELDS)} FROM results WHERE content_hash=? "
                        "AND config_hash=?", (content_hash, config_hash))
        return None if row is None else dict(zip(RESULT_FIELDS, row))

    def raw_clip(self, clip_id: str, config_hash: str) -> Optional[Dict[str, Any]]:
        """The ``clips`` row of a key as stored (:data:`CLIP_FIELDS`), or None."""
        row = self._one(f"SELECT {', '.join(CLIP_FIELDS)} FROM clips WHERE clip_id=? AND "
                        "config_hash=?", (clip_id, config_hash))
        return None if row is None else dict(zip(CLIP_FIELDS, row))

    # -- export -------------------------------------------------------------------------------
    def export_csv(self, path: Union[str, Path], config_hash: Optional[str] = None) -> Path:
        """Flat CSV (one line per clip, columns of :func:`flatten_row`)."""
        return write_csv(path, [flatten_row(r) for r in self.rows(config_hash)])

    def export_parquet(self, path: Union[str, Path], config_hash: Optional[str] = None) -> Path:
        """Flat Parquet table (needs the optional pyarrow: pip install geocon_torch[parquet])."""
        return write_parquet(path, [flatten_row(r) for r in self.rows(config_hash)])


def _renamed_clip(clip: Dict[str, Any]) -> Dict[str, Any]:
    """A clip row with the retired keys (``model``, ``model_version``) under their names now
    (DeprecationWarning); a retired and a current key that disagree are an InputError."""
    out = dict(clip)
    for old, new in RETIRED_COLUMNS.items():
        if old not in out:
            continue
        value = out.pop(old)
        retired_name(f"clip row key {old!r}", repr(new), stacklevel=5)
        if out.get(new) is not None and out[new] != value:
            raise InputError(f"clip row: {new} {out[new]!r} and {old} {value!r} disagree "
                             f"({old} is the retired name of {new})")
        out[new] = value
    return out


def _read_only_uri(path: Path) -> str:
    """SQLite's URI of ``path`` opened read-only (``mode=ro``)."""
    return f"file:{quote(os.fsencode(path.absolute()))}?mode=ro"


def _schema_names(conn: sqlite3.Connection) -> set:
    """The names of the tables and views of a SQLite database."""
    return {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}


def _writable(path: Path) -> bool:
    """True when this process may write ``path`` (a file, or a folder: create files in it)."""
    return os.access(path, os.W_OK)


class SQLiteStore(ResultStore):
    """The embedded back end: one SQLite file (WAL mode, see the module doc).

    Args:
        path: the SQLite file (created with its folder if missing).
        timeout_s: how long one write may wait for another process's lock before failing.
        read_only: open an existing store for reading only (:func:`open_readable`): SQLite's
            ``mode=ro``, or ``immutable=1`` when the folder is not writable (SQLite cannot
            create the ``-shm`` file a WAL store needs; a store whose ``-wal`` file still holds
            writes is then refused). No schema is created; a store of an older format
            (migrated on a read-write open) is refused.
        create: False: a missing file is a :class:`StoreError` (``mode=rw``: neither the file
            nor its folder is ever created, even when it vanishes while being opened).

    The file's (device, inode) is recorded at the open; every write transaction checks, after
    its commit, that the path still names that file (:meth:`check_same_file`: one
    ``os.stat``): SQLite goes on writing a deleted or replaced file, whose rows no later open
    of the path would find.

    An existing SQLite file that holds tables but no geocon store (another program's database)
    is a :class:`StoreError`, read-only or not, and is left unchanged
    (:func:`_check_not_foreign`); a missing, empty (0 bytes) or table-less file becomes a store.
    """

    _returning = sqlite3.sqlite_version_info >= (3, 35, 0)

    def __init__(self, path: Union[str, Path], *, timeout_s: float = 120.0,
                 read_only: bool = False, create: bool = True):
        self.path = Path(path)
        self.name = str(self.path)
        self.timeout_s = float(timeout_s)
        self.read_only = bool(read_only)
        self._abs_path = self.path.absolute()  # SQLite resolves the name once, at the open
        if self.path.is_file():  # another program's database: refused before any write
            _check_not_foreign(self.path, self.timeout_s)
        elif not (self.read_only or create):
            raise StoreError(f"result store not found: {self.path}")
        elif not self.read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if self.read_only:
                self._conn = self._connect_read_only()
                self._retry(self._check_read_only)
            else:
                target = str(self.path) if create else \
                    f"file:{quote(os.fsencode(self._abs_path))}?mode=rw"
                self._conn = sqlite3.connect(target, timeout=self.timeout_s, uri=not create,
                                             isolation_level=None, check_same_thread=False)
                self._retry(self._init_schema)
        except sqlite3.DatabaseError as exc:
            if not create and not self.path.is_file():  # vanished while it was opened
                raise StoreError(f"result store not found: {self.path}") from exc
            raise StoreError(f"cannot open result store {self.path}: {exc}"
                             f"{self._folder_hint()}") from exc
        self._file_id = self._current_file_id()

    def _current_file_id(self) -> Optional[Tuple[int, int]]:
        """(st_dev, st_ino) of the file the store's path names now; None when there is none
        (the file or a folder above it was deleted)."""
        try:
            st = os.stat(self._abs_path)
        except (FileNotFoundError, NotADirectoryError):
            return None
        return st.st_dev, st.st_ino

    def check_same_file(self) -> None:
        """Raise :class:`StoreError` when the path no longer names the file opened (deleted,
        or replaced by another file): SQLite writes the open file, deleted or not, so the
        rows written since are in no file a later open of the path finds. One ``os.stat``."""
        now = self._current_file_id()
        if now is None or now != self._file_id:
            raise StoreError(f"the store file {self.path} was deleted or replaced during the "
                             "run; the rows of this run are not in it: re-run the same "
                             "command to write them again")

    def _folder_hint(self) -> str:
        """Why a store in a folder this process may not write fails to open ("" otherwise)."""
        folder = self.path.absolute().parent
        if not folder.is_dir() or _writable(folder):
            return ""
        return (f" (the folder {folder} is not writable: SQLite creates {self.path.name}-wal "
                f"and {self.path.name}-shm next to a store it writes; readers (geocon report, "
                "--export-csv / --export-parquet, merge shards) open such a store read-only)")

    def _connect_read_only(self) -> sqlite3.Connection:
        """A read-only connection (``mode=ro``; ``immutable=1`` in a folder that is not
        writable, where SQLite cannot create the ``-shm`` file of a WAL store)."""
        if not self.path.is_file():
            raise StoreError(f"result store not found: {self.path}")
        uri = _read_only_uri(self.path)
        if not _writable(self.path.absolute().parent):
            wal = self.path.with_name(self.path.name + "-wal")
            if wal.is_file() and wal.stat().st_size > 0:
                raise StoreError(
                    f"{self.path}: the folder is not writable and {wal.name} holds writes not "
                    "yet in the store file (a writer was killed, or is still running), which "
                    "SQLite can only read where it may write: open the store once in a "
                    "writable folder (e.g. copy the folder with both files)")
            uri += "&immutable=1"
        return sqlite3.connect(uri, uri=True, timeout=self.timeout_s, isolation_level=None,
                               check_same_thread=False)

    def _check_read_only(self) -> None:
        """Refuse a file that is no geocon store, or one of another format (read-only: an
        older one cannot be migrated here)."""
        if not {"meta", "results", "clips", "leaderboard"} <= _schema_names(self._conn):
            raise StoreError(f"{self.path}: not a geocon result store (no results / clips "
                             "tables)")
        rows = self._conn.execute("SELECT value FROM meta WHERE key='store_format'").fetchall()
        fmt = rows[0][0] if rows else None
        if fmt in _MIGRATIONS:
            raise StoreError(
                f"{self.path}: store format {fmt} must be migrated to format {STORE_FORMAT} "
                "before it is read, which needs write access to the store and its folder: open "
                "it once where it is writable (geocon bench --db FILE --all-configs "
                "--export-csv OUT migrates it in place), or read a writable copy")
        if fmt != STORE_FORMAT:
            raise StoreError(f"{self.path}: store format {fmt} is not the one this "
                             f"geocon_torch reads (format {STORE_FORMAT}); upgrade geocon_torch")

    def _init_schema(self) -> None:
        c = self._conn
        c.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
        mode = c.execute("PRAGMA journal_mode = WAL").fetchone()[0]
        if str(mode).lower() != "wal":
            raise StoreError(f"{self.path}: SQLite refused WAL mode (got {mode}); is it on a "
                             "network file system? Use a local disk.")
        c.execute("PRAGMA synchronous = NORMAL")
        self._begin_commit(lambda: self._create_schema("REAL", "INTEGER"))

    def _begin_commit(self, fn: Callable[[], Any]) -> Any:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn()
            self._conn.execute("COMMIT")
            return out
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        """Roll back the open transaction, if any: on some errors (a full disk, an I/O
        error) SQLite has rolled it back itself. A failing rollback is ignored, so the
        exception that stopped the transaction is the one raised ("database or disk is
        full", not "cannot rollback - no transaction is active")."""
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def _retry(self, fn, *args):
        deadline = time.monotonic() + self.timeout_s
        delay = 0.01
        while True:
            try:
                return fn(*args)
            except sqlite3.OperationalError as exc:
                msg = str(exc).lower()
                if ("locked" not in msg and "busy" not in msg) or time.monotonic() > deadline:
                    raise StoreError(f"{self.path}: {exc}{self._folder_hint()}") from exc
                time.sleep(delay * (1 + random.random()))
                delay = min(delay * 2, 1.0)

    def _transaction(self, fn: Callable[[], Any]) -> Any:
        out = self._retry(self._begin_commit, fn)
        self.check_same_file()  # committed to a deleted or replaced file: the rows are lost
        return out

    def _read_snapshot(self, fn: Callable[[], Any]) -> Any:
        def once() -> Any:  # a deferred BEGIN: WAL keeps the first read's snapshot to COMMIT
            self._conn.execute("BEGIN")
            try:
                out = fn()
            except BaseException:
                self._rollback()
                raise
            self._conn.execute("COMMIT")
            return out
        return self._retry(once)

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        return self._conn.execute(sql, tuple(params)).fetchall()

    def _select(self, sql: str, params: Sequence[Any] = ()) -> Tuple[List[str], List[tuple]]:
        def read():
            cur = self._conn.execute(sql, tuple(params))
            return [d[0] for d in cur.description], cur.fetchall()
        return self._retry(read)

    def close(self) -> None:
        self._conn.close()


def _num(x: Any) -> Optional[float]:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def _flag(x: Any) -> Optional[bool]:
    return x if isinstance(x, bool) else None


FLAT_COLUMNS = (
    "clip_id", "generator", "generator_version", "prompt_category", "behaviour", "prompt", "seed",
    "scene", "status", "reason", "regime", "score", "frozen", "ir", "ge_px", "ir_h", "ge_h_px",
    "ir_f", "ge_f_px", "valid_pairs", "pairs", "background_pass", "background_pass_calibrated",
    "gate_method", "gate_statistic", "gate_decision", "num_objects", "adadfrc_mean",
    "adap90_max", "epipolar_error", "epipolar_error_score", "epipolar_inlier_rate",
    "feature_match_coverage", "lost_frames", "warnings", "content_hash", "config_hash",
    "schema_version", "version", "path",
    # appended after path: every column above keeps its place
    "gvgc_median_error", "gvgc_keep_rate", "dpo_mean_epipolar_error", "dpo_mean_inlier_rate",
)


def flatten_row(row: Dict[str, Any]) -> Dict[str, Any]:
    """One flat record (scalars only) from a joined row: clip metadata + headline numbers.

    ``prompt_category`` is the row's (the manifest's), else the result's; ``behaviour`` is the
    result's post-hoc behaviour (a 1.x result is migrated first); ``score`` is the result's
    headline score (None for a result written before it existed or not scored); ``frozen`` is
    ``result["motion"]["frozen"]`` (a still video: no consecutive pair of the frames read
    differs by more than 0.5 grey levels; it keeps its geometric ``score``, a static camera on
    a static scene being category C1), None for a result written before it was recorded;
    ``background_pass_calibrated`` is ``background.pass_calibrated`` (the calibrated report
    gate's verdict beside the paper's ``background_pass``; None without a calibration or bounds
    for the clip's regime); ``num_objects`` is None when the result has no foreground block (a
    preset without that section: not counted, not 0); ``gvgc_median_error`` (px at GVGC's
    analysis size) / ``gvgc_keep_rate`` read the GVGC block
    (:func:`~geocon_torch.result.gvgc_block`),
    ``dpo_mean_epipolar_error`` / ``dpo_mean_inlier_rate`` the ``epipolar_dpo`` block (None
    when absent).
    """
    res = migrate_result(row["result"]) if row.get("result") else {}
    bg = res.get("background") or {}
    gate = res.get("gate") or {}
    fg = res.get("foreground")
    ep = res.get("epipolar") or {}
    gv = gvgc_block(res)
    dpo = res.get("epipolar_dpo") if isinstance(res.get("epipolar_dpo"), dict) else {}
    objects = [o for o in ((fg if isinstance(fg, dict) else {}).get("objects") or [])
               if isinstance(o, dict)]
    ada = [_num(o.get("adadfrc_mean")) for o in objects]
    ada = [a for a in ada if a is not None]
    p90 = [_num(o.get("adap90")) for o in objects]
    p90 = [a for a in p90 if a is not None]
    out = {k: row.get(k) for k in CLIP_COLUMNS}
    if out["prompt_category"] is None:
        out["prompt_category"] = res.get("prompt_category")
    out.update({
        "behaviour": res.get("behaviour"),
        "status": res.get("status", row.get("status")),
        "reason": res.get("reason", row.get("reason")),
        "regime": res.get("regime"), "score": _num(res.get("score")),
        "frozen": _flag((res.get("motion") or {}).get("frozen")),
        "ir": _num(bg.get("ir")), "ge_px": _num(bg.get("ge_px")),
        "ir_h": _num(bg.get("ir_h")), "ge_h_px": _num(bg.get("ge_h_px")),
        "ir_f": _num(bg.get("ir_f")), "ge_f_px": _num(bg.get("ge_f_px")),
        "valid_pairs": _num(bg.get("valid_pairs")), "pairs": _num(bg.get("pairs")),
        "background_pass": bg.get("pass") if isinstance(bg.get("pass"), bool) else None,
        "background_pass_calibrated": _flag(bg.get("pass_calibrated")),
        "gate_method": gate.get("method"), "gate_statistic": _num(gate.get("statistic")),
        "gate_decision": gate.get("decision"),
        "num_objects": len(objects) if isinstance(fg, dict) and fg else None,
        "adadfrc_mean": sum(ada) / len(ada) if ada else None,
        "adap90_max": max(p90) if p90 else None,
        "epipolar_error": _num(ep.get("epipolar_error")),
        "epipolar_error_score": _num(ep.get("epipolar_error_score")),
        "epipolar_inlier_rate": _num(ep.get("epipolar_inlier_rate")),
        "feature_match_coverage": _num(ep.get("feature_match_coverage")),
        "gvgc_median_error": _num(gv.get("median_error")),
        "gvgc_keep_rate": _num(gv.get("keep_rate")),
        "dpo_mean_epipolar_error": _num(dpo.get("mean_epipolar_error")),
        "dpo_mean_inlier_rate": _num(dpo.get("mean_inlier_rate")),
        "lost_frames": _num((res.get("io") or {}).get("lost_frames")),
        "warnings": "; ".join(str(w) for w in res.get("warnings") or []) or None,
        "content_hash": row.get("content_hash", res.get("content_hash")),
        "config_hash": row.get("config_hash", res.get("config_hash")),
        "schema_version": res.get("schema_version"), "version": res.get("version"),
    })
    return {k: out.get(k) for k in FLAT_COLUMNS}


def write_csv(path: Union[str, Path], records: Iterable[Dict[str, Any]]) -> Path:
    """Write flat records (:func:`flatten_row`) as CSV, one column per :data:`FLAT_COLUMNS`
    (None as an empty cell). A text cell that a spreadsheet would run as a formula (first
    character = + - @ tab or CR) is written with a leading apostrophe
    (:func:`~geocon_torch.bench.manifest.spreadsheet_text`); numbers never are."""
    path = Path(path)
    records = list(records)
    with atomic_output(path) as tmp, tmp.open("w", encoding="utf-8", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=list(FLAT_COLUMNS))
        w.writeheader()
        for r in records:
            w.writerow({k: ("" if r.get(k) is None else spreadsheet_text(r.get(k)))
                        for k in FLAT_COLUMNS})
    return path


def write_parquet(path: Union[str, Path], records: Iterable[Dict[str, Any]]) -> Path:
    """Write flat records (:func:`flatten_row`) as a Parquet table, one column per
    :data:`FLAT_COLUMNS`, atomically (:func:`~geocon_torch.io._atomic.atomic_output`)."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError as exc:
        raise OptionalDependencyError(
            "Parquet export needs pyarrow: pip install 'geocon_torch[parquet]' "
            "(CSV export works without it)") from exc
    records = list(records)
    table = pa.table({k: [r.get(k) for r in records] for k in FLAT_COLUMNS})
    with atomic_output(path) as tmp:
        pq.write_table(table, str(tmp))
    return Path(path)


def _jsonl_row(res: Dict[str, Any], retired: Optional[set] = None) -> Dict[str, Any]:
    """A joined row from one (validated, migrated) JSONL result: clip metadata from the object
    itself or its ``meta`` dict (``generator`` defaults to "-", the scene to the clip). The
    retired keys ``model`` / ``model_version`` are read when the current ones are absent (and
    added to ``retired``, for the caller's DeprecationWarning)."""
    meta = res.get("meta") if isinstance(res.get("meta"), dict) else {}
    get = lambda k, d=None: res.get(k, meta.get(k, d))  # noqa: E731
    names = {}
    for old, new in RETIRED_COLUMNS.items():
        names[new] = get(new)
        if names[new] is None and get(old) is not None:
            names[new] = get(old)
            if retired is not None:
                retired.add(old)
    clip_id = str(get("clip_id", res.get("clip")))
    seed = get("seed")
    prompt_category = res.get("prompt_category") or meta.get("prompt_category")
    return {
        "clip_id": clip_id, "generator": "-" if names["generator"] is None else names["generator"],
        "generator_version": names["generator_version"], "prompt_category": prompt_category,
        "prompt": get("prompt"), "seed": seed,
        "scene": scene_key(prompt_category, get("prompt"), seed, clip_id),
        "path": res.get("path"), "status": res.get("status"),
        "reason": res.get("reason"), "content_hash": res.get("content_hash"),
        "config_hash": res.get("config_hash"),
        "schema_version": res.get("schema_version"), "version": res.get("version"),
        "result": res}


def _id_candidates(paths: Sequence[Any]) -> set:
    """Every id :func:`~.ids.derive_clip_ids` may give one of ``paths`` on its way: each path
    suffix, with and without the file's extension."""
    out = set()
    for p in paths:
        for keep_suffix in (False, True):
            parts = _parts(p, keep_suffix)
            out.update("/".join(parts[-d:]) for d in range(1, len(parts) + 1))
    return out


def _unique_jsonl_ids(rows: List[Tuple[int, Dict[str, Any]]], path: Path) -> None:
    """Rows of one config that share a clip id but come from different files get unique ids
    (the shortest distinguishing path suffix, e.g. ``cogvideox/3`` / ``sora/3``; their scene
    follows), so cards and scenes never merge two files; the same file twice is an error.

    A derived id avoids the other clip ids of its config and the ids already derived for it.
    Linear in the rows: only the ids a group's paths can produce (:func:`_id_candidates`) are
    looked up in the config's sets of ids, never every id of the config per group."""
    groups: Dict[Tuple[Any, str], List[Tuple[int, Dict[str, Any]]]] = defaultdict(list)
    for lineno, row in rows:
        groups[(row.get("config_hash"), row["clip_id"])].append((lineno, row))
    given: Dict[Any, set] = defaultdict(set)  # the clip ids of each config, as read
    derived: Dict[Any, set] = defaultdict(set)  # the ids derived so far, per config
    for cfg, cid in groups:
        given[cfg].add(cid)
    for (cfg, cid), members in groups.items():
        if len(members) < 2:
            continue
        paths = [r.get("path") for _, r in members]
        if None in paths or len(set(paths)) < len(paths):
            raise ResultSchemaError(
                f"{path}: clip id {cid!r} appears on lines "
                f"{', '.join(str(n) for n, _ in members)} for the same (or an unknown) path: "
                "keep one result per clip and config")
        taken = sorted(t for t in _id_candidates(paths)
                       if (t in given[cfg] and t != cid) or t in derived[cfg])
        new_ids = derive_clip_ids(paths, taken=taken)
        derived[cfg].update(new_ids)
        for (_, row), new in zip(members, new_ids):
            row["clip_id"] = new
            if row.get("seed") is None:
                row["scene"] = scene_key(row.get("prompt_category"), row.get("prompt"), None, new)


def _jsonl_objects(path: Path) -> Iterator[Tuple[int, Any]]:
    """(line number, parsed JSON value) of each non-blank line of a results JSONL file;
    :class:`ResultSchemaError` names the line that is not JSON, or the file when it is binary
    data. A last line cut off by an interrupted write (a crash, a full disk: no newline at the
    end, an object that does not parse) is skipped with a one-line warning naming it."""
    try:
        with path.open(encoding="utf-8-sig") as fh:  # -sig: a byte-order mark, as in a manifest
            for lineno, text in enumerate(fh, 1):
                if not text.strip():
                    continue
                try:
                    value = json.loads(text)
                except json.JSONDecodeError as exc:
                    if not text.endswith("\n") and text.lstrip().startswith("{"):
                        warnings.warn(f"{path}, line {lineno} is cut off (an interrupted "
                                      "write): skipped", UserWarning)
                        return
                    raise ResultSchemaError(f"{path}, line {lineno}: not JSON ({exc.msg}); "
                                            "expected a SQLite store or JSON lines of results"
                                            ) from None
                except RecursionError:
                    raise ResultSchemaError(f"{path}, line {lineno}: not JSON ({TOO_DEEP}); "
                                            "expected a SQLite store or JSON lines of results"
                                            ) from None
                yield lineno, value
    except UnicodeDecodeError:
        raise ResultSchemaError(f"{path}: binary data, not a result store (expected a SQLite "
                                "store or JSON lines of results)") from None


def _load_jsonl(path: Path, config_hash: Optional[str], validate: bool
                ) -> List[Dict[str, Any]]:
    """The joined rows of a results JSONL file (:func:`load_results`); with ``validate`` every
    line is checked in full, whichever config it holds."""
    rows: List[Tuple[int, Dict[str, Any]]] = []
    retired: set = set()
    for lineno, res in _jsonl_objects(path):
        problems = result_problems(res) if validate else []
        if problems:
            raise ResultSchemaError(f"{path}, line {lineno}: " + "; ".join(problems))
        if config_hash is not None and res.get("config_hash") != config_hash:
            continue
        rows.append((lineno, _jsonl_row(migrate_result(res), retired)))
    for old in sorted(retired):
        retired_name(f"{path}: result key {old!r}", repr(RETIRED_COLUMNS[old]), stacklevel=4)
    _unique_jsonl_ids(rows, path)
    return [row for _, row in rows]


_SQLITE_HEADER = b"SQLite format 3\x00"


def _is_sqlite(path: Path) -> bool:
    """True when the file ``path`` starts with SQLite's header."""
    with path.open("rb") as fh:
        return fh.read(16) == _SQLITE_HEADER


def _probe_uri(path: Path) -> str:
    """A URI that reads the SQLite file ``path`` creating no file beside it: ``immutable=1``
    for a WAL database whose ``-wal`` file is absent or empty (its file holds everything, and
    ``mode=ro`` would create the ``-wal`` / ``-shm`` files), else ``mode=ro``."""
    with path.open("rb") as fh:
        head = fh.read(20)
    wal_mode = len(head) == 20 and head[18] == 2  # the header's read version: 2 = WAL
    wal = path.with_name(path.name + "-wal")
    if wal_mode and not (wal.is_file() and wal.stat().st_size > 0):
        return _read_only_uri(path) + "&immutable=1"
    return _read_only_uri(path)


def _check_not_foreign(path: Path, timeout_s: float) -> None:
    """Refuse an existing SQLite file that holds tables but not a geocon store's, before a
    writable open would add the store's tables to it and switch it to WAL mode (another
    program's database given as a store; every :class:`SQLiteStore` open checks). Read
    through a read-only connection that creates no file (:func:`_probe_uri`): the file is left
    as it was. An empty database, a file that is no SQLite database, or one SQLite cannot read
    here, is left to :class:`SQLiteStore` (which creates or refuses it as before)."""
    try:
        if not _is_sqlite(path):
            return
        conn = sqlite3.connect(_probe_uri(path), uri=True, timeout=timeout_s,
                               isolation_level=None)
        try:
            tables = _schema_names(conn)
        finally:
            conn.close()
    except (OSError, sqlite3.DatabaseError):
        return
    if tables and not {"results", "clips"} <= tables:
        raise StoreError(f"{path}: not a geocon result store (no results / clips tables; it "
                         f"holds {', '.join(sorted(tables)[:5])}"
                         f"{', ...' if len(tables) > 5 else ''}); nothing was changed")


def open_readable(db: Union[str, Path], *, timeout_s: float = 120.0,
                  create: bool = True) -> ResultStore:
    """A store to read (reports, exports, merge shards): ``ResultStore(db)`` for a SQLite file
    that this process may write, together with its folder (a store of an older format is
    migrated in place, as always); else the existing file opened read-only
    (:class:`SQLiteStore` ``read_only=True``). A server is always opened read-only
    (:class:`~.pg_store.PostgresStore` ``read_only=True``: no DDL, a database without a geocon
    store or a store whose format must be migrated is a :class:`StoreError`, nothing is
    created). An existing SQLite file that holds other tables but no geocon store is a
    :class:`StoreError` naming it, and is left unchanged. With ``create=False`` a missing
    SQLite file is a :class:`StoreError` ("result store not found"), never a new empty store."""
    if not is_server_url(db):
        path = Path(db)
        writable = _writable(path) and _writable(path.absolute().parent)
        if path.is_file() and not writable:
            return SQLiteStore(path, timeout_s=timeout_s, read_only=True)
        return ResultStore(db, timeout_s=timeout_s, create=create)
    return ResultStore(db, timeout_s=timeout_s, read_only=True)


def config_counts(source: Union[str, Path]) -> Dict[Optional[str], int]:
    """Rows per config hash of a result store or JSON-lines file, in the order in which
    :func:`load_results` returns them (a store: the hashes in code-point order; a JSONL file:
    as first met), cheaply: a store counts in SQL (:meth:`ResultStore.config_counts`, no result
    JSON read), a JSONL file is read once keeping only each line's hash (None for a line whose
    hash is no string, which :func:`load_results` refuses). Used to pick a config before
    loading only its rows (``load_results(source, config_hash=...)``)."""
    path = results_file(source)
    if path is not None:
        counts: Dict[Optional[str], int] = {}
        for _, res in _jsonl_objects(path):
            h = res.get("config_hash") if isinstance(res, dict) else None
            key = h if isinstance(h, str) else None
            counts[key] = counts.get(key, 0) + 1
        return counts
    with open_readable(source) as store:
        return dict(store.config_counts())


def results_file(source: Union[str, Path]) -> Optional[Path]:
    """The path of ``source`` when it is a JSON-lines results file (``geocon score --json``),
    None when it is a result store (a PostgreSQL server or a SQLite file): how
    :func:`load_results` and :func:`config_counts` tell the two apart.

    Raises:
        InputError: ``source`` names no server and no existing file.
    """
    if is_server_url(source):
        return None
    path = Path(source)
    if not path.exists():
        raise InputError(f"results not found: {path}")
    return None if _is_sqlite(path) else path


def load_results(source: Union[str, Path], *, config_hash: Optional[str] = None,
                 validate: bool = True) -> List[Dict[str, Any]]:
    """Joined rows from a result store (SQLite file or PostgreSQL URL) or a JSON-lines file.

    JSONL lines are ``ClipResult.to_dict()`` objects (as written by ``geocon score --json``);
    their clip metadata (generator, generator_version, prompt_category, prompt, seed) is read
    from the same object or its ``meta`` dict when present (``generator`` defaults to "-", the
    scene to the clip; the retired ``model`` key is read too, with a DeprecationWarning). With
    ``validate`` every row is checked against the result schema (:class:`ResultSchemaError`
    names the line, or the store and clip): a JSONL line in full (every line, whatever its
    config), a stored row (checked in full when it was written) the cheap way
    (:func:`stored_result_problems`). Results of schema 1.x and 2.x come back migrated to the
    current schema (:func:`geocon_torch.result.migrate_result`). ``config_hash``: the rows of
    that config only (a store reads no other row; :func:`config_counts` tells the configs).
    """
    path = results_file(source)
    if path is not None:
        return _load_jsonl(path, config_hash, validate)
    with open_readable(source) as store:
        return store.rows(config_hash, checked=validate)
