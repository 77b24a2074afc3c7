"""The weight-free gate on long shots (scaling audit, finding 5): the widest gate pairs of a long
translating shot can share one plane only (the back wall), which a homography explains, while
a narrower tier (the halves, the quarters), sharing more of the scene, sees the parallax. So a
narrower tier that decides F makes the clip F when the widest valid tier does not and shares at
most OVERLAP_RATIO (0.8) of its F-inliers; when the wide pairs see as much of the scene (a
non-rigid corruption: breathing whose phase repeats), the widest tier decides as before, and a
clip whose tiers never show F keeps its decision exactly."""
from __future__ import annotations

from typing import Dict, List, Tuple

import pytest
import torch

from geocon_torch.config import GeoConConfig
from geocon_torch.gate.select import GateRows, decide_gates, gate_source
from geocon_torch.io.pairs import gate_pair_tiers, parallax_gate_pairs

CFG = GeoConConfig()
GATE_PAIRS = parallax_gate_pairs(48).tolist()  # 9 wide pairs, 2 halves, 4 quarters
TIERS = gate_pair_tiers(GATE_PAIRS)
EVALUATED = 5  # rows 0..4: evaluated (adjacent) pairs; then the 15 gate rows

#: per tier (value, lower, upper) reference px: H (inside the H bound 3), F (lower bound >= 16),
#: U (interval straddling the band)
H, F, U = (0.8, 0.6, 1.4), (90.0, 50.0, 250.0), (10.0, 2.0, 60.0)


def _stats(wide, halves, quarters, evaluated=U, valid_tiers=(0, 1, 2),
           support=(100, 180, 300)) -> Dict[str, torch.Tensor]:
    """Parallax statistics of 5 evaluated rows and the 15 gate rows of a 48-frame clip, every
    row of a tier with the tier's (value, lower, upper) and F-inlier count ``support`` (as
    measured on C3 truck at 48 frames: the wide pairs share about half of the halves' matches);
    noise 0.3 ref px."""
    by_tier = (wide, halves, quarters)
    rows = [evaluated] * EVALUATED + [by_tier[t] for t in TIERS]
    value, lo, hi = (torch.tensor([r[i] for r in rows], dtype=torch.float64) for i in range(3))
    valid = torch.tensor([True] * EVALUATED + [t in valid_tiers for t in TIERS])
    n = len(rows)
    return {"parallax_magnitude": value, "parallax_magnitude_lo": lo,
            "parallax_magnitude_hi": hi, "noise_ref_px": torch.full((n,), 0.3, dtype=torch.float64),
            "gric_delta": torch.full((n,), -0.5, dtype=torch.float64),
            "num_f_inliers": torch.tensor([400] * EVALUATED + [support[t] for t in TIERS]),
            "valid": valid}


def _decide(stats: Dict[str, torch.Tensor]):
    rows = GateRows(list(range(EVALUATED)), list(range(EVALUATED, EVALUATED + 15)), GATE_PAIRS)
    return decide_gates(stats, [rows], CFG)[0][0]


def _pairs_of(tier: int) -> List[List[int]]:
    return [p for p, t in zip(GATE_PAIRS, TIERS) if t == tier]


@pytest.mark.parametrize("wide, halves, quarters, was, read", [
    (H, F, F, "H", 1),  # C3 truck, 48 frames, seed 1: the wide pairs see the back wall only
    (H, H, F, "H", 2),  # seed 2: the halves too
    (U, F, F, "U", 1),  # seed 0 at 64 frames (preliminary regime): U resolved H by GRIC before
])
def test_a_narrower_tier_that_decides_f_makes_the_clip_f(wide, halves, quarters, was, read):
    gate = _decide(_stats(wide, halves, quarters))
    assert gate.decision == "F"
    assert gate.evidence["gate_pairs"] == _pairs_of(read)
    assert gate.evidence["magnitude_ref_px"] == F[0]
    wider = gate.evidence["wider_tier"]
    assert wider["decision"] == was and wider["gate_pairs"] == _pairs_of(0)
    assert wider["magnitude_ref_px"] == wide[0]
    assert wider["f_inlier_ratio"] == pytest.approx(100 / (180, 300)[read - 1])
    assert "show parallax above the F band" in gate.evidence["why_f"]


