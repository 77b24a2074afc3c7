"""Correspondences of a clip's frame pairs at several scales (paper Algorithm 1: {1/4, 1/2, 1}).

Two ways to realise a scale s < 1 (``FeatureConfig.scale_mode``):

- ``"scale_space"`` (the ``auto`` choice for opencv-sift when every scale is a power of two):
  one SIFT detection per frame at the working resolution; scale 2^-m keeps the keypoints of
  octaves >= m - 1, which are the ones SIFT finds on the frames shrunk by 2^m (see
  :mod:`.opencv_sift`), with positions already in working pixels; each band is matched on its
  own (ratio test and mutual check among that band's keypoints, as on the shrunk frames).
- ``"pyramid"``: the grayscale frames are resized to ``(round(H s), round(W s))`` (antialiased
bilinear, pixel-centre aligned), features are detected and matched there, and the points are
mapped back to working-resolution pixels with ``x = (x_s + 0.5) / s_x - 0.5`` (``s_x = W_s / W``,
the same for y; the convention of OpenCV's and torch's ``align_corners=False`` resizes).
Keypoints on letterbox bars (``clip.content_mask`` False) are dropped, and so are those closer
to a bar than ``content_margin_px`` pixels of their own level: at scale s the mask is eroded by
``ceil(content_margin_px / s)`` working pixels (:func:`level_margin`; a keypoint's support grows
as 1 / s), then resampled to the level. Erosion never eats in from the frame border, so a clip
without bars (mask all True) is the same at every margin. Only frames that occur in ``pairs``
are processed, each once per scale (opencv-sift: frame by frame on its thread pool, converted to
uint8 inside the worker).
"""
from __future__ import annotations

import math
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from .._tensor_utils import to_device
from ..checkpoints import cached_model
from .._morphology import erode_mask
from .._memory import release_freed_memory
from ..config import FeatureConfig, LKConfig
from ..errors import InputError
from ..types import Clip, Correspondences, Keypoints, concat_correspondences
from .base import (MIN_SIDE, DeviceLike, compact_keypoints, get_extractor, inside_mask,
                   resolve_backend, resolve_device)
from .learned import MATCHER_NAMES, get_matcher
from .lk import lk_tracks, patch_ncc
from .matching import check_pairs, match_descriptors, pack_matches
from .opencv_sift import OpenCVSIFT, octave_band, to_uint8

def scaled_size(h: int, w: int, s: float) -> tuple:
    """(h_s, w_s) = (round(h s), round(w s))."""
    return max(1, int(round(h * s))), max(1, int(round(w * s)))


def rescale_gray(gray: torch.Tensor, size: tuple) -> torch.Tensor:
    """(T, C, H, W) -> (T, C, h, w): antialiased bilinear when shrinking (align_corners=False)."""
    if tuple(gray.shape[-2:]) == tuple(size):
        return gray
    shrink = size[0] * size[1] < gray.shape[-2] * gray.shape[-1]
    return F.interpolate(gray, size=size, mode="bilinear", align_corners=False, antialias=shrink)


def to_working_pixels(xy: torch.Tensor, sx: float, sy: float) -> torch.Tensor:
    """Points at a scale with factors (sx, sy) -> working-resolution pixels, with the
    half-pixel (pixel-centre) map ``(x + 0.5) / s - 0.5`` per axis. The factors go to ``xy``'s
    device as a pinned copy (:func:`to_device`: no stream sync on CUDA; not a Python-scalar
    divisor, which CUDA turns into a multiply by its reciprocal).

    Args:
        xy: (..., 2) float (x, y) pixels at the scaled resolution (integer = pixel centre).
        sx: scaled / working width (> 0).
        sy: scaled / working height (> 0).
    Returns:
        (..., 2) working-resolution pixels, ``xy``'s dtype and device.
    """
    return (xy + 0.5) / to_device([sx, sy], xy.device, xy.dtype) - 0.5


def level_margin(margin_px: int, s: float) -> int:
    """The content margin of the level at scale ``s`` (0 < s <= 1), in working pixels:
    ``ceil(margin_px / s)``, so that it is ``margin_px`` pixels of that level (e.g. 4 -> 16 at
    s = 1/4; ``margin_px`` itself at s = 1)."""
    return int(math.ceil(margin_px / float(s) - 1e-9))


