"""The package version names the numbers (packaging audit s23 F1). Stored rows are keyed by the
config hash, which names the protocol, not the code; ``--rescore-versions`` and the
mixed-version warnings of the statistics, ``geocon pairs`` and the report are the only guard
against pooling numbers that different code computed. So every change that can move a stored
number under an unchanged config hash must bump ``geocon_torch/_version.py``.

This test pins, per version, a few numbers of every scoring path on small synthetic inputs
(background under H and F, foreground with given masks, the WorldAtlas trio, the three reward
kinds). When it fails, the numbers moved: if that is intended, bump the version and pin the new
numbers under it (keep the older entries: they say when what changed); if not, it is a
regression. Tolerances (relative 1e-4) absorb the last-bit differences of another CPU's
kernels, not a change of the protocol."""
from __future__ import annotations

import copy

from typing import Any, Dict

import pytest
import torch

from geocon_torch import __version__, geometric_reward, score_clip
from geocon_torch.synth import grounded_clip

#: version -> {input: {number: value}}; the current version's entry is what the code must give
PINNED: Dict[str, Dict[str, Dict[str, Any]]] = {
    "0.2.0": {  # 0.1.0 (every commit before this pin) pinned nothing
        "C4_masks_all": {
            "status": "ok", "regime": "H", "score": 0.970081, "gate_statistic": 0.0331384,
            "ir": 1.0, "ge_px": 0.00484508, "ge_f_px": 0.000119334, "ge_fine_px": 0.0020389,
            "pass": True, "pass_calibrated": True, "valid_pairs": 15, "objects": 1,
            "foreground": "ok", "adap90": [0.0545577], "epipolar_error": 0.00728463,
            "epipolar_inlier_rate": 0.999682, "feature_match_coverage": 0.939261},
        "C3_truck_background": {
            "status": "ok", "regime": "F", "score": 0.899949, "gate_statistic": 93.1206,
            "ir": 1.0, "ge_px": 0.0576501, "ge_f_px": 0.0576501, "ge_fine_px": 0.0348264,
            "pass": True, "pass_calibrated": False, "valid_pairs": 8, "objects": 0,
            "foreground": None, "adap90": []},
        "reward_epipolar": {"rewards": [0.925607, 0.932301]},
        "reward_epipolar-dpo": {"rewards": [0.974373, 0.975236]},
        "reward_background": {"rewards": [0.991, 0.978007]},
    },
    "0.2.1": {  # background.best_of: max IR / min GE of the clip summaries (paper sec. 6.8)
        "C4_masks_all": {
            "status": "ok", "regime": "H", "score": 0.970081, "gate_statistic": 0.0331384,
            "ir": 1.0, "ge_px": 0.00484508, "ge_f_px": 0.000119334, "ge_fine_px": 0.0020389,
            "pass": True, "pass_calibrated": True, "valid_pairs": 15, "objects": 1,
            "foreground": "ok", "adap90": [0.0545577], "best_of_ge_px": 0.000119334,
            "epipolar_error": 0.00728463, "epipolar_inlier_rate": 0.999682,
            "feature_match_coverage": 0.939261},
        "C3_truck_background": {
            "status": "ok", "regime": "F", "score": 0.899949, "gate_statistic": 93.1206,
            "ir": 1.0, "ge_px": 0.0576501, "ge_f_px": 0.0576501, "ge_fine_px": 0.0348264,
            "pass": True, "pass_calibrated": False, "valid_pairs": 8, "objects": 0,
            "foreground": None, "adap90": [], "best_of_ge_px": 0.0576501},
        "reward_epipolar": {"rewards": [0.925607, 0.932301]},
        "reward_epipolar-dpo": {"rewards": [0.974373, 0.975236]},
        "reward_background": {"rewards": [0.991, 0.978007]},
    },
}
#: transparent sources composited over black: the pinned tensor inputs give 0.2.1's numbers
PINNED["0.2.2"] = PINNED["0.2.1"]
#: video files converted to RGB by swscale's exact C code (io.frame_rgb.RGB_SWS_FLAGS: the same
#: pixels on every CPU, 4:2:0 / 4:2:2 no longer darkened) and TIFF / EXR folders read: the
#: pinned inputs are tensors, which are not decoded, so they give 0.2.2's numbers
PINNED["0.2.3"] = PINNED["0.2.2"]
#: held frames (pairs of two identical frames not scored), the content's long side and the
#: content margin per feature level (letterbox / pillarbox bars), grey + alpha TIFF: the pinned
#: clips have neither held frames nor bars, so they give 0.2.3's numbers
PINNED["0.2.4"] = PINNED["0.2.3"]
#: container edge cases (an edit list's preroll frames, a cut GIF's partial last frame dropped,
#: a container that over-counts, a capture-rate change: the pinned inputs are tensors, which
#: are not decoded) and the headline's rigidity term with its rigid floor (1.5 px of a 1024-px
#: frame): only the clip with a moving object moves
PINNED["0.2.5"] = copy.deepcopy(PINNED["0.2.4"])
PINNED["0.2.5"]["C4_masks_all"]["score"] = 0.983934
#: band seeds (H outliers 2-4 px off the background, confirmed by the change masks) and
#: links cut between crossing movers: the pinned clips have neither
PINNED["0.2.6"] = PINNED["0.2.5"]
#: a clip whose median pair has fewer than 30 matches is scored on its pairs with 30 (eq. 12)
#: instead of not_applicable: the pinned clips are textured everywhere
PINNED["0.2.7"] = copy.deepcopy(PINNED["0.2.6"])
#: per-pair numbers of the truck at the full working scale (pinned from 0.2.7 on: a change
#: that moves pairs but not the clip's medians moves a stored per_pair row all the same)
PINNED["0.2.7"]["C3_truck_per_pair"] = {
    "matches": [130, 140, 142, 153], "inliers_h": [93, 107, 115, 125],
    "inliers_f": [130, 140, 142, 153],
    "ge_h_px": [0.557744, 0.620058, 0.649467, 0.608321],
    "ge_f_px": [0.0309092, 0.0300547, 0.0586727, 0.0387435]}
