"""Rendering in chunks of frames (audit s30 F6): bounded memory, bit-identical clips.

``render_scene`` and ``render_planes`` render ``chunk_frames`` frames at a time (default: a
budget of rays per chunk) into preallocated uint8 frames, bool masks and float depth. Every
output must equal, bit for bit, one chunk holding all frames: every category and motion, the
C6 stress kinds, C4 with 1-3 objects, every option, corruptions (applied to the whole rendered
clip) and letterboxing; and each intersect / plane pass must see at most a chunk of frames.
"""
from __future__ import annotations

from typing import Any, Dict, List, Tuple

import pytest
import torch

from geocon_torch.bench.calibration import _letterbox
from geocon_torch.errors import ArgumentTypeError, InputError
from geocon_torch.synth import CORRUPTIONS, MOTIONS, planes, raycast, render_scene
from geocon_torch.synth.planes import PLANE_MOTIONS, build_planes, render_planes_frames

SIZE = (20, 36)  # not whole 16 px tiles: the padded tiles are cut per chunk too
T = 5

_CASES: List[Tuple[str, Dict[str, Any]]] = [
    (cat, {"motion": m}) for cat in ("C1", "C2", "C3", "C4", "C5", "C6") for m in MOTIONS[cat]]
_CASES += [("C4", {"num_objects": 2}), ("C4", {"num_objects": 3, "yaw_rate": 4.0}),
           ("C6", {"stress": "thin"}), ("C6", {"stress": "low_texture"}),
           ("C6", {"stress": "occlusion"}), ("C2", {"motion": "pan", "rate": 2.0}),
           ("C3", {"motion": "dolly", "speed": 0.3}),
           ("C5", {"motion": "orbit", "supersample": 2}),
           ("C3", {"motion": "truck", "supersample": 3, "texel_scale": 0.5}),
           ("C5", {"motion": "arc", "focal_scale": 0.6, "fps": 12.0})]


def _same_clip(a, b) -> None:
    assert torch.equal(a.frames, b.frames)
    assert a.frames.dtype == torch.uint8 and a.frames.is_contiguous()
    assert torch.equal(a.masks, b.masks) and a.masks.dtype == torch.bool
    assert (a.depth is None) == (b.depth is None)  # planes clips carry no depth
    if a.depth is not None:
        assert torch.equal(a.depth, b.depth) and a.depth.dtype == b.depth.dtype
    assert torch.equal(a.poses, b.poses) and torch.equal(a.intrinsics, b.intrinsics)
    assert (a.true_homographies is None) == (b.true_homographies is None)
    if a.true_homographies is not None:
        assert torch.equal(a.true_homographies, b.true_homographies)
    assert (a.clip_id, a.meta, a.category, a.fps) == (b.clip_id, b.meta, b.category, b.fps)


@pytest.mark.parametrize("cat,opts", _CASES, ids=[f"{c}-{o}" for c, o in _CASES])
def test_chunked_scene_equals_one_chunk(cat, opts):
    whole = render_scene(cat, num_frames=T, size=SIZE, seed=1, chunk_frames=T, **opts)
    for chunk in (1, 2):
        _same_clip(render_scene(cat, num_frames=T, size=SIZE, seed=1, chunk_frames=chunk,
                                **opts), whole)
    _same_clip(render_scene(cat, num_frames=T, size=SIZE, seed=1, **opts), whole)  # default


@pytest.mark.parametrize("kind", CORRUPTIONS)
def test_chunked_scene_corruptions_and_letterbox(kind):
    kw = dict(num_frames=T, size=SIZE, seed=2, corruption=kind, severity=0.7)
    whole = render_scene("C4", chunk_frames=T, **kw)
    chunked = render_scene("C4", chunk_frames=2, **kw)
    _same_clip(chunked, whole)
    assert torch.equal(_letterbox(chunked.frames, 3), _letterbox(whole.frames, 3))