def _scaled_mask(mask: torch.Tensor, size: tuple) -> torch.Tensor:
    """Nearest-pixel-centre resampling of an (H, W) bool mask to ``size``."""
    m = F.interpolate(mask.to(torch.float32)[None, None], size=size, mode="nearest-exact")
    return m[0, 0] > 0.5


def _host_masks(levels: list) -> List[torch.Tensor]:
    """The working-size (H, W) bool masks of ``levels`` (their last entry) on the CPU, in one
    copy."""
    return list(torch.stack([lv[-1] for lv in levels]).cpu().unbind(0)) if levels else []


def _rescale_keypoints(kps: Keypoints, sx: float, sy: float, mask: Optional[torch.Tensor]
                       ) -> Keypoints:
    xy = to_working_pixels(kps.xy, sx, sy)
    kps = Keypoints(xy=xy.masked_fill(~kps.mask[..., None], 0), descriptors=kps.descriptors,
                    scores=kps.scores, mask=kps.mask, extra=kps.extra)
    return compact_keypoints(kps, inside_mask(xy, mask))


def _remap(c: Correspondences, sx: float, sy: float, pairs: torch.Tensor,
           mask: Optional[torch.Tensor]) -> Correspondences:
    x1 = to_working_pixels(c.x1, sx, sy)
    x2 = to_working_pixels(c.x2, sx, sy)
    keep = c.mask & inside_mask(x1, mask) & inside_mask(x2, mask)
    return pack_matches(x1, x2, keep, c.scores, pairs, c.num_kp1, c.num_kp2)


def resolve_scale_mode(mode: str, backend: str, scales: Sequence[float]) -> str:
    """The scale mode a run uses: "scale_space" or "pyramid" (``FeatureConfig.scale_mode``).

    ``backend`` is the resolved backend name. Raises GeoConError for an unknown mode, or for
    ``"scale_space"`` where it does not apply (not opencv-sift, or a scale not a power of two).
    """
    if mode not in ("auto", "pyramid", "scale_space"):
        raise InputError(f"features.scale_mode must be auto, pyramid or scale_space, got "
                          f"{mode!r}")
    fits = backend == "opencv-sift" and all(octave_band(s) is not None for s in scales)
    if mode == "scale_space" and not fits:
        raise InputError(f"features.scale_mode='scale_space' needs the opencv-sift backend and "
                          f"power-of-two scales, got {backend!r} and {tuple(scales)}")
    return "scale_space" if fits and mode != "pyramid" else "pyramid"


def _match_levels(all_kps: List[Keypoints], scales: Sequence[float], local_pairs: torch.Tensor,
                  out_pairs: torch.Tensor, cfg: FeatureConfig) -> Dict[float, Correspondences]:
    """Match each scale's keypoints (popped from ``all_kps``: one scale alive at a time)."""
    result: Dict[float, Correspondences] = {}
    for s in scales:
        kps = all_kps.pop(0)
        c = match_descriptors(kps, local_pairs, ratio=cfg.ratio, mutual=cfg.mutual)
        del kps
        result[s] = Correspondences(c.x1, c.x2, c.mask, c.scores, out_pairs, c.num_kp1,
                                    c.num_kp2)
    return result


def _ncc_guard(c: Correspondences, gray: torch.Tensor, pairs: torch.Tensor,
               lk: LKConfig) -> Correspondences:
    """LK tracks ``c`` (at the resolution of ``gray`` (T, 1, H, W), ``pairs`` (P, 2) into it)
    with the photometric guard of ``lk``: a track stays when the zero-mean NCC of the
    ``lk.ncc_window``-square patches around x1 and x2 is >= ``lk.min_ncc`` (the epipolar
    protocol's guard, :func:`~geocon_torch.features.lk.patch_ncc`); unchanged at -1."""
    if float(lk.min_ncc) <= -1.0 or c.x1.shape[1] == 0:
        return c
    keep = c.mask & (patch_ncc(gray, pairs, c.x1, c.x2, int(lk.ncc_window))
                     >= float(lk.min_ncc))
    return replace(c, mask=keep, scores=torch.where(keep, c.scores, torch.zeros_like(c.scores)))


