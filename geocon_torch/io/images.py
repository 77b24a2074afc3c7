"""Image sequences: a folder of png / jpg / jpeg / bmp / webp files (or one image file).

An image file is one still frame. An *animated* WebP or PNG (APNG) is not silently read as its
first frame: :func:`read_image` raises a VideoReadError that names it and its frame count.
:class:`AnimatedWebP` reads an animated WebP frame by frame with PIL (PyAV cannot decode one) for
the video decoding path (:func:`geocon_torch.io.decode.open_video`).
"""
from __future__ import annotations

import re
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import VideoReadError

IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".webp"})
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: a file name with a number: (prefix)(the last run of digits)(the rest, without digits)
_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")


def natural_key(name: str) -> Tuple:
    """Sort key for "natural" order: ``frame2.png`` before ``frame10.png`` (case-insensitive)."""
    parts = re.split(r"(\d+)", name.lower())
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p)


def image_files(folder: Path, suffixes: Iterable[str] = IMAGE_SUFFIXES) -> List[Path]:
    """Image files of ``folder`` (suffix matched case-insensitively, hidden files skipped), in
    :func:`natural_order` (never the file system's listing order); possibly empty."""
    suffixes = frozenset(suffixes)
    files = [p for p in folder.iterdir()
             if p.is_file() and p.suffix.lower() in suffixes and not p.name.startswith(".")]
    return natural_order(files)


def natural_order(paths: Iterable[Path]) -> List[Path]:
    """``paths`` sorted by :func:`natural_key` of their names, ties (``1.png`` / ``01.png``,
    ``A.png`` / ``a.png``) by the exact name: the same order however they were listed."""
    return sorted(paths, key=lambda p: (natural_key(p.name), p.name))


def frame_numbers(files: Sequence[Path]) -> Optional[List[int]]:
    """The numbers of a numbered image sequence (``frame_0003.png``, ``frame_0005.png`` ->
    [3, 5]), in the order of ``files``: every name is one prefix, a number and one suffix
    (compared case-insensitively), written with one zero padding (``0004``, ``1000`` for a
    width of 4; ``7``, ``12`` unpadded); None for fewer than two files or any other naming
    (no number, several prefixes or suffixes, ``1.png`` beside ``01.png``)."""
    matches = [m for m in (_NUMBERED.match(p.name.lower()) for p in files) if m is not None]
    if len(files) < 2 or len(matches) < len(files):
        return None
    if len({(m.group(1), m.group(3)) for m in matches}) != 1:
        return None
    digits = [m.group(2) for m in matches]
    width = min(len(d) for d in digits)
    if any(f"{int(d):0{width}d}" != d for d in digits):
        return None
    return [int(d) for d in digits]


def list_images(folder: Path) -> List[Path]:
    """:func:`image_files` of ``folder``; raises VideoReadError when the folder holds none."""
    files = image_files(folder)
    if not files:
        raise VideoReadError(f"{folder}: the folder holds no image "
                             f"({', '.join(sorted(IMAGE_SUFFIXES))}); 0 frames")
    return files


def webp_durations(path: Path) -> Optional[List[int]]:
    """Frame durations (ms) of an animated WebP file, read from its ANMF chunks (nothing is
    decoded); None for a still WebP, a non-WebP file or a folder."""
    if not path.is_file():
        return None
    durations: List[int] = []
    with open(path, "rb") as f:
        head = f.read(12)
        if len(head) < 12 or head[:4] != b"RIFF" or head[8:12] != b"WEBP":
            return None
        while True:
            chunk = f.read(8)
            if len(chunk) < 8:
                break
            kind, size = chunk[:4], int.from_bytes(chunk[4:], "little")
            skip = size + (size & 1)
            if kind == b"ANMF":
                payload = f.read(16)
                if len(payload) < 16:
                    break
                durations.append(int.from_bytes(payload[12:15], "little"))
                skip -= 16
            elif kind in (b"VP8 ", b"VP8L") and not durations:
                return None  # a still image
            f.seek(skip, 1)
    return durations or None


def _apng_frames(path: Path) -> int:
    """Frame count of an animated PNG (its acTL chunk, which precedes the image data); 1 for a
    still PNG or another file."""
    with open(path, "rb") as f:
        if f.read(8) != _PNG_MAGIC:
            return 1
        while True:
            chunk = f.read(8)
            if len(chunk) < 8 or chunk[4:] in (b"IDAT", b"IEND"):
                return 1
            size = int.from_bytes(chunk[:4], "big")
            if chunk[4:] == b"acTL":
                count = f.read(4)
                return max(1, int.from_bytes(count, "big")) if len(count) == 4 else 1
            f.seek(size + 4, 1)  # data and CRC


