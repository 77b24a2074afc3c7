"""Training-loop audit s28: the soft score inside a generator's loss.

F1: a blank pair (identical constant frames: zero flow, which makes the H / F normal matrices'
spectra degenerate) counted 0 but sent NaN gradients back (eigh / svd backward), so one blank
clip in a batch made every generator weight NaN. Blank and still pairs now reach the fits with a
fixed, detached stand-in set of correspondences (exactly zero gradient), and the solvers' grad
branches give degenerate spectra a zero gradient instead of NaN (forward values unchanged).
F2: a still clip got the highest score there is (sigmoid(4) = 0.982); a pair the reward's frozen
rule calls still (mean absolute difference <= FROZEN_MAX_MAD grey levels) now counts 0.
F3: the range error printed an overshoot under 5e-4 as "got values in [0, 1]".
"""
from __future__ import annotations

import pytest
import torch

from geocon_torch.config import SoftConsistencyConfig
from geocon_torch.errors import ClipTensorError
from geocon_torch.geometry import fundamental, homography, fundamental_8pt, homography_dlt
from geocon_torch.geometry.fundamental import _enforce_rank2
from geocon_torch.geometry.homography import _smallest_eigvec
from geocon_torch.io import check_clip_tensor
from geocon_torch.io.sampling import FROZEN_MAX_MAD
from geocon_torch.measures import soft
from geocon_torch.metrics.functional import soft_background_consistency
from geocon_torch.rewards import frozen_clips
from geocon_torch.synth import grounded_clip


def _clip(cat: str, size=(64, 64), frames: int = 3, seed: int = 1) -> torch.Tensor:
    """(T, 3, H, W) float32 in [0, 1] of a grounded clip."""
    return grounded_clip(cat, num_frames=frames, size=size, seed=seed).frames.float() / 255


# ----------------------------------------------------------------------------- F1: blank clips
@pytest.mark.parametrize("size", [(64, 64), (192, 256)])
@pytest.mark.parametrize("model", ["auto", "homography", "fundamental"])
def test_a_blank_clip_scores_zero_with_a_zero_finite_gradient(size, model):
    x = torch.full((1, 3, 3) + size, 0.5, requires_grad=True)
    s = soft_background_consistency(x, model=model)
    s.sum().backward()
    assert s.tolist() == [0.0]
    assert bool(torch.isfinite(x.grad).all()), int(torch.isnan(x.grad).sum())
    assert float(x.grad.abs().max()) == 0.0  # the blank pair's fits see no pixel


@pytest.mark.parametrize("size", [(21, 21), (64, 64), (192, 256)])
def test_the_stand_in_set_alone_keeps_blank_gradients_finite(size, monkeypatch):
    """The soft score's own guard, with the solvers' degenerate-spectrum guard switched off
    (plain eigh / SVD, as before): a blank and a still pair still give finite gradients."""
    monkeypatch.setattr(homography, "_smallest_eigvec_grad",
                        lambda M: torch.linalg.eigh(M)[1][..., 0])
    monkeypatch.setattr(fundamental, "_enforce_rank2", lambda F: fundamental._svd_rank2(F)[0])
    tex = torch.nn.functional.interpolate(_clip("C3")[:1], size=size, mode="bilinear")
    x = torch.stack([torch.full((2, 3) + size, 0.5), tex.expand(2, -1, -1, -1)])
    x.requires_grad_()
    s = soft_background_consistency(x)
    s.sum().backward()
    assert s.detach().tolist() == [0.0, 0.0] and bool(torch.isfinite(x.grad).all())


@pytest.mark.parametrize("value", [0.0, 1.0])
def test_black_and_white_clips_give_finite_gradients(value):
    x = torch.full((1, 2, 1, 64, 64), value, dtype=torch.float64, requires_grad=True)
    soft_background_consistency(x).sum().backward()
    assert bool(torch.isfinite(x.grad).all()) and float(x.grad.abs().max()) == 0.0


def test_a_fade_to_black_gives_finite_gradients():
    """Frames 2 and 3 black (one blank pair after a textured -> black one), alone, at 192 x 256
    under "auto": 294912 NaN gradients before."""
    x = _clip("C3", size=(192, 256), frames=4)
    x[2:] = 0.0
    x = x[None].requires_grad_()
    s = soft_background_consistency(x)
    s.sum().backward()
    assert 0.0 <= float(s.detach()) < 0.5 and bool(torch.isfinite(x.grad).all())


