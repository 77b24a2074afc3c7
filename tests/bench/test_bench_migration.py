"""One meaning per name across the bench / report floor: the manifest's prompt family is
``prompt_category``, the scorer's post-hoc behaviour is ``behaviour``, the video generator is
``generator`` (never "model"), the epipolar block's implementation is ``implementation`` (never
"path"); schema-1.0 results (one ``category`` field), schema-2.0 results (``epipolar.path``),
format-1 stores (``clips.category``, ``clips.model``) and format-2 stores (``clips.model``) are
still read."""
from __future__ import annotations

import csv
import json
import sqlite3
from pathlib import Path

import pytest
from helpers import (
    _FORMAT_1,
    _FORMAT_2,
    CountingScorer,
    _v1_rows,
    fake_result,
    format_1_rows,
    format_2_rows,
    v2_result,
    write_clips,
    write_jsonl,
)

from geocon_torch.bench import (
    ResultStore,
    StoreError,
    flatten_row,
    load_results,
    merge_stores,
    run_manifest,
    stats,
)
from geocon_torch.report import build_report


def test_v1_jsonl_rows_load_with_the_right_fields(tmp_path: Path):
    with pytest.warns(DeprecationWarning, match="result key 'model' is deprecated; use "
                                                 "'generator'"):
        rows = load_results(write_jsonl(tmp_path / "old.jsonl", _v1_rows()))
    assert [r["generator"] for r in rows] == ["m", "m"] and "model" not in rows[0]
    c4, stress = rows
    assert c4["prompt_category"] == "C4" and c4["scene"] == "C4|a car|1"
    assert c4["result"]["prompt_category"] == "C4" and c4["result"]["behaviour"] is None
    assert "category" not in c4["result"] and c4["result"]["schema_version"] == "3.0"
    # "Stress" was a measured behaviour, not a prompt family: it never keys a scene or a regime
    assert stress["prompt_category"] is None and stress["scene"] == "||2"
    assert stress["result"]["behaviour"] == "Stress"
    flat = [flatten_row(r) for r in rows]
    assert [(f["prompt_category"], f["behaviour"]) for f in flat] == [("C4", None),
                                                                        (None, "Stress")]
    assert "category" not in flat[0]
    # only C4 has a designed regime (H); "Stress" is not read as the prompt alias "stress" (C6)
    obs = stats.gate_observations(rows)
    assert obs["clips"] == ["c4"] and obs["is_f"].tolist() == [False]


