"""``geocon prune`` / :func:`geocon_torch.bench.prune.prune_store` (audit s21 longrun F2, F5,
F7): clip rows not in the manifest, results no clip row references, crashed jobs' work rows of
any config, VACUUM; on SQLite and PostgreSQL (tests/pg_server.py)."""
from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from helpers import CountingScorer, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, StoreError, load_results, run_manifest
from geocon_torch.bench import prune as prune_mod
from geocon_torch.bench.claims import WorkQueue, drop_stale_jobs
from geocon_torch.bench.prune import prune_store
from geocon_torch.cli import main
from geocon_torch.errors import InputError

OTHER = {"io": {"long_side": 256}}  # a second config hash in the same store


def _counts(db):
    with ResultStore(db) as s:
        return s.count("clips"), s.count("results")


def _table(db, config_hash=None):
    """clip id -> (content hash, result dict) of the leaderboard rows."""
    with ResultStore(db) as s:
        return {(r["config_hash"], r["clip_id"]): (r["content_hash"], r["result"])
                for r in s.rows(config_hash)}


def _leaderboard(tmp_path, db):
    """8 clips scored under two configs; c5..c7 re-rendered once under the first config (3
    orphaned results). Returns (rows, manifest of c0..c4, first config hash)."""
    rows = write_clips(tmp_path / "clips", 8)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    cfg = run_manifest(m, db, score_fn=CountingScorer(), progress=False).config_hash
    run_manifest(m, db, score_fn=CountingScorer(), progress=False, config=OTHER)
    for r in rows[5:]:
        Path(r["path"]).write_bytes(f"re-rendered {r['clip_id']}".encode())
    run_manifest(m, db, score_fn=CountingScorer(), progress=False)
    return rows, write_jsonl(tmp_path / "keep.jsonl", rows[:5]), cfg


def test_keep_manifest_and_orphans_on_both_back_ends(tmp_path, any_db):
    rows, keep, cfg = _leaderboard(tmp_path, any_db)
    assert _counts(any_db) == (16, 19)  # 8 clips x 2 configs; 16 + 3 old renders
    before = _table(any_db)
    dry = prune_store(any_db, keep_manifest=keep, orphans=True, dry_run=True)
    assert dry.counts() == {"clips": 6, "orphans": 3 + 6, "jobs": 0, "work_rows": 0}
    assert cfg in dry.clips and list(dry.clips.values()) == [["c5", "c6", "c7"]] * 2
    assert _counts(any_db) == (16, 19)  # a dry run deletes nothing
    done = prune_store(any_db, keep_manifest=keep, orphans=True)
    assert (done.counts(), done.clips, done.orphans, done.notes) == (
        dry.counts(), dry.clips, dry.orphans, [])
    assert _counts(any_db) == (10, 10)
    after = _table(any_db)
    assert sorted(c for _, c in after) == sorted(["c0", "c1", "c2", "c3", "c4"] * 2)
    assert all(after[k] == before[k] for k in after)  # what stays is unchanged
    assert prune_store(any_db, keep_manifest=keep, orphans=True).counts()["clips"] == 0
    with pytest.raises(InputError, match="holds no row of config 'nope'"):
        prune_store(any_db, orphans=True, config_hash="nope")


def test_config_hash_limits_every_kind(tmp_path):
    db = str(tmp_path / "r.sqlite")
    _, keep, cfg = _leaderboard(tmp_path, db)
    other = [c for c in ResultStore(db).config_hashes() if c != cfg][0]
    got = prune_store(db, keep_manifest=keep, orphans=True, config_hash=other)
    assert got.clips == {other: ["c5", "c6", "c7"]} and list(got.orphans) == [other]
    assert len(got.orphans[other]) == 3  # the other config's results of c5..c7 only
    assert len(load_results(db, config_hash=cfg)) == 8  # the first config is untouched
    assert _counts(db) == (13, 16)


def test_orphans_alone_keep_every_referenced_result(tmp_path):
    """Two clip ids with the same bytes share a result: deleting one clip row leaves it
    referenced; only the old renders go."""
    rows = write_clips(tmp_path / "clips", 3)
    twin = tmp_path / "clips" / "twin.mp4"
    twin.write_bytes(Path(rows[0]["path"]).read_bytes())
    rows.append({**rows[0], "clip_id": "twin", "path": str(twin)})
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = str(tmp_path / "r.sqlite")
    run_manifest(m, db, score_fn=CountingScorer(), progress=False)
    Path(rows[1]["path"]).write_bytes(b"new render")
    run_manifest(m, db, score_fn=CountingScorer(), progress=False)
    assert _counts(db) == (4, 4)
    got = prune_store(db, keep_manifest=write_jsonl(tmp_path / "k.jsonl", rows[1:]),
                      orphans=True)
    assert got.counts()["clips"] == 1 and got.counts()["orphans"] == 1  # c1's old render
    assert _counts(db) == (3, 3)
    assert sorted(r["clip_id"] for r in load_results(db)) == ["c1", "c2", "twin"]


