"""PostgreSQL store on a real server (tests/pg_server.py): the same keys, idempotent writes,
migrations and readers as the SQLite file; dynamic claims and leases; masked passwords."""
from __future__ import annotations

import csv
import json
import os
import threading
import time
from collections import Counter

import pytest
from helpers import (
    _FORMAT_1,
    _FORMAT_2,
    CountingScorer,
    _clip,
    bad_rows_manifest,
    fake_result,
    format_1_rows,
    format_2_rows,
    write_clips,
    write_jsonl,
)
from pg_server import PASSWORD

from geocon_torch.bench import (
    ResultStore,
    StoreError,
    is_server_url,
    load_results,
    mask_url,
    run_manifest,
)
from geocon_torch.bench.claims import WorkQueue
from geocon_torch.bench.preferences import preference_pairs
from geocon_torch.cli import main
from geocon_torch.errors import InputError
from geocon_torch.pipeline import pinned_config
from geocon_torch.report import build_report


def _table(db):
    with ResultStore(db) as s:
        rows = s.rows()
    for r in rows:
        r["result"].pop("timing_s", None)
    return rows


def test_mask_url_hides_every_password_form():
    assert mask_url("postgresql://u:pw@h:5432/db") == "postgresql://u:***@h:5432/db"
    assert mask_url("postgres://u@h/db?password=pw&sslmode=require") == \
        "postgres://u@h/db?password=***&sslmode=require"
    assert mask_url("host=h dbname=lb password='p w' user=u") == \
        "host=h dbname=lb password=*** user=u"
    assert mask_url("service=leaderboard") == "service=leaderboard"


def test_same_run_same_table_and_readers_on_both(tmp_path, pg_url):
    """The SQLite tests' bad rows (missing file, identical bytes under two ids, a scorer that
    raises, a scorer returning NaN) give the same rows on both back ends."""
    m = bad_rows_manifest(tmp_path, 6)
    lite = tmp_path / "r.sqlite"

    class Scorer(CountingScorer):
        def __call__(self, entry, config, device):
            out = super().__call__(entry, config, device)
            if entry.clip_id == "c3":
                out["background"]["ge_px"] = float("nan")
            return out

    for target in (lite, pg_url):
        s = run_manifest(m, target, score_fn=Scorer(fail_on={"c2"}), progress=False)
        assert (s.computed, s.ok, s.error, s.linked) == (7, 4, 3, 1)
    table = {r["clip_id"]: r for r in _table(pg_url)}
    assert "non-finite numbers at background.ge_px" in table["c3"]["reason"]
    assert table["dup"]["content_hash"] == table["c0"]["content_hash"]
    assert table["gone"]["content_hash"].startswith("unreadable:")
    assert json.dumps(_table(pg_url), sort_keys=True) == json.dumps(_table(lite), sort_keys=True)
    assert load_results(pg_url) == load_results(lite)
    with ResultStore(pg_url) as s:
        s.export_csv(tmp_path / "pg.csv")
    with ResultStore(lite) as s:
        s.export_csv(tmp_path / "lite.csv")
    assert (tmp_path / "pg.csv").read_text() == (tmp_path / "lite.csv").read_text()
    page = build_report(pg_url, tmp_path / "rep", draw=False, n_boot=200, cards=1).read_text()
    assert "8 clips" in page
    again = CountingScorer()
    s2 = run_manifest(m, pg_url, score_fn=again, progress=False)
    assert again.calls == [] and s2.skipped == 8 and s2.assign == "dynamic"


def test_preference_pairs_on_postgres(tmp_path, pg_url, monkeypatch):
    rows = write_clips(tmp_path / "clips", 4)
    for r in rows:
        r["prompt"] = "p" + str(int(r["clip_id"][1:]) % 2)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", CountingScorer())
    recs_pg, _ = preference_pairs(m, pg_url, kind="background")
    recs_lite, _ = preference_pairs(m, tmp_path / "r.sqlite", kind="background")
    assert [r["status"] for r in recs_pg] == ["pair", "pair"] and recs_pg == recs_lite


@pytest.mark.parametrize("fmt", ["1", "2"])
def test_older_formats_migrate_and_newer_format_fails_on_postgres(pg_url, fmt):
    import psycopg
    layout, rows_of = {"1": (_FORMAT_1, format_1_rows), "2": (_FORMAT_2, format_2_rows)}[fmt]
    with psycopg.connect(pg_url, autocommit=True) as conn:
        for stmt in filter(str.strip, layout.split(";")):
            conn.execute(stmt)
        results, clips = rows_of()
        with conn.cursor() as cur:
            cur.executemany("INSERT INTO results VALUES (%s,%s,%s,%s,%s,%s,%s,%s)", results)
            cur.executemany("INSERT INTO clips VALUES (%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s,%s)",
                            clips)
    with ResultStore(pg_url) as s:
        rows = {r["clip_id"]: r for r in s.rows()}
    if fmt == "1":
        assert rows["c4"]["prompt_category"] == "C4" and "category" not in rows["c4"]
        assert rows["stress"]["result"]["behaviour"] == "Stress"
        assert rows["c4"]["generator"] == "m" and "model" not in rows["c4"]
    else:
        assert [(r["generator"], r["generator_version"], r["prompt_category"])
                for r in rows.values()] == [("gen0", "v0", "C1"), ("gen1", "v1", "C3")]
        assert rows["c3"]["result"]["epipolar"]["implementation"] == "torch"
        assert rows["c3"]["result"]["schema_version"] == "3.0"
    with psycopg.connect(pg_url, autocommit=True) as conn:
        assert conn.execute("SELECT value FROM meta").fetchone() == ("3",)
        cols = [r[0] for r in conn.execute(
            "SELECT column_name FROM information_schema.columns WHERE table_name='clips' "
            "ORDER BY ordinal_position")]
        assert "generator" in cols and "model" not in cols and "model_version" not in cols
        conn.execute("UPDATE meta SET value='9'")
    with pytest.raises(StoreError, match="format 9 .*upgrade geocon_torch"):
        ResultStore(pg_url)


