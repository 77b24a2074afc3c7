"""Image sequences: a folder of png / jpg / jpeg / bmp / webp / tif / tiff / exr files (or one
image file; :data:`IMAGE_SUFFIXES`, the one list both read).

Every file of a folder with one of these suffixes is a frame, whatever the mix of suffixes, in
natural order (:func:`image_files`); a file of another size than the first frame is an error that
names it, and a folder without such files is an error that says what it holds instead.
An image file is one still frame. An *animated* WebP or PNG (APNG) is not silently read as its
first frame: :func:`read_image` raises a VideoReadError that names it and its frame count.
:class:`AnimatedWebP` reads an animated WebP frame by frame with PIL (PyAV cannot decode one) for
the video decoding path (:func:`geocon_torch.io.decode.open_video`).
"""
from __future__ import annotations

import io
import re
from collections import Counter
from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace
from typing import BinaryIO, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np

from ..errors import VideoReadError
from .frame_rgb import composite_rgb, over_black

#: suffixes of the image files read as frames (compared case-insensitively), by the folder and
#: the single-file readers alike (:func:`geocon_torch.io.read_clip`); 16-bit PNG / TIFF are
#: reduced to 8 bits by OpenCV (PNG: >> 8; TIFF: / 257 rounded), an EXR (linear light) is read
#: as its values clipped to [0, 1] (x 255, no transfer curve applied)
IMAGE_SUFFIXES = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".webp", ".tif", ".tiff", ".exr"})
#: image suffixes decoded by PyAV (FFmpeg), the others by OpenCV: OpenCV builds often lack
#: OpenEXR (opencv-python reads no EXR file without an environment variable)
_PYAV_SUFFIXES = frozenset({".exr"})
#: a TIFF's header (little / big endian)
_TIFF_MAGIC = (b"II*\x00", b"MM\x00*")
_PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
#: a file name with a number: (prefix)(the last run of digits)(the rest, without digits)
_NUMBERED = re.compile(r"^(.*?)(\d+)(\D*)$")


def natural_key(name: str) -> Tuple:
    """Sort key for "natural" order: ``frame2.png`` before ``frame10.png`` (case-insensitive)."""
    parts = re.split(r"(\d+)", name.lower())
    return tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in parts if p)


def image_files(folder: Path, suffixes: Iterable[str] = IMAGE_SUFFIXES) -> List[Path]:
    """Image files of ``folder`` (suffix matched case-insensitively, hidden files skipped), in
    :func:`natural_order` (never the file system's listing order); possibly empty. Files of
    several suffixes are all listed (``f1.png``, ``f2.jpg``, ``f3.tif``: three frames)."""
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
    """:func:`image_files` of ``folder``; raises VideoReadError when the folder holds none,
    naming the suffixes it reads and the commonest ones of the files it holds instead."""
    files = image_files(folder)
    if not files:
        raise VideoReadError(f"{folder}: the folder holds no image file read as a frame "
                             f"({', '.join(sorted(IMAGE_SUFFIXES))}){_other_files(folder)}; "
                             f"0 frames")
    return files


def _other_files(folder: Path, most: int = 3) -> str:
    """", it holds 12 .dpx, 1 .txt" for the ``most`` commonest suffixes of the files (not
    hidden) in ``folder``; "" for a folder without files."""
    counts = Counter(p.suffix.lower() or "(no suffix)" for p in folder.iterdir()
                     if p.is_file() and not p.name.startswith("."))
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:most]
    more = " ..." if len(counts) > most else ""
    return f"; it holds {', '.join(f'{n} {s}' for s, n in top)}{more}" if top else ""


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


def _png_header(f: BinaryIO) -> Tuple[int, int, bool]:
    """(frame count, colour type, tRNS chunk seen) of a PNG, read from the binary file ``f``
    at its start: the chunks that precede its image data (acTL: an animated PNG's count;
    nothing is decoded); (1, -1, False) for another file."""
    if f.read(8) != _PNG_MAGIC:
        return 1, -1, False
    colour, trns = -1, False
    while True:
        chunk = f.read(8)
        if len(chunk) < 8 or chunk[4:] in (b"IDAT", b"IEND"):
            return 1, colour, trns
        size = int.from_bytes(chunk[:4], "big")
        if chunk[4:] == b"acTL":
            count = f.read(4)
            n = max(1, int.from_bytes(count, "big")) if len(count) == 4 else 1
            return n, colour, trns
        if chunk[4:] == b"IHDR" and size >= 10:
            colour = f.read(10)[9]
            size -= 10
        trns = trns or chunk[4:] == b"tRNS"
        f.seek(size + 4, 1)  # data and CRC


def _apng_frames(path: Path) -> int:
    """Frame count of an animated PNG (its acTL chunk, which precedes the image data); 1 for a
    still PNG or another file."""
    with open(path, "rb") as f:
        return _png_header(f)[0]


