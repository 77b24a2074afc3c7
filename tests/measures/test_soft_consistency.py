"""soft_background_consistency: gradients reach the pixels (gradcheck in float64), the score
tracks the hard IR across corruption severities, and gradient ascent on a per-frame warp of a
rubber-sheet-corrupted grounded clip raises it while lowering the true error against the known H."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from geocon_torch import score_clip
from geocon_torch._tensor_utils import sample_at_pixels
from geocon_torch.errors import InputError, ShapeError
from geocon_torch.flow.lk_dense import DenseLKFlow
from geocon_torch.geometry import transfer_points
from geocon_torch.metrics.functional import soft_background_consistency
from geocon_torch.synth import apply_corruption, grounded_clip


def smooth_clip() -> torch.Tensor:
    """(1, 2, 1, 12, 12) float64: a smooth texture and its copy shifted by 0.6 px, + noise."""
    yy, xx = torch.meshgrid(torch.arange(12.0), torch.arange(12.0), indexing="ij")

    def img(dx: float) -> torch.Tensor:
        return (0.5 + 0.2 * torch.sin(0.7 * (xx - dx)) * torch.cos(0.5 * yy)
                + 0.1 * torch.cos(0.9 * (xx - dx) + 0.4 * yy)).double()

    gen = torch.Generator().manual_seed(0)
    noise = 0.01 * torch.rand(1, 2, 1, 12, 12, generator=gen, dtype=torch.float64)
    return torch.stack([img(0.0), img(0.6)])[None, :, None] + noise


@pytest.mark.parametrize("model", ["homography", "fundamental"])
def test_gradcheck_float64(model):
    x = smooth_clip().requires_grad_()

    def fn(v: torch.Tensor) -> torch.Tensor:
        return soft_background_consistency(v, model=model, grid_step=2, border=2)

    assert 0.9 < float(fn(x).detach()) <= 1.0
    assert torch.autograd.gradcheck(fn, (x,), eps=1e-6, atol=1e-5, rtol=1e-3, fast_mode=True)


def test_shapes_and_errors():
    x = torch.rand(2, 3, 3, 24, 32, requires_grad=True)
    s = soft_background_consistency(x)
    assert s.shape == (2,) and s.dtype == torch.float32 and bool(((s >= 0) & (s <= 1)).all())
    s.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    with pytest.raises(ShapeError, match="float"):
        soft_background_consistency(torch.zeros(1, 2, 3, 16, 16, dtype=torch.uint8))
    with pytest.raises(ShapeError, match="T >= 2"):
        soft_background_consistency(torch.rand(1, 1, 3, 16, 16))
    with pytest.raises(InputError, match="model"):
        soft_background_consistency(torch.rand(1, 2, 3, 16, 16), model="affine")
    assert soft_background_consistency(torch.rand(0, 2, 3, 16, 16)).shape == (0,)


def test_blank_frames_score_zero():
    """Flat grey and black clips (zero flow, which every model explains) get 0, not the top
    score: a generator trained on the score is not rewarded for blank output; a textured clip
    keeps its value (the contrast evidence is 1 to within 1e-10 there)."""
    tex = smooth_clip().float()  # grey std ~0.1
    flat = torch.full((2, 2, 1, 12, 12), 0.5)
    flat[1] = 0.0
    s = soft_background_consistency(torch.cat([tex, flat]), grid_step=2, border=2)
    assert float(s[0]) > 0.9 and s[1:].tolist() == [0.0, 0.0]
    from geocon_torch.measures.soft import contrast_evidence
    assert float(contrast_evidence(tex[0, :1], tex[0, 1:])) > 1 - 1e-10


def _spearman(a, b) -> float:
    """Spearman's rho: Pearson correlation of the tie-averaged ranks."""
    ra = torch.tensor(_avg_ranks(a), dtype=torch.float64)
    rb = torch.tensor(_avg_ranks(b), dtype=torch.float64)
    ra, rb = ra - ra.mean(), rb - rb.mean()
    return float((ra * rb).sum() / (ra.norm() * rb.norm()))


