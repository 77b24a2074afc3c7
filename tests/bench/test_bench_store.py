"""SQLite store: keys, idempotent inserts, dedupe by content, WAL, concurrency, export."""
from __future__ import annotations

import csv
import sqlite3
import sys
import threading
from pathlib import Path

import pytest
from helpers import CountingScorer, _clip, fake_result, write_clips, write_jsonl

from geocon_torch.bench import (
    PostgresStore,
    ResultSchemaError,
    ResultStore,
    SQLiteStore,
    flatten_row,
    is_server_url,
    load_results,
)
from geocon_torch.cli import main
from geocon_torch.errors import InputError, OptionalDependencyError


def test_put_is_idempotent_and_keyed_by_content_and_config(any_db: str):
    """On both back ends (tests/pg_server.py): ResultStore(db) picks the back end by name."""
    with ResultStore(any_db) as s:
        assert isinstance(s, PostgresStore if is_server_url(any_db) else SQLiteStore)
        s.put(_clip("a"), "h1", "cfgA", fake_result("a", ir=0.9))
        s.put(_clip("a"), "h1", "cfgA", fake_result("a", ir=0.1))  # ignored: same key
        assert s.count() == 1 and s.count("clips") == 1
        assert s.rows()[0]["result"]["background"]["ir"] == 0.9
        s.put(_clip("a"), "h1", "cfgA", fake_result("a", ir=0.5), replace=True)
        assert s.rows()[0]["result"]["background"]["ir"] == 0.5
        # same bytes under another clip id -> one result, two clip rows
        s.put(_clip("b", generator="other"), "h1", "cfgA", None)
        assert s.count() == 1 and s.count("clips") == 2
        assert [r["clip_id"] for r in s.rows()] == ["a", "b"]
        assert s.rows()[1]["generator"] == "other"
        # another config is another key (a 64-bit seed fits on both back ends)
        s.put({**_clip("a"), "seed": 2 ** 40}, "h1", "cfgB", fake_result("a", ir=0.7))
        assert s.count() == 2 and s.config_hashes() == ["cfgA", "cfgB"]
        assert len(s.rows("cfgB")) == 1 and s.has("h1", "cfgB") and not s.has("h2", "cfgB")
        assert s.rows("cfgB")[0]["seed"] == 2 ** 40
        assert s.status_of("h1", "cfgA") == "ok" and s.linked("b", "cfgA") == "h1"
    if not is_server_url(any_db):
        conn = sqlite3.connect(any_db)
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    # reopening keeps everything
    with ResultStore(any_db) as s:
        assert s.count() == 2


