"""Audit cards on a grounded clip: the drawn pair is the scored one (pair_evidence), its matches
obey the drawn model, masks are drawn."""
from __future__ import annotations

import json
from pathlib import Path


from geocon_torch.bench import file_key
from geocon_torch.config import GeoConConfig
from geocon_torch.geometry import sampson_distance, symmetric_transfer_error
from geocon_torch.pipeline import score_clip
from geocon_torch.report import audit_card, pair_evidence

CFG = GeoConConfig().replace(io={"long_side": 192, "max_frames": 5})


def test_card_matches_obey_the_fitted_model(tmp_path: Path):
    from geocon_torch.synth import render_scene

    synth = render_scene("C4", num_frames=5, size=(144, 192), seed=0)
    synth.clip_id = "c4"
    synth.save(tmp_path)
    video, masks = tmp_path / "c4.mp4", tmp_path / "c4_masks.npz"
    res = score_clip(str(video), masks=str(masks), config=CFG).to_dict()
    assert res["status"] == "ok" and res["regime"] == "H"
    d = pair_evidence(res, 0, masks=str(masks))
    i, j = d.pair
    assert j == i + 1 and d.x1.shape == d.x2.shape and d.inliers.sum() >= 30
    x1, x2 = d.x1.double()[None], d.x2.double()[None]
    err = symmetric_transfer_error(d.H[None], x1, x2)[0]
    inl = d.inliers
    # inliers of the drawn homography are within tau_H = 2 px, and a static background is
    # explained almost entirely; the drawn inliers are the ones the stored IR counted
    assert d.model == "H" and float(err[inl].max()) <= CFG.background.tau_h + 1e-6
    assert float(inl.double().mean()) > 0.9
    stored = [r for r in res["background"]["per_pair"] if r["scale"] == 1.0][0]
    assert stored["pair"] == [i, j] and float(inl.float().mean()) == stored["ir_h"]
    # the epipolar lines drawn come from an F for which the inliers have small Sampson error
    samp = sampson_distance(d.F[None], x1, x2)[0]
    assert float(samp[inl].median()) < 1.0
    # masks removed: no drawn match lies on the moving object in frame i
    obj = d.objects.any(0)
    xy = d.x1.round().long()
    assert d.objects.shape[0] >= 1 and not bool(obj[xy[:, 1].clamp(0, 143),
                                                    xy[:, 0].clamp(0, 191)].any())
    row = {"clip_id": "c4", "generator": "synth", "prompt_category": "C4", "path": str(video),
           "entry_json": json.dumps({"masks_path": str(masks)}), "result": res}
    html = audit_card(row, tmp_path / "img", rel_to=tmp_path)
    key = file_key("c4", res.get("content_hash"), str(video))  # unique card file key
    for part in ("timeline", "matches", "epipolar", "masks"):
        assert (tmp_path / "img" / f"card_{key}_{part}.png").stat().st_size > 5_000, part
        assert f'src="img/card_{key}_{part}.png"' in html
    assert "gate method" in html and "drawings unavailable" not in html


def test_card_without_video_says_why(tmp_path: Path):
    res = {"schema_version": "1.0", "clip": "x", "status": "ok", "reason": None,
           "config_hash": "c", "path": str(tmp_path / "gone.mp4"), "regime": "H",
           "gate": {}, "background": {"ir": 0.9, "ge_px": 1.0}}
    html = audit_card({"clip_id": "x", "result": res}, tmp_path / "img")
    assert "drawings unavailable: VideoReadError" in html
    assert "no per-pair rows" in html


def test_card_facts_of_unscored_clips_say_not_scored():
    """A clip that was not scored (error / not_applicable) with a calibration configured is not
    "calibrated: off" (that is a result scored without one), and an error clip of a preset
    with the epipolar trio is not "preset without the epipolar trio"."""
    from geocon_torch.report.audit import _facts
    from geocon_torch.report.text import calibrated_verdict
    from geocon_torch.result import ClipResult

    cfg = GeoConConfig().with_preset("all")
    failed = ClipResult.failed("broken", "error", "VideoReadError: unreadable", cfg).to_dict()
    facts = dict(_facts({}, failed))
    assert calibrated_verdict(failed["background"]) == "calibrated: n/a (not scored)"
    assert facts["calibrated gate"] == "n/a (not scored)"
    assert "not scored" in facts["epipolar trio"]
    assert "preset without" not in facts["epipolar trio"]
    plain = ClipResult.failed("x", "error", "boom", GeoConConfig().with_preset("background"))
    assert "preset without the epipolar trio" in dict(_facts({}, plain.to_dict()))["epipolar trio"]
    scored_off = {"ir": 0.99, "ge_px": 0.3, "status": "ok"}  # scored without a calibration
    assert calibrated_verdict(scored_off) == "calibrated: off"
