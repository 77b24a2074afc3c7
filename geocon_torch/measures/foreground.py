r"""AdaDFRC-W2: how rigidly each moving object moves (paper sec. 4.5, eqs. 14-15, 17; sec. 6.9).

For every frame pair ``p = (t, t+1)`` and object ``k`` (mask ``M_t^k`` at frame t):

1. the object's bounding box is split into an adaptive ``grid`` x ``grid`` lattice (cell
   boundaries at ``x_min + j * box_w / N``), so the analysis has the same resolution relative to
   the object whatever its size;
2. per cell: the median flow ``v_c`` of the object pixels in it (numpy median: mean of the two
   middle values for even counts; u and v separately), the weight ``w_c`` = number of object
   pixels (times their mean reliability when a reliability map is given, i.e. the sum of the
   reliability), and the position ``p_c`` = centroid of the cell's *object* pixels (our reading
   of the paper's "geometric centroid of the grid cell": it equals the cell centre for fully
   covered cells and stays on the object for boundary cells). Empty cells are excluded;
3. the closed-form weighted affine fit ``v ~ A p + b`` (eq. 14,
   :func:`geocon_torch.geometry.weighted_affine_lstsq`);
4. ``D_t^k`` in px^2 (flow pixels at the resolution of the flow):

   * ``score="wmse"`` (default): the weighted mean squared residual of the fit (eq. 15);
   * ``score="w2"``: the squared Wasserstein-2 transport cost between the rigid prediction
     ``{(A p_c + b, w_c)}`` and the observed medians ``{(v_c, w_c)}`` as weighted point sets in
     motion space (sec. 6.9), computed with a batched log-domain entropic Sinkhorn with
     epsilon-scaling and a fixed iteration count (:func:`sinkhorn_w2`). The identity coupling is
     feasible, so ``w2 <= wmse`` up to the entropic bias; W2 ignores *where* a residual sits and
     only measures how far the distribution of cell motions is from the rigid one.

An object is valid for a pair when it has at least ``min_pixels`` mask pixels, at least 3 cells
with positive weight and a non-degenerate fit. Invalid entries hold 0 and ``valid = False``.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch

from .._checks import check_integer, check_number
from .._tensor_utils import masked_mean, masked_quantile
from ..config import FOREGROUND_SCORE_CHOICES
from ..errors import InputError, ShapeError
from ..geometry import weighted_affine_lstsq
from ..segment.files import check_float_masks

SCORES = FOREGROUND_SCORE_CHOICES  # the one list (config.foreground.score)
_HALF_DTYPES = (torch.float16, torch.bfloat16)  # upcast to float32 by _check_inputs
_FLOW_DTYPES = (torch.float32, torch.float64) + _HALF_DTYPES


def _check_inputs(flow: torch.Tensor, masks: torch.Tensor, reliability: Optional[torch.Tensor]
                  ) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Check the shapes and dtypes (ShapeError) and the mask values (InputError). Returns
    ``flow`` and ``reliability``, a float16 / bfloat16 one upcast to float32 (a half-precision
    flow network's output: computed as its float32 copy, as half clips are on the video
    path)."""
    if not isinstance(flow, torch.Tensor) or flow.ndim != 4 or flow.shape[1] != 2:
        got = tuple(flow.shape) if isinstance(flow, torch.Tensor) else type(flow).__name__
        raise ShapeError(f"flow must have shape (P, 2, H, W), got {got}")
    if flow.dtype not in _FLOW_DTYPES:
        raise ShapeError(f"flow must be a float tensor (float32 / float64, or float16 / bfloat16 "
                         f"computed in float32), got {flow.dtype}")
    flow, reliability = (t.float() if isinstance(t, torch.Tensor) and t.dtype in _HALF_DTYPES
                         else t for t in (flow, reliability))
    p, _, h, w = flow.shape
    if h == 0 or w == 0:  # no pixel, no bounding box (the K = 0 / P = 0 cases return empties)
        raise ShapeError(f"flow must have non-empty frames (H, W >= 1), got {tuple(flow.shape)}")
    if not isinstance(masks, torch.Tensor) or masks.ndim != 4 or masks.shape[0] != p \
            or tuple(masks.shape[-2:]) != (h, w):
        got = tuple(masks.shape) if isinstance(masks, torch.Tensor) else type(masks).__name__
        raise ShapeError(f"masks must have shape ({p}, K, {h}, {w}), got {got}")
    if reliability is not None and (not isinstance(reliability, torch.Tensor)
                                    or tuple(reliability.shape) != (p, h, w)):
        got = tuple(reliability.shape) if isinstance(reliability, torch.Tensor) else \
            type(reliability).__name__
        raise ShapeError(f"reliability must have shape ({p}, {h}, {w}), got {got}")
    _check_mask_values(masks)
    return flow, reliability


