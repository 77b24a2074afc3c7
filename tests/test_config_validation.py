"""Config values are checked when a config is built (issue 16 item 4, issue 12 item 5): every
field of every config dataclass rejects a wrong type and an out-of-range / unknown value with a
ConfigError naming the dotted field; old flat keys map to the nested sections with the same
values and the same config hash."""
from __future__ import annotations

import argparse
import dataclasses
import json
import warnings
from typing import Any, Iterator, List, Tuple

import pytest

from geocon_torch import ConfigError, GeoConConfig, load_config
from geocon_torch import config as config_module
from geocon_torch.config import (RENAMED_KEYS, SECTIONS, EpipolarConfig, FeatureConfig,
                                 IOConfig, Rule)


def _places(cls: type = GeoConConfig, prefix: str = "") -> Iterator[Tuple[str, type]]:
    """(dotted place, section class) of every section reachable from GeoConConfig."""
    yield prefix, cls
    for f in dataclasses.fields(cls):
        sub = f.metadata.get("section")
        if sub is not None:
            yield from _places(sub, f"{prefix}.{f.name}" if prefix else f.name)


PLACES = list(_places())
FIELDS = [(place, cls, f) for place, cls in PLACES for f in dataclasses.fields(cls)
          if "rule" in f.metadata]


def _dotted(place: str, name: str) -> str:
    return f"{place}.{name}" if place else name


def _wrong_types(rule: Rule) -> List[Any]:
    """Values of the wrong type for a field with this rule."""
    null = [] if rule.nullable else [None]
    if rule.kind == "int":
        return ["1", 2.5, True, [1]] + null
    if rule.kind == "float":
        return ["1.0", True, float("nan"), [1.0]] + null
    if rule.kind == "bool":
        return [1, 0, "yes", "true"] + null
    if rule.kind in ("str", "choice"):
        return [1, True, ["auto"]] + null
    return ["1", [], [True], ["a"], 3] + null  # ints / floats tuples


def _out_of_range(rule: Rule) -> List[Any]:
    """Values of the right type outside the field's range / choices."""
    if rule.kind == "choice":
        return ["no-such-option", rule.choices[0].upper() + "x"]
    if rule.kind not in ("int", "float", "ints", "floats"):
        return []
    integer = rule.kind in ("int", "ints")
    out: List[Any] = []
    if rule.low is not None:
        out.append(rule.low if rule.low_open else rule.low - 1)
    if rule.high is not None:
        out.append(rule.high if rule.high_open else rule.high + 1)
    if rule.odd:
        out.append(int(rule.low) + 1)
    if integer:
        out = [int(v) for v in out]
    if rule.kind in ("ints", "floats"):
        base = list(config_module.GvgcConfig().size) if rule.length else [1]
        out = [[v] * len(base) for v in out]
        if rule.length:
            out.append(base + base[:1])  # wrong length
    return out


def _nested(place: str, name: str, value: Any) -> dict:
    data: dict = {name: value}
    for key in reversed(place.split(".") if place else []):
        data = {key: data}
    return data


def test_every_section_is_reached_and_every_field_has_a_rule():
    assert {cls for _, cls in PLACES} == set(SECTIONS)
    for place, cls in PLACES:
        assert cls._name == place, cls  # messages of direct construction name the same place
        for f in dataclasses.fields(cls):
            assert "rule" in f.metadata or "section" in f.metadata, f"{place}.{f.name}"
            if "rule" in f.metadata:  # the default passes its own rule unchanged
                assert f.metadata["rule"].check(f.default, f.name) == f.default


@pytest.mark.parametrize("place,cls,spec", FIELDS,
                         ids=[_dotted(p, f.name) for p, _, f in FIELDS])
def test_every_field_rejects_wrong_types_and_ranges(place, cls, spec):
    rule: Rule = spec.metadata["rule"]
    name = _dotted(place, spec.name)
    bad = _wrong_types(rule) + _out_of_range(rule)
    assert bad
    for value in bad:
        with pytest.raises(ConfigError) as info:  # from a dict / JSON file / CLI
            GeoConConfig.from_dict(_nested(place, spec.name, value))
        msg = str(info.value)
        assert msg.startswith(f"{name} must be "), msg
        assert repr(value) in msg and rule.describe() in msg, msg
        with pytest.raises(ConfigError, match=f"^{name} must be "):  # direct construction
            cls(**{spec.name: value})
        with pytest.raises(ConfigError, match=f"^{name} must be "):
            GeoConConfig().replace(**_nested(place, spec.name, value))
        with pytest.raises(ConfigError, match=f"^{name} must be "):  # attribute assignment
            setattr(cls(), spec.name, value)