def test_keep_manifest_reads_ids_as_the_runner_does(tmp_path):
    """A manifest without clip ids: the ids derived from the paths (a/x, b/x, c/y) are the
    stored ones, so the same manifest prunes nothing. A shorter manifest prunes the rows of the
    clips it left out, never the row of a clip it keeps whose derived id changed (a/x is x
    now: the next bench run re-links it, without scoring it again)."""
    rows = []
    for folder, name in (("a", "x"), ("b", "x"), ("c", "y")):
        p = tmp_path / folder / f"{name}.mp4"
        p.parent.mkdir()
        p.write_bytes(folder.encode())
        rows.append({"path": str(p), "generator": folder})
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = str(tmp_path / "r.sqlite")
    run_manifest(m, db, score_fn=CountingScorer(), progress=False)
    assert sorted(r["clip_id"] for r in load_results(db)) == ["a/x", "b/x", "y"]
    assert prune_store(db, keep_manifest=m, orphans=True).counts()["clips"] == 0
    short = write_jsonl(tmp_path / "k.jsonl", [rows[0], rows[2]])
    got = prune_store(db, keep_manifest=short, orphans=True)
    assert list(got.clips.values()) == [["b/x"]] and got.counts()["orphans"] == 1
    again = CountingScorer()
    s = run_manifest(short, db, score_fn=again, progress=False)
    assert again.calls == [] and (s.skipped, s.linked) == (1, 1)
    assert sorted(r["clip_id"] for r in load_results(db)) == ["x", "y"]


def test_vacuum_shrinks_a_sqlite_store(tmp_path):
    db = str(tmp_path / "r.sqlite")
    rows = write_clips(tmp_path / "clips", 60)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    run_manifest(m, db, score_fn=CountingScorer(), progress=False)
    got = prune_store(db, keep_manifest=write_jsonl(tmp_path / "k.jsonl", rows[:2]),
                      orphans=True, vacuum_store=True)
    assert got.vacuumed and got.counts()["orphans"] == 58
    assert got.size_after < got.size_before / 3
    assert got.size_after == Path(db).stat().st_size  # the WAL was checkpointed and truncated
    assert len(load_results(db)) == 2


def test_cli_dry_run_prints_counts_per_kind_and_deletes_nothing(tmp_path, capsys):
    db = str(tmp_path / "r.sqlite")
    _, keep, cfg = _leaderboard(tmp_path, db)
    rc = main(["prune", "--db", db, "--keep-manifest", str(keep), "--orphans", "--stale-jobs",
               "--vacuum", "--dry-run", "--config-hash", cfg])
    out = capsys.readouterr().out
    assert rc == 0 and _counts(db) == (16, 19)
    assert "(dry run: nothing deleted)" in out
    assert f"clip rows not in {keep}: 3 would be deleted (config {cfg}: 3)" in out
    assert f"    clip c5 (config {cfg})" in out
    assert "orphaned results (no clip row points at them): 6 would be deleted" in out
    assert "vacuum: would run VACUUM" in out and "SQLite store has no work queue" in out
    assert main(["prune", "--db", db, "--keep-manifest", str(keep), "--orphans"]) == 0
    out = capsys.readouterr().out
    assert "6 deleted" in out and "9 deleted" in out and "    clip" not in out
    assert _counts(db) == (10, 10)


def test_cli_refuses_what_it_must_not_change(tmp_path, capsys, monkeypatch):
    missing = tmp_path / "none.sqlite"
    assert main(["prune", "--db", str(missing), "--orphans"]) == 2
    assert "store not found" in capsys.readouterr().err and not missing.exists()
    other = tmp_path / "other.sqlite"  # an unrelated SQLite file gets no geocon tables
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (x TEXT)")
    assert main(["prune", "--db", str(other), "--orphans"]) == 2
    assert "not a geocon result store" in capsys.readouterr().err
    with sqlite3.connect(other) as conn:
        assert [r[0] for r in conn.execute("SELECT name FROM sqlite_master")] == ["notes"]
    text = write_jsonl(tmp_path / "r.jsonl", [{"clip": "c0"}])
    assert main(["prune", "--db", str(text), "--orphans"]) == 2
    assert "not a SQLite file" in capsys.readouterr().err
    db = str(tmp_path / "r.sqlite")
    run_manifest(write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "c", 1)), db,
                 score_fn=CountingScorer(), progress=False)
    assert main(["prune", "--db", db]) == 2
    assert "nothing to prune" in capsys.readouterr().err
    # root ignores chmod: the store's folder counts as read-only here
    monkeypatch.setattr(prune_mod, "_writable", lambda p: Path(p) != tmp_path)
    assert main(["prune", "--db", db, "--orphans"]) == 2
    assert f"its folder {tmp_path} is read-only" in capsys.readouterr().err
    with pytest.raises(StoreError, match="read-only"):
        prune_store(db, orphans=True)


