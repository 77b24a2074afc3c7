"""Calibration files of the report gate: reading, content hash, the shipped defaults.

A calibration file (written by ``geocon calibrate``, :mod:`geocon_torch.bench.calibration`) is
JSON holding, among its provenance, ``thresholds`` = {"H": {"ir_min", "ge_norm_max", ...},
"F": {...}} (required: "ir_min", "ge_norm_max"; optional bounds "ge_fine_norm_max",
"ge_spread_norm_max", "parallax_ref_min" and the older "ge_peak_norm_max", "ge_h_norm_min",
applied when present) and ``ref_long_side`` (GE bounds are px of a frame with that long side; see
:mod:`geocon_torch.measures.calibration` for the gate and the resolution rule) and
``content_hash``: the first 16 hex digits of the SHA-256 of the file's JSON without that key
(compact, sorted keys), which results record.

``config.background.calibration`` picks the file: "default" (the one shipped for the features
backend in ``geocon_torch/data/calibration/<backend>.json``, else the opencv-sift one), a path,
or None (no calibrated verdict). A path that is missing or not a calibration is a ConfigError,
and so is a file of another ``format``, a regime other than "H" / "F" or a bound the gate does
not know (a misspelt bound would be no bound; :data:`GATE_BOUNDS`); a regime may be left out.
Scoring pins the file (:func:`pin_calibration`): ``background.calibration_hash`` in the
result's config record is the file's content hash, and so part of ``config_hash``.
"""
from __future__ import annotations

import difflib
import functools
import hashlib
import json
import math
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from .._json import read_json_file
from ..config import GeoConConfig
from ..errors import ConfigError

#: folder of the shipped calibrations, one ``<features backend>.json`` each
DEFAULT_DIR = Path(__file__).resolve().parents[1] / "data" / "calibration"
#: the calibration "default" falls back to when its backend has none shipped
FALLBACK_BACKEND = "opencv-sift"
#: backends that use another backend's shipped file, and why: torch-sift is the same detector
#: family as kornia-sift (DoG on the doubled scale space, 6-sigma RootSIFT patches, ratio 0.75)
#: and matches at least as accurately (benchmarks/README.md, learned_accuracy.py), so the bounds
#: fitted for kornia-sift apply; a file of its own, when shipped, wins
SHARED_CALIBRATION = {"torch-sift": "kornia-sift"}
FORMAT = "geocon-calibration/1"