#: held dips (a repeated frame through a lossy encode) and Epipolar-DPO frames of the whole
#: source under io.stride: the pinned clips have neither (no dip, stride 1)
PINNED["0.2.8"] = PINNED["0.2.7"]


#: the per-pair fields pinned (of ``background.per_pair`` rows at scale 1)
PER_PAIR_FIELDS = ("matches", "inliers_h", "inliers_f", "ge_h_px", "ge_f_px")


def _round(x: Any) -> Any:
    return float(f"{x:.6g}") if isinstance(x, float) else x


def _clip_numbers(d: Dict[str, Any]) -> Dict[str, Any]:
    bg, ep = d["background"], d.get("epipolar") or {}
    fg = d.get("foreground") or {"status": None, "objects": []}
    out = {"status": d["status"], "regime": d["regime"], "score": d["score"],
           "gate_statistic": d["gate"]["statistic"], "ir": bg["ir"], "ge_px": bg["ge_px"],
           "ge_f_px": bg["ge_f_px"], "ge_fine_px": bg["ge_fine_px"], "pass": bg["pass"],
           "pass_calibrated": bg["pass_calibrated"], "valid_pairs": bg["valid_pairs"],
           "objects": bg["segment"]["objects"], "foreground": fg["status"],
           "adap90": [o["adap90"] for o in fg["objects"]],
           "best_of_ge_px": bg["best_of"]["ge_px"]}
    out.update({k: ep[k] for k in ("epipolar_error", "epipolar_inlier_rate",
                                    "feature_match_coverage") if k in ep})
    return {k: [_round(v) for v in x] if isinstance(x, list) else _round(x)
            for k, x in out.items()}


@pytest.fixture(scope="module")
def numbers() -> Dict[str, Dict[str, Any]]:
    objects = grounded_clip("C4", num_frames=6, size=(192, 256), seed=0)
    truck = grounded_clip("C3", num_frames=5, motion="truck", speed=0.15, size=(120, 160),
                          seed=0)
    truck_result = score_clip(truck.frames, preset="background", progress=False).to_dict()
    out = {"C4_masks_all": _clip_numbers(score_clip(objects.frames, masks=objects.masks,
                                                    preset="all", progress=False).to_dict()),
           "C3_truck_background": _clip_numbers(truck_result)}
    rows = [r for r in truck_result["background"]["per_pair"] if r["scale"] == 1.0]
    out["C3_truck_per_pair"] = {k: [_round(r[k]) for r in rows] for k in PER_PAIR_FIELDS}
    videos = torch.stack([grounded_clip(c, num_frames=16, motion=m, size=(96, 128), seed=0).frames
                          for c, m in (("C3", "truck"), ("C2", "pan"))])
    for kind in ("epipolar", "epipolar-dpo", "background"):
        rewards, _ = geometric_reward(videos, kind=kind, seed=0)
        out[f"reward_{kind}"] = {"rewards": [_round(float(r)) for r in rewards]}
    return out


def _close(got: Any, want: Any) -> bool:
    if isinstance(want, list):
        return isinstance(got, list) and len(got) == len(want) and \
            all(_close(g, w) for g, w in zip(got, want))
    if isinstance(want, float) and isinstance(got, float):
        return got == pytest.approx(want, rel=1e-4, abs=1e-6)
    return got == want


def test_the_current_version_pins_its_numbers(numbers):
    assert __version__ in PINNED, (
        f"version {__version__} pins no numbers: add PINNED[{__version__!r}] = {numbers!r}")
    want = PINNED[__version__]
    moved = {f"{clip}.{k}": (numbers[clip].get(k), v) for clip, vals in want.items()
             for k, v in vals.items() if not _close(numbers[clip].get(k), v)}
    assert set(numbers) == set(want) and not moved, (
        f"numbers moved under version {__version__} (got, pinned): {moved}; if intended, bump "
        f"geocon_torch/_version.py and pin under it: {numbers!r}")
