"""Readable text for the report: labels ("unknown" for a missing one), compact renderings of
nested values (never a raw dict repr), small key/value tables and pair counts that say what
they count. Plain-text helpers return unescaped text; the ``*_html`` ones escape."""
from __future__ import annotations

import html
import math
import re
import unicodedata
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..config import GateConfig
from ..gate.decision import prefers_f
from ..gate.parallax import noise_limited
from ..io.sampling import FROZEN_MAX_MAD
from ..measures.calibration import BoundCheck, bound_checks, clip_statistics, fmt_apart
from ..measures.headline import textured_share
from ..presets import PRESETS
from ..result import finite_number, gvgc_block

UNKNOWN = "unknown"
#: bidi classes whose text is isolated in the HTML (right-to-left letters and digits, and the
#: embedding / override / isolate controls, e.g. U+202E, that would reorder the text after it)
_BIDI_ISOLATE = frozenset({"R", "AL", "AN", "LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI",
                           "FSI", "PDI"})
#: C0 / C1 control characters, bidi marks / controls and line / paragraph separators: escaped
#: in plain-text output (:func:`printable`)
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069]")


def esc(value: Any) -> str:
    """``str(value)`` HTML-escaped, inside ``<bdi>`` when it holds right-to-left text or bidi
    controls (a U+202E in a generator name would otherwise reverse the rest of its
    paragraph); plain ASCII text is only escaped."""
    text = str(value)
    out = html.escape(text)
    if text.isascii() or not any(unicodedata.bidirectional(c) in _BIDI_ISOLATE for c in text):
        return out
    return f"<bdi>{out}</bdi>"


def printable(text: str) -> str:
    """``text`` for a terminal: control characters (newline, ESC, C1), bidi marks / controls
    and line separators written as their Python escapes (``\\n``, ``\\x1b``,
    ``\\u202e``), so a clip id or reason can neither forge a line nor move the cursor."""
    return _CONTROL.sub(lambda m: repr(m.group())[1:-1], text)


def is_missing(value: Any) -> bool:
    """None, NaN / inf, "" and the placeholders "-", "None", "nan", "null" count as missing
    (the word "none", e.g. a backend that was not used, is a value)."""
    if value is None:
        return True
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, str):
        return value.strip() in ("", "-", "None", "nan", "NaN", "null")
    return False


def label(value: Any) -> str:
    """A category / generator / behaviour label as text: ``"unknown"`` when missing."""
    return UNKNOWN if is_missing(value) else str(value)


