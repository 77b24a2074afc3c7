"""Mutation audit s25 ("pg"): behaviour of bench/pg_store.py, bench/claims.py and
bench/merge.py that no other default test pinned (password masking of every URL form, the
schema-digest check, lease and heartbeat bookkeeping of the work queue, three-shard merges
whose later shards must be compared with what OUT holds now)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import _clip, fake_result

from geocon_torch.bench import ResultStore, load_results, mask_url, merge_stores
from geocon_torch.bench.claims import LeaseKeeper, WorkQueue, live_jobs
from geocon_torch.bench.merge import MAX_DIFFS, differences
from geocon_torch.bench.pg_store import SCHEMA_DIGEST, PostgresStore, retryable
from geocon_torch.bench.store import StoreConnectionError, StoreError
from geocon_torch.errors import InputError


# --- pg_store.mask_url: every form of a secret in a URL -------------------------------------
def test_mask_url_hides_the_client_key_passphrase_in_a_url_query():
    assert mask_url("postgresql://u@h/db?sslpassword=k3y&sslmode=require") == \
        "postgresql://u@h/db?sslpassword=***&sslmode=require"


def test_mask_url_hides_a_password_holding_a_colon():
    assert mask_url("postgresql://u:p:w@h:5432/db") == "postgresql://u:***@h:5432/db"


def test_mask_url_hides_a_percent_escaped_password_key():
    # libpq decodes the key: pass%77ord is password
    assert mask_url("postgresql://u@h/db?pass%77ord=pw") == "postgresql://u@h/db?pass%77ord=***"


# --- merge.py -------------------------------------------------------------------------------
def _result_store(path: Path, ir: float, *, status: str = "ok") -> Path:
    with ResultStore(path) as s:
        s.put(_clip("x"), "h", "cfg", fake_result("x", ir=ir, status=status))
    return path


def test_differences_lists_at_most_max_diffs_fields_in_path_order():
    a = fake_result("a", objects=[0.1] * 20)
    b = fake_result("a", objects=[0.2] * 20)
    got = differences(json.dumps(a), json.dumps(b))
    assert len(got) == MAX_DIFFS == 12
    every = sorted([f"foreground.objects[{i}].{k}" for i in range(20)
                    for k in ("adadfrc_mean", "adap90")])
    assert list(got) == every[:MAX_DIFFS]
    assert got["foreground.objects[0].adap90"] == [0.1, 0.2]


def test_key_order_of_a_stored_result_is_no_conflict(tmp_path: Path):
    """A shard row written by another writer, its JSON keys in another order, is the same."""
    out, shard = _result_store(tmp_path / "out.sqlite", 0.91), tmp_path / "shard.sqlite"
    with ResultStore(out) as s:
        (row,) = s.raw_results()
        (clip,) = s.raw_clips()
    res = json.loads(row["result_json"])
    shuffled = json.dumps({k: res[k] for k in reversed(list(res))})
    assert shuffled != row["result_json"]
    with ResultStore(shard) as s:
        s.insert_raw([{**row, "result_json": shuffled}], [clip])
    rep = merge_stores(out, [shard])
    assert (rep.results_same, rep.conflicts) == (1, [])


def test_a_later_shard_is_compared_with_the_row_out_kept_after_an_error_row(tmp_path: Path):
    """Shard 1 scored, shard 2 an error row (skipped), shard 3 the same scored row: that row
    is the same as OUT's, nothing is replaced."""
    a = _result_store(tmp_path / "a.sqlite", 0.91)
    b = _result_store(tmp_path / "b.sqlite", 0.91, status="error")
    c = _result_store(tmp_path / "c.sqlite", 0.91)
    rep = merge_stores(tmp_path / "out.sqlite", [a, b, c])
    assert (rep.results_added, rep.results_errors_skipped, rep.results_same,
            rep.results_replaced) == (1, 1, 1, 0)
    assert [u for u in rep.updates if u["table"] == "results"] == []


