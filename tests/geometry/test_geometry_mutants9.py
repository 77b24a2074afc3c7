"""Round-9 mutation tests of the batched robust estimators (geometry/ransac.py) and their
solvers / sampling / normalisation helpers: pre-verification points, the lookahead and the
per-round stop test, degenerate and minimal inputs, local optimisation and the final refit,
the returned fields. Closed-form numbers on constructed inputs; seeded, fast."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch.geometry import (fundamental_7pt, hartley_normalize, homography_dlt,
                                   ransac_fundamental, ransac_homography)
from geocon_torch.geometry import ransac as R
from geocon_torch.geometry._synthetic import fundamental_pairs, homography_pairs

F64 = torch.float64
CPU = torch.device("cpu")


def _cfg(**kw):
    base = dict(threshold=2.0, scoring="msac", confidence=0.999, max_iterations=2000,
                batch_size=32, local_optimization=True, lo_iterations=6, min_inliers=4)
    base.update(kw)
    return R._Settings(**base)


def _h_problem(residual="symmetric"):
    rfn = R._h_residual_sq(residual)
    return R._Problem("H", 4, rfn, lambda M, ctx: (rfn(M, ctx), None))


def _collinear_pair(n=60):
    """One pair whose image-1 points all lie on a line: every 4-point sample is degenerate."""
    t = torch.linspace(0, 500, n, dtype=F64)
    x1 = torch.stack([t, 0.5 * t + 3], -1)[None]
    g = torch.Generator().manual_seed(0)
    x2 = torch.rand(1, n, 2, generator=g, dtype=F64) * 500
    return x1, x2


# --- pre-verification and LO point subsets ------------------------------------------------

def test_preverification_points_are_32_columns_all_points_up_to_32():
    """A pair with <= 32 valid points is pre-verified on all of them, each once, in order (the
    rest of the 32 columns masked); one with more on 32 draws with replacement."""
    n_valid = torch.tensor([20, 32, 33, 500])
    width = 512
    pos, sel = R._subset(None, 0, n_valid, R._PREVERIFY_POINTS, R._PREVERIFY_POINTS, width,
                         fixed=True, base=torch.tensor([11, 12, 13, 14]))
    assert pos.shape == sel.shape == (4, 32)
    assert sel.sum(1).tolist() == [20, 32, 32, 32]
    assert pos[0, :20].tolist() == list(range(20)) and not sel[0, 20:].any()
    assert pos[1].tolist() == list(range(32))  # exactly 32: all of them, not a draw
    assert int(pos[2].max()) < 33 and int(pos[3].max()) < 500
    assert len(set(pos[3].tolist())) < 32 or pos[3].tolist() != list(range(32))  # drawn
    # the rows of a round always get 32 columns (their costs are plain sums over a width
    # that does not depend on the other pairs), even when every pair has fewer points
    d = homography_pairs(2, 20, outlier_ratio=0.0, seed=1)
    mask = torch.ones(2, 20, dtype=torch.bool)
    mask[0, 10:] = False
    batch = R._prepare(_h_problem(), d["x1"], d["x2"], mask, None, 4)
    sub = R._preverify_points(batch.fast, torch.tensor([3, 4]), batch.n_valid)
    assert sub.x1n.shape == (2, 32, 2) and sub.mask.sum(1).tolist() == [10, 20]


def test_lo_points_all_up_to_512_valid_else_256_drawn():
    """In-loop LO uses all the points of a pair with <= 512 valid ones (400 and exactly 512
    here) and 256 random ones of a pair with more (1000), in a batch wider than 512."""
    sizes = (400, 512, 1000)
    W = 1024
    x1 = torch.zeros(3, W, 2, dtype=F64)
    x2 = torch.zeros(3, W, 2, dtype=F64)
    mask = torch.zeros(3, W, dtype=torch.bool)
    for k, n in enumerate(sizes):
        d = homography_pairs(1, n, outlier_ratio=0.2, seed=k)
        x1[k, :n], x2[k, :n], mask[k, :n] = d["x1"][0], d["x2"][0], True
    prob = _h_problem()
    batch = R._prepare(prob, x1, x2, mask, None, 4)
    lo = R._lo_points(prob, batch, R.pair_keys(0, 3, CPU))
    assert lo.mask.sum(1).tolist() == [400, 512, 256]
    assert lo.source[0, :400].tolist() == list(range(400))
    assert lo.source[1, :512].tolist() == list(range(512))


def test_preverify_cost_counts_each_sample_point_once_when_columns_are_masked():
    """A pair with 20 valid points: its 32 pre-verification columns hold the 20 points and 12
    masked ones (position 0 stands in for them). A hypothesis of sample (0, 1, 2, 3) has 4
    own points among the 20: its cost is the cost of all 20 scaled by 20 / 16."""
    d = homography_pairs(1, 20, outlier_ratio=0.5, noise_px=0.5, seed=3)
    cfg = _cfg()
    prob = _h_problem("forward")
    batch = R._prepare(prob, d["x1"], d["x2"], torch.ones(1, 20, dtype=torch.bool), None, 4)
    sub = R._preverify_points(batch.fast, torch.tensor([7]), batch.n_valid)
    assert int(sub.mask.sum()) == 20
    spos = torch.tensor([0, 5, 9, 13]).view(1, 1, 4)
    model, ok = R._solve_h(batch.fast.x1n[:, spos[0, 0]].unsqueeze(1),
                           batch.fast.x2n[:, spos[0, 0]].unsqueeze(1))
    model = model.float()
    raw = R._preverify_cost(prob, model, sub, cfg, None)
    fair = R._preverify_cost(prob, model, sub, cfg, spos, width=int(batch.fast.x1n.shape[1]))
    assert float(raw) > 0
    assert float(fair) == pytest.approx(float(raw) * 20 / 16, rel=1e-6)


def test_round_sizes_and_preverification_keep():
    """Rounds 0-3 draw batch_size samples and keep the best 2 after pre-verification; from
    round 4 on 2x, 4x, then 8x (the cap) of both."""
    cfg = _cfg(batch_size=32)
    got = [R._round_size(r, cfg) for r in range(9)]
    assert got == [(32, 2)] * 4 + [(64, 4), (128, 8), (256, 16), (256, 16), (256, 16)]


def test_give_up_count_of_a_pair_without_a_non_degenerate_sample():
    """A pair whose samples are all degenerate stops once 256 were drawn (batch_size 64:
    4 rounds = 256 exactly), or with the round that passes 256 (batch_size 3: rounds of
    3, 3, 3, 3, 6, 12, then 24 = the 8x cap: 270); it is invalid with cost n * t^2."""
    x1, x2 = _collinear_pair(60)
    for bs, want in ((64, 256), (3, 270), (32, 320)):
        fit = ransac_homography(x1, x2, batch_size=bs)
        assert fit.iterations.tolist() == [want], bs
        assert not fit.valid.any() and int(fit.num_inliers) == 0
        assert float(fit.cost) == pytest.approx(60 * 4.0)
    fit = ransac_homography(x1, x2, scoring="ransac")
    assert float(fit.cost) == 60.0  # the outlier count of an invalid pair: all of them


def test_draw_limit_is_ten_times_max_iterations():
    """A pair with no accepted sample draws at most 10 x max_iterations (whole rounds):
    max_iterations 5 -> limit 50 -> it stops after the second round of 32 (64 drawn)."""
    x1, x2 = _collinear_pair(60)
    fit = ransac_homography(x1, x2, max_iterations=5)
    assert fit.iterations.tolist() == [64]


def test_max_iterations_counts_accepted_samples_and_stops_at_the_first_round_reaching_it():
    """F samples are all accepted (no sample check): at 60 % outliers the adaptive bound is
    thousands of samples, so max_iterations stops the pair: 64 -> 2 rounds (64 drawn),
    100 -> 4 rounds (128), 1 -> the first round (32)."""
    d = fundamental_pairs(2, 200, outlier_ratio=0.6, noise_px=0.5, seed=5)
    for cap, want in ((64, 64), (100, 128), (1, 32)):
        fit = ransac_fundamental(d["x1"], d["x2"], threshold=1.0, residual="sampson",
                                 max_iterations=cap)
        assert fit.iterations.tolist() == [want, want], cap


# --- lookahead ----------------------------------------------------------------------------

def _search(P, found, iters, ninl, n_valid):
    batch_like = type("B", (), {})()
    batch_like.mask = torch.ones(P, 8, dtype=torch.bool)
    batch_like.full = type("C", (), {"x1n": torch.zeros(P, 8, 2, dtype=F64)})()
    batch_like.fittable = torch.ones(P, dtype=torch.bool)
    st = R._Search.start(batch_like)
    st.found[:] = torch.tensor(found)
    st.iters[:] = torch.tensor(iters)
    st.best_ninl[:] = torch.tensor(ninl)
    return st, torch.arange(P), torch.tensor(n_valid)


def test_lookahead_counts_the_rounds_still_needed():
    """From round 1 on, the rounds computed at once are those the pairs would still run with
    their current best model (at least 1, at most 8): a pair without a model stops at 256
    drawn (batch 64, 64 drawn: rounds ending at 128, 192 run, 256 is the stop: L = 3); a
    pair with a hopeless bound is capped at 8 rounds; a pair at w = 0.5 (bound 108 of H
    samples, 32 drawn, batch 32) needs rounds ending at 64 and 96 more: L = 3."""
    cfg = _cfg(batch_size=64)
    st, idx, nv = _search(1, [False], [64], [0], [400])
    assert R._lookahead(st, idx, nv, 1, 4, cfg) == 3
    st, idx, nv = _search(1, [True], [64], [5], [400])  # w = 1/80: bound ~ 10x max_iterations
    assert R._lookahead(st, idx, nv, 1, 4, cfg) == R._LOOKAHEAD == 8
    cfg = _cfg(batch_size=32)
    st, idx, nv = _search(1, [True], [32], [200], [400])
    assert R._required_iterations(st.best_ninl, nv, 4, 0.999, 20000).tolist() == [108]
    assert R._lookahead(st, idx, nv, 1, 4, cfg) == 3
    st, idx, nv = _search(2, [True, False], [32, 32], [200, 0], [400, 400])
    assert R._lookahead(st, idx, nv, 1, 4, cfg) == 5  # the slower pair sets it: 256 drawn


# --- settle: LO winners within 1.25x of the best ------------------------------------------

def test_settle_takes_the_optimised_winner_only_within_the_lo_margin():
    """Best cost 10 before the round: a raw winner of cost 12 (< 12.5) is promising, its
    optimised model (cost 5) is taken; one of 13 is not (the optimised 5 is discarded and the
    best stays 10); a winner of 8 improves either way (5 with LO)."""
    P = 3
    st, idx, nv = _search(P, [True] * P, [32] * P, [50] * P, [100] * P)
    st.best_cost[:] = 10.0
    st.active[:] = True
    models = torch.eye(3, dtype=F64).expand(P, 3, 3).clone()
    lo_models = 2 * models
    winners = (torch.tensor([12.0, 13.0, 8.0], dtype=F64), models,
               torch.tensor([60, 61, 62]))
    optimized = (lo_models, torch.full((P,), 5.0, dtype=F64), torch.tensor([70, 71, 72]))
    R._settle(st, idx, nv, 32, 4, _cfg(max_iterations=10 ** 6), winners, optimized,
              torch.full((P,), 32))
    assert st.best_cost.tolist() == [5.0, 10.0, 5.0]
    assert st.best_ninl.tolist() == [70, 50, 72]
    assert [float(m[0, 0]) for m in st.best_model] == [2.0, 1.0, 2.0]


def test_cpu_lo_runs_only_on_winners_within_the_margin(monkeypatch):
    """On the CPU only the round winners within 1.25x of their pair's best are optimised."""
    seen = []

    def fake(problem, batch, lo_ctx, base, rows, r_model, cfg):
        seen.append(rows.tolist())
        n = r_model.shape[0]
        return r_model, torch.ones(n, dtype=F64), torch.ones(n, dtype=torch.long)

    monkeypatch.setattr(R, "_optimize_winners", fake)
    rc = torch.tensor([12.0, 13.0, 8.0, 1.0], dtype=F64)
    models = torch.eye(3, dtype=F64).expand(4, 3, 3)
    best = torch.tensor([10.0, 10.0, 10.0, math.inf], dtype=F64)
    lm, lc, ln = R._optimize_promising(None, None, None, torch.arange(4), torch.arange(4),
                                       (rc, models, torch.zeros(4, dtype=torch.long)), best,
                                       _cfg())
    assert seen == [[0, 2, 3]]
    assert lc.tolist() == [1.0, math.inf, 1.0, 1.0]


