"""The background block's ``best_of`` (paper sec. 6.8, for analysis): IR_best = max(IR_H, IR_F)
and GE_best = min(GE_H, GE_F) over the clip summaries, taken separately (they may come from
different models), not one model's pair per (pair, scale) row."""
from __future__ import annotations

import pytest

from geocon_torch import score_clip
from geocon_torch.measures.background import best_of_both
from geocon_torch.synth.scenes import render_scene


def test_best_of_takes_the_larger_ir_and_the_smaller_ge_separately():
    h = {"ir": 0.95, "ge_px": 0.4, "valid_pairs": 3}
    f = {"ir": 0.99, "ge_px": 0.9, "valid_pairs": 3}
    assert best_of_both(h, f) == {"ir": 0.99, "ge_px": 0.4}
    assert best_of_both(f, h) == {"ir": 0.99, "ge_px": 0.4}


def test_best_of_uses_the_model_that_has_a_value_and_none_without_either():
    none = {"ir": None, "ge_px": None, "valid_pairs": 0}
    f = {"ir": 0.91, "ge_px": 1.25, "valid_pairs": 2}
    assert best_of_both(none, f) == {"ir": 0.91, "ge_px": 1.25}
    assert best_of_both(f, none) == {"ir": 0.91, "ge_px": 1.25}
    assert best_of_both(none, none) == {"ir": None, "ge_px": None}


def test_a_clean_pan_reports_the_f_models_smaller_ge_as_best():
    # on a pan both models fit (IR 1.0 each, ties on most rows), F's Sampson GE is the smaller
    scene = render_scene("C2", num_frames=6, size=(240, 320), seed=0, motion="pan")
    bg = score_clip(scene.frames, config={"segment": {"method": "none"}}, preset="background",
                    device="cpu").to_dict()["background"]
    assert bg["ge_f_px"] < bg["ge_h_px"]
    assert bg["best_of"]["ir"] == pytest.approx(max(bg["ir_h"], bg["ir_f"]), abs=0.0)
    assert bg["best_of"]["ge_px"] == pytest.approx(bg["ge_f_px"], abs=0.0)
