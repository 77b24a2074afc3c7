"""geocon_torch.rewards under non-default settings and stored rows: the frozen-video rule reads
the frames the kind reads (``io.stride``, ``io.max_frames``), the Epipolar-DPO fold divides by
the recorded ``inlier_threshold_px``, a clip the scorer refused keeps its own status / reason,
and a row without the kind's block or scored from a Clip folds as documented."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.io import read_clip
from geocon_torch.io.writer import write_video
from geocon_torch.rewards import FROZEN_REASON, geometric_reward, reward_from_result
from geocon_torch.synth import render_scene

pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def clean() -> torch.Tensor:
    """(16, 3, 120, 160) uint8: a clean translating scene (C3), every frame moves."""
    return render_scene("C3", num_frames=16, size=(120, 160), seed=0).frames


def _is_frozen(diag) -> bool:
    c = diag.clips[0]
    return c.reward == 0.0 and c.status == "not_applicable" and c.reason == FROZEN_REASON


@pytest.mark.parametrize("kind", ["epipolar", "background"])
def test_frozen_rule_reads_the_io_stride(clean, kind):
    """Frames 0, 2, 4 one repeated frame, 1, 3, 5 moving: with ``io.stride = 2`` the scorer reads
    a still clip (neutral reward, FROZEN_REASON); with stride 1 the same video moves (scored)."""
    v = clean[:6].clone()
    v[0::2] = clean[0]
    r2, d2 = geometric_reward(v[None], kind, config={"io": {"stride": 2}}, seed=3)
    assert float(r2[0]) == 0.0 and _is_frozen(d2), d2.clips[0]
    r1, d1 = geometric_reward(v[None], kind, seed=3)
    assert d1.status == ["ok"] and 0.5 < float(r1[0]) <= 1.0


def test_epipolar_dpo_frozen_rule_stops_at_the_frame_cap(clean):
    """31 frames, frame 15 = frame 0, frame 30 moves: ``io.max_frames = 16`` reads frames 0 and 15
    only (frozen: neutral), without the cap frames 0, 15, 30 (moving: scored)."""
    v = torch.cat([clean, clean[1:]])  # 31 frames; frame 30 = clean[15]
    v[15] = clean[0]
    r, d = geometric_reward(v[None], "epipolar-dpo", config={"io": {"max_frames": 16}})
    assert float(r[0]) == 0.0 and _is_frozen(d), d.clips[0]
    assert d.clips[0].total_pairs == 1
    r_all, d_all = geometric_reward(v[None], "epipolar-dpo")
    assert d_all.status == ["ok"] and d_all.clips[0].total_pairs == 2 and float(r_all[0]) > 0.5


def test_epipolar_dpo_fold_reads_the_recorded_threshold(clean):
    """``exp(-mean_epipolar_error / inlier_threshold_px)`` with the block's own threshold."""
    block = {"status": "ok", "mean_epipolar_error": 2.0, "mean_inlier_rate": 0.9,
             "valid_pairs": 1, "total_pairs": 1, "protocol": {"inlier_threshold_px": 2.0}}
    got = reward_from_result({"epipolar_dpo": block}, "epipolar-dpo")
    assert got.status == "ok" and got.reward == pytest.approx(math.exp(-1.0), rel=1e-12)
    no_protocol = dict(block, protocol={})  # the default threshold, 5 px
    assert reward_from_result({"epipolar_dpo": no_protocol}, "epipolar-dpo").reward == \
        pytest.approx(math.exp(-0.4), rel=1e-12)
    cfg = {"epipolar_dpo": {"sampling_rate": 5, "inlier_threshold_px": 2.0}}
    r, d = geometric_reward(clean[None], "epipolar-dpo", config=cfg)
    err = d.clips[0].raw["mean_epipolar_error"]
    assert d.status == ["ok"] and err > 0.1
    assert float(r[0]) == pytest.approx(math.exp(-err / 2.0), rel=1e-6)


def test_refused_frozen_clip_keeps_its_own_status_and_reason():
    """A still clip the scorer refused is not relabelled as frozen: a flat grey clip (frozen and
    textureless) keeps the scorer's reason; a stored error row with ``motion.frozen`` stays an
    error."""
    flat = torch.full((1, 6, 3, 120, 160), 128, dtype=torch.uint8)
    starts = {"epipolar": "no valid epipolar frame pairs", "background": "too little texture"}
    for kind, start in starts.items():
        r, d = geometric_reward(flat, kind)
        c = d.clips[0]
        assert float(r[0]) == 0.0 and c.status == "not_applicable"
        assert c.reason.startswith(start) and "frozen video" not in c.reason, c.reason
    frozen = {"max_mad": 0.0, "pairs": 5, "frozen": True}
    row = {"status": "error", "reason": "VideoReadError: boom", "motion": frozen,
           "background": {"status": "error", "reason": "VideoReadError: boom"}}
    got = reward_from_result(row, "background")
    assert (got.reward, got.status, got.reason) == (0.0, "error", "VideoReadError: boom")
    row = {"status": "ok", "motion": frozen,
           "epipolar": {"status": "not_applicable", "reason": "no valid epipolar frame pairs"}}
    got = reward_from_result(row, "epipolar")
    assert (got.status, got.reason) == ("not_applicable", "no valid epipolar frame pairs")


def test_row_without_the_kind_block_is_not_applicable():
    """An ok row scored with another preset (no background block): not_applicable, neutral,
    and the reason says what is missing (never "error": nothing failed)."""
    row = {"status": "ok", "reason": None,
           "epipolar": {"status": "ok", "epipolar_error_score": 0.9,
                        "epipolar_inlier_rate": 0.9, "feature_match_coverage": 0.9}}
    got = reward_from_result(row, "background", neutral=-1.0)
    assert (got.reward, got.status) == (-1.0, "not_applicable")
    assert got.reason == "the result has no background block (scored with another preset?)"


def test_clip_input_row_has_no_epipolar_dpo_motion_entry(clean, tmp_path):
    """A Clip read with ``motion_every=15`` is sampled by the section's own positions: its row
    records no ``motion.epipolar_dpo``, so a still clip folds to its raw reward (documented),
    while the file path of the same video records frames 0, 15 as frozen."""
    path = write_video(tmp_path / "still16.mp4", clean[:1].expand(16, -1, -1, -1))
    cfg = {"io": {"long_side": None}}
    from_clip = score_clip(read_clip(str(path), long_side=None, motion_every=15),
                           preset="epipolar-dpo", config=cfg, device="cpu").to_dict()
    assert from_clip["motion"]["frozen"] is True and "epipolar_dpo" not in from_clip["motion"]
    assert reward_from_result(from_clip, "epipolar-dpo").status == "ok"
    from_file = score_clip(str(path), preset="epipolar-dpo", config=cfg, device="cpu").to_dict()
    assert from_file["motion"]["epipolar_dpo"]["frozen"] is True
    got = reward_from_result(from_file, "epipolar-dpo")
    assert (got.reward, got.status, got.reason) == (0.0, "not_applicable", FROZEN_REASON)
