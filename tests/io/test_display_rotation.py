"""A video's display rotation (a phone's portrait clip: a display matrix on the stream) is applied
when frames are decoded, as a player, FFmpeg and OpenCV show it, on every read path."""
from pathlib import Path
from typing import Optional

import numpy as np
import pytest
import torch
from helpers import encode_rgb

from geocon_torch.io import probe_video, read_clip
from geocon_torch.io.frame_rgb import display_turns

av = pytest.importorskip("av")

H, W, T = 48, 64, 6


def _frames() -> np.ndarray:
    """(T, H, W, 3) uint8: a white block in the top-left corner, a grey column that moves."""
    out = np.zeros((T, H, W, 3), np.uint8)
    out[:, :10, :20] = 255
    for i in range(T):
        out[i, :, 30 + i] = 128
    return out


def _write(path: Path, rotation: Optional[int]) -> Path:
    return encode_rgb(path, list(_frames()), rate=10, rotation=rotation)


@pytest.fixture(scope="module")
def videos(tmp_path_factory):
    d = tmp_path_factory.mktemp("rot")
    return {r: _write(d / f"rot_{r}.mp4", r) for r in (None, 90, -90, 180)}


@pytest.mark.parametrize("rotation,turns", [(90, 1), (-90, 3), (180, 2)])
@pytest.mark.parametrize("stream", [False, True])
def test_frames_are_turned_to_display_orientation(videos, rotation, turns, stream):
    plain = read_clip(videos[None], long_side=None).frames
    clip = read_clip(videos[rotation], long_side=None, stream=stream)
    frames = clip.frames[list(range(T))] if stream else clip.frames
    # the same pictures, turned counterclockwise by the display matrix's angle
    assert torch.equal(frames, torch.rot90(plain, turns, dims=(2, 3)))
    assert tuple(clip.source_size) == ((W, H) if turns % 2 else (H, W))
    # the angle as FFmpeg reads it back (in [-180, 180]: 180 may come back as -180)
    assert abs((clip.meta["display_rotation"] - rotation + 180) % 360 - 180) < 1e-6


def test_white_corner_lands_where_a_player_shows_it(videos):
    # 90 degrees counterclockwise: the coded top-left block is at the bottom-left when shown
    f = read_clip(videos[90], long_side=None).frames[0, 0]
    rows, cols = (f > 200).nonzero(as_tuple=True)
    assert (int(rows.min()), int(rows.max()), int(cols.min()), int(cols.max())) == (44, 63, 0, 9)


def test_an_unrotated_video_is_unchanged(videos):
    clip = read_clip(videos[None], long_side=None)
    assert clip.meta["display_rotation"] == 0.0
    block = clip.frames[0, 0, :10, :20].float()
    assert block.min() > 200 and tuple(clip.source_size) == (H, W)


@pytest.mark.parametrize("exact", [True, False])
def test_probe_reports_the_displayed_size(videos, exact):
    assert (lambda i: (i.height, i.width))(probe_video(videos[90], exact=exact)) == (W, H)
    assert (lambda i: (i.height, i.width))(probe_video(videos[180], exact=exact)) == (H, W)


def test_working_size_follows_the_displayed_long_side(videos):
    clip = read_clip(videos[-90], long_side=32)
    assert tuple(clip.frames.shape[-2:]) == (32, 24)  # portrait: the long side is the height


class _Frame:
    def __init__(self, rotation):
        self.rotation = rotation


@pytest.mark.parametrize("angle,turns", [(0, 0), (90, 1), (-90, 3), (180, 2), (-180, 2),
                                         (89.5, 1), (270, 3), (45, 0), (None, 0)])
def test_display_turns(angle, turns):
    assert display_turns(_Frame(angle)) == turns
    assert display_turns(object()) == 0  # a frame without a display matrix (animated WebP)
