"""The shipped calibration on grounded scenes it was not fitted on (other seeds), at the shipped
file's working size and frame count (issue 15 acceptance)."""
from __future__ import annotations

import json

import pytest

from geocon_torch.bench.calibration import CalibrationPlan, evaluate, score_plan
from geocon_torch.io.calibration import DEFAULT_DIR
from geocon_torch.pipeline import score_clip
from geocon_torch.synth import apply_corruption, render_scene

SHIPPED = json.loads((DEFAULT_DIR / "opencv-sift.json").read_text())
SIZE = tuple(SHIPPED["working_size"])
FRAMES = int(SHIPPED["frames"])
HELD_OUT = (100, 101)


def test_held_out_seeds_are_not_calibration_seeds():
    assert not set(HELD_OUT) & set(SHIPPED["seeds"]) and 7 not in SHIPPED["seeds"]


@pytest.mark.parametrize("category,motion,corruption,severity", [
    ("C3", "truck", None, 0.0), ("C3", "truck", "rubber_sheet", 0.5),
    ("C1", "static", None, 0.0), ("C1", "static", "rubber_sheet", 1.0),
])
def test_rubber_sheet_fails_and_clean_passes_on_a_held_out_seed(category, motion, corruption,
                                                                 severity):
    frames = render_scene(category, motion=motion, num_frames=FRAMES, size=SIZE, seed=7).frames
    if corruption:
        frames = apply_corruption(frames, corruption, severity, seed=7)
    bg = score_clip(frames, preset="background", device="cpu").background
    assert bg["pass"] is True  # the paper's gate passes them all
    assert bg["pass_calibrated"] is (corruption is None)


#: every shipped calibration (one per default features backend: opencv-sift on the CPU,
#: kornia-sift on CUDA)
SHIPPED_ALL = {p.stem: json.loads(p.read_text()) for p in sorted(DEFAULT_DIR.glob("*.json"))}


@pytest.fixture(scope="module", params=sorted(SHIPPED_ALL))
def held_out_rates(request):
    doc = SHIPPED_ALL[request.param]
    assert doc["backend"] == request.param and not set(HELD_OUT) & set(doc["seeds"])
    plan = CalibrationPlan(frames=int(doc["frames"]), size=tuple(doc["working_size"]),
                           seeds=HELD_OUT, backend=doc["backend"],
                           severities=tuple(s for s in doc["severities"] if s >= 0.5))
    return evaluate(score_plan(plan), doc["thresholds"], 0.5)


@pytest.mark.slow
def test_corrupted_background_clips_fail_the_calibrated_gate(held_out_rates):
    # severity >= 0.5, every background corruption, every category and motion, 2 seeds
    assert held_out_rates["corrupted"]["n"] >= 100
    assert held_out_rates["false_pass"] <= 0.10
    assert held_out_rates["corrupted"]["paper_pass_rate"] >= 0.8  # what the paper's gate misses


@pytest.mark.slow
def test_clean_rigid_clips_pass_the_calibrated_gate(held_out_rates):
    # every category and motion, clean, 2 held-out seeds (20 clips): >= 18 pass with each
    # shipped calibration (benchmarks/README.md)
    assert held_out_rates["clean"]["n"] >= 18
    assert held_out_rates["true_pass"] >= 0.90
