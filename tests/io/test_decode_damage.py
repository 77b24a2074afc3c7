"""Damaged and unusual video files are read the same everywhere and never silently (audit s18,
video findings F1-F5). Every file is built here with PyAV from 24 frames of 96x128 moving
textured noise:

* F1: a Matroska / WebM file cut part-way through (no frame count in the container) counts the
  frames its duration says are missing, as an mp4 with a frame count does;
* F2: damaged data mid-stream gives the same pixels on any number of CPUs (the decoder's thread
  count is fixed; a damaged stream is decoded on one thread), and frames decoded with concealed
  errors are counted and warned about;
* F3: a frame size that changes mid-stream is recorded with a warning;
* F4: a number missing in an image sequence's file names counts as a lost frame;
* F5: the stream read is FFmpeg's best video stream, not a one-frame picture stream in front.
"""
from __future__ import annotations

import hashlib
import io
import os
from fractions import Fraction
from pathlib import Path
from typing import List, Optional

import av
import numpy as np
import pytest

from geocon_torch.io import read_clip
from geocon_torch.io.decode import DAMAGED_DECODE_THREADS, DECODE_THREADS
from geocon_torch.io.frame_rgb import frame_to_ndarray
from geocon_torch.io.images import frame_numbers
from geocon_torch.io.integrity import decode_report, decode_verdict

T, H, W = 24, 96, 128


@pytest.fixture(scope="module")
def frames() -> List[np.ndarray]:
    """T frames (H, W, 3) uint8: smoothed noise (so H.264 predicts it) moving 3 px a frame."""
    import cv2

    base = np.random.default_rng(0).integers(0, 256, (H, W + 3 * T, 3), dtype=np.uint8)
    base = cv2.GaussianBlur(base, (5, 5), 1.0)
    return [np.ascontiguousarray(base[:, 3 * t:3 * t + W]) for t in range(T)]


def _encode(path: Path, frames: List[np.ndarray], codec: str = "libx264",
            options: Optional[dict] = None, pts: Optional[List[int]] = None,
            faststart: bool = False) -> Path:
    """``frames`` encoded at 24 fps (``pts`` in 1/96 s when given: a variable frame rate)."""
    with av.open(str(path), "w", options={"movflags": "faststart"} if faststart else {}) as c:
        s = c.add_stream(codec, rate=24)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        s.options = dict({"threads": "1"}, **(options or {}))
        if pts is not None:
            s.codec_context.time_base = Fraction(1, 96)
        for k, a in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(a, format="rgb24")
            if pts is not None:
                frame.pts, frame.time_base = pts[k], Fraction(1, 96)
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


def _packets(path: Path) -> List[tuple]:
    """(byte position, size) of each video packet of ``path``, in file order."""
    with av.open(str(path)) as c:
        return [(p.pos, p.size) for p in c.demux(video=0) if p.size]


def _cut(path: Path, out: Path, packet: int = 12) -> Path:
    """The bytes of ``path`` before its ``packet``-th video packet (a partial download)."""
    out.write_bytes(path.read_bytes()[:_packets(path)[packet][0]])
    return out


def _report(path: Path, **kwargs) -> dict:
    return decode_report(read_clip(path, long_side=None, **kwargs).meta)


def _pyav_frames(path: Path, threads: int) -> np.ndarray:
    """(T, H, W, 3) uint8: a plain PyAV decode of ``path`` on ``threads`` threads, converted to
    RGB as the reader converts (frame_to_ndarray: swscale's exact flags)."""
    with av.open(str(path)) as c:
        s = c.streams.video[0]
        s.thread_type = "AUTO"
        s.codec_context.thread_count = threads
        return np.stack([frame_to_ndarray(f, "rgb24") for f in c.decode(s)])


def _clip_pixels(path: Path, **kwargs) -> np.ndarray:
    """(T, H, W, 3) uint8 of ``read_clip`` at native size."""
    frames = read_clip(path, long_side=None, **kwargs).frames
    frames = frames.materialize() if hasattr(frames, "materialize") else frames
    return frames.permute(0, 2, 3, 1).numpy()


def _has_encoder(name: str) -> bool:
    try:
        av.codec.Codec(name, "w")
    except Exception:  # noqa: BLE001 - any failure: this PyAV build lacks it
        return False
    return True


# ----------------------------------------------------------------------------------- F1