def _may_have_alpha(data: np.ndarray) -> bool:
    """Whether the header of an image file's bytes ``data`` (uint8) announces transparency
    (read before decoding, so an opaque file is decoded once, as before): a PNG with an alpha
    colour type (grey + alpha, RGBA) or a tRNS chunk, a WebP with the VP8X alpha flag or a
    lossless (VP8L) one with its alpha bit, a 32-bit BMP, a TIFF with more samples per pixel
    than its colour needs (:func:`_tiff_extra_samples`)."""
    head = data[:32].tobytes()
    if head[:4] in _TIFF_MAGIC:
        return _tiff_extra_samples(data)
    if head[:8] == _PNG_MAGIC:
        _, colour, trns = _png_header(io.BytesIO(data))
        return colour in (4, 6) or trns
    if head[:4] == b"RIFF" and head[8:12] == b"WEBP" and len(head) >= 25:
        if head[12:16] == b"VP8X":
            return bool(head[20] & 0x10)
        return head[12:16] == b"VP8L" and bool((head[24] >> 4) & 1)
    return head[:2] == b"BM" and len(head) >= 30 and int.from_bytes(head[28:30], "little") == 32


#: TIFF Photometric -> the samples per pixel its colour takes (0, 1: grey; 2: RGB; 3: palette;
#: 5: CMYK; 6: YCbCr; 8: CIE L*a*b*); the samples beyond are extra ones (alpha)
_TIFF_COLOUR_SAMPLES = {0: 1, 1: 1, 2: 3, 3: 1, 5: 4, 6: 3, 8: 3}


def _tiff_extra_samples(data: np.ndarray) -> bool:
    """Whether the first image of a TIFF file (its bytes ``data``, uint8) has more samples per
    pixel than its Photometric colour takes: an alpha channel (tags SamplesPerPixel 277 and
    Photometric 262 of the first directory; nothing is decoded). True when the directory cannot
    be read (a truncated file): the file is then decoded once more to look."""
    raw = memoryview(data)
    order = "little" if bytes(raw[:2]) == b"II" else "big"
    start = int.from_bytes(raw[4:8], order)
    if len(raw) < start + 2:
        return True
    tags = {}
    for k in range(int.from_bytes(raw[start:start + 2], order)):
        entry = bytes(raw[start + 2 + 12 * k:start + 14 + 12 * k])
        if len(entry) < 12:
            return True
        tags[int.from_bytes(entry[:2], order)] = int.from_bytes(entry[8:10], order)
    samples = tags.get(277, 1)
    return samples > _TIFF_COLOUR_SAMPLES.get(tags.get(262, 2), samples)


#: EXIF orientation -> the turn that shows the stored (H, W) plane upright (OpenCV applies
#: it to IMREAD_COLOR reads, not to IMREAD_UNCHANGED ones)
_EXIF_TURNS = {2: lambda a: a[:, ::-1], 3: lambda a: a[::-1, ::-1], 4: lambda a: a[::-1],
               5: lambda a: a.T, 6: lambda a: np.rot90(a, -1),
               7: lambda a: np.rot90(a, -1)[::-1], 8: lambda a: np.rot90(a)}


