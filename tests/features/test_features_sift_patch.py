"""torch-sift's patch stage (geocon_torch.features.sift_patch) against kornia's modules on the same
patches, and the scale-space layouts (blur, extrema filter) giving the same keypoints."""
from __future__ import annotations

import math

import kornia
import kornia.feature as KF
import pytest
import torch

import geocon_torch.features.sift_scale_space as sss
from geocon_torch.features.sift_patch import (dominant_orientation, replicate_gradients,
                                              sift_descriptor)
from geocon_torch.features.torch_sift import TorchSIFT

# (angle rad, descriptor); kornia builds its kernels in float32 (the default dtype), so float64
# agrees to that rounding only: 1.008e-8 with kornia 0.9.2, < 1e-8 with 0.9.0
TOL = {torch.float32: (2e-5, 3e-7), torch.float64: (1e-8, 2e-8)}


def _patches(n: int, size: int, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Random, smooth and one flat patch: (n, 1, size, size) in [0, 1]."""
    g = torch.Generator().manual_seed(size)
    p = torch.rand(n, 1, size, size, generator=g, dtype=torch.float64)
    smooth = torch.nn.functional.avg_pool2d(torch.rand(n // 4, 1, size + 4, size + 4,
                                                       generator=g, dtype=torch.float64), 5, 1)
    p[1:1 + n // 4] = smooth
    p[0] = 0.5
    return p.to(device=device, dtype=dtype)


def test_gradients_are_kornias_kernels(device, dtype):
    p = _patches(40, 19, dtype, device)
    for mode, sobel in (("sobel", True), ("diff", False)):
        ref = kornia.filters.spatial_gradient(p, mode)[:, 0]
        gx, gy = replicate_gradients(p[:, 0], sobel)
        torch.testing.assert_close(gx, ref[:, 0], rtol=0, atol=1e-6)
        torch.testing.assert_close(gy, ref[:, 1], rtol=0, atol=1e-6)


def test_orientation_matches_kornia(device, dtype):
    p = _patches(800, 19, dtype, device)
    ref = KF.PatchDominantGradientOrientation(19).to(device=device, dtype=dtype)(p)
    got = dominant_orientation(p)
    diff = (got - ref).abs()
    diff = torch.minimum(diff, 2 * math.pi - diff)  # the same direction across the wrap
    assert got.shape == (800,) and got.dtype == dtype
    assert diff.max().item() < TOL[dtype][0]


def test_orientation_of_a_ramp_and_run_to_run(device):
    """A ramp brightening towards +x has angle 0 (kornia's -atan2 convention), towards +y -pi/2;
    two calls give the same bits (the fixed-point histogram has no float atomics)."""
    x = torch.arange(19, dtype=torch.float32, device=device) / 19
    ramps = torch.stack([x.expand(19, 19), x[:, None].expand(19, 19)])[:, None]
    got = dominant_orientation(ramps)
    torch.testing.assert_close(got, torch.tensor([0.0, -math.pi / 2], device=device),
                               atol=1e-5, rtol=0)
    p = _patches(500, 19, torch.float32, device)
    assert torch.equal(dominant_orientation(p), dominant_orientation(p))


@pytest.mark.parametrize("rootsift", [True, False])
def test_descriptor_matches_kornia(device, dtype, rootsift):
    p = _patches(600, 32, dtype, device)
    ref = KF.SIFTDescriptor(32, rootsift=rootsift).to(device=device, dtype=dtype)(p)
    got = sift_descriptor(p, rootsift)
    assert got.shape == (600, 128) and got.dtype == dtype
    torch.testing.assert_close(got, ref, rtol=0, atol=TOL[dtype][1])
    norms = got.norm(dim=1)
    torch.testing.assert_close(norms[1:], torch.ones_like(norms[1:]), rtol=0, atol=1e-5)
    if not rootsift:
        assert got[0].abs().max() == 0  # a flat patch has no gradient: a zero descriptor


@pytest.mark.parametrize("blur, extrema", [("depthwise", "shift"), ("conv", "pool"),
                                           ("depthwise", "pool")])
def test_scale_space_layouts_give_the_same_keypoints(device, blur, extrema, monkeypatch):
    g = torch.Generator().manual_seed(3)
    gray = torch.nn.functional.avg_pool2d(torch.rand(3, 1, 100, 132, generator=g), 5, 1)
    gray = gray.to(device)
    ex = TorchSIFT(500, device=device)
    ref = ex.extract(gray)
    monkeypatch.setitem(sss.BLUR_LAYOUT, device.type, blur)
    monkeypatch.setitem(sss.EXTREMA_FILTER, device.type, extrema)
    got = ex.extract(gray)
    assert ref.mask.sum() > 300  # a real detection set, not an empty one
    assert torch.equal(got.mask, ref.mask)
    torch.testing.assert_close(got.xy, ref.xy, rtol=0, atol=1e-4)
    torch.testing.assert_close(got.descriptors, ref.descriptors, rtol=0, atol=1e-4)
