"""Merge per-node result stores into one: ``geocon merge OUT SHARD [SHARD ...]``.

Examples:
  geocon merge leaderboard.sqlite node0.sqlite node1.sqlite node2.sqlite
  geocon merge postgresql://geocon@dbhost/leaderboard node*.sqlite --conflicts conflicts.jsonl

OUT and every SHARD are SQLite files or PostgreSQL URLs (OUT is created if missing). Rows are
deduplicated by (content hash, config hash) for results and (clip_id, config hash) for clip
rows; a key that two stores hold with DIFFERENT results (ignoring timing_s, path and clip) is a
conflict: OUT keeps the row it had (or the earlier shard's), and every differing field is
printed with both values (all of them with --conflicts FILE, one JSON object per line). Running
the same merge again changes nothing. Exit status 0, or 1 when there were conflicts.
"""
from __future__ import annotations

import argparse
import json
import sys

from ..bench import merge_stores

NAME = "merge"
HELP = "merge per-node result stores (SQLite / PostgreSQL) into one, reporting conflicts"
SHOWN = 20  # conflicts printed on stderr


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", metavar="OUT", help="the merged store: SQLite file or PostgreSQL URL")
    p.add_argument("shards", nargs="+", metavar="SHARD", help="stores to merge into OUT")
    p.add_argument("--conflicts", metavar="FILE",
                   help="write every conflict as one JSON object per line")


def _line(c: dict) -> str:
    key = (f"content {c['content_hash'][:16]}" if c["table"] == "results"
           else f"clip {c['clip_id']}")
    diffs = "; ".join(f"{k}: {json.dumps(a)} vs {json.dumps(b)}"
                      for k, (a, b) in c["differences"].items())
    return (f"conflict ({c['table']}) {key} config {c['config_hash'][:16]}: kept "
            f"{c['kept_from']} vs {c['other_from']}: {diffs}")


def run(args: argparse.Namespace) -> int:
    report = merge_stores(args.out, args.shards)
    print(f"geocon merge: {len(report.shards)} shard(s) into {report.out}: results "
          f"{report.results_added} added, {report.results_same} already there; clips "
          f"{report.clips_added} added, {report.clips_same} already there; "
          f"{len(report.conflicts)} conflict(s)")
    for c in report.conflicts[:SHOWN]:
        print("  " + _line(c), file=sys.stderr)
    if len(report.conflicts) > SHOWN:
        print(f"  ... {len(report.conflicts) - SHOWN} more (--conflicts FILE lists all)",
              file=sys.stderr)
    if args.conflicts:
        with open(args.conflicts, "w", encoding="utf-8") as fh:
            for c in report.conflicts:
                fh.write(json.dumps(c, sort_keys=True) + "\n")
    return 1 if report.conflicts else 0