def test_chunked_scene_larger_frames():
    """Two frames of 72x100 (several whole and cut tiles, supersampled)."""
    for cat, opts in (("C3", {"motion": "dolly"}), ("C4", {"supersample": 2})):
        whole = render_scene(cat, num_frames=3, size=(72, 100), chunk_frames=3, **opts)
        _same_clip(render_scene(cat, num_frames=3, size=(72, 100), chunk_frames=1, **opts),
                   whole)


def test_scene_chunks_bound_the_frames_per_pass(monkeypatch):
    seen: List[int] = []
    real = raycast.intersect

    def spy(rays_cam, poses, rects, *a, **k):
        seen.append(int(poses.shape[0]))
        assert rects.origin.shape[0] == poses.shape[0]
        return real(rays_cam, poses, rects, *a, **k)

    monkeypatch.setattr(raycast, "intersect", spy)
    render_scene("C4", num_frames=7, size=SIZE, chunk_frames=3)
    assert seen == [3, 3, 1]
    seen.clear()
    render_scene("C2", num_frames=4, size=SIZE, supersample=2, chunk_frames=3)
    assert seen == [3, 3, 1, 1]  # pixel-centre rays, then the supersampled ones, per chunk
    seen.clear()
    # the default: a budget of rays (pixels x supersample^2) per chunk, at least one frame
    monkeypatch.setattr(raycast, "CHUNK_RAYS", 3 * SIZE[0] * SIZE[1])
    render_scene("C1", num_frames=7, size=SIZE)
    assert seen == [3, 3, 1]
    seen.clear()
    render_scene("C1", num_frames=2, size=SIZE, supersample=2)
    assert seen == [1, 1, 1, 1]


def test_chunk_frames_is_checked():
    with pytest.raises(InputError, match="chunk_frames"):
        render_scene("C1", num_frames=2, size=SIZE, chunk_frames=0)
    with pytest.raises(ArgumentTypeError, match="chunk_frames"):
        render_scene("C1", num_frames=2, size=SIZE, chunk_frames=2.0)
    with pytest.raises(InputError, match="chunk_frames"):
        planes.render_planes("pan", num_frames=2, size=SIZE, chunk_frames=0)


@pytest.mark.parametrize("motion", tuple(PLANE_MOTIONS))
def test_chunked_planes_equal_one_chunk(motion):
    for ss in (1, 2):
        kw = dict(num_frames=T, size=SIZE, seed=3, supersample=ss, num_planes=4)
        whole = planes.render_planes(motion, chunk_frames=T, **kw)
        for chunk in (1, 2, None):
            _same_clip(planes.render_planes(motion, chunk_frames=chunk, **kw), whole)
    scene = build_planes(motion, num_frames=T, size=SIZE, seed=3)
    assert torch.equal(render_planes_frames(scene, 2, chunk_frames=2),
                       render_planes_frames(scene, 2, chunk_frames=T))
    kw = dict(num_frames=T, size=SIZE, corruption="breathing", severity=0.5)
    _same_clip(planes.render_planes(motion, chunk_frames=1, **kw),
               planes.render_planes(motion, chunk_frames=T, **kw))


def test_planes_chunks_bound_the_frames_per_pass(monkeypatch):
    seen: List[int] = []
    real = planes._plane_pass

    def spy(scene, g, g_inv, ss):
        seen.append(int(g.shape[0]))
        return real(scene, g, g_inv, ss)

    monkeypatch.setattr(planes, "_plane_pass", spy)
    planes.render_planes("truck", num_frames=7, size=SIZE, chunk_frames=3)
    assert seen == [3, 3, 1]
    seen.clear()
    monkeypatch.setattr(planes, "CHUNK_PIXELS", 2 * 4 * SIZE[0] * SIZE[1])
    planes.render_planes("truck", num_frames=5, size=SIZE)  # supersample 2: 2 frames a chunk
    assert seen == [2, 2, 1]
