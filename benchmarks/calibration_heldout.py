"""The shipped report-gate calibration on clips it never saw (issue 22 item 1).

    .venv/bin/python benchmarks/calibration_heldout.py [--sizes 256,512,1024] [--frames 16]
        [--motions pan,roll,truck,arc,dolly] [--seeds 1] [--no-real] [--save rows.json]
        [--rows rows.json] [--calibration FILE]

Held-out family: :mod:`geocon_torch.synth.planes` (textured planes at several depths, another
renderer and texture generator than the grounded scenes the calibration is fitted on), rendered
at 640x384, clean and with each background corruption (rubber_sheet, background_slide,
breathing) at severity 0.5 and 1.0, scored (preset background, calibration off) at every working
long side of ``--sizes``; plus the shared real rigid clips (``../shared/data/real``: realshort,
the three hill photos as a clip, the graf pair, box and vtest_120: static cameras whose movers
the background section masks), first ``--real-frames`` frames. Every clip is then judged with
the calibration file (default: the shipped one of the backend), the bound(s) it fails named as
``geocon explain`` does (:func:`geocon_torch.bench.calibration.row_checks`).

Prints per size the clean / corrupted pass rates (targets: clean >= 0.95, corrupted <= 0.05),
per corruption, each real clip's verdict and failed bounds, and a RESULT json line. The scored
rows do not depend on the calibration: ``--save`` keeps them, ``--rows`` judges saved rows with
another ``--calibration`` without rescoring (how before / after figures share their clips).
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from geocon_torch.bench.calibration import (BACKGROUND_CORRUPTIONS, calibration_row,
                                           row_checks)
from geocon_torch.io.calibration import DEFAULT_DIR
from geocon_torch.pipeline import score_clip, score_clips
from geocon_torch.synth import PLANE_MOTIONS, apply_corruption, render_planes

REAL_DIR = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"
#: the rigid real clips: (name, file / folder under REAL_DIR, frames to copy for a folder)
REAL_CLIPS = [("realshort", "realshort.mp4", None), ("hill", "hill", ("1.JPG", "2.JPG", "3.JPG")),
              ("graf", "graf", ("graf1.png", "graf3.png")), ("box", "box.mp4", None),
              ("vtest_120", "vtest_120.mp4", None)]
SEVERITIES = (0.5, 1.0)
NATIVE = (384, 640)  # (H, W) of the held-out renders


def config(backend: str, long_side: int, max_frames: int | None = None) -> dict[str, Any]:
    io = {"long_side": int(long_side)}
    if max_frames:
        io["max_frames"] = int(max_frames)
    return {"features": {"backend": backend}, "background": {"calibration": None}, "io": io}


def score_heldout(args) -> list[dict[str, Any]]:
    """Rows of every held-out clip x working size (one score_clips batch per scene and size)."""
    rows = []
    sizes = [int(v) for v in args.sizes.split(",")]
    for motion in [m for m in args.motions.split(",") if m]:
        for seed in range(args.first_seed, args.first_seed + args.seeds):
            clean = render_planes(motion, num_frames=args.frames, size=NATIVE, seed=seed).frames
            labels = [{"family": "planes", "motion": motion, "seed": seed, "corruption": None,
                       "severity": 0.0, "expected_regime": PLANE_MOTIONS[motion]}]
            frames = [clean]
            for kind in BACKGROUND_CORRUPTIONS:
                for sev in SEVERITIES:
                    labels.append(dict(labels[0], corruption=kind, severity=sev))
                    frames.append(apply_corruption(clean, kind, sev, seed=seed))
            for size in sizes:
                t0 = time.time()
                res = score_clips(frames, config=config(args.backend, size), preset="background",
                                  device=args.device)
                rows.extend(dict(calibration_row(lb, r.to_dict()), size=size)
                            for lb, r in zip(labels, res))
                print(f"  planes {motion} seed {seed} @{size}: {len(frames)} clips "
                      f"{time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    return rows


def score_real(args) -> list[dict[str, Any]]:
    """Rows of every shared real rigid clip x working size (first ``--real-frames`` frames)."""
    rows, folder = [], Path(tempfile.mkdtemp(prefix="cal_heldout_"))
    for name, rel, picks in REAL_CLIPS:
        src = Path(args.real_dir) / rel
        if not src.exists():
            print(f"  {name}: not found at {src}, skipped", file=sys.stderr)
            continue
        if picks:  # a folder of the chosen photos as frames 0, 1, ...
            dst = folder / name
            dst.mkdir(parents=True, exist_ok=True)
            for k, p in enumerate(picks):
                shutil.copy(src / p, dst / f"{k:05d}{Path(p).suffix.lower()}")
            src = dst
        for size in (int(v) for v in args.sizes.split(",")):
            t0 = time.time()
            res = score_clip(str(src), config=config(args.backend, size, args.real_frames),
                             preset="background", device=args.device).to_dict()
            label = {"family": "real", "clip": name, "corruption": None, "severity": 0.0}
            rows.append(dict(calibration_row(label, res), size=size))
            print(f"  real {name} @{size}: {time.time() - t0:.1f} s", file=sys.stderr,
                  flush=True)
    shutil.rmtree(folder, ignore_errors=True)
    return rows


def failed_bounds(row: dict[str, Any], thresholds: dict[str, Any]) -> str:
    """The bounds the row fails, as ``geocon explain`` words them ('' when it passes, the
    status when it was not scored)."""
    if row.get("status") != "ok":
        return f"not scored ({row.get('status')})"
    checks = row_checks(row, thresholds)
    if not checks:
        return f"no thresholds for regime {row.get('regime')}"
    return "; ".join(c.describe() for c in checks if not c.passed)


def judged(row: dict[str, Any], thresholds: dict[str, Any]) -> bool | None:
    """The calibrated verdict of a row (None when not scored)."""
    checks = row_checks(row, thresholds)
    return all(c.passed for c in checks) if checks else None


def rate(verdicts: list[bool | None]) -> float | None:
    known = [v for v in verdicts if v is not None]
    return round(sum(known) / len(known), 4) if known else None


def summarise(rows: list[dict[str, Any]], thresholds: dict[str, Any]) -> dict[str, Any]:
    """Pass rates per size (clean, corrupted, per corruption) and the real clips' verdicts."""
    out: dict[str, Any] = {"sizes": {}, "real": {}}
    held = [r for r in rows if r.get("family") == "planes"]
    for size in sorted({r["size"] for r in held}):
        at = [r for r in held if r["size"] == size]
        cell = {"clean": rate([judged(r, thresholds) for r in at if r["corruption"] is None]),
                "corrupted": rate([judged(r, thresholds) for r in at
                                   if r["corruption"] is not None])}
        for kind in BACKGROUND_CORRUPTIONS:
            cell[kind] = rate([judged(r, thresholds) for r in at if r["corruption"] == kind])
        cell["n_clean"] = sum(r["corruption"] is None for r in at)
        cell["n_corrupted"] = sum(r["corruption"] is not None for r in at)
        out["sizes"][str(size)] = cell
    for r in rows:
        if r.get("family") == "real":
            out["real"][f"{r['clip']}@{r['size']}"] = judged(r, thresholds)
    real = list(out["real"].values())
    out["real_pass"] = f"{sum(bool(v) for v in real)}/{len(real)}"
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sizes", default="256,512,1024")
    ap.add_argument("--frames", type=int, default=16)
    ap.add_argument("--motions", default=",".join(PLANE_MOTIONS))
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--first-seed", type=int, default=1000,
                    help="held-out seeds start here (default 1000)")
    ap.add_argument("--real-frames", type=int, default=16)
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--real-dir", default=str(REAL_DIR),
                    help="the shared real clips (default ../shared/data/real)")
    ap.add_argument("--backend", default="opencv-sift")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--calibration", default=None,
                    help="calibration file (default: the shipped one of --backend)")
    ap.add_argument("--save", default=None, help="write the scored rows here (JSON)")
    ap.add_argument("--rows", default=None, help="judge these saved rows, no scoring")
    args = ap.parse_args()
    cal_path = Path(args.calibration or DEFAULT_DIR / f"{args.backend}.json")
    cal = json.loads(cal_path.read_text())
    th = cal["thresholds"]
    t0 = time.time()
    if args.rows:
        rows = json.loads(Path(args.rows).read_text())["rows"]
    else:
        rows = score_heldout(args) + ([] if args.no_real else score_real(args))
        if args.save:
            Path(args.save).write_text(json.dumps({"rows": rows}, allow_nan=False))
    summary = summarise(rows, th)
    print(f"calibration {cal_path.name} (hash {cal.get('content_hash')}), "
          f"{len(rows)} rows, {time.time() - t0:.0f} s")
    print(f"{'size':>5s} {'clean':>7s} {'corrupt':>8s} " + " ".join(
        f"{k:>17s}" for k in BACKGROUND_CORRUPTIONS))
    for size, c in summary["sizes"].items():
        print(f"{size:>5s} {c['clean']!s:>7s} {c['corrupted']!s:>8s} " + " ".join(
            f"{c[k]!s:>17s}" for k in BACKGROUND_CORRUPTIONS)
            + f"   (n {c['n_clean']} clean, {c['n_corrupted']} corrupted)")
    print("held-out clips that the gate gets wrong:")
    for r in rows:
        if r.get("family") != "planes":
            continue
        ok, want = judged(r, th), r["corruption"] is None
        if ok is not want:
            print(f"  {r['motion']:5s} {r['corruption'] or 'clean':16s} {r['severity']:.1f} "
                  f"@{r['size']:<4d} {r.get('regime')}: "
                  f"{'passes' if ok else failed_bounds(r, th)}")
    print("real rigid clips:")
    for r in rows:
        if r.get("family") == "real":
            print(f"  {r['clip']:10s} @{r['size']:<4d} {r.get('regime')} "
                  f"pass_calibrated {judged(r, th)}  {failed_bounds(r, th)}")
    print("RESULT " + json.dumps(dict(summary, calibration=cal_path.name,
                                      hash=cal.get("content_hash"))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
