"""The working resolution: every pixel result of the package is reported in it.

Rule: scale the source so its long side equals ``long_side`` (default 1024, the paper's working
resolution), aspect ratio kept, then round height and width to the nearest even number (so the
frames can be written back as yuv420p mp4 and halved by pyramids). ``long_side=None`` keeps the
native pixels; an odd height or width then loses its last row / column (a 1-px crop, no
resampling, so coordinates stay exact). Shrinking uses area averaging (cv2.INTER_AREA for decoded
frames, antialiased bilinear ``torch.nn.functional.interpolate`` for tensors); enlarging uses
bilinear interpolation.

Pixel convention of the resize (OpenCV and torch ``align_corners=False`` agree):
``x_work = (x_src + 0.5) * sx - 0.5`` with ``sx = W_work / W_src`` (and the same for y).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import VideoReadError

#: Values (input or output, the larger) per interpolate call: bounds the float copies of large
#: or upscaled tensors.
RESIZE_CHUNK_VALUES = 1 << 24


def _even(x: float) -> int:
    return max(2, 2 * int(round(x / 2.0)))


@dataclass(frozen=True)
class WorkingSize:
    """Source (H, W) -> working (h, w), and how to get there.

    Attributes:
        source: (H, W) in px.
        size: (h, w) in px, both even.
        crop: True when the working frame is the source with its odd last row / column dropped
            (no resampling).
    """

    source: Tuple[int, int]
    size: Tuple[int, int]
    crop: bool

    @property
    def scale(self) -> float:
        """Working long side / source long side (the ``Clip.scale``); 1.0 for a crop (the
        pixels are the source's: dropping an odd last row / column scales nothing)."""
        return 1.0 if self.crop else max(self.size) / max(self.source)

    @property
    def scale_xy(self) -> Tuple[float, float]:
        """(w / W, h / H): exact per-axis factors (they differ from ``scale`` by the even
        rounding, at most 1 px over the side); (1.0, 1.0) for a crop."""
        if self.crop:
            return 1.0, 1.0
        return self.size[1] / self.source[1], self.size[0] / self.source[0]

    @property
    def shrinks(self) -> bool:
        return self.size[0] * self.size[1] < self.source[0] * self.source[1]


def working_size(height: int, width: int, long_side: Optional[int] = 1024,
                 upscale: bool = True) -> WorkingSize:
    """Working resolution of an (height, width) source; see the module docstring.

    Args:
        long_side: target long side in px (>= 2), or None for native pixels.
        upscale: when False, sources smaller than ``long_side`` keep their native size.
    Raises:
        VideoReadError: frames smaller than 2 px on a side, or a bad ``long_side``.
    """
    if height < 2 or width < 2:
        raise VideoReadError(f"frames of {width}x{height} px are too small (need >= 2x2)")
    if long_side is not None and (isinstance(long_side, bool) or not isinstance(
            long_side, (int, np.integer)) or long_side < 2):
        raise VideoReadError(f"long_side must be None or an integer >= 2, got {long_side!r}")
    s = 1.0 if long_side is None else long_side / max(height, width)
    if not upscale:
        s = min(s, 1.0)
    if s == 1.0:
        return WorkingSize((height, width), (height - height % 2, width - width % 2), True)
    return WorkingSize((height, width), (_even(height * s), _even(width * s)), False)


def resize_image(image: np.ndarray, ws: WorkingSize) -> np.ndarray:
    """(H, W, 3) uint8 -> (h, w, 3) uint8 contiguous (cv2.INTER_AREA when shrinking).

    A frame whose size differs from ``ws.source`` (a stream that changes resolution) is resized
    to ``ws.size`` too, so every frame of a clip comes out the same size."""
    import cv2

    h, w = ws.size
    same = tuple(image.shape[:2]) == ws.source
    if ws.crop and same:
        return np.ascontiguousarray(image[:h, :w])
    shrinks = image.shape[0] * image.shape[1] > h * w
    interp = cv2.INTER_AREA if shrinks else cv2.INTER_LINEAR
    return cv2.resize(image, (w, h), interpolation=interp)


def resize_frames(frames: torch.Tensor, ws: WorkingSize) -> torch.Tensor:
    """(N, C, H, W) uint8 on any device -> (N, C, h, w) uint8 on the same device.

    Antialiased bilinear interpolation when shrinking, bilinear when enlarging; processed in
    chunks of frames so the float copy stays bounded.
    """
    h, w = ws.size
    if ws.crop:
        return frames[..., :h, :w].contiguous()
    n = frames.shape[0]
    per = max(1, RESIZE_CHUNK_VALUES // max(1, frames[0].numel(), frames.shape[1] * h * w))
    out = torch.empty((n, frames.shape[1], h, w), dtype=torch.uint8, device=frames.device)
    for start in range(0, n, per):
        chunk = frames[start:start + per].float()
        res = F.interpolate(chunk, size=(h, w), mode="bilinear", align_corners=False,
                            antialias=ws.shrinks)
        out[start:start + per] = res.round_().clamp_(0, 255).to(torch.uint8)
    return out
