"""One word per meaning (issue 23 item 6, docs/GLOSSARY.md): the public API -- every public
function's and method's parameters, class attributes, config fields, Metric states and counts,
and the keys of a scored result -- holds none of the retired words; each retired public name
still works through its deprecation alias."""
from __future__ import annotations

import ast
import dataclasses
import warnings
from pathlib import Path
from typing import Any, Iterator, Tuple

import pytest
import torch
from helpers import REPO_ROOT

import geocon_torch
from geocon_torch import GeoConConfig, load_config
from geocon_torch.config import RETIRED_KEYS
from geocon_torch.features.lk import lk_tracks
from geocon_torch.metrics import BackgroundConsistency, EpipolarError, EpipolarInlierRate
from geocon_torch.pipeline import score_clip
from geocon_torch.sections.epipolar import clip_from_frames, epipolar_section
from geocon_torch.synth import grounded_clip

ROOT = Path(geocon_torch.__file__).parent
GLOSSARY = REPO_ROOT / "docs" / "GLOSSARY.md"
#: names that must not appear anywhere in the public API or a result (docs/GLOSSARY.md)
RETIRED = {"fb_threshold", "num_applicable"}
#: what "path" may no longer name: an implementation choice
IMPLEMENTATION_WORDS = {"auto", "opencv", "torch"}


def _public_names() -> Iterator[Tuple[str, str, Any]]:
    """(module, name, default) of every parameter of a public function / method, and every
    annotated attribute of a public class (default None)."""
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        if any(part.startswith("_") and part != "__init__" for part in module.split(".")):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    not node.name.startswith("_") or getattr(node, "name", "") == "__init__":
                args = node.args
                plain = args.posonlyargs + args.args
                defaults = [None] * (len(plain) - len(args.defaults)) + list(args.defaults)
                pairs = list(zip(plain, defaults)) + list(zip(args.kwonlyargs, args.kw_defaults))
                for arg, default in pairs:
                    value = default.value if isinstance(default, ast.Constant) else None
                    yield module, arg.arg, value
            elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        yield module, item.target.id, None


def _config_fields(cls: type = GeoConConfig, prefix: str = "") -> Iterator[str]:
    for f in dataclasses.fields(cls):
        name = f"{prefix}.{f.name}" if prefix else f.name
        yield name
        if f.metadata.get("section") is not None:
            yield from _config_fields(f.metadata["section"], name)


def _keys(obj: Any, where: str = "") -> Iterator[Tuple[str, str]]:
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield where, str(k)
            yield from _keys(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for v in obj:
            yield from _keys(v, where)


def test_public_api_has_no_retired_word():
    bad = [f"{m}: {n}" for m, n, _ in _public_names() if n in RETIRED]
    bad += [f"{m}: path={d!r} (an implementation: say implementation=)"
            for m, n, d in _public_names() if n == "path" and d in IMPLEMENTATION_WORDS]
    bad += [f"config.{n}" for n in _config_fields() if n.split(".")[-1] in RETIRED | {"path"}]
    assert bad == []
    for name in RETIRED_KEYS:  # every retired config key is named in the glossary
        assert f"`{name}`" in GLOSSARY.read_text(), name


def test_metric_states_counts_and_result_keys_have_no_retired_word():
    for metric in (EpipolarError(), EpipolarInlierRate(), BackgroundConsistency()):
        assert not set(metric._defaults) & RETIRED, type(metric).__name__
    assert set(EpipolarError().counts()) == {"num_clips", "num_ok", "num_not_applicable",
                                             "num_error"}
    frames = grounded_clip("C1", num_frames=6, size=(120, 160)).frames
    result = score_clip(frames, preset="all", device="cpu", progress=False).to_dict()
    bad = [f"{where}.{key}" for where, key in _keys(result) if key in RETIRED]
    assert bad == [] and result["config"]["epipolar"]["implementation"] == "auto"
    assert result["config"]["features"]["lk"]["fb_threshold_px"] == 1.5


def test_retired_names_still_work_with_a_warning():
    with pytest.warns(DeprecationWarning) as record:
        cfg = load_config({"epipolar": {"path": "opencv", "tracking": {"fb_threshold": 2.0}}})
    assert sorted(str(w.message).split(" is ")[0] for w in record) == [
        "config key epipolar.path", "config key epipolar.tracking.fb_threshold"]
    assert cfg.epipolar.implementation == "opencv" and cfg.epipolar.tracking.fb_threshold_px == 2
    assert cfg.config_hash() == load_config({"epipolar": {
        "implementation": "opencv", "tracking": {"fb_threshold_px": 2.0}}}).config_hash()
    with pytest.warns(DeprecationWarning, match="features.lk.fb_threshold is deprecated"):
        assert cfg.features.lk.fb_threshold == 1.5  # attribute read
    with pytest.warns(DeprecationWarning, match="epipolar.path is deprecated"):
        cfg.epipolar.path = "torch"  # attribute write
    assert cfg.epipolar.implementation == "torch"
    clip = clip_from_frames(grounded_clip("C3", num_frames=4, size=(120, 160)).frames)
    with pytest.warns(DeprecationWarning, match="argument path= is deprecated"):
        old = epipolar_section(clip, path="opencv")
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        new = epipolar_section(clip, implementation="opencv")
    assert old["epipolar_error"] == new["epipolar_error"] and new["status"] == "ok"
    gray = clip.frames[:2].float().mean(1, keepdim=True) / 255
    with pytest.warns(DeprecationWarning, match="argument fb_threshold= is deprecated"):
        a = lk_tracks(gray, torch.tensor([[0, 1]]), max_corners=100, fb_threshold=0.5)
    b = lk_tracks(gray, torch.tensor([[0, 1]]), max_corners=100, fb_threshold_px=0.5)
    assert torch.equal(a.mask, b.mask)
    with pytest.warns(DeprecationWarning, match="argument path= is deprecated"):
        metric = EpipolarError(path="opencv")
    assert metric.implementation == "opencv"
    with pytest.warns(DeprecationWarning, match="num_applicable is deprecated"):
        assert int(metric.num_applicable) == 0
