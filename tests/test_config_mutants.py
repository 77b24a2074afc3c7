"""Config and preset rules pinned where the generic rule-driven tests cannot see a change:
the documented bounds of single fields (inclusive / exclusive ends, null allowed), closed ends
that must accept their end value, cross-field order checks that allow equality, the lenient
read that must not leak into later strict reads, ``replace`` that never shares sections with
the config it copies, and the preset table's own consistency checks."""
from __future__ import annotations

from typing import Any, Dict

import pytest

from geocon_torch.config import GeoConConfig, Rule
from geocon_torch.errors import ConfigError, InputError
from geocon_torch.presets import PRESETS, Preset, get_preset, preset_for_kind


def _nested(dotted: str, value: Any) -> Dict[str, Any]:
    head, *rest = dotted.split(".")
    for key in reversed(rest):
        value = {key: value}
    return {head: value}


def _get(cfg: GeoConConfig, dotted: str) -> Any:
    for key in dotted.split("."):
        cfg = getattr(cfg, key)
    return cfg


#: (field, value accepted at the documented end) -- each end is part of the field's meaning
ACCEPTED = [("background.report_ir", 1.0), ("background.report_ir", 0.0),
            ("io.max_lost_fraction", 1.0), ("gate.u_margin", 1.0),
            ("features.ratio", 1.0), ("features.scales", [1.0]),
            ("epipolar_dpo.min_matches", 8),  # the 8-point F fit's floor
            ("gate.view_long_side", None), ("gate.view_long_side", 16),
            ("io.long_side", 2), ("background.min_valid_pairs", 1),
            ("io.letterbox_min_fraction", 0.0), ("io.letterbox_min_fraction", 0.499),
            ("features.lk.min_ncc", -1.0), ("features.lk.min_ncc", 1.0)]
#: (field, value refused) at the other side of an end
REFUSED = [("io.letterbox_min_fraction", 0.5),  # a bar pair covering the whole side
           ("epipolar_dpo.min_matches", 7), ("background.min_valid_pairs", 0),
           ("gate.view_long_side", 15), ("io.long_side", 1),
           ("ransac.confidence", 1.0), ("ransac.confidence", 0.0), ("features.ratio", 0.0)]


@pytest.mark.parametrize("name,value", ACCEPTED, ids=[f"{n}={v}" for n, v in ACCEPTED])
def test_documented_ends_are_accepted(name, value):
    cfg = GeoConConfig.from_dict(_nested(name, value))
    got = _get(cfg, name)
    assert got == (tuple(value) if isinstance(value, list) else value)


@pytest.mark.parametrize("name,value", REFUSED, ids=[f"{n}={v}" for n, v in REFUSED])
def test_documented_ends_are_refused(name, value):
    with pytest.raises(ConfigError, match=f"^{name.replace('.', '[.]')} must be"):
        GeoConConfig.from_dict(_nested(name, value))


def test_closed_and_open_ends_of_one_rule():
    closed, open_ = Rule("float", 0, 1), Rule("float", 0, 1, low_open=True, high_open=True)
    assert closed.check(0, "x") == 0.0 and closed.check(1, "x") == 1.0
    for end in (0, 1):
        with pytest.raises(ConfigError, match=r"x must be a number in \(0, 1\)"):
            open_.check(end, "x")
    assert open_.check(0.5, "x") == 0.5


def test_ordered_pairs_may_be_equal():
    """gate.hysteresis_low == high (one threshold, no U band) and parallax_low == high are
    valid: the check is low <= high."""
    cfg = GeoConConfig().replace(gate={"hysteresis_low": 0.04, "hysteresis_high": 0.04,
                                       "parallax_low": 0.2, "parallax_high": 0.2,
                                       "magnitude_low": 8.0, "magnitude_high": 8.0})
    assert (cfg.gate.hysteresis_low, cfg.gate.hysteresis_high) == (0.04, 0.04)
    cfg.gate.parallax_low = 0.2  # assignment runs the same check
    assert cfg.gate.magnitude_low == cfg.gate.magnitude_high == 8.0


