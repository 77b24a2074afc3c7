"""Frame-pair selection: one function per protocol, named for the protocol.

Every function returns pairs ``(i, j)`` of clip *positions* (0..T-1), first frame first:

=========================  ==========================================================  =========
function                   protocol                                                    returns
=========================  ==========================================================  =========
:func:`make_pairs`         generic: adjacent, every (i, i + s) (overlapping), or a      (P, 2)
                           given list; optional even cap                                torch
:func:`background_pairs`   GeoCon background (paper Algorithm 1): every (i, i + s),     (P, 2)
                           s = ``background.pair_stride`` (1: adjacent)                 torch
:func:`parallax_gate_pairs` GeoCon weight-free gate: near-first/last pairs, then the     (G, 2)
                           two halves, then the quarters                                torch
:func:`worldatlas_pairs`   WorldAtlas epipolar trio: (i, i + s) for i = 0, s, 2s, ...   (P, 2)
                           (non-overlapping steps), at most ``max_pairs`` spread evenly numpy
:func:`gvgc_pairs`         GVGC (Li et al. 2024): (d, i, i + d) per interval d          (P, 3)
                                                                                        numpy
:func:`foreground_pairs`   GeoCon foreground: adjacent pairs (t, t + 1) that hold an    (P',)
                           object, at most ``max_pairs`` spread evenly                  torch
=========================  ==========================================================  =========

Held frames (:mod:`geocon_torch.io.sampling`: ``Clip.meta["motion"]["held"]``, a frame still
against the one before it, e.g. every frame shown twice): :func:`drop_held_pairs` removes the
pairs of two identical frames from a protocol's pairs (:func:`held_of` reads a clip's record),
before any even cap, so a clip with held frames is scored on the pairs that show motion; a
frozen clip, all of whose pairs would go, keeps them.

The protocols differ on purpose (a stride s > 1 gives overlapping pairs for the background and
non-overlapping ones for WorldAtlas, as in each reference); the even cap is always
:func:`spread_evenly` (``round(linspace(0, P - 1, max))``, first and last kept).
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence, TypeVar, Union

import numpy as np
import torch

from .._checks import check_integer
from ..errors import ShapeError
from .sampling import PairSpec, is_int


PairsT = TypeVar("PairsT", torch.Tensor, np.ndarray)


def held_of(clip: Any) -> List[int]:
    """The held positions a reader recorded for ``clip`` (a Clip, or its ``meta`` dict):
    ``meta["motion"]["held"]`` (:mod:`geocon_torch.io.sampling`), [] when it recorded none
    (no held frame, a frozen clip, a Clip built by hand)."""
    meta = clip if isinstance(clip, dict) else getattr(clip, "meta", None)
    motion = meta.get("motion") if isinstance(meta, dict) else None
    held = motion.get("held") if isinstance(motion, dict) else None
    return [int(t) for t in held] if isinstance(held, (list, tuple)) else []


def drop_held_pairs(pairs: PairsT, held: Optional[Sequence[int]], num_frames: int) -> PairsT:
    """Remove the pairs of two identical frames: a pair (i, j) for which every position in
    min(i, j) + 1 .. max(i, j) is held (each frame repeats the one before it), unless that
    would remove every pair (a frozen clip keeps its pairs and its documented behaviour).

    Args:
        pairs: (P, 2) int64 (i, j) clip positions, a tensor (any device) or a numpy array; a
            (P, 3) array of rows (d, i, j) (:func:`gvgc_pairs`) reads its last two columns.
        held: sorted held positions t in 1..T-1 (:func:`held_of`); None or empty: none.
        num_frames: T, the clip's frame count (held positions outside 1..T-1 are ignored).
    Returns:
        The kept rows of ``pairs``, in order, of its type (and device); ``pairs`` itself when
        none is dropped.
    """
    if not held or len(pairs) == 0:
        return pairs
    t = max(int(num_frames), 1)
    moving = np.ones(t, dtype=np.int64)  # moving[k]: position k is not held (k >= 1)
    marks = np.asarray([int(k) for k in held if 1 <= int(k) < t], dtype=np.int64)
    moving[marks] = 0
    count = np.concatenate([[0], np.cumsum(moving[1:])])  # count[k]: moving in 1..k
    rows = np.asarray(pairs.detach().cpu() if isinstance(pairs, torch.Tensor) else pairs,
                      dtype=np.int64)[:, -2:]
    lo, hi = np.clip(rows.min(1), 0, t - 1), np.clip(rows.max(1), 0, t - 1)
    keep = (count[hi] - count[lo] > 0) | (lo == hi)
    if keep.all() or not keep.any():
        return pairs
    if isinstance(pairs, torch.Tensor):
        return pairs[torch.from_numpy(np.flatnonzero(keep)).to(pairs.device)]
    return pairs[keep]


def spread_evenly(num_items: int, max_items: Optional[int]) -> np.ndarray:
    """Positions of at most ``max_items`` of ``num_items`` items spread evenly over the range.

    ``round(linspace(0, num_items - 1, max_items))``: the first and the last item are always
    kept (one item: the first). All positions when ``max_items`` is None or >= ``num_items``.
    """
    if max_items is None or num_items <= max_items:
        return np.arange(num_items, dtype=np.int64)
    if max_items == 1:
        return np.zeros(1, dtype=np.int64)
    return np.rint(np.linspace(0, num_items - 1, max_items)).astype(np.int64)


def make_pairs(num_frames: int, mode: PairSpec = "adjacent",
               max_pairs: Optional[int] = None) -> torch.Tensor:
    """Frame pairs to score, as a (P, 2) int64 tensor of ``(i, j)`` clip positions.

    Args:
        num_frames: T, the number of frames of the clip (>= 0).
        mode: ``"adjacent"`` -> (i, i + 1); an int s >= 1 -> (i, i + s) for i = 0..T-1-s;
            or an explicit list / (P, 2) array / tensor of (i, j), each in 0..T-1 with i != j
            (kept in the given order).
        max_pairs: keep at most this many pairs, spread evenly over the candidate list:
            pair positions ``round(linspace(0, P - 1, max_pairs))`` (first and last pair always
            kept). This is the WorldAtlas rule "at most 8 pairs spread evenly over the clip".

    Returns:
        (P, 2) LongTensor on the CPU; (0, 2) when the clip is too short (e.g. T = 1).

    Raises:
        ShapeError: unknown mode, stride < 1, max_pairs < 1, malformed or out-of-range pairs.
    """
    if not is_int(num_frames) or num_frames < 0:
        raise ShapeError(f"num_frames must be an integer >= 0, got {num_frames!r}")
    if max_pairs is not None and (not is_int(max_pairs) or max_pairs < 1):
        raise ShapeError(f"max_pairs must be None or an integer >= 1, got {max_pairs!r}")
    if isinstance(mode, str):
        if mode != "adjacent":
            raise ShapeError(f"pair mode must be 'adjacent', an int stride or a list of (i, j); "
                             f"got {mode!r}")
        mode = 1
    if is_int(mode):
        if mode < 1:
            raise ShapeError(f"pair stride must be >= 1, got {mode}")
        first = np.arange(max(num_frames - int(mode), 0), dtype=np.int64)
        pairs = np.stack([first, first + int(mode)], axis=1)
    else:
        pairs = _explicit_pairs(mode, num_frames)
    keep = spread_evenly(len(pairs), max_pairs)
    return torch.from_numpy(np.ascontiguousarray(pairs[keep])).reshape(-1, 2)


def _explicit_pairs(spec: PairSpec, num_frames: int) -> np.ndarray:
    if isinstance(spec, torch.Tensor):
        arr = spec.detach().cpu().numpy()
    else:
        try:
            arr = np.asarray(spec)
        except ValueError as exc:  # ragged lists
            raise ShapeError(f"pairs must be a list of (i, j), got {spec!r}") from exc
    if arr.size == 0:
        return np.zeros((0, 2), dtype=np.int64)
    if arr.ndim != 2 or arr.shape[1] != 2:
        raise ShapeError(f"pairs must have shape (P, 2), got {tuple(arr.shape)}")
    if not np.issubdtype(arr.dtype, np.integer):
        raise ShapeError(f"pair indices must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    bad = (arr < 0) | (arr >= num_frames)
    if bad.any():
        rows = [tuple(int(v) for v in r) for r in arr[bad.any(1)][:5]]
        raise ShapeError(f"pairs {rows} index frames outside 0..{num_frames - 1} "
                         f"(the clip has {num_frames} frames)")
    same = arr[:, 0] == arr[:, 1]
    if same.any():
        raise ShapeError(f"a pair needs two different frames, got {arr[same][0].tolist()}")
    return arr


def background_pairs(num_frames: int, pair_stride: int = 1,
                     held: Optional[Sequence[int]] = None) -> torch.Tensor:
    """GeoCon background pairs: (i, i + s) for i = 0..T-1-s (s = ``pair_stride``; 1 = adjacent),
    without the pairs of two identical frames (:func:`drop_held_pairs` of ``held``).

    Args:
        num_frames: T, the clip's frame count (an integer >= 0).
        pair_stride: s, frames between the two of a pair (an integer >= 1; 1 = adjacent).
        held: the clip's held positions (:func:`held_of`); None or empty: all pairs.
    Returns:
        (P, 2) int64 tensor of (i, i + s) clip positions on the CPU, P = max(T - s, 0) less
        the dropped pairs ((0, 2) for a clip shorter than s + 1 frames).
    Raises:
        ArgumentTypeError, InputError: ``pair_stride`` not an integer >= 1 (1.5 is refused,
            never truncated). ShapeError: ``num_frames`` not an integer >= 0.
    """
    stride = check_integer(pair_stride, "pair_stride", 1)
    return drop_held_pairs(make_pairs(num_frames, "adjacent" if stride == 1 else stride), held,
                           num_frames)


def parallax_gate_pairs(num_frames: int, mode: str = "first_last") -> torch.Tensor:
    """Pairs the weight-free (parallax) gate looks at (parallax grows with the baseline).

    ``"first_last"`` (Algorithm 1 A, made robust): the near-first/last pairs (a, b) with
    a in {0, 1, 2}, b in {T-3, T-2, T-1} and b - a >= ceil(0.75 (T-1)) (at least (0, T-1)),
    whose statistics are pooled by their median; then the halves (0, m), (m, T-1) with
    m = (T-1) // 2, and (T >= 5) the quarters between round(k (T-1) / 4), k = 0..4, as
    fallbacks when the wider pairs share too little (a cut, a fast pan). T = 2 (an image
    pair): (0, 1), the only pair, so the gate still reads it through its own view (read at the
    view side: the same pixels whatever the working size). ``"adjacent"`` or T < 2: none (the
    evaluated pairs are used).

    Args:
        num_frames: T, the clip's frame count.
        mode: ``"first_last"`` or ``"adjacent"`` (``gate.parallax_pairs``).
    Returns:
        (G, 2) int64 tensor of (a, b) clip positions on the CPU, widest tier first
        (:func:`gate_pair_tiers`); (0, 2) for "adjacent" or T < 2.
    Raises:
        ShapeError: an unknown ``mode``.
    """
    if mode not in ("first_last", "adjacent"):
        raise ShapeError(f"gate.parallax_pairs must be first_last or adjacent, got {mode!r}")
    if mode == "adjacent" or num_frames < 2:
        return torch.zeros(0, 2, dtype=torch.long)
    if num_frames == 2:
        return torch.tensor([[0, 1]], dtype=torch.long)
    last, m = num_frames - 1, (num_frames - 1) // 2
    need = -(-3 * last // 4)
    wide = [(a, b) for a in range(3) for b in range(last, last - 3, -1) if b - a >= need]
    cuts = [int(round(k * last / 4)) for k in range(5)]
    quarters = list(zip(cuts[:-1], cuts[1:])) if last >= 4 else []
    return torch.tensor(wide + [(0, m), (m, last)] + quarters, dtype=torch.long)


def gate_pair_tiers(pairs: Union[torch.Tensor, Sequence[Sequence[int]]]
                    ) -> Union[torch.Tensor, List[int]]:
    """Tier of each :func:`parallax_gate_pairs` pair: 0 for the wide pairs
    (span >= ceil(0.75 x the widest span)), 1 for the halves (span >= half of it), 2 for the
    quarters; the gate reads the first tier with a valid pair.

    Args:
        pairs: (G, 2) frame pairs (a, b): a tensor (any device) or a host list of pairs.
    Returns:
        The G tiers in {0, 1, 2}: a (G,) int64 CPU tensor for a tensor (one transfer: pairs
        are host bookkeeping), a list of ints for a list.
    """
    rows = pairs.tolist() if isinstance(pairs, torch.Tensor) else [list(p) for p in pairs]
    spans = [abs(int(b) - int(a)) for a, b in rows]
    last = max(spans, default=0)
    need, m = -(-3 * last // 4), last // 2
    tiers = [0 if s >= need else 1 if s >= m else 2 for s in spans]
    return torch.tensor(tiers, dtype=torch.long) if isinstance(pairs, torch.Tensor) else tiers


def worldatlas_pairs(num_frames: int, pair_stride: int = 1, max_pairs: int = 8,
                     held: Optional[Sequence[int]] = None) -> np.ndarray:
    """WorldAtlas pairs (i, i + s) for i = 0, s, 2s, ... (s = pair_stride; non-overlapping steps,
    as the public reference), less the pairs of two identical frames (:func:`drop_held_pairs`
    of ``held``, the clip's held positions; None: none), and, when there are more than
    ``max_pairs`` (> 0), ``max_pairs`` of them spread evenly (:func:`spread_evenly`).

    Args:
        num_frames: T, the clip's frame count (an integer >= 0).
        pair_stride: s, an integer >= 1 (0 or a negative stride is refused, as by
            :func:`make_pairs`).
        max_pairs: keep at most this many pairs, an integer; 0 or less: all of them.
    Returns:
        (P, 2) int64 numpy array of frame positions (P = 0 for clips shorter than s + 1).
    Raises:
        ArgumentTypeError: an argument is not an integer (2.9 is refused, never truncated).
        InputError: ``num_frames`` < 0 or ``pair_stride`` < 1.
    """
    t = check_integer(num_frames, "num_frames", 0)
    s = check_integer(pair_stride, "pair_stride", 1)
    cap = check_integer(max_pairs, "max_pairs (<= 0: all pairs)", None)
    starts = np.arange(0, max(t - s, 0), s, dtype=np.int64)
    pairs = np.stack([starts, starts + s], axis=1) if len(starts) else np.zeros((0, 2), np.int64)
    pairs = drop_held_pairs(pairs, held, t)
    return pairs[spread_evenly(len(pairs), cap if cap > 0 else None)]


def gvgc_pairs(num_frames: int = 71, intervals: Sequence[int] = (60, 50, 40, 30, 20, 10),
               held: Optional[Sequence[int]] = None) -> np.ndarray:
    """GVGC pairs as (P, 3) int64 rows (d, i, i + d) in the original's order (first interval
    first): for each interval d, i = 0, step, 2 step, ... with step = max(int((T - 1 - d) / 10),
    1) while i + d <= T - 1 (T = ``num_frames``, the original's 71 frames 0..70), less the rows
    of two identical frames (:func:`drop_held_pairs` of ``held``, the clip's held positions:
    :func:`held_of`; None or empty: none; positions >= T are ignored). The rows are the
    protocol's own (no cap): a row is dropped only when every frame i + 1 .. i + d is held (a
    still stretch of d + 1 frames or more; every frame shown twice drops none).

    Returns:
        (P, 3) int64 numpy array, P = 66 for the defaults less the dropped rows.
    """
    end = int(num_frames)
    rows = []
    for d in intervals:
        step = max(int((end - 1 - int(d)) / 10), 1)
        for i in range(0, end, step):
            if i + int(d) > end - 1:
                break
            rows.append((int(d), i, i + int(d)))
    return drop_held_pairs(np.asarray(rows, np.int64).reshape(-1, 3), held, end)


def foreground_pairs(present: torch.Tensor, max_pairs: Optional[int] = None,
                     held: Optional[Sequence[int]] = None) -> torch.Tensor:
    """Foreground pairs: indices t of the adjacent pairs (t, t + 1) whose row of ``present``
    holds an object, less those whose frame t + 1 is held (two identical frames:
    :func:`drop_held_pairs`, unless that leaves none), then at most ``max_pairs`` spread evenly
    (:func:`spread_evenly`; the cap applies after the held pairs are dropped).

    Args:
        present: (T - 1, K) bool, object k present in frame t (pair (t, t + 1)).
        max_pairs: cap on the pairs kept, an integer or None (None or <= 0: no cap).
        held: the clip's held positions (:func:`held_of`); None or empty: none dropped (then
            no host copy beyond the one of ``nonzero``; with held positions ``present`` is
            best on the host: the kept pairs are chosen there).
    Returns:
        (P',) int64 indices t (ascending) on ``present``'s device.
    Raises:
        ArgumentTypeError: ``max_pairs`` is neither None nor an integer (1.5 is refused, never
            truncated).
    """
    cap = None if max_pairs is None else check_integer(max_pairs, "max_pairs (<= 0: no cap)",
                                                        None)
    idx = torch.nonzero(present.any(1)).flatten()
    if held:
        adjacent = torch.stack([idx, idx + 1], 1)
        idx = drop_held_pairs(adjacent, held, int(present.shape[0]) + 1)[:, 0]
    cap = cap if cap is not None and cap > 0 else None
    return idx[torch.from_numpy(spread_evenly(int(idx.numel()), cap)).to(idx.device)]
