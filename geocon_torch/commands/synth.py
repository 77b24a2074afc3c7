"""Render grounded synthetic clips (paper sec. 5.2 categories C1-C6) with exact ground truth.

Each clip is written as OUTDIR/<clip_id>.mp4, <clip_id>.json (poses, intrinsics, true H / F,
category, corruption, severity and the sec. 5.5 metadata) and <clip_id>_masks.npz.

Examples:
  geocon synth out/ --category all --frames 48 --size 640x384
  geocon synth out/ --category C2 --motion tilt --seed 3
  geocon synth out/ --category C4 --corruption nonrigid_object --severity 0.5
"""
from __future__ import annotations

import argparse
from typing import List, Tuple

from tqdm import tqdm

from ..categories import CATEGORIES, canonical_category
from ..errors import InputError
from ..synth import render_scene
from ..synth.corruptions import CORRUPTIONS
from ..synth.scenes import MOTIONS
from ._common import frame_size, positive_float, show_progress, unit_fraction

NAME = "synth"
HELP = "render grounded synthetic clips with known geometry (mp4 + JSON + masks)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("outdir", help="folder to write the clips into (created if missing)")
    parser.add_argument("--category", default="all",
                        help="C1..C6, an alias (static, rotation, translation, moving_object, "
                             "complex, stress) or 'all' (default)")
    parser.add_argument("--motion", default=None,
                        help="camera motion (C2: pan|tilt|roll, C3: truck|dolly, C5: arc|orbit);"
                             " default: the category's first, or every motion with 'all'")
    parser.add_argument("--corruption", default="none", choices=("none",) + CORRUPTIONS)
    parser.add_argument("--severity", type=unit_fraction, default=0.5,
                        help="corruption severity in [0, 1] (default 0.5; ignored without "
                             "--corruption)")
    parser.add_argument("--frames", type=int, default=48, help="frames per clip (default 48)")
    parser.add_argument("--size", type=frame_size, default=(640, 384),
                        help="WxH (default 640x384)")
    parser.add_argument("--seed", type=int, default=0, help="scene / texture seed (default 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (bars are "
                        "drawn only when stderr is a terminal)")
    parser.add_argument("--fps", type=positive_float, default=24.0,
                        help="frames per second, a finite number > 0 (default 24)")
    parser.add_argument("--num-objects", type=int, default=1, help="moving objects in C4 (1-3)")


def _jobs(args: argparse.Namespace) -> List[Tuple[str, str]]:
    if args.category.lower() == "all":
        cats = list(CATEGORIES)
        return [(c, m) for c in cats for m in ([args.motion] if args.motion else MOTIONS[c])
                if m in MOTIONS[c]]
    cat = canonical_category(args.category)
    return [(cat, args.motion or MOTIONS[cat][0])]


def run(args: argparse.Namespace) -> int:
    try:
        jobs = _jobs(args)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not jobs:
        raise InputError(f"no category has motion {args.motion!r}")
    corruption = None if args.corruption == "none" else args.corruption
    w, h = args.size
    if corruption == "nonrigid_object":
        skipped = sorted({cat for cat, _ in jobs if cat != "C4"})
        jobs = [(cat, motion) for cat, motion in jobs if cat == "C4"]
        if not jobs:
            raise InputError(f"nonrigid_object applies to C4 (moving_object) only, not "
                             f"{', '.join(skipped)}: give --category C4 (or all)")
        if skipped:
            print(f"nonrigid_object needs moving objects: skipping {', '.join(skipped)}")
    for cat, motion in tqdm(jobs, desc="synth clips", unit="clip",
                            disable=not show_progress(args)):
        extra = {"num_objects": args.num_objects} if cat == "C4" else {}
        clip = render_scene(cat, num_frames=args.frames, size=(h, w), seed=args.seed,
                            corruption=corruption,
                            severity=args.severity if corruption else 0.0, motion=motion,
                            fps=args.fps, **extra)
        path = clip.save(args.outdir)
        tqdm.write(f"wrote {path.with_suffix('.mp4')} {path} "
                   f"{path.with_name(clip.clip_id + '_masks.npz')}")
    return 0
