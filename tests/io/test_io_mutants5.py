"""Boundaries of the io rules that no other default test pins (mutation audit s20): the
timestamp rule (long-step fraction, grid tolerance, duplicates, jittered gaps), the tail a
container's duration implies, frame-size and concealed-frame records, the look-ahead for damage,
the consecutive-error limit, the ``io`` block and its verdict, the streamed letterbox
accumulator and the motion statistic. Closed-form inputs (fake frames, fake streams, synthetic
tensors) and one small mp4 built with PyAV."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest
import torch
from helpers import encode_rgb

from geocon_torch.errors import ShapeError, VideoReadError
from geocon_torch.io import decode, probe_video
from geocon_torch.io.decode import Decoded, timestamp_gap_count, timestamp_steps, variable_rate
from geocon_torch.io.integrity import decode_report, decode_verdict
from geocon_torch.io.letterbox import ContentMaskAccumulator, detect_content_mask
from geocon_torch.io.sampling import FrameMotion, frame_selection, max_pair_sums

H, W, T = 32, 48, 12


def _vfr(pts, codec="h264") -> bool:
    return variable_rate(timestamp_steps(pts), codec)


# ------------------------------------------------------------------ timestamp rule

def test_long_steps_exactly_a_fifth_of_the_steps_are_gaps_not_variable_rate():
    """10 steps, 2 of them 2 frames long (20 %, not more than 20 %): two gaps of one frame."""
    pts = [0, 1, 2, 4, 5, 6, 7, 8, 10, 11, 12]
    assert _vfr(pts) is False
    assert Decoded(pts=pts, codec="h264", complete=True).timestamp_gaps == (2, 2)


def test_two_common_long_steps_are_variable_rate():
    """5 steps, 2 long (40 %, and two of them): variable rate, no frame inferred lost."""
    pts = [0, 1, 3, 4, 6, 7]
    assert _vfr(pts) is True
    assert Decoded(pts=pts, codec="h264", complete=True).timestamp_gaps == (0, 0)


def test_one_long_step_among_few_is_a_gap():
    """4 steps, 1 long (25 % but only one): a constant-rate stream missing one frame."""
    pts = [0, 1, 2, 4, 5]
    assert _vfr(pts) is False
    assert timestamp_gap_count(pts, "h264") == (1, 1)


def test_a_step_exactly_a_quarter_off_the_grid_is_on_it():
    """Median step 4 ticks, one step of 5 = 1.25 durations: within 0.25 of the grid, so the
    stream is constant-rate and loses nothing."""
    pts = [0, 4, 8, 13, 17, 21, 25]
    assert _vfr(pts) is False
    assert timestamp_gap_count(pts, "h264") == (0, 0)


def test_a_gif_step_off_the_median_but_not_long_is_variable_rate():
    """A gif frame held 1.3 durations (not a long step): the frame durations vary."""
    pts = [0, 10, 20, 33, 43, 53]
    assert _vfr(pts, "gif") is True
    assert _vfr(pts, "h264") is True  # 0.3 off the grid as well


def test_jittered_gap_counts_the_nearest_whole_number_of_frames():
    """Median step 10, a step of 21 (2.1 durations): one frame missing, not two."""
    pts = [0, 10, 20, 41, 51, 61, 71]
    assert timestamp_gap_count(pts, "h264") == (1, 1)


def test_duplicate_timestamps_are_neither_steps_nor_reorders():
    """A timestamp written twice is no zero-length step (that would be off the grid: variable
    rate) and no reorder (that would hide the gap of a capped decode)."""
    pts = [0, 1, 2, 2, 3, 4, 8, 9, 10, 11, 12, 13]
    assert timestamp_steps(pts).min() == 1.0
    assert _vfr(pts) is False and timestamp_gap_count(pts, "h264") == (1, 3)
    assert Decoded(pts=pts, codec="h264", complete=False).timestamp_gaps == (1, 3)


# ------------------------------------------------------------------ counts and tails

def test_container_count_slack_is_two_frames():
    """Two frames fewer than announced: within the slack; three: truncated."""
    assert Decoded(decoded=22, container_frames=24, complete=True).truncated is False
    assert Decoded(decoded=21, container_frames=24, complete=True).truncated is True


def _tail(pts, stream_end, fps=24.0, durations=1, tb=1 / 24):
    dec = Decoded(complete=True, container_frames=None, fps=fps, time_base=tb,
                  stream_end=stream_end, codec="h264")
    for p in pts:
        dec.note(SimpleNamespace(pts=p, duration=durations, height=H, width=W))
    return dec


def test_a_tail_of_exactly_two_frames_is_within_the_slack():
    """Frames 0..9 (1/24 s each) end at 10/24 s: a stream end 2 frames later is rounding (not
    truncated), 3 frames later is a lost tail of 3."""
    assert _tail(range(10), 12 / 24).tail_frames == 0
    assert not _tail(range(10), 12 / 24).truncated
    assert _tail(range(10), 13 / 24).tail_frames == 3


def test_frames_without_durations_end_one_step_after_the_last():
    """No frame durations: the last frame still lasts one step, so a stream ending at 13/24 s
    holds 3 more frames after frames 0..9, not 4."""
    dec = _tail(range(10), 13 / 24, durations=0)
    assert dec.end_pts == 9 and dec.tail_frames == 3


def test_the_tail_is_rounded_to_the_nearest_frame():
    """3.9992 frames after the end: 4 lost, not 3."""
    assert _tail(range(10), 0.5833).tail_frames == 4


def test_the_median_step_wins_over_an_fps_more_than_5_percent_off():
    """Steps of 50 ms (20 fps) but an announced 22 fps (9 % off): the 0.5 s after the last frame
    hold 10 frames of the real step, not 11 of 1/22 s."""
    dec = _tail([50 * k for k in range(10)], 1.0, fps=22.0, durations=50, tb=1 / 1000)
    assert dec.tail_frames == 10


def test_duration_frames_count_the_frames_missing_between_timestamps():
    """Frames 0-4 and 7-11 (2 missing between them), ending where the stream ends: 12 by the
    stream's duration."""
    dec = _tail(list(range(5)) + list(range(7, 12)), 12 / 24)
    assert dec.timestamp_gaps == (1, 2) and dec.tail_frames == 0
    assert dec.duration_frames == 12


