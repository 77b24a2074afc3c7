"""The ``foreground`` block of a clip result: AdaDFRC-W2 per object (paper Algorithm 1 D).

``foreground_block(clip, masks, config, device)`` scores every adjacent pair ``(t, t+1)`` in
which an object mask (taken at frame t) has at least ``min_object_pixels`` pixels:

1. dense flow ``t -> t+1`` (and ``t+1 -> t`` when ``occlusion_weighting``, giving a
   forward-backward reliability map with tolerance ``fb_threshold_px`` at each scale's own
   resolution) with the configured backend (``flow``: auto | torch-lk | raft_small | raft_large);
2. for each scale ``s`` in ``scales`` (default {1/4, 1/2, 1}): frames resized by ``s``
   (antialiased bilinear), masks by area coverage >= 0.5, ``D_s`` from
   :func:`~geocon_torch.measures.foreground.adadfrc` converted to working-resolution
   px^2 (``D_s / s^2``); objects with fewer than ``min_object_pixels`` pixels at a scale are
   invalid at that scale only;
3. ``D_t`` = the value at the finest valid scale (``scale_reduction="finest"``, the default) or
   the median over the valid scales (``"median"``); the per-scale track means are reported as
   diagnostics (``per_scale``). Why finest: a deformation a few cells wide is below the flow's
   resolution at 1/4 scale, so coarse scales see it as rigid and a median over scales mostly
   reports the 1/2-scale value; on our synthetic ripple scenes the median lost up to 55% of the
   true residual for a half-size object (breaking the adaptive grid's size invariance), while
   the full-resolution score stayed within 12% and was 2-5x lower on rigid objects.
   Per object ``adadfrc_mean`` = mean of ``D_t`` over its valid pairs (S^k, sec. 4.5) and
   ``adap90`` = their 90th percentile (eq. 17).

Batched over clips (:func:`score_foregrounds`, what ``score_clips`` runs): the pairs of every clip
whose flow crop has the same size (and flow scale) go through the flow and AdaDFRC together, in
chunks of :func:`flow_chunk_pairs` pairs (the pixels of ``batch_pairs`` pairs of
``max_flow_side`` x ``max_flow_side`` px; each chunk batched over pairs and objects, objects
padded to the chunk's largest count with empty masks). Every computation is per pair and per
object, so a clip's block is the same (bit for bit on the CPU) alone or in a batch, whatever the
chunking.

Cost caps (the default preset's foreground must not cost more than the background block; each
cap is reported with what it cut in the block's ``caps`` / ``skipped``; None or 0 lifts it):

* ``max_objects`` (default 4): the objects with the largest mask area over the clip are scored,
  the others are listed in ``skipped.objects`` (count) and left out of ``objects``;
* ``max_pairs`` (default 12): at most that many of the adjacent pairs holding an object, spread
  evenly over the clip (first and last kept); ``skipped.pairs`` counts the others. Pairs
  (t, t + 1) whose frame t + 1 is held (``Clip.meta["motion"]["held"]``, e.g. every frame shown
  twice: two identical frames, a zero residual) are left out before the cap and not counted
  (:func:`geocon_torch.io.pairs.foreground_pairs`);
* ``max_flow_side`` (default 512 px): flow runs on frames whose long side is at most that at
  scale 1 (every scale ``s`` becomes ``s * c`` with ``c = min(1, max_flow_side / long side)``,
  reported as ``flow_scale``); values are still converted to working-resolution px^2
  (``D / (s c)^2``). Working sizes up to 512 px are unaffected.

Flow crop: the flow runs on the box around the objects (the union of their masks over every
scored pair, :func:`box_of_lines`, so chunking changes no number; widened by :func:`crop_margin` px
on each side, clamped to the frame), not on the whole frame:
the flow and AdaDFRC only read pixels near the objects, and a 640x384 clip with one box of about
a tenth of the frame then costs about a quarter of the flow (bounded per-clip cost, issue 14).

Motion-mask cores (``core_erosion``, what the pipeline passes for the weight-free motion
segmentation's objects only; never for given masks or SAM-2's): those masks are built from
seed squares of radius ``segment.motion_seed_radius_px`` around every background-model outlier
and so reach 4-8 px into the static background, whose zero flow no affine fit explains (a rigid
mover scored 2.77 px^2 on them, 0.137 on its exact masks: as high as a 1.5-px ripple). The
foreground scores each object's *core*: its mask eroded per frame by :func:`core_erosion_px`
working px (5/8 of the seed radius: 5 px by default; on the segmentation's reduced cells,
``max(1, round(e / f))`` cells of ``f`` px, as the segmentation scales its own radii); the
dilated masks still remove the object from the background. A pair whose dilated mask has
``min_object_pixels`` but whose core has not is not scored for that object (a thin or small
blob: mostly bleed); the block's ``core`` says ``{"erosion_px", "lost_pairs": {id: n}}`` and an
object left with no scored pair gets a ``reason``.

Pre-shift of fast movers (``preshift``; torch-lk only: RAFT's all-pairs correlation is not bound
to a pyramid's reach): dense LK loses a small object that moves farther than its pyramid reaches
(coarse levels blur a small object into the background; a rigid 40x32 object scored 5.9 / 8.4
px^2 at 14 / 20 px/frame on its exact masks). For every scored (pair, object) the displacement
of the object's mask centroid from frame t to t+1 is known (it reaches the host in the one
transfer of the objects' presence). Where it exceeds :data:`PRESHIFT_MIN_PX` flow px on an
axis *and* frame t+1 read that far (rounded to whole px) matches the object's pixels of frame
t better than frame t+1 as it is (:func:`shift_fits_better`, blurred grey differences:
a motion mask that covers other parts of the object from frame to frame moves its centroid by
up to 20 px when the object moves 4; that answer travels with the crops' lines, the second
host transfer), frame t+1's crop is read shifted by that displacement (borders replicated), LK
runs on the residual motion and the shift is added back to the flow, in an extra flow row of
the same chunk that scores that object only (the rows are gathered in one indexing op: no loop
per pair or object, no host read). The block's ``preshift`` says ``{"min_px", "pairs": {id:
n}}``; without such a pair neither the key nor any number changes. The centroid is the visible
mask's: an object entering, leaving or occluded moves its centroid by less than itself, so
part of the motion stays for LK.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from .._precision import compile_failure
from .._tensor_utils import masked_median, spatial_counts
from .._memory import release_freed_memory
from .._morphology import erode_mask
from ..config import ForegroundConfig, GeoConConfig, SegmentConfig, load_config
from ..errors import InputError
from ..features.multiscale import rescale_gray, scaled_size
from ..flow import forward_backward_reliability
from ..flow.factory import cached_flow, resolve_flow
from ..flow.lk_dense import gaussian_blur
from ..io.pairs import foreground_pairs, held_of
from ..measures.foreground import adadfrc, adadfrc_summary
from ..segment.files import load_masks
from ..types import BlockMasks, Clip, pack_mask_bits, unpack_mask_bits
from .isolation import batch_or_each
from .progress import Progress


def _foreground_config(config: Union[None, dict, GeoConConfig, ForegroundConfig]
                       ) -> ForegroundConfig:
    if isinstance(config, ForegroundConfig):
        return config
    return load_config(config).foreground


def _resize(x: torch.Tensor, scale: float) -> torch.Tensor:
    """(B, C, H, W) at ``scale`` of its size (antialiased bilinear when shrinking)."""
    return rescale_gray(x, scaled_size(*x.shape[-2:], scale))


def flow_scale(size: Tuple[int, int], max_flow_side: Optional[int]) -> float:
    """The factor c = min(1, max_flow_side / long side) every flow scale is multiplied by
    (1.0 when ``max_flow_side`` is None or 0)."""
    if not max_flow_side:
        return 1.0
    return min(1.0, float(max_flow_side) / float(max(int(size[0]), int(size[1]))))


def crop_margin(size: Tuple[int, int]) -> int:
    """Flow-crop margin in px around the objects: max(32, 0.075 x the long side) (object motion
    between adjacent frames, the LK window and the pyramid's reach all stay inside it)."""
    return max(32, int(round(0.075 * max(int(size[0]), int(size[1])))))


#: the motion-mask core's erosion as a fraction of ``segment.motion_seed_radius_px``, measured
#: on rendered rigid / rippling movers (audit s28 F1; AdaDFRC px^2 with erosions of 0 / 4 / 5 /
#: 6 px): rigid 40x32 at (5, 1) px/frame 2.765 / 0.385 / 0.176 / 0.066 (exact masks 0.137),
#: rigid on a panning camera 2.864 / 0.373 / 0.162 / 0.167, a 1.5-px ripple 2.339 / 1.791 /
#: 1.659 / 1.511 (exact masks 1.771): 5 px (0.625 x the 8-px seed radius) separates them best
CORE_EROSION_RATIO = 0.625

#: flow px (at the flow's resolution, either axis) beyond which a (pair, object)'s mask-centroid
#: displacement is pre-shifted before LK. Measured on rigid 24x24 / 40x32 / 80x64 objects (exact
#: masks, torch-lk): up to 6 px LK alone scores <= 0.26 px^2 and the pre-shift no better (the
#: background then moves by the shift and bleeds into the object's border alike); from 8 px on
#: LK alone loses the small objects (0.3 - 11 px^2 at 8 - 20 px) and the pre-shift keeps them at
#: 0.01 - 0.14 px^2 (audit s28 F5)
PRESHIFT_MIN_PX = 6.0

#: Gaussian blur (working px) of the grey frames :func:`shift_fits_better` compares: a fine
#: texture decorrelates within ~2 px, so unblurred differences at a 2-px and a 15-px residual
#: are alike; blurred by 3 px they grow with the residual (a 60x40 box: 4213 at 2 px, 10209 at
#: 15 px, 336 at 0)
PRESHIFT_BLUR_PX = 3.0


def core_erosion_px(segment: SegmentConfig) -> int:
    """Erosion (working px, >= 0) that takes the motion segmentation's objects to their core:
    ``round(CORE_EROSION_RATIO x motion_seed_radius_px)`` (0 when the seed squares are off)."""
    radius = int(segment.motion_seed_radius_px)
    return int(round(CORE_EROSION_RATIO * radius)) if radius > 0 else 0


def core_masks(masks: Any, erosion_px: int, chunk: int = 64) -> Tuple[Any, int]:
    """Object masks (T, K, H, W) eroded per frame and object by a (2e + 1)^2 square.

    Args:
        masks: bool tensor, or lazy :class:`~geocon_torch.types.BlockMasks` (eroded on their
            reduced cells, ``max(1, round(erosion_px / factor))`` cells, ``chunk`` frames at a
            time; the result stays lazy).
        erosion_px: working px, an integer >= 0 (0: the masks as they are).
    Returns:
        (eroded masks of the same kind and shape, the erosion applied in working px).
    """
    if erosion_px <= 0:
        return masks, 0
    if not isinstance(masks, BlockMasks):
        return erode_mask(masks, int(erosion_px)), int(erosion_px)
    cells = max(1, int(round(erosion_px / masks.factor)))
    t, k = int(masks.bits.shape[0]), int(masks.ids.numel())
    h, w = masks.bits.shape[-2:]
    out = BlockMasks(torch.zeros(0, k, h, w, dtype=torch.bool, device=masks.device),
                     masks.factor, masks.size, masks.content, masks.chunk)
    parts = [pack_mask_bits(erode_mask(unpack_mask_bits(masks.bits[a:a + chunk], masks.ids),
                                       cells)) for a in range(0, t, chunk)]
    if parts:
        out.bits = torch.cat(parts)
    return out, cells * masks.factor


def mask_moments(masks: Any, step: int = 16) -> torch.Tensor:
    """(T, K, 3) float64 on the masks' device: pixel count, sum of x, sum of y (working px) of
    every mask of ``masks`` (T, K, H, W) (tensor or lazy masks, ``step`` frames at a time).
    Counts are exact integers (below 2^53)."""
    t, k, h, w = (int(n) for n in masks.shape)
    dev = masks.device
    xs = torch.arange(w, device=dev, dtype=torch.float64)
    ys = torch.arange(h, device=dev, dtype=torch.float64)
    out = []
    for a in range(0, t, step):  # chunks bound what lazy masks unpack
        m = masks[a:a + step]
        m = m.full() if isinstance(m, BlockMasks) else m.bool()
        rows, cols = m.sum(-1).to(torch.float64), m.sum(-2).to(torch.float64)  # (t, K, H | W)
        out.append(torch.stack([rows.sum(-1), cols @ xs, rows @ ys], -1))
    return torch.cat(out) if out else torch.zeros(0, k, 3, dtype=torch.float64, device=dev)


def occupied_lines(masks: Any, pairs: torch.Tensor, step: int) -> torch.Tensor:
    """(chunks * (H + W),) bool on the masks' device: per chunk of ``step`` of the frames
    ``pairs`` (M,), the rows then the columns of masks (T, K, H, W) holding a pixel."""
    h, w = masks.shape[-2:]
    occupied = []
    for s in range(0, int(pairs.numel()), step):  # chunks bound what lazy masks unpack
        m = masks[pairs[s:s + step].to(masks.device)].reshape(-1, h, w).any(0)
        occupied.append(torch.cat([m.any(1), m.any(0)]))
    return torch.cat(occupied)


def box_of_lines(occ: np.ndarray, size: Tuple[int, int], margin: int) -> Tuple[slice, slice]:
    """The flow crop of a track from the host lines ``occ`` (chunks, H + W) bool of
    :func:`occupied_lines` for frames of ``size`` (H, W): the union of the chunks' boxes widened by
    ``margin`` px and clamped to the frame (one crop for the whole track, so the scores do not
    depend on how the pairs are chunked; a chunk without any mask pixel gives the whole frame)."""
    h, w = int(size[0]), int(size[1])
    rows, cols = occ[:, :h], occ[:, h:]
    if not rows.any(1).all():
        return slice(0, h), slice(0, w)
    ry, cx = np.flatnonzero(rows.any(0)), np.flatnonzero(cols.any(0))
    return (slice(max(0, int(ry[0]) - margin), min(h, int(ry[-1]) + 1 + margin)),
            slice(max(0, int(cx[0]) - margin), min(w, int(cx[-1]) + 1 + margin)))


def score_pairs(frames1: torch.Tensor, frames2: torch.Tensor, masks: torch.Tensor,
                estimator, cfg: ForegroundConfig,
                size: Optional[Tuple[int, int]] = None,
                shift: Optional[torch.Tensor] = None) -> tuple:
    """Multi-scale AdaDFRC of a chunk of pairs.

    Args:
        frames1, frames2: (P, 3, H, W) float [0, 1]; masks: (P, K, H, W) bool at frames1.
        estimator: a FlowEstimator. cfg: ForegroundConfig (``max_flow_side`` caps the flow's
            resolution: each scale s runs at s * :func:`flow_scale` of ``size``).
        size: (H, W) of the whole frame when the inputs are a crop of it (None: their size).
        shift: (P, 2) float (dx, dy) working px by which ``frames2`` was read shifted (its
            pixel x shows frame t+1 at x + shift; the pre-shift of fast movers), added back to
            the flow of the rows where it is not 0 (None: no row shifted).
    Returns:
        D (P, K) in working-resolution px^2, valid (P, K) bool, and the per-scale values
        D_s (S, P, K) (working px^2) with their validity (S, P, K).
    """
    per_scale, ok_scale = [], []
    cap = flow_scale(tuple(size or frames1.shape[-2:]), cfg.max_flow_side)
    for s in cfg.scales:
        s = float(s) * cap
        a, b = _resize(frames1, s), _resize(frames2, s)
        m = _resize(masks.to(a.dtype), s) >= 0.5
        if cfg.occlusion_weighting:
            flows = estimator(torch.cat([a, b]), torch.cat([b, a]))
            fw, bw = flows.chunk(2)
            rel = forward_backward_reliability(fw, bw, cfg.fb_threshold_px)
        else:
            fw, rel = estimator(a, b), None
        if shift is not None:  # back to frame t+1's coordinates (the fit reads flow values)
            ratio = torch.tensor([a.shape[-1] / frames1.shape[-1],
                                  a.shape[-2] / frames1.shape[-2]], dtype=fw.dtype,
                                 device=fw.device)
            back = (shift.to(fw.dtype) * ratio).view(-1, 2, 1, 1)
            fw = torch.where((shift != 0).any(1).view(-1, 1, 1, 1), fw + back, fw)
        d, v = adadfrc(fw, m, rel, grid=cfg.grid, score=cfg.score,
                       min_pixels=cfg.min_object_pixels)
        per_scale.append(d / (s * s))
        ok_scale.append(v)
    d_s, v_s = torch.stack(per_scale), torch.stack(ok_scale)  # (S, P, K)
    if cfg.scale_reduction == "finest":
        order = torch.tensor([float(s) for s in cfg.scales]).argsort(descending=True)
        order = order.to(d_s.device)
        first = v_s[order].to(torch.int8).argmax(0, keepdim=True)
        return d_s[order].gather(0, first)[0], v_s.any(0), d_s, v_s
    if cfg.scale_reduction != "median":
        raise InputError(f"scale_reduction must be 'median' or 'finest', got "
                         f"{cfg.scale_reduction!r}")
    d, v = masked_median(d_s, v_s, dim=0)
    return d, v, d_s, v_s


def flow_chunk_pairs(crop: Tuple[int, int], cap: float, cfg: ForegroundConfig) -> int:
    """Pairs per flow chunk for crops of ``crop`` (H, W) working px run at flow scale ``cap``:
    as many as fit in the pixels of ``batch_pairs`` pairs of ``max_flow_side`` x
    ``max_flow_side`` px (512 px when uncapped), at least ``batch_pairs`` (the memory bound of
    the config's ``batch_pairs``)."""
    side = int(cfg.max_flow_side or 512)
    h, w = scaled_size(int(crop[0]), int(crop[1]), float(cap))
    step = max(1, int(cfg.batch_pairs))
    return max(step, (step * side * side) // max(1, h * w))


def foreground_block(clip: Clip, masks: Any, config: Union[None, dict, GeoConConfig,
                                                           ForegroundConfig] = None,
                     device: Optional[Union[str, torch.device]] = None,
                     progress: Optional[Progress] = None, core_erosion: int = 0
                     ) -> Dict[str, Any]:
    """AdaDFRC-W2 of every object of a clip (the ``foreground`` block of the result):
    :func:`score_foregrounds` of one clip.

    Args:
        clip: the decoded clip (frames at working resolution).
        masks: (T, K, H, W) (or (T, H, W) for one object) bool tensor / array of object masks,
            or None. Resized (nearest) to the working size when needed.
        config: GeoConConfig (its ``foreground`` section is used), ForegroundConfig, a dict or
            None (defaults).
        device: where flow and scores run (default: the clip's device).
        progress: reports ``foreground done/total pairs`` per chunk (optional).
        core_erosion: working px by which every object is eroded to its core before it is
            scored (0, the default: the masks as given; the pipeline passes
            :func:`core_erosion_px` for the motion segmentation's masks only; module docstring).
    Returns:
        ``{"objects": [{"id", "frames", "adadfrc_mean", "adap90", "per_pair", "per_scale"}],
        "status", "reason", "flow", "score", "scales", "caps", "skipped", "flow_scale"}``,
        plus ``"core"`` (with ``core_erosion``; an object of no scored pair whose core was
        too small gets a ``reason``) and ``"preshift"`` (when a fast mover was pre-shifted).
        ``id`` is the object's index in the masks, ``frames`` the number of scored pairs of the
        object, ``per_pair`` its ``D_t`` per adjacent pair (None where not scored),
        ``per_scale`` the track mean of ``D_s`` at each scale (diagnostic); scores are
        working-resolution px^2 and None (not 0) for an object never scored. ``caps`` holds
        ``max_objects`` / ``max_pairs`` / ``max_flow_side`` and ``skipped`` what they cut
        (``{"objects": n, "pairs": n}``; see the module docstring). ``status`` is
        ``"not_applicable"`` with a reason when there are no masks, no object, fewer than 2
        frames or no object with enough pixels.
    Raises:
        ShapeError: masks whose frame count does not match the clip.
    """
    got = score_foregrounds([clip], [masks], config, device, [progress],
                            core_erosion=[core_erosion])[0]
    if isinstance(got, BaseException):
        raise got
    return got


def score_foregrounds(clips: Sequence[Clip], masks: Sequence[Any],
                      config: Union[None, dict, GeoConConfig, ForegroundConfig] = None,
                      device: Optional[Union[str, torch.device]] = None,
                      progress: Optional[Sequence[Optional[Progress]]] = None,
                      core_erosion: Optional[Sequence[int]] = None
                      ) -> List[Union[Dict[str, Any], BaseException]]:
    """The ``foreground`` blocks of several clips (:func:`foreground_block` each, one config):
    the flow and AdaDFRC of all their scored pairs in shared chunks (module docstring).

    Args:
        clips: B decoded clips (any sizes and lengths); masks: B object masks (as
            :func:`foreground_block` takes them; None: no object).
        config, device: as :func:`foreground_block` (device None: each clip's own).
        progress: B progress reporters (or None).
        core_erosion: B erosions (working px) of each clip's objects to their cores, as
            :func:`foreground_block` takes one (None: no clip's masks are eroded).
    Returns:
        B blocks; a clip whose masks are invalid (or whose scoring fails) holds its exception
        instead (a failing batched step is retried clip by clip, so only the clip at fault
        does). A clip's block is the same alone or in a batch.
    """
    cfg = _foreground_config(config)
    reporters = list(progress) if progress is not None else [None] * len(clips)
    erosions = list(core_erosion) if core_erosion is not None else [0] * len(clips)
    out: List[Union[Dict[str, Any], BaseException, None]] = [None] * len(clips)
    plans: Dict[int, _Plan] = {}
    for k, (clip, m) in enumerate(zip(clips, masks)):  # masks and object cap of each clip
        try:
            got = _plan(clip, m, cfg, reporters[k], int(erosions[k]))
        except Exception as exc:  # noqa: BLE001 - this clip's error only
            if compile_failure(exc):  # torch.compile's, not a clip's
                raise
            got = exc
        if isinstance(got, _Plan):
            plans[k] = got
        else:
            out[k] = got
    tracks: Dict[int, _Track] = {}
    keys = list(plans)
    planned = batch_or_each(lambda ps: _plan_tracks(ps, cfg, device), [plans[k] for k in keys])
    for k, got in zip(keys, planned):  # pairs and flow crops: two host reads per batch
        if isinstance(got, _Track):
            tracks[k] = got
        else:
            out[k] = got
    ids = list(tracks)
    scored = batch_or_each(lambda ts: _score_tracks(ts, cfg), [tracks[k] for k in ids])
    for k, got in zip(ids, scored):
        out[k] = got if isinstance(got, BaseException) else _finish(tracks[k], got, cfg)
    return out  # type: ignore[return-value]


@dataclass
class _Track:
    """One clip's foreground work: the kept objects' masks (T, K', H, W) and their ids (K',),
    the flow rows (M,) long (frame t of pair (t, t+1); each scored pair once, plus one row per
    pre-shifted (pair, object)), the flow crop (:func:`box_of_lines`), flow scale, device,
    estimator name and the block being filled. With pre-shifted rows, ``shift`` (M, 2) long
    (dx, dy) working px by which each row reads frame t+1 and ``own`` (M, K') bool the objects
    each row scores (None: no row shifted, every row scores every object)."""

    clip: Clip
    masks: Any
    ids: torch.Tensor
    pairs: torch.Tensor
    box: Tuple[slice, slice]
    cap: float
    dev: torch.device
    out: Dict[str, Any]
    progress: Optional[Progress] = None
    shift: Optional[torch.Tensor] = None
    own: Optional[torch.Tensor] = None

    def key(self) -> Tuple[str, int, int, float]:
        """Tracks of one key share flow calls: device, crop (H, W), flow scale."""
        ys, xs = self.box
        return str(self.dev), ys.stop - ys.start, xs.stop - xs.start, self.cap


@dataclass
class _Plan:
    """One clip's foreground before its pairs are chosen: the kept objects' masks (T, K', H, W)
    (their cores when eroded: then ``dilated`` holds the masks before the erosion), their ids
    (K',) and the block being filled."""

    clip: Clip
    masks: Any
    ids: torch.Tensor
    out: Dict[str, Any]
    progress: Optional[Progress] = None
    dilated: Any = None


def _plan(clip: Clip, masks: Any, cfg: ForegroundConfig, progress: Optional[Progress],
          erosion: int = 0) -> Union[Dict[str, Any], _Plan]:
    """The block's head and the clip's kept objects (:class:`_Plan`; eroded by ``erosion``
    working px to their cores), or the finished block when the clip has nothing to score
    (``status`` not_applicable with the reason)."""
    out: Dict[str, Any] = {"objects": [], "status": "not_applicable", "reason": None,
                           "flow": None, "score": cfg.score,
                           "scales": [float(s) for s in cfg.scales],
                           "caps": {"max_objects": cfg.max_objects, "max_pairs": cfg.max_pairs,
                                    "max_flow_side": cfg.max_flow_side},
                           "skipped": {"objects": 0, "pairs": 0},
                           "flow_scale": flow_scale(clip.size, cfg.max_flow_side)}
    if masks is None:
        out["reason"] = "no object masks: no moving object was given or found"
        return out
    if not isinstance(masks, BlockMasks):  # motion masks stay lazy (bounded memory)
        masks = load_masks(masks, num_frames=clip.num_frames, size=clip.size,
                           device=clip.frames.device, source_size=tuple(clip.source_size))
    if masks.shape[1] == 0:
        out["reason"] = "no moving object in the clip"
        return out
    if masks.shape[0] < 2:
        out["reason"] = "fewer than 2 frames: no frame pair to score"
        return out
    ids = _largest_objects(masks, cfg.max_objects)
    out["skipped"]["objects"] = int(masks.shape[1]) - int(ids.numel())
    if out["skipped"]["objects"]:
        masks = masks[:, ids.to(masks.device)]
    if erosion > 0:  # the motion masks' cores are scored (module docstring)
        core, applied = core_masks(masks, erosion)
        out["core"] = {"erosion_px": applied, "lost_pairs": {}}
        return _Plan(clip, core, ids, out, progress, masks)
    return _Plan(clip, masks, ids, out, progress)


def _plan_tracks(plans: Sequence[_Plan], cfg: ForegroundConfig,
                 device: Optional[Union[str, torch.device]]
                 ) -> List[Union[Dict[str, Any], _Track]]:
    """Each planned clip's scored pairs, flow rows and flow crop (:class:`_Track`), or its
    finished block when no object has enough pixels in any pair. The objects' presence and
    centroids (and, for eroded cores, the dilated masks' presence) of every clip reach the host
    in one transfer, their crops' occupied rows / columns in a second one."""
    moments = _host_parts([_plan_moments(p, cfg.min_object_pixels) for p in plans])
    lk = resolve_flow(cfg.flow, cfg.flow_checkpoint) == "torch-lk"  # RAFT: no pre-shift
    out: List[Union[Dict[str, Any], _Track]] = []
    todo: List[Tuple[int, torch.Tensor, Any]] = []
    for i, (p, mom) in enumerate(zip(plans, moments)):
        t_, k_ = (int(n) for n in p.masks.shape[:2])
        mom, dilated = mom[:t_ * k_ * 3].view(t_, k_, 3), mom[t_ * k_ * 3:]
        pres = mom[:-1, :, 0] >= cfg.min_object_pixels  # (T-1, K')
        if p.dilated is not None:  # pairs in which an object's core alone was too small
            lost = ((dilated.view(t_ - 1, k_) > 0) & ~pres).sum(0).tolist()
            p.out["core"]["lost_pairs"] = {str(int(j)): int(n)
                                           for j, n in zip(p.ids.tolist(), lost) if n}
        held = held_of(p.clip)  # pairs (t, t + 1) of two identical frames: left out first
        candidates = foreground_pairs(pres, None, held)
        pairs = foreground_pairs(pres, cfg.max_pairs, held)
        p.out["skipped"]["pairs"] = int(candidates.numel() - pairs.numel())
        if pairs.numel() == 0:
            p.out["reason"] = (f"no object has >= {cfg.min_object_pixels} mask pixels in any "
                               "frame pair")
            if p.dilated is not None:
                p.out["reason"] += (f" (in its motion mask's core: eroded by "
                                    f"{p.out['core']['erosion_px']} px)")
        else:
            fast = _fast_movers(mom, pres, pairs, float(p.out["flow_scale"])) if lk else None
            todo.append((i, pairs, pres, fast))
        out.append(p.out)
    step = max(1, int(cfg.batch_pairs))
    parts = []  # per clip: its crop's lines, then whether each fast mover's shift fits better
    for i, pairs, _, fast in todo:
        parts.append(occupied_lines(plans[i].masks, pairs, step))
        if fast is not None:
            parts.append(shift_fits_better(plans[i].clip, plans[i].masks, pairs[fast[0]],
                                           fast[1], fast[2], step))
    host = iter(_host_parts(parts, as_numpy=True))
    for i, pairs, pres, fast in todo:
        p, occ = plans[i], next(host)
        dev = torch.device(device) if device is not None else p.clip.frames.device
        box = box_of_lines(occ.reshape(-1, sum(p.masks.shape[-2:])), p.masks.shape[-2:],
                           crop_margin(p.clip.size))
        track = _Track(p.clip, p.masks, p.ids, pairs, box, float(p.out["flow_scale"]), dev,
                       p.out, p.progress)
        rows = None if fast is None else _preshift_rows(pairs, pres, fast, next(host))
        if rows is not None:
            track.pairs, track.shift, track.own, n = rows
            p.out["preshift"] = {"min_px": PRESHIFT_MIN_PX,
                                 "pairs": {str(int(j)): int(c)
                                           for j, c in zip(p.ids.tolist(), n.tolist())
                                           if c}}
        out[i] = track
    return out


def _plan_moments(plan: _Plan, min_pixels: int) -> torch.Tensor:
    """1-D float64: the (T, K', 3) :func:`mask_moments` of the plan's masks, then for eroded
    cores the (T-1, K') presence (1.0 / 0.0: >= ``min_pixels`` px) of the dilated masks."""
    mom = mask_moments(plan.masks).flatten()
    if plan.dilated is None:
        return mom
    present = plan.dilated[:-1].sum((-1, -2)) >= min_pixels
    return torch.cat([mom, present.flatten().to(torch.float64)])


def _fast_movers(mom: torch.Tensor, pres: torch.Tensor, pairs: torch.Tensor, cap: float
                 ) -> Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]]:
    """The (pair, object)s whose mask centroid moves more than :data:`PRESHIFT_MIN_PX` flow px
    on an axis (host tensors; None when there is none).

    Args:
        mom: (T, K, 3) host :func:`mask_moments`; pres: (T-1, K) bool scored objects per pair;
            pairs: (M,) long scored pairs; cap: the flow scale (flow px per working px).
    Returns:
        (C,) long index into ``pairs``, (C,) long object, (C, 2) long centroid displacement
        (dx, dy) working px, rounded.
    """
    count = mom[..., 0]
    centroid = mom[..., 1:] / count.clamp_min(1.0)[..., None]  # (T, K, 2) x, y
    move = centroid[1:] - centroid[:-1]  # (T-1, K, 2)
    known = (count[1:] > 0) & (count[:-1] > 0)
    fast = (pres & known & (move.abs().amax(-1) * cap > PRESHIFT_MIN_PX))[pairs]  # (M, K)
    if not bool(fast.any()):  # host tensors: no device sync
        return None
    m_idx, k_idx = torch.nonzero(fast, as_tuple=True)
    return m_idx, k_idx, move[pairs[m_idx], k_idx].round().long()


