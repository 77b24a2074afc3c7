"""Padding-invariant reductions over the point axis.

A pair's points sit at positions [0, n) of a padded axis of width N, the rest are exact zeros.
A plain ``sum`` / GEMM over N may group the additions differently for different N (vector
lanes, cascade levels, BLAS blocking), so the same pair would get different rounding beside a
wider pair. These helpers fix the grouping: the axis is cut into chunks starting at position
0 (64 entries for sums, 256 for GEMMs), every chunk is reduced on its own (a reduction of fixed
length and layout), and the chunk totals are added left to right. Trailing all-zero chunks then
add exact zeros, so the result depends only on the first n entries, never on N. This rests on a
fixed-shape reduction / GEMM giving the same bits whatever the batch around it, which holds for
the CPU kernels (checked by tests/geometry/test_geometry_padding_invariance.py); it is not
verified for CUDA. MKL's batched eigen-solver did not hold to it (its rounding followed each
matrix's memory alignment inside the batch): ``homography._smallest_eigvec`` pads its matrices
so that every one of them is aligned alike.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

CHUNK = 64  # sums; callers that keep N a multiple of it avoid a padding copy
GRAM_CHUNK = 256  # GEMM reductions: long enough that the per-GEMM overhead stays small


def _chunked(x: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """(..., N) -> (..., L, chunk) zero-padded, contiguous."""
    pad = (-x.shape[-1]) % chunk
    x = F.pad(x, (0, pad)) if pad else x.contiguous()
    return x.unflatten(-1, (-1, chunk))


def _scan_total(s: torch.Tensor, dim: int) -> torch.Tensor:
    """Left-to-right total of the chunk totals along ``dim`` (L may be 0)."""
    if s.shape[dim] == 0:
        return s.sum(dim)
    if s.shape[dim] == 1:
        return s.select(dim, 0)
    return s.cumsum(dim).select(dim, -1)


def padded_sum(x: torch.Tensor) -> torch.Tensor:
    """Sum over the last axis, (..., N) -> (...), invariant to trailing zero entries."""
    return _scan_total(_chunked(x).sum(-1), -1)


def _broadcast(s: tuple, t: tuple) -> tuple:
    """The broadcast of two shapes (plain Python: ``torch.broadcast_shapes`` imports sympy on
    its first call)."""
    n = max(len(s), len(t))
    s, t = (1,) * (n - len(s)) + s, (1,) * (n - len(t)) + t
    return tuple(i if j == 1 else j for i, j in zip(s, t))


def padded_gram(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b^T`` over the last axis, (..., r, N) x (..., c, N) -> (..., r, c) (leading dims
    broadcast), invariant to trailing zero entries: one GEMM per chunk of ``GRAM_CHUNK``
    entries, the chunk products accumulated left to right. All chunks go through one batched
    GEMM, each chunk an operand of its own, contiguous and row-major ((..., r, C) and
    (..., C, c)): with a transposed or strided operand the GEMM kernel was seen to change its
    rounding with the batch."""
    N = a.shape[-1]
    lead = _broadcast(tuple(a.shape[:-2]), tuple(b.shape[:-2]))
    r, c = a.shape[-2], b.shape[-2]
    if N == 0:
        return torch.zeros(*lead, r, c, dtype=a.dtype, device=a.device)
    pad = (-N) % GRAM_CHUNK
    if pad:
        a, b = F.pad(a, (0, pad)), F.pad(b, (0, pad))
    L = (N + pad) // GRAM_CHUNK
    a = a.unflatten(-1, (L, GRAM_CHUNK)).transpose(-3, -2)  # (..., L, r, C)
    b = b.unflatten(-1, (L, GRAM_CHUNK)).movedim(-3, -1)  # (..., L, C, c)
    if tuple(a.shape[:-3]) != lead:
        a = a.expand(*lead, L, r, GRAM_CHUNK)
    if tuple(b.shape[:-3]) != lead:
        b = b.expand(*lead, L, GRAM_CHUNK, c)
    # (reshape alone may give a strided view: the operands are copied row-major)
    g = torch.bmm(a.reshape(-1, r, GRAM_CHUNK).contiguous(),
                  b.reshape(-1, GRAM_CHUNK, c).contiguous()).view(*lead, L, r, c)
    out = g.select(-3, 0)
    for i in range(1, L):
        out = out + g.select(-3, i)
    return out
