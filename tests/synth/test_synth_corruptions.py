"""Corruption injectors: identity at severity 0, deviation growing with severity, seeded,
masks resampled consistently, clear errors on bad input."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.errors import ShapeError
from geocon_torch.synth import CORRUPTIONS, apply_corruption, grounded_clip, render_scene


@pytest.fixture(scope="module")
def clip():
    return grounded_clip("C4", num_frames=6, size=(64, 96))


def _deviation(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().mean())


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_severity_zero_is_identity_and_deviation_grows(clip, kind):
    frames, masks = clip.frames, clip.masks
    out0, m0 = apply_corruption(frames, kind, 0.0, masks=masks, return_masks=True)
    assert torch.equal(out0, frames) and torch.equal(m0, masks)
    devs = [_deviation(apply_corruption(frames, kind, s, masks=masks), frames)
            for s in (0.25, 0.5, 1.0)]
    assert 0 < devs[0] < devs[1] < devs[2]
    again = apply_corruption(frames, kind, 0.5, masks=masks, seed=0)
    assert torch.equal(again, apply_corruption(frames, kind, 0.5, masks=masks, seed=0))
    if kind != "nonrigid_object":  # its ripple direction is the only random part
        assert not torch.equal(again, apply_corruption(frames, kind, 0.5, masks=masks, seed=1))


@pytest.mark.parametrize("kind", ["rubber_sheet", "breathing", "flicker", "background_slide"])
def test_corruptions_are_time_varying(clip, kind):
    out = apply_corruption(clip.frames, kind, 1.0)
    d = (out.float() - clip.frames.float()).abs().mean((1, 2, 3))
    assert float(d.max() - d.min()) > 0.1  # not one fixed warp / gain for every frame


def test_float_input_keeps_dtype_and_device(clip, device, dtype):
    frames = clip.frames.to(device=device, dtype=dtype) / 255.0
    out = apply_corruption(frames, "rubber_sheet", 0.7)
    assert out.dtype == dtype and out.device == frames.device
    assert float(out.min()) >= 0 and float(out.max()) <= 1
    ref = apply_corruption(clip.frames, "rubber_sheet", 0.7).to(dtype) / 255.0
    assert float((out.cpu() - ref).abs().mean()) < 2.0 / 255


def test_nonrigid_only_touches_objects_and_keeps_masks_consistent(clip):
    masks = clip.masks
    out, new_masks = apply_corruption(clip.frames, "nonrigid_object", 1.0, masks=masks,
                                      return_masks=True)
    near = torch.nn.functional.max_pool2d(masks.float(), 7, stride=1, padding=3)[:, 0] > 0
    assert torch.equal(out[:, :, ~near[0]][0], clip.frames[:, :, ~near[0]][0])
    changed = (out != clip.frames).any(1)
    assert bool(changed[near].any()) and not bool(changed[~near].any())
    assert not torch.equal(new_masks, masks)
    # the masks follow the pixels: warping a mask-as-image gives the warped mask
    as_image = masks[:, :1].expand(-1, 3, -1, -1).to(torch.uint8) * 255
    warped_img = apply_corruption(as_image, "nonrigid_object", 1.0, masks=masks)[:, 0] > 127
    inter = (warped_img & new_masks[:, 0]).sum()
    union = (warped_img | new_masks[:, 0]).sum()
    assert float(inter) / float(union) > 0.95


def test_render_scene_with_corruption_records_it():
    clean = render_scene("C2", num_frames=4, size=(48, 64))
    bad = render_scene("C2", num_frames=4, size=(48, 64), corruption="rubber_sheet",
                       severity=0.8)
    assert bad.corruption == "rubber_sheet" and bad.severity == 0.8
    assert "rubber_sheet" in bad.clip_id
    assert torch.equal(bad.true_homographies, clean.true_homographies)
    assert _deviation(bad.frames, clean.frames) > 1.0


def test_bad_input_raises(clip):
    with pytest.raises(ValueError, match="unknown corruption"):
        apply_corruption(clip.frames, "melt", 0.5)
    with pytest.raises(ValueError, match="severity"):
        apply_corruption(clip.frames, "flicker", 1.5)
    with pytest.raises(ValueError, match="needs non-empty object masks"):
        apply_corruption(clip.frames, "nonrigid_object", 0.5)
    with pytest.raises(ShapeError):
        apply_corruption(clip.frames[:, :1], "flicker", 0.5)
    with pytest.raises(ShapeError):
        apply_corruption(clip.frames, "breathing", 0.5, masks=clip.masks[:, :, :10])
