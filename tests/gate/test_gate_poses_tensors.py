"""Pose logs given as tensors inside a list or a mapping: torch tensors that numpy cannot read
directly (ones that require grad here; CUDA tensors on a GPU) are read as host data, with the
same numbers as the plain numpy log. They used to end in ``np.asarray(tensor)``: an
``InputError: poses must be numbers ...`` that named the wrong problem, or a bare TypeError /
RuntimeError for ``valid`` and ``pairs``."""

import numpy as np
import pytest
import torch
from conftest import DEVICES
from helpers import adjacent, pose

from geocon_torch.config import GateConfig
from geocon_torch.gate import gate_from_poses, load_pose_log


#: four adjacent poses: H, U, F and a still camera (t_inf 0.02, 0.04, 0.07, 0)
STEPS = [pose([0.02, 0.0, 0.0], 3.0), pose([0.0, -0.04, 0.01], 7.0),
         pose([0.01, 0.0, 0.07], 11.0), pose([0.0, 0.0, 0.0], 2.0)]


def as_tensor(a, device, dtype=torch.float64):
    """``a`` as a tensor on ``device``: one that requires grad where the dtype allows it."""
    t = torch.as_tensor(np.asarray(a)).to(device, dtype)
    return t.requires_grad_() if dtype.is_floating_point else t


def same_log(got, want):
    assert torch.equal(got.relative, want.relative) and got.relative.dtype == torch.float64
    assert torch.equal(got.present, want.present)
    assert (got.pairs is None) == (want.pairs is None)
    if want.pairs is not None:
        assert torch.equal(got.pairs, want.pairs) and got.pairs.dtype == torch.long
    assert (got.absolute is None) == (want.absolute is None)
    if want.absolute is not None:
        assert torch.equal(got.absolute, want.absolute)


def same_decision(poses, plain, n=5):
    cfg = GateConfig(per_pair=True, missing_pose="present_only")
    got = gate_from_poses(poses, adjacent(n), n, cfg)
    want = gate_from_poses(plain, adjacent(n), n, cfg)
    assert got.decision == want.decision and got.per_pair == want.per_pair
    assert got.statistic == want.statistic and got.evidence == want.evidence
    return got


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_list_of_pose_tensors_reads_like_the_numpy_list(device, dtype):
    plain = [np.asarray(p, dtype=np.dtype(str(dtype).split(".")[1])) for p in STEPS]
    tensors = [as_tensor(p, device, dtype) for p in STEPS]
    same_log(load_pose_log(tensors), load_pose_log(plain))
    d = same_decision(tensors, plain)
    assert d.per_pair == ["H", "H", "F", "H"] and d.decision == "F"  # hysteresis
    assert d.statistic == pytest.approx(0.0725116607, abs=1e-8)  # composed, rotated
    with_none = [tensors[0], None, tensors[2]]  # a missing pose inside a list of tensors
    log = load_pose_log(with_none)
    same_log(log, load_pose_log([plain[0], None, plain[2]]))
    assert log.present.tolist() == [True, False, True]
    nested = [[as_tensor(row, device, dtype) for row in p] for p in STEPS]  # rows as tensors
    same_log(load_pose_log(nested), load_pose_log(plain))


@pytest.mark.parametrize("device", DEVICES)
def test_a_mapping_of_pose_tensors_reads_like_the_numpy_mapping(device):
    rel = np.stack(STEPS)
    valid = np.array([True, True, False, True])
    pairs = adjacent(5).numpy()
    plain = {"poses": rel, "valid": valid, "pairs": pairs}
    tensors = {"poses": as_tensor(rel, device), "valid": as_tensor(valid, device, torch.bool),
               "pairs": as_tensor(pairs, device, torch.long)}
    same_log(load_pose_log(tensors), load_pose_log(plain))
    d = same_decision(tensors, plain)
    assert d.per_pair == ["H", "H", None, "H"] and d.decision == "H"  # (0, 4): majority
    as_floats = {**tensors, "valid": as_tensor(valid, device)}  # a float 0/1 mask with grad
    same_log(load_pose_log(as_floats), load_pose_log(plain))
    rows = {"poses": [as_tensor(p, device) for p in STEPS],  # a list of tensors in a mapping
            "valid": [as_tensor(v, device, torch.bool) for v in valid],
            "pairs": [as_tensor(p, device, torch.long) for p in pairs]}
    same_log(load_pose_log(rows), load_pose_log(plain))


@pytest.mark.parametrize("device", DEVICES)
def test_first_last_and_absolute_pose_tensors(device):
    first_last = pose([0.0, 0.05, 0.0], 4.0)
    for key in ("relative_pose", "pose", "first_last"):
        d = same_decision({key: as_tensor(first_last, device)}, {key: first_last}, n=2)
        assert d.decision == "F" and d.statistic == pytest.approx(0.05)
    absolute = [np.eye(4)]
    for p in STEPS:
        absolute.append(p @ absolute[-1])
    plain = {"absolute_poses": np.stack(absolute)}
    for poses in (as_tensor(plain["absolute_poses"], device),
                  [as_tensor(a, device) for a in absolute]):
        same_log(load_pose_log({"absolute_poses": poses}), load_pose_log(plain))
        same_decision({"absolute_poses": poses}, plain)


@pytest.mark.parametrize("device", DEVICES)
def test_a_bare_pose_tensor_that_requires_grad(device):
    """The bare tensor path already moved a tensor to the CPU; one that requires grad raised
    "Can't call numpy() on Tensor that requires grad"."""
    rel = np.stack(STEPS)
    same_log(load_pose_log(as_tensor(rel, device)), load_pose_log(rel))
    same_log(load_pose_log(as_tensor(rel, device, torch.float32)),
             load_pose_log(rel.astype(np.float32)))
