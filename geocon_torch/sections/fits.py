"""The background block's robust fits: one batched RANSAC call per model (H and F) over every
row (frame pairs x scales), each row drawing the random stream of its own position.

Per-row seeds make a fit padding invariant: fitting a subset of rows, with their positions as
``rows``, gives exactly those rows of the full fit. :func:`fit_reusing` relies on it to keep
the preliminary fits of the motion-mask step wherever the background mask left a row unchanged.
"""
from __future__ import annotations

from dataclasses import dataclass
from itertools import accumulate
from typing import List, Optional, Sequence, Tuple

import torch

from .._tensor_utils import to_device
from ..config import GeoConConfig
from ..geometry import ransac_fundamental, ransac_homography
from ..types import _FIT_TENSORS, Fit, concat_fits, pad_points


#: rows per batched RANSAC call (bounds the fits' memory on long clips; results identical)
FIT_CHUNK_ROWS = 512


def fit_both(x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor,
             config: GeoConConfig, rows: Optional[torch.Tensor] = None) -> Tuple[Fit, Fit]:
    """H (symmetric transfer px <= ``tau_h``) and F (normalised Sampson <= ``tau_f``) of every
    row, one batched RANSAC call per model.

    Args:
        x1, x2: (R, N, 2) px; mask: (R, N) bool; scores: (R, N) match quality (PROSAC order).
        rows: (R,) long positions of the rows in the full (scales x pairs) batch; each row then
            draws the random stream ``ransac.seed + row``. None: the rows are the full batch.
    Returns:
        (fit_h, fit_f), each of R rows.
    """
    r = int(x1.shape[0])
    if r > FIT_CHUNK_ROWS:  # chunks of rows bound RANSAC's memory; per-row seeds: same fits
        pos = torch.arange(r, device=x1.device) if rows is None else rows.to(x1.device).long()
        parts = [(torch.arange(a, min(a + FIT_CHUNK_ROWS, r), device=x1.device),
                  fit_both(x1[a:a + FIT_CHUNK_ROWS], x2[a:a + FIT_CHUNK_ROWS],
                           mask[a:a + FIT_CHUNK_ROWS], scores[a:a + FIT_CHUNK_ROWS], config,
                           rows=pos[a:a + FIT_CHUNK_ROWS])) for a in range(0, r, FIT_CHUNK_ROWS)]
        return (Fit.assemble(r, [(idx, f[0]) for idx, f in parts]),
                Fit.assemble(r, [(idx, f[1]) for idx, f in parts]))
    rc, bc = config.ransac, config.background
    seed = rc.seed if rows is None else rows.to(x1.device).long() + int(rc.seed)
    common = dict(confidence=rc.confidence, max_iterations=rc.max_iterations,
                  scoring=rc.scoring, local_optimization=rc.local_optimization, seed=seed,
                  lo_iterations=rc.lo_iterations, batch_size=rc.batch_hypotheses)
    fit_h = ransac_homography(x1, x2, mask, scores, threshold=bc.tau_h, residual="symmetric",
                              **common)
    fit_f = ransac_fundamental(x1, x2, mask, scores, threshold=bc.tau_f,
                               residual="sampson_normalized", **common)
    return fit_h, fit_f


