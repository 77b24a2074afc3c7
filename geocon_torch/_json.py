"""Reading the JSON files users hand in (configs, pose logs, prompts, ground truth), and their
NumPy .npz archives (masks, pose logs)."""
from __future__ import annotations

import json
import math
import zipfile
import zlib
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Dict, Iterator, List, NamedTuple, Set, Tuple, Type, Union

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
    file, ``"{what} {path} is not valid JSON: ..."`` when it does not parse (or is not
    UTF-8, or nests deeper than the recursion limit), and ``"{what} {path}: key 'k' given
    twice ..."`` when an object repeats a key (JSON parsers keep the last copy, so a repeated
    section or threshold would silently drop the first one's values). The file is read as UTF-8
    whatever the locale (a leading byte-order mark is skipped), so a path in it means the same
    everywhere.
    """
    path = Path(path)
    if not path.is_file():
        raise error(not_a_file(path, what, "the JSON file"))

    def unique(pairs: List[Tuple[str, Any]]) -> Dict[str, Any]:
        out = dict(pairs)
        if len(out) != len(pairs):  # name the first key seen again
            seen: Set[str] = set()
            for key, _ in pairs:
                if key in seen:
                    break
                seen.add(key)
            raise error(f"{what} {path}: key {key!r} given twice in one object (JSON keeps "
                        f"only the last copy): merge them into one")
        return out

    try:  # any locale; a BOM is fine
        return json.loads(path.read_text(encoding="utf-8-sig"), object_pairs_hook=unique)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise error(f"{what} {path} is not valid JSON: {exc}") from exc
    except RecursionError:  # [[[...]]] deeper than the interpreter's recursion limit
        raise error(f"{what} {path} is not valid JSON: nested deeper than Python's recursion "
                    f"limit allows") from None


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


class NpyHeader(NamedTuple):
    """What the .npy header of an .npz member declares, read before its data."""

    shape: Tuple[int, ...]
    dtype: np.dtype
    fortran_order: bool

    @property
    def nbytes(self) -> int:
        """Bytes of data the header declares (exact: Python ints, no overflow)."""
        return math.prod(self.shape) * self.dtype.itemsize


def _read_npy_header(stream: IO[bytes], where: str, member: str) -> NpyHeader:
    """The header of the .npy ``stream`` (left at the start of its data); InputError naming
    ``where`` and ``member`` when it is not a .npy array or cannot be read."""
    fmt = np.lib.format
    try:
        version = fmt.read_magic(stream)
        if version not in ((1, 0), (2, 0), (3, 0)):
            raise InputError(f"{where}: member '{member}' is not a readable NumPy .npy array "
                             f"(unknown .npy format version {version})")
        # version 3.0 differs from 2.0 only by UTF-8 field names (of structured dtypes, which
        # no caller accepts): its header reads as a 2.0 one
        read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
        shape, fortran_order, dtype = read(stream)
    except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
        raise InputError(f"{where}: member '{member}' is damaged ({exc})") from None
    except ValueError as exc:
        raise InputError(f"{where}: member '{member}' is not a readable NumPy .npy array "
                         f"({exc})") from None
    return NpyHeader(tuple(int(n) for n in shape), np.dtype(dtype), bool(fortran_order))


@contextmanager
def open_npz_member(archive: Any, key: str, where: str
                    ) -> Iterator[Tuple[NpyHeader, IO[bytes]]]:
    """The .npy header of array ``key`` of an archive from :func:`open_npz` and the member's
    stream at the start of its data, read without reading any data: a few hundred bytes of a
    small .npz can declare an array of many GB, so callers check the header against what they
    expect before reading (or read the stream in bounded chunks). Reading errors inside the
    block (a damaged member: bad CRC, bad deflate data) become InputError too.

    Raises:
        InputError: naming ``where`` and the member: no such member, an encrypted or
            unsupported one, or one that is not a .npy array.
    """
    names = archive.zip.namelist()
    member = f"{key}.npy" if f"{key}.npy" in names else key
    try:
        stream = archive.zip.open(member)
    except (KeyError, RuntimeError, NotImplementedError, zipfile.BadZipFile) as exc:
        raise InputError(f"{where}: member '{member}' cannot be read ({exc})") from None
    with stream:
        header = _read_npy_header(stream, where, member)
        try:
            yield header, stream
        except (zipfile.BadZipFile, zlib.error, EOFError) as exc:
            raise InputError(f"{where}: member '{member}' is damaged ({exc})") from None


def npz_header(archive: Any, key: str, where: str) -> NpyHeader:
    """The .npy header of array ``key`` of ``archive`` (:func:`open_npz_member`), nothing
    else read."""
    with open_npz_member(archive, key, where) as (header, _):
        return header
