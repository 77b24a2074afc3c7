"""The ``epipolar`` result block: :func:`epipolar_block` (what ``score_clip`` calls, re-reading the
few frames a protocol needs at source resolution), :func:`epipolar_section` (one decoded clip) and
:func:`epipolar_sections` (a batch of clips; one batch on the torch path). The protocols
themselves live in :mod:`geocon_torch.epipolar`. :func:`native_tensor_clips` and
:func:`measure_natives` are ``score_clips``' reading and measuring of a tensor batch, for the
surfaces that must give its numbers (the epipolar reward and metrics)."""
from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, Type, Union

import numpy as np
import torch

from .._checks import retired_argument
from .._precision import compile_failure
from ..config import EPIPOLAR_PATH_CHOICES, EpipolarConfig, GeoConConfig
from ..epipolar.gvgc import gvgc_section_opencv, gvgc_sections_torch
from ..epipolar.opencv_path import opencv_sections
from ..epipolar.protocol import decode_plan, source_frames_of
from ..epipolar.torch_path import resolve_features, torch_sections
from ..io import clip_from_tensor, clips_from_tensor, read_clip
from ..io.pairs import held_of
from ..io.sampling import frame_selection
from ..errors import InputError
from ..types import Clip
from .isolation import batch_or_each

PRESETS = ("worldatlas", "gvgc")
IMPLEMENTATIONS = EPIPOLAR_PATH_CHOICES  # "auto", "opencv", "torch"

EpipolarConfigLike = Union[None, EpipolarConfig, GeoConConfig]
DeviceLike = Union[None, str, torch.device]


def epipolar_config(config: EpipolarConfigLike) -> EpipolarConfig:
    """The EpipolarConfig of ``config`` (a GeoConConfig, an EpipolarConfig, or None: defaults)."""
    if config is None:
        return EpipolarConfig()
    if isinstance(config, GeoConConfig):
        return config.epipolar
    if isinstance(config, EpipolarConfig):
        return config
    raise InputError(f"config must be an EpipolarConfig or GeoConConfig, got "
                      f"{type(config).__name__}")


def resolve_implementation(implementation: Optional[str], config: EpipolarConfig,
                           device: Optional[torch.device]) -> str:
    """"opencv" or "torch": an explicit ``implementation`` wins, then
    ``config.implementation``; "auto" means torch on a CUDA device and the OpenCV reference on
    the CPU."""
    choice = implementation if implementation not in (None, "auto") else config.implementation
    if choice not in IMPLEMENTATIONS:
        raise InputError(f"epipolar implementation must be one of {IMPLEMENTATIONS}, got "
                         f"{choice!r}")
    if choice == "auto":
        return "torch" if device is not None and device.type == "cuda" else "opencv"
    return choice


def clip_from_frames(frames: torch.Tensor, name: str = "tensor",
                     fps: Optional[float] = None) -> Clip:
    """A Clip of (T, C, H, W) frames at native pixels: :func:`geocon_torch.io.clip_from_tensor`
    with ``long_side=None`` (the one tensor -> Clip path; an odd side loses its last row /
    column, as in ``score_clip``'s epipolar block). uint8, or float in [0, 1]; C = 3 (RGB) or 1
    (gray, repeated to RGB). Raises ClipTensorError (a ShapeError) on any other input; floats
    outside [0, 1] are rejected, no longer clamped."""
    return clip_from_tensor(frames, name=name, long_side=None, fps=fps)


