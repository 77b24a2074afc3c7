"""All thresholds and defaults in one place (paper defaults), recorded in every result.

``GeoConConfig`` nests one dataclass per stage; sections whose settings repeat elsewhere are
nested once more: :class:`LKConfig` (Shi-Tomasi + pyramidal Lucas-Kanade, ``features.lk`` and,
extended by the epipolar guard as :class:`TrackingConfig`, ``epipolar.tracking``),
:class:`ProtocolRansacConfig` (``epipolar.ransac``, ``epipolar.gvgc.ransac``) and
:class:`GvgcConfig` (``epipolar.gvgc``).

Validation. Every field declares its rule next to it (``_int`` / ``_num`` / ``_flag`` /
``_text`` / ``_choice`` / ``_nums`` / ``_ints`` put a :class:`Rule` in the field's metadata):
type (an int field rejects 2.5 and booleans, a bool field rejects 1 and "yes", a float field
accepts ints and stores them as floats), range, and for option strings the allowed values (the
``*_CHOICES`` tuples below are the one list other modules import). Every way of building a
config checks it -- ``GeoConConfig(...)`` / ``IOConfig(...)`` (and attribute assignment),
``from_dict``, ``replace``, ``load_config`` (dict or JSON file) and the CLI flags (which go through
``replace``) -- and a bad value raises :class:`~geocon_torch.errors.ConfigError` naming the field,
the value and what is allowed, e.g. ``io.long_side must be a positive int, null or 'auto', got
'512'``.

Old configs. Configs written before the nested sections used flat keys (``features.lk_window``,
``epipolar.tracking_min_ncc``, ``epipolar.gvgc_size``, ``epipolar.confidence``, ...). Every such
key is listed in :data:`RENAMED_KEYS` and moved to its nested place when a dict or file is read,
with a ``DeprecationWarning`` naming the new key; values are unchanged, so results are too.
Nested keys renamed to match docs/GLOSSARY.md (``features.lk.fb_threshold`` ->
``fb_threshold_px``, ``epipolar.path`` -> ``epipolar.implementation``) are listed in
:data:`RETIRED_KEYS` and migrated the same way; the old attribute names still read and write
(a section's ``_aliases``), with a DeprecationWarning.

Stored results. A rule added after a result was scored (e.g. ``features.fallback`` "disk"
refused) must not make the result unreadable: ``GeoConConfig.from_dict(config, strict=False)``
keeps every value a rule now refuses as stored, skips the failing cross-field checks, and
records each ConfigError in ``invalid_reason`` (None when the config is valid). Such a config
can be shown (``geocon explain``, the report) but not scored: ``load_config``, ``replace`` and
every scoring entry point raise ConfigError on it. Its stored ``config_hash`` is the row's.

``to_dict()`` / ``from_dict()`` round-trip through JSON; ``config_hash()`` keys stored results
(see its docstring); ``load_config(path)`` reads a JSON file that may override any subset of fields
(unknown keys are an error, so a typo never passes silently).
"""
from __future__ import annotations

import copy
import dataclasses
import difflib
import hashlib
import json
import math
import numbers
import os
import warnings
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, ClassVar, Dict, List, Mapping, Optional, Tuple, Union
from pathlib import Path

from ._json import read_json_file
from .errors import ConfigError
from .presets import PRESET_NAMES, get_preset

# ---------------------------------------------------------------------------------------------
# allowed option strings (the single source; other modules import these)
FEATURE_BACKEND_CHOICES = ("auto", "kornia-sift", "opencv-sift", "torch-sift", "lk-tracks", "disk",
                           "loftr", "lightglue", "xfeat", "aliked", "xfeat-lighterglue",
                           "aliked-lightglue", "disk-lightglue")
#: the feature backends that load ``features.checkpoint`` (local weights, never downloaded)
CHECKPOINT_BACKENDS = ("disk", "loftr", "lightglue")
#: ``features.fallback``: any backend but "auto" (a fallback names the backend it falls back to)
#: and those that need ``features.checkpoint``, which is the scoring backend's
FALLBACK_CHOICES = tuple(b for b in FEATURE_BACKEND_CHOICES
                         if b != "auto" and b not in CHECKPOINT_BACKENDS)
SCALE_MODE_CHOICES = ("auto", "pyramid", "scale_space")
LK_BACKEND_CHOICES = ("auto", "torch", "opencv")
RANSAC_SCORING_CHOICES = ("msac", "ransac")
GATE_METHOD_CHOICES = ("auto", "poses", "dust3r", "parallax")
MISSING_POSE_CHOICES = ("fail_to_F", "present_only")
GATE_STATISTIC_CHOICES = ("parallax_magnitude", "parallax_excess", "parallax_fraction",
                          "residual_parallax", "gric_delta")
PARALLAX_PAIRS_CHOICES = ("first_last", "adjacent")
SEGMENT_METHOD_CHOICES = ("auto", "files", "sam2", "motion", "none")
FLOW_CHOICES = ("auto", "torch-lk", "raft_small", "raft_large")
FOREGROUND_SCORE_CHOICES = ("wmse", "w2")
SCALE_REDUCTION_CHOICES = ("finest", "median")
EPIPOLAR_PATH_CHOICES = ("auto", "opencv", "torch")
RESIZE_INTERPOLATION_CHOICES = ("area", "linear")
EPIPOLAR_FEATURE_CHOICES = ("auto", "kornia-sift", "opencv-sift", "torch-sift")
GVGC_MATCHER_CHOICES = ("flann", "bf")
PRESET_CHOICES = PRESET_NAMES  # the preset table (geocon_torch.presets)
SOFT_MODEL_CHOICES = ("homography", "fundamental", "auto")
#: what a runtime field is (field metadata "runtime"): a "setting" (chunk sizes, thread counts:
#: results do not depend on it) is left out of config_hash; a "path" (a local checkpoint or
#: checkout) enters it only as given / not given (moving the file changes no number, and "auto"
#: choices depend on whether one is configured)
RUNTIME_KINDS = ("setting", "path")
#: the largest ``ransac.seed`` / ``epipolar.seed``: cv2's RNG seed is a C int, and RANSAC
#: streams are keyed by (seed + row) modulo 2**32 (int64 seeds: a seed near 2**63 would
#: overflow, one beyond 2**32 names no new stream)
MAX_SEED = 2 ** 31 - 1


#: the ConfigError messages of the lenient read in progress
#: (``GeoConConfig.from_dict(strict=False)``); None: every read is strict
_LENIENT: ContextVar[Optional[List[str]]] = ContextVar("geocon_lenient_read", default=None)


def _recorded(exc: ConfigError) -> bool:
    """Whether a lenient read is in progress (``exc`` is then recorded, not raised)."""
    problems = _LENIENT.get()
    if problems is not None and str(exc) not in problems:
        problems.append(str(exc))
    return problems is not None


