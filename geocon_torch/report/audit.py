"""Per-clip audit cards: gate rationale, per-pair IR/GE timeline, matches (inliers / outliers)
drawn on the frames, epipolar lines, object masks.

The stored result carries the gate block and ``background.per_pair`` (timeline), but no match
coordinates. The drawings come from :func:`~geocon_torch.report.evidence.pair_evidence`: the
background section re-run on the video with the result's own config and the manifest's masks /
poses, so the pair drawn is the pair scored (same correspondences, masks, RANSAC seed and row;
its drawn inliers are the ones its stored IR counted). The pair shown is the valid pair with the
lowest IR (the most telling one).
"""
from __future__ import annotations

import errno
import html
import json
import math
import os
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple, Union

import numpy as np

from ..bench.ids import file_key
from ..io._atomic import filename_text
from ..measures.calibration import STAT_LABEL, fmt_apart
from ..presets import PRESETS
from . import plots
from .evidence import PairEvidence, PairMismatchError, pair_evidence
from .text import (EPIPOLAR_NAMES, band_text, calibrated_checks, calibrated_verdict,
                   calibration_off, calibration_source, compact, configured_band,
                   epipolar_blocks, epipolar_text, esc, gate_unit, h_impossible, is_scored,
                   label, lens_line, no_bounds_reason, pair_counts, result_warnings,
                   score_line, scoring_notes, stored_u_margin, u_resolution, verdict_word)


def gate_rationale(gate: Optional[Dict[str, Any]], regime: Optional[str],
                   u_margin: Optional[float] = None) -> str:
    """One readable sentence: which statistic, its value (with its unit: "ref px" for
    ``parallax_magnitude``), the thresholds the gate applies (the configured band where the
    clip's noise raised it; "H not possible" where the noise floor reaches half the F
    threshold: :func:`~.text.band_text`), the decision ("unknown" for none) with the reason of
    a U, and how a U was resolved, naming the deciding term (:func:`~.text.u_resolution`;
    ``u_margin``: the result's ``gate.u_margin``, None: the default)."""
    if not gate or not gate.get("method"):
        return "no gate decision recorded"
    method = gate.get("method") or "?"
    stat = gate.get("statistic")
    th = gate.get("thresholds") or {}
    decision = gate.get("decision")
    ev = gate.get("evidence") or {}
    name = ev.get("statistic_name") or ("t_inf = ||t||_inf" if method in ("poses", "dust3r")
                                        else "statistic")
    u = f" {gate_unit(name)}" if gate_unit(name) else ""
    parts = [f"gate method '{method}'"]
    if isinstance(stat, (int, float)):
        parts.append(f"{name} = {stat:.4g}{u}")
    else:
        parts.append(f"{name} unavailable")
    lo, hi = th.get("low"), th.get("high")
    if isinstance(lo, (int, float)) and isinstance(hi, (int, float)):
        conf = configured_band(gate)
        adapted = conf is not None and conf != (float(lo), float(hi))
        parts.append(band_text(gate, lo, hi, u, ".4g")
                     + (", U below" if h_impossible(gate) else ", U in between")
                     + (f" (noise-adaptive band; configured {conf[0]:g} / {conf[1]:g}{u})"
                        if adapted else ""))
    why_u = ev.get("why_u") if decision == "U" else None
    parts.append(f"decision {label(decision)}" + (f" ({why_u})" if why_u else ""))
    resolved = u_resolution(gate, stored_u_margin({}) if u_margin is None else u_margin)
    if resolved:
        parts.append(resolved)
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


def _pick_pair(series: Optional[Dict[str, list]], num_pairs: Optional[int]) -> int:
    """Index (among the evaluated pairs) of the valid pair with the lowest IR; else the middle
    pair."""
    if series:
        cand = [(ir, k) for k, (ir, v) in enumerate(zip(series["ir"], series["valid"]))
                if v and ir is not None]
        if cand:
            return min(cand)[1]
        return len(series["index"]) // 2
    return int(num_pairs or 0) // 2


def _timeline_alt(series: Dict[str, list]) -> str:
    """What the timeline figure shows, for its alt text: pairs, invalid ones, the lowest IR."""
    valid = [(ir, pair) for ir, pair, ok in zip(series["ir"], series["pair"], series["valid"])
             if ok and ir is not None]
    n, bad = len(series["index"]), series["valid"].count(False)
    low = min(valid, key=lambda v: v[0]) if valid else None
    return (f"per-pair IR (left axis) and GE in px (right axis) of {n} frame pairs at scale "
            f"{series['scale'][0]:g}; {bad} invalid pair{'s' * (bad != 1)} (marked x)"
            + (f"; lowest IR {fmt_apart(float(low[0]), 1.0)} at pair {tuple(low[1] or ())}"
               if low else ""))


