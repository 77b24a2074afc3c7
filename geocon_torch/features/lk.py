"""Shi-Tomasi corners + pyramidal Lucas-Kanade tracks with a forward-backward check.

Two paths with the same parameters:

* ``backend="torch"``: written with torch ops, batched over frames (corners) and over pairs and
  points (tracking); runs on the device of the input. It follows OpenCV's algorithms:
  ``cornerMinEigenVal`` (3x3 Sobel, ``block`` x ``block`` box sums, reflect-101 borders), 3x3
  local maxima above ``quality * max``, greedy minimum-distance suppression (computed exactly,
  in parallel rounds), and ``calcOpticalFlowPyrLK`` (``pyrDown`` pyramid, Scharr gradients of the
  first image, bilinear window sampling, up to 30 Gauss-Newton steps per level, stop at
  |step| < 0.01 px, minimum-eigenvalue test 1e-4).
* ``backend="opencv"``: ``cv2.goodFeaturesToTrack`` + ``cv2.calcOpticalFlowPyrLK`` per pair
  (CPU parity reference).

``levels`` is OpenCV's ``maxLevel``: the pyramid has at most ``levels + 1`` images (level 0 =
full resolution); as in OpenCV, a coarse level is used only while each side, halved rounding up,
stays larger than ``window`` (:func:`_opencv_max_level`), so small frames track on fewer levels
on both paths. A track survives when both directions converge inside the image and the
forward-backward error ``|x1 - LK_back(LK_fwd(x1))|`` is <= ``fb_threshold_px``.
Points are pixels with pixel centres at integers. Frames with a side below
:data:`~geocon_torch.features.base.MIN_SIDE` (16 px) give no corners and no tracks.
"""
from __future__ import annotations

from typing import Any, Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F

from .._checks import check_integer, check_number, retired_argument
from ..errors import InputError, ShapeError
from ..types import Correspondences
from .._tensor_utils import sample_patches
from .base import check_gray, full_precision, too_small
from .matching import check_pairs, pack_matches
from .opencv_sift import _cv_mask, to_uint8

_SOBEL = (1.0, 2.0)  # smoothing taps of the 3x3 Sobel derivative
_SCHARR = (3.0 / 32.0, 10.0 / 32.0)  # Scharr, normalised to intensity per pixel
# OpenCV's default minEigThreshold 1e-4 is in its fixed-point units (uint8 intensities, Scharr
# gradients x32, 2^-20 scale): 1e-4 there is 1e-4 * 1024 / 255^2 for [0, 1] intensities.
_MIN_EIG = 1e-4 * 1024.0 / 255.0 ** 2
_MAX_ITERS = 30
_EPS = 0.01
# The give-up bound of a level (not in OpenCV): after _GIVE_UP_ITER Gauss-Newton steps, a pair
# in which fewer than _GIVE_UP_FRAC of the level's active points converged or match their
# template with zero-mean NCC >= _GIVE_UP_NCC (window^2 samples) is hopeless at this level: its
# non-matching points stop there (they keep their position and can still be tracked); its
# matching points and every point of the other pairs go on as before. Tracked frames measured
# 40-100 % matching points, noise and black frames 0-1 % (noise tracked for all 30 steps cost
# 65x a SIFT-matched clip).
_GIVE_UP_ITER = 2
_GIVE_UP_NCC = 0.8
_GIVE_UP_FRAC = 0.05


def _reflect101_index(n: int, before: int, after: int, device: torch.device) -> torch.Tensor:
    """Source indices (long, ``before + n + after``) of a side of ``n >= 1`` px padded with
    reflect-101 borders repeated as far as needed (OpenCV ``borderInterpolate``; period
    2 (n - 1); a 1-px side repeats its pixel)."""
    if n == 1:
        return torch.zeros(before + 1 + after, dtype=torch.long, device=device)
    period = 2 * (n - 1)
    idx = [i % period for i in range(-before, n + after)]
    return torch.tensor([i if i < n else period - i for i in idx], dtype=torch.long,
                        device=device)


def _pad_reflect101(x: torch.Tensor, left: int, right: int, top: int, bottom: int
                    ) -> torch.Tensor:
    """``x (..., H, W)`` (H, W >= 1) padded with reflect-101 borders (OpenCV's default,
    ``F.pad(mode="reflect")``): torch's padding where it applies (every pad below its side),
    else the same border repeated (:func:`_reflect101_index`), e.g. on 1-px sides."""
    h, w = x.shape[-2:]
    if max(left, right) < w and max(top, bottom) < h:
        return F.pad(x, (left, right, top, bottom), mode="reflect")
    rows = _reflect101_index(h, top, bottom, x.device)
    cols = _reflect101_index(w, left, right, x.device)
    return x.index_select(-2, rows).index_select(-1, cols)


