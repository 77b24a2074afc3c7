"""Binary morphology (_morphology): sliding-OR dilation and erosion against max-pooling and a
brute-force reference."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from geocon_torch._morphology import dilate_mask, erode_mask


def _maxpool_dilate(m: torch.Tensor, r: int) -> torch.Tensor:
    """Reference: (2r+1)^2 max-pool of a float copy, outside = 0."""
    lead = m.shape[:-2]
    x = m.reshape(-1, 1, *m.shape[-2:]).float()
    y = F.max_pool2d(F.pad(x, (r,) * 4), 2 * r + 1, stride=1)
    return (y > 0.5).reshape(*lead, *m.shape[-2:])


@pytest.mark.parametrize("radius", [0, 1, 2, 3, 4, 5, 7, 8, 13])
def test_dilation_equals_max_pooling(radius, device):
    g = torch.Generator().manual_seed(radius)
    m = (torch.rand(3, 2, 37, 53, generator=g) > 0.97).to(device)
    got = dilate_mask(m, radius)
    assert got.dtype == torch.bool and got.shape == m.shape and got.device == m.device
    assert torch.equal(got, _maxpool_dilate(m, radius))


def test_single_pixel_grows_to_a_clipped_square(device):
    m = torch.zeros(1, 20, 30, dtype=torch.bool, device=device)
    m[0, 1, 27] = True  # near the top-right corner: the square is clipped by the frame
    got = dilate_mask(m, 4)
    ys, xs = torch.nonzero(got[0], as_tuple=True)
    assert (int(ys.min()), int(ys.max()), int(xs.min()), int(xs.max())) == (0, 5, 23, 29)
    assert int(got.sum()) == 6 * 7


def test_radius_larger_than_the_frame(device):
    m = torch.zeros(2, 5, 6, dtype=torch.bool, device=device)
    m[0, 2, 3] = True
    got = dilate_mask(m, 20)
    assert bool(got[0].all()) and not bool(got[1].any())


def test_erosion_is_the_dual_and_keeps_the_border(device):
    g = torch.Generator().manual_seed(1)
    m = (torch.rand(4, 31, 29, generator=g) > 0.2).to(device)
    for r in (1, 3):
        assert torch.equal(erode_mask(m, r), ~_maxpool_dilate(~m, r))
    full = torch.ones(1, 9, 9, dtype=torch.bool, device=device)
    assert bool(erode_mask(full, 3).all())  # outside the frame does not erode


def test_empty_and_non_bool_inputs(device):
    assert dilate_mask(torch.zeros(0, 4, 4, device=device), 2).shape == (0, 4, 4)
    u8 = torch.zeros(1, 7, 7, dtype=torch.uint8, device=device)
    u8[0, 3, 3] = 1
    assert int(dilate_mask(u8, 1).sum()) == 9


@pytest.mark.parametrize("radius", [127, 128])
def test_wide_windows_on_long_dense_rows(radius, device):
    """The running counts wrap modulo 256 in uint8 (k = 2r + 1 = 255) or are exact in int64
    (k = 257); rows of 600 px, 30 % set (running counts well past 256), gaps wider than k."""
    g = torch.Generator().manual_seed(radius)
    m = torch.rand(2, 3, 600, generator=g) > 0.7
    m[0, :, 100:400] = False  # a gap wider than the window: its middle stays False
    m[1, 1] = False
    m = m.to(device)
    got = dilate_mask(m, radius)
    assert torch.equal(got, _maxpool_dilate(m, radius))
    assert not bool(got[0, :, 250].any()) and bool(got[0, :, 120].all())
    assert torch.equal(erode_mask(m, radius), ~_maxpool_dilate(~m, radius))


def test_open_close_equals_the_four_steps(device):
    """open_close runs its two middle dilations as one (radii added): the same masks as
    erode, dilate, dilate, erode one after the other, border included."""
    from geocon_torch.segment.motion import open_close

    g = torch.Generator().manual_seed(3)
    m = (torch.rand(3, 41, 57, generator=g) > 0.6).to(device)
    m[:, :, :2] = True  # set along the frame border
    for o, c in ((0, 3), (1, 3), (2, 1), (1, 0)):
        ref = erode_mask(dilate_mask(dilate_mask(erode_mask(m, o), o), c), c)
        assert torch.equal(open_close(m, o, c), ref), (o, c)
    assert not torch.equal(open_close(m, 1, 3), m)
