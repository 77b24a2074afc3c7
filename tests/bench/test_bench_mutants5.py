"""Mutation-found gaps of the leaderboard layer (session 20): clip-id derivation and file keys,
dynamic claim order, runner resume rules, merge conflict rules, statistics, preference pairs
and manifest parsing defaults. Each test pins one behaviour no other default test pinned."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from helpers import CountingScorer, _clip, fake_result, write_clips, write_jsonl

from geocon_torch.bench import ManifestEntry, ResultStore, derive_clip_ids, file_key
from geocon_torch.bench.claims import WorkQueue
from geocon_torch.errors import InputError


# --- ids.py -----------------------------------------------------------------------------------
def test_file_key_slug_keeps_max_len_characters():
    """The slug is the id cut to ``max_len`` characters (48), then ``_`` and 8 hex digits."""
    key = file_key("a" * 60)
    slug, digest = key.rsplit("_", 1)
    assert slug == "a" * 48 and len(digest) == 8
    assert file_key("abcdef", max_len=3).startswith("abc_")


def test_derived_id_of_the_root_folder_is_its_name():
    """A path whose last component has no stem (the root folder) keeps its name as id."""
    assert derive_clip_ids(["/"]) == ["/"]


# --- claims.py (PostgreSQL) --------------------------------------------------------------------
def test_claims_follow_manifest_order_not_clip_id_order(pg_url):
    """Rows are claimed in manifest position order: c10 listed first is claimed first (an
    ORDER BY clip_id would hand out c1, c10, c2 ...)."""
    store = ResultStore(pg_url)
    try:
        q = WorkQueue(store, "job-order", "cfg", "A", lease_s=30)
        q.enqueue(["c10", "c2", "c1"])
        assert q.claim() == "c10"
        assert q.claim_many(5, exclude=["c10"]) == ["c2", "c1"]
    finally:
        store.close()


def test_lease_keeper_renews_before_the_lease_runs_out(pg_url):
    """A rank scoring one clip for longer than its lease keeps it: the keeper renews every
    lease_s / 3 s, so another rank never takes a clip from a live one (and the job's heartbeat
    stays alive)."""
    import time

    from geocon_torch.bench.claims import LeaseKeeper

    a_store, b_store = ResultStore(pg_url), ResultStore(pg_url)
    try:
        a = WorkQueue(a_store, "job-live", "cfg", "A", lease_s=0.9)
        b = WorkQueue(b_store, "job-live", "cfg", "B", lease_s=30)
        a.enqueue(["x"])
        assert a.claim() == "x"
        with LeaseKeeper(a) as keeper:
            time.sleep(1.5)  # longer than the lease: only the renewals keep x with A
            assert b.claim() is None
        assert keeper.renewals and keeper.renewals[0] == 1
    finally:
        a_store.close()
        b_store.close()


def test_drop_job_deletes_only_the_finished_rows(pg_url):
    """drop_job removes the done rows of a job; an open row (and so the job's heartbeat)
    stays."""
    from geocon_torch.bench.claims import drop_job

    store = ResultStore(pg_url)
    try:
        q = WorkQueue(store, "job-drop", "cfg", "A", lease_s=30)
        q.enqueue(["x", "y"])
        q.finish("x")
        drop_job(store, "job-drop")
        assert q.pending() == 1 and q.claim() == "y"
        assert store.select("SELECT COUNT(*) FROM work_jobs WHERE job = ?", ("job-drop",)) \
            == [(1,)]
    finally:
        store.close()


# --- runner.py --------------------------------------------------------------------------------
def _run(m, db, scorer, **kw):
    from geocon_torch.bench import run_manifest

    return run_manifest(m, db, score_fn=scorer, progress=False, **kw)


def _rows(db):
    with ResultStore(db) as s:
        return {r["clip_id"]: r for r in s.rows()}


def test_resume_relinks_a_clip_whose_file_now_holds_other_stored_bytes(tmp_path: Path):
    """c0's file is overwritten with c1's bytes: the resumed run links c0 to those bytes (it
    must not count c0 as skipped and keep showing the numbers of its old bytes)."""
    rows = write_clips(tmp_path / "clips", 2)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = tmp_path / "r.sqlite"
    _run(m, db, CountingScorer())
    before = _rows(db)
    Path(rows[0]["path"]).write_bytes(Path(rows[1]["path"]).read_bytes())
    again = CountingScorer()
    s = _run(m, db, again)
    assert again.calls == [] and (s.skipped, s.linked) == (1, 1)
    after = _rows(db)
    assert after["c0"]["content_hash"] == before["c1"]["content_hash"]
    assert after["c0"]["result"]["background"]["ir"] == before["c1"]["result"]["background"]["ir"]


class _Reporting:
    """A scorer whose result names its own prompt family, content hash and config hash."""

    def __call__(self, entry, config, device):
        res = CountingScorer()(entry, config, device)
        res.update(prompt_category="C2", content_hash="scorer-hash", config_hash="scorer-cfg")
        return res


def test_scorer_fields_kept_unless_the_manifest_or_runner_owns_them(tmp_path: Path):
    """Without a manifest category the scorer's prompt_category stays; the scorer's own
    content_hash stays; a config hash other than the run's is kept as config_hash_reported."""
    rows = write_clips(tmp_path / "clips", 1)
    del rows[0]["category"]
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = tmp_path / "r.sqlite"
    s = _run(m, db, _Reporting())
    res = _rows(db)["c0"]["result"]
    assert res["prompt_category"] == "C2" and res["content_hash"] == "scorer-hash"
    assert res["config_hash"] == s.config_hash and res["config_hash_reported"] == "scorer-cfg"


class _ShortBatch(CountingScorer):
    """``batch`` answers one outcome too few (a broken batch scorer)."""

    def batch(self, entries, config, device):
        return [self(e, config, device) for e in entries][:-1]


def test_batch_with_too_few_outcomes_falls_back_and_stores_every_clip(tmp_path: Path):
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 3))
    db = tmp_path / "r.sqlite"
    s = _run(m, db, _ShortBatch(), batch_clips=3)
    assert (s.computed, s.ok) == (3, 3) and sorted(_rows(db)) == ["c0", "c1", "c2"]


