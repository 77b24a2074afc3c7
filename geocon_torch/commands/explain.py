"""Explain one clip's verdict in plain text: the regime and why (gate statistic against its
thresholds, U resolution), IR / GE against each report threshold, which pairs fail and where
their outliers lie (re-derived exactly as scored, as on the audit card), and what would change
the verdict.

RESULT_OR_VIDEO is a result JSON file (one ``ClipResult`` object), a JSON-lines file or a
``results.sqlite`` store (``--clip ID`` picks the clip when it holds several), or a video
(animated WebP / APNG included), an image or an image folder, which is scored first with the
configuration options.

  geocon explain out/results.jsonl --clip C3_truck_seed0
  geocon explain clip.mp4 --preset background --poses poses.npz --pair 2
  geocon explain out/results.jsonl --clip=-take2     (an id starting with "-": write --clip=ID)

--clip matches an id exactly, else by its Unicode NFC form: "café" typed on a keyboard finds
the clip of a file named on macOS (whose accents are decomposed, NFD).

Exit status: 0 when the account is printed (of an ok, not_applicable or error result); 2 for a
user error: a missing source, a file that is not a result, a --clip / --config-hash that
matches nothing, or a video that cannot be read (geocon score makes that an error row, exit 1).
"""
from __future__ import annotations

import argparse
import json
import shlex
import unicodedata
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..bench import load_results
from ..bench.schema import result_problems
from ..errors import InputError
from ..io.images import IMAGE_SUFFIXES
from ..pipeline import score_clip
from ..report.explain import explain_result
from ._common import add_config_arguments, build_config, cli_path, is_video_file

NAME = "explain"
HELP = "plain-text account of one clip's verdict (why this regime, which thresholds fail)"


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("source", metavar="RESULT_OR_VIDEO", type=cli_path,
                   help="result JSON / JSONL / results.sqlite, or a video to score first")
    p.add_argument("--clip", metavar="ID", help="clip id (or name) in a multi-clip results file")
    p.add_argument("--config-hash", metavar="HASH",
                   help="the configuration to explain in a store that holds several")
    p.add_argument("--pair", type=int, metavar="K",
                   help="evaluated pair to locate the outliers of (default: the worst pair)")
    p.add_argument("--masks", metavar="PATH", type=cli_path,
                   help="object masks the clip is (was) scored with")
    p.add_argument("--poses", metavar="PATH", type=cli_path,
                   help="pose log the clip is (was) scored with")
    p.add_argument("--no-evidence", action="store_true",
                   help="stored numbers only: do not re-derive the worst pair's matches")
    add_config_arguments(p)


def _is_video(path: Path) -> bool:
    """Whether ``path`` is a clip to score first (a folder, a video, an animated WebP / APNG
    or a still image) rather than a result file or store."""
    return path.is_dir() or is_video_file(path) or path.suffix.lower() in IMAGE_SUFFIXES


def _nfc(text: Any) -> Any:
    """``text`` in Unicode normal form NFC (composed accents, as typed); other values as they
    are."""
    return unicodedata.normalize("NFC", text) if isinstance(text, str) else text


def _matching(rows: List[Dict[str, Any]], clip: str) -> List[Dict[str, Any]]:
    """The rows of ``clip``: by clip_id, else by the result's ``clip`` name, each compared
    exactly first, then in NFC form (:func:`_nfc`: an NFD id from a macOS file name and the
    NFC text of a keyboard)."""
    for same in (lambda a: a == clip, lambda a: _nfc(a) == _nfc(clip)):
        hits = ([r for r in rows if same(r.get("clip_id"))]
                or [r for r in rows if same((r.get("result") or {}).get("clip"))])
        if hits:
            return hits
    return []


def _pick(rows: List[Dict[str, Any]], clip: Optional[str], where: Path) -> Dict[str, Any]:
    """The one row of ``clip``: by exact clip_id first, else by the result's ``clip`` name
    (rows of identical bytes share one result, whose ``clip`` is the id it was first scored
    under, so that name alone is not unique), else the same in NFC form (:func:`_matching`);
    the only row without ``clip``."""
    if clip is None:
        if len(rows) != 1:  # --clip=ID: an id starting with "-" is no option
            ids = ", ".join(shlex.quote(f"--clip={r.get('clip_id')}") for r in rows[:8])
            raise InputError(f"{where} holds {len(rows)} clips: pick one with --clip=ID "
                             f"(e.g. {ids})")
        return rows[0]
    hits = _matching(rows, clip)
    hashes = sorted({str(r.get("config_hash")) for r in hits})
    if len(hits) > 1 and len(hashes) > 1:
        raise InputError(f"--clip {clip!r}: {where} holds it under {len(hashes)} configurations "
                         f"({', '.join(hashes[:5])}): pick one with --config-hash")
    if len(hits) != 1:
        raise InputError(f"--clip {clip!r}: {len(hits)} matching clips in {where}")
    return hits[0]


def load_one_result(path: Path, clip: Optional[str], config_hash: Optional[str] = None
                    ) -> Dict[str, Any]:
    """One result dict from a JSON object file, JSON lines or a SQLite store (of
    ``config_hash`` when given); InputError when it holds no result (an empty file). ``clip``
    matches an id exactly or in NFC form (:func:`_matching`)."""
    if not path.is_file():
        raise InputError(f"not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        data = None  # JSON lines or SQLite (whose reader names what is wrong)
    if isinstance(data, dict):
        problems = result_problems(data)
        if problems:
            raise InputError(f"{path} is not a geocon result ({'; '.join(problems[:3])}); "
                             f"pass a file written by geocon score --json, or a result store")
        names = (data.get("clip"), data.get("clip_id"))
        if clip is not None and _nfc(clip) not in map(_nfc, names):
            raise InputError(f"--clip {clip!r}: {path} holds clip {data.get('clip')!r}")
        return data
    rows = load_results(path, validate=False, config_hash=config_hash)
    if not rows:
        of = f" of configuration {config_hash}" if config_hash else ""
        raise InputError(f"{path} holds no results{of} (0 rows); write some with geocon score "
                         f"--json or geocon bench")
    row = _pick(rows, clip, path)
    res = dict(row["result"])
    res.setdefault("path", row.get("path"))
    return res


def run(args: argparse.Namespace) -> int:
    src = Path(args.source)
    if not src.exists():
        raise InputError(f"not found: {src}")
    if _is_video(src):
        cfg = build_config(args)
        result: Dict[str, Any] = score_clip(str(src), masks=args.masks, poses=args.poses,
                                            config=cfg, device=args.device,
                                            progress=False).to_dict()
    else:
        result = load_one_result(src, args.clip, args.config_hash)
    print(explain_result(result, pair=args.pair, masks=args.masks, poses=args.poses,
                         device=args.device, evidence=not args.no_evidence), end="")
    return 0
