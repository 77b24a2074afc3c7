"""Pose-log gate: t_inf (eq. 5), hysteresis band, missing-pose policies, file formats."""
import json

import numpy as np
import pytest
import torch

from geocon_torch.config import GateConfig
from geocon_torch.categories import EXPECTED_REGIME
from geocon_torch.errors import GeoConError
from geocon_torch.gate import gate_from_poses, hysteresis, load_pose_log, translation_inf
from geocon_torch.gate.decision import CODE, codes_to_names, threshold_decision
from geocon_torch.synth import MOTIONS, grounded_clip
from helpers import adjacent, pose


def test_translation_inf_closed_form():
    rel = torch.from_numpy(np.stack([pose([0.01, -0.07, 0.02], 10), pose([0, 0, 0], 30)]))
    assert torch.allclose(translation_inf(rel), torch.tensor([0.07, 0.0], dtype=torch.float64))


@pytest.mark.parametrize("t,expected,eq5", [(0.02, "H", "H"), (0.035, "U", "H"),
                                            (0.045, "U", "F"), (0.06, "F", "F"),
                                            (0.03, "H", "H"), (0.05, "F", "F")])
def test_clip_gate_bands(t, expected, eq5):
    d = gate_from_poses(pose([0.0, -t, 0.0], 5.0), adjacent(5), 5, GateConfig())
    assert d.decision == expected and d.statistic == pytest.approx(t)
    assert d.evidence["eq5_decision"] == eq5 and d.method == "poses"
    assert d.thresholds == {"tau_t": 0.04, "low": 0.03, "high": 0.05}


def test_missing_pose_policies():
    nan = np.full((4, 4), np.nan)
    d = gate_from_poses(nan, adjacent(4), 4, GateConfig(missing_pose="fail_to_F"))
    assert d.decision == "F" and d.statistic is None and "fail_to_F" in d.evidence["why"]
    d = gate_from_poses(nan, adjacent(4), 4, GateConfig(missing_pose="present_only"))
    assert d.decision is None and "present_only" in d.evidence["why"]
    with pytest.raises(GeoConError, match="missing_pose"):
        gate_from_poses(nan, adjacent(4), 4, GateConfig(missing_pose="drop"))


def test_hysteresis_keeps_previous_inside_band():
    s = torch.tensor([0.04, 0.01, 0.04, 0.045, 0.07, 0.035, 0.02, 0.04])
    got = codes_to_names(hysteresis(s, 0.03, 0.05))
    assert got == ["U", "H", "H", "H", "F", "F", "H", "H"]
    present = torch.tensor([True, True, True, False, True, True, True, True])
    got = codes_to_names(hysteresis(s, 0.03, 0.05, present=present))
    assert got == ["U", "H", "H", None, "F", "F", "H", "H"]


def test_missing_pair_does_not_change_the_carried_state():
    """A missing pair gets code -1 and the next in-band pair carries the state of the last
    *present* decided pair, whatever value the missing pair's statistic holds (here decided
    ones: 0.0 would be H, 0.09 F; with ``present_only`` a missing pose reads as zeros)."""
    s = torch.tensor([0.1, 0.0, 0.04, 0.01, 0.09, 0.035, 0.0, 0.04], dtype=torch.float64)
    present = torch.tensor([True, False, True, True, False, True, False, True])
    got = codes_to_names(hysteresis(s, 0.03, 0.05, present=present))
    assert got == ["F", None, "F", "H", None, "H", None, "H"]
    # before any present decided pair: the initial state, also after a decided missing one
    got = codes_to_names(hysteresis(s[1:3], 0.03, 0.05, present=present[1:3]))
    assert got == [None, "U"]
    # the same through a per-pair pose log: pair 1's pose is missing (t_inf reads 0)
    poses = [pose([0.08, 0, 0]), None, pose([0.04, 0, 0])]
    d = gate_from_poses(poses, adjacent(4), 4,
                        GateConfig(per_pair=True, missing_pose="present_only"))
    assert d.per_pair == ["F", None, "F"]


def test_hysteresis_matches_sequential_loop():
    g = torch.Generator().manual_seed(0)
    s = torch.rand(200, generator=g) * 0.08
    present = torch.rand(200, generator=g) > 0.1
    state, want = CODE["U"], []
    for v, p in zip(s.tolist(), present.tolist()):
        if not p:
            want.append(-1)
            continue
        if v <= 0.03:
            state = CODE["H"]
        elif v >= 0.05:
            state = CODE["F"]
        want.append(state)
    assert hysteresis(s, 0.03, 0.05, present).tolist() == want