def test_run_summary_merge_makespan_and_idle_fraction():
    from geocon_torch.bench.runner import RunSummary

    a = RunSummary(total=2, computed=1, skipped=0, linked=1, ok=1, elapsed_s=3.0, busy_s=1.0,
                   rank_busy_s=[1.0], rank_window=[(10.0, 13.0)])
    b = RunSummary(total=3, computed=2, skipped=1, linked=2, ok=2, elapsed_s=5.0, busy_s=4.0,
                   rank_busy_s=[4.0], rank_window=[(11.0, 16.0)])
    c = a.merge(b)
    assert (c.total, c.computed, c.skipped, c.linked, c.ok) == (5, 3, 1, 3, 3)
    assert c.elapsed_s == 5.0 and c.busy_s == 5.0
    assert c.makespan_s() == 6.0  # first start 10 s, last end 16 s
    assert c.idle_fraction() == pytest.approx(1 - 5.0 / (2 * 6.0))


def test_static_assignment_on_a_server_store_stays_static(tmp_path: Path, pg_url):
    """assign="static" on a PostgreSQL store: r::N shares, no work job (only "auto" picks
    dynamic claims on a server)."""
    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 2))
    s = _run(m, pg_url, CountingScorer(), assign="static")
    assert (s.assign, s.job, s.computed) == ("static", None, 2)
    with ResultStore(pg_url) as st:
        assert st.select("SELECT COUNT(*) FROM work_jobs") == [(0,)]


