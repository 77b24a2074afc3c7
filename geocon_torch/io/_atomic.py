"""Atomic output files: a file is written under a temporary name in its own folder and moved onto
its real name (``os.replace``) only when complete, so an interrupted or failed write (Ctrl-C,
SIGTERM turned into an exception by the CLI, a full disk, a bug) leaves the previous file, or
none, and never a truncated one under the real name. Only SIGKILL / a power cut can leave the
hidden temporary (``.<stem>.partial-<pid>-<random><suffix>``) behind.

The temporary keeps the real suffix, so tools that pick a format by the file name (PyAV's
muxer, ``numpy.savez`` adding ``.npz``) write the same bytes as to the real name. A symlink
stays a link (the file it points to is replaced); what is not a regular file (``/dev/stdout``,
a FIFO) is written in place, as before.
"""
from __future__ import annotations

import os
import secrets
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Union


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
    path = Path(os.path.realpath(path))  # through symlinks: the link stays (module doc)
    if path.exists() and not path.is_file():  # a device or FIFO: nothing to replace
        yield path
        return
    tmp = path.with_name(f".{path.stem}.partial-{os.getpid()}-{secrets.token_hex(3)}"
                         f"{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:  # never hide the exception that stopped the write
            pass
        raise


def atomic_write_text(path: Union[str, Path], text: str, encoding: str = "utf-8") -> Path:
    """``Path(path).write_text(text)`` through :func:`atomic_output`; returns ``path`` (as
    given, a Path)."""
    path = Path(path)
    with atomic_output(path) as tmp:
        tmp.write_text(text, encoding=encoding)
    return path


__all__ = ["atomic_output", "atomic_write_text"]