def test_a_set_field_drops_duplicates_and_hashes_as_the_set():
    a = GeoConConfig().replace(features={"scales": [1.0, 0.5, 1.0, 0.5]})
    b = GeoConConfig().replace(features={"scales": [0.5, 1.0]})
    assert a.features.scales == (0.5, 1.0)
    assert a.config_hash() == b.config_hash()


def test_a_lenient_read_leaves_later_strict_reads_strict():
    bad = {"background": {"report_ir": 1.5}}
    lenient = GeoConConfig.from_dict(bad, strict=False)
    assert lenient.background.report_ir == 1.5
    assert lenient.invalid_reason.startswith("background.report_ir must be")
    with pytest.raises(ConfigError, match="background.report_ir must be"):
        GeoConConfig.from_dict(bad)
    with pytest.raises(ConfigError, match="background.report_ir must be"):
        GeoConConfig().replace(**bad)
    good = GeoConConfig.from_dict({"background": {"report_ir": 0.9}}, strict=False)
    assert good.invalid_reason is None and good.background.invalid_reason is None


def test_replace_never_shares_a_section_with_its_source():
    """Sections not named in replace() are copies too: editing the copy leaves the source and
    its hash alone."""
    src = GeoConConfig()
    before = src.config_hash()
    copy = src.replace(io={"stride": 2})
    assert copy.features is not src.features and copy.features.lk is not src.features.lk
    copy.features.lk.window = 15
    copy.background.tau_h = 3.0
    assert src.features.lk.window == 21 and src.background.tau_h == 2.0
    assert src.config_hash() == before != copy.config_hash()


def test_path_fields_enter_the_hash_as_given_and_settings_not_at_all():
    base = GeoConConfig()
    proto = base.protocol_dict()
    assert proto["segment"]["sam2_checkpoint"] is None
    assert "stream_min_frames" not in proto["io"] and "chunk_frames" not in proto["features"]
    streamed = base.replace(io={"stream_min_frames": None}, features={"chunk_frames": None})
    assert streamed.config_hash() == base.config_hash()
    given = base.replace(segment={"sam2_checkpoint": "/w/sam2.pt"})
    assert given.protocol_dict()["segment"]["sam2_checkpoint"] is True
    assert given.config_hash() != base.config_hash()


# ---------------------------------------------------------------------------------------------
# presets
def test_preset_table_rows_check_their_sections():
    with pytest.raises(InputError, match="in that order"):
        Preset("x", "wrong order", ("foreground", "background"), "background")
    with pytest.raises(InputError, match="status_from must be one of its sections"):
        Preset("x", "status from a block it does not run", ("background",), "epipolar")
    with pytest.raises(InputError, match="epipolar_protocol"):
        Preset("x", "epipolar without protocol", ("epipolar",), "epipolar")
    ok = Preset("x", "fine", ("background", "epipolar"), "epipolar", epipolar_protocol="gvgc")
    assert ok.sections == ("background", "epipolar")


def test_reward_kinds_resolve_only_by_kind():
    assert preset_for_kind("background").name == "background"
    assert preset_for_kind("epipolar").name == "worldatlas"
    assert preset_for_kind("epipolar-dpo").name == "epipolar-dpo"
    for name in ("worldatlas", "gvgc", "geocon", "all"):  # preset names, not reward kinds
        with pytest.raises(InputError, match="reward kind must be one of"):
            preset_for_kind(name)
    with pytest.raises(InputError, match="preset must be one of"):
        get_preset("Background")


def test_with_preset_records_the_name_in_the_hash():
    base = GeoConConfig()
    hashes = {name: base.with_preset(name).config_hash() for name in PRESETS}
    assert len(set(hashes.values())) == len(PRESETS)
    assert hashes["geocon"] == base.config_hash()  # the first row is the default
    assert base.with_preset("gvgc").preset == "gvgc"
