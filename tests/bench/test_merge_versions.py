"""geocon merge after an upgrade: a node's --rescore-versions row (the running version)
replaces OUT's row of another version; rows of one version that differ stay a conflict; a
conflict between rows of two versions says which store to re-score."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import fake_result

from geocon_torch import __version__
from geocon_torch.bench import ResultStore, load_results, merge_stores
from geocon_torch.cli import main

OLD, OTHER = "0.1.0", "0.2.0"  # versions of older builds (neither is the running one)


def _store(path: Path, version: str, ir: float = 0.91, clips=("x", "y")) -> Path:
    """A SQLite store of ``clips`` (content hash h<clip>, config "cfg") scored by ``version``
    with background IR ``ir``."""
    with ResultStore(path) as s:
        for clip in clips:
            res = fake_result(clip, ir=ir)
            res["version"] = version
            s.put({"clip_id": clip, "generator": "m"}, f"h{clip}", "cfg", res)
    return path


def _stored(db) -> dict:
    """{clip_id: (version, background IR)} of a store."""
    return {r["clip_id"]: (r["result"]["version"], r["result"]["background"]["ir"])
            for r in load_results(db)}


def test_a_rescored_node_reaches_out_and_a_rerun_changes_nothing(tmp_path: Path, capsys):
    out = _store(tmp_path / "out.sqlite", OLD, ir=0.91)
    node = _store(tmp_path / "node.sqlite", __version__, ir=0.93)  # --rescore-versions
    rep = merge_stores(out, [node])
    assert (rep.results_upgraded, rep.results_replaced, rep.results_same) == (2, 0, 0)
    assert rep.conflicts == []
    ups = [u for u in rep.updates if u["table"] == "results"]
    assert [u["content_hash"] for u in ups] == ["hx", "hy"]
    assert ups[0]["differences"] == {"background.ir": [0.91, 0.93],
                                     "background.per_pair[0].ir": [0.91, 0.93],
                                     "background.per_pair[1].ir": [0.91, 0.93],
                                     "background.per_pair[2].ir": [0.91, 0.93],
                                     "background.per_pair[3].ir": [0.91, 0.93],
                                     "background.ir_f": [0.91, 0.93],
                                     "background.ir_h": [0.91, 0.93],
                                     "version": [OLD, __version__]}
    assert _stored(out) == {"x": (__version__, 0.93), "y": (__version__, 0.93)}
    again = merge_stores(out, [node])
    assert (again.results_upgraded, again.results_same, again.updates, again.conflicts) == \
        (0, 2, [], [])
    # the CLI: exit 0, the replacement counted and listed with its differences
    out2 = _store(tmp_path / "out2.sqlite", OLD, ir=0.93)  # a pure relabel: same numbers
    assert main(["merge", str(out2), str(node)]) == 0
    text = capsys.readouterr().out
    assert f"2 row(s) of other versions replaced by rows of {__version__}" in text
    assert f'version: "{OLD}" -> "{__version__}"' in text and "0 conflict(s)" in text
    assert _stored(out2) == {"x": (__version__, 0.93), "y": (__version__, 0.93)}


def test_an_old_shard_never_replaces_and_its_conflict_says_what_to_rescore(tmp_path, capsys):
    out = _store(tmp_path / "out.sqlite", __version__, ir=0.93, clips=("x",))
    stale = _store(tmp_path / "stale.sqlite", OLD, ir=0.91, clips=("x",))
    rep = merge_stores(out, [stale])
    assert rep.results_upgraded == 0 and len(rep.conflicts) == 1
    c = rep.conflicts[0]
    assert c["differences"]["version"] == [__version__, OLD]
    assert c["hint"] == (f"rows of different geocon_torch versions ({__version__} in {out}, "
                         f"{OLD} in {stale}; this is {__version__}): re-score with `geocon "
                         f"bench MANIFEST --db {stale} --rescore-versions` with the --preset / "
                         f"--config / size options these rows were scored with (config cfg) "
                         f"(`run_manifest(..., rescore_versions=True)`), then merge again")
    assert _stored(out) == {"x": (__version__, 0.93)}
    assert main(["merge", str(out), str(stale)]) == 1
    err = capsys.readouterr().err
    assert f"--db {stale} --rescore-versions" in err and f'"{__version__}" vs "{OLD}"' in err
    # two older builds: neither replaces the other, both stores are named
    a = _store(tmp_path / "a.sqlite", OLD, ir=0.91, clips=("x",))
    b = _store(tmp_path / "b.sqlite", OTHER, ir=0.92, clips=("x",))
    rep = merge_stores(a, [b])
    assert (rep.results_upgraded, len(rep.conflicts)) == (0, 1)
    assert f"for each STORE of {a} and {b}" in rep.conflicts[0]["hint"]
    assert _stored(a) == {"x": (OLD, 0.91)}


def test_rows_of_one_version_that_differ_stay_a_conflict_without_a_hint(tmp_path: Path):
    out = _store(tmp_path / "out.sqlite", OLD, ir=0.91, clips=("x",))
    other = _store(tmp_path / "other.sqlite", OLD, ir=0.95, clips=("x",))
    rep = merge_stores(out, [other])
    assert rep.results_upgraded == 0 and "hint" not in rep.conflicts[0]
    assert rep.conflicts[0]["differences"] == {
        "background.ir": [0.91, 0.95], "background.ir_f": [0.91, 0.95],
        "background.ir_h": [0.91, 0.95], **{f"background.per_pair[{i}].ir": [0.91, 0.95]
                                            for i in range(4)}}
    new = _store(tmp_path / "new.sqlite", __version__, ir=0.93, clips=("x",))
    new2 = _store(tmp_path / "new2.sqlite", __version__, ir=0.97, clips=("x",))
    merge_stores(out, [new])
    rep = merge_stores(out, [new2])  # both of this version: OUT keeps its row
    assert rep.results_upgraded == 0 and len(rep.conflicts) == 1
    assert "hint" not in rep.conflicts[0] and _stored(out) == {"x": (__version__, 0.93)}


@pytest.fixture(params=["sqlite", "postgresql"])
def out_db(request, tmp_path):
    if request.param == "sqlite":
        return str(tmp_path / "merged.sqlite")
    return request.getfixturevalue("pg_url")


def test_shards_in_one_merge_old_then_rescored(tmp_path: Path, out_db):
    """A fresh OUT: the old shard's row is copied, then the rescored shard's replaces it."""
    old = _store(tmp_path / "old.sqlite", OLD, ir=0.91)
    new = _store(tmp_path / "new.sqlite", __version__, ir=0.93)
    rep = merge_stores(out_db, [old, new])
    assert (rep.results_added, rep.results_upgraded, rep.conflicts) == (2, 2, [])
    assert _stored(out_db) == {"x": (__version__, 0.93), "y": (__version__, 0.93)}
    again = merge_stores(out_db, [old, new])  # the old row conflicts, the new one is there
    assert (again.results_upgraded, again.results_same, len(again.conflicts)) == (0, 2, 2)
    assert _stored(out_db) == {"x": (__version__, 0.93), "y": (__version__, 0.93)}
    rep = merge_stores(tmp_path / "out_b.sqlite", [new, old])  # the other order: a conflict
    assert (rep.results_added, rep.results_upgraded, len(rep.conflicts)) == (2, 0, 2)
