"""The counter-based hash and the minimal-sample draws of geometry/sampling.py against plain
Python references (exact integers)."""
from __future__ import annotations

import torch

from geocon_torch.geometry.sampling import _mul32, draw_without_replacement, hash32


def _lowbias32(x: int) -> int:
    """The 32-bit "lowbias32" mixer on Python integers (the reference of ``hash32``)."""
    x &= 0xFFFFFFFF
    x ^= x >> 16
    x = (x * 0x7FEB352D) & 0xFFFFFFFF
    x ^= x >> 15
    x = (x * 0x846CA68B) & 0xFFFFFFFF
    return x ^ (x >> 16)


def test_mul32_and_hash32_match_python_integers():
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randint(0, 2 ** 32, (2000,), generator=g, dtype=torch.int64),
                   torch.tensor([0, 1, 0xFFFF, 0x10000, 0xFFFFFFFF, 0xFFFF0000])])
    for c in (0x7FEB352D, 0x846CA68B, 0xFFFFFFFF, 1, 0x10000):
        assert _mul32(x, c).tolist() == [(v * c) & 0xFFFFFFFF for v in x.tolist()]
    wide = torch.cat([x, x + (5 << 32)])  # hash32 takes its input mod 2^32
    assert hash32(wide).tolist() == [_lowbias32(v) for v in wide.tolist()]
    assert hash32(torch.tensor([0, 1, 12345])).tolist() == [0, 1753845952, 2435775735]


def _draw_reference(u: list, pool: int) -> list:
    """Sequential sampling without replacement: the i-th index is drawn among the pool - i
    unused ones (``floor(u (pool - i))``) and mapped past the used ones in ascending order."""
    chosen = []
    for i, ui in enumerate(u):
        c = min(int(ui * (pool - i)), max(pool - i - 1, 0))
        for p in sorted(chosen):
            c += c >= p
        chosen.append(c)
    return chosen


def test_draw_without_replacement_matches_sequential_reference():
    g = torch.Generator().manual_seed(1)
    for m in (4, 7):
        u = torch.rand(3, 50, m, generator=g, dtype=torch.float64)
        u[0, :5] = 0.999999  # the top of the pool, and
        u[1, :5] = 0.0  # the bottom: every index collides with the previous ones
        pool = torch.tensor([m, 9, 500])
        got = draw_without_replacement(u, pool)
        assert got.shape == (3, 50, m)
        for a in range(3):
            for k in range(50):
                ref = _draw_reference(u[a, k].tolist(), int(pool[a]))
                assert got[a, k].tolist() == ref
                assert len(set(ref)) == m and 0 <= min(ref) and max(ref) < pool[a]


def test_uniform_streams_match_python_integers_and_precomputed_bases():
    """uniform / uniform_rows against the hash on Python integers; a precomputed
    stream_base (several streams of every pair at once) gives the same draws."""
    from geocon_torch.geometry.sampling import stream_base, uniform, uniform_rows

    keys, rounds = torch.tensor([5, 2 ** 32 + 7, 123456789]), torch.tensor([0, 3, -2])
    base = [_lowbias32(k + _lowbias32(r * 0x9E3779B9 + 0x632BE5AB))
            for k, r in zip(keys.tolist(), rounds.tolist())]
    u = uniform(keys, rounds, (3, 2))
    ref = [[[_lowbias32(_lowbias32(b + (2 * k + s) * 0x85EBCA6B) + 0x27D4EB2F) / 2 ** 32
             for s in range(2)] for k in range(3)] for b in base]
    assert u.dtype == torch.float64 and u.tolist() == ref
    ur = uniform_rows(keys, rounds, 4, 5)
    ref = [[[_lowbias32(b + _lowbias32(j * 0x9E3779B1 + 0x165667B1) + i * 0x85EBCA6B) / 2 ** 32
             for i in range(5)] for j in range(4)] for b in base]
    assert ur.tolist() == ref
    both = stream_base(keys, torch.stack([rounds, rounds + 7]))  # (2, A)
    assert both[0].tolist() == base
    assert torch.equal(uniform(None, None, (3, 2), both[0]), u)
    assert torch.equal(uniform_rows(None, None, 4, 5, both[0]), ur)
    assert torch.equal(uniform(None, None, (6,), both[1]), uniform(keys, rounds + 7, (6,)))


def test_has_duplicate_compares_both_coordinates():
    """Distinct points never collide (a key x + 2^20 y did: (0, 1) and (2^20, 0) share it, as
    do float32 points 64 px apart and one ulp apart vertically); equal points always do."""
    from geocon_torch.geometry.sampling import has_duplicate

    x = torch.tensor([[[0.0, 1.0], [1048576.0, 0.0], [5.0, 5.0], [7.0, 8.0]],
                      [[100.0, 600.0], [100.0 + 64.0, 600.0 - 2 ** -14], [1.0, 2.0],
                       [3.0, 4.0]],
                      [[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [9.0, 9.0]]], dtype=torch.float32)
    assert has_duplicate(x).tolist() == [False, False, True]
    assert has_duplicate(x.double()).tolist() == [False, False, True]
