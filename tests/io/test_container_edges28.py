"""Container and timing edge cases (audit s28, container findings F1-F7). Every file is built
here with PyAV or PIL from small (48x64) frames of smoothed noise moving 3 px a frame:

* F1: an mp4 trimmed by stream copy keeps the packets from the keyframe before the cut, which
  its edit list marks to be decoded and discarded: not lost frames (a cut file still is);
* F2: a GIF cut part-way (no trailer byte) or an APNG cut part-way (fewer frames than its
  ``acTL`` chunk announces) is truncated, as a cut mp4 is;
* F3: MPEG-TS and raw elementary streams record no length: a warning says a cut cannot be seen;
* F4: an AVI header that over-counts its frames, in a complete file, is a count mismatch
  (a warning), not lost frames; a cut AVI or mp4 still loses them;
* F5: a sustained rate drop (a run of equal long steps) is a rate change, not lost frames;
  scattered gaps in a stream whose container count matches are "suggested" missing frames;
* F6: a file with several video streams names the one scored;
* F7: the variable-rate warning does not call the container's rate the average.
"""
from __future__ import annotations

import struct
from fractions import Fraction
from pathlib import Path
from typing import List, Optional

import av
import numpy as np
import pytest

from geocon_torch.errors import VideoReadError
from geocon_torch.io import probe_video, read_clip
from geocon_torch.io.integrity import decode_report, decode_verdict
from helpers import stream_copy_trim

H, W = 48, 64


@pytest.fixture(scope="module")
def frames() -> List[np.ndarray]:
    """60 frames (H, W, 3) uint8: smoothed noise (so H.264 predicts it) moving 3 px a frame."""
    import cv2

    base = np.random.default_rng(0).integers(0, 256, (H, W + 3 * 60, 3), dtype=np.uint8)
    base = cv2.GaussianBlur(base, (5, 5), 1.0)
    return [np.ascontiguousarray(base[:, 3 * t:3 * t + W]) for t in range(60)]


def _encode(path: Path, frames: List[np.ndarray], codec: str = "libx264",
            fmt: Optional[str] = None, options: Optional[dict] = None,
            pts: Optional[List[int]] = None, rate: int = 24, faststart: bool = False) -> Path:
    """``frames`` encoded at ``rate`` fps (``pts`` in 1 / ``rate`` s when given)."""
    opts = {"movflags": "faststart"} if faststart else {}
    with av.open(str(path), "w", format=fmt, options=opts) as c:
        s = c.add_stream(codec, rate=rate)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        s.options = dict({"threads": "1"}, **(options or {}))
        if pts is not None:
            s.codec_context.time_base = Fraction(1, rate)
        for k, a in enumerate(frames):
            frame = av.VideoFrame.from_ndarray(a, format="rgb24")
            if pts is not None:
                frame.pts, frame.time_base = pts[k], Fraction(1, rate)
            for packet in s.encode(frame):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


def _packets(path: Path, kind: str = "video") -> List[tuple]:
    """(byte position, size) of each packet of the first ``kind`` stream, in file order."""
    with av.open(str(path)) as c:
        return [(p.pos, p.size) for p in c.demux(**{kind: 0}) if p.size]


def _cut_at(path: Path, out: Path, at: int) -> Path:
    out.write_bytes(path.read_bytes()[:at])
    return out


def _report(path: Path, **kwargs) -> dict:
    return decode_report(read_clip(path, long_side=None, **kwargs).meta)


def _pixels(path: Path, **kwargs) -> np.ndarray:
    frames = read_clip(path, long_side=None, **kwargs).frames
    frames = frames.materialize() if hasattr(frames, "materialize") else frames
    return frames.permute(0, 2, 3, 1).numpy()


# ----------------------------------------------------------------------------------- F1

def _trimmed(frames: List[np.ndarray], folder: Path) -> Path:
    """40 frames with a keyframe every 20, stream-copied from the keyframe at 20 and shown
    from frame 25 (``ffmpeg -ss`` with ``-c copy``): frames 20-24 are edit-list preroll."""
    full = _encode(folder / "full.mp4", frames[:40],
                   options={"g": "20", "keyint_min": "20", "sc_threshold": "0"})
    return stream_copy_trim(full, folder / "trim.mp4")


