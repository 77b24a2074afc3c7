"""Seeding the weight-free motion segmentation from the background fits (paper sec. 4.3).

The matches a preliminary background model cannot explain are the seeds of moving objects;
each seed carries its motion relative to the background homography (what the points of a rigid
mover share), and the adjacent pairs' homographies give the dense photometric residuals of
:func:`~.motion.motion_segment`. Under H, the matches between the inlier gate tau_H and the
seed threshold ``motion_seed_factor x tau_H`` are *band* seeds (:func:`_band_threshold`): they
count where the dense change masks confirm them, so a mover 2-4 px per frame off the
background is masked rather than left as background outliers.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .._tensor_utils import to_device
from .._memory import release_freed_memory
from ..config import GeoConConfig
from ..geometry import fundamental_residuals, homography_residuals, transfer_points
from ..types import Clip, Fit
from .motion import ClipGray, clip_bounds, joined_gray, segment_joined, segmentation_factor

Seeds = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]

#: under H a seed is off the background homography by at least this many *source* pixels: the
#: seed threshold ``motion_seed_factor x tau_H`` is in working px, which on working frames
#: upscaled u times from a smaller source (``Clip.scale`` > 1) are 1/u source px; a match
#: residual finer than a source pixel is interpolation / localisation noise, not motion
SEED_MIN_SOURCE_PX = 1.0


def outlier_seeds(pairs: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor,
                  fits: Tuple[Fit, Fit], config: GeoConConfig, regime: Optional[str],
                  residuals: Optional[torch.Tensor] = None, upscale: float = 1.0) -> Seeds:
    """Background-model outliers of the P evaluated pairs as motion seeds, fixed-size (no
    host sync): every match endpoint is a candidate, ``valid`` says which are seeds.

    A match is a seed when its residual under the regime's model (F: normalised Sampson, else
    H: symmetric transfer px) exceeds ``segment.motion_seed_factor`` times that model's
    threshold, on a pair whose fit is valid; under H never less than
    :data:`SEED_MIN_SOURCE_PX` source px (``upscale`` working px per source px: the clip's
    :func:`source_upscale`).

    Args:
        pairs: (P, 2) long frame pairs (i, j); x1, x2: (P, N, 2) px; mask: (P, N) bool.
        fits: (H fit, F fit) of the P rows.
        residuals: (P, N) residuals of the regime's model when already computed (None:
            computed here).
        upscale: working px per source px, >= 1 (:func:`source_upscale`; 1: not upscaled).
    Returns:
        points (2PN, 2) px (every match in frame i, then in frame j), frames (2PN,) long,
        motion (2PN, 2) px relative to the background homography, valid (2PN,) bool (the
        seeds: ``points[valid]`` are the outliers in row-major order).
    """
    fit_h, fit_f = fits
    r = _regime_residuals(x1, x2, mask, fits, regime) if residuals is None else residuals
    outlier = mask & (r > _seed_threshold(config, regime, upscale)) \
        & (fit_f if regime == "F" else fit_h).valid.view(-1, 1)
    return _seed_points(pairs.to(x1.device), x1, x2, outlier, fit_h.model)


def _regime_residuals(x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor,
                      fits: Tuple[Fit, Fit], regime: Optional[str]) -> torch.Tensor:
    """(P, N) residuals of the regime's model (F: normalised Sampson, else H: symmetric
    transfer px) of fits (H, F) of P rows at x1, x2 (P, N, 2) px."""
    if regime == "F":
        return fundamental_residuals(fits[1], x1, x2, mask)[0]
    return homography_residuals(fits[0], x1, x2)


def source_upscale(clip: Clip) -> float:
    """Working px per source px of ``clip``'s frames: ``Clip.scale`` where they were upscaled
    from a smaller source, else 1.0 (downscaled or native frames: a working px is a real
    pixel of the image content)."""
    return max(1.0, float(clip.scale))


def _seed_threshold(config: GeoConConfig, regime: Optional[str], upscale: float = 1.0
                    ) -> float:
    """The residual above which a match is a seed: ``motion_seed_factor`` times the regime's
    model threshold (tau_F normalised Sampson under F, else tau_H px), under H at least
    :data:`SEED_MIN_SOURCE_PX` source px = ``upscale`` x that many working px (binds only
    on frames upscaled more than ``motion_seed_factor x tau_H`` times: 4 by default)."""
    bc = config.background
    if regime == "F":
        return config.segment.motion_seed_factor * bc.tau_f
    return max(config.segment.motion_seed_factor * bc.tau_h, upscale * SEED_MIN_SOURCE_PX)


def _band_threshold(config: GeoConConfig, regime: Optional[str], upscale: float = 1.0
                    ) -> float:
    """The residual above which a match is a *band* seed (under H only; inf under F): an H
    outlier, ``tau_H`` px (the background's inlier gate), never less than
    :data:`SEED_MIN_SOURCE_PX` source px. A band seed below :func:`_seed_threshold` counts
    only near its frame's dense change masks and where the band seeds around it move alike
    (:func:`~.motion._band_discs`): a mover 2-4 px off the background is an H outlier, so it
    must be maskable, while scattered mismatches of that size never seed."""
    if regime == "F":
        return float("inf")
    return max(min(config.segment.motion_seed_factor, 1.0) * config.background.tau_h,
               upscale * SEED_MIN_SOURCE_PX)


def _seed_points(pairs: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                 outlier: torch.Tensor, model_h: torch.Tensor) -> Seeds:
    """Seeds (:func:`outlier_seeds`) of P rows: frame pairs (P, 2) long, x1, x2 (P, N, 2) px,
    outlier (P, N) bool, background homographies (P, 3, 3) -> points, frames, motion relative
    to the background, valid (each 2PN: the matches in frame i, then in frame j)."""
    rel = (x2 - transfer_points(model_h.to(x1.dtype), x1)).reshape(-1, 2)
    frame = lambda col: pairs[:, col].view(-1, 1).expand_as(outlier)  # noqa: E731
    pts = torch.cat([x1.reshape(-1, 2), x2.reshape(-1, 2)])
    frames = torch.cat([frame(0).reshape(-1), frame(1).reshape(-1)])
    valid = outlier.reshape(-1)
    return pts, frames, torch.cat([rel, rel]), torch.cat([valid, valid])


def adjacent_homographies(pairs: torch.Tensor, fit_h: Fit, num_frames: int
                          ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(T-1, 3, 3) float64 homography and (T-1,) bool validity of every adjacent pair
    (t, t+1), taken from the rows of ``pairs`` (P, 2) that are adjacent (identity / invalid for
    the others); fixed-size scatters (no host sync)."""
    dev = fit_h.model.device
    return _adjacent(pairs.to(dev), fit_h.model, fit_h.valid.to(dev), num_frames)


def _adjacent(pairs: torch.Tensor, model: torch.Tensor, valid: torch.Tensor, num_frames: int
              ) -> Tuple[torch.Tensor, torch.Tensor]:
    """:func:`adjacent_homographies` of rows with frame pairs (P, 2) long, homographies
    (P, 3, 3) and validity (P,) bool (all on one device) among ``num_frames`` frames."""
    dev = model.device
    n = max(num_frames - 1, 0)
    hs = torch.eye(3, dtype=torch.float64, device=dev).repeat(n + 1, 1, 1)  # n: discarded
    ok = torch.zeros(n + 1, dtype=torch.bool, device=dev)
    adj = pairs[:, 1] - pairs[:, 0] == 1
    idx = torch.where(adj, pairs[:, 0], torch.full_like(adj, n, dtype=torch.long))
    hs[idx] = torch.where(adj.view(-1, 1, 1), model.to(torch.float64), hs[n])
    ok[idx] = valid & adj
    return hs[:n], ok[:n]


def motion_masks(clip: Clip, pairs: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                 mask: torch.Tensor, fits: Tuple[Fit, Fit], config: GeoConConfig,
                 regime: Optional[str]) -> Tuple[torch.Tensor, Dict[str, Any]]:
    """Weight-free object masks from the preliminary fits of the evaluated pairs.

    Args:
        clip: the clip (working resolution).
        pairs: (P, 2) long evaluated frame pairs.
        x1, x2: (R, N, 2) px, mask (R, N) bool, fits (H, F) of R >= P rows whose first P rows
            are the evaluated pairs (later rows, e.g. gate pairs, are ignored).
        regime: the preliminary regime (:func:`~geocon_torch.gate.preliminary_regime`): under F
            no dense residuals are computed (the frames are never read).
        config: the config (``segment`` settings, ``background`` thresholds).
    Returns:
        objects (T, K, H, W) bool and the evidence of :func:`~.motion.motion_segment` plus
        ``pre_regime``.
    """
    return motion_masks_batch([clip], [pairs], [x1], [x2], [mask], [fits], config, [regime])[0]


def motion_masks_batch(clips: Sequence[Clip], pairs: Sequence[torch.Tensor],
                       x1: Sequence[torch.Tensor], x2: Sequence[torch.Tensor],
                       mask: Sequence[torch.Tensor], fits: Sequence[Tuple[Fit, Fit]],
                       config: GeoConConfig, regimes: Sequence[Optional[str]],
                       residuals: Optional[Sequence[Optional[torch.Tensor]]] = None
                       ) -> List[Tuple[torch.Tensor, Dict[str, Any]]]:
    """:func:`motion_masks` of B clips (one entry each) as one batch: the clips of one working
    size, device and point dtype are joined (their evaluated rows one after the other, the
    point axis zero-padded: :func:`_joined_rows`), their seeds and adjacent homographies taken
    in one pass each without host syncs, and segmented together
    (:func:`~.motion.segment_joined`). Each clip gets what it gets alone (bit for bit on the
    CPU).

    Args:
        residuals: per clip, (P, N) residuals of its regime's model on its P evaluated rows
            (:func:`outlier_seeds`), or None.
    """
    n = len(clips)
    residuals = list(residuals) if residuals is not None else [None] * n
    groups: Dict[tuple, List[int]] = {}
    for k, (clip, a, res) in enumerate(zip(clips, x1, residuals)):
        key = (tuple(clip.content_mask.shape[-2:]), str(a.device), a.dtype,
               a.dtype if res is None else res.dtype)
        groups.setdefault(key, []).append(k)
    joined = []
    for idx in groups.values():
        pick = lambda seq: [seq[k] for k in idx]  # noqa: E731
        joined.append(_joined_inputs(pick(clips), pick(pairs), pick(x1), pick(x2), pick(mask),
                                     pick(fits), config, pick(regimes), pick(residuals)))
    release_freed_memory()  # the rows' temporaries: back to the OS before the maps
    out: List[Any] = [None] * n
    for idx, args in zip(groups.values(), joined):
        for k, part in zip(idx, segment_joined(*args)):
            part[1]["pre_regime"] = regimes[k]
            floor = _seed_floor(config, regimes[k], source_upscale(clips[k]))
            if floor is not None:  # only where the source-pixel floor binds
                part[1]["seed_threshold_px"] = floor
            out[k] = part
    return out


def _seed_floor(config: GeoConConfig, regime: Optional[str], upscale: float
                ) -> Optional[float]:
    """The H seed threshold (working px) where :data:`SEED_MIN_SOURCE_PX` raises it above
    ``motion_seed_factor x tau_H`` (frames upscaled more than that many times), else None."""
    tau = _seed_threshold(config, regime, upscale)
    return tau if regime != "F" and tau > _seed_threshold(config, regime) else None


def _joined_inputs(clips: Sequence[Clip], pairs: Sequence[torch.Tensor],
                   x1: Sequence[torch.Tensor], x2: Sequence[torch.Tensor],
                   mask: Sequence[torch.Tensor], fits: Sequence[Tuple[Fit, Fit]],
                   config: GeoConConfig, regimes: Sequence[Optional[str]],
                   residuals: Sequence[Optional[torch.Tensor]]) -> tuple:
    """The arguments of :func:`~.motion.segment_joined` for B clips of one working size:
    their gray frames (pooled to the segmentation scale; never read under F), the frames'
    bounds, the adjacent homographies and validity of the joined frames, the content masks
    and the seeds of all clips (frames into the joined frames; a fifth entry marks the band
    seeds, :func:`_band_threshold`)."""
    dev = x1[0].device
    bounds = clip_bounds([clip.num_frames for clip in clips])
    rows = _joined_rows(pairs, x1, x2, mask, fits, config, regimes, residuals, bounds,
                        [source_upscale(clip) for clip in clips])
    usable = rows["mask"] & rows["valid"].view(-1, 1)
    outlier = usable & (rows["res"] > rows["tau"].view(-1, 1))
    # band seeds: H outliers below the seed threshold, kept where the change masks confirm them
    band = usable & (rows["res"] > rows["tau_band"].view(-1, 1)) & ~outlier
    seeds = _seed_points(rows["pairs"], rows["x1"], rows["x2"], outlier | band, rows["model"])
    seeds = (*seeds, torch.cat([band.reshape(-1), band.reshape(-1)]))
    homs, valid = _adjacent(rows["pairs"], rows["model"], rows["valid_h"] & rows["dense"],
                            bounds[-1])
    f = segmentation_factor(clips[0].size)
    gray = joined_gray(clips, f) if len(clips) > 1 else None  # all frames as one tensor
    grays = [gray.to(dev)] if gray is not None else [_clip_gray(clip, f, regime, dev)
                                                     for clip, regime in zip(clips, regimes)]
    contents = [clip.content_mask.to(dev) for clip in clips]
    return (grays, bounds, homs, valid, contents, config.segment, list(regimes), seeds,
            [True] * len(clips), 8, 320, None if gray is None else [0, bounds[-1]])


def _clip_gray(clip: Clip, factor: int, regime: Optional[str], device: torch.device
               ) -> Union[torch.Tensor, ClipGray]:
    """(T, 1, ceil(H/f), ceil(W/f)) float gray frames of one clip at the segmentation scale,
    computed per chunk of frames when the segmentation reads them (:class:`~.motion.ClipGray`:
    no float copy of the whole clip); under F zeros (the frames are never read: no dense
    residuals under translation)."""
    if regime == "F":
        h, w = clip.size
        return torch.zeros(1, 1, 1, 1, device=device).expand(
            clip.num_frames, 1, -(-h // factor), -(-w // factor))
    return ClipGray(clip, factor, device)


def _joined_rows(pairs: Sequence[torch.Tensor], x1: Sequence[torch.Tensor],
                 x2: Sequence[torch.Tensor], mask: Sequence[torch.Tensor],
                 fits: Sequence[Tuple[Fit, Fit]], config: GeoConConfig,
                 regimes: Sequence[Optional[str]], residuals: Sequence[Optional[torch.Tensor]],
                 bounds: Sequence[int], upscales: Optional[Sequence[float]] = None
                 ) -> Dict[str, torch.Tensor]:
    """The P_b evaluated rows (the first P_b of R_b >= P_b) of B clips one after the other
    (P = sum P_b rows), the point axis zero-padded to the widest clip's N (padded matches are
    outside the mask: never seeds); a fixed number of ops whatever B (besides one pad per
    narrower clip). ``upscales``: each clip's :func:`source_upscale` (None: all 1.0).

    Returns:
        pairs (P, 2) long frame pairs into the joined frames (clip b's frame t is
        ``bounds[b] + t``), x1, x2 (P, N, 2) px, mask (P, N) bool, res (P, N) residuals of
        each clip's regime model, tau (P,) its seed threshold (res's dtype), tau_band (P,)
        its band threshold (:func:`_band_threshold`), valid (P,) bool validity of that fit,
        model (P, 3, 3) the H fits' models, valid_h (P,) bool their validity, dense (P,)
        bool (the clip's regime is not F).
    """
    dev = x1[0].device
    n = max(int(a.shape[1]) for a in x1)
    ps = [int(pr.shape[0]) for pr in pairs]
    res = [_regime_residuals(a[:p], c[:p], m[:p], (fit[0].rows(torch.arange(p, device=dev)),
                             fit[1].rows(torch.arange(p, device=dev))), regime)
           if r is None else r for a, c, m, fit, regime, r, p in zip(x1, x2, mask, fits, regimes,
                                                                   residuals, ps)]
    # the evaluated rows among the R = sum R_b rows of the clips one after the other
    starts = [0]
    for a in x1[:-1]:
        starts.append(starts[-1] + int(a.shape[0]))
    rows = [s + i for s, p in zip(starts, ps) for i in range(p)]
    every = starts[-1] + int(x1[-1].shape[0]) == len(rows)
    index = None if every else to_device(rows, dev, torch.long)

    def joined(parts: Sequence[torch.Tensor], of_rows: bool = True) -> torch.Tensor:
        x = (parts[0] if len(parts) == 1 else torch.cat(list(parts))).to(dev)
        return x if index is None or not of_rows else x[index]

    f_regime = [r == "F" for r in regimes]
    out = {"x1": joined([_padded(a, n) for a in x1]), "x2": joined([_padded(c, n) for c in x2]),
           "mask": joined([_padded(m, n) for m in mask]),
           "res": joined([_padded(r, n) for r in res], of_rows=False),
           "pairs": joined([to_device(pr, dev, torch.long) for pr in pairs], of_rows=False),
           "model": joined([fit[0].model for fit in fits]),
           "valid_h": joined([fit[0].valid for fit in fits])}
    out["valid"] = out["valid_h"] if not any(f_regime) else torch.where(
        to_device([f for f, p in zip(f_regime, ps) for _ in range(p)], dev),
        joined([fit[1].valid for fit in fits]), out["valid_h"])
    offset = [b for b, p in zip(bounds, ps) for _ in range(p)]
    if any(offset):
        out["pairs"] = out["pairs"] + to_device(offset, dev).view(-1, 1)
    ups = [1.0] * len(regimes) if upscales is None else upscales
    out["tau"] = to_device([_seed_threshold(config, r, u) for r, u, p in zip(regimes, ups, ps)
                            for _ in range(p)], dev, out["res"].dtype)
    out["tau_band"] = to_device([_band_threshold(config, r, u) for r, u, p
                                 in zip(regimes, ups, ps) for _ in range(p)], dev,
                                out["res"].dtype)
    out["dense"] = to_device([not f for f, p in zip(f_regime, ps) for _ in range(p)], dev,
                             torch.bool)
    return out


def _padded(x: torch.Tensor, n: int) -> torch.Tensor:
    """(R, N, ...) ``x`` with dim 1 zero-padded (False for bool) to n (x itself when N = n)."""
    pad = n - int(x.shape[1])
    return x if pad == 0 else torch.nn.functional.pad(x, (0, 0) * (x.ndim - 2) + (0, pad))
