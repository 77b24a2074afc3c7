"""Behaviour of the io modules added in 0.2.3 that no other default test pins (mutation audit
s27, round 14): the rounding of the composite over black, a paletted frame whose only
non-opaque entry is 254, the bit depth and colour names of ``io.color`` (the stream's tags where
the frame has none, codes without a name, a matrix that is not the primaries), a linear-light
source's warning, the frozen rule of an HDR source (its sampled frames, exactly at the
threshold, a one-frame clip), the folder messages and TIFF alpha headers of the image reader,
the writer, the atomic output and the pinned file hashes. Closed-form inputs: synthetic frames,
lossless ffv1 clips and image files, all made here."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from helpers import write_ffv1, yuv_frame

from geocon_torch.io.decode import Decoded, frame_color, stream_color_codes
from geocon_torch.io.frame_rgb import composite_rgb, over_black
from geocon_torch.io.integrity import decode_report, decode_verdict
from geocon_torch.io.reader import read_clip
from geocon_torch.io.sampling import HDR_MOTION_SLOPE, FrameMotion, frozen_max_mad

av = pytest.importorskip("av")
cv2 = pytest.importorskip("cv2")

#: colour tags (frame / codec context attribute -> code) of a PQ, an HLG and a linear source
PQ = {"color_trc": 16, "color_primaries": 9, "colorspace": 9, "color_range": 1}
HLG = dict(PQ, color_trc=18)
LINEAR = dict(PQ, color_trc=8)
#: the tags of a frame that says nothing (FFmpeg's "unspecified" codes)
UNTAGGED = {"color_trc": 2, "color_primaries": 2, "colorspace": 2, "color_range": 0}


# --- frame_rgb ------------------------------------------------------------------------------

def test_over_black_rounds_to_nearest_not_up():
    """round(rgb * alpha / 255): 127 * 1 / 255 = 0.498 -> 0, 128 / 255 = 0.502 -> 1,
    127 * 254 / 255 = 126.502 -> 127, 254 * 254 / 255 = 253.004 -> 253; 16-bit:
    200 * 32767 / 65535 = 99.998 -> 100."""
    rgb = np.array([[[127, 128, 254]]], np.uint8)
    out, partial = over_black(rgb, np.array([[1]], np.uint8))
    assert out.tolist() == [[[0, 1, 1]]] and partial == 1
    out, _ = over_black(rgb, np.array([[254]], np.uint8))
    assert out.tolist() == [[[127, 127, 253]]]
    out, partial = over_black(np.full((1, 2, 3), 200, np.uint8),
                              np.array([[32767, 65535]], np.uint16), 65535)
    assert out[0, :, 0].tolist() == [100, 200] and partial == 1


def test_a_palette_entry_of_alpha_254_is_composited():
    """Every palette entry blue 255; entry 1 has alpha 254 (partly transparent): the 12 pixels
    of that entry are composited (255 * 254 / 255 = 254) and counted, the others kept."""
    index = np.zeros((4, 6), np.uint8)
    index[:, 3:] = 1
    palette = np.zeros((256, 4), np.uint8)  # PyAV's from_ndarray order: A, R, G, B
    palette[:] = [255, 0, 0, 255]
    palette[0] = [255, 10, 20, 255]
    palette[1] = [254, 255, 100, 255]
    rgb, partial = composite_rgb(av.VideoFrame.from_ndarray((index, palette), format="pal8"))
    assert partial == 12
    assert rgb[0, 0].tolist() == [10, 20, 255]
    assert rgb[0, 5].tolist() == [254, 100, 254]


# --- decode: io.color ------------------------------------------------------------------------

def _frame(pix_fmt: str = "yuv420p", tags=None) -> "av.VideoFrame":
    """A mid-grey 8-bit 4:2:0 frame of 16x12 (or a blank frame of ``pix_fmt``) with ``tags``."""
    if pix_fmt != "yuv420p":
        return av.VideoFrame(16, 12, pix_fmt)
    planes = [np.full((12, 16), 126, np.uint8), np.full((6, 8), 128, np.uint8),
              np.full((6, 8), 128, np.uint8)]
    return yuv_frame(planes, "yuv420p", UNTAGGED if tags is None else tags)


def test_bits_are_the_deepest_component():
    """rgb565: components of 5, 6 and 5 bits -> 6; gray16: 16."""
    assert frame_color(_frame("rgb565le"))["bits"] == 6
    assert frame_color(_frame("gray16le"))["bits"] == 16


def test_an_untagged_frame_takes_the_stream_tags():
    """A frame whose tags are FFmpeg's "unspecified" codes takes each from the stream's."""
    got = frame_color(_frame(), {"color_trc": 16, "color_primaries": 9, "colorspace": 9,
                                 "color_range": 1})
    assert got == {"pix_fmt": "yuv420p", "bits": 8, "transfer": "smpte2084",
                   "primaries": "bt2020", "matrix": "bt2020nc", "range": "tv"}
    # a tagged frame keeps its own tags
    own = frame_color(_frame(tags=dict(PQ, color_range=2)), {"color_range": 1})
    assert own["range"] == "pc" and own["transfer"] == "smpte2084"


def test_colour_names_of_every_record_key():
    """The matrix is read from ``colorspace``, not from the primaries; a code without a name is
    written as its number; linear and bt2020-10 transfers have FFmpeg's names."""
    got = frame_color(_frame(tags={"color_trc": 8, "color_primaries": 1, "colorspace": 6,
                                   "color_range": 2}))
    assert got["transfer"] == "linear" and got["primaries"] == "bt709"
    assert got["matrix"] == "smpte170m" and got["range"] == "pc"
    assert frame_color(_frame(tags=dict(PQ, color_trc=14)))["transfer"] == "bt2020-10"
    # an unnamed (reserved) code from the stream, on an untagged frame
    assert frame_color(_frame(), {"color_trc": 3, "color_primaries": 3})["transfer"] == "3"


