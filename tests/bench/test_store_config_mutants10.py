"""Mutation-found gaps of the result store and the config (session 24, round 10): the key
columns of a clip row checked as text, the flat record of a row (prompt-family fallback, the
object mean over the objects that report one, non-bool verdicts, no warnings), JSONL
validation of other configs' lines, per-config counts of joined rows only (the report's
default config), which renamed clip rows are dropped; the ordering of the gate's magnitude
bounds and a lenient read of a section that cannot score. Each test pins one behaviour no
other default test pinned."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import _clip, fake_result

from geocon_torch.bench import ResultStore, load_results
from geocon_torch.bench.schema import ResultSchemaError
from geocon_torch.bench.store import config_counts, flatten_row
from geocon_torch.config import GeoConConfig
from geocon_torch.errors import ConfigError, InputError


# --- bench/store.py: clip rows ----------------------------------------------------------------
def test_the_key_columns_are_checked_text_too(tmp_path: Path):
    """content_hash / config_hash are text columns like the rest: a NUL (which PostgreSQL
    cannot keep) or a non-string is an InputError naming the column, on SQLite too."""
    with ResultStore(str(tmp_path / "r.sqlite")) as s:
        with pytest.raises(InputError, match="content_hash holds a NUL"):
            s.put(_clip("a"), "h\x00", "cfg", fake_result("a"))
        with pytest.raises(InputError, match="config_hash must be a string"):
            s.put(_clip("a"), "h1", 7, fake_result("a"))
        assert s.count("clips") == 0 and s.count("results") == 0


# --- bench/store.py: flatten_row --------------------------------------------------------------
def _flat(res: dict, **row) -> dict:
    return flatten_row({"result": res, **row})


def test_flat_prompt_category_falls_back_to_the_result():
    """A clip row without a prompt family takes the result's; the row's wins when given."""
    res = fake_result("a", prompt_category="C3")
    assert _flat(res, clip_id="a", prompt_category=None)["prompt_category"] == "C3"
    assert _flat(res, clip_id="a", prompt_category="C5")["prompt_category"] == "C5"


def test_flat_object_mean_and_max_over_the_objects_that_have_them():
    """adadfrc_mean averages only objects that report it (0.4 and 0.2 -> 0.3, not over all 3
    objects); adap90_max is the largest AdaP90 (0.9), not the smallest."""
    res = fake_result("a")
    res["foreground"]["objects"] = [{"id": 0, "adadfrc_mean": 0.4, "adap90": 0.5},
                                    {"id": 1, "adap90": 0.9},
                                    {"id": 2, "adadfrc_mean": 0.2, "adap90": 0.1}]
    flat = _flat(res, clip_id="a")
    assert flat["num_objects"] == 3
    assert flat["adadfrc_mean"] == pytest.approx(0.3, abs=1e-12)
    assert flat["adap90_max"] == pytest.approx(0.9, abs=1e-12)


def test_flat_background_pass_only_a_bool():
    """A non-bool ``background.pass`` (1, "yes") flattens to None, a bool as it is."""
    for bad in (1, "yes"):
        res = fake_result("a")
        res["background"]["pass"] = bad
        assert _flat(res, clip_id="a")["background_pass"] is None
    assert _flat(fake_result("a", ir=0.99, ge=1.0), clip_id="a")["background_pass"] is True


def test_flat_warnings_none_when_there_are_none():
    """No warnings flatten to None (an empty Parquet cell), not the empty string; two are
    "; "-joined."""
    res = fake_result("a")
    res["warnings"] = []
    assert _flat(res, clip_id="a")["warnings"] is None
    res["warnings"] = ["w1", "w2"]
    assert _flat(res, clip_id="a")["warnings"] == "w1; w2"


# --- bench/store.py: reading --------------------------------------------------------------------
def test_jsonl_validation_covers_lines_of_other_configs(tmp_path: Path):
    """load_results(config_hash=...) of a JSONL file checks every line, whichever config: a
    bad line of config "other" is refused even when only "cfg" is asked for."""
    good = fake_result("a", config_hash="cfg")
    bad = fake_result("b", config_hash="other")
    bad["status"] = "bogus"
    path = tmp_path / "r.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(ResultSchemaError, match="line 2"):
        load_results(path, config_hash="cfg")
    assert len(load_results(path, config_hash="cfg", validate=False)) == 1


def test_config_counts_count_joined_rows_only(tmp_path: Path):
    """A clip row that points at no stored result is no row of rows(): config_counts leaves it
    out (counts 1 for the clip with a result, not 2), so the report's default config (the one
    with most rows) is not picked by clip rows alone."""
    db = str(tmp_path / "r.sqlite")
    with ResultStore(db) as s:
        s.put(_clip("a"), "h1", "cfg", fake_result("a"))
        s.put(_clip("b"), "h2", "cfg")  # linked to no result
        assert s.count("clips") == 2
        s.put(_clip("c"), "h3", "other", fake_result("c", config_hash="other"))
        s.put(_clip("d"), "h4", "other", fake_result("d", config_hash="other"))
        assert s.config_counts() == {"cfg": 1, "other": 2} and len(s.rows("cfg")) == 1
    assert config_counts(db) == {"cfg": 1, "other": 2}


def test_drop_renamed_clips_touches_only_rows_of_the_given_paths(tmp_path: Path):
    """Only a clip row of one of the given paths under another id is dropped; a row of a
    path not given stays."""
    db = str(tmp_path / "r.sqlite")
    with ResultStore(db) as s:
        s.put({**_clip("old"), "path": "v/a.mp4"}, "h1", "cfg", fake_result("old"))
        s.put({**_clip("b"), "path": "v/b.mp4"}, "h2", "cfg", fake_result("b"))
        assert s.drop_renamed_clips([("new", "v/a.mp4")], "cfg") == 1
        assert [r[0] for r in s._select("SELECT clip_id FROM clips", ())[1]] == ["b"]


# --- config.py ---------------------------------------------------------------------------------
def test_gate_magnitude_bounds_must_be_ordered():
    """gate.magnitude_low above gate.magnitude_high is refused (as the other gate pairs are),
    when built and when assigned; equal ends are allowed."""
    cfg = GeoConConfig().replace(gate={"magnitude_low": 4.0, "magnitude_high": 4.0})
    assert cfg.gate.magnitude_low == cfg.gate.magnitude_high == 4.0
    with pytest.raises(ConfigError, match="magnitude_low must be <="):
        cfg.gate.magnitude_low = 5.0
    assert cfg.gate.magnitude_low == 4.0
    with pytest.raises(ConfigError, match="gate.magnitude_low must be <= gate.magnitude_high"):
        GeoConConfig().replace(gate={"magnitude_low": 9.0, "magnitude_high": 2.0})


def test_a_lenient_read_keeps_a_section_that_cannot_score():
    """Inside a lenient read (strict=False) a section object read leniently before is kept as
    it is, with its reason, not refused; a strict read refuses it."""
    stored = GeoConConfig.from_dict({"io": {"long_side": 1}}, strict=False)
    assert "io.long_side" in stored.io.invalid_reason
    again = GeoConConfig.from_dict({"io": stored.io}, strict=False)
    assert again.io.long_side == 1 and again.io.invalid_reason == stored.io.invalid_reason
    with pytest.raises(ConfigError, match="not valid for scoring"):
        GeoConConfig.from_dict({"io": stored.io})
