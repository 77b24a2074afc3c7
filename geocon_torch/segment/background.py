"""Background = content mask minus the dilated union of the object masks (paper sec. 4.3).

``B_t = content \\ dilate(U_k M_t^k, margin)``; a correspondence of pair (i, j) is background when
``x1`` lies in ``B_i`` and ``x2`` in ``B_j`` (Algorithm 1 B: ``B_t ∩ B_{t+1}``). Points are pixel
``(x, y)`` at working resolution, looked up at the nearest pixel; points outside the frame are
not background.
"""
from __future__ import annotations

from typing import Optional

import torch

from .._checks import check_points
from .._morphology import dilate_mask
from .._tensor_utils import mask_at_pixels
from ..errors import ShapeError


def dilate(masks: torch.Tensor, radius: int) -> torch.Tensor:
    """Binary dilation of (..., H, W) bool masks by a (2r+1)^2 square, batched
    (:func:`geocon_torch._morphology.dilate_mask`)."""
    return dilate_mask(masks, radius)


def background_mask(content_mask: torch.Tensor, objects: Optional[torch.Tensor],
                    margin_px: int = 4, num_frames: Optional[int] = None) -> torch.Tensor:
    """Per-frame background masks.

    Args:
        content_mask: (H, W) bool (False on letterbox bars).
        objects: (T, K, H, W) bool object masks (K may be 0) or None.
        margin_px: safety margin: objects are dilated by this many pixels before removal.
        num_frames: T when ``objects`` is None.
    Returns:
        (T, H, W) bool.
    """
    h, w = content_mask.shape[-2:]
    if objects is None or objects.shape[1] == 0:
        t = num_frames if objects is None else objects.shape[0]
        if t is None:
            raise ShapeError("background_mask needs num_frames when objects is None")
        return content_mask.bool().expand(t, h, w).clone()
    if objects.ndim != 4 or tuple(objects.shape[-2:]) != (h, w):
        raise ShapeError(f"objects must be (T, K, {h}, {w}), got {tuple(objects.shape)}")
    union = objects.to(content_mask.device).bool().any(1)
    return content_mask.bool().unsqueeze(0) & ~dilate(union, margin_px)


def background_keep_chunked(content_mask: torch.Tensor, objects: torch.Tensor, margin_px: int,
                            x1: torch.Tensor, x2: torch.Tensor, pairs: torch.Tensor,
                            chunk: int = 16) -> torch.Tensor:
    """``background_keep(background_mask(content_mask, objects, margin_px), x1, x2, pairs)``
    computed ``chunk`` frames at a time, so no (T, H, W) mask of the whole clip exists
    (identical result: every lookup reads the same per-frame mask).

    Args:
        objects: (T, K, H, W) bool (a tensor or lazy :class:`~geocon_torch.types.BlockMasks`);
        x1, x2: (P, N, 2) px; pairs: (P, 2) long frames of x1 / x2.
    Returns:
        (P, N) bool.
    """
    check_points(x1, "x1")
    check_points(x2, "x2")
    p, n = x1.shape[:2]
    # both endpoints in one lookup: (P, 2, N) points, the frames (P, 2, 1) broadcast over N
    pts = torch.stack([x1, x2], 1)
    frames = pairs.to(x1.device).view(p, 2, 1)
    keep: Optional[torch.Tensor] = None
    for start in range(0, int(objects.shape[0]), chunk):  # fixed-size lookups: no host sync
        bg = background_mask(content_mask, objects[start:start + chunk], margin_px)
        bg = bg.to(x1.device)
        frame = frames - start
        inside = (frame >= 0) & (frame < int(bg.shape[0]))
        got = mask_at_pixels(bg, pts, frame.clamp(0, int(bg.shape[0]) - 1)) | ~inside
        keep = got if keep is None else keep & got
    if keep is None:  # no frames
        return torch.ones(p, n, dtype=torch.bool, device=x1.device)
    return keep.all(1)


def sample_mask(mask: torch.Tensor, points: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """Look up (T, H, W) bool ``mask`` at (P, N, 2) pixel ``points`` of frames (P,) -> (P, N)."""
    check_points(points, "points")
    return mask_at_pixels(mask, points, frames.view(-1, 1))


def background_keep(bg: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                    pairs: torch.Tensor) -> torch.Tensor:
    """(P, N) bool: match is in the background of both frames (``B_i(x1) & B_j(x2)``)."""
    return sample_mask(bg, x1, pairs[:, 0]) & sample_mask(bg, x2, pairs[:, 1])
