"""Leaderboard manifests: one row per clip, CSV (header line) or JSONL (one object per line).

Fields (paper sec. 5.5 plus the prompt category and optional ``poses_path``):

========== ======== ===========================================================================
field      required meaning
========== ======== ===========================================================================
clip_id    no       unique id of the clip in the manifest; when blank it is derived from the
                    path: the file stem, or the shortest unique path suffix (``sora/3``)
path       yes      video file or image folder; relative paths are relative to the manifest
generator  yes      name of the video generator (the leaderboard groups by it)
generator_version no free text
prompt     no       the text prompt (part of the scene key)
seed       no       integer generation seed (scene key; a clip without seed is its own scene)
resolution no       "WIDTHxHEIGHT" (also "W,H" or a JSON [W, H]) -> stored as (W, H)
fps        no       frames per second, > 0
duration   no       seconds, >= 0
masks_path no       object-mask file for the clip (relative to the manifest)
poses_path no       camera-pose file for the clip (relative to the manifest)
category   no       the prompt family: C1..C6 or a free label (statistics are grouped by it);
                    stored as ``prompt_category`` (a ``prompt_category`` column is read too)
========== ======== ===========================================================================

The prompt family is what the clip was *asked* to show; it never becomes the post-hoc
``behaviour`` the scorer measures. The retired columns ``model`` / ``model_version`` (the
generator, before docs/GLOSSARY.md kept "model" for geometric models) are still read as
``generator`` / ``generator_version``, with one DeprecationWarning per manifest. Unknown columns
are kept in ``ManifestEntry.extra``. Every problem raises :class:`ManifestError` naming the file
and the line.
"""
from __future__ import annotations

import csv
import json
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple, Union

from .._checks import retired_name
from .._json import not_a_file
from ..errors import GeoConError, InputError
from ..io._atomic import atomic_output
from .ids import derive_clip_ids

REQUIRED_FIELDS = ("path", "generator")
OPTIONAL_FIELDS = ("clip_id", "generator_version", "prompt", "seed", "resolution", "fps",
                   "duration", "masks_path", "poses_path", "prompt_category")
# manifest columns naming the prompt family; "category" is the paper's (and 1.x) column name
PROMPT_CATEGORY_COLUMNS = ("prompt_category", "category")
#: retired manifest column -> its name now (docs/GLOSSARY.md; read with a DeprecationWarning)
RETIRED_COLUMNS = {"model": "generator", "model_version": "generator_version"}
KNOWN_FIELDS = REQUIRED_FIELDS + OPTIONAL_FIELDS + ("category",) + tuple(RETIRED_COLUMNS)
COLUMN_ORDER = ("clip_id",) + REQUIRED_FIELDS + OPTIONAL_FIELDS[1:]


class ManifestError(GeoConError, ValueError):
    """A manifest file is unreadable or a row is invalid; the message names file and line."""


def scene_key(prompt_category: Optional[str], prompt: Optional[str], seed: Any,
              clip_id: Any) -> str:
    """Scene key of scene-balanced statistics: ``prompt_category|prompt|seed``, or
    ``clip:<clip_id>`` when the seed is unknown (the clip is then a scene of its own)."""
    if seed is None:
        return f"clip:{clip_id}"
    return f"{prompt_category or ''}|{prompt or ''}|{seed}"


