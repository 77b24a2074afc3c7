"""Round-9 mutation tests of the calibrated gate's threshold math (measures/calibration.py):
tie rule, the feasibility gate, the rejecting candidate, IR relaxation, pass rates."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.measures.calibration import (calibrated_pass, pass_rates, relax_ir,
                                               select_bounds, select_thresholds)


def _t(rows):
    return torch.tensor(rows, dtype=torch.float64).view(-1, 2)


def test_equal_true_pass_prefers_the_lower_false_pass():
    """Clean A (IR 0.9, GE 1), B (0.5, 3); corrupted X (0.8, 2.5), Y (0.95, 2), Z (0.6, 0.8);
    target 0.4. (0.9, 1), (0.9, 3) and (0.5, 1) all pass one clean clip; only (0.9, 1) passes
    no corrupted one (the other two pass Y, resp. Z: 1/3): it is kept, then each bound moves
    half way to the next value beyond it (IR 0.9 -> 0.85, GE 1 -> 1.5)."""
    clean = _t([[0.9, 1.0], [0.5, 3.0]])
    bad = _t([[0.8, 2.5], [0.95, 2.0], [0.6, 0.8]])
    bounds, tp, fp = select_bounds(clean, bad, (True, False), 0.4)
    assert (tp, fp) == (0.5, 0.0)
    assert bounds == pytest.approx([0.85, 1.5], abs=1e-12)


def test_a_false_pass_rate_equal_to_the_target_is_allowed():
    """GE of clean clips 1 and 2, corrupted 1.5 and 5, target 0.5: the bound at 2 passes every
    clean clip and half the corrupted ones (exactly the target): kept, moved to 3.5."""
    bounds, tp, fp = select_bounds(torch.tensor([[1.0], [2.0]]), torch.tensor([[1.5], [5.0]]),
                                   (False,), 0.5)
    assert (tp, fp) == (1.0, 0.5) and bounds == [3.5]


def test_when_nothing_separates_the_bound_rejects_every_clip_and_stays_put():
    """Clean and corrupted GE both 1 at target 0: the only feasible bound is the candidate
    below every value (1 - 1 = 0); no clip meets it, so it is not moved half way."""
    bounds, tp, fp = select_bounds(torch.tensor([[1.0]]), torch.tensor([[1.0]]), (False,), 0.0)
    assert (bounds, tp, fp) == ([0.0], 0.0, 0.0)
    th = select_thresholds(torch.tensor([0.99]), torch.tensor([1.0]), torch.tensor([0.99]),
                           torch.tensor([1.0]), 0.0)
    assert th.ge_norm_max == 0.0 and th.true_pass == 0.0 and th.false_pass == 0.0


def test_relax_ir_takes_the_lower_of_the_bound_and_the_floor():
    ir = torch.tensor([0.95, 0.99], dtype=torch.float64)
    assert relax_ir(0.9, ir, 0.97) == 0.9  # already below the floor: kept
    assert relax_ir(0.98, torch.tensor([0.99, 1.0]), 0.97) == 0.97  # none below: the floor
    assert relax_ir(0.96, ir, 0.5) == 0.96  # a clip below it: IR informative, kept
    assert relax_ir(0.99, torch.empty(0), 0.97) == 0.99  # no clip: nothing to relax on


def test_pass_rates_ignore_unknown_verdicts():
    assert pass_rates([True, None, False, None]) == 0.5
    assert pass_rates([None, None]) is None
    assert pass_rates([True, True, False]) == pytest.approx(2 / 3)


def test_calibrated_pass_normalises_to_the_reference_side_given():
    """GE 1 px at long side 256 is 4 px at 1024 and 2 px at a 512 reference."""
    th = {"H": {"ir_min": 0.5, "ge_norm_max": 3.0}}
    assert calibrated_pass(0.9, 1.0, 256, "H", th) is False
    assert calibrated_pass(0.9, 1.0, 256, "H", th, ref_long_side=512) is True
    assert calibrated_pass(0.9, 1.0, 256, "F", th) is None  # no F bounds: no verdict
