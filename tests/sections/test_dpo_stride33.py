"""``io.stride`` does not change the Epipolar-DPO frames (audit s33 timing F1).

Without a frame cap (``io.max_frames`` None) the block samples source frames 0, 15, 30, ...
over the whole source, whatever the stride: a tensor, a file read eagerly or streamed,
``score_clips`` batches and ``geometric_reward(kind="epipolar-dpo")`` all give the frames and
numbers of stride 1, and ``result["motion"]["epipolar_dpo"]`` measures those frames. With a
cap the frames stop at the last frame kept (as before), and a clip left with fewer than two
sampled frames says that the cap, not the clip's length, limited them.
"""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Dict, Optional

import numpy as np
import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.io.writer import write_video
from geocon_torch.pipeline import score_clips
from geocon_torch.rewards import geometric_reward

pytest.importorskip("cv2")

STRIDES = (1, 2, 3, 4)
NUMBERS = ("status", "mean_epipolar_error", "mean_inlier_rate", "valid_pairs", "total_pairs",
           "frames", "per_pair", "analysis_size")


def _texture() -> torch.Tensor:
    rng = np.random.default_rng(0)
    tex = torch.from_numpy(rng.integers(0, 256, (3, 160, 400), dtype=np.uint8))
    return torch.nn.functional.avg_pool2d(tex[None].float(), 3, 1, 1)[0].to(torch.uint8)


TEXTURE = _texture()


def pan(n: int, flip: bool = False) -> torch.Tensor:
    """(n, 3, 128, 192) uint8: a window moving 4 px per frame over a blurred noise texture."""
    x = torch.stack([TEXTURE[:, 16:144, 4 * t: 4 * t + 192] for t in range(n)])
    return x.flip(0) if flip else x


