"""IR / GE of hand-made fits (eqs. 7-13) with closed-form residuals; sensitivity; categories."""
import math

import pytest
import torch

from geocon_torch.geometry import symmetric_transfer_error
from geocon_torch.measures.background import (
    background_pass, classify_behaviour, clip_summary, fundamental_pair_metrics,
    homography_pair_metrics, median_motion_px, rotation_from_fundamental, sensitivity_scan)
from geocon_torch.types import Fit


def make_fit(kind, model, valid):
    p, n = model.shape[0], 1
    z = torch.zeros(p, n)
    return Fit(kind, model, z.bool(), z, valid, z[:, 0].long(), z[:, 0].long(), z[:, 0])


def points(n, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g, dtype=torch.float64) * torch.tensor([300.0, 200.0])
    return xy.to(dtype=dtype, device=device)


def test_homography_ir_ge_closed_form(device, dtype):
    # H = translation (5, -3): an x-offset d of x2 gives forward = backward = symmetric error d
    H = torch.tensor([[1.0, 0, 5], [0, 1, -3], [0, 0, 1]], dtype=dtype, device=device)
    n = 60
    x1 = points(n, dtype, device).unsqueeze(0).repeat(3, 1, 1)
    d = torch.cat([torch.linspace(0, 1.9, 40), torch.full((10,), 5.0), torch.zeros(10)])
    d = d.to(dtype=dtype, device=device)
    x2 = x1 + torch.tensor([5.0, -3.0], dtype=dtype, device=device)
    x2[..., 0] += d
    mask = torch.ones(3, n, dtype=torch.bool, device=device)
    mask[:, 50:] = False  # padding
    mask[1, 20:50] = False  # pair 1: only 20 matches -> invalid
    fit = make_fit("H", H.expand(3, 3, 3).clone(), torch.tensor([True, True, False], device=device))
    m = homography_pair_metrics(fit, x1, x2, mask, tau_h=2.0, min_inliers=30)
    assert m.valid.tolist() == [True, False, False]
    assert m.num_inliers.tolist()[0] == 40 and m.num_matches.tolist() == [50, 20, 50]
    assert m.ir[0].item() == pytest.approx(0.8)
    want = float(torch.linspace(0, 1.9, 40, dtype=torch.float64).quantile(0.5))
    assert m.ge[0].item() == pytest.approx(want, abs=1e-5)
    assert m.ir[1].item() == 0 and m.ge[2].item() == 0 and torch.isfinite(m.ge).all()


def test_inlier_test_and_min_inliers_are_inclusive():
    """Eqs. 7-8, 12 at their boundaries: inliers are ``r <= tau_H`` and a pair with exactly
    ``min_inliers`` inliers is valid. H = translation (5, -3) on integer points: an x-offset of
    exactly 2 px has a symmetric transfer error of exactly 2.0 (float64).
    Pair 0: 40 matches at r = tau = 2 px, 10 at 5 px -> 40 inliers, IR 0.8, GE 2.0.
    Pair 1: 30 at 0.5 px, 10 at 5 px -> exactly 30 inliers: valid, IR 0.75, GE 0.5.
    Pair 2: 29 at 0.5 px, 11 at 5 px -> 29 inliers: invalid (IR = GE = 0)."""
    n = 50
    x1 = (torch.arange(2 * n, dtype=torch.float64).view(1, n, 2) * 3.0).repeat(3, 1, 1)
    d = torch.full((3, n), 5.0, dtype=torch.float64)
    d[0, :40], d[1, :30], d[2, :29] = 2.0, 0.5, 0.5
    x2 = x1 + torch.tensor([5.0, -3.0], dtype=torch.float64)
    x2[..., 0] += d
    mask = torch.ones(3, n, dtype=torch.bool)
    mask[1:, 40:] = False  # pairs 1, 2: 40 matches
    H = torch.tensor([[1.0, 0, 5], [0, 1, -3], [0, 0, 1]], dtype=torch.float64)
    fit = make_fit("H", H.expand(3, 3, 3).clone(), torch.ones(3, dtype=torch.bool))
    assert (symmetric_transfer_error(fit.model, x1, x2)[0, :40] == 2.0).all()  # ties
    m = homography_pair_metrics(fit, x1, x2, mask, tau_h=2.0, min_inliers=30)
    assert m.num_inliers.tolist() == [40, 30, 29] and m.num_matches.tolist() == [50, 40, 40]
    assert m.valid.tolist() == [True, True, False]
    assert m.ir.tolist() == [0.8, 0.75, 0.0] and m.ge.tolist() == [2.0, 0.5, 0.0]


def test_fundamental_ir_ge_closed_form(device, dtype):
    # F = [e1]_x (pure x-translation): Sampson px distance of a y-offset dy is |dy| / sqrt(2)
    F = torch.tensor([[0.0, 0, 0], [0, 0, -1], [0, 1, 0]], dtype=dtype, device=device)
    n = 50
    x1 = points(n, dtype, device, seed=1).unsqueeze(0)
    dy = torch.cat([torch.linspace(-2, 2, 41), torch.full((9,), 40.0)]).to(dtype=dtype,
                                                                              device=device)
    x2 = x1 + torch.stack([torch.full_like(dy, 12.0), dy], -1)
    fit = make_fit("F", F[None].clone(), torch.tensor([True], device=device))
    m = fundamental_pair_metrics(fit, x1, x2, None, tau_f=0.1, min_inliers=30)
    assert m.valid.item() and m.num_inliers.item() == 41
    assert m.ir.item() == pytest.approx(41 / 50)
    want = float(torch.linspace(-2, 2, 41, dtype=torch.float64).abs().median()) / math.sqrt(2)
    assert m.ge.item() == pytest.approx(want, rel=1e-4)


