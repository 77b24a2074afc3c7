"""Frames per second of ``score_clip`` (background only, default CPU backends) against the plain
OpenCV script a user would write instead, on the same clips at the same working resolution.

OpenCV reference, per clip: decode (cv2.VideoCapture), resize to the working size (INTER_AREA),
gray, SIFT with 2000 features per frame, BFMatcher 2-NN with Lowe ratio 0.75, and per adjacent
pair ``findHomography(RANSAC, 2 px)`` + ``findFundamentalMat(FM_RANSAC, 1 px, 0.999)``.
Ours: ``score_clip(path, preset="background")`` with the default config (scales {1/4, 1/2, 1},
weight-free motion masks, parallax gate, both models fitted in one batched call each) except the
working resolution. Threads: the OpenCV script keeps OpenCV's default thread settings (what a
user gets; ``cv2.getNumThreads()`` is reported); ours uses ``torch.set_num_threads(os.cpu_count())``
and the opencv-sift frame pool's default of ``os.cpu_count()`` workers. Both run in the same
process, one after the other, clip by clip; decode time is included on both sides. Each clip is
timed ``--repeats`` times on each side (alternating) and the fastest run counts: noise on a shared
machine only ever adds time, so the minimum is the stable figure (every run's time is printed).

Peak memory: ``real/vtest_120.mp4`` (768x576, static camera, walking people) looped forwards /
backwards to a 120-frame and an 800-frame mp4, each scored at a 1024 px long side with the
default preset ("geocon": background + foreground) and with ``preset="background"``, each run in
a fresh subprocess whose own ``ru_maxrss`` is its peak RSS: ``peak_rss_mb`` =
``{"geocon_120", "geocon_800", "background_120", "background_800"}`` (``memory_seconds`` the
matching times). Memory must not grow with the clip's length (frames streamed, features in
chunks of ``features.chunk_frames`` frames, object masks kept at the segmentation's size).

    python benchmarks/pipeline.py [--long-side 640] [--frames 48] [--repeats 2] [--skip-memory]
                                  [--torch-threads N]

Last line: ``RESULT {"fps", "opencv_fps", "ratio_vs_opencv", "peak_rss_mb": {...}, ...}``.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT.parent / "shared" / "data"
CLIPS = ["real/realshort.mp4", "real/vtest_120.mp4", "aigc/cogvideox/1.mp4"]


def opencv_script(path: Path, long_side: int, max_frames: int) -> dict:
    """What a user would write: returns frames processed and the median inlier ratios."""
    import cv2
    import numpy as np

    cap = cv2.VideoCapture(str(path))
    grays = []
    while len(grays) < max_frames:
        ok, frame = cap.read()
        if not ok:
            break
        h, w = frame.shape[:2]
        s = long_side / max(h, w)
        size = (int(round(w * s / 2)) * 2, int(round(h * s / 2)) * 2)
        frame = cv2.resize(frame, size, interpolation=cv2.INTER_AREA if s < 1 else
                           cv2.INTER_LINEAR)
        grays.append(cv2.cvtColor(frame, cv2.COLOR_BGR2GRAY))
    cap.release()
    sift = cv2.SIFT_create(nfeatures=2000)
    feats = [sift.detectAndCompute(g, None) for g in grays]
    bf = cv2.BFMatcher(cv2.NORM_L2)
    ir_h, ir_f = [], []
    for (k1, d1), (k2, d2) in zip(feats[:-1], feats[1:]):
        if d1 is None or d2 is None or len(k1) < 2 or len(k2) < 2:
            continue
        good = [m for m, n in (p for p in bf.knnMatch(d1, d2, k=2) if len(p) == 2)
                if m.distance < 0.75 * n.distance]
        if len(good) < 8:
            continue
        x1 = np.float32([k1[m.queryIdx].pt for m in good])
        x2 = np.float32([k2[m.trainIdx].pt for m in good])
        _, mh = cv2.findHomography(x1, x2, cv2.RANSAC, 2.0)
        _, mf = cv2.findFundamentalMat(x1, x2, cv2.FM_RANSAC, 1.0, 0.999)
        if mh is not None:
            ir_h.append(float(mh.mean()))
        if mf is not None:
            ir_f.append(float(mf.mean()))
    return {"frames": len(grays), "ir_h": float(np.median(ir_h)) if ir_h else None,
            "ir_f": float(np.median(ir_f)) if ir_f else None}


def ours(path: Path, long_side: int, max_frames: int) -> dict:
    from geocon_torch import score_clip

    d = score_clip(path, config={"io": {"long_side": long_side, "max_frames": max_frames}},
                   preset="background").to_dict()
    return {"frames": d.get("frames", 0), "status": d["status"], "regime": d["regime"],
            "ir": d["background"].get("ir"), "ir_h": d["background"].get("ir_h"),
            "ir_f": d["background"].get("ir_f"), "timing": d["timing_s"]}


MEMORY_CHILD = r"""
import os, resource, sys, time, torch
torch.set_num_threads(os.cpu_count() or 1)
sys.path.insert(0, sys.argv[3])
from geocon_torch import score_clip
t0 = time.perf_counter()
d = score_clip(sys.argv[1], config={"io": {"long_side": 1024}}, preset=sys.argv[2],
               progress=False).to_dict()
