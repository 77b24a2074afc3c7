"""Reading the JSON files users hand in (configs, pose logs, prompts, ground truth), and their
NumPy .npz archives (masks, pose logs)."""
from __future__ import annotations

import json
import zipfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Type, Union

import numpy as np

from .errors import InputError


def not_a_file(path: Union[str, Path], what: str, give: str) -> str:
    """The message for ``what`` at ``path``, which is not a regular file: ``"{what} {path} is
    a folder: give {give}"``, ``"{what} {path} is not a regular file: give {give}"`` (a
    device, a socket, ...), or ``"{what} not found: {path}"`` when nothing is there (a user
    given "not found" for a folder looks for a typo)."""
    path = Path(path)
    if path.is_dir():
        return f"{what} {path} is a folder: give {give}"
    if path.exists():
        return f"{what} {path} is not a regular file: give {give}"
    return f"{what} not found: {path}"


def read_json_file(path: Union[str, Path], what: str,
                   error: Type[Exception] = InputError) -> Any:
    """The parsed content of the JSON file ``path``.

    Raises ``error`` with ``"{what} not found: {path}"`` when nothing is there,
    ``"{what} {path} is a folder: give the JSON file"`` (:func:`not_a_file`) when it is not a
    file, and ``"{what} {path} is not valid JSON: ..."`` when it does not parse (or is not
    UTF-8).
    """
    path = Path(path)
    if not path.is_file():
        raise error(not_a_file(path, what, "the JSON file"))
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{what} {path} is not valid JSON: {exc}") from exc


@contextmanager
def open_npz(path: Union[str, Path], what: str, give: str) -> Iterator[Any]:
    """``np.load(path)`` (``allow_pickle=False``) of the user's .npz archive ``path``, closed
    on exit. A file that is not a zip archive is refused before numpy reads it (numpy would
    take it for a pickle and advise loading it "unsafely" with ``allow_pickle``).

    Raises:
        InputError: ``"{what} {path} is not a NumPy .npz archive (...); {give}"``, ``give``
            saying what to hand in instead.
    """
    bad = f"{what} {path} is not a NumPy .npz archive"
    if not zipfile.is_zipfile(path):
        raise InputError(f"{bad} (not a zip file); {give}")
    try:
        archive = np.load(path)
    except (zipfile.BadZipFile, EOFError):
        raise InputError(f"{bad} (a damaged zip file); {give}") from None
    except ValueError:  # data before the zip header: numpy falls back to (refused) pickle
        raise InputError(f"{bad} (a zip file numpy does not read as .npz); {give}") from None
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read ({exc.strerror or exc})") from None
    if not isinstance(archive, np.lib.npyio.NpzFile):  # a zip with a leading .npy header
        raise InputError(f"{bad} (it holds one .npy array); {give}")
    with archive:
        yield archive
