"""Behaviour of the io readers that no other default test pins (mutation audit s25): the
defaults and names of ``read_clips``, the order of explicit indices in a streamed video, the
container's frame rate against the ``fps`` argument, an empty batch, the sampled motion of
files (frames read only for it), the metadata and probe of image folders (every file a frame,
every name listed, an empty or two-frame animated image), the timestamp grid rule for steps
far under one frame, the variable-rate rule for two steps, the latest end of reordered frames,
a zero average rate and animated WebP files (two frames, start times, odd-size chunks).
Closed-form inputs: synthetic tensors, fake frames and streams, small PNG folders, a small
mpeg4 mp4 and animated WebP / APNG files, all made here."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from helpers import encode_rgb
from PIL import Image

from geocon_torch.io import (clip_from_tensor, clips_from_tensor, probe_video, read_clip,
                             read_clips)
from geocon_torch.io.decode import Decoded, timestamp_gap_count, timestamp_steps, variable_rate

H, W, T = 16, 24, 9


def _noise(n: int = T, seed: int = 11) -> np.ndarray:
    """(n, H, W, 3) uint8: a different noise picture per frame."""
    return np.random.default_rng(seed).integers(0, 256, (n, H, W, 3), dtype=np.uint8)


@pytest.fixture(scope="module")
def movie(tmp_path_factory) -> Path:
    """T frames of H x W noise, mpeg4 (no B-frames) at 24 fps."""
    return encode_rgb(tmp_path_factory.mktemp("m11") / "clip.mp4", list(_noise()), "mpeg4")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """T lossless PNG frames f_1.png .. f_9.png of :func:`_noise` (RGB)."""
    path = tmp_path_factory.mktemp("m11") / "frames"
    path.mkdir()
    for k, rgb in enumerate(_noise(), start=1):
        assert cv2.imwrite(str(path / f"f_{k}.png"), rgb[..., ::-1])
    return path


# ------------------------------------------------------------------ read_clips

def test_a_batch_in_read_clips_is_read_at_1024_px_as_read_clip():
    """``read_clips`` of a (B, T, C, H, W) tensor has read_clip's default long side, 1024."""
    x = torch.zeros(1, 2, 3, 16, 32, dtype=torch.uint8)
    (clip,) = read_clips(x)
    assert tuple(clip.frames.shape) == (2, 3, 512, 1024) and clip.meta["long_side"] == 1024
    assert clip.frames.shape == read_clip(x[0]).frames.shape


def test_read_clips_of_a_list_names_each_clip_by_its_position():
    x = torch.zeros(2, 3, 8, 8, dtype=torch.uint8)
    assert [c.name for c in read_clips([x, x], name="gen", long_side=None)] == ["gen[0]",
                                                                                  "gen[1]"]


# ------------------------------------------------------------------ files

def test_a_streamed_video_keeps_the_order_of_explicit_indices(movie):
    """indices=[5, 1, 5]: the clip's frames are source frames 5, 1, 5 (in that order), as the
    eager read gives them, not the decode order 1, 5."""
    eager = read_clip(movie, long_side=None, indices=[5, 1, 5])
    lazy = read_clip(movie, long_side=None, indices=[5, 1, 5], stream=True)
    assert eager.frame_indices.tolist() == lazy.frame_indices.tolist() == [5, 1, 5]
    assert torch.equal(lazy.frames[:], eager.frames)
    assert torch.equal(eager.frames[0], eager.frames[2])
    assert not torch.equal(eager.frames[0], eager.frames[1])


def test_the_containers_frame_rate_wins_over_the_fps_argument(movie, folder):
    """``fps`` is the rate of sources that carry none: a video keeps its 24 fps (the argument
    is only checked), a folder takes it."""
    clip = read_clip(movie, long_side=None, fps=10, stride=2)
    assert (clip.fps, clip.meta["source_fps"], clip.meta["fps_source"]) == (12.0, 24.0,
                                                                              "container")
    clip = read_clip(folder, long_side=None, fps=10, stride=2)
    assert (clip.fps, clip.meta["source_fps"], clip.meta["fps_source"]) == (5.0, 10.0,
                                                                             "argument")