def epipolar_sections(clips: Sequence[Clip], config: EpipolarConfigLike = None, *,
                      preset: str = "worldatlas", implementation: Optional[str] = "auto",
                      device: DeviceLike = None, features: Optional[str] = None,
                      pairs: Optional[Sequence[Any]] = None, **retired: Any
                      ) -> List[Dict[str, Any]]:
    """One ``epipolar`` section per clip; the torch implementation measures all clips in one
    batch.

    See :func:`epipolar_section` for the arguments and the keys of each section.
    """
    implementation = retired_argument(retired, "path", "implementation", implementation)
    cfg = epipolar_config(config)
    if preset not in PRESETS:
        raise InputError(f"epipolar preset must be one of {PRESETS}, got {preset!r}")
    for clip in clips:
        if not isinstance(clip, Clip):
            raise InputError(f"epipolar_section takes geocon_torch.types.Clip objects, got "
                              f"{type(clip).__name__} (use geocon_torch.io.read_clip)")
    dev = torch.device(device) if device is not None else (
        clips[0].frames.device if clips else torch.device("cpu"))
    chosen = resolve_implementation(implementation, cfg, dev)
    if preset == "gvgc" and chosen == "torch":
        sections = gvgc_sections_torch(clips, cfg, dev, resolve_features(cfg, dev, features))
    elif preset == "gvgc":
        sections = [gvgc_section_opencv(clip, cfg) for clip in clips]
    elif chosen == "torch":
        sections = torch_sections(clips, cfg, dev, features, pairs)
    else:
        sections = opencv_sections(clips, cfg, pairs)
    for clip, src, section in zip(clips, source_frames_of(clips), sections):
        _add_source_frames(clip, src.tolist(), section)
    return sections


def _add_source_frames(clip: Clip, src: List[int], section: Dict[str, Any]) -> None:
    """Per pair, the source frame numbers ``src`` (:func:`source_frames_of`: one host read for
    the batch) next to the positions."""
    if len(clip.frame_indices.reshape(-1)) != clip.num_frames:
        return
    for rec in section.get("per_pair", []):
        rec["left_frame"] = int(src[rec["left_index"]])
        rec["right_frame"] = int(src[rec["right_index"]])


def epipolar_section(clip: Clip, config: EpipolarConfigLike = None, *, preset: str = "worldatlas",
                     implementation: Optional[str] = "auto", device: DeviceLike = None,
                     features: Optional[str] = None, pairs: Any = None,
                     **retired: Any) -> Dict[str, Any]:
    """The epipolar trio of one clip (the ``epipolar`` block of the result).

    Args:
        clip: a decoded clip (pixels are measured at the *analysis* resolution: the clip's
            frames downscaled to width <= ``max_width`` = 640, aspect kept; gvgc: 1280x720).
        config: EpipolarConfig, GeoConConfig or None (defaults).
        preset: "worldatlas" (the WorldAtlas protocol, default) or "gvgc" (the original GVGC
            code of Li et al. 2024).
        implementation: "opencv" (CPU reference), "torch" (batched; CPU or CUDA) or "auto"
            (``config.implementation``, then torch on CUDA, OpenCV on CPU); the retired name
            ``path=`` still works, with a DeprecationWarning.
        device: device of the torch path (None: the clip's device).
        features: torch-path feature backend overriding ``config.features``
            ("torch-sift", "kornia-sift", "opencv-sift"; "auto" = torch-sift on CUDA, opencv-sift
            on CPU).
        pairs: optional (P, 2) frame positions replacing the protocol's pair selection, e.g.
            from :func:`geocon_torch.epipolar.decode_plan` after decoding only the frames the
            protocol needs (worldatlas only).

    Returns:
        worldatlas: ``epipolar_error`` (px, median over valid pairs of the per-pair median
        Sampson distance of the RANSAC inliers), ``epipolar_error_score`` (clip(1 - error / 5,
        0, 1)), ``epipolar_inlier_rate``, ``feature_match_coverage``, ``pairs``,
        ``valid_pairs``, ``fallback_used``, ``method`` ("sift", "relaxed_matching",
        "shi_tomasi_lk" or None), ``status`` ("ok" | "not_applicable"), ``reason``,
        ``implementation`` ("opencv" | "torch"), ``preset``, ``features``, ``analysis_size``,
        ``frames``, ``attempts`` (the fallback trail) and ``per_pair`` (list of dicts). Values
        are None when not_applicable.
        gvgc: ``mean_error``, ``median_error``, ``rmse``, ``mae`` (px at 1280x720),
        ``keep_rate``, ``num_inliers``, ``num_pts``, ``per_interval`` ({"60": {...}, ...}),
        ``pairs``, ``valid_pairs``, ``status``, ``reason``, ``per_pair``.
    """
    implementation = retired_argument(retired, "path", "implementation", implementation)
    return epipolar_sections([clip], config, preset=preset, implementation=implementation,
                             device=device, features=features,
                             pairs=None if pairs is None else [pairs])[0]


