"""Launches, host syncs and OpenCV calls per batch of clips, counted on the CPU (issue 21).

For B = 1 and B = 8 grounded clips (12 frames, 192x320, categories C1..C6 in turn; 16 frames for
``reward-epipolar-dpo``, :data:`PATH_FRAMES`) every path below runs once under
:class:`benchmarks._dispatch_count.DispatchCounter` (every aten op = one kernel launch on CUDA;
syncs = ``.item()``-style reads, data-dependent sizes and host copies), under
:class:`~benchmarks._dispatch_count.HostToDeviceCounter` (``h2d``: the pageable host-to-device
copies a CUDA run would make, each one a stream sync too; ``all_syncs`` = syncs + h2d) and
:class:`~benchmarks._dispatch_count.OpenCVCounter`. ``linalg`` (``la`` in the table; RESULT:
``paths[path][B]["linalg"]`` and ``<path>_linalg_syncs``) counts apart the linalg calls that
would wait for the device on CUDA to read their error codes (``torch.linalg.eigh`` / ``svd`` /
``inv``: the RANSAC refits' eigh, the rank-2 SVDs); they are in neither ``syncs`` nor
``all_syncs``, which keep their meaning (and the targets judged on them):

* ``background``: ``BackgroundConsistency.update`` (the headline metric);
* ``reward-<kind>``: ``geometric_reward`` of every kind of :data:`geocon_torch.rewards.KINDS`
  (``reward-epipolar-dpo`` at 16 frames: the protocol samples frames 0, 15, 30, ..., so 12-frame
  clips have one sampled frame and no pair, and only 16 or more frames measure a real pair);
* ``score_clips``: ``score_clips(preset="geocon")``.

Each path is called once uncounted first (on the smallest batch), so the one-time caches it
builds (RANSAC constants, SIFT kernels, Gaussian taps, ...) are not counted: a training loop
pays them once, not per batch, and the path measured first is not charged for them.

The features backend (and the epipolar torch path's) is forced to the one ``"auto"`` picks on
CUDA (``--backend``), so the CUDA default path is what is counted although it runs on the CPU;
the memory budgets that size chunks (matching, extraction, frames per feature chunk) take their
CUDA values and the epipolar-dpo pairs are matched by the batched float matcher, as on CUDA, not
by the CPU's per-pair int8 GEMMs (``--cpu-budgets`` keeps the CPU budgets and matcher). Work
mapped over a thread pool (OpenCV SIFT per frame) is not counted: its torch ops run on worker
threads, on CPU tensors on every device. Targets (background, B = 8): <= 25 000 ops, <= 100
syncs (all_syncs), ops_growth = ops(B=8) / ops(B=1) <= 1.5, no OpenCV call; every reward kind:
ops_growth <= 1.5.

``--fps``: also frames/s of ``BackgroundConsistency.update`` for B = 8 clips of 16 frames at
640x384 on ``--device`` (the GPU target is >= 1000 frames/s on one H200-class GPU).

Usage: ``python benchmarks/batching.py [--device cpu] [--quick] [--paths background,...] [--fps]``.
``--frames T`` sets the frames of every path (default: :data:`PATH_FRAMES`, else 12).
``--quick``: B = 1 and 2 clips of 4 frames at 96x160, the background path only. The last line is
``RESULT {json}``.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from benchmarks._dispatch_count import (DispatchCounter, HostToDeviceCounter,  # noqa: E402
                                        OpenCVCounter)
from geocon_torch.categories import CATEGORIES  # noqa: E402
from geocon_torch.epipolar import dpo  # noqa: E402
from geocon_torch.features import matching, multiscale, torch_sift  # noqa: E402
from geocon_torch.features.base import resolve_backend  # noqa: E402
from geocon_torch.geometry import ransac  # noqa: E402
from geocon_torch.metrics import BackgroundConsistency  # noqa: E402
from geocon_torch.pipeline import score_clips  # noqa: E402
from geocon_torch.rewards import KINDS, geometric_reward  # noqa: E402
from geocon_torch.synth import grounded_clip  # noqa: E402

PATHS = ("background",) + tuple(f"reward-{k}" for k in KINDS) + ("score_clips",)
QUICK = {"clips": "1,2", "frames": 4, "size": "96x160", "paths": "background"}
FRAMES = 12  # frames per clip of every path not in PATH_FRAMES
#: paths measured at another frame count (epipolar-dpo: one pair, frames 0 and 15)
PATH_FRAMES = {"reward-epipolar-dpo": 16}
TARGETS = {"background_ops": 25000, "background_syncs": 100, "ops_growth": 1.5,
           "background_opencv": 0}
#: the counts RESULT reports per path and B
RESULT_KEYS = ("ops", "syncs", "scalar", "data_dependent", "transfer", "h2d", "all_syncs",
               "linalg", "opencv")


def grounded_batch(b: int, frames: int, size: tuple, device: str) -> torch.Tensor:
    """(b, frames, 3, H, W) uint8: grounded clips of categories C1..C6 in turn (seed = index)."""
    clips = [grounded_clip(CATEGORIES[k % len(CATEGORIES)], num_frames=frames, size=size,
                           seed=k).frames for k in range(b)]
    return torch.stack(clips).to(device)


def runner(path: str, config: Dict[str, Any]) -> Callable[[torch.Tensor], Any]:
    """The call of ``path`` on a (B, T, C, H, W) batch."""
    if path == "background":
        return lambda v: BackgroundConsistency(config=config).update(v)
    if path.startswith("reward-"):
        kind = path[len("reward-"):]
        return lambda v: geometric_reward(v, kind=kind, config=config)
    if path == "score_clips":
        return lambda v: score_clips(v, config=config, preset="geocon")
    raise SystemExit(f"unknown path {path!r}; choose from {PATHS}")


@contextlib.contextmanager
def cuda_budgets(enabled: bool):
    """Chunk budgets at their CUDA values, the epipolar-dpo float matcher and RANSAC's
    accelerator path (lookahead rounds, no optional syncs) while counting on the CPU (so
    chunking, matching and the robust fits are counted as the CUDA run would do them)."""
    budgets = (matching.CHUNK_DISTANCES, torch_sift.CHUNK_SAMPLES, multiscale.CHUNK_PIXELS)
    saved = [dict(b) for b in budgets]
    byte_devices = set(dpo.BYTE_MATCH_DEVICES)
    sync_free = ransac._sync_free
    if enabled:
        for b in budgets:
            b["cpu"] = b["default"]
        dpo.BYTE_MATCH_DEVICES.clear()
        ransac._sync_free = lambda device: True
    try:
        yield
    finally:
        ransac._sync_free = sync_free
        for b, old in zip(budgets, saved):
            b.clear()
            b.update(old)
        dpo.BYTE_MATCH_DEVICES.clear()
        dpo.BYTE_MATCH_DEVICES.update(byte_devices)


def warm_up(fn: Callable[[torch.Tensor], Any], videos: torch.Tensor) -> None:
    """One uncounted call, with the host-to-device tracking on: the constants it caches are
    then known to live on the device."""
    with HostToDeviceCounter(tracking_only=True):
        HostToDeviceCounter.device(videos)
        fn(videos)


def count(fn: Callable[[torch.Tensor], Any], videos: torch.Tensor) -> Dict[str, Any]:
    """ops / syncs / host-to-device copies / linalg syncs / OpenCV calls of one call of
    ``fn(videos)`` (plus wall seconds, counting included). ``syncs`` are the reads
    :class:`DispatchCounter` sees; ``h2d`` the pageable host-to-device copies a CUDA run would
    make (each one waits for the stream too); ``all_syncs`` their sum, what the syncs target is
    judged on; ``linalg`` the linalg calls that read their error codes back on CUDA (not in
    ``all_syncs``)."""
    t0 = time.perf_counter()
    with HostToDeviceCounter() as h2d, DispatchCounter() as ops, OpenCVCounter() as cv:
        HostToDeviceCounter.device(videos)
        fn(videos)
    out = ops.summary()
    out["ops"] -= h2d.aliases  # the tracker's own aliases (one view per no-op move)
    out.update(h2d=h2d.copies, h2d_sites=dict(h2d.sites.most_common(6)),
               all_syncs=out["syncs"] + h2d.copies, opencv=cv.calls,
               opencv_sites=dict(cv.by_name.most_common(6)),
               seconds=round(time.perf_counter() - t0, 2))
    return out


def frames_per_s(config: Dict[str, Any], device: str, b: int, t: int, size: tuple,
                 repeats: int) -> float:
    """frames/s of BackgroundConsistency.update on (b, t, 3, H, W) grounded clips (best of
    ``repeats`` after one warm-up)."""
    videos = grounded_batch(b, t, size, device)
    fn = runner("background", config)
    fn(videos)  # warm-up: kernels, caches
    best = float("inf")
    for _ in range(repeats):
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn(videos)
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return b * t / best


def result_counts(rows: Dict[str, Dict[int, Dict[str, Any]]]) -> Dict[str, Any]:
    """RESULT's counts: ``paths`` ({path: {B: {RESULT_KEYS}}}) and ``<path>_linalg_syncs``
    ({B: linalg calls that sync on CUDA}) per path."""
    out: Dict[str, Any] = {"paths": {p: {str(b): {k: r[k] for k in RESULT_KEYS}
                                         for b, r in by_b.items()} for p, by_b in rows.items()}}
    out.update({f"{p}_linalg_syncs": {str(b): r["linalg"] for b, r in by_b.items()}
                for p, by_b in rows.items()})
    return out


def table(rows: Dict[str, Dict[int, Dict[str, Any]]], sizes: List[int],
          growth: Dict[str, float]) -> List[str]:
    """The summary table's lines: per path and B ops, syncs + h2d (``sy``), linalg syncs
    (``la``) and OpenCV calls (``cv``), then the growth."""
    lines = [f"{'path':<22}" + "".join(f"{'B=' + str(b):>33}" for b in sizes)
             + f"{'ops_growth':>12}"]
    for path, by_b in rows.items():
        cells = "".join(f"{by_b[b]['ops']:>9} ops {by_b[b]['syncs']:>4}+{by_b[b]['h2d']:<3} sy "
                        f"{by_b[b]['linalg']:>3} la {by_b[b]['opencv']:>3} cv" for b in sizes)
        lines.append(f"{path:<22}{cells}{growth.get(path, float('nan')):>12.2f}")
    return lines


def judge(rows: Dict[str, Dict[int, Dict[str, Any]]], bmax: int) -> Dict[str, Any]:
    """ops_growth per path and the targets' verdicts."""
    growth = {p: round(r[bmax]["ops"] / max(1, r[min(r)]["ops"]), 3) for p, r in rows.items()
              if bmax in r}
    verdict: Dict[str, Any] = {}
    bg = rows.get("background", {}).get(bmax)
    if bg is not None:
        verdict["background_ops"] = bg["ops"] <= TARGETS["background_ops"]
        verdict["background_syncs"] = bg["all_syncs"] <= TARGETS["background_syncs"]
        verdict["background_opencv"] = bg["opencv"] <= TARGETS["background_opencv"]
        verdict["background_growth"] = growth["background"] <= TARGETS["ops_growth"]
    for p in rows:
        if p.startswith("reward-") and p in growth:
            verdict[f"{p}_growth"] = growth[p] <= TARGETS["ops_growth"]
    return {"ops_growth": growth, "targets_met": verdict}