@pytest.mark.parametrize("support, want, read", [
    ((100, 100, 100), "H", 0),  # the wide pairs see as much: non-rigid (breathing), not parallax
    ((100, 120, 300), "F", 2),  # the halves share too little more (0.83 > 0.8): the quarters
    ((100, 125, 125), "F", 1),  # 0.8 exactly: the halves overrule
])
def test_a_narrower_f_overrules_only_pairs_that_share_less_of_the_scene(support, want, read):
    gate = _decide(_stats(H, F, F, support=support))
    assert gate.decision == want and gate.evidence["gate_pairs"] == _pairs_of(read)
    assert ("wider_tier" in gate.evidence) == (want == "F")


@pytest.mark.parametrize("wide, halves, quarters, want", [
    (H, H, H, "H"),  # a rotating or static camera: H at every baseline
    (H, U, U, "H"),  # narrower tiers that cannot decide do not overrule the wide H
    (U, H, H, "U"),  # H at a shorter baseline is no evidence: U stays U (GRIC resolves it)
    (F, H, H, "F"),  # the wide pairs decide F: unchanged
])
def test_without_a_narrower_f_the_widest_tier_decides_as_before(wide, halves, quarters, want):
    gate = _decide(_stats(wide, halves, quarters))
    assert gate.decision == want
    assert gate.evidence["gate_pairs"] == _pairs_of(0)
    assert "wider_tier" not in gate.evidence and "why_f" not in gate.evidence


def test_an_f_in_the_evaluated_fallback_or_an_invalid_tier_does_not_count():
    """Only the gate tiers with a valid pair can overrule; the adjacent (evaluated) pairs stay
    the fallback for a clip without any valid gate pair."""
    assert _decide(_stats(H, U, U, evaluated=F)).decision == "H"
    assert _decide(_stats(H, F, F, valid_tiers=(0,))).decision == "H"
    gate = _decide(_stats(H, F, F, evaluated=F, valid_tiers=()))
    assert gate.decision == "F" and gate.evidence["gate_pairs"] == "evaluated pairs"


def test_gate_source_with_a_config_reads_the_tier_the_gate_decides_on():
    """The one-clip route (gate_source) applies the same rule when given the gate config; without
    one it returns the widest valid tier (as before)."""
    stats = _stats(H, H, F)
    rows = torch.arange(EVALUATED + 15)
    gp = torch.tensor(GATE_PAIRS)
    _, used = gate_source(stats, rows[:EVALUATED], rows[EVALUATED:], gp)
    assert used == _pairs_of(0)
    src, used = gate_source(stats, rows[:EVALUATED], rows[EVALUATED:], gp, CFG.gate)
    assert used == _pairs_of(2) and src["parallax_magnitude"].tolist() == [F[0]] * 4
    _, used = gate_source(_stats(H, H, U), rows[:EVALUATED], rows[EVALUATED:], gp, CFG.gate)
    assert used == _pairs_of(0)


def _regime(category: str, num_frames: int, seed: int, size: Tuple[int, int], **kw
            ) -> Tuple[str, str, Dict]:
    from geocon_torch.pipeline import score_clip
    from geocon_torch.synth import render_scene
    clip = render_scene(category, num_frames=num_frames, size=size, seed=seed, **kw)
    d = score_clip(clip.frames, preset="background", device="cpu").to_dict()
    return d["regime"], d["background"]["segment"].get("pre_regime"), d["gate"]["evidence"]


@pytest.mark.slow
def test_grounded_truck_at_48_frames_is_f_and_a_pan_stays_h():
    """C3 truck, 48 frames, seed 2 at 96x128 (the smallest reproducer found: H before, its wide
    pairs' overlap one plane); a C2 pan of the same length stays H."""
    regime, pre, ev = _regime("C3", 48, 2, (96, 128))
    assert (regime, pre) == ("F", "F")
    assert ev["gate_pairs"] == _pairs_of(2)  # the quarters
    assert ev["wider_tier"]["decision"] in ("H", "U")
    assert ev["wider_tier"]["f_inlier_ratio"] <= 0.8
    regime, pre, ev = _regime("C2", 48, 2, (96, 128), motion="pan")
    assert (regime, pre, ev["gate_pairs"]) == ("H", "H", _pairs_of(0))


@pytest.mark.slow
def test_grounded_truck_audit_case_seed_1_at_192x256_is_f():
    """The audit's case: C3 truck, 48 frames, seed 1 at 192x256 was H (score 0.56)."""
    regime, pre, ev = _regime("C3", 48, 1, (192, 256))
    assert (regime, pre) == ("F", "F")
    assert ev["gate_pairs"] == _pairs_of(1)  # the halves (F-inlier ratio 0.57)
    assert ev["wider_tier"]["decision"] in ("H", "U")  # U resolved H before: H regime
