"""Resumable leaderboard run: score every clip of a manifest into a result store.

Examples:
  geocon bench manifest.csv --db results.sqlite
  geocon bench manifest.jsonl --db results.sqlite --config eval.json --export-csv table.csv
  torchrun --nproc_per_node 4 -m geocon_torch.cli bench manifest.csv --db results.sqlite
  torchrun --nnodes 4 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \
      -m geocon_torch.cli bench manifest.csv --db postgresql://geocon@dbhost/leaderboard
  geocon bench --db results.sqlite --export-parquet table.parquet     (export only)

Manifest (CSV with a header, or JSONL): path, generator (required: the video generator),
clip_id, prompt, generator_version, seed, resolution (WxH), fps, duration, masks_path,
poses_path, category (the prompt family C1..C6 or a free label; a prompt_category column is read
too). The retired column names model / model_version are still read (with a warning).
Relative paths are relative to the manifest. A blank clip_id is derived from the path: the
stem, or the shortest unique path suffix (cogvideox/3, sora/3); duplicated ids are an error.
User errors (bad manifest, missing file, bad option) are one line on stderr, exit status 2.
A rank scores its clips in batches of --batch-clips (default 8: one score_clips call per
batch, each clip still stored in its own transaction; the stored rows are those of 1).

Rows are keyed by (content hash of the video, config hash): a run killed at any moment resumes
without recomputing or duplicating a clip; identical files under two clip ids are scored once.
A clip that fails is stored with status "error" and its reason and the run goes on
(--retry-errors recomputes those). The config hash names the protocol, not the package version,
so rows scored by an older geocon_torch are kept after an upgrade: the summary line names the
kept rows that another version scored (e.g. "4 already stored (4 by geocon_torch 0.1.0, this
is 0.2.1: --rescore-versions re-scores them)"), and statistics, reports and preference pairs
warn about them. --rescore-versions recomputes the ok / not_applicable rows whose result
records another version than this one, in place (e.g. "1 re-scored (replaced rows of 0.1.0)");
give it the --preset / --config / size options the rows were scored with (for the rows of
geocon pairs: geocon pairs ... --rescore-versions).

--db is a SQLite file (the embedded default) or a PostgreSQL server: a postgresql:// URL or a
libpq key=value string (service=NAME, host=... dbname=... sslmode=...); the password comes
from PGPASSWORD, ~/.pgpass or the service file (a password in the URL works but is always
printed as ***); a key=value string with a key libpq does not know is an error, never a file
name. Under torchrun, on a SQLite file rank r scores clips r::N and every rank commits its own
rows to the same file (WAL, busy timeout, retried transactions; one node, local disk: a job
over several nodes is refused). On PostgreSQL ranks claim the next unscored clip with an
expiring lease (--assign dynamic, the default there; renewed while the rank lives, so a killed
rank's clips are taken by the others after --lease-s), on any number of nodes. Without a
server, run one job per node with its own file and combine them with geocon merge. Exit status
0 unless the run itself failed (error rows do not change it); 1 when it ended with clips of the
manifest that have no stored row (rows deleted while it ran, e.g. by geocon prune: the summary
line and their ids are printed, exports still written, and the same command scores exactly what
is missing); --strict returns 1 when the store holds any clip of the manifest (of the
store, when exporting only) as an error under this configuration (scored now or by an earlier
run; --retry-errors recomputes them). Without a MANIFEST (export only) --db must be an existing
store: a missing file is an error (exit 2), never a new empty store; a store in a folder this
process may not write is exported read-only, and a PostgreSQL store is always read without
creating or changing anything (a database without a geocon store is an error, exit 2; a role
with only SELECT may export). A --db database (file or server) holding another program's
tables is refused before anything is written. A connection the server refuses for good
(pg_hba.conf, CONNECT privilege, a bad password, port or sslmode) fails at once with the
server's reason; a lock another session holds (VACUUM FULL, ALTER TABLE) is waited for with a
warning per retry, up to --store-timeout. A re-run that waits for a killed run's leases says
so (one line about every --lease-s / 2). A SQLite store file deleted or replaced while the
run writes it (a cleanup job removing its folder) is an error (exit 2) naming it, at the next
commit: SQLite goes on writing the deleted file, whose rows are lost; nothing creates a new
empty store in its place.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path
from typing import List, Optional

from ..bench import ResultStore, is_server_url, load_manifest, run_manifest
from ..bench.pg_store import mask_url
from ..bench.runner import ASSIGNMENTS, IncompleteRunError, kept_versions_note
from ..bench.store import StoreError, open_readable
from ..errors import InputError
from ..pipeline import pinned_config
from ._common import (add_config_arguments, at_least, build_config, check_not_input,
                      check_output_file, cli_path, positive_float, show_progress)

NAME = "bench"
HELP = ("score a manifest into a resumable SQLite / PostgreSQL store (torchrun, multi-node), "
        "export CSV/Parquet")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("manifest", nargs="?", metavar="MANIFEST", type=cli_path,
                   help="CSV or JSONL manifest (omit to only export the store)")
    p.add_argument("--db", required=True, metavar="FILE|URL", type=cli_path,
                   help="SQLite results file (created if missing) or PostgreSQL URL / "
                        "service=NAME (password from PGPASSWORD / ~/.pgpass)")
    p.add_argument("--assign", choices=ASSIGNMENTS, default="auto",
                   help="how ranks share the manifest: static r::N (SQLite) or dynamic claims "
                        "with expiring leases (PostgreSQL); auto picks by store (default)")
    p.add_argument("--lease-s", type=positive_float, default=60.0, metavar="S",
                   help="seconds a dynamic claim survives its rank's death; a re-run after a "
                        "crash waits this long for the crashed run's clips in flight (default 60)")
    p.add_argument("--batch-clips", type=at_least(1), default=8, metavar="N",
                   help="a rank scores its next N unscored clips as one batch (score_clips), "
                        "then stores each clip in its own transaction; 1: clip by clip "
                        "(default 8; the stored rows are the same)")
    p.add_argument("--store-timeout", type=positive_float, default=120.0, metavar="S",
                   help="seconds a store operation keeps retrying a busy, locked or "
                        "unreachable store before the run fails, a finite number > 0 "
                        "(default 120; PostgreSQL: a lock wait is retried every S/4 s, at "
                        "most 30 s)")
    p.add_argument("--retry-errors", action="store_true",
                   help="recompute clips stored with status error")
    p.add_argument("--rescore-versions", action="store_true",
                   help="recompute clips whose stored ok / not_applicable row was written by "
                        "another geocon_torch version than this one (an upgrade keeps the "
                        "config hash); the row is replaced; the summary counts them by the "
                        "version they recorded")
    p.add_argument("--export-csv", metavar="OUT", type=cli_path,
                   help="after the run, write the flat table ('-' = stdout, the summary "
                        "and notes then go to stderr)")
    p.add_argument("--export-parquet", metavar="OUT", type=cli_path,
                   help="after the run, write the flat table as Parquet (needs pyarrow; a "
                        "file: binary, never '-')")
    p.add_argument("--all-configs", action="store_true",
                   help="export rows of every config hash (default: this run's config)")
    p.add_argument("--strict", action="store_true",
                   help="exit 1 if the store holds any clip of the manifest as an error "
                        "(this run's or an earlier one's)")
    p.add_argument("--confine-paths", action="store_true",
                   help="refuse a manifest whose clip, masks or poses paths lie outside its "
                        "folder (scoring manifests submitted by others)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_config_arguments(p)


def run(args: argparse.Namespace) -> int:
    """Score the manifest (if given), export the store, and return the exit status (1 under
    --strict when the store holds error rows of the manifest's clips)."""
    cfg = build_config(args)
    inputs = [("the MANIFEST", args.manifest), ("the --db store", args.db),
              ("the --config file", args.config)]  # an export never replaces one of them
    check_not_input(args.export_csv, "--export-csv", inputs)
    check_not_input(args.export_parquet, "--export-parquet",
                    inputs + [("the --export-csv file", args.export_csv)])
    # before the run, not after it; "-": the CSV to stdout (never Parquet, which is binary)
    check_output_file(args.export_csv, "--export-csv", allow_stdout=True)
    check_output_file(args.export_parquet, "--export-parquet")
    notes = sys.stderr if args.export_csv == "-" else sys.stdout  # stdout: the CSV alone
    summary, incomplete = None, None
    if args.manifest:
        try:
            summary = run_manifest(args.manifest, args.db, config=cfg, device=args.device,
                                   retry_errors=args.retry_errors,
                                   rescore_versions=args.rescore_versions,
                                   progress=show_progress(args),
                                   assign=args.assign, lease_s=args.lease_s,
                                   store_timeout_s=args.store_timeout,
                                   batch_clips=args.batch_clips,
                                   confine_paths=args.confine_paths)
        except IncompleteRunError as exc:  # rank 0: report what was done, then fail
            summary, incomplete = exc.summary, exc
        if summary.rank != 0:
            return 0
        print(f"geocon bench: {summary.total} clips on {summary.world_size} rank(s): "
              f"{summary.computed} scored ({summary.ok} ok, {summary.not_applicable} not "
              f"applicable, {summary.error} error){summary.rescored_note()}, "
              f"{summary.skipped} already stored{kept_versions_note(summary.skipped_versions)}"
              f", {summary.linked} linked to identical files"
              f"{kept_versions_note(summary.linked_versions)}; {summary.elapsed_s:.1f} s "
              f"({summary.assign} assignment, store {mask_url(str(args.db))})", file=notes)
        for line in summary.errors[:20]:
            print(f"  error {line}", file=sys.stderr)
    elif not (args.export_csv or args.export_parquet):
        print("geocon bench: error: give a MANIFEST to run or --export-csv / --export-parquet",
              file=sys.stderr)
        return 2
    if not is_server_url(args.db) and not Path(args.db).is_file():  # never a new empty store
        if not args.manifest:
            raise InputError(f"store not found: {args.db} (without a MANIFEST geocon bench "
                             "only exports an existing store)")
        raise StoreError(f"store not found: {args.db} (deleted after the run stored its rows, "
                         "which are lost with it: re-run the same command to score them again)")
    run_hash = ((summary.config_hash if summary is not None else None)
                or pinned_config(cfg, args.device).config_hash())
    cfg_hash = None if args.all_configs else run_hash
    # may be read-only; create=False: a store deleted since the check above is no new one
    with open_readable(args.db, timeout_s=args.store_timeout, create=False) as store:
        stored = store.config_hashes() if cfg_hash is not None else []
        if cfg_hash is not None and stored and cfg_hash not in stored:
            raise InputError(f"{mask_url(str(args.db))} holds no result of this configuration "
                             f"({cfg_hash}; it holds {', '.join(stored[:5])}): give the "
                             f"--preset / --config / --long-side the results were scored with, "
                             f"or --all-configs")
        if args.export_csv == "-":
            _csv_to_stdout(store, cfg_hash)
        elif args.export_csv:
            store.export_csv(args.export_csv, cfg_hash)
            print(f"wrote {args.export_csv}", file=notes)
        if args.export_parquet:
            store.export_parquet(args.export_parquet, cfg_hash)
            print(f"wrote {args.export_parquet}", file=notes)
        errors = _stored_errors(store, args.manifest, run_hash) if args.strict else []
    if incomplete is not None:
        print(f"geocon bench: error: {incomplete}", file=sys.stderr)
        return 1
    if errors:
        print(f"geocon bench: --strict: {len(errors)} clip(s) stored with status error "
              f"under config {run_hash} (--retry-errors recomputes them): "
              f"{', '.join(errors[:10])}{', ...' if len(errors) > 10 else ''}", file=sys.stderr)
        return 1
    return 0


def _csv_to_stdout(store: ResultStore, config_hash: Optional[str]) -> None:
    """``--export-csv -``: the bytes :meth:`ResultStore.export_csv` writes to a file (a
    temporary one, removed), written to stdout."""
    with tempfile.TemporaryDirectory(prefix="geocon_export_") as tmp:
        data = store.export_csv(Path(tmp) / "export.csv", config_hash).read_bytes()
    sys.stdout.flush()
    raw = getattr(sys.stdout, "buffer", None)
    if raw is not None:
        raw.write(data)
        raw.flush()
    else:  # a text-only stream (a caller's io.StringIO)
        sys.stdout.write(data.decode("utf-8"))


def _stored_errors(store: ResultStore, manifest: Optional[str], config_hash: str) -> List[str]:
    """The clip ids of ``manifest`` (every clip of the store without one) that ``store``
    holds with status error under ``config_hash``, in clip order."""
    ids = None if manifest is None else {e.clip_id for e in load_manifest(manifest)}
    return [cid for cid, _ in store.error_clips(config_hash) if ids is None or cid in ids]