def test_clip_summary_pass_and_sensitivity():
    ir = torch.tensor([[0.99, 0.5, 0.98], [0.97, 0.0, 0.96]])
    ge = torch.tensor([[0.4, 9.0, 0.6], [0.5, 0.0, 0.7]])
    valid = torch.tensor([[True, True, True], [True, False, True]])
    s = clip_summary(ir, ge, valid)  # pooled medians over scales and pairs (eq. 13)
    assert s == {"ir": pytest.approx(0.97), "ge_px": pytest.approx(0.6), "valid_pairs": 5}
    assert clip_summary(ir, ge, torch.zeros_like(valid)) == {"ir": None, "ge_px": None,
                                                            "valid_pairs": 0}
    assert background_pass(0.97, 3.5) is True and background_pass(0.969, 1.0) is False
    assert background_pass(0.99, 3.6) is False and background_pass(None, 1.0) is None

    H = torch.eye(3, dtype=torch.float64)[None]
    F = torch.tensor([[[0.0, 0, 0], [0, 0, -1], [0, 1, 0]]], dtype=torch.float64)
    x1 = points(100, torch.float64, "cpu").unsqueeze(0)
    off = torch.linspace(0, 3.96, 100, dtype=torch.float64)  # x-offsets: H residual = off
    x2 = x1.clone()
    x2[..., 0] += off
    ok = torch.tensor([True])
    scan = sensitivity_scan(make_fit("H", H, ok), make_fit("F", F, ok), x1, x2,
                            torch.ones(1, 100, dtype=torch.bool), [0.5, 1.0, 2.0, 4.0], [0.1],
                            min_inliers=30)
    # 13 and 26 inliers < 30 -> invalid (None); 51 and 100 inliers -> IR 0.51 and 1.0
    assert scan["ir_h"] == [None, None, pytest.approx(0.51), pytest.approx(1.0)]
    assert scan["valid_h"] == [0, 0, 1, 1]
    assert scan["ge_h_px"][3] == pytest.approx(float(off.quantile(0.5)))
    assert scan["ge_h_px"][2] == pytest.approx(float(off[:51].quantile(0.5)))
    assert scan["ir_f"] == [pytest.approx(1.0)]
    assert scan["ge_f_px"] == [pytest.approx(0.0, abs=1e-6)]


def _rot_y(deg):
    a = math.radians(deg)
    return torch.tensor([[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]],
                        dtype=torch.float64)


def _skew(t):
    return torch.tensor([[0, -t[2], t[1]], [t[2], 0, -t[0]], [-t[1], t[0], 0]], dtype=torch.float64)


def test_rotation_from_fundamental():
    h, w = 240, 320
    K = torch.tensor([[320.0, 0, 160], [0, 320, 120], [0, 0, 1]], dtype=torch.float64)
    Ki = torch.linalg.inv(K)
    Fs = [Ki.T @ _skew([1.0, 0.1, 0.0]) @ _rot_y(deg) @ Ki for deg in (0.0, 0.5, 2.0)]
    got = rotation_from_fundamental(torch.stack(Fs), (h, w), focal_factor=1.0)
    assert got.tolist() == pytest.approx([0.0, 0.5, 2.0], abs=1e-6)
    # a wrong focal length keeps pure translation at 0 degrees
    assert rotation_from_fundamental(torch.stack(Fs[:1]), (h, w), focal_factor=1.7).item() \
        == pytest.approx(0.0, abs=1e-6)


def test_median_motion_and_categories():
    x1 = torch.zeros(2, 4, 2)
    x2 = x1 + torch.tensor([[[0.1, 0.0]], [[3.0, 4.0]]])
    assert median_motion_px(x1, x2, torch.ones(2, 4, dtype=torch.bool)).tolist() == \
        pytest.approx([0.1, 5.0])
    kw = dict(static_px=0.5, rotation_thr_deg=0.1)
    assert classify_behaviour("H", True, 0.1, None, False, **kw) == "Static"
    assert classify_behaviour("H", True, 0.1, None, True, **kw) == "StaticCam+MovingObjs"
    assert classify_behaviour("H", True, 4.0, None, True, **kw) == "Rotation-dominant"
    assert classify_behaviour("F", True, 4.0, 0.01, False, **kw) == "Translation-dominant"
    assert classify_behaviour("F", True, 4.0, 0.5, False, **kw) == "Complex"
    assert classify_behaviour("F", False, 4.0, 0.5, False, **kw) == "Stress"
    assert classify_behaviour(None, None, None, None, False, **kw) is None
    # the thresholds: motion under static_px is static (at it: rotation); a rotation at
    # rotation_thr_deg is Complex (at least the threshold)
    assert classify_behaviour("H", True, 0.5, None, False, **kw) == "Rotation-dominant"
    assert classify_behaviour("H", True, 0.4999, None, False, **kw) == "Static"
    assert classify_behaviour("F", True, 4.0, 0.1, False, **kw) == "Complex"
    assert classify_behaviour("F", True, 4.0, 0.0999, False, **kw) == "Translation-dominant"