def test_an_error_row_of_this_version_never_replaces_a_result_or_an_error(tmp_path: Path):
    """OUT holds a scored row of an older version (x) and an error row (y); the shard holds
    error rows of the running version for both: OUT keeps its rows, both are skipped."""
    out, shard = tmp_path / "out.sqlite", tmp_path / "shard.sqlite"
    with ResultStore(out) as s:
        old = fake_result("x", ir=0.91)
        old["version"] = "0.1.0"
        s.put(_clip("x"), "hx", "cfg", old)
        s.put(_clip("y"), "hy", "cfg", fake_result("y", status="error"))
    with ResultStore(shard) as s:
        s.put(_clip("x"), "hx", "cfg", fake_result("x", status="error"))
        err = fake_result("y", status="error")
        err["reason"] = "another failure"
        s.put(_clip("y"), "hy", "cfg", err)
    rep = merge_stores(out, [shard])
    assert (rep.results_errors_skipped, rep.results_replaced, rep.results_upgraded) == (2, 0, 0)
    assert [u for u in rep.updates if u["table"] == "results"] == []
    got = {r["clip_id"]: (r["result"]["status"], r["result"]["reason"]) for r in load_results(out)}
    assert got == {"x": ("ok", None), "y": ("error", "fake error")}


def test_replacing_an_error_row_lists_status_and_reason_out_then_shard(tmp_path: Path):
    out = _result_store(tmp_path / "out.sqlite", 0.91, status="error")
    shard = _result_store(tmp_path / "shard.sqlite", 0.91)
    rep = merge_stores(out, [shard])
    assert rep.results_replaced == 1
    (u,) = [u for u in rep.updates if u["table"] == "results"]
    assert u["differences"] == {"status": ["error", "ok"], "reason": ["fake error", None]}


def _clip_stores(tmp_path: Path, times, generators) -> list:
    """One SQLite store per (write time, generator): clip x, same bytes, under config cfg."""
    paths = []
    for i, (t, gen) in enumerate(zip(times, generators)):
        path = tmp_path / f"s{i}.sqlite"
        with ResultStore(path) as s:
            s.put(_clip("x"), "h", "cfg", fake_result("x"))
            (row,) = s.raw_clips()
            s.insert_raw([], [{**row, "generator": gen, "updated_at": t}], replace=True)
        paths.append(path)
    return paths


def test_rows_exactly_the_skew_window_apart_are_ordered(tmp_path: Path):
    """``less than clock_skew_s`` apart is a conflict; exactly that far apart is ordered."""
    shards = _clip_stores(tmp_path, (1000.0, 1005.0), ("old", "new"))
    out = tmp_path / "out.sqlite"
    rep = merge_stores(out, shards, clock_skew_s=5.0)
    assert (rep.clips_updated, rep.conflicts) == (1, [])
    assert [r["generator"] for r in load_results(out)] == ["new"]


def test_a_newer_clip_row_whose_entry_differs_only_in_json_type_is_an_update(tmp_path: Path):
    """The stored manifest entry differs (``true`` / ``1``) but no entry field does by Python's
    ``==``: the row is still not the same; the newer one is written and listed whole as
    entry_json. (Key order alone is no difference: tests/bench/test_merge_key_order.py.)"""
    shards = _clip_stores(tmp_path, (1000.0, 2000.0), ("g", "g"))
    texts = ('{"a": true, "b": 2}', '{"b": 2, "a": 1}')
    for path, text in zip(shards, texts):
        with ResultStore(path) as s:
            (row,) = s.raw_clips()
            s.insert_raw([], [{**row, "entry_json": text}], replace=True)
    out = tmp_path / "out.sqlite"
    rep = merge_stores(out, shards)
    assert (rep.clips_updated, rep.clips_same) == (1, 0)
    (u,) = [u for u in rep.updates if u["table"] == "clips"]
    assert u["differences"] == {"entry_json": list(texts)}


def test_out_named_by_a_relative_path_is_also_found_among_absolute_shards(tmp_path, monkeypatch):
    store = _result_store(tmp_path / "a.sqlite", 0.91)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match="also listed as a shard"):
        merge_stores("a.sqlite", [store])
    with pytest.raises(InputError, match="shard listed twice"):
        merge_stores(tmp_path / "out.sqlite", [store, "a.sqlite"])


# --- pg_store.py: schema check, clones (tests/pg_server.py's throw-away server) ---------------
def _comment(store) -> str:
    return store.select("SELECT obj_description('meta'::regclass, 'pg_class')")[0][0]


