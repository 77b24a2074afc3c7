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
a fresh subprocess whose own ``VmHWM`` (/proc/self/status; not ``ru_maxrss``, which on Linux
inherits the parent's RSS at fork) is its peak RSS: ``peak_rss_mb`` =
``{"geocon_120", "geocon_800", "background_120", "background_800"}`` (``memory_seconds`` the
matching times). Memory must not grow with the clip's length (frames streamed, features in
chunks of ``features.chunk_frames`` frames, object masks kept at the segmentation's size).

Bounded cost (``--cost``, on by default; ``--skip-cost`` skips it): ``score_clip`` with the
default preset ("geocon": background + foreground) on clips of one size and length
(``COST_FRAMES`` frames at ``COST_SIZE``, H x W): the grounded categories C1-C6 clean and with
each corruption of :mod:`geocon_torch.synth.corruptions` (severity 0.6), and the shared clips
(first frames, centre-cropped to the aspect and resized). A clip's cost is the CPU seconds
(user + system, every thread) of its ``score_clip`` call on ``--device cpu``, run with
``--cost-threads`` torch threads (default 1: on a loaded machine OpenMP threads waiting for a
descheduled peer spin and inflate CPU time several-fold, so CPU seconds of one thread are the
stable measure of a clip's work), its wall seconds on CUDA;
``worst_over_median`` = the largest cost over the median (target <= 3), ``worst_clip`` names it,
``cost_s`` / ``cost_wall_s`` list every clip and ``worst_over_median_wall`` is the same ratio of
wall seconds.

Threads: ``user_s`` / ``system_s`` = CPU seconds of the process and its children
(``resource.getrusage`` RUSAGE_SELF + RUSAGE_CHILDREN) over the speed comparison and the cost
part (the scoring; not the memory probes), ``user_over_system`` their ratio (target >= 2: no
oversubscription between torch, OpenCV and the SIFT frame pool), ``minor_faults`` the page
faults over the same span.

``--device cuda``: our side (speed and cost parts) runs on the GPU (the OpenCV script stays on
the CPU). ``--quick``: a smoke run (``QUICK``: one clip, 8 frames at long side 320, one repeat, no
memory probes, four cost clips of 6 frames at 128x224); flags given explicitly still win.

    python benchmarks/pipeline.py [--long-side 640] [--frames 48] [--repeats 2] [--skip-memory]
                                  [--torch-threads N] [--device cpu|cuda] [--quick]
                                  [--skip-cost] [--memory-only]

Last line: ``RESULT {"fps", "opencv_fps", "ratio_vs_opencv", "worst_over_median", "worst_clip",
"user_s", "system_s", "user_over_system", "peak_rss_mb": {...}, ...}``.
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
#: the shared clips: ../shared/data beside the checkout, else shared/data inside it (the copy a
#: device machine gets: only the checkout travels there)
DATA = next((d for d in (ROOT.parent / "shared" / "data", ROOT / "shared" / "data")
             if d.is_dir()), ROOT.parent / "shared" / "data")
CLIPS = ["real/realshort.mp4", "real/vtest_120.mp4", "aigc/cogvideox/1.mp4"]
#: the cost part: clips of COST_FRAMES frames at COST_SIZE (H, W), default preset
COST_SIZE, COST_FRAMES, COST_SEVERITY = (384, 640), 24, 0.6
#: grounded (category, corruption or None); every corruption kind appears at least once
COST_GROUNDED = [("C1", None), ("C2", None), ("C3", None), ("C4", None), ("C5", None),
                 ("C6", None), ("C2", "rubber_sheet"), ("C3", "rubber_sheet"),
                 ("C2", "breathing"), ("C2", "flicker"), ("C3", "background_slide"),
                 ("C4", "nonrigid_object")]
COST_SHARED = ["real/realshort.mp4", "real/vtest_120.mp4", "real/box.mp4", "real/bikes.mp4",
               "aigc/cogvideox/1.mp4", "aigc/cogvideox/3.mp4"]
#: defaults of ``--quick`` (flags given explicitly still win)
QUICK = {"frames": 8, "long_side": 320, "repeats": 1, "skip_memory": True, "speed_clips": 1,
         "cost_size": "128x224", "cost_frames": 6}
QUICK_GROUNDED = [("C2", None), ("C4", None), ("C2", "rubber_sheet")]
QUICK_SHARED = ["real/realshort.mp4"]


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
    t_sift = time.perf_counter()
    feats = [sift.detectAndCompute(g, None) for g in grays]
    t_sift = time.perf_counter() - t_sift
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
    return {"frames": len(grays), "sift_s": t_sift,
            "ir_h": float(np.median(ir_h)) if ir_h else None,
            "ir_f": float(np.median(ir_f)) if ir_f else None}


def ours(path: Path, long_side: int, max_frames: int, device: str = "cpu") -> dict:
    from geocon_torch import score_clip

    d = score_clip(path, config={"io": {"long_side": long_side, "max_frames": max_frames}},
                   preset="background", device=device, progress=False).to_dict()
    return {"frames": d.get("frames", 0), "status": d["status"], "regime": d["regime"],
            "ir": d["background"].get("ir"), "ir_h": d["background"].get("ir_h"),
            "ir_f": d["background"].get("ir_f"), "timing": d["timing_s"]}


def usage() -> dict:
    """CPU seconds (user, system) and minor page faults of this process and its children."""
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"user_s": a.ru_utime + b.ru_utime, "system_s": a.ru_stime + b.ru_stime,
            "minor_faults": a.ru_minflt + b.ru_minflt}


def usage_since(u0: dict) -> dict:
    """``user_s``, ``system_s``, ``user_over_system``, ``minor_faults`` since ``u0``."""
    u1 = usage()
    d = {k: u1[k] - u0[k] for k in u0}
    return {"user_s": round(d["user_s"], 2), "system_s": round(d["system_s"], 2),
            "user_over_system": round(d["user_s"] / max(d["system_s"], 1e-3), 2),
            "minor_faults": int(d["minor_faults"])}


def fit_frames(frames, size: tuple, n: int):
    """(T, 3, h, w) uint8 -> (n, 3, H, W) uint8: the first n frames (looped if fewer),
    centre-cropped to the aspect of ``size`` and resized (antialiased bilinear)."""
    import torch
    import torch.nn.functional as F

    frames = frames[torch.arange(n) % frames.shape[0]]
    h, w = frames.shape[-2:]
    ch, cw = min(h, round(w * size[0] / size[1])), min(w, round(h * size[1] / size[0]))
    y, x = (h - ch) // 2, (w - cw) // 2
    crop = frames[..., y:y + ch, x:x + cw].float()
    out = F.interpolate(crop, size=tuple(size), mode="bilinear", antialias=True,
                        align_corners=False)
    return out.round().clamp(0, 255).to(torch.uint8)


def cost_clips(size: tuple, n: int, quick: bool, device: str = "cpu"):
    """Yield (name, (n, 3, H, W) uint8) for the cost part: grounded scenes (rendered on
    ``device``), then shared clips."""
    from geocon_torch.io import read_clip
    from geocon_torch.synth import render_scene

    for cat, corr in (QUICK_GROUNDED if quick else COST_GROUNDED):
        clip = render_scene(cat, num_frames=n, size=tuple(size), seed=0, corruption=corr,
                            severity=COST_SEVERITY if corr else 0.0, device=device)
        yield f"{cat}{'+' + corr if corr else ''}", clip.frames
    for rel in (QUICK_SHARED if quick else COST_SHARED):
        if (DATA / rel).is_file():
            src = read_clip(DATA / rel, long_side=None, max_frames=n).frames
            yield Path(rel).name, fit_frames(src, size, n)


def cost_probe(size: tuple, n: int, device: str, quick: bool, threads: int = 1) -> dict:
    """Per-clip cost of ``score_clip`` (default preset) on same-size, same-length clips and
    ``worst_over_median`` (module docstring); ``threads`` torch threads meanwhile (restored)."""
    import statistics

    import torch

    from geocon_torch import score_clip

    config = {"io": {"long_side": max(size)}}
    cost, wall = {}, {}
    before = torch.get_num_threads()
    torch.set_num_threads(max(1, threads))
    print(f"cost part: {n} frames at {size[0]}x{size[1]} (H x W), preset geocon, {device}, "
          f"torch threads {torch.get_num_threads()}")
    for name, frames in cost_clips(size, n, quick, device):
        if not cost:  # warm-up (flow backend, first-use allocations), not counted
            score_clip(frames[:4], config=config, device=device, progress=False)
        c0, t0 = time.process_time(), time.perf_counter()
        d = score_clip(frames, config=config, device=device, progress=False).to_dict()
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        wall[name] = round(time.perf_counter() - t0, 2)
        cost[name] = wall[name] if torch.device(device).type == "cuda" else round(
            time.process_time() - c0, 2)
        fg = d.get("foreground") or {}
        seg = (d.get("background") or {}).get("segment") or {}
        print(f"  {name:26s} cost {cost[name]:7.2f} s  wall {wall[name]:7.2f} s  "
              f"{d['status']} {d.get('regime')}  objects {seg.get('objects')} "
              f"(candidates {seg.get('candidates')})  fg skipped {fg.get('skipped')}  "
              f"stages {d['timing_s']}", flush=True)
    torch.set_num_threads(before)
    med, med_w = statistics.median(cost.values()), statistics.median(wall.values())
    worst = max(cost, key=cost.get)
    return {"worst_over_median": round(cost[worst] / max(med, 1e-9), 3), "worst_clip": worst,
            "median_cost_s": round(med, 2),
            "worst_over_median_wall": round(max(wall.values()) / max(med_w, 1e-9), 3),
            "cost_s": cost, "cost_wall_s": wall, "cost_size": list(size), "cost_frames": n,
            "cost_torch_threads": max(1, threads),
            "cost_measure": "wall s" if torch.device(device).type == "cuda" else "cpu s"}


MEMORY_CHILD = r"""
import os, resource, sys, time, torch
def hwm_kb():  # this process's own peak RSS: VmHWM restarts at exec, unlike ru_maxrss, which
    with open("/proc/self/status") as f:  # inherits the parent's RSS at fork (Linux)
        return int([l for l in f if l.startswith("VmHWM:")][0].split()[1])
torch.set_num_threads(os.cpu_count() or 1)
sys.path.insert(0, sys.argv[3])
from geocon_torch import score_clip
t0 = time.perf_counter()
d = score_clip(sys.argv[1], config={"io": {"long_side": 1024}}, preset=sys.argv[2],
               progress=False).to_dict()
print("MEM", d["status"], d["frames"], "x".join(map(str, d["working_size"])),
      round(time.perf_counter() - t0, 1), hwm_kb())
"""
MEMORY_FRAMES = (120, 800)
MEMORY_PRESETS = ("geocon", "background")


def memory_clips(tmp: Path) -> dict:
    """{frames: path}: ``real/vtest_120.mp4`` (768x576, static camera, walking people) played
    forwards and backwards until it has 120 / 800 frames (scored at a 1024 px long side)."""
    import torch

    from geocon_torch.io import read_clip, write_video

    source = DATA / "real" / "vtest_120.mp4"
    if not source.is_file():
        raise SystemExit(f"no shared clip {source}: the memory probes loop it (give the shared "
                         f"data beside the checkout, or --skip-memory)")
    src = read_clip(source, long_side=None).frames
    out = {}
    for n in MEMORY_FRAMES:
        loops = [src if k % 2 == 0 else src.flip(0) for k in range(-(-n // src.shape[0]))]
        out[n] = write_video(tmp / f"vtest_{n}.mp4", torch.cat(loops)[:n], fps=10)
    return out


def memory_probe(tmp: Path, presets=MEMORY_PRESETS) -> dict:
    """Peak RSS (MB) and seconds of ``score_clip`` at 1024 px on the 120- and 800-frame clips,
    for each preset, each run in a fresh subprocess (its own ``VmHWM``)."""
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


def parse_args() -> argparse.Namespace:
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
    ap.add_argument("--device", default="cpu",
                    help="where our side runs (cpu | cuda); the OpenCV script stays on the CPU")
    ap.add_argument("--speed-clips", type=int, default=len(CLIPS),
                    help="shared clips in the speed comparison (the first ones of CLIPS)")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    ap.add_argument("--cost", dest="skip_cost", action="store_false",
                    help="bounded-cost part (default: on)")
    ap.add_argument("--skip-cost", dest="skip_cost", action="store_true")
    ap.add_argument("--cost-size", default=f"{COST_SIZE[0]}x{COST_SIZE[1]}",
                    help="H x W of the cost part's clips")
    ap.add_argument("--cost-frames", type=int, default=COST_FRAMES)
    ap.add_argument("--cost-threads", type=int, default=1,
                    help="torch threads during the cost part (default 1: CPU seconds then "
                         "count work, not OpenMP threads waiting for each other under load)")
    ap.set_defaults(skip_cost=False)
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**QUICK)
    return ap.parse_args()


def speed(clips: list, args: argparse.Namespace) -> dict:
    """The speed comparison (ours vs the OpenCV script, clip by clip); printed table."""
    t_ours = t_cv = t_sift = t_feat = 0.0
    n_ours = n_cv = 0
    print(f"{'clip':28s} {'frames':>6s} {'ours s':>8s} {'opencv s':>9s}  ours IR_H/IR_F"
          f"  opencv IR_H/IR_F  regime")
    for path in clips:
        runs_ours, runs_cv, sift_cv, feat_ours = [], [], [], []
        for _ in range(max(1, args.repeats)):  # alternating, so drifts in load hit both sides
            t0 = time.perf_counter()
            a = ours(path, args.long_side, args.frames, args.device)
            t1 = time.perf_counter()
            b = opencv_script(path, args.long_side, args.frames)
            t2 = time.perf_counter()
            runs_ours.append(t1 - t0)
            runs_cv.append(t2 - t1)
            sift_cv.append(b["sift_s"])
            feat_ours.append(a["timing"].get("features", 0.0))
        t_a, t_b = min(runs_ours), min(runs_cv)
        t_ours, t_cv = t_ours + t_a, t_cv + t_b
        t_sift += sift_cv[runs_cv.index(t_b)]  # of the counted (fastest) runs
        t_feat += feat_ours[runs_ours.index(t_a)]
        n_ours, n_cv = n_ours + a["frames"], n_cv + b["frames"]
        f = lambda v: "None" if v is None else f"{v:.3f}"  # noqa: E731
        print(f"{path.name:28s} {a['frames']:6d} {t_a:8.2f} {t_b:9.2f}  "
              f"{f(a['ir_h'])}/{f(a['ir_f'])}     {f(b['ir_h'])}/{f(b['ir_f'])}     "
              f"{a['regime']}  runs ours {[round(v, 2) for v in runs_ours]} opencv "
              f"{[round(v, 2) for v in runs_cv]}  stages (last) {a['timing']}", flush=True)
    return {"fps": round(n_ours / t_ours, 2), "opencv_fps": round(n_cv / t_cv, 2),
            "ratio_vs_opencv": round((n_ours / t_ours) / (n_cv / t_cv), 3),
            "long_side": args.long_side, "frames": n_ours, "repeats": max(1, args.repeats),
            # Amdahl: SIFT is the same OpenCV work on both sides, so ours can be at most
            # 1 / opencv_sift_fraction times faster than the script while it runs OpenCV SIFT
            "opencv_sift_fraction": round(t_sift / t_cv, 3),
            "ratio_bound": round(t_cv / max(t_sift, 1e-9), 3),
            "ours_features_fraction": round(t_feat / t_ours, 3)}


def main() -> int:
    args = parse_args()
    if args.memory_only:
        with tempfile.TemporaryDirectory() as tmp:
            print("RESULT " + json.dumps(memory_probe(Path(tmp))))
        return 0
    import cv2
    import torch

    threads = os.cpu_count() or 1  # opencv-sift frame-pool workers (its default)
    torch.set_num_threads(args.torch_threads)  # ours; OpenCV keeps its defaults on both sides
    cv_threads = cv2.getNumThreads()
    clips = [DATA / c for c in CLIPS[:max(1, args.speed_clips)] if (DATA / c).is_file()]
    if not clips:
        print(f"no shared clips under {DATA}")
        return 1
    ours(clips[0], args.long_side, 4, args.device)  # warm-up (imports, extractor construction)
    print(f"device {args.device}; threads: ours torch={torch.get_num_threads()} (interop "
          f"{torch.get_num_interop_threads()}), sift workers={threads}, cv2={cv_threads}; "
          f"opencv script: cv2={cv_threads} (default), torch unused")
    u0 = usage()
    result = {"device": args.device, "quick": args.quick, **speed(clips, args),
              "torch_threads": args.torch_threads, "sift_workers": threads,
              "cv2_threads": cv_threads}
    if not args.skip_cost:
        size = tuple(int(v) for v in str(args.cost_size).lower().split("x"))
        result.update(cost_probe(size, args.cost_frames, args.device, args.quick,
                                 args.cost_threads))
    result.update(usage_since(u0))
    print(f"scoring CPU time: user {result['user_s']} s, system {result['system_s']} s "
          f"(user/system {result['user_over_system']}), minor faults {result['minor_faults']}")
    if not args.skip_memory:
        with tempfile.TemporaryDirectory() as tmp:
            result.update(memory_probe(Path(tmp)))
    else:
        result["peak_rss_mb"] = None
    print("RESULT " + json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
