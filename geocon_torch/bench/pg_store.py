"""PostgreSQL result store (psycopg 3): the same tables, format and idempotent writes as the
SQLite file, on a server every node of a multi-node job can reach.

``--db`` takes a libpq URL (``postgresql://user@host:5432/leaderboard``) or key=value string
(``service=leaderboard``, ``host=/run/postgresql dbname=lb``). Keep the password out of it: libpq
reads ``PGPASSWORD``, ``~/.pgpass`` (``PGPASSFILE``) or the service file (``PGSERVICEFILE``).
A password written in the URL still works, but every message, log line, report and export
names the store by :func:`mask_url` (``postgresql://user:***@host/db``).

Failures: a lost connection, a server that is restarting, shutting down, recovering or out of
connection slots, a serialization failure, a deadlock or a lock wait longer than the lock
timeout is retried — one warning line per retry on the ``geocon_torch.bench`` logger (stderr),
reconnecting with back-off — until ``timeout_s`` has passed, then a
:class:`~geocon_torch.bench.store.StoreConnectionError` names the store, the attempts and the
last error (a :class:`~geocon_torch.bench.store.StoreError` when the last one was a lock another
session held). Every connection bounds a wait for a lock (``lock_timeout``: a quarter of
``timeout_s``, 0.2 s to 30 s; ``VACUUM FULL``, ``ALTER TABLE`` or ``LOCK TABLE`` elsewhere no
longer holds a rank silently) and, over TCP, carries keepalives and ``tcp_user_timeout``
(``timeout_s``), so a peer that vanished raises a lost connection instead of a wait of minutes
(the keys the ``--db`` string sets itself are kept). A statement the server itself stops
answering (a frozen host) is not cancelled.
Every write is one transaction whose statements are idempotent (inserts that keep an existing
key, upserts of the same values), so a write retried after an unknown commit outcome is never
lost nor doubled. Refusals that no retry changes fail at once with the server's or libpq's own
reason: a bad or missing password, a missing database or role, a ``pg_hba.conf`` reject, a
missing CONNECT privilege, any other ``FATAL`` at connect but the transient ones above, and a
connection string libpq cannot use (``invalid port number``, ``invalid sslmode value``, ...).

A database holding tables but no geocon store (another application's) is refused, before
anything is created in it ("not a geocon result store ... nothing was changed"), as a SQLite
file is. Readers (``read_only=True``: :func:`~.store.open_readable`, reports, exports, merge
shards) run no DDL and no write (their sessions are ``default_transaction_read_only``): they
refuse a database without a geocon store (empty or not) and a store whose format must be
migrated first, and read a store of the current format whatever its schema digest, so a role
with only SELECT reads it.

Schema creation takes a transaction-level advisory lock, so ranks opening a new database at the
same moment do not race. An open first reads whether the schema is current (every table, index
and view there, ``meta.store_format`` this package's and the comment on ``meta`` naming
:data:`SCHEMA_DIGEST`): then it runs no DDL at all, so a store open (a rank, a lease keeper, a
report) never queues behind ``VACUUM`` (``CREATE INDEX IF NOT EXISTS`` would wait for its lock,
and every write after it); a new, older (migrated) or changed schema runs the DDL as before.
The ``work`` table of dynamic claims and its ``work_jobs`` heartbeats (:mod:`.claims`) live in
the same database.
"""
from __future__ import annotations

import hashlib
import logging
import random
import re
import time
from typing import Any, Callable, Dict, List, Sequence, Tuple
from urllib.parse import unquote, urlsplit, urlunsplit

from ..errors import OptionalDependencyError
from .store import (_MIGRATIONS, _TABLES, _VIEW_BODY, CONNINFO_VALUE, STORE_FORMAT,
                    ResultStore, StoreConnectionError, StoreError)

log = logging.getLogger("geocon_torch.bench")

# SQLSTATE classes worth a retry: connection exception, transaction rollback (serialization
# failure, deadlock), operator intervention (admin / crash shutdown, cannot connect now)
_RETRY_SQLSTATE = ("08", "40", "57")
_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout ran out: another session holds the lock
#: a ``FATAL`` refusal at connect (no SQLSTATE from libpq) that a retry may cure: the server
#: starting, stopping or recovering, out of connection slots, or ending sessions; any other
#: FATAL (pg_hba.conf, CONNECT privilege, SSL / GSS refusals, a missing role) is final
_TRANSIENT_FATAL = ("the database system is starting up", "the database system is shutting down",
                    "the database system is in recovery mode", "not yet accepting connections",
                    "too many clients", "too many connections", "connection slots are reserved",
                    "terminating connection", "could not fork", "due to timeout")
