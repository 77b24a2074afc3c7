"""A failure in a merged, batch-wide background stage (features of every clip in one call, the
merged RANSAC fits, the batched masks) is the failing clip's alone: ``score_clips`` gives that
clip an ``error`` row naming the exception (or the exception itself with
``return_exceptions=True``), the other clips get exactly the results of a batch without it, and
``geometric_reward(kind="background")`` gives the failing clip the neutral reward."""
from __future__ import annotations

import json

import pytest
import torch

from geocon_torch.errors import ConfigError
from geocon_torch.pipeline import score_clips
from geocon_torch.rewards import NEUTRAL_REWARD, geometric_reward
from geocon_torch.synth import grounded_clip

pytest.importorskip("cv2")
from geocon_torch.features import opencv_sift  # noqa: E402 - needs cv2

CFG = {"io": {"long_side": None}, "features": {"backend": "opencv-sift"}}
SENTINEL = 201  # the bad clip's top-left 12 x 12 block, every channel: grey 201 there
MESSAGE = "odd frame: sentinel block"


def _marked(frames: torch.Tensor) -> torch.Tensor:
    out = frames.clone()
    out[:, :, :12, :12] = SENTINEL
    return out


@pytest.fixture(scope="module")
def clips() -> torch.Tensor:
    """(3, 6, 3, 96, 128) uint8: two good grounded clips around the marked (bad) one."""
    return torch.stack([grounded_clip("C3", num_frames=6, size=(96, 128), seed=0).frames,
                        _marked(grounded_clip("C3", num_frames=6, size=(96, 128), seed=2).frames),
                        grounded_clip("C5", num_frames=6, size=(96, 128), seed=1).frames])


@pytest.fixture
def odd_frames(monkeypatch):
    """OpenCVSIFT.detect raises on a frame of the marked clip only (a cv2.error's stand-in)."""
    detect = opencv_sift.OpenCVSIFT.detect

    def bad_detect(self, img, *args, **kwargs):
        if (img[:4, :4] == SENTINEL).all():
            raise RuntimeError(MESSAGE)
        return detect(self, img, *args, **kwargs)

    monkeypatch.setattr(opencv_sift.OpenCVSIFT, "detect", bad_detect)


def _json(result) -> str:
    out = result.to_dict()
    out.pop("timing_s", None)
    out.pop("clip", None)  # clip0 / clip2 in the batch, clip0 / clip1 without the bad clip
    return json.dumps(out, sort_keys=True, default=str)


def _score(videos, **kwargs):
    return score_clips(videos, config=CFG, device="cpu", preset="background", **kwargs)


def test_one_failing_clip_gets_an_error_row_the_others_their_results(clips, odd_frames):
    got = _score(clips)
    ref = _score(clips[[0, 2]])
    assert [r.status for r in got] == ["ok", "error", "ok"]
    assert got[1].reason == f"RuntimeError: {MESSAGE}"
    assert [_json(r) for r in (got[0], got[2])] == [_json(r) for r in ref]


def test_return_exceptions_gives_the_failing_clip_its_exception(clips, odd_frames):
    got = _score(clips, return_exceptions=True)
    assert isinstance(got[1], RuntimeError) and str(got[1]) == MESSAGE
    assert got[1].__traceback__ is not None
    assert [r.status for r in (got[0], got[2])] == ["ok", "ok"]
    alone = _score(clips[1:2], return_exceptions=True)  # a batch of one: its own exception too
    assert isinstance(alone[0], RuntimeError) and str(alone[0]) == MESSAGE


def test_background_reward_is_neutral_for_the_failing_clip(clips, odd_frames):
    rewards, diag = geometric_reward(clips, kind="background", config=CFG)
    ref, ref_diag = geometric_reward(clips[[0, 2]], kind="background", config=CFG)
    assert float(rewards[1]) == NEUTRAL_REWARD and diag.status[1] == "error"
    assert diag.clips[1].reason == f"RuntimeError: {MESSAGE}"
    assert diag.scored == [True, False, True]
    assert torch.equal(rewards[[0, 2]], ref) and ref_diag.scored == [True, True]


def test_a_config_error_in_a_merged_stage_still_raises(clips, monkeypatch):
    """A bad config is no bad clip: it raises for the call (as the preflight raises it), it is
    not retried clip by clip."""
    calls = []

    def bad_detect(self, img, *args, **kwargs):
        calls.append(1)
        raise ConfigError("features.backend: broken for the test")

    monkeypatch.setattr(opencv_sift.OpenCVSIFT, "detect", bad_detect)
    with pytest.raises(ConfigError, match="broken for the test"):
        _score(clips)
    assert len(calls) <= 6 * 3  # one pass over the batch's frames at most, no per-clip retries
