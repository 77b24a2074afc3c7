"""Mutation round 17 (session 29) of the training-loop / foreground audit fixes: the soft score's
motion evidence and stand-in set, the solvers' degenerate-spectrum grad branches
(``_smallest_eigvec_grad``, ``_enforce_rank2``), the masked-away background reason and the
range message's digits. Each test fails on a mutant the suite let through; all run on tiny
synthetic inputs (float64, a few grid points), no data files."""
from __future__ import annotations

import math
import warnings
from contextlib import contextmanager
from types import SimpleNamespace

import pytest
import torch

from geocon_torch.config import GeoConConfig, SoftConsistencyConfig
from geocon_torch.errors import ClipTensorError
from geocon_torch.geometry import fundamental, fundamental_8pt, homography, homography_dlt
from geocon_torch.geometry.fundamental import _enforce_rank2, _svd_rank2
from geocon_torch.geometry.homography import SPECTRUM_TIE, _smallest_eigvec
from geocon_torch.io.reader import check_unit_range
from geocon_torch.measures import soft
from geocon_torch.measures.headline import MASKED_AWAY
from geocon_torch.sections import background


def _texture(h: int = 32, w: int = 48, dtype=torch.float64, seed: int = 0):
    """(1, 3, H, W) smooth colour noise in [0.2, 0.8] (no value near 0 or 1) and a (1, 3, H, W)
    random sign pattern."""
    g = torch.Generator().manual_seed(seed)
    t = torch.nn.functional.avg_pool2d(torch.rand(1, 3, h, w, generator=g, dtype=torch.float64),
                                       3, 1, 1)
    t = 0.2 + 0.6 * (t - t.amin()) / (t.amax() - t.amin())
    sign = torch.randint(0, 2, t.shape, generator=g, dtype=torch.float64) * 2 - 1
    return t.to(dtype), sign.to(dtype)


def _ramp(m: float) -> float:
    """The motion evidence of a pair with a mean absolute difference of ``m`` grey levels:
    0 up to 0.5 (the frozen rule), then 1 - exp(-((m - 0.5) / 0.125)^2)."""
    return 0.0 if m <= 0.5 else 1.0 - math.exp(-((m - 0.5) / 0.125) ** 2)


# ------------------------------------------------------------------ soft.py: motion evidence
def test_motion_evidence_is_the_closed_form_ramp():
    """Pairs whose every element differs by m / 255 (3 channels, so m is the per-element mean):
    0 at and under 0.5 grey levels, 1 - e^-1 at 0.625, 0.98 at 0.75 (1.5 times the frozen
    tolerance, as documented), 1 - 1e-7 at 1 grey level."""
    a, sign = _texture()
    mads = [0.3, 0.45, 0.50125, 0.5625, 0.625, 0.75, 0.875, 1.0]
    b = torch.cat([a + sign * m / 255 for m in mads])
    got = soft.motion_evidence(a.expand(len(mads), -1, -1, -1), b).tolist()
    for m, g in zip(mads, got):
        assert g == pytest.approx(_ramp(m), rel=1e-9, abs=1e-15), (m, g)
    assert got[4] == pytest.approx(1 - math.exp(-1.0), rel=1e-9)
    assert got[5] == pytest.approx(0.9816843611112658, rel=1e-9)
    assert 1 - 2e-7 < got[7] < 1.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_motion_evidence_and_pair_scores_keep_the_frames_dtype(dtype):
    """The evidence is measured in float64 but returned in the frames' dtype, so the pair scores
    of float32 frames stay float32 (a float64 factor promoted every ratio)."""
    a, sign = _texture(dtype=dtype)
    b = a + sign * 0.7 / 255
    assert soft.motion_evidence(a, b).dtype == dtype
    cfg = SoftConsistencyConfig(irls_iters=1)
    assert [s.dtype for s in soft.soft_pair_scores(a, b, cfg)] == [dtype] * 3


