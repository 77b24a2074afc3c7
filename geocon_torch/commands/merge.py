"""Merge per-node result stores into one: ``geocon merge OUT SHARD [SHARD ...]``.

Examples:
  geocon merge leaderboard.sqlite node0.sqlite node1.sqlite node2.sqlite
  geocon merge postgresql://geocon@dbhost/leaderboard node*.sqlite --conflicts conflicts.jsonl

OUT and every SHARD are SQLite files or PostgreSQL URLs (OUT is created if missing). Rows are
deduplicated by (content hash, config hash) for results and (clip_id, config hash) for clip
rows. A scored result replaces an error row (a node's --retry-errors fix reaches OUT); a
scored result of the installed geocon_torch version replaces one of another version (after an
upgrade, a node's geocon bench --rescore-versions reaches OUT); a clip row with other metadata
(generator, prompt_category, seed, the manifest entry, ...) for the same bytes is replaced by
the one written last (a node's manifest fix reaches OUT); each replacement is printed with
what differs. A key that two stores hold with DIFFERENT scored results otherwise (ignoring
timing_s, path and clip), a clip id pointing at other bytes, or clip rows that differ with the
same write time (or, with --clock-skew SECONDS, written less than that far apart by the nodes'
clocks) are a conflict: OUT keeps the row it had (or the earlier shard's), and every
differing field is printed with both values (all of them with --conflicts FILE, one JSON object
per line; --conflicts - writes them to stdout, the summary then goes to stderr). A conflict
between rows of two geocon_torch versions (a shard that still holds an older version's rows)
names the store to re-score: geocon bench MANIFEST --db STORE --rescore-versions, then merge
again. Running the same merge again changes nothing. Exit
status 0, or 1 when there were conflicts; 2 for a user error (a SHARD that is not a store, OUT
among the shards, a --conflicts FILE that cannot be written or is OUT or a SHARD).
"""
from __future__ import annotations

import argparse
import json
import sys

from .._version import __version__
from ..bench import merge_stores
from ..io._atomic import atomic_output
from ._common import check_not_input, check_output_file, cli_path, non_negative_float

NAME = "merge"
HELP = "merge per-node result stores (SQLite / PostgreSQL) into one, reporting conflicts"
SHOWN = 20  # conflicts printed on stderr


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("out", metavar="OUT", type=cli_path,
                   help="the merged store: SQLite file or PostgreSQL URL")
    p.add_argument("shards", nargs="+", metavar="SHARD", type=cli_path,
                   help="stores to merge into OUT")
    p.add_argument("--clock-skew", type=non_negative_float, default=0.0, metavar="SECONDS",
                   help="clip rows with other metadata written less than SECONDS apart are a "
                        "conflict instead of the later one winning: the write times come from "
                        "each node's clock (default 0: keep the clocks synchronised)")
    p.add_argument("--conflicts", metavar="FILE", type=cli_path,
                   help="write every conflict as one JSON object per line ('-' = stdout, "
                        "the summary and updates then go to stderr)")


def _key(c: dict) -> str:
    """The row a conflict / update is about: its table, key and config."""
    key = (f"content {c['content_hash'][:16]}" if c["table"] == "results"
           else f"clip {c['clip_id']}")
    return f"({c['table']}) {key} config {c['config_hash'][:16]}"


def _line(c: dict) -> str:
    diffs = "; ".join(f"{k}: {json.dumps(a)} vs {json.dumps(b)}"
                      for k, (a, b) in c["differences"].items())
    hint = f" -- {c['hint']}" if c.get("hint") else ""
    return f"conflict {_key(c)}: kept {c['kept_from']} vs {c['other_from']}: {diffs}{hint}"


def _update_line(u: dict) -> str:
    diffs = "; ".join(f"{k}: {json.dumps(a)} -> {json.dumps(b)}"
                      for k, (a, b) in u["differences"].items())
    return f"updated {_key(u)} from {u['from']}: {diffs}"


def run(args: argparse.Namespace) -> int:
    # before OUT is changed; never onto OUT or a shard (which it would empty)
    check_not_input(args.conflicts, "--conflicts",
                    [("OUT", args.out)] + [("one of the SHARDs", s) for s in args.shards])
    check_output_file(args.conflicts, "--conflicts", allow_stdout=True)
    notes = sys.stderr if args.conflicts == "-" else sys.stdout  # stdout: the conflicts alone
    report = merge_stores(args.out, args.shards, clock_skew_s=args.clock_skew)
    print(f"geocon merge: {len(report.shards)} shard(s) into {report.out}: results "
          f"{report.results_added} added, {report.results_same} already there, "
          f"{report.results_replaced} error row(s) replaced by a scored result, "
          f"{report.results_upgraded} row(s) of other versions replaced by rows of "
          f"{__version__}, "
          f"{report.results_errors_skipped} shard error row(s) not copied; clips "
          f"{report.clips_added} added, {report.clips_same} already there, "
          f"{report.clips_updated} updated from newer rows, {report.clips_older} older "
          f"row(s) not copied; {len(report.conflicts)} conflict(s)", file=notes)
    for u in report.updates[:SHOWN]:
        print("  " + _update_line(u), file=notes)
    if len(report.updates) > SHOWN:
        print(f"  ... {len(report.updates) - SHOWN} more update(s)", file=notes)
    for c in report.conflicts[:SHOWN]:
        print("  " + _line(c), file=sys.stderr)
    if len(report.conflicts) > SHOWN:
        print(f"  ... {len(report.conflicts) - SHOWN} more (--conflicts FILE lists all)",
              file=sys.stderr)
    if args.conflicts == "-":
        sys.stdout.write("".join(json.dumps(c, sort_keys=True) + "\n"
                                 for c in report.conflicts))
    elif args.conflicts:
        with atomic_output(args.conflicts) as tmp, open(tmp, "w", encoding="utf-8") as fh:
            for c in report.conflicts:
                fh.write(json.dumps(c, sort_keys=True) + "\n")
    return 1 if report.conflicts else 0
