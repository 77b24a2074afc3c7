"""The package's shape (DESIGN.md "Layout"): imports point one way along the data flow, no
function is longer than 100 lines, no package-internal import hides inside a function, and every
error raised on purpose is a GeoConError.

The layers, lowest first (a module may import from its own layer or any lower one, never up):

0. basics: ``errors``, ``_version``, ``_json``, ``_checks``, ``_tensor_utils``, ``_morphology``,
   ``presets``, ``config``, ``types``, ``categories``, ``result``, ``checkpoints``
1. ``io``           2. ``features``        3. ``geometry``
4. ``gate``, ``segment``, ``flow``, ``synth`` (grounded scenes: geometry + io writers)
5. ``measures`` (per-pair / per-clip measure math) and ``epipolar`` (the protocols' engines)
6. ``sections`` (one module per result block)
7. ``pipeline`` (``score_clip``: a list of section calls)
8. ``metrics`` (functional API and torchmetrics classes), ``rewards``
9. ``bench``, ``report``, ``commands``, ``cli`` and the package ``__init__``
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Tuple

import pytest

import geocon_torch
from geocon_torch import errors as errors_module

ROOT = Path(geocon_torch.__file__).parent
MAX_FUNCTION_LINES = 100

LAYERS: Dict[str, int] = {
    "errors": 0, "_version": 0, "_json": 0, "_checks": 0, "_tensor_utils": 0, "_morphology": 0,
    "_memory": 0, "_precision": 0, "_thread_settings": 0, "_progress_bar": 0, "_numeric_env": 0,
    "config": 0, "presets": 0, "types": 0, "categories": 0, "result": 0, "checkpoints": 0,
    "io": 1, "features": 2, "geometry": 3,
    "gate": 4, "segment": 4, "flow": 4, "synth": 4,
    "measures": 5, "epipolar": 5,
    "sections": 6, "pipeline": 7, "metrics": 8, "rewards": 8,
    "bench": 9, "report": 9, "commands": 9, "cli": 9, "__init__": 9, "__main__": 9,
}


def _modules() -> Iterator[Tuple[Path, str, ast.Module]]:
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        yield path, ".".join(rel.with_suffix("").parts), ast.parse(path.read_text(), str(path))


def _top(dotted: str) -> str:
    """The layer key of a module path relative to the package (``io.reader`` -> ``io``)."""
    return dotted.split(".")[0]


def _internal_target(module: str, node: ast.ImportFrom) -> Optional[str]:
    """The package-relative module an ImportFrom points to, or None for third-party imports.

    ``module`` is the importing module relative to the package (``io.reader``, ``io.__init__``).
    """
    if node.level == 0:
        mod = node.module or ""
        if mod == "geocon_torch":
            return "__init__"
        return mod[len("geocon_torch."):] if mod.startswith("geocon_torch.") else None
    package = module.split(".")[:-1]  # same for a.b.c and a.b.__init__: package a.b
    base = package[:len(package) - (node.level - 1)]
    target = ".".join(base + ([node.module] if node.module else []))
    return target or "__init__"


def _imports(module: str, tree: ast.Module) -> Iterator[Tuple[ast.AST, str, bool]]:
    """(node, package-relative target, inside a function) of every internal import."""
    funcs = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    inner = {id(m) for f in funcs for m in ast.walk(f)}
    for node in ast.walk(tree):
        target = None
        if isinstance(node, ast.ImportFrom):
            target = _internal_target(module, node)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("geocon_torch."):
                    target = alias.name[len("geocon_torch."):]
        if target is not None:
            yield node, target, id(node) in inner


def test_imports_point_down_the_layers() -> None:
    bad: List[str] = []
    for path, module, tree in _modules():
        here = LAYERS.get(_top(module))
        assert here is not None, f"{module}: add its top-level name to LAYERS in this test"
        for node, target, _ in _imports(module, tree):
            there = LAYERS.get(_top(target)) if target != "__init__" else LAYERS["__init__"]
            if there is None:
                bad.append(f"{module}:{node.lineno} imports unknown {target}")
            elif there > here:
                bad.append(f"{module} (layer {here}):{node.lineno} imports {target} "
                           f"(layer {there})")
    assert not bad, "imports that point up the layers:\n" + "\n".join(bad)


def test_no_package_import_inside_functions() -> None:
    """A function-level import of our own modules means a module is in the wrong room. The one
    exception is an optional backend loaded on first use (its module imports a heavy or optional
    dependency at its top); such a line says so with a ``# lazy: <why>`` comment."""
    bad = []
    for path, module, tree in _modules():
        lines = path.read_text().splitlines()
        for node, target, inside in _imports(module, tree):
            if inside and "# lazy:" not in lines[node.lineno - 1]:
                bad.append(f"{module}:{node.lineno} imports {target} inside a function")
    assert not bad, "\n".join(bad)


def test_no_function_longer_than_100_lines() -> None:
    long = [f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
            for _, module, tree in _modules() for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, "split these functions:\n" + "\n".join(long)


_OUR_ERRORS = {name for name, obj in vars(errors_module).items()
               if isinstance(obj, type) and issubclass(obj, errors_module.GeoConError)}


def _error_classes_defined() -> set:
    """Names of exception classes defined in the package that derive from a GeoConError."""
    names = set(_OUR_ERRORS)
    changed = True
    trees = [tree for _, _, tree in _modules()]
    while changed:
        changed = False
        for tree in trees:
            for node in ast.walk(tree):
                if isinstance(node, ast.ClassDef) and node.name not in names and any(
                        isinstance(b, ast.Name) and b.id in names for b in node.bases):
                    names.add(node.name)
                    changed = True
    return names


def test_every_raised_error_is_a_geocon_error() -> None:
    ours = _error_classes_defined()
    bad = []
    for _, module, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, ast.Raise) or node.exc is None:
                continue
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            name = exc.id if isinstance(exc, ast.Name) else getattr(exc, "attr", None)
            if name is None or name in ours or name.lstrip("_")[:1].islower():
                continue  # a caught exception object or a helper building one, or ours
            if name in ("NotImplementedError", "StopIteration", "KeyboardInterrupt"):
                continue
            bad.append(f"{module}:{node.lineno} raises {name}")
    assert not bad, "raise a GeoConError subclass instead:\n" + "\n".join(bad)


@pytest.mark.parametrize("name", ["InputError", "ConfigError", "VideoReadError", "ShapeError",
                                  "ArgumentTypeError"])
def test_user_input_errors_are_value_or_type_errors(name: str) -> None:
    cls = getattr(errors_module, name)
    assert issubclass(cls, errors_module.GeoConError)
    assert issubclass(cls, (ValueError, TypeError))
