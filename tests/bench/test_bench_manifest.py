"""Manifest parsing: CSV / JSONL, every sec. 5.5 field, errors that name the line."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import CountingScorer, write_clips, write_jsonl

from geocon_torch.bench import (
    ManifestEntry,
    ManifestError,
    ResultStore,
    is_server_url,
    load_manifest,
    write_manifest,
)
from geocon_torch.cli import main

CSV = ("clip_id,path,prompt,generator,generator_version,seed,resolution,fps,duration,masks_path,"
       """category,extra_col
a,clips/a.mp4,a red car,wan,2.1,3,1280x720,24,5.0,masks/a.npz,C4,x
b,/abs/b.mp4,"a quote, with comma",sora,,,,,,,C1,
""")


def test_csv_all_fields(tmp_path: Path):
    p = tmp_path / "m.csv"
    p.write_text(CSV)
    a, b = load_manifest(p)
    assert a.clip_id == "a" and a.generator == "wan" and a.generator_version == "2.1"
    assert a.path == str(tmp_path / "clips/a.mp4")
    assert a.masks_path == str(tmp_path / "masks/a.npz")
    assert a.seed == 3 and a.resolution == (1280, 720) and a.fps == 24.0 and a.duration == 5.0
    assert a.prompt_category == "C4" and a.prompt == "a red car" and a.extra == {"extra_col": "x"}
    assert a.line == 2 and b.line == 3
    assert b.path == "/abs/b.mp4" and b.seed is None and b.fps is None
    assert b.prompt == "a quote, with comma"
    assert a.scene == "C4|a red car|3" and b.scene == "clip:b"


def test_jsonl_roundtrip(tmp_path: Path):
    rows = [{"clip_id": "x", "path": "x.mp4", "generator": "m", "seed": 1, "resolution": [640, 480],
             "fps": 8, "category": "C2"},
            {"clip_id": "y", "path": "y.mp4", "generator": "m", "duration": 0}]
    p = tmp_path / "m.jsonl"
    p.write_text("# comment\n" + "\n".join(json.dumps(r) for r in rows) + "\n\n")
    x, y = load_manifest(p)
    assert x.resolution == (640, 480) and x.fps == 8.0 and x.line == 2 and y.duration == 0.0
    for suffix in (".csv", ".jsonl"):
        out = write_manifest(tmp_path / f"back{suffix}", [x, y])
        again = load_manifest(out)
        assert [e.to_dict() for e in again] == [e.to_dict() for e in (x, y)]


_JSONL_HEAD = '{"clip_id": "a", "path": "a.mp4", "generator": "m"}\n'
_B = '{"clip_id": "b", "path": "b.mp4", "generator": "m", '


@pytest.mark.parametrize("suffix, text, message", [
    (".jsonl", _JSONL_HEAD + '{"clip_id": "b", "path": "b.mp4"}',
     "line 2: missing required field(s) generator"),
    (".jsonl", _JSONL_HEAD + _B + '"seed": "x1"}', "line 2: seed must be"),
    (".jsonl", _JSONL_HEAD + _B + '"fps": 0}', "line 2: fps must be > 0"),
    (".jsonl", _JSONL_HEAD + _B + '"fps": "nan"}', "line 2: fps must be finite"),
    (".jsonl", _JSONL_HEAD + _B + '"duration": -1}', "line 2: duration must"),
    (".jsonl", _JSONL_HEAD + _B + '"resolution": "big"}', "line 2: resolution"),
    (".jsonl", _JSONL_HEAD + _B + '"seed": 18446744073709551616}',
     "line 2: seed 18446744073709551616 is outside the signed 64-bit range"),
    (".jsonl", _JSONL_HEAD + _B + '"seed": "-9223372036854775809"}',
     "line 2: seed -9223372036854775809 is outside the signed 64-bit range"),
    (".jsonl", _JSONL_HEAD + _B + '"seed": 1e20}', "line 2: seed 100000000000000000000 is"),
    (".jsonl", _JSONL_HEAD + _B + '"prompt": "a\\u0000b"}',
     "line 2: field 'prompt' holds a NUL character"),
    (".jsonl", _JSONL_HEAD + _B + '"note\\u0000": "x"}', "line 2: field 'note?' holds a NUL"),
    (".csv", "clip_id,path,generator\na,a.mp4,m\nb,b.mp4,g\x00en",
     "line 3: field 'generator' holds a NUL character"),
    (".jsonl", _JSONL_HEAD + '{"clip_id": "a", "path": "b.mp4", "generator": "m"}',
     "line 2: duplicate clip_id 'a'"),
    (".jsonl", _JSONL_HEAD + '{"clip_id": "b", "path": ', "line 2: not valid JSON"),
    (".jsonl", _JSONL_HEAD + "[1, 2]", "line 2: a row must be an object"),
    (".csv", "clip_id,generator\na,m", "line 1: header lacks column(s) path"),
    (".csv", "clip_id,path,generator\na,a.mp4,m\nb,,m", "line 3: missing required field(s) path"),
    (".csv", "clip_id,path,generator\na,a.mp4,m,extra", "line 2: more values than header"),
    (".csv", "", "empty CSV"),
])
def test_errors_name_the_line(tmp_path: Path, suffix: str, text: str, message: str):
    p = tmp_path / f"m{suffix}"
    p.write_text(text + "\n" if text else "")
    with pytest.raises(ManifestError) as err:
        load_manifest(p)
    assert message in str(err.value) and str(p) in str(err.value)


def test_file_errors(tmp_path: Path):
    with pytest.raises(ManifestError, match="not found"):
        load_manifest(tmp_path / "nope.csv")
    (tmp_path / "m.txt").write_text("x")
    with pytest.raises(ManifestError, match="must be .csv or .jsonl"):
        load_manifest(tmp_path / "m.txt")


def test_entry_in_code_defaults():
    e = ManifestEntry("c", "/x.mp4", "m")
    assert e.scene == "clip:c" and e.to_dict()["resolution"] is None


def test_prompt_family_column_is_category_or_prompt_category(tmp_path: Path):
    p = tmp_path / "m.csv"
    p.write_text("clip_id,path,generator,category,prompt_category,seed\n"
                 "a,a.mp4,m,C4,,1\nb,b.mp4,m,,C2,1\nc,c.mp4,m,C3,C3,1\nd,d.mp4,m,,,1\n")
    a, b, c, d = load_manifest(p)
    assert [e.prompt_category for e in (a, b, c, d)] == ["C4", "C2", "C3", None]
    assert a.extra == {} and a.scene == "C4||1" and "category" not in a.to_dict()
    out = write_manifest(tmp_path / "back.csv", [a, b])
    assert out.read_text().splitlines()[0].split(",")[-1] == "prompt_category"
    assert [e.prompt_category for e in load_manifest(out)] == ["C4", "C2"]
    p.write_text("clip_id,path,generator,category,prompt_category\na,a.mp4,m,C4,C2\n")
    with pytest.raises(ManifestError, match="line 2: prompt_category 'C2' and category 'C4'"):
        load_manifest(p)


def test_relative_paths_are_stored_absolute(tmp_path: Path, monkeypatch):
    """A manifest given by a relative path: its relative clip paths resolve against its own
    folder and come back absolute (a store filled from one working directory is read from any
    other)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "m.csv").write_text("path,generator\nclips/a.mp4,g\n")
    monkeypatch.chdir(tmp_path)
    (entry,) = load_manifest("sub/m.csv")
    assert entry.path == str(tmp_path / "sub" / "clips" / "a.mp4")


