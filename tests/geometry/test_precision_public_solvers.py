"""The public geometry functions compute in the precision they were written for.

* Under the caller's ``torch.autocast`` (a training step), the solvers and the residuals built
  on matrix products used to return bfloat16 models or silently wrong float32 numbers (8-point
  median Sampson 0.15 -> 11 px, DLT transfer 0.37 -> 4.7 px, normalised Sampson off by 0.65
  against tau_F = 0.1). They now run under :func:`geocon_torch._precision.scoring_precision`
  like the robust estimators; every other exported function is pinned to be autocast-invariant
  as it is.
* The least-squares fits (8-point, DLT; RANSAC's local optimisation and final refit) build
  their normal equations in float64 whatever the points' dtype (the public solvers normalise
  and denormalise in float64 too) and return the model in the points' dtype: on noise-free
  float32 points at 4K the 8-point fit error was ~1e-3 px, the DLT's ~2e-4 px (float32 Gram),
  against ~1e-5 px now (the float32 rounding of the points and of the model), and RANSAC on
  float32 small-baseline matches fits as well as on float64 ones (it was up to 17 % worse).
* Mixed float32 / float64 points are promoted to float64 by the solvers (they used to raise a
  RuntimeError from a matmul), as by the residuals and the robust estimators.
"""
from __future__ import annotations

from typing import Callable, Dict

import pytest
import torch

from geocon_torch import geometry
from geocon_torch.geometry import (fundamental_7pt, fundamental_8pt, homography_dlt,
                                   ransac_fundamental, ransac_homography, sampson_distance,
                                   sampson_distance_normalized, symmetric_transfer_error,
                                   weighted_affine_lstsq)
from geocon_torch.geometry._synthetic import fundamental_pairs, homography_pairs
from geocon_torch.types import Fit

UHD = (2160, 3840)  # (h, w) of the ill-conditioned data: 4K pixel coordinates


def _f_data(noise: float = 0.3, size=(720, 1280), n: int = 200) -> Dict[str, torch.Tensor]:
    return fundamental_pairs(2, n, outlier_ratio=0.0, noise_px=noise, seed=5, size=size)


def _h_data(noise: float = 0.3, size=(720, 1280), n: int = 200) -> Dict[str, torch.Tensor]:
    return homography_pairs(2, n, outlier_ratio=0.0, noise_px=noise, seed=6, size=size)


def _fit(kind: str, model: torch.Tensor) -> Fit:
    P, N = model.shape[0], 1
    z = torch.zeros(P, N)
    return Fit(kind=kind, model=model, inliers=z.bool(), residuals=z,
               valid=torch.ones(P, dtype=torch.bool), num_inliers=torch.zeros(P, dtype=torch.long),
               iterations=torch.zeros(P, dtype=torch.long), cost=torch.zeros(P))


def _calls() -> Dict[str, Callable[[], object]]:
    """One call of every function of ``geocon_torch.geometry.__all__`` on float32 data."""
    f, h = _f_data(), _h_data()
    x1, x2 = f["x1"].float(), f["x2"].float()
    hx1, hx2 = h["x1"].float(), h["x2"].float()
    F, H = f["model"].float(), h["model"].float()
    w = torch.linspace(0.5, 1.5, x1.shape[1]).expand(2, -1).contiguous()
    return {
        "fundamental_8pt": lambda: fundamental_8pt(x1, x2, w),
        "fundamental_7pt": lambda: fundamental_7pt(x1[:, :7], x2[:, :7]),
        "homography_dlt": lambda: homography_dlt(hx1, hx2, w),
        "sampson_distance_normalized": lambda: sampson_distance_normalized(F, x1, x2),
        "weighted_affine_lstsq": lambda: weighted_affine_lstsq(hx1, hx2 - hx1, w),
        "fundamental_residuals": lambda: geometry.fundamental_residuals(_fit("F", F), x1, x2),
        "homography_residuals": lambda: geometry.homography_residuals(_fit("H", H), hx1, hx2),
        "hartley_normalize": lambda: geometry.hartley_normalize(x1),
        "sampson_distance": lambda: sampson_distance(F, x1, x2),
        "epipolar_line_distance": lambda: geometry.epipolar_line_distance(F, x1, x2),
        "epipolar_max_distance": lambda: geometry.epipolar_max_distance(F, x1, x2),
        "symmetric_transfer_error": lambda: symmetric_transfer_error(H, hx1, hx2),
        "transfer_error": lambda: geometry.transfer_error(H, hx1, hx2),
        "transfer_points": lambda: geometry.transfer_points(H, hx1),
        "ransac_homography": lambda: ransac_homography(hx1, hx2, seed=0).model,
        "ransac_fundamental": lambda: ransac_fundamental(x1, x2, seed=0).model,
    }


