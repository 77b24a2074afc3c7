"""Patch orientation and SIFT description for ``torch-sift`` without convolutions or atomics.

The same arithmetic as kornia's ``PatchDominantGradientOrientation`` (Sobel gradients, 36-bin
histogram weighted by a Gaussian, circular smoothing, parabolic peak) and ``SIFTDescriptor``
(central-difference gradients, 8 angle bins, 4 x 4 triangular spatial pooling, clip at 0.2,
RootSIFT), written for large patch batches:

* the 3 x 3 gradient kernels are shifted slices of the replicate-padded patch (kornia runs a
  (2, 1, 3, 3) convolution: on the GPU an implicit GEMM with NHWC transposes, on the CPU a
  slow mkldnn call for batches of 1-channel 34 x 34 images);
* the descriptor's strided pooling convolution is separable (``A @ v @ A^T`` with a (4, P)
  ``A`` of 12 taps a row): each axis is pooled by multiplying blocks of rows by the taps and
  summing them in a fixed pairwise tree (:func:`tree_sum`), not by cuDNN convolutions;
* the orientation histogram is accumulated in 40-bit fixed point with an int64 ``scatter_add_``:
  integer addition is associative, so the CUDA atomics give the same histogram on every run
  (kornia's float ``scatter_add_`` can differ at the ulp level and flip near-tied peaks); its
  circular smoothing is five shifted multiply-adds.

A patch's numbers do not depend on the other patches of the call: every step is elementwise in
an order fixed by the patch size (no GEMM, whose kernel BLAS / cuBLAS pick by the row count; no
reduction over a row whose split may follow the row count; ``atan2`` from ``atan``, as the CPU's
``atan2`` rounds a tensor's SIMD tail differently), so a frame's descriptors are the same, bit
for bit, alone or in any batch (``tests/features/test_torch_sift_batch_invariance.py``).
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
    ori = torch.where(nonzero, _atan2(gy, gx + eps) + 2.0 * math.pi,
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
                          ) -> Tuple[torch.Tensor, Tuple[float, ...]]:
    """(Gaussian weighting (size, size), the 5 taps of kornia's circular smoothing ``conv1d`` of
    the orientation histogram: ``smoothed[i] = sum_k taps[k] * hist[(i + k - 2) mod 36]``)."""
    with torch.inference_mode(False):  # cached: usable by autograd even if built inside one
        sigma = size / 6.0
        weight = get_gaussian_kernel2d((size, size), (sigma, sigma), True).reshape(size, size)
        taps = get_gaussian_discrete_kernel1d(5, 1.6).reshape(-1).double()
        return to_device(weight, device, dtype), tuple(float(t) for t in taps)


def _smooth_circular(hist: torch.Tensor, taps: Tuple[float, ...]) -> torch.Tensor:
    """``hist (N, B)`` smoothed circularly by ``taps`` (odd count, centred): a fixed sequence of
    rolled multiply-adds, so a row's result does not depend on the other rows (a ``hist @ C``
    GEMM's rounding depends on how many rows share the call)."""
    r = len(taps) // 2
    bins = hist.shape[1]
    ext = torch.cat([hist[:, bins - r:], hist, hist[:, :r]], 1)  # ext[:, j] = hist[(j - r) mod B]
    out = ext[:, :bins] * taps[0]
    for k in range(1, len(taps)):
        out = out + ext[:, k:k + bins] * taps[k]
    return out


