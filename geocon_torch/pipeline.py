"""``score_clip``: the one place where the stages are wired together (paper Algorithm 1 A-C, E).

    video -> io.read_clip -> features (all adjacent pairs, scales {1/4, 1/2, 1})
          -> masks (files | SAM-2 | weight-free motion segmentation) -> background correspondences
          -> batched RANSAC per model (H and F) over all pairs x scales (one call; with
             motion masks the finest rows are fitted first and kept where unchanged)
          -> IR / GE per pair (eqs. 7-12) -> gate (poses | DUSt3R | parallax) -> clip medians
             (eq. 13), report gate, post-hoc category  [+ foreground / epipolar sections]

Both families are always fitted and recorded (``ir_h`` / ``ge_h_px`` / ``ir_f`` / ``ge_f_px``);
``ir`` / ``ge_px`` are those of the gated regime (U: the better-supported model by GRIC). Pixel
values are at the working resolution (``config.io.long_side``; tests use 320-480 px).

Status: ``ok``; ``not_applicable`` with a reason when the clip cannot be scored (fewer than two
frames, too little texture, too few valid pairs, a clip excluded by ``missing_pose=present_only``)
- never IR = 0; ``error`` with the reason from :func:`score_clips` when the input is bad
(:func:`score_clip` raises :class:`~geocon_torch.errors.VideoReadError` itself). A failure inside
an optional section (foreground, epipolar) becomes that section's ``status: "error"``.
"""
from __future__ import annotations

import time
import traceback
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ._tensor_utils import masked_median
from .config import GeoConConfig, load_config
from .errors import GeoConError, InputError, VideoReadError
from .gate import (GateDecision, gate_from_parallax, gate_from_poses, parallax_statistics,
                   resolve_u)
from .gate.decision import CODE
from .io.pairs import background_pairs, parallax_gate_pairs
from .geometry import fundamental_residuals, homography_residuals
from .measures.background import (PairMetrics, background_pass, choose_model_per_pair,
                                  classify_behaviour, clip_summary, fundamental_pair_metrics,
                                  homography_pair_metrics, median_motion_px,
                                  rotation_from_fundamental, sensitivity_scan)
from .result import ClipResult, jsonable
from .sections.epipolar import epipolar_block
from .segment.background import background_keep, background_mask
from .types import Clip, Correspondences, Fit, concat_correspondences

PRESETS = ("geocon", "background", "worldatlas", "gvgc", "all")
VideoLike = Union[str, Path, torch.Tensor, Clip]


class _Timer:
    def __init__(self) -> None:
        self.times: Dict[str, float] = {}

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.times[name] = self.times.get(name, 0.0) + time.perf_counter() - t0


def _read(video: VideoLike, cfg: GeoConConfig, device: Optional[torch.device]) -> Clip:
    if isinstance(video, Clip):
        return video
    from .io import read_clip

    return read_clip(video, long_side=cfg.io.long_side, stride=cfg.io.stride,
                     max_frames=cfg.io.max_frames, device=device,
                     letterbox_threshold=cfg.io.letterbox_threshold,
                     letterbox_min_fraction=cfg.io.letterbox_min_fraction)


def _content_hash(video: VideoLike) -> Optional[str]:
    from .io import content_hash

    src = video.frames if isinstance(video, Clip) else video
    try:
        return content_hash(src)
    except GeoConError:
        return None


