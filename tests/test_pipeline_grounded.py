"""score_clip on grounded scenes with known geometry (issue 5 item 6) and the result schema.

Working resolution is 320 px (the synthetic clips' native size): every pixel threshold
(tau_H = 2 px, GE) is at that resolution. ``features.mutual`` is on: the ratio test alone lets
2-3 % many-to-one matches through on these repeated procedural textures.
"""
import json

import pytest

from geocon_torch import score_clip
from geocon_torch.result import SCHEMA_VERSION, ClipResult
from geocon_torch.synth import apply_corruption, grounded_clip

CFG = {"io": {"long_side": 320}, "features": {"mutual": True}}
SCHEMA_KEYS = {"schema_version", "clip", "path", "content_hash", "status", "reason", "regime",
               "gate", "background", "behaviour", "prompt_category", "config", "config_hash",
               "version", "backends", "timing_s"}
BG_KEYS = {"ir", "ge_px", "ir_h", "ge_h_px", "ir_f", "ge_f_px", "valid_pairs", "pairs", "pass",
           "per_pair", "status", "reason"}


@pytest.fixture(scope="module")
def rotation():
    return grounded_clip("C2", num_frames=6, motion="pan")


def test_pure_rotation_gates_h_and_fits_one_homography(rotation):
    res = score_clip(rotation.frames, config=CFG, preset="background")
    d = res.to_dict()
    assert d["status"] == "ok" and d["reason"] is None
    assert d["gate"]["decision"] == "H" and d["regime"] == "H"
    assert d["gate"]["method"] == "parallax"
    assert d["gate"]["statistic"] <= d["gate"]["thresholds"]["low"]
    b = d["background"]
    assert b["ir_h"] >= 0.99 and b["ir"] == b["ir_h"] and b["ge_px"] < 0.5
    assert b["pass"] is True and d["behaviour"] == "Rotation-dominant"
    assert b["valid_pairs"] >= 10 and b["pairs"] == 5 and len(b["per_pair"]) == 15
    # schema: JSON round trip, version, hashes, config recorded
    assert SCHEMA_KEYS <= set(d) and BG_KEYS <= set(b)
    text = res.to_json()
    back = json.loads(text)
    assert back["schema_version"] == SCHEMA_VERSION and len(back["config_hash"]) == 16
    assert back["content_hash"] and back["config"]["background"]["tau_h"] == 2.0
    assert ClipResult.from_dict(back).to_dict() == back
    assert d["backends"]["features"] == "opencv-sift" and d["backends"]["gate"] == "parallax"
    assert d["backends"]["scale_mode"] == "scale_space"


def test_lateral_translation_gates_f_and_h_fails():
    clip = grounded_clip("C3", num_frames=6, motion="truck", speed=0.15)
    d = score_clip(clip.frames, config=CFG, preset="background").to_dict()
    b = d["background"]
    assert d["gate"]["decision"] == "F" and d["regime"] == "F"
    assert b["ir"] == b["ir_f"] and b["ir_f"] - b["ir_h"] >= 0.1
    assert b["ge_f_px"] < 0.5 and d["behaviour"] == "Translation-dominant"


def test_pose_log_gate_and_rubber_sheet_lowers_ir_raises_ge(rotation):
    # the synthetic camera's first/last relative pose is the pose log (pure rotation: t = 0)
    rel = rotation.relative_pose(0, rotation.frames.shape[0] - 1)
    clean = score_clip(rotation.frames, poses=rel, config=CFG, preset="background").to_dict()
    warped = apply_corruption(rotation.frames, "rubber_sheet", 0.6, seed=0)
    bad = score_clip(warped, poses=rel, config=CFG, preset="background").to_dict()
    for d in (clean, bad):
        assert d["gate"]["method"] == "poses" and d["gate"]["decision"] == "H"
        assert d["gate"]["statistic"] == pytest.approx(0.0, abs=1e-9)
    cb, bb = clean["background"], bad["background"]
    assert bb["ir"] < cb["ir"] and bb["ge_px"] > cb["ge_px"]
    assert bb["ge_h_px"] > 2 * cb["ge_h_px"]
    assert bad["behaviour"] == "Stress" and cb["pass"] is True


@pytest.fixture(scope="module")
def moving():
    return grounded_clip("C4", num_frames=6)


def test_static_camera_moving_object_exact_masks(moving):
    d = score_clip(moving.frames, masks=moving.masks, config=CFG, preset="background").to_dict()
    assert d["backends"]["masks"] == "files" and d["regime"] == "H"
    assert d["background"]["ir"] >= 0.99
    assert d["behaviour"] == "StaticCam+MovingObjs"


def test_static_camera_moving_object_motion_masks(moving):
    d = score_clip(moving.frames, config=CFG, preset="background").to_dict()
    seg = d["background"]["segment"]
    assert d["backends"]["masks"] == "motion" and seg["objects"] >= 1
    assert d["background"]["ir"] >= 0.98
    # without masks the mover's matches are outliers of the background homography
    none = score_clip(moving.frames, config={**CFG, "segment": {"method": "none"}},
                      preset="background").to_dict()
    assert none["background"]["ir"] < d["background"]["ir"] - 0.02
    assert seg["removed_matches"] > 0 and seg["max_object_fraction"] < 0.2


def test_per_pair_gate_and_sensitivity_scan(rotation):
    cfg = {**CFG, "gate": {"per_pair": True}, "background": {"sensitivity": True},
           "segment": {"method": "none"}}
    d = score_clip(rotation.frames, config=cfg, preset="background").to_dict()
    assert len(d["gate"]["per_pair"]) == 5 and set(d["gate"]["per_pair"]) <= {"H", "F", "U"}
    assert d["regime"] == "H" and all(r["model"] == "H" for r in d["background"]["per_pair"])
    scan = d["background"]["sensitivity"]
    assert scan["tau_h"] == [0.5, 1.0, 2.0, 3.0, 4.0]
    ir_h = [v for v in scan["ir_h"] if v is not None]
    assert ir_h == sorted(ir_h)  # IR grows with the threshold
    assert scan["ir_h"][2] == pytest.approx(d["background"]["ir_h"])
