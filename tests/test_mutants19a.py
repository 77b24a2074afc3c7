"""Mutation gaps of the session-30 fixes (configs and calibrations, audit card, side effects):
repeated JSON keys, the --refit checks of the plan and clips, the pooled-regime reasons, the
calibration file's names and hash, a regime left out, the io flags, the calibrate summary,
the figures without pyplot, the residual denominators and the texture draws."""
from __future__ import annotations

import argparse
import copy
import json
import struct
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Dict, List

import pytest
import torch

from geocon_torch._json import read_json_file
from geocon_torch.bench.calibration import (CalibrationPlan, calibration_document,
                                            fit_thresholds, plot_roc, refit_plan)
from geocon_torch.cli import main
from geocon_torch.commands._common import build_config
from geocon_torch.config import load_config
from geocon_torch.errors import ConfigError, InputError
from geocon_torch.geometry.residuals import _safe_den, transfer_points
from geocon_torch.io.calibration import FORMAT, load_calibration, pin_calibration
from geocon_torch.sections.background import _calibrated
from geocon_torch.synth.textures import _rand
from helpers import toy_calibration_rows

TH = {"ir_min": 0.97, "ge_norm_max": 1.0}


def _write(path: Path, doc: Any) -> Path:
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _rows(regimes: str = "HF") -> List[Dict[str, Any]]:
    return toy_calibration_rows(regimes, size=[192, 256], frames=2, letterbox=0, rate=1.0)


def _doc(regimes: str = "HF") -> Dict[str, Any]:
    plan = CalibrationPlan(frames=2, size=(192, 256), seeds=(0,), categories=("C1",),
                           corruptions=("rubber_sheet",), severities=(0.25, 0.5, 1.0))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return calibration_document(plan, _rows(regimes))


def _png_size(path: Path) -> tuple:
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


# _json.read_json_file ------------------------------------------------------------------------

def test_repeated_key_error_names_the_first_key_seen_again(tmp_path: Path):
    p = _write(tmp_path / "d.json", '{"a": 1, "b": 2, "a": 3, "c": 4}')
    with pytest.raises(InputError, match=r"d.json: key 'a' given twice in one object"):
        read_json_file(p, "x")
    p = _write(tmp_path / "e.json", '{"z": 0, "b": 2, "c": 3, "b": 4, "z": 5, "d": 6}')
    with pytest.raises(InputError, match=r"e.json: key 'b' given twice"):
        read_json_file(p, "x")


def test_objects_keep_the_files_key_order(tmp_path: Path):
    p = _write(tmp_path / "o.json", '{"b": 1, "a": 2, "c": {"y": 3, "x": 4}}')
    got = read_json_file(p, "x")
    assert list(got) == ["b", "a", "c"] and list(got["c"]) == ["y", "x"]


# bench.calibration.refit_plan ----------------------------------------------------------------

def _plan_with(**kw) -> Dict[str, Any]:
    doc = copy.deepcopy(_doc())
    doc["plan"].update(kw)
    return doc


@pytest.mark.parametrize("change, match", [
    ({"frames": 1}, r"plan\.frames must be an int >= 2, got 1"),
    ({"seeds": []}, r"plan\.seeds must be a non-empty list of ints >= 0, got \[\]"),
    ({"seeds": [True]}, r"plan\.seeds must be a non-empty list"),
    ({"backend": 3}, r"plan\.backend must be a features backend name, got 3"),
    ({"device": 3}, r"plan\.device must be a torch device name, got 3"),
    ({"corruptions": ["bogus"]}, r"plan\.corruptions must be a list of"),
    ({"categories": ["C9"]}, r"plan\.categories must be a list of"),
    ({"severities": [0.5, float("nan")]}, r"plan\.severities must be a non-empty list"),
    ({"severities": ["x"]}, r"plan\.severities must be a non-empty list"),
    ({"fixed_bounds": {"ir_min": float("inf")}}, r"plan\.fixed_bounds must be an object"),
    ({"settings": "x"}, r"plan\.settings must be a list of settings, got 'x'"),
    ({"settings": [{"size": [96, 128], "frames": 1, "seeds": [0]}]},
     r"plan\.settings: a setting needs size \[H, W\] ints >= 1, frames an int >= 2"),
    ({"settings": [{"size": [96, 128], "frames": 2, "seeds": [0], "rate": 0}]},
     r"plan\.settings: a setting needs size .* rate a finite number > 0"),
    ({"settings": [{"size": [96, 128], "frames": 2, "seeds": [0], "rate": float("inf")}]},
     r"plan\.settings: a setting needs size .* rate a finite number > 0"),
    ({"settings": [{"size": [96, 128], "frames": 2}]},
     r"plan\.settings: a setting needs 'size', 'frames', 'seeds'"),
])
def test_refit_names_the_plan_field_that_is_wrong(change, match):
    with pytest.raises(InputError, match=match):
        refit_plan(_plan_with(**change), 0.05, 0.5)