def shift_fits_better(clip: Clip, masks: Any, t: torch.Tensor, k: torch.Tensor,
                      shift: torch.Tensor, step: int) -> torch.Tensor:
    """Whether frame t+1 read ``shift`` px further matches object k's pixels of frame t better
    than frame t+1 as it is (a mask centroid can jump where the mask changes shape: a motion
    mask covering other parts of the object, an object entering; then its shift is not used).

    Args:
        clip: the clip; masks: its (T, K, H, W) object masks (tensor or lazy masks).
        t, k: (C,) long pair (frame t of (t, t+1)) and object; shift: (C, 2) long (dx, dy) px.
        step: candidates per chunk (each reads 2 whole frames).
    Returns:
        (C,) bool on the masks' device: the sum of absolute differences of the grey frames
        blurred by :data:`PRESHIFT_BLUR_PX` over the object's pixels is lower with the shift
        (no host read).
    """
    dev, size = masks.device, tuple(masks.shape[-2:])
    box = (slice(0, int(size[0])), slice(0, int(size[1])))
    out = []
    for a in range(0, int(t.numel()), step):  # chunks bound the frames read at once
        tt = t[a:a + step]
        both = torch.cat([tt, tt + 1]).to(clip.frames.device)
        grey = clip.frames[both].to(dev).float().mean(1, keepdim=True)
        g1, g2 = gaussian_blur(grey, PRESHIFT_BLUR_PX).chunk(2)
        m = masks[tt.to(dev)]  # (c, K, H, W)
        m = m[torch.arange(m.shape[0], device=dev), k[a:a + step].to(dev)][:, None]
        moved = _shifted_crop(g2, box, shift[a:a + step].to(dev))
        err = torch.stack([((g1 - g).abs() * m).sum((1, 2, 3)) for g in (g2, moved)])
        out.append(err[1] < err[0])
    return torch.cat(out)


