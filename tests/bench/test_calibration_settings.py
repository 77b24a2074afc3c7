"""The calibration family's further settings (sizes, lengths, letterbox, camera speed) and the
parallax bound in a fit, on rows that need no scoring."""
from __future__ import annotations

import argparse

import pytest
import torch

from geocon_torch.bench.calibration import (
    CalibrationPlan,
    calibration_row,
    fit_regime,
    row_checks,
    scene_clips,
    verdict,
)
from geocon_torch.commands.calibrate import _setting
from geocon_torch.synth import render_scene


def test_settings_render_every_scene_at_each_size_length_and_letterbox():
    plan = CalibrationPlan(frames=3, size=(48, 64), seeds=(0,), categories=("C1", "C3"),
                           corruptions=("breathing",), severities=(1.0,),
                           settings=({"size": [40, 56], "frames": 2, "seeds": [5],
                                      "letterbox": 6, "rate": 2.0},))
    got = [(lb[0]["category"], lb[0]["motion"], lb[0]["seed"], tuple(f.shape), lb[0]["rate"])
           for lb, fr in scene_clips(plan) for f in fr[:1]]
    assert got == [("C1", "static", 0, (3, 3, 48, 64), 1.0),
                   ("C3", "truck", 0, (3, 3, 48, 64), 1.0),
                   ("C3", "dolly", 0, (3, 3, 48, 64), 1.0),
                   ("C1", "static", 5, (2, 3, 52, 56), 2.0),
                   ("C3", "truck", 5, (2, 3, 52, 56), 2.0),
                   ("C3", "dolly", 5, (2, 3, 52, 56), 2.0)]
    labels, frames = list(scene_clips(plan))[-1]
    assert [lb["corruption"] for lb in labels] == [None, "breathing"]
    # black bars of 6 rows above and below the content, on the corrupted clip too
    assert int(frames[1][:, :, :6].max()) == 0 and int(frames[1][:, :, -6:].max()) == 0
    assert int(frames[1][:, :, 6:-6].max()) > 0


def test_rate_scales_the_scene_camera_speed():
    plan = CalibrationPlan(frames=3, size=(48, 64), seeds=(0,), categories=("C3",),
                           corruptions=(), severities=(),
                           settings=({"size": [48, 64], "frames": 3, "seeds": [0],
                                      "rate": 3.0},))
    clips = [(lb[0], fr[0]) for lb, fr in scene_clips(plan)]
    assert [(lb["motion"], lb["rate"]) for lb, _ in clips] == [
        ("truck", 1.0), ("dolly", 1.0), ("truck", 3.0), ("dolly", 3.0)]
    # the default truck speed 0.06 world units / frame, x 3
    fast = render_scene("C3", motion="truck", num_frames=3, size=(48, 64), seed=0, speed=0.18)
    assert torch.equal(clips[2][1], fast.frames)
    assert not torch.equal(clips[0][1], fast.frames)


def test_setting_option_parses_and_rejects():
    st = _setting("384x288x16:lb24:rate1.5:seeds4-6")
    assert st == {"size": [288, 384], "frames": 16, "seeds": [4, 5, 6], "letterbox": 24,
                  "rate": 1.5}
    assert _setting("320x240x12")["seeds"] is None
    for bad in ("320x240", "320x240x12:fast", "8x8x4", "320x240x1"):
        with pytest.raises(argparse.ArgumentTypeError):
            _setting(bad)


def _rows(parallax, corruption):
    return [{"status": "ok", "regime": "F", "ir": 1.0, "ge_px": 0.02, "ge_norm": 0.08,
             "long_side": 256, "ge_fine_norm": 0.08, "ge_peak_norm": 0.1,
             "ge_spread_norm": 0.02, "parallax_ref": p, "corruption": corruption,
             "severity": 1.0 if corruption else 0.0} for p in parallax]


def test_fit_puts_the_parallax_bound_between_breathing_and_real_parallax():
    # same GE everywhere: only the parallax separates clean translating clips (70-95 reference
    # px) from breathing clips that GRIC gated F (3.5-7 px)
    clean, bad = _rows([70.0, 82.0, 95.0], None), _rows([3.5, 5.0, 7.0], "breathing")
    th = fit_regime(clean, bad, "F", 0.05)
    assert th["parallax_ref_min"] == pytest.approx(38.5)  # half way from 7 to 70
    assert th["true_pass"] == 1.0 and th["false_pass"] == 0.0
    th = {"F": th}
    assert [verdict(r, th) for r in clean + bad] == [True] * 3 + [False] * 3
    failed = [c.key for c in row_checks(bad[0], th) if not c.passed]
    assert failed == ["parallax_ref_min"]
    assert torch.isfinite(torch.tensor(th["F"]["ge_norm_max"]))