@dataclass
class ManifestEntry:
    """One clip of a leaderboard run (paths already resolved against the manifest folder)."""

    clip_id: str
    path: str
    generator: str  # the video generator's name (docs/GLOSSARY.md)
    generator_version: Optional[str] = None
    prompt: Optional[str] = None
    seed: Optional[int] = None
    resolution: Optional[Tuple[int, int]] = None  # (width, height) in px
    fps: Optional[float] = None
    duration: Optional[float] = None  # seconds
    masks_path: Optional[str] = None
    poses_path: Optional[str] = None
    prompt_category: Optional[str] = None  # prompt family C1..C6 or a free label
    extra: Dict[str, Any] = field(default_factory=dict)
    line: int = 0  # 1-based line in the manifest file (0 when built in code)

    @property
    def scene(self) -> str:
        """Scene key used for scene-balanced statistics (:func:`scene_key`)."""
        return scene_key(self.prompt_category, self.prompt, self.seed, self.clip_id)

    @property
    def model(self) -> str:
        """Retired name of :attr:`generator` (docs/GLOSSARY.md)."""
        retired_name("ManifestEntry.model", "ManifestEntry.generator")
        return self.generator

    @property
    def model_version(self) -> Optional[str]:
        """Retired name of :attr:`generator_version` (docs/GLOSSARY.md)."""
        retired_name("ManifestEntry.model_version", "ManifestEntry.generator_version")
        return self.generator_version

    def to_dict(self) -> Dict[str, Any]:
        d = asdict(self)
        d["resolution"] = list(self.resolution) if self.resolution else None
        d.pop("line")
        return d


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.strip() == "")


def _parse_resolution(value: Any) -> Tuple[int, int]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        w, h = value
    elif isinstance(value, str):
        m = re.fullmatch(r"\s*(\d+)\s*[xX,*]\s*(\d+)\s*", value)
        if not m:
            raise InputError(f"resolution must look like 1280x720, got {value!r}")
        w, h = m.groups()
    else:
        raise InputError(f"resolution must be 'WxH' or [W, H], got {value!r}")
    w, h = int(w), int(h)
    if w <= 0 or h <= 0:
        raise InputError(f"resolution must be positive, got {w}x{h}")
    return w, h


def _parse_number(name: str, value: Any, *, positive: bool) -> float:
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a number, got {value!r}") from None
    if x != x or x in (float("inf"), float("-inf")):
        raise InputError(f"{name} must be finite, got {value!r}")
    if (positive and x <= 0) or x < 0:
        raise InputError(f"{name} must be {'> 0' if positive else '>= 0'}, got {x}")
    return x


#: seeds are stored as signed 64-bit integers (SQLite INTEGER, PostgreSQL BIGINT)
SEED_RANGE = (-2 ** 63, 2 ** 63 - 1)


def _parse_seed(value: Any) -> int:
    """An integer seed in :data:`SEED_RANGE` from an int, an integral float or a digit string
    (InputError otherwise)."""
    seed: Optional[int] = None
    if isinstance(value, bool):
        pass
    elif isinstance(value, int):
        seed = value
    elif isinstance(value, float) and value.is_integer():
        seed = int(value)
    elif isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        seed = int(value)
    if seed is None:
        raise InputError(f"seed must be an integer, got {value!r}")
    if not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise InputError(f"seed {seed} is outside the signed 64-bit range "
                         f"[{SEED_RANGE[0]}, {SEED_RANGE[1]}] a store can hold")
    return seed


