"""Mutation round 6 (gate): closed-form pins of the regime rules, the parallax statistics, the
gate tier / U-resolution rules and the gate view's size rules that no other default test pinned.
Each test names the rule it pins; inputs are constructed (no media)."""
from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from geocon_torch.config import GateConfig, GeoConConfig
from geocon_torch.gate import GateDecision
from geocon_torch.gate.decision import resolve_u, resolve_u_clip, threshold_decision
from geocon_torch.gate.parallax import gate_from_parallax, parallax_statistics

CFG = GateConfig()  # parallax_magnitude, band [3, 16] reference px, q 0.9, ci_z 1.645, k 4.5


def _stats(r_h, r_fpx, long_side=1024, n_pairs=1, r_fn=None, valid=None, gate=CFG, **kw):
    """parallax_statistics of (n_pairs, N) residuals: symmetric transfer ``r_h`` px, pixel
    Sampson ``r_fpx`` px, normalised Sampson ``r_fn`` (0: every match an F-inlier)."""
    r_h = torch.as_tensor(r_h, dtype=torch.float64).expand(n_pairs, -1)
    r_fpx = torch.as_tensor(r_fpx, dtype=torch.float64).expand(n_pairs, -1)
    r_fn = torch.zeros_like(r_h) if r_fn is None else torch.as_tensor(
        r_fn, dtype=torch.float64).expand(n_pairs, -1)
    mask = torch.ones_like(r_h, dtype=torch.bool)
    ok = torch.ones(n_pairs, dtype=torch.bool) if valid is None else torch.as_tensor(valid)
    fit = SimpleNamespace(valid=ok)
    x = torch.zeros(*r_h.shape, 2, dtype=torch.float64)
    return parallax_statistics(fit, fit, x, x, mask, residuals=(r_h, r_fn, r_fpx),
                               long_side_px=long_side, gate=gate, **kw)


# ---- decision.py -------------------------------------------------------------------------

def test_threshold_decision_present_false_is_no_decision():
    """``present`` False gives code -1 whatever the statistic (public rule)."""
    s = torch.tensor([0.5, 0.1, 0.9, 0.9])
    got = threshold_decision(s, 0.2, 0.8, present=torch.tensor([True, False, False, True]))
    assert got.tolist() == [2, -1, -1, 1]


def test_u_resolution_boundaries_are_strict():
    """GRIC must *prefer* F (gric_delta > 0, not == 0) and F's support must *exceed* H's by
    more than u_margin (== is not enough)."""
    assert resolve_u_clip(0.0) == "H"
    assert resolve_u(torch.tensor([2]), torch.tensor([0.0])).tolist() == [False]
    assert resolve_u_clip(-1.0, support_margin=0.25, u_margin=0.25) == "H"
    assert resolve_u_clip(-1.0, support_margin=0.375, u_margin=0.25) == "F"
    codes = torch.tensor([2, 2])
    got = resolve_u(codes, torch.tensor([-1.0, -1.0]), torch.tensor([0.25, 0.375]), 0.25)
    assert got.tolist() == [False, True]


def test_clip_regime_of_u_uses_the_support_margin():
    """A clip U with GRIC favouring H (gric_delta < 0) is F when the clip's IR_F - IR_H beats
    gate.u_margin (0.05): the support margin reaches resolve_u_clip."""
    from geocon_torch.gate.select import clip_regime

    gate = GateDecision("parallax", 10.0, {}, "U", evidence={"gric_delta": -0.2})
    assert clip_regime(gate, GeoConConfig(), 0.1) == "F"
    assert gate.evidence["u_resolved"] == "F" and gate.evidence["u_support_margin"] == 0.1
    gate = GateDecision("parallax", 10.0, {}, "U", evidence={"gric_delta": -0.2})
    assert clip_regime(gate, GeoConConfig(), 0.05) == "H"


# ---- parallax.py -------------------------------------------------------------------------

