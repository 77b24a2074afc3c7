"""``geocon explain``: a short plain-text account of one clip's verdict.

Four parts, each from the stored result and, for the worst pair, from the same re-derived
evidence as the audit card (:func:`~geocon_torch.report.evidence.pair_evidence`), after a
line naming the geocon_torch version that scored the result when it is not the running one
(``Scored by geocon_torch 0.1.0 (this is 0.2.1).``: the evidence is re-derived by this one),
the score line, and, when the frames were undistorted (the result's ``io.lens``), a line with
the lens (:func:`~geocon_torch.report.text.lens_line`; the audit card shows the same text):

1. the regime and why: gate method, its statistic against the H / F thresholds (hysteresis
   band), how a U was resolved;
2. the report gate: clip IR and GE against ``background.report_ir`` / ``report_ge_px``, and the
   calibrated gate when the result carries one: every bound with the clip's value, the
   threshold (px at the working size), ok / FAILS, why the bound is there, and the failed
   one(s) named in the verdict line;
3. which pairs fail (finest-scale ``background.per_pair`` rows below the thresholds) and, for the
   worst pair, where its outliers lie (image quadrants, near object masks);
4. what would change the verdict: the threshold of the sensitivity scan at which IR would pass,
   the statistic value at which the gate would flip.
"""
from __future__ import annotations

from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from .._version import __version__
from ..config import GeoConConfig
from ..errors import GeoConError, InputError
from ..result import ClipResult
from .audit import timeline_series
from .evidence import PairEvidence, pair_evidence
from ..measures.calibration import BOUND_WHY, digits_apart
from .text import (EPIPOLAR_NAMES, band_text, calibrated_checks, configured_band,
                   epipolar_blocks, epipolar_text, gate_unit, h_impossible, has_background,
                   is_missing, is_scored, label, lens_line, no_bounds_reason, printable,
                   result_warnings, score_line, scoring_notes, stored_u_margin, u_resolution,
                   verdict_word)

ResultLike = Union[ClipResult, Mapping[str, Any]]
QUADRANTS = ("top-left", "top-right", "bottom-left", "bottom-right")
NEAR_MASK_PX = 8  # outliers within this many px of an object mask count as "at an object edge"


def _f(v: Any, digits: int = 4) -> str:
    return f"{v:.{digits}g}" if isinstance(v, (int, float)) and not isinstance(v, bool) else (
        "n/a" if v is None else str(v))


def _ir(ir: float, threshold: float, passed: bool = True) -> str:
    """An IR (a fraction) with 4 decimals, or as many more as it takes to tell it from
    ``threshold`` and from 1 (up to 8 when it meets the bound, 17 when it fails it: never
    "IR 0.9700 < 0.97: FAILS" nor "1.0000" for 0.99996)."""
    k = digits_apart((ir, threshold, 1.0), 4, 8 if passed else 17, style="f")
    return f"{ir:.{k}f}"


def _margin(value: float, decimals: int) -> str:
    """A signed margin with ``decimals`` decimals, more (up to 17) where a margin that is not
    0 would print as 0."""
    k = int(decimals)
    while k < 17 and value != 0 and float(f"{value:.{k}f}") == 0:
        k += 1
    return f"{value:+.{k}f}"


def _exact(threshold: float) -> str:
    """A configured threshold as written: ``:g``, or every digit where ``:g`` would round
    it."""
    short = f"{threshold:g}"
    return short if float(short) == threshold else repr(float(threshold))


def _config(res: Dict[str, Any]) -> Tuple[GeoConConfig, Optional[str]]:
    """The result's own config, read as stored (a rule added since it was scored does not
    stop it being shown: a note says why it can no longer score), or the defaults and a note
    when it cannot be read at all (an unknown key, a section that is not a mapping)."""
    try:
        cfg = GeoConConfig.from_dict(res.get("config") or {}, strict=False)
    except ValueError as exc:
        return GeoConConfig(), f"(config not rebuilt, paper defaults used: {exc})"
    reason = cfg.invalid_reason
    return cfg, None if reason is None else f"(config no longer valid for scoring: {reason})"


