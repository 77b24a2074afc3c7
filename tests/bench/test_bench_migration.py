"""One meaning per name across the bench / report floor: the manifest's prompt family is
``prompt_category``, the scorer's post-hoc behaviour is ``behaviour``; schema-1.0 results (one
``category`` field) and format-1 stores (``clips.category``) are still read."""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from helpers import (
    _FORMAT_1,
    CountingScorer,
    _v1_rows,
    fake_result,
    format_1_rows,
    write_clips,
    write_jsonl,
)

from geocon_torch.bench import (
    ResultStore,
    StoreError,
    flatten_row,
    load_results,
    run_manifest,
    stats,
)
from geocon_torch.report import build_report


def test_v1_jsonl_rows_load_with_the_right_fields(tmp_path: Path):
    rows = load_results(write_jsonl(tmp_path / "old.jsonl", _v1_rows()))
    c4, stress = rows
    assert c4["prompt_category"] == "C4" and c4["scene"] == "C4|a car|1"
    assert c4["result"]["prompt_category"] == "C4" and c4["result"]["behaviour"] is None
    assert "category" not in c4["result"] and c4["result"]["schema_version"] == "2.0"
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
            s.put({"clip_id": res["clip"], "model": "m", "seed": i, "scene": res["clip"]},
                  f"h{i}", "cfg", res)
        rows = {r["clip_id"]: r for r in s.rows()}
        stored = dict(s._conn.execute("SELECT content_hash, result_json FROM results"))
    assert rows["c4"]["result"]["prompt_category"] == "C4"
    assert rows["stress"]["result"]["behaviour"] == "Stress"
    assert all(json.loads(v)["schema_version"] == "2.0" and "category" not in json.loads(v)
               for v in stored.values())
    flat = {r["clip_id"]: flatten_row(r) for r in rows.values()}
    assert flat["c4"]["prompt_category"] == "C4" and flat["stress"]["behaviour"] == "Stress"
    with ResultStore(tmp_path / "r.sqlite") as s, pytest.raises(ValueError,
                                                                  match="prompt_category"):
        s.put({"clip_id": "x", "category": "C1"}, "h9", "cfg", fake_result("x"))


def test_report_on_v1_jsonl(tmp_path: Path):
    page = build_report(write_jsonl(tmp_path / "old.jsonl", _v1_rows()), tmp_path / "rep",
                        draw=False, n_boot=200, cards=2).read_text()
    assert "Per prompt category" in page and "2 clips" in page
    section = page[page.index("Per prompt category"):page.index("id='gate'")]
    assert "<td class='l'>C4</td>" in section and "Stress" not in section






def _old_store(path: Path, fmt: str = "1") -> Path:
    conn = sqlite3.connect(path)
    conn.executescript(_FORMAT_1.replace("'store_format', '1'", f"'store_format', '{fmt}'"))
    results, clips = format_1_rows()
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
        s.put({"clip_id": "new", "model": "m", "prompt_category": "C2", "seed": 5,
               "scene": "s5"}, "h5", "cfg", fake_result("new", prompt_category="C2"))
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE key='store_format'").fetchone() == ("2",)
    conn.close()
    rows = load_results(db)  # reopening a migrated store is a no-op
    assert [(r["clip_id"], r["prompt_category"]) for r in rows] == [
        ("c4", "C4"), ("new", "C2"), ("stress", None)]
    page = build_report(db, tmp_path / "rep", draw=False, n_boot=200, cards=1).read_text()
    assert "Per prompt category" in page and "3 clips" in page


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
