"""The motion masks' preliminary regimes of a batch of clips (issue 21): one statistic call and
one gate decision for all clips, each clip's regime and seed residuals the same as alone (bit for
bit on the CPU) and the same as the one-clip route (gate_source + gate_from_parallax)."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.config import GeoConConfig
from geocon_torch.gate import GateDecision
from geocon_torch.gate.parallax import gate_from_parallax, parallax_statistics
from geocon_torch.gate.select import gate_source, preliminary_regime, preliminary_regimes
from geocon_torch.geometry import fundamental_residuals, homography_residuals
from geocon_torch.geometry._synthetic import fundamental_pairs, homography_pairs
from geocon_torch.sections.fits import fit_both

CFG = GeoConConfig()


def _clip(kind: str, rows: int, n: int, seed: int, evaluated: int, gate_pairs=None, ext=None,
          side=None):
    make = fundamental_pairs if kind == "F" else homography_pairs
    d = make(rows, n, outlier_ratio=0.2, noise_px=0.3, seed=seed, size=(480, 640))
    x1, x2 = d["x1"].float(), d["x2"].float()
    mask = torch.ones(rows, n, dtype=torch.bool)
    mask[0, n - n // 4:] = False  # a shorter row: padding inside the clip too
    scores = torch.rand(rows, n, generator=torch.Generator().manual_seed(seed))
    fits = fit_both(x1, x2, mask, scores, CFG)
    return dict(fits=fits, x1=x1, x2=x2, mask=mask, p=evaluated, ext=ext, side=side,
                gp=gate_pairs)


def _reference(c) -> str:
    """The one-clip route: parallax_statistics, gate_source, gate_from_parallax."""
    if c["ext"] is not None and c["ext"].decision in ("H", "F"):
        return c["ext"].decision
    bc = CFG.background
    stats = parallax_statistics(*c["fits"], c["x1"], c["x2"], c["mask"], tau_h=bc.tau_h,
                                tau_f=bc.tau_f, min_inliers=bc.min_inliers,
                                long_side_px=c["side"], gate=CFG.gate)
    rows = torch.arange(c["x1"].shape[0])
    pre = gate_from_parallax(gate_source(stats, rows[:c["p"]], rows[c["p"]:], c["gp"])[0],
                             CFG.gate)
    return pre.decision if pre.decision != "U" else pre.evidence.get("u_resolved")


def _batch(clips):
    return preliminary_regimes([c["fits"] for c in clips], [c["x1"] for c in clips],
                               [c["x2"] for c in clips], [c["mask"] for c in clips],
                               [c["p"] for c in clips], [c["ext"] for c in clips], CFG,
                               long_side_px=[c["side"] for c in clips],
                               gate_pairs=[c["gp"] for c in clips])


@pytest.fixture(scope="module")
def clips():
    return [
        _clip("F", 5, 120, 1, 3, gate_pairs=torch.tensor([[0, 7], [2, 5]]), side=640.0),
        _clip("H", 4, 80, 2, 4, side=torch.full((4,), 640.0)),
        _clip("F", 3, 60, 3, 3, ext=GateDecision("poses", None, {}, "H")),  # external H wins
        _clip("H", 3, 100, 4, 2, gate_pairs=torch.tensor([[0, 3]]),
              ext=GateDecision("poses", 0.5, {}, "U")),  # undecided: the statistic decides
    ]


def test_batch_regimes_equal_each_clip_alone_and_the_one_clip_route(clips):
    regimes, residuals = _batch(clips)
    assert regimes == ["F", "H", "H", "H"]
    assert regimes == [_reference(c) for c in clips]
    for c, regime, res in zip(clips, regimes, residuals):
        alone, alone_res = _batch([c])
        assert alone == [regime]
        assert preliminary_regime(c["fits"], c["x1"], c["x2"], c["mask"], c["p"], c["ext"], CFG,
                                  long_side_px=c["side"], gate_pairs=c["gp"]) == regime
        p = c["p"]
        fit_h, fit_f = c["fits"]
        want = (fundamental_residuals(fit_f, c["x1"], c["x2"], c["mask"])[0] if regime == "F"
                else homography_residuals(fit_h, c["x1"], c["x2"]))[:p]
        if c["ext"] is not None and c["ext"].decision == "H":
            assert res is None and alone_res[0] is None  # nothing computed for it
            continue
        assert res.shape == (p, c["x1"].shape[1])
        assert torch.equal(res, alone_res[0]) and torch.equal(res, want)


def test_an_external_decision_alone_computes_nothing(clips):
    assert _batch([clips[2]]) == (["H"], [None])


def test_no_valid_row_leaves_the_regime_undecided(clips):
    c = dict(clips[1], mask=torch.zeros_like(clips[1]["mask"]))  # no match: no F-inlier
    regimes, residuals = _batch([clips[0], c])
    assert regimes == ["F", None] and _reference(c) is None
    assert residuals[1].shape == (4, 80)  # H residuals: the seeds' default model
