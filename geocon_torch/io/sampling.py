"""Which frames to keep (stride / max_frames / explicit indices) and which frame pairs to score.

Frame indices are 0-based positions in the *source* sequence (decode order = display order for
the clips we read). Pairs ``(i, j)`` index frames of a :class:`~geocon_torch.types.Clip`
(positions 0..T-1 of ``clip.frames``), with ``x2 ~ H x1`` / ``x2^T F x1 = 0`` for ``x1`` in
frame i.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import ShapeError, VideoReadError

PairSpec = Union[str, int, Sequence[Tuple[int, int]], torch.Tensor, np.ndarray]


def _is_int(x: object) -> bool:
    return isinstance(x, (int, np.integer)) and not isinstance(x, (bool, np.bool_))


@dataclass(frozen=True)
class FrameSelection:
    """A validated frame-selection rule, usable while streaming (total count unknown).

    Either ``stride`` / ``max_frames`` (keep frames 0, s, 2s, ... up to ``max_frames`` of them:
    the *first* ``max_frames`` after striding) or explicit ``indices`` (any order, repeats
    allowed; returned in the order given). Build it with :func:`frame_selection`.
    """

    stride: int = 1
    max_frames: Optional[int] = None
    indices: Optional[Tuple[int, ...]] = None

    @property
    def wanted(self) -> Optional[frozenset]:
        """The set of source indices to decode, or None for the stride rule."""
        return None if self.indices is None else frozenset(self.indices)

    def keeps(self, i: int, kept: int) -> bool:
        """Whether source frame ``i`` is kept, given ``kept`` frames kept so far (stride rule)."""
        if self.indices is not None:
            return i in self.wanted
        return i % self.stride == 0 and (self.max_frames is None or kept < self.max_frames)

    def finished(self, i: int, kept: int) -> bool:
        """True once no frame after source frame ``i`` can be kept (decoding may stop)."""
        if self.indices is not None:
            return i >= max(self.indices)
        return self.max_frames is not None and kept >= self.max_frames

    def resolve(self, num_frames: int) -> np.ndarray:
        """(T,) int64 source indices for a sequence of known length; raises VideoReadError when
        an explicit index is out of range."""
        if self.indices is not None:
            check_indices_in_range(self.indices, num_frames)
            return np.asarray(self.indices, dtype=np.int64)
        idx = np.arange(0, num_frames, self.stride, dtype=np.int64)
        return idx if self.max_frames is None else idx[: self.max_frames]

    def fps(self, source_fps: float) -> float:
        """Frame rate of the kept frames: source fps / stride (source fps for explicit indices)."""
        return source_fps if self.indices is not None else source_fps / self.stride


def frame_selection(stride: int = 1, max_frames: Optional[int] = None,
                    indices: Optional[Iterable[int]] = None) -> FrameSelection:
    """Validate the sampling arguments of :func:`~geocon_torch.io.read_clip`.

    Raises:
        VideoReadError: stride < 1, max_frames < 1, negative / non-integer / empty indices, or
            indices combined with a non-default stride or max_frames.
    """
    if not _is_int(stride) or stride < 1:
        raise VideoReadError(f"stride must be an integer >= 1, got {stride!r}")
    if max_frames is not None and (not _is_int(max_frames) or max_frames < 1):
        raise VideoReadError(f"max_frames must be None or an integer >= 1, got {max_frames!r}")
    if indices is None:
        return FrameSelection(int(stride), None if max_frames is None else int(max_frames))
    if stride != 1 or max_frames is not None:
        raise VideoReadError("explicit indices cannot be combined with stride or max_frames; "
                             "select the frames you want in the indices list")
    if isinstance(indices, torch.Tensor):
        indices = indices.detach().cpu().reshape(-1).tolist()
    elif isinstance(indices, np.ndarray):
        indices = indices.reshape(-1).tolist()
    idx = tuple(indices)
    if not idx:
        raise VideoReadError("indices is empty: give at least one frame index")
    bad = [i for i in idx if not _is_int(i) or i < 0]
    if bad:
        raise VideoReadError(f"frame indices must be integers >= 0, got {bad[:5]}")
    return FrameSelection(1, None, tuple(int(i) for i in idx))


def check_indices_in_range(indices: Iterable[int], num_frames: int) -> None:
    """Raise VideoReadError naming the indices that are >= ``num_frames``."""
    out = sorted({int(i) for i in indices if int(i) >= num_frames})
    if out:
        raise VideoReadError(f"frame indices {out[:10]} are out of range: the clip has "
                             f"{num_frames} frames (valid 0..{num_frames - 1})")


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
    if not _is_int(num_frames) or num_frames < 0:
        raise ShapeError(f"num_frames must be an integer >= 0, got {num_frames!r}")
    if max_pairs is not None and (not _is_int(max_pairs) or max_pairs < 1):
        raise ShapeError(f"max_pairs must be None or an integer >= 1, got {max_pairs!r}")
    if isinstance(mode, str):
        if mode != "adjacent":
            raise ShapeError(f"pair mode must be 'adjacent', an int stride or a list of (i, j); "
                             f"got {mode!r}")
        mode = 1
    if _is_int(mode):
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
