"""Unique clip ids derived from paths, and unique file-name keys for per-clip artefacts.

Two clips never share an id: ``cogvideox/3.mp4`` and ``sora/3.mp4`` get the ids
``cogvideox/3`` and ``sora/3`` (the shortest path suffix, extension dropped, that tells them
apart), a clip whose stem is unique keeps its plain stem (``3``). Paths that no suffix separates
(the same file named twice) are an :class:`~geocon_torch.errors.InputError` listing the clashes.
A path's ``..`` is folded first (lexically, :func:`os.path.normpath`): ``syn/../syn/x.mp4`` is
``syn/x.mp4``, and no id holds ``..``.
"""
from __future__ import annotations

import hashlib
import os
import re
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Sequence, Tuple, Union

from ..errors import InputError

PathLike = Union[str, Path]


def _parts(path: PathLike, keep_suffix: bool) -> Tuple[str, ...]:
    """Absolute path components, ``..`` folded (:func:`os.path.normpath`), the last one without
    its extension unless ``keep_suffix``."""
    p = Path(os.path.normpath(Path(path).expanduser().absolute()))
    parts = [x for x in p.parts if x not in ("/", "\\")] or [str(p)]
    if not keep_suffix and Path(parts[-1]).stem:
        parts[-1] = Path(parts[-1]).stem
    return tuple(parts)


def _suffix_ids(parts: Sequence[Tuple[str, ...]], taken: Sequence[str] = ()
                ) -> Tuple[List[str], Dict[str, List[int]]]:
    """Shortest distinguishing suffix of each part tuple (never equal to a ``taken`` id); also
    the groups no suffix separates (a taken id appears there as the index ``-1 - j``)."""
    depth = [1] * len(parts)
    while True:
        ids = ["/".join(p[-d:]) for p, d in zip(parts, depth)]
        groups: Dict[str, List[int]] = defaultdict(list)
        for k, i in list(enumerate(ids)) + [(-1 - j, t) for j, t in enumerate(taken)]:
            groups[i].append(k)
        clashes = {i: ks for i, ks in groups.items() if len(ks) > 1}
        grow = [k for ks in clashes.values() for k in ks if 0 <= k and depth[k] < len(parts[k])]
        if not grow:
            return ids, clashes
        for k in grow:
            depth[k] += 1


#: how the clash error of :func:`derive_clip_ids` ends by default (a manifest's reader)
CLASH_HINT = "give each clip once, or distinct clip_id values in the manifest"


def derive_clip_ids(paths: Sequence[PathLike], taken: Sequence[str] = (),
                    hint: str = CLASH_HINT) -> List[str]:
    """One unique id per path: the file stem, or the shortest path suffix (``folder/stem``,
    then ``a/folder/stem`` ...) where stems repeat; the file name with its extension when only
    that differs (``a.mp4`` / ``a.webm``).

    Args:
        paths: clip paths (files or image folders), in order.
        taken: ids already used (e.g. explicit manifest clip_ids) that a derived id must avoid.
        hint: what the clash error tells the user to do (default :data:`CLASH_HINT`; ``geocon
            score``, which has no manifest: "give each clip once").

    Raises:
        InputError: two entries name the same path (or a path's every suffix is a taken id),
            listing every clash.
    """
    taken = [str(t) for t in taken]
    parts = [_parts(p, keep_suffix=False) for p in paths]
    ids, clashes = _suffix_ids(parts, taken)
    if clashes:  # retry the clashing ones with their extensions kept (a.mp4 / a.webm)
        for k in {k for ks in clashes.values() for k in ks if k >= 0}:
            parts[k] = _parts(paths[k], keep_suffix=True)
        ids, clashes = _suffix_ids(parts, taken)
    if clashes:
        listing = "; ".join(" and ".join(
            str(paths[k]) if k >= 0 else f"clip_id {taken[-1 - k]!r}" for k in ks)
            for _, ks in sorted(clashes.items()))
        raise InputError(f"clip ids are not unique: no path suffix tells apart {listing}; "
                         f"{hint}")
    return ids


def file_key(clip_id: str, *salt: object, max_len: int = 48) -> str:
    """A file-name-safe, unique key for one clip's artefacts: the id with every character
    outside ``[A-Za-z0-9_-]`` replaced by ``_`` (cut to ``max_len``), plus an 8-hex-digit hash of
    the id and ``salt`` (e.g. the content hash), so ``a/b`` and ``a_b`` never share a file. An
    id that is not UTF-8 (a lone surrogate from a file name in another encoding) is hashed with
    its surrogates as they are (``surrogatepass``); every other id hashes as before."""
    slug = re.sub(r"[^A-Za-z0-9_-]", "_", str(clip_id))[:max_len].strip("_") or "clip"
    text = "\x00".join(map(str, (clip_id,) + salt))
    digest = hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return f"{slug}_{digest}"
