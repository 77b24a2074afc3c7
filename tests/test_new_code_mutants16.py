"""Mutation round 16 of the statistics fixes (s28) and the container edge cases (0.2.5):
closed-form checks of the surviving mutants (fixed calibration bounds met with equality, the
rates' denominators and the fixed bounds' false-pass budget, the relaxed IR bound, a free
statistic no clip has, select_bounds' fallback candidates, the margin's round-off tolerance, a
cut APNG / GIF at a packet boundary, the top-level box walk on synthetic bytes, what shows a
cut, the look-ahead's packets, the capture-rate run, MPEG-PS, a trimmed mp4's preroll)."""
from __future__ import annotations

import math
import struct
import sys
import warnings
from pathlib import Path
from typing import List, Optional

import av
import numpy as np
import pytest
import torch

from geocon_torch.bench.calibration import evaluate, fit_regime
from geocon_torch.bench.preferences import choose_pair
from geocon_torch.errors import VideoReadError
from geocon_torch.io import read_clip
from geocon_torch.io.decode import (Decoded, PacketLog, _cut_evidence, rate_change,
                                    structure_runs_past_end, variable_rate)
from geocon_torch.io.integrity import decode_report, decode_verdict
from geocon_torch.measures.calibration import select_bounds
from geocon_torch.rewards import ClipReward
from helpers import stream_copy_trim

# ------------------------------------------------------------------ fit_regime (bench)


def _rows(parallax, corruption, ge: Optional[List[float]] = None, ir: float = 1.0) -> list:
    """F-regime calibration rows; GE in px at 256 px (x 4 = normalised at 1024 px)."""
    ge = ge or [0.08] * len(parallax)
    return [{"status": "ok", "regime": "F", "ir": ir, "ge_px": g / 4, "ge_norm": g,
             "long_side": 256, "ge_fine_px": g / 4, "ge_fine_norm": g,
             "ge_peak_px": (g + 0.02) / 4, "ge_peak_norm": g + 0.02, "ge_spread_norm": 0.02,
             "parallax_ref": p, "corruption": corruption,
             "severity": 1.0 if corruption else 0.0} for p, g in zip(parallax, ge)]


