"""Per-clip audit cards: gate rationale, per-pair IR/GE timeline, matches (inliers / outliers)
drawn on the frames, epipolar lines, object masks.

The stored result carries the gate block and ``background.per_pair`` (timeline), but no match
coordinates. The drawings therefore re-derive the matches of ONE frame pair from the video: the
clip is read with the result's own config, correspondences come from
:func:`geocon_torch.features.extract_correspondences` at the finest scale, object masks from the
manifest's ``masks_path`` are removed as in the pipeline, and both models are fitted with the
pipeline's own batched RANSAC call (``geocon_torch.pipeline._fit_both``) — no scoring logic is
duplicated here. The pair shown is the valid pair with the lowest IR (the most telling one).
"""
from __future__ import annotations

import html
import json
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from ..config import GeoConConfig
from . import plots
from ..errors import InputError


def gate_rationale(gate: Optional[Dict[str, Any]], regime: Optional[str]) -> str:
    """One readable sentence: which statistic, its value, the thresholds, the decision."""
    if not gate:
        return "no gate decision recorded"
    method = gate.get("method") or "?"
    stat = gate.get("statistic")
    th = gate.get("thresholds") or {}
    decision = gate.get("decision")
    ev = gate.get("evidence") or {}
    name = ev.get("statistic_name") or ("t_inf = ||t||_inf" if method in ("poses", "dust3r")
                                        else "statistic")
    parts = [f"gate method '{method}'"]
    if isinstance(stat, (int, float)):
        parts.append(f"{name} = {stat:.4g}")
    else:
        parts.append(f"{name} unavailable")
    lo, hi = th.get("low"), th.get("high")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        parts.append(f"H if <= {lo:g}, F if >= {hi:g}, U in between")
    parts.append(f"decision {decision}")
    if decision == "U" and ev.get("u_resolved"):
        parts.append(f"U resolved to {ev['u_resolved']} (GRIC delta {ev.get('gric_delta', 0):.3g})")
    if regime:
        parts.append(f"background scored with {regime}")
    return "; ".join(parts)


def timeline_series(background: Optional[Dict[str, Any]]) -> Optional[Dict[str, list]]:
    """Per-pair series of the finest scale from ``background.per_pair``: pair index, (i, j),
    IR / GE / validity of the model used for that pair."""
    rows = (background or {}).get("per_pair") or []
    rows = [r for r in rows if isinstance(r, dict)]
    if not rows:
        return None
    finest = max(float(r.get("scale", 1.0) or 1.0) for r in rows)
    rows = [r for r in rows if float(r.get("scale", 1.0) or 1.0) == finest]
    out: Dict[str, list] = {"index": [], "pair": [], "ir": [], "ge": [], "valid": [],
                            "model": []}
    for k, r in enumerate(rows):
        fam = "f" if r.get("model") == "F" else "h"
        out["index"].append(k)
        out["pair"].append(r.get("pair"))
        out["ir"].append(r.get(f"ir_{fam}", r.get("ir")))
        out["ge"].append(r.get(f"ge_{fam}_px", r.get("ge_px")))
        out["valid"].append(bool(r.get(f"valid_{fam}", r.get("valid", True))))
        out["model"].append(r.get("model"))
    out["scale"] = [finest]
    return out


