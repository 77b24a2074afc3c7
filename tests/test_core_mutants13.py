"""Round-13 mutation tests of modules no earlier round targeted: the weighted Hartley
normalisation (geometry/normalization.py), the batched weighted affine least squares of the
foreground score (geometry/affine.py), the fit residuals, the side-input digests
(io/hashing.py), the SIFT patch stage, the masked lookups of _tensor_utils and the stage plan.
Closed-form numbers on constructed inputs, or numpy / hashlib on the same input; fast."""
from __future__ import annotations

import hashlib

import numpy as np
import pytest
import torch

from geocon_torch.geometry import (fundamental_7pt, fundamental_8pt, fundamental_residuals,
                                   hartley_normalize, homography_dlt,
                                   sampson_distance_normalized, weighted_affine_lstsq)
from geocon_torch.geometry._synthetic import fundamental_pairs, homography_pairs
from geocon_torch.types import Fit

F64 = torch.float64


def _noisy(kind: str, n: int = 40, seed: int = 0):
    """One pair of ``kind`` ("H" / "F") with 0.5 px of Gaussian noise (float64)."""
    make = homography_pairs if kind == "H" else fundamental_pairs
    d = make(1, n, outlier_ratio=0.0, noise_px=0.5, seed=seed, dtype=F64)
    return d["x1"], d["x2"]


# ------------------------------------------------------------------ Hartley normalisation

@pytest.mark.parametrize("kind", ["H", "F"])
def test_weighted_solvers_do_not_depend_on_the_scale_of_the_weights(kind):
    """sum w r^2 and (sum w r^2) / 1000 have the same minimiser, and the weighted Hartley
    frame (centroid sum w x / sum w) is the same for w and 1000 w: weights summing to less
    than 1 give the solver's model for the same weights scaled up."""
    x1, x2 = _noisy(kind)
    g = torch.Generator().manual_seed(3)
    w = torch.rand(x1.shape[:2], generator=g, dtype=F64) * 1e-3 + 1e-4  # sum ~ 0.024
    assert w.sum() < 0.1
    solve = homography_dlt if kind == "H" else fundamental_8pt
    small, big = solve(x1, x2, w), solve(x1, x2, 1000 * w)
    small = small / small.norm() * torch.sign(small[0, 2, 2])
    big = big / big.norm() * torch.sign(big[0, 2, 2])
    torch.testing.assert_close(small, big, rtol=0, atol=1e-9)


def test_hartley_of_points_that_all_sit_at_the_origin_keeps_unit_scale():
    """Coincident points are degenerate: s = 1 and T = I, also at the origin (where the
    1e-6 (1 + |c|) floor is 1e-6, not 0)."""
    for dtype in (torch.float32, F64):
        pts = torch.zeros(2, 5, 2, dtype=dtype)
        pts[1] = torch.tensor([3.0, -4.0], dtype=dtype)
        xn, T = hartley_normalize(pts)
        eye = torch.eye(3, dtype=dtype)
        torch.testing.assert_close(T[0], eye, rtol=0, atol=0)
        torch.testing.assert_close(T[1], torch.tensor([[1.0, 0, -3], [0, 1, 4], [0, 0, 1]],
                                                      dtype=dtype), rtol=0, atol=1e-5)
        assert (xn.abs() < 1e-5).all()


def test_hartley_closed_form_on_a_square():
    """The square (+-1, +-1) + (10, 20): centroid (10, 20), mean distance sqrt 2, so s = 1."""
    pts = torch.tensor([[[11.0, 21], [9, 21], [9, 19], [11, 19], [500, 500]]], dtype=F64)
    mask = torch.tensor([[True, True, True, True, False]])
    xn, T = hartley_normalize(pts, mask)
    ref = torch.tensor([[1.0, 0, -10], [0, 1, -20], [0, 0, 1]], dtype=F64)
    torch.testing.assert_close(T[0], ref, rtol=0, atol=1e-12)
    torch.testing.assert_close(xn[0, :4], pts[0, :4] - torch.tensor([10.0, 20.0], dtype=F64))
    assert (xn[0, 4] == 0).all()


