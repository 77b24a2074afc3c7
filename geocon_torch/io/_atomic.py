"""Atomic output files: a file is written under a temporary name in its own folder and moved onto
its real name (``os.replace``) only when complete, so an interrupted or failed write (Ctrl-C,
SIGTERM turned into an exception by the CLI, a full disk, a bug) leaves the previous file, or
none, and never a truncated one under the real name. Only SIGKILL / a power cut can leave the
hidden temporary (``.<stem>.partial-<pid>-<random><suffix>``) behind.

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
    tmp = path.with_name(f".{path.stem}.partial-{os.getpid()}-{secrets.token_hex(3)}"
                         f"{path.suffix}")
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
        exc.filename, exc.filename2 = first, second
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
