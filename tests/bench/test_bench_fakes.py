"""Checks of the fake results and scorers (tests/helpers.py) the bench / report / cli tests use.

``fake_result`` builds schema-conforming result dicts with chosen numbers; ``CountingScorer``
is an injectable ``score_fn`` that counts calls (in memory and in a file, so a killed
subprocess's calls are still counted) and can fail or sleep on chosen clips.
"""
from __future__ import annotations

from helpers import fake_result

from geocon_torch.bench import check_result, result_problems


def test_fake_result_is_valid():
    assert result_problems(fake_result("a")) == []
    assert result_problems(fake_result("a", status="error")) == []
    check_result(fake_result("a", objects=[1.0, 2.0]))


def test_schema_rejects_nan_and_bad_status():
    bad = fake_result("a", ir=float("nan"))
    problems = result_problems(bad)
    assert any("background.ir" in p for p in problems)
    bad = fake_result("a")
    bad["status"] = "fine"
    assert any("status" in p for p in result_problems(bad))
    bad = fake_result("a", status="not_applicable")
    bad["reason"] = ""
    assert any("reason" in p for p in result_problems(bad))
    assert result_problems([1]) == ["a result must be a JSON object, got list"]
