"""Forward-backward flow consistency -> occlusion / reliability map."""
from __future__ import annotations

import torch

from ..errors import InputError, ShapeError
from .lk_dense import warp


def forward_backward_error(flow_fw: torch.Tensor, flow_bw: torch.Tensor
                           ) -> tuple:
    """Round-trip error ``|f_fw(x) + f_bw(x + f_fw(x))|`` in px.

    Args:
        flow_fw: (P, 2, H, W) float flow from frame t to t+1 (px). flow_bw: (P, 2, H, W) float
            from t+1 to t (cast to ``flow_fw``'s dtype). H, W >= 1; P may be 0.
    Returns:
        (error (P, H, W) px in ``flow_fw``'s dtype, inside (P, H, W) bool: ``x + f_fw(x)`` lies
        inside frame t+1).
    Raises:
        ShapeError: a flow that is not a (P, 2, H, W) float tensor, has H or W 0, or differs
            in shape from the other (metadata checks only: no host sync).
    """
    for name, f in (("flow_fw", flow_fw), ("flow_bw", flow_bw)):
        if not isinstance(f, torch.Tensor) or f.ndim != 4 or f.shape[1] != 2:
            got = tuple(f.shape) if isinstance(f, torch.Tensor) else type(f).__name__
            raise ShapeError(f"{name} must have shape (P, 2, H, W), got {got}")
        if not f.is_floating_point():
            raise ShapeError(f"{name} must be a float tensor, got {f.dtype}")
        if f.shape[2] == 0 or f.shape[3] == 0:
            raise ShapeError(f"{name} must have H, W >= 1, got {tuple(f.shape)}")
    if flow_fw.shape != flow_bw.shape:
        raise ShapeError(f"flow_fw and flow_bw must match, got {tuple(flow_fw.shape)} and "
                         f"{tuple(flow_bw.shape)}")
    bw_at_target, inside = warp(flow_bw.to(flow_fw.dtype), flow_fw)
    err = (flow_fw + bw_at_target).norm(dim=1)
    return err, inside[:, 0]


def forward_backward_reliability(flow_fw: torch.Tensor, flow_bw: torch.Tensor,
                                 threshold_px: float = 1.0) -> torch.Tensor:
    """Per-pixel reliability of the forward flow from the forward-backward check.

    ``w = clamp(2 - e / threshold_px, 0, 1)`` with ``e`` the round-trip error of
    :func:`forward_backward_error`: 1 where ``e <= threshold_px``, falling linearly to 0 at
    ``2 * threshold_px`` (occluded / disoccluded / mismatched pixels), and 0 where the forward
    flow leaves the frame.

    Args:
        flow_fw: (P, 2, H, W) float px, t -> t+1. flow_bw: (P, 2, H, W) float px, t+1 -> t.
            H, W >= 1 (ShapeError otherwise, as :func:`forward_backward_error`).
        threshold_px: tolerance in px (> 0).
    Returns:
        (P, H, W) float weights in [0, 1] (dtype of ``flow_fw``).
    """
    if not threshold_px > 0:
        raise InputError(f"threshold_px must be > 0, got {threshold_px}")
    err, inside = forward_backward_error(flow_fw, flow_bw)
    w = (2.0 - err / float(threshold_px)).clamp(0.0, 1.0)
    return torch.where(inside, w, torch.zeros_like(w))
