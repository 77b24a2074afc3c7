"""The foreground block's cost caps (issue 16 item 3): objects (largest first), pairs (spread
evenly) and flow resolution, each reported with what it cut; and a smooth rubber-sheet warp of
the background does not become moving objects."""
from __future__ import annotations

import pytest
import torch
from helpers import make_clip, render_object_pair

from geocon_torch import score_clip
from geocon_torch.config import ForegroundConfig
from geocon_torch.sections.foreground import flow_scale, foreground_block
from geocon_torch.synth import grounded_clip
from geocon_torch.synth.corruptions import apply_corruption


@pytest.fixture(scope="module")
def long_clip():
    """9 frames (8 adjacent pairs) of a moving disc, and 5 objects of different sizes."""
    frames = [render_object_pair(shift=(1.0, 0.5), seed=s)[0] for s in range(5)]
    clip = make_clip(torch.cat([f for f in frames])[:9])
    masks = torch.zeros(clip.num_frames, 5, *clip.size, dtype=torch.bool)
    for k, side in enumerate((10, 30, 14, 24, 18)):  # areas: 1 > 3 > 4 > 2 > 0
        masks[:, k, 5:5 + side, 4 + 20 * k % 60:4 + 20 * k % 60 + side] = True
    return clip, masks


def test_caps_cut_objects_largest_first_and_pairs_evenly(long_clip):
    clip, masks = long_clip
    cfg = ForegroundConfig(flow="torch-lk", scales=(1.0,), max_objects=2, max_pairs=3,
                           occlusion_weighting=False)
    res = foreground_block(clip, masks, cfg)
    assert res["status"] == "ok"
    assert [o["id"] for o in res["objects"]] == [1, 3]  # the two largest, in index order
    assert res["skipped"] == {"objects": 3, "pairs": clip.num_frames - 1 - 3}
    assert res["caps"] == {"max_objects": 2, "max_pairs": 3, "max_flow_side": 512}
    scored = [p for p, v in enumerate(res["objects"][0]["per_pair"]) if v is not None]
    assert scored == [0, 4, 7]  # spread evenly, first and last kept


def test_no_caps_score_everything(long_clip):
    clip, masks = long_clip
    cfg = ForegroundConfig(flow="torch-lk", scales=(1.0,), max_objects=None, max_pairs=0,
                           max_flow_side=None, occlusion_weighting=False)
    res = foreground_block(clip, masks, cfg)
    assert len(res["objects"]) == 5 and res["skipped"] == {"objects": 0, "pairs": 0}
    assert res["flow_scale"] == 1.0


def test_flow_side_cap(long_clip):
    clip, masks = long_clip
    assert flow_scale((96, 128), 512) == 1.0 and flow_scale((96, 128), 64) == 0.5
    assert flow_scale((1080, 1920), None) == 1.0
    base = dict(flow="torch-lk", scales=(1.0,), max_pairs=2, occlusion_weighting=False,
                min_object_pixels=16)
    full = foreground_block(clip, masks, ForegroundConfig(**base))
    half = foreground_block(clip, masks, ForegroundConfig(**base, max_flow_side=64))
    assert half["flow_scale"] == 0.5 and half["status"] == "ok"
    for a, b in zip(full["objects"], half["objects"]):  # same objects, both finite px^2
        assert (a["adadfrc_mean"] is None) == (b["adadfrc_mean"] is None)
    # a working size within the cap is untouched (bit-identical)
    same = foreground_block(clip, masks, ForegroundConfig(**base, max_flow_side=None))
    assert same["objects"] == full["objects"]


@pytest.mark.parametrize("category", ["C2", "C3"])
def test_rubber_sheet_background_is_not_segmented_into_objects(category):
    frames = grounded_clip(category, num_frames=10).frames
    warped = apply_corruption(frames, "rubber_sheet", 0.5)
    res = score_clip(warped, device="cpu", progress=False)
    seg = res.background["segment"]
    assert seg["method"] == "motion"
    assert seg.get("objects", 0) == 0, seg  # a smooth warp is no mover
    assert res.foreground["objects"] == [] and res.foreground["status"] == "not_applicable"
