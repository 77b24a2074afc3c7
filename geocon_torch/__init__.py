"""geocon_torch: GPU-batched, ground-truth-free geometric consistency metrics for video.

Entry points: :func:`score_clip` / :func:`score_clips` (one result dict per clip),
:mod:`geocon_torch.metrics` (torchmetrics classes and the functional API),
:func:`geometric_reward` (training-time rewards), :mod:`geocon_torch.io` (reading video).
"""
from ._version import __version__
from .config import GeoConConfig, load_config
from .errors import (ArgumentTypeError, CheckpointError, ClipTensorError, ConfigError,
                     GeoConError, InputError, OptionalDependencyError, ShapeError,
                     VideoReadError)
from .types import Clip, Correspondences, Fit, Keypoints
from .pipeline import score_clip, score_clips
from .rewards import geometric_reward

__all__ = [
    "__version__", "GeoConConfig", "load_config", "GeoConError", "InputError", "ConfigError",
    "ArgumentTypeError", "VideoReadError", "ShapeError", "ClipTensorError", "CheckpointError",
    "OptionalDependencyError", "Clip", "Keypoints", "Correspondences", "Fit", "score_clip",
    "score_clips", "geometric_reward",
]