def compact(value: Any, digits: int = 4) -> str:
    """Plain text of a (nested) value: ``{"a": 1, "b": {"c": 2.5}}`` -> ``a: 1, b: (c: 2.5)``;
    lists joined by ", ", floats with ``digits`` significant digits, booleans yes / no."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if is_missing(value):
        return UNKNOWN
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    if isinstance(value, Mapping):
        items = sorted(value.items(), key=lambda kv: str(kv[0]))
        return ", ".join(f"{k}: {_nested(v, digits)}" for k, v in items) or "none"
    if isinstance(value, (list, tuple)):
        return ", ".join(_nested(v, digits) for v in value) or "none"
    return str(value)


def _nested(value: Any, digits: int) -> str:
    text = compact(value, digits)
    return f"({text})" if isinstance(value, (Mapping, list, tuple)) and len(value) > 1 else text


def counts(counter: Mapping[Any, int]) -> str:
    """``{"F": 31, "H": 18}`` -> ``F (31); H (18)`` (most frequent first; missing keys
    "unknown")."""
    items = sorted(counter.items(), key=lambda kv: (-kv[1], label(kv[0])))
    return "; ".join(f"{label(k)} ({n})" for k, n in items) or "none"


def counts_html(counter: Mapping[Any, int]) -> str:
    """:func:`counts` as HTML: each key escaped and bidi-isolated (:func:`esc`)."""
    items = sorted(counter.items(), key=lambda kv: (-kv[1], label(kv[0])))
    return "; ".join(f"{esc(label(k))} ({n})" for k, n in items) or "none"


def kv_table_html(mapping: Optional[Mapping[str, Any]], cls: str = "kv") -> str:
    """A small two-column HTML table of ``mapping`` (values through :func:`compact`)."""
    if not mapping:
        return "<span class='muted'>none</span>"
    rows = "".join(f"<tr><th class='l'>{esc(k)}</th>"
                   f"<td class='l'>{esc(compact(v))}</td></tr>"
                   for k, v in sorted(mapping.items(), key=lambda kv: str(kv[0])))
    return f"<table class='{cls}'>{rows}</table>"


def _num_scales(background: Dict[str, Any], pairs: int) -> int:
    scales = background.get("scales")
    if isinstance(scales, (list, tuple)) and scales:
        return len(scales)
    rows = background.get("per_pair")
    if isinstance(rows, list) and pairs and len(rows) % pairs == 0 and rows:
        return len(rows) // pairs
    return 1


def pair_counts(background: Optional[Dict[str, Any]]) -> str:
    """What ``background.valid_pairs`` counts, against the right total: valid (pair, scale)
    entries of ``pairs x scales`` entries when several scales were evaluated (``valid_pairs``
    pools the scales), else valid pairs of ``pairs``."""
    bg = background or {}
    valid, pairs = bg.get("valid_pairs"), bg.get("pairs")
    if not isinstance(pairs, int) or isinstance(pairs, bool):
        return UNKNOWN if valid is None else f"{valid} valid (pair, scale) entries"
    n_scales = _num_scales(bg, pairs)
    valid_txt = UNKNOWN if valid is None else str(valid)
    if n_scales == 1:
        return f"{valid_txt} of {pairs} pairs valid"
    return (f"{valid_txt} of {pairs * n_scales} (pair, scale) entries valid "
            f"({pairs} pairs x {n_scales} scales)")


def _fraction(value: Any) -> str:
    """A score (term) in [0, 1]: 3 significant digits, more where it would print as 1
    (0.99999, not "1"); other values as :func:`compact`."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return fmt_apart(float(value), 1.0, digits=3)
    return compact(value, 3)


def score_line(result: Mapping[str, Any]) -> str:
    """The headline score and the terms it folds (:mod:`geocon_torch.measures.headline`):
    "Score 0.87 (match 0.8, inliers 0.99, ge 0.97) [0-1, higher is better]" ("Score n/a
    (not_applicable: no texture)" for a clip that was not scored; "Score n/a (preset 'gvgc'
    folds no headline score: ...)" for an ok clip of a preset without a headline term). A
    ``ge`` term cut by the textured-pairs share says so: "ge 0.411 = 0.959 x 3/7 textured
    pairs" (:func:`~geocon_torch.measures.headline.textured_share`). Followed for a
    frozen clip (``result["motion"]["frozen"]``) by "; frozen video (...)": it keeps its
    geometric score (a static camera on a static scene is category C1), the rewards refuse it."""
    status = result.get("status")
    if is_missing(result.get("score")) and not is_missing(status) and status != "ok":
        reason = result.get("reason")  # not scored: n/a and why, not an "unknown" score
        return f"Score n/a ({status}" + ("" if is_missing(reason) else f": {reason}") + ")"
    terms = result.get("score_terms") if isinstance(result.get("score_terms"), Mapping) else {}
    if is_missing(result.get("score")) and not terms and status == "ok":
        preset = _preset_of(result)  # gvgc / epipolar-dpo: no term, by design
        if preset is not None and not _has_headline(preset):
            return (f"Score n/a (preset '{preset}' folds no headline score: see its "
                    f"epipolar numbers)")
    bg = result.get("background") if isinstance(result.get("background"), Mapping) else {}
    detail = ", ".join(f"{k} {_fraction(v)}" + (_textured_factor(v, bg) if k == "ge" else "")
                       for k, v in terms.items())
    line = (f"Score {_fraction(result.get('score'))}" + (f" ({detail})" if detail else "")
            + " [0-1, higher is better]")
    motion = result.get("motion") if isinstance(result.get("motion"), Mapping) else {}
    if motion.get("frozen") is True:
        line += (f"; frozen video (no pair of the {compact(motion.get('pairs'))} consecutive "
                 f"frame pairs differs by more than {FROZEN_MAX_MAD:g} grey levels, largest "
                 f"{compact(motion.get('max_mad'), 3)}): it keeps its geometric score, the "
                 f"rewards give it the neutral value")
    return line


