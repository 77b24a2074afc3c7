"""Clip ids are unique (issue 16): ids derived from paths use the shortest unique path suffix,
manifests without clip_id get such ids, JSONL results with a repeated id from two files are
told apart, and audit-card files / scene keys never merge two different clips."""
from __future__ import annotations

from pathlib import Path

import pytest
from helpers import CountingScorer, fake_result, write_jsonl

from geocon_torch.bench import (
    ManifestEntry,
    ManifestError,
    ResultSchemaError,
    derive_clip_ids,
    file_key,
    load_manifest,
    load_results,
    run_manifest,
)
from geocon_torch.errors import InputError
from geocon_torch.report import build_report


def test_derive_ids_shortest_unique_suffix(tmp_path: Path):
    got = derive_clip_ids([tmp_path / "cogvideox/3.mp4", tmp_path / "sora/3.mp4",
                           tmp_path / "sora/4.mp4"])
    assert got == ["cogvideox/3", "sora/3", "4"]
    deep = derive_clip_ids([tmp_path / "a/x/v.mp4", tmp_path / "b/x/v.mp4"])
    assert deep == ["a/x/v", "b/x/v"]
    assert derive_clip_ids([tmp_path / "a.mp4", tmp_path / "a.webm", tmp_path / "b.mp4"]) == \
        ["a.mp4", "a.webm", "b"]
    assert derive_clip_ids([tmp_path / "s/b.mp4"], taken=["b"]) == ["s/b"]
    with pytest.raises(InputError, match="not unique.*x.mp4 and .*x.mp4"):
        derive_clip_ids([tmp_path / "x.mp4", tmp_path / "x.mp4"])


def test_file_key_is_safe_and_unique():
    keys = {file_key(c) for c in ("a/b", "a_b", "a b", "a:b")}
    assert len(keys) == 4
    assert all(set(k) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")
               for k in keys)
    assert file_key("x", "hash1") != file_key("x", "hash2") and file_key("x") == file_key("x")


def _two_same_stems(tmp_path: Path):
    for generator in ("cogvideox", "sora"):
        (tmp_path / generator).mkdir(parents=True, exist_ok=True)
        (tmp_path / generator / "3.mp4").write_bytes(f"fake video of {generator}".encode())


def test_manifest_without_clip_id_and_bench_runner(tmp_path: Path):
    _two_same_stems(tmp_path)
    m = tmp_path / "m.csv"
    m.write_text("path,generator,category\ncogvideox/3.mp4,cogvideox,C1\nsora/3.mp4,sora,C1\n"
                 "sora/other.mp4,sora,C2\n")
    (tmp_path / "sora" / "other.mp4").write_bytes(b"another clip")
    entries = load_manifest(m)
    assert [e.clip_id for e in entries] == ["cogvideox/3", "sora/3", "other"]
    assert len({e.scene for e in entries}) == 3
    db = tmp_path / "r.sqlite"
    s = run_manifest(m, db, score_fn=CountingScorer(), progress=False)
    assert s.computed == 3 and s.ok == 3 and s.linked == 0
    rows = load_results(db)
    assert sorted(r["clip_id"] for r in rows) == ["cogvideox/3", "other", "sora/3"]
    assert len({r["scene"] for r in rows}) == 3
    assert {r["clip_id"]: r["result"]["clip"] for r in rows}["sora/3"] == "sora/3"
    page = build_report(db, tmp_path / "rep", draw=False, n_boot=50, cards=3)
    cards = sorted(p.name for p in (tmp_path / "rep" / "img").glob("card_*_timeline.png"))
    assert len(cards) == 3 and any(c.startswith("card_sora_3_") for c in cards)
    assert "cogvideox/3" in page.read_text() and "sora/3" in page.read_text()


def test_explicit_and_derived_ids_never_clash(tmp_path: Path):
    m = tmp_path / "m.jsonl"
    m.write_text('{"clip_id": "3", "path": "a/1.mp4", "generator": "m"}\n'
                 '{"path": "b/3.mp4", "generator": "m"}\n')
    a, b = load_manifest(m)
    assert (a.clip_id, b.clip_id) == ("3", "b/3")
    m.write_text('{"path": "3.mp4", "generator": "m"}\n{"path": "3.mp4", "generator": "m"}\n')
    with pytest.raises(ManifestError, match="without clip_id.*not unique"):
        load_manifest(m)
    dup = [ManifestEntry("x", str(tmp_path / "1.mp4"), "m", line=1),
           ManifestEntry("x", str(tmp_path / "2.mp4"), "m", line=2)]
    with pytest.raises(ManifestError, match="duplicate clip_id 'x'"):
        run_manifest(dup, tmp_path / "r.sqlite", score_fn=CountingScorer(), progress=False)


def test_jsonl_results_with_a_repeated_id_are_told_apart(tmp_path: Path):
    rows = [fake_result("3", path=str(tmp_path / "cogvideox/3.mp4"), ir=0.91),
            fake_result("3", path=str(tmp_path / "sora/3.mp4"), ir=0.99)]
    p = write_jsonl(tmp_path / "r.jsonl", rows)
    got = load_results(p)
    assert [r["clip_id"] for r in got] == ["cogvideox/3", "sora/3"]
    assert got[0]["scene"] != got[1]["scene"]
    write_jsonl(p, [fake_result("3", path="x.mp4"), fake_result("3", path="x.mp4")])
    with pytest.raises(ResultSchemaError, match="clip id '3' appears on lines 1, 2"):
        load_results(p)
    other_cfg = fake_result("3", path="x.mp4", config_hash="other")
    write_jsonl(p, [fake_result("3", path="x.mp4"), other_cfg])
    assert [r["clip_id"] for r in load_results(p)] == ["3", "3"]  # one per config: fine
