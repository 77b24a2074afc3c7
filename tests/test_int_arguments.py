"""Integer arguments of the public API refuse floats and out-of-range values (docs audit s19 F2).

A float such as 2.5 is an ArgumentTypeError (it was truncated silently, or crashed with a raw
torch / OpenCV error); an integer below the documented minimum is an InputError (0 strides and
batch sizes were raised to 1, negative radii read as "no dilation"). NumPy integers still work.
Also the gate's option checks (``initial``, ``low <= high``) and the pose log's "zeros where
missing" (F4).
"""
from __future__ import annotations

from typing import Any, Callable, List, Tuple

import numpy as np
import pytest
import torch

from geocon_torch.errors import ArgumentTypeError, InputError
from geocon_torch.features import get_extractor, lk_tracks, shi_tomasi
from geocon_torch.flow import DenseLKFlow
from geocon_torch.gate import hysteresis, load_pose_log, threshold_decision, translation_inf
from geocon_torch.io import background_pairs, foreground_pairs, worldatlas_pairs
from geocon_torch.metrics import AdaDFRC
from geocon_torch.metrics.functional import adadfrc
from geocon_torch.segment import background_mask, dilate
from geocon_torch.synth import render_scene

_GEN = torch.Generator().manual_seed(0)
GRAY = torch.nn.functional.avg_pool2d(torch.rand(2, 1, 32, 32, generator=_GEN), 3, 1, 1)
PAIRS = torch.tensor([[0, 1]])
FLOW = torch.zeros(1, 2, 16, 16)
MASKS = torch.ones(1, 1, 16, 16, dtype=torch.bool)
CONTENT = torch.ones(8, 8, dtype=torch.bool)
OBJECTS = torch.zeros(1, 1, 8, 8, dtype=torch.bool)

# (id, parameter name in the message, call with the value, an integer below the minimum)
CASES: List[Tuple[str, str, Callable[[Any], Any], int]] = [
    ("shi_tomasi.max_corners", "max_corners", lambda v: shi_tomasi(GRAY, v), 0),
    ("lk_tracks.window.torch", "LK window", lambda v: lk_tracks(GRAY, PAIRS, window=v), 1),
    ("lk_tracks.window.opencv", "LK window",
     lambda v: lk_tracks(GRAY, PAIRS, window=v, backend="opencv"), 1),
    ("lk_tracks.levels.torch", "LK levels", lambda v: lk_tracks(GRAY, PAIRS, levels=v), -1),
    ("lk_tracks.levels.opencv", "LK levels",
     lambda v: lk_tracks(GRAY, PAIRS, levels=v, backend="opencv"), -1),
    ("lk_tracks.max_corners", "max_corners", lambda v: lk_tracks(GRAY, PAIRS, max_corners=v), 0),
    ("lk_tracks.block.opencv", "block",
     lambda v: lk_tracks(GRAY, PAIRS, block=v, backend="opencv"), 0),
    ("get_extractor.max_keypoints", "max_keypoints",
     lambda v: get_extractor("opencv-sift", max_keypoints=v, device="cpu"), 0),
    ("DenseLKFlow.levels", "levels", lambda v: DenseLKFlow(levels=v), 0),
    ("DenseLKFlow.batch_size", "batch_size", lambda v: DenseLKFlow(batch_size=v), 0),
    ("adadfrc.grid", "grid", lambda v: adadfrc(FLOW, MASKS, grid=v), 1),
    ("adadfrc.min_pixels", "min_pixels", lambda v: adadfrc(FLOW, MASKS, min_pixels=v), -1),
    ("AdaDFRC.grid", "grid", lambda v: AdaDFRC(grid=v), 1),
    ("AdaDFRC.min_pixels", "min_pixels", lambda v: AdaDFRC(min_pixels=v), -1),
    ("background_pairs.pair_stride", "pair_stride", lambda v: background_pairs(5, v), 0),
    ("worldatlas_pairs.pair_stride", "pair_stride", lambda v: worldatlas_pairs(9, v), 0),
    ("worldatlas_pairs.num_frames", "num_frames", lambda v: worldatlas_pairs(v, 1), -1),
    ("render_scene.num_frames", "num_frames",
     lambda v: render_scene("C1", num_frames=v, size=(32, 48)), 0),
    ("dilate.radius", "radius", lambda v: dilate(OBJECTS[0], v), -1),
    ("background_mask.margin_px", "margin_px",
     lambda v: background_mask(CONTENT, OBJECTS, margin_px=v), -1),
]


