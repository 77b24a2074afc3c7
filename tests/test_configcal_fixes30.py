"""Configs, presets and ``geocon calibrate`` (audit s30 configcal F1-F9): duplicate JSON keys,
--refit files that are not calibrations, the calibration file's schema, pooled regimes, a
non-finite --setting rate, the seed bounds, CLI flag names, a stray calibration hash and the
calibrate summary's rates."""
from __future__ import annotations

import copy
import json
import warnings
from pathlib import Path
from typing import Any, Dict, List

import pytest

from geocon_torch._json import read_json_file
from geocon_torch.bench.calibration import (CalibrationPlan, calibration_document,
                                            fit_thresholds, refit_plan)
from geocon_torch.cli import main
from geocon_torch.commands.calibrate import _setting
from geocon_torch.config import GeoConConfig, load_config
from geocon_torch.errors import ConfigError, InputError
from geocon_torch.gate.poses import load_pose_log
from geocon_torch.io.calibration import (DEFAULT_DIR, FORMAT, GATE_BOUNDS, GATE_REGIMES,
                                         calibration_hash, load_calibration, pin_calibration)
from geocon_torch.measures.calibration import BOUNDS, REGIME_BOUNDS
from geocon_torch.presets import PRESETS
from helpers import toy_calibration_rows

TH = {"ir_min": 0.97, "ge_norm_max": 1.0}


def _rows(regimes: str = "HF") -> List[Dict[str, Any]]:
    """Toy calibration rows (tests/helpers.toy_calibration_rows) with the render fields."""
    return toy_calibration_rows(regimes, size=[192, 256], frames=2, letterbox=0, rate=1.0)


def _plan() -> CalibrationPlan:
    return CalibrationPlan(frames=2, size=(192, 256), seeds=(0,), categories=("C1",),
                           corruptions=("rubber_sheet",), severities=(0.25, 0.5, 1.0))


def _doc() -> Dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return calibration_document(_plan(), _rows())


def _write(path: Path, doc: Any) -> Path:
    path.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return path


# F1 ------------------------------------------------------------------------------------------

def test_duplicate_keys_in_a_config_file_are_an_error_naming_key_and_file(tmp_path: Path):
    p = _write(tmp_path / "thresholds.json",
               '{"background": {"tau_h": 3.0}, "io": {"long_side": 512}, '
               '"background": {"tau_f": 0.2}}')
    # InputError, as every other problem of the config file itself (not found, not JSON)
    with pytest.raises(InputError, match=r"thresholds.json: key 'background' given twice"):
        load_config(str(p))
    _write(p, '{"background": {"tau_h": 3.0, "tau_h": 5.0}}')
    with pytest.raises(InputError, match=r"config file .*thresholds.json: key 'tau_h' given"):
        load_config(str(p))
    _write(p, '{"background": {"tau_h": 3.0}, "io": {"long_side": 512}}')  # still fine
    assert load_config(str(p)).background.tau_h == 3.0


def test_duplicate_keys_in_calibration_and_pose_files(tmp_path: Path):
    q = _write(tmp_path / "cal.json",
               '{"thresholds": {"H": {"ir_min": 0.99, "ge_norm_max": 0.5, "ir_min": 0.5}}}')
    with pytest.raises(ConfigError, match=r"cal.json: key 'ir_min' given twice"):
        load_calibration(str(q))
    poses = _write(tmp_path / "poses.json", '{"poses": [], "poses": []}')
    with pytest.raises(InputError, match=r"poses.json: key 'poses' given twice"):
        load_pose_log(str(poses))
    # the same key in two objects of a list is no repeat
    assert read_json_file(_write(tmp_path / "l.json", '[{"a": 1}, {"a": 2}]'), "x") == \
        [{"a": 1}, {"a": 2}]


def test_shipped_calibrations_still_load():
    for path in sorted(DEFAULT_DIR.glob("*.json")):
        cal = load_calibration(str(path))
        assert cal.hash == json.loads(path.read_text())["content_hash"]
        assert set(cal.thresholds) == {"H", "F"}


