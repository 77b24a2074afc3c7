"""Audit s29 "degenerate" findings F1-F6: degenerate sizes, models and options of the public
tensor API (zero / failed F, NaN rows, unchecked options, non-bool masks, messages, layout)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

from geocon_torch import geometry as G
from geocon_torch.errors import ArgumentTypeError, InputError, ShapeError
from geocon_torch.geometry import fundamental_residuals, homography_residuals
from geocon_torch.measures.background import (fundamental_pair_metrics, pair_metrics,
                                               rotation_from_fundamental)
from geocon_torch.measures.calibration import gate_rates, roc_curve, select_thresholds
from geocon_torch.types import Fit

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from benchmarks._dispatch_count import DispatchCounter  # noqa: E402

F64 = dict(dtype=torch.float64)
#: F of a camera translated along x: epipolar lines are the rows (y2 = y1)
F_TX = torch.tensor([[0.0, 0.0, 0.0], [0.0, 0.0, -1.0], [0.0, 1.0, 0.0]], **F64)


def _matches(p: int = 2, n: int = 40, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x1 = torch.rand(p, n, 2, generator=g, **F64) * 600
    x2 = x1 + torch.randn(p, n, 2, generator=g, **F64)
    return x1, x2


def _fit(kind: str, model: torch.Tensor, valid: list) -> Fit:
    p = model.shape[0]
    return Fit(kind, model, torch.zeros(p, 1, dtype=torch.bool), torch.zeros(p, 1),
               torch.tensor(valid), torch.zeros(p, dtype=torch.long),
               torch.zeros(p, dtype=torch.long), torch.zeros(p))


# F1 ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_zero_F_explains_no_match(dtype):
    """F = 0 (the model of every failed ransac_fundamental row) defines no epipolar line: every
    residual is the dtype's huge finite value (finfo.max squared, its root as a distance),
    never 0; a valid row beside it keeps its bits, and gradients stay finite (0 on F = 0)."""
    x1, x2 = (x.to(dtype) for x in _matches())
    F = torch.stack([torch.zeros(3, 3, **F64), F_TX]).to(dtype).requires_grad_(True)
    big = torch.finfo(dtype).max
    root = torch.tensor(big, dtype=dtype).sqrt()
    for fn, sq in ((G.sampson_distance, False), (G.epipolar_max_distance, False),
                   (G.epipolar_line_distance, None), (G.sampson_distance_normalized, None)):
        for squared in ([False, True] if sq is not None else [None]):
            kw = {} if squared is None else {"squared": squared}
            r = fn(F, x1, x2, **kw)
            want = big if squared else root
            assert torch.equal(r[0], torch.full_like(r[0], want)), (fn.__name__, squared)
            alone = fn(F[1:].detach(), x1[1:], x2[1:], **kw)
            assert torch.equal(r[1], alone[0]), (fn.__name__, squared)  # bit for bit
            F.grad = None
            r.sum().backward()
            assert torch.isfinite(F.grad).all() and torch.equal(F.grad[0], torch.zeros(3, 3,
                                                                                   dtype=dtype))
    # what the audit saw: an invalid fit's matches all counted as inliers (IR 1, GE 0)
    m = fundamental_pair_metrics(_fit("F", torch.zeros(2, 3, 3, **F64), [False, False]),
                                 x1.double(), x2.double(), tau_f=0.1, min_inliers=8)
    assert m.num_inliers.tolist() == [0, 0] and not m.valid.any()
    rn = G.sampson_distance_normalized(torch.zeros(2, 3, 3, **F64), x1.double(), x2.double())
    assert int((rn <= 0.1).sum()) == 0


def test_fit_residuals_nan_on_invalid_rows():
    """fundamental_residuals / homography_residuals of a whole Fit: NaN on every invalid row;
    a valid row is bit for bit the residual of its model."""
    x1, x2 = _matches(3)
    Fm = torch.stack([F_TX, F_TX * 2, torch.zeros(3, 3, **F64)])
    fit_f = _fit("F", Fm, [True, False, False])
    rn, rp = fundamental_residuals(fit_f, x1, x2)
    assert torch.isnan(rn[1:]).all() and torch.isnan(rp[1:]).all()
    assert torch.equal(rn[0], G.sampson_distance_normalized(Fm, x1, x2)[0])
    assert torch.equal(rp[0], G.sampson_distance(Fm, x1, x2)[0])
    Hm = torch.eye(3, **F64).repeat(3, 1, 1)
    Hm[0, 0, 2] = 1.0
    rh = homography_residuals(_fit("H", Hm, [False, True, False]), x1, x2)
    assert torch.isnan(rh[[0, 2]]).all()
    assert torch.equal(rh[1], G.symmetric_transfer_error(Hm, x1, x2)[1])


# F2 ----------------------------------------------------------------------------------------

def test_rotation_from_fundamental_nan_rows():
    """A non-finite or all-zero F row gives NaN, the other rows keep their angle (bit for
    bit); a size_hw whose row count is neither 1 nor P is a ShapeError naming both."""
    c, s = torch.cos(torch.tensor(0.05, **F64)), torch.sin(torch.tensor(0.05, **F64))
    R = torch.tensor([[c, 0, s], [0, 1, 0], [-s, 0, c]], **F64)
    F_rot = F_TX @ R  # rotation + translation, some angle > 0
    F = torch.stack([torch.full((3, 3), float("nan"), **F64), F_TX, torch.zeros(3, 3, **F64),
                     F_rot, F_TX.clone().index_fill_(0, torch.tensor([0]), float("inf"))])
    out = rotation_from_fundamental(F, (480, 640))
    assert torch.isnan(out[[0, 2, 4]]).all()
    assert torch.equal(out[[1, 3]], rotation_from_fundamental(F[[1, 3]], (480, 640)))
    assert float(out[3]) > 1.0
    hw = torch.tensor([[480, 640], [480, 640]], **F64)
    with pytest.raises(ShapeError, match=r"F has 5 rows .*size_hw has 2"):
        rotation_from_fundamental(F, hw)
    assert rotation_from_fundamental(F[:2], hw).shape == (2,)


# F3 ----------------------------------------------------------------------------------------

def test_scalar_options_are_checked():
    g = torch.Generator().manual_seed(0)
    t = torch.rand(1, 40, 1, generator=g, **F64) * 640
    p = torch.cat([t, 0.5 * t + 10], -1)  # collinear positions
    w = torch.ones(1, 40, **F64)
    with pytest.raises(InputError, match="eps must be >= 0, got -1"):
        G.weighted_affine_lstsq(p, p + 3, w, eps=-1.0)
    with pytest.raises(ArgumentTypeError, match="eps must be a number"):
        G.weighted_affine_lstsq(p, p + 3, w, eps="1e-9")
    A, _, _, valid = G.weighted_affine_lstsq(p, p + 3, w, eps=0)
    assert not valid.any() and not A.any()
    x1 = torch.tensor([[[10.0, 20.0], [30.0, 40.0]]])
    x2 = torch.tensor([[[50.0, 20.0], [70.0, 43.0]]])
    for fn in (G.sampson_distance, G.epipolar_max_distance):
        with pytest.raises(ArgumentTypeError, match="squared must be a bool, got str 'no'"):
            fn(F_TX[None].float(), x1, x2, squared="no")


# F4 ----------------------------------------------------------------------------------------

def test_non_bool_masks_must_hold_0_or_1():
    """A float / int mask is taken when it holds only 0 / 1 (as the bool mask it means); NaN or
    a fractional weight is an InputError. A bool mask costs no host read (no new sync)."""
    x = torch.tensor([[[0.0, 0.0], [2.0, 0.0], [1000.0, 1000.0]]], **F64)
    ref = G.hartley_normalize(x, torch.tensor([[True, True, False]]))[1]
    for m in (torch.tensor([[1.0, 1.0, 0.0]]), torch.tensor([[1, 1, 0]])):
        assert torch.equal(G.hartley_normalize(x, m)[1], ref)
    for bad, shown in ((0.01, "0.01"), (float("nan"), "nan"), (2.0, "2")):
        m = torch.tensor([[1.0, 1.0, bad]])
        with pytest.raises(InputError, match=f"mask must be bool .*e.g. {shown}"):
            G.hartley_normalize(x, m)
    x1, x2 = _matches(1, 12)
    with pytest.raises(InputError, match="mask must be bool"):
        G.ransac_homography(x1, x2, torch.full((1, 12), 0.5))
    with pytest.raises(InputError, match="mask must be bool"):
        pair_metrics(torch.zeros(1, 12), torch.full((1, 12), 0.5), 1.0)
    with DispatchCounter() as d:
        G.hartley_normalize(x, torch.tensor([[True, True, False]]))
        pair_metrics(torch.zeros(1, 12), torch.ones(1, 12, dtype=torch.bool), 1.0)
    assert d.syncs == 0


# F5 ----------------------------------------------------------------------------------------

def test_messages_name_the_argument_and_shape():
    with pytest.raises(ShapeError, match=r"residuals must have shape \(P, N\), got \(50,\)"):
        pair_metrics(torch.zeros(50), torch.ones(50, dtype=torch.bool), 1.0)
    a3, a2 = torch.rand(3), torch.rand(2)
    with pytest.raises(ShapeError, match=r"ir_clean=\(3,\), ge_clean=\(2,\)"):
        select_thresholds(a3, a2, a3, a3)
    with pytest.raises(ShapeError, match=r"ir_bad=\(3,\), ge_bad=\(2,\)"):
        select_thresholds(a3, a3, a3, a2)
    with pytest.raises(ShapeError, match=r"ir=\(3,\), ge=\(2,\)"):
        gate_rates(a3, a3, a3, a2)
    with pytest.raises(ShapeError, match=r"ge_clean=\(3,\), ir_clean=\(2,\)"):
        roc_curve(a3, a3, a2, a3, 0.5)


def test_score_clips_masks_poses_arguments():
    from geocon_torch.pipeline import score_clips
    videos = torch.zeros(2, 4, 3, 32, 32, dtype=torch.uint8)
    with pytest.raises(InputError, match=r"masks has 1 entry for 2 clips"):
        score_clips(videos, masks=[None])
    with pytest.raises(InputError, match=r"poses has 3 entries for 2 clips"):
        score_clips(videos, poses=[None] * 3)
    for arg in ("masks", "poses"):
        for value in ("m.npz", Path("m.npz"), b"m.npz"):
            with pytest.raises(InputError, match=rf"{arg} must be a list with one entry per "
                                                 rf"clip .*\[path\]"):
                score_clips(videos[:1], **{arg: value})


# F6 ----------------------------------------------------------------------------------------

def test_weighted_affine_layout_invariant():
    """Equal values in another memory layout give the same bits (as every other geometry
    function): coordinate-planar points, transposed weights."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.rand(3, 40, 2, generator=g, **F64) * 640
    x2 = x1 * 1.01 + torch.randn(3, 40, 2, generator=g, **F64) * 0.5
    planar = lambda t: t.permute(2, 0, 1).contiguous().permute(1, 2, 0)  # noqa: E731
    w = torch.rand(3, 40, generator=g, **F64)
    a = G.weighted_affine_lstsq(x1, x2 - x1, w)
    b = G.weighted_affine_lstsq(planar(x1), planar(x2 - x1), w.T.contiguous().T)
    assert all(torch.equal(p, q) for p, q in zip(a, b))