def is_utf8(text: str) -> bool:
    """True when ``text`` encodes as UTF-8: it holds no lone surrogate (``\\udce9``: a file
    or folder name in another encoding, as Python decodes it)."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def unstorable_text(text: str) -> Optional[str]:
    """Why no result store can keep ``text`` in a text column (the same on every back end), or
    None: a NUL character (PostgreSQL text cannot hold one), or text that is not UTF-8
    (:func:`is_utf8`)."""
    if "\x00" in text:
        return "holds a NUL character (\\x00), which no result store can keep; remove it"
    if not is_utf8(text):
        at = next(i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff")
        return (f"is not UTF-8 text ({ascii(text[at])[1:-1]} at character {at}: a file or "
                "folder name in another encoding?), which no result store can keep; rename it "
                "in UTF-8")
    return None


def storable_text(text: str) -> str:
    """``text`` as every store can keep it (an error reason): a NUL written ``\\x00``, a lone
    surrogate ``\\udce9``; any other text unchanged."""
    text = text.replace("\x00", "\\x00")
    return text if text.isascii() else text.encode("utf-8", "backslashreplace").decode("utf-8")


#: text a spreadsheet would run as a formula: first character = + - @ tab CR, after any
#: apostrophes (the CSV writers quote those with one more leading apostrophe, OWASP's rule)
_FORMULA_START = re.compile(r"'*[=+\-@\t\r]")
#: what a JSON reader says of nesting deeper than the interpreter's recursion limit
TOO_DEEP = "nested deeper than Python's recursion limit allows"
#: the deepest nesting of lists / objects a manifest value (an extra column) may have
MAX_DEPTH = 64


def spreadsheet_text(value: Any) -> Any:
    """``value`` as a CSV cell that a spreadsheet shows as text: a string whose first character
    after any apostrophes is = + - @ tab or CR (a formula to Excel / LibreOffice) gets one
    leading apostrophe; anything else (other text, numbers, None) is returned unchanged.
    :func:`spreadsheet_value` undoes it."""
    return "'" + value if isinstance(value, str) and _FORMULA_START.match(value) else value


def spreadsheet_value(value: Any) -> Any:
    """The text :func:`spreadsheet_text` quoted: one leading apostrophe removed from a string
    that :data:`_FORMULA_START` matches after it; anything else unchanged."""
    if isinstance(value, str) and value.startswith("'") and _FORMULA_START.match(value, 1):
        return value[1:]
    return value


def _shown(name: Any) -> str:
    """A field name for a message (a NUL shown as ``?``, a lone surrogate escaped)."""
    text = str(name).replace("\x00", "?")
    return repr(text) if unstorable_text(text) is None else ascii(text)


def _check_text(row: Dict[str, Any]) -> None:
    """Refuse text no store can keep (:func:`unstorable_text`: a NUL character, or text that is
    not UTF-8) in any text field or column name of a row (a store would fail mid-run)."""
    for key, value in row.items():
        for text in (key, value):
            problem = unstorable_text(text) if isinstance(text, str) else None
            if problem:
                raise InputError(f"field {_shown(key)} {problem}")


def _check_depth(row: Dict[str, Any]) -> None:
    """Refuse a value (an extra column's JSON) that nests lists / objects deeper than
    :data:`MAX_DEPTH` (copying and storing the row recurse: ~500 levels were a RecursionError
    after the clip was scored). Iterative, linear in the size of the row."""
    stack = [(value, 1, key) for key, value in row.items()]
    while stack:
        value, depth, key = stack.pop()
        if isinstance(value, (dict, list)):
            if depth > MAX_DEPTH:
                raise InputError(f"field {_shown(key)} nests lists / objects deeper than "
                                 f"{MAX_DEPTH} levels")
            items = value.values() if isinstance(value, dict) else value
            stack.extend((v, depth + 1, key) for v in items)


def _resolve(base: Path, value: str) -> str:
    p = Path(value).expanduser()
    return str(p if p.is_absolute() else (base / p))


def _prompt_category(row: Dict[str, Any]) -> Optional[str]:
    """The prompt family of a row, from its ``prompt_category`` or ``category`` column (both
    may be given when they agree)."""
    values = {k: str(row[k]).strip() for k in PROMPT_CATEGORY_COLUMNS if not _blank(row.get(k))}
    if len(set(values.values())) > 1:
        raise InputError(f"prompt_category {values['prompt_category']!r} and category "
                         f"{values['category']!r} disagree (both name the prompt family; "
                         "give one)")
    return next(iter(values.values()), None)


def retired_columns(rows: Iterable[Any]) -> List[str]:
    """The retired columns (:data:`RETIRED_COLUMNS`) that any of ``rows`` fills, in order."""
    used = {k for row in rows if isinstance(row, dict) for k in RETIRED_COLUMNS
            if not _blank(row.get(k))}
    return [k for k in RETIRED_COLUMNS if k in used]


def _warn_retired(columns: Sequence[str], where: str) -> None:
    for old in columns:
        retired_name(f"{where}: manifest column {old!r}", repr(RETIRED_COLUMNS[old]),
                     stacklevel=4)


def _renamed(row: Dict[str, Any]) -> Dict[str, Any]:
    """``row`` with its retired columns under their names now; a retired and a current column
    that disagree are an InputError (both given and equal is fine)."""
    out = dict(row)
    for old, new in RETIRED_COLUMNS.items():
        value = out.pop(old, None)
        if _blank(value):
            continue
        if not _blank(out.get(new)) and str(out[new]).strip() != str(value).strip():
            raise InputError(f"{new} {out[new]!r} and {old} {value!r} disagree ({old} is the "
                             f"retired name of {new}; give one)")
        out[new] = value
    return out


def _parse_optional(key: str, value: Any, base: Path) -> Any:
    """One optional field's value, parsed and checked (InputError on a bad value)."""
    if key == "seed":
        return _parse_seed(value)
    if key == "resolution":
        return _parse_resolution(value)
    if key in ("fps", "duration"):
        return _parse_number(key, value, positive=key == "fps")
    if key in ("masks_path", "poses_path"):
        return _resolve(base, str(value).strip())
    return str(value).strip()


def entry_from_mapping(row: Dict[str, Any], *, base: Union[str, Path] = ".", line: int = 0,
                       where: str = "manifest", warn: bool = True) -> ManifestEntry:
    """Validate one row (a dict of field -> value) and build a :class:`ManifestEntry`.

    The prompt family may come as ``category`` (the paper's column name) or
    ``prompt_category``; it is stored as :attr:`ManifestEntry.prompt_category`. The retired
    ``model`` / ``model_version`` are read as ``generator`` / ``generator_version`` (a
    DeprecationWarning unless ``warn`` is False). A blank ``clip_id`` becomes the path's stem
    here (:func:`load_manifest` makes derived ids unique across the whole manifest).
    """
    loc = f"{where}, line {line}" if line else where
    if not isinstance(row, dict):
        raise ManifestError(f"{loc}: a row must be an object, got {type(row).__name__}")
    if warn:
        _warn_retired(retired_columns([row]), loc)
    try:
        _check_depth(row)
        _check_text(row)
        row = _renamed(row)
    except InputError as exc:
        raise ManifestError(f"{loc}: {exc}") from None
    missing = [k for k in REQUIRED_FIELDS if _blank(row.get(k))]
    if missing:
        raise ManifestError(f"{loc}: missing required field(s) {', '.join(missing)} "
                            f"(required: {', '.join(REQUIRED_FIELDS)})")
    base = Path(base)
    path = _resolve(base, str(row["path"]).strip())
    kw: Dict[str, Any] = {"clip_id": Path(path).stem if _blank(row.get("clip_id"))
                          else str(row["clip_id"]).strip(),
                          "path": path, "generator": str(row["generator"]).strip(), "line": line}
    try:
        kw.update({key: _parse_optional(key, row.get(key), base) for key in OPTIONAL_FIELDS
                   if key not in ("clip_id", "prompt_category") and not _blank(row.get(key))})
        kw["prompt_category"] = _prompt_category(row)
        # the paths as resolved: a manifest folder whose name is not UTF-8 is refused too
        _check_text({k: kw.get(k) for k in ("path", "masks_path", "poses_path")})
    except ValueError as exc:
        raise ManifestError(f"{loc}: {exc}") from None
    kw["extra"] = {k: v for k, v in row.items() if k not in KNOWN_FIELDS and k is not None}
    return ManifestEntry(**kw)


def _rows_jsonl(path: Path) -> Iterable[Tuple[int, Dict[str, Any]]]:
    with path.open(encoding="utf-8-sig") as fh:  # -sig: a byte-order mark, as in a CSV
        for lineno, text in enumerate(fh, 1):
            if not text.strip() or text.lstrip().startswith("#"):
                continue
            try:
                yield lineno, json.loads(text)
            except json.JSONDecodeError as exc:
                raise ManifestError(f"{path}, line {lineno}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise ManifestError(f"{path}, line {lineno}: not valid JSON ({TOO_DEEP})") from None


def _rows_csv(path: Path) -> Iterable[Tuple[int, Dict[str, Any]]]:
    """(line, row) of each non-blank CSV row, cells as :func:`spreadsheet_value` reads them (a
    formula quoted by :func:`write_manifest` comes back as written); a row the csv module
    cannot parse (a field over its size limit, ...) is a ManifestError naming its line."""
    with path.open(encoding="utf-8-sig", newline="") as fh:  # -sig: Excel's byte-order mark
        reader = csv.DictReader(fh)
        try:
            for lineno, row in _csv_records(path, reader):
                yield lineno, {k: spreadsheet_value(v) for k, v in row.items()}
        except csv.Error as exc:
            # the csv reader's count (DictReader's is only set after a row it could parse)
            raise ManifestError(f"{path}, line {reader.reader.line_num}: not a valid CSV row "
                                f"({exc})") from None


def _csv_records(path: Path, reader: csv.DictReader) -> Iterable[Tuple[int, Dict[str, Any]]]:
    """:func:`_rows_csv`'s rows as the csv module reads them (header checked first)."""
    if not reader.fieldnames:
        raise ManifestError(f"{path}: empty CSV (expected a header line with "
                            f"{', '.join(REQUIRED_FIELDS)}, ...)")
    header = [spreadsheet_value(h.strip()) for h in reader.fieldnames]
    repeated = sorted({h for h in header if header.count(h) > 1})
    if repeated:
        raise ManifestError(f"{path}: the header repeats column(s) "
                            f"{', '.join(repeated)}; each column may appear once")
    reader.fieldnames = header
    retired = {new: old for old, new in RETIRED_COLUMNS.items()}
    missing = [k for k in REQUIRED_FIELDS if k not in header and retired.get(k) not in header]
    if missing:
        raise ManifestError(f"{path}, line 1: header lacks column(s) {', '.join(missing)}")
    for row in reader:
        if None in row:
            raise ManifestError(f"{path}, line {reader.line_num}: more values than header "
                                f"columns")
        if all(_blank(v) for v in row.values()):
            continue
        yield reader.line_num, row


def _not_utf8(path: Path) -> ManifestError:
    """The error of a manifest that is not UTF-8 text (Excel's default "CSV" is cp1252, its
    "Unicode Text" UTF-16), naming the first line that is not."""
    raw = path.read_bytes()
    fix = "save the manifest as 'CSV UTF-8' (or UTF-8 JSON lines)"
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")):
        return ManifestError(f"{path}: UTF-16 text (a UTF-16 byte-order mark), not UTF-8; {fix}")
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        return ManifestError(f"{path}, line {line}: not UTF-8 text (byte 0x{raw[exc.start]:02x} "
                             f"at offset {exc.start}: cp1252 / Latin-1?); {fix}")
    return ManifestError(f"{path}: not UTF-8 text; {fix}")


def load_manifest(path: Union[str, Path], *, confine: bool = False) -> List[ManifestEntry]:
    """Read a ``.csv`` or ``.jsonl`` / ``.json`` (one object per line) manifest. Relative paths
    in it are resolved against the manifest's folder and stored absolute (a store then reads
    the same files from any working directory).

    Args:
        path: the manifest file.
        confine: refuse a ``path``, ``masks_path`` or ``poses_path`` that lies outside the
            manifest's folder once links and ``..`` are resolved (a leaderboard operator
            scoring a submitter's manifest: otherwise it may name any file the operator can
            read, and the report's audit cards would publish its frames).

    Raises:
        ManifestError: file missing, unknown extension, bad JSON/CSV, a required field missing,
            a bad value (seed, fps, duration, resolution), text a store cannot keep (a NUL, a
            name that is not UTF-8), a file that is not UTF-8 text or a duplicated clip_id —
            naming the line; with ``confine``, a path outside the manifest's folder.
    """
    path = Path(path)
    if not path.is_file():
        raise ManifestError(not_a_file(path, "manifest", "a .csv or .jsonl file"))
    suffix = path.suffix.lower()
    if suffix == ".csv":
        rows = _rows_csv(path)
    elif suffix in (".jsonl", ".json", ".ndjson"):
        rows = _rows_jsonl(path)
    else:
        raise ManifestError(f"{path}: manifest must be .csv or .jsonl, got {suffix or 'no suffix'}")
    try:
        rows = list(rows)
    except UnicodeDecodeError:
        raise _not_utf8(path) from None
    if not rows:
        raise ManifestError(f"{path}: manifest has no rows")
    _warn_retired(retired_columns(row for _, row in rows), str(path))
    entries = [entry_from_mapping(row, base=path.absolute().parent, line=lineno, where=str(path),
                                  warn=False)
               for lineno, row in rows]
    explicit = [not _blank(row.get("clip_id")) if isinstance(row, dict) else True
                for _, row in rows]
    if confine:
        _check_confined(entries, path)
    check_unique_ids([e for e, x in zip(entries, explicit) if x], str(path))
    _derive_ids([e for e, x in zip(entries, explicit) if not x],
                [e.clip_id for e, x in zip(entries, explicit) if x], str(path))
    return entries


def _check_confined(entries: Sequence[ManifestEntry], manifest: Path) -> None:
    """ManifestError naming the line and field of the first path (``path``, ``masks_path``,
    ``poses_path``) that lies outside ``manifest``'s folder after links and ``..`` are
    resolved."""
    folder = Path(os.path.realpath(manifest.absolute().parent))
    for e in entries:
        for field_name in ("path", "masks_path", "poses_path"):
            value = getattr(e, field_name)
            if value is not None and not Path(os.path.realpath(value)).is_relative_to(folder):
                raise ManifestError(f"{manifest}, line {e.line}: {field_name} {value} lies "
                                    f"outside the manifest's folder {folder} (paths are "
                                    f"confined to it: --confine-paths)")


def check_unique_ids(entries: Sequence[ManifestEntry], where: str = "manifest") -> None:
    """Raise :class:`ManifestError` naming the first duplicated ``clip_id`` and its lines."""
    seen: Dict[str, int] = {}
    for e in entries:
        if e.clip_id in seen:
            raise ManifestError(f"{where}, line {e.line}: duplicate clip_id {e.clip_id!r} "
                                f"(first on line {seen[e.clip_id]})")
        seen[e.clip_id] = e.line


def _derive_ids(entries: Sequence[ManifestEntry], taken: Sequence[str], where: str) -> None:
    """Give entries without a clip_id unique ids from their paths (shortest unique suffix)."""
    if not entries:
        return
    try:
        ids = derive_clip_ids([e.path for e in entries], taken=taken)
    except InputError as exc:
        raise ManifestError(f"{where}: rows without clip_id: {exc}") from None
    for e, cid in zip(entries, ids):
        e.clip_id = cid


def write_manifest(path: Union[str, Path], entries: Iterable[Union[ManifestEntry, Dict]]) -> Path:
    """Write entries as JSONL (``.jsonl``) or CSV (``.csv``); the inverse of load_manifest.

    CSV text cells (and column names) that a spreadsheet would run as a formula get a leading
    apostrophe (:func:`spreadsheet_text`), which :func:`load_manifest` removes again. The file
    is written atomically (complete or as before; an OSError of the write names ``path``)."""
    path = Path(path)
    rows = [e.to_dict() if isinstance(e, ManifestEntry) else dict(e) for e in entries]
    for r in rows:
        r.update(r.pop("extra", None) or {})
        if isinstance(r.get("resolution"), (list, tuple)):
            r["resolution"] = "x".join(str(int(v)) for v in r["resolution"])
    with atomic_output(path) as tmp:  # a failed write leaves the previous manifest whole
        if path.suffix.lower() == ".csv":
            fields = COLUMN_ORDER
            cols = list(fields) + sorted({k for r in rows for k in r} - set(fields))
            with tmp.open("w", encoding="utf-8", newline="") as fh:
                w = csv.writer(fh)
                w.writerow([spreadsheet_text(k) for k in cols])
                for r in rows:
                    w.writerow(["" if r.get(k) is None else spreadsheet_text(r.get(k))
                                for k in cols])
        else:
            with tmp.open("w", encoding="utf-8") as fh:
                for r in rows:
                    fh.write(json.dumps({k: v for k, v in r.items() if v is not None}) + "\n")
    return path