# ---------------------------------------------------------------------------------------------
# field rules
@dataclass(frozen=True)
class Rule:
    """What one config field accepts.

    Attributes:
        kind: "int", "float", "bool", "str", "choice", "ints" or "floats" (the last two: a
            non-empty list / tuple of such numbers, stored as a tuple).
        low, high: bounds, inclusive unless ``low_open`` / ``high_open``; None: unbounded.
        nullable: None (JSON null) is allowed.
        odd: an odd int (LK / patch windows).
        choices: the allowed strings of a "choice".
        length: the exact length of an "ints" / "floats" tuple (None: any, at least 1).
        words: strings a number field also accepts (e.g. "auto").
        as_set: a "floats" tuple that is a set (scales): stored sorted, without duplicates, so
            one set has one config hash.
    """

    kind: str
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False
    high_open: bool = False
    nullable: bool = False
    odd: bool = False
    choices: Tuple[str, ...] = ()
    length: Optional[int] = None
    words: Tuple[str, ...] = ()
    as_set: bool = False

    def describe(self) -> str:
        """What the field accepts, in words (the end of a ConfigError message)."""
        if self.kind == "bool":
            text = "true or false"
        elif self.kind == "str":
            text = "a string"
        elif self.kind == "choice":
            text = "one of " + ", ".join(repr(c) for c in self.choices)
        elif self.kind in ("ints", "floats"):
            size = f"a list of {self.length}" if self.length else "a non-empty list of"
            text = f"{size} {self._numbers(plural=True)}"
        else:
            text = self._numbers(plural=False)
        extra = (["null"] if self.nullable else []) + [repr(w) for w in self.words]
        if len(extra) == 2:
            return f"{text}, {extra[0]} or {extra[1]}"
        return text + (f" or {extra[0]}" if extra else "")

    def _numbers(self, plural: bool) -> str:
        noun = ("int" if self.kind in ("int", "ints") else "number") + ("s" if plural else "")
        art = "" if plural else ("an " if noun.startswith("i") else "a ")
        g = _show_int if noun.startswith("int") else _show_float  # every digit of an int bound
        if self.odd:
            return f"{'' if plural else 'an '}odd {noun} >= {g(self.low)}"
        adjective = None
        if self.high is None and self.low == 0:
            adjective = "positive" if self.low_open else "non-negative"
        elif self.high is None and self.low == 1 and noun.startswith("int"):
            adjective = "positive"
        if adjective:
            return f"{'' if plural else 'a '}{adjective} {noun}"
        if self.low is not None and self.high is not None:
            return (f"{art}{noun} in {'(' if self.low_open else '['}{g(self.low)}, "
                    f"{g(self.high)}{')' if self.high_open else ']'}")
        if self.low is not None:
            return f"{art}{noun} {'>' if self.low_open else '>='} {g(self.low)}"
        if self.high is not None:
            return f"{art}{noun} {'<' if self.high_open else '<='} {g(self.high)}"
        return f"{art}{noun}"

    def check(self, value: Any, name: str) -> Any:
        """``value`` normalised (ints of float fields as float, lists as tuples), or a
        ConfigError naming the dotted field ``name``, the value and what is allowed."""
        if value is None and self.nullable:
            return None
        if isinstance(value, str) and value in self.words:
            return value
        ok, out = self._convert(value)
        if not ok:
            raise ConfigError(f"{name} must be {self.describe()}, got {value!r}")
        return tuple(sorted(set(out))) if self.as_set else out

    def _convert(self, value: Any) -> Tuple[bool, Any]:
        if self.kind == "bool":
            return isinstance(value, bool), value
        if self.kind == "str":
            return isinstance(value, str), value
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices, value
        if self.kind in ("int", "float"):
            out = self._number(value, self.kind)
            return out is not None, out
        if not isinstance(value, (list, tuple)) or not value:
            return False, value
        if self.length is not None and len(value) != self.length:
            return False, value
        items = [self._number(v, self.kind[:-1]) for v in value]
        return all(v is not None for v in items), tuple(items)

    def _number(self, value: Any, kind: str) -> Optional[Union[int, float]]:
        """The value as an int / float inside the bounds, else None."""
        if isinstance(value, bool):
            return None
        if kind == "int":
            if not isinstance(value, numbers.Integral):
                return None
            out: Union[int, float] = int(value)
        else:
            if not isinstance(value, numbers.Real):
                return None
            try:
                out = float(value) + 0.0  # + 0.0: -0.0 is 0.0 (one value, one hash)
            except OverflowError:  # an integer too large for a float
                return None
            if not math.isfinite(out):  # NaN / inf: JSON has neither, so no round trip
                return None
        if self.low is not None and (out <= self.low if self.low_open else out < self.low):
            return None
        if self.high is not None and (out >= self.high if self.high_open else out > self.high):
            return None
        if self.odd and int(out) % 2 == 0:
            return None
        return out


def _show_int(v: float) -> str:
    return str(int(v))


def _show_float(v: float) -> str:
    return f"{v:g}"


def _rule_field(default: Any, rule: Rule, runtime: Optional[str] = None) -> Any:
    if isinstance(default, (list, dict)) or runtime not in (None,) + RUNTIME_KINDS:
        raise ConfigError("config defaults must be immutable")  # pragma: no cover - author error
    meta: Dict[str, Any] = {"rule": rule}
    if runtime:
        meta["runtime"] = runtime
    return field(default=default, metadata=meta)


def _int(default: Union[None, int, str], low: Optional[int] = None,
         high: Optional[int] = None, *, null: bool = False, odd: bool = False,
         words: Tuple[str, ...] = (), runtime: bool = False) -> Any:
    """An int field (bounds inclusive); ``words``: strings it also accepts; ``runtime``: a
    runtime setting (results do not depend on it; left out of ``config_hash``)."""
    return _rule_field(default, Rule("int", low, high, nullable=null, odd=odd, words=words),
                       "setting" if runtime else None)


def _num(default: Optional[float], low: Optional[float] = None, high: Optional[float] = None,
         *, low_open: bool = False, high_open: bool = False, null: bool = False) -> Any:
    """A float field (ints accepted and stored as floats; NaN rejected)."""
    return _rule_field(default, Rule("float", low, high, low_open=low_open, high_open=high_open,
                                     nullable=null))


def _flag(default: bool) -> Any:
    """A bool field (true / false only)."""
    return _rule_field(default, Rule("bool"))


def _text(default: Optional[str] = None, *, local: bool = False) -> Any:
    """An optional free string (a file or folder path); ``local``: the path of a local
    checkpoint / checkout (a runtime "path": only whether it is given enters ``config_hash``)."""
    return _rule_field(default, Rule("str", nullable=True), "path" if local else None)


def _digest() -> Any:
    """The SHA-256 (64 hex digits) of the file that the path field before it names, set
    when scoring pins the config (:func:`geocon_torch.io.pinned_files.pin_files`). It enters
    ``config_hash`` only once set, so a config without that file keeps its hash, and another
    file at the same path gives another hash."""
    return field(default=None, metadata={"rule": Rule("str", nullable=True), "omit_none": True})


def _choice(default: str, choices: Tuple[str, ...]) -> Any:
    """An option string, one of ``choices``."""
    return _rule_field(default, Rule("choice", choices=choices))


def _maybe_choice(default: Optional[str], choices: Tuple[str, ...]) -> Any:
    """An option string, one of ``choices``, or None (JSON null: off)."""
    return _rule_field(default, Rule("choice", choices=choices, nullable=True))


def _nums(default: Tuple[float, ...], low: Optional[float] = None,
          high: Optional[float] = None, *, low_open: bool = False, as_set: bool = False) -> Any:
    """A non-empty tuple of floats (a JSON list); ``as_set``: sorted, without duplicates."""
    return _rule_field(default, Rule("floats", low, high, low_open=low_open, as_set=as_set))


def _ints(default: Tuple[int, ...], low: Optional[int] = None, *,
          length: Optional[int] = None) -> Any:
    """A tuple of ints (a JSON list), of ``length`` items when given."""
    return _rule_field(default, Rule("ints", low, length=length))


def _sub(cls: type, *, omit_default: bool = False) -> Any:
    """A nested section (a JSON object; a dict given to the constructor is merged onto the
    section's defaults). ``omit_default``: an optional input (``io.lens``): left out of
    ``config_hash`` while it equals its defaults, or while its ``omitted()`` says so when it
    has one (``LensConfig``: while it does not distort), so every config without it keeps its
    hash; null (JSON) stands for its defaults."""
    meta: Dict[str, Any] = {"section": cls}
    if omit_default:
        meta["omit_default"] = True
    return field(default_factory=cls, metadata=meta)


def _join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


class _Section:
    """Base of every config section: each field is checked against its :class:`Rule` when it
    is set (construction included), and ``_cross_check`` relates fields after construction and
    after every attribute assignment (a refused assignment leaves the section unchanged; an
    unknown attribute is refused too, so a typo never passes silently). ``_name`` is the
    section's dotted place in :class:`GeoConConfig` (used in messages)."""

    _name: ClassVar[str] = ""
    #: retired field name -> its name now (docs/GLOSSARY.md); reads and writes still work, with
    #: a DeprecationWarning
    _aliases: ClassVar[Dict[str, str]] = {}
    #: set on each section of a config read leniently whose values a rule now refuses
    _invalid: ClassVar[Optional[str]] = None

    def __getattr__(self, key: str) -> Any:  # only reached when normal lookup fails
        new = type(self)._aliases.get(key)
        if new is None:  # Python's own AttributeError
            return object.__getattribute__(self, key)
        _retired(_join(self._name, key), _join(self._name, new))
        return getattr(self, new)

    def __setattr__(self, key: str, value: Any) -> None:
        if key in type(self)._aliases:
            _retired(_join(self._name, key), _join(self._name, type(self)._aliases[key]))
            key = type(self)._aliases[key]
        spec = type(self).__dataclass_fields__.get(key)  # type: ignore[attr-defined]
        built = self._built()
        if spec is None or not spec.metadata:  # not a field (ClassVars have no metadata)
            if built and not key.startswith("_"):
                known = sorted(f.name for f in dataclasses.fields(self))  # type: ignore
                raise ConfigError(f"unknown config key config.{_join(self._name, key)}; "
                                  f"known: {known}")
            object.__setattr__(self, key, value)
            return
        value = _check_field(spec, value, _join(self._name, key))
        old = self.__dict__.get(key)
        object.__setattr__(self, key, value)
        if built:
            try:
                self._cross_check()
            except ConfigError:
                object.__setattr__(self, key, old)
                raise

    def __post_init__(self) -> None:
        try:
            self._cross_check()
        except ConfigError as exc:
            if not _recorded(exc):
                raise

    @property
    def invalid_reason(self) -> Optional[str]:
        """Why this config (read from a stored result with ``GeoConConfig.from_dict(...,
        strict=False)``) cannot score: its ConfigError messages, ``"; "``-joined; None when it
        can."""
        return self._invalid

    def _built(self) -> bool:
        """Whether every field is set (construction is over; no flag in ``__dict__``, so
        ``Section(**vars(other))`` keeps working)."""
        return all(f.name in self.__dict__ for f in dataclasses.fields(self))

    @classmethod
    def _inputs(cls, data: Mapping[str, Any], where: str) -> Mapping[str, Any]:
        """``data`` (a mapping of this section's keys) with any shorthand key spread over the
        fields it stands for (none by default; :class:`LensConfig` has some)."""
        return data

    def _cross_check(self) -> None:
        """Checks that relate several fields (none by default)."""

    def _ordered(self, low: str, high: str) -> None:
        a, b = getattr(self, low), getattr(self, high)
        if a > b:
            raise ConfigError(f"{_join(self._name, low)} must be <= {_join(self._name, high)}, "
                              f"got {a!r} > {b!r}")

    def to_dict(self) -> Dict[str, Any]:
        """The JSON form: nested dicts, tuples as lists (every field, runtime ones too)."""
        return _to_jsonable(dataclasses.asdict(self))

    def protocol_dict(self) -> Dict[str, Any]:
        """:meth:`to_dict` without the runtime settings, and each local path as whether it is
        given (``True`` / ``None``): what ``config_hash`` covers."""
        return _split(self, runtime=False)

    def runtime_dict(self) -> Dict[str, Any]:
        """The runtime fields only (nested like :meth:`to_dict`; sections without any are
        left out)."""
        return _split(self, runtime=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]):
        """The section's defaults overridden by ``data`` (old flat keys are migrated)."""
        return _merge(cls(), migrate_config(data, cls._name), cls._name)


