"""Options and helpers shared by the score / bench / demo / report subcommands."""
from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
import textwrap
import unicodedata
from pathlib import Path
from contextlib import contextmanager
from typing import (Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, TextIO,
                    Tuple)

from .. import _checks
from ..bench.manifest import storable_text, unstorable_text
from ..config import GeoConConfig, load_config
from ..errors import ConfigError, InputError
from ..io._atomic import atomic_write_text, name_output_error
from ..io.images import IMAGE_SUFFIXES, animated_frames
from ..measures.calibration import digits_apart
from ..result import finite_number
from ..presets import PRESETS
from ..sections.progress import progress_enabled

#: the largest frame side ``--size`` takes (one 8192 x 8192 RGB float frame is 0.8 GB)
MAX_FRAME_SIDE = 8192

#: the suffixes of the files a folder gives as videos (case-insensitive; animated WebP / APNG
#: are told by their header): the usual containers, MPEG-TS (.ts, camcorder .mts / .m2ts),
#: phone .3gp / .3g2, Flash .flv / .f4v, Ogg .ogv, Windows Media .wmv / .asf, broadcast .mxf,
#: DVD .vob, .y4m, QuickTime .qt, .dv, RealMedia .rm / .rmvb, .divx, .nut, .ivf: each one
#: the PyAV build the package pins reads (tests/commands/test_cli_edges28.py). A file named
#: on the command line is read whatever its suffix (the reader probes the content).
VIDEO_SUFFIXES = (".mp4", ".webm", ".avi", ".mkv", ".mov", ".gif", ".m4v", ".mpg", ".mpeg",
                  ".ts", ".mts", ".m2ts", ".3gp", ".3g2", ".flv", ".f4v", ".ogv", ".wmv",
                  ".asf", ".mxf", ".vob", ".y4m", ".qt", ".dv", ".rm", ".rmvb", ".divx", ".nut",
                  ".ivf")


def frame_size(text: str) -> Tuple[int, int]:
    """``--size WxH`` (width first, as video resolutions and manifests are written) ->
    (W, H); argparse type: even sides >= 8, else a usage error."""
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--size must be WxH, e.g. 640x384, got {text!r}")
    if w < 8 or h < 8 or w % 2 or h % 2:
        raise argparse.ArgumentTypeError(f"--size needs even W and H >= 8, got {text!r}")
    return w, h


def bounded_frame_size(text: str) -> Tuple[int, int]:
    """:func:`frame_size` for the commands that render frames (synth, demo, calibrate): also
    W, H <= :data:`MAX_FRAME_SIDE` (a larger frame fails with an allocation traceback)."""
    w, h = frame_size(text)
    if max(w, h) > MAX_FRAME_SIDE:
        raise argparse.ArgumentTypeError(f"--size needs W and H <= {MAX_FRAME_SIDE}, got "
                                         f"{text!r}")
    return w, h


def at_least(low: int):
    """argparse type: an int >= ``low`` (else a usage error naming the bound)."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value
    parse.__name__ = f"int >= {low}"
    return parse


def unit_fraction(text: str) -> float:
    """argparse type: a finite number in [0, 1] (else a usage error)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1], got {text!r}") from None
    if not 0.0 <= value <= 1.0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be a number in [0, 1], got {text!r}")
    return value