def test_refit_needs_the_plans_categories():
    doc = copy.deepcopy(_doc())
    del doc["plan"]["categories"]
    with pytest.raises(InputError, match=r"the plan lacks 'categories'"):
        refit_plan(doc, 0.05, 0.5)


def test_refit_takes_a_setting_with_rate_and_letterbox_and_a_file_without_format():
    st = {"size": [96, 128], "frames": 3, "seeds": [1, 2], "letterbox": 8, "rate": 2.5}
    plan, rows = refit_plan(_plan_with(settings=[st]), 0.1, 0.25)
    assert plan.settings == (st,) and (plan.target_false_pass, plan.min_severity) == (0.1, 0.25)
    doc = copy.deepcopy(_doc())
    del doc["format"]  # an older file: read as this format
    plan, rows = refit_plan(doc, 0.05, 0.5)
    assert plan.frames == 2 and len(rows) == 40


@pytest.mark.parametrize("k, change", [
    (3, lambda r: r.pop("corruption")),
    (5, lambda r: r.update(severity="x")),
    (0, lambda r: r.update(severity=float("nan"))),
    (7, lambda r: r.pop("severity")),
])
def test_refit_refuses_clips_that_are_not_scored_clips(k, change):
    doc = copy.deepcopy(_doc())
    change(doc["clips"][k])
    with pytest.raises(InputError, match=rf"--refit: clips\[{k}\] is not a scored clip"):
        refit_plan(doc, 0.05, 0.5)


# bench.calibration.fit_thresholds: the pooled reason -----------------------------------------

def test_pooled_reason_of_a_regime_without_clean_clips():
    with pytest.warns(UserWarning):
        th = fit_thresholds(_rows("F"), 0.05, 0.5)
    assert "pooled_reason" not in th["F"] and th["H"]["pooled"] is True
    assert th["H"]["pooled_reason"] == (
        "no clean H clips (10 clean, all gated F; clean: 0 H, 10 F; corrupted: 0 H, 20 F): the "
        "H bounds are fitted on both regimes' clips pooled and may fail most H clips (its "
        "true-pass rate counts F clips); add clips of the categories of regime H (C1, C2, C4)")


def test_pooled_reason_of_a_regime_without_corrupted_clips():
    rows = _rows("H")
    for r in rows[:8]:  # two clean clips gated F, none of their corrupted ones
        if r["corruption"] is None:
            r["regime"] = "F"
    with pytest.warns(UserWarning, match="no corrupted F clips"):
        th = fit_thresholds(rows, 0.05, 0.5)
    assert "pooled_reason" not in th["H"] and th["F"]["pooled"] is True
    assert th["F"]["pooled_reason"] == (
        "no corrupted F clips (20 corrupted, all gated H; clean: 8 H, 2 F; corrupted: 20 H, "
        "0 F): the F bounds are fitted on both regimes' clips pooled and no corrupted F clip "
        "tested them (its false-pass rate counts H clips); add clips of the categories of "
        "regime F (C3, C5, C6)")


