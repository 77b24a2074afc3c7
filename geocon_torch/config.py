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

from ._json import read_json_file
from .errors import ConfigError


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
    # mutual nearest-neighbour check: many-to-one ratio matches are a matcher artifact that IR
    # would otherwise count against the video (pure rotation: IR_H 0.98 without, 0.996 with)
    mutual: bool = True
    scales: Tuple[float, ...] = (0.25, 0.5, 1.0)  # paper Algorithm 1
    # how a scale s < 1 is realised: "pyramid" detects again on the frames shrunk to s;
    # "scale_space" (opencv-sift, s a power of two) takes the octaves of one working-resolution
    # detection that the shrunk frames also have (features.opencv_sift); "auto": scale_space
    # where it applies, else pyramid
    scale_mode: str = "auto"
    checkpoint: Optional[str] = None  # local weights for learned backends
    content_margin_px: int = 4  # content mask eroded by this much before keypoints are kept
    # lk-tracks (Shi-Tomasi + pyramidal Lucas-Kanade, OpenCV parameter meanings)
    lk_quality: float = 0.001
    lk_min_distance: float = 3.0
    lk_block: int = 3
    lk_window: int = 21
    lk_levels: int = 3  # OpenCV maxLevel (levels + 1 pyramid images)
    lk_fb_threshold: float = 1.5  # px, forward-backward error of a kept track
    lk_backend: str = "torch"  # torch | opencv


@dataclass
class RansacConfig:
    """Batched robust estimation (geometry core)."""

    confidence: float = 0.999
    max_iterations: int = 2000
    batch_hypotheses: int = 32  # minimal samples drawn per pair per round (geometry batch_size)
    scoring: str = "msac"  # msac | ransac
    local_optimization: bool = True
    lo_iterations: int = 6  # IRLS refits per local optimisation (on <= 256 points)
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
    parallax_low: float = 0.13  # parallax_excess <= low -> H (gate_sweep.py calibration)
    parallax_high: float = 0.27  # >= high -> F; between: U (GRIC or support margin decide)
    dust3r_checkpoint: Optional[str] = None
    dust3r_path: Optional[str] = None  # folder holding the dust3r repository (optional import)
    statistic: str = "parallax_excess"  # | parallax_fraction | residual_parallax | gric_delta
    parallax_pairs: str = "first_last"  # weight-free gate pairs: first_last | adjacent
    dust3r_image_size: int = 512  # DUSt3R input size (224 or 512 models)
    u_margin: float = 0.05  # U band: F when IR_F - IR_H > u_margin or GRIC prefers F


@dataclass
class SegmentConfig:
    """Mask-first background separation (paper sec. 4.3)."""

    method: str = "auto"  # auto | files | sam2 | motion | none
    safety_margin_px: int = 4  # dilate object masks by this many px before removing them
    sam2_checkpoint: Optional[str] = None
    sam2_config: Optional[str] = None
    sam2_prompts: Optional[str] = None  # JSON file of box / point prompts (see segment.sam2)
    sam2_image_size: Optional[int] = None  # override the model's input size (None: config)
    # weight-free motion segmentation (segment.motion)
    motion_threshold: float = 0.08  # photometric residual (gray, 0..1) after the background warp
    motion_min_area: int = 64  # px; smaller blobs are dropped
    motion_max_fraction: float = 0.5  # objects covering more of the content -> unreliable, dropped
    motion_open_px: int = 1  # morphological opening radius
    motion_close_px: int = 3  # morphological closing radius
    motion_min_frames: int = 2  # a track must span this many frames
    motion_seed_radius_px: int = 8  # background-model outlier matches -> seed discs
    motion_min_seeds: int = 12  # coherent seed points (2 per match) a component needs
    motion_seed_factor: float = 2.0  # seed = residual > factor x tau (tau_H or tau_F)


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
    sensitivity: bool = False  # run the (tau_h, tau_f) scan and record it in the result
    min_valid_pairs: int = 1  # fewer valid pairs -> not_applicable
    category_static_px: float = 0.5  # median background motion per pair below this -> static cam
    category_rotation_deg: float = 0.1  # F regime: inter-frame rotation >= this -> Complex
    category_focal: float = 1.0  # assumed focal length / long side for the rotation estimate
    per_pair: bool = True  # record per-pair IR / GE in the result


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
    scales: Tuple[float, ...] = (0.25, 0.5, 1.0)  # flow scales (paper Algorithm 1 D)
    scale_reduction: str = "finest"  # finest valid scale (default) | median over valid scales
    max_pairs: Optional[int] = None  # cap on scored adjacent pairs (spread evenly over the clip)
    batch_pairs: int = 8  # pairs per flow chunk (bounds memory; each chunk is batched)


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
    resize_interpolation: str = "area"  # area (cv2.INTER_AREA) | linear (cv2.resize default)
    fallback_enabled: bool = True  # relaxed matching, then Shi-Tomasi + LK, when no pair is valid
    tracking_max_corners: int = 2000
    tracking_quality: float = 0.001
    tracking_min_distance: float = 3.0
    tracking_block: int = 3
    tracking_window: int = 21
    tracking_levels: int = 3
    tracking_fb_threshold_px: float = 1.5
    tracking_min_tracks: int = 8
    # LK fallback photometric guard: keep a track only when the zero-mean NCC of the
    # tracking_ncc_window^2 patches around x1 (frame i) and x2 (frame j) is >= tracking_min_ncc
    # (real content ~0.99, independent noise < 0.5); -1.0 disables the guard
    tracking_min_ncc: float = 0.8
    tracking_ncc_window: int = 11  # odd, px at the analysis resolution
    # fallback stages only: a pair is valid only when its F inlier set is meaningful a contrario
    # (ORSA): NFA = expected number of equally good chance fits of unrelated matches <= this
    fallback_max_nfa: float = 0.01
    features: str = "auto"  # torch path: auto (kornia-sift on CUDA, opencv-sift on CPU) | name
    opencv_threads: int = 1  # cv2.setNumThreads during the OpenCV path (restored afterwards)
    # gvgc preset (Li et al. 2024, original code: 1280x720, SIFT 40k, ratio 0.85, FM_RANSAC 3 px)
    gvgc_size: Tuple[int, int] = (720, 1280)  # (H, W) every frame is resized to
    gvgc_intervals: Tuple[int, ...] = (60, 50, 40, 30, 20, 10)
    gvgc_min_frames: int = 71  # the original evaluates frames 0..70
    gvgc_sift_features: int = 40000
    gvgc_ratio: float = 0.85
    gvgc_threshold_px: float = 3.0
    gvgc_confidence: float = 0.99  # cv2.findFundamentalMat FM_RANSAC defaults
    gvgc_max_iterations: int = 1000
    gvgc_matcher: str = "flann"  # flann (as the original) | bf (exact 2-NN)


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
    preset: str = "geocon"  # geocon | background | worldatlas | gvgc | all

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
        raise ConfigError(f"{where} must be a mapping, got {type(data).__name__}")
    known = {f.name: f for f in dataclasses.fields(target)}
    for key, value in data.items():
        if key not in known:
            raise ConfigError(f"unknown config key {where}.{key}; known: {sorted(known)}")
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
    return GeoConConfig.from_dict(read_json_file(source, "config file"))