def show_progress(args: argparse.Namespace) -> bool:
    """Whether a command draws progress bars: not with ``--no-progress``, and only when stderr
    is a terminal (logs and pipes get no bars)."""
    return not getattr(args, "no_progress", False) and progress_enabled(None)


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0 (else a usage error; nan and inf are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0 (else a usage error; nan and inf are refused)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return value


def cli_path(text: str) -> str:
    """argparse type of every file, folder or store a command takes: ``~`` / ``~user`` expanded
    (as manifests and config files expand their paths; a shell leaves ``--json=~/r.jsonl``
    as it is), and an empty value (an unset shell variable, ``--json "$OUT"``) a usage error
    before any work, never "no output" or the current folder. Other text is returned
    unchanged ("-" = stdout, a PostgreSQL URL or ``service=NAME`` store)."""
    if not text:
        raise argparse.ArgumentTypeError("the path is empty (an unset shell variable?): give a "
                                         "file or folder")
    return os.path.expanduser(text)


def check_utf8_path(path: Any, what: str) -> None:
    """InputError when the text of ``path`` (which a result keeps: a clip's path, a masks or
    poses file) is not UTF-8, a file or folder name in another encoding: no result store or
    reader takes it (:func:`~geocon_torch.bench.manifest.unstorable_text`, the check a
    manifest's paths get), so the command refuses it before any work."""
    problem = unstorable_text(str(path))
    if problem:
        raise InputError(f"{what} {storable_text(str(path))} {problem}")


def add_config_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("configuration (every threshold lives in --config)")
    g.add_argument("--config", metavar="FILE", type=cli_path,
                   help="JSON file overriding any subset of GeoConConfig, e.g. "
                        '{"background": {"tau_h": 3.0}, "io": {"long_side": 512}}; unknown '
                        "keys are an error")
    g.add_argument("--preset", choices=tuple(PRESETS),
                   help="; ".join(f"{p.name}: {p.summary}" for p in PRESETS.values())
                   + " (default: the config's, geocon)")
    g.add_argument("--long-side", type=int, metavar="PX",
                   help="working resolution: long side in pixels (default 1024; pixel scores "
                        "are reported at this resolution)")
    g.add_argument("--max-frames", type=int, metavar="N",
                   help="score at most N frames per clip (default: every frame)")
    g.add_argument("--stride", type=int, metavar="S", help="keep every S-th frame (default 1)")
    g.add_argument("--device", help="torch device for features and fits, e.g. cpu, cuda, cuda:1 "
                                    "(default auto: CUDA when available, else the CPU; "
                                    "under torchrun cuda:LOCAL_RANK)")


#: the io flags of the config (argparse dest, flag, config field, smallest value the field
#: takes from the flag), set by :func:`build_config`
_IO_FLAGS = (("long_side", "--long-side", "io.long_side", 2),
             ("max_frames", "--max-frames", "io.max_frames", 1),
             ("stride", "--stride", "io.stride", 1))


def build_config(args: argparse.Namespace) -> GeoConConfig:
    """--config FILE, then the explicit flags on top (--long-side, --max-frames, --stride: a
    value out of range is the config field's ConfigError, which then names the flag and what
    the flag takes, since the field's other values, null / 'auto', are no flag's)."""
    cfg = load_config(getattr(args, "config", None))
    for dest, flag, _, low in _IO_FLAGS:
        value = getattr(args, dest, None)
        if value is None:
            continue
        try:  # one flag at a time: the error names the flag that was out of range
            cfg = cfg.replace(io={dest: int(value)})
        except ConfigError as exc:
            raise ConfigError(f"{exc} (set by {flag}, which takes an int >= {low})") from None
    return cfg.with_preset(args.preset) if getattr(args, "preset", None) else cfg


def is_video_file(path: Path) -> bool:
    """Whether ``path`` is read as a video: a video suffix (:data:`VIDEO_SUFFIXES`), or an
    animated WebP / PNG (APNG), told apart from a still image by its header."""
    suffix = path.suffix.lower()
    return suffix in VIDEO_SUFFIXES or (suffix in (".webp", ".png")
                                        and animated_frames(path)[1] > 1)


def expand_inputs(items: Sequence[str], note: Optional[Callable[[str], None]] = None
                  ) -> List[Path]:
    """Files, folders and globs -> clip sources. A path that exists is taken literally (never
    as a glob: ``clip[1].mp4``). A folder holding videos (:func:`is_video_file`, so animated
    WebP / APNG files too) gives its videos (sorted); a folder holding only images is one
    image-sequence clip. Hidden files (a name starting with ".": an interrupted write's
    temporary file, macOS's ``._clip.mp4`` resource forks) are skipped in folders, as image
    folders skip them. One file named in several spellings (``a.mp4``, ``./x/../a.mp4``, its
    absolute path, its folder) is one clip, under the first spelling: the paths are compared
    as :func:`os.path.abspath` makes them (lexically: a symlink stays a clip of its own).

    ``note`` (e.g. a line on stderr) gets one line per folder of videos that also holds
    regular files neither scored nor an image nor a clip's masks / poses companion
    (:data:`PER_CLIP_NAMES`): ``"<folder>: skipped 2 files not read as videos (notes.txt,
    x.srt); name a file to score it"``."""
    out: List[Path] = []
    for item in items:
        literal = Path(item).exists() or not any(c in item for c in "*?[")
        matches = [item] if literal else sorted(glob.glob(item))
        if not matches:
            out.append(Path(item))  # reported as missing by the scorer
        for m in matches:
            p = Path(m)
            if p.is_dir():
                vids = _folder_videos(p, note)
                if vids:
                    out.extend(vids)
                else:
                    out.append(p)
            else:
                out.append(p)
    seen = set()
    return [p for p in out
            if not (os.path.abspath(p) in seen or seen.add(os.path.abspath(p)))]


#: names listed in a note on a folder's skipped files (the rest are counted)
SKIPPED_SHOWN = 5


def _folder_videos(folder: Path, note: Optional[Callable[[str], None]]) -> List[Path]:
    """The videos of ``folder`` (sorted, hidden files skipped; :func:`expand_inputs`); when
    there are some, ``note`` gets the line naming its other regular files that are neither an
    image nor a masks / poses companion of one of the videos (none: no line)."""
    files = sorted(f for f in folder.iterdir() if not f.name.startswith("."))
    vids = [f for f in files if is_video_file(f)]
    if not vids or note is None:
        return vids
    companions = {pattern.format(v.stem) for v in vids for names in PER_CLIP_NAMES.values()
                  for pattern in names}
    chosen = set(vids)
    skipped = [f.name for f in files
               if f not in chosen and f.suffix.lower() not in IMAGE_SUFFIXES
               and f.name not in companions and f.is_file()]
    if skipped:
        shown = ", ".join(skipped[:SKIPPED_SHOWN])
        more = len(skipped) - SKIPPED_SHOWN
        shown += f", ... {more} more" if more > 0 else ""
        what = "1 file not read as a video" if len(skipped) == 1 else \
            f"{len(skipped)} files not read as videos"
        note(f"{folder}: skipped {what} ({shown}); name a file to score it")
    return vids


def check_device(device: Optional[str]) -> Optional[str]:
    """``--device``: a torch device string that exists here, checked once before any clip is
    read (``cuda`` without a GPU, ``cuda:3`` on a 2-GPU machine or ``xyz`` -> InputError;
    :func:`geocon_torch._checks.check_device`, the Python API's check, with the flag's name).
    Returns the device to use: ``device`` itself, or None (the automatic choice, as without
    ``--device``) for None and ``auto``."""
    return _checks.check_device(device, "--device")


#: the files a --masks / --poses folder is searched for, per clip, in this order (``{}``: the
#: clip's name); never the other option's files (``geocon synth`` writes both side by side)
PER_CLIP_NAMES = {"masks": ("{}_masks.npz", "{}.npz", "{}"),
                  "poses": ("{}.json", "{}_poses.json", "{}_poses.npz", "{}.npz")}


def per_clip_file(option: Optional[str], clip: Path, n_clips: int,
                  clip_id: Optional[str] = None, kind: str = "masks") -> Optional[str]:
    """--masks / --poses (``kind``): a file for a single clip, or a folder holding per clip
    (:data:`PER_CLIP_NAMES`) ``<name>_masks.npz`` / ``<name>.npz`` / ``<name>/`` (masks) or
    ``<name>.json`` / ``<name>_poses.json`` / ``<name>_poses.npz`` / ``<name>.npz`` (poses),
    where ``<name>`` is the clip's stem, or its unique id when stems repeat (``sora/3`` ->
    ``masks/sora/3.npz``). A masks folder without such a file is the PNG masks of the only
    clip."""
    if not option:
        return None
    p = Path(option)
    if p.is_dir():
        name = clip_id or clip.stem
        for pattern in PER_CLIP_NAMES[kind]:
            cand = p / pattern.format(name)
            if cand.exists():
                return str(cand)
        if n_clips == 1 and kind == "masks":
            return str(p)  # a PNG mask folder for the only clip
        return None
    return str(p)


def _fmt(v: Any, spec: str) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)):
        return format(v, spec)
    return str(v)


