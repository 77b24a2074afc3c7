"""Session 28 fgseg audit F6 / F7: given masks that leave no background, and the rigidity term's
rigid floor.

F6: masks that cover (nearly) the whole frame of a textured clip are named as the cause (not
"too little texture"), the lk-tracks fallback is not run for them, and the clip gets no
headline score from the rigidity term alone. F7: a rigid mover's rigidity term is 1 at every
working size (its flow noise lies under :data:`RIGID_FLOOR_PX`), the term of a deforming
object means the same at 256 and 512 px and falls with the ``nonrigid_object`` severity."""
import math

import pytest
import torch
import torch.nn.functional as F

from geocon_torch import score_clip
from geocon_torch.io import clip_from_tensor
from geocon_torch.measures.headline import (GE_SCALE_PX, MASKED_AWAY, RIGID_FLOOR_PX,
                                            headline_score, headline_terms)
from geocon_torch.sections.foreground import foreground_block
from geocon_torch.synth import render_scene


def _textured(frames=5, h=96, w=128):
    """A static, richly textured scene (smooth colour noise): ~100 SIFT matches per pair."""
    g = torch.Generator().manual_seed(0)
    t = F.avg_pool2d(F.avg_pool2d(torch.rand(1, 3, h, w, generator=g), 5, 1, 2), 3, 1, 1)[0]
    still = ((t - t.amin()) / (t.amax() - t.amin()) * 255).round().to(torch.uint8)
    return still.expand(frames, 3, h, w).clone()


# ------------------------------------------------------------------------------------- F6

@pytest.mark.parametrize("strip", [0, 4])
def test_masks_that_leave_no_background_are_named_and_not_rescored(strip):
    """Masks over the whole frame (or all but a 4-px strip): the reason names the masks and
    both medians (before / after masking), no lk-tracks fallback ran, and the clip has no
    score (its only term would be rigidity: a static object, term ~1)."""
    frames = _textured()
    masks = torch.zeros(5, 1, 96, 128, dtype=torch.bool)
    masks[..., strip:] = True
    d = score_clip(frames, masks=masks, config={"io": {"long_side": None}},
                   device="cpu").to_dict()
    bg = d["background"]
    assert bg["status"] == "not_applicable" and bg["reason"].startswith(MASKED_AWAY), bg
    assert "texture" not in bg["reason"] and "fallback" not in bg, bg["reason"]
    assert "features_fallback_from" not in d["backends"]
    before = bg["segment"]["matches_before_masks"]
    assert before >= 30 and bg["median_matches"] < 30
    assert f"median {bg['median_matches']:.0f} of {before:.0f}" in bg["reason"], bg["reason"]
    assert bg["segment"]["removed_matches"] > 0
    assert d["foreground"]["status"] == "ok"  # the object was scored, but is no headline
    assert d["score"] is None and d["score_terms"] == {}


def test_rigidity_alone_makes_no_score():
    """Rigidity weighs a quarter next to the scene's terms; alone (a background masked away,
    undecided, or a preset without a scene term) it is no headline score, and it folds as
    before next to any scene term."""
    fg = {"status": "ok", "objects": [{"adadfrc_mean": 4.0}]}
    for bg in (None, {"status": "not_applicable", "pairs": 4,
                      "reason": f"{MASKED_AWAY}: median 0 of 109 matches per pair ..."},
               {"status": "not_applicable", "pairs": 4, "reason": "gate undecided: ..."}):
        row = {"status": "not_applicable", "working_size": [256, 512], "foreground": fg}
        if bg is not None:
            row["background"] = bg
        assert headline_terms(row) == {} and headline_score(row) is None
    row = {"status": "ok", "working_size": [256, 512], "foreground": fg,
           "epipolar": {"status": "ok", "feature_match_coverage": 0.5}}
    assert set(headline_terms(row)) == {"match", "rigidity"}
    assert headline_score(row) is not None


# ------------------------------------------------------------------------------------- F7

def test_rigidity_term_subtracts_the_rigid_floor():
    """px = max(sqrt(D_norm) - RIGID_FLOOR_PX, 0) in px of a 1024-px frame: at a working long
    side of 512 a px is 2 px at 1024."""
    assert RIGID_FLOOR_PX == 1.5
    bg = {"status": "ok", "ge_px": 0.0}
    for d, px in ((0.49, 0.0), (0.5625, 0.0), (4.0, 2.5), (16.0, 6.5), (-1.0, 0.0)):
        row = {"working_size": [256, 512], "background": bg,
               "foreground": {"status": "ok", "objects": [{"adadfrc_mean": d}]}}
        want = math.exp(-px / GE_SCALE_PX)
        assert headline_terms(row)["rigidity"] == pytest.approx(want, rel=1e-12, abs=0)


def _rigidity(frames, masks, long_side):
    clip = clip_from_tensor(frames, long_side=long_side)
    block = foreground_block(clip, masks, {"foreground": {"flow": "torch-lk"}})
    return headline_terms({"working_size": list(clip.size), "foreground": block,
                           "background": {"status": "ok", "ge_px": 0.0}})["rigidity"]


def test_rigidity_term_means_the_same_at_256_and_512_px():
    """The grounded C4 scene (192x256, exact masks) scored at long side 256 and 512: the rigid
    clip's term is 1 at both (it was 0.78 / 0.80: torch-lk's floor read as deformation), the
    nonrigid_object clip's terms agree to 0.02 and fall with the severity."""
    terms = {}
    for sev in (0.0, 0.25, 0.5):
        clip = render_scene("C4", num_frames=6, size=(192, 256), seed=0,
                            corruption="nonrigid_object" if sev else None, severity=sev)
        terms[sev] = [_rigidity(clip.frames, clip.masks, ls) for ls in (256, 512)]
    assert min(terms[0.0]) >= 0.99, terms
    for sev in (0.25, 0.5):
        assert abs(terms[sev][0] - terms[sev][1]) < 0.02, terms
    assert max(terms[0.5]) < min(terms[0.25]) < 0.95, terms
