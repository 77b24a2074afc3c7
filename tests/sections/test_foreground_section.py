"""foreground_section: the result block, not_applicable reasons, scale handling."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from helpers import make_clip, render_object_pair

from geocon_torch.config import ForegroundConfig, GeoConConfig
from geocon_torch.errors import ShapeError
from geocon_torch.sections.foreground import foreground_block as foreground_section


@pytest.fixture(scope="module")
def clip_and_masks():
    """3 frames: a rigidly moving disc (object 0, mask only at frame 0 -> scored in pair (0, 1))
    and a box (object 1, 16 px at frame 0 -> too small; 1600 px at frame 1 -> pair (1, 2))."""
    f01, m0, _ = render_object_pair(shift=(2.0, 1.0), seed=7)
    f2, _, _ = render_object_pair(shift=(2.0, 1.0), seed=8)
    clip = make_clip(torch.cat([f01, f2[1:]]))
    masks = torch.zeros(3, 2, 96, 128, dtype=torch.bool)
    masks[0, 0] = m0
    masks[0, 1, 0:4, 0:4] = True
    masks[1, 1, 20:60, 10:50] = True
    return clip, masks


def test_result_block(clip_and_masks):
    clip, masks = clip_and_masks
    res = foreground_section(clip, masks, {"foreground": {"flow": "torch-lk"}})
    json.dumps(res)  # JSON-serialisable
    assert res["status"] == "ok" and res["reason"] is None
    assert res["flow"] == "torch-lk" and res["score"] == "wmse"
    assert res["scales"] == [0.25, 0.5, 1.0]
    o0, o1 = res["objects"]
    assert (o0["id"], o1["id"]) == (0, 1)
    assert o0["frames"] == 1 and o1["frames"] == 1
    assert o0["per_pair"][1] is None and o1["per_pair"][0] is None
    assert o0["adadfrc_mean"] == pytest.approx(o0["per_pair"][0])
    assert o0["adap90"] == pytest.approx(o0["adadfrc_mean"])
    assert set(o0["per_scale"]) == {"0.25", "0.5", "1.0"}
    assert all(v is not None and v >= 0 for v in o0["per_scale"].values())
    assert o0["adadfrc_mean"] == pytest.approx(o0["per_scale"]["1.0"])  # default: finest


def test_median_over_scales_and_config_forms(clip_and_masks):
    clip, masks = clip_and_masks
    cfg = ForegroundConfig(flow="torch-lk", scale_reduction="median", occlusion_weighting=False)
    res = foreground_section(clip, masks, cfg)
    o0 = res["objects"][0]
    assert o0["adadfrc_mean"] == pytest.approx(float(np.median(list(o0["per_scale"].values()))))
    full = GeoConConfig().replace(foreground={"flow": "torch-lk", "scales": [1.0],
                                              "occlusion_weighting": False})
    res2 = foreground_section(clip, masks.numpy(), full)
    assert res2["objects"][0]["adadfrc_mean"] == pytest.approx(o0["per_scale"]["1.0"], rel=1e-5)
    again = foreground_section(clip, masks, full)
    assert again == res2  # deterministic


def test_not_applicable_reasons(clip_and_masks):
    clip, masks = clip_and_masks
    cfg = {"foreground": {"flow": "torch-lk"}}
    none = foreground_section(clip, None, cfg)
    assert none["status"] == "not_applicable" and "no object masks" in none["reason"]
    assert none["objects"] == []
    empty = foreground_section(clip, masks[:, :0], cfg)
    assert empty["status"] == "not_applicable" and "no moving object" in empty["reason"]
    tiny = torch.zeros_like(masks)
    tiny[:, 0, :5, :5] = True
    small = foreground_section(clip, tiny, cfg)
    assert small["status"] == "not_applicable" and ">= 64" in small["reason"]
    one = make_clip(clip.frames[:1].float() / 255)
    single = foreground_section(one, masks[:1], cfg)
    assert single["status"] == "not_applicable" and "fewer than 2 frames" in single["reason"]
    with pytest.raises(ShapeError):
        foreground_section(clip, masks[:2], cfg)


def test_masks_at_another_resolution_are_resized(clip_and_masks):
    clip, masks = clip_and_masks
    cfg = {"foreground": {"flow": "torch-lk", "scales": [1.0]}}
    big = masks.repeat_interleave(2, -1).repeat_interleave(2, -2)  # (3, 2, 192, 256)
    a = foreground_section(clip, masks, cfg)
    b = foreground_section(clip, big, cfg)
    assert b["objects"][0]["adadfrc_mean"] == pytest.approx(a["objects"][0]["adadfrc_mean"])


def test_label_map_masks_give_one_object_per_label(clip_and_masks):
    """A (T, H, W) label map means what it means for score_clip(masks=...): one object per
    label, with the same scores as the (T, K, H, W) stack."""
    clip, masks = clip_and_masks
    cfg = {"foreground": {"flow": "torch-lk"}}
    labels = (masks[:, 0].to(torch.uint8) * 1 + masks[:, 1].to(torch.uint8) * 2)
    by_stack = foreground_section(clip, masks, cfg)
    by_labels = foreground_section(clip, labels, cfg)
    assert len(by_labels["objects"]) == 2
    for a, b in zip(by_stack["objects"], by_labels["objects"]):
        assert a["adadfrc_mean"] == pytest.approx(b["adadfrc_mean"], rel=1e-6)


def test_given_masks_on_a_clip_the_background_stops_say_so():
    """Masks given for a textureless clip are never read (the background's segmentation reads
    them, and it stopped at the texture check): the foreground says that, not "no moving
    object was given or found"."""
    from geocon_torch import score_clip

    frames = torch.zeros(6, 3, 96, 128, dtype=torch.uint8)
    masks = torch.zeros(6, 1, 96, 128, dtype=torch.bool)
    masks[:, 0, 20:60, 30:80] = True
    d = score_clip(frames, preset="geocon", masks=masks, progress=False).to_dict()
    assert d["background"]["status"] == "not_applicable"
    fg = d["foreground"]
    assert fg["status"] == "not_applicable" and "masks given were not read" in fg["reason"]
    assert "too little texture" in fg["reason"]
    plain = score_clip(frames, preset="geocon", progress=False).to_dict()
    assert "no moving object was given or found" in plain["foreground"]["reason"]
    from geocon_torch import score_clips

    both = [r.to_dict()["foreground"]["reason"] for r in score_clips(
        [frames, frames.clone()], masks=[masks, None], preset="geocon")]
    assert "masks given were not read" in both[0]
    assert "no moving object was given or found" in both[1]
