"""Optional DUSt3R translation gate (paper Algorithm 1 A, sec. 6.2): first/last relative pose.

Needs a checkout of https://github.com/naver/dust3r (not a PyPI package): give its folder as
``config.gate.dust3r_path`` (it is put on ``sys.path``; the checkout's ``croco`` submodule must be
present) and a *local* checkpoint file as ``config.gate.dust3r_checkpoint`` (e.g.
``DUSt3R_ViTLarge_BaseDecoder_512_dpt.pth``). Nothing is downloaded. Without them a clear
:class:`OptionalDependencyError` / :class:`CheckpointError` is raised.

The two frames are resized so the long side is ``dust3r_image_size`` (sides multiples of 16),
run symmetrised through the network, and the pair is aligned with DUSt3R's ``PairViewer``; the
relative pose camera-0 -> camera-1 is ``inv(P_1) P_0`` of its camera-to-world poses, in DUSt3R's
unit-scale scene normalisation (where tau_t = 0.04 applies). A failed reconstruction returns None,
which the gate treats by ``missing_pose`` (fail_to_F by default).
"""
from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any, Optional

import numpy as np
import torch
import torch.nn.functional as F

from ..config import GateConfig
from ..checkpoints import cached_model, require_checkpoint
from ..errors import CheckpointError, OptionalDependencyError
from ..types import Clip
from .decision import GateDecision
from .poses import gate_from_poses


def import_dust3r(dust3r_path: Optional[str] = None) -> Any:
    """Import the ``dust3r`` package, adding ``dust3r_path`` to ``sys.path`` first."""
    if dust3r_path is not None:
        root = Path(dust3r_path).expanduser()
        if not root.is_dir():
            raise OptionalDependencyError(f"gate.dust3r_path {root} is not a folder")
        for p in (root, root / "croco"):
            if p.is_dir() and str(p) not in sys.path:
                sys.path.insert(0, str(p))
    try:
        return importlib.import_module("dust3r")
    except ImportError as exc:
        raise OptionalDependencyError(
            "the DUSt3R gate needs the dust3r repository: clone https://github.com/naver/dust3r "
            "(with its croco submodule), install its requirements and set config.gate.dust3r_path "
            f"to the checkout; import failed: {exc}") from exc


class Dust3rPoseEstimator:
    """First/last relative pose with a DUSt3R model loaded from a local checkpoint.

    Args:
        checkpoint: path of a DUSt3R ``.pth`` checkpoint (dict with ``args`` and ``model``) or of
            a local Hugging Face-style model folder.
        dust3r_path: folder of the dust3r checkout (added to ``sys.path``).
        device: torch device (default: CPU).
        image_size: long side fed to the network (512 or 224 models).
    """

    def __init__(self, checkpoint: Optional[str], *, dust3r_path: Optional[str] = None,
                 device: Optional[torch.device] = None, image_size: int = 512,
                 model: Any = None) -> None:
        self.device = torch.device(device or "cpu")
        self.image_size = int(image_size)
        import_dust3r(dust3r_path)
        if model is None:
            path = require_checkpoint(checkpoint, "the DUSt3R gate",
                                      "set config.gate.dust3r_checkpoint", allow_dir=True)
            from dust3r.model import AsymmetricCroCo3DStereo

            try:
                model = AsymmetricCroCo3DStereo.from_pretrained(str(path))
            except Exception as exc:  # corrupt file, wrong architecture
                raise CheckpointError(f"could not load DUSt3R checkpoint {path}: {exc}") from exc
        self.model = model.to(self.device).eval()

    def _view(self, frame: torch.Tensor, idx: int) -> dict:
        h, w = frame.shape[-2:]
        s = self.image_size / max(h, w)
        nh, nw = max(16, int(round(h * s / 16)) * 16), max(16, int(round(w * s / 16)) * 16)
        img = F.interpolate(frame[None].float() / 255.0, size=(nh, nw), mode="bilinear",
                            align_corners=False, antialias=True) * 2 - 1
        return {"img": img, "true_shape": np.int32([[nh, nw]]), "idx": idx,
                "instance": str(idx)}

    @torch.no_grad()
    def relative_pose(self, frame0: torch.Tensor, frame1: torch.Tensor) -> Optional[torch.Tensor]:
        """(4, 4) float64 pose camera-0 -> camera-1 of two (3, H, W) uint8 frames, or None."""
        from dust3r.cloud_opt import GlobalAlignerMode, global_aligner
        from dust3r.image_pairs import make_pairs
        from dust3r.inference import inference

        views = [self._view(frame0.cpu(), 0), self._view(frame1.cpu(), 1)]
        pairs = make_pairs(views, scene_graph="complete", prefilter=None, symmetrize=True)
        out = inference(pairs, self.model, self.device, batch_size=2, verbose=False)
        scene = global_aligner(out, device=self.device, mode=GlobalAlignerMode.PairViewer,
                               verbose=False)
        poses = scene.get_im_poses().detach().double().cpu()  # camera-to-world (2, 4, 4)
        rel = torch.linalg.inv(poses[1]) @ poses[0]
        return rel if bool(torch.isfinite(rel).all()) else None


def gate_from_dust3r(clip: Clip, pairs: torch.Tensor, cfg: GateConfig,
                     device: Optional[torch.device] = None,
                     estimator: Optional[Dust3rPoseEstimator] = None) -> GateDecision:
    """Algorithm 1 A with DUSt3R: relative pose of (frame 0, frame T-1) -> H / F / U."""
    est = estimator or cached_model(
        "dust3r", cfg.dust3r_checkpoint, (cfg.dust3r_path, str(device), cfg.dust3r_image_size),
        lambda: Dust3rPoseEstimator(cfg.dust3r_checkpoint, dust3r_path=cfg.dust3r_path,
                                    device=device, image_size=cfg.dust3r_image_size))
    rel = est.relative_pose(clip.frames[0], clip.frames[-1])
    pose = torch.full((4, 4), float("nan"), dtype=torch.float64) if rel is None else rel
    per_pair_cfg = GateConfig(**{**cfg.__dict__, "per_pair": False})
    decision = gate_from_poses(pose, pairs, clip.num_frames, per_pair_cfg, method="dust3r")
    decision.evidence["source"] = f"dust3r:{cfg.dust3r_checkpoint}"
    return decision