def test_a_frame_without_tag_attributes_is_unknown():
    """A frame object with a pixel format but no colour attributes (an older PyAV), no
    fallback: every tag "unknown" (range's "not tagged" code is 0, not 2 = "pc")."""
    stand_in = SimpleNamespace(format=av.VideoFormat("yuv420p"))
    got = frame_color(stand_in)
    assert got == {"pix_fmt": "yuv420p", "bits": 8, "transfer": "unknown",
                   "primaries": "unknown", "matrix": "unknown", "range": "unknown"}
    got = frame_color(stand_in, {"color_range": 2, "colorspace": 0})
    assert got["range"] == "pc" and got["matrix"] == "gbr"


def test_stream_color_codes_keep_zero_codes(tmp_path):
    """An ffv1 stream tagged matrix 0 (GBR) and range 2: the stream's codes include the 0 (a
    real code, "gbr"), so an untagged frame reads matrix "gbr"."""
    tags = {"color_trc": 13, "color_primaries": 1, "colorspace": 0, "color_range": 2}
    frame = av.VideoFrame.from_ndarray(np.zeros((12, 16, 3), np.uint8), format="rgb24")
    path = write_ffv1(tmp_path / "gbr.mkv", [frame.reformat(format="yuv444p")], tags)
    with av.open(str(path)) as container:
        codes = stream_color_codes(container.streams.video[0])
    assert codes == tags
    assert frame_color(_frame(), codes)["matrix"] == "gbr"
    assert stream_color_codes(SimpleNamespace()) == {}


def test_decoded_note_takes_the_stream_tags_for_an_untagged_first_frame():
    """Decoded.note records the first frame's colour with the stream's tags as fallback."""
    dec = Decoded(stream_color=dict(HLG))
    dec.note(_frame())
    assert dec.color["transfer"] == "arib-std-b67" and dec.color["matrix"] == "bt2020nc"
    dec.note(_frame(tags=dict(PQ)))  # later frames do not change it
    assert dec.color["transfer"] == "arib-std-b67"
    assert dec.metadata(Path("x.mkv"))["color"] == dec.color


# --- sampling: the frozen rule of an HDR source -----------------------------------------------

#: frames of the tagged clips: 5 frames of 32x24, 8-bit 4:4:4
N, FH, FW = 5, 24, 32