def test_v1_results_go_into_the_store_migrated(tmp_path: Path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        for i, res in enumerate(_v1_rows()):
            s.put({"clip_id": res["clip"], "generator": "m", "seed": i, "scene": res["clip"]},
                  f"h{i}", "cfg", res)
        rows = {r["clip_id"]: r for r in s.rows()}
        stored = dict(s._conn.execute("SELECT content_hash, result_json FROM results"))
    assert rows["c4"]["result"]["prompt_category"] == "C4"
    assert rows["stress"]["result"]["behaviour"] == "Stress"
    assert all(json.loads(v)["schema_version"] == "3.0" and "category" not in json.loads(v)
               for v in stored.values())
    flat = {r["clip_id"]: flatten_row(r) for r in rows.values()}
    assert flat["c4"]["prompt_category"] == "C4" and flat["stress"]["behaviour"] == "Stress"
    with ResultStore(tmp_path / "r.sqlite") as s, pytest.raises(ValueError,
                                                                  match="prompt_category"):
        s.put({"clip_id": "x", "category": "C1"}, "h9", "cfg", fake_result("x"))


@pytest.mark.filterwarnings("ignore:.*result key 'model':DeprecationWarning")
def test_report_on_v1_jsonl(tmp_path: Path):
    page = build_report(write_jsonl(tmp_path / "old.jsonl", _v1_rows()), tmp_path / "rep",
                        draw=False, n_boot=200, cards=2).read_text()
    assert "Per prompt category" in page and "2 clips" in page
    section = page[page.index("Per prompt category"):page.index("id='gate'")]
    assert "<td class='l'>C4</td>" in section and "Stress" not in section


def test_v2_results_read_with_the_implementation_key(tmp_path: Path):
    """A 2.0 JSONL (``epipolar.path``, the generator under ``meta.model``) reads as 3.0; a 2.0
    and a 3.0 row of the same scores merge as the same result."""
    old = v2_result("a", prompt_category="C3")
    old["meta"] = {"model": "wan", "model_version": "2.1"}
    assert old["epipolar"]["path"] == "torch" and "implementation" not in old["epipolar"]
    with pytest.warns(DeprecationWarning, match="result key 'model"):
        (row,) = load_results(write_jsonl(tmp_path / "old.jsonl", [old]))
    ep = row["result"]["epipolar"]
    assert ep["implementation"] == "torch" and "path" not in ep
    assert row["result"]["schema_version"] == "3.0" and row["generator"] == "wan"
    assert row["generator_version"] == "2.1"
    assert flatten_row(row)["epipolar_error"] == 0.5
    for name, res in (("a.sqlite", v2_result("a", prompt_category="C3")),
                      ("b.sqlite", fake_result("a", prompt_category="C3"))):
        with ResultStore(tmp_path / name) as s:
            s._write([("INSERT INTO results VALUES (?,?,?,?,?,?,?,?)",
                       ("h", "cfg", "ok", None, res["schema_version"], "0.1.0",
                        json.dumps(res), 0.0))])
    report = merge_stores(tmp_path / "a.sqlite", [tmp_path / "b.sqlite"])
    assert report.results_same == 1 and report.conflicts == []


def test_v2_gvgc_block_reads_with_the_implementation_key():
    """Schema 2.0 wrote the GVGC block of preset "all" (``epipolar_gvgc``) with ``path`` too."""
    from geocon_torch.result import migrate_result

    old = v2_result("a", prompt_category="C3")
    old["epipolar_gvgc"] = dict(old["epipolar"])
    new = migrate_result(old)
    for name in ("epipolar", "epipolar_gvgc"):
        assert new[name]["implementation"] == "torch" and "path" not in new[name]
    assert old["epipolar_gvgc"]["path"] == "torch"  # the input is not modified


def _old_store(path: Path, fmt: str = "1") -> Path:
    conn = sqlite3.connect(path)
    layout = _FORMAT_2 if fmt == "2" else _FORMAT_1.replace("'store_format', '1'",
                                                             f"'store_format', '{fmt}'")
    conn.executescript(layout)
    results, clips = format_2_rows() if fmt == "2" else format_1_rows()
    conn.executemany("INSERT INTO results VALUES (?,?,?,?,?,?,?,?)", results)
    conn.executemany("INSERT INTO clips VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", clips)
    conn.commit()
    conn.close()
    return path


def test_format_1_store_is_migrated_in_place(tmp_path: Path):
    db = _old_store(tmp_path / "old.sqlite")
    with ResultStore(db) as s:
        rows = {r["clip_id"]: r for r in s.rows()}
        assert rows["c4"]["prompt_category"] == "C4" and "category" not in rows["c4"]
        assert rows["stress"]["result"]["behaviour"] == "Stress"
        s.put({"clip_id": "new", "generator": "m", "prompt_category": "C2", "seed": 5,
               "scene": "s5"}, "h5", "cfg", fake_result("new", prompt_category="C2"))
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key='store_format'").fetchone() == ("3",)
    conn.close()
    rows = load_results(db)  # reopening a migrated store is a no-op
    assert [(r["clip_id"], r["prompt_category"]) for r in rows] == [
        ("c4", "C4"), ("new", "C2"), ("stress", None)]
    page = build_report(db, tmp_path / "rep", draw=False, n_boot=200, cards=1).read_text()
    assert "Per prompt category" in page and "3 clips" in page


def test_format_2_store_is_migrated_to_generator_columns(tmp_path: Path):
    """A store written before the generator rename (format 2: ``clips.model``, 2.0 results with
    ``epipolar.path``) is migrated on open; its result JSON is kept as written and read as
    3.0; rows, exports, statistics and the report name the generator ``generator``."""
    db = _old_store(tmp_path / "old.sqlite", fmt="2")
    with ResultStore(db) as s:
        rows = {r["clip_id"]: r for r in s.rows()}
        raw = {c["clip_id"]: c for c in s.raw_clips()}
        s.export_csv(tmp_path / "t.csv")
    assert [(r["generator"], r["generator_version"], r["prompt_category"], r["path"])
            for r in rows.values()] == [("gen0", "v0", "C1", "/videos/c1.mp4"),
                                        ("gen1", "v1", "C3", "/videos/c3.mp4")]
    assert not {"model", "model_version"} & (set(rows["c1"]) | set(raw["c1"]))
    assert rows["c3"]["result"]["epipolar"]["implementation"] == "torch"
    assert rows["c3"]["result"]["schema_version"] == "3.0"
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key='store_format'").fetchone() == ("3",)
    cols = [r[1] for r in conn.execute("PRAGMA table_info(clips)")]
    assert cols[3:5] == ["generator", "generator_version"] and "model" not in cols
    stored = json.loads(conn.execute("SELECT result_json FROM results WHERE content_hash='h1'")
                        .fetchone()[0])
    conn.close()
    assert stored["schema_version"] == "2.0" and stored["epipolar"]["path"] == "torch"
    with (tmp_path / "t.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert [(t["generator"], t["generator_version"], t["ir"]) for t in table] == [
        ("gen0", "v0", "0.9"), ("gen1", "v1", "0.9500000000000001")]
    assert "model" not in table[0]
    t1 = stats.table1(load_results(db), n_boot=50)  # reopening a migrated store is a no-op
    assert [(r["generator"], round(r["ir_pct"], 6)) for r in t1] == [("gen0", 90.0),
                                                                      ("gen1", 95.0)]
    page = build_report(db, tmp_path / "rep", draw=False, n_boot=50, cards=1).read_text()
    assert "<th scope='col' class='l'>generator</th>" in page
    assert ">model<" not in page and "gen1" in page


def test_newer_store_format_fails_with_the_fix(tmp_path: Path):
    db = _old_store(tmp_path / "future.sqlite", fmt="9")
    with pytest.raises(StoreError, match="format 9 .*upgrade geocon_torch"):
        ResultStore(db)


def test_runner_keeps_prompt_family_and_behaviour_apart(tmp_path: Path):
    rows = write_clips(tmp_path / "clips", 2)
    rows[0]["category"] = "C4"
    rows[1].pop("category")
    rows[1]["prompt_category"] = "Stress"  # a free prompt label that happens to be a behaviour

    class Measuring(CountingScorer):
        def __call__(self, entry, config, device):
            res = super().__call__(entry, config, device)
            res["behaviour"] = "Static"  # what the scorer measured
            return res

    run_manifest(write_jsonl(tmp_path / "m.jsonl", rows), tmp_path / "r.sqlite",
                 score_fn=Measuring(), progress=False)
    with ResultStore(tmp_path / "r.sqlite") as s:
        got = {r["clip_id"]: r for r in s.rows()}
    assert got["c0"]["prompt_category"] == "C4" and got["c0"]["result"]["behaviour"] == "Static"
    assert got["c0"]["result"]["prompt_category"] == "C4"
    assert got["c1"]["prompt_category"] == "Stress"
    assert got["c1"]["result"]["behaviour"] == "Static"
    assert got["c1"]["result"]["prompt_category"] == "Stress"
