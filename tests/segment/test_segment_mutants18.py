"""Mutation round 18a: the band seeds and gated links of the motion segmentation (0.2.6).

Each test pins a number the band-seed confirmation (:func:`_band_discs`, its
:data:`_BAND_PASSES` and :func:`_local_agreement`), the gated space-time links
(:func:`_several`, :func:`_blob_motion`, :func:`_link_gates`, :func:`_motion_components`) or
the band-seed plumbing (:func:`_band_threshold`'s strict gate, the band flags at a reduced
segmentation scale, the seeds evidence) decides, on hand-made inputs whose answer follows from
the documented rule (a reference written from the docstrings, NumPy medians) or on small
synthetic scenes (a textured patch on a static textured background, exact matches).
"""
from __future__ import annotations

from typing import Dict, Sequence, Tuple

import numpy as np
import pytest
import torch
from helpers import identity_fits, smooth_colour_noise

from geocon_torch.config import GeoConConfig
from geocon_torch.segment import motion as seg_motion
from geocon_torch.segment.motion import (_band_discs, _blob_motion, _coherent_of_labels,
                                         _link_gates, _local_agreement, _motion_components,
                                         _several)
from geocon_torch.segment.seeds import motion_masks
from geocon_torch.types import Clip

# --------------------------------------------------------------------------- local agreement


def _agree(points: Sequence[Tuple[int, int, int]], vecs: Sequence[Tuple[float, float]],
           shape=(3, 24, 48), radius: int = 4) -> list:
    """_local_agreement of band seeds at (t, y, x) with motions ``vecs`` -> list of bool."""
    t, h, w = shape
    at = torch.tensor([f * h * w + y * w + x for f, y, x in points])
    band = torch.ones(len(points), dtype=torch.bool)
    vec = torch.tensor(vecs, dtype=torch.float32)
    return _local_agreement(at, band, vec, shape, radius).tolist()


def test_local_agreement_needs_two_other_band_seeds_of_the_same_frame():
    """A pair of band seeds at one pixel moving alike: each has one other, not enough; a third
    makes all three agree. Three alike seeds at one pixel of three frames see none."""
    assert _agree([(0, 10, 10)] * 2, [(3.0, 0.0)] * 2) == [False, False]
    assert _agree([(0, 10, 10)] * 3, [(3.0, 0.0)] * 3) == [True] * 3
    assert _agree([(0, 10, 10), (1, 10, 10), (2, 10, 10)], [(3.0, 0.0)] * 3) == [False] * 3


def test_local_agreement_is_within_half_the_others_mean_motion():
    """Two seeds at (4, 0) and a probe: 1.5 px off their mean agrees (<= 2 = half of 4), 2.5 px
    off does not; at the bound exactly (mean (3, 0) of two seeds at (2.97, 0): 1/16 px sums
    rounded to (3, 0), probe 1.5 px off) it agrees."""
    near = _agree([(0, 5, 5)] * 3, [(4.0, 0.0), (4.0, 0.0), (5.5, 0.0)])
    far = _agree([(0, 5, 5)] * 3, [(4.0, 0.0), (4.0, 0.0), (6.5, 0.0)])
    assert near[2] is True and far[2] is False
    bound = _agree([(0, 5, 5)] * 3, [(2.97, 0.0), (2.97, 0.0), (4.5, 0.0)])
    assert bound[2] is True


def test_local_agreement_reaches_about_the_radius():
    """radius 4 (cells of 2 px, 2 cells each way): two seeds 4 px right of a probe are its
    neighbours, two seeds 7 px right are not (the probe then has no other band seed)."""
    seen = _agree([(0, 10, 20), (0, 10, 24), (0, 10, 24)], [(3.0, 0.0)] * 3)
    unseen = _agree([(0, 10, 20), (0, 10, 27), (0, 10, 27)], [(3.0, 0.0)] * 3)
    assert seen[0] is True and unseen[0] is False


# --------------------------------------------------------------------------- band discs


def _square(mask: torch.Tensor, y: int, x: int, r: int) -> None:
    mask[max(y - r, 0):y + r + 1, max(x - r, 0):x + r + 1] = True