# --- local optimisation and the final refit -----------------------------------------------

def _noisy_h_batch(n=200, seed=6, eps=0.01):
    d = homography_pairs(1, n, outlier_ratio=0.3, noise_px=0.8, seed=seed)
    prob = _h_problem()
    batch = R._prepare(prob, d["x1"], d["x2"], torch.ones(1, n, dtype=torch.bool), None, 4)
    # the true model in the normalised frame, slightly perturbed: refits lower its cost
    T1 = R._similarity_matrix(batch.c1, batch.s1)
    T2 = R._similarity_matrix(batch.c2, batch.s2)
    Hn = T2 @ d["model"] @ torch.linalg.inv(T1)
    Hn = Hn / Hn[:, 2:, 2:]
    Hn = Hn + eps * torch.tensor([[0.0, 1, 0], [0, 0, 1], [0, 0, 0]], dtype=F64)
    return prob, batch, Hn


def _cost_of(prob, ctx, model, thr2):
    rsq, _ = prob.lo_residual(model.unsqueeze(1), ctx)
    return R._cost(rsq, ctx, thr2, "msac")[0].squeeze(1), rsq.squeeze(1)


def test_final_refit_is_least_squares_on_the_inliers():
    """The final refit is one plain (unweighted) least-squares DLT on the inliers of the best
    model, kept since it lowers the cost."""
    prob, batch, Hn = _noisy_h_batch()
    cfg = _cfg()
    st = R._Search.start(batch)
    st.best_model, st.found = Hn.clone(), torch.tensor([True])
    c0, rsq = _cost_of(prob, batch.full, Hn, cfg.thr2)
    st.best_cost = c0.clone()
    w = ((rsq <= cfg.thr2) & batch.mask).to(F64)
    want = R._normalize_h_scale(R._homography_dlt_normalized(
        batch.full.x1n, batch.full.x2n, w, batch.full.mono1, batch.full.mono2))
    c1, _ = _cost_of(prob, batch.full, want, cfg.thr2)
    assert float(c1) < float(c0)  # the refit is kept
    R._final_refit(prob, batch, st, cfg)
    assert torch.equal(st.best_model, want)
    assert float(st.best_cost) == float(c1)