def test_a_pair_with_little_evidence_keeps_its_own_fit():
    """Only an exactly-zero evidence swaps a pair's correspondences for the stand-in set: a pair
    just above the frozen tolerance (0.50125 grey levels: evidence 1e-4) scores its own soft
    IR (~0.98: brightness noise, zero flow) times the evidence, not the stand-in's."""
    a, sign = _texture()
    b = a + sign * 0.50125 / 255
    cfg = SoftConsistencyConfig()
    ev = soft.contrast_evidence(a, b) * soft.motion_evidence(a, b)
    assert float(ev) == pytest.approx(1 - math.exp(-1e-4), rel=1e-6)
    got = soft.soft_pair_scores(a, b, cfg)
    mp = pytest.MonkeyPatch()
    mp.setattr(soft, "motion_evidence", lambda x, y: torch.ones(x.shape[0], dtype=x.dtype))
    try:
        full = soft.soft_pair_scores(a, b, cfg)
    finally:
        mp.undo()
    assert float(full[0]) > 0.9
    for g, f in zip(got, full):
        assert float(g) == pytest.approx(float(f) * float(ev), rel=1e-9)


# ---------------------------------------------------------------- soft.py: the stand-in set
@pytest.mark.parametrize("size", [(21, 21), (32, 48), (64, 64)])
def test_the_stand_in_set_is_explained_by_no_two_view_geometry(size):
    """The stand-in targets move every grid point by 0.2-2.9 px (no pair left in place) and
    are detached; the DLT and 8-point fits of the set have distinct spectra: no grad-branch
    guard fires, their gradients are eigh's / svd's own, nonzero."""
    cfg = SoftConsistencyConfig()
    x1, _, _ = soft.grid_points(*size, cfg.grid_step, cfg.border, torch.float64,
                                torch.device("cpu"))
    x1 = x1[None].requires_grad_()
    xs = soft._stand_in_targets(x1)
    assert not xs.requires_grad
    d = (xs - x1).detach().norm(dim=-1)
    assert float(d.min()) > 0.2 and float(d.max()) < 2.9 and 1.5 < float(d.mean()) < 2.3
    x1 = x1.detach()
    for solver in (homography_dlt, fundamental_8pt):
        x2 = xs.clone().requires_grad_()
        solver(x1, x2).sum().backward()
        mp = pytest.MonkeyPatch()
        mp.setattr(homography, "_smallest_eigvec_grad", lambda M: torch.linalg.eigh(M)[1][..., 0])
        mp.setattr(fundamental, "_enforce_rank2", lambda F: _svd_rank2(F)[0])
        try:
            x2p = xs.clone().requires_grad_()
            solver(x1, x2p).sum().backward()
        finally:
            mp.undo()
        assert float(x2.grad.abs().max()) > 1e-3, solver.__name__
        assert torch.equal(x2.grad, x2p.grad), solver.__name__


# ------------------------------------------------------- homography: _smallest_eigvec_grad
def _rotated(eigenvalues, seed: int = 3) -> torch.Tensor:
    """A symmetric float64 matrix Q diag(eigenvalues) Q^T, Q a seeded random rotation."""
    g = torch.Generator().manual_seed(seed)
    n = len(eigenvalues)
    q, _ = torch.linalg.qr(torch.randn(n, n, generator=g, dtype=torch.float64))
    m = (q * torch.tensor(eigenvalues, dtype=torch.float64)) @ q.T
    return 0.5 * (m + m.T)