def test_a_dynamic_run_drops_crashed_jobs_before_its_first_clip(tmp_path: Path, pg_url):
    """Rank 0 deletes a crashed job's work rows when the new job starts (not only at its end):
    they are gone while the first clip is scored."""
    import time

    from geocon_torch.pipeline import pinned_config

    m = write_jsonl(tmp_path / "m.jsonl", write_clips(tmp_path / "clips", 1))
    cfg = pinned_config(None, None).config_hash()
    seen = []

    class Probe(CountingScorer):
        def __call__(self, entry, config, device):
            with ResultStore(pg_url) as st:
                seen.append(st.select("SELECT COUNT(*) FROM work WHERE job = 'dead'")[0][0])
            return super().__call__(entry, config, device)

    with ResultStore(pg_url) as st:
        dead = WorkQueue(st, "dead", cfg, "D", lease_s=0.2)
        dead.enqueue(["c0", "gone"])
        time.sleep(0.4)  # its heartbeat runs out: a crashed job
        s = _run(m, pg_url, Probe())
    assert s.assign == "dynamic" and seen == [0]


# --- stats.py ---------------------------------------------------------------------------------
def _srow(clip, generator="m", seed=0, prompt_category="C1", **kw):
    res = fake_result(clip, prompt_category=prompt_category, **kw)
    return {"clip_id": clip, "generator": generator, "prompt_category": prompt_category,
            "prompt": "p", "seed": seed, "scene": f"{prompt_category}|p|{seed}", "result": res,
            "status": res["status"]}


def test_bootstrap_of_two_values_reaches_both_ends():
    """Resamples of {0, 1}: the mean is 0, 0.5 or 1 with probabilities 1/4, 1/2, 1/4, so the
    2.5 / 97.5 percentiles are 0 and 1 (each index, the last one too, is drawn)."""
    from geocon_torch.bench import stats

    est = stats.bootstrap_ci([0.0, 1.0], statistic="mean", n_boot=4000, seed=0)
    assert (est.value, est.lo, est.hi, est.n) == (0.5, 0.0, 1.0, 2)


def test_bootstrap_leaves_out_non_finite_values():
    from geocon_torch.bench import stats

    est = stats.bootstrap_ci([1.0, float("nan"), 3.0, float("inf"), None], statistic="mean",
                             n_boot=200)
    assert est.value == 2.0 and est.n == 2 and 1.0 <= est.lo <= est.hi <= 3.0


def test_only_ok_rows_and_real_numbers_enter_a_statistic():
    """A not_applicable row that still carries an IR, and a flat row whose IR is a boolean,
    never enter a statistic."""
    from geocon_torch.bench import stats

    na = _srow("na", seed=1, ir=0.2)
    na["status"] = na["result"]["status"] = "not_applicable"
    rows = [_srow("a", seed=0, ir=0.9), na]
    assert stats.scene_values(rows, "ir") == {"C1|p|0": 0.9}
    flat = [{"clip_id": "b", "generator": "g", "status": "ok", "seed": 1, "ir": True},
            {"clip_id": "c", "generator": "g", "status": "ok", "seed": 2, "ir": 0.5}]
    assert stats.scene_values(flat, "ir") == {"||2": 0.5}


def test_table1_interval_is_in_the_units_of_its_value():
    """ir_pct is IR in percent: its CI bounds are scaled by 100 as well."""
    from geocon_torch.bench import stats

    rows = [_srow(f"c{i}", seed=i, ir=0.9 + 0.01 * i) for i in range(5)]
    (t,) = stats.table1(rows, n_boot=500)
    est = stats.bootstrap_ci([0.9 + 0.01 * i for i in range(5)], statistic="mean", n_boot=500)
    assert t["ir_pct"] == pytest.approx(100 * est.value)
    assert (t["ir_pct_lo"], t["ir_pct_hi"]) == pytest.approx((100 * est.lo, 100 * est.hi))
    assert 90.0 <= t["ir_pct_lo"] <= t["ir_pct"] <= t["ir_pct_hi"] <= 94.0


def test_gate_observations_default_to_the_most_common_method():
    from geocon_torch.bench import stats

    rows = [_srow(f"p{i}", seed=i, statistic=0.01 * i) for i in range(3)]
    other = _srow("d", seed=9, statistic=0.5)
    other["result"]["gate"]["method"] = "dust3r"
    obs = stats.gate_observations(rows + [other])
    assert obs["method"] == "poses" and obs["clips"] == ["p0", "p1", "p2"]