def _pick_pair(series: Optional[Dict[str, list]], num_frames: int) -> Tuple[int, int]:
    if series:
        cand = [(ir, p) for ir, p, v in zip(series["ir"], series["pair"], series["valid"])
                if v and ir is not None and p]
        if cand:
            return tuple(min(cand, key=lambda c: c[0])[1])  # type: ignore[return-value]
        if series["pair"] and series["pair"][len(series["pair"]) // 2]:
            return tuple(series["pair"][len(series["pair"]) // 2])  # type: ignore[return-value]
    mid = max(0, num_frames // 2 - 1)
    return mid, min(mid + 1, num_frames - 1)


def _config_of(result: Dict[str, Any]) -> GeoConConfig:
    try:
        return GeoConConfig.from_dict(result.get("config") or {})
    except Exception:  # noqa: BLE001 - results from another version: defaults still draw
        return GeoConConfig()


def derive_matches(result: Dict[str, Any], *, video: Optional[str] = None,
                   masks_path: Optional[str] = None, device: Optional[str] = None
                   ) -> Dict[str, Any]:
    """Re-derive one pair's matches and both fits for the drawings (see module docstring).

    Returns frames (H, W, 3 uint8) ``frame1`` / ``frame2``, ``x1`` / ``x2`` (N, 2) px of the
    background matches, ``inliers`` (N,) bool of the regime's model, ``F`` / ``H`` (3, 3),
    ``pair`` (i, j), ``masks`` (K, H, W) bool of frame i or None, ``regime``.
    """
    import torch

    from ..features import extract_correspondences
    from ..pipeline import _fit_both, _read

    cfg = _config_of(result)
    path = video or result.get("path")
    if not path:
        raise InputError("the result has no video path to draw from")
    clip = _read(path, cfg, torch.device(device) if device else None)
    i, j = _pick_pair(timeline_series(result.get("background")), clip.num_frames)
    if clip.num_frames < 2 or j >= clip.num_frames:
        raise InputError(f"clip has {clip.num_frames} frame(s): no pair to draw")
    pairs = torch.tensor([[i, j]], dtype=torch.long)
    finest = max(cfg.features.scales)
    corrs = extract_correspondences(clip, pairs, cfg.features, scales=[finest], device=device)
    if not corrs:
        raise InputError("frames too small for feature extraction")
    c = next(iter(corrs.values()))
    mask = c.mask
    objects = None
    if masks_path:
        from ..segment.background import background_keep, background_mask
        from ..segment.files import load_masks

        objects = load_masks(masks_path, num_frames=clip.num_frames, size=clip.size,
                             frame_indices=clip.frame_indices, device=c.x1.device)
        if objects.shape[1] > 0:
            bg = background_mask(clip.content_mask.to(c.x1.device), objects,
                                 cfg.segment.safety_margin_px)
            mask = mask & background_keep(bg, c.x1, c.x2, c.pairs.to(c.x1.device))
    fit_h, fit_f = _fit_both(c.x1, c.x2, mask, c.scores, cfg)
    regime = result.get("regime") or "H"
    fit = fit_f if regime == "F" else fit_h
    keep = mask[0].cpu().numpy()
    frames = clip.frames.cpu().permute(0, 2, 3, 1).numpy()
    return {
        "frame1": frames[i], "frame2": frames[j], "pair": (i, j), "regime": regime,
        "x1": c.x1[0].cpu().double().numpy()[keep], "x2": c.x2[0].cpu().double().numpy()[keep],
        "inliers": fit.inliers[0].cpu().numpy()[keep],
        "F": fit_f.model[0].cpu().double().numpy(), "H": fit_h.model[0].cpu().double().numpy(),
        "F_valid": bool(fit_f.valid[0]), "H_valid": bool(fit_h.valid[0]),
        "masks": None if objects is None else objects[i].cpu().numpy(),
    }


def _fmt(v: Any, digits: int = 4) -> str:
    if isinstance(v, float):
        return f"{v:.{digits}g}"
    return html.escape("-" if v is None else str(v))


def audit_card(row: Dict[str, Any], img_dir: Path, *, draw: bool = True,
               device: Optional[str] = None, rel_to: Optional[Path] = None) -> str:
    """HTML fragment of one clip's audit card; PNGs are written to ``img_dir``.

    ``row`` is a joined row of :func:`geocon_torch.bench.load_results`. With ``draw`` the
    matches / epipolar lines / masks are re-derived from the video (a failure is reported on
    the card, never raised).
    """
    res = row.get("result") or {}
    bg = res.get("background") or {}
    cid = str(row.get("clip_id") or res.get("clip"))
    slug = "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in cid)[:60]
    img_dir.mkdir(parents=True, exist_ok=True)
    rel = (lambda p: Path(p).relative_to(rel_to).as_posix()) if rel_to else (  # noqa: E731
        lambda p: Path(p).as_posix())
    imgs: List[Tuple[str, str]] = []
    notes: List[str] = []
    series = timeline_series(bg)
    if series:
        p = plots.timeline(series["index"], series["ir"], series["ge"], series["valid"],
                           img_dir / f"card_{slug}_timeline.png",
                           title=f"per-pair IR / GE (scale {series['scale'][0]:g})")
        imgs.append((rel(p), "per-pair IR / GE timeline"))
    else:
        notes.append("no per-pair rows in the result (background.per_pair)")
    entry = {}
    if row.get("entry_json"):
        try:
            entry = json.loads(row["entry_json"]) or {}
        except (TypeError, ValueError):
            entry = {}
    meta = res.get("meta") if isinstance(res.get("meta"), dict) else {}
    masks_path = entry.get("masks_path") or meta.get("masks_path")
    if draw and res.get("status") != "error":
        try:
            d = derive_matches(res, video=row.get("path") or res.get("path"),
                               masks_path=masks_path, device=device)
            n_in = int(d["inliers"].sum())
            title = (f"pair {d['pair']}: {n_in} {d['regime']}-inliers (green) / "
                     f"{len(d['inliers']) - n_in} outliers (red)")
            p = plots.matches(d["frame1"], d["frame2"], d["x1"], d["x2"], d["inliers"],
                              img_dir / f"card_{slug}_matches.png", title=title)
            imgs.append((rel(p), "matches on the frame pair"))
            if d["F_valid"] and len(d["x1"]):
                sel = np.flatnonzero(d["inliers"])[:: max(1, int(d["inliers"].sum()) // 20)][:20]
                if sel.size == 0:
                    sel = np.arange(min(20, len(d["x1"])))
                p = plots.epipolar_lines(d["frame2"], d["F"], d["x1"][sel], d["x2"][sel],
                                         img_dir / f"card_{slug}_epipolar.png",
                                         title="epipolar lines F x1 in frame j")
                imgs.append((rel(p), "epipolar lines"))
            else:
                notes.append("no valid fundamental matrix on this pair: no epipolar lines")
            if d["masks"] is not None and d["masks"].shape[0] > 0:
                p = plots.masks_overlay(d["frame1"], d["masks"],
                                        img_dir / f"card_{slug}_masks.png",
                                        title=f"{d['masks'].shape[0]} object mask(s), frame "
                                              f"{d['pair'][0]}")
                imgs.append((rel(p), "object masks"))
            else:
                seg = bg.get("segment") or {}
                notes.append(f"object masks: {seg.get('method', 'none')} "
                             f"({seg.get('objects', 0)} objects); drawn only from a masks file")
        except Exception as exc:  # noqa: BLE001 - a card never breaks the report
            notes.append(f"drawings unavailable: {type(exc).__name__}: {exc}")
    fg = res.get("foreground") or {}
    objs = [o for o in fg.get("objects") or [] if isinstance(o, dict)]
    obj_txt = ", ".join(f"#{o.get('id')}: AdaDFRC {_fmt(o.get('adadfrc_mean'))}, "
                        f"AdaP90 {_fmt(o.get('adap90'))}" for o in objs) or \
        f"none ({_fmt(fg.get('reason'))})"
    ep = res.get("epipolar") or {}
    facts = [
        ("model / category", f"{_fmt(row.get('model'))} / {_fmt(row.get('category'))}"),
        ("status", f"{_fmt(res.get('status'))}" + (f": {_fmt(res.get('reason'))}"
                                                   if res.get("reason") else "")),
        ("IR / GE (px)", f"{_fmt(bg.get('ir'))} / {_fmt(bg.get('ge_px'))} "
                         f"(H: {_fmt(bg.get('ir_h'))} / {_fmt(bg.get('ge_h_px'))}, "
                         f"F: {_fmt(bg.get('ir_f'))} / {_fmt(bg.get('ge_f_px'))})"),
        ("valid pairs", f"{_fmt(bg.get('valid_pairs'))} of {_fmt(bg.get('pairs'))}; report "
                        f"gate pass: {_fmt(bg.get('pass'))}"),
        ("gate", html.escape(gate_rationale(res.get("gate"), res.get("regime")))),
        ("objects", obj_txt),
        ("epipolar trio", f"error {_fmt(ep.get('epipolar_error'))} px, inlier rate "
                          f"{_fmt(ep.get('epipolar_inlier_rate'))}, coverage "
                          f"{_fmt(ep.get('feature_match_coverage'))}" if ep else "-"),
        ("backends", html.escape(json.dumps(res.get("backends") or {}, sort_keys=True))),
        ("provenance", f"config {_fmt(res.get('config_hash'))}, version "
                       f"{_fmt(res.get('version'))}, schema {_fmt(res.get('schema_version'))}"),
    ]
    out = [f'<div class="card" id="card-{html.escape(slug)}"><h3>{html.escape(cid)}</h3>',
           "<table class='facts'>"]
    out += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in facts]
    out.append("</table>")
    out += [f'<figure><img src="{html.escape(src)}" alt="{html.escape(alt)}">'
            f"<figcaption>{html.escape(alt)}</figcaption></figure>" for src, alt in imgs]
    if notes:
        out.append("<ul class='notes'>" + "".join(f"<li>{html.escape(n)}</li>" for n in notes)
                   + "</ul>")
    out.append("</div>")
    return "\n".join(out)
