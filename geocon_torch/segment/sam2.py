"""Optional SAM-2 video segmentation (paper sec. 4.3, Algorithm 1 B): prompts -> tracked masks.

Needs the ``sam2`` package (``pip install "geocon_torch[sam2]"``: the sdist builds in pip's
isolated build environment, skipping its optional CUDA extension where it cannot be built) and a
*local* checkpoint
(``config.segment.sam2_checkpoint``, a ``.pt`` with a ``"model"`` state dict, as Meta ships them)
plus its model config (``config.segment.sam2_config``: a config name inside the sam2 package such
as ``"configs/sam2.1/sam2.1_hiera_t.yaml"``, or a path to a YAML file). Nothing is downloaded.

Prompts (working-resolution pixels), from ``config.segment.sam2_prompts`` (a JSON file) or the
``prompts`` argument::

    [{"id": 1, "frame": 0, "box": [x0, y0, x1, y1]},
     {"id": 2, "frame": 0, "points": [[x, y], ...], "labels": [1, 0, ...]}]

Each object is tracked through the clip (``propagate_in_video`` forwards from the earliest prompt,
then backwards from the latest one for the frames before each object's first prompt); the result
is (T, K, H, W) bool at working resolution, K = number of prompted objects in id order. SAM-2
runs under bfloat16 autocast on CUDA and on the CPU, as Meta runs it (its memory bank is kept in
bfloat16).
"""
from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from .._json import read_json_file
from ..config import SegmentConfig
from ..checkpoints import cached_model, require_checkpoint
from ..errors import CheckpointError, InputError, OptionalDependencyError
from ..types import Clip

Prompts = Sequence[Dict[str, Any]]


def _import_sam2() -> Any:
    try:
        from sam2.build_sam import build_sam2_video_predictor
    except ImportError as exc:
        raise OptionalDependencyError(
            "SAM-2 masks need the sam2 package: pip install 'geocon_torch[sam2]'; "
            f"import failed: {exc}"
        ) from exc
    return build_sam2_video_predictor


def load_sam2_predictor(checkpoint: Optional[str], config: Optional[str], *,
                        device: Union[None, str, torch.device] = None,
                        image_size: Optional[int] = None) -> Any:
    """A ``SAM2VideoPredictor`` from a local checkpoint and a model config (see module doc)."""
    build = _import_sam2()
    ckpt = require_checkpoint(checkpoint, "SAM-2 masks", "set config.segment.sam2_checkpoint")
    if not config:
        raise InputError("SAM-2 needs its model config: set config.segment.sam2_config, e.g. "
                          "'configs/sam2.1/sam2.1_hiera_t.yaml'")
    overrides = [f"++model.image_size={int(image_size)}"] if image_size else []
    dev = str(device or "cpu")
    cfg_path = Path(config).expanduser()
    try:
        if cfg_path.is_file():  # a YAML outside the package: compose from its folder
            from hydra import initialize_config_dir
            from hydra.core.global_hydra import GlobalHydra

            GlobalHydra.instance().clear()
            try:
                with initialize_config_dir(config_dir=str(cfg_path.parent.resolve()),
                                           version_base="1.2"):
                    return build(cfg_path.name, str(ckpt), device=dev,
                                 hydra_overrides_extra=overrides)
            finally:
                from hydra import initialize_config_module

                GlobalHydra.instance().clear()
                initialize_config_module("sam2", version_base="1.2")
        return build(config, str(ckpt), device=dev, hydra_overrides_extra=overrides)
    except (RuntimeError, KeyError) as exc:  # state dict does not match the config
        raise CheckpointError(f"SAM-2 checkpoint {ckpt} does not match config {config}: "
                              f"{exc}") from exc