def test_band_seeds_spread_two_seed_radii_per_pass_from_the_changing_pixels():
    """Chains of 3-seed band clusters (moving alike, 2 r apart: each sees only its own) from
    one changing pixel: the cluster r px off it is confirmed in pass 1, the next (2 r further)
    in pass 2, the third not (_BAND_PASSES = 2); a band cluster 2 r from an ordinary seed is
    confirmed by that seed's disc. The discs are those of the ordinary and confirmed seeds."""
    r, h, w = 4, 24, 80
    change = torch.zeros(1, h, w, dtype=torch.bool)
    change[0, 12, 4] = True
    xs = [4 + r, 4 + 3 * r, 4 + 5 * r]  # band clusters along row 12
    cells = [12 * w + x for x in xs for _ in range(3)] + [12 * w + 60] + [12 * w + 68] * 3
    band = torch.tensor([True] * 9 + [False] + [True] * 3)
    vec = torch.tensor([(3.0, 0.0)] * len(cells))
    discs, confirmed = _band_discs(torch.tensor(cells), band, vec,
                                   torch.zeros(len(cells), dtype=torch.bool), change, 0, r)
    assert confirmed.tolist() == [True] * 6 + [False] * 3 + [False] + [True] * 3
    want = torch.zeros(h, w, dtype=torch.bool)
    for x in (xs[0], xs[1], 60, 68):
        _square(want, 12, x, r)
    assert torch.equal(discs[0], want)


def test_band_seeds_of_other_chunks_are_not_neighbours():
    """Chunk of frame 1 only: two band seeds of frame 0 (outside the chunk) moving like the
    chunk's one band seed are not its neighbours, so it is not confirmed beside a changing
    pixel; the outside seeds keep their state."""
    h, w, r = 16, 20, 4
    change = torch.zeros(1, h, w, dtype=torch.bool)
    change[0, 0, 2] = True
    cells = torch.tensor([5 * w + 7, 9 * w + 3, h * w + 0 * w + 1])
    band = torch.ones(3, dtype=torch.bool)
    vec = torch.tensor([(3.0, 0.0)] * 3)
    discs, confirmed = _band_discs(cells, band, vec, torch.zeros(3, dtype=torch.bool), change,
                                   1, r)
    assert confirmed.tolist() == [False, False, False] and not bool(discs.any())


# --------------------------------------------------------------------------- blobs and gates


def test_several_counts_distinct_neighbour_blobs_and_not_the_frame_border():
    """Blob 1 on the left border touches blob 5 only; blob 2 touches blobs 6 and 7; blob 3
    touches none: only blob 2 touches several (the frame border is not a blob)."""
    la = torch.zeros(1, 6, 10, dtype=torch.long)
    lb = torch.zeros_like(la)
    la[0, 0:3, 0] = 1
    la[0, 2:4, 4:6] = 2
    la[0, 5, 9] = 3
    lb[0, 0:3, 0:2] = 5
    lb[0, 2:4, 3] = 6
    lb[0, 2:4, 6] = 7
    several = _several(la, lb, 10)
    assert several[1:4].tolist() == [False, True, False]


def test_blob_motion_is_numpy_median_per_axis_with_six_seeds_known():
    """Blobs with 7 (blob 0: none), 5, 6, 7, 8 and 0 seeds of random motion in shuffled order:
    the per-axis NumPy medians; known only for 6 seeds or more, never blob 0."""
    g = torch.Generator().manual_seed(5)
    counts = {0: 7, 1: 5, 2: 6, 3: 7, 4: 8}
    blob = torch.cat([torch.full((c,), b, dtype=torch.long) for b, c in counts.items()])
    perm = torch.randperm(len(blob), generator=g)
    blob = blob[perm]
    vec = (torch.randint(-40, 40, (len(blob), 2), generator=g) / 4.0).double()
    med, known = _blob_motion(blob, vec, 6)
    assert known.tolist() == [False, False, True, True, True, False, False]
    for b in counts:
        want = np.median(vec[blob == b].numpy(), axis=0)
        assert med[b].tolist() == want.tolist(), b


def _frames(*rows: str) -> torch.Tensor:
    """(T, 1, w) blobs from one string per frame (a digit: that blob, '.': none)."""
    return torch.tensor([[[0 if c == "." else int(c) for c in r]] for r in rows])


