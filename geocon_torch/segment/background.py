"""Background = content mask minus the dilated union of the object masks (paper sec. 4.3).

``B_t = content \\ dilate(U_k M_t^k, margin)``; a correspondence of pair (i, j) is background when
``x1`` lies in ``B_i`` and ``x2`` in ``B_j`` (Algorithm 1 B: ``B_t ∩ B_{t+1}``). Points are pixel
``(x, y)`` at working resolution, looked up at the nearest pixel; points outside the frame are
not background.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence

import torch

from .._checks import check_integer, check_points, check_same_shape, describe
from .._morphology import dilate_mask
from .._tensor_utils import mask_at_pixels, to_device
from ..errors import InputError, ShapeError

#: dtypes accepted for frame indices (``frames`` / ``pairs``)
_INDEX_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def dilate(masks: torch.Tensor, radius: int) -> torch.Tensor:
    """Binary dilation by a (2r+1)^2 square, batched
    (:func:`geocon_torch._morphology.dilate_mask`; pixels outside the frame count as False).

    Args:
        masks: (..., H, W) masks (any dtype; nonzero = set).
        radius: r in px, an integer >= 0 (0: the masks unchanged, as bool).
    Returns:
        (..., H, W) bool, same shape and device.
    Raises:
        ArgumentTypeError, InputError: ``radius`` not an integer >= 0 (1.5 is refused).
    """
    return dilate_mask(masks, radius)


def background_mask(content_mask: torch.Tensor, objects: Optional[torch.Tensor],
                    margin_px: int = 4, num_frames: Optional[int] = None) -> torch.Tensor:
    """Per-frame background masks.

    Args:
        content_mask: (H, W) bool (False on letterbox bars).
        objects: (T, K, H, W) bool object masks (K may be 0) or None.
        margin_px: safety margin: objects are dilated by this many pixels before removal (an
            integer >= 0).
        num_frames: T when ``objects`` is None.
    Returns:
        (T, H, W) bool.
    Raises:
        ArgumentTypeError, InputError: ``margin_px`` not an integer >= 0. ShapeError: no
            ``num_frames`` without ``objects``, or ``objects`` not (T, K, H, W).
    """
    check_integer(margin_px, "margin_px", 0)
    h, w = content_mask.shape[-2:]
    if objects is None or objects.shape[1] == 0:
        t = num_frames if objects is None else objects.shape[0]
        if t is None:
            raise ShapeError("background_mask needs num_frames when objects is None")
        return content_mask.bool().expand(t, h, w).clone()
    if objects.ndim != 4 or tuple(objects.shape[-2:]) != (h, w):
        raise ShapeError(f"objects must be (T, K, {h}, {w}), got {tuple(objects.shape)}")
    union = objects.to(content_mask.device).bool().any(1)
    return content_mask.bool().unsqueeze(0) & ~dilate(union, margin_px)


def background_keep_chunked(content_mask: torch.Tensor, objects: torch.Tensor, margin_px: int,
                            x1: torch.Tensor, x2: torch.Tensor, pairs: torch.Tensor,
                            chunk: int = 16,
                            host_pairs: Optional[Sequence[Sequence[int]]] = None
                            ) -> torch.Tensor:
    """``background_keep(background_mask(content_mask, objects, margin_px), x1, x2, pairs)``
    computed ``chunk`` frames at a time, so no (T, H, W) mask of the whole clip exists
    (identical result: every lookup reads the same per-frame mask, and a row keeps a match
    where both endpoints do).

    Args:
        objects: (T, K, H, W) bool (a tensor or lazy :class:`~geocon_torch.types.BlockMasks`);
        x1, x2: (P, N, 2) px; pairs: (P, 2) long frames of x1 / x2.
        host_pairs: the same P pairs on the host, when the caller has them: each chunk then
            looks up only the rows with a frame in it (no sync), so the lookups' temporaries
            follow the chunk, not the clip; None: every row in every chunk.
    Returns:
        (P, N) bool.
    """
    check_points(x1, "x1")
    check_points(x2, "x2")
    p, n = x1.shape[:2]
    # both endpoints in one lookup: (P, 2, N) points, the frames (P, 2, 1) broadcast over N
    pts = torch.stack([x1, x2], 1)
    frames = pairs.to(x1.device).view(p, 2, 1)
    keep = torch.ones(p, 2, n, dtype=torch.bool, device=x1.device)
    rows_of = None if host_pairs is None else _rows_by_chunk(host_pairs, chunk)
    for start in range(0, int(objects.shape[0]), chunk):  # fixed-size lookups: no host sync
        rows: Any = slice(None)
        if rows_of is not None:
            if start // chunk not in rows_of:
                continue
            rows = to_device(rows_of[start // chunk], x1.device, torch.long)
        bg = background_mask(content_mask, objects[start:start + chunk], margin_px)
        bg = bg.to(x1.device)
        frame = frames[rows] - start
        inside = (frame >= 0) & (frame < int(bg.shape[0]))
        keep[rows] &= mask_at_pixels(bg, pts[rows], frame.clamp(0, int(bg.shape[0]) - 1)) \
            | ~inside
    return keep.all(1)


def _rows_by_chunk(host_pairs: Sequence[Sequence[int]], chunk: int) -> Dict[int, List[int]]:
    """{chunk index: the rows whose pair (i, j) has a frame in frames [c * chunk, (c + 1) *
    chunk)}, from the pairs on the host."""
    rows: Dict[int, List[int]] = {}
    for r, (i, j) in enumerate(host_pairs):
        rows.setdefault(int(i) // chunk, []).append(r)
        if int(j) // chunk != int(i) // chunk:
            rows.setdefault(int(j) // chunk, []).append(r)
    return rows


def _check_mask(mask: torch.Tensor, name: str) -> int:
    """Raise ShapeError unless ``mask`` is a (T, H, W) bool tensor; return T."""
    if not isinstance(mask, torch.Tensor) or mask.ndim != 3 or mask.dtype != torch.bool:
        raise ShapeError(f"{name} must be a (T, H, W) bool tensor, got {describe(mask)}")
    return int(mask.shape[0])


def _check_frame_indices(index: torch.Tensor, shape: tuple, t: int, name: str) -> None:
    """Raise ShapeError unless ``index`` is an integer tensor of ``shape``, and InputError unless
    its values lie in [0, t): a value check, so one host sync (public wrappers only; the
    pipeline's :func:`background_keep_chunked` does not call it)."""
    if not isinstance(index, torch.Tensor) or tuple(index.shape) != shape \
            or index.dtype not in _INDEX_DTYPES:
        raise ShapeError(f"{name} must be a {shape} integer tensor, got {describe(index)}")
    if index.numel() and bool(((index < 0) | (index >= t)).any()):  # the one host sync
        raise InputError(f"{name} must be in [0, {t}) (the mask's T), got values in "
                         f"[{int(index.min())}, {int(index.max())}]")


def _lookup(mask: torch.Tensor, points: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """Unchecked kernel of :func:`sample_mask`: (T, H, W) bool, (P, N, 2) px, (P,) -> (P, N)."""
    return mask_at_pixels(mask, points, frames.view(-1, 1))


def sample_mask(mask: torch.Tensor, points: torch.Tensor, frames: torch.Tensor) -> torch.Tensor:
    """Look up ``mask`` at pixel ``points`` of ``frames`` (nearest pixel; False outside the
    frame).

    Args:
        mask: (T, H, W) bool masks.
        points: (P, N, 2) float (x, y) pixels.
        frames: (P,) integer tensor, the frame in [0, T) of each row of ``points``.
    Returns:
        (P, N) bool on ``mask``'s device.

    Raises:
        ShapeError: ``mask`` not (T, H, W) bool, ``points`` not (P, N, 2) float, ``frames`` not
            a (P,) integer tensor.
        InputError: a frame outside [0, T) (checked with one host sync: the scoring pipeline
            uses :func:`background_keep_chunked`, which does not check values).
    """
    t = _check_mask(mask, "mask")
    check_points(points, "points")
    _check_frame_indices(frames, (int(points.shape[0]),), t, "frames")
    return _lookup(mask, points, frames)


def background_keep(bg: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                    pairs: torch.Tensor) -> torch.Tensor:
    """(P, N) bool: match is in the background of both frames (``B_i(x1) & B_j(x2)``).

    Args:
        bg: (T, H, W) bool background masks (:func:`background_mask`); x1, x2: (P, N, 2) float
            px of the pairs' first / second frame; pairs: (P, 2) integer frames in [0, T).
    Returns:
        (P, N) bool on ``bg``'s device, True where both endpoints are background.
    Raises:
        ShapeError: wrong shapes / dtypes (``x1`` and ``x2`` must have the same shape).
        InputError: a frame outside [0, T) (one host sync; the pipeline uses
            :func:`background_keep_chunked`, which does not check values).
    """
    t = _check_mask(bg, "bg")
    check_points(x1, "x1")
    check_points(x2, "x2")
    check_same_shape([x1, x2], ["x1", "x2"])
    _check_frame_indices(pairs, (int(x1.shape[0]), 2), t, "pairs")
    return _lookup(bg, x1, pairs[:, 0]) & _lookup(bg, x2, pairs[:, 1])
