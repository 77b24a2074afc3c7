"""Hartley normalisation over the valid (masked) points of each pair (paper eq. 9)."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple

import torch

from .._checks import check_mask, check_points, check_same_shape
from .._tensor_utils import finite
from ..errors import ArgumentTypeError, ShapeError
from ._reduce import padded_sum


def _drop_unweighted(points: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """``points`` (..., N, 2) with the entries of weight 0 set to 0: an ignored entry may hold
    anything (NaN too) and still never reaches a weighted sum (0 * NaN is NaN)."""
    return torch.where(weights.unsqueeze(-1) > 0, points, torch.zeros_like(points))


def _and_finite(ok: torch.Tensor, points: Sequence[torch.Tensor]) -> torch.Tensor:
    """``ok`` (..., N) and, per entry, every coordinate of each of ``points`` (..., N, 2) finite
    (neither NaN nor inf); elementwise, no grad, no sync."""
    for x in points:
        ok = ok & finite(x.detach()).all(-1)
    return ok


def _finite_entries(weights: torch.Tensor, *points: torch.Tensor) -> torch.Tensor:
    """(..., N) bool: the entries whose weight (..., N) and every coordinate of each of
    ``points`` (..., N, 2) are finite."""
    return _and_finite(finite(weights.detach()), points)


def finite_mask(mask: Optional[torch.Tensor], *points: torch.Tensor) -> torch.Tensor:
    """(P, N) bool: ``mask`` (all True when None; checked against ``points[0]`` (P, N, 2)) and
    every coordinate of each of ``points`` finite. A NaN / inf match is padding, as the robust
    fits treat it (``ransac_*``, the DLT / 8-point solvers); elementwise, no sync."""
    return _and_finite(check_mask(mask, points[0]), points)


def _weighted_hartley(points: torch.Tensor, weights: torch.Tensor
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Centroid, scale and validity of ``points`` (..., N, 2) under non-negative ``weights``
    (..., N); entries of weight 0 are ignored whatever they hold. Degenerate rows (no weight,
    or all points coincide) get scale 1 and flag False."""
    points = _drop_unweighted(points, weights)
    wsum = padded_sum(weights)
    nonempty = wsum > 0
    wn = weights / torch.where(nonempty, wsum, torch.ones_like(wsum)).unsqueeze(-1)
    c = padded_sum(wn.unsqueeze(-2) * points.transpose(-1, -2))  # (..., 2)
    d = (points - c.unsqueeze(-2)).pow(2).sum(-1)
    d = torch.sqrt(d.clamp_min(torch.finfo(points.dtype).tiny))
    dbar = padded_sum(wn * d)
    scale_ok = nonempty & (dbar > 1e-6 * (1.0 + c.abs().amax(-1)))
    s = torch.where(scale_ok, math.sqrt(2.0) / torch.where(scale_ok, dbar, torch.ones_like(dbar)),
                    torch.ones_like(dbar))
    return c, s, scale_ok


def _pair_weights(x1: torch.Tensor, x2: torch.Tensor, weights: Optional[torch.Tensor],
                  drop_nonfinite: bool = True) -> torch.Tensor:
    """Check two (P, N, 2) point sets and their (P, N) weights (all ones when None); returns
    the weights in the points' dtype, negative ones set to 0 and, with ``drop_nonfinite``, 0
    wherever the weight or a coordinate of x1 / x2 is NaN / inf (such an entry is ignored like
    padding; elementwise, no host sync). ArgumentTypeError for non-tensor weights."""
    check_points(x1, "x1")
    check_points(x2, "x2")
    check_same_shape([x1, x2], ["x1", "x2"])
    lead = tuple(x1.shape[:2])
    if weights is None:
        w = torch.ones(lead, dtype=x1.dtype, device=x1.device)
    elif not isinstance(weights, torch.Tensor):
        raise ArgumentTypeError(f"weights must be a torch.Tensor of shape {lead} or None, got "
                                f"{type(weights).__name__}")
    elif tuple(weights.shape) != lead:
        raise ShapeError(f"weights must have shape {lead}, got {tuple(weights.shape)}")
    else:
        w = weights.to(x1.dtype).clamp_min(0)
    if not drop_nonfinite:
        return w
    return torch.where(_finite_entries(w, x1, x2), w, torch.zeros_like(w))


def _float64_pair(x1: torch.Tensor, x2: torch.Tensor, weights: Optional[torch.Tensor],
                  drop_nonfinite: bool = True
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.dtype]:
    """The public solvers' inputs: :func:`_pair_weights` checks them, then x1, x2 (P, N, 2) and
    the weights (P, N) come back in float64 (the solvers normalise, sum their normal equations
    and denormalise in float64), with the dtype the model is returned in (x1's and x2's
    promoted dtype)."""
    w = _pair_weights(x1, x2, weights, drop_nonfinite)
    f64 = torch.float64
    return x1.to(f64), x2.to(f64), w.to(f64), torch.promote_types(x1.dtype, x2.dtype)


def _normalize_points(points: torch.Tensor, weights: torch.Tensor
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Points (..., N, 2) moved into their weighted Hartley frame: (normalised points,
    centroid (..., 2), scale (...))."""
    c, s, _ = _weighted_hartley(points, weights)
    return (points - c.unsqueeze(-2)) * s[..., None, None], c, s


def _similarity_matrix(c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """T = [[s, 0, -s cx], [0, s, -s cy], [0, 0, 1]] for c (..., 2), s (...) -> (..., 3, 3)."""
    z = torch.zeros_like(s)
    o = torch.ones_like(s)
    return torch.stack([torch.stack([s, z, -s * c[..., 0]], -1),
                        torch.stack([z, s, -s * c[..., 1]], -1),
                        torch.stack([z, z, o], -1)], -2)


def _similarity_inverse(c: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`_similarity_matrix`: [[1/s, 0, cx], [0, 1/s, cy], [0, 0, 1]]."""
    z = torch.zeros_like(s)
    o = torch.ones_like(s)
    return torch.stack([torch.stack([1 / s, z, c[..., 0]], -1),
                        torch.stack([z, 1 / s, c[..., 1]], -1),
                        torch.stack([z, z, o], -1)], -2)


def hartley_normalize(points: torch.Tensor, mask: Optional[torch.Tensor] = None
                      ) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Hartley normalisation of each pair's points (paper eq. 9), using the masked points only.

    The centroid :math:`c` and mean distance :math:`\bar d` to it are computed over valid points;
    :math:`s = \sqrt 2 / \bar d` and ``T = [[s, 0, -s c_x], [0, s, -s c_y], [0, 0, 1]]`` so that
    ``x_norm = T x`` (homogeneous). Rows with no valid point, or whose valid points all coincide,
    get ``s = 1`` (finite, never NaN).

    Args:
        points: (P, N, 2) pixel coordinates.
        mask: (P, N) bool validity, all True when None (a non-finite point is never valid).

    Returns:
        points_norm: (P, N, 2) normalised points (padded entries are 0).
        T: (P, 3, 3) normalising transforms.
    """
    check_points(points, "points")
    m = finite_mask(mask, points)
    c, s, _ = _weighted_hartley(points, m.to(points.dtype))
    pn = (points - c.unsqueeze(-2)) * s.view(-1, 1, 1)
    pn = torch.where(m.unsqueeze(-1), pn, torch.zeros_like(pn))
    return pn, _similarity_matrix(c, s)