def load_prompts(source: Union[None, str, Path, Prompts]) -> List[Dict[str, Any]]:
    """Prompt list from a JSON file or a list of dicts (validated)."""
    if source is None:
        raise InputError("SAM-2 masks need prompts: set config.segment.sam2_prompts to a JSON "
                          "file of boxes / points (see geocon_torch.segment.sam2)")
    if isinstance(source, (str, Path)):
        source = read_json_file(source, "SAM-2 prompt file")
    prompts = list(source)
    for p in prompts:
        if "box" not in p and "points" not in p:
            raise InputError(f"a SAM-2 prompt needs 'box' or 'points': {p}")
    return prompts


def _collect(out: torch.Tensor, ids: List[int], frames: Any,
             before: Optional[Dict[int, int]] = None) -> None:
    """Write a SAM-2 propagation (``(frame, object ids, logits (K', 1, H, W))`` per frame) into
    ``out`` (T, K, H, W) bool, one host copy per frame; with ``before`` only the frames before
    each object's first prompt."""
    for frame_idx, obj_ids, logits in frames:
        masks = (logits[:, 0] > 0).cpu()
        for j, oid in enumerate(obj_ids):
            if before is None or frame_idx < before[int(oid)]:
                out[frame_idx, ids.index(int(oid))] = masks[j]


def _sam2_autocast(predictor: Any) -> Any:
    """bfloat16 autocast on the predictor's device (CUDA or CPU), as SAM-2 is meant to run: it
    stores its memory bank in bfloat16, and without autocast an object prompted after the
    first frame met those memories in a float32 layer and crashed."""
    dev = getattr(predictor, "device", None)
    kind = torch.device(dev).type if dev is not None else "cpu"
    if kind not in ("cuda", "cpu"):
        return contextlib.nullcontext()
    return torch.autocast(kind, dtype=torch.bfloat16)


@torch.inference_mode()
def sam2_masks(clip: Clip, cfg: SegmentConfig, *, device: Union[None, str, torch.device] = None,
               prompts: Union[None, str, Path, Prompts] = None,
               predictor: Any = None) -> torch.Tensor:
    """(T, K, H, W) bool masks of the prompted objects tracked by SAM-2 through ``clip``."""
    prompts = load_prompts(prompts if prompts is not None else cfg.sam2_prompts)
    pred = predictor or cached_model(
        "sam2", cfg.sam2_checkpoint, (cfg.sam2_config, str(device), cfg.sam2_image_size),
        lambda: load_sam2_predictor(cfg.sam2_checkpoint, cfg.sam2_config, device=device,
                                    image_size=cfg.sam2_image_size))
    import cv2

    t, (h, w) = clip.num_frames, clip.size
    ids = sorted({int(p.get("id", k + 1)) for k, p in enumerate(prompts)})
    out = torch.zeros(t, len(ids), h, w, dtype=torch.bool)
    with tempfile.TemporaryDirectory() as tmp, _sam2_autocast(pred):  # a folder of JPEG frames
        for i, frame in enumerate(clip.frames.permute(0, 2, 3, 1).cpu().numpy()):
            cv2.imwrite(str(Path(tmp) / f"{i}.jpg"), frame[..., ::-1],
                        [cv2.IMWRITE_JPEG_QUALITY, 95])
        state = pred.init_state(video_path=tmp)
        first: Dict[int, int] = {}  # each object's first prompted frame
        for k, p in enumerate(prompts):
            kw: Dict[str, Any] = {}
            if "box" in p:
                kw["box"] = np.asarray(p["box"], dtype=np.float32)
            if "points" in p:
                kw["points"] = np.asarray(p["points"], dtype=np.float32)
                kw["labels"] = np.asarray(p.get("labels", [1] * len(p["points"])), np.int32)
            oid, f = int(p.get("id", k + 1)), int(p.get("frame", 0))
            pred.add_new_points_or_box(state, frame_idx=f, obj_id=oid, **kw)
            first[oid] = min(first.get(oid, f), f)
        _collect(out, ids, pred.propagate_in_video(state))  # forwards from the earliest prompt
        last = max(first.values())
        if last > 0:  # the frames before an object's first prompt: tracked backwards
            _collect(out, ids, pred.propagate_in_video(state, start_frame_idx=last, reverse=True),
                     before=first)
    return out
