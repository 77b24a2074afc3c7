"""Render a few grounded clips on the fly, score them and show the results next to the truth.

Examples:
  geocon demo
  geocon demo --out demo/ --report          (also writes demo/report/index.html)
  geocon demo --frames 12 --size 320x240 --json demo.jsonl

The grounded scenes (geocon_torch.synth) have known geometry: a rotating camera (C2, one
homography explains the background: expect H and IR near 1), a translating camera with parallax
(C3: expect F), a static camera with a moving rigid object (C4: exact masks are passed in;
expect H and a small AdaP90) and the translating scene with a rubber-sheet warp
(corrupted: expect a lower IR / higher GE than its clean twin). Clips are written as mp4 (+ mask
.npz) to --out so the report's audit cards can draw them. With --json - the JSON lines are
stdout and the table goes to stderr.
Exit status: 0 when no clip has status error, 1 otherwise; 2 for a user error (a bad option,
--out or --json; nothing rendered).
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from .._progress_bar import tqdm
from ..config import GeoConConfig
from ..pipeline import score_clips
from ..report import build_report
from ..synth import render_scene
from ._common import (SUMMARY_COLUMNS, at_least, bounded_frame_size, check_not_input,
                      check_output_dir, check_output_file, check_utf8_path, cli_path,
                      print_table, show_progress, summary_row, write_jsonl)

NAME = "demo"
HELP = "render grounded clips with known geometry, score them, compare with the truth"

SCENES = (
    ("C2_rotation", "C2", {}, "H, IR ~ 1"),
    ("C3_translation", "C3", {}, "F, IR ~ 1"),
    ("C4_moving_object", "C4", {}, "H, IR ~ 1, small AdaP90"),
    ("C3_rubber_sheet", "C3", {"corruption": "rubber_sheet", "severity": 0.8},
     "lower IR / higher GE than C3_translation"),
)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", metavar="DIR", type=cli_path,
                   help="where clips (and --report) go (default: a temporary folder)")
    p.add_argument("--frames", type=at_least(1), default=6, help="frames per clip (default 6)")
    p.add_argument("--size", type=bounded_frame_size, default=(192, 144), metavar="WxH",
                   help="frame size, width first as in geocon synth (default 192x144)")
    p.add_argument("--seed", type=int, default=0, help="scene seed (default 0)")
    p.add_argument("--json", metavar="OUT", type=cli_path,
                   help="also write the JSON results ('-' = stdout, the table then goes to "
                        "stderr)")
    p.add_argument("--report", action="store_true", help="write OUT/report/index.html")
    p.add_argument("--device", help="torch device (default: CUDA when available, else CPU)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.out, "--out")  # both before any clip is rendered
    check_not_input(args.json, "--json", [])  # JSON lines never go to a video / image file
    check_output_file(args.json, "--json", allow_stdout=True)
    if args.out is not None:  # the results keep the clips' paths in it
        check_utf8_path(args.out, "--out")
    w, h = args.size
    size = (h, w)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="geocon_demo_"))
    clips_dir = out / "clips"
    clips_dir.mkdir(parents=True, exist_ok=True)
    cfg = GeoConConfig().replace(io={"long_side": max(size)}, preset="geocon")
    results, truth = [], []
    for name, cat, kw, expect in tqdm(SCENES, desc="geocon demo", unit="clip",
                                      disable=not show_progress(args)):
        synth = render_scene(cat, num_frames=args.frames, size=size, seed=args.seed, **kw)
        synth.clip_id = name
        synth.save(clips_dir)
        video = clips_dir / f"{name}.mp4"
        masks = clips_dir / f"{name}_masks.npz" if synth.masks.shape[1] > 0 else None
        res = score_clips([str(video)], masks=[str(masks) if masks else None], config=cfg,
                          device=args.device)[0].to_dict()
        res["prompt_category"] = cat  # the scene's prompt family; res["behaviour"] is measured
        res["meta"] = {"generator": "grounded", "expected": expect,
                       "masks_path": str(masks) if masks else None}
        results.append(res)
        truth.append(expect)
    rows = [summary_row(r)[:-1] + [t] for r, t in zip(results, truth)]
    shown = sys.stderr if args.json == "-" else sys.stdout  # stdout is the JSON lines then
    print_table(rows, header=SUMMARY_COLUMNS[:-1] + ("expected",), out=shown)
    print(f"clips in {clips_dir}", file=shown)
    if args.json:
        write_jsonl(args.json, results)
    if args.report:
        jsonl = out / "demo_results.jsonl"
        write_jsonl(str(jsonl), results)
        page = build_report(str(jsonl), out / "report", cards=len(results), n_boot=2000,
                            title="geocon demo: grounded clips")
        print(f"report: {page}", file=shown)
    return 1 if any(r["status"] == "error" for r in results) else 0
