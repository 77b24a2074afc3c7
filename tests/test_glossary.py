"""One word per meaning (issue 23 item 6, docs/GLOSSARY.md): the public API -- every public
function's and method's parameters, class attributes, config fields, Metric states and counts,
the keys of a scored result, the store's columns and flat rows, the bench exports and the
statistics' records -- holds none of the retired words (no ``model`` naming the video generator,
no ``path`` naming an implementation, no ``score`` naming a cost); each retired public name
still works through its deprecation alias."""
from __future__ import annotations

import ast
import csv
import dataclasses
import inspect
import json
import sqlite3
import warnings
from pathlib import Path
from typing import Any, Iterator, Tuple

import pytest
import torch
from helpers import REPO_ROOT, fake_result, v2_result

import geocon_torch
from geocon_torch import GeoConConfig, load_config
from geocon_torch.bench import ResultStore, load_manifest, load_results, stats
from geocon_torch.bench.store import CLIP_COLUMNS, CLIP_FIELDS, FLAT_COLUMNS, flatten_row
from geocon_torch.config import RETIRED_KEYS
from geocon_torch.features.lk import lk_tracks
from geocon_torch.geometry import ransac_homography
from geocon_torch.metrics import (BackgroundConsistency, EpipolarError, EpipolarInlierRate,
                                  epipolar_collection)
from geocon_torch.pipeline import score_clip
from geocon_torch.result import ClipResult
from geocon_torch.sections.epipolar import clip_from_frames, epipolar_section
from geocon_torch.synth import grounded_clip
from geocon_torch.types import Fit

ROOT = Path(geocon_torch.__file__).parent
GLOSSARY = REPO_ROOT / "docs" / "GLOSSARY.md"
#: names that must not appear anywhere in the public API or a result (docs/GLOSSARY.md)
RETIRED = {"fb_threshold", "num_applicable", "error_sum", "model_version"}
#: what "path" may no longer name: an implementation choice
IMPLEMENTATION_WORDS = {"auto", "opencv", "torch"}
#: what "model" may still name: a geometric model (a result's per-pair H / F, config.soft.model)
GEOMETRIC_MODELS = {"H", "F", "auto", "homography", "fundamental"}
#: the names the video generator had before docs/GLOSSARY.md kept "model" for geometric models
GENERATOR_RETIRED = {"model", "model_version"}


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
    for where, key, _ in _items(obj, where):
        yield where, key


