"""Reading a store that has grown for months: the cost of a read follows what is read.

* A stored row (checked in full when written) gets the cheap check on every read: its
  top-level fields, non-finite numbers while parsing, the full walk only for a row with an
  escaped surrogate; a corrupted row is still a ResultSchemaError naming the store and clip.
* Clip ids that repeat across generators in a results JSONL get unique ids in linear time.
* A reader given another program's SQLite file refuses it and leaves it as it was.
"""
from __future__ import annotations

import json
import os
import re
import sqlite3
from collections import defaultdict
from pathlib import Path

import pytest
from helpers import _clip, fake_result, write_jsonl

from geocon_torch.bench import ResultStore, load_results
from geocon_torch.bench import schema as schema_mod
from geocon_torch.bench import store as store_mod
from geocon_torch.bench.ids import derive_clip_ids
from geocon_torch.bench.manifest import scene_key
from geocon_torch.bench.schema import ResultSchemaError
from geocon_torch.bench.store import StoreError, open_readable
from geocon_torch.cli import main
from geocon_torch.result import migrate_result

PAIRS = 300  # per_pair entries of a stored row: the nested part the full check walks


def _store(db: Path, n: int = 4, configs=("cfgA",)) -> Path:
    per_pair = [{"pair": [t, t + 1], "ir": 0.97, "ge_px": 1.25, "valid": True,
                 "num_matches": 100} for t in range(PAIRS)]
    with ResultStore(db) as s:
        for cfg in configs:
            for i in range(n):
                s.put(_clip(f"c{i}"), f"h{i}", cfg,
                      fake_result(f"c{i}", ir=0.9 + 0.01 * i, config_hash=cfg,
                                  per_pair=per_pair))
    return db


def _walk_counter(monkeypatch) -> list:
    """Counts the calls of the schema's nested walk (``_bad_paths``)."""
    calls = [0]
    real = schema_mod._bad_paths

    def counting(*args):
        calls[0] += 1
        return real(*args)

    monkeypatch.setattr(schema_mod, "_bad_paths", counting)
    return calls


# --- F4: the cheap check of stored rows ----------------------------------------------------
def test_stored_rows_are_checked_without_the_nested_walk(tmp_path: Path, monkeypatch):
    """Each stored row gets its top-level fields checked (about 20 values), never the walk
    over its ~1800 nested values; the rows are those stored, bit for bit; a JSONL file keeps
    the full check of every line."""
    db = _store(tmp_path / "s.sqlite")
    calls = _walk_counter(monkeypatch)
    rows = load_results(db)
    assert [r["clip_id"] for r in rows] == ["c0", "c1", "c2", "c3"]
    assert calls[0] <= 40 * len(rows)  # the full walk: > 6 * PAIRS calls per row
    conn = sqlite3.connect(db)
    stored = dict(conn.execute("SELECT content_hash, result_json FROM results"))
    conn.close()
    assert [r["result"] for r in rows] == [migrate_result(json.loads(stored[f"h{i}"]))
                                           for i in range(4)]
    assert rows[2]["result"]["background"]["ir"] == pytest.approx(0.92)

    lines = write_jsonl(tmp_path / "r.jsonl", [r["result"] for r in rows])
    calls[0] = 0
    assert [r["clip_id"] for r in load_results(lines)] == ["c0", "c1", "c2", "c3"]
    assert calls[0] > 6 * PAIRS * 4


def _corrupt(db: Path, text: str) -> None:
    conn = sqlite3.connect(db)
    conn.execute("UPDATE results SET result_json=? WHERE content_hash='h1'", (text,))
    conn.commit()
    conn.close()


def _text(edit) -> str:
    res = fake_result("c1", ir=0.91, config_hash="cfgA")
    edit(res)
    return json.dumps(res, sort_keys=True)


