"""Mask files (PNG folders, .npz) and the background mask / correspondence filter."""
import numpy as np
import pytest
import torch

from geocon_torch.errors import GeoConError, ShapeError
from geocon_torch.segment.background import background_keep, background_mask, dilate, sample_mask
from geocon_torch.segment.files import load_masks


def _objects(t=3, h=20, w=30):
    m = np.zeros((t, 2, h, w), bool)
    for k in range(t):
        m[k, 0, 2:6, 3 + k:8 + k] = True
        m[k, 1, 10:15, 20:25] = True
    return m


def test_png_folder_per_object(tmp_path):
    import cv2

    m = _objects()
    for k in range(2):
        d = tmp_path / f"obj{k}"
        d.mkdir()
        for t in range(3):
            cv2.imwrite(str(d / f"{t:03d}.png"), m[t, k].astype(np.uint8) * 255)
    got = load_masks(tmp_path)
    assert got.shape == (3, 2, 20, 30) and torch.equal(got, torch.from_numpy(m))


def test_label_png_folder_and_npz_layouts(tmp_path):
    import cv2

    m = _objects()
    labels = (m[:, 0] * 1 + m[:, 1] * 2).astype(np.uint8)
    for t in range(3):
        cv2.imwrite(str(tmp_path / f"{t:03d}.png"), labels[t])
    assert torch.equal(load_masks(tmp_path), torch.from_numpy(m))
    np.savez(tmp_path / "a.npz", masks=m)
    np.savez(tmp_path / "b.npz", labels)
    np.savez(tmp_path / "c.npz", m[:, 0])
    assert torch.equal(load_masks(tmp_path / "a.npz"), torch.from_numpy(m))
    assert torch.equal(load_masks(tmp_path / "b.npz"), torch.from_numpy(m))
    assert torch.equal(load_masks(tmp_path / "c.npz"), torch.from_numpy(m[:, :1]))


def test_resize_and_frame_selection():
    m = torch.from_numpy(_objects(t=6))
    got = load_masks(m, num_frames=3, frame_indices=torch.tensor([0, 2, 4]), size=(40, 60))
    assert got.shape == (3, 2, 40, 60)
    assert torch.equal(got[1, 1, 20:30, 40:50], torch.ones(10, 10, dtype=torch.bool))
    assert got[1].sum() == 4 * m[2].sum()  # nearest x2 upsampling quadruples the area
    with pytest.raises(ShapeError, match="6 frames but the clip has 4"):
        load_masks(m, num_frames=4)


def test_bad_sources(tmp_path):
    with pytest.raises(GeoConError, match="not found"):
        load_masks(tmp_path / "nope")
    with pytest.raises(GeoConError, match="no images"):
        load_masks(tmp_path)
    with pytest.raises(ShapeError):
        load_masks(np.zeros((2, 3)))


def test_dilate_matches_opencv():
    import cv2

    g = torch.Generator().manual_seed(0)
    m = torch.rand(2, 3, 25, 31, generator=g) > 0.97
    got = dilate(m, 2)
    for i in range(2):
        for k in range(3):
            ref = cv2.dilate(m[i, k].numpy().astype(np.uint8), np.ones((5, 5), np.uint8))
            assert np.array_equal(got[i, k].numpy(), ref.astype(bool))


def test_background_mask_and_keep():
    content = torch.ones(20, 30, dtype=torch.bool)
    content[:, :2] = False  # pillarbox bar
    obj = torch.zeros(2, 1, 20, 30, dtype=torch.bool)
    obj[0, 0, 8:12, 10:14] = True
    obj[1, 0, 8:12, 14:18] = True
    bg = background_mask(content, obj, margin_px=1)
    assert bg.shape == (2, 20, 30)
    assert not bg[0, 7:13, 9:15].any() and bg[0, 7:13, 15:].all() and not bg[:, :, :2].any()
    assert bg[0].sum() == 20 * 28 - 6 * 6
    # x1 in frame 0, x2 in frame 1: keep only when both are background and inside the frame
    x1 = torch.tensor([[[20.0, 3.0], [11.0, 10.0], [25.0, 5.0], [40.0, 5.0]]])
    x2 = torch.tensor([[[20.0, 3.0], [25.0, 5.0], [15.2, 9.8], [3.0, 5.0]]])
    keep = background_keep(bg, x1, x2, torch.tensor([[0, 1]]))
    assert keep.tolist() == [[True, False, False, False]]
    assert sample_mask(bg, x1, torch.tensor([0])).tolist() == [[True, False, True, False]]
    assert background_mask(content, None, num_frames=3).shape == (3, 20, 30)