# F2 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("mutate, match", [
    (lambda d: [1, 2], "not a calibration"),
    (lambda d: dict(d, format="geocon-calibration/99"), "geocon-calibration/99"),
    (lambda d: dict(d, plan=dict(d["plan"], new_option=1)), "new_option"),
    (lambda d: dict(d, plan={k: v for k, v in d["plan"].items() if k != "frames"}),
     "frames"),
    (lambda d: dict(d, plan=dict(d["plan"], settings="x")), "settings"),
    (lambda d: dict(d, plan=dict(d["plan"], settings=[{"size": [8]}])), "settings"),
    (lambda d: dict(d, plan=dict(d["plan"], fixed_bounds={"ir_min": "x"})), "fixed_bounds"),
    (lambda d: dict(d, plan=dict(d["plan"], fixed_bounds={"ir_mn": 0.9})), "fixed_bounds"),
    (lambda d: dict(d, plan=dict(d["plan"], frames="6")), "frames"),
    (lambda d: dict(d, plan=dict(d["plan"], size=[192])), "size"),
    (lambda d: dict(d, plan=dict(d["plan"], seeds=[0.5])), "seeds"),
])
def test_refit_refuses_files_that_are_not_calibrations(mutate, match):
    with pytest.raises(InputError, match=match):
        refit_plan(mutate(copy.deepcopy(_doc())), 0.05, 0.5)


def test_refit_of_a_good_document_and_of_an_old_plan_without_settings():
    doc = _doc()
    plan, rows = refit_plan(doc, 0.05, 0.5)
    assert plan.frames == 2 and len(rows) == len(doc["clips"])
    old = copy.deepcopy(doc)
    for key in ("settings", "fixed_bounds", "device"):
        old["plan"].pop(key)
    assert refit_plan(old, 0.05, 0.5)[0].settings == ()