def epipolar_block(video: Any, clip: Clip, cfg: GeoConConfig, preset: str,
                   device: Optional[torch.device]) -> Dict[str, Any]:
    """The ``epipolar`` block of ``score_clip`` for ``preset`` "worldatlas" or "gvgc":
    :func:`epipolar_blocks` of one clip (raises its error)."""
    got = epipolar_blocks([video], [clip], cfg, preset, device)[0]
    if isinstance(got, BaseException):
        raise got
    return got


def protocol_positions(num_frames: int, cfg: GeoConConfig, preset: str,
                       held: Optional[Sequence[int]] = None
                       ) -> Tuple[np.ndarray, Optional[np.ndarray]]:
    """What ``preset`` measures of a clip of ``num_frames`` frames: (positions (F,) int64 of
    the frames it reads, sorted; the worldatlas pairs (P, 2) into those F frames, None for
    gvgc: its own). F = 0 when the clip is too short to give a pair. ``held``: the clip's
    held positions (``io.pairs.held_of``): worldatlas leaves out its pairs of two identical
    frames (``io.pairs.drop_held_pairs``)."""
    if preset == "worldatlas":
        return decode_plan(num_frames, cfg.epipolar, held)
    n = int(cfg.epipolar.gvgc.min_frames)  # frames 0..n-1; a shorter clip is not_applicable
    return (np.arange(n) if num_frames >= n else np.arange(0)), None


def _native_clip(video: Any, clip: Clip, cfg: GeoConConfig, preset: str,
                 device: Optional[torch.device]) -> Tuple[Clip, Optional[np.ndarray]]:
    """The frames ``preset`` measures, re-read at the source resolution (undistorted with
    ``cfg.io.lens``; a Clip is used as it is), and the worldatlas pairs into them (None: the
    protocol's own)."""
    if isinstance(video, Clip):
        return clip, None
    positions, pairs = protocol_positions(clip.num_frames, cfg, preset, held_of(clip))
    if not len(positions):  # too short for a pair (no re-read)
        return clip, pairs
    source = clip.frame_indices.cpu()[torch.as_tensor(positions, dtype=torch.long)]
    return read_clip(video, long_side=None, indices=source.tolist(), device=device,
                     letterbox_threshold=cfg.io.letterbox_threshold,
                     letterbox_min_fraction=cfg.io.letterbox_min_fraction,
                     lens=cfg.io.lens), pairs