def test_per_pair_json_log_fail_to_f_and_present_only(tmp_path):
    poses = [pose([0.01, 0, 0]).tolist(), None, pose([0.08, 0, 0]).tolist(),
             pose([0.04, 0, 0]).tolist()]
    path = tmp_path / "poses.json"
    path.write_text(json.dumps({"poses": poses}))
    d = gate_from_poses(path, adjacent(5), 5, GateConfig(per_pair=True))
    # missing pair -> F (inf), pair 3 inside the band keeps F from pair 2
    assert d.per_pair == ["H", "F", "F", "F"]
    assert d.evidence["pairs_missing"] == 1
    # first/last composed from the adjacent poses fails (one missing) -> fail_to_F
    assert d.decision == "F" and d.statistic is None
    d = gate_from_poses(path, adjacent(5), 5,
                        GateConfig(per_pair=True, missing_pose="present_only"))
    assert d.per_pair == ["H", None, "F", "F"] and d.decision == "F"


def test_npz_first_last_and_absolute(tmp_path):
    p1 = tmp_path / "rel.npz"
    np.savez(p1, relative_pose=pose([0.0, 0.0, 0.02]))
    assert gate_from_poses(p1, adjacent(3), 3, GateConfig()).decision == "H"
    # world-to-camera poses of a camera moving 0.03 per frame along x: first/last t = 0.09
    absolute = np.stack([pose([-0.03 * k, 0, 0]) for k in range(4)])
    p2 = tmp_path / "abs.npz"
    np.savez(p2, absolute_poses=absolute)
    d = gate_from_poses(p2, adjacent(4), 4, GateConfig(per_pair=True))
    assert d.statistic == pytest.approx(0.09) and d.decision == "F"
    assert d.evidence["pair_t_inf"] == pytest.approx([0.03] * 3)
    assert d.per_pair == ["H", "H", "H"]


def test_composed_adjacent_chain_and_pairs_field():
    rel = np.stack([pose([0.01, 0, 0]), pose([0.015, 0, 0])])
    log = load_pose_log({"poses": rel, "pairs": [[0, 1], [1, 2]]})
    first_last, ok = log.first_last(2)  # frames 0 -> 2
    assert ok and first_last[0, 3].item() == pytest.approx(0.025)


def test_pose_logs_are_read_at_the_videos_frame_numbers():
    """A per-frame log indexes the video's frames: with a stride of 2 the clip's positions
    0..5 are frames 0, 2, .., 10 (it used to read log entries 0..5); a per-pair gate whose
    pairs are mostly excluded decides on the decided ones (they used to count as H votes)."""
    t = [pose([0.01 * k, 0.0, 0.0]) for k in range(11)]  # camera moving 0.01 per frame
    src = torch.arange(0, 11, 2)
    pairs = torch.stack([torch.arange(5), torch.arange(1, 6)], 1)  # clip positions
    log = {"absolute_poses": np.stack(t)}
    d = gate_from_poses(log, pairs, 6, GateConfig(), frame_indices=src)
    assert d.evidence["t_inf"] == pytest.approx(0.10)  # frames 0 -> 10
    naive = gate_from_poses(log, pairs, 6, GateConfig())
    assert naive.evidence["t_inf"] == pytest.approx(0.05)  # positions taken as frames


def test_adjacent_log_without_pairs_serves_capped_and_strided_clips():
    """A log of the video's adjacent poses without a ``pairs`` field (0.001 per frame, 10
    frames) reads the first/last pose of a clip that keeps fewer frames (a frame cap, a stride)
    by composing them; it used to be "missing" and so silently F."""
    log = {"poses": [pose([0.001, 0.0, 0.0]) for _ in range(9)]}
    for src, t_inf in ((torch.arange(10), 0.009), (torch.arange(5), 0.004),
                       (torch.arange(0, 10, 2), 0.008)):
        n = int(src.numel())
        d = gate_from_poses(log, adjacent(n), n, GateConfig(), frame_indices=src)
        assert d.evidence["first_last_present"] and d.decision == "H"
        assert d.statistic == pytest.approx(t_inf)
    strided = gate_from_poses(log, adjacent(5), 5, GateConfig(per_pair=True),
                              frame_indices=torch.arange(0, 10, 2))
    assert strided.evidence["pair_t_inf"] == pytest.approx([0.002] * 4)
    past = gate_from_poses({"poses": [pose([0.001, 0.0, 0.0])] * 3}, adjacent(5), 5,
                           GateConfig(per_pair=True, missing_pose="present_only"))
    assert past.per_pair == ["H", "H", "H", None]  # (3, 4) is past the log's end


