"""Bad-input corpus through the real pipeline: the run finishes, every row is ok /
not_applicable / error with a reason, and a re-run recomputes nothing."""
from __future__ import annotations

from pathlib import Path

from helpers import bad_input_corpus, write_jsonl

from geocon_torch.bench import ResultStore, default_score_fn, run_manifest
from geocon_torch.config import GeoConConfig
from geocon_torch.pipeline import pinned_config

CFG = GeoConConfig().replace(io={"long_side": 128, "max_frames": 6})


def test_bad_input_corpus_finishes_and_resumes(tmp_path: Path):
    m = write_jsonl(tmp_path / "m.jsonl", bad_input_corpus(tmp_path / "clips"))
    db = tmp_path / "r.sqlite"
    calls = []

    def counting(entry, config, device):
        calls.append(entry.clip_id)
        return default_score_fn(entry, config, device)

    summary = run_manifest(m, db, config=CFG, score_fn=counting, progress=False)
    assert summary.total == 10 and summary.ok + summary.not_applicable + summary.error == 10
    with ResultStore(db) as s:
        rows = {r["clip_id"]: r for r in s.rows()}
    assert len(rows) == 10
    for cid, r in rows.items():
        assert r["status"] in ("ok", "not_applicable", "error"), cid
        if r["status"] != "ok":
            assert isinstance(r["reason"], str) and len(r["reason"]) > 5, cid
        assert r["result"]["config_hash"] == pinned_config(CFG).config_hash()
    assert rows["good"]["status"] == "ok" and rows["good"]["result"]["background"]["ir"] > 0.9
    assert rows["missing"]["status"] == "error" and "no such file" in rows["missing"]["reason"]
    for bad in ("zero", "text"):
        assert rows[bad]["status"] == "error" and "VideoReadError" in rows[bad]["reason"]
    assert rows["one_frame"]["status"] == "not_applicable"
    assert "frame" in rows["one_frame"]["reason"]
    for flat in ("grey", "noise"):
        assert rows[flat]["status"] == "not_applicable" and "texture" in rows[flat]["reason"]
    # a 16 x 16 px crop of a rendered scene, upscaled to 128 px: too smooth for SIFT, real
    # content for the lk-tracks fallback (features.fallback), which scores it
    tiny = rows["tiny16"]["result"]
    assert tiny["status"] == "ok" and tiny["backends"]["features"] == "lk-tracks"
    assert tiny["background"]["fallback"]["from_reason"].startswith("too little texture")
    assert tiny["background"]["ir"] > 0.9
    # paths that cannot be hashed (missing, zero-byte) never reach the scorer
    assert sorted(calls) == sorted(set(rows) - {"missing", "zero"})
    calls.clear()
    again = run_manifest(m, db, config=CFG, score_fn=counting, progress=False)
    assert calls == [] and again.skipped == 10
    with ResultStore(db) as s:
        assert s.count("clips") == 10

