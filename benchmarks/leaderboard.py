"""Leaderboard throughput: rows/s for 1 and 2 ranks on one node and 2 local "nodes", on a
PostgreSQL store vs SQLite, static r::N vs dynamic claims, on grounded clips of uneven length.

    python benchmarks/leaderboard.py                       # 16 clips, real scoring
    python benchmarks/leaderboard.py --clips 24 --scorer sleep --unit-s 0.05

The manifest holds ``--clips`` grounded clips (geocon_torch.synth, C1-C3 scenes, ``--size``);
every 4th clip has 4x the frames (``--long`` vs ``--short``). With static r::2 those long
clips all land on rank 0 (the way a manifest sorted by generator aliases when one generator
makes long clips), so rank 1 idles while rank 0 finishes; dynamic claims give the next clip to
whichever rank is free. ``--scorer sleep`` replaces the pipeline by a sleep of ``unit_s`` per
frame (the same schedule, no CPU noise from other jobs on the machine).

Cases (each from an empty store; a throw-away PostgreSQL server from Debian's postgresql
package, as the tests start it):

* 1 rank: SQLite, PostgreSQL;
* 2 ranks on one node (``torchrun --standalone --nproc_per_node 2``): SQLite static,
  PostgreSQL static, PostgreSQL dynamic;
* 2 local nodes: PostgreSQL dynamic (two torchrun agents, ``--nnodes 2``, c10d rendezvous on
  127.0.0.1), and SQLite: one job per node into its own file (r::2 halves) + ``geocon merge``.

Per case: makespan (wall clock from the first rank's first clip to the last rank's end, torch
start-up excluded; plus the merge for per-node SQLite), rows/s = clips / makespan, and the idle
fraction ``1 - sum(busy) / (ranks * makespan)``: the share of rank-time spent idle while the
slowest rank finishes. RESULT line:
dynamic makespan / static makespan on PostgreSQL, 2 ranks (target <= 0.8).
"""
from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

CONFIG = {"preset": "background", "io": {"long_side": 128}}
CATEGORIES = ("C1", "C2", "C3")


def make_manifest(folder: Path, n: int, short: int, long: int, size) -> Path:
    """n mp4 clips (every 4th one with ``long`` frames, the others ``short``) + manifest."""
    from geocon_torch.bench import write_manifest
    from geocon_torch.io import write_video
    from geocon_torch.synth import render_scene
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        frames = long if i % 4 == 0 else short
        clip = render_scene(CATEGORIES[i % 3], num_frames=frames, size=size, seed=i)
        path = write_video(folder / f"clip{i:03d}.mp4", clip.frames)
        rows.append({"clip_id": f"clip{i:03d}", "path": str(path), "generator": f"m{i % 2}",
                     "category": CATEGORIES[i % 3], "seed": i, "frames": frames})
    return write_manifest(folder / "manifest.jsonl", rows)


def sleep_scorer(unit_s: float):
    from helpers import CountingScorer
    base = CountingScorer()

    def score(entry, config, device):
        time.sleep(unit_s * float(entry.extra.get("frames", 1)))
        return base(entry, config, device)
    return score


def worker(args) -> None:
    """One rank (under torchrun or alone): score the manifest, print rank 0's summary."""
    import torch
    from geocon_torch.bench import run_manifest
    torch.set_num_threads(1)
    score_fn = sleep_scorer(args.unit_s) if args.scorer == "sleep" else None
    s = run_manifest(args.manifest, args.db, config=CONFIG, assign=args.assign, progress=False,
                     score_fn=score_fn, lease_s=30, batch_clips=args.batch_clips)
    if s.rank == 0:
        print("SUMMARY " + json.dumps(s.to_dict()), flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")}
    env.update(OMP_NUM_THREADS="1", PYTHONPATH=str(ROOT))
    return env


def _worker_cmd(a, manifest: Path, db: str, assign: str) -> List[str]:
    return [__file__, "--worker", "--manifest", str(manifest), "--db", db, "--assign", assign,
            "--scorer", a.scorer, "--unit-s", str(a.unit_s), "--batch-clips", str(a.batch_clips)]


def _summaries(procs) -> List[dict]:
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=3600)
        if p.returncode != 0:
            raise SystemExit(f"worker failed ({p.returncode}):\n{stderr[-3000:]}")
        out += [json.loads(line[8:]) for line in stdout.splitlines()
                if line.startswith("SUMMARY ")]
    return out


