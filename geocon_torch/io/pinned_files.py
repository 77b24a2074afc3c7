"""Content hashes of the files a run reads: learned weights and SAM-2 prompts.

A checkpoint path is a local detail (moving the file changes no number), so it enters
``config_hash`` only as given or not; what the file holds does change the numbers. Scoring pins
the config (:func:`pin_files`, called by :func:`geocon_torch.pipeline.pinned_config`): each
``<field>_sha256`` beside a path in :data:`PINNED_FILES` whose file the run reads is set to the
SHA-256 of that file (64 hex digits, as ``sha256sum`` prints it; of every file below it, for a
folder), so the result's config records which weights scored it and another file at the same
path gives another ``config_hash`` (a resumed bench job rescores instead of keeping the old
weights' rows). Which files a run reads is decided by the stages it runs
(:func:`geocon_torch.sections.stage_models.files_read`): a checkpoint the run never loads (a
DUSt3R checkpoint under the parallax gate, a RAFT checkpoint under torch-lk or a preset without
the foreground) is neither read nor pinned, so changing it changes no hash. RAFT weights taken
from the torch hub cache (no ``foreground.flow_checkpoint``) are pinned in
``foreground.flow_checkpoint_sha256`` all the same. Hashes are cached per path, size and
modification time (a 2 GB DUSt3R checkpoint is read once per process, ~3 s).
"""
from __future__ import annotations

import re
from typing import Any, Dict, Mapping, Optional, Tuple

from ..checkpoints import _DIGEST_CACHE, file_digest
from ..config import GeoConConfig
from ..errors import ConfigError

#: (section, path field) whose file's hash ``<field>_sha256`` records
PINNED_FILES: Tuple[Tuple[str, str], ...] = (
    ("features", "checkpoint"), ("gate", "dust3r_checkpoint"), ("segment", "sam2_checkpoint"),
    ("segment", "sam2_prompts"), ("foreground", "flow_checkpoint"))
_HEX64 = re.compile(r"[0-9a-f]{64}")
#: file_digest's cache (per path, size and modification time of each file); it lives beside the
#: model cache in :mod:`geocon_torch.checkpoints`, which keys models on the same digests
_cache = _DIGEST_CACHE


#: (section, path field) -> the file a run reads for it (None: the field names no file)
FilesRead = Mapping[Tuple[str, str], Any]


def pin_files(config: GeoConConfig, read: FilesRead) -> GeoConConfig:
    """``config`` with the ``<field>_sha256`` of every field of :data:`PINNED_FILES` set: to
    the hash of the file ``read`` maps it to (None where that is None; kept as given where the
    file is missing), and to None for a field not in ``read`` (a file the run does not read).

    Args:
        read: (section, path field) -> the file the run reads for it: the path the field
            names, or for ``("foreground", "flow_checkpoint")`` without a path the RAFT file
            of the torch hub cache (:func:`geocon_torch.sections.stage_models.files_read`).
    Raises:
        ConfigError: a ``<field>_sha256`` is not a 64-hex SHA-256, or it is given and the file
            read now has another hash (the file changed since the config was recorded).
    """
    updates: Dict[str, Dict[str, Optional[str]]] = {}
    for sec, name in PINNED_FILES:
        given = getattr(getattr(config, sec), f"{name}_sha256")
        if given is not None and not _HEX64.fullmatch(given):
            raise ConfigError(f"{sec}.{name}_sha256 must be the file's SHA-256 (64 lowercase hex "
                              f"digits, as sha256sum prints it), got {given!r}")
        path = read.get((sec, name))
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


__all__ = ["PINNED_FILES", "FilesRead", "file_digest", "pin_files"]
