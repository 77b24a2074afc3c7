"""Shared builders for the tests/test_features_*.py files: real frames warped by known maps."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from geocon_torch.types import Clip

#: a moderate viewpoint change (rotation, shear, perspective) for a 320x240 frame
H_WARP = np.array([[0.95, 0.08, 12.0], [-0.06, 1.02, -6.0], [1e-4, -2e-4, 1.0]])


def hill_gray(shared_data: Path, size=(320, 240)) -> np.ndarray:
    """hill/1.JPG as uint8 gray at ``size`` (W, H)."""
    import cv2

    img = cv2.imread(str(shared_data / "real" / "hill" / "1.JPG"), cv2.IMREAD_GRAYSCALE)
    assert img is not None
    return cv2.resize(img, size, interpolation=cv2.INTER_AREA)


def warp_pair(img: np.ndarray, h: np.ndarray = H_WARP) -> np.ndarray:
    """(2, H, W) uint8: the image and its warp by ``h`` (x2 ~ h x1, bilinear)."""
    import cv2

    w = cv2.warpPerspective(img, h, (img.shape[1], img.shape[0]), flags=cv2.INTER_LINEAR)
    return np.stack([img, w])


def to_gray_tensor(frames: np.ndarray, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """(T, H, W) uint8 -> (T, 1, H, W) float [0, 1]."""
    return (torch.from_numpy(frames).to(dtype) / 255.0)[:, None].to(device)


def to_clip(frames: np.ndarray, content_mask: np.ndarray | None = None) -> Clip:
    """(T, H, W) uint8 gray -> Clip with RGB = gray."""
    t, h, w = frames.shape
    rgb = torch.from_numpy(frames)[:, None].expand(t, 3, h, w).contiguous()
    mask = torch.ones(h, w, dtype=torch.bool) if content_mask is None else \
        torch.from_numpy(content_mask)
    return Clip(frames=rgb, fps=30.0, content_mask=mask, frame_indices=torch.arange(t),
                source_size=(h, w))


def transfer_errors(x1: torch.Tensor, x2: torch.Tensor, h: np.ndarray) -> np.ndarray:
    """|h x1 - x2| in px for (N, 2) point sets."""
    p = np.c_[x1.double().cpu().numpy(), np.ones(len(x1))] @ h.T
    return np.linalg.norm(p[:, :2] / p[:, 2:] - x2.double().cpu().numpy(), axis=1)


def letterbox(frames: np.ndarray, top: int, left: int) -> tuple:
    """Add black bars (top/bottom ``top`` rows, left/right ``left`` columns) to (T, H, W).
    Returns (frames, content mask (H', W') bool)."""
    t, h, w = frames.shape
    out = np.zeros((t, h + 2 * top, w + 2 * left), np.uint8)
    out[:, top:top + h, left:left + w] = frames
    mask = np.zeros(out.shape[1:], bool)
    mask[top:top + h, left:left + w] = True
    return out, mask
