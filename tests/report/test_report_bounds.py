"""The report's verdict text and picks at their boundaries, on hand-made rows with closed-form
answers: ``geocon explain`` at IR == report_ir and GE == report_ge_px, the sensitivity scan's
pass point (IR and GE), failing pairs worst first, outlier quadrants by position and by
over-representation, the pair count of rows without ``scales``, the audit card's pair (lowest
IR) and its masks (frame i), the cards picked (failing first) and the clips not scored."""
from __future__ import annotations

import json

import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.config import GeoConConfig
from geocon_torch.report import PairEvidence, pair_evidence, timeline_series
from geocon_torch.report.audit import _pick_pair
from geocon_torch.report.explain import (explain_result, failing_pairs, outlier_lines,
                                         worst_pair)
from geocon_torch.report.html import _Page, _pick_cards, _problems_section
from geocon_torch.report.text import pair_counts
from geocon_torch.synth import render_scene


def _explain(bg, **res):
    return explain_result({"clip": "c", "status": "ok", "regime": "H", "background": bg, **res},
                          evidence=False)


def test_report_gate_thresholds_are_inclusive():
    """IR 0.97 == report_ir and GE 3.5 == report_ge_px pass, as the paper gate says PASS."""
    text = _explain({"status": "ok", "ir": 0.97, "ge_px": 3.5, "pass": True})
    assert "Report gate (paper): PASS" in text
    assert "  IR 0.9700 >= report_ir 0.97: ok (margin +0.0000)" in text.splitlines()
    assert "  GE 3.5 px <= report_ge_px 3.5: ok (margin +0 px)" in text.splitlines()
    text = _explain({"status": "ok", "ir": 0.9699, "ge_px": 3.6, "pass": False})
    assert "  IR 0.9699 < report_ir 0.97: FAILS (margin -0.0001)" in text.splitlines()


@pytest.mark.parametrize("ge_h_px, line", [
    ([1.0, 5.0, 5.0], "  no tau_H in the sensitivity scan (1, 2, 4) makes the report gate pass."),
    ([1.0, 3.0, 5.0], "  the report gate would pass at tau_H >= 2 px (scan: IR 0.9800, GE 3 px)."),
    ([1.0, 5.0, 2.0], "  the report gate would pass at tau_H >= 4 px (scan: IR 0.9900, GE 2 px)."),
])
def test_scan_pass_point_needs_ir_and_ge(ge_h_px, line):
    """The scan's pass point is the smallest tau_H whose IR >= 0.97 AND GE <= 3.5 px."""
    scan = {"tau_h": [1.0, 2.0, 4.0], "ir_h": [0.9, 0.98, 0.99], "ge_h_px": ge_h_px}
    text = _explain({"status": "ok", "ir": 0.9, "ge_px": 1.0, "pass": False,
                     "sensitivity": scan})
    assert line in text.splitlines()


def _row(k, ir, valid=True, ge=1.0):
    return {"pair": [k, k + 1], "scale": 1.0, "model": "H", "ir_h": ir, "ge_h_px": ge,
            "valid_h": valid}


BG = {"status": "ok", "pairs": 5, "per_pair": [
    _row(0, 0.9), _row(1, 0.0, valid=False), _row(2, 0.5), _row(3, 0.99), _row(4, 0.8),
    dict(_row(0, 0.1), scale=0.5)]}  # a coarser scale: not in the timeline


def test_failing_pairs_worst_first_and_the_cards_pair():
    """Failing finest-scale pairs: the invalid one first, then by IR (0.5, 0.8, 0.9); the audit
    card and explain show the valid pair with the lowest IR (index 2)."""
    bad = failing_pairs(BG, GeoConConfig())
    assert [r["index"] for r in bad] == [1, 2, 4, 0]
    assert [r["why"] for r in bad[:2]] == ["invalid (too few inliers)", "IR 0.5000 < 0.97"]
    assert worst_pair(BG) == 2
    assert _pick_pair(timeline_series(BG), BG["pairs"]) == 2
    invalid_only = {"per_pair": [_row(k, 0.0, valid=False) for k in range(3)]}
    assert _pick_pair(timeline_series(invalid_only), 3) == 1  # none valid: the middle pair


