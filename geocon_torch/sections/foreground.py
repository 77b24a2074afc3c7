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
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from .._tensor_utils import masked_median
from .._memory import release_freed_memory
from ..config import ForegroundConfig, GeoConConfig, load_config
from ..errors import InputError
from ..features.multiscale import rescale_gray, scaled_size
from ..flow import forward_backward_reliability
from ..flow.factory import cached_flow
from ..io.pairs import foreground_pairs, held_of
from ..measures.foreground import adadfrc, adadfrc_summary
from ..segment.files import load_masks
from ..types import BlockMasks, Clip
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
                size: Optional[Tuple[int, int]] = None) -> tuple:
    """Multi-scale AdaDFRC of a chunk of pairs.

    Args:
        frames1, frames2: (P, 3, H, W) float [0, 1]; masks: (P, K, H, W) bool at frames1.
        estimator: a FlowEstimator. cfg: ForegroundConfig (``max_flow_side`` caps the flow's
            resolution: each scale s runs at s * :func:`flow_scale` of ``size``).
        size: (H, W) of the whole frame when the inputs are a crop of it (None: their size).
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
                     progress: Optional[Progress] = None) -> Dict[str, Any]:
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
    Returns:
        ``{"objects": [{"id", "frames", "adadfrc_mean", "adap90", "per_pair", "per_scale"}],
        "status", "reason", "flow", "score", "scales", "caps", "skipped", "flow_scale"}``.
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
    got = score_foregrounds([clip], [masks], config, device, [progress])[0]
    if isinstance(got, BaseException):
        raise got
    return got


def score_foregrounds(clips: Sequence[Clip], masks: Sequence[Any],
                      config: Union[None, dict, GeoConConfig, ForegroundConfig] = None,
                      device: Optional[Union[str, torch.device]] = None,
                      progress: Optional[Sequence[Optional[Progress]]] = None
                      ) -> List[Union[Dict[str, Any], BaseException]]:
    """The ``foreground`` blocks of several clips (:func:`foreground_block` each, one config):
    the flow and AdaDFRC of all their scored pairs in shared chunks (module docstring).

    Args:
        clips: B decoded clips (any sizes and lengths); masks: B object masks (as
            :func:`foreground_block` takes them; None: no object).
        config, device: as :func:`foreground_block` (device None: each clip's own).
        progress: B progress reporters (or None).
    Returns:
        B blocks; a clip whose masks are invalid (or whose scoring fails) holds its exception
        instead (a failing batched step is retried clip by clip, so only the clip at fault
        does). A clip's block is the same alone or in a batch.
    """
    cfg = _foreground_config(config)
    reporters = list(progress) if progress is not None else [None] * len(clips)
    out: List[Union[Dict[str, Any], BaseException, None]] = [None] * len(clips)
    plans: Dict[int, _Plan] = {}
    for k, (clip, m) in enumerate(zip(clips, masks)):  # masks and object cap of each clip
        try:
            got = _plan(clip, m, cfg, reporters[k])
        except Exception as exc:  # noqa: BLE001 - this clip's error only
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
    the scored adjacent pairs (M,) long (frame t of pair (t, t+1)), the flow crop
    (:func:`box_of_lines`), flow scale, device, estimator name and the block being filled."""

    clip: Clip
    masks: Any
    ids: torch.Tensor
    pairs: torch.Tensor
    box: Tuple[slice, slice]
    cap: float
    dev: torch.device
    out: Dict[str, Any]
    progress: Optional[Progress] = None

    def key(self) -> Tuple[str, int, int, float]:
        """Tracks of one key share flow calls: device, crop (H, W), flow scale."""
        ys, xs = self.box
        return str(self.dev), ys.stop - ys.start, xs.stop - xs.start, self.cap


@dataclass
class _Plan:
    """One clip's foreground before its pairs are chosen: the kept objects' masks (T, K', H, W),
    their ids (K',) and the block being filled."""

    clip: Clip
    masks: Any
    ids: torch.Tensor
    out: Dict[str, Any]
    progress: Optional[Progress] = None


def _plan(clip: Clip, masks: Any, cfg: ForegroundConfig, progress: Optional[Progress]
          ) -> Union[Dict[str, Any], _Plan]:
    """The block's head and the clip's kept objects (:class:`_Plan`), or the finished block when
    the clip has nothing to score (``status`` not_applicable with the reason)."""
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
    return _Plan(clip, masks, ids, out, progress)


def _plan_tracks(plans: Sequence[_Plan], cfg: ForegroundConfig,
                 device: Optional[Union[str, torch.device]]
                 ) -> List[Union[Dict[str, Any], _Track]]:
    """Each planned clip's scored pairs and flow crop (:class:`_Track`), or its finished block
    when no object has enough pixels in any pair. The objects' presence of every clip reaches
    the host in one transfer, their crops' occupied rows / columns in a second one."""
    present = _host_parts([(p.masks[:-1].sum((-1, -2)) >= cfg.min_object_pixels).flatten()
                           for p in plans])
    out: List[Union[Dict[str, Any], _Track]] = []
    todo: List[Tuple[int, torch.Tensor]] = []
    for i, (p, pres) in enumerate(zip(plans, present)):
        pres = pres.view(int(p.masks.shape[0]) - 1, -1)  # (T-1, K')
        held = held_of(p.clip)  # pairs (t, t + 1) of two identical frames: left out first
        candidates = foreground_pairs(pres, None, held)
        pairs = foreground_pairs(pres, cfg.max_pairs, held)
        p.out["skipped"]["pairs"] = int(candidates.numel() - pairs.numel())
        if pairs.numel() == 0:
            p.out["reason"] = (f"no object has >= {cfg.min_object_pixels} mask pixels in any "
                               "frame pair")
        else:
            todo.append((i, pairs))
        out.append(p.out)
    step = max(1, int(cfg.batch_pairs))
    occupied = _host_parts([occupied_lines(plans[i].masks, pairs, step) for i, pairs in todo],
                           as_numpy=True)
    for (i, pairs), occ in zip(todo, occupied):
        p = plans[i]
        dev = torch.device(device) if device is not None else p.clip.frames.device
        box = box_of_lines(occ.reshape(-1, sum(p.masks.shape[-2:])), p.masks.shape[-2:],
                           crop_margin(p.clip.size))
        out[i] = _Track(p.clip, p.masks, p.ids, pairs, box, float(p.out["flow_scale"]), dev,
                        p.out, p.progress)
    return out


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
    area = masks.sum((-1, -2)).sum(0).cpu()  # (K,) px summed over frames (lazy-mask safe)
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
    if not bool(summary["valid"].any()):
        out["reason"] = ("no object could be scored: too few grid cells or a degenerate fit "
                         "in every pair")
        return out
    out["status"] = "ok"
    return out


def _chunk_inputs(tracks: Sequence[_Track], parts: Sequence[Tuple[int, int, int]], kmax: int
                  ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Frames (P, 3, h, w) float [0, 1] of both sides of a chunk's pairs and their masks
    (P, kmax, h, w), cropped to the tracks' boxes; ``parts`` lists (track, first, end) ranges
    of the tracks' pairs (per clip: its frames live in its own tensor)."""
    f1s, f2s, ms = [], [], []
    for i, a, b in parts:
        tr = tracks[i]
        ys, xs = tr.box
        t = tr.pairs[a:b]
        both = torch.cat([t, t + 1]).to(tr.clip.frames.device)  # one request: one decode pass
        f1, f2 = (tr.clip.frames[both].to(tr.dev).float() / 255.0).chunk(2)
        m = tr.masks[t.to(tr.masks.device)].to(tr.dev)[..., ys, xs]
        if m.shape[1] < kmax:  # empty objects: never valid, no pixel of theirs is read
            m = torch.cat([m, m.new_zeros((m.shape[0], kmax - m.shape[1]) + m.shape[2:])], 1)
        f1s.append(f1[..., ys, xs])
        f2s.append(f2[..., ys, xs])
        ms.append(m)
    if len(parts) == 1:
        return f1s[0], f2s[0], ms[0]
    return torch.cat(f1s), torch.cat(f2s), torch.cat(ms)


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
                                          device=torch.device(dev))
        estimator = estimators[dev]
        step = flow_chunk_pairs((h, w), cap, cfg)
        counts = [int(tracks[i].pairs.numel()) for i in members]
        ends = np.cumsum(counts)
        kmax = max(int(tracks[i].masks.shape[1]) for i in members)
        for start in range(0, int(ends[-1]), step):  # chunks bound the flow's memory
            stop = min(start + step, int(ends[-1]))
            parts = [(i, max(start - int(e - c), 0), min(stop - int(e - c), c))
                     for i, c, e in zip(members, counts, ends) if e - c < stop and e > start]
            f1, f2, m = _chunk_inputs(tracks, parts, kmax)
            d, v, d_s, v_s = score_pairs(f1, f2, m, estimator, cfg,
                                         size=tracks[members[0]].clip.size)
            host = torch.cat([d.double()[None], v.double()[None], d_s.double(),
                              v_s.double()]).cpu()  # one transfer: (2 + 2S, P, kmax)
            row = 0
            for i, a, b in parts:  # the chunk's rows back to their clips
                tr, (d_all, v_all, ds_all, vs_all) = tracks[i], out[i]
                t, k_ = tr.pairs[a:b], int(tr.masks.shape[1])
                sl = slice(row, row + b - a)
                row = sl.stop
                d_all[t], v_all[t] = host[0, sl, :k_], host[1, sl, :k_].bool()
                ds_all[:, t] = host[2:2 + n_s, sl, :k_]
                vs_all[:, t] = host[2 + n_s:, sl, :k_].bool()
                tr.out["flow"] = estimator.name
                if tr.progress is not None:
                    tr.progress.count("foreground", b, int(tr.pairs.numel()), "pairs")
            release_freed_memory()  # flow temporaries of the chunk: back to the OS
    return out


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