def test_a_blank_clip_leaves_a_shared_parameter_finite():
    """A generator's batch: a textured clip through a shared gain and a blank clip from a
    zero-initialised output layer; one SGD step leaves every weight finite."""
    torch.manual_seed(0)
    gen = torch.nn.Linear(8, 3 * 64 * 64)
    torch.nn.init.zeros_(gen.weight)
    torch.nn.init.constant_(gen.bias, 0.5)
    gain = torch.nn.Parameter(torch.tensor(0.9))
    opt = torch.optim.SGD([*gen.parameters(), gain], lr=0.1)
    blank = gen(torch.randn(3, 8)).view(1, 3, 3, 64, 64)
    textured = (_clip("C3") * gain)[None]
    s = soft_background_consistency(torch.cat([textured, blank]))
    (-s.mean()).backward()
    assert s.detach().tolist()[1] == 0.0 and s.detach().tolist()[0] > 0.9
    assert bool(torch.isfinite(gain.grad)) and float(gain.grad) != 0.0
    assert bool(torch.isfinite(gen.weight.grad).all()) and bool(torch.isfinite(gen.bias.grad).all())
    opt.step()
    assert bool(torch.isfinite(gen.weight).all()) and bool(torch.isfinite(gain).all())


def test_a_blank_clip_changes_no_other_clips_score_or_gradient():
    tex = _clip("C5")[None]
    a = tex.clone().requires_grad_()
    sa = soft_background_consistency(a)
    sa.sum().backward()
    b = torch.cat([tex, torch.full_like(tex, 0.25)]).requires_grad_()
    sb = soft_background_consistency(b)
    sb.sum().backward()
    assert torch.equal(sb[:1], sa) and torch.equal(b.grad[:1], a.grad)


def test_moving_pairs_keep_their_values_bitwise():
    """Moving grounded clips (mean absolute differences of 3-20 grey levels): the stand-in set
    and the motion factor leave every pair's three ratios as they were (the motion factor is
    exactly 1 there; a factor held at 1 gives the same bits)."""
    x = torch.stack([_clip(c) for c in ("C2", "C3", "C5")])
    img1, img2 = x[:, :-1].flatten(0, 1), x[:, 1:].flatten(0, 1)
    assert soft.motion_evidence(img1, img2).tolist() == [1.0] * 6
    cfg = SoftConsistencyConfig()
    got = soft.soft_pair_scores(img1, img2, cfg)
    old = soft.motion_evidence
    try:
        soft.motion_evidence = lambda a, b: torch.ones(a.shape[0], dtype=a.dtype)
        want = soft.soft_pair_scores(img1, img2, cfg)
    finally:
        soft.motion_evidence = old
    assert all(torch.equal(g, w) for g, w in zip(got, want))


# ------------------------------------------------------------ F1: degenerate spectra in solvers
def _grid(n: int = 6, dtype=torch.float64) -> torch.Tensor:
    yy, xx = torch.meshgrid(torch.arange(n, dtype=dtype), torch.arange(n, dtype=dtype),
                            indexing="ij")
    return (torch.stack([xx, yy], -1).reshape(1, -1, 2) * 10 + 5).clone()


def _plain(solver, x1: torch.Tensor, x2: torch.Tensor) -> torch.Tensor:
    """The solver's grad-branch value with a plain eigh / SVD (no degenerate-spectrum guard):
    what it gave before; forward only (its backward is the NaN)."""
    mp = pytest.MonkeyPatch()
    mp.setattr(homography, "_smallest_eigvec_grad",
               lambda M: torch.linalg.eigh(M)[1][..., 0])
    mp.setattr(fundamental, "_enforce_rank2", lambda F: fundamental._svd_rank2(F)[0])
    try:
        return solver(x1, x2.detach().clone().requires_grad_()).detach()
    finally:
        mp.undo()


def test_dlt_gradient_is_finite_on_a_degenerate_spectrum():
    """x2 == x1 on a square grid: the DLT normal matrix has repeated eigenvalues."""
    x1 = _grid()
    x2 = x1.clone().requires_grad_()
    H = homography_dlt(x1, x2)
    H.sum().backward()
    assert bool(torch.isfinite(x2.grad).all())
    assert torch.equal(H.detach(), _plain(homography_dlt, x1, x2))


