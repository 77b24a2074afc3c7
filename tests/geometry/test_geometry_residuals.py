"""Residuals, Hartley normalisation and the affine fit: closed forms, OpenCV, gradcheck."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from geocon_torch.errors import ShapeError
from geocon_torch.geometry import (epipolar_line_distance, epipolar_max_distance,
                                   hartley_normalize, sampson_distance,
                                   sampson_distance_normalized, symmetric_transfer_error,
                                   transfer_error, weighted_affine_lstsq)
from geocon_torch.geometry._synthetic import fundamental_pairs, homography_pairs

F_TX = [[0.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]  # [t]_x for t = (1, 0, 0)


def _t(a, dtype=torch.float64, device="cpu"):
    return torch.as_tensor(np.asarray(a), dtype=dtype, device=device)


def test_transfer_closed_form(device, dtype):
    # translation by (3, 4): both directions are 5 px off when x2 = x1
    H = _t([[[1, 0, 3], [0, 1, 4], [0, 0, 1]]], dtype, device)
    x = torch.rand(1, 6, 2, dtype=dtype, device=device) * 100
    assert torch.allclose(symmetric_transfer_error(H, x, x), torch.full((1, 6), 5.0, dtype=dtype,
                                                                          device=device))
    assert torch.allclose(transfer_error(H, x, x), torch.full_like(x[..., 0], 5.0))
    # scaling by 2: x1 = (1, 0), x2 = (2, 1): forward 1 px, backward |(1, .5) - (1, 0)| = .5 px
    S = _t([[[2, 0, 0], [0, 2, 0], [0, 0, 1]]], dtype, device)
    x1, x2 = _t([[[1, 0]]], dtype, device), _t([[[2, 1]]], dtype, device)
    assert symmetric_transfer_error(S, x1, x2).item() == pytest.approx(0.75, abs=1e-6)
    assert transfer_error(S, x1, x2).item() == pytest.approx(1.0, abs=1e-6)


def test_epipolar_closed_form(device, dtype):
    # F = [t]_x with t = x axis: x2^T F x1 = y1 - y2, |Fx1|_12 = |F^T x2|_12 = 1
    F = _t([F_TX], dtype, device) * 3.7  # any scale
    x1 = _t([[[10, 20], [5, -3], [0, 0]]], dtype, device)
    x2 = _t([[[40, 23], [1, -3], [7, 1.5]]], dtype, device)
    dy = (x1[..., 1] - x2[..., 1]).abs()
    assert torch.allclose(sampson_distance(F, x1, x2), dy / np.sqrt(2), atol=1e-5)
    assert torch.allclose(sampson_distance(F, x1, x2, squared=True), dy ** 2 / 2, atol=1e-4)
    assert torch.allclose(epipolar_line_distance(F, x1, x2), dy, atol=1e-5)
    assert torch.allclose(epipolar_max_distance(F, x1, x2), dy, atol=1e-5)


def _scene(kind, P=2, N=60, seed=0):
    gen = homography_pairs if kind == "H" else fundamental_pairs
    return gen(P, N, outlier_ratio=0.2, noise_px=2.0, seed=seed)


def test_transfer_matches_opencv():
    d = _scene("H")
    H, x1, x2 = d["model"], d["x1"], d["x2"]
    for p in range(2):
        Hp = H[p].numpy()
        fwd = cv2.perspectiveTransform(x1[p].numpy()[None], Hp)[0]
        bwd = cv2.perspectiveTransform(x2[p].numpy()[None], np.linalg.inv(Hp))[0]
        e_f = np.linalg.norm(fwd - x2[p].numpy(), axis=1)
        e_b = np.linalg.norm(bwd - x1[p].numpy(), axis=1)
        np.testing.assert_allclose(transfer_error(H, x1, x2)[p].numpy(), e_f, rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(symmetric_transfer_error(H, x1, x2)[p].numpy(),
                                   0.5 * (e_f + e_b), rtol=1e-9, atol=1e-9)


def test_epipolar_matches_opencv():
    d = _scene("F")
    F, x1, x2 = d["model"], d["x1"], d["x2"]
    for p in range(2):
        Fp = F[p].numpy()
        l2 = cv2.computeCorrespondEpilines(x1[p].numpy()[:, None], 1, Fp)[:, 0]  # lines in img 2
        l1 = cv2.computeCorrespondEpilines(x2[p].numpy()[:, None], 2, Fp)[:, 0]  # lines in img 1
        h1 = np.c_[x1[p].numpy(), np.ones(60)]
        h2 = np.c_[x2[p].numpy(), np.ones(60)]
        d2 = np.abs((l2 * h2).sum(1))
        d1 = np.abs((l1 * h1).sum(1))
        np.testing.assert_allclose(epipolar_line_distance(F, x1, x2)[p].numpy(), d2, rtol=1e-6,
                                   atol=1e-6)
        np.testing.assert_allclose(epipolar_max_distance(F, x1, x2)[p].numpy(), np.maximum(d1, d2),
                                   rtol=1e-6, atol=1e-6)
        # Sampson: |x2^T F x1| / sqrt(|l2_ab|^2 + |l1_ab|^2) with the raw (unnormalised) lines
        a = h1 @ Fp.T
        b = h2 @ Fp
        ref = np.abs((h2 * a).sum(1)) / np.sqrt(a[:, 0] ** 2 + a[:, 1] ** 2 + b[:, 0] ** 2
                                                + b[:, 1] ** 2)
        np.testing.assert_allclose(sampson_distance(F, x1, x2)[p].numpy(), ref, rtol=1e-9)


def test_hartley_normalize_masked(device, dtype):
    x = torch.rand(3, 40, 2, dtype=dtype, device=device) * 500
    mask = torch.rand(3, 40, device=device) > 0.3
    mask[2] = False  # all padding
    xn, T = hartley_normalize(x, mask)
    for p in range(2):
        v = xn[p][mask[p]]
        assert torch.allclose(v.mean(0), torch.zeros(2, dtype=dtype, device=device), atol=1e-4)
        assert v.norm(dim=-1).mean().item() == pytest.approx(np.sqrt(2), rel=1e-4)
        # x_norm = T x (homogeneous)
        xh = torch.cat([x[p], torch.ones_like(x[p][:, :1])], -1) @ T[p].T
        assert torch.allclose(xh[mask[p], :2], v, atol=1e-4)
    assert torch.isfinite(xn).all() and torch.isfinite(T).all()
    assert (xn[~mask] == 0).all()
    # padded values do not influence T
    x2 = torch.where(mask.unsqueeze(-1), x, torch.full_like(x, 1e4))
    assert torch.allclose(hartley_normalize(x2, mask)[1], T)


def test_sampson_normalized_definition(dtype):
    d = _scene("F", seed=3)
    F, x1, x2 = d["model"].to(dtype), d["x1"].to(dtype), d["x2"].to(dtype)
    mask = torch.ones(x1.shape[:2], dtype=torch.bool)
    mask[:, 50:] = False
    x1n, T1 = hartley_normalize(x1, mask)
    x2n, T2 = hartley_normalize(x2, mask)
    Fn = torch.linalg.inv(T2).transpose(-1, -2) @ F @ torch.linalg.inv(T1)
    ref = sampson_distance(Fn, x1n, x2n)
    got = sampson_distance_normalized(F, x1, x2, mask)
    tol = 1e-4 if dtype == torch.float32 else 1e-9
    assert torch.allclose(got[mask], ref[mask], rtol=tol, atol=tol)
    # unitless: scaling the images (and F accordingly) leaves it unchanged
    S = torch.diag(torch.tensor([0.5, 0.5, 1.0], dtype=dtype))
    F2 = S @ F @ S  # F for pixel coordinates scaled by 2
    assert torch.allclose(sampson_distance_normalized(F2, 2 * x1, 2 * x2, mask)[mask],
                          got[mask], rtol=10 * tol, atol=10 * tol)


def test_residual_float32_matches_float64(device):
    d = _scene("F")
    x1, x2, F = d["x1"], d["x2"], d["model"]
    for fn in (sampson_distance, epipolar_line_distance, epipolar_max_distance):
        r64 = fn(F, x1, x2)
        r32 = fn(F.float().to(device), x1.float().to(device), x2.float().to(device)).cpu()
        assert torch.allclose(r32.double(), r64, rtol=1e-2, atol=1e-2)
    d = _scene("H")
    for fn in (transfer_error, symmetric_transfer_error):
        r64 = fn(d["model"], d["x1"], d["x2"])
        r32 = fn(d["model"].float().to(device), d["x1"].float().to(device),
                 d["x2"].float().to(device)).cpu()
        assert torch.allclose(r32.double(), r64, rtol=1e-3, atol=1e-2)


def test_singular_models_stay_finite():
    x = torch.rand(2, 5, 2, dtype=torch.float64) * 10
    Z = torch.zeros(2, 3, 3, dtype=torch.float64)
    for fn in (symmetric_transfer_error, transfer_error, sampson_distance, epipolar_line_distance,
               epipolar_max_distance, sampson_distance_normalized):
        assert torch.isfinite(fn(Z, x, x)).all()


def test_shape_errors():
    x = torch.zeros(2, 5, 2)
    with pytest.raises(ShapeError):
        sampson_distance(torch.zeros(2, 3, 3), x, torch.zeros(2, 4, 2))
    with pytest.raises(ShapeError):
        symmetric_transfer_error(torch.zeros(3, 3), x, x)
    with pytest.raises(ShapeError):
        transfer_error(torch.zeros(3, 3, 3), x, x)  # 3 models, 2 pairs
    with pytest.raises(ShapeError):
        hartley_normalize(torch.zeros(2, 5, 3))
    with pytest.raises(ShapeError):
        weighted_affine_lstsq(x, x, torch.ones(2, 4))


@pytest.mark.parametrize("fn", [symmetric_transfer_error, transfer_error, sampson_distance,
                                epipolar_line_distance, epipolar_max_distance,
                                sampson_distance_normalized])
def test_residual_gradcheck(fn):
    g = torch.Generator().manual_seed(0)
    x1 = (torch.rand(2, 5, 2, generator=g, dtype=torch.float64) * 10).requires_grad_()
    x2 = (torch.rand(2, 5, 2, generator=g, dtype=torch.float64) * 10).requires_grad_()
    M = (torch.eye(3, dtype=torch.float64) + 0.1 * torch.rand(2, 3, 3, generator=g,
                                                              dtype=torch.float64))
    M.requires_grad_()
    assert torch.autograd.gradcheck(fn, (M, x1, x2), eps=1e-6, atol=1e-5)


# ---------------------------------------------------------------- weighted affine least squares

def test_affine_exact_and_weighted(device, dtype):
    g = torch.Generator().manual_seed(1)
    P, M = 4, 30
    p = (torch.rand(P, M, 2, generator=g) * 200).to(dtype=dtype, device=device)
    A = (torch.randn(P, 2, 2, generator=g) * 0.1).to(dtype=dtype, device=device)
    b = (torch.randn(P, 2, generator=g) * 5).to(dtype=dtype, device=device)
    v = p @ A.transpose(-1, -2) + b.unsqueeze(1)
    w = torch.rand(P, M, generator=g).to(dtype=dtype, device=device) + 0.1
    v_bad = v.clone()
    v_bad[:, :5] += 50.0  # corrupted cells with weight 0 must be ignored
    w0 = w.clone()
    w0[:, :5] = 0
    A2, b2, wmse, valid = weighted_affine_lstsq(p, v_bad, w0)
    tol = 1e-3 if dtype == torch.float32 else 1e-9
    assert valid.all()
    assert torch.allclose(A2, A, atol=tol) and torch.allclose(b2, b, atol=100 * tol)
    assert (wmse.abs() < 1e3 * tol).all()


def test_affine_matches_numpy_lstsq():
    rng = np.random.default_rng(2)
    p = rng.uniform(0, 100, (3, 25, 2))
    v = rng.normal(0, 3, (3, 25, 2))
    w = rng.uniform(0.5, 4, (3, 25))
    A, b, wmse, valid = weighted_affine_lstsq(_t(p), _t(v), _t(w))
    for i in range(3):
        X = np.c_[p[i], np.ones(25)] * np.sqrt(w[i])[:, None]
        sol = np.linalg.lstsq(X, v[i] * np.sqrt(w[i])[:, None], rcond=None)[0]  # (3, 2)
        np.testing.assert_allclose(A[i].numpy(), sol[:2].T, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(b[i].numpy(), sol[2], rtol=1e-8, atol=1e-10)
        res = np.c_[p[i], np.ones(25)] @ sol - v[i]
        ref = (w[i] * (res ** 2).sum(1)).sum() / w[i].sum()  # eq. 15
        assert wmse[i].item() == pytest.approx(ref, rel=1e-9)


def test_affine_degenerate_inputs():
    p = torch.zeros(4, 6, 2, dtype=torch.float64)
    p[0, :, 0] = torch.arange(6.0)  # collinear positions
    p[1] = torch.rand(6, 2, dtype=torch.float64)
    p[2] = 1.0  # all the same point
    v = torch.ones(4, 6, 2, dtype=torch.float64)
    w = torch.ones(4, 6, dtype=torch.float64)
    w[1] = 0  # no weight at all
    A, b, wmse, valid = weighted_affine_lstsq(p, v, w)
    assert not valid[:3].any() and not valid[3]  # row 3: all positions zero
    for t in (A, b, wmse):
        assert torch.isfinite(t).all()
    assert torch.allclose(b[0], torch.ones(2, dtype=torch.float64))  # mean motion fallback
    assert torch.allclose(b[1], torch.zeros(2, dtype=torch.float64))
    e = weighted_affine_lstsq(torch.zeros(0, 3, 2), torch.zeros(0, 3, 2), torch.zeros(0, 3))
    assert e[0].shape == (0, 2, 2) and e[3].shape == (0,)
    e = weighted_affine_lstsq(torch.zeros(2, 0, 2), torch.zeros(2, 0, 2), torch.zeros(2, 0))
    assert not e[3].any() and torch.isfinite(e[2]).all()


def test_affine_gradcheck():
    g = torch.Generator().manual_seed(3)
    p = (torch.rand(2, 8, 2, generator=g, dtype=torch.float64) * 10).requires_grad_()
    v = torch.randn(2, 8, 2, generator=g, dtype=torch.float64).requires_grad_()
    w = (torch.rand(2, 8, generator=g, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradcheck(lambda a, b, c: weighted_affine_lstsq(a, b, c)[:3],
                                    (p, v, w), eps=1e-6, atol=1e-5)


def test_transfer_points_closed_form(dtype):
    from geocon_torch.geometry import transfer_points

    H = torch.tensor([[[2.0, 0.0, 1.0], [0.0, 3.0, -2.0], [0.0, 0.0, 1.0]],
                      [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.5, 0.0, 1.0]]], dtype=dtype)
    x = torch.tensor([[[1.0, 2.0], [0.0, 0.0]], [[2.0, 4.0], [-2.0, 1.0]]], dtype=dtype)
    got = transfer_points(H, x)
    # (2x + 1, 3y - 2); then (x, y) / (0.5 x + 1): (2, 4) -> (1, 2), (-2, 1) has w = 0
    torch.testing.assert_close(got[0], torch.tensor([[3.0, 4.0], [1.0, -2.0]], dtype=dtype))
    torch.testing.assert_close(got[1, 0], torch.tensor([1.0, 2.0], dtype=dtype))
    assert bool(torch.isfinite(got[1, 1]).all()) and float(got[1, 1, 0].abs()) > 1e10


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_transfer_errors_stay_finite_for_points_sent_to_infinity(dtype):
    """A point on the homography's line at infinity: huge but finite errors, in float32 too
    (the squared distance used to overflow to inf)."""
    H = torch.tensor([[[1000.0, 0, 0], [0, 1000.0, 0], [1.0, 0, -500.0]]], dtype=dtype)
    x1 = torch.tensor([[[500.0, 10.0], [600.0, 10.0]]], dtype=dtype)  # w = x - 500: 0, then 100
    x2 = torch.tensor([[[10.0, 10.0], [6000.0, 100.0]]], dtype=dtype)
    for err in (transfer_error(H, x1, x2), symmetric_transfer_error(H, x1, x2)):
        assert bool(torch.isfinite(err).all()) and float(err[0, 0]) > 1e10
    assert float(transfer_error(H, x1, x2)[0, 1]) < 1e-3


def test_ignored_entries_may_hold_nan():
    """An entry of weight 0 (or masked out) is ignored whatever it holds: a NaN there changes
    neither the solvers nor the Hartley normalisation of the other entries."""
    from geocon_torch.geometry import fundamental_8pt, homography_dlt
    from geocon_torch.measures.background import fundamental_pair_metrics
    from geocon_torch.geometry import ransac_fundamental

    pairs = fundamental_pairs(1, 60, seed=3, outlier_ratio=0.0, noise_px=0.3)
    x1, x2 = pairs["x1"], pairs["x2"]
    w = torch.ones(1, 60, dtype=x1.dtype)
    w[0, 59] = 0
    bad1 = x1.clone()
    bad1[0, 59] = float("nan")
    for solve in (fundamental_8pt, homography_dlt):
        torch.testing.assert_close(solve(bad1, x2, w), solve(x1, x2, w))
    mask = w > 0
    want = sampson_distance_normalized(F_of(x1, x2), x1, x2, mask)
    got = sampson_distance_normalized(F_of(x1, x2), bad1, x2, mask)
    torch.testing.assert_close(got[:, :59], want[:, :59])
    fit = ransac_fundamental(bad1, x2, mask, seed=0)
    m_bad = fundamental_pair_metrics(fit, bad1, x2, mask)
    m_ok = fundamental_pair_metrics(fit, x1, x2, mask)
    assert bool(m_bad.valid) and float(m_bad.ir) == float(m_ok.ir) > 0.9


@pytest.mark.parametrize("which", ["x1", "x2"])
def test_a_nonfinite_match_inside_the_mask_is_dropped_as_the_fits_drop_it(which):
    """A NaN / inf match left in the mask: the robust fits ignore it, and so do the Hartley
    normalisation, the normalised Sampson distance and the IR / GE stage (it was counted in
    C_bg and made every normalised residual of its pair NaN: a valid F fit with 59 inliers
    came out invalid, IR_F 0). The pair's numbers equal those of the 59 finite matches."""
    from geocon_torch.geometry import ransac_fundamental, ransac_homography
    from geocon_torch.measures.background import (fundamental_pair_metrics,
                                                  homography_pair_metrics)

    pairs = fundamental_pairs(1, 60, seed=3, outlier_ratio=0.0, noise_px=0.3)
    x1, x2 = pairs["x1"], pairs["x2"]
    bad = {"x1": x1.clone(), "x2": x2.clone()}
    bad[which][0, 0, 0] = float("nan")
    bad[which][0, 1, 1] = float("inf")
    b1, b2 = bad["x1"], bad["x2"]
    keep = torch.ones(1, 60, dtype=torch.bool)
    keep[0, :2] = False
    pn, T = hartley_normalize(b1 if which == "x1" else b2)
    pn_ok, T_ok = hartley_normalize(x1 if which == "x1" else x2, keep)
    assert torch.equal(T, T_ok) and torch.equal(pn[:, 2:], pn_ok[:, 2:])
    F = F_of(x1[:, 2:], x2[:, 2:])
    r = sampson_distance_normalized(F, b1, b2)
    assert torch.isnan(r[0, :2]).all()  # sums over 60 padded vs 58 entries: last bits differ
    torch.testing.assert_close(r[:, 2:], sampson_distance_normalized(F, x1[:, 2:], x2[:, 2:]),
                               rtol=1e-9, atol=1e-14)
    for fit_fn, metrics in ((ransac_fundamental, fundamental_pair_metrics),
                            (ransac_homography, homography_pair_metrics)):
        fit = fit_fn(b1, b2, seed=0)
        got = metrics(fit, b1, b2, min_inliers=1)
        want = metrics(fit, x1, x2, keep, min_inliers=1)
        assert bool(got.valid) and int(got.num_matches) == 58 == int(want.num_matches)
        assert int(got.num_inliers) == int(want.num_inliers) > 0  # H: few (parallax scene)
        assert float(got.ir) == float(want.ir)
        assert float(got.ge) == pytest.approx(float(want.ge), rel=1e-12)
    assert float(fundamental_pair_metrics(ransac_fundamental(b1, b2, seed=0), b1, b2).ir) > 0.9