def test_stream_end_counts_from_the_streams_start_time():
    stream = SimpleNamespace(time_base=Fraction(1, 1000), duration=1000, start_time=500,
                             metadata={})
    container = SimpleNamespace(duration=None, streams=[stream])
    assert decode._stream_end(container, stream) == pytest.approx(1.5)


def test_matroska_duration_tag_hours_and_minutes():
    assert decode._clock_seconds("01:02:03.500000000") == pytest.approx(3723.5)
    assert decode._clock_seconds("00:00:00.000") is None


# ------------------------------------------------------------------ frame records

def _frame(h=H, w=W, corrupt=False, pts=None):
    return SimpleNamespace(pts=pts, duration=None, height=h, width=w, is_corrupt=corrupt)


def test_size_changes_back_and_forth_are_each_counted_and_listed_once():
    """A -> B -> A: two changes, the first one recorded, the sizes listed once each."""
    dec = Decoded()
    for hw in [(H, W)] * 3 + [(H, 32)] * 2 + [(H, W)] * 2:
        dec.note(_frame(*hw))
    assert dec.size_changes == 2
    assert dec.first_size_change == (3, (H, W), (H, 32))
    assert dec.frame_sizes == [(H, W), (H, 32)]
    meta = dec.metadata(Path("x.mkv"))
    assert meta["frame_sizes"] == ["48x32", "32x32"]
    assert meta["first_size_change"] == {"frame": 3, "from": "48x32", "to": "32x32"}


def test_concealed_frame_indices_keep_the_first_five():
    dec = Decoded()
    for k in range(9):
        dec.note(_frame(corrupt=k >= 2))
    assert dec.num_concealed == 7 and dec.concealed == [2, 3, 4, 5, 6]


def test_damage_ahead_sees_any_of_the_next_frames_and_takes_its_errors_back():
    """The look-ahead past a satisfied selection: a concealed frame 10 frames on is damage; a
    decode error found there is damage too, but is not the decode's own error."""
    def frames(corrupt_at=None, fail_at=None, errors=None):
        for k in range(decode._LOOKAHEAD + 5):
            if k == fail_at:
                errors.append("decode: Invalid data found when processing input")
            yield _frame(corrupt=k == corrupt_at)

    errors = ["decode: earlier"]
    assert decode._damage_ahead(frames(corrupt_at=10), errors) is True
    assert decode._damage_ahead(frames(corrupt_at=decode._LOOKAHEAD + 2), errors) is False
    assert decode._damage_ahead(frames(fail_at=3, errors=errors), errors) is True
    assert errors == ["decode: earlier"]


class _Packet:
    def __init__(self, ok: bool):
        self.ok = ok

    def decode(self):
        if not self.ok:
            raise av.error.InvalidDataError(1094995529, "Invalid data")
        return [_frame()]