def _bacc_reference(t, y, tau, n_boot, seed):
    """Balanced accuracy per resample, one resample at a time (the same seeded draws)."""
    t, y = np.asarray(t, float), np.asarray(y, bool)
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, t.size, (n_boot, t.size))
    reps = []
    for idx in draws:
        tb, yb = t[idx], y[idx]
        if yb.all() or not yb.any():
            continue
        pred = tb > tau
        reps.append(0.5 * ((pred & yb).sum() / yb.sum() + (~pred & ~yb).sum() / (~yb).sum()))
    return np.asarray(reps)


def test_balanced_accuracy_with_unequal_classes_and_its_percentile_interval():
    """One F and three H observations: TNR is over the H class (3), TPR over F (1); the CI
    is the 2.5 / 97.5 percentile of the resampled balanced accuracies."""
    from geocon_torch.bench import stats

    t = [0.01, 0.05, 0.02, 0.07]
    y = [False, False, False, True]
    ba = stats.balanced_accuracy_bootstrap(t, y, [0.04], n_boot=300, seed=3)
    # tau 0.04: the F clip is above (TPR 1), one H clip of three is above (TNR 2/3)
    assert ba["point"].tolist() == [pytest.approx(0.5 * (1 + 2 / 3))]
    reps = _bacc_reference(t, y, 0.04, 300, 3)
    assert ba["mean"][0] == pytest.approx(reps.mean())
    assert (ba["lo"][0], ba["hi"][0]) == pytest.approx(tuple(np.quantile(reps, [0.025, 0.975])))


def test_scene_balanced_mean_takes_the_mean_of_each_scene():
    """statistic="mean": a scene's value is the mean of its clips (0, 0, 0.9 -> 0.3), not
    their median (0)."""
    from geocon_torch.bench import stats

    rows = [_srow("a", seed=0, ir=0.0), _srow("b", seed=0, ir=0.0), _srow("c", seed=0, ir=0.9),
            _srow("d", seed=1, ir=0.5)]
    (g,) = stats.scene_balanced(rows, "ir", statistic="mean", n_boot=200)
    assert g["value"] == pytest.approx((0.3 + 0.5) / 2) and g["n_scenes"] == 2


def test_inlier_sensitivity_leaves_out_clips_scanned_on_another_grid():
    from geocon_torch.bench import stats

    rows = []
    for i, (taus, ir) in enumerate((([1.0, 2.0], 0.8), ([1.0, 2.0], 0.9), ([1.0, 3.0], 0.1))):
        r = _srow(f"c{i}", seed=i)
        r["result"]["background"]["sensitivity"] = {
            "tau_h": taus, "ir_h": [ir, ir], "ge_h_px": [1.0, 1.0],
            "tau_f": [0.1], "ir_f": [ir], "ge_f_px": [0.2]}
        rows.append(r)
    (s,) = stats.inlier_threshold_sensitivity(rows)
    assert s["tau_h"] == [1.0, 2.0] and s["ir_h_n"] == [2, 2]
    assert s["ir_h"] == pytest.approx([0.85, 0.85])


def test_net_benefit_of_no_observations_is_zero():
    from geocon_torch.bench import stats

    nb = stats.net_benefit([], [], [0.04], costs=(1.0,))
    assert nb["nb"].tolist() == [[0.0]] and nb["tp"].tolist() == [0.0]


# --- preferences.py ---------------------------------------------------------------------------
def test_an_empty_prompt_forms_no_group():
    """A blank prompt ("" from code) is no prompt: each such clip is its own skipped record."""
    from geocon_torch.bench.preferences import group_by_prompt, preference_records

    es = [ManifestEntry("a", "/a.mp4", "m", prompt=""), ManifestEntry("b", "/b.mp4", "m",
                                                                     prompt="")]
    assert [(p, [e.clip_id for e in g]) for p, g in group_by_prompt(es)] == \
        [(None, ["a"]), (None, ["b"])]
    res = {"a": fake_result("a", ir=0.99), "b": fake_result("b", ir=0.5)}
    recs = preference_records(es, res, "background")
    assert [(r["status"], r["reason"]) for r in recs] == [("skipped", "the clip has no prompt")] * 2