def F_of(x1, x2):
    from geocon_torch.geometry import fundamental_8pt

    return fundamental_8pt(x1, x2)


def test_transfer_points_checks_its_arguments():
    """transfer_points takes (P, 3, 3) float models and (P, N, 2) float points of the same P,
    like the other residual functions (a homogeneous (x, y, w) point is not silently cut)."""
    from geocon_torch.geometry import transfer_points

    H = torch.eye(3, dtype=torch.float64)[None]
    with pytest.raises(ShapeError, match=r"x must have shape \(P, N, 2\), got \(1, 1, 3\)"):
        transfer_points(H, torch.tensor([[[2.0, 4.0, 2.0]]], dtype=torch.float64))
    with pytest.raises(ShapeError, match="H has 1 pairs but x has 2"):
        transfer_points(H, torch.zeros(2, 5, 2, dtype=torch.float64))
    with pytest.raises(ShapeError, match="H must be float32 or float64, got torch.int64"):
        transfer_points(torch.eye(3, dtype=torch.long)[None], torch.ones(1, 1, 2))
    with pytest.raises(ShapeError, match=r"x must have shape \(P, N, 2\), got \(2,\)"):
        transfer_points(H, torch.ones(2, dtype=torch.float64))
    with pytest.raises(ShapeError, match=r"H must have shape \(P, 3, 3\), got \(3, 3\)"):
        transfer_points(H[0], torch.ones(1, 1, 2, dtype=torch.float64))