def _stripes(tags, n: int = N):
    """``n`` frames of flat grey (Y' 120) with every 8th column at Y' 121, the stripes moved
    one column per frame: about 0.29 grey levels of mean absolute difference per pair, between
    the PQ / HLG thresholds and SDR's 0.5."""
    frames = []
    for k in range(n):
        y = np.full((FH, FW), 120, np.uint8)
        y[:, (np.arange(FW) + k) % 8 == 0] = 121
        c = np.full((FH, FW), 128, np.uint8)
        frames.append(yuv_frame([y, c, c], "yuv444p", tags))
    return frames


def _mad(frames) -> float:
    """The largest mean absolute difference of consecutive frames' RGB (the reader's
    conversion: composite_rgb of the same Y'CbCr frames)."""
    rgb = [composite_rgb(f)[0].astype(np.int64) for f in frames]
    return max(float(np.abs(b - a).mean()) for a, b in zip(rgb, rgb[1:]))


@pytest.fixture(scope="module")
def tagged(tmp_path_factory):
    """name -> (path, the largest mad of consecutive frames) of the stripes as PQ, HLG, linear
    light and SDR (BT.709), and a one-frame PQ clip."""
    root = tmp_path_factory.mktemp("m14")
    out = {}
    for name, tags in (("pq", PQ), ("hlg", HLG), ("linear", LINEAR),
                       ("sdr", dict(PQ, color_trc=1, color_primaries=1, colorspace=1))):
        frames = _stripes(tags)
        out[name] = (write_ffv1(root / f"{name}.mkv", frames, tags), _mad(frames))
    out["pq_one"] = (write_ffv1(root / "pq_one.mkv", _stripes(PQ, 1), PQ), None)
    return out


@pytest.mark.parametrize("name, transfer", [("pq", "smpte2084"), ("hlg", "arib-std-b67")])
def test_hdr_motion_between_the_thresholds_is_not_frozen_kept_or_sampled(tagged, name, transfer):
    """A PQ / HLG clip moving by 0.29 grey levels: over its scaled threshold, so neither the
    kept frames nor the sampled ones (every 2nd: frames 0, 2, 4) are frozen."""
    path, mad = tagged[name]
    assert frozen_max_mad(transfer) < mad < 0.5
    motion = read_clip(str(path), long_side=None, motion_every=2).meta["motion"]
    assert motion["max_mad"] == pytest.approx(mad, abs=1e-12)
    assert motion["pairs"] == N - 1 and motion["frozen"] is False
    assert motion["sampled"]["pairs"] == 2 and motion["sampled"]["frozen"] is False
    assert motion["sampled"]["max_mad"] > frozen_max_mad(transfer)
    streamed = read_clip(str(path), long_side=None, motion_every=2, stream=True).meta["motion"]
    assert streamed == motion


def test_sdr_and_linear_clips_of_the_same_motion_are_frozen(tagged):
    """The same motion tagged BT.709 or linear light: threshold 0.5, frozen (kept and
    sampled); linear light warns that it was read as SDR code values."""
    for name in ("sdr", "linear"):
        clip = read_clip(str(tagged[name][0]), long_side=None, motion_every=2)
        motion = clip.meta["motion"]
        assert motion["frozen"] is True and motion["sampled"]["frozen"] is True
    block = decode_report(clip.meta)
    assert block["color"] == {"pix_fmt": "yuv444p", "bits": 8, "transfer": "linear",
                              "primaries": "bt2020", "matrix": "bt2020nc", "range": "tv"}
    reason, warnings = decode_verdict(block, 0.1)
    assert reason is None
    assert warnings == ["linear-light source read as SDR code values without tone mapping: "
                        "geometry scores are comparable, motion statistics are compressed "
                        "(transfer linear)"]


