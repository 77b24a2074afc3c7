"""Residuals of a fitted :class:`~geocon_torch.types.Fit` on its correspondences.

Conventions: ``x1``, ``x2`` (P, N, 2) pixel points, ``x2 ~ H x1`` / ``x2^T F x1 = 0``; the fit's
model is cast to the points' dtype. Batched over the pair dimension P.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..types import Fit
from .residuals import sampson_distance, sampson_distance_normalized, symmetric_transfer_error


def homography_residuals(fit: Fit, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """Symmetric transfer error (eq. 7) of ``fit.model``, x2 ~ H x1.

    Args:
        fit: a homography Fit, model (P, 3, 3) (cast to the points' dtype).
        x1, x2: (P, N, 2) float pixel points.
    Returns:
        (P, N) px, the points' dtype (padding rows included: mask them yourself).
    """
    return symmetric_transfer_error(fit.model.to(x1.dtype), x1, x2)


def fundamental_residuals(fit: Fit, x1: torch.Tensor, x2: torch.Tensor,
                          mask: Optional[torch.Tensor] = None
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sampson distances of ``fit.model``, x2^T F x1 = 0.

    Args:
        fit: a fundamental Fit, model (P, 3, 3) (cast to the points' dtype).
        x1, x2: (P, N, 2) float pixel points.
        mask: (P, N) bool, the matches the Hartley normalisation is computed from (None: all).
    Returns:
        (normalised Sampson (P, N) unitless, in each pair's Hartley frame; pixel Sampson
        (P, N) px), both in the points' dtype.
    """
    F = fit.model.to(x1.dtype)
    return sampson_distance_normalized(F, x1, x2, mask), sampson_distance(F, x1, x2)
