"""Autograd audit s31, findings F2, F3 and F6 of the geometry solvers and residuals.

F2: ``fundamental_7pt`` sent NaN gradients to the points of a pair with no valid root (a still,
zero-flow pair), even when the loss read only the valid roots: the singular 7 x 7 solve's and
the closed-form cubic's masked branches had NaN backwards. Rows with no valid root now reach the
differentiable solve as a fixed well-posed 7-point set (a "double where"; their values come from
a detached solve) and the cubic's masked operands are made safe before each op.
F3: the DLT / 8-point solvers chose their eigen-solve path by ``requires_grad``: float64 values
changed with it (DLT up to 2.1e-9) and lost batch invariance, and forward-mode AD (``jvp`` /
``jacfwd``, whose dual tensors do not require grad) of a still pair was NaN. Values now always
come from the padded solve of the default path; the guarded solve only carries the derivative
(a straight-through term), and it runs whenever a derivative may be taken (reverse or forward
mode, torch.func transforms).
F6: an exactly zero residual came back as ``sqrt(finfo.tiny)``, not 0.

Every forward value of the default path (plain tensors, what scoring computes) is compared bit
for bit with the modules of the commit before the fix (skipped where git or that commit is
missing).
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
import warnings
from pathlib import Path
from types import ModuleType
from typing import Dict, Iterator

import pytest
import torch
import torch.autograd.forward_ad as fwAD
from torch.func import jacfwd, jvp

from geocon_torch.geometry import (epipolar_line_distance, epipolar_max_distance,
                                   fundamental_7pt, fundamental_8pt, homography_dlt,
                                   sampson_distance, sampson_distance_normalized,
                                   symmetric_transfer_error, transfer_error)
from geocon_torch.geometry._synthetic import homography_pairs
from geocon_torch.geometry.fundamental import _real_cubic_roots

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))
from benchmarks._dispatch_count import DispatchCounter  # noqa: E402

#: the commit before the fix: its geometry modules give the reference forward values
PRISTINE_COMMIT = "50a6d07823fa282771f172b145025ab9c52554af"
DTYPES = [torch.float32, torch.float64]


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The bit patterns of a float tensor (so -0.0 != 0.0 and NaN == NaN), else the tensor."""
    if not t.is_floating_point():
        return t
    return t.contiguous().view(torch.int64 if t.dtype == torch.float64 else torch.int32)


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(_bits(a), _bits(b))


def _load(name: str, source: str) -> ModuleType:
    """Execute ``source`` as module ``geocon_torch.geometry.<name>`` (relative imports resolve
    to the current package), registered in sys.modules."""
    full = f"geocon_torch.geometry.{name}"
    mod = importlib.util.module_from_spec(importlib.util.spec_from_loader(full, loader=None))
    mod.__package__ = "geocon_torch.geometry"
    sys.modules[full] = mod
    exec(compile(source, f"<{full}>", "exec"), mod.__dict__)
    return mod


@pytest.fixture(scope="module")
def pristine() -> Iterator[Dict[str, ModuleType]]:
    """homography / fundamental / residuals as of PRISTINE_COMMIT."""
    src = {}
    for name in ("homography", "fundamental", "residuals"):
        try:
            src[name] = subprocess.run(
                ["git", "show", f"{PRISTINE_COMMIT}:geocon_torch/geometry/{name}.py"], cwd=REPO,
                capture_output=True, text=True, check=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError):
            pytest.skip(f"git or commit {PRISTINE_COMMIT[:10]} not available")
    names = [f"_pristine31_{n}" for n in src]
    try:
        mods = {"homography": _load(names[0], src["homography"])}
        mods["fundamental"] = _load(names[1], src["fundamental"].replace(
            "from .homography import", f"from .{names[0]} import"))
        mods["residuals"] = _load(names[2], src["residuals"])
        yield mods
    finally:
        for n in names:
            sys.modules.pop(f"geocon_torch.geometry.{n}", None)


def _moving_and_still(p: int = 2, n: int = 7, dtype=torch.float64, seed: int = 0):
    """(x1, x2) (p, n, 2): pair 0 moves by up to 3 px, the others are still (x2 == x1)."""
    g = torch.Generator().manual_seed(seed)
    x1 = torch.rand(p, n, 2, generator=g, dtype=torch.float64) * 96
    x2 = x1.clone()
    x2[0] = x1[0] + torch.rand(n, 2, generator=g, dtype=torch.float64) * 3
    return x1.to(dtype), x2.to(dtype)


def _no_nan_backward():
    """Anomaly mode: any backward step returning NaN raises (a masked NaN included)."""
    warnings.simplefilter("ignore")  # "Anomaly Detection has been enabled"
    return torch.autograd.detect_anomaly(check_nan=True)


