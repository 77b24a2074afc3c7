"""``score_clip``: the one place where the stages are wired together (paper Algorithm 1 A-C, E).

    video -> load_clip (io.read_clip at the working resolution; the stage device)
          -> sections.background.background_block   (``background`` + ``gate`` blocks: features,
             masks, batched RANSAC per model, IR / GE, gate, clip medians, behaviour)
          -> sections.foreground.foreground_block   (``foreground``: AdaDFRC-W2 per object)
          -> sections.epipolar.epipolar_block       (``epipolar``: WorldAtlas / GVGC trio)
          -> ClipResult

Both families are always fitted and recorded (``ir_h`` / ``ge_h_px`` / ``ir_f`` / ``ge_f_px``);
``ir`` / ``ge_px`` are those of the gated regime (U: the better-supported model by GRIC). Pixel
values are at the working resolution (``config.io.long_side``; tests use 320-480 px).

Status: ``ok``; ``not_applicable`` with a reason when the clip cannot be scored (fewer than two
frames, too little texture, too few valid pairs, a clip excluded by ``missing_pose=present_only``)
- never IR = 0; ``error`` with the reason from :func:`score_clips` when the input is bad
(:func:`score_clip` raises :class:`~geocon_torch.errors.VideoReadError` itself), and from
:func:`score_clip` when decoding lost more than ``io.max_lost_fraction`` of the frames (the
``io`` block says what was lost; a smaller loss is scored with a ``warnings`` entry, see
:mod:`geocon_torch.io.integrity`). A failure inside
an optional section (foreground, epipolar) becomes that section's ``status: "error"``.
"""
from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from ._memory import release_freed_memory
from .config import PRESET_CHOICES, GeoConConfig, load_config
from .errors import GeoConError, InputError, VideoReadError
from .features.base import resolve_backend, resolve_device
from .io import content_hash, probe_video, read_clip
from .io.calibration import pin_calibration
from .io.images import IMAGE_SUFFIXES
from .io.integrity import decode_report, decode_verdict
from .io.pairs import background_pairs
from .measures.headline import headline_score, headline_terms
from .result import ClipResult, jsonable
from .sections.background import background_block
from .sections.epipolar import epipolar_block
from .sections.epipolar_dpo import epipolar_dpo_block
from .sections.foreground import foreground_block
from .sections.progress import Progress, progress_enabled
from .types import Clip

PRESETS = PRESET_CHOICES  # the one list (config.preset)
BACKGROUND_PRESETS = ("geocon", "background", "all")
EPIPOLAR_PRESETS = ("worldatlas", "gvgc", "all")
VideoLike = Union[str, Path, torch.Tensor, Clip]
ConfigLike = Union[None, str, Path, dict, GeoConConfig]


#: io.long_side = "auto" for files and folders: the paper's 1024-px working resolution
FILE_LONG_SIDE = 1024


def working_long_side(cfg: GeoConConfig, video: VideoLike) -> Optional[int]:
    """The long side ``video`` is scored at: ``config.io.long_side`` when it is a number (or
    None: native pixels); "auto" (the default) means 1024 px for a file or folder, as in the
    paper, and native pixels for a tensor, so a training batch is scored at its own size."""
    side = cfg.io.long_side
    if side != "auto":
        return side
    return None if isinstance(video, torch.Tensor) else FILE_LONG_SIDE