SUMMARY_COLUMNS = ("clip", "status", "score", "regime", "IR", "GE px", "pass", "objects",
                   "AdaP90", "epi err", "epi inl", "reason")
#: the narrowest the wrapped reason column gets (the summary table still fits 100 columns)
REASON_MIN_WIDTH = 16


def _passes(bg: Dict[str, Any]) -> str:
    """The paper verdict and the calibrated one, "yes/no" ("-" where not computed)."""
    return f"{_fmt(bg.get('pass'), '')}/{_fmt(bg.get('pass_calibrated'), '')}"


#: the (error, inlier-rate) keys the "epi err" / "epi inl" columns read, block by block: the
#: WorldAtlas trio, else GVGC's median error / kept fraction (preset "gvgc" writes its block as
#: ``epipolar``, preset "all" as ``epipolar_gvgc``), else Epipolar-DPO's means
EPIPOLAR_COLUMNS = (("epipolar", "epipolar_error", "epipolar_inlier_rate"),
                    ("epipolar", "median_error", "keep_rate"),
                    ("epipolar_gvgc", "median_error", "keep_rate"),
                    ("epipolar_dpo", "mean_epipolar_error", "mean_inlier_rate"))
#: the fewest decimals of the table's score / IR / GE cells (more only where a value would
#: print as its threshold, or a fraction below 1 as 1)
TABLE_DECIMALS = 3
#: the most characters of an ok clip's first warning the reason column shows
WARNING_CHARS = 60