def test_stream_copy_trim_with_edit_list_preroll_loses_no_frame(frames, tmp_path):
    """Was: "5 of 20 frames (25 %) were lost while decoding", an error (the mp4 counts the 5
    preroll samples its edit list discards); the 15 shown frames are all there."""
    trim = _trimmed(frames, tmp_path)
    for stream in (False, True):
        clip = read_clip(trim, long_side=None, stream=stream)
        r = decode_report(clip.meta)
        assert clip.num_frames == 15 and r["lost_frames"] == 0 and not r["truncated"]
        assert (r["announced_frames"], r["preroll_frames"], r["decoded_frames"]) == (20, 5, 15)
        assert clip.meta["preroll_frames"] == 5
        assert decode_verdict(r, 0.1) == (None, [])
    assert probe_video(trim).truncated is False
    with pytest.raises(VideoReadError) as err:
        read_clip(trim, indices=[15])
    assert "announces" not in str(err.value)
    # the same file really cut is still caught: its 15 shown frames are the count
    cut = _cut_at(trim, tmp_path / "cut.mp4", _packets(trim)[12][0])
    r = _report(cut)
    assert r["truncated"] and r["preroll_frames"] == 5 and 0 < r["decoded_frames"] < 15
    assert r["lost_frames"] == 15 - r["decoded_frames"]
    assert "of 15 frames" in decode_verdict(r, 0.1)[0]


# ----------------------------------------------------------------------------------- F2

def _animation(frames: List[np.ndarray], path: Path) -> Path:
    """30 frames as an animated GIF or (suffix .png) APNG written by PIL, 40 ms each."""
    from PIL import Image

    ims = [Image.fromarray(a) for a in frames[:30]]
    ims[0].save(path, save_all=True, append_images=ims[1:], duration=40, loop=0)
    return path