def _retired(old: str, new: str) -> None:
    warnings.warn(f"config field {old} is deprecated; it is now {new} (docs/GLOSSARY.md)",
                  DeprecationWarning, stacklevel=3)


def _split(section: Any, runtime: bool) -> Dict[str, Any]:
    """The protocol (``runtime=False``) or runtime part of ``section``'s JSON form."""
    out: Dict[str, Any] = {}
    for f in dataclasses.fields(section):
        value = getattr(section, f.name)
        if f.metadata.get("section") is not None:
            omitted = getattr(value, "omitted", None)  # the section's own rule, if it has one
            if f.metadata.get("omit_default") and (omitted() if callable(omitted)
                                                   else value == type(value)()):
                continue  # an optional input that changes nothing: configs keep their hash
            sub = _split(value, runtime)
            if sub or not runtime:
                out[f.name] = sub
            continue
        kind = f.metadata.get("runtime")
        if runtime and kind:
            out[f.name] = _to_jsonable(value)
        elif not runtime and kind == "path":
            out[f.name] = True if value is not None else None
        elif not runtime and not kind and not (value is None and f.metadata.get("omit_none")):
            out[f.name] = _to_jsonable(value)
    return out


def _check_field(spec: dataclasses.Field, value: Any, name: str) -> Any:
    """The checked (normalised) value of one field, or ConfigError."""
    section = spec.metadata.get("section")
    if section is not None:
        if value is None and spec.metadata.get("omit_default"):
            return section()  # null: the optional input unset
        if isinstance(value, Mapping):
            return _merge(section(), migrate_config(value, section._name), name)
        if type(value) is not section:  # a subclass would add its own fields
            raise ConfigError(f"{name} must be a mapping of {section.__name__} fields (or a "
                              f"{section.__name__}), got {value!r}")
        check_scorable(value, name)
        return copy.deepcopy(value)  # never shared with the config it came from
    rule = spec.metadata.get("rule")
    if rule is None:
        raise ConfigError(f"config field {name} has no validation rule")  # author error
    try:
        return rule.check(value, name)
    except ConfigError as exc:
        if not _recorded(exc):
            raise
        return value  # a lenient read keeps the stored value


def check_scorable(section: "_Section", name: str = "config") -> None:
    """ConfigError when ``section`` was read leniently from a stored result and a rule now
    refuses it (its ``invalid_reason``); inside a lenient read the reason is recorded instead,
    so a config built around such a section is marked invalid too."""
    reason = section.invalid_reason
    if reason is not None and not _recorded(ConfigError(reason)):
        raise ConfigError(f"{name} is not valid for scoring: {reason}. It was read from a stored "
                          "result as stored (GeoConConfig.from_dict(..., strict=False)); fix "
                          "the setting(s) named to score with it")


def _mark_invalid(section: "_Section", reason: str) -> None:
    """Set ``invalid_reason`` on ``section`` and every section nested in it."""
    object.__setattr__(section, "_invalid", reason)
    for f in dataclasses.fields(section):  # type: ignore[arg-type]
        if f.metadata.get("section") is not None:
            _mark_invalid(getattr(section, f.name), reason)


# ---------------------------------------------------------------------------------------------
# sections
#: the distortion coefficients of ``io.lens``, in OpenCV's ``distCoeffs`` order
LENS_COEFFICIENTS = ("k1", "k2", "p1", "p2", "k3")


@dataclass
class LensConfig(_Section):
    """The camera's lens (``io.lens``): OpenCV's pinhole camera matrix and Brown-Conrady
    distortion, as ``cv2.calibrateCamera`` gives them. Every frame is then undistorted before
    any keypoint is found (:mod:`geocon_torch.io.lens`): the working frames, the gate's view,
    the epipolar protocols' frames and given object masks. The toolkit otherwise assumes a
    pinhole camera: an uncorrected barrel lens (k1 = -0.05 at the half diagonal) turns a pan
    into an F-regime clip that fails ``pass_calibrated`` (audit s31 F1).

    Attributes:
        width, height: the frame size (px) the intrinsics are stated in (the calibration's
            image size); None: the clips' source size. A source of another size with the same
            aspect ratio (within 1 %) gets the intrinsics scaled; another aspect ratio is a
            ConfigError when the clip is read.
        fx, fy: focal lengths, px of that frame (> 0); fy None: fx.
        cx, cy: principal point, px of that frame (OpenCV's convention: pixel centres at
            integers, the centre of a W-px frame is (W - 1) / 2); None: the frame's centre.
        k1, k2, p1, p2, k3: OpenCV's distortion coefficients in that order (unitless, in image
            coordinates divided by the focal length); all 0 (the default): no lens, frames are
            not resampled and the config hash is that of a config without the section, whatever
            fx / cx / size say (:meth:`omitted`; ``to_dict`` still records them).

    Orientation: the intrinsics are px of the frames *as displayed*, i.e. after a video's
    display-rotation metadata is applied (a portrait phone video whose coded frames are
    1920 x 1080 with a 90-degree display matrix is shown, read and undistorted as 1080 x
    1920). A calibration of the coded (sensor) frames W x H turned by 90 degrees
    counterclockwise becomes size [H, W], fx' = fy, fy' = fx, cx' = cy, cy' = W - 1 - cx,
    p1' = -p2, p2' = p1; by 270 degrees: cx' = H - 1 - cy, cy' = cx, p1' = p2, p2' = -p1 (k1,
    k2, k3 unchanged; :func:`geocon_torch.io.lens.display_lens`). A square frame, or a size
    left out, cannot tell the two orientations apart: state the displayed one.

    Checked when a clip is read (:func:`geocon_torch.io.lens.camera_at` and the map): the
    principal point lies inside the frame the intrinsics are in (the source's when the size is
    left out: a calibration copied without its size is refused, not applied to the wrong
    pixels), and r_d(r) = r (1 + k1 r^2 + k2 r^4 + k3 r^6) increases out to the frame's
    corners (a polynomial that folds over would mirror texture; tangential terms are not part
    of this check). A lens that leaves more than 10 % of the working frame black gives a
    UserWarning.

    A mapping may also give ``distortion``: a list of 1 to 5 coefficients [k1, k2, p1, p2, k3]
    (OpenCV's ``distCoeffs``; the missing ones 0), and ``size``: [width, height].

    Each field alone is a valid edit; that a lens which distorts names its focal length
    (``fx``) and both ``width`` and ``height`` or neither is checked by :func:`load_config`
    (every scoring entry point) and by the reader (:func:`geocon_torch.io.lens.as_lens`).
    A :class:`~geocon_torch.types.Clip` given to ``score_clip`` is used as it is (read it with
    ``read_clip(..., lens=...)``).
    """

    _name: ClassVar[str] = "io.lens"
    width: Optional[int] = _int(None, 2, null=True)
    height: Optional[int] = _int(None, 2, null=True)
    fx: Optional[float] = _num(None, 0, low_open=True, null=True)
    fy: Optional[float] = _num(None, 0, low_open=True, null=True)
    cx: Optional[float] = _num(None, null=True)
    cy: Optional[float] = _num(None, null=True)
    k1: float = _num(0.0)
    k2: float = _num(0.0)
    p1: float = _num(0.0)
    p2: float = _num(0.0)
    k3: float = _num(0.0)

    @classmethod
    def _inputs(cls, data: Mapping[str, Any], where: str) -> Dict[str, Any]:
        """``data`` with ``distortion`` (a list of 1 to 5 numbers) spread over k1 .. k3 and
        ``size`` ([width, height]) over width / height; ConfigError on a bad list or on a key
        given both ways with different values."""
        out = dict(data)
        spread = {"distortion": (LENS_COEFFICIENTS, 1, "1 to 5 numbers [k1, k2, p1, p2, k3] "
                                 "(OpenCV's distCoeffs; the rational and thin-prism models "
                                 "are not supported)"),
                  "size": (("width", "height"), 2, "2 ints [width, height] (px)")}
        for key, (names, least, what) in spread.items():
            if key not in out:
                continue
            value = out.pop(key)
            if not isinstance(value, (list, tuple)) or not least <= len(value) <= len(names):
                raise ConfigError(f"{_join(where, key)} must be a list of {what}, got "
                                  f"{value!r}")
            for name, v in zip(names, list(value) + [0.0] * (len(names) - len(value))):
                if name in out and out[name] != v:
                    raise ConfigError(f"{_join(where, key)} and {_join(where, name)} are both "
                                      f"given, with different values {v!r} and {out[name]!r}")
                out[name] = v
        return out

    def _cross_check(self) -> None:
        """A principal point given with its frame size lies inside that frame."""
        for c, side in (("cx", "width"), ("cy", "height")):
            value, size = getattr(self, c), getattr(self, side)
            if value is not None and size is not None and not -0.5 <= value <= size - 0.5:
                raise ConfigError(f"io.lens.{c} must lie inside the frame of io.lens.{side} = "
                                  f"{size} px (-0.5 .. {size - 0.5}), got {value!r}")

    def distorts(self) -> bool:
        """Whether any distortion coefficient is non-zero (the frames are resampled)."""
        return any(getattr(self, k) != 0.0 for k in LENS_COEFFICIENTS)

    def omitted(self) -> bool:
        """Whether the section is left out of ``config_hash`` (``protocol_dict``): while it
        does not distort, frames are bit-identical to those without a lens, so such a config
        keeps the hash of a config without one (intrinsics alone, or coefficients all 0)."""
        return not self.distorts()

    def check_complete(self) -> None:
        """ConfigError unless a lens that distorts names its focal length ``fx``, and
        ``width`` / ``height`` are both given or both None (what scoring needs)."""
        if (self.width is None) != (self.height is None):
            raise ConfigError(f"io.lens.width and io.lens.height go together (the frame size "
                              f"the intrinsics are in px of; both null: the source size), got "
                              f"width {self.width!r}, height {self.height!r}")
        if self.distorts() and self.fx is None:
            k = ", ".join(f"{n} = {getattr(self, n):g}" for n in LENS_COEFFICIENTS
                          if getattr(self, n) != 0.0)
            raise ConfigError(f"io.lens sets distortion ({k}) but no focal length: give "
                              f"io.lens.fx (px of the frame io.lens.width x height; OpenCV's "
                              f"coefficients are in units of the focal length)")


