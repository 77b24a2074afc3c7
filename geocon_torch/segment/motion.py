"""Weight-free motion segmentation: what moves against the dominant background motion.

For every adjacent pair (t, t+1) with a robust background homography ``x_{t+1} ~ H_t x_t`` (fitted
on all matches; the moving objects are its outliers):

1. frame t+1 is warped onto frame t by ``H_t`` (and frame t onto t+1 by ``H_t^-1``); the
   photometric residual ``|I_t - I_{t+1}(H_t x)|`` (gray in [0, 1], 3x3 box-smoothed) above
   ``motion_threshold`` marks change in frame t's (and t+1's) coordinates;
2. three-frame differencing: an object pixel of frame t changes against *both* neighbours, so the
   object mask of frame t is the intersection of the change seen from pair (t-1, t) and from pair
   (t, t+1) (ghosts of the old / new position cancel); the end frames use their single pair;
3. morphological opening (radius ``motion_open_px``) and closing (``motion_close_px``) remove
   speckle and fill small holes;
4. connected components in space-time (8-connected in a frame, and across consecutive frames
   where the blobs overlap) group pixels into objects *and* track them over frames; where
   blobs meet or part (a blob touching several blobs of the neighbour frame), two blobs whose
   seeds disagree on the motion (by more than max(3 px, 30 %)) are not linked, so two movers
   that cross are not one object over the whole clip (they still share the frames where their
   blobs touch); components smaller than ``motion_min_area`` px per frame or spanning fewer
   than ``motion_min_frames`` frames are dropped;
5. if the objects cover more than ``motion_max_fraction`` of the content in a frame the
   segmentation is deemed unreliable (a failed background fit, a cut, a non-rigid frame) and
   nothing is masked in that frame (the evidence says so): the segmentation must never be able to
   mask the background away and so inflate IR.

Dense residuals against one homography assume the H regime (rotation / static camera); under
translation with depth, parallax would look like motion, so :func:`motion_segment` skips the
dense residuals when ``regime == "F"`` (only clusters of coherently moving background-model
outliers can still become objects) and records why (mask files or SAM-2 do better there).

The seeds (matches the background model rejects, :mod:`.seeds`) add a square of radius
``motion_seed_radius_px`` each to the change masks and decide which components are objects.
Band seeds, H outliers below the seed threshold (2-4 px off the background by default), count
only where the change masks (or seeds already counted) are near and the band seeds around
them move alike: a mover that slow is an H outlier, so it must be masked, while scattered
mismatches of that size never seed.

All steps are batched over frames (torch ops, CPU or CUDA), in chunks of frames bounded by
:data:`_MAP_BUDGET` cells (identical results: memory follows the chunk, not the clip's length);
the connected components run by iterated max-pooling at a reduced resolution.
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Dict, Iterator, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from .._checks import check_integer, describe
from ..config import SegmentConfig
from ..errors import InputError, ShapeError
from .._morphology import erode_mask
from .._tensor_utils import masked_median, sample_at_pixels, to_device
from ..types import BlockMasks
from .background import dilate

if TYPE_CHECKING:  # pragma: no cover
    from ..types import Clip


#: pairs per chunk of the dense change masks (each pair is independent: identical results)
_PAIR_CHUNK = 32
#: frames per chunk of the full-size label work (pooling, upsampling, per-frame counts): exact
#: integers, identical results; the only (T, h, w) label tensor is the output
_LABEL_CHUNK = 64
#: cells (frames x pixels at the segmentation scale) per chunk of the per-frame maps of
#: :func:`_motion_labels` (gray frames, change masks, morphology, seed discs, full-size labels):
#: every step is per frame, or per pair with the chunk's neighbour frames added, so the results
#: are identical; only the (T, h, w) bool motion map and the (T, h, w) uint8 / int16 output span
#: the clip (about 40 frames of 256 x 192 per chunk: int32 / float temporaries of ~8 MB, which
#: the allocator reuses rather than piling up as the retained RSS of larger ones)
_MAP_BUDGET = 1 << 21
#: passes of the band seeds' confirmation (:func:`_band_discs`): each reaches 2 seed radii
#: further into a slow mover from its changing edges
_BAND_PASSES = 2
#: seeds a 2-D blob needs for its motion to decide the links to the next frame's blobs
_BLOB_MIN_SEEDS = 6
#: components per chunk of the (K, M) seed statistics (rows are independent: identical results)
_SEED_CHUNK = 16
#: (components x seeds) entries per chunk of the seed statistics, when more than _SEED_CHUNK fit
_SEED_BUDGET = 1 << 21


def _warp(img: torch.Tensor, H: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Sample ``img`` (P, 1, h, w) at ``H x`` for every pixel x -> (warped, inside) (P, h, w).

    The rows of ``H x`` are outer sums ``H[r, 0] x + (H[r, 1] y + H[r, 2])`` over the pixel
    grid, all three at once (no (P, h w, 3) product)."""
    p, _, h, w = img.shape
    Hd = H.to(img.dtype).view(p, 3, 3, 1, 1)
    xs = torch.arange(w, dtype=img.dtype, device=img.device).view(1, 1, w)
    ys = torch.arange(h, dtype=img.dtype, device=img.device).view(1, h, 1)
    rows = Hd[:, :, 0] * xs + (Hd[:, :, 1] * ys + Hd[:, :, 2])  # (P, 3, h, w) the 3 rows
    z = rows[:, 2]
    z = z.masked_fill(z.abs() < 1e-9, 1e-9)
    qx, qy = rows[:, 0] / z, rows[:, 1] / z
    # border padding samples positions outside the frame at the border: clamping is exact;
    # inside the frame exactly where clamping changes nothing (NaN: never inside)
    cx, cy = qx.clamp(0, w - 1), qy.clamp(0, h - 1)
    inside = (cx == qx) & (cy == qy)
    out = sample_at_pixels(img, torch.stack([cx, cy], -1))
    return out[:, 0], inside


def _smooth(x: torch.Tensor) -> torch.Tensor:
    return F.avg_pool2d(x.unsqueeze(1), 3, stride=1, padding=1, count_include_pad=False)[:, 0]


def change_masks(gray: torch.Tensor, homographies: torch.Tensor, valid: torch.Tensor,
                 content: torch.Tensor, threshold: float) -> torch.Tensor:
    """Per-frame change masks (T, h, w) bool by three-frame differencing against the background.

    Args:
        gray: (T, 1, h, w) float luminance in [0, 1].
        homographies: (T-1, 3, 3) background homographies of pairs (t, t+1), x_{t+1} ~ H x_t.
        valid: (T-1,) bool; invalid pairs contribute no change (nor does a pair whose
            homography cannot be inverted: it counts as invalid).
        content: (h, w) bool content mask, or (T, h, w) one per frame (frames of several clips
            one after the other: the pairs across two clips are invalid).

    Returns:
        (T, h, w) bool on ``gray``'s device; all False for a one-frame clip (no pair).
    """
    if gray.shape[0] < 2:
        return torch.zeros((gray.shape[0], *gray.shape[-2:]), dtype=torch.bool,
                           device=gray.device)
    Hd, Hinv, usable = _pair_homographies(homographies, valid, gray.device)
    return _change_masks(gray, Hd, Hinv, usable, content, threshold)


