"""Mask files of another aspect ratio and NaN / soft float masks are clear InputErrors
(issue 16 item 8); resizing them happens only when asked."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.config import load_config
from geocon_torch.errors import InputError
from geocon_torch.segment.files import load_masks
from geocon_torch.synth import grounded_clip


def _square(t: int = 3, side: int = 100) -> np.ndarray:
    m = np.zeros((t, side, side), bool)
    m[:, 20:60, 30:70] = True
    return m


def test_other_aspect_ratio_is_an_error_naming_both_sizes():
    with pytest.raises(InputError, match=r"100 x 100 px .* 720 x 480 px") as err:
        load_masks(_square(), size=(480, 720))
    assert "segment.resize_masks" in str(err.value)


def test_other_aspect_ratio_is_resized_when_asked():
    got = load_masks(_square(), size=(480, 720), resize=True)
    assert got.shape == (3, 1, 480, 720) and bool(got.any())


def test_same_aspect_within_one_percent_is_resized():
    m = np.zeros((2, 100, 150), bool)
    m[:, 10:20, 10:20] = True
    assert load_masks(m, size=(200, 300)).shape == (2, 1, 200, 300)
    assert load_masks(m, size=(683, 1024)).shape == (2, 1, 683, 1024)  # 0.05 % off


def test_nan_float_masks_get_a_clear_message():
    m = _square().astype(np.float32)
    m[0, 0, 0] = np.nan
    with pytest.raises(InputError, match="NaN"):
        load_masks(m)
    with pytest.raises(InputError, match="NaN"):
        load_masks(torch.from_numpy(m[:, None]))  # (T, K, H, W) too


def test_soft_float_masks_get_a_clear_message(tmp_path):
    m = _square().astype(np.float32) * 0.7
    np.savez(tmp_path / "soft.npz", masks=m)
    with pytest.raises(InputError, match=r"binary \(0 / 1\).*m > 0.5"):
        load_masks(tmp_path / "soft.npz")
    assert load_masks((m > 0.5).astype(np.float32)).shape == (3, 1, 100, 100)  # 0 / 1 floats


def test_score_clip_refuses_stretched_masks_unless_configured():
    frames = grounded_clip("C1", num_frames=4, size=(120, 160)).frames
    masks = torch.zeros(4, 50, 50, dtype=torch.bool)
    masks[:, 10:20, 10:20] = True
    with pytest.raises(InputError, match="aspect"):
        score_clip(frames, masks=masks, preset="background", device="cpu", progress=False)
    cfg = load_config({"segment": {"resize_masks": True}})
    res = score_clip(frames, masks=masks, preset="background", device="cpu", config=cfg,
                     progress=False)
    assert res.background["segment"]["objects"] == 1


def _bg_points():
    bg = torch.ones(3, 16, 20, dtype=torch.bool)
    bg[2] = False
    return bg, torch.tensor([[[5.0, 5.0]]])


def test_sample_mask_checks_mask_frames_and_their_range():
    from geocon_torch.errors import ShapeError
    from geocon_torch.segment import sample_mask
    bg, pts = _bg_points()
    assert sample_mask(bg, pts, torch.tensor([2])).tolist() == [[False]]
    assert sample_mask(bg, pts, torch.tensor([1], dtype=torch.int32)).tolist() == [[True]]
    for frame in (-1, 3):
        with pytest.raises(InputError, match=r"frames must be in \[0, 3\) \(the mask's T\)"):
            sample_mask(bg, pts, torch.tensor([frame]))
    with pytest.raises(ShapeError, match=r"frames must be a \(1,\) integer tensor, got "
                                         r"\(2,\) torch.int64"):
        sample_mask(bg, pts, torch.tensor([0, 1]))
    with pytest.raises(ShapeError, match=r"frames must be .*got \(1,\) torch.float32"):
        sample_mask(bg, pts, torch.tensor([0.0]))
    with pytest.raises(ShapeError, match=r"mask must be a \(T, H, W\) bool tensor, got "
                                         r"\(3, 16, 20\) torch.float32"):
        sample_mask(bg.float(), pts, torch.tensor([0]))
    with pytest.raises(ShapeError, match=r"mask must be .*got \(16, 20\) torch.bool"):
        sample_mask(bg[0], pts, torch.tensor([0]))


def test_background_keep_checks_pairs_and_points():
    from geocon_torch.errors import ShapeError
    from geocon_torch.segment import background_keep
    bg, pts = _bg_points()
    assert background_keep(bg, pts, pts, torch.tensor([[0, 1]])).tolist() == [[True]]
    assert background_keep(bg, pts, pts, torch.tensor([[0, 2]])).tolist() == [[False]]
    with pytest.raises(ShapeError, match=r"pairs must be a \(1, 2\) integer tensor, got \(2,\)"):
        background_keep(bg, pts, pts, torch.tensor([0, 1]))
    with pytest.raises(ShapeError, match=r"pairs must be a \(1, 2\) integer tensor, got \(1, 3\)"):
        background_keep(bg, pts, pts, torch.tensor([[0, 1, 2]]))
    with pytest.raises(InputError, match=r"pairs must be in \[0, 3\)"):
        background_keep(bg, pts, pts, torch.tensor([[0, -1]]))
    with pytest.raises(InputError, match=r"pairs must be in \[0, 3\)"):
        background_keep(bg, pts, pts, torch.tensor([[3, 0]]))
    with pytest.raises(ShapeError, match=r"shapes must match: x1=\(1, 1, 2\), x2=\(1, 2, 2\)"):
        background_keep(bg, pts, pts.expand(1, 2, 2), torch.tensor([[0, 1]]))


def test_chunked_background_keep_needs_both_endpoints_in_the_background():
    """B_i(x1) & B_j(x2): a match whose x2 lands on frame 1's object (dilated by the margin) is
    not background although its x1 is, whatever the chunking; the unchunked reference agrees."""
    from geocon_torch.segment import background_keep, background_mask
    from geocon_torch.segment.background import background_keep_chunked
    content = torch.ones(20, 24, dtype=torch.bool)
    objects = torch.zeros(3, 1, 20, 24, dtype=torch.bool)
    objects[1, 0, 2:6, 2:6] = True  # object in frame 1 only, dilated by 2: rows / cols 0..7
    x1 = torch.tensor([[[15.0, 15.0], [15.0, 15.0], [7.0, 7.0], [8.0, 8.0]]])
    x2 = torch.tensor([[[16.0, 14.0], [3.0, 3.0], [16.0, 14.0], [16.0, 14.0]]])
    for pairs, want in (([[0, 1]], [[True, False, True, True]]),
                        ([[1, 2]], [[True, True, False, True]])):
        pairs = torch.tensor(pairs)
        for chunk in (1, 2, 16):
            got = background_keep_chunked(content, objects, 2, x1, x2, pairs, chunk=chunk)
            assert got.tolist() == want, (pairs.tolist(), chunk)
        bg = background_mask(content, objects, 2)
        assert background_keep(bg, x1, x2, pairs).tolist() == want
