"""DPO pairs' winner bound (``min_chosen_reward`` / ``geocon pairs --min-chosen-reward``):
Kupyn et al. drop a prompt whose best clip's mean epipolar error is 8 px or more; with the
"epipolar-dpo" reward exp(-error / 5 px) that is a minimum chosen reward of exp(-8 / 5)."""
from __future__ import annotations

import argparse
import math

import pytest

from geocon_torch.bench.manifest import ManifestEntry
from geocon_torch.bench.preferences import (DPO_MIN_CHOSEN_REWARD, choose_pair, kind_config,
                                            preference_pairs, preference_records)
from geocon_torch.commands.pairs import add_arguments
from geocon_torch.errors import InputError
from geocon_torch.rewards import ClipReward


def _ok(r: float) -> ClipReward:
    return ClipReward(r, "ok", None, 2, 2)


def _dpo_result(error_px: float) -> dict:
    return {"status": "ok", "epipolar_dpo": {"status": "ok", "mean_epipolar_error": error_px,
                                             "valid_pairs": 3,
                                             "protocol": {"inlier_threshold_px": 5.0}}}


def test_the_bound_is_kupyn_et_al_8_px_as_a_reward():
    assert DPO_MIN_CHOSEN_REWARD == pytest.approx(math.exp(-1.6), rel=1e-15)
    assert DPO_MIN_CHOSEN_REWARD == pytest.approx(0.2018965, abs=1e-7)


def test_a_prompt_whose_best_clip_errs_8_px_or_more_is_skipped():
    entries = [ManifestEntry(c, f"{c}.mp4", "m", prompt=p) for c, p in
               (("a", "good"), ("b", "good"), ("c", "bad"), ("d", "bad"))]
    results = {"a": _dpo_result(7.9), "b": _dpo_result(20.0),
               "c": _dpo_result(8.1), "d": _dpo_result(30.0)}
    cfg = kind_config(None, "epipolar-dpo")
    recs = preference_records(entries, results, "epipolar-dpo", cfg,
                              min_chosen_reward=DPO_MIN_CHOSEN_REWARD)
    assert [r["status"] for r in recs] == ["pair", "skipped"]
    assert (recs[0]["chosen"], recs[0]["rejected"]) == ("a", "b")
    assert recs[0]["chosen_reward"] == pytest.approx(math.exp(-7.9 / 5), rel=1e-12)
    bad = recs[1]
    assert (bad["chosen"], bad["rejected"]) == ("c", "d")
    assert bad["chosen_reward"] == pytest.approx(math.exp(-8.1 / 5), rel=1e-12)
    assert bad["reason"] == "the best reward 0.1979 is below the minimum chosen reward 0.2019"
    # without the bound (the default 0) both prompts give a pair
    plain = preference_records(entries, results, "epipolar-dpo", cfg)
    assert [r["status"] for r in plain] == ["pair", "pair"]


def test_the_bound_is_inclusive_and_ties_keep_their_reason():
    at = choose_pair("p", [("a", _ok(0.5)), ("b", _ok(0.25))], "background",
                     min_chosen_reward=0.5)
    assert at["status"] == "pair" and at["chosen"] == "a"
    below = choose_pair("p", [("a", _ok(0.5)), ("b", _ok(0.25))], "background",
                        min_chosen_reward=0.5000001)
    assert below["status"] == "skipped"
    assert below["reason"] == ("the best reward 0.5 is below the minimum chosen reward "
                               "0.5000001")
    tie = choose_pair("p", [("a", _ok(0.1)), ("b", _ok(0.1))], "background",
                      min_chosen_reward=0.5)
    assert tie["status"] == "skipped" and "tie" in tie["reason"]


def test_the_bound_must_lie_in_the_unit_interval(tmp_path):
    entries = [ManifestEntry("a", "a.mp4", "m", prompt="p")]
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(InputError, match="min_chosen_reward must be a number in"):
            preference_pairs(entries, tmp_path / "r.sqlite", min_chosen_reward=bad)
    assert not (tmp_path / "r.sqlite").exists()  # refused before any store or clip


def test_the_cli_option_parses_and_refuses_values_outside_0_1(capsys):
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    base = ["m.jsonl", "--db", "r.sqlite", "--out", "p.jsonl"]
    assert parser.parse_args(base).min_chosen_reward == 0.0
    assert parser.parse_args(base + ["--min-chosen-reward", "0.2019"]).min_chosen_reward \
        == 0.2019
    for bad in ("1.5", "-0.1", "nan", "x"):
        with pytest.raises(SystemExit):
            parser.parse_args(base + ["--min-chosen-reward", bad])
    assert "--min-chosen-reward" in capsys.readouterr().err