def _preshift_rows(pairs: torch.Tensor, pres: torch.Tensor,
                   fast: Tuple[torch.Tensor, torch.Tensor, torch.Tensor], fits: Any
                   ) -> Optional[Tuple[torch.Tensor, ...]]:
    """The flow rows of a track with fast movers (host tensors; None when no shift is used).

    Args:
        pairs: (M,) long scored pairs; pres: (T-1, K) bool scored objects per pair;
            fast: :func:`_fast_movers`; fits: (C,) bool (host) :func:`shift_fits_better`.
    Returns:
        rows (R,) long frame t of each row, shifts (R, 2) long (dx, dy) working px, own (R, K)
        bool: first the scored pairs with an object that is not pre-shifted (shift 0, every
        such object), then one row per pre-shifted (pair, object) (that object only); and the
        count (K,) long of pre-shifted pairs per object.
    """
    keep = torch.as_tensor(np.asarray(fits, dtype=bool))
    m_idx, k_idx, shift = (x[keep] for x in fast)
    if m_idx.numel() == 0:
        return None
    moved = torch.zeros(int(pairs.numel()), int(pres.shape[1]), dtype=torch.bool)
    moved[m_idx, k_idx] = True
    base = (pres[pairs] & ~moved).any(1)
    rows = torch.cat([pairs[base], pairs[m_idx]])
    shift = torch.cat([torch.zeros(int(base.sum()), 2, dtype=torch.long), shift])
    own = torch.cat([~moved[base], F.one_hot(k_idx, int(moved.shape[1])).bool()])
    return rows, shift, own, moved.sum(0)