def test_magnitude_interval_is_the_order_statistic_bound_closed_form():
    """parallax_magnitude_lo / _hi = the values at ranks (n - 1)(q -/+ z sqrt(q (1 - q) / n))
    (the pipeline's one-sort path, not only quantile_bounds)."""
    n = 1001
    st = _stats(torch.arange(n, dtype=torch.float64), torch.zeros(n))
    half = 1.645 * np.sqrt(0.9 * 0.1 / n)
    assert float(st["parallax_magnitude"][0]) == pytest.approx(0.9 * (n - 1))
    assert float(st["parallax_magnitude_lo"][0]) == pytest.approx((0.9 - half) * (n - 1))
    assert float(st["parallax_magnitude_hi"][0]) == pytest.approx((0.9 + half) * (n - 1))


def test_f_inliers_include_the_tau_f_boundary():
    """An F-inlier has normalised Sampson <= tau_F: matches exactly at tau_F count."""
    n = 40
    st = _stats(torch.zeros(n), torch.zeros(n), r_fn=torch.full((n,), 0.1, dtype=torch.float64),
                tau_f=0.1)
    assert st["num_f_inliers"].tolist() == [n] and st["valid"].tolist() == [True]


def test_parallax_fraction_counts_f_inliers_that_are_h_outliers():
    """parallax_fraction = share of the F-inliers whose H transfer error exceeds tau_H (2 px)."""
    r_h = torch.linspace(0.0, 9.0, 10)  # 0, 1, ..., 9 px: 7 of 10 above 2 px
    st = _stats(torch.cat([r_h, r_h, r_h]), torch.zeros(30))
    assert float(st["parallax_fraction"][0]) == pytest.approx(0.7)


def _mag(value, lo, hi, noise, gric=-0.5, rows=3, valid=None, counts=200):
    """Constructed parallax statistics of ``rows`` pairs, every valid one with the same
    parallax_magnitude (value, lower, upper) and noise (reference px)."""
    full = lambda v: torch.full((rows,), float(v), dtype=torch.float64)  # noqa: E731
    ok = torch.ones(rows, dtype=torch.bool) if valid is None else torch.tensor(valid)
    return {"parallax_magnitude": full(value), "parallax_magnitude_lo": full(lo),
            "parallax_magnitude_hi": full(hi), "noise_ref_px": full(noise),
            "gric_delta": full(gric), "num_f_inliers": torch.full((rows,), counts),
            "valid": ok}


def test_f_bound_rises_with_the_noise_floor():
    """H bound = max(3, 4.5 x noise) = 18 > 16 for noise 4: the F bound is max(16, 18) = 18, so
    an interval [17, 25] is not clear of it (U), although it is above magnitude_high."""
    gate = gate_from_parallax(_mag(20.0, 17.0, 25.0, 4.0), CFG)
    assert gate.thresholds == {"low": 18.0, "high": 18.0}
    assert gate.evidence["band_ref_px"] == [18.0, 18.0] and gate.decision == "U"


def test_noise_limited_clip_is_never_h():
    """A noise floor reaching half the F threshold (4.5 x 2 = 9 >= 8; and exactly 8 with
    noise_k 4) makes the clip U even when the whole interval lies under the H bound."""
    for cfg, noise in ((CFG, 2.0), (GateConfig(noise_k=4.0), 2.0)):
        gate = gate_from_parallax(_mag(5.0, 4.0, 6.0, noise), cfg)
        assert gate.decision == "U" and "noise floor" in gate.evidence["why_u"]
    # just under half the F threshold: H
    assert gate_from_parallax(_mag(5.0, 4.0, 6.0, 1.75), GateConfig(noise_k=4.0)).decision == "H"


def test_f_needs_the_lower_bound_above_the_f_threshold():
    """F needs the lower confidence bound >= 16: a value of 16.5 whose interval reaches 15 is
    U; a lower bound of exactly 16 is F."""
    gate = gate_from_parallax(_mag(16.5, 15.0, 18.0, 0.2), CFG)
    assert gate.decision == "U" and "not clear of the band" in gate.evidence["why_u"]
    assert gate_from_parallax(_mag(17.0, 16.0, 18.0, 0.2), CFG).decision == "F"


