"""Calibrate the weight-free translation gate on grounded scenes (paper sec. 6.2, weight-free).

Renders grounded clips of every category (C1/C2/C4 expected H; C3/C5/C6 expected F) over several
motions, speeds and seeds, scores each with ``score_clip`` (background only, parallax gate), and
collects the clip value of every candidate statistic (``parallax_fraction``,
``residual_parallax``, ``gric_delta``: medians over the finest-scale pairs). For each statistic
it reports the balanced accuracy of the best single threshold and its margin, picks the best
statistic, and derives the U band (``parallax_low`` / ``parallax_high``) around the threshold:
the band spans the gap between the classes (its middle half) when they separate, otherwise the
overlap of the two classes' values.

    python benchmarks/gate_sweep.py [--frames 8] [--seeds 3] [--long-side 320] [--device cpu]
                                    [--quick]

``--quick``: a smoke run (4 scenes: C1, C2 pan, C3 truck, C5 arc; one seed, 6 frames at 160 px);
explicit flags win.

Last line: ``RESULT {json}`` with the chosen statistic, thresholds and accuracies.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geocon_torch.gate.parallax import STATISTICS  # noqa: E402
from geocon_torch.pipeline import score_clip  # noqa: E402
from geocon_torch.synth import EXPECTED_REGIME, render_scene  # noqa: E402

SCENES = [  # (category, options)
    ("C1", {}), ("C2", {"motion": "pan"}), ("C2", {"motion": "tilt"}),
    ("C2", {"motion": "roll"}), ("C2", {"motion": "pan", "rate": 1.5}),
    ("C4", {"num_objects": 1}), ("C4", {"num_objects": 2}),
    ("C3", {"motion": "truck", "speed": 0.02}), ("C3", {"motion": "truck"}),
    ("C3", {"motion": "truck", "speed": 0.08}), ("C3", {"motion": "dolly"}),
    ("C5", {"motion": "arc"}), ("C5", {"motion": "orbit"}), ("C6", {"stress": "thin"}),
]

#: ``--quick``: two H-expected and two F-expected scenes, and smaller clips
QUICK_SCENES = [SCENES[0], SCENES[1], SCENES[8], SCENES[11]]
QUICK = {"frames": 6, "seeds": 1, "long_side": 160}


def balanced_accuracy(values_h, values_f, thr):
    tn = sum(v < thr for v in values_h) / max(len(values_h), 1)
    tp = sum(v >= thr for v in values_f) / max(len(values_f), 1)
    return 0.5 * (tn + tp)


def calibrate(values_h, values_f):
    """Best single threshold and the U band: from the largest H-expected value (everything at or
    below it is H) to the 10th percentile of the F-expected values (robust to one hard F clip);
    when the classes separate the band is the middle half of the gap."""
    cands = sorted(set(values_h + values_f))
    mids = [(a + b) / 2 for a, b in zip(cands, cands[1:])] or cands
    best = max(mids, key=lambda t: (balanced_accuracy(values_h, values_f, t),
                                    -abs(t - 0.5 * (max(values_h) + min(values_f)))))
    acc = balanced_accuracy(values_h, values_f, best)
    gap = min(values_f) - max(values_h)
    if gap > 0:
        low, high = max(values_h) + 0.25 * gap, min(values_f) - 0.25 * gap
    else:
        vf = sorted(values_f)
        q10 = vf[int(0.1 * (len(vf) - 1))]
        low, high = max(values_h), max(max(values_h), q10)
    scale = max(abs(v) for v in values_h + values_f) or 1.0
    return {"threshold": best, "balanced_accuracy": acc, "gap": gap,
            "relative_gap": gap / scale, "low": low, "high": high}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--long-side", type=int, default=320)
    ap.add_argument("--pairs", default="first_last", help="gate pairs: first_last | adjacent")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**QUICK)
    args = ap.parse_args()
    scenes = QUICK_SCENES if args.quick else SCENES
    torch.set_num_threads(1)
    cfg = {"io": {"long_side": args.long_side}, "features": {"mutual": True},
           "gate": {"method": "parallax", "parallax_pairs": args.pairs}}
    rows = []
    t0 = time.time()
    for seed in range(args.seeds):
        for cat, opts in scenes:
            clip = render_scene(cat, num_frames=args.frames, size=(240, 320), seed=seed, **opts)
            res = score_clip(clip.frames, config=cfg, preset="background",
                             device=args.device).to_dict()
            ev = res["gate"].get("evidence", {})
            row = {"category": cat, "options": opts, "seed": seed,
                   "expected": EXPECTED_REGIME[cat], "status": res["status"],
                   "ir_h": res["background"].get("ir_h"), "ir_f": res["background"].get("ir_f")}
            row.update({s: ev.get(f"median_{s}") for s in STATISTICS})
            rows.append(row)
            print(f"{cat} {json.dumps(opts):34s} seed {seed}  expected {row['expected']}  "
                  + "  ".join(f"{s}={row[s]:.4f}" if row[s] is not None else f"{s}=None"
                              for s in STATISTICS)
                  + f"  IR_H={row['ir_h']}  IR_F={row['ir_f']}", flush=True)
    ok = [r for r in rows if all(r[s] is not None for s in STATISTICS)]
    summary = {}
    for s in STATISTICS:
        vh = [r[s] for r in ok if r["expected"] == "H"]
        vf = [r[s] for r in ok if r["expected"] == "F"]
        summary[s] = calibrate(vh, vf)
        c = summary[s]
        print(f"{s:18s} H [{min(vh):.4f}, {max(vh):.4f}]  F [{min(vf):.4f}, {max(vf):.4f}]  "
              f"thr {c['threshold']:.4f}  bal.acc {c['balanced_accuracy']:.3f}  "
              f"band [{c['low']:.4f}, {c['high']:.4f}]")
    # the full three-way rule: H / F by the band, U resolved by GRIC (as score_clip does)
    def decide(r, stat):
        v, lo, hi = r[stat], summary[stat]["low"], summary[stat]["high"]
        return "H" if v <= lo else "F" if v >= hi else ("F" if r["gric_delta"] > 0 else "H")

    for stat in STATISTICS:
        summary[stat]["rule_accuracy"] = (sum(decide(r, stat) == r["expected"] for r in ok)
                                          / max(len(ok), 1))
    best = max(STATISTICS, key=lambda s: (summary[s]["rule_accuracy"],
                                          summary[s]["balanced_accuracy"],
                                          summary[s]["relative_gap"]))
    lo, hi, rule_acc = summary[best]["low"], summary[best]["high"], summary[best]["rule_accuracy"]
    misses = [f"{r['category']} {r['options']} seed {r['seed']}" for r in ok
              if decide(r, best) != r["expected"]]
    print(f"chosen {best}: band [{lo:.4f}, {hi:.4f}], U by GRIC -> accuracy {rule_acc:.3f}; "
          f"misgated: {misses or 'none'}")
    result = {"benchmark": "gate_sweep", "quick": args.quick, "device": args.device,
              "statistic": best, "rule_accuracy": rule_acc, "misgated": misses,
              "parallax_low": summary[best]["low"],
              "parallax_high": summary[best]["high"], "threshold": summary[best]["threshold"],
              "balanced_accuracy": summary[best]["balanced_accuracy"], "clips": len(rows),
              "scored": len(ok), "seconds": round(time.time() - t0, 1),
              "all": {s: {k: round(v, 4) for k, v in summary[s].items()} for s in STATISTICS}}
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
