"""A toolkit upgrade keeps the config hash (it names the protocol), so the rows of the old
release stay (audit s21 longrun F1): ``run_manifest(rescore_versions=True)`` / ``geocon bench
--rescore-versions`` re-scores the scored rows of another version in place, and statistics /
preference pairs warn (never raise) when they pool rows of several versions."""
from __future__ import annotations

import json
import warnings

import pytest
from helpers import CountingScorer, write_clips, write_jsonl

import geocon_torch
from geocon_torch.bench import ResultStore, load_results, run_manifest, stats
from geocon_torch.bench import runner as runner_mod
from geocon_torch.bench.preferences import preference_pairs
from geocon_torch.cli import main

OLD = "0.0.9"
NEW = geocon_torch.__version__


class Release(CountingScorer):
    """CountingScorer as scored by the release ``version``; ``shift`` px added to every GE
    (a release that changed the numbers); ``na`` clip ids come back not_applicable."""

    def __init__(self, version: str, shift: float = 0.0, na=(), **kw):
        super().__init__(**kw)
        self.version, self.shift, self.na = version, shift, set(na)

    def __call__(self, entry, config, device):
        res = super().__call__(entry, config, device)
        res["version"] = self.version
        res["background"]["ge_px"] += self.shift
        if entry.clip_id in self.na:
            res.update(status="not_applicable", reason="fake n/a", regime=None, score=None,
                       background=None, epipolar=None)
        return res


def _versions(db):
    with ResultStore(db) as s:
        return {r["clip_id"]: (r["status"], r["version"], r["result"]["background"] and
                               r["result"]["background"]["ge_px"]) for r in s.rows()}


def _two_releases(tmp_path, n_old=4, n=6, db=None, **old_kw):
    """``n_old`` clips scored by the old release, then the manifest of ``n`` clips by the new
    one (without --rescore-versions: only the new clips are scored) into ``db`` (default: a
    SQLite file)."""
    rows = write_clips(tmp_path / "clips", n)
    old_m = write_jsonl(tmp_path / "old.jsonl", rows[:n_old])
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = db or str(tmp_path / "r.sqlite")
    run_manifest(old_m, db, score_fn=Release(OLD, 5.0, **old_kw), progress=False)
    s = run_manifest(m, db, score_fn=Release(NEW), progress=False)
    assert (s.computed, s.skipped) == (n - n_old, n_old)
    return m, db


def test_rescore_versions_replaces_the_old_release_rows_in_place(tmp_path, any_db):
    m, db = _two_releases(tmp_path, db=any_db)
    before = _versions(db)
    assert sorted(v for _, v, _ in before.values()) == [OLD] * 4 + [NEW] * 2
    new = Release(NEW)
    s = run_manifest(m, db, score_fn=new, progress=False, rescore_versions=True)
    # before the fix run_manifest had no such option (TypeError); a plain re-run kept them
    assert (s.computed, s.skipped, s.ok) == (4, 2, 4)
    assert sorted(new.calls) == ["c0", "c1", "c2", "c3"]
    after = _versions(db)
    assert {v for _, v, _ in after.values()} == {NEW}
    for cid in ("c0", "c1", "c2", "c3"):  # the old GE was 5 px higher; now the new numbers
        assert after[cid][2] == pytest.approx(before[cid][2] - 5.0)
    for cid in ("c4", "c5"):
        assert after[cid] == before[cid]
    with ResultStore(db) as st:  # replaced in place: one result and one clip row per clip
        assert (st.count("results"), st.count("clips")) == (6, 6)
    again = run_manifest(m, db, score_fn=Release(NEW), progress=False, rescore_versions=True)
    assert (again.computed, again.skipped) == (0, 6)


