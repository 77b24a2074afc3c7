"""Statistics against closed forms and scipy: Wilson (eq. 16), bootstrap CIs, scene balance,
equal-count calibration bins, net benefit (eq. 18), sensitivity, percentile alignment, AdaP90."""
from __future__ import annotations

import numpy as np
import pytest
from helpers import fake_result
from scipy import stats as sps

from geocon_torch.bench import flatten_row, stats
from geocon_torch.errors import InputError


def _row(clip, generator="m", prompt_category="C1", seed=0, prompt="p", **kw):
    res = fake_result(clip, prompt_category=prompt_category, **kw)
    scene = f"{prompt_category}|{prompt}|{seed}" if seed is not None else f"clip:{clip}"
    return {"clip_id": clip, "generator": generator, "prompt_category": prompt_category,
            "prompt": prompt, "seed": seed, "scene": scene, "result": res, "status": res["status"]}


def test_wilson_closed_form_and_scipy():
    p, lo, hi = stats.wilson_interval(5, 10, z=1.96)
    # p = 0.5: centre 0.5, half width z / (1 + z^2/n) * sqrt(0.025 + z^2 / 400)
    half = 1.96 / (1 + 1.96 ** 2 / 10) * np.sqrt(0.025 + 1.96 ** 2 / 400)
    assert p == 0.5 and lo == pytest.approx(0.5 - half) and hi == pytest.approx(0.5 + half)
    assert lo == pytest.approx(0.2366, abs=1e-4)
    k = np.array([0, 1, 7, 25, 30])
    n = np.array([30, 30, 25, 25, 30])
    p, lo, hi = stats.wilson_interval(k, n)
    for ki, ni, l, h in zip(k, n, lo, hi):
        ref = sps.binomtest(int(ki), int(ni)).proportion_ci(0.95, method="wilson")
        assert l == pytest.approx(ref.low, abs=1e-9) and h == pytest.approx(ref.high, abs=1e-9)
    p, lo, hi = stats.wilson_interval(0, 0)
    assert (p, lo, hi) == (0.5, 0.0, 1.0)
    with pytest.raises(ValueError):
        stats.wilson_interval(3, 2)