@pytest.mark.parametrize("source", ["movie", "folder"])
def test_the_sampled_motion_of_a_file_reads_frames_it_does_not_keep(source, request):
    """stride 4, motion_every 3: frames 0, 4, 8 are kept and frames 0, 3, 6 sampled; the
    file's statistic is that of its decoded frames as a tensor (frames 3 and 6 are read only
    for it), eager and streamed."""
    path = request.getfixturevalue(source)
    full = read_clip(path, long_side=None).frames
    want = clip_from_tensor(full, stride=4, motion_every=3).meta["motion"]
    assert want["sampled"]["pairs"] == 2 and want["sampled"]["max_mad"] > 0
    for stream in (False, True):
        got = read_clip(path, long_side=None, stride=4, motion_every=3, stream=stream)
        assert got.meta["motion"] == want


def test_every_file_of_a_folder_is_a_frame_and_every_kept_name_listed(tmp_path):
    """101 files read with stride 1 list all 101 names; with stride 2 the folder still holds
    101 frames (51 kept)."""
    for k in range(101):
        assert cv2.imwrite(str(tmp_path / f"{k:03d}.png"), np.full((4, 4, 3), k, np.uint8))
    clip = read_clip(tmp_path, long_side=None)
    assert clip.meta["files"] == [f"{k:03d}.png" for k in range(101)]
    clip = read_clip(tmp_path, long_side=None, stride=2)
    assert clip.num_frames == 51 and len(clip.meta["files"]) == 51
    m = clip.meta
    assert (m["container_frames"], m["decoded_frames"], m["num_source_frames"]) == (101, 101,
                                                                                    101)


# ------------------------------------------------------------------ tensors

def test_an_empty_batch_is_no_clip():
    """B = 0 (a loader's last shard): no clip, for uint8 and float, gray and RGB."""
    for c in (1, 3):
        assert clips_from_tensor(torch.zeros(0, 3, c, 8, 8, dtype=torch.uint8)) == []
        assert read_clips(torch.zeros(0, 3, c, 8, 8), long_side=4) == []


# ------------------------------------------------------------------ timestamps

def test_a_step_far_under_one_frame_is_off_the_grid():
    """Steps of 1, 1, 3, 0.2, 1, 1, 1 frame durations: 0.2 is 0.8 off the nearest whole
    number of frames that a step can be (1, never 0), so the stream is variable-rate and its
    long step no gap (a lone 0.2 step read as on the grid of 0 frames would count 2 lost)."""
    pts = [0, 10, 20, 50, 52, 62, 72, 82]
    assert variable_rate(timestamp_steps(pts)) is True
    assert timestamp_gap_count(pts) == (0, 0)


def test_two_steps_off_the_grid_are_variable_rate():
    """Timestamps 0, 10, 30: steps of 2/3 and 4/3 of the median, both a third off the grid."""
    assert variable_rate(timestamp_steps([0, 10, 30])) is True
    assert Decoded(pts=[0, 10, 30], codec="h264").variable_frame_rate is True


def test_the_end_of_reordered_frames_is_the_latest_end():
    """Frames returned out of timestamp order (0, 3, 1, 2, each 2 ticks long) end at 5, the
    end of frame 3, not at 4, the end of the last one returned."""
    dec = Decoded()
    for pts in (0, 3, 1, 2):
        dec.note(SimpleNamespace(pts=pts, duration=2, height=H, width=W, rotation=0))
    assert dec.end_pts == 5 and dec.decoded == 4


# ------------------------------------------------------------------ animated WebP

def test_a_two_frame_animated_webp_is_a_two_frame_video(tmp_path):
    """The smallest animation, two frames: read with PIL (PyAV cannot decode it), both frames,
    lossless, at its rate (2 frames in 0.25 s)."""
    rgb = _noise(2)
    path = tmp_path / "two.webp"
    first, second = (Image.fromarray(a) for a in rgb)
    first.save(path, save_all=True, append_images=[second], duration=[100, 150], loop=0,
               lossless=True)
    clip = read_clip(path, long_side=None)
    assert clip.meta["source"] == "video" and clip.fps == 8.0
    info = probe_video(path)
    assert (info.num_frames, info.fps, info.duration_s) == (2, 8.0, 0.25)
    assert torch.equal(clip.frames, torch.from_numpy(rgb).permute(0, 3, 1, 2))


