"""Batched robust estimation of homographies and fundamental matrices over P pairs at once.

Algorithm (one implementation for H and F; the function of each stage in brackets):

1. Every pair's valid points are compacted to the front of a working width (a multiple of 64)
   in order: by descending ``scores`` when given (PROSAC-style), else by index; then
   Hartley-normalised, paper eq. 9 (``_compact``, ``_prepare``).
2. Rounds (``_run_round``): each still-active pair draws ``batch_size`` minimal samples (4
   points for H, 7 for F) without replacement among its valid points (from the fifth round on,
   2x more per round up to 8x: hard pairs finish in fewer rounds, easy ones are unaffected);
   with ``scores`` the first rounds draw from the top-ranked 25 %, then 50 %, then all points.
   Degenerate samples (collinear / duplicated points, singular systems) are rejected, and for H
   samples whose point triples do not all keep (or all flip) their turn between the images
   (the orientation check of OpenCV's ``findHomography``: such a sample cannot be all
   inliers; ~7 in 8 outlier samples fail it). The
   7-point solver yields up to 3 models per sample, so a round has P x K (H) or P x 3K (F)
   candidates with a validity mask (``_sample_hypotheses``). Their costs are computed in batched
   GEMM-based kernels (float32, in each pair's normalised frame, residuals rescaled to
   pixels): first on 32 random valid points per pair, drawn anew each round (all of them when
   it has <= 32; ``_preverify``; a hypothesis's own sample points leave its cost), then the
   best 2 per pair (per batch_size samples) on all points
   (``_round_winners``).
3. MSAC cost ``sum min(r^2, t^2)`` (or the outlier count for ``scoring="ransac"``) picks each
   pair's round winner; when it is within 1.25x of the pair's best cost, local optimisation
   runs on it (``_optimize_winners``): iterated weighted least-squares refits (IRLS: DLT /
   8-point with Tukey weights, plus Sampson weighting for F) on 256 random valid points of a
   pair with more than 512 (else on all), started from the best of 4 inner-sample refits,
   kept only when the result lowers the cost on all points.
4. A pair stops when its adaptive bound ``log(1 - confidence) / log(1 - w^m)`` (w = inlier
   ratio of its best model) in samples drawn, or ``max_iterations`` samples that passed the
   sample checks (as OpenCV counts them), or 10x that many drawn is reached
   (``_stopping_rule``).
   Python loops only over rounds and LO iterations, never over pairs or hypotheses.
   From the second round on, the pairs still active run the rounds they would need if their
   best model did not change (``_lookahead``, at most 8) in one batch of rows (pair, round),
   padded to the largest round's size; the rounds' outcomes are then settled in order
   (``_settle``, elementwise), so a pair that stops early ignores its later rows: the same
   results as round by round, in far fewer launches and host syncs when a few pairs straggle.
   On accelerators only: on the CPU a host sync is cheap and the padded rows are not, so the
   rounds run one at a time there (same results).
5. A final least-squares refit on the inliers (kept if it lowers the cost) gives the model
   (``_final_refit``); the inliers are the valid points whose residual is ``<= threshold``. A
   pair is invalid when it has too few valid points, no non-degenerate sample, fewer than
   ``min_inliers`` inliers, or inliers that are collinear in either image (``_assemble_fit``).

Randomness is a counter-based hash keyed by ``seed + pair index`` (see ``sampling.py``): the
same seed gives the same result, and pair p of a batch equals a single-pair call with
``seed + p`` (also across devices, up to floating-point ties).

Padding invariance: a pair's Fit (model, inliers on its valid entries, residuals, iterations,
num_inliers, valid, cost) depends only on its valid points (in order), its scores and its
key, bit for bit (verified on CPU): not on the padded width N, on where its masked entries sit
or what they hold, nor on the other pairs of the batch. Every random choice is drawn in
[0, n_valid) from the pair's own key, every per-pair switch (pre-check and LO subsets) is
decided from n_valid, candidate ties go to the earlier candidate (stable sorts), every sum
over the point axis goes through ``_reduce`` (fixed 64 / 256-entry chunks added left to
right), so padded entries add exact zeros in a fixed place, and the LS refits' eigen-solver
sees every matrix of a batch at the same memory alignment (``homography._smallest_eigvec``:
LAPACK's rounding was seen to depend on it).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Callable, Optional, Tuple, Union

import torch
import torch.nn.functional as tnf

from .._precision import autocast_off
from .._checks import check_integer, check_mask, check_number, check_points, check_same_shape
from .._tensor_utils import finite, to_device
from ..errors import InputError, ShapeError
from ..types import Fit
from .fundamental import _fundamental_8pt_normalized, _seven_point_normalized, _unit_fro
from .homography import (_dlt_basis, _float64_bases, _homogeneous_t, _homography_4pt,
                         _homography_dlt_normalized, _monomials, _normalize_h_scale)
from ._reduce import CHUNK as _CHUNK
from ._reduce import padded_sum
from .normalization import _similarity_inverse, _similarity_matrix, _weighted_hartley
from .residuals import _adjugate3
from .sampling import (draw_with_replacement, draw_without_replacement, has_collinear_triple,
                       has_duplicate, orientation_consistent, pair_keys, stream_base, uniform,
                       uniform_rows)

H_RESIDUALS = ("symmetric", "forward")
F_RESIDUALS = ("sampson_normalized", "sampson", "epipolar_max")
_PREVERIFY_POINTS = 32  # hypotheses are first evaluated on this many random valid points ...
_PREVERIFY_KEEP = 2  # ... and only each pair's best few per round are evaluated on all points
_STEADY_ROUNDS = 4  # rounds of batch_size samples; later rounds (stragglers) grow ...
_ROUND_GROWTH = 8  # ... by 2x per round up to this factor (fewer rounds for hard pairs)
_LO_MARGIN = 1.25  # round winners within this cost factor of the best are optimised too
_INNER_SAMPLES = 4  # LO-RANSAC inner samples (subsets of the inliers) per local optimisation
_LO_POINTS = 256  # in-loop local optimisation refits on this many random valid points
_LOOKAHEAD = 8  # from the second round on, up to this many rounds are computed at once (on
# accelerators, where each round's host sync drains the stream; on the CPU a sync is cheap and
# the rows a pair does not need cost their full price: F at 30 % outliers ran 15x slower)
_GIVE_UP_SAMPLES = 256  # a pair with no non-degenerate sample after this many is unfit
_DRAW_LIMIT = 10  # max_iterations counts accepted samples; at most this many times as many
# are drawn (OpenCV redraws a rejected sample up to 1000 times)
_MIN_SPREAD = 1e-6  # inliers whose covariance eigenvalue ratio is below this are degenerate


@dataclass
class _Context:
    """Normalised points of A pairs in the layouts the kernels need."""

    x1n: torch.Tensor  # (A, N, 2)
    x2n: torch.Tensor
    X1t: torch.Tensor  # (A, 3, N) homogeneous, transposed
    X2t: torch.Tensor
    mask: torch.Tensor  # (A, N) bool
    s1: torch.Tensor  # (A,) Hartley scales (normalised units per pixel)
    s2: torch.Tensor
    mono1: Optional[torch.Tensor] = None  # (A, 6, N) float64 monomials of x1n (LS refits)
    mono2: Optional[torch.Tensor] = None  # (A, 6, N) float64 monomials of x2n (F), (A, 4, N)
    # its DLT basis (H, ``homography._dlt_basis``)
    source: Optional[torch.Tensor] = None  # (A, N) long: each point's position in the context
    # it was drawn from (:meth:`points`; None: this is that context)

    @staticmethod
    def build(x1n, x2n, mask, s1, s2, dtype, refit: Optional[str] = None) -> "_Context":
        """The context of normalised points (A, N, 2) in ``dtype``; with ``refit`` ("H" or
        "F") the refits' precomputed bases too (:meth:`with_bases`)."""
        x1n, x2n = x1n.to(dtype), x2n.to(dtype)
        ctx = _Context(x1n, x2n, _homogeneous_t(x1n), _homogeneous_t(x2n), mask, s1.to(dtype),
                       s2.to(dtype))
        return ctx if refit is None else ctx.with_bases(refit)

    def with_bases(self, kind: str) -> "_Context":
        """Sets (and returns self with) the least-squares refits' bases of model ``kind``, in
        float64 (the refits sum their normal equations in float64)."""
        self.mono1, self.mono2 = _float64_bases(self.x1n, self.x2n, None, None,
                                                _monomials if kind == "F" else _dlt_basis)
        return self

    def _memo(self, key: str, make: Callable):
        memo = self.__dict__.setdefault("_derived", {})
        if key not in memo:
            memo[key] = make()
        return memo[key]

    def scale_sq(self, image: int) -> torch.Tensor:
        """(A, 1, 1) squared Hartley scale of image 1 or 2 (computed once per context)."""
        return self._memo(f"s{image}", lambda: (self.s1 if image == 1 else self.s2
                                                ).view(-1, 1, 1) ** 2)

    def xy_t(self, image: int) -> torch.Tensor:
        """(A, 1, 2, N) view of the x, y rows of X1t or X2t (computed once per context)."""
        return self._memo(f"x{image}", lambda: (self.X1t if image == 1 else self.X2t
                                                )[:, None, :2])

    def xy_rows(self, image: int) -> Tuple[torch.Tensor, torch.Tensor]:
        """The x and y rows (A, 1, N) of :meth:`xy_t` (computed once per context)."""
        return self._memo(f"r{image}", lambda: self.xy_t(image).unbind(2))

    def mask_k(self) -> torch.Tensor:
        """(A, 1, N) the mask, broadcasting over a hypothesis axis (once per context)."""
        return self._memo("mask", lambda: self.mask.unsqueeze(1))

    def index(self, idx: torch.Tensor) -> "_Context":
        pick = lambda t: None if t is None else t[idx]  # noqa: E731
        return _Context(*(pick(getattr(self, f.name)) for f in fields(self)))

    def points(self, pos: torch.Tensor, sel: torch.Tensor) -> "_Context":
        """The same pairs restricted to the points at ``pos`` (A, R), of which those where
        ``sel`` (A, R) is False are masked out (no monomials)."""
        g2 = pos.unsqueeze(-1).expand(-1, -1, 2)
        z = torch.zeros((), dtype=self.x1n.dtype, device=pos.device)
        x1n = torch.where(sel.unsqueeze(-1), self.x1n.gather(1, g2), z)
        x2n = torch.where(sel.unsqueeze(-1), self.x2n.gather(1, g2), z)
        return _Context(x1n, x2n, _homogeneous_t(x1n), _homogeneous_t(x2n),
                        self.mask.gather(1, pos) & sel, self.s1, self.s2, source=pos)


