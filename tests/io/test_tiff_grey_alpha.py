"""A grey + alpha TIFF is composited over black like the same pixels in a PNG (OpenCV decodes
such a TIFF to one channel even with IMREAD_UNCHANGED, so its alpha was dropped: the image read
opaque, with no transparency counted)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from geocon_torch.io.images import read_image_alpha


def _grey_alpha() -> np.ndarray:
    """(6, 8, 2) uint8: grey 200 everywhere; alpha 0 (left half), 255 (right), 128 at (0, 7)."""
    a = np.zeros((6, 8, 2), np.uint8)
    a[..., 0] = 200
    a[:, 4:, 1] = 255
    a[0, 7, 1] = 128
    return a


def test_grey_alpha_tiff_reads_as_the_png_of_the_same_pixels(tmp_path: Path):
    pixels = _grey_alpha()
    for suffix in ("png", "tif"):
        Image.fromarray(pixels, "LA").save(tmp_path / f"la.{suffix}")
    png, n_png = read_image_alpha(tmp_path / "la.png")
    tif, n_tif = read_image_alpha(tmp_path / "la.tif")
    assert n_png == n_tif == 6 * 4 + 1
    assert np.array_equal(png, tif)
    assert tif[0, 0].tolist() == [0, 0, 0] and tif[0, 5].tolist() == [200, 200, 200]
    assert tif[0, 7].tolist() == [100, 100, 100]  # 200 * 128 / 255, rounded


def test_an_opaque_grey_tiff_is_unchanged(tmp_path: Path):
    Image.fromarray(_grey_alpha()[..., 0], "L").save(tmp_path / "l.tif")
    rgb, n = read_image_alpha(tmp_path / "l.tif")
    assert n == 0 and rgb.shape == (6, 8, 3) and (rgb == 200).all()
