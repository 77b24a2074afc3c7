"""The calibrated verdict pinned with worked numbers: the calibration file's reading (hash,
defaults, the shared shipped file, the pin check), the normalisation of every GE statistic by
the working long side (reference px = px x ref_long_side / long side), each regime's bounds and
the bounds a result records at its working resolution."""
from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any, Dict

import pytest
import torch

from geocon_torch.bench.calibration import fit_regime
from geocon_torch.config import GeoConConfig
from geocon_torch.errors import ConfigError
from geocon_torch.io.calibration import (calibration_hash, load_calibration, pin_calibration)
from geocon_torch.measures.calibration import (REGIME_BOUNDS, calibrated_pass, clip_statistics,
                                               normalised_ge, spread_of)
from geocon_torch.sections.background import BackgroundBlock, _calibrated

ALL_BOUNDS = {"ir_min": 0.9, "ge_norm_max": 0.8, "ge_fine_norm_max": 0.6,
              "ge_spread_norm_max": 0.4, "parallax_ref_min": 20.0, "ge_h_norm_min": 0.5,
              "ge_peak_norm_max": 1.2}


def _write(path: Path, doc: Dict[str, Any], with_hash: bool = True) -> Path:
    if with_hash:
        doc = dict(doc, content_hash=calibration_hash(doc))
    path.write_text(json.dumps(doc))
    return path


def test_hash_is_16_hex_of_the_body_without_its_own_hash():
    """Pinned value: sha256('{"a":1,"b":[2,3]}')[:16]; the content_hash key is left out."""
    doc = {"b": [2, 3], "a": 1}
    assert calibration_hash(doc) == "efbd0040190fb087"
    assert calibration_hash(dict(doc, content_hash="whatever")) == "efbd0040190fb087"


def test_a_file_without_ref_long_side_is_in_1024_px(tmp_path: Path):
    """ref_long_side defaults to the paper's 1024 px (older files): GE 0.1 px at 256 px is
    0.4 reference px, which meets ge_norm_max 0.4 and fails 0.39."""
    doc = {"thresholds": {"F": {"ir_min": 0.97, "ge_norm_max": 0.4}}}
    cal = load_calibration(str(_write(tmp_path / "old.json", doc)))
    assert cal.ref_long_side == 1024.0 and cal.long_side is None and cal.backend is None
    assert calibrated_pass(1.0, 0.1, 256, "F", cal.thresholds, cal.ref_long_side) is True
    tight = {"F": {"ir_min": 0.97, "ge_norm_max": 0.39}}
    assert calibrated_pass(1.0, 0.1, 256, "F", tight, cal.ref_long_side) is False


def test_a_file_without_ge_norm_max_is_refused(tmp_path: Path):
    path = _write(tmp_path / "half.json", {"thresholds": {"H": {"ir_min": 0.9}}})
    with pytest.raises(ConfigError, match="is not a calibration"):
        load_calibration(str(path))


