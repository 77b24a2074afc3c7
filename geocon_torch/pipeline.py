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
an optional section (foreground, epipolar) becomes that section's ``status: "error"``. A
configuration problem of an optional model-backed stage (learned features, DUSt3R gate, SAM-2
masks, RAFT flow: a missing / corrupt checkpoint, a package that is not importable, a missing
required setting) is no clip's failure: :func:`score_clip` / :func:`score_clips` raise it
before any clip is read (:func:`preflight_models`, :mod:`geocon_torch.sections.stage_models`).
"""
from __future__ import annotations

import os
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple, Union

import torch

from ._checks import check_device, check_integer
from ._precision import autocast_off, compile_failure, eager_entry
from ._memory import release_freed_memory
from .config import ConfigLike, GeoConConfig, load_config
from .errors import ClipTensorError, GeoConError, InputError, VideoReadError
from .features.base import resolve_backend, resolve_device
from .flow.factory import resolve_flow
from .io import clips_from_tensors, content_hash, probe_video, read_clip
from .io.hashing import tensor_content_hashes
from .io.calibration import pin_calibration
from .io.pinned_files import pin_files
from .io.images import IMAGE_SUFFIXES, image_files
from .io.integrity import decode_report, decode_verdict
from ._numeric_env import numeric_env
from .io.pairs import background_pairs, held_of
from .io.resize import working_size
from .measures.headline import headline_score, headline_terms
from .presets import PRESET_NAMES, SECTION_NAMES, Preset, get_preset
from .result import ClipResult, jsonable
from .sections.background import BackgroundBlock, background_block, score_backgrounds
from .sections.epipolar import epipolar_blocks, resolve_implementation
from .sections.epipolar_dpo import epipolar_dpo_block
from .sections.foreground import core_erosion_px, score_foregrounds
from .sections.progress import Progress, progress_enabled
from .sections.stage_models import files_read, preflight
from .types import Clip

PRESETS = PRESET_NAMES  # the names of the preset table (geocon_torch.presets.PRESETS)
VideoLike = Union[str, Path, torch.Tensor, Clip]


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
    """Whether a video file or a folder of images is read with frames decoded on demand
    (bounded memory whatever its length): when it holds more than ``io.stream_min_frames``
    frames after ``io.stride`` / ``io.max_frames`` (a video: as its container announces them,
    or announcing none; a folder: its image files, counted without reading them). Tensors,
    Clips, single image files and short clips are held in memory (one decoding pass, at most
    that many frames: a video whose container under-announces its frames is streamed once its
    read would hold more, :func:`load_clip`)."""
    limit = cfg.io.stream_min_frames
    if limit is None or not isinstance(video, (str, os.PathLike)):
        return False  # tensors and Clips; anything else: read_clip says what it cannot read
    path = Path(video)
    if path.is_dir():
        try:
            n = len(image_files(path))
        except OSError:
            return False  # an unreadable folder: read_clip reports the problem itself
    elif path.suffix.lower() in IMAGE_SUFFIXES:
        return False  # one image file: one frame
    else:
        try:
            n = probe_video(path, exact=False).num_frames
        except GeoConError:
            return True  # read_clip reports the problem itself
    return _kept_frames(int(n), cfg) > int(limit)


def _kept_frames(n: int, cfg: GeoConConfig) -> int:
    """How many of ``n`` source frames ``cfg.io.stride`` / ``cfg.io.max_frames`` keep."""
    n = -(-int(n) // int(cfg.io.stride))
    return n if cfg.io.max_frames is None else min(n, int(cfg.io.max_frames))


def pinned_config(config: ConfigLike, device: Union[None, str, torch.device] = None
                  ) -> GeoConConfig:
    """The config results are recorded under: every "auto" whose meaning depends on the
    machine replaced by what it stands for there, since they give other numbers and one hash
    must not name both (``features.backend``: opencv-sift on the CPU, torch-sift on CUDA;
    ``epipolar.implementation``: opencv on the CPU, torch on CUDA, and the torch path's
    ``epipolar.features`` likewise; ``foreground.flow``: RAFT-small when its weights are
    found, else torch-lk), and ``background.calibration_hash`` set to the hash of the
    calibration file in use for the features backend
    (:func:`~geocon_torch.io.calibration.pin_calibration`), and the ``<path>_sha256`` of every
    weights / prompt file the preset's stages read to its content hash (the RAFT file of the
    torch hub cache included; a file no stage reads is not hashed:
    :func:`~geocon_torch.sections.stage_models.files_read`,
    :func:`~geocon_torch.io.pinned_files.pin_files`), so ``config_hash()`` keys results by
    them too. What :func:`score_clip` and the bench runner record."""
    cfg = load_config(config)
    dev = resolve_device(device)
    backend = resolve_backend(cfg.features.backend, dev)
    impl = resolve_implementation(None, cfg.epipolar, dev)
    epi = {"implementation": impl}
    if impl == "torch":
        epi["features"] = resolve_backend(cfg.epipolar.features, dev)
    pins = {"features": {"backend": backend}, "epipolar": epi,
            "foreground": {"flow": resolve_flow(cfg.foreground.flow,
                                                cfg.foreground.flow_checkpoint)}}
    changed = any(getattr(getattr(cfg, sec), k) != v for sec, kv in pins.items()
                  for k, v in kv.items())
    cfg = cfg.replace(**pins) if changed else cfg
    return pin_calibration(pin_files(cfg, files_read(cfg, get_preset(cfg.preset).sections)),
                           backend)


def read_options(cfg: GeoConConfig, video: Any) -> Dict[str, Any]:
    """The reading arguments of ``cfg.io`` for ``video`` (:func:`~geocon_torch.io.read_clip`'s
    ``long_side``, ``stride``, ``max_frames`` and letterbox rule): what every scorer of a clip
    reads it with."""
    return {"long_side": working_long_side(cfg, video), "stride": cfg.io.stride,
            "max_frames": cfg.io.max_frames, "letterbox_threshold": cfg.io.letterbox_threshold,
            "letterbox_min_fraction": cfg.io.letterbox_min_fraction, "lens": cfg.io.lens}


def motion_every(cfg: GeoConConfig) -> Optional[int]:
    """``read_clip``'s ``motion_every`` for ``cfg``'s preset: the Epipolar-DPO sampling rate
    when the preset runs the ``epipolar_dpo`` section (its frames 0, 15, 30, ... get their own
    motion statistic, ``result["motion"]["epipolar_dpo"]``), else None."""
    if "epipolar_dpo" in get_preset(cfg.preset).sections:
        return int(cfg.epipolar_dpo.sampling_rate)
    return None


def load_clip(video: VideoLike, config: ConfigLike = None,
              device: Union[None, str, torch.device] = None, name: Optional[str] = None
              ) -> Tuple[Clip, torch.device]:
    """The clip as :func:`score_clip` reads it and the device every stage then runs on.

    Args:
        video: a path, a (T, C, H, W) tensor or a Clip (used as is).
        config: its ``io`` section sets the working size, stride, frame cap and letterbox.
        device: None: the input's device when it is already on an accelerator, else CUDA when
            available, else the CPU.
        name: the clip's name when it is read (None: :func:`~geocon_torch.io.read_clip`'s
            default; a Clip keeps its own).
    Returns:
        (clip at working resolution, stage device).
    """
    cfg = load_config(config)
    dev = torch.device(device) if device is not None else None
    if isinstance(video, Clip):
        clip = video
    else:
        clip = read_clip(video, device=dev, stream=streams_frames(video, cfg), name=name,
                         motion_every=motion_every(cfg), stream_limit=cfg.io.stream_min_frames,
                         **read_options(cfg, video))
    return clip, stage_device(clip, device)  # decided once: no stage picks a device of its own


def stage_device(video: VideoLike, device: Union[None, str, torch.device] = None
                 ) -> torch.device:
    """The device every stage of ``video`` runs on (:func:`load_clip`'s rule, known before the
    clip is read): ``device`` when given, else the input's device when it is a tensor or Clip
    already on an accelerator, else CUDA when available, else the CPU."""
    if device is not None:
        return torch.device(device)
    held = video.frames if isinstance(video, Clip) else video  # a Clip's may be streamed
    where = held.device if isinstance(video, (Clip, torch.Tensor)) else None
    if where is not None and where.type != "cpu":
        return where
    return resolve_device(None)


def preflight_models(cfg: GeoConConfig, videos: Sequence[VideoLike], masks: Sequence[Any],
                     poses: Sequence[Any], device: Union[None, str, torch.device] = None
                     ) -> None:
    """Build the models of the optional model-backed stages that scoring ``videos`` (with their
    ``masks`` / ``poses``, None where not given) under ``cfg`` runs, before any clip is read
    (:func:`~geocon_torch.sections.stage_models.preflight`: each once per stage device, through
    the caches the stages use), so a misconfigured run raises at once.

    Raises:
        CheckpointError, OptionalDependencyError, ConfigError, InputError: as
            :func:`~geocon_torch.sections.stage_models.preflight`.
    """
    preflight(cfg, get_preset(cfg.preset).sections,
              [(m is not None, p is not None, stage_device(v, device))
               for v, m, p in zip(videos, masks, poses)])


def _content_hash(video: VideoLike, known: Optional[str] = None) -> Optional[str]:
    if known is not None:
        return known
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
            if compile_failure(exc):  # torch.compile's, not a clip's
                raise
            return _error_block(exc)


def _new_result(video: VideoLike, clip: Clip, cfg: GeoConConfig,
                digest: Optional[str] = None) -> ClipResult:
    path = None if isinstance(video, (torch.Tensor, Clip)) else str(video)
    res = ClipResult(clip=clip.name, path=path, content_hash=_content_hash(video, digest),
                     config=cfg.to_dict(), config_hash=cfg.config_hash())
    res.backends = {"features": None, "flow": None, "masks": None, "gate": None}
    res.extra["frames"] = clip.num_frames
    res.extra["working_size"] = list(clip.size)
    res.extra["scored_at"] = {"source_size": list(clip.source_size),
                              "scale": float(clip.scale),
                              "long_side": jsonable(cfg.io.long_side)}
    every = None if isinstance(video, Clip) else motion_every(cfg)  # a Clip: its positions
    res.extra["motion"] = result_motion(clip.meta or {}, every)
    res.extra["numeric_env"] = numeric_env()  # what decides the last bits (_numeric_env)
    return res


def held_warning(held: int, frames: int) -> str:
    """The ``warnings`` entry of a clip with ``held`` of its ``frames`` frames held
    (:mod:`geocon_torch.io.sampling`)."""
    return (f"{held} of {frames} frames repeat the previous frame (held frames): pairs of two "
            f"identical frames are not scored")


def result_motion(meta: Dict[str, Any], every: Optional[int]) -> Optional[Dict[str, Any]]:
    """``result["motion"]`` from the reader's ``meta["motion"]``
    (:mod:`geocon_torch.io.sampling`): ``{"max_mad", "pairs", "frozen"}`` of the frames read
    (native resolution), ``"held_frames"`` (how many frames repeat the one before them; only
    when some do and the clip is not frozen: their pairs were not scored), and for a preset
    with the ``epipolar_dpo`` section (``every``: its sampling rate) ``"epipolar_dpo"``: the
    same of frames 0, every, 2 every, ... (of the whole source without ``io.max_frames``,
    whatever ``io.stride``; with it, up to the last frame read), when the reader measured
    them at that rate (not for a Clip input, which that section samples by its own positions).
    None when the reader recorded nothing (a Clip
    not made by ``read_clip``)."""
    motion = meta.get("motion")
    if not isinstance(motion, dict):
        return None
    out = {k: motion[k] for k in ("max_mad", "pairs", "frozen")}
    if isinstance(motion.get("held"), list) and motion["held"]:
        out["held_frames"] = len(motion["held"])
    sampled = motion.get("sampled")
    if every is not None and isinstance(sampled, dict) and sampled.get("every") == every:
        out["epipolar_dpo"] = dict(sampled)
    return out


def _background(res: ClipResult, clip: Clip, masks: Any, poses: Any, cfg: GeoConConfig,
                dev: torch.device, timer: Progress) -> Optional[torch.Tensor]:
    """The background and gate blocks into ``res``; returns the object masks (or None).
    ``masks`` may be the clip's BackgroundBlock already scored with its batch (score_clips)."""
    if isinstance(masks, BackgroundBlock):
        bg = masks
    else:
        pairs = background_pairs(clip.num_frames, cfg.background.pair_stride, held_of(clip))
        timer.note("features", f"{clip.num_frames} frames, {int(pairs.shape[0])} pairs")
        bg = background_block(clip, pairs, masks=masks, poses=poses, config=cfg, device=dev,
                              timer=timer)
    res.background, res.gate, res.regime, res.behaviour = bg.block, bg.gate, bg.regime, \
        bg.behaviour
    res.backends.update(bg.backends)
    return bg.objects