def _gradients(img: torch.Tensor, smooth: Tuple[float, float]) -> Tuple[torch.Tensor, torch.Tensor]:
    """x and y derivatives of ``img (B, 1, H, W)`` with the 3x3 kernel
    ``[a, b, a]^T x [-1, 0, 1]`` (Sobel: (1, 2), Scharr: (3/32, 10/32)), reflect-101 borders;
    written as slices (separable), which is much faster than a 1-channel conv2d on CPU."""
    a, b = smooth
    p = _pad_reflect101(img, 1, 1, 1, 1)
    dx = p[..., :, 2:] - p[..., :, :-2]  # (B, 1, H + 2, W)
    dy = p[..., 2:, :] - p[..., :-2, :]  # (B, 1, H, W + 2)
    gx = a * (dx[..., :-2, :] + dx[..., 2:, :]) + b * dx[..., 1:-1, :]
    gy = a * (dy[..., :, :-2] + dy[..., :, 2:]) + b * dy[..., :, 1:-1]
    return gx, gy


def min_eigenvalue_map(gray: torch.Tensor, block: int = 3) -> torch.Tensor:
    """Shi-Tomasi response: smallest eigenvalue of the ``block`` x ``block`` summed gradient
    covariance (3x3 Sobel), (OpenCV ``cornerMinEigenVal`` times (4 block)^2, reflect-101
    borders). Any map size works as in OpenCV: windows wider than the map see its border
    repeated, and a side of 1 or 2 px has no gradient across it, so its map is 0 (an empty
    map gives an empty map).

    Args:
        gray: (T, 1, H, W) float frames (intensities in [0, 1]).
        block: side (px) of the summation window, an integer >= 1.
    Returns:
        (T, 1, H, W) response, ``gray``'s dtype and device (>= 0 up to round-off; squared
        intensity-gradient units).

    Raises:
        ShapeError: ``gray`` is not a (T, 1, H, W) float tensor.
        ArgumentTypeError, InputError: ``block`` is not an integer >= 1.
    """
    check_gray(gray)
    block = check_integer(block, "block (the covariance window side, px)", 1)
    h, w = gray.shape[-2:]
    if h == 0 or w == 0:
        return torch.zeros_like(gray)
    gx, gy = _gradients(gray, _SOBEL)
    cov = torch.cat([gx * gx, gx * gy, gy * gy], 1)
    r = block // 2
    cov = _pad_reflect101(cov, r, block - 1 - r, r, block - 1 - r)
    cov = sum(cov[..., k:k + h, :] for k in range(block))  # separable box sum
    cov = sum(cov[..., k:k + w] for k in range(block))
    a, b, c = cov[:, 0:1] * 0.5, cov[:, 1:2], cov[:, 2:3] * 0.5
    return (a + c) - torch.sqrt((a - c) ** 2 + b * b)


def _disk_offsets(min_distance: float) -> list:
    """Integer offsets (dy, dx), centre included, with dx^2 + dy^2 < min_distance^2 (OpenCV's
    test for two corners being too close)."""
    r = int(np.ceil(min_distance))
    md2 = float(min_distance) ** 2
    return [(dy, dx) for dy in range(-r, r + 1) for dx in range(-r, r + 1)
            if dy * dy + dx * dx < md2 or (dy == 0 and dx == 0)]


def _box_max(x: torch.Tensor, r: int, pad_value: float = 0.0) -> torch.Tensor:
    """Max of ``x (B, C, H, W)`` over (2r+1)^2 windows, separable (faster than max_pool2d on
    CPU); outside the image counts as ``pad_value``."""
    h, w = x.shape[-2:]
    p = F.pad(x, (0, 0, r, r), value=pad_value)
    rows = p[..., 0:h, :]
    for k in range(1, 2 * r + 1):
        rows = torch.maximum(rows, p[..., k:k + h, :])
    p = F.pad(rows, (r, r, 0, 0), value=pad_value)
    out = p[..., 0:w]
    for k in range(1, 2 * r + 1):
        out = torch.maximum(out, p[..., k:k + w])
    return out


def _disk_max(x: torch.Tensor, offsets: list) -> torch.Tensor:
    """Max of ``x (B, 1, H, W)`` (values >= 0) over the neighbourhood ``offsets`` (zero padding).
    A neighbourhood that is a full square (min_distance 3 -> 5x5) is one separable box max."""
    r = max(max(abs(dy), abs(dx)) for dy, dx in offsets)
    if r == 0:
        return x
    if len(offsets) == (2 * r + 1) ** 2:
        return _box_max(x, r)
    h, w = x.shape[-2:]
    p = F.pad(x, (r, r, r, r))
    out = None
    for dy, dx in offsets:
        v = p[..., r + dy:r + dy + h, r + dx:r + dx + w]
        out = v if out is None else torch.maximum(out, v)
    return out