def _evidence(points, outlier):
    """A PairEvidence on a 100 x 200 (H x W) frame with matches at ``points`` (x, y) px."""
    x = torch.tensor(points, dtype=torch.float32)
    eye = torch.eye(3, dtype=torch.float64)
    frame = torch.zeros((3, 100, 200), dtype=torch.uint8)
    inl = ~torch.tensor(outlier)
    return PairEvidence(index=0, pair=(0, 1), scale=1.0, x1=x, x2=x, inliers=inl, model="H",
                        regime="H", ir=float(inl.float().mean()), valid=True, H=eye, F=eye,
                        H_valid=True, F_valid=False, frame1=frame, frame2=frame, objects=None)


def test_outlier_quadrants_by_position():
    """(x, y) = (150, 20) lies top-right of a 200-px wide, 100-px high frame."""
    ev = _evidence([(150, 20), (20, 80), (30, 90), (40, 70)], [True, False, False, False])
    lines = outlier_lines(ev)
    assert lines[1] == ("  outliers by quadrant (frame i): top-left 0% (matches 0%), top-right "
                        "100% (matches 25%), bottom-left 0% (matches 75%), bottom-right 0% "
                        "(matches 0%).")
    assert lines[2] == "  most over-represented: top-right (100% of outliers vs 25% of matches)."


def test_most_over_represented_is_outlier_minus_match_share():
    """3 of 5 outliers top-left (60%, but 80% of the matches), 2 bottom-right (40% vs 20%): the
    over-represented quadrant is bottom-right, not the one holding most outliers."""
    tl, br = [(10 + k, 10) for k in range(8)], [(150, 80), (160, 90)]
    ev = _evidence(tl + br, [True, True, True] + [False] * 5 + [True, True])
    assert outlier_lines(ev)[2] == ("  most over-represented: bottom-right (40% of outliers vs "
                                    "20% of matches).")


def test_pair_counts_of_rows_without_scales():
    """No ``scales`` key: the scale count is per_pair rows / pairs (15 / 5 = 3)."""
    bg = {"valid_pairs": 10, "pairs": 5, "per_pair": [{}] * 15}
    assert pair_counts(bg) == "10 of 15 (pair, scale) entries valid (5 pairs x 3 scales)"
    assert pair_counts(dict(bg, per_pair=[{}] * 5)) == "10 of 5 pairs valid"


def _flat(cid, status="ok", ir=None, passed=None, reason=None):
    return {"clip_id": cid, "generator": "g", "status": status, "ir": ir,
            "background_pass": passed, "ge_px": 1.0, "reason": reason, "warnings": None}


def test_cards_failing_first_and_every_unscored_clip_listed(tmp_path):
    flat = [_flat("pass_low", ir=0.5, passed=True), _flat("fail", ir=0.9, passed=False),
            _flat("pass_high", ir=0.99, passed=True),
            _flat("na", "not_applicable", reason="too little texture"),
            _flat("err", "error", reason="VideoReadError: zero-byte file")]
    assert _pick_cards(flat, 2, None) == ["fail", "pass_low"]
    assert _pick_cards(flat, 5, None) == ["fail", "pass_low", "pass_high", "na", "err"]
    page = _Page(flat=flat, out=tmp_path, img=tmp_path, n_boot=10, seed=0)
    section = _problems_section(page)
    assert "Clips not scored (2)</h2>" in section
    assert "too little texture" in section and "VideoReadError: zero-byte file" in section


def test_card_masks_are_those_of_frame_i(tmp_path):
    """The evidence of pair (1, 2) of a grounded C4 clip scored with its masks file carries the
    object masks of frame 1 (they differ from frame 2's: the object moves)."""
    clip = render_scene("C4", num_frames=3, size=(96, 128), seed=0)
    clip.clip_id = "c4"
    clip.save(tmp_path)
    masks = str(tmp_path / "c4_masks.npz")
    cfg = {"io": {"long_side": 128, "max_frames": 3}}
    res = score_clip(str(tmp_path / "c4.mp4"), masks=masks, preset="background", config=cfg,
                     device="cpu")
    ev = pair_evidence(json.loads(res.to_json()), 1, masks=masks, device="cpu")
    assert ev.pair == (1, 2) and ev.objects is not None
    assert not torch.equal(clip.masks[1], clip.masks[2])
    assert torch.equal(ev.objects, clip.masks[1])