def _pair_homographies(homographies: torch.Tensor, valid: torch.Tensor, device: torch.device
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(P, 3, 3) homographies -> (H, H^-1) float64 on ``device`` (H^-1 the identity where not
    valid) and the (P,) bool pairs to use: ``valid`` less the homographies that cannot be
    inverted (an exactly zero LU pivot, e.g. an all-zero H), which count as invalid pairs.
    ``inv_ex`` without its error check is ``torch.linalg.inv``'s kernel (the same numbers) but
    reads no error code back to the host (a sync on CUDA)."""
    Hd = homographies.to(device, torch.float64)
    ok = valid.to(device)
    Hinv, info = torch.linalg.inv_ex(torch.where(ok.view(-1, 1, 1), Hd,
                                                 torch.eye(3, dtype=Hd.dtype, device=Hd.device)),
                                     check_errors=False)
    return Hd, Hinv, ok & (info == 0)


def _change_masks(gray: torch.Tensor, Hd: torch.Tensor, Hinv: torch.Tensor, valid: torch.Tensor,
                  content: torch.Tensor, threshold: float, pair_chunk: Optional[int] = None
                  ) -> torch.Tensor:
    """:func:`change_masks` given the pairs' float64 (H, H^-1) (:func:`_pair_homographies`):
    frames can be given in chunks (with their neighbours) with the inverses computed once.
    ``pair_chunk``: pairs warped at a time (None: :data:`_PAIR_CHUNK`; the frames' chunk of
    :func:`_moving_pixels` is already bounded by :data:`_MAP_BUDGET`, so it warps them all)."""
    t = gray.shape[0]
    step = _PAIR_CHUNK if pair_chunk is None else max(1, int(pair_chunk))
    content = content.to(gray.device)
    ok = valid.to(gray.device).view(-1, 1, 1) & (content if content.ndim == 2 else content[:-1])
    fwd, bwd = [], []
    for a in range(0, t - 1, step):  # chunks of pairs bound the float warps' memory
        b = min(a + step, t - 1)
        warped_next, in_f = _warp(gray[a + 1:b + 1], Hd[a:b])  # I_{t+1}(H x), frame t's grid
        warped_prev, in_b = _warp(gray[a:b], Hinv[a:b])  # I_t(H^-1 x) on frame t+1's grid
        fwd.append((_smooth((gray[a:b, 0] - warped_next).abs()) > threshold) & in_f & ok[a:b])
        bwd.append((_smooth((gray[a + 1:b + 1, 0] - warped_prev).abs()) > threshold) & in_b
                   & ok[a:b])
    fwd, bwd = (x[0] if len(x) == 1 else torch.cat(x) for x in (fwd, bwd))  # (T-1, h, w)
    seen_f = torch.cat([valid, valid.new_zeros(1)]).to(gray.device)  # frame t has pair (t, t+1)
    seen_b = torch.cat([valid.new_zeros(1), valid]).to(gray.device)  # frame t has pair (t-1, t)
    fwd_t = torch.cat([fwd, fwd.new_zeros(1, *fwd.shape[1:])])
    bwd_t = torch.cat([bwd.new_zeros(1, *bwd.shape[1:]), bwd])
    both = seen_f & seen_b
    out = torch.where(both.view(-1, 1, 1), fwd_t & bwd_t,
                      torch.where(seen_f.view(-1, 1, 1), fwd_t, bwd_t))
    return out[:t]


def open_close(masks: torch.Tensor, open_r: int, close_r: int) -> torch.Tensor:
    """Opening then closing (square structuring elements) of (..., h, w) bool masks. The two
    dilations in the middle are one, by the sum of the radii (squares add up: exact, also at
    the frame border)."""
    return erode_mask(dilate(erode_mask(masks, open_r), max(open_r, 0) + max(close_r, 0)),
                      close_r)


def block_upsample(x: torch.Tensor, f: int) -> torch.Tensor:
    """(..., h, w) -> (..., h f, w f): every cell repeated as an f x f block (one copy)."""
    *lead, h, w = x.shape
    return x[..., :, None, :, None].expand(*lead, h, f, w, f).reshape(*lead, h * f, w * f)


def _max27(x: torch.Tensor) -> torch.Tensor:
    """Max over the 3 x 3 x 3 neighbourhood of every entry of non-negative (T, h, w) ``x``
    (outside counts as 0): separable, one sliding window per axis (7 ops)."""
    out = F.pad(x, (1, 1, 1, 1, 1, 1))
    for dim in (2, 1, 0):
        out = out.unfold(dim, 3, 1).amax(-1)
    return out


def _max9(x: torch.Tensor, fill: int = 0) -> torch.Tensor:
    """:func:`_max27` within each frame only (3 x 3 neighbourhood, no link across frames);
    outside the frame counts as ``fill``."""
    out = F.pad(x, (1, 1, 1, 1), value=fill)
    for dim in (2, 1):
        out = out.unfold(dim, 3, 1).amax(-1)
    return out


#: the 9 offsets (dy, dx) of a cell's neighbours in the next frame, bit i of :func:`_link_gates`
_NEXT = tuple((dy, dx) for dy in (-1, 0, 1) for dx in (-1, 0, 1))


def _windows(x: torch.Tensor) -> torch.Tensor:
    """(n, h, w) -> (n, h, w, 9): every cell's 3 x 3 neighbourhood in its frame (outside 0);
    entry j is the neighbour at offset ``_NEXT[j]``."""
    n, h, w = x.shape
    return F.pad(x, (1, 1, 1, 1)).unfold(1, 3, 1).unfold(2, 3, 1).reshape(n, h, w, 9)


def _max_gated(x: torch.Tensor, gates: torch.Tensor) -> torch.Tensor:
    """:func:`_max27` of non-negative (T, h, w) ``x`` over the links ``gates`` allows: the
    3 x 3 neighbourhood in the frame, and the 9 neighbours in the previous / next frame where
    bit i of ``gates`` (T, h, w) int16 (for offset ``_NEXT[i]`` from frame t to t + 1) is set
    (a link is used both ways). All bits set: exactly :func:`_max27`.

    The 9 offsets at once (:func:`_windows`; the link from cell c of frame t + 1 back to
    frame t at window entry j is bit 8 - j of that neighbour), in chunks of frames of
    ~``_MAP_BUDGET / 9`` cells: a fixed number of ops per chunk, memory bounded."""
    t, h, w = x.shape
    out = _max9(x)
    if t < 2:
        return out
    fwd = torch.arange(9, device=x.device, dtype=gates.dtype)
    bwd = 8 - fwd
    step = max(1, _MAP_BUDGET // (9 * h * w))
    for a in range(0, t - 1, step):
        b = min(a + step, t - 1)
        ok = (gates[a:b].unsqueeze(-1) >> fwd) & 1 > 0  # (t, y, x) -> (t + 1, y + dy, x + dx)
        nxt = torch.where(ok, _windows(x[a + 1:b + 1]), 0).amax(-1)
        out[a:b] = torch.maximum(out[a:b], nxt)
        back = (_windows(gates[a:b]) >> bwd) & 1 > 0  # the same links, seen from t + 1
        prev = torch.where(back, _windows(x[a:b]), 0).amax(-1)
        out[a + 1:b + 1] = torch.maximum(out[a + 1:b + 1], prev)
    return out


def connected_components(mask: torch.Tensor, downsample: int = 4,
                         max_iterations: int = 512, dtype: torch.dtype = torch.long,
                         links: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Space-time connected components of a (T, h, w) bool mask, labels 0 (none) and 1..K.

    Every cell starts with its own id; each iteration takes the 3x3x3 maximum (separable; 8-
    connected in a frame, overlapping blobs linked across consecutive frames) inside the mask,
    then jumps every label to the label of the cell it names (pointer jumping: that cell is in
    the same component and its label is at least as large), so labels reach the component's
    largest id in a few iterations, on a ``downsample``-times smaller grid. Labels are
    renumbered 1..K in the order of the components' largest cell (raster (t, y, x) order).
    ``dtype=torch.int32`` halves the labels' memory (exact while T h w < 2^31: K <= T h w).
    ``links`` (T-1,) bool: frames t and t+1 are linked only where True (None: all are; the
    frames of several clips one after the other are not linked across clips, so each clip gets
    the components it gets alone, numbered after those of the clips before it).

    Args:
        mask: (T, h, w) bool.
        downsample: cell side (px) of the grid the components are found on, an integer >= 1.
        max_iterations: cap on the max-pooling / pointer-jumping iterations.
        dtype: integer dtype of the labels (torch.int64 or torch.int32).
        links: (T-1,) bool or None (see above).
    Returns:
        (T, h, w) labels of ``dtype`` on ``mask``'s device (all 0 for an empty mask; an empty
        tensor for T = 0).
    Raises:
        ShapeError: ``mask`` not a (T, h, w) bool tensor, ``links`` not (T-1,).
        InputError / ArgumentTypeError: ``downsample`` < 1 / not an integer.
    """
    _check_components_args(mask, downsample, links)
    if mask.numel() == 0:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device)
    cuts = [] if links is None else torch.nonzero(~links.bool()).flatten().tolist()
    small, _ = _cell_components(mask, downsample, max_iterations, cuts)
    return _upsample_labels(small.to(dtype), mask, downsample)


def _check_components_args(mask: torch.Tensor, downsample: int,
                           links: Optional[torch.Tensor]) -> None:
    """The argument checks of :func:`connected_components` (metadata only: no host sync)."""
    if not isinstance(mask, torch.Tensor) or mask.ndim != 3 or mask.dtype != torch.bool:
        raise ShapeError(f"mask must be a (T, h, w) bool tensor, got {describe(mask)}")
    check_integer(downsample, "downsample", 1)
    pairs = (max(int(mask.shape[0]) - 1, 0),)
    if links is not None and (not isinstance(links, torch.Tensor)
                              or tuple(links.shape) != pairs):
        raise ShapeError(f"links must be a {pairs} tensor, got {describe(links)}")


