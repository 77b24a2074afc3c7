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

Loading a checkpoint safely (:func:`load_dust3r_model`): a DUSt3R ``.pth`` is a dict
``{"args": argparse.Namespace(model="AsymmetricCroCo3DStereo(...)"), "model": state_dict}``.
DUSt3R's own ``load_model`` unpickles it with ``weights_only=False`` and ``eval``s the model
string, so a crafted file runs code. Here the file is read with ``weights_only=True`` and only
``argparse.Namespace`` allow-listed (``torch.serialization.safe_globals``, for this one load),
and the model string is *parsed*, not evaluated: it must be one call
``AsymmetricCroCo3DStereo(key=literal, ...)`` (literals and ``inf``), else CheckpointError.
A local Hugging Face folder (``config.json`` + ``model.safetensors``) builds
``AsymmetricCroCo3DStereo(**config)`` and loads the safetensors file (tensors only; needs the
``safetensors`` package). Either form must hold exactly the model's weights: missing weights,
or weights the model does not use, are a CheckpointError.

Install: ``pip install -e ".[dust3r]"`` (roma, huggingface_hub) plus the checkout, and
``pip install safetensors`` for the folder form. Third-party prints (the checkout's import
warnings) go to stderr.
"""
from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import json
import sys
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import torch
import torch.nn.functional as F

from ..config import GateConfig
from ..checkpoints import cached_model, load_weights_only, require_checkpoint
from ..errors import CheckpointError, OptionalDependencyError
from ..types import Clip
from .decision import GateDecision
from .poses import gate_from_poses


def _quiet() -> contextlib.AbstractContextManager:
    """Send third-party prints (the dust3r checkout's import warnings, huggingface_hub's
    messages) to stderr, so stdout stays machine-readable (``geocon score --json -``)."""
    return contextlib.redirect_stdout(sys.stderr)


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
        with _quiet():  # the checkout prints warnings (RoPE2D, trimesh) to stdout
            return importlib.import_module("dust3r")
    except ImportError as exc:
        raise OptionalDependencyError(
            "the DUSt3R gate needs the dust3r repository: clone https://github.com/naver/dust3r "
            "(with its croco submodule), install its requirements and set config.gate.dust3r_path "
            f"to the checkout; import failed: {exc}") from exc


MODEL_CLASS = "AsymmetricCroCo3DStereo"
WHAT = "the DUSt3R gate"


class _Inf(ast.NodeTransformer):
    """``inf`` in a model string -> the float constant (``ast.literal_eval`` has no names)."""

    def visit_Name(self, node: ast.Name) -> ast.AST:
        if node.id == "inf":
            return ast.copy_location(ast.Constant(float("inf")), node)
        raise CheckpointError(f"{WHAT}: the checkpoint's model string is not a plain "
                              f"{MODEL_CLASS}(...) call (name {node.id!r})")


def model_kwargs(spec: str) -> Dict[str, Any]:
    """The constructor keywords of a DUSt3R checkpoint's model string, parsed without ``eval``.

    ``"AsymmetricCroCo3DStereo(pos_embed='RoPE100', img_size=(512, 512), depth_mode=('exp',
    -inf, inf), ...)"`` -> ``{"pos_embed": "RoPE100", ...}``; DUSt3R's ``load_model``
    substitutions are applied (``ManyAR_PatchEmbed`` -> ``PatchEmbedDust3R``,
    ``landscape_only=False``).

    Raises:
        CheckpointError: not a single ``AsymmetricCroCo3DStereo(...)`` call with literal
            keyword values.
    """
    bad = (f"{WHAT}: the checkpoint's model string {str(spec)[:200]!r} is not a plain "
           f"{MODEL_CLASS}(key=value, ...) call")
    try:
        call = ast.parse(str(spec).strip(), mode="eval").body
    except SyntaxError as exc:
        raise CheckpointError(f"{bad} ({exc})") from exc
    if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
            and call.func.id == MODEL_CLASS and not call.args
            and all(k.arg for k in call.keywords)):
        raise CheckpointError(bad)
    try:
        kwargs = {k.arg: ast.literal_eval(_Inf().visit(k.value)) for k in call.keywords}
    except (ValueError, TypeError, SyntaxError) as exc:
        raise CheckpointError(f"{bad} ({exc})") from exc
    if kwargs.get("patch_embed_cls") == "ManyAR_PatchEmbed":
        kwargs["patch_embed_cls"] = "PatchEmbedDust3R"
    kwargs["landscape_only"] = False
    return kwargs


#: the dust3r modules a pose estimate imports (``dust3r.cloud_opt`` needs roma)
_RUNTIME_MODULES = ("dust3r.model", "dust3r.cloud_opt", "dust3r.image_pairs", "dust3r.inference")


def _model_class() -> Any:
    """DUSt3R's model class, after importing every module :meth:`Dust3rPoseEstimator.
    relative_pose` needs (so a missing roma is found when the estimator is built, before any
    clip is read, not in each clip's gate).

    Raises:
        OptionalDependencyError: one of them (or roma, huggingface_hub) is not importable.
    """
    try:
        with _quiet():
            mods = [importlib.import_module(m) for m in _RUNTIME_MODULES]
    except ImportError as exc:
        raise OptionalDependencyError(
            f"{WHAT} needs roma and huggingface_hub (pip install -e \".[dust3r]\") and the "
            f"dust3r checkout with croco; import failed: {exc}") from exc
    return mods[0].AsymmetricCroCo3DStereo


def _check_keys(path: Path, missing: Any, unexpected: Any) -> None:
    """CheckpointError when a DUSt3R checkpoint lacks weights of its model or holds weights the
    model does not use (the official checkpoints hold exactly the model's state_dict)."""
    if missing:
        raise CheckpointError(f"{WHAT} checkpoint {path} lacks {len(missing)} weights, e.g. "
                              f"{list(missing)[:3]}")
    if unexpected:
        raise CheckpointError(f"{WHAT} checkpoint {path} holds {len(unexpected)} weights its "
                              f"model does not use (another architecture than its model "
                              f"string / config?), e.g. {sorted(unexpected)[:3]}")


def _load_folder(cls: Any, path: Path) -> torch.nn.Module:
    """A DUSt3R model from a local Hugging Face folder: ``cls(**config.json)`` with the weights
    of ``model.safetensors`` (safetensors hold tensors only), every weight required.

    Raises:
        OptionalDependencyError: safetensors is not installed. CheckpointError: a missing or
            unreadable ``config.json`` / ``model.safetensors``, missing or unused weights.
    """
    config, weights = path / "config.json", path / "model.safetensors"
    absent = [p.name for p in (config, weights) if not p.is_file()]
    if absent:
        pth = sorted(p.name for p in path.glob("*.pth"))
        also = (f"; it holds {pth}: give that file as the checkpoint instead of its folder"
                if pth else "")
        raise CheckpointError(f"{WHAT} checkpoint folder {path} has no {' or '.join(absent)} "
                              f"(a Hugging Face model folder needs config.json and "
                              f"model.safetensors){also}")
    try:
        import safetensors.torch as st  # lazy: only the folder form needs it
    except ImportError as exc:
        raise OptionalDependencyError(
            f"{WHAT}: the Hugging Face folder checkpoint {path} needs safetensors: pip install "
            f"safetensors (or give a DUSt3R .pth file); import failed: {exc}") from exc
    try:
        kwargs = json.loads(config.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CheckpointError(f"{WHAT} checkpoint folder {path}: config.json is unreadable "
                              f"({exc})") from exc
    if not isinstance(kwargs, dict):
        raise CheckpointError(f"{WHAT} checkpoint folder {path}: config.json holds "
                              f"{type(kwargs).__name__}, expected an object of model settings")
    try:
        with _quiet():
            model = cls(**kwargs)
            missing, unexpected = st.load_model(model, str(weights), strict=False,
                                                 device="cpu")
    except Exception as exc:  # noqa: BLE001 - any failure is a bad checkpoint
        raise CheckpointError(f"could not load DUSt3R model folder {path}: {exc}") from exc
    _check_keys(path, missing, unexpected)
    return model


def load_dust3r_model(path: Path) -> torch.nn.Module:
    """A DUSt3R model from a local ``.pth`` checkpoint or Hugging Face folder (``config.json``
    + ``model.safetensors``), read safely (see the module docstring). Nothing is downloaded.

    Raises:
        CheckpointError: unreadable file, not a ``{"args", "model"}`` dict, an unsafe model
            string, missing weights, weights the model does not use; a folder without
            ``config.json`` / ``model.safetensors``.
        OptionalDependencyError: roma / the checkout's modules, or (folder) safetensors, are
            not importable.
    """
    cls = _model_class()
    if path.is_dir():  # local HF folder: config.json + safetensors
        return _load_folder(cls, path)
    ckpt = load_weights_only(path, WHAT, allowed=(argparse.Namespace,))
    spec = getattr(ckpt.get("args"), "model", None) if isinstance(ckpt, dict) else None
    if spec is None or not isinstance(ckpt.get("model"), dict):
        raise CheckpointError(f"{WHAT} checkpoint {path} is not a DUSt3R checkpoint (a dict "
                              "with 'args' (Namespace with .model) and 'model' (state_dict))")
    try:
        with _quiet():
            model = cls(**model_kwargs(spec))
            missing, unexpected = model.load_state_dict(ckpt["model"], strict=False)
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - wrong architecture / shapes
        raise CheckpointError(f"could not build DUSt3R from {path}: {exc}") from exc
    _check_keys(path, missing, unexpected)
    return model


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
        _model_class()  # every module a pose estimate imports (roma), before any clip
        if model is None:
            path = require_checkpoint(checkpoint, WHAT, "set config.gate.dust3r_checkpoint",
                                      allow_dir=True)
            model = load_dust3r_model(path)
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
        with _quiet():
            from dust3r.cloud_opt import GlobalAlignerMode, global_aligner  # lazy: checkout
            from dust3r.image_pairs import make_pairs  # lazy: optional checkout
            from dust3r.inference import inference  # lazy: optional checkout

        views = [self._view(frame0.cpu(), 0), self._view(frame1.cpu(), 1)]
        pairs = make_pairs(views, scene_graph="complete", prefilter=None, symmetrize=True)
        out = inference(pairs, self.model, self.device, batch_size=2, verbose=False)
        scene = global_aligner(out, device=self.device, mode=GlobalAlignerMode.PairViewer,
                               verbose=False)
        poses = scene.get_im_poses().detach().double().cpu()  # camera-to-world (2, 4, 4)
        rel = torch.linalg.inv(poses[1]) @ poses[0]
        return rel if bool(torch.isfinite(rel).all()) else None


def dust3r_estimator(cfg: GateConfig, device: Optional[torch.device] = None
                     ) -> Dust3rPoseEstimator:
    """The DUSt3R pose estimator of ``cfg`` (``dust3r_checkpoint``, ``dust3r_path``,
    ``dust3r_image_size``) on ``device``, built once and kept while the checkpoint file and
    those settings stay the same (:func:`~geocon_torch.checkpoints.cached_model`): the gate and
    the scoring preflight (:mod:`geocon_torch.sections.stage_models`) share it.

    Raises:
        OptionalDependencyError: the dust3r checkout is not importable. CheckpointError: no,
            missing or unusable checkpoint. ConfigError: the checkpoint's content is not the
            one ``cfg.dust3r_checkpoint_sha256`` pinned (it changed during the run).
    """
    return cached_model(
        "dust3r", cfg.dust3r_checkpoint, (cfg.dust3r_path, str(device), cfg.dust3r_image_size),
        lambda: Dust3rPoseEstimator(cfg.dust3r_checkpoint, dust3r_path=cfg.dust3r_path,
                                    device=device, image_size=cfg.dust3r_image_size),
        expect_sha256=cfg.dust3r_checkpoint_sha256)


def gate_from_dust3r(clip: Clip, pairs: torch.Tensor, cfg: GateConfig,
                     device: Optional[torch.device] = None,
                     estimator: Optional[Dust3rPoseEstimator] = None) -> GateDecision:
    """Algorithm 1 A with DUSt3R: relative pose of (frame 0, frame T-1) -> H / F / U."""
    est = estimator or dust3r_estimator(cfg, device)
    rel = est.relative_pose(clip.frames[0], clip.frames[-1])
    pose = torch.full((4, 4), float("nan"), dtype=torch.float64) if rel is None else rel
    per_pair_cfg = GateConfig(**{**cfg.__dict__, "per_pair": False})
    decision = gate_from_poses(pose, pairs, clip.num_frames, per_pair_cfg, method="dust3r")
    decision.evidence["source"] = f"dust3r:{cfg.dust3r_checkpoint}"
    return decision
