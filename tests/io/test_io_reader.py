"""read_clip / read_clips / probe_video / content_hash on synthetic files and tensors."""
import hashlib
import os
import tracemalloc


import pytest
import torch

from geocon_torch.errors import VideoReadError
from geocon_torch.io import (content_hash, make_pairs, probe_video, read_clip, read_clips,
                             write_gif, write_image_folder, write_video)


def smooth_frames(t=12, h=96, w=128, seed=0):
    """(T, 3, H, W) uint8 smooth colour texture drifting right 2 px per frame (survives yuv420)."""
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(1, 3, h // 8, (w + 2 * t) // 8 + 1, generator=g)
    big = torch.nn.functional.interpolate(base, size=(h, w + 2 * t + 8), mode="bicubic")
    big = ((big - big.min()) / (big.max() - big.min()) * 200 + 30).to(torch.uint8)[0]
    return torch.stack([big[:, :, 2 * k:2 * k + w] for k in range(t)])


@pytest.fixture(scope="module")
def clip_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("io_clips")


@pytest.fixture(scope="module")
def frames12():
    return smooth_frames()


@pytest.fixture(scope="module")
def mp4(clip_dir, frames12):
    return write_video(clip_dir / "clip.mp4", frames12, fps=12)


# ------------------------------------------------------------------------------ video files

def test_mp4_roundtrip(mp4, frames12):
    clip = read_clip(mp4, long_side=None)
    assert clip.frames.shape == (12, 3, 96, 128) and clip.frames.dtype == torch.uint8
    assert (clip.frames.float() - frames12.float()).abs().mean() < 3.0  # crf 12 H.264
    assert clip.fps == pytest.approx(12.0)
    assert clip.frame_indices.tolist() == list(range(12))
    assert clip.source_size == (96, 128) and clip.scale == 1.0 and clip.name == "clip"
    m = clip.meta
    assert m["path"] == str(mp4) and m["codec"] == "h264" and m["source_fps"] == pytest.approx(12)
    assert m["container_frames"] == 12 and m["decoded_frames"] == 12 and not m["truncated"]
    assert clip.content_mask.all()


def test_resize_on_read(mp4, frames12):
    clip = read_clip(mp4, long_side=64)
    assert clip.size == (48, 64) and clip.scale == 0.5 and clip.meta["scale_xy"] == [0.5, 0.5]
    ref = torch.nn.functional.avg_pool2d(frames12.float(), 2)  # INTER_AREA at 1/2 = 2x2 mean
    assert (clip.frames.float() - ref).abs().mean() < 3.0
    up = read_clip(mp4)  # default long side 1024
    assert up.size == (768, 1024) and up.scale == 8.0


def test_file_to_device_and_no_upscale(mp4, device):
    clip = read_clip(mp4, long_side=1024, upscale=False, device=device)
    assert clip.size == (96, 128) and clip.scale == 1.0
    assert clip.frames.device == device and clip.content_mask.device == device
    assert clip.frame_indices.device == device


@pytest.mark.parametrize("ext, codec", [("webm", "libvpx"), ("avi", "mpeg4"), ("mkv", "ffv1"),
                                        ("mov", "libx264")])
def test_other_containers(clip_dir, frames12, ext, codec):
    path = write_video(clip_dir / f"clip.{ext}", frames12[:7], fps=7, codec=codec)
    clip = read_clip(path, long_side=None)
    assert clip.num_frames == 7 and clip.meta["decoded_frames"] == 7
    assert (clip.frames.float() - frames12[:7].float()).abs().mean() < 6.0
    info = probe_video(path)
    assert info.num_frames == 7 and info.counted == "decoded"
    assert (info.height, info.width) == (96, 128)
    assert info.fps == pytest.approx(7.0)


def test_webm_without_container_count(clip_dir, frames12):
    path = write_video(clip_dir / "nocount.webm", frames12, fps=12, codec="libvpx")
    info = probe_video(path, exact=False)  # webm announces no count: decoding decides
    assert info.container_frames is None and info.num_frames == 12 and info.counted == "decoded"


def test_gif(clip_dir, frames12):
    path = write_gif(clip_dir / "clip.gif", frames12[:9], fps=10)
    clip = read_clip(path, long_side=None)
    assert clip.num_frames == 9 and clip.meta["codec"] == "gif"
    assert (clip.frames.float() - frames12[:9].float()).abs().mean() < 20.0  # 8-bit palette
    assert probe_video(path).num_frames == 9
    assert clip.fps == pytest.approx(10.0)


def test_probe_trusting_container(mp4):
    info = probe_video(mp4, exact=False)
    assert info.counted == "container" and info.num_frames == 12 == info.container_frames
    assert info.codec == "h264" and info.duration_s == pytest.approx(1.0, abs=0.1)


def test_sampling_on_video(mp4):
    ref = read_clip(mp4, long_side=None)
    s = read_clip(mp4, long_side=None, stride=3)
    assert s.frame_indices.tolist() == [0, 3, 6, 9] and s.fps == pytest.approx(4.0)
    assert s.frames.equal(ref.frames[::3])
    cap = read_clip(mp4, long_side=None, stride=2, max_frames=2)
    assert cap.frame_indices.tolist() == [0, 2] and cap.frames.equal(ref.frames[[0, 2]])
    assert cap.meta["decode_complete"] is False and cap.meta["decoded_frames"] == 3
    idx = read_clip(mp4, long_side=None, indices=[7, 2, 7])
    assert idx.frame_indices.tolist() == [7, 2, 7] and idx.frames.equal(ref.frames[[7, 2, 7]])
    with pytest.raises(VideoReadError, match=r"\[12, 40\] are out of range: the clip has 12"):
        read_clip(mp4, indices=[3, 12, 40])



def test_indices_past_the_end_name_the_path(mp4, tmp_path, frames12):
    """The out-of-range error names the file or folder (eager, streamed and image reads), as
    every other VideoReadError does: in a batch it says which clip failed."""
    import re

    for kw in ({}, {"stream": True}):
        with pytest.raises(VideoReadError, match=re.escape(f"{mp4}: frame indices [12] are "
                                                           "out of range: the clip has 12")):
            read_clip(mp4, indices=[0, 12], **kw)
    folder = write_image_folder(tmp_path / "seq", frames12[:3])
    with pytest.raises(VideoReadError, match=re.escape(f"{folder}: frame indices [5]")):
        read_clip(folder, indices=[5])
    with pytest.raises(VideoReadError, match=re.escape(f"{folder / '00000.png'}: frame ind")):
        read_clip(folder / "00000.png", indices=[1])

def test_one_frame_video(clip_dir, frames12):
    path = write_video(clip_dir / "one.mp4", frames12[:1], fps=24)
    clip = read_clip(path, long_side=64)
    assert clip.num_frames == 1 and clip.frames.shape == (1, 3, 48, 64)
    assert make_pairs(clip.num_frames).shape == (0, 2)


def test_4k_clip_streams_at_working_resolution(clip_dir):
    """4 frames of 3840x2160 (mpeg4 in avi: quick to encode): the output is at working
    resolution and the traced peak stays below two full-resolution RGB frames (holding the
    decoded clip would take four)."""
    t, h, w = 4, 2160, 3840
    g = torch.Generator().manual_seed(0)
    tile = (torch.rand(t, 3, h // 8, w // 8, generator=g) * 255).to(torch.uint8)
    path = write_video(clip_dir / "uhd.avi", tile.repeat(1, 1, 8, 8), fps=24, codec="mpeg4")
    full_frame = h * w * 3
    tracemalloc.start()
    try:
        clip = read_clip(path, long_side=512)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert clip.frames.shape == (4, 3, 288, 512) and clip.source_size == (2160, 3840)
    assert clip.scale == pytest.approx(512 / 3840)
    assert peak < 2 * full_frame, f"peak traced memory {peak / 1e6:.1f} MB"
    # the resize is an area average: a 7.5x shrink of the 8x8-px tiles keeps their means
    assert (clip.frames.float().mean() - tile.float().mean()).abs() < 2.0


# ------------------------------------------------------------------------------ bad input

def test_missing_and_empty(tmp_path):
    with pytest.raises(VideoReadError, match="no such file"):
        read_clip(tmp_path / "nope.mp4")
    (tmp_path / "empty.mp4").write_bytes(b"")
    with pytest.raises(VideoReadError, match="empty"):
        read_clip(tmp_path / "empty.mp4")
    with pytest.raises(VideoReadError, match="empty"):
        probe_video(tmp_path / "empty.mp4")


def test_text_file_renamed_mp4(tmp_path):
    path = tmp_path / "notes.mp4"
    path.write_text("this is not a video\n" * 50)
    with pytest.raises(VideoReadError, match="not a readable video"):
        read_clip(path)


def test_truncated_without_index_raises(tmp_path, frames12):
    full = write_video(tmp_path / "full.mp4", frames12, fps=12)  # moov atom at the end
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    with pytest.raises(VideoReadError, match="truncated"):
        read_clip(cut)


def test_truncated_with_index_returns_decodable_frames(tmp_path):
    # a new texture every frame, so each frame carries a similar share of the bytes
    frames = torch.cat([smooth_frames(t=1, seed=k) for k in range(20)])
    full = write_video(tmp_path / "fs.mp4", frames, fps=12, faststart=True)
    cut = tmp_path / "fs_cut.mp4"
    cut.write_bytes(full.read_bytes()[: full.stat().st_size // 2])
    clip = read_clip(cut, long_side=None)
    assert 0 < clip.num_frames < 20 and clip.meta["truncated"] is True
    assert clip.meta["container_frames"] == 20 and clip.meta["decoded_frames"] == clip.num_frames
    n = clip.num_frames
    mae = (clip.frames.float() - frames[:n].float()).abs().mean((1, 2, 3))
    shifted = (clip.frames[1:].float() - frames[: n - 1].float()).abs().mean((1, 2, 3))
    assert mae.max() < 5.0 and shifted.min() > 15.0  # the first n frames, in order
    assert probe_video(cut).truncated
    head = tmp_path / "fs_head.mp4"  # index only, no frame data
    head.write_bytes(full.read_bytes()[:1200])
    with pytest.raises(VideoReadError):
        read_clip(head)


@pytest.mark.parametrize("ext, codec", [("mp4", "libx264"), ("mkv", "mpeg4")])
def test_zero_frame_video(tmp_path, ext, codec):
    import av

    path = tmp_path / f"zero.{ext}"
    with av.open(str(path), "w") as container:
        stream = container.add_stream(codec, rate=10)
        stream.width, stream.height, stream.pix_fmt = 64, 64, "yuv420p"
        container.start_encoding()
    assert path.stat().st_size > 0
    with pytest.raises(VideoReadError):
        read_clip(path)
    with pytest.raises(VideoReadError):
        probe_video(path)


def test_wrong_source_type():
    with pytest.raises(VideoReadError, match="cannot read a int"):
        read_clip(3)


# ------------------------------------------------------------------------------ image folders

def test_image_folder_natural_order(tmp_path, frames12):
    folder = tmp_path / "seq"
    folder.mkdir()
    import cv2

    names = ["f1.png", "f2.PNG", "f10.png", "f11.jpg", "f3.bmp"]  # natural: 1, 2, 3, 10, 11
    for name, frame in zip(names, frames12[:5]):
        cv2.imwrite(str(folder / name), frame.permute(1, 2, 0).numpy()[..., ::-1])
    (folder / "notes.txt").write_text("ignored")
    clip = read_clip(folder, long_side=None)
    assert clip.num_frames == 5 and clip.name == "seq" and clip.meta["source"] == "images"
    assert clip.meta["files"] == ["f1.png", "f2.PNG", "f3.bmp", "f10.png", "f11.jpg"]
    order = [0, 1, 4, 2, 3]  # index into frames12 of f1, f2, f3, f10, f11
    assert clip.frames[[0, 1, 3]].equal(frames12[[order[i] for i in (0, 1, 3)]])  # png lossless
    assert clip.frames[2].equal(frames12[4])  # bmp lossless
    assert (clip.frames[4].float() - frames12[3].float()).abs().mean() < 3  # jpeg
    assert clip.fps == 24.0 and clip.meta["fps_source"] == "default"
    assert read_clip(folder, fps=5).fps == 5.0
    assert read_clip(folder, long_side=None, indices=[4, 0]).frames.equal(clip.frames[[4, 0]])
    assert probe_video(folder).num_frames == 5


def test_image_folder_errors(tmp_path, frames12):
    folder = write_image_folder(tmp_path / "mixed", frames12[:2])
    write_image_folder(tmp_path / "mixed", smooth_frames(t=1, h=64, w=64), prefix="z")
    with pytest.raises(VideoReadError, match="all frames must share one size"):
        read_clip(folder)
    empty = tmp_path / "none"
    empty.mkdir()
    (empty / "readme.txt").write_text("x")
    with pytest.raises(VideoReadError, match="no image"):
        read_clip(empty)
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "0.png").write_text("not an image")
    with pytest.raises(VideoReadError, match="not a readable image"):
        read_clip(bad)


def test_single_image_file(tmp_path, frames12):
    folder = write_image_folder(tmp_path / "one", frames12[:1])
    clip = read_clip(folder / "00000.png", long_side=None)
    assert clip.num_frames == 1 and clip.frames[0].equal(frames12[0])


# ------------------------------------------------------------------------------ tensors

def test_tensor_uint8_and_float_agree(device, frames12):
    u8 = frames12.to(device)
    a = read_clip(u8, long_side=64)
    b = read_clip(u8.double() / 255.0, long_side=64)
    assert a.frames.device == device and a.content_mask.device == device
    assert a.frames.shape == (12, 3, 48, 64) and a.frames.equal(b.frames)
    ref = torch.nn.functional.interpolate(u8.float(), size=(48, 64), mode="bilinear",
                                          antialias=True, align_corners=False)
    assert (a.frames.float() - ref).abs().max() <= 0.5 + 1e-4
    assert a.meta["source"] == "tensor" and a.fps == 24.0 and a.name == "tensor"
    native = read_clip(u8, long_side=None, stride=5, fps=30)
    assert native.frames.equal(u8[::5]) and native.fps == 6.0
    assert native.frame_indices.tolist() == [0, 5, 10]


def test_tensor_gray_and_device_argument(frames12):
    gray = frames12[:, :1]
    clip = read_clip(gray, long_side=None, device="cpu")
    assert clip.frames.shape == (12, 3, 96, 128)
    assert clip.frames[:, 0].equal(gray[:, 0]) and clip.frames[:, 2].equal(gray[:, 0])


def test_read_clips_batch_equals_single(frames12):
    batch = torch.stack([frames12, frames12.flip(-1)])
    clips = read_clips(batch, long_side=64, max_frames=5, name="gen")
    assert [c.name for c in clips] == ["gen[0]", "gen[1]"]
    for b, clip in enumerate(clips):
        single = read_clip(batch[b], long_side=64, max_frames=5)
        assert clip.frames.equal(single.frames) and clip.content_mask.equal(single.content_mask)
        assert clip.num_frames == 5
    assert len(read_clips([frames12, frames12[:3]], long_side=32)) == 2
    with pytest.raises(TypeError):
        read_clips(batch, bogus=1)


@pytest.mark.parametrize("tensor, match", [
    (torch.zeros(4, 96, 128, 3, dtype=torch.uint8), "channels-last"),
    (torch.zeros(4, 2, 16, 16, dtype=torch.uint8), "C in"),
    (torch.zeros(3, 8, 16, 16, dtype=torch.uint8), r"looks channels-first.*permute\(1, 0, 2, 3\)"),
    (torch.zeros(16, 16, dtype=torch.uint8), "C in"),
    (torch.zeros(0, 3, 16, 16, dtype=torch.uint8), "0 frames"),
    (torch.zeros(4, 3, 16, 16, dtype=torch.int64), "uint8, or float"),
    (torch.full((4, 3, 16, 16), 2.0), "0..255"),
    (torch.full((4, 3, 16, 16), -0.5), r"\[-1, 1\]"),
    (torch.full((4, 3, 16, 16), float("nan")), "NaN"),
    (torch.zeros(2, 4, 3, 16, 16, dtype=torch.uint8), "read_clips"),
])
def test_bad_tensors(tensor, match):
    with pytest.raises(VideoReadError, match=match):
        read_clip(tensor)


def test_tensor_indices_out_of_range(frames12):
    with pytest.raises(VideoReadError, match="out of range"):
        read_clip(frames12, indices=[0, 12])


# ------------------------------------------------------------------------------ hashing

def test_content_hash(mp4, tmp_path, frames12):
    assert content_hash(mp4) == hashlib.sha256(mp4.read_bytes()).hexdigest()
    assert content_hash(str(mp4)) == content_hash(mp4)
    t = frames12.clone()
    h = content_hash(t)
    assert len(h) == 64 and h == content_hash(frames12.clone())
    t[0, 0, 0, 0] ^= 1
    assert content_hash(t) != h
    assert content_hash(frames12.float()) != content_hash(frames12)  # dtype matters
    assert content_hash(frames12.reshape(6, 2, 3, 96, 128)) != content_hash(frames12)
    folder = write_image_folder(tmp_path / "h", frames12[:2])
    ref = hashlib.sha256()  # each image in natural order: its name, a NUL, its bytes
    for f in sorted(p for p in folder.iterdir() if not p.name.startswith(".")):
        ref.update(f.name.encode() + b"\0" + f.read_bytes())
    assert content_hash(folder) == ref.hexdigest()
    first = sorted(folder.iterdir())[0]
    first.rename(first.with_name("z" + first.name))  # a renamed frame changes the hash
    assert content_hash(folder) != ref.hexdigest()
    with pytest.raises(VideoReadError):
        content_hash(tmp_path / "missing.mp4")



def test_image_named_in_bytes_that_are_not_utf8(tmp_path, frames12):
    """A frame file whose name is not UTF-8 (b"00001\\xff.png", a surrogate-escaped str in
    Python) is hashed by its raw name bytes and read from its bytes (cv2.imread crashed)."""
    folder = write_image_folder(tmp_path / "latin1", frames12[:2])
    raw = os.fsencode(folder)
    try:
        os.rename(raw + b"/00001.png", raw + b"/00001\xff.png")
    except OSError:
        pytest.skip("this file system does not take names that are not UTF-8")
    ref = hashlib.sha256()
    for name in (b"00000.png", b"00001\xff.png"):
        with open(raw + b"/" + name, "rb") as fh:
            ref.update(name + b"\0" + fh.read())
    assert content_hash(folder) == ref.hexdigest()
    clip = read_clip(folder, long_side=None)
    assert clip.num_frames == 2 and clip.frames.equal(frames12[:2])
    assert clip.meta["files"][1] == os.fsdecode(b"00001\xff.png")

def test_batch_content_hashes_are_the_clips_own(frames12):
    """A (B, T, C, H, W) batch is hashed with one host copy; each clip's digest is the one it
    gets alone: SHA-256 of "tensor|dtype|shape|" and its row-major bytes (also for a
    non-contiguous batch), and score_clips records it."""
    from geocon_torch.io.hashing import tensor_content_hashes
    from geocon_torch.pipeline import score_clips

    batch = torch.stack([frames12[:4], frames12[4:8], frames12[8:]])
    hashes = tensor_content_hashes(batch)
    ref = hashlib.sha256(f"tensor|torch.uint8|{tuple(batch.shape[1:])}|".encode()
                         + batch[1].contiguous().numpy().tobytes()).hexdigest()
    assert hashes[1] == ref == content_hash(batch[1])
    assert hashes == [content_hash(c) for c in batch] and len(set(hashes)) == 3
    flipped = batch.flip(-1)  # not contiguous
    assert tensor_content_hashes(flipped) == [content_hash(c.contiguous()) for c in flipped]
    got = score_clips(batch[:2], config={"io": {"max_frames": 2}}, preset="background")
    assert [r.content_hash for r in got] == hashes[:2]


def test_image_order_does_not_depend_on_the_listing(tmp_path, monkeypatch):
    """Names equal in natural order (``1.png`` / ``01.png``, ``A.png`` / ``a.png``) are ordered
    by their exact name: a copy of the folder listed in another order reads and hashes the
    same (the order used to follow ``iterdir``)."""
    from pathlib import Path

    from geocon_torch.io.images import image_files

    for name in ("1.png", "01.png", "a.png", "A.png", "2.png"):
        (tmp_path / name).write_bytes(b"")
    forward = [p.name for p in image_files(tmp_path)]
    listed = list(Path.iterdir(tmp_path))
    monkeypatch.setattr(Path, "iterdir", lambda self: iter(reversed(sorted(listed))))
    assert [p.name for p in image_files(tmp_path)] == forward == [
        "01.png", "1.png", "2.png", "A.png", "a.png"]


def test_written_mp4_bytes_do_not_depend_on_the_run(tmp_path):
    """The same frames give the same mp4 bytes (the same content hash), whatever the process did
    before: x264's macroblock tree gave a short clip other bytes from call to call (decoded
    pixels up to 18 grey levels apart)."""
    from geocon_torch.io.writer import write_video
    from geocon_torch.synth import render_scene

    digests = set()
    for k in range(6):
        frames = render_scene("C2", num_frames=6, size=(144, 192), seed=0).frames
        path = write_video(tmp_path / f"c{k}.mp4", frames, 24.0)
        digests.add(hashlib.sha256(path.read_bytes()).hexdigest())
    assert len(digests) == 1
