"""The optional model-backed stages a run reads, and their models built before any clip is read.

Four stages of :func:`geocon_torch.pipeline.score_clip` load a model: the features backend of
the background when it is a learned one (``features.checkpoint`` for disk / loftr / lightglue,
the weights of an installed package for the others), the DUSt3R gate, SAM-2 masks, and RAFT
flow in the foreground. Which of them a clip runs follows from its config, its preset's
sections and whether masks / poses were given for it (:func:`stage_plan`: the gate method of
:func:`~geocon_torch.gate.select.resolve_gate_method`, the masks provider of
:func:`~geocon_torch.segment.select.masks_method`, the flow backend of
:func:`~geocon_torch.flow.factory.resolve_flow`). That one resolution decides two things:

* :func:`preflight`: the models are built once, before any clip is read, through the same
  cached builders the stages then use (:func:`~geocon_torch.gate.dust3r.dust3r_estimator`,
  :func:`~geocon_torch.segment.sam2.sam2_predictor`,
  :func:`~geocon_torch.flow.factory.cached_flow`; nothing is loaded twice), and the SAM-2
  prompt file's format is checked; so a configuration problem (a missing, unreadable or corrupt
  checkpoint, an optional package or checkout that is not importable, a missing required
  setting such as ``segment.sam2_prompts`` or ``segment.sam2_config``) raises its
  :class:`~geocon_torch.errors.GeoConError`
  (CheckpointError / OptionalDependencyError / ConfigError / InputError) for the whole run
  instead of turning every clip into an ``error`` row (and every reward into the neutral one).
  What depends on a clip (a prompt frame outside the clip, an undecodable clip) stays that
  clip's error.
* :func:`files_read`: the files :func:`~geocon_torch.io.pinned_files.pin_files` pins, and only
  those (a checkpoint the run never loads is not hashed and changes no ``config_hash``).

A learned features backend is kept by :func:`~geocon_torch.features.multiscale.feature_backend`
(one build per process, weights file and options), which the preflight and the feature stage
both call.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

from ..config import CHECKPOINT_BACKENDS, GeoConConfig
from ..errors import InputError
from ..features.multiscale import WEIGHT_FREE_BACKENDS, feature_backend
from ..flow.factory import cached_flow, flow_weights, resolve_flow
from ..gate.dust3r import dust3r_estimator
from ..gate.select import resolve_gate_method
from ..io.pinned_files import FilesRead
from ..segment.sam2 import load_prompts, sam2_predictor
from ..segment.select import masks_method

#: feature backends that load no weights ("auto" is one of the SIFTs)
WEIGHT_FREE_FEATURES = ("auto", "lk-tracks") + WEIGHT_FREE_BACKENDS


@dataclass(frozen=True)
class StagePlan:
    """The model-relevant choices of one clip's scoring (None: the stage does not run).

    Attributes:
        features: the learned features backend the background builds (None: weight-free).
        gate: the gate method ("poses" / "dust3r" / "parallax"); None without a background
            section, or when the method cannot be resolved for the clip (``gate.method`` "poses"
            without poses: that clip's own InputError, nothing is loaded).
        masks: the masks provider ("files" / "sam2" / "motion" / "none"); None likewise.
        flow: the RAFT architecture the foreground loads (None: torch-lk or no foreground).
    """

    features: Optional[str] = None
    gate: Optional[str] = None
    masks: Optional[str] = None
    flow: Optional[str] = None


def _resolved(resolve: Callable[[GeoConConfig, Any], str], cfg: GeoConConfig,
              given: bool) -> Optional[str]:
    """``resolve(cfg, given or None)``; None where it raises InputError (a method that needs
    the masks / poses a clip lacks: the clip reports it, no model is involved)."""
    try:
        return resolve(cfg, True if given else None)
    except InputError:
        return None


def stage_plan(cfg: GeoConConfig, sections: Sequence[str], *, masks_given: bool = False,
               poses_given: bool = False) -> StagePlan:
    """Which optional model-backed stages scoring a clip runs.

    Args:
        cfg: the scoring config (pinned or not: "auto"s are resolved here as scoring does).
        sections: the sections of the clip's preset
            (:attr:`geocon_torch.presets.Preset.sections`); the features, gate and masks
            stages belong to ``background``, flow to ``foreground`` (which reads the
            background's objects).
        masks_given, poses_given: whether object masks / a pose log are given for the clip.
    """
    if "background" not in sections:
        return StagePlan()
    backend = cfg.features.backend
    flow = None
    if "foreground" in sections:
        name = resolve_flow(cfg.foreground.flow, cfg.foreground.flow_checkpoint)
        flow = None if name == "torch-lk" else name
    return StagePlan(None if backend in WEIGHT_FREE_FEATURES else backend,
                     _resolved(resolve_gate_method, cfg, poses_given),
                     _resolved(masks_method, cfg, masks_given), flow)


def files_read(cfg: GeoConConfig, sections: Sequence[str]) -> FilesRead:
    """(section, path field) of :data:`~geocon_torch.io.pinned_files.PINNED_FILES` -> the file
    a run of ``cfg`` over ``sections`` reads for it (None: the field names none), for the
    stages :func:`stage_plan` gives a clip without masks or poses (a config's hash cannot
    depend on each clip's inputs: with ``gate.method`` "auto" a configured DUSt3R checkpoint
    is pinned, since clips without poses read it). A field the run does not read is left out.
    RAFT without ``foreground.flow_checkpoint`` reads the torch hub cache file."""
    plan = stage_plan(cfg, sections)
    read: Dict[Tuple[str, str], Any] = {}
    if plan.features in CHECKPOINT_BACKENDS:
        read[("features", "checkpoint")] = cfg.features.checkpoint
    if plan.gate == "dust3r":
        read[("gate", "dust3r_checkpoint")] = cfg.gate.dust3r_checkpoint
    if plan.masks == "sam2":
        read[("segment", "sam2_checkpoint")] = cfg.segment.sam2_checkpoint
        read[("segment", "sam2_prompts")] = cfg.segment.sam2_prompts
    if plan.flow is not None:
        read[("foreground", "flow_checkpoint")] = flow_weights(plan.flow,
                                                               cfg.foreground.flow_checkpoint)
    return read


def _builds(plan: StagePlan, cfg: GeoConConfig, device: torch.device
            ) -> List[Tuple[str, Callable[[], Any]]]:
    """(stage, build) of every model ``plan`` loads, cheapest check first."""
    out: List[Tuple[str, Callable[[], Any]]] = []
    if plan.masks == "sam2":  # the prompt file's format (frames are checked per clip)
        out.append(("sam2-prompts", lambda: load_prompts(cfg.segment.sam2_prompts,
                                                         setting="segment.sam2_prompts")))
    if plan.features is not None:
        out.append(("features", lambda: feature_backend(cfg.features, device)))
    if plan.gate == "dust3r":
        out.append(("dust3r", lambda: dust3r_estimator(cfg.gate, device)))
    if plan.masks == "sam2":
        out.append(("sam2", lambda: sam2_predictor(cfg.segment, device)))
    if plan.flow is not None:
        ckpt = cfg.foreground.flow_checkpoint
        out.append(("flow", lambda: cached_flow(plan.flow, checkpoint=ckpt, device=device)))
    return out


def preflight(cfg: GeoConConfig, sections: Sequence[str],
              clips: Iterable[Tuple[bool, bool, torch.device]]) -> None:
    """Build the models of the optional model-backed stages that scoring ``clips`` runs, before
    any clip is read (module docstring), each once per stage device.

    Args:
        cfg: the scoring config; sections: its preset's sections.
        clips: per clip (masks given, poses given, stage device: where its stages run).
    Raises:
        CheckpointError: a missing, unreadable or corrupt checkpoint of a stage that runs.
        OptionalDependencyError: its package / checkout is not importable.
        ConfigError / InputError: a required setting is missing or malformed
            (``segment.sam2_prompts`` unset or not a prompt list, ``segment.sam2_config``).
    """
    done = set()
    for masks_given, poses_given, dev in dict.fromkeys(
            (bool(m), bool(p), torch.device(d)) for m, p, d in clips):
        plan = stage_plan(cfg, sections, masks_given=masks_given, poses_given=poses_given)
        for stage, build in _builds(plan, cfg, dev):
            if (stage, str(dev)) not in done:
                done.add((stage, str(dev)))
                build()


__all__ = ["StagePlan", "WEIGHT_FREE_FEATURES", "files_read", "preflight", "stage_plan"]
