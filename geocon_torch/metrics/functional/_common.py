"""Shared pieces of the functional metrics: per-clip statuses, the "no data" convention and the
one tensor -> Clip path for batches.

"No data" convention (every functional metric and every Metric class)
---------------------------------------------------------------------
* A clip that gives no value (status ``not_applicable`` or ``error``) is NaN in a per-clip
  (B,) tensor, never None and never 0; its status code (:data:`STATUSES`) says why.
* A Metric class keeps ``num_not_applicable`` / ``num_error`` count states (``sum``-reduced) and
  the first reason it met (:func:`encode_reason`, a ``cat`` state, so it survives compute
  groups, ``merge_state`` and DDP sync); ``compute()`` returns NaN for a value no clip
  produced and warns once per call (``rank_zero_warn``) with the counts and that first reason.
* A malformed batch is not "no data": it raises ClipTensorError before any work.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Union

import torch
from torch import Tensor
from torchmetrics.utilities import rank_zero_warn

from ..._tensor_utils import to_device
from ...errors import ClipTensorError
from ...io import check_clip_tensor, clip_from_tensor, clips_from_tensor
from ...result import STATUSES as RESULT_STATUSES
from ...types import Clip

#: Per-clip status codes: ``status[b]`` indexes this tuple.
STATUSES = RESULT_STATUSES  # the one list (geocon_torch.result.STATUSES); codes 0, 1, 2
OK, NOT_APPLICABLE, ERROR = 0, 1, 2
_REASON_BYTES = 240

VideosLike = Union[Tensor, Sequence[Union[Tensor, Clip, str, Any]]]


@dataclass
class ClipValues:
    """What one update learns about a batch of B clips.

    Attributes:
        values: name -> (B,) float64, NaN where the clip has no value.
        status: (B,) int64 codes into :data:`STATUSES`.
        reasons: B strings ("" for ok clips): why a clip has no value.
    """

    values: Dict[str, Tensor]
    status: Tensor
    reasons: List[str] = field(default_factory=list)

    def first_reason(self) -> Optional[str]:
        """The first non-empty reason, prefixed by its status (None when every clip is ok)."""
        for code, reason in zip(self.status.tolist(), self.reasons):
            if code != OK:
                return f"{STATUSES[code]}: {reason or 'no reason given'}"
        return None


def status_codes(statuses: Sequence[str], device: Union[None, str, torch.device] = None
                 ) -> Tensor:
    """("ok", "error", ...) -> (B,) int64 codes into :data:`STATUSES` (unknown -> error)."""
    codes = [STATUSES.index(s) if s in STATUSES else ERROR for s in statuses]
    return to_device(codes, device, torch.long)


def per_clip(values: Sequence[Optional[float]], device: Union[None, str, torch.device] = None
             ) -> Tensor:
    """B optional floats -> (B,) float64, None -> NaN."""
    return to_device([float("nan") if v is None else float(v) for v in values], device,
                     torch.float64)


def encode_reason(reason: str, device: Union[None, str, torch.device] = None) -> Tensor:
    """A reason -> (n + 1,) float32 UTF-8 byte codes ending in 0 (at most 240 bytes): a ``cat``
    state entry that torch.distributed can gather."""
    raw = reason.encode("utf-8", "replace")[:_REASON_BYTES] + b"\0"
    return torch.tensor(list(raw), dtype=torch.float32, device=device)


def first_reason(state: Union[Tensor, List[Tensor]]) -> Optional[str]:
    """The first reason stored by :func:`encode_reason` in a ``cat`` state (None if empty)."""
    flat = state if isinstance(state, Tensor) else (torch.cat([s.reshape(-1) for s in state])
                                                    if len(state) else torch.zeros(0))
    codes = flat.reshape(-1).to(torch.int64).tolist()
    if not codes:
        return None
    end = codes.index(0) if 0 in codes else len(codes)
    return bytes(codes[:end]).decode("utf-8", "replace")


def warn_no_data(metric: str, names: Sequence[str], counts: Dict[str, int],
                 reason: Optional[str], unit: str = "clip") -> None:
    """The one "no data" warning: which outputs are NaN, the counts, the first reason."""
    tally = ", ".join(f"{k} {v}" for k, v in counts.items())
    rank_zero_warn(f"{metric}: no applicable {unit} gave {', '.join(names)} ({tally}); "
                   f"returning NaN. First reason: {reason or f'no {unit} was seen'}",
                   UserWarning)


def check_videos(videos: VideosLike) -> None:
    """Apply the io tensor rule to a batch before any work: a (B, T, C, H, W) tensor, or a list
    whose tensor entries are (T, C, H, W) clips (paths and Clips pass). Raises ClipTensorError."""
    if isinstance(videos, Tensor):
        check_clip_tensor(videos, batched=True)
        return
    if isinstance(videos, (str, bytes)) or not isinstance(videos, Sequence):
        raise ClipTensorError(f"videos must be a (B, T, C, H, W) tensor or a list of clips, got "
                              f"{type(videos).__name__}")
    for video in videos:
        if isinstance(video, Tensor):
            check_clip_tensor(video)


def as_clips(videos: VideosLike) -> List[Clip]:
    """A (B, T, C, H, W) tensor or a list of (T, C, H, W) tensors / Clips -> Clips at native
    pixels, through :func:`geocon_torch.io.clips_from_tensor` (names ``batch[b]``)."""
    check_videos(videos)
    if isinstance(videos, Tensor):
        return clips_from_tensor(videos, name="batch")
    clips = []
    for b, video in enumerate(videos):
        if not isinstance(video, (Tensor, Clip)):
            raise ClipTensorError(f"videos[{b}] must be a (T, C, H, W) tensor or a Clip, got "
                                  f"{type(video).__name__}")
        clips.append(video if isinstance(video, Clip)
                     else clip_from_tensor(video, name=f"batch[{b}]"))
    return clips