def test_irls_first_iteration_uses_squared_tukey_weights_with_a_3t_cutoff():
    """One robust IRLS iteration refits with weights (1 - r^2 / (3 t)^2)^2 (0 past 3 t)."""
    prob, batch, Hn = _noisy_h_batch(seed=7)
    thr2 = 4.0
    c0, rsq = _cost_of(prob, batch.full, Hn, thr2)
    w = (1 - rsq / (9 * thr2)).clamp_min(0).square() * batch.mask
    want = R._normalize_h_scale(R._homography_dlt_normalized(
        batch.full.x1n, batch.full.x2n, w, batch.full.mono1, batch.full.mono2))
    c1, _ = _cost_of(prob, batch.full, want, thr2)
    assert float(c1) < float(c0)
    got, cost, _, _ = R._local_optimization(prob, batch.full, Hn, thr2, "msac", 1)
    assert torch.equal(got, want) and float(cost) == float(c1)


def test_inner_samples_hold_about_four_minimal_sizes_of_at_least_8_points(monkeypatch):
    """LO inner samples: each of the 4 subsets keeps an inlier with probability
    4 max(m, 8) / n_inliers: ~32 of the inliers for H (m = 4) as for F."""
    prob, batch, Hn = _noisy_h_batch(n=400, seed=8, eps=0.0)
    thr2 = 4.0
    sizes = []
    real = R._refit
    monkeypatch.setattr(R, "_refit", lambda p, c, w: sizes.append(w.sum(-1)) or real(p, c, w))
    _, rsq = _cost_of(prob, batch.full, Hn, thr2)
    n_inl = int(((rsq <= thr2) & batch.mask).sum())
    assert n_inl > 200
    u = R.uniform_rows(R.pair_keys(3, 1, CPU), torch.zeros(1, dtype=torch.long), 4,
                       batch.full.x1n.shape[1])
    R._inner_samples(prob, batch.full, Hn[0:1], rsq, torch.tensor([1e9], dtype=F64), thr2,
                     "msac", u)
    got = sizes[0].flatten()
    assert got.shape == (4,) and 24 <= float(got.mean()) <= 40, got


