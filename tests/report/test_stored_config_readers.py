"""Readers of stored results whose config a later validation rule refuses
(``features.fallback`` "disk", stored before checkpoint backends were refused as fallbacks):
the config is read as stored, its stored config_hash kept, and the reader says the config can
no longer score instead of failing or silently using the paper defaults."""
from __future__ import annotations

import json
import math
import warnings

import pytest
from helpers import fake_result

from geocon_torch.bench import ResultStore, load_results, merge_stores
from geocon_torch.cli import main
from geocon_torch.config import GeoConConfig
from geocon_torch.errors import ConfigError
from geocon_torch.report import pair_evidence
from geocon_torch.report.explain import explain_result
from geocon_torch.result import ClipResult
from geocon_torch.rewards import reward_from_result

HASH = "0123456789abcdef"


def stored_row(clip: str = "c1") -> dict:
    """A result row whose config has ``features.fallback`` "disk" and report_ir 0.975."""
    cfg = GeoConConfig().to_dict()
    cfg["features"]["fallback"] = "disk"
    cfg["background"]["report_ir"] = 0.975
    res = fake_result(clip, config_hash=HASH)
    res["config"] = cfg
    return res


def test_explain_uses_the_stored_config_and_says_it_cannot_score():
    text = explain_result(stored_row(), device="cpu", evidence=False)
    first = text.splitlines()[0]
    assert first.startswith("Clip c1: status ok (config no longer valid for scoring: "
                            "features.fallback must be one of")
    assert "got 'disk'" in first and "paper defaults" not in text
    assert "IR 0.9800 >= report_ir 0.975: ok (margin +0.0050)" in text


def test_explain_cli_on_a_stored_json_file(tmp_path, capsys):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(stored_row()))
    assert main(["explain", str(path), "--no-evidence"]) == 0
    out = capsys.readouterr().out
    assert "(config no longer valid for scoring: features.fallback must be one of" in out
    assert "report_ir 0.975: ok" in out


def test_pair_evidence_refuses_to_rescore_with_a_clear_error():
    with pytest.raises(ConfigError, match=r"config is no longer valid for scoring "
                                          r"\(features.fallback must be one of .*got 'disk'"):
        pair_evidence(stored_row(), 0, device="cpu")


def test_explain_evidence_line_names_why(tmp_path):
    row = stored_row()
    row["path"] = str(tmp_path / "gone.mp4")
    text = explain_result(row, device="cpu")
    assert "outlier locations unavailable (the result's config is no longer valid for " \
           "scoring" in text


def test_stores_merge_and_clip_result_keep_config_and_hash(tmp_path):
    """Guard (these readers never rebuild the config): rows come back as stored."""
    row = stored_row()
    assert ClipResult.from_dict(dict(row)).to_dict()["config"] == row["config"]
    jsonl = tmp_path / "r.jsonl"
    jsonl.write_text(json.dumps(row) + "\n")
    db, merged = tmp_path / "s.sqlite", tmp_path / "m.sqlite"
    with ResultStore(db) as store:
        store.put({"clip_id": "c1", "generator": "m"}, "h1", HASH, row)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        merge_stores(merged, [db])
    for source in (jsonl, db, merged):
        (got,) = load_results(source)
        assert got["config_hash"] == HASH and got["result"]["config_hash"] == HASH
        assert got["result"]["config"] == row["config"]


def test_reward_from_result_reads_the_stored_config():
    row = stored_row()
    row["config"]["background"]["report_ge_px"] = 2.0
    got = reward_from_result(row, "background")
    assert got.status == "ok"
    ir, ge = row["background"]["ir"], row["background"]["ge_px"]
    assert got.reward == pytest.approx(ir * math.exp(-ge / 2.0), rel=1e-6)
