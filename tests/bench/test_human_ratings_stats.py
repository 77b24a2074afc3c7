"""benchmarks/human_ratings.py: the ceiling and within-source statistics against closed forms."""
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from benchmarks.human_ratings import source_ceiling, spearman, within_source  # noqa: E402


def _entry(model: str, k: int, tq):
    return {"gif": f"{model}/{k}.gif", "model": model, "prompt": str(k), "section": "s",
            "tq": tq}


def test_source_ceiling_closed_form():
    """Sources A (TQ 1, 2, 3) and B (4, 5, 6): the source means 2 / 5 as the number rank the
    six clips as two tied halves, rho = sqrt(13.5 / 17.5); unrated clips are left out."""
    entries = [_entry("A", k, float(k + 1)) for k in range(3)] + \
        [_entry("B", k, float(k + 4)) for k in range(3)] + [_entry("C", 0, None)]
    assert math.isclose(source_ceiling(entries), math.sqrt(13.5 / 17.5), rel_tol=1e-12)
    # one source: every clip gets the same number, no ordering (rho undefined)
    assert source_ceiling([_entry("A", k, float(k)) for k in range(4)]) is None


def test_within_source_mean_of_per_source_rho():
    """A ordered as the raters did (+1), B reversed (-1), D with two valued clips only (left
    out): the mean is 0; a missing value drops that clip, not the source."""
    entries = [_entry(m, k, float(k)) for m in ("A", "B") for k in range(4)] + \
        [_entry("D", k, float(k)) for k in range(3)]
    vals = {e["gif"]: (float(e["tq"]) if e["model"] == "A" else -float(e["tq"]))
            for e in entries}
    vals["D/2.gif"] = None
    assert abs(within_source(entries, vals)) < 1e-12
    vals["B/3.gif"] = None  # B keeps 3 clips, still reversed
    assert abs(within_source(entries, vals)) < 1e-12
    assert math.isclose(spearman([1.0, 2.0, 3.0], [3.0, 2.0, 1.0]), -1.0, rel_tol=1e-12)
