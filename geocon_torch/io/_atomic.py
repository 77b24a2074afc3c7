"""Atomic output files: a file is written under a temporary name in its own folder and moved onto
its real name (``os.replace``) only when complete, so an interrupted or failed write (Ctrl-C,
SIGTERM turned into an exception by the CLI, a full disk, a bug) leaves the previous file, or
none, and never a truncated one under the real name. Only SIGKILL / a power cut can leave the
hidden temporary (``.<stem>.partial-<pid>-<random><suffix>``) behind. Its ``<stem>`` is cut
(on a character) where the whole name would pass the file system's limit (NAME_MAX, 255 bytes
on Linux): any name the file system takes as the output is writable.

The temporary keeps the real suffix, so tools that pick a format by the file name (PyAV's
muxer, ``numpy.savez`` adding ``.npz``) write the same bytes as to the real name. A symlink
stays a link (the file it points to is replaced); what is not a regular file (``/dev/stdout``,
a FIFO) is written in place, as before.

An ``OSError`` of the write (a full disk, a read-only file system, an I/O error) goes on naming
the real output, never the hidden temporary (:func:`name_output_error`): the CLI shows it as
one line, ``<strerror>: <path>``.
"""
from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Optional, Union


@contextmanager
def atomic_output(path: Union[str, Path]) -> Iterator[Path]:
    """Yield a temporary path beside ``path`` to write; when the block ends normally it replaces
    ``path`` in one step (readers see the old file or the new one). On any exception
    (KeyboardInterrupt and SystemExit included) the temporary is removed, ``path`` is left as
    it was and the exception goes on. The folder must exist.

    Example::

        with atomic_output(out / "roc.json") as tmp:
            tmp.write_text(text)
    """
    given = os.fspath(path)  # what the caller named: the name an error shows
    path = Path(os.path.realpath(path))  # through symlinks: the link stays (module doc)
    if path.exists() and not path.is_file():  # a device or FIFO: nothing to replace
        yield path
        return
    tmp = path.with_name(temporary_name(path))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # never hide the exception that stopped the write
            pass
        if isinstance(exc, OSError):
            named = name_output_error(exc, given, tmp)
            if named is not exc:
                raise named from exc
        raise


def _name_max(folder: Path) -> int:
    """The longest file name (bytes) the file system of ``folder`` takes (255 where it says
    nothing)."""
    try:
        limit = int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):  # no such limit / no pathconf (Windows)
        return 255
    return limit if limit > 0 else 255  # -1: the file system sets no limit


def temporary_name(path: Path) -> str:
    """The hidden temporary's name for the output ``path`` (module doc):
    ``.<stem>.partial-<pid>-<6 hex><suffix>``, the stem cut on a character so that the name's
    bytes (:func:`os.fsencode`) stay within the folder's NAME_MAX (a 241-byte output name
    needs ~23 bytes more); a suffix that alone leaves no room is dropped (no format is chosen
    by such a suffix). The leading "." and the suffix are kept otherwise."""
    limit = _name_max(path.parent)
    tail = f".partial-{os.getpid()}-{secrets.token_hex(3)}"
    if len(os.fsencode(f".{tail}{path.suffix}")) <= limit:
        tail += path.suffix
    stem = path.stem
    room = limit - len(os.fsencode(f".{tail}"))
    while stem and len(os.fsencode(stem)) > room:  # cut from the end, a character at a time
        stem = stem[:-1]
    return f".{stem}{tail}"


def filename_text(name: Any) -> Optional[str]:
    """The ``filename`` attribute of an OSError (str, bytes or path) as text; None for none or
    a file descriptor."""
    return os.fsdecode(name) if isinstance(name, (str, bytes, os.PathLike)) else None


def name_output_error(exc: OSError, path: Union[str, Path], tmp: Optional[Path] = None
                      ) -> OSError:
    """``exc``, an OSError met while writing the output ``path`` (through the temporary
    ``tmp``, if any), made to name ``path``: a ``filename`` that is ``tmp`` or missing (a
    ``write`` / ``flush`` names no file) becomes ``path``; a ``filename2`` naming the output
    (``os.replace(tmp, path)``) is dropped. An error that names another file, or has no errno
    (a bug, not the environment), is returned as it is. The exception is changed in place
    where its attributes allow, else (PyAV's ``av.error.OSError``, whose ``filename`` is
    read-only) a new OSError of the same errno is returned."""
    if exc.errno is None:
        return exc
    out = os.fspath(path)

    def ours(name: Any) -> bool:  # the temporary (its unique hidden name) or the output
        text = filename_text(name)
        return text is not None and (
            (tmp is not None and os.path.basename(text) == tmp.name)
            or os.path.realpath(text) == os.path.realpath(out))

    first = out if exc.filename is None or ours(exc.filename) else exc.filename
    second = exc.filename2
    if ours(second):
        second = None if first == out else out
    if (first, second) == (exc.filename, exc.filename2):
        return exc
    try:
        exc.filename = first
        if second is None:  # unset, not None: str() ends with "-> None" once None is assigned
            del exc.filename2
        else:
            exc.filename2 = second
        return exc
    except AttributeError:  # a read-only property (PyAV)
        return OSError(exc.errno, exc.strerror, first, None, second)


def atomic_write_text(path: Union[str, Path], text: str, encoding: str = "utf-8") -> Path:
    """``Path(path).write_text(text)`` through :func:`atomic_output`; returns ``path`` (as
    given, a Path)."""
    path = Path(path)
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return path


__all__ = ["atomic_output", "atomic_write_text", "filename_text", "name_output_error"]