def native_tensor_clips(videos: torch.Tensor, cfg: GeoConConfig, options: Dict[str, Any],
                        preset: str = "worldatlas") -> List[Tuple[Clip, Optional[np.ndarray]]]:
    """:func:`_native_clip` of every clip of a (B, T, C, H, W) batch that ``score_clips`` reads
    with ``options`` (``pipeline.read_options``: stride, frame cap, letterbox rule, working
    long side; the lens is ``cfg.io.lens``), in one batched read and without building the
    working-size clips: per clip
    (the frames ``preset`` measures among those the stride / frame cap keep, at the source
    resolution (H, W); the pairs into them). When too few frames are kept for a pair, the clips
    as ``options`` read them (what ``score_clip`` measures then: a not_applicable block).

    The batch read also records the motion of every kept frame (``meta["motion"]``, its held
    positions among the kept frames, in the one host copy of that read): a worldatlas clip
    with held frames is read again alone with the frames of its own pairs
    (:func:`protocol_positions` with its held positions), as ``score_clip`` measures it."""
    options = dict(options, lens=cfg.io.lens)  # the lens of cfg, whatever options hold
    kept = frame_selection(options["stride"], options["max_frames"]).resolve(
        int(videos.shape[1]))
    positions, pairs = protocol_positions(len(kept), cfg, preset)
    if not len(positions):
        return [(clip, pairs) for clip in clips_from_tensor(videos, **options)]
    marks = dict(letterbox_threshold=options["letterbox_threshold"],
                 letterbox_min_fraction=options["letterbox_min_fraction"], long_side=None,
                 motion_indices=kept.tolist(), lens=options["lens"])
    clips = clips_from_tensor(videos, indices=kept[positions].tolist(), **marks)
    out: List[Tuple[Clip, Optional[np.ndarray]]] = [(clip, pairs) for clip in clips]
    for b, clip in enumerate(clips):
        held = held_of(clip) if preset == "worldatlas" else []
        if held:  # its own plan: the kept frames' pairs less those of two identical frames
            own, own_pairs = protocol_positions(len(kept), cfg, preset, held)
            out[b] = (clip_from_tensor(videos[b], name=clip.name,
                                       indices=kept[own].tolist(), **marks), own_pairs)
    return out


def measure_natives(natives: Sequence[Tuple[Clip, Optional[np.ndarray]]], cfg: GeoConConfig,
                    preset: str, device: Optional[torch.device],
                    reraise: Tuple[Type[BaseException], ...] = ()
                    ) -> List[Union[Dict[str, Any], BaseException]]:
    """The ``epipolar`` blocks of (clip, pairs) entries (:func:`_native_clip`,
    :func:`native_tensor_clips`): one :func:`epipolar_sections` call over all of them with
    ``cfg.epipolar`` and its implementation; when it raises, each clip alone, so only the
    clip at fault holds its exception (``reraise``: types raised instead, never retried)."""
    def measure(sel: List[int]) -> List[Dict[str, Any]]:
        return epipolar_sections([natives[k][0] for k in sel], cfg.epipolar, preset=preset,
                                 implementation=cfg.epipolar.implementation, device=device,
                                 pairs=[natives[k][1] for k in sel])

    return batch_or_each(measure, list(range(len(natives))), reraise)


def epipolar_blocks(videos: Sequence[Any], clips: Sequence[Clip], cfg: GeoConConfig,
                    preset: str, device: Optional[torch.device]
                    ) -> List[Union[Dict[str, Any], BaseException]]:
    """The ``epipolar`` blocks of several clips of ``score_clips`` (one config, one device):
    one :func:`epipolar_sections` call over all of them (the torch implementation, the CUDA
    default, measures every clip's pairs in one batch; the OpenCV reference stays per clip
    inside it).

    The epipolar protocols analyse frames at their own resolution (width <= 640, or 1280x720
    for gvgc), so the few frames they use are re-read at the source resolution rather than
    resampled twice through the working resolution (per clip: decoding). A clip whose frames
    cannot be re-read gets its exception in its slot; when the batched call itself fails, each
    clip is measured alone, so only the clip at fault gets an exception (a clip's block is the
    same alone or in a batch).
    """
    out: List[Union[Dict[str, Any], BaseException, None]] = [None] * len(clips)
    natives: Dict[int, Tuple[Clip, Optional[np.ndarray]]] = {}
    for k, (video, clip) in enumerate(zip(videos, clips)):  # decoding: per clip
        try:
            natives[k] = _native_clip(video, clip, cfg, preset, device)
        except Exception as exc:  # noqa: BLE001 - this clip's error only
            if compile_failure(exc):  # torch.compile's, not a clip's
                raise
            out[k] = exc
    ids = list(natives)
    for k, g in zip(ids, measure_natives([natives[k] for k in ids], cfg, preset, device)):
        out[k] = g
    return out  # type: ignore[return-value]
