"""Calibrate the weight-free translation gate on grounded scenes (paper sec. 6.2, weight-free).

Renders grounded clips of every category (C1/C2/C4 expected H; C3/C5/C6 expected F) over several
motions, speeds and seeds, scores each with ``score_clip`` (background only, parallax gate), and
collects the clip value of every candidate statistic (``parallax_fraction``,
``residual_parallax``, ``gric_delta``, ``parallax_magnitude``, ``parallax_excess``: medians over
the finest-scale pairs). For each statistic
it reports the balanced accuracy of the best single threshold and its margin, picks the best
statistic, and derives the U band (``parallax_low`` / ``parallax_high``) around the threshold:
the band spans the gap between the classes (its middle half) when they separate, otherwise the
overlap of the two classes' values.

    python benchmarks/gate_sweep.py [--frames 8] [--seeds 3] [--long-side 320] [--device cpu]
                                    [--quick]

``--quick``: a smoke run (4 scenes: C1, C2 pan, C3 truck, C5 arc; one seed, 6 frames at 160 px);
explicit flags win.

Agreement mode (``--backends`` and / or ``--sizes``): the gate decision (H / F / U) and the
regime (U resolved) of every clip (grounded scenes of every category, rendered once at the
largest size and written losslessly to a PNG folder, and the shared real clips, ``--real``) for
every feature backend x working long side (``io.long_side``), with the configured gate; prints
one row per clip (``decision/regime`` per setting) and the agreement (same value for all
settings; U vs H / F counts as a disagreement; a setting where the clip stopped before the gate,
``-``: a decode error or too little texture, is left out and listed under ``not_scored``) per
axis, for the decision and for the regime:

    python benchmarks/gate_sweep.py --backends opencv-sift,kornia-sift --sizes 256,512,1024
        [--learned-sizes 256] [--seeds 2] [--frames 8] [--real-frames 16] [--no-real]

``--learned-sizes``: sizes at which the learned backends (slow on a CPU) run (default: all).
Last line: ``RESULT {json}`` with ``agreement`` {backend, size, overall, u_compatible} (the
decision), ``regime_agreement`` (the same for the regime) and the grounded accuracy.

Last line: ``RESULT {json}`` with the chosen statistic, thresholds and accuracies.
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from geocon_torch.gate.parallax import STATISTICS  # noqa: E402
from geocon_torch.io import write_image_folder  # noqa: E402
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


AGREE_SCENES = [("C1", {}), ("C2", {"motion": "pan"}), ("C3", {"motion": "truck"}),
                ("C4", {"num_objects": 1}), ("C5", {"motion": "arc"}), ("C6", {"stress": "thin"}),
                ("C2", {"motion": "tilt"}), ("C3", {"motion": "dolly"})]
REAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
REAL_CLIPS = ["realshort.mp4", "box.mp4", "vtest_120.mp4", "bikes.mp4", "hill"]
#: two-image clips, as folders of two frames: panorama pairs of the shared ``hill`` shots (a
#: hand-held rotation with a little parallax) and ``graf`` (a planar wall, wide baseline)
REAL_PAIRS = [("hill", ("1.JPG", "2.JPG")), ("hill", ("2.JPG", "3.JPG")),
              ("hill", ("1.JPG", "3.JPG")), ("graf", ("graf1.png", "graf3.png"))]
LEARNED = ("xfeat", "xfeat-lighterglue", "aliked-lightglue", "disk-lightglue")
#: a setting where the clip stopped before the gate (no evidence at all): left out of agreement
NOT_SCORED = "-"


def gate_decision(source, backend: str, size: int, frames: int, device: str,
                  statistic: Optional[str] = None) -> dict:
    """The gate block's decision and evidence of one clip / backend / working size."""
    cfg = {"features": {"backend": backend}, "gate": {"method": "parallax"},
           "io": {"long_side": size, "max_frames": frames}}
    if statistic:
        cfg["gate"]["statistic"] = statistic
    res = score_clip(source, config=cfg, preset="background", device=device).to_dict()
    gate, ev = res["gate"], res["gate"].get("evidence") or {}
    decision = gate.get("decision")
    if decision is None and not str(res.get("reason") or "").startswith("gate undecided"):
        decision = NOT_SCORED  # stopped before the gate (decode error, too little texture)
    return {"decision": decision, "statistic": gate.get("statistic"),
            "ci": ev.get("magnitude_ci_ref_px"), "band": ev.get("band_ref_px"),
            "regime": res.get("regime")}


