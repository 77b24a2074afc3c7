"""The per-clip result (``ClipResult``) and its versioned JSON schema.

``ClipResult.to_dict()`` is plain JSON (no tensors, no NaN: missing numbers are ``None``)::

    {"schema_version": "3.0", "clip": str, "path": str | None, "content_hash": str | None,
     "status": "ok" | "not_applicable" | "error", "reason": str | None, "regime": "H" | "F" | None,
     "score": float | None,          # headline score in [0, 1], higher is better (None: not
                                     # scored), see measures.headline; "score_terms": its terms
     "io": {"source", "announced_frames", "decoded_frames", "lost_frames", "lost_fraction",
            "timestamp_gaps", "decode_errors", "first_errors", "truncated",
            "variable_frame_rate", "duration_frames", "concealed_frames", "size_changes",
            "first_size_change", ["transparent_frames", "transparent_fraction"],
            ["preroll_frames"], ["corrupt_packets"], ["container_count_mismatch"],
            ["truncation"], ["length_known", "last_frame_concealed"],
            ["video_stream", "video_streams", "video_stream_size"],
            ["color": {"pix_fmt", "bits", "transfer", "primaries", "matrix", "range"}]},
                                     # what decoding lost ({} for rows written before it was
                                     # recorded; keys added later are absent from older rows;
                                     # transparent_*: only for a source with transparent
                                     # pixels; color: video files only, FFmpeg's tag names;
                                     # the container keys only where they apply: an edit
                                     # list's preroll, a count mismatch, a cut GIF, a format
                                     # without a length, several video streams)
     "warnings": [str, ...],         # scored, but e.g. some frames were lost while decoding
     "gate": {"method", "statistic", "thresholds", "decision", "evidence", ...},
     "background": {"ir", "ge_px", "ir_h", "ge_h_px", "ir_f", "ge_f_px", "valid_pairs", "pairs",
                    "pass", "pass_calibrated", "calibration": {"name", "hash", "thresholds",
                    ...}, "per_pair": [...], "status", "reason", ...},  # pass: the paper's
                                     # report gate; pass_calibrated: the gate calibrated on
                                     # grounded scenes (config background.calibration; absent
                                     # when it is null), see measures.calibration;
                                     # content_long_side: the long side (working px) of the
                                     # content without letterbox / pillarbox bars, what GE
                                     # and the calibrated bounds are normalised by (absent in
                                     # older rows: the working long side)
     "foreground": {...}, "epipolar": {...},     # present when the preset asks for them;
                                     # epipolar["implementation"]: "opencv" | "torch"
     "behaviour": str | None,        # post-hoc behaviour (paper Algorithm 1 E): "Static",
                                     # "Rotation-dominant", ..., "Stress" (measured)
     "prompt_category": str | None,  # prompt family C1-C6 or a free label (given, e.g. by
                                     # the manifest; None for a clip scored on its own)
     "config": {...}, "config_hash": str, "version": str,  # config: the scoring config with
                                     # background.calibration_hash = the calibration file's
                                     # content hash (part of config_hash)
     "motion": {"max_mad", "pairs", "frozen", ["held_frames"], ["epipolar_dpo": {"every",
                "max_mad", "pairs", "frozen"}]} | None,  # how much the frames read move
                                     # (io.sampling): held_frames (only when some frames,
                                     # not all, repeat the one before them, e.g. every frame
                                     # shown twice): their pairs of two identical frames are
                                     # not scored (io.pairs.drop_held_pairs; a warning says
                                     # so); max_mad: the largest
                                     # mean |difference| of consecutive frames read, grey
                                     # levels of 255 at native resolution, measured while
                                     # they are decoded; frozen: pairs >= 1 and max_mad <= 0.5
                                     # (PQ 0.126, HLG 0.236: io.sampling.frozen_max_mad)
                                     # (the rewards' rule; the score is kept: category C1);
                                     # epipolar_dpo: frames 0, 15, 30, ... (presets with that
                                     # section, not for a Clip input); absent in older rows
     "numeric_env": {"machine", "torch", "torch_cpu", "opencv", "opencv_cpu"},  # what
                                     # decides the last bits besides input, config and seed
                                     # (CPU class, library builds: _numeric_env); absent in
                                     # older rows; not a difference for geocon merge
     "backends": {"features", "flow", "masks", "gate", "gate_view"}, "timing_s": {...}}
                                     # a background the scoring backend left with too little
                                     # texture and ``features.fallback`` scored: backends
                                     # "features" is the fallback, "features_fallback_from" the
                                     # first backend, background["fallback"] what happened and
                                     # pass_calibrated None + "pass_calibrated_reason" without
                                     # a calibration of the fallback backend

Schema history: 1.0 had one ``category`` field holding either a prompt family or a behaviour;
2.0 splits it into ``prompt_category`` and ``behaviour``; 3.0 renames the ``epipolar`` block's
``path`` key (which named the implementation, "opencv" or "torch") to ``implementation``
(docs/GLOSSARY.md: a *path* is a file). :meth:`ClipResult.from_dict` (and so the store, the
report, the statistics and ``geocon explain``) read 1.x and 2.x rows through
:func:`migrate_result`.

Partial decodes are never silent (:mod:`geocon_torch.io.integrity`): a clip that lost more than
``config.io.max_lost_fraction`` of its frames has ``status: "error"`` with the reason and no
scores; a smaller loss is scored with a ``warnings`` entry. Both fields were added within 2.0
(older rows read back with ``io = {}`` and ``warnings = []``).

Pixel values (``ge_px`` ...) are at the clip's *working* resolution (``config.io.long_side``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

from ._version import __version__
from .config import GeoConConfig
from .errors import InputError

SCHEMA_VERSION = "3.0"
#: the blocks whose ``path`` key named the implementation in schema 1.x / 2.x (2.x wrote the
#: GVGC block of preset "all" with it too)
IMPLEMENTATION_BLOCKS = ("epipolar", "epipolar_gvgc")
# post-hoc behaviours (paper Algorithm 1 E); anything else in a 1.x ``category`` was a prompt label
BEHAVIOURS = ("Static", "Rotation-dominant", "Translation-dominant", "StaticCam+MovingObjs",
              "Complex", "Stress")
STATUSES = ("ok", "not_applicable", "error")


def jsonable(obj: Any) -> Any:
    """Recursively turn tensors / numpy scalars / tuples into JSON values; NaN and inf -> None."""
    if isinstance(obj, torch.Tensor):
        obj = obj.detach().cpu()
        return jsonable(obj.item() if obj.ndim == 0 else obj.tolist())
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item) and not isinstance(obj, (str, bytes)):
        try:
            obj = obj.item()  # numpy scalar
        except (TypeError, ValueError):
            pass
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


@dataclass
class ClipResult:
    """Scores and provenance of one clip (see the module docstring for the JSON schema)."""

    clip: str
    status: str = "ok"
    reason: Optional[str] = None
    path: Optional[str] = None
    content_hash: Optional[str] = None
    regime: Optional[str] = None
    score: Optional[float] = None
    io: Dict[str, Any] = field(default_factory=dict)
    warnings: List[str] = field(default_factory=list)
    gate: Dict[str, Any] = field(default_factory=dict)
    background: Dict[str, Any] = field(default_factory=dict)
    foreground: Optional[Dict[str, Any]] = None
    epipolar: Optional[Dict[str, Any]] = None
    epipolar_dpo: Optional[Dict[str, Any]] = None
    behaviour: Optional[str] = None
    prompt_category: Optional[str] = None
    config: Dict[str, Any] = field(default_factory=dict)
    config_hash: str = ""
    version: str = __version__
    backends: Dict[str, Any] = field(default_factory=dict)
    timing_s: Dict[str, float] = field(default_factory=dict)
    extra: Dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise InputError(f"status must be one of {STATUSES}, got {self.status!r}")

    @classmethod
    def failed(cls, clip: str, status: str, reason: str, config: GeoConConfig, *,
               path: Optional[str] = None, **fields: Any) -> "ClipResult":
        """A result with ``status`` ('error' or 'not_applicable') and its reason; no scores."""
        return cls(clip=clip, status=status, reason=reason, path=path, config=config.to_dict(),
                   config_hash=config.config_hash(), **fields)

    @property
    def ir(self) -> Optional[float]:
        return self.background.get("ir")

    @property
    def ge_px(self) -> Optional[float]:
        return self.background.get("ge_px")

    def to_dict(self) -> Dict[str, Any]:
        out: Dict[str, Any] = {
            "schema_version": SCHEMA_VERSION, "clip": self.clip, "path": self.path,
            "content_hash": self.content_hash, "status": self.status, "reason": self.reason,
            "regime": self.regime, "score": self.score, "score_terms": {}, "io": self.io,
            "warnings": list(self.warnings),
            "gate": self.gate, "background": self.background,
        }
        if self.foreground is not None:
            out["foreground"] = self.foreground
        if self.epipolar is not None:
            out["epipolar"] = self.epipolar
        if self.epipolar_dpo is not None:
            out["epipolar_dpo"] = self.epipolar_dpo
        out.update({"behaviour": self.behaviour, "prompt_category": self.prompt_category,
                    "config": self.config,
                    "config_hash": self.config_hash, "version": self.version,
                    "backends": self.backends, "timing_s": self.timing_s})
        out.update(self.extra)
        return jsonable(out)

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, **kwargs)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ClipResult":
        """Inverse of :meth:`to_dict` (unknown keys go to ``extra``)."""
        data = migrate_result(data)
        data.pop("schema_version", None)
        names = {f for f in cls.__dataclass_fields__ if f != "extra"}
        known = {k: data.pop(k) for k in list(data) if k in names}
        return cls(**known, extra=data)


def finite_number(value: Any) -> Optional[float]:
    """``value`` as a float when it is a finite int or float (not a bool), else None (None,
    text, NaN / inf): how the text surfaces read a stored number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    return None