def _sync_free(device: torch.device) -> bool:
    """Whether the rounds skip their optional host sync on ``device`` (accelerators: a sync
    drains the stream): the 7-point slots are then not compacted. Same per-pair results either
    way; on the CPU the sync saves work."""
    return device.type != "cpu"


def _rows(M: torch.Tensor, Xt: torch.Tensor) -> torch.Tensor:
    """``M X`` for models (A, K, 3, 3) and points (A, 3, N) -> (A, K, 3, N) (one batched GEMM:
    ``bmm``, the kernel ``matmul`` would reach through a few more ops)."""
    A, K = M.shape[:2]
    return torch.bmm(M.reshape(A, K * 3, 3), Xt).view(A, K, 3, -1)


def _h_transfer_sq(U: torch.Tensor, xy: torch.Tensor) -> torch.Tensor:
    """Squared distance (A, K, N) between pi(U) (A, K, 3, N) and points xy (A, 1, 2, N)
    (transposed: rows x, y)."""
    w = U[:, :, 2:]
    d = torch.addcmul(U[:, :, :2], xy, w, value=-1)  # (A, K, 2, N)
    tiny = torch.finfo(U.dtype).eps ** 2
    return d.square_().sum(2).div_(w.square().clamp_min_(tiny).squeeze(2))


def _h_residual_sq(kind: str) -> Callable:
    def fn(M: torch.Tensor, ctx: _Context) -> torch.Tensor:
        fwd = _h_transfer_sq(_rows(M, ctx.X1t), ctx.xy_t(2)).div_(ctx.scale_sq(2))
        if kind == "forward":
            return fwd
        bwd = _h_transfer_sq(_rows(_adjugate3(M), ctx.X2t), ctx.xy_t(1)).div_(ctx.scale_sq(1))
        return fwd.sqrt_().add_(bwd.sqrt_()).mul_(0.5).square_()
    return fn


def _f_terms(M: torch.Tensor, ctx: _Context):
    """``(x2^T F x1)^2`` and the squared norms of the first two entries of ``F x1`` and
    ``F^T x2``, each (A, K, N), for models M (A, K, 3, 3)."""
    U = _rows(M, ctx.X1t)  # F x1
    V = _rows(M.transpose(-1, -2), ctx.X2t)  # F^T x2
    u0, u1, u2 = U.unbind(2)
    x2, y2 = ctx.xy_rows(2)
    num = torch.addcmul(u2, x2, u0).addcmul_(y2, u1)
    ga = U[:, :, :2].square().sum(2)
    gb = V[:, :, :2].square().sum(2)
    return num.square_(), ga, gb


def _f_residual_sq(kind: str, with_weights: bool = False) -> Callable:
    """Squared F residual in threshold units; with ``with_weights`` also the per-point
    ``1 / |grad|^2`` of the algebraic error (normalised to mean 1 over valid points), which turns
    the 8-point's algebraic least squares into (iterated) Sampson least squares."""
    def fn(M: torch.Tensor, ctx: _Context):
        num2, ga, gb = _f_terms(M, ctx)
        tiny = torch.finfo(num2.dtype).tiny
        if kind != "sampson_normalized":
            ga = ga.mul_(ctx.scale_sq(2))
            gb = gb.mul_(ctx.scale_sq(1))
        if kind == "epipolar_max":
            r = torch.maximum(num2 / ga.clamp_min(tiny), num2 / gb.clamp_min(tiny))
            g = ga.add_(gb).clamp_min_(tiny)
        else:
            g = ga.add_(gb).clamp_min_(tiny)
            r = num2.div_(g)
        if not with_weights:
            return r
        m = ctx.mask_k()
        gm = padded_sum(g * m).unsqueeze(-1) / ctx._memo(
            "count", lambda: m.sum(-1, keepdim=True).clamp_min(1))
        return r, (gm / g).clamp_max_(1e6)
    return fn


@dataclass
class _Problem:
    kind: str  # "H" or "F"
    sample_size: int
    residual_sq: Callable  # (models (A, K, 3, 3), ctx) -> (A, K, N) in threshold units^2
    lo_residual: Callable  # like residual_sq, returning (rsq, refit weight factors or None)