def _check_mask_values(masks: torch.Tensor) -> None:
    """InputError unless ``masks`` are bool or hold only 0 / 1 (float or integer): soft float
    masks get ``score_clip``'s message (:func:`~geocon_torch.segment.files.check_float_masks`:
    "threshold soft masks first"), other integers (label values, 0 / 255) a hint to compare.
    Bool masks (the pipeline's) cost nothing; other dtypes one batched test over all masks and
    one host read per call (5 ops, 1 sync), never one per pair or object."""
    if masks.dtype == torch.bool or masks.numel() == 0:
        return
    if masks.is_complex():
        raise ShapeError(f"masks must be bool (or 0 / 1 floats or integers), got {masks.dtype}")
    if bool(((masks == 0) | (masks == 1)).all()):
        return
    check_float_masks(masks, "masks")  # raises for NaN or soft float values
    values = torch.unique(masks)  # integer masks from here on (the error path)
    shown = ", ".join(str(v) for v in values[:8].tolist()) + (", ..." if values.numel() > 8 else "")
    raise InputError(f"masks: integer masks must be 0 / 1 (one channel per object), found "
                     f"value(s) [{shown}]; give bool masks (e.g. m > 0, or labels == k for "
                     f"object k of a label map)")


def _sorted_group_median(values: torch.Tensor, groups: torch.Tensor, counts: torch.Tensor
                         ) -> torch.Tensor:
    """Median of ``values`` (Q,) per group id ``groups`` (Q,) given ``counts`` (G,) -> (G,).

    Two stable sorts (by value, then by group) give every group's values in order; the median is
    read at the middle offsets. Empty groups give 0 (also when no group has a value).
    """
    if values.numel() == 0:  # no pixel of any object (e.g. masks shrunk away at flow scale)
        return values.new_zeros(counts.shape)
    order = torch.argsort(values, stable=True)
    order = order[torch.argsort(groups[order], stable=True)]
    vals = values[order]
    starts = torch.cumsum(counts, 0) - counts
    last = max(vals.numel() - 1, 0)
    lo = (starts + (counts - 1).clamp_min(0) // 2).clamp(0, last)
    hi = (starts + counts // 2).clamp(0, last)
    med = 0.5 * (vals[lo] + vals[hi])
    return torch.where(counts > 0, med, torch.zeros_like(med))


def grid_cells(flow: torch.Tensor, masks: torch.Tensor, reliability: Optional[torch.Tensor] = None,
               grid: int = 8) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Adaptive-grid cell summaries of every (pair, object), all at once.

    Args:
        flow: (P, 2, H, W) px. masks: (P, K, H, W) bool (object k at the first frame of pair p).
        reliability: (P, H, W) in [0, 1] (clamped to it) or None. grid: N (cells per box
            side).
    Returns:
        positions (P, K, N*N, 2) cell centroids of object pixels (x, y) px,
        motions (P, K, N*N, 2) per-cell median flow px, weights (P, K, N*N) (0 = empty cell),
        pixels (P, K) long object pixel counts.
    """
    p_, k_, h, w = masks.shape
    n = int(grid)
    dtype, dev = flow.dtype, flow.device
    masks = masks.to(device=dev, dtype=torch.bool)
    pixels = masks.sum((-1, -2))
    ar_y = torch.arange(h, device=dev)
    ar_x = torch.arange(w, device=dev)
    rows, cols = masks.any(-1), masks.any(-2)  # (P, K, H), (P, K, W)
    y0 = torch.where(rows, ar_y, h).amin(-1)
    y1 = torch.where(rows, ar_y, -1).amax(-1)
    x0 = torch.where(cols, ar_x, w).amin(-1)
    x1 = torch.where(cols, ar_x, -1).amax(-1)
    idx = masks.nonzero()  # (Q, 4): p, k, y, x
    pi, ki, yi, xi = idx.unbind(1)
    bw = (x1 - x0 + 1)[pi, ki]
    bh = (y1 - y0 + 1)[pi, ki]
    cx = (((xi - x0[pi, ki]) * n) // bw).clamp(0, n - 1)
    cy = (((yi - y0[pi, ki]) * n) // bh).clamp(0, n - 1)
    groups = (pi * k_ + ki) * (n * n) + cy * n + cx
    g_total = p_ * k_ * n * n
    counts = torch.bincount(groups, minlength=g_total)
    if reliability is None:
        wpix = torch.ones(groups.shape, dtype=dtype, device=dev)
    else:
        wpix = reliability.to(device=dev, dtype=dtype)[pi, yi, xi].clamp(0, 1)
    weights = torch.zeros(g_total, dtype=dtype, device=dev).index_add_(0, groups, wpix)
    sums = torch.zeros(g_total, 2, dtype=dtype, device=dev).index_add_(
        0, groups, torch.stack([xi, yi], -1).to(dtype))
    positions = sums / counts.clamp_min(1).unsqueeze(-1).to(dtype)
    u = flow[pi, 0, yi, xi]
    v = flow[pi, 1, yi, xi]
    motions = torch.stack([_sorted_group_median(u, groups, counts),
                           _sorted_group_median(v, groups, counts)], -1)
    shape = (p_, k_, n * n)
    return (positions.reshape(shape + (2,)), motions.reshape(shape + (2,)),
            weights.reshape(shape), pixels)


def sinkhorn_w2(x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor, *,
                iterations: int = 200, eps_final: float = 1e-5) -> torch.Tensor:
    r"""Entropic approximation of the squared W2 distance between two weighted point sets.

    Both sets share the weights ``weights`` (normalised per item); the cost is
    :math:`C_{ij} = \|x_i - y_j\|^2`. Log-domain Sinkhorn with epsilon-scaling: epsilon decays
    geometrically from the largest cost to ``eps_final`` times the mean cost over the first
    three quarters of the ``iterations`` and stays there; the result is :math:`\sum \pi C` of the
    last plan. Fixed iteration count (deterministic work, batched over items).

    The plan is evaluated at ``eps_final``, so the potentials of the last iteration must have been
    computed at ``eps_final`` too: that holds from 2 iterations on (iteration ``it`` runs at
    ``eps_final`` once ``it >= max(1, 3 * iterations // 4)``). One iteration runs at the largest
    cost only and its plan overflows (NaN); zero iterations return a meaningless ~0: refused.
    Above that floor accuracy is a matter of convergence and depends on the data (how far the
    points spread relative to how far they move): few iterations overestimate the cost, by
    orders of magnitude when the spread is large (2 iterations: 4x to 1e7x the converged value
    on random sets); 150-200 iterations converged on every set tried. Keep the default 200.

    Args:
        x, y: (B, M, 2) points. weights: (B, M) >= 0 (items with zero total weight give 0).
        iterations: Sinkhorn iterations, an integer >= 2. eps_final: final epsilon relative to
            the mean cost.
    Returns:
        (B,) transport cost (squared units of x).
    Raises:
        InputError / ArgumentTypeError: ``iterations`` < 2 / not an integer.
    """
    _check_iterations(iterations, "iterations")
    dtype = x.dtype
    wsum = weights.sum(-1, keepdim=True)
    ok = wsum.squeeze(-1) > 0
    a = torch.where(ok.unsqueeze(-1), weights / wsum.clamp_min(torch.finfo(dtype).tiny),
                    torch.full_like(weights, 1.0 / max(weights.shape[-1], 1)))
    log_a = torch.where(a > 0, a.clamp_min(torch.finfo(dtype).tiny).log(),
                        torch.full_like(a, -float("inf")))
    cost = (x.unsqueeze(-2) - y.unsqueeze(-3)).pow(2).sum(-1)  # (B, M, M)
    pair_w = a.unsqueeze(-1) * a.unsqueeze(-2)
    mean_cost = (pair_w * cost).sum((-1, -2))
    big = cost.masked_fill(pair_w <= 0, 0).amax((-1, -2))
    tiny = torch.finfo(dtype).tiny ** 0.5
    eps_end = (eps_final * mean_cost).clamp_min(tiny)
    eps_start = torch.maximum(big, eps_end)
    anneal = max(1, (3 * iterations) // 4)
    f = torch.zeros_like(a)
    g = torch.zeros_like(a)
    for it in range(iterations):
        frac = min(it / anneal, 1.0)
        eps = (eps_start.log() * (1 - frac) + eps_end.log() * frac).exp().view(-1, 1)
        f = -eps * torch.logsumexp((g.unsqueeze(-2) - cost) / eps.unsqueeze(-1)
                                   + log_a.unsqueeze(-2), dim=-1)
        g = -eps * torch.logsumexp((f.unsqueeze(-1) - cost) / eps.unsqueeze(-1)
                                   + log_a.unsqueeze(-1), dim=-2)
    eps = eps_end.view(-1, 1, 1)
    log_pi = (f.unsqueeze(-1) + g.unsqueeze(-2) - cost) / eps + log_a.unsqueeze(-1) \
        + log_a.unsqueeze(-2)
    plan = log_pi.exp()
    out = (plan * cost).sum((-1, -2))
    return torch.where(ok, out, torch.zeros_like(out))


#: fewest Sinkhorn iterations whose last one runs at eps_final (see :func:`sinkhorn_w2`)
MIN_W2_ITERATIONS = 2


def _check_iterations(iterations: int, name: str) -> None:
    """ArgumentTypeError unless ``iterations`` is an integer, InputError unless it is >=
    :data:`MIN_W2_ITERATIONS` (a host-side int check, free)."""
    check_integer(iterations, name, MIN_W2_ITERATIONS,
                  " (the epsilon annealing of the W2 Sinkhorn needs 2 steps to reach its final "
                  "epsilon; 200 converge)")


def check_settings(grid: int, score: str, w2_iterations: int = 200, min_pixels: int = 0
                   ) -> None:
    """InputError unless ``score`` is one of :data:`SCORES`, ``grid`` an integer >= 2 (cells
    per box side), ``min_pixels`` an integer >= 0 and ``w2_iterations`` an integer >=
    :data:`MIN_W2_ITERATIONS` (checked whatever the score, so a bad value never waits for a
    switch to ``score="w2"``); ArgumentTypeError for a non-integer ``grid`` / ``min_pixels`` /
    ``w2_iterations`` (4.5 is refused, never truncated, as the config refuses it)."""
    if score not in SCORES:
        raise InputError(f"score must be one of {SCORES}, got {score!r}")
    if check_integer(grid, "grid", None) < 2:
        raise InputError(f"grid must be >= 2, got {grid}")
    check_integer(min_pixels, "min_pixels", 0)
    _check_iterations(w2_iterations, "w2_iterations")


def adadfrc(flow: torch.Tensor, masks: torch.Tensor, reliability: Optional[torch.Tensor] = None,
            *, grid: int = 8, score: str = "wmse", min_pixels: int = 64,
            w2_iterations: int = 200) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-pair, per-object AdaDFRC-W2 score ``D_t^k`` (paper eq. 15, or the W2 variant).

    Args:
        flow: (P, 2, H, W) forward flow of pair p in px (from frame t to t+1).
        masks: (P, K, H, W) bool, object k at the *first* frame of pair p (K may be 0); 0 / 1
            floats or integers are accepted as bool (one host read per call), other values
            refused (soft masks: threshold them first, e.g. ``m > 0.5``).
        reliability: (P, H, W) weights in [0, 1] (e.g. forward-backward reliability) or None.
            Not checked (that would read the host on every call); values outside are clamped:
            a negative weight counts as 0 (an object whose pixels all weigh <= 0 has no
            weighted cell and is invalid), a weight above 1 as 1.
        grid: N of the adaptive N x N grid, an integer >= 2. score: ``"wmse"`` or ``"w2"``
            (module docstring).
        min_pixels: objects with fewer mask pixels in a pair are invalid there (an integer
            >= 0).
        w2_iterations: Sinkhorn iterations for ``score="w2"``, an integer >= 2
            (:func:`sinkhorn_w2`; checked for every score).
    Returns:
        D: (P, K) px^2 (0 where invalid), valid: (P, K) bool.
    Raises:
        ShapeError: bad shapes / dtypes, or empty frames (H or W = 0).
        InputError: bad ``grid`` / ``score`` / ``min_pixels`` / ``w2_iterations``, or masks
            that are not binary (NaN, soft floats, integer labels other than 0 / 1).
        ArgumentTypeError: a non-integer ``grid`` / ``min_pixels`` / ``w2_iterations``.
    """
    flow, reliability = _check_inputs(flow, masks, reliability)
    check_settings(grid, score, w2_iterations, min_pixels)
    p_, k_ = masks.shape[:2]
    if p_ * k_ == 0:
        return (flow.new_zeros((p_, k_)), torch.zeros((p_, k_), dtype=torch.bool,
                                                       device=flow.device))
    pos, mot, wts, pixels = grid_cells(flow, masks, reliability, grid)
    m = pos.shape[2]
    pos, mot, wts = pos.reshape(-1, m, 2), mot.reshape(-1, m, 2), wts.reshape(-1, m)
    a, b, wmse, fit_ok = weighted_affine_lstsq(pos, mot, wts)
    if score == "w2":
        pred = pos @ a.transpose(-1, -2) + b.unsqueeze(-2)
        d = sinkhorn_w2(pred, mot, wts, iterations=w2_iterations)
    else:
        d = wmse
    cells = (wts > 0).sum(-1)
    valid = (fit_ok & (cells >= 3)).reshape(p_, k_) & (pixels >= int(min_pixels))
    d = d.reshape(p_, k_)
    # NaN / inf flow inside an object: invalid, never a 0 (the cell medians would sort a NaN
    # as the largest value and hide it)
    finite = torch.isfinite(flow).all(1)  # (P, H, W)
    broken = (masks.to(device=flow.device, dtype=torch.bool) & ~finite[:, None]).flatten(2).any(-1)
    valid = valid & torch.isfinite(d) & ~broken
    return torch.where(valid, d, torch.zeros_like(d)), valid


def adadfrc_summary(D: torch.Tensor, valid: torch.Tensor, percentile: float = 0.9
                    ) -> Dict[str, torch.Tensor]:
    """Per-object track summaries over the pairs of one clip (paper eq. 17 and sec. 4.5).

    Args:
        D: (P, K) per-pair scores; valid: (P, K) bool. percentile: a number in [0, 1] (AdaP90:
            0.9; ArgumentTypeError for a str such as "0.9", InputError outside).
    Returns:
        dict of (K,) tensors: ``adadfrc_mean`` (S^k, mean of D over the valid pairs),
        ``adap90`` (the ``percentile`` quantile, linear interpolation as numpy), ``frames``
        (long, number of valid pairs) and ``valid`` (bool, at least one valid pair). Objects with
        no valid pair hold 0 and ``valid = False``.
    """
    if D.ndim != 2 or tuple(valid.shape) != tuple(D.shape):
        raise ShapeError(f"D and valid must both be (P, K), got {tuple(D.shape)} and "
                         f"{tuple(valid.shape)}")
    check_number(percentile, "percentile", 0, 1)
    valid = valid.to(torch.bool)
    mean, ok = masked_mean(D, valid, dim=0)
    q, _ = masked_quantile(D, valid, float(percentile), dim=0)
    return {"adadfrc_mean": mean, "adap90": q, "frames": valid.sum(0), "valid": ok}