def test_fraction_statistics_take_f_at_the_high_bound():
    """The fraction statistics: H if s <= low, F if s >= high (both inclusive)."""
    cfg = GateConfig(statistic="parallax_fraction", parallax_low=0.25, parallax_high=0.5)
    r_h = torch.tensor([0.0] * 5 + [8.0] * 5).repeat(4)  # half the F-inliers off H: 0.5
    gate = gate_from_parallax(_stats(r_h, torch.zeros(40)), cfg)
    assert gate.statistic == 0.5 and gate.decision == "F"
    r_h = torch.tensor([0.0] * 3 + [8.0]).repeat(10)  # a quarter: 0.25
    assert gate_from_parallax(_stats(r_h, torch.zeros(40)), cfg).decision == "H"


def test_u_resolved_follows_the_median_gric_delta():
    """The clip's U is resolved by GRIC on the host: F when the median gric_delta > 0."""
    for gric, want in ((0.5, "F"), (-0.5, "H")):
        gate = gate_from_parallax(_mag(10.0, 2.0, 60.0, 0.2, gric=gric), CFG)
        assert gate.decision == "U" and gate.evidence["u_resolved"] == want


def test_invalid_rows_are_not_counted_or_reported():
    """valid_pairs counts the valid rows only; an invalid row's statistic is reported None."""
    gate = gate_from_parallax(_mag(1.0, 0.5, 1.5, 0.2, valid=[True, False, True]), CFG)
    ev = gate.evidence
    assert ev["valid_pairs"] == 2 and ev["pair_statistic"] == [1.0, None, 1.0]
    assert ev["f_inliers_per_pair"] == [200, 200] and gate.decision == "H"


# ---- select.py ---------------------------------------------------------------------------

def _tiered(per_tier, support=(100, 180, 300), evaluated=(10.0, 2.0, 60.0), n_gate=48):
    """Constructed statistics of 2 evaluated rows then the gate rows of an ``n_gate``-frame
    clip: per tier (value, lower, upper, gric_delta)."""
    from geocon_torch.io.pairs import gate_pair_tiers, parallax_gate_pairs

    gp = parallax_gate_pairs(n_gate).tolist()
    tiers = gate_pair_tiers(gp)
    rows = [tuple(evaluated) + (-0.5,)] * 2 + [per_tier[t] for t in tiers]
    col = lambda i: torch.tensor([r[i] for r in rows], dtype=torch.float64)  # noqa: E731
    n = len(rows)
    stats = {"parallax_magnitude": col(0), "parallax_magnitude_lo": col(1),
             "parallax_magnitude_hi": col(2), "gric_delta": col(3),
             "noise_ref_px": torch.full((n,), 0.3, dtype=torch.float64),
             "num_f_inliers": torch.tensor([400] * 2 + [support[t] for t in tiers]),
             "valid": torch.ones(n, dtype=torch.bool)}
    return stats, gp, tiers


def test_a_wide_f_is_kept_even_when_a_narrower_tier_is_f_too():
    """The widest tier deciding F decides: its statistic, pairs and evidence, not a narrower
    tier's (the narrower-F rule only replaces a wide H / U)."""
    from geocon_torch.gate.select import GateRows, decide_gates

    wide, narrow = (40.0, 20.0, 90.0, 0.3), (90.0, 50.0, 250.0, 0.9)
    stats, gp, tiers = _tiered((wide, narrow, narrow))
    rows = GateRows([0, 1], list(range(2, 2 + len(gp))), gp)
    gate = decide_gates(stats, [rows], GeoConConfig())[0][0]
    assert gate.decision == "F" and gate.statistic == 40.0
    assert gate.evidence["gate_pairs"] == [p for p, t in zip(gp, tiers) if t == 0]
    assert "wider_tier" not in gate.evidence and gate.evidence["gric_delta"] == 0.3


def test_gric_delta_evidence_is_the_tier_the_gate_read():
    """When a narrower tier's F overrules the wide H, the clip's gric_delta evidence is the
    median over the rows the decision read (the halves), not over the wide pairs."""
    from geocon_torch.gate.select import GateRows, decide_gates

    h, f = (0.8, 0.6, 1.4, -0.5), (90.0, 50.0, 250.0, 0.7)
    stats, gp, tiers = _tiered((h, f, f))
    rows = GateRows([0, 1], list(range(2, 2 + len(gp))), gp)
    gate = decide_gates(stats, [rows], GeoConConfig())[0][0]
    assert gate.decision == "F" and gate.evidence["gric_delta"] == 0.7
    assert gate.evidence["wider_tier"]["decision"] == "H"


