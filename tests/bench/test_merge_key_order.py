"""geocon merge: a clip row whose stored manifest entry differs from OUT's only in JSON key
order (another writer, a hand edit) is the same row: counted as already there, never rewritten,
never a conflict; a real entry change next to a reordering is still an update that lists only
the field that changed. Into SQLite and into PostgreSQL (tests/pg_server.py)."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import pytest
from helpers import _clip, fake_result

from geocon_torch.bench import ResultStore, merge_stores
from geocon_torch.cli import main

#: one manifest entry in two key orders (nested too), and one with a field changed
ENTRY = '{"clip_id": "x", "extra": {"fps": 24, "lens": "wide"}, "seed": 1}'
REORDERED = '{"seed": 1, "extra": {"lens": "wide", "fps": 24}, "clip_id": "x"}'
CHANGED = '{"seed": 2, "extra": {"lens": "wide", "fps": 24}, "clip_id": "x"}'


@pytest.fixture(params=["sqlite", "postgresql"])
def out_db(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "merged.sqlite")
    return request.getfixturevalue("pg_url")


def _shard(path: Path, entry_json: str, updated_at: float) -> Path:
    """A SQLite shard holding clip x (result included) with this stored entry and write time."""
    with ResultStore(path) as s:
        s.put(_clip("x"), "h", "cfg", fake_result("x"))
        (row,) = s.raw_clips()
        s.insert_raw([], [{**row, "entry_json": entry_json, "updated_at": updated_at}],
                     replace=True)
    return path


def _clip_rows(db) -> List[Dict]:
    with ResultStore(db) as s:
        return list(s.raw_clips())


@pytest.mark.parametrize("later_s, skew_s", [(1000.0, 0.0), (0.0, 0.0), (3.0, 60.0)])
def test_an_entry_in_another_key_order_is_the_same_row(tmp_path: Path, out_db, later_s, skew_s):
    """Newer, same write time, and within the clock-skew window: all "already there" (before:
    an update, a conflict, a conflict); OUT keeps its row as written."""
    first = merge_stores(out_db, [_shard(tmp_path / "a.sqlite", ENTRY, 1000.0)])
    assert first.clips_added == 1
    before = _clip_rows(out_db)
    assert before[0]["entry_json"] == ENTRY
    shard = _shard(tmp_path / "b.sqlite", REORDERED, 1000.0 + later_s)
    rep = merge_stores(out_db, [shard], clock_skew_s=skew_s)
    assert (rep.clips_added, rep.clips_same, rep.clips_updated, rep.clips_older) == (0, 1, 0, 0)
    assert (rep.results_added, rep.results_same) == (0, 1)
    assert rep.updates == [] and rep.conflicts == []
    assert _clip_rows(out_db) == before  # not rewritten: same text, same updated_at


def test_a_changed_field_next_to_a_reordering_is_an_update_of_that_field(tmp_path: Path,
                                                                           out_db):
    """Key order and seed 1 -> 2: the newer row wins and the update lists entry.seed only."""
    merge_stores(out_db, [_shard(tmp_path / "a.sqlite", ENTRY, 1000.0)])
    rep = merge_stores(out_db, [_shard(tmp_path / "b.sqlite", CHANGED, 2000.0)])
    assert (rep.clips_same, rep.clips_updated, rep.conflicts) == (0, 1, [])
    (u,) = rep.updates
    assert (u["table"], u["clip_id"], u["differences"]) == ("clips", "x", {"entry.seed": [1, 2]})
    (row,) = _clip_rows(out_db)
    assert (row["entry_json"], row["updated_at"]) == (CHANGED, 2000.0)


def test_cli_counts_a_reordered_entry_as_already_there(tmp_path: Path, capsys):
    """``geocon merge OUT A B``: clip x added from A, already there in B; nothing updated."""
    a = _shard(tmp_path / "a.sqlite", ENTRY, 1000.0)
    b = _shard(tmp_path / "b.sqlite", REORDERED, 2000.0)
    rc = main(["merge", str(tmp_path / "out.sqlite"), str(a), str(b)])
    out = capsys.readouterr().out
    assert rc == 0
    assert "clips 1 added, 1 already there, 0 updated from newer rows" in out
    assert "0 conflict(s)" in out and "updated clip" not in out