def test_seven_point_with_a_nan_point_gives_no_valid_root():
    """fundamental_7pt keeps a NaN point (drop_nonfinite=False): NaN coefficients, no real
    root; dropping it like padding would put it at the origin and fit a bogus F."""
    x1, x2 = _noisy("F", n=7, seed=2)
    assert fundamental_7pt(x1, x2)[1].any()
    x1 = x1.clone()
    x1[0, 3, 0] = float("nan")
    F, valid = fundamental_7pt(x1, x2)
    assert not valid.any()
    assert (F == 0).all()


def test_normalised_sampson_gradient_is_finite_when_a_point_is_the_centroid():
    """A point exactly at its image's centroid has distance 0 to it: the sqrt in the mean
    distance is floored (tiny), so the gradient stays finite (sqrt'(0) is inf)."""
    x1 = torch.tensor([[[0.0, 0], [2, 0], [-2, 0], [0, 2], [0, -2], [1, 1], [-1, -1],
                        [1, -1], [-1, 1]]], dtype=F64)  # centroid (0, 0) = x1[0, 0]
    x2 = x1 * 1.1 + torch.tensor([0.3, -0.2], dtype=F64)
    x2[0, 5, 1] += 0.1
    F = torch.tensor([[[0.0, -0.1, 0.2], [0.1, 0.0, -1.0], [-0.3, 1.0, 0.05]]], dtype=F64)
    x1 = x1.requires_grad_()
    sampson_distance_normalized(F, x1, x2).sum().backward()
    assert torch.isfinite(x1.grad).all()


# ------------------------------------------------------------------ weighted affine fit

def _affine_problem(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    p = torch.rand(1, n, 2, generator=g, dtype=F64) * 100
    A = torch.tensor([[[0.02, -0.05], [0.03, 0.01]]], dtype=F64)
    b = torch.tensor([[1.5, -2.0]], dtype=F64)
    v = p @ A.transpose(-1, -2) + b[:, None] + 0.3 * torch.randn(1, n, 2, generator=g,
                                                                 dtype=F64)
    w = torch.rand(1, n, generator=g, dtype=F64) + 0.5
    return p, v, w


def test_affine_negative_weight_counts_as_zero():
    p, v, w = _affine_problem()
    neg, zero = w.clone(), w.clone()
    neg[0, :3] = -5.0
    zero[0, :3] = 0.0
    got, ref = weighted_affine_lstsq(p, v, neg), weighted_affine_lstsq(p, v, zero)
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, rtol=0, atol=1e-12)


def test_affine_fit_does_not_depend_on_the_scale_of_the_weights():
    """Weights summing to less than 1 (0.001 w) give the fit, WMSE included, of w."""
    p, v, w = _affine_problem()
    got, ref = weighted_affine_lstsq(p, v, 1e-3 * w), weighted_affine_lstsq(p, v, w)
    assert (1e-3 * w).sum() < 1
    for a, r in zip(got, ref):
        torch.testing.assert_close(a, r, rtol=1e-9, atol=1e-12)
    assert ref[2].item() > 0.01  # a real residual


def test_affine_collinear_positions_give_a_zero_map_and_the_weighted_mean_motion():
    """Positions on a line (det cov = 0): invalid, A = 0, b = the weighted mean motion and
    WMSE = the weighted variance of the motions, even when the motions vary along the line."""
    t = torch.arange(6.0, dtype=F64)
    p = torch.stack([t, 2 * t + 1], -1)[None]
    v = torch.stack([3 * t, -t + 2], -1)[None]
    w = torch.tensor([[1.0, 2, 1, 3, 1, 2]], dtype=F64)
    A, b, wmse, valid = weighted_affine_lstsq(p, v, w)
    assert not valid.item()
    assert (A == 0).all()
    wn = w / w.sum()
    mean = (wn[..., None] * v).sum(1)
    torch.testing.assert_close(b, mean, rtol=0, atol=1e-12)
    var = (wn * (v - mean[:, None]).pow(2).sum(-1)).sum(-1)
    torch.testing.assert_close(wmse, var, rtol=1e-12, atol=0)


