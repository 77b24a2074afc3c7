"""An upgrade keeps the config hash, so a store scored by an older release is used as stored
(audit s24 upgrade F1 / F2): ``geocon bench`` names the kept rows of other versions and the rows
``--rescore-versions`` replaced, the statistics warn (softer) when the only version is not the
running one and point at the caller of the public statistic, and ``geocon pairs`` advises (and
has) its own ``--rescore-versions``, which re-scores the kind's config that it warned about."""
from __future__ import annotations

import inspect
import shutil
import warnings

import pytest
from helpers import CountingScorer, write_clips, write_jsonl

import geocon_torch
from geocon_torch.bench import ResultStore, load_results, run_manifest, stats
from geocon_torch.bench import runner as runner_mod
from geocon_torch.bench.preferences import preference_pairs
from geocon_torch.cli import main

NEW = geocon_torch.__version__
OLD = "0.1.0"


class Versioned(CountingScorer):
    """CountingScorer whose results record the package ``version``, GE + ``shift`` px."""

    def __init__(self, version: str, shift: float = 0.0, **kw):
        super().__init__(**kw)
        self.version, self.shift = version, shift

    def __call__(self, entry, config, device):
        res = super().__call__(entry, config, device)
        res["version"] = self.version
        res["background"]["ge_px"] += self.shift
        return res


def _versions(db):
    with ResultStore(db) as s:
        return sorted((r["clip_id"], r["status"], r["version"]) for r in s.rows())


def _old_store(tmp_path, n=4, versions=(OLD,), db=None, **kw):
    """A manifest of ``n`` clips and a store (default: a SQLite file) where clip i was scored
    by ``versions[i % k]``."""
    rows = write_clips(tmp_path / "clips", n)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = db or str(tmp_path / "r.sqlite")
    for i, v in enumerate(versions):
        part = write_jsonl(tmp_path / f"part{i}.jsonl", rows[i::len(versions)])
        run_manifest(part, db, score_fn=Versioned(v, 5.0, **kw), progress=False)
    return m, db


def test_bench_summary_names_the_rows_of_an_older_release(tmp_path, monkeypatch, capsys,
                                                          any_db):
    """SQLite (static assignment) and PostgreSQL (dynamic claims)."""
    m, db = _old_store(tmp_path, db=any_db)
    new = Versioned(NEW)
    monkeypatch.setattr(runner_mod, "default_score_fn", new)
    assert main(["bench", str(m), "--db", db, "--no-progress"]) == 0
    out = capsys.readouterr().out
    # before the fix: "0 scored (0 ok, 0 not applicable, 0 error), 4 already stored, 0 linked"
    assert (f"0 scored (0 ok, 0 not applicable, 0 error), 4 already stored (4 by geocon_torch "
            f"{OLD}, this is {NEW}: --rescore-versions re-scores them), 0 linked to identical "
            "files;") in out, out
    assert new.calls == [] and {v for _, _, v in _versions(db)} == {OLD}
    assert main(["bench", str(m), "--db", db, "--no-progress", "--rescore-versions"]) == 0
    out = capsys.readouterr().out
    assert ("4 scored (4 ok, 0 not applicable, 0 error), 4 re-scored (replaced rows of "
            f"{OLD}), 0 already stored, 0 linked to identical files;") in out, out
    assert sorted(new.calls) == ["c0", "c1", "c2", "c3"]
    assert main(["bench", str(m), "--db", db, "--no-progress"]) == 0  # all rows of NEW now
    out = capsys.readouterr().out
    assert "0 error), 4 already stored, 0 linked to identical files;" in out, out
    assert "re-scor" not in out


