"""Patch orientation and SIFT description for ``torch-sift`` without convolutions or atomics.

The same arithmetic as kornia's ``PatchDominantGradientOrientation`` (Sobel gradients, 36-bin
histogram weighted by a Gaussian, circular smoothing, parabolic peak) and ``SIFTDescriptor``
(central-difference gradients, 8 angle bins, 4 x 4 triangular spatial pooling, clip at 0.2,
RootSIFT), written for large patch batches:

* the 3 x 3 gradient kernels are shifted slices of the replicate-padded patch (kornia runs a
  (2, 1, 3, 3) convolution: on the GPU an implicit GEMM with NHWC transposes, on the CPU a
  slow mkldnn call for batches of 1-channel 34 x 34 images);
* the descriptor's strided pooling convolution is the separable product ``A @ v @ A^T`` of two
  (4, P) matrices (cuBLAS batched GEMMs instead of 8 cuDNN convolutions);
* the orientation histogram is accumulated in 40-bit fixed point with an int64 ``scatter_add_``:
  integer addition is associative, so the CUDA atomics give the same histogram on every run
  (kornia's float ``scatter_add_`` can differ at the ulp level and flip near-tied peaks).

Values agree with kornia's modules to float rounding (``tests/features/test_features_sift_patch``).
"""
from __future__ import annotations

import functools
import math
from typing import Tuple

import torch
import torch.nn.functional as F
from kornia.feature.siftdesc import get_sift_bin_ksize_stride_pad, get_sift_pooling_kernel
from kornia.filters import get_gaussian_discrete_kernel1d, get_gaussian_kernel2d

from .._tensor_utils import to_device

ORIENT_BINS = 36
DESC_ANGLE_BINS = 8
DESC_CELLS = 4
CLIP = 0.2
FIXED_POINT = float(2 ** 40)  # orientation histogram resolution (histogram sums stay < 2^23)
_EPS_ORIENT = 1e-8  # kornia's eps of each module
_EPS_DESC = 1e-10


