"""Image sequences: a folder of png / jpg / jpeg / bmp / webp files (or one image file)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Iterable, List, Tuple

import numpy as np

from ..errors import VideoReadError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".webp"})


def natural_key(name: str) -> Tuple:
    """Sort key for "natural" order: ``frame2.png`` before ``frame10.png`` (case-insensitive)."""
    parts = re.split(r"(\d+)", name.lower())
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p)


def image_files(folder: Path, suffixes: Iterable[str] = IMAGE_SUFFIXES) -> List[Path]:
    """Image files of ``folder`` (suffix matched case-insensitively, hidden files skipped), in
    natural order; possibly empty."""
    suffixes = frozenset(suffixes)
    files = [p for p in folder.iterdir()
             if p.is_file() and p.suffix.lower() in suffixes and not p.name.startswith(".")]
    return sorted(files, key=lambda p: natural_key(p.name))


def list_images(folder: Path) -> List[Path]:
    """:func:`image_files` of ``folder``; raises VideoReadError when the folder holds none."""
    files = image_files(folder)
    if not files:
        raise VideoReadError(f"{folder}: the folder holds no image "
                             f"({', '.join(sorted(IMAGE_SUFFIXES))}); 0 frames")
    return files


def read_image(path: Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB; raises VideoReadError when the file does not decode."""
    import cv2

    if path.stat().st_size == 0:
        raise VideoReadError(f"{path}: the image file is empty (0 bytes)")
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        raise VideoReadError(f"{path}: not a readable image")
    return np.ascontiguousarray(bgr[..., ::-1])
