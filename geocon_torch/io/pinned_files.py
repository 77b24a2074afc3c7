"""Content hashes of the files a config names: learned weights and SAM-2 prompts.

A checkpoint path is a local detail (moving the file changes no number), so it enters
``config_hash`` only as given or not; what the file holds does change the numbers. Scoring pins
the config (:func:`pin_files`, called by :func:`geocon_torch.pipeline.pinned_config`): each
``<field>_sha256`` beside a path in :data:`PINNED_FILES` is set to the SHA-256 of the file (64
hex digits, as ``sha256sum`` prints it; of every file below it, for a folder), so the result's
config records which weights scored it and another file at the same path gives another
``config_hash`` (a resumed bench job rescores instead of keeping the old weights' rows). Hashes are cached per path, size
and modification time (a 2 GB DUSt3R checkpoint is read once per process, ~3 s).
"""
from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from ..config import GeoConConfig
from ..errors import ConfigError

#: (section, path field) whose file's hash ``<field>_sha256`` records
PINNED_FILES: Tuple[Tuple[str, str], ...] = (
    ("features", "checkpoint"), ("gate", "dust3r_checkpoint"), ("segment", "sam2_checkpoint"),
    ("segment", "sam2_prompts"), ("foreground", "flow_checkpoint"))
_CHUNK = 1 << 20
_HEX64 = re.compile(r"[0-9a-f]{64}")
_cache: Dict[Tuple[str, Tuple[Tuple[str, int, int], ...]], str] = {}


def _files(root: Path) -> Tuple[Tuple[str, int, int], ...]:
    """(relative path, size, mtime_ns) of ``root`` (a file: itself, as "") or of every file
    below the folder ``root``, sorted."""
    if root.is_file():
        st = root.stat()
        return (("", st.st_size, st.st_mtime_ns),)
    out = []
    for dirpath, _, names in os.walk(root, followlinks=True):
        for name in names:
            p = Path(dirpath) / name
            if p.is_file():
                st = p.stat()
                out.append((p.relative_to(root).as_posix(), st.st_size, st.st_mtime_ns))
    return tuple(sorted(out))


def file_digest(path: Any) -> Optional[str]:
    """The SHA-256 (64 hex digits) of the file ``path`` (a folder: of each file's relative
    name, size and content, in name order, symbolic links followed); None when nothing
    readable is there (the backend that loads it reports a missing / unreadable file itself)."""
    root = Path(os.fspath(path)).expanduser()
    try:
        if not (root.is_file() or root.is_dir()):
            return None
        listing = _files(root)
        key = (str(root.resolve()), listing)
        if key not in _cache:
            h = hashlib.sha256()
            for rel, size, _ in listing:
                if root.is_dir():  # name and size delimit each file's bytes
                    h.update(f"{rel}\0{size}\0".encode())
                with open(root / rel if rel else root, "rb") as fh:
                    for block in iter(lambda: fh.read(_CHUNK), b""):
                        h.update(block)
            _cache[key] = h.hexdigest()
    except OSError:  # unreadable: the backend that loads it says why (CheckpointError)
        return None
    return _cache[key]


def pin_files(config: GeoConConfig) -> GeoConConfig:
    """``config`` with every ``<field>_sha256`` of :data:`PINNED_FILES` set to the hash of the
    file its path names (None where no path is given; kept as given where the file is missing).

    Raises:
        ConfigError: a ``<field>_sha256`` is not a 64-hex SHA-256, or it is given and the file
            now has another hash (the file changed since the config was recorded).
    """
    updates: Dict[str, Dict[str, Optional[str]]] = {}
    for sec, name in PINNED_FILES:
        section = getattr(config, sec)
        path, given = getattr(section, name), getattr(section, f"{name}_sha256")
        if given is not None and not _HEX64.fullmatch(given):
            raise ConfigError(f"{sec}.{name}_sha256 must be the file's SHA-256 (64 lowercase hex "
                              f"digits, as sha256sum prints it), got {given!r}")
        digest = file_digest(path) if path is not None else None
        if given is not None and digest is not None and digest != given:
            raise ConfigError(
                f"{sec}.{name}_sha256 is {given} but {path} has hash {digest}: the file changed "
                f"since this config was recorded; remove {sec}.{name}_sha256 to score with the "
                f"new file (results then get another config_hash), or restore the file")
        want = None if path is None else (digest or given)
        if want != given:
            updates.setdefault(sec, {})[f"{name}_sha256"] = want
    return config.replace(**updates) if updates else config


__all__ = ["PINNED_FILES", "file_digest", "pin_files"]