# -------------------------------------------------------------- F2: the 7-point solver
@pytest.mark.parametrize("dtype", DTYPES)
def test_7pt_still_pair_gets_a_finite_zero_gradient(dtype):
    """The audit's reproducer: a moving and a still pair, the loss reads the valid roots only.
    No backward step (the stand-in set's included) gives NaN; the still pair (no valid root in
    float64; in float32 its block is singular only up to rounding, three roots) gets a finite
    gradient, exactly 0 where it has no root; the moving pair's is the one it gets alone."""
    x1, x2 = _moving_and_still(dtype=dtype)
    a = x1.clone().requires_grad_()
    with warnings.catch_warnings(), _no_nan_backward():
        F, valid = fundamental_7pt(a, x2)
        F[valid].pow(2).sum().backward()
    assert valid[0].tolist() == [True, True, True] and bool(torch.isfinite(a.grad).all())
    if dtype == torch.float64:
        assert valid[1].tolist() == [False, False, False]
        assert float(a.grad[1].abs().max()) == 0.0
    alone = x1[:1].clone().requires_grad_()
    Fa, va = fundamental_7pt(alone, x2[:1])
    Fa[va].pow(2).sum().backward()
    assert float(alone.grad.abs().max()) > 0
    assert torch.allclose(a.grad[:1], alone.grad, rtol=1e-5 if dtype == torch.float32 else 1e-12)


def test_7pt_still_pairs_give_finite_gradients_through_every_root_slot():
    """A loss over every output (invalid slots included) and over x2: finite, zero for the
    still pairs; forward mode (jvp, jacfwd) of a still pair finite too."""
    x1, x2 = _moving_and_still(p=4)
    b = x2.clone().requires_grad_()
    F, valid = fundamental_7pt(x1, b)
    (F * torch.arange(1.0, 28.0, dtype=F.dtype).view(3, 3, 3)).sum().backward()
    assert bool(torch.isfinite(b.grad).all()) and float(b.grad[1:].abs().max()) == 0.0
    assert float(b.grad[0].abs().max()) > 0
    still = x1[1:2]
    _, tangent = jvp(lambda x: fundamental_7pt(x, still)[0], (still,), (torch.ones_like(still),))
    assert bool(torch.isfinite(tangent).all()) and float(tangent.abs().max()) == 0.0
    jac = jacfwd(lambda x: fundamental_7pt(x, still)[0])(still)
    assert bool(torch.isfinite(jac).all())


def test_7pt_gradient_of_generic_points_is_right():
    """gradcheck (float64) through the valid roots of pairs with one and three real roots."""
    g = torch.Generator().manual_seed(4)
    x1 = torch.rand(4, 7, 2, generator=g, dtype=torch.float64) * 96
    x2 = x1 + torch.randn(4, 7, 2, generator=g, dtype=torch.float64) * 4
    _, valid = fundamental_7pt(x1, x2)
    assert sorted(set(valid.sum(-1).tolist())) == [1, 3]

    def f(a, b):
        F, _ = fundamental_7pt(a, b)
        return F[valid]

    assert torch.autograd.gradcheck(f, (x1.clone().requires_grad_(), x2.clone().requires_grad_()),
                                    eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
def test_7pt_values_are_bit_identical_with_and_without_autograd(dtype, pristine):
    """Random 7-point batches with and without still pairs (and a NaN point): F and valid of
    the plain call, the requires-grad call and jvp are those of the pristine module, bit for
    bit."""
    g = torch.Generator().manual_seed(7)
    x1 = (torch.rand(64, 7, 2, generator=g, dtype=torch.float64) * 96).to(dtype)
    x2 = x1 + torch.randn(64, 7, 2, generator=g, dtype=torch.float64).to(dtype) * 3
    x2[5::6] = x1[5::6]
    x2[3, 2, 0] = float("nan")
    for a, b in ((x1, x2), (x1[:1], x2[:1]), (x1[5:6], x2[5:6])):
        ref_F, ref_v = pristine["fundamental"].fundamental_7pt(a, b)
        F, v = fundamental_7pt(a, b)
        Fg, vg = fundamental_7pt(a.clone().requires_grad_(), b)
        (Fj, vj), _ = jvp(lambda x: fundamental_7pt(x, b), (a,), (torch.ones_like(a),))
        for got, val in ((F, v), (Fg.detach(), vg), (Fj, vj)):
            assert _same_bits(got, ref_F) and torch.equal(val, ref_v)


def test_7pt_default_path_dispatches_the_pristine_ops(pristine):
    """Plain tensors (scoring, RANSAC): the same aten ops as before the fix, one by one."""
    x1, x2 = _moving_and_still(p=3)
    counts = []
    for fn in (pristine["fundamental"].fundamental_7pt, fundamental_7pt):
        fn(x1, x2)  # module constants cached (constant_on)
        with DispatchCounter() as c:
            fn(x1, x2)
        counts.append(dict(c.by_op))
    assert counts[0] == counts[1]


def test_safe_cubic_roots_have_finite_gradients_at_degenerate_polynomials():
    """The cubic's masked operands are safe: a triple root (t^3), p = 0 (t^3 + 1), a double root
    (t^3 - 3t + 2: disc = 0), c3 = 0 and the zero polynomial give finite gradients in anomaly
    mode; the valid roots are those of the plain closed form."""
    coeffs = torch.tensor([[1.0, 0, 0, 0], [1.0, 0, 0, 1], [1.0, 0, -3, 2], [0.0, 1, 2, 3],
                           [0.0, 0, 0, 0], [1.0, -6, 11, -6]], dtype=torch.float64)
    plain, pvalid = _real_cubic_roots(*coeffs.unbind(-1))
    c = coeffs.clone().requires_grad_()
    with warnings.catch_warnings(), _no_nan_backward():
        roots, valid = _real_cubic_roots(*c.unbind(-1), safe=True)
        (roots * torch.arange(1.0, 4.0, dtype=roots.dtype)).sum().backward()
    assert torch.equal(valid, pvalid) and torch.equal(roots.detach(), plain)
    assert bool(torch.isfinite(c.grad).all())
    assert torch.allclose(plain[-1].sort().values,
                          torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))


