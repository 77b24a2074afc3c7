"""Regenerate the shipped default calibration of the report gate.

    .venv/bin/python benchmarks/calibrate_default.py [--seeds 6] [--size 256x192]
                                                     [--heldout 100,101] [--out /tmp/geocon_cal]

runs ``geocon calibrate`` with the settings of the shipped file (opencv-sift, 256x192 working
size, 8 frames, seeds 0..5, severities 0.5 / 1.0, target false-pass 0.05 at severity >= 0.5),
copies OUT/calibration.json to geocon_torch/data/calibration/opencv-sift.json, then scores the
held-out seeds 100 and 101 and prints the calibrated gate's true-pass / false-pass rates on them
(the figures in benchmarks/README.md). Rerun it after changing anything the background verdict
depends on (features, RANSAC, gate, IR / GE, the calibrated gate's statistics). 420 + 140 clips:
~1.2 s a clip on a CPU core (~15 min).

The bounds fitted per gated regime are those of
``geocon_torch.measures.calibration.REGIME_BOUNDS``: IR >=, GE_norm <= (clip), GE_fine_norm <=
(median finest-scale pair GE), GE_spread_norm <= (its 90th percentile minus the median), and for
F GE_H_norm >= (H residual: evidence of parallax). GE statistics are px of a 1024-px frame.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from geocon_torch.bench.calibration import CalibrationPlan, evaluate, score_plan
from geocon_torch.cli import main as geocon
from geocon_torch.io.calibration import DEFAULT_DIR

ROOT = Path(__file__).resolve().parents[1]
SHIPPED = DEFAULT_DIR / "opencv-sift.json"
SEVERITIES = "0.5,1.0"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seeds", type=int, default=6)
    ap.add_argument("--size", default="256x192", help="working size WxH of the grounded clips")
    ap.add_argument("--out", default="/tmp/geocon_cal")
    ap.add_argument("--heldout", default="100,101",
                    help="held-out seeds, comma-separated ('' to skip)")
    ap.add_argument("--no-install", action="store_true", help="do not replace the shipped file")
    args = ap.parse_args()
    w, h = (int(v) for v in args.size.lower().split("x"))
    rc = geocon(["calibrate", args.out, "--size", args.size, "--frames", "8", "--seeds",
                 str(args.seeds), "--backend", "opencv-sift", "--target-false-pass", "0.05",
                 "--severities", SEVERITIES])
    if rc:
        return rc
    doc = json.loads((Path(args.out) / "calibration.json").read_text())
    if not args.no_install:
        SHIPPED.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(Path(args.out) / "calibration.json", SHIPPED)
        print(f"installed {SHIPPED.relative_to(ROOT)} (hash {doc['content_hash']})")
    seeds = tuple(int(s) for s in args.heldout.split(",") if s.strip())
    if seeds:
        plan = CalibrationPlan(frames=8, size=(h, w), seeds=seeds, backend="opencv-sift",
                               severities=tuple(float(v) for v in SEVERITIES.split(",")))
        rows = score_plan(plan, progress=lambda s: print(s, file=sys.stderr))
        rates = evaluate(rows, doc["thresholds"], plan.min_severity)
        (Path(args.out) / "heldout.json").write_text(json.dumps({"rates": rates, "clips": rows}))
        print("held-out seeds", seeds, json.dumps(rates, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
