"""Score video files, image folders or globs and print a per-clip summary table.

Examples:
  geocon score clip.mp4
  geocon score videos/ "more/*.webm" --json results.jsonl --long-side 512
  geocon score clip.mp4 --masks clip_masks.npz --poses clip_poses.json --preset all
  geocon score videos/ --masks masks/ --config thresholds.json --device cuda

A path that exists is taken literally (clip[1].mp4 is that file, not a glob). A folder is
expanded to the videos it holds, animated WebP / APNG files included (or is one clip if it
holds only images). --json OUT is checked before any clip is scored (exit 2 when it cannot be
written) and gets each clip's line as soon as the clip is scored (an interrupted run keeps the
clips scored so far).
Clip ids are the file stems; where stems repeat they are the shortest path suffix that tells
the clips apart (cogvideox/3.mp4 and sora/3.mp4 -> cogvideox/3 and sora/3).
--masks / --poses take a file for one clip, or a folder with per clip (<id> as above: the
stem, or e.g. sora/3) <id>_masks.npz, <id>.npz or <id>/ (masks), <id>.json, <id>_poses.json,
<id>_poses.npz or <id>.npz (poses): a geocon synth / demo folder serves both.
Columns: score (the headline score in [0, 1], higher is better; README "Headline score"), IR
(inlier ratio), GE px (geometric error at the working resolution), pass as paper/calibrated,
e.g. yes/no (paper: IR >= 0.97 and GE <= 3.5 px; the calibrated gate of
background.calibration), objects and their worst AdaP90 (AdaDFRC-W2), epipolar error / inlier
rate (worldatlas, all: the WorldAtlas trio's; gvgc: median error / kept fraction; epipolar-dpo:
its mean error / inlier rate).
Every clip gives one row: status ok, not_applicable or error with its full reason (wrapped to
the terminal width); --json OUT keeps every field of every clip.
Exit status: 0 when no clip has status error, 1 otherwise.
"""
from __future__ import annotations

import argparse
import sys

from tqdm.auto import tqdm

from ..bench.ids import derive_clip_ids
from ..pipeline import pinned_config, score_clips
from ._common import (add_config_arguments, build_config, check_output_file, expand_inputs,
                      jsonl_lines, per_clip_file, print_table, show_progress, summary_row)

NAME = "score"
HELP = "score clips (files, folders, globs): summary table, --json for JSON lines"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", help="video files, image folders, "
                                                            "folders of videos or globs")
    p.add_argument("--json", metavar="OUT", help="write one JSON result per line to OUT "
                                                 "('-' = stdout, the table then goes to stderr)")
    p.add_argument("--masks", metavar="PATH", help="object masks (.npz / PNG folder) or a folder "
                                                   "of per-clip mask files")
    p.add_argument("--poses", metavar="PATH", help="pose log (JSON / .npz) or a folder of "
                                                   "per-clip pose logs")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress output (the bar over clips; stage lines for one clip)")
    add_config_arguments(p)


def run(args: argparse.Namespace) -> int:
    cfg = build_config(args)
    pinned_config(cfg, args.device)  # a bad calibration file: one line, exit 2, nothing read
    check_output_file(args.json, "--json")  # before any clip is scored, not after them all
    clips = expand_inputs(args.paths)
    ids = derive_clip_ids(clips)  # unique: cogvideox/3 and sora/3, never "3" twice
    results = []
    with jsonl_lines(args.json) as keep:  # each clip's line as soon as it is scored
        for path, cid in tqdm(list(zip(clips, ids)), desc="geocon score", unit="clip",
                              disable=not show_progress(args) or len(clips) < 2):
            own = None if cid == path.stem else cid
            res = score_clips(
                [str(path)], masks=[per_clip_file(args.masks, path, len(clips), own)],
                poses=[per_clip_file(args.poses, path, len(clips), own, "poses")], config=cfg,
                device=args.device,  # stage lines for one clip, on a terminal
                progress=False if args.no_progress or len(clips) > 1 else None)[0].to_dict()
            res["clip"] = cid
            keep(res)
            results.append(res)
    out = sys.stderr if args.json == "-" else sys.stdout
    print_table([summary_row(r) for r in results], out=out)
    if not args.json and any(r["status"] != "ok" for r in results):
        print("(every field of every clip: add --json OUT)", file=out)
    return 1 if any(r["status"] == "error" for r in results) else 0