def test_webp_frame_times_start_at_zero(tmp_path):
    """An animated WebP's frame ``pts`` are the start times in ms, the sum of the earlier
    durations: 0, 100, 200, 300 (not the end times), so four 100 ms frames and a 300 ms one
    show a constant rate until the last frame."""
    from geocon_torch.io.images import AnimatedWebP

    path = tmp_path / "five.webp"
    first, *rest = (Image.fromarray(a) for a in _noise(5))
    first.save(path, save_all=True, append_images=rest, duration=[100, 100, 100, 100, 300],
               loop=0, lossless=True)
    anim = AnimatedWebP(path, [100, 100, 100, 100, 300])
    try:
        assert [f.pts for f in anim.decode_frames([])] == [0, 100, 200, 300, 400]
    finally:
        anim.close()
    assert read_clip(path, long_side=None).meta["variable_frame_rate"] is False


def _chunk(kind: bytes, payload: bytes) -> bytes:
    """A RIFF chunk: kind, little-endian size, payload and a pad byte for an odd size."""
    return kind + len(payload).to_bytes(4, "little") + payload + b"\0" * (len(payload) & 1)


def test_webp_chunks_of_odd_size_are_padded(tmp_path):
    """A RIFF chunk of odd size is followed by a pad byte: an ICC profile of 3 bytes before
    the ANIM and ANMF chunks does not hide the frames' durations (100, 150 ms)."""
    from geocon_torch.io.images import webp_durations

    def frame(ms: int) -> bytes:
        return _chunk(b"ANMF", bytes(12) + ms.to_bytes(3, "little") + b"\0")

    body = (b"WEBP" + _chunk(b"VP8X", bytes(10)) + _chunk(b"ICCP", b"abc")
            + _chunk(b"ANIM", bytes(6)) + frame(100) + frame(150))
    path = tmp_path / "odd.webp"
    path.write_bytes(b"RIFF" + len(body).to_bytes(4, "little") + body)
    assert webp_durations(path) == [100, 150]


# ------------------------------------------------------------------ image folders

def test_probe_of_a_folder_gives_height_then_width(folder):
    info = probe_video(folder)
    assert (info.num_frames, info.height, info.width, info.counted) == (T, H, W, "files")


def test_an_empty_image_file_in_a_folder_is_named_empty(tmp_path):
    """A zero-byte image inside a folder (the folder itself passes the file check) is a
    VideoReadError that says so, before any decoder sees it."""
    from geocon_torch.errors import VideoReadError

    assert cv2.imwrite(str(tmp_path / "1.png"), np.zeros((4, 4, 3), np.uint8))
    (tmp_path / "2.png").write_bytes(b"")
    with pytest.raises(VideoReadError, match=r"2\.png: the image file is empty \(0 bytes\)$"):
        read_clip(tmp_path, long_side=None)


def test_a_two_frame_apng_is_no_still_image(tmp_path):
    """An APNG of two frames is a video when read alone (both frames) and an error inside a
    folder of still frames (its second frame would be lost)."""
    from geocon_torch.errors import VideoReadError

    first, second = (Image.fromarray(a) for a in _noise(2))
    path = tmp_path / "anim" / "1.png"
    path.parent.mkdir()
    first.save(path, save_all=True, append_images=[second], duration=[100, 100], loop=0)
    clip = read_clip(path, long_side=None)
    assert clip.num_frames == 2 and clip.meta["source"] == "video"
    assert cv2.imwrite(str(path.parent / "2.png"), _noise(1)[0])
    with pytest.raises(VideoReadError, match=r"an animated PNG \(APNG\) with 2 frames"):
        read_clip(path.parent, long_side=None)


def test_a_zero_average_rate_falls_back_to_the_guessed_rate():
    """A stream whose average rate is 0 has none: the guessed rate (30) is its rate, and a
    stream with no positive rate at all has None."""
    from fractions import Fraction

    from geocon_torch.io.decode import stream_fps

    zero = SimpleNamespace(average_rate=Fraction(0), guessed_rate=Fraction(30), base_rate=None)
    assert stream_fps(zero) == 30.0
    none = SimpleNamespace(average_rate=Fraction(0), guessed_rate=None, base_rate=Fraction(0))
    assert stream_fps(none) is None