def _spawn(cmd: List[str]) -> subprocess.Popen:
    return subprocess.Popen(cmd, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def run_case(a, kind: str, manifest: Path, db: str, assign: str) -> Dict[str, float]:
    """kind: "1" (one process), "2x1" (two ranks, one node), "1x2" (two agents)."""
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    if kind == "1":
        procs = [_spawn([sys.executable, *_worker_cmd(a, manifest, db, assign)])]
    elif kind == "2x1":
        procs = [_spawn([torchrun, "--standalone", "--nproc_per_node", "2",
                         *_worker_cmd(a, manifest, db, assign)])]
    else:
        port = _free_port()
        procs = [_spawn([torchrun, "--nnodes", "2", "--nproc_per_node", "1", "--rdzv-backend",
                         "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "bench",
                         *_worker_cmd(a, manifest, db, assign)]) for _ in range(2)]
    s = _summaries(procs)[0]
    window = s["rank_window"]
    span = max(e for _, e in window) - min(b for b, _ in window)
    busy = s["rank_busy_s"]
    return {"makespan_s": span, "rows_s": s["total"] / span,
            "idle": 1 - sum(busy) / (len(busy) * span), "ranks": len(busy)}


def per_node_sqlite(a, manifest: Path, tmp: Path) -> Dict[str, float]:
    """Two single-process jobs (r::2 halves) into their own files, then geocon merge."""
    from geocon_torch.bench import load_manifest, merge_stores, write_manifest
    entries = load_manifest(manifest)
    halves = [write_manifest(tmp / f"half{k}.jsonl", entries[k::2]) for k in range(2)]
    procs = [_spawn([sys.executable, *_worker_cmd(a, h, str(tmp / f"node{k}.sqlite"),
                                                  "static")]) for k, h in enumerate(halves)]
    sums = _summaries(procs)
    t0 = time.monotonic()
    rep = merge_stores(tmp / "merged.sqlite", [tmp / "node0.sqlite", tmp / "node1.sqlite"])
    merge_s = time.monotonic() - t0
    assert rep.results_added == len(entries) and not rep.conflicts
    window = [w for s in sums for w in s["rank_window"]]
    span = max(e for _, e in window) - min(b for b, _ in window) + merge_s
    busy = [s["busy_s"] for s in sums]
    return {"makespan_s": span, "rows_s": len(entries) / span,
            "idle": 1 - sum(busy) / (2 * span), "ranks": 2, "merge_s": merge_s}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--manifest")
    ap.add_argument("--db")
    ap.add_argument("--assign", default="auto")
    ap.add_argument("--batch-clips", type=int, default=1,
                    help="clips a rank scores (and claims) per batch (default 1: the claim "
                         "granularity the makespan target is about)")
    ap.add_argument("--clips", type=int, default=16)
    ap.add_argument("--short", type=int, default=4, help="frames of a short clip")
    ap.add_argument("--long", type=int, default=16, help="frames of every 4th clip")
    ap.add_argument("--size", default="96x128", help="HxW of the clips")
    ap.add_argument("--scorer", choices=("real", "sleep"), default="real")
    ap.add_argument("--unit-s", type=float, default=0.05, help="sleep scorer: s per frame")
    a = ap.parse_args()
    if a.worker:
        return worker(a)
    from pg_server import PgServer, pg_bin
    tmp = Path(tempfile.mkdtemp(prefix="geocon-lb-"))
    h, w = (int(v) for v in a.size.split("x"))
    manifest = make_manifest(tmp / "clips", a.clips, a.short, a.long, (h, w))
    server = PgServer(pg_bin())
    os.environ["PGPASSFILE"] = str(server.pgpass)
    res: Dict[str, Dict[str, float]] = {}
    try:
        cases = [("1 rank, SQLite", "1", "sqlite", "static"),
                 ("1 rank, PostgreSQL", "1", "pg", "dynamic"),
                 ("2 ranks / 1 node, SQLite static", "2x1", "sqlite", "static"),
                 ("2 ranks / 1 node, PostgreSQL static", "2x1", "pg", "static"),
                 ("2 ranks / 1 node, PostgreSQL dynamic", "2x1", "pg", "dynamic"),
                 ("2 nodes, PostgreSQL dynamic", "1x2", "pg", "dynamic")]
        for i, (name, kind, store, assign) in enumerate(cases):
            db = str(tmp / f"case{i}.sqlite") if store == "sqlite" else \
                server.url(server.create_db())
            res[name] = run_case(a, kind, manifest, db, assign)
            print(f"{name:40s} {res[name]['rows_s']:7.2f} rows/s  makespan "
                  f"{res[name]['makespan_s']:6.1f} s  idle {res[name]['idle']:.2f}", flush=True)
        name = "2 nodes, per-node SQLite + geocon merge"
        res[name] = per_node_sqlite(a, manifest, tmp)
        print(f"{name:40s} {res[name]['rows_s']:7.2f} rows/s  makespan "
              f"{res[name]['makespan_s']:6.1f} s  idle {res[name]['idle']:.2f}  (merge "
              f"{res[name]['merge_s']:.2f} s)", flush=True)
    finally:
        server.close()
    st = res["2 ranks / 1 node, PostgreSQL static"]
    dy = res["2 ranks / 1 node, PostgreSQL dynamic"]
    ratio = dy["makespan_s"] / st["makespan_s"]
    result = {
        "benchmark": "leaderboard", "clips": a.clips, "scorer": a.scorer,
        "dynamic_over_static_makespan": round(ratio, 3), "target": 0.8,
        "idle_static": round(st["idle"], 3), "idle_dynamic": round(dy["idle"], 3),
        "rows_per_s": {k: round(v["rows_s"], 3) for k, v in res.items()},
        "pass": ratio <= 0.8}
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
