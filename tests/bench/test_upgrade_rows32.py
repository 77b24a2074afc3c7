"""Rows the upgrade path used to miss or mistreat (audit s32 upgrade F2, F3, F6).

F2: an error row of an older release (0.2.4 refused a stream-copy-trimmed mp4 that 0.2.5 scores)
is re-scored by ``--rescore-versions`` and named by the bench note, the statistics' warning and
the report's version box; an error row of the installed version stays with ``--retry-errors``.
F3: versions are compared by order: rows of a NEWER release are never re-scored by this older
one, and every message says to upgrade; a newer result schema says so too.
F6: rows whose configuration this version cannot score again under their stored hash (the
protocol changed; a format-1 config with the retired top-level ``seed``) are told so, not sent
to a ``--rescore-versions`` that cannot reach them.
"""
from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
from helpers import _clip, fake_result, release_scorer, write_clips, write_jsonl

from geocon_torch import __version__
from geocon_torch.bench import ResultStore, load_results, run_manifest, stats
from geocon_torch.bench import runner as runner_mod
from geocon_torch.bench.schema import ResultSchemaError, check_result, result_problems
from geocon_torch.config import GeoConConfig
from geocon_torch.report import build_report

NEW = __version__
OLD = "0.2.4"
NEWER = "99.0.1"  # a release after the installed one


_scorer = release_scorer


def _rows(db):
    with ResultStore(db) as s:
        return sorted((r["clip_id"], r["status"], r["version"]) for r in s.rows())


def _manifest(tmp_path, n=2):
    return write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", n))


# --- F2: error rows of an older release --------------------------------------------------------
def test_rescore_versions_rescores_an_older_release_error_row(tmp_path):
    """c0: an error row of 0.2.4, c1: an ok row of 0.2.4, c2: an error row of the installed
    version (left to --retry-errors)."""
    rows = write_clips(tmp_path / "clips", 3)
    m, db = write_jsonl(tmp_path / "m.jsonl", rows), str(tmp_path / "s.sqlite")
    run_manifest(write_jsonl(tmp_path / "old.jsonl", rows[:2]), db,
                 score_fn=_scorer(OLD, errors=["c0"]), progress=False)
    run_manifest(m, db, score_fn=_scorer(NEW, errors=["c2"]), progress=False)
    s = run_manifest(m, db, score_fn=_scorer(NEW), progress=False)
    assert s.skipped == 3
    # before the fix: " (1 by geocon_torch 0.2.4, this is ...)": the error row not named
    assert runner_mod.kept_versions_note(s.skipped_versions) == (
        f" (1 by geocon_torch {OLD}, 1 error row of {OLD}, this is {NEW}: --rescore-versions "
        "re-scores them)")
    calls: list = []
    s = run_manifest(m, db, score_fn=_scorer(NEW, calls=calls), progress=False,
                     rescore_versions=True)
    # before the fix: c0 stayed "error" of 0.2.4 (only c1 was re-scored)
    assert sorted(calls) == ["c0", "c1"] and s.rescored_versions == {OLD: 2}
    assert _rows(db) == [("c0", "ok", NEW), ("c1", "ok", NEW), ("c2", "error", NEW)]
    assert runner_mod.kept_versions_note(s.skipped_versions) == ""
    run_manifest(m, db, score_fn=_scorer(NEW, calls=calls), progress=False, retry_errors=True)
    assert calls[2:] == ["c2"] and _rows(db)[2] == ("c2", "ok", NEW)


class _Rows:
    """The store API ``runner._unstored`` reads (the dynamic path's remaining clips)."""

    def __init__(self, rows):
        self.rows = rows

    def execute(self, sql, params):
        return self.rows


def _job(**kw):
    cfg = GeoConConfig()
    return runner_mod._Job(cfg, "cfg", None, None, kw.get("retry_errors", False), False, 0, 1,
                           1, kw.get("rescore_versions", False))


def test_dynamic_remaining_clips_follow_the_same_rules():
    store = _Rows([("a", "error", OLD, 1.0), ("b", "ok", OLD, 1.0), ("c", "ok", NEWER, 1.0),
                   ("d", "error", NEW, 1.0), ("e", "ok", NEW, 1.0), ("f", "ok", None, 1.0)])
    ids = list("abcdefg")
    # before the fix: a (an old error row) was done, c (a newer row) re-scored
    assert runner_mod._unstored(store, ids, _job(rescore_versions=True), 0.0) == [
        "a", "b", "f", "g"]
    assert runner_mod._unstored(store, ids, _job(retry_errors=True), 2.0) == ["a", "d", "g"]
    assert runner_mod._unstored(store, ids, _job(), 0.0) == ["g"]