def test_min_margin_nan_is_refused():
    from geocon_torch.bench.preferences import preference_pairs

    with pytest.raises(InputError, match="min_margin must be >= 0"):
        preference_pairs([], "unused.sqlite", min_margin=float("nan"))


def test_unscored_reward_statuses_are_never_chosen_nor_rejected():
    from geocon_torch.bench.preferences import choose_pair
    from geocon_torch.rewards import ClipReward

    rec = choose_pair("p", [("frozen", ClipReward(0.99, "not_applicable", "frozen", 1, 1)),
                            ("a", ClipReward(0.6, "ok", None, 1, 1)),
                            ("b", ClipReward(0.2, "ok", None, 1, 1))], "background")
    assert (rec["chosen"], rec["rejected"], rec["num_scored"]) == ("a", "b", 2)
    assert rec["unscored"] == {"frozen": "not_applicable: frozen"}


def test_pairs_read_only_the_rows_of_the_kind_config(tmp_path: Path, monkeypatch):
    """The store also holds error rows of the same clip ids under another config: the pairs
    come from the rows of the kind's config only."""
    from geocon_torch.bench.preferences import preference_pairs

    rows = write_clips(tmp_path / "clips", 2)
    for r in rows:
        r["prompt"] = "p"
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    db = tmp_path / "r.sqlite"
    with ResultStore(db) as s:  # "zzzz" sorts after any hex config hash
        for r in rows:
            s.put(_clip(r["clip_id"]), "other-" + r["clip_id"], "zzzz",
                  fake_result(r["clip_id"], status="error", config_hash="zzzz"))
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", CountingScorer())
    (rec,), _ = preference_pairs(m, db, kind="background")
    assert rec["status"] == "pair" and rec["num_scored"] == 2


# --- manifest.py ------------------------------------------------------------------------------
def _load(tmp_path: Path, text: str, suffix: str = ".jsonl"):
    from geocon_torch.bench import load_manifest

    p = tmp_path / f"m{suffix}"
    p.write_text(text)
    return load_manifest(p)


def test_seed_zero_is_a_seed_not_an_unknown_one():
    """Seed 0 joins its regenerations in one scene; only a missing seed makes the clip a scene
    of its own."""
    e = ManifestEntry("c", "/c.mp4", "m", prompt="p", seed=0, prompt_category="C1")
    assert e.scene == "C1|p|0"
    assert ManifestEntry("d", "/d.mp4", "m", prompt="p", seed=None).scene == "clip:d"


@pytest.mark.parametrize("row, message", [
    ('"seed": true', "seed must be an integer"),
    ('"resolution": "1280x0"', "resolution must be positive"),
    ('"model": "sora"', "generator 'm' and model 'sora' disagree"),
])
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # the retired "model" column
def test_bad_values_are_refused(tmp_path: Path, row: str, message: str):
    from geocon_torch.bench import ManifestError

    with pytest.raises(ManifestError, match=message):
        _load(tmp_path, '{"clip_id": "a", "path": "a.mp4", "generator": "m", ' + row + '}\n')


def test_zero_duration_comments_blank_rows_and_blank_clip_ids_are_read(tmp_path: Path):
    (e,) = _load(tmp_path, '# a comment line\n'
                 '{"clip_id": "a", "path": "a.mp4", "generator": "m", "duration": 0}\n')
    assert e.duration == 0.0 and e.line == 2
    a, b = _load(tmp_path, "clip_id,path,generator\n,x/a.mp4,m\n,,\n,y/a.mp4,m\n", ".csv")
    assert (a.clip_id, b.clip_id) == ("x/a", "y/a") and (a.line, b.line) == (2, 4)


# --- merge.py ---------------------------------------------------------------------------------
def _shard(path: Path, *puts) -> str:
    with ResultStore(path) as s:
        for clip, key, res in puts:
            s.put(clip, key, "cfg", res)
    return str(path)