def _preset_of(result: Mapping[str, Any]) -> Optional[str]:
    """The preset a result was scored with (its stored ``config.preset``) when it is one of
    :data:`~geocon_torch.presets.PRESETS`, else None (an old or foreign result)."""
    cfg = result.get("config") if isinstance(result.get("config"), Mapping) else {}
    preset = cfg.get("preset")
    return preset if isinstance(preset, str) and preset in PRESETS else None


def _has_headline(preset: str) -> bool:
    """Whether a preset's sections can give a headline term (the background's ``ge``, the
    WorldAtlas trio's ``match`` / ``inliers``; :mod:`geocon_torch.measures.headline`)."""
    p = PRESETS[preset]
    return "background" in p.sections or p.epipolar_protocol == "worldatlas"


def has_background(result: Mapping[str, Any]) -> bool:
    """Whether a result has a background section: its preset runs one (``PRESETS[preset]
    .sections``), or, for a result of an unknown preset, its ``background`` block is not
    empty. ``geocon explain`` prints the regime / report gate / pairs account only then."""
    preset = _preset_of(result)
    if preset is not None:
        return "background" in PRESETS[preset].sections
    return bool(result.get("background"))


def _count(value: Any) -> Optional[int]:
    number = finite_number(value)
    return None if number is None else int(number)


def _textured_factor(term: Any, background: Mapping[str, Any]) -> str:
    """" = 0.959 x 3/7 textured pairs" after the ``ge`` term of a clip scored on some of its
    pairs (:func:`~geocon_torch.measures.headline.textured_share` < 1: the term is
    exp(-GE_norm / 3.5) times that share), else ""."""
    share = textured_share(background)
    if share >= 1.0 or share <= 0.0 or not isinstance(term, (int, float)):
        return ""
    textured, pairs = _count(background.get("textured_pairs")), _count(background.get("pairs"))
    return f" = {_fraction(float(term) / share)} x {textured}/{pairs} textured pairs"


def scoring_notes(result: Mapping[str, Any]) -> List[str]:
    """How the background was scored when it was not the plain way, in words (plain text; the
    audit card and ``geocon explain`` show the same): on some of its frame pairs
    (``background.textured_pairs`` of ``pairs``, the ``ge`` term multiplied by that share), by
    the ``features.fallback`` backend (``backends.features_fallback_from``; the scoring
    backend's reason), or by the scoring backend on its textured pairs after the fallback
    failed. [] for a clip scored the plain way."""
    bg = result.get("background") if isinstance(result.get("background"), Mapping) else {}
    be = result.get("backends") if isinstance(result.get("backends"), Mapping) else {}
    fb = bg.get("fallback") if isinstance(bg.get("fallback"), Mapping) else {}
    out = []
    if textured_share(bg) < 1.0:
        textured, pairs = _count(bg.get("textured_pairs")), _count(bg.get("pairs"))
        out.append(f"background scored on {textured} of {pairs} frame pairs (the others have "
                   f"too few matches): its ge term is multiplied by {textured}/{pairs}")
    src, why = label(fb.get("from", be.get("features_fallback_from"))), fb.get("from_reason")
    why = f"{src} found too little texture" if is_missing(why) else f"{src}: {why}"
    if not is_missing(be.get("features_fallback_from")):
        out.append(f"background scored by the {label(be.get('features'))} fallback ({why})")
    elif fb and fb.get("status") != "ok" and bg.get("status") == "ok":
        out.append(f"the {label(fb.get('backend'))} fallback was tried ({label(fb.get('status'))}"
                   + ("" if is_missing(fb.get("reason")) else f": {fb['reason']}")
                   + f"); background scored by {label(be.get('features'))} on its textured "
                     f"pairs ({why})")
    return out


