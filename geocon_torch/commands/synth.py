"""Render grounded synthetic clips (paper sec. 5.2 categories C1-C6) with exact ground truth.

Each clip is written as OUTDIR/<clip_id>.mp4, <clip_id>.json (poses, intrinsics, true H / F,
category, corruption, severity and the sec. 5.5 metadata) and <clip_id>_masks.npz.

Examples:
  geocon synth out/ --category all --frames 48 --size 640x384
  geocon synth out/ --category C2 --motion tilt --seed 3
  geocon synth out/ --category C4 --corruption nonrigid_object --severity 0.5

Exit status: 0 when every clip is written; 2 for a user error (a bad option or combination, an
OUTDIR that cannot be written; nothing rendered).
"""
from __future__ import annotations

import argparse
from typing import List, Tuple

from .._progress_bar import tqdm
from ..categories import CATEGORIES, canonical_category
from ..errors import InputError
from ..synth import render_scene
from ..synth.corruptions import CORRUPTIONS
from ..synth.scenes import MOTIONS
from ._common import (at_least, bounded_frame_size, check_output_dir, cli_path,
                      positive_float, show_progress, unit_fraction)

NAME = "synth"
HELP = "render grounded synthetic clips with known geometry (mp4 + JSON + masks)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("outdir", metavar="OUTDIR", type=cli_path,
                        help="folder to write the clips into (created if missing)")
    parser.add_argument("--category", default="all",
                        help="C1..C6, an alias (static, rotation, translation, moving_object, "
                             "complex, stress) or 'all' (default)")
    parser.add_argument("--motion", default=None,
                        help="camera motion (C2: pan|tilt|roll, C3: truck|dolly, C5: arc|orbit);"
                             " default: the category's first, or every motion with 'all'")
    parser.add_argument("--corruption", default="none", choices=("none",) + CORRUPTIONS,
                        help="a geometric corruption of every clip (default none: clean); "
                             "nonrigid_object needs moving objects: C4 only")
    parser.add_argument("--severity", type=unit_fraction, default=0.5,
                        help="corruption severity in [0, 1] (default 0.5; ignored without "
                             "--corruption)")
    parser.add_argument("--frames", type=at_least(1), default=48,
                        help="frames per clip (default 48)")
    parser.add_argument("--size", type=bounded_frame_size, default=(640, 384),
                        help="WxH, even sides in [8, 8192] (default 640x384)")
    parser.add_argument("--seed", type=int, default=0, help="scene / texture seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (bars are "
                        "drawn only when stderr is a terminal)")
    parser.add_argument("--fps", type=positive_float, default=24.0,
                        help="frames per second, a finite number > 0 (default 24)")
    parser.add_argument("--num-objects", type=int, choices=(1, 2, 3), default=None,
                        help="moving objects in C4 (1-3; default 1); C4 / all only")


def _jobs(args: argparse.Namespace) -> List[Tuple[str, str]]:
    if args.category.lower() == "all":
        cats = list(CATEGORIES)
        return [(c, m) for c in cats for m in ([args.motion] if args.motion else MOTIONS[c])
                if m in MOTIONS[c]]
    cat = canonical_category(args.category)
    return [(cat, args.motion or MOTIONS[cat][0])]


def _only_c4(jobs: List[Tuple[str, str]], what: str) -> List[Tuple[str, str]]:
    """The C4 (moving_object) jobs of ``jobs``; InputError naming ``what`` (an option that
    needs moving objects) and the categories given when there is none."""
    c4 = [(cat, motion) for cat, motion in jobs if cat == "C4"]
    if not c4:
        others = ", ".join(sorted({cat for cat, _ in jobs}))
        raise InputError(f"{what} applies to C4 (moving_object) only, not {others}: give "
                         f"--category C4 (or all)")
    return c4


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.outdir, "OUTDIR")  # before rendering anything
    try:
        jobs = _jobs(args)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not jobs:
        raise InputError(f"no category has motion {args.motion!r}")
    corruption = None if args.corruption == "none" else args.corruption
    w, h = args.size
    if args.num_objects is not None:  # ignored silently on the other categories before
        _only_c4(jobs, "--num-objects")
    if corruption == "nonrigid_object":
        skipped = sorted({cat for cat, _ in jobs if cat != "C4"})
        jobs = _only_c4(jobs, "nonrigid_object")
        if skipped:
            print(f"nonrigid_object needs moving objects: skipping {', '.join(skipped)}")
    for cat, motion in tqdm(jobs, desc="synth clips", unit="clip",
                            disable=not show_progress(args)):
        n = 1 if args.num_objects is None else args.num_objects
        extra = {"num_objects": n} if cat == "C4" else {}
        clip = render_scene(cat, num_frames=args.frames, size=(h, w), seed=args.seed,
                            corruption=corruption,
                            severity=args.severity if corruption else 0.0, motion=motion,
                            fps=args.fps, **extra)
        path = clip.save(args.outdir)
        tqdm.write(f"wrote {path.with_suffix('.mp4')} {path} "
                   f"{path.with_name(clip.clip_id + '_masks.npz')}")
    return 0
