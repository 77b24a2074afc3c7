"""Boundaries of the background and foreground sections that no other default test pins
(mutation audit s22): the texture checks and the valid-pair count at exactly their minimum,
the foreground's flow-crop margin and box, its chunk size, the ``min_object_pixels`` boundary
and the conversion of each scale's D_s to working-resolution px^2 (closed-form D via a stub
AdaDFRC)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import make_clip, render_object_pair

from geocon_torch import score_clip
from geocon_torch.config import ForegroundConfig
from geocon_torch.sections import foreground as fg
from geocon_torch.synth import grounded_clip

# ------------------------------------------------------------------ background boundaries

BASE = {"features": {"fallback": None, "scales": [1.0]}, "segment": {"method": "none"},
        "ransac": {"max_iterations": 64, "local_optimization": False}}


@pytest.fixture(scope="module")
def pan():
    return grounded_clip("C2", num_frames=3, size=(72, 96), motion="pan").frames


def _score(frames, **background):
    cfg = dict(BASE, background=background) if background else BASE
    return score_clip(frames, preset="background", device="cpu", config=cfg).to_dict()


@pytest.fixture(scope="module")
def pan_ref(pan):
    ref = _score(pan)
    b = ref["background"]
    assert ref["status"] == "ok"
    med, valid = int(b["median_matches"]), int(b["valid_pairs"])
    assert med == b["median_matches"] and med > 30 and valid >= 1
    return med, valid


def test_texture_check_passes_at_exactly_min_inliers(pan, pan_ref):
    """A clip with a median of m matches per pair passes ``min_inliers = m`` (both texture
    checks, all matches and background matches, are ``med >= need``)."""
    med, _ = pan_ref
    at = _score(pan, min_inliers=med)
    assert at["status"] == "ok" and at["background"]["median_matches"] == med


def test_clip_is_scored_at_exactly_min_valid_pairs(pan, pan_ref):
    """v valid (pair, scale) entries: scored at ``min_valid_pairs = v`` (not_applicable only
    below it)."""
    _, valid = pan_ref
    got = _score(pan, min_valid_pairs=valid)
    assert got["status"] == "ok" and got["background"]["valid_pairs"] == valid


# ------------------------------------------------------------------ foreground helpers

def test_crop_margin_is_max_32_or_7_5_percent_of_the_long_side():
    assert fg.crop_margin((96, 128)) == 32 and fg.crop_margin((240, 320)) == 32
    assert fg.crop_margin((384, 640)) == 48 and fg.crop_margin((1080, 1920)) == 144


def test_box_of_lines_is_the_widened_union_clamped_to_the_frame():
    h, w = 20, 30
    occ = np.zeros((2, h + w), dtype=bool)
    occ[0, 5:8] = True  # rows 5..7
    occ[0, h + 10:h + 12] = True  # columns 10..11
    occ[1, 9] = True  # row 9 (second chunk)
    occ[1, h + 25] = True  # column 25
    ys, xs = fg.box_of_lines(occ, (h, w), 2)
    assert (ys.start, ys.stop, xs.start, xs.stop) == (3, 12, 8, 28)
    ys, xs = fg.box_of_lines(occ, (h, w), 10)
    assert (ys.start, ys.stop, xs.start, xs.stop) == (0, 20, 0, 30)
    occ[1] = False  # a chunk without any mask pixel: the whole frame
    ys, xs = fg.box_of_lines(occ, (h, w), 1)
    assert (ys.start, ys.stop, xs.start, xs.stop) == (0, h, 0, w)


def test_flow_chunk_pairs_fill_the_pixels_of_batch_pairs_full_crops():
    cfg = ForegroundConfig(batch_pairs=4, max_flow_side=512)
    assert fg.flow_chunk_pairs((512, 512), 1.0, cfg) == 4
    assert fg.flow_chunk_pairs((256, 256), 1.0, cfg) == 16
    assert fg.flow_chunk_pairs((512, 512), 0.5, cfg) == 16  # a flow scale shrinks the crop
    assert fg.flow_chunk_pairs((1024, 1024), 1.0, cfg) == 4  # never below batch_pairs
    assert fg.flow_chunk_pairs((256, 256), 1.0, ForegroundConfig(batch_pairs=2,
                                                                 max_flow_side=128)) == 2


# ------------------------------------------------------------------ foreground with a stub

@pytest.fixture()
def stub_adadfrc(monkeypatch):
    """AdaDFRC replaced by D = 1 per object (valid where the mask has >= min_pixels px): the
    block's numbers are then the section's own unit conversion."""
    def fake(flow, masks, rel, *, grid, score, min_pixels):
        px = masks.sum((-1, -2))
        return torch.ones(px.shape, dtype=torch.float64, device=flow.device), px >= min_pixels

    monkeypatch.setattr(fg, "adadfrc", fake)


@pytest.fixture(scope="module")
def disc_clip():
    f01, _, _ = render_object_pair(shift=(1.0, 0.5), seed=3)
    return make_clip(f01)  # 2 frames, 96 x 128


def test_an_object_of_exactly_min_object_pixels_is_scored(disc_clip, stub_adadfrc):
    masks = torch.zeros(2, 1, 96, 128, dtype=torch.bool)
    masks[0, 0, 30:38, 40:48] = True  # 64 px at frame t
    cfg = ForegroundConfig(flow="torch-lk", scales=(1.0,), occlusion_weighting=False,
                           min_object_pixels=64)
    res = fg.foreground_block(disc_clip, masks, cfg)
    assert res["status"] == "ok" and res["objects"][0]["frames"] == 1
    res = fg.foreground_block(disc_clip, masks, ForegroundConfig(
        flow="torch-lk", scales=(1.0,), occlusion_weighting=False, min_object_pixels=65))
    assert res["status"] == "not_applicable" and ">= 65 mask pixels" in res["reason"]


def test_each_scale_is_converted_by_the_square_of_its_flow_scale(disc_clip, stub_adadfrc):
    """D_s = 1 at every scale s run at flow scale c: (s c)^-2 working px^2 per scale; the
    default reduction reports the finest."""
    masks = torch.zeros(2, 1, 96, 128, dtype=torch.bool)
    masks[0, 0, 20:60, 30:70] = True  # 1600 px: >= 64 px down to 1/4 x 1/2
    for side, c in ((None, 1.0), (64, 0.5)):
        cfg = ForegroundConfig(flow="torch-lk", scales=(0.5, 1.0), occlusion_weighting=False,
                               max_flow_side=side, min_object_pixels=64)
        res = fg.foreground_block(disc_clip, masks, cfg)
        assert res["flow_scale"] == c
        obj = res["objects"][0]
        assert obj["per_scale"]["0.5"] == pytest.approx(1 / (0.5 * c) ** 2)
        assert obj["per_scale"]["1.0"] == pytest.approx(1 / c ** 2)
        assert obj["adadfrc_mean"] == pytest.approx(1 / c ** 2)
