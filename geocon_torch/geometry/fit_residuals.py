"""Residuals of a fitted :class:`~geocon_torch.types.Fit` on its correspondences.

Conventions: ``x1``, ``x2`` (P, N, 2) pixel points, ``x2 ~ H x1`` / ``x2^T F x1 = 0``; the fit's
model is cast to the points' dtype. Batched over the pair dimension P. A row whose fit is
invalid (``fit.valid`` False: the model is only a placeholder, the identity H or the zero F)
has NaN residuals, so it explains no match (``r <= tau`` is False) and cannot pass for a fit.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..types import Fit
from .residuals import sampson_distance, sampson_distance_normalized, symmetric_transfer_error


def _valid_model(fit: Fit, dtype: torch.dtype) -> torch.Tensor:
    """``fit.model`` (P, 3, 3) in ``dtype``, NaN on the rows whose fit is invalid (a NaN model
    gives NaN residuals on its own row only; the valid rows keep their bits)."""
    model = fit.model.to(dtype)
    return torch.where(fit.valid.to(model.device).view(-1, 1, 1), model, float("nan"))


def homography_residuals(fit: Fit, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """Symmetric transfer error (eq. 7) of ``fit.model``, x2 ~ H x1.

    Args:
        fit: a homography Fit, model (P, 3, 3) (cast to the points' dtype), valid (P,) bool.
        x1, x2: (P, N, 2) float pixel points.
    Returns:
        (P, N) px, the points' dtype (padding rows included: mask them yourself); NaN on the
        rows whose fit is invalid.
    """
    return symmetric_transfer_error(_valid_model(fit, x1.dtype), x1, x2)


def fundamental_residuals(fit: Fit, x1: torch.Tensor, x2: torch.Tensor,
                          mask: Optional[torch.Tensor] = None
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sampson distances of ``fit.model``, x2^T F x1 = 0.

    Args:
        fit: a fundamental Fit, model (P, 3, 3) (cast to the points' dtype), valid (P,) bool.
        x1, x2: (P, N, 2) float pixel points.
        mask: (P, N) bool, the matches the Hartley normalisation is computed from (None: all).
    Returns:
        (normalised Sampson (P, N) unitless, in each pair's Hartley frame; pixel Sampson
        (P, N) px), both in the points' dtype; NaN on the rows whose fit is invalid.
    """
    F = _valid_model(fit, x1.dtype)
    return sampson_distance_normalized(F, x1, x2, mask), sampson_distance(F, x1, x2)
