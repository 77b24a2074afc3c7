"""The prompt categories of GeoCon-Bench (paper sec. 5): C1-C6, their names and the regime each
is designed for (C1/C2/C4 -> H, C3/C5/C6 -> F). No heavy imports: the synthetic scenes, the
leaderboard statistics and the reports share it."""
from __future__ import annotations

from typing import Optional
from .errors import InputError

CATEGORIES = ("C1", "C2", "C3", "C4", "C5", "C6")
ALIASES = {"static": "C1", "rotation": "C2", "translation": "C3", "moving_object": "C4",
           "complex": "C5", "stress": "C6"}
CATEGORY_NAMES = {c: name for name, c in ALIASES.items()}
EXPECTED_REGIME = {"C1": "H", "C2": "H", "C3": "F", "C4": "H", "C5": "F", "C6": "F"}
#: the ``generator`` field of every ``geocon synth`` clip's ground-truth JSON (whose ``poses`` are
#: per-frame world-to-camera poses, not the relative poses a pose log's ``poses`` key holds)
SYNTH_GENERATOR = "geocon-synth"


def canonical_category(category: str) -> str:
    """'C1'..'C6' for a category name or alias (case-insensitive); ValueError otherwise."""
    key = str(category).strip()
    if key.upper() in CATEGORIES:
        return key.upper()
    if key.lower() in ALIASES:
        return ALIASES[key.lower()]
    raise InputError(f"unknown category {category!r}; use one of {CATEGORIES} or "
                     f"{sorted(ALIASES)}")


def expected_regime(category: Optional[str]) -> Optional[str]:
    """Regime a prompt category (name or alias, any case) is designed for: "H", "F", or None
    for an unknown or missing category.

    Pass a result's ``prompt_category``, never its post-hoc ``behaviour``: the alias "stress"
    names the C6 prompt family, not the measured "Stress" behaviour.
    """
    if category is None:
        return None
    try:
        return EXPECTED_REGIME[canonical_category(category)]
    except ValueError:
        return None
