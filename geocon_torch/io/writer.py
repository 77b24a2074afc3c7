"""Writing clips to disk (mp4 via PyAV, or PNG folders).

Video and gif files, and each PNG of an image folder, are written atomically
(:func:`~geocon_torch.io._atomic.atomic_output`): an interrupted write leaves the previous file
or none, never a playable fragment."""
from __future__ import annotations

from pathlib import Path
from typing import Union

import numpy as np
import torch

from ..errors import ShapeError
from ._atomic import atomic_output


def _to_uint8_thwc(frames: torch.Tensor) -> np.ndarray:
    if frames.ndim != 4 or frames.shape[1] not in (1, 3):
        raise ShapeError(f"frames must be (T, 3, H, W) or (T, 1, H, W), got {tuple(frames.shape)}")
    if frames.is_floating_point():
        frames = (frames.clamp(0, 1) * 255).round()
    arr = frames.to(torch.uint8).permute(0, 2, 3, 1).cpu().numpy()
    if arr.shape[-1] == 1:
        arr = np.repeat(arr, 3, axis=-1)
    return np.ascontiguousarray(arr)


def _video_frames(frames: torch.Tensor) -> np.ndarray:
    """:func:`_to_uint8_thwc` of a video's frames: (T, H, W, 3) uint8 with T >= 1 (an encoder
    given no frame writes no file)."""
    arr = _to_uint8_thwc(frames)
    if len(arr) == 0:
        raise ShapeError(f"a video needs at least one frame, got {tuple(frames.shape)}")
    return arr


def write_video(path: Union[str, Path], frames: torch.Tensor, fps: float = 24.0,
                crf: int = 12, codec: str = "libx264", faststart: bool = False) -> Path:
    """Write (T, 3, H, W) uint8 (or float in [0, 1]) RGB frames as an H.264 mp4 (or with
    another ``codec`` into the container the suffix names: "libvpx" -> .webm, "mpeg4" -> .avi,
    "ffv1" -> .mkv).

    Width and height must be even for yuv420p; a low ``crf`` (default 12) keeps the texture that
    feature detectors need. ``faststart`` puts the index (moov atom) before the data, so players
    can start before the download ends (and a file cut short still decodes its first part).
    The same frames give the same bytes (the same content hash) on every run. The file appears
    complete or not at all: it is encoded under a hidden temporary name beside ``path`` and
    moved onto ``path`` after the last packet (Ctrl-C / an error keeps what ``path`` was).

    Args:
        path: the file to write (parent folders are created; its suffix names the container).
        frames: (T, 3, H, W) or (T, 1, H, W) (gray, repeated to RGB) uint8, or float in [0, 1]
            (clamped, ``round(x * 255)``); any device.
        fps: frame rate, frames per second.
        crf: encoder quality (constant rate factor; lower = better, 0 lossless for x264).
        codec: PyAV / FFmpeg encoder name ("libx264", "libvpx", "mpeg4", "ffv1", ...).
        faststart: put the moov atom first (mp4).
    Returns:
        ``path`` as a Path.
    Raises:
        ShapeError: frames not (T, 3|1, H, W), no frame (T = 0), or an odd width / height.
    """
    import av

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = _video_frames(frames)
    t, h, w, _ = arr.shape
    if h % 2 or w % 2:
        raise ShapeError(f"mp4 (yuv420p) needs even width and height, got {w}x{h}")
    from fractions import Fraction

    options = {"movflags": "faststart"} if faststart else {}
    with atomic_output(path) as tmp, av.open(str(tmp), mode="w", options=options) as container:
        stream = container.add_stream(codec, rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = w, h, "yuv420p"
        # x264's macroblock tree gave other bytes from run to run for the same frames
        no_mbtree = {"x264-params": "mbtree=0"} if codec == "libx264" else {}
        stream.options = {"crf": str(crf), "preset": "veryfast", **no_mbtree}
        for i in range(t):
            for packet in stream.encode(av.VideoFrame.from_ndarray(arr[i], format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_gif(path: Union[str, Path], frames: torch.Tensor, fps: float = 10.0) -> Path:
    """Write RGB frames as an animated gif (PyAV's gif encoder, 8-bit palette per frame, so
    colours are quantised), atomically as :func:`write_video`.

    Args:
        path: the file to write (parent folders are created).
        frames: (T, 3, H, W) or (T, 1, H, W) uint8, or float in [0, 1]; any device.
        fps: frame rate, frames per second.
    Returns:
        ``path`` as a Path.
    Raises:
        ShapeError: frames not (T, 3|1, H, W), or no frame (T = 0).
    """
    import av
    from fractions import Fraction

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = _video_frames(frames)
    with atomic_output(path) as tmp, av.open(str(tmp), mode="w") as container:
        stream = container.add_stream("gif", rate=Fraction(fps).limit_denominator(1001))
        stream.width, stream.height, stream.pix_fmt = arr.shape[2], arr.shape[1], "rgb8"
        for frame in arr:
            image = av.VideoFrame.from_ndarray(frame, format="rgb24").reformat(format="rgb8")
            for packet in stream.encode(image):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def write_image_folder(folder: Union[str, Path], frames: torch.Tensor, prefix: str = "") -> Path:
    """Write frames as ``{prefix}{i:05d}.png`` in ``folder`` (lossless 8-bit RGB PNGs).

    Args:
        folder: the folder to write into (created when missing).
        frames: (T, 3, H, W) or (T, 1, H, W) uint8, or float in [0, 1]; any device.
        prefix: file-name prefix before the 5-digit frame number.
    Returns:
        ``folder`` as a Path.
    Raises:
        ShapeError: frames not (T, 3|1, H, W).
        OSError: a frame's PNG could not be written (a full disk, a quota, a file-size limit),
            naming that frame's file; each PNG is written atomically (complete or absent),
            the frames before it stay written.
    """
    import cv2

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    for i, frame in enumerate(_to_uint8_thwc(frames)):
        path = folder / f"{prefix}{i:05d}.png"
        ok, png = cv2.imencode(".png", frame[..., ::-1])  # the bytes cv2.imwrite writes
        if not ok:  # not expected of uint8 (H, W, 3|1) frames
            raise ShapeError(f"{path}: OpenCV could not encode frame {i} "
                             f"{tuple(frame.shape)} as PNG")
        with atomic_output(path) as tmp:  # imwrite's failed write only returns False
            tmp.write_bytes(png.tobytes())
    return folder
