"""The evidence behind one scored frame pair, re-derived exactly as it was scored.

A stored result holds numbers, not matches. :func:`pair_evidence` re-runs the background
section (:func:`geocon_torch.sections.background.score_background`) on the clip with the
result's own config: the same reader, correspondences, object masks (the masks file, SAM-2, or
the weight-free motion masks re-derived from the same preliminary fits), the same batched RANSAC
call with the same per-row seeds, and the same gate. Scoring is deterministic, so the pair's
matches and inliers are the ones its stored IR counted; the stored row is checked against the
re-derived one and a mismatch (other masks / poses / device than at scoring time) is an error,
never a silently different drawing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import torch

from ..config import GeoConConfig
from ..errors import ConfigError, InputError
from ..io.pairs import background_pairs, held_of
from ..pipeline import load_clip
from ..result import ClipResult
from ..sections.background import BackgroundRows, score_background


@dataclass
class PairEvidence:
    """One evaluated frame pair at the finest scale, as scored.

    Attributes:
        index: the pair's position among the clip's evaluated pairs (its row in the finest
            scale's ``background.per_pair`` entries).
        pair: (i, j) frame indices; scale: the finest feature scale.
        x1, x2: (N, 2) float px (working resolution): the pair's background correspondences
            ``C_bg`` (valid matches with both ends off the object masks).
        inliers: (N,) bool, the IR / GE inliers of ``model`` among them.
        model: "H" or "F", the model this pair was scored with; regime: the clip's regime.
        ir: the pair's IR of ``model`` as stored (0 where ``valid`` is False).
        valid: the pair counted (a fitted model with >= ``min_inliers`` inliers). When valid,
            ``float(inliers.float().mean()) == ir`` exactly: IR is |inliers| / |C_bg|.
        H, F: (3, 3) float64 fitted models of the pair; H_valid, F_valid: fit succeeded.
        frame1, frame2: (3, H, W) uint8 frames i and j.
        objects: (K, H, W) bool object masks of frame i, or None when none were used.
    """

    index: int
    pair: Tuple[int, int]
    scale: float
    x1: torch.Tensor
    x2: torch.Tensor
    inliers: torch.Tensor
    model: str
    regime: Optional[str]
    ir: float
    valid: bool
    H: torch.Tensor
    F: torch.Tensor
    H_valid: bool
    F_valid: bool
    frame1: torch.Tensor
    frame2: torch.Tensor
    objects: Optional[torch.Tensor]


class PairMismatchError(InputError):
    """The re-derived pair is not the stored one: the clip was scored with other masks /
    poses / device than those given (an :class:`~geocon_torch.errors.InputError`)."""


def _as_dict(result: Union[ClipResult, Mapping[str, Any]]) -> Dict[str, Any]:
    return result.to_dict() if isinstance(result, ClipResult) else dict(result)


def _config(result: Dict[str, Any]) -> GeoConConfig:
    """The config ``result`` was scored with, to score it again: InputError when it cannot be
    read, ConfigError when a rule added since refuses it (re-deriving is scoring)."""
    try:
        cfg = GeoConConfig.from_dict(result.get("config") or {}, strict=False)
    except ValueError as exc:
        raise InputError(f"the result's config cannot be rebuilt ({exc}): its pairs cannot be "
                         "re-derived exactly") from exc
    if cfg.invalid_reason is not None:
        raise ConfigError(f"the result's config is no longer valid for scoring "
                          f"({cfg.invalid_reason}): its pairs cannot be re-derived; the stored "
                          "numbers still read (geocon explain --no-evidence)")
    return cfg


def _check_stored(result: Dict[str, Any], rows: BackgroundRows, row: int, ir: float,
                  model: str) -> None:
    """The re-derived row must be the stored one (else the inputs differ from scoring)."""
    per_pair = (result.get("background") or {}).get("per_pair") or []
    if row >= len(per_pair) or not isinstance(per_pair[row], dict):
        return  # nothing stored to compare with
    stored = per_pair[row]
    got = (list(map(int, rows.pairs[row % rows.pairs.shape[0]].tolist())), model, ir)
    want = (stored.get("pair"), stored.get("model"), stored.get(f"ir_{model.lower()}"))
    if got != want:
        raise PairMismatchError(
            f"the re-derived pair (pair, model, IR) {got} differs from the stored {want}: "
            "pass the masks / poses / device the clip was scored with")


def pair_evidence(result: Union[ClipResult, Mapping[str, Any]], pair_index: int, *,
                  video: Any = None, masks: Any = None, poses: Any = None,
                  device: Union[None, str, torch.device] = None) -> PairEvidence:
    """Matches, inliers and models of evaluated pair ``pair_index`` exactly as it was scored.

    Args:
        result: a :class:`~geocon_torch.result.ClipResult` or its dict (``path`` and
            ``config`` are read).
        pair_index: position among the evaluated pairs (0 .. P-1, temporal order).
        video: the clip when the result has no ``path`` (scored from a tensor) or it moved.
        masks, poses: the ``score_clip`` arguments the clip was scored with (None: none).
        device: the scoring device (None: as :func:`~geocon_torch.score_clip` chooses).
    Returns:
        :class:`PairEvidence`; for a valid pair ``float(ev.inliers.float().mean()) == ev.ir``
        (the stored per-pair IR of the gated model at the finest scale).
    Raises:
        InputError: no video, a pair index out of range, a clip with no scored pair, or a
            re-derived pair that differs from the stored one (:class:`PairMismatchError`).
        ConfigError: the result's config is refused by a rule added after it was scored
            (``GeoConConfig.invalid_reason``): re-deriving would score with it.
    """
    res = _as_dict(result)
    cfg = _config(res)
    src = video if video is not None else res.get("path")
    if src is None:
        raise InputError("the result has no video path (it was scored from a tensor): "
                         "pass video=")
    clip, dev = load_clip(src, cfg, device)
    pairs = background_pairs(clip.num_frames, cfg.background.pair_stride, held_of(clip))
    bg, rows = score_background(clip, pairs, masks=masks, poses=poses, config=cfg, device=dev)
    if rows is None:
        raise InputError(f"no scored pair to show: {bg.block.get('reason')}")
    if not 0 <= int(pair_index) < int(pairs.shape[0]):
        raise InputError(f"pair_index must be in [0, {int(pairs.shape[0])}), got {pair_index}")
    r = rows.row(int(pair_index))
    use_f = bool(rows.use_f[r])
    metrics, model = (rows.metrics_f, "F") if use_f else (rows.metrics_h, "H")
    ir = float(metrics.ir[r])
    _check_stored(res, rows, r, ir, model)
    keep = rows.mask[r]
    i, j = (int(v) for v in rows.pairs[int(pair_index)].tolist())
    objects = bg.objects[i].cpu() if bg.objects is not None and bg.objects.shape[1] else None
    return PairEvidence(
        index=int(pair_index), pair=(i, j), scale=rows.scales[-1],
        x1=rows.x1[r][keep].cpu(), x2=rows.x2[r][keep].cpu(),
        inliers=(rows.inliers_f if use_f else rows.inliers_h)[r][keep].cpu(),
        model=model, regime=bg.regime, ir=ir, valid=bool(metrics.valid[r]),
        H=rows.fit_h.model[r].double().cpu(), F=rows.fit_f.model[r].double().cpu(),
        H_valid=bool(rows.fit_h.valid[r]), F_valid=bool(rows.fit_f.valid[r]),
        frame1=clip.frames[i].cpu(), frame2=clip.frames[j].cpu(), objects=objects)
