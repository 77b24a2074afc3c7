"""Every public tensor function / class documents its parameters and its result.

Walks ``__all__`` of ``geocon_torch`` and of every subpackage (a package that exports nothing is
skipped): a function or class whose signature takes or returns a ``torch.Tensor`` must have a
Google-style docstring whose ``Args:`` section names every parameter (``self``, ``*args`` and
``**kwargs`` excepted). A function also needs a ``Returns:`` section (unless it returns None);
a class documents its constructor in ``Args:`` or ``Attributes:`` (a dataclass), it returns
nothing itself.
"""
from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
from typing import Dict, List, Tuple

import pytest
import torch

import geocon_torch

# geocon_torch.bench and geocon_torch.report are left out for now: another change documents
# them (docs audit s19 F5); add them here once their docstrings follow the same layout.
SKIPPED = ("geocon_torch.bench", "geocon_torch.report")

_SECTION = re.compile(r"^\s*(Args|Arguments|Attributes|Returns|Yields|Raises|Example|Examples|"
                      r"Note|Notes|References|See Also|Warning|Warnings):\s*$", re.M)
_TENSOR = re.compile(r"\bTensor\b")


def _packages() -> List[str]:
    names = ["geocon_torch"]
    for info in pkgutil.walk_packages(geocon_torch.__path__, "geocon_torch."):
        if info.ispkg and not info.name.startswith(SKIPPED):
            names.append(info.name)
    return names


def _public_objects() -> Dict[str, object]:
    """``package.name`` -> object, each object once (under the first package exporting it)."""
    seen, out = set(), {}
    for pkg in _packages():
        module = importlib.import_module(pkg)
        for name in getattr(module, "__all__", ()):
            obj = getattr(module, name)
            if not (inspect.isfunction(obj) or inspect.isclass(obj)) or id(obj) in seen:
                continue
            seen.add(id(obj))
            out[f"{pkg}.{name}"] = obj
    return out


def _signature(obj: object) -> inspect.Signature:
    return inspect.signature(obj.__init__ if inspect.isclass(obj) else obj)


def _takes_or_returns_tensor(obj: object) -> bool:
    sig = _signature(obj)
    notes = [p.annotation for p in sig.parameters.values()]
    if not inspect.isclass(obj):
        notes.append(sig.return_annotation)
    return any(_TENSOR.search(n if isinstance(n, str) else repr(n)) for n in notes
               if n is not inspect.Parameter.empty)


def _sections(doc: str) -> Dict[str, str]:
    """Section name -> its text (up to the next section header)."""
    heads = list(_SECTION.finditer(doc))
    return {m.group(1): doc[m.end():heads[k + 1].start() if k + 1 < len(heads) else len(doc)]
            for k, m in enumerate(heads)}


def _problems(obj: object) -> List[str]:
    doc = inspect.cleandoc(obj.__doc__ or "")
    if not doc:
        return ["no docstring"]
    sections = _sections(doc)
    is_class = inspect.isclass(obj)
    args = sections.get("Args", sections.get("Arguments", ""))
    if is_class:
        args += sections.get("Attributes", "")
    problems = []
    sig = _signature(obj)
    params = [p.name for p in sig.parameters.values() if p.name != "self"
              and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    if params and not args:
        problems.append("no Args section" + (" (or Attributes)" if is_class else ""))
    missing = [n for n in params if not re.search(rf"\b{re.escape(n)}\b", args)]
    if args and missing:
        problems.append(f"Args never names {missing}")
    returns_none = sig.return_annotation in ("None", None)
    if not is_class and not returns_none and "Returns" not in sections \
            and "Yields" not in sections:
        problems.append("no Returns section")
    return problems


TENSOR_API: List[Tuple[str, object]] = sorted(
    (k, v) for k, v in _public_objects().items() if _takes_or_returns_tensor(v))


def test_the_walk_finds_the_tensor_api() -> None:
    """The walk sees every subpackage (an import or __all__ slip would empty it silently)."""
    names = {k for k, _ in TENSOR_API}
    assert {"geocon_torch.Clip", "geocon_torch.geometry.ransac_homography",
            "geocon_torch.features.lk_tracks", "geocon_torch.gate.translation_inf",
            "geocon_torch.segment.dilate", "geocon_torch.metrics.functional.adadfrc",
            "geocon_torch.io.write_video", "geocon_torch.synth.project",
            "geocon_torch.flow.forward_backward_error"} <= names
    assert not [k for k in names if k.startswith(SKIPPED)]
    assert len(TENSOR_API) >= 80


@pytest.mark.parametrize("qualname,obj", TENSOR_API, ids=[k for k, _ in TENSOR_API])
def test_tensor_api_documents_args_and_returns(qualname: str, obj: object) -> None:
    problems = _problems(obj)
    assert not problems, f"{qualname}: {'; '.join(problems)}"


def test_clip_scale_is_documented_as_the_long_side_ratio() -> None:
    """``Clip.scale`` is working / source *long side*; the axes differ after the even rounding
    and ``meta["scale_xy"]`` holds the exact (sx, sy) (docs audit s19 F3)."""
    from geocon_torch import Clip
    from geocon_torch.io import read_clip

    clip = read_clip(torch.zeros(2, 3, 333, 517, dtype=torch.uint8), long_side=100)
    assert clip.source_size == (333, 517) and clip.size == (64, 100)
    assert clip.scale == 100 / 517
    assert clip.meta["scale_xy"] == [100 / 517, 64 / 333]  # sy != scale by 0.6 %
    doc = " ".join(_sections(inspect.cleandoc(Clip.__doc__))["Attributes"].split())
    scale_doc = doc[doc.index("scale:"):doc.index("name:")]
    assert "long side" in scale_doc and "scale_xy" in scale_doc
    assert "same for both axes" not in scale_doc
