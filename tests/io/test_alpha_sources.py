"""Sources with an alpha channel: every file reader composites them over black (what a player
shows on a black background, ``round(rgb * alpha / 255)``), whatever RGB is stored under the
transparency, and records how much of the clip was transparent (``meta["transparent_frames"]``,
``meta["transparent_fraction"]``); an opaque source reads as before."""
from __future__ import annotations

from pathlib import Path
from typing import List

import numpy as np
import pytest

from geocon_torch.io.frame_rgb import composite_rgb
from geocon_torch.io.images import read_image, read_image_alpha
from geocon_torch.io.reader import read_clip

T, H, W = 4, 32, 48
#: a few exact colours (a GIF palette holds them without loss)
_COLOURS = np.array([[0, 0, 0], [255, 255, 255], [200, 30, 40], [20, 180, 60], [30, 60, 220],
                     [250, 200, 10], [120, 120, 120], [90, 20, 160]], dtype=np.uint8)


def _content(partial: bool = True) -> np.ndarray:
    """(T, H, W, 4) uint8 RGBA: blocks of ``_COLOURS`` moving one block per frame, the right
    16 columns transparent (alpha 0) and, with ``partial``, columns 24-27 half transparent."""
    yy, xx = np.mgrid[0:H, 0:W]
    frames = []
    for t in range(T):
        index = ((yy // 4) * 3 + (xx // 4 + t) * 5) % len(_COLOURS)
        alpha = np.full((H, W, 1), 255, np.uint8)
        alpha[:, W - 16:] = 0
        if partial:
            alpha[:, 24:28] = 128
        frames.append(np.concatenate([_COLOURS[index], alpha], axis=-1))
    return np.stack(frames)


def _hide(rgba: np.ndarray, kind: str) -> np.ndarray:
    """``rgba`` with other RGB under alpha 0: "noise", "white" or "mirror" (the clip mirrored:
    the opposite motion, invisible over any background)."""
    out = rgba.copy()
    hidden = out[..., 3] == 0
    if kind == "noise":
        fill = np.random.default_rng(0).integers(0, 256, out[..., :3].shape, dtype=np.uint8)
    elif kind == "white":
        fill = np.full_like(out[..., :3], 255)
    else:
        fill = np.ascontiguousarray(rgba[:, ::-1, ::-1, :3])
    out[..., :3][hidden] = fill[hidden]
    return out


def _over_black(rgba: np.ndarray) -> np.ndarray:
    """The reference composite, in floats: round(rgb * alpha / 255)."""
    rgb, a = rgba[..., :3].astype(np.float64), rgba[..., 3:].astype(np.float64)
    return np.rint(rgb * a / 255.0).astype(np.uint8)


def _png_folder(rgba: np.ndarray, folder: Path) -> Path:
    from PIL import Image

    folder.mkdir()
    for t, frame in enumerate(rgba):
        Image.fromarray(frame, "RGBA").save(folder / f"frame_{t:03d}.png")
    return folder


def _animated(rgba: np.ndarray, path: Path, **kwargs) -> Path:
    from PIL import Image

    images = [Image.fromarray(f, "RGBA") for f in rgba]
    images[0].save(path, save_all=True, append_images=images[1:], duration=100, loop=0,
                   **kwargs)
    return path


def _mov(rgba: np.ndarray, path: Path, codec: str = "png") -> Path:
    import av

    with av.open(str(path), "w") as out:
        stream = out.add_stream(codec, rate=10)
        stream.width, stream.height = W, H
        stream.pix_fmt = "rgba" if codec == "png" else "argb"
        for t, frame in enumerate(rgba):
            vf = av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgba")
            vf.pts = t
            for packet in stream.encode(vf.reformat(format=stream.pix_fmt)):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def _gif(rgba: np.ndarray, path: Path) -> Path:
    """A GIF of binary-alpha ``rgba`` whose colours are ``_COLOURS``: palette index 8 is the
    transparent one; each frame replaces the previous (disposal 2)."""
    from PIL import Image

    palette = np.zeros((256, 3), np.uint8)
    palette[:len(_COLOURS)] = _COLOURS
    palette[8] = [255, 255, 255]  # the colour under the transparency: white
    images = []
    for frame in rgba:
        match = (frame[:, :, None, :3] == _COLOURS[None, None]).all(-1).argmax(-1)
        index = np.where(frame[..., 3] == 0, 8, match).astype(np.uint8)
        image = Image.fromarray(index, "P")
        image.putpalette(palette.tobytes())
        images.append(image)
    images[0].save(path, save_all=True, append_images=images[1:], duration=100, loop=0,
                   transparency=8, disposal=2, optimize=False)
    return path


def _frames(path: Path) -> np.ndarray:
    clip = read_clip(path, long_side=None)
    return clip.frames.permute(0, 2, 3, 1).numpy(), clip.meta


def _transparent_fraction(rgba: np.ndarray) -> float:
    return float((rgba[..., 3] < 255).mean())


def test_rgba_sources_read_as_their_composite_over_black(tmp_path: Path) -> None:
    """One RGBA content with other RGB under alpha 0 in each file: a PNG folder, an APNG, a
    png-in-mov and a qtrle mov, an animated lossless WebP: the same frames, equal to the
    composite over black (lossless: exact), and the transparency recorded."""
    rgba = _content()
    want = _over_black(rgba)
    sources: List[Path] = [
        _png_folder(_hide(rgba, "noise"), tmp_path / "png"),
        _animated(_hide(rgba, "white"), tmp_path / "anim.png", format="PNG"),
        _mov(_hide(rgba, "mirror"), tmp_path / "png.mov"),
        _mov(_hide(rgba, "noise"), tmp_path / "qtrle.mov", codec="qtrle"),
        _animated(_hide(rgba, "mirror"), tmp_path / "anim.webp", lossless=True, quality=100),
    ]
    fraction = _transparent_fraction(rgba)
    assert fraction == pytest.approx((16 + 4) / W)
    for source in sources:
        frames, meta = _frames(source)
        assert frames.shape == want.shape, source.name
        assert np.array_equal(frames, want), (source.name, int(np.abs(
            frames.astype(int) - want).max()))
        assert meta["transparent_frames"] == T, source.name
        assert meta["transparent_fraction"] == pytest.approx(fraction, abs=1e-12), source.name


def test_gif_transparency_reads_as_black_like_a_png_folder(tmp_path: Path) -> None:
    """A GIF whose transparent index holds white (PyAV decodes it as bgra white with alpha 0)
    reads as the composite over black, as the same binary-alpha content in a PNG folder."""
    rgba = _content(partial=False)
    want = _over_black(rgba)
    gif, gif_meta = _frames(_gif(rgba, tmp_path / "anim.gif"))
    png, _ = _frames(_png_folder(_hide(rgba, "white"), tmp_path / "png"))
    assert np.array_equal(png, want)
    assert np.array_equal(gif, want), int(np.abs(gif.astype(int) - want).max())
    assert gif_meta["transparent_frames"] == T
    assert gif_meta["transparent_fraction"] == pytest.approx(16 / W, abs=1e-12)


def test_opaque_rgba_reads_as_its_rgb_without_transparency(tmp_path: Path) -> None:
    """Alpha 255 everywhere: the stored RGB, bit for bit, and nothing recorded."""
    rgba = _content()
    rgba[..., 3] = 255
    for source in (_png_folder(rgba, tmp_path / "png"), _mov(rgba, tmp_path / "png.mov"),
                   _animated(rgba, tmp_path / "anim.png", format="PNG")):
        frames, meta = _frames(source)
        assert np.array_equal(frames, rgba[..., :3]), source.name
        assert meta["transparent_frames"] == 0, source.name
        assert meta["transparent_fraction"] == 0.0, source.name


def test_grey_alpha_and_16_bit_rgba_png(tmp_path: Path) -> None:
    """Grey + alpha and 16-bit RGBA PNG images composite the same way (16-bit alpha / 65535)."""
    from PIL import Image

    rgba = _content()[0]
    grey = rgba[..., 0]
    Image.fromarray(np.stack([grey, rgba[..., 3]], -1), "LA").save(tmp_path / "la.png")
    rgb, partial = read_image_alpha(tmp_path / "la.png")
    assert np.array_equal(rgb, _over_black(np.stack([grey] * 3 + [rgba[..., 3]], -1)))
    assert partial == int((rgba[..., 3] < 255).sum())
    import cv2

    wide = (rgba[..., [2, 1, 0, 3]].astype(np.uint16) * 257)
    cv2.imwrite(str(tmp_path / "rgba16.png"), wide)
    assert np.array_equal(read_image(tmp_path / "rgba16.png"), _over_black(rgba))


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_applies_to_the_alpha(tmp_path: Path, orientation: int) -> None:
    """OpenCV turns an RGB read by the EXIF orientation; the alpha plane (read unchanged)
    gets the same turn, so the composite is the upright one."""
    import cv2
    from PIL import Image

    rgba = _content()[0]
    rgba[:8, :8, 3] = 60  # alpha without symmetry
    exif = Image.Exif()
    exif[0x0112] = orientation
    Image.fromarray(rgba, "RGBA").save(tmp_path / "o.png", exif=exif)
    upright = cv2.imread(str(tmp_path / "o.png"), cv2.IMREAD_COLOR)[..., ::-1]
    opaque = rgba.copy()
    opaque[..., 3] = 255
    Image.fromarray(opaque, "RGBA").save(tmp_path / "a.png", exif=exif)
    alpha = np.dstack([rgba[..., 3]] * 3)
    Image.fromarray(alpha).save(tmp_path / "alpha.png", exif=exif)
    alpha_up = cv2.imread(str(tmp_path / "alpha.png"), cv2.IMREAD_COLOR)[..., :1]
    want = _over_black(np.concatenate([upright, alpha_up], -1))
    assert np.array_equal(read_image(tmp_path / "o.png"), want)


def test_pal8_frame_with_a_transparent_palette_entry() -> None:
    """A paletted PyAV frame composites when a palette entry is not opaque, and converts to
    rgb24 alone when all are."""
    import av

    index = np.zeros((4, 6), np.uint8)
    index[:, 3:] = 1
    palette = np.zeros((256, 4), np.uint8)  # PyAV's from_ndarray order: A, R, G, B
    palette[0] = [255, 200, 100, 50]
    palette[1] = [0, 40, 50, 60]
    rgb, partial = composite_rgb(av.VideoFrame.from_ndarray((index, palette), format="pal8"))
    assert partial == 12
    assert rgb[0, 0].tolist() == [200, 100, 50] and rgb[0, 5].tolist() == [0, 0, 0]
    palette[1, 0] = 255
    rgb, partial = composite_rgb(av.VideoFrame.from_ndarray((index, palette), format="pal8"))
    assert partial == 0 and rgb[0, 5].tolist() == [40, 50, 60]


def test_a_transparent_source_is_scored_with_a_warning_and_stored(tmp_path: Path) -> None:
    """score_clip of an RGBA folder: the io block records the transparency, the result warns
    once (the non-opaque pixels read: 16 + 4 of 48 columns), the numbers are those of the
    composite saved opaque, and the row survives a store round trip; an opaque folder has no
    transparency keys and no warning."""
    from geocon_torch import score_clip
    from geocon_torch.bench.store import SQLiteStore, load_results

    rgba = _hide(_content(), "noise")
    results = {}
    for name, frames in (("alpha", rgba), ("opaque", _over_black(rgba))):
        folder = tmp_path / name
        if name == "opaque":
            from PIL import Image
            folder.mkdir()
            for t, frame in enumerate(frames):
                Image.fromarray(frame, "RGB").save(folder / f"frame_{t:03d}.png")
        else:
            _png_folder(frames, folder)
        results[name] = score_clip(str(folder), preset="worldatlas", device="cpu",
                                   progress=False).to_dict()
    alpha, opaque = results["alpha"], results["opaque"]
    fraction = _transparent_fraction(rgba)
    assert fraction == pytest.approx(20 / 48)
    assert alpha["io"]["transparent_frames"] == T
    assert alpha["io"]["transparent_fraction"] == pytest.approx(fraction)
    assert alpha["warnings"] == ["the source has an alpha channel (41.7 % of pixels transparent "
                                 f"or partly so, in {T} frame(s)): composited over black"]
    assert not [k for k in opaque["io"] if k.startswith("transparent")]
    assert opaque["warnings"] == []
    # what is scored is the composite: the same numbers as the opaque copy of it
    assert alpha["epipolar"] == opaque["epipolar"] and alpha["score"] == opaque["score"]
    db = tmp_path / "s.sqlite"
    with SQLiteStore(db) as store:
        store.put({"clip_id": "a", "generator": "g"}, "h" * 64, "c" * 16, alpha)
    (row,) = load_results(db)
    assert row["result"]["io"] == alpha["io"] and row["result"]["warnings"] == alpha["warnings"]