@pytest.mark.parametrize("text, problem", [
    (_text(lambda r: r.update(status="done")), r"status must be one of .*got 'done'"),
    (_text(lambda r: r.pop("config_hash")), "config_hash must be a string"),
    (_text(lambda r: r.update(background=[1, 2])), "background must be an object or null"),
    (_text(lambda r: r.update(schema_version="9.0")), "schema_version must be '3.x'"),
    (_text(lambda r: r["background"]["per_pair"][2].update(ge_px=float("nan"))),
     r"holds a non-finite number \(NaN\)"),
    (_text(lambda r: r["background"].update(ge_px=float("inf"))),
     r"holds a non-finite number \(Infinity\)"),
    (_text(lambda r: r["gate"].update(statistic=0.123456)).replace("0.123456", "1e999"),
     r"holds a non-finite number \(1e999\)"),
    (_text(lambda r: r["background"]["per_pair"][0].update(note="\udc80x")),
     r"text that is not UTF-8 at background\.per_pair\[0\]\.note"),
    ('{"clip": "c1", "status": ', r"the stored result is not JSON \(Expecting value\)"),
    ("[1, 2]", "a result must be a JSON object, got list"),
])
def test_a_corrupted_stored_row_is_a_clear_error(tmp_path: Path, text: str, problem: str):
    db = _store(tmp_path / "s.sqlite", n=3)
    _corrupt(db, text)
    with pytest.raises(ResultSchemaError, match=f"^{re.escape(str(db))}: clip c1: .*{problem}"):
        load_results(db)


def test_unchecked_reads_keep_what_they_read_and_refuse_no_json(tmp_path: Path):
    """``validate=False`` (geocon explain) reads a row the check refuses, as before; text that
    is no JSON object is a clear error there too (it was a bare JSONDecodeError / TypeError)."""
    db = _store(tmp_path / "s.sqlite", n=3)
    _corrupt(db, _text(lambda r: r["background"].update(ge_px=float("nan"))))
    ge = [r["result"]["background"]["ge_px"] for r in load_results(db, validate=False)]
    assert ge[0] == 1.0 and ge[1] != ge[1] and ge[2] == 1.0
    _corrupt(db, "[1, 2]")
    with pytest.raises(ResultSchemaError,
                       match=f"^{re.escape(str(db))}: clip c1: a result must be a JSON"):
        load_results(db, validate=False)


def test_a_row_outside_the_bmp_gets_the_full_check_and_loads(tmp_path: Path, monkeypatch):
    """An escaped surrogate pair (an emoji in a prompt) sends its row through the full walk,
    which accepts it; the other rows keep the cheap check."""
    db = _store(tmp_path / "s.sqlite", n=3)
    _corrupt(db, _text(lambda r: r.update(prompt_category="C1 \U0001F600")))
    calls = _walk_counter(monkeypatch)
    rows = load_results(db)
    read = calls[0]
    assert rows[1]["result"]["prompt_category"] == "C1 \U0001F600"
    calls[0] = 0
    assert schema_mod.result_problems(rows[1]["result"]) == []
    full = calls[0]  # the full walk of the 4-pair row c1
    assert full > 6 * 4 and full < read <= full + 2 * 40  # + two top-level checks (300 pairs)


# --- F6: linear clip-id de-duplication of a results JSONL ----------------------------------
def _jsonl_rows(spec) -> list:
    """(line, joined JSONL row) pairs of (clip_id, path, config) triples, as _load_jsonl makes
    them."""
    return [(n, store_mod._jsonl_row(fake_result(cid, path=p, config_hash=cfg,
                                                 prompt_category="C1")))
            for n, (cid, p, cfg) in enumerate(spec, 1)]


def _old_unique_ids(rows: list) -> None:
    """The derivation before the fix (quadratic: every other id of the config per group)."""
    groups = defaultdict(list)
    for lineno, row in rows:
        groups[(row.get("config_hash"), row["clip_id"])].append((lineno, row))
    for (cfg, cid), members in groups.items():
        if len(members) < 2:
            continue
        taken = [c for (h, c) in groups if h == cfg and c != cid]
        paths = [r.get("path") for _, r in members]
        for (_, row), new in zip(members, derive_clip_ids(paths, taken=taken)):
            row["clip_id"] = new