def animated_frames(path: Path) -> Tuple[str, int]:
    """(kind, frame count) of an animated image file: ("WebP", n) or ("PNG (APNG)", n);
    ("", 1) for a still image or any other file."""
    durations = webp_durations(path)
    if durations is not None:
        return "WebP", len(durations)
    n = _apng_frames(path) if path.is_file() else 1
    return ("PNG (APNG)", n) if n > 1 else ("", 1)


def read_image(path: Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB, decoded from the file's bytes (any file name, also one that is not
    UTF-8); raises VideoReadError when the file cannot be read or does not decode, or when it
    is an animated WebP / PNG (one image file is one still frame: its animation would be lost)."""
    import cv2

    if path.stat().st_size == 0:
        raise VideoReadError(f"{path}: the image file is empty (0 bytes)")
    kind, n = animated_frames(path)
    if n > 1:
        raise VideoReadError(
            f"{path}: an animated {kind} with {n} frames is not supported as an image (an image "
            f"file, alone or in a folder, is read as one still frame, so {n - 1} frames would "
            f"be lost); convert it to a video (mp4, gif) or to a folder of one image per frame")
    try:  # bytes, not cv2.imread(str): OpenCV crashes on a file name that is not UTF-8
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise VideoReadError(f"{path}: the image file cannot be read ({exc})") from exc
    bgr = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if bgr is None:
        raise VideoReadError(f"{path}: not a readable image")
    return np.ascontiguousarray(bgr[..., ::-1])


class _StillFrame:
    """One decoded frame of an :class:`AnimatedWebP`, with what the decoders read of a PyAV
    ``VideoFrame``: ``pts`` (ms), ``height``, ``width`` and ``to_ndarray(format="rgb24")``."""

    def __init__(self, rgb: np.ndarray, pts: int) -> None:
        self.rgb, self.pts = rgb, pts
        self.height, self.width = int(rgb.shape[0]), int(rgb.shape[1])

    def to_ndarray(self, format: str = "rgb24") -> np.ndarray:  # noqa: A002 - PyAV's name
        """The (H, W, 3) uint8 RGB frame (``format`` must be "rgb24")."""
        if format != "rgb24":
            raise VideoReadError(f"an animated WebP frame is rgb24 only, not {format!r}")
        return self.rgb


class AnimatedWebP:
    """An animated WebP decoded frame by frame with PIL (PyAV cannot decode one), with what
    geocon_torch.io reads of a PyAV container and of its video stream (the object is both:
    ``streams.video[0]`` is itself): ``frames``, ``average_rate``, ``codec_context`` (name
    "webp", width, height), ``duration`` (µs), ``time_base`` (1/1000 s), :meth:`decode_frames`
    and :meth:`close`. Frame ``pts`` are the start times in ms (the sum of earlier durations).

    Raises:
        VideoReadError: PIL cannot open the file.
    """

    guessed_rate = base_rate = None
    time_base = Fraction(1, 1000)

    def __init__(self, path: Path, durations: List[int]) -> None:
        from PIL import Image

        try:
            self._image = Image.open(path)
        except (OSError, ValueError, SyntaxError) as exc:
            raise VideoReadError(f"{path}: an animated WebP that cannot be opened ({exc})") \
                from exc
        self.path, self.durations, self.frames = path, list(durations), len(durations)
        total = sum(self.durations)
        self.average_rate = Fraction(1000 * self.frames, total) if total > 0 else None
        self.duration = 1000 * total if total > 0 else None
        width, height = self._image.size
        self.codec_context = SimpleNamespace(name="webp", width=width, height=height)
        self.streams = SimpleNamespace(video=[self])
        self.thread_type = "AUTO"

    def decode_frames(self, errors: List[str]) -> Iterator[_StillFrame]:
        """Yield the frames in order (composited on the canvas, RGB); a frame that does not
        decode ends the iteration with a message in ``errors``."""
        pts = 0
        for i, duration in enumerate(self.durations):
            try:
                self._image.seek(i)
                rgb = np.array(self._image.convert("RGB"), dtype=np.uint8)  # a writable copy
            except (OSError, EOFError, ValueError, SyntaxError) as exc:
                errors.append(f"decode: WebP frame {i}: {exc}")
                return
            yield _StillFrame(rgb, pts)
            pts += duration

    def close(self) -> None:
        """Release the file."""
        self._image.close()
