"""PostgreSQL store fixes of audit session 29 (pgconc), on the suite's real throw-away server
(tests/pg_server.py): connect refusals that never change fail at once with the server's reason
(F1); a database without a geocon store is refused by readers and writers, and readers run no
DDL (F5); a lock wait is bounded by the store timeout, TCP connections carry keepalives and a
user timeout (F2); a re-run waiting for a killed run's leases says so (F6); a merge never counts
as added a row that a job committed in OUT meanwhile (F4)."""
from __future__ import annotations

import logging
import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers import CountingScorer, _clip, fake_result, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, StoreError, load_results, merge_stores, run_manifest
from geocon_torch.bench import merge as merge_mod
from geocon_torch.bench.claims import WorkQueue
from geocon_torch.bench.pg_store import retryable
from geocon_torch.bench.store import StoreConnectionError, open_readable
from geocon_torch.cli import main
from geocon_torch.pipeline import pinned_config

psycopg = pytest.importorskip("psycopg")
LOGGER = "geocon_torch.bench"


def _socket_dsn(server, db: str, user: str = "geocon") -> str:
    """A key=value DSN over the server's unix socket (trust: no password needed)."""
    return f"host={server.root} port={server.port} user={user} dbname={db}"


def _admin(server, sql: str, db: str = "postgres"):
    with psycopg.connect(_socket_dsn(server, db), autocommit=True) as conn:
        cur = conn.execute(sql)
        return cur.fetchall() if cur.description else None


def _tables(server, db: str):
    return [r[0] for r in _admin(server, "SELECT relname FROM pg_class c JOIN pg_namespace n ON "
                                         "n.oid = c.relnamespace WHERE n.nspname = 'public' AND "
                                         "c.relkind IN ('r', 'v') ORDER BY 1", db)]


def _timed_open(dsn: str, timeout_s: float):
    t0 = time.monotonic()
    with pytest.raises(StoreConnectionError) as got:
        ResultStore(dsn, timeout_s=timeout_s).close()
    return time.monotonic() - t0, " ".join(str(got.value).split())


# -- F1 ---------------------------------------------------------------------------------------
#: (libpq / server text of a connect error without SQLSTATE, retried?)
CONNECT_ERRORS = [
    ('connection failed: connection to server on socket "/s" failed: FATAL: pg_hba.conf '
     'rejects connection for host "[local]", user "u", database "d", no encryption', False),
    ('connection failed: ... failed: FATAL: permission denied for database "d" DETAIL: User '
     'does not have CONNECT privilege.', False),
    ('connection is bad: invalid port number: "99999"', False),
    ('connection is bad: invalid integer value "abc" for connection option "port"', False),
    ('connection is bad: invalid sslmode value: "bogus"', False),
    ('connection failed: connection to server at "h", port 5 failed: fe_sendauth: no password '
     'supplied', False),
    ("connection failed: ... failed: FATAL: the database system is starting up", True),
    ("connection failed: ... failed: FATAL: the database system is shutting down", True),
    ("connection failed: ... failed: FATAL: the database system is in recovery mode", True),
    ("connection failed: ... failed: FATAL: the database system is not yet accepting "
     "connections DETAIL: Consistent recovery state has not been yet reached.", True),
    ("connection failed: ... failed: FATAL: sorry, too many clients already", True),
    ("connection failed: ... failed: FATAL: remaining connection slots are reserved for "
     "non-replication superuser connections", True),
    ("consuming input failed: FATAL: terminating connection due to administrator command",
     True),
    ('connection is bad: connection to server on socket "/s/.s.PGSQL.5432" failed: No such '
     "file or directory Is the server running locally?", True),
    ("connection failed: connection to server at \"h\", port 5 failed: Connection refused",
     True),
    ("consuming input failed: server closed the connection unexpectedly", True),
]


def test_connect_errors_are_retried_only_while_they_may_change():
    """A FATAL refusal is final unless the server is starting, stopping, recovering or full;
    a DSN libpq cannot use and a missing password are final; a lost connection is retried."""
    got = [(text, retryable(psycopg.OperationalError(text))) for text, _ in CONNECT_ERRORS]
    assert got == CONNECT_ERRORS


def test_final_connect_refusals_fail_at_once_with_the_servers_reason(pg_server, tmp_path,
                                                                     monkeypatch, caplog):
    """A pg_hba.conf reject, a missing CONNECT privilege, an invalid port and a missing
    password fail at once, name the server's (or libpq's) reason and log no retry."""
    tag = uuid.uuid4().hex[:8]
    rej, noconn, role = f"rej_{tag}", f"noconn_{tag}", f"low_{tag}"
    for sql in (f"CREATE DATABASE {rej}", f"CREATE DATABASE {noconn}",
                f"CREATE ROLE {role} LOGIN", f"REVOKE CONNECT ON DATABASE {noconn} FROM PUBLIC"):
        _admin(pg_server, sql)
    hba = pg_server.data / "pg_hba.conf"
    kept = hba.read_text()
    hba.write_text(f"local {rej} all reject\n" + kept)
    pg_server._run("pg_ctl", "-D", str(pg_server.data), "reload")
    time.sleep(0.3)
    try:
        _refused_at_once(pg_server, tmp_path, monkeypatch, caplog, rej, noconn, role)
    finally:
        hba.write_text(kept)
        pg_server._run("pg_ctl", "-D", str(pg_server.data), "reload")