@pytest.mark.parametrize("suffix,codec", [("mkv", "libx264"), ("webm", "libvpx-vp9")])
def test_cut_matroska_and_webm_count_the_lost_tail(frames, tmp_path, suffix, codec):
    """Was: 11 of 24 frames decode, ``truncated`` False, ``lost_frames`` 0, no warning, status
    ok (Matroska announces no frame count and ends a cut file with a plain end of file)."""
    if not _has_encoder(codec):
        pytest.skip(f"PyAV has no {codec} encoder")
    opts = {"deadline": "realtime", "cpu-used": "8"} if codec == "libvpx-vp9" else None
    full = _encode(tmp_path / f"full.{suffix}", frames, codec, opts)
    cut = _cut(full, tmp_path / f"cut.{suffix}")
    for stream in (False, True):
        r = _report(cut, stream=stream)
        assert r["truncated"] and 6 < r["decoded_frames"] <= 12
        assert r["lost_frames"] == T - r["decoded_frames"]
        assert r["lost_fraction"] == pytest.approx(r["lost_frames"] / T)
        assert r["announced_frames"] is None and r["duration_frames"] == T
        reason, warnings = decode_verdict(r, 0.1)
        assert reason is not None and f"{r['lost_frames']} of {T} frames" in reason
        assert f"{T} frames by the stream's duration" in reason and warnings == []

    r = _report(full)  # the complete file: nothing lost
    assert (r["announced_frames"], r["duration_frames"], r["decoded_frames"]) == (None, T, T)
    assert r["lost_frames"] == 0 and not r["truncated"]
    assert decode_verdict(r, 0.1) == (None, [])


def test_complete_variable_rate_mkv_is_not_truncated(frames, tmp_path):
    """Durations 1, 1, 3, 1, 2, ... frames: the stream's duration (1.5 x T / 24 s) is not
    T frames at the average rate, but its end is where the last frame ends: nothing lost."""
    steps = [4, 4, 12, 4, 8, 4, 4, 16, 4, 6, 4, 8] * 2
    pts = np.concatenate([[0], np.cumsum(steps)[:-1]]).astype(int).tolist()
    r = _report(_encode(tmp_path / "vfr.mkv", frames, pts=pts))
    assert r["variable_frame_rate"] and r["announced_frames"] is None
    assert (r["decoded_frames"], r["duration_frames"], r["lost_frames"]) == (T, T, 0)
    assert not r["truncated"]


def test_audio_longer_than_the_video_is_not_a_lost_tail(frames, tmp_path):
    """The container's duration spans every stream: a 2 s audio track beside 1 s of video must
    not count frames as lost (the video track's own DURATION tag is read)."""
    path = tmp_path / "audio.mkv"
    with av.open(str(path), "w", format="matroska") as c:
        video = c.add_stream("libx264", rate=24)
        video.width, video.height, video.pix_fmt = W, H, "yuv420p"
        audio = c.add_stream("aac", rate=48000)
        tone = np.sin(np.arange(96000) / 48000 * 2 * np.pi * 440).astype(np.float32)[None]
        for k in range(0, 96000, 1024):
            chunk = av.AudioFrame.from_ndarray(np.ascontiguousarray(tone[:, k:k + 1024]),
                                               format="fltp", layout="mono")
            chunk.sample_rate, chunk.pts = 48000, k
            for q in audio.encode(chunk):
                c.mux(q)
        for a in frames:
            for q in video.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(q)
        for stream in (audio, video):
            for q in stream.encode():
                c.mux(q)
    with av.open(str(path)) as c:
        assert c.duration / 1e6 > 1.9  # the container's duration is the audio's
    r = _report(path)
    assert (r["decoded_frames"], r["duration_frames"], r["lost_frames"]) == (T, T, 0)
    assert not r["truncated"]


# ----------------------------------------------------------------------------------- F2

@pytest.fixture(scope="module")
def damaged(frames, tmp_path_factory) -> Path:
    """An mp4 (no B-frames, index in front) with noise over a third of frame 12's data, from a
    quarter in: H.264 conceals the damage, and with frame threads the concealed pixels depend on
    the thread count."""
    clean = _encode(tmp_path_factory.mktemp("dmg") / "clean.mp4", frames, options={"bf": "0"},
                    faststart=True)
    pos, size = _packets(clean)[12]
    data = bytearray(clean.read_bytes())
    start = pos + size // 4
    data[start:start + size // 3] = np.random.default_rng(12).integers(
        0, 256, size // 3, dtype=np.uint8).tobytes()
    out = clean.with_name("damaged.mp4")
    out.write_bytes(bytes(data))
    return out


def test_damaged_stream_pixels_are_those_of_one_decoder_thread(damaged):
    """Was: FFmpeg's automatic thread count (CPUs + 1), whose concealed pixels differ from a
    one-thread decode, so a 1-CPU and a 2-CPU node scored different frames."""
    assert not np.array_equal(_pyav_frames(damaged, 1), _pyav_frames(damaged, 3))  # the hazard
    np.testing.assert_array_equal(_clip_pixels(damaged), _pyav_frames(damaged, 1))
    np.testing.assert_array_equal(_clip_pixels(damaged, stream=True), _pyav_frames(damaged, 1))
    clip = read_clip(damaged, long_side=None)
    assert clip.meta["decode_threads"] == DAMAGED_DECODE_THREADS == 1


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs at least 2 usable CPUs")
def test_damaged_stream_decodes_the_same_on_one_and_on_all_cpus(damaged):
    """The audit's check (``taskset -c 0`` vs ``-c 0,1``), in process: FFmpeg reads the CPU
    affinity when the decoder opens."""
    cpus = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(cpus)})
        one = _clip_pixels(damaged)
    finally:
        os.sched_setaffinity(0, cpus)
    every = _clip_pixels(damaged)
    assert hashlib.md5(one.tobytes()).hexdigest() == hashlib.md5(every.tobytes()).hexdigest()


