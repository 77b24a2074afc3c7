"""``geocon merge --clock-skew``: clip rows are ordered by their write times, which come from
each node's own clock; rows with other metadata written closer together than the stated skew
are a conflict (OUT keeps its row) instead of the later time winning."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import _clip, fake_result

from geocon_torch.bench import ResultStore, load_results, merge_stores
from geocon_torch.cli import main
from geocon_torch.errors import InputError


def _stores(tmp_path: Path, ahead_s: float, fix_after_s: float) -> tuple:
    """OUT holds clip x with generator "old" written by node A, whose clock runs ``ahead_s``
    seconds fast; node B's shard holds the fix ("new", same bytes) written ``fix_after_s``
    seconds later in real time. Returns (OUT, B's shard)."""
    out, node_b = tmp_path / "out.sqlite", tmp_path / "b.sqlite"
    with ResultStore(out) as s:
        s.put(_clip("x"), "h", "cfg", fake_result("x"))
        (row,) = s.raw_clips()
        t0 = float(row["updated_at"])
    with ResultStore(out) as s:
        s.insert_raw([], [{**row, "generator": "old", "updated_at": t0 + ahead_s}], replace=True)
    with ResultStore(node_b) as s:
        s.insert_raw([], [{**row, "generator": "new", "updated_at": t0 + fix_after_s}])
    return out, node_b


def test_without_a_skew_window_the_later_clock_wins(tmp_path: Path):
    """The documented default: node A's fast clock (600 s) makes its stale row look newer
    than node B's fix written 60 s later, and the fix is counted older (no conflict)."""
    out, node_b = _stores(tmp_path, ahead_s=600.0, fix_after_s=60.0)
    rep = merge_stores(out, [node_b])
    assert (rep.clips_older, rep.clips_updated, rep.conflicts) == (1, 0, [])
    assert [r["generator"] for r in load_results(out)] == ["old"]


def test_rows_closer_than_the_skew_window_are_a_conflict_naming_both_times(tmp_path: Path):
    out, node_b = _stores(tmp_path, ahead_s=600.0, fix_after_s=60.0)
    rep = merge_stores(out, [node_b], clock_skew_s=900.0)
    assert (rep.clips_older, rep.clips_updated) == (0, 0)
    (c,) = rep.conflicts
    assert c["differences"] == {"generator": ["old", "new"]}
    assert c["updated_at"][0] - c["updated_at"][1] == pytest.approx(540.0)
    assert [r["generator"] for r in load_results(out)] == ["old"]  # OUT keeps its row


def test_rows_further_apart_than_the_window_are_still_ordered(tmp_path: Path):
    """A fix written an hour after the stale row wins with a 900 s window as without one."""
    out, node_b = _stores(tmp_path, ahead_s=0.0, fix_after_s=3600.0)
    rep = merge_stores(out, [node_b], clock_skew_s=900.0)
    assert (rep.clips_updated, rep.conflicts) == (1, [])
    assert [r["generator"] for r in load_results(out)] == ["new"]


def test_cli_clock_skew_option_and_bad_values(tmp_path: Path, capsys):
    out, node_b = _stores(tmp_path, ahead_s=600.0, fix_after_s=60.0)
    assert main(["merge", str(out), str(node_b), "--clock-skew", "900"]) == 1
    captured = capsys.readouterr()
    assert "1 conflict(s)" in captured.out and 'generator: "old" vs "new"' in captured.err
    for bad in (-1.0, float("nan"), float("inf")):
        with pytest.raises(InputError, match="clock_skew_s must be a finite number"):
            merge_stores(out, [node_b], clock_skew_s=bad)


def test_cli_refuses_a_negative_or_non_finite_clock_skew(tmp_path: Path, capsys):
    out, node_b = _stores(tmp_path, ahead_s=0.0, fix_after_s=60.0)
    for bad in ("-1", "nan", "inf", "soon"):
        with pytest.raises(SystemExit) as exc:
            main(["merge", str(out), str(node_b), "--clock-skew", bad])
        assert exc.value.code == 2 and "--clock-skew" in capsys.readouterr().err