def _epipolar_columns(res: Dict[str, Any]) -> Tuple[Any, Any]:
    """(error px, inlier rate) of the first epipolar block of :data:`EPIPOLAR_COLUMNS` that
    holds them ((None, None) when none does)."""
    for block, err, inl in EPIPOLAR_COLUMNS:
        b = res.get(block) or {}
        if b.get(err) is not None or b.get(inl) is not None:
            return b.get(err), b.get(inl)
    return None, None


def _gate_thresholds(res: Dict[str, Any]) -> Tuple[List[float], List[float]]:
    """The bounds the "pass" column's verdicts compare the clip's IR and GE (px at the working
    resolution) with: ([report_ir, calibrated IR bound], [report_ge_px, calibrated GE bound]),
    the paper's from the result's stored config (the defaults when it cannot be read), the
    calibrated ones from ``background.calibration.thresholds`` (``ir`` / ``ge_px``, as
    ``report.text.calibrated_checks`` reads them); absent or non-numeric bounds are left out."""
    bg = res.get("background") or {}
    stored = res.get("config")
    try:
        cfg = GeoConConfig.from_dict(stored if isinstance(stored, dict) else {}, strict=False)
    except (ValueError, TypeError):  # an unknown key or a section that is not a mapping
        cfg = GeoConConfig()
    cal = bg.get("calibration") if isinstance(bg.get("calibration"), dict) else {}
    rec = cal.get("thresholds") if isinstance(cal.get("thresholds"), dict) else {}
    irs = [finite_number(cfg.background.report_ir), finite_number(rec.get("ir"))]
    ges = [finite_number(cfg.background.report_ge_px), finite_number(rec.get("ge_px"))]
    return [t for t in irs if t is not None], [t for t in ges if t is not None]