def test_read_stopping_before_a_damaged_frame_it_depends_on_is_single_threaded(frames, tmp_path):
    """With B-frames, frame 12 is returned before the damaged frame 14 but decoded after it and
    from it: its pixels depend on the thread count although a read of frames up to 12 never
    sees the flag. The reader looks a few frames further and then decodes on one thread."""
    clean = _encode(tmp_path / "b.mp4", frames, faststart=True)  # x264 defaults: B-frames
    pos, size = _packets(clean)[12]
    data = bytearray(clean.read_bytes())
    data[pos + size // 2:pos + size // 2 + size // 3] = np.random.default_rng(12).integers(
        0, 256, size // 3, dtype=np.uint8).tobytes()
    path = tmp_path / "b_damaged.mp4"
    path.write_bytes(bytes(data))
    one, four = _pyav_frames(path, 1), _pyav_frames(path, DECODE_THREADS)
    assert not np.array_equal(one[12], four[12]) and np.array_equal(one[:12], four[:12])
    for opts in ({"indices": [3, 12]}, {"max_frames": 13}, {"indices": [12], "stream": True}):
        clip = read_clip(path, long_side=None, **opts)
        frames_read = clip.frames.materialize() if opts.get("stream") else clip.frames
        np.testing.assert_array_equal(frames_read[-1].permute(1, 2, 0).numpy(), one[12])
        assert clip.meta["decode_threads"] == DAMAGED_DECODE_THREADS
        assert clip.meta["concealed_frames"] == 0 and clip.meta["num_decode_errors"] == 0


def test_concealed_frames_are_counted_and_warned_not_dropped(damaged):
    """Was: FFmpeg's corrupt-frame flag ignored: 0 decode errors, no warning."""
    r = _report(damaged)
    assert r["decoded_frames"] == T and r["lost_frames"] == 0 and r["decode_errors"] == 0
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is None and not r["truncated"] and r.get("concealed_frames") == 1
    assert warnings == ["1 frame(s) decoded with concealed errors (damaged data the decoder "
                        "filled in from neighbouring pixels and frames): scored as decoded"]
    assert read_clip(damaged, long_side=None).meta["concealed_frame_indices"] == [12]


def test_clean_stream_keeps_the_threaded_decode_and_its_pixels(damaged):
    clean = damaged.with_name("clean.mp4")
    clip = read_clip(clean, long_side=None)
    assert clip.meta["decode_threads"] == DECODE_THREADS and clip.meta["concealed_frames"] == 0
    reference = _pyav_frames(clean, 1)
    assert np.array_equal(reference, _pyav_frames(clean, 0))  # FFmpeg's own count
    np.testing.assert_array_equal(_clip_pixels(clean), reference)
    assert decode_verdict(decode_report(clip.meta), 0.1) == (None, [])


# ----------------------------------------------------------------------------------- F3

def _mjpeg_mkv(path: Path, images: List[np.ndarray], rates: tuple = (24,)) -> Path:
    """A Matroska file of one JPEG packet per image (each may have its own size)."""
    from PIL import Image

    with av.open(str(path), "w", format="matroska") as c:
        s = c.add_stream("mjpeg", rate=rates[0])
        s.width, s.height, s.pix_fmt = images[0].shape[1], images[0].shape[0], "yuvj420p"
        for k, a in enumerate(images):
            buf = io.BytesIO()
            Image.fromarray(a).save(buf, "JPEG", quality=90)
            packet = av.Packet(buf.getvalue())
            packet.pts = packet.dts = k
            packet.time_base, packet.stream, packet.is_keyframe = Fraction(1, 24), s, True
            c.mux(packet)
    return path


def test_frame_size_change_is_recorded_and_warned(frames, tmp_path):
    """Was: frames 12.. (96x96) stretched to 128x96 with no record in io / warnings."""
    images = frames[:12] + [np.ascontiguousarray(a[:, 16:112]) for a in frames[12:]]
    path = _mjpeg_mkv(tmp_path / "size.mkv", images)
    for stream in (False, True):
        clip = read_clip(path, long_side=None, stream=stream)
        assert tuple(clip.frames.shape) == (T, 3, H, W)
        r = decode_report(clip.meta)
        reason, warnings = decode_verdict(r, 0.1)
        assert reason is None and len(warnings) == 1
        assert r.get("size_changes") == 1 and r["lost_frames"] == 0
        assert r["first_size_change"] == {"frame": 12, "from": "128x96", "to": "96x96"}
        assert clip.meta["frame_sizes"] == ["128x96", "96x96"]
        assert warnings[0].startswith("frame size changed from 128x96 to 96x96 at frame 12 (1 "
                                      "change(s)): frames of another size are resized to 128x96")


# ----------------------------------------------------------------------------------- F4

def _png_folder(folder: Path, frames: List[np.ndarray], names: List[str]) -> Path:
    import cv2

    folder.mkdir()
    for k, name in enumerate(names):
        cv2.imwrite(str(folder / name), frames[k][..., ::-1])
    return folder


def test_missing_number_in_an_image_sequence_is_a_lost_frame(frames, tmp_path):
    """Was: frame_0003.png -> frame_0005.png read as adjacent frames, 0 lost, no warning."""
    names = [f"frame_{i:04d}.png" for i in range(10) if i != 4]
    folder = _png_folder(tmp_path / "gap", frames, names)
    for opts in ({}, {"stride": 2}):
        r = _report(folder, **opts)
        assert (r["decoded_frames"], r["timestamp_gaps"], r["lost_frames"]) == (9, 1, 1)
        reason, warnings = decode_verdict(r, 0.1)
        assert reason is None and warnings == [
            "1 of 10 frames (10 %) were lost while decoding (0 decode error(s), 1 gap(s) in "
            "the file numbering); scored on the frames that decoded"]
        assert decode_verdict(r, 0.05)[0] is not None


@pytest.mark.parametrize("names", [
    [f"frame_{i:04d}.png" for i in range(10)],            # complete
    [f"{i}.png" for i in range(1, 13)],                   # unpadded: 9.png, 10.png
    [f"shot_{i:03d}.png" for i in range(0, 100, 10)],     # numbered every 10th
    [f"f{i}.png" if i % 2 else f"f{i}.jpg" for i in range(6)],  # two suffixes: no sequence
])
def test_complete_image_sequences_lose_nothing(frames, tmp_path, names):
    r = _report(_png_folder(tmp_path / "seq", frames, names))
    assert (r["decoded_frames"], r["lost_frames"], r["timestamp_gaps"]) == (len(names), 0, 0)


def test_frame_numbers_only_for_one_numbered_family():
    p = [Path(n) for n in ("a_0009.png", "a_0010.png", "A_0012.PNG")]
    assert frame_numbers(p) == [9, 10, 12]
    assert frame_numbers([Path("f001.png"), Path("f1000.png")]) == [1, 1000]
    assert frame_numbers([Path("1.png"), Path("01.png")]) is None       # two paddings
    assert frame_numbers([Path("a1.png"), Path("b2.png")]) is None      # two prefixes
    assert frame_numbers([Path("a.png"), Path("b1.png")]) is None       # no number
    assert frame_numbers([Path("a1.png")]) is None


# ----------------------------------------------------------------------------------- F5

def test_best_video_stream_is_read_not_a_picture_stream_in_front(frames, tmp_path):
    """Was: stream 0 (one JPEG picture) read: a 1-frame clip, not_applicable."""
    from PIL import Image

    path = tmp_path / "cover_first.mkv"
    with av.open(str(path), "w", format="matroska") as c:
        pic = c.add_stream("mjpeg", rate=1)
        pic.width, pic.height, pic.pix_fmt = W, H, "yuvj420p"
        video = c.add_stream("libx264", rate=24)
        video.width, video.height, video.pix_fmt = W, H, "yuv420p"
        video.options = {"threads": "1"}
        buf = io.BytesIO()
        Image.fromarray(np.full((H, W, 3), 200, np.uint8)).save(buf, "JPEG")
        packet = av.Packet(buf.getvalue())
        packet.pts = packet.dts = 0
        packet.time_base, packet.stream, packet.is_keyframe = Fraction(1, 1), pic, True
        c.mux(packet)
        for a in frames:
            for q in video.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(q)
        for q in video.encode():
            c.mux(q)
    with av.open(str(path)) as c:
        reference = np.stack([frame_to_ndarray(f, "rgb24") for f in c.decode(video=1)])
    for stream in (False, True):
        clip = read_clip(path, long_side=None, stream=stream)
        assert clip.num_frames == T and clip.meta["codec"] == "h264"
        assert (clip.meta["video_stream"], clip.meta["video_streams"]) == (1, 2)
        np.testing.assert_array_equal(_clip_pixels(path, stream=stream), reference)
