"""Per-correspondence residuals of homographies and fundamental matrices (pixels).

Convention (kornia.geometry.epipolar style): ``x2 ~ H x1`` and ``x2^T F x1 = 0`` with ``x1`` the
points of the first frame; points are pixel ``(x, y)`` at working resolution. All functions take
``model (P, 3, 3)``, ``x1, x2 (P, N, 2)`` and return ``(P, N)``; padded points (finite zeros)
give finite values that the caller masks out. Points mapped to infinity (``w -> 0``) get a huge
but finite residual. So does a match where F defines no epipolar line (the first two entries of
``F x1`` / ``F^T x2`` in a residual's denominator are all 0, e.g. every match under the all-zero
F of a failed ``ransac_fundamental`` row): the dtype's ``finfo.max`` as a squared residual, its
square root as a distance, never 0, so such a model explains no match. Every function is
differentiable (gradcheck in float64; the gradient of such a match is 0, not NaN).

The private ``_*`` kernels broadcast over any leading dimensions (e.g. ``model (P, K, 3, 3)``
against ``x (P, 1, N, 2)``). The batched RANSAC scores hypotheses with its own float32 GEMM
kernels in normalised coordinates (``ransac.py``), which these functions are the reference for.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import torch

from .._checks import check_matrices, check_points, check_same_shape
from .._precision import scoring_precision
from ..errors import ArgumentTypeError, ShapeError
from .normalization import _normalize_points, _similarity_inverse, finite_mask


def _check_model_points(model: torch.Tensor, x: torch.Tensor, name: str, x_name: str) -> None:
    """ShapeError unless ``model`` is (P, 3, 3) float and ``x`` (P, N, 2) float, same P."""
    check_matrices(model, name)
    check_points(x, x_name)
    if model.shape[0] != x.shape[0]:
        raise ShapeError(f"{name} has {model.shape[0]} pairs but {x_name} has {x.shape[0]}")


def _check(model: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, name: str) -> None:
    _check_model_points(model, x1, name, "x1")
    check_points(x2, "x2")
    check_same_shape([x1, x2], ["x1", "x2"])


def _check_squared(squared: Any) -> None:
    """ArgumentTypeError unless ``squared`` is a bool (a str such as "no" is truthy)."""
    if not isinstance(squared, bool):
        raise ArgumentTypeError(f"squared must be a bool, got {type(squared).__name__} "
                                f"{squared!r}")


def _floored_sqrt(x: torch.Tensor) -> torch.Tensor:
    """``sqrt(max(x, finfo.tiny))``: finite derivative everywhere (a denominator's root)."""
    return torch.sqrt(x.clamp_min(torch.finfo(x.dtype).tiny))


def _safe_sqrt(x: torch.Tensor) -> torch.Tensor:
    """A distance from its square ``x`` (px^2 -> px): :func:`_floored_sqrt`, but exactly 0
    (not ``sqrt(finfo.tiny)``) for an exactly zero ``x``; derivative finite everywhere (0 at
    0), NaN stays NaN. Elementwise, no host sync."""
    return _floored_sqrt(x).masked_fill(x == 0, 0.0)


def _max_root(dtype: torch.dtype) -> float:
    """``sqrt(finfo(dtype).max)``, equal in ``dtype`` to what ``_safe_sqrt`` gives for
    ``finfo.max`` (a square root rounded to float64, then to float32, is the float32 one):
    the distance of a match no epipolar line is defined for. Host arithmetic, no tensor op."""
    return math.sqrt(torch.finfo(dtype).max)


def _line_ratio_sq(num_sq: torch.Tensor, den: torch.Tensor) -> torch.Tensor:
    """``num_sq / den`` (px^2, broadcasting), ``finfo.max`` where ``den <= finfo.tiny``: no
    epipolar line there, so no match is explained (never ``0 / tiny = 0``). The clamped
    denominator keeps the masked quotient finite, so its gradient is 0, never NaN; NaN stays
    NaN."""
    tiny = torch.finfo(den.dtype).tiny
    return (num_sq / den.clamp_min(tiny)).masked_fill(den <= tiny, torch.finfo(den.dtype).max)


def _safe_den(w: torch.Tensor) -> torch.Tensor:
    """``w`` pushed away from 0 (keeps its sign, + for 0) so that divisions stay finite."""
    tiny = torch.finfo(w.dtype).eps ** 2
    # the inner where is a default-dtype tensor of +-tiny, cast to w's dtype (a float64 default
    # dtype must not promote a float32 w; the same values as adding zeros_like(w), fewer ops)
    return torch.where(w.abs() < tiny, torch.where(w < 0, -tiny, tiny).to(w.dtype), w)


def _map(M: torch.Tensor, x: torch.Tensor, rows: int = 3) -> Tuple[torch.Tensor, ...]:
    """The first ``rows`` rows of ``M [x; 1]`` for M (..., 3, 3), x (..., N, 2) -> ``rows``
    (..., N) tensors."""
    px, py = x[..., 0], x[..., 1]
    out = []
    for r in range(rows):
        out.append(M[..., r, 0, None] * px + M[..., r, 1, None] * py + M[..., r, 2, None])
    return tuple(out)


def _adjugate3(M: torch.Tensor) -> torch.Tensor:
    """Adjugate of (..., 3, 3) matrices (``adj(M) = det(M) M^-1``; finite for singular M)."""
    # column i of adj(M) is row i+1 x row i+2 (indices mod 3)
    return torch.linalg.cross(M.roll(-1, -2), M.roll(-2, -2)).transpose(-1, -2)


def _transfer_sq(H: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """Squared forward transfer distance ``||x2 - pi(H x1)||^2`` (px^2), broadcasting; at most
    the dtype's largest finite value (a point sent to infinity overflows float32 otherwise)."""
    u, v, w = _map(H, x1)
    w = _safe_den(w)
    sq = (u / w - x2[..., 0]).pow(2) + (v / w - x2[..., 1]).pow(2)
    return sq.clamp_max(torch.finfo(sq.dtype).max)


def transfer_points(H: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``pi(H x)``: points mapped by homographies (points sent to infinity get a huge but
    finite position).

    Args:
        H: (P, 3, 3) float32 / float64 homographies.
        x: (P, N, 2) float32 / float64 points, px.
    Returns:
        (P, N, 2) mapped points, px, in the promoted dtype of ``H`` and ``x``.
    Raises:
        ShapeError: other shapes / dtypes, or a different P.
    """
    _check_model_points(H, x, "H", "x")
    u, v, w = _map(H, x)
    w = _safe_den(w)
    return torch.stack([u / w, v / w], -1)


def _symmetric_transfer(H: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """Eq. 7: 0.5 ||x2 - pi(H x1)|| + 0.5 ||x1 - pi(H^-1 x2)||, broadcasting."""
    fwd = _safe_sqrt(_transfer_sq(H, x1, x2))
    bwd = _safe_sqrt(_transfer_sq(_adjugate3(H), x2, x1))
    return 0.5 * (fwd + bwd)


def _epipolar_terms(F: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                    backward: bool = True) -> Tuple[torch.Tensor, ...]:
    """``x2^T F x1`` and the first two entries of ``F x1`` and (``backward``) of ``F^T x2``,
    broadcasting (the third entry of ``F^T x2`` is never needed, so never computed)."""
    a0, a1, a2 = _map(F, x1)
    num = x2[..., 0] * a0 + x2[..., 1] * a1 + a2
    if not backward:
        return num, a0, a1
    b0, b1 = _map(F.transpose(-1, -2), x2, rows=2)
    return num, a0, a1, b0, b1


def _sampson_sq(F: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    num, a0, a1, b0, b1 = _epipolar_terms(F, x1, x2)
    return _line_ratio_sq(num * num, a0 * a0 + a1 * a1 + b0 * b0 + b1 * b1)


def _epipolar_max_sq(F: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """OpenCV fundam.cpp ``computeError``: max of the squared distances of x2 to F x1 and of
    x1 to F^T x2 (px^2), broadcasting; ``finfo.max`` where either line is undefined."""
    num, a0, a1, b0, b1 = _epipolar_terms(F, x1, x2)
    n2 = num * num
    return torch.maximum(_line_ratio_sq(n2, a0 * a0 + a1 * a1),
                         _line_ratio_sq(n2, b0 * b0 + b1 * b1))


def transfer_error(H: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    r"""Forward transfer error :math:`\|x_2 - \pi(H x_1)\|_2` in pixels.

    This is the residual of OpenCV's ``findHomography`` (which compares its square with the
    squared reprojection threshold), used for OpenCV-parity paths.

    Args:
        H: (P, 3, 3) homographies with ``x2 ~ H x1``.
        x1, x2: (P, N, 2) pixel points.

    Returns:
        (P, N) distances in pixels.
    """
    _check(H, x1, x2, "H")
    return _safe_sqrt(_transfer_sq(H, x1, x2))


def symmetric_transfer_error(H: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    r"""Symmetric transfer error exactly as paper eq. 7 (not squared, pixels).

    .. math:: r = \tfrac12 \|x_2 - \pi(H x_1)\|_2 + \tfrac12 \|x_1 - \pi(H^{-1} x_2)\|_2

    ``H^{-1}`` is applied through the adjugate (equal up to scale), so a singular ``H`` gives a
    large finite residual instead of NaN.

    Args:
        H: (P, 3, 3) homographies with ``x2 ~ H x1``.
        x1, x2: (P, N, 2) pixel points.

    Returns:
        (P, N) residuals in pixels (compared with tau_H = 2 px in the paper).

    Example: a shift by (5, -2) px; the second match is 3 px off in both directions.

        >>> import torch
        >>> from geocon_torch.geometry import symmetric_transfer_error
        >>> H = torch.tensor([[[1.0, 0.0, 5.0], [0.0, 1.0, -2.0], [0.0, 0.0, 1.0]]])
        >>> x1 = torch.tensor([[[0.0, 0.0], [10.0, 10.0]]])
        >>> x2 = torch.tensor([[[5.0, -2.0], [15.0, 11.0]]])
        >>> symmetric_transfer_error(H, x1, x2).round(decimals=4)
        tensor([[0., 3.]])
    """
    _check(H, x1, x2, "H")
    return _symmetric_transfer(H, x1, x2)


def sampson_distance(F: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                     squared: bool = False) -> torch.Tensor:
    r"""Sampson distance, paper eq. 11 (not squared unless ``squared=True``).

    .. math:: d = \frac{|x_2^\top F x_1|}{\sqrt{(Fx_1)_1^2 + (Fx_1)_2^2 + (F^\top x_2)_1^2
              + (F^\top x_2)_2^2}}

    Args:
        F: (P, 3, 3) fundamental matrices with ``x2^T F x1 = 0`` (any scale).
        x1, x2: (P, N, 2) pixel points.
        squared: return :math:`d^2` (px^2) instead of :math:`d` (px); a bool.

    Returns:
        (P, N) distances in pixels (px^2 when squared); where F defines no epipolar line (e.g.
        F = 0) ``sqrt(finfo.max)`` (``finfo.max`` when squared), never 0.

    Raises:
        ShapeError: other shapes / dtypes, or a different P; ArgumentTypeError: ``squared``
            is not a bool.

    Example: F of a camera translated along x (epipolar lines are the rows, ``y2 = y1``);
    the second match is 3 px off its line, so its Sampson distance is ``3 / sqrt(2)``.

        >>> import torch
        >>> from geocon_torch.geometry import sampson_distance
        >>> F = torch.tensor([[[0.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]]])
        >>> x1 = torch.tensor([[[10.0, 20.0], [30.0, 40.0]]])
        >>> x2 = torch.tensor([[[50.0, 20.0], [70.0, 43.0]]])
        >>> sampson_distance(F, x1, x2).round(decimals=4)
        tensor([[0.0000, 2.1213]])
    """
    _check(F, x1, x2, "F")
    _check_squared(squared)
    d2 = _sampson_sq(F, x1, x2)
    return d2 if squared else _safe_sqrt(d2)


@scoring_precision
def sampson_distance_normalized(F: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                                mask: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""Sampson distance in each pair's Hartley-normalised coordinates (unitless).

    This is what the paper compares with :math:`\tau_F = 0.1`: with ``T1, T2`` from
    :func:`hartley_normalize` over the masked points of each image,
    ``F_n = T2^{-T} F T1^{-1}`` and the Sampson distance of ``(T1 x1, T2 x2)`` under ``F_n``.
    (The Sampson distance is invariant to the scale of F, so no renormalisation is needed.)
    The caller's autocast and reduced float32 matmul precision do not apply inside
    (:func:`geocon_torch._precision.scoring_precision`; ``F_n`` is a matrix product).

    Args:
        F: (P, 3, 3) pixel-domain fundamental matrices (``x2^T F x1 = 0``).
        x1, x2: (P, N, 2) pixel points.
        mask: (P, N) bool points that define the normalisation (all when None; a match with a
            non-finite coordinate never does, and its own distance is NaN).

    Returns:
        (P, N) unitless Sampson distances, in the promoted dtype of F, x1 and x2
        (``sqrt(finfo.max)`` where F defines no epipolar line, e.g. F = 0).
    """
    _check(F, x1, x2, "F")
    dt = torch.promote_types(torch.promote_types(F.dtype, x1.dtype), x2.dtype)
    x1, x2 = x1.to(dt), x2.to(dt)  # mixed dtypes: the promoted one, as the other residuals
    m = finite_mask(mask, x1, x2).to(x1.dtype)  # a NaN / inf match must not poison the rest
    x1n, c1, s1 = _normalize_points(x1, m)
    x2n, c2, s2 = _normalize_points(x2, m)
    Fn = _similarity_inverse(c2, s2).transpose(-1, -2) @ F.to(x1n.dtype) \
        @ _similarity_inverse(c1, s1)
    return _safe_sqrt(_sampson_sq(Fn, x1n, x2n))


def epipolar_line_distance(F: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    r"""One-sided distance of ``x2`` to its epipolar line ``l = F x1`` (pixels; the GVGC error).

    .. math:: d = \frac{|x_2^\top F x_1|}{\sqrt{(Fx_1)_1^2 + (Fx_1)_2^2}}

    Args:
        F: (P, 3, 3) fundamental matrices with ``x2^T F x1 = 0``.
        x1, x2: (P, N, 2) pixel points.

    Returns:
        (P, N) distances in pixels (``sqrt(finfo.max)`` where ``F x1`` is no line, e.g.
        F = 0).
    """
    _check(F, x1, x2, "F")
    num, a0, a1 = _epipolar_terms(F, x1, x2, backward=False)
    den = a0 * a0 + a1 * a1
    tiny = torch.finfo(den.dtype).tiny
    return (num.abs() / _floored_sqrt(den)).masked_fill(den <= tiny, _max_root(den.dtype))


def epipolar_max_distance(F: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                          squared: bool = False) -> torch.Tensor:
    r"""Larger of the two point-to-epipolar-line distances (OpenCV's classic F error).

    ``max(d(x2, F x1), d(x1, F^T x2))``; OpenCV's ``findFundamentalMat`` (RANSAC / LMedS)
    compares its square with the squared threshold.

    Args:
        F: (P, 3, 3) fundamental matrices with ``x2^T F x1 = 0``.
        x1, x2: (P, N, 2) pixel points.
        squared: return px^2 instead of px; a bool.

    Returns:
        (P, N) distances in pixels (px^2 when squared); ``sqrt(finfo.max)`` (``finfo.max``
        when squared) where either epipolar line is undefined (e.g. F = 0).

    Raises:
        ShapeError: other shapes / dtypes, or a different P; ArgumentTypeError: ``squared``
            is not a bool.
    """
    _check(F, x1, x2, "F")
    _check_squared(squared)
    d2 = _epipolar_max_sq(F, x1, x2)
    return d2 if squared else _safe_sqrt(d2)
