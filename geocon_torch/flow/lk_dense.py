"""Weight-free dense optical flow: coarse-to-fine pyramidal dense Lucas-Kanade in torch ops.

Algorithm (batched over all P pairs, any device, float32 / float64):

1. grey images, pre-smoothed with a Gaussian (``presmooth`` px), Gaussian pyramid with factor 2
   down to a short side of about ``min_level_size`` px (``levels`` caps the count);
2. from the coarsest level to the finest: upsample the flow (x2 values), then ``iterations``
   Gauss-Newton steps (``fine_iterations`` at the finest level): warp ``img2`` by the current
   flow (bilinear ``grid_sample``), linearise brightness constancy with the mean gradient of
   ``img1`` and the warped ``img2``, accumulate the 2x2 structure tensor and mismatch vector
   under a Gaussian window (``window_sigma`` px), solve each pixel's Tikhonov-regularised 2x2
   system in closed form (``regularization`` is added to the diagonal, so textureless pixels
   keep the coarse flow), clamp the step to 1 px, and median-filter the flow (``median`` x
   ``median``) to remove outliers; a wider median (``level_median``) closes each level;
3. pixels whose warped sample falls outside ``img2`` get no data term (they inherit the
   neighbourhood's flow through the window and the median).

Output: (P, 2, H, W) forward flow ``img1 -> img2`` in pixels (see :mod:`geocon_torch.flow.base`).
"""
from __future__ import annotations

import functools
import math
from typing import List, Optional, Tuple, Union

import torch
import torch.nn.functional as F
from .._checks import check_integer
from .._tensor_utils import sample_at_pixels

from .base import FlowEstimator, to_gray
from ..errors import InputError


@functools.lru_cache(maxsize=64)
def _gaussian_taps(sigma: float) -> Tuple[float, ...]:
    """The 2r + 1 normalised taps (r = ceil(3 sigma), at least 1) of a Gaussian of ``sigma`` px:
    host floats, built once per sigma (no tensor work per blur call)."""
    radius = max(1, int(math.ceil(3.0 * sigma)))
    t = torch.arange(-radius, radius + 1, dtype=torch.float64)
    k = torch.exp(-0.5 * (t / sigma) ** 2)
    return tuple((k / k.sum()).tolist())


def gaussian_blur(x: torch.Tensor, sigma: float) -> torch.Tensor:
    """Separable Gaussian blur of (N, C, H, W) per channel, reflect padding; sigma in px.

    Written as weighted sums of shifted slices (faster on CPU than a depthwise conv2d)."""
    if sigma <= 0:
        return x
    k = _gaussian_taps(float(sigma))
    radius = len(k) // 2
    h, w = x.shape[-2:]
    mode = "reflect" if min(h, w) > radius else "replicate"
    lead = x.shape[:-2]
    y = F.pad(x.reshape(-1, 1, h, w), (radius, radius, 0, 0), mode=mode)
    acc = y[..., 0:w] * k[0]
    for i in range(1, 2 * radius + 1):
        acc.add_(y[..., i:i + w], alpha=k[i])
    y = F.pad(acc, (0, 0, radius, radius), mode=mode)
    acc = y[..., 0:h, :] * k[0]
    for i in range(1, 2 * radius + 1):
        acc.add_(y[..., i:i + h, :], alpha=k[i])
    return acc.reshape(lead + (h, w))