def test_frames_without_transfer_tags_take_the_stream_transfer(tagged, monkeypatch):
    """Decoded frames that leave transfer and primaries unspecified (the stream's container
    tags them): io.color and the frozen threshold come from the stream, so the PQ clip is
    still PQ and not frozen."""
    from geocon_torch.io import decode

    real = decode.iter_frames

    def untagged(container, stream, errors):
        for frame in real(container, stream, errors):
            frame.color_trc, frame.color_primaries = 2, 2
            yield frame

    monkeypatch.setattr(decode, "iter_frames", untagged)
    clip = read_clip(str(tagged["pq"][0]), long_side=None)
    color = decode_report(clip.meta)["color"]
    assert color["transfer"] == "smpte2084" and color["primaries"] == "bt2020"
    assert clip.meta["motion"]["frozen"] is False


def test_a_one_frame_hdr_clip_has_no_pair_and_is_not_frozen(tagged):
    """One PQ frame: no pair, max_mad None, not frozen (kept and sampled alike)."""
    motion = read_clip(str(tagged["pq_one"][0]), long_side=None, motion_every=2).meta["motion"]
    assert motion == {"max_mad": None, "pairs": 0, "frozen": False,
                      "sampled": {"max_mad": None, "pairs": 0, "frozen": False, "every": 2}}


def test_frame_motion_with_another_threshold_is_inclusive():
    """record(max_mad): frozen when the largest mean absolute difference is within it, the
    bound included (3 of 12 values differ by 1: 0.25), whatever the SDR rule says (9 of 12
    differ by 1: 0.75, over 0.5, frozen under a threshold of 1.0)."""
    motion = FrameMotion()
    a = np.zeros((2, 2, 3), np.uint8)
    b = a.copy()
    b.reshape(-1)[:3] = 1
    motion.add(0, a, kept=True)
    motion.add(1, b, kept=True)
    assert motion.record(0.25) == {"max_mad": 0.25, "pairs": 1, "frozen": True}
    assert motion.record(0.125)["frozen"] is False
    c = b.copy()
    c.reshape(-1)[:3], c.reshape(-1)[3:9] = 0, 1
    motion.add(2, c, kept=True)
    assert motion.record()["frozen"] is False and motion.record(1.0)["frozen"] is True


def test_hdr_motion_slopes_round_the_slopes_at_reference_white():
    """HDR_MOTION_SLOPE is d(signal) / dv at SDR white v = 1 placed as BT.2408 does (PQ:
    203 cd/m2 = 203 v ** 2.4; HLG: scene light 0.2647 v ** 2.4), rounded to 3 decimals; the
    frozen thresholds are 0.5 times these."""
    m1, m2 = 2610 / 16384, 2523 / 4096 * 128
    c1, c2, c3 = 3424 / 4096, 2413 / 4096 * 32, 2392 / 4096 * 32

    def pq(v):
        y = (203.0 * v ** 2.4 / 10000.0) ** m1
        return ((c1 + c2 * y) / (1 + c3 * y)) ** m2

    def hlg(v):
        a = 0.17883277
        b, c = 1 - 4 * a, 0.5 - a * np.log(4 * a)
        return a * np.log(12 * 0.2647 * v ** 2.4 - b) + c

    h = 1e-7
    for transfer, curve in (("smpte2084", pq), ("arib-std-b67", hlg)):
        slope = (curve(1.0) - curve(1.0 - h)) / h
        assert HDR_MOTION_SLOPE[transfer] == round(slope, 3)
        assert frozen_max_mad(transfer) == 0.5 * round(slope, 3)


# --- images: folder messages -------------------------------------------------------------------

def _folder_error(folder: Path) -> str:
    from geocon_torch.errors import VideoReadError

    with pytest.raises(VideoReadError) as info:
        read_clip(str(folder))
    return str(info.value)


