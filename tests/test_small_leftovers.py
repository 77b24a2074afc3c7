"""Tiny-input leftovers of ``features.lk``.

``min_eigenvalue_map`` (exported by ``geocon_torch.features``) raised torch's raw padding error
("Padding size should be less than the corresponding input dimension") on maps with a side of
1 px, and on any map whose side is at most half the covariance ``block``. It now follows OpenCV's
``cornerMinEigenVal`` there too: reflect-101 borders repeated as far as the windows reach (a
side of 1 or 2 px has no gradient across it, so the map is 0, as OpenCV's), and a bad argument
is a GeoConError naming it. Maps where the padding fits are bit-identical to before.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from geocon_torch.errors import InputError, ShapeError
from geocon_torch.features import min_eigenvalue_map, shi_tomasi
from geocon_torch.features import lk
from geocon_torch.features.lk import patch_ncc


def _seeded(shape, seed=0, dtype=torch.float64):
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed), dtype=dtype)


@pytest.mark.parametrize("size", [(1, 1), (1, 5), (5, 1), (2, 2), (2, 7), (7, 2)])
@pytest.mark.parametrize("block", [3, 5, 7])
def test_maps_with_a_side_of_one_or_two_px_are_zero_as_opencv(size, block):
    import cv2

    gray = _seeded((2, 1) + size, dtype=torch.float32)
    eig = min_eigenvalue_map(gray, block)
    assert eig.dtype == torch.float32 and tuple(eig.shape) == (2, 1) + size
    assert torch.equal(eig, torch.zeros_like(eig))
    ref = cv2.cornerMinEigenVal(gray[0, 0].numpy(), block, ksize=3)
    assert ref.shape == size and not ref.any()


@pytest.mark.parametrize("size,block", [((3, 3), 7), ((4, 6), 9), ((15, 15), 35),
                                        ((3, 3), 3), ((15, 15), 5), ((16, 40), 4)])
def test_blocks_wider_than_the_map_match_opencv(size, block):
    """OpenCV's value times (4 block)^2 (its Sobel and box scales), to float32 precision."""
    import cv2

    img = _seeded(size, seed=1, dtype=torch.float32)
    ref = cv2.cornerMinEigenVal(img.numpy(), block, ksize=3) * (4 * block) ** 2
    ours = min_eigenvalue_map(img[None, None].double(), block)[0, 0].numpy()
    assert np.abs(ours - ref).max() <= 2e-6 * max(np.abs(ref).max(), 1.0)


def _map_before_the_fix(gray, block):
    """``min_eigenvalue_map`` as it was before the fix (commit 0bdcd34^), verbatim but inlined:
    torch's reflect padding, which only works where every pad is below its side."""
    p = F.pad(gray, (1, 1, 1, 1), mode="reflect")
    dx = p[..., :, 2:] - p[..., :, :-2]
    dy = p[..., 2:, :] - p[..., :-2, :]
    gx = 1 * (dx[..., :-2, :] + dx[..., 2:, :]) + 2 * dx[..., 1:-1, :]
    gy = 1 * (dy[..., :, :-2] + dy[..., :, 2:]) + 2 * dy[..., :, 1:-1]
    cov = torch.cat([gx * gx, gx * gy, gy * gy], 1)
    r = block // 2
    cov = F.pad(cov, (r, block - 1 - r, r, block - 1 - r), mode="reflect")
    h, w = gray.shape[-2:]
    cov = sum(cov[..., k:k + h, :] for k in range(block))
    cov = sum(cov[..., k:k + w] for k in range(block))
    a, b, c = cov[:, 0:1] * 0.5, cov[:, 1:2], cov[:, 2:3] * 0.5
    return (a + c) - torch.sqrt((a - c) ** 2 + b * b)


