"""Cases of the io audit: variable-frame-rate files are not "lost frames", an animated WebP /
APNG is never silently one frame, ``fps`` is validated, ``io.long_side`` is at least 2."""
from __future__ import annotations

import math
import shutil
from fractions import Fraction
from pathlib import Path
from typing import List, Sequence

import av
import numpy as np
import pytest
import torch
from PIL import Image

from geocon_torch import ConfigError, load_config
from geocon_torch.config import IOConfig
from geocon_torch.errors import InputError, VideoReadError
from geocon_torch.io import clips_from_tensor, probe_video, read_clip, read_clips
from geocon_torch.io import decode
from geocon_torch.io.integrity import decode_report, decode_verdict

H, W = 48, 64


def _frames(n: int) -> List[np.ndarray]:
    """``n`` distinct (H, W, 3) uint8 RGB frames (a texture moving 2 px per frame)."""
    base = np.random.default_rng(0).integers(0, 256, (H, W + 2 * n, 3), dtype=np.uint8)
    return [np.ascontiguousarray(base[:, 2 * i:2 * i + W]) for i in range(n)]


def _pil_animation(path: Path, durations: Sequence[int], **kwargs) -> Path:
    """An animated image (format from the suffix) of len(durations) frames, durations in ms."""
    images = [Image.fromarray(f) for f in _frames(len(durations))]
    images[0].save(path, save_all=True, append_images=images[1:], duration=list(durations),
                   loop=0, **kwargs)
    return path


