"""PostgreSQL store on a real server (tests/pg_server.py): the same keys, idempotent writes,
migrations and readers as the SQLite file; dynamic claims and leases; masked passwords."""
from __future__ import annotations

import csv
import json
import os
import time

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

from geocon_torch.bench import ResultStore, StoreError, load_results, mask_url, run_manifest
from geocon_torch.bench.claims import WorkQueue
from geocon_torch.bench.preferences import preference_pairs
from geocon_torch.cli import main
from geocon_torch.errors import InputError
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
    recs_pg, _ = preference_pairs(m, pg_url)
    recs_lite, _ = preference_pairs(m, tmp_path / "r.sqlite")
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
