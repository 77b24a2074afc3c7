"""Local checkpoints for the learned backends (DISK, LoFTR, LightGlue, RAFT, SAM-2, DUSt3R).

Nothing is ever downloaded: every learned backend loads from a path the user gives (or a file
already in a local cache), and every failure is a :class:`~geocon_torch.errors.CheckpointError`
that says which backend, which path and what to do.
"""
from __future__ import annotations

import hashlib
import io
import os
import pickle
import re
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Set, Tuple, Union

import torch

from ._json import not_a_file
from .errors import CheckpointError, ConfigError

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
        msg = (f"{what} checkpoint not found: {p}" if allow_dir else
               not_a_file(p, f"{what} checkpoint", "the weights file"))
        if not p.is_absolute():  # say where a relative path was looked for
            msg += (f" (a relative path is resolved against the working directory: "
                    f"{p.absolute()})")
        raise CheckpointError(msg)
    return p


#: SHA-256 of the checkpoint bytes whose zip members' CRC-32s were checked (once per content)
_CRC_CHECKED: Set[str] = set()
#: resolved path -> SHA-256 of the bytes :func:`load_weights_only` last loaded from it
_LOADED: Dict[str, str] = {}


def loaded_digest(path: PathLike) -> Optional[str]:
    """The SHA-256 (64 hex digits) of the bytes :func:`load_weights_only` last loaded from
    ``path`` in this process, or None (never loaded here)."""
    return _LOADED.get(str(Path(path).expanduser().resolve()))


def _check_crc(data: bytes, sha: str, path: Path, what: str) -> None:
    """Check the CRC-32 of every member of the zip checkpoint ``data`` (``zipfile.testzip``),
    once per content ``sha``; a legacy (non-zip) or unreadable archive is left to torch.

    Raises:
        CheckpointError: a member whose CRC-32 does not match (bit rot, a bad copy: torch's
            reader does not check it).
    """
    if sha in _CRC_CHECKED or not data.startswith(_ZIP_MAGIC):
        return
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as zf:
            bad = zf.testzip()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        return  # not a readable archive: torch.load's failure says why
    if bad is not None:
        raise CheckpointError(f"{what} checkpoint {path} is corrupted (CRC mismatch in "
                              f"member {bad}): copy or download the file again")
    _CRC_CHECKED.add(sha)


def _torch_load(data: bytes, allowed: Sequence[type], path: Path, what: str) -> Any:
    """``torch.load`` of the bytes ``data`` (CPU, ``weights_only``, ``allowed`` allow-listed)."""
    if not allowed:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    safe = getattr(torch.serialization, "safe_globals", None)
    if safe is None:
        raise CheckpointError(f"{what} checkpoint {path}: reading it safely needs torch >= 2.5 "
                              f"(torch.serialization.safe_globals); this is torch "
                              f"{torch.__version__}")
    with safe(list(allowed)):
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)


def load_weights_only(path: Path, what: str, allowed: Sequence[type] = ()) -> Any:
    """``torch.load(path, weights_only=True)`` on the CPU, with the classes in ``allowed``
    allow-listed for this one load (``torch.serialization.safe_globals``; e.g.
    ``argparse.Namespace``, which DUSt3R checkpoints store their constructor arguments in).

    Allow-listing a plain data class keeps the load safe: the unpickler may rebuild those
    objects, and still refuses every other global (no ``weights_only=False`` code execution).

    The file is read once; those bytes are loaded, hashed (in a second thread, while torch
    loads; :func:`loaded_digest`) and, for a zip checkpoint, CRC-checked (once per content), so
    the hash recorded is that of what was loaded.

    Raises:
        CheckpointError: an unreadable file (the message says why: empty, truncated, corrupted
            (a zip member's CRC-32), not a torch checkpoint, a plain pickle, or the global a safe
            load refused; never torch's advice to load with ``weights_only=False``), or a torch
            without ``safe_globals`` (< 2.5) when ``allowed`` is not empty.
    """
    try:
        with open(path, "rb") as fh:
            data = fh.read()
    except OSError as exc:
        raise CheckpointError(f"{what} checkpoint {path} could not be read: {exc}") from exc
    with ThreadPoolExecutor(1) as pool:  # hashlib releases the GIL on large buffers
        digest = pool.submit(lambda: hashlib.sha256(data).hexdigest())
        try:
            obj = _torch_load(data, allowed, path, what)
        except CheckpointError:
            raise
        except Exception as exc:  # noqa: BLE001 - any unpickling failure is a bad checkpoint
            _check_crc(data, digest.result(), path, what)  # damage explains it best
            raise CheckpointError(f"{what} checkpoint {path} could not be read: "
                                  f"{_load_failure(data, exc)}") from exc
        sha = digest.result()
    _check_crc(data, sha, path, what)
    _LOADED[str(Path(path).resolve())] = sha
    return obj


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
#: the pickled magic number a legacy (non-zip) ``torch.save`` file starts with (after the
#: protocol header, and a frame header from protocol 4)
_LEGACY_MAGIC = pickle.dumps(0x1950a86a20f9469cfc6c, protocol=2)[2:-1]
_PLAIN_PICKLE = ("it is a plain Python pickle (pickle.dump), not a torch.save file: re-save "
                 "the state_dict with torch.save")


