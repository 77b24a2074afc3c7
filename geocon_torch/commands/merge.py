"""Merge per-node result stores into one: ``geocon merge OUT SHARD [SHARD ...]``.

Examples:
  geocon merge leaderboard.sqlite node0.sqlite node1.sqlite node2.sqlite
  geocon merge postgresql://geocon@dbhost/leaderboard node*.sqlite --conflicts conflicts.jsonl

OUT and every SHARD are SQLite files or PostgreSQL URLs (OUT is created if missing). Rows are
deduplicated by (content hash, config hash) for results and (clip_id, config hash) for clip
rows. A scored result replaces an error row of the same or an older version (a node's
--retry-errors fix reaches OUT); a scored result of the installed geocon_torch version
replaces one of an older version (after an upgrade, a node's geocon bench --rescore-versions
reaches OUT); a row is never replaced by one of an older version (versions in release order,
a row that records none counts as older); a clip row with other metadata (generator,
prompt_category, seed, the manifest entry, ...) for the same bytes is replaced by the one
written last (a node's manifest fix reaches OUT); each replacement is printed with what
differs. A key that two stores hold with DIFFERENT scored results otherwise (ignoring
timing_s, path, clip and the config block, which the config hash stands for), a clip id
pointing at other bytes, or clip rows that differ with the same write time (or, with
--clock-skew SECONDS, written less than that far apart by the nodes' clocks) are a conflict:
OUT keeps the row it had (or the earlier shard's). A conflict or replacement lists the
differing fields with both values, those that matter first (status, reason, score, regime,
version, the background headline, the gate, then the rest alphabetically), a field one row
lacks as absent, up to 12 per row and then "(+N more fields)" (--conflicts FILE writes every
conflict, one JSON object per line, "more_differences": N when cut; --conflicts - writes
them to stdout, the summary then goes to stderr). A conflict between rows of two
geocon_torch versions names the store to re-score (geocon bench MANIFEST --db STORE
--rescore-versions with the --preset / --config / size options of the rows' config, then
merge again), or, where one row is of a version newer than the installed one, says to
upgrade geocon_torch. Scored rows of another version that a shard adds (keys OUT lacked) are
counted in the summary, with a warning line per shard on stderr naming it and how to
re-score it (they do not change the exit status). Running the same merge again changes
nothing. Exit status 0, or 1 when there were conflicts; 2 for a user error (a SHARD that is
not a store, OUT among the shards, a --conflicts FILE that cannot be written or is OUT or a
SHARD).
"""
from __future__ import annotations

import argparse
import json
import sys

from .._version import __version__
from ..bench import merge_stores
from ..bench.merge import MergeReport, absent, other_version_notes
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


def _value(v: object) -> str:
    """A listed value as JSON, or ``absent`` for a field the row lacks (:func:`absent`)."""
    return "absent" if v == absent() else json.dumps(v)


def _diffs(c: dict, sep: str) -> str:
    """The differing fields of a conflict / update, ``(+N more fields)`` when cut."""
    text = "; ".join(f"{k}: {_value(a)}{sep}{_value(b)}" for k, (a, b) in c["differences"].items())
    more = c.get("more_differences")
    return f"{text} (+{more} more fields)" if more else text


def _line(c: dict) -> str:
    hint = f" -- {c['hint']}" if c.get("hint") else ""
    return (f"conflict {_key(c)}: kept {c['kept_from']} vs {c['other_from']}: "
            f"{_diffs(c, ' vs ')}{hint}")


def _update_line(u: dict) -> str:
    return f"updated {_key(u)} from {u['from']}: {_diffs(u, ' -> ')}"


def _others(report: MergeReport) -> dict:
    """``report.other_versions`` ({} for a report without it: a stand-in of the tests)."""
    return getattr(report, "other_versions", None) or {}


def _other_count(report: MergeReport) -> str:
    """The summary's count of added rows of other versions (empty when none)."""
    n = sum(sum(c.values()) for c in _others(report).values())
    return f"; {n} added row(s) of other geocon_torch versions (see below)" if n else ""


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
          f"row(s) not copied; {len(report.conflicts)} conflict(s)"
          f"{_other_count(report)}", file=notes)
    for u in report.updates[:SHOWN]:
        print("  " + _update_line(u), file=notes)
    if len(report.updates) > SHOWN:
        print(f"  ... {len(report.updates) - SHOWN} more update(s)", file=notes)
    for line in other_version_notes(report) if _others(report) else []:
        print("  warning: " + line, file=sys.stderr)
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
