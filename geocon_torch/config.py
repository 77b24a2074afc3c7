"""All thresholds and defaults in one place (paper defaults), recorded in every result.

``GeoConConfig`` nests one dataclass per stage. ``to_dict()`` / ``from_dict()`` round-trip through
JSON, ``config_hash()`` keys stored results, and ``load_config(path)`` reads a JSON file that may
override any subset of fields (unknown keys are an error, so a typo never passes silently).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Optional, Tuple, Union

from .errors import GeoConError


@dataclass
class IOConfig:
    """Decoding and sampling. Pixel results are reported at the *working* resolution."""

    long_side: Optional[int] = 1024  # working resolution: long side in px, aspect kept; None = native
    stride: int = 1  # keep every stride-th frame
    max_frames: Optional[int] = None  # cap on frames after striding
    letterbox_threshold: float = 16.0 / 255.0  # a bar row/column is darker than this (0..1)
    letterbox_min_fraction: float = 0.02  # bars thinner than this fraction of the side are ignored


@dataclass
class FeatureConfig:
    """Keypoints and matching."""

    backend: str = "auto"  # auto | kornia-sift | opencv-sift | lk-tracks | disk | loftr | lightglue
    max_keypoints: int = 2000
    ratio: float = 0.75  # Lowe ratio
    mutual: bool = False  # mutual nearest-neighbour check
    scales: Tuple[float, ...] = (0.25, 0.5, 1.0)  # paper Algorithm 1
    checkpoint: Optional[str] = None  # local weights for learned backends


@dataclass
class RansacConfig:
    """Batched robust estimation (geometry core)."""

    confidence: float = 0.999
    max_iterations: int = 2000
    batch_hypotheses: int = 256  # hypotheses scored per step per pair
    scoring: str = "msac"  # msac | ransac
    local_optimization: bool = True
    lo_iterations: int = 3
    seed: int = 0


@dataclass
class GateConfig:
    """Translation gate (paper sec. 4.2, Algorithm 1 A)."""

    method: str = "auto"  # auto | poses | dust3r | parallax
    tau_t: float = 0.04  # ||t||_inf gate on first/last relative pose (DUSt3R units)
    hysteresis_low: float = 0.03  # <= low -> H
    hysteresis_high: float = 0.05  # >= high -> F; in between U (both fitted, better supported wins)
    missing_pose: str = "fail_to_F"  # fail_to_F | present_only
    per_pair: bool = False  # per-pair gate with hysteresis instead of one decision per clip
    # weight-free statistic thresholds (calibrated by benchmarks/gate_sweep.py)
    parallax_low: float = 0.5
    parallax_high: float = 1.0
    dust3r_checkpoint: Optional[str] = None
    dust3r_path: Optional[str] = None  # folder holding the dust3r repository (optional import)


@dataclass
class SegmentConfig:
    """Mask-first background separation (paper sec. 4.3)."""

    method: str = "auto"  # auto | files | sam2 | motion | none
    safety_margin_px: int = 4  # dilate object masks by this many px before removing them
    sam2_checkpoint: Optional[str] = None
    sam2_config: Optional[str] = None


@dataclass
class BackgroundConfig:
    """IR / GE (paper eqs. 7-13)."""

    tau_h: float = 2.0  # px, symmetric transfer error (eq. 8)
    tau_f: float = 0.1  # Sampson distance in Hartley-normalised coordinates
    min_inliers: int = 30  # pairs with fewer inliers are invalid
    report_ir: float = 0.97  # report gate: IR >= 0.97
    report_ge_px: float = 3.5  # report gate: GE <= 3.5 px
    pair_stride: int = 1
    sensitivity_tau_h: Tuple[float, ...] = (0.5, 1.0, 2.0, 3.0, 4.0)
    sensitivity_tau_f: Tuple[float, ...] = (0.025, 0.05, 0.1, 0.2, 0.4)


@dataclass
class ForegroundConfig:
    """AdaDFRC-W2 (paper eqs. 14-15, 17)."""

    flow: str = "auto"  # auto | raft_small | raft_large | torch-lk
    flow_checkpoint: Optional[str] = None
    grid: int = 8  # adaptive N x N grid over the object box
    score: str = "wmse"  # wmse | w2
    occlusion_weighting: bool = True
    fb_threshold_px: float = 1.0  # forward-backward consistency tolerance
    min_object_pixels: int = 64
    percentile: float = 0.9  # AdaP90


@dataclass
class EpipolarConfig:
    """WorldAtlas / GVGC-style epipolar trio (seed 003)."""

    max_width: int = 640
    pair_stride: int = 1
    max_pairs: int = 8
    sift_features: int = 2000
    ratio: float = 0.75
    min_matches: int = 12
    ransac_threshold_px: float = 1.0
    confidence: float = 0.999
    max_iterations: int = 10000
    min_inliers: int = 8
    error_norm_px: float = 5.0  # normalised score = clip(1 - error / 5, 0, 1)
    relaxed_ratio: float = 0.85
    relaxed_min_matches: int = 8
    seed: int = 0
    path: str = "auto"  # auto | opencv | torch


@dataclass
class GeoConConfig:
    """The whole configuration; every result records ``to_dict()`` and ``config_hash()``."""

    io: IOConfig = field(default_factory=IOConfig)
    features: FeatureConfig = field(default_factory=FeatureConfig)
    ransac: RansacConfig = field(default_factory=RansacConfig)
    gate: GateConfig = field(default_factory=GateConfig)
    segment: SegmentConfig = field(default_factory=SegmentConfig)
    background: BackgroundConfig = field(default_factory=BackgroundConfig)
    foreground: ForegroundConfig = field(default_factory=ForegroundConfig)
    epipolar: EpipolarConfig = field(default_factory=EpipolarConfig)
    preset: str = "geocon"  # geocon | worldatlas | gvgc | all
    seed: int = 0

    def to_dict(self) -> Dict[str, Any]:
        return _to_jsonable(dataclasses.asdict(self))

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "GeoConConfig":
        return _merge(cls(), data, "config")

    def replace(self, **sections: Any) -> "GeoConConfig":
        """Copy with overrides, e.g. ``cfg.replace(background={"tau_h": 3.0})``."""
        return _merge(GeoConConfig.from_dict(self.to_dict()), sections, "config")

    def config_hash(self) -> str:
        """Stable 16-hex-digit hash of the JSON form (sorted keys)."""
        blob = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    return obj


def _merge(target: Any, data: Dict[str, Any], where: str) -> Any:
    if not isinstance(data, dict):
        raise GeoConError(f"{where} must be a mapping, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(target)}
    for key, value in data.items():
        if key not in known:
            raise GeoConError(f"unknown config key {where}.{key}; known: {sorted(known)}")
        current = getattr(target, key)
        if dataclasses.is_dataclass(current):
            _merge(current, value, f"{where}.{key}")
        else:
            if isinstance(current, tuple) and isinstance(value, (list, tuple)):
                value = tuple(value)
            setattr(target, key, value)
    return target


def load_config(source: Union[None, str, Path, Dict[str, Any], GeoConConfig]) -> GeoConConfig:
    """Config from None (defaults), a dict, a GeoConConfig, or a JSON file path."""
    if source is None:
        return GeoConConfig()
    if isinstance(source, GeoConConfig):
        return source
    if isinstance(source, dict):
        return GeoConConfig.from_dict(source)
    path = Path(source)
    if not path.is_file():
        raise GeoConError(f"config file not found: {path}")
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise GeoConError(f"config file {path} is not valid JSON: {exc}") from exc
    return GeoConConfig.from_dict(data)