def test_messages_of_the_issue():
    cases = [({"io": {"long_side": "512"}},
              "io.long_side must be a positive int, null or 'auto', got '512'"),
             ({"background": {"tau_h": "three"}},
              "background.tau_h must be a positive number, got 'three'"),
             ({"features": {"max_keypoints": 2.5}},
              "features.max_keypoints must be a positive int, got 2.5"),
             ({"gate": {"per_pair": "yes"}}, "gate.per_pair must be true or false, got 'yes'"),
             ({"segment": {"method": "sam"}}, "segment.method must be one of 'auto', 'files', "
                                              "'sam2', 'motion', 'none', got 'sam'"),
             ({"preset": "fast"}, "preset must be one of 'geocon', 'background', 'worldatlas', "
                                  "'gvgc', 'epipolar-dpo', 'all', got 'fast'")]
    for data, message in cases:
        with pytest.raises(ConfigError) as info:
            load_config(data)
        assert str(info.value) == message
    with pytest.raises(ConfigError, match="did you mean background.tau_h"):
        load_config({"background": {"tau_hh": 2.0}})
    with pytest.raises(ConfigError, match="io must be a mapping"):
        load_config({"io": 512})
    with pytest.raises(ConfigError, match=r"gate.hysteresis_low must be <= gate.hysteresis_high"):
        load_config({"gate": {"hysteresis_low": 0.06}})
    with pytest.raises(ConfigError, match="epipolar.gvgc.min_frames must exceed"):
        load_config({"epipolar": {"gvgc": {"min_frames": 60}}})


def test_values_are_normalised_and_hash_alike():
    cfg = load_config({"background": {"tau_h": 3}, "features": {"scales": [1]},
                       "epipolar": {"gvgc": {"size": [90, 160]}}})
    assert type(cfg.background.tau_h) is float and cfg.features.scales == (1.0,)
    assert cfg.epipolar.gvgc.size == (90, 160)
    same = load_config({"background": {"tau_h": 3.0}, "features": {"scales": [1.0]},
                        "epipolar": {"gvgc": {"size": (90, 160)}}})
    assert cfg == same and cfg.config_hash() == same.config_hash()
    # a nested section may be given to a constructor as a mapping (merged onto its defaults)
    assert GeoConConfig(io={"long_side": 512}).io == IOConfig(long_side=512)
    assert EpipolarConfig(tracking={"window": 15}).tracking.window == 15
    assert FeatureConfig().lk.window == 21  # the two LK sections are independent


def test_cli_flags_go_through_validation():
    from geocon_torch.commands._common import build_config

    args = argparse.Namespace(config=None, long_side=0, max_frames=None, stride=None, preset=None)
    with pytest.raises(ConfigError,
                       match="^io.long_side must be a positive int, null or 'auto', got 0"):
        build_config(args)
    args.long_side = 512
    assert build_config(args).io.long_side == 512


def test_json_file_is_validated(tmp_path):
    path = tmp_path / "cfg.json"
    path.write_text(json.dumps({"epipolar": {"ransac": {"confidence": 1.0}}}))
    with pytest.raises(ConfigError, match=r"^epipolar.ransac.confidence must be a number in "
                                          r"\(0, 1\), got 1.0"):
        load_config(path)