@contextmanager
def _no_nan_anywhere():
    """Autograd's anomaly mode: any backward step that returns NaN raises, so a guard whose own
    stand-in solve had a NaN backward (masked out by the second where) fails here too."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled"
        with torch.autograd.detect_anomaly(check_nan=True):
            yield


def _eigvec_grad(m: torch.Tensor):
    """(value, gradient) of ``_smallest_eigvec`` under a fixed upstream weighting, in anomaly
    mode."""
    m = m.detach().clone().requires_grad_()
    with _no_nan_anywhere():
        v = _smallest_eigvec(m)
        (v * torch.arange(1.0, 10.0, dtype=torch.float64)).sum().backward()
    return v.detach(), m.grad


def test_a_smallest_eigenvalue_tied_up_to_rounding_gets_a_zero_gradient():
    """Eigenvalues (1, 1 + 5e-14, 2, ..., 8): the smallest gap, 5e-14, lies within
    SPECTRUM_TIE (64 eps = 1.4e-14) of the largest eigenvalue (8: 1.1e-13), not of the
    smallest (1: 1.4e-14); plain eigh's gradient is rounding noise of ~1e13, the guard's 0.
    A distinct spectrum in the same batch keeps eigh's own gradient."""
    assert SPECTRUM_TIE == 64 * torch.finfo(torch.float64).eps
    tied = _rotated([1.0, 1.0 + 5e-14, 2, 3, 4, 5, 6, 7, 8])
    lam = torch.linalg.eigvalsh(tied)
    assert 0 < float(lam[1] - lam[0]) <= SPECTRUM_TIE * 8 and float(lam[1] - lam[0]) > 2e-14
    v, grad = _eigvec_grad(tied)
    assert torch.equal(v, _smallest_eigvec(tied))  # the value of the plain (no-grad) call
    assert bool(torch.isfinite(grad).all()) and float(grad.abs().max()) == 0.0
    plain = tied.clone().requires_grad_()
    (torch.linalg.eigh(plain)[1][..., 0] * torch.arange(1.0, 10.0, dtype=torch.float64)
     ).sum().backward()
    assert float(plain.grad.abs().max()) > 1e6  # what the guard keeps out
    batch = torch.stack([tied, _rotated([1.0, 1.5, 2, 3, 4, 5, 6, 7, 8])])
    _, g2 = _eigvec_grad(batch)
    assert float(g2[0].abs().max()) == 0.0 and float(g2[1].abs().max()) > 1e-3


def test_a_repeated_eigenvalue_above_the_smallest_gets_a_zero_gradient():
    """diag(1, 2, 3, 3, 5, ..., 9): the smallest eigenvalue is well apart, but eigh's backward
    divides by every gap, so plain eigh gives NaN; the guard gives 0 and the exact vector, and
    no backward step of its own (the stand-in's solve included) gives NaN."""
    d = torch.diag(torch.tensor([1.0, 2, 3, 3, 5, 6, 7, 8, 9], dtype=torch.float64))
    v, grad = _eigvec_grad(d)
    assert v.abs().tolist() == [1.0] + [0.0] * 8
    assert bool(torch.isfinite(grad).all()) and float(grad.abs().max()) == 0.0


# ----------------------------------------------------------- fundamental: _enforce_rank2
def _rank2_grad(f: torch.Tensor):
    """(value, gradient) of ``_enforce_rank2`` under a fixed upstream weighting, in anomaly
    mode."""
    f = f.detach().clone().requires_grad_()
    with _no_nan_anywhere():
        out = _enforce_rank2(f)
        (out * torch.arange(1.0, 10.0, dtype=torch.float64).view(3, 3)).sum().backward()
    return out.detach(), f.grad


def _usv(s, seed: int = 5) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    u, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    v, _ = torch.linalg.qr(torch.randn(3, 3, generator=g, dtype=torch.float64))
    return (u * torch.tensor(s, dtype=torch.float64)) @ v.T


@pytest.mark.parametrize("s", [[4.0, 4.0 - 2e-14, 1e-3], [4.0, 1.0, 1.0 - 2e-14]],
                         ids=["top-pair", "bottom-pair"])
def test_rank2_of_singular_values_tied_up_to_rounding_gets_a_zero_gradient(s):
    """Two singular values 2e-14 apart: within SPECTRUM_TIE of the largest (4: 5.7e-14), far
    outside it of the smallest; either pair (first or second gap) counts. Zero gradient, the
    plain SVD's value bit for bit."""
    f = _usv(s)
    sv = torch.linalg.svdvals(f)
    assert float((sv[:-1] - sv[1:]).min()) <= SPECTRUM_TIE * float(sv[0])
    value, grad = _rank2_grad(f)
    assert torch.equal(value, _svd_rank2(f)[0])
    assert bool(torch.isfinite(grad).all()) and float(grad.abs().max()) == 0.0


