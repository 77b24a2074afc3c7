"""Partial decodes reach the result, the store and the flat rows (issue 16 item 1): files
damaged in the test (recipes of tests/io/test_io_integrity.py) are scored by ``score_clip``."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import (
    DROPPED,
    T,
    clean_video,
    corrupt_middle,
    drop_frames,
    moving_noise,
    truncate_tail,
)

from geocon_torch import score_clip
from geocon_torch.bench.store import ResultStore, flatten_row
from geocon_torch.report import build_report
from geocon_torch.result import ClipResult

CFG = {"io": {"long_side": None}, "preset": "background"}


@pytest.fixture(scope="module")
def frames() -> torch.Tensor:
    return moving_noise()


@pytest.fixture(scope="module")
def clean(frames, tmp_path_factory) -> Path:
    return clean_video(tmp_path_factory.mktemp("pipe") / "clean.mp4", frames)


@pytest.fixture(scope="module")
def corrupted(clean, tmp_path_factory) -> Path:
    return corrupt_middle(clean, tmp_path_factory.mktemp("pipe") / "mid.mp4")


@pytest.fixture(scope="module")
def truncated(clean, tmp_path_factory) -> Path:
    return truncate_tail(clean, tmp_path_factory.mktemp("pipe") / "tail.mp4")


@pytest.fixture(scope="module")
def dropped(frames, tmp_path_factory) -> Path:
    return drop_frames(tmp_path_factory.mktemp("pipe") / "drop.mp4", frames)


def test_clean_clip_has_an_io_block_and_no_warnings(clean):
    res = score_clip(clean, config=CFG, device="cpu", progress=False)
    d = res.to_dict()
    assert d["io"]["lost_frames"] == 0 and d["io"]["decoded_frames"] == T
    assert d["warnings"] == [] and res.status != "error"


def test_corrupted_middle_is_an_error_and_not_scored(corrupted):
    res = score_clip(corrupted, config=CFG, device="cpu", progress=False)
    assert res.status == "error" and "io.max_lost_fraction" in res.reason
    assert f"{res.io['lost_frames']} of {T} frames" in res.reason
    assert res.io["decode_errors"] > 0 and res.io["truncated"]
    assert res.background == {} and res.ir is None and res.warnings == []
    assert "features" not in res.timing_s


def test_truncated_tail_error_or_warning_by_the_limit(truncated):
    res = score_clip(truncated, config=CFG, device="cpu", progress=False)
    assert res.status == "error" and res.io["announced_frames"] == T
    loose = dict(CFG, io={"long_side": None, "max_lost_fraction": 0.9})
    res = score_clip(truncated, config=loose, device="cpu", progress=False)
    assert res.status != "error" and res.background.get("pairs")
    assert len(res.warnings) == 1 and f"{res.io['lost_frames']} of {T}" in res.warnings[0]


def test_dropped_frames_are_scored_with_a_warning(dropped):
    res = score_clip(dropped, config=CFG, device="cpu", progress=False)
    assert res.status != "error" and res.background.get("pairs") == T - len(DROPPED) - 1
    assert res.io["lost_frames"] == len(DROPPED) and res.io["timestamp_gaps"] == 2
    assert res.warnings and "4 of 48 frames (8 %)" in res.warnings[0]


def test_io_and_warnings_survive_the_store(dropped, corrupted, tmp_path):
    results = {"drop": score_clip(dropped, config=CFG, device="cpu", progress=False),
               "mid": score_clip(corrupted, config=CFG, device="cpu", progress=False)}
    with ResultStore(tmp_path / "s.sqlite") as store:
        for cid, res in results.items():
            store.put({"clip_id": cid, "generator": "m"}, res.content_hash or cid, res.config_hash,
                      res.to_dict())
        rows = {r["clip_id"]: r for r in store.rows()}
    for cid, res in results.items():
        back = ClipResult.from_dict(rows[cid]["result"])
        assert back.io == res.to_dict()["io"] and back.warnings == res.warnings
        assert back.status == res.status
    flat = {cid: flatten_row(r) for cid, r in rows.items()}
    assert flat["drop"]["lost_frames"] == len(DROPPED)
    assert "4 of 48 frames" in flat["drop"]["warnings"]
    assert flat["mid"]["status"] == "error" and flat["mid"]["lost_frames"] > 0
    assert flat["mid"]["warnings"] is None
    page = build_report(tmp_path / "s.sqlite", tmp_path / "rep", draw=False, n_boot=50,
                        cards=0).read_text()
    assert "Clips scored with warnings (1)" in page and "4 of 48 frames" in page


def test_old_rows_read_back_with_empty_io():
    d = ClipResult(clip="x").to_dict()
    del d["io"], d["warnings"]
    back = ClipResult.from_dict(d)
    assert back.io == {} and back.warnings == []


def test_progress_lines_on_stderr_and_off_by_default(capsys):
    frames = torch.randint(0, 256, (4, 3, 48, 64), generator=torch.Generator().manual_seed(1),
                           dtype=torch.uint8)
    score_clip(frames, config=CFG, device="cpu")  # stderr is captured: not a terminal
    assert "geocon" not in capsys.readouterr().err
    score_clip(frames, config=CFG, device="cpu", progress=True)
    err = capsys.readouterr().err
    assert "geocon clip: read" in err and "features 4 frames, 3 pairs" in err
    assert "features done in" in err
    from geocon_torch import score_clips

    score_clips([frames], config=CFG, device="cpu", progress=True)  # the CLI's call, one clip
    err = capsys.readouterr().err
    assert "features 4 frames, 3 pairs" in err and "batch of 1 clips" not in err
