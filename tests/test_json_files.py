"""read_json_file: one reader for the JSON files users hand in, with clear errors."""
from __future__ import annotations

import pytest

from geocon_torch._json import read_json_file
from geocon_torch.errors import GeoConError, VideoReadError
from geocon_torch.segment.sam2 import load_prompts
from geocon_torch.synth import load_synth


def test_reads_and_reports(tmp_path):
    good = tmp_path / "good.json"
    good.write_text('{"a": [1, 2.5]}')
    assert read_json_file(good, "thing") == {"a": [1, 2.5]}
    with pytest.raises(GeoConError, match="thing not found"):
        read_json_file(tmp_path / "missing.json", "thing")
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"\xff\xfe{")
    with pytest.raises(VideoReadError, match="thing .* is not valid JSON"):
        read_json_file(bad, "thing", VideoReadError)


def test_callers_turn_bad_files_into_clear_errors(tmp_path):
    bad = tmp_path / "prompts.json"
    bad.write_text("[{oops")
    with pytest.raises(GeoConError, match="SAM-2 prompt file .* is not valid JSON"):
        load_prompts(bad)
    with pytest.raises(VideoReadError, match="ground-truth JSON not found"):
        load_synth(tmp_path / "nope.json")
