"""``torch-sift``: batched SIFT with a bounded number of launches and host syncs (the CUDA default).

One call runs every frame of the batch through the same fixed tensor program
(:mod:`.sift_scale_space`): Gaussian octaves, DoG extrema kept by ``topk`` per octave, refined
(fixed step count), then the ``max_keypoints`` strongest per frame over all octaves (``topk``
again). Orientation and description sample every keypoint's patch from one atlas of the Gaussian
images (the octaves one under the other, each with its levels 1..3 stacked) with one
``grid_sample`` each: the dominant gradient orientation (kornia's
``PatchDominantGradientOrientation``, 36 bins) on an upright patch, then a (Root)SIFT descriptor
(kornia's ``SIFTDescriptor``) on the rotated patch, both over the keypoint's LAF (scale 6 sigma,
like kornia SIFT) and both computed by :mod:`.sift_patch` (kornia's arithmetic with slices and
fixed elementwise sums instead of its convolutions). A frame's keypoints, scores and
descriptors are the same alone, in any batch and in any chunking, bit for bit on the CPU: every
per-keypoint step is elementwise in a fixed order (no GEMM or reduction over the keypoints of a
chunk, whose rounding BLAS / cuBLAS choose by shape); on CUDA the pyramid's cuDNN convolutions
remain shape-chosen. The number of ops does not grow with the number of frames
(within a chunk); the host syncs are two (trimming the padded keypoint width once, and
``compact_keypoints``). Frames are processed in chunks only when a chunk would exceed
``CHUNK_SAMPLES`` (patch samples + pyramid pixels; the accelerator value holds 8 clips x 16
frames at 640x384 with 2000 keypoints in one chunk; 20.7 GiB peak measured on an H200 for the
whole background metric).
"""
from __future__ import annotations

from typing import List, Optional, Tuple

import torch
import torch.nn.functional as F

from .._tensor_utils import to_device
from ..types import Keypoints
from .base import DeviceLike, check_gray, compact_keypoints, empty_keypoints, full_precision, \
    inside_mask, register_extractor, resolve_device
from .pip_weights import cat_keypoints
from .sift_patch import dominant_orientation, sift_descriptor
from .sift_scale_space import INTERVALS, Detections, detect, gaussian_pyramid

#: patch samples + pyramid pixels per chunk of frames (memory bound): CPU / accelerators
CHUNK_SAMPLES = {"cpu": 1.5e8, "default": 2.5e9}
LAF_SCALE = 6.0  # LAF half-size in detection sigmas (kornia's mr_size)


