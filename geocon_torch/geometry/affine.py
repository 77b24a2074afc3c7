"""Batched weighted affine least squares (paper eqs. 14-15, AdaDFRC-W2).

Convention: ``motion ~ A p + b`` where ``p`` are positions (pixels) and ``motion`` the observed
displacement at ``p`` (pixels), so the point map is ``p' = (I + A) p + b``. Solved in closed form
per pair from the weighted normal equations on weight-centred positions (well conditioned for
pixel coordinates in float32).
"""
from __future__ import annotations

from typing import Tuple

import torch

from .._checks import check_number, check_points, check_same_shape
from .._precision import scoring_precision
from ..errors import ShapeError
from .normalization import _finite_entries


def _keep(ok: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``t`` where ``ok`` (broadcast), 0 elsewhere."""
    return torch.where(ok, t, torch.zeros_like(t))


@scoring_precision
def weighted_affine_lstsq(positions: torch.Tensor, motions: torch.Tensor, weights: torch.Tensor,
                          eps: float = 1e-9
                          ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    r"""Weighted least-squares affine motion fit, batched over P items (paper eqs. 14-15).

    .. math::
        (A^*, b^*) = \arg\min_{A,b} \sum_i w_i \|A p_i + b - v_i\|^2, \qquad
        \mathrm{WMSE} = \frac{\sum_i w_i \|A^* p_i + b^* - v_i\|^2}{\sum_i w_i}

    Convention: ``v ~ A p + b`` (motion, not the point map; the point map is ``(I + A) p + b``).
    Padded entries are given weight 0. The caller's autocast and reduced float32 matmul
    precision do not apply inside (:func:`geocon_torch._precision.scoring_precision`).

    Args:
        positions: (P, M, 2) float32 / float64 positions ``p`` (x, y) in pixels (e.g. grid-cell
            centroids).
        motions: (P, M, 2) float32 / float64 observed motion vectors ``v`` in pixels; mixed with
            ``positions``, both are promoted (float64).
        weights: (P, M) non-negative weights (e.g. object pixels per cell); 0 = ignored (the
            entry may hold anything, NaN too), a negative weight counts as 0. An entry whose
            weight, position or motion is NaN / inf is ignored as well (weight 0; masked
            elementwise, no host sync).
        eps: relative conditioning floor, a number >= 0: an item is invalid when the weighted
            position covariance has ``det <= eps * trace^2`` (collinear or fewer than 3
            distinct points; 0 still refuses exactly collinear ones).

    Returns:
        A: (P, 2, 2), b: (P, 2), wmse: (P,) in px^2 (the promoted dtype), valid: (P,) bool.
        Invalid items (total weight 0, or degenerate positions) get ``A = 0``, ``b`` = weighted
        mean motion (0 when the weight is 0) and the matching finite WMSE; they never produce NaN.
        Differentiable w.r.t. all inputs (gradcheck in float64). The bits do not depend on
        the inputs' memory layout (strided / permuted views give the contiguous results).

    Raises:
        ShapeError: other shapes / dtypes; ArgumentTypeError / InputError: ``eps`` is not a
            number / is negative or NaN.
    """
    check_points(positions, "positions")
    check_points(motions, "motions")
    check_same_shape([positions, motions], ["positions", "motions"])
    if not isinstance(weights, torch.Tensor) or tuple(weights.shape) != tuple(positions.shape[:2]):
        got = tuple(weights.shape) if isinstance(weights, torch.Tensor) else type(weights).__name__
        raise ShapeError(f"weights must have shape {tuple(positions.shape[:2])}, got {got}")
    eps = check_number(eps, "eps", 0)
    dtype = torch.promote_types(positions.dtype, motions.dtype)
    # contiguous: the einsum sums below follow the strides (no op when already contiguous)
    positions, motions = positions.to(dtype).contiguous(), motions.to(dtype).contiguous()
    w = weights.to(dtype).contiguous().clamp_min(0)
    # an entry with a NaN / inf weight, position or motion is ignored: weight 0 and, since
    # 0 * NaN is NaN, its values zeroed. One torch.where per use, each just before it: the
    # inputs' gradients then accumulate in the same order as without the masks (bit for bit)
    # while a NaN never meets a product, so gradients stay NaN-free too
    ok = _finite_entries(w, positions, motions)
    w = torch.where(ok, w, torch.zeros_like(w))
    ok = ok.unsqueeze(-1)
    wsum = w.sum(-1)  # (P,)
    has_weight = wsum > 0
    wn = w / torch.where(has_weight, wsum, torch.ones_like(wsum)).unsqueeze(-1)  # (P, M)
    p_mean = (wn.unsqueeze(-1) * _keep(ok, positions)).sum(-2)  # (P, 2)
    v_mean = (wn.unsqueeze(-1) * _keep(ok, motions)).sum(-2)
    pc = _keep(ok, positions) - p_mean.unsqueeze(-2)
    vc = _keep(ok, motions) - v_mean.unsqueeze(-2)
    cov = torch.einsum("pm,pmi,pmj->pij", wn, pc, pc)  # (P, 2, 2)
    cross = torch.einsum("pm,pmi,pmj->pij", wn, pc, vc)  # sum w pc vc^T  (P, 2, 2)
    det = cov[:, 0, 0] * cov[:, 1, 1] - cov[:, 0, 1] * cov[:, 1, 0]
    tr = cov[:, 0, 0] + cov[:, 1, 1]
    valid = has_weight & (det > eps * tr * tr) & (tr > 0)
    # closed-form 2x2 inverse through the adjugate; a safe identity where invalid keeps grads finite
    eye = torch.eye(2, dtype=dtype, device=positions.device).expand_as(cov)
    cov_s = torch.where(valid.view(-1, 1, 1), cov, eye)
    det_s = torch.where(valid, det, torch.ones_like(det))
    adj = torch.stack([torch.stack([cov_s[:, 1, 1], -cov_s[:, 0, 1]], -1),
                       torch.stack([-cov_s[:, 1, 0], cov_s[:, 0, 0]], -1)], -2)
    inv = adj / det_s.view(-1, 1, 1)
    a_t = inv @ cross  # A^T = cov^-1 sum w pc vc^T
    A = torch.where(valid.view(-1, 1, 1), a_t.transpose(-1, -2), torch.zeros_like(a_t))
    b = v_mean - (A @ p_mean.unsqueeze(-1)).squeeze(-1)
    resid = (_keep(ok, positions) @ A.transpose(-1, -2) + b.unsqueeze(-2)) - _keep(ok, motions)
    wmse = (wn * resid.pow(2).sum(-1)).sum(-1)
    return A, b, wmse, valid