def _apart(v: Any, others: Sequence[float], fails: bool) -> str:
    """A number cell: :data:`TABLE_DECIMALS` decimals, more where ``v`` would print as one of
    ``others`` (its thresholds; 1 for a fraction): up to 17 when ``v`` fails one of them (never
    "0.970" for an IR of 32/33 beside pass "no"), 8 otherwise
    (:func:`~geocon_torch.measures.calibration.digits_apart`); "-" for None."""
    x = finite_number(v)
    if x is None:
        return _fmt(v, f".{TABLE_DECIMALS}f")
    k = digits_apart((x, *others), TABLE_DECIMALS, 17 if fails else 8, style="f")
    return f"{x:.{k}f}"


def _background_cells(res: Dict[str, Any]) -> Tuple[str, str]:
    """The IR and GE px cells: as many decimals as tell each from the bounds of the verdicts
    printed beside them (:func:`_gate_thresholds`) and the IR from 1."""
    bg = res.get("background") or {}
    ir, ge = finite_number(bg.get("ir")), finite_number(bg.get("ge_px"))
    if ir is None and ge is None:
        return _fmt(bg.get("ir"), ".3f"), _fmt(bg.get("ge_px"), ".3f")
    ir_th, ge_th = _gate_thresholds(res)
    ir_cell = _fmt(bg.get("ir"), ".3f") if ir is None else _apart(
        ir, ir_th + [1.0], any(ir < t for t in ir_th))
    ge_cell = _fmt(bg.get("ge_px"), ".3f") if ge is None else _apart(
        ge, ge_th, any(ge > t for t in ge_th))
    return ir_cell, ge_cell