def _exif_orientation(data: np.ndarray) -> int:
    """The EXIF orientation tag of an image file's bytes ``data`` (1: none or unreadable), read
    with PIL."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            return int(image.getexif().get(0x0112, 1) or 1)
    except (OSError, ValueError, SyntaxError, TypeError):
        return 1


def _pil_alpha(data: np.ndarray) -> Optional[np.ndarray]:
    """The alpha plane (H, W) uint8 of an 8-bit grey + alpha image's bytes ``data`` as PIL
    decodes it (stored orientation); None for any other mode or an unreadable file."""
    from PIL import Image

    try:
        with Image.open(io.BytesIO(data)) as image:
            if image.mode != "LA":  # (not "La", premultiplied: its grey is already dark)
                return None
            return np.asarray(image.getchannel("A"), dtype=np.uint8).copy()
    except (OSError, ValueError, SyntaxError, TypeError):
        return None


def _alpha_plane(data: np.ndarray, shape: Tuple[int, ...], path: Path) -> Optional[np.ndarray]:
    """The alpha plane of encoded image ``data`` in display orientation, (H, W) uint8 / uint16;
    None when it decodes without one (or, for a BMP, with alpha 0 everywhere: a 32-bit BMP's
    fourth byte is unused padding in most files, which viewers show opaque)."""
    import cv2

    raw = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    if raw is not None and raw.ndim == 3 and raw.shape[2] in (2, 4):
        alpha = raw[..., -1]
    elif data[:2].tobytes() in (b"II", b"MM"):  # OpenCV reads a grey + alpha TIFF as grey
        alpha = _pil_alpha(data)
        if alpha is None:
            return None
    else:
        return None
    if data[:2].tobytes() == b"BM" and not alpha.any():
        return None
    turn = _EXIF_TURNS.get(_exif_orientation(data))
    alpha = np.ascontiguousarray(turn(alpha)) if turn else alpha
    if alpha.shape != tuple(shape[:2]):
        raise VideoReadError(f"{path}: the alpha channel ({alpha.shape[1]}x{alpha.shape[0]}) "
                             f"does not match the image ({shape[1]}x{shape[0]})")
    return alpha


def animated_frames(path: Path) -> Tuple[str, int]:
    """(kind, frame count) of an animated image file: ("WebP", n) or ("PNG (APNG)", n);
    ("", 1) for a still image or any other file."""
    durations = webp_durations(path)
    if durations is not None:
        return "WebP", len(durations)
    n = _apng_frames(path) if path.is_file() else 1
    return ("PNG (APNG)", n) if n > 1 else ("", 1)


def read_image(path: Path) -> np.ndarray:
    """(H, W, 3) uint8 RGB of an image file, composited over black where it is transparent:
    :func:`read_image_alpha` without the count."""
    return read_image_alpha(path)[0]


def read_image_alpha(path: Path) -> Tuple[np.ndarray, int]:
    """(H, W, 3) uint8 RGB, decoded from the file's bytes (any file name, also one that is not
    UTF-8), and the number of its pixels that are not opaque. An image with an alpha channel
    (RGBA, grey + alpha, a palette or colour key with tRNS) is composited over black
    (:func:`over_black`), as every reader does; an opaque one is decoded once, as before.

    Raises VideoReadError when the file cannot be read or does not decode, or when it is an
    animated WebP / PNG (one image file is one still frame: its animation would be lost)."""
    import cv2

    if path.stat().st_size == 0:
        raise VideoReadError(f"{path}: the image file is empty (0 bytes)")
    kind, n = animated_frames(path)
    if n > 1:
        raise VideoReadError(
            f"{path}: an animated {kind} with {n} frames is not supported as an image (an image "
            f"file, alone or in a folder, is read as one still frame, so {n - 1} frames would "
            f"be lost); convert it to a video (mp4, gif) or to a folder of one image per frame")
    if path.suffix.lower() in _PYAV_SUFFIXES:
        return _pyav_image(path)
    try:  # bytes, not cv2.imread(str): OpenCV crashes on a file name that is not UTF-8
        data = np.fromfile(path, dtype=np.uint8)
    except OSError as exc:
        raise VideoReadError(f"{path}: the image file cannot be read ({exc})") from exc
    bgr = cv2.imdecode(data, cv2.IMREAD_COLOR)
    if bgr is None:
        raise VideoReadError(f"{path}: not a readable image")
    rgb = np.ascontiguousarray(bgr[..., ::-1])
    alpha = _alpha_plane(data, rgb.shape, path) if _may_have_alpha(data) else None
    if alpha is None:
        return rgb, 0
    return over_black(rgb, alpha, 65535 if alpha.dtype == np.uint16 else 255)


def _pyav_image(path: Path) -> Tuple[np.ndarray, int]:
    """:func:`read_image_alpha` of an image PyAV decodes (:data:`_PYAV_SUFFIXES`), opened from
    a file object (any file name): its first frame, converted as a video's frames are
    (:func:`~.frame_rgb.composite_rgb`: the pixels the file gave when it was read as a video)."""
    import av

    try:
        with open(path, "rb") as f, av.open(f) as container:
            for frame in container.decode(video=0):
                return composite_rgb(frame)
    except (av.FFmpegError, OSError, ValueError, IndexError) as exc:
        raise VideoReadError(f"{path}: not a readable image ({exc})") from exc
    raise VideoReadError(f"{path}: not a readable image (no frame decodes)")


class _StillFrame:
    """One decoded frame of an :class:`AnimatedWebP`, with what the decoders read of a PyAV
    ``VideoFrame``: ``pts`` (ms), ``height``, ``width``, ``format.name`` ("rgb24", or "rgba"
    for an animation with transparency) and ``to_ndarray(format=...)`` in that format."""

    def __init__(self, pixels: np.ndarray, pts: int) -> None:
        self.pixels, self.pts = pixels, pts
        self.height, self.width = int(pixels.shape[0]), int(pixels.shape[1])
        self.format = SimpleNamespace(name="rgba" if pixels.shape[2] == 4 else "rgb24",
                                      has_palette=False)

    def to_ndarray(self, format: str = "rgb24") -> np.ndarray:  # noqa: A002 - PyAV's name
        """The (H, W, 3) uint8 RGB frame, or (H, W, 4) RGBA for a frame in "rgba"."""
        if format != self.format.name:
            raise VideoReadError(f"an animated WebP frame is {self.format.name} only, not "
                                 f"{format!r}")
        return self.pixels


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
        """Yield the frames in order (composited on the canvas; RGB, or RGBA when the
        animation has transparency: :func:`~.decode.display_rgb` composites it over black); a
        frame that does not decode ends the iteration with a message in ``errors``."""
        pts = 0
        for i, duration in enumerate(self.durations):
            try:
                self._image.seek(i)
                mode = "RGBA" if "A" in self._image.mode else "RGB"
                pixels = np.array(self._image.convert(mode), dtype=np.uint8)  # a writable copy
            except (OSError, EOFError, ValueError, SyntaxError) as exc:
                errors.append(f"decode: WebP frame {i}: {exc}")
                return
            yield _StillFrame(pixels, pts)
            pts += duration

    def close(self) -> None:
        """Release the file."""
        self._image.close()