def _host_parts(parts: Sequence[torch.Tensor], as_numpy: bool = False) -> List[Any]:
    """1-D tensors -> their CPU copies (NumPy arrays with ``as_numpy``), one transfer per
    device (not one per tensor)."""
    out: List[Any] = [None] * len(parts)
    by_dev: Dict[torch.device, List[int]] = {}
    for i, t in enumerate(parts):
        by_dev.setdefault(t.device, []).append(i)
    for idx in by_dev.values():
        flat = torch.cat([parts[i] for i in idx]).cpu()
        sizes = [int(parts[i].numel()) for i in idx]
        pieces = (np.split(flat.numpy(), np.cumsum(sizes)[:-1]) if as_numpy
                  else flat.split(sizes))
        for i, piece in zip(idx, pieces):
            out[i] = piece
    return out


def _largest_objects(masks: Union[torch.Tensor, BlockMasks],
                     max_objects: Optional[int]) -> torch.Tensor:
    """Indices (K',) long, ascending, of the ``max_objects`` objects of ``masks`` (T, K, H, W)
    with the largest mask area summed over the clip (all when None / 0 or K <= the cap; ties:
    the lower index first)."""
    k = int(masks.shape[1])
    if not max_objects or k <= int(max_objects):
        return torch.arange(k)
    area = spatial_counts(masks).sum(0).cpu()  # (K,) px summed over frames, chunked
    order = torch.sort(area, descending=True, stable=True).indices[:int(max_objects)]
    return order.sort().values