def gvgc_block(result: Dict[str, Any]) -> Dict[str, Any]:
    """A result's GVGC block: ``epipolar_gvgc`` (preset "all"), else its ``epipolar`` block when
    that holds GVGC's numbers (preset "gvgc" writes it there: the block's ``preset`` says so, or
    it has ``median_error`` / ``keep_rate`` without the WorldAtlas trio), else {}."""
    gv = result.get("epipolar_gvgc")
    if isinstance(gv, dict) and gv:
        return gv
    ep = result.get("epipolar")
    if isinstance(ep, dict) and "epipolar_error" not in ep and (
            ep.get("preset") == "gvgc" or "median_error" in ep or "keep_rate" in ep):
        return ep
    return {}


def migrate_result(data: Dict[str, Any]) -> Dict[str, Any]:
    """A copy of a result dict in the current schema (3.0).

    1.x rows carry one ``category``: a paper behaviour name (:data:`BEHAVIOURS`) moves to
    ``behaviour``, any other value (C1-C6 or a free prompt label) to ``prompt_category``. 1.x and
    2.x rows name the implementation of the ``epipolar`` (and ``epipolar_gvgc``) block ``path``:
    it moves to ``implementation``. Rows already in 3.x are returned as a copy, unchanged.
    """
    out = dict(data)
    major = str(out.get("schema_version", "1.0")).split(".")[0]
    if major == "1" or "category" in out:
        old = out.pop("category", None)
        if old in BEHAVIOURS:
            out.setdefault("behaviour", old)
        elif old is not None:
            out.setdefault("prompt_category", old)
        out.setdefault("behaviour", None)
        out.setdefault("prompt_category", None)
        out["schema_version"] = SCHEMA_VERSION
    if major in ("1", "2"):
        for name in IMPLEMENTATION_BLOCKS:
            block = out.get(name)
            if isinstance(block, dict) and "path" in block:
                block = dict(block)
                block.setdefault("implementation", block.pop("path"))
                out[name] = block
        out["schema_version"] = SCHEMA_VERSION
    return out
