"""Training-time geometric rewards over (B, T, C, H, W) video batches.

``geometric_reward(videos, kind, config=None, seed=None) -> (rewards (B,), RewardDiagnostics)``:
``videos`` uint8, or float in [0, 1], on any device; rewards are a float tensor on the videos'
device (float64 for float64 videos, else float32: bfloat16 / float16 videos too, whose 8- /
11-bit rewards would tie nearby clips), **higher is better, each in [0, 1]**.
Tensors are scored at their native resolution (no working-size resize) unless the config asks
for one.

Folding of each kind into one number (documented; every term lies in [0, 1]):

* ``"epipolar-dpo"`` (Kupyn et al. 2025, :mod:`geocon_torch.epipolar.dpo`):
  ``exp(-mean_epipolar_error / 5 px)`` (5 px = the protocol's inlier threshold): 1 for a
  perfect epipolar fit, 0.37 at 5 px mean Sampson error; strictly decreasing in the error.
* ``"epipolar"`` (the WorldAtlas trio, :mod:`geocon_torch.sections.epipolar`, batched torch
  path): the mean of ``epipolar_error_score`` (= clip(1 - error / 5 px, 0, 1)),
  ``epipolar_inlier_rate`` and ``feature_match_coverage``.
* ``"background"`` (GeoCon, ``score_clips(preset="background")``): ``IR * exp(-GE /
  report_ge_px)`` of the gated model (IR = inlier ratio, GE = geometric error in px,
  ``report_ge_px`` = 3.5 px, the paper's report gate), times ``textured_pairs / pairs`` for a
  clip scored on the pairs with ``min_inliers`` matches though most have fewer.

Clips that cannot be scored (textureless or black frames, too few frames, no valid pair, an error
inside the scorer) get the **neutral value** ``neutral`` (default 0.0, the bottom of the range:
a generator cannot escape the reward by producing unscoreable video) and a status
("not_applicable" or "error") with a reason in the diagnostics; never NaN, and one bad clip never
raises for the batch. A malformed batch (wrong shape / dtype / range) raises ClipTensorError; a
misconfigured optional model of kind "background" (a missing / corrupt DUSt3R, SAM-2 or
features checkpoint, a package that is not importable) raises its CheckpointError /
OptionalDependencyError / ConfigError before any clip is scored: it is no clip's fault, and a
batch of neutral rewards would train on nothing.

**Frozen videos.** A still video shows no geometry, yet every kind scores it the top 1.0 (no
frame moves, so nothing is inconsistent): a policy-gradient generator would be rewarded most for
not moving. So a clip is *frozen* when every consecutive pair of the frames its kind reads
(``io.stride`` / ``io.max_frames`` as ``score_clip`` reads them; "epipolar-dpo": frames 0, 15,
30, ...) differs by a mean absolute difference of at most :data:`FROZEN_MAX_MAD` = 0.5 grey levels
of 255 (over pixels and channels, at native resolution; :func:`frozen_clips`). A frozen clip the
scorer accepted gets the neutral reward, status "not_applicable" and the reason
:data:`FROZEN_REASON` (its ``raw`` values, valid / total pairs stay: what it would have been
folded from); one the scorer refused keeps its own status and reason. Moving clips keep their
rewards bit for bit. The test runs on the videos' device, batched over clips (one (B,) read per
batch). Only the reward does this: ``score_clip`` still scores a still clip (a static camera on a
static scene is the valid GeoCon category C1) and records the statistic in ``result["motion"]``
(measured while the frames are read, at native resolution, by the same arithmetic:
:mod:`geocon_torch.io.sampling`; ``result["motion"]["epipolar_dpo"]`` for frames 0, 15, 30, ...
when the preset runs that section), so :func:`reward_from_result` (stored rows, ``geocon pairs``)
applies the same rule to a row that has it; a row written before keeps its fold. Near-still
clips (two distinct frames repeated) and an A-B flicker of two views still score high (README
"Training loop").

Determinism: SIFT is deterministic and the only random choices (RANSAC of "epipolar" and
"background") come from ``seed`` (it sets ``ransac.seed`` and ``epipolar.seed``; None keeps the
config's, 0 in the default config), so the same call gives identical rewards. "epipolar-dpo" has
no randomness.

Config: None, a mapping, a JSON path or a GeoConConfig (as ``score_clip``; tensors are scored
at their own resolution unless ``io.long_side`` asks for a size); the Epipolar-DPO settings are
its ``epipolar_dpo`` section (an :class:`~geocon_torch.config.EpipolarDPOConfig` may also be
passed directly). Each kind is scored with its preset of the preset table
(:func:`geocon_torch.presets.preset_for_kind`: background -> "background", epipolar ->
"worldatlas", epipolar-dpo -> "epipolar-dpo"), reading the frames ``io`` selects (stride,
frame cap, working size) as ``score_clip`` does; the diagnostics record that preset and the
``config_hash`` a ``score_clip`` of the same preset and config records. The epipolar kinds, as
their ``score_clip`` blocks, measure the frames they read at the source resolution, whatever
``io.long_side`` (kind "epipolar": the protocol's frames among those ``io.stride`` /
``io.max_frames`` keep, read once for the batch, its raw values bit for bit those of
``score_clips(videos, preset="worldatlas")``'s ``epipolar`` block). One difference: kind
"epipolar" with ``epipolar.implementation = "auto"`` scores with the batched torch
implementation on every device (``score_clip``'s "auto" is the OpenCV reference on the CPU), so
on the CPU its hash and values match ``score_clip`` given ``epipolar.implementation = "torch"``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

import torch

from ._checks import check_integer
from ._precision import autocast_off, eager_entry
from .config import ConfigLike, EpipolarDPOConfig, GeoConConfig, load_config
from .epipolar.dpo import measure_dpo, one_torch_thread, sample_positions
from .errors import ArgumentTypeError, ClipTensorError, InputError
from .io import check_clip_tensor, tensor_frames
from .io.sampling import FROZEN_MAX_MAD  # noqa: F401 - the rule's tolerance, re-exported
from .io.sampling import is_still, max_pair_sums
from .measures.headline import textured_share
from .pipeline import _error_block, pinned_config, read_options, score_clips
from .presets import REWARD_KINDS, preset_for_kind
from .sections.background import CALL_ERRORS
from .sections.epipolar import measure_natives, native_tensor_clips
from .sections.epipolar_dpo import dpo_blocks, dpo_frame_end, with_read_reason

KINDS = REWARD_KINDS  # the reward kinds of the preset table
NEUTRAL_REWARD = 0.0
FROZEN_REASON = "frozen video: no frame differs from the previous one (a still video shows no " \
                "geometry)"
FOLDS = {"epipolar-dpo": "exp(-mean_epipolar_error / inlier_threshold_px)",
         "epipolar": "(epipolar_error_score + epipolar_inlier_rate + feature_match_coverage) / 3",
         "background": "ir * exp(-ge_px / background.report_ge_px) (* textured_pairs / pairs "
                       "for a clip scored on some of its pairs)"}
#: a ``config=`` of :func:`geometric_reward`: any ConfigLike, or an EpipolarDPOConfig (the
#: ``epipolar_dpo`` section)
RewardConfigLike = Union[ConfigLike, EpipolarDPOConfig]


@dataclass
class ClipReward:
    """Diagnostics of one clip.

    Attributes:
        reward: the reward given (the neutral value when not scored).
        status: "ok", "not_applicable" or "error".
        reason: why it was not scored (None when ok).
        valid_pairs, total_pairs: pairs the scorer could use / tried: frame pairs for the
            epipolar kinds, (frame pair, scale) entries for "background" (its blocks pool the
            valid entries over the scales), so valid_pairs <= total_pairs.
        raw: the raw values the reward folds (e.g. ``mean_epipolar_error``, ``ir``, ``ge_px``);
            for "background" also what a loop can filter degenerate clips on (README *The
            escapes that remain*): ``behaviour`` ("Static" for a clip whose background does
            not move: with ``max_mad`` well above 0.5 grey levels the frames change while the
            matched content stands still, e.g. a static watermark or border over content
            without geometry), ``max_mad`` (the largest mean absolute difference of consecutive
            frames read, grey levels) and ``parallax_ref`` (the gate's parallax, reference px:
            ~0 for a 2D pan of one still image).
    """

    reward: float
    status: str
    reason: Optional[str]
    valid_pairs: int
    total_pairs: int
    raw: Dict[str, Any] = field(default_factory=dict)


@dataclass
class RewardDiagnostics:
    """Per-clip diagnostics of one :func:`geometric_reward` call (``clips[b]`` for video b)."""

    kind: str
    fold: str
    neutral: float
    clips: List[ClipReward]
    preset: Optional[str] = None  # the preset the kind is scored with
    config_hash: Optional[str] = None  # of the config scored (as score_clip records it)

    @property
    def status(self) -> List[str]:
        return [c.status for c in self.clips]

    @property
    def scored(self) -> List[bool]:
        """Whether each clip got a real reward (status "ok")."""
        return [c.status == "ok" for c in self.clips]


def _reward_config(config: RewardConfigLike, kind: str, seed: Optional[int]) -> GeoConConfig:
    """The config ``kind`` is scored with: ``config`` (an EpipolarDPOConfig is its
    ``epipolar_dpo`` section) with the seeds set (``seed`` None: the config's own) and the
    kind's preset chosen. The videos are tensors, so ``io.long_side = "auto"`` (the default)
    scores them at their own resolution."""
    if isinstance(config, EpipolarDPOConfig):
        config = GeoConConfig().replace(epipolar_dpo=config)
    cfg = load_config(config)
    if seed is not None:
        seed = check_integer(seed, "seed", 0)
        cfg = cfg.replace(ransac={"seed": seed}, epipolar={"seed": seed})
    if kind == "epipolar" and cfg.epipolar.implementation == "auto":  # its batched torch path
        cfg = cfg.replace(epipolar={"implementation": "torch"})
    return cfg.with_preset(preset_for_kind(kind).name)


@one_torch_thread()  # the work is spread over the SIFT pool (epipolar.dpo.one_torch_thread)
def _dpo_rewards(videos: torch.Tensor, cfg: GeoConConfig, neutral: float) -> List[ClipReward]:
    """kind "epipolar-dpo": one batched measurement of all clips (module docstring), on the
    frames 0, rate, 2 rate, ... of the whole clip (with ``io.max_frames``: up to the last frame
    kept), as ``score_clip`` samples them."""
    config = cfg.epipolar_dpo
    t = int(videos.shape[1])
    positions = _dpo_positions(cfg, t)
    frames = tensor_frames(videos, long_side=None, indices=positions,
                           lens=cfg.io.lens)  # (B, T', 3, H, W) uint8
    m = measure_dpo(list(frames.unbind(0)), config, videos.device,
                    frame_numbers=[positions] * int(frames.shape[0]))
    end = dpo_frame_end(cfg, t)
    return [reward_from_result({"epipolar_dpo": with_read_reason(
        block, cfg, config.sampling_rate, t, end)}, "epipolar-dpo", neutral=neutral)
            for block in dpo_blocks(m, config)]


def _dpo_positions(cfg: GeoConConfig, num_frames: int) -> List[int]:
    """Frames "epipolar-dpo" reads: 0, rate, 2 rate, ... of the whole clip whatever
    ``io.stride``; with ``io.max_frames`` up to the last frame kept
    (:func:`~geocon_torch.sections.epipolar_dpo.dpo_frame_end`)."""
    return sample_positions(dpo_frame_end(cfg, num_frames), cfg.epipolar_dpo.sampling_rate)


def frozen_clips(videos: torch.Tensor, step: int = 1, count: Optional[int] = None
                 ) -> torch.Tensor:
    """Whether each clip is frozen: every consecutive pair of its frames 0, ``step``,
    2 ``step``, ... (``count`` of them; None: all there are) differs by a mean absolute
    difference of at most :data:`FROZEN_MAX_MAD` grey levels of 255 over pixels and channels.

    Args:
        videos: (B, T, C, H, W) uint8, or float in [0, 1] (differences times 255).
        step, count: the frames read (``count`` is cut to the frames there are).
    Returns:
        (B,) bool on ``videos.device``, computed there without a host sync (uint8: exact
        integer sums); False for every clip when fewer than two frames are read.
    """
    b, t = int(videos.shape[0]), int(videos.shape[1])
    n = len(range(0, t, step)) if count is None else min(int(count), len(range(0, t, step)))
    if n < 2 or b == 0:
        return torch.zeros(b, dtype=torch.bool, device=videos.device)
    read = videos[:, 0:(n - 1) * step + 1:step]  # (B, n, C, H, W) view
    return is_still(max_pair_sums(read), int(videos[0, 0].numel()))


def _frozen(videos: torch.Tensor, kind: str, cfg: GeoConConfig) -> torch.Tensor:
    """:func:`frozen_clips` on the frames ``kind`` reads (module docstring)."""
    t = int(videos.shape[1])
    if kind == "epipolar-dpo":
        return frozen_clips(videos, cfg.epipolar_dpo.sampling_rate,
                            len(_dpo_positions(cfg, t)))
    return frozen_clips(videos, cfg.io.stride, cfg.io.max_frames)


def _refuse(info: ClipReward, frozen: Optional[bool], neutral: float) -> ClipReward:
    """``info`` of a frozen clip the scorer accepted: the neutral reward, status
    not_applicable and :data:`FROZEN_REASON` (valid / total pairs and raw values kept); any
    other ``info`` (``frozen`` False or None: not known) as it is."""
    if frozen is True and info.status == "ok":
        return ClipReward(float(neutral), "not_applicable", FROZEN_REASON, info.valid_pairs,
                          info.total_pairs, info.raw)
    return info


def _refuse_frozen(infos: List[ClipReward], frozen: torch.Tensor, neutral: float
                   ) -> List[ClipReward]:
    """:func:`_refuse` of every clip by ``frozen`` (B,) bool (read once)."""
    if not infos:
        return infos
    return [_refuse(c, bool(still), neutral) for c, still in zip(infos, frozen.tolist())]


def stored_frozen(result: Mapping[str, Any], kind: str) -> Optional[bool]:
    """Whether a stored result says its clip is frozen on the frames ``kind`` reads:
    ``result["motion"]["frozen"]`` (the frames ``score_clip`` read), for kind "epipolar-dpo"
    ``result["motion"]["epipolar_dpo"]["frozen"]`` (frames 0, 15, 30, ...). None when the row
    does not say: written before the field existed, a Clip input (no ``epipolar_dpo`` entry) or
    a failed clip."""
    motion = result.get("motion")
    if isinstance(motion, Mapping) and kind == "epipolar-dpo":
        motion = motion.get("epipolar_dpo")
    if not isinstance(motion, Mapping) or not isinstance(motion.get("frozen"), bool):
        return None
    return motion["frozen"]


def _fold_epipolar(section: Dict[str, Any]) -> Optional[float]:
    keys = ("epipolar_error_score", "epipolar_inlier_rate", "feature_match_coverage")
    vals = [section.get(k) for k in keys]
    if section.get("status") != "ok" or any(v is None for v in vals):
        return None
    return sum(float(v) for v in vals) / 3.0


def _epipolar_rewards(videos: torch.Tensor, cfg: GeoConConfig, neutral: float
                      ) -> List[ClipReward]:
    """kind "epipolar": the WorldAtlas trio of what ``score_clips(preset="worldatlas")``
    measures of each clip (the protocol's frames among those ``io`` keeps, at the source
    resolution: :func:`~geocon_torch.sections.epipolar.native_tensor_clips`), all clips in one
    torch-path batch; a clip whose measurement raises gets status "error" (a config problem
    raises)."""
    natives = native_tensor_clips(videos, cfg, read_options(cfg, videos[0])) if len(
        videos) else []
    blocks = measure_natives(natives, cfg, "worldatlas", videos.device, reraise=CALL_ERRORS)
    sections = [_error_block(g) if isinstance(g, BaseException) else g for g in blocks]
    return [reward_from_result({"status": s.get("status", "error"), "epipolar": s},
                               "epipolar", cfg, neutral) for s in sections]


def _info(value: Optional[float], neutral: float, status: str, reason: Optional[str],
          valid: Any, total: Any, raw: Dict[str, Any]) -> ClipReward:
    """A ClipReward: the value when it is finite, else the neutral reward with the scorer's
    status ("not_applicable" unless it said "error") and reason."""
    if value is not None and math.isfinite(value):
        return ClipReward(float(value), "ok", None, int(valid or 0), int(total or 0), raw)
    status = status if status in ("not_applicable", "error") else "not_applicable"
    return ClipReward(float(neutral), status, reason or "no finite value to fold",
                      int(valid or 0), int(total or 0), raw)


def _background_rewards(videos: torch.Tensor, cfg: GeoConConfig, neutral: float
                        ) -> List[ClipReward]:
    """kind "background": GeoCon IR / GE of the gated model (``score_clips``, clip by clip)."""
    results = score_clips(videos, config=cfg, device=videos.device)
    return [reward_from_result(res.to_dict(), "background", cfg, neutral) for res in results]


def _fold_dpo(block: Mapping[str, Any]) -> Optional[float]:
    """``exp(-mean_epipolar_error / inlier_threshold_px)`` of an ``epipolar_dpo`` block."""
    err = block.get("mean_epipolar_error")
    if block.get("status") != "ok" or err is None or not int(block.get("valid_pairs") or 0):
        return None
    thr = float((block.get("protocol") or {}).get("inlier_threshold_px",
                                                  EpipolarDPOConfig().inlier_threshold_px))
    return math.exp(-float(err) / thr)


def _fold_background(result: Mapping[str, Any], report_ge_px: float) -> Optional[float]:
    """``ir * exp(-ge_px / report_ge_px)`` of an ok result's ``background`` block, times the
    share of its frame pairs that matched for a clip scored on some of them
    (:func:`~geocon_torch.measures.headline.textured_share`: 1 for every other clip)."""
    bg = result.get("background") or {}
    ir, ge = bg.get("ir"), bg.get("ge_px")
    if result.get("status") != "ok" or ir is None or ge is None:
        return None
    return float(ir) * math.exp(-float(ge) / report_ge_px) * textured_share(bg)


def check_neutral(neutral: Any) -> float:
    """``neutral`` as a float; InputError unless it is a finite number (a reward is never NaN;
    a value outside [0, 1], e.g. -1, is allowed as a marker of the clips that were not
    scored): ArgumentTypeError for a str or bool ("0", True: not taken as 0 / 1)."""
    if isinstance(neutral, (str, bytes, bool)):  # float("0") / float(True) would pass
        raise ArgumentTypeError(f"neutral must be a finite number, got "
                                f"{type(neutral).__name__} {neutral!r}")
    try:
        value = float(neutral)
    except (TypeError, ValueError):
        raise InputError(f"neutral must be a finite number, got {neutral!r}") from None
    if not math.isfinite(value):
        raise InputError(f"neutral must be a finite number (a reward is never NaN), got "
                         f"{neutral!r}")
    return value


def reward_from_result(result: Mapping[str, Any], kind: str,
                       config: Optional[GeoConConfig] = None,
                       neutral: float = NEUTRAL_REWARD) -> ClipReward:
    """The reward of ONE scored clip from its result dict (``ClipResult.to_dict()`` or a row of
    the bench store): the fold of :data:`FOLDS` that :func:`geometric_reward` applies too.

    Reads the block of ``kind``: ``background`` (+ the result's ``status``), ``epipolar`` or
    ``epipolar_dpo``. ``config`` gives ``background.report_ge_px`` (default: the result's
    recorded config, else 3.5 px). A missing block, a non-ok status or a non-finite value gives
    the neutral reward with the status and reason of the block (or of the result).

    The frozen-video rule of :func:`geometric_reward` applies too, from what the row recorded
    while its frames were read (:func:`stored_frozen`: ``result["motion"]``, for kind
    "epipolar-dpo" its ``epipolar_dpo`` entry): a frozen clip that folds to a value gets the
    neutral reward, status not_applicable and :data:`FROZEN_REASON`, its raw values and pair
    counts kept (so ``geocon pairs`` never prefers it). A row without the field (a store
    written before it was recorded, a Clip input for "epipolar-dpo") is folded as before: a
    still clip's row then folds to its raw 1.0.
    """
    neutral = check_neutral(neutral)
    block_key = preset_for_kind(kind).status_from
    block = result.get(block_key) or {}
    total = block.get("total_pairs", block.get("pairs"))
    if kind == "background":
        stored = result.get("config")  # read as stored: a rule added since may refuse it
        cfg = config or (GeoConConfig.from_dict(stored, strict=False) if stored
                         else GeoConConfig())
        value = _fold_background(result, cfg.background.report_ge_px)
        motion = result.get("motion") if isinstance(result.get("motion"), dict) else {}
        raw = {"ir": block.get("ir"), "ge_px": block.get("ge_px"), "regime": result.get("regime"),
               "behaviour": result.get("behaviour"), "max_mad": motion.get("max_mad"),
               "parallax_ref": block.get("parallax_ref")}
        status, reason = result.get("status", "error"), result.get("reason")
        if total is not None and block.get("scales"):  # (pair, scale) entries
            total = int(total) * len(block["scales"])
    elif kind == "epipolar":
        value = _fold_epipolar(block)
        raw = {k: block.get(k) for k in ("epipolar_error", "epipolar_error_score",
                                         "epipolar_inlier_rate", "feature_match_coverage")}
        status, reason = block.get("status", "error"), block.get("reason")
    else:
        value = _fold_dpo(block)
        ok = value is not None
        raw = {k: block.get(k) if ok else None for k in ("mean_epipolar_error",
                                                         "mean_inlier_rate")}
        status, reason = block.get("status", "error"), block.get("reason")
    if not block:
        reason = reason or f"the result has no {block_key} block (scored with another preset?)"
    info = _info(value, neutral, status, reason, block.get("valid_pairs"), total, raw)
    return _refuse(info, stored_frozen(result, kind), neutral)


@eager_entry
@autocast_off
def geometric_reward(videos: torch.Tensor, kind: str = "epipolar-dpo",
                     config: RewardConfigLike = None, seed: Optional[int] = None, *,
                     neutral: float = NEUTRAL_REWARD
                     ) -> Tuple[torch.Tensor, RewardDiagnostics]:
    """Geometric-consistency reward of every video of a batch (module docstring).

    Not differentiable: scored without autograd (no gradient reaches ``videos``, also when they
    require grad; inside ``torch.compile`` it runs eagerly, a graph break); for a differentiable
    signal use :func:`~geocon_torch.metrics.functional.soft_background_consistency`.

    Args:
        videos: (B, T, C, H, W) uint8, or float in [0, 1]; C in {1, 3}; any device.
        kind: "epipolar-dpo" (default), "epipolar" or "background".
        config: None, a mapping, a JSON path, a GeoConConfig, or an EpipolarDPOConfig (its
            ``epipolar_dpo`` section).
        seed: seeds the RANSAC of "epipolar" / "background" (same seed -> same rewards): sets
            ``ransac.seed`` and ``epipolar.seed``; None (default) keeps the config's (0 unless
            ``config`` sets them).
        neutral: the reward of a clip that cannot be scored, or of a frozen one (module
            docstring; a finite number; a value outside [0, 1], e.g. -1, marks the unscored
            clips).
    Returns:
        rewards: (B,) on ``videos.device``, float64 for float64 videos, else float32 (uint8,
        float32 and half-precision videos: in bfloat16 a clean clip's 0.98453 and a
        corrupted one's 0.98326 would both round to 0.984375); higher is better, in [0, 1].
        diagnostics: :class:`RewardDiagnostics` (each clip's reward as a Python float).
    Raises:
        ClipTensorError: ``videos`` is not a valid clip batch (a list of clips included:
            stack them); InputError: unknown ``kind`` or a ``neutral`` that is not a finite
            number (ArgumentTypeError for a str or bool).
        CheckpointError, OptionalDependencyError, ConfigError: kind "background" with an
            optional model-backed stage that cannot be built (a learned features backend, the
            DUSt3R gate, SAM-2 masks: a missing / corrupt checkpoint, a package that is not
            importable, a missing required setting), raised before any clip is scored (as
            :func:`~geocon_torch.pipeline.score_clips`), never a batch of neutral rewards;
            kind "epipolar": a features backend that cannot be built (any other exception
            while measuring is the status "error" of the clip at fault).
    """
    preset_for_kind(kind)  # InputError for an unknown kind
    neutral = check_neutral(neutral)
    if isinstance(videos, (list, tuple)):
        raise ClipTensorError(f"videos must be a (B, T, C, H, W) tensor, got a "
                              f"{type(videos).__name__} of {len(videos)}: stack the clips "
                              f"(torch.stack(videos); clips of one shape)")
    check_clip_tensor(videos, batched=True)
    cfg = pinned_config(_reward_config(config, kind, seed), videos.device)
    frozen = _frozen(videos, kind, cfg)  # queued before the scoring, read once after it
    if kind == "epipolar-dpo":
        infos = _dpo_rewards(videos, cfg, neutral)
    elif kind == "epipolar":
        infos = _epipolar_rewards(videos, cfg, neutral)
    else:
        infos = _background_rewards(videos, cfg, neutral)
    infos = _refuse_frozen(infos, frozen, neutral)
    rewards = torch.tensor([c.reward for c in infos], dtype=torch.float64)
    out_dtype = (torch.promote_types(videos.dtype, torch.float32) if videos.is_floating_point()
                 else torch.float32)  # half-precision videos: float32 (module docstring)
    return rewards.to(device=videos.device, dtype=out_dtype), RewardDiagnostics(
        kind, FOLDS[kind], float(neutral), infos, cfg.preset, cfg.config_hash())