def _finish(track: _Track, scored: Tuple[torch.Tensor, ...], cfg: ForegroundConfig
            ) -> Dict[str, Any]:
    """The block of a scored track: per-object entries, status and reason."""
    d_all, v_all, ds_all, vs_all = scored
    out = track.out
    summary = adadfrc_summary(d_all, v_all, cfg.percentile)
    out["objects"] = _object_entries(d_all, v_all, ds_all, vs_all, summary, cfg,
                                     track.ids.tolist())
    core = out.get("core")
    for entry in out["objects"] if core is not None else ():  # eroded motion masks
        lost = core["lost_pairs"].get(str(entry["id"]), 0)
        if not entry["frames"] and lost:
            entry["reason"] = (f"its motion mask's core (eroded by {core['erosion_px']} px) "
                               f"has < {cfg.min_object_pixels} px in each of the {lost} pairs "
                               f"its mask has more: mostly background, not scored")
    if not bool(summary["valid"].any()):
        out["reason"] = ("no object could be scored: too few grid cells or a degenerate fit "
                         "in every pair")
        return out
    out["status"] = "ok"
    return out


def _chunk_inputs(tracks: Sequence[_Track], parts: Sequence[Tuple[int, int, int]], kmax: int
                  ) -> Tuple[torch.Tensor, ...]:
    """Frames (P, 3, h, w) float [0, 1] of both sides of a chunk's rows and their masks
    (P, kmax, h, w), cropped to the tracks' boxes, and the rows' shifts (P, 2) long working px
    (None when no row of the chunk is pre-shifted); ``parts`` lists (track, first, end) ranges
    of the tracks' rows (per clip: its frames live in its own tensor)."""
    f1s, f2s, ms, shifts = [], [], [], []
    for i, a, b in parts:
        tr = tracks[i]
        ys, xs = tr.box
        t = tr.pairs[a:b]
        both = torch.cat([t, t + 1]).to(tr.clip.frames.device)  # one request: one decode pass
        f1, f2 = (tr.clip.frames[both].to(tr.dev).float() / 255.0).chunk(2)
        m = tr.masks[t.to(tr.masks.device)].to(tr.dev)[..., ys, xs]
        if tr.shift is not None:  # pre-shifted rows: their objects only, frame t+1 moved
            m = m & tr.own[a:b].to(tr.dev)[:, :, None, None]
            shifts.append(tr.shift[a:b].to(tr.dev))
            f2s.append(_shifted_crop(f2, tr.box, shifts[-1]))
        else:
            f2s.append(f2[..., ys, xs])
            shifts.append(None)
        if m.shape[1] < kmax:  # empty objects: never valid, no pixel of theirs is read
            m = torch.cat([m, m.new_zeros((m.shape[0], kmax - m.shape[1]) + m.shape[2:])], 1)
        f1s.append(f1[..., ys, xs])
        ms.append(m)
    shift = None
    if any(sh is not None for sh in shifts):
        shift = torch.cat([sh if sh is not None else
                           torch.zeros(int(f.shape[0]), 2, dtype=torch.long, device=f.device)
                           for sh, f in zip(shifts, f1s)])
    if len(parts) == 1:
        return f1s[0], f2s[0], ms[0], shift
    return torch.cat(f1s), torch.cat(f2s), torch.cat(ms), shift


