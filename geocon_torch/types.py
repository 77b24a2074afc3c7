"""The data types that flow between stages (see DESIGN.md: one type per arrow).

Conventions, everywhere in the package:

* points are pixel ``(x, y)`` at the clip's *working* resolution unless a name says ``_norm``;
* ``x2^T F x1 = 0`` and ``x2 ~ H x1`` for a frame pair ``(i, j)`` with ``x1`` in frame i;
* variable counts are padding plus a boolean validity mask; padded entries hold finite values
  (zeros) so they never produce NaN, and every consumer must honour the mask.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Sequence, Tuple

import torch


@dataclass
class Clip:
    """A decoded clip at working resolution.

    Attributes:
        frames: (T, 3, H, W) uint8 RGB frames.
        fps: frames per second of the source (after striding: source fps / stride).
        content_mask: (H, W) bool, False on letterbox / pillarbox bars.
        frame_indices: (T,) long, index of each kept frame in the source video.
        source_size: (H, W) of the source frames before resizing.
        scale: working size / source size (same for both axes).
        name: a short identifier (file stem or "tensor").
        meta: free-form metadata (path, container frame count, codec, ...).
    """

    frames: torch.Tensor
    fps: float
    content_mask: torch.Tensor
    frame_indices: torch.Tensor
    source_size: Tuple[int, int]
    scale: float = 1.0
    name: str = "clip"
    meta: Dict[str, Any] = field(default_factory=dict)

    @property
    def num_frames(self) -> int:
        return int(self.frames.shape[0])

    @property
    def size(self) -> Tuple[int, int]:
        """(H, W) at working resolution."""
        return int(self.frames.shape[-2]), int(self.frames.shape[-1])

    def gray(self, dtype: torch.dtype = torch.float32,
             indices: Optional[torch.Tensor] = None, chunk: int = 16) -> torch.Tensor:
        """(T', 1, H, W) luminance in [0, 1] (ITU-R BT.601 weights, as OpenCV's RGB2GRAY).

        ``indices`` (T',) selects frames (all when None). Frames are converted ``chunk`` at a time
        so the peak extra memory is one chunk of float frames, not a float copy of the clip.
        """
        frames = self.frames if indices is None else self.frames[indices.to(self.frames.device)]
        t, _, h, w = frames.shape
        out = torch.empty((t, 1, h, w), dtype=dtype, device=frames.device)
        for start in range(0, t, chunk):
            f = frames[start:start + chunk]
            out[start:start + chunk] = (f[:, 0:1].to(dtype) * 0.299 + f[:, 1:2].to(dtype) * 0.587
                                        + f[:, 2:3].to(dtype) * 0.114) / 255.0
        return out


@dataclass
class Keypoints:
    """Padded keypoints of T frames.

    Attributes:
        xy: (T, N, 2) float pixel coordinates (x, y).
        descriptors: (T, N, D) float descriptors (zeros where padded).
        scores: (T, N) float detector response (higher is stronger).
        mask: (T, N) bool validity.
        extra: backend-specific tensors (scale, orientation, ...), each (T, N, ...).
    """

    xy: torch.Tensor
    descriptors: torch.Tensor
    scores: torch.Tensor
    mask: torch.Tensor
    extra: Dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def counts(self) -> torch.Tensor:
        """(T,) long number of valid keypoints per frame."""
        return self.mask.sum(-1)


@dataclass
class Correspondences:
    """Padded matches of P frame pairs.

    Attributes:
        x1: (P, N, 2) points in the first frame of each pair (pixels).
        x2: (P, N, 2) matching points in the second frame (pixels).
        mask: (P, N) bool validity.
        scores: (P, N) float match quality, higher is better (1 - Lowe ratio for descriptor
            matches); used for PROSAC ordering.
        pairs: (P, 2) long frame indices (i, j) into the clip.
        num_kp1: (P,) long keypoints detected in frame i (for coverage).
        num_kp2: (P,) long keypoints detected in frame j.
    """

    x1: torch.Tensor
    x2: torch.Tensor
    mask: torch.Tensor
    scores: torch.Tensor
    pairs: torch.Tensor
    num_kp1: torch.Tensor
    num_kp2: torch.Tensor

    @property
    def num_pairs(self) -> int:
        return int(self.x1.shape[0])

    @property
    def num_matches(self) -> torch.Tensor:
        """(P,) long number of valid matches per pair."""
        return self.mask.sum(-1)

    def to(self, device: Any = None, dtype: Optional[torch.dtype] = None) -> "Correspondences":
        f = lambda t: t.to(device=device, dtype=dtype or t.dtype)  # noqa: E731
        return Correspondences(f(self.x1), f(self.x2), self.mask.to(device), f(self.scores),
                               self.pairs.to(device), self.num_kp1.to(device),
                               self.num_kp2.to(device))


@dataclass
class Fit:
    """A robust fit of one model per pair.

    Attributes:
        kind: "H" (homography, x2 ~ H x1) or "F" (fundamental, x2^T F x1 = 0).
        model: (P, 3, 3) in pixel coordinates (identity / zeros where invalid).
        inliers: (P, N) bool, the final inlier set (always within the input mask).
        residuals: (P, N) the residual the inlier test used (the ``residual`` the fit was asked
            for, e.g. symmetric transfer px for H, normalised Sampson for F); 0 where padded.
        valid: (P,) bool, False where the pair could not be fitted.
        num_inliers: (P,) long.
        iterations: (P,) long hypotheses drawn before stopping.
        score: (P,) MSAC (or RANSAC) cost of the final model, lower is better.
    """

    kind: str
    model: torch.Tensor
    inliers: torch.Tensor
    residuals: torch.Tensor
    valid: torch.Tensor
    num_inliers: torch.Tensor
    iterations: torch.Tensor
    score: torch.Tensor


def concat_correspondences(parts: Sequence[Correspondences], width: int = 0) -> Correspondences:
    """Concatenate Correspondences along P, zero-padding N to max(largest part, ``width``).

    Used to send the pairs of several scales or clips through one batched fit.
    """
    n = max([int(c.x1.shape[1]) for c in parts] + [int(width)])

    def pad(t: torch.Tensor, value: Any = 0) -> torch.Tensor:
        extra = n - t.shape[1]
        if extra == 0:
            return t
        shape = (t.shape[0], extra) + tuple(t.shape[2:])
        return torch.cat([t, torch.full(shape, value, dtype=t.dtype, device=t.device)], 1)

    return Correspondences(
        x1=torch.cat([pad(c.x1) for c in parts]), x2=torch.cat([pad(c.x2) for c in parts]),
        mask=torch.cat([pad(c.mask, False) for c in parts]),
        scores=torch.cat([pad(c.scores) for c in parts]),
        pairs=torch.cat([c.pairs for c in parts]),
        num_kp1=torch.cat([c.num_kp1 for c in parts]),
        num_kp2=torch.cat([c.num_kp2 for c in parts]))