def _joined(versions_status, config=None, config_hash="cfg"):
    rows = []
    for i, (version, status) in enumerate(versions_status):
        res = fake_result(f"c{i}", status=status, ir=0.97 + 0.01 * i, config_hash=config_hash)
        res["version"] = version
        if config is not None:
            res["config"] = config
        rows.append({"clip_id": f"c{i}", "generator": "m", "prompt_category": "C1",
                     "prompt": "p", "seed": i, "scene": f"C1|p|{i}", "result": res,
                     "status": status, "version": version, "config_hash": config_hash})
    return rows


def _warning(rows, statistic="status_counts", **kw):
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        out = getattr(stats, statistic)(rows, **kw)
    texts = [str(w.message) for w in got if "geocon_torch" in str(w.message)]
    assert len(texts) <= 1, texts
    return (texts[0] if texts else None), out


def test_stats_warning_names_an_older_error_row_and_statistics_keep_ok_rows():
    rows = _joined([(NEW, "ok"), (NEW, "ok"), (OLD, "error")])
    text, t1 = _warning(rows, "table1", n_boot=20)
    # before the fix: no warning (error rows were not counted)
    assert text is not None and f"1 error row of geocon_torch {OLD}" in text, text
    assert "--rescore-versions" in text and f"this is {NEW}" in text
    _, alone = _warning(rows[:2], "table1", n_boot=20)
    assert t1 == alone  # the statistic itself is unchanged: the ok rows
    assert stats.version_counts(rows) == {NEW: 2}
    assert stats.error_version_counts(rows) == {OLD: 1}


# --- F3: rows of a newer release ---------------------------------------------------------------
@pytest.mark.parametrize("version, than, newer", [
    ("0.2.10", "0.2.9", True), ("0.2.9", "0.2.10", False), ("0.2.7", "0.2.7", False),
    ("1.0rc1", "0.9", True), ("unknown", "0.2.7", False), ("0.2.7", "unknown", True),
    ("garbage", "0.1", False), ("", "0.1", False), ("0.1", "0.1.0", False)])
def test_is_newer_version_compares_by_order(version, than, newer):
    assert stats.is_newer_version(version, than) is newer


def test_bench_never_rescores_rows_of_a_newer_release(tmp_path):
    m, db = _manifest(tmp_path), str(tmp_path / "s.sqlite")
    run_manifest(m, db, score_fn=_scorer(NEWER, errors=["c1"]), progress=False)
    s = run_manifest(m, db, score_fn=_scorer(NEW), progress=False)
    # before the fix: "(1 by geocon_torch 99.0.1, this is ...: --rescore-versions re-scores
    # them)"
    assert runner_mod.kept_versions_note(s.skipped_versions) == (
        f" (2 rows by geocon_torch {NEWER}, newer than this {NEW}: upgrade to compare)")
    calls: list = []
    s = run_manifest(m, db, score_fn=_scorer(NEW, calls=calls), progress=False,
                     rescore_versions=True)
    assert calls == [] and s.rescored_versions == {} and s.skipped == 2
    assert _rows(db) == [("c0", "ok", NEWER), ("c1", "error", NEWER)]


def test_stats_warning_says_upgrade_for_newer_rows():
    text, _ = _warning(_joined([(NEWER, "ok"), (NEWER, "ok")]))
    assert text is not None and "newer than this" in text and "upgrade geocon_torch" in text
    assert "--rescore-versions" not in text, text
    text, _ = _warning(_joined([(NEW, "ok"), (NEWER, "ok")]))
    assert "upgrade geocon_torch" in text and "--rescore-versions" not in text, text
    text, _ = _warning(_joined([(OLD, "ok"), (NEW, "ok"), (NEWER, "ok")]))
    assert text.startswith(f"the rows hold results of 3 geocon_torch versions ({OLD}: 1 clip, "
                           f"{NEW}: 1 clip, {NEWER}: 1 clip)"), text
    assert f"re-score the rows of the older versions ({OLD})" in text, text
    assert "--rescore-versions" in text and "upgrade geocon_torch" in text


def test_a_newer_result_schema_says_upgrade(tmp_path):
    res = fake_result("c0")
    res["schema_version"] = "4.0"
    (problem,) = result_problems(res)
    # before the fix: "schema_version must be '3.x' (or the older '1.x' / '2.x'), got '4.0'"
    assert "newer geocon_torch" in problem and "upgrade" in problem, problem
    with pytest.raises(ResultSchemaError, match="newer geocon_torch"):
        check_result(res)
    res["schema_version"] = "x.0"
    assert "newer" not in result_problems(res)[0]
    with pytest.raises(Exception, match="newer geocon_torch"):
        load_results(write_jsonl(tmp_path / "r.jsonl", [{**fake_result("c1"),
                                                         "schema_version": "4.1"}]))