def test_affine_conditioning_floor_is_relative_to_the_squared_trace():
    """valid iff det(cov) > 1e-9 tr(cov)^2 (scale free): a 100 x 1e-3 px strip is refused
    (det / tr^2 ~ 1e-10) and a 100 x 0.5 px strip (det / tr^2 ~ 2.5e-5) is fitted exactly."""
    xs = torch.linspace(0, 100, 11, dtype=F64)
    A = torch.tensor([[0.1, 0.2], [-0.3, 0.05]], dtype=F64)
    b = torch.tensor([2.0, -1.0], dtype=F64)
    for width, expect in ((1e-3, False), (0.5, True)):
        ys = width * (torch.arange(11, dtype=F64) % 2)
        p = torch.stack([xs, ys], -1)[None]
        v = p @ A.T + b
        w = torch.ones(1, 11, dtype=F64)
        got_a, got_b, wmse, valid = weighted_affine_lstsq(p, v, w)
        assert valid.item() is expect
        if expect:
            torch.testing.assert_close(got_a[0], A, rtol=0, atol=1e-9)
            torch.testing.assert_close(got_b[0], b, rtol=0, atol=1e-8)
            assert wmse.item() < 1e-16
        else:
            assert (got_a == 0).all()


# ------------------------------------------------------------------ fit residuals

def test_fundamental_residuals_normalise_over_the_given_mask():
    """The normalised Sampson distance is taken in the Hartley frame of the masked matches: two
    far padding matches (mask False) change it when the mask is ignored."""
    x1, x2 = _noisy("F", n=30, seed=4)
    x1[0, -2:] = torch.tensor([[5000.0, -3000.0], [-4000.0, 6000.0]], dtype=F64)
    x2[0, -2:] = torch.tensor([[7000.0, 2000.0], [-1000.0, -8000.0]], dtype=F64)
    mask = torch.ones(1, 30, dtype=torch.bool)
    mask[0, -2:] = False
    F = fundamental_8pt(x1[:, :-2], x2[:, :-2])
    z = torch.zeros(1, 30)
    fit = Fit("F", F, mask, z, torch.ones(1, dtype=torch.bool), mask.sum(1),
              torch.ones(1, dtype=torch.long), torch.zeros(1))
    r_norm, r_px = fundamental_residuals(fit, x1, x2, mask)
    ref = sampson_distance_normalized(F, x1, x2, mask)
    torch.testing.assert_close(r_norm, ref, rtol=0, atol=0)
    unmasked = sampson_distance_normalized(F, x1, x2)
    assert not torch.allclose(r_norm[mask], unmasked[mask], rtol=1e-3, atol=0)


def test_fit_residuals_come_back_in_the_points_dtype():
    """A float64 model on float32 points: residuals in float32 (the model is cast), the
    values of the float64 computation to float32 rounding."""
    from geocon_torch.geometry import homography_residuals, symmetric_transfer_error

    x1, x2 = _noisy("H", n=10, seed=5)
    H = homography_dlt(x1, x2)
    z = torch.zeros(1, 10)
    ones = torch.ones(1, 10, dtype=torch.bool)
    fit = Fit("H", H, ones, z, torch.ones(1, dtype=torch.bool), ones.sum(1),
              torch.ones(1, dtype=torch.long), torch.zeros(1))
    got = homography_residuals(fit, x1.float(), x2.float())
    assert got.dtype == torch.float32
    ref = symmetric_transfer_error(H, x1, x2)
    torch.testing.assert_close(got.double(), ref, rtol=1e-3, atol=1e-3)
    F = fundamental_8pt(x1, x2)
    fit_f = Fit("F", F, ones, z, fit.valid, fit.num_inliers, fit.iterations, fit.cost)
    r_norm, r_px = fundamental_residuals(fit_f, x1.float(), x2.float())
    assert r_norm.dtype == r_px.dtype == torch.float32