def extract_correspondences(clip: Clip, pairs: torch.Tensor, config: Optional[FeatureConfig] = None,
                            *, scales: Optional[Sequence[float]] = None,
                            device: DeviceLike = None) -> Dict[float, Correspondences]:
    """Matches of every pair (i, j) of ``clip`` at every scale, in working-resolution pixels.

    Args:
        clip: the clip (frames at working resolution, content mask).
        pairs: (P, 2) long frame indices (i, j).
        config: FeatureConfig (backend, max_keypoints, ratio, mutual, scales, checkpoint, LK
            parameters, content_margin_px); None = defaults.
        scales: overrides ``config.scales``; each in (0, 1] relative to the working resolution.
        device: where features run (None: CUDA when available, else CPU); "auto" picks
            kornia-sift on CUDA and opencv-sift on the CPU.
    Returns:
        {scale: Correspondences} with x1, x2 (P, N, 2) px at working resolution, pairs = the
        given pairs, num_kp1 / num_kp2 = keypoints (or corners) detected at that scale.
        Scales whose frames would be smaller than 16 px are left out.

    Memory: the pairs are processed in chunks that need at most ``config.chunk_frames``
    distinct frames each (:func:`pair_chunks`; only those frames are decoded and only their
    features exist at a time), and the chunks' matches are concatenated. A pair's matches
    depend only on its two frames, so the result equals the one-chunk run (bit for bit with
    opencv-sift; the batched torch backends' floating-point reductions can differ by ~1e-4 px
    with the frames batched together).
    """
    cfg = config or FeatureConfig()
    scales = tuple(cfg.scales if scales is None else scales)
    if not scales or any(not (0 < float(s) <= 1.0) for s in scales):
        raise InputError(f"scales must be in (0, 1], got {scales}")
    pairs = check_pairs(pairs, clip.num_frames)
    chunks = pair_chunks(pairs, resolve_chunk_frames(cfg.chunk_frames, device, clip.size))
    if len(chunks) <= 1 and isinstance(clip.frames, torch.Tensor):
        return _extract_all(clip, pairs, cfg, scales, device)
    parts: List[Dict[float, Correspondences]] = []
    for rows in chunks:  # one chunk's frames decoded (as a tensor), extracted, matched, released
        frames, local = torch.unique(pairs[rows], return_inverse=True)
        part = _extract_all(clip.subclip(frames), local.reshape(-1, 2), cfg, scales, device)
        parts.append({s: _with_pairs(c, pairs[rows]) for s, c in part.items()})
        del part
        release_freed_memory()  # the chunk's frames and features are gone: RSS too
    order = torch.argsort(torch.cat(chunks))  # back to the order of ``pairs``
    return {s: _take_rows(concat_correspondences([p[s] for p in parts]), order)
            for s in parts[0]}


#: pixels of the frames one feature chunk may hold, per device type ("auto" chunk_frames)
CHUNK_PIXELS = {"cpu": None, "default": 4e7}
CPU_CHUNK_FRAMES = 48


