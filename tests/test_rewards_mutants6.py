"""Reward values, statuses and pair counts that no other default test pins (mutation audit s21,
area mut6_report): the folds of :func:`reward_from_result` on hand-made rows with closed-form
values, the neutral value of unscoreable or non-finite rows, the frozen rule's kept counts,
and the diagnostics of :func:`geometric_reward`."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch.errors import ArgumentTypeError
from geocon_torch.rewards import (FROZEN_REASON, geometric_reward, reward_from_result,
                                  stored_frozen)

FROZEN = {"max_mad": 0.0, "pairs": 5, "frozen": True}


def _epipolar(**kw):
    block = {"status": "ok", "epipolar_error": 1.0, "epipolar_error_score": 0.9,
             "epipolar_inlier_rate": 0.6, "feature_match_coverage": 0.3, "valid_pairs": 4,
             "total_pairs": 5}
    block.update(kw)
    return {"status": "ok", "epipolar": block}


def test_epipolar_fold_is_the_mean_of_the_trio_with_its_pair_counts():
    got = reward_from_result(_epipolar(), "epipolar")
    assert got.status == "ok" and got.reward == pytest.approx(0.6, abs=1e-12)
    assert (got.valid_pairs, got.total_pairs) == (4, 5)


def test_epipolar_block_missing_a_term_is_neutral():
    got = reward_from_result(_epipolar(feature_match_coverage=None), "epipolar", neutral=-1.0)
    assert (got.reward, got.status) == (-1.0, "not_applicable")


def _background(ir=0.9, ge=0.7, status="ok", **bg):
    block = {"status": status, "ir": ir, "ge_px": ge, "pairs": 4, "valid_pairs": 10,
             "scales": [0.25, 0.5, 1.0]}
    block.update(bg)
    return {"status": status, "reason": None if status == "ok" else "why", "regime": "H",
            "background": block}


def test_background_fold_and_pair_scale_entries():
    """0.9 * exp(-0.7 / 3.5); 4 pairs x 3 scales = 12 (pair, scale) entries, 10 valid."""
    got = reward_from_result(_background(), "background")
    assert got.reward == pytest.approx(0.9 * math.exp(-0.2), rel=1e-12)
    assert (got.status, got.valid_pairs, got.total_pairs) == ("ok", 10, 12)


def test_non_finite_ir_is_neutral_never_nan():
    got = reward_from_result(_background(ir=float("nan")), "background", neutral=-1.0)
    assert (got.reward, got.status) == (-1.0, "not_applicable") and got.reason


def test_not_applicable_result_with_numbers_is_not_folded():
    """A result the scorer did not accept keeps its status even when its block has IR / GE."""
    got = reward_from_result(_background(status="not_applicable"), "background", neutral=-1.0)
    assert (got.reward, got.status, got.reason) == (-1.0, "not_applicable", "why")


def _dpo(**kw):
    block = {"status": "ok", "mean_epipolar_error": 2.5, "mean_inlier_rate": 0.8,
             "valid_pairs": 2, "total_pairs": 3, "protocol": {"inlier_threshold_px": 5.0}}
    block.update(kw)
    return {"epipolar_dpo": block}


def test_dpo_block_without_a_valid_pair_is_neutral_and_shows_no_raw_values():
    assert reward_from_result(_dpo(), "epipolar-dpo").reward == pytest.approx(math.exp(-0.5))
    got = reward_from_result(_dpo(valid_pairs=0), "epipolar-dpo", neutral=-1.0)
    assert (got.reward, got.status) == (-1.0, "not_applicable")
    assert got.raw == {"mean_epipolar_error": None, "mean_inlier_rate": None}


def test_frozen_row_keeps_its_pair_counts_and_a_non_bool_flag_is_not_frozen():
    row = dict(_background(), motion=FROZEN)
    got = reward_from_result(row, "background")
    assert (got.reward, got.status, got.reason) == (0.0, "not_applicable", FROZEN_REASON)
    assert (got.valid_pairs, got.total_pairs) == (10, 12)
    odd = dict(row, motion=dict(FROZEN, frozen="yes"))  # not a recorded bool: not said
    assert reward_from_result(odd, "background").status == "ok"
    unsaid = dict(row, motion={"max_mad": 0.0, "pairs": 5})  # no flag recorded: folded
    assert stored_frozen(unsaid, "background") is None
    assert reward_from_result(unsaid, "background").status == "ok"


def test_bool_neutral_is_refused():
    with pytest.raises(ArgumentTypeError, match="neutral must be a finite number"):
        reward_from_result(_background(), "background", neutral=True)


def test_diagnostics_record_the_neutral_value():
    """A 2-frame batch of 16 x 16 px clips: epipolar-dpo reads frames 0, 15, ... (one frame
    here), so nothing is scored and every clip gets the given neutral value."""
    videos = torch.zeros(2, 2, 3, 16, 16, dtype=torch.uint8)
    rewards, diag = geometric_reward(videos, "epipolar-dpo", neutral=-1.0)
    assert rewards.tolist() == [-1.0, -1.0] and diag.neutral == -1.0