def test_missing_first_last_pose_with_per_pair_says_the_majority_decides():
    """With ``per_pair`` a missing first/last pose is replaced by the decided pairs' majority,
    and the evidence says so (it used to say "treated as F" / "clip excluded")."""
    rel = [pose([0.001, 0.0, 0.0])] * 3
    log = {"poses": rel, "pairs": [[0, 1], [1, 2], [2, 3]]}  # no (0, 4) and no (3, 4)
    for policy in ("fail_to_F", "present_only"):
        d = gate_from_poses(log, adjacent(5), 5, GateConfig(per_pair=True, missing_pose=policy))
        assert not d.evidence["first_last_present"] and d.decision == "H"
        assert "per-pair majority" in d.evidence["why"]
    plain = gate_from_poses(log, adjacent(5), 5, GateConfig())
    assert plain.decision == "F" and "fail_to_F" in plain.evidence["why"]


def test_bad_logs(tmp_path):
    with pytest.raises(GeoConError, match="not found"):
        load_pose_log(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{oops")
    with pytest.raises(GeoConError, match="not valid JSON"):
        load_pose_log(bad)
    with pytest.raises(GeoConError, match="none of the keys"):
        load_pose_log({"foo": 1})
    with pytest.raises(GeoConError, match="shape|poses must be"):
        load_pose_log(np.zeros((2, 5, 5)))


GROUNDED = [(cat, motion) for cat, motions in MOTIONS.items() for motion in motions]


@pytest.fixture(scope="module")
def grounded_poses():
    """True world-to-camera poses (T, 4, 4) and the mean depth of frames 0 / T-1 of every
    category and motion (tiny renders: only the camera path and depth are used)."""
    out = {}
    for cat, motion in GROUNDED:
        clip = grounded_clip(cat, motion=motion, num_frames=12, size=(48, 64))
        d = clip.depth[[0, -1]]
        out[cat, motion] = (clip.poses, float(d[torch.isfinite(d)].mean()))
    return out


@pytest.mark.parametrize("cat,motion", GROUNDED, ids=[f"{c}-{m}" for c, m in GROUNDED])
def test_pose_log_gate_on_grounded_true_poses(tmp_path, grounded_poses, cat, motion):
    """The pose-log gate on each grounded clip's true camera path decides the category's regime,
    in world units and in DUSt3R's unit-scale normalisation (translation / mean scene depth),
    with the clip gate and the per-pair gate, read back from an .npz pose log."""
    poses, depth = grounded_poses[cat, motion]
    t = poses.shape[0]
    path = tmp_path / "poses.npz"
    np.savez(path, absolute_poses=poses.numpy())
    want = EXPECTED_REGIME[cat]
    d = gate_from_poses(path, adjacent(t), t, GateConfig())
    assert d.decision == want, (cat, motion, d.statistic)
    assert d.evidence["eq5_decision"] == want
    unit = poses.clone()
    unit[:, :3, 3] /= depth  # DUSt3R-like scale: the scene's mean depth is 1
    first_last = unit[-1] @ torch.linalg.inv(unit[0])
    d_unit = gate_from_poses(first_last, adjacent(t), t, GateConfig())
    assert d_unit.decision == want, (cat, motion, d_unit.statistic)
    assert d_unit.statistic == pytest.approx(float(translation_inf(first_last)))
    if want == "H":  # a fixed camera centre: no translation at all
        assert d.statistic == pytest.approx(0.0, abs=1e-9)
        per_pair = gate_from_poses(path, adjacent(t), t, GateConfig(per_pair=True)).per_pair
        assert per_pair == ["H"] * (t - 1)


def test_per_pair_regime_counts_only_decided_pairs():
    """A per-pair gate with 6 of 11 pairs excluded (present_only) and the other 5 F: the clip
    regime is F (the excluded pairs used to count as H votes and made it H)."""
    from geocon_torch.config import GeoConConfig
    from geocon_torch.gate.decision import GateDecision
    from geocon_torch.gate.select import pair_models

    gate = GateDecision("poses", 0.06, {}, None, [None] * 6 + ["F"] * 5, {})
    cfg = GeoConConfig.from_dict({"gate": {"per_pair": True, "missing_pose": "present_only"}})
    zero = torch.zeros(11, dtype=torch.float64)
    regime, use_f, present = pair_models(gate, cfg, zero, zero, 0.0, 1)
    assert regime == "F" and present.tolist() == [False] * 6 + [True] * 5
    assert use_f[6:].all()


@pytest.mark.parametrize("codes, gric, want", [
    (["F", "H", None, "F", "H"], [0.0] * 5, "F"),  # 2 F of 4 decided: half is enough
    (["U", "H"], [1.0, 0.0], "F"),  # U resolved F by GRIC: 1 of 2
    (["U", "H", "H"], [1.0, 0.0, 0.0], "H"),  # 1 of 3
    (["U", "H"], [-1.0, 0.0], "H"),  # U resolved H: 0 of 2
])
def test_per_pair_regime_is_f_from_half_the_decided_pairs(codes, gric, want):
    """pair_models: the per-pair clip regime is F when at least half of the decided pairs use
    F (U resolved per pair by GRIC), so a tie is F."""
    from geocon_torch.config import GeoConConfig
    from geocon_torch.gate.decision import GateDecision
    from geocon_torch.gate.select import pair_models

    gate = GateDecision("poses", 0.06, {}, None, codes, {})
    cfg = GeoConConfig.from_dict({"gate": {"per_pair": True}})
    delta = torch.tensor(gric, dtype=torch.float64)
    regime, use_f, _ = pair_models(gate, cfg, delta, torch.zeros_like(delta), 0.0, 2)
    assert regime == want
    votes = [c == "F" or (c == "U" and g > 0) for c, g in zip(codes, gric)]
    assert use_f.tolist() == votes * 2


def test_malformed_pose_content_is_a_clear_error():
    """Zeroed / scaled rotations, ragged or text entries and a 'valid' of the wrong length are
    errors naming the problem (they used to pass as H / F decisions or raw tracebacks)."""
    zeroed = pose([0.05, 0.0, 0.0])
    zeroed[:3, :3] = 0.0
    with pytest.raises(GeoConError, match="pose 0 is not a rigid transform"):
        load_pose_log({"relative_pose": zeroed})
    with pytest.raises(GeoConError, match="pose 1 is not a rigid transform"):
        load_pose_log({"absolute_poses": np.stack([pose([0, 0, 0]), 2 * pose([0, 0, 0])])})
    with pytest.raises(GeoConError, match="must be numbers"):
        load_pose_log({"relative_pose": [[1, 0, 0, 0], [0, 1, 0]]})
    with pytest.raises(GeoConError, match="'valid' has 3 entries for 2 poses"):
        load_pose_log({"poses": np.stack([pose([0, 0, 0])] * 2), "valid": [1, 1, 0]})
    assert load_pose_log({"relative_pose": pose([0.01, 0, 0], 20.0)}).relative.shape == (1, 4, 4)


def test_a_collapsed_band_is_the_papers_binary_eq5():
    """Paper audit s32 F3: with low = high = tau_t the regime is eq. 5's, H iff t_inf <= tau_t
    (F won at t_inf = tau_t, the result's own eq5_decision saying H); tau_t alone moves no
    regime (recorded only)."""
    def along_x(t: float) -> torch.Tensor:
        p = torch.eye(4, dtype=torch.float64)
        p[0, 3] = t
        return p
    one = torch.tensor([[0, 1]])
    binary = GateConfig(hysteresis_low=0.04, hysteresis_high=0.04)
    for t, want in ((0.04, "H"), (0.0400001, "F"), (0.0399999, "H")):
        d = gate_from_poses(along_x(t), one, 2, binary)
        assert (d.decision, d.evidence["eq5_decision"]) == (want, want), t
    d = gate_from_poses(along_x(0.07), one, 2, GateConfig(tau_t=0.10))
    assert (d.decision, d.evidence["eq5_decision"]) == ("F", "H")
    s = torch.tensor([0.02, 0.04, 0.06], dtype=torch.float64)
    assert codes_to_names(threshold_decision(s, 0.04, 0.04)) == ["H", "H", "F"]
    assert codes_to_names(hysteresis(s, 0.04, 0.04)) == ["H", "H", "F"]
