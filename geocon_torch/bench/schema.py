"""Validation of result rows (``ClipResult.to_dict()``, schema "3.x"; "1.x" and "2.x" rows are
still accepted and read through :func:`geocon_torch.result.migrate_result`) when they are stored
or loaded. The schema itself is documented in the README section "Result schema"."""
from __future__ import annotations

import math
from typing import Any, Dict, List

from ..errors import GeoConError
from ..result import STATUSES as RESULT_STATUSES
from .manifest import is_utf8, storable_text

SCHEMA_MAJOR = "3"  # the schema written today
#: 1.x: one ``category`` field; 1.x / 2.x: ``epipolar.path`` (the implementation); migrated on read
READABLE_MAJORS = ("1", "2", "3")
STATUSES = RESULT_STATUSES  # the one list (geocon_torch.result.STATUSES)
SECTIONS = ("gate", "background", "foreground", "epipolar", "motion")  # objects or null


class ResultSchemaError(GeoConError, ValueError):
    """A result row does not follow the result schema; the message lists every problem."""


def _bad_paths(obj: Any, prefix: str, nonfinite: List[str], not_utf8: List[str]) -> None:
    """Collect the paths of non-finite numbers and of text (values or keys) that is not UTF-8
    (a lone surrogate: a file name in another encoding, which no store can keep)."""
    if isinstance(obj, float) and not math.isfinite(obj):
        nonfinite.append(prefix or "<root>")
    elif isinstance(obj, str) and not is_utf8(obj):
        not_utf8.append(prefix or "<root>")
    elif isinstance(obj, dict):
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(k, str) and not is_utf8(k):
                not_utf8.append(path)
            _bad_paths(v, path, nonfinite, not_utf8)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _bad_paths(v, f"{prefix}[{i}]", nonfinite, not_utf8)


def _listing(paths: List[str]) -> str:
    """The first 8 field paths for a message (text that is not UTF-8 escaped)."""
    return (", ".join(storable_text(p) for p in paths[:8])
            + (f" (+{len(paths) - 8} more)" if len(paths) > 8 else ""))


def _newer_major(version: Any) -> bool:
    """Whether ``version`` is a schema version whose major (a whole number) is above the one
    written today (:data:`SCHEMA_MAJOR`): a result of a newer geocon_torch."""
    major = version.split(".")[0] if isinstance(version, str) else ""
    return major.isdigit() and major.isascii() and int(major) > int(SCHEMA_MAJOR)


def result_problems(result: Any) -> List[str]:
    """Every way ``result`` departs from the schema (empty list = valid)."""
    if not isinstance(result, dict):
        return [f"a result must be a JSON object, got {type(result).__name__}"]
    problems: List[str] = []
    version = result.get("schema_version")
    if not isinstance(version, str) or version.split(".")[0] not in READABLE_MAJORS:
        newer = (": a result written by a newer geocon_torch; upgrade geocon_torch to read it"
                 if _newer_major(version) else "")
        problems.append(f"schema_version must be '{SCHEMA_MAJOR}.x' (or the older "
                        f"'1.x' / '2.x'), got {version!r}{newer}")
    if not isinstance(result.get("clip"), str):
        problems.append("clip must be a string")
    status = result.get("status")
    if status not in STATUSES:
        problems.append(f"status must be one of {STATUSES}, got {status!r}")
    elif status != "ok" and not (isinstance(result.get("reason"), str) and result["reason"]):
        problems.append(f"status {status!r} needs a non-empty reason")
    if not isinstance(result.get("config_hash"), str):
        problems.append("config_hash must be a string")
    for name in ("behaviour", "prompt_category", "category"):
        if result.get(name) is not None and not isinstance(result[name], str):
            problems.append(f"{name} must be a string or null")
    if result.get("regime") not in (None, "H", "F"):
        problems.append(f"regime must be 'H', 'F' or null, got {result.get('regime')!r}")
    for name in SECTIONS:
        if result.get(name) is not None and not isinstance(result[name], dict):
            problems.append(f"{name} must be an object or null")
    bad: List[str] = []
    not_utf8: List[str] = []
    _bad_paths(result, "", bad, not_utf8)
    if bad:
        problems.append("non-finite numbers at " + _listing(bad))
    if not_utf8:
        problems.append("text that is not UTF-8 at " + _listing(not_utf8) + " (a file or "
                        "folder name in another encoding?), which no result store can keep; "
                        "rename the file in UTF-8")
    return problems


def check_result(result: Any) -> Dict[str, Any]:
    """Return ``result`` unchanged if valid, else raise :class:`ResultSchemaError`."""
    problems = result_problems(result)
    if problems:
        clip = result.get("clip") if isinstance(result, dict) else None
        raise ResultSchemaError(f"invalid result for clip {clip!r}: " + "; ".join(problems))
    return result