def test_sampson_normalized_promotes_mixed_dtypes_like_its_siblings():
    """A float64 F with float32 points is evaluated in float64 (as sampson_distance does), not
    rounded to float32; same-dtype calls are unchanged."""
    F = _t([F_TX]) * 3.7
    x1 = torch.tensor([[[10.0, 20.0], [30.0, 40.0], [5.0, 7.0]]])
    x2 = torch.tensor([[[50.0, 20.0], [70.0, 43.0], [9.0, 6.0]]])
    got = sampson_distance_normalized(F, x1, x2)
    assert got.dtype == torch.float64
    assert torch.equal(got, sampson_distance_normalized(F, x1.double(), x2.double()))
    assert sampson_distance(F, x1, x2).dtype == torch.float64  # the sibling's behaviour
    assert sampson_distance_normalized(F.float(), x1, x2).dtype == torch.float32


def _affine_data(dtype=torch.float64):
    g = torch.Generator().manual_seed(11)
    pos = (torch.rand(1, 15, 2, generator=g, dtype=torch.float64) * 100).to(dtype)
    A = torch.tensor([[0.01, -0.02], [0.03, 0.005]], dtype=dtype)
    b = torch.tensor([1.0, -2.0], dtype=dtype)
    return pos, pos @ A.T + b, A, b


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_affine_ignored_entries_may_hold_nan(bad):
    """A weight-0 entry is ignored whatever its position / motion holds (as for the H / F
    solvers): the fit is the exact affine motion of the other entries."""
    pos, mot, A, b = _affine_data()
    w = torch.ones(1, 15, dtype=torch.float64)
    w[0, 0] = 0.0
    want = weighted_affine_lstsq(pos, mot, w)
    for p_, m_ in ((pos.clone(), mot), (pos, mot.clone())):
        (p_ if p_ is not pos else m_)[0, 0, 1] = bad
        got = weighted_affine_lstsq(p_, m_, w)
        for g_, w_ in zip(got, want):
            assert torch.equal(g_, w_)
    assert bool(want[3]) and torch.allclose(want[0][0], A, atol=1e-12)
    assert torch.allclose(want[1][0], b, atol=1e-9) and float(want[2]) < 1e-20