def _flat(out: object) -> list:
    """The tensors of a function's output, in order."""
    if isinstance(out, torch.Tensor):
        return [out]
    return [t for item in out for t in _flat(item)]


def test_every_exported_function_is_covered():
    assert set(_calls()) == set(geometry.__all__)


@pytest.mark.parametrize("name", sorted(_calls()))
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_caller_autocast_changes_no_number(name, dtype):
    """Same dtypes and bit-identical values with the caller's CPU autocast on; the caller's
    autocast state is back afterwards."""
    call = _calls()[name]
    plain = _flat(call())
    with torch.autocast("cpu", dtype=dtype):
        cast = _flat(call())
        assert torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == dtype
    for p, c in zip(plain, cast):
        assert c.dtype == p.dtype, name
        assert torch.equal(c.nan_to_num(-1.0), p.nan_to_num(-1.0)), name


def test_autocast_8pt_and_dlt_numbers():
    """The audit's figures: under bfloat16 autocast the 8-point F's median Sampson distance was
    ~11 px instead of ~0.2 px, the DLT's median transfer error 4.7 px instead of 0.4 px."""
    f, h = _f_data(), _h_data()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        F = fundamental_8pt(f["x1"].float(), f["x2"].float())
        H = homography_dlt(h["x1"].float(), h["x2"].float())
        sn = sampson_distance_normalized(f["model"].float(), f["x1"].float(), f["x2"].float())
    assert F.dtype == H.dtype == sn.dtype == torch.float32
    assert sampson_distance(F.double(), f["x1"], f["x2"]).median() < 0.4
    assert symmetric_transfer_error(H.double(), h["x1"], h["x2"]).median() < 0.6
    exact = sampson_distance_normalized(f["model"], f["x1"], f["x2"])
    assert (sn.double() - exact).abs().max() < 1e-5


def test_reduced_float32_matmul_precision_is_pinned(monkeypatch):
    """Inside a public solver the float32 matmuls run in full float32 ("highest") whatever the
    caller set; the caller's setting is back afterwards."""
    from geocon_torch.geometry import fundamental
    seen = []
    kernel = fundamental._fundamental_8pt_normalized

    def spy(*args, **kwargs):
        seen.append(torch.get_float32_matmul_precision())
        return kernel(*args, **kwargs)

    monkeypatch.setattr(fundamental, "_fundamental_8pt_normalized", spy)
    f = _f_data()
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium")
    try:
        fundamental_8pt(f["x1"].float(), f["x2"].float())
        assert torch.get_float32_matmul_precision() == "medium"
    finally:
        torch.set_float32_matmul_precision(before)
    assert seen == ["highest"]


def _median_px(kind: str, model: torch.Tensor, d: Dict[str, torch.Tensor]) -> float:
    """Median residual (px) of a fitted model on the noise-free float64 points."""
    residual = sampson_distance if kind == "F" else symmetric_transfer_error
    return float(residual(model.double(), d["x1"], d["x2"]).median())


