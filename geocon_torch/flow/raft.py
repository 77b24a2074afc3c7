"""torchvision RAFT (``raft_small`` / ``raft_large``) from local weights only.

Weights come from ``checkpoint`` (a ``state_dict`` saved with ``torch.save``, optionally nested
under ``"state_dict"`` or ``"model"``) or, when no path is given, from the torch hub cache
(``torch.hub.get_dir()/checkpoints/<torchvision file name>``, where torchvision itself would have
cached them). Nothing is ever downloaded: a missing file raises :class:`CheckpointError`.

Inputs of any size are handled inside: frames whose short side is below ``min_size`` are
upsampled (and the flow scaled back), then padded (replicate) to multiples of 8 and cropped back.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Optional, Union

import torch
import torch.nn.functional as F

from ..checkpoints import read_state_dict, require_checkpoint
from ..errors import CheckpointError
from .base import FlowEstimator

_ARCHS = ("raft_small", "raft_large")


#: where RAFT's weights are set: the config field (``--config`` of the CLI) the foreground
#: stage passes on, and the Python argument
FLOW_CHECKPOINT_HINT = ("set foreground.flow_checkpoint in the config, or checkpoint=PATH in "
                        "Python")


def _weights_enum(arch: str):
    from torchvision.models import optical_flow as of

    return of.Raft_Small_Weights if arch == "raft_small" else of.Raft_Large_Weights


def cached_checkpoint(arch: str) -> Optional[Path]:
    """Path of torchvision's default ``arch`` weights in the torch hub cache, or None."""
    try:
        url = _weights_enum(arch).DEFAULT.url
    except Exception:  # pragma: no cover - torchvision without optical_flow
        return None
    path = Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(url)
    return path if path.is_file() else None


def _load_state_dict(path: Path) -> dict:
    return read_state_dict(path, "RAFT", hint=FLOW_CHECKPOINT_HINT, unwrap=("state_dict", "model"),
                           strip_prefix="module.")


def _mismatch(model: torch.nn.Module, state: dict) -> str:
    """The missing, unexpected and wrong-shape keys of ``state`` for ``model`` (a few of each,
    with counts), or "" when the keys and shapes all fit."""
    ref = model.state_dict()
    missing = [k for k in ref if k not in state]
    unexpected = [k for k in state if k not in ref]
    shapes = [f"{k}: {tuple(v.shape)} in the file, {tuple(ref[k].shape)} in the model"
              for k, v in state.items()
              if k in ref and hasattr(v, "shape") and tuple(v.shape) != tuple(ref[k].shape)]
    parts = [f"{len(keys)} {what} key(s), e.g. {keys[:3]}" for what, keys in
             (("missing", missing), ("unexpected", unexpected), ("wrong-shape", shapes)) if keys]
    heads = {k.split(".", 1)[0] for k in state}
    if missing and len(heads) == 1 and not heads & {k.split(".", 1)[0] for k in ref}:
        parts.append(f"every key starts with {next(iter(heads)) + '.'!r}, a prefix the model "
                     f"lacks: save the model's own state_dict")
    return "; ".join(parts)


def _load_strict(model: torch.nn.Module, state: dict, arch: str, path: Path) -> None:
    """``model.load_state_dict(state)`` (strict); a mismatch is a CheckpointError naming the
    missing / unexpected / wrong-shape keys (else torch's message, 500 characters at most)."""
    try:
        model.load_state_dict(state)
    except Exception as exc:  # noqa: BLE001 - any malformed state is the checkpoint's fault
        why = _mismatch(model, state) or " ".join(str(exc).split())[:500]
        raise CheckpointError(f"checkpoint {path} does not match {arch}: {why}") from exc


class RaftFlow(FlowEstimator):
    """torchvision RAFT as a :class:`FlowEstimator` (eval mode, no gradients).

    Args:
        arch: ``"raft_small"`` or ``"raft_large"``.
        checkpoint: local weights file; None = the torch hub cache file (see module doc).
        device: where the network runs (default: the device of the inputs).
        num_flow_updates: RAFT refinement iterations (torchvision default 12).
        min_size: frames with a shorter side are upsampled to it first (RAFT's 4-level
            correlation pyramid at 1/8 resolution needs at least 64 px; 128 is safer).
        batch_size: pairs per network call (bounds memory; pairs are still batched).
    Raises:
        CheckpointError: missing / unreadable checkpoint, or weights of another architecture.
    """

    def __init__(self, arch: str = "raft_small", *, checkpoint: Optional[Union[str, Path]] = None,
                 device: Optional[Union[str, torch.device]] = None, num_flow_updates: int = 12,
                 min_size: int = 128, batch_size: int = 8) -> None:
        super().__init__(device)
        if arch not in _ARCHS:
            raise CheckpointError(f"unknown RAFT architecture {arch!r}; choose one of {_ARCHS}")
        from torchvision.models import optical_flow as of

        if checkpoint is None:
            path = cached_checkpoint(arch)
            if path is None:
                where = Path(torch.hub.get_dir()) / "checkpoints"
                raise CheckpointError(
                    f"{arch} needs local weights: {FLOW_CHECKPOINT_HINT} (a torchvision "
                    f"state_dict), or place torchvision's file in {where}; nothing is "
                    f"downloaded")
        else:  # a folder is named as one, not as "not found"
            path = require_checkpoint(checkpoint, "RAFT", FLOW_CHECKPOINT_HINT)
        model = getattr(of, arch)(weights=None, progress=False)
        _load_strict(model, _load_state_dict(path), arch, path)
        self.name = arch
        self.checkpoint = str(path)
        self.model = model.eval()
        self.num_flow_updates = int(num_flow_updates)
        self.min_size = int(min_size)
        self.batch_size = max(1, int(batch_size))

    def _forward(self, img1: torch.Tensor, img2: torch.Tensor) -> torch.Tensor:
        dtype = img1.dtype
        self.model.to(img1.device)
        if img1.shape[1] == 1:
            img1, img2 = img1.expand(-1, 3, -1, -1), img2.expand(-1, 3, -1, -1)
        h, w = img1.shape[-2:]
        s = max(1.0, self.min_size / min(h, w))
        hs, ws = (round(h * s), round(w * s)) if s > 1 else (h, w)
        ph, pw = (-hs) % 8, (-ws) % 8

        def prep(x: torch.Tensor) -> torch.Tensor:
            x = x.float()
            if (hs, ws) != (h, w):
                x = F.interpolate(x, size=(hs, ws), mode="bilinear", align_corners=False)
            x = F.pad(x, (0, pw, 0, ph), mode="replicate")
            return x * 2.0 - 1.0  # torchvision's RAFT expects [-1, 1]

        outs = []
        with torch.inference_mode():
            for start in range(0, img1.shape[0], self.batch_size):
                a = prep(img1[start:start + self.batch_size])
                b = prep(img2[start:start + self.batch_size])
                flow = self.model(a, b, num_flow_updates=self.num_flow_updates)[-1]
                outs.append(flow[..., :hs, :ws])
        flow = torch.cat(outs).clone()
        if (hs, ws) != (h, w):
            flow = F.interpolate(flow, size=(h, w), mode="bilinear", align_corners=False)
            flow = flow * torch.tensor([w / ws, h / hs], device=flow.device).view(1, 2, 1, 1)
        return flow.to(dtype)
