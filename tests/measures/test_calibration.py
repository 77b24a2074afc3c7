"""Calibrated report gate: threshold math on closed-form toys, calibration files and hashes,
results carrying both verdicts, the report / table, and ``geocon calibrate`` on a tiny run."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from geocon_torch.bench.calibration import CalibrationPlan, evaluate, fit_thresholds
from geocon_torch.cli import main
from geocon_torch.commands._common import SUMMARY_COLUMNS, summary_row
from geocon_torch.config import GeoConConfig, load_config
from geocon_torch.errors import ConfigError
from geocon_torch.io.calibration import DEFAULT_DIR, calibration_hash, load_calibration
from geocon_torch.measures.calibration import (calibrated_pass, ge_bound_px, normalised_ge,
                                               peak_ge, roc_curve, select_bounds,
                                               select_thresholds, spread_of)
from geocon_torch.pipeline import pinned_config, score_clip
from geocon_torch.report.audit import _facts
from geocon_torch.report.text import calibrated_verdict
from geocon_torch.synth import grounded_clip
from helpers import toy_calibration_rows

SHIPPED = DEFAULT_DIR / "opencv-sift.json"


def _u(lo: float, hi: float, n: int) -> torch.Tensor:
    """n evenly spread samples of U(lo, hi) (midpoints: the empirical CDF is the true one)."""
    return lo + (hi - lo) * (torch.arange(n, dtype=torch.float64) + 0.5) / n


def test_threshold_at_target_false_pass_matches_closed_form():
    # clean GE ~ U(0, 1), corrupted GE ~ U(0.5, 1.5), IR uninformative (all 1): at a 5 %
    # false-pass rate the GE bound is the corrupted 5 % quantile 0.55, true-pass F(0.55) = 0.55
    n = 2000
    clean, bad = _u(0.0, 1.0, n), _u(0.5, 1.5, n)
    ones = torch.ones(n, dtype=torch.float64)
    th = select_thresholds(ones, clean, ones, bad, 0.05)
    assert th.ge_norm_max == pytest.approx(0.55, abs=2e-3)
    assert th.true_pass == pytest.approx(0.55, abs=2e-3)
    assert th.false_pass <= 0.05 and th.false_pass == pytest.approx(0.05, abs=1e-3)
    assert th.ir_min == pytest.approx(0.97)  # nothing below 1: relaxed to the paper's bound
    for target, ge in ((0.2, 0.7), (0.5, 1.0)):
        assert select_thresholds(ones, clean, ones, bad, target).ge_norm_max == \
            pytest.approx(ge, abs=2e-3)


def test_joint_bounds_separate_two_failure_modes():
    # half the corrupted clips fail on IR (0.5, GE like clean), half on GE (U(2, 3), IR 1):
    # only the pair of bounds separates them; each lands half way in its gap
    n = 200
    clean_ge, ones = _u(0.0, 1.0, n), torch.ones(n, dtype=torch.float64)
    bad_ir = torch.cat([torch.full((n,), 0.5, dtype=torch.float64), ones])
    bad_ge = torch.cat([_u(0.0, 1.0, n), _u(2.0, 3.0, n)])
    th = select_thresholds(ones, clean_ge, bad_ir, bad_ge, 0.0)
    assert (th.true_pass, th.false_pass) == (1.0, 0.0)
    assert th.ir_min == pytest.approx(0.75)
    assert th.ge_norm_max == pytest.approx((float(clean_ge.max()) + 2.0 + 0.5 / n) / 2)


def test_four_bounds_separate_breathing_from_parallax():
    # F-gated toys: clean parallax (GE_H 1.5-2.5 px @1024, GE ~ U(0, 1)); breathing on a static
    # camera (GE like clean, GE_H 0.5-1.0: F fits a radial warp); a sliding region (GE like
    # clean, peak GE 2-3 against clean <= 1.2). Only the GE_H lower bound and the peak upper
    # bound together separate them; each lands half way in its gap
    n = 12
    ones, ge = torch.ones(n, dtype=torch.float64), _u(0.0, 1.0, n)
    clean = torch.stack([ones, ge, ge, 1.2 * ge, _u(1.5, 2.5, n)], -1)
    breathing = torch.stack([ones, ge, ge, ge, _u(0.5, 1.0, n)], -1)
    slide = torch.stack([ones, ge, ge, _u(2.0, 3.0, n), _u(1.5, 2.5, n)], -1)
    lower = (True, False, False, False, True)
    bounds, tp, fp = select_bounds(clean, torch.cat([breathing, slide]), lower, 0.0)
    assert (tp, fp) == (1.0, 0.0)
    assert bounds[3] == pytest.approx((float(clean[:, 3].max()) + float(slide[:, 3].min())) / 2)
    assert bounds[4] == pytest.approx((float(clean[:, 4].min()) + float(breathing[:, 4].max()))
                                      / 2)
    # without the GE_H bound the breathing clips pass unless the GE bound rejects clean ones
    _, tp2, _ = select_bounds(clean[:, :4], torch.cat([breathing, slide])[:, :4], lower[:4], 0.0)
    assert tp2 < 0.05


def test_calibrated_pass_reads_the_optional_bounds():
    th = {"F": {"ir_min": 0.97, "ge_norm_max": 0.4, "ge_fine_norm_max": 0.3,
                "ge_peak_norm_max": 0.8, "ge_h_norm_min": 1.4}}
    ok = dict(ge_fine_px=0.05, ge_peak_px=0.1, ge_h_px=0.5)  # 0.2 / 0.4 / 2.0 px @1024
    assert calibrated_pass(1.0, 0.09, 256, "F", th, **ok) is True
    assert calibrated_pass(1.0, 0.09, 256, "F", th, **dict(ok, ge_fine_px=0.08)) is False
    assert calibrated_pass(1.0, 0.09, 256, "F", th, **dict(ok, ge_peak_px=0.21)) is False
    assert calibrated_pass(1.0, 0.09, 256, "F", th, **dict(ok, ge_h_px=0.3)) is False  # no parallax
    assert calibrated_pass(1.0, 0.09, 256, "F", th, **dict(ok, ge_h_px=None)) is True  # H failed
    # without GE_fine / GE_peak the clip GE stands in (0.36 px @1024 > 0.3)
    assert calibrated_pass(1.0, 0.09, 256, "F", th, ge_h_px=0.5) is False
    assert peak_ge(torch.tensor([1.0, 2.0, 3.0, 9.0]), torch.tensor([True, True, True, False]),
                   0.5) == pytest.approx(2.0)
    assert peak_ge(torch.arange(11.0), torch.ones(11, dtype=torch.bool)) == pytest.approx(9.0)
    assert peak_ge(torch.ones(3), torch.zeros(3, dtype=torch.bool)) is None


def test_roc_curve_runs_from_nothing_to_everything():
    c = roc_curve(_u(0, 1, 50), _u(0.5, 1.5, 50), torch.ones(50), torch.ones(50), 0.9)
    fp, tp = c["false_pass"], c["true_pass"]
    assert (fp[0], tp[0]) == (0.0, 0.0) and (fp[-1], tp[-1]) == (1.0, 1.0)
    assert all(a <= b for a, b in zip(fp, fp[1:])) and all(a <= b for a, b in zip(tp, tp[1:]))


def test_ge_is_normalised_to_a_1024_px_frame():
    assert float(normalised_ge(torch.tensor(0.1), torch.tensor(256))) == pytest.approx(0.4)
    th = {"F": {"ir_min": 0.97, "ge_norm_max": 0.4}}
    assert calibrated_pass(1.0, 0.099, 256, "F", th) is True
    assert calibrated_pass(1.0, 0.101, 256, "F", th) is False
    assert calibrated_pass(1.0, 0.39, 1024, "F", th) is True
    assert calibrated_pass(0.96, 0.01, 256, "F", th) is False
    assert calibrated_pass(1.0, 0.01, 256, "H", th) is None  # no bounds for that regime
    assert calibrated_pass(None, 0.01, 256, "F", th) is None
    assert ge_bound_px(0.4, 512) == pytest.approx(0.2)


def test_fit_and_evaluate_rows():
    rows = toy_calibration_rows()
    th = fit_thresholds(rows, 0.05, 0.5)
    assert set(th) == {"H", "F"} and not th["H"]["pooled"]
    assert 0.05 * 4 < th["F"]["ge_norm_max"] < 0.2 * 4
    rates = evaluate(rows, th, 0.5)
    assert rates["true_pass"] == 1.0 and rates["false_pass"] == 0.0
    assert rates["rubber_sheet"]["n"] == 20 and rates["corrupted"]["paper_pass_rate"] == 1.0


def _write_calibration(path: Path, ge_norm_max: float = 0.4) -> Path:
    doc = {"backend": "opencv-sift", "long_side": 256, "ref_long_side": 1024,
           "thresholds": {r: {"ir_min": 0.97, "ge_norm_max": ge_norm_max} for r in "HF"}}
    doc["content_hash"] = calibration_hash(doc)
    path.write_text(json.dumps(doc))
    return path


def test_calibration_file_round_trip_and_hash(tmp_path: Path):
    path = _write_calibration(tmp_path / "cal.json")
    cal = load_calibration(str(path), "opencv-sift")
    assert cal.hash == json.loads(path.read_text())["content_hash"]
    assert cal.thresholds["F"] == {"ir_min": 0.97, "ge_norm_max": 0.4}
    assert cal.name == "cal.json" and cal.long_side == 256
    assert load_calibration(None) is None
    shipped = load_calibration("default", "opencv-sift")
    assert shipped.hash == json.loads(SHIPPED.read_text())["content_hash"]
    assert load_calibration("default", "no-such-backend").name == "default:opencv-sift"
    with pytest.raises(ConfigError, match="not found"):
        load_calibration(str(tmp_path / "missing.json"))
    (tmp_path / "bad.json").write_text(json.dumps({"thresholds": {"F": {"ir_min": 1}}}))
    with pytest.raises(ConfigError, match="not a calibration"):
        load_calibration(str(tmp_path / "bad.json"))


def test_config_field_is_declared():
    assert GeoConConfig().background.calibration == "default"
    assert load_config({"background": {"calibration": None}}).background.calibration is None
    with pytest.raises(ConfigError, match="background.calibration"):
        load_config({"background": {"calibration": 3}})


@pytest.fixture(scope="module")
def c3_frames() -> torch.Tensor:
    return grounded_clip("C3", num_frames=6, size=(120, 160)).frames


def test_results_carry_both_verdicts_and_the_hash(c3_frames, tmp_path: Path):
    res = score_clip(c3_frames, preset="background", device="cpu")
    bg = res.background
    assert isinstance(bg["pass"], bool) and isinstance(bg["pass_calibrated"], bool)
    shipped = json.loads(SHIPPED.read_text())
    assert bg["calibration"]["hash"] == shipped["content_hash"]
    assert bg["calibration"]["name"] == "default:opencv-sift"
    assert res.config["background"]["calibration"] == "default"
    # a strict custom file: GE bound of 1e-6 px at 1024 -> the clip fails it, the paper passes
    path = _write_calibration(tmp_path / "strict.json", ge_norm_max=1e-6)
    strict = score_clip(c3_frames, preset="background", device="cpu",
                        config={"background": {"calibration": str(path)}})
    assert strict.background["pass"] == bg["pass"]
    assert strict.background["pass_calibrated"] is False
    assert strict.background["calibration"]["hash"] == calibration_hash(
        json.loads(path.read_text()))
    th = strict.background["calibration"]["thresholds"]
    assert th["ge_px"] == pytest.approx(1e-6 * 160 / 1024) and th["regime"] == strict.regime
    off = score_clip(c3_frames, preset="background", device="cpu",
                     config={"background": {"calibration": None}})
    assert "pass_calibrated" not in off.background and off.background["pass"] == bg["pass"]
    with pytest.raises(ConfigError, match="not found"):
        score_clip(c3_frames, preset="background", device="cpu",
                   config={"background": {"calibration": str(tmp_path / "nope.json")}})


def test_config_record_pins_the_calibration_hash(c3_frames, tmp_path: Path):
    """The result's config record holds the calibration file's hash, so config_hash changes
    with the file; a config naming another hash is refused before scoring."""
    shipped = json.loads(SHIPPED.read_text())["content_hash"]
    res = score_clip(c3_frames, preset="background", device="cpu")
    assert res.config["background"]["calibration_hash"] == shipped
    assert res.config_hash == GeoConConfig.from_dict(res.config).config_hash()
    assert res.config_hash != GeoConConfig().config_hash()  # the unpinned config differs
    # the preset scored is recorded (and hashed) too
    assert pinned_config(GeoConConfig().with_preset("background"), "cpu").config_hash() == \
        res.config_hash
    a = _write_calibration(tmp_path / "a.json", ge_norm_max=0.5)
    b = _write_calibration(tmp_path / "b.json", ge_norm_max=0.6)
    ra, rb = (score_clip(c3_frames, preset="background", device="cpu",
                         config={"background": {"calibration": str(p)}}) for p in (a, b))
    assert ra.config["background"]["calibration_hash"] == ra.background["calibration"]["hash"]
    assert ra.config_hash != rb.config_hash
    # the same file path with new content: a config pinned to the old hash is refused
    pinned = ra.config
    _write_calibration(a, ge_norm_max=0.7)
    with pytest.raises(ConfigError, match="calibration changed"):
        score_clip(c3_frames, preset="background", device="cpu", config=pinned)
    off = score_clip(c3_frames, preset="background", device="cpu",
                     config={"background": {"calibration": None}})
    assert off.config["background"]["calibration_hash"] is None
    assert off.config["features"]["backend"] == "opencv-sift"  # what "auto" ran on the CPU
    assert off.config_hash == load_config({"background": {"calibration": None},
                                           "features": {"backend": "opencv-sift"},
                                           "epipolar": {"implementation": "opencv"},
                                           "foreground": {"flow": "torch-lk"},
                                           "preset": "background"}).config_hash()


def test_table_and_report_show_both_verdicts():
    res = {"clip": "a", "status": "ok", "regime": "F",
           "background": {"ir": 1.0, "ge_px": 0.3, "pass": True, "pass_calibrated": False,
                          "calibration": {"name": "default:opencv-sift", "hash": "abc123",
                                          "thresholds": {"ir": 0.97, "ge_px": 0.05}}}}
    at = SUMMARY_COLUMNS.index("pass")
    assert summary_row(res)[at] == "yes/no"
    assert summary_row({"clip": "b", "background": {"pass": True}})[at] == "yes/-"
    text = calibrated_verdict(res["background"])
    assert "calibrated: no" in text and "abc123" in text
    assert "fails GE 0.3 px > 0.05 px" in text and "IR 1 >= 0.97: ok" in text
    facts = dict(_facts({}, res))
    assert "yes (paper)" in facts["valid pairs"] and "calibrated: no" in facts["valid pairs"]
    assert calibrated_verdict({"pass": True, "ir": 1.0, "ge_px": 0.3}) == "calibrated: off"


def test_calibrate_cli_tiny_run(tmp_path: Path, capsys):
    out = tmp_path / "cal"
    rc = main(["calibrate", str(out), "--frames", "4", "--size", "160x120", "--seeds", "1",
               "--severities", "1.0", "--corruptions", "rubber_sheet",
               "--categories", "C1,C3,C4"])
    assert rc == 0
    doc = json.loads((out / "calibration.json").read_text())
    assert doc["content_hash"] == calibration_hash(doc)
    assert doc["backend"] == "opencv-sift" and doc["working_size"] == [120, 160]
    assert doc["frames"] == 4 and doc["seeds"] == [0] and len(doc["clips"]) == 8
    assert set(doc["thresholds"]) == {"H", "F"}
    assert doc["rates"]["false_pass"] <= 0.05  # rubber sheet at severity 1 is easy
    assert (out / "roc.json").is_file()
    assert "wrote" in capsys.readouterr().out
    cal = load_calibration(str(out / "calibration.json"))
    assert cal.hash == doc["content_hash"]
    # refit at another target from the scored clips: no rescoring, the bounds fit_thresholds
    # gives on the same rows, the plan otherwise unchanged
    rc = main(["calibrate", str(tmp_path / "refit"), "--refit", str(out / "calibration.json"),
               "--target-false-pass", "0.5"])
    assert rc == 0
    again = json.loads((tmp_path / "refit" / "calibration.json").read_text())
    assert again["clips"] == doc["clips"] and again["target_false_pass"] == 0.5
    assert again["thresholds"] == json.loads(json.dumps(fit_thresholds(doc["clips"], 0.5, 0.5)))
    assert {k: v for k, v in again["plan"].items() if k != "target_false_pass"} == {
        k: v for k, v in doc["plan"].items() if k != "target_false_pass"}


def test_calibrate_cli_rejects_bad_options(tmp_path: Path, capsys):
    assert main(["calibrate", str(tmp_path), "--frames", "1"]) == 2
    assert "--frames" in capsys.readouterr().err
    (tmp_path / "x.json").write_text("{}")
    assert main(["calibrate", str(tmp_path / "o"), "--refit", str(tmp_path / "x.json")]) == 2
    assert "--refit needs a calibration.json" in capsys.readouterr().err


def test_default_calibration_follows_the_backend():
    """One shipped file per default features backend (opencv-sift on the CPU, kornia-sift on
    CUDA); any other backend falls back to the opencv-sift one."""
    for backend in ("opencv-sift", "kornia-sift"):
        cal = load_calibration("default", backend)
        assert cal.name == f"default:{backend}" and cal.backend == backend
        assert cal.record(backend)["backend_matches"] is True
    assert load_calibration("default", "xfeat").record("xfeat")["backend_matches"] is False


def test_plan_config_scores_without_calibration():
    assert CalibrationPlan().config().background.calibration is None


def test_ties_take_the_loosest_bounds():
    """Among bound sets with the same true / false-pass rates the loosest wins (the widest
    margin for unseen clean clips; the first statistic first): clean A (1, 1), B (1, 2),
    C (0.5, 5), corrupted X (0.5, 4) in (IR >=, GE <=). Accepting C would accept X, so 2 of 3
    clean pass, with IR >= 1 or with IR >= 0.5 and GE <= 2: the loose IR bound 0.5 is kept (the
    tightest would be 1, moved half way to 0.75) and GE <= 2 moves half way to X's 4."""
    clean = torch.tensor([[1.0, 1.0], [1.0, 2.0], [0.5, 5.0]], dtype=torch.float64)
    bad = torch.tensor([[0.5, 4.0]], dtype=torch.float64)
    (ir_min, ge_max), tp, fp = select_bounds(clean, bad, (True, False), 0.0)
    assert (tp, fp) == (pytest.approx(2 / 3), 0.0)
    assert (ir_min, ge_max) == (pytest.approx(0.5), pytest.approx(3.0))
    th = {"H": {"ir_min": ir_min, "ge_norm_max": ge_max}}
    assert calibrated_pass(0.6, 2.9 * 256 / 1024, 256, "H", th) is True  # unseen, in the margin
    assert calibrated_pass(0.5, 4.0 * 256 / 1024, 256, "H", th) is False  # X