def _side(s: float, low: float, high: float) -> str:
    if s <= low:
        return f"<= low {low:g} -> H"
    if s >= high:
        return f">= high {high:g} -> F"
    return f"inside the band ({low:g}, {high:g}) -> U"


def _unit(statistic_name: Any) -> str:
    """" <unit>" of a gate statistic for a number in running text ("" for a ratio)."""
    unit = gate_unit(statistic_name)
    return f" {unit}" if unit else ""


def gate_lines(gate: Optional[Dict[str, Any]], regime: Optional[str],
               u_margin: Optional[float] = None) -> List[str]:
    """Why the clip got its regime: method, statistic vs the thresholds the gate applies
    ("H not possible" on a noise-limited band, :func:`~.text.band_text`), U resolution with
    the term that decided (:func:`~.text.u_resolution`; ``u_margin``: the result's
    ``gate.u_margin``, None: the default)."""
    if not gate or not gate.get("method"):
        return [f"Regime {label(regime)}: no gate decision recorded."]
    ev, th = gate.get("evidence") or {}, gate.get("thresholds") or {}
    method, s, dec = gate["method"], gate.get("statistic"), gate.get("decision")
    name = ev.get("statistic_name") or ("t_inf = ||t||_inf of the first/last pose"
                                        if method in ("poses", "dust3r") else "statistic")
    out = [f"Regime {label(regime)}: gate method '{method}', decision {label(dec)}."]
    lo, hi = th.get("low"), th.get("high")
    u = _unit(ev.get("statistic_name"))
    if isinstance(s, (int, float)) and isinstance(lo, (int, float)):
        # a U of the parallax gate comes from the value's interval or its noise floor, not
        # from the value itself (which may lie outside the band)
        side = f"U: {ev['why_u']}" if dec == "U" and ev.get("why_u") else _side(s, lo, hi)
        conf = configured_band(gate)  # the clip's noise raised the band: say so, as the card
        adapted = (f": the noise-adaptive band; configured {conf[0]:g} / {conf[1]:g}{u}"
                   if conf is not None and isinstance(hi, (int, float))
                   and conf != (float(lo), float(hi)) else "")
        out.append(f"  {name} = {s:.4g}{u}, {side} ({band_text(gate, lo, hi, u)}{adapted}).")
    else:
        out.append(f"  {name} unavailable: {ev.get('why', 'no evidence')}.")
    view = ev.get("view")
    if isinstance(view, dict):
        out.append(f"  read on the gate's own view: {view.get('backend')} at "
                   f"{view.get('long_side')} px ({view.get('source')}), the same whatever "
                   f"backend and working size score the clip.")
    if "tau_t" in th and ev.get("eq5_decision"):
        out.append(f"  paper eq. 5 (t_inf > tau_t {th['tau_t']:g}) would say "
                   f"{ev['eq5_decision']}.")
    if dec == "U":
        resolved = u_resolution(gate, stored_u_margin({}) if u_margin is None else u_margin)
        out.append(f"  {resolved or 'U resolution not recorded'}.")
    if gate.get("per_pair"):
        pp = [d for d in gate["per_pair"]]
        counts = ", ".join(f"{k} {pp.count(k)}" for k in ("H", "F", "U", None) if pp.count(k))
        out.append(f"  per-pair gate (hysteresis): {counts} of {len(pp)} pairs.")
    return out