# ------------------------------------------------------- F3: DLT and 8-point eigen-solves
def _f3b_points():
    d = homography_pairs(6, 300, outlier_ratio=0.3, noise_px=0.5, seed=0, size=(64, 96),
                         dtype=torch.float64)
    return d["x1"], d["x2"]


@pytest.mark.parametrize("solver", [homography_dlt, fundamental_8pt])
def test_solver_values_do_not_depend_on_autograd(solver):
    """The audit's F3b batch (float64): the requires-grad call, each pair alone with grad and
    jvp give the plain call's values bit for bit (DLT differed by up to 2.1e-9)."""
    x1, x2 = _f3b_points()
    w = torch.rand(x1.shape[:2], generator=torch.Generator().manual_seed(2), dtype=x1.dtype)
    for kw in ({}, {"weights": w}):
        plain = solver(x1, x2, **kw)
        graded = solver(x1.clone().requires_grad_(), x2, **kw)
        assert graded.requires_grad and _same_bits(graded.detach(), plain)
        alone = torch.cat([solver(x1[i:i + 1].clone().requires_grad_(), x2[i:i + 1],
                                  **{k: v[i:i + 1] for k, v in kw.items()}).detach()
                           for i in range(6)])
        assert _same_bits(alone, plain)
        value, _ = jvp(lambda a: solver(a, x2, **kw), (x1,), (torch.ones_like(x1),))
        assert _same_bits(value, plain)


@pytest.mark.parametrize("dtype", DTYPES)
def test_solver_default_path_is_pristine(dtype, pristine):
    """Plain tensors: DLT and 8-point values (moving and still pairs, weighted or not) and the
    dispatched ops are those of the module before the fix."""
    x1, x2 = _f3b_points()
    x1, x2 = x1.to(dtype), x2.to(dtype)
    x2[1], x2[4] = x1[1], x1[4]
    w = torch.rand(x1.shape[:2], generator=torch.Generator().manual_seed(2), dtype=dtype)
    w[:, ::5] = 0
    for new, module in ((homography_dlt, "homography"), (fundamental_8pt, "fundamental")):
        name = new.__name__
        old = getattr(pristine[module], name)
        for kw in ({}, {"weights": w}):
            new(x1, x2, **kw), old(x1, x2, **kw)  # module constants cached (constant_on)
            with DispatchCounter() as c_new:
                v_new = new(x1, x2, **kw)
            with DispatchCounter() as c_old:
                v_old = old(x1, x2, **kw)
            assert _same_bits(v_new, v_old), name
            assert dict(c_new.by_op) == dict(c_old.by_op), name