def _refused_at_once(pg_server, tmp_path, monkeypatch, caplog, rej, noconn, role):
    no_pass = tmp_path / "pgpass"
    no_pass.write_text("")
    no_pass.chmod(0o600)
    cases = [(_socket_dsn(pg_server, rej), "pg_hba.conf rejects connection"),
             (_socket_dsn(pg_server, noconn, role), "CONNECT privilege"),
             (f"host={pg_server.root} port=99999 user=geocon dbname=x", "invalid port number"),
             (pg_server.url(pg_server.create_db()), "no password supplied")]
    caplog.set_level(logging.WARNING, LOGGER)
    for dsn, reason in cases:
        if reason == "no password supplied":
            monkeypatch.setenv("PGPASSFILE", str(no_pass))
        caplog.clear()
        took, msg = _timed_open(dsn, timeout_s=4)
        assert took < 1.5 and reason in msg and "did not answer" not in msg, (took, msg)
        assert "retry" not in caplog.text, caplog.text


# -- F5 ---------------------------------------------------------------------------------------
def test_a_database_of_another_application_is_refused_and_left_unchanged(pg_server, tmp_path):
    db = pg_server.create_db()
    _admin(pg_server, "CREATE TABLE customers (id int PRIMARY KEY, name text)", db)
    url = pg_server.url(db)
    shard = tmp_path / "s.sqlite"
    ResultStore(shard).close()
    for open_it in (lambda: ResultStore(url), lambda: open_readable(url),
                    lambda: load_results(url), lambda: merge_stores(tmp_path / "o.sqlite", [url]),
                    lambda: merge_stores(url, [shard])):
        with pytest.raises(StoreError) as got:
            open_it()
        assert "not a geocon result store" in str(got.value), got.value
        assert "customers" in str(got.value) and "nothing was changed" in str(got.value)
    assert main(["bench", "--db", url, "--export-csv", str(tmp_path / "x.csv")]) == 2
    assert _tables(pg_server, db) == ["customers"]
    assert not (tmp_path / "x.csv").exists()


def test_readers_of_an_empty_database_create_nothing(pg_server, tmp_path):
    db = pg_server.create_db()
    url = pg_server.url(db)
    with pytest.raises(StoreError, match="not a geocon result store"):
        open_readable(url)
    assert main(["bench", "--db", url, "--export-csv", str(tmp_path / "x.csv")]) == 2
    assert _tables(pg_server, db) == []
    with ResultStore(url) as s:  # a writer still makes an empty database a store
        assert s.count() == 0


def test_a_read_only_role_reads_a_store_whose_schema_is_not_current(pg_server, tmp_path):
    """A reader runs no DDL: a SELECT-only role reads (and exports) a store whose schema
    digest is another release's, and the schema is left as it was."""
    db = pg_server.create_db()
    with ResultStore(pg_server.url(db)) as s:
        s.put(_clip("c0"), "h0", "cfg", fake_result("c0", config_hash="cfg"))
    role = f"reader_{uuid.uuid4().hex[:8]}"
    for sql in (f"CREATE ROLE {role} LOGIN", f"GRANT SELECT ON ALL TABLES IN SCHEMA public TO "
                f"{role}", "COMMENT ON TABLE meta IS 'geocon_torch store schema 0123456789abcdef'"):
        _admin(pg_server, sql, db)
    dsn = _socket_dsn(pg_server, db, role)
    rows = load_results(dsn)
    assert [r["clip_id"] for r in rows] == ["c0"]
    out = tmp_path / "x.csv"
    assert main(["bench", "--db", dsn, "--all-configs", "--export-csv", str(out)]) == 0
    assert "c0" in out.read_text()
    note = _admin(pg_server, "SELECT obj_description('meta'::regclass, 'pg_class')", db)
    assert note == [("geocon_torch store schema 0123456789abcdef",)]


# -- F2 ---------------------------------------------------------------------------------------
def _lock_results(url: str, hold_s: float):
    locker = psycopg.connect(url)
    locker.execute("LOCK TABLE results IN ACCESS EXCLUSIVE MODE")  # as VACUUM FULL would
    timer = threading.Timer(hold_s, locker.rollback)
    timer.start()
    return locker, timer


