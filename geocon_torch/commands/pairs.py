"""Preference pairs for DPO: the best and the worst clip of every prompt by geometric reward.

Examples:
  geocon pairs manifest.csv --db results.sqlite --out prefs.jsonl
  geocon pairs manifest.jsonl --db results.sqlite --out prefs.jsonl --kind background \\
      --min-margin 0.05

Clips are grouped by the manifest's ``prompt`` column and scored through the resumable store (a
SQLite file or a PostgreSQL URL, as ``geocon bench``, with the preset of --kind), so a rerun
recomputes nothing. The reward is geocon_torch.rewards.geometric_reward's fold of the stored result
(higher is better, in [0, 1]): epipolar-dpo exp(-mean Sampson error / 5 px), epipolar the mean of
the WorldAtlas trio, background IR * exp(-GE / 3.5 px). A frozen (still) clip is unscored, as in the
reward, when its stored row records the motion statistic (rows written since it is recorded).

The rows are keyed by the config hash, which a geocon_torch upgrade keeps: rows an older version
scored are used as stored, with a warning naming the versions (the summary line counts them);
--rescore-versions re-scores them in place with this version (the --kind's config, with the same
--config / --long-side / --max-frames / --stride as the run that stored them) before the pairs
are built. (geocon bench --rescore-versions re-scores bench's config, not this one, unless given
the --kind's --preset.)

Output: one JSON line per prompt. {"status": "pair", "prompt", "chosen", "rejected",
"chosen_reward", "rejected_reward", "margin", ...} or {"status": "skipped", "prompt",
"reason", ...} when fewer than two clips of the prompt could be scored, their rewards tie (a
tie is no preference, even at --min-margin 0), the best reward is below --min-chosen-reward
(Kupyn et al.'s winner bound, best error < 8 px, is --min-chosen-reward 0.2019 for
epipolar-dpo) or the margin is below --min-margin (see geocon_torch.bench.preferences). A summary goes to stdout (none with --out -).
Exit status: 0 when the pairs are written (clips stored as errors only leave prompts skipped);
2 for a user error (a bad manifest, store or option, an --out that cannot be written or is
the MANIFEST, the store or the --config file).
"""
from __future__ import annotations

import argparse

from ..bench.preferences import preference_pairs
from ..bench.runner import kept_versions_note
from ..rewards import KINDS
from ._common import (build_config, check_not_input, check_output_file, cli_path,
                      non_negative_float, show_progress, unit_fraction, write_jsonl)

NAME = "pairs"
HELP = "DPO preference pairs: best vs worst clip per prompt by geometric reward (resumable)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("manifest", metavar="MANIFEST", type=cli_path,
                   help="CSV or JSONL manifest with a prompt column")
    p.add_argument("--db", required=True, metavar="FILE_OR_URL", type=cli_path,
                   help="results store shared with geocon bench: a SQLite file (created if "
                        "missing) or a postgresql:// URL")
    p.add_argument("--out", required=True, metavar="FILE", type=cli_path,
                   help="JSON lines output ('-' = stdout)")
    p.add_argument("--kind", choices=KINDS, default="epipolar-dpo",
                   help="reward kind (default epipolar-dpo)")
    p.add_argument("--min-margin", type=non_negative_float, default=0.0, metavar="X",
                   help="skip prompts whose best - worst reward is below X (default 0; "
                        "a tie is always skipped; a finite number >= 0)")
    p.add_argument("--min-chosen-reward", type=unit_fraction, default=0.0, metavar="R",
                   help="skip prompts whose best reward is below R: no clip good enough to be "
                        "chosen (default 0; a number in [0, 1]; 0.2019 = exp(-8/5) is Kupyn "
                        "et al.'s 8 px winner bound for --kind epipolar-dpo)")
    p.add_argument("--rescore-versions", action="store_true",
                   help="re-score (in place) the manifest's stored ok / not_applicable rows of "
                        "this --kind's config that another geocon_torch version wrote (an "
                        "upgrade keeps the config hash) before building the pairs")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("configuration")
    g.add_argument("--config", metavar="FILE", type=cli_path,
                   help="JSON file overriding GeoConConfig (default: the defaults)")
    g.add_argument("--long-side", type=int, metavar="PX",
                   help="working resolution: long side in pixels (default: the --kind preset's)")
    g.add_argument("--max-frames", type=int, metavar="N",
                   help="score at most N frames per clip (default: every frame)")
    g.add_argument("--stride", type=int, metavar="S", help="keep every S-th frame (default 1)")
    g.add_argument("--device", help="torch device, e.g. cpu, cuda (default auto: CUDA when "
                                    "available, else the CPU)")


def run(args: argparse.Namespace) -> int:
    check_not_input(args.out, "--out", [("the MANIFEST", args.manifest),
                                        ("the --db store", args.db),
                                        ("the --config file", args.config)])
    check_output_file(args.out, "--out", allow_stdout=True)  # before any clip is scored
    records, summary = preference_pairs(
        args.manifest, args.db, kind=args.kind, config=build_config(args),
        min_margin=args.min_margin, min_chosen_reward=args.min_chosen_reward,
        device=args.device, progress=show_progress(args),
        rescore_versions=args.rescore_versions)
    write_jsonl(args.out, records)
    pairs = sum(r["status"] == "pair" for r in records)
    if args.out != "-":
        print(f"geocon pairs: {len(records)} prompt(s): {pairs} pair(s), "
              f"{len(records) - pairs} skipped; {summary.computed} clip(s) scored"
              f"{summary.rescored_note()}, {summary.skipped + summary.linked} already stored"
              f"{kept_versions_note(summary.kept_versions)}; wrote {args.out}")
    return 0