def test_a_store_whose_schema_comment_names_another_digest_runs_the_ddl_again(pg_url):
    with ResultStore(pg_url) as s:
        assert _comment(s) == f"geocon_torch store schema {SCHEMA_DIGEST}"
        s.transaction(lambda: s.execute("COMMENT ON TABLE meta IS 'geocon_torch store schema x'"))
    with ResultStore(pg_url) as s:
        assert _comment(s) == f"geocon_torch store schema {SCHEMA_DIGEST}"


def test_a_clone_keeps_the_store_timeouts(pg_url):
    with PostgresStore(pg_url, timeout_s=7.0, connect_timeout_s=3.0) as s:
        c = s.clone()
        try:
            assert (c.timeout_s, c.connect_timeout_s, c.name) == (7.0, 3.0, s.name)
        finally:
            c.close()


def test_retryable_errors_by_class_and_message():
    psycopg = pytest.importorskip("psycopg")
    errors = psycopg.errors
    for exc in (errors.SerializationFailure("s"), errors.DeadlockDetected("d"),
                errors.AdminShutdown("a"), errors.ConnectionFailure("c"),
                psycopg.InterfaceError("the connection is closed"),
                psycopg.OperationalError("connection refused")):
        assert retryable(exc), exc
    for exc in (psycopg.OperationalError('password authentication failed for user "u"'),
                psycopg.OperationalError('database "lb" does not exist'),
                errors.InvalidPassword("p"), errors.UndefinedTable("t")):
        assert not retryable(exc), exc


def test_an_error_that_is_not_retried_keeps_its_kind(pg_url):
    psycopg = pytest.importorskip("psycopg")

    def fail(exc):
        def fn():
            raise exc
        return fn

    with PostgresStore(pg_url, timeout_s=5.0) as s:
        with pytest.raises(StoreConnectionError, match="authentication failed"):
            s._retry(fail(psycopg.OperationalError("password authentication failed")))
        with pytest.raises(StoreError, match="no such table") as info:
            s._retry(fail(psycopg.errors.UndefinedTable("no such table")))
        assert not isinstance(info.value, StoreConnectionError)
        assert s.retries == 0


# --- claims.py: heartbeats, counts, leases -------------------------------------------------
def _alive_for(store, job: str) -> float:
    """Seconds the heartbeat of ``job`` still runs (server clock)."""
    return float(store.select("SELECT EXTRACT(EPOCH FROM alive_until - now()) FROM work_jobs "
                              "WHERE job = ?", (job,))[0][0])


def test_a_rank_with_a_short_lease_never_shortens_the_jobs_heartbeat(pg_url):
    with ResultStore(pg_url) as a_store, ResultStore(pg_url) as b_store:
        WorkQueue(a_store, "job", "cfg", "A", lease_s=600).enqueue(["x", "y"])
        WorkQueue(b_store, "job", "cfg", "B", lease_s=1).enqueue(["x", "y"])
        assert _alive_for(a_store, "job") > 500


def test_live_jobs_count_only_the_open_rows(pg_url):
    with ResultStore(pg_url) as s:
        q = WorkQueue(s, "job", "cfg", "A", lease_s=60)
        q.enqueue(["x", "y", "z"])
        q.finish("x")
        assert live_jobs(s) == [("job", "cfg", 2)]
        assert (q.pending(), q.finished()) == (2, False)


def test_handing_claims_back_restores_the_store_timeout(pg_url):
    with PostgresStore(pg_url, timeout_s=60.0) as s:
        q = WorkQueue(s, "job", "cfg", "A", lease_s=60)
        q.enqueue(["x"])
        assert q.claim() == "x"
        with pytest.raises(RuntimeError):
            with LeaseKeeper(q):
                raise RuntimeError("bug")
        assert s.timeout_s == 60.0
        assert s.select("SELECT owner FROM work") == [(None,)]


def test_a_renewal_that_finds_the_heartbeat_clears_a_stale_reaped_flag(pg_url):
    with ResultStore(pg_url) as s:
        q = WorkQueue(s, "job", "cfg", "A", lease_s=60)
        q.enqueue(["x"])
        assert q.claim() == "x"
        q.reaped.set()
        assert q.renew(s) == ["x"]
        assert not q.reaped.is_set()