def result_warnings(result: Mapping[str, Any]) -> List[str]:
    """The result's ``warnings`` as plain text, one per entry (unescaped: the card escapes
    them, ``geocon explain`` writes control characters as escapes)."""
    warns = result.get("warnings")
    if isinstance(warns, str):
        warns = [warns]
    if not isinstance(warns, (list, tuple)):
        return []
    return [str(w) for w in warns if not is_missing(w)]


#: the result blocks that hold an epipolar protocol's numbers -> (row label, protocol name)
EPIPOLAR_NAMES = {"worldatlas": ("epipolar trio", "WorldAtlas"), "gvgc": ("epipolar (GVGC)",
                                                                         "GVGC"),
                  "epipolar-dpo": ("epipolar-DPO", "Epipolar-DPO")}


def _num4(value: Any) -> str:
    """A number with 4 significant digits, "-" when missing (the card's style)."""
    number = finite_number(value)
    return "-" if number is None else f"{number:.4g}"


def epipolar_blocks(result: Mapping[str, Any]) -> List[Tuple[str, Mapping[str, Any]]]:
    """The epipolar blocks a result holds, as (protocol, block): the ``epipolar`` block
    ("worldatlas", or "gvgc" under preset gvgc: the block says its ``preset``, or holds the
    original's ``median_error`` without ``epipolar_error``), ``epipolar_gvgc`` (preset "all")
    and ``epipolar_dpo`` ("epipolar-dpo")."""
    out: List[Tuple[str, Mapping[str, Any]]] = []
    ep, gv = result.get("epipolar"), gvgc_block(dict(result))
    if isinstance(ep, Mapping) and ep and ep is not gv:
        out.append(("worldatlas", ep))
    if gv:
        out.append(("gvgc", gv))
    if isinstance(result.get("epipolar_dpo"), Mapping) and result["epipolar_dpo"]:
        out.append(("epipolar-dpo", result["epipolar_dpo"]))
    return out


def epipolar_text(protocol: str, block: Mapping[str, Any]) -> str:
    """One epipolar block's numbers in words (plain text; the card row and ``geocon explain``'s
    paragraph): WorldAtlas "error 0.0282 px, inlier rate 1, coverage 0.7887 (7 of 7 valid
    pairs)", GVGC "median error 0.3232 px, mean error 0.5826 px, keep rate 0.6211 (...)",
    Epipolar-DPO "mean epipolar error 0.1298 px, mean inlier rate 1 (1 of 1 valid pairs)"
    (errors in px at the protocol's ``analysis_size``); "not_applicable: <reason>" for a block
    that was not scored."""
    status = block.get("status")
    if not is_missing(status) and status != "ok":
        reason = block.get("reason")
        return str(status) + ("" if is_missing(reason) else f": {reason}")
    if protocol == "gvgc":
        text = (f"median error {_num4(block.get('median_error'))} px, mean error "
                f"{_num4(block.get('mean_error'))} px, keep rate {_num4(block.get('keep_rate'))}")
    elif protocol == "epipolar-dpo":
        text = (f"mean epipolar error {_num4(block.get('mean_epipolar_error'))} px, mean "
                f"inlier rate {_num4(block.get('mean_inlier_rate'))}")
    else:
        text = (f"error {_num4(block.get('epipolar_error'))} px, inlier rate "
                f"{_num4(block.get('epipolar_inlier_rate'))}, coverage "
                f"{_num4(block.get('feature_match_coverage'))}")
    valid = _count(block.get("valid_pairs"))
    total = _count(block.get("total_pairs", block.get("pairs")))
    if valid is not None and total is not None:
        text += f" ({valid} of {total} valid pairs)"
    if block.get("fallback_used") is True:
        text += f"; matched by its fallback method {label(block.get('method'))}"
    return text


_LENS_NAMES = ("k1", "k2", "p1", "p2", "k3")