def test_affine_nonfinite_weight_or_weighted_point_counts_as_weight_zero():
    """A NaN / inf weight, or a NaN / inf position or motion of weight > 0, is an ignored entry
    (weight 0): finite results, never a NaN WMSE."""
    pos, mot, A, b = _affine_data()
    w = torch.ones(1, 15, dtype=torch.float64)
    w0 = w.clone()
    w0[0, 3] = 0.0
    want = weighted_affine_lstsq(pos, mot, w0)
    cases = []
    for bad in (float("nan"), float("inf")):
        wb = w.clone()
        wb[0, 3] = bad
        cases.append((pos, mot, wb))
        pb, mb = pos.clone(), mot.clone()
        pb[0, 3, 0], mb[0, 3, 1] = bad, -bad
        cases += [(pb, mot, w), (pos, mb, w)]
    for p_, m_, w_ in cases:
        got = weighted_affine_lstsq(p_, m_, w_)
        for g_, r_ in zip(got, want):
            assert torch.equal(g_, r_)
    p_, m_, w_ = (t.clone().requires_grad_() for t in cases[1])  # a NaN position, weight 1
    got = weighted_affine_lstsq(p_, m_, w_)
    (got[0].sum() + got[1].sum() + got[2].sum()).backward()
    assert all(bool(torch.isfinite(t.grad).all()) for t in (p_, m_, w_))
    assert float(p_.grad[0, 3].abs().sum()) == 0.0 and float(w_.grad[0, 3]) == 0.0
    assert bool(want[3]) and torch.allclose(want[0][0], A, atol=1e-12) and float(want[2]) < 1e-20


def test_affine_mixed_dtypes_promote():
    """float32 positions with float64 motions (or the reverse) are solved in float64."""
    pos, mot, A, _ = _affine_data()
    w = torch.ones(1, 15, dtype=torch.float32)
    p32 = pos.float()
    ref = weighted_affine_lstsq(p32.double(), mot, w.double())
    for args in ((p32, mot, w), (mot.float().double(), p32, w)):
        got = weighted_affine_lstsq(*args)
        assert got[0].dtype == got[1].dtype == got[2].dtype == torch.float64
    for g_, r_ in zip(weighted_affine_lstsq(p32, mot, w), ref):
        assert torch.equal(g_, r_)
    assert torch.allclose(ref[0][0], A, atol=1e-6)
