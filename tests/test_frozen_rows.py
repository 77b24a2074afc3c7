"""Stored results carry the frozen-video rule: ``result["motion"]`` (the largest mean absolute
difference between consecutive frames read, at native resolution, measured while the frames are
decoded) is identical on the eager, streamed and tensor paths and in batches;
``reward_from_result`` and the preference pairs refuse a frozen row as ``geometric_reward``
refuses the frozen tensor; rows written before keep their fold."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from geocon_torch import score_clip, score_clips
from geocon_torch.bench.manifest import ManifestEntry
from geocon_torch.bench.preferences import kind_config, preference_records
from geocon_torch.bench.store import flatten_row
from geocon_torch.io import read_clip, write_video
from geocon_torch.report.text import score_line
from geocon_torch.rewards import (FROZEN_MAX_MAD, FROZEN_REASON, ClipReward, frozen_clips,
                                  geometric_reward, reward_from_result)
from geocon_torch.synth import render_scene

pytest.importorskip("cv2")

NATIVE = {"io": {"long_side": None}}


def _moving(t: int = 8) -> torch.Tensor:
    """(T, 3, 120, 160) uint8: the grounded translation scene C2 (every frame moves)."""
    return render_scene("C2", num_frames=t, size=(120, 160), seed=0).frames


def _still(t: int = 8) -> torch.Tensor:
    return _moving(1).expand(t, -1, -1, -1).contiguous()


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict:
    """still.mp4 (one frame repeated), moving.mp4 (C2), mixed.mp4 (6 still frames, then 6
    moving ones)."""
    root = tmp_path_factory.mktemp("frozen")
    moving = _moving(12)
    mixed = torch.cat([moving[:1].expand(6, -1, -1, -1), moving[6:]])
    return {"still": write_video(root / "still.mp4", _still(8), fps=12),
            "moving": write_video(root / "moving.mp4", moving[:8], fps=12),
            "mixed": write_video(root / "mixed.mp4", mixed, fps=12)}


def _native_frozen(path: Path, **kw) -> tuple:
    """frozen_clips and the largest mean |difference| of the frames read at native size."""
    frames = read_clip(path, long_side=None, **kw).frames
    diffs = [(frames[k + 1].int() - frames[k].int()).abs().sum().item() / frames[0].numel()
             for k in range(len(frames) - 1)]
    return bool(frozen_clips(frames[None])[0]), (max(diffs) if diffs else None)


@pytest.mark.parametrize("kw", [{}, {"max_frames": 6}, {"stride": 5}, {"stride": 2,
                                                                      "max_frames": 3}])
def test_read_clip_motion_eager_streamed_and_frozen_clips_agree(files, kw):
    eager = read_clip(files["mixed"], long_side=64, **kw)
    lazy = read_clip(files["mixed"], long_side=64, stream=True, **kw)
    assert eager.meta["motion"] == lazy.meta["motion"]
    frozen, max_mad = _native_frozen(files["mixed"], **kw)
    motion = eager.meta["motion"]
    assert motion["frozen"] is frozen and motion["max_mad"] == pytest.approx(max_mad, abs=1e-12)
    assert motion["pairs"] == eager.num_frames - 1
    # the still part alone (frames 0..5) is frozen, the whole clip is not
    assert motion["frozen"] is (kw.get("max_frames") == 6 or kw == {"stride": 2,
                                                                     "max_frames": 3})


def test_still_file_frozen_moving_file_not(files):
    got = {}
    for name in ("still", "moving"):
        res = score_clip(files[name], preset="background", config={"io": {"long_side": 96}},
                         device="cpu", progress=False).to_dict()
        got[name] = res["motion"]
    assert got["still"]["frozen"] is True and got["still"]["max_mad"] <= FROZEN_MAX_MAD
    assert got["moving"]["frozen"] is False and got["moving"]["max_mad"] > 1.0
    assert got["still"]["pairs"] == got["moving"]["pairs"] == 7


def test_score_clip_motion_streamed_equals_eager(files):
    def run(video):
        cfg = {"io": {"long_side": 96, "stream_min_frames": 0}}
        return score_clip(video, config=cfg, preset="background", device="cpu",
                          progress=False).to_dict()["motion"]

    streamed = run(files["mixed"])
    assert streamed == run(read_clip(files["mixed"], long_side=96))
    assert streamed["frozen"] is False and streamed["pairs"] == 11


def test_tensor_rows_batch_alone_and_float(files):
    """score_clips of a batch == score_clip of each; uint8 and float tensors; frozen_clips on
    the same tensor."""
    videos = [_still(6), _moving(6), _still(6).float() / 255.0, _moving(6).float() / 255.0]
    batch = [r.to_dict()["motion"] for r in score_clips(videos, preset="background",
                                                        config=NATIVE, device="cpu")]
    alone = [score_clip(v, preset="background", config=NATIVE, device="cpu",
                        progress=False).to_dict()["motion"] for v in videos]
    assert batch == alone
    assert [m["frozen"] for m in batch] == [True, False, True, False]
    for v, m in zip(videos, batch):
        assert m["frozen"] is bool(frozen_clips(v[None])[0])
    assert batch[0]["max_mad"] == 0.0 and batch[1]["max_mad"] > 1.0


def test_reward_from_frozen_row_is_geometric_reward():
    still = _still(6)
    rewards, diag = geometric_reward(still[None], "background", seed=0)
    row = score_clip(still, preset="background", config=NATIVE, device="cpu",
                     progress=False).to_dict()
    got = reward_from_result(row, "background")
    assert (got.reward, got.status, got.reason) == (0.0, "not_applicable", FROZEN_REASON)
    assert got == diag.clips[0] and float(rewards[0]) == 0.0
    assert got.raw["ir"] == 1.0  # the raw values it would have been folded from stay
    assert reward_from_result(row, "background", neutral=-1.0).reward == -1.0
    older = {k: v for k, v in row.items() if k != "motion"}  # a row written before
    fold = got.raw["ir"] * math.exp(-got.raw["ge_px"] / 3.5)  # the still clip's top reward
    assert fold > 0.999 and reward_from_result(older, "background") == ClipReward(
        fold, "ok", None, got.valid_pairs, got.total_pairs, dict(got.raw, max_mad=None))
    moving = dict(row, motion=dict(row["motion"], frozen=False))
    assert reward_from_result(moving, "background").status == "ok"


def test_epipolar_dpo_rows_measure_the_frames_it_reads(files, tmp_path):
    """Kind "epipolar-dpo" reads frames 0, 15, 30: a clip whose frames 0, 15, 30 are alike
    while the others move is frozen for it and not for the frames score_clip reads (stride 2:
    frame 15 is not among them, the reader decodes it for the statistic)."""
    moving = _moving(31)
    alike = moving.clone()
    alike[15] = alike[30] = moving[0]
    cfg = {"io": {"long_side": None, "stride": 2}}
    rewards, diag = geometric_reward(alike[None], "epipolar-dpo", config=cfg)
    assert diag.status == ["not_applicable"] and diag.clips[0].reason == FROZEN_REASON
    path = write_video(tmp_path / "alike.mp4", alike, fps=24, crf=0)
    for video in (alike, path):
        row = score_clip(video, preset="epipolar-dpo", config=cfg, device="cpu",
                         progress=False).to_dict()
        assert row["motion"]["frozen"] is False, type(video)
        assert row["motion"]["epipolar_dpo"]["frozen"] is True
        assert row["motion"]["epipolar_dpo"]["pairs"] == 2
        got = reward_from_result(row, "epipolar-dpo")
        assert (got.status, got.reason, got.reward) == ("not_applicable", FROZEN_REASON, 0.0)
    assert reward_from_result(row, "epipolar-dpo") == diag.clips[0]
    # a Clip is scored as given (the block samples its own positions): no entry, today's fold
    clip_row = score_clip(read_clip(path, long_side=None, stride=2), preset="epipolar-dpo",
                          config=cfg, device="cpu", progress=False).to_dict()
    assert "epipolar_dpo" not in clip_row["motion"]
    assert clip_row["motion"] == {k: v for k, v in row["motion"].items() if k != "epipolar_dpo"}


def test_preference_pairs_never_prefer_a_frozen_row():
    """A frozen row folds to the top 1.0 but is unscored for the pairs: the best moving clip is
    chosen; with one moving clip left the prompt is skipped."""
    def row(ir: float, frozen: bool) -> dict:
        return {"status": "ok", "background": {"ir": ir, "ge_px": 0.0},
                "motion": {"max_mad": 0.0 if frozen else 3.0, "pairs": 5, "frozen": frozen}}

    entries = [ManifestEntry(c, f"{c}.mp4", "g", prompt=p)
               for c, p in (("still", "cat"), ("a", "cat"), ("b", "cat"), ("still2", "dog"),
                            ("c", "dog"))]
    res = {"still": row(1.0, True), "a": row(0.9, False), "b": row(0.5, False),
           "still2": row(1.0, True), "c": row(0.4, False)}
    recs = preference_records(entries, res, "background", kind_config(None, "background"))
    assert recs[0]["status"] == "pair" and (recs[0]["chosen"], recs[0]["rejected"]) == ("a", "b")
    assert recs[0]["unscored"] == {"still": f"not_applicable: {FROZEN_REASON}"}
    assert recs[1]["status"] == "skipped" and "1 scoreable" in recs[1]["reason"]
    res["still"].pop("motion")  # an older store: today's fold, the still clip wins
    old = preference_records(entries, res, "background", kind_config(None, "background"))
    assert old[0]["chosen"] == "still"


def test_flat_row_and_score_line_flag_a_frozen_clip():
    res = {"schema_version": "3.0", "clip": "s", "status": "ok", "score": 1.0,
           "score_terms": {"match": 1.0}, "config_hash": "c",
           "motion": {"max_mad": 0.0, "pairs": 5, "frozen": True}}
    flat = flatten_row({"clip_id": "s", "result": res})
    assert flat["frozen"] is True and flat["score"] == 1.0  # the score is kept
    assert flatten_row({"clip_id": "s", "result": dict(res, motion=None)})["frozen"] is None
    line = score_line(res)
    assert line.startswith("Score 1 (match 1) [0-1, higher is better]")
    assert "frozen video" in line and "keeps its geometric score" in line
    assert "frozen" not in score_line({k: v for k, v in res.items() if k != "motion"})
    assert json.dumps(res)  # plain JSON


def test_report_names_the_frozen_clips():
    from geocon_torch.report.html import _frozen_note

    flat = [{"generator": "g1", "frozen": True}, {"generator": "g1", "frozen": True},
            {"generator": "g2", "frozen": False}, {"generator": "g2", "frozen": None}]
    note = _frozen_note(flat)
    assert len(note) == 1 and "by generator: g1 (2)." in note[0] and "keep" in note[0]
    assert _frozen_note(flat[2:]) == []