def test_roc_figure_size(tmp_path: Path):
    pytest.importorskip("matplotlib")
    curves = {"H": {"rubber_sheet": {"false_pass": [0.0, 0.5, 1.0],
                                     "true_pass": [0.0, 0.8, 1.0]}}}
    th = {"H": {"false_pass": 0.5, "true_pass": 0.8, "ir_min": 0.9, "ge_norm_max": 1.0}}
    (path,) = plot_roc(curves, th, tmp_path)
    assert path.name == "roc_H.png" and _png_size(path) == (450, 400)  # 4.5 x 4 in at 100 dpi


# io.calibration: names and the pinned hash ---------------------------------------------------

def test_regime_with_spaces_is_refused_with_a_suggestion(tmp_path: Path):
    p = _write(tmp_path / "sp.json", {"thresholds": {" H ": TH}})
    with pytest.raises(ConfigError, match=r"regime ' H ' is not one the gate reads \(H, F\): "
                                          r"did you mean 'H'\?"):
        load_calibration(str(p))


def test_record_keys_not_close_to_a_bound_name_are_kept(tmp_path: Path):
    """'ir_mean' / 'ge_norm' are 0.77 / 0.78 alike 'ir_min' / 'ge_norm_max' (difflib): below
    the 0.8 cutoff, so a record, not a misspelt bound."""
    th = dict(TH, ir_mean=0.99, ge_norm=0.2, pooled_reason="why")
    cal = load_calibration(str(_write(tmp_path / "rec.json", {"thresholds": {"H": th}})))
    assert cal.thresholds["H"]["ir_mean"] == 0.99 and cal.thresholds["H"]["ge_norm"] == 0.2
    p = _write(tmp_path / "typo.json", {"thresholds": {"H": dict(TH, ge_norm_mx=0.2)}})
    with pytest.raises(ConfigError, match=r"thresholds\.H\.ge_norm_mx .*did you mean "
                                          r"'ge_norm_max'"):
        load_calibration(str(p))


@pytest.mark.parametrize("bad", ["0" * 17, "0" * 16 + "x", " " + "0" * 16])
def test_calibration_hash_must_be_exactly_16_hex_digits(bad: str):
    for cal in ("default", None):
        cfg = load_config({"background": {"calibration_hash": bad, "calibration": cal}})
        with pytest.raises(ConfigError, match="16 lowercase hex digits"):
            pin_calibration(cfg, "opencv-sift")


# sections.background._calibrated -------------------------------------------------------------

def test_regime_left_out_reason_only_for_scored_clips(tmp_path: Path):
    path = _write(tmp_path / "only_f.json", {"format": FORMAT, "thresholds": {"F": TH}})
    cfg = load_config({"background": {"calibration": str(path)}})

    def run(status: str, regime: str) -> Dict[str, Any]:
        block = {"status": status, "ir": 0.99, "ge_px": 0.1}
        out = SimpleNamespace(backends={"features": "opencv-sift"}, regime=regime, gate=None)
        _calibrated(block, out, 256, cfg)
        return block

    failed = run("failed", "H")
    assert failed["pass_calibrated"] is None and "pass_calibrated_reason" not in failed
    ok_h = run("ok", "H")
    assert ok_h["pass_calibrated"] is None
    assert ok_h["pass_calibrated_reason"] == "calibration only_f.json has no bounds for regime H"
    ok_f = run("ok", "F")
    assert ok_f["pass_calibrated"] is True and "pass_calibrated_reason" not in ok_f


# commands._common.build_config ---------------------------------------------------------------

@pytest.mark.parametrize("long_side", [None, 512])
def test_build_config_applies_every_io_flag(long_side):
    args = argparse.Namespace(config=None, long_side=long_side, max_frames=7, stride=3,
                              preset=None)
    io = build_config(args).io
    assert (io.max_frames, io.stride) == (7, 3)
    assert io.long_side == (load_config(None).io.long_side if long_side is None else 512)


# commands.calibrate: the summary and --refit errors ------------------------------------------

