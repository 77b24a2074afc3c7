"""Execute notebooks/quickstart.ipynb with nbclient (small working resolution: fast) and check
what it prints, line by line: the score line, the gate line and the three metric dicts with
their exact keys."""
from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Dict, List, Optional

import pytest
from helpers import REPO_ROOT

NOTEBOOK = REPO_ROOT / "notebooks" / "quickstart.ipynb"

STATUS_LINE = re.compile(r"status (\w+), regime (\w+), IR (\d+\.\d{3}), GE (\d+\.\d{3}) px, "
                         r"report gate pass: (True|False)")
GATE_LINE = re.compile(r"gate: (\w+) (\S+) (\w+)")
#: keys of the three dicts the last cell prints, in order
TRIO_KEYS = {"EpipolarError", "EpipolarInlierRate", "FeatureMatchCoverage"}
ADA_KEYS = {"pooled_adadfrc_mean", "pooled_adadfrc_quantile", "num_samples",
            "num_not_applicable", "num_error"}
BACKGROUND_KEYS = {"ir", "ge_px", "ir_h", "ge_h_px", "ir_f", "ge_f_px", "pass_rate", "num_clips",
                   "num_ok", "num_not_applicable", "num_error", "num_pass"}


def printed_dict(line: str) -> Dict[str, Optional[float]]:
    """``{'key': 1.0, 'other': None, ...}`` as printed by ``print(dict)`` -> the dict (values
    float, NaN included, or None); the whole line must be such a dict."""
    pairs = re.findall(r"'(\w+)': ([^,]+)", line[1:-1])
    rebuilt = "{" + ", ".join(f"'{k}': {v}" for k, v in pairs) + "}"
    assert rebuilt == line, f"not a printed dict of numbers: {line!r}"
    return {k: None if v == "None" else float(v) for k, v in pairs}


def stdout_lines(nb) -> List[str]:
    """Every line the code cells printed to stdout, in order."""
    return [line for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])
            if o.get("output_type") == "stream" and o.get("name") == "stdout"
            for line in o.get("text", "").splitlines()]


def check_printed(lines: List[str]) -> None:
    """The notebook's printed results, parsed exactly."""
    status = [m for m in map(STATUS_LINE.fullmatch, lines) if m]
    assert len(status) == 1, lines
    state, regime, ir, ge, _ = status[0].groups()
    assert state == "ok" and regime in ("H", "F") and 0.0 < float(ir) <= 1.0 and float(ge) >= 0
    gate = [m for m in map(GATE_LINE.fullmatch, lines) if m]
    assert len(gate) == 1 and gate[0].group(1) == "parallax" and gate[0].group(3) == regime
    assert math.isfinite(float(gate[0].group(2)))
    dicts = [printed_dict(line) for line in lines if line.startswith("{")]
    assert [set(d) for d in dicts] == [TRIO_KEYS, ADA_KEYS, BACKGROUND_KEYS]
    trio, ada, background = dicts
    assert all(v is not None and math.isfinite(v) for v in trio.values())
    assert trio["EpipolarError"] >= 0 and 0 < trio["EpipolarInlierRate"] <= 1
    assert 0 < trio["FeatureMatchCoverage"] <= 1
    assert ada["num_samples"] > 0 and ada["num_error"] == 0
    assert 0 <= ada["pooled_adadfrc_mean"] and 0 <= ada["pooled_adadfrc_quantile"] < math.inf
    counts = [background[k] for k in ("num_ok", "num_not_applicable", "num_error")]
    assert background["num_clips"] == 4 == sum(counts) and background["num_ok"] > 0
    assert 0 < background["ir"] <= 1 and 0 <= background["pass_rate"] <= 1


def test_printed_dict_is_exact():
    """A renamed key cannot hide behind a substring: keys are compared whole."""
    d = printed_dict("{'pooled_adadfrc_mean': 0.5, 'num_error': 0.0, 'x': nan, 'y': None}")
    assert set(d) == {"pooled_adadfrc_mean", "num_error", "x", "y"} and d["y"] is None
    assert math.isnan(d["x"]) and d["pooled_adadfrc_mean"] == 0.5
    assert "adadfrc_mean" not in d
    with pytest.raises(AssertionError):
        printed_dict("{'a': 1.0, 'b': [1, 2]}")


def test_quickstart_notebook_runs(shared_data: Path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    monkeypatch.setenv("GEOCON_SHARED_DATA", str(shared_data))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    nb = nbformat.read(NOTEBOOK, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=600, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
    check_printed(stdout_lines(nb))
