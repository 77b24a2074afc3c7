"""The background's features fallback (``features.fallback``, issue 22 item 4): a clip the
scoring backend (opencv-sift on the CPU) leaves with too little texture (< 30 matches per pair)
is re-matched with Shi-Tomasi + OpenCV LK tracks; every other clip is scored as before.

The low-texture clips are grounded scenes at 120 x 160 px (8 frames) with their contrast cut to
a tenth around the mean (what small, smooth generated clips look like to SIFT: 0 matches per
pair). The scenes are rigid, so the true GE is 0 px: on the full-contrast clip SIFT measures
0.048 px (pan, H) and 0.046 px (translation, F).
"""
import pytest
import torch

from geocon_torch import score_clip, score_clips
from geocon_torch.config import FeatureConfig, GeoConConfig
from geocon_torch.errors import ConfigError
from geocon_torch.features import extract_correspondences
from geocon_torch.io import clip_from_tensor
from geocon_torch.report.explain import calibrated_lines
from geocon_torch.report.text import calibrated_verdict
from geocon_torch.sections import background as bg
from geocon_torch.synth import apply_corruption, grounded_clip

from helpers import break_backend, low_contrast

CFG = {"features": {"mutual": True}}
OFF = {"features": {"mutual": True, "fallback": None}}


@pytest.fixture(scope="module")
def scenes():
    """(pan: H truth, translation: F truth) grounded clips, 160 px long side, 8 frames."""
    return {"H": grounded_clip("C2", num_frames=8, size=(120, 160), motion="pan").frames,
            "F": grounded_clip("C3", num_frames=8, size=(120, 160)).frames}


@pytest.mark.parametrize("regime", ["H", "F"])
def test_low_texture_clip_is_scored_by_the_fallback(scenes, regime):
    low = low_contrast(scenes[regime])
    off = score_clip(low, config=OFF, preset="background", device="cpu").to_dict()
    assert off["status"] == "not_applicable"
    assert off["reason"].startswith("too little texture: median 0 matches per pair")
    assert "fallback" not in off["background"]

    d = score_clip(low, config=CFG, preset="background", device="cpu").to_dict()
    b = d["background"]
    assert d["status"] == "ok" and d["regime"] == regime == d["gate"]["decision"]
    assert b["ir"] >= 0.99 and b["ge_px"] < 0.1  # truth 0 px; SIFT at full contrast ~0.05
    assert b["valid_pairs"] >= 20 and b["pass"] is True
    assert d["backends"]["features"] == "lk-tracks"
    assert d["backends"]["features_fallback_from"] == "opencv-sift"
    assert d["backends"]["scale_mode"] == "pyramid"
    assert b["fallback"] == {"from": "opencv-sift", "backend": "lk-tracks", "status": "ok",
                             "reason": None, "from_reason": off["reason"]}
    # no lk-tracks calibration is shipped: no calibrated verdict, and it says why
    assert b["pass_calibrated"] is None
    assert "no calibration for features backend lk-tracks" in b["pass_calibrated_reason"]
    assert "thresholds" not in b["calibration"]
    assert calibrated_verdict(b).endswith(f"({b['pass_calibrated_reason']})")
    assert calibrated_lines(b)[0].endswith(f": n/a ({b['pass_calibrated_reason']})")
    assert d["config"]["features"]["fallback"] == "lk-tracks"

    # what the fallback measures moves with the inconsistency: a rubber-sheet warp of the same
    # low-contrast scene more than doubles GE
    warped = low_contrast(apply_corruption(scenes[regime], "rubber_sheet", 0.6, seed=0))
    w = score_clip(warped, config=CFG, preset="background", device="cpu").to_dict()
    assert w["status"] == "ok" and w["backends"]["features"] == "lk-tracks"
    assert w["background"]["ge_px"] > 2.0 * b["ge_px"]


def test_blank_clip_still_has_too_little_texture():
    grey = torch.full((6, 3, 120, 160), 128, dtype=torch.uint8)
    d = score_clip(grey, config=CFG, preset="background", device="cpu").to_dict()
    b = d["background"]
    assert d["status"] == "not_applicable" and d["reason"].startswith("too little texture")
    assert "lk-tracks fallback: too little texture: median 0 matches" in d["reason"]
    assert b.get("ir") is None and b.get("ge_px") is None
    assert b["fallback"]["status"] == "not_applicable" and b["fallback"]["backend"] == "lk-tracks"
    assert d["backends"]["features"] == "opencv-sift" and "features_fallback_from" not in \
        d["backends"]


def test_noise_clip_has_no_correspondences_for_the_guarded_fallback():
    """Independent noise frames: LK alone keeps forward-backward-consistent "tracks" (IR_F
    0.95, GE 0.70 px without the guard), the NCC guard of the fallback none of them."""
    g = torch.Generator().manual_seed(0)
    noise = torch.randint(0, 256, (6, 3, 120, 160), generator=g, dtype=torch.uint8)
    d = score_clip(noise, config=CFG, preset="background", device="cpu").to_dict()
    assert d["status"] == "not_applicable"
    assert "lk-tracks fallback: too little texture: median 0 matches" in d["reason"]


