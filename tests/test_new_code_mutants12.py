"""Tests pinning behaviour of the newest code that no other default test pinned (found by
mutation testing): the one-line error text of an OSError, the naming of output errors, a store
opened without ``create``, alpha in palette PNGs / lossy WebP / 32-bit BMP / 16-bit PNG, the
transparency warning's percentage and the range hints of a clip tensor."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from helpers import fake_result, write_jsonl

from geocon_torch.bench.store import StoreError, load_results, open_readable
from geocon_torch.cli import _one_line, main
from geocon_torch.commands._common import check_output_file
from geocon_torch.errors import ClipTensorError, InputError
from geocon_torch.io._atomic import atomic_output
from geocon_torch.io.images import read_image_alpha
from geocon_torch.io.integrity import decode_report, decode_verdict
from geocon_torch.io.reader import check_clip_tensor


# --- cli._one_line ------------------------------------------------------------------------

def test_one_line_of_a_two_path_oserror_names_both():
    exc = OSError(errno.EXDEV, "Invalid cross-device link", "a.tmp", None, "out/b.json")
    assert _one_line(exc) == "Invalid cross-device link: a.tmp -> out/b.json"


def test_one_line_of_an_environment_error_without_a_path_is_its_strerror():
    exc = OSError(errno.ENOSPC, "No space left on device")
    assert _one_line(exc) == "No space left on device"  # not "[Errno 28] ..."


def test_one_line_of_a_bytes_file_name_is_its_text():
    exc = OSError(errno.ENOSPC, "No space left on device", b"out/r.json")
    assert _one_line(exc) == "No space left on device: out/r.json"  # not b'out/r.json'


# --- io._atomic.name_output_error -----------------------------------------------------------

def test_a_bug_oserror_in_an_atomic_write_is_left_as_it_is(tmp_path: Path):
    """An OSError without an errno (a bug) gets no file name: its message stays its own."""
    out = tmp_path / "r.json"
    with pytest.raises(OSError) as info:
        with atomic_output(out):
            raise OSError("a bug")
    assert str(info.value) == "a bug" and info.value.filename is None
    assert list(tmp_path.iterdir()) == []


# --- bench.store.open_readable(create=False) ------------------------------------------------

def test_open_readable_without_create_refuses_a_missing_file(tmp_path: Path):
    db = tmp_path / "gone" / "r.sqlite"
    with pytest.raises(StoreError, match="result store not found"):
        open_readable(db, create=False)
    assert not db.parent.exists()
    with open_readable(db) as store:  # the default still creates it
        assert store.count() == 0
    with open_readable(db, create=False) as store:
        assert store.count() == 0


def test_bench_export_of_a_missing_store_says_it_only_exports(tmp_path: Path, capsys):
    db = tmp_path / "none.sqlite"
    rc = main(["bench", "--db", str(db), "--export-csv", str(tmp_path / "t.csv")])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err, err
    assert "store not found" in err and "only exports an existing store" in err, err
    assert not db.exists()


def test_a_cut_off_last_line_that_is_no_object_is_still_an_error(tmp_path: Path):
    """Only a cut-off JSON object (a "{" without its newline) is skipped; other junk at the end
    of a results file refuses it."""
    path = write_jsonl(tmp_path / "r.jsonl", [fake_result("c0")])
    path.write_text(path.read_text() + "garbage")
    with pytest.raises(ValueError, match=r"line 2: not JSON"):
        load_results(path)


# --- commands._common.check_output_file -----------------------------------------------------

def test_an_existing_output_file_not_writable_is_refused(tmp_path: Path, monkeypatch):
    """The file itself is checked for writing (readable is not enough)."""
    out = tmp_path / "r.jsonl"
    out.write_text("old\n")
    monkeypatch.setattr(os, "access",
                        lambda path, mode: not (Path(path) == out and mode & os.W_OK))
    with pytest.raises(InputError, match=r"--json .*: not writable \("):
        check_output_file(str(out), "--json")
    assert out.read_text() == "old\n"


# --- io.images: alpha announced by the header -----------------------------------------------

def test_palette_png_with_a_trns_entry_is_composited_over_black(tmp_path: Path):
    from PIL import Image

    index = np.zeros((8, 8), np.uint8)
    index[:, 4:] = 1  # palette entry 1: fully transparent (tRNS)
    image = Image.fromarray(index, "P")
    image.putpalette([200, 100, 50, 10, 20, 30] + [0] * 762)
    image.save(tmp_path / "p.png", transparency=bytes([255, 0]))
    rgb, partial = read_image_alpha(tmp_path / "p.png")
    assert partial == 32
    assert (rgb[:, :4] == [200, 100, 50]).all() and (rgb[:, 4:] == 0).all()


def test_lossy_webp_with_alpha_is_composited_over_black(tmp_path: Path):
    from PIL import Image

    rgba = np.zeros((16, 16, 4), np.uint8)
    rgba[..., :3], rgba[..., 3] = 200, 255
    rgba[:, 8:, 3] = 0
    Image.fromarray(rgba, "RGBA").save(tmp_path / "a.webp", lossless=False, quality=90)
    assert (tmp_path / "a.webp").read_bytes()[12:16] == b"VP8X"
    rgb, partial = read_image_alpha(tmp_path / "a.webp")
    assert partial == 128
    assert (rgb[:, 8:] == 0).all() and np.abs(rgb[:, :8].astype(int) - 200).max() <= 8


def test_lossless_webp_with_alpha_is_composited_over_black(tmp_path: Path):
    import cv2

    bgra = np.zeros((8, 8, 4), np.uint8)
    bgra[..., :3], bgra[..., 3] = (40, 80, 160), 255
    bgra[:, 4:, 3] = 0
    assert cv2.imwrite(str(tmp_path / "l.webp"), bgra, [cv2.IMWRITE_WEBP_QUALITY, 101])
    assert (tmp_path / "l.webp").read_bytes()[12:16] == b"VP8L"  # lossless, no VP8X
    rgb, partial = read_image_alpha(tmp_path / "l.webp")
    assert partial == 32
    assert (rgb[:, :4] == [160, 80, 40]).all() and (rgb[:, 4:] == 0).all()


def test_32_bit_bmp_with_zero_alpha_reads_opaque(tmp_path: Path):
    """A 32-bit BMP whose fourth byte is 0 everywhere is padding, shown opaque, not black."""
    import cv2

    bgra = np.zeros((8, 8, 4), np.uint8)
    bgra[..., :3] = (10, 20, 250)
    assert cv2.imwrite(str(tmp_path / "z.bmp"), bgra)
    rgb, partial = read_image_alpha(tmp_path / "z.bmp")
    assert partial == 0 and (rgb == [250, 20, 10]).all()


def test_16_bit_alpha_counts_every_pixel_below_65535(tmp_path: Path):
    import cv2

    rgba = np.full((8, 8, 4), 65535, np.uint16)
    rgba[:, :2, 3] = 32768  # half: above 255, still not opaque
    rgba[:, 2, 3] = 0
    assert cv2.imwrite(str(tmp_path / "s.png"), rgba)
    rgb, partial = read_image_alpha(tmp_path / "s.png")
    assert partial == 8 * 3
    assert (rgb[:, :2] == 128).all() and (rgb[:, 2] == 0).all() and (rgb[:, 3:] == 255).all()


# --- io.integrity: the transparency warning ------------------------------------------------

def test_a_tiny_transparent_fraction_is_shown_as_at_least_0_01_percent():
    block = decode_report({"decoded_frames": 4, "transparent_frames": 1,
                           "transparent_fraction": 1e-6})
    assert block["transparent_frames"] == 1 and block["transparent_fraction"] == 1e-6
    reason, warnings = decode_verdict(block, 0.1)
    assert reason is None
    assert [w for w in warnings if "alpha channel" in w] == [
        "the source has an alpha channel (0.01 % of pixels transparent or partly so, in "
        "1 frame(s)): composited over black"]


# --- io.reader._range_hint ------------------------------------------------------------------

@pytest.mark.parametrize("lo, hi", [(0.0, 1.2), (-0.2, 1.0)])
def test_a_moderate_excess_gets_no_rescaling_hint(lo, hi):
    """Beyond the 0.05 overshoot but within 0.25: neither "0..255" nor "[-1, 1]" is told."""
    clip = torch.full((2, 3, 8, 8), 0.5)
    clip[0, 0, 0, 0], clip[1, 0, 0, 0] = lo, hi
    with pytest.raises(ClipTensorError, match=rf"got values in \[{lo:.4g}, {hi:.4g}\]$"):
        check_clip_tensor(clip)