def test_refit_cli_one_line_exit_2(tmp_path: Path, capsys, monkeypatch):
    calls: list = []
    monkeypatch.setattr("geocon_torch.commands.calibrate.run_calibration",
                        lambda *a, **k: calls.append(a))
    doc = _doc()
    for bad in ([1, 2], dict(doc, plan=dict(doc["plan"], new_option=1)),
                dict(doc, plan=dict(doc["plan"], settings="x")),
                dict(doc, plan=dict(doc["plan"], fixed_bounds={"ir_min": "x"}))):
        p = _write(tmp_path / "bad.json", bad)
        assert main(["calibrate", str(tmp_path / "out"), "--refit", str(p)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("geocon calibrate: error: --refit"), err
    assert calls == []


# F3 ------------------------------------------------------------------------------------------

def test_the_loader_knows_the_gates_regimes_and_bounds():
    """io.calibration (layer 1) keeps the names of measures.calibration (layer 5) in step."""
    assert GATE_REGIMES == tuple(REGIME_BOUNDS)
    assert GATE_BOUNDS == tuple(key for key, _, _ in BOUNDS)


def test_calibration_schema_regimes_bounds_format(tmp_path: Path):
    def cal(name: str, doc: Dict[str, Any]):
        return load_calibration(str(_write(tmp_path / name, doc)))

    with pytest.raises(ConfigError, match=r"regime 'h'.*did you mean 'H'"):
        cal("lower.json", {"format": FORMAT, "thresholds": {"h": TH, "f": TH}})
    with pytest.raises(ConfigError, match=r"ge_fine_norm_mx.*did you mean 'ge_fine_norm_max'"):
        cal("typo.json", {"thresholds": {"H": dict(TH, ge_fine_norm_mx=0.01)}})
    with pytest.raises(ConfigError, match=r"ge_wobble_max"):
        cal("new_bound.json", {"thresholds": {"H": dict(TH, ge_wobble_max=0.01)}})
    with pytest.raises(ConfigError, match=r"format 'geocon-calibration/99'"):
        cal("v99.json", {"format": "geocon-calibration/99", "thresholds": {"H": TH}})
    with pytest.raises(ConfigError, match=r"format"):
        cal("other.json", {"format": "something-else/1", "thresholds": {"H": TH}})
    # a file without a format (older hand-written files), one regime only, the record keys and
    # an older file's bounds still load
    only_h = cal("only_h.json", {"thresholds": {"H": dict(
        TH, ge_h_norm_min=0.1, ge_peak_norm_max=2.0, false_pass=0.0, true_pass=1.0, n_clean=3,
        n_corrupted=4, pooled=False, note="hand-made")}})
    assert set(only_h.thresholds) == {"H"} and only_h.thresholds["H"]["ge_h_norm_min"] == 0.1


# F4 ------------------------------------------------------------------------------------------

def test_one_regime_calibration_warns_and_records_why_it_pooled():
    with pytest.warns(UserWarning, match=r"no clean F clips.*10 clean.*all gated H"):
        th = fit_thresholds(_rows("H"), 0.05, 0.5)
    assert th["F"]["pooled"] is True and "no clean F clips" in th["F"]["pooled_reason"]
    assert th["H"]["pooled"] is False and "pooled_reason" not in th["H"]


def test_two_regime_calibration_is_unchanged():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        th = fit_thresholds(_rows("HF"), 0.05, 0.5)
    assert all(not th[r]["pooled"] and "pooled_reason" not in th[r] for r in "HF")


def test_calibrate_summary_prints_the_pooled_reason_and_3_decimals(tmp_path: Path, capsys,
                                                                   monkeypatch):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        doc = calibration_document(_plan(), _rows("H"))
    doc["rates"] = dict(doc["rates"], true_pass=2 / 3, false_pass=1 / 3)
    monkeypatch.setattr("geocon_torch.commands.calibrate.run_calibration",
                        lambda *a, **k: dict(doc, plots=[]))
    src = _write(tmp_path / "cal.json", doc)
    assert main(["calibrate", str(tmp_path / "out"), "--refit", str(src)]) == 0
    out = capsys.readouterr().out
    assert "true-pass 0.667, false-pass 0.333" in out, out
    assert "(pooled: no clean F clips" in out, out


# F5 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("rate", ["nan", "inf", "-inf", "0", "-1"])
def test_setting_rate_must_be_finite_and_positive(rate: str):
    import argparse  # lazy: only this test needs it
    with pytest.raises(argparse.ArgumentTypeError, match="finite rate > 0"):
        _setting(f"64x48x3:rate{rate}")
    assert _setting("64x48x3:rate1.5")["rate"] == 1.5


# F6 ------------------------------------------------------------------------------------------

def test_seeds_are_bounded_to_what_every_path_takes():
    top = 2 ** 31 - 1
    assert load_config({"ransac": {"seed": top}, "epipolar": {"seed": top}}).ransac.seed == top
    for section in ("ransac", "epipolar"):
        for seed in (2 ** 31, 2 ** 64):
            with pytest.raises(ConfigError, match=rf"{section}.seed must be an int in "
                                                  rf"\[0, 2147483647\]"):
                load_config({section: {"seed": seed}})


# F7 ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, match", [
    (["--long-side", "1"], "io.long_side must be an int >= 2"),
    (["--long-side", "0"], "io.long_side must be a positive int"),
    (["--max-frames", "0"], "io.max_frames must be a positive int"),
    (["--stride", "0"], "io.stride must be a positive int"),
])
def test_flag_errors_name_the_flag(argv, match, capsys):
    """The config field's message (tests/test_config_validation.py keeps its start), then the
    flag that set it and what the flag takes."""
    assert main(["score", "x.mp4", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    low = 2 if argv[0] == "--long-side" else 1
    assert len(err) == 1 and err[0].startswith(f"geocon score: error: {match}"), err
    assert err[0].endswith(f"got {argv[1]} (set by {argv[0]}, which takes an int >= {low})"), err


# F8 ------------------------------------------------------------------------------------------

def test_calibration_hash_needs_a_calibration_and_a_hash_format():
    cfg = load_config({"background": {"calibration": None, "calibration_hash": "0" * 16}})
    with pytest.raises(ConfigError, match="calibration_hash .* background.calibration is null"):
        pin_calibration(cfg)
    for bad in ("not-a-hash", "0" * 15, "A" * 16):
        with pytest.raises(ConfigError, match="16 lowercase hex digits"):
            pin_calibration(load_config({"background": {"calibration_hash": bad}}))
        with pytest.raises(ConfigError, match="16 lowercase hex digits"):
            pin_calibration(load_config({"background": {"calibration_hash": bad,
                                                        "calibration": None}}))
    off = load_config({"background": {"calibration": None}})
    assert pin_calibration(off) is off
    shipped = pin_calibration(GeoConConfig(), "opencv-sift")
    assert pin_calibration(shipped, "opencv-sift") is shipped  # a pinned config stays as it is


def test_presets_keep_their_hashes():
    """Hashes of the default config and every preset before the fixes (none of them changed)."""
    want = {"geocon": "6b6bcba0c376cac8", "background": "cd244d8e77d1365d",
            "worldatlas": "4e6b3796344ed375", "gvgc": "79e4f29b4fefdb60",
            "epipolar-dpo": "b79403a6d186ad70", "all": "fb8fdf797091e525"}
    assert GeoConConfig().config_hash() == want["geocon"]
    assert {name: GeoConConfig().with_preset(name).config_hash() for name in PRESETS} == want
    pinned = pin_calibration(GeoConConfig().with_preset("background"), "opencv-sift")
    assert pinned.config_hash() == "f10a82e15cd0d898"
    assert load_config({"background": {"calibration": None}}).config_hash() == "8379969e9c37f141"


def test_calibration_hash_of_a_shipped_file_is_recomputed():
    path = sorted(DEFAULT_DIR.glob("*.json"))[0]
    data = json.loads(path.read_text())
    assert calibration_hash(data) == data["content_hash"]


def test_a_regime_the_calibration_leaves_out_says_why_there_is_no_verdict(tmp_path: Path):
    """A calibration with F bounds only: an H clip gets no calibrated verdict, and the result
    says why (not a bare None)."""
    from geocon_torch import score_clip
    from geocon_torch.synth import render_scene

    path = _write(tmp_path / "only_f.json", {"format": FORMAT, "thresholds": {"F": TH}})
    frames = render_scene("C2", motion="pan", num_frames=4, size=(120, 160), seed=0).frames
    cfg = {"background": {"calibration": str(path)}}
    bg = score_clip(frames, config=cfg, preset="background", progress=False).to_dict()
    bg = bg["background"]
    assert bg["status"] == "ok" and bg["pass_calibrated"] is None
    assert bg["pass_calibrated_reason"] == "calibration only_f.json has no bounds for regime H"


@pytest.mark.parametrize("first, seeds", [(-1, 2), (2 ** 31 - 1, 2)])
def test_first_seed_out_of_range_is_a_usage_error(tmp_path: Path, capsys, first: int,
                                                   seeds: int):
    """--first-seed -1 rendered and scored every clip, then --refit refused the file it wrote
    (its seeds must be >= 0): refused up front (mutation round 19a)."""
    code = main(["calibrate", str(tmp_path / "out"), "--first-seed", str(first),
                 "--seeds", str(seeds)])
    assert code == 2
    assert f"--first-seed must be in [0, {2 ** 31 - 2}]" in capsys.readouterr().err
    assert not (tmp_path / "out" / "calibration.json").exists()


def test_the_last_first_seed_writes_a_plan_that_refit_reads():
    from geocon_torch.cli import build_parser
    from geocon_torch.commands.calibrate import plan_from_args

    args = build_parser().parse_args(["calibrate", "out", "--first-seed", str(2 ** 31 - 2)])
    plan = plan_from_args(args)
    assert plan.seeds == (2 ** 31 - 2, 2 ** 31 - 1)
    plan2, rows = refit_plan(calibration_document(plan, toy_calibration_rows("HF")), 0.05, 0.5)
    assert tuple(plan2.seeds) == plan.seeds and len(rows) == len(toy_calibration_rows("HF"))