@pytest.mark.parametrize("solver", [homography_dlt, fundamental_8pt])
def test_forward_mode_of_still_pairs_is_finite(solver):
    """Zero flow: jvp and jacfwd finite (the audit: NaN for 2 of 8 seeds with the 8-point),
    also in a plain forward_ad.dual_level; the still pair's reverse gradient is finite too."""
    for seed in range(8):
        x1 = torch.rand(1, 12, 2, generator=torch.Generator().manual_seed(seed),
                        dtype=torch.float64) * 96

        def loss(a):
            return solver(a, x1)[0, 0, 1]

        _, tangent = jvp(loss, (x1,), (torch.ones_like(x1),))
        assert bool(torch.isfinite(tangent)), seed
        assert bool(torch.isfinite(jacfwd(loss)(x1)).all()), seed
        with fwAD.dual_level():
            out = solver(fwAD.make_dual(x1, torch.ones_like(x1)), x1)
            assert bool(torch.isfinite(fwAD.unpack_dual(out).tangent).all()), seed
        xr = x1.clone().requires_grad_()
        loss(xr).backward()
        assert bool(torch.isfinite(xr.grad).all()), seed


@pytest.mark.parametrize("solver", [homography_dlt, fundamental_8pt])
def test_forward_mode_of_moving_pairs_matches_reverse_mode(solver):
    x1, x2 = _f3b_points()
    x1, x2 = x1[:2, :40], x2[:2, :40]
    up = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(5), dtype=x1.dtype)
    t = torch.randn(x1.shape, generator=torch.Generator().manual_seed(6), dtype=x1.dtype)

    def loss(a):
        return (solver(a, x2) * up).sum()

    _, tangent = jvp(loss, (x1,), (t,))
    xr = x1.clone().requires_grad_()
    loss(xr).backward()
    assert float(tangent) == pytest.approx(float((xr.grad * t).sum()), rel=1e-9)


# --------------------------------------------------------------- F6: a zero residual is 0
def _translation_case(dtype):
    """F of a camera translated along x, a match exactly on its epipolar line, and H = I."""
    F = torch.tensor([[[0.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]], dtype=dtype)
    x1 = torch.tensor([[[10.0, 20.0], [30.0, 40.0]]], dtype=dtype)
    x2 = torch.tensor([[[50.0, 20.0], [70.0, 43.0]]], dtype=dtype)
    return F, x1, x2, torch.eye(3, dtype=dtype)[None]


@pytest.mark.parametrize("dtype", DTYPES)
def test_an_exactly_zero_residual_is_zero_with_a_zero_gradient(dtype):
    F, x1, x2, eye = _translation_case(dtype)
    for fn, args in ((sampson_distance, (F, x1, x2)), (epipolar_max_distance, (F, x1, x2)),
                     (epipolar_line_distance, (F, x1, x2)),
                     (transfer_error, (eye, x1, x1)), (symmetric_transfer_error, (eye, x1, x1))):
        pts = args[1].clone().requires_grad_()
        r = fn(args[0], pts, args[2])
        assert _bits(r[0, 0].detach()).item() == 0, fn.__name__  # +0.0, not sqrt(finfo.tiny)
        assert float(r[0, 1].detach()) > 0.1 or fn in (transfer_error, symmetric_transfer_error)
        r[0, 0].backward()
        assert bool(torch.isfinite(pts.grad).all()) and float(pts.grad.abs().max()) == 0.0


@pytest.mark.parametrize("dtype", DTYPES)
def test_residuals_other_than_zero_are_pristine(dtype, pristine):
    """Random models and points, a zero F (no epipolar line: sqrt(finfo.max), gradient 0), a
    NaN point (NaN stays NaN), tiny residuals: every value but an exact 0 is the pristine
    one bit for bit."""
    g = torch.Generator().manual_seed(11)
    x1 = (torch.rand(4, 50, 2, generator=g, dtype=torch.float64) * 96).to(dtype)
    x2 = x1 + (torch.randn(4, 50, 2, generator=g, dtype=torch.float64) * 2).to(dtype)
    x2[:, :5] = x1[:, :5]  # zero transfer residuals under H = I
    x2[0, 7] = x1[0, 7] + torch.tensor([1e-18, 0.0], dtype=dtype)
    x2[1, 9, 0] = float("nan")
    F = fundamental_8pt(x1, x2)
    F[2] = 0
    H = homography_dlt(x1, x2)
    H[3] = torch.eye(3, dtype=dtype)
    old = pristine["residuals"]
    for fn, model in ((sampson_distance, F), (epipolar_max_distance, F),
                      (epipolar_line_distance, F), (sampson_distance_normalized, F),
                      (transfer_error, H), (symmetric_transfer_error, H)):
        name = fn.__name__
        new_r, old_r = fn(model, x1, x2), getattr(old, name)(model, x1, x2)
        zero = new_r == 0
        assert _same_bits(torch.where(zero, old_r, new_r), old_r), name
        tiny_root = torch.finfo(dtype).tiny ** 0.5
        assert bool((old_r[zero] <= 1.01 * tiny_root).all()), name
    assert int((transfer_error(H, x1, x2)[3] == 0).sum()) == 5