def _items(obj: Any, where: str = "") -> Iterator[Tuple[str, str, Any]]:
    """(where, key, value) of every dict entry in ``obj``, nested dicts and lists included."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield where, str(k), v
            yield from _items(v, f"{where}.{k}")
    elif isinstance(obj, list):
        for v in obj:
            yield from _items(v, where)


def _misnamed(obj: Any) -> list:
    """Entries of a result / row where ``model`` names something other than a geometric model,
    or ``path`` names an implementation (docs/GLOSSARY.md)."""
    return [f"{w}.{k}={v!r}" for w, k, v in _items(obj)
            if (k in GENERATOR_RETIRED and v not in GEOMETRIC_MODELS)
            or (k == "path" and v in IMPLEMENTATION_WORDS)]


@pytest.fixture(scope="module")
def scored() -> dict:
    """A result of every section (preset "all", epipolar included), as JSON."""
    frames = grounded_clip("C1", num_frames=6, size=(120, 160)).frames
    return score_clip(frames, preset="all", device="cpu", progress=False).to_dict()


def test_public_api_has_no_retired_word():
    bad = [f"{m}: {n}" for m, n, _ in _public_names() if n in RETIRED]
    bad += [f"{m}: {n} (the video generator: say generator)" for m, n, _ in _public_names()
            if n in GENERATOR_RETIRED and m.split(".")[0] in ("bench", "commands")]
    bad += [f"{m}: score (a cost: say cost)" for m, n, _ in _public_names()
            if n == "score" and m == "types"]
    groupings = {name: inspect.signature(fn).parameters["by"].default
                 for name, fn in inspect.getmembers(stats, inspect.isfunction)
                 if "by" in inspect.signature(fn).parameters and not name.startswith("_")}
    assert len(groupings) == 6 and groupings["scene_balanced"] == ("generator", "prompt_category")
    bad += [f"stats.{name}(by={by})" for name, by in groupings.items()
            if set(by) & GENERATOR_RETIRED or "generator" not in by]
    bad += [f"{m}: path={d!r} (an implementation: say implementation=)"
            for m, n, d in _public_names() if n == "path" and d in IMPLEMENTATION_WORDS]
    bad += [f"config.{n}" for n in _config_fields() if n.split(".")[-1] in RETIRED | {"path"}]
    assert bad == []
    for name in RETIRED_KEYS:  # every retired config key is named in the glossary
        assert f"`{name}`" in GLOSSARY.read_text(), name


def test_metric_states_counts_and_result_keys_have_no_retired_word(scored: dict):
    for metric in (EpipolarError(), EpipolarInlierRate(), BackgroundConsistency()):
        assert not set(metric._defaults) & RETIRED, type(metric).__name__
    assert set(EpipolarError()._defaults) == {
        "epipolar_error_sum_px", "score_sum", "rate_sum", "coverage_sum", "num_ok", "num_clips",
        "num_not_applicable", "num_error", "reasons", "protocol_key", "protocol_key_min"}
    assert set(EpipolarError().counts()) == {"num_clips", "num_ok", "num_not_applicable",
                                             "num_error"}
    result = scored
    bad = [f"{where}.{key}" for where, key in _keys(result) if key in RETIRED]
    assert bad == [] and result["config"]["epipolar"]["implementation"] == "opencv"  # pinned
    assert result["config"]["features"]["lk"]["fb_threshold_px"] == 1.5
    # "model" only names geometric models; the epipolar block names its implementation so
    assert _misnamed(result) == [] and result["schema_version"] == "3.0"
    assert result["epipolar"]["implementation"] == "opencv" and "path" not in result["epipolar"]
    assert {p["model"] for p in result["background"]["per_pair"]} <= {"H", "F"}


def test_store_rows_exports_and_statistics_name_the_generator(tmp_path: Path, scored: dict):
    """The store's columns, its joined and flat rows, the CSV export and the statistics'
    records call the video generator ``generator`` (never ``model``)."""
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as s:
        for i, cid in enumerate(("a", "b")):
            s.put({"clip_id": cid, "generator": f"gen{i}", "generator_version": "1",
                   "prompt_category": "C1", "seed": i, "scene": cid}, cid, "cfg",
                  fake_result(cid, ir=0.9 + 0.05 * i) if i else dict(scored, config_hash="cfg"))
        rows = s.rows()
        s.export_csv(tmp_path / "t.csv")
        raw = list(s.raw_clips())
    conn = sqlite3.connect(db)
    columns = {t: [r[1] for r in conn.execute(f"PRAGMA table_info({t})")]
               for t in ("clips", "results", "leaderboard")}
    conn.close()
    with (tmp_path / "t.csv").open() as fh:
        header = next(csv.reader(fh))
    names = {"clips": columns["clips"], "results": columns["results"],
             "leaderboard": columns["leaderboard"], "CLIP_COLUMNS": CLIP_COLUMNS,
             "CLIP_FIELDS": CLIP_FIELDS, "FLAT_COLUMNS": FLAT_COLUMNS, "csv": header,
             "row": list(rows[0]), "raw": list(raw[0]), "flat": list(flatten_row(rows[0])),
             "table1": list(stats.table1(rows, n_boot=20)[0]),
             "status_counts": list(stats.status_counts(rows)[0]),
             "scene_balanced": list(stats.scene_balanced(rows, "ir", n_boot=20)[0])}
    bad = {k: sorted(set(v) & (GENERATOR_RETIRED | RETIRED)) for k, v in names.items()}
    assert {k: v for k, v in bad.items() if v} == {}
    assert all("generator" in v for k, v in names.items() if k != "results")
    assert [r["generator"] for r in rows] == ["gen0", "gen1"]
    assert [_misnamed(r) for r in rows] == [[], []]
    assert [(r["generator"], r["n"]) for r in stats.status_counts(rows)] == [("gen0", 1),
                                                                             ("gen1", 1)]


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


def test_retired_generator_names_still_work_with_a_warning(tmp_path: Path):
    """``model`` / ``model_version`` naming the video generator: manifest columns, the
    ManifestEntry attributes, clip-row keys of the store, JSONL result keys and the grouping
    of the statistics."""
    m = tmp_path / "m.csv"
    m.write_text("clip_id,path,model,model_version,prompt\na,a.mp4,wan,2.1,p\nb,b.mp4,sora,,p\n")
    with pytest.warns(DeprecationWarning) as record:
        entries = load_manifest(m)
    assert [str(w.message).split(": ", 1)[1] for w in record] == [
        "manifest column 'model' is deprecated; use 'generator' (docs/GLOSSARY.md)",
        "manifest column 'model_version' is deprecated; use 'generator_version' "
        "(docs/GLOSSARY.md)"]  # once per manifest, not once per row
    assert [(e.generator, e.generator_version) for e in entries] == [("wan", "2.1"),
                                                                     ("sora", None)]
    with pytest.warns(DeprecationWarning, match="ManifestEntry.model is deprecated; use "
                                                 "ManifestEntry.generator"):
        assert entries[0].model == "wan"
    with pytest.warns(DeprecationWarning, match="ManifestEntry.model_version is deprecated"):
        assert entries[0].model_version == "2.1"
    j = tmp_path / "m.jsonl"
    j.write_text(json.dumps({"path": "a.mp4", "model": "wan", "generator": "wan"}) + "\n")
    with pytest.warns(DeprecationWarning, match="manifest column 'model'"):
        assert load_manifest(j)[0].generator == "wan"  # both given and equal: fine
    j.write_text(json.dumps({"path": "a.mp4", "model": "wan", "generator": "sora"}) + "\n")
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="line 1: generator "
                                                         "'sora' and model 'wan' disagree"):
        load_manifest(j)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        j.write_text(json.dumps({"path": "a.mp4", "generator": "wan"}) + "\n")
        assert load_manifest(j)[0].generator == "wan"  # the current name never warns

    db = tmp_path / "r.sqlite"
    with ResultStore(db) as s:
        with pytest.warns(DeprecationWarning, match="clip row key 'model' is deprecated; use "
                                                     "'generator'"):
            s.put({"clip_id": "a", "model": "wan", "prompt_category": "C1", "seed": 1,
                   "scene": "a"}, "h1", "cfg", fake_result("a"))
        s.put({"clip_id": "b", "generator": "sora", "prompt_category": "C1", "seed": 2,
               "scene": "b"}, "h2", "cfg", fake_result("b", ir=0.9))
        rows = s.rows()
    assert [(r["clip_id"], r["generator"]) for r in rows] == [("a", "wan"), ("b", "sora")]
    with pytest.warns(DeprecationWarning, match="grouping by 'model' is deprecated; use "
                                                 "'generator'"):
        old = stats.status_counts(rows, by=("model",))
    assert old == [{"model": "sora", "n": 1, "ok": 1, "not_applicable": 0, "error": 0},
                   {"model": "wan", "n": 1, "ok": 1, "not_applicable": 0, "error": 0}]
    assert [{("model" if k == "generator" else k): v for k, v in r.items()}
            for r in stats.status_counts(rows)] == old

    res = v2_result("c", prompt_category="C3")
    res["meta"] = {"model": "wan"}
    (tmp_path / "r.jsonl").write_text(json.dumps(res) + "\n")
    with pytest.warns(DeprecationWarning, match="result key 'model' is deprecated"):
        (row,) = load_results(tmp_path / "r.jsonl")
    assert row["generator"] == "wan" and row["result"]["epipolar"]["implementation"] == "torch"


def test_retired_cost_and_state_names_still_work_with_a_warning():
    """``Fit.score`` (a cost) and the epipolar Metric state ``error_sum`` (a geometric error
    sum, px, not a count of failures): the attributes still read, and a state_dict saved under
    the old state name still loads."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.rand(2, 40, 2, generator=g, dtype=torch.float64) * 300
    fit = ransac_homography(x1, x1 + torch.tensor([3.0, -2.0], dtype=torch.float64), seed=0)
    assert "cost" in {f.name for f in dataclasses.fields(Fit)}
    assert "score" not in {f.name for f in dataclasses.fields(Fit)}
    assert torch.all(fit.cost < 1e-12) and fit.cost.shape == (2,)  # exact translation: MSAC 0
    with pytest.warns(DeprecationWarning, match="Fit.score is deprecated; use Fit.cost"):
        assert torch.equal(fit.score, fit.cost)

    metric = EpipolarError()
    metric.epipolar_error_sum_px += 3.25
    metric.num_ok += 2
    with pytest.warns(DeprecationWarning, match="metric state error_sum is deprecated; use "
                                                 "epipolar_error_sum_px"):
        assert float(metric.error_sum) == 3.25
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # torchmetrics: compute before update
        assert float(metric.compute()) == 1.625
    for prefix, make in (("", EpipolarError), ("EpipolarError.", epipolar_collection)):
        src = make()
        src.persistent(True)
        target = src if prefix == "" else src["EpipolarError"]
        target.epipolar_error_sum_px += 3.25
        target.num_ok += 2
        saved = {k.replace("epipolar_error_sum_px", "error_sum"): v
                 for k, v in src.state_dict().items()}  # a checkpoint from before the rename
        assert f"{prefix}error_sum" in saved and f"{prefix}epipolar_error_sum_px" not in saved
        new = make()
        with pytest.warns(DeprecationWarning) as record:
            new.load_state_dict(saved)  # strict: nothing unexpected, nothing missing
        members = ("",) if prefix == "" else ("EpipolarError.", "EpipolarInlierRate.",
                                              "FeatureMatchCoverage.")
        assert sorted(str(w.message).split(" is ")[0] for w in record) == [
            f"metric state {m}error_sum" for m in members]
        loaded = new if prefix == "" else new["EpipolarError"]
        assert float(loaded.epipolar_error_sum_px) == 3.25 and int(loaded.num_ok) == 2


def test_schema_2_results_read_with_the_implementation_key():
    old = v2_result("x")
    assert old["epipolar"]["path"] == "torch"
    back = ClipResult.from_dict(old)
    assert back.epipolar["implementation"] == "torch" and "path" not in back.epipolar
    assert back.to_dict()["schema_version"] == "3.0"
    assert old["epipolar"]["path"] == "torch"  # the input is not modified
