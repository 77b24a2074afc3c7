"""Fundamental-matrix solvers: weighted normalised 8-point and the 7-point solver (all roots).

Convention: ``x2^T F x1 = 0`` (pixels). Both solve in Hartley-normalised coordinates
(``F = T2^T F_n T1``) and return F with unit Frobenius norm.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as tnf

from .._precision import scoring_precision
from .._tensor_utils import constant_on, finite
from ..errors import ShapeError
from ._reduce import padded_gram
from .homography import (SPECTRUM_TIE, _MONO, _autograd_active, _float64_bases, _monomials,
                         _smallest_eigvec, _value_with_grad_of)
from .normalization import (_drop_unweighted, _float64_pair, _normalize_points,
                            _similarity_matrix)

_EIGHT_IDX = torch.tensor([_MONO[r // 3][c // 3] * 6 + _MONO[r % 3][c % 3]
                           for r in range(9) for c in range(9)])


def _unit_fro(M: torch.Tensor) -> torch.Tensor:
    """(..., 3, 3) matrices scaled to unit Frobenius norm."""
    return M / M.norm(dim=(-2, -1), keepdim=True).clamp_min(torch.finfo(M.dtype).tiny)


def _svd_rank2(F: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`_enforce_rank2` by a plain SVD, and the singular values (..., 3)."""
    U, S, Vh = torch.linalg.svd(F)
    US = U * tnf.pad(S[..., :2], (0, 1)).unsqueeze(-2)  # the smallest singular value zeroed
    if F.dim() == 2:
        return US @ Vh, S
    return torch.bmm(US.reshape(-1, 3, 3), Vh.reshape(-1, 3, 3)).view(F.shape), S


#: a 3 x 3 stand-in with distinct singular values (3, 2, 1) for :func:`_enforce_rank2`'s grad
#: branch
_DISTINCT_SVD = torch.diag(torch.tensor([3.0, 2.0, 1.0], dtype=torch.float64))


def _enforce_rank2(F: torch.Tensor) -> torch.Tensor:
    """Closest rank-2 matrix (Frobenius) of (..., 3, 3), via SVD.

    Where a derivative may be taken (:func:`~geocon_torch.geometry.homography._autograd_active`:
    reverse or forward mode, torch.func transforms) a matrix with two singular values equal
    (up to :data:`~geocon_torch.geometry.homography.SPECTRUM_TIE` of the largest, e.g. the
    skew-symmetric F of zero flow: (s, s, 0)), whose SVD derivative is NaN, gets a zero
    derivative (a "double where": it is swapped for a fixed matrix inside the SVD that carries
    the derivative). Values always come from a detached plain SVD (a straight-through term),
    so they are bit for bit those of the default path; every other matrix's derivative is the
    SVD's own."""
    if not _autograd_active(F):
        return _svd_rank2(F)[0]
    value, S = _svd_rank2(F.detach())
    bad = ((S[..., :-1] - S[..., 1:]) <= SPECTRUM_TIE * S[..., :1]).any(-1)  # (...,)
    safe = torch.where(bad[..., None, None], constant_on(_DISTINCT_SVD, F.device, F.dtype), F)
    return _value_with_grad_of(value, torch.where(bad[..., None, None], value,
                                                  _svd_rank2(safe)[0]))


