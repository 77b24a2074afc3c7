"""Local checkpoints for the learned backends (DISK, LoFTR, LightGlue, RAFT, SAM-2, DUSt3R).

Nothing is ever downloaded: every learned backend loads from a path the user gives (or a file
already in a local cache), and every failure is a :class:`~geocon_torch.errors.CheckpointError`
that says which backend, which path and what to do.
"""
from __future__ import annotations

import re
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

import torch

from ._json import not_a_file
from .errors import CheckpointError

PathLike = Union[str, Path]


def require_checkpoint(path: Optional[PathLike], what: str, hint: str = "pass checkpoint=PATH",
                       allow_dir: bool = False) -> Path:
    """The checkpoint path of backend ``what``, checked to exist.

    Raises:
        CheckpointError: ``path`` is None (the message says ``hint``: where to set it), or no
            such file (or folder, with ``allow_dir``); a folder without ``allow_dir`` is named
            as one (:func:`~geocon_torch._json.not_a_file`), not as missing.
    """
    if path is None:
        raise CheckpointError(f"{what} needs a local checkpoint: {hint} (nothing is downloaded)")
    p = Path(path).expanduser()
    if not (p.is_file() or (allow_dir and p.is_dir())):
        raise CheckpointError(f"{what} checkpoint not found: {p}" if allow_dir else
                              not_a_file(p, f"{what} checkpoint", "the weights file"))
    return p


def load_weights_only(path: Path, what: str, allowed: Sequence[type] = ()) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, with the classes in ``allowed``
    allow-listed for this one load (``torch.serialization.safe_globals``; e.g.
    ``argparse.Namespace``, which DUSt3R checkpoints store their constructor arguments in).

    Allow-listing a plain data class keeps the load safe: the unpickler may rebuild those
    objects, and still refuses every other global (no ``weights_only=False`` code execution).

    Raises:
        CheckpointError: an unreadable file (the message says why: empty, truncated, not a
            torch checkpoint, or the global a safe load refused; never torch's advice to load
            with ``weights_only=False``), or a torch without ``safe_globals`` (< 2.5) when
            ``allowed`` is not empty.
    """
    try:
        if not allowed:
            return torch.load(str(path), map_location="cpu", weights_only=True)
        safe = getattr(torch.serialization, "safe_globals", None)
        if safe is None:
            raise CheckpointError(f"{what} checkpoint {path}: reading it safely needs "
                                  f"torch >= 2.5 (torch.serialization.safe_globals); this is "
                                  f"torch {torch.__version__}")
        with safe(list(allowed)):
            return torch.load(str(path), map_location="cpu", weights_only=True)
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad checkpoint
        raise CheckpointError(f"{what} checkpoint {path} could not be read: "
                              f"{_load_failure(path, exc)}") from exc


#: the first bytes of a torch checkpoint: a zip archive (torch >= 1.6) or a pickle (older)
_ZIP_MAGIC, _PICKLE_MAGIC = b"PK\x03\x04", b"\x80"
#: where torch's messages start advice that does not apply here (load unsafely, allow-list)
_ADVICE = re.compile(r"\s*(Please use `torch\.serialization|Check the documentation of "
                     r"torch\.load|This is an internal miniz error)")
#: torch's advice to re-run ``torch.load`` with ``weights_only=False`` (its UNSAFE_MESSAGE,
#: whole), which it puts into every refusal, whatever the phrasing around it
_UNSAFE = re.compile(r"In PyTorch [0-9.]+, we changed the default value of the `weights_only`.*?"
                     r"trusted source\.", re.S)
_FAILED, _REFUSED = "Weights only load failed.", "a safe (weights_only) load refuses it: "


def _load_failure(path: Path, exc: Exception) -> str:
    """Why ``torch.load(path)`` failed with ``exc``, in words: an empty, truncated or
    non-torch file by its first bytes; else torch's reason without its advice (re-running
    with ``weights_only=False``, allow-listing globals), which contradicts the safe loading."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(len(_ZIP_MAGIC))
    except OSError:
        head = None
    if head == b"":
        return "the file is empty"
    if head is not None and head.startswith(_ZIP_MAGIC) and not zipfile.is_zipfile(path):
        return "it is truncated or corrupted (an incomplete zip archive)"
    if head is not None and not head.startswith((_ZIP_MAGIC, _PICKLE_MAGIC)):
        return "it is not a torch checkpoint (neither a zip archive nor a pickle)"
    text = str(exc)
    text = _UNSAFE.sub(" ", text)
    if "WeightsUnpickler error:" in text:  # the safe unpickler refused something
        text = _REFUSED + text.split("WeightsUnpickler error:", 1)[1]
    elif text.lstrip().startswith(_FAILED):  # a refused global of a blocked module (os.system)
        text = _REFUSED + text.lstrip()[len(_FAILED):]
    text = _ADVICE.split(text, maxsplit=1)[0]
    return " ".join(text.split()) or type(exc).__name__


def read_state_dict(path: Optional[PathLike], what: str, *, hint: str = "pass checkpoint=PATH",
                    unwrap: Sequence[str] = (), strip_prefix: str = "") -> Dict[str, Any]:
    """Read a local torch checkpoint with ``weights_only=True``.

    Args:
        unwrap: keys under which a nested state_dict may sit (e.g. ``("state_dict", "model")``).
        strip_prefix: removed from every key that starts with it (e.g. ``"module."``).

    Raises:
        CheckpointError: missing path or file, unreadable file, or not a dict.
    """
    p = require_checkpoint(path, what, hint)
    data = load_weights_only(p, what)
    if isinstance(data, dict):
        for key in unwrap:
            if isinstance(data.get(key), dict):
                data = data[key]
                break
    if not isinstance(data, dict):
        raise CheckpointError(f"{what} checkpoint {p} holds {type(data).__name__}, "
                              "expected a dict (state_dict)")
    if strip_prefix:
        n = len(strip_prefix)
        data = {k[n:] if k.startswith(strip_prefix) else k: v for k, v in data.items()}
    return data


#: kind -> (key, model): the last model each heavy backend built
_MODEL_CACHE: Dict[str, Tuple[Tuple, Any]] = {}


def cached_model(kind: str, checkpoint: Optional[PathLike], options: Tuple,
                 build: Callable[[], Any]) -> Any:
    """``build()``'s model, kept while ``(checkpoint, its modification time, options)`` stays the
    same, one model per ``kind``: scoring a batch of clips loads a checkpoint once, not once
    per clip. A changed file or option builds (and keeps) a new model."""
    path = None if checkpoint is None else Path(checkpoint).expanduser()
    stamp = path.stat().st_mtime_ns if path is not None and path.exists() else None
    key = (str(path), stamp) + tuple(options)
    hit = _MODEL_CACHE.get(kind)
    if hit is not None and hit[0] == key:
        return hit[1]
    _MODEL_CACHE.pop(kind, None)  # free the old model before building the new one
    model = build()
    _MODEL_CACHE[kind] = (key, model)
    return model
