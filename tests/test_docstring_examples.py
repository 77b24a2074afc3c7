"""The ``>>>`` examples in the public API's docstrings run, and say what they print.

Each public entry point listed here must carry at least one example, so an example cannot
silently disappear; every example found in these modules is executed.
"""
from __future__ import annotations

import doctest
import importlib
from typing import List, Tuple

import pytest

# (module, public objects that must carry an example)
PUBLIC_API: List[Tuple[str, Tuple[str, ...]]] = [
    ("geocon_torch.pipeline", ("score_clip",)),
    ("geocon_torch.io.reader", ("read_clip",)),
    ("geocon_torch.geometry.ransac", ("ransac_homography", "ransac_fundamental")),
    ("geocon_torch.geometry.residuals", ("sampson_distance", "symmetric_transfer_error")),
    ("geocon_torch.config", ("load_config",)),
    ("geocon_torch.metrics.functional", ("background_consistency", "adadfrc", "epipolar_error",
                                         "epipolar_inlier_rate", "feature_match_coverage",
                                         "soft_background_consistency")),
    ("geocon_torch.metrics", ("BackgroundConsistency", "AdaDFRC", "EpipolarError",
                              "EpipolarInlierRate", "FeatureMatchCoverage")),
]


def _examples(module_name: str) -> List[doctest.DocTest]:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    return [t for t in finder.find(module, module_name) if t.examples]


@pytest.mark.parametrize("module_name,required", PUBLIC_API, ids=[m for m, _ in PUBLIC_API])
def test_public_api_has_examples(module_name: str, required: Tuple[str, ...]) -> None:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    for name in required:
        obj = getattr(module, name)
        tests = [t for t in finder.find(obj, name) if t.examples]
        assert tests, f"{module_name}.{name} has no >>> example in its docstring"


@pytest.mark.parametrize("module_name", [m for m, _ in PUBLIC_API])
def test_docstring_examples_run(module_name: str) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    seen = set()
    for test in _examples(module_name):
        key = (test.filename, test.lineno)
        if key in seen:
            continue
        seen.add(key)
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {module_name}"