def test_claims_skip_locked_rows_and_expired_leases_are_taken_again(pg_url):
    a_store, b_store = ResultStore(pg_url), ResultStore(pg_url)
    try:
        a = WorkQueue(a_store, "job1", "cfg", "A", lease_s=0.6)
        b = WorkQueue(b_store, "job1", "cfg", "B", lease_s=30)
        a.enqueue(["x", "y", "z"])
        b.enqueue(["x", "y", "z"])  # idempotent
        assert a.pending() == 3
        assert a.claim() == "x" and b.claim() == "y"  # x is leased by A: B takes the next
        b_store.put(_clip("y"), "hy", "cfg", fake_result("y"), also=[b.done_statement("y")])
        assert b.claim() == "z"
        assert b.claim() == "z"  # a row B holds but never finished (a lost reply) is B's again
        b.finish("z")
        assert b.claim() is None and b.pending() == 1 and not b.finished()  # x is leased by A
        # another job on the same config leaves a clip leased elsewhere alone
        other = WorkQueue(b_store, "job2", "cfg", "C", lease_s=30)
        other.enqueue(["x"])
        assert other.claim() is None
        time.sleep(0.8)  # A died: its lease on x expires
        assert b.claim() == "x"
        assert a.claim() is None  # B's live lease now protects x from A as well
        b.finish("x")
        assert b.pending() == 0 and b.finished() and other.claim() == "x"
    finally:
        a_store.close()
        b_store.close()


def test_password_never_printed_and_bad_database_is_one_line(tmp_path, pg_server, capsys,
                                                              monkeypatch):
    monkeypatch.delenv("PGPASSFILE")  # only the URL carries the password here
    url = pg_server.url(pg_server.create_db(), password=True)
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2) +
                    [{"clip_id": "gone", "path": "clips/nope.mp4", "generator": "m"}])
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", CountingScorer())
    rc = main(["bench", str(m), "--db", url, "--no-progress", "--export-csv",
               str(tmp_path / "t.csv")])
    out, err = capsys.readouterr()
    assert rc == 0 and "3 clips on 1 rank(s): 3 scored" in out
    assert mask_url(url) in out and ":***@" in out
    assert main(["report", url, "--out", str(tmp_path / "rep"), "--no-draw"]) == 0
    out2, err2 = capsys.readouterr()
    files = [p.read_text(errors="replace") for p in tmp_path.rglob("*") if p.is_file()
             and p.suffix in (".csv", ".html", ".json", ".jsonl")]
    with ResultStore(url) as s:
        stored = json.dumps(s.rows(), default=str)
    for text in (out, err, out2, err2, stored, *files):
        assert PASSWORD not in text
    bad = url.rsplit("/", 1)[0] + "/no_such_db"
    assert main(["bench", str(m), "--db", bad, "--no-progress"]) == 2
    err3 = capsys.readouterr().err
    assert "no_such_db" in err3 and "does not exist" in err3 and PASSWORD not in err3
    assert len(err3.strip().splitlines()) == 1


def test_multi_node_sqlite_refused_with_the_fix(tmp_path, monkeypatch):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    for k, v in {"WORLD_SIZE": "4", "RANK": "0", "LOCAL_WORLD_SIZE": "2",
                 "LOCAL_RANK": "0"}.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(InputError, match=r"spans 2 nodes.*postgresql://.*geocon merge"):
        run_manifest(m, tmp_path / "r.sqlite", score_fn=CountingScorer(), progress=False)
    with pytest.raises(InputError, match="dynamic work claiming needs a PostgreSQL store"):
        run_manifest(m, tmp_path / "r.sqlite", score_fn=CountingScorer(), progress=False,
                     distributed=False, assign="dynamic")


def test_export_on_postgres_matches_rows(tmp_path, pg_url):
    with ResultStore(pg_url) as s:
        s.put(_clip("a", prompt_category="C4"), "h1", "c",
              fake_result("a", ir=0.95, ge=2.0, objects=[4.0, 6.0]))
        out = s.export_csv(tmp_path / "r.csv")
    rows = list(csv.DictReader(out.open()))
    assert rows[0]["clip_id"] == "a" and float(rows[0]["ge_px"]) == 2.0
    assert rows[0]["prompt_category"] == "C4" and float(rows[0]["adap90_max"]) == 6.0
    assert os.environ.get("PGPASSFILE")  # the fixture's pgpass carried the password


