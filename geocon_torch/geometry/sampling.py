"""Minimal-sample drawing and degeneracy checks for the batched robust estimators.

Random numbers come from a counter-based hash (32-bit "lowbias32" mixer evaluated with int64
torch ops), keyed by ``(seed + pair index, round, sample, slot)``. Every pair therefore owns an
independent, reproducible stream: pair ``p`` of a batch run with ``seed`` draws exactly what a
single-pair run with ``seed + p`` draws, on CPU and CUDA alike, and no global RNG is touched.
Every draw is a function of the pair's key and its own valid-point count, never of the padded
width N of the batch (the estimators' padding invariance rests on this).
"""
from __future__ import annotations

import functools
from typing import Optional, Tuple

import torch

from .._tensor_utils import to_device
from .._checks import is_integer
from ..errors import ArgumentTypeError, InputError

_M32 = 0xFFFFFFFF


def _mul32(x: torch.Tensor, c: int) -> torch.Tensor:
    """``x * c mod 2^32`` for int64 ``x`` in [0, 2^32) without int64 overflow: the constant is
    split, ``c = c_hi 2^16 + c_lo``, so ``x c = x c_lo + ((x c_hi) mod 2^16) 2^16 (mod 2^32)``
    (every term below 2^49; five elementwise ops)."""
    return torch.add(x * (c & 0xFFFF), (x * (c >> 16)) & 0xFFFF, alpha=65536) & _M32


def hash32(x: torch.Tensor) -> torch.Tensor:
    """A well-mixed 32-bit hash of int64 tensors (values taken mod 2^32)."""
    x = x & _M32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def pair_keys(seed, num_pairs: int, device: torch.device) -> torch.Tensor:
    """(P,) int64 stream keys: hash(seed + p) for an int seed, or hash(seed[p]) for a (P,)
    integer tensor of per-pair seeds (so a pair's draws do not depend on its batch position);
    seeds are taken modulo 2^32 (``seed`` and ``seed + 2**32`` are one stream)."""
    if isinstance(seed, torch.Tensor):
        if seed.shape != (num_pairs,) or seed.is_floating_point():
            raise InputError(f"per-pair seeds must be an integer tensor of shape ({num_pairs},), "
                             f"got {seed.dtype} {tuple(seed.shape)}")
        return hash32(seed.to(device=device, dtype=torch.int64) & _M32)
    if not is_integer(seed):  # a float seed would be truncated: 1.9 and 1 the same stream
        raise ArgumentTypeError(f"seed must be an integer or a ({num_pairs},) integer tensor, "
                                f"got {type(seed).__name__} {seed!r}")
    p = torch.arange(num_pairs, device=device, dtype=torch.int64)
    return hash32(p + (int(seed) & _M32))


def stream_base(keys: torch.Tensor, rounds: torch.Tensor) -> torch.Tensor:
    """int64 base hash of the streams (key, round), keys and rounds broadcast (e.g. (A,) and
    (A,), or (A,) and (S, 1) for S streams of every pair at once): what :func:`uniform` and
    :func:`uniform_rows` count from."""
    return hash32(keys + hash32(rounds * 0x9E3779B9 + 0x632BE5AB))


@functools.lru_cache(maxsize=64)
def _counter(kind: str, shape: tuple, device: torch.device) -> torch.Tensor:
    """The data-independent counter terms of the streams, built once per shape and device:
    "flat" (1, *shape) ``arange * 0x85EBCA6B`` over the flattened shape (:func:`uniform`),
    "rows" (1, rows, 1) ``hash32(j * 0x9E3779B1 + 0x165667B1)``, "cols" (1, 1, width)
    ``i * 0x85EBCA6B`` (:func:`uniform_rows`). Callers must not modify them."""
    n = 1
    for s in shape:
        n *= s
    with torch.inference_mode(False):  # plain tensors even when first built inside one
        ctr = torch.arange(n, device=device, dtype=torch.int64)
        if kind == "flat":
            return (ctr * 0x85EBCA6B).view(1, *shape)
        if kind == "rows":
            return hash32(ctr * 0x9E3779B1 + 0x165667B1).view(1, n, 1)
        return (ctr * 0x85EBCA6B).view(1, 1, n)