# ------------------------------------------------------------------ side-input digests

def _write(root, files):
    for rel, data in files.items():
        f = root / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_bytes(data)
    return root


def test_input_digest_of_a_folder_is_its_relative_names_and_bytes(tmp_path):
    """SHA-256 over the files below the folder in sorted relative-path order, each "name\\0"
    and its bytes: another location keeps the digest, a renamed or edited file changes it."""
    from geocon_torch.io.hashing import input_digest

    files = {"obj2/0.png": b"second", "obj1/1.png": b"one-1", "obj1/0.png": b"one-0"}
    a = _write(tmp_path / "a" / "masks", files)
    ref = hashlib.sha256()
    for rel in sorted(files):
        ref.update(rel.encode() + b"\0" + files[rel])
    assert input_digest(a) == ref.hexdigest()
    assert input_digest(_write(tmp_path / "elsewhere", files)) == ref.hexdigest()
    renamed = _write(tmp_path / "renamed", {("obj3/0.png" if k == "obj2/0.png" else k): v
                                            for k, v in files.items()})
    assert input_digest(renamed) != ref.hexdigest()
    (a / "obj1" / "1.png").write_bytes(b"one-2")
    assert input_digest(a) != ref.hexdigest()


def test_input_digest_of_a_file_is_sha256_of_its_bytes(tmp_path):
    from geocon_torch.io.hashing import input_digest

    one, two = tmp_path / "poses.json", tmp_path / "sub" / "other_name.json"
    two.parent.mkdir()
    one.write_bytes(b"[1, 2, 3]")
    two.write_bytes(b"[1, 2, 3]")
    assert input_digest(one) == hashlib.sha256(b"[1, 2, 3]").hexdigest() == input_digest(two)
    two.write_bytes(b"[1, 2, 4]")
    assert input_digest(two) != input_digest(one)


def test_content_hash_follows_the_bytes_not_the_path(tmp_path):
    from geocon_torch.io import content_hash

    data = bytes(range(256)) * 4099  # > 1 MiB: more than one read block
    a, b = tmp_path / "a.mp4", tmp_path / "b" / "c.mp4"
    b.parent.mkdir()
    a.write_bytes(data)
    b.write_bytes(data)
    assert content_hash(a) == content_hash(b) == hashlib.sha256(data).hexdigest()
    flipped = bytearray(data)
    flipped[-1] ^= 1
    b.write_bytes(bytes(flipped))
    assert content_hash(b) == hashlib.sha256(bytes(flipped)).hexdigest() != content_hash(a)


# ------------------------------------------------------------------ SIFT patches

def test_tree_sum_equals_the_plain_sum_for_every_length():
    from geocon_torch.features.sift_patch import tree_sum

    for n in range(1, 14):
        x = torch.arange(1.0, n + 1, dtype=F64).expand(3, n) * torch.tensor([[1.0], [2], [-1]],
                                                                            dtype=F64)
        got = tree_sum(x, 1)
        assert got.shape == (3, 1)
        assert got[:, 0].tolist() == [n * (n + 1) / 2, n * (n + 1), -n * (n + 1) / 2]


def test_descriptor_of_an_odd_stride_patch_matches_kornia():
    """41 px patches pool in strides of 10 (an odd half: tree_sum's carried remainder)."""
    import kornia.feature as KF

    from geocon_torch.features.sift_patch import sift_descriptor

    g = torch.Generator().manual_seed(41)
    p = torch.nn.functional.avg_pool2d(torch.rand(6, 1, 45, 45, generator=g, dtype=F64), 5, 1)
    ref = KF.SIFTDescriptor(41, rootsift=True).double()(p)
    torch.testing.assert_close(sift_descriptor(p, True), ref, rtol=0, atol=1e-8)


