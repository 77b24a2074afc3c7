"""OpenCV SIFT (CPU; the parity backend of the WorldAtlas / GVGC protocols).

``cv2.SIFT_create(nfeatures=max_keypoints)`` run per frame on the uint8 image
``round(gray * 255)`` with the content mask passed to OpenCV. Descriptors are OpenCV's raw
float SIFT vectors (``rootsift=True`` converts them to RootSIFT). OpenCV may return a few more
than ``nfeatures`` keypoints (one per extra orientation); the strongest ``max_keypoints`` are kept.

Pixel convention: OpenCV builds its first octave by doubling the image (``cv2.resize``, pixel
centres aligned: doubled pixel u sits at x = u / 2 - 0.25) but reports ``pt = u / 2``, so its
positions are 0.25 px right of and below the true ones, at every octave. By default that offset
is removed (``pt - 0.25``) so every backend shares the pixel-centre-at-integer convention and
multi-scale positions map back exactly; ``centre_correction=False`` returns OpenCV's raw points.
"""
from __future__ import annotations

from typing import Optional

import numpy as np
import torch

from ..types import Keypoints
from .base import DeviceLike, check_gray, compact_keypoints, inside_mask, pad_keypoints, \
    register_extractor


#: OpenCV SIFT positions are this many px right of / below the true ones (module docstring).
OPENCV_SIFT_OFFSET = 0.25


def to_uint8(gray: torch.Tensor) -> np.ndarray:
    """(T, 1, H, W) float [0, 1] -> (T, H, W) uint8 numpy (rounded, clipped)."""
    return (gray[:, 0].detach().to("cpu", torch.float32) * 255.0).round().clamp(0, 255) \
        .to(torch.uint8).numpy()


@register_extractor("opencv-sift")
class OpenCVSIFT:
    """Per-frame OpenCV SIFT (a loop over frames: OpenCV works on one image at a time).

    Args:
        max_keypoints: ``nfeatures`` of cv2.SIFT_create and the cap per frame.
        device: accepted for interface symmetry; computation is on the CPU and the result lives
            on the input's device.
        rootsift: convert descriptors to RootSIFT (default False: raw OpenCV, for parity).
        centre_correction: subtract OpenCV's +0.25 px position offset (default True).
        sift_options: extra keyword arguments of cv2.SIFT_create (contrastThreshold, ...).
    """

    name = "opencv-sift"
    descriptor_dim = 128

    def __init__(self, max_keypoints: int = 2000, device: DeviceLike = None, *,
                 rootsift: bool = False, centre_correction: bool = True,
                 **sift_options) -> None:
        import cv2

        self.max_keypoints = int(max_keypoints)
        self.device = torch.device("cpu")
        self.rootsift = rootsift
        self.offset = OPENCV_SIFT_OFFSET if centre_correction else 0.0
        self._sift = cv2.SIFT_create(nfeatures=self.max_keypoints, **sift_options)

    @torch.no_grad()
    def extract(self, gray: torch.Tensor, mask: Optional[torch.Tensor] = None) -> Keypoints:
        """Keypoints of ``gray (T, 1, H, W)``; ``mask (H, W)`` bool or None. Scores are OpenCV
        responses; extra ``scale`` (kp.size, px) and ``orientation`` (kp.angle, degrees)."""
        mask = check_gray(gray, mask)
        frames = to_uint8(gray)
        cv_mask = None if mask is None else mask.cpu().numpy().astype(np.uint8) * 255
        xys, descs, scores, sizes, angles = [], [], [], [], []
        for img in frames:
            kp, des = self._sift.detectAndCompute(img, cv_mask)
            if des is None or len(kp) == 0:
                des = np.zeros((0, 128), np.float32)
                kp = []
            xys.append(torch.tensor([k.pt for k in kp], dtype=torch.float64).reshape(-1, 2)
                       - self.offset)
            d = torch.from_numpy(np.ascontiguousarray(des, dtype=np.float32))
            if self.rootsift:
                d = torch.sqrt(d / d.sum(-1, keepdim=True).clamp_min(1e-12))
            descs.append(d)
            scores.append(torch.tensor([k.response for k in kp], dtype=torch.float32))
            sizes.append(torch.tensor([k.size for k in kp], dtype=torch.float32))
            angles.append(torch.tensor([k.angle for k in kp], dtype=torch.float32))
        kps = pad_keypoints(xys, descs, scores, 128, gray.device, gray.dtype,
                            extras={"scale": sizes, "orientation": angles})
        return compact_keypoints(kps, inside_mask(kps.xy, mask), self.max_keypoints)