def test_spread_bound_reads_peak_minus_fine():
    """GE_spread = GE_peak - GE_fine (px @1024): an even high GE passes the spread bound, a
    low median with a few high pairs does not; a file with the older peak bound still applies."""
    th = {"H": {"ir_min": 0.9, "ge_norm_max": 2.0, "ge_spread_norm_max": 0.2}}
    even = dict(ge_fine_px=0.4 * 256 / 1024, ge_peak_px=0.45 * 256 / 1024)
    spiky = dict(ge_fine_px=0.05 * 256 / 1024, ge_peak_px=0.4 * 256 / 1024)
    assert spread_of(0.05, 0.4) == pytest.approx(0.35) and spread_of(None, 1.0) == 0.0
    assert calibrated_pass(1.0, 0.1, 256, "H", th, **even) is True
    assert calibrated_pass(1.0, 0.1, 256, "H", th, **spiky) is False
    old = {"H": {"ir_min": 0.9, "ge_norm_max": 2.0, "ge_peak_norm_max": 0.42}}
    assert calibrated_pass(1.0, 0.1, 256, "H", old, **even) is False
    assert calibrated_pass(1.0, 0.1, 256, "H", old, **spiky) is True


def test_no_clean_clip_is_an_error():
    """Without clean clips there is nothing to place a bound on (it used to return a zero gate
    with true_pass 0 and n_clean 0)."""
    from geocon_torch.errors import InputError

    bad = torch.tensor([0.5, 0.7], dtype=torch.float64)
    with pytest.raises(InputError, match="no clean clip to calibrate on"):
        select_thresholds(torch.zeros(0), torch.zeros(0), torch.ones(2), bad)