def resolve_chunk_frames(chunk_frames: Union[None, int, str], device: DeviceLike,
                         size_hw: Sequence[int]) -> Optional[int]:
    """``features.chunk_frames`` made concrete: "auto" is 48 frames on the CPU and, on an
    accelerator, the frames of ``size_hw`` (H, W) px that :data:`CHUNK_PIXELS` holds (about
    160 frames of 640x384: a batch of clips goes through the feature stage as one chunk)."""
    if chunk_frames != "auto":
        return chunk_frames
    budget = CHUNK_PIXELS.get(resolve_device(device).type, CHUNK_PIXELS["default"])
    if budget is None:
        return CPU_CHUNK_FRAMES
    return max(CPU_CHUNK_FRAMES, int(budget // max(1, int(size_hw[0]) * int(size_hw[1]))))


def pair_chunks(pairs: torch.Tensor, chunk_frames: Optional[int]) -> List[torch.Tensor]:
    """Split (P, 2) pairs into chunks of rows, each needing at most ``chunk_frames``
    distinct frames (a single pair always fits): pairs spanning fewer than
    ``chunk_frames // 2`` frames first, by first frame (one forward pass over the clip), the
    wider ones (e.g. the gate's first / last pairs) after them. None / 0 or a clip whose
    frames fit: one chunk. Returns a list of (P_k,) long row indices into ``pairs``.
    """
    p = int(pairs.shape[0])
    rows = pairs.detach().cpu().tolist()  # host bookkeeping: one transfer, no per-pair reads
    if not chunk_frames or p == 0 or len({f for r in rows for f in r}) <= int(chunk_frames):
        return [torch.arange(p)]
    span = max(1, int(chunk_frames) // 2)
    order = sorted(range(p), key=lambda r: (max(rows[r]) - min(rows[r]) >= span,
                                            min(rows[r]), max(rows[r])))
    chunks, current, frames = [], [], set()
    for r in order:
        need = frames | set(rows[r])
        if current and len(need) > int(chunk_frames):
            chunks.append(current)
            current, need = [], set(rows[r])
        current.append(r)
        frames = need
    chunks.append(current)
    return [torch.tensor(c, dtype=torch.long) for c in chunks]


def _with_pairs(c: Correspondences, pairs: torch.Tensor) -> Correspondences:
    return Correspondences(c.x1, c.x2, c.mask, c.scores, pairs.to(c.pairs.device), c.num_kp1,
                           c.num_kp2)


def _take_rows(c: Correspondences, rows: torch.Tensor) -> Correspondences:
    """Rows ``rows`` of every (P, ...) tensor of ``c``."""
    r = rows.to(c.x1.device)
    return Correspondences(c.x1[r], c.x2[r], c.mask[r], c.scores[r], c.pairs[r.to(
        c.pairs.device)], c.num_kp1[r.to(c.num_kp1.device)], c.num_kp2[r.to(c.num_kp2.device)])


def _extractor_options(cfg: FeatureConfig, backend: str) -> Dict[str, float]:
    """Detector options of the concrete ``backend`` from ``cfg``: opencv-sift's
    ``contrastThreshold``, torch-sift's ``contrast_threshold`` when set (else its default)."""
    if backend == "opencv-sift":
        return {"contrastThreshold": cfg.opencv_contrast_threshold}
    if backend == "torch-sift" and cfg.torch_sift_contrast_threshold is not None:
        return {"contrast_threshold": float(cfg.torch_sift_contrast_threshold)}
    return {}


#: concrete backends without weights: built for every call (cheap), never kept
WEIGHT_FREE_BACKENDS = ("opencv-sift", "kornia-sift", "torch-sift")


def feature_backend(cfg: FeatureConfig, device: torch.device) -> Tuple[Any, Any]:
    """(extractor, matcher) of ``cfg.backend`` on ``device``, one of them None (both for
    "lk-tracks"). A backend with weights (a matcher, or DISK / XFeat / ALIKED) is built once per
    process, weights file and options (:func:`~geocon_torch.checkpoints.cached_model`) and kept
    for the next batches (and the scoring preflight's build is the one the stage uses).

    Raises:
        CheckpointError / OptionalDependencyError: the backend's weights cannot be loaded.
    """
    backend = cfg.backend
    if backend == "lk-tracks":
        return None, None
    if backend in MATCHER_NAMES:
        opts: Dict[str, Any] = ({"max_keypoints": cfg.max_keypoints} if backend != "loftr"
                                else {})
        build = lambda: (None, get_matcher(backend, checkpoint=cfg.checkpoint,  # noqa: E731
                                           device=device, **opts))
    else:
        concrete = resolve_backend(backend, device)
        opts = {"max_keypoints": cfg.max_keypoints, **_extractor_options(cfg, concrete)}
        build = lambda: (get_extractor(backend, device=device,  # noqa: E731
                                       checkpoint=cfg.checkpoint, **opts), None)
        if concrete in WEIGHT_FREE_BACKENDS:
            return build()
    return cached_model("features", cfg.checkpoint,
                        (backend, str(device), tuple(sorted(opts.items()))), build,
                        expect_sha256=cfg.checkpoint_sha256 if cfg.checkpoint else None)


def _extract_all(clip: Clip, pairs: torch.Tensor, cfg: FeatureConfig, scales: Sequence[float],
                 device: DeviceLike) -> Dict[float, Correspondences]:
    """:func:`extract_correspondences` of checked ``pairs`` in one chunk (every frame that
    occurs in ``pairs`` at once)."""
    dev = resolve_device(device)
    used, inverse = torch.unique(pairs.reshape(-1), return_inverse=True)
    local_pairs = to_device(inverse.reshape(-1, 2), dev)
    out_pairs = to_device(pairs, dev)
    h, w = clip.size
    content = clip.content_mask.to(device=dev, dtype=torch.bool)
    # (scale, size, sx, sy, content mask at that size, the same at the working size), each
    # eroded by the margin in that level's pixels; scales below MIN_SIDE px are left out
    levels = []
    for s in scales:
        hs, ws = scaled_size(h, w, float(s))
        if min(hs, ws) >= MIN_SIDE:
            inner = erode_mask(content, level_margin(int(cfg.content_margin_px), s))
            levels.append((float(s), (hs, ws), ws / w, hs / h, _scaled_mask(inner, (hs, ws)),
                           inner))
    backend = cfg.backend
    mode = cfg.scale_mode
    extractor, matcher = feature_backend(cfg, dev)
    bands = [octave_band(lv[0]) for lv in levels]
    if resolve_scale_mode(mode, extractor.name if extractor is not None else backend,
                          scales) == "scale_space":
        def image(k: int):  # frame k as uint8, converted inside the worker
            return to_uint8(clip.gray(indices=used[k:k + 1]))[0]

        # detected once inside the finest level's mask (the least eroded); each band keeps the
        # keypoints inside its own level's mask (one host copy of all of them)
        band_masks = _host_masks(levels)
        finest = max(zip(levels, band_masks), key=lambda lm: lm[0][0])[1] if levels else None
        all_kps = extractor.extract_scale_space(int(used.numel()), image, finest, bands, dev,
                                                torch.float32, band_masks=band_masks)
        return _match_levels(all_kps, [lv[0] for lv in levels], local_pairs, out_pairs, cfg)
    if isinstance(extractor, OpenCVSIFT):
        # frame by frame on the extractor's thread pool: each frame is converted to gray and
        # resized to every scale inside its worker (no float copy of the clip), once per scale
        def images(k: int) -> list:
            g = clip.gray(indices=used[k:k + 1]).to(dev)
            return [to_uint8(rescale_gray(g, size))[0] for _, size, _, _, _, _ in levels]

        inner_cpu = _host_masks(levels)

        def to_working(sx: float, sy: float, inner: torch.Tensor):  # as _rescale_keypoints
            def refine(xy: torch.Tensor):
                xy = to_working_pixels(xy, sx, sy)
                return xy, inside_mask(xy, inner)
            return refine

        all_kps = extractor.extract_many(int(used.numel()), images, [lv[4] for lv in levels],
                                         dev, torch.float32,
                                         refine=[to_working(lv[2], lv[3], m)
                                                 for lv, m in zip(levels, inner_cpu)])
        return _match_levels(all_kps, [lv[0] for lv in levels], local_pairs, out_pairs, cfg)
    result: Dict[float, Correspondences] = {}
    gray = clip.gray(indices=used).to(dev)
    for s, size, sx, sy, m_s, inner in levels:  # a handful of scales; each batched over frames
        g = rescale_gray(gray, size)
        if extractor is not None:
            kps = _rescale_keypoints(extractor.extract(g, m_s), sx, sy, inner)
            c = match_descriptors(kps, local_pairs, ratio=cfg.ratio, mutual=cfg.mutual)
            c = Correspondences(c.x1, c.x2, c.mask, c.scores, out_pairs, c.num_kp1, c.num_kp2)
        elif matcher is not None:
            c = _remap(matcher.match(g, local_pairs, m_s), sx, sy, out_pairs, inner)
        else:
            c = lk_tracks(g, local_pairs, **cfg.lk.lk_kwargs(cfg.max_keypoints, "torch"),
                          mask=m_s)
            c = _remap(_ncc_guard(c, g, local_pairs, cfg.lk), sx, sy, out_pairs, inner)
        result[s] = c
    return result