def test_cut_gif_is_truncated_and_its_partial_last_frame_dropped(frames, tmp_path):
    """Was: a GIF cut inside its 20th frame read as complete (``truncated`` False, no warning),
    that frame half decoded and scored."""
    gif = _animation(frames, tmp_path / "pan.gif")
    full = _pixels(gif)
    r = _report(gif)
    assert full.shape[0] == 30 and not r["truncated"] and decode_verdict(r, 0.1) == (None, [])
    pos, size = _packets(gif)[19]
    cut = _cut_at(gif, tmp_path / "cut.gif", pos + size // 2)
    for stream in (False, True):
        got = _pixels(cut, stream=stream)
        r = _report(cut, stream=stream)
        assert r["truncated"] and got.shape[0] == r["decoded_frames"] == 19
        np.testing.assert_array_equal(got, full[:got.shape[0]])  # no partial frame
        reason, warnings = decode_verdict(r, 0.1)
        assert reason is None and any("trailer" in w and "cut" in w for w in warnings)
    # only the trailer byte missing: every frame is whole and kept, the cut still said
    tail = _cut_at(gif, tmp_path / "notrailer.gif", gif.stat().st_size - 1)
    np.testing.assert_array_equal(_pixels(tail), full)
    assert _report(tail)["truncated"]


def test_cut_apng_counts_its_lost_frames_against_actl(frames, tmp_path):
    """Was: an APNG cut inside its 13th frame read as 12 complete frames, no loss, no warning;
    its acTL chunk announces 30."""
    png = _animation(frames, tmp_path / "pan.png")
    r = _report(png)
    assert r["announced_frames"] is None and r["decoded_frames"] == 30
    assert r["lost_frames"] == 0 and decode_verdict(r, 0.1) == (None, [])
    pos, size = _packets(png)[12]
    cut = _cut_at(png, tmp_path / "cut.png", pos + size // 2)
    for stream in (False, True):
        r = _report(cut, stream=stream)
        assert r["truncated"] and r["announced_frames"] == 30 and r["decoded_frames"] == 12
        assert r["lost_frames"] == 18 and r.get("corrupt_packets") == 1
        reason, _ = decode_verdict(r, 0.1)
        assert reason is not None and "18 of 30 frames" in reason


def test_an_apng_one_frame_short_of_actl_is_reported(frames, tmp_path):
    """Was: an APNG cut after its 29th frame read as complete (no loss, no warning): the
    container slack of 2 frames was applied to acTL's count, which the format makes exact."""
    png = _animation(frames, tmp_path / "pan.png")
    pos, size = _packets(png)[28]
    r = _report(_cut_at(png, tmp_path / "cut.png", pos + size))
    assert r["decoded_frames"] == 29 and r["announced_frames"] == 30
    assert r["lost_frames"] == 1 and r["truncated"]
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is None and any("1 of 30 frames" in w for w in warnings)


# ----------------------------------------------------------------------------------- F3

@pytest.mark.parametrize("fmt,suffix", [("mpegts", "ts"), ("h264", "h264")])
def test_ts_and_raw_streams_warn_that_a_cut_cannot_be_seen(frames, tmp_path, fmt, suffix):
    """Was: a cut MPEG-TS / raw H.264 read as a complete shorter clip with no warning at all
    (a TS file's duration is estimated from its own last timestamps)."""
    full = _encode(tmp_path / f"clip.{suffix}", frames[:30], fmt=fmt)
    cut = _cut_at(full, tmp_path / f"cut.{suffix}", int(0.6 * full.stat().st_size))
    for path in (full, cut):
        r = _report(path)
        assert r["length_known"] is False
        reason, warnings = decode_verdict(r, 0.1)
        assert reason is None and any("records no length" in w for w in warnings)
    r = _report(_encode(tmp_path / "clip.mp4", frames[:30]))  # an mp4 records its length
    assert "length_known" not in r and decode_verdict(r, 0.1) == (None, [])


# ----------------------------------------------------------------------------------- F4

def _mp4_with_audio(frames: List[np.ndarray], path: Path) -> Path:
    """A faststart mp4 of ``frames`` with an AAC track interleaved (2000 samples a frame)."""
    with av.open(str(path), "w", options={"movflags": "faststart"}) as c:
        v = c.add_stream("libx264", rate=24)
        v.width, v.height, v.pix_fmt = W, H, "yuv420p"
        a = c.add_stream("aac", rate=48000)
        rng = np.random.default_rng(1)
        for t, img in enumerate(frames):
            for p in v.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(p)
            snd = av.AudioFrame.from_ndarray(
                (0.1 * rng.standard_normal((1, 2000))).astype(np.float32), format="fltp",
                layout="mono")
            snd.sample_rate, snd.pts = 48000, 2000 * t
            for p in a.encode(snd):
                c.mux(p)
        for s in (v, a):
            for p in s.encode():
                c.mux(p)
    return path


def test_avi_header_that_over_counts_is_a_count_mismatch_not_a_loss(frames, tmp_path):
    """Was: "270 of 300 frames (90 %) were lost while decoding", an error, for a complete AVI
    whose stream header says 300 frames. A cut AVI, and a cut mp4 whose cut falls in its audio,
    still count their lost frames."""
    avi = _encode(tmp_path / "ok.avi", frames[:30], "mpeg4")
    r = _report(avi)
    assert (r["announced_frames"], r["lost_frames"]) == (30, 0)
    assert "container_count_mismatch" not in r
    data = bytearray(avi.read_bytes())
    j = data.find(b"strh")
    data[j + 40:j + 44] = struct.pack("<I", 300)
    lie = tmp_path / "hdr300.avi"
    lie.write_bytes(bytes(data))
    r = _report(lie)
    assert (r["announced_frames"], r["decoded_frames"], r["lost_frames"]) == (300, 30, 0)
    assert not r["truncated"] and r["container_count_mismatch"] == 270
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is None and len(warnings) == 1 and "announces 300 frames" in warnings[0]
    pos, size = _packets(lie)[20]
    cut = _cut_at(lie, tmp_path / "cut.avi", pos + size // 2)
    r = _report(cut)
    assert r["truncated"] and r["lost_frames"] == 300 - r["decoded_frames"]
    assert "container_count_mismatch" not in r and decode_verdict(r, 0.1)[0] is not None
    # an mp4 cut in its audio: the video's last packet neither ends the file nor is cut short;
    # the mp4's data box, which runs past the end of the file, shows the cut
    mp4 = _mp4_with_audio(frames[:30], tmp_path / "av.mp4")
    video_end = _packets(mp4)[14][0]
    pos, size = next(q for q in _packets(mp4, "audio") if q[0] > video_end)
    r = _report(_cut_at(mp4, tmp_path / "cut.mp4", pos + size // 2))
    assert r["truncated"] and 0 < r["decoded_frames"] < 30 and r["decode_errors"] == 0
    assert r["lost_frames"] == 30 - r["decoded_frames"] and "container_count_mismatch" not in r


# ----------------------------------------------------------------------------------- F5

def test_sustained_rate_drop_is_variable_rate_not_lost_frames(frames, tmp_path):
    """Was: 32 frames at 30 fps then 8 at 15 fps (every frame present, the mp4 count equal to
    the decoded count) read as "7 of 47 frames (15 %) were lost while decoding", an error."""
    steps = [1] * 32 + [2] * 7
    pts = [0] + list(np.cumsum(steps))
    drop = _encode(tmp_path / "drop.mp4", [frames[p] for p in pts], pts=pts, rate=30)
    r = _report(drop)
    assert (r["announced_frames"], r["decoded_frames"]) == (40, 40)
    assert r["variable_frame_rate"] and r["lost_frames"] == 0 and r["timestamp_gaps"] == 0
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is None and len(warnings) == 1 and warnings[0].startswith("variable frame")
    # three scattered gaps of one frame: still drops, worded as what timestamps suggest
    pts = [p for p in range(43) if p not in (9, 20, 31)]
    gaps = _encode(tmp_path / "gaps.mp4", [frames[p] for p in pts], pts=pts, rate=30)
    r = _report(gaps)
    assert not r["variable_frame_rate"] and (r["timestamp_gaps"], r["lost_frames"]) == (3, 3)
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is None and warnings[0].startswith(
        "timestamp gaps suggest 3 of 43 frames (7 %) are missing")
    assert "lost while decoding" not in warnings[0]


# ----------------------------------------------------------------------------------- F6

def test_two_video_streams_name_the_stream_scored(frames, tmp_path):
    """Was: nothing in the io block or the warnings said the file has a second video stream."""
    path = tmp_path / "two.mkv"
    with av.open(str(path), "w") as c:
        small = c.add_stream("libx264", rate=24)
        small.width, small.height, small.pix_fmt = 32, 24, "yuv420p"
        big = c.add_stream("libx264", rate=24)
        big.width, big.height, big.pix_fmt = W, H, "yuv420p"
        for img in frames[:12]:
            for s, a in ((small, img[:24, :32]), (big, img)):
                for p in s.encode(av.VideoFrame.from_ndarray(np.ascontiguousarray(a),
                                                             format="rgb24")):
                    c.mux(p)
        for s in (small, big):
            for p in s.encode():
                c.mux(p)
    r = _report(path)
    assert (r["video_stream"], r["video_streams"], r["video_stream_size"]) == (0, 2, "32x24")
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is None and warnings == [
        "the file has 2 video streams: stream #0 (32x24) was scored, FFmpeg's best video "
        "stream (the one a player shows)"]
    r = _report(_encode(tmp_path / "one.mkv", frames[:12]))
    assert "video_stream" not in r and "video_streams" not in r


# ----------------------------------------------------------------------------------- F7

def test_variable_rate_warning_does_not_call_the_nominal_rate_the_average(frames, tmp_path):
    """Was: "(fps is the average rate)" for a Matroska clip whose fps is the muxer's nominal
    rate (24 here, the timestamps average about 19)."""
    dur = [2, 2, 4, 1, 3, 2, 5, 2, 2, 3] * 2  # in 1/48 s
    pts = [0] + list(np.cumsum(dur)[:-1])
    path = tmp_path / "vfr.mkv"
    with av.open(str(path), "w") as c:
        s = c.add_stream("libx264", rate=24)
        s.width, s.height, s.pix_fmt = W, H, "yuv420p"
        s.codec_context.time_base = Fraction(1, 48)
        for k, p in enumerate(pts):
            frame = av.VideoFrame.from_ndarray(frames[k], format="rgb24")
            frame.pts, frame.time_base = int(p), Fraction(1, 48)
            for q in s.encode(frame):
                c.mux(q)
        for q in s.encode():
            c.mux(q)
    clip = read_clip(path, long_side=None)
    r = decode_report(clip.meta)
    assert r["variable_frame_rate"] and r["lost_frames"] == 0
    _, warnings = decode_verdict(r, 0.1)
    assert len(warnings) == 1 and "average rate" not in warnings[0]
    assert "fps is the rate the container reports" in warnings[0]
