"""Runner: resume without recomputing, errors recorded, kill -9 mid-run, torchrun sharding."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from helpers import CountingScorer, _torchrun, bad_rows_manifest, write_clips, write_jsonl

from geocon_torch.bench import ResultStore, load_manifest, run_manifest
from geocon_torch.config import GeoConConfig
from geocon_torch.io import content_hash
from geocon_torch.io.hashing import input_digest
from geocon_torch.pipeline import pinned_config

TESTS = Path(__file__).resolve().parents[1]  # tests/ (bench_worker.py, helpers.py)


def _manifest(tmp_path: Path, n: int) -> Path:
    return write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))


def _table(db: Path):
    """Store content without wall-clock fields: what must be identical across runs."""
    with ResultStore(db) as s:
        rows = s.rows()
    for r in rows:
        r["result"].pop("timing_s", None)
    return rows


def test_run_resume_and_error_rows(tmp_path: Path):
    m = _manifest(tmp_path, 8)
    db = tmp_path / "r.sqlite"
    scorer = CountingScorer(fail_on={"c3"})
    s = run_manifest(m, db, score_fn=scorer, progress=False)
    assert scorer.calls == [f"c{i}" for i in range(8)]
    assert (s.total, s.computed, s.ok, s.error, s.skipped) == (8, 8, 7, 1, 0)
    rows = {r["clip_id"]: r for r in _table(db)}
    assert len(rows) == 8
    assert rows["c3"]["status"] == "error" and "RuntimeError: boom on c3" in rows["c3"]["reason"]
    assert rows["c3"]["result"]["config_hash"] == pinned_config(GeoConConfig()).config_hash()
    assert rows["c2"]["prompt_category"] == "C3"
    assert rows["c2"]["result"]["prompt_category"] == "C3"
    again = CountingScorer()
    s2 = run_manifest(m, db, score_fn=again, progress=False)
    assert again.calls == [] and s2.skipped == 8 and s2.computed == 0
    # metadata edited in the manifest (a generator renamed): nothing re-scored, rows updated
    rows_m = [json.loads(line) for line in m.read_text().splitlines()]
    for row in rows_m:
        row["generator"] = row["generator"] + "_v2"
    m.write_text("".join(json.dumps(r) + "\n" for r in rows_m))
    s2 = run_manifest(m, db, score_fn=again, progress=False)
    assert again.calls == [] and s2.skipped == 8
    assert {r["generator"] for r in _table(db)} == {r["generator"] for r in rows_m}
    # retry_errors recomputes exactly the error row, which now succeeds
    s3 = run_manifest(m, db, score_fn=again, progress=False, retry_errors=True)
    assert again.calls == ["c3"] and s3.ok == 1
    assert {r["clip_id"]: r["status"] for r in _table(db)}["c3"] == "ok"
    # another config is another key: everything is scored again, old rows stay
    other = CountingScorer()
    run_manifest(m, db, score_fn=other, progress=False, config={"background": {"tau_h": 3.0}})
    assert len(other.calls) == 8
    with ResultStore(db) as st:
        assert st.count() == 16 and len(st.config_hashes()) == 2


def test_missing_file_and_duplicate_bytes(tmp_path: Path):
    m = bad_rows_manifest(tmp_path, 3)
    db = tmp_path / "r.sqlite"
    scorer = CountingScorer()
    s = run_manifest(m, db, score_fn=scorer, progress=False)
    assert scorer.calls == ["c0", "c1", "c2"]  # missing file never reaches the scorer
    assert s.error == 1 and s.linked == 1 and s.computed == 4
    table = {r["clip_id"]: r for r in _table(db)}
    assert table["gone"]["status"] == "error" and "nope.mp4" in table["gone"]["reason"]
    assert table["gone"]["content_hash"].startswith("unreadable:")
    assert table["dup"]["content_hash"] == table["c0"]["content_hash"]
    assert table["dup"]["generator"] == "m2" and table["dup"]["result"]["clip"] == "c0"
    again = CountingScorer()
    s2 = run_manifest(m, db, score_fn=again, progress=False)
    assert again.calls == [] and s2.skipped == 5
    # the file appears: it is scored under its real hash
    (tmp_path / "clips" / "nope.mp4").write_bytes(b"now here")
    run_manifest(m, db, score_fn=again, progress=False)
    assert again.calls == ["gone"]
    assert {r["clip_id"]: r["status"] for r in _table(db)}["gone"] == "ok"


def test_resume_rescores_a_clip_whose_masks_or_poses_changed(tmp_path: Path):
    """The store key of a clip with side inputs is its video's hash plus theirs: a manifest
    that now gives other or new masks / poses rescores that clip (they change its numbers);
    a clip without them keeps the plain content hash (stores written before stay valid)."""
    rows = write_clips(tmp_path / "clips", 3)
    masks = tmp_path / "masks0"
    (masks / "obj1").mkdir(parents=True)
    (masks / "obj1" / "0.png").write_bytes(b"mask frame 0")
    rows[0]["masks_path"] = str(masks)
    rows.append({**rows[1], "clip_id": "c1_masked", "masks_path": str(masks)})  # same video
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = tmp_path / "r.sqlite"
    first = CountingScorer()
    run_manifest(m, db, score_fn=first, progress=False)
    assert first.calls == ["c0", "c1", "c2", "c1_masked"]  # other masks: not linked to c1
    table = {r["clip_id"]: r["content_hash"] for r in _table(db)}
    digest = input_digest(masks)[:32]
    assert table["c0"] == f"{content_hash(rows[0]['path'])}+masks:{digest}"
    assert table["c1"] == content_hash(rows[1]["path"]) and "+" not in table["c2"]
    assert table["c1_masked"] == f"{table['c1']}+masks:{digest}"
    again = CountingScorer()
    run_manifest(m, db, score_fn=again, progress=False)
    assert again.calls == []
    (masks / "obj1" / "0.png").write_bytes(b"mask frame 0, edited")  # other masks, same path
    run_manifest(m, db, score_fn=again, progress=False)
    assert again.calls == ["c0", "c1_masked"]
    poses = tmp_path / "poses2.json"
    poses.write_text("[]")
    rows[2]["poses_path"] = str(poses)  # poses given where there were none
    write_jsonl(m, rows)
    run_manifest(m, db, score_fn=again, progress=False)
    assert again.calls == ["c0", "c1_masked", "c2"]
    assert {r["clip_id"]: r["content_hash"] for r in _table(db)}["c2"].endswith(
        "+poses:" + input_digest(poses)[:32])
    assert input_digest(tmp_path / "nowhere") == "missing"


def test_invalid_result_from_scorer_is_an_error_row(tmp_path: Path):
    m = _manifest(tmp_path, 2)

    def scorer(entry, config, device):
        out = CountingScorer()(entry, config, device)
        if entry.clip_id == "c1":
            out["background"]["ge_px"] = float("nan")
        return out

    s = run_manifest(m, tmp_path / "r.sqlite", score_fn=scorer, progress=False)
    assert s.ok == 1 and s.error == 1
    row = {r["clip_id"]: r for r in _table(tmp_path / "r.sqlite")}["c1"]
    assert "non-finite numbers at background.ge_px" in row["reason"]


_KILL_SCRIPT = """
import sys
sys.path.insert(0, {tests!r})
from helpers import CountingScorer
from geocon_torch.bench import run_manifest
run_manifest({m!r}, {db!r}, score_fn=CountingScorer({log!r}, sleep_s=0.25), progress=False)
"""


def test_kill_9_mid_run_resumes_without_recompute_or_duplicates(tmp_path: Path):
    n = 12
    m = _manifest(tmp_path, n)
    db, log = tmp_path / "r.sqlite", tmp_path / "calls.log"
    script = _KILL_SCRIPT.format(tests=str(TESTS), m=str(m), db=str(db), log=str(log))
    proc = subprocess.Popen([sys.executable, "-c", script])
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if log.exists() and len(log.read_text().split()) >= 5:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    with ResultStore(db) as s:
        committed = s.count()
    calls_before = log.read_text().split()
    assert 3 <= committed < n and committed <= len(calls_before) <= committed + 1
    scorer = CountingScorer()
    s = run_manifest(m, db, score_fn=scorer, progress=False)
    assert len(scorer.calls) == n - committed and s.skipped == committed
    assert scorer.calls == [f"c{i}" for i in range(committed, n)]
    table = _table(db)
    assert sorted(r["clip_id"] for r in table) == sorted(f"c{i}" for i in range(n))
    third = CountingScorer()
    run_manifest(m, db, score_fn=third, progress=False)
    assert third.calls == []


_RANK_SCRIPT = """
import os, sys
sys.path.insert(0, {tests!r})
from helpers import CountingScorer
from geocon_torch.bench import run_manifest
rank = os.environ["RANK"]
s = run_manifest({m!r}, {db!r}, score_fn=CountingScorer({log!r} + rank), progress=False)
if rank == "0":
    print("SUMMARY", s.total, s.computed, s.world_size, flush=True)
