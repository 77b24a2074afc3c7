"""The headline ``score`` against corruption severity on grounded scenes (its curves).

    python benchmarks/score_curves.py [--size 256x192] [--frames 8] [--seeds 0]
                                      [--categories C1,C3,C4] [--severities 0,0.25,0.5,0.75,1]
                                      [--preset all] [--long-sides 0]

For every grounded category, seed and corruption of ``geocon_torch.synth.CORRUPTIONS``
(``nonrigid_object`` only where the scene has objects: C4) the clip is rendered at each severity
(the same scene and corruption noise; severity 0 is the clean clip), scored with ``preset`` and
its headline score printed with the terms it folds
(:func:`geocon_torch.measures.headline.headline_terms`). A curve is monotone when the score
never rises by more than ``--tolerance`` from one severity to the next. ``--long-sides`` (comma
list, 0 = the rendered size) rescores every clip at other working sizes: the score should mean
the same at each. The last line is ``RESULT {json}`` (per curve: scores and whether monotone).
"""
from __future__ import annotations

import argparse
import json
import time
from typing import Any, Dict, List, Optional

import torch

from geocon_torch import score_clip
from geocon_torch.measures.headline import headline_terms
from geocon_torch.synth import CORRUPTIONS, render_scene


def curve(category: str, corruption: str, seed: int, severities: List[float], size, frames: int,
          preset: str, long_side: Optional[int]) -> List[Dict[str, Any]]:
    """One row per severity: {"severity", "score", "terms", "status"}."""
    rows = []
    for sev in severities:
        clip = render_scene(category, num_frames=frames, size=size, seed=seed,
                            corruption=corruption if sev > 0 else None, severity=float(sev))
        masks = clip.masks if clip.masks is not None and clip.masks.shape[1] else None
        cfg = {"io": {"long_side": long_side}} if long_side else {}
        res = score_clip(clip.frames, masks=masks, config=cfg, preset=preset, device="cpu",
                         progress=False).to_dict()
        rows.append({"severity": sev, "score": res.get("score"), "status": res["status"],
                     "terms": headline_terms(res)})
    return rows


def monotone(scores: List[Optional[float]], tol: float) -> bool:
    """True when no score rises by more than ``tol`` from one severity to the next (a missing
    score counts as 0: an unscoreable corrupted clip is the bottom)."""
    s = [0.0 if v is None else float(v) for v in scores]
    return all(b <= a + tol for a, b in zip(s, s[1:]))


def main() -> Dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="256x192", help="WxH of the rendered clips")
    ap.add_argument("--frames", type=int, default=8)
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--categories", default="C1,C3,C4")
    ap.add_argument("--corruptions", default=",".join(CORRUPTIONS))
    ap.add_argument("--severities", default="0,0.25,0.5,0.75,1")
    ap.add_argument("--preset", default="all")
    ap.add_argument("--long-sides", default="0")
    ap.add_argument("--tolerance", type=float, default=0.01)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--verbose", action="store_true", help="print every term's curve too")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    w, h = (int(v) for v in args.size.lower().split("x"))
    sev = [float(v) for v in args.severities.split(",")]
    out: Dict[str, Any] = {"curves": []}
    print(f"headline score vs severity ({args.preset}, {w}x{h}, {args.frames} frames); "
          f"severities {sev}")
    for ls in [int(v) for v in args.long_sides.split(",")]:
        for cat in args.categories.split(","):
            for seed in [int(v) for v in args.seeds.split(",")]:
                for kind in args.corruptions.split(","):
                    if kind == "nonrigid_object" and cat != "C4":
                        continue
                    t0 = time.perf_counter()
                    rows = curve(cat, kind, seed, sev, (h, w), args.frames, args.preset,
                                 ls or None)
                    scores = [r["score"] for r in rows]
                    ok = monotone(scores, args.tolerance)
                    out["curves"].append({"category": cat, "seed": seed, "corruption": kind,
                                          "long_side": ls or max(w, h), "scores": scores,
                                          "terms": [r["terms"] for r in rows],
                                          "monotone": ok})
                    txt = " ".join("  n/a" if s is None else f"{s:.3f}" for s in scores)
                    print(f"{cat} s{seed} {kind:>17} @{ls or max(w, h):>4}: {txt}  "
                          f"{'monotone' if ok else 'NOT MONOTONE'} "
                          f"({time.perf_counter() - t0:.0f}s)", flush=True)
                    if args.verbose:
                        for name in rows[0]["terms"]:
                            print(f"{'':>30}{name:>9}: " + " ".join(
                                f"{r['terms'].get(name, float('nan')):.3f}" for r in rows))
    out["monotone"] = sum(c["monotone"] for c in out["curves"])
    out["n"] = len(out["curves"])
    print(f"monotone curves: {out['monotone']} / {out['n']}")
    print("RESULT " + json.dumps(out))
    return out


if __name__ == "__main__":
    main()
