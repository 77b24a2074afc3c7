"""Batched robust H / F estimation vs per-pair OpenCV and kornia loops (issue 2 item 4).

One run builds P pairs x N matches with 30 % outliers for a plane (H) and a 3-D scene (F),
then times, on the same data:

* ours: ``ransac_homography`` (forward residual, 2 px) and ``ransac_fundamental`` (pixel
  Sampson, 1 px — the residual OpenCV's USAC_MAGSAC mask uses), all pairs in one call;
* OpenCV per pair: ``findHomography(RANSAC, 2 px)`` and ``findFundamentalMat(USAC_MAGSAC,
  1 px, 0.999)``;
* kornia per pair: ``kornia.geometry.RANSAC('homography' / 'fundamental')``.

Times are medians over ``--repeats`` runs after a warm-up (time.perf_counter; the process CPU
time is reported too, which is the fairer figure on a shared, oversubscribed machine). Inlier
agreement = our total inlier count / OpenCV's. Prints a table, then ``RESULT {json}`` last.

    python benchmarks/ransac.py [--device cpu|cuda] [--pairs 256] [--matches 1000] [--threads N]
                                [--quick]

``--quick``: a smoke run (16 pairs x 300 matches, one repeat, 2 kornia pairs); explicit flags
win.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import cv2
import numpy as np
import torch

from geocon_torch.geometry import ransac_fundamental, ransac_homography
from geocon_torch.geometry._synthetic import fundamental_pairs, homography_pairs

#: defaults of ``--quick`` (tiny sizes; flags given explicitly still win)
QUICK = {"pairs": 16, "matches": 300, "repeats": 1, "kornia_pairs": 2}


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_time(fn, repeats: int, device: torch.device):
    """(median wall seconds, median process-CPU seconds, last output) after one warm-up."""
    out = fn()  # warm-up
    _sync(device)
    wall, cpu = [], []
    for _ in range(repeats):
        t0, c0 = time.perf_counter(), time.process_time()
        out = fn()
        _sync(device)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return statistics.median(wall), statistics.median(cpu), out


def _opencv_loop(kind: str, x1: np.ndarray, x2: np.ndarray):
    counts = []
    for p in range(x1.shape[0]):
        if kind == "H":
            _, m = cv2.findHomography(x1[p], x2[p], cv2.RANSAC, 2.0, maxIters=2000,
                                      confidence=0.999)
        else:
            _, m = cv2.findFundamentalMat(x1[p], x2[p], cv2.USAC_MAGSAC, 1.0, 0.999)
        counts.append(0 if m is None else int(m.sum()))
    return counts


def _kornia_loop(kind: str, x1: torch.Tensor, x2: torch.Tensor):
    from kornia.geometry.ransac import RANSAC
    est = RANSAC("homography" if kind == "H" else "fundamental",
                 inl_th=2.0 if kind == "H" else 1.0, max_iter=10, confidence=0.999)
    counts = []
    for p in range(x1.shape[0]):
        _, m = est(x1[p], x2[p])
        counts.append(int(m.sum()))
    return counts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--matches", type=int, default=1000)
    ap.add_argument("--outliers", type=float, default=0.3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--kornia-pairs", type=int, default=32,
                    help="pairs timed for the (slow) kornia loop; throughput is per pair")
    ap.add_argument("--no-kornia", action="store_true")
    ap.add_argument("--threads", type=int, default=1,
                    help="torch and OpenCV thread count (default 1: the OpenCV loop runs one "
                         "pair at a time on one core, so both sides get one core; 0 keeps the "
                         "library defaults)")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**QUICK)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
        cv2.setNumThreads(args.threads)
    device = torch.device(args.device)
    P, N = args.pairs, args.matches
    data = {"H": homography_pairs(P, N, outlier_ratio=args.outliers, noise_px=0.5, seed=1,
                                  dtype=torch.float32, device=device),
            "F": fundamental_pairs(P, N, outlier_ratio=args.outliers, noise_px=0.5, seed=2,
                                   dtype=torch.float32, device=device)}
    ours = {"H": lambda d: ransac_homography(d["x1"], d["x2"], threshold=2.0, residual="forward",
                                            confidence=0.999, max_iterations=2000),
            "F": lambda d: ransac_fundamental(d["x1"], d["x2"], threshold=1.0, residual="sampson",
                                              confidence=0.999, max_iterations=2000)}
    res = {"benchmark": "ransac", "quick": args.quick, "device": str(device), "pairs": P,
           "matches": N, "outliers": args.outliers,
           "torch_threads": torch.get_num_threads()}
    rows = []
    for kind in ("H", "F"):
        d = data[kind]
        t_ours, c_ours, fit = _median_time(lambda: ours[kind](d), args.repeats, device)
        a, b = d["x1"].cpu().numpy(), d["x2"].cpu().numpy()
        t_cv, c_cv, cv_counts = _median_time(lambda: _opencv_loop(kind, a, b), args.repeats,
                                             torch.device("cpu"))
        n_ours = int(fit.num_inliers.sum())
        n_cv = int(sum(cv_counts))
        recall = float((fit.inliers & d["inliers"]).sum() / d["inliers"].sum())
        k = kind.lower()
        res[f"{k}_pairs_per_s"] = P / t_ours
        res[f"{k}_opencv_pairs_per_s"] = P / t_cv
        res[f"{k}_ratio_vs_opencv"] = t_cv / t_ours
        res[f"{k}_cpu_time_ratio_vs_opencv"] = c_cv / max(c_ours, 1e-9)
        res[f"{k}_inlier_agreement"] = n_ours / max(n_cv, 1)
        res[f"{k}_true_inlier_recall"] = recall
        res[f"{k}_valid_pairs"] = int(fit.valid.sum())
        res[f"{k}_mean_samples"] = float(fit.iterations.float().mean())
        rows.append((kind, "geocon_torch (batched)", P / t_ours, n_ours))
        rows.append((kind, "OpenCV loop", P / t_cv, n_cv))
        if not args.no_kornia:
            kp = min(args.kornia_pairs, P)
            x1k, x2k = d["x1"][:kp], d["x2"][:kp]
            t_k, _, k_counts = _median_time(lambda: _kornia_loop(kind, x1k, x2k), 1, device)
            res[f"{k}_kornia_pairs_per_s"] = kp / t_k
            res[f"{k}_ratio_vs_kornia"] = (P / t_ours) / (kp / t_k)
            res[f"{k}_kornia_inlier_agreement"] = (int(fit.num_inliers[:kp].sum())
                                                   / max(sum(k_counts), 1))
            rows.append((kind, f"kornia RANSAC loop ({kp} pairs)", kp / t_k, sum(k_counts)))
    print(f"ransac benchmark: P={P} pairs x N={N} matches, {args.outliers:.0%} outliers, "
          f"device={device}, torch threads={torch.get_num_threads()}")
    print(f"{'model':<6}{'method':<34}{'pairs/s':>12}{'inliers':>10}")
    for kind, name, pps, cnt in rows:
        print(f"{kind:<6}{name:<34}{pps:>12.1f}{cnt:>10d}")
    for k in ("h", "f"):
        print(f"{k.upper()}: ratio vs OpenCV {res[f'{k}_ratio_vs_opencv']:.2f}x wall "
              f"({res[f'{k}_cpu_time_ratio_vs_opencv']:.2f}x process CPU time), inlier agreement "
              f"{res[f'{k}_inlier_agreement']:.4f}, true-inlier recall "
              f"{res[f'{k}_true_inlier_recall']:.4f}")
    print("RESULT " + json.dumps(res))


if __name__ == "__main__":
    main()
