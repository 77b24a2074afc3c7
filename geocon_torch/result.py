"""The per-clip result (``ClipResult``) and its versioned JSON schema.

``ClipResult.to_dict()`` is plain JSON (no tensors, no NaN: missing numbers are ``None``)::

    {"schema_version": "1.0", "clip": str, "path": str | None, "content_hash": str | None,
     "status": "ok" | "not_applicable" | "error", "reason": str | None, "regime": "H" | "F" | None,
     "gate": {"method", "statistic", "thresholds", "decision", "evidence", ...},
     "background": {"ir", "ge_px", "ir_h", "ge_h_px", "ir_f", "ge_f_px", "valid_pairs", "pairs",
                    "pass", "per_pair": [...], "status", "reason", ...},
     "foreground": {...}, "epipolar": {...},     # present when the preset asks for them
     "category": str | None, "config": {...}, "config_hash": str, "version": str,
     "backends": {"features", "flow", "masks", "gate"}, "timing_s": {...}}

Pixel values (``ge_px`` ...) are at the clip's *working* resolution (``config.io.long_side``).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Dict, Optional

import torch

from ._version import __version__
from .config import GeoConConfig
from .errors import InputError

SCHEMA_VERSION = "1.0"
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
    gate: Dict[str, Any] = field(default_factory=dict)
    background: Dict[str, Any] = field(default_factory=dict)
    foreground: Optional[Dict[str, Any]] = None
    epipolar: Optional[Dict[str, Any]] = None
    category: Optional[str] = None
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
            "regime": self.regime, "gate": self.gate, "background": self.background,
        }
        if self.foreground is not None:
            out["foreground"] = self.foreground
        if self.epipolar is not None:
            out["epipolar"] = self.epipolar
        out.update({"category": self.category, "config": self.config,
                    "config_hash": self.config_hash, "version": self.version,
                    "backends": self.backends, "timing_s": self.timing_s})
        out.update(self.extra)
        return jsonable(out)

    def to_json(self, **kwargs: Any) -> str:
        return json.dumps(self.to_dict(), allow_nan=False, **kwargs)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "ClipResult":
        """Inverse of :meth:`to_dict` (unknown keys go to ``extra``)."""
        data = dict(data)
        data.pop("schema_version", None)
        names = {f for f in cls.__dataclass_fields__ if f != "extra"}
        known = {k: data.pop(k) for k in list(data) if k in names}
        return cls(**known, extra=data)
