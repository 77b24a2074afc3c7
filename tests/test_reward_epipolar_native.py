"""geometric_reward(kind="epipolar") measures what score_clips(preset="worldatlas") measures: the
protocol's frames among those ``io`` keeps, at the source resolution (never the working size),
bit for bit, batched, with a failing clip isolated."""
from __future__ import annotations

import pytest
import torch

import geocon_torch.sections.epipolar as epi_sections
from geocon_torch import score_clips
from geocon_torch.rewards import NEUTRAL_REWARD, geometric_reward
from geocon_torch.synth import render_scene

pytest.importorskip("cv2")

RAW = ("epipolar_error", "epipolar_error_score", "epipolar_inlier_rate",
       "feature_match_coverage")


@pytest.fixture(scope="module")
def videos() -> torch.Tensor:
    """(3, 8, 3, 144, 192) uint8: two moving scenes and the first one letterboxed (black bars of
    16 rows at the top and bottom)."""
    a = render_scene("C3", num_frames=8, size=(144, 192), seed=0).frames
    b = render_scene("C2", num_frames=8, size=(144, 192), seed=1).frames
    boxed = torch.zeros_like(a)
    boxed[:, :, 16:-16] = a[:, :, 16:-16]
    return torch.stack([a, b, boxed])


@pytest.mark.parametrize("io", [{}, {"long_side": 128}, {"long_side": 96, "stride": 2},
                                {"stride": 2}, {"max_frames": 4},
                                {"long_side": 128, "max_frames": 4}],
                         ids=["native", "long128", "long96-stride2", "stride2", "max4",
                              "long128-max4"])
def test_reward_raw_values_equal_score_clips_epipolar_block(videos, io):
    """The reward's raw values, pairs, status and config_hash equal the ``epipolar`` block of
    ``score_clips(videos, preset="worldatlas", config=same)`` bit for bit, whatever
    ``io.long_side`` (the block re-reads the source's pixels), stride and frame cap."""
    config = {"epipolar": {"implementation": "torch"}, "io": io}
    rewards, diag = geometric_reward(videos, kind="epipolar", config=config)
    results = [r.to_dict() for r in score_clips(videos, config=config, preset="worldatlas",
                                                progress=False)]
    assert rewards.dtype == torch.float32 and diag.preset == "worldatlas"
    for got, res in zip(diag.clips, results):
        block = res["epipolar"]
        assert diag.config_hash == res["config_hash"]
        assert block["status"] == got.status == "ok"
        assert {k: got.raw[k] for k in RAW} == {k: block[k] for k in RAW}
        assert (got.valid_pairs, got.total_pairs) == (block["valid_pairs"], block["pairs"])
        fold = sum(block[k] for k in RAW[1:]) / 3.0
        assert float(got.reward) == pytest.approx(fold, abs=1e-7)
    if io.get("long_side"):  # the working size changes nothing: the source is measured
        native, _ = geometric_reward(videos, kind="epipolar",
                                     config={**config, "io": {**io, "long_side": None}})
        assert torch.equal(native, rewards)


def test_reward_reads_no_working_size_frames(videos, monkeypatch):
    """At a non-native ``io.long_side`` the reward resizes no frame: it reads the protocol's
    frames at the source size only."""
    import geocon_torch.io.reader as reader

    sizes = []
    real = reader.resize_frames

    def spy(frames, ws):
        sizes.append(tuple(ws.size))
        return real(frames, ws)

    monkeypatch.setattr(reader, "resize_frames", spy)
    geometric_reward(videos[:1], kind="epipolar", config={"io": {"long_side": 128}})
    assert sizes and set(sizes) == {(144, 192)}


def test_a_failing_clip_gets_the_neutral_reward_the_others_keep_theirs(videos, monkeypatch):
    """An exception inside the measurement of one clip is that clip's status "error" (with the
    exception in its reason, the neutral reward); the batch's other clips get the rewards they
    get alone."""
    alone, _ = geometric_reward(videos[[0, 1]], kind="epipolar")
    real = epi_sections.torch_sections

    def failing(clips, *args, **kwargs):
        if any(int(c.frames[0, 0, 0, 0]) == 0 for c in clips):  # the letterboxed clip
            raise RuntimeError("boom in the batch")
        return real(clips, *args, **kwargs)

    monkeypatch.setattr(epi_sections, "torch_sections", failing)
    rewards, diag = geometric_reward(videos, kind="epipolar", neutral=-1.0)
    assert diag.status == ["ok", "ok", "error"]
    assert float(rewards[2]) == -1.0 and "RuntimeError: boom in the batch" in diag.clips[2].reason
    assert torch.equal(rewards[:2], alone) and NEUTRAL_REWARD == 0.0