def fit_reusing(x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor,
                config: GeoConConfig, pre: Optional[Tuple[Fit, Fit]], pre_rows: torch.Tensor,
                pre_mask: torch.Tensor, row_ids: Optional[torch.Tensor] = None
                ) -> Tuple[Fit, Fit]:
    """:func:`fit_both` of every row, reusing the preliminary fits where nothing changed.

    Args:
        x1, x2, mask, scores: all R rows, as :func:`fit_both` (``mask``: the final one).
        pre: (H, F) fits of the rows ``pre_rows`` (fitted with their row seeds on the
            correspondences ``pre_mask`` (R', N)), or None (every row is fitted).
        row_ids: (R,) long seed position of every row (rows of several clips: each row's
            position in its own clip); None: ``arange(R)``.
    Returns:
        (fit_h, fit_f) of R rows, equal to ``fit_both(x1, x2, mask, scores, config)``: a row
        whose ``pre_mask`` equals its ``mask`` keeps its preliminary fit (same input and seed
        give the same fit); the others are fitted in one batched call per model.
    """
    if pre is None:
        return fit_both(x1, x2, mask, scores, config, rows=row_ids)
    r = int(x1.shape[0])
    same = (pre_mask == mask[pre_rows]).all(-1).nonzero()[:, 0]  # (one host sync each: ...
    kept = pre_rows[same]
    todo = torch.ones(r, dtype=torch.bool, device=x1.device)
    todo[kept] = False
    todo = todo.nonzero()[:, 0]  # ... the kept and the refitted rows)
    old = (pre[0].rows(same), pre[1].rows(same))
    if todo.numel() == 0:
        return Fit.assemble(r, [(kept, old[0])]), Fit.assemble(r, [(kept, old[1])])
    new = fit_both(x1[todo], x2[todo], mask[todo], scores[todo], config,
                   rows=todo if row_ids is None else row_ids.to(todo.device)[todo])
    return (Fit.assemble(r, [(todo, new[0]), (kept, old[0])]),
            Fit.assemble(r, [(todo, new[1]), (kept, old[1])]))


@dataclass
class ClipRows:
    """The rows one clip contributes to a batched fit of several clips.

    Attributes:
        x1, x2: (R, N, 2) px; mask: (R, N) bool; scores: (R, N) (N: this clip's own width).
        rows: (R,) long positions of the rows in the clip's full row layout (their seeds).
        pre: preliminary (H, F) fits of the clip's rows ``pre_rows`` on ``pre_mask``
            (R', N), or None (see :func:`fit_reusing`).
    """

    x1: torch.Tensor
    x2: torch.Tensor
    mask: torch.Tensor
    scores: torch.Tensor
    rows: Optional[torch.Tensor] = None
    pre: Optional[Tuple[Fit, Fit]] = None
    pre_rows: Optional[torch.Tensor] = None
    pre_mask: Optional[torch.Tensor] = None


def _trim_fit(fit: Fit, rows: slice, n: int) -> Fit:
    """Rows ``rows`` of ``fit`` with inliers / residuals cut to the first ``n`` points."""
    out = Fit(fit.kind, *(getattr(fit, k)[rows] for k in _FIELDS))
    out.inliers, out.residuals = out.inliers[:, :n], out.residuals[:, :n]
    return out


_FIELDS = _FIT_TENSORS  # the Fit's tensors, in order


def _split_fit(fit: Fit, sizes: Sequence[int], widths: Sequence[int]) -> List[Fit]:
    """``fit``'s rows cut into blocks of ``sizes`` rows, inliers / residuals cut to each
    block's width (one split per tensor; a block as wide as ``fit`` keeps its columns)."""
    parts = [getattr(fit, k).split(list(sizes)) for k in _FIELDS]
    out = []
    for b, n in enumerate(widths):
        f = Fit(fit.kind, *(p[b] for p in parts))
        if int(n) != int(fit.inliers.shape[1]):
            f.inliers, f.residuals = f.inliers[:, :n], f.residuals[:, :n]
        out.append(f)
    return out


@dataclass
class MergedFits:
    """The fits of the rows of several clips from one batched call per model.

    Attributes:
        fit_h, fit_f: fits of all rows, clip after clip (point axis zero-padded to ``width``).
        starts, sizes, widths: each clip's first row, row count and own point width.
        points: the (x1, x2, mask) rows that were fitted, as fitted ((R, width, 2), (R, width,
            2), (R, width) bool: every clip's rows zero-padded to ``width``), so the callers'
            residuals read them without padding them again.
    """

    fit_h: Fit
    fit_f: Fit
    starts: List[int]
    sizes: List[int]
    widths: List[int]
    points: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None

    @property
    def width(self) -> int:
        return int(self.fit_h.inliers.shape[1])

    def clips(self) -> List[Tuple[Fit, Fit]]:
        """:meth:`clip` of every clip, the rows of all clips cut by one split per tensor."""
        if len(self.sizes) == 1:
            return [self.clip(0)]
        return list(zip(*(_split_fit(f, self.sizes, self.widths) for f in (self.fit_h,
                                                                           self.fit_f))))

    def clip(self, k: int) -> Tuple[Fit, Fit]:
        """Clip ``k``'s (fit_h, fit_f): its rows, cut to its own width."""
        if len(self.sizes) == 1 and self.widths[0] == self.width:
            return self.fit_h, self.fit_f
        rows, n = slice(self.starts[k], self.starts[k] + self.sizes[k]), self.widths[k]
        return _trim_fit(self.fit_h, rows, n), _trim_fit(self.fit_f, rows, n)


def fit_merged(parts: Sequence[ClipRows], config: GeoConConfig) -> MergedFits:
    """:func:`fit_reusing` (:func:`fit_both` where no part has preliminary fits) of the rows of
    several clips in one batched RANSAC call per model: the rows are stacked (point axis
    zero-padded to the widest clip, :func:`pad_points`) and each draws the random stream of its
    position in its own clip (``part.rows``, default ``arange(R)``). RANSAC is padding
    invariant, so every clip's fits equal those of the clip fitted alone, bit for bit on the
    CPU. ``parts`` must not be empty."""
    dev = parts[0].x1.device
    n = max(int(p.x1.shape[1]) for p in parts)
    sizes = [int(p.x1.shape[0]) for p in parts]
    starts = list(accumulate(sizes[:-1], initial=0))
    widths = [int(p.x1.shape[1]) for p in parts]
    ids = _row_ids(parts, sizes, dev)
    if len(parts) == 1:  # no copies: one clip's rows as they are (bounded memory)
        p = parts[0]
        return MergedFits(*fit_reusing(p.x1, p.x2, p.mask, p.scores, config, p.pre, p.pre_rows,
                                       p.pre_mask, row_ids=ids), starts, sizes, widths,
                          (p.x1, p.x2, p.mask))
    cat = lambda name: pad_points([getattr(p, name) for p in parts], n)  # noqa: E731
    with_pre = [(k, p) for k, p in enumerate(parts) if p.pre is not None]
    pre, pre_rows, pre_mask = None, torch.zeros(0, dtype=torch.long, device=dev), None
    if with_pre:  # the preliminary fits one after the other, their rows offset by the clip's
        pre = tuple(concat_fits([p.pre[m] for _, p in with_pre], n) for m in range(2))
        offset = to_device([starts[k] for k, p in with_pre for _ in range(
            int(p.pre_rows.numel()))], dev, torch.long)
        pre_rows = torch.cat([p.pre_rows.to(dev) for _, p in with_pre]) + offset
        pre_mask = pad_points([p.pre_mask for _, p in with_pre], n)
    points = (cat("x1"), cat("x2"), cat("mask"))
    fit_h, fit_f = fit_reusing(*points, cat("scores"), config, pre, pre_rows, pre_mask,
                               row_ids=ids)
    return MergedFits(fit_h, fit_f, starts, sizes, widths, points)


def fit_clips(parts: Sequence[ClipRows], config: GeoConConfig) -> List[Tuple[Fit, Fit]]:
    """:func:`fit_merged` split into one (fit_h, fit_f) per part, of its R rows and its own
    width N (each equal to the part fitted alone, bit for bit on the CPU)."""
    if not parts:
        return []
    return fit_merged(parts, config).clips()


def _row_ids(parts: Sequence[ClipRows], sizes: Sequence[int], dev: torch.device
             ) -> torch.Tensor:
    """(R,) long seed position of every row of ``parts`` in its own clip (``part.rows``, or
    ``arange(R_k)`` where None): one host-built tensor when no part gives its rows."""
    if all(p.rows is None for p in parts):
        return to_device([i for r in sizes for i in range(r)], dev, torch.long)
    return torch.cat([torch.arange(r, device=dev) if p.rows is None else p.rows.to(dev).long()
                      for p, r in zip(parts, sizes)])
