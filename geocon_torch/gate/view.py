"""The weight-free gate's own view of a clip: one fixed instrument, whatever the scoring setup.

The paper's gate (DUSt3R on the first / last frames at its own input size) does not depend on
the feature backend or the working resolution the clip is scored with. The weight-free gate
does the same: the matches of its wide gate pairs come from ``gate.view_backend`` at
``gate.view_long_side`` (512 px; the source's long side when that is smaller), with
``gate.view_max_keypoints`` keypoints (contrast threshold
``gate.view_contrast_threshold`` = 0.01, a quarter of OpenCV's default, so weakly textured
footage still gives the gate matches; the strongest keypoints are kept), at one scale.
``view_backend = "auto"`` (the default) is opencv-sift (deterministic, CPU) unless the scoring
backend is torch-sift (the CUDA default), whose view is torch-sift too: the CUDA default path
then has no OpenCV step and no frame round trip to the host. So the
regime a clip gets does not change when a user switches ``features.backend`` or
``io.long_side``: the statistic reads the same pixels with the same detector (measured by
``benchmarks/gate_sweep.py``).

* view side <= working side: the frames are shrunk inside :func:`extract_correspondences`
  (one scale ``view / working``);
* view side > working side (e.g. ``io.long_side = 256`` on a 720p file), or working frames
  upscaled from a smaller source (``io.long_side = 1024`` on a 640-px file: shrinking them would
  give the view other pixels than a direct read): the gate pairs' frames are read again from the
  clip's source at the view side (:func:`read_clip` with their source indices and the letterbox
  rule of ``config.io``), so the view sees the same pixels at every working size. The source
  (:func:`~geocon_torch.io.reader.source_of`) is the clip's file, or the tensor it was read
  from (``score_clip`` / ``score_clips`` / the Metric classes / ``geometric_reward`` given
  tensors at an ``io.long_side`` other than their own): a lossless file and the same frames as a
  tensor then give the gate the same pixels, bit for bit, when the view reads them at native
  size (source long side <= ``view_long_side``); a larger source is resized to the view side
  by the reader's kernel (cv2 for files, torch for tensors: :mod:`geocon_torch.io.resize`). A
  Clip built by hand (no file, no tensor) has only its working frames, and they are used.
  With ``io.lens`` the re-read frames are undistorted as the working frames are
  (:mod:`geocon_torch.io.lens`, the intrinsics scaled to the view's size).

Matches are returned in **view pixels**, and the gate rows are fitted in them: RANSAC's
``tau_H`` is in px, so fitting the same points in working px would pick a different homography
at each working size. Object masks are looked up at the points mapped to working px
(:func:`view_to_working`), and the reference-px normalisation of
:mod:`~geocon_torch.gate.parallax` uses the view's long side. ``gate.view_backend = "same"``
keeps the scoring backend at the working resolution (the behaviour before the view existed).
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Dict, Optional, Sequence, Tuple

import torch

from ..config import FeatureConfig, GeoConConfig
from ..errors import GeoConError
from ..features.base import resolve_backend
from ..features.multiscale import extract_correspondences, scaled_size, to_working_pixels
from .._tensor_utils import to_device
from ..io.reader import read_clip, source_of
from ..types import Clip, Correspondences

SAME = "same"  # gate.view_backend: the scoring backend at the working resolution
AUTO = "auto"  # gate.view_backend: DEVICE_VIEW when the scoring backend is it, else HOST_VIEW
DEVICE_VIEW = "torch-sift"
HOST_VIEW = "opencv-sift"


def view_backend(config: GeoConConfig, device: Optional[torch.device] = None) -> str:
    """The backend of the gate's view: ``gate.view_backend``, with "auto" resolved (torch-sift
    when ``features.backend`` resolves to it on ``device``, else opencv-sift)."""
    name = config.gate.view_backend
    if name != AUTO:
        return name
    scoring = resolve_backend(config.features.backend, device)
    return DEVICE_VIEW if scoring == DEVICE_VIEW else HOST_VIEW


def view_long_side(clip: Clip, config: GeoConConfig) -> int:
    """The long side (px) the gate reads: ``gate.view_long_side`` capped by the source's long
    side (the working side when the view is off or unset)."""
    work = max(clip.size)
    side = config.gate.view_long_side
    if config.gate.view_backend == SAME or side is None:
        return work
    return int(min(int(side), max(clip.source_size)))


def view_features(config: GeoConConfig, device: Optional[torch.device] = None
                  ) -> FeatureConfig:
    """The feature settings of the gate's view: its backend (:func:`view_backend`) and keypoint
    budget at one scale; matching rules (ratio, mutual) and the content margin as the scoring
    features."""
    g, f = config.gate, config.features
    if g.view_backend == SAME:
        return f
    return FeatureConfig(backend=view_backend(config, device), max_keypoints=g.view_max_keypoints,
                         ratio=f.ratio, mutual=f.mutual, scales=(1.0,),
                         scale_mode="pyramid", content_margin_px=f.content_margin_px,
                         chunk_frames=f.chunk_frames,
                         opencv_contrast_threshold=g.view_contrast_threshold,
                         torch_sift_contrast_threshold=g.view_contrast_threshold)


def reads_source(clip: Clip, config: GeoConConfig) -> bool:
    """Whether :func:`gate_view_correspondences` reads ``clip``'s gate frames again from its
    source (:func:`~geocon_torch.io.reader.source_of`: its file, or the tensor it was read
    from) rather than from its working frames: the view is on, the clip has a source, and the
    view side is finer than the working side or the working frames are upscaled."""
    return (config.gate.view_backend != SAME and _finer_than_working(clip, config)
            and source_of(clip) is not None)


def _finer_than_working(clip: Clip, config: GeoConConfig) -> bool:
    """The view side exceeds the working side, or the working frames (above the view side)
    were upscaled from the source: shrinking them would not give the source's pixels."""
    side, work = view_long_side(clip, config), max(clip.size)
    return side > work or (side < work and work > max(clip.source_size))