#: libpq refusing the connection string or its own setup (no SQLSTATE): never cured by a retry
_FINAL_CLIENT = re.compile(
    r"\binvalid [\w ]*(value|number|option)\b|missing \"=\"|unterminated quoted string|"
    r"invalid URI|percent-encoded|unexpected spaces|could not match \d+|is too long \(maximum|"
    r"could not parse network address|no password supplied|SSL was required|does not exist|"
    r"authentication")
_SCHEMA_LOCK = 0x6765_6F63  # "geoc": advisory lock id held while the schema is created
_WORK_TABLE = """
CREATE TABLE IF NOT EXISTS work (
    job TEXT NOT NULL,
    clip_id TEXT NOT NULL,
    config_hash TEXT NOT NULL,
    position BIGINT NOT NULL,
    done BOOLEAN NOT NULL DEFAULT FALSE,
    owner TEXT,
    lease_until TIMESTAMPTZ,
    claims INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (job, clip_id)
);
CREATE INDEX IF NOT EXISTS work_by_clip ON work (config_hash, clip_id);
CREATE INDEX IF NOT EXISTS work_open ON work (job, position) WHERE NOT done;
CREATE TABLE IF NOT EXISTS work_jobs (
    job TEXT PRIMARY KEY,
    config_hash TEXT NOT NULL,
    alive_until TIMESTAMPTZ NOT NULL
);
"""

#: the relations a current schema holds (tables, indexes, the view)
_SCHEMA_OBJECTS = ("meta", "results", "clips", "clips_by_result", "leaderboard", "work",
                   "work_by_clip", "work_open", "work_jobs")
#: digest of the schema DDL this package runs (kept as the comment on ``meta`` once run): a
#: changed DDL runs again on the first open of a store
SCHEMA_DIGEST = hashlib.sha256("\n".join((STORE_FORMAT, _TABLES, _VIEW_BODY, _WORK_TABLE))
                               .encode()).hexdigest()[:16]
_SCHEMA_COMMENT = f"geocon_torch store schema {SCHEMA_DIGEST}"


def mask_url(db: str) -> str:
    """``db`` with any password replaced by ``***``: URL userinfo, the ``password`` and
    ``sslpassword`` (the client key's passphrase) parameters of a URL query or of a key=value
    string (a value read as libpq reads it: quoted or bare, with backslash escapes)."""
    text = str(db)
    if text.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(text)
        netloc = parts.netloc
        if "@" in netloc:
            userinfo, host = netloc.rsplit("@", 1)
            if ":" in userinfo:
                userinfo = userinfo.split(":", 1)[0] + ":***"
            netloc = f"{userinfo}@{host}"
        query = "&".join(_masked_param(p) for p in parts.query.split("&"))
        return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
    # the token grammar's value, and what libpq still reads as a bare value after it (a quote)
    return re.sub(r"(?i)(password\s*=\s*)" + CONNINFO_VALUE + r"\S*", r"\1***", text)


#: connection parameters that hold a secret (libpq: the password, the client key's passphrase)
_SECRET_PARAMS = ("password", "sslpassword")


def _masked_param(param: str) -> str:
    """One ``name=value`` parameter of a URL query, its value ``***`` when ``name`` (with its
    %-escapes decoded, as libpq reads it; any case) is a :data:`_SECRET_PARAMS` key."""
    name, eq, _ = param.partition("=")
    return f"{name}=***" if eq and unquote(name).lower() in _SECRET_PARAMS else param


def _psycopg():
    try:
        import psycopg
    except ImportError as exc:
        raise OptionalDependencyError(
            "a postgresql:// store needs psycopg 3: pip install 'geocon_torch[postgres]'") from exc
    return psycopg


def retryable(exc: BaseException) -> bool:
    """True for errors a reconnect / re-run of the transaction may cure (module doc)."""
    psycopg = _psycopg()
    if isinstance(exc, psycopg.InterfaceError):  # the connection object is closed / broken
        return True
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = getattr(exc, "sqlstate", None)
    if state is None:  # libpq's own error: refused, reset, timed out, a server's FATAL
        text = str(exc)
        if "FATAL:" in text:
            return any(s in text for s in _TRANSIENT_FATAL)
        return _FINAL_CLIENT.search(text) is None
    return state.startswith(_RETRY_SQLSTATE) or state == _LOCK_NOT_AVAILABLE