@pytest.mark.parametrize("name,call,low", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_int_argument_refuses_float_and_out_of_range(name: str, call: Callable[[Any], Any],
                                                     low: int) -> None:
    with pytest.raises(ArgumentTypeError, match=rf"{name}.* must be an integer.*got float 2\.5"):
        call(2.5)
    with pytest.raises(InputError, match=name) as err:
        call(low)
    assert not isinstance(err.value, ArgumentTypeError)


@pytest.mark.parametrize("call", [
    lambda v: foreground_pairs(torch.ones(5, 1, dtype=torch.bool), v),
    lambda v: worldatlas_pairs(9, 1, v)], ids=["foreground_pairs", "worldatlas_pairs"])
def test_max_pairs_refuses_float_keeps_no_cap_below_one(call: Callable[[Any], Any]) -> None:
    with pytest.raises(ArgumentTypeError, match=r"max_pairs.* must be an integer, got float 1\.5"):
        call(1.5)
    full = len(call(100))
    assert full in (5, 8) and len(call(0)) == len(call(-3)) == full  # <= 0: no cap (documented)
    assert len(call(2)) == 2


def test_numpy_integers_are_accepted_with_the_same_results() -> None:
    assert background_pairs(6, np.int64(2)).tolist() == [[0, 2], [1, 3], [2, 4], [3, 5]]
    assert worldatlas_pairs(np.int32(9), np.int64(2), np.int64(3)).tolist() == \
        [[0, 2], [4, 6], [6, 8]]  # 3 of the 4 pairs, spread evenly (rint(1.5) = 2)
    ones = torch.ones(5, 1, dtype=torch.bool)
    assert foreground_pairs(ones, np.int64(2)).tolist() == [0, 4]
    xy, valid = shi_tomasi(GRAY, np.int64(5))
    ref_xy, ref_valid = shi_tomasi(GRAY, 5)
    assert xy.shape[1] == 5 and torch.equal(xy, ref_xy) and torch.equal(valid, ref_valid)
    assert DenseLKFlow(levels=np.int64(3), batch_size=np.int64(4)).batch_size == 4
    m = torch.zeros(1, 7, 7, dtype=torch.bool)
    m[0, 3, 3] = True
    assert int(dilate(m, np.int64(1)).sum()) == 9 and int(dilate(m, 0).sum()) == 1


def test_lk_backends_agree_on_integer_settings() -> None:
    a = lk_tracks(GRAY, PAIRS, window=np.int64(21), levels=np.int64(2), max_corners=50)
    b = lk_tracks(GRAY, PAIRS, window=21, levels=2, max_corners=50)
    assert int(a.mask.sum()) == int(b.mask.sum()) > 0
    assert torch.equal(a.x2[a.mask], b.x2[b.mask])


def test_hysteresis_refuses_an_unknown_initial_code() -> None:
    s = torch.tensor([0.5, 0.5, 0.9])
    with pytest.raises(InputError, match="initial must be one of"):
        hysteresis(s, 0.2, 0.8, initial="X")
    assert hysteresis(s, 0.2, 0.8, initial="H").tolist() == [0, 0, 1]
    assert hysteresis(s, 0.2, 0.8, initial=None).tolist() == [-1, -1, 1]


@pytest.mark.parametrize("rule", [threshold_decision, hysteresis])
def test_gate_rules_refuse_low_above_high(rule: Callable[..., torch.Tensor]) -> None:
    s = torch.tensor([0.5, 0.1, 0.9])
    with pytest.raises(InputError, match=r"low <= high, got low 0\.8 > high 0\.2"):
        rule(s, 0.8, 0.2)
    assert rule(s, 0.2, 0.2).tolist() == [1, 0, 1]  # low == high: allowed (GateConfig too)
    assert threshold_decision(s, 0.2, 0.8).tolist() == [2, 0, 1]


def _pose(t: Tuple[float, float, float]) -> np.ndarray:
    pose = np.eye(4)
    pose[:3, 3] = t
    return pose


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_pose_log_relative_is_zero_where_a_pose_is_missing(bad: float) -> None:
    broken = _pose((0.3, 0.0, 0.0))
    broken[0, 3] = bad  # one non-finite entry: the whole pose is missing
    for source in ([_pose((0.1, 0.0, 0.2)), broken, None],
                   {"poses": [_pose((0.1, 0.0, 0.2)), broken, None]},
                   torch.from_numpy(np.stack([_pose((0.1, 0.0, 0.2)), broken]))):
        log = load_pose_log(source)
        n = log.relative.shape[0]
        assert log.present.tolist() == [True, False, False][:n]
        assert torch.equal(log.relative[1:], torch.zeros(n - 1, 4, 4, dtype=torch.float64))
        assert translation_inf(log.relative).tolist() == [0.2, 0.0, 0.0][:n]


def test_pose_log_missing_pose_from_absolute_poses_is_zero() -> None:
    absolute = np.stack([_pose((0.0, 0.0, 0.0)), _pose((0.1, 0.0, 0.0)),
                         _pose((float("inf"), 0.0, 0.0))])
    rel, present = load_pose_log({"absolute_poses": absolute}).for_pairs(
        torch.tensor([[0, 1], [1, 2]]))
    assert present.tolist() == [True, False]
    assert torch.equal(rel[1], torch.zeros(4, 4, dtype=torch.float64))
    assert translation_inf(rel).tolist() == pytest.approx([0.1, 0.0])
