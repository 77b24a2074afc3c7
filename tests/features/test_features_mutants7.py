"""torch-sift's scale-space thresholds, border, sub-pixel refinement, patch geometry and
keypoint extras that no other default test pins (mutation audit s22). The detector is fed
hand-built octaves whose DoG is an exact quadratic peak (dyadic coefficients: every sum and
difference exact in float64), so position, scale and response are closed-form; the patch
sampler reads an atlas whose levels are linear ramps."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch.features import torch_sift as ts
from geocon_torch.features.sift_scale_space import Detections, detect, gaussian_pyramid
from geocon_torch.synth.textures import make_texture

F64 = torch.float64
H, W = 32, 40


def _octave(peak, height=0.25, a=2.0 ** -12, b=2.0 ** -12, c=2.0 ** -6, m=0.0
            ) -> torch.Tensor:
    """(1, 6, H, W) Gaussian levels whose DoG level s is ``height - a (x - x0)^2 - b (y -
    y0)^2 - m (x - x0) (y - y0) - c (s - s0)^2`` for ``peak = (s0, y0, x0)`` (level 0 all
    zero)."""
    s0, y0, x0 = peak
    s = torch.arange(5, dtype=F64).view(5, 1, 1)
    ys, xs = torch.meshgrid(torch.arange(H, dtype=F64), torch.arange(W, dtype=F64),
                            indexing="ij")
    dog = (height - a * (xs - x0) ** 2 - b * (ys - y0) ** 2 - m * (xs - x0) * (ys - y0)
           - c * (s - s0) ** 2)
    gauss = torch.cat([torch.zeros(1, H, W, dtype=F64), dog.cumsum(0)])
    assert torch.equal(gauss[1:] - gauss[:-1], dog)  # exact in float64
    return gauss[None]


def _valid(det: Detections):
    m = det.valid[0]
    return det.xy[0][m], det.sigma[0][m], det.response[0][m]


def test_quadratic_peak_is_refined_to_its_exact_position_scale_and_height():
    """Peak at (s, y, x) = (2.25, 15.75, 20.375) of octave 0 (0.5 px per octave px): one
    keypoint at (10.1875, 7.875) px, sigma 1.6 * 2^(2.25 / 3) * 0.5, response the height."""
    det = detect([_octave((2.25, 15.75, 20.375))], 4, 0.01, 0.02, 10.0)
    xy, sigma, resp = _valid(det)
    assert xy.shape == (1, 2)
    torch.testing.assert_close(xy[0], torch.tensor([10.1875, 7.875], dtype=F64), atol=1e-9,
                               rtol=0)
    assert float(sigma[0]) == pytest.approx(1.6 * 2 ** (2.25 / 3) * 0.5, rel=1e-9)
    assert float(resp[0]) == pytest.approx(0.25, rel=1e-9)


def test_a_peak_off_its_sample_maximum_is_reached_by_a_refinement_step():
    """A diagonal ridge (curvatures 1 : 9 along the diagonals, 2^-12 (10 dx^2 + 10 dy^2 -
    16 dx dy)) peaking at (x, y) = (20.6875, 16.375): the sample maximum is (21, 17), whose
    offset (-0.3125, -0.625) exceeds half a sample, so one refinement step moves to (21, 16)
    where it converges; the keypoint is the exact peak."""
    a = 2.0 ** -12
    octv = [_octave((2, 16.375, 20.6875), a=10 * a, b=10 * a, m=-16 * a)]
    xy, sigma, resp = _valid(detect(octv, 4, 0.01, 0.02, 10.0))
    assert xy.shape == (1, 2)
    torch.testing.assert_close(xy[0], torch.tensor([10.34375, 8.1875], dtype=F64), atol=1e-9,
                               rtol=0)
    assert float(resp[0]) == pytest.approx(0.25, rel=1e-9)


def test_a_peak_exactly_between_two_samples_never_converges_and_is_dropped():
    """A quadratic peak at x = 20.5, exactly between two samples: both are (non-strict)
    extrema whose offset is exactly +-0.5, which neither counts as converged (``< 0.5``) nor
    moves (half rounds to even: 0), so after REFINE_STEPS both are dropped, as OpenCV's
    ``adjustLocalExtrema`` drops a point that has not converged; keeping them on the final
    ``|offset| < 1`` alone would give two copies of one keypoint. A quarter sample off the
    middle converges to one exact keypoint."""
    assert _valid(detect([_octave((2, 16, 20.5))], 4, 0.01, 0.02, 10.0))[0].shape == (0, 2)
    for x0 in (20.4375, 20.5625):
        xy, _, resp = _valid(detect([_octave((2, 16, x0))], 4, 0.01, 0.02, 10.0))
        torch.testing.assert_close(xy, torch.tensor([[x0 / 2, 8.0]], dtype=F64), atol=1e-9,
                                   rtol=0)
        assert float(resp[0]) == pytest.approx(0.25, rel=1e-9)


def test_contrast_and_pre_threshold_at_exactly_the_peak_height():
    """An integer peak of height 0.25: kept at contrast 0.25 (``resp >= contrast``), not
    above; an extremum must exceed the pre-threshold (``|DoG| > threshold``)."""
    octv = [_octave((2, 16, 20))]
    assert _valid(detect(octv, 4, 0.1, 0.25, 10.0))[0].shape[0] == 1
    assert _valid(detect(octv, 4, 0.1, 0.25 + 2.0 ** -20, 10.0))[0].shape[0] == 0
    assert _valid(detect(octv, 4, 0.25 - 2.0 ** -20, 0.01, 10.0))[0].shape[0] == 1
    assert _valid(detect(octv, 4, 0.25, 0.01, 10.0))[0].shape[0] == 0


@pytest.mark.parametrize("ratio,kept", [(1, True), (9, True), (12, False)])
def test_edge_test_is_the_principal_curvature_ratio_r(ratio, kept):
    """Curvatures a = ratio * b: kept while tr^2 / det = (ratio + 1)^2 / ratio < (r + 1)^2 / r
    with r = 10 (12.1): ratio 9 (11.1) passes, 12 (14.1) does not."""
    octv = [_octave((2, 16, 20), a=ratio * 2.0 ** -12)]
    assert (_valid(detect(octv, 4, 0.01, 0.02, 10.0))[0].shape[0] == 1) is kept


def test_extrema_keep_five_octave_pixels_from_the_border():
    octv = [_octave((2, 16, 5))]
    assert _valid(detect(octv, 4, 0.01, 0.02, 10.0))[0].shape[0] == 1
    for x0, y0 in ((4, 16), (20, 4), (W - 5, 16), (20, H - 5)):
        assert _valid(detect([_octave((2, y0, x0))], 4, 0.01, 0.02, 10.0))[0].shape[0] == 0


def test_octaves_stop_before_a_side_below_13():
    """48 x 48 frame: octaves of 96, 48 and 24 px (a 12 px octave would hold no pixel 5 px from
    both borders with a 3 x 3 neighbourhood: MIN_OCTAVE_SIDE = 2 * 5 + 3)."""
    octs = gaussian_pyramid(torch.rand(1, 1, 48, 48, generator=torch.Generator().manual_seed(0)))
    assert [tuple(o.shape[-2:]) for o in octs] == [(96, 96), (48, 48), (24, 24)]
    assert all(o.shape[1] == 6 for o in octs)


def test_patches_sample_the_laf_of_the_detection_level():
    """Atlas levels are ramps 100 L + x: a 4-sample patch over the LAF of a detection at octave
    0, level 2, octave px (20, 12), sigma 0.5 (radius 6 sigma / 0.5 = 6 octave px) reads
    200 + 20 + 6 q, q = (2 j + 1) / 4 - 1; turned by pi / 2 the ramp runs down the rows."""
    hh, ww = 32, 48
    xs = torch.arange(ww, dtype=torch.float32).expand(hh, ww)
    levels = torch.stack([100.0 * lv + xs for lv in range(6)])[None]
    atlas, row0, sizes = ts.build_atlas([levels])
    assert atlas.shape == (1, 1, 3 * hh, ww)

    def det():
        one = lambda v: torch.tensor([[v]])  # noqa: E731
        return Detections(xy=torch.tensor([[[10.0, 6.0]]]), sigma=one(0.5), response=one(1.0),
                          octave=one(0), level=one(2), oct_xy=torch.tensor([[[20.0, 12.0]]]),
                          valid=one(True))

    q = torch.tensor([-0.75, -0.25, 0.25, 0.75])
    up = ts.atlas_patches(atlas, row0, sizes, det(), torch.zeros(1, 1), 4, 1.0)[0, 0]
    torch.testing.assert_close(up, (220.0 + 6.0 * q).expand(4, 4), atol=1e-4, rtol=0)
    turned = ts.atlas_patches(atlas, row0, sizes, det(), torch.full((1, 1), math.pi / 2), 4,
                              1.0)[0, 0]
    torch.testing.assert_close(turned, (220.0 - 6.0 * q)[:, None].expand(4, 4), atol=1e-4,
                               rtol=0)


@pytest.fixture(scope="module")
def gray():
    return make_texture(96, 128, 0)[None].mean(1, keepdim=True)


def test_extras_are_laf_scale_and_degrees(gray):
    """extra["scale"] is 6 sigma of the detection at the same position, extra["orientation"]
    in degrees (within half a histogram bin, 5 deg, of [-180, 180]: the parabolic peak
    refinement can pass the wrap)."""
    ex = ts.TorchSIFT(200, "cpu")
    kps = ex.extract(gray)
    _, det = ex.detect(gray.float(), None)
    m = kps.mask[0]
    assert int(m.sum()) > 50
    xy, scale, ori = kps.xy[0][m], kps.extra["scale"][0][m], kps.extra["orientation"][0][m]
    dxy, dsig = det.xy[0][det.valid[0]], det.sigma[0][det.valid[0]]
    for p, s in zip(xy[:20], scale[:20]):
        k = int((dxy - p).norm(dim=1).argmin())
        assert float((dxy[k] - p).norm()) < 1e-5
        assert float(s) == pytest.approx(6.0 * float(dsig[k]), rel=1e-5)
    assert float(ori.abs().max()) > 2 * math.pi and float(ori.abs().max()) <= 185.0


def test_detector_thresholds_and_orientation_patch(gray, monkeypatch):
    """contrast_threshold ct: extrema above 0.5 ct / 3, refined |DoG| >= ct / 3, edge ratio
    as given; the dominant orientation is read on kornia's 19 x 19 upright patch
    (``LAFOrienter(19)``)."""
    seen = {}
    real_detect, real_ori = ts.detect, ts.dominant_orientation

    def spy_detect(octaves, k, threshold, contrast, edge):
        seen["detect"] = (k, threshold, contrast, edge)
        return real_detect(octaves, k, threshold, contrast, edge)

    def spy_ori(patch):
        seen["patch"] = tuple(patch.shape[-2:])
        return real_ori(patch)

    monkeypatch.setattr(ts, "detect", spy_detect)
    monkeypatch.setattr(ts, "dominant_orientation", spy_ori)
    ts.TorchSIFT(100, "cpu", contrast_threshold=0.03, edge_threshold=8.0).extract(gray)
    k, thr, con, edge = seen["detect"]
    assert k == 100 and edge == 8.0
    assert thr == pytest.approx(0.005) and con == pytest.approx(0.01)
    assert seen["patch"] == (19, 19)