@dataclass
class IOConfig(_Section):
    """Decoding and sampling. Pixel results are reported at the *working* resolution."""

    _name: ClassVar[str] = "io"
    # working resolution: long side in px, aspect kept; None = native pixels; "auto" = 1024 px
    # (the paper's) for files, native pixels for tensors (training batches are scored as given)
    long_side: Union[None, int, str] = _int("auto", 1, null=True, words=("auto",))
    stride: int = _int(1, 1)  # keep every stride-th frame
    max_frames: Optional[int] = _int(None, 1, null=True)  # cap on frames after striding
    letterbox_threshold: float = _num(16.0 / 255.0, 0, 1)  # a bar row/column is darker (0..1)
    # thinner bars (fraction of side) are ignored; a bar pair covers less than the whole side
    letterbox_min_fraction: float = _num(0.02, 0, 0.5, high_open=True)
    # a clip that lost more than this fraction of its frames while decoding is an error
    max_lost_fraction: float = _num(0.1, 0, 1)
    # video files whose container announces more frames than this (after stride / max_frames)
    # are decoded on demand in bounded chunks; shorter ones are held in memory (<= this many
    # frames: a constant bound, and one decoding pass); null: always in memory, 0: always stream
    stream_min_frames: Optional[int] = _int(64, 0, null=True, runtime=True)
    # the camera's lens (OpenCV camera matrix + distortion): frames are undistorted before any
    # keypoint is found; while it does not distort (all coefficients 0, the default, whatever
    # the intrinsics) it is left out of config_hash (LensConfig.omitted)
    lens: LensConfig = _sub(LensConfig, omit_default=True)

    #: the smallest working long side: resizing needs at least 2 px per side
    _MIN_LONG_SIDE: ClassVar[int] = 2

    def _cross_check(self) -> None:
        """io.long_side, when an int, is at least 2 (the field's rule allows any positive int:
        1 would pass it and then fail every clip in the resize)."""
        side = self.long_side
        if isinstance(side, int) and side < self._MIN_LONG_SIDE:
            raise ConfigError(f"io.long_side must be an int >= {self._MIN_LONG_SIDE}, null or "
                              f"'auto' (the working frame needs 2 px per side), got {side!r}")


@dataclass
class LKConfig(_Section):
    """Shi-Tomasi corners + pyramidal Lucas-Kanade tracks (``features.lk_tracks``; OpenCV
    parameter meanings). Used as ``features.lk`` (the lk-tracks backend)."""

    _name: ClassVar[str] = "features.lk"
    _aliases: ClassVar[Dict[str, str]] = {"fb_threshold": "fb_threshold_px"}  # retired names
    max_corners: Optional[int] = _int(None, 1, null=True)  # None: the section's keypoint budget
    quality: float = _num(0.001, 0, 1, low_open=True)  # Shi-Tomasi qualityLevel
    min_distance: float = _num(3.0, 0)  # px between corners
    block: int = _int(3, 1)  # covariance window side, px
    window: int = _int(21, 3, odd=True)  # LK window side, px (odd)
    levels: int = _int(3, 0)  # OpenCV maxLevel (at most levels + 1 pyramid images)
    fb_threshold_px: float = _num(1.5, 0, low_open=True)  # forward-backward error of a kept track
    backend: str = _choice("torch", LK_BACKEND_CHOICES)  # auto: torch (epipolar: as the path)
    # photometric guard: a track is kept only when the zero-mean NCC of the ``ncc_window``^2
    # patches around x1 (frame i) and x2 (frame j) is >= ``min_ncc`` (real content ~0.99,
    # independent noise < 0.5); -1 disables the guard
    min_ncc: float = _num(-1.0, -1, 1)
    ncc_window: int = _int(11, 3, odd=True)  # px at the resolution tracked

    def corners(self, budget: int) -> int:
        """Corners per frame: ``max_corners``, else the owning section's keypoint ``budget``."""
        return int(budget if self.max_corners is None else self.max_corners)

    def lk_kwargs(self, budget: int, backend: str) -> Dict[str, Any]:
        """Keyword arguments of ``features.lk_tracks``; ``backend`` stands in for "auto"."""
        return {"max_corners": self.corners(budget), "quality": float(self.quality),
                "min_distance": float(self.min_distance), "block": int(self.block),
                "window": int(self.window), "levels": int(self.levels),
                "fb_threshold_px": float(self.fb_threshold_px),
                "backend": backend if self.backend == "auto" else self.backend}


@dataclass
class TrackingConfig(LKConfig):
    """The epipolar protocol's LK fallback stage (``epipolar.tracking``): the LK settings plus
    the stage's minimum track count, with the photometric guard on (``min_ncc`` 0.8)."""

    _name: ClassVar[str] = "epipolar.tracking"
    max_corners: Optional[int] = _int(2000, 1, null=True)  # None: epipolar.sift_features
    backend: str = _choice("auto", LK_BACKEND_CHOICES)  # auto: opencv / torch as the path
    min_tracks: int = _int(8, 1)  # pairs with fewer kept tracks are not fitted
    min_ncc: float = _num(0.8, -1, 1)