def _shifted_crop(frames: torch.Tensor, box: Tuple[slice, slice], shift: torch.Tensor
                  ) -> torch.Tensor:
    """(P, C, h, w) crops ``box`` of ``frames`` (P, C, H, W), each read ``shift`` (P, 2) long
    (dx, dy) px further (pixel x of crop p is frame p at box + x + shift[p]; rows / columns
    beyond the frame repeat its border), in one gather (no loop over rows)."""
    ys, xs = box
    _, c, hh, ww = frames.shape
    dev = frames.device
    yy = (torch.arange(ys.start, ys.stop, device=dev)[None] + shift[:, 1:]).clamp(0, hh - 1)
    xx = (torch.arange(xs.start, xs.stop, device=dev)[None] + shift[:, :1]).clamp(0, ww - 1)
    p = torch.arange(frames.shape[0], device=dev).view(-1, 1, 1, 1)
    ch = torch.arange(c, device=dev).view(1, -1, 1, 1)
    return frames[p, ch, yy[:, None, :, None], xx[:, None, None, :]]


def _score_tracks(tracks: Sequence[_Track], cfg: ForegroundConfig
                  ) -> List[Tuple[torch.Tensor, ...]]:
    """:func:`score_pairs` of every track's pairs: tracks of one :meth:`_Track.key` share
    chunks of :func:`flow_chunk_pairs` pairs (one flow call per scale and chunk).

    Returns per track: D (T-1, K) float64 working px^2, its validity (T-1, K) bool (False for
    pairs not scored), and the per-scale D_s (S, T-1, K) with validity (S, T-1, K)."""
    n_s = len(cfg.scales)
    out = []
    for tr in tracks:
        t_, k_ = tr.masks.shape[:2]
        out.append((torch.zeros(t_ - 1, k_, dtype=torch.float64),
                    torch.zeros(t_ - 1, k_, dtype=torch.bool),
                    torch.zeros(n_s, t_ - 1, k_, dtype=torch.float64),
                    torch.zeros(n_s, t_ - 1, k_, dtype=torch.bool)))
    groups: Dict[Tuple[str, int, int, float], List[int]] = {}
    for i, tr in enumerate(tracks):
        groups.setdefault(tr.key(), []).append(i)
    estimators: Dict[str, Any] = {}
    for (dev, h, w, cap), members in groups.items():
        if dev not in estimators:
            estimators[dev] = cached_flow(cfg.flow, checkpoint=cfg.flow_checkpoint,
                                          device=torch.device(dev),
                                          expect_sha256=cfg.flow_checkpoint_sha256)
        estimator = estimators[dev]
        step = flow_chunk_pairs((h, w), cap, cfg)
        counts = [int(tracks[i].pairs.numel()) for i in members]
        ends = np.cumsum(counts)
        kmax = max(int(tracks[i].masks.shape[1]) for i in members)
        for start in range(0, int(ends[-1]), step):  # chunks bound the flow's memory
            stop = min(start + step, int(ends[-1]))
            parts = [(i, max(start - int(e - c), 0), min(stop - int(e - c), c))
                     for i, c, e in zip(members, counts, ends) if e - c < stop and e > start]
            f1, f2, m, shift = _chunk_inputs(tracks, parts, kmax)
            d, v, d_s, v_s = score_pairs(f1, f2, m, estimator, cfg,
                                         size=tracks[members[0]].clip.size, shift=shift)
            host = torch.cat([d.double()[None], v.double()[None], d_s.double(),
                              v_s.double()]).cpu()  # one transfer: (2 + 2S, P, kmax)
            row = 0
            for i, a, b in parts:  # the chunk's rows back to their clips
                tr, (d_all, v_all, ds_all, vs_all) = tracks[i], out[i]
                t, k_ = tr.pairs[a:b], int(tr.masks.shape[1])
                sl = slice(row, row + b - a)
                row = sl.stop
                if tr.own is None:
                    d_all[t], v_all[t] = host[0, sl, :k_], host[1, sl, :k_].bool()
                    ds_all[:, t] = host[2:2 + n_s, sl, :k_]
                    vs_all[:, t] = host[2 + n_s:, sl, :k_].bool()
                else:  # each row fills the objects it scores (host tensors)
                    _put_owned(out[i], host[:, sl, :k_], t, tr.own[a:b], n_s)
                tr.out["flow"] = estimator.name
                if tr.progress is not None:  # pre-shifted objects add rows: count rows then
                    tr.progress.count("foreground", b, int(tr.pairs.numel()),
                                      "pairs" if tr.own is None else "flow rows")
            release_freed_memory()  # flow temporaries of the chunk: back to the OS
    return out