print("MEM", d["status"], d["frames"], "x".join(map(str, d["working_size"])),
      round(time.perf_counter() - t0, 1), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""
MEMORY_FRAMES = (120, 800)
MEMORY_PRESETS = ("geocon", "background")


def memory_clips(tmp: Path) -> dict:
    """{frames: path}: ``real/vtest_120.mp4`` (768x576, static camera, walking people) played
    forwards and backwards until it has 120 / 800 frames (scored at a 1024 px long side)."""
    import torch

    from geocon_torch.io import read_clip, write_video

    src = read_clip(DATA / "real" / "vtest_120.mp4", long_side=None).frames
    out = {}
    for n in MEMORY_FRAMES:
        loops = [src if k % 2 == 0 else src.flip(0) for k in range(-(-n // src.shape[0]))]
        out[n] = write_video(tmp / f"vtest_{n}.mp4", torch.cat(loops)[:n], fps=10)
    return out


def memory_probe(tmp: Path, presets=MEMORY_PRESETS) -> dict:
    """Peak RSS (MB) and seconds of ``score_clip`` at 1024 px on the 120- and 800-frame clips,
    for each preset, each run in a fresh subprocess (its own ``ru_maxrss``)."""
    clips = memory_clips(tmp)
    peak, secs, info = {}, {}, {}
    for preset in presets:
        for n, path in clips.items():
            out = subprocess.run([sys.executable, "-c", MEMORY_CHILD, str(path), preset,
                                  str(ROOT)], capture_output=True, text=True, check=True)
            line = [x for x in out.stdout.splitlines() if x.startswith("MEM ")][-1].split()
            key = f"{preset}_{n}"
            peak[key], secs[key] = round(int(line[5]) / 1024.0, 1), float(line[4])
            info[key] = f"{line[1]} {line[2]} frames {line[3]}"
            print(f"memory {key}: {peak[key]} MB, {secs[key]} s ({info[key]})", flush=True)
    return {"peak_rss_mb": peak, "memory_seconds": secs, "memory_clips": info}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long-side", type=int, default=640)
    ap.add_argument("--frames", type=int, default=48, help="max frames per clip")
    ap.add_argument("--repeats", type=int, default=2,
                    help="timed runs per clip and side; the fastest counts")
    ap.add_argument("--skip-memory", action="store_true")
    ap.add_argument("--memory-only", action="store_true",
                    help="only the peak-RSS probes (no speed comparison)")
    ap.add_argument("--torch-threads", type=int, default=os.cpu_count() or 1,
                    help="torch threads on our side (default: all cores)")
    args = ap.parse_args()
    if args.memory_only:
        with tempfile.TemporaryDirectory() as tmp:
            print("RESULT " + json.dumps(memory_probe(Path(tmp))))
        return 0
    import cv2
    import torch

    threads = os.cpu_count() or 1  # opencv-sift frame-pool workers (its default)
    torch.set_num_threads(args.torch_threads)  # ours; OpenCV keeps its defaults on both sides
    cv_threads = cv2.getNumThreads()
    clips = [DATA / c for c in CLIPS if (DATA / c).is_file()]
    if not clips:
        print(f"no shared clips under {DATA}")
        return 1
    ours(clips[0], args.long_side, 4)  # warm-up (imports, extractor construction)
    t_ours = t_cv = 0.0
    n_ours = n_cv = 0
    print(f"threads: ours torch={torch.get_num_threads()} (interop "
          f"{torch.get_num_interop_threads()}), sift workers={threads}, cv2={cv_threads}; "
          f"opencv script: cv2={cv_threads} (default), torch unused")
    print(f"{'clip':28s} {'frames':>6s} {'ours s':>8s} {'opencv s':>9s}  ours IR_H/IR_F"
          f"  opencv IR_H/IR_F  regime")
    for path in clips:
        runs_ours, runs_cv = [], []
        for _ in range(max(1, args.repeats)):  # alternating, so drifts in load hit both sides
            t0 = time.perf_counter()
            a = ours(path, args.long_side, args.frames)
            t1 = time.perf_counter()
            b = opencv_script(path, args.long_side, args.frames)
            t2 = time.perf_counter()
            runs_ours.append(t1 - t0)
            runs_cv.append(t2 - t1)
        t_a, t_b = min(runs_ours), min(runs_cv)
        t_ours, t_cv = t_ours + t_a, t_cv + t_b
        n_ours, n_cv = n_ours + a["frames"], n_cv + b["frames"]
        f = lambda v: "None" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"{path.name:28s} {a['frames']:6d} {t_a:8.2f} {t_b:9.2f}  "
              f"{f(a['ir_h'])}/{f(a['ir_f'])}     {f(b['ir_h'])}/{f(b['ir_f'])}     "
              f"{a['regime']}  runs ours {[round(v, 2) for v in runs_ours]} opencv "
              f"{[round(v, 2) for v in runs_cv]}  stages (last) {a['timing']}")
    result = {"fps": round(n_ours / t_ours, 2), "opencv_fps": round(n_cv / t_cv, 2),
              "ratio_vs_opencv": round((n_ours / t_ours) / (n_cv / t_cv), 3),
              "long_side": args.long_side, "frames": n_ours, "repeats": max(1, args.repeats),
              "torch_threads": args.torch_threads,
              "sift_workers": threads, "cv2_threads": cv_threads}
    if not args.skip_memory:
        with tempfile.TemporaryDirectory() as tmp:
            result.update(memory_probe(Path(tmp)))
    else:
        result["peak_rss_mb"] = None
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
