"""Mutation round 22b: the leaderboard upgrade path (d0943c0): version order in the statistics'
warning, the bench's kept / re-scored rows and geocon merge's listings, counts and hints."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest
from helpers import fake_result, release_scorer, write_clips, write_jsonl

from geocon_torch import __version__
from geocon_torch.bench import ResultStore, merge_stores, run_manifest, stats
from geocon_torch.bench import merge as merge_mod
from geocon_torch.bench import runner as runner_mod
from geocon_torch.bench.schema import result_problems
from geocon_torch.config import GeoConConfig, RansacConfig

NEW = __version__
OLD = "0.2.4"
NEWER = "99.0.1"
NEWEST = "99.0.2"


def _result(clip: str = "x", version: str = NEW, **kw) -> dict:
    res = fake_result(clip, **kw)
    res["version"] = version
    return res


def _joined(versions_status, config=None, config_hash="cfg"):
    rows = []
    for i, (version, status) in enumerate(versions_status):
        res = _result(f"c{i}", version, status=status, config_hash=config_hash)
        if config is not None:
            res["config"] = config
        rows.append({"clip_id": f"c{i}", "result": res, "status": status, "version": version,
                     "config_hash": config_hash})
    return rows


def _warned(rows, how=None):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        stats.warn_mixed_versions(rows, how=how)
    texts = [str(w.message) for w in got if issubclass(w.category, UserWarning)]
    return texts[0] if texts else None


# --- stats ------------------------------------------------------------------------------------
def test_row_version_prefers_the_store_column():
    row = {"version": OLD, "result": {"version": NEW}}
    assert stats.row_version(row) == OLD
    assert stats.row_version({"_result": {"version": NEWER}}) == NEWER
    assert stats.row_version({"result": {}}) == "unknown"


def test_older_rows_are_older_releases_and_unknown_only():
    rows = _joined([(NEW, "ok"), (OLD, "ok"), (NEWER, "error"), ("unknown", "error")])
    assert [r["version"] for r in stats.older_rows(rows)] == [OLD, "unknown"]


def test_unreachable_config_judges_only_whole_configs_and_one_per_hash():
    full = GeoConConfig(preset="background").to_dict()
    today = GeoConConfig.from_dict(full).config_hash()
    partial = [{"config_hash": "zz", "result": {"config": {"io": {}}}}]
    assert stats.unreachable_config(partial) is None
    good = {"config_hash": today, "result": {"config": full}}
    gone = {"config_hash": today, "result": {"config": {**full, "retired_knob": 1}}}
    assert stats.unreachable_config([good, gone]) is None  # one config read per stored hash
    assert "no longer loads" in stats.unreachable_config([gone, good])


def test_error_rows_of_unknown_version_alone_call_for_no_warning():
    assert stats.versions_to_warn({NEW: 2}, {"unknown": 1}) is False
    assert stats.versions_to_warn({NEW: 2}, {OLD: 1}) is True
    assert stats.version_warning_text({NEW: 2}, {"unknown": 3}, "HOW") == ""


def test_error_rows_text_names_the_package_once():
    assert stats.error_rows_text({"0.2.3": 2, OLD: 1}) == (
        f"2 error rows of geocon_torch 0.2.3, 1 error row of {OLD}")


def test_scored_text_of_two_versions_without_a_newer_one():
    text = stats.version_warning_text({OLD: 1, NEW: 2}, {}, "HOW")
    assert text.endswith(f"this is {NEW}: re-score the rows of the other versions with HOW")
    text = stats.version_warning_text({OLD: 1, NEW: 1, NEWER: 1}, {}, "HOW")
    assert f"re-score the rows of the older versions ({OLD}) with HOW" in text
    assert f"the rows of {NEWER} are newer than this version: upgrade" in text


def test_old_error_rows_beside_newer_scored_rows_get_the_advice_itself():
    text = stats.version_warning_text({NEWER: 2}, {OLD: 1}, "HOW")
    assert text.endswith("(error rows enter no statistic); to re-score them with it: HOW")
    text = stats.version_warning_text({OLD: 2}, {OLD: 1}, "HOW")
    assert text.endswith("(error rows enter no statistic); the same advice re-scores them")


def test_unreachable_advice_follows_whether_the_caller_named_a_store():
    full = GeoConConfig(preset="background").to_dict()
    moved = _joined([(OLD, "ok")] * 2, config=full, config_hash="8c29bfc70a781ea9")
    text = _warned(moved, how="`geocon report ...`")
    assert "new --db" in text and "for results files" not in text, text
    text = _warned(moved)
    assert "new --db" in text and "for results files of geocon score --json" in text, text


def test_unreachable_advice_of_a_pairs_store_is_the_store_advice():
    for source in ("store", "pairs"):
        text = stats.rescore_advice(source, "abc", unreachable="why")
        assert "score the manifest again into a new --db" in text, text
        assert "config abc" in text and "geocon score CLIP" not in text, text


def test_only_a_schema_major_above_today_says_newer():
    for version, newer in (("4.0", True), ("0.5", False), ("9.1", True)):
        res = fake_result("c")
        res["schema_version"] = version
        (problem,) = result_problems(res)
        assert ("newer geocon_torch" in problem) is newer, (version, problem)


def test_only_the_top_level_seed_is_retired():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cfg = GeoConConfig.from_dict({"ransac": {"seed": 7}, "epipolar": {"seed": 9}})
        section = RansacConfig.from_dict({"seed": 7})  # a section's own seed is kept
    assert (cfg.ransac.seed, cfg.epipolar.seed, section.seed) == (7, 9, 7)


# --- runner -----------------------------------------------------------------------------------
_scorer = release_scorer


def test_retry_errors_alone_counts_no_rescored_versions(tmp_path: Path):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    db = str(tmp_path / "s.sqlite")
    run_manifest(m, db, score_fn=_scorer(OLD, errors=["c0"]), progress=False)
    calls: list = []
    s = run_manifest(m, db, score_fn=_scorer(NEW, calls=calls), progress=False,
                     retry_errors=True)
    assert calls == ["c0"] and s.rescored_versions == {} and s.computed == 1
    assert s.skipped_versions == {OLD: 1} and s.skipped_versions.errors == {}


def test_kept_error_rows_are_not_scored_counts(tmp_path: Path):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 3))
    db = str(tmp_path / "s.sqlite")
    run_manifest(m, db, score_fn=_scorer(OLD, errors=["c0", "c1"]), progress=False)
    s = run_manifest(m, db, score_fn=_scorer(NEW), progress=False)
    assert dict(s.skipped_versions) == {OLD: 1}
    assert s.skipped_versions.errors == {OLD: 2}
    assert s.to_dict()["skipped_error_versions"] == {OLD: 2}


def test_kept_error_rows_of_a_linked_clip_are_counted_as_linked(tmp_path: Path):
    rows = write_clips(tmp_path / "clips", 1)
    db = str(tmp_path / "s.sqlite")
    run_manifest(write_jsonl(tmp_path / "a.jsonl", rows), db,
                 score_fn=_scorer(OLD, errors=["c0"]), progress=False)
    same = {**rows[0], "clip_id": "d0"}  # the same bytes under another id: linked
    s = run_manifest(write_jsonl(tmp_path / "b.jsonl", rows + [same]), db,
                     score_fn=_scorer(NEW), progress=False)
    assert s.skipped_versions.errors == {OLD: 1} and s.linked_versions.errors == {OLD: 1}
    assert s.kept_versions.errors == {OLD: 2} and dict(s.kept_versions) == {}


def test_kept_counts_add_their_error_rows():
    a = runner_mod.VersionCounts({OLD: 1}, {OLD: 2})
    b = runner_mod.VersionCounts({NEW: 1}, {OLD: 3, NEWER: 1})
    total = runner_mod._add_counts(a, b)
    assert dict(total) == {OLD: 1, NEW: 1} and total.errors == {OLD: 5, NEWER: 1}


def test_kept_versions_note_of_newer_rows_counts_rows_by_version():
    note = runner_mod.kept_versions_note(runner_mod.VersionCounts({NEWER: 1}))
    assert note == f" (1 row by geocon_torch {NEWER}, newer than this {NEW}: upgrade to compare)"
    note = runner_mod.kept_versions_note(runner_mod.VersionCounts({NEWER: 2, NEWEST: 1}))
    assert note == (f" (2 rows by geocon_torch {NEWER}, 1 by {NEWEST}, newer than this {NEW}: "
                    "upgrade to compare)")


# --- merge ------------------------------------------------------------------------------------
def _store(path: Path, rows) -> Path:
    with ResultStore(path) as s:
        for clip, res in rows:
            s.put({"clip_id": clip, "generator": "m"}, f"h{clip}", "cfg", res)
    return path


def test_field_order_puts_section_fields_before_nested_and_list_ones():
    assert merge_mod._field_order("epipolar.epipolar_error") < merge_mod._field_order(
        "background.per_pair[0].ir")
    assert merge_mod._field_order("zeta") < merge_mod._field_order("notes[0]")
    assert merge_mod._field_order("background.ir") < merge_mod._field_order("background.pass")


def test_listing_cut_by_one_field_says_one_more():
    a, b = _result(ir=0.91), _result(ir=0.93)
    # 7 differing fields (background ir, ir_h, ir_f, 4 per-pair ir) and 6 extra ones
    for i in range(6):
        a[f"extra{i}"], b[f"extra{i}"] = i, i + 1
    diffs, more = merge_mod.listed_differences(json.dumps(a), json.dumps(b))
    assert (len(diffs), more) == (12, 1)
    assert merge_mod._listing(json.dumps(a), json.dumps(b))["more_differences"] == 1
    diffs, more = merge_mod.listed_differences(json.dumps(a), json.dumps(b), limit=None)
    assert (len(diffs), more) == (13, 0)


def test_a_shard_row_of_the_same_version_replaces_outs_error_row(tmp_path: Path):
    out = _store(tmp_path / "out.sqlite", [("x", _result(version=OLD, status="error"))])
    node = _store(tmp_path / "node.sqlite", [("x", _result(version=OLD, ir=0.9))])
    rep = merge_stores(out, [node])
    assert (rep.results_replaced, rep.conflicts) == (1, [])


def test_rows_replaced_in_the_same_merge_leave_no_zero_counts(tmp_path: Path):
    old = _store(tmp_path / "old.sqlite", [("x", _result(version=OLD, ir=0.9))])
    new = _store(tmp_path / "new.sqlite", [("x", _result(ir=0.95))])
    rep = merge_stores(tmp_path / "out.sqlite", [old, new])
    assert rep.results_upgraded == 1
    assert (rep.other_versions, rep.other_version_configs) == ({}, {})


def test_other_version_notes_name_the_newest_release(tmp_path: Path):
    shard = _store(tmp_path / "n.sqlite", [("a", _result("a", version=NEWEST)),
                                           ("b", _result("b", version=NEWER))])
    rep = merge_stores(tmp_path / "out.sqlite", [shard])
    (line,) = merge_mod.other_version_notes(rep)
    assert f"{NEWEST} is newer than this geocon_torch: upgrade it to {NEWEST}" in line


def test_version_hint_with_the_running_version_names_only_the_stale_store():
    hint = merge_mod.version_hint(("out", NEW), ("node", OLD), "cfg")
    assert "--db node --rescore-versions" in hint and "--db out" not in hint
    assert "STORE" not in hint
    hint = merge_mod.version_hint(("out", OLD), ("node", NEW), "cfg")
    assert "--db out --rescore-versions" in hint and "newer" not in hint


@pytest.mark.parametrize("version", [OLD, NEWER])
def test_added_error_rows_are_never_other_version_rows(tmp_path: Path, version):
    shard = _store(tmp_path / "n.sqlite", [("e", _result("e", version=version, status="error"))])
    rep = merge_stores(tmp_path / "out.sqlite", [shard])
    assert rep.results_added == 1 and rep.other_versions == {}


def test_a_late_row_of_another_version_is_not_counted_as_added(tmp_path: Path, monkeypatch):
    """A live job commits the key (a row of the running version) after the merge read OUT:
    the shard's older row is decided again (a conflict), never counted as added."""
    out = tmp_path / "out.sqlite"
    _store(out, [("z", _result("z"))])
    shard = _store(tmp_path / "n.sqlite", [("x", _result(version=OLD, ir=0.9))])
    real = merge_mod._flush

    def flush(dest, table, added, replaced, force=False):
        if table == "results" and added:
            _store(out, [("x", _result(ir=0.95))])
        return real(dest, table, added, replaced, force)

    monkeypatch.setattr(merge_mod, "_flush", flush)
    rep = merge_stores(out, [shard])
    assert (rep.results_added, len(rep.conflicts)) == (0, 1)
    assert (rep.other_versions, rep.other_version_configs) == ({}, {})