def test_mask_folders_follow_natural_frame_order(tmp_path):
    """Unpadded frame numbers (1, 2, ..., 10, 11) and object folders (obj2 before obj10) are read
    in natural order, as image-folder videos are, so masks line up with their frames."""
    import cv2

    t, h, w = 12, 8, 40
    m = np.zeros((t, 2, h, w), bool)
    for k in range(t):
        m[k, 0, 1:3, 3 * k:3 * k + 2] = True  # frame k marks column 3k
        m[k, 1, 5:7, 3 * k:3 * k + 2] = True
    for name, obj in (("obj2", 0), ("obj10", 1)):
        d = tmp_path / name
        d.mkdir()
        for k in range(t):
            cv2.imwrite(str(d / f"{k + 1}.png"), m[k, obj].astype(np.uint8) * 255)
    got = load_masks(tmp_path)
    assert torch.equal(got, torch.from_numpy(m))


def _label_frames(t=2, h=24, w=32):
    lab = np.zeros((t, h, w), np.uint8)
    lab[:, 2:10, 2:10] = 1
    lab[:, 12:20, 16:28] = 2
    lab[:, 2:6, 20:30] = 3
    return lab


def test_palette_label_pngs_keep_their_labels(tmp_path):
    """DAVIS / YouTube-VOS masks are palette PNGs: each index is an object, whatever the colour
    the palette gives it (DAVIS' 1, 2, 3 are (128,0,0), (0,128,0), (128,128,0): one channel
    maximum for all three)."""
    from PIL import Image

    lab = _label_frames()
    palette = [0, 0, 0, 128, 0, 0, 0, 128, 0, 128, 128, 0] + [0] * (768 - 12)
    for t in range(lab.shape[0]):
        im = Image.fromarray(lab[t], mode="P")
        im.putpalette(palette)
        im.save(tmp_path / f"{t:05d}.png")
    got = load_masks(tmp_path)
    want = torch.from_numpy(np.stack([lab == k for k in (1, 2, 3)], 1))
    assert got.shape == (2, 3, 24, 32) and torch.equal(got, want)
    assert got[0].sum((-1, -2)).tolist() == [64, 96, 40]


def test_colour_label_pngs_one_object_per_colour(tmp_path):
    import cv2

    lab = _label_frames()
    colours = np.array([[0, 0, 0], [0, 0, 200], [0, 200, 0], [200, 0, 0]], np.uint8)  # BGR
    for t in range(lab.shape[0]):
        cv2.imwrite(str(tmp_path / f"{t:03d}.png"), colours[lab[t]])
    got = load_masks(tmp_path)
    assert got.shape[1] == 3
    # objects follow the colours' packed values; each one is exactly one label's pixels
    assert sorted(got[0].sum((-1, -2)).tolist()) == [40, 64, 96]
    assert not (got.sum(1) > 1).any() and torch.equal(got.any(1), torch.from_numpy(lab > 0))


def test_jpeg_masks_are_binary(tmp_path):
    """Lossy compression scatters a binary mask's values (0 -> 0..9, 255 -> 246..255): a JPEG
    mask is one object (> 127), not one object per grey level."""
    import cv2

    m = np.zeros((2, 48, 64), np.uint8)
    m[:, 10:30, 12:40] = 255
    for t in range(2):
        cv2.imwrite(str(tmp_path / f"{t:03d}.jpg"), m[t], [cv2.IMWRITE_JPEG_QUALITY, 60])
    assert len(np.unique(cv2.imread(str(tmp_path / "000.jpg"), cv2.IMREAD_UNCHANGED))) > 2
    got = load_masks(tmp_path)
    assert got.shape == (2, 1, 48, 64)
    assert (got[:, 0] != torch.from_numpy(m > 0)).sum() <= 0.01 * m.size


def test_resize_is_nearest_exact_as_opencv():
    """Masks are resized with pixel centres aligned (OpenCV's INTER_NEAREST_EXACT, away from
    exact ties): a 1-px column at x = 10 of a 64-px mask lands on x = 14 of a 90-px one (centre
    14.5 -> 10.3 source px), not on 15 (``mode="nearest"``: 15 -> 10.7, a shift right)."""
    import cv2

    m = np.zeros((1, 40, 64), bool)
    m[0, 5:30, 10] = True
    m[0, 20:23, 40:51] = True
    got = load_masks(m, size=(56, 90))
    want = cv2.resize(m[0].astype(np.uint8), (90, 56), interpolation=cv2.INTER_NEAREST_EXACT)
    assert torch.equal(got[0, 0], torch.from_numpy(want > 0))
    assert got[0, 0, 20].nonzero()[:, 0].tolist() == [14]


def test_zero_frame_masks_are_a_shape_error():
    with pytest.raises(ShapeError, match="0 frames"):
        load_masks(np.zeros((0, 4, 4), np.uint8), num_frames=3)
    with pytest.raises(ShapeError, match="0 frames"):
        load_masks(np.zeros((0, 4, 4), np.uint8))