def test_8pt_gradient_is_finite_on_a_degenerate_spectrum():
    """x2 == x1: every skew-symmetric F fits (a 3-dim null space; singular values (s, s, 0))."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.rand(2, 20, 2, generator=g, dtype=torch.float64) * 100
    x2 = x1.clone().requires_grad_()
    F = fundamental_8pt(x1, x2)
    F.sum().backward()
    assert bool(torch.isfinite(x2.grad).all())
    assert torch.equal(F.detach(), _plain(fundamental_8pt, x1, x2))


def test_solver_gradients_on_distinct_spectra_are_torchs_bitwise():
    g = torch.Generator().manual_seed(1)
    A = torch.randn(5, 9, 9, generator=g, dtype=torch.float64)
    M = (A @ A.transpose(-1, -2)).requires_grad_()
    up = torch.randn(5, 9, generator=g, dtype=torch.float64)
    v = _smallest_eigvec(M)
    (v * up).sum().backward()
    M2 = M.detach().clone().requires_grad_()
    want = torch.linalg.eigh(0.5 * (M2 + M2.transpose(-1, -2)))[1][..., 0]
    (want * up).sum().backward()
    # the value is the padded solve's (the same with or without autograd, s31 F3), within
    # rounding of plain eigh's; the gradient is eigh's own, bit for bit
    assert torch.equal(v.detach(), _smallest_eigvec(M.detach())) and torch.equal(M.grad, M2.grad)
    assert torch.allclose(v.detach(), want.detach(), rtol=0, atol=1e-13)
    F = torch.randn(5, 3, 3, generator=g, dtype=torch.float64).requires_grad_()
    up3 = torch.randn(5, 3, 3, generator=g, dtype=torch.float64)
    (_enforce_rank2(F) * up3).sum().backward()
    F2 = F.detach().clone().requires_grad_()
    U, S, Vh = torch.linalg.svd(F2)
    ref = torch.bmm(U * torch.nn.functional.pad(S[..., :2], (0, 1)).unsqueeze(-2), Vh)
    (ref * up3).sum().backward()
    assert torch.equal(_enforce_rank2(F.detach()), ref.detach()) and torch.equal(F.grad, F2.grad)


# ------------------------------------------------------------------------ F2: still clips
@pytest.mark.parametrize("model", ["auto", "homography", "fundamental"])
def test_a_still_clip_scores_zero(model):
    """A textured frame held (the reward calls the clip frozen): 0, not sigmoid(4) = 0.982."""
    x = _clip("C3")[:1].expand(3, -1, -1, -1)[None].contiguous().requires_grad_()
    assert bool(frozen_clips(x.detach()))
    s = soft_background_consistency(x, model=model)
    s.sum().backward()
    assert s.tolist() == [0.0] and bool(torch.isfinite(x.grad).all())


def test_motion_evidence_follows_the_frozen_rule():
    """0 for a pair within FROZEN_MAX_MAD grey levels (the reward's still pair), rising
    smoothly above it, 1 to within 1e-6 from twice the tolerance (1 grey level) on."""
    base = _clip("C3")[:1] * 0.9 + 0.05  # no value clamped below
    gen = torch.Generator().manual_seed(0)
    sign = torch.randint(0, 2, base.shape, generator=gen).float() * 2 - 1
    mads = [0.0, 0.4, FROZEN_MAX_MAD - 0.01, 0.55, 0.6, 0.75, 1.0, 2.0]
    second = [base + sign * m / 255 for m in mads]
    got = soft.motion_evidence(base.expand(len(mads), -1, -1, -1), torch.cat(second))
    clips = torch.stack([torch.cat([base, s]) for s in second])
    frozen = frozen_clips(clips).tolist()
    assert [g == 0.0 for g in got.tolist()] == frozen
    assert frozen[:3] == [True, True, True] and not any(frozen[3:])
    assert got[3:].diff().gt(0).all() and float(got[6]) > 1 - 1e-6 and float(got[7]) == 1.0


def test_motion_evidence_is_differentiable_and_zero_for_a_still_pair():
    a = _clip("C2")[:1].double()
    b = (a + 0.7 / 255).requires_grad_()  # 0.7 grey levels: in the ramp
    m = soft.motion_evidence(a, b)
    m.sum().backward()
    assert 0 < float(m.detach()) < 1 and float(b.grad.abs().sum()) > 0
    b2 = a.clone().requires_grad_()
    m2 = soft.motion_evidence(a, b2)
    m2.sum().backward()
    assert m2.tolist() == [0.0] and float(b2.grad.abs().max()) == 0.0


# -------------------------------------------------------------------------- F3: range message
@pytest.mark.parametrize("over, shown", [(1.00004, "1.00004"), (1.0004, "1.0004"),
                                         (1.000002, "1.000002")])
def test_a_small_overshoot_is_printed_outside_the_range(over, shown):
    clip = torch.full((2, 3, 8, 8), 0.5)
    clip[0, 0, 0, 0] = over
    clip[1, 0, 0, 0] = 0.0
    with pytest.raises(ClipTensorError, match=rf"got values in \[0, {shown}\d*\] \(just outside"):
        check_clip_tensor(clip)


def test_a_small_undershoot_and_clear_ranges_print_as_before():
    clip = torch.full((2, 3, 8, 8), 0.5)
    clip[0, 0, 0, 0], clip[1, 0, 0, 0] = -4e-05, 1.0
    with pytest.raises(ClipTensorError, match=r"got values in \[-4e-05, 1\] \(just outside"):
        check_clip_tensor(clip)
    clip[0, 0, 0, 0], clip[1, 0, 0, 0] = -0.5, 3.0
    with pytest.raises(ClipTensorError, match=r"got values in \[-0\.5, 3\]$"):
        check_clip_tensor(clip)
