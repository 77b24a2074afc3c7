"""Mutation-testing gaps (s21 mut6_measures): numbers of the headline score, the background
IR / GE summaries and AdaDFRC-W2 that no other default test pinned. Closed-form inputs, fast."""
import math

import pytest

from geocon_torch.measures.headline import FEW_VALID_PAIRS, headline_score, headline_terms


def _row(**blocks):
    base = {"status": "ok", "working_size": [256, 512]}
    base.update(blocks)
    return base


# ---------------------------------------------------------------- headline score


def test_headline_scale_is_the_papers_3_5_px_of_a_1024_px_frame():
    """Literal numbers (not the module's constants): GE 0.35 px at a 512-px long side is 0.7 px
    at 1024, and 0.7 / 3.5 = 0.2; D = 4.6225 px^2 -> 2.15 px -> 4.3 px at 1024 -> 2.8 px above
    the 1.5-px rigid floor -> 0.8; D = 0.49 px^2 -> 1.4 px at 1024, under the floor -> 0."""
    terms = headline_terms(_row(background={"status": "ok", "ge_px": 0.35},
                                foreground={"status": "ok",
                                            "objects": [{"adadfrc_mean": 4.6225}]}))
    assert terms["ge"] == pytest.approx(math.exp(-0.2), rel=1e-12)
    assert terms["rigidity"] == pytest.approx(math.exp(-0.8), rel=1e-12)
    terms = headline_terms(_row(background={"status": "ok", "ge_px": 0.35},
                                foreground={"status": "ok",
                                            "objects": [{"adadfrc_mean": 0.49}]}))
    assert terms["rigidity"] == 1.0


def test_headline_terms_are_clamped_to_the_unit_interval():
    """A coverage above 1 counts as 1, an inlier rate below 0 as 0 (score 0), a negative GE as
    0 px (term 1), a largest AdaDFRC below 0 as 0 px^2 (term 1): no term leaves [0, 1]."""
    row = _row(epipolar={"status": "ok", "feature_match_coverage": 1.5,
                         "epipolar_inlier_rate": 0.81},
               background={"status": "ok", "ge_px": -1.0},
               foreground={"status": "ok", "objects": [{"adadfrc_mean": -4.0}]})
    terms = headline_terms(row)
    assert terms == {"match": 1.0, "inliers": 0.81, "ge": 1.0, "rigidity": 1.0}
    # weights match 1, inliers 2, ge 1, rigidity 0.25: 0.81^(2 / 4.25)
    assert headline_score(row) == pytest.approx(0.81 ** (2 / 4.25), rel=1e-12)
    row["epipolar"]["epipolar_inlier_rate"] = -0.2
    assert headline_terms(row)["inliers"] == 0.0
    assert headline_score(row) == 0.0


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf"), True, "0.5", None])
def test_headline_non_finite_bool_or_text_values_are_no_term(bad):
    """A NaN / inf / bool / str number is no evidence: it makes no term (never NaN, never a
    0 from exp(-inf), never True read as 1), and a clip with no other term has no score."""
    row = _row(epipolar={"status": "ok", "feature_match_coverage": bad,
                         "epipolar_inlier_rate": bad},
               background={"status": "ok", "ge_px": bad},
               foreground={"status": "ok", "objects": [{"adadfrc_mean": bad}]})
    assert headline_terms(row) == {}
    assert headline_score(row) is None
    row["foreground"]["objects"].append({"adadfrc_mean": 4.6225})
    assert headline_terms(row) == {}  # rigidity alone is no term
    row["background"]["ge_px"] = 0.35
    assert headline_terms(row) == {"ge": pytest.approx(math.exp(-0.2), rel=1e-12),
                                   "rigidity": pytest.approx(math.exp(-0.8), rel=1e-12)}


def test_headline_reads_only_an_ok_foreground_block():
    """A foreground block that is not ok (its objects, if listed, were not all scored) gives
    no rigidity term."""
    for status in ("not_applicable", "error", None):
        row = _row(background={"status": "ok", "ge_px": 0.35},
                   foreground={"status": status, "objects": [{"adadfrc_mean": 9.0}]})
        assert set(headline_terms(row)) == {"ge"}
        assert headline_score(row) == pytest.approx(math.exp(-0.2), rel=1e-12)


