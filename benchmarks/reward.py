"""Throughput of ``geometric_reward`` on a (8, 49, 3, 256, 448) uint8 batch, on this machine.

* ``kind="epipolar-dpo"`` vs the per-pair reference loop of KupynOrest/epipolar-dpo (OpenCV SIFT
  on both frames of every pair, BFMatcher knn 2 + ratio 0.75, kornia 8-point + Sampson; the
  loop of tests/epipolar/test_epipolar_dpo.py), both on the CPU in one run: videos/s and their
  ratio.
  SIFT is the same OpenCV work on both sides; the batched path detects each sampled frame once
  (the loop detects inner frames twice), runs the frames on the extractor's thread pool, and
  matches / fits all pairs of all clips in one batch.
* ``kind="background"``: videos/s (GeoCon IR / GE at native resolution) on ``--device``.
* ``soft_background_consistency`` forward + backward on the first ``--soft-frames`` frames of
  one video (float32, requires grad): ``soft_ms_per_video`` is that clip's time (ms), with its
  shape in ``soft_shape`` (dense LK flow on every pair: seconds per pair on this CPU, so the
  full 49 frames are not timed by default).
* With ``--device cuda``: the same reward with matching and fitting on the GPU
  (``cuda_videos_per_s``, ``cuda_ratio_vs_reference``).

Fairness: both sides get the same sampled uint8 frames (0, 15, 30, 45 of each video); the
reference runs exactly as the public loop (OpenCV and torch at their default thread counts; the
batched path sets its workers to one OpenCV / torch thread each while they run and restores the
defaults). The two sides are timed alternately (``--repeats`` rounds, best wall time of each),
and the process user / system CPU time of each best run is printed with the load average, so a
figure taken on a loaded machine can be recognised as such.

Clips: the shared clips (../shared/data; 49 frames each, looped when shorter, resized to
448x256), or grounded synthetic scenes when absent. The CPU is shared with other jobs while
this runs, so figures are indicative. Last line: ``RESULT {json}``.

    .venv/bin/python benchmarks/reward.py [--repeats 3] [--batch 8] [--skip-background]
                                          [--soft-frames 3] [--device cpu|cuda] [--quick]

``--quick``: a smoke run (one video, one repeat, no background or soft timing); explicit flags
win.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "tests" / "epipolar"))  # the reference loop of the DPO tests

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from geocon_torch.epipolar.dpo import sample_positions  # noqa: E402
from geocon_torch.io import read_clip  # noqa: E402
from geocon_torch.metrics.functional import soft_background_consistency  # noqa: E402
from geocon_torch.rewards import geometric_reward  # noqa: E402

SHARED = ROOT.parent / "shared" / "data"
SIZE, FRAMES = (256, 448), 49
#: defaults of ``--quick`` (flags given explicitly still win)
QUICK = {"batch": 1, "repeats": 1, "skip_background": True, "soft_frames": 0}


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


def run_once(fn) -> tuple:
    """(wall s, process user CPU s, process system CPU s) of one call (all threads)."""
    c0, t0 = os.times(), time.perf_counter()
    fn()
    wall, c1 = time.perf_counter() - t0, os.times()
    return wall, c1.user - c0.user, c1.system - c0.system


def timed(fn, repeats: int) -> float:
    """Best wall time of ``repeats`` calls (s)."""
    return min(run_once(fn)[0] for _ in range(repeats))


def timed_pair(fns: dict, repeats: int) -> dict:
    """Alternate the named calls ``repeats`` times; per name the best (wall, user, sys)."""
    best = {k: (float("inf"), 0.0, 0.0) for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            best[k] = min(best[k], run_once(fn))
    return best


def soft_ms(videos: torch.Tensor, frames: int, device: str) -> tuple:
    """Forward + backward ms of soft_background_consistency on (1, frames, 3, H, W) float."""
    x = (videos[:1, :frames].to(device).float() / 255.0).requires_grad_(True)
    run = lambda: soft_background_consistency(x).sum().backward()  # noqa: E731
    return 1000.0 * run_once(run)[0], list(x.shape)


def reference(videos: torch.Tensor) -> list:
    from test_epipolar_dpo import reference_video  # the per-pair loop of the reference test

    pos = torch.as_tensor(sample_positions(videos.shape[1], 15))
    return [reference_video(v[pos]) for v in videos]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--soft-frames", type=int, default=3,
                    help="frames of the clip timed for the soft score (0: skip)")
    ap.add_argument("--skip-background", action="store_true")
    ap.add_argument("--device", default="cpu",
                    help="cuda: also time the batched reward on the GPU (the reference stays CPU)")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**QUICK)
    args = ap.parse_args()
    videos, source = build_batch(args.batch)
    b = videos.shape[0]
    load0 = os.getloadavg()[0]
    print(f"batch {tuple(videos.shape)} uint8 from {source}; torch threads "
          f"{torch.get_num_threads()}, cpus {os.cpu_count()}, load average {load0:.2f}")
    geometric_reward(videos[:1], kind="epipolar-dpo")  # warm-up (imports, OpenCV)
    reference(videos[:1])
    best = timed_pair({"ours": lambda: geometric_reward(videos, kind="epipolar-dpo"),
                       "reference": lambda: reference(videos)}, args.repeats)
    (t_ours, u_ours, s_ours), (t_ref, u_ref, s_ref) = best["ours"], best["reference"]
    rewards, diag = geometric_reward(videos, kind="epipolar-dpo")
    for name, (t, u, sy) in best.items():
        print(f"  {name:9s} wall {t:6.2f} s  user {u:6.2f} s  sys {sy:5.2f} s  "
              f"CPU {100 * (u + sy) / t:4.0f} %")
    load1 = os.getloadavg()[0]
    print(f"epipolar-dpo: batched {b / t_ours:.2f} videos/s ({t_ours:.2f} s), reference loop "
          f"{b / t_ref:.2f} videos/s ({t_ref:.2f} s), ratio {t_ref / t_ours:.2f} (CPU time "
          f"ratio {(u_ref + s_ref) / max(u_ours + s_ours, 1e-9):.2f}); load average "
          f"{load0:.2f} -> {load1:.2f}; rewards {[round(float(r), 3) for r in rewards]} "
          f"status {diag.status}")
    out = {"benchmark": "reward", "quick": args.quick,
           "ratio_vs_reference": round(t_ref / t_ours, 3), "videos_per_s": round(b / t_ours, 3),
           "reference_videos_per_s": round(b / t_ref, 3), "soft_ms_per_video": None,
           "device": "cpu", "batch": list(videos.shape), "source": source,
           "cpu_s": {"ours": [round(u_ours, 2), round(s_ours, 2)],
                     "reference": [round(u_ref, 2), round(s_ref, 2)]},
           "load_average": [round(load0, 2), round(load1, 2)]}
    if args.soft_frames > 1:
        ms, shape = soft_ms(videos, args.soft_frames, args.device)
        print(f"soft score forward+backward on {tuple(shape)} ({args.device}): {ms:.0f} ms")
        out["soft_ms_per_video"], out["soft_shape"] = round(ms, 1), shape
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