def _concat_scales(corrs: Dict[float, Correspondences]
                   ) -> Tuple[List[float], torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stack the scales along P (padding N): x1, x2 (S*P, N, 2), mask, scores (S*P, N)."""

    scales = sorted(corrs)
    c = concat_correspondences([corrs[s] for s in scales])
    return scales, c.x1, c.x2, c.mask, c.scores


def _fit_both(x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor,
              cfg: GeoConConfig, rows: Optional[torch.Tensor] = None) -> Tuple[Fit, Fit]:
    """One batched RANSAC call per model over every row of (P, N) (all pairs x scales).

    ``rows`` (P,) long: the rows' positions in the full (scales x pairs) batch; each row then
    draws the random stream of its position (``seed + row``), so a fit of a subset of rows
    equals those rows of the full fit (padding invariance) and can stand in for them.
    """
    from .geometry import ransac_fundamental, ransac_homography

    rc, bc = cfg.ransac, cfg.background
    seed = rc.seed if rows is None else rows.to(x1.device).long() + int(rc.seed)
    common = dict(confidence=rc.confidence, max_iterations=rc.max_iterations,
                  scoring=rc.scoring, local_optimization=rc.local_optimization, seed=seed,
                  lo_iterations=rc.lo_iterations, batch_size=rc.batch_hypotheses)
    fit_h = ransac_homography(x1, x2, mask, scores, threshold=bc.tau_h, residual="symmetric",
                              **common)
    fit_f = ransac_fundamental(x1, x2, mask, scores, threshold=bc.tau_f,
                               residual="sampson_normalized", **common)
    return fit_h, fit_f


def _resolve_gate_method(cfg: GeoConConfig, poses: Any) -> str:
    method = cfg.gate.method
    if method == "auto":
        if poses is not None:
            return "poses"
        return "dust3r" if cfg.gate.dust3r_checkpoint else "parallax"
    if method not in ("poses", "dust3r", "parallax"):
        raise InputError(f"gate.method must be auto, poses, dust3r or parallax, got {method!r}")
    if method == "poses" and poses is None:
        raise InputError("gate.method='poses' needs score_clip(..., poses=PATH_OR_TENSOR)")
    return method


def _external_gate(method: str, clip: Clip, pairs: torch.Tensor, poses: Any,
                   cfg: GeoConConfig, device: Optional[torch.device]) -> Optional[GateDecision]:
    if method == "poses":
        return gate_from_poses(poses, pairs, clip.num_frames, cfg.gate)
    if method == "dust3r":
        from .gate.dust3r import gate_from_dust3r

        return gate_from_dust3r(clip, pairs, cfg.gate, device)
    return None


def _masks_method(cfg: GeoConConfig, masks: Any) -> str:
    method = cfg.segment.method
    if masks is not None:
        return "files"
    if method == "auto":
        return "sam2" if cfg.segment.sam2_checkpoint else "motion"
    if method not in ("files", "sam2", "motion", "none"):
        raise InputError(f"segment.method must be auto, files, sam2, motion or none, "
                          f"got {method!r}")
    if method == "files":
        raise InputError("segment.method='files' needs score_clip(..., masks=PATH_OR_TENSOR)")
    return method


def _motion_masks(clip: Clip, pairs: torch.Tensor, x1: torch.Tensor, x2: torch.Tensor,
                  mask: torch.Tensor, fits: Tuple[Fit, Fit], cfg: GeoConConfig,
                  pre_gate: Optional[GateDecision]) -> Tuple[torch.Tensor, Dict[str, Any]]:
    """Weight-free objects from the preliminary H/F ``fits`` of all finest-scale matches (rows:
    the P adjacent pairs, then the gate pairs): pre-gate, seeds of background-model outliers,
    dense residual segmentation (see :mod:`segment.motion`)."""
    from .segment.motion import motion_segment, pooled_gray, segmentation_factor

    bc, sc = cfg.background, cfg.segment
    p = int(pairs.shape[0])
    fit_h, fit_f = fits
    if pre_gate is not None and pre_gate.decision in ("H", "F"):
        regime = pre_gate.decision
    else:
        stats = parallax_statistics(fit_h, fit_f, x1, x2, mask, tau_h=bc.tau_h, tau_f=bc.tau_f,
                                    min_inliers=bc.min_inliers)
        rows = torch.arange(x1.shape[0], device=x1.device)
        pg = gate_from_parallax(_gate_source(stats, rows[:p], rows[p:])[0], cfg.gate)
        regime = pg.decision if pg.decision != "U" else pg.evidence.get("u_resolved")
    adjacent = torch.arange(p, device=x1.device)
    fit_h, fit_f = _fit_rows(fit_h, adjacent), _fit_rows(fit_f, adjacent)
    x1, x2, mask = x1[:p], x2[:p], mask[:p]
    from .geometry import transfer_points

    if regime == "F":
        r = fundamental_residuals(fit_f, x1, x2, mask)[0]
        outlier = mask & (r > sc.motion_seed_factor * bc.tau_f) & fit_f.valid.view(-1, 1)
    else:
        r = homography_residuals(fit_h, x1, x2)
        outlier = mask & (r > sc.motion_seed_factor * bc.tau_h) & fit_h.valid.view(-1, 1)
    # motion relative to the background homography (what a rigid mover shares)
    rel = x2 - transfer_points(fit_h.model.to(x1.dtype), x1)
    pts = torch.cat([x1[outlier], x2[outlier]])
    frames = torch.cat([pairs[:, 0].to(x1.device).view(-1, 1).expand_as(outlier)[outlier],
                        pairs[:, 1].to(x1.device).view(-1, 1).expand_as(outlier)[outlier]])
    vec = torch.cat([rel[outlier], rel[outlier]])
    # dense residuals need every adjacent pair's homography: (t, t+1) rows of the pair list
    t = clip.num_frames
    Hs = torch.eye(3, dtype=torch.float64, device=x1.device).repeat(max(t - 1, 0), 1, 1)
    ok = torch.zeros(max(t - 1, 0), dtype=torch.bool, device=x1.device)
    adj = (pairs[:, 1] - pairs[:, 0] == 1).to(x1.device)
    idx = pairs[:, 0].to(x1.device)[adj]
    Hs[idx] = fit_h.model[adj].to(torch.float64)
    ok[idx] = fit_h.valid[adj].to(x1.device)
    f = segmentation_factor(clip.size)
    if regime == "F":  # no dense residuals under translation: the frames are never read
        h, w = clip.size
        gray = torch.zeros(1, 1, 1, 1, device=x1.device).expand(t, 1, -(-h // f), -(-w // f))
    else:
        gray = pooled_gray(clip, f).to(x1.device)
    objects, evidence = motion_segment(gray, Hs, ok,
                                       clip.content_mask.to(x1.device), sc, regime,
                                       seeds=(pts, frames, vec))
    evidence["pre_regime"] = regime
    return objects, evidence


def _sam2_masks(clip: Clip, cfg: GeoConConfig, device: Optional[torch.device]) -> torch.Tensor:
    from .segment.sam2 import sam2_masks

    return sam2_masks(clip, cfg.segment, device=device)


def _no_gate(method: Optional[str], ext_gate: Optional[GateDecision]) -> Dict[str, Any]:
    """The gate block of a clip that stops before the gate: the external decision when there
    is one, else an empty decision of ``method``."""
    if ext_gate is not None:
        return ext_gate.to_dict()
    return GateDecision(method, None, {}, None).to_dict()


def _gate_source(stats: Dict[str, torch.Tensor], evaluated: torch.Tensor,
                 gate_rows: torch.Tensor, gate_pairs: Optional[torch.Tensor] = None
                 ) -> Tuple[Dict[str, torch.Tensor], Any]:
    """The parallax statistics the weight-free gate reads: the valid near-first/last gate pairs
    (``gate_rows`` in :func:`~geocon_torch.io.pairs.parallax_gate_pairs` order: wide pairs, then the two halves), else the
    halves, else the ``evaluated`` (adjacent) rows. Returns (statistics, the pairs used: a list
    of ``gate_pairs`` rows, or "evaluated pairs")."""
    if gate_rows.numel():
        valid = stats["valid"][gate_rows]
        n = int(gate_rows.numel())
        for part in (slice(0, n - 2), slice(n - 2, n)):  # wide pairs, then the halves
            if bool(valid[part].any()):
                rows = gate_rows[part]
                used = gate_pairs[part].tolist() if gate_pairs is not None else None
                return {k: v[rows] for k, v in stats.items()}, used
    return {k: v[evaluated] for k, v in stats.items()}, "evaluated pairs"


def _subset(pm: PairMetrics, idx: torch.Tensor) -> PairMetrics:
    return PairMetrics(pm.ir[idx], pm.ge[idx], pm.num_inliers[idx], pm.num_matches[idx],
                       pm.valid[idx])


def _section(name: str, fn, timer: _Timer) -> Dict[str, Any]:
    """Run an optional section; any failure becomes its status 'error' with the reason."""
    with timer(name):
        try:
            out = fn()
            return dict(out) if isinstance(out, dict) else {"value": out, "status": "ok"}
        except Exception as exc:  # noqa: BLE001 - isolate one section's failure
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=3)}


def _foreground(clip: Clip, objects: Optional[torch.Tensor], cfg: GeoConConfig,
                device: Optional[torch.device]) -> Dict[str, Any]:
    from .foreground import foreground_section

    return foreground_section(clip, objects, cfg, device)




def _background(clip: Clip, pairs: torch.Tensor, masks: Any, poses: Any, cfg: GeoConConfig,
                device: Optional[torch.device], timer: _Timer
                ) -> Tuple[Dict[str, Any], Dict[str, Any], Optional[str], Optional[str],
                           Optional[torch.Tensor], Dict[str, Any]]:
    """Background block, gate block, regime, category, object masks, backends."""
    from .features import extract_correspondences
    from .features.multiscale import resolve_scale_mode

    bc = cfg.background
    backends: Dict[str, Any] = {"ransac": "geocon_torch"}
    p = int(pairs.shape[0])
    gate_method = _resolve_gate_method(cfg, poses)
    backends["gate"] = gate_method
    with timer("gate"):
        ext_gate = _external_gate(gate_method, clip, pairs, poses, cfg, device)
    # the weight-free gate also looks at wider baselines (parallax grows with the baseline)
    gp = (parallax_gate_pairs(clip.num_frames, cfg.gate.parallax_pairs) if ext_gate is None
          else torch.zeros(0, 2, dtype=torch.long))
    all_pairs = torch.cat([pairs, gp]) if gp.shape[0] else pairs
    q = int(all_pairs.shape[0])
    with timer("features"):
        corrs = extract_correspondences(clip, all_pairs, cfg.features, device=device)
    backends["features"] = _feature_backend(cfg, device)
    backends["scale_mode"] = resolve_scale_mode(cfg.features.scale_mode, backends["features"],
                                                cfg.features.scales)
    if not corrs:
        return ({"status": "not_applicable", "pairs": p,
                 "reason": "frames too small for any feature scale"},
                {}, None, None, None, backends)
    scales, x1, x2, mask, scores = _concat_scales(corrs)
    dev = x1.device
    ns = len(scales)
    rows_pairs = all_pairs.to(dev).repeat(ns, 1)
    base = torch.arange(ns, device=dev).view(-1, 1) * q
    ev = (base + torch.arange(p, device=dev).view(1, -1)).reshape(-1)  # evaluated rows
    fin = ev[-p:]  # evaluated rows of the finest scale
    fin_gate = (ns - 1) * q + torch.arange(p, q, device=dev)  # gate rows, finest scale
    scale_of = [s for s in scales for _ in range(p)]
    # the gate reads only the finest-scale gate rows: the coarser ones are emptied (cost nothing)
    coarse_gate = (base[:-1] + torch.arange(p, q, device=dev).view(1, -1)).reshape(-1)
    mask[coarse_gate] = False

    n_all = mask.sum(-1)
    if x1.shape[1] == 0 or float(n_all[fin].double().median()) < bc.min_inliers:
        med = float(n_all[fin].double().median()) if n_all.numel() else 0.0
        return ({"status": "not_applicable", "pairs": p, "scales": scales, "median_matches": med,
                 "reason": f"too little texture: median {med:.0f} matches per pair at scale "
                           f"{scales[-1]} (< {bc.min_inliers})"},
                _no_gate(gate_method, ext_gate), None, None, None, backends)

    # B. masks -> background correspondences
    method = _masks_method(cfg, masks)
    backends["masks"] = method
    objects: Optional[torch.Tensor] = None
    seg_evidence: Dict[str, Any] = {"method": method}
    pre: Optional[Tuple[Fit, Fit]] = None  # preliminary fits of the finest rows (motion masks)
    pre_rows = torch.cat([fin, fin_gate])
    pre_mask = mask[pre_rows]
    if method == "motion":
        # the finest rows are fitted on all their matches to find the movers; the rows the
        # masks then leave unchanged keep these fits (C. below)
        with timer("fit"):
            pre = _fit_both(x1[pre_rows], x2[pre_rows], pre_mask, scores[pre_rows], cfg,
                            rows=pre_rows)
    with timer("segment"):
        if method == "files":
            from .segment.files import load_masks

            objects = load_masks(masks, num_frames=clip.num_frames, size=clip.size,
                                 frame_indices=clip.frame_indices, device=dev)
            seg_evidence["objects"] = int(objects.shape[1])
        elif method == "sam2":
            objects = _sam2_masks(clip, cfg, device).to(dev)
            seg_evidence["objects"] = int(objects.shape[1])
        elif method == "motion":
            objects, seg_evidence = _motion_masks(clip, pairs, x1[pre_rows], x2[pre_rows],
                                                  pre_mask, pre, cfg, ext_gate)
        if objects is not None and objects.shape[1] > 0:
            bg = background_mask(clip.content_mask.to(dev), objects,
                                 cfg.segment.safety_margin_px)
            keep = background_keep(bg, x1, x2, rows_pairs)
            seg_evidence["removed_matches"] = int((mask[ev] & ~keep[ev]).sum())
            mask = mask & keep
    n_bg = mask.sum(-1)
    block: Dict[str, Any] = {"pairs": p, "scales": scales, "tau_h": bc.tau_h, "tau_f": bc.tau_f,
                             "segment": seg_evidence}
    med_matches = float(n_bg[fin].double().median())
    block["median_matches"] = med_matches
    if med_matches < bc.min_inliers:
        block.update(status="not_applicable",
                     reason=f"too little texture: median {med_matches:.0f} background matches "
                            f"per pair at scale {scales[-1]} (< {bc.min_inliers})")
        return block, _no_gate(gate_method, ext_gate), None, None, objects, backends

    # C. one batched call per model over all pairs x scales (+ the gate pairs, finest scale)
    with timer("fit"):
        fit_h, fit_f = _fit_reusing(x1, x2, mask, scores, cfg, pre, pre_rows, pre_mask)
    with timer("metrics"):  # each model's residuals once, for IR / GE and the gate
        r_h = homography_residuals(fit_h, x1, x2)
        r_f = fundamental_residuals(fit_f, x1, x2, mask)
        mh_all = homography_pair_metrics(fit_h, x1, x2, mask, tau_h=bc.tau_h,
                                         min_inliers=bc.min_inliers, residuals=r_h)
        mf_all = fundamental_pair_metrics(fit_f, x1, x2, mask, tau_f=bc.tau_f,
                                          min_inliers=bc.min_inliers, residuals=r_f)
        stats = parallax_statistics(fit_h, fit_f, x1, x2, mask, tau_h=bc.tau_h, tau_f=bc.tau_f,
                                    min_inliers=bc.min_inliers, residuals=(r_h, *r_f))
        fin_stats = {k: v[fin] for k, v in stats.items()}
        src, used = _gate_source(stats, fin, fin_gate, gp)
        # A. gate: external evidence, or the weight-free statistic on the gate pairs
        if ext_gate is not None:
            gate = ext_gate
        else:
            gate = gate_from_parallax(src, cfg.gate)
            gate.evidence["gate_pairs"] = used
            if cfg.gate.per_pair:  # per-pair hysteresis on the evaluated (adjacent) pairs
                gate.per_pair = gate_from_parallax(fin_stats, cfg.gate).per_pair
        gric = (float(masked_median(src["gric_delta"], src["valid"])[0])
                if bool(src["valid"].any()) else 0.0)
        gate.evidence.setdefault("u_resolved", "F" if gric > 0 else "H")
        gate.evidence["gric_delta"] = gric
        if gate.decision is None:
            block.update(status="not_applicable",
                         reason="gate undecided: " + str(gate.evidence.get("why", "no evidence")))
            return block, gate.to_dict(), None, None, objects, backends
        mh, mf = _subset(mh_all, ev), _subset(mf_all, ev)
        if cfg.gate.per_pair and gate.per_pair is not None:
            codes = torch.tensor([CODE[d] for d in gate.per_pair], device=dev)
            use_f_pair = resolve_u(codes, fin_stats["gric_delta"],
                                   mf_all.ir[fin] - mh_all.ir[fin], cfg.gate.u_margin)
            use_f = use_f_pair.repeat(ns)
            present = (codes != CODE[None]).repeat(ns)
            regime = "F" if float(use_f_pair.double().mean()) >= 0.5 else "H"
        else:
            regime = gate.decision
            if regime == "U":  # both fitted: the better-supported model wins
                ir_h = clip_summary(mh.ir, mh.ge, mh.valid)["ir"]
                ir_f = clip_summary(mf.ir, mf.ge, mf.valid)["ir"]
                margin = (ir_f - ir_h) if (ir_h is not None and ir_f is not None) else 0.0
                regime = "F" if (gate.evidence["u_resolved"] == "F"
                                 or margin > cfg.gate.u_margin) else "H"
                gate.evidence["u_resolved"] = regime
                gate.evidence["u_support_margin"] = margin
            use_f = torch.full((ev.numel(),), regime == "F", dtype=torch.bool, device=dev)
            present = torch.ones_like(use_f)
        chosen = choose_model_per_pair(mh, mf, use_f)
        chosen.valid = chosen.valid & present
        s_h = clip_summary(mh.ir, mh.ge, mh.valid & present)
        s_f = clip_summary(mf.ir, mf.ge, mf.valid & present)
        s = clip_summary(chosen.ir, chosen.ge, chosen.valid)
        best_f = mf.valid & (~mh.valid | (mf.ir > mh.ir))
        best = choose_model_per_pair(mh, mf, best_f)
        s_best = clip_summary(best.ir, best.ge, best.valid & present)
    block.update(ir=s["ir"], ge_px=s["ge_px"], ir_h=s_h["ir"], ge_h_px=s_h["ge_px"],
                 ir_f=s_f["ir"], ge_f_px=s_f["ge_px"], valid_pairs=s["valid_pairs"],
                 valid_pairs_h=s_h["valid_pairs"], valid_pairs_f=s_f["valid_pairs"],
                 best_of={"ir": s_best["ir"], "ge_px": s_best["ge_px"]})
    if bc.per_pair:
        cols = {"ir_h": mh.ir, "ge_h_px": mh.ge, "inliers_h": mh.num_inliers,
                "valid_h": mh.valid, "ir_f": mf.ir, "ge_f_px": mf.ge,
                "inliers_f": mf.num_inliers, "valid_f": mf.valid, "matches": mh.num_matches,
                "model": use_f, "gric_delta": stats["gric_delta"][ev]}
        lists = {k: v.tolist() for k, v in cols.items()}
        pl = pairs.tolist()
        lists["model"] = ["F" if v else "H" for v in lists["model"]]
        block["per_pair"] = [dict({"pair": pl[k % p], "scale": scale_of[k]},
                                  **{c: lists[c][k] for c in lists}) for k in range(ev.numel())]
    if bc.sensitivity:
        block["sensitivity"] = sensitivity_scan(_fit_rows(fit_h, ev), _fit_rows(fit_f, ev),
                                                x1[ev], x2[ev], mask[ev], bc.sensitivity_tau_h,
                                                bc.sensitivity_tau_f,
                                                min_inliers=bc.min_inliers)
    if s["valid_pairs"] < bc.min_valid_pairs:
        n_valid = s["valid_pairs"]
        block.update(status="not_applicable", ir=None, ge_px=None, **{"pass": None},
                     reason=f"too few valid pairs: {n_valid} of {ev.numel()} (pair, scale) "
                            f"entries have >= {bc.min_inliers} {regime}-inliers")
        return block, gate.to_dict(), regime, None, objects, backends
    passed = background_pass(s["ir"], s["ge_px"], bc.report_ir, bc.report_ge_px)
    block.update(status="ok", reason=None, **{"pass": passed})
    # E. post-hoc category
    fv = fit_f.valid[fin]
    valid_fin = (mh_all.valid | mf_all.valid)[fin]
    motion = median_motion_px(x1[fin], x2[fin], mask[fin])
    motion_px = float(masked_median(motion, valid_fin)[0]) if bool(valid_fin.any()) else None
    rot = None
    if bool(fv.any()):
        angles = rotation_from_fundamental(fit_f.model[fin].to(torch.float64), clip.size,
                                           bc.category_focal)
        rot = float(masked_median(angles, fv)[0])
    has_objects = objects is not None and objects.shape[1] > 0
    category = classify_behaviour(regime, passed, motion_px, rot, has_objects,
                          static_px=bc.category_static_px,
                          rotation_thr_deg=bc.category_rotation_deg)
    block["category_evidence"] = {"median_motion_px": motion_px, "median_rotation_deg": rot,
                                  "moving_objects": has_objects}
    return block, gate.to_dict(), regime, category, objects, backends


def _fit_rows(fit: Fit, idx: torch.Tensor) -> Fit:
    return Fit(fit.kind, fit.model[idx], fit.inliers[idx], fit.residuals[idx], fit.valid[idx],
               fit.num_inliers[idx], fit.iterations[idx], fit.score[idx])


def _fit_reusing(x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor, scores: torch.Tensor,
                 cfg: GeoConConfig, pre: Optional[Tuple[Fit, Fit]], pre_rows: torch.Tensor,
                 pre_mask: torch.Tensor) -> Tuple[Fit, Fit]:
    """:func:`_fit_both` of every row, taking the preliminary fits ``pre`` (of the rows
    ``pre_rows``, fitted with their row seeds on the correspondences ``pre_mask``) for the rows
    whose correspondences the background mask left unchanged: the same input and seed give the
    same fit (padding invariance, per-row seeds), so only the other rows are fitted, in one
    batched call per model."""
    if pre is None:
        return _fit_both(x1, x2, mask, scores, cfg)
    r = int(x1.shape[0])
    same = (pre_mask == mask[pre_rows]).all(-1)
    todo = torch.ones(r, dtype=torch.bool, device=x1.device)
    todo[pre_rows[same]] = False
    todo = todo.nonzero()[:, 0]
    kept = pre_rows[same]
    old_h, old_f = _fit_rows(pre[0], same), _fit_rows(pre[1], same)
    if todo.numel() == 0:
        return _rows_of(r, [(kept, old_h)]), _rows_of(r, [(kept, old_f)])
    new_h, new_f = _fit_both(x1[todo], x2[todo], mask[todo], scores[todo], cfg, rows=todo)
    return (_rows_of(r, [(todo, new_h), (kept, old_h)]),
            _rows_of(r, [(todo, new_f), (kept, old_f)]))


def _rows_of(r: int, parts: List[Tuple[torch.Tensor, Fit]]) -> Fit:
    """One Fit of ``r`` rows assembled from ``(rows, fit of those rows)`` parts covering all."""
    fields = ("model", "inliers", "residuals", "valid", "num_inliers", "iterations", "score")
    out = []
    for k in fields:
        ref = getattr(parts[0][1], k)
        t = ref.new_zeros((r,) + tuple(ref.shape[1:]))
        for rows, fit in parts:
            t[rows] = getattr(fit, k)
        out.append(t)
    return Fit(parts[0][1].kind, *out)


def _feature_backend(cfg: GeoConConfig, device: Optional[torch.device]) -> str:
    from .features.base import resolve_backend

    return resolve_backend(cfg.features.backend, device)


def score_clip(video: VideoLike, *, masks: Any = None, poses: Any = None,
               config: Union[None, str, Path, dict, GeoConConfig] = None,
               device: Union[None, str, torch.device] = None,
               preset: Optional[str] = None) -> ClipResult:
    """Score one clip (paper Algorithm 1 A-C, E; plus foreground / epipolar per ``preset``).

    Args:
        video: a path (video file, gif, image folder), a (T, C, H, W) tensor (uint8 or float in
            [0, 1], any device), or a :class:`~geocon_torch.types.Clip`.
        masks: object masks: a PNG folder / .npz path or a (T, H, W) / (T, K, H, W) tensor
            (see :mod:`geocon_torch.segment.files`); None -> ``config.segment.method`` (auto:
            SAM-2 when a checkpoint is configured, else weight-free motion segmentation).
        poses: a pose log (JSON / .npz path, (4, 4) or (P, 4, 4) tensor; see
            :mod:`geocon_torch.gate.poses`) for the translation gate; None -> DUSt3R when a
            checkpoint is configured, else the weight-free parallax gate.
        config: GeoConConfig, dict, JSON path or None (paper defaults).
        device: where every stage runs (features, fits, masks, flow, epipolar). Default: the
            input's device when it is already on an accelerator, else CUDA when available,
            else the CPU.
        preset: "geocon" (background + foreground), "background" (background only: the
            fastest), "worldatlas" / "gvgc" (epipolar trio only) or "all"; default
            ``config.preset``.

    Returns:
        ClipResult (``to_dict()`` is the JSON schema of :mod:`geocon_torch.result`).

    Raises:
        VideoReadError: the video cannot be read (use :func:`score_clips` to get an ``error``
            result instead); GeoConError for an invalid config / masks / poses argument.
    """
    cfg = load_config(config)
    preset = preset or cfg.preset
    if preset not in PRESETS:
        raise InputError(f"preset must be one of {PRESETS}, got {preset!r}")
    dev = torch.device(device) if device is not None else None
    timer = _Timer()
    t_start = time.perf_counter()
    with timer("read"):
        clip = _read(video, cfg, dev)
    if dev is None:  # decided once, so no stage picks a device of its own
        from .features.base import resolve_device

        dev = clip.frames.device if clip.frames.device.type != "cpu" else resolve_device(None)
    path = None if isinstance(video, (torch.Tensor, Clip)) else str(video)
    res = ClipResult(clip=clip.name, path=path, content_hash=_content_hash(video),
                     config=cfg.to_dict(), config_hash=cfg.config_hash())
    res.backends = {"features": None, "flow": None, "masks": None, "gate": None}
    res.extra["frames"] = clip.num_frames
    res.extra["working_size"] = list(clip.size)
    pairs = background_pairs(clip.num_frames, cfg.background.pair_stride)
    objects = None
    primary_status, primary_reason = "ok", None
    if preset in ("geocon", "background", "all"):
        if pairs.shape[0] == 0:
            res.background = {"status": "not_applicable", "pairs": 0,
                              "reason": f"clip has {clip.num_frames} frame(s): no frame pairs"}
            res.gate = _no_gate(None, None)
        else:
            block, gate, regime, category, objects, backends = _background(
                clip, pairs, masks, poses, cfg, dev, timer)
            res.background, res.gate, res.regime, res.behaviour = block, gate, regime, category
            res.backends.update(backends)
        primary_status = res.background.get("status", "ok")
        primary_reason = res.background.get("reason")
        if preset in ("geocon", "all"):
            res.foreground = _section("foreground",
                                      lambda: _foreground(clip, objects, cfg, dev), timer)
            res.backends["flow"] = res.foreground.get("flow")
    if preset in ("worldatlas", "gvgc", "all"):
        which = "worldatlas" if preset == "all" else preset
        res.epipolar = _section("epipolar", lambda: epipolar_block(video, clip, cfg, which, dev), timer)
        if preset == "all":
            res.extra["epipolar_gvgc"] = _section(
                "epipolar_gvgc", lambda: epipolar_block(video, clip, cfg, "gvgc", dev), timer)
        else:
            primary_status = res.epipolar.get("status", "ok")
            primary_reason = res.epipolar.get("reason")
            if primary_status == "error":
                primary_reason = f"epipolar section failed: {primary_reason}"
        res.backends.setdefault("epipolar", which)
    res.status = primary_status if primary_status in ("ok", "not_applicable", "error") else "ok"
    res.reason = primary_reason
    timer.times["total"] = time.perf_counter() - t_start
    res.timing_s = {k: round(v, 4) for k, v in timer.times.items()}
    res.background = jsonable(res.background)
    return res


def score_clips(videos: Sequence[VideoLike], *, masks: Optional[Sequence[Any]] = None,
                poses: Optional[Sequence[Any]] = None,
                config: Union[None, str, Path, dict, GeoConConfig] = None,
                device: Union[None, str, torch.device] = None,
                preset: Optional[str] = None) -> List[ClipResult]:
    """Score many clips; never raises for one bad clip (its result has ``status: "error"``).

    ``videos`` may also be a (B, T, C, H, W) tensor; ``masks`` / ``poses`` are per-clip lists
    (or None). Each clip is scored exactly as by :func:`score_clip`.
    """
    cfg = load_config(config)
    if isinstance(videos, torch.Tensor):
        if videos.ndim != 5:
            raise VideoReadError(f"a batch of clips must be (B, T, C, H, W), got "
                                 f"{tuple(videos.shape)}")
        videos = list(videos.unbind(0))
    n = len(videos)
    masks = list(masks) if masks is not None else [None] * n
    poses = list(poses) if poses is not None else [None] * n
    if len(masks) != n or len(poses) != n:
        raise InputError(f"masks / poses lists must have one entry per clip ({n})")
    out: List[ClipResult] = []
    for k, (video, m, p) in enumerate(zip(videos, masks, poses)):  # one clip at a time
        name = Path(str(video)).stem if isinstance(video, (str, Path)) else f"clip{k}"
        try:
            out.append(score_clip(video, masks=m, poses=p, config=cfg, device=device,
                                  preset=preset))
        except Exception as exc:  # noqa: BLE001 - a bad clip must not stop the batch
            out.append(ClipResult.failed(
                name, "error", f"{type(exc).__name__}: {exc}", cfg,
                path=str(video) if isinstance(video, (str, Path)) else None))
    return out
