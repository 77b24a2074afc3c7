"""Calibrate the report gate on grounded scenes (paper gate: IR >= 0.97 and GE <= 3.5 px).

Renders every grounded category C1-C6 and camera motion (``--seeds`` layouts), clean and with
each background corruption (rubber_sheet, background_slide, breathing) at several severities,
scores them (preset background), and writes OUTDIR/calibration.json: per gated regime H / F an
IR lower bound and a GE upper bound (px of a 1024-px frame: GE_px * 1024 / long side) chosen at
the target false-pass rate on corrupted clips of severity >= --min-severity, the resulting
true-pass rate on clean clips, the per-clip scores, backend, working size, frames, seeds and a
content hash; plus roc_H.png / roc_F.png (ROC-style curves per corruption) and roc.json.

Use the file with ``{"background": {"calibration": "OUTDIR/calibration.json"}}``; results then
carry ``background.pass_calibrated`` and ``background.calibration`` (name and hash).

Examples:
  geocon calibrate cal/                          # 256x192, 8 frames, 2 seeds, opencv-sift
  geocon calibrate cal/ --size 512x384 --seeds 3 --target-false-pass 0.05
  geocon calibrate cal8/ --refit cal/calibration.json --target-false-pass 0.08   # no rescoring
  geocon calibrate wide/ --seeds 4 --setting 384x288x16:seeds4 --setting 320x240x12:lb24:rate1.5
                                                  # more sizes, lengths, letterbox, speeds

Exit status: 0 when calibration.json is written; 2 for a user error (a bad option, an OUTDIR
that cannot be written, a --refit file that is not a calibration; nothing rendered).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any, Dict, Optional

from .._json import read_json_file
from .._version import __version__
from ..bench.calibration import (BACKGROUND_CORRUPTIONS, CalibrationPlan, refit_plan,
                                  run_calibration, scores_version)
from ..categories import canonical_category
from ..config import CHECKPOINT_BACKENDS, FEATURE_BACKEND_CHOICES, MAX_SEED
from ..errors import GeoConError, InputError
from ..synth import CORRUPTIONS, MOTIONS
from ._common import bounded_frame_size, check_output_dir, cli_path, unit_fraction

NAME = "calibrate"
HELP = "calibrate the report gate on grounded scenes (writes calibration.json + ROC plots)"


def _size(text: str):
    """--size WxH (as ``geocon synth``) or a long side (4:3 landscape) -> (H, W)."""
    if "x" not in text.lower():
        try:
            long_side = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"--size must be WxH or a long side, got {text!r}")
        w, h = bounded_frame_size(f"{long_side}x{2 * round(long_side * 3 / 8)}")
    else:
        w, h = bounded_frame_size(text)
    return h, w


def _setting(text: str) -> dict:
    """--setting WxHxT[:lbN][:rateR][:seedsA-B] -> a CalibrationPlan setting (seeds None: the
    plan's); A > B is a usage error (an empty range would silently fall back to --seeds)."""
    head, *opts = text.split(":")
    form = f"--setting must be WxHxT[:lbN][:rateR][:seedsA-B], got {text!r}"
    try:
        w, h, t = (int(v) for v in head.lower().split("x"))
        st = {"size": [h, w], "frames": t, "seeds": None, "letterbox": 0, "rate": 1.0}
        for o in opts:
            if o.startswith("lb"):
                st["letterbox"] = int(o[2:])
            elif o.startswith("rate"):
                st["rate"] = float(o[4:])
            elif o.startswith("seeds"):
                a, _, b = o[5:].partition("-")
                st["seeds"] = list(range(int(a), int(b or a) + 1))
                if not st["seeds"]:
                    raise argparse.ArgumentTypeError(
                        f"--setting seeds{a}-{b}: the first seed is above the last, so the "
                        f"range is empty; write seedsA-B with A <= B, got {text!r}")
            else:
                raise argparse.ArgumentTypeError(form)
    except ValueError:
        raise argparse.ArgumentTypeError(form)
    if (min(w, h) < 16 or t < 2 or st["letterbox"] < 0
            or not (math.isfinite(st["rate"]) and st["rate"] > 0)):  # nan, inf: no speed
        raise argparse.ArgumentTypeError(f"--setting needs sides >= 16, T >= 2, lb >= 0 and "
                                         f"a finite rate > 0, got {text!r}")
    return st


#: the backends calibrate can score with: not those that need features.checkpoint, which it
#: has no option for
BACKEND_CHOICES = tuple(b for b in FEATURE_BACKEND_CHOICES if b not in CHECKPOINT_BACKENDS)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("outdir", metavar="OUTDIR", type=cli_path,
                        help="folder for calibration.json and the plots")
    parser.add_argument("--frames", type=int, default=8, help="frames per clip (default 8)")
    parser.add_argument("--size", type=_size, default=(192, 256),
                        help="WxH or a long side in px (4:3), the working resolution "
                             "(default 256x192)")
    parser.add_argument("--seeds", type=int, default=2,
                        help="scene layouts per category and motion: seeds 0..N-1 (default 2)")
    parser.add_argument("--first-seed", type=int, default=0, help="first seed (default 0)")
    parser.add_argument("--backend", default="opencv-sift", choices=BACKEND_CHOICES,
                        help="features backend (default opencv-sift, the CPU default; "
                             f"{', '.join(CHECKPOINT_BACKENDS)} need a features.checkpoint, "
                             "which calibrate cannot take)")
    parser.add_argument("--device", default="cpu", help="torch device for scoring (default cpu)")
    parser.add_argument("--target-false-pass", type=unit_fraction, default=0.05,
                        help="allowed fraction of corrupted clips passing (default 0.05)")
    parser.add_argument("--min-severity", type=unit_fraction, default=0.5,
                        help="corrupted clips below this severity are plotted but not "
                             "constrained (default 0.5)")
    parser.add_argument("--severities", default="0.25,0.5,1.0",
                        help="comma-separated corruption severities (default 0.25,0.5,1.0)")
    parser.add_argument("--categories", default="all",
                        help="comma-separated categories C1..C6 (default all, every motion)")
    parser.add_argument("--refit", metavar="CALIBRATION_JSON", default=None, type=cli_path,
                        help="refit the bounds from the scored clips of an earlier calibration "
                             "(its plan; --target-false-pass / --min-severity apply), no "
                             "rescoring: clips scored by another geocon_torch version keep "
                             "their numbers (a warning; the file records their version and "
                             "refit_by)")
    parser.add_argument("--setting", action="append", default=[], type=_setting,
                        metavar="WxHxT[:lbN][:rateR][:seedsA-B]",
                        help="a further render of every scene (repeatable): working size WxH, "
                             "T frames, N black letterbox rows above and below, camera speed x "
                             "R, seeds A..B (default: the --seeds range)")
    parser.add_argument("--corruptions", default=",".join(BACKGROUND_CORRUPTIONS),
                        help="comma-separated corruptions (default: "
                             f"{','.join(BACKGROUND_CORRUPTIONS)})")


def plan_from_args(args: argparse.Namespace) -> CalibrationPlan:
    """The calibration plan the options describe (usage errors as ArgumentTypeError)."""
    if args.frames < 2 or args.seeds < 1:
        raise argparse.ArgumentTypeError("--frames must be >= 2 and --seeds >= 1")
    if not 0 <= args.first_seed <= MAX_SEED + 1 - args.seeds:  # as --refit reads them back
        raise argparse.ArgumentTypeError(f"--first-seed must be in [0, {MAX_SEED + 1 - args.seeds}]"
                                         f" (the seeds lie in [0, 2^31 - 1]), got "
                                         f"{args.first_seed}")
    try:
        sev = tuple(float(v) for v in args.severities.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"--severities must be numbers, got {args.severities!r}")
    if not sev or not all(0.0 < v <= 1.0 for v in sev):  # (NaN fails it too)
        raise argparse.ArgumentTypeError(f"--severities must be numbers in (0, 1], got "
                                         f"{args.severities!r}")
    if not any(v >= args.min_severity for v in sev):  # else nothing to fit, after the scoring
        raise argparse.ArgumentTypeError(f"no --severities value is >= --min-severity "
                                         f"{args.min_severity:g}: no corrupted clip would "
                                         f"count ({args.severities!r})")
    kinds = tuple(v.strip() for v in args.corruptions.split(",") if v.strip())
    bad = [k for k in kinds if k not in CORRUPTIONS]
    if bad or not kinds:
        raise argparse.ArgumentTypeError(f"--corruptions must name some of {CORRUPTIONS}, "
                                         f"got {args.corruptions!r}")
    cats = tuple(MOTIONS) if args.categories == "all" else tuple(
        canonical_category(v.strip()) for v in args.categories.split(",") if v.strip())
    seeds = tuple(range(args.first_seed, args.first_seed + args.seeds))
    settings = tuple(dict(st, seeds=list(st["seeds"] or seeds))
                     for st in getattr(args, "setting", []))
    return CalibrationPlan(frames=args.frames, size=tuple(args.size), seeds=seeds,
                           settings=settings,
                           backend=args.backend, device=args.device, corruptions=kinds,
                           severities=sev, target_false_pass=args.target_false_pass,
                           min_severity=args.min_severity, categories=cats)


def _refit_warning(source: Path, scored_by: str) -> None:
    """One line on stderr when the clips of ``--refit``'s file were scored by another
    geocon_torch version than this one (their numbers, kept by the refit, may differ)."""
    if scored_by != __version__:
        print(f"geocon calibrate: warning: the clips of {source} were scored by geocon_torch "
              f"{scored_by}, this is {__version__}: the refit keeps their scores (its "
              f"calibration.json records version {scored_by}, refit_by {__version__}); drop "
              f"--refit to score them again", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.outdir, "OUTDIR")  # before any clip is rendered
    rows, scored_by = None, None
    try:
        if args.refit:
            source = read_json_file(args.refit, "--refit calibration file")
            try:
                plan, rows = refit_plan(source, args.target_false_pass, args.min_severity)
            except GeoConError:  # its own message (InputError is a ValueError too)
                raise
            except (TypeError, ValueError, AttributeError, KeyError) as exc:  # not caught there
                raise InputError(f"--refit {args.refit} is not a calibration written by "
                                 f"geocon calibrate ({type(exc).__name__}: {exc})") from None
            scored_by = scores_version(source)
        else:
            plan = plan_from_args(args)
    except (argparse.ArgumentTypeError, GeoConError) as exc:
        print(f"geocon calibrate: error: {exc}", file=sys.stderr)
        return 2
    if scored_by is not None:
        _refit_warning(args.refit, scored_by)
    doc = run_calibration(plan, args.outdir, progress=lambda s: print(s, file=sys.stderr),
                          rows=rows, scored_by=scored_by)
    print(f"wrote {Path(args.outdir) / 'calibration.json'} (hash {doc['content_hash']}) "
          f"{' '.join(doc['plots'])}")
    for regime, th in doc["thresholds"].items():
        extra = "".join(f", {label} {th[key]:.4g}" for key, label in (
            ("ge_fine_norm_max", "GE_fine_norm <="), ("ge_spread_norm_max", "GE_spread_norm <="),
            ("ge_peak_norm_max", "GE_peak_norm <="), ("ge_h_norm_min", "GE_H_norm >="),
            ("parallax_ref_min", "parallax_ref >="))
            if key in th)
        print(f"  {regime}: IR >= {th['ir_min']:.4f}, GE_norm <= {th['ge_norm_max']:.4g} px "
              f"(at 1024 px; {th['ge_norm_max'] * max(plan.size) / 1024:.4g} px here){extra}: "
              f"false-pass {th['false_pass']:.3f} of {th['n_corrupted']}, true-pass "
              f"{th['true_pass']:.3f} of {th['n_clean']}" + _pooled(th))
    r = doc["rates"]
    print(f"  overall: true-pass {_rate(r['true_pass'])}, false-pass {_rate(r['false_pass'])} "
          f"(paper gate: {_rate(r['clean']['paper_pass_rate'])} / "
          f"{_rate(r['corrupted']['paper_pass_rate'])})")
    return 0


def _rate(value: Optional[float]) -> str:
    """A rate in [0, 1] with 3 decimals, as the regime lines show them ("n/a" for None: no
    clip scored)."""
    return "n/a" if value is None else f"{value:.3f}"


def _pooled(th: Dict[str, Any]) -> str:
    """The end of a regime's summary line when its bounds were fitted on both regimes' clips:
    why (the fit's ``pooled_reason``)."""
    if not th.get("pooled"):
        return ""
    reason = th.get("pooled_reason")
    return f" (pooled: {reason})" if reason else " (pooled)"
