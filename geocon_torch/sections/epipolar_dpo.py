"""The ``epipolar_dpo`` result block: the Epipolar-DPO protocol (Kupyn et al. 2025) of
:mod:`geocon_torch.epipolar.dpo` on frames 0, 15, 30, ... at native resolution.

Keys: ``mean_epipolar_error`` (px, mean over valid pairs of the per-pair mean Sampson distance
``sqrt(s^2 + 1e-8)`` under the 8-point F of all matches), ``mean_inlier_rate`` (mean over valid
pairs of the fraction of matches within 5 px), ``valid_pairs``, ``total_pairs``, ``status``
("ok" | "not_applicable": no valid pair; the values are then None), ``reason``, ``preset``,
``frames`` (source frame numbers used), ``analysis_size`` ((H, W) px), ``protocol`` (the
settings) and ``per_pair`` rows. Lower error is better.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Union

import torch

from ..config import GeoConConfig
from ..epipolar.dpo import (DPOMeasurement, EpipolarDPOConfig, clip_reasons, measure_dpo,
                            pair_records, sample_positions)
from ..errors import InputError
from ..io import frame_selection, read_clip
from ..types import Clip

PRESET = "epipolar-dpo"
DeviceLike = Union[None, str, torch.device]


def dpo_blocks(m: DPOMeasurement, config: EpipolarDPOConfig) -> List[Dict[str, Any]]:
    """The ``epipolar_dpo`` block of every clip of a :class:`DPOMeasurement`, built from one
    host copy of its tensors (:meth:`DPOMeasurement.lists`), whatever the number of clips."""
    h = m.lists()
    reasons, rows = clip_reasons(h, config), pair_records(h, config)
    blocks = []
    for b, (reason, per_pair) in enumerate(zip(reasons, rows)):
        ok = h.valid_pairs[b] > 0
        blocks.append({
            "preset": PRESET, "status": "ok" if ok else "not_applicable", "reason": reason,
            "mean_epipolar_error": h.mean_epipolar_error[b] if ok else None,
            "mean_inlier_rate": h.mean_inlier_rate[b] if ok else None,
            "valid_pairs": h.valid_pairs[b], "total_pairs": h.total_pairs[b],
            "frames": list(h.frames[b]), "analysis_size": list(h.sizes[b]),
            "protocol": config.protocol_dict(), "per_pair": per_pair})
    return blocks


def epipolar_dpo_sections(clips: Sequence[Clip], config: Optional[EpipolarDPOConfig] = None, *,
                          device: DeviceLike = None) -> List[Dict[str, Any]]:
    """One ``epipolar_dpo`` block per clip; all pairs of all clips are matched and fitted in one
    batch (SIFT per frame on the CPU thread pool).

    Args:
        clips: decoded clips at the resolution to analyse (the protocol's is native:
            ``read_clip(..., long_side=None)``); frames 0, r, 2r, ... (``sampling_rate`` r) of
            each clip are used, so read clips with stride 1.
        config: protocol settings (default :class:`EpipolarDPOConfig`, the reference's).
        device: where matching and fitting run (default: the first clip's device).
    Returns:
        one block dict per clip (module docstring).
    """
    cfg = config or EpipolarDPOConfig()
    for clip in clips:
        if not isinstance(clip, Clip):
            raise InputError(f"epipolar_dpo_sections takes geocon_torch.types.Clip objects, got "
                             f"{type(clip).__name__} (use geocon_torch.io.read_clip)")
    positions = [torch.as_tensor(sample_positions(c.num_frames, cfg.sampling_rate),
                                 dtype=torch.long) for c in clips]
    frames = [c.frames[p.to(c.frames.device)] for c, p in zip(clips, positions)]
    numbers = [c.frame_indices.cpu()[p].tolist() for c, p in zip(clips, positions)]
    return _blocks(frames, numbers, cfg, device)


def _blocks(frames: Sequence[torch.Tensor], numbers: Sequence[Sequence[int]],
            config: EpipolarDPOConfig, device: DeviceLike) -> List[Dict[str, Any]]:
    """Blocks of clips given by their sampled (T_b, 3, H, W) uint8 frames and source numbers."""
    m = measure_dpo(frames, config, device, frame_numbers=numbers)
    return dpo_blocks(m, config)


def epipolar_dpo_section(clip: Clip, config: Optional[EpipolarDPOConfig] = None, *,
                         device: DeviceLike = None) -> Dict[str, Any]:
    """The ``epipolar_dpo`` block of one clip (see :func:`epipolar_dpo_sections`)."""
    return epipolar_dpo_sections([clip], config, device=device)[0]


def epipolar_dpo_block(video: Any, clip: Clip, cfg: GeoConConfig, device: DeviceLike,
                       config: Optional[EpipolarDPOConfig] = None) -> Dict[str, Any]:
    """The ``epipolar_dpo`` block of ``score_clip`` (``preset="epipolar-dpo"``).

    The protocol works at native resolution on source frames 0, 15, 30, ...: for a file or
    tensor ``video`` those frames (over the whole source whatever ``io.stride``; with
    ``io.max_frames`` up to the last frame ``clip`` covers: :func:`dpo_frame_end`) are re-read
    with ``long_side=None`` (undistorted with ``cfg.io.lens``); a :class:`Clip` is used as
    given. ``config``: default ``cfg.epipolar_dpo``.
    """
    dpo_cfg = config or cfg.epipolar_dpo
    if isinstance(video, Clip):
        return epipolar_dpo_section(clip, dpo_cfg, device=device)
    kept_end = int(clip.frame_indices.max()) + 1 if clip.num_frames else 0
    meta = clip.meta if isinstance(clip.meta, dict) else {}
    decoded = max(int(meta.get("decoded_frames") or 0), kept_end)  # uncapped: all decoded
    total = meta.get("num_source_frames", decoded)  # None: a capped read of unknown length
    end = dpo_frame_end(cfg, decoded, kept_end)
    source = sample_positions(end, dpo_cfg.sampling_rate)
    if len(source) > 1:
        native = read_clip(video, long_side=None, indices=source, device=device,
                           letterbox_threshold=cfg.io.letterbox_threshold,
                           letterbox_min_fraction=cfg.io.letterbox_min_fraction,
                           lens=cfg.io.lens)
        return _blocks([native.frames], [source], dpo_cfg, device)[0]
    block = epipolar_dpo_section(clip, dpo_cfg, device=device)
    return with_read_reason(block, cfg, dpo_cfg.sampling_rate, total, end)


def dpo_frame_end(cfg: GeoConConfig, source_frames: int, kept_end: Optional[int] = None) -> int:
    """One past the last source frame the Epipolar-DPO frames 0, r, 2r, ... of ``score_clip``
    and ``geometric_reward`` are sampled from.

    Without a frame cap (``io.max_frames`` None) the whole source, ``source_frames``:
    ``io.stride`` does not change which frames the protocol reads. With a cap, the frames the
    read covers: up to the last frame kept (``kept_end`` - 1; None: the last frame
    ``io.stride`` / ``io.max_frames`` keep of ``source_frames``).

    Args:
        cfg: its ``io.stride`` / ``io.max_frames``.
        source_frames: the source's frame count (a file: the frames decoded).
        kept_end: one past the last source frame kept, when known.
    Returns:
        the end (exclusive) of the source frames sampled, in frames.
    """
    if cfg.io.max_frames is None:
        return int(source_frames)
    if kept_end is None:
        kept = frame_selection(cfg.io.stride, cfg.io.max_frames).resolve(int(source_frames))
        kept_end = int(kept[-1]) + 1 if len(kept) else 0
    return int(kept_end)


def with_read_reason(block: Dict[str, Any], cfg: GeoConConfig, rate: int,
                     source_frames: Optional[int], end: int) -> Dict[str, Any]:
    """``block`` with the reason of a clip left with fewer than two sampled frames by the frames
    read (``io.max_frames`` / ``io.stride``: source frames 0 .. ``end`` - 1 of
    ``source_frames``, :func:`dpo_frame_end`; None: a count not known, a file whose capped
    decode stopped early) rather than by its length (sampling ``rate`` r: the whole source
    holds frames 0 and r); any other block as it is."""
    if block.get("total_pairs") or cfg.io.max_frames is None:
        return block
    if source_frames is not None and (end >= source_frames or source_frames <= rate):
        return block
    has = "" if source_frames is None else f"the clip has {source_frames} frames, but "
    block["reason"] = (f"fewer than two sampled frames (frames 0, {rate}, ...: {has}"
                       f"io.max_frames = {cfg.io.max_frames} at io.stride = {cfg.io.stride} "
                       f"reads source frames 0..{end - 1} only)")
    return block
