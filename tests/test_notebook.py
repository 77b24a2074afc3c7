"""Execute notebooks/quickstart.ipynb with nbclient (small working resolution: fast)."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import REPO_ROOT

NOTEBOOK = REPO_ROOT / "notebooks" / "quickstart.ipynb"


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
    outputs = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code"
                      for o in c.get("outputs", []))
    assert "status ok" in outputs and "EpipolarError" in outputs and "adadfrc_mean" in outputs
    errors = [o for c in nb.cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors
