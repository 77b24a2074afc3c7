"""Which frames to keep (stride / max_frames / explicit indices) and which frame pairs to score.

Frame indices are 0-based positions in the *source* sequence (decode order = display order for
the clips we read). Pairs ``(i, j)`` index frames of a :class:`~geocon_torch.types.Clip`
(positions 0..T-1 of ``clip.frames``), with ``x2 ~ H x1`` / ``x2^T F x1 = 0`` for ``x1`` in
frame i.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import VideoReadError

PairSpec = Union[str, int, Sequence[Tuple[int, int]], torch.Tensor, np.ndarray]


def is_int(x: object) -> bool:
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

    def resolve(self, num_frames: int,
                path: Optional[Union[str, os.PathLike]] = None) -> np.ndarray:
        """(T,) int64 source indices for a sequence of known length; raises VideoReadError
        (naming ``path`` when given) when an explicit index is out of range."""
        if self.indices is not None:
            check_indices_in_range(self.indices, num_frames, path)
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
    if not is_int(stride) or stride < 1:
        raise VideoReadError(f"stride must be an integer >= 1, got {stride!r}")
    if max_frames is not None and (not is_int(max_frames) or max_frames < 1):
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
    bad = [i for i in idx if not is_int(i) or i < 0]
    if bad:
        raise VideoReadError(f"frame indices must be integers >= 0, got {bad[:5]}")
    return FrameSelection(1, None, tuple(int(i) for i in idx))


def check_indices_in_range(indices: Iterable[int], num_frames: int,
                           path: Optional[Union[str, os.PathLike]] = None,
                           announced: Optional[int] = None) -> None:
    """Raise VideoReadError naming the indices that are >= ``num_frames`` (and ``path``, the
    clip's file or folder, when given). ``announced``: the frame count the container
    announces; when more than ``num_frames`` the message says the file decoded fewer frames."""
    out = sorted({int(i) for i in indices if int(i) >= num_frames})
    if out:
        where = f"{path}: " if path is not None else ""
        short = (f"; the file announces {announced} frames but only {num_frames} decode"
                 if announced is not None and announced > num_frames else "")
        raise VideoReadError(f"{where}frame indices {out[:10]} are out of range: the clip has "
                             f"{num_frames} frames (valid 0..{num_frames - 1}){short}")