def test_equal_numbers_inside_lists_are_the_same_result(tmp_path: Path):
    """1.0 and 1 in a per-pair list entry are equal numbers: no conflict."""
    from geocon_torch.bench import merge_stores

    a, b = fake_result("c0"), fake_result("c0")
    a["background"]["per_pair"][0]["ge_px"] = 1.0
    b["background"]["per_pair"][0]["ge_px"] = 1
    shards = [_shard(tmp_path / "a.sqlite", (_clip("c0"), "h0", a)),
              _shard(tmp_path / "b.sqlite", (_clip("c0"), "h0", b))]
    rep = merge_stores(str(tmp_path / "out.sqlite"), shards)
    assert (rep.results_added, rep.results_same, rep.conflicts) == (1, 1, [])


def test_a_not_applicable_result_replaces_an_error_row(tmp_path: Path):
    """A scored result replaces an error row of OUT, status not_applicable as much as ok."""
    from geocon_torch.bench import load_results, merge_stores

    err = _shard(tmp_path / "err.sqlite", (_clip("c0"), "h0", fake_result("c0", status="error")))
    na = _shard(tmp_path / "na.sqlite",
                (_clip("c0"), "h0", fake_result("c0", status="not_applicable")))
    out = str(tmp_path / "out.sqlite")
    rep = merge_stores(out, [err, na])
    assert (rep.results_replaced, rep.conflicts) == (1, [])
    assert [r["status"] for r in load_results(out)] == ["not_applicable"]


def test_a_newer_clip_row_from_one_shard_is_not_undone_by_an_older_one(tmp_path: Path):
    """OUT holds clip x written at t0; shard 1 has x at t2 (generator g2), shard 2 at t1
    (g1): the newest row (g2) ends in OUT, shard 2's row is counted older."""
    from geocon_torch.bench import load_results, merge_stores

    out = tmp_path / "out.sqlite"
    _shard(out, (_clip("x"), "h", fake_result("x")))
    with ResultStore(out) as s:
        (row,) = s.raw_clips()
    shards = []
    for name, gen, dt in (("s1", "g2", 20.0), ("s2", "g1", 10.0)):
        path = tmp_path / f"{name}.sqlite"
        with ResultStore(path) as s:
            s.insert_raw([], [{**row, "generator": gen, "updated_at": row["updated_at"] + dt}])
        shards.append(str(path))
    rep = merge_stores(str(out), shards)
    assert (rep.clips_updated, rep.clips_older, rep.conflicts) == (1, 1, [])
    assert [r["generator"] for r in load_results(out)] == ["g2"]


def test_a_conflict_lists_every_differing_field(tmp_path: Path):
    """Up to MAX_DIFFS (12) differing fields are listed: here all five."""
    from geocon_torch.bench import merge_stores

    a, b = fake_result("c0"), fake_result("c0")
    for k, v in (("ir", 0.5), ("ge_px", 9.0), ("ir_h", 0.4), ("ge_h_px", 8.0), ("ir_f", 0.3)):
        b["background"][k] = v
    shards = [_shard(tmp_path / "a.sqlite", (_clip("c0"), "h0", a)),
              _shard(tmp_path / "b.sqlite", (_clip("c0"), "h0", b))]
    (c,) = merge_stores(str(tmp_path / "out.sqlite"), shards).conflicts
    assert sorted(c["differences"]) == ["background.ge_h_px", "background.ge_px",
                                        "background.ir", "background.ir_f", "background.ir_h"]


def test_a_shard_listed_twice_is_refused(tmp_path: Path):
    from geocon_torch.bench import merge_stores

    s = _shard(tmp_path / "a.sqlite", (_clip("c0"), "h0", fake_result("c0")))
    with pytest.raises(InputError, match="shard listed twice"):
        merge_stores(str(tmp_path / "out.sqlite"), [s, str(Path(s))])


def test_clip_differences_name_an_entry_field_given_on_one_side_only():
    from geocon_torch.bench.merge import clip_differences

    base = {k: None for k in ("generator", "generator_version", "prompt_category", "prompt",
                              "seed", "scene", "path")}
    kept = {**base, "entry_json": json.dumps({"clip_id": "x", "fps": 24})}
    other = {**base, "entry_json": json.dumps({"clip_id": "x"})}
    assert clip_differences(kept, other) == {"entry.fps": [24, None]}