class _Container:
    def __init__(self, pattern):
        self.pattern = pattern

    def demux(self, stream):
        return iter([_Packet(ok) for ok in self.pattern])


def test_decoding_gives_up_only_after_consecutive_errors():
    """Errors separated by good packets never reach the limit; eight in a row end the decode."""
    spaced = ([False] * 7 + [True]) * 3
    errors: list = []
    assert len(list(decode.iter_frames(_Container(spaced), None, errors))) == 3
    assert len(errors) == 21 and not errors[-1].startswith("gave up")
    errors = []
    row = [True] + [False] * 8 + [True]
    assert len(list(decode.iter_frames(_Container(row), None, errors))) == 1
    assert errors[-1] == "gave up after 8 consecutive decode errors"


# ------------------------------------------------------------------ the io block

def test_lost_frames_are_the_most_any_evidence_says_not_the_sum():
    meta = {"container_frames": 20, "decoded_frames": 16, "decode_complete": True,
            "timestamp_missing_frames": 3, "timestamp_gaps": 1}
    r = decode_report(meta)
    assert r["lost_frames"] == 4 and r["lost_fraction"] == pytest.approx(0.2)


def test_a_capped_decode_loses_nothing_by_the_container_count():
    meta = {"container_frames": 20, "decoded_frames": 5, "decode_complete": False}
    assert decode_report(meta)["lost_frames"] == 0


def test_decode_error_count_is_all_errors_not_the_five_kept():
    meta = {"container_frames": 20, "decoded_frames": 20, "decode_complete": True,
            "decode_errors": [f"decode: e{k}" for k in range(5)], "num_decode_errors": 8}
    r = decode_report(meta)
    assert r["decode_errors"] == 8 and len(r["first_errors"]) == 5
    assert decode_verdict(r, 0.1) == (None, ["8 decode error(s) but no frame lost: decode: e0"])


def test_a_loss_with_errors_is_one_warning_naming_the_first_error():
    meta = {"container_frames": 20, "decoded_frames": 19, "decode_complete": True,
            "decode_errors": ["decode: first", "decode: second"], "num_decode_errors": 2}
    reason, warnings = decode_verdict(decode_report(meta), 0.1)
    assert reason is None and warnings == [
        "1 of 20 frames (5 %) were lost while decoding (2 decode error(s), 0 timestamp gap(s))"
        ": decode: first; scored on the frames that decoded"]


# ------------------------------------------------------------------ streamed letterbox mask

def test_streamed_mask_keeps_the_exact_luminance_of_lines_near_the_threshold():
    """Top rows of (16, 16, 40) (luminance 18.7 > 16: picture, whose smallest channel sits at
    the threshold) in the first chunk only, black in the second: the streamed mask equals the
    mask of all frames (no bar), whatever the chunking."""
    frames = torch.randint(60, 200, (4, 3, 40, 50), generator=torch.Generator().manual_seed(0),
                           dtype=torch.uint8)
    frames[:2, :, :8] = torch.tensor([16, 16, 40], dtype=torch.uint8).view(3, 1, 1)
    frames[2:, :, :8] = 0
    want = detect_content_mask(frames)
    assert want.all()
    acc = ContentMaskAccumulator()
    acc.update(frames[:2])
    acc.update(frames[2:])
    assert acc.mask().equal(want)


def test_min_fraction_of_one_half_is_refused():
    with pytest.raises(ShapeError, match=r"min_fraction must be in \[0, 0.5\)"):
        detect_content_mask(torch.zeros(1, 3, 8, 8, dtype=torch.uint8), min_fraction=0.5)


# ------------------------------------------------------------------ motion

def _still(v: int) -> np.ndarray:
    return np.full((4, 5, 3), v, np.uint8)


def test_one_frame_is_no_pair_and_not_frozen():
    motion = FrameMotion()
    motion.add(0, _still(0), kept=True)
    assert motion.record() == {"max_mad": None, "pairs": 0, "frozen": False}


def test_sampled_pair_ending_on_the_last_kept_frame_counts():
    """every=2 over kept frames 0..4: sampled pairs (0, 2) and (2, 4), both within the frames
    read (frame 4 is kept)."""
    motion = FrameMotion(every=2)
    for i in range(5):
        motion.add(i, _still(10 * i), kept=True)
    assert motion.record()["sampled"] == {"max_mad": 20.0, "pairs": 2, "frozen": False,
                                          "every": 2}


def test_chunked_pair_maximum_keeps_the_largest_of_every_chunk():
    """The moving pair is in the first chunk (chunk of one pair): still found."""
    frames = torch.zeros(1, 5, 3, 4, 4, dtype=torch.uint8)
    frames[0, 1] = 100
    frames[0, 2] = 100
    assert max_pair_sums(frames, chunk=48).tolist() == [100.0 * 48]