@dataclass
class FeatureConfig(_Section):
    """Keypoints and matching."""

    _name: ClassVar[str] = "features"
    backend: str = _choice("auto", FEATURE_BACKEND_CHOICES)
    max_keypoints: int = _int(2000, 1)
    ratio: float = _num(0.75, 0, 1, low_open=True)  # Lowe ratio
    # mutual nearest-neighbour check: many-to-one ratio matches are a matcher artifact that IR
    # would otherwise count against the video (pure rotation: IR_H 0.98 without, 0.996 with)
    mutual: bool = _flag(True)
    scales: Tuple[float, ...] = _nums((0.25, 0.5, 1.0), 0, 1, low_open=True,
                                      as_set=True)  # paper Algorithm 1
    # how a scale s < 1 is realised: "pyramid" detects again on the frames shrunk to s;
    # "scale_space" (opencv-sift, s a power of two) takes the octaves of one working-resolution
    # detection that the shrunk frames also have (features.opencv_sift); "auto": scale_space
    # where it applies, else pyramid
    scale_mode: str = _choice("auto", SCALE_MODE_CHOICES)
    checkpoint: Optional[str] = _text(local=True)  # local weights for learned backends
    checkpoint_sha256: Optional[str] = _digest()  # of the checkpoint file, pinned when scoring
    # keypoints stay this many pixels of their own feature level off letterbox / pillarbox bars:
    # at scale s the content mask is eroded by ceil(content_margin_px / s) working px (4 at
    # scale 1, 16 at 1/4); a clip without bars is unaffected
    content_margin_px: int = _int(4, 0)
    # opencv-sift's contrastThreshold (OpenCV's default 0.04); lower finds keypoints on weakly
    # textured frames (the strongest max_keypoints are kept either way)
    opencv_contrast_threshold: float = _num(0.04, 0)
    # torch-sift's contrast threshold (OpenCV's meaning); None: torch-sift's default (0.02). The
    # gate's view sets it to gate.view_contrast_threshold, as it does opencv-sift's
    torch_sift_contrast_threshold: Optional[float] = _num(None, 0, null=True)
    # pairs are matched in chunks needing at most this many distinct frames (bounded memory,
    # identical results); None: all frames at once; "auto": 48 on the CPU, on an accelerator
    # as many as a pixel budget holds (features.multiscale.CHUNK_PIXELS: a batch of clips in one)
    chunk_frames: Union[None, int, str] = _int("auto", 2, null=True, words=("auto",),
                                               runtime=True)
    lk: LKConfig = _sub(LKConfig)  # lk-tracks backend (max_corners None: max_keypoints)
    # the backend that re-matches the background of a clip the scoring backend leaves with too
    # little texture (< background.min_inliers matches per pair: small or smooth generated
    # clips); the clips the scoring backend scores are unchanged. "lk-tracks": Shi-Tomasi + the
    # OpenCV pyramidal LK and NCC guard 0.5 (sections.background.fallback_config); null:
    # off (such clips stay not_applicable)
    fallback: Optional[str] = _maybe_choice("lk-tracks", FALLBACK_CHOICES)

    def _cross_check(self) -> None:
        """``checkpoint`` only with a backend that loads one (:data:`CHECKPOINT_BACKENDS`)."""
        if self.checkpoint is not None and self.backend not in CHECKPOINT_BACKENDS:
            raise ConfigError(f"features.checkpoint is set ({self.checkpoint}) but "
                              f"features.backend {self.backend!r} loads no checkpoint (its "
                              f"weights, if any, ship with it): unset it or pick one of "
                              f"{CHECKPOINT_BACKENDS}")


@dataclass
class RansacConfig(_Section):
    """Batched robust estimation (geometry core)."""

    _name: ClassVar[str] = "ransac"
    confidence: float = _num(0.999, 0, 1, low_open=True, high_open=True)
    max_iterations: int = _int(2000, 1)
    batch_hypotheses: int = _int(32, 1)  # minimal samples drawn per pair per round
    scoring: str = _choice("msac", RANSAC_SCORING_CHOICES)
    local_optimization: bool = _flag(True)
    lo_iterations: int = _int(6, 0)  # IRLS refits per local optimisation (on <= 256 points)
    # <= 2**31 - 1: the seeds of a clip's rows are seed + row (int64) and RANSAC streams take
    # them modulo 2**32 (seed and seed + 2**32 would be one stream)
    seed: int = _int(0, 0, MAX_SEED)


@dataclass
class GateConfig(_Section):
    """Translation gate (paper sec. 4.2, Algorithm 1 A)."""

    _name: ClassVar[str] = "gate"
    method: str = _choice("auto", GATE_METHOD_CHOICES)
    # eq. 5's ||t||_inf bound (DUSt3R units): recorded only (evidence.eq5_decision); the regime
    # follows the band below (low = high = tau_t is eq. 5's binary rule, H iff t_inf <= tau_t)
    tau_t: float = _num(0.04, 0)
    hysteresis_low: float = _num(0.03, 0)  # <= low -> H
    hysteresis_high: float = _num(0.05, 0)  # >= high -> F; in between U (better supported wins)
    missing_pose: str = _choice("fail_to_F", MISSING_POSE_CHOICES)
    per_pair: bool = _flag(False)  # per-pair gate with hysteresis instead of one per clip
    # weight-free statistic thresholds (calibrated by benchmarks/gate_sweep.py)
    parallax_low: float = _num(0.13)  # statistic <= low -> H
    parallax_high: float = _num(0.27)  # >= high -> F; between: U (GRIC or support margin decide)
    dust3r_checkpoint: Optional[str] = _text(local=True)
    dust3r_checkpoint_sha256: Optional[str] = _digest()  # pinned when scoring
    # folder holding the dust3r repository (optional import)
    dust3r_path: Optional[str] = _text(local=True)
    statistic: str = _choice("parallax_magnitude", GATE_STATISTIC_CHOICES)
    # parallax_magnitude (resolution- and density-normalised, see gate.parallax): the
    # magnitude_quantile of the F-inliers' H transfer error in px at a reference_long_side
    # working long side; H if its upper confidence bound (z = ci_z) <= max(magnitude_low,
    # noise_k x noise), F if its lower bound >= magnitude_high, otherwise U with its evidence
    magnitude_low: float = _num(3.0, 0)  # reference px
    magnitude_high: float = _num(16.0, 0)  # reference px
    magnitude_quantile: float = _num(0.9, 0, 1, low_open=True, high_open=True)
    reference_long_side: float = _num(1024.0, 0, low_open=True)  # px
    noise_k: float = _num(4.5, 0)  # H bound >= noise_k x the same quantile of Sampson px
    ci_z: float = _num(1.645, 0)  # one-sided 95 % order-statistic bound on the quantile
    parallax_pairs: str = _choice("first_last", PARALLAX_PAIRS_CHOICES)  # weight-free gate pairs
    # the weight-free gate's own view (gate.view): its gate pairs are matched by view_backend at
    # view_long_side (capped by the source), whatever features.backend / io.long_side score the
    # clip, so the regime does not change with them; "same": the scoring backend and resolution;
    # "auto": torch-sift when the features backend is torch-sift (the CUDA default: the view stays
    # on the device), else opencv-sift
    view_backend: str = _choice("auto", FEATURE_BACKEND_CHOICES + ("same",))
    view_long_side: Optional[int] = _int(512, 16, null=True)  # px; None: the working side
    view_max_keypoints: int = _int(2000, 1)
    # the view's SIFT contrast threshold (OpenCV's meaning, for opencv-sift and torch-sift alike):
    # a quarter of OpenCV's default, so weakly textured clips give the gate matches too
    view_contrast_threshold: float = _num(0.01, 0)
    dust3r_image_size: int = _int(512, 16)  # DUSt3R input size (224 or 512 models)
    u_margin: float = _num(0.05, 0, 1)  # U band: F when IR_F - IR_H > u_margin or GRIC prefers F

    def _cross_check(self) -> None:
        self._ordered("hysteresis_low", "hysteresis_high")
        self._ordered("parallax_low", "parallax_high")
        self._ordered("magnitude_low", "magnitude_high")