# ------------------------------------------------------------------ masked lookups, quantiles

def test_mask_at_pixels_a_point_rounding_to_the_column_past_the_edge_is_outside():
    from geocon_torch._tensor_utils import mask_at_pixels

    mask = torch.ones(4, 5, dtype=torch.bool)
    xy = torch.tensor([[4.4, 1.0], [4.6, 1.0], [5.0, 2.0], [1.0, 3.4], [1.0, 3.6]])
    assert mask_at_pixels(mask, xy).tolist() == [True, False, False, True, False]


def test_lower_quantiles_take_the_lower_neighbour():
    """interpolation="lower" (the background's median match count, as torch.median) is
    numpy's method="lower": for 4 values the median is the 2nd, never the 3rd or a mean."""
    from geocon_torch._tensor_utils import (group_index, grouped_quantiles, quantile_of_sorted,
                                            sorted_valid)

    x = torch.tensor([[40.0, 10.0, 30.0, 20.0, 99.0, 7.0]])
    valid = torch.tensor([True, True, True, True, False, True])
    vals, n = sorted_valid(x[0, :4], valid[:4])
    for q in (0.5, 0.25, 0.75, 0.9):
        got = quantile_of_sorted(vals, n, q, interpolation="lower").item()
        assert got == np.quantile([10.0, 20.0, 30.0, 40.0], q, method="lower")
    idx, member = group_index([[0, 1, 2, 3], [3, 4, 5], [4]])
    q, counts = grouped_quantiles(x, valid, idx, member, qs=(0.5,), interpolation="lower")
    assert q[0].tolist() == [[20.0, 7.0, 0.0]] and counts.tolist() == [[4, 2, 0]]
    q, _ = grouped_quantiles(x, valid, idx, member, qs=(0.5,))
    assert q[0].tolist() == [[25.0, 13.5, 0.0]]


def test_quantile_clamps_q_and_mean_uses_its_fill():
    from geocon_torch._tensor_utils import masked_mean, quantile_of_sorted, sorted_valid

    vals, n = sorted_valid(torch.tensor([[3.0, 1.0, 2.0, 5.0]]),
                           torch.tensor([[True, True, True, False]]))
    assert quantile_of_sorted(vals, n, 1.5).tolist() == [3.0]
    assert quantile_of_sorted(vals, n, -0.5).tolist() == [1.0]
    mean, ok = masked_mean(torch.ones(2, 3), torch.tensor([[False] * 3, [True] * 3]), fill=-2.0)
    assert mean.tolist() == [-2.0, 1.0] and ok.tolist() == [False, True]


# ------------------------------------------------------------------ stage plan

def test_batch_or_each_of_no_items_calls_nothing():
    from geocon_torch.sections.isolation import batch_or_each

    calls = []
    assert batch_or_each(lambda items: calls.append(list(items)) or [], []) == []
    assert calls == []


def test_lk_tracks_features_load_no_model():
    from geocon_torch.config import GeoConConfig
    from geocon_torch.sections.stage_models import files_read, stage_plan

    cfg = GeoConConfig().replace(features={"backend": "lk-tracks"},
                                 foreground={"flow": "torch-lk"})
    assert stage_plan(cfg, ("background", "foreground")).features is None
    assert files_read(cfg, ("background", "foreground")) == {}


def test_preflight_builds_each_model_once_per_stage_device(monkeypatch):
    from geocon_torch.config import GeoConConfig
    from geocon_torch.sections import stage_models

    built = []
    monkeypatch.setattr(stage_models, "cached_flow",
                        lambda name, checkpoint, device: built.append((name, str(device))))
    cfg = GeoConConfig().replace(foreground={"flow": "raft_small", "flow_checkpoint": "r.pth"})
    clips = [(False, False, "cpu"), (True, False, "cpu"), (False, False, "meta"),
             (False, True, "meta")]
    stage_models.preflight(cfg, ("background", "foreground"), clips)
    assert built == [("raft_small", "cpu"), ("raft_small", "meta")]