def test_ncc_guard_of_lk_tracks(scenes):
    """``features.lk.min_ncc``: the photometric guard keeps the tracks of real content (99 %
    at 0.5, 95 % at 0.8 on the low-contrast scene) and drops every track between independent
    noise frames (206, 173, 57 unguarded)."""
    g = torch.Generator().manual_seed(0)
    noise = torch.randint(0, 256, (6, 3, 120, 160), generator=g, dtype=torch.uint8)
    low = low_contrast(scenes["F"])
    pairs = torch.tensor([[0, 1], [1, 2], [2, 3]])
    counts = {}
    for name, frames in (("noise", noise), ("low", low)):
        clip = clip_from_tensor(frames, long_side=None)
        for ncc in (-1.0, 0.5, 0.8):
            feats = FeatureConfig(backend="lk-tracks", scales=(1.0,),
                                  lk={"backend": "opencv", "min_ncc": ncc})
            c = extract_correspondences(clip, pairs, feats, device="cpu")[1.0]
            counts[name, ncc] = c.mask.sum(1).tolist()
    assert min(counts["noise", -1.0]) >= 30 and counts["noise", 0.5] == [0, 0, 0]
    for ncc, share in ((0.5, 0.98), (0.8, 0.9)):  # of the unguarded tracks
        kept = sum(counts["low", ncc]) / sum(counts["low", -1.0])
        assert min(counts["low", ncc]) >= 300 and kept > share, ncc


def test_sift_scored_clips_are_unchanged_and_the_fallback_is_one_batch(scenes, monkeypatch):
    """A batch of [low-contrast pan, full-contrast translation, low-contrast translation]: the
    SIFT-scored clip's background equals the one scored with the fallback off, and the two
    low-texture clips are re-matched in one lk-tracks feature call (16 frames)."""
    calls = []
    real = bg.extract_correspondences

    def spy(clip, pairs, features, **kw):
        calls.append((features.backend, features.lk.backend, clip.num_frames))
        return real(clip, pairs, features, **kw)

    monkeypatch.setattr(bg, "extract_correspondences", spy)
    clips = [low_contrast(scenes["H"]), scenes["F"], low_contrast(scenes["F"])]
    got = score_clips(clips, config=CFG, preset="background", device="cpu")
    assert calls == [("opencv-sift", "torch", 24), ("lk-tracks", "opencv", 16)]  # "auto" pinned
    assert [r.status for r in got] == ["ok", "ok", "ok"]
    assert [r.backends["features"] for r in got] == ["lk-tracks", "opencv-sift", "lk-tracks"]
    ref = score_clip(scenes["F"], config=OFF, preset="background", device="cpu").to_dict()
    mid = got[1].to_dict()
    assert mid["background"] == ref["background"] and mid["gate"] == ref["gate"]
    assert "fallback" not in mid["background"]
    assert mid["background"]["pass_calibrated"] is not None  # SIFT: the shipped calibration
    alone = score_clip(clips[2], config=CFG, preset="background", device="cpu").to_dict()
    assert got[2].to_dict()["background"] == alone["background"]


def test_a_failing_fallback_keeps_the_first_result_and_the_batch(scenes, monkeypatch):
    """The fallback's rescoring raising (here its feature stage, as a backend without its
    checkpoint would) loses nothing: the low-texture clip keeps its not_applicable result with
    the error in ``background.fallback`` and its reason, the SIFT-scored clip beside it is
    scored as with the fallback off."""
    break_backend(monkeypatch, "lk-tracks")
    low = low_contrast(scenes["H"])
    got = score_clips([low, scenes["F"]], config=CFG, preset="background", device="cpu")
    d, mid = (r.to_dict() for r in got)
    first = "too little texture: median 0 matches per pair"
    why = "CheckpointError: the 'lk-tracks' backend needs a local checkpoint"
    fell = d["background"]["fallback"]
    assert d["status"] == "not_applicable" and d["backends"]["features"] == "opencv-sift"
    assert fell["from_reason"].startswith(first)
    assert d["reason"] == f"{fell['from_reason']}; lk-tracks fallback: {why}"
    assert fell == {"from": "opencv-sift", "from_reason": fell["from_reason"],
                    "backend": "lk-tracks", "status": "error", "reason": why}
    ref = score_clip(scenes["F"], config=OFF, preset="background", device="cpu").to_dict()
    assert mid["status"] == "ok" and mid["background"] == ref["background"]
    assert mid["gate"] == ref["gate"]


def test_fallback_knob_config_and_hash():
    cfg = GeoConConfig()
    assert cfg.features.fallback == "lk-tracks"
    off = cfg.replace(features={"fallback": None})
    assert off.features.fallback is None and off.config_hash() != cfg.config_hash()
    assert GeoConConfig.from_dict(off.to_dict()).config_hash() == off.config_hash()
    with pytest.raises(ConfigError, match="features.fallback"):
        cfg.replace(features={"fallback": "auto"})
    fb = bg.fallback_config(cfg, torch.device("cpu"))
    assert fb.features.backend == "lk-tracks" and fb.features.lk.backend == "opencv"
    assert fb.features.lk.min_ncc == 0.5 and cfg.features.lk.min_ncc == -1.0
    assert fb.features.fallback is None and fb.features.scale_mode == "auto"
    assert fb.background == cfg.background and fb.gate == cfg.gate
    assert bg.fallback_config(off) is None
    assert bg.fallback_config(cfg.replace(features={"backend": "lk-tracks"})) is None


def test_fallback_of_a_checkpoint_backend_drops_the_checkpoint(tmp_path):
    """The scoring backend's checkpoint is not the fallback's: the fallback config drops it (it
    was a ConfigError that escaped score_clips for a batch with one textureless clip)."""
    ckpt = tmp_path / "disk.pth"
    ckpt.write_bytes(b"weights")
    cfg = GeoConConfig().replace(features={"backend": "disk", "checkpoint": str(ckpt),
                                           "checkpoint_sha256": "ab" * 32})
    fb = bg.fallback_config(cfg, torch.device("cpu"))
    assert fb.features.backend == "lk-tracks"
    assert fb.features.checkpoint is None and fb.features.checkpoint_sha256 is None
