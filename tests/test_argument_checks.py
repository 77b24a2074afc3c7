"""Argument checks of the tensor functions (error audit s19: E2, E4, E11, E12): a bad value is a
GeoConError naming the argument, the value and what is allowed, never a raw Python error or a
silently empty / misleading result; valid values keep their exact results."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT

from geocon_torch._checks import check_number
from geocon_torch.errors import ArgumentTypeError, InputError, ShapeError
from geocon_torch.features.lk import lk_tracks, shi_tomasi
from geocon_torch.features.matching import match_descriptors
from geocon_torch.geometry import ransac_fundamental, ransac_homography
from geocon_torch.measures.foreground import _check_inputs, adadfrc_summary
from geocon_torch.measures.soft import grid_points
from geocon_torch.metrics import AdaDFRC
from geocon_torch.metrics.functional import adadfrc, soft_background_consistency
from geocon_torch.segment.files import check_float_masks
from geocon_torch.synth import grounded_clip
from geocon_torch.types import Keypoints

sys.path.insert(0, str(REPO_ROOT))
from benchmarks._dispatch_count import DispatchCounter  # noqa: E402


# ---------------------------------------------------------------------------------------------
# check_number
def test_check_number_types_bounds_and_messages():
    assert check_number(0.5, "p", 0, 1) == 0.5
    assert check_number(np.float32(0.25), "p", 0, 1) == 0.25 and check_number(1, "p", 0, 1) == 1.0
    assert check_number(float("inf"), "t", 0, low_open=True) == float("inf")
    for bad in ("0.9", True, None, torch.tensor(0.5), [0.5]):
        with pytest.raises(ArgumentTypeError, match=r"^p must be a number in \[0, 1\], got "):
            check_number(bad, "p", 0, 1)
    with pytest.raises(InputError, match=r"^p must be in \(0, 1\], got 0$"):
        check_number(0, "p", 0, 1, low_open=True)
    with pytest.raises(InputError, match=r"^t must be > 0, got -1 \(why\)$"):
        check_number(-1, "t", 0, low_open=True, why=" (why)")
    with pytest.raises(InputError, match=r"^d must be >= 0, got nan$"):
        check_number(float("nan"), "d", 0)
    with pytest.raises(InputError, match=r"^x must be a number, not NaN, got nan$"):
        check_number(float("nan"), "x")


# ---------------------------------------------------------------------------------------------
# E2: soft_background_consistency on frames too small for its grid
def test_soft_grid_lines_are_the_grid_of_the_measure():
    from geocon_torch.metrics.functional.soft import grid_lines
    for h, w, step, border in ((21, 21, 4, 4), (20, 64, 4, 4), (12, 12, 2, 2), (7, 30, 3, 4),
                               (1, 5, 1, 0), (64, 48, 8, 4)):
        rows, cols = grid_lines(h, w, step, border)
        grid, _, _ = grid_points(h, w, step, border, torch.float32, torch.device("cpu"))
        assert rows * cols == grid.shape[0]
        assert len(set(grid[:, 1].tolist())) == rows and len(set(grid[:, 0].tolist())) == cols


@pytest.mark.parametrize("h, w, grid", [(20, 20, "3 x 3"), (16, 16, "2 x 2"), (4, 4, "1 x 1"),
                                        (12, 64, "1 x 14"), (64, 20, "14 x 3")])
def test_soft_refuses_frames_below_a_4x4_grid(h, w, grid):
    """Independent noise frames of <= 16 px scored 0.982 (above a consistent clip's 0.97): too
    few grid points for the H / F fit. Refused, naming the size, the grid and the minimum."""
    noise = torch.rand(2, 3, 3, h, w, generator=torch.Generator().manual_seed(0))
    msg = (rf"frames of {h} x {w} px give a {grid} grid of flow correspondences \(grid_step=4, "
           rf"border=4\); .* at least a 4 x 4 grid: frames >= 21 x 21 px at these settings")
    with pytest.raises(ShapeError, match=msg):
        soft_background_consistency(noise)


def test_soft_minimum_follows_the_grid_settings():
    from geocon_torch.metrics.functional.soft import MIN_GRID_LINES
    x = torch.rand(1, 2, 1, 20, 20, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ShapeError, match=r"grid_step=8, border=2\); .* frames >= 29 x 29 px"):
        soft_background_consistency(x, grid_step=8, border=2)
    assert MIN_GRID_LINES == 4
    assert soft_background_consistency(x, grid_step=5, border=2).shape == (1,)  # 4 x 4 grid


def test_soft_noise_scores_low_at_the_smallest_accepted_size():
    """At 21 x 21 px (the smallest default size, a 4 x 4 grid) noise scores well below a
    consistent grounded clip (measured over 32 noise clips: mean 0.70, max 0.82; grounded C1 /
    C2 / C3 at 22 x 22 px: 0.982 / 0.973 / 0.973)."""
    noise = torch.rand(8, 3, 3, 21, 21, generator=torch.Generator().manual_seed(0))
    s = soft_background_consistency(noise)
    clean = grounded_clip("C2", num_frames=3, size=(22, 22)).frames.float()[None] / 255
    c = float(soft_background_consistency(clean))
    assert float(s.mean()) < 0.75 and float(s.max()) < 0.85 and c > 0.96
    assert c - float(s.max()) > 0.1


# ---------------------------------------------------------------------------------------------
# E4: adadfrc / AdaDFRC refuse soft masks as score_clip does
def _flow_masks():
    flow = torch.zeros(2, 2, 32, 32)
    flow[:, 0] = 2.0
    flow[:, 1] = torch.linspace(0, 1, 32)[:, None]
    masks = torch.zeros(2, 1, 32, 32, dtype=torch.bool)
    masks[:, 0, 8:24, 6:26] = True
    return flow, masks


def test_adadfrc_refuses_soft_float_masks_with_score_clips_message():
    flow, _ = _flow_masks()
    soft = torch.rand(2, 1, 32, 32, generator=torch.Generator().manual_seed(0)) * 0.1
    with pytest.raises(InputError) as ref:
        check_float_masks(soft, "masks")
    assert "threshold soft masks first (e.g. m > 0.5)" in str(ref.value)
    with pytest.raises(InputError) as got:
        adadfrc(flow, soft)
    assert str(got.value) == str(ref.value)
    with pytest.raises(InputError, match=r"threshold soft masks first \(e\.g\. m > 0\.5\)"):
        AdaDFRC().update(flow, soft)
    nan = torch.zeros(2, 1, 32, 32)
    nan[0, 0, 0, 0] = float("nan")
    with pytest.raises(InputError, match="float masks hold 1 NaN value"):
        adadfrc(flow, nan)


@pytest.mark.parametrize("dtype, value", [(torch.long, 7), (torch.uint8, 255), (torch.int32, -1)])
def test_adadfrc_refuses_integer_masks_other_than_0_1(dtype, value):
    flow, masks = _flow_masks()
    labels = masks.to(dtype) * value
    with pytest.raises(InputError, match=rf"masks: integer masks must be 0 / 1 .* found "
                                         rf"value\(s\) \[{min(0, value)}, {max(0, value)}\]"):
        adadfrc(flow, labels)


def test_adadfrc_binary_masks_of_any_dtype_score_as_bool():
    flow, masks = _flow_masks()
    d, v = adadfrc(flow, masks)
    assert v.tolist() == [[True], [True]] and float(d.max()) < 1e-8  # affine flow: D = 0
    for dtype in (torch.float32, torch.float64, torch.long, torch.uint8):
        d2, v2 = adadfrc(flow, masks.to(dtype))
        assert torch.equal(d2, d) and torch.equal(v2, v)


def test_mask_check_costs_no_sync_for_bool_and_one_for_other_dtypes():
    """The pipeline's foreground path passes bool masks (resized, >= 0.5): the value check is
    free there; other dtypes cost one batched test and one host read per call."""
    flow, masks = _flow_masks()
    rel = torch.rand(2, 32, 32)
    with DispatchCounter() as c:
        _check_inputs(flow, masks, rel)
    assert (c.ops, c.syncs) == (0, 0)
    for m in (masks.float(), masks.long()):
        with DispatchCounter() as c:
            _check_inputs(flow, m, rel)
        assert (c.ops, c.syncs, c.scalar) == (5, 1, 1)


def test_adadfrc_reliability_outside_0_1_is_clamped_as_documented():
    """Documented, not checked (a check would read the host on every call of the pipeline's
    foreground path): negative weights count as 0, weights above 1 as 1."""
    flow, masks = _flow_masks()
    flow = flow + 0.3 * torch.randn(flow.shape, generator=torch.Generator().manual_seed(0))
    rel = torch.rand(2, 32, 32, generator=torch.Generator().manual_seed(1))
    d, v = adadfrc(flow, masks, rel)
    d2, v2 = adadfrc(flow, masks, rel * 3 - 1)
    d3, v3 = adadfrc(flow, masks, (rel * 3 - 1).clamp(0, 1))
    assert torch.equal(d2, d3) and torch.equal(v2, v3) and not torch.equal(d2, d)
    assert adadfrc(flow, masks, -torch.ones(2, 32, 32))[1].tolist() == [[False], [False]]


# ---------------------------------------------------------------------------------------------
# E11 / E12: number arguments
def test_adadfrc_percentile_must_be_a_number():
    with pytest.raises(ArgumentTypeError, match=r"^percentile must be a number in \[0, 1\], got "
                                                r"str '0.9'$"):
        AdaDFRC(percentile="0.9")
    with pytest.raises(InputError, match=r"^percentile must be in \[0, 1\], got 1.5$"):
        AdaDFRC(percentile=1.5)
    d, v = torch.tensor([[1.0], [3.0]]), torch.tensor([[True], [True]])
    with pytest.raises(ArgumentTypeError, match="percentile must be a number"):
        adadfrc_summary(d, v, "0.5")
    assert float(adadfrc_summary(d, v, 0.5)["adap90"][0]) == 2.0


def _points():
    g = torch.Generator().manual_seed(0)
    x1 = torch.rand(1, 40, 2, generator=g) * 100
    return x1, x1 + 3.0


@pytest.mark.parametrize("fit", [ransac_homography, ransac_fundamental])
def test_ransac_threshold_and_confidence_must_be_numbers(fit):
    x1, x2 = _points()
    with pytest.raises(ArgumentTypeError, match=r"^threshold must be a number > 0, got str '2'$"):
        fit(x1, x2, threshold="2")
    with pytest.raises(ArgumentTypeError, match=r"^confidence must be a number in \(0, 1\), got "):
        fit(x1, x2, confidence="0.99")
    with pytest.raises(InputError, match=r"^threshold must be > 0, got 0$"):
        fit(x1, x2, threshold=0)
    with pytest.raises(InputError, match=r"^confidence must be in \(0, 1\), got 1$"):
        fit(x1, x2, confidence=1)
    for bad in ("2", 2.5):  # F's floor of 8 must not hide them (max("2", 8) / max(2.5, 8))
        with pytest.raises(ArgumentTypeError, match=r"^min_inliers must be an integer >= 0"):
            fit(x1, x2, min_inliers=bad)


def _gray():
    clip = grounded_clip("C2", num_frames=2, size=(64, 64)).frames.float() / 255
    return clip.mean(1, keepdim=True), torch.tensor([[0, 1]])


@pytest.mark.parametrize("backend", ["torch", "opencv"])
def test_lk_tracks_refuses_bad_corner_and_track_settings(backend):
    gray, pairs = _gray()
    cases = [({"min_distance": -3}, InputError, r"^min_distance must be >= 0, got -3"),
             ({"quality": 5}, InputError, r"^quality must be in \(0, 1\], got 5"),
             ({"quality": 0}, InputError, r"^quality must be in \(0, 1\], got 0"),
             ({"fb_threshold_px": -1}, InputError, r"^fb_threshold_px must be > 0, got -1"),
             ({"fb_threshold_px": 0.0}, InputError, r"^fb_threshold_px must be > 0, got 0.0"),
             ({"quality": "0.01"}, ArgumentTypeError, r"^quality must be a number in \(0, 1\]")]
    for kwargs, err, msg in cases:
        with pytest.raises(err, match=msg):
            lk_tracks(gray, pairs, max_corners=50, backend=backend, **kwargs)
    with pytest.raises(InputError, match=r"^fb_threshold_px must be > 0"), \
            pytest.warns(DeprecationWarning):
        lk_tracks(gray, pairs, max_corners=50, backend=backend, fb_threshold=-1)
    # the bounds themselves are accepted (as config features.lk allows them); responses must
    # exceed quality * peak strictly (OpenCV), so quality 1 keeps no corner, 0.999 the peak
    counts = [int(lk_tracks(gray, pairs, max_corners=50, backend=backend, quality=q,
                            min_distance=0).num_kp1[0]) for q in (1.0, 0.999, 0.001)]
    assert counts == [0, 1, 50]


def test_shi_tomasi_refuses_negative_min_distance():
    gray, _ = _gray()
    with pytest.raises(InputError, match=r"^min_distance must be >= 0, got -1"):
        shi_tomasi(gray, 50, min_distance=-1)


def _keypoints():
    g = torch.Generator().manual_seed(0)
    xy = torch.rand(2, 30, 2, generator=g) * 64
    desc = torch.randn(2, 30, 16, generator=g)
    desc[1] = desc[0] + 0.01 * torch.randn(30, 16, generator=g)
    return Keypoints(xy=xy, descriptors=desc, scores=torch.ones(2, 30),
                     mask=torch.ones(2, 30, dtype=torch.bool))


def test_match_descriptors_ratio_in_0_1():
    kps, pairs = _keypoints(), torch.tensor([[0, 1]])
    for ratio in (2, 0, -0.5, float("nan")):
        with pytest.raises(InputError, match=r"^ratio must be in \(0, 1\], got "):
            match_descriptors(kps, pairs, ratio=ratio)
    with pytest.raises(ArgumentTypeError, match=r"^ratio must be a number in \(0, 1\]"):
        match_descriptors(kps, pairs, ratio="0.8")
    assert int(match_descriptors(kps, pairs, ratio=1).mask.sum()) == 30
    assert int(match_descriptors(kps, pairs, ratio=0.8).mask.sum()) == 30
