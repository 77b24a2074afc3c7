"""Maintain a long-running result store: delete withdrawn clips, orphaned results and crashed
jobs' work rows, then VACUUM.

Examples:
  geocon prune --db results.sqlite --keep-manifest manifest.csv --orphans --dry-run
  geocon prune --db results.sqlite --keep-manifest manifest.csv --orphans --vacuum
  geocon prune --db postgresql://geocon@dbhost/leaderboard --stale-jobs --orphans --vacuum
  geocon prune --db results.sqlite --config-hash 2f85fe43ed64becd --keep-manifest m.jsonl

A store only grows. --keep-manifest M deletes the clip rows of the clips the manifest M left
out: clip id not in M (the ids as geocon bench reads them: the clip_id column, or the id
derived from the path) nor path (a listed clip whose derived id changed keeps its row: the next
bench run re-links it). These are clips or generators withdrawn from the leaderboard, which
the report, the statistics and the exports would otherwise keep ranking. Every config hash of
the store is pruned unless --config-hash H names one. The results of those clips stay (keyed
by content) until --orphans, which deletes every result no clip row points at (also the old
results of clips re-rendered under the same id, which no reader shows and geocon merge
copies). --stale-jobs (PostgreSQL) deletes the work rows and heartbeats of crashed dynamic
jobs of any config (heartbeat expired, no live lease; a live job is never touched). --vacuum
runs VACUUM (SQLite: the file shrinks; PostgreSQL: the space becomes reusable). --dry-run
prints what would go and deletes nothing.

Prune while no geocon bench job writes the store (a job reading an older manifest writes its
clip rows back). On PostgreSQL, --keep-manifest / --orphans refuse while a bench job of the
chosen config(s) is running (heartbeat or lease not expired): one line on stderr naming the
jobs, exit 2; --force prunes anyway, --dry-run lists them. On SQLite nothing tells a running
job; a write by another connection during the prune is printed as a note. Deletes run in short
transactions: an interrupted prune is finished by running it again. Exit status 0; user errors
(no kind chosen, a missing, read-only or non-geocon store, a config hash the store does not
hold, a bad manifest) are one line on stderr, exit status 2.
"""
from __future__ import annotations

import argparse
from typing import Dict, List

from ..bench.prune import PruneReport, prune_store
from ._common import cli_path, positive_float

NAME = "prune"
HELP = ("maintain a store: delete clips not in a manifest, orphaned results, crashed jobs' "
        "work rows; VACUUM")
SHOWN = 20  # keys listed per kind


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--db", required=True, metavar="FILE|URL", type=cli_path,
                   help="the store: an existing SQLite file or a PostgreSQL URL / service=NAME")
    p.add_argument("--config-hash", metavar="H",
                   help="prune only the rows (and crashed jobs) of this config hash "
                        "(default: every config of the store)")
    p.add_argument("--keep-manifest", metavar="M", type=cli_path,
                   help="delete the clip rows of clips this CSV / JSONL manifest left out "
                        "(clip id and path not in it)")
    p.add_argument("--orphans", action="store_true",
                   help="delete the results no clip row references (after --keep-manifest)")
    p.add_argument("--stale-jobs", action="store_true",
                   help="PostgreSQL: delete crashed jobs' work rows and heartbeats (expired, "
                        "no live lease)")
    p.add_argument("--vacuum", action="store_true", help="VACUUM the store at the end")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would be deleted; delete nothing")
    p.add_argument("--force", action="store_true",
                   help="PostgreSQL: delete clip rows / orphans even while a geocon bench job "
                        "of the chosen config(s) is running (refused otherwise, exit 2; "
                        "--dry-run lists the running jobs)")
    p.add_argument("--store-timeout", type=positive_float, default=120.0, metavar="S",
                   help="seconds a store operation keeps retrying a busy or unreachable store "
                        "(default 120)")


def _listing(what: str, keys: Dict[str, List[str]], dry_run: bool) -> List[str]:
    """A dry run's first :data:`SHOWN` lines ``    WHAT key (config H)`` of a kind's keys
    (none after a real run: its counts say what went)."""
    if not dry_run:
        return []
    flat = [f"    {what} {k} (config {cfg})" for cfg, ks in keys.items() for k in ks]
    more = [f"    ... {len(flat) - SHOWN} more"] if len(flat) > SHOWN else []
    return flat[:SHOWN] + more


def _per_config(keys: Dict[str, List[str]]) -> str:
    return "; ".join(f"config {cfg}: {len(ks)}" for cfg, ks in keys.items())


def _size(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"


def report_lines(report: PruneReport, args: argparse.Namespace) -> List[str]:
    """The lines ``geocon prune`` prints: one per kind asked for, with its count (per config),
    each followed by the first :data:`SHOWN` keys of the kind."""
    verb = "would be deleted" if report.dry_run else "deleted"
    counts = report.counts()
    lines = [f"geocon prune: store {report.store}"
             + (" (dry run: nothing deleted)" if report.dry_run else "")]
    if args.keep_manifest is not None:
        lines.append(f"  clip rows not in {args.keep_manifest}: {counts['clips']} {verb}"
                     + (f" ({_per_config(report.clips)})" if report.clips else ""))
        lines += _listing("clip", report.clips, report.dry_run)
    if args.orphans:
        lines.append(f"  orphaned results (no clip row points at them): {counts['orphans']} "
                     f"{verb}" + (f" ({_per_config(report.orphans)})" if report.orphans else ""))
        lines += _listing("result of content", report.orphans, report.dry_run)
    if args.stale_jobs and report.store_kind == "postgresql":
        lines.append(f"  crashed jobs: {counts['jobs']} job(s) with {counts['work_rows']} work "
                     f"row(s) {verb}")
        lines += [f"    job {job} (config {cfg}): {n} work row(s)"
                  for job, cfg, n in report.jobs[:SHOWN] if report.dry_run]
    if args.vacuum and report.size_before is not None:
        lines.append(f"  vacuum: {_size(report.size_before)} -> {_size(report.size_after)}"
                     if report.vacuumed else
                     f"  vacuum: would run VACUUM (store now {_size(report.size_before)})")
    lines += ["  " + note for note in report.notes]
    return lines


def run(args: argparse.Namespace) -> int:
    """Prune the store and print what went (or would go); return the exit status (0)."""
    report = prune_store(args.db, config_hash=args.config_hash, keep_manifest=args.keep_manifest,
                         orphans=args.orphans, stale=args.stale_jobs, vacuum_store=args.vacuum,
                         dry_run=args.dry_run, force=args.force,
                         timeout_s=args.store_timeout)
    for line in report_lines(report, args):
        print(line)
    return 0
