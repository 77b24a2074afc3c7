"""Accuracy against truth of the feature backends, side by side (issue 14, item 2).

Known homographies: a synthetic dead-leaves texture (``geocon_torch.synth.textures``) warped by
fixed homographies, plus graf 1->3 (ground-truth H from ``../shared/data/real/graf``) when the
shared data is present: fraction of matches whose transfer error ``|H x1 - x2|`` is within 2 / 5 px.
Grounded scenes (``geocon_torch.synth.grounded_clip``, C3 truck and C5 arc): Sampson error of the
matches against the true F (median, and fraction below 1 px). Also matches per pair and seconds per
frame pair (extraction + matching of the pair's two frames) on this machine.

Usage: ``python benchmarks/learned_accuracy.py [--device cpu] [--max-keypoints 2000] [--quick]``.
``--quick`` is a smoke run: seed-0 texture warps at 128x192, no graf, C3 only, 256 keypoints, one
torch thread (explicit flags win). The last line is ``RESULT {json}``.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import cv2
import kornia
import torch

from geocon_torch.errors import GeoConError
from geocon_torch.features import get_extractor, get_matcher, match_descriptors
from geocon_torch.features.learned import MATCHER_NAMES
from geocon_torch.geometry.residuals import sampson_distance
from geocon_torch.synth import grounded_clip
from geocon_torch.synth.textures import make_texture

BACKENDS = ("opencv-sift", "kornia-sift", "torch-sift", "xfeat", "xfeat-lighterglue",
            "aliked-lightglue", "disk-lightglue")
#: descriptor matching per extractor backend: (Lowe ratio, mutual); XFeat: plain mutual NN
MATCHING = {"opencv-sift": (0.75, False), "kornia-sift": (0.75, False), "torch-sift": (0.75, False),
            "xfeat": (1.0, True)}
SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "real"

#: fixed test homographies (x2 ~ H x1) for a W x H = 512 x 384 texture
WARPS = (
    ((0.96, 0.10, 12.0), (-0.08, 0.95, 20.0), (1.5e-4, 1.0e-4, 1.0)),   # rotation ~5 deg + tilt
    ((1.15, 0.02, -40.0), (0.00, 1.12, -30.0), (0.0, 2.0e-4, 1.0)),     # zoom 1.15 + perspective
    ((0.87, -0.26, 60.0), (0.26, 0.87, -50.0), (0.0, 0.0, 1.0)),        # rotation 17 deg, 0.9x
)


def warp_pair(gray: torch.Tensor, H: torch.Tensor) -> torch.Tensor:
    """(2, 1, h, w): ``gray (1, 1, h, w)`` and its warp by H (x2 = H x1, pixel centres at
    integers: kornia ``align_corners=True``)."""
    h, w = gray.shape[-2:]
    warped = kornia.geometry.transform.warp_perspective(gray, H[None].float(), (h, w),
                                                        align_corners=True)
    return torch.cat([gray, warped])


def texture_cases(size: Tuple[int, int] = (384, 512), seeds=(0, 1)
                  ) -> List[Tuple[str, torch.Tensor, torch.Tensor]]:
    """(name, frames (2, 1, h, w), H (3, 3)) of the synthetic warps (scaled to ``size``)."""
    h, w = size
    s = torch.diag(torch.tensor([w / 512, h / 384, 1.0], dtype=torch.float64))
    out = []
    for seed in seeds:
        gray = make_texture(h, w, seed)[None].mean(1, keepdim=True)
        for k, rows in enumerate(WARPS):
            H = s @ torch.tensor(rows, dtype=torch.float64) @ torch.linalg.inv(s)
            out.append((f"texture{seed}_warp{k}", warp_pair(gray, H), H))
    return out


def graf_case() -> Optional[Tuple[str, torch.Tensor, torch.Tensor]]:
    """graf 1->3 (real, ground-truth H) or None without the shared data."""
    d = SHARED / "graf"
    if not (d / "H1to3p.xml").is_file():
        return None
    fs = cv2.FileStorage(str(d / "H1to3p.xml"), cv2.FILE_STORAGE_READ)
    H = torch.from_numpy(fs.getFirstTopLevelNode().mat()).double()
    imgs = [cv2.imread(str(d / f), cv2.IMREAD_GRAYSCALE) for f in ("graf1.png", "graf3.png")]
    gray = torch.stack([torch.from_numpy(i).float()[None] / 255.0 for i in imgs])
    return "graf1to3", gray, H

#: defaults of ``--quick`` (flags given explicitly still win)
QUICK = {"max_keypoints": 256, "size": "128x192", "graf": False, "threads": 1}

_BUILT: Dict[Tuple[str, int, str], object] = {}


def build(name: str, max_keypoints: int, device: str):
    """The extractor or matcher of backend ``name`` (built once, then reused)."""
    key = (name, max_keypoints, device)
    if key not in _BUILT:
        make = get_matcher if name in MATCHER_NAMES else get_extractor
        _BUILT[key] = make(name, device=device, max_keypoints=max_keypoints)
    return _BUILT[key]


def correspondences(name: str, gray: torch.Tensor, pairs: torch.Tensor, max_keypoints: int,
                    device: str):
    """Matches of ``pairs`` of ``gray (T, 1, H, W)`` with backend ``name`` (Correspondences)."""
    backend = build(name, max_keypoints, device)
    if name in MATCHER_NAMES:
        return backend.match(gray, pairs)
    ratio, mutual = MATCHING[name]
    return match_descriptors(backend.extract(gray), pairs, ratio=ratio, mutual=mutual)


def transfer_fractions(c, H: torch.Tensor, pair: int = 0) -> Tuple[int, float, float]:
    """(matches, fraction within 2 px, within 5 px) of pair ``pair`` against x2 ~ H x1."""
    m = c.mask[pair]
    x1, x2 = c.x1[pair][m].double().cpu(), c.x2[pair][m].double().cpu()
    if x1.shape[0] == 0:
        return 0, 0.0, 0.0
    p = torch.cat([x1, torch.ones_like(x1[:, :1])], 1) @ H.T
    err = (p[:, :2] / p[:, 2:] - x2).norm(dim=1)
    return int(x1.shape[0]), float((err <= 2).double().mean()), float((err <= 5).double().mean())


def sampson_stats(c, F: torch.Tensor) -> List[Tuple[int, float, float]]:
    """Per pair: (matches, median Sampson px, fraction < 1 px) against ``F (P, 3, 3)``
    (``x2^T F x1 = 0``)."""
    out = []
    for p in range(c.mask.shape[0]):
        m = c.mask[p]
        if int(m.sum()) == 0:
            out.append((0, math.inf, 0.0))
            continue
        d = sampson_distance(F[p:p + 1].double(), c.x1[p][m][None].double().cpu(),
                             c.x2[p][m][None].double().cpu())[0]
        out.append((int(m.sum()), float(d.median()), float((d < 1).double().mean())))
    return out


def grounded_cases(quick: bool) -> List[Tuple[str, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """(name, gray (T, 1, 240, 320), pairs (P, 2), true F (P, 3, 3)) of C3 truck / C5 arc."""
    out = []
    for cat in (("C3",) if quick else ("C3", "C5")):
        clip = grounded_clip(cat)
        gray = (clip.frames.float() / 255.0).mean(1, keepdim=True)
        pairs = torch.tensor([[0, 3], [4, 7]] if quick else [[0, 3], [4, 7], [8, 11]])
        F = torch.stack([clip.fundamental(int(i), int(j)) for i, j in pairs.tolist()])
        out.append((f"grounded_{cat}", gray, pairs, F))
    return out


def evaluate(name: str, warps, grounded, max_keypoints: int, device: str) -> Dict[str, float]:
    """The table row of backend ``name``."""
    f2, f5, n_h, secs, pairs_done = [], [], [], 0.0, 0
    build(name, max_keypoints, device)  # model loading is not timed
    for _, gray, H in warps:
        t = time.perf_counter()
        c = correspondences(name, gray, torch.tensor([[0, 1]]), max_keypoints, device)
        secs, pairs_done = secs + time.perf_counter() - t, pairs_done + 1
        n, a2, a5 = transfer_fractions(c, H)
        n_h.append(n), f2.append(a2), f5.append(a5)
    med, below, n_f = [], [], []
    for _, gray, pairs, F in grounded:
        used = pairs.reshape(-1)
        t = time.perf_counter()
        c = correspondences(name, gray[used], torch.arange(used.numel()).reshape(-1, 2),
                            max_keypoints, device)
        secs, pairs_done = secs + time.perf_counter() - t, pairs_done + pairs.shape[0]
        for n, md, b in sampson_stats(c, F):
            n_f.append(n), med.append(md), below.append(b)
    mean = lambda v: float(sum(v) / max(1, len(v)))  # noqa: E731
    return {"within_2px": mean(f2), "within_5px": mean(f5), "matches_H": mean(n_h),
            "sampson_median_px": float(torch.tensor(med).median()) if med else math.inf,
            "sampson_below_1px": mean(below), "matches_F": mean(n_f),
            "s_per_pair": secs / max(1, pairs_done)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--max-keypoints", type=int, default=2000)
    ap.add_argument("--quick", action="store_true", help="smoke run: " + json.dumps(QUICK))
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--size", default="384x512", help="HxW of the texture warps")
    ap.add_argument("--no-graf", dest="graf", action="store_false", help="leave graf 1->3 out")
    ap.add_argument("--graf", dest="graf", action="store_true",
                    help="include graf 1->3 (the default without --quick)")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    if "--quick" in sys.argv[1:]:
        ap.set_defaults(**QUICK)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    size = tuple(int(v) for v in args.size.lower().split("x"))
    warps = texture_cases(size=size, seeds=(0,) if args.quick else (0, 1))
    graf = graf_case() if args.graf else None
    if graf is not None:
        warps.append(graf)
    grounded = grounded_cases(args.quick)
    rows: Dict[str, Dict[str, float]] = {}
    skipped: Dict[str, str] = {}
    for name in args.backends.split(","):
        try:
            rows[name] = evaluate(name, warps, grounded, args.max_keypoints, args.device)
        except GeoConError as exc:  # e.g. the learned extra is not installed
            print(f"{name}: skipped ({exc})")
            skipped[name] = str(exc)
    head = (f"{'backend':<19}{'<=2px':>7}{'<=5px':>7}{'matches':>9}{'Sampson med':>13}"
            f"{'<1px':>7}{'matches':>9}{'s/pair':>8}")
    print(f"warps: {[w[0] for w in warps]}; grounded: {[g[0] for g in grounded]}; "
          f"device {args.device}, max_keypoints {args.max_keypoints}")
    print(head)
    for name, r in rows.items():
        print(f"{name:<19}{r['within_2px']:>7.3f}{r['within_5px']:>7.3f}{r['matches_H']:>9.0f}"
              f"{r['sampson_median_px']:>13.3f}{r['sampson_below_1px']:>7.3f}"
              f"{r['matches_F']:>9.0f}{r['s_per_pair']:>8.2f}")
    print("RESULT " + json.dumps({"benchmark": "learned_accuracy", "quick": args.quick,
                                  "device": args.device, "size": list(size),
                                  "threads": torch.get_num_threads(),
                                  "max_keypoints": args.max_keypoints,
                                  "warps": [w[0] for w in warps],
                                  "grounded": [g[0] for g in grounded], "backends": rows,
                                  "skipped": skipped}))


if __name__ == "__main__":
    main()
