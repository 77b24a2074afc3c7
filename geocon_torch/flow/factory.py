"""The flow backend factory: a backend name (``config.foreground.flow``) -> an estimator.

Kept apart from :mod:`.base` because the backends import the interface from there.
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Union

import torch

from ..checkpoints import cached_model
from ..errors import InputError
from .base import FLOW_BACKENDS, FlowEstimator
from .lk_dense import DenseLKFlow
from .raft import RaftFlow, cached_checkpoint


def resolve_flow(name: str, checkpoint: Optional[str] = None) -> str:
    """The backend ``name`` stands for: "auto" is ``raft_small`` when ``checkpoint`` is given
    or RAFT-small's weights are in the torch hub cache, else ``torch-lk``; any other name is
    itself (InputError for an unknown one)."""
    if name not in FLOW_BACKENDS:
        raise InputError(f"unknown flow backend {name!r}; choose one of {FLOW_BACKENDS}")
    if name != "auto":
        return name
    found = checkpoint is not None or cached_checkpoint("raft_small") is not None
    return "raft_small" if found else "torch-lk"


def get_flow(name: str = "auto", *, checkpoint: Optional[str] = None,
             device: Optional[Union[str, torch.device]] = None, **options) -> FlowEstimator:
    """Build a flow backend.

    Args:
        name: ``"torch-lk"`` (weight-free pyramidal dense Lucas-Kanade, :class:`DenseLKFlow`),
            ``"raft_small"`` / ``"raft_large"`` (torchvision RAFT from a local checkpoint or the
            torch hub cache, never downloaded), or ``"auto"``: RAFT-small (the paper's choice)
            when ``checkpoint`` is given or its weights file is in the torch hub cache, otherwise
            ``torch-lk``.
        checkpoint: local weights file for RAFT (a torchvision state_dict).
        device: where the estimator runs (inputs are moved there and results moved back).
        **options: backend keyword options (e.g. ``levels``, ``iterations`` for torch-lk,
            ``num_flow_updates`` for RAFT).
    Raises:
        GeoConError: unknown name. CheckpointError: RAFT without a usable checkpoint.
    """
    name = resolve_flow(name, checkpoint)
    if name == "torch-lk":
        return DenseLKFlow(device=device, **options)
    return RaftFlow(name, checkpoint=checkpoint, device=device, **options)


def flow_weights(name: str, checkpoint: Optional[str] = None) -> Union[None, str, Path]:
    """The weights file backend ``name`` (resolved by :func:`resolve_flow`) reads: None for the
    weight-free torch-lk; for RAFT ``checkpoint`` when given, else torchvision's file in the
    torch hub cache (:func:`~.raft.cached_checkpoint`; None when it is not there, and building
    the backend then raises CheckpointError)."""
    name = resolve_flow(name, checkpoint)
    if name == "torch-lk":
        return None
    return checkpoint if checkpoint is not None else cached_checkpoint(name)


def cached_flow(name: str = "auto", *, checkpoint: Optional[str] = None,
                device: Optional[Union[str, torch.device]] = None,
                expect_sha256: Optional[str] = None) -> FlowEstimator:
    """:func:`get_flow` (default options) with a RAFT model kept between calls
    (:func:`~geocon_torch.checkpoints.cached_model`, while its weights file (:func:`flow_weights`)
    and the device stay the same): the foreground stage and the scoring preflight
    (:mod:`geocon_torch.sections.stage_models`) share one model per process. torch-lk has no
    weights and is built each time. ``expect_sha256``: the SHA-256 the clip's config pinned for
    ``checkpoint`` (``foreground.flow_checkpoint_sha256``; None: no check).

    Raises:
        as :func:`get_flow`; ConfigError: the checkpoint changed after the config pinned
        ``expect_sha256`` (:func:`~geocon_torch.checkpoints.cached_model`).
    """
    name = resolve_flow(name, checkpoint)
    if name == "torch-lk":
        return get_flow(name, device=device)
    return cached_model("flow", flow_weights(name, checkpoint),
                        (name, checkpoint is None, str(device)),
                        lambda: get_flow(name, checkpoint=checkpoint, device=device),
                        expect_sha256=expect_sha256 if checkpoint is not None else None)
