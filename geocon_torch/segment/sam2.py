"""Optional SAM-2 video segmentation (paper sec. 4.3, Algorithm 1 B): prompts -> tracked masks.

Needs the ``sam2`` package (``pip install "geocon_torch[sam2]"``: the sdist builds in pip's
isolated build environment, skipping its optional CUDA extension where it cannot be built) and a
*local* checkpoint
(``config.segment.sam2_checkpoint``, a ``.pt`` with a ``"model"`` state dict, as Meta ships them)
plus its model config (``config.segment.sam2_config``: a config name inside the sam2 package such
as ``"configs/sam2.1/sam2.1_hiera_t.yaml"``, or a path to a YAML file). Nothing is downloaded.

A model config is code: SAM-2 builds the model with hydra's ``instantiate``, which calls the
``_target_`` of every node of the config's ``model`` (a YAML could name ``numpy.savetxt`` and
write any file, e.g. a ``.pth`` that Python runs at start-up). The checkpoint is read safely
(``weights_only``), so the config is checked too before anything is built: it is composed
(with the same overrides) and resolved as SAM-2 does, and a ``_target_`` anywhere under
``model`` that is not a class of sam2's model modules (:data:`SAM2_TARGET_MODULES`;
:data:`SAM2_EXTRA_TARGETS` lists other allowed names: none, as Meta's model configs name only
sam2 classes) is a ConfigError naming the key and the target. Only hand a YAML from a source
you trust all the same: sam2's own classes still run with the values it gives.

Prompts (working-resolution pixels), from ``config.segment.sam2_prompts`` (a JSON file) or the
``prompts`` argument::

    [{"id": 1, "frame": 0, "box": [x0, y0, x1, y1]},
     {"id": 2, "frame": 0, "points": [[x, y], ...], "labels": [1, 0, ...]}]

a non-empty list of objects, each with a ``"box"`` (4 finite numbers) and / or ``"points"`` (a
non-empty list of [x, y] pairs of finite numbers) with optional ``"labels"`` (one 0 / 1 per point,
default all 1), an optional integer ``"frame"`` in [0, T) (default 0) and an optional integer
``"id"`` (default the prompt's position + 1). Anything else is an InputError naming the setting,
the file, the prompt and what is wrong, raised before SAM-2 is loaded. Scoring checks the prompt
file's format (and builds the predictor) before any clip is read
(:mod:`geocon_torch.sections.stage_models`): a bad file raises there for the whole run; only a
prompt frame outside a clip's [0, T) is that clip's error.

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
from typing import Any, Dict, FrozenSet, List, Optional, Sequence, Union

import numpy as np
import torch

from .._checks import is_integer
from .._json import read_json_file
from ..config import SegmentConfig
from ..checkpoints import cached_model, load_weights_only, require_checkpoint
from ..errors import CheckpointError, ConfigError, InputError, OptionalDependencyError
from ..types import Clip

Prompts = Sequence[Dict[str, Any]]
#: the sam2 modules a model config's ``_target_`` may name classes of (where SAM-2's model
#: classes live; other sam2 modules, such as the ``sam2.benchmark`` script, are never imported)
SAM2_TARGET_MODULES = ("sam2.modeling.", "sam2.sam2_video_predictor.")
#: ``_target_`` names a SAM-2 model config may give besides those classes: none. Meta's model
#: configs (sam2/configs/sam2 and sam2.1, and the legacy top-level sam2_hiera_*.yaml) name only
#: sam2.modeling classes; its training configs (torch.optim, fvcore, training.*) are not model
#: configs and are never built here.
SAM2_EXTRA_TARGETS: FrozenSet[str] = frozenset()


def _import_sam2() -> Any:
    try:
        from sam2.build_sam import build_sam2_video_predictor
    except ImportError as exc:
        raise OptionalDependencyError(
            "SAM-2 masks need the sam2 package: pip install 'geocon_torch[sam2]'; "
            f"import failed: {exc}"
        ) from exc
    return build_sam2_video_predictor


def _target_problem(target: Any) -> Optional[str]:
    """Why hydra must not call ``target`` (a config's ``_target_``), or None: a class of the
    sam2 package, looked up the way ``instantiate`` looks it up (only names under
    :data:`SAM2_TARGET_MODULES` are looked up, so nothing else is imported; the class must be
    defined in sam2, not reached through a module sam2 imports, such as
    ``sam2.modeling.sam2_base.torch.save``), or one of :data:`SAM2_EXTRA_TARGETS`."""
    if isinstance(target, str) and target in SAM2_EXTRA_TARGETS:
        return None
    if not isinstance(target, str) or not target.startswith("sam2."):
        return "outside the sam2 package"
    if not target.startswith(SAM2_TARGET_MODULES):
        return f"outside sam2's model modules ({', '.join(SAM2_TARGET_MODULES)})"
    from hydra._internal.utils import _locate  # what hydra.utils.instantiate calls

    try:
        obj = _locate(target)
    except (ImportError, ValueError) as exc:
        return f"not found ({str(exc).splitlines()[0]})"
    module = getattr(obj, "__module__", None) or ""
    if not isinstance(obj, type) or not (module == "sam2" or module.startswith("sam2.")):
        name = f"{module or '?'}.{getattr(obj, '__qualname__', '?')}"
        return f"not a class of the sam2 package (it is the {type(obj).__name__} {name})"
    return None


def _check_targets(name: str, overrides: List[str], config: str) -> None:
    """ConfigError (naming ``segment.sam2_config``, the key and the target) unless every
    ``_target_`` under ``model`` of the config ``name`` (composed in the hydra context that
    SAM-2 will build it in, with ``overrides``, and resolved as SAM-2 resolves it) passes
    :func:`_target_problem`. Nothing is instantiated."""
    from hydra import compose
    from omegaconf import DictConfig, ListConfig, OmegaConf

    cfg = compose(config_name=name, overrides=overrides)
    OmegaConf.resolve(cfg)
    todo: List[Any] = [("model", cfg.get("model"))]
    while todo:
        where, node = todo.pop()
        if isinstance(node, DictConfig):
            for key, value in node.items():
                problem = _target_problem(value) if key == "_target_" else None
                if problem is not None:
                    raise ConfigError(
                        f"segment.sam2_config {config!r}: {where}._target_ = {value!r} is "
                        f"{problem}; a SAM-2 model config may only build the sam2 package's "
                        f"classes (hydra would call it: a model config is code)")
                todo.append((f"{where}.{key}", value))
        elif isinstance(node, ListConfig):
            todo.extend((f"{where}[{i}]", value) for i, value in enumerate(node))


def _build_unloaded(build: Any, config: str, device: str, overrides: List[str]) -> Any:
    """SAM-2's video predictor of model config ``config`` (a config name inside the sam2
    package or a YAML path), randomly initialised, on ``device``.

    The config is composed and its ``_target_`` names checked first (:func:`_check_targets`).

    Raises:
        ConfigError: naming ``segment.sam2_config``: hydra / omegaconf cannot find, compose or
            instantiate it (no such config or file, bad YAML, not a SAM-2 model config), or it
            names a ``_target_`` outside the sam2 package (naming the key and the target).
    """
    from hydra.errors import HydraException, MissingConfigException
    from omegaconf.errors import OmegaConfBaseException
    from yaml import YAMLError

    cfg_path = Path(config).expanduser()
    try:
        if not cfg_path.is_file():
            _check_targets(config, overrides, config)
            return build(config, None, device=device, hydra_overrides_extra=overrides)
        from hydra import initialize_config_dir, initialize_config_module
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()  # a YAML outside the package: compose from its folder
        try:
            with initialize_config_dir(config_dir=str(cfg_path.parent.resolve()),
                                       version_base="1.2"):
                _check_targets(cfg_path.name, overrides, config)
                return build(cfg_path.name, None, device=device,
                             hydra_overrides_extra=overrides)
        finally:
            GlobalHydra.instance().clear()
            initialize_config_module("sam2", version_base="1.2")
    except (HydraException, OmegaConfBaseException, YAMLError) as exc:
        reason = f"{type(exc).__name__}: " + " ".join(str(exc).split("\n")[0].split())
        if isinstance(exc, MissingConfigException) and not cfg_path.is_file():
            reason = "no such file, and no config of that name inside the sam2 package"
        raise ConfigError(
            f"segment.sam2_config {config!r} is not a SAM-2 model config SAM-2 can build (a "
            "config name inside the sam2 package such as 'configs/sam2.1/sam2.1_hiera_t.yaml', "
            f"or the path of a YAML file): {reason}") from exc


def load_sam2_predictor(checkpoint: Optional[str], config: Optional[str], *,
                        device: Union[None, str, torch.device] = None,
                        image_size: Optional[int] = None) -> Any:
    """A ``SAM2VideoPredictor`` from a local checkpoint and a model config (see module doc).

    The checkpoint is read safely (``weights_only``) before the model is built, then loaded
    into it (strictly), as ``sam2.build_sam`` does.

    Raises:
        CheckpointError: no / missing / unreadable checkpoint (naming the file), one without a
            ``"model"`` state dict, or weights that do not match the config.
        OptionalDependencyError: no sam2 package. ConfigError: no config, or one SAM-2 cannot
            build (``segment.sam2_config``).
    """
    build = _import_sam2()
    ckpt = require_checkpoint(checkpoint, "SAM-2 masks", "set config.segment.sam2_checkpoint")
    if not config:
        raise ConfigError("SAM-2 needs its model config: set config.segment.sam2_config, e.g. "
                          "'configs/sam2.1/sam2.1_hiera_t.yaml'")
    data = load_weights_only(ckpt, "SAM-2")
    state = data.get("model") if isinstance(data, dict) else None
    if not isinstance(state, dict):
        raise CheckpointError(f"SAM-2 checkpoint {ckpt} holds no 'model' state dict (Meta's "
                              "checkpoints store the weights under 'model')")
    overrides = [f"++model.image_size={int(image_size)}"] if image_size else []
    model = _build_unloaded(build, config, str(device or "cpu"), overrides)
    try:
        model.load_state_dict(state)
    except (RuntimeError, KeyError, TypeError) as exc:  # state dict does not match the config
        raise CheckpointError(f"SAM-2 checkpoint {ckpt} does not match config {config}: "
                              f"{exc}") from exc
    return model


def sam2_predictor(cfg: SegmentConfig, device: Union[None, str, torch.device] = None) -> Any:
    """The SAM-2 video predictor of ``cfg`` (``sam2_checkpoint``, ``sam2_config``,
    ``sam2_image_size``) on ``device``, built once and kept while the checkpoint file and those
    settings stay the same (:func:`~geocon_torch.checkpoints.cached_model`): the masks stage and
    the scoring preflight (:mod:`geocon_torch.sections.stage_models`) share it.

    Raises:
        as :func:`load_sam2_predictor`; ConfigError: the checkpoint's content is not the one
        ``cfg.sam2_checkpoint_sha256`` pinned (it changed during the run).
    """
    return cached_model(
        "sam2", cfg.sam2_checkpoint, (cfg.sam2_config, str(device), cfg.sam2_image_size),
        lambda: load_sam2_predictor(cfg.sam2_checkpoint, cfg.sam2_config, device=device,
                                    image_size=cfg.sam2_image_size),
        expect_sha256=cfg.sam2_checkpoint_sha256)


def _finite_array(value: Any, shape: tuple) -> Optional[np.ndarray]:
    """``value`` as an array of finite numbers of ``shape`` (-1: any length >= 1), else None."""
    if isinstance(value, (str, bytes, dict)):
        return None
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):  # ragged lists
        return None
    if arr.dtype.kind not in "iuf" or arr.ndim != len(shape) or 0 in arr.shape:
        return None
    if any(n != -1 and n != m for n, m in zip(shape, arr.shape)):
        return None
    return arr if bool(np.isfinite(arr).all()) else None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _prompt_problem(p: Any, num_frames: Optional[int]) -> Optional[str]:
    """What is wrong with one prompt object ``p`` (see module doc), or None."""
    if not isinstance(p, dict):
        return f" must be a JSON object with 'box' or 'points', got {_short(p)}"
    if "box" not in p and "points" not in p:
        return f" needs 'box' or 'points': {_short(p)}"
    if "box" in p and _finite_array(p["box"], (4,)) is None:
        return f": 'box' must be 4 finite numbers [x0, y0, x1, y1], got {_short(p['box'])}"
    if "points" in p:
        pts = _finite_array(p["points"], (-1, 2))
        if pts is None:
            return (": 'points' must be a non-empty list of [x, y] pairs of finite numbers, "
                    f"got {_short(p['points'])}")
        labels = _finite_array(p.get("labels", [1] * len(pts)), (len(pts),))
        if labels is None or not bool(np.isin(labels, (0, 1)).all()):
            return (f": 'labels' must be {len(pts)} values 0 / 1 (one per point), "
                    f"got {_short(p.get('labels'))}")
    if "id" in p and not is_integer(p["id"]):
        return f": 'id' must be an integer, got {_short(p['id'])}"
    frame = p.get("frame", 0)
    if num_frames is None and not (is_integer(frame) and frame >= 0):
        return f": 'frame' must be an integer >= 0, got {_short(frame)}"
    if num_frames is not None and not (is_integer(frame) and 0 <= frame < num_frames):
        return (f": 'frame' must be an integer in [0, {num_frames}) (the clip's frames), "
                f"got {_short(frame)}")
    return None


def load_prompts(source: Union[None, str, Path, Prompts], num_frames: Optional[int] = None, *,
                 setting: str = "prompts") -> List[Dict[str, Any]]:
    """The prompt list (see module doc) from a JSON file or a list of dicts, validated.

    Args:
        num_frames: T of the clip the prompts are for: every ``"frame"`` must be in [0, T)
            (without it only ``>= 0`` is checked).
        setting: the name in the messages for a list (a file is named ``segment.sam2_prompts``).

    Raises:
        ConfigError: no prompts (``segment.sam2_prompts`` unset). InputError: an unreadable /
            non-JSON file, not a list, an empty list, or a malformed prompt: the message names
            the setting, the file, the prompt index and what is wrong.
    """
    if source is None:
        raise ConfigError("SAM-2 masks need prompts: set config.segment.sam2_prompts to a JSON "
                          "file of boxes / points (see geocon_torch.segment.sam2)")
    where = setting
    if isinstance(source, (str, Path)):
        where = f"segment.sam2_prompts {source}"
        source = read_json_file(source, "SAM-2 prompt file (segment.sam2_prompts)")
    if isinstance(source, (dict, str, bytes)) or not isinstance(source, Sequence):
        kind = "an object" if isinstance(source, dict) else _short(source)
        raise InputError(f"{where} must be a JSON list of prompt objects, got {kind}")
    prompts = list(source)
    if not prompts:
        raise InputError(f"{where} holds no prompt: give at least one box or points prompt")
    for k, p in enumerate(prompts):
        problem = _prompt_problem(p, num_frames)
        if problem is not None:
            raise InputError(f"{where}: prompt {k}{problem}")
    return prompts


def _collect(out: torch.Tensor, ids: List[int], frames: Any,
             before: Optional[Dict[int, int]] = None) -> None:
    """Write a SAM-2 propagation (``(frame, object ids, logits (K', 1, H, W))`` per frame) into
    ``out`` (T, K, H, W) bool on the predictor's device (no host copy per frame); with
    ``before`` only the frames before each object's first prompt."""
    for frame_idx, obj_ids, logits in frames:
        masks = (logits[:, 0] > 0).to(out.device)
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
    """(T, K, H, W) bool masks of the prompted objects tracked by SAM-2 through ``clip``.

    The prompts are validated against the clip (:func:`load_prompts` with T) before the
    predictor is loaded or run: a malformed prompt or a frame outside [0, T) is an InputError.
    """
    prompts = load_prompts(prompts if prompts is not None else cfg.sam2_prompts,
                           clip.num_frames,
                           setting="prompts" if prompts is not None else "segment.sam2_prompts")
    pred = predictor or sam2_predictor(cfg, device)
    import cv2

    t, (h, w) = clip.num_frames, clip.size
    ids = sorted({int(p.get("id", k + 1)) for k, p in enumerate(prompts)})
    dev = torch.device(getattr(pred, "device", None) or "cpu")
    out = torch.zeros(t, len(ids), h, w, dtype=torch.bool, device=dev)  # one host copy at the end
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
    return out.cpu()