def calibrated_lines(bg: Dict[str, Any]) -> List[str]:
    """The calibrated report gate: verdict, the failed bound(s) named, then every bound with
    the clip's value, the threshold (px at the working resolution), pass / fail and why the
    bound is in the gate; [] when the result has no calibrated gate."""
    if "pass_calibrated" not in bg:
        return []
    p = bg.get("pass_calibrated")
    checks = calibrated_checks(bg)
    cal = bg.get("calibration") if isinstance(bg.get("calibration"), dict) else {}
    regime = (cal.get("thresholds") or {}).get("regime") if isinstance(cal, dict) else None
    head = (f"Report gate (calibrated{', ' + regime + ' bounds' if regime else ''}, "
            f"{label(cal.get('name'))}): {verdict_word(p)}")
    if not checks:
        return [head + f" ({no_bounds_reason(bg)})"]
    failed = [c for c in checks if not c.passed]
    if failed:
        head += " -- failed: " + ", ".join(c.describe().rsplit(":", 1)[0] for c in failed)
    return [head] + [f"  {c.describe()} ({BOUND_WHY.get(c.key, c.key)})" for c in checks]


def threshold_lines(bg: Dict[str, Any], res: Dict[str, Any], cfg: GeoConConfig) -> List[str]:
    """Clip IR / GE against each report threshold."""
    bc = cfg.background
    ir, ge = bg.get("ir"), bg.get("ge_px")
    if bg.get("status") not in (None, "ok") or ir is None:
        return [f"Report gate: no verdict (background {label(bg.get('status'))}: "
                f"{label(bg.get('reason'))})."]
    ok_ir, ok_ge = ir >= bc.report_ir, ge is not None and ge <= bc.report_ge_px
    ir_txt = _ir(ir, bc.report_ir, ok_ir)  # apart from the threshold and 1, as the card
    decimals = len(ir_txt.partition(".")[2])
    d = digits_apart((ge, bc.report_ge_px), max_digits=8 if ok_ge else 17) if ge is not None \
        else 4
    out = [f"Report gate (paper): {verdict_word(bg.get('pass'))}",
           f"  IR {ir_txt} {'>=' if ok_ir else '<'} report_ir {_exact(bc.report_ir)}: "
           f"{'ok' if ok_ir else 'FAILS'} (margin {_margin(ir - bc.report_ir, decimals)})",
           f"  GE {'n/a' if ge is None else f'{ge:.{d}g}'} px {'<=' if ok_ge else '>'} "
           f"report_ge_px {_exact(bc.report_ge_px)}: {'ok' if ok_ge else 'FAILS'}"
           + (f" (margin {bc.report_ge_px - ge:+.{d}g} px)" if ge is not None else "")]
    return out + calibrated_lines(bg)


def failing_pairs(bg: Dict[str, Any], cfg: GeoConConfig) -> List[Dict[str, Any]]:
    """Finest-scale pairs whose own model's IR < report_ir, GE > report_ge_px, or invalid:
    [{"index", "pair", "model", "ir", "ge", "valid", "why"}], worst (lowest IR) first."""
    series = timeline_series(bg)
    if not series:
        return []
    bc, out = cfg.background, []
    for k, pair, ir, ge, ok, model in zip(series["index"], series["pair"], series["ir"],
                                          series["ge"], series["valid"], series["model"]):
        why = ([] if ok else ["invalid (too few inliers)"]) + (
            [f"IR {_ir(ir, bc.report_ir, False)} < {_exact(bc.report_ir)}"]
            if ok and ir is not None and ir < bc.report_ir else []) + (
            [f"GE {ge:.{digits_apart((ge, bc.report_ge_px), 3, 17)}g} px > "
             f"{_exact(bc.report_ge_px)}"]
            if ok and ge is not None and ge > bc.report_ge_px else [])
        if why:
            out.append({"index": k, "pair": pair, "model": model, "ir": ir, "ge": ge,
                        "valid": ok, "why": "; ".join(why)})
    return sorted(out, key=lambda r: (r["valid"], r["ir"] if r["ir"] is not None else 2.0))


def worst_pair(bg: Dict[str, Any]) -> Optional[int]:
    """Index of the valid finest-scale pair with the lowest IR (the audit card's pair)."""
    series = timeline_series(bg)
    if not series:
        return None
    cand = [(ir, k) for k, ir, ok in zip(series["index"], series["ir"], series["valid"])
            if ok and ir is not None]
    return min(cand)[1] if cand else len(series["index"]) // 2