def test_calibrate_summary_rates_none_and_paper_rates_in_order(tmp_path: Path, capsys,
                                                               monkeypatch):
    doc = _doc("H")
    doc["rates"] = dict(doc["rates"], true_pass=None, false_pass=None,
                        clean=dict(doc["rates"]["clean"], paper_pass_rate=0.9),
                        corrupted=dict(doc["rates"]["corrupted"], paper_pass_rate=0.2))
    monkeypatch.setattr("geocon_torch.commands.calibrate.run_calibration",
                        lambda *a, **k: dict(doc, plots=[]))
    src = _write(tmp_path / "cal.json", _doc("H"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert main(["calibrate", str(tmp_path / "out"), "--refit", str(src)]) == 0
    out = capsys.readouterr().out
    assert "  overall: true-pass n/a, false-pass n/a (paper gate: 0.900 / 0.200)" in out, out
    h_line = [line for line in out.splitlines() if line.startswith("  H: ")]
    assert len(h_line) == 1 and h_line[0].endswith("true-pass 1.000 of 10"), h_line


def test_refit_error_not_caught_by_refit_plan_is_one_line(tmp_path: Path, capsys, monkeypatch):
    src = _write(tmp_path / "cal.json", _doc())
    for exc in (KeyError("plan"), TypeError("bad")):
        def boom(*a, exc=exc, **k):
            raise exc
        monkeypatch.setattr("geocon_torch.commands.calibrate.refit_plan", boom)
        assert main(["calibrate", str(tmp_path / "out"), "--refit", str(src)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"geocon calibrate: error: --refit {src} is not a calibration written "
                       f"by geocon calibrate ({type(exc).__name__}: {exc})"], err


# report.plots._Figures -----------------------------------------------------------------------

def test_figures_without_pyplot_keep_size_colours_and_layout(tmp_path: Path):
    pytest.importorskip("matplotlib")
    from geocon_torch.report import plots

    out = plots.timeline([0, 1, 2], [1.0, 0.9, 0.95], [0.1, 0.3, 0.2], [True, True, True],
                         tmp_path / "t.png", title="x")
    assert _png_size(out) == (540, 234)  # 6 x 2.6 in at 90 dpi
    figs = plots._plt()
    cmap = figs.get_cmap("tab10")
    assert cmap.name == "tab10" and cmap.N == 10
    assert [round(c, 4) for c in cmap(0)] == [0.1216, 0.4667, 0.7059, 1.0]
    fig, axes = figs.subplots(figsize=(4, 3), ncols=2)
    assert len(axes) == 2 and tuple(fig.get_size_inches()) == (4.0, 3.0)


# geometry.residuals._safe_den ----------------------------------------------------------------

def test_transfer_of_points_sent_to_infinity_keeps_the_sign_and_tiny_is_eps_squared():
    H = torch.tensor([[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]])  # w = x
    tiny = torch.finfo(torch.float32).eps ** 2
    x = torch.tensor([[[0.0, 1.0], [-0.0, -2.0], [1e-10, 1.0], [-1e-20, 3.0]]])
    got = transfer_points(H, x)[0]
    want = torch.tensor([[0.0, 1.0 / tiny], [0.0, -2.0 / tiny], [1.0, 1e10],
                         [1e-20 / tiny, -3.0 / tiny]])
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0.0)
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        w = torch.tensor([0.0, -0.0, 2.0], dtype=dtype)
        t = torch.finfo(dtype).eps ** 2
        out = _safe_den(w)
        assert out.dtype == dtype and out.tolist() == [t, t, 2.0]


# synth.textures._rand ------------------------------------------------------------------------

def test_texture_draws_are_float32_values_of_the_generator():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        got = _rand(torch.Generator().manual_seed(3), 2, 5)
    finally:
        torch.set_default_dtype(old)
    want = torch.rand((2, 5), generator=torch.Generator().manual_seed(3), dtype=torch.float32)
    assert got.dtype == torch.float32 and torch.equal(got, want)
