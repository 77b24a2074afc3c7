"""The progress bar class of the commands, the bench runner and the HTML report.

``tqdm.auto`` picks the notebook widget inside Jupyter, but without ``ipywidgets`` it warns
"IProgress not found" at import and falls back to the text bar anyway; importing
:mod:`geocon_torch` in such a notebook then printed that warning although no bar was asked
for. Here the widget is chosen only where ``ipywidgets`` is installed, the text bar otherwise.
"""
from __future__ import annotations

import importlib.util
from typing import Any


def _bar_class() -> Any:
    if importlib.util.find_spec("ipywidgets") is not None:
        from tqdm.auto import tqdm as auto
        return auto
    from tqdm.std import tqdm as text
    return text


tqdm = _bar_class()

__all__ = ["tqdm"]
