"""The background block's robust fits: one batched RANSAC call per model (H and F) over every
row (frame pairs x scales), each row drawing the random stream of its own position.

Per-row seeds make a fit padding invariant: fitting a subset of rows, with their positions as
``rows``, gives exactly those rows of the full fit. :func:`fit_reusing` relies on it to keep
the preliminary fits of the motion-mask step wherever the background mask left a row unchanged.
"""
from __future__ import annotations

from typing import Optional, Tuple

import torch

from ..config import GeoConConfig
from ..geometry import ransac_fundamental, ransac_homography
from ..types import Fit


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
                pre_mask: torch.Tensor) -> Tuple[Fit, Fit]:
    """:func:`fit_both` of every row, reusing the preliminary fits where nothing changed.

    Args:
        x1, x2, mask, scores: all R rows, as :func:`fit_both` (``mask``: the final one).
        pre: (H, F) fits of the rows ``pre_rows`` (fitted with their row seeds on the
            correspondences ``pre_mask`` (R', N)), or None (every row is fitted).
    Returns:
        (fit_h, fit_f) of R rows, equal to ``fit_both(x1, x2, mask, scores, config)``: a row
        whose ``pre_mask`` equals its ``mask`` keeps its preliminary fit (same input and seed
        give the same fit); the others are fitted in one batched call per model.
    """
    if pre is None:
        return fit_both(x1, x2, mask, scores, config)
    r = int(x1.shape[0])
    same = (pre_mask == mask[pre_rows]).all(-1)
    todo = torch.ones(r, dtype=torch.bool, device=x1.device)
    todo[pre_rows[same]] = False
    todo = todo.nonzero()[:, 0]
    kept = pre_rows[same]
    old = (pre[0].rows(same), pre[1].rows(same))
    if todo.numel() == 0:
        return Fit.assemble(r, [(kept, old[0])]), Fit.assemble(r, [(kept, old[1])])
    new = fit_both(x1[todo], x2[todo], mask[todo], scores[todo], config, rows=todo)
    return (Fit.assemble(r, [(todo, new[0]), (kept, old[0])]),
            Fit.assemble(r, [(todo, new[1]), (kept, old[1])]))