def test_help_has_examples_and_every_option(capsys):
    with pytest.raises(SystemExit):
        main(["prune", "--help"])
    text = capsys.readouterr().out
    assert "Examples:" in text and "geocon prune --db results.sqlite" in text
    for opt in ("--db", "--config-hash", "--keep-manifest", "--orphans", "--stale-jobs",
                "--vacuum", "--dry-run", "--store-timeout"):
        assert opt in text


# --- PostgreSQL: crashed jobs of any config --------------------------------------------------
def _jobs(url, table="work"):
    with ResultStore(url) as s:
        return sorted(r[0] for r in s.select(f"SELECT DISTINCT job FROM {table}"))


def _crashed(store, job, config, ids, lease_s=0.3):
    """A job that enqueued ``ids``, claimed one and died."""
    q = WorkQueue(store, job, config, job.upper(), lease_s=lease_s)
    q.enqueue(ids)
    assert q.claim() == ids[0]
    return q


def test_stale_jobs_of_every_config_go_live_ones_stay(tmp_path, pg_url, capsys):
    with ResultStore(pg_url) as st:
        _crashed(st, "dead-a", "cfgA", [f"c{i}" for i in range(200)])
        _crashed(st, "dead-b", "cfgB", ["x", "y"])
        _crashed(st, "live", "cfgA", ["z"], lease_s=60)  # alive: heartbeat renewed
        time.sleep(0.6)  # the 0.3 s heartbeats and leases run out
        assert main(["prune", "--db", pg_url, "--stale-jobs", "--dry-run"]) == 0
        out = capsys.readouterr().out
        assert "crashed jobs: 2 job(s) with 202 work row(s) would be deleted" in out
        assert "job dead-a (config cfgA): 200 work row(s)" in out
        assert _jobs(pg_url) == ["dead-a", "dead-b", "live"]
        got = prune_store(pg_url, stale=True, config_hash=None)
        assert got.jobs == [("dead-a", "cfgA", 200), ("dead-b", "cfgB", 2)]
        assert _jobs(pg_url) == ["live"] and _jobs(pg_url, "work_jobs") == ["live"]


def test_a_new_job_drops_crashed_jobs_of_other_configs(tmp_path, pg_url):
    """Before, rank 0 dropped only its own config's crashed jobs: a config nobody ran again
    kept its work rows forever."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    with ResultStore(pg_url) as st:
        _crashed(st, "dead", "another-config", [f"c{i}" for i in range(20)])
        _crashed(st, "live", "another-config", ["z"], lease_s=60)
        time.sleep(0.6)
        s = run_manifest(m, pg_url, score_fn=CountingScorer(), progress=False)
        assert s.assign == "dynamic" and s.computed == 2
        assert _jobs(pg_url) == ["live"] and _jobs(pg_url, "work_jobs") == ["live"]
        assert drop_stale_jobs(st, "another-config", "x") == 0


def test_prune_and_vacuum_on_postgresql(tmp_path, pg_url, capsys):
    rows, keep, cfg = _leaderboard(tmp_path, pg_url)
    assert main(["prune", "--db", pg_url, "--keep-manifest", str(keep), "--orphans",
                 "--vacuum", "--config-hash", cfg]) == 0
    out = capsys.readouterr().out
    assert "3 deleted" in out and "6 deleted" in out and "vacuum:" in out
    assert _counts(pg_url) == (13, 13)


def test_an_interrupted_prune_keeps_what_it_deleted_and_says_so(tmp_path, capsys,
                                                                monkeypatch):
    db = str(tmp_path / "r.sqlite")
    _, keep, _ = _leaderboard(tmp_path, db)

    def stop(store):
        raise KeyboardInterrupt

    monkeypatch.setattr(prune_mod, "vacuum", stop)  # Ctrl-C after the deletes, in VACUUM
    rc = main(["prune", "--db", db, "--keep-manifest", str(keep), "--orphans", "--vacuum"])
    assert rc == 130 and _counts(db) == (10, 10)
    assert capsys.readouterr().err.strip() == (
        "geocon prune: interrupted; the rows deleted so far stay deleted (each chunk is one "
        "transaction): run the same command again to finish")
