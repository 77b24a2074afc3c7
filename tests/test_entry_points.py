"""How the package is started and what it prints on import: ``python -m geocon_torch`` runs the
``geocon`` command, and a Jupyter kernel without ipywidgets gets the text progress bar with no
"IProgress not found" warning (``tqdm.auto`` warns there at import)."""
from __future__ import annotations

import json
import subprocess
import sys

import geocon_torch

# a Jupyter kernel (what tqdm.autonotebook looks for) with ipywidgets not importable
KERNEL_WITHOUT_WIDGETS = """
import json, sys, types, warnings
sys.modules["ipykernel.zmqshell"] = types.ModuleType("ipykernel.zmqshell")
shell = type("ZMQInteractiveShell", (), {})()
ipython = types.ModuleType("IPython")
ipython.get_ipython = lambda: shell
sys.modules["IPython"] = ipython
sys.modules["ipywidgets"] = None
with warnings.catch_warnings(record=True) as ours:
    warnings.simplefilter("always")
    import geocon_torch.bench.runner, geocon_torch.commands.score, geocon_torch.report.html
    from geocon_torch._progress_bar import tqdm
bar = tqdm.__module__
with warnings.catch_warnings(record=True) as auto:
    warnings.simplefilter("always")
    import tqdm.auto
print(json.dumps({"ours": [str(w.message) for w in ours], "bar": bar,
                  "auto": [str(w.message) for w in auto]}))
"""


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120)


def test_python_m_package_runs_the_geocon_command():
    done = _run("-m", "geocon_torch", "--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"geocon_torch {geocon_torch.__version__}\n"
    bad = _run("-m", "geocon_torch", "no-such-command")
    assert bad.returncode == 2
    assert "invalid choice: 'no-such-command'" in bad.stderr


def test_a_notebook_without_ipywidgets_gets_the_text_bar_and_no_warning():
    done = _run("-c", KERNEL_WITHOUT_WIDGETS)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert not [m for m in out["ours"] if "IProgress" in m], out["ours"]
    assert out["bar"] == "tqdm.std"
    # the setup reproduces what users met: tqdm.auto itself warns in it
    assert any("IProgress not found" in m for m in out["auto"]), out["auto"]