# --- validity and minimal inputs ----------------------------------------------------------

def test_minimal_point_counts_give_valid_fits():
    """Exactly 4 points fit an H and exactly 8 an F (valid, all inliers); 7 points are too few
    for F (its min_inliers is at least 8), whatever min_inliers asks."""
    d = homography_pairs(1, 4, outlier_ratio=0.0, noise_px=0.0, seed=2)
    fit = ransac_homography(d["x1"], d["x2"])
    assert fit.valid.tolist() == [True] and fit.num_inliers.tolist() == [4]
    f = fundamental_pairs(1, 8, outlier_ratio=0.0, noise_px=0.0, seed=2)
    fit = ransac_fundamental(f["x1"], f["x2"], threshold=1.0, residual="sampson")
    assert fit.valid.tolist() == [True] and fit.num_inliers.tolist() == [8]
    fit = ransac_fundamental(f["x1"][:, :7], f["x2"][:, :7], threshold=1.0, residual="sampson",
                             min_inliers=0)
    assert fit.valid.tolist() == [False] and fit.iterations.tolist() == [0]


def test_points_that_coincide_in_one_image_are_not_fitted():
    """All image-2 points the same: no normalisation, so the pair is not fitted at all (no
    sample drawn), for H and F."""
    g = torch.Generator().manual_seed(1)
    x1 = torch.rand(1, 50, 2, generator=g, dtype=F64) * 400
    x2 = torch.full((1, 50, 2), 123.0, dtype=F64)
    for fn in (ransac_homography, ransac_fundamental):
        fit = fn(x1, x2)
        assert fit.valid.tolist() == [False] and fit.iterations.tolist() == [0]


def test_a_thin_but_not_collinear_inlier_set_is_valid():
    """Inliers in a 1000 x 20 px strip (covariance eigenvalue ratio ~4e-4, far above the 1e-6
    of a collinear set) give a valid H with every point an inlier."""
    g = torch.Generator().manual_seed(2)
    x1 = torch.rand(1, 120, 2, generator=g, dtype=F64) * torch.tensor([1000.0, 20.0],
                                                                      dtype=F64) + 50
    H = torch.tensor([[1.01, 0.02, 4.0], [-0.01, 0.99, 2.0], [1e-5, 0.0, 1.0]], dtype=F64)
    xh = torch.cat([x1, torch.ones_like(x1[..., :1])], -1) @ H.T
    x2 = xh[..., :2] / xh[..., 2:]
    fit = ransac_homography(x1, x2)
    assert fit.valid.tolist() == [True] and fit.num_inliers.tolist() == [120]
    assert R._spread(x1[None], torch.ones(1, 120, dtype=torch.bool)).item() < 1e-3


# --- PROSAC order and pools ---------------------------------------------------------------

def test_prosac_order_is_by_descending_score_then_index():
    mask = torch.tensor([[True, True, True, True, False, True]])
    scores = torch.tensor([[0.1, 0.9, float("nan"), 0.5, 5.0, 0.9]], dtype=F64)
    order = R._valid_first_order(mask, scores, mask.sum(-1))
    assert order.tolist() == [[1, 5, 3, 0, 2, 4]]


def test_prosac_first_round_draws_from_the_top_quarter_or_3m_points():
    """Round 0 with scores draws each H sample among the top max(ceil(n / 4), 12) points:
    25 of 100, 12 of 40; round 2 among all."""
    d = homography_pairs(2, 100, outlier_ratio=0.0, noise_px=0.5, seed=1)
    prob = _h_problem()
    mask = torch.ones(2, 100, dtype=torch.bool)
    mask[1, 40:] = False
    batch = R._prepare(prob, d["x1"], d["x2"], mask, None, 4)
    keys = R.pair_keys(0, 2, CPU)
    _, _, spos = R._sample_hypotheses(prob, batch.fast, keys, torch.zeros(2, dtype=torch.long),
                                      batch.n_valid, True, 64)
    assert int(spos[0].max()) == 24 and int(spos[1].max()) == 11
    _, _, spos = R._sample_hypotheses(prob, batch.fast, keys, torch.full((2,), 2),
                                      batch.n_valid, True, 64)
    assert int(spos[0].max()) > 80 and int(spos[1].max()) == 39


# --- degenerate minimal samples -----------------------------------------------------------

def test_seven_point_sample_with_a_point_repeated_in_one_image_is_rejected():
    f = fundamental_pairs(1, 7, outlier_ratio=0.0, noise_px=0.0, seed=4)
    x1, x2 = f["x1"].clone(), f["x2"].clone()
    _, ok = R._solve_f(x1[:, None], x2[:, None])
    assert bool(ok.any())
    x1[0, 1] = x1[0, 0]  # image 1 only
    _, ok = R._solve_f(x1[:, None], x2[:, None])
    assert not ok.any()
    y2 = f["x2"].clone()
    y2[0, 3] = y2[0, 6]  # image 2 only
    _, ok = R._solve_f(f["x1"][:, None], y2[:, None])
    assert not ok.any()


