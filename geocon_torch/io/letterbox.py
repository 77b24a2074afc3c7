"""Letterbox / pillarbox detection -> content mask (paper: "residuals on the content mask,
letterboxed padding ignored").

A row (column) is a bar when the maximum over time and over the row of the frames' luminance
stays below ``threshold``; bars are the runs of such rows (columns) that touch the top / bottom
(left / right) border. A run thinner than ``min_fraction`` of the frame side is ignored (one dark
edge row is not a letterbox). Everything else is content.
"""
from __future__ import annotations

from typing import Optional

import torch

from .._tensor_utils import to_device
from ..errors import ShapeError

#: ITU-R BT.601 luma weights (as OpenCV's RGB2GRAY and ``Clip.gray``).
_LUMA = (0.299, 0.587, 0.114)
_CHUNK_PIXELS = 1 << 23


def _check_frames(frames: torch.Tensor) -> None:
    if frames.ndim < 4 or frames.shape[-3] not in (1, 3) or frames.dtype != torch.uint8:
        raise ShapeError(f"frames must be uint8 (..., T, C, H, W) with C in {{1, 3}}, got "
                         f"{tuple(frames.shape)} {frames.dtype}")


def _luma(chunk: torch.Tensor) -> torch.Tensor:
    """(..., C, H, W) uint8 -> (..., H, W) float32 luminance in [0, 255]."""
    c = chunk.shape[-3]
    w = torch.tensor(_LUMA if c == 3 else (1.0,), device=chunk.device).view(c, 1, 1)
    return (chunk.float() * w).sum(-3)


