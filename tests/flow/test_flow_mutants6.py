"""Mutation-testing gaps (s21 mut6_measures) in the weight-free dense flow (torch-lk) and the
forward-backward reliability: closed-form inputs, a stubbed Gauss-Newton step where the schedule
of the pyramid is the subject. Fast."""
import math

import torch
import torch.nn.functional as F

from geocon_torch.flow import DenseLKFlow, forward_backward_error, forward_backward_reliability
from geocon_torch.flow.lk_dense import gaussian_blur

_ONE_STEP = dict(levels=1, iterations=1, fine_iterations=1, median=1, level_median=1,
                 presmooth=0.0)


def test_reliability_is_zero_where_the_flow_leaves_the_frame_even_if_it_closes():
    """The round trip closes exactly (backward = -forward, border-sampled past the edge), yet a
    pixel whose ``x + f_fw(x)`` lies outside frame t+1 (x > W - 1 or y > H - 1) has weight 0."""
    h, w = 8, 12
    fw = torch.zeros(2, 2, h, w, dtype=torch.float64)
    fw[0, 0], fw[1, 1] = 5.0, 0.5  # pair 0: 5 px right, pair 1: half a px down
    bw = -fw
    err, inside = forward_backward_error(fw, bw)
    assert err.abs().max() == 0
    rel = forward_backward_reliability(fw, bw)
    want = torch.ones(2, h, w, dtype=torch.float64)
    want[0, :, 7:] = 0  # x + 5 > 11 from x = 7 on
    want[1, 7, :] = 0  # y + 0.5 > 7 on the last row only
    assert torch.equal(inside, want.bool())
    assert torch.equal(rel, want)


def test_flat_frames_give_zero_flow_not_nan():
    """No texture: the Tikhonov term on both diagonal entries keeps the 2 x 2 solve regular, so
    a flat frame, a letterboxed frame's black bars and a frame with no vertical gradient get a
    finite flow (0 where there is nothing to track)."""
    est = DenseLKFlow()
    flat = torch.full((1, 1, 40, 56), 0.4)
    out = est(flat, flat)
    assert torch.isfinite(out).all() and out.abs().max() < 1e-5
    xs = torch.arange(56, dtype=torch.float32)
    stripes = (0.5 + 0.3 * torch.cos(xs / 5.0)).expand(1, 1, 40, 56).contiguous()
    moved = (0.5 + 0.3 * torch.cos((xs - 0.5) / 5.0)).expand(1, 1, 40, 56).contiguous()
    out = est(stripes, moved)
    assert torch.isfinite(out).all()
    assert out[0, 1].abs().max() < 0.01  # nothing constrains v: it stays at ~0
    assert (out[0, 0, 8:-8, 8:-8] - 0.5).abs().median() < 0.05
    bars = stripes.clone()
    bars[..., :10, :] = 0.0
    out = est(bars, bars)
    assert torch.isfinite(out).all() and out.abs().max() < 1e-4


def _texture(h, w, dx=0.0, dy=0.0):
    x = torch.arange(w, dtype=torch.float64).view(1, 1, 1, w) - dx
    y = torch.arange(h, dtype=torch.float64).view(1, 1, h, 1) - dy
    return 0.5 + 0.2 * torch.cos(x / 9.0) + 0.2 * torch.cos((x + 1.7 * y) / 7.0)


def test_a_gauss_newton_step_is_clamped_to_one_px():
    """One step of the single-level solver on a 3-px translation moves no pixel more than 1 px
    (most of the interior exactly 1 px)."""
    f = DenseLKFlow(**_ONE_STEP)(_texture(40, 96), _texture(40, 96, dx=3.0))
    assert f.abs().max() == 1.0
    assert (f[0, 0, 8:-8, 12:-12] == 1.0).float().mean() > 0.6


class _Stub:
    """Stands in for ``DenseLKFlow._step``: records the level sizes it is called at and
    returns ``fn(flow, level size)``."""

    def __init__(self, fn):
        self.fn, self.calls = fn, []

    def __call__(self, i1, g1, i2, flow):
        self.calls.append(tuple(i1.shape[-2:]))
        return self.fn(flow, tuple(i1.shape[-2:]))


def test_coarse_flow_is_rescaled_per_axis_to_the_finer_level():
    """A coarse-level flow of (1, 1) px (level 17 x 32 of a 33 x 64 frame) reaches the full
    level as (64 / 32, 33 / 17) px: each component scaled by its own axis' size ratio."""
    est = DenseLKFlow(levels=2, iterations=1, fine_iterations=1, median=1, level_median=1,
                      min_level_size=1)
    est._step = _Stub(lambda flow, hw: flow + 1.0 if hw == (17, 32) else flow)
    frame = torch.zeros(1, 1, 33, 64, dtype=torch.float64)
    out = est(frame, frame)
    assert est._step.calls == [(17, 32), (33, 64)]
    torch.testing.assert_close(out[0, 0], torch.full((33, 64), 2.0, dtype=torch.float64))
    torch.testing.assert_close(out[0, 1], torch.full((33, 64), 33 / 17, dtype=torch.float64))