def calibration_hash(data: Mapping[str, Any]) -> str:
    """16 hex digits of the SHA-256 of ``data`` without "content_hash" (compact JSON, sorted
    keys): the same for the file as written and as read back."""
    body = {k: v for k, v in data.items() if k != "content_hash"}
    blob = json.dumps(body, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Calibration:
    """A loaded calibration.

    Attributes:
        name: "default:<backend>" for a shipped file, else the file name.
        path: the file; hash: its content hash (recomputed on reading).
        backend: the features backend it was calibrated with; long_side: its working long
            side (px); ref_long_side: px of the GE bounds.
        thresholds: {"H": {"ir_min", "ge_norm_max", ...}, "F": {...}}.
    """

    name: str
    path: str
    hash: str
    backend: Optional[str]
    long_side: Optional[int]
    ref_long_side: float
    thresholds: Dict[str, Dict[str, float]]

    def record(self, backend: Optional[str]) -> Dict[str, Any]:
        """What a result's background block records about the calibration used."""
        return {"name": self.name, "hash": self.hash, "backend": self.backend,
                "backend_matches": backend is None or backend == self.backend,
                "calibrated_long_side": self.long_side, "ref_long_side": self.ref_long_side}


def default_calibration_path(backend: Optional[str]) -> Tuple[str, Path]:
    """(name, path) of the shipped calibration of ``backend`` (else the one it shares,
    :data:`SHARED_CALIBRATION`, else the opencv-sift one)."""
    own = (backend, SHARED_CALIBRATION.get(backend)) if backend else ()
    for b in tuple(x for x in own if x) + (FALLBACK_BACKEND,):
        path = DEFAULT_DIR / f"{b}.json"
        if path.is_file():
            return f"default:{b}", path
    raise ConfigError(f"background.calibration 'default': no shipped calibration in {DEFAULT_DIR} "
                      f"(reinstall geocon_torch or set background.calibration to a file or null)")


def load_calibration(spec: Optional[str], backend: Optional[str] = None
                     ) -> Optional[Calibration]:
    """The calibration ``config.background.calibration`` names (None for None).

    Args:
        spec: "default", a path to a calibration JSON, or None.
        backend: the features backend in use (picks the shipped default).
    Raises:
        ConfigError: the file is missing, not JSON, or has no valid thresholds.
    """
    if spec is None:
        return None
    if spec == "default":
        name, path = default_calibration_path(backend)
    else:
        path = Path(spec).expanduser()
        name = path.name
        if not path.is_file():
            raise ConfigError(f"background.calibration file not found: {spec}")
    path = path.resolve()
    return _read(str(path), path.stat().st_mtime_ns, name)


@functools.lru_cache(maxsize=16)
def _read(path: str, mtime_ns: int, name: str) -> Calibration:
    """Parse and check one file (cached per path and modification time)."""
    data = read_json_file(path, "background.calibration file", ConfigError)
    fmt = data.get("format", FORMAT) if isinstance(data, dict) else FORMAT
    if fmt != FORMAT:  # a newer layout this version cannot read right, or not a calibration
        raise ConfigError(f"background.calibration file {path} has format {fmt!r}; this "
                          f"geocon_torch reads {FORMAT!r} (written by a newer geocon_torch, or "
                          f"not a calibration file)")
    th = data.get("thresholds") if isinstance(data, dict) else None
    if not isinstance(th, dict) or not th or not all(
            isinstance(v, dict) and _num(v.get("ir_min")) and _num(v.get("ge_norm_max"))
            for v in th.values()):
        raise ConfigError(f"background.calibration file {path} is not a calibration: it needs "
                          f"'thresholds' {{regime: {{'ir_min', 'ge_norm_max'}}}}")
    for regime, bounds in th.items():
        for key, value in bounds.items():
            # a bound (every gate bound is named *_min / *_max: measures.calibration.BOUNDS),
            # or another number the file records
            if str(key).endswith(_BOUND_SUFFIXES) or _num(value):
                _finite(path, f"thresholds.{regime}.{key}", value)
    _check_names(path, th)
    long_side = data.get("long_side")
    if long_side is not None:
        _finite(path, "long_side", long_side, positive=True)
    ref_long_side = _finite(path, "ref_long_side", data.get("ref_long_side", 1024),
                            positive=True)
    try:
        digest = calibration_hash(data)
    except ValueError:  # NaN / infinity elsewhere in the file (json reads NaN, Infinity)
        raise ConfigError(f"background.calibration file {path} holds NaN or infinity, which "
                          f"a calibration never records") from None
    if data.get("content_hash") not in (None, digest):  # edited by hand since it was written
        warnings.warn(f"background.calibration file {path} records content_hash "
                      f"{data['content_hash']} but its content hashes to {digest}: it was "
                      f"edited after it was written; results record {digest}", stacklevel=2)
    return Calibration(name, path, digest, data.get("backend"),
                       None if long_side is None else int(long_side), ref_long_side,
                       {str(k): {kk: float(vv) for kk, vv in v.items() if _num(vv)}
                        for k, v in th.items()})


def pin_calibration(config: GeoConConfig, backend: Optional[str] = None) -> GeoConConfig:
    """``config`` with ``background.calibration_hash`` set to the content hash of the file
    ``background.calibration`` resolves to for the features ``backend`` in use (unchanged when
    the calibration is off). Scoring pins its config this way, so the result's config record
    names the calibration file and ``config_hash()`` changes when the file does.

    Raises:
        ConfigError: the file cannot be read, ``calibration_hash`` is given and the file's
            hash differs (the calibration changed since the config was written),
            ``calibration_hash`` is given without a calibration (it would enter
            ``config_hash`` and name a file no verdict used), or it is not 16 lowercase hex
            digits.
    """
    bc = config.background
    pinned = bc.calibration_hash
    if pinned is not None and not re.fullmatch(r"[0-9a-f]{16}", pinned):
        raise ConfigError(f"background.calibration_hash must be a calibration file's content "
                          f"hash (16 lowercase hex digits) or null, got {pinned!r}")
    cal = load_calibration(bc.calibration, backend)
    if cal is None:
        if bc.calibration_hash is not None:
            raise ConfigError(f"background.calibration_hash is {bc.calibration_hash} but "
                              f"background.calibration is null (no calibrated verdict): remove "
                              f"calibration_hash, or set background.calibration to the file "
                              f"it names")
        return config
    if bc.calibration_hash is not None and bc.calibration_hash != cal.hash:
        raise ConfigError(
            f"background.calibration_hash is {bc.calibration_hash} but {cal.name} ({cal.path}) "
            f"has hash {cal.hash}: the calibration changed since this config was written, or "
            f"the config now resolves another file (\"default\" picks one per features "
            f"backend; this one is for {backend or 'the default backend'}); remove "
            f"calibration_hash to use this file, or restore the file / the backend")
    return config if bc.calibration_hash == cal.hash else config.replace(
        background={"calibration_hash": cal.hash})


def _check_names(path: str, th: Mapping[str, Any]) -> None:
    """ConfigError naming the key (and the nearest right name) when ``th`` has a regime the
    gate does not read (:data:`GATE_REGIMES`: its clips would get no verdict) or a bound it
    does not know (:data:`GATE_BOUNDS`: a misspelt bound is no bound): a key named like a
    bound (``*_min`` / ``*_max``) or close to a bound's name. A regime may be left out (its
    clips get no calibrated verdict); other keys (the fit's record: rates, counts) are kept."""
    for regime, bounds in th.items():
        if regime not in GATE_REGIMES:
            near = [r for r in GATE_REGIMES if r == str(regime).strip().upper()]
            raise ConfigError(f"background.calibration file {path}: regime {regime!r} is not "
                              f"one the gate reads ({', '.join(GATE_REGIMES)})"
                              + _did_you_mean(near))
        for key in bounds:
            if key in GATE_BOUNDS or key in _RECORD_KEYS:
                continue
            near = difflib.get_close_matches(str(key), GATE_BOUNDS, n=1, cutoff=0.8)
            if near or str(key).endswith(_BOUND_SUFFIXES):
                raise ConfigError(f"background.calibration file {path}: thresholds.{regime}."
                                  f"{key} is not a bound of the gate ({', '.join(GATE_BOUNDS)};"
                                  f" written by a newer geocon_torch, or a typo)"
                                  + _did_you_mean(near))


def _did_you_mean(near: Sequence[str]) -> str:
    return f": did you mean {near[0]!r}?" if near else ""


def _num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


#: name endings of the gate bounds a regime's thresholds may hold (each must be a finite
#: number; ``measures.calibration.BOUNDS`` names them so, a test keeps them in step)
_BOUND_SUFFIXES = ("_min", "_max")
#: the gated regimes and every bound the gate applies (``measures.calibration.REGIME_BOUNDS``
#: and ``BOUNDS``, which this layer does not import: a test keeps them in step), and what else
#: a regime's thresholds record (the fit's rates and counts,
#: :func:`~geocon_torch.bench.calibration.fit_thresholds`)
GATE_REGIMES = ("H", "F")
GATE_BOUNDS = ("ir_min", "ge_norm_max", "ge_fine_norm_max", "ge_spread_norm_max",
               "parallax_ref_min", "ge_h_norm_min", "ge_peak_norm_max")
_RECORD_KEYS = ("false_pass", "true_pass", "n_clean", "n_corrupted", "pooled", "pooled_reason")


def _finite(path: str, key: str, value: Any, positive: bool = False) -> float:
    """``value`` of ``key`` in the calibration file ``path`` as a float; ConfigError naming the
    key unless it is a finite number (and > 0 with ``positive``: a negative reference long
    side would flip every GE bound into a pass)."""
    try:  # an integer too large for a float is not finite either
        ok = _num(value) and math.isfinite(value) and not (positive and value <= 0)
    except OverflowError:
        ok = False
    if not ok:
        want = "a finite number > 0" if positive else "a finite number"
        raise ConfigError(f"background.calibration file {path}: {key} must be {want}, got "
                          f"{value!r}")
    return float(value)


__all__ = ["Calibration", "DEFAULT_DIR", "FALLBACK_BACKEND", "FORMAT", "GATE_BOUNDS",
           "GATE_REGIMES", "SHARED_CALIBRATION",
           "calibration_hash", "default_calibration_path", "load_calibration", "pin_calibration"]