def _load_failure(data: bytes, exc: Exception) -> str:
    """Why ``torch.load`` of the bytes ``data`` failed with ``exc``, in words: an empty,
    truncated, non-torch or plain-pickle file by its first bytes; else torch's reason without
    its advice (re-running with ``weights_only=False``, allow-listing globals), which
    contradicts the safe loading."""
    head = data[:len(_ZIP_MAGIC)]
    if head == b"":
        return "the file is empty"
    if head.startswith(_ZIP_MAGIC) and not zipfile.is_zipfile(io.BytesIO(data)):
        return "it is truncated or corrupted (an incomplete zip archive)"
    if not head.startswith((_ZIP_MAGIC, _PICKLE_MAGIC)):
        return "it is not a torch checkpoint (neither a zip archive nor a pickle)"
    if head.startswith(_PICKLE_MAGIC) and _LEGACY_MAGIC not in data[:32]:
        return _PLAIN_PICKLE
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
    odd = next((k for k in data if not isinstance(k, str)), None)
    if odd is not None:
        raise CheckpointError(f"{what} checkpoint {p} is not a state_dict with string keys "
                              f"(key {odd!r} is a {type(odd).__name__})")
    if strip_prefix:
        n = len(strip_prefix)
        data = {k[n:] if k.startswith(strip_prefix) else k: v for k, v in data.items()}
    return data


_DIGEST_CHUNK = 1 << 20
#: file_digest's cache: (resolved path, listing) -> SHA-256
_DIGEST_CACHE: Dict[Tuple[str, Tuple[Tuple[str, int, int], ...]], str] = {}


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
        if key not in _DIGEST_CACHE:
            h = hashlib.sha256()
            for rel, size, _ in listing:
                if root.is_dir():  # name and size delimit each file's bytes
                    h.update(f"{rel}\0{size}\0".encode())
                with open(root / rel if rel else root, "rb") as fh:
                    for block in iter(lambda: fh.read(_DIGEST_CHUNK), b""):
                        h.update(block)
            _DIGEST_CACHE[key] = h.hexdigest()
    except OSError:  # unreadable: the backend that loads it says why (CheckpointError)
        return None
    return _DIGEST_CACHE[key]


#: kind -> (key, model): the last model each heavy backend built
_MODEL_CACHE: Dict[str, Tuple[Tuple, Any]] = {}


def cached_model(kind: str, checkpoint: Optional[PathLike], options: Tuple,
                 build: Callable[[], Any], expect_sha256: Optional[str] = None) -> Any:
    """``build()``'s model, kept while ``(checkpoint's content, options)`` stays the same, one
    model per ``kind``: scoring a batch of clips loads a checkpoint once, not once per clip.
    A changed file (or a changed file below a checkpoint folder) or option builds (and keeps)
    a new model. The content is :func:`file_digest` (cached per
    path, size and modification time of each file), and where ``build`` read the file through
    :func:`load_weights_only` the hash of the bytes it loaded.

    Args:
        expect_sha256: the SHA-256 the clip's config pinned for ``checkpoint`` (None: no
            check).
    Raises:
        ConfigError: the model's weights are not those of ``expect_sha256`` (the file changed
            after the config was pinned: the result would record a hash its model was not
            built from).
    """
    path = None if checkpoint is None else Path(checkpoint).expanduser()
    digest = file_digest(path) if path is not None else None
    key = (str(path), digest) + tuple(options)
    hit = _MODEL_CACHE.get(kind)
    if hit is not None and hit[0] == key:
        model = hit[1]
    else:
        _MODEL_CACHE.pop(kind, None)  # free the old model before building the new one
        model = build()
        loaded = loaded_digest(path) if path is not None and path.is_file() else None
        if loaded is not None and loaded != digest:  # changed between the hash and the load
            digest = loaded
            key = (str(path), digest) + tuple(options)
        _MODEL_CACHE[kind] = (key, model)
    if expect_sha256 is not None and digest is not None and digest != expect_sha256:
        raise ConfigError(f"{kind} checkpoint {path} changed during the run: the config pinned "
                          f"sha256 {expect_sha256}, the model was built from {digest}")
    return model
