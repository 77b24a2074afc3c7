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
