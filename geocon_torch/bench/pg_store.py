"""PostgreSQL result store (psycopg 3): the same tables, format and idempotent writes as the
SQLite file, on a server every node of a multi-node job can reach.

``--db`` takes a libpq URL (``postgresql://user@host:5432/leaderboard``) or key=value string
(``service=leaderboard``, ``host=/run/postgresql dbname=lb``). Keep the password out of it: libpq
reads ``PGPASSWORD``, ``~/.pgpass`` (``PGPASSFILE``) or the service file (``PGSERVICEFILE``).
A password written in the URL still works, but every message, log line, report and export
names the store by :func:`mask_url` (``postgresql://user:***@host/db``).

Failures: a lost connection, a server that is restarting or shutting down, a serialization
failure or a deadlock is retried — one warning line per retry on the ``geocon_torch.bench``
logger (stderr), reconnecting with back-off — until ``timeout_s`` has passed, then a
:class:`~geocon_torch.bench.store.StoreConnectionError` names the store, the attempts and the
last error.
Every write is one transaction whose statements are idempotent (inserts that keep an existing
key, upserts of the same values), so a write retried after an unknown commit outcome is never
lost nor doubled. Other errors (bad password, missing database) fail at once.

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
from typing import Any, Callable, List, Sequence, Tuple
from urllib.parse import unquote, urlsplit, urlunsplit

from ..errors import OptionalDependencyError
from .store import (_TABLES, _VIEW_BODY, CONNINFO_VALUE, STORE_FORMAT, ResultStore,
                    StoreConnectionError, StoreError)

log = logging.getLogger("geocon_torch.bench")

# SQLSTATE classes worth a retry: connection exception, transaction rollback (serialization
# failure, deadlock), operator intervention (admin / crash shutdown, cannot connect now)
_RETRY_SQLSTATE = ("08", "40", "57")
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
    if state is None:  # no answer from a server: refused, reset, timed out
        return "does not exist" not in str(exc) and "authentication" not in str(exc)
    return state.startswith(_RETRY_SQLSTATE)


class PostgresStore(ResultStore):
    """The server back end (module doc).

    Args:
        dsn: libpq URL or key=value string (password from the environment / pgpass / service).
        timeout_s: how long an operation may keep retrying a lost server before failing.
        connect_timeout_s: libpq's timeout of one connection attempt.
    """

    kind = "postgresql"
    _create_view = "CREATE OR REPLACE VIEW "

    def __init__(self, dsn: str, *, timeout_s: float = 120.0, connect_timeout_s: float = 5.0):
        self.dsn = str(dsn)
        self.name = mask_url(self.dsn)
        self.timeout_s = float(timeout_s)
        self.connect_timeout_s = float(connect_timeout_s)
        self.retries = 0  # retried attempts over this store's life (reported by tests)
        self._psycopg = _psycopg()
        self._conn = None
        self._retry(lambda: self._tx_body(self._init_schema))

    # -- connection and retries ---------------------------------------------------------------
    def _connect(self) -> None:
        self._conn = self._psycopg.connect(self.dsn, autocommit=True,
                                           connect_timeout=max(1, int(self.connect_timeout_s)),
                                           application_name="geocon")

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
                if waited + delay > self.timeout_s:
                    raise StoreConnectionError(
                        f"{self.name}: the PostgreSQL server did not answer after {attempt} "
                        f"attempts over {waited:.0f} s (store timeout {self.timeout_s:.0f} s): "
                        f"{self._clean(exc)}") from None
                log.warning("geocon store %s: %s; retry %d in %.1f s", self.name,
                            self._clean(exc), attempt, delay)
                time.sleep(delay * (1 + 0.25 * random.random()))
                delay = min(delay * 2, 5.0)

    def _tx_body(self, fn: Callable[[], Any]) -> Any:
        with self._conn.transaction():
            return fn()

    def _init_schema(self) -> None:
        if self._schema_current():  # no DDL: nothing to wait for behind VACUUM (module doc)
            return
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
                             connect_timeout_s=self.connect_timeout_s)

    def close(self) -> None:
        self._drop()


ResultStore.server_class = PostgresStore