def test_a_file_without_content_hash_loads_silently(tmp_path: Path):
    doc = {"thresholds": {"H": {"ir_min": 0.9, "ge_norm_max": 1.0}}}
    path = _write(tmp_path / "nohash.json", doc, with_hash=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cal = load_calibration(str(path))
    assert cal.hash == calibration_hash(doc)


def test_torch_sift_uses_the_kornia_sift_file():
    cal = load_calibration("default", "torch-sift")
    assert cal.name == "default:kornia-sift" and cal.backend == "kornia-sift"
    assert load_calibration("default", None).name == "default:opencv-sift"
    assert cal.record(None)["backend_matches"] is True  # no backend given: nothing to mismatch
    assert cal.record("torch-sift")["backend_matches"] is False


def test_pin_refuses_another_hash_and_keeps_a_matching_one(tmp_path: Path):
    path = _write(tmp_path / "c.json", {"thresholds": {"H": {"ir_min": 0.9,
                                                              "ge_norm_max": 1.0}}})
    cfg = GeoConConfig().replace(background={"calibration": str(path)})
    pinned = pin_calibration(cfg)
    digest = load_calibration(str(path)).hash
    assert pinned.background.calibration_hash == digest
    assert pin_calibration(pinned) is pinned
    wrong = cfg.replace(background={"calibration_hash": "0" * 16})
    with pytest.raises(ConfigError, match="calibration changed"):
        pin_calibration(wrong)


def test_every_ge_statistic_is_scaled_to_reference_px():
    """At 256 px (scale 4): GE 0.1 -> 0.4, fine 0.05 -> 0.2, peak 0.15 -> 0.6, spread 0.4,
    GE_H 0.2 -> 0.8; the parallax (already reference px) is kept."""
    s = clip_statistics(0.95, 0.1, 4.0, ge_fine_px=0.05, ge_peak_px=0.15, ge_h_px=0.2,
                        parallax_ref=30.0)
    want = {"ir": 0.95, "ge_norm": 0.4, "ge_fine_norm": 0.2, "ge_peak_norm": 0.6,
            "ge_spread_norm": 0.4, "ge_h_norm": 0.8, "parallax_ref": 30.0}
    assert s == pytest.approx(want, rel=1e-12)
    absent = clip_statistics(0.95, 0.1, 4.0)
    assert absent["ge_h_norm"] == float("inf") and absent["parallax_ref"] == float("inf")
    assert absent["ge_spread_norm"] == 0.0


def test_normalised_ge_uses_the_files_reference_side():
    out = normalised_ge(torch.tensor([0.1, 0.3]), torch.tensor([256, 512]), ref_long_side=512)
    torch.testing.assert_close(out, torch.tensor([0.2, 0.3]))


def test_spread_is_never_negative():
    """A peak below the fine GE (callers passing their own values) is a spread of 0, which
    meets any spread bound."""
    assert spread_of(0.5, 0.1) == 0.0
    th = {"H": {"ir_min": 0.9, "ge_norm_max": 5.0, "ge_spread_norm_max": 0.2}}
    assert calibrated_pass(1.0, 0.3, 1024, "H", th, ge_fine_px=0.5, ge_peak_px=0.1) is True


def test_absent_ge_h_meets_its_lower_bound():
    th = {"F": {"ir_min": 0.9, "ge_norm_max": 1.0, "ge_h_norm_min": 0.5}}
    assert calibrated_pass(1.0, 0.1, 1024, "F", th) is True  # no valid H pair
    assert calibrated_pass(1.0, 0.1, 1024, "F", th, ge_h_px=0.4) is False


def test_a_regime_without_bounds_has_no_verdict():
    th = {"F": {"ir_min": 0.9, "ge_norm_max": 1.0}}
    assert calibrated_pass(1.0, 0.1, 1024, "H", th) is None
    assert calibrated_pass(1.0, 0.1, 1024, "U", th) is None
    assert calibrated_pass(1.0, 0.1, 1024, None, th) is None


def test_the_f_regime_fits_a_parallax_bound_and_h_does_not():
    assert [k for k, _, _ in REGIME_BOUNDS["H"]] == ["ir_min", "ge_norm_max",
                                                      "ge_fine_norm_max", "ge_spread_norm_max"]
    assert [k for k, _, _ in REGIME_BOUNDS["F"]][-1] == "parallax_ref_min"
    rows = []
    for k, par in enumerate((40.0, 50.0, 60.0, 5.0, 6.0)):
        rows.append({"status": "ok", "regime": "F", "ir": 1.0, "long_side": 1024,
                     "ge_px": 0.1, "ge_fine_px": 0.1, "ge_peak_px": 0.1, "parallax_ref": par,
                     "corruption": None if k < 3 else "breathing", "severity": 0.0 if k < 3
                     else 1.0})
    clean = [r for r in rows if r["corruption"] is None]
    bad = [r for r in rows if r["corruption"] is not None]
    th = fit_regime(clean, bad, "F", 0.0)
    assert th["parallax_ref_min"] == pytest.approx(23.0)  # half way between 6 and 40
    assert th["false_pass"] == 0.0 and th["true_pass"] == 1.0


def test_a_result_records_its_bounds_at_the_working_resolution(tmp_path: Path):
    """Long side 256 px, file at 1024: GE-type bounds / 4 in px, the parallax bound as is."""
    path = _write(tmp_path / "all.json", {"ref_long_side": 1024, "long_side": 256,
                                          "backend": "opencv-sift",
                                          "thresholds": {"F": ALL_BOUNDS}})
    cfg = GeoConConfig().replace(background={"calibration": str(path)})
    block: Dict[str, Any] = {"status": "ok", "ir": 0.95, "ge_px": 0.1, "ge_fine_px": 0.1,
                             "ge_peak_px": 0.2, "ge_h_px": 0.2}
    out = BackgroundBlock(block, {"evidence": {"magnitude_ref_px": 25.0}}, regime="F",
                          backends={"features": "opencv-sift"})
    _calibrated(block, out, 256, cfg)
    rec = block["calibration"]["thresholds"]
    assert rec == pytest.approx({"regime": "F", "ir": 0.9, "ge_px": 0.2, "ge_norm_max": 0.8,
                                 "ge_fine_px": 0.15, "ge_peak_px": 0.3, "ge_spread_px": 0.1,
                                 "ge_h_px_min": 0.125, "parallax_ref_min": 20.0})
    # 0.1 px -> 0.4 ref px <= 0.8, fine 0.4 <= 0.6, spread 0.4 <= 0.4, GE_H 0.8 >= 0.5,
    # parallax 25 >= 20, peak 0.8 <= 1.2: every bound met
    assert block["parallax_ref"] == 25.0 and block["pass_calibrated"] is True
    block2 = dict(block, ge_peak_px=0.21)  # spread 0.44 ref px > 0.4
    _calibrated(block2, out, 256, cfg)
    assert block2["pass_calibrated"] is False