def streams_frames(video: VideoLike, cfg: GeoConConfig) -> bool:
    """Whether a video file is read with frames decoded on demand (bounded memory whatever its
    length): when its container announces more than ``io.stream_min_frames`` frames after
    ``io.stride`` / ``io.max_frames`` (or announces none). Tensors, Clips, image folders and
    short videos are held in memory (one decoding pass, at most that many frames)."""
    limit = cfg.io.stream_min_frames
    if limit is None or isinstance(video, (torch.Tensor, Clip)):
        return False
    path = Path(video)
    if path.is_dir() or path.suffix.lower() in IMAGE_SUFFIXES:
        return False
    try:
        n = probe_video(path, exact=False).num_frames
    except GeoConError:
        return True  # read_clip reports the problem itself
    n = -(-int(n) // int(cfg.io.stride))
    if cfg.io.max_frames is not None:
        n = min(n, int(cfg.io.max_frames))
    return n > int(limit)


def pinned_config(config: ConfigLike, device: Union[None, str, torch.device] = None
                  ) -> GeoConConfig:
    """The config results are recorded under: ``background.calibration_hash`` set to the hash
    of the calibration file in use for the features backend on ``device``
    (:func:`~geocon_torch.io.calibration.pin_calibration`), so ``config_hash()`` keys results
    by the calibration too. What :func:`score_clip` and the bench runner record."""
    cfg = load_config(config)
    return pin_calibration(cfg, resolve_backend(cfg.features.backend, device))


def load_clip(video: VideoLike, config: ConfigLike = None,
              device: Union[None, str, torch.device] = None) -> Tuple[Clip, torch.device]:
    """The clip as :func:`score_clip` reads it and the device every stage then runs on.

    Args:
        video: a path, a (T, C, H, W) tensor or a Clip (used as is).
        config: its ``io`` section sets the working size, stride, frame cap and letterbox.
        device: None: the input's device when it is already on an accelerator, else CUDA when
            available, else the CPU.
    Returns:
        (clip at working resolution, stage device).
    """
    cfg = load_config(config)
    dev = torch.device(device) if device is not None else None
    if isinstance(video, Clip):
        clip = video
    else:
        clip = read_clip(video, long_side=working_long_side(cfg, video), stride=cfg.io.stride,
                         max_frames=cfg.io.max_frames, device=dev,
                         letterbox_threshold=cfg.io.letterbox_threshold,
                         letterbox_min_fraction=cfg.io.letterbox_min_fraction,
                         stream=streams_frames(video, cfg))
    if dev is None:  # decided once, so no stage picks a device of its own
        dev = clip.frames.device if clip.frames.device.type != "cpu" else resolve_device(None)
    return clip, dev


def _content_hash(video: VideoLike) -> Optional[str]:
    src = video.frames if isinstance(video, Clip) else video
    try:
        return content_hash(src)
    except GeoConError:
        return None


def _section(name: str, fn: Callable[[], Any], timer: Progress) -> Dict[str, Any]:
    """Run an optional section; any failure becomes its status 'error' with the reason."""
    with timer(name):
        try:
            out = fn()
            return dict(out) if isinstance(out, dict) else {"value": out, "status": "ok"}
        except Exception as exc:  # noqa: BLE001 - isolate one section's failure
            return {"status": "error", "reason": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc(limit=3)}


def _new_result(video: VideoLike, clip: Clip, cfg: GeoConConfig) -> ClipResult:
    path = None if isinstance(video, (torch.Tensor, Clip)) else str(video)
    res = ClipResult(clip=clip.name, path=path, content_hash=_content_hash(video),
                     config=cfg.to_dict(), config_hash=cfg.config_hash())
    res.backends = {"features": None, "flow": None, "masks": None, "gate": None}
    res.extra["frames"] = clip.num_frames
    res.extra["working_size"] = list(clip.size)
    res.extra["scored_at"] = {"source_size": list(clip.source_size),
                              "scale": float(clip.scale),
                              "long_side": jsonable(cfg.io.long_side)}
    return res


def _background(res: ClipResult, clip: Clip, masks: Any, poses: Any, cfg: GeoConConfig,
                dev: torch.device, timer: Progress) -> Optional[torch.Tensor]:
    """The background and gate blocks into ``res``; returns the object masks (or None)."""
    pairs = background_pairs(clip.num_frames, cfg.background.pair_stride)
    timer.note("features", f"{clip.num_frames} frames, {int(pairs.shape[0])} pairs")
    bg = background_block(clip, pairs, masks=masks, poses=poses, config=cfg, device=dev,
                          timer=timer)
    res.background, res.gate, res.regime, res.behaviour = bg.block, bg.gate, bg.regime, \
        bg.behaviour
    res.backends.update(bg.backends)
    return bg.objects


def _epipolar(res: ClipResult, video: VideoLike, clip: Clip, cfg: GeoConConfig, preset: str,
              dev: torch.device, timer: Progress) -> None:
    """The epipolar block (WorldAtlas for "all", plus GVGC in ``extra``) into ``res``."""
    which = "worldatlas" if preset == "all" else preset
    res.epipolar = _section("epipolar", lambda: epipolar_block(video, clip, cfg, which, dev),
                            timer)
    if preset == "all":
        res.extra["epipolar_gvgc"] = _section(
            "epipolar_gvgc", lambda: epipolar_block(video, clip, cfg, "gvgc", dev), timer)
    res.backends.setdefault("epipolar", which)


def _status(res: ClipResult, preset: str) -> Tuple[str, Optional[str]]:
    """The clip's status and reason: the epipolar block's for the epipolar-only presets, else
    the background block's."""
    if preset in ("worldatlas", "gvgc", "epipolar-dpo"):
        block = res.epipolar_dpo if preset == "epipolar-dpo" else res.epipolar
        status, reason = block.get("status", "ok"), block.get("reason")
        if status == "error":
            reason = f"{'epipolar_dpo' if preset == 'epipolar-dpo' else 'epipolar'} section " \
                     f"failed: {reason}"
    else:
        status, reason = res.background.get("status", "ok"), res.background.get("reason")
    return (status if status in ("ok", "not_applicable", "error") else "ok"), reason


def score_clip(video: VideoLike, *, masks: Any = None, poses: Any = None,
               config: ConfigLike = None, device: Union[None, str, torch.device] = None,
               preset: Optional[str] = None, progress: Optional[bool] = None) -> ClipResult:
    """Score one clip (paper Algorithm 1 A-C, E; plus foreground / epipolar per ``preset``).

    Args:
        video: a path (video file, gif, image folder), a (T, C, H, W) tensor (uint8 or float in
            [0, 1], any device), or a :class:`~geocon_torch.types.Clip`.
        masks: object masks: a PNG folder / .npz path or a (T, H, W) / (T, K, H, W) tensor
            (see :mod:`geocon_torch.segment.files`); None -> ``config.segment.method`` (auto:
            SAM-2 when a checkpoint is configured, else weight-free motion segmentation).
        poses: a pose log (JSON / .npz path, (4, 4) or (P, 4, 4) tensor; see
            :mod:`geocon_torch.gate.poses`) for the translation gate; None -> DUSt3R when a
            checkpoint is configured, else the weight-free parallax gate.
        config: GeoConConfig, dict, JSON path or None (paper defaults).
        device: where every stage runs (features, fits, masks, flow, epipolar). Default: the
            input's device when it is already on an accelerator, else CUDA when available,
            else the CPU.
        preset: "geocon" (background + foreground), "background" (background only: the
            fastest), "worldatlas" / "gvgc" (epipolar trio only), "epipolar-dpo" (the
            Epipolar-DPO protocol of Kupyn et al. 2025 only: block ``epipolar_dpo``, frames at
            their source resolution) or "all"; default ``config.preset``.
        progress: stage names, frame / pair counts and stage times on stderr (see
            :mod:`geocon_torch.sections.progress`); None: on when stderr is a terminal.

    Returns:
        ClipResult (``to_dict()`` is the JSON schema of :mod:`geocon_torch.result`).
    Raises:
        VideoReadError: the video cannot be read (use :func:`score_clips` to get an ``error``
            result instead); GeoConError for an invalid config / masks / poses argument.

    A static camera on a static scene (a grounded synthetic clip, 6 frames of 160 x 120 as a
    (T, 3, H, W) uint8 tensor): the weight-free gate picks H, one homography explains it all.

    >>> from geocon_torch.synth import grounded_clip
    >>> frames = grounded_clip("C1", num_frames=6, size=(120, 160)).frames
    >>> res = score_clip(frames, preset="background", device="cpu")
    >>> res.status, res.regime, res.gate["method"], res.behaviour
    ('ok', 'H', 'parallax', 'Static')
    >>> res.ir, res.background["pass"], res.background["pairs"]
    (1.0, True, 5)
    """
    cfg = load_config(config)
    preset = preset or cfg.preset
    if preset not in PRESETS:
        raise InputError(f"preset must be one of {PRESETS}, got {preset!r}")
    name = Path(str(video)).stem if isinstance(video, (str, Path)) else "clip"
    timer, t_start = Progress(name, progress_enabled(progress)), time.perf_counter()
    with timer("read"):
        clip, dev = load_clip(video, cfg, device)
    timer.name = clip.name
    timer.say(f"{clip.num_frames} frames of {clip.size[1]} x {clip.size[0]} px, preset {preset}")
    cfg = pinned_config(cfg, dev)
    res = _new_result(video, clip, cfg)
    if _decode_ok(res, clip, cfg, timer):
        _score(res, video, clip, masks, poses, cfg, preset, dev, timer)
        res.status, res.reason = _status(res, preset)
        scored = res.to_dict()
        res.score, res.extra["score_terms"] = headline_score(scored), headline_terms(scored)
    timer.times["total"] = time.perf_counter() - t_start
    res.timing_s = {k: round(v, 4) for k, v in timer.times.items()}
    res.background = jsonable(res.background)
    return res


def _decode_ok(res: ClipResult, clip: Clip, cfg: GeoConConfig, timer: Progress) -> bool:
    """Record what decoding lost (``res.io``, and ``res.warnings`` for a small loss); False
    (``res`` is then an error with the reason, not scored) when more than
    ``io.max_lost_fraction`` of the frames were lost."""
    res.io = decode_report(clip.meta or {})
    reason, warnings = decode_verdict(res.io, cfg.io.max_lost_fraction)
    res.warnings.extend(warnings)
    for text in warnings:
        timer.say(f"warning: {text}")
    if reason is None:
        return True
    res.status, res.reason = "error", reason
    timer.say(f"error: {reason}")
    return False


def _score(res: ClipResult, video: VideoLike, clip: Clip, masks: Any, poses: Any,
           cfg: GeoConConfig, preset: str, dev: torch.device, timer: Progress) -> None:
    """The blocks of ``preset`` into ``res`` (background + gate, foreground, epipolar)."""
    if preset in BACKGROUND_PRESETS:
        objects = _background(res, clip, masks, poses, cfg, dev, timer)
        release_freed_memory(collect=True)  # the background block's tensors are gone
        if preset in ("geocon", "all"):
            res.foreground = _section(
                "foreground", lambda: foreground_block(clip, objects, cfg, dev, timer), timer)
            res.backends["flow"] = res.foreground.get("flow")
    if preset in EPIPOLAR_PRESETS:
        _epipolar(res, video, clip, cfg, preset, dev, timer)
    if preset == "epipolar-dpo":
        res.epipolar_dpo = _section("epipolar_dpo",
                                    lambda: epipolar_dpo_block(video, clip, cfg, dev), timer)
        res.backends["epipolar"] = "epipolar-dpo"


def score_clips(videos: Sequence[VideoLike], *, masks: Optional[Sequence[Any]] = None,
                poses: Optional[Sequence[Any]] = None,
                config: Union[None, str, Path, dict, GeoConConfig] = None,
                device: Union[None, str, torch.device] = None,
                preset: Optional[str] = None, progress: Optional[bool] = False
                ) -> List[ClipResult]:
    """Score many clips; never raises for one bad clip (its result has ``status: "error"``).

    ``videos`` may also be a (B, T, C, H, W) tensor; ``masks`` / ``poses`` are per-clip lists
    (or None). Each clip is scored exactly as by :func:`score_clip`; ``progress`` is passed on
    (default False: a batch API, e.g. inside metrics and rewards; None: on for a terminal).
    """
    cfg = load_config(config)
    if isinstance(videos, torch.Tensor):
        if videos.ndim != 5:
            raise VideoReadError(f"a batch of clips must be (B, T, C, H, W), got "
                                 f"{tuple(videos.shape)}")
        videos = list(videos.unbind(0))
    n = len(videos)
    masks = list(masks) if masks is not None else [None] * n
    poses = list(poses) if poses is not None else [None] * n
    if len(masks) != n or len(poses) != n:
        raise InputError(f"masks / poses lists must have one entry per clip ({n})")
    out: List[ClipResult] = []
    for k, (video, m, p) in enumerate(zip(videos, masks, poses)):  # one clip at a time
        name = Path(str(video)).stem if isinstance(video, (str, Path)) else f"clip{k}"
        try:
            out.append(score_clip(video, masks=m, poses=p, config=cfg, device=device,
                                  preset=preset, progress=progress))
        except Exception as exc:  # noqa: BLE001 - a bad clip must not stop the batch
            out.append(ClipResult.failed(
                name, "error", f"{type(exc).__name__}: {exc}", cfg,
                path=str(video) if isinstance(video, (str, Path)) else None))
    return out