def chunk_frames(n: int, h: int, w: int, patch: int, device: torch.device) -> int:
    """Frames per chunk for ``n`` keypoints per frame, frames ``h x w`` and ``patch`` px
    descriptor patches."""
    budget = CHUNK_SAMPLES.get(device.type, CHUNK_SAMPLES["default"])
    per_frame = 4 * n * patch * patch + 40 * h * w
    return max(1, int(budget // per_frame))


def build_atlas(octaves: List[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gaussian levels 1..3 of every octave in one (B, 1, A, W0) image: octave o's levels are
    stacked in rows from ``row0[o]``; returns (atlas, row0 (O,) long, sizes (O, 2) (h, w))."""
    w0 = octaves[0].shape[-1]
    rows, row0, sizes, r = [], [], [], 0
    for g in octaves:
        b, _, h, w = g.shape
        lv = g[:, 1:INTERVALS + 1].reshape(b, 1, INTERVALS * h, w)
        rows.append(F.pad(lv, (0, w0 - w)))
        row0.append(r)
        sizes.append((h, w))
        r += INTERVALS * h
    dev = octaves[0].device
    return torch.cat(rows, 2), to_device(row0, dev), to_device(sizes, dev)


def atlas_patches(atlas: torch.Tensor, row0: torch.Tensor, sizes: torch.Tensor,
                   det: Detections, angle: torch.Tensor, size: int, scale: float) -> torch.Tensor:
    """(B * K, 1, size, size) patches of every detection from its octave and level of
    ``atlas``: a ``size x size`` grid over the LAF ``centre + scale * LAF_SCALE * sigma_oct *
    R(angle)`` (bilinear, clamped to the detection's level)."""
    b, k = det.valid.shape
    q = (2.0 * torch.arange(size, device=atlas.device, dtype=atlas.dtype) + 1.0) / size - 1.0
    qy, qx = torch.meshgrid(q, q, indexing="ij")
    pix = 0.5 * torch.pow(2.0, det.octave.to(atlas.dtype))
    rad = (scale * LAF_SCALE) * det.sigma / pix  # (B, K) octave px
    c, s = torch.cos(angle) * rad, torch.sin(angle) * rad
    px = det.oct_xy[..., 0, None, None] + c[..., None, None] * qx - s[..., None, None] * qy
    py = det.oct_xy[..., 1, None, None] + s[..., None, None] * qx + c[..., None, None] * qy
    hw = sizes[det.octave].to(atlas.dtype)  # (B, K, 2) (h, w)
    px = torch.minimum(px.clamp_min(0.0), (hw[..., 1] - 1)[..., None, None])
    py = torch.minimum(py.clamp_min(0.0), (hw[..., 0] - 1)[..., None, None])
    top = row0[det.octave] + (det.level - 1) * sizes[det.octave][..., 0]
    py = py + top.to(atlas.dtype)[..., None, None]
    ah, aw = atlas.shape[-2:]
    grid = torch.stack([(px + 0.5) * (2.0 / aw) - 1.0, (py + 0.5) * (2.0 / ah) - 1.0], -1)
    out = F.grid_sample(atlas, grid.reshape(b, k * size, size, 2), mode="bilinear",
                        padding_mode="border", align_corners=False)
    return out.reshape(b * k, 1, size, size)


@register_extractor("torch-sift")
class TorchSIFT:
    """Batched, sync-bounded SIFT in torch (module docstring).

    Args:
        max_keypoints: strongest detections kept per frame.
        device: where it runs (None: CUDA when available).
        contrast_threshold: OpenCV's contrastThreshold (|refined DoG| >= it / 3; the
            pre-threshold of extrema is half that).
        edge_threshold: OpenCV's edgeThreshold (principal-curvature ratio r).
        rootsift: RootSIFT descriptors (default True).
        patch_size: descriptor patch side (px samples).
    """

    name = "torch-sift"
    descriptor_dim = 128

    def __init__(self, max_keypoints: int = 2000, device: DeviceLike = None, *,
                 contrast_threshold: float = 0.02, edge_threshold: float = 10.0,
                 rootsift: bool = True, patch_size: int = 32) -> None:
        self.max_keypoints = int(max_keypoints)
        self.device = resolve_device(device)
        self.contrast_threshold = float(contrast_threshold)
        self.edge_threshold = float(edge_threshold)
        self.patch_size = int(patch_size)
        self.rootsift = bool(rootsift)

    def detect(self, gray: torch.Tensor, mask: Optional[torch.Tensor]
               ) -> Tuple[List[torch.Tensor], Detections]:
        """Gaussian octaves and the ``max_keypoints`` strongest detections per frame (invalid
        ones last), inside ``mask``."""
        octaves = gaussian_pyramid(gray)
        ct = self.contrast_threshold
        det = detect(octaves, self.max_keypoints, 0.5 * ct / INTERVALS, ct / INTERVALS,
                     self.edge_threshold)
        det.valid = det.valid & inside_mask(det.xy, mask)
        key = torch.where(det.valid, det.response, torch.full_like(det.response, -1.0))
        k = min(self.max_keypoints, key.shape[1])
        return octaves, det.take(key.topk(k, dim=1).indices)

    def _chunk(self, gray: torch.Tensor, mask: Optional[torch.Tensor]) -> Keypoints:
        octaves, det = self.detect(gray, mask)
        n = int(det.valid.sum(1).max())  # the one host read: the padded width actually used
        det = det.take(torch.arange(n, device=gray.device).expand(det.valid.shape[0], n))
        b = det.valid.shape[0]
        if n == 0:  # the extras too: chunks are concatenated with the first chunk's extras
            kp = empty_keypoints(b, self.descriptor_dim, gray.device, gray.dtype)
            return Keypoints(xy=kp.xy, descriptors=kp.descriptors, scores=kp.scores,
                             mask=kp.mask, extra={"scale": kp.scores.clone(),
                                                  "orientation": kp.scores.clone()})
        atlas, row0, sizes = build_atlas(octaves)
        del octaves
        zero = torch.zeros_like(det.sigma)
        upright = atlas_patches(atlas, row0, sizes, det, zero, 19, 1.0)
        angle = dominant_orientation(upright).reshape(b, n)
        # kornia's angle is the LAF orientation: the patch x axis points at -angle in the image
        patches = atlas_patches(atlas, row0, sizes, det, -angle, self.patch_size, 1.0)
        desc = sift_descriptor(patches, self.rootsift).reshape(b, n, -1)
        return Keypoints(xy=det.xy, descriptors=desc.masked_fill(~det.valid[..., None], 0),
                         scores=det.response.clamp_min(0), mask=det.valid,
                         extra={"scale": det.sigma * LAF_SCALE,
                                "orientation": torch.rad2deg(angle)})

    @torch.no_grad()
    def extract(self, gray: torch.Tensor, mask: Optional[torch.Tensor] = None) -> Keypoints:
        """Keypoints of ``gray (T, 1, H, W)`` float [0, 1]; ``mask (H, W)`` bool or None.

        Returns Keypoints (T, N <= max_keypoints) on ``gray.device`` in ``gray.dtype``: scores =
        |refined DoG|, descriptors (T, N, 128) RootSIFT, extra ``scale`` (LAF scale px) and
        ``orientation`` (degrees).
        """
        mask = check_gray(gray, mask)
        gray = full_precision(gray)
        t, _, h, w = gray.shape
        if t == 0:
            return empty_keypoints(0, self.descriptor_dim, gray.device, gray.dtype)
        x = gray.to(device=self.device, dtype=torch.float32)
        m = None if mask is None else mask.to(self.device)
        step = chunk_frames(self.max_keypoints, h, w, self.patch_size, self.device)
        parts = [self._chunk(x[s:s + step], m) for s in range(0, t, step)]  # memory-bound chunks
        kps = parts[0] if len(parts) == 1 else cat_keypoints(parts)
        kps = compact_keypoints(kps, max_keypoints=self.max_keypoints)
        f = lambda v: v.to(device=gray.device, dtype=gray.dtype)  # noqa: E731
        return Keypoints(xy=f(kps.xy), descriptors=f(kps.descriptors), scores=f(kps.scores),
                         mask=kps.mask.to(gray.device),
                         extra={k: f(v) for k, v in kps.extra.items()})


__all__ = ["TorchSIFT", "CHUNK_SAMPLES"]