def _reference_gates(blobs: torch.Tensor, med: Dict[int, Tuple[float, float]],
                     known: Sequence[int]) -> torch.Tensor:
    """The documented rule cell by cell: bit i of a cell of frame t is cleared when the link to
    offset _NEXT[i] of frame t + 1 joins blobs a, b with a split of a or a merge into b, both
    known and sq. distance of their medians > max(9, 0.09 max(|m_a|^2, |m_b|^2))."""
    t, h, w = blobs.shape
    touched: Dict[Tuple[int, int], set] = {}
    for f in range(t - 1):
        for y in range(h):
            for x in range(w):
                for dy in (-1, 0, 1):
                    for dx in (-1, 0, 1):
                        if 0 <= y + dy < h and 0 <= x + dx < w:
                            a, b = int(blobs[f, y, x]), int(blobs[f + 1, y + dy, x + dx])
                            if a and b:
                                touched.setdefault((0, a), set()).add(b)
                                touched.setdefault((1, b), set()).add(a)
    out = torch.zeros(t, h, w, dtype=torch.int16)
    for f in range(t - 1):
        for y in range(h):
            for x in range(w):
                a = int(blobs[f, y, x])
                for i, (dy, dx) in enumerate(seg_motion._NEXT):
                    inside = 0 <= y + dy < h and 0 <= x + dx < w
                    b = int(blobs[f + 1, y + dy, x + dx]) if inside else 0
                    ma, mb = np.array(med.get(a, (0, 0))), np.array(med.get(b, (0, 0)))
                    tol = max(9.0, 0.09 * max(ma @ ma, mb @ mb))
                    event = len(touched.get((0, a), ())) > 1 or len(touched.get((1, b), ())) > 1
                    apart = event and a in known and b in known and (ma - mb) @ (ma - mb) > tol
                    out[f, y, x] |= (0 if apart else 1) << i
    return out


_GATE_CASES = {
    # merge: 1 (10, 0) and 2 (21, 0) into 3 (14, 0): 1-3 within 30 % of |m_3|, 2-3 beyond
    "merge": (("11...22", "3333333", "4444444"),
              {1: (10, 0), 2: (21, 0), 3: (14, 0), 4: (14, 0)}, (1, 2, 3, 4)),
    # the same as a split of 3
    "split": (("3333333", "11...22"), {1: (10, 0), 2: (21, 0), 3: (14, 0)}, (1, 2, 3)),
    # merge at the 3 px floor: 1-3 exactly 3 px apart (kept), 2-3 2.5 px
    "floor": (("11...22", "3333333"), {1: (0, 0), 2: (0.5, 0), 3: (3, 0)}, (1, 2, 3)),
    # merge where blob 1's motion is unknown (too few seeds): its links stay
    "unknown": (("11...22", "3333333"), {1: (-10, 0), 2: (14, 0), 3: (14, 0)}, (2, 3)),
    # a turn back (no merge, no split): linked whatever the motions
    "bounce": (("..111..", "..222.."), {1: (5, 0), 2: (-5, 0)}, (1, 2)),
}


@pytest.mark.parametrize("budget", [None, 9])
@pytest.mark.parametrize("case", sorted(_GATE_CASES))
def test_link_gates_follow_the_documented_rule(monkeypatch, case, budget):
    """_link_gates equals the cell-by-cell reference (a budget of 9 cells: one frame a chunk),
    and the cases' links are as named: merge / split at 30 %, the 3 px floor inclusive,
    unknown motions and lone turns never cut."""
    if budget is not None:
        monkeypatch.setattr(seg_motion, "_MAP_BUDGET", budget)
    rows, med_of, known_of = _GATE_CASES[case]
    blobs = _frames(*rows)
    n = 10
    med = torch.zeros(n, 2, dtype=torch.float64)
    for b, m in med_of.items():
        med[b] = torch.tensor(m, dtype=torch.float64)
    known = torch.zeros(n, dtype=torch.bool)
    known[list(known_of)] = True
    bits = _link_gates(blobs, med, known)
    assert torch.equal(bits, _reference_gates(blobs, med_of, known_of))
    full = (1 << 9) - 1
    cut = {b for b in range(1, n) if any(int(bits[0, 0, x]) != full
                                         for x in range(blobs.shape[-1])
                                         if int(blobs[0, 0, x]) == b)}
    assert cut == {"merge": {2}, "split": {3}, "floor": set(), "unknown": set(),
                   "bounce": set()}[case]


