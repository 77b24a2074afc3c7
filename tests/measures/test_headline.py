"""The headline score (``result["score"]``, geocon_torch.measures.headline): closed-form terms
and fold, in [0, 1], in every scored result, and monotone in the severity of grounded
corruptions."""
import math

import pytest

from geocon_torch import score_clip
from geocon_torch.measures.headline import (FEW_VALID_PAIRS, GE_SCALE_PX, fold_terms,
                                            headline_score, headline_terms)
from geocon_torch.result import ClipResult
from geocon_torch.synth import render_scene


def _result(**blocks):
    base = {"status": "ok", "working_size": [256, 512]}
    base.update(blocks)
    return base


def test_terms_and_fold_closed_form():
    res = _result(epipolar={"status": "ok", "feature_match_coverage": 0.5,
                            "epipolar_inlier_rate": 0.8},
                  background={"status": "ok", "ge_px": 0.35},  # 0.7 px at 1024
                  foreground={"status": "ok", "objects": [{"adadfrc_mean": 0.25},
                                                          {"adadfrc_mean": 1.0}]})
    terms = headline_terms(res)
    assert terms["match"] == 0.5 and terms["inliers"] == 0.8
    assert terms["ge"] == pytest.approx(math.exp(-0.7 / GE_SCALE_PX))
    # sqrt(1) px * 2 = 2 px at 1024, 0.5 px above the 1.5-px rigid floor
    assert terms["rigidity"] == pytest.approx(math.exp(-0.5 / GE_SCALE_PX))
    # weights: match 1, inliers 2, ge 1, rigidity 0.25
    want = math.exp((math.log(0.5) + 2 * math.log(0.8) - 0.7 / GE_SCALE_PX
                     - 0.25 * 0.5 / GE_SCALE_PX) / 4.25)
    assert headline_score(res) == pytest.approx(want)
    # too few valid pairs: GE = tau_H (2 px at 512 = 4 px at 1024)
    res["background"] = {"status": "not_applicable", "pairs": 4, "ge_px": None,
                         "reason": f"{FEW_VALID_PAIRS}: 0 of 4 (pair, scale) entries ..."}
    assert headline_terms(res)["ge"] == pytest.approx(math.exp(-4.0 / GE_SCALE_PX))
    # nothing to fit (too little texture, frames too small): no evidence, no ge term
    for reason in ("too little texture: median 3 matches per pair", "frames too small"):
        res["background"] = {"status": "not_applicable", "pairs": 4, "reason": reason}
        assert "ge" not in headline_terms(res)
    # a block that is not ok (and not tried on pairs) contributes nothing; an error or no
    # term is no score
    res["background"] = {"status": "not_applicable", "pairs": 0}
    assert set(headline_terms(res)) == {"match", "inliers", "rigidity"}
    assert headline_score(dict(res, status="error")) is None
    assert headline_score(_result()) is None
    assert fold_terms({"match": 0.0, "inliers": 1.0}) == 0.0


def test_rigidity_term_takes_the_root_of_the_largest_d():
    """``rigidity = exp(-max(sqrt(D_norm) - 1.5 px, 0) / ge_scale)``: D is in px^2, the term
    reads px. At the working long side 512 a px is 2 px at 1024, so D = 4 px^2 (the largest)
    -> 2 px -> 4 px -> 2.5 px above the rigid floor, D = 1.5625 px^2 -> 1.25 px -> 2.5 px ->
    1 px, and D = 0.25 px^2 -> 0.5 px -> 1 px, under the floor (values where sqrt(D) != D)."""
    for ds, px in (([0.25, 4.0, 2.25], 2.5), ([1.5625], 1.0), ([0.25], 0.0), ([0.09, -1.0], 0.0)):
        fg = {"status": "ok", "objects": [{"adadfrc_mean": d} for d in ds]}
        terms = headline_terms(_result(background={"status": "ok", "ge_px": 0.0}, foreground=fg))
        assert terms == {"ge": 1.0,
                         "rigidity": pytest.approx(math.exp(-px / GE_SCALE_PX), rel=1e-12)}
        # alone, rigidity is no term and no score
        assert headline_terms(_result(foreground=fg)) == {}
        assert headline_score(_result(foreground=fg)) is None
    # with the ge term (weights 1 and 0.25): 0.35 px at 512 -> 0.7 px at 1024
    res = _result(background={"status": "ok", "ge_px": 0.35},
                  foreground={"status": "ok", "objects": [{"adadfrc_mean": 4.0}]})
    want = math.exp(-(0.7 + 0.25 * 2.5) / GE_SCALE_PX / 1.25)
    assert headline_score(res) == pytest.approx(want, rel=1e-12)


def test_score_in_the_result_and_round_trip():
    clip = render_scene("C1", num_frames=5, size=(120, 160), seed=0)
    res = score_clip(clip.frames, preset="all", device="cpu")
    d = res.to_dict()
    assert 0.0 <= d["score"] <= 1.0 and d["score"] == headline_score(d)
    assert set(d["score_terms"]) == {"match", "inliers", "ge"}
    assert ClipResult.from_dict(d).score == d["score"]


def test_textureless_clip_has_no_score():
    """A flat clip is not_applicable with its reason and no score (never a made-up number that
    depends on the working size); a clip whose frames do not match each other keeps one."""
    import torch
    flat = torch.full((6, 3, 96, 128), 128, dtype=torch.uint8)
    for side in (128, 256):
        d = score_clip(flat, preset="background", device="cpu",
                       config={"io": {"long_side": side}}).to_dict()
        assert d["status"] == "not_applicable" and "texture" in d["reason"]
        assert d["score"] is None and not d["score_terms"]


def test_error_results_have_empty_score_terms(tmp_path):
    """Every result carries ``score_terms`` ({} when nothing was scored), errors too."""
    bad = tmp_path / "broken.mp4"
    bad.write_bytes(b"not a video")
    from geocon_torch import score_clips

    (res,) = score_clips([bad], preset="background", device="cpu")
    d = res.to_dict()
    assert d["status"] == "error" and d["score"] is None and d["score_terms"] == {}


def _scores(category, kind, severities, size=(144, 192), frames=6):
    out = []
    for sev in severities:
        clip = render_scene(category, num_frames=frames, size=size, seed=0,
                            corruption=kind if sev else None, severity=float(sev))
        masks = clip.masks if clip.masks.shape[1] else None
        out.append(score_clip(clip.frames, masks=masks, preset="all", device="cpu").score)
    return out


@pytest.mark.parametrize("category,kind", [("C1", "rubber_sheet"), ("C3", "flicker")])
def test_score_falls_with_severity(category, kind):
    """Severity 0 / 0.5 / 1 of a grounded corruption: the score falls at each step."""
    s = _scores(category, kind, (0.0, 0.5, 1.0))
    assert s[0] > s[1] > s[2], s


@pytest.mark.slow
@pytest.mark.parametrize("category,kind", [("C1", "breathing"), ("C3", "rubber_sheet"),
                                           ("C4", "nonrigid_object"), ("C4", "flicker")])
def test_score_falls_with_severity_more(category, kind):
    s = _scores(category, kind, (0.0, 0.5, 1.0))
    assert s[0] > s[1] > s[2], s
