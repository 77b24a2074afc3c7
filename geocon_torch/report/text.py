"""Readable text for the report: labels ("unknown" for a missing one), compact renderings of
nested values (never a raw dict repr), small key/value tables and pair counts that say what
they count. Plain-text helpers return unescaped text; the ``*_html`` ones escape."""
from __future__ import annotations

import html
import math
import re
import unicodedata
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..io.sampling import FROZEN_MAX_MAD
from ..measures.calibration import BoundCheck, bound_checks, clip_statistics, fmt_apart

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
    (not_applicable: no texture)" for a clip that was not scored), followed for a
    frozen clip (``result["motion"]["frozen"]``) by "; frozen video (...)": it keeps its
    geometric score (a static camera on a static scene is category C1), the rewards refuse it."""
    status = result.get("status")
    if is_missing(result.get("score")) and not is_missing(status) and status != "ok":
        reason = result.get("reason")  # not scored: n/a and why, not an "unknown" score
        return f"Score n/a ({status}" + ("" if is_missing(reason) else f": {reason}") + ")"
    terms = result.get("score_terms") if isinstance(result.get("score_terms"), Mapping) else {}
    detail = ", ".join(f"{k} {_fraction(v)}" for k, v in terms.items())
    line = (f"Score {_fraction(result.get('score'))}" + (f" ({detail})" if detail else "")
            + " [0-1, higher is better]")
    motion = result.get("motion") if isinstance(result.get("motion"), Mapping) else {}
    if motion.get("frozen") is True:
        line += (f"; frozen video (no pair of the {compact(motion.get('pairs'))} consecutive "
                 f"frame pairs differs by more than {FROZEN_MAX_MAD:g} grey levels, largest "
                 f"{compact(motion.get('max_mad'), 3)}): it keeps its geometric score, the "
                 f"rewards give it the neutral value")
    return line


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