def _hwc(frame: Any) -> np.ndarray:
    """(3, H, W) uint8 tensor -> (H, W, 3) numpy."""
    return frame.permute(1, 2, 0).numpy()


def _draw_pair(d: PairEvidence, img_dir: Path, slug: str, seg: Dict[str, Any]
               ) -> Tuple[List[Tuple[Path, str, str]], List[str]]:
    """The matches, epipolar lines and masks figures of one pair: ([(png, caption, alt)],
    notes); the alt text says what the figure shows (pair, inlier / outlier counts, IR), the
    caption what kind of figure it is."""
    imgs: List[Tuple[Path, str, str]] = []
    notes: List[str] = []
    f1, f2 = _hwc(d.frame1), _hwc(d.frame2)
    x1, x2, inl = d.x1.double().numpy(), d.x2.double().numpy(), d.inliers.numpy()
    n_in = int(inl.sum())
    n_out = len(inl) - n_in
    title = (f"pair {d.pair}: {n_in} {d.model}-inliers (green) / {n_out} outliers "
             f"(red); IR {fmt_apart(d.ir, 1.0)}")
    alt = (f"frames {d.pair[0]} and {d.pair[1]} side by side: {n_in} {d.model}-inlier matches "
           f"(green solid lines, dots) and {n_out} outlier{'s' * (n_out != 1)} (red dashed "
           f"lines, crosses); pair IR {fmt_apart(d.ir, 1.0)}")
    imgs.append((plots.matches(f1, f2, x1, x2, inl, img_dir / f"card_{slug}_matches.png",
                               title=title), "matches on the frame pair (as scored)", alt))
    if d.F_valid and len(x1):
        sel = np.flatnonzero(inl)[:: max(1, n_in // 20)][:20]
        if sel.size == 0:
            sel = np.arange(min(20, len(x1)))
        imgs.append((plots.epipolar_lines(f2, d.F.numpy(), x1[sel], x2[sel],
                                          img_dir / f"card_{slug}_epipolar.png",
                                          title="epipolar lines F x1 in frame j"),
                     "epipolar lines", f"frame {d.pair[1]} with the epipolar lines F x1 of "
                     f"{sel.size} matches of pair {d.pair} and their matched points"))
    else:
        notes.append("no valid fundamental matrix on this pair: no epipolar lines")
    if d.objects is not None and d.objects.shape[0] > 0:
        masks = d.objects.numpy()
        imgs.append((plots.masks_overlay(f1, masks, img_dir / f"card_{slug}_masks.png",
                                         title=f"{masks.shape[0]} object mask(s), frame "
                                               f"{d.pair[0]}"), "object masks",
                     f"frame {d.pair[0]} with {masks.shape[0]} object mask(s) tinted, one "
                     "colour each"))
    else:
        notes.append(f"object masks: {seg.get('method', 'none')} ({seg.get('objects', 0)} "
                     "objects): none on this pair")
    return imgs, notes


#: the card's advice when the clip's pairs cannot be re-derived without its masks / poses files
#: and the result records none (``geocon report`` takes no --masks / --poses)
NO_SIDE_FILES = ("the result records no masks / poses files: score the clip with geocon score "
                 "--masks / --poses --json (which records them in the result's meta) and build "
                 "the report again, or draw the pair with geocon explain RESULTS --clip ID "
                 "--masks / --poses")


def _entry(row: Dict[str, Any]) -> Dict[str, Any]:
    try:
        return json.loads(row.get("entry_json") or "{}") or {}
    except (TypeError, ValueError):
        return {}


#: errnos of a failed write to the output disk: full, quota, file-size limit, read-only, I/O
OUTPUT_DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO,
                                errno.EROFS})


def _output_disk_error(exc: BaseException, img_dir: Path) -> bool:
    """True for an OSError of writing the report's own images: an errno of
    :data:`OUTPUT_DISK_ERRNOS` on a file in ``img_dir`` (a card PNG; an error of reading the
    clip or its masks / poses files names those files and stays the card's note)."""
    if not isinstance(exc, OSError) or exc.errno not in OUTPUT_DISK_ERRNOS:
        return False
    name = filename_text(exc.filename)
    if name is None:
        return False
    folder = os.path.realpath(img_dir)
    return os.path.dirname(os.path.realpath(name)) == folder


