"""kornia scale-space SIFT (weight-free, batched over frames; the default backend on CUDA).

Uses :class:`kornia.feature.SIFTFeatureScaleSpace`: DoG scale-space extrema with sub-pixel
position/scale refinement, one dominant orientation and a (Root)SIFT descriptor (RootSIFT by
default: L1-normalised, square-rooted, so L2 distances between descriptors are Hellinger
distances; Lowe's ratio test works unchanged). Frames are processed in chunks of
``chunk_frames`` to bound memory. Keypoint centres are pixels with pixel centres at integers.
"""
from __future__ import annotations

from typing import Optional

import torch

from ..types import Keypoints
from .base import DeviceLike, check_gray, compact_keypoints, empty_keypoints, full_precision, \
    inside_mask, register_extractor, resolve_device


@register_extractor("kornia-sift")
class KorniaSIFT:
    """Batched kornia SIFT.

    Args:
        max_keypoints: strongest detections kept per frame.
        device: where kornia runs (None: CUDA when available).
        rootsift: RootSIFT descriptors (default True).
        descriptor_backend: "pyramid" (kornia's shared-scale-space describer, faster) or
            "patch" (41x41 patches + SIFTDescriptor).
        chunk_frames: frames per forward call (None: chosen from the frame size, ~2 MPix per
            chunk on CPU, ~16 MPix on CUDA).
    """

    name = "kornia-sift"
    descriptor_dim = 128

    def __init__(self, max_keypoints: int = 2000, device: DeviceLike = None, *,
                 rootsift: bool = True, descriptor_backend: str = "pyramid",
                 chunk_frames: Optional[int] = None) -> None:
        import kornia.feature as KF

        self.max_keypoints = int(max_keypoints)
        self.device = resolve_device(device)
        self.chunk_frames = chunk_frames
        self.model = KF.SIFTFeatureScaleSpace(self.max_keypoints, rootsift=rootsift,
                                              device=self.device,
                                              descriptor_backend=descriptor_backend).eval()
        self._laf_center = KF.get_laf_center
        self._laf_filled = KF.laf_is_filled
        self._laf_scale = KF.get_laf_scale
        self._laf_ori = KF.get_laf_orientation

    def _chunk(self, h: int, w: int) -> int:
        if self.chunk_frames is not None:
            return max(1, int(self.chunk_frames))
        budget = 16e6 if self.device.type == "cuda" else 2e6
        return max(1, int(budget // (h * w)))

    @torch.no_grad()
    def extract(self, gray: torch.Tensor, mask: Optional[torch.Tensor] = None) -> Keypoints:
        """Keypoints of ``gray (T, 1, H, W)`` float [0, 1]; ``mask (H, W)`` bool or None.

        Returns Keypoints (T, N, 2) with N <= max_keypoints, descriptors (T, N, 128), scores =
        |DoG| response, extra ``scale`` (T, N) LAF scale px and ``orientation`` (T, N) degrees and
        ``lafs`` (T, N, 2, 3), all on ``gray.device`` in ``gray.dtype``.
        """
        mask = check_gray(gray, mask)
        gray = full_precision(gray)
        out_device, out_dtype = gray.device, gray.dtype
        t, _, h, w = gray.shape
        if t == 0:
            return empty_keypoints(0, self.descriptor_dim, out_device, out_dtype)
        x = gray.to(device=self.device, dtype=torch.float32)
        m = None if mask is None else mask.to(self.device)
        mask4 = None if m is None else m.to(torch.float32)[None, None]
        parts = []
        step = self._chunk(h, w)
        for s in range(0, t, step):  # chunks of frames, each one batched forward
            xb = x[s:s + step]
            mb = None if mask4 is None else mask4.expand(xb.shape[0], 1, h, w)
            lafs, resp, desc = self.model(xb, mb)
            parts.append((lafs, resp, desc))
        lafs = torch.cat([p[0] for p in parts])
        resp = torch.cat([p[1] for p in parts])
        desc = torch.cat([p[2] for p in parts])
        valid = self._laf_filled(lafs) & torch.isfinite(desc).all(-1) & torch.isfinite(resp)
        xy = self._laf_center(lafs)
        valid &= inside_mask(xy, m)
        kps = Keypoints(xy=xy, descriptors=torch.nan_to_num(desc), scores=resp.abs(),
                        mask=valid,
                        extra={"scale": self._laf_scale(lafs).reshape(t, -1),
                               "orientation": self._laf_ori(lafs).reshape(t, -1),
                               "lafs": lafs})
        kps = compact_keypoints(kps, max_keypoints=self.max_keypoints)
        return _to(kps, out_device, out_dtype)


def _to(kps: Keypoints, device: torch.device, dtype: torch.dtype) -> Keypoints:
    f = lambda v: v.to(device=device, dtype=dtype)  # noqa: E731
    return Keypoints(xy=f(kps.xy), descriptors=f(kps.descriptors), scores=f(kps.scores),
                     mask=kps.mask.to(device), extra={k: f(v) for k, v in kps.extra.items()})
