"""Score video files, image folders or globs and print a per-clip summary table.

Examples:
  geocon score clip.mp4
  geocon score videos/ "more/*.webm" --json results.jsonl --long-side 512
  geocon score clip.mp4 --masks clip_masks.npz --poses clip_poses.json --preset all
  geocon score videos/ --masks masks/ --config thresholds.json --device cuda

A path that exists is taken literally (clip[1].mp4 is that file, not a glob). A folder is
expanded to the videos it holds (mp4, webm, mkv, mov, avi, MPEG-TS .ts / .mts / .m2ts, .3gp,
.flv, .ogv, .wmv, .mxf, .vob, ...; animated WebP / APNG files included), naming on stderr the
other files it skips (images and a clip's masks / poses files aside), or is one clip if it
holds only images. One file named in several spellings (a.mp4, ./x/../a.mp4, its absolute
path, its folder) is one clip, under the first. Files are scored in groups of up to 8 (one
score_clips call per group, in batches of at most 64 MiB of decoded frames: many small clips
share the per-call work, the results are those of each file scored alone on the CPU); the
progress bar over clips advances as each group is done. --json OUT is checked before any clip
is scored (exit 2 when it cannot be written, or would replace an input: one of the clips, a
--masks / --poses / --config file, or any file with a video or image suffix, as in the typo
"geocon score --json a.mp4 b.mp4") and gets each group's lines as soon as the group is scored
(an interrupted run keeps the groups scored so far).
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
Every clip gives one row: status ok, not_applicable or error with its full reason (wrapped at
spaces to the terminal width, COLUMNS when set; one line in a pipe or file); --json OUT keeps
every field of every clip, its path absolute (geocon explain / report find the clip from any
folder), and its --masks / --poses files, absolute, in its "meta" (masks_path / poses_path:
the report's cards and geocon explain re-derive its pairs with them). A path whose file or
folder name is not UTF-8 (another encoding) is refused before any clip is scored, as in a
manifest: no result store or reader takes it (rename it in UTF-8).
timing_s (--json): a stage run once for a batch of clips (features, fit, segment, metrics,
foreground, gate) reports the batch's seconds, the same for each of its clips; read is the
clip's own, total its wall time from start to end: do not sum them over clips.
Exit status: 0 when no clip has status error, 1 otherwise (a missing or unreadable video is
an error row); 2 for a user error (a bad option, config or --json OUT; nothing scored).
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .._progress_bar import tqdm
from ..bench.ids import derive_clip_ids
from ..pipeline import pinned_config, score_clips
from ._common import (add_config_arguments, build_config, check_not_input, check_output_file,
                      check_utf8_path, cli_path, expand_inputs, jsonl_lines, per_clip_file,
                      print_table, show_progress, summary_row)

NAME = "score"
#: files per score_clips call (as ``geocon bench --batch-clips``): a group is scored as batches
#: and its lines are written when it is done. 24 files of 8 x 64 x 64 px: 6.8-7.0 s of CPU one
#: file per call, 6.0 s in groups of 8 and the same in groups of 16; 8 keeps the bar and the
#: lines of an interrupted run closer to the clips scored
GROUP_CLIPS = 8
#: decoded frames per batch inside a group (``score_clips(batch_bytes=...)``): small clips share a
#: batch, large ones (where batching saves nothing) keep about one clip's working set, ~4.6x its
#: frames, instead of the 768 MiB default's
BATCH_BYTES = 64 * 2 ** 20
HELP = "score clips (files, folders, globs): summary table, --json for JSON lines"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("paths", nargs="+", metavar="PATH", type=cli_path,
                   help="video files, image folders, folders of videos or globs")
    p.add_argument("--json", metavar="OUT", type=cli_path,
                   help="write one JSON result per line to OUT ('-' = stdout, the table then "
                        "goes to stderr)")
    p.add_argument("--masks", metavar="PATH", type=cli_path,
                   help="object masks (.npz / PNG folder) or a folder of per-clip mask files")
    p.add_argument("--poses", metavar="PATH", type=cli_path,
                   help="pose log (JSON / .npz) or a folder of per-clip pose logs")
    p.add_argument("--no-progress", action="store_true",
                   help="no progress output (the bar over clips; stage lines for one clip)")
    add_config_arguments(p)


def _score_group(group: Sequence[Tuple[Path, str]], args: argparse.Namespace, cfg: Any,
                 n_clips: int) -> List[Dict[str, Any]]:
    """One score_clips call over a group of (path, clip id): the result dicts, in order, with
    ``clip`` set to the id (a bad file is its own error row)."""
    owns = [None if cid == path.stem else cid for path, cid in group]
    masks = [per_clip_file(args.masks, path, n_clips, own) for (path, _), own in
             zip(group, owns)]
    poses = [per_clip_file(args.poses, path, n_clips, own, "poses") for (path, _), own in
             zip(group, owns)]
    results = score_clips(
        [str(path) for path, _ in group], masks=masks, poses=poses,
        config=cfg, device=args.device, batch_bytes=BATCH_BYTES,
        progress=False if args.no_progress or n_clips > 1 else None)  # stage lines: one clip
    rows = [r.to_dict() for r in results]
    for row, (path, cid), mask, pose in zip(rows, group, masks, poses):
        row["clip"] = cid
        # absolute (not resolved: a link keeps its name), so explain / report run from another
        # folder find the clip; the clip was read by the name typed (its error rows say that)
        row["path"] = os.path.abspath(path)
        if mask or pose:  # as geocon demo / bench record them: the cards and geocon explain
            # re-derive the clip's pairs with the same masks / poses from any folder
            row["meta"] = {**(row.get("meta") or {}),
                           "masks_path": os.path.abspath(mask) if mask else None,
                           "poses_path": os.path.abspath(pose) if pose else None}
    return rows


def _side_inputs(args: argparse.Namespace, clips: Sequence[Path], ids: Sequence[str]
                 ) -> List[Tuple[str, Optional[str]]]:
    """The files besides the clips that a run reads, as (what, path) for
    :func:`~._common.check_not_input`: --masks, --poses (a folder: each clip's own file in
    it, :func:`~._common.per_clip_file`) and --config."""
    side: List[Tuple[str, Optional[str]]] = [("the --config file", args.config)]
    for kind in ("masks", "poses"):
        option = getattr(args, kind)
        side.append((f"the --{kind} file", option))
        if option and Path(option).is_dir():
            side += [(f"the --{kind} file of clip {cid}",
                      per_clip_file(option, path, len(clips),
                                    None if cid == path.stem else cid, kind))
                     for path, cid in zip(clips, ids)]
    return side


def run(args: argparse.Namespace) -> int:
    cfg = build_config(args)
    pinned_config(cfg, args.device)  # a bad calibration file: one line, exit 2, nothing read
    clips = expand_inputs(args.paths, note=lambda text: print(f"geocon score: note: {text}",
                                                              file=sys.stderr))
    for path in clips:  # a result keeps its path: one no store or reader takes is refused
        check_utf8_path(path, "clip")
    for option, value in (("--masks", args.masks), ("--poses", args.poses)):
        if value is not None:
            check_utf8_path(value, option)
    # unique: cogvideox/3 and sora/3, never "3" twice (the same file twice is one clip already)
    ids = derive_clip_ids(clips, hint="give each clip once")
    # --json OUT never replaces an input (``--json a.mp4 b.mp4``: --json meant as a flag), and
    # it is checked before any clip is scored, not after them all
    check_not_input(args.json, "--json", [("one of the clips to score", str(c)) for c in clips],
                    hint=" (did you mean --json OUT before the paths?)")
    check_not_input(args.json, "--json", _side_inputs(args, clips, ids))
    check_output_file(args.json, "--json", allow_stdout=True)
    jobs = list(zip(clips, ids))
    results: List[Dict[str, Any]] = []
    with jsonl_lines(args.json) as keep, \
            tqdm(total=len(jobs), desc="geocon score", unit="clip",
                 disable=not show_progress(args) or len(clips) < 2) as bar:
        for start in range(0, len(jobs), GROUP_CLIPS):  # each group's lines once it is scored
            group = jobs[start:start + GROUP_CLIPS]
            for res in _score_group(group, args, cfg, len(clips)):
                keep(res)
                results.append(res)
            bar.update(len(group))
    out = sys.stderr if args.json == "-" else sys.stdout
    print_table([summary_row(r) for r in results], out=out)
    if not args.json and any(r["status"] != "ok" for r in results):
        print("(every field of every clip: add --json OUT)", file=out)
    return 1 if any(r["status"] == "error" for r in results) else 0