def test_pinned_config_names_the_backend_auto_stands_for():
    """"auto" is opencv-sift on the CPU and torch-sift on CUDA, which give other numbers: the
    pinned config names the backend it resolved to, so with the calibration off (no file hash
    to tell them apart) a CPU and a CUDA run still get different config hashes, and an
    explicit opencv-sift on the CPU is the same protocol as "auto" there."""
    off = GeoConConfig().replace(background={"calibration": None})
    auto = pinned_config(off, "cpu")
    assert auto.features.backend == "opencv-sift"
    assert auto.config_hash() == pinned_config(
        off.replace(features={"backend": "opencv-sift"}), "cpu").config_hash()
    assert auto.config_hash() != pinned_config(
        off.replace(features={"backend": "torch-sift"}), "cpu").config_hash()


def test_a_hand_edited_calibration_warns_and_records_its_own_hash(tmp_path: Path):
    """The stored content_hash no longer matches an edited file: loading says so (it loaded
    silently under another hash) and the hash recorded is the content's."""
    from geocon_torch.io.calibration import calibration_hash, load_calibration

    data = json.loads(SHIPPED.read_text())
    data["thresholds"]["H"]["ir_min"] = 0.9
    path = tmp_path / "edited.json"
    path.write_text(json.dumps(data))
    with pytest.warns(UserWarning, match="edited after it was written"):
        cal = load_calibration(str(path), "opencv-sift")
    assert cal.hash == calibration_hash(data) != data["content_hash"]
