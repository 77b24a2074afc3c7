"""Frames per second of the feature backends: kornia-sift vs opencv-sift (extract + adjacent-pair
ratio matching) and LK tracks (torch vs OpenCV), at 640x384 and 1024x720, in one run.

    python benchmarks/features.py [--device cpu|cuda] [--frames 6] [--max-keypoints 2000]

Frames come from ../shared/data/real/realshort.mp4 resized (synthetic textured frames if it is
absent). Prints a table; the last line is ``RESULT {json}``.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from geocon_torch.features import get_extractor, lk_tracks, match_descriptors

SIZES = [(384, 640), (720, 1024)]
CLIP = Path(__file__).resolve().parents[2] / "shared" / "data" / "real" / "realshort.mp4"


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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--max-keypoints", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    src, origin = load_frames(args.frames)
    t = src.shape[0]
    pairs = torch.stack([torch.arange(t - 1), torch.arange(1, t)], 1)
    kornia = get_extractor("kornia-sift", max_keypoints=args.max_keypoints, device=device)
    opencv = get_extractor("opencv-sift", max_keypoints=args.max_keypoints)
    result = {"device": str(device), "frames": t, "max_keypoints": args.max_keypoints,
              "threads": torch.get_num_threads(), "source": origin}
    rows = []
    for h, w in SIZES:
        gray = F.interpolate(src, size=(h, w), mode="bilinear", align_corners=False,
                             antialias=True).clamp(0, 1)
        g_dev = gray.to(device)
        tag = f"{w}x{h}"

        def sift(ex, g):
            return lambda: match_descriptors(ex.extract(g), pairs.to(g.device))

        times = {
            "kornia_sift": timed(sift(kornia, g_dev), device, args.repeats),
            "opencv_sift": timed(sift(opencv, gray), torch.device("cpu"), args.repeats),
            "lk_torch": timed(lambda: lk_tracks(g_dev, pairs.to(device),
                                                max_corners=args.max_keypoints), device,
                              args.repeats),
            "lk_opencv": timed(lambda: lk_tracks(gray, pairs, max_corners=args.max_keypoints,
                                                 backend="opencv"), torch.device("cpu"),
                               args.repeats),
        }
        fps = {k: t / v for k, v in times.items()}
        for k, v in fps.items():
            result[f"{k}_fps_{tag}"] = round(v, 3)
        result[f"kornia_vs_opencv_{tag}"] = round(fps["kornia_sift"] / fps["opencv_sift"], 3)
        result[f"lk_torch_vs_opencv_{tag}"] = round(fps["lk_torch"] / fps["lk_opencv"], 3)
        rows.append((tag, fps))
    print(f"features benchmark: {origin}, device {device}, {torch.get_num_threads()} threads, "
          f"{args.max_keypoints} keypoints, fps = frames / s (extract + adjacent matching)")
    print(f"{'size':>10} {'kornia-sift':>12} {'opencv-sift':>12} {'ratio':>7} "
          f"{'lk-torch':>10} {'lk-opencv':>10} {'ratio':>7}")
    for tag, f in rows:
        print(f"{tag:>10} {f['kornia_sift']:12.2f} {f['opencv_sift']:12.2f} "
              f"{f['kornia_sift'] / f['opencv_sift']:7.3f} {f['lk_torch']:10.2f} "
              f"{f['lk_opencv']:10.2f} {f['lk_torch'] / f['lk_opencv']:7.3f}")
    print("RESULT " + json.dumps(result, sort_keys=True))


if __name__ == "__main__":
    main()