def shi_tomasi(gray: torch.Tensor, max_corners: int, *, quality: float = 0.001,
               min_distance: float = 3.0, block: int = 3,
               mask: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """Good features to track of every frame, batched (OpenCV ``goodFeaturesToTrack`` semantics).

    Args:
        gray: (T, 1, H, W) float in [0, 1].
        max_corners: at most this many corners per frame (strongest first), an integer >= 1.
        quality: corners need a response >= quality * (max response of the frame).
        min_distance: accepted corners are at least this far apart (Euclidean px); greedy in
            order of decreasing response, exactly as OpenCV.
        block: side of the covariance summation window (px), an integer >= 1.
        mask: (H, W) bool; corners only where True.
    Returns:
        (xy (T, N, 2) integer-valued float pixel positions, valid (T, N) bool), N <= max_corners;
        N = 0 for frames with a side below ``MIN_SIDE`` px.
    Raises:
        ShapeError: ``gray`` is not a (T, 1, H, W) float tensor, or a bad ``mask``.
        ArgumentTypeError, InputError: ``max_corners`` / ``block`` not an integer >= 1,
            ``quality`` not a number in (0, 1], ``min_distance`` not a number >= 0.
    """
    mask = check_gray(gray, mask)
    max_corners = check_integer(max_corners, "max_corners", 1)
    _check_corner_args(quality, min_distance)
    gray = full_precision(gray)
    t, _, h, w = gray.shape
    if too_small(gray):  # no corner on frames below MIN_SIDE (base.MIN_SIDE)
        return gray.new_zeros(t, 0, 2), torch.zeros(t, 0, dtype=torch.bool, device=gray.device)
    eig = min_eigenvalue_map(gray, block)
    if mask is not None:
        eig = eig.masked_fill(~mask[None, None], 0.0)
    peak = eig.amax(dim=(1, 2, 3), keepdim=True)
    local_max = _box_max(eig, 1, pad_value=float("-inf"))
    cand = (eig > quality * peak) & (eig >= local_max) & (peak > 0)
    # no corner on the outermost rows / columns (OpenCV scans 1 .. size - 2): their window is
    # half padding, and the extra corners inflated feature_match_coverage's denominator
    cand[..., 0, :] = False
    cand[..., -1, :] = False
    cand[..., :, 0] = False
    cand[..., :, -1] = False
    # ranks: candidates ordered by (response, linear index) descending as OpenCV's sort
    flat = torch.where(cand, eig, torch.full_like(eig, -1.0)).reshape(t, -1)
    order = torch.sort(flat, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order)
    n_pix = h * w
    rank.scatter_(1, order, torch.arange(n_pix, 0, -1, device=gray.device).expand(t, -1))
    key_dtype = torch.float32 if n_pix < 2 ** 24 else torch.float64  # ranks stay exact
    key = torch.where(cand.reshape(t, -1), rank, torch.zeros_like(rank)).to(key_dtype)
    key = key.reshape(t, 1, h, w)
    offsets = _disk_offsets(min_distance)
    undecided = cand.clone()
    accepted = torch.zeros_like(cand)
    while bool(undecided.any()):  # rounds of the exact greedy suppression, all frames at once
        k = torch.where(undecided, key, torch.zeros_like(key))
        new = undecided & (k >= _disk_max(k, offsets))  # keys are unique ranks
        accepted |= new
        near = _disk_max(new.to(key.dtype), offsets) > 0
        undecided &= ~new & ~near
    score = torch.where(accepted, key, torch.zeros_like(key)).reshape(t, -1)
    n = min(max_corners, n_pix)
    top = score.topk(n, dim=1)
    valid = top.values > 0
    idx = top.indices
    xy = torch.stack([idx % w, idx // w], -1).to(gray.dtype)
    counts = valid.sum(1)
    m = int(counts.max()) if counts.numel() else 0
    xy, valid = xy[:, :m], valid[:, :m]
    return xy.masked_fill(~valid[..., None], 0), valid


def _pyr_down(img: torch.Tensor) -> torch.Tensor:
    """OpenCV ``pyrDown``: 5-tap binomial blur [1 4 6 4 1] / 16 (reflect-101), every 2nd pixel
    (output ``ceil(H / 2) x ceil(W / 2)``; pixel u of the result sits at 2u of the input)."""
    p = F.pad(img, (2, 2, 2, 2), mode="reflect")
    v = p[..., :-4, :] + 4.0 * p[..., 1:-3, :] + 6.0 * p[..., 2:-2, :] + 4.0 * p[..., 3:-1, :] \
        + p[..., 4:, :]
    v = v[..., ::2, :]
    u = v[..., :-4] + 4.0 * v[..., 1:-3] + 6.0 * v[..., 2:-2] + 4.0 * v[..., 3:-1] + v[..., 4:]
    return u[..., ::2] / 256.0


def _gather_rows(t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``t (P, N, ...)`` rows ``idx (P, M)`` along dim 1 -> (P, M, ...)."""
    return t.gather(1, idx.reshape(idx.shape + (1,) * (t.ndim - 2)).expand(idx.shape + t.shape[2:]))


def _give_up(i0: torch.Tensor, j: torch.Tensor, act: torch.Tensor, n0: torch.Tensor
             ) -> torch.Tensor:
    """The give-up rule of a level (see :data:`_GIVE_UP_ITER`): (P, M) bool, True for the
    points to stop -- the still active points ``act`` (P, M) whose template ``i0`` and current
    window ``j`` (P, M, K) correlate below :data:`_GIVE_UP_NCC` (:func:`zncc`), in pairs where
    fewer than :data:`_GIVE_UP_FRAC` of the level's ``n0`` (P,) active points either converged
    already or correlate that well. No host read."""
    match = act & (zncc(i0, j) >= _GIVE_UP_NCC)
    good = match.sum(1) + (n0 - act.sum(1))  # matching + converged
    hopeless = good < _GIVE_UP_FRAC * n0
    return hopeless[:, None] & act & ~match


def _refine_level(nxt: torch.Tensor, guess: torch.Tensor, i0: torch.Tensor, grad: torch.Tensor,
                  hinv: torch.Tensor, active: torch.Tensor, off: torch.Tensor) -> torch.Tensor:
    """Gauss-Newton LK steps on one pyramid level for all pairs and points at once.

    The working set holds only unconverged points: whenever it is at least half converged, it is
    compacted (per-pair, to the largest active count), so later iterations cost what is left.
    Every point's steps are independent of the other points. One bound beyond OpenCV: at
    iteration :data:`_GIVE_UP_ITER` the points of a pair that is hopeless at this level stop
    (:func:`_give_up`), which bounds the cost of frames nothing can be tracked in (noise, a
    black frame) to a few iterations per level instead of all ``_MAX_ITERS``.
    Args: nxt (P, 1, H, W); guess (P, N, 2) px at this level; i0 (P, N, K) template; grad
    (P, N, K, 2); hinv (P, N, 2, 2); active (P, N) bool. Returns the refined guess (P, N, 2).
    """
    guess = guess.clone()
    n_act = int(active.sum(1).max()) if active.numel() else 0
    if n_act == 0:
        return guess
    idx = torch.sort((~active).to(torch.uint8), dim=1, stable=True).indices[:, :n_act]
    g_w, i0_w, gr_w, hi_w, act_w = (_gather_rows(t, idx) for t in (guess, i0, grad, hinv, active))
    prev_step = torch.zeros_like(g_w)
    n0 = active.sum(1)
    for it in range(_MAX_ITERS):
        j = sample_patches(nxt, g_w, off)[:, 0]  # (P, M, K)
        if it == _GIVE_UP_ITER:
            act_w = act_w & ~_give_up(i0_w, j, act_w, n0)
        b = torch.einsum("pmk,pmkc->pmc", j - i0_w, gr_w)
        step = -torch.einsum("pmcd,pmd->pmc", hi_w, b)
        # OpenCV: a step that undoes the previous one (oscillation) -> go half back, stop
        osc = act_w & ((step + prev_step).abs() < _EPS).all(-1) & (it > 0)
        move = torch.where(osc[..., None], -0.5 * prev_step, step)
        g_w = g_w + torch.where(act_w[..., None], move, torch.zeros_like(move))
        act_w = act_w & ~osc & ((step * step).sum(-1) > _EPS * _EPS)
        prev_step = step
        left = int(act_w.sum(1).max())  # the one host read per iteration
        if left == 0:
            break
        if left <= act_w.shape[1] // 2:  # compact the working set
            guess.scatter_(1, idx[..., None].expand(-1, -1, 2), g_w)
            keep = torch.sort((~act_w).to(torch.uint8), dim=1, stable=True).indices[:, :left]
            idx = idx.gather(1, keep)
            g_w, i0_w, gr_w, hi_w, act_w, prev_step = (
                _gather_rows(t, keep) for t in (g_w, i0_w, gr_w, hi_w, act_w, prev_step))
    guess.scatter_(1, idx[..., None].expand(-1, -1, 2), g_w)
    return guess


def _window_system(prev: torch.Tensor, pts: torch.Tensor, off: torch.Tensor
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The LK system of the windows around ``pts (P, N, 2)`` in ``prev (P, 3, H, W)`` (I, Ix,
    Iy): (template (P, N, K), gradients (P, N, K, 2), inverse of G (P, N, 2, 2), good (P, N):
    G's minimum eigenvalue passes OpenCV's test)."""
    patch = sample_patches(prev, pts, off)  # (P, 3, N, K)
    i0, ix, iy = patch[:, 0], patch[:, 1], patch[:, 2]
    gxx = (ix * ix).sum(-1)
    gxy = (ix * iy).sum(-1)
    gyy = (iy * iy).sum(-1)
    det = gxx * gyy - gxy * gxy
    min_eig = (gxx + gyy - torch.sqrt((gxx - gyy) ** 2 + 4 * gxy * gxy)) / (2.0 * off.shape[0])
    good = (min_eig >= _MIN_EIG) & (det.abs() > 1e-12)
    inv_det = torch.where(good, 1.0 / torch.where(good, det, torch.ones_like(det)),
                          torch.zeros_like(det))
    grad = torch.stack([ix, iy], -1)  # (P, N, K, 2)
    hinv = torch.stack([torch.stack([gyy, -gxy], -1), torch.stack([-gxy, gxx], -1)], -2) \
        * inv_det[..., None, None]  # (P, N, 2, 2) inverse of G
    return i0, grad, hinv, good


def _lk_track(prev_pyr: list, next_pyr: list, pts: torch.Tensor, valid: torch.Tensor,
              window: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """Track ``pts (P, N, 2)`` from the prev to the next pyramid (lists of (P, C, H_l, W_l),
    prev channels = (I, Ix, Iy)). Returns (tracked (P, N, 2), ok (P, N)). A point whose
    full-resolution window fails the eigenvalue test is not ok whatever its track, so it is not
    refined on the coarser levels either (the other points' tracks are the same)."""
    half = (window - 1) / 2.0
    r = torch.arange(window, dtype=pts.dtype, device=pts.device) - half
    oy, ox = torch.meshgrid(r, r, indexing="ij")
    off = torch.stack([ox.reshape(-1), oy.reshape(-1)], -1)  # (K, 2)
    levels = len(prev_pyr) - 1
    guess = pts / (2.0 ** levels)
    h0, w0 = prev_pyr[0].shape[-2:]
    full = _window_system(prev_pyr[0], pts / 1.0, off)
    ok = valid & full[3]
    for lvl in range(levels, -1, -1):
        i0, grad, hinv, good = full if lvl == 0 else \
            _window_system(prev_pyr[lvl], pts / (2.0 ** lvl), off)
        guess = _refine_level(next_pyr[lvl], guess, i0, grad, hinv, good & ok, off)
        if lvl > 0:
            guess = guess * 2.0
    inside = (guess[..., 0] >= 0) & (guess[..., 0] <= w0 - 1) & \
             (guess[..., 1] >= 0) & (guess[..., 1] <= h0 - 1) & torch.isfinite(guess).all(-1)
    ok &= inside
    return torch.where(ok[..., None], guess, torch.zeros_like(guess)), ok


def _opencv_max_level(height: int, width: int, window: int, levels: int) -> int:
    """The coarsest pyramid level OpenCV tracks on for ``height`` x ``width`` frames (px), a
    square ``window`` (px) and ``maxLevel = levels``: an int in [0, levels], from the sizes
    alone (no tensor, no host read).

    OpenCV's rule (``buildOpticalFlowPyramid`` in modules/video/src/lkpyramid.cpp, which
    ``calcOpticalFlowPyrLK`` calls on both images and whose return value becomes its
    ``maxLevel``): after building level l it halves the size, rounding up
    (``(n + 1) / 2``), and returns l when the new width <= ``winSize.width`` or the new height
    <= ``winSize.height``. So level l >= 1 exists only if both sides, halved l times rounding
    up, exceed the window: with window 21, sides of 16-42 px give 0, 43-84 give 1, 85-168
    give 2 and 169 or more give 3 (the smaller side decides).
    """
    level = 0
    while level < levels:
        height, width = (height + 1) // 2, (width + 1) // 2
        if height <= window or width <= window:
            break
        level += 1
    return level


def _pyramids(gray: torch.Tensor, levels: int) -> Tuple[list, list]:
    """Image pyramids of (B, 1, H, W): intensities, and intensities + Scharr gradients, with
    ``levels`` coarse levels (``_lk_torch`` passes OpenCV's cap, :func:`_opencv_max_level`). A
    level is built only from an image of at least 3 x 3 px (the blur's reflect padding needs
    it), so frames of a few pixels get fewer levels instead of an error."""
    imgs = [gray]
    for _ in range(levels):
        if min(imgs[-1].shape[-2:]) < 3:
            break
        imgs.append(_pyr_down(imgs[-1]))
    with_grad = [torch.cat([im, *_gradients(im, _SCHARR)], 1) for im in imgs]
    return imgs, with_grad


def _check_lk_args(window: int, levels: int, max_corners: int, block: int) -> None:
    """ArgumentTypeError unless ``window`` / ``levels`` / ``max_corners`` / ``block`` are
    integers (both backends refuse 21.0 alike), InputError unless the window is odd >= 3,
    levels >= 0, max_corners >= 1 and block >= 1."""
    window = check_integer(window, "LK window (odd size, px)", None)
    if window < 3 or window % 2 == 0:
        raise InputError(f"LK window must be an odd size >= 3, got {window}")
    check_integer(levels, "LK levels (OpenCV maxLevel)", 0)
    check_integer(max_corners, "max_corners", 1)
    check_integer(block, "block (the covariance window side, px)", 1)


def _check_corner_args(quality: float, min_distance: float) -> None:
    """ArgumentTypeError unless ``quality`` / ``min_distance`` are numbers, InputError unless
    ``quality`` is in (0, 1] and ``min_distance`` >= 0 (OpenCV's rule and the config's,
    ``features.lk``; host-side, free)."""
    check_number(quality, "quality", 0, 1, low_open=True,
                 why=" (Shi-Tomasi qualityLevel: a fraction of the frame's best response)")
    check_number(min_distance, "min_distance", 0, why=" (px between accepted corners)")


def _lk_torch(gray, pairs, corners, corners_ok, *, window, levels, fb_threshold,
              chunk: Optional[int]):
    p = pairs.shape[0]
    n = corners.shape[1]
    x1 = corners[pairs[:, 0]]
    v1 = corners_ok[pairs[:, 0]]
    x2 = torch.zeros_like(x1)
    ok = torch.zeros_like(v1)
    fb = torch.zeros(v1.shape, dtype=gray.dtype, device=gray.device)
    step = chunk or max(1, int(4e6 // max(1, n * window * window)))
    # pyramids once per frame, gathered per pair
    used = torch.unique(pairs)
    frame_pos = torch.full((gray.shape[0],), -1, dtype=torch.long, device=gray.device)
    frame_pos[used] = torch.arange(used.numel(), device=gray.device)
    # OpenCV's level cap: coarse levels not larger than the window are dropped (sizes only)
    levels = _opencv_max_level(gray.shape[-2], gray.shape[-1], window, levels)
    imgs, grads = _pyramids(gray[used], levels)
    for s in range(0, p, step):  # chunks of pairs (memory), each batched over pairs and points
        sl = slice(s, s + step)
        a = frame_pos[pairs[sl, 0]]
        b = frame_pos[pairs[sl, 1]]
        fwd, ok_f = _lk_track([g[a] for g in grads], [im[b] for im in imgs], x1[sl], v1[sl], window)
        bwd, ok_b = _lk_track([g[b] for g in grads], [im[a] for im in imgs], fwd, ok_f, window)
        err = (bwd - x1[sl]).norm(dim=-1)
        good = ok_f & ok_b & (err <= fb_threshold)
        x2[sl], ok[sl], fb[sl] = fwd, good, torch.where(good, err, torch.zeros_like(err))
    return x1, x2, ok, fb


def _lk_opencv(gray, pairs, max_corners, quality, min_distance, block, window, levels,
               fb_threshold, mask):
    import cv2

    frames = to_uint8(gray)
    cv_mask = _cv_mask(mask)
    corners = {}
    for f in torch.unique(pairs).tolist():
        c = cv2.goodFeaturesToTrack(frames[f], maxCorners=int(max_corners), qualityLevel=quality,
                                    minDistance=min_distance, blockSize=block, mask=cv_mask)
        corners[f] = np.zeros((0, 1, 2), np.float32) if c is None else c.astype(np.float32)
    p = pairs.shape[0]
    n = max([len(c) for c in corners.values()], default=0)
    x1 = np.zeros((p, n, 2), np.float32)
    x2 = np.zeros((p, n, 2), np.float32)
    ok = np.zeros((p, n), bool)
    fb = np.zeros((p, n), np.float32)
    lk = dict(winSize=(window, window), maxLevel=levels,
              criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, _MAX_ITERS, _EPS))
    for k, (i, j) in enumerate(pairs.tolist()):  # OpenCV path: one pair at a time
        p0 = corners[i]
        m = len(p0)
        if m == 0:
            continue
        p1, st1, _ = cv2.calcOpticalFlowPyrLK(frames[i], frames[j], p0, None, **lk)
        p0b, st2, _ = cv2.calcOpticalFlowPyrLK(frames[j], frames[i], p1, None, **lk)
        err = np.linalg.norm(p0b.reshape(-1, 2) - p0.reshape(-1, 2), axis=1)
        good = (st1.ravel() == 1) & (st2.ravel() == 1) & (err <= fb_threshold)
        x1[k, :m] = p0.reshape(-1, 2)
        x2[k, :m] = np.where(good[:, None], p1.reshape(-1, 2), 0)
        ok[k, :m] = good
        fb[k, :m] = np.where(good, err, 0)
    counts = torch.zeros(gray.shape[0], dtype=torch.long)
    for f, c in corners.items():
        counts[f] = len(c)
    dev, dt = gray.device, gray.dtype
    to = lambda a: torch.from_numpy(a).to(dev)  # noqa: E731
    return to(x1).to(dt), to(x2).to(dt), to(ok), to(fb).to(dt), counts.to(dev)


# --- the photometric guard of tracks (features.lk / epipolar.tracking min_ncc) ----------------
def ncc_offsets(window: int) -> np.ndarray:
    """(K = window^2, 2) float32 (dx, dy) pixel offsets of a square patch centred on a point,
    row-major (dy outer). ``window`` must be odd and >= 3."""
    if int(window) < 3 or int(window) % 2 == 0:
        raise InputError(f"the NCC patch window (ncc_window) must be odd and >= 3, got {window}")
    r = np.arange(int(window), dtype=np.float32) - (int(window) - 1) / 2.0
    oy, ox = np.meshgrid(r, r, indexing="ij")
    return np.stack([ox.reshape(-1), oy.reshape(-1)], -1)


def zncc(a: torch.Tensor, b: torch.Tensor, eps: float = 1e-10) -> torch.Tensor:
    """Zero-mean normalised cross-correlation of patches ``a``, ``b`` (..., K) -> (...,) in
    [-1, 1] (float64): sum(a' b') / sqrt(sum(a'^2) sum(b'^2)) with a' = a - mean(a). A flat
    patch (mean squared deviation <= ``eps``, in squared intensity units) gives 0."""
    a = a.to(torch.float64)
    b = b.to(torch.float64)
    a = a - a.mean(-1, keepdim=True)
    b = b - b.mean(-1, keepdim=True)
    va, vb = (a * a).sum(-1), (b * b).sum(-1)
    flat = (va <= eps * a.shape[-1]) | (vb <= eps * a.shape[-1])
    den = torch.sqrt(torch.where(flat, torch.ones_like(va), va * vb))
    return torch.where(flat, torch.zeros_like(va), ((a * b).sum(-1) / den).clamp(-1.0, 1.0))


def patch_ncc(gray: torch.Tensor, pairs: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
              window: int, max_elements: int = 1 << 25) -> torch.Tensor:
    """(P, N) zero-mean NCC (:func:`zncc`) of the ``window``-square patches around x1
    (P, N, 2) in frame ``pairs[:, 0]`` and x2 in frame ``pairs[:, 1]`` of ``gray`` (T, 1, H, W);
    pairs are processed in chunks of at most ``max_elements`` gathered frame pixels."""
    off = torch.from_numpy(ncc_offsets(window)).to(device=gray.device)
    out = torch.zeros(x1.shape[:2], dtype=torch.float64, device=gray.device)
    if x1.shape[1] == 0:
        return out
    if min(gray.shape[-2:]) < 1:
        raise ShapeError(f"patch_ncc: gray frames must be at least 1 x 1 px (the NCC patches "
                         f"are sampled from them), got shape {tuple(gray.shape)}: pass the "
                         f"frames the points were found on")
    step = max(int(max_elements) // max(int(gray[0].numel()), 1), 1)
    for s in range(0, pairs.shape[0], step):  # chunks bound memory (frame copies)
        sl = slice(s, s + step)
        a = sample_patches(gray[pairs[sl, 0]], x1[sl].to(gray.dtype), off)[:, 0]
        b = sample_patches(gray[pairs[sl, 1]], x2[sl].to(gray.dtype), off)[:, 0]
        out[sl] = zncc(a, b)
    return out


def _no_tracks(gray: torch.Tensor, pairs: torch.Tensor) -> Correspondences:
    """The tracks of frames below ``MIN_SIDE`` px: (P, 0, 2) points in ``gray``'s dtype, no
    corners counted."""
    p, dev = int(pairs.shape[0]), gray.device
    none = torch.zeros(p, dtype=torch.long, device=dev)
    return Correspondences(x1=gray.new_zeros(p, 0, 2), x2=gray.new_zeros(p, 0, 2),
                           mask=torch.zeros(p, 0, dtype=torch.bool, device=dev),
                           scores=gray.new_zeros(p, 0), pairs=pairs, num_kp1=none,
                           num_kp2=none.clone())


def lk_tracks(gray: torch.Tensor, pairs: torch.Tensor, *, max_corners: int = 2000,
              quality: float = 0.001, min_distance: float = 3.0, block: int = 3,
              window: int = 21, levels: int = 3, fb_threshold_px: float = 1.5,
              backend: str = "torch", mask: Optional[torch.Tensor] = None,
              chunk: Optional[int] = None, **retired: Any) -> Correspondences:
    """Shi-Tomasi corners of frame i tracked into frame j by pyramidal LK, for all pairs.

    Args:
        gray: (T, 1, H, W) float in [0, 1] (float32 or float64).
        pairs: (P, 2) long (i, j).
        max_corners, quality, min_distance, block: Shi-Tomasi parameters (OpenCV meaning).
        window: LK window side (odd, px); levels: OpenCV ``maxLevel`` (capped as OpenCV
            does: only levels whose sides stay above ``window``, :func:`_opencv_max_level`).
        fb_threshold_px: maximum forward-backward error (px) of a kept track (the retired
            name ``fb_threshold`` still works, with a DeprecationWarning).
        backend: "torch" (batched, any device) or "opencv" (CPU loop, parity reference).
        mask: (H, W) bool content mask; corners only where True.
        chunk: pairs per batched tracking call (None: automatic).
    Returns:
        Correspondences: x1 = corners in frame i, x2 = their tracked positions in frame j
        (P, N, 2) px; mask = kept tracks; scores = 1 / (1 + FB error) (higher is better);
        num_kp1 / num_kp2 = corners detected in frames i / j. Frames with a side below
        ``MIN_SIDE`` (16) px give no tracks: N = 0 and no corners counted.
    Raises:
        ArgumentTypeError: ``window`` / ``levels`` / ``max_corners`` / ``block`` not an
            integer (both backends alike; 21.0 is refused, never truncated).
        InputError: ``window`` not odd >= 3, ``levels`` < 0, ``max_corners`` or ``block`` < 1,
            ``quality`` outside (0, 1], ``min_distance`` < 0, ``fb_threshold_px`` <= 0 (also
            ArgumentTypeError when one of them is not a number), an unknown ``backend``.
    """
    fb_threshold = retired_argument(retired, "fb_threshold", "fb_threshold_px", fb_threshold_px)
    mask = check_gray(gray, mask)
    gray = full_precision(gray)
    pairs = check_pairs(pairs, gray.shape[0]).to(gray.device)
    _check_lk_args(window, levels, max_corners, block)
    _check_corner_args(quality, min_distance)
    check_number(fb_threshold, "fb_threshold_px", 0, low_open=True,
                 why=" (px of forward-backward error a kept track may have)")
    if backend not in ("torch", "opencv"):
        raise InputError(f"lk backend must be 'torch' or 'opencv', got {backend!r}")
    if too_small(gray):
        return _no_tracks(gray, pairs)
    if backend == "opencv":
        x1, x2, ok, fb, counts = _lk_opencv(gray, pairs, max_corners, quality, min_distance,
                                            block, window, levels, fb_threshold, mask)
    else:  # "torch"
        used = torch.unique(pairs) if pairs.numel() else pairs.new_zeros(0)
        corners = torch.zeros(gray.shape[0], 0, 2, dtype=gray.dtype, device=gray.device)
        corners_ok = torch.zeros(gray.shape[0], 0, dtype=torch.bool, device=gray.device)
        if used.numel():
            c, v = shi_tomasi(gray[used], max_corners, quality=quality,
                              min_distance=min_distance, block=block, mask=mask)
            corners = torch.zeros(gray.shape[0], c.shape[1], 2, dtype=gray.dtype,
                                  device=gray.device)
            corners_ok = torch.zeros(gray.shape[0], c.shape[1], dtype=torch.bool,
                                     device=gray.device)
            corners[used], corners_ok[used] = c, v
        counts = corners_ok.sum(1)
        x1, x2, ok, fb = _lk_torch(gray, pairs, corners, corners_ok, window=window,
                                   levels=levels, fb_threshold=fb_threshold, chunk=chunk)
    scores = torch.where(ok, 1.0 / (1.0 + fb), torch.zeros_like(fb))
    return pack_matches(x1, x2, ok, scores, pairs, counts[pairs[:, 0]], counts[pairs[:, 1]])
