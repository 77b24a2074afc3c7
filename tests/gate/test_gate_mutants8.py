"""The pose-log gate's evidence pinned by mutation testing round 8: the eq. 5 verdict at
exactly tau_t, the signed margin of a decision, the first/last pose of a clip that starts past
the log's frame 0, a logged first/last pair read as is, and per-frame logs too short for the
pairs."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.config import GateConfig
from geocon_torch.errors import InputError
from geocon_torch.gate import gate_from_poses, load_pose_log
from helpers import adjacent, pose


def test_eq5_verdict_at_exactly_tau_t_is_h():
    """eq. 5 is ``t_inf > tau_t``: a translation of exactly 0.04 is H (inside the band: U)."""
    d = gate_from_poses(pose([0.0, 0.04, 0.0]), adjacent(4), 4, GateConfig())
    assert d.statistic == 0.04 and d.decision == "U"
    assert d.evidence["eq5_decision"] == "H"


@pytest.mark.parametrize("t,decision,margin", [(0.01, "H", 0.02), (0.03, "H", 0.0),
                                               (0.08, "F", 0.03), (0.04, "U", 0.0)])
def test_margin_is_the_distance_past_the_band_edge(t, decision, margin):
    """evidence["margin"]: low - t_inf for H, t_inf - high for F (>= 0 both), 0 for U."""
    d = gate_from_poses(pose([t, 0.0, 0.0], 10.0), adjacent(4), 4, GateConfig())
    assert d.decision == decision
    assert d.evidence["margin"] == pytest.approx(margin, abs=1e-12)


def _absolute(ts):
    """Per-frame world-to-camera poses: camera k at translation ts[k], no rotation."""
    return {"absolute_poses": [pose(t).tolist() for t in ts]}


def test_first_last_pose_of_a_clip_that_starts_past_frame_0():
    """With frame_indices the first/last pose is that of the clip's first and last source
    frames: a clip of frames 2..5 of a log whose camera moves only between frames 0 and 2 is
    static (t_inf 0, H), not the 0 -> 5 translation of the whole log (0.5, F)."""
    log = _absolute([[0.5, 0, 0], [0.25, 0, 0]] + [[0.0, 0, 0]] * 4)
    src = torch.arange(2, 6)
    d = gate_from_poses(log, adjacent(4), 4, GateConfig(), frame_indices=src)
    assert d.statistic == 0.0 and d.decision == "H"
    whole = gate_from_poses(log, adjacent(6), 6, GateConfig())
    assert whole.statistic == pytest.approx(0.5) and whole.decision == "F"


def test_per_frame_log_too_short_for_the_pairs_is_an_input_error():
    """A per-frame log of 3 poses (frames 0..2) cannot give pair (2, 3): InputError naming the
    count, not an IndexError; pair (1, 2), its last frame, is read."""
    log = load_pose_log(_absolute([[0.0, 0, 0], [0.1, 0, 0], [0.3, 0, 0]]))
    rel, ok = log.for_pairs(torch.tensor([[1, 2]]))
    assert ok.tolist() == [True] and float(rel[0, 0, 3]) == pytest.approx(0.2)
    with pytest.raises(InputError, match="has 3 poses, pairs need frame 3"):
        log.for_pairs(torch.tensor([[2, 3]]))
    with pytest.raises(InputError, match="has 3 poses"):
        gate_from_poses(log, adjacent(4), 4, GateConfig())


def test_a_logged_first_last_pair_is_read_as_is():
    """A log with a 'pairs' field that lists the first/last pair (0, 3) itself gates on that
    pose (t_inf 0.01: H), without needing the adjacent pairs between (none are logged here)."""
    log = {"poses": [pose([0.0, 0.0, 0.01], 5.0).tolist()], "pairs": [[0, 3]]}
    d = gate_from_poses(log, adjacent(4), 4, GateConfig())
    assert d.evidence["first_last_present"] is True
    assert d.statistic == pytest.approx(0.01) and d.decision == "H"