@functools.lru_cache(maxsize=None)
def _median_network(n: int) -> Tuple[Tuple[int, int], ...]:
    """Compare-exchange pairs that leave the median (index (n - 1) // 2) of n values in place:
    Batcher's odd-even merge sort (padded to a power of two with +inf, so comparators past n are
    no-ops), pruned backwards to the comparators the median depends on."""
    size = 1 << max(0, (n - 1).bit_length())
    pairs = []
    p = 1
    while p < size:
        k = p
        while k >= 1:
            for j in range(k % p, size - k, 2 * k):
                for i in range(min(k, size - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    pairs = [(a, b) for a, b in pairs if b < n]
    needed = {(n - 1) // 2}
    kept = []
    for a, b in reversed(pairs):
        if a in needed or b in needed:
            kept.append((a, b))
            needed |= {a, b}
    return tuple(reversed(kept))


def median_filter(x: torch.Tensor, size: int = 3) -> torch.Tensor:
    """Per-channel ``size`` x ``size`` median of (N, C, H, W), replicate padding.

    Computed with a pruned sorting network of elementwise min / max (much faster than
    ``Tensor.median`` over a small dimension on CPU, identical result for odd ``size``).
    """
    if size <= 1:
        return x
    if size % 2 == 0:
        raise InputError(f"median size must be odd, got {size}")
    r = size // 2
    h, w = x.shape[-2:]
    xp = F.pad(x, (r, r, r, r), mode="replicate")
    vals = [xp[..., i:i + h, j:j + w] for i in range(size) for j in range(size)]
    for a, b in _median_network(len(vals)):
        lo, hi = vals[a], vals[b]
        vals[a], vals[b] = torch.minimum(lo, hi), torch.maximum(lo, hi)
    return vals[(len(vals) - 1) // 2]


def _gradients(img: torch.Tensor) -> torch.Tensor:
    """Central-difference (d/dx, d/dy) of (N, 1, H, W) -> (N, 2, H, W), replicate borders."""
    p = F.pad(img, (1, 1, 1, 1), mode="replicate")
    gx = 0.5 * (p[..., 1:-1, 2:] - p[..., 1:-1, :-2])
    gy = 0.5 * (p[..., 2:, 1:-1] - p[..., :-2, 1:-1])
    return torch.cat([gx, gy], dim=1)


def warp(img: torch.Tensor, flow: torch.Tensor) -> tuple:
    """Sample ``img`` (N, C, H, W) at ``x + flow`` (bilinear, pixel-index coordinates).

    Returns (warped (N, C, H, W), inside (N, 1, H, W) bool: the sample lies within the image).
    """
    n, _, h, w = img.shape
    ys = torch.arange(h, dtype=img.dtype, device=img.device).view(1, h, 1)
    xs = torch.arange(w, dtype=img.dtype, device=img.device).view(1, 1, w)
    x = xs + flow[:, 0]
    y = ys + flow[:, 1]
    out = sample_at_pixels(img, torch.stack([x, y], dim=-1))
    inside = (x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)
    return out, inside.unsqueeze(1)


def _resize(x: torch.Tensor, size: tuple) -> torch.Tensor:
    return F.interpolate(x, size=size, mode="bilinear", align_corners=False,
                         antialias=size[0] < x.shape[-2])


class DenseLKFlow(FlowEstimator):
    """Coarse-to-fine dense Lucas-Kanade (``name = "torch-lk"``); see the module docstring.

    Called as ``est(img1, img2)`` (:meth:`FlowEstimator.__call__`): (P, 3|1, H, W) uint8 or
    float in [0, 1], H, W >= 1 (ShapeError otherwise) -> (P, 2, H, W) px, float64 for float64
    frames and float32 for the others. Pixel values are not checked (no host sync): one NaN /
    inf pixel makes the flow of its whole pair non-finite (blur, pyramid and window spread
    it), the other pairs of the batch are unaffected.

    Args:
        levels: maximum pyramid levels, an integer >= 1 (1: the full-resolution level only;
            the pyramid also stops at ``min_level_size``).
        iterations: Gauss-Newton steps per level.
        fine_iterations: steps at the finest level (0 = ``iterations``); the finest level costs
            3/4 of the total, so fewer steps there trade little accuracy for speed.
        window_sigma: Gaussian integration window, px at every level.
        presmooth: Gaussian pre-smoothing of the grey images, px (0 = off).
        median: median-filter size applied after each step (1 = off).
        level_median: median-filter size applied once at the end of each level (1 = off).
        regularization: Tikhonov term added to the structure tensor diagonal (intensity^2 units,
            intensities in [0, 1]).
        min_level_size: the coarsest level keeps a short side of at least this many px.
        batch_size: pairs processed per chunk (bounds memory; each chunk is batched), an
            integer >= 1.
        device: where to run (default: the inputs' device).
    Raises:
        ArgumentTypeError, InputError: ``levels`` / ``batch_size`` not an integer >= 1 (a float
            is refused, never truncated; 0 is refused, never raised to 1).
    """

    name = "torch-lk"

    def __init__(self, *, levels: int = 6, iterations: int = 6, fine_iterations: int = 3,
                 window_sigma: float = 2.0, presmooth: float = 0.7, median: int = 3,
                 level_median: int = 5, regularization: float = 1e-4,
                 min_level_size: int = 16, batch_size: int = 16,
                 device: Optional[Union[str, torch.device]] = None) -> None:
        super().__init__(device)
        self.levels = check_integer(levels, "levels", 1)
        self.iterations = int(iterations)
        self.fine_iterations = int(fine_iterations)
        self.window_sigma = float(window_sigma)
        self.presmooth = float(presmooth)
        self.median = int(median)
        self.level_median = int(level_median)
        self.regularization = float(regularization)
        self.min_level_size = int(min_level_size)
        self.batch_size = check_integer(batch_size, "batch_size (pairs per chunk)", 1)

    def _pyramid(self, img: torch.Tensor) -> List[torch.Tensor]:
        pyr = [img]
        while len(pyr) < self.levels:
            h, w = pyr[-1].shape[-2:]
            nh, nw = (h + 1) // 2, (w + 1) // 2
            if min(nh, nw) < self.min_level_size:
                break
            pyr.append(_resize(pyr[-1], (nh, nw)))
        return pyr

    def _step(self, i1: torch.Tensor, g1: torch.Tensor, i2: torch.Tensor,
              flow: torch.Tensor) -> torch.Tensor:
        i2w, inside = warp(i2, flow)
        grad = 0.5 * (g1 + _gradients(i2w))
        it = i2w - i1
        valid = inside.to(i1.dtype)
        ix, iy = grad[:, :1] * valid, grad[:, 1:] * valid
        it = it * valid
        terms = torch.cat([ix * ix, ix * iy, iy * iy, ix * it, iy * it], dim=1)
        j = gaussian_blur(terms, self.window_sigma)
        lam = self.regularization
        jxx, jxy, jyy, jxt, jyt = (j[:, k] for k in range(5))
        jxx, jyy = jxx + lam, jyy + lam
        det = jxx * jyy - jxy * jxy
        du = -(jyy * jxt - jxy * jyt) / det
        dv = -(jxx * jyt - jxy * jxt) / det
        step = torch.stack([du, dv], dim=1).clamp(-1.0, 1.0)
        return median_filter(flow + step, self.median)

    def _forward(self, img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
        outs = [self._chunk(img1[s:s + self.batch_size], img2[s:s + self.batch_size])
                for s in range(0, img1.shape[0], self.batch_size)]
        return torch.cat(outs)

    def _chunk(self, img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
        g1 = gaussian_blur(to_gray(img1), self.presmooth)
        g2 = gaussian_blur(to_gray(img2), self.presmooth)
        pyr1, pyr2 = self._pyramid(g1), self._pyramid(g2)
        flow = None
        for level, (i1, i2) in enumerate(zip(reversed(pyr1), reversed(pyr2))):
            finest = level == len(pyr1) - 1
            iters = self.fine_iterations if finest and self.fine_iterations else self.iterations
            h, w = i1.shape[-2:]
            if flow is None:
                flow = i1.new_zeros((i1.shape[0], 2, h, w))
            else:
                ph, pw = flow.shape[-2:]
                flow = F.interpolate(flow, size=(h, w), mode="bilinear", align_corners=False)
                flow = flow * torch.tensor([w / pw, h / ph], dtype=flow.dtype,
                                           device=flow.device).view(1, 2, 1, 1)
            grad1 = _gradients(i1)
            for _ in range(iters):
                flow = self._step(i1, grad1, i2, flow)
            flow = median_filter(flow, self.level_median)
        return flow