@dataclass
class SegmentConfig(_Section):
    """Mask-first background separation (paper sec. 4.3)."""

    _name: ClassVar[str] = "segment"
    method: str = _choice("auto", SEGMENT_METHOD_CHOICES)
    safety_margin_px: int = _int(4, 0)  # dilate object masks by this many px before removing them
    sam2_checkpoint: Optional[str] = _text(local=True)
    sam2_checkpoint_sha256: Optional[str] = _digest()  # pinned when scoring
    sam2_config: Optional[str] = _text()
    sam2_prompts: Optional[str] = _text()  # JSON file of box / point prompts (see segment.sam2)
    sam2_prompts_sha256: Optional[str] = _digest()  # pinned when scoring
    sam2_image_size: Optional[int] = _int(None, 1, null=True)  # model input size (None: its config)
    # weight-free motion segmentation (segment.motion)
    motion_threshold: float = _num(0.08, 0, 1)  # photometric residual (gray, 0..1) after the warp
    motion_min_area: int = _int(64, 0)  # px; smaller blobs are dropped
    motion_max_fraction: float = _num(0.5, 0, 1)  # objects covering more of the content: dropped
    motion_open_px: int = _int(1, 0)  # morphological opening radius
    motion_close_px: int = _int(3, 0)  # morphological closing radius
    motion_min_frames: int = _int(2, 1)  # a track must span this many frames
    motion_seed_radius_px: int = _int(8, 0)  # background-model outlier matches -> seed discs
    motion_min_seeds: int = _int(12, 0)  # coherent seed points (2 per match) a component needs
    motion_seed_factor: float = _num(2.0, 0, low_open=True)  # seed: residual > factor x tau
    # mask files whose aspect ratio differs from the clip's by > 1 %: an error unless true
    resize_masks: bool = _flag(False)


@dataclass
class BackgroundConfig(_Section):
    """IR / GE (paper eqs. 7-13)."""

    _name: ClassVar[str] = "background"
    tau_h: float = _num(2.0, 0, low_open=True)  # px, symmetric transfer error (eq. 8)
    tau_f: float = _num(0.1, 0, low_open=True)  # Sampson distance, Hartley-normalised coordinates
    min_inliers: int = _int(30, 1)  # pairs with fewer inliers are invalid
    report_ir: float = _num(0.97, 0, 1)  # report gate: IR >= 0.97
    report_ge_px: float = _num(3.5, 0)  # report gate: GE <= 3.5 px
    pair_stride: int = _int(1, 1)  # pairs (i, i+s) for every i = 0 .. T-1-s
    sensitivity_tau_h: Tuple[float, ...] = _nums((0.5, 1.0, 2.0, 3.0, 4.0), 0, low_open=True)
    sensitivity_tau_f: Tuple[float, ...] = _nums((0.025, 0.05, 0.1, 0.2, 0.4), 0, low_open=True)
    sensitivity: bool = _flag(False)  # run the (tau_h, tau_f) scan and record it in the result
    min_valid_pairs: int = _int(1, 1)  # fewer valid pairs -> not_applicable
    category_static_px: float = _num(0.5, 0)  # median background motion per pair below: static
    category_rotation_deg: float = _num(0.1, 0)  # F regime: inter-frame rotation >= this: Complex
    category_focal: float = _num(1.0, 0, low_open=True)  # focal / long side for the rotation
    per_pair: bool = _flag(True)  # record per-pair IR / GE in the result
    # calibrated report gate (background.pass_calibrated, geocon_torch.io.calibration):
    # "default" (shipped for the features backend), a calibration JSON path, or null (off)
    calibration: Optional[str] = _text("default")
    # the content hash of that calibration file: filled in when a clip is scored (the result's
    # config records it, so config_hash changes with the file); given, the file must match it
    # (scoring checks it: 16 lowercase hex digits, and only with a calibration)
    calibration_hash: Optional[str] = _text()


@dataclass
class ForegroundConfig(_Section):
    """AdaDFRC-W2 (paper eqs. 14-15, 17)."""

    _name: ClassVar[str] = "foreground"
    flow: str = _choice("auto", FLOW_CHOICES)
    flow_checkpoint: Optional[str] = _text(local=True)
    # pinned when scoring: flow_checkpoint's, or the torch hub file RAFT reads without one
    flow_checkpoint_sha256: Optional[str] = _digest()
    grid: int = _int(8, 2)  # adaptive N x N grid over the object box
    score: str = _choice("wmse", FOREGROUND_SCORE_CHOICES)
    occlusion_weighting: bool = _flag(True)
    fb_threshold_px: float = _num(1.0, 0, low_open=True)  # forward-backward consistency tolerance
    min_object_pixels: int = _int(64, 0)
    percentile: float = _num(0.9, 0, 1)  # AdaP90
    scales: Tuple[float, ...] = _nums((0.25, 0.5, 1.0), 0, 1, low_open=True,
                                      as_set=True)  # flow scales
    scale_reduction: str = _choice("finest", SCALE_REDUCTION_CHOICES)  # finest valid | median
    # cost caps (what they cut is reported in the block's ``skipped``; None / 0: no cap)
    max_pairs: Optional[int] = _int(12, 0, null=True)  # scored pairs, spread evenly over the clip
    max_objects: Optional[int] = _int(4, 0, null=True)  # scored objects, largest (mask area) first
    max_flow_side: Optional[int] = _int(512, 16, null=True)  # flow's long side, px, at scale 1
    # flow chunk size in pairs of max_flow_side x max_flow_side px (smaller crops, of one or
    # several clips, fill the same pixels: sections.foreground.flow_chunk_pairs); bounds memory:
    # 2 pairs at 512 px, forward + backward, ~0.2 GB of flow state, 4 pairs ~0.7 GB, at the
    # same speed; results do not depend on it
    batch_pairs: int = _int(2, 1, runtime=True)


@dataclass
class ProtocolRansacConfig(_Section):
    """The fundamental-matrix RANSAC of an epipolar protocol (``epipolar.ransac``: WorldAtlas,
    ``cv2.findFundamentalMat(USAC_MAGSAC)`` / batched Sampson RANSAC)."""

    _name: ClassVar[str] = "epipolar.ransac"
    threshold_px: float = _num(1.0, 0, low_open=True)  # inlier threshold, px (analysis size)
    confidence: float = _num(0.999, 0, 1, low_open=True, high_open=True)
    max_iterations: int = _int(10000, 1)


@dataclass
class GvgcRansacConfig(ProtocolRansacConfig):
    """The GVGC preset's RANSAC (``epipolar.gvgc.ransac``): ``cv2.findFundamentalMat(FM_RANSAC,
    3 px)`` with OpenCV's defaults (confidence 0.99, 1000 iterations)."""

    _name: ClassVar[str] = "epipolar.gvgc.ransac"
    threshold_px: float = _num(3.0, 0, low_open=True)
    confidence: float = _num(0.99, 0, 1, low_open=True, high_open=True)
    max_iterations: int = _int(1000, 1)


@dataclass
class GvgcConfig(_Section):
    """The gvgc preset (Li et al. 2024; original code: 1280x720, SIFT 40k, FLANN, ratio 0.85,
    FM_RANSAC 3 px) -- ``epipolar.gvgc``."""

    _name: ClassVar[str] = "epipolar.gvgc"
    size: Tuple[int, ...] = _ints((720, 1280), 1, length=2)  # (H, W) every frame is resized to
    intervals: Tuple[int, ...] = _ints((60, 50, 40, 30, 20, 10), 1)  # frame distances d
    min_frames: int = _int(71, 2)  # the original evaluates frames 0..70
    sift_features: int = _int(40000, 1)
    ratio: float = _num(0.85, 0, 1, low_open=True)
    matcher: str = _choice("flann", GVGC_MATCHER_CHOICES)  # flann (as the original) | bf (exact)
    ransac: GvgcRansacConfig = _sub(GvgcRansacConfig)

    def _cross_check(self) -> None:
        if max(self.intervals) >= self.min_frames:
            raise ConfigError(f"{self._name}.min_frames must exceed every {self._name}.intervals "
                              f"value, got {self.min_frames} <= {max(self.intervals)}")


@dataclass
class EpipolarConfig(_Section):
    """WorldAtlas / GVGC-style epipolar trio (seed 003)."""

    _name: ClassVar[str] = "epipolar"
    _aliases: ClassVar[Dict[str, str]] = {"path": "implementation"}  # retired names
    max_width: int = _int(640, 1)  # analysis width, px (aspect kept)
    pair_stride: int = _int(1, 1)  # pairs (i, i+s), i = 0, s, 2s, ... (background's: every i)
    max_pairs: int = _int(8, 0)  # pairs spread evenly over the clip (0: all)
    sift_features: int = _int(2000, 1)
    ratio: float = _num(0.75, 0, 1, low_open=True)
    min_matches: int = _int(12, 1)
    min_inliers: int = _int(8, 1)
    error_norm_px: float = _num(5.0, 0, low_open=True)  # score = clip(1 - error / 5, 0, 1)
    relaxed_ratio: float = _num(0.85, 0, 1, low_open=True)
    relaxed_min_matches: int = _int(8, 1)
    # the torch path's RANSAC (OpenCV's USAC keeps its own fixed state) and cv2's RNG (FLANN),
    # which takes a C int: <= 2**31 - 1
    seed: int = _int(0, 0, MAX_SEED)
    # how the protocol is computed: "opencv" (the reference, CPU), "torch" (batched) or "auto"
    implementation: str = _choice("auto", EPIPOLAR_PATH_CHOICES)
    resize_interpolation: str = _choice("area", RESIZE_INTERPOLATION_CHOICES)  # area: INTER_AREA
    fallback_enabled: bool = _flag(True)  # relaxed matching, then Shi-Tomasi + LK, if none valid
    # fallback stages only: a pair is valid only when its F inlier set is meaningful a contrario
    # (ORSA): NFA = expected number of equally good chance fits of unrelated matches <= this
    fallback_max_nfa: float = _num(0.01, 0, low_open=True)
    # the same test on the primary stage's pairs (null: none, the reference's ">= 8 inliers"
    # rule alone; 0.01 drops chance fits, e.g. a pair across a shot cut: 10 of 14 unrelated
    # matches on one F at ~0 px)
    primary_max_nfa: Optional[float] = _num(None, 0, low_open=True, null=True)
    # torch path: auto (torch-sift on CUDA, opencv-sift on CPU) | name
    features: str = _choice("auto", EPIPOLAR_FEATURE_CHOICES)
    # cv2.setNumThreads during the OpenCV path (restored)
    opencv_threads: int = _int(1, 1, runtime=True)
    ransac: ProtocolRansacConfig = _sub(ProtocolRansacConfig)
    tracking: TrackingConfig = _sub(TrackingConfig)  # Shi-Tomasi + LK fallback stage
    gvgc: GvgcConfig = _sub(GvgcConfig)