# the flat keys of a config file written before the nested sections, with non-default values
OLD_FLAT = {
    "features": {"lk_quality": 0.01, "lk_min_distance": 5.0, "lk_block": 5, "lk_window": 15,
                 "lk_levels": 2, "lk_fb_threshold": 1.0, "lk_backend": "opencv"},
    "epipolar": {"ransac_threshold_px": 2.0, "confidence": 0.99, "max_iterations": 500,
                 "tracking_max_corners": 500, "tracking_quality": 0.01,
                 "tracking_min_distance": 4.0, "tracking_block": 5, "tracking_window": 15,
                 "tracking_levels": 2, "tracking_fb_threshold_px": 1.0,
                 "tracking_min_tracks": 10, "tracking_min_ncc": 0.5, "tracking_ncc_window": 7,
                 "gvgc_size": [360, 640], "gvgc_intervals": [20, 10], "gvgc_min_frames": 31,
                 "gvgc_sift_features": 1000, "gvgc_ratio": 0.8, "gvgc_threshold_px": 2.0,
                 "gvgc_confidence": 0.95, "gvgc_max_iterations": 100, "gvgc_matcher": "bf",
                 "max_width": 480},
}
NESTED = {
    "features": {"lk": {"quality": 0.01, "min_distance": 5.0, "block": 5, "window": 15,
                        "levels": 2, "fb_threshold_px": 1.0, "backend": "opencv"}},
    "epipolar": {"ransac": {"threshold_px": 2.0, "confidence": 0.99, "max_iterations": 500},
                 "tracking": {"max_corners": 500, "quality": 0.01, "min_distance": 4.0,
                              "block": 5, "window": 15, "levels": 2, "fb_threshold_px": 1.0,
                              "min_tracks": 10, "min_ncc": 0.5, "ncc_window": 7},
                 "gvgc": {"size": [360, 640], "intervals": [20, 10], "min_frames": 31,
                          "sift_features": 1000, "ratio": 0.8, "matcher": "bf",
                          "ransac": {"threshold_px": 2.0, "confidence": 0.95,
                                     "max_iterations": 100}},
                 "max_width": 480},
}


def test_old_flat_keys_map_to_the_nested_sections(tmp_path):
    moved = sum(len(v) for v in OLD_FLAT.values()) - 1  # max_width is not renamed
    assert moved == len(RENAMED_KEYS)
    with pytest.warns(DeprecationWarning) as record:
        old = GeoConConfig.from_dict(OLD_FLAT)
    texts = [str(w.message) for w in record if issubclass(w.category, DeprecationWarning)]
    assert len(texts) == len(RENAMED_KEYS)
    assert "config key epipolar.tracking_window is deprecated; it now lives at " \
           "epipolar.tracking.window" in texts
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the nested form warns about nothing
        new = GeoConConfig.from_dict(NESTED)
    assert old == new and old.config_hash() == new.config_hash()
    assert old.config_hash() != GeoConConfig().config_hash()
    path = tmp_path / "old.json"
    path.write_text(json.dumps(OLD_FLAT))
    with pytest.warns(DeprecationWarning):
        assert load_config(path).config_hash() == new.config_hash()
    with pytest.warns(DeprecationWarning):  # replace / section from_dict / constructors too
        assert GeoConConfig().replace(epipolar=OLD_FLAT["epipolar"]).epipolar == new.epipolar
    with pytest.warns(DeprecationWarning):
        assert EpipolarConfig.from_dict(OLD_FLAT["epipolar"]) == new.epipolar
    with pytest.warns(DeprecationWarning):
        assert GeoConConfig(features=OLD_FLAT["features"]).features == new.features
    assert OLD_FLAT["epipolar"]["tracking_window"] == 15  # the caller's dict is not changed


