"""Surfaces audit s33 (F1, F3, F4, F6): the ``geocon score`` / ``demo`` table and the store's flat
rows / CSV. The table printed IR / GE / score with 3 decimals beside a verdict they contradicted
(IR 32/33 as "0.970" next to pass "no"), read no number of a preset "gvgc" clip (its block is
``epipolar``), said 0 objects for a result without a foreground block and hid an ok clip's
warnings; the flat rows had no GVGC / Epipolar-DPO column and the same 0 objects."""
from __future__ import annotations

import csv
import io
from pathlib import Path

from geocon_torch.bench import stats
from geocon_torch.bench.store import FLAT_COLUMNS, flatten_row, write_csv
from geocon_torch.commands._common import SUMMARY_COLUMNS, print_table, summary_row
from helpers import fake_result

#: the flat columns before the fix, in order: none of them moves
OLD_FLAT = (
    "clip_id", "generator", "generator_version", "prompt_category", "behaviour", "prompt", "seed",
    "scene", "status", "reason", "regime", "score", "frozen", "ir", "ge_px", "ir_h", "ge_h_px",
    "ir_f", "ge_f_px", "valid_pairs", "pairs", "background_pass", "background_pass_calibrated",
    "gate_method", "gate_statistic", "gate_decision", "num_objects", "adadfrc_mean",
    "adap90_max", "epipolar_error", "epipolar_error_score", "epipolar_inlier_rate",
    "feature_match_coverage", "lost_frames", "warnings", "content_hash", "config_hash",
    "schema_version", "version", "path",
)
NEW_FLAT = ("gvgc_median_error", "gvgc_keep_rate", "dpo_mean_epipolar_error",
            "dpo_mean_inlier_rate")


def _row(res: dict) -> dict:
    return dict(zip(SUMMARY_COLUMNS, summary_row({"clip": "c", "status": "ok", **res})))


def _bg(ir: float, ge: float, **more) -> dict:
    """A background block whose paper verdict follows the default gate (IR >= 0.97, GE <= 3.5)."""
    return {"ir": ir, "ge_px": ge, "pass": ir >= 0.97 and ge <= 3.5, **more}


# --- F1: as many digits as tell a value from its threshold -----------------------------------
def test_table_ir_and_ge_never_print_as_the_threshold_they_fail():
    ir_fail = _row({"background": _bg(32 / 33, 0.2)})
    assert ir_fail["pass"] == "no/-" and ir_fail["IR"] != "0.970"
    assert float(ir_fail["IR"]) < 0.97 and ir_fail["IR"] == "0.9697"
    ge_fail = _row({"background": _bg(1.0, 3.5004)})
    assert ge_fail["pass"] == "no/-" and float(ge_fail["GE px"]) > 3.5
    assert ge_fail["GE px"] == "3.5004"
    ordinary = _row({"score": 0.91234, "background": _bg(0.95123, 0.25)})
    assert (ordinary["score"], ordinary["IR"], ordinary["GE px"]) == ("0.912", "0.951", "0.250")


def test_table_score_near_one_never_reads_one():
    row = _row({"score": 0.9996, "background": _bg(0.99996, 0.1)})
    assert row["score"] == "0.9996" and row["IR"] == "0.99996"
    assert _row({"score": 1.0})["score"] == "1.000"


def test_table_thresholds_come_from_the_stored_config_and_the_calibration():
    cfg = {"background": {"report_ir": 0.9, "report_ge_px": 2.0}}
    row = _row({"config": cfg, "background": {"ir": 0.89996, "ge_px": 2.00004, "pass": False}})
    assert (row["IR"], row["GE px"]) == ("0.89996", "2.00004")
    cal = {"thresholds": {"regime": "H", "ir": 0.9299362897872925, "ge_px": 0.2722560316324234}}
    row = _row({"background": {"ir": 0.92991, "ge_px": 0.27229, "pass": False,
                               "pass_calibrated": False, "calibration": cal}})
    assert (row["IR"], row["GE px"], row["pass"]) == ("0.92991", "0.27229", "no/no")
    # an unreadable config (an unknown key) falls back to the paper's thresholds
    row = _row({"config": {"no_such_section": {}}, "background": _bg(32 / 33, 0.2)})
    assert row["IR"] == "0.9697"


# --- F3: preset gvgc writes its block as "epipolar" -------------------------------------------
GVGC_BLOCK = {"mean_error": 0.5826, "median_error": 0.32316458774823387, "rmse": 0.9,
              "mae": 0.58, "keep_rate": 0.6211159221903019, "preset": "gvgc", "status": "ok",
              "reason": None, "implementation": "opencv"}
DPO_BLOCK = {"mean_epipolar_error": 0.12980458813749465, "mean_inlier_rate": 1.0,
             "preset": "epipolar-dpo", "status": "ok", "reason": None}