def lens_line(result: Mapping[str, Any]) -> Optional[str]:
    """"frames undistorted (io.lens, OpenCV model: k1 -0.1; camera fx 230.4 fy 230.4 cx
    127.5 cy 95.5 px at the working size; 0 % of the frame black)" when the result's ``io``
    block records a lens (``io.lens``, :func:`geocon_torch.io.lens.lens_record`), else None:
    the line ``geocon explain`` and the audit card show (the card draws the undistorted
    frames)."""
    block = result.get("io") if isinstance(result.get("io"), Mapping) else {}
    rec = block.get("lens")
    if not isinstance(rec, Mapping) or not rec.get("undistorted"):
        return None
    coef, cam = rec.get("coefficients"), rec.get("camera_px")
    k = (", ".join(f"{n} {compact(v)}" for n, v in zip(_LENS_NAMES, coef) if v != 0)
         if isinstance(coef, (list, tuple)) else compact(coef))
    camera = (" ".join(f"{n} {compact(v)}" for n, v in zip(("fx", "fy", "cx", "cy"), cam))
              if isinstance(cam, (list, tuple)) else compact(cam))
    black = rec.get("outside_fraction")
    black = (f"{100 * black:.0f} %" if isinstance(black, (int, float))
             and not isinstance(black, bool) and math.isfinite(black) else compact(black))
    turned = rec.get("display_rotation")
    turned = (f"; frames turned {compact(turned)} degrees for display first"
              if isinstance(turned, (int, float)) and not isinstance(turned, bool) and turned
              else "")
    return (f"frames undistorted (io.lens, OpenCV model: {k}; camera {camera} px at the "
            f"working size; {black} of the frame black{turned})")


#: the calibration record's thresholds (px at the working resolution; parallax_ref_min in
#: reference px) -> threshold keys
RECORD_KEYS = {"ir": "ir_min", "ge_px": "ge_norm_max", "ge_fine_px": "ge_fine_norm_max",
               "ge_spread_px": "ge_spread_norm_max", "ge_h_px_min": "ge_h_norm_min",
               "ge_peak_px": "ge_peak_norm_max", "parallax_ref_min": "parallax_ref_min"}


def calibrated_checks(background: Optional[Dict[str, Any]]) -> Optional[List[BoundCheck]]:
    """Every bound of the calibrated gate on this clip, in px at the working resolution: the
    clip's value, the threshold and pass / fail
    (:func:`~geocon_torch.measures.calibration.bound_checks` on the result's stored numbers
    and its ``calibration.thresholds`` record). None when the result has no calibrated gate,
    no thresholds for its regime or no IR / GE."""
    bg = background or {}
    cal = bg.get("calibration") if isinstance(bg.get("calibration"), dict) else {}
    rec = cal.get("thresholds") if isinstance(cal.get("thresholds"), dict) else None
    if "pass_calibrated" not in bg or not rec or bg.get("ir") is None or bg.get("ge_px") is None:
        return None
    th = {key: rec[name] for name, key in RECORD_KEYS.items() if rec.get(name) is not None}
    stats = clip_statistics(bg["ir"], bg["ge_px"], ge_fine_px=bg.get("ge_fine_px"),
                            ge_peak_px=bg.get("ge_peak_px"), ge_h_px=bg.get("ge_h_px"),
                            parallax_ref=bg.get("parallax_ref"))
    return bound_checks(stats, th)


#: units of the gate statistics that have one (reference px: a 1024-px long side); the
#: others (parallax fractions, pose translations) are ratios
GATE_UNITS = {"parallax_magnitude": "ref px"}


def gate_unit(statistic_name: Any) -> str:
    """The unit of a gate statistic ("ref px" for ``parallax_magnitude``, "" for a ratio)."""
    return GATE_UNITS.get(str(statistic_name), "")


def configured_band(gate: Optional[Dict[str, Any]]) -> Optional[Tuple[float, float]]:
    """The configured (low, high) band of a noise-adaptive ``parallax_magnitude`` gate
    (``evidence.configured_band_ref_px``, ref px), None when the gate records none."""
    band = ((gate or {}).get("evidence") or {}).get("configured_band_ref_px")
    if (isinstance(band, (list, tuple)) and len(band) == 2
            and all(isinstance(v, (int, float)) for v in band)):
        return float(band[0]), float(band[1])
    return None


