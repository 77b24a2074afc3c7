"""The optical-flow interface (the backend factory is :func:`geocon_torch.flow.factory.get_flow`).

Convention: ``flow = estimator(img1, img2)`` is the forward flow from ``img1`` to ``img2`` in
pixels: the content at pixel ``(x, y)`` of ``img1`` is found at ``(x + u, y + v)`` in ``img2``,
``flow[:, 0] = u`` (along x, columns) and ``flow[:, 1] = v`` (along y, rows).
"""
from __future__ import annotations

from typing import Optional, Union

import torch

from ..config import FLOW_CHOICES as FLOW_BACKENDS  # the one list (config.foreground.flow)
from ..errors import ShapeError

__all__ = ["FLOW_BACKENDS", "FlowEstimator", "to_gray"]


class FlowEstimator:
    """Dense optical flow between batches of frame pairs.

    Subclasses implement :meth:`_forward` on validated inputs. ``name`` is the backend name
    recorded in results.
    """

    name: str = "flow"

    def __init__(self, device: Optional[Union[str, torch.device]] = None) -> None:
        self.device = torch.device(device) if device is not None else None

    def __call__(self, img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
        """Forward flow from ``img1`` to ``img2``.

        Args:
            img1, img2: (P, 3, H, W) (or (P, 1, H, W)) float in [0, 1], same shape, or uint8
                (divided by 255); H, W >= 1 (P may be 0). The pixel values are not checked (a
                value check would cost a host sync): a NaN / inf pixel gives non-finite flow
                for its pair (in :class:`~geocon_torch.flow.lk_dense.DenseLKFlow` the
                pyramid and the window spread it over the whole pair); the clip path
                (:func:`geocon_torch.io.clip_from_tensor`) rejects such frames with
                ClipTensorError.
        Returns:
            (P, 2, H, W) flow in pixels, on the device of the inputs (or the estimator's
            ``device`` when one was given): float32 / float64 for float32 / float64 inputs,
            float32 for uint8, float16 and bfloat16 inputs.
        Raises:
            ShapeError: not a 4-D tensor with C in {1, 3}, H or W 0, another dtype, or
                ``img1`` and ``img2`` of different shapes.
        """
        img1 = _as_float_images(img1, "img1")
        img2 = _as_float_images(img2, "img2")
        if img1.shape != img2.shape:
            raise ShapeError(f"img1 and img2 must have the same shape, got {tuple(img1.shape)} "
                             f"and {tuple(img2.shape)}")
        out_device = img1.device
        if self.device is not None:
            img1, img2 = img1.to(self.device), img2.to(self.device)
        if img1.shape[0] == 0:
            return img1.new_zeros((0, 2) + tuple(img1.shape[-2:])).to(out_device)
        return self._forward(img1, img2).to(out_device)

    def _forward(self, img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


def _check_images(x: torch.Tensor, name: str) -> None:
    """Raise ShapeError unless ``x`` is a (P, 3, H, W) or (P, 1, H, W) tensor (metadata only)."""
    if not isinstance(x, torch.Tensor):
        raise ShapeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")
    if x.ndim != 4 or x.shape[1] not in (1, 3):
        raise ShapeError(f"{name} must have shape (P, 3, H, W) or (P, 1, H, W), got "
                         f"{tuple(x.shape)}")


def _as_float_images(x: torch.Tensor, name: str) -> torch.Tensor:
    """(P, 3|1, H, W) uint8 / float images -> float32 / float64 in [0, 1] (uint8 divided by
    255, float16 / bfloat16 up-cast to float32); ShapeError for another shape or dtype, or
    for empty frames (H or W 0). Metadata checks only (no host sync)."""
    _check_images(x, name)
    if x.shape[2] == 0 or x.shape[3] == 0:
        raise ShapeError(f"{name} must have H, W >= 1 (non-empty frames), got "
                         f"{tuple(x.shape)}")
    if x.dtype == torch.uint8:
        return x.float() / 255.0
    if x.dtype not in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
        raise ShapeError(f"{name} must be float in [0, 1] or uint8, got {x.dtype}")
    return x if x.dtype in (torch.float32, torch.float64) else x.float()


def to_gray(img: torch.Tensor) -> torch.Tensor:
    """(P, 3|1, H, W) float in [0, 1] -> (P, 1, H, W) luminance (ITU-R BT.601, as
    :meth:`Clip.gray`), same dtype (any float dtype); a (P, 1, H, W) input is returned as is.

    Raises:
        ShapeError: not a 4-D tensor with C in {1, 3}, or not a floating-point dtype (uint8
            frames go through ``FlowEstimator.__call__`` / :meth:`Clip.gray` first).
    """
    _check_images(img, "img")
    if not img.is_floating_point():
        raise ShapeError(f"img must be a float tensor in [0, 1], got {img.dtype}")
    if img.shape[1] == 1:
        return img
    w = torch.tensor([0.299, 0.587, 0.114], dtype=img.dtype, device=img.device)
    return (img * w.view(1, 3, 1, 1)).sum(1, keepdim=True)