def test_table_reads_the_gvgc_preset_block():
    row = _row({"epipolar": dict(GVGC_BLOCK), "score": None})
    assert (row["epi err"], row["epi inl"]) == ("0.323", "0.621")
    both = _row({"epipolar": {"epipolar_error": 0.1, "epipolar_inlier_rate": 0.9},
                 "epipolar_gvgc": dict(GVGC_BLOCK)})  # preset "all": WorldAtlas first
    assert (both["epi err"], both["epi inl"]) == ("0.100", "0.900")


def test_flat_rows_carry_gvgc_and_dpo_numbers_and_keep_the_old_columns():
    assert FLAT_COLUMNS[:len(OLD_FLAT)] == OLD_FLAT and FLAT_COLUMNS[len(OLD_FLAT):] == NEW_FLAT
    gvgc = flatten_row({"clip_id": "g", "result": {**fake_result("g"),
                                                   "epipolar": dict(GVGC_BLOCK)}})
    assert (gvgc["gvgc_median_error"], gvgc["gvgc_keep_rate"]) == (
        GVGC_BLOCK["median_error"], GVGC_BLOCK["keep_rate"])
    assert gvgc["epipolar_error"] is None and gvgc["dpo_mean_epipolar_error"] is None
    everything = flatten_row({"clip_id": "a", "result": {
        **fake_result("a"), "epipolar_gvgc": {**GVGC_BLOCK, "median_error": 0.25},
        "epipolar_dpo": dict(DPO_BLOCK)}})
    assert everything["epipolar_error"] == 0.5 and everything["gvgc_median_error"] == 0.25
    assert (everything["dpo_mean_epipolar_error"], everything["dpo_mean_inlier_rate"]) == (
        DPO_BLOCK["mean_epipolar_error"], 1.0)
    plain = flatten_row({"clip_id": "p", "result": fake_result("p")})
    assert [plain[k] for k in NEW_FLAT] == [None] * 4
    before = flatten_row({"clip_id": "p", "result": fake_result("p", objects=(0.3,))})
    assert {k: before[k] for k in OLD_FLAT}["epipolar_inlier_rate"] == 0.8


# --- F4: no foreground block -> no object count --------------------------------------------
def test_no_foreground_block_is_no_object_count(tmp_path: Path):
    res = fake_result("bg", objects=())
    del res["foreground"]  # preset "background": the section did not run
    assert _row(res)["objects"] == "-"
    flat = flatten_row({"clip_id": "bg", "result": res})
    assert flat["num_objects"] is None
    ran = fake_result("fg", objects=())  # the foreground ran and found nothing: 0
    assert _row(ran)["objects"] == "0"
    assert flatten_row({"clip_id": "fg", "result": ran})["num_objects"] == 0
    write_csv(tmp_path / "t.csv", [flat, flatten_row({"clip_id": "fg", "result": ran})])
    with (tmp_path / "t.csv").open() as fh:
        cells = [r["num_objects"] for r in csv.DictReader(fh)]
    assert cells == ["", "0"]
    rows = [{"clip_id": c, "generator": "g", "scene": c, "result": r}
            for c, r in (("bg", res), ("fg", ran))]
    assert stats.scene_balanced(rows, "num_objects", n_boot=20)[0]["n_clips"] == 1
    assert len(stats.table1(rows, n_boot=20)) == 1


# --- F6: an ok clip's warnings in the reason column ----------------------------------------
HELD = ("6 of 12 frames repeat the previous frame (held frames): pairs of two identical frames "
        "are not scored")


def test_ok_clip_warnings_show_in_the_reason_column():
    one = _row({"warnings": [HELD]})["reason"]
    assert one.startswith("warning: 6 of 12 frames repeat the previous frame") and "+" not in one
    assert one.endswith("...") and len(one) <= len("warning: ") + 60
    three = _row({"warnings": ["lost 2 of 40 frames", HELD, "variable frame rate"]})["reason"]
    assert three == "warning: lost 2 of 40 frames (+2 more)"
    assert _row({"warnings": []})["reason"] == "" and _row({})["reason"] == ""
    na = summary_row({"clip": "f", "status": "not_applicable", "reason": "no texture",
                      "warnings": [HELD]})
    assert na[-1] == "no texture"
    err = summary_row({"clip": "e", "status": "error", "reason": "VideoReadError: x",
                       "warnings": ["w"]})
    assert err[-1] == "VideoReadError: x"
    buf = io.StringIO()
    print_table([summary_row({"clip": "c", "status": "ok", "warnings": ["short one"]})],
                out=buf)
    assert buf.getvalue().splitlines()[2].endswith("warning: short one")
