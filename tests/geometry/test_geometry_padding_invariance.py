"""Padding invariance of the batched robust estimators: a pair's Fit depends only on its own
valid points (in order) and its own seed, never on the padded width of the batch, on where its
masked entries sit or what they hold, or on the other pairs of the batch."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.geometry import ransac_fundamental, ransac_homography
from geocon_torch.geometry._synthetic import fundamental_pairs, homography_pairs

# (estimator, scene generator, residual, threshold): every residual mode of H and F
CASES = [
    ("H", "symmetric", 2.0), ("H", "forward", 2.0),
    ("F", "sampson_normalized", 0.1), ("F", "sampson", 1.0), ("F", "epipolar_max", 1.0),
]
_FIT = {"H": ransac_homography, "F": ransac_fundamental}


@pytest.fixture
def device(device):
    # bit-identical reductions rest on the CPU kernels' fixed reduction order (see
    # geometry/_reduce.py); on CUDA the draws and per-pair choices are the same, but bitwise
    # equality of cuBLAS / CUDA reductions has not been verified
    if device.type != "cpu":
        pytest.skip("bitwise padding invariance is verified on CPU only")
    return device
_GEN = {"H": homography_pairs, "F": fundamental_pairs}


def _scene(kind, n, seed, dtype, device):
    d = _GEN[kind](1, n, outlier_ratio=0.4, noise_px=0.5, seed=seed, dtype=dtype, device=device)
    return d["x1"][0], d["x2"][0]


def _embed(x1, x2, width, interleave, gen_seed):
    """The pair's n points placed at n of ``width`` slots (the first n, or spread in order
    between masked ones); masked slots hold garbage. Returns x1, x2, mask (width,), positions."""
    n = x1.shape[0]
    g = torch.Generator().manual_seed(gen_seed)
    if interleave:
        pos = torch.randperm(width, generator=g)[:n].sort().values
    else:
        pos = torch.arange(n)
    pos = pos.to(x1.device)

    def junk():
        return (torch.rand(width, 2, generator=g, dtype=torch.float64) * 4000 - 1500).to(x1)

    X1, X2 = junk(), junk()
    X1[pos], X2[pos] = x1, x2
    mask = torch.zeros(width, dtype=torch.bool, device=x1.device)
    mask[pos] = True
    return X1, X2, mask, pos


def _assert_same_fit(ref, i, pos_ref, fit, j, pos):
    """Fit ``ref`` pair i (valid at pos_ref) equals ``fit`` pair j (valid at pos), bit for bit."""
    assert torch.equal(ref.model[i], fit.model[j])
    assert torch.equal(ref.inliers[i, pos_ref], fit.inliers[j, pos])
    assert torch.equal(ref.residuals[i, pos_ref], fit.residuals[j, pos])
    assert int(fit.inliers[j].sum()) == int(fit.num_inliers[j])  # nothing flagged in padding
    for f in ("iterations", "num_inliers", "valid", "cost"):
        assert torch.equal(getattr(ref, f)[i], getattr(fit, f)[j]), f


@pytest.mark.parametrize("kind,residual,thr", CASES)
def test_fit_invariant_to_padding_width_and_layout(kind, residual, thr, dtype, device):
    x1, x2 = _scene(kind, 240, 3, dtype, device)
    seed = torch.tensor([5])
    ref = _FIT[kind](x1[None], x2[None], threshold=thr, residual=residual, seed=seed)
    assert ref.valid.all() and int(ref.num_inliers) > 100
    everything = torch.arange(240, device=device)
    for extra in (0, 37, 900):
        for interleave in (False, True):
            X1, X2, mask, pos = _embed(x1, x2, 240 + extra, interleave, extra + interleave)
            fit = _FIT[kind](X1[None], X2[None], mask[None], threshold=thr, residual=residual,
                             seed=seed)
            _assert_same_fit(ref, 0, everything, fit, 0, pos)


@pytest.mark.parametrize("kind,residual,thr", CASES)
def test_fit_alone_equals_fit_beside_wider_and_narrower_pairs(kind, residual, thr, dtype,
                                                              device):
    # 300 points: beside 1100 (past the in-loop LO subset switch at 512 and the pre-check
    # switch at 64) and 50 (below the pre-check switch); per-pair seeds
    sizes, seeds = (50, 300, 1100), torch.tensor([17, 5, 2])
    pairs = [_scene(kind, n, 30 + k, dtype, device) for k, n in enumerate(sizes)]
    width = max(sizes) + 13
    X1 = torch.full((3, width, 2), 3e3, dtype=dtype, device=device)
    X2 = torch.full((3, width, 2), -7.0, dtype=dtype, device=device)
    mask = torch.zeros(3, width, dtype=torch.bool, device=device)
    for k, (a, b) in enumerate(pairs):
        X1[k, :len(a)], X2[k, :len(a)], mask[k, :len(a)] = a, b, True
    both = _FIT[kind](X1, X2, mask, threshold=thr, residual=residual, seed=seeds)
    narrow = _FIT[kind](X1[:2, :400], X2[:2, :400], mask[:2, :400], threshold=thr,
                        residual=residual, seed=seeds[:2])
    for k, (a, b) in enumerate(pairs):
        alone = _FIT[kind](a[None], b[None], threshold=thr, residual=residual,
                           seed=seeds[k:k + 1])
        assert alone.valid.all()
        pos = torch.arange(len(a), device=device)
        _assert_same_fit(alone, 0, pos, both, k, pos)
        if k < 2:
            _assert_same_fit(alone, 0, pos, narrow, k, pos)


@pytest.mark.parametrize("kind,residual,thr", [CASES[0], CASES[3]])
def test_prosac_fit_invariant_to_padding_and_batch(kind, residual, thr):
    x1, x2 = _scene(kind, 400, 8, torch.float64, None)
    g = torch.Generator().manual_seed(1)
    scores = torch.rand(400, generator=g, dtype=torch.float64)
    seed = torch.tensor([9])
    ref = _FIT[kind](x1[None], x2[None], scores=scores[None], threshold=thr, residual=residual,
                     seed=seed)
    X1, X2, mask, pos = _embed(x1, x2, 1000, True, 4)
    S = torch.rand(1000, generator=g, dtype=torch.float64) * 10  # garbage scores in padding
    S[pos] = scores
    wide = _scene(kind, 1000, 9, torch.float64, None)
    fit = _FIT[kind](torch.stack([X1, wide[0]]), torch.stack([X2, wide[1]]),
                     torch.stack([mask, torch.ones_like(mask)]), scores=torch.stack([S, S]),
                     threshold=thr, residual=residual, seed=torch.tensor([9, 4]))
    _assert_same_fit(ref, 0, torch.arange(400), fit, 0, pos)