def test_a_folder_without_frames_names_its_three_commonest_suffixes(tmp_path):
    """Suffixes are counted in lower case, hidden files are not (neither frames nor counted),
    a name without a suffix counts as "(no suffix)"; the three commonest are named, ties by
    name, with " ..." only when there are more."""
    many = tmp_path / "many"
    many.mkdir()
    for name in ("a1.PPM", "a2.ppm", "a3.Ppm", "n1.txt", "n2.TXT", "README", "x.dat"):
        (many / name).write_bytes(b"x")
    for name in (".DS_Store", ".thumb.png", ".a.dat", ".b.dat", ".c.dat"):
        (many / name).write_bytes(b"x")
    assert "; it holds 3 .ppm, 2 .txt, 1 (no suffix) ...; 0 frames" in _folder_error(many)
    three = tmp_path / "three"
    three.mkdir()
    for name in ("b1.ppm", "b2.ppm", "c.txt", "d.dat"):
        (three / name).write_bytes(b"x")
    assert _folder_error(three).endswith("; it holds 2 .ppm, 1 .dat, 1 .txt; 0 frames")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _folder_error(empty).endswith(".webp); 0 frames")


def test_an_upper_case_exr_file_is_decoded_by_pyav(tmp_path):
    """".EXR" is an EXR as ".exr" is (suffixes compared in lower case): read alone or in a
    folder, values clipped to [0, 1] x 255 (within 1 level of rounding)."""
    ramp = np.tile(np.linspace(0.0, 1.25, 40, dtype=np.float32), (8, 1))
    rgb = np.ascontiguousarray(np.stack([ramp, ramp * 0.5, ramp[:, ::-1]], -1))
    folder = tmp_path / "exr"
    folder.mkdir()
    for name in ("a0.EXR", "a1.Exr"):
        with av.open(str(folder / name), "w", format="image2") as out:
            stream = out.add_stream("exr", rate=24)
            stream.width, stream.height, stream.pix_fmt = 40, 8, "gbrpf32le"
            frame = av.VideoFrame.from_ndarray(rgb, format="gbrpf32le")
            frame.pts = 0
            for packet in list(stream.encode(frame)) + list(stream.encode()):
                out.mux(packet)
    want = np.rint(np.clip(rgb, 0, 1) * 255)
    one = read_clip(str(folder / "a0.EXR"), long_side=None).frames[0].permute(1, 2, 0).numpy()
    assert np.abs(one.astype(float) - want).max() <= 1
    clip = read_clip(str(folder), long_side=None)
    assert clip.num_frames == 2
    assert np.array_equal(clip.frames[0].permute(1, 2, 0).numpy(), one)


# --- writer ------------------------------------------------------------------------------------

def test_image_folder_frames_are_rounded_clamped_and_grey_repeated(tmp_path):
    """Float frames are written as round(clamp(x, 0, 1) * 255) (100.6 / 255 -> 101, not 100;
    1.2 -> 255; -0.1 -> 0), a grey frame as three equal channels, as {prefix}{i:05d}.png."""
    import torch

    from geocon_torch.io.writer import write_image_folder

    frames = torch.full((2, 1, 4, 6), 100.6 / 255, dtype=torch.float64)
    frames[1, 0, :, :3], frames[1, 0, :, 3:] = 1.2, -0.1
    write_image_folder(tmp_path / "out", frames, prefix="f_")
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["f_00000.png", "f_00001.png"]
    first = cv2.imread(str(tmp_path / "out" / "f_00000.png"), cv2.IMREAD_UNCHANGED)
    assert first.shape == (4, 6, 3) and (first == 101).all()
    second = cv2.imread(str(tmp_path / "out" / "f_00001.png"), cv2.IMREAD_UNCHANGED)
    assert (second[:, :3] == 255).all() and (second[:, 3:] == 0).all()