def main(argv: List[str] = None) -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="device of the clip tensors (default cpu)")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    ap.add_argument("--clips", default="1,8", help="batch sizes B, comma-separated")
    ap.add_argument("--frames", type=int, default=None,
                    help=f"frames per clip of every path (default {FRAMES}; {PATH_FRAMES})")
    ap.add_argument("--size", default="192x320", help="HxW of the grounded clips")
    ap.add_argument("--paths", default=",".join(PATHS))
    ap.add_argument("--backend", default=resolve_backend("auto", "cuda"),
                    help="features.backend (default: what 'auto' picks on CUDA)")
    ap.add_argument("--cpu-budgets", action="store_true",
                    help="keep the CPU chunk budgets (default: the CUDA ones)")
    ap.add_argument("--fps", action="store_true",
                    help="also frames/s of the background metric, B=8 x 16 frames at 640x384")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    argv = sys.argv[1:] if argv is None else argv
    if "--quick" in argv:
        ap.set_defaults(**QUICK)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    size = tuple(int(v) for v in args.size.lower().split("x"))
    sizes = sorted(int(b) for b in args.clips.split(","))
    config = {"features": {"backend": args.backend}, "epipolar": {"features": args.backend}}
    rows: Dict[str, Dict[int, Dict[str, Any]]] = {}
    frames: Dict[str, int] = {}  # frames per clip of each path
    with cuda_budgets(not args.cpu_budgets and args.device == "cpu"):
        for path in args.paths.split(","):
            fn = runner(path, config)
            rows[path] = {}
            frames[path] = args.frames or PATH_FRAMES.get(path, FRAMES)
            warm_up(fn, grounded_batch(sizes[0], frames[path], size, args.device))
            for b in sizes:
                videos = grounded_batch(b, frames[path], size, args.device)
                rows[path][b] = count(fn, videos)
                r = rows[path][b]
                print(f"  {path:<22} B={b:<3} ops {r['ops']:>8}  syncs {r['syncs']:>6} "
                      f"(scalar {r['scalar']}, data-dep {r['data_dependent']}, transfer "
                      f"{r['transfer']})  h2d {r['h2d']:>4}  linalg {r['linalg']:>4}  "
                      f"opencv {r['opencv']:>5}  "
                      f"{r['seconds']:.1f}s", flush=True)
                if r["h2d"]:
                    print(f"    host-to-device copies at {r['h2d_sites']}")
                if r["linalg"]:
                    print(f"    linalg syncs: {r['linalg_ops']}")
    verdicts = judge(rows, sizes[-1])
    other = {p: t for p, t in frames.items() if t != (args.frames or FRAMES)}
    print(f"\nbackend {args.backend}, device {args.device}, {args.frames or FRAMES} frames "
          f"{size[0]}x{size[1]}" + (f" ({other})" if other else ""))
    print("\n".join(table(rows, sizes, verdicts["ops_growth"])))
    result = {"benchmark": "batching", "device": args.device, "backend": args.backend,
              "quick": args.quick, "frames": args.frames or FRAMES, "path_frames": frames,
              "size": list(size), "clips": sizes,
              "cuda_budgets": not args.cpu_budgets and args.device == "cpu",
              **result_counts(rows), **verdicts}
    if args.fps:
        fps_size = (96, 160) if args.quick else (384, 640)
        result["frames_per_s"] = round(frames_per_s(config, args.device, 8 if not args.quick else 2,
                                                    16 if not args.quick else 4, fps_size,
                                                    1 if args.quick else 2), 2)
        result["fps_setting"] = {"clips": 8, "frames": 16, "size": list(fps_size)} \
            if not args.quick else {"clips": 2, "frames": 4, "size": list(fps_size)}
        print(f"frames/s (background metric): {result['frames_per_s']} "
              f"{result['fps_setting']} on {args.device}")
    print("RESULT " + json.dumps(result))
    return result


if __name__ == "__main__":
    main()