def _put_owned(track_out: Tuple[torch.Tensor, ...], rows: torch.Tensor, t: torch.Tensor,
               own: torch.Tensor, n_s: int) -> None:
    """Write a chunk's host rows (2 + 2S, R, K) (D, valid, D_s, valid_s) of frames ``t`` (R,)
    into a track's (T-1, K) / (S, T-1, K) results where ``own`` (R, K) says the row scores
    the object (the pre-shifted rows: one object each)."""
    d_all, v_all, ds_all, vs_all = track_out
    r, k = torch.nonzero(own, as_tuple=True)
    tt = t[r]
    d_all[tt, k], v_all[tt, k] = rows[0, r, k], rows[1, r, k].bool()
    ds_all[:, tt, k] = rows[2:2 + n_s, r, k]
    vs_all[:, tt, k] = rows[2 + n_s:, r, k].bool()


def _object_entries(d_all: torch.Tensor, v_all: torch.Tensor, ds_all: torch.Tensor,
                    vs_all: torch.Tensor, summary: Dict[str, torch.Tensor],
                    cfg: ForegroundConfig, ids: List[int]) -> List[Dict[str, Any]]:
    """One JSON entry per object from the (T-1, K) track of :func:`_score_tracks`; ``ids`` (K)
    are the objects' indices in the given masks."""
    scale_means = [adadfrc_summary(ds_all[i], vs_all[i], cfg.percentile)
                   for i in range(len(cfg.scales))]
    # host lists (one conversion per tensor, not one read per value)
    d, v = d_all.T.tolist(), v_all.T.tolist()  # (K, T-1)
    frames, mean, p90 = (summary[key].tolist() for key in ("frames", "adadfrc_mean", "adap90"))
    s_mean = [sm["adadfrc_mean"].tolist() for sm in scale_means]
    s_ok = [sm["valid"].tolist() for sm in scale_means]
    objects: List[Dict[str, Any]] = []
    for k in range(int(d_all.shape[1])):  # JSON assembly of the K <= max_objects objects
        n = int(frames[k])
        per_pair = [float(x) if ok else None for x, ok in zip(d[k], v[k])]
        per_scale = {str(float(sc)): (float(m[k]) if ok[k] else None)
                     for sc, m, ok in zip(cfg.scales, s_mean, s_ok)}
        objects.append({"id": int(ids[k]), "frames": n,
                        "adadfrc_mean": float(mean[k]) if n else None,
                        "adap90": float(p90[k]) if n else None,
                        "per_pair": per_pair, "per_scale": per_scale})
    return objects
