"""Minimal and least-squares solvers: DLT, 8-point, 7-point (all roots), closed-form cubic."""
from __future__ import annotations

import cv2
import pytest
import torch

from geocon_torch.errors import ArgumentTypeError, ShapeError
from geocon_torch.geometry import (fundamental_7pt, fundamental_8pt, homography_dlt,
                                   sampson_distance, transfer_error)
from geocon_torch.geometry._synthetic import fundamental_pairs, homography_pairs
from geocon_torch.geometry.fundamental import _real_cubic_roots


def _same_up_to_scale(A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
    """max |A/|A| -+ B/|B|| per item (sign-free)."""
    a = A / A.flatten(-2).norm(dim=-1)[..., None, None]
    b = B / B.flatten(-2).norm(dim=-1)[..., None, None]
    return torch.minimum((a - b).flatten(-2).abs().amax(-1), (a + b).flatten(-2).abs().amax(-1))


def _grid(P, dtype, device):
    g = torch.stack(torch.meshgrid(torch.linspace(0, 1024, 9), torch.linspace(0, 720, 7),
                                   indexing="xy"), -1).reshape(1, -1, 2)
    return g.expand(P, -1, -1).to(dtype=dtype, device=device)


@pytest.mark.parametrize("n", [4, 50])
def test_homography_dlt_exact(device, dtype, n):
    d = homography_pairs(5, n, outlier_ratio=0.0, noise_px=0.0, seed=4, dtype=dtype, device=device)
    H = homography_dlt(d["x1"], d["x2"])
    f32 = dtype == torch.float32
    assert transfer_error(H, d["x1"], d["x2"]).max() < (2e-2 if f32 else 1e-8)
    assert torch.allclose(H[:, 2, 2], torch.ones(5, dtype=dtype, device=device))
    if n > 4:  # held-out points: a grid over the image, mapped by the true H
        g = _grid(5, dtype, device)
        gt = torch.cat([g, torch.ones_like(g[..., :1])], -1) @ d["model"].transpose(-1, -2)
        gt = gt[..., :2] / gt[..., 2:]
        assert transfer_error(H, g, gt).max() < (5e-2 if f32 else 1e-7)
        assert (_same_up_to_scale(H, d["model"]) < (2e-3 if f32 else 1e-8)).all()


def test_homography_dlt_weights_ignore_outliers():
    d = homography_pairs(3, 40, outlier_ratio=0.25, noise_px=0.0, seed=5)
    H = homography_dlt(d["x1"], d["x2"], weights=d["inliers"].double())
    assert (_same_up_to_scale(H, d["model"]) < 1e-8).all()
    assert transfer_error(H, d["x1"], d["x2"])[d["inliers"]].max() < 1e-6
    with pytest.raises(ShapeError):
        homography_dlt(d["x1"], d["x2"], weights=torch.ones(3, 5))


def test_fundamental_8pt_exact_rank2(device, dtype):
    d = fundamental_pairs(4, 60, outlier_ratio=0.2, noise_px=0.0, seed=6, dtype=dtype,
                          device=device)
    F = fundamental_8pt(d["x1"], d["x2"], weights=d["inliers"].to(dtype))
    tol = 5e-3 if dtype == torch.float32 else 1e-7
    assert (_same_up_to_scale(F, d["model"]) < tol).all()
    assert (torch.linalg.svdvals(F.double())[:, 2] < tol).all()  # rank 2
    assert torch.allclose(F.flatten(1).norm(dim=1), torch.ones(4, dtype=dtype, device=device))


def test_fundamental_8pt_noisy_beats_noise_level():
    d = fundamental_pairs(4, 300, outlier_ratio=0.0, noise_px=0.5, seed=7)
    F = fundamental_8pt(d["x1"], d["x2"])
    assert sampson_distance(F, d["x1"], d["x2"]).median() < 0.5


def test_fundamental_7pt_roots(device):
    d = fundamental_pairs(6, 7, outlier_ratio=0.0, noise_px=0.0, seed=8, device=device)
    F, valid = fundamental_7pt(d["x1"], d["x2"])
    assert F.shape == (6, 3, 3, 3) and valid.shape == (6, 3)
    nroots = valid.sum(1)
    assert ((nroots == 1) | (nroots == 3)).all()
    # every real root satisfies the 7 constraints and det F = 0; one of them is the truth
    for k in range(3):
        r = sampson_distance(F[:, k], d["x1"], d["x2"]).amax(1)
        assert (r[valid[:, k]] < 1e-6).all()
        assert (torch.linalg.det(F[:, k])[valid[:, k]].abs() < 1e-9).all()
    dist = torch.stack([_same_up_to_scale(F[:, k], d["model"]) for k in range(3)], 1)
    dist = torch.where(valid, dist, torch.full_like(dist, 9.0))
    assert (dist.min(1).values < 1e-6).all()
    # same solutions as OpenCV's 7-point
    for p in range(6):
        ref, _ = cv2.findFundamentalMat(d["x1"][p].cpu().numpy(), d["x2"][p].cpu().numpy(),
                                        cv2.FM_7POINT)
        ref = torch.as_tensor(ref.reshape(-1, 3, 3), dtype=torch.float64)
        assert ref.shape[0] == int(nroots[p])
        ours = F[p][valid[p]].cpu()
        for R in ref:
            # OpenCV rounds the points to float32 first
            assert _same_up_to_scale(ours, R.expand_as(ours)).min() < 1e-3


def test_fundamental_7pt_degenerate_and_shape():
    x = torch.zeros(2, 7, 2, dtype=torch.float64)
    F, valid = fundamental_7pt(x, x)
    assert torch.isfinite(F).all() and not valid.any()
    with pytest.raises(ShapeError):
        fundamental_7pt(torch.zeros(2, 8, 2), torch.zeros(2, 8, 2))


def test_real_cubic_roots_closed_form():
    g = torch.Generator().manual_seed(9)
    r = torch.randn(200, 3, generator=g, dtype=torch.float64) * 3
    c3 = torch.rand(200, generator=g, dtype=torch.float64) + 0.5
    # c3 (t - r0)(t - r1)(t - r2)
    c2 = -c3 * r.sum(1)
    c1 = c3 * (r[:, 0] * r[:, 1] + r[:, 0] * r[:, 2] + r[:, 1] * r[:, 2])
    c0 = -c3 * r.prod(1)
    roots, valid = _real_cubic_roots(c3, c2, c1, c0)
    assert valid.all()
    assert torch.allclose(roots.sort(1).values, r.sort(1).values, atol=1e-6)
    # t^3 + t = 0 has one real root, 0
    one = torch.ones(1, dtype=torch.float64)
    roots, valid = _real_cubic_roots(one, 0 * one, one, 0 * one)
    assert valid.tolist() == [[True, False, False]] and abs(roots[0, 0].item()) < 1e-12


def test_cached_constants_built_in_inference_mode_still_serve_autograd(monkeypatch):
    """The solvers' cached constants (DLT index / signs, the eigen-solver's padding mask, the
    random streams' counters) are plain tensors even when first built inside inference_mode,
    so a later differentiable DLT works; the draws are unchanged."""
    from geocon_torch import _tensor_utils
    from geocon_torch.geometry import homography as hmod
    from geocon_torch.geometry import sampling

    monkeypatch.setattr(_tensor_utils, "_CONSTANTS", {})
    hmod._pad_diag.cache_clear()
    sampling._counter.cache_clear()
    d = homography_pairs(2, 12, outlier_ratio=0.0, noise_px=0.5, seed=3)
    x1, x2 = d["x1"].double(), d["x2"].double()
    keys, rounds = torch.tensor([4, 9]), torch.tensor([0, 2])
    with torch.inference_mode():
        H0 = homography_dlt(x1, x2)
        u0 = sampling.uniform(keys, rounds, (3, 4))
    cached = [t for _, t in _tensor_utils._CONSTANTS.values()]
    assert len(cached) >= 3 and not any(t.is_inference() for t in cached)
    x1g = x1.clone().requires_grad_()
    H = homography_dlt(x1g, x2)
    H.sum().backward()
    assert torch.allclose(H.detach(), H0, atol=1e-9) and x1g.grad.abs().sum() > 0
    assert torch.equal(sampling.uniform(keys, rounds, (3, 4)), u0)
    assert not sampling._counter("flat", (3, 4), torch.device("cpu")).is_inference()


@pytest.mark.parametrize("solve", [homography_dlt, fundamental_8pt])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_nonfinite_entries_count_as_unweighted(solve, bad):
    """A point or weight that is not finite makes its entry an ignored one (weight 0), with or
    without weights: the same matrix as that entry at weight 0, the true model on exact data;
    no linalg error."""
    d = (homography_pairs if solve is homography_dlt else fundamental_pairs)(
        2, 30, outlier_ratio=0.0, noise_px=0.0, seed=13)
    x1, x2 = d["x1"], d["x2"]
    w0 = torch.ones(2, 30, dtype=torch.float64)
    w0[0, 4] = 0.0
    want = solve(x1, x2, w0)
    assert (_same_up_to_scale(want, d["model"]) < 1e-8).all()
    b1, b2 = x1.clone(), x2.clone()
    b1[0, 4, 0], b2[0, 4, 1] = bad, bad
    wb = torch.ones(2, 30, dtype=torch.float64)
    wb[0, 4] = bad
    for args in ((b1, x2, None), (x1, b2, torch.ones_like(w0)), (x1, x2, wb)):
        if bad == -float("inf") and args[2] is wb:
            continue  # a negative weight is a weight 0 anyway
        assert torch.equal(solve(*args), want)


@pytest.mark.parametrize("solve", [homography_dlt, fundamental_8pt])
def test_too_few_finite_points_give_a_finite_matrix(solve):
    x = torch.rand(1, 10, 2, dtype=torch.float64) * 100
    x[0, 2:] = float("nan")  # 2 finite points: a degenerate row
    assert torch.isfinite(solve(x, x + 1.0)).all()


@pytest.mark.parametrize("solve", [homography_dlt, fundamental_8pt])
def test_weights_must_be_a_tensor(solve):
    x = torch.rand(1, 10, 2, dtype=torch.float64)
    with pytest.raises(ArgumentTypeError, match="weights must be a torch.Tensor of shape "
                                                r"\(1, 10\) or None, got list"):
        solve(x, x, [1.0] * 10)
