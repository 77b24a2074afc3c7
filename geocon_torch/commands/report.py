"""Write the static HTML audit report (one page + PNGs) of a results store or JSONL file.

Examples:
  geocon report results.sqlite --out report/
  geocon report results.jsonl --out report/ --cards 12 --boot 2000
  geocon report results.sqlite --out report/ --clips wan_c4_s3,sora_c6_s1 --no-draw

The page holds: the leaderboard (Table-1 style scene-balanced IR %, GE px, AdaDFRC with 95%
bootstrap CIs, the epipolar trio, ok / not applicable / error counts), per-prompt-category
scene-balanced medians with CIs, IR / GE distributions per prompt category, the gate statistic
histogram with its thresholds, the gate calibration curve P(F | t) against the regime each prompt
category (C1-C6) is designed for (equal-count bins, Wilson CIs) with the net-benefit and
balanced-accuracy sweeps, threshold-score sensitivity curves,
percentile-aligned summaries, AdaP90 P80 anomaly rates, the clips that were not scored with
their reasons, and per-clip audit cards (gate rationale, per-pair IR / GE timeline, inlier /
outlier matches drawn on a frame pair, epipolar lines, object masks). Drawing the cards reads
the videos again (--no-draw skips that). Rows are validated against the result schema;
schema-1.0 results (one "category" field) are read as prompt_category / behaviour.
Exit status: 0 when the page is written (error rows are listed on it); 2 for a user error (a
missing or invalid RESULTS, an --out that cannot be written, --clips / --config-hash that
match nothing).
"""
from __future__ import annotations

import argparse

from ..report import build_report
from ._common import at_least, check_output_dir, cli_path, show_progress

NAME = "report"
HELP = "static HTML audit report (leaderboard, CIs, gate calibration, audit cards)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("results", metavar="RESULTS", type=cli_path,
                   help="results SQLite file or JSONL file")
    p.add_argument("--out", required=True, metavar="DIR", type=cli_path,
                   help="output folder (index.html, img/)")
    p.add_argument("--cards", type=at_least(0), default=6, metavar="N",
                   help="number of audit cards: worst clips first, then the best (default 6)")
    p.add_argument("--clips", metavar="IDS", help="comma-separated clip ids for the cards "
                                                  "(write --clips=IDS when the first id starts "
                                                  "with '-')")
    p.add_argument("--no-draw", action="store_true",
                   help="cards without frame drawings (do not re-read the videos)")
    p.add_argument("--boot", type=at_least(1), default=10_000, metavar="B",
                   help="bootstrap replicates of every CI (default 10000)")
    p.add_argument("--seed", type=at_least(0), default=0, help="bootstrap seed (default 0)")
    p.add_argument("--config-hash", metavar="HASH",
                   help="report this configuration (default: the most common in RESULTS)")
    p.add_argument("--device", help="torch device used to re-derive card matches (default "
                                    "auto: CUDA when available, else the CPU)")
    p.add_argument("--title", default="geocon audit report",
                   help="page title (default: geocon audit report)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar (bars are drawn "
                   "only when stderr is a terminal)")


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.out, "--out")  # before the results are read
    clips = [c for c in (args.clips or "").split(",") if c] or None
    path = build_report(args.results, args.out, cards=args.cards, card_clips=clips,
                        draw=not args.no_draw, n_boot=args.boot, seed=args.seed,
                        config_hash=args.config_hash, title=args.title, device=args.device,
                        progress=show_progress(args))
    print(f"wrote {path}")
    return 0
