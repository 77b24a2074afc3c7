"""Grounded scenes: synthetic clips with exact geometry, and corruption injectors.

Quick use::

    from geocon_torch.synth import render_scene, grounded_clip, apply_corruption, load_synth
    clip = render_scene("C2", motion="pan", num_frames=48, size=(384, 640), seed=0)
    clip.frames             # (T, 3, H, W) uint8 RGB
    clip.poses              # (T, 4, 4) float64 world-to-camera; clip.intrinsics (3, 3)
    clip.true_homographies  # (T-1, 3, 3), x_{t+1} ~ H_t x_t (C1, C2, C4; None otherwise)
    clip.fundamental(0, 1)  # true F with x_1^T F x_0 = 0 (zeros if the centre did not move)
    clip.masks              # (T, K, H, W) bool, exact per-object masks (C4; K = 0 elsewhere)
    clip.save("out/")       # out/C2_pan_seed0.mp4 / .json / _masks.npz; load_synth(json) reads it
    small = grounded_clip("C3")  # test fixture: 12 frames, 240x320 (H x W), seed 0
    bad = render_scene("C3", corruption="rubber_sheet", severity=0.6)

Categories (paper sec. 5.2; every scene is a textured room with boxes and panels at several
depths): C1 static; C2 pure rotation (``motion`` pan | tilt | roll, camera centre fixed);
C3 translation with parallax (truck | dolly, near and middle layers of props); C4 static camera
with 1-3 textured boxes sliding and turning (``num_objects``); C5 rotation + translation (arc |
orbit); C6 stress: truck past thin poles and wires, a low-texture wall and panel, and a near
occluder (``stress`` thin | low_texture | occlusion | all). Expected regime: H for C1, C2, C4
and F for C3, C5, C6 (``clip.meta["expected_regime"]``).

Corruptions (``apply_corruption(frames, kind, severity, seed=, masks=)``, severity in [0, 1],
0 = exact identity): rubber_sheet (smooth time-varying displacement field), background_slide (a
rectangle drifts against the rest), breathing (radial scale oscillation that no rigid model
explains), nonrigid_object (travelling ripple inside the object masks; the masks are warped with
the frames), flicker (per-frame gain and "boiling" noise).

Conventions: OpenCV camera axes (x right, y down, z forward), pixel centres at integer
coordinates, poses world-to-camera, ``relative_pose(i, j) = P_j P_i^-1``. Masks are decided by
each pixel-centre ray (a pixel is in object k's mask iff its centre sees object k first).

How it works: ``raycast.py`` intersects every pixel ray of every frame with all textured
rectangles (a box is six) in batched torch ops, with screen-tile culling and nearest-hit
selection, then looks textures up in a mip-mapped atlas (trilinear; ``supersample=2`` for extra
antialiasing), a chunk of frames at a time (``render_scene(..., chunk_frames=)``, default a
budget of 2^21 rays: memory stays flat in the clip's length, the frames are the same for any
chunk). Textures (``textures.py``) are seeded dead-leaves images (discs, rotated
rectangles, X-corners in a per-surface palette over value noise), distinctive enough that about
99.5 % of OpenCV SIFT ratio-test matches between pure-rotation frames lie within 2 px of the
true H. Same seed -> identical frames.
The CLI is ``geocon synth OUTDIR --category all``.

A second renderer, :mod:`~geocon_torch.synth.planes` (``render_planes(motion, ...)``), draws
textured planes at several depths through their exact plane homographies with another texture
generator (coloured 1/f noise): a scene family the report-gate calibration never sees (its
held-out validation, ``benchmarks/calibration_heldout.py``).
"""
from __future__ import annotations

from typing import Any

from ..categories import CATEGORIES, EXPECTED_REGIME, canonical_category
from .camera import fundamental_from_pose, intrinsics, look_at, project, rotation_homography
from .clip import SynthClip, load_synth
from .corruptions import CORRUPTIONS, apply_corruption
from .planes import PLANE_MOTIONS, render_planes
from .scenes import MOTIONS, render_scene

GROUNDED_DEFAULTS = {"num_frames": 12, "size": (240, 320), "seed": 0}


def grounded_clip(category: str, **kw: Any) -> SynthClip:
    """A small deterministic grounded clip for tests: :func:`render_scene` with 12 frames at
    240x320 (H x W) and seed 0 unless overridden by ``kw``."""
    return render_scene(category, **{**GROUNDED_DEFAULTS, **kw})


__all__ = [
    "render_scene", "grounded_clip", "SynthClip", "load_synth", "apply_corruption",
    "CORRUPTIONS", "CATEGORIES", "MOTIONS", "EXPECTED_REGIME", "canonical_category",
    "intrinsics", "look_at", "project", "rotation_homography", "fundamental_from_pose",
    "render_planes", "PLANE_MOTIONS",
]