def test_a_lock_wait_is_retried_with_a_warning_and_bounded_by_the_store_timeout(pg_url,
                                                                                 caplog):
    caplog.set_level(logging.WARNING, LOGGER)
    store = ResultStore(pg_url, timeout_s=2)
    locker, timer = _lock_results(pg_url, 6.0)
    t0 = time.monotonic()
    try:
        with pytest.raises(StoreError) as got:
            store.put(_clip("c0"), "h0", "cfg", fake_result("c0", config_hash="cfg"))
        took = time.monotonic() - t0
    finally:
        timer.cancel()
        locker.rollback()
        locker.close()
    assert took < 4.0, took
    assert "lock" in str(got.value) and "did not answer" not in str(got.value), got.value
    assert "lock timeout" in caplog.text and "retry 1 in" in caplog.text, caplog.text
    caplog.clear()
    locker, timer = _lock_results(pg_url, 1.0)  # released within the store timeout (2 s)
    try:
        store.put(_clip("c1"), "h1", "cfg", fake_result("c1", config_hash="cfg"))
    finally:
        timer.join()
        locker.close()
        store.close()
    assert "lock timeout" in caplog.text
    with ResultStore(pg_url) as s:
        assert s.count() == 1


def test_tcp_connections_carry_keepalives_a_user_timeout_and_a_lock_timeout(pg_url):
    with ResultStore(pg_url, timeout_s=8) as s:
        info = {o.keyword.decode(): (o.val or b"").decode() for o in s._conn.pgconn.info}
        assert info["keepalives"] == "1" and int(info["keepalives_count"]) >= 1
        assert 1 <= int(info["keepalives_idle"]) <= 10, info
        assert info["tcp_user_timeout"] == "8000"
        lock_ms = s._conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
        assert lock_ms not in ("0", "0ms"), lock_ms


# -- F6 ---------------------------------------------------------------------------------------
def test_a_rerun_waiting_for_a_killed_runs_leases_says_so(tmp_path: Path, pg_url, caplog):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 6))
    dead = ResultStore(pg_url)  # the killed run: 4 clips claimed, never released
    cfg = pinned_config(None, None).config_hash()
    q = WorkQueue(dead, "killed-job", cfg, "dead-owner", lease_s=2.5)
    q.enqueue([f"c{i}" for i in range(6)])
    assert len(q.claim_many(4)) == 4
    dead.close()
    caplog.set_level(logging.WARNING, LOGGER)
    s = run_manifest(m, pg_url, score_fn=CountingScorer(), progress=False, lease_s=2.5)
    assert s.computed == 6
    notes = [r.getMessage() for r in caplog.records if "waiting" in r.getMessage()]
    assert 1 <= len(notes) <= 3, caplog.text
    assert "4 clip(s)" in notes[0] and "killed-job" in notes[0] and "--lease-s" in notes[0]


# -- F4 ---------------------------------------------------------------------------------------
def test_rows_a_job_commits_in_out_during_a_merge_are_not_counted_as_added(tmp_path, any_db,
                                                                             monkeypatch):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    shard = tmp_path / "node.sqlite"
    run_manifest(m, shard, score_fn=CountingScorer(), progress=False)  # c0, c1 ok
    ResultStore(any_db).close()
    real = merge_mod._merge_results

    def job_commits_now(dest, *args, **kwargs):  # a live job stores error rows right now
        run_manifest(m, any_db, score_fn=CountingScorer(fail_on=["c0", "c1"]), progress=False,
                     assign="static")
        return real(dest, *args, **kwargs)

    monkeypatch.setattr(merge_mod, "_merge_results", job_commits_now)
    rep = merge_stores(any_db, [shard])
    assert (rep.results_added, rep.results_replaced, rep.clips_added) == (0, 2, 0), rep
    assert len([u for u in rep.updates if u["table"] == "results"]) == 2
    assert rep.clips_same + rep.clips_older + rep.clips_updated == 2 and not rep.conflicts
    with ResultStore(any_db) as s:
        assert sorted((r["clip_id"], r["status"]) for r in s.rows()) == [("c0", "ok"),
                                                                         ("c1", "ok")]


# -- F3 ---------------------------------------------------------------------------------------
def test_identical_bytes_under_several_ids_are_scored_once_across_concurrent_jobs(tmp_path,
                                                                                   pg_url):
    """3 contents under 3 clip ids each, 3 jobs at once (dynamic claims, one clip a claim):
    each content is scored once, the other ids are linked."""
    rows = []
    for g in range(3):
        for k in range(3):
            p = tmp_path / f"v{g}_{k}.mp4"
            p.write_bytes(f"content {g}".encode())
            rows.append({"clip_id": f"v{g}_{k}", "path": str(p), "generator": f"gen{k}"})
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    ResultStore(pg_url).close()
    scorer = CountingScorer(sleep_s=0.3)
    out: list = []
    threads = [threading.Thread(target=lambda: out.append(run_manifest(
        m, pg_url, score_fn=scorer, progress=False, batch_clips=1, lease_s=2)))
        for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(out) == 3
    assert sorted(c.split("_")[0] for c in scorer.calls) == ["v0", "v1", "v2"], scorer.calls
    assert sum(o.computed for o in out) == 3 and sum(o.linked for o in out) == 6
    with ResultStore(pg_url) as s:
        assert s.count() == 3 and s.count("leaderboard") == 9