def _mp4_with_pts(path: Path, pts: Sequence[int]) -> Path:
    """An mpeg4 mp4 of len(pts) frames whose timestamps are ``pts`` ticks of 1/30 s."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("mpeg4", rate=30)
        stream.width, stream.height, stream.pix_fmt = W, H, "yuv420p"
        stream.codec_context.time_base = Fraction(1, 30)
        for t, rgb in zip(pts, _frames(len(pts))):
            frame = av.VideoFrame.from_ndarray(rgb, format="rgb24")
            frame.pts, frame.time_base = t, Fraction(1, 30)
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def _report(path: Path) -> dict:
    return decode_report(read_clip(path, long_side=None).meta)


# ------------------------------------------------------------------ 1. variable frame rate

def test_gif_with_a_held_first_frame_loses_nothing(tmp_path):
    """An intact 10-frame gif whose first frame is held 800 ms is not "7 frames lost"."""
    path = _pil_animation(tmp_path / "hold.gif", [800] + [100] * 9)
    r = _report(path)
    assert (r["decoded_frames"], r["lost_frames"], r["timestamp_gaps"]) == (10, 0, 0)
    assert r["variable_frame_rate"] is True and r["lost_fraction"] == 0.0
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is None and len(warnings) == 1 and "variable frame rate" in warnings[0]


def test_alternating_steps_are_variable_rate_not_drops(tmp_path):
    """12 frames, all present, steps alternating 1 and 2 ticks: no frame lost."""
    pts = [0]
    for i in range(11):
        pts.append(pts[-1] + (1 if i % 2 == 0 else 2))
    r = _report(_mp4_with_pts(tmp_path / "vfr.mp4", pts))
    assert (r["announced_frames"], r["decoded_frames"], r["lost_frames"]) == (12, 12, 0)
    assert r["variable_frame_rate"] is True and r["timestamp_gaps"] == 0
    assert decode_verdict(r, 0.1)[0] is None


def test_constant_rate_stream_with_one_gap_still_counts_drops(tmp_path):
    """A constant-rate stream missing frames 5-8 (one gap) still reports 4 lost frames."""
    r = _report(_mp4_with_pts(tmp_path / "drop.mp4", list(range(5)) + list(range(9, 16))))
    assert r["decoded_frames"] == 12 and r["variable_frame_rate"] is False
    assert (r["timestamp_gaps"], r["lost_frames"]) == (1, 4)
    reason, _ = decode_verdict(r, 0.1)
    assert reason is not None and "4 of 16 frames (25 %)" in reason


@pytest.mark.parametrize("pts,codec,vfr,gaps", [
    ([0, 80, 90, 100, 110, 120, 130, 140, 150, 160], "gif", True, (0, 0)),
    ([0, 80, 90, 100, 110, 120, 130, 140, 150, 160], "h264", False, (1, 7)),
    ([0, 1, 3, 4, 6, 7, 9, 10, 12, 13, 15, 16], "mpeg4", True, (0, 0)),
    ([0, 1, 2, 3, 4, 5, 8, 11, 14, 17, 20, 23], "h264", True, (0, 0)),
    ([0, 1, 2, 3, 4, 9, 10, 11, 12, 13, 14, 15], "h264", False, (1, 4)),
    (list(range(0, 120, 10)), "gif", False, (0, 0)),
])
def test_timestamp_rule(pts, codec, vfr, gaps):
    """Long steps: drops in a constant-rate stream with a few gaps; a longer frame in a gif or
    a stream whose long steps are common or off the frame grid."""
    assert decode.variable_rate(decode.timestamp_steps(pts), codec) is vfr
    assert decode.Decoded(pts=pts, codec=codec).timestamp_gaps == gaps


def test_a_frame_cap_on_a_reordering_decoder_finds_no_false_gap(shared_data):
    """box.mp4's decoder returns frames out of timestamp order (0, 101, 67, 134, 34 ms, ...);
    stopped after 8 frames, the one still in its reorder buffer looked like a dropped frame
    ("1 of 9 frames (11 %) lost": the clip became an error). A full decode sorts it out, and a
    real gap in a complete, reordered decode still counts."""
    clip = read_clip(shared_data / "real" / "box.mp4", long_side=128, max_frames=8)
    assert clip.meta["timestamp_gaps"] == 0
    shuffled = [0, 3, 2, 1, 4, 5, 9, 8, 7, 6, 10, 11]  # complete: every frame came out
    assert decode.Decoded(pts=shuffled, codec="h264", complete=True).timestamp_gaps == (0, 0)
    assert decode.Decoded(pts=shuffled[:5], codec="h264").timestamp_gaps == (0, 0)  # cut early
    gappy = [0, 2, 1, 3, 4, 9, 10, 11, 12, 13, 14, 15]
    assert decode.Decoded(pts=gappy, codec="h264", complete=True).timestamp_gaps == (1, 4)


# ------------------------------------------------------------------ 2. animated WebP / APNG

@pytest.fixture()
def anim_webp(tmp_path) -> Path:
    return _pil_animation(tmp_path / "anim.webp", [100, 50, 50, 200, 100, 100, 100, 100],
                          lossless=True)


def test_animated_webp_is_never_one_frame(anim_webp, tmp_path):
    """An animated WebP file is read as a video (all 8 frames); inside an image folder, where
    each file is one frame, it is a clear error naming it."""
    clip = read_clip(anim_webp, long_side=None)
    assert clip.num_frames == 8 and clip.meta["source"] == "video"
    folder = tmp_path / "frames"
    folder.mkdir()
    shutil.copy(anim_webp, folder / "0001.webp")
    shutil.copy(anim_webp, folder / "0002.webp")
    with pytest.raises(VideoReadError, match="animated WebP with 8 frames is not supported"):
        read_clip(folder, long_side=None)


def test_animated_webp_decodes_on_the_video_path(anim_webp, tmp_path):
    """PyAV cannot decode an animated WebP: probe_video and the video reader read it with
    PIL, all 8 frames, with its average rate (8 frames in 0.8 s)."""
    info = probe_video(anim_webp)
    assert (info.num_frames, info.codec, info.fps, info.truncated) == (8, "webp", 10.0, False)
    path = shutil.copy(anim_webp, tmp_path / "anim.bin")  # routed to the video decoder
    eager, streamed = read_clip(path, long_side=None), read_clip(path, long_side=None,
                                                                 stream=True)
    assert tuple(eager.frames.shape) == (8, 3, H, W) and eager.fps == 10.0
    assert torch.equal(eager.frames, streamed.frames[:])
    want = torch.from_numpy(np.stack(_frames(8))).permute(0, 3, 1, 2)
    assert torch.equal(eager.frames, want)  # lossless: the source frames, in order
    r = decode_report(eager.meta)
    assert (r["decoded_frames"], r["lost_frames"], r["variable_frame_rate"]) == (8, 0, True)


def test_apng_and_still_webp(tmp_path):
    apng = read_clip(_pil_animation(tmp_path / "anim.png", [100] * 8), long_side=None)
    assert apng.num_frames == 8 and apng.meta["source"] == "video"
    still = tmp_path / "still.webp"
    Image.fromarray(_frames(1)[0]).save(still, lossless=True)
    clip = read_clip(still, long_side=None)
    assert tuple(clip.frames.shape) == (1, 3, H, W) and clip.meta["source"] == "image"


# ------------------------------------------------------------------ 3. fps argument

@pytest.mark.parametrize("fps", [math.inf, math.nan, 0, -5.0, "30", True, None])
def test_fps_must_be_a_finite_positive_number(fps):
    x = torch.zeros(3, 3, H, W, dtype=torch.uint8)
    if fps is None:
        assert read_clip(x, fps=30).fps == 30.0 and read_clip(x, fps=12.5, stride=2).fps == 6.25
        return
    for call in (lambda: read_clip(x, fps=fps), lambda: read_clips(x[None], fps=fps),
                 lambda: clips_from_tensor(x[None], fps=fps)):
        with pytest.raises(InputError, match=r"^fps must be a finite number > 0 .*got "):
            call()


# ------------------------------------------------------------------ 4. io.long_side >= 2

def test_long_side_one_is_a_config_error():
    with pytest.raises(ConfigError, match=r"^io.long_side must be an int >= 2, null or 'auto'"
                                          r".*got 1$"):
        load_config({"io": {"long_side": 1}})
    with pytest.raises(ConfigError, match="^io.long_side must be an int >= 2"):
        IOConfig(long_side=1)
    cfg = IOConfig(long_side=64)
    with pytest.raises(ConfigError, match="got 1$"):
        cfg.long_side = 1
    assert cfg.long_side == 64  # a refused assignment leaves the section unchanged
    assert load_config({"io": {"long_side": 2}}).io.long_side == 2