def test_write_video_refuses_odd_sizes_and_four_channels(tmp_path):
    """An odd width is a ShapeError that names the size (not an encoder error); so are four
    channels and no frame."""
    import torch

    from geocon_torch.errors import ShapeError
    from geocon_torch.io.writer import write_video

    with pytest.raises(ShapeError, match="needs even width and height, got 33x24"):
        write_video(tmp_path / "odd.mp4", torch.zeros(2, 3, 24, 33, dtype=torch.uint8))
    with pytest.raises(ShapeError, match=r"got \(2, 4, 24, 32\)"):
        write_video(tmp_path / "rgba.mp4", torch.zeros(2, 4, 24, 32, dtype=torch.uint8))
    with pytest.raises(ShapeError, match="at least one frame"):
        write_video(tmp_path / "none.mp4", torch.zeros(0, 3, 24, 32, dtype=torch.uint8))
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_write_video_rate_crf_and_faststart(tmp_path):
    """fps 30000/1001 is kept exactly (limit_denominator(1001)); crf 0 writes more bytes than
    crf 40; faststart puts the moov atom before the media data, the default after it."""
    import torch

    from geocon_torch.io.writer import write_video

    rng = np.random.default_rng(3)
    frames = torch.from_numpy(rng.integers(0, 256, (3, 3, 32, 48), dtype=np.uint8))
    ntsc = write_video(tmp_path / "ntsc.mp4", frames, fps=30000 / 1001, crf=40)
    with av.open(str(ntsc)) as container:
        stream = container.streams.video[0]
        assert stream.average_rate == Fraction(30000, 1001) and stream.frames == 3
    fine = write_video(tmp_path / "fine.mp4", frames, fps=30000 / 1001, crf=0)
    assert fine.stat().st_size > ntsc.stat().st_size
    fast = write_video(tmp_path / "fast.mp4", frames, crf=40, faststart=True).read_bytes()
    slow = ntsc.read_bytes()
    assert fast.index(b"moov") < fast.index(b"mdat") and slow.index(b"moov") > slow.index(b"mdat")


# --- pinned_files ------------------------------------------------------------------------------

def test_folder_digest_is_sha256_of_names_sizes_and_bytes(tmp_path):
    """A folder's digest: SHA-256 over each file (sorted relative names, hidden files too) of
    "name NUL size NUL" and its bytes; a renamed file changes it."""
    import hashlib

    from geocon_torch.io.pinned_files import file_digest

    (tmp_path / "w" / "sub").mkdir(parents=True)
    files = {"b.bin": b"22", ".hidden": b"1", "sub/a.bin": b"333"}
    for rel, data in files.items():
        (tmp_path / "w" / rel).write_bytes(data)
    want = hashlib.sha256()
    for rel in sorted(files):
        want.update(f"{rel}\0{len(files[rel])}\0".encode() + files[rel])
    assert file_digest(tmp_path / "w") == want.hexdigest()
    (tmp_path / "w" / "b.bin").rename(tmp_path / "w" / "c.bin")
    assert file_digest(tmp_path / "w") != want.hexdigest()


def test_a_file_rewritten_at_the_same_size_gets_its_new_digest(tmp_path):
    """The digest cache is keyed by size and modification time: new bytes of the same size
    (a later mtime) are hashed again."""
    import hashlib
    import os

    from geocon_torch.io.pinned_files import file_digest

    path = tmp_path / "w.pth"
    path.write_bytes(b"weights A")
    os.utime(path, ns=(1_000_000_000, 1_000_000_000))
    assert file_digest(path) == hashlib.sha256(b"weights A").hexdigest()
    path.write_bytes(b"weights Z")
    os.utime(path, ns=(2_000_000_000, 2_000_000_000))
    assert file_digest(path) == hashlib.sha256(b"weights Z").hexdigest()


def test_a_recorded_hash_must_be_64_lowercase_hex_digits(tmp_path):
    """Upper-case hex or 65 digits are refused as malformed, even where the file is missing."""
    from geocon_torch.config import GeoConConfig
    from geocon_torch.errors import ConfigError
    from geocon_torch.io.pinned_files import pin_files

    cfg = GeoConConfig().replace(gate={"dust3r_checkpoint": str(tmp_path / "none.pth")})
    read = {("gate", "dust3r_checkpoint"): str(tmp_path / "none.pth")}
    for bad in ("0123456789ABCDEF" * 4, "0123456789abcdef" * 4 + "0"):
        with pytest.raises(ConfigError, match="64 lowercase hex"):
            pin_files(cfg.replace(gate={"dust3r_checkpoint_sha256": bad}), read)


def test_a_fully_transparent_png_reads_black_and_counted(tmp_path):
    """Alpha 0 everywhere is transparent (only a 32-bit BMP's zero fourth byte is padding):
    the frame reads black and every pixel is counted."""
    from geocon_torch.io.images import read_image_alpha

    rgba = np.zeros((6, 8, 4), np.uint8)
    rgba[..., :3] = 200
    cv2.imwrite(str(tmp_path / "clear.png"), rgba)
    rgb, partial = read_image_alpha(tmp_path / "clear.png")
    assert partial == 48 and not rgb.any()


