"""AdaDFRC-W2 functional core: closed-form values, a per-object numpy reference, W2 vs exact
assignment, batching, invalid objects and the track summary."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from geocon_torch.errors import ShapeError
from geocon_torch.measures.foreground import (adadfrc, adadfrc_summary, grid_cells,
                                                        sinkhorn_w2)


def _grid(h, w, dtype, device):
    ys, xs = torch.meshgrid(torch.arange(h, dtype=dtype, device=device),
                            torch.arange(w, dtype=dtype, device=device), indexing="ij")
    return xs, ys


def _blob_masks(h, w, device, gen):
    """(P=3, K=2, H, W): an ellipse and a rotated rectangle at random places per pair."""
    xs, ys = _grid(h, w, torch.float64, "cpu")
    masks = torch.zeros(3, 2, h, w, dtype=torch.bool)
    for p in range(3):
        c = torch.rand(4, generator=gen, dtype=torch.float64)
        cx, cy = 15 + 30 * c[0], 15 + 20 * c[1]
        masks[p, 0] = ((xs - cx) / 13) ** 2 + ((ys - cy) / 9) ** 2 < 1
        a = float(c[2]) * 3.0
        u = (xs - (40 + 10 * c[3])) * np.cos(a) + (ys - 30) * np.sin(a)
        v = -(xs - (40 + 10 * c[3])) * np.sin(a) + (ys - 30) * np.cos(a)
        masks[p, 1] = (u.abs() < 14) & (v.abs() < 6)
    return masks.to(device)


def _reference(flow, masks, rel, grid):
    """Loop-per-object numpy implementation of eq. 14-15 with the documented conventions."""
    flow, masks = flow.cpu().double().numpy(), masks.cpu().numpy()
    rel = None if rel is None else rel.cpu().double().numpy()
    p_, k_ = masks.shape[:2]
    out = np.zeros((p_, k_))
    for p in range(p_):
        for k in range(k_):
            m = masks[p, k]
            ys, xs = np.nonzero(m)
            if len(xs) == 0:
                continue
            x0, x1, y0, y1 = xs.min(), xs.max(), ys.min(), ys.max()
            cx = np.minimum((xs - x0) * grid // (x1 - x0 + 1), grid - 1)
            cy = np.minimum((ys - y0) * grid // (y1 - y0 + 1), grid - 1)
            pos, mot, wts = [], [], []
            for c in range(grid * grid):
                sel = (cy * grid + cx) == c
                if not sel.any():
                    continue
                px, py = xs[sel], ys[sel]
                pos.append([px.mean(), py.mean()])
                mot.append([np.median(flow[p, 0, py, px]), np.median(flow[p, 1, py, px])])
                wts.append(sel.sum() if rel is None else rel[p, py, px].sum())
            pos, mot, wts = np.array(pos), np.array(mot), np.array(wts, dtype=float)
            design = np.concatenate([pos, np.ones((len(pos), 1))], 1)
            sw = np.sqrt(wts)[:, None]
            coef, *_ = np.linalg.lstsq(design * sw, mot * sw, rcond=None)
            res = design @ coef - mot
            out[p, k] = (wts * (res ** 2).sum(1)).sum() / wts.sum()
    return out


def test_affine_flow_scores_zero(device, dtype):
    """Translation: D = 0 on any mask. Affine: D = 0 on a box whose cells are symmetric
    (median = mean = value at the centroid); on curved masks only the boundary cells' median /
    centroid mismatch remains (tiny)."""
    gen = torch.Generator().manual_seed(0)
    h, w = 60, 80
    blobs = _blob_masks(h, w, device, gen)
    box = torch.zeros_like(blobs)
    box[:, :, 8:48, 16:64] = True  # 40 x 48 px, N = 8 -> 5 x 6 px cells
    xs, ys = _grid(h, w, dtype, device)
    a = (torch.rand(3, 2, 2, generator=gen, dtype=dtype) - 0.5).to(device) * 0.2
    b = (torch.rand(3, 2, generator=gen, dtype=dtype) - 0.5).to(device) * 8
    affine = torch.einsum("pij,jhw->pihw", a, torch.stack([xs, ys])) + b[:, :, None, None]
    shift = b[:, :, None, None].expand(-1, -1, h, w).contiguous()
    tol = 1e-4 if dtype == torch.float32 else 1e-12
    for score in ("wmse", "w2"):
        for flow, masks, bound in ((shift, blobs, tol), (affine, box, tol),
                                   (affine, blobs, 1e-3)):
            d, valid = adadfrc(flow, masks, score=score)
            assert valid.all()
            assert d.abs().max() < bound, (score, bound, d)


@pytest.mark.parametrize("with_reliability", [False, True])
def test_matches_numpy_reference(device, with_reliability):
    gen = torch.Generator().manual_seed(1)
    h, w = 60, 80
    masks = _blob_masks(h, w, device, gen)
    xs, ys = _grid(h, w, torch.float64, device)
    noise = torch.randn(3, 2, h, w, generator=gen, dtype=torch.float64).to(device)
    flow = torch.stack([torch.sin(ys / 5.0) * 2, torch.cos(xs / 7.0) * 1.5])[None] + noise * 0.3
    rel = (torch.rand(3, h, w, generator=gen, dtype=torch.float64).to(device)
           if with_reliability else None)
    d, valid = adadfrc(flow, masks, rel, grid=6)
    ref = _reference(flow, masks, rel, 6)
    assert valid.all()
    np.testing.assert_allclose(d.cpu().numpy(), ref, rtol=1e-9, atol=1e-12)
    assert (d > 0.05).all()


def test_batch_equals_per_item(device):
    gen = torch.Generator().manual_seed(2)
    h, w = 60, 80
    masks = _blob_masks(h, w, device, gen)
    flow = torch.randn(3, 2, h, w, generator=gen).to(device)
    d, valid = adadfrc(flow, masks)
    for p in range(3):
        for k in range(2):
            dp, vp = adadfrc(flow[p:p + 1], masks[p:p + 1, k:k + 1])
            assert bool(vp[0, 0]) == bool(valid[p, k])
            torch.testing.assert_close(dp[0, 0], d[p, k], rtol=1e-5, atol=1e-6)


def test_invalid_objects_are_flagged_and_isolated(device):
    gen = torch.Generator().manual_seed(3)
    h, w = 60, 80
    masks = torch.zeros(2, 4, h, w, dtype=torch.bool, device=device)
    masks[:, 0, 10:40, 10:50] = True  # good object
    masks[:, 1, 5:10, 5:10] = True  # 25 px < min_pixels
    masks[:, 3, 30, 0:80] = True  # 80 px but collinear (1-px line): degenerate affine fit
    flow = torch.randn(2, 2, h, w, generator=gen).to(device)
    d, valid = adadfrc(flow, masks, min_pixels=64)
    assert valid[:, 0].all() and not valid[:, 1:].any()
    assert torch.isfinite(d).all() and (d[:, 1:] == 0).all()
    alone, _ = adadfrc(flow, masks[:, :1])
    torch.testing.assert_close(alone[:, 0], d[:, 0])
    # fully unreliable object -> invalid; no objects at all -> empty result
    d2, v2 = adadfrc(flow, masks[:, :1], torch.zeros(2, h, w, device=device))
    assert not v2.any() and (d2 == 0).all()
    d3, v3 = adadfrc(flow, masks[:, :0])
    assert d3.shape == (2, 0) and v3.shape == (2, 0)


def test_three_cells_are_enough_two_are_not():
    """Validity needs at least 3 cells with positive weight (the affine fit's 3 points). An
    L-shaped object filling 3 of the 4 cells of a 2 x 2 grid (300 px >= min_pixels) is valid,
    and 3 cells fit any flow exactly: D = 0 for a translation and for a flow that differs per
    cell. The same object without its bottom-left cell (2 diagonal cells, 200 px) is invalid."""
    h = w = 40
    m = torch.zeros(1, 2, h, w, dtype=torch.bool)
    m[0, :, 0:10, 0:10] = True  # top-left cell
    m[0, :, 10:20, 10:20] = True  # bottom-right cell
    m[0, 0, 10:20, 0:10] = True  # bottom-left cell: object 0 only
    assert m.sum((-1, -2)).tolist() == [[300, 200]]
    shift = torch.zeros(1, 2, h, w, dtype=torch.float64)
    shift[:, 0], shift[:, 1] = 1.5, -0.5
    cellwise = shift.clone()
    cellwise[:, 0, 10:20, 0:10] += 3.0  # the bottom-left cell moves differently
    cellwise[:, 1, 10:20, 10:20] -= 2.0
    for flow in (shift, cellwise):
        for score in ("wmse", "w2"):
            d, valid = adadfrc(flow, m, grid=2, min_pixels=64, score=score)
            assert valid.tolist() == [[True, False]]
            assert d[0, 0].abs() < 1e-9 and d[0, 1] == 0


def test_grid_is_adaptive_to_the_box(device):
    """Cell positions of a filled box are the centres of an N x N lattice over the box."""
    h, w = 50, 70
    masks = torch.zeros(1, 1, h, w, dtype=torch.bool, device=device)
    masks[0, 0, 10:34, 20:52] = True  # 24 x 32 box, N = 4 -> 6 x 8 cells
    pos, mot, wts, pix = grid_cells(torch.zeros(1, 2, h, w, device=device), masks, grid=4)
    assert int(pix) == 24 * 32
    assert torch.all(wts == 48)
    xc = 20 + 8 * torch.arange(4, device=device) + 3.5
    yc = 10 + 6 * torch.arange(4, device=device) + 2.5
    expect = torch.stack(torch.meshgrid(yc, xc, indexing="ij")[::-1], -1).reshape(16, 2)
    torch.testing.assert_close(pos[0, 0], expect.to(pos.dtype))


def test_sinkhorn_matches_exact_assignment():
    from scipy.optimize import linear_sum_assignment

    gen = torch.Generator().manual_seed(4)
    x = torch.randn(5, 16, 2, generator=gen, dtype=torch.float64)
    y = x + 0.5 * torch.randn(5, 16, 2, generator=gen, dtype=torch.float64)
    w = torch.ones(5, 16, dtype=torch.float64)
    got = sinkhorn_w2(x, y, w, iterations=400)
    for i in range(5):
        cost = ((x[i, :, None] - y[i, None]) ** 2).sum(-1).numpy()
        r, c = linear_sum_assignment(cost)
        exact = cost[r, c].mean()
        assert abs(float(got[i]) - exact) / exact < 0.03, (float(got[i]), exact)
    # identical sets -> ~0; zero weight item -> 0 (no NaN)
    assert float(sinkhorn_w2(x, x, w).abs().max()) < 1e-6
    w0 = w.clone()
    w0[2] = 0
    out = sinkhorn_w2(x, y, w0)
    assert torch.isfinite(out).all() and out[2] == 0


def test_w2_is_below_wmse_on_nonrigid_flow(device):
    gen = torch.Generator().manual_seed(5)
    h, w = 60, 80
    masks = _blob_masks(h, w, device, gen)
    xs, ys = _grid(h, w, torch.float64, device)
    flow = torch.stack([torch.sin(ys / 4.0) * 2, torch.cos(xs / 6.0)])[None].expand(3, -1, -1, -1)
    wmse, v1 = adadfrc(flow.contiguous(), masks, score="wmse")
    w2, v2 = adadfrc(flow.contiguous(), masks, score="w2")
    assert v1.equal(v2) and v1.all()
    assert (w2 <= wmse * 1.02).all() and (w2 > 0).all()


def test_summary_matches_numpy():
    gen = torch.Generator().manual_seed(6)
    d = torch.rand(20, 3, generator=gen, dtype=torch.float64)
    valid = torch.rand(20, 3, generator=gen) > 0.3
    valid[:, 2] = False
    s = adadfrc_summary(d, valid, 0.9)
    for k in range(2):
        vals = d[valid[:, k], k].numpy()
        assert int(s["frames"][k]) == len(vals)
        np.testing.assert_allclose(float(s["adadfrc_mean"][k]), vals.mean())
        np.testing.assert_allclose(float(s["adap90"][k]), np.percentile(vals, 90))
    assert not bool(s["valid"][2]) and int(s["frames"][2]) == 0
    assert float(s["adadfrc_mean"][2]) == 0 and float(s["adap90"][2]) == 0


def test_bad_inputs():
    flow = torch.zeros(2, 2, 10, 12)
    masks = torch.zeros(2, 1, 10, 12, dtype=torch.bool)
    with pytest.raises(ShapeError):
        adadfrc(torch.zeros(2, 3, 10, 12), masks)
    with pytest.raises(ShapeError):
        adadfrc(flow, torch.zeros(3, 1, 10, 12, dtype=torch.bool))
    with pytest.raises(ShapeError):
        adadfrc(flow, masks, torch.zeros(2, 9, 12))
    with pytest.raises(ValueError):
        adadfrc(flow, masks, score="l1")
    with pytest.raises(ShapeError):
        adadfrc_summary(torch.zeros(3), torch.zeros(3, dtype=torch.bool))


def test_non_finite_flow_is_invalid_not_zero():
    """NaN flow inside an object gives an invalid (pair, object), never a valid 0 score."""
    flow = torch.zeros(2, 2, 32, 32)
    flow[0] = float("nan")
    masks = torch.zeros(2, 1, 32, 32, dtype=torch.bool)
    masks[:, 0, 8:24, 8:24] = True
    d, valid = adadfrc(flow, masks, grid=4, min_pixels=16)
    assert valid.tolist() == [[False], [True]]
    assert d[0, 0].item() == 0.0 and d[1, 0].item() == pytest.approx(0.0, abs=1e-9)


def test_no_object_pixel_and_non_finite_flow():
    """Masks with no pixel at all (e.g. a small object shrunk away at the flow scale) give
    D = 0, invalid (was an IndexError for the whole chunk); a NaN flow pixel inside an object
    makes it invalid (the cell medians used to hide it and give a finite D)."""
    yy, xx = torch.meshgrid(torch.arange(64.0), torch.arange(80.0), indexing="ij")
    flow = torch.stack([0.05 * xx + 1.0, 0.03 * yy - 2.0])[None]  # exactly affine
    d, ok = adadfrc(flow, torch.zeros(1, 1, 64, 80, dtype=torch.bool))
    assert d.tolist() == [[0.0]] and ok.tolist() == [[False]]
    m = torch.zeros(1, 2, 64, 80, dtype=torch.bool)
    m[0, 0, 10:50, 10:40] = True
    m[0, 1, 10:50, 45:75] = True
    d, ok = adadfrc(flow, m)
    assert ok.tolist() == [[True, True]] and float(d.max()) < 1e-9
    flow[0, 0, 20, 20] = float("nan")  # inside object 0 only
    d, ok = adadfrc(flow, m)
    assert ok.tolist() == [[False, True]] and d[0, 0] == 0.0


def test_objects_shrunk_away_at_flow_scale_do_not_stop_the_chunk():
    """An 8 x 8 object at 1024 px (exactly min_object_pixels) vanishes when the flow runs at
    half size: its pairs are invalid, not a crash."""
    from geocon_torch.config import ForegroundConfig
    from geocon_torch.sections.foreground import score_pairs

    f1 = torch.rand(2, 3, 200, 300, generator=torch.Generator().manual_seed(0))
    m = torch.zeros(2, 1, 200, 300, dtype=torch.bool)
    m[:, 0, 101:109, 151:159] = True
    zero_flow = lambda a, b: torch.zeros(a.shape[0], 2, a.shape[-2], a.shape[-1])  # noqa: E731
    d, v, _, _ = score_pairs(f1, f1.clone(), m, zero_flow, ForegroundConfig(), size=(1024, 1024))
    assert not bool(v.any()) and bool((d == 0).all())


def _wavy_object():
    """(1, 2, 32, 32) non-affine flow and one 24 x 24 object: W2 D = 0.01425 px^2 at 200
    iterations (float64)."""
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    flow = torch.stack([0.02 * xx + 1 + 0.3 * torch.sin(yy), -0.01 * yy + 0.5])[None]
    masks = torch.zeros(1, 1, 32, 32, dtype=torch.bool)
    masks[0, 0, 4:28, 4:28] = True
    return flow.double(), masks


def test_w2_iterations_below_two_raise():
    """w2_iterations <= 0 ran no Sinkhorn step and returned D ~ 1e-16 valid (\"perfectly
    rigid\"); 1 evaluated the plan at eps_end with potentials of eps_start (NaN). The annealing
    reaches eps_end at the last iteration from 2 iterations on: the smallest allowed count."""
    from geocon_torch.errors import ArgumentTypeError, InputError
    from geocon_torch.measures.foreground import check_settings
    from geocon_torch.metrics.functional import adadfrc as functional_adadfrc

    flow, masks = _wavy_object()
    for bad in (-5, 0, 1):
        for fn in (adadfrc, functional_adadfrc):
            with pytest.raises(InputError, match=rf"w2_iterations must be an integer >= 2, "
                                                 rf"got {bad}"):
                fn(flow, masks, score="w2", w2_iterations=bad)
        with pytest.raises(InputError, match="iterations must be an integer >= 2"):
            sinkhorn_w2(flow[:, 0, :2].mT, flow[:, 1, :2].mT, flow[:, 0, 0], iterations=bad)
    with pytest.raises(InputError, match="w2_iterations"):
        check_settings(8, "w2", w2_iterations=0)
    with pytest.raises(ArgumentTypeError, match="w2_iterations"):
        check_settings(8, "w2", w2_iterations=2.5)
    d2, ok2 = adadfrc(flow, masks, score="w2", w2_iterations=2)
    d, ok = adadfrc(flow, masks, score="w2")
    assert ok2.tolist() == ok.tolist() == [[True]]
    assert float(d) == pytest.approx(0.014251, rel=1e-3)
    assert 0.014 < float(d2) < 0.06  # finite, above the converged value (not converged)


def test_empty_frames_raise_shape_error():
    for h, w in ((0, 0), (0, 5), (5, 0)):
        with pytest.raises(ShapeError, match=r"flow must have non-empty frames"):
            adadfrc(torch.zeros(1, 2, h, w), torch.zeros(1, 1, h, w, dtype=torch.bool))