def _atan2(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """``atan2(y, x)`` for ``x != -0`` (``atan2(0, 0)`` = 0) from ``atan(y / x)`` and the
    quadrant: on the CPU ``torch.atan2`` runs a vectorised function on whole SIMD blocks and
    libm's on a tensor's tail, which differ in the last bit, so a pixel's angle depended on its
    position in the tensor (on the other patches of the call); ``atan`` is one function
    everywhere."""
    a = torch.where((x == 0) & (y == 0), torch.zeros_like(y), torch.atan(y / x))  # 0/0: 0
    return torch.where(x < 0, torch.where(torch.signbit(y), a - math.pi, a + math.pi), a)


def dominant_orientation(patch: torch.Tensor) -> torch.Tensor:
    """Angle (radians, (N,)) of the dominant gradient of ``patch (N, 1, P, P)``, as kornia's
    ``PatchDominantGradientOrientation(P)`` returns it (counter-clockwise, -atan2 convention)."""
    n, _, size, _ = patch.shape
    weight, taps = orientation_constants(size, patch.dtype, patch.device)
    gx, gy = replicate_gradients(patch[:, 0], sobel=True)
    mag, ori = magnitude_orientation(gx, gy, _EPS_ORIENT)
    b0, b1, w0, w1 = angle_bins(ori, mag * weight, ORIENT_BINS, math.pi)
    fixed = lambda w: torch.round(w.reshape(n, -1).double() * FIXED_POINT).long()  # noqa: E731
    hist = torch.zeros(n, ORIENT_BINS, dtype=torch.long, device=patch.device)
    hist.scatter_add_(1, b0.reshape(n, -1), fixed(w0))
    hist.scatter_add_(1, b1.reshape(n, -1), fixed(w1))
    hist = _smooth_circular(hist.to(patch.dtype) / (FIXED_POINT * size * size), taps)
    values, idx = hist.max(1)
    left = hist.gather(1, ((idx - 1) % ORIENT_BINS)[:, None])[:, 0]
    right = hist.gather(1, ((idx + 1) % ORIENT_BINS)[:, None])[:, 0]
    denom = left + right - 2.0 * values
    sub = torch.where(denom != 0, 0.5 * (left - right) / denom, torch.zeros_like(denom))
    return math.pi - 2.0 * math.pi * (idx.to(patch.dtype) + sub) / ORIENT_BINS


@functools.lru_cache(maxsize=16)
def descriptor_constants(size: int, dtype: torch.dtype, device: torch.device
                         ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(Gaussian weighting (size, size), head, tail, pad) of the descriptor. kornia's strided
    pooling convolution of a (size, size) map v is separable, ``A @ v @ A^T`` with ``A (4,
    size)``: ``cell[c] = sum_i k1[i] * v[c * stride + i - pad]`` along each axis (zero outside
    the patch, ``i < ksize <= 2 * stride``); head (stride, 1) holds the taps ``k1[:stride]``,
    tail (ksize - stride, 1) the rest."""
    with torch.inference_mode(False):  # cached: usable by autograd even if built inside one
        weight = get_gaussian_kernel2d((size, size), (size / math.sqrt(2.0),) * 2, True)
        ksize, stride, pad = get_sift_bin_ksize_stride_pad(size, DESC_CELLS)
        k2 = get_sift_pooling_kernel(ksize).double()  # outer(k1, k1)
        k1 = k2.diagonal().sqrt()  # the separable factor: k2[i, i] = k1[i]^2
        return (to_device(weight.reshape(size, size), device, dtype),
                to_device(k1[:stride, None], device, dtype),
                to_device(k1[stride:, None], device, dtype), pad)


def tree_sum(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Sum of ``x`` over ``dim`` (kept, size 1) by pairwise halving: elementwise adds in an order
    fixed by the size of ``dim`` alone, so an entry's sum never depends on the tensor's other
    entries (a reduction kernel may split the work by the number of rows, on CUDA)."""
    while x.shape[dim] > 1:
        h = x.shape[dim] // 2
        if x.shape[dim] % 2:
            a, b, rest = x.split([h, h, 1], dim)
            x = torch.cat([a + b, rest], dim)
        else:
            a, b = x.split(h, dim)
            x = a + b
    return x


def _pool_rows(v: torch.Tensor, head: torch.Tensor, tail: torch.Tensor, pad: int
               ) -> torch.Tensor:
    """(..., 4, W) cells of ``v (..., P, W)`` along its rows (:func:`descriptor_constants`):
    the padded rows cut into blocks of ``stride``, cell c's taps are block c times the head and
    the start of block c + 1 times the tail, summed by :func:`tree_sum` (no GEMM: its rounding
    depends on how many rows share the call)."""
    stride, nt = head.shape[0], tail.shape[0]
    p = F.pad(v, (0, 0, pad, (DESC_CELLS + 1) * stride - pad - v.shape[-2]))
    blocks = p.unflatten(-2, (DESC_CELLS + 1, stride))  # (..., 5, stride, W)
    terms = blocks[..., :DESC_CELLS, :, :] * head
    if nt:
        later = blocks[..., 1:, :nt, :] * tail
        terms = terms + F.pad(later, (0, 0, 0, stride - nt))
    return tree_sum(terms, -2).squeeze(-2)


def l2_normalize(x: torch.Tensor) -> torch.Tensor:
    """Rows of ``x (N, D)`` at unit L2 norm (:func:`tree_sum` of the squares); an all-zero row
    stays zero (kornia's rule)."""
    return x / torch.sqrt(tree_sum(x * x, 1)).clamp_min(1e-12)


def sift_descriptor(patch: torch.Tensor, rootsift: bool = True) -> torch.Tensor:
    """(N, 128) SIFT descriptors of ``patch (N, 1, P, P)``, kornia's ``SIFTDescriptor(P, 8, 4,
    rootsift)`` layout (angle-major: index = bin * 16 + row * 4 + col). Each patch's numbers
    are fixed elementwise sums of its own pixels: the same whatever other patches share the
    call."""
    n, _, size, _ = patch.shape
    weight, head, tail, pad = descriptor_constants(size, patch.dtype, patch.device)
    gx, gy = replicate_gradients(patch[:, 0], sobel=False)
    mag, ori = magnitude_orientation(gx, gy, _EPS_DESC)
    b0, b1, w0, w1 = angle_bins(ori, mag * weight, DESC_ANGLE_BINS, 0.0)
    zero = torch.zeros((), dtype=patch.dtype, device=patch.device)
    rows = torch.stack([_pool_rows(torch.where(b0 == i, w0, zero) + torch.where(b1 == i, w1, zero),
                                   head, tail, pad)
                        for i in range(DESC_ANGLE_BINS)], 1)  # (N, 8, 4, P): a fixed 8 bins
    cells = _pool_rows(rows.transpose(-1, -2), head, tail, pad).transpose(-1, -2)  # (N, 8, 4, 4)
    desc = l2_normalize(cells.reshape(n, -1))
    desc = l2_normalize(desc.clamp(0.0, CLIP))
    if rootsift:  # desc >= 0: its L1 norm is its sum
        desc = torch.sqrt(desc / tree_sum(desc, 1).clamp_min(1e-12) + _EPS_DESC)
    return desc


__all__ = ["dominant_orientation", "sift_descriptor", "replicate_gradients"]