def test_key_value_string_of_any_libpq_keywords_is_the_server(tmp_path, pg_server, capsys,
                                                              monkeypatch):
    """A libpq key=value string that starts with sslmode= (not host= / dbname=) still names
    the server: the rows land there, no local file is created."""
    db = pg_server.create_db()
    dsn = f"sslmode=disable host={pg_server.root} port={pg_server.port} user=geocon dbname={db}"
    assert is_server_url(dsn) and is_server_url("connect_timeout=5 service=lb")
    assert is_server_url("password='a b' host=h") and not is_server_url("run=1.sqlite")
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", CountingScorer())
    monkeypatch.chdir(tmp_path)
    assert main(["bench", str(m), "--db", dsn, "--no-progress"]) == 0
    assert "dynamic assignment" in capsys.readouterr().out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clips", "m.jsonl"]
    with ResultStore(pg_server.url(db)) as s:
        assert s.count() == 2 and s.count("clips") == 2


def test_two_jobs_claims_are_serialised_per_config(pg_url):
    """Job A's claim is still uncommitted when job B claims on the same config: B waits for
    A's commit and then sees A's lease (without the per-config lock B took the same clip)."""
    a_store, b_store = ResultStore(pg_url), ResultStore(pg_url)
    try:
        a = WorkQueue(a_store, "jobA", "cfg", "A", lease_s=30)
        b = WorkQueue(b_store, "jobB", "cfg", "B", lease_s=30)
        a.enqueue(["x", "y"])
        b.enqueue(["x", "y"])
        release = threading.Event()
        run_tx = a_store.transaction
        a_store.transaction = lambda fn: run_tx(lambda: (fn(), release.wait(10))[0])
        got = {}
        ta = threading.Thread(target=lambda: got.update(a=a.claim()))
        ta.start()
        time.sleep(0.5)  # A has claimed x, its transaction is still open
        tb = threading.Thread(target=lambda: got.update(b=b.claim()))
        tb.start()
        time.sleep(0.5)
        release.set()
        ta.join(10)
        tb.join(10)
        assert got == {"a": "x", "b": "y"}
    finally:
        a_store.close()
        b_store.close()


def test_two_concurrent_jobs_score_each_clip_once(tmp_path, pg_url):
    n = 16
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))
    scorer = CountingScorer(sleep_s=0.02)
    ResultStore(pg_url).close()
    summaries = []

    def job():
        summaries.append(run_manifest(m, pg_url, score_fn=scorer, progress=False,
                                      batch_clips=1, lease_s=30))

    threads = [threading.Thread(target=job) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(summaries) == 2 and sum(s.computed for s in summaries) == n
    assert Counter(scorer.calls) == Counter({f"c{i}": 1 for i in range(n)})
    with ResultStore(pg_url) as s:
        assert s.count() == n and s.count("clips") == n
        assert s.select("SELECT COUNT(*) FROM work")[0][0] == 0


def _jobs(db: str, table: str = "work"):
    """The jobs holding rows in the ``work`` table (or heartbeats in ``work_jobs``)."""
    with ResultStore(db) as s:
        return sorted(r[0] for r in s.select(f"SELECT DISTINCT job FROM {table}"))


def test_new_job_deletes_the_rows_of_crashed_jobs_only(tmp_path, pg_url):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 3))
    cfg = pinned_config(None, None).config_hash()
    stores = [ResultStore(pg_url) for _ in range(4)]
    try:
        dead = WorkQueue(stores[0], "dead", cfg, "D", lease_s=0.3)  # killed mid-clip
        dead.enqueue(["c0", "c1", "c2"])
        assert dead.claim() == "c0"
        live = WorkQueue(stores[1], "live", cfg, "L", lease_s=60)  # alive, nothing claimed
        live.enqueue(["c0", "zz"])
        held = WorkQueue(stores[2], "held", cfg, "H", lease_s=0.3)  # heartbeat gone, lease not
        held.enqueue(["zz"])
        assert held.claim() == "zz"
        stores[2].transaction(lambda: stores[2].execute(
            "UPDATE work SET lease_until = now() + interval '1 hour' WHERE job = 'held'"))
        other = WorkQueue(stores[3], "other", "another-config", "O", lease_s=0.3)
        other.enqueue(["c0"])
        assert other.claim() == "c0"
        time.sleep(0.6)  # the 0.3 s heartbeats and leases expire
        assert _jobs(pg_url) == ["dead", "held", "live", "other"]
        s = run_manifest(m, pg_url, score_fn=CountingScorer(), progress=False)
        assert s.computed == 3 and s.assign == "dynamic"
        assert _jobs(pg_url) == ["held", "live"]  # crashed jobs of any config go ("other")
        assert _jobs(pg_url, "work_jobs") == ["held", "live"]
    finally:
        for st in stores:
            st.close()