def test_run_summary_counts_kept_and_replaced_rows_by_version(tmp_path):
    """Two older versions and the running one; an error row of an old version is counted in
    neither (--rescore-versions leaves it to --retry-errors); a linked row (the same bytes
    under another clip id) is counted as linked."""
    from geocon_torch.bench.runner import RunSummary, kept_versions_note

    m, db = _old_store(tmp_path, n=6, versions=("0.0.9", OLD, NEW), fail_on=["c4"])
    rows = write_clips(tmp_path / "clips", 6)
    shutil.copy(rows[0]["path"], tmp_path / "clips" / "twin.mp4")
    twin = {**rows[0], "clip_id": "twin", "path": str(tmp_path / "clips" / "twin.mp4")}
    m2 = write_jsonl(tmp_path / "m2.jsonl", rows + [twin])
    s = run_manifest(m2, db, score_fn=Versioned(NEW), progress=False)
    assert (s.computed, s.skipped, s.linked) == (0, 6, 1)
    # c0, c3 by 0.0.9; c1 by 0.1.0 (c4's row is an error); c2, c5 by NEW; twin -> c0's row
    assert s.skipped_versions == {"0.0.9": 2, OLD: 1, NEW: 2}
    assert s.linked_versions == {"0.0.9": 1} and s.rescored_versions == {}
    assert s.kept_versions == {"0.0.9": 3, OLD: 1, NEW: 2}
    assert kept_versions_note(s.skipped_versions) == (
        f" (2 by geocon_torch 0.0.9, 1 by {OLD}, this is {NEW}: --rescore-versions re-scores "
        "them)")
    assert kept_versions_note({NEW: 3}) == "" and s.rescored_note() == ""
    new = Versioned(NEW)
    r = run_manifest(m2, db, score_fn=new, progress=False, rescore_versions=True)
    assert sorted(new.calls) == ["c0", "c1", "c3"]  # twin then points at c0's new row
    assert r.rescored_versions == {"0.0.9": 2, OLD: 1} and r.rescored == 3
    assert r.rescored_note() == f", 3 re-scored (replaced rows of 0.0.9 (2), {OLD} (1))"
    assert r.skipped_versions == {NEW: 3} and r.linked_versions == {}
    merged = s.merge(r)
    assert merged.rescored_versions == {"0.0.9": 2, OLD: 1}
    assert merged.skipped_versions == {"0.0.9": 2, OLD: 1, NEW: 5}
    assert RunSummary(rescored_versions={OLD: 1}).rescored_note() == (
        f", 1 re-scored (replaced rows of {OLD})")


