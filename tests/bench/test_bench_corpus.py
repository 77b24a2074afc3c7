"""Bad-input corpus through the real pipeline: the run finishes, every row is ok /
not_applicable / error with a reason, and a re-run recomputes nothing."""
from __future__ import annotations

from pathlib import Path

import torch
from helpers import write_jsonl

from geocon_torch.bench import ResultStore, default_score_fn, run_manifest
from geocon_torch.config import GeoConConfig
from geocon_torch.io import write_video
from geocon_torch.pipeline import pinned_config

CFG = GeoConConfig().replace(io={"long_side": 128, "max_frames": 6})


def _corpus(folder: Path) -> list:
    from geocon_torch.synth import render_scene

    folder.mkdir(parents=True, exist_ok=True)
    rot = render_scene("C2", num_frames=6, size=(96, 128), seed=0).frames
    trans = render_scene("C3", num_frames=6, size=(96, 128), seed=1).frames
    g = torch.Generator().manual_seed(0)
    clips = {
        "good": rot,
        "one_frame": rot[:1],
        "grey": torch.full((6, 3, 96, 128), 128, dtype=torch.uint8),
        "noise": torch.randint(0, 256, (6, 3, 96, 128), generator=g, dtype=torch.uint8),
        "tiny16": rot[:, :, 40:56, 50:66].contiguous(),
        "cuts": torch.cat([rot[:3], trans[3:]]),
    }
    for name, frames in clips.items():
        write_video(folder / f"{name}.mp4", frames, fps=8)
    data = (folder / "good.mp4").read_bytes()
    (folder / "truncated.mp4").write_bytes(data[: len(data) * 2 // 5])
    (folder / "zero.mp4").write_bytes(b"")
    (folder / "text.mp4").write_text("this is not a video\n" * 20)
    names = ["good", "missing", "zero", "truncated", "text", "one_frame", "grey", "noise",
             "tiny16", "cuts"]
    return [{"clip_id": n, "path": str(folder / f"{n}.mp4"), "generator": "m", "category": "C2",
             "seed": i} for i, n in enumerate(names)]


def test_bad_input_corpus_finishes_and_resumes(tmp_path: Path):
    m = write_jsonl(tmp_path / "m.jsonl", _corpus(tmp_path / "clips"))
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
    for flat in ("grey", "noise", "tiny16"):
        assert rows[flat]["status"] == "not_applicable" and "texture" in rows[flat]["reason"]
    # paths that cannot be hashed (missing, zero-byte) never reach the scorer
    assert sorted(calls) == sorted(set(rows) - {"missing", "zero"})
    calls.clear()
    again = run_manifest(m, db, config=CFG, score_fn=counting, progress=False)
    assert calls == [] and again.skipped == 10
    with ResultStore(db) as s:
        assert s.count("clips") == 10