# --- integrity ---------------------------------------------------------------------------------

def _meta(**kw):
    """A clean decode of 10 announced frames, updated with ``kw``."""
    base = {"source": "video", "container_frames": 10, "decoded_frames": 10,
            "decode_complete": True, "decode_errors": [], "num_decode_errors": 0}
    return dict(base, **kw)


def test_io_block_keeps_five_errors_and_the_transparent_fraction():
    """first_errors: the first 5 messages (7 errors counted); the transparent fraction as the
    reader measured it; a tiny fraction is written as at least 0.01 %."""
    errors = [f"decode: packet {k}" for k in range(7)]
    block = decode_report(_meta(decode_errors=errors, num_decode_errors=7,
                                transparent_frames=3, transparent_fraction=2e-6))
    assert block["first_errors"] == errors[:5] and block["decode_errors"] == 7
    assert block["transparent_frames"] == 3 and block["transparent_fraction"] == 2e-6
    reason, warnings = decode_verdict(block, 0.1)
    assert reason is None
    assert warnings == ["7 decode error(s) but no frame lost: decode: packet 0",
                        "the source has an alpha channel (0.01 % of pixels transparent or "
                        "partly so, in 3 frame(s)): composited over black"]


def test_lost_fraction_at_the_limit_is_scored_and_an_early_stop_loses_nothing():
    """1 of 10 frames lost is 0.1: scored with a warning at max_lost_fraction 0.1 (an error
    only above it); a decode stopped early (the selection was satisfied) loses no frame."""
    block = decode_report(_meta(decoded_frames=9))
    assert block["lost_frames"] == 1 and block["lost_fraction"] == 0.1
    reason, warnings = decode_verdict(block, 0.1)
    assert reason is None and len(warnings) == 1
    assert warnings[0].startswith("1 of 10 frames (10 %) were lost while decoding")
    early = decode_report(_meta(decoded_frames=3, decode_complete=False))
    assert early["lost_frames"] == 0 and decode_verdict(early, 0.1) == (None, [])


def test_a_32_bit_bmp_with_alpha_is_composited(tmp_path):
    """A 32-bit BMP whose fourth byte varies is an alpha channel: composited over black."""
    from geocon_torch.io.images import read_image_alpha

    bgra = np.zeros((4, 6, 4), np.uint8)
    bgra[..., :3] = 255
    bgra[..., 3] = np.arange(6, dtype=np.uint8) * 51  # 0, 51, ..., 255 per column
    assert cv2.imwrite(str(tmp_path / "a.bmp"), bgra)
    rgb, partial = read_image_alpha(tmp_path / "a.bmp")
    assert partial == 20
    assert rgb[0, :, 0].tolist() == [0, 51, 102, 153, 204, 255]


def test_an_io_block_without_colour_has_no_color_key():
    """Images and tensors record no colour: their io block has no "color" key."""
    assert "color" not in decode_report(_meta(source="images"))
    assert "color" not in decode_report(_meta(source="tensor", color={}))


# --- _atomic -----------------------------------------------------------------------------------

def test_a_rename_error_from_another_file_names_the_output_second(tmp_path):
    """os.replace(other, temporary) failing: the other file stays first, the temporary in
    second place becomes the real output."""
    import errno

    from geocon_torch.io._atomic import name_output_error

    out = tmp_path / "roc.json"
    tmp = tmp_path / ".roc.partial-1-abc.json"
    exc = OSError(errno.EXDEV, "Invalid cross-device link", "/elsewhere/x", None, str(tmp))
    named = name_output_error(exc, out, tmp)
    assert (named.filename, named.filename2) == ("/elsewhere/x", str(out))
    own = name_output_error(OSError(errno.ENOSPC, "No space", str(tmp), None, str(out)), out,
                            tmp)
    assert (own.filename, own.filename2) == (str(out), None)
