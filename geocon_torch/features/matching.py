"""Descriptor matching batched over frame pairs: 2-NN L2 distances, Lowe ratio, mutual check.

For every pair (i, j) the descriptors of frame i are matched against those of frame j as one
batched matmul of squared L2 distances (pairs processed in chunks to bound memory and, on the
CPU, to stay in cache; the descriptors of a chunk are gathered only when it is processed).
A keypoint of frame i keeps its nearest neighbour in frame j when ``d1 < ratio * d2`` (OpenCV
convention, L2 distances, not squared); with ``mutual=True`` it must also be the nearest
neighbour of that neighbour: keypoint i keeps its nearest j (the first among ties) when no
valid keypoint of frame i is closer to j and no earlier keypoint of frame i that also chose j is
as close (OpenCV's ``BFMatcher(crossCheck=True)`` also rejects i when an earlier keypoint with
another nearest neighbour ties at j's smallest distance: exact ties between distinct
keypoints only, which the shared clips never show; the first-index back-neighbour would cost a
second, indexed column reduction per pair, +4 ms a 2000 x 2000 pair on the CPU, against 1.4 ms
for the column minimum used). Frames with fewer than two valid keypoints in j give no matches
(the ratio is undefined). A keypoint whose descriptor is not finite (NaN / inf, or a squared norm
that overflows the float32 / float64 distance dtype) is treated as padding, without a host read:
it never matches and is never anyone's nearest or second-nearest neighbour (the other
keypoints of the pair match as if it were masked out).
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from .._checks import check_number, describe
from ..errors import ShapeError
from ..types import Correspondences, Keypoints


def check_pairs(pairs: torch.Tensor, num_frames: int) -> torch.Tensor:
    """Validate a (P, 2) integer pair list against ``num_frames``; return it as long."""
    if not isinstance(pairs, torch.Tensor):
        pairs = torch.as_tensor(pairs, dtype=torch.long)
    if pairs.numel() == 0:
        return pairs.reshape(0, 2).long()
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.is_floating_point():
        raise ShapeError(f"pairs must be an integer tensor of shape (P, 2), got "
                         f"{tuple(pairs.shape)} {pairs.dtype}")
    if bool(((pairs < 0) | (pairs >= num_frames)).any()):  # one host read
        raise ShapeError(f"pair indices must lie in [0, {num_frames - 1}], got range "
                         f"[{int(pairs.min())}, {int(pairs.max())}]")
    return pairs.long()


#: distances per chunk: cache-sized on the CPU (16 MB of float32: 2-3x faster than one large
#: batch there), large on accelerators (2 GB of float32: the pairs of a batch of clips in one or
#: two launches of each op)
CHUNK_DISTANCES = {"cpu": 4e6, "default": 5e8}


def _chunk_size(n1: int, n2: int, device: torch.device) -> int:
    budget = CHUNK_DISTANCES.get(torch.device(device).type, CHUNK_DISTANCES["default"])
    return max(1, int(budget // max(1, n1 * n2)))


def _ratio_match_chunk(d1: torch.Tensor, m1: torch.Tensor, d2: torch.Tensor, m2: torch.Tensor,
                       ratio: float, mutual: bool
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One chunk of :func:`ratio_match` (all of it in one (p, N1, N2) distance tensor).

    Squared distances ``|a|^2 + |b|^2 - 2 a.b`` come from one batched matmul of augmented
    descriptors ``[-2a, |a|^2, 1] . [b, 1, |b|^2]`` (no elementwise pass over the distance
    matrix); padded keypoints get an infinite norm, so they are never a neighbour (frame j) and
    never a back-neighbour (frame i) without a masking pass. Keypoints with a non-finite norm
    (NaN / inf descriptor, or overflow) are padded the same way and their descriptor is zeroed,
    so no NaN reaches a min. The two nearest neighbours come from a min, then a min with the
    best masked out (cheaper than ``topk(2)`` on the CPU).
    """
    n1 = d1.shape[1]
    inf = float("inf")
    if d1.dtype in (torch.float16, torch.bfloat16) or not d1.is_floating_point():
        d1, d2 = d1.float(), d2.float()  # |d|^2 of byte-valued SIFT descriptors (~2.6e5)
        # overflows float16 and uint8 (which also cannot hold the inf padding): float32
    sq1, sq2 = (d1 * d1).sum(-1, keepdim=True), (d2 * d2).sum(-1, keepdim=True)
    # (p, N, 1) padded or not finite (NaN < inf is False): inf norm, zero descriptor (no NaN in
    # the matmul); one comparison, no host read
    drop1, drop2 = ~((sq1 < inf) & m1[..., None]), ~((sq2 < inf) & m2[..., None])
    d1, d2 = d1.masked_fill(drop1, 0.0), d2.masked_fill(drop2, 0.0)
    sq1, sq2 = sq1.masked_fill(drop1, inf), sq2.masked_fill(drop2, inf)
    a = torch.cat([d1 * -2.0, sq1, torch.ones_like(sq1)], -1)
    b = torch.cat([d2, torch.ones_like(sq2), sq2], -1)
    sq = torch.bmm(a, b.transpose(1, 2))  # (p, N1, N2) squared distances (may dip below 0)
    col_min = sq.amin(dim=1) if mutual else None  # (p, N2); padded rows are +inf
    first_sq, idx = sq.min(dim=-1)
    sq.scatter_(-1, idx[..., None], inf)
    second_sq = sq.amin(dim=-1)
    del sq
    first, second = first_sq.clamp_min(0.0).sqrt(), second_sq.clamp_min(0.0).sqrt()
    ok = m1 & (second < inf)  # second >= 0 or NaN: isfinite in one op
    r = torch.where(ok, first / second.clamp_min(torch.finfo(d1.dtype).tiny),
                    torch.ones_like(first))
    # exact duplicates of the best (second == first == 0) give ratio 1: rejected
    r = torch.where(ok & (second == 0), torch.ones_like(r), r)
    ok = ok & (r < ratio)
    if mutual:
        # i is the back-neighbour of its match j when no valid keypoint of frame i is closer to
        # j (ties: the first such i, as argmin); a column minimum instead of an argmin pass
        is_min = m1 & (first_sq <= col_min.gather(1, idx))
        rows = torch.arange(n1, device=d1.device).expand_as(idx)
        first_row = torch.full_like(col_min, n1, dtype=torch.long).scatter_reduce_(
            1, idx, torch.where(is_min, rows, torch.full_like(rows, n1)), "amin")
        ok = ok & is_min & (first_row.gather(1, idx) == rows)
    zero = torch.zeros_like(idx)
    return torch.where(ok, idx, zero), torch.where(ok, r, torch.ones_like(r)), ok


