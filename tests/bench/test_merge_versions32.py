"""geocon merge across releases (upgrade audit s32, F1 / F3 / F4): conflict and update listings
name the fields that matter first, without the config block of one config hash, with absent
keys as absent and the number of fields left out; a row of a newer version is never replaced
by an older one; rows of other versions a merge adds are counted per shard and named."""
from __future__ import annotations

import json
from pathlib import Path

from helpers import fake_result

from geocon_torch import __version__
from geocon_torch.bench import ResultStore, load_results, merge_stores
from geocon_torch.cli import main

OLD = "0.2.4"  # an older release
NEWER = "99.0.0"  # a release newer than the installed one
#: the lens block rows record since io.lens exists (rows of older releases have none)
LENS = {"cx": None, "cy": None, "fx": None, "fy": None, "height": None, "width": None,
        "k1": 0.0, "k2": 0.0, "k3": 0.0, "p1": 0.0, "p2": 0.0}


def _store(path: Path, rows) -> Path:
    """A SQLite store of ``rows``: (clip id, result) under content hash h<clip>, config cfg."""
    with ResultStore(path) as s:
        for clip, res in rows:
            s.put({"clip_id": clip, "generator": "m"}, f"h{clip}", "cfg", res)
    return path


def _result(clip: str = "x", version: str = __version__, **kw) -> dict:
    res = fake_result(clip, **kw)
    res["version"] = version
    return res


def _stored(db) -> dict:
    """{clip_id: (version, background IR)} of a store."""
    return {r["clip_id"]: (r["result"]["version"], r["result"]["background"]["ir"])
            for r in load_results(db)}


# --- F1: what a conflict / update lists --------------------------------------------------------
def test_a_pre_lens_row_lists_score_and_version_not_the_config_block(tmp_path: Path):
    new = _result(score=0.9989, objects=(1.49,))
    new["config"] = {"preset": "geocon", "io": {"long_side": 1024, "lens": LENS}}
    old = _result(version=OLD, score=0.9292, objects=(1.61,))
    old["config"] = {"preset": "geocon", "io": {"long_side": 1024}}
    out = _store(tmp_path / "out.sqlite", [("x", new)])
    node = _store(tmp_path / "node.sqlite", [("x", old)])
    (c,) = merge_stores(out, [node]).conflicts
    diffs = c["differences"]
    assert list(diffs)[:2] == ["score", "version"]
    assert diffs["score"] == [0.9989, 0.9292] and diffs["version"] == [__version__, OLD]
    assert not any(k.startswith("config") for k in diffs)
    assert "more_differences" not in c


def test_a_long_listing_puts_headlines_first_and_says_how_many_were_left_out(
        tmp_path: Path, capsys):
    a = _result(objects=[0.1] * 20, ir=0.91, score=0.8)
    b = _result(version=OLD, objects=[0.2] * 20, ir=0.93, score=0.7)
    b["regime"] = "F"
    out = _store(tmp_path / "out.sqlite", [("x", a)])
    node = _store(tmp_path / "node.sqlite", [("x", b)])
    (c,) = merge_stores(out, [node]).conflicts
    keys = list(c["differences"])
    assert keys[:5] == ["score", "regime", "version", "background.ir", "background.ir_h"]
    assert len(keys) == 12
    # score, regime, version, 3 background IRs, 4 per-pair IRs and 40 object fields
    assert c["more_differences"] == 50 - 12
    conflicts = tmp_path / "c.jsonl"
    assert main(["merge", str(out), str(node), "--conflicts", str(conflicts)]) == 1
    assert "(+38 more fields)" in capsys.readouterr().err
    assert json.loads(conflicts.read_text())["more_differences"] == 38


def test_a_field_missing_on_one_side_is_absent_not_null(tmp_path: Path, capsys):
    a = _result(ir=0.91)
    b = _result(version=OLD, ir=0.91)
    a["background"]["container_count_mismatch"] = None  # a field OLD did not write
    out = _store(tmp_path / "out.sqlite", [("x", a)])
    node = _store(tmp_path / "node.sqlite", [("x", b)])
    (c,) = merge_stores(out, [node]).conflicts
    assert c["differences"]["background.container_count_mismatch"] == [None, {"absent": True}]
    assert main(["merge", str(out), str(node)]) == 1
    assert "background.container_count_mismatch: null vs absent" in capsys.readouterr().err


def test_an_update_lists_what_moved_first(tmp_path: Path):
    old = _result(version=OLD, score=0.5, objects=[0.1] * 20)
    old["config"] = {"preset": "geocon"}
    new = _result(score=0.6, objects=[0.2] * 20)
    new["config"] = {"preset": "geocon", "io": {"lens": LENS}}
    out = _store(tmp_path / "out.sqlite", [("x", old)])
    node = _store(tmp_path / "node.sqlite", [("x", new)])
    rep = merge_stores(out, [node])
    (u,) = rep.updates
    assert list(u["differences"])[:2] == ["score", "version"]
    assert u["more_differences"] == 42 - 12


# --- F3: a newer row is never replaced by an older one ------------------------------------------
def test_versions_are_ordered_by_release_not_by_text():
    from geocon_torch.bench.stats import version_order

    assert version_order("0.2.10") > version_order("0.2.9") > version_order("0.2.7rc1")
    assert version_order("unknown") < version_order("0.0.1")
    assert version_order(None) == version_order("not a version") == version_order("unknown")