def test_bootstrap_median_ci_matches_exact_bootstrap_distribution_and_scipy():
    rng = np.random.default_rng(1)
    n = 101
    x = rng.normal(size=n)
    est = stats.bootstrap_ci(x, statistic="median", n_boot=10_000, seed=0)
    assert est.value == pytest.approx(np.median(x)) and est.n == n
    # exact bootstrap law of the median of an odd sample: median* <= x_(k) iff at least
    # m = (n + 1) / 2 resampled points are <= x_(k): P = P(Binomial(n, k / n) >= m)
    xs = np.sort(x)
    cdf = sps.binom.sf((n + 1) // 2 - 1, n, np.arange(1, n + 1) / n)
    k_lo = int(np.argmax(cdf >= 0.025))
    k_hi = int(np.argmax(cdf >= 0.975))
    assert xs[k_lo - 1] <= est.lo <= xs[k_lo + 1]
    assert xs[k_hi - 1] <= est.hi <= xs[k_hi + 1]
    ref = sps.bootstrap((x,), np.median, n_resamples=10_000, method="percentile",
                        random_state=np.random.default_rng(5)).confidence_interval
    assert xs[k_lo - 1] <= ref.low <= xs[k_lo + 1] and xs[k_hi - 1] <= ref.high <= xs[k_hi + 1]
    x = rng.normal(size=400)
    mean = stats.bootstrap_ci(x, statistic="mean", seed=0)
    se = x.std(ddof=1) / np.sqrt(x.size)
    assert mean.lo == pytest.approx(x.mean() - 1.96 * se, abs=0.2 * se)
    assert mean.hi == pytest.approx(x.mean() + 1.96 * se, abs=0.2 * se)
    # seeded and block-size independent
    est = stats.bootstrap_ci(x, seed=0)
    again = stats.bootstrap_ci(x, seed=0, block_elements=4000)
    assert (again.lo, again.hi) == (est.lo, est.hi)
    assert stats.bootstrap_ci([], seed=0).value is None
    one = stats.bootstrap_ci([2.0])
    assert (one.value, one.lo, one.hi) == (2.0, 2.0, 2.0)


def test_scene_balance_weights_each_seed_once():
    # seed 0 has 9 regenerations at ir 0.5; seeds 1, 2 one clip each at 0.9 and 1.0
    rows = [_row(f"r{i}", seed=0, ir=0.5) for i in range(9)]
    rows += [_row("s1", seed=1, ir=0.9), _row("s2", seed=2, ir=1.0)]
    rows.append(_row("bad", seed=3, status="error"))
    (g,) = stats.scene_balanced(rows, "ir", n_boot=2000)
    assert g["value"] == pytest.approx(0.9)  # median of scenes {0.5, 0.9, 1.0}, not 0.5
    assert g["n_scenes"] == 3 and g["n_clips"] == 11 and g["n_rows"] == 12
    assert 0.5 <= g["lo"] <= g["value"] <= g["hi"] <= 1.0
    (t1,) = stats.table1(rows, n_boot=2000)
    assert t1["ir_pct"] == pytest.approx(100 * (0.5 + 0.9 + 1.0) / 3)
    assert t1["adadfrc_scenes"] == 0 and t1["adadfrc"] is None
    assert stats.headline(rows, n_boot=200)[0]["score_scenes"] == 0  # no clip has a score
    scored = [_row(f"r{i}", seed=0, score=0.2) for i in range(9)]
    scored += [_row("s1", seed=1, score=0.6), _row("s2", seed=2, score=1.0)]
    (h,) = stats.headline(scored, n_boot=2000)
    assert h["score"] == pytest.approx((0.2 + 0.6 + 1.0) / 3) and h["score_scenes"] == 3
    assert 0.2 <= h["score_lo"] <= h["score"] <= h["score_hi"] <= 1.0
    counts = stats.status_counts(rows)
    assert counts == [{"generator": "m", "n": 12, "ok": 11, "not_applicable": 0, "error": 1}]


def test_pass_rates_are_scene_balanced_and_skip_unrecorded_verdicts():
    # seed 0: 3 regenerations, 2 passing the paper gate (scene mean 2/3); seeds 1, 2: one clip
    # each, failing / passing (ir 0.5 fails, 0.99 passes the fake gate ir >= 0.97)
    rows = [_row(f"r{i}", seed=0, ir=0.99 if i < 2 else 0.5) for i in range(3)]
    rows += [_row("s1", seed=1, ir=0.5), _row("s2", seed=2, ir=0.99)]
    rows.append(_row("bad", seed=3, status="error"))
    for r, flag in zip(rows, (True, False, True, None, False)):  # calibrated verdicts
        if flag is not None:
            r["result"]["background"]["pass_calibrated"] = flag
    rows += [_row("other", generator="z", seed=0, ir=0.99)]
    (a, b) = stats.pass_rates(rows, n_boot=2000)
    assert a["generator"] == "m"
    assert a["pass"] == pytest.approx((2 / 3 + 0 + 1) / 3) and a["pass_scenes"] == 3
    assert 0.0 <= a["pass_lo"] <= a["pass"] <= a["pass_hi"] <= 1.0
    # seed 1 has no calibrated verdict: scenes 0 (mean of True, False, True) and 2 (False)
    assert a["pass_calibrated"] == pytest.approx((2 / 3 + 0) / 2)
    assert a["pass_calibrated_scenes"] == 2
    assert (b["generator"], b["pass"], b["pass_calibrated"]) == ("z", 1.0, None)
    assert b["pass_calibrated_scenes"] == 0


def test_groups_by_generator_and_category_and_epipolar_trio():
    rows = [_row(f"a{i}", generator="A", prompt_category="C1", seed=i, epipolar=(i, 0.5, 0.25))
            for i in range(5)]
    rows += [_row(f"b{i}", generator="B", prompt_category="C3", seed=i, epipolar=(2 * i, 0.9, 0.75))
             for i in range(5)]
    groups = stats.scene_balanced(rows, "epipolar_error", n_boot=500)
    assert [(g["generator"], g["prompt_category"], g["value"]) for g in groups] == [
        ("A", "C1", 2.0), ("B", "C3", 4.0)]
    trio = {t["generator"]: t for t in stats.epipolar_trio(rows, n_boot=500)}
    assert trio["A"]["epipolar_error"] == 2.0 and trio["B"]["epipolar_inlier_rate"] == 0.9
    assert trio["B"]["feature_match_coverage"] == 0.75 and trio["A"]["epipolar_error_scenes"] == 5


def test_calibration_curve_equal_count_bins():
    t = np.arange(300) / 1000.0
    rng = np.random.default_rng(0)
    perm = rng.permutation(300)
    y = t > 0.1495  # F for t >= 0.15
    c = stats.calibration_curve(t[perm], y[perm], n_bins=12)
    assert c["count"].tolist() == [25] * 12
    assert c["t_min"][0] == 0.0 and c["t_max"][-1] == 0.299
    np.testing.assert_allclose(c["t_mean"], [t[i * 25:(i + 1) * 25].mean() for i in range(12)])
    assert c["p_hat"].tolist() == [0.0] * 6 + [1.0] * 6
    _, lo, hi = stats.wilson_interval(np.array([0] * 6 + [25] * 6), np.full(12, 25))
    np.testing.assert_allclose(c["lo"], lo)
    np.testing.assert_allclose(c["hi"], hi)
    c = stats.calibration_curve([0.1, 0.2, 0.3, 0.4, 0.5], [0, 0, 1, 0, 1], n_bins=2)
    assert c["count"].tolist() == [3, 2] and c["k"].tolist() == [1, 1]
    assert c["t_median"].tolist() == [0.2, 0.45]
    with pytest.raises(ValueError):
        stats.calibration_curve([1, 2], [1])


def test_net_benefit_and_balanced_accuracy():
    t = np.array([0.01, 0.02, 0.05, 0.06, 0.03, 0.07])
    y = np.array([False, False, False, True, True, True])
    nb = stats.net_benefit(t, y, [0.0, 0.04, 0.1], costs=(0.5, 1.0, 2.0))
    # tau 0.04: predicted F = {0.05 (H), 0.06 (F), 0.07 (F)} -> TP 2, FP 1
    assert nb["tp"].tolist() == [3, 2, 0] and nb["fp"].tolist() == [3, 1, 0]
    np.testing.assert_allclose(nb["nb"][:, 1], [(2 - 0.5) / 6, (2 - 1) / 6, (2 - 2) / 6])
    np.testing.assert_allclose(nb["nb"][1], [0.0, 1 / 6, 0.0])
    ba = stats.balanced_accuracy_bootstrap(t, y, [0.04, 0.1], n_boot=400, seed=0)
    # tau 0.04: TPR 2/3, TNR 2/3 -> 2/3; tau 0.1: TPR 0, TNR 1 -> 0.5
    np.testing.assert_allclose(ba["point"], [2 / 3, 0.5])
    # resamples that lose a class (14 of 400 here) have no balanced accuracy: left out
    assert 350 < ba["best_counts"].sum() < 400 and (ba["lo"] <= ba["hi"]).all()


def test_gate_observations_use_category_expectation():
    rows = [_row("h", prompt_category="C1", statistic=0.01),
            _row("f", prompt_category="C5", statistic=0.2),
            _row("x", prompt_category="other", statistic=0.3)]
    obs = stats.gate_observations(rows)
    assert obs["clips"] == ["h", "f"] and obs["is_f"].tolist() == [False, True]
    assert obs["method"] == "poses"


def test_report_gate_sensitivity_grid():
    rows = [_row("a", ir=0.99, ge=1.0), _row("b", ir=0.96, ge=2.0), _row("c", ir=0.98, ge=4.0),
            _row("d", status="error")]
    (s,) = stats.report_gate_sensitivity(rows, ir_thresholds=[0.95, 0.97],
                                         ge_thresholds=[1.5, 3.5, 5.0])
    assert s["n"] == 3
    np.testing.assert_allclose(s["pass"], [[1 / 3, 2 / 3, 1.0], [1 / 3, 1 / 3, 2 / 3]])
    assert np.all(np.array(s["lo"]) <= np.array(s["pass"]))


def test_inlier_threshold_sensitivity_from_stored_scans():
    rows = []
    for i, ir in enumerate([0.8, 0.9, 1.0]):
        r = _row(f"c{i}", seed=i)
        r["result"]["background"]["sensitivity"] = {
            "tau_h": [1.0, 2.0], "ir_h": [ir - 0.1, ir], "ge_h_px": [0.5, None],
            "tau_f": [0.1], "ir_f": [ir], "ge_f_px": [0.2]}
        rows.append(r)
    (s,) = stats.inlier_threshold_sensitivity(rows)
    assert s["tau_h"] == [1.0, 2.0]
    assert s["ir_h"] == pytest.approx([0.8, 0.9]) and s["ge_h_px"] == [0.5, None]
    assert s["ge_h_px_n"] == [3, 0] and s["ir_f"] == pytest.approx([0.9])


def test_percentile_aligned_summary():
    rows = [_row(f"c{i}", seed=i, ir=i / 100, ge=float(i)) for i in range(101)]
    (s,) = stats.percentile_aligned(rows, percentiles=[10, 50, 90], band=5)
    assert s["x_q"] == pytest.approx([0.10, 0.50, 0.90])
    # ge == 100 * ir, so the median GE inside the IR band [q-5, q+5] is q
    assert s["y_at_x_q"] == pytest.approx([10.0, 50.0, 90.0]) and s["band_n"] == [11, 11, 11]
    assert s["y_q"] == pytest.approx([10.0, 50.0, 90.0])


def test_adap90_p80_anomaly_rates():
    rows = [_row(f"c{i}", seed=i, prompt_category="C4", objects=[float(i)], ir=0.99, ge=1.0)
            for i in range(10)]
    rows += [_row(f"d{i}", seed=i, prompt_category="C6", objects=[10.0 * i], ir=0.5)
             for i in range(5)]
    out = stats.adap90_anomalies(rows)
    g = {x["prompt_category"]: x for x in out["groups"]}
    assert g["C4"]["p80"] == pytest.approx(np.quantile(np.arange(10.0), 0.8))
    assert g["C4"]["n_objects"] == 10 and g["C4"]["anomaly_rate"] == pytest.approx(0.2)
    assert g["C6"]["anomaly_rate"] == pytest.approx(0.2) and g["C6"]["max"] == 40.0
    p, lo, hi = stats.wilson_interval(2, 10)
    assert (g["C4"]["lo"], g["C4"]["hi"]) == pytest.approx((lo, hi))
    dyn = out["dynamic_anomaly_background_good"]
    # anomalous: c8, c9 (background passes) and d4 (fails) -> 2 of 15 clips
    assert (dyn["k"], dyn["n"]) == (2, 15)


def test_expected_regime_accepts_names_and_aliases_in_any_case():
    from geocon_torch.bench.stats import expected_regime

    assert [expected_regime(c) for c in ("C1", "c3", " Rotation ", "STRESS", "moving_object")] \
        == ["H", "F", "H", "F", "H"]
    assert expected_regime(None) is None and expected_regime("C7") is None


def test_balanced_accuracy_needs_both_classes():
    """One class only (or none): the point estimate is NaN, not a rate with a missing half
    counted as 0; resamples that lose a class are left out of the CI."""
    from geocon_torch.bench import stats

    one = stats.balanced_accuracy_bootstrap([0.01, 0.05, 0.07, 0.1], [True] * 4, [0.04], n_boot=50)
    assert np.isnan(one["point"]).all() and np.isnan(one["lo"]).all()
    assert one["best_counts"].tolist() == [0]
    t = [0.01, 0.02, 0.05, 0.07]
    y = [False, False, True, True]
    ba = stats.balanced_accuracy_bootstrap(t, y, [0.04], n_boot=200, seed=1)
    assert ba["point"].tolist() == [1.0] and ba["lo"][0] == 1.0  # every usable resample: 1


def test_rows_without_scene_use_their_seed_and_numbers_may_be_ints():
    """A row without a ``scene`` key falls back on (prompt category, prompt, seed) like the
    store does (it used to make every clip a scene of its own); integer IR / GE count, a NaN
    is left out instead of wiping a group."""
    from geocon_torch.bench import stats

    rows = [{"clip_id": f"a{i}", "generator": "g", "status": "ok", "prompt_category": "C1",
             "prompt": "p", "seed": 1, "ir": 1.0} for i in range(10)]
    rows.append({"clip_id": "b", "generator": "g", "status": "ok", "prompt_category": "C1",
                 "prompt": "p", "seed": 2, "ir": 0.0})
    assert stats.scene_values(rows, "ir", reduce="mean") == {"C1|p|1": 1.0, "C1|p|2": 0.0}
    gate = [{"generator": "g", "status": "ok", "ir": 1, "ge_px": 1},
            {"generator": "g", "status": "ok", "ir": 0.99, "ge_px": 0.5}]
    sens = stats.report_gate_sensitivity(gate, ir_thresholds=[0.95], ge_thresholds=[3.5])
    assert sens[0]["n"] == 2 and sens[0]["pass"] == [[1.0]]
    pa = stats.percentile_aligned(gate + [{"generator": "g", "status": "ok", "ir": float("nan"),
                                           "ge_px": 1.0}])
    assert pa[0]["n"] == 2 and all(v is not None for v in pa[0]["x_q"])


def test_gate_observations_take_ok_rows_only():
    """A not_applicable / error row may keep its gate statistic; it never enters calibration."""
    rows = [_row("h", prompt_category="C1", statistic=0.01),
            _row("f", prompt_category="C3", statistic=0.2),
            _row("na", prompt_category="C3", statistic=0.03, status="not_applicable"),
            _row("err", prompt_category="C1", statistic=0.04, status="error")]
    obs = stats.gate_observations(rows)
    assert obs["clips"] == ["h", "f"] and obs["t"].tolist() == [0.01, 0.2]


def test_rows_of_two_configurations_are_refused_by_every_statistic():
    rows = [_row("a", config_hash="cfgA"), _row("b", config_hash="cfgB")]
    for fn in (stats.status_counts, stats.table1, stats.headline, stats.epipolar_trio,
               stats.report_gate_sensitivity, stats.percentile_aligned, stats.object_table,
               stats.adap90_anomalies, stats.gate_observations,
               stats.inlier_threshold_sensitivity, lambda r: stats.scene_values(r, "ir"),
               lambda r: stats.scene_balanced(r, "ir")):
        with pytest.raises(InputError, match="2 configurations \\(cfgA, cfgB\\)"):
            fn(rows)
    flat = [{**flatten_row(r), "_result": r["result"]} for r in rows]  # flat rows as well
    with pytest.raises(InputError, match="cfgA, cfgB"):
        stats.status_counts(flat)
    assert stats.status_counts(rows[:1])[0]["n"] == 1  # one configuration is fine


def test_thresholds_are_inclusive_or_strict_as_documented():
    """Ties on a threshold: the report gate passes IR == a and GE == d (IR >= a, GE <= d); net
    benefit predicts F only when t > tau (a sample at tau is not F); an object whose AdaP90
    equals its group's P80 is not an anomaly (above it only: nine objects at 0.0 and one at 5.0
    give P80 = 0 and one anomaly, not ten)."""
    rows = [_row("a", ir=0.97, ge=3.5), _row("b", ir=0.96, ge=3.5), _row("c", ir=0.97, ge=3.6)]
    (s,) = stats.report_gate_sensitivity(rows, ir_thresholds=[0.97], ge_thresholds=[3.5])
    assert s["n"] == 3 and s["pass"] == [[pytest.approx(1 / 3)]]
    nb = stats.net_benefit([0.04, 0.05, 0.03], [True, True, False], [0.04])
    assert nb["tp"].tolist() == [1.0] and nb["fp"].tolist() == [0.0]
    rows = [_row(f"c{i}", seed=i, prompt_category="C4", objects=[5.0 if i == 9 else 0.0])
            for i in range(10)]
    (g,) = stats.adap90_anomalies(rows)["groups"]
    assert g["p80"] == 0.0 and g["anomaly_rate"] == pytest.approx(0.1)
