"""Letterbox / pillarbox detection -> content mask (paper: "residuals on the content mask,
letterboxed padding ignored").

A row (column) is a bar when the maximum over time and over the row of the frames' luminance
stays below ``threshold``; bars are the runs of such rows (columns) that touch the top / bottom
(left / right) border. A run thinner than ``min_fraction`` of the frame side is ignored (one dark
edge row is not a letterbox). Everything else is content.
"""
from __future__ import annotations

import torch

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
    thr = float(threshold)
    weights = torch.tensor(_LUMA if c == 3 else (1.0,), device=frames.device)
    ch_peak = flat.amax(1)  # (B, C, H, W) per-channel maxima over time
    lo_peak = flat.amin(2).amax(1)  # (B, H, W) max over time of the smallest channel
    out = []
    for line_dim, other in ((3, 4), (4, 3)):  # rows (over x), columns (over y)
        ch_max = ch_peak.amax(other - 1).float()  # (B, C, L)
        upper = (ch_max * weights.view(1, c, 1)).sum(1)  # >= the line's max luminance
        lower = lo_peak.amax(other - 2).float()  # <= the line's max luminance
        dark = upper / 255.0 < thr  # as peak_luminance would compute it: exact there
        # a margin far above float rounding keeps the lower-bound decision exact too
        unsure = ~dark & (lower < thr * 255.0 + 0.01)
        if bool(unsure.any()):
            b_idx, l_idx = unsure.nonzero(as_tuple=True)
            sel = flat.permute(0, line_dim, 1, 2, other)[b_idx, l_idx]  # (U, T, C, L_other)
            exact = _luma(sel.unsqueeze(-2)).amax(dim=(1, 2, 3))  # (U,)
            dark[b_idx, l_idx] = exact / 255.0 < thr
        out.append(dark.reshape(*lead, -1))
    return out[0], out[1]


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
    if not 0.0 <= float(threshold) <= 1.0:
        raise ShapeError(f"threshold is a luminance in [0, 1], got {threshold}")
    if not 0.0 <= float(min_fraction) < 0.5:
        raise ShapeError(f"min_fraction must be in [0, 0.5), got {min_fraction}")
    h, w = frames.shape[-2:]
    dark_rows, dark_cols = dark_lines(frames, threshold)  # (..., H), (..., W)
    top, bottom = _border_run(dark_rows, min_fraction * h)
    left, right = _border_run(dark_cols, min_fraction * w)
    rows = torch.arange(h, device=frames.device)
    cols = torch.arange(w, device=frames.device)
    row_ok = (rows >= top[..., None]) & (rows < (h - bottom)[..., None])
    col_ok = (cols >= left[..., None]) & (cols < (w - right)[..., None])
    mask = row_ok[..., :, None] & col_ok[..., None, :]
    empty = ~mask.flatten(-2).any(-1)  # all dark: nothing to call content
    return mask | empty[..., None, None]
