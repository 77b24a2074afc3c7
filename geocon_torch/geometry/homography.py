"""Homography solvers: weighted least-squares DLT (any N >= 4) and the batched 4-point solver.

Convention: ``x2 ~ H x1`` (homogeneous, pixels). Solved in Hartley-normalised coordinates and
denormalised as ``H = T2^-1 H_n T1``; returned with ``H[2, 2] = 1`` where possible.
"""
from __future__ import annotations

import functools
from typing import Callable, Optional, Tuple

import torch
import torch.autograd.forward_ad as fwAD
import torch.nn.functional as tnf
from torch._C._functorch import is_functorch_wrapped_tensor

from .._precision import scoring_precision
from .._tensor_utils import constant_on, finite
from ._reduce import padded_gram
from .normalization import (_drop_unweighted, _float64_pair, _normalize_points,
                            _similarity_inverse, _similarity_matrix)


def _dlt_rows(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """The two DLT equations of each correspondence: (..., N, 2, 9)."""
    x, y = x1[..., 0], x1[..., 1]
    u, v = x2[..., 0], x2[..., 1]
    z = torch.zeros_like(x)
    o = torch.ones_like(x)
    r1 = torch.stack([-x, -y, -o, z, z, z, u * x, u * y, u], -1)
    r2 = torch.stack([z, z, z, -x, -y, -o, v * x, v * y, v], -1)
    return torch.stack([r1, r2], -2)


def _homogeneous_t(x: torch.Tensor) -> torch.Tensor:
    """(..., N, 2) points -> (..., 3, N) homogeneous, transposed, contiguous."""
    return tnf.pad(x.transpose(-1, -2), (0, 0, 0, 1), value=1.0)


_MONO = ((0, 1, 2), (1, 3, 4), (2, 4, 5))  # X_i X_j -> index into _monomials


def _monomials(x: torch.Tensor) -> torch.Tensor:
    """Degree-2 monomials of homogeneous (x, y, 1): (..., N, 2) -> (..., 6, N) in the order
    (xx, xy, x, yy, y, 1), so that ``X_i X_j = mono[_MONO[i][j]]``."""
    px, py = x[..., 0], x[..., 1]
    return torch.stack([px * px, px * py, px, py * py, py, torch.ones_like(px)], -2)


def _dlt_index() -> Tuple[torch.Tensor, torch.Tensor]:
    """Gather index / sign building the DLT normal matrix from the (4 x 6) weighted moments."""
    block = {(0, 0): (0, 1.0), (1, 1): (0, 1.0), (0, 2): (1, -1.0), (2, 0): (1, -1.0),
             (1, 2): (2, -1.0), (2, 1): (2, -1.0), (2, 2): (3, 1.0)}
    idx, sgn = [], []
    for r in range(9):
        for c in range(9):
            k, sg = block.get((r // 3, c // 3), (None, 0.0))
            idx.append(24 if k is None else k * 6 + _MONO[r % 3][c % 3])
            sgn.append(sg)
    return torch.tensor(idx), torch.tensor(sgn)


_DLT_IDX, _DLT_SGN = _dlt_index()
@functools.lru_cache(maxsize=None)
def _pad_diag(n: int) -> torch.Tensor:
    """(16, 16) bool: the eigen-solver's padded diagonal from entry ``n`` on (host, cached)."""
    with torch.inference_mode(False):  # usable by autograd later even if built inside one
        d = torch.arange(_EIG_SIZE)
        return (d.view(-1, 1) == d.view(1, -1)) & (d >= n)


def _constant(name: str, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """The module constant ``name`` (_DLT_IDX, _DLT_SGN, or the (16, 16) bool mask of the
    eigen-solver's padded diagonal, "pad_diag<n>") on ``device`` in ``dtype``, cached
    (:func:`constant_on`)."""
    t = _pad_diag(int(name[8:])) if name.startswith("pad_diag") else {
        "dlt_idx": _DLT_IDX, "dlt_sgn": _DLT_SGN}[name]
    return constant_on(t, device, dtype)


_EIG_SIZE = 16  # 16 x 16 float64 = 2048 bytes: every matrix of a batch starts 64-byte aligned


#: spacing, relative to the largest eigenvalue / singular value, up to which two of them count as
#: equal in the solvers' grad branches: a spectrum with such a pair makes eigh's / svd's backward
#: divide by (nearly) zero (NaN or a rounding-noise-sized gradient), so it gets a zero gradient
SPECTRUM_TIE = 64 * torch.finfo(torch.float64).eps


@functools.lru_cache(maxsize=None)
def _distinct_spectrum(n: int) -> torch.Tensor:
    """(n, n) float64 diag(1, ..., n): a stand-in with a distinct spectrum (host, cached)."""
    with torch.inference_mode(False):
        return torch.diag(torch.arange(1.0, n + 1.0, dtype=torch.float64))


def _autograd_active(*tensors: torch.Tensor) -> bool:
    """Whether a derivative may be taken through any of ``tensors``: reverse mode
    (``requires_grad``; also inside ``torch.func.grad`` / ``vjp``), a ``torch.func`` transform
    (``jvp``, ``jacfwd``, ``vmap``: functorch-wrapped tensors, whose ``requires_grad`` is False
    in forward mode) or an open ``torch.autograd.forward_ad.dual_level`` (plain dual tensors do
    not require grad either). Flag reads only: no tensor op, no host sync, so plain tensors
    (scoring's, grad mode on or off) take the solvers' default path at no cost. While
    ``torch.compile`` traces, the functorch check is left out (Dynamo cannot trace it: a graph
    break)."""
    if any(t.requires_grad for t in tensors) or getattr(fwAD, "_current_level", -1) >= 0:
        return True
    return (not torch.compiler.is_compiling()
            and any(is_functorch_wrapped_tensor(t) for t in tensors))


def _value_with_grad_of(value: torch.Tensor, carrier: torch.Tensor) -> torch.Tensor:
    """``value`` bit for bit (its sign of zero included) with the derivative of ``carrier``, a
    tensor of the same shape holding the same numbers up to rounding (a straight-through term:
    ``value - (carrier.detach() - carrier)``, where the bracket is an exact +0; a non-finite
    carrier entry is masked to 0 there, with a zero derivative). Works in reverse and forward
    mode: ``value`` is detached, so its own solve's derivative is never formed."""
    d = carrier.detach() - carrier
    return value.detach() - torch.where(finite(d), d, torch.zeros_like(d))


def _smallest_eigvec_grad(M64: torch.Tensor) -> torch.Tensor:
    """The derivative carrier of :func:`_smallest_eigvec` (its value comes from the padded
    solve): the smallest eigenvector of symmetric float64 (..., n, n) matrices by an unpadded
    ``eigh`` (the padding's repeated eigenvalues would make eigh's backward NaN), with a
    degenerate spectrum made gradient-safe (a "double where").

    ``torch.linalg.eigh``'s backward divides by every eigenvalue gap: a repeated eigenvalue
    (e.g. the DLT / 8-point normal matrices of zero flow, ``x2 == x1``) gives NaN for the whole
    matrix, and a smallest eigenvalue tied up to rounding a gradient of rounding noise. Such a
    matrix (gap 0 anywhere, or the smallest gap within :data:`SPECTRUM_TIE` of the largest
    eigenvalue) is swapped for a fixed matrix with a distinct spectrum inside the solve that
    carries the derivative, so it gets an exact zero derivative (reverse and forward mode); its
    entry is a detached solve of the matrix itself. Every other matrix's derivative is
    ``eigh``'s own. Returns (..., n) float64."""
    lam, vecs = torch.linalg.eigh(M64.detach())
    gaps = lam[..., 1:] - lam[..., :-1]
    tie = SPECTRUM_TIE * lam.abs().amax(-1)
    bad = (gaps == 0).any(-1) | (gaps[..., 0] <= tie)  # (...,)
    stand_in = constant_on(_distinct_spectrum(int(M64.shape[-1])), M64.device, torch.float64)
    safe = torch.where(bad[..., None, None], stand_in, M64)
    return torch.where(bad[..., None], vecs[..., 0], torch.linalg.eigh(safe)[1][..., 0])


def _padded_eigvec(M64: torch.Tensor) -> torch.Tensor:
    """The smallest eigenvector (..., n) of symmetric float64 (..., n, n) matrices, each solved
    as the leading block of a 16 x 16 one (:func:`_smallest_eigvec`)."""
    n = M64.shape[-1]
    big = M64.diagonal(dim1=-2, dim2=-1).abs().sum(-1) + 1.0  # (...,)
    pad = _EIG_SIZE - n
    E = torch.where(_constant(f"pad_diag{n}", M64.device, torch.bool),
                    big.view(*big.shape, 1, 1), tnf.pad(M64, (0, pad, 0, pad)))
    _, vecs = torch.linalg.eigh(E)
    return vecs[..., :n, 0]


def _smallest_eigvec(M: torch.Tensor) -> torch.Tensor:
    """Unit eigenvector of the smallest eigenvalue of symmetric (..., 9, 9) matrices (float64
    internally); returns (..., 9) in M's dtype.

    LAPACK (MKL's ``syevd``) was seen to round differently with the memory alignment of a
    matrix: in a batch of 9 x 9 float64 matrices (648 bytes each) every odd one sits 8 bytes
    off, so a matrix got other bits beside others than alone (AMD EPYC, MKL 2024.2). Each
    matrix is therefore embedded as the leading block of a 16 x 16 one (2048 bytes, so every
    matrix of the batch and its 16 eigenvalues start 64-byte aligned) whose other diagonal
    entries exceed every eigenvalue of the block (``1 + sum |diag|`` >= the largest one of a
    positive semi-definite block, and > the smallest of any symmetric one): the decoupled
    block keeps its eigenvectors, the smallest eigenvalue is still the block's, and the result
    no longer depends on the batch around the matrix.

    The value always comes from that padded solve. Where a derivative may be taken
    (:func:`_autograd_active`) the derivative comes from :func:`_smallest_eigvec_grad` (its
    sign aligned with the value) through a straight-through term, so values do not change
    with ``requires_grad``, ``jvp`` or ``vmap``, and a degenerate spectrum gets a zero
    derivative in reverse and forward mode.
    """
    M64 = M.to(torch.float64)
    M64 = 0.5 * (M64 + M64.transpose(-1, -2))
    if not _autograd_active(M64):
        return _padded_eigvec(M64).to(M.dtype)
    value = _padded_eigvec(M64.detach())
    carrier = _smallest_eigvec_grad(M64)
    flip = (carrier.detach() * value).sum(-1, keepdim=True) < 0
    return _value_with_grad_of(value, torch.where(flip, -carrier, carrier)).to(M.dtype)


def _dlt_basis(x2n: torch.Tensor) -> torch.Tensor:
    """(1, u, v, u^2 + v^2) of points (..., N, 2) -> (..., 4, N): times a point's weight, the
    weights of its DLT moments (:func:`_homography_dlt_normalized`)."""
    u, v = x2n[..., 0], x2n[..., 1]
    return torch.stack([torch.ones_like(u), u, v, u * u + v * v], -2)


def _float64_bases(x1n: torch.Tensor, x2n: torch.Tensor, mono1: Optional[torch.Tensor],
                   basis2: Optional[torch.Tensor], make2: Callable[[torch.Tensor], torch.Tensor]
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The least-squares fits' float64 bases: ``_monomials(x1n)`` and ``make2(x2n)`` computed
    from the float64 points where not given, given ones cast to float64 (no op when they
    already are: the robust estimators precompute them in float64)."""
    mono1 = _monomials(x1n.to(torch.float64)) if mono1 is None else mono1.to(torch.float64)
    basis2 = make2(x2n.to(torch.float64)) if basis2 is None else basis2.to(torch.float64)
    return mono1, basis2


def _homography_dlt_normalized(x1n: torch.Tensor, x2n: torch.Tensor, w: torch.Tensor,
                               mono1: Optional[torch.Tensor] = None,
                               basis2: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Weighted DLT on normalised points: x (..., N, 2), w (..., N) -> H_n (..., 3, 3) in the
    points' dtype.

    The 9 x 9 normal matrix of the rows ``[-X, 0, u X]`` and ``[0, -X, v X]`` (X = (x, y, 1))
    is ``[[S, 0, -Su], [0, S, -Sv], [-Su, -Sv, Suv]]`` with ``S_k = sum_i W_k,i X_i X_i^T``;
    all 24 distinct moments come from one small batched GEMM over the monomials of X
    (``mono1``: precomputed ``_monomials(x1n)``; ``basis2``: precomputed ``_dlt_basis(x2n)``;
    best in float64, see :func:`_float64_bases`). The moments are summed in float64 whatever
    the points' dtype: a float32 normal matrix squares the condition number in float32 (fit
    error ~3e-4 px on noise-free float32 4K points, ~1e-5 px with float64 moments).
    """
    mono1, basis2 = _float64_bases(x1n, x2n, mono1, basis2, _dlt_basis)
    W = w.unsqueeze(-2) * basis2  # (..., 4, N): w, w u, w v, w (u^2 + v^2), float64
    T = tnf.pad(padded_gram(W, mono1).flatten(-2), (0, 1))  # (..., 25): the 24 and a zero
    M = (T[..., _constant("dlt_idx", T.device, torch.long)]
         * _constant("dlt_sgn", T.device, T.dtype)).unflatten(-1, (9, 9))
    return _smallest_eigvec(M).reshape(*M.shape[:-2], 3, 3).to(x1n.dtype)


def _homography_4pt(x1n: torch.Tensor, x2n: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Minimal solver: x (..., 4, 2) -> (H_n (..., 3, 3), ok (...)) by a direct 8x8 solve with
    ``h33 = 1`` (float64 internally). ``ok`` is False where the system is singular."""
    dt = x1n.dtype
    rows = _dlt_rows(x1n.to(torch.float64), x2n.to(torch.float64))  # (..., 4, 2, 9)
    rows = rows.reshape(*rows.shape[:-3], 8, 9)
    A, rhs = rows[..., :8], -rows[..., 8:]
    h, info = torch.linalg.solve_ex(A, rhs, check_errors=False)
    h = h.squeeze(-1)
    ok = (info == 0) & finite(h).all(-1) & (h.abs().amax(-1) < 1e8)
    h = torch.where(ok.unsqueeze(-1), h, torch.zeros_like(h))
    H = torch.cat([h, torch.ones_like(h[..., :1])], -1).reshape(*h.shape[:-1], 3, 3)
    eye = torch.eye(3, dtype=H.dtype, device=H.device)
    H = torch.where(ok[..., None, None], H, eye)
    return H.to(dt), ok


def _normalize_h_scale(H: torch.Tensor) -> torch.Tensor:
    """Scale (..., 3, 3) homographies to H[2, 2] = 1 (unit Frobenius norm when H[2, 2] ~ 0)."""
    fro = H.norm(dim=(-2, -1), keepdim=True).clamp_min(torch.finfo(H.dtype).tiny)
    h22 = H[..., 2:, 2:]
    return H / torch.where(h22.abs() > 1e-8 * fro, h22, fro)


@scoring_precision
def homography_dlt(x1: torch.Tensor, x2: torch.Tensor,
                   weights: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""Weighted least-squares DLT homography, batched over pairs.

    Minimises :math:`\sum_i w_i \|A_i h\|^2` subject to :math:`\|h\| = 1` in Hartley-normalised
    coordinates (weights also define the normalisation), then denormalises. With N = 4 points
    it is the 4-point solver.

    Convention: ``x2 ~ H x1``; pixels in, pixels out.

    Precision: normalisation, normal equations and denormalisation run in float64 and H
    comes back in the points' dtype (float32 with float64: float64); the caller's autocast
    and reduced float32 matmul precision (TF32, bfloat16) do not apply inside
    (:func:`geocon_torch._precision.scoring_precision`). On noise-free float32 points at 4K
    the fit is then as close as a float32 H can be (~1e-5 px; a float32 normal matrix gave
    ~3e-4 px).

    Args:
        x1, x2: (P, N, 2) pixel points, N >= 4.
        weights: (P, N) tensor of non-negative weights (0 = ignored, e.g. padding; a negative
            weight counts as 0); all ones when None. An entry whose weight or point (in x1
            or x2) is NaN / inf is ignored too (weight 0; masked without a host sync).

    Returns:
        H: (P, 3, 3) with ``H[2, 2] = 1`` (unit Frobenius norm if H[2, 2] ~ 0). Pairs with fewer
        than 4 weighted points or degenerate points give an arbitrary finite matrix; the robust
        estimators flag them.

    Raises:
        ShapeError: x1 / x2 not (P, N, 2) float32 / float64 of one shape, weights not (P, N).
        ArgumentTypeError: weights neither a tensor nor None.
    """
    x1, x2, w, dt = _float64_pair(x1, x2, weights)
    x1n, c1, s1 = _normalize_points(_drop_unweighted(x1, w), w)
    x2n, c2, s2 = _normalize_points(_drop_unweighted(x2, w), w)
    Hn = _homography_dlt_normalized(x1n, x2n, w)
    H = _similarity_inverse(c2, s2) @ Hn @ _similarity_matrix(c1, s1)
    return _normalize_h_scale(H).to(dt)