def _cell_components(mask: torch.Tensor, downsample: int, max_iterations: int,
                     cuts: Sequence[int] = (), gates: Optional[torch.Tensor] = None,
                     spatial: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`connected_components` before the upsampling: the labels of the (T, ceil(h/f),
    ceil(w/f)) cells (long; a pixel's label is its cell's inside ``mask``, 0 outside) and the
    (T,) long number of components whose largest cell is in each frame (one host sync per
    iteration: the convergence test). ``cuts``: the frames t not linked to frame t + 1 (on the
    host); an empty frame is put after each (only there: no cell of it is in the mask, so no
    label crosses it, and the components and their order are unchanged). ``gates``: (T,
    ceil(h/f), ceil(w/f)) int16 bit fields of the links to the next frame that may be used
    (:func:`_link_gates`; None: all); ``spatial``: no link across frames (2-D components)."""
    t, h, w = mask.shape
    small = torch.cat([F.max_pool2d(mask[a:a + _LABEL_CHUNK].float().unsqueeze(1), downsample,
                                    ceil_mode=True)[:, 0] > 0.5  # chunks: no (T, h, w) float
                       for a in range(0, t, _LABEL_CHUNK)])
    cuts = sorted({int(c) for c in cuts if 0 <= int(c) < t - 1})
    at = None  # frame k of the mask is frame at[k] of the cells with the empty frames
    if cuts:
        at = to_device([k + sum(c < k for c in cuts) for k in range(t)], mask.device)
        cells = small.new_zeros(t + len(cuts), *small.shape[1:])
        cells[at] = small
        small = cells
        if gates is not None:  # no link from or to the empty frames
            bits = gates.new_zeros(small.shape)
            bits[at] = gates
            gates = bits
    n = small.numel()
    idtype = torch.int32 if n < 2 ** 31 - 1 else torch.long  # cell ids, exact either way
    ids = torch.arange(1, n + 1, device=mask.device, dtype=idtype).view(small.shape)
    zero = torch.zeros((), dtype=idtype, device=mask.device)  # broadcast: no (T, h, w) zeros
    lab = torch.where(small, ids, zero)
    for _ in range(max_iterations):  # O(log diameter) iterations for most shapes
        nxt = torch.where(small, _max9(lab) if spatial else _max27(lab) if gates is None
                          else _max_gated(lab, gates), zero)
        flat = nxt.view(-1)
        nxt = torch.where(small, flat[(flat - 1).clamp_min_(0)].view(small.shape), zero)
        if torch.equal(nxt, lab):
            break
        lab = nxt
    # renumber 1..K in the order of the roots (the cells whose id is their component's label),
    # in the ids' dtype (K <= n) and _LABEL_CHUNK frames at a time: no (T, h, w) int64 copies
    root = small & (lab == ids)
    del ids
    rank = root.view(-1).cumsum(0, dtype=idtype)
    new = torch.empty_like(lab)
    for a in range(0, int(lab.shape[0]), _LABEL_CHUNK):
        part = lab[a:a + _LABEL_CHUNK]
        torch.where(small[a:a + _LABEL_CHUNK], rank[(part.long() - 1).clamp_min_(0)], zero,
                    out=new[a:a + _LABEL_CHUNK])
    roots = root.flatten(1).sum(1)
    return (new, roots) if at is None else (new[at], roots[at])


def _label_chunks(lab: torch.Tensor, mask: torch.Tensor, f: int, step: int
                  ) -> Iterator[Tuple[int, int, torch.Tensor]]:
    """Cell labels (T, ceil(h/f), ceil(w/f)) int -> (a, b, (b - a, h, w) labels of frames
    a..b-1) for chunks of ``step`` frames: every cell's label as an f x f block, kept only inside
    ``mask`` (T, h, w) bool (0 elsewhere)."""
    t, h, w = mask.shape
    for a in range(0, t, step):
        b = min(a + step, t)
        full = block_upsample(lab[a:b], f)[:, :h, :w]
        yield a, b, torch.where(mask[a:b], full, full.new_zeros(()))


def _upsample_labels(lab: torch.Tensor, mask: torch.Tensor, f: int) -> torch.Tensor:
    """Labels (T, ceil(h/f), ceil(w/f)) int -> (T, h, w) same dtype (:func:`_label_chunks`);
    ``_LABEL_CHUNK`` frames at a time, so the only full-size label tensor is the output."""
    t, h, w = mask.shape
    out = torch.zeros(t, h, w, dtype=lab.dtype, device=mask.device)
    for a, b, full in _label_chunks(lab, mask, f, _LABEL_CHUNK):
        out[a:b] = full
    return out


def per_frame_counts(labels: torch.Tensor, k: int) -> torch.Tensor:
    """Pixels of every component in every frame: labels (T, h, w) int in 0..k -> (T, k) long
    (label 0 = none is not counted). Exact integer counts, ``_LABEL_CHUNK`` frames at a time
    (no (T, h, w) int64 index temporaries)."""
    parts = []
    for a in range(0, labels.shape[0], _LABEL_CHUNK):
        lab = labels[a:a + _LABEL_CHUNK]
        n = lab.shape[0]
        frame_of = torch.arange(n, device=lab.device).view(-1, 1, 1) * (k + 1)
        counts = torch.bincount((lab + frame_of).reshape(-1), minlength=n * (k + 1))
        parts.append(counts.view(n, k + 1)[:, 1:])
    return torch.cat(parts) if parts else torch.zeros(0, k, dtype=torch.long,
                                                      device=labels.device)


def seed_map(points: torch.Tensor, frames: torch.Tensor, shape: Tuple[int, int, int],
             radius: int, valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Rasterise seed points (M, 2) px of frames (M,) into a (T, h, w) bool map marking a
    (2r+1)^2 square around every seed (points are clamped into the frame); ``valid`` (M,)
    bool: only those seeds (fixed-size seeds, no compaction)."""
    t, h, w = shape
    return _disc_map(_seed_cells(points, frames, (h, w), valid), 0, t, (h, w), radius)


def _seed_cells(points: torch.Tensor, frames: torch.Tensor, size: Sequence[int],
                valid: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Seed points (M, 2) px of frames (M,) -> (M,) long index ``frame h w + y w + x`` of their
    nearest pixels (clamped into the (h, w) frame) among the frames' pixels; -1 where not
    ``valid`` (M,) bool."""
    h, w = int(size[0]), int(size[1])
    x, y = _seed_pixels(points, (h, w))
    at = frames.to(x.device).long() * (h * w) + (y * w + x)
    return at if valid is None else at.masked_fill(~valid.to(at.device), -1)


def _disc_map(cells: torch.Tensor, a: int, b: int, size: Sequence[int], radius: int
              ) -> torch.Tensor:
    """(b - a, h, w) bool: the (2r+1)^2 squares around the seeds (:func:`_seed_cells` (M,)) of
    frames a..b-1 (the others go to a discarded slot: fixed-size, no compaction)."""
    h, w = int(size[0]), int(size[1])
    n = (b - a) * h * w
    hit = torch.zeros(n + 1, dtype=torch.bool, device=cells.device)  # n: the discarded slot
    if cells.numel():
        at = cells - a * h * w
        hit[torch.where((at >= 0) & (at < n), at, n)] = True
    return dilate(hit[:n].view(b - a, h, w), radius)


def coherent_seeds(labels: torch.Tensor, seeds: Tuple[torch.Tensor, ...], k: int
                   ) -> torch.Tensor:
    """(K,) number of seeds per component whose relative motion agrees with the component's
    median relative motion (batched over components with a masked median). ``seeds``:
    (points (M, 2) px, frames (M,), motion (M, 2) px) and optionally valid (M,) bool."""
    pts, frames, vec = (s.to(labels.device) for s in seeds[:3])
    if pts.numel() == 0 or k == 0:
        return torch.zeros(k, dtype=torch.long, device=labels.device)
    x, y = _seed_pixels(pts, labels.shape[1:])
    lab = labels[frames.long(), y, x]  # (M,) component of each seed (0 = none)
    if len(seeds) > 3 and seeds[3] is not None:
        lab = torch.where(seeds[3].to(lab.device), lab, torch.zeros_like(lab))
    return _coherent_of_labels(lab, vec, k)


def _seed_pixels(points: torch.Tensor, size: Sequence[int]) -> Tuple[torch.Tensor, torch.Tensor]:
    """Seed points (M, 2) px -> the (x, y) (M,) long of their nearest pixels, clamped into a
    frame of ``size`` (h, w)."""
    h, w = int(size[0]), int(size[1])
    return (points[:, 0].round().long().clamp(0, w - 1),
            points[:, 1].round().long().clamp(0, h - 1))


def _coherent_of_labels(lab: torch.Tensor, vec: torch.Tensor, k: int,
                        band: Optional[torch.Tensor] = None) -> torch.Tensor:
    """:func:`coherent_seeds` given each seed's component (M,) int (0 = none) and relative
    motion (M, 2) px -> (K,) long; ``band`` (M,) bool: the band seeds (stricter, see
    :func:`_coherent_counts`), or None."""
    # components in chunks: the (K, M) temporaries grow with T otherwise (rows independent)
    step = max(_SEED_CHUNK, _SEED_BUDGET // max(int(lab.shape[0]), 1))
    return torch.cat([_coherent_counts(lab, vec, a, min(a + step, k), band)
                      for a in range(0, k, step)])


def _coherent_counts(lab: torch.Tensor, vec: torch.Tensor, a: int, b: int,
                     band: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Coherent seeds of components a+1..b: seed labels (M,), relative motion (M, 2) px ->
    (b - a,) long (see :func:`coherent_seeds`). A band seed (``band`` (M,) bool: motion of
    only 2-4 px) is coherent only within half the median's length of it as well: random
    mismatches of that size (flicker) agree within 3 px with a median near zero, a slow
    rigid mover's seeds agree with its median to a fraction of it."""
    n = b - a
    member = lab.view(1, -1) == torch.arange(a + 1, b + 1, device=lab.device).view(-1, 1)
    vx = masked_median(vec[:, 0].expand(n, -1), member)[0]
    vy = masked_median(vec[:, 1].expand(n, -1), member)[0]
    med = torch.stack([vx, vy], -1)  # (K, 2)
    dev = (vec.unsqueeze(0) - med.unsqueeze(1)).norm(dim=-1)  # (K, M)
    tol = (0.3 * med.norm(dim=-1, keepdim=True)).clamp_min(3.0)
    if band is not None:
        tol = torch.where(band.view(1, -1), tol.clamp_max(0.5 * med.norm(dim=-1, keepdim=True)),
                          tol)
    return (member & (dev <= tol)).sum(-1)


def segmentation_factor(size: Tuple[int, int], max_side: int = 320) -> int:
    """Integer factor f = ceil(max(H, W) / max_side): segmentation runs at <= max_side px."""
    return max(1, -(-max(int(size[0]), int(size[1])) // max_side))


def _block_sums(frames: torch.Tensor, f: int) -> torch.Tensor:
    """(k, C, H, W) uint8 -> (k, C, ceil(H/f), ceil(W/f)) int32 sums of f x f blocks (exact;
    blocks past the border sum only their pixels inside the frame)."""
    k, c, h, w = frames.shape
    hp, wp = -(-h // f) * f, -(-w // f) * f
    if (hp, wp) != (h, w):
        frames = F.pad(frames, (0, wp - w, 0, hp - h))
    acc = torch.zeros(k, c, hp // f, wp // f, dtype=torch.int32, device=frames.device)
    for dy in range(f):  # f^2 strided views, added in integers
        for dx in range(f):
            acc += frames[..., dy::f, dx::f]
    return acc


def pooled_gray(clip: "Clip", factor: int, chunk: int = 16) -> torch.Tensor:
    """Luminance of a clip average-pooled by ``factor`` (ceil mode), ``chunk`` frames at a time:
    (T, 1, ceil(H/f), ceil(W/f)) float32 in [0, 1], equal (to float rounding) to
    ``avg_pool2d(clip.gray(), f, ceil_mode=True)`` (border blocks average the pixels they
    cover). The RGB blocks are summed exactly in integers first (luminance is linear), so the
    float work runs at the pooled size and no full-resolution float copy of the clip exists."""
    t = clip.num_frames
    h, w = clip.size
    if factor <= 1:
        return clip.gray()
    dev = clip.frames.device
    ones = torch.ones(1, 1, h, w, dtype=torch.uint8, device=dev)
    count = _block_sums(ones, factor).float()  # pixels per block (f^2 inside the frame)
    weights = torch.tensor([0.299, 0.587, 0.114], device=dev).view(1, 3, 1, 1)
    out = torch.empty(t, 1, -(-h // factor), -(-w // factor), device=dev)  # no list + cat copy
    for start in range(0, t, chunk):  # chunks of frames bound the integer copy
        sums = _block_sums(clip.frames[start:start + chunk], factor).float()
        out[start:start + chunk] = (sums * weights).sum(1, keepdim=True) / (count * 255.0)
    return out


class ClipGray:
    """The gray frames of one clip at the segmentation scale, computed per requested slice of
    frames (:func:`pooled_gray` of those frames, on ``device``): what :class:`_GrayFrames`
    reads in chunks, so no (T, 1, h, w) float copy of the clip exists (bit-identical: every
    frame's luminance is computed on its own). ``shape`` (T, 1, ceil(H/f), ceil(W/f))."""

    def __init__(self, clip: "Clip", factor: int, device: torch.device) -> None:
        h, w = clip.size
        self.clip, self.factor, self.device = clip, int(factor), torch.device(device)
        self.shape = torch.Size((clip.num_frames, 1, -(-h // self.factor),
                                 -(-w // self.factor)))

    def __getitem__(self, key: slice) -> torch.Tensor:
        """(b - a, 1, h, w) float32 gray frames of ``key`` (a slice of frames)."""
        clip = self.clip
        part = replace(clip, frames=clip.frames[key], frame_indices=clip.frame_indices[key])
        return pooled_gray(part, self.factor).to(self.device)


def joined_gray(clips: Sequence["Clip"], factor: int) -> Optional[torch.Tensor]:
    """Luminance of the frames of B clips one after the other, (T, 1, H, W) float32 in [0, 1]
    (:meth:`~geocon_torch.types.Clip.gray` of the joined frames, in chunks of
    :data:`_MAP_BUDGET` cells), when they can be joined cheaply: ``factor`` 1 (no pooling) and
    in-memory uint8 frame tensors of one size and device (a copy of the uint8 frames). None
    otherwise (then :func:`pooled_gray` per clip)."""
    frames = [clip.frames for clip in clips]
    if factor > 1 or not all(isinstance(f, torch.Tensor) for f in frames) or \
            len({(tuple(f.shape[1:]), f.dtype, str(f.device)) for f in frames}) != 1:
        return None
    h, w = frames[0].shape[-2:]
    joined = frames[0] if len(frames) == 1 else torch.cat(frames)
    return replace(clips[0], frames=joined).gray(
        chunk=max(16, _MAP_BUDGET // max(int(h) * int(w), 1)))


def motion_segment(gray: torch.Tensor, homographies: torch.Tensor, valid: torch.Tensor,
                   content: torch.Tensor, cfg: SegmentConfig, regime: Optional[str] = "H", *,
                   seeds: Optional[Tuple[torch.Tensor, ...]] = None,
                   max_objects: int = 8, max_side: int = 320
                   ) -> Tuple[torch.Tensor, Dict[str, object]]:
    """Moving-object masks (T, K, h, w) bool and the evidence dict (see the module docstring).

    Args:
        gray: (T, 1, h, w) float in [0, 1]; homographies: (T-1, 3, 3) x_{t+1} ~ H x_t (pixels);
        valid: (T-1,) bool (a pair whose H cannot be inverted gives no change evidence, as an
        invalid one); content: (h, w) bool; regime: "H" / "F" / None (pre-gate).
        seeds: optional ``(points (M, 2) px, frames (M,), motion (M, 2) px)``: endpoints of
            matches that violate the background model (each in its own frame) with their motion
            relative to the background (``x2 - H x1``). A component is kept only when at least
            ``motion_min_seeds`` of its seeds move *coherently* (within max(3 px, 30 %) of the
            component's median relative motion): a rigid mover does, scattered mismatches and
            non-rigid warps do not, so masking can never just delete the outliers. Optional
            fourth and fifth entries valid, band (M,) bool (:func:`motion_segments`).
        cfg: the ``segment`` config (``motion_*`` thresholds and radii, px at working size).
        max_objects: keep at most this many objects (the largest first).
        max_side: frames larger than this are segmented at a reduced scale (every size and
            radius scaled with it) and the masks upsampled back (nearest). ``gray`` may be
            given already pooled to that scale (:func:`pooled_gray`; saves a full-resolution
            float copy of the clip); the working size is always ``content``'s.
    Returns:
        (masks (T, K, h, w) bool at ``content``'s size and device, K <= ``max_objects``
        (largest object first): a lazy :class:`~geocon_torch.types.BlockMasks` (packed
        bits, one byte a segmentation pixel for up to 8 objects; an empty tensor when K = 0);
        the evidence dict: ``objects`` (K), ``unreliable_frames``,
        ``dense``, ``regime``, the seed counts, ...).
    Raises:
        ShapeError: ``gray`` not a (T, 1, h, w) float tensor with T >= 1, ``homographies``
            not (T-1, 3, 3), ``valid`` not (T-1,), ``content`` not 2-D (metadata checks).
        InputError: ``regime`` not "H", "F" or None.
    """
    return motion_segments([gray], [homographies], [valid], [content], cfg, [regime],
                           seeds=[seeds], max_objects=max_objects, max_side=max_side)[0]


def motion_segments(grays: Sequence[torch.Tensor], homographies: Sequence[torch.Tensor],
                    valids: Sequence[torch.Tensor], contents: Sequence[torch.Tensor],
                    cfg: SegmentConfig, regimes: Sequence[Optional[str]], *,
                    seeds: Optional[Sequence[Optional[Tuple[torch.Tensor, ...]]]] = None,
                    max_objects: int = 8, max_side: int = 320
                    ) -> List[Tuple[torch.Tensor, Dict[str, object]]]:
    """:func:`motion_segment` of B clips as one batch: the clips of one working size (and
    device) are segmented together, their frames one after the other (no pair and no
    component links two clips), with two host transfers per batch besides the components'
    convergence tests. Every clip gets what it gets alone (bit for bit on the CPU).

    Args:
        grays, homographies, valids, contents, regimes: one per clip, as :func:`motion_segment`.
        seeds: one per clip (or None): ``(points (M, 2) px, frames (M,), motion (M, 2) px)``,
            optionally with a fourth entry valid (M,) bool (fixed-size seeds: only those count)
            and a fifth, band (M,) bool: those valid seeds (H outliers below the seed
            threshold: :func:`~.seeds.outlier_seeds`) count only near their frame's change
            masks and where the band seeds around them move alike (:func:`_band_discs`).
    Returns:
        one (objects (T, K, H, W) bool, evidence) per clip.
    Raises:
        ShapeError / InputError: as :func:`motion_segment`, the message prefixed with
            ``clip k:`` when B > 1.
    """
    n = len(grays)
    for k in range(n):
        _check_clip_inputs(grays[k], homographies[k], valids[k], contents[k], regimes[k],
                           "" if n == 1 else f"clip {k}: ")
    seeds = list(seeds) if seeds is not None else [None] * n
    out: List[Any] = [None] * n
    groups: Dict[tuple, List[int]] = {}
    for k, c in enumerate(contents):
        groups.setdefault((tuple(c.shape[-2:]), str(grays[k].device)), []).append(k)
    for (size, _), idx in groups.items():
        parts = _segment_group([grays[k] for k in idx], [homographies[k] for k in idx],
                               [valids[k] for k in idx], [contents[k] for k in idx], cfg,
                               [regimes[k] for k in idx], [seeds[k] for k in idx], max_objects,
                               max_side)
        for k, part in zip(idx, parts):
            out[k] = part
    return out


def _check_clip_inputs(gray: torch.Tensor, homographies: torch.Tensor, valid: torch.Tensor,
                       content: torch.Tensor, regime: Optional[str], clip: str = "") -> None:
    """ShapeError / InputError naming the argument (after the ``clip`` prefix) unless one
    clip's inputs are as :func:`motion_segment` documents them (metadata only: no host sync)."""
    if not isinstance(gray, torch.Tensor) or gray.ndim != 4 or gray.shape[1] != 1 \
            or not gray.is_floating_point():
        raise ShapeError(f"{clip}gray must be a (T, 1, h, w) float tensor, got "
                         f"{describe(gray)}")
    t = int(gray.shape[0])
    if t == 0:
        raise ShapeError(f"{clip}gray must have at least one frame, got {tuple(gray.shape)}")
    for name, x, shape in (("homographies", homographies, (t - 1, 3, 3)),
                           ("valid", valid, (t - 1,))):
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != shape:
            raise ShapeError(f"{clip}{name} must be a {shape} tensor (T - 1 pairs), got "
                             f"{describe(x)}")
    if not isinstance(content, torch.Tensor) or content.ndim != 2:
        raise ShapeError(f"{clip}content must be an (h, w) tensor, got {describe(content)}")
    if not (regime is None or (isinstance(regime, str) and regime in ("H", "F"))):
        raise InputError(f"{clip}regime must be 'H', 'F' or None, got {regime!r}")


def _segment_group(grays: Sequence[torch.Tensor], homographies: Sequence[torch.Tensor],
                   valids: Sequence[torch.Tensor], contents: Sequence[torch.Tensor],
                   cfg: SegmentConfig, regimes: Sequence[Optional[str]],
                   seeds: Sequence[Optional[Tuple[torch.Tensor, ...]]], max_objects: int,
                   max_side: int) -> List[Tuple[torch.Tensor, Dict[str, object]]]:
    """:func:`motion_segments` of clips of one working size (H, W): their pairs and seeds one
    after the other (:func:`segment_joined`)."""
    dev = grays[0].device
    bounds = clip_bounds([int(g.shape[0]) for g in grays])
    eye = torch.eye(3, dtype=torch.float64, device=dev).view(1, 3, 3)
    hs, ok, pts, frames, vecs, sok, band = [], [], [], [], [], [], []
    for k, (H, v, r, sd) in enumerate(zip(homographies, valids, regimes, seeds)):
        last = k == len(grays) - 1  # a pair across two clips: identity, invalid
        hs += [H.to(dev, torch.float64)] + ([] if last else [eye])
        v = v.to(dev).bool() & (r != "F")  # no dense residuals under F
        ok += [v] + ([] if last else [v.new_zeros(1)])
        if sd is not None:
            m = int(sd[0].shape[0])
            pts.append(sd[0].to(dev))
            frames.append(sd[1].to(dev).long() + bounds[k])
            vecs.append(sd[2].to(dev))
            sok.append(sd[3].to(dev).bool() if len(sd) > 3 and sd[3] is not None
                       else torch.ones(m, dtype=torch.bool, device=dev))
            band.append(sd[4].to(dev).bool() if len(sd) > 4 and sd[4] is not None
                        else torch.zeros(m, dtype=torch.bool, device=dev))
    homs = torch.cat(hs) if hs else eye[:0]
    valid = torch.cat(ok) if ok else torch.zeros(0, dtype=torch.bool, device=dev)
    seed_all = None
    if any(sd is not None for sd in seeds):
        seed_all = (torch.cat(pts), torch.cat(frames), torch.cat(vecs), torch.cat(sok))
        if any(sd is not None and len(sd) > 4 and sd[4] is not None for sd in seeds):
            seed_all = (*seed_all, torch.cat(band))
    return segment_joined(grays, bounds, homs, valid, contents, cfg, regimes, seed_all,
                          [sd is not None for sd in seeds], max_objects, max_side)


def clip_bounds(lengths: Sequence[int]) -> List[int]:
    """Frame counts of B clips -> the B + 1 bounds of their frames one after the other (clip b
    has frames ``bounds[b]:bounds[b+1]``)."""
    bounds = [0]
    for t in lengths:
        bounds.append(bounds[-1] + int(t))
    return bounds


def segment_joined(grays: Sequence[torch.Tensor], bounds: Sequence[int], homs: torch.Tensor,
                   valid: torch.Tensor, contents: Sequence[torch.Tensor], cfg: SegmentConfig,
                   regimes: Sequence[Optional[str]], seeds: Optional[Tuple[torch.Tensor, ...]],
                   has_seeds: Sequence[bool], max_objects: int = 8, max_side: int = 320,
                   gray_bounds: Optional[Sequence[int]] = None
                   ) -> List[Tuple[torch.Tensor, Dict[str, object]]]:
    """:func:`motion_segments` of B clips of one working size (H, W) and device given joined:
    their frames one after the other (clip b has frames ``bounds[b]:bounds[b+1]``), segmented
    at the scale of :func:`segmentation_factor` (frames read in chunks: :class:`_GrayFrames`)
    and labelled by :func:`_motion_labels`.

    Args:
        grays: B (T_b, 1, H, W) or (T_b, 1, ceil(H/f), ceil(W/f)) float in [0, 1]; or, with
            ``gray_bounds``, pieces of the joined frames: piece i holds frames
            ``gray_bounds[i]:gray_bounds[i+1]`` (e.g. one piece for all: :func:`joined_gray`).
        homs: (T-1, 3, 3) float64 x_{t+1} ~ H x_t (px) of the joined frames; valid: (T-1,)
            bool (False across two clips and for the clips not segmented densely, e.g. F).
        contents: B (H, W) bool. seeds: (points (M, 2) px, frames (M,) long into the T joined
            frames, motion (M, 2) px, valid (M,) bool[, band (M,) bool: valid seeds that count
            only where confirmed by the change masks]) of all clips, or None; has_seeds: B.
    Returns:
        one (objects (T_b, K, H, W) bool as a :class:`~geocon_torch.types.BlockMasks`
        (packed bits at the segmentation size, whatever f; an empty (T_b, 0, H, W) tensor
        when K = 0), evidence) per clip.
    """
    h, w = contents[0].shape[-2:]
    dev = grays[0].device
    f = segmentation_factor((h, w), max_side)  # runs at <= max_side px, then upsampled
    pooled = (-(-h // f), -(-w // f))
    for g in grays:
        if tuple(g.shape[-2:]) not in ((h, w), pooled):
            raise ShapeError(f"gray frames must be {(h, w)} (the content mask) or pooled to "
                             f"{pooled} (pooled_gray), got {tuple(g.shape[-2:])}")
    content = torch.stack([c.to(dev).bool() for c in contents])  # (B, H, W)
    if f > 1:
        S = torch.diag(to_device([1.0 / f, 1.0 / f, 1.0], dev, torch.float64))
        homs = S @ homs @ torch.linalg.inv_ex(S, check_errors=False).inverse  # no error read
        gray = _GrayFrames(grays, gray_bounds or bounds, f, pooled)
        c_small = F.max_pool2d((~content).float().unsqueeze(1), f, ceil_mode=True)[:, 0] < 0.5
        if seeds is not None:
            seeds = ((seeds[0] + 0.5) / f - 0.5, seeds[1], seeds[2] / f, *seeds[3:])
        s_cfg = replace(cfg, motion_min_area=max(1, cfg.motion_min_area // (f * f)),
                        motion_seed_radius_px=max(1, round(cfg.motion_seed_radius_px / f)),
                        motion_close_px=max(1, round(cfg.motion_close_px / f)),
                        motion_open_px=round(cfg.motion_open_px / f))
        kept, evidences = _motion_labels(gray, homs, valid, c_small, s_cfg, regimes,
                                         seeds, has_seeds, max_objects, bounds)
        out = []
        for k, ev in enumerate(evidences):
            ev["scale"] = 1.0 / f
            # kept at the reduced size as packed bits, expanded per requested frame (memory
            # bounded in T: one byte per low-resolution cell for up to 8 objects)
            out.append((BlockMasks.from_labels(kept[bounds[k]:bounds[k + 1]],
                                               int(ev["objects"]), f, (h, w), content[k]), ev))
        return out
    gray = _GrayFrames(grays, gray_bounds or bounds, 1, (h, w))
    kept, evidences = _motion_labels(gray, homs, valid, content, cfg, regimes, seeds,
                                     has_seeds, max_objects, bounds)
    # packed bits at the working size, as at f > 1 (one byte a pixel for up to 8 objects; no
    # (T, K, H, W) bool masks and no int64 temporary of the label map's broadcast compare);
    # no object: an empty (T, 0, H, W) tensor
    return [(BlockMasks.from_labels(kept[a:b], int(ev["objects"]), 1, (h, w), content[k])
             if ev["objects"] else kept.new_zeros(b - a, 0, h, w, dtype=torch.bool), ev)
            for k, (a, b, ev) in enumerate(zip(bounds, bounds[1:], evidences))]


class _GrayFrames:
    """The frames of B clips one after the other at the segmentation size (h, w), read in
    chunks: the clips' (T_b, 1, ., .) gray frames (tensors, or :class:`ClipGray`: computed
    per chunk), each of size (h, w) or ``factor`` times larger (then average-pooled per
    chunk, ceil mode), never concatenated (no (T, 1, h, w) float copy). ``bounds``: clip b
    has frames ``bounds[b]:bounds[b+1]``."""

    def __init__(self, grays: Sequence[torch.Tensor], bounds: Sequence[int], factor: int,
                 size: Tuple[int, int]):
        self.grays, self.bounds, self.factor = list(grays), list(bounds), int(factor)
        self.size = (int(size[0]), int(size[1]))
        self.device = self.grays[0].device

    def __len__(self) -> int:
        return self.bounds[-1]

    def frames(self, a: int, b: int) -> torch.Tensor:
        """(b - a, 1, h, w) float: frames a..b-1."""
        parts = []
        for g, lo, hi in zip(self.grays, self.bounds, self.bounds[1:]):
            if max(a, lo) < min(b, hi):
                part = g[max(a, lo) - lo:min(b, hi) - lo]
                if tuple(part.shape[-2:]) != self.size:
                    part = F.avg_pool2d(part, self.factor, ceil_mode=True)
                parts.append(part)
        return parts[0] if len(parts) == 1 else torch.cat(parts)


def _moving_pixels(gray: _GrayFrames, homographies: torch.Tensor, valid: torch.Tensor,
                   content: torch.Tensor, clip_of: torch.Tensor,
                   seeds: Optional[Tuple[torch.Tensor, ...]], cfg: SegmentConfig
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor,
                              Optional[Tuple[torch.Tensor, ...]], Optional[torch.Tensor]]:
    """The moving pixels of concatenated clips (:func:`_motion_labels`): (T, h, w) bool motion
    (change masks + seed discs, closed inside each frame's content mask ``content[clip_of]``
    ((B, h, w) bool, (T,) long); frames whose motion covers more than ``motion_max_fraction``
    emptied), (T,) bool unreliable frames, (T,) content area (px), the seeds that count
    (points, frames, motion, valid; None without seeds: valid is ``seeds[3]`` less the band
    seeds ``seeds[4]`` not confirmed by their frame's change masks, :func:`_band_discs`) and
    the (M,) bool band seeds that count (None when no band was given).

    Every step is per frame (the change masks of frame t need frames t-1..t+1), so the frames
    go in chunks of :data:`_MAP_BUDGET` cells (each with its neighbour frames): identical
    results, and only the bool motion map spans the clip."""
    t, (h, w), dev = len(gray), content.shape[-2:], gray.device
    content = content.to(dev)
    # once: the same inverses in any chunk; pairs whose H cannot be inverted count as invalid
    Hd, Hinv, usable = _pair_homographies(homographies, valid, dev)
    motion = torch.zeros(t, h, w, dtype=torch.bool, device=dev)
    unreliable = torch.zeros(t, dtype=torch.bool, device=dev)
    area = torch.zeros(t, dtype=torch.long, device=dev)
    step = max(1, _MAP_BUDGET // max(h * w, 1))
    cells = None if seeds is None else _seed_cells(seeds[0], seeds[1], (h, w), seeds[3])
    band = seeds[4] if seeds is not None and len(seeds) > 4 else None
    confirmed = None if band is None else torch.zeros_like(band)
    for a in range(0, t, step):
        b = min(a + step, t)
        lo, hi = max(a - 1, 0), min(b + 1, t)  # with the neighbour frames of the pairs
        fc = content[clip_of[lo:hi]]  # (hi - lo, h, w) each frame's content
        if t >= 2:
            change = _change_masks(gray.frames(lo, hi), Hd[lo:hi - 1], Hinv[lo:hi - 1],
                                   usable[lo:hi - 1], fc, cfg.motion_threshold,
                                   hi - lo)[a - lo:b - lo]
            change = open_close(change, cfg.motion_open_px, cfg.motion_close_px)
        else:
            change = torch.zeros(b - a, h, w, dtype=torch.bool, device=dev)
        fc = fc[a - lo:b - lo]
        if band is not None:  # the discs of the chunk's seeds, band seeds where confirmed
            discs, confirmed = _band_discs(cells, band, seeds[2], confirmed, change, a,
                                           cfg.motion_seed_radius_px)
        elif cells is not None:  # the discs of the chunk's seeds
            discs = _disc_map(cells, a, b, (h, w), cfg.motion_seed_radius_px)
        else:
            discs = torch.zeros_like(change)
        m = dilate(change | discs, cfg.motion_close_px) & fc
        m = erode_mask(m, cfg.motion_close_px) | (change & fc)
        area[a:b] = fc.flatten(1).sum(1).clamp_min(1)  # (T,) content px
        frac = m.flatten(1).sum(1).double() / area[a:b].double()
        unreliable[a:b] = frac > cfg.motion_max_fraction
        motion[a:b] = m & ~unreliable[a:b].view(-1, 1, 1)
    if band is None:
        return motion, unreliable, area, seeds if seeds is None else seeds[:4], None
    return motion, unreliable, area, (*seeds[:3], seeds[3] & (~band | confirmed)), \
        band & confirmed


def _band_discs(cells: torch.Tensor, band: torch.Tensor, vec: torch.Tensor,
                confirmed: torch.Tensor, change: torch.Tensor, a: int, radius: int
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The seed discs of one chunk of frames a..b-1 with the band seeds confirmed by its
    (b - a, h, w) bool change masks (fixed-size, :data:`_BAND_PASSES` passes, no host sync).

    A band seed (an H outlier below the seed threshold) counts where it agrees with the band
    seeds around it (:func:`_local_agreement`) and its (2r+1)^2 square meets the chunk's
    *evidence*: the change masks, the discs of the other seeds and of the band seeds
    confirmed in an earlier pass. So a slow mover's seeds spread from its changing edges over
    its interior (low-contrast texture changes little there), while a mismatch on a still
    part of the frame (no change, no seed near) or among mismatches pointing every way
    (flicker: change everywhere) never counts.

    Args:
        cells: (M,) long seed cells (:func:`_seed_cells`; -1: not a seed); band (M,) bool;
        vec: (M, 2) px seed motion relative to the background; confirmed: (M,) bool band
        seeds confirmed so far (earlier chunks); a: first frame; radius: seed radius (px).
    Returns:
        (b - a, h, w) bool discs of the seeds that count, confirmed (M,) updated.
    """
    n, (h, w) = int(change.shape[0]), change.shape[-2:]
    at = cells - a * h * w
    inside = (at >= 0) & (at < n * h * w)
    at = at.clamp(0, n * h * w - 1)
    agree = band & inside & _local_agreement(at, band & inside, vec, (n, h, w), radius)
    for _ in range(_BAND_PASSES):
        use = torch.where(band & ~confirmed, torch.full_like(cells, -1), cells)
        near = dilate(change | _disc_map(use, a, a + n, (h, w), radius), radius)
        confirmed = confirmed | (agree & near.reshape(-1)[at])
    use = torch.where(band & ~confirmed, torch.full_like(cells, -1), cells)
    return _disc_map(use, a, a + n, (h, w), radius), confirmed


def _local_agreement(at: torch.Tensor, band: torch.Tensor, vec: torch.Tensor,
                     shape: Sequence[int], radius: int) -> torch.Tensor:
    """(M,) bool: the band seeds whose motion agrees with the mean motion of the *other* band
    seeds of their frame within about ``radius`` px: at least 2 of them, and within half the
    mean's length of it (what :func:`_coherent_counts` asks of band seeds in a component).

    Exact and deterministic on any device: the motions are summed as integers (1/16 px) on
    a grid of ``max(1, radius // 2)`` px cells, then box-summed over ``radius`` px.

    Args:
        at: (M,) long pixel index ``t h w + y w + x`` into the chunk's (T, h, w) frames;
        band: (M,) bool the chunk's band seeds (the only ones summed); vec: (M, 2) px;
        shape: (T, h, w) of the chunk; radius: px.
    """
    t, h, w = (int(v) for v in shape)
    c = max(1, radius // 2)
    gh, gw, k = -(-h // c), -(-w // c), -(-max(radius, 1) // c)
    cell = ((at // (h * w)) * gh + (at % (h * w)) // w // c) * gw + (at % w) // c
    cell = torch.where(band, cell, torch.full_like(cell, t * gh * gw))  # discarded slot
    own = torch.cat([(vec * 16).round().to(torch.int64), band.long().view(-1, 1)], 1)  # (M, 3)
    acc = torch.zeros(t * gh * gw + 1, 3, dtype=torch.int64, device=vec.device)
    acc.index_add_(0, cell, own)
    grid = F.pad(acc[:-1].view(t, gh, gw, 3).permute(3, 0, 1, 2), (k, k, k, k))
    box = grid.unfold(2, 2 * k + 1, 1).sum(-1).unfold(3, 2 * k + 1, 1).sum(-1)  # (3, t, gh, gw)
    around = box.reshape(3, -1).t()[cell.clamp_max(t * gh * gw - 1)] - own  # the others'
    count = around[:, 2].clamp_min(1).view(-1, 1).to(vec.dtype)
    mean = around[:, :2].to(vec.dtype) / (16 * count)
    return band & (around[:, 2] >= 2) & \
        ((vec - mean).norm(dim=-1) <= 0.5 * mean.norm(dim=-1))


def _motion_labels(gray: _GrayFrames, homographies: torch.Tensor, valid: torch.Tensor,
                   content: torch.Tensor, cfg: SegmentConfig, regimes: Sequence[Optional[str]],
                   seeds: Optional[Tuple[torch.Tensor, ...]], has_seeds: Sequence[bool],
                   max_objects: int, bounds: Sequence[int]
                   ) -> Tuple[torch.Tensor, List[Dict[str, object]]]:
    """:func:`motion_segment` at the size of ``gray`` for B clips whose frames are concatenated:
    clip b has frames ``bounds[b]:bounds[b+1]``.

    Args:
        gray: the T frames (:class:`_GrayFrames`, (h, w) in [0, 1]); homographies: (T-1, 3,
            3); valid: (T-1,) bool (False for the pairs across two clips and for the clips not
            segmented densely); content:
            (B, h, w) bool, one per clip; regimes: B; seeds: (points (M, 2), frames (M,) into
            the T frames, motion (M, 2), valid (M,) bool[, band (M,) bool]) of all clips or
            None; has_seeds: B
            (whether the clip was given seeds: its ``seeds`` evidence).
    Returns:
        the kept objects as a (T, h, w) uint8 / int16 label map (0: none, k: object k-1 of
        the frame's clip, largest first) and one evidence dict per clip (``objects``: K).
    """
    t, dev = len(gray), gray.device
    h, w = content.shape[-2:]
    nb = len(regimes)
    lengths = torch.tensor([b - a for a, b in zip(bounds, bounds[1:])])
    clip_of = to_device(torch.repeat_interleave(torch.arange(nb), lengths, output_size=t), dev)
    if seeds is not None:
        seeds = tuple(s.to(dev) for s in seeds)
        seed_clip = clip_of[seeds[1]]
    motion, unreliable, area, seeds, band = _moving_pixels(gray, homographies, valid, content,
                                                           clip_of, seeds, cfg)
    # components of 4 x 4 cells; a pixel's label is its cell's where it moves (_label_chunks):
    # the full-size labels exist only in chunks of frames; no link between two clips
    cell = 4
    cells, roots = _motion_components(motion, cell, [b - 1 for b in bounds[1:-1]], seeds)
    if motion.numel() < 2 ** 31 - 1:  # int32 labels: exact below 2^31 pixels, half the memory
        cells = cells.to(torch.int32)
    step = max(1, _MAP_BUDGET // max(h * w, 1))

    def per_clip(values: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
        return torch.zeros(nb, dtype=torch.long, device=dev).index_add_(0, owner, values.long())

    pair_clip = clip_of[:-1]
    counts = [per_clip(roots, clip_of), per_clip(unreliable, clip_of),
              per_clip(valid, pair_clip)]
    counts.append(per_clip(seeds[3], seed_clip) if seeds is not None else counts[0] * 0)
    counts += [] if band is None else [per_clip(band, seed_clip)]  # the band seeds that count
    host = torch.cat(counts).tolist()  # one host transfer
    n_comp, n_unrel, n_valid, n_seed = (host[k * nb:(k + 1) * nb] for k in range(4))
    evidences = _clip_evidences(regimes, bounds, n_valid, n_unrel, cfg, host[4 * nb:])
    k = sum(n_comp)
    small = max_objects < 256
    if k == 0:
        for ev in evidences:
            ev.update(objects=0)
        return torch.zeros(t, h, w, dtype=torch.uint8, device=dev), evidences
    # per-component statistics by counting (no (T, K, h, w) one-hot over all candidates)
    per_frame = torch.cat([per_frame_counts(lab, k)  # (T, K) pixels
                           for _, _, lab in _label_chunks(cells, motion, cell, step)])
    comp_clip = to_device(torch.repeat_interleave(torch.arange(nb), torch.tensor(n_comp),
                                                  output_size=k), dev)
    n_seeds = torch.zeros(k, dtype=torch.long, device=dev)
    if seeds is not None and sum(n_seed):  # the valid seeds first, in order (no sync)
        first = torch.argsort((~seeds[3]).to(torch.uint8), stable=True)[:sum(n_seed)]
        x, y = _seed_pixels(seeds[0][first], (h, w))
        at = seeds[1][first].long()
        lab = torch.where(motion[at, y, x], cells[at, y // cell, x // cell],
                          torch.zeros((), dtype=cells.dtype, device=dev))  # (M,) as labels
        n_seeds = _coherent_of_labels(lab, seeds[2][first], k,
                                      None if band is None else band[first])
    keep = (n_seeds >= cfg.motion_min_seeds) & (per_frame.amax(0) >= cfg.motion_min_area) \
        & ((per_frame > 0).sum(0) >= cfg.motion_min_frames)
    # each clip's kept components, largest first (ties: lower label first), at most max_objects
    by_size = per_frame.sum(0).masked_fill(~keep, -1).argsort(descending=True, stable=True)
    order = by_size[comp_clip[by_size].argsort(stable=True)]  # grouped by clip, in size order
    starts = to_device([sum(n_comp[:b]) for b in range(nb)], dev)
    owner = comp_clip[order]
    rank = torch.arange(k, device=dev) - starts[owner]  # 0.. within the clip
    n_kept = per_clip(keep, comp_clip).clamp_max(max_objects)
    chosen = rank < n_kept[owner]
    remap = torch.zeros(k + 1, dtype=torch.uint8 if small else torch.int16, device=dev)
    remap[order + 1] = torch.where(chosen, rank + 1, torch.zeros_like(rank)).to(remap.dtype)
    # (T, h, w): object k-1 of the frame's clip where kept == k, else 0
    kept = torch.empty(t, h, w, dtype=remap.dtype, device=dev)
    union = torch.empty(t, dtype=torch.long, device=dev)  # (T,) object pixels
    for a, b, lab in _label_chunks(cells, motion, cell, step):
        kept[a:b] = remap[lab.long()]
        union[a:b] = (kept[a:b] > 0).flatten(1).sum(1)
    del motion, cells
    union = union.double()
    largest = torch.zeros(nb, dtype=torch.float64, device=dev).scatter_reduce(
        0, clip_of, union / area, "amax", include_self=False)
    slots = torch.zeros(nb * max_objects + 1, dtype=torch.float64, device=dev)
    slots[torch.where(chosen, owner * max_objects + rank, nb * max_objects)] = \
        n_seeds[order].double()
    host = torch.cat([n_kept.double(), largest, slots[:-1]]).tolist()  # one host transfer
    _add_object_evidence(evidences, host, n_comp, n_seed, has_seeds, max_objects)
    return kept, evidences


def _motion_components(motion: torch.Tensor, cell: int, cuts: Sequence[int],
                       seeds: Optional[Tuple[torch.Tensor, ...]]
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`_cell_components` of the (T, h, w) bool motion map (``cell`` px cells, no link
    after the frames ``cuts``) where, at a merge or split of blobs, the blobs of two
    consecutive frames are linked only when their seeds agree on the motion
    (:func:`_link_gates`): two movers that cross are one blob in the frames where they touch,
    but no longer one object over the whole clip. Without seeds (or blobs with fewer than
    :data:`_BLOB_MIN_SEEDS` seeds) every link is used. The 2-D blobs cost one more
    components pass (its convergence tests: a few host syncs per batch, none per pair)."""
    if seeds is None:
        return _cell_components(motion, cell, 512, cuts)
    blobs = _cell_components(motion, cell, 512, spatial=True)[0].long()  # 2-D blobs 1..K2
    x, y = _seed_pixels(seeds[0], motion.shape[1:])
    at = seeds[1].long()
    on = seeds[3] & motion[at, y, x]
    seed_blob = torch.where(on, blobs[at, y // cell, x // cell], torch.zeros_like(at))
    gates = _link_gates(blobs, *_blob_motion(seed_blob, seeds[2], blobs.numel()))
    return _cell_components(motion, cell, 512, cuts, gates=gates)


def _blob_motion(seed_blob: torch.Tensor, vec: torch.Tensor, n: int
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The median relative motion of every blob's seeds (per axis, as ``numpy.median``):
    each seed's blob (M,) long in 0..n (0: none), motion (M, 2) px -> (n + 1, 2) medians and
    (n + 1,) bool known (at least :data:`_BLOB_MIN_SEEDS` seeds; never blob 0). Sorting, no
    (blobs x seeds) table and no host sync."""
    m = int(vec.shape[0])
    count = torch.bincount(seed_blob, minlength=n + 1)
    known = count >= _BLOB_MIN_SEEDS
    known[0] = False
    if m == 0:
        return vec.new_zeros(n + 1, 2), known
    start = count.cumsum(0) - count
    lo = (start + (count - 1).clamp_min(0) // 2).clamp_max(m - 1)
    hi = (start + count // 2).clamp_max(m - 1)
    med = []
    for c in range(2):  # seeds by blob, then by motion along the axis
        order = torch.argsort(vec[:, c], stable=True)
        v = vec[order[torch.argsort(seed_blob[order], stable=True)], c]
        med.append((v[lo] + v[hi]) / 2)
    return torch.stack(med, -1), known


def _link_gates(blobs: torch.Tensor, med: torch.Tensor, known: torch.Tensor) -> torch.Tensor:
    """(T, h, w) int16: bit i set where the cell's 2-D blob (``blobs`` (T, h, w) long, 0 none)
    may be linked to the blob of the cell at offset ``_NEXT[i]`` in the next frame. A link is
    cut only at a merge or a split (the next frame's blob touches several blobs of this frame,
    or this blob several of the next frame: two movers meeting or parting) when both blobs'
    motions are known (``med`` (n + 1, 2) px, ``known`` (n + 1,) bool, by blob) and differ by
    more than max(3 px, 30 %) (the tolerance of :func:`coherent_seeds`): a mover that turns
    back, alone, stays one object."""
    t, h, w = blobs.shape
    bits = torch.zeros(t, h, w, dtype=torch.int16, device=blobs.device)
    if t < 2:
        return bits
    n = int(med.shape[0])
    split = _several(blobs[:-1], blobs[1:], n)  # (n,) touches several blobs of the next frame
    merge = _several(blobs[1:], blobs[:-1], n)  # (n,) ... of the previous frame
    sq = (med * med).sum(-1)  # (n + 1,) squared lengths
    shift = torch.arange(9, device=blobs.device, dtype=torch.int16)
    step = max(1, _MAP_BUDGET // (9 * h * w))  # the 9 offsets at once, in chunks of frames
    for a in range(0, t - 1, step):
        la = blobs[a:min(a + step, t - 1)].unsqueeze(-1)  # (t', h, w, 1)
        nb = _windows(blobs[a + 1:min(a + step, t - 1) + 1])  # (t', h, w, 9): _NEXT order
        tol = (0.09 * torch.maximum(sq[la], sq[nb])).clamp_min(9.0)  # squared max(3, 30 %)
        apart = (split[la] | merge[nb]) & known[la] & known[nb] & \
            (((med[la] - med[nb]) ** 2).sum(-1) > tol)
        bits[a:a + int(la.shape[0])] = ((~apart).to(torch.int16) << shift).sum(-1)
    return bits


def _several(la: torch.Tensor, lb: torch.Tensor, n: int) -> torch.Tensor:
    """(n,) bool by blob: the blobs of ``la`` (T', h, w) long (0 none) whose cells touch (3 x 3
    neighbourhood) at least two distinct blobs of ``lb`` (T', h, w), the neighbour frames."""
    hi = _max9(lb)  # the largest / smallest blob around each cell (n + 1: none)
    lo = -_max9(-torch.where(lb > 0, lb, torch.full_like(lb, n)), fill=-n)
    at = la.reshape(-1)
    top = torch.zeros(n, dtype=lb.dtype, device=lb.device).scatter_reduce(
        0, at, hi.reshape(-1), "amax")
    bottom = torch.full((n,), n, dtype=lb.dtype, device=lb.device).scatter_reduce(
        0, at, lo.reshape(-1), "amin")
    return (top > 0) & (bottom < top)


def _clip_evidences(regimes: Sequence[Optional[str]], bounds: Sequence[int],
                    n_valid: Sequence[int], n_unrel: Sequence[int], cfg: SegmentConfig,
                    n_band: Sequence[int] = ()) -> List[Dict[str, object]]:
    """One evidence dict per clip before the objects are known: method, threshold, regime,
    why dense motion is off (F, or no valid background pair), the unreliable frames and,
    only where some count, the band seeds (``n_band``: per clip, or empty: none given)."""
    evidences: List[Dict[str, object]] = []
    for b, regime in enumerate(regimes):
        ev: Dict[str, object] = {"method": "motion", "threshold": cfg.motion_threshold,
                                 "regime": regime}
        if regime == "F" or bounds[b + 1] - bounds[b] < 2 or n_valid[b] == 0:
            ev["dense"] = ("off: parallax would look like motion under translation (F); only "
                           "clustered epipolar outliers are used" if regime == "F" else
                           "off: no valid background homography")
        ev["unreliable_frames"] = n_unrel[b]
        if b < len(n_band) and n_band[b]:
            ev["band_seeds"] = n_band[b]
        evidences.append(ev)
    return evidences


def _add_object_evidence(evidences: List[Dict[str, object]], host: Sequence[float],
                         n_comp: Sequence[int], n_seed: Sequence[int],
                         has_seeds: Sequence[bool], max_objects: int) -> None:
    """Fill each clip's object evidence in place from the host copy ``host`` = [kept objects
    (B), largest object fraction (B), seeds per object slot (B * max_objects)]."""
    nb = len(evidences)
    for b, ev in enumerate(evidences):
        if n_comp[b] == 0:
            ev.update(objects=0)
            continue
        m = int(host[b])
        seeds_b = host[2 * nb + b * max_objects:2 * nb + b * max_objects + m]
        ev.update(objects=m, candidates=n_comp[b], seeds=n_seed[b] if has_seeds[b] else 0,
                  object_seeds=[int(v) for v in seeds_b], max_object_fraction=host[nb + b])
