"""Motion seeds on working frames upscaled from a smaller source (``Clip.scale`` > 1).

A pure camera pan rendered at 192x144 and scored at 1024 px (5.3x) gave two moving objects:
clusters of matches 0.8 *source* px off the background homography (4.3 working px, above the
4 px seed threshold ``motion_seed_factor x tau_H``) became coherent seeds. Under H a seed must
now be off by at least one source pixel (``SEED_MIN_SOURCE_PX``); movers of one source pixel or
more per frame are still found, and frames not upscaled more than 4x are unchanged.
"""
from typing import Tuple

import pytest
import torch
from helpers import identity_fits

from geocon_torch.config import GeoConConfig
from geocon_torch.segment.seeds import motion_masks, outlier_seeds, source_upscale
from geocon_torch.types import Clip, Fit

_SIZE = (96, 128)  # (h, w) working px


def _clip_and_rows(shift_px: float, scale: float, t: int = 5, n: int = 60
                   ) -> Tuple[Clip, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                              Tuple[Fit, Fit]]:
    """A static noise clip (no photometric change) of working size ``_SIZE`` upscaled
    ``scale`` times from its source, its adjacent pairs with identity H fits, and per pair
    ``n`` matches: 16 in a 20 x 20 px patch displaced ``shift_px`` working px (x) against the
    background, the rest exact background matches."""
    h, w = _SIZE
    g = torch.Generator().manual_seed(0)
    frame = (torch.rand(h, w, generator=g) * 255).round().to(torch.uint8).expand(3, h, w)
    src = (max(1, round(h / scale)), max(1, round(w / scale)))
    clip = Clip(frames=frame.expand(t, 3, h, w).clone(), fps=10.0,
                content_mask=torch.ones(h, w, dtype=torch.bool), frame_indices=torch.arange(t),
                source_size=src, scale=scale)
    pairs = torch.tensor([(k, k + 1) for k in range(t - 1)])
    p = pairs.shape[0]
    x1 = torch.stack([torch.rand(p, n, generator=g) * (w - 1),
                      torch.rand(p, n, generator=g) * (h - 1)], -1)
    x1[:, :16] = torch.tensor([60.0, 40.0]) + torch.rand(p, 16, 2, generator=g) * 20
    x2 = x1.clone()
    x2[:, :16, 0] += shift_px
    mask = torch.ones(p, n, dtype=torch.bool)
    return clip, pairs, x1, x2, mask, identity_fits(mask)


def _objects(shift_px: float, scale: float) -> Tuple[int, dict]:
    clip, pairs, x1, x2, mask, fits = _clip_and_rows(shift_px, scale)
    masks, ev = motion_masks(clip, pairs, x1, x2, mask, fits, GeoConConfig(), "H")
    assert masks.shape[1] == ev["objects"]
    return int(ev["objects"]), ev


def test_sub_source_pixel_cluster_is_no_object_on_upscaled_frames():
    """4.3 working px on frames upscaled 5.33x (192 -> 1024 px) is 0.8 source px: no seeds,
    no component at all (before: 128 coherent seeds, one object)."""
    n, ev = _objects(4.3, 1024 / 192)
    assert n == 0 and "candidates" not in ev
    assert ev["seed_threshold_px"] == pytest.approx(1024 / 192)


def test_same_cluster_is_an_object_on_native_frames():
    """The same 4.3 px cluster on native frames (scale 1) or frames upscaled at most 4x is
    above 2 x tau_H = 4 px: one object of 16 matches x 4 pairs x 2 endpoints, as before."""
    for scale in (1.0, 0.5, 4.0):
        n, ev = _objects(4.3, scale)
        assert n == 1 and ev["seeds"] == 128 and ev["object_seeds"] == [128], scale
        assert "seed_threshold_px" not in ev, scale


def test_mover_of_more_than_a_source_pixel_is_still_found_upscaled():
    """A patch moving 8 working px (1.5 source px at 5.33x) is still one object."""
    n, ev = _objects(8.0, 1024 / 192)
    assert n == 1 and ev["object_seeds"] == [128]


def test_outlier_seeds_source_pixel_floor():
    """outlier_seeds: residuals 4.3 px are seeds at upscale 1 and 4, not at 5.33; under F
    (normalised Sampson) the floor does not apply."""
    clip, pairs, x1, x2, mask, fits = _clip_and_rows(4.3, 1.0)
    cfg = GeoConConfig()
    count = lambda up: int(outlier_seeds(pairs, x1, x2, mask, fits, cfg, "H",  # noqa: E731
                                         upscale=up)[3].sum())
    assert [count(1.0), count(4.0), count(1024 / 192)] == [128, 128, 0]
    res = torch.full(mask.shape, 0.25)  # 2.5 x tau_F: seeds whatever the upscale
    f_seeds = outlier_seeds(pairs, x1, x2, mask, fits, cfg, "F", res, upscale=8.0)[3]
    assert int(f_seeds.sum()) == 2 * mask.numel()
    assert source_upscale(clip) == 1.0
    assert source_upscale(_clip_and_rows(4.3, 0.5)[0]) == 1.0
    assert source_upscale(_clip_and_rows(4.3, 5.0)[0]) == 5.0