def test_a_fixed_bound_met_with_equality_lets_the_clip_through():
    """``value >= bound`` / ``value <= bound``: a clean clip exactly on a fixed bound passes it
    (with ``>`` / ``<`` every clean clip failed, a reject-all gate and its warning)."""
    clean = _rows([10.0, 12.0], None)
    bad = _rows([5.0, 30.0], "breathing", ge=[0.5, 0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        th = fit_regime(clean, bad, "F", 0.05, fixed={"parallax_ref_min": 12.0})
        assert (th["true_pass"], th["false_pass"]) == (0.5, 0.0)
        assert th["parallax_ref_min"] == 12.0 and 0.08 < th["ge_norm_max"] < 0.5
        th = fit_regime(clean, bad, "F", 0.05, fixed={"ge_norm_max": 0.08})
        assert (th["true_pass"], th["false_pass"]) == (1.0, 0.0)
        assert th["ge_norm_max"] == 0.08
    ev = evaluate(clean + bad, {"F": th})
    assert (ev["true_pass"], ev["false_pass"]) == (1.0, 0.0)


def test_reject_all_and_all_fixed_gates_divide_by_their_own_clip_counts():
    """2 clean / 4 corrupted clips: the reject-all gate's false-pass is 1 of 4 (a corrupted
    clip without parallax meets every parallax bound), and with every bound fixed the rates
    are 2 of 3 clean and 1 of 2 corrupted (the two denominators differ)."""
    clean = _rows([10.0, 12.0], None)
    bad = _rows([None, 30.0, 40.0, 50.0], "breathing", ge=[0.05, 0.05, 0.5, 0.5])
    with pytest.warns(UserWarning, match="no F bounds pass a clean clip"):
        th = fit_regime(clean, bad, "F", 0.05,
                        fixed={"ir_min": 0.5, "ge_norm_max": 0.06, "ge_fine_norm_max": 1.0,
                               "ge_spread_norm_max": 1.0})
    assert (th["true_pass"], th["false_pass"]) == (0.0, 0.25)
    assert th["parallax_ref_min"] == 51.0  # 1 above the largest parallax of any clip
    ev = evaluate(clean + bad, {"F": th})
    assert (ev["true_pass"], ev["false_pass"]) == (0.0, 0.25)

    clean = _rows([70.0, 12.0, 20.0], None)
    bad = _rows([30.0, 5.0], "breathing")
    fixed = {"ir_min": 0.5, "ge_norm_max": 1.0, "ge_fine_norm_max": 1.0,
             "ge_spread_norm_max": 1.0, "parallax_ref_min": 16.0}
    th = fit_regime(clean, bad, "F", 0.05, fixed=fixed)
    assert (th["true_pass"], th["false_pass"]) == (2 / 3, 0.5)
    ev = evaluate(clean + bad, {"F": th})
    assert (ev["true_pass"], ev["false_pass"]) == (2 / 3, 0.5)


def test_a_free_statistic_no_clip_has_gets_no_reject_all_bound():
    """Parallax missing on every clip (another gate method): the reject-all gate has no
    parallax bound at all (not None, which the gate cannot compare)."""
    clean = _rows([None, None], None)
    bad = _rows([None, None], "breathing", ge=[0.5, 0.5])
    with pytest.warns(UserWarning, match="no F bounds pass a clean clip"):
        th = fit_regime(clean, bad, "F", 0.05, fixed={"ge_norm_max": 0.06})
    assert "parallax_ref_min" not in th
    assert th["ir_min"] == 2.0 and th["ge_fine_norm_max"] == 0.08 - 1.0
    assert (th["true_pass"], th["false_pass"]) == (0.0, 0.0)


def test_a_fixed_bound_leaves_the_false_pass_budget_of_every_corrupted_clip():
    """Target 0.1 of 10 corrupted clips: one may pass. The fixed parallax bound rejects 5, so
    one of the other 5 (20 % of them) may pass, and the GE bound can take every clean clip;
    without the rescaling none of the 5 could pass and half the clean clips were lost."""
    clean = _rows([20.0] * 4, None, ge=[0.05, 0.06, 0.07, 0.08])
    bad = _rows([5.0] * 5 + [30.0] * 5, "breathing",
                ge=[0.01] * 5 + [0.065, 0.5, 0.5, 0.5, 0.5])
    th = fit_regime(clean, bad, "F", 0.1, fixed={"parallax_ref_min": 16.0})
    assert (th["true_pass"], th["false_pass"]) == (1.0, 0.1)
    assert th["ge_norm_max"] == pytest.approx(0.29)  # half way from 0.08 to 0.5
    ev = evaluate(clean + bad, {"F": th})
    assert (ev["true_pass"], ev["false_pass"]) == (1.0, 0.1)


def test_a_fitted_ir_bound_no_clip_falls_below_is_relaxed_to_the_floor():
    """IR 1.0 on every clip carries no information: the fitted ir_min (1.0) is relaxed to the
    paper's 0.97; a fixed ir_min is kept as set."""
    clean = _rows([10.0, 12.0], None)
    bad = _rows([5.0, 30.0], "breathing", ge=[0.5, 0.5])
    th = fit_regime(clean, bad, "F", 0.05, fixed={"parallax_ref_min": 12.0})
    assert th["ir_min"] == 0.97
    th = fit_regime(clean, bad, "F", 0.05, fixed={"ir_min": 0.99})
    assert th["ir_min"] == 0.99


# ------------------------------------------------------------------ select_bounds (measures)

INF = math.inf


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=torch.float64)


def test_the_fallback_candidates_of_a_statistic_no_clip_has_or_no_clean_clip_has():
    """The fallback (a corrupted clip above every clean one in statistic 0) replaces the
    candidate beyond the clean clips by one beyond every clip: 1 above 2.0 for statistic 0.
    Statistic 1: no clip has it -> no bound (-inf); only corrupted clips have it, and
    statistic 0 already rejects them -> still no bound (a bound there gains nothing)."""
    clean = _t([[0.5, INF], [0.6, INF]])
    assert select_bounds(clean, _t([[2.0, INF]]), [True, True], 0.0) == ([3.0, -INF], 0.0, 0.0)
    bad = _t([[2.0, INF], [0.1, 1.0]])
    assert select_bounds(clean, bad, [True, True], 0.0) == ([3.0, -INF], 0.0, 0.0)
    assert select_bounds(_t([[0.5, -INF], [0.6, -INF]]), _t([[2.0, -INF], [0.1, 1.0]]),
                         [True, False], 0.0) == ([3.0, INF], 0.0, 0.0)


def test_the_fallback_bound_lies_beyond_every_clip_not_only_the_corrupted_ones():
    """Statistic 1 of the corrupted clips (0.0 and missing) lies below the clean clips' (5, 6):
    the fallback candidates are 5, 6 and 7 (1 above every clip), the loosest, 5, is kept and
    moved half way down to 0.0: 2.5 (a candidate 1 above the corrupted clips alone, 1.0, would
    have given 0.5)."""
    clean = _t([[0.5, 5.0], [0.6, 6.0]])
    bad = _t([[2.0, INF], [0.1, 0.0]])
    assert select_bounds(clean, bad, [True, True], 0.0) == ([3.0, 2.5], 0.0, 0.0)


# ------------------------------------------------------------------ choose_pair (bench)

def _ok(v: float) -> ClipReward:
    return ClipReward(v, "ok", None, 4, 4)


def _up(x: float, k: int) -> float:
    for _ in range(k):
        x = math.nextafter(x, math.inf)
    return x


def _status(lo: float, hi: float, min_margin: float) -> str:
    return choose_pair("p", [("a", _ok(lo)), ("b", _ok(hi))], "epipolar",
                       min_margin=min_margin)["status"]


def test_the_margin_tolerance_is_four_ulps_of_the_largest_magnitude():
    """The tolerance is 4 eps of max(|min_margin|, |best|, |worst|): a margin short by 3 ulps
    of that scale is a pair, one short by 5 is skipped, whichever of the three is largest."""
    eps = sys.float_info.epsilon
    # min_margin the largest (rewards +-0.3, margin 0.6 exactly): 3 ulps of 0.6 short
    mm = _up(0.6, 3)
    assert 0.3 - -0.3 == 0.6 and 2 * eps * 0.6 < mm - 0.6 < 4 * eps * 0.6
    assert _status(-0.3, 0.3, mm) == "pair"
    # the best reward the largest (1.0, worst 0.5: margin 0.5 exactly): 6 ulps of 0.5 short
    mm = _up(0.5, 6)
    assert 2 * eps * 0.5 < mm - 0.5 < 4 * eps * 1.0
    assert _status(0.5, 1.0, mm) == "pair"
    # 5 ulps of the scale short: skipped (3 ulps: a pair)
    for k, want in ((3, "pair"), (5, "skipped")):
        mm = 0.5 + k * eps * 1.0  # the scale is the best reward, 1.0
        assert _status(0.5, 1.0, mm) == want, k


# ------------------------------------------------------------------ cut animations (io)

def _pan(n: int) -> List[np.ndarray]:
    """``n`` frames (48, 64, 3) uint8: a smooth random texture moving 3 px a frame."""
    g = np.random.default_rng(16).integers(0, 256, (48 + 4, 64 + 3 * n + 4, 3)).astype(float)
    g = sum(g[i:i + 48, j:j + 64 + 3 * n] for i in range(5) for j in range(5)) / 25
    g = np.clip((g - 128) * 4 + 128, 0, 255).astype(np.uint8)
    return [np.ascontiguousarray(g[:, 3 * t:3 * t + 64]) for t in range(n)]


def _animation(path: Path, n: int) -> Path:
    """``n`` frames as a GIF or (suffix .png) APNG written by PIL, 40 ms each."""
    from PIL import Image

    ims = [Image.fromarray(a) for a in _pan(n)]
    ims[0].save(path, save_all=True, append_images=ims[1:], duration=40, loop=0)
    return path


def _packets(path: Path) -> list:
    with av.open(str(path)) as c:
        return [(p.pos, p.size) for p in c.demux(video=0) if p.size]


def _frames(path: Path) -> np.ndarray:
    return read_clip(path, long_side=None).frames.permute(0, 2, 3, 1).numpy()


def test_apng_cut_at_a_packet_boundary_loses_the_frames_its_actl_announces(tmp_path):
    """Cut right after its 13th frame's packet: no packet is flagged corrupt and no decode
    fails, but the stream's data runs to the end of the file, which shows the cut: 17 of 30
    frames lost (an error), not a container count that is wrong."""
    png = _animation(tmp_path / "pan.png", 30)
    pos, size = _packets(png)[12]
    cut = tmp_path / "cut.png"
    cut.write_bytes(png.read_bytes()[:pos + size])
    r = decode_report(read_clip(cut, long_side=None).meta)
    assert (r["announced_frames"], r["decoded_frames"], r["lost_frames"]) == (30, 13, 17)
    assert r["truncated"] and "container_count_mismatch" not in r
    assert "corrupt_packets" not in r and r["decode_errors"] == 0
    reason, _ = decode_verdict(r, 0.1)
    assert reason is not None and reason.startswith("17 of 30 frames (57 %) were lost")


def test_gif_cut_inside_a_graphic_control_block_keeps_the_frame_before(tmp_path):
    """A GIF cut 5 bytes into its 20th frame's packet (inside the 8-byte graphic control
    extension): that packet decodes to no frame, so the 19th frame, whole, is kept (only a
    frame decoded from the partial packet is dropped)."""
    gif = _animation(tmp_path / "pan.gif", 24)
    full = _frames(gif)
    pos, _ = _packets(gif)[19]
    data = gif.read_bytes()
    assert data[pos:pos + 3] == b"\x21\xf9\x04"  # the packet starts with that extension
    cut = tmp_path / "cut.gif"
    cut.write_bytes(data[:pos + 5])
    got = _frames(cut)
    assert got.shape[0] == 19
    np.testing.assert_array_equal(got, full[:19])
    r = decode_report(read_clip(cut, long_side=None).meta)
    assert r["truncated"] and r["decoded_frames"] == 19 and "trailer" in r["truncation"]


# ------------------------------------------------------------------ top-level boxes (io)

MP4 = frozenset({"mov", "mp4", "m4a"})
AVI = frozenset({"avi"})


def _box(kind: bytes, payload: bytes, size: Optional[int] = None) -> bytes:
    return struct.pack(">I4s", 8 + len(payload) if size is None else size, kind) + payload


def _runs_past(tmp_path: Path, data: bytes, formats: frozenset) -> bool:
    path = tmp_path / "f.bin"
    path.write_bytes(data)
    return structure_runs_past_end(path, formats)


def test_iso_boxes_that_run_past_the_end_of_the_file(tmp_path):
    ftyp = _box(b"ftyp", b"isom\0\0\0\0")
    full = ftyp + _box(b"mdat", b"x" * 100)
    assert not _runs_past(tmp_path, full, MP4)
    assert _runs_past(tmp_path, full[:-10], MP4)
    # a box header cut short (3 bytes of the next box) is a cut
    assert _runs_past(tmp_path, full + b"\0\0\0", MP4)
    # size 0: the box runs to the end of the file by definition, whatever its length
    assert not _runs_past(tmp_path, ftyp + struct.pack(">I4s", 0, b"mdat") + b"x" * 50, MP4)
    # size 1: a 64-bit size follows the type (a large mdat)
    wide = ftyp + struct.pack(">I4sQ", 1, b"mdat", 16 + 100) + b"x" * 100
    assert not _runs_past(tmp_path, wide, MP4)
    assert _runs_past(tmp_path, wide[:-10], MP4)
    assert _runs_past(tmp_path, wide + _box(b"free", b"y" * 40)[:-8], MP4)
    assert not _runs_past(tmp_path, full[:-10], frozenset({"matroska", "webm"}))


def test_riff_chunks_are_walked_with_their_pad_byte(tmp_path):
    """A RIFF chunk of odd length is followed by a pad byte that its length does not count."""
    riff = struct.pack("<4sI", b"RIFF", 5) + b"AVI L" + b"\0"
    full = riff + struct.pack("<4sI", b"JUNK", 4) + b"abcd"
    assert not _runs_past(tmp_path, full, AVI)
    assert _runs_past(tmp_path, full[:-1], AVI)
    assert _runs_past(tmp_path, riff[:-4], AVI)


# ------------------------------------------------------------------ cut evidence (io)

def test_what_shows_a_cut_when_a_complete_decode_falls_short(tmp_path):
    """An AVI announcing 300 frames of which 30 decode, its RIFF chunk complete (1000 bytes):
    nothing shows a cut (the count is wrong) unless one of the documented signs does."""
    path = tmp_path / "f.avi"
    path.write_bytes(struct.pack("<4sI", b"RIFF", 992) + b"AVI " + b"\0" * 988)

    def evidence(errors=(), **log) -> Optional[str]:
        log = dict({"packets": 30, "end": 500}, **log)
        dec = Decoded(decoded=30, complete=True, container_frames=300, formats=AVI,
                      errors=list(errors), packets=PacketLog(**log))
        assert dec.short_by() == 270
        return _cut_evidence(dec, path)

    assert evidence() is None
    assert evidence(errors=["decode: Invalid data"]) == "decode errors"
    assert evidence(corrupt=1) == "packets flagged corrupt"
    assert evidence(cut="the GIF ends without its trailer byte (0x3B)").startswith("the GIF")
    assert evidence(packets=33) == "packets the decoder dropped"
    assert evidence(packets=32) is None  # within the count slack
    assert evidence(end=1000) == "data that runs to the end of the file"
    assert evidence(end=999) is None
    assert evidence(end=None) == "data that runs to the end of the file"


def test_truncated_and_container_meta_of_a_decode():
    """A packet flagged corrupt alone makes a complete decode truncated; a format without a
    length says so, and says its last frame was concealed only for a complete decode."""
    dec = Decoded(decoded=10, complete=True, packets=PacketLog(packets=10, corrupt=1))
    assert dec.truncated and dec.container_meta() == {"corrupt_packets": 1}
    assert not Decoded(decoded=10, complete=True, packets=PacketLog(packets=10)).truncated
    ts = frozenset({"mpegts"})
    assert Decoded(decoded=10, complete=True, formats=ts, last_concealed=True
                   ).container_meta() == {"length_known": False, "last_frame_concealed": True}
    assert Decoded(decoded=10, complete=False, formats=ts, last_concealed=True
                   ).container_meta() == {"length_known": False}


def test_a_read_that_stops_early_does_not_count_the_look_ahead_packets(tmp_path):
    """An mp4 with B-frames whose last packet is cut short (flagged corrupt): read in full it
    is truncated; read up to frame 40, the packets the look-ahead past the selection demuxes
    (it checks for damage just past it) are not the read's, so it is not."""
    path = tmp_path / "bf.mp4"
    with av.open(str(path), "w", options={"movflags": "faststart"}) as c:
        s = c.add_stream("libx264", rate=24)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        s.options = {"threads": "1", "bf": "3"}
        for a in _pan(60):
            for q in s.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(q)
        for q in s.encode():
            c.mux(q)
    pos, size = max(_packets(path))
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(path.read_bytes()[:pos + size // 2])
    meta = read_clip(cut, long_side=None).meta
    assert meta["truncated"] and meta["corrupt_packets"] == 1
    meta = read_clip(cut, long_side=None, max_frames=40).meta
    assert meta["decoded_frames"] == 40 and not meta["decode_complete"]
    assert not meta["truncated"] and "corrupt_packets" not in meta


# ------------------------------------------------------------------ rate changes (io)

def test_a_run_of_five_equal_long_steps_is_a_rate_change():
    ones = [1.0] * 20
    run5 = np.array(ones + [2.0] * 5 + ones)
    assert rate_change(run5) and variable_rate(run5)
    run4 = np.array(ones + [2.0] * 4 + ones)  # 4 drops in 44 steps: rare, on the grid
    assert not rate_change(run4) and not variable_rate(run4)
    # five long steps, each alone between runs of normal ones: scattered drops
    scattered = np.array(([1.0] * 6 + [2.0]) * 5 + [1.0] * 6)
    assert not rate_change(scattered) and not variable_rate(scattered)
    # the run is of whole multiples: jittered timestamps (a 1 ms time base) round to 2
    jitter = np.array(ones + [2.02, 1.98, 2.0, 2.03, 1.97] + ones)
    assert rate_change(jitter) and variable_rate(jitter)
    assert not rate_change(np.array(ones + [2.0] * 3 + [3.0] * 2 + ones))


def test_a_partial_read_of_a_complete_apng_announces_no_count(tmp_path):
    """Decoding stopped after 10 frames (``max_frames``): the APNG's acTL count is used only
    where a complete decode fell short of it, so none is announced and no count is known."""
    png = _animation(tmp_path / "pan.png", 30)
    clip = read_clip(png, long_side=None, max_frames=10)
    r = decode_report(clip.meta)
    assert clip.meta["decode_complete"] is False and r["decoded_frames"] == 10
    assert r["announced_frames"] is None and clip.meta["num_source_frames"] is None
    assert not r["truncated"] and r["lost_frames"] == 0


def test_an_mpeg_program_stream_records_no_length(tmp_path):
    """MPEG-PS (FFmpeg's "mpeg" format, as a .mpg / .vob) estimates its duration from its own
    last timestamps, as MPEG-TS does: a cut cannot be seen, and the clip says so."""
    path = tmp_path / "clip.mpg"
    with av.open(str(path), "w", format="mpeg") as c:
        s = c.add_stream("mpeg2video", rate=25)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        for a in _pan(12):
            for q in s.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(q)
        for q in s.encode():
            c.mux(q)
    r = decode_report(read_clip(path, long_side=None).meta)
    assert r["length_known"] is False and r["decoded_frames"] == 12
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is None and len(warnings) == 1 and "records no length" in warnings[0]


def test_report_of_a_trimmed_clip_with_a_gap_and_of_a_format_without_length():
    """Edit-list preroll: 20 announced less 5 discarded = the 15 decoded, so a timestamp gap is
    worded as what the timestamps suggest. A format without a length names a concealed last
    frame only where the decode saw one."""
    r = decode_report({"source": "video", "container_frames": 20, "preroll_frames": 5,
                       "decoded_frames": 15, "decode_complete": True, "timestamp_gaps": 1,
                       "timestamp_missing_frames": 1})
    assert (r["lost_frames"], r["preroll_frames"]) == (1, 5)
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is None and warnings[0].startswith(
        "timestamp gaps suggest 1 of 16 frames (6 %) are missing, the container's count "
        "matching the frames decoded")
    meta = {"source": "video", "decoded_frames": 10, "length_known": False}
    r = decode_report(meta)
    assert r["length_known"] is False and "last_frame_concealed" not in r
    assert decode_verdict(r, 0.1)[1][0].endswith("cannot be detected")
    r = decode_report(dict(meta, last_frame_concealed=True))
    assert r["last_frame_concealed"] is True
    assert decode_verdict(r, 0.1)[1][0].endswith("as a cut file's does")


def _trimmed(folder: Path) -> Path:
    """40 frames with a keyframe every 20, stream-copied from the keyframe at 20 and shown
    from frame 25 (``ffmpeg -ss`` with ``-c copy``): frames 20-24 are edit-list preroll."""
    full = folder / "full.mp4"
    with av.open(str(full), "w") as c:
        s = c.add_stream("libx264", rate=24)
        s.width, s.height, s.pix_fmt = 64, 48, "yuv420p"
        s.options = {"threads": "1", "g": "20", "keyint_min": "20", "sc_threshold": "0"}
        for a in _pan(40):
            for q in s.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(q)
        for q in s.encode():
            c.mux(q)
    return stream_copy_trim(full, folder / "trim.mp4")


def test_a_trimmed_mp4_counts_its_source_frames_after_the_preroll(tmp_path):
    """The mp4 announces 20 frames, 5 of them preroll its edit list discards: a read that
    stops early knows 15 source frames, and an index past them is out of range without the
    container's count being called wrong (eager and streamed reads alike)."""
    trim = _trimmed(tmp_path)
    meta = read_clip(trim, long_side=None, max_frames=4).meta
    assert not meta["decode_complete"] and meta["num_source_frames"] == 15
    assert meta["preroll_frames"] == 5 and meta["container_frames"] == 20
    for stream in (False, True):
        with pytest.raises(VideoReadError, match=r"the clip has 15 frames") as err:
            read_clip(trim, long_side=None, indices=[3, 15], stream=stream)
        assert "announces" not in str(err.value)