def test_link_gates_cut_the_merge_link_beyond_the_larger_motions_30_percent():
    """A merge of 1 (10, 0) and 2 (21, 0) into 3 (14, 0): only the links to blob 3 of blob 2's
    cells are cut (the 30 % of the larger motion: 1-3 kept at 4 px < 4.2, 2-3 cut at 7 > 6.3)."""
    rows, med_of, known_of = _GATE_CASES["merge"]
    blobs = _frames(*rows[:2])
    med = torch.zeros(10, 2, dtype=torch.float64)
    for b, m in med_of.items():
        med[b] = torch.tensor(m, dtype=torch.float64)
    known = torch.zeros(10, dtype=torch.bool)
    known[list(known_of)] = True
    bits = _link_gates(blobs, med, known)[0, 0]
    # blob 2's cells: bits 3-5 (offsets (0, -1), (0, 0), (0, 1)) cleared where they reach 3
    assert bits.tolist() == [511, 511, 511, 511, 511, 511 - 8 - 16 - 32, 511 - 8 - 16]


def test_seeds_off_the_motion_map_do_not_vote_on_a_blobs_motion():
    """Blob A (6 seeds (5, 0)) and blob B (6 seeds (-5, 0)) merge into C (7 seeds (5, 0)):
    B is cut from C, two components. Seven (5, 0) seeds in B's cells but on still pixels
    change nothing (they would make B's median (5, 0) and link it)."""
    motion = torch.zeros(2, 32, 64, dtype=torch.bool)
    motion[0, 8:10, 8:20] = True
    motion[0, 8:10, 36:48] = True
    motion[1, 8:10, 8:48] = True

    def pts(xs, y):
        return [(float(x), float(y)) for x in xs]

    p = pts(range(9, 15), 8) + pts(range(37, 43), 9) + pts(range(10, 17), 8) \
        + pts(range(37, 44), 10)
    frames = torch.tensor([0] * 12 + [1] * 7 + [0] * 7)
    vec = torch.tensor([(5.0, 0.0)] * 6 + [(-5.0, 0.0)] * 6 + [(5.0, 0.0)] * 14)
    seeds = (torch.tensor(p), frames, vec, torch.ones(len(p), dtype=torch.bool))
    plain = _motion_components(motion, 4, [], tuple(s[:19] for s in seeds))
    both = _motion_components(motion, 4, [], seeds)
    assert int(plain[1].sum()) == 2
    assert int(both[1].sum()) == 2 and torch.equal(both[0], plain[0])


# --------------------------------------------------------------------------- coherence


def test_band_seeds_count_within_half_the_components_median_motion():
    """Band seeds of one component around (4, 0): 1.5 px off count (<= 2 = half of 4, above
    30 % = 1.2), 2.5 px off do not (ordinary seeds: within 3 px, all count)."""
    vec = torch.tensor([(4.0, 0.0)] * 20 + [(4.0, 1.5)] * 10 + [(4.0, 2.5)] * 5)
    lab = torch.ones(35, dtype=torch.long)
    assert _coherent_of_labels(lab, vec, 1).tolist() == [35]
    assert _coherent_of_labels(lab, vec, 1, torch.ones(35, dtype=torch.bool)).tolist() == [30]


# --------------------------------------------------------------------------- scenes


