"""Throughput of AdaDFRC-W2 (flow + score) in object-pairs per second.

Builds P synthetic frame pairs (smooth noise texture, K discs each moving with its own
translation + rotation) at the given size, then times, on ``--device``:

* ``full``: :func:`geocon_torch.sections.foreground.score_pairs` with the default ForegroundConfig
  (torch-lk flow forward + backward at scales {1/4, 1/2, 1}, reliability, WMSE score);
* ``flow``: one forward torch-lk flow at full resolution;
* ``score``: :func:`adadfrc` (WMSE and W2) on a precomputed flow;
* ``raft_small`` (with ``--raft``): torchvision RAFT-small forward flow, random weights saved to a
  temp file and loaded through ``get_flow`` (speed does not depend on the weights).

Prints a table; the last line is ``RESULT {json}``.

    python benchmarks/foreground.py [--device cpu|cuda] [--pairs 8] [--objects 3] [--size 384x640]
                                    [--quick]

``--quick``: a smoke run (2 pairs x 2 objects at 96x160, one repeat, one torch thread); explicit
flags win.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import torch

#: defaults of ``--quick`` (tiny sizes; flags given explicitly still win)
QUICK = {"pairs": 2, "objects": 2, "size": "96x160", "repeats": 1, "threads": 1}

def make_pairs(p: int, k: int, size, device, seed: int = 0):
    from geocon_torch.flow.lk_dense import gaussian_blur, warp

    gen = torch.Generator().manual_seed(seed)
    h, w = size
    img1 = gaussian_blur(torch.rand(p, 3, h, w, generator=gen), 1.5)
    img1 = (img1 - img1.amin((2, 3), keepdim=True)) / (
        img1.amax((2, 3), keepdim=True) - img1.amin((2, 3), keepdim=True))
    ys, xs = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    masks = torch.zeros(p, k, h, w, dtype=torch.bool)
    back = torch.zeros(p, 2, h, w)
    r = min(h, w) / (2.5 * math.sqrt(k) + 1)
    for i in range(p):
        for j in range(k):
            c = torch.rand(2, generator=gen)
            cx, cy = r + c[0] * (w - 2 * r), r + c[1] * (h - 2 * r)
            m = (xs - cx) ** 2 + (ys - cy) ** 2 < r * r
            masks[i, j] = m
            ang = math.radians(float(torch.rand(1, generator=gen)) * 6 - 3)
            t = torch.rand(2, generator=gen) * 4 - 2
            dx = math.cos(ang) * (xs - cx) - math.sin(ang) * (ys - cy) + cx + t[0] - xs
            dy = math.sin(ang) * (xs - cx) + math.cos(ang) * (ys - cy) + cy + t[1] - ys
            back[i, 0] = torch.where(m, -dx, back[i, 0])
            back[i, 1] = torch.where(m, -dy, back[i, 1])
    img2, _ = warp(img1, back)
    return img1.to(device), img2.to(device), masks.to(device)


def timeit(fn, repeats: int, device) -> float:
    fn()  # warm-up
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(repeats):
        fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - t0) / repeats


def main() -> None:
    from geocon_torch.config import ForegroundConfig
    from geocon_torch.flow import get_flow
    from geocon_torch.sections.foreground import score_pairs
    from geocon_torch.measures.foreground import adadfrc

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--objects", type=int, default=3)
    ap.add_argument("--size", default="384x640", help="HxW working resolution")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--raft", action="store_true", help="also time RAFT-small (random weights)")
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**QUICK)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    h, w = (int(v) for v in args.size.lower().split("x"))
    p, k = args.pairs, args.objects
    a, b, masks = make_pairs(p, k, (h, w), device)
    cfg = ForegroundConfig(flow="torch-lk")
    est = get_flow("torch-lk", device=device)

    t_full = timeit(lambda: score_pairs(a, b, masks, est, cfg), args.repeats, device)
    t_flow = timeit(lambda: est(a, b), args.repeats, device)
    flow = est(a, b)
    t_wmse = timeit(lambda: adadfrc(flow, masks), args.repeats, device)
    t_w2 = timeit(lambda: adadfrc(flow, masks, score="w2"), args.repeats, device)
    d, valid = adadfrc(flow, masks)
    rows = [("full (flow fw+bw x3 scales + WMSE)", t_full, p * k / t_full),
            ("torch-lk flow, 1 scale, forward", t_flow, p / t_flow),
            ("adadfrc WMSE on given flow", t_wmse, p * k / t_wmse),
            ("adadfrc W2 on given flow", t_w2, p * k / t_w2)]
    result = {"benchmark": "foreground", "quick": args.quick,
              "object_pairs_per_s": round(p * k / t_full, 3), "pairs_per_s": round(p / t_full, 3),
              "flow_pairs_per_s": round(p / t_flow, 3),
              "score_wmse_object_pairs_per_s": round(p * k / t_wmse, 1),
              "score_w2_object_pairs_per_s": round(p * k / t_w2, 1),
              "valid_fraction": round(float(valid.float().mean()), 3),
              "median_wmse_px2": round(float(d[valid].median()), 4) if valid.any() else None,
              "device": str(device), "size": [h, w], "pairs": p, "objects": k,
              "threads": torch.get_num_threads(), "flow": "torch-lk"}
    if args.raft:
        from torchvision.models.optical_flow import raft_small

        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "raft_small_random.pth"
            torch.save(raft_small(weights=None).state_dict(), path)
            raft = get_flow("raft_small", checkpoint=str(path), device=device)
            n = min(p, 4)
            t_raft = timeit(lambda: raft(a[:n], b[:n]), 1, device)
        rows.append(("raft_small flow, 1 scale, forward", t_raft, n / t_raft))
        result["raft_small_flow_pairs_per_s"] = round(n / t_raft, 3)
    print(f"AdaDFRC-W2 throughput: {p} pairs x {k} objects at {h}x{w} on {device} "
          f"({torch.get_num_threads()} threads)")
    print(f"{'stage':40s} {'seconds':>9s} {'items/s':>10s}")
    for name, t, rate in rows:
        print(f"{name:40s} {t:9.3f} {rate:10.2f}")
    print("RESULT " + json.dumps(result))


if __name__ == "__main__":
    main()