def test_float32_least_squares_fits_at_4k():
    """Noise-free 4K matches given as float32: the 8-point and DLT fits come within ~1e-5 px
    of exact (float32 Gram: 8-point 1.3e-3 px, DLT 1.9e-4 px) and keep the float32 dtype."""
    f, h = _f_data(0.0, UHD, 500), _h_data(0.0, UHD, 500)
    F = fundamental_8pt(f["x1"].float(), f["x2"].float())
    H = homography_dlt(h["x1"].float(), h["x2"].float())
    assert F.dtype == H.dtype == torch.float32
    assert _median_px("F", F, f) < 5e-5
    assert _median_px("H", H, h) < 5e-5


def _small_baseline(base: float, P: int = 8, N: int = 400, seed: int = 12):
    """P pairs of N matches, 1280x720, f = 1000 px, rotation 0.02 rad and a translation of
    ``base`` (depths 2-20), 0.03 px noise (LK-level): (x1, x2) float64 (P, N, 2)."""
    g = torch.Generator().manual_seed(seed)
    K = torch.tensor([[1000.0, 0, 640], [0, 1000.0, 360], [0, 0, 1]], dtype=torch.float64)
    x1 = torch.rand(P, N, 2, generator=g, dtype=torch.float64) * torch.tensor([1280.0, 720.0])
    depth = 2 + 18 * torch.rand(P, N, 1, generator=g, dtype=torch.float64)
    X = torch.cat([x1, torch.ones(P, N, 1, dtype=torch.float64)], -1) @ torch.linalg.inv(K).T
    c, s = torch.cos(torch.tensor(0.02)).item(), torch.sin(torch.tensor(0.02)).item()
    R = torch.tensor([[c, 0, s], [0, 1, 0], [-s, 0, c]], dtype=torch.float64)
    t = torch.tensor([base, 0.2 * base, 0.1 * base], dtype=torch.float64)
    x2h = (X * depth @ R.T + t) @ K.T
    x2 = x2h[..., :2] / x2h[..., 2:]
    return x1, x2 + 0.03 * torch.randn(P, N, 2, generator=g, dtype=torch.float64)


@pytest.mark.parametrize("base", [0.005, 0.0005])
def test_float32_ransac_refits_match_float64(base):
    """Small-baseline F at LK-level noise: RANSAC's refits (LO, final least squares) on
    float32 points now fit as well as on float64 points (median pixel Sampson of the inliers
    per pair within 2 %; a float32 Gram was up to 16 % worse), in a float32 model."""
    x1, x2 = _small_baseline(base)
    ge = {}
    for dt in (torch.float32, torch.float64):
        fit = ransac_fundamental(x1.to(dt), x2.to(dt), seed=0)
        assert fit.model.dtype == dt and bool(fit.valid.all())
        d = sampson_distance(fit.model.double(), x1, x2)
        ge[dt] = torch.stack([d[p][fit.inliers[p]].median() for p in range(x1.shape[0])])
    ratio = ge[torch.float32] / ge[torch.float64]
    assert float((ratio - 1).abs().max()) < 0.02, ratio


def test_solvers_promote_mixed_dtypes():
    """float32 x1 with float64 x2: a float64 model, the fit of the float64 values."""
    f, h = _f_data(), _h_data()
    x1, hx1 = f["x1"].float(), h["x1"].float()
    F = fundamental_8pt(x1, f["x2"])
    H = homography_dlt(hx1, h["x2"])
    F7, valid = fundamental_7pt(x1[:, :7], f["x2"][:, :7])
    assert F.dtype == H.dtype == F7.dtype == torch.float64
    assert torch.equal(F, fundamental_8pt(x1.double(), f["x2"]))
    assert torch.equal(H, homography_dlt(hx1.double(), h["x2"]))
    assert torch.equal(F7, fundamental_7pt(x1[:, :7].double(), f["x2"][:, :7])[0])
    assert bool(valid.any(-1).all())