def _scene(speed: int, size=(96, 128), moving: bool = True, off=None, extra=None,
           t: int = 6) -> tuple:
    """Static textured background, a textured 32 x 40 patch at (30, 20) moving ``speed`` px
    per frame in x (``moving`` False: drawn still); per pair 100 exact background matches
    (8 px grid, away from the patch) and a 5 px grid of 48 matches on the patch, displaced
    (speed, 0) + ``off(position in the patch)``; ``extra(f)`` -> more (x1, x2). Integer
    coordinates: residuals are exact. Identity H. Returns motion_masks' arguments."""
    (h, w), obj, y0, x0 = size, (32, 40), 30, 20
    g = torch.Generator().manual_seed(0)
    bg, ob = smooth_colour_noise(h, w, g), smooth_colour_noise(*obj, g)
    frames = bg.expand(t, 3, h, w).clone()
    for f in range(t):
        x = x0 + (speed * f if moving else 0)
        frames[f, :, y0:y0 + obj[0], x:x + obj[1]] = ob
    ys, xs = torch.meshgrid(torch.arange(4.0, h, 8.0), torch.arange(4.0, w, 8.0), indexing="ij")
    grid = torch.stack([xs.flatten(), ys.flatten()], -1)
    r1, r2 = [], []
    for f in range(t - 1):
        x = x0 + (speed * f if moving else 0)
        inside = (grid[:, 0] >= x - 8) & (grid[:, 0] < x + obj[1] + speed + 8) \
            & (grid[:, 1] >= y0 - 8) & (grid[:, 1] < y0 + obj[0] + 8)
        bgp = grid[~inside][:100]
        oy, ox = torch.meshgrid(torch.arange(y0 + 2.0, y0 + obj[0] - 2, 5.0),
                                torch.arange(x + 2.0, x + obj[1] - 2, 5.0), indexing="ij")
        on = torch.stack([ox.flatten(), oy.flatten()], -1)
        d = torch.tensor([float(speed), 0.0]).expand_as(on).clone()
        if off is not None:
            d = d + off(on - torch.tensor([float(x), float(y0)]))
        a1, a2 = [bgp, on], [bgp, on + d]
        if extra is not None:
            e1, e2 = extra(f)
            a1.append(e1)
            a2.append(e2)
        r1.append(torch.cat(a1))
        r2.append(torch.cat(a2))
    x1, x2 = torch.stack(r1), torch.stack(r2)
    mask = torch.ones(x1.shape[:2], dtype=torch.bool)
    clip = Clip(frames=frames.round().clamp(0, 255).to(torch.uint8), fps=10.0,
                content_mask=torch.ones(h, w, dtype=torch.bool), frame_indices=torch.arange(t),
                source_size=(h, w))
    pairs = torch.tensor([(k, k + 1) for k in range(t - 1)])
    return clip, pairs, x1, x2, mask, identity_fits(mask)


def _evidence(*args, **kw) -> dict:
    return motion_masks(*_scene(*args, **kw), GeoConConfig(), "H")[1]


def test_residual_exactly_tau_h_is_no_band_seed():
    """A patch at 2 px/frame matched exactly: residual 2 px = tau_H, an inlier, so no band
    seed and no seed at all (band seeds are residuals strictly above tau_H)."""
    ev = _evidence(2)
    assert "band_seeds" not in ev and ev["seeds"] == 0 and ev["objects"] == 0, ev


def test_seeds_evidence_counts_only_the_confirmed_band_seeds():
    """The slow mover (48 band matches a pair: 480 band seeds, all confirmed) plus 3 px
    mismatches on a still strip at the right (no change near: never confirmed): the seeds
    and band seeds evidence count 480, the mismatches none."""
    def extra(f):
        ys, xs = torch.meshgrid(torch.arange(10.0, 90, 6.0), torch.arange(104.0, 124, 6.0),
                                indexing="ij")
        p = torch.stack([xs.flatten(), ys.flatten()], -1)
        return p, p + torch.tensor([3.0, 0.0])

    ev = _evidence(3, extra=extra)
    assert ev["objects"] == 1 and ev["band_seeds"] == 480 and ev["seeds"] == 480, ev
    assert ev["object_seeds"] == [480], ev


def test_band_seeds_of_a_part_moving_otherwise_do_not_count_for_the_object():
    """The slow mover's right 3 of 8 match columns say (3, 1.8) (1.8 px off the median (3, 0):
    beyond half its length, within 3 px): its 180 band seeds are confirmed but do not count
    for the object (300 of 480)."""
    def off(rel):
        return torch.stack([torch.zeros(len(rel)), (rel[:, 0] >= 27).float() * 1.8], -1)

    ev = _evidence(3, off=off)
    assert ev["objects"] == 1 and ev["band_seeds"] == 480 and ev["object_seeds"] == [300], ev


def test_band_flags_survive_the_reduced_segmentation_scale():
    """400 x 300 frames are segmented at half size: the still patch's 3 px mismatches are
    still band seeds there (never seed: no object), and the slow mover is still found."""
    ev = _evidence(3, size=(300, 400), moving=False)
    assert ev["objects"] == 0 and "band_seeds" not in ev and ev["scale"] == 0.5, ev
    ev = _evidence(3, size=(300, 400))
    assert ev["objects"] == 1 and ev["band_seeds"] == 480 and ev["scale"] == 0.5, ev