def score(video: Any, io: Dict[str, Any]) -> Dict[str, Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return score_clip(video, preset="epipolar-dpo", device="cpu",
                          config={"io": io}).to_dict()


def numbers(block: Dict[str, Any]) -> Dict[str, Any]:
    return {k: block[k] for k in NUMBERS}


def check_same_as_stride_1(video: Any, n: int, extra: Optional[Dict[str, Any]] = None) -> None:
    extra = extra or {}
    ref = score(video, dict(extra, stride=1))
    assert ref["epipolar_dpo"]["frames"] == list(range(0, n, 15))
    assert ref["epipolar_dpo"]["status"] == "ok"
    want_motion = ref["motion"]["epipolar_dpo"]
    assert want_motion["pairs"] == len(range(0, n, 15)) - 1
    for s in STRIDES[1:]:
        got = score(video, dict(extra, stride=s))
        assert numbers(got["epipolar_dpo"]) == numbers(ref["epipolar_dpo"]), (n, s, extra)
        assert got["motion"]["epipolar_dpo"] == want_motion, (n, s, extra)


@pytest.mark.parametrize("n", [16, 46])
def test_tensor_clip_dpo_frames_do_not_depend_on_stride(n):
    check_same_as_stride_1(pan(n), n)


@pytest.fixture(scope="module")
def mp4s(tmp_path_factory) -> Dict[int, Path]:
    d = tmp_path_factory.mktemp("dpo_stride")
    return {n: write_video(d / f"pan{n}.mp4", pan(n)) for n in (16, 46)}


@pytest.mark.parametrize("n", [16, 46])
@pytest.mark.parametrize("streamed", [False, True])
def test_file_dpo_frames_do_not_depend_on_stride(mp4s, n, streamed):
    """Eager (``io.stream_min_frames`` None) and streamed (0) reads of an mp4 agree with each
    other and across strides."""
    limit = 0 if streamed else None
    check_same_as_stride_1(str(mp4s[n]), n, {"stream_min_frames": limit})
    eager = score(str(mp4s[n]), {"stride": 2, "stream_min_frames": None})
    stream = score(str(mp4s[n]), {"stride": 2, "stream_min_frames": 0})
    assert numbers(eager["epipolar_dpo"]) == numbers(stream["epipolar_dpo"])
    assert eager["motion"]["epipolar_dpo"] == stream["motion"]["epipolar_dpo"]


def test_image_folder_dpo_frames_do_not_depend_on_stride(tmp_path):
    """A folder of PNG frames, eager and streamed, samples the whole folder at stride 2."""
    from PIL import Image

    for t, frame in enumerate(pan(16)):
        Image.fromarray(frame.permute(1, 2, 0).numpy()).save(tmp_path / f"f{t:03d}.png")
    for limit in (None, 0):
        check_same_as_stride_1(str(tmp_path), 16, {"stream_min_frames": limit})


def test_score_clips_batch_agrees_with_stride_1():
    """score_clips reads tensors of one shape as one batch (clips_from_tensors): the blocks
    and motion entries at stride 2 equal each clip's at stride 1."""
    videos = [pan(46), pan(46, flip=True), pan(16)]
    cfg = {"io": {"stride": 2}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [r.to_dict() for r in score_clips(videos, preset="epipolar-dpo", device="cpu",
                                                 config=cfg)]
    for v, r in zip(videos, got):
        ref = score(v, {"stride": 1})
        assert numbers(r["epipolar_dpo"]) == numbers(ref["epipolar_dpo"])
        assert r["motion"]["epipolar_dpo"] == ref["motion"]["epipolar_dpo"]


@pytest.mark.parametrize("n", [16, 46])
def test_reward_kind_does_not_depend_on_stride(n):
    videos = torch.stack([pan(n), pan(n, flip=True)])
    ref, ref_diag = geometric_reward(videos, "epipolar-dpo", config={"io": {"stride": 1}})
    assert ref_diag.status == ["ok", "ok"]
    alone = score(pan(n), {"stride": 1})["epipolar_dpo"]
    assert ref_diag.clips[0].raw["mean_epipolar_error"] == alone["mean_epipolar_error"]
    for s in STRIDES[1:]:
        got, diag = geometric_reward(videos, "epipolar-dpo", config={"io": {"stride": s}})
        assert torch.equal(got, ref) and diag.clips == ref_diag.clips, (n, s)


def test_capped_read_keeps_the_frames_it_covers(mp4s):
    """With io.max_frames the frames stop at the last frame kept (unchanged), and a clip left
    with one sampled frame names the cap, not the clip's length, as the reason (a tensor, a
    file read eagerly or streamed: its decode stops at the cap)."""
    for video in (pan(46), str(mp4s[46])):
        for limit in (None, 0):
            got = score(video, {"stride": 2, "max_frames": 10,  # kept 0..18
                                "stream_min_frames": limit})
            assert got["epipolar_dpo"]["frames"] == [0, 15]
            assert got["motion"]["epipolar_dpo"]["pairs"] == 1
    for video in (pan(16), pan(46), str(mp4s[16]), str(mp4s[46])):
        for limit in (None, 0):
            short = score(video, {"stride": 2, "max_frames": 8,  # kept 0..14
                                  "stream_min_frames": limit})["epipolar_dpo"]
            assert short["status"] == "not_applicable" and short["frames"] == [0]
            assert "needs at least" not in short["reason"], short["reason"]
            assert "io.max_frames = 8" in short["reason"], short["reason"]
    _, diag = geometric_reward(pan(46)[None], "epipolar-dpo",
                               config={"io": {"stride": 2, "max_frames": 8}})
    assert diag.status == ["not_applicable"] and "io.max_frames" in diag.clips[0].reason


def test_short_clip_still_says_it_is_short():
    """A clip of fewer than 16 source frames is too short whatever the stride."""
    for s in (1, 2):
        block = score(pan(12), {"stride": s})["epipolar_dpo"]
        assert block["status"] == "not_applicable" and block["frames"] == [0]
        assert "a clip needs at least 16 frames" in block["reason"]