def _status(res: ClipResult, preset: str) -> Tuple[str, Optional[str]]:
    """The clip's status and reason: those of the preset's ``status_from`` block (a failed
    optional section says so in the reason)."""
    block_name = get_preset(preset).status_from
    block = getattr(res, block_name)
    status, reason = block.get("status", "ok"), block.get("reason")
    if status == "error" and block_name != "background":
        reason = f"{block_name} section failed: {reason}"
    return (status if status in ("ok", "not_applicable", "error") else "ok"), reason


@eager_entry
@autocast_off
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
        preset: a name of the preset table (:data:`geocon_torch.presets.PRESETS`): "geocon"
            (background + foreground), "background" (background only: the fastest),
            "worldatlas" / "gvgc" (epipolar trio only), "epipolar-dpo" (the Epipolar-DPO
            protocol of Kupyn et al. 2025 only: block ``epipolar_dpo``, frames at their source
            resolution) or "all"; default ``config.preset``. The result's config records it
            (``config.preset``, part of ``config_hash``).
        progress: stage names, frame / pair counts and stage times on stderr (see
            :mod:`geocon_torch.sections.progress`); None: on when stderr is a terminal.

    Returns:
        ClipResult (``to_dict()`` is the JSON schema of :mod:`geocon_torch.result`).
    Raises:
        VideoReadError: the video cannot be read (use :func:`score_clips` to get an ``error``
            result instead); ClipTensorError for a (B, T, C, H, W) batch (:func:`score_clips`
            scores one); GeoConError for an invalid config / masks / poses argument (a missing
            or malformed masks / poses source too, whatever the clip's texture).
        InputError: ``device`` is no torch device or one this machine lacks ("gpu", "cuda"
            without a GPU; :func:`~geocon_torch._checks.check_device`), before the clip is read.
        CheckpointError, OptionalDependencyError, ConfigError: an optional model-backed stage
            the clip runs (a learned features backend, the DUSt3R gate, SAM-2 masks, RAFT flow)
            cannot be built: a missing / unreadable / corrupt checkpoint, a package or checkout
            that is not importable, a missing required setting (``segment.sam2_prompts``,
            ``segment.sam2_config``); raised before the clip is read
            (:func:`preflight_models`). A malformed SAM-2 prompt file is an InputError then;
            a prompt frame outside the clip is an InputError of the clip.

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
    device = check_device(device)
    if isinstance(video, torch.Tensor) and video.ndim == 5:
        raise ClipTensorError(f"score_clip takes one clip (T, C, H, W); got a batch "
                              f"{tuple(video.shape)}: use score_clips for a batch (or video[0])")
    cfg = scoring_config(config, preset)
    preflight_models(cfg, [video], [masks], [poses], device)
    return _complete(_prepare(video, masks, poses, cfg, device, None, progress))


@dataclass
class _Item:
    """One clip read and checked, waiting for its blocks (:func:`score_clip` and the batches
    of :func:`score_clips`)."""

    video: VideoLike
    masks: Any
    poses: Any
    clip: Clip
    dev: torch.device
    cfg: GeoConConfig
    preset: str
    res: ClipResult
    timer: Progress
    t_start: float
    decoded: bool


def _prepare(video: VideoLike, masks: Any, poses: Any, config: ConfigLike,
             device: Union[None, str, torch.device], preset: Optional[str],
             progress: Optional[bool], name: Optional[str] = None,
             clip: Optional[Clip] = None, digest: Optional[str] = None) -> _Item:
    """Read ``video`` (:func:`load_clip`; ``clip``: already read, :func:`_read_tensors`), pin
    the config, start its result (``digest``: its content hash when already known) and record
    what decoding lost; raises as
    :func:`score_clip`."""
    cfg = scoring_config(config, preset)
    preset = cfg.preset
    # score_clips' clip{k}: a tensor is read under that name (its warnings name it too)
    given = name if isinstance(video, torch.Tensor) else None
    if name is None:
        name = Path(str(video)).stem if isinstance(video, (str, Path)) else "clip"
    timer, t_start = Progress(name, progress_enabled(progress)), time.perf_counter()
    with timer("read"):
        clip, dev = load_clip(video if clip is None else clip, cfg, device, name=given)
    timer.name = clip.name
    timer.say(f"{clip.num_frames} frames of {clip.size[1]} x {clip.size[0]} px, preset {preset}")
    cfg = pinned_config(cfg, dev)
    res = _new_result(video, clip, cfg, digest)
    decoded = _decode_ok(res, clip, cfg, timer)
    held = held_of(clip)
    if held:  # some, not all (a frozen clip records none): their pairs are dropped
        res.warnings.append(held_warning(len(held), clip.num_frames))
        timer.say(f"warning: {res.warnings[-1]}")
    return _Item(video, masks, poses, clip, dev, cfg, preset, res, timer, t_start, decoded)


def _complete(item: _Item, background: Optional[BackgroundBlock] = None) -> ClipResult:
    """The blocks of the item's preset (``background``: its background block, already scored
    with its batch), status, timings: :func:`_complete_all` of one clip (raises as
    :func:`score_clip`)."""
    got = _complete_all([item], [background])[0]
    if isinstance(got, BaseException):
        raise got
    return got


def _complete_all(items: Sequence[_Item], backgrounds: Sequence[Optional[BackgroundBlock]]
                  ) -> List[Union[ClipResult, BaseException]]:
    """:func:`_complete` of several clips: every section of their presets runs once over all
    of them (:func:`_score_jobs`); a clip whose background step raised gets its exception."""
    jobs = [_Job(it.res, it.video, it.clip, it.masks if bg is None else bg, it.poses, it.cfg,
                 get_preset(it.preset), it.dev, it.timer, masks_given=it.masks is not None)
            for it, bg in zip(items, backgrounds) if it.decoded]
    _score_jobs(jobs)
    failed = {id(job.res): job.failed for job in jobs if job.failed is not None}
    out: List[Union[ClipResult, BaseException]] = []
    for item in items:
        res, timer = item.res, item.timer
        if id(res) in failed:
            out.append(failed[id(res)])
            continue
        if item.decoded:
            res.status, res.reason = _status(res, item.preset)
            scored = res.to_dict()
            res.score, res.extra["score_terms"] = headline_score(scored), headline_terms(scored)
        timer.times["total"] = time.perf_counter() - item.t_start
        res.timing_s = {k: round(v, 4) for k, v in timer.times.items()}
        res.background = jsonable(res.background)
        out.append(res)
    return out


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


@dataclass
class _Job:
    """What the section steps of one clip read and fill (``failed``: the exception its
    background step raised; its other sections are then skipped)."""

    res: ClipResult
    video: VideoLike
    clip: Clip
    masks: Any
    poses: Any
    cfg: GeoConConfig
    spec: Preset
    dev: torch.device
    timer: Progress
    objects: Optional[torch.Tensor] = None
    failed: Optional[BaseException] = None
    masks_given: bool = False  # the caller gave object masks (``masks`` may be the bg block)


#: frames x pixels above which a finished block runs the cycle collector (~ 100 frames at 720p)
COLLECT_PIXELS = 10**8


def _large_clip(clip: Clip) -> bool:
    """True when the clip's (T, 3, H, W) frames hold more than :data:`COLLECT_PIXELS` pixels."""
    t, _, h, w = clip.frames.shape
    return t * h * w > COLLECT_PIXELS


def _step_background(jobs: Sequence[_Job]) -> None:
    """Per clip: its block already scored with the batch (``score_backgrounds``) goes into the
    result; a clip scored alone (``score_clip``) runs ``background_block`` here."""
    for job in jobs:  # result assembly (the batch's block was computed in one program)
        try:
            job.objects = _background(job.res, job.clip, job.masks, job.poses, job.cfg,
                                      job.dev, job.timer)
        except Exception as exc:  # noqa: BLE001 - the clip fails, the batch goes on
            if compile_failure(exc):  # torch.compile's, not a clip's
                raise
            job.failed = exc
            continue
        # the background block's tensors are gone; the cycle collector (~0.1 s with torch
        # loaded) only pays on clips whose temporaries are large enough to matter for the RSS
        release_freed_memory(collect=_large_clip(job.clip))


def _error_block(exc: BaseException) -> Dict[str, Any]:
    """An optional section's block for a failure: status 'error' with the reason."""
    return {"status": "error", "reason": f"{type(exc).__name__}: {exc}",
            "traceback": "".join(traceback.format_exception(type(exc), exc, exc.__traceback__,
                                                            limit=3))}


def _batched_section(name: str, jobs: Sequence[_Job],
                     fn: Callable[[Sequence[_Job]], List[Any]]) -> List[Dict[str, Any]]:
    """Run an optional section over ``jobs`` at once: ``fn(jobs)`` returns one block (or
    exception) per job. Each failure becomes that clip's status 'error' with the reason (the
    others keep their blocks); the batch's time is every clip's stage time."""
    with jobs[0].timer(name):
        t0 = time.perf_counter()
        try:
            got = fn(jobs)
        except Exception as exc:  # noqa: BLE001 - a failure common to the whole batch
            if compile_failure(exc):  # torch.compile's, not a clip's
                raise
            got = [exc] * len(jobs)
        dt = time.perf_counter() - t0
    for job in jobs[1:]:
        job.timer.times[name] = job.timer.times.get(name, 0.0) + dt
    return [_error_block(g) if isinstance(g, BaseException) else
            (dict(g) if isinstance(g, dict) else {"value": g, "status": "ok"}) for g in got]


def _grouped_section(name: str, jobs: Sequence[_Job],
                     fn: Callable[[Sequence[_Job]], List[Any]],
                     put: Callable[[_Job, Dict[str, Any]], None]) -> None:
    """:func:`_batched_section` once per stage device (one batched call per device), each
    clip's block handed to ``put(job, block)``."""
    groups: Dict[str, List[_Job]] = {}
    for job in jobs:
        groups.setdefault(str(job.dev), []).append(job)
    for group in groups.values():
        for job, block in zip(group, _batched_section(name, group, fn)):
            put(job, block)


def _put_foreground(job: _Job, block: Dict[str, Any]) -> None:
    if job.objects is None and job.masks_given and block.get("status") == "not_applicable":
        # given masks are read by the background's segmentation, which never ran
        bg = job.res.background or {}
        block["reason"] = (f"no object masks: the masks given were not read, the background "
                           f"stopped first ({bg.get('reason') or bg.get('status')})")
    job.res.foreground = block
    job.res.backends["flow"] = block.get("flow")


def _core_erosion(job: _Job) -> int:
    """Working px by which the foreground erodes the clip's objects to their cores: the seed
    squares' bleed of the weight-free motion segmentation (:func:`core_erosion_px`); 0 for
    given masks and SAM-2's, which are never eroded."""
    return core_erosion_px(job.cfg.segment) if job.res.backends.get("masks") == "motion" else 0


def _step_foreground(jobs: Sequence[_Job]) -> None:
    _grouped_section("foreground", jobs, lambda js: score_foregrounds(
        [j.clip for j in js], [j.objects for j in js], js[0].cfg, js[0].dev,
        [j.timer for j in js], core_erosion=[_core_erosion(j) for j in js]), _put_foreground)


def _epipolar_blocks(jobs: Sequence[_Job], protocol: str) -> List[Any]:
    return epipolar_blocks([j.video for j in jobs], [j.clip for j in jobs], jobs[0].cfg,
                           protocol, jobs[0].dev)


def _put_epipolar(job: _Job, block: Dict[str, Any]) -> None:
    job.res.epipolar = block
    job.res.backends.setdefault("epipolar", job.spec.epipolar_protocol)


def _step_epipolar(jobs: Sequence[_Job]) -> None:
    _grouped_section("epipolar", jobs, lambda js: _epipolar_blocks(
        js, js[0].spec.epipolar_protocol), _put_epipolar)


def _put_epipolar_gvgc(job: _Job, block: Dict[str, Any]) -> None:
    job.res.extra["epipolar_gvgc"] = block


def _step_epipolar_gvgc(jobs: Sequence[_Job]) -> None:
    _grouped_section("epipolar_gvgc", jobs, lambda js: _epipolar_blocks(js, "gvgc"),
                     _put_epipolar_gvgc)


def _step_epipolar_dpo(jobs: Sequence[_Job]) -> None:
    for job in jobs:  # per clip: the protocol re-reads its frames at source resolution
        job.res.epipolar_dpo = _section("epipolar_dpo", lambda j=job: epipolar_dpo_block(
            j.video, j.clip, j.cfg, j.dev), job.timer)
        job.res.backends["epipolar"] = "epipolar-dpo"


#: section name of the preset table -> the step that fills its block for a list of clips
SECTION_STEPS: Dict[str, Callable[[Sequence[_Job]], None]] = {
    "background": _step_background, "foreground": _step_foreground,
    "epipolar": _step_epipolar, "epipolar_gvgc": _step_epipolar_gvgc,
    "epipolar_dpo": _step_epipolar_dpo}


def _score_jobs(jobs: Sequence[_Job]) -> None:
    """The blocks of every job's preset into its result: section by section (in the preset
    table's order), each section one step over all the clips that run it. The clips of one
    step share their config (``score_clips`` scores a call with one config and preset)."""
    for name in SECTION_NAMES:
        todo = [j for j in jobs if j.failed is None and name in j.spec.sections]
        if todo:
            SECTION_STEPS[name](todo)


def scoring_config(config: ConfigLike, preset: Optional[str] = None) -> GeoConConfig:
    """The config a clip is scored and recorded under: ``config`` with ``preset`` chosen
    (:meth:`GeoConConfig.with_preset`) when one is given, else as it is."""
    cfg = load_config(config)
    return cfg.with_preset(preset) if preset is not None else cfg


#: memory budget of one batch of :func:`score_clips`: the decoded frames of the clips scored
#: together (T x H x W x 3 bytes at working resolution, summed); a longer clip is scored alone.
#: The batch's working set (grey frames, keypoints, matches, fits, masks) comes on top, partly
#: per frame: ~4.4 MB per MB of frames at 768 x 1024, 5-34 MB per MB at 120 x 160 (~0.6 MB per
#: frame; README "Memory knobs"), so lower it where host memory is tight, above all for small
#: clips: batching saves per-clip overhead on small clips, not on large ones
BATCH_BYTES = 768 * 2 ** 20


@eager_entry
@autocast_off
def score_clips(videos: Union[torch.Tensor, Sequence[VideoLike]], *,
                masks: Optional[Sequence[Any]] = None, poses: Optional[Sequence[Any]] = None,
                config: Union[None, str, Path, dict, GeoConConfig] = None,
                device: Union[None, str, torch.device] = None,
                preset: Optional[str] = None, progress: Optional[bool] = False,
                batch_bytes: Optional[int] = None,
                return_exceptions: bool = False) -> List[Union[ClipResult, Exception]]:
    """Score many clips as batches; never raises for one bad clip (its result has
    ``status: "error"``, or with ``return_exceptions=True`` its slot holds the exception that
    :func:`score_clip` would have raised for it, traceback included: the bench runner records
    it exactly as for a clip scored alone).

    Clips are read in order and gathered into batches of at most ``batch_bytes``
    decoded frames (default :data:`BATCH_BYTES`; a streamed file is a batch of its own); the
    background block of a batch is one tensor program
    (:func:`~geocon_torch.sections.background.score_backgrounds`: features, one RANSAC call
    per model over the rows of all clips, gate, summaries). Each clip's result equals
    :func:`score_clip`'s (bit for bit on the CPU, timings aside: a batched stage's time is the
    batch's). A batch-wide stage that raises (a ``cv2.error`` on one clip's frame, an
    out-of-memory error of a merged call) is retried clip by clip, so only the clip that raises
    alone gets its error (``score_backgrounds``).

    Args:
        videos: a list of clips (paths, (T, C, H, W) uint8 / float tensors in [0, 1], Clips),
            or a (B, T, C, H, W) tensor.
        masks, poses: per-clip lists (entries as :func:`score_clip` takes them; None for a
            clip without), or None. A single path (str / bytes / Path) is refused: pass
            ``[path]`` for one clip.
        config, device, preset: as :func:`score_clip`.
        progress: passed on (default False: a batch API, e.g. inside metrics and rewards;
            None: on for a terminal).
        batch_bytes: decoded bytes of frames per batch (None: :data:`BATCH_BYTES`).
        return_exceptions: a clip that fails gets the exception in its slot instead of an
            error result.

    Returns:
        one :class:`ClipResult` per clip, in order (an exception in a failed clip's slot with
        ``return_exceptions``).

    Raises:
        ConfigError: the config cannot be pinned (e.g. a missing calibration file): a bad
            config is no bad clip, so it is raised before any clip is read.
        CheckpointError, OptionalDependencyError, ConfigError, InputError: an optional
            model-backed stage the clips run cannot be built, as :func:`score_clip` raises it,
            before any clip is read (:func:`preflight_models`: each model is built once, then
            the stages use it); what depends on one clip (an undecodable clip, a SAM-2 prompt
            frame outside it) stays that clip's ``error``. The same errors raised later by a
            batch-wide background stage are raised too (a config problem is every clip's).
        InputError: ``device`` is no torch device or one this machine lacks (as
            :func:`score_clip`), ``batch_bytes`` is not an integer >= 1 (ArgumentTypeError for
            a non-integer), ``masks`` / ``poses`` is a single path, no list, or a list whose
            length is not the number of clips, once for the call before any clip is read.
    """
    device = check_device(device)
    budget = BATCH_BYTES if batch_bytes is None else check_integer(batch_bytes, "batch_bytes", 1)
    cfg = scoring_config(config, preset)
    failed_cfg = pinned_config(cfg, device)  # what a failed clip records (the same hash)
    if isinstance(videos, torch.Tensor):
        if videos.ndim != 5:
            raise VideoReadError(f"a batch of clips must be (B, T, C, H, W), got "
                                 f"{tuple(videos.shape)}")
        videos = list(videos.unbind(0))
    if isinstance(videos, (str, bytes, Path, Clip)) or not isinstance(videos, Sequence):
        raise InputError(f"score_clips takes a list of clips (paths, (T, C, H, W) tensors or "
                         f"Clips) or a (B, T, C, H, W) tensor, got {type(videos).__name__}: "
                         f"use score_clip for one clip, or pass [video]")
    n = len(videos)
    masks, poses = _per_clip(masks, "masks", n), _per_clip(poses, "poses", n)
    preflight_models(cfg, videos, masks, poses, device)
    out: List[Optional[Union[ClipResult, Exception]]] = [None] * n
    batch: List[Tuple[int, _Item]] = []
    read: Dict[int, Tuple[Optional[Clip], Optional[str]]] = {}
    for k, (video, m, p) in enumerate(zip(videos, masks, poses)):
        if k not in read:  # the tensors from here on that fit a batch: read as batches
            read = _read_tensors(videos, k, cfg, device, budget)
        try:
            item = _prepare(video, m, p, cfg, device, preset, progress, _clip_name(video, k),
                            *read.pop(k, (None, None)))
        except Exception as exc:  # noqa: BLE001 - a bad clip must not stop the batch
            if compile_failure(exc):  # torch.compile's, not a clip's
                raise
            out[k] = exc if return_exceptions else _failed(video, k, exc, failed_cfg)
            continue
        size = _frame_bytes(item.clip)
        if batch and sum(_frame_bytes(b.clip) for _, b in batch) + size > budget:
            _score_batch(batch, out, progress, return_exceptions)
            batch = []
        batch.append((k, item))
    _score_batch(batch, out, progress, return_exceptions)
    return [r for r in out if r is not None]


def _per_clip(value: Any, name: str, n: int) -> List[Any]:
    """``masks`` / ``poses`` of :func:`score_clips` (``name``) as a list of ``n`` entries (None:
    n Nones). InputError for a single path (``list()`` would split it into characters), a
    value that is no sequence, or a list of another length, naming the argument."""
    if value is None:
        return [None] * n
    if isinstance(value, (str, bytes, Path)) or not isinstance(value, Iterable):
        raise InputError(f"{name} must be a list with one entry per clip ({n} "
                         f"clip{'' if n == 1 else 's'}), got {type(value).__name__} "
                         f"{value!r}: for one clip pass [path]")
    out = list(value)
    if len(out) != n:
        raise InputError(f"{name} has {len(out)} entr{'y' if len(out) == 1 else 'ies'} for "
                         f"{n} clip{'' if n == 1 else 's'}: pass one entry per clip (None for "
                         f"a clip without {name})")
    return out


def _read_tensors(videos: Sequence[VideoLike], start: int, cfg: GeoConConfig,
                  device: Union[None, str, torch.device], budget: int
                  ) -> Dict[int, Tuple[Optional[Clip], Optional[str]]]:
    """The (T, C, H, W) tensors of ``videos`` from ``start`` on (up to the first other source,
    at most ``budget`` bytes of uint8 RGB frames at the working size after ``io.stride`` /
    ``io.max_frames``, :func:`_working_bytes`: the bytes batches are cut by; at least one) read
    as :func:`load_clip` reads each, clips of one shape as one batch
    (:func:`~geocon_torch.io.clips_from_tensors`: one resize and one letterbox detection per
    batch, each clip bit-identical to its own read).
    {} when there are fewer than two; None for each clip when the batch does not read (each
    is then read alone and raises its own error). Returns {position in ``videos``: (Clip,
    content hash)}; the hashes of clips of one shape and dtype come from one host copy
    (:func:`~geocon_torch.io.hashing.tensor_content_hashes`; None: hashed alone)."""
    ks: List[int] = []
    size = 0
    for k in range(start, len(videos)):
        v = videos[k]
        if not isinstance(v, torch.Tensor) or v.ndim != 4:
            break
        size += _working_bytes(v, cfg)
        if ks and size > budget:
            break
        ks.append(k)
    if len(ks) < 2:
        return {}
    try:
        clips = clips_from_tensors(
            [videos[k] for k in ks], names=[_clip_name(videos[k], k) for k in ks],
            device=torch.device(device) if device is not None else None,
            motion_every=motion_every(cfg), **read_options(cfg, videos[ks[0]]))
    except Exception as exc:  # noqa: BLE001 - each clip is read alone and reports its own error
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        return {k: (None, None) for k in ks}
    tensors = [videos[k] for k in ks]
    same = len({(tuple(t.shape), t.dtype, t.device) for t in tensors}) == 1
    digests = tensor_content_hashes(torch.stack(tensors)) if same else [None] * len(ks)
    return dict(zip(ks, zip(clips, digests)))


def _working_bytes(video: torch.Tensor, cfg: GeoConConfig) -> int:
    """Bytes of the uint8 RGB frames a (T, C, H, W) tensor is read to (:func:`load_clip`): the
    frames ``io.stride`` / ``io.max_frames`` keep at the working size of ``io.long_side``
    (upscaled too); at the source size when that size is refused (too small: its read fails)."""
    t, h, w = int(video.shape[0]), int(video.shape[-2]), int(video.shape[-1])
    try:
        h, w = working_size(h, w, working_long_side(cfg, video), upscale=True).size
    except GeoConError:
        pass
    return _kept_frames(t, cfg) * 3 * h * w


def _clip_name(video: VideoLike, k: int) -> str:
    return Path(str(video)).stem if isinstance(video, (str, Path)) else f"clip{k}"


def _failed(video: VideoLike, k: int, exc: BaseException, cfg: GeoConConfig) -> ClipResult:
    return ClipResult.failed(_clip_name(video, k), "error", f"{type(exc).__name__}: {exc}", cfg,
                             path=str(video) if isinstance(video, (str, Path)) else None)


def _frame_bytes(clip: Clip) -> int:
    """Decoded bytes of a clip's frames (a streamed file counts as unbounded: alone)."""
    if not isinstance(clip.frames, torch.Tensor):
        return 1 << 62
    return int(clip.frames.numel()) * int(clip.frames.element_size())


def _score_batch(batch: List[Tuple[int, "_Item"]],
                 out: List[Optional[Union[ClipResult, Exception]]],
                 progress: Optional[bool], return_exceptions: bool = False) -> None:
    """The background blocks of the batch's decoded clips as one batch (per device), then
    every other section of the preset once over all the clips (:func:`_complete_all`); results
    (or, with ``return_exceptions``, a failed clip's exception) into ``out`` at the clips'
    positions."""
    blocks: Dict[int, Any] = {}
    todo = [(k, it) for k, it in batch
            if it.decoded and "background" in get_preset(it.preset).sections]
    for dev in sorted({str(it.dev) for _, it in todo}):
        group = [(k, it) for k, it in todo if str(it.dev) == dev]
        pairs = [background_pairs(it.clip.num_frames, it.cfg.background.pair_stride,
                                  held_of(it.clip)) for _, it in group]
        one = group[0][1] if len(group) == 1 else None  # a clip alone: its name and counts
        timer = Progress(one.clip.name if one else f"batch of {len(group)} clips",
                         progress_enabled(progress))
        if one:
            timer.note("features", f"{one.clip.num_frames} frames, {int(pairs[0].shape[0])} "
                                   f"pairs")
        got = score_backgrounds(
            [it.clip for _, it in group], pairs,
            masks=[it.masks for _, it in group], poses=[it.poses for _, it in group],
            config=group[0][1].cfg, device=group[0][1].dev, timer=timer)
        for (k, it), r in zip(group, got):
            blocks[k] = r if isinstance(r, BaseException) else r[0]
            for stage, t in timer.times.items():
                it.timer.times[stage] = it.timer.times.get(stage, 0.0) + t
    ready: List[Tuple[int, _Item, Optional[BackgroundBlock]]] = []
    for k, it in batch:
        bg = blocks.get(k)
        if isinstance(bg, BaseException):
            out[k] = bg if return_exceptions else _failed(it.video, k, bg, it.cfg)
        else:
            ready.append((k, it, bg))
    try:
        done = _complete_all([it for _, it, _ in ready], [bg for _, _, bg in ready])
    except Exception as exc:  # noqa: BLE001 - a failure outside every section: each clip's
        if compile_failure(exc):  # torch.compile's, not a clip's
            raise
        done = [exc] * len(ready)
    for (k, it, _), r in zip(ready, done):
        out[k] = r if not isinstance(r, BaseException) or return_exceptions else \
            _failed(it.video, k, r, it.cfg)