def _solve_h(x1s: torch.Tensor, x2s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(A, K, 4, 2) samples -> models (A, K, 3, 3), valid (A, K). Collinear triples (which
    include duplicated points) in either image and samples whose triples do not keep their
    orientation (:func:`orientation_consistent`) are rejected."""
    H, ok = _homography_4pt(x1s, x2s)
    ok = ok & ~has_collinear_triple(x1s) & ~has_collinear_triple(x2s) \
        & orientation_consistent(x1s, x2s)
    return H, ok


def _solve_f(x1s: torch.Tensor, x2s: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(A, K, 7, 2) samples -> models (A, 3K, 3, 3), valid (A, 3K)."""
    F, ok = _seven_point_normalized(x1s, x2s)  # (A, K, 3, 3, 3), (A, K, 3)
    # duplicated points make the sample degenerate; three collinear points do not (for F), and
    # an inlier set that is collinear as a whole is rejected at the end (``_spread``)
    ok = ok & ~(has_duplicate(x1s) | has_duplicate(x2s)).unsqueeze(-1)
    A, K = F.shape[:2]
    return F.reshape(A, K * 3, 3, 3), ok.reshape(A, K * 3)


def _cost(rsq: torch.Tensor, ctx: _Context, thr2: float, scoring: str,
          fixed_width: bool = False) -> Tuple[torch.Tensor, torch.Tensor]:
    """(A, K, N) squared residuals on the points of ``ctx`` -> cost (A, K) and inlier counts
    (A, K). The MSAC sum is padding-invariant (``padded_sum``), or a plain sum when N is the
    same in every batch (``fixed_width``)."""
    m = ctx.mask_k()
    inl = (rsq <= thr2) & m
    ninl = inl.sum(-1)
    if scoring == "msac":
        t = rsq.clamp_max(thr2) * m
        cost = t.sum(-1) if fixed_width else padded_sum(t)
    else:
        cost = (m.sum(-1) - ninl).to(rsq.dtype)
    return cost, ninl


def _refit(problem: _Problem, ctx: _Context, w: torch.Tensor) -> torch.Tensor:
    if problem.kind == "H":
        return _normalize_h_scale(_homography_dlt_normalized(ctx.x1n, ctx.x2n, w, ctx.mono1,
                                                             ctx.mono2))
    return _fundamental_8pt_normalized(ctx.x1n, ctx.x2n, w, ctx.mono1, ctx.mono2)


def _inner_samples(problem: _Problem, ctx: _Context, model: torch.Tensor, rsq: torch.Tensor,
                   cost: torch.Tensor, thr2: float, scoring: str, u: torch.Tensor):
    """LO-RANSAC inner sampling: refit on J random subsets (about 4 minimal sizes each) of the
    current inliers, u (A, J, N) uniforms; returns the best of (model, the J refits)."""
    inl = (rsq <= thr2) & ctx.mask  # (A, N)
    n_inl = inl.sum(-1, keepdim=True).clamp_min(1).to(u.dtype)
    keep = (u < (4.0 * max(problem.sample_size, 8) / n_inl).unsqueeze(1)) & inl.unsqueeze(1)
    w = keep.to(ctx.x1n.dtype)  # (A, J, N)
    sub = _Context(ctx.x1n.unsqueeze(1), ctx.x2n.unsqueeze(1), ctx.X1t, ctx.X2t, ctx.mask,
                   ctx.s1, ctx.s2, None if ctx.mono1 is None else ctx.mono1.unsqueeze(1),
                   None if ctx.mono2 is None else ctx.mono2.unsqueeze(1))
    models = _refit(problem, sub, w)  # (A, J, 3, 3)
    ok = finite(models).flatten(-2).all(-1)
    models = torch.where(ok[..., None, None], models, model.unsqueeze(1))
    c, _ = _cost(problem.residual_sq(models, ctx), ctx, thr2, scoring)
    c = torch.where(ok, c, torch.full_like(c, math.inf))
    cj, j = c.min(-1)
    better = cj < cost
    pick = models[torch.arange(models.shape[0], device=models.device), j]
    return torch.where(better[:, None, None], pick, model)


def _local_optimization(problem: _Problem, ctx: _Context, model: torch.Tensor, thr2: float,
                        scoring: str, iterations: int, robust: bool = True,
                        u: Optional[torch.Tensor] = None):
    """Iterated weighted least-squares refits of models (A, 3, 3) (IRLS).

    ``robust``: Tukey weights whose cutoff shrinks from 3 t to 1.5 t over the iterations (the
    wide start lets a refit escape a slightly wrong hypothesis); else plain least squares on the
    inliers. For F the weights are divided by the squared gradient norm (Sampson LS). Every
    iterate is evaluated and the best one (the input included) is returned, so the cost never
    increases. Returns (model, cost, ninl, rsq (A, N)).
    """
    rsq, gw = problem.lo_residual(model.unsqueeze(1), ctx)  # (A, 1, N): K = 1 kept
    cost, ninl = _cost(rsq, ctx, thr2, scoring)  # (A, 1)
    if u is not None:  # start the IRLS from the best inner-sample refit
        start = _inner_samples(problem, ctx, model, rsq.squeeze(1), cost.squeeze(1), thr2,
                               scoring, u)
        rsq2, gw2 = problem.lo_residual(start.unsqueeze(1), ctx)
        c2, n2 = _cost(rsq2, ctx, thr2, scoring)
        moved = c2 < cost
        moved3 = moved.unsqueeze(-1)
        model, rsq = torch.where(moved3, start, model), torch.where(moved3, rsq2, rsq)
        cost, ninl = torch.where(moved, c2, cost), torch.where(moved, n2, ninl)
        if gw is not None:
            gw = torch.where(moved3, gw2, gw)
    best = [model, cost, ninl, rsq]
    cur_r, cur_g = rsq.squeeze(1), gw
    for it in range(iterations):
        if robust:
            mult = 3.0 - 1.5 * it / max(iterations - 1, 1)
            w = (1 - cur_r / (mult * mult * thr2)).clamp_min(0).square() * ctx.mask
        else:
            w = ((cur_r <= thr2) & ctx.mask).to(cur_r.dtype)
        if cur_g is not None:
            w = w * cur_g.squeeze(1)
        new = _refit(problem, ctx, w.to(ctx.x1n.dtype))
        new = torch.where(finite(new).all(-1, keepdim=True).all(-2, keepdim=True), new,
                          best[0])
        r_new, g_new = problem.lo_residual(new.unsqueeze(1), ctx)
        c_new, n_new = _cost(r_new, ctx, thr2, scoring)
        better = c_new < best[1]  # (A, 1)
        better3 = better.unsqueeze(-1)
        best = [torch.where(better3, new, best[0]), torch.where(better, c_new, best[1]),
                torch.where(better, n_new, best[2]), torch.where(better3, r_new, best[3])]
        cur_r, cur_g = r_new.squeeze(1), g_new
    return best[0], best[1].squeeze(1), best[2].squeeze(1), best[3].squeeze(1)


def _spread(x: torch.Tensor, sel: torch.Tensor) -> torch.Tensor:
    """Ratio of the smaller to the larger eigenvalue of the covariance of the selected points
    x (..., P, N, 2) (e.g. both images stacked) / sel (P, N): ~0 when they are collinear or
    coincide. Returns (..., P)."""
    w = sel.to(x.dtype)
    wt = w.unsqueeze(-2)  # (P, 1, N)
    n = padded_sum(w).unsqueeze(-1).clamp_min(1)
    mu = padded_sum(x.transpose(-1, -2) * wt) / n
    d = (x - mu.unsqueeze(-2)).transpose(-1, -2) * wt  # (..., P, 2, N)
    dy = d[..., 1:, :]
    # rows dx dx, dx dy, dy dy
    cxx, cxy, cyy = padded_sum(torch.cat([d[..., :1, :] * d, dy * dy], -2)).div(n).unbind(-1)
    tr = cxx + cyy
    det = cxx * cyy - cxy * cxy
    disc = torch.sqrt((tr * tr / 4 - det).clamp_min(0))
    lo, hi = tr / 2 - disc, tr / 2 + disc
    return torch.where(hi > 0, lo.clamp_min(0) / torch.where(hi > 0, hi, torch.ones_like(hi)),
                       torch.zeros_like(hi))


def _required_iterations(ninl: torch.Tensor, n: torch.Tensor, m: int, confidence: float,
                         cap: int) -> torch.Tensor:
    eps = (ninl.to(torch.float64) / n.clamp_min(1).to(torch.float64)).clamp(0, 1)
    pm = eps.pow(m)
    denom = torch.log1p(-pm.clamp_max(1 - 1e-15))
    need = math.log(max(1.0 - confidence, 1e-300)) / denom.clamp_max(-1e-300)
    need = torch.where(pm > 0, need, torch.full_like(need, float(cap)))
    return need.clamp(0, cap).ceil().long()


def _valid_first_order(mask: torch.Tensor, scores: Optional[torch.Tensor],
                       n_valid: torch.Tensor) -> torch.Tensor:
    """(P, N) positions: each pair's valid points first (by descending score when ``scores`` is
    given, ties and the no-score case in index order; a NaN or infinite score ranks a valid
    point after every finite one), then its masked entries."""
    P, N = mask.shape
    if scores is not None:
        big = torch.finfo(torch.float64).max
        key = torch.nan_to_num(-scores.to(torch.float64), nan=big, posinf=big, neginf=big)
        key = torch.where(mask, key, torch.full_like(key, math.inf))
        return torch.sort(key, dim=-1, stable=True).indices
    # without a sort: scatter each entry to its rank
    rank = torch.where(mask, mask.long().cumsum(-1) - 1,
                       n_valid.view(P, 1) + (~mask).long().cumsum(-1) - 1)
    return torch.empty_like(rank).scatter_(
        1, rank, torch.arange(N, device=mask.device).expand(P, N).contiguous())


def _subset(keys: Optional[torch.Tensor], stream: int, n_valid: torch.Tensor, count: int,
            limit: int, width: int, fixed: bool = False, base: Optional[torch.Tensor] = None
            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-pair point subsets of compacted pairs (valid points at positions [0, n_valid)):
    ``count`` positions drawn with replacement when ``n_valid > limit``, else all ``n_valid``
    points. Returns positions (P, R) and their validity (P, R): R = count when ``fixed``
    (needs limit <= count), else only as wide as the batch needs (<= max(count, limit);
    the extra columns are masked). Which points a pair gets depends only on its key and
    n_valid. ``base``: the precomputed ``stream_base(keys, stream)`` (P,)."""
    big = n_valid > limit
    if fixed:
        R = count
    else:  # (a host sync)
        need = int(torch.where(big, torch.full_like(n_valid, count), n_valid).max()) \
            if n_valid.numel() else 1
        R = min(max(need, 1), width)
    rounds = None if base is not None else torch.full_like(keys, stream)
    drawn = draw_with_replacement(keys, rounds, count, n_valid, base)
    drawn = tnf.pad(drawn, (0, max(R - count, 0)))[:, :R]
    col = torch.arange(R, device=n_valid.device).view(1, R)
    pos = torch.where(big.view(-1, 1), drawn, col.clamp_max(width - 1))
    sel = torch.where(big.view(-1, 1), col < count, col < n_valid.view(-1, 1))
    return torch.where(sel, pos, torch.zeros_like(pos)), sel


@dataclass
class _Settings:
    """The scalar options of one robust fit (validated by :func:`_check_inputs`)."""

    threshold: float  # inlier threshold, in the residual's units
    scoring: str  # "msac" or "ransac"
    confidence: float
    max_iterations: int
    batch_size: int
    local_optimization: bool
    lo_iterations: int
    min_inliers: int

    @property
    def thr2(self) -> float:
        return float(self.threshold) ** 2


@dataclass
class _Batch:
    """P pairs with their valid points compacted to the front of a working width N (a multiple
    of the reduction chunk, masked zeros after them) and Hartley-normalised."""

    mask: torch.Tensor  # (P, N) bool: position < n_valid
    n_valid: torch.Tensor  # (P,) valid points per pair
    keep_pos: torch.Tensor  # (P, n_keep) caller positions of the first n_keep working columns
    width_in: int  # the caller's padded width
    c1: torch.Tensor  # (P, 2) Hartley centroids (px) and scales (P,) of both images
    s1: torch.Tensor
    c2: torch.Tensor
    s2: torch.Tensor
    fittable: torch.Tensor  # (P,) bool: enough valid points and non-degenerate normalisation
    full: _Context  # in the points' dtype, with monomials: LO and the final refit
    fast: _Context  # float32: hypothesis scoring


@dataclass
class _Search:
    """Per-pair state of the sampling loop, all (P,) except best_model (P, 3, 3)."""

    best_model: torch.Tensor  # normalised frame
    best_cost: torch.Tensor
    best_ninl: torch.Tensor
    found: torch.Tensor  # a non-degenerate hypothesis was evaluated
    iters: torch.Tensor  # minimal samples drawn
    rounds: torch.Tensor
    active: torch.Tensor
    accepted: torch.Tensor  # minimal samples drawn that passed the sample checks

    @staticmethod
    def start(batch: _Batch) -> "_Search":
        P, dt, dev = batch.mask.shape[0], batch.full.x1n.dtype, batch.mask.device
        long0 = lambda: torch.zeros(P, dtype=torch.long, device=dev)  # noqa: E731
        return _Search(torch.eye(3, dtype=dt, device=dev).expand(P, 3, 3).clone(),
                       torch.full((P,), math.inf, dtype=dt, device=dev), long0(),
                       torch.zeros(P, dtype=torch.bool, device=dev), long0(), long0(),
                       batch.fittable.clone(), long0())


def _check_inputs(x1: torch.Tensor, x2: torch.Tensor, mask: Optional[torch.Tensor],
                  scores: Optional[torch.Tensor], cfg: _Settings) -> torch.Tensor:
    """Validate the points, scores and options; returns the (P, N) bool mask."""
    check_points(x1, "x1")
    check_points(x2, "x2")
    check_same_shape([x1, x2], ["x1", "x2"])
    mask = check_mask(mask, x1)
    if scores is not None:
        if not isinstance(scores, torch.Tensor) or tuple(scores.shape) != tuple(mask.shape):
            raise ShapeError(f"scores must have shape {tuple(mask.shape)}")
    if cfg.scoring not in ("msac", "ransac"):
        raise InputError(f"scoring must be 'msac' or 'ransac', got {cfg.scoring!r}")
    check_number(cfg.threshold, "threshold", 0, low_open=True)  # "2" is refused, not compared
    check_number(cfg.confidence, "confidence", 0, 1, low_open=True, high_open=True)
    for name, low in (("batch_size", 1), ("max_iterations", 1), ("lo_iterations", 0),
                      ("min_inliers", 0)):
        check_integer(getattr(cfg, name), name, low)  # 3.7 samples is a typo, not a 3
    return mask


def _compact(X: torch.Tensor, mask: torch.Tensor, scores: Optional[torch.Tensor]):
    """Every pair's valid points moved to the front (PROSAC order, best score first, when
    ``scores`` is given; else index order), masked zeros after them. From here on a pair's data
    is its n_valid points, whatever the padding looked like (padding invariance).

    Args:
        X: (2, P, N, 2) the points of both images; mask: (P, N); scores: (P, N) or None.
    Returns:
        X (2, P, N', 2) and mask (P, N') with N' a multiple of the reduction chunk, n_valid
        (P,) and keep_pos (P, n_keep) (caller positions of the first n_keep columns).
    """
    P, N = mask.shape
    dev = X.device
    n_valid = mask.sum(-1)
    order = _valid_first_order(mask, scores, n_valid)  # (P, N)
    n_keep = min(N, max(int(n_valid.max()) if P else 0, 1))
    keep_pos = order[:, :n_keep]
    width = max(-(-n_keep // _CHUNK), 1) * _CHUNK  # no padding copies in the reductions
    mask = torch.arange(width, device=dev).view(1, width) < n_valid.view(P, 1)
    g2 = keep_pos.unsqueeze(-1).expand(2, -1, -1, 2)
    X = tnf.pad(X.gather(2, g2), (0, 0, 0, width - n_keep))
    return torch.where(mask.unsqueeze(-1), X, torch.zeros((), dtype=X.dtype, device=dev)), \
        mask, n_valid, keep_pos


def _prepare(problem: _Problem, x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor,
             scores: Optional[torch.Tensor], min_inliers: int) -> _Batch:
    """Compact (:func:`_compact`) and Hartley-normalise (paper eq. 9) P pairs (P, N, 2) px
    (both images at once)."""
    dt = torch.promote_types(x1.dtype, x2.dtype)  # float32 with float64: float64
    width_in = mask.shape[1]
    X = torch.stack([x1.to(dt), x2.to(dt)])  # (2, P, N, 2)
    mask = mask & finite(X).all(-1).all(0)
    X = torch.where(mask.unsqueeze(-1), X, torch.zeros_like(X))
    X, mask, n_valid, keep_pos = _compact(X, mask, scores)
    c, s, ok = _weighted_hartley(X, mask.to(dt))  # (2, P, 2), (2, P), (2, P)
    x1n, x2n = torch.where(mask.unsqueeze(-1), (X - c.unsqueeze(-2)) * s[..., None, None],
                           0 * X).unbind(0)
    (c1, c2), (s1, s2) = c.unbind(0), s.unbind(0)
    fittable = (n_valid >= max(problem.sample_size, min_inliers)) & ok.all(0)
    return _Batch(mask, n_valid, keep_pos, width_in, c1, s1, c2, s2, fittable,
                  _Context.build(x1n, x2n, mask, s1, s2, dt, refit=problem.kind),
                  _Context.build(x1n, x2n, mask, s1, s2, torch.float32))


def _lo_points(problem: _Problem, batch: _Batch, keys: torch.Tensor) -> _Context:
    """The points in-loop LO iterates on: 256 random valid points (with replacement) of a pair
    with more than 512, else all its points (its result is then evaluated on all points);
    decided per pair from its own valid count and key."""
    N = batch.mask.shape[1]
    if N <= 2 * _LO_POINTS:
        return batch.full
    lo = batch.full.points(*_subset(keys, -2, batch.n_valid, _LO_POINTS, 2 * _LO_POINTS, N,
                                    base=stream_base(keys, torch.full_like(keys, -2))))
    return lo.with_bases(problem.kind)


def _preverify_points(ctx: _Context, base: torch.Tensor, n_valid: torch.Tensor) -> _Context:
    """The points the hypotheses of one round are pre-evaluated on, for rows of pairs ``ctx``
    (their stream ``base`` (A,) of the round, valid counts (A,)): 32 drawn with replacement
    from a pair with more than 32 valid points, else all of them (always 32 columns, so a
    plain sum costs them). Drawn anew each round: a fixed draw that happens to hold few inliers
    would keep the right hypotheses out of the full evaluation in every round."""
    return ctx.points(*_subset(None, 0, n_valid, _PREVERIFY_POINTS, _PREVERIFY_POINTS,
                               int(ctx.x1n.shape[1]), fixed=True, base=base))


def _sample_hypotheses(problem: _Problem, ctx: _Context, keys: torch.Tensor,
                       rounds: torch.Tensor, n_valid: torch.Tensor, prosac: bool, K: int,
                       count: Optional[torch.Tensor] = None, base: Optional[torch.Tensor] = None
                       ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """K minimal samples per pair for A active pairs, drawn without replacement among the
    pair's valid points (PROSAC: among its top 25 %, 50 %, ... in the first rounds), and their
    models: (A, C, 3, 3) float32, validity (A, C) and the positions (A, C, m) of the sample
    each slot was solved from; C = K for H, <= 3K for F (the slots that no pair fills, complex
    7-point roots, are dropped). ``count`` (A,) <= K: only the
    first count[a] samples of row a are valid (its draws are the first count[a] of K: the
    stream is a prefix, so the row holds exactly the samples of a count[a]-sample round).
    ``base``: the precomputed ``stream_base(keys, rounds)`` (A,)."""
    m = problem.sample_size
    if prosac:
        frac = 0.25 * torch.pow(2.0, rounds.to(torch.float64))
        pool = torch.minimum(n_valid, torch.maximum(
            torch.ceil(n_valid.to(torch.float64) * frac).long(), torch.full_like(n_valid, 3 * m)))
    else:
        pool = n_valid
    pos = draw_without_replacement(uniform(keys, rounds, (K, m), base), pool)  # (A, K, m)
    A = pos.shape[0]
    ar = torch.arange(A, device=pos.device).view(A, 1, 1)
    solve = _solve_h if problem.kind == "H" else _solve_f
    models, hvalid = solve(ctx.x1n[ar, pos], ctx.x2n[ar, pos])
    models = models.to(torch.float32)
    per = hvalid.shape[1] // K  # slot c holds a model of sample c // per
    spos = pos if per == 1 else pos.repeat_interleave(per, dim=1)
    if count is not None:
        slot = torch.arange(hvalid.shape[1], device=pos.device).view(1, -1)
        hvalid = hvalid & (slot < per * count.view(-1, 1))
    if problem.kind == "F" and not _sync_free(pos.device):  # drop the slots no pair fills
        cnt = int(hvalid.sum(1).max())  # (on an accelerator all 3K slots stay: no sync)
        if 0 < cnt < hvalid.shape[1]:
            first = torch.sort((~hvalid).to(torch.uint8), dim=1, stable=True).indices[:, :cnt]
            models = models[torch.arange(A, device=pos.device).view(A, 1), first]
            hvalid = hvalid.gather(1, first)
            spos = spos[torch.arange(A, device=pos.device).view(A, 1), first]
    return models, hvalid, spos


def _preverify(problem: _Problem, models: torch.Tensor, hvalid: torch.Tensor, sub: _Context,
               keep: int, cfg: _Settings, keep_rows: Optional[torch.Tensor] = None,
               spos: Optional[torch.Tensor] = None, width: int = 0
               ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Each pair's ``keep`` best hypotheses (A, C, 3, 3) by their cost on its pre-verification
    points, in candidate order: (A, keep, 3, 3), (A, keep). ``keep_rows`` (A,) <= keep: row a
    keeps only its keep_rows[a] best (in candidate order, then invalid slots). ``spos`` (A, C,
    m): the positions of each hypothesis's own sample among ``width`` points
    (:func:`_preverify_cost`)."""
    pre = _preverify_cost(problem, models, sub, cfg, spos, width)
    pre = torch.where(hvalid, pre, torch.full_like(pre, math.inf))
    # stable: ties go to the earlier candidate, then back to candidate order, so the pick does
    # not depend on how many (invalid, trailing) slots the batch carries
    top = torch.sort(pre, dim=-1, stable=True).indices[:, :keep]  # (A, keep)
    A, C = models.shape[:2]
    if keep_rows is None:
        top = top.sort(-1).values
        return models[torch.arange(A, device=models.device).view(A, 1), top], \
            hvalid.gather(1, top)
    # the ranks past a row's keep go last (as C) and are invalid
    rank = torch.arange(top.shape[1], device=top.device).view(1, -1)
    top = torch.where(rank < keep_rows.view(-1, 1), top, torch.full_like(top, C)).sort(-1).values
    inside = top < C
    top = top.clamp_max(C - 1)
    return models[torch.arange(A, device=models.device).view(A, 1), top], \
        hvalid.gather(1, top) & inside


def _preverify_cost(problem: _Problem, models: torch.Tensor, sub: _Context, cfg: _Settings,
                    spos: Optional[torch.Tensor], width: int = 0) -> torch.Tensor:
    """Cost (A, C) of hypotheses (A, C, 3, 3) on the pre-verification points ``sub``, with
    each hypothesis's own sample points (``spos`` (A, C, m) positions among ``width`` points,
    matched against ``sub.source``) left out: a minimal model fits its own points exactly, so
    scoring them would favour the hypotheses whose sample happens to lie among the few
    pre-verification points over those that fit the scene (which then never reach the full
    evaluation). Own points cost ~0 (their residual is the solver's rounding), so the cost of
    all points is scaled by ``n / (n - own)`` (``own``: how many of the n valid
    pre-verification points are sample points, counted by one gather), so the costs of all
    hypotheses compare."""
    cost = _cost(problem.residual_sq(models, sub), sub, cfg.thr2, cfg.scoring,
                 fixed_width=True)[0]
    if spos is None or sub.source is None or width <= 0:
        return cost
    A, C, m = spos.shape
    counts = torch.zeros(A, width, dtype=torch.long, device=spos.device).scatter_add_(
        1, sub.source, sub.mask.long())  # how often each point is a pre-verification point
    own = counts.gather(1, spos.reshape(A, C * m)).view(A, C, m).sum(-1)  # (A, C)
    n = sub.mask.sum(-1, keepdim=True)  # (A, 1)
    return cost * n.to(cost.dtype) / (n - own).clamp_min(1).to(cost.dtype)


def _round_winners(problem: _Problem, models: torch.Tensor, hvalid: torch.Tensor,
                   ctx: _Context, cfg: _Settings, dtype: torch.dtype):
    """Score hypotheses (A, C, 3, 3) on all points: each pair's cheapest valid one as
    (cost (A,), model (A, 3, 3) in ``dtype``, inlier count (A,)); cost inf when none is valid."""
    cost, ninl = _cost(problem.residual_sq(models, ctx), ctx, cfg.thr2, cfg.scoring)
    cost = torch.where(hvalid, cost.to(dtype), torch.full_like(cost, math.inf, dtype=dtype))
    rc, rj = cost.min(-1)
    A = models.shape[0]
    r_model = models[torch.arange(A, device=models.device), rj].to(dtype)
    return rc, r_model, ninl.gather(1, rj.view(A, 1)).squeeze(1)


def _round_size(r: int, cfg: _Settings) -> Tuple[int, int]:
    """(minimal samples per pair, hypotheses kept after pre-verification) of round ``r``."""
    grow = min(2 ** max(r - _STEADY_ROUNDS + 1, 0), _ROUND_GROWTH)
    return int(cfg.batch_size) * grow, _PREVERIFY_KEEP * grow


def _optimize_winners(problem: _Problem, batch: _Batch, lo_ctx: _Context, base: torch.Tensor,
                      rows: Optional[torch.Tensor], r_model: torch.Tensor, cfg: _Settings
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """LO-RANSAC on every round winner ``r_model`` (A, 3, 3) (A rows of pairs ``rows``, None:
    all P pairs in order; ``base`` (A,): their LO streams' ``stream_base(key, round + 2^20)``):
    (model (A, 3, 3), cost (A,), inlier count (A,)) on all points. Whether a row keeps it
    (:func:`_settle`) depends on the pair's best cost before the row's round, so it is decided
    later; a row's result depends only on its pair, key and round."""
    clo = lo_ctx if rows is None else lo_ctx.index(rows)
    u_in = uniform_rows(None, None, _INNER_SAMPLES, clo.x1n.shape[1], base)
    lm, _, _, _ = _local_optimization(problem, clo, r_model, cfg.thr2, cfg.scoring,
                                      cfg.lo_iterations, u=u_in)
    cfull = batch.full if rows is None else batch.full.index(rows)
    lc, ln = _cost(problem.residual_sq(lm.unsqueeze(1), cfull), cfull, cfg.thr2,
                   cfg.scoring)
    return lm, lc.squeeze(1), ln.squeeze(1)


def _optimize_promising(problem: _Problem, batch: _Batch, lo_ctx: _Context, base: torch.Tensor,
                        rows: Optional[torch.Tensor],
                        winners: Tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                        best: torch.Tensor, cfg: _Settings
                        ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`_optimize_winners` of one round's rows on the CPU: only the promising winners
    (cost within ``_LO_MARGIN`` of the pair's best ``best`` (A,): the others' optimised model
    is discarded by :func:`_settle`) are optimised, found with one host sync; the rest get
    cost +inf. The same results as optimising every winner, at a fraction of the cost."""
    rc, r_model, r_ninl = winners
    sel = (rc < _LO_MARGIN * best).nonzero().squeeze(1)
    lm, lc = r_model.clone(), torch.full_like(rc, math.inf)
    ln = torch.zeros_like(r_ninl)
    if sel.numel():
        pairs = sel if rows is None else rows[sel]
        got = _optimize_winners(problem, batch, lo_ctx, base[sel], pairs, r_model[sel], cfg)
        lm[sel], lc[sel], ln[sel] = got[0].to(lm.dtype), got[1].to(lc.dtype), got[2]
    return lm, lc, ln


def _settle(st: _Search, idx: torch.Tensor, n_valid: torch.Tensor, drawn: int, m: int,
            cfg: _Settings, winners: Tuple[torch.Tensor, torch.Tensor, torch.Tensor],
            optimized: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]],
            accepted: torch.Tensor) -> None:
    """One round's outcome for pairs ``idx`` (A,), of which those still active take part:
    the optimised winner replaces the raw one when the winner was promising (cost within
    1.25x of the pair's best: a raw minimal model rarely beats an optimised one, and this keeps
    a pair from settling on a wrong local optimum) and the optimised one costs less; the best
    model is kept, then the stopping rule (:func:`_stopping_rule`; ``accepted`` (A,): the
    round's samples that passed the sample checks). Elementwise, no sync."""
    rc, r_model, r_ninl = winners
    act = st.active[idx]
    best = st.best_cost[idx]
    if optimized is not None:
        lm, lc, ln = optimized
        keep = (lc < rc) & (rc < _LO_MARGIN * best)
        r_model = torch.where(keep[:, None, None], lm, r_model)
        rc, r_ninl = torch.where(keep, lc, rc), torch.where(keep, ln, r_ninl)
    improved = act & (rc < best)
    st.best_model[idx] = torch.where(improved[:, None, None], r_model, st.best_model[idx])
    st.best_cost[idx] = torch.where(improved, rc, best)
    st.best_ninl[idx] = torch.where(improved, r_ninl, st.best_ninl[idx])
    st.found[idx] = st.found[idx] | improved
    _stopping_rule(st, idx, act, n_valid, drawn, accepted, m, cfg)


def _stopping_rule(st: _Search, idx: torch.Tensor, act: torch.Tensor, n_valid: torch.Tensor,
                   drawn: int, accepted: torch.Tensor, m: int, cfg: _Settings) -> None:
    """Count the round's ``drawn`` samples (``accepted`` (A,) of them passed the sample checks)
    for the pairs ``idx`` where ``act`` (A,) and deactivate those that reached their adaptive
    bound (:func:`_required_iterations`, in samples drawn: a rejected sample is never all
    inliers, so the bound's odds are those of the drawn samples), ``max_iterations`` accepted
    samples (as OpenCV counts them: a pair whose samples are mostly rejected, i.e. mostly
    outliers, draws more), ``_DRAW_LIMIT`` times that many drawn, or ``_GIVE_UP_SAMPLES``
    drawn without a non-degenerate one."""
    iters = st.iters[idx] + drawn * act
    st.iters[idx] = iters
    acc = st.accepted[idx] + accepted * act
    st.accepted[idx] = acc
    st.rounds[idx] = st.rounds[idx] + act
    hopeless = ~st.found[idx] & (iters >= _GIVE_UP_SAMPLES)
    st.active[idx] = act & (iters < _sample_cap(st, idx, n_valid, m, cfg)) & ~hopeless \
        & (acc < cfg.max_iterations)


def _sample_cap(st: _Search, idx: torch.Tensor, n_valid: torch.Tensor, m: int,
                cfg: _Settings) -> torch.Tensor:
    """(A,) samples drawn after which the pairs ``idx`` stop with their current best model
    (unless ``max_iterations`` accepted samples stop them first): the adaptive bound
    (:func:`_required_iterations`, ``n_valid`` (A,)) capped by ``_DRAW_LIMIT`` x
    ``max_iterations``."""
    limit = _DRAW_LIMIT * cfg.max_iterations
    need = _required_iterations(st.best_ninl[idx], n_valid, m, cfg.confidence, limit)
    return torch.minimum(need, torch.full_like(need, limit))


def _lookahead(st: _Search, idx: torch.Tensor, n_valid: torch.Tensor, r: int, m: int,
               cfg: _Settings) -> int:
    """How many rounds from ``r`` on the active pairs ``idx`` would still run if their best
    models did not change (at least 1, at most ``_LOOKAHEAD``; one host sync): the rounds
    that :func:`_run_round` computes at once."""
    cap = _sample_cap(st, idx, n_valid[idx], m, cfg)
    cap = torch.where(st.found[idx], cap, cap.clamp_max(_GIVE_UP_SAMPLES))
    drawn, total = [], 0
    for j in range(_LOOKAHEAD - 1):  # samples drawn after rounds r .. r + j
        total += _round_size(r + j, cfg)[0]
        drawn.append(total)
    after = st.iters[idx].view(-1, 1) + to_device(drawn, idx.device).view(1, -1)
    return 1 + int((after < cap.view(-1, 1)).sum(-1).max())


def _run_round(problem: _Problem, batch: _Batch, st: _Search, keys: torch.Tensor,
               lo_ctx: _Context, r: int, L: int, prosac: bool,
               cfg: _Settings, idx: torch.Tensor) -> None:
    """Rounds ``r .. r + L - 1`` for the active pairs ``idx`` (A,) (the caller's one host sync,
    its stop test): sample, pre-verify, evaluate and optimise the winners of all L rounds at
    once (L A rows, row (j, a) = round r + j of pair idx[a], padded to the largest round's
    size), then settle the rounds in order (:func:`_settle`): a pair that stops in round
    r + j ignores its later rows. Every active pair is in round r (pairs only ever drop out),
    so a round's size depends on its number alone: the same for a pair alone or in a batch, and
    a row's results depend only on its pair, key and round (padding invariance)."""
    sizes = [_round_size(r + j, cfg) for j in range(L)]
    K, keep_top = max(k for k, _ in sizes), max(t for _, t in sizes)
    A, dev = idx.numel(), idx.device
    whole = L == 1 and A == batch.mask.shape[0]  # skip the gathers while all pairs run one round
    rows = None if whole else idx.repeat(L)
    rnd = (st.rounds[idx].view(1, A) + torch.arange(L, device=dev).view(L, 1)).reshape(-1)
    pick = (lambda c: c) if whole else (lambda c: c.index(rows))  # noqa: E731
    ctx = pick(batch.fast)
    nv = batch.n_valid if whole else batch.n_valid[rows]
    count = keep_rows = None
    if L > 1:
        count = to_device([k for k, _ in sizes], dev).view(L, 1).expand(L, A)
        keep_rows = to_device([t for _, t in sizes], dev).view(L, 1).expand(L, A)
        count, keep_rows = count.reshape(-1), keep_rows.reshape(-1)
    krows = keys if whole else keys[rows]
    # the rows' sampling, pre-verification and LO streams in one go
    base, pre_base, lo_base = stream_base(krows, torch.stack(
        [rnd, rnd + (2 << 20), rnd + (1 << 20)])).unbind(0)
    models, hvalid, spos = _sample_hypotheses(problem, ctx, krows, rnd, nv, prosac, K, count,
                                              base)
    # H: one slot per sample; F's 7-point roots are no sample check (its samples all count)
    accepted = hvalid.sum(1) if problem.kind == "H" else \
        (torch.full_like(nv, K) if count is None else count)
    if models.shape[1] > keep_top:
        models, hvalid = _preverify(problem, models, hvalid,
                                    _preverify_points(ctx, pre_base, nv), keep_top, cfg,
                                    keep_rows, spos, int(ctx.x1n.shape[1]))
    winners = _round_winners(problem, models, hvalid, ctx, cfg, batch.full.x1n.dtype)
    optimized = None
    if cfg.local_optimization and (L > 1 or _sync_free(dev)):
        optimized = _optimize_winners(problem, batch, lo_ctx, lo_base, rows, winners[1],
                                      cfg)
    elif cfg.local_optimization:
        optimized = _optimize_promising(problem, batch, lo_ctx, lo_base, rows, winners,
                                        st.best_cost[idx], cfg)
    for j, (k, _) in enumerate(sizes):
        part = slice(j * A, (j + 1) * A)
        _settle(st, idx, nv[part], k, problem.sample_size, cfg, [w[part] for w in winners],
                None if optimized is None else [o[part] for o in optimized], accepted[part])


def _final_refit(problem: _Problem, batch: _Batch, st: _Search, cfg: _Settings) -> torch.Tensor:
    """Least-squares refit of every found pair's best model on its inliers, kept if it lowers
    the cost (updates ``st``); returns the squared residuals (P, N) of the final models."""
    if batch.mask.shape[0] == 0:
        return torch.zeros(batch.mask.shape, dtype=batch.full.x1n.dtype,
                           device=batch.mask.device)
    # every pair is refitted (no sync; a pair's result does not depend on the others), the
    # pairs without a model keep their state and get zero residuals
    fm, fc, fn, fr = _local_optimization(problem, batch.full, st.best_model, cfg.thr2,
                                         cfg.scoring, 1, robust=False)
    found = st.found
    st.best_model = torch.where(found[:, None, None], fm, st.best_model)
    st.best_cost = torch.where(found, fc, st.best_cost)
    st.best_ninl = torch.where(found, fn, st.best_ninl)
    return torch.where(found[:, None], fr, torch.zeros_like(fr))


def _denormalize(kind: str, batch: _Batch, model: torch.Tensor
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Normalised-frame models (P, 3, 3) in pixels (H = T2^-1 Hn T1, H[2, 2] = 1;
    F = T2^T Fn T1, unit norm) and the fallback for invalid pairs (identity / zeros)."""
    T1 = _similarity_matrix(batch.c1, batch.s1)
    P, dt, dev = model.shape[0], model.dtype, model.device
    if kind == "H":
        return (_normalize_h_scale(_similarity_inverse(batch.c2, batch.s2) @ model @ T1),
                torch.eye(3, dtype=dt, device=dev).expand(P, 3, 3))
    T2 = _similarity_matrix(batch.c2, batch.s2)
    return (_unit_fro(T2.transpose(-1, -2) @ model @ T1),
            torch.zeros(P, 3, 3, dtype=dt, device=dev))


def _assemble_fit(problem: _Problem, batch: _Batch, st: _Search, rsq: torch.Tensor,
                  cfg: _Settings) -> Fit:
    """The Fit of the final models: inliers, residuals, validity (enough inliers, not
    collinear, finite), cost, all back in the caller's layout (padding: no inlier, 0)."""
    mask, thr2, msac = batch.mask, cfg.thr2, cfg.scoring == "msac"
    P, dt, dev = mask.shape[0], rsq.dtype, mask.device
    resid = torch.sqrt(rsq.clamp_min(0))
    inliers = (rsq <= thr2) & mask & st.found.unsqueeze(-1)
    num_inliers = inliers.sum(-1)
    model, fallback = _denormalize(problem.kind, batch, st.best_model)
    spread = torch.minimum(*_spread(torch.stack([batch.full.x1n, batch.full.x2n]),
                                    inliers).unbind(0))
    valid = st.found & (num_inliers >= max(problem.sample_size, cfg.min_inliers)) \
        & (spread > _MIN_SPREAD) & finite(model).flatten(-2).all(-1) \
        & finite(resid).all(-1)
    model = torch.where(valid[:, None, None], model, fallback)
    inliers = inliers & valid.unsqueeze(-1)
    resid = torch.where(mask & valid.unsqueeze(-1), resid, torch.zeros_like(resid))
    cost = padded_sum(rsq.clamp_max(thr2) * mask) if msac \
        else (batch.n_valid - num_inliers).to(dt)
    cost = torch.where(valid, cost, batch.n_valid.to(dt) * (thr2 if msac else 1.0))
    n_keep, pos = batch.keep_pos.shape[1], batch.keep_pos
    inliers = torch.zeros((P, batch.width_in), dtype=torch.bool, device=dev).scatter_(
        1, pos, inliers[:, :n_keep])
    resid = torch.zeros((P, batch.width_in), dtype=dt, device=dev).scatter_(
        1, pos, resid[:, :n_keep])
    return Fit(kind=problem.kind, model=model, inliers=inliers, residuals=resid, valid=valid,
               num_inliers=num_inliers * valid, iterations=st.iters, cost=cost)


def _robust_fit(problem: _Problem, x1: torch.Tensor, x2: torch.Tensor,
                mask: Optional[torch.Tensor], scores: Optional[torch.Tensor],
                seed: Union[int, torch.Tensor], cfg: _Settings) -> Fit:
    """The batched robust estimator of the module docstring, for H or F (``problem``)."""
    mask = _check_inputs(x1, x2, mask, scores, cfg)
    with torch.no_grad():
        batch = _prepare(problem, x1, x2, mask, scores, cfg.min_inliers)
        st = _Search.start(batch)
        keys = pair_keys(seed, mask.shape[0], x1.device)
        lo_ctx = _lo_points(problem, batch, keys)
        r, idx = 0, st.active.nonzero().squeeze(1)
        ahead = _sync_free(x1.device)  # lookahead rows only where a host sync costs
        while idx.numel() > 0:  # the stop test: one host sync per round (two from round 1 on)
            L = _lookahead(st, idx, batch.n_valid, r, problem.sample_size, cfg) \
                if ahead and r > 0 else 1
            _run_round(problem, batch, st, keys, lo_ctx, r, L, scores is not None, cfg, idx)
            r, idx = r + L, st.active.nonzero().squeeze(1)
        rsq = _final_refit(problem, batch, st, cfg)
        return _assemble_fit(problem, batch, st, rsq, cfg)


@autocast_off
def ransac_homography(x1: torch.Tensor, x2: torch.Tensor, mask: Optional[torch.Tensor] = None,
                      scores: Optional[torch.Tensor] = None, *, threshold: float = 2.0,
                      confidence: float = 0.999, max_iterations: int = 2000,
                      scoring: str = "msac", local_optimization: bool = True,
                      seed: Union[int, torch.Tensor] = 0, residual: str = "symmetric",
                      min_inliers: int = 4, batch_size: int = 32, lo_iterations: int = 6) -> Fit:
    r"""Robust homography per pair, batched over P pairs (x2 ~ H x1, pixels).

    Args:
        x1, x2: (P, N, 2) matched pixel points (frame i, frame j); padded entries finite.
        mask: (P, N) bool validity (all True when None).
        scores: (P, N) match quality, higher is better -> PROSAC-style ordering.
        threshold: inlier threshold in pixels on the chosen residual (paper tau_H = 2 px).
        confidence: adaptive-stopping confidence.
        max_iterations: cap of the adaptive stop on minimal samples per pair that pass the
            sample checks (collinearity, orientation; as OpenCV counts ``maxIters``: a pair of
            mostly outliers draws more), at most 10x as many drawn; samples are drawn in whole
            rounds (``batch_size`` and more), so the last round may overshoot it
            (``Fit.iterations`` counts what was drawn: e.g. 32 for a cap of 1).
        scoring: "msac" (truncated quadratic cost) or "ransac" (outlier count).
        local_optimization: iterated weighted DLT refits of round winners within 1.25x of a
            pair's best cost.
        seed: RNG seed (an integer, taken modulo 2^32); pair p uses the stream of
            ``seed + p``. A (P,) integer tensor gives each pair its own seed instead (results
            then do not depend on batch position).
        residual: "symmetric" (paper eq. 7, mean of forward and backward distances) or
            "forward" (OpenCV findHomography's reprojection error, for parity).
        min_inliers: pairs with fewer final inliers are invalid (at least 4).
        batch_size: minimal samples per pair per round (K).
        lo_iterations: IRLS refits per local optimisation (in-loop on <= 256 random points).

    Returns:
        Fit with kind "H": model (P, 3, 3) (H[2, 2] = 1; identity where invalid), inliers (P, N),
        residuals (P, N) px of ``residual`` (0 where padded / invalid), valid (P,),
        num_inliers (P,), iterations (P,) samples drawn, cost (P,) final MSAC / RANSAC cost
        (lower is better).

    Not differentiable: the fit runs under ``torch.no_grad()``, so the Fit carries no gradient
    even for points that require grad; the residual functions of ``fit.model`` do (e.g.
    ``symmetric_transfer_error(fit.model, x1, x2)``: gradients w.r.t. the points).

    Example: 100 points mapped exactly by H, the first 20 replaced by random outliers.

        >>> import torch
        >>> from geocon_torch.geometry import ransac_homography
        >>> g = torch.Generator().manual_seed(0)
        >>> x1 = torch.rand(1, 100, 2, generator=g, dtype=torch.float64) * 640
        >>> H = torch.tensor([[1.02, 0.01, 5.0], [-0.01, 0.98, -3.0], [1e-5, 0.0, 1.0]],
        ...                  dtype=torch.float64)
        >>> xh = torch.cat([x1, torch.ones_like(x1[..., :1])], -1) @ H.T
        >>> x2 = xh[..., :2] / xh[..., 2:]
        >>> x2[:, :20] = torch.rand(1, 20, 2, generator=g, dtype=torch.float64) * 640
        >>> fit = ransac_homography(x1, x2, threshold=2.0, seed=0)
        >>> fit.valid.item(), fit.num_inliers.item(), fit.inliers[0, :20].any().item()
        (True, 80, False)
        >>> torch.allclose(fit.model[0], H, atol=1e-6)
        True
    """
    if residual not in H_RESIDUALS:
        raise InputError(f"residual must be one of {H_RESIDUALS}, got {residual!r}")
    rfn = _h_residual_sq(residual)
    prob = _Problem("H", 4, rfn, lambda M, ctx: (rfn(M, ctx), None))
    cfg = _Settings(threshold, scoring, confidence, max_iterations, batch_size,
                    local_optimization, lo_iterations, min_inliers)
    return _robust_fit(prob, x1, x2, mask, scores, seed, cfg)


@autocast_off
def ransac_fundamental(x1: torch.Tensor, x2: torch.Tensor, mask: Optional[torch.Tensor] = None,
                       scores: Optional[torch.Tensor] = None, *, threshold: float = 0.1,
                       residual: str = "sampson_normalized", confidence: float = 0.999,
                       max_iterations: int = 2000, scoring: str = "msac",
                       local_optimization: bool = True, seed: Union[int, torch.Tensor] = 0,
                       min_inliers: int = 8, batch_size: int = 32, lo_iterations: int = 6) -> Fit:
    r"""Robust fundamental matrix per pair, batched over P pairs (x2^T F x1 = 0, pixels).

    Minimal samples use the 7-point solver (up to 3 models each); LO and the final refit use
    the weighted 8-point solver with Sampson re-weighting.

    Args:
        x1, x2: (P, N, 2) matched pixel points; mask (P, N) bool; scores (P, N) higher = better.
        threshold: inlier threshold in the units of ``residual``: unitless for
            "sampson_normalized" (paper tau_F = 0.1, Sampson in each pair's Hartley frame),
            pixels for "sampson" (eq. 11; what OpenCV's USAC_MAGSAC mask uses) and for
            "epipolar_max" (OpenCV's classic RANSAC error: the larger point-to-line distance).
        min_inliers: pairs with fewer final inliers are invalid (at least 8).
        confidence, max_iterations, scoring, local_optimization, seed, batch_size,
            lo_iterations: as in :func:`ransac_homography`.

    Returns:
        Fit with kind "F": model (P, 3, 3) rank 2, unit Frobenius norm (zeros where invalid);
        residuals in the units of ``residual``; other fields as :func:`ransac_homography`.

    Not differentiable (``torch.no_grad()``, as :func:`ransac_homography`): the Fit carries no
    gradient; ``sampson_distance(fit.model, x1, x2)`` does, w.r.t. the points.

    Example: 100 points of a 3-D scene seen by two cameras (rotation + translation), the first
    20 matches replaced by random outliers; the inliers lie on their epipolar lines.

        >>> import torch
        >>> from geocon_torch.geometry import ransac_fundamental, sampson_distance
        >>> f64 = dict(dtype=torch.float64)
        >>> g = torch.Generator().manual_seed(0)
        >>> X = torch.rand(1, 100, 3, generator=g, **f64) * 4 - torch.tensor([2, 2, -4.0], **f64)
        >>> K = torch.tensor([[500.0, 0, 320], [0, 500.0, 240], [0, 0, 1]], **f64)
        >>> c, s = torch.cos(torch.tensor(0.1, **f64)), torch.sin(torch.tensor(0.1, **f64))
        >>> R = torch.tensor([[c, 0, s], [0, 1, 0], [-s, 0, c]], **f64)
        >>> def project(P):
        ...     p = P @ K.T
        ...     return p[..., :2] / p[..., 2:]
        >>> x1, x2 = project(X), project(X @ R.T + torch.tensor([0.5, 0.1, 0.0], **f64))
        >>> x2[:, :20] = torch.rand(1, 20, 2, generator=g, **f64) * 640
        >>> fit = ransac_fundamental(x1, x2, threshold=1.0, residual="sampson", seed=0)
        >>> fit.valid.item(), fit.num_inliers.item(), fit.inliers[0, :20].any().item()
        (True, 80, False)
        >>> bool(fit.valid[0] & (sampson_distance(fit.model, x1, x2)[0, 20:].max() < 1e-6))
        True

    Check ``fit.valid`` before reading the model: an invalid row's F is all zeros, whose
    residuals are huge (``finfo.max`` squared), and :func:`fundamental_residuals` of the Fit
    is NaN there.
    """
    if residual not in F_RESIDUALS:
        raise InputError(f"residual must be one of {F_RESIDUALS}, got {residual!r}")
    prob = _Problem("F", 7, _f_residual_sq(residual),
                    _f_residual_sq(residual, with_weights=True))
    cfg = _Settings(threshold, scoring, confidence, max_iterations, batch_size,
                    local_optimization, lo_iterations,
                    max(check_integer(min_inliers, "min_inliers", 0), 8))  # 2.5 is no 8
    return _robust_fit(prob, x1, x2, mask, scores, seed, cfg)