def test_stats_warn_when_the_only_version_is_not_the_running_one(tmp_path):
    m, db = _old_store(tmp_path)
    rows = load_results(db)
    with pytest.warns(UserWarning) as caught:
        t1 = stats.table1(rows, n_boot=50)
    assert len(t1) == 1 and t1[0]["ge_px_scenes"] == 4  # pooled as before, not refused
    (w,) = [w for w in caught if "geocon_torch" in str(w.message)]
    text = str(w.message)
    cfg = rows[0]["config_hash"]
    assert text.startswith(f"the rows hold results of geocon_torch {OLD} (4 clips), and this is "
                           f"{NEW}: a release keeps the config hash"), text
    assert (f"`geocon bench MANIFEST --db DB --rescore-versions` with the --preset / --config / "
            f"size options these rows were scored with (config {cfg})") in text
    assert "`geocon score CLIP... --json`" in text  # rows of an unknown source: both ways
    # table1 -> _per_generator -> _flat -> warn: the warning points at this file, not inside
    assert w.filename == __file__, w.filename
    run_manifest(m, db, score_fn=Versioned(NEW), progress=False, rescore_versions=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        stats.table1(load_results(db), n_boot=50)
        no_version = [{k: v for k, v in r.items() if k != "version"} for r in load_results(db)]
        for r in no_version:
            r["result"] = {k: v for k, v in r["result"].items() if k != "version"}
        assert stats.version_counts(no_version) == {"unknown": 4}
        stats.table1(no_version, n_boot=20)  # hand-made rows recording no version


def test_stats_mixed_warning_names_the_running_version(tmp_path):
    _, db = _old_store(tmp_path, versions=(OLD, NEW))
    with pytest.warns(UserWarning, match=rf"2 geocon_torch versions \({OLD}: 2 clips, "
                                         rf"{NEW}: 2 clips\).* this is {NEW}: re-score"):
        stats.pass_rates(load_results(db), n_boot=20)


@pytest.mark.parametrize("statistic", ["table1", "headline", "pass_rates", "epipolar_trio",
                                       "scene_balanced", "status_counts"])
def test_stats_warning_points_at_the_caller_of_the_public_statistic(tmp_path, statistic):
    """However deep the helpers between the statistic and the warning (table1 ->
    _per_generator -> _flat), the warning names the line that called the statistic."""
    _, db = _old_store(tmp_path, versions=(OLD, NEW))
    rows = load_results(db)
    args = ("ir",) if statistic == "scene_balanced" else ()
    kw = {} if statistic == "status_counts" else {"n_boot": 20}
    with warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        line = inspect.currentframe().f_lineno + 1
        getattr(stats, statistic)(rows, *args, **kw)
    # before the fix table1 / headline / epipolar_trio pointed at geocon_torch/bench/stats.py
    assert [(w.filename, w.lineno) for w in got
            if "geocon_torch versions" in str(w.message)] == [(__file__, line)]


def _pairs_setup(tmp_path, monkeypatch):
    """A manifest of four clips (two prompts) of which c0, c1 were scored by the old release
    under the background kind's config (``preference_pairs``); the
    runner's default scorer is then the new release (returned)."""
    rows = write_clips(tmp_path / "clips", 4)
    for r in rows:
        r["prompt"] = f"p{int(r['clip_id'][1:]) % 2}"
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = str(tmp_path / "r.sqlite")
    monkeypatch.setattr(runner_mod, "default_score_fn", Versioned(OLD, 5.0))
    with warnings.catch_warnings():  # the old release's own run: (no) warning not checked here
        warnings.simplefilter("ignore")
        preference_pairs(write_jsonl(tmp_path / "old.jsonl", rows[:2]), db, kind="background")
    new = Versioned(NEW)
    monkeypatch.setattr(runner_mod, "default_score_fn", new)
    return m, db, new


def test_pairs_advice_names_geocon_pairs_and_its_option_rescores(tmp_path, monkeypatch, capsys):
    m, db, new = _pairs_setup(tmp_path, monkeypatch)
    out = tmp_path / "p.jsonl"
    with pytest.warns(UserWarning) as caught:
        assert main(["pairs", str(m), "--db", db, "--out", str(out), "--kind", "background",
                     "--no-progress"]) == 0
    (w,) = [w for w in caught if "geocon_torch versions" in str(w.message)]
    text = str(w.message)
    assert f"({OLD}: 2 clips, {NEW}: 2 clips)" in text and f"this is {NEW}" in text
    # before the fix: "... with geocon bench MANIFEST --db DB --rescore-versions ..."
    assert ("re-score the rows of the other versions with `geocon pairs MANIFEST --db DB "
            "--kind background --rescore-versions` with the --config / --long-side / "
            "--max-frames / --stride of this run (config ") in text, text
    assert "geocon bench" not in text
    line = capsys.readouterr().out
    assert (f"2 clip(s) scored, 2 already stored (2 by geocon_torch {OLD}, this is {NEW}: "
            "--rescore-versions re-scores them); wrote") in line, line
    assert sorted(new.calls) == ["c2", "c3"]
    with warnings.catch_warnings():  # the advised command: no warning, every row of NEW
        warnings.simplefilter("error")
        assert main(["pairs", str(m), "--db", db, "--out", str(out), "--kind", "background",
                     "--no-progress", "--rescore-versions"]) == 0
        line = capsys.readouterr().out
        assert (f"2 clip(s) scored, 2 re-scored (replaced rows of {OLD}), 2 already stored; "
                "wrote") in line, line
        assert main(["pairs", str(m), "--db", db, "--out", str(out), "--kind", "background",
                     "--no-progress"]) == 0
    assert sorted(new.calls) == ["c0", "c1", "c2", "c3"]
    assert {v for _, _, v in _versions(db)} == {NEW}


def test_preference_pairs_rescore_versions_and_warning_location(tmp_path, monkeypatch):
    m, db, new = _pairs_setup(tmp_path, monkeypatch)
    with pytest.warns(UserWarning, match="preference_pairs\\(..., rescore_versions=True\\)") as w:
        records, summary = preference_pairs(m, db, kind="background")
    assert {x.filename for x in w if "geocon_torch" in str(x.message)} == {__file__}
    before = {r["prompt"]: r["margin"] for r in records}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        records, summary = preference_pairs(m, db, kind="background", rescore_versions=True)
    assert summary.rescored_versions == {OLD: 2} and summary.computed == 2
    # the old release's GE was 5 px higher on c0 / c1: the re-scored pairs use the new numbers
    after = {r["prompt"]: r["margin"] for r in records}
    assert after != before and set(after) == {"p0", "p1"}
    fresh, _ = preference_pairs(m, str(tmp_path / "fresh.sqlite"), kind="background")
    assert records == fresh  # the pairs of a store the new release scored in full
