"""Forward-backward reliability: closed-form occlusion case and a real LK flow pair."""
from __future__ import annotations

import pytest
import torch
from helpers import render_object_pair

from geocon_torch.errors import ShapeError
from geocon_torch.flow import DenseLKFlow, forward_backward_error, forward_backward_reliability


def _square_flows(dtype, device, shift=5):
    """A 20x20 square moving +shift px in x over a static background (exact flows)."""
    h, w = 40, 60
    fw = torch.zeros(1, 2, h, w, dtype=dtype, device=device)
    bw = torch.zeros_like(fw)
    fw[0, 0, 10:30, 10:30] = shift  # object at t
    bw[0, 0, 10:30, 10 + shift:30 + shift] = -shift  # object at t+1
    return fw, bw


def test_occluded_background_is_unreliable(device, dtype):
    fw, bw = _square_flows(dtype, device)
    rel = forward_backward_reliability(fw, bw, threshold_px=1.0)
    assert rel.shape == (1, 40, 60) and rel.dtype == dtype
    assert (rel[0, 10:30, 10:30] == 1).all()  # object: round trip closes exactly
    assert (rel[0, 10:30, 31:35] == 0).all()  # background covered at t+1: error 5 px
    assert (rel[0, :10] == 1).all() and (rel[0, 10:30, 36:] == 1).all()
    err, inside = forward_backward_error(fw, bw)
    torch.testing.assert_close(err[0, 10:30, 31:35], torch.full((20, 4), 5.0, dtype=dtype,
                                                               device=device))
    assert inside.all()


def test_soft_ramp_and_frame_exit(device):
    fw, bw = _square_flows(torch.float64, device, shift=0)
    fw[0, 0, 0, 0] = 0.0
    bw[0, 0] = 1.5  # constant 1.5 px round-trip error everywhere
    rel = forward_backward_reliability(fw, bw, threshold_px=1.0)
    torch.testing.assert_close(rel, torch.full_like(rel, 0.5))  # 2 - 1.5 / 1
    fw2 = torch.zeros_like(fw)
    fw2[0, 0, :, -3:] = 5.0  # leaves the frame
    rel2 = forward_backward_reliability(fw2, torch.zeros_like(fw2))
    assert (rel2[0, :, -3:] == 0).all() and (rel2[0, :, :-3] == 1).all()


def test_lk_flows_flag_the_covered_strip():
    """Disc moving 6 px right: background just right of it at t is covered at t+1. LK smears
    flow across the boundary, so the strip is only partly caught; it must still be clearly less
    reliable than the object interior and the far background (3 scenes, batched)."""
    scenes = [render_object_pair(shift=(6.0, 0.0), seed=s) for s in (2, 3, 4)]
    f1 = torch.stack([s[0][0] for s in scenes]).float()
    f2 = torch.stack([s[0][1] for s in scenes]).float()
    masks = torch.stack([s[1] for s in scenes])
    flows = DenseLKFlow()(torch.cat([f1, f2]), torch.cat([f2, f1]))
    rel = forward_backward_reliability(flows[:3], flows[3:], 1.0)
    covered = torch.roll(masks, shifts=6, dims=2) & ~masks  # x - 6 inside the disc
    pool = torch.nn.functional.max_pool2d
    interior = pool((~masks).float()[:, None], 9, 1, 4)[:, 0] == 0
    far_bg = pool((masks | covered).float()[:, None], 17, 1, 8)[:, 0] == 0
    assert rel[covered].mean() < 0.7
    assert rel[interior].mean() > 0.95 and rel[far_bg].mean() > 0.9


def test_bad_shapes():
    with pytest.raises(ShapeError):
        forward_backward_reliability(torch.zeros(1, 2, 5, 5), torch.zeros(1, 2, 5, 6))
    with pytest.raises(ShapeError):
        forward_backward_reliability(torch.zeros(1, 3, 5, 5), torch.zeros(1, 3, 5, 5))
    with pytest.raises(ValueError):
        forward_backward_reliability(torch.zeros(1, 2, 5, 5), torch.zeros(1, 2, 5, 5), 0.0)


def test_integer_or_empty_flows_are_shape_errors():
    long = torch.zeros(1, 2, 4, 4, dtype=torch.long)
    with pytest.raises(ShapeError, match=r"flow_fw must be a float tensor, got torch.int64"):
        forward_backward_error(long, long)
    with pytest.raises(ShapeError, match=r"flow_bw must be a float tensor, got torch.int64"):
        forward_backward_reliability(long.float(), long)
    for shape in ((1, 2, 0, 4), (1, 2, 4, 0), (0, 2, 0, 0)):
        with pytest.raises(ShapeError, match=r"flow_fw must have H, W >= 1, got \("):
            forward_backward_error(torch.zeros(shape), torch.zeros(shape))
    # still fine: P = 0 pairs of non-empty frames, float16 flows
    assert forward_backward_reliability(torch.zeros(0, 2, 3, 4), torch.zeros(0, 2, 3, 4)).shape \
        == (0, 3, 4)
    half = torch.zeros(1, 2, 3, 4, dtype=torch.float16)
    assert forward_backward_reliability(half, half).dtype == torch.float16
