"""Binary morphology of batched bool masks with square structuring elements.

Dilation by a (2r+1)^2 square is separable (rows, then columns) and, per axis, a sliding OR of
width k = 2r + 1: a pixel is set when the number of set pixels in its window is not zero, read
off a running count (a cumulative sum over the zero-padded axis: the window's count is the
difference of two entries). That is five tensor ops per axis whatever the radius (one kernel
launch each on CUDA). The counts are kept in uint8 for k < 256 (a sum wraps modulo 256 there,
but a window holds at most k < 256 set pixels, so "difference != 0" is exact), int64 beyond.
Pixels outside the frame count as False for dilation (and, equivalently, as True for erosion:
erosion never eats in from the frame border).
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from ._checks import check_integer


def _sliding_or(x: torch.Tensor, radius: int, dim: int) -> torch.Tensor:
    """OR over offsets [-radius, radius] along ``dim`` (>= 0) of a bool tensor (zero-padded)
    -> bool, same shape."""
    length = x.shape[dim]
    k = 2 * radius + 1
    pad = [0, 0] * (x.ndim - 1 - dim) + [radius + 1, radius]  # F.pad lists the last dim first
    # count[j] = set pixels among x[.. j - r - 1]: the window of i is count[i + k] - count[i]
    count = F.pad(x, pad).cumsum(dim, dtype=torch.uint8 if k < 256 else torch.long)
    return count.narrow(dim, k, length) != count.narrow(dim, 0, length)


def dilate_mask(masks: torch.Tensor, radius: int) -> torch.Tensor:
    """Binary dilation of (..., H, W) masks by a (2 radius + 1)^2 square -> bool, same shape
    (radius 0: unchanged). ArgumentTypeError / InputError unless ``radius`` is an integer >= 0
    (px: 1.5 and -1 are refused, not rounded or read as "no dilation")."""
    radius = check_integer(radius, "dilation radius (px)", 0)
    m = masks.bool()
    if radius == 0 or m.numel() == 0:
        return m
    return _sliding_or(_sliding_or(m, radius, m.ndim - 1), radius, m.ndim - 2)


def erode_mask(masks: torch.Tensor, radius: int) -> torch.Tensor:
    """Binary erosion of (..., H, W) masks by a (2 radius + 1)^2 square -> bool, same shape
    (radius: an integer >= 0, as for :func:`dilate_mask`)."""
    radius = check_integer(radius, "erosion radius (px)", 0)
    m = masks.bool()
    return ~dilate_mask(~m, radius) if radius > 0 and m.numel() else m