def peak_luminance(frames: torch.Tensor) -> torch.Tensor:
    """Max over time of the luminance, in [0, 1].

    Args:
        frames: (..., T, C, H, W) uint8, C in {1, 3} (RGB).
    Returns:
        (..., H, W) float32 on the frames' device.
    """
    _check_frames(frames)
    lead, (t, c, h, w) = frames.shape[:-4], frames.shape[-4:]
    flat = frames.reshape(-1, t, c, h, w)
    per = max(1, _CHUNK_PIXELS // (flat.shape[0] * c * h * w))
    peak = torch.zeros((flat.shape[0], h, w), dtype=torch.float32, device=frames.device)
    for start in range(0, t, per):
        peak = torch.maximum(peak, _luma(flat[:, start:start + per]).amax(1))
    return (peak / 255.0).reshape(*lead, h, w)


def dark_lines(frames: torch.Tensor, threshold: float) -> tuple:
    """Rows and columns whose luminance stays below ``threshold`` (in [0, 1]) in every frame.

    Equal to ``peak_luminance(frames).amax(-1) < threshold`` (rows) and ``.amax(-2)`` (columns),
    computed on uint8 bounds: luminance (a convex combination of the channels) lies between the
    smallest and the largest channel, so a line whose per-channel maxima give a luminance below
    the threshold is dark, one with a pixel whose smallest channel reaches it is not, and only
    the lines in between (near a bar's edge, if any) get their exact luminance.

    Args:
        frames: (..., T, C, H, W) uint8, C in {1, 3} (RGB).
    Returns:
        (dark_rows (..., H), dark_cols (..., W)) bool.
    """
    _check_frames(frames)
    lead, (t, c, h, w) = frames.shape[:-4], frames.shape[-4:]
    flat = frames.reshape(-1, t, c, h, w)
    ch_peak = flat.amax(1)  # (B, C, H, W) per-channel maxima over time
    lo_peak = flat.amin(2).amax(1)  # (B, H, W) max over time of the smallest channel

    def exact(line_dim: int, other: int, b_idx: torch.Tensor, l_idx: torch.Tensor):
        sel = flat.permute(0, line_dim, 1, 2, other)[b_idx, l_idx]  # (U, T, C, L_other)
        return _luma(sel.unsqueeze(-2)).amax(dim=(1, 2, 3))  # (U,)

    rows, cols = _decide_dark(ch_peak, lo_peak, float(threshold), exact)
    return rows.reshape(*lead, -1), cols.reshape(*lead, -1)


def _decide_dark(ch_peak: torch.Tensor, lo_peak: torch.Tensor, thr: float, exact) -> tuple:
    """The dark rows (B, H) and columns (B, W) from the uint8 peaks over time: ``ch_peak``
    (B, C, H, W) per-channel maxima, ``lo_peak`` (B, H, W) maxima of the smallest channel;
    ``exact(line_dim, other, b_idx, l_idx)`` gives the exact max luminance (0..255) of the
    lines left undecided by the bounds (line_dim 3: rows, 4: columns)."""
    c = ch_peak.shape[1]
    weights = to_device(_LUMA if c == 3 else (1.0,), ch_peak.device)
    dims, darks, unsures = ((3, 4), (4, 3)), [], []
    for line_dim, other in dims:  # rows (over x), columns (over y)
        ch_max = ch_peak.amax(other - 1).float()  # (B, C, L)
        upper = (ch_max * weights.view(1, c, 1)).sum(1)  # >= the line's max luminance
        lower = lo_peak.amax(other - 2).float()  # <= the line's max luminance
        dark = upper / 255.0 < thr  # as peak_luminance would compute it: exact there
        # a margin far above float rounding keeps the lower-bound decision exact too
        darks.append(dark)
        unsures.append(~dark & (lower < thr * 255.0 + 0.01))
    # whether rows / columns are left undecided: one host sync for both
    todo = torch.stack([u.any() for u in unsures]).tolist()
    for (line_dim, other), dark, unsure, any_unsure in zip(dims, darks, unsures, todo):
        if any_unsure:
            b_idx, l_idx = unsure.nonzero(as_tuple=True)
            dark[b_idx, l_idx] = exact(line_dim, other, b_idx, l_idx) / 255.0 < thr
    return darks[0], darks[1]


class ContentMaskAccumulator:
    """:func:`detect_content_mask` of a clip streamed in chunks of frames: ``update`` with
    (k, C, H, W) uint8 chunks in any order, then ``mask(min_fraction)`` is the (H, W) bool mask
    ``detect_content_mask(all frames, threshold, min_fraction)`` gives (the same uint8 peaks,
    and the same exact luminance of undecided lines: running maxima over the chunks). Exact
    luminance is computed only for lines whose smallest channel has stayed below the
    threshold so far (bars, and lines next to them): the only ones that can end undecided.
    Holds O(C H W) numbers, whatever the clip length.
    """

    def __init__(self, threshold: float = 16.0 / 255.0) -> None:
        _check_thresholds(threshold, 0.0)
        self.threshold = float(threshold)
        self.ch_peak: Optional[torch.Tensor] = None  # (1, C, H, W) uint8
        self.lo_peak: Optional[torch.Tensor] = None  # (1, H, W) uint8
        self.line_luma: list = []  # [(1, H) row, (1, W) column] max luminance, 0..255 float

    def update(self, frames: torch.Tensor) -> None:
        """Add a chunk of (k, C, H, W) uint8 frames (k >= 1)."""
        _check_frames(frames)
        ch, lo = frames.amax(0, keepdim=True), frames.amin(1).amax(0, keepdim=True)
        if self.ch_peak is None:
            h, w = frames.shape[-2:]
            self.ch_peak, self.lo_peak = ch, lo
            self.line_luma = [torch.zeros(1, h, device=frames.device),
                              torch.zeros(1, w, device=frames.device)]
        else:
            self.ch_peak = torch.maximum(self.ch_peak, ch)
            self.lo_peak = torch.maximum(self.lo_peak, lo)
        bound = self.threshold * 255.0 + 0.01  # as _decide_dark's "unsure" test
        for k, (line_dim, other) in enumerate(((2, 3), (3, 2))):  # rows, columns
            cand = (self.lo_peak[0].amax(other - 2).float() < bound).nonzero()[:, 0]
            if cand.numel():  # (k, C, L_cand, L_other) -> exact luminance maxima
                lum = _luma(frames.index_select(line_dim, cand).movedim(line_dim, 1)
                            .unsqueeze(-2)).amax(dim=(0, 2, 3))
                cur = self.line_luma[k][0, cand]
                self.line_luma[k][0, cand] = torch.maximum(cur, lum)

    def mask(self, min_fraction: float = 0.02) -> torch.Tensor:
        """(H, W) bool content mask (see :func:`detect_content_mask`)."""
        if self.ch_peak is None:
            raise ShapeError("ContentMaskAccumulator.mask: no frames were added")
        _check_thresholds(self.threshold, min_fraction)

        def exact(line_dim: int, other: int, b_idx: torch.Tensor, l_idx: torch.Tensor):
            return self.line_luma[line_dim - 3][b_idx, l_idx]

        rows, cols = _decide_dark(self.ch_peak, self.lo_peak, self.threshold, exact)
        return _mask_from_lines(rows[0], cols[0], min_fraction)


def _border_run(dark: torch.Tensor, min_len: float) -> tuple:
    """Lengths of the runs of True touching each end of (..., L) ``dark``; runs shorter than
    ``min_len`` count as 0. Returns (start_run, end_run) as (...,) long tensors."""
    start = dark.long().cumprod(-1).sum(-1)
    end = dark.flip(-1).long().cumprod(-1).sum(-1)
    start = torch.where(start >= min_len, start, torch.zeros_like(start))
    end = torch.where(end >= min_len, end, torch.zeros_like(end))
    return start, end


def detect_content_mask(frames: torch.Tensor, threshold: float = 16.0 / 255.0,
                        min_fraction: float = 0.02) -> torch.Tensor:
    """Content mask of a letterboxed / pillarboxed clip.

    Args:
        frames: (T, C, H, W) uint8 RGB (C = 3) or gray (C = 1) at working resolution; a leading
            batch dimension (B, T, C, H, W) gives one mask per clip.
        threshold: luminance in [0, 1] below which a row / column is black (default 16/255).
        min_fraction: bars thinner than this fraction of the side (H for letterbox rows, W for
            pillarbox columns) are ignored.

    Returns:
        (H, W) bool (or (B, H, W)) on the frames' device: True on content, False on bars. A clip
        that is dark everywhere gets an all-True mask (there is no picture to separate from bars).
    """
    _check_thresholds(threshold, min_fraction)
    dark_rows, dark_cols = dark_lines(frames, threshold)  # (..., H), (..., W)
    return _mask_from_lines(dark_rows, dark_cols, min_fraction)


def _check_thresholds(threshold: float, min_fraction: float) -> None:
    if not 0.0 <= float(threshold) <= 1.0:
        raise ShapeError(f"threshold is a luminance in [0, 1], got {threshold}")
    if not 0.0 <= float(min_fraction) < 0.5:
        raise ShapeError(f"min_fraction must be in [0, 0.5), got {min_fraction}")


def _mask_from_lines(dark_rows: torch.Tensor, dark_cols: torch.Tensor,
                     min_fraction: float) -> torch.Tensor:
    """(..., H, W) content mask from (..., H) dark rows and (..., W) dark columns."""
    h, w = dark_rows.shape[-1], dark_cols.shape[-1]
    top, bottom = _border_run(dark_rows, min_fraction * h)
    left, right = _border_run(dark_cols, min_fraction * w)
    rows = torch.arange(h, device=dark_rows.device)
    cols = torch.arange(w, device=dark_rows.device)
    row_ok = (rows >= top[..., None]) & (rows < (h - bottom)[..., None])
    col_ok = (cols >= left[..., None]) & (cols < (w - right)[..., None])
    mask = row_ok[..., :, None] & col_ok[..., None, :]
    empty = ~mask.flatten(-2).any(-1)  # all dark: nothing to call content
    return mask | empty[..., None, None]
