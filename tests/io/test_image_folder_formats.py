"""A folder of frames is read in every image format a single image file is read in (audit s26
F5): TIFF (OpenCV) and EXR (PyAV) folders were refused as "the folder holds no image", and a
TIFF sequence with a stray PNG was read as a one-frame clip. Files are made here."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from geocon_torch.errors import VideoReadError
from geocon_torch.io import read_clip
from geocon_torch.io.frame_rgb import over_black
from geocon_torch.io.images import IMAGE_SUFFIXES

cv2 = pytest.importorskip("cv2")
av = pytest.importorskip("av")

H, W = 48, 66


def _rgb(clip, k: int = 0) -> np.ndarray:
    return clip.frames[k].permute(1, 2, 0).numpy()


def _tiff_sequence(folder: Path, n: int = 4, suffix: str = ".tif") -> np.ndarray:
    """``n`` 16-bit RGB TIFF frames (a pan of random texture) in ``folder``; their (n, H, W, 3)
    uint16 RGB."""
    folder.mkdir()
    base = np.random.default_rng(0).integers(0, 65536, (H, W, 3), dtype=np.uint16)
    frames = np.stack([np.roll(base, 3 * k, axis=1) for k in range(n)])
    for k, rgb in enumerate(frames):
        cv2.imwrite(str(folder / f"frame_{k:04d}{suffix}"), np.ascontiguousarray(rgb[..., ::-1]))
    return frames


@pytest.mark.parametrize("suffix", [".tif", ".TIFF"])
def test_a_folder_of_16_bit_tiff_frames_is_read(tmp_path, suffix):
    """Every TIFF is a frame, reduced to 8 bits as OpenCV reads it (/ 257, rounded), and the
    numbered sequence is complete (no frame counted lost)."""
    frames = _tiff_sequence(tmp_path / "seq", 4, suffix)
    clip = read_clip(str(tmp_path / "seq"), long_side=None)
    assert clip.num_frames == 4 and clip.meta["source"] == "images"
    assert clip.meta["timestamp_gaps"] == 0
    for k in range(4):
        want = np.rint(frames[k] / 257.0).astype(np.uint8)
        np.testing.assert_array_equal(_rgb(clip, k), want)


def test_a_single_tiff_file_gives_the_folder_frame(tmp_path):
    """One TIFF file alone is the same frame as in its folder (one reader for both)."""
    _tiff_sequence(tmp_path / "seq", 2)
    folder = read_clip(str(tmp_path / "seq"), long_side=None)
    one = read_clip(str(tmp_path / "seq" / "frame_0001.tif"), long_side=None)
    assert one.num_frames == 1 and one.meta["source"] == "image"
    np.testing.assert_array_equal(_rgb(one), _rgb(folder, 1))


def test_a_tiff_with_alpha_is_composited_over_black(tmp_path):
    """An RGBA TIFF frame is composited over black and counted, as an RGBA PNG is."""
    folder = tmp_path / "rgba"
    folder.mkdir()
    rgba = np.random.default_rng(1).integers(0, 256, (2, H, W, 4), dtype=np.uint8)
    for k in range(2):
        cv2.imwrite(str(folder / f"f{k}.tif"), np.ascontiguousarray(rgba[k][..., [2, 1, 0, 3]]))
    clip = read_clip(str(folder), long_side=None)
    want, partial = over_black(rgba[0, ..., :3], rgba[0, ..., 3])
    np.testing.assert_array_equal(_rgb(clip), want)
    assert clip.meta["transparent_frames"] == 2 and partial > 0


def test_a_stray_png_in_a_tiff_sequence_is_not_the_clip(tmp_path):
    """Every frame suffix of a folder is read (as for png + jpg): a thumbnail of another size
    is an error that names it, no longer a one-frame clip that skips the TIFF frames."""
    _tiff_sequence(tmp_path / "seq", 4)
    cv2.imwrite(str(tmp_path / "seq" / "thumbnail.png"), np.zeros((12, 16, 3), np.uint8))
    with pytest.raises(VideoReadError, match=r"thumbnail\.png: image size 16x12 differs from "
                                             r"66x48 of frame_0000\.tif"):
        read_clip(str(tmp_path / "seq"), long_side=None)


def _write_exr(path: Path, rgb: np.ndarray) -> None:
    """One float32 RGB EXR image (gbrpf32le) written by PyAV."""
    with av.open(str(path), "w", format="image2") as out:
        stream = out.add_stream("exr", rate=24)
        stream.width, stream.height, stream.pix_fmt = rgb.shape[1], rgb.shape[0], "gbrpf32le"
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(rgb), format="gbrpf32le")
        frame.pts = 0
        for packet in list(stream.encode(frame)) + list(stream.encode()):
            out.mux(packet)


def test_a_folder_of_exr_frames_is_read(tmp_path):
    """EXR frames (linear values, clipped to [0, 1] x 255 as a single EXR file is read) form a
    clip; one EXR alone gives the folder's frame."""
    folder = tmp_path / "exr"
    folder.mkdir()
    ramp = np.tile(np.linspace(0.0, 1.25, W, dtype=np.float32), (H, 1))
    for k in range(3):
        _write_exr(folder / f"e{k}.exr", np.stack([np.roll(ramp, k, axis=1)] * 3, -1))
    clip = read_clip(str(folder), long_side=None)
    assert clip.num_frames == 3
    want = np.rint(np.clip(ramp, 0, 1) * 255)
    assert np.abs(_rgb(clip, 0)[..., 1].astype(float) - want).max() <= 1
    one = read_clip(str(folder / "e2.exr"), long_side=None)
    np.testing.assert_array_equal(_rgb(one), _rgb(clip, 2))


def test_a_folder_without_frames_says_what_it_holds(tmp_path):
    """The refusal names the suffixes read and the files the folder holds instead."""
    folder = tmp_path / "ppm"
    folder.mkdir()
    for k in range(3):
        cv2.imwrite(str(folder / f"f{k}.ppm"), np.zeros((8, 8, 3), np.uint8))
    (folder / "notes.txt").write_text("x")
    with pytest.raises(VideoReadError) as info:
        read_clip(str(folder))
    msg = str(info.value)
    assert "it holds 3 .ppm, 1 .txt; 0 frames" in msg
    assert all(s in msg for s in IMAGE_SUFFIXES)