def test_repeated_jsonl_ids_get_the_hand_computed_ids(tmp_path: Path):
    spec = [("3", "/v/cogvideox/3.mp4", "cfgA"), ("3", "/v/sora/3.mp4", "cfgA"),
            ("a", "/v/x/a.mp4", "cfgA"), ("a", "/v/x/a.webm", "cfgA"),
            ("sora/5", "/w/sora/5.mp4", "cfgA"),  # a given id that a derived one must avoid
            ("5", "/v/sora/5.mp4", "cfgA"), ("5", "/v/pika/5.mp4", "cfgA"),
            ("3", "/v/sora/3.mp4", "cfgB"), ("u", "/v/sora/u.mp4", "cfgA")]
    lines = write_jsonl(tmp_path / "r.jsonl", [
        fake_result(c, path=p, config_hash=h, prompt_category="C1") for c, p, h in spec])
    rows = load_results(lines)
    assert [(r["clip_id"], r["config_hash"]) for r in rows] == [
        ("cogvideox/3", "cfgA"), ("sora/3", "cfgA"), ("a.mp4", "cfgA"), ("a.webm", "cfgA"),
        ("sora/5", "cfgA"), ("v/sora/5", "cfgA"), ("pika/5", "cfgA"), ("3", "cfgB"),
        ("u", "cfgA")]
    assert rows[5]["scene"] == scene_key("C1", None, None, "v/sora/5")  # the scene follows
    with_old = _jsonl_rows(spec)
    _old_unique_ids(with_old)
    assert [r["clip_id"] for _, r in with_old] == [r["clip_id"] for r in rows]


def test_ids_derived_for_two_groups_never_meet(tmp_path: Path):
    """Two repeated ids whose files share folder names (``3`` and ``x`` both under sora/ and
    cog/): the second group avoids the ids derived for the first (the old derivation gave
    ``sora/3`` and ``cog/3`` twice, merging two files' cards and scenes)."""
    spec = [("3", "/a/sora/3.mp4", "c"), ("3", "/a/cog/3.mp4", "c"),
            ("x", "/b/sora/3.mp4", "c"), ("x", "/b/cog/3.mp4", "c")]
    rows = _jsonl_rows(spec)
    store_mod._unique_jsonl_ids(rows, Path("r.jsonl"))
    assert [r["clip_id"] for _, r in rows] == ["sora/3", "cog/3", "b/sora/3", "b/cog/3"]


def test_many_repeats_give_the_ids_of_the_old_derivation():
    """8 generators naming their clips 0..59 (plus explicit ids that collide with derived
    ones, and extension twins) under two configs: the same ids as before the fix."""
    spec = [(str(k), f"/v/gen{g}/{k}.mp4", cfg) for cfg in ("c1", "c2") for k in range(60)
            for g in range(8)]
    spec += [("gen3/7", "/w/gen3/7.mp4", "c1"), ("e", "/v/e/e.mp4", "c1"),
             ("e", "/v/e/e.mov", "c1"), ("9", "/x/9.mp4", "c2")]
    new, old = _jsonl_rows(spec), _jsonl_rows(spec)
    store_mod._unique_jsonl_ids(new, Path("r.jsonl"))
    _old_unique_ids(old)
    assert [r["clip_id"] for _, r in new] == [r["clip_id"] for _, r in old]
    assert new[3 * 8 + 5][1]["clip_id"] == "gen5/3" and new[7 * 8 + 3][1]["clip_id"] == \
        "v/gen3/7"