def test_default_pyramid_and_iteration_schedule():
    """Defaults: levels down to a short side of 16 px (inclusive: 64 -> 32 -> 16), 6 steps per
    coarse level and 3 at the finest."""
    est = DenseLKFlow()
    est._step = _Stub(lambda flow, hw: flow)
    frame = torch.zeros(1, 1, 64, 96)
    est(frame, frame)
    assert est._step.calls == [(16, 24)] * 6 + [(32, 48)] * 6 + [(64, 96)] * 3
    assert [tuple(p.shape[-2:]) for p in est._pyramid(frame)] == [(64, 96), (32, 48), (16, 24)]


def test_default_level_median_is_5x5():
    """The median that closes each level is 5 x 5: a 3 x 3 blob of outliers (9 of 25) left by
    the last step of the finest level is removed (a 3 x 3 median would keep its centre)."""
    def blob(flow, hw):
        out = flow.clone()
        out[:, :, 10:13, 20:23] = 10.0
        return out
    est = DenseLKFlow(levels=1, median=1)
    est._step = _Stub(blob)
    frame = torch.zeros(1, 1, 32, 48)
    assert torch.equal(est(frame, frame), torch.zeros(1, 2, 32, 48))


def test_gaussian_blur_keeps_three_sigma_of_taps():
    """Blur of an impulse with sigma = 1 is the outer product of the normalised taps
    exp(-i^2 / 2), |i| <= 3 (radius ceil(3 sigma)): nonzero at 3 px, zero at 4 px."""
    x = torch.zeros(1, 1, 15, 15, dtype=torch.float64)
    x[..., 7, 7] = 1.0
    k = torch.tensor([math.exp(-0.5 * i * i) for i in range(-3, 4)], dtype=torch.float64)
    k = k / k.sum()
    want = torch.zeros(15, 15, dtype=torch.float64)
    want[4:11, 4:11] = torch.outer(k, k)
    torch.testing.assert_close(gaussian_blur(x, 1.0)[0, 0], want, rtol=0, atol=1e-15)


def test_pyramid_levels_are_antialiased():
    """Stripes of a 3-px period are above the Nyquist rate of the half-size level: the
    antialiased downsampling flattens them (std 0.05, plain bilinear keeps 0.18)."""
    xs = torch.arange(96.0)
    s = (0.5 + 0.5 * torch.cos(2 * math.pi * xs / 3)).view(1, 1, 1, 96).expand(1, 1, 32, 96)
    level1 = DenseLKFlow()._pyramid(s.contiguous())[1]
    assert level1.shape[-2:] == (16, 48)
    assert level1.std() < 0.08
    plain = F.interpolate(s, size=(16, 48), mode="bilinear", align_corners=False)
    assert plain.std() > 0.15


def _fine_texture(h, w, dx=0.0, dy=0.0):
    """Smooth texture whose x and y gradients correlate (J_xy != 0), shifted by (dx, dy)."""
    x = torch.arange(w, dtype=torch.float64).view(1, 1, 1, w) - dx
    y = torch.arange(h, dtype=torch.float64).view(1, 1, h, 1) - dy
    return 0.5 + 0.2 * torch.cos(x / 3.0) + 0.2 * torch.cos((x + 1.7 * y) / 2.5)


def test_one_step_solves_the_2x2_system_exactly():
    """One Gauss-Newton step (closed-form inverse of the 2 x 2 structure tensor, off-diagonal
    term included) recovers a (0.3, -0.2) px translation to 0.05 px (measured 0.031 / 0.015)."""
    f = DenseLKFlow(**_ONE_STEP)(_fine_texture(40, 64), _fine_texture(40, 64, 0.3, -0.2))
    err = f[0, :, 8:-8, 8:-8] - torch.tensor([0.3, -0.2], dtype=torch.float64).view(2, 1, 1)
    assert err.abs().max() < 0.05


def test_translation_up_to_the_frame_edge():
    """Default torch-lk on a 2.5 px translation: < 0.2 px in the interior (measured 0.08) and
    < 1 px in the 6 columns whose samples leave frame t+1 (measured 0.43): those get no data
    term and inherit their neighbours' flow instead of matching the replicated border."""
    f = DenseLKFlow()(_fine_texture(48, 64), _fine_texture(48, 64, 2.5, 0.0))[0]
    err = (f - torch.tensor([2.5, 0.0], dtype=torch.float64).view(2, 1, 1)).norm(dim=0)
    assert err[8:-8, 8:-8].max() < 0.2
    assert err[:, -6:].max() < 1.0
