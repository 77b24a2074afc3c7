"""Throughput of ``geometric_reward`` on a (8, 49, 3, 256, 448) uint8 batch, on this machine.

* ``kind="epipolar-dpo"`` vs the per-pair reference loop of KupynOrest/epipolar-dpo (OpenCV SIFT
  on both frames of every pair, BFMatcher knn 2 + ratio 0.75, kornia 8-point + Sampson; the
  loop of tests/test_epipolar_dpo.py), both on the CPU in one run: videos/s and their ratio.
  SIFT is the same OpenCV work on both sides; the batched path detects each sampled frame once
  (the loop detects inner frames twice), runs the frames on the extractor's thread pool, and
  matches / fits all pairs of all clips in one batch.
* ``kind="background"``: videos/s (GeoCon IR / GE at native resolution) on ``--device``.
* With ``--device cuda``: the same reward with matching and fitting on the GPU
  (``cuda_videos_per_s``, ``cuda_ratio_vs_reference``).

Clips: the shared clips (../shared/data; 49 frames each, looped when shorter, resized to
448x256), or grounded synthetic scenes when absent. The CPU is shared with other jobs while
this runs, so figures are indicative. Last line: ``RESULT {json}``.

    .venv/bin/python benchmarks/reward.py [--repeats 2] [--batch 8] [--skip-background]
                                          [--device cpu|cuda] [--quick]

``--quick``: a smoke run (one video, one repeat, no background timing); explicit flags win.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from geocon_torch.epipolar.dpo import sample_positions  # noqa: E402
from geocon_torch.io import read_clip  # noqa: E402
from geocon_torch.rewards import geometric_reward  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
SIZE, FRAMES = (256, 448), 49
#: defaults of ``--quick`` (flags given explicitly still win)
QUICK = {"batch": 1, "repeats": 1, "skip_background": True}


def _fit(frames: torch.Tensor) -> torch.Tensor:
    """(T, 3, h, w) uint8 -> (49, 3, 256, 448) uint8 (looped, resized)."""
    idx = torch.arange(FRAMES) % frames.shape[0]
    x = F.interpolate(frames[idx].float(), size=SIZE, mode="bilinear", antialias=True,
                      align_corners=False)
    return x.round().clamp(0, 255).to(torch.uint8)


def build_batch(batch: int) -> tuple:
    """(B, 49, 3, 256, 448) uint8 and where it came from."""
    files = (sorted(SHARED.rglob("*.mp4")) if SHARED.is_dir() else [])[:batch]  # the ones used
    if files:
        clips = [_fit(read_clip(p, long_side=None, max_frames=FRAMES).frames) for p in files]
        source = "shared: " + ", ".join(p.name for p in files)
    else:
        from geocon_torch.synth import render_scene
        clips = [render_scene(c, num_frames=FRAMES, size=SIZE, seed=0).frames
                 for c in ("C2", "C3", "C5", "C1")]
        source = "synthetic grounded scenes"
    return torch.stack([clips[k % len(clips)] for k in range(batch)]), source


def timed(fn, repeats: int) -> float:
    """Best wall time of ``repeats`` calls (s)."""
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def reference(videos: torch.Tensor) -> list:
    from test_epipolar_dpo import reference_video  # the per-pair loop of the reference test

    pos = torch.as_tensor(sample_positions(videos.shape[1], 15))
    return [reference_video(v[pos]) for v in videos]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--skip-background", action="store_true")
    ap.add_argument("--device", default="cpu",
                    help="cuda: also time the batched reward on the GPU (the reference stays CPU)")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**QUICK)
    args = ap.parse_args()
    videos, source = build_batch(args.batch)
    b = videos.shape[0]
    print(f"batch {tuple(videos.shape)} uint8 from {source}; torch threads "
          f"{torch.get_num_threads()}")
    geometric_reward(videos[:1], kind="epipolar-dpo")  # warm-up (imports, OpenCV)
    t_ours = timed(lambda: geometric_reward(videos, kind="epipolar-dpo"), args.repeats)
    t_ref = timed(lambda: reference(videos), args.repeats)
    rewards, diag = geometric_reward(videos, kind="epipolar-dpo")
    print(f"epipolar-dpo: batched {b / t_ours:.2f} videos/s ({t_ours:.2f} s), reference loop "
          f"{b / t_ref:.2f} videos/s ({t_ref:.2f} s), ratio {t_ref / t_ours:.2f}; rewards "
          f"{[round(float(r), 3) for r in rewards]} status {diag.status}")
    out = {"benchmark": "reward", "quick": args.quick,
           "ratio_vs_reference": round(t_ref / t_ours, 3), "videos_per_s": round(b / t_ours, 3),
           "reference_videos_per_s": round(b / t_ref, 3), "soft_ms_per_video": None,
           "device": "cpu", "batch": list(videos.shape), "source": source}
    if not args.skip_background:
        on_dev = videos.to(args.device)
        if on_dev.is_cuda:  # warm-up: CUDA context and kernels are not part of the figure
            geometric_reward(on_dev[:1], kind="background")
        t_bg = timed(lambda: geometric_reward(on_dev, kind="background"), 1)
        print(f"background on {args.device}: {b / t_bg:.3f} videos/s ({t_bg:.1f} s)")
        out["background_videos_per_s"] = round(b / t_bg, 4)
        out["background_device"] = args.device
    if torch.device(args.device).type == "cuda":
        cuda = videos.to(args.device)
        geometric_reward(cuda[:1], kind="epipolar-dpo")  # warm-up (CUDA context, kernels)
        t_gpu = timed(lambda: geometric_reward(cuda, kind="epipolar-dpo"), args.repeats)
        out["cuda_videos_per_s"] = round(b / t_gpu, 3)
        out["cuda_ratio_vs_reference"] = round(t_ref / t_gpu, 3)
        out["device"] = f"cpu + {torch.cuda.get_device_name(cuda.device)}"
        print(f"epipolar-dpo on {args.device}: {b / t_gpu:.2f} videos/s, ratio vs the CPU "
              f"reference loop {t_ref / t_gpu:.2f}")
    print("RESULT " + json.dumps(out))


if __name__ == "__main__":
    main()