@dataclass
class EpipolarDPOConfig(_Section):
    """The Epipolar-DPO protocol (``epipolar_dpo``; Kupyn et al. 2025, defaults: the reference
    code's; :mod:`geocon_torch.epipolar.dpo`).

    Attributes:
        sampling_rate: every n-th frame is used (frames 0, n, 2n, ...).
        ratio: Lowe ratio of the 2-NN matching.
        min_keypoints: a pair needs at least this many SIFT keypoints in both frames.
        min_matches: a pair needs at least this many ratio-test matches (>= 8: the 8-point F).
        inlier_threshold_px: a match is an inlier when its Sampson distance is <= this (px).
        eps: added to the squared Sampson distance before the square root (px^2).
        workers: SIFT threads (runtime; None: the usable CPUs shared by the local torchrun ranks,
            :func:`~geocon_torch.features.opencv_sift.default_workers`; results do not depend on
            it).
    """

    _name: ClassVar[str] = "epipolar_dpo"
    sampling_rate: int = _int(15, 1)
    ratio: float = _num(0.75, 0, 1, low_open=True)
    min_keypoints: int = _int(8, 0)
    min_matches: int = _int(20, 8)
    inlier_threshold_px: float = _num(5.0, 0, low_open=True)
    eps: float = _num(1e-8, 0)
    workers: Optional[int] = _int(None, 1, null=True, runtime=True)


@dataclass
class SoftConsistencyConfig(_Section):
    """The differentiable soft score (``soft``; :mod:`geocon_torch.measures.soft`, units: px of
    the input frames unless said otherwise).

    Attributes:
        model: "homography", "fundamental" or "auto" (per pair: H when its soft IR is within
            ``auto_margin`` of F's, else F; the choice itself is not differentiated).
        tau_h: inlier threshold of the symmetric transfer error, px (paper: 2 px).
        tau_f: inlier threshold of the normalised Sampson distance, unitless (paper: 0.1).
        temperature_h: sigmoid temperature for H residuals, px.
        temperature_f: sigmoid temperature for F residuals, unitless.
        grid_step: spacing of the correspondence grid, px.
        border: grid points keep this distance from the image edge, px.
        irls_iters: weighted refits after the unweighted first fit.
        auto_margin: "auto" keeps H while ``ir_h >= ir_f - auto_margin``.
        levels, iterations, window_sigma: dense LK pyramid levels, Gauss-Newton steps per
            level, integration window (px).
    """

    _name: ClassVar[str] = "soft"
    model: str = _choice("auto", SOFT_MODEL_CHOICES)
    tau_h: float = _num(2.0, 0, low_open=True)
    tau_f: float = _num(0.1, 0, low_open=True)
    temperature_h: float = _num(0.5, 0, low_open=True)
    temperature_f: float = _num(0.025, 0, low_open=True)
    grid_step: int = _int(4, 1)
    border: int = _int(4, 0)
    irls_iters: int = _int(3, 0)
    auto_margin: float = _num(0.05, 0, 1)
    levels: int = _int(4, 1)
    iterations: int = _int(4, 1)
    window_sigma: float = _num(2.0, 0, low_open=True)


# ---------------------------------------------------------------------------------------------
# old flat keys -> nested places
def _renamed() -> Dict[str, str]:
    lk = ("quality", "min_distance", "block", "window", "levels")
    out = {f"features.lk_{k}": f"features.lk.{k}" for k in lk + ("backend",)}
    out["features.lk_fb_threshold"] = "features.lk.fb_threshold_px"
    out.update({f"epipolar.tracking_{k}": f"epipolar.tracking.{k}"
                for k in lk + ("max_corners", "min_tracks", "min_ncc", "ncc_window")})
    out["epipolar.tracking_fb_threshold_px"] = "epipolar.tracking.fb_threshold_px"
    out.update({"epipolar.ransac_threshold_px": "epipolar.ransac.threshold_px",
                "epipolar.confidence": "epipolar.ransac.confidence",
                "epipolar.max_iterations": "epipolar.ransac.max_iterations"})
    out.update({f"epipolar.gvgc_{k}": f"epipolar.gvgc.{k}"
                for k in ("size", "intervals", "min_frames", "sift_features", "ratio", "matcher")})
    out.update({f"epipolar.gvgc_{k}": f"epipolar.gvgc.ransac.{k}"
                for k in ("threshold_px", "confidence", "max_iterations")})
    return out


#: flat keys of configs written before the nested sections -> their dotted place now
RENAMED_KEYS: Dict[str, str] = _renamed()
#: nested keys renamed to match docs/GLOSSARY.md -> their name now
RETIRED_KEYS: Dict[str, str] = {"features.lk.fb_threshold": "features.lk.fb_threshold_px",
                                "epipolar.tracking.fb_threshold":
                                    "epipolar.tracking.fb_threshold_px",
                                "epipolar.path": "epipolar.implementation"}


def _copy_tree(data: Any) -> Any:
    return {k: _copy_tree(v) for k, v in data.items()} if isinstance(data, Mapping) else data


def _relative(path: str, prefix: str) -> Optional[List[str]]:
    """``path`` split relative to ``prefix`` (None when it lies outside)."""
    if not prefix:
        return path.split(".")
    return path[len(prefix) + 1:].split(".") if path.startswith(prefix + ".") else None


def _move(tree: Dict[str, Any], old: List[str], new: List[str], names: Tuple[str, str]) -> None:
    """Move ``tree[old]`` to ``tree[new]`` (creating the nested mappings)."""
    parent: Any = tree
    for key in old[:-1]:
        parent = parent.get(key) if isinstance(parent, dict) else None
    if not isinstance(parent, dict) or old[-1] not in parent:
        return
    value = parent.pop(old[-1])
    warnings.warn(f"config key {names[0]} is deprecated; it now lives at {names[1]}",
                  DeprecationWarning, stacklevel=4)
    target: Any = tree
    for key in new[:-1]:
        if not isinstance(target.get(key, {}), dict):
            raise ConfigError(f"{names[0]} (old name of {names[1]}) cannot be moved: "
                              f"{key} is {target[key]!r}, not a mapping")
        target = target.setdefault(key, {})
    if new[-1] in target and target[new[-1]] != value:
        raise ConfigError(f"{names[0]} (deprecated) and {names[1]} are both given, with different "
                          f"values {value!r} and {target[new[-1]]!r}; keep only {names[1]}")
    target[new[-1]] = value


def migrate_config(data: Any, prefix: str = "") -> Any:
    """A copy of a config mapping (the whole config, or the section at dotted ``prefix``) with
    every old flat key (:data:`RENAMED_KEYS`) moved to its nested place, each with a
    DeprecationWarning. The top-level ``seed`` of the first 0.1.0 builds' configs (store
    format 1), which no stage ever read and which was removed (e10b17d), is dropped with a
    DeprecationWarning, so their stored configs load again. A non-mapping is returned as is
    (the merge reports it)."""
    if not isinstance(data, Mapping):
        return data
    tree = _copy_tree(data)
    for old, new in {**RENAMED_KEYS, **RETIRED_KEYS}.items():
        rel_old, rel_new = _relative(old, prefix), _relative(new, prefix)
        if rel_old is not None and rel_new is not None:
            _move(tree, rel_old, rel_new, (old, new))
    if not prefix and "seed" in tree:
        tree.pop("seed")
        warnings.warn("config key seed is deprecated; the top-level seed was never used and "
                      "is ignored (RANSAC streams take ransac.seed and epipolar.seed)",
                      DeprecationWarning, stacklevel=3)
    return tree


