"""SynthClip: a rendered clip with its exact ground truth, and its on-disk form.

On disk (``SynthClip.save(outdir)``): ``<clip_id>.mp4`` (H.264, crf 12), ``<clip_id>.json``
(ground truth + the paper sec. 5.5 metadata: prompt, generator, generator_version (the paper's
"model"), seed, resolution, fps, duration, clip_id, masks_path) and ``<clip_id>_masks.npz``
(key ``masks``, (T, K, H, W) bool). Each file is written atomically and the JSON last: a clip
whose JSON is missing is incomplete (an interrupted save), and an earlier clip's JSON is removed
before the new files are written, so it never sits beside another run's mp4.
:func:`load_synth` reads the three back (frames decoded from the mp4, so they differ from the
rendered ones by the codec's small loss; everything else is exact).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

import numpy as np
import torch

from .._version import __version__
from .._json import read_json_file
from ..categories import SYNTH_GENERATOR
from ..errors import VideoReadError
from ..io import read_clip
from ..io._atomic import atomic_output, atomic_write_text
from ..io.writer import write_video
from ..types import Clip
from . import camera as cam

GENERATOR_NAME = SYNTH_GENERATOR  # the ``generator`` of every synthetic clip
MODEL_NAME = GENERATOR_NAME  # retired name (docs/GLOSSARY.md)


@dataclass
class SynthClip:
    """A grounded clip.

    Attributes:
        frames: (T, 3, H, W) uint8 RGB.
        masks: (T, K, H, W) bool, one channel per moving object (K may be 0); a pixel is in
            object k's mask iff its centre ray first hits object k.
        intrinsics: (3, 3) float64 K (pixel centres at integer coordinates).
        poses: (T, 4, 4) float64 world-to-camera.
        true_homographies: (T-1, 3, 3) float64 with ``x_{t+1} ~ H_t x_t`` for the static
            background of adjacent frames (C1, C2, C4), or None when no homography exists.
        category: "C1".."C6"; corruption: kind or None; severity in [0, 1].
        meta: prompt, motion, objects, options, expected_regime, ...
        fps, seed, clip_id: metadata.
        depth: (T, H, W) float camera-frame depth of each pixel-centre hit (inf on a miss) or
            None (not saved).
    """

    frames: torch.Tensor
    masks: torch.Tensor
    intrinsics: torch.Tensor
    poses: torch.Tensor
    true_homographies: Optional[torch.Tensor]
    category: str
    corruption: Optional[str] = None
    severity: float = 0.0
    meta: Dict[str, Any] = field(default_factory=dict)
    fps: float = 24.0
    seed: int = 0
    clip_id: str = "synth"
    depth: Optional[torch.Tensor] = None

    @property
    def num_frames(self) -> int:
        return len(self.frames)

    @property
    def size(self) -> Tuple[int, int]:
        """(H, W) in pixels."""
        h, w = self.frames.shape[-2:]
        return int(h), int(w)

    def relative_pose(self, i: int, j: int) -> torch.Tensor:
        """(4, 4) transform from camera i to camera j coordinates, ``P_j P_i^-1``."""
        return cam.relative_pose(self.poses[i], self.poses[j])

    def fundamental(self, i: int, j: int) -> torch.Tensor:
        """(3, 3) true F of the static scene with ``x_j^T F x_i = 0`` (unit Frobenius norm;
        all zeros when the camera centre did not move)."""
        return cam.fundamental_from_pose(self.intrinsics, self.relative_pose(i, j))

    @property
    def true_fundamentals(self) -> Optional[torch.Tensor]:
        """(T-1, 3, 3) true F of adjacent pairs (zeros where the camera centre did not move), or
        None for a one-frame clip."""
        if self.num_frames < 2:
            return None
        rel = cam.relative_pose(self.poses[:-1], self.poses[1:])
        return cam.fundamental_from_pose(self.intrinsics, rel)

    def to_clip(self) -> Clip:
        """The frames as a :class:`geocon_torch.types.Clip` (full content mask; ground truth in
        ``meta["synth"]``)."""
        h, w = self.size
        return Clip(frames=self.frames, fps=self.fps,
                    content_mask=torch.ones(h, w, dtype=torch.bool, device=self.frames.device),
                    frame_indices=torch.arange(self.num_frames, device=self.frames.device),
                    source_size=(h, w), scale=1.0,
                    name=self.clip_id, meta={"synth": self.ground_truth()})

    def ground_truth(self, masks_path: Optional[str] = None) -> Dict[str, Any]:
        """JSON-serialisable ground truth and sec. 5.5 metadata."""
        h, w = self.size
        fund = self.true_fundamentals
        has_f = fund is not None and bool(fund.flatten(1).abs().amax(1).gt(0).all())
        return {
            "clip_id": self.clip_id,
            "prompt": self.meta.get("prompt", ""),
            "generator": GENERATOR_NAME,
            "generator_version": __version__,
            "seed": self.seed,
            "resolution": f"{w}x{h}",
            "width": w,
            "height": h,
            "fps": self.fps,
            "num_frames": self.num_frames,
            "duration": self.num_frames / self.fps,
            "masks_path": masks_path,
            "category": self.category,
            "corruption": self.corruption,
            "severity": self.severity,
            "intrinsics": self.intrinsics.tolist(),
            "poses": self.poses.tolist(),
            # the same per-frame poses under the pose-log key that means them, so the clip's
            # JSON is a valid --poses file (a pose log's "poses" are relative poses)
            "absolute_poses": self.poses.tolist(),
            "true_homographies": (None if self.true_homographies is None
                                  else self.true_homographies.tolist()),
            "true_fundamentals": fund.tolist() if has_f else None,
            "num_objects": int(self.masks.shape[1]),
            "meta": self.meta,
        }

    def save(self, outdir: Union[str, Path]) -> Path:
        """Write ``<clip_id>.mp4``, ``<clip_id>_masks.npz`` and ``<clip_id>.json`` into
        ``outdir``; returns the JSON path. Each file appears complete or not at all, the JSON
        (the completion mark) last; an older ``<clip_id>.json`` is removed first (module
        doc)."""
        outdir = Path(outdir)
        outdir.mkdir(parents=True, exist_ok=True)
        json_path = outdir / f"{self.clip_id}.json"
        json_path.unlink(missing_ok=True)
        write_video(outdir / f"{self.clip_id}.mp4", self.frames.cpu(), fps=self.fps)
        masks_name = f"{self.clip_id}_masks.npz"
        with atomic_output(outdir / masks_name) as tmp:
            np.savez_compressed(tmp, masks=self.masks.cpu().numpy().astype(bool))
        gt = self.ground_truth(masks_path=masks_name)
        gt["video_path"] = f"{self.clip_id}.mp4"
        atomic_write_text(json_path, json.dumps(gt, indent=1))
        return json_path


def load_synth(json_path: Union[str, Path]) -> SynthClip:
    """Read a clip written by :meth:`SynthClip.save` (frames decoded from its mp4)."""
    json_path = Path(json_path)
    gt = read_json_file(json_path, "ground-truth JSON", VideoReadError)
    # native resolution (synthetic sizes are even: nothing cropped)
    frames = read_clip(json_path.parent / gt.get("video_path", f"{gt['clip_id']}.mp4"),
                       long_side=None).frames
    h, w = gt["height"], gt["width"]
    masks = torch.zeros(frames.shape[0], 0, h, w, dtype=torch.bool)
    if gt.get("masks_path"):
        with np.load(json_path.parent / gt["masks_path"]) as data:
            masks = torch.from_numpy(data["masks"].astype(bool))
    th = gt.get("true_homographies")
    return SynthClip(
        frames=frames, masks=masks,
        intrinsics=torch.tensor(gt["intrinsics"], dtype=torch.float64),
        poses=torch.tensor(gt["poses"], dtype=torch.float64),
        true_homographies=None if th is None else torch.tensor(th, dtype=torch.float64),
        category=gt["category"], corruption=gt.get("corruption"),
        severity=float(gt.get("severity", 0.0)), meta=gt.get("meta", {}),
        fps=float(gt["fps"]), seed=int(gt["seed"]), clip_id=gt["clip_id"])