class PostgresStore(ResultStore):
    """The server back end (module doc).

    Args:
        dsn: libpq URL or key=value string (password from the environment / pgpass / service).
        timeout_s: how long an operation may keep retrying a lost server or a held lock before
            failing (s); also sets the connection's lock timeout and TCP user timeout.
        connect_timeout_s: libpq's timeout of one connection attempt (s).
        read_only: open an existing store for reading only (:func:`~.store.open_readable`):
            no DDL, sessions read-only; a database without a geocon store, or a store whose
            format must be migrated, is a :class:`~.store.StoreError`.
        create: False: a database without a geocon store is refused even when it is empty
            (never made a store).
    """

    kind = "postgresql"
    _create_view = "CREATE OR REPLACE VIEW "

    def __init__(self, dsn: str, *, timeout_s: float = 120.0, connect_timeout_s: float = 5.0,
                 read_only: bool = False, create: bool = True):
        self.dsn = str(dsn)
        self.name = mask_url(self.dsn)
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.read_only = bool(read_only)
        self.create = bool(create)
        self.retries = 0  # retried attempts over this store's life (reported by tests)
        self._psycopg = _psycopg()
        self._conn = None
        self._retry(lambda: self._tx_body(self._check_readable if self.read_only
                                          else self._init_schema))

    # -- connection and retries ---------------------------------------------------------------
    def lock_timeout_s(self) -> float:
        """Seconds one statement waits for a lock before it is cancelled and retried: a
        quarter of the store timeout, 0.2 s to 30 s."""
        return min(30.0, max(0.2, self.timeout_s / 4.0))

    def _tcp_options(self) -> Dict[str, Any]:
        """libpq keepalive / user-timeout keywords for a TCP connection (libpq ignores them on
        a unix socket), those the DSN does not set itself: a vanished peer then fails a
        statement within about ``timeout_s`` instead of the kernel's minutes."""
        given = self._psycopg.conninfo.conninfo_to_dict(self.dsn)
        idle = max(1, min(10, int(self.timeout_s / 4)))
        opts: Dict[str, Any] = {"keepalives": 1, "keepalives_idle": idle,
                                "keepalives_interval": max(1, min(5, int(self.timeout_s / 8))),
                                "keepalives_count": 3}
        if self._psycopg.pq.version() >= 120000:  # libpq 12 added tcp_user_timeout
            opts["tcp_user_timeout"] = max(1000, int(self.timeout_s * 1000))
        return {k: v for k, v in opts.items() if k not in given}

    def _connect(self) -> None:
        conn = self._psycopg.connect(self.dsn, autocommit=True,
                                     connect_timeout=max(1, int(self.connect_timeout_s)),
                                     application_name="geocon", **self._tcp_options())
        try:
            conn.execute("SELECT set_config('lock_timeout', %s, false)",
                         (f"{int(self.lock_timeout_s() * 1000)}ms",))
            if self.read_only:
                conn.execute("SET default_transaction_read_only = on")
        except BaseException:
            conn.close()
            raise
        self._conn = conn

    def _drop(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001 - a broken connection may fail to close
                pass
        self._conn = None

    def _clean(self, exc: BaseException) -> str:
        """One line of ``exc`` that never repeats the DSN (which may hold a password)."""
        text = " ".join(str(exc).split()) or type(exc).__name__
        return text.replace(self.dsn, self.name)

    def _retry(self, fn: Callable[[], Any]) -> Any:
        start = time.monotonic()
        delay, attempt = 0.2, 0
        while True:
            try:
                if self._conn is None or self._conn.closed:
                    self._connect()
                return fn()
            except self._psycopg.Error as exc:
                if not retryable(exc):
                    cls = (StoreConnectionError if isinstance(exc, self._psycopg.OperationalError)
                           else StoreError)
                    raise cls(f"{self.name}: {self._clean(exc)}") from None
                self._drop()
                attempt += 1
                self.retries += 1
                waited = time.monotonic() - start
                locked = getattr(exc, "sqlstate", None) == _LOCK_NOT_AVAILABLE
                why = (f"a lock another session holds (VACUUM FULL, ALTER TABLE, LOCK TABLE, a "
                       f"long transaction) was not granted in {self.lock_timeout_s():g} s: "
                       if locked else "")
                if waited + delay > self.timeout_s:
                    cls, what = ((StoreError, "the store stayed locked") if locked else
                                 (StoreConnectionError, "the PostgreSQL server did not answer"))
                    raise cls(f"{self.name}: {what} after {attempt} attempts over {waited:.0f} s "
                              f"(store timeout {self.timeout_s:.0f} s): {why}"
                              f"{self._clean(exc)}") from None
                log.warning("geocon store %s: %s%s; retry %d in %.1f s", self.name, why,
                            self._clean(exc), attempt, delay)
                time.sleep(delay * (1 + 0.25 * random.random()))
                delay = min(delay * 2, 5.0)

    def _tx_body(self, fn: Callable[[], Any]) -> Any:
        with self._conn.transaction():
            return fn()

    def _init_schema(self) -> None:
        if self._schema_current():  # no DDL: nothing to wait for behind VACUUM (module doc)
            return
        names = self._schema_tables()
        if (names or not self.create) and not {"results", "clips"} <= set(names):
            raise self._not_a_store(names)  # another application's database: left as it is
        self._execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
        self._create_schema("DOUBLE PRECISION", "BIGINT")
        for stmt in filter(str.strip, _WORK_TABLE.split(";")):
            self._execute(stmt)
        self._execute(f"COMMENT ON TABLE meta IS '{_SCHEMA_COMMENT}'")

    def _schema_current(self) -> bool:
        """True when every relation of the schema is there, ``meta.store_format`` is
        :data:`~.store.STORE_FORMAT` and ``meta``'s comment names :data:`SCHEMA_DIGEST` (reads
        only: no lock that VACUUM or a writer holds is waited for)."""
        there = ", ".join(f"to_regclass('{name}') IS NOT NULL" for name in _SCHEMA_OBJECTS)
        if not all(self._execute(f"SELECT {there}")[0]):
            return False
        fmt = self._execute("SELECT value FROM meta WHERE key = 'store_format'")
        note = self._execute("SELECT obj_description('meta'::regclass, 'pg_class')")
        return fmt == [(STORE_FORMAT,)] and note == [(_SCHEMA_COMMENT,)]

    def _schema_tables(self) -> List[str]:
        """The tables and views of the schema the store's tables live in (the first schema of
        the search path), by name."""
        return sorted(r[0] for r in self._execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'v', 'm', 'p', 'f')"))

    def _not_a_store(self, names: Sequence[str]) -> StoreError:
        """The error for a database (schema) that holds no geocon store (``names``: what it
        holds), as a SQLite file's."""
        holds = (f"it holds {', '.join(names[:5])}{', ...' if len(names) > 5 else ''}" if names
                 else "the database holds no table")
        return StoreError(f"{self.name}: not a geocon result store (no results / clips tables; "
                          f"{holds}); nothing was changed")

    def _check_readable(self) -> None:
        """A reader's open (``read_only``): refuse a database without a geocon store and a
        store of a format this package cannot read without migrating it; no DDL."""
        needed = ("meta", "results", "clips", "leaderboard")
        there = self._execute("SELECT " + ", ".join(f"to_regclass('{n}') IS NOT NULL"
                                                   for n in needed))[0]
        missing = [n for n, ok in zip(needed, there) if not ok]
        if "results" in missing or "clips" in missing:
            raise self._not_a_store(self._schema_tables())
        if missing:
            raise StoreError(f"{self.name}: the geocon store lacks {' / '.join(missing)}, "
                             "which a reader does not create: open it once with a role that "
                             "may change its schema (geocon prune --db URL --stale-jobs)")
        rows = self._execute("SELECT value FROM meta WHERE key = 'store_format'")
        fmt = rows[0][0] if rows else None
        if fmt in _MIGRATIONS:
            raise StoreError(
                f"{self.name}: store format {fmt} must be migrated to format {STORE_FORMAT} "
                "before it is read, which a reader does not do: open it once with a role that "
                "may change its schema (geocon prune --db URL --stale-jobs migrates it in place)")
        if fmt != STORE_FORMAT:
            raise StoreError(f"{self.name}: store format {fmt} is not the one this "
                             f"geocon_torch reads (format {STORE_FORMAT}); upgrade geocon_torch")

    # -- the back-end interface ---------------------------------------------------------------
    def _transaction(self, fn: Callable[[], Any]) -> Any:
        return self._retry(lambda: self._tx_body(fn))

    def _read_snapshot(self, fn: Callable[[], Any]) -> Any:
        def once() -> Any:
            with self._conn.transaction():
                self._conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                return fn()
        return self._retry(once)

    def _execute(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        cur = self._conn.execute(sql.replace("?", "%s"), tuple(params))
        return cur.fetchall() if cur.description else []

    def _select(self, sql: str, params: Sequence[Any] = ()) -> Tuple[List[str], List[tuple]]:
        def read():
            cur = self._conn.execute(sql.replace("?", "%s"), tuple(params))
            return [d.name for d in cur.description], cur.fetchall()
        return self._retry(read)

    def select(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        """Rows of a retried read (``?`` placeholders); for the work queue."""
        return self._select(sql, params)[1]

    def transaction(self, fn: Callable[[], Any]) -> Any:
        """Run ``fn()`` in one retried transaction (it calls :meth:`execute`)."""
        return self._transaction(fn)

    def execute(self, sql: str, params: Sequence[Any] = ()) -> List[tuple]:
        """One statement inside :meth:`transaction`."""
        return self._execute(sql, params)

    def clone(self) -> "PostgresStore":
        """A second connection to the same store (for a helper thread)."""
        return PostgresStore(self.dsn, timeout_s=self.timeout_s,
                             connect_timeout_s=self.connect_timeout_s, read_only=self.read_only,
                             create=self.create)

    def close(self) -> None:
        self._drop()


ResultStore.server_class = PostgresStore