def test_old_defaults_are_the_new_defaults():
    """The flat defaults before the nested sections, migrated, are today's defaults (so
    results are unchanged)."""
    old_defaults = {
        "features": {"lk_quality": 0.001, "lk_min_distance": 3.0, "lk_block": 3, "lk_window": 21,
                     "lk_levels": 3, "lk_fb_threshold": 1.5, "lk_backend": "torch"},
        "epipolar": {"ransac_threshold_px": 1.0, "confidence": 0.999, "max_iterations": 10000,
                     "tracking_max_corners": 2000, "tracking_quality": 0.001,
                     "tracking_min_distance": 3.0, "tracking_block": 3, "tracking_window": 21,
                     "tracking_levels": 3, "tracking_fb_threshold_px": 1.5,
                     "tracking_min_tracks": 8, "tracking_min_ncc": 0.8,
                     "tracking_ncc_window": 11, "gvgc_size": [720, 1280],
                     "gvgc_intervals": [60, 50, 40, 30, 20, 10], "gvgc_min_frames": 71,
                     "gvgc_sift_features": 40000, "gvgc_ratio": 0.85, "gvgc_threshold_px": 3.0,
                     "gvgc_confidence": 0.99, "gvgc_max_iterations": 1000,
                     "gvgc_matcher": "flann"},
    }
    with pytest.warns(DeprecationWarning):
        migrated = GeoConConfig.from_dict(old_defaults)
    assert migrated == GeoConConfig()
    cfg = GeoConConfig()
    assert cfg.features.lk.lk_kwargs(cfg.features.max_keypoints, "torch") == dict(
        max_corners=2000, quality=0.001, min_distance=3.0, block=3, window=21, levels=3,
        fb_threshold_px=1.5, backend="torch")
    assert cfg.epipolar.tracking.lk_kwargs(cfg.epipolar.sift_features, "opencv")["backend"] \
        == "opencv"


def test_old_and_new_key_together():
    with pytest.warns(DeprecationWarning):  # the same value twice is fine
        cfg = load_config({"epipolar": {"tracking_min_ncc": 0.5, "tracking": {"min_ncc": 0.5}}})
    assert cfg.epipolar.tracking.min_ncc == 0.5
    with pytest.warns(DeprecationWarning), pytest.raises(ConfigError, match="both given"):
        load_config({"epipolar": {"tracking_min_ncc": 0.5, "tracking": {"min_ncc": 0.6}}})


def test_option_lists_match_the_modules_that_use_them():
    """The option tuples in config are the one list; modules that keep their own copy agree."""
    from geocon_torch.features import available_extractors
    from geocon_torch.flow import FLOW_BACKENDS
    from geocon_torch.gate import STATISTICS
    from geocon_torch.measures.foreground import SCORES
    from geocon_torch.pipeline import PRESETS

    assert set(config_module.FLOW_CHOICES) == set(FLOW_BACKENDS)
    assert tuple(config_module.GATE_STATISTIC_CHOICES) == tuple(STATISTICS)
    assert tuple(config_module.FOREGROUND_SCORE_CHOICES) == tuple(SCORES)
    assert tuple(config_module.PRESET_CHOICES) == tuple(PRESETS)
    assert set(available_extractors()) <= set(config_module.FEATURE_BACKEND_CHOICES)
    assert set(config_module.EPIPOLAR_FEATURE_CHOICES) <= set(
        config_module.FEATURE_BACKEND_CHOICES)


def test_non_finite_and_overflowing_numbers_are_refused():
    """inf has no JSON form (a result's config would record null and not load back), and an
    integer too large for a float is a ConfigError, not an OverflowError."""
    for bad in (float("inf"), float("-inf"), 10 ** 400):
        with pytest.raises(ConfigError, match="background.report_ge_px"):
            load_config({"background": {"report_ge_px": bad}})
    with pytest.raises(ConfigError, match="gate.reference_long_side"):
        load_config({"gate": {"reference_long_side": float("inf")}})


def test_negative_zero_hashes_as_zero():
    a, b = load_config({"gate": {"u_margin": -0.0}}), load_config({"gate": {"u_margin": 0.0}})
    assert a == b and a.config_hash() == b.config_hash()


def test_section_objects_are_copied_and_must_be_exact():
    """A section given to ``replace`` is a copy (editing it never edits the config it came from
    or changes that config's hash); a subclass section (TrackingConfig is an LKConfig with
    more fields) is refused: its extra fields would not load back."""
    a, other = GeoConConfig(), load_config({"gate": {"tau_t": 0.05}})
    before = other.config_hash()
    b = a.replace(gate=other.gate)
    b.gate.tau_t = 0.2
    assert other.gate.tau_t == 0.05 and other.config_hash() == before
    with pytest.raises(ConfigError, match="features.lk must be a mapping of LKConfig"):
        a.replace(features={"backend": "lk-tracks", "lk": a.epipolar.tracking})


def test_config_source_of_another_type_is_a_config_error():
    for bad in (123, [("io", {})], 1.5):
        with pytest.raises(ConfigError, match="config must be None, a mapping"):
            load_config(bad)
