"""Video metadata without keeping frames: fps, frame count, size, codec."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional, Union

from ..errors import VideoReadError
from .decode import (check_file, decode_selected, display_size, iter_frames, open_video,
                     stream_fps)
from .images import list_images, read_image


@dataclass(frozen=True)
class VideoInfo:
    """What :func:`probe_video` learns about a source.

    Attributes:
        path: the file or folder.
        fps: frames per second reported by the container (None when it has no rate, e.g. an
            image folder).
        num_frames: the number of frames that actually decode (``counted == "decoded"``), or the
            container's count when it was trusted (``exact=False``), or the number of image files.
        height, width: source frame size in px, as a player shows it (a display rotation by a
            quarter turn swaps the coded height and width: :func:`~.decode.display_rgb`).
        codec: decoder name ("h264", "gif", ...; "images" for a folder).
        container_frames: the count the container announces (None when it has none). It can be
            wrong: ``real/box.mp4`` announces 456 frames and 455 decode (its edit list
            discards one, ``meta["preroll_frames"]``).
        duration_s: container duration in seconds (None when unknown).
        counted: "decoded", "container" or "files": where ``num_frames`` comes from.
        truncated: decoding hit an error, the demuxer flagged a packet corrupt, a GIF lacks its
            trailer, or decoding fell short of the announced count (less edit-list preroll) with
            evidence of a cut (:attr:`~.decode.Decoded.truncated`).
    """

    path: str
    fps: Optional[float]
    num_frames: int
    height: int
    width: int
    codec: str
    container_frames: Optional[int] = None
    duration_s: Optional[float] = None
    counted: str = "decoded"
    truncated: bool = False


def probe_video(path: Union[str, Path], *, exact: bool = True) -> VideoInfo:
    """Metadata of a video file, gif or image folder.

    Args:
        path: video file (mp4, webm, avi, mkv, mov, gif, ...) or folder of images.
        exact: count frames by decoding them (no RGB conversion, nothing kept). With
            ``exact=False`` the container's count is trusted when it has one (fast, but some
            containers are off, and webm / gif often report none, which falls back to decoding):
            an mp4 / mov trimmed by stream copy counts the preroll frames its edit list
            discards (only demuxing tells them), and an AVI header can over-count.

    Raises:
        VideoReadError: missing, empty, unreadable or frameless input.
    """
    path = check_file(Path(path))
    if path.is_dir():
        files = list_images(path)
        h, w = read_image(files[0]).shape[:2]
        return VideoInfo(str(path), None, len(files), h, w, "images", counted="files")
    container, stream = open_video(path)
    try:
        announced = int(stream.frames) or None
        fps = stream_fps(stream)
        codec = stream.codec_context.name
        height, width = int(stream.codec_context.height), int(stream.codec_context.width)
        duration = (float(container.duration) / 1e6) if container.duration else None
        if not exact and announced:  # the display rotation is on the frames: read the first
            first = next(iter_frames(container, stream, []), None)
            height, width = display_size(first) if first is not None else (height, width)
    finally:
        container.close()
    if not exact and announced:
        if not (height and width):
            raise VideoReadError(f"{path}: the video stream reports no frame size")
        return VideoInfo(str(path), fps, announced, height, width, codec, announced, duration,
                         counted="container")
    dec = decode_selected(path, None)
    height, width = dec.source_size
    return VideoInfo(str(path), fps, dec.decoded, height, width, codec, announced, duration,
                     counted="decoded", truncated=dec.truncated)
