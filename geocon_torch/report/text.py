"""Readable text for the report: labels ("unknown" for a missing one), compact renderings of
nested values (never a raw dict repr), small key/value tables and pair counts that say what
they count. Plain-text helpers return unescaped text; the ``*_html`` ones escape."""
from __future__ import annotations

import html
import math
from typing import Any, Dict, Mapping, Optional

UNKNOWN = "unknown"


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
    """A category / model / behaviour label as text: ``"unknown"`` when missing."""
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


def kv_table_html(mapping: Optional[Mapping[str, Any]], cls: str = "kv") -> str:
    """A small two-column HTML table of ``mapping`` (values through :func:`compact`)."""
    if not mapping:
        return "<span class='muted'>none</span>"
    rows = "".join(f"<tr><th class='l'>{html.escape(str(k))}</th>"
                   f"<td class='l'>{html.escape(compact(v))}</td></tr>"
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


def calibrated_verdict(background: Optional[Dict[str, Any]]) -> str:
    """The calibrated report gate in words: "calibrated: yes (IR >= 0.97, GE <= 0.06 px;
    default:opencv-sift 1a2b...)", or "calibrated: off" for results scored without one."""
    bg = background or {}
    if "pass_calibrated" not in bg:
        return "calibrated: off"
    cal = bg.get("calibration") if isinstance(bg.get("calibration"), dict) else {}
    th = cal.get("thresholds") if isinstance(cal.get("thresholds"), dict) else {}
    bounds = (f"IR >= {compact(th.get('ir'))}, GE <= {compact(th.get('ge_px'))} px; "
              if th else "")
    return (f"calibrated: {compact(bg.get('pass_calibrated'))} ({bounds}"
            f"{label(cal.get('name'))} {label(cal.get('hash'))})")