def _merge(target: Any, data: Any, where: str) -> Any:
    """A new section: ``target``'s values overridden by the (migrated) mapping ``data``; every
    value is checked against its field's rule with its dotted name ``where.key``."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where or 'config'} must be a mapping (a JSON object), "
                          f"got {type(data).__name__}")
    data = target._inputs(data, where)
    known = {f.name: f for f in dataclasses.fields(target)}
    values = {name: getattr(target, name) for name in known}
    for key, value in data.items():
        name = _join(where, str(key))
        if key not in known:
            near = difflib.get_close_matches(str(key), list(known), n=1)
            hint = f" (did you mean {_join(where, near[0])}?)" if near else ""
            raise ConfigError(f"unknown config key config.{name}{hint}; known: {sorted(known)}")
        spec = known[key]
        if spec.metadata.get("section") is not None and isinstance(value, Mapping):
            values[key] = _merge(values[key], value, name)
        else:
            values[key] = _check_field(spec, value, name)
    return type(target)(**values)


# ---------------------------------------------------------------------------------------------
# the whole configuration
@dataclass
class GeoConConfig(_Section):
    """The whole configuration; every result records ``to_dict()`` and ``config_hash()``.

    Every field is checked when the config is built (see the module docstring):

    >>> cfg = GeoConConfig().replace(io={"long_side": 512}, epipolar={"tracking": {"window": 15}})
    >>> cfg.io.long_side, cfg.epipolar.tracking.window, cfg.features.lk.window
    (512, 15, 21)
    >>> GeoConConfig(preset="fast")
    Traceback (most recent call last):
    ...
    geocon_torch.errors.ConfigError: preset must be one of 'geocon', ..., got 'fast'
    """

    io: IOConfig = _sub(IOConfig)
    features: FeatureConfig = _sub(FeatureConfig)
    ransac: RansacConfig = _sub(RansacConfig)
    gate: GateConfig = _sub(GateConfig)
    segment: SegmentConfig = _sub(SegmentConfig)
    background: BackgroundConfig = _sub(BackgroundConfig)
    foreground: ForegroundConfig = _sub(ForegroundConfig)
    epipolar: EpipolarConfig = _sub(EpipolarConfig)
    epipolar_dpo: EpipolarDPOConfig = _sub(EpipolarDPOConfig)
    soft: SoftConsistencyConfig = _sub(SoftConsistencyConfig)
    preset: str = _choice("geocon", PRESET_CHOICES)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], *, strict: bool = True) -> "GeoConConfig":
        """Defaults overridden by ``data`` (any subset; old flat keys are migrated).

        ``strict=False`` reads the config of a stored result: a value a rule refuses is kept
        as stored and a failing cross-field check is skipped, each ConfigError recorded in
        :attr:`invalid_reason` (on every section); such a config can be shown, not scored
        (:func:`check_scorable`). Unknown keys and non-mapping sections still raise.
        """
        if strict:
            return _merge(cls(), migrate_config(data), "")
        problems: List[str] = []
        token = _LENIENT.set(problems)
        try:
            cfg = _merge(cls(), migrate_config(data), "")
        finally:
            _LENIENT.reset(token)
        if problems:
            _mark_invalid(cfg, "; ".join(problems))
        return cfg

    def replace(self, **sections: Any) -> "GeoConConfig":
        """Copy with overrides, e.g. ``cfg.replace(background={"tau_h": 3.0})``.

        Raises:
            ConfigError: an unknown key or a bad value; a dotted key (``io.long_side``) says
                to give the section instead (``replace(io={'long_side': 64})``).
        """
        dotted = next((str(k) for k in sections if "." in str(k)), None)
        if dotted is not None:
            head, *rest = dotted.split(".")
            value: Any = sections[dotted]
            for key in reversed(rest):
                value = {key: value}
            raise ConfigError(f"replace() takes sections, not the dotted key {dotted!r}: "
                              f"replace({head}={value!r})")
        return _merge(copy.deepcopy(self), migrate_config(sections), "")

    def with_preset(self, name: str) -> "GeoConConfig":
        """Copy scoring preset ``name`` (:data:`geocon_torch.presets.PRESETS`): ``preset`` set
        to it and its config ``overrides`` applied. Every entry point that picks a preset by
        name (``score_clip(preset=...)``, ``--preset``, Metric classes, reward kinds, bench
        kinds) goes through here, so the preset scored is the preset recorded and hashed."""
        name = _check_field(GeoConConfig.__dataclass_fields__["preset"], name, "preset")
        overrides = copy.deepcopy(dict(get_preset(name).overrides))
        return self.replace(preset=name, **overrides)

    def config_hash(self) -> str:
        """Stable 16-hex-digit key of the configuration: the first 16 hex digits of the SHA-256
        of :meth:`protocol_dict` (every field that can change a number: thresholds, sizes,
        backends, seeds, the calibration hash, the preset) as compact JSON with sorted keys.
        Runtime settings (chunk sizes, thread counts; :data:`RUNTIME_FIELDS`) are left out and
        local checkpoint / checkout paths enter only as given or not, so changing a thread
        count or moving a checkpoint keeps stored results; what a weights or prompt file holds
        enters through its ``<path>_sha256`` field, which scoring pins
        (:func:`geocon_torch.io.pinned_files.pin_files`) and which counts only once set; the
        optional ``io.lens`` input enters only once set (a distortion coefficient or any other
        of its fields off its default); results record the whole ``to_dict()``.

        The hash is taken of the validated, *migrated* config, so an old flat config file and
        its nested equivalent hash the same, and an int given for a float field (``3``) hashes
        as the float (``3.0``). Results stored before the nested sections carry a hash of the
        old flat layout; ``GeoConConfig.from_dict(result["config"]).config_hash()`` gives the
        current hash of the config they were scored with.
        """
        blob = json.dumps(self.protocol_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


def _to_jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_to_jsonable(v) for v in obj]
    return obj


#: every config dataclass, outermost first (tests walk their fields)
SECTIONS: Tuple[type, ...] = (GeoConConfig, IOConfig, LensConfig, FeatureConfig, LKConfig,
                              RansacConfig, GateConfig, SegmentConfig, BackgroundConfig,
                              ForegroundConfig, EpipolarConfig, ProtocolRansacConfig,
                              TrackingConfig, GvgcConfig, GvgcRansacConfig, EpipolarDPOConfig,
                              SoftConsistencyConfig)


def _runtime_fields(cls: type, prefix: str = "") -> Dict[str, str]:
    out: Dict[str, str] = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("section") is not None:
            out.update(_runtime_fields(f.metadata["section"], _join(prefix, f.name)))
        elif f.metadata.get("runtime"):
            out[_join(prefix, f.name)] = f.metadata["runtime"]
    return out


#: dotted name -> "setting" | "path" of every runtime field (see :data:`RUNTIME_KINDS`);
#: every other field is a protocol parameter
RUNTIME_FIELDS: Dict[str, str] = _runtime_fields(GeoConConfig)


#: what every ``config=`` argument takes: None (defaults), a JSON file path, a mapping of any
#: subset of fields, or a GeoConConfig (see :func:`load_config`)
ConfigLike = Union[None, str, Path, Mapping[str, Any], "GeoConConfig"]


def load_config(source: ConfigLike) -> GeoConConfig:
    """Config from None (defaults), a mapping, a GeoConConfig, or a JSON file path.

    A mapping or file may override any subset of fields; every value is checked, and unknown
    keys are an error. Flat keys of older configs are moved to their nested place (with a
    DeprecationWarning).

    >>> cfg = load_config({"background": {"tau_h": 3}, "preset": "background"})
    >>> cfg.background.tau_h, cfg.preset
    (3.0, 'background')
    >>> cfg.config_hash() == load_config(cfg.to_dict()).config_hash()
    True
    >>> load_config({"io": {"long_side": "512"}})
    Traceback (most recent call last):
    ...
    geocon_torch.errors.ConfigError: io.long_side must be a positive int, null or 'auto', got '512'
    """
    if source is None:
        return GeoConConfig()
    if isinstance(source, GeoConConfig):
        check_scorable(source)  # one read leniently from a stored result never scores
        cfg = source
    elif isinstance(source, Mapping):
        cfg = GeoConConfig.from_dict(source)
    elif not isinstance(source, (str, os.PathLike)):
        raise ConfigError(f"config must be None, a mapping, a JSON file path or a GeoConConfig, "
                          f"got {type(source).__name__}")
    else:
        cfg = GeoConConfig.from_dict(read_json_file(source, "config file"))
    if cfg.invalid_reason is None:  # a stored config read as stored is refused above
        cfg.io.lens.check_complete()  # each io.lens field alone is a valid edit
    return cfg
