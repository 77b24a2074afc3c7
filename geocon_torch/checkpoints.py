"""Local checkpoints for the learned backends (DISK, LoFTR, LightGlue, RAFT, SAM-2, DUSt3R).

Nothing is ever downloaded: every learned backend loads from a path the user gives (or a file
already in a local cache), and every failure is a :class:`~geocon_torch.errors.CheckpointError`
that says which backend, which path and what to do.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Union

import torch

from .errors import CheckpointError

PathLike = Union[str, Path]


def require_checkpoint(path: Optional[PathLike], what: str, hint: str = "pass checkpoint=PATH",
                       allow_dir: bool = False) -> Path:
    """The checkpoint path of backend ``what``, checked to exist.

    Raises:
        CheckpointError: ``path`` is None (the message says ``hint``: where to set it), or no
            such file (or folder, with ``allow_dir``).
    """
    if path is None:
        raise CheckpointError(f"{what} needs a local checkpoint: {hint} (nothing is downloaded)")
    p = Path(path).expanduser()
    if not (p.is_file() or (allow_dir and p.is_dir())):
        raise CheckpointError(f"{what} checkpoint not found: {p}")
    return p


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
    try:
        data = torch.load(str(p), map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad checkpoint
        raise CheckpointError(f"{what} checkpoint {p} could not be read: {exc}") from exc
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
