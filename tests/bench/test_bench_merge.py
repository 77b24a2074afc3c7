"""geocon merge: per-node stores into one, deduplicated by key, conflicts reported with both
values and never overwritten, idempotent; into SQLite and into PostgreSQL."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import CountingScorer, fake_result, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, load_results, merge_stores, run_manifest
from geocon_torch.bench.merge import differences
from geocon_torch.cli import main
from geocon_torch.errors import InputError


def _nodes(tmp_path: Path, n: int = 9, nodes: int = 3):
    """One manifest scored by ``nodes`` jobs, node k taking clips k::nodes (+ an overlap:
    clip c0 scored on every node), each into its own SQLite file; and the one-file run."""
    rows = write_clips(tmp_path / "clips", n)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    shards = []
    for k in range(nodes):
        part = [r for i, r in enumerate(rows) if i % nodes == k or i == 0]
        shard = tmp_path / f"node{k}.sqlite"
        run_manifest(write_jsonl(tmp_path / f"m{k}.jsonl", part), shard,
                     score_fn=CountingScorer(), progress=False)
        shards.append(shard)
    one = tmp_path / "one.sqlite"
    run_manifest(m, one, score_fn=CountingScorer(), progress=False)
    return shards, one


def _table(db):
    with ResultStore(db) as s:
        rows = s.rows()
    for r in rows:
        r["result"].pop("timing_s", None)
    return json.dumps(rows, sort_keys=True, default=str)


@pytest.fixture(params=["sqlite", "postgresql"])
def out_db(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "merged.sqlite")
    return request.getfixturevalue("pg_url")


def test_merge_equals_one_run_and_is_idempotent(tmp_path: Path, out_db: str):
    shards, one = _nodes(tmp_path)
    rep = merge_stores(out_db, shards)
    assert (rep.results_added, rep.results_same, rep.clips_added, rep.clips_same) == (9, 2, 9, 2)
    assert rep.conflicts == []
    assert _table(out_db) == _table(one)
    again = merge_stores(out_db, shards)
    assert (again.results_added, again.clips_added, again.results_same) == (0, 0, 11)
    assert _table(out_db) == _table(one)


def test_conflicting_results_are_reported_with_both_values_and_kept(tmp_path: Path, out_db):
    a, b = tmp_path / "a.sqlite", tmp_path / "b.sqlite"
    with ResultStore(a) as s:
        s.put({"clip_id": "x", "generator": "m"}, "h1", "cfg", fake_result("x", ir=0.91))
        s.put({"clip_id": "y", "generator": "m"}, "h2", "cfg", fake_result("y"))
    with ResultStore(b) as s:
        res = fake_result("x-elsewhere", ir=0.93, path="/mnt/other/x.mp4")
        res["timing_s"] = {"total": 9.0}
        s.put({"clip_id": "x", "generator": "m"}, "h1", "cfg", res)
        # same bytes, same result, other clip id, path and timing: not a conflict
        same = fake_result("y-copy", path="/elsewhere/y.mp4")
        same["timing_s"] = {"total": 3.0}
        s.put({"clip_id": "y2", "generator": "m"}, "h2", "cfg", same)
        s.put({"clip_id": "y", "generator": "m"}, "h3", "cfg", fake_result("y"))  # other bytes
    rep = merge_stores(out_db, [a, b])
    assert len(rep.conflicts) == 2
    res_c = next(c for c in rep.conflicts if c["table"] == "results")
    assert (res_c["content_hash"], res_c["config_hash"]) == ("h1", "cfg")
    assert res_c["differences"]["background.ir"] == [0.91, 0.93]
    assert res_c["kept_from"] == rep.out and res_c["other_from"] == str(b)
    clip_c = next(c for c in rep.conflicts if c["table"] == "clips")
    assert clip_c["clip_id"] == "y" and clip_c["differences"] == {"content_hash": ["h2", "h3"]}
    with ResultStore(out_db) as s:
        rows = {r["clip_id"]: r for r in s.rows()}
    assert rows["x"]["result"]["background"]["ir"] == 0.91  # not overwritten
    assert rows["y"]["content_hash"] == "h2" and rows["y2"]["content_hash"] == "h2"
    assert merge_stores(out_db, [a, b]).conflicts == rep.conflicts  # the same, again


def test_differences_lists_missing_fields_and_ignores_volatile_ones():
    a = fake_result("a", ir=0.5)
    b = fake_result("b", ir=0.5, path="/x")
    b["timing_s"] = {"total": 5}
    assert differences(json.dumps(a), json.dumps(b)) == {}
    b["background"]["extra"] = 1
    assert differences(json.dumps(a), json.dumps(b)) == {"background.extra": [{"absent": True}, 1]}


def test_merge_cli_exit_status_and_errors(tmp_path: Path, capsys):
    shards, _ = _nodes(tmp_path, n=4, nodes=2)
    out = tmp_path / "m.sqlite"
    assert main(["merge", str(out), *map(str, shards)]) == 0
    assert "results 4 added, 1 already there" in capsys.readouterr().out
    with ResultStore(shards[1]) as s:  # node 1 now disagrees about clip c1
        key = next(r for r in s.rows() if r["clip_id"] == "c1")["content_hash"]
        s.put({"clip_id": "c1", "generator": "m"}, key, s.config_hashes()[0],
              fake_result("c1", ir=0.5, config_hash=s.config_hashes()[0]), replace=True)
    bad = tmp_path / "node_bad.sqlite"
    bad.write_bytes(Path(shards[1]).read_bytes())
    rc = main(["merge", str(out), str(bad), "--conflicts", str(tmp_path / "c.jsonl")])
    captured = capsys.readouterr()
    assert rc == 1 and "1 conflict(s)" in captured.out
    assert "background.ir" in captured.err and "vs 0.5" in captured.err
    assert json.loads((tmp_path / "c.jsonl").read_text())["differences"]["background.ir"][1] \
        == 0.5
    with pytest.raises(InputError, match="also listed as a shard"):
        merge_stores(out, [out])
    assert main(["merge", str(out), str(tmp_path / "missing.sqlite")]) == 2
    assert "shard not found" in capsys.readouterr().err


def _merge(capsys, out, *shards) -> tuple:
    """(exit status, stdout) of ``geocon merge OUT SHARD...``."""
    rc = main(["merge", str(out), *map(str, shards)])
    return rc, capsys.readouterr().out


def test_a_manifest_fix_on_a_node_reaches_out_newest_row_wins(tmp_path: Path, out_db, capsys):
    rows = write_clips(tmp_path / "clips", 2)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    shard, old = tmp_path / "node0.sqlite", tmp_path / "old.sqlite"
    run_manifest(m, shard, score_fn=CountingScorer(), progress=False)
    old.write_bytes(shard.read_bytes())  # the shard before the fix
    assert _merge(capsys, out_db, shard)[0] == 0
    rows[1].update(generator="sora", category="C5")  # the manifest is corrected, re-run
    s = run_manifest(write_jsonl(m, rows), shard, score_fn=CountingScorer(), progress=False)
    assert s.computed == 0 and s.skipped == 2
    rc, out = _merge(capsys, out_db, shard)
    assert rc == 0 and "1 updated from newer rows" in out and "0 conflict(s)" in out
    assert 'clip c1' in out and 'generator: "m" -> "sora"' in out
    got = {r["clip_id"]: r for r in load_results(out_db)}
    assert (got["c1"]["generator"], got["c1"]["prompt_category"]) == ("sora", "C5")
    assert got["c0"]["generator"] == "m"
    again = merge_stores(out_db, [shard])  # idempotent
    assert (again.clips_same, again.clips_updated, again.updates) == (2, 0, [])
    stale = merge_stores(out_db, [old])  # an older row never undoes the fix
    assert (stale.clips_older, stale.clips_same, stale.conflicts) == (1, 1, [])
    assert {r["clip_id"]: r["generator"] for r in load_results(out_db)}["c1"] == "sora"
    tie = tmp_path / "tie.sqlite"  # the same write time, other metadata: a conflict
    tie.write_bytes(shard.read_bytes())
    with ResultStore(tie) as st:
        row = next(c for c in st.raw_clips() if c["clip_id"] == "c1")
        st.insert_raw([], [{**row, "generator": "veo"}], replace=True)
    rep = merge_stores(out_db, [tie])
    assert [(c["clip_id"], c["differences"]["generator"]) for c in rep.conflicts] == \
        [("c1", ["sora", "veo"])]
    assert {r["clip_id"]: r["generator"] for r in load_results(out_db)}["c1"] == "sora"


def _statuses(db) -> dict:
    return {r["clip_id"]: r["status"] for r in load_results(db)}


def test_a_retried_error_row_reaches_out(tmp_path: Path, out_db, capsys):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 3))
    shard, failed = tmp_path / "node0.sqlite", tmp_path / "failed.sqlite"
    run_manifest(m, shard, score_fn=CountingScorer(fail_on=["c1"]), progress=False)
    failed.write_bytes(shard.read_bytes())
    assert _merge(capsys, out_db, shard)[0] == 0
    s = run_manifest(m, shard, score_fn=CountingScorer(), retry_errors=True, progress=False)
    assert (s.computed, s.ok) == (1, 1)
    rc, out = _merge(capsys, out_db, shard)
    assert rc == 0 and "1 error row(s) replaced by a scored result" in out
    assert 'status: "error" -> "ok"' in out and "0 conflict(s)" in out
    assert _statuses(out_db) == {"c0": "ok", "c1": "ok", "c2": "ok"}
    rep = merge_stores(out_db, [failed])  # a stale error row never replaces the result
    assert (rep.results_errors_skipped, rep.results_same, rep.conflicts) == (1, 2, [])
    assert _statuses(out_db)["c1"] == "ok"
    fresh = tmp_path / "fresh.sqlite"  # the other order: the error first, then the fix
    rep = merge_stores(fresh, [failed, shard])
    assert (rep.results_added, rep.results_replaced, rep.conflicts) == (3, 1, [])
    assert _statuses(fresh)["c1"] == "ok"