@pytest.mark.parametrize("pairs", [0, None, float("nan")])
def test_few_valid_pairs_needs_pairs_that_were_tried(pairs):
    """GE = tau_H stands in only where the background block was fitted on some pairs: with no
    pair tried (0 / missing / NaN) the block is no evidence, even with that reason."""
    bg = {"status": "not_applicable", "ge_px": None,
          "reason": f"{FEW_VALID_PAIRS}: 0 of 0 (pair, scale) entries valid"}
    if pairs is not None:
        bg["pairs"] = pairs
    assert "ge" not in headline_terms(_row(background=bg))
    bg["pairs"] = 3
    assert headline_terms(_row(background=bg))["ge"] == pytest.approx(math.exp(-4.0 / 3.5))


def test_working_size_nested_under_extra_is_read():
    """A result dict whose working size sits under ``extra`` (the ClipResult field before
    to_dict flattens it) normalises with it (long side 512: x2 to 1024 px)."""
    row = {"status": "ok", "extra": {"working_size": [512, 256]},
           "background": {"status": "ok", "ge_px": 0.35}}
    assert headline_terms(row) == {"ge": pytest.approx(math.exp(-0.2), rel=1e-12)}
    assert headline_score({"status": "ok", "background": {"status": "ok", "ge_px": 0.35}}) is None


# ---------------------------------------------------------------- background (eqs. 7-13)

import torch  # noqa: E402

from geocon_torch.measures.background import (  # noqa: E402
    fundamental_pair_metrics, homography_pair_metrics, pair_metrics)
from geocon_torch.types import Fit  # noqa: E402


def _fit(kind, p=1):
    z = torch.zeros(p, 1)
    model = torch.eye(3, dtype=torch.float64).expand(p, 3, 3).clone()
    return Fit(kind, model, z.bool(), z, torch.ones(p, dtype=torch.bool), z[:, 0].long(),
               z[:, 0].long(), z[:, 0])


def test_background_defaults_are_the_papers_thresholds():
    """Called without thresholds, the functional API uses the paper's tau_H = 2 px,
    tau_F = 0.1 and min_inliers = 30 (inclusive)."""
    x = torch.zeros(1, 40, 2, dtype=torch.float64)
    r = torch.full((1, 40), 2.0, dtype=torch.float64)
    r[0, 30:] = 2.4  # outliers at tau_H = 2, inliers at any looser tau
    m = homography_pair_metrics(_fit("H"), x, x, None, residuals=r)
    assert m.num_inliers.tolist() == [30] and m.valid.tolist() == [True]
    assert m.ir.tolist() == [0.75] and m.ge.tolist() == [2.0]
    rn = torch.full((1, 40), 0.1, dtype=torch.float64)
    rn[0, 30:] = 0.15
    rpx = torch.linspace(1.0, 4.0, 40, dtype=torch.float64).view(1, 40)
    m = fundamental_pair_metrics(_fit("F"), x, x, None, residuals=(rn, rpx))
    assert m.num_inliers.tolist() == [30] and m.ir.tolist() == [0.75]
    assert m.ge.item() == pytest.approx(float(rpx[0, :30].median()) / 2
                                        + float(rpx[0, :30].sort().values[15]) / 2)
    # min_inliers = 30 by default: 30 inliers valid, 29 not
    res = torch.zeros(2, 40, dtype=torch.float64)
    res[1, 29:] = 9.0
    m = pair_metrics(res, torch.ones(2, 40, dtype=torch.bool), 1.0)
    assert m.num_inliers.tolist() == [40, 29] and m.valid.tolist() == [True, False]


# ---------------------------------------------------------------- AdaDFRC-W2 (eqs. 14-15)

from geocon_torch.measures.foreground import adadfrc  # noqa: E402


def _nonrigid_flow(h=24, w=24, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 2, h, w, generator=g, dtype=torch.float64)