def test_collinear_triple_test_and_its_tolerance():
    """Three points are collinear when the sine of their angle is <= 1e-3; a repeated point is
    collinear with any other."""
    from geocon_torch.geometry.sampling import has_collinear_triple

    def quad(eps):
        return torch.tensor([[0.0, 0.0], [100.0, 0.0], [200.0, 200.0 * eps], [0.0, 50.0]],
                            dtype=F64)
    x = torch.stack([quad(5e-3), quad(5e-4), quad(0.3)])
    dup = quad(0.3)
    dup[2] = dup[1]
    same = torch.full((4, 2), 7.0, dtype=F64)  # all four points coincide
    got = has_collinear_triple(torch.cat([x, dup[None], same[None]]))
    assert got.tolist() == [False, True, False, True, True]


# --- solvers and normalisation -------------------------------------------------------------

def test_cubic_with_a_double_root_gives_all_three_roots():
    """t^3 - 3 t + 2 = (t - 1)^2 (t + 2): discriminant exactly 0, three real roots."""
    from geocon_torch.geometry.fundamental import _real_cubic_roots

    one = torch.ones(1, dtype=F64)
    roots, valid = _real_cubic_roots(one, 0 * one, -3 * one, 2 * one)
    assert valid.tolist() == [[True, True, True]]
    assert torch.allclose(roots.sort(-1).values, torch.tensor([[-2.0, 1.0, 1.0]], dtype=F64),
                          atol=1e-7)


def test_hartley_normalizes_a_tiny_cloud_far_from_the_origin():
    """50 points within 0.1 px around (1000, 800): still normalised (mean distance sqrt 2)."""
    g = torch.Generator().manual_seed(3)
    x = torch.tensor([1000.0, 800.0], dtype=F64) + torch.rand(1, 50, 2, generator=g,
                                                              dtype=F64) * 0.1
    xn, T = hartley_normalize(x)
    assert float(xn[0].norm(dim=-1).mean()) == pytest.approx(math.sqrt(2), rel=1e-9)
    assert float(T[0, 0, 0]) > 10


def test_negative_weights_count_as_zero_in_the_solvers():
    d = homography_pairs(1, 30, outlier_ratio=0.3, noise_px=0.5, seed=9)
    w0 = d["inliers"].to(F64)
    wneg = torch.where(d["inliers"], w0, torch.full_like(w0, -2.0))
    assert torch.equal(homography_dlt(d["x1"], d["x2"], wneg),
                       homography_dlt(d["x1"], d["x2"], w0))


def test_homography_with_a_zero_h22_comes_back_with_unit_norm():
    """A homography that sends the image origin to infinity has H[2, 2] = 0: the fit is then
    scaled to unit Frobenius norm (not divided by a rounding-level H[2, 2])."""
    H = torch.tensor([[1.0, 0.1, 5.0], [0.0, 1.2, -3.0], [1e-3, 2e-3, 0.0]], dtype=F64)
    g = torch.Generator().manual_seed(4)
    x1 = torch.rand(1, 40, 2, generator=g, dtype=F64) * 400 + 100
    xh = torch.cat([x1, torch.ones_like(x1[..., :1])], -1) @ H.T
    x2 = xh[..., :2] / xh[..., 2:]
    got = homography_dlt(x1, x2)[0]
    assert float(got.norm()) == pytest.approx(1.0, abs=1e-12)
    ref = H / H.norm()
    assert min(float((got - ref).abs().max()), float((got + ref).abs().max())) < 1e-8


def test_seven_point_roots_of_a_pair_match_the_truth_exactly_once():
    """fundamental_7pt on exact points: every valid root satisfies all 7 constraints and the
    number of real roots is 1 or 3 (never 2: a single real root fills one slot)."""
    d = fundamental_pairs(20, 7, outlier_ratio=0.0, noise_px=0.0, seed=12)
    F, valid = fundamental_7pt(d["x1"], d["x2"])
    n = valid.sum(1)
    assert ((n == 1) | (n == 3)).all() and bool((n == 1).any())
