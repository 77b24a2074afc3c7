"""Streaming decode through PyAV: open a file safely, iterate its frames packet by packet, keep
only the selected ones, resized to the working resolution as soon as they are decoded.

No raw ``av`` exception leaves this module: opening failures become VideoReadError, decode errors
after the first frame are recorded (the clip is then flagged truncated) and decoding stops.

Frames missing between timestamps are inferred only for a constant-frame-rate stream with a few
gaps; a variable-frame-rate stream (gif / animated WebP / APNG, whose frame durations vary by
design, or a stream whose long steps are not rare, not whole multiples of the frame duration,
or a run of five or more equal ones: a change of the capture rate) is flagged
``variable_frame_rate`` instead and nothing is inferred from its timestamps. An
animated WebP, which PyAV cannot decode, is read with PIL (:class:`~.images.AnimatedWebP`).

A container that announces no frame count (Matroska / WebM) ends a file cut part-way through
with a plain end of file: the stream's duration then says how many frames the time after the
last decoded frame held (:attr:`Decoded.duration_frames`), so the cut is counted as for an mp4.
MPEG-TS / MPEG-PS files and raw elementary streams (``.h264``, ``.hevc``, ``.m4v`` ...) record
no length at all (FFmpeg estimates a TS file's duration from its own last timestamps, so a cut
file's "duration" shrinks with it): a cut there cannot be told from a complete file, and the
clip says so (``length_known`` False, a warning). A GIF cut part-way lacks its trailer byte and
an APNG cut part-way decodes fewer frames than its ``acTL`` chunk announces: both are truncated.
A count the container announces is compared with the frames decoded only after the packets an
edit list discards (a stream-copy trim's preroll, ``preroll_frames``), and a shortfall counts as
lost frames only where something shows a cut (:func:`_cut_evidence`); otherwise the container's
count is wrong (``container_count_mismatch``: an AVI header that over-counts).

The decoder runs :data:`DECODE_THREADS` threads on every machine, and a damaged stream (a
decode error, or frames FFmpeg flags as decoded with concealed errors, counted as
``concealed_frames``) is decoded again on one (:func:`decode_stable`), so a file gives the same
pixels everywhere. A mid-stream change of the frame size is recorded (``size_changes``), and the
stream read is FFmpeg's best video stream. Frames are returned as a player shows them: a display
matrix that turns the picture by a quarter turn (a phone's portrait video) is applied
(:func:`display_rgb`, as OpenCV and FFmpeg do; an image folder's EXIF orientation is applied by
OpenCV's image decoder), so sizes, masks and audit images are in display orientation. Every
conversion of a decoded frame to RGB runs libswscale's C code with
:data:`~.frame_rgb.RGB_SWS_FLAGS` (:func:`~.frame_rgb.frame_to_ndarray`), so the RGB does not
depend on the CPU's SIMD kernels either.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import stat
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import VideoReadError
from .frame_rgb import composite_rgb, display_turns
from .images import AnimatedWebP, webp_durations
from .sampling import FrameMotion, FrameSelection

#: Consecutive packet decode errors after which decoding gives up.
_MAX_ERRORS = 8
#: A complete decode that yields more than this many frames fewer than the container announced
#: (less the edit-list preroll it discards) is reported as truncated (containers are sometimes
#: off by one).
_COUNT_SLACK = 2
#: Codecs whose frame durations vary by design: their timestamps never show lost frames.
VARIABLE_RATE_CODECS = frozenset({"gif", "webp", "apng"})
#: A step between timestamps longer than this many frame durations (the median step) is long.
_LONG_STEP = 1.5
#: A stream with more than this fraction of long steps (and at least two) is variable-rate.
_MAX_LONG_FRACTION = 0.2
#: A step further than this (in frame durations) from a whole multiple of the frame duration is
#: off the grid of a constant-rate stream: the stream is variable-rate.
_GRID_TOLERANCE = 0.25
#: A run of at least this many consecutive long steps of the same whole number of frame durations
#: is a change of the capture rate (a phone camera halving its rate in low light), not dropped
#: frames: drops in a constant-rate capture are scattered.
_RATE_RUN = 5
#: Container formats (FFmpeg's demuxer names) that record no length: MPEG transport / program
#: streams (FFmpeg estimates their duration from the last timestamps in the file, so a cut file
#: reports its own, shorter length), raw elementary streams (no duration at all) and YUV4MPEG
#: (its length is the file's size).
NO_LENGTH_FORMATS = frozenset({"mpegts", "mpegtsraw", "mpeg", "h264", "hevc", "vvc", "m4v",
                               "mpegvideo", "cavsvideo", "avs2", "avs3", "vc1", "h261", "h263",
                               "obu", "dirac", "mjpeg", "yuv4mpegpipe"})
#: The byte a complete GIF ends with (its trailer).
_GIF_TRAILER = 0x3B
#: Top-level boxes / chunks walked, at most, to see whether a file's structure runs past its end.
_MAX_BOXES = 1 << 16
#: Decoder threads, the same on every machine. FFmpeg's default (0: one per CPU the process may
#: use, plus one) made the pixels of a damaged stream depend on the machine: H.264 error
#: concealment differs with the number of frame threads (the audit's badrange.mp4 decodes to one
#: frame set at 1 thread, another at 2 and a third at 3 or more), so one content hash + config
#: hash keyed different results on a 1-CPU and a 2-CPU node. A clean stream decodes bit for bit
#: the same at any count (frame threading is exact by design), so it gets 4 threads (about the
#: speed of FFmpeg's own choice on a few cores); a damaged one is decoded again on
#: :data:`DAMAGED_DECODE_THREADS`, see :attr:`Decoded.damaged`.
DECODE_THREADS = 4
#: Decoder threads for a damaged stream (a decode error or a frame decoded with concealed errors):
#: one. With frame threads the concealment of damaged data is not even repeatable (badrange.mp4
#: at 8 threads: 3 different frame sets in 25 decodes on one machine); on one thread it is.
DAMAGED_DECODE_THREADS = 1
#: Frame indices of concealed frames kept in ``meta`` (``concealed_frames`` counts them all).
_KEEP_INDICES = 5
#: Frames decoded past the end of a selection that stops early, only to look for damage, in a
#: stream with B-frames: a frame returned before a damaged one may be decoded after it and from
#: it (H.264 reorders up to 16 frames), so its pixels depend on the thread count although no
#: flag was seen yet.
_LOOKAHEAD = 16 + DECODE_THREADS


#: what a path that is neither a regular file nor a folder is, by its ``stat`` mode test
_SPECIAL_FILES = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                  (stat.S_ISFIFO, "a named pipe, FIFO"), (stat.S_ISSOCK, "a socket"))


def special_file(path: Path) -> Optional[str]:
    """What ``path`` is ("a character device", "a named pipe, FIFO", ...) when it exists but
    is neither a regular file nor a folder (symbolic links followed): reading one may never end
    (``/dev/zero``) or block in ``open`` (a FIFO without a writer). None otherwise."""
    try:
        mode = path.stat().st_mode
    except (OSError, ValueError):  # missing, a dangling link, an unusable name: not special
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return next((name for test, name in _SPECIAL_FILES if test(mode)), "a special file")


def check_file(path: Path) -> Path:
    """Raise VideoReadError for a missing path, a zero-byte file, or anything that exists but
    is neither a regular file nor a folder (:func:`special_file`: a device such as
    ``/dev/zero``, a named pipe, a socket); return the path. Every reader and
    :func:`~geocon_torch.io.hashing.content_hash` call it before opening the path."""
    if not path.exists():
        raise VideoReadError(f"{path}: no such file or folder")
    kind = special_file(path)
    if kind is not None:
        raise VideoReadError(f"{path}: not a regular file or a folder ({kind}); give a video "
                             f"file or a folder of images")
    if path.is_file() and path.stat().st_size == 0:
        raise VideoReadError(f"{path}: the file is empty (0 bytes)")
    return path


def open_video(path: Path, threads: int = DECODE_THREADS):
    """Open ``path`` with PyAV and return ``(container, video_stream)``: FFmpeg's best video
    stream (:func:`best_video_stream`), to be decoded on ``threads`` threads (never FFmpeg's
    machine-dependent default: :data:`DECODE_THREADS`).

    Raises VideoReadError when the file is not a readable container or holds no video stream.
    """
    import av

    check_file(path)
    durations = webp_durations(path)
    if durations is not None and len(durations) > 1:
        anim = AnimatedWebP(path, durations)  # PyAV cannot decode an animated WebP
        return anim, anim
    try:
        container = av.open(str(path))
    except av.FFmpegError as exc:
        raise VideoReadError(f"{path}: not a readable video ({exc.__class__.__name__}: "
                             f"{getattr(exc, 'strerror', None) or exc}); the file may be "
                             f"truncated or not a video at all") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise VideoReadError(f"{path}: cannot open ({exc})") from exc
    if not container.streams.video:
        container.close()
        raise VideoReadError(f"{path}: the container holds no video stream")
    stream = best_video_stream(container)
    stream.thread_type = "AUTO"
    stream.codec_context.thread_count = int(threads)  # before the codec opens (first packet)
    return container, stream


def best_video_stream(container):
    """FFmpeg's best video stream (``av_find_best_stream``, the one a player shows: a one-frame
    cover picture or thumbnail stream loses against a video), else the first video stream."""
    import av

    try:
        best = container.streams.best("video")
    except (av.FFmpegError, ValueError):
        best = None
    return best if best is not None else container.streams.video[0]


def _stream_end(container, stream) -> Optional[float]:
    """Where the video stream ends (s), by what its container writes: the stream's duration
    (after its start time), else its DURATION tag (Matroska / WebM muxers write one per track),
    else the container's duration when the video is its only stream (the container's spans all
    its streams: an audio track can outlast the video); None when unknown. A tag or container
    duration counts from time 0 (FFmpeg's Matroska muxer writes end times), which can only
    place the end early: a late end would count frames that never existed as lost."""
    tb = float(stream.time_base) if stream.time_base else 0.0
    if stream.duration and tb > 0:
        return (float(stream.start_time or 0) + float(stream.duration)) * tb
    for key, value in (stream.metadata or {}).items():
        if key.upper() == "DURATION":
            seconds = _clock_seconds(value)
            if seconds is not None:
                return seconds
    if container.duration and len(container.streams) == 1:
        return float(container.duration) / 1e6  # AV_TIME_BASE units
    return None


def _clock_seconds(text: str) -> Optional[float]:
    """"HH:MM:SS.fraction" (a Matroska DURATION tag) -> seconds; None when malformed."""
    try:
        h, m, s = str(text).strip().split(":")
        seconds = 3600.0 * int(h) + 60.0 * int(m) + float(s)
    except ValueError:
        return None
    return seconds if np.isfinite(seconds) and seconds > 0 else None


def stream_fps(stream) -> Optional[float]:
    """Frames per second reported by the stream (average, else guessed, else base rate)."""
    for rate in (stream.average_rate, stream.guessed_rate, stream.base_rate):
        if rate is not None and float(rate) > 0:
            return float(rate)
    return None


@dataclass
class PacketLog:
    """What the demuxer said of the packets of the stream read (:func:`iter_frames`).

    Attributes:
        packets: packets with data that the decoder is to show (``discarded`` not included).
        discarded: packets flagged ``AV_PKT_FLAG_DISCARD``: decoded and dropped, as an mp4 /
            mov edit list asks for the preroll frames of a stream-copy trim.
        corrupt: packets flagged ``AV_PKT_FLAG_CORRUPT`` (a short read at the end of a cut
            file, or damaged data the demuxer noticed).
        end: the byte after the furthest packet with a known position (None when none has one).
        last_frames: frames the last packet with data decoded to.
        cut: why the file is known to be cut where no count shows it (a GIF without its
            trailer); None otherwise.
        keep_tail: record ``tail``, the last byte of the last packet with data (GIF only).
    """

    packets: int = 0
    discarded: int = 0
    corrupt: int = 0
    end: Optional[int] = None
    last_frames: int = 0
    cut: Optional[str] = None
    keep_tail: bool = False
    tail: Optional[int] = None

    def note(self, packet) -> None:
        """Count one demuxed packet (a flush packet, with no data, is not one)."""
        size = int(getattr(packet, "size", 1) or 0)
        if not size:
            return
        if getattr(packet, "is_discard", False):
            self.discarded += 1
        else:
            self.packets += 1
        if getattr(packet, "is_corrupt", False):
            self.corrupt += 1
        pos = getattr(packet, "pos", None)
        if pos is not None and pos >= 0:
            self.end = max(self.end or 0, int(pos) + size)
        self.last_frames = 0
        if self.keep_tail:
            self.tail = int(memoryview(packet)[-1])


class LoggedFrames:
    """The decoded frames :func:`iter_frames` yields (an iterator), with ``packets``: the
    :class:`PacketLog` of the packets demuxed so far."""

    def __init__(self, frames: Iterator, packets: PacketLog) -> None:
        self._frames = frames
        self.packets = packets

    def __iter__(self) -> "LoggedFrames":
        return self

    def __next__(self):
        return next(self._frames)


def format_names(container) -> frozenset:
    """FFmpeg's names of ``container``'s format ("mov,mp4,m4a,..." -> {"mov", "mp4", ...});
    empty for a container that is not PyAV's (an animated WebP read with PIL)."""
    name = getattr(getattr(container, "format", None), "name", None) or ""
    return frozenset(n for n in str(name).split(",") if n)


def iter_frames(container, stream, errors: List[str]) -> LoggedFrames:
    """Decoded ``av.VideoFrame`` objects, packet by packet, until the end of the stream or
    until decoding fails ``_MAX_ERRORS`` times in a row; the error messages go to ``errors``,
    what the demuxer said of the packets to the iterator's ``packets`` (:class:`PacketLog`).
    A GIF cut part-way (no trailer byte) ends without the frame its partial last packet decoded
    to (:func:`_gif_frames`)."""
    log = PacketLog()
    if isinstance(container, AnimatedWebP):
        return LoggedFrames(container.decode_frames(errors), log)
    frames = _demuxed_frames(container, stream, errors, log)
    if "gif" in format_names(container):
        log.keep_tail = True
        frames = _gif_frames(frames, log, str(container.name))
    return LoggedFrames(frames, log)


def _demuxed_frames(container, stream, errors: List[str], log: PacketLog) -> Iterator:
    """The frames of :func:`iter_frames`, each packet counted in ``log``."""
    import av

    packets = container.demux(stream)
    failures = 0
    while failures < _MAX_ERRORS:
        try:
            packet = next(packets)
        except StopIteration:
            return
        except av.FFmpegError as exc:
            errors.append(f"demux: {exc}")
            return
        log.note(packet)
        try:
            frames = packet.decode()
        except av.FFmpegError as exc:
            errors.append(f"decode: {exc}")
            failures += 1
            continue
        failures = 0
        if int(getattr(packet, "size", 1) or 0):
            log.last_frames = len(frames)
        yield from frames
    errors.append(f"gave up after {_MAX_ERRORS} consecutive decode errors")


def _gif_frames(frames: Iterator, log: PacketLog, path: str) -> Iterator:
    """A GIF's ``frames``, each held back until the next one decodes. A GIF ends with the
    trailer byte 0x3B: without it the file was cut (``log.cut``), and the frame its last
    packet decoded to is dropped unless that packet's image data ends with its block
    terminator (0x00): a partial LZW stream decodes to a frame whose lower part is garbage."""
    held = None
    for frame in frames:
        if held is not None:
            yield held
        held = frame
    if _last_byte(path) in (_GIF_TRAILER, None):
        if held is not None:
            yield held
        return
    log.cut = "the GIF ends without its trailer byte (0x3B)"
    if held is not None and log.last_frames and log.tail != 0:
        log.cut += "; its last frame, decoded from a partial packet, was dropped"
        return
    if held is not None:
        yield held


def _last_byte(path: str) -> Optional[int]:
    """The last byte of the file ``path`` (None when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            last = f.read(1)
    except (OSError, ValueError):
        return None
    return last[0] if last else None


def apng_frame_count(path: str) -> Optional[int]:
    """The frame count an APNG's ``acTL`` chunk announces (the chunk comes before the image
    data); None when the file has none or cannot be read."""
    try:
        with open(path, "rb") as f:
            if f.read(8) != b"\x89PNG\r\n\x1a\n":
                return None
            for _ in range(_MAX_BOXES):
                head = f.read(8)
                if len(head) < 8:
                    return None
                size, kind = struct.unpack(">I4s", head)
                if kind == b"acTL":
                    body = f.read(4)
                    return struct.unpack(">I", body)[0] if len(body) == 4 else None
                if kind in (b"IDAT", b"IEND"):
                    return None
                f.seek(size + 4, os.SEEK_CUR)  # the data and its CRC
    except (OSError, ValueError):
        return None
    return None


def structure_runs_past_end(path: Path, formats: frozenset) -> bool:
    """Whether a top-level box of an ISO-BMFF file (mp4 / mov: ``formats`` has "mov" or
    "mp4") or a top-level chunk of a RIFF file (avi) claims bytes past the end of ``path``:
    the file was cut (an mp4's media data box, an AVI's RIFF list, outlast it). False for other
    formats, a box that runs to the end by definition (size 0) or a file that cannot be read."""
    riff = "avi" in formats
    if not (riff or formats & {"mov", "mp4"}):
        return False
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            pos = 0
            for _ in range(_MAX_BOXES):
                if pos >= size:
                    return False
                f.seek(pos)
                head = f.read(16)
                if len(head) < 8:
                    return True  # a box header cut short
                if riff:
                    length = struct.unpack("<I", head[4:8])[0]
                    end, pad = pos + 8 + length, length & 1
                else:
                    length = struct.unpack(">I", head[:4])[0]
                    if length == 1 and len(head) == 16:
                        length = struct.unpack(">Q", head[8:16])[0]
                    if length < 8:
                        return False  # 0: runs to the end of the file; else malformed
                    end, pad = pos + length, 0
                if end > size:
                    return True
                pos = end + pad
    except (OSError, ValueError):
        return False
    return False


def display_rgb(frame) -> np.ndarray:
    """(H, W, 3) uint8 RGB of a decoded frame in display orientation, composited over black
    where it is transparent (:func:`composite_rgb` without the count)."""
    return composite_rgb(frame)[0]


def display_size(frame) -> Tuple[int, int]:
    """(H, W) of a decoded frame in display orientation, without converting it."""
    h, w = int(frame.height), int(frame.width)
    return (w, h) if display_turns(frame) % 2 else (h, w)


@dataclass
class TransparencyCount:
    """A source's transparency over the frames kept (videos and image folders alike): frames
    with pixels that are not opaque, those pixels, and all pixels."""

    frames: int = 0
    pixels: int = 0
    total: int = 0

    def add(self, rgb: np.ndarray, partial: int) -> None:
        """Count one kept (H, W, 3) frame that had ``partial`` pixels that are not opaque."""
        self.frames += partial > 0
        self.pixels += partial
        self.total += rgb.shape[0] * rgb.shape[1]

    def meta(self) -> Dict[str, object]:
        """The ``meta`` keys: ``transparent_frames`` (0 for an opaque source) and
        ``transparent_fraction`` (of all kept pixels; those were composited over black)."""
        return {"transparent_frames": int(self.frames),
                "transparent_fraction": self.pixels / self.total if self.total else 0.0}


#: FFmpeg's names (``av_color_*_name``, what ffprobe prints) of the colour tag codes: transfer
#: (AVColorTransferCharacteristic), primaries, matrix (AVColorSpace) and range; a code missing
#: here is written as its number
_TRANSFER_NAMES = {1: "bt709", 2: "unknown", 4: "bt470m", 5: "bt470bg", 6: "smpte170m",
                   7: "smpte240m", 8: "linear", 9: "log100", 10: "log316", 11: "iec61966-2-4",
                   12: "bt1361e", 13: "iec61966-2-1", 14: "bt2020-10", 15: "bt2020-12",
                   16: "smpte2084", 17: "smpte428", 18: "arib-std-b67"}
_PRIMARIES_NAMES = {1: "bt709", 2: "unknown", 4: "bt470m", 5: "bt470bg", 6: "smpte170m",
                    7: "smpte240m", 8: "film", 9: "bt2020", 10: "smpte428", 11: "smpte431",
                    12: "smpte432", 22: "ebu3213"}
_MATRIX_NAMES = {0: "gbr", 1: "bt709", 2: "unknown", 4: "fcc", 5: "bt470bg", 6: "smpte170m",
                 7: "smpte240m", 8: "ycgco", 9: "bt2020nc", 10: "bt2020c", 11: "smpte2085",
                 12: "chroma-derived-nc", 13: "chroma-derived-c", 14: "ictcp"}
_RANGE_NAMES = {0: "unknown", 1: "tv", 2: "pc"}
#: (key of the colour record, frame / codec context attribute, names, the "not tagged" code)
_COLOR_TAGS = (("transfer", "color_trc", _TRANSFER_NAMES, 2),
               ("primaries", "color_primaries", _PRIMARIES_NAMES, 2),
               ("matrix", "colorspace", _MATRIX_NAMES, 2),
               ("range", "color_range", _RANGE_NAMES, 0))


def stream_color_codes(stream) -> Dict[str, int]:
    """The colour tag codes (``_COLOR_TAGS`` attributes -> int) the stream's codec context
    holds (from the container), the fallback of :func:`frame_color`; {} where it has none."""
    cc = getattr(stream, "codec_context", None)
    codes = {attr: getattr(cc, attr, None) for _, attr, _, _ in _COLOR_TAGS}
    return {attr: int(code) for attr, code in codes.items() if code is not None}


def frame_color(frame, fallback: Optional[Dict[str, int]] = None) -> Dict[str, object]:
    """What a decoded frame's pixels are: ``{"pix_fmt", "bits", "transfer", "primaries",
    "matrix", "range"}``: the pixel format's name and bit depth (its deepest component) and
    FFmpeg's names of the frame's colour tags ("smpte2084" for PQ, "arib-std-b67" for HLG,
    "bt2020nc", "tv" ...), each taken from ``fallback`` (:func:`stream_color_codes`) where the
    frame leaves it untagged or PyAV does not expose it; "unknown" when neither says. {} for a
    frame that is not PyAV's (an animated WebP's, read with PIL)."""
    fmt = getattr(frame, "format", None)
    if fmt is None or not hasattr(fmt, "components"):
        return {}
    out: Dict[str, object] = {"pix_fmt": str(fmt.name),
                              "bits": max((int(c.bits) for c in fmt.components), default=8)}
    for key, attr, names, untagged in _COLOR_TAGS:
        code = getattr(frame, attr, None)
        if code is None or int(code) == untagged:
            code = (fallback or {}).get(attr, code)
        code = untagged if code is None else int(code)
        out[key] = names.get(code, str(code))
    return out


@dataclass
class Decoded:
    """What :func:`decode_selected` returns.

    Attributes:
        images: kept frames, each (h, w, 3) uint8 RGB at working resolution, in decode order.
        indices: source index of each kept frame.
        decoded: frames the decoder produced (all of them when ``complete``).
        complete: decoding went to the end of the stream, or of what could be decoded (it was
            not stopped early because the selection was satisfied).
        errors: decode error messages (empty for a clean file).
        source_size: (H, W) of the first decoded frame, in display orientation
            (:func:`display_size`).
        container_frames: frame count the container announces (None when it has none).
        codec, fps: stream codec name and frames per second (None when unknown).
        pts: presentation timestamp of each decoded frame (stream time base units).
        time_base: the stream's time base (s per timestamp unit; None when unknown).
        end_pts: the latest ``pts + duration`` of the decoded frames (where they end).
        stream_end: where the stream ends by its container (s; :func:`_stream_end`), read only
            when the container announces no frame count (None otherwise or when unknown).
        concealed: source indices of the frames FFmpeg flags as decoded with concealed errors
            (``AV_FRAME_FLAG_CORRUPT``: damaged data filled in by the decoder); the first
            ``_KEEP_INDICES`` of them, ``num_concealed`` counts them all.
        frame_sizes: the distinct (H, W) of the decoded frames, in the order they appear.
        size_changes: frames whose size differs from the previous frame's;
            ``first_size_change`` = (frame index, (H, W) before, (H, W) after) of the first.
        stream_index, video_streams: the index of the stream read and the number of video
            streams in the container.
        threads: the decoder threads used (:data:`DECODE_THREADS`, or
            :data:`DAMAGED_DECODE_THREADS` for the second decode of a damaged stream).
        damage_ahead: a decode of a stream with B-frames stopped early (the selection was
            satisfied) found damage in the next ``_LOOKAHEAD`` frames (:func:`_damage_ahead`);
            nothing else records them.
        rotation: the display rotation of the first decoded frame (degrees counterclockwise,
            0 without one); quarter turns are applied to every frame (:func:`display_rgb`).
        transparency: the kept frames' pixels that are not opaque (composited over black:
            :func:`composite_rgb`), counted by :class:`TransparencyCount`.
        color: pixel format, bit depth and colour tags of the first decoded frame
            (:func:`frame_color`; the stream's tags, ``stream_color``, where the frame has
            none): an HDR source (PQ / HLG) is read as SDR code values, and this says so.
        packets: what the demuxer said of the packets (:class:`PacketLog`: edit-list preroll
            discarded, packets flagged corrupt, where the stream's data ends, a cut GIF).
        header_frames: the frame count the file itself announces where FFmpeg gives none (an
            APNG's ``acTL`` chunk), None otherwise; see :attr:`announced`.
        formats: FFmpeg's names of the container format (:func:`format_names`).
        count_mismatch: frames the container announces beyond those found, in a complete
            file that shows no sign of a cut (:func:`_cut_evidence`): its count is wrong and
            they are not lost; or frames decoded beyond those it announces (an AVI header that
            under-counts; at least that many when decoding stopped early); 0 otherwise (set by
            :func:`decode_selected`).
        last_concealed: the last decoded frame was decoded with concealed errors.
        overflowed: decoding stopped because one more frame would have been kept than
            ``max_keep`` allows (:func:`decode_selected`); ``images`` is then empty.
    """

    images: List[np.ndarray] = field(default_factory=list)
    indices: List[int] = field(default_factory=list)
    decoded: int = 0
    complete: bool = False
    errors: List[str] = field(default_factory=list)
    source_size: Optional[Tuple[int, int]] = None
    container_frames: Optional[int] = None
    codec: str = ""
    fps: Optional[float] = None
    pts: List[int] = field(default_factory=list)
    time_base: Optional[float] = None
    end_pts: Optional[int] = None
    stream_end: Optional[float] = None
    concealed: List[int] = field(default_factory=list)
    num_concealed: int = 0
    frame_sizes: List[Tuple[int, int]] = field(default_factory=list)
    size_changes: int = 0
    first_size_change: Optional[Tuple[int, Tuple[int, int], Tuple[int, int]]] = None
    stream_index: int = 0
    video_streams: int = 1
    threads: int = DECODE_THREADS
    damage_ahead: bool = False
    rotation: float = 0.0
    transparency: TransparencyCount = field(default_factory=TransparencyCount)
    color: Dict[str, object] = field(default_factory=dict)
    stream_color: Dict[str, int] = field(default_factory=dict)
    packets: PacketLog = field(default_factory=PacketLog)
    header_frames: Optional[int] = None
    formats: frozenset = frozenset()
    count_mismatch: int = 0
    last_concealed: bool = False
    overflowed: bool = False
    _last_size: Optional[Tuple[int, int]] = field(default=None, repr=False)

    def note(self, frame) -> int:
        """Count a decoded frame (timestamp, size, concealed errors; the first one's colour:
        :attr:`color`); return its index."""
        i = self.decoded
        self.decoded += 1
        if frame.pts is not None:
            self.pts.append(int(frame.pts))
            end = int(frame.pts) + int(getattr(frame, "duration", None) or 0)
            self.end_pts = end if self.end_pts is None else max(self.end_pts, end)
        size = display_size(frame)
        if self.source_size is None:
            self.source_size = size
            self.rotation = float(getattr(frame, "rotation", 0) or 0)
            self.color = frame_color(frame, self.stream_color)
            self.frame_sizes.append(size)
        elif size != self._last_size:
            self.size_changes += 1
            if self.first_size_change is None:
                self.first_size_change = (i, self._last_size, size)
            if size not in self.frame_sizes:
                self.frame_sizes.append(size)
        self._last_size = size
        self.last_concealed = bool(getattr(frame, "is_corrupt", False))
        if self.last_concealed:
            self.num_concealed += 1
            if len(self.concealed) < _KEEP_INDICES:
                self.concealed.append(i)
        return i

    @property
    def damaged(self) -> bool:
        """A decode error or a frame decoded with concealed errors (also just past a selection
        that stopped early): with several decoder threads the pixels are then not repeatable,
        so the stream must be decoded again on :data:`DAMAGED_DECODE_THREADS`
        (:func:`decode_stable`)."""
        return bool(self.errors) or self.num_concealed > 0 or self.damage_ahead

    @property
    def variable_frame_rate(self) -> bool:
        """Whether the frame durations vary (see :func:`variable_rate`)."""
        return variable_rate(timestamp_steps(self.pts), self.codec)

    @property
    def timestamp_gaps(self) -> Tuple[int, int]:
        """(gaps, missing frames) inferred from the presentation timestamps: with the frame
        duration taken as the median step between consecutive decoded frames, a step longer
        than 1.5 durations is a gap of round(step / duration) - 1 missing frames (a file whose
        frames were dropped announces and decodes fewer frames: only its timestamps show it).
        (0, 0) for a variable-frame-rate stream or a codec whose durations vary by design.
        Decoding stopped early (a frame cap) from a decoder that returns frames out of
        timestamp order (box.mp4: 0, 101, 67, 134, 34 ms, ...) leaves frames whose timestamps
        lie between those returned in its reorder buffer: no gap can be told apart from them,
        so none is counted then."""
        if not self.complete and out_of_order(self.pts):
            return 0, 0
        return timestamp_gap_count(self.pts, self.codec)

    @property
    def tail_frames(self) -> Optional[int]:
        """Frames the stream's duration holds after the last decoded frame, for a complete
        decode of a stream whose container announces no frame count: (stream end - end of the
        decoded frames) / frame duration (the median step between timestamps, or 1 / fps when
        it agrees within 5 % or there is one frame), 0 when within ``_COUNT_SLACK`` (rounding,
        an end time that counts from 0); None when there is nothing to compare."""
        if (self.announced is not None or not self.complete or self.stream_end is None
                or self.end_pts is None or not self.time_base):
            return None
        diffs = np.diff(np.unique(np.asarray(self.pts, dtype=np.float64)))
        step = float(np.median(diffs)) * self.time_base if diffs.size else None
        rate = 1.0 / self.fps if self.fps else None
        if step is None or (rate is not None and abs(rate - step) <= 0.05 * step):
            step = rate
        if not step:
            return None
        end = max(self.end_pts, max(self.pts) + step / self.time_base) * self.time_base
        tail = int(np.rint((self.stream_end - end) / step))
        return tail if tail > _COUNT_SLACK else 0

    @property
    def duration_frames(self) -> Optional[int]:
        """The frame count the stream's duration implies when the container announces none:
        decoded + missing between timestamps + :attr:`tail_frames` (None when unknown)."""
        tail = self.tail_frames
        return None if tail is None else self.decoded + self.timestamp_gaps[1] + tail

    @property
    def announced(self) -> Optional[int]:
        """The frame count the container announces: FFmpeg's (``container_frames``), else
        the file's own (``header_frames``, an APNG's ``acTL``) where a complete decode fell
        short of it (so a complete APNG reads as before: no count); None when unknown."""
        if self.container_frames is not None or self.header_frames is None:
            return self.container_frames
        short = self.complete and self.decoded < self.header_frames - self.slack
        return self.header_frames if short else None

    @property
    def slack(self) -> int:
        """Frames a complete decode may fall short of the announced count by unreported:
        ``_COUNT_SLACK`` for a container's count (sometimes off by one), 0 for an APNG's
        ``acTL`` (the format makes it exact)."""
        return _COUNT_SLACK if self.container_frames is not None else 0

    @property
    def expected_frames(self) -> Optional[int]:
        """The frames the stream is to show by its container: :attr:`announced` less the
        packets an edit list discards (``packets.discarded``); None when unknown."""
        announced = self.announced
        return None if announced is None else max(0, announced - self.packets.discarded)

    @property
    def source_frames(self) -> Optional[int]:
        """The clip's frames as far as known: those decoded when the decode is complete, else
        :attr:`expected_frames` but never fewer than were decoded (a header that under-counts
        its frames, read only in part); None when unknown."""
        expected = self.expected_frames
        if self.complete or expected is None:
            return self.decoded if self.complete else None
        return max(expected, self.decoded)

    def short_by(self) -> int:
        """Frames a complete decode fell short of :attr:`expected_frames` by, beyond
        :attr:`slack` (0 when within it, not complete or without a count)."""
        expected = self.expected_frames
        if not self.complete or expected is None or self.decoded >= expected - self.slack:
            return 0
        return expected - self.decoded

    def over_by(self) -> int:
        """Frames decoded beyond :attr:`expected_frames` and :attr:`slack` (a container that
        under-counts: complete or not, the decoded frames exist); 0 otherwise."""
        expected = self.expected_frames
        if expected is None or self.decoded <= expected + self.slack:
            return 0
        return self.decoded - expected

    @property
    def truncated(self) -> bool:
        """Decoding hit an error, the demuxer flagged a packet corrupt or the file is known to
        be cut (``packets.cut``: a GIF without its trailer), or a full decode fell short of the
        container's count (and the shortfall is no ``count_mismatch``; or, without a count,
        of the stream's duration: :attr:`tail_frames`)."""
        short = bool(self.short_by()) and not self.count_mismatch
        return (bool(self.errors) or short or bool(self.tail_frames)
                or bool(self.packets.corrupt) or bool(self.packets.cut))

    def metadata(self, path: Path) -> Dict[str, object]:
        """``Clip.meta`` of the decode (keys documented in :mod:`geocon_torch.io.reader`)."""
        gaps, missing = self.timestamp_gaps
        change = self.first_size_change
        return {
            "path": str(path), "codec": self.codec, "source_fps": self.fps,
            "container_frames": self.announced,
            "decoded_frames": self.decoded, "decode_complete": self.complete,
            "num_source_frames": self.source_frames,
            "truncated": self.truncated, "decode_errors": self.errors[:5],
            "num_decode_errors": len(self.errors), "timestamp_gaps": gaps,
            "timestamp_missing_frames": missing,
            "variable_frame_rate": self.variable_frame_rate,
            "duration_frames": self.duration_frames, "concealed_frames": self.num_concealed,
            "concealed_frame_indices": list(self.concealed),
            "frame_sizes": [size_text(hw) for hw in self.frame_sizes],
            "size_changes": self.size_changes,
            "first_size_change": None if change is None else {
                "frame": change[0], "from": size_text(change[1]), "to": size_text(change[2])},
            "video_stream": self.stream_index, "video_streams": self.video_streams,
            "decode_threads": self.threads, "display_rotation": self.rotation,
            **self.transparency.meta(), "color": dict(self.color), **self.container_meta(),
        }

    def container_meta(self) -> Dict[str, object]:
        """The ``meta`` keys of unusual containers, each present only where it applies (an
        ordinary file's meta has none): ``preroll_frames`` (edit-list preroll discarded),
        ``corrupt_packets``, ``truncation`` (why the file is known to be cut where no count
        shows it), ``container_count_mismatch`` (frames the container over- or under-counts:
        ``container_frames`` against ``decoded_frames`` says which),
        ``length_known`` False (MPEG-TS / raw streams: :data:`NO_LENGTH_FORMATS`) with
        ``last_frame_concealed`` (its last frame decoded with concealed errors, as a cut
        file's last frame does)."""
        log, out = self.packets, {}
        if log.discarded:
            out["preroll_frames"] = log.discarded
        if log.corrupt:
            out["corrupt_packets"] = log.corrupt
        if log.cut:
            out["truncation"] = log.cut
        if self.count_mismatch:
            out["container_count_mismatch"] = self.count_mismatch
        if self.formats & NO_LENGTH_FORMATS:
            out["length_known"] = False
            if self.complete and self.last_concealed:
                out["last_frame_concealed"] = True
        return out


def size_text(hw: Tuple[int, int]) -> str:
    """(H, W) -> "WxH" (how frame sizes are written in messages)."""
    return f"{hw[1]}x{hw[0]}"


def timestamp_gap_count(pts, codec: str = "") -> Tuple[int, int]:
    """(gaps, missing) of increasing timestamps / frame numbers ``pts``: with the unit taken as
    the median step, a step longer than 1.5 units is a gap of round(step / unit) - 1 missing
    values; (0, 0) for fewer than three values, a codec of ``VARIABLE_RATE_CODECS`` or steps
    that :func:`variable_rate` calls variable."""
    steps = timestamp_steps(pts)
    if steps.size < 2 or codec in VARIABLE_RATE_CODECS or variable_rate(steps):
        return 0, 0
    big = steps > _LONG_STEP
    return int(big.sum()), int(np.rint(steps[big]).sum() - big.sum())


def out_of_order(pts: List[int]) -> bool:
    """Whether the decoder returned frames out of timestamp order."""
    return bool(len(pts) > 1 and (np.diff(np.asarray(pts, dtype=np.float64)) < 0).any())


def timestamp_steps(pts: List[int]) -> np.ndarray:
    """Steps between consecutive distinct timestamps, in frame durations (the median step);
    empty for fewer than two distinct timestamps."""
    diffs = np.diff(np.sort(np.asarray(pts, dtype=np.float64)))
    diffs = diffs[diffs > 0]
    if diffs.size == 0:
        return diffs
    return diffs / float(np.median(diffs))


def variable_rate(steps: np.ndarray, codec: str = "") -> bool:
    """Whether ``steps`` (:func:`timestamp_steps`) are those of a variable-frame-rate stream,
    where a long step is a longer frame, not missing frames: for a codec of
    ``VARIABLE_RATE_CODECS``, any step off the median; else long steps (> 1.5 durations) that
    are not rare (at least two, and more than 20 % of the steps), or a step more than 0.25
    durations off a whole multiple of the duration (a constant-rate stream with dropped frames
    keeps its steps on that grid), or a run of ``_RATE_RUN`` consecutive long steps of the same
    whole number of durations (:func:`rate_change`)."""
    if steps.size < 2:
        return False
    off_grid = np.abs(steps - np.maximum(np.rint(steps), 1.0)) > _GRID_TOLERANCE
    long = steps > _LONG_STEP
    if codec in VARIABLE_RATE_CODECS:
        return bool(long.any() or off_grid.any())
    return bool(off_grid.any() or (long.sum() >= 2 and long.mean() > _MAX_LONG_FRACTION)
                or rate_change(steps))


def rate_change(steps: np.ndarray) -> bool:
    """Whether ``steps`` (:func:`timestamp_steps`, (N,) in frame durations) hold a run of at
    least ``_RATE_RUN`` consecutive long steps (> 1.5 durations) that are the same whole
    number of durations: the capture rate changed for a while (a phone camera that halves its
    rate in low light), which frames dropped from a constant-rate capture, scattered, rarely
    look like."""
    multiple = np.where(steps > _LONG_STEP, np.rint(steps), 0.0)
    if int(np.count_nonzero(multiple)) < _RATE_RUN:
        return False
    starts = np.concatenate(([0], np.flatnonzero(np.diff(multiple) != 0) + 1))
    lengths = np.diff(np.concatenate((starts, [multiple.size])))
    return bool(((lengths >= _RATE_RUN) & (multiple[starts] > 0)).any())


def _decoded_for(container, stream, threads: int) -> Decoded:
    """An empty :class:`Decoded` with what the container says of ``stream`` (and, for an APNG,
    the frame count of its ``acTL`` chunk: :func:`apng_frame_count`)."""
    announced = int(stream.frames) or None
    tb = getattr(stream, "time_base", None)
    codec = stream.codec_context.name
    header = (apng_frame_count(str(container.name))
              if codec == "apng" and announced is None else None)
    return Decoded(container_frames=announced, fps=stream_fps(stream),
                   codec=codec, time_base=float(tb) if tb else None,
                   stream_end=None if announced else _stream_end(container, stream),
                   stream_index=int(getattr(stream, "index", 0) or 0),
                   video_streams=len(container.streams.video), threads=int(threads),
                   stream_color=stream_color_codes(stream), header_frames=header,
                   formats=format_names(container))


def decode_selected(path: Path, selection: Optional[FrameSelection],
                    plan: Optional[Callable[[int, int], Callable]] = None,
                    sink: Optional[Callable[[np.ndarray], None]] = None,
                    motion: Optional[FrameMotion] = None,
                    threads: int = DECODE_THREADS, max_keep: Optional[int] = None) -> Decoded:
    """Decode ``path`` frame by frame, converting only the frames ``selection`` keeps.

    Args:
        selection: which source frames to keep; None keeps nothing (count only).
        plan: called once with the first frame's (H, W); returns the per-frame converter
            ``(H, W, 3) uint8 -> (h, w, 3) uint8`` (the working-resolution resize). Unselected
            frames are never converted to RGB (except those ``motion`` samples).
        sink: when given, each converted frame is handed to it instead of being kept in
            ``Decoded.images`` (streaming: nothing of the clip stays in memory).
        motion: fed every kept frame at native resolution before it is converted (and the
            frames it samples, :meth:`FrameMotion.wants`), so the eager and streamed reads of a
            file measure the same statistic (:mod:`geocon_torch.io.sampling`).
        threads: decoder threads (a damaged stream needs :data:`DAMAGED_DECODE_THREADS` for
            repeatable pixels: :func:`decode_stable` decodes it again).
        max_keep: without ``sink``, the most frames ``Decoded.images`` may hold: the frame
            after them stops decoding, the images are dropped and ``Decoded.overflowed`` is
            set (the caller reads the file streamed instead); None: no limit.

    Raises:
        VideoReadError: unreadable file, or no frame could be decoded.
    """
    container, stream = open_video(path, threads)
    out = _decoded_for(container, stream, threads)
    convert = None
    try:
        stopped = False
        frames = iter_frames(container, stream, out.errors)
        out.packets = getattr(frames, "packets", out.packets)
        for frame in frames:
            i = out.note(frame)
            if selection is None or not selection.keeps(i, len(out.indices)):
                if selection is not None and selection.finished(i, len(out.indices)):
                    stopped = True
                    break
                if motion is not None and motion.wants(i):
                    motion.add(i, display_rgb(frame), kept=False)
                continue
            if sink is None and max_keep is not None and len(out.images) >= max_keep:
                out.images.clear()  # more frames than the limit: the caller streams them
                out.overflowed = stopped = True
                break
            if convert is None:
                convert = plan(*out.source_size) if plan else (lambda a: a)
            rgb, partial = composite_rgb(frame)
            out.transparency.add(rgb, partial)
            if motion is not None:
                motion.add(i, rgb, kept=True)
            image = convert(rgb)
            if sink is None:
                out.images.append(image)
            else:
                sink(image)
            out.indices.append(i)
            if selection.finished(i, len(out.indices)):
                stopped = True
                break
        out.complete = not stopped
        reorders = bool(getattr(stream.codec_context, "has_b_frames", False))
        if (stopped and reorders and threads != DAMAGED_DECODE_THREADS and not out.damaged
                and not out.overflowed):
            out.packets = dataclasses.replace(out.packets)  # not the look-ahead's packets
            out.damage_ahead = _damage_ahead(frames, out.errors)
    finally:
        container.close()
    if out.decoded == 0:
        why = f" ({out.errors[0]})" if out.errors else ""
        raise VideoReadError(f"{path}: 0 frames could be decoded{why}; the file is empty, "
                             f"truncated before the first frame, or not a video")
    if out.short_by() and _cut_evidence(out, path) is None:
        out.count_mismatch = out.short_by()
    elif out.over_by():
        out.count_mismatch = out.over_by()
    return out


def _cut_evidence(dec: Decoded, path: Path) -> Optional[str]:
    """What shows that a complete decode that fell short of the container's count lost frames
    (the file was cut, or the decoder dropped frames); None when nothing does, so the
    container's count is wrong (a complete AVI whose header over-counts). Evidence: a decode
    error, a packet flagged corrupt, a cut GIF, more packets than frames decoded, packets with
    no known position (nothing can be checked), the stream's data running to the end of the
    file, or a top-level box / chunk running past it (:func:`structure_runs_past_end`: an mp4
    or AVI cut where its audio was)."""
    log = dec.packets
    if dec.errors:
        return "decode errors"
    if log.corrupt or log.cut:
        return log.cut or "packets flagged corrupt"
    if log.packets > dec.decoded + _COUNT_SLACK:
        return "packets the decoder dropped"
    try:
        size = os.path.getsize(path)
    except OSError:
        return "a file that cannot be measured"
    if log.end is None or log.end >= size:
        return "data that runs to the end of the file"
    if structure_runs_past_end(path, dec.formats):
        return "a container structure that runs past the end of the file"
    return None


def _damage_ahead(frames: Iterator, errors: List[str]) -> bool:
    """Whether any of the next ``_LOOKAHEAD`` ``frames`` is flagged as decoded with concealed
    errors or fails to decode; what it appends to ``errors`` is taken out again (those frames
    are not part of the decode)."""
    before = len(errors)
    corrupt = any(getattr(f, "is_corrupt", False) for f in itertools.islice(frames, _LOOKAHEAD))
    failed = len(errors) > before
    del errors[before:]
    return corrupt or failed


def decode_stable(path: Path, selection: Optional[FrameSelection],
                  start: Callable[[], Tuple[Optional[Callable[[int, int], Callable]],
                                            Optional[Callable[[np.ndarray], None]],
                                            Optional[FrameMotion]]],
                  max_keep: Optional[int] = None) -> Decoded:
    """:func:`decode_selected` on :data:`DECODE_THREADS` threads, and again on
    :data:`DAMAGED_DECODE_THREADS` when the stream turns out damaged (:attr:`Decoded.damaged`),
    so the same file gives the same pixels on every machine and every run. ``start()`` returns
    fresh ``(plan, sink, motion)`` consumers for each decode (a second decode must not add to
    what the first one fed them). ``Decoded.threads`` says which count the frames come from:
    a later re-read (:class:`~geocon_torch.io.framestore.VideoFrames`) must use the same.
    ``max_keep``: as in :func:`decode_selected`; a decode stopped by it is returned as is."""
    threads = DECODE_THREADS
    while True:
        plan, sink, motion = start()
        dec = decode_selected(path, selection, plan, sink, motion, threads=threads,
                              max_keep=max_keep)
        if threads == DAMAGED_DECODE_THREADS or not dec.damaged or dec.overflowed:
            return dec
        del dec  # its frames: not held while the stream is decoded again
        threads = DAMAGED_DECODE_THREADS