# --- the report's version box ------------------------------------------------------------------
def _store(db: Path, rows) -> Path:
    with ResultStore(db) as s:
        for i, res in enumerate(rows):
            s.put(_clip(f"c{i}"), f"h{i}", res["config_hash"], res)
    return db


def _box(db: Path, out: Path):
    page = build_report(db, out, draw=False, n_boot=20, cards=0).read_text()
    box = re.search(r"<p class='warn'>(.*?)</p>", page, re.S)
    return None if box is None else re.sub(r"<[^>]+>", "", box.group(1))


def _results(versions_status, **kw):
    return [r["result"] for r in _joined(versions_status, **kw)]


def test_report_box_names_older_error_rows_and_says_upgrade_for_newer(tmp_path):
    box = _box(_store(tmp_path / "a.sqlite", _results([(NEW, "ok"), (NEW, "ok"),
                                                       (OLD, "error")])), tmp_path / "ra")
    # before the fix: no box
    assert box is not None and f"1 error row of geocon_torch {OLD}" in box, box
    assert "geocon bench MANIFEST --db DB --rescore-versions" in box
    box = _box(_store(tmp_path / "b.sqlite", _results([(NEWER, "ok")] * 2)), tmp_path / "rb")
    # before the fix: "... To re-score these clips with the installed one: geocon bench ..."
    assert box is not None and "newer" in box and "upgrade geocon_torch" in box, box
    assert "--rescore-versions" not in box


# --- F6: rows whose configuration this version cannot score again ------------------------------
def test_unreachable_configurations_are_told_so_not_sent_to_rescore_versions(tmp_path):
    full = GeoConConfig(preset="background").to_dict()
    today = GeoConConfig.from_dict(full).config_hash()
    reachable = _joined([(OLD, "ok")] * 2, config=full, config_hash=today)
    text, _ = _warning(reachable)
    assert "--rescore-versions" in text and "cannot score" not in text, text
    moved = _joined([(OLD, "ok")] * 2, config=full, config_hash="8c29bfc70a781ea9")
    text, _ = _warning(moved)
    # before the fix: "to re-score them with it: `geocon bench ... --rescore-versions` ..."
    assert "not one this version can score" in text and "--rescore-versions" not in text, text
    assert "new --db" in text and today in text, text
    gone = _joined([(OLD, "ok")] * 2, config={**full, "retired_knob": 1}, config_hash="abc")
    text, _ = _warning(gone)
    assert "not one this version can score" in text and "no longer loads" in text, text
    box = _box(_store(tmp_path / "u.sqlite", [r["result"] for r in moved]), tmp_path / "ru")
    assert "not one this version can score" in box and "--rescore-versions" not in box, box


def test_the_retired_top_level_seed_of_format_1_configs_is_dropped():
    full = GeoConConfig(preset="background").to_dict()
    with pytest.warns(DeprecationWarning, match="seed"):
        cfg = GeoConConfig.from_dict({**full, "seed": 0})  # before the fix: ConfigError
    assert cfg.config_hash() == GeoConConfig.from_dict(full).config_hash()
    assert cfg.ransac.seed == GeoConConfig().ransac.seed


def test_retry_errors_never_replaces_an_error_row_of_a_newer_release(tmp_path):
    """Mutation round 22b: --retry-errors replaced a newer release's error row by this older
    version's result (the rule everywhere else: rows of a newer release are never replaced);
    an error row of the installed version is still retried."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    db = str(tmp_path / "s.sqlite")
    run_manifest(m, db, score_fn=release_scorer("99.0.1", errors=["c0"]), progress=False)
    with ResultStore(db) as st:  # c1: an error row of the installed version
        (raw,) = [r for r in st.raw_results() if r["status"] != "error"]
        res = json.loads(raw["result_json"])
        res.update(status="error", version=__version__)
        raw.update(status="error", version=__version__, result_json=json.dumps(res))
        st.insert_raw([raw], [], replace=True)
    s = run_manifest(m, db, score_fn=release_scorer(__version__), progress=False, retry_errors=True)
    with ResultStore(db) as st:
        got = {r["clip_id"]: (r["status"], r["version"]) for r in st.rows()}
    assert got == {"c0": ("error", "99.0.1"), "c1": ("ok", __version__)} and s.computed == 1