def test_fixed_bound_is_kept_and_the_rest_fitted_on_what_it_lets_through():
    clean = _rows([70.0, 82.0, 12.0], None)  # one clean clip below the fixed bound fails
    bad = _rows([3.5, 5.0, 30.0], "background_slide")
    bad[2].update(ge_norm=0.5, ge_fine_norm=0.5)  # a slide with parallax: only GE rejects it
    th = fit_regime(clean, bad, "F", 0.05, fixed={"parallax_ref_min": 16.0})
    assert th["parallax_ref_min"] == 16.0 and list(th)[4] == "parallax_ref_min"
    assert th["true_pass"] == pytest.approx(2 / 3) and th["false_pass"] == 0.0
    assert 0.08 <= th["ge_norm_max"] < 0.5


def _result(block_parallax, gate_magnitude):
    ev = {} if gate_magnitude is None else {"magnitude_ref_px": gate_magnitude}
    bg = {"ir": 1.0, "ge_px": 0.05, "ge_fine_px": 0.04, "ge_peak_px": 0.06}
    if block_parallax is not None:
        bg["parallax_ref"] = block_parallax
    return {"status": "ok", "regime": "F", "working_size": [192, 256], "background": bg,
            "gate": {"method": "parallax", "decision": "F", "evidence": ev}}


def test_row_takes_the_gate_parallax_when_the_block_has_none():
    # scored with the calibration off (every calibration clip): the block has no parallax_ref,
    # the gate evidence has the same number
    label = {"corruption": None, "severity": 0.0}
    row = calibration_row(label, _result(None, 75.25))
    assert row["parallax_ref"] == 75.25
    assert row["ge_norm"] == pytest.approx(0.05 * 1024 / 256)
    # the block's value wins when both are there; neither: None (no bound applies)
    assert calibration_row(label, _result(12.5, 75.25))["parallax_ref"] == 12.5
    assert calibration_row(label, _result(None, None))["parallax_ref"] is None
    # a breathing clip gated F at 5 reference px now fails a parallax bound of 16
    bad = dict(calibration_row({"corruption": "breathing", "severity": 1.0},
                               _result(None, 5.0)))
    th = {"F": {"ir_min": 0.9, "ge_norm_max": 1.0, "parallax_ref_min": 16.0}}
    assert verdict(row, th) is True and verdict(bad, th) is False


def test_a_missing_statistic_is_never_the_bound_and_a_reject_all_gate_warns():
    """Clean clips without a parallax value (read as +inf: meets every lower bound) were the
    only ones above an +inf candidate: the fit chose it, the written file dropped it (not a
    finite number) and the gate then passed every corrupted clip although the fit recorded
    false-pass 0. Now no bound is infinite, the recorded rates are what the written gate does,
    and a gate that passes no clean clip says so."""
    from geocon_torch.bench.calibration import evaluate

    clean, bad = _rows([None, None, 10.0], None), _rows([30.0, 40.0, 50.0], "breathing")
    with pytest.warns(UserWarning, match="no F bounds pass a clean clip"):
        th = {"F": fit_regime(clean, bad, "F", 0.05)}
    ev = evaluate(clean + bad, th)
    assert (ev["true_pass"], ev["false_pass"]) == (th["F"]["true_pass"], th["F"]["false_pass"])
    assert all(v == v and abs(v) != float("inf") for k, v in th["F"].items()
               if k.endswith(("_min", "_max")))


def test_non_finite_rows_are_left_out_and_a_fixed_ir_bound_is_kept():
    from geocon_torch.bench.calibration import fit_thresholds

    clean, bad = _rows([70.0, 82.0, 95.0], None), _rows([3.5, 5.0, 7.0], "breathing")
    nan = dict(clean[0], ir=float("nan"), clip="nan-clip")
    with pytest.warns(UserWarning, match="non-finite IR or GE left out .*nan-clip"):
        th = fit_thresholds(clean + bad + [nan], 0.05)
    assert th["F"]["n_clean"] == 3 and th["F"]["ir_min"] == th["F"]["ir_min"]
    fixed = fit_regime(clean, bad, "F", 0.05, fixed={"ir_min": 0.99})
    assert fixed["ir_min"] == 0.99  # was relaxed to 0.97 after being set


def test_calibrate_checks_severities_before_scoring():
    from geocon_torch.cli import build_parser
    from geocon_torch.commands.calibrate import plan_from_args

    parser = build_parser()
    for bad in ("1.5", "nan", "0", "0.25"):  # 0.25 < --min-severity 0.5: nothing to fit
        args = parser.parse_args(["calibrate", "out", "--severities", bad])
        with pytest.raises(argparse.ArgumentTypeError, match="severities"):
            plan_from_args(args)
    ok = plan_from_args(parser.parse_args(["calibrate", "out", "--severities", "0.5,1"]))
    assert ok.severities == (0.5, 1.0)