def test_20k_repeated_rows_take_linear_work(monkeypatch):
    """20 000 rows, 2 500 ids x 8 generators: every id gets the distinguishing suffix, and the
    ids handed to the derivation as taken stay a small multiple of the rows (before the fix:
    every other id of the config per repeated id, 6 million in all)."""
    handed = [0]

    def counting(paths, taken=()):
        handed[0] += len(taken) + len(paths)
        assert handed[0] <= 4 * 20_000, "quadratic: every id of the config handed per group"
        return derive_clip_ids(paths, taken=taken)

    monkeypatch.setattr(store_mod, "derive_clip_ids", counting)
    rows = [(n, {"clip_id": str(n // 8), "path": f"/v/gen{n % 8}/{n // 8}.mp4",
                 "config_hash": "cfg", "seed": 1}) for n in range(20_000)]
    store_mod._unique_jsonl_ids(rows, Path("r.jsonl"))
    ids = [r["clip_id"] for _, r in rows]
    assert len(set(ids)) == 20_000
    assert ids[:3] == ["gen0/0", "gen1/0", "gen2/0"] and ids[-1] == "gen7/2499"


# --- F9: a reader never changes another program's database ---------------------------------
def _foreign(path: Path, journal: str = "delete") -> bytes:
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA journal_mode = {journal}")
    conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, text TEXT)")
    conn.execute("INSERT INTO notes (text) VALUES ('keep me')")
    conn.commit()
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("journal", ["delete", "wal"])
def test_readers_refuse_an_unrelated_sqlite_file_and_leave_it_unchanged(tmp_path: Path,
                                                                         journal: str, capsys):
    db = tmp_path / "notes.db"
    before = _foreign(db, journal)
    for read in (open_readable, load_results, lambda db: store_mod.config_counts(db)):
        with pytest.raises(StoreError,
                           match=f"^{re.escape(str(db))}: not a geocon result store .*notes"):
            read(db)
    assert main(["report", str(db), "--out", str(tmp_path / "rep"), "--no-draw"]) == 2
    assert main(["bench", "--db", str(db), "--all-configs", "--export-csv",
                 str(tmp_path / "t.csv")]) == 2
    err = capsys.readouterr().err
    assert err.count(f"{db}: not a geocon result store") == 2
    assert db.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["notes.db"]  # no -wal / -shm, no report, no csv
    conn = sqlite3.connect(db)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == journal
    assert conn.execute("SELECT text FROM notes").fetchall() == [("keep me",)]
    conn.close()


def test_readers_still_open_stores_and_empty_files(tmp_path: Path):
    """A geocon store (also one in WAL mode with a live writer) and an empty file still open;
    config_counts counts the joined rows per config without reading a result."""
    db = _store(tmp_path / "s.sqlite", n=2, configs=("cfgB", "cfgA"))
    with ResultStore(db) as live:
        live.put(_clip("late"), "h9", "cfgC", fake_result("late", config_hash="cfgC"))
        assert store_mod.config_counts(db) == {"cfgA": 2, "cfgB": 2, "cfgC": 1}
        assert live.config_counts() == {"cfgA": 2, "cfgB": 2, "cfgC": 1}
    empty = tmp_path / "empty.sqlite"
    empty.touch()
    with open_readable(empty) as s:
        assert s.count("clips") == 0


def test_counts_and_checked_rows_on_both_back_ends(any_db: str):
    """config_counts and the cheap check are the same SQL / code on SQLite and PostgreSQL;
    a corrupted row of one config leaves the other config readable."""
    with ResultStore(any_db) as s:
        for cfg, n in (("cfgB", 2), ("cfgA", 3)):
            for i in range(n):
                s.put(_clip(f"c{i}"), f"{cfg}-h{i}", cfg, fake_result(f"c{i}", config_hash=cfg))
        assert s.config_counts() == {"cfgA": 3, "cfgB": 2}
        s._write([("UPDATE results SET result_json=? WHERE content_hash=?",
                   ('{"clip": "c1", "status": "fine", "config_hash": "cfgA"}', "cfgA-h1"))])
    assert store_mod.config_counts(any_db) == {"cfgA": 3, "cfgB": 2}
    with pytest.raises(ResultSchemaError, match=r"clip c1: status must be one of .*'fine'"):
        load_results(any_db, config_hash="cfgA")
    assert [r["clip_id"] for r in load_results(any_db, config_hash="cfgB")] == ["c0", "c1"]