def test_rescore_versions_rescores_old_error_rows_and_leaves_new_ones_to_retry_errors(
        tmp_path):
    """An older release's error row is as stale as its numbers (upgrade audit s32 F2): it is
    re-scored with the others; an error row of the installed version stays for
    --retry-errors."""
    m, db = _two_releases(tmp_path, fail_on=["c1"], na=["c2"])
    with ResultStore(db) as st:  # the runner writes error rows: make c1's one of the old release
        (raw,) = [r for r in st.raw_results() if r["status"] == "error"]
        res = json.loads(raw["result_json"])
        res["version"] = raw["version"] = OLD
        raw["result_json"] = json.dumps(res, sort_keys=True)
        st.insert_raw([raw], [], replace=True)
    assert _versions(db)["c1"][:2] == ("error", OLD)
    assert _versions(db)["c2"][:2] == ("not_applicable", OLD)
    new = Release(NEW, fail_on=["c1"])
    s = run_manifest(m, db, score_fn=new, progress=False, rescore_versions=True)
    assert sorted(new.calls) == ["c0", "c1", "c2", "c3"] and s.computed == 4
    got = _versions(db)
    assert got["c1"][:2] == ("error", NEW) and got["c2"][:2] == ("ok", NEW)
    again = Release(NEW)
    run_manifest(m, db, score_fn=again, progress=False, rescore_versions=True)
    assert again.calls == [] and _versions(db)["c1"][:2] == ("error", NEW)
    both = Release(NEW)
    run_manifest(m, db, score_fn=both, progress=False, rescore_versions=True, retry_errors=True)
    assert both.calls == ["c1"] and _versions(db)["c1"][:2] == ("ok", NEW)


def test_without_the_option_nothing_changes(tmp_path):
    m, db = _two_releases(tmp_path)
    before = _versions(db)
    again = Release(NEW)
    s = run_manifest(m, db, score_fn=again, progress=False)
    assert again.calls == [] and s.skipped == 6 and _versions(db) == before


def test_cli_rescore_versions(tmp_path, monkeypatch, capsys):
    m, db = _two_releases(tmp_path)
    new = Release(NEW)
    monkeypatch.setattr(runner_mod, "default_score_fn", new)
    assert main(["bench", str(m), "--db", db, "--no-progress", "--rescore-versions"]) == 0
    assert "4 scored (4 ok" in capsys.readouterr().out
    assert sorted(new.calls) == ["c0", "c1", "c2", "c3"]
    assert {v for _, v, _ in _versions(db).values()} == {NEW}


def test_stats_warn_on_mixed_versions_and_not_on_one(tmp_path):
    m, db = _two_releases(tmp_path)
    rows = load_results(db)
    with pytest.warns(UserWarning, match=r"2 geocon_torch versions \(0\.0\.9: 4 clips, "
                                         + NEW.replace(".", r"\.") + r": 2 clips\).*"
                                         r"--rescore-versions") as caught:
        t1 = stats.table1(rows, n_boot=50)
    assert len(caught) >= 1
    assert [r["ge_px_scenes"] for r in t1] == [6]  # pooled, not refused
    assert stats.version_counts(rows) == {OLD: 4, NEW: 2}
    run_manifest(m, db, score_fn=Release(NEW), progress=False, rescore_versions=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats.table1(load_results(db), n_boot=50)


def test_error_rows_of_an_older_version_warn_and_enter_no_statistic():
    from helpers import fake_result

    rows = []
    for i, (status, version) in enumerate([("ok", NEW), ("ok", NEW), ("error", OLD)]):
        res = fake_result(f"c{i}", status=status)
        res["version"] = version
        rows.append({"clip_id": f"c{i}", "generator": "m", "prompt_category": "C1",
                     "prompt": "p", "seed": i, "scene": f"C1|p|{i}", "result": res,
                     "status": status, "config_hash": "cfg"})
    with pytest.warns(UserWarning, match=f"1 error row of geocon_torch {OLD}"):
        assert stats.status_counts(rows)
    assert stats.version_counts(rows) == {NEW: 2}
    assert stats.error_version_counts(rows) == {OLD: 1}


def test_preference_pairs_warn_on_mixed_versions(tmp_path, monkeypatch):
    rows = write_clips(tmp_path / "clips", 4)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = str(tmp_path / "r.sqlite")
    monkeypatch.setattr(runner_mod, "default_score_fn", Release(OLD))
    preference_pairs(write_jsonl(tmp_path / "old.jsonl", rows[:2]), db, kind="background")
    monkeypatch.setattr(runner_mod, "default_score_fn", Release(NEW))
    with pytest.warns(UserWarning, match=r"0\.0\.9: 2 clips, .*: 2 clips"):
        records, summary = preference_pairs(m, db, kind="background")
    assert summary.computed == 2 and len(records) == 4