def _drawings(row: Dict[str, Any], res: Dict[str, Any], img_dir: Path, slug: str,
              device: Optional[str]) -> Tuple[List[Tuple[Path, str, str]], List[str]]:
    """The pair figures of a card, or a note saying why there are none; raises only an
    OSError of writing its PNGs to the output disk (:func:`_output_disk_error`)."""
    bg = res.get("background") or {}
    entry = _entry(row)
    meta = res.get("meta") if isinstance(res.get("meta"), dict) else {}
    masks = entry.get("masks_path") or meta.get("masks_path")
    poses = entry.get("poses_path") or meta.get("poses_path")
    try:
        d = pair_evidence(res, _pick_pair(timeline_series(bg), bg.get("pairs")),
                          video=row.get("path") or res.get("path"), masks=masks, poses=poses,
                          device=device)
        return _draw_pair(d, img_dir, slug, bg.get("segment") or {})
    except Exception as exc:  # noqa: BLE001 - a card never breaks the report
        if _output_disk_error(exc, img_dir):  # the report's own files: the command fails
            raise
        note = f"drawings unavailable: {type(exc).__name__}: {exc}"
        if isinstance(exc, PairMismatchError) and not (masks or poses):
            note += f" ({NO_SIDE_FILES})"
        return [], [note]


def _fmt(v: Any, digits: int = 4, near: Optional[float] = None) -> str:
    """A fact: floats with ``digits`` significant digits (more when they are needed to tell
    the value from ``near``, e.g. an IR of 0.99996 from 1), "-" for None / NaN / inf (as the
    page's tables), else escaped (bidi-isolated: :func:`~.text.esc`)."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return "-"
        return fmt_apart(v, near, digits=digits) if near is not None else f"{v:.{digits}g}"
    return esc("-" if v is None else str(v))


def _bounds_html(bg: Dict[str, Any]) -> str:
    """Every bound of the calibrated gate (value, threshold, ok / FAILS; failed ones in bold),
    the same as ``geocon explain`` prints, headed by the stored verdict and followed by the
    bounds applied ("applied: F bounds of default:opencv-sift (002e...)"); without bounds
    "n/a (<the stored reason>)" as ``geocon explain`` says it."""
    checks = calibrated_checks(bg)
    source = calibration_source(bg)
    if checks is None:
        if "pass_calibrated" not in bg:
            return esc(calibration_off(bg))
        return esc(f"{verdict_word(bg.get('pass_calibrated'))} ({no_bounds_reason(bg)})"
                           + (f"; {source}" if source else ""))
    items = [html.escape(c.describe()) if c.passed else f"<b>{html.escape(c.describe())}</b>"
             for c in checks]
    failed = [c.statistic for c in checks if not c.passed]
    head = (verdict_word(bg.get("pass_calibrated"))
            + (f" (failed: {esc(', '.join(STAT_LABEL[s][0] for s in failed))})"
               if failed else ""))
    return (head + "<ul class='bounds'>" + "".join(f"<li>{i}</li>" for i in items) + "</ul>"
            + (f"<span class='muted'>applied: {esc(source)}</span>" if source else ""))


def _no_trio(res: Dict[str, Any]) -> str:
    """The card's epipolar row of a result without an ``epipolar`` block: the clip was not
    scored, or its preset has no epipolar trio."""
    preset = PRESETS.get(str((res.get("config") or {}).get("preset")))
    if res.get("status") != "ok" and (preset is None or "epipolar" in preset.sections):
        return f"not computed (clip not scored: {esc(str(res.get('status')))})"
    return "not computed (preset without the epipolar trio)"


def _facts(row: Dict[str, Any], res: Dict[str, Any]) -> List[Tuple[str, str]]:
    """The card's fact table: (label, HTML-escaped value) rows."""
    bg = res.get("background") or {}
    fg = res.get("foreground") or {}
    objs = [o for o in fg.get("objects") or [] if isinstance(o, dict)]
    obj_txt = ", ".join(f"#{esc(str(o.get('id')))}: AdaDFRC "
                        f"{_fmt(o.get('adadfrc_mean'))} px², "
                        f"AdaP90 {_fmt(o.get('adap90'))} px²" for o in objs) or \
        f"none ({_fmt(fg.get('reason'))})"
    unscored = res.get("status") != "ok" and not is_scored(bg)  # n/a, not "unknown" / "-"
    if not objs and not bg.get("segment") and (res.get("backends") or {}).get("masks") is None \
            and fg and not is_scored(bg):  # no masks given, the background stopped before
        obj_txt = f"none (segmentation not run: background not scored, {_fmt(bg.get('status'))})"
    epipolar = [(EPIPOLAR_NAMES[p][0], esc(epipolar_text(p, b))) for p, b in epipolar_blocks(res)]
    notes = scoring_notes(res)
    warns = result_warnings(res)
    return [
        ("generator / prompt cat.", f"{esc(label(row.get('generator')))} / "
                                    f"{esc(label(row.get('prompt_category')))}"),
        ("behaviour", esc(label(res.get("behaviour")))),
        ("score", esc(score_line(res))),
        ("status", f"{_fmt(res.get('status'))}" + (f": {_fmt(res.get('reason'))}"
                                                   if res.get("reason") else "")),
        ("IR / GE (px)", "n/a (not scored)" if unscored else
         f"{_fmt(bg.get('ir'), near=1.0)} / {_fmt(bg.get('ge_px'))} "
         f"(H: {_fmt(bg.get('ir_h'), near=1.0)} / {_fmt(bg.get('ge_h_px'))}, "
         f"F: {_fmt(bg.get('ir_f'), near=1.0)} / {_fmt(bg.get('ge_f_px'))})"),
        ("valid pairs", "n/a (not scored)" if unscored else
         f"{html.escape(pair_counts(bg))}; report gate pass: "
         f"{html.escape(compact(bg.get('pass')))} (paper), "
         f"{esc(calibrated_verdict(bg))}"),
        ("calibrated gate", _bounds_html(bg)),
        ("gate", esc(gate_rationale(res.get("gate"), res.get("regime"),
                                    stored_u_margin(res)))),
        ("objects", obj_txt),
        *(epipolar or [("epipolar trio", _no_trio(res))]),
        *([("scoring notes", "<br>".join(esc(n) for n in notes))] if notes else []),
        *([("warnings", "<br>".join(esc(w) for w in warns))] if warns else []),
        ("backends", esc(compact({k: "not run" if v is None else v  # e.g. flow, no movers
                                  for k, v in (res.get("backends") or {}).items()}))),
        ("provenance", f"config {_fmt(res.get('config_hash'))}, version "
                       f"{_fmt(res.get('version'))}, schema {_fmt(res.get('schema_version'))}"),
    ]


