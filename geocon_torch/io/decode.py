"""Streaming decode through PyAV: open a file safely, iterate its frames packet by packet, keep
only the selected ones, resized to the working resolution as soon as they are decoded.

No raw ``av`` exception leaves this module: opening failures become VideoReadError, decode errors
after the first frame are recorded (the clip is then flagged truncated) and decoding stops.

Frames missing between timestamps are inferred only for a constant-frame-rate stream with a few
gaps; a variable-frame-rate stream (gif / animated WebP / APNG, whose frame durations vary by
design, or a stream whose long steps are not rare or not whole multiples of the frame duration)
is flagged ``variable_frame_rate`` instead and nothing is inferred from its timestamps. An
animated WebP, which PyAV cannot decode, is read with PIL (:class:`~.images.AnimatedWebP`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Tuple

import numpy as np

from ..errors import VideoReadError
from .images import AnimatedWebP, webp_durations
from .sampling import FrameMotion, FrameSelection

#: Consecutive packet decode errors after which decoding gives up.
_MAX_ERRORS = 8
#: A complete decode that yields more than this many frames fewer than the container announced
#: is reported as truncated (containers are sometimes off by one, e.g. edit lists).
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


def check_file(path: Path) -> Path:
    """Raise VideoReadError for a missing or zero-byte file; return the path."""
    if not path.exists():
        raise VideoReadError(f"{path}: no such file or folder")
    if path.is_file() and path.stat().st_size == 0:
        raise VideoReadError(f"{path}: the file is empty (0 bytes)")
    return path


def open_video(path: Path):
    """Open ``path`` with PyAV and return ``(container, video_stream)``.

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
    stream = container.streams.video[0]
    stream.thread_type = "AUTO"
    return container, stream


def stream_fps(stream) -> Optional[float]:
    """Frames per second reported by the stream (average, else guessed, else base rate)."""
    for rate in (stream.average_rate, stream.guessed_rate, stream.base_rate):
        if rate is not None and float(rate) > 0:
            return float(rate)
    return None


def iter_frames(container, stream, errors: List[str]) -> Iterator:
    """Yield decoded ``av.VideoFrame`` objects, packet by packet, until the end of the stream or
    until decoding fails ``_MAX_ERRORS`` times in a row; the error messages go to ``errors``."""
    import av

    if isinstance(container, AnimatedWebP):
        yield from container.decode_frames(errors)
        return
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
        try:
            frames = packet.decode()
        except av.FFmpegError as exc:
            errors.append(f"decode: {exc}")
            failures += 1
            continue
        failures = 0
        yield from frames
    errors.append(f"gave up after {_MAX_ERRORS} consecutive decode errors")


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
        source_size: (H, W) of the first decoded frame.
        container_frames: frame count the container announces (None when it has none).
        codec, fps: stream codec name and frames per second (None when unknown).
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
        steps = timestamp_steps(self.pts)
        if not self.complete and out_of_order(self.pts):
            return 0, 0
        if steps.size < 2 or self.codec in VARIABLE_RATE_CODECS or variable_rate(steps):
            return 0, 0
        big = steps > _LONG_STEP
        return int(big.sum()), int(np.rint(steps[big]).sum() - big.sum())

    @property
    def truncated(self) -> bool:
        """Decoding hit an error, or a full decode fell short of the container's count."""
        short = (self.complete and self.container_frames is not None
                 and self.decoded < self.container_frames - _COUNT_SLACK)
        return bool(self.errors) or short

    def metadata(self, path: Path) -> Dict[str, object]:
        gaps, missing = self.timestamp_gaps
        return {
            "path": str(path), "codec": self.codec, "source_fps": self.fps,
            "container_frames": self.container_frames,
            "decoded_frames": self.decoded, "decode_complete": self.complete,
            "num_source_frames": self.decoded if self.complete else self.container_frames,
            "truncated": self.truncated, "decode_errors": self.errors[:5],
            "num_decode_errors": len(self.errors), "timestamp_gaps": gaps,
            "timestamp_missing_frames": missing,
            "variable_frame_rate": self.variable_frame_rate,
        }


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
    keeps its steps on that grid)."""
    if steps.size < 2:
        return False
    off_grid = np.abs(steps - np.maximum(np.rint(steps), 1.0)) > _GRID_TOLERANCE
    long = steps > _LONG_STEP
    if codec in VARIABLE_RATE_CODECS:
        return bool(long.any() or off_grid.any())
    return bool(off_grid.any() or (long.sum() >= 2 and long.mean() > _MAX_LONG_FRACTION))


def decode_selected(path: Path, selection: Optional[FrameSelection],
                    plan: Optional[Callable[[int, int], Callable]] = None,
                    sink: Optional[Callable[[np.ndarray], None]] = None,
                    motion: Optional[FrameMotion] = None) -> Decoded:
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

    Raises:
        VideoReadError: unreadable file, or no frame could be decoded.
    """
    container, stream = open_video(path)
    out = Decoded(container_frames=int(stream.frames) or None, fps=stream_fps(stream),
                  codec=stream.codec_context.name)
    convert = None
    try:
        stopped = False
        for frame in iter_frames(container, stream, out.errors):
            i = out.decoded
            out.decoded += 1
            if frame.pts is not None:
                out.pts.append(int(frame.pts))
            if out.source_size is None:
                out.source_size = (int(frame.height), int(frame.width))
            if selection is None or not selection.keeps(i, len(out.indices)):
                if selection is not None and selection.finished(i, len(out.indices)):
                    stopped = True
                    break
                if motion is not None and motion.wants(i):
                    motion.add(i, frame.to_ndarray(format="rgb24"), kept=False)
                continue
            if convert is None:
                convert = plan(*out.source_size) if plan else (lambda a: a)
            rgb = frame.to_ndarray(format="rgb24")
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
    finally:
        container.close()
    if out.decoded == 0:
        why = f" ({out.errors[0]})" if out.errors else ""
        raise VideoReadError(f"{path}: 0 frames could be decoded{why}; the file is empty, "
                             f"truncated before the first frame, or not a video")
    return out
