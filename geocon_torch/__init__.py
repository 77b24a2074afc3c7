"""geocon_torch: GPU-batched, ground-truth-free geometric consistency metrics for video."""
from ._version import __version__
from .config import GeoConConfig, load_config
from .errors import (CheckpointError, ConfigError, GeoConError, InputError,
                     OptionalDependencyError, ShapeError, VideoReadError)
from .types import Clip, Correspondences, Fit, Keypoints
from .pipeline import score_clip, score_clips  # noqa: E402 (needs the types above)

__all__ = [
    "__version__", "GeoConConfig", "load_config", "GeoConError", "InputError", "ConfigError",
    "VideoReadError", "ShapeError",
    "CheckpointError", "OptionalDependencyError", "Clip", "Keypoints", "Correspondences", "Fit",
    "score_clip", "score_clips",
]