def _reason_cell(res: Dict[str, Any]) -> str:
    """The reason column: the result's reason (one line), or for an ok clip with ``warnings``
    "warning: <the first, cut to :data:`WARNING_CHARS` characters> (+N more)" (the others
    and the rest are in ``--json`` / the CSV's ``warnings``)."""
    reason = " ".join(str(res.get("reason") or "").split())
    warns = res.get("warnings")
    if reason or res.get("status") != "ok" or not isinstance(warns, list) or not warns:
        return reason
    first = " ".join(str(warns[0]).split())
    if len(first) > WARNING_CHARS:  # cut at a space in the second half where there is one
        cut = first[:WARNING_CHARS - 2]
        space = cut.rfind(" ")
        first = (cut[:space] if space > WARNING_CHARS // 2 else cut[:-1]).rstrip() + "..."
    more = f" (+{len(warns) - 1} more)" if len(warns) > 1 else ""
    return f"warning: {first}{more}"


def summary_row(res: Dict[str, Any]) -> List[str]:
    """One result dict as the strings of :data:`SUMMARY_COLUMNS` ("-" where a value is absent;
    the epipolar columns from :data:`EPIPOLAR_COLUMNS`). Score, IR and GE px have 3 decimals,
    more where they would print as the bound of the verdict beside them or as 1
    (:func:`_background_cells`); "objects" is "-" when the result has no foreground block (a
    preset without that section: not counted, not 0); the reason column holds an ok clip's
    first warning (:func:`_reason_cell`)."""
    bg = res.get("background") or {}
    fg = res.get("foreground")
    ep_err, ep_inl = _epipolar_columns(res)
    objs = [o for o in (fg if isinstance(fg, dict) else {}).get("objects") or []
            if isinstance(o, dict)]
    p90 = [o["adap90"] for o in objs if isinstance(o.get("adap90"), (int, float))]
    score = finite_number(res.get("score"))
    ir_cell, ge_cell = _background_cells(res)
    return [str(res.get("clip")), str(res.get("status")),
            _fmt(res.get("score"), ".3f") if score is None else _apart(score, (1.0,), False),
            _fmt(res.get("regime"), ""), ir_cell, ge_cell,
            _passes(bg), str(len(objs)) if isinstance(fg, dict) and fg else "-",
            _fmt(max(p90) if p90 else None, ".3f"),
            _fmt(ep_err, ".3f"), _fmt(ep_inl, ".3f"), _reason_cell(res)]


def display_width(text: str) -> int:
    """Terminal columns ``text`` takes: 2 per wide / full-width character (CJK, East Asian
    width W or F), 0 per combining mark (the accent of a decomposed ``é``), 1 otherwise."""
    if text.isascii():
        return len(text)
    return sum(0 if unicodedata.combining(c) else
               2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def _pad(text: str, width: int) -> str:
    """``text`` followed by spaces up to ``width`` terminal columns (:func:`display_width`)."""
    return text + " " * (width - display_width(text))


def _table_width(out: TextIO) -> Optional[int]:
    """The columns a table printed to ``out`` may take: ``COLUMNS`` when set (a positive
    number), else the terminal's width when ``out`` is a terminal (120 when it cannot be
    read), else None: no limit (a pipe or a file: a log keeps each reason, and every path in
    it, on one line for grep)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.strip().isdigit() and int(columns) > 0:
        return int(columns)
    isatty = getattr(out, "isatty", None)
    if isatty is None or not isatty():
        return None
    try:
        return os.get_terminal_size(out.fileno()).columns or 120
    except (AttributeError, OSError, ValueError):  # no fileno (io.UnsupportedOperation)
        return 120


def print_table(rows: Iterable[Sequence[str]], header: Sequence[str] = SUMMARY_COLUMNS,
                out: Optional[TextIO] = None, width: Optional[int] = None) -> None:
    """Aligned columns, padded by terminal columns (:func:`display_width`: a CJK clip id keeps
    the columns after it aligned); the last one (the reason) is never cut: it wraps at spaces
    onto continuation lines to fit ``width`` characters (default: ``COLUMNS``, else the width
    of the terminal ``out`` is, else no limit: in a pipe or a file each reason is one line; at
    least :data:`REASON_MIN_WIDTH` characters are kept for it). A word longer than the column
    (a clip's path) is never broken: it overflows its line."""
    out = out or sys.stdout
    rows = [list(map(str, r)) for r in rows]
    widths = [max([len(h)] + [display_width(r[i]) for r in rows])
              for i, h in enumerate(header)]
    lead = sum(widths[:-1]) + 2 * (len(widths) - 1)
    width = width or _table_width(out)
    if width is not None:
        widths[-1] = max(len(header[-1]),
                         min(widths[-1], max(REASON_MIN_WIDTH, width - lead - 1)))
    print("  ".join(h.ljust(w) for h, w in zip(header, widths)).rstrip(), file=out)
    print("  ".join("-" * w for w in widths), file=out)
    for r in rows:
        last = textwrap.wrap(r[-1], widths[-1], break_long_words=False,
                             break_on_hyphens=False) or [""]
        print("  ".join(_pad(c, w) for c, w in zip(r[:-1] + last[:1], widths)).rstrip(),
              file=out)
        for more in last[1:]:
            print(" " * lead + more, file=out)


#: the file name :func:`check_output_file` suggests inside a folder given for an option
OUTPUT_EXAMPLES = {"--export-csv": "results.csv", "--export-parquet": "results.parquet",
                   "--out": "pairs.jsonl", "--conflicts": "conflicts.jsonl"}


def _write_refusal(path: Path) -> str:
    """Why ``path``, which ``os.access`` says this process cannot write, is not writable:
    "read-only file system" (its mount is read-only), else, for a regular file, the reason an
    open for writing gives (no truncation, nothing written: "operation not permitted" for an
    immutable file), else "permission denied"."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return "read-only file system"
    except OSError:
        pass
    if path.is_file():
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_CLOEXEC))
        except OSError as exc:
            if exc.strerror:
                return exc.strerror[:1].lower() + exc.strerror[1:]
    return "permission denied"


def check_output_file(path: Optional[str], option: str, allow_stdout: bool = False) -> None:
    """Fail before any work (InputError) when the output file ``path`` of ``option`` (e.g.
    ``--json``) cannot be written: it is a folder (the message suggests a file in it with the
    option's own extension, :data:`OUTPUT_EXAMPLES`, default ``results.jsonl``), its folder
    cannot be created (it is created here, as :func:`write_jsonl` would), or the folder / an
    existing file is not writable. None (not given) passes (the CLI refuses an empty value
    before: :func:`cli_path`). "-" is stdout only for an option that streams text there
    (``allow_stdout``: ``score --json``, ``bench --export-csv``, ...; it fails when stdout is
    closed, Python's ``sys.stdout`` None: a command run with fd 1 closed); any other option
    (a binary file such as ``--export-parquet``) refuses it, never writing a file named
    ``-`` (``./-`` names one)."""
    if path == "-" and not allow_stdout:
        raise InputError(f"{option} -: {option} does not write to stdout: give a file "
                         "(./- for a file named -)")
    if path == "-" and sys.stdout is None:
        raise InputError(f"{option} -: stdout is closed: give a file")
    if not path or path == "-":
        return
    p = Path(path)
    if p.is_dir():
        example = p / OUTPUT_EXAMPLES.get(option, "results.jsonl")
        raise InputError(f"{option} {path} is a folder: give a file, e.g. {example}")
    try:
        p.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{option} {path}: its folder {p.parent} cannot be created "
                         f"({exc.strerror or exc})") from None
    for target, mode in ((p.parent, os.W_OK | os.X_OK), (p, os.W_OK)):
        if target.exists() and not os.access(target, mode):
            raise InputError(f"{option} {path}: not writable ({_write_refusal(target)} on "
                             f"{target})")


def file_identity(path: str) -> Tuple[Optional[Tuple[int, int]], str]:
    """What tells files apart: (device, inode) of an existing file (None for a missing one)
    and the :func:`os.path.realpath` (``missing/../a`` is ``a``, which a write creating the
    folder ``missing`` would reach); :func:`same_file` compares them."""
    try:
        st = os.stat(path)
        inode: Optional[Tuple[int, int]] = (st.st_dev, st.st_ino)
    except (OSError, ValueError):  # missing (or no file name at all)
        inode = None
    return inode, os.path.normcase(os.path.realpath(path))


def same_file(a: str, b: str) -> bool:
    """Whether the paths ``a`` and ``b`` name one file: the same existing file (a hard link, a
    symlink, another spelling: :func:`os.path.samefile`) or the same resolved path
    (:func:`file_identity`)."""
    return _same_identity(file_identity(a), file_identity(b))


def _same_identity(a: Tuple[Optional[Tuple[int, int]], str],
                   b: Tuple[Optional[Tuple[int, int]], str]) -> bool:
    """Whether two :func:`file_identity` values are one file (inode, else resolved path)."""
    return (a[0] is not None and a[0] == b[0]) or a[1] == b[1]


def check_not_input(out: Optional[str], option: str,
                    inputs: Iterable[Tuple[str, Optional[str]]], hint: str = "") -> None:
    """Fail before any work (InputError) when the output file ``out`` of ``option`` would
    replace an input: one of ``inputs`` ((what, path): ``("the MANIFEST", "m.csv")``;
    None / "-" entries are skipped) names the same file (:func:`same_file`), or ``out`` has
    a video or image suffix (:data:`VIDEO_SUFFIXES`, ``IMAGE_SUFFIXES``), which no output of
    a command is (``geocon score --json a.mp4 b.mp4``, ``--json`` meant as a flag, replaced
    the video a.mp4 by JSON lines). ``hint`` (e.g. ``" (did you mean ...?)"``) ends the
    message. None (not given) and "-" (stdout) pass."""
    if not out or out == "-":
        return
    suffix = Path(out).suffix.lower()
    if suffix in VIDEO_SUFFIXES or suffix in IMAGE_SUFFIXES:
        example = OUTPUT_EXAMPLES.get(option, "results.jsonl")
        raise InputError(f"{option} {out} names a video or image file ({suffix}), never an "
                         f"output: give e.g. {example}{hint}")
    target = file_identity(out)  # each input: a stat and a realpath (10k clips: < 1 s)
    for what, path in inputs:
        if path is not None and path != "-" and _same_identity(file_identity(path), target):
            raise InputError(f"{option} {out} is {what}, which the output would replace{hint}")


def check_output_dir(path: Optional[str], option: str) -> None:
    """Fail before any work (InputError) when the output folder ``path`` of ``option`` (e.g.
    ``OUTDIR``, ``--out``) cannot be used: it is an existing file, a part of it is a file (so
    it cannot be created), or its nearest existing folder is not writable. Nothing is created
    here (a command that stops on a later check leaves no folder behind). None (not given)
    passes (the CLI refuses an empty value before: :func:`cli_path`). "-" is refused (a folder
    cannot be stdout; ``./-`` names a folder called ``-``)."""
    if not path:
        return
    if path == "-":
        raise InputError(f"{option} -: a folder cannot be stdout: give a folder (./- for a "
                         "folder named -)")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise InputError(f"{option} {path} is a file: give a folder")
    base = p
    while not base.exists() and base != base.parent:  # the nearest existing ancestor
        base = base.parent
    if not base.is_dir():
        raise InputError(f"{option} {path}: it cannot be created, {base} is a file: give a "
                         "folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise InputError(f"{option} {path}: not writable ({_write_refusal(base)} on {base})")


def json_line(result: Dict[str, Any]) -> str:
    """One result as a JSON line (sorted keys, no NaN)."""
    return json.dumps(result, sort_keys=True, allow_nan=False) + "\n"


def write_jsonl(path: str, results: Iterable[Dict[str, Any]]) -> None:
    """JSON lines of results; path "-" = stdout. A file is written atomically
    (:func:`~geocon_torch.io._atomic.atomic_write_text`: the previous file or the whole new one,
    never a part)."""
    text = "".join(json_line(r) for r in results)
    if path == "-":
        sys.stdout.write(text)
    else:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, text)


class _LinesFile:
    """The file of :func:`jsonl_lines`: opened (emptied) at its first line, so a run stopped
    before that leaves the previous file as it was; each line is written whole (unbuffered)
    and a write that fails (a full disk, Ctrl-C in between) cuts the file back to the end of
    its last complete line before the exception goes on, an OSError naming the file."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.fh: Optional[Any] = None  # a raw (unbuffered) binary file once opened
        self.end = 0  # bytes of complete lines written

    def _open(self) -> None:
        if self.fh is None:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self.fh = open(self.path, "wb", buffering=0)

    def write(self, result: Dict[str, Any]) -> None:
        """Append ``result`` as one JSON line (:func:`json_line`)."""
        data = memoryview(json_line(result).encode("utf-8"))
        size = len(data)
        try:
            self._open()
            while data:  # a raw write may take part of it (a disk filling up)
                data = data[self.fh.write(data):]
        except BaseException as exc:
            if self.fh is not None:
                try:  # the lines written so far stay readable
                    os.ftruncate(self.fh.fileno(), self.end)
                except OSError:  # never hide the exception that stopped the write
                    pass
            named = name_output_error(exc, self.path) if isinstance(exc, OSError) else exc
            if named is not exc:
                raise named from exc
            raise
        self.end += size

    def close(self, done: bool) -> None:
        """Close the file; ``done`` (the run ended normally): create it (empty) if no line was
        written, as a run that scored nothing leaves an empty file, not an older one."""
        try:
            if done:
                try:
                    self._open()
                except OSError as exc:
                    raise name_output_error(exc, self.path)
        finally:
            if self.fh is not None:
                self.fh.close()


@contextmanager
def jsonl_lines(path: Optional[str]) -> Iterator[Callable[[Dict[str, Any]], None]]:
    """A function writing one result as a JSON line to ``path`` ("-": stdout; None: nowhere)
    as soon as it is scored: an interrupted run keeps the clips scored so far. A file is
    opened (emptied) at its first line, not before: a run stopped before it leaves the
    previous file as it was; a failed write (a full disk: an OSError naming ``path``) leaves
    the complete lines written so far, never a part of one (:class:`_LinesFile`)."""
    if not path:
        yield lambda result: None
        return
    if path == "-":
        def write(result: Dict[str, Any]) -> None:
            sys.stdout.write(json_line(result))
            sys.stdout.flush()
        yield write
        return
    out = _LinesFile(path)
    done = False
    try:
        yield out.write
        done = True
    finally:
        out.close(done)
