"""The ``>>>`` examples in the package's docstrings run, and say what they print.

Each public entry point listed here must carry at least one example, so an example cannot
silently disappear; every example found in these modules is executed. A package's examples are
collected from the submodules where its objects are defined (doctest's finder skips objects a
package only re-exports) and from every object it exports, de-duplicated by test name (a
decorated function has no line number, so (file, line) is no key). Each module's run must
attempt every ``>>>`` line of its source files and at least ``min_examples`` examples, and every
source file with a ``>>>`` line must belong to a module listed here.
"""
from __future__ import annotations

import doctest
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Dict, List, Tuple

import pytest
from helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "geocon_torch"
_PROMPT = re.compile(r"^\s*>>>( |$)", re.M)

# (module or package, objects that must carry an example, minimum number of examples run)
EXAMPLE_MODULES: List[Tuple[str, Tuple[str, ...], int]] = [
    ("geocon_torch.pipeline", ("score_clip",), 5),
    ("geocon_torch.io.reader", ("read_clip",), 20),
    ("geocon_torch.geometry.ransac", ("ransac_homography", "ransac_fundamental"), 25),
    ("geocon_torch.geometry.residuals", ("sampson_distance", "symmetric_transfer_error"), 12),
    ("geocon_torch.config", ("load_config",), 7),
    ("geocon_torch.metrics.functional", ("background_consistency", "adadfrc", "epipolar_error",
                                         "epipolar_inlier_rate", "feature_match_coverage",
                                         "soft_background_consistency"), 34),
    ("geocon_torch.metrics", ("BackgroundConsistency", "BackgroundInlierRatio", "AdaDFRC",
                              "EpipolarError", "EpipolarInlierRate", "FeatureMatchCoverage"), 78),
    ("geocon_torch.presets", (), 2),
    ("geocon_torch.types", ("Fit", "RowLayout"), 5),
    ("geocon_torch.segment.select", ("masks_method",), 2),
    ("geocon_torch.gate.decision", ("resolve_u", "resolve_u_clip"), 2),
    ("geocon_torch.gate.parallax", ("quantile_bounds",), 2),
    ("geocon_torch._tensor_utils", ("group_index",), 2),
]
IDS = [m for m, _, _ in EXAMPLE_MODULES]


def _modules(module_name: str) -> List[ModuleType]:
    """The module, and for a package every module below it."""
    module = importlib.import_module(module_name)
    found = [module]
    if hasattr(module, "__path__"):
        found += [importlib.import_module(info.name)
                  for info in pkgutil.walk_packages(module.__path__, module_name + ".")]
    return found


def _source_file(module: ModuleType) -> Path:
    return Path(module.__file__).resolve()


def _examples(module_name: str, required: Tuple[str, ...]) -> Dict[str, doctest.DocTest]:
    """Docstring tests of the module (its submodules for a package) and of the objects it
    exports (``__all__`` and ``required``), keyed by test name: an object is named where it is
    defined (``<module>.<qualname>``), so a re-exported object is found once."""
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests: Dict[str, doctest.DocTest] = {}
    for module in _modules(module_name):
        for test in finder.find(module, module.__name__):
            tests.setdefault(test.name, test)
    module = importlib.import_module(module_name)
    for name in sorted(set(required) | set(getattr(module, "__all__", ()))):
        obj = getattr(module, name)
        if not (inspect.isclass(obj) or inspect.isroutine(obj)):
            continue
        home = sys.modules[obj.__module__]
        for test in finder.find(obj, f"{obj.__module__}.{obj.__qualname__}", module=home):
            tests.setdefault(test.name, test)
    return {name: test for name, test in tests.items() if test.examples}


@pytest.mark.parametrize("module_name,required,min_examples", EXAMPLE_MODULES, ids=IDS)
def test_public_api_has_examples(module_name: str, required: Tuple[str, ...],
                                 min_examples: int) -> None:
    module = importlib.import_module(module_name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    for name in required:
        obj = getattr(module, name)
        tests = [t for t in finder.find(obj, name) if t.examples]
        assert tests, f"{module_name}.{name} has no >>> example in its docstring"


@pytest.mark.parametrize("module_name,required,min_examples", EXAMPLE_MODULES, ids=IDS)
def test_docstring_examples_run(module_name: str, required: Tuple[str, ...],
                                min_examples: int) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = _examples(module_name, required)
    for name in sorted(tests):
        runner.run(tests[name])
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} docstring example(s) failed in {module_name}"
    # every ">>>" line of the module's own files ran (none dropped by the finder or the de-dup)
    files = {_source_file(m) for m in _modules(module_name)}
    in_files = sum(len(t.examples) for t in tests.values()
                   if t.filename and Path(t.filename).resolve() in files)
    prompts = sum(len(_PROMPT.findall(f.read_text(encoding="utf-8"))) for f in files)
    assert in_files == prompts, (f"{module_name}: {prompts} '>>>' lines in its source, "
                                 f"{in_files} examples from it run: {sorted(tests)}")
    assert result.attempted >= min_examples, (
        f"{module_name}: {result.attempted} docstring examples run, expected >= {min_examples}")


def test_every_example_file_is_listed() -> None:
    """A source file with a ``>>>`` line belongs to a module of EXAMPLE_MODULES (or a package's
    walk), so its examples are run above."""
    covered = {_source_file(m) for name in IDS for m in _modules(name)}
    with_examples = {p.resolve() for p in PACKAGE.rglob("*.py")
                     if _PROMPT.search(p.read_text(encoding="utf-8"))}
    missing = sorted(str(p.relative_to(PACKAGE.resolve())) for p in with_examples - covered)
    assert not missing, f"docstring examples no test runs (add to EXAMPLE_MODULES): {missing}"