def stored_u_margin(result: Mapping[str, Any]) -> float:
    """The ``gate.u_margin`` a result was scored with (its stored config), the default where
    it records none."""
    cfg = result.get("config") if isinstance(result.get("config"), Mapping) else {}
    gate = cfg.get("gate") if isinstance(cfg.get("gate"), Mapping) else {}
    margin = gate.get("u_margin")
    if isinstance(margin, (int, float)) and not isinstance(margin, bool):
        return float(margin)
    return float(GateConfig().u_margin)


def h_impossible(gate: Optional[Mapping[str, Any]]) -> Optional[str]:
    """Why a ``parallax_magnitude`` gate cannot decide H, or None when it can (or the result
    records too little to tell): its H bound (``evidence.band_ref_px[0]``, the noise floor
    where the noise raised it) reaches half the configured F threshold
    (:func:`~geocon_torch.gate.parallax.noise_limited`, the gate's own rule)."""
    gate = gate or {}
    ev = gate.get("evidence") if isinstance(gate.get("evidence"), Mapping) else {}
    conf = configured_band(dict(gate))
    band = ev.get("band_ref_px")
    low = band[0] if isinstance(band, (list, tuple)) and band else (
        gate.get("thresholds") or {}).get("low")
    if (ev.get("statistic_name") != "parallax_magnitude" or conf is None
            or not isinstance(low, (int, float)) or not noise_limited(low, conf[1])):
        return None
    floor, noise = ev.get("noise_floor_ref_px"), ev.get("noise_ref_px")
    if (isinstance(floor, (int, float)) and isinstance(noise, (int, float)) and noise > 0
            and noise_limited(floor, conf[1])):
        src = f"noise floor {floor / noise:.3g} x {noise:.4g} = {floor:.4g} ref px"
    else:
        src = f"H bound {low:.4g} ref px"
    return f"{src} reaches half the F threshold {conf[1]:g} ref px"


def band_text(gate: Optional[Mapping[str, Any]], low: float, high: float, unit: str,
              digits: str = "g") -> str:
    """The bounds a gate applies, as the card and ``geocon explain`` print them: "H if <= 10.35
    ref px, F if >= 16 ref px", or, where the band is noise-limited (:func:`h_impossible`),
    "H not possible (noise floor ... reaches half the F threshold 16 ref px), F if >= 16 ref
    px" ("H not possible" alone for a U whose ``why_u``, printed beside it, says so).
    ``low`` / ``high``: the thresholds (the statistic's unit); ``unit``: " ref px" or "";
    ``digits``: the format spec of the numbers ("g", ".4g")."""
    why = h_impossible(gate)
    ev = (gate or {}).get("evidence") or {}
    said = (gate or {}).get("decision") == "U" and bool(ev.get("why_u"))
    h = (f"H if <= {low:{digits}}{unit}" if why is None else
         "H not possible" + ("" if said else f" ({why})"))
    return f"{h}, F if >= {high:{digits}}{unit}"


def u_resolution(gate: Optional[Mapping[str, Any]], u_margin: float) -> Optional[str]:
    """How a U decision was resolved, naming the term that decided
    (:func:`~geocon_torch.gate.decision.prefers_f`: F when GRIC prefers it, ``gric_delta`` > 0,
    or when the support margin IR_F - IR_H exceeds ``u_margin``): "U resolved to F by the
    support margin (IR_F - IR_H 0.0749 > u_margin 0.05; GRIC delta -0.0471 <= 0 favours H)".
    None when the gate is not U or records no resolution."""
    gate = gate or {}
    ev = gate.get("evidence") if isinstance(gate.get("evidence"), Mapping) else {}
    to = ev.get("u_resolved")
    if gate.get("decision") != "U" or is_missing(to):
        return None
    g, m = ev.get("gric_delta"), ev.get("u_support_margin")
    g_ok, m_ok = finite_number(g) is not None, finite_number(m) is not None
    by_g = g_ok and bool(prefers_f(float(g)))
    by_m = m_ok and bool(prefers_f(0.0, float(m), u_margin))
    g_txt = (f"GRIC delta {g:.3g} " + ("> 0 favours F" if by_g else "<= 0 favours H")
             if g_ok else "GRIC delta - (not recorded)")
    m_txt = (f"support margin IR_F - IR_H {m:.3g} {'>' if by_m else '<='} u_margin "
             f"{u_margin:g}" if m_ok else "support margin IR_F - IR_H not recorded")
    if to == "F" and (by_g or by_m):
        by = " and ".join(["GRIC"] * by_g + ["the support margin"] * by_m)
        first, second = (g_txt, m_txt) if by_g else (m_txt[len("support margin "):], g_txt)
        return f"U resolved to {to} by {by} ({first}; {second})"
    if to == "H" and not (by_g or by_m):
        return f"U resolved to H: neither term favours F ({g_txt}; {m_txt})"
    return f"U resolved to {label(to)} (as recorded; {g_txt}; {m_txt})"


