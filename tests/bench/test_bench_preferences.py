"""Preference pairs: a tie is no preference (no pair with margin 0, whatever --min-margin)."""
from __future__ import annotations

import inspect

from geocon_torch.bench.preferences import choose_pair, preference_pairs
from geocon_torch.commands.pairs import add_arguments
from geocon_torch.rewards import ClipReward, geometric_reward


def _ok(r: float) -> ClipReward:
    return ClipReward(r, "ok", None, 1, 1)


def test_tied_rewards_are_skipped_not_a_pair():
    tie = choose_pair("p", [("c0", _ok(0.7)), ("c1", _ok(0.7)), ("c2", _ok(0.7))], "background")
    assert tie["status"] == "skipped" and tie["margin"] == 0.0
    assert "tie" in tie["reason"] and "no preference" in tie["reason"]
    assert choose_pair("p", [("a", _ok(0.0)), ("b", _ok(0.0))], "background",
                       min_margin=0.0)["status"] == "skipped"
    near = choose_pair("p", [("a", _ok(0.7)), ("b", _ok(0.7 - 1e-9))], "background")
    assert near["status"] == "pair" and (near["chosen"], near["rejected"]) == ("a", "b")
    partial = choose_pair("p", [("a", _ok(0.5)), ("b", _ok(0.5)), ("c", _ok(0.2))], "background")
    assert partial["status"] == "pair" and (partial["chosen"], partial["rejected"]) == ("a", "c")


def test_the_default_kind_is_the_same_in_python_the_cli_and_the_reward():
    """``preference_pairs`` defaulted to "background" while ``geocon pairs`` and
    ``geometric_reward`` default to "epipolar-dpo": the same manifest gave other pairs from
    Python than from the command line."""
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    cli = parser.parse_args(["m.jsonl", "--db", "r.sqlite", "--out", "p.jsonl"])
    default = inspect.signature(preference_pairs).parameters["kind"].default
    assert default == cli.kind == inspect.signature(geometric_reward).parameters["kind"].default
    assert default == "epipolar-dpo"