def test_where_the_padding_fits_nothing_changes():
    """The maps of before the fix, bit for bit (the old code run beside the new one: digests of
    the bytes recorded on an AVX-512 machine did not hold on an AVX2 one, whose torch kernels
    round differently), and the new padding equals torch's reflect padding wherever it applies."""
    cases = [(_seeded((2, 1, 16, 40)), 3), (_seeded((1, 1, 3, 3), seed=2), 5),
             (_seeded((2, 1, 2, 2), seed=4).float(), 3), (_seeded((1, 1, 9, 7), seed=5), 7)]
    for gray, block in cases:
        eig = min_eigenvalue_map(gray, block)
        assert eig.dtype == gray.dtype and torch.equal(eig, _map_before_the_fix(gray, block))
        assert (eig.abs().max() > 0) == (min(gray.shape[-2:]) > 2)  # 2-px sides: no gradient
    x = _seeded((2, 3, 5, 9))
    for pads in [(1, 1, 1, 1), (2, 1, 4, 3), (0, 0, 1, 0), (8, 8, 4, 4)]:
        assert torch.equal(lk._pad_reflect101(x, *pads), F.pad(x, pads, mode="reflect"))


def test_reflect101_beyond_the_side_is_opencvs_border_interpolate():
    import cv2

    row = torch.arange(3.0)[None, None, None]  # (1, 1, 1, 3)
    got = lk._pad_reflect101(row, 5, 4, 0, 0)[0, 0, 0].long().tolist()
    want = [cv2.borderInterpolate(i, 3, cv2.BORDER_REFLECT_101) for i in range(-5, 3 + 4)]
    assert got == want == [1, 0, 1, 2, 1, 0, 1, 2, 1, 0, 1, 2]
    one = lk._pad_reflect101(torch.tensor([[[[7.0]]]]), 2, 1, 1, 3)
    assert tuple(one.shape) == (1, 1, 5, 4) and bool((one == 7.0).all())


def test_empty_maps_and_bad_arguments():
    empty = min_eigenvalue_map(torch.zeros(2, 1, 0, 5))
    assert tuple(empty.shape) == (2, 1, 0, 5)
    with pytest.raises(InputError, match="block .* must be an integer >= 1, got 0"):
        min_eigenvalue_map(torch.rand(1, 1, 8, 8), 0)
    with pytest.raises(ShapeError, match=r"gray frames must have shape \(T, 1, H, W\), got "
                                         r"\(8, 8\)"):
        min_eigenvalue_map(torch.rand(8, 8))


def test_shi_tomasi_with_a_block_wider_than_the_frame():
    """block 35 on 16-px frames: a padding error before; now OpenCV's corners."""
    import cv2

    img = (_seeded((16, 16), seed=3, dtype=torch.float32) * 255).to(torch.uint8)
    for block in (17, 35):
        xy, ok = shi_tomasi(img[None, None].float() / 255, 50, block=block)
        ref = cv2.goodFeaturesToTrack(img.numpy(), 50, 0.001, 3, blockSize=block).reshape(-1, 2)
        assert set(map(tuple, xy[0][ok[0]].long().tolist())) == \
            set(map(tuple, ref.astype(int).tolist()))


@pytest.mark.parametrize("size", [(1, 1), (2, 2), (3, 3), (15, 15)])
def test_patch_ncc_on_tiny_frames(size):
    gray = _seeded((2, 1) + size, dtype=torch.float32)
    pts = torch.zeros(1, 3, 2)
    ncc = patch_ncc(gray, torch.tensor([[0, 1]]), pts, pts, 7)
    assert tuple(ncc.shape) == (1, 3) and bool(((ncc >= -1) & (ncc <= 1)).all())


def test_patch_ncc_on_empty_frames_names_gray():
    pts = torch.zeros(1, 3, 2)
    with pytest.raises(ShapeError, match=r"gray frames must be at least 1 x 1 px .* got shape "
                                         r"\(2, 1, 0, 4\)"):
        patch_ncc(torch.zeros(2, 1, 0, 4), torch.tensor([[0, 1]]), pts, pts, 7)