def replicate_gradients(patch: torch.Tensor, sobel: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(gx, gy) of ``patch (N, P, P)`` with replicated borders, each (N, P, P): the Sobel
    derivative (kernel / 8) or the central difference (kernel / 2), kornia's normalised
    ``spatial_gradient`` kernels."""
    x = F.pad(patch[:, None], (1, 1, 1, 1), mode="replicate")[:, 0]
    dx = x[:, :, 2:] - x[:, :, :-2]  # (N, P + 2, P)
    dy = x[:, 2:, :] - x[:, :-2, :]  # (N, P, P + 2)
    if not sobel:
        return 0.5 * dx[:, 1:-1], 0.5 * dy[:, :, 1:-1]
    gx = (dx[:, :-2] + 2.0 * dx[:, 1:-1] + dx[:, 2:]) * 0.125
    gy = (dy[:, :, :-2] + 2.0 * dy[:, :, 1:-1] + dy[:, :, 2:]) * 0.125
    return gx, gy


def magnitude_orientation(gx: torch.Tensor, gy: torch.Tensor, eps: float
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Gradient magnitude and orientation in [2 pi, 4 pi) radians (kornia's convention: a zero
    gradient has magnitude 0 and orientation 2 pi)."""
    sq = gx * gx + gy * gy
    nonzero = sq > 0
    mag = torch.where(nonzero, torch.sqrt(sq + eps), torch.zeros_like(sq))
    ori = torch.where(nonzero, torch.atan2(gy, gx + eps) + 2.0 * math.pi,
                      torch.full_like(sq, 2.0 * math.pi))
    return mag, ori


def angle_bins(ori: torch.Tensor, mag: torch.Tensor, bins: int, offset: float
               ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Linear vote of every pixel into its two neighbouring angle bins: (bin0, bin1) long and
    their weights (w0, w1), each shaped like ``ori``; ``offset`` radians are added first."""
    o = bins * (ori + offset) / (2.0 * math.pi)
    b0 = torch.floor(o)
    w1 = o - b0
    b0 = b0.long() % bins
    return b0, (b0 + 1) % bins, (1.0 - w1) * mag, w1 * mag


@functools.lru_cache(maxsize=16)
def orientation_constants(size: int, dtype: torch.dtype, device: torch.device
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(Gaussian weighting (size, size), circular smoothing matrix (36, 36)) of the orientation
    histogram: ``smoothed = hist @ C`` is kornia's 5-tap circular ``conv1d``."""
    with torch.inference_mode(False):  # cached: usable by autograd even if built inside one
        sigma = size / 6.0
        weight = get_gaussian_kernel2d((size, size), (sigma, sigma), True).reshape(size, size)
        taps = get_gaussian_discrete_kernel1d(5, 1.6).reshape(-1)
        circ = torch.zeros(ORIENT_BINS, ORIENT_BINS, dtype=torch.float64)
        out = torch.arange(ORIENT_BINS)
        for k in range(taps.numel()):  # out[i] = sum_k taps[k] * in[(i + k - 2) mod 36]
            circ[(out + k - 2) % ORIENT_BINS, out] += float(taps[k])
        return to_device(weight, device, dtype), to_device(circ, device, dtype)


def dominant_orientation(patch: torch.Tensor) -> torch.Tensor:
    """Angle (radians, (N,)) of the dominant gradient of ``patch (N, 1, P, P)``, as kornia's
    ``PatchDominantGradientOrientation(P)`` returns it (counter-clockwise, -atan2 convention)."""
    n, _, size, _ = patch.shape
    weight, circ = orientation_constants(size, patch.dtype, patch.device)
    gx, gy = replicate_gradients(patch[:, 0], sobel=True)
    mag, ori = magnitude_orientation(gx, gy, _EPS_ORIENT)
    b0, b1, w0, w1 = angle_bins(ori, mag * weight, ORIENT_BINS, math.pi)
    fixed = lambda w: torch.round(w.reshape(n, -1).double() * FIXED_POINT).long()  # noqa: E731
    hist = torch.zeros(n, ORIENT_BINS, dtype=torch.long, device=patch.device)
    hist.scatter_add_(1, b0.reshape(n, -1), fixed(w0))
    hist.scatter_add_(1, b1.reshape(n, -1), fixed(w1))
    hist = (hist.to(patch.dtype) / (FIXED_POINT * size * size)) @ circ
    values, idx = hist.max(1)
    left = hist.gather(1, ((idx - 1) % ORIENT_BINS)[:, None])[:, 0]
    right = hist.gather(1, ((idx + 1) % ORIENT_BINS)[:, None])[:, 0]
    denom = left + right - 2.0 * values
    sub = torch.where(denom != 0, 0.5 * (left - right) / denom, torch.zeros_like(denom))
    return math.pi - 2.0 * math.pi * (idx.to(patch.dtype) + sub) / ORIENT_BINS


@functools.lru_cache(maxsize=16)
def descriptor_constants(size: int, dtype: torch.dtype, device: torch.device
                         ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(Gaussian weighting (size, size), pooling matrix A (4, size)) of the descriptor: kornia's
    strided pooling convolution of a (size, size) map v is ``A @ v @ A^T``."""
    with torch.inference_mode(False):  # cached: usable by autograd even if built inside one
        weight = get_gaussian_kernel2d((size, size), (size / math.sqrt(2.0),) * 2, True)
        ksize, stride, pad = get_sift_bin_ksize_stride_pad(size, DESC_CELLS)
        k2 = get_sift_pooling_kernel(ksize).double()  # outer(k1, k1)
        k1 = k2.diagonal().sqrt()  # the separable factor: k2[i, i] = k1[i]^2
        pool = torch.zeros(DESC_CELLS, size, dtype=torch.float64)
        for c in range(DESC_CELLS):  # out[c] = sum_i k1[i] * v[c * stride + i - pad]
            for i in range(ksize):
                y = c * stride + i - pad
                if 0 <= y < size:
                    pool[c, y] = k1[i]
        return (to_device(weight.reshape(size, size), device, dtype),
                to_device(pool, device, dtype))


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """Rows of ``x (N, D)`` at unit L2 norm; an all-zero row stays zero (kornia's rule)."""
    zero = x.abs().amax(1, keepdim=True) == 0
    return torch.where(zero, torch.zeros_like(x), F.normalize(x, p=2, dim=1))


def sift_descriptor(patch: torch.Tensor, rootsift: bool = True) -> torch.Tensor:
    """(N, 128) SIFT descriptors of ``patch (N, 1, P, P)``, kornia's ``SIFTDescriptor(P, 8, 4,
    rootsift)`` layout (angle-major: index = bin * 16 + row * 4 + col)."""
    n, _, size, _ = patch.shape
    weight, pool = descriptor_constants(size, patch.dtype, patch.device)
    gx, gy = replicate_gradients(patch[:, 0], sobel=False)
    mag, ori = magnitude_orientation(gx, gy, _EPS_DESC)
    b0, b1, w0, w1 = angle_bins(ori, mag * weight, DESC_ANGLE_BINS, 0.0)
    zero = torch.zeros((), dtype=patch.dtype, device=patch.device)
    cells = [pool @ (torch.where(b0 == i, w0, zero) + torch.where(b1 == i, w1, zero)) @ pool.T
             for i in range(DESC_ANGLE_BINS)]  # a fixed 8 bins, each (N, 4, 4)
    desc = l2_normalize(torch.stack(cells, 1).reshape(n, -1))
    desc = l2_normalize(desc.clamp(0.0, CLIP))
    if rootsift:
        desc = torch.sqrt(F.normalize(desc, p=1, dim=1, eps=1e-12) + _EPS_DESC)
    return desc


__all__ = ["dominant_orientation", "sift_descriptor", "replicate_gradients"]