def test_out_of_range_message_names_up_to_ten_indices():
    sel = frame_selection(indices=list(range(3, 15)))
    with pytest.raises(VideoReadError, match=r"\[3, 4, 5, 6, 7, 8, 9, 10, 11, 12\] are out"):
        sel.resolve(3)


# ------------------------------------------------------------------ a small mp4

def _write(path: Path) -> Path:
    """T frames of H x W moving noise, mpeg4 (no B-frames) at 24 fps."""
    base = np.random.default_rng(0).integers(0, 256, (H, W + 2 * T, 3), dtype=np.uint8)
    return encode_rgb(path, [np.ascontiguousarray(base[:, 2 * t:2 * t + W]) for t in range(T)],
                      "mpeg4")


@pytest.fixture(scope="module")
def mp4(tmp_path_factory) -> Path:
    return _write(tmp_path_factory.mktemp("m5") / "clip.mp4")


def test_probe_counts_sizes_duration_and_a_cut_matroska(mp4, tmp_path):
    """An exact probe decodes the frames: T of H x W, 0.5 s; a Matroska file (no frame count)
    is decoded even when the count may be trusted, and a cut one is truncated."""
    info = probe_video(mp4)
    assert (info.num_frames, info.height, info.width, info.counted) == (T, H, W, "decoded")
    assert info.duration_s == pytest.approx(T / 24, abs=0.05) and not info.truncated
    mkv = _write(tmp_path / "clip.mkv")
    fast = probe_video(mkv, exact=False)
    assert (fast.num_frames, fast.container_frames, fast.counted) == (T, None, "decoded")
    with av.open(str(mkv)) as c:
        cut_at = [p.pos for p in c.demux(video=0) if p.size][8]
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(mkv.read_bytes()[:cut_at])
    info = probe_video(cut)
    assert info.num_frames < T and info.truncated


def test_selection_stops_decoding_at_its_last_frame(mp4):
    """Explicit indices up to 2 decode frames 0..2 only; a frame cap of 3 stops after its third
    kept frame: neither decode is complete, and the frames are those asked for."""
    dec = decode.decode_selected(mp4, frame_selection(indices=[2, 0]))
    assert (dec.decoded, dec.complete, dec.indices) == (3, False, [0, 2])
    dec = decode.decode_selected(mp4, frame_selection(stride=2, max_frames=3))
    assert (dec.decoded, dec.complete, dec.indices) == (5, False, [0, 2, 4])
    meta = dec.metadata(mp4)
    assert meta["num_source_frames"] == T and not meta["truncated"]
    dec = decode.decode_selected(mp4, frame_selection(indices=[T - 1]))
    assert (dec.decoded, dec.complete) == (T, False)


def test_a_zero_byte_file_is_named_empty_before_any_decoder_runs(tmp_path):
    path = tmp_path / "empty.mp4"
    path.write_bytes(b"")
    with pytest.raises(VideoReadError, match=r"empty\.mp4: the file is empty \(0 bytes\)$"):
        decode.check_file(path)
    with pytest.raises(VideoReadError, match=r"the file is empty \(0 bytes\)$"):
        probe_video(path)


def test_dark_lines_follow_the_float_luminance_at_the_threshold():
    """Grey (37, 37, 37) pixels have a float32 luminance of 36.999996, under a threshold of
    37/255, although their smallest channel reaches it; blue (0, 0, 200) pixels beside them
    lift the channel bound: such lines are dark, as peak_luminance says."""
    from geocon_torch.io.letterbox import dark_lines, peak_luminance

    f = torch.zeros(1, 3, 4, 6, dtype=torch.uint8)
    f[0, :, :, ::2] = 37
    f[0, 2, :, 1::2] = 200
    rows, _ = dark_lines(f, 37 / 255)
    assert torch.equal(rows, peak_luminance(f).amax(-1) < 37 / 255) and bool(rows.all())


def test_max_pair_sums_of_fewer_than_two_frames_is_a_shape_error():
    """No consecutive pair: a ShapeError naming the shape, not a silent None (typing audit s24)."""
    from geocon_torch.errors import ShapeError

    with pytest.raises(ShapeError, match=r"n >= 2, got shape \(3, 1, 1, 4, 4\)"):
        max_pair_sums(torch.zeros(3, 1, 1, 4, 4, dtype=torch.uint8))
    with pytest.raises(ShapeError, match="n >= 2"):
        max_pair_sums(torch.zeros(2, 0, 1, 4, 4))