def audit_card(row: Dict[str, Any], img_dir: Union[str, Path], *, draw: bool = True,
               device: Optional[str] = None, rel_to: Union[str, Path, None] = None) -> str:
    """HTML fragment of one clip's audit card; PNGs are written to ``img_dir``.

    ``row`` is a joined row of :func:`geocon_torch.bench.load_results`. With ``draw`` the
    matches / epipolar lines / masks of one pair are re-derived from the video as they were
    scored (:func:`~geocon_torch.report.evidence.pair_evidence`; a failure is reported on the
    card, except an OSError of writing the card's PNGs to a full / read-only disk, a quota or a
    file-size limit, which is raised naming the PNG).
    """
    img_dir, rel_to = Path(img_dir), (None if rel_to is None else Path(rel_to))
    res = row.get("result") or {}
    bg = res.get("background") or {}
    cid = str(row.get("clip_id") or res.get("clip"))
    slug = file_key(cid, row.get("content_hash") or res.get("content_hash"),
                    row.get("path") or res.get("path"))  # unique: never another clip's PNGs
    img_dir.mkdir(parents=True, exist_ok=True)
    rel = (lambda p: Path(p).relative_to(rel_to).as_posix()) if rel_to else (  # noqa: E731
        lambda p: Path(p).as_posix())
    imgs: List[Tuple[str, str, str]] = []  # (src, caption, alt)
    notes: List[str] = []
    series = timeline_series(bg)
    if series:
        p = plots.timeline(series["index"], series["ir"], series["ge"], series["valid"],
                           img_dir / f"card_{slug}_timeline.png",
                           title=f"per-pair IR / GE (scale {series['scale'][0]:g})")
        imgs.append((rel(p), "per-pair IR / GE timeline", _timeline_alt(series)))
    else:
        notes.append("no per-pair rows in the result (background.per_pair)")
    if draw and res.get("status") != "error":
        pngs, more = _drawings(row, res, img_dir, slug, device)
        imgs += [(rel(png), caption, alt) for png, caption, alt in pngs]
        notes += more
    facts = _facts(row, res)
    lens = lens_line(res)
    if lens is not None:  # the pictures show undistorted frames (black corners: pincushion)
        facts.append(("lens", esc(lens)))
    out = [f'<div class="card" id="card-{html.escape(slug)}">'
           f'<h3 id="card-{html.escape(slug)}-h">{esc(cid)}</h3>',
           f"<table class='facts' aria-labelledby='card-{html.escape(slug)}-h'>"]
    out += [f"<tr><th scope='row'>{k}</th><td>{v}</td></tr>" for k, v in facts]
    out.append("</table>")
    out += [f'<figure><img src="{html.escape(src)}" alt="{html.escape(f"{cid}: {alt}")}">'
            f"<figcaption>{html.escape(caption)}</figcaption></figure>"
            for src, caption, alt in imgs]
    if notes:
        out.append("<ul class='notes'>" + "".join(f"<li>{esc(n)}</li>" for n in notes)
                   + "</ul>")
    out.append("</div>")
    return "\n".join(out)