def test_put_rejects_invalid_result(tmp_path: Path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        with pytest.raises(ResultSchemaError, match="non-finite numbers at background.ge_px"):
            s.put(_clip("a"), "h", "c", fake_result("a", ge=float("inf")))
        with pytest.raises(ValueError, match="clip_id"):
            s.put({}, "h", "c", fake_result("a"))
        assert s.count() == 0 and s.count("clips") == 0


def test_concurrent_writers_from_threads(tmp_path: Path):
    db = tmp_path / "r.sqlite"
    ResultStore(db).close()

    def work(k):
        with ResultStore(db) as s:
            for i in range(25):
                s.put(_clip(f"t{k}_{i}"), f"h{k}_{i}", "c", fake_result(f"t{k}_{i}"))

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with ResultStore(db) as s:
        assert s.count() == 100 and s.count("clips") == 100


def test_flatten_and_csv_export(tmp_path: Path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        s.put(_clip("a", prompt_category="C4"), "h1", "c", fake_result("a", ir=0.95, ge=2.0,
                                                                objects=[4.0, 6.0], score=0.8125))
        s.put(_clip("b"), "h2", "c", fake_result("b", status="error"))
        flat = [flatten_row(r) for r in s.rows()]
        assert flat[0]["ir"] == 0.95 and flat[0]["num_objects"] == 2
        assert flat[0]["adadfrc_mean"] == pytest.approx(0.8 * 5.0) and flat[0]["adap90_max"] == 6
        assert flat[0]["background_pass"] is False and flat[0]["prompt_category"] == "C4"
        assert flat[1]["status"] == "error" and flat[1]["ir"] is None
        assert flat[0]["score"] == 0.8125 and flat[1]["score"] is None
        out = s.export_csv(tmp_path / "r.csv")
    rows = list(csv.DictReader(out.open()))
    assert [r["clip_id"] for r in rows] == ["a", "b"]
    assert float(rows[0]["ge_px"]) == 2.0 and rows[1]["reason"] == "fake error"
    assert float(rows[0]["score"]) == 0.8125 and rows[1]["score"] == ""


@pytest.mark.parametrize("verdict", [True, False, None])
def test_flat_rows_carry_the_calibrated_verdict(tmp_path: Path, verdict):
    """The calibrated report gate's verdict (``background.pass_calibrated``, what the CLI
    table shows beside the paper's ``pass``) is a flat column and an export column; None
    (no calibration, or a regime without bounds) stays empty, never False."""
    res = fake_result("a", ir=0.99, ge=0.5)
    res["background"]["pass_calibrated"] = verdict
    with ResultStore(tmp_path / "r.sqlite") as s:
        s.put(_clip("a"), "h1", "c", res)
        s.put(_clip("b"), "h2", "c", fake_result("b", status="error"))
        flat = [flatten_row(r) for r in s.rows()]
        assert flat[0]["background_pass"] is True
        assert flat[0]["background_pass_calibrated"] is verdict
        assert flat[1]["background_pass_calibrated"] is None
        out = s.export_csv(tmp_path / "r.csv")
    rows = list(csv.DictReader(out.open()))
    assert [r["background_pass_calibrated"] for r in rows] == [
        "" if verdict is None else str(verdict), ""]


def test_parquet_missing_dependency_is_clear(tmp_path: Path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with ResultStore(tmp_path / "r.sqlite") as s:
        s.put(_clip("a"), "h1", "c", fake_result("a"))
        with pytest.raises(OptionalDependencyError, match=r"geocon_torch\[parquet\]"):
            s.export_parquet(tmp_path / "r.parquet")


def test_parquet_roundtrip(tmp_path: Path):
    pq = pytest.importorskip("pyarrow.parquet")
    with ResultStore(tmp_path / "r.sqlite") as s:
        s.put(_clip("a"), "h1", "c", fake_result("a", ir=0.93))
        s.export_parquet(tmp_path / "r.parquet")
    table = pq.read_table(tmp_path / "r.parquet").to_pylist()
    assert table[0]["clip_id"] == "a" and table[0]["ir"] == 0.93


def test_load_results_sqlite_and_jsonl(tmp_path: Path):
    with ResultStore(tmp_path / "r.sqlite") as s:
        s.put(_clip("a"), "h1", "c", fake_result("a"))
    rows = load_results(tmp_path / "r.sqlite")
    assert len(rows) == 1 and rows[0]["result"]["clip"] == "a"
    res = fake_result("j", prompt_category="C3")
    res["generator"] = "wan"
    res["seed"] = 7
    p = write_jsonl(tmp_path / "r.jsonl", [res, fake_result("k")])
    rows = load_results(p)
    assert [r["generator"] for r in rows] == ["wan", "-"]
    assert rows[0]["scene"] == "C3||7" and rows[1]["scene"] == "clip:k"
    bad = fake_result("z")
    bad["schema_version"] = "9.0"
    write_jsonl(p, [res, bad])
    with pytest.raises(ResultSchemaError, match="line 2: schema_version"):
        load_results(p)
    p.write_text("not json\n")
    with pytest.raises(ResultSchemaError, match="line 1: not JSON"):
        load_results(p)


def test_key_value_store_name_with_unknown_keys_is_refused(tmp_path: Path, monkeypatch, capsys):
    """A mistyped libpq string is no SQLite file name (the password would end up in one); the
    message names the unknown key, never a value. ./NAME or an existing file still opens."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", CountingScorer())
    bad = "sslmod=disable password=hunter2 host=db"
    with pytest.raises(InputError, match="'sslmod', which is not a libpq keyword"):
        ResultStore(bad)
    assert main(["bench", str(m), "--db", bad, "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert "'sslmod'" in err and "hunter2" not in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["clips", "m.jsonl"]
    with ResultStore("./run=1.sqlite") as s:  # a file of that name, on purpose
        s.put(_clip("a"), "h", "c", fake_result("a"))
    with ResultStore("run=1.sqlite") as s:  # now it exists: opened as usual
        assert s.count() == 1
