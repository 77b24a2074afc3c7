"""Background consistency (IR / GE of the gated model, both model families, pass flag) as a
batched function, and the ``_update`` / ``_compute`` helpers that ``BackgroundConsistency``
shares with it (the torchmetrics ``mse.py`` split)."""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Union

import torch
from torch import Tensor

from ..._precision import autocast_off, eager_entry
from ..._tensor_utils import masked_median
from ...config import ConfigLike, load_config
from ...errors import ConfigError
from ...pipeline import score_clips
from ...presets import PRESETS, get_preset
from ._common import ClipValues, VideosLike, check_videos, per_clip, status_codes

#: Per-clip values of the ``background`` block (IR in [0, 1]; GE in px at working resolution).
BACKGROUND_VALUES = ("ir", "ge_px", "ir_h", "ge_h_px", "ir_f", "ge_f_px")
#: Count states of ``BackgroundConsistency`` (all ``sum``-reduced).
BACKGROUND_COUNTS = ("num_clips", "num_ok", "num_not_applicable", "num_error", "num_pass")



def check_background_preset(preset: str) -> None:
    """Raise ConfigError unless ``preset`` runs the background section (a preset without it,
    e.g. "worldatlas", gives no IR / GE: every value would be NaN under an ok status)."""
    if "background" not in get_preset(preset).sections:
        scoring = [name for name, p in PRESETS.items() if "background" in p.sections]
        raise ConfigError(f"preset {preset!r} does not score the background (its sections: "
                          f"{', '.join(get_preset(preset).sections)}); background consistency "
                          f"needs one of the presets that do: {', '.join(scoring)}")


def _tensor_device(videos: VideosLike) -> Optional[torch.device]:
    """The device of a clip batch tensor, or of the first tensor of a list (None for paths):
    where its clips are scored by default, as :func:`~geocon_torch.rewards.geometric_reward`
    does (a CPU batch on a CUDA machine is scored on the CPU, with the CPU backends)."""
    if isinstance(videos, torch.Tensor):
        return videos.device
    first = next((v for v in videos if isinstance(v, torch.Tensor)), None)
    return None if first is None else first.device


def _background_consistency_update(videos: VideosLike, masks: Optional[Sequence[Any]] = None,
                                   poses: Optional[Sequence[Any]] = None,
                                   config: ConfigLike = None, preset: str = "background",
                                   device: Union[None, str, torch.device] = None,
                                   out_device: Union[None, str, torch.device] = None
                                   ) -> ClipValues:
    """Score every clip with :func:`geocon_torch.pipeline.score_clips`.

    Returns ClipValues with (B,) float64 :data:`BACKGROUND_VALUES` plus ``passed`` (1.0 / 0.0
    for ok clips with a pass flag, else NaN) on ``out_device``; NaN where a clip has no value.
    A malformed tensor batch raises ClipTensorError first (the io rule).
    """
    check_videos(videos)
    check_background_preset(preset)
    results = score_clips(videos, masks=masks, poses=poses, config=load_config(config),
                          device=_tensor_device(videos) if device is None else device,
                          preset=preset)
    ok = [r.status == "ok" for r in results]
    values = {name: per_clip([r.background.get(name) if good else None
                              for r, good in zip(results, ok)], out_device)
              for name in BACKGROUND_VALUES}
    flags = [r.background.get("pass") if good else None for r, good in zip(results, ok)]
    values["passed"] = per_clip([None if f is None else float(bool(f)) for f in flags],
                                out_device)
    return ClipValues(values, status_codes([r.status for r in results], out_device),
                      [(r.reason or "") if r.status != "ok" else "" for r in results])


def _background_consistency_compute(values: Dict[str, Tensor], counts: Dict[str, Tensor]
                                    ) -> Dict[str, Tensor]:
    """Medians over clips and the pass rate.

    Args:
        values: name -> (N,) float64 values of the clips that produced them (no NaN).
        counts: :data:`BACKGROUND_COUNTS` -> 0-d int64.
    Returns:
        0-d float64 medians (NaN for a value no clip produced), the counts, ``pass_rate`` =
        num_pass / num_ok (NaN when no clip is ok).
    """
    out: Dict[str, Tensor] = {}
    for name in BACKGROUND_VALUES:
        v = values[name]
        out[name] = (masked_median(v, torch.ones_like(v, dtype=torch.bool))[0] if v.numel()
                     else torch.tensor(float("nan"), dtype=torch.float64, device=v.device))
    for name in BACKGROUND_COUNTS:
        out[name] = counts[name].clone()
    num_ok = counts["num_ok"]
    out["pass_rate"] = (counts["num_pass"].double() / num_ok.double() if int(num_ok) > 0 else
                        torch.tensor(float("nan"), dtype=torch.float64, device=num_ok.device))
    return out


@eager_entry
@autocast_off
def background_consistency(videos: VideosLike, masks: Optional[Sequence[Any]] = None,
                           poses: Optional[Sequence[Any]] = None, *, config: ConfigLike = None,
                           preset: str = "background",
                           device: Union[None, str, torch.device] = None) -> Dict[str, Tensor]:
    """Per-clip background consistency of a batch (what :func:`score_clip` reports).

    Args:
        videos: (B, T, C, H, W) uint8 / float in [0, 1] tensor, or a list of paths / (T, C, H, W)
            tensors; C in {1, 3}.
        masks, poses: optional, one entry per clip (see :func:`score_clip`).
        config: GeoConConfig / dict / JSON path (paper defaults).
        preset: score_clip preset (default "background": no foreground / epipolar work).
        device: where features and fits run (default: the tensors' device, the first
            tensor's for a list; for paths the CUDA device when available).

    Returns:
        dict of (B,) tensors: ``ir``, ``ge_px``, ``ir_h``, ``ge_h_px``, ``ir_f``, ``ge_f_px``
        (float64; IR in [0, 1], GE in px at working resolution; NaN where a clip has no
        value), ``passed`` (float64 1 / 0, NaN when unknown) and ``status`` (int64 codes into
        ``STATUSES`` = ("ok", "not_applicable", "error")).

    Raises:
        ClipTensorError: a malformed tensor batch (wrong shape / dtype / range, NaN, T = 0).

    Example:
        >>> import torch
        >>> from geocon_torch.metrics.functional import background_consistency
        >>> import torch.nn.functional as F
        >>> g = torch.Generator().manual_seed(0)
        >>> tex = F.avg_pool2d(torch.rand(1, 3, 80, 112, generator=g), 5, stride=1, padding=2)[0]
        >>> tex = ((tex - tex.min()) / (tex.max() - tex.min()) * 255).to(torch.uint8)
        >>> pan = torch.stack([tex[:, 8:72, 2 * t:2 * t + 96] for t in range(3)])  # 2 px / frame
        >>> grey = torch.full_like(pan, 128)  # no texture: not_applicable
        >>> out = background_consistency(torch.stack([pan, grey]),
        ...                              config={"io": {"long_side": None}})
        >>> out["status"].tolist(), out["ir"].tolist()[0], out["ir"][1].isnan().item()
        ([0, 1], 1.0, True)
    """
    out_device = videos.device if isinstance(videos, Tensor) else None
    got = _background_consistency_update(videos, masks, poses, config, preset, device,
                                         out_device)
    return dict(got.values, status=got.status)


__all__ = ["background_consistency", "BACKGROUND_VALUES", "BACKGROUND_COUNTS"]