def _share(points: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(4,) fraction of (N, 2) px points in each image quadrant (QUADRANTS order)."""
    q = (points[:, 0] >= w / 2).long() + 2 * (points[:, 1] >= h / 2).long()
    return torch.bincount(q, minlength=4).double() / max(1, points.shape[0])


def outlier_lines(ev: PairEvidence, chosen: bool = False) -> List[str]:
    """Where the pair's outliers (background matches that are not ``ev.model`` inliers) lie:
    their share per image quadrant against all matches', and how many sit near object masks.
    ``chosen``: the caller picked the pair (``--pair``), so it is not called the worst."""
    out_mask = ~ev.inliers
    n, n_out = int(ev.inliers.numel()), int(out_mask.sum())
    name = "Pair" if chosen else "Worst pair"
    head = (f"{name} #{ev.index} {ev.pair} ({ev.model}): {n_out} outliers of {n} "
            f"background matches, IR {_ir(ev.ir, 1.0)}.")
    if n_out == 0:
        return [head]
    h, w = ev.frame1.shape[-2:]
    x = ev.x1.double()
    s_out, s_all = _share(x[out_mask], h, w), _share(x, h, w)
    k = int(torch.argmax(s_out - s_all))
    lines = [head, "  outliers by quadrant (frame i): " + ", ".join(
        f"{q} {100 * float(o):.0f}% (matches {100 * float(a):.0f}%)"
        for q, o, a in zip(QUADRANTS, s_out, s_all)) + ".",
        f"  most over-represented: {QUADRANTS[k]} "
        f"({100 * float(s_out[k]):.0f}% of outliers vs {100 * float(s_all[k]):.0f}% of matches)."]
    if ev.objects is not None and ev.objects.shape[0]:
        near = F.max_pool2d(ev.objects.any(0)[None, None].float(), 2 * NEAR_MASK_PX + 1, 1,
                            NEAR_MASK_PX)[0, 0] > 0
        xi = x.round().long()
        xi[:, 0].clamp_(0, w - 1)
        xi[:, 1].clamp_(0, h - 1)
        at = near[xi[:, 1], xi[:, 0]]
        lines.append(f"  {100 * float(at[out_mask].double().mean()):.0f}% of outliers lie within "
                     f"{NEAR_MASK_PX} px of an object mask ({100 * float(at.double().mean()):.0f}"
                     f"% of all matches); {ev.objects.shape[0]} object mask(s).")
    else:
        lines.append("  no object masks on this pair: the outliers are background matches.")
    return lines


def _scan_line(bg: Dict[str, Any], model: str, cfg: GeoConConfig) -> Optional[str]:
    """From the sensitivity scan: the smallest inlier threshold at which the gate would pass."""
    scan = bg.get("sensitivity")
    if not isinstance(scan, dict):
        return None
    fam = model.lower()
    taus, irs = scan.get(f"tau_{fam}") or [], scan.get(f"ir_{fam}") or []
    ges = scan.get(f"ge_{fam}_px") or [None] * len(taus)
    bc = cfg.background
    unit = "px" if fam == "h" else "(normalised Sampson)"
    for tau, ir, ge in sorted(zip(taus, irs, ges), key=lambda r: r[0]):
        if ir is not None and ir >= bc.report_ir and (ge is None or ge <= bc.report_ge_px):
            return (f"  the report gate would pass at tau_{model} >= {tau:g} {unit} "
                    f"(scan: IR {_ir(ir, bc.report_ir)}, GE {_f(ge, 3)} px).")
    return (f"  no tau_{model} in the sensitivity scan ({', '.join(f'{t:g}' for t in taus)}) "
            "makes the report gate pass.")


def change_lines(res: Dict[str, Any], cfg: GeoConConfig) -> List[str]:
    """What would change the verdict: report-gate margins / scan, gate flip points."""
    bg, gate = res.get("background") or {}, res.get("gate") or {}
    out = ["What would change it:"]
    ir, model = bg.get("ir"), res.get("regime") or "H"
    if ir is not None and not bg.get("pass"):
        out.append(_scan_line(bg, model, cfg) or
                   "  run with background.sensitivity = true to see at which tau_H / tau_F the "
                   "report gate would pass.")
    elif ir is not None:
        out.append(f"  the report gate would fail if IR fell below {cfg.background.report_ir:g} "
                   f"(now {_ir(ir, cfg.background.report_ir)}) or GE rose above "
                   f"{cfg.background.report_ge_px:g} px.")
    s, th = gate.get("statistic"), gate.get("thresholds") or {}
    lo, hi = th.get("low"), th.get("high")
    name = (gate.get("evidence") or {}).get("statistic_name") or "t_inf"
    u = _unit(name)
    if isinstance(s, (int, float)) and isinstance(lo, (int, float)):
        dec = gate.get("decision")
        if dec == "H":
            out.append(f"  the gate would flip to F if {name} rose to >= {hi:g}{u} (now "
                       f"{s:.4g}{u}; U above {lo:g}{u}).")
        elif dec == "F" and h_impossible(gate):
            out.append(f"  the gate would become U if the lower end of the interval of {name} "
                       f"fell below {hi:g}{u} (now {s:.4g}{u}); H is not possible "
                       f"({h_impossible(gate)}).")
        elif dec == "F":
            out.append(f"  the gate would flip to H if {name} fell to <= {lo:g}{u} (now "
                       f"{s:.4g}{u}; U below {hi:g}{u}).")
        elif (gate.get("evidence") or {}).get("why_u"):
            ci = (gate.get("evidence") or {}).get("magnitude_ci_ref_px") or [s, s]
            h_rule = (f"H is not possible ({h_impossible(gate)}); the gate would decide F "
                      f"when the interval of {name} lies" if h_impossible(gate) else
                      f"the gate would decide H when the interval of {name} lies at or "
                      f"below {lo:g}{u} (and its noise floor under half the F threshold), F "
                      f"when it lies")
            out.append(f"  {h_rule} at or above {hi:g}{u} (now {s:.4g}{u}, interval "
                       f"[{ci[0]:.4g}, {ci[1]:.4g}]{u}).")
        else:
            out.append(f"  the gate would decide H at {name} <= {lo:g}{u} or F at >= {hi:g}{u} "
                       f"(now {s:.4g}{u}, inside the band).")
    return out


def _pair_lines(bg: Dict[str, Any], cfg: GeoConConfig, limit: int = 6) -> List[str]:
    bad = failing_pairs(bg, cfg)
    series = timeline_series(bg)
    total = len(series["index"]) if series else 0
    if not bad:
        return [f"Pairs: none of {total} finest-scale pairs is below a threshold."]
    out = [f"Pairs below a threshold: {len(bad)} of {total} (finest scale, worst first):"]
    out += [f"  #{r['index']} {r['pair']} {r['model']}: {r['why']}" for r in bad[:limit]]
    if len(bad) > limit:
        out.append(f"  ... and {len(bad) - limit} more.")
    return out


def explain_result(result: ResultLike, *, pair: Optional[int] = None, video: Any = None,
                   masks: Any = None, poses: Any = None,
                   device: Union[None, str, torch.device] = None,
                   evidence: bool = True) -> str:
    """The plain-text account of one result's verdict (see the module docstring).

    Args:
        result: a :class:`ClipResult` or its dict.
        pair: evaluated pair to show the outliers of (default: the worst valid pair).
            A result without a background section (presets worldatlas, gvgc, epipolar-dpo)
            gets its epipolar paragraph(s) only.
        video, masks, poses, device: as for :func:`pair_evidence` (defaults: the result's
            path and its ``meta`` masks / poses paths).
        evidence: re-derive the pair's matches (False: the stored numbers only).
    Raises:
        InputError: ``pair`` out of range, or given for a result without background pairs.
    """
    res = result.to_dict() if isinstance(result, ClipResult) else dict(result)
    bg = res.get("background") or {}
    cfg, note = _config(res)
    lines = [f"Clip {label(res.get('clip'))}: status {label(res.get('status'))}"
             + (f" ({res['reason']})" if res.get("reason") else "") + (f" {note}" if note else "")]
    if res.get("version") != __version__:  # the stored numbers are another build's
        lines.append(f"Scored by geocon_torch {label(res.get('version'))} "
                     f"(this is {__version__}).")
    lines += [f"Warning: {w}" for w in result_warnings(res)]  # as the CSV / report list
    lines.append(score_line(res))
    lines += [f"Note: {n}." for n in scoring_notes(res)]
    lens = lens_line(res)
    if lens is not None:  # the frames every number below comes from were resampled
        lines.append(f"Lens: {lens}.")
    lines += epipolar_lines(res)
    if not has_background(res):  # worldatlas / gvgc / epipolar-dpo: no regime, no pairs
        if pair is not None:
            raise InputError(f"--pair: this result has no background pairs (preset "
                             f"{label((res.get('config') or {}).get('preset'))})")
        return "\n".join(printable(line) for line in lines) + "\n"
    lines += gate_lines(res.get("gate"), res.get("regime"), cfg.gate.u_margin)
    k = worst_pair(bg) if pair is None else int(pair)
    n_pairs = len((timeline_series(bg) or {}).get("index", []))
    if pair is not None and not 0 <= k < n_pairs:
        raise InputError(f"--pair must be in [0, {n_pairs}), got {pair}")
    if res.get("status") != "ok" and not is_scored(bg):  # n/a, as the card: no pairs to show
        reason = res.get("reason")
        lines.append(f"Report gate: n/a (clip not scored: {label(res.get('status'))}"
                     + ("" if is_missing(reason) else f": {reason}") + ")")
        return "\n".join(printable(line) for line in lines) + "\n"
    lines += threshold_lines(bg, res, cfg)
    lines += _pair_lines(bg, cfg)
    if evidence and k is not None and res.get("status") != "error":
        lines += _evidence_lines(res, k, video, masks, poses, device, pair is not None)
    lines += change_lines(res, cfg)
    # control characters of free text (clip ids, reasons) escaped: no forged line, no ESC
    return "\n".join(printable(line) for line in lines) + "\n"


def epipolar_lines(res: Dict[str, Any]) -> List[str]:
    """One line per epipolar block the result holds (:func:`~.text.epipolar_blocks`): the
    protocol, its implementation and numbers ("Epipolar (GVGC, opencv): median error 0.3232
    px, mean error 0.5826 px, keep rate 0.6211 (66 of 66 valid pairs)."); [] for none."""
    out = []
    for protocol, block in epipolar_blocks(res):
        impl = block.get("implementation")
        name = EPIPOLAR_NAMES[protocol][1]
        head = (f"Epipolar ({name}" + ("" if is_missing(impl) else f", {impl}") + ")"
                if protocol != "epipolar-dpo" else name)
        out.append(f"{head}: {epipolar_text(protocol, block)}.")
    return out


def _evidence_lines(res: Dict[str, Any], k: int, video: Any, masks: Any, poses: Any,
                    device: Any, chosen: bool) -> List[str]:
    meta = res.get("meta") if isinstance(res.get("meta"), dict) else {}
    try:
        ev = pair_evidence(res, k, video=video, masks=masks or meta.get("masks_path"),
                           poses=poses or meta.get("poses_path"), device=device)
    except (GeoConError, OSError) as exc:
        return [f"Pair #{k}: outlier locations unavailable ({exc})."]
    return outlier_lines(ev, chosen)


__all__ = ["explain_result", "gate_lines", "epipolar_lines", "threshold_lines", "calibrated_lines",
           "failing_pairs", "worst_pair", "outlier_lines", "change_lines", "QUADRANTS"]
