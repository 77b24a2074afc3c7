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
    """(P, N) symmetric transfer error (eq. 7, px) of ``fit.model``, x2 ~ H x1."""
    return symmetric_transfer_error(fit.model.to(x1.dtype), x1, x2)


def fundamental_residuals(fit: Fit, x1: torch.Tensor, x2: torch.Tensor,
                          mask: Optional[torch.Tensor] = None
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(normalised Sampson (P, N) unitless, pixel Sampson (P, N) px) of ``fit.model``."""
    F = fit.model.to(x1.dtype)
    return sampson_distance_normalized(F, x1, x2, mask), sampson_distance(F, x1, x2)