def _avg_ranks(v) -> list:
    """Ranks with ties averaged (as scipy.stats.rankdata)."""
    v = [float(x) for x in v]
    return [sum(1.0 for y in v if y < x) + 0.5 * (sum(1.0 for y in v if y == x) - 1) for x in v]


def test_tracks_hard_ir_across_severities():
    """C2 (pan, true regime H) with rubber_sheet at 5 severities: Spearman(soft H score, hard
    IR_H of score_clip(preset="background")) >= 0.9 (ties in the hard IR get average ranks)."""
    clean = grounded_clip("C2", num_frames=6, size=(120, 160)).frames
    hard, soft = [], []
    for sev in (0.0, 0.25, 0.5, 0.75, 1.0):
        fr = apply_corruption(clean, "rubber_sheet", sev, seed=0) if sev else clean
        res = score_clip(fr, preset="background", config={"io": {"long_side": None}},
                         device="cpu")
        hard.append(res.background["ir_h"])
        soft.append(float(soft_background_consistency(fr[None].float() / 255,
                                                      model="homography")))
    rho = _spearman(hard, soft)
    print(f"hard IR_H {hard} soft {soft} Spearman {rho:.3f}")
    assert rho >= 0.9
    assert soft[0] > soft[-1] + 0.1


def _true_error(frames: torch.Tensor, homographies: torch.Tensor) -> float:
    """Mean distance (px) between where dense LK flow sends grid points of frame t and where the
    true homography H_t sends them."""
    t, _, h, w = frames.shape
    with torch.no_grad():
        flow = DenseLKFlow()(frames[:-1], frames[1:])
        ys, xs = torch.meshgrid(torch.arange(8, h - 8, 4), torch.arange(8, w - 8, 4),
                                indexing="ij")
        ys, xs = ys.reshape(-1), xs.reshape(-1)
        x1 = torch.stack([xs, ys], -1).float().expand(t - 1, -1, -1)
        x2 = x1 + flow[:, :, ys, xs].transpose(1, 2)
        return float((x2 - transfer_points(homographies.float(), x1)).norm(dim=-1).mean())


def test_gradient_ascent_on_warp_repairs_rubber_sheet():
    clip = grounded_clip("C2", num_frames=4, size=(96, 128), corruption="rubber_sheet",
                         severity=1.0)
    frames = clip.frames.float() / 255
    t, _, h, w = frames.shape
    yy, xx = torch.meshgrid(torch.arange(h, dtype=torch.float32),
                            torch.arange(w, dtype=torch.float32), indexing="ij")
    grid = torch.stack([xx, yy], -1)
    ctrl = torch.zeros(t - 1, 2, 4, 5, requires_grad=True)  # frame 0 is the anchor

    def warped() -> torch.Tensor:
        d = 3.0 * torch.tanh(F.interpolate(ctrl, size=(h, w), mode="bicubic",
                                           align_corners=True))
        rest = sample_at_pixels(frames[1:], grid + d.permute(0, 2, 3, 1))
        return torch.cat([frames[:1], rest]).clamp(0, 1)

    before = float(soft_background_consistency(frames[None], model="homography"))
    err_before = _true_error(frames, clip.true_homographies)
    opt = torch.optim.Adam([ctrl], lr=0.08)
    for _ in range(15):
        opt.zero_grad()
        score = soft_background_consistency(warped()[None], model="homography")
        (-score.sum()).backward()
        opt.step()
    with torch.no_grad():
        out = warped()
        after = float(soft_background_consistency(out[None], model="homography"))
    err_after = _true_error(out, clip.true_homographies)
    print(f"soft {before:.3f} -> {after:.3f}; true error {err_before:.3f} -> {err_after:.3f} px")
    assert after > before + 0.05
    assert err_after < 0.95 * err_before