def test_seed_extremes_are_read(tmp_path: Path):
    rows = [{"clip_id": "a", "path": "a.mp4", "generator": "m", "seed": 2 ** 63 - 1},
            {"clip_id": "b", "path": "b.mp4", "generator": "m", "seed": str(-2 ** 63)}]
    a, b = load_manifest(write_jsonl(tmp_path / "m.jsonl", rows))
    assert (a.seed, b.seed) == (2 ** 63 - 1, -2 ** 63)


@pytest.mark.parametrize("bad", [{"seed": 2 ** 64}, {"prompt": "a\x00b"}])
def test_unstorable_manifest_values_fail_before_any_clip(tmp_path: Path, any_db: str, bad,
                                                         capsys, monkeypatch):
    """A 65-bit seed or a NUL in a text field: one line naming the line, exit 2, nothing
    scored or stored, on both back ends (no OverflowError / server error mid-run)."""
    rows = write_clips(tmp_path / "clips", 3)
    rows[1].update(bad)
    scorer = CountingScorer()
    monkeypatch.setattr("geocon_torch.bench.runner.default_score_fn", scorer)
    m = write_jsonl(tmp_path / "m.jsonl", rows)
    assert main(["bench", str(m), "--db", any_db, "--no-progress", "--batch-clips", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{m}, line 2: " in err[0] and scorer.calls == []
    if is_server_url(any_db):
        with ResultStore(any_db) as s:
            assert s.count() == 0 and s.count("clips") == 0
    else:
        assert not Path(any_db).exists()
