"""Video files damaged on purpose, made in the test (shared by the io and pipeline integrity
tests): a clean faststart mp4, a corrupted middle, a cut tail and dropped frames."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Sequence

import av
import numpy as np
import torch

from geocon_torch.io.writer import write_video

T = 48
DROPPED = (10, 11, 12, 30)


def moving_noise(num_frames: int = T) -> torch.Tensor:
    """(T, 3, 64, 96) uint8 random texture translated by 2 px per frame."""
    g = torch.Generator().manual_seed(0)
    base = torch.randint(0, 256, (3, 64, 96), generator=g, dtype=torch.uint8)
    return torch.stack([torch.roll(base, shifts=2 * t, dims=2) for t in range(num_frames)])


def clean_video(path: Path, frames: torch.Tensor) -> Path:
    return write_video(path, frames, fps=24, faststart=True)


def corrupt_middle(clean: Path, path: Path) -> Path:
    """A copy of ``clean`` with the sixth of its bytes after the middle replaced by noise."""
    data = bytearray(clean.read_bytes())
    n = len(data)
    data[n // 2:n // 2 + n // 6] = np.random.default_rng(0).integers(
        0, 256, n // 6, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return path


def truncate_tail(clean: Path, path: Path, keep: float = 0.7) -> Path:
    """The first ``keep`` of ``clean``'s bytes (the moov atom is in front: it still opens)."""
    data = clean.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    return path


def drop_frames(path: Path, frames: torch.Tensor, dropped: Sequence[int] = DROPPED) -> Path:
    """An mp4 of ``frames`` without the ``dropped`` ones, timestamps kept (pts = frame index):
    the container announces only the frames it holds, the gaps show in the timestamps."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = frames.shape[-1], frames.shape[-2], \
            "yuv420p"
        stream.codec_context.time_base = Fraction(1, 24)
        for t in range(frames.shape[0]):
            if t in dropped:
                continue
            frame = av.VideoFrame.from_ndarray(frames[t].permute(1, 2, 0).numpy(), format="rgb24")
            frame.pts = t
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path