def ratio_match(d1: torch.Tensor, m1: torch.Tensor, d2: torch.Tensor, m2: torch.Tensor, *,
                ratio: float = 0.75, mutual: bool = False,
                chunk: Optional[int] = None) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Batched 2-NN ratio matching of padded descriptor sets.

    Args:
        d1: (P, N1, D) descriptors of the first frame of each pair (any real dtype, e.g. float
            or uint8 SIFT); m1: (P, N1) bool validity.
        d2: (P, N2, D) of the same dtype; m2: (P, N2) bool.
        ratio: Lowe ratio; a match needs d_best < ratio * d_second.
        mutual: also require that the match is the nearest neighbour in the other direction
            (ties: the module docstring).
        chunk: pairs per distance batch (None: sized by ``CHUNK_DISTANCES``).
    Returns:
        (nn12 (P, N1) long index into frame j (0 where unmatched), ratios (P, N1) in [0, 1)
        (1 where unmatched; the dtype of float descriptors, float32 for integer ones),
        matched (P, N1) bool). A keypoint with a non-finite descriptor is handled as padding
        (module docstring).
    Raises:
        ShapeError: a descriptor set is not (P, N, D) real, d1 / d2 differ in P, D or dtype,
            or a mask is not a (P, N) bool tensor of its set.
    """
    _check_sets(d1, m1, d2, m2)
    p, n1 = d1.shape[:2]
    n2 = d2.shape[1]
    return _match_chunks(p, n1, n2, lambda sl: (d1[sl], m1[sl], d2[sl], m2[sl]), d1.device,
                         d1.dtype, ratio, mutual, chunk)


def _check_sets(d1: torch.Tensor, m1: torch.Tensor, d2: torch.Tensor, m2: torch.Tensor
                ) -> None:
    """ShapeError unless d1 (P, N1, D), d2 (P, N2, D) are real tensors of one dtype and m1 / m2
    (P, N1) / (P, N2) bool (metadata only: no host read)."""
    for name, d in (("d1", d1), ("d2", d2)):
        if not isinstance(d, torch.Tensor) or d.ndim != 3 or d.is_complex():
            raise ShapeError(f"{name} must be a (P, N, D) real tensor, got {describe(d)}")
    if d2.shape[0] != d1.shape[0] or d2.shape[2] != d1.shape[2] or d2.dtype != d1.dtype:
        raise ShapeError(f"d2 must be a ({d1.shape[0]}, N2, {d1.shape[2]}) {d1.dtype} tensor "
                         f"like d1, got {tuple(d2.shape)} {d2.dtype}")
    for name, m, d in (("m1", m1, d1), ("m2", m2, d2)):
        if not isinstance(m, torch.Tensor) or tuple(m.shape) != tuple(d.shape[:2]) \
                or m.dtype != torch.bool:
            raise ShapeError(f"{name} must be a {tuple(d.shape[:2])} torch.bool tensor, got "
                             f"{describe(m)}")


def _match_chunks(p: int, n1: int, n2: int, take, dev: torch.device, dtype: torch.dtype,
                  ratio: float, mutual: bool, chunk: Optional[int]
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Run :func:`_ratio_match_chunk` over chunks of pairs; ``take(slice)`` returns that
    chunk's (d1, m1, d2, m2), so only one chunk of gathered descriptors exists at a time."""
    nn12 = torch.zeros(p, n1, dtype=torch.long, device=dev)
    # integer (e.g. uint8 SIFT) descriptors: the chunks compute float32 ratios, keep them so
    ratios = torch.ones(p, n1, dtype=dtype if dtype.is_floating_point else torch.float32,
                        device=dev)
    matched = torch.zeros(p, n1, dtype=torch.bool, device=dev)
    if p == 0 or n1 == 0 or n2 < 2:
        return nn12, ratios, matched
    step = chunk or _chunk_size(n1, n2, dev)
    for s in range(0, p, step):  # chunks of pairs, each one batched matmul
        sl = slice(s, s + step)
        nn12[sl], ratios[sl], matched[sl] = _ratio_match_chunk(*take(sl), ratio, mutual)
    return nn12, ratios, matched