def test_min_pixels_is_inclusive_and_defaults_to_64():
    """An 8 x 8 object (64 px) is valid by default, the same box less one pixel (63) is not."""
    m = torch.zeros(1, 2, 24, 24, dtype=torch.bool)
    m[0, :, 4:12, 6:14] = True
    m[0, 1, 4, 6] = False
    flow = _nonrigid_flow()
    d, valid = adadfrc(flow, m)
    assert m.sum((-1, -2)).tolist() == [[64, 63]]
    assert valid.tolist() == [[True, False]] and d[0, 0] > 0 and d[0, 1] == 0
    d, valid = adadfrc(flow, m, min_pixels=63)
    assert valid.tolist() == [[True, True]]


def test_reliability_outside_0_1_is_clamped():
    """Reliability above 1 weighs as 1 and below 0 as 0: the score equals the one with the
    clamped map (non-rigid flow, so a different weighting would change the fit)."""
    m = torch.zeros(1, 1, 24, 24, dtype=torch.bool)
    m[0, 0, 2:22, 2:22] = True
    flow = _nonrigid_flow(seed=1)
    rel = torch.ones(1, 24, 24, dtype=torch.float64)
    rel[0, 2:12, 2:12] = 7.5
    rel[0, 14:20, 8:22] = -3.0
    d_raw, v_raw = adadfrc(flow, m, rel)
    d_ref, v_ref = adadfrc(flow, m, rel.clamp(0, 1))
    alt = rel.clamp(0, 1)
    alt[0, 2:12, 2:12] = 0.2  # an in-range reweighting does change the score
    d_alt, _ = adadfrc(flow, m, alt)
    assert v_raw.tolist() == v_ref.tolist() == [[True]]
    assert d_raw[0, 0].item() == pytest.approx(d_ref[0, 0].item(), rel=1e-12)
    assert abs(d_alt[0, 0].item() - d_ref[0, 0].item()) > 1e-3 * d_ref[0, 0].item()


def test_summary_default_percentile_is_p90():
    """``adadfrc_summary`` without a percentile reports AdaP90 (numpy-linear 0.9 quantile of
    the valid pairs): D = 0, 1, ..., 10 -> 9.0 (0.95 would give 9.5)."""
    from geocon_torch.measures.foreground import adadfrc_summary
    d = torch.arange(12, dtype=torch.float64).view(12, 1)
    valid = torch.ones(12, 1, dtype=torch.bool)
    valid[11] = False  # 11 is not a valid pair
    s = adadfrc_summary(d, valid)
    assert s["adap90"].tolist() == [pytest.approx(9.0, abs=1e-12)]
    assert s["adadfrc_mean"].tolist() == [5.0] and s["frames"].tolist() == [11]


def test_sinkhorn_epsilon_schedule_is_the_documented_one():
    """``sinkhorn_w2``'s annealing as documented: epsilon decays geometrically from the largest
    cost to ``eps_final`` x the mean cost over the first 3/4 of the iterations (here 6 of 8) and
    the plan is read at the final epsilon; a few-iteration run (far from converged, so every
    step shows) equals this schedule written out."""
    from geocon_torch.measures.foreground import sinkhorn_w2
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(1, 16, 2, generator=gen, dtype=torch.float64) * 5
    y = x + torch.randn(1, 16, 2, generator=gen, dtype=torch.float64) * 0.5
    wts = torch.rand(1, 16, generator=gen, dtype=torch.float64) + 0.1
    a = wts[0] / wts.sum()
    cost = ((x[0, :, None] - y[0, None]) ** 2).sum(-1)
    eps_end = 1e-5 * float((a[:, None] * a[None] * cost).sum())
    eps_start = float(cost.max())
    f, g = torch.zeros(16, dtype=torch.float64), torch.zeros(16, dtype=torch.float64)
    for it in range(8):
        frac = min(it / 6, 1.0)
        eps = math.exp(math.log(eps_start) * (1 - frac) + math.log(eps_end) * frac)
        f = -eps * torch.logsumexp((g[None] - cost) / eps + a.log()[None], dim=1)
        g = -eps * torch.logsumexp((f[:, None] - cost) / eps + a.log()[:, None], dim=0)
    plan = ((f[:, None] + g[None] - cost) / eps_end + a.log()[:, None] + a.log()[None]).exp()
    want = float((plan * cost).sum())
    got = sinkhorn_w2(x, y, wts, iterations=8)
    assert got.tolist() == [pytest.approx(want, rel=1e-9)]