def test_rank2_of_an_exactly_repeated_pair_and_of_zero_gets_a_zero_gradient():
    """diag(3, 1, 1) (the smallest singular value repeated: which one to zero is undefined,
    plain SVD's backward is NaN) and the zero matrix (every gap 0 <= 0): zero gradients;
    a distinct diag(3, 2, 1) keeps the SVD's own."""
    for f in (torch.diag(torch.tensor([3.0, 1.0, 1.0], dtype=torch.float64)),
              torch.zeros(3, 3, dtype=torch.float64)):
        plain = f.clone().requires_grad_()
        _svd_rank2(plain)[0].sum().backward()
        assert not bool(torch.isfinite(plain.grad).all())  # what the guard keeps out
        value, grad = _rank2_grad(f)
        assert torch.equal(value, _svd_rank2(f)[0])
        assert bool(torch.isfinite(grad).all()) and float(grad.abs().max()) == 0.0, f
    value, grad = _rank2_grad(torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64)))
    assert value.diagonal().tolist() == [3.0, 2.0, 0.0] and float(grad.abs().max()) > 0.5


# ------------------------------------------------------------- background: _short_reason
def _job(before, removed):
    evidence = {} if removed is None else {"removed_matches": removed}
    return SimpleNamespace(matched=before, stack=SimpleNamespace(scales=[1.0, 0.5]),
                           seg=SimpleNamespace(evidence=evidence))


def test_short_reason_names_the_masks_only_when_they_removed_a_sufficient_texture():
    """min_inliers = 30: a clip with exactly 30 matches before its masks had texture enough
    (MASKED_AWAY, the median before stored); 29 before, no masks, or masks that removed
    nothing: too little texture (and the lk-tracks fallback)."""
    cfg = GeoConConfig()
    need = cfg.background.min_inliers
    assert need == 30
    job = _job(30.0, 12)
    reason = background._short_reason(job, 4.0, cfg)
    assert reason == (f"{MASKED_AWAY}: median 4 of 30 matches per pair left outside the masks "
                      f"at scale 0.5 (< 30); the masks removed 12 matches of the evaluated pairs")
    assert job.seg.evidence["matches_before_masks"] == 30.0
    for before, removed in ((29.0, 12), (None, 12), (40.0, 0), (40.0, None)):
        job = _job(before, removed)
        reason = background._short_reason(job, 4.0, cfg)
        assert reason == ("too little texture: median 4 background matches per pair at scale 0.5 "
                          "(< 30)"), (before, removed)
        assert "matches_before_masks" not in job.seg.evidence


# --------------------------------------------------------------- reader: the range digits
def test_range_message_digits():
    """4 significant digits where they keep an outside value outside ("3.142"), 10 where 7
    do not (the float32 just above 1, with no tolerance: "1.000000119", not "1")."""
    with pytest.raises(ClipTensorError, match=r"got values in \[-0\.5, 3\.142\]$"):
        check_unit_range(torch.tensor([-0.5, 3.14159]))
    above_one = torch.nextafter(torch.tensor(1.0), torch.tensor(2.0))
    with pytest.raises(ClipTensorError, match=r"got values in \[0, 1\.000000119\] \(just"):
        check_unit_range(torch.stack([torch.tensor(0.0), above_one]), tolerance=0.0)


def test_a_void_pair_sends_back_no_gradient_even_where_its_contrast_rounds_to_0():
    """Nearly blank float32 frames 2.55 grey levels apart: the contrast evidence rounds to 0
    (the pair scores 0) while its derivative does not; the pair must send back exactly 0
    (was ~2e-6 through the stand-in set's soft IR)."""
    g = torch.Generator().manual_seed(0)
    tex = torch.rand(1, 3, 32, 48, generator=g, dtype=torch.float64) * 1e-6
    a = (0.50 + tex).float().requires_grad_()
    b = (0.51 + tex).float().requires_grad_()
    s, _, _ = soft.soft_pair_scores(a, b, SoftConsistencyConfig())
    assert s.tolist() == [0.0]
    s.sum().backward()
    assert float(a.grad.abs().max()) == 0.0 and float(b.grad.abs().max()) == 0.0