def pack_matches(x1: torch.Tensor, x2: torch.Tensor, keep: torch.Tensor, scores: torch.Tensor,
                 pairs: torch.Tensor, num_kp1: torch.Tensor, num_kp2: torch.Tensor
                 ) -> Correspondences:
    """Move the kept entries of (P, N, 2) x1 / x2 to the front of each row (stable order), zero
    the padding, trim N to the largest count and wrap them as Correspondences."""
    order = torch.sort((~keep).to(torch.uint8), dim=1, stable=True).indices
    n = int(keep.sum(1).max()) if keep.numel() else 0
    order = order[:, :n]
    mask = keep.gather(1, order)
    g2 = order[..., None].expand(-1, -1, 2)
    z = lambda t: t.masked_fill(~mask[..., None], 0)  # noqa: E731
    return Correspondences(x1=z(x1.gather(1, g2)), x2=z(x2.gather(1, g2)), mask=mask,
                           scores=scores.gather(1, order).masked_fill(~mask, 0),
                           pairs=pairs, num_kp1=num_kp1, num_kp2=num_kp2)


def match_descriptors(kps: Keypoints, pairs: torch.Tensor, *, ratio: float = 0.75,
                      mutual: bool = False, chunk: Optional[int] = None) -> Correspondences:
    """Match the keypoints of frame i to frame j for every pair (i, j), all pairs batched.

    Args:
        kps: Keypoints of T frames (T, N, ...).
        pairs: (P, 2) long frame indices (i, j); x1 come from frame i, x2 from frame j.
        ratio: Lowe ratio, a number in (0, 1] (default 0.75; the config's ``features.ratio``).
        mutual: require mutual nearest neighbours.
        chunk: pairs per distance batch (None: sized by ``CHUNK_DISTANCES``).
    Returns:
        Correspondences with x1, x2 (P, M, 2) pixels, mask (P, M), scores = 1 - ratio (higher is
        better, PROSAC ordering; the descriptors' dtype, float32 for integer descriptors),
        ``num_kp1`` / ``num_kp2`` the valid keypoints of frames i / j. Matches keep the order
        of the keypoints in frame i. A keypoint with a non-finite descriptor never matches and
        is never a neighbour (module docstring).
    Raises:
        InputError / ArgumentTypeError: ``ratio`` outside (0, 1] / not a number; ShapeError /
            InputError: bad pairs.
    """
    check_number(ratio, "ratio", 0, 1, low_open=True)
    pairs = check_pairs(pairs, int(kps.xy.shape[0])).to(kps.xy.device)
    i, j = pairs[:, 0], pairs[:, 1]
    n = int(kps.xy.shape[1])
    desc, km = kps.descriptors, kps.mask

    def take(sl: slice):  # gather one chunk of pairs' descriptors at a time (bounded memory)
        return desc[i[sl]], km[i[sl]], desc[j[sl]], km[j[sl]]

    nn12, ratios, matched = _match_chunks(int(pairs.shape[0]), n, n, take, desc.device,
                                          desc.dtype, ratio, mutual, chunk)
    x1 = kps.xy[i]
    x2 = kps.xy[j].gather(1, nn12[..., None].expand(-1, -1, 2)) if kps.xy.shape[1] else x1
    counts = kps.counts
    return pack_matches(x1, x2, matched, 1.0 - ratios, pairs, counts[i], counts[j])