def test_support_margin_is_median_ir_f_minus_median_ir_h():
    """decide_gates' second value: the median IR_F - the median IR_H over each model's valid
    support rows (0.0 when a model has none)."""
    from geocon_torch.gate.select import GateRows, decide_gates

    stats, gp, _ = _tiered(((0.8, 0.6, 1.4, -0.5),) * 3)
    ir_h = torch.tensor([0.5, 0.6, 0.9] + [0.0] * (len(gp) - 1), dtype=torch.float64)
    ir_f = torch.tensor([0.8, 0.7, 0.1] + [0.0] * (len(gp) - 1), dtype=torch.float64)
    ok = torch.ones(len(gp) + 2, dtype=torch.bool)
    f_ok = ok.clone()
    f_ok[2] = False  # IR_F of row 2 not valid: median of 0.8, 0.7 = 0.75
    rows = GateRows([0, 1], list(range(2, 2 + len(gp))), gp, support=[0, 1, 2])
    (_, margin), = decide_gates(stats, [rows], GeoConConfig(), support=(ir_h, ok, ir_f, f_ok))
    assert margin == pytest.approx(0.75 - 0.6)
    none_ok = torch.zeros_like(ok)
    (_, margin), = decide_gates(stats, [rows], GeoConConfig(),
                                support=(ir_h, ok, ir_f, none_ok))
    assert margin == 0.0


def test_a_preliminary_u_takes_the_gric_resolution(monkeypatch):
    """preliminary_regimes: a U gate becomes its evidence's u_resolved (here F), and the seed
    residuals are then F's normalised Sampson distances."""
    import geocon_torch.gate.select as sel
    from geocon_torch.geometry import fundamental_residuals
    from geocon_torch.geometry._synthetic import fundamental_pairs
    from geocon_torch.sections.fits import fit_both

    d = fundamental_pairs(2, 60, outlier_ratio=0.1, noise_px=0.3, seed=5, size=(480, 640))
    x1, x2 = d["x1"].float(), d["x2"].float()
    mask = torch.ones(2, 60, dtype=torch.bool)
    fits = fit_both(x1, x2, mask, torch.rand(2, 60, generator=torch.Generator().manual_seed(0)),
                    GeoConConfig())
    u_gate = GateDecision("parallax", 10.0, {}, "U", evidence={"u_resolved": "F"})
    monkeypatch.setattr(sel, "decide_gates", lambda *a, **k: [(u_gate, 0.0)])
    regimes, res = sel.preliminary_regimes([fits], [x1], [x2], [mask], [2], [None],
                                           GeoConConfig(), long_side_px=[640.0])
    assert regimes == ["F"]
    assert torch.equal(res[0], fundamental_residuals(fits[1], x1, x2, mask)[0])


# ---- view.py -----------------------------------------------------------------------------

def test_view_scale_is_x_then_y_when_the_axes_differ():
    """A 100 x 150 source scored at long side 64 (42 x 64 working px): the view reads the
    source at 150 px and maps view px to working px by (150 / 64, 100 / 42), x first."""
    from geocon_torch.config import load_config
    from geocon_torch.gate.view import gate_view_correspondences, view_long_side
    from geocon_torch.io import read_clip
    from geocon_torch.io.pairs import parallax_gate_pairs
    from geocon_torch.synth import render_scene

    x = render_scene("C3", num_frames=4, size=(100, 150), seed=0).frames
    clip = read_clip(x, long_side=64)
    cfg = load_config({"features": {"backend": "opencv-sift"}, "gate": {"method": "parallax"}})
    assert clip.size == (42, 64) and view_long_side(clip, cfg) == 150
    corr, info = gate_view_correspondences(clip, parallax_gate_pairs(4), cfg)
    assert info["source"] == "tensor" and info["long_side"] == 150
    assert info["scale_xy"] == [150 / 64, 100 / 42]
    m = corr.mask
    assert float(corr.x1[..., 0][m].max()) <= 149.5 and float(corr.x1[..., 1][m].max()) <= 99.5