def is_scored(background: Optional[Dict[str, Any]]) -> bool:
    """Whether a background block has IR and GE (False: the clip was not scored)."""
    bg = background or {}
    return bg.get("ir") is not None and bg.get("ge_px") is not None


def calibration_off(background: Dict[str, Any]) -> str:
    """Why a background block has no calibrated verdict: "off" (scored without a calibration)
    or "n/a (not scored)" (no IR / GE: the clip was not scored)."""
    return "off" if is_scored(background) else "n/a (not scored)"


def verdict_word(passed: Optional[bool]) -> str:
    """A stored gate verdict as the card and ``geocon explain`` head it: PASS / FAIL / n/a."""
    return "n/a" if passed is None else "PASS" if passed else "FAIL"


def no_bounds_reason(background: Dict[str, Any]) -> str:
    """Why a calibrated verdict comes without bounds: the stored ``pass_calibrated_reason``
    (e.g. a fallback backend without a calibration) or that none were recorded."""
    return background.get("pass_calibrated_reason") or "no bounds recorded for this regime / clip"


def calibration_source(background: Dict[str, Any]) -> str:
    """Which bounds the calibrated verdict applied, from what the result recorded: "F bounds
    of default:opencv-sift (002e023eb29b858d)", "calibration default:opencv-sift (...)"
    without a regime, "" when nothing is recorded."""
    cal = background.get("calibration") if isinstance(background.get("calibration"), dict) else {}
    rec = cal.get("thresholds") if isinstance(cal.get("thresholds"), dict) else {}
    regime, name, digest = rec.get("regime"), cal.get("name"), cal.get("hash")
    parts = [] if is_missing(name) else [str(name)]
    src = " ".join(parts + ([] if is_missing(digest) else [f"({digest})"]))
    if not is_missing(regime):
        return f"{regime} bounds" + (f" of {src}" if src else "")
    return f"calibration {src}" if src else ""


def calibrated_verdict(background: Optional[Dict[str, Any]]) -> str:
    """The calibrated report gate in words, every bound with the clip's value, and the failed
    ones named: "calibrated: no (fails GE_fine 0.41 px > 0.35 px; IR 1 >= 0.999: ok, ...;
    default:opencv-sift 1a2b...)", "calibrated: off" for results scored without one, or
    "calibrated: n/a (not scored)" for a block without IR / GE (a clip that was not scored)."""
    bg = background or {}
    if "pass_calibrated" not in bg:
        return f"calibrated: {calibration_off(bg)}"
    cal = bg.get("calibration") if isinstance(bg.get("calibration"), dict) else {}
    checks = calibrated_checks(bg) or []
    passed = bg.get("pass_calibrated")
    word = "n/a" if passed is None else compact(passed)  # no verdict: n/a, as explain says
    if not checks and bg.get("pass_calibrated_reason"):  # e.g. no calibration of its backend
        return f"calibrated: {word} ({bg['pass_calibrated_reason']})"
    failed = [c.describe().rsplit(":", 1)[0] for c in checks if not c.passed]
    bounds = ("fails " + ", ".join(failed) + "; " if failed else "") + (
        "; ".join(c.describe() for c in checks) + "; " if checks else "")
    return (f"calibrated: {word} ({bounds}"
            f"{label(cal.get('name'))} {label(cal.get('hash'))})")