def _fundamental_8pt_normalized(x1n: torch.Tensor, x2n: torch.Tensor, w: torch.Tensor,
                                mono1: Optional[torch.Tensor] = None,
                                mono2: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Weighted 8-point on normalised points: x (..., N, 2), w (..., N) -> rank-2 F_n in the
    points' dtype.

    Rows are ``kron(X2, X1)``, so ``M[(a, i), (b, j)] = sum w X2_a X2_b X1_i X1_j``: the 36
    distinct sums come from one small batched GEMM over the monomials of X1 and X2
    (``mono1``, ``mono2``: precomputed ``_monomials`` of the points, best in float64). The
    sums, the eigen-solve and the rank-2 projection run in float64 whatever the points' dtype
    (a float32 normal matrix: fit error ~1e-3 px on noise-free float32 4K points, ~1e-5 px
    with float64 sums).
    """
    mono1, mono2 = _float64_bases(x1n, x2n, mono1, mono2, _monomials)
    T = padded_gram(mono2 * w.unsqueeze(-2), mono1)  # (..., 6, 6) float64
    M = T.flatten(-2)[..., constant_on(_EIGHT_IDX, T.device)].unflatten(-1, (9, 9))
    Fn = _smallest_eigvec(M).reshape(*M.shape[:-2], 3, 3)
    return _unit_fro(_enforce_rank2(Fn)).to(x1n.dtype)


def _det3(M: torch.Tensor) -> torch.Tensor:
    """Determinants of (..., 3, 3) matrices (cofactor expansion along the first row)."""
    m00, m01, m02, m10, m11, m12, m20, m21, m22 = M.flatten(-2).unbind(-1)
    return (m00 * (m11 * m22 - m12 * m21) - m01 * (m10 * m22 - m12 * m20)
            + m02 * (m10 * m21 - m11 * m20))


def _sqrt_pos(x: torch.Tensor) -> torch.Tensor:
    """``sqrt(x)`` where ``x > 0``, ``x`` elsewhere (so sqrt(+-0) bit for bit, NaN stays NaN),
    its derivative finite everywhere: sqrt never sees a value <= 0."""
    pos = x > 0
    return torch.where(pos, torch.sqrt(torch.where(pos, x, torch.ones_like(x))), x)


def _cbrt_abs(x: torch.Tensor, safe: bool) -> torch.Tensor:
    """``|x|^(1/3)``; with ``safe`` its derivative is finite at 0 (pow never sees 0)."""
    ax = x.abs()
    if not safe:
        return ax.pow(1.0 / 3.0)
    pos = ax > 0
    return torch.where(pos, torch.where(pos, ax, torch.ones_like(ax)).pow(1.0 / 3.0), ax)


def _real_cubic_roots(c3: torch.Tensor, c2: torch.Tensor, c1: torch.Tensor, c0: torch.Tensor,
                      safe: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """Real roots of ``c3 t^3 + c2 t^2 + c1 t + c0`` in closed form (Cardano / trigonometric),
    batched. Returns (roots (..., 3), valid (..., 3)); invalid slots hold 0.

    ``safe`` (the 7-point solver's derivative carrier): the masked operands are made safe
    before each op (no division by 0, no sqrt / cube root at 0, no acos at +-1), so the
    branches a ``where`` drops send no NaN back. The selected branches compute the same
    values; only an operand exactly on such a point (a double or triple root) gets a finite
    (or zero) derivative instead of an infinite one. Without ``safe``: the plain closed form
    (the default path's values and ops)."""
    scale = torch.stack([c3.abs(), c2.abs(), c1.abs(), c0.abs()], -1).amax(-1)
    ok = c3.abs() > 1e-12 * scale
    c3s = torch.where(ok, c3, torch.ones_like(c3))
    a, b, c = c2 / c3s, c1 / c3s, c0 / c3s
    p = b - a * a / 3.0
    q = 2.0 * a ** 3 / 27.0 - a * b / 3.0 + c
    disc = (q / 2.0) ** 2 + (p / 3.0) ** 3
    one = disc > 0
    # one real root: Cardano
    sq = _sqrt_pos(disc) if safe else torch.sqrt(disc.clamp_min(0))
    t1 = torch.sign(-q / 2 + sq) * _cbrt_abs(-q / 2 + sq, safe) \
        + torch.sign(-q / 2 - sq) * _cbrt_abs(-q / 2 - sq, safe)
    # three real roots: trigonometric form (p <= 0 here)
    pm = torch.where(one, -torch.ones_like(p), p.clamp_max(0))
    r = 2.0 * (_sqrt_pos(-pm / 3.0) if safe else torch.sqrt(-pm / 3.0))
    r_s = torch.where(r > 0, r, torch.ones_like(r))
    den = pm * r_s
    if safe:
        den = torch.where(den != 0, den, torch.ones_like(den))
    arg = (3.0 * q / den).clamp(-1.0, 1.0)  # = 3q/(2p) sqrt(-3/p)
    arg = torch.where(r > 0, arg, torch.zeros_like(arg))
    if safe:  # acos at +-1 (and NaN) from a detached copy: a zero derivative there
        inside = arg.abs() < 1.0
        phi = torch.where(inside, torch.acos(torch.where(inside, arg, torch.zeros_like(arg))),
                          torch.acos(arg.detach())) / 3.0
    else:
        phi = torch.acos(arg) / 3.0
    ks = torch.arange(3, dtype=c3.dtype, device=c3.device) * (2.0 * math.pi / 3.0)
    t3 = r.unsqueeze(-1) * torch.cos(phi.unsqueeze(-1) - ks)
    t = torch.where(one.unsqueeze(-1), torch.stack([t1, t1, t1], -1), t3)
    roots = t - (a / 3.0).unsqueeze(-1)
    # one Newton polish step on the monic polynomial
    f = ((roots + a.unsqueeze(-1)) * roots + b.unsqueeze(-1)) * roots + c.unsqueeze(-1)
    df = (3 * roots + 2 * a.unsqueeze(-1)) * roots + b.unsqueeze(-1)
    step = torch.where(df.abs() > 1e-12, f / torch.where(df.abs() > 1e-12, df, torch.ones_like(df)),
                       torch.zeros_like(df))
    roots = roots - step
    valid = torch.stack([ok, ok & ~one, ok & ~one], -1) & finite(roots)
    return torch.where(valid, roots, torch.zeros_like(roots)), valid


#: a fixed well-posed 7-point set in normalised coordinates (x1 rows, then x2 rows): a
#: well-conditioned 7 x 7 block (condition number 30) and three distinct real roots, for the
#: 7-point solver's derivative carrier (:func:`_seven_point_normalized`)
_SEVEN_STAND_IN = torch.tensor(
    [[[1.2, -1.0], [-1.2, 0.8], [-0.4, -1.2], [0.5, 0.3], [0.8, 0.5], [1.1, 0.6], [-0.6, 0.8]],
     [[1.5, -0.7], [-1.4, 0.6], [-0.1, -1.2], [0.5, 0.7], [0.3, 0.4], [1.8, 1.0], [-0.9, 0.9]]],
    dtype=torch.float64)


def _seven_point_normalized(x1n: torch.Tensor, x2n: torch.Tensor
                            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """7-point solver on (normalised) points (..., 7, 2) -> F (..., 3, 3, 3), valid (..., 3).

    Where a derivative may be taken (:func:`~geocon_torch.geometry.homography._autograd_active`)
    the values still come from the plain solve (detached, bit for bit the default path's); the
    derivative comes from a second solve (a straight-through term) in which a row with no
    valid root (e.g. a still pair: a singular 7 x 7 block, whose solve's backward is NaN) sees
    the fixed well-posed :data:`_SEVEN_STAND_IN` set instead (a "double where": an exact zero
    derivative) and the cubic's masked operands are safe (``_real_cubic_roots(safe=True)``);
    invalid root slots get a zero derivative.
    """
    if not _autograd_active(x1n, x2n):
        return _seven_point_solve(x1n, x2n)
    value, valid = _seven_point_solve(x1n.detach(), x2n.detach())
    bad = ~valid.any(-1)[..., None, None]  # (..., 1, 1)
    stand_in = constant_on(_SEVEN_STAND_IN, x1n.device, x1n.dtype)
    carrier, _ = _seven_point_solve(torch.where(bad, stand_in[0], x1n),
                                    torch.where(bad, stand_in[1], x2n), safe=True)
    carrier = torch.where(valid[..., None, None], carrier, value)
    return _value_with_grad_of(value, carrier), valid


def _seven_point_solve(x1n: torch.Tensor, x2n: torch.Tensor, safe: bool = False
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`_seven_point_normalized` without its derivative guard (``safe``: the cubic's
    masked operands made safe, :func:`_real_cubic_roots`).

    The 2-D null space of the 7 x 9 system is taken by fixing ``(f8, f9)`` to (1, 0) and (0, 1)
    and solving the remaining 7 x 7 block (float64); ``det(F2 + t (F1 - F2)) = 0`` is solved
    in closed form, in the reversed parameterisation when that is better conditioned.
    """
    dt = x1n.dtype
    X1 = torch.cat([x1n, torch.ones_like(x1n[..., :1])], -1).to(torch.float64)
    X2 = torch.cat([x2n, torch.ones_like(x2n[..., :1])], -1).to(torch.float64)
    A = (X2.unsqueeze(-1) * X1.unsqueeze(-2)).flatten(-2)  # (..., 7, 9) rows kron(X2, X1)
    sol, info = torch.linalg.solve_ex(A[..., :7], -A[..., 7:], check_errors=False)  # (..., 7, 2)
    ok = (info == 0) & finite(sol).flatten(-2).all(-1)
    sol = torch.where(ok[..., None, None], sol, torch.zeros_like(sol))
    eye2 = torch.eye(2, dtype=sol.dtype, device=sol.device).expand(*sol.shape[:-2], 2, 2)
    basis = torch.cat([sol, eye2], -2)  # (..., 9, 2)
    F1 = _unit_fro(basis[..., 0].reshape(*basis.shape[:-2], 3, 3))
    F2 = _unit_fro(basis[..., 1].reshape(*basis.shape[:-2], 3, 3))
    D = F1 - F2
    # det(F2 + t D) = c3 t^3 + c2 t^2 + c1 t + c0, from 4 evaluations
    p0, p1, pm1, p2 = _det3(torch.stack([F2, F2 + D, F2 - D, F2 + 2 * D])).unbind(0)
    c0 = p0
    c2 = 0.5 * (p1 + pm1) - c0
    odd = 0.5 * (p1 - pm1)  # c1 + c3
    c3 = (0.5 * (p2 - c0 - 4 * c2) - odd) / 3.0
    c1 = odd - c3
    rev = c0.abs() > c3.abs()  # solve for u = 1/t: F ~ u F2 + D
    roots, rvalid = _real_cubic_roots(torch.where(rev, c0, c3), torch.where(rev, c1, c2),
                                      torch.where(rev, c2, c1), torch.where(rev, c3, c0), safe)
    t = roots[..., None, None]
    one = torch.ones_like(t)
    r4 = rev[..., None, None, None]
    Fs = _unit_fro(torch.where(r4, t, one) * F2.unsqueeze(-3)
                   + torch.where(r4, one, t) * D.unsqueeze(-3))
    valid = rvalid & ok.unsqueeze(-1) & finite(Fs).flatten(-2).all(-1)
    Fs = torch.where(valid[..., None, None], Fs, torch.zeros_like(Fs))
    return Fs.to(dt), valid


def _normalize_pair(x1: torch.Tensor, x2: torch.Tensor, w: torch.Tensor):
    x1n, c1, s1 = _normalize_points(_drop_unweighted(x1, w), w)
    x2n, c2, s2 = _normalize_points(_drop_unweighted(x2, w), w)
    return x1n, x2n, _similarity_matrix(c1, s1), _similarity_matrix(c2, s2)


@scoring_precision
def fundamental_8pt(x1: torch.Tensor, x2: torch.Tensor,
                    weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""Weighted normalised 8-point fundamental matrix, rank 2 enforced, batched over pairs.

    Minimises :math:`\sum_i w_i (\hat x_{2,i}^\top F_n \hat x_{1,i})^2`, ``||F_n|| = 1``, in
    Hartley-normalised coordinates (normalisation weighted by ``weights``), projects F_n to rank 2
    (SVD) and denormalises ``F = T2^T F_n T1``.

    Convention: ``x2^T F x1 = 0``; pixels.

    Precision: normalisation, normal equations, eigen-solve, rank-2 projection and
    denormalisation run in float64 and F comes back in the points' dtype (float32 with
    float64: float64); the caller's autocast and reduced float32 matmul precision (TF32,
    bfloat16) do not apply inside (:func:`geocon_torch._precision.scoring_precision`). On
    noise-free float32 points at 4K the fit is then as close as a float32 F can be (~3e-5 px
    median Sampson; a float32 normal matrix gave ~1e-3 px).

    Args:
        x1, x2: (P, N, 2) pixel points, N >= 8.
        weights: (P, N) tensor of non-negative weights (0 = ignored, e.g. padding; a negative
            weight counts as 0); all ones when None. An entry whose weight or point (in x1
            or x2) is NaN / inf is ignored too (weight 0; masked without a host sync).

    Returns:
        F: (P, 3, 3), rank 2, unit Frobenius norm. Pairs with fewer than 8 weighted points give
        an arbitrary finite matrix.

    Raises:
        ShapeError: x1 / x2 not (P, N, 2) float32 / float64 of one shape, weights not (P, N).
        ArgumentTypeError: weights neither a tensor nor None.
    """
    x1, x2, w, dt = _float64_pair(x1, x2, weights)
    x1n, x2n, T1, T2 = _normalize_pair(x1, x2, w)
    Fn = _fundamental_8pt_normalized(x1n, x2n, w)
    return _unit_fro(T2.transpose(-1, -2) @ Fn @ T1).to(dt)


@scoring_precision
def fundamental_7pt(x1: torch.Tensor, x2: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""7-point fundamental matrices: all real solutions of ``det(F) = 0`` (up to 3 per pair).

    Convention: ``x2^T F x1 = 0``; pixels. Solved in float64, returned in the points' dtype
    (float32 with float64: float64); the caller's autocast and reduced float32 matmul
    precision do not apply inside (:func:`geocon_torch._precision.scoring_precision`).

    Args:
        x1, x2: (P, 7, 2) pixel points.

    Returns:
        F: (P, 3, 3, 3): F[:, k] is the k-th solution (unit Frobenius norm, zeros where invalid).
        valid: (P, 3) bool, which solutions are real (1 or 3 per non-degenerate pair).
    """
    # drop_nonfinite=False: a NaN point gives no valid root
    x1, x2, w, dt = _float64_pair(x1, x2, None, drop_nonfinite=False)
    if x1.shape[1] != 7:
        raise ShapeError(f"fundamental_7pt needs exactly 7 points, got x1 {tuple(x1.shape)}")
    x1n, x2n, T1, T2 = _normalize_pair(x1, x2, w)
    Fn, valid = _seven_point_normalized(x1n, x2n)
    F = _unit_fro(T2.transpose(-1, -2).unsqueeze(1) @ Fn @ T1.unsqueeze(1))
    return torch.where(valid[..., None, None], F, torch.zeros_like(F)).to(dt), valid