def gate_view_correspondences(clip: Clip, pairs: torch.Tensor, config: GeoConConfig,
                              device: Optional[torch.device] = None
                              ) -> Optional[Tuple[Correspondences, Dict[str, Any]]]:
    """Matches of the gate ``pairs`` (G, 2) as the gate's view sees them, in **view px**.

    Returns:
        (Correspondences with x1 / x2 (G, N, 2) view px, info {"backend", "long_side",
        "source", "scale_xy"}: ``source`` "file" / "tensor" (the gate frames read again from
        the clip's source, :func:`reads_source`) or "working frames", ``scale_xy`` = (sx, sy)
        view px per working px, see :func:`view_to_working`), or None when
        ``gate.view_backend`` is "same" (the caller matches the gate pairs with the scoring
        backend) or the frames are too small.
    """
    if config.gate.view_backend == SAME:
        return None
    side, (h, w) = view_long_side(clip, config), clip.size
    fcfg = view_features(config, device)
    info: Dict[str, Any] = {"backend": fcfg.backend, "source": "working frames"}
    if _finer_than_working(clip, config):
        finer = _read_view(clip, pairs, side, config)
        if finer is not None:
            view, local, origin = finer
            c = extract_correspondences(view, local, fcfg, scales=(1.0,), device=device).get(1.0)
            if c is None:
                return None
            (hv, wv) = view.size
            info.update(source=origin, long_side=max(hv, wv), scale_xy=[wv / w, hv / h])
            return replace(c, pairs=pairs.to(c.pairs.device)), info
        side = min(side, max(h, w))  # no source: the working frames are the finest
    scale = side / max(h, w)
    c = extract_correspondences(clip, pairs, fcfg, scales=(scale,), device=device).get(scale)
    if c is None:
        return None
    hs, ws = scaled_size(h, w, scale)
    sx, sy = ws / w, hs / h
    info.update(long_side=max(hs, ws), scale_xy=[sx, sy])
    return replace(c, x1=working_to_view(c.x1, (sx, sy)),
                   x2=working_to_view(c.x2, (sx, sy))), info


def working_to_view(xy: torch.Tensor, scale_xy: Sequence[float]) -> torch.Tensor:
    """Working px (..., 2) -> view px (pixel-centre convention of the feature scales); the
    factors reach ``xy``'s device as a pinned copy (:func:`to_device`: no stream sync)."""
    s = to_device([float(scale_xy[0]), float(scale_xy[1])], xy.device, xy.dtype)
    return (xy + 0.5) * s - 0.5


def view_to_working(xy: torch.Tensor, scale_xy: Sequence[float]) -> torch.Tensor:
    """View px (..., 2) -> working px: the inverse of :func:`working_to_view`."""
    return to_working_pixels(xy, float(scale_xy[0]), float(scale_xy[1]))


def _read_view(clip: Clip, pairs: torch.Tensor, side: int, config: GeoConConfig
                ) -> Optional[Tuple[Clip, torch.Tensor, str]]:
    """The gate pairs' frames read again from the clip's source
    (:func:`~geocon_torch.io.reader.source_of`: its file, or the tensor it was read from:
    those frames of it, on its device) at long side ``side`` (the letterbox rule of
    ``config.io``; undistorted with ``io.lens`` as the working frames are), the pairs
    re-indexed into them and "file" / "tensor"; None without a readable source."""
    source = source_of(clip)
    if source is None:
        return None
    used, local = torch.unique(pairs.cpu(), return_inverse=True)
    src = clip.frame_indices.cpu()[used].tolist()
    if isinstance(source, torch.Tensor):  # the gate frames only: no pass over the whole tensor
        source = source.index_select(0, to_device(src, source.device, torch.long))
        src = list(range(len(src)))
    try:
        view = read_clip(source, long_side=side, indices=src,
                         letterbox_threshold=config.io.letterbox_threshold,
                         letterbox_min_fraction=config.io.letterbox_min_fraction,
                         lens=config.io.lens)
    except GeoConError:
        return None
    if view.num_frames != len(src):
        return None
    return view, local.reshape(-1, 2), "file" if isinstance(source, str) else "tensor"


__all__ = ["AUTO", "SAME", "gate_view_correspondences", "reads_source", "view_backend",
           "view_features", "view_long_side", "view_to_working", "working_to_view"]