def agreement_clips(args) -> list:
    """(name, expected regime or None, {size: source}) of the grounded and real clips."""
    clips, side = [], max(int(v) for v in args.sizes.split(","))
    folder = Path(tempfile.mkdtemp(prefix="gate_sweep_"))
    for seed in range(args.seeds):
        for cat, opts in AGREE_SCENES[:args.scenes]:
            name = f"{cat} {json.dumps(opts)} seed {seed}"
            # one source per clip (rendered at the largest size, written losslessly), scored at
            # each working size: the axis a user changes with io.long_side
            frames = render_scene(cat, num_frames=args.frames, size=(side * 3 // 4, side),
                                  seed=seed, **opts).frames
            path = write_image_folder(folder / f"{len(clips)}", frames)
            clips.append((name, EXPECTED_REGIME[cat], (lambda p: lambda s: p)(path)))
    if args.real:
        for f in REAL_CLIPS:
            if (REAL_DIR / f).exists():
                clips.append((f, None, (lambda p: lambda s: p)(REAL_DIR / f)))
        for name, pair in REAL_PAIRS:
            if all((REAL_DIR / name / f).exists() for f in pair):
                path = _two_image_folder(folder / f"{name}_{len(clips)}", REAL_DIR / name, pair)
                clips.append((f"{name} {'+'.join(pair)}", None, (lambda p: lambda s: p)(path)))
    return clips


def _two_image_folder(folder: Path, src: Path, names) -> Path:
    """A folder holding copies of ``src/names[0]`` and ``src/names[1]`` as frames 0 and 1."""
    import shutil
    folder.mkdir(parents=True, exist_ok=True)
    for k, n in enumerate(names):
        shutil.copy(src / n, folder / f"{k:05d}{Path(n).suffix.lower()}")
    return folder


def agreement(args) -> dict:
    """Decisions of every clip x backend x size; agreement per axis and overall."""
    backends, sizes = args.backends.split(","), [int(v) for v in args.sizes.split(",")]
    lsizes = [int(v) for v in args.learned_sizes.split(",")] if args.learned_sizes else sizes
    settings = [(b, s) for b in backends for s in sizes if b not in LEARNED or s in lsizes]
    rows, t0 = [], time.time()
    print(f"{'clip':44s} exp  " + " ".join(f"{b[:10]}@{s}" for b, s in settings) + "  agree")
    for name, expected, source in agreement_clips(args):
        frames = args.frames if expected is not None else args.real_frames
        dec, reg = {}, {}
        for s in sizes:
            src = source(s)
            for b in backends:
                if (b, s) in settings:
                    g = gate_decision(src, b, s, frames, args.device, args.statistic)
                    dec[(b, s)] = g["decision"]
                    reg[(b, s)] = g["regime"] if g["decision"] != NOT_SCORED else NOT_SCORED
        rows.append({"clip": name, "expected": expected, "decisions": dec, "regimes": reg})
        same = len({d for d in dec.values() if d != NOT_SCORED}) <= 1
        cells = [(f"{dec[k]}/{reg[k]}", len(k[0][:10]) + 1 + len(str(k[1]))) for k in settings]
        print(f"{name[:44]:44s} {expected or '-':3s}  " + " ".join(f"{c:>{n}s}" for c, n in cells)
              + f"  {'yes' if same else 'NO'}", flush=True)
    out = summarise(rows, backends, sizes, settings, time.time() - t0)
    regimes = summarise([dict(r, decisions=r["regimes"]) for r in rows], backends, sizes,
                        settings, 0.0)
    out["regime_agreement"] = regimes["agreement"]
    out["regime_disagreeing"] = regimes["disagreeing"]
    return out


def summarise(rows, backends, sizes, settings, seconds) -> dict:
    """Agreement rates: per backend axis (clip x size groups), per size axis (clip x backend
    groups), overall (clips), U-compatible (H / F never both present), grounded accuracy."""
    def rate(groups):
        groups = [[d for d in g if d != NOT_SCORED] for g in groups]
        groups = [g for g in groups if len(g) > 1]
        return round(sum(len(set(g)) == 1 for g in groups) / len(groups), 4) if groups else 1.0

    by_size = [[r["decisions"][(b, s)] for b in backends if (b, s) in r["decisions"]]
               for r in rows for s in sizes]
    by_backend = [[r["decisions"][(b, s)] for s in sizes if (b, s) in r["decisions"]]
                  for r in rows for b in backends]
    overall = [[d for d in r["decisions"].values() if d != NOT_SCORED] for r in rows]
    compatible = sum(not {"H", "F"} <= set(g) and None not in g for g in overall)
    grounded = [r for r in rows if r["expected"] is not None]
    correct = sum(all(d == r["expected"] for d in r["decisions"].values() if d != NOT_SCORED)
                  for r in grounded)
    disagree = [r["clip"] for r, g in zip(rows, overall) if len(set(g)) > 1]
    not_scored = [f"{r['clip']} {b}@{s}" for r in rows for (b, s), d in r["decisions"].items()
                  if d == NOT_SCORED]
    return {"agreement": {"backend": rate(by_size), "size": rate(by_backend),
                          "overall": rate(overall),
                          "u_compatible": round(compatible / max(len(rows), 1), 4)},
            "grounded_all_correct": round(correct / len(grounded), 4) if grounded else None,
            "clips": len(rows), "settings": [f"{b}@{s}" for b, s in settings],
            "disagreeing": disagree, "not_scored": not_scored, "seconds": round(seconds, 1),
            "decisions": {r["clip"]: {f"{b}@{s}": d for (b, s), d in r["decisions"].items()}
                          for r in rows}}


def _rate_text(value: Optional[float]) -> str:
    """A rate with three decimals, "n/a" when nothing was counted (e.g. no grounded clip)."""
    return "n/a" if value is None else f"{value:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default=None, help="agreement mode: comma list of backends")
    ap.add_argument("--sizes", default=None, help="agreement mode: comma list of long sides")
    ap.add_argument("--learned-sizes", default=None, help="sizes for the learned backends")
    ap.add_argument("--real-frames", type=int, default=16, help="frames of each real clip")
    ap.add_argument("--no-real", dest="real", action="store_false", help="grounded clips only")
    ap.add_argument("--scenes", type=int, default=len(AGREE_SCENES),
                    help="agreement mode: the first N grounded scenes (6: one per category)")
    ap.add_argument("--statistic", default=None, help="gate.statistic (default: configured)")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--long-side", type=int, default=320)
    ap.add_argument("--pairs", default="first_last", help="gate pairs: first_last | adjacent")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**QUICK)
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.backends or args.sizes:
        args.backends = args.backends or "opencv-sift"
        args.sizes = args.sizes or str(args.long_side)
        out = agreement(args)
        a = out["agreement"]
        r = out["regime_agreement"]
        print(f"gate decision (H / F / U) agreement: backend {a['backend']:.3f}  size "
              f"{a['size']:.3f}  overall {a['overall']:.3f}  (U-compatible "
              f"{a['u_compatible']:.3f}); grounded all-correct "
              f"{_rate_text(out['grounded_all_correct'])};"
              f" disagreeing: {out['disagreeing'] or 'none'}")
        print(f"regime (H / F, U resolved) agreement: backend {r['backend']:.3f}  size "
              f"{r['size']:.3f}  overall {r['overall']:.3f}; disagreeing: "
              f"{out['regime_disagreeing'] or 'none'}")
        print("RESULT " + json.dumps({"benchmark": "gate_sweep", "mode": "agreement", **out}))
        return 0
    scenes = QUICK_SCENES if args.quick else SCENES
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