def uniform(keys: Optional[torch.Tensor], rounds: Optional[torch.Tensor], shape: tuple,
            base: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Uniform float64 in [0, 1) of shape (A, *shape) from per-pair keys (A,) and rounds (A,)
    (or their precomputed ``stream_base(keys, rounds)`` (A,) ``base``; keys and rounds are
    then not read)."""
    base = stream_base(keys, rounds) if base is None else base  # (A,)
    ctr = _counter("flat", tuple(shape), base.device)
    h = hash32(hash32(base.view(-1, *([1] * len(shape))) + ctr) + 0x27D4EB2F)
    return h.to(torch.float64) / 4294967296.0


def uniform_rows(keys: Optional[torch.Tensor], rounds: Optional[torch.Tensor], rows: int,
                 width: int, base: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Uniform float64 in [0, 1) of shape (A, rows, width) whose entry (j, i) depends only on
    (key, round, j, i), not on ``width``: a pair's first n columns are the same whatever padded
    width the batch has (``uniform`` counts through the flattened shape instead). ``base``:
    as :func:`uniform`."""
    base = stream_base(keys, rounds) if base is None else base  # (A,)
    ctr = _counter("rows", (rows,), base.device) + _counter("cols", (width,), base.device)
    h = hash32(base.view(-1, 1, 1) + ctr)  # one mixing round: these only pick LO subsets
    return h.to(torch.float64) / 4294967296.0


def draw_with_replacement(keys: Optional[torch.Tensor], rounds: Optional[torch.Tensor],
                          count: int, pool: torch.Tensor, base: Optional[torch.Tensor] = None
                          ) -> torch.Tensor:
    """(A, count) int64 indices in [0, pool) (pool (A,) >= 1), drawn with replacement; the
    draws depend only on (key, round, pool). ``base``: as :func:`uniform`."""
    u = uniform(keys, rounds, (count,), base)
    r = torch.floor(u * pool.view(-1, 1).to(u.dtype)).long()
    return torch.minimum(r, (pool.view(-1, 1) - 1).clamp_min(0))


def draw_without_replacement(u: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """Distinct indices in [0, pool) from uniforms.

    The i-th index of a sample is drawn among the ``pool - i`` unused ones,
    ``c = floor(u_i (pool - i))``, and mapped past the used ones in ascending order p_0 < p_1 <
    ...: ``c += (c >= p_j)`` for j = 0, 1, ... in turn. As ``p_j - j`` never decreases, that
    sequential walk adds exactly ``#{j: c >= p_j - j}`` (one comparison against all j at once).

    Args:
        u: (A, K, m) uniforms in [0, 1).
        pool: (A,) int64 pool sizes, >= m.

    Returns:
        (A, K, m) int64; the m indices of each sample are distinct.
    """
    m = u.shape[-1]
    slot = torch.arange(m, device=u.device)
    left = pool.view(-1, 1, 1) - slot  # (A, 1, m) unused indices when slot i is drawn
    c = torch.minimum(torch.floor(u * left.to(u.dtype)).long(), (left - 1).clamp_min(0))
    chosen = [c[..., :1]]
    for i in range(1, m):
        used = torch.cat(chosen, -1).sort(-1).values - slot[:i]  # (A, K, i) p_j - j
        ci = c[..., i:i + 1]
        chosen.append(ci + (ci >= used).sum(-1, keepdim=True))
    return torch.cat(chosen, -1)


@functools.lru_cache(maxsize=32)
def _triples(m: int, device: torch.device) -> torch.Tensor:
    """(C(m, 3), 3) long: every index triple a < b < c of m points, on ``device`` (cached)."""
    trip = [(a, b, c) for a in range(m) for b in range(a + 1, m) for c in range(b + 1, m)]
    with torch.inference_mode(False):  # cached: usable by autograd even if built inside one
        return to_device(trip, device, torch.long)


def _triple_cross(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For every index triple (a, b, c) of the m points (..., m, 2): ``cross(b - a, c - a)``
    (twice the signed area) and the squared lengths of b - a and c - a, each (..., C(m, 3))."""
    idx = _triples(x.shape[-2], x.device)
    a, b, c = x[..., idx[:, 0], :], x[..., idx[:, 1], :], x[..., idx[:, 2], :]
    d1, d2 = b - a, c - a
    return d1[..., 0] * d2[..., 1] - d1[..., 1] * d2[..., 0], d1.square().sum(-1), \
        d2.square().sum(-1)


def has_collinear_triple(x: torch.Tensor, rel_tol: float = 1e-3) -> torch.Tensor:
    """True where any three of the m points (..., m, 2) are (nearly) collinear or coincide:
    ``|cross(b - a, c - a)| <= rel_tol * |b - a| |c - a|`` (sine of the angle at a)."""
    cross, n1, n2 = _triple_cross(x)
    return (cross.square() <= (rel_tol * rel_tol) * n1 * n2).any(-1)


def orientation_consistent(x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """True where every triple of the m correspondences (..., m, 2) turns the same way in both
    images, or every triple the opposite way (a mirror), as any homography of a plane seen
    from the same side maps them: (...,) bool. A minimal sample that fails it cannot be all
    inliers of a homography (OpenCV's ``findHomography`` rejects it before solving, Bazargani
    et al. 2015); for random outliers it fails ~7 times in 8."""
    s = (_triple_cross(x1)[0] * _triple_cross(x2)[0]) > 0
    return s.all(-1) | (~s).all(-1)


def has_duplicate(x: torch.Tensor) -> torch.Tensor:
    """True where two of the m points (..., m, 2) are identical (both coordinates equal)."""
    m = x.shape[-2]
    i, j = torch.triu_indices(m, m, 1, device=x.device)
    return (x[..., i, :] == x[..., j, :]).all(-1).any(-1)