def test_out_rows_of_a_newer_version_are_kept_and_the_conflict_says_upgrade(tmp_path, capsys):
    out = _store(tmp_path / "out.sqlite", [("x", _result(version=NEWER, ir=0.99))])
    node = _store(tmp_path / "node.sqlite", [("x", _result(ir=0.90))])
    rep = merge_stores(out, [node])
    assert (rep.results_upgraded, len(rep.conflicts)) == (0, 1)
    assert _stored(out) == {"x": (NEWER, 0.99)}
    hint = rep.conflicts[0]["hint"]
    assert f"{NEWER} is newer than this geocon_torch {__version__}" in hint
    assert "upgrade geocon_torch" in hint and f"--db {node}" in hint
    assert main(["merge", str(out), str(node)]) == 1
    assert _stored(out) == {"x": (NEWER, 0.99)}


def test_a_shard_row_older_than_outs_error_row_does_not_replace_it(tmp_path: Path):
    out = _store(tmp_path / "out.sqlite", [("x", _result(status="error"))])
    node = _store(tmp_path / "node.sqlite", [("x", _result(version=OLD))])
    rep = merge_stores(out, [node])
    assert (rep.results_replaced, len(rep.conflicts)) == (0, 1)
    assert [r["status"] for r in load_results(out)] == ["error"]
    assert f"--db {node} --rescore-versions" in rep.conflicts[0]["hint"]


def test_a_newer_shard_row_replaces_nothing_and_says_upgrade_here(tmp_path: Path):
    out = _store(tmp_path / "out.sqlite", [("x", _result(version=OLD, ir=0.9))])
    node = _store(tmp_path / "node.sqlite", [("x", _result(version=NEWER, ir=0.99))])
    rep = merge_stores(out, [node])
    assert (rep.results_upgraded, len(rep.conflicts)) == (0, 1)
    assert f"upgrade geocon_torch here to {NEWER}" in rep.conflicts[0]["hint"]
    assert _stored(out) == {"x": (OLD, 0.9)}


def test_rows_of_no_version_are_older_and_replaced_by_the_installed_version(tmp_path: Path):
    out = _store(tmp_path / "out.sqlite", [("x", _result(version=None, ir=0.9))])
    node = _store(tmp_path / "node.sqlite", [("x", _result(ir=0.95))])
    rep = merge_stores(out, [node])
    assert (rep.results_upgraded, rep.conflicts) == (1, [])
    assert _stored(out) == {"x": (__version__, 0.95)}


# --- F4: rows of other versions that a merge adds --------------------------------------------
def test_added_rows_of_other_versions_are_counted_and_named_per_shard(tmp_path: Path, capsys):
    n0 = _store(tmp_path / "node0.sqlite", [("a", _result("a"))])
    n1 = _store(tmp_path / "node1.sqlite", [("b", _result("b", version=OLD)),
                                            ("c", _result("c", version=OLD)),
                                            ("e", _result("e", version=OLD, status="error"))])
    out = tmp_path / "out.sqlite"
    rep = merge_stores(out, [n0, n1])
    assert rep.results_added == 4 and rep.conflicts == []
    assert rep.other_versions == {str(n1): {OLD: 2}}
    out2 = tmp_path / "out2.sqlite"
    assert main(["merge", str(out2), str(n0), str(n1)]) == 0  # a warning, not a conflict
    captured = capsys.readouterr()
    assert "2 added row(s) of other geocon_torch versions" in captured.out
    line = next(x for x in captured.err.splitlines() if str(n1) in x)
    assert f"2 row(s) of geocon_torch {OLD}" in line and f"this is {__version__}" in line
    assert f"--db {n1} --rescore-versions" in line and "config cfg" in line
    assert "--preset / --config / size options" in line
    assert str(n0) not in captured.err


def test_the_version_conflict_hint_names_the_options_of_the_config(tmp_path: Path):
    out = _store(tmp_path / "out.sqlite", [("x", _result(ir=0.93))])
    stale = _store(tmp_path / "stale.sqlite", [("x", _result(version=OLD, ir=0.91))])
    (c,) = merge_stores(out, [stale]).conflicts
    assert f"--db {stale} --rescore-versions" in c["hint"]
    assert "--preset / --config / size options" in c["hint"] and "config cfg" in c["hint"]


def test_rows_a_later_shard_replaces_are_not_counted_as_added_other_versions(tmp_path: Path):
    old = _store(tmp_path / "old.sqlite", [("x", _result(version=OLD, ir=0.9)),
                                           ("y", _result("y", version=OLD, ir=0.9))])
    new = _store(tmp_path / "new.sqlite", [("x", _result(ir=0.95))])
    rep = merge_stores(tmp_path / "out.sqlite", [old, new])
    assert (rep.results_added, rep.results_upgraded) == (2, 1)
    assert rep.other_versions == {str(old): {OLD: 1}}
    assert rep.other_version_configs == {str(old): {"cfg": 1}}


def test_two_older_stores_are_both_named_with_the_options(tmp_path: Path):
    a = _store(tmp_path / "a.sqlite", [("x", _result(version="0.1.0", ir=0.91))])
    b = _store(tmp_path / "b.sqlite", [("x", _result(version="0.2.0", ir=0.92))])
    (c,) = merge_stores(a, [b]).conflicts
    assert "--db STORE --rescore-versions` with the --preset" in c["hint"]
    assert f"for each STORE of {a} and {b}" in c["hint"]