"""




def test_torchrun_two_gloo_ranks_same_table_as_one_rank(tmp_path: Path):
    n = 7
    m = _manifest(tmp_path, n)
    single = tmp_path / "one.sqlite"
    run_manifest(m, single, score_fn=CountingScorer(), progress=False)
    db, log = tmp_path / "two.sqlite", tmp_path / "rank"
    script = tmp_path / "worker.py"
    script.write_text(_RANK_SCRIPT.format(tests=str(TESTS), m=str(m), db=str(db), log=str(log)))
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK")}
    env["OMP_NUM_THREADS"] = "1"
    proc = subprocess.Popen([_torchrun(), "--standalone", "--nproc_per_node", "2", str(script)],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=180)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # torchrun and its workers
        stdout, stderr = proc.communicate()
    assert proc.returncode == 0, stderr[-3000:]
    assert "SUMMARY 7 7 2" in stdout
    calls0 = (tmp_path / "rank0").read_text().split()
    calls1 = (tmp_path / "rank1").read_text().split()
    ids = [e.clip_id for e in load_manifest(m)]
    assert calls0 == ids[0::2] and calls1 == ids[1::2]

    def strip(rows):
        return [{k: v for k, v in r.items() if k != "path"} for r in rows]

    assert json.dumps(strip(_table(db)), sort_keys=True) == \
        json.dumps(strip(_table(single)), sort_keys=True)


def test_resume_after_derived_ids_change_keeps_one_row_per_file(tmp_path: Path):
    """Without clip_id columns ids are derived from paths; a new row with the same file name
    in another folder turns "c0" into "a/c0". The resumed run keeps one clip row per file
    (the old id used to stay beside the new one: the report counted the file twice)."""
    rows = write_clips(tmp_path / "a", 2)
    for r in rows:
        del r["clip_id"]
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = tmp_path / "r.sqlite"
    run_manifest(m, db, score_fn=CountingScorer(), progress=False)
    assert sorted(r["clip_id"] for r in _table(db)) == ["c0", "c1"]
    other = write_clips(tmp_path / "b", 1)[0]
    del other["clip_id"]
    Path(other["path"]).write_bytes(b"another fake video")  # same name, other bytes
    write_jsonl(m, rows + [other])
    again = CountingScorer()
    run_manifest(m, db, score_fn=again, progress=False)
    assert again.calls == ["b/c0"]  # only the new file is scored
    assert sorted(r["clip_id"] for r in _table(db)) == ["a/c0", "b/c0", "c1"]
