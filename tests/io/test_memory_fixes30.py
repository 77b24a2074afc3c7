"""Memory audit s30, F1 and F2.

* F1: a video whose container under-announces its frame count (an AVI header saying 10 frames
  for 100) was read eagerly, every frame held, because ``pipeline.streams_frames`` trusts the
  announced count. Now the eager read stops once it would keep more than
  ``io.stream_min_frames`` frames and the clip is read streamed instead (a ``VideoFrames``
  store), bit-identical to the clip of a correctly-labelled file; the wrong count is recorded
  (``container_count_mismatch``, a warning in the ``io`` block).
* F2: ``score_clips`` budgeted the reading of tensor clips by their source bytes although they
  are resized to ``io.long_side`` (and cut by ``io.stride`` / ``io.max_frames``) before batching:
  an upscale read every clip of the budget at once. The read is now budgeted in working bytes,
  the same bytes the batches are cut by.
"""
from __future__ import annotations

import struct
from typing import List

import numpy as np
import pytest
import torch
from helpers import encode_rgb

from geocon_torch import pipeline
from geocon_torch.config import load_config
from geocon_torch.errors import ArgumentTypeError, InputError
from geocon_torch.io import clip_from_tensor, read_clip
from geocon_torch.io.decode import decode_selected
from geocon_torch.io.framestore import VideoFrames
from geocon_torch.io.integrity import decode_report, decode_verdict
from geocon_torch.io.sampling import frame_selection
from geocon_torch.pipeline import load_clip, read_options, streams_frames

H, W, N = 48, 64, 100
LIE = 10  # the frame count the bad header announces


@pytest.fixture(scope="module")
def avis(tmp_path_factory) -> tuple:
    """(good, bad): a 100-frame 64x48 mpeg4 AVI, and a copy whose ``avih.dwTotalFrames`` and
    ``strh.dwLength`` say 10 frames (how the auditor's repro made the header lie)."""
    import cv2

    base = np.random.default_rng(0).integers(0, 256, (H, W + 2 * N, 3), dtype=np.uint8)
    base = cv2.GaussianBlur(base, (5, 5), 1.0)
    frames = [np.ascontiguousarray(base[:, 2 * t:2 * t + W]) for t in range(N)]
    tmp = tmp_path_factory.mktemp("avi30")
    good = encode_rgb(tmp / "good.avi", frames, codec="mpeg4")
    data = bytearray(good.read_bytes())
    for tag, off in ((b"avih", 16), (b"strh", 32)):
        struct.pack_into("<I", data, data.find(tag) + 8 + off, LIE)
    bad = tmp / "bad.avi"
    bad.write_bytes(bytes(data))
    return good, bad


def _cfg(**io):
    return load_config({"io": dict({"long_side": 64}, **io)})


def _same_clip(a, b) -> None:
    fa = a.frames.materialize() if isinstance(a.frames, VideoFrames) else a.frames
    fb = b.frames.materialize() if isinstance(b.frames, VideoFrames) else b.frames
    assert torch.equal(fa, fb)
    assert torch.equal(a.content_mask, b.content_mask)
    assert torch.equal(a.frame_indices, b.frame_indices)
    assert (a.fps, a.scale, a.source_size) == (b.fps, b.scale, b.source_size)
    assert a.meta["motion"] == b.meta["motion"]


# ----------------------------------------------------------------------------------- F1

def test_under_counted_avi_is_streamed_like_a_correct_one(avis):
    good, bad = avis
    cfg = _cfg()  # io.stream_min_frames = 64
    assert streams_frames(str(good), cfg) and not streams_frames(str(bad), cfg)  # the lie
    a, _ = load_clip(str(good), cfg)
    b, _ = load_clip(str(bad), cfg)
    assert isinstance(a.frames, VideoFrames) and isinstance(b.frames, VideoFrames)
    assert len(b.frames) == N and b.meta["decoded_frames"] == N
    _same_clip(a, b)
    assert b.meta["container_frames"] == LIE and b.meta["container_count_mismatch"] == N - LIE
    assert "container_count_mismatch" not in a.meta
    report = decode_report(b.meta)
    assert report["lost_frames"] == 0 and not report["truncated"]
    reason, warns = decode_verdict(report, 0.1)
    assert reason is None and any(f"announces {LIE} frames but {N}" in w for w in warns)


def test_eager_decode_stops_past_the_limit(avis):
    """The eager decode keeps at most ``max_keep`` frames: the frame after them stops it."""
    _, bad = avis
    dec = decode_selected(bad, frame_selection(), max_keep=64)
    assert dec.overflowed and not dec.complete
    assert dec.images == [] and dec.decoded == 65
    dec = decode_selected(bad, frame_selection(), max_keep=N)
    assert not dec.overflowed and dec.complete and len(dec.images) == N


@pytest.mark.parametrize("io, streamed, frames", [
    ({"max_frames": 64}, False, 64), ({"max_frames": 65}, True, 65),
    ({"stride": 2}, False, 50), ({"stream_min_frames": 100}, False, N),
    ({"stream_min_frames": 99}, True, N), ({"stream_min_frames": None}, False, N),
])
def test_streaming_decision_follows_the_frames_kept(avis, io, streamed, frames):
    """Streamed exactly when the frames kept exceed ``io.stream_min_frames`` (None: never, the
    documented opt-out); either way the frames equal those of the correctly-labelled file."""
    good, bad = avis
    cfg = _cfg(**io)
    b, _ = load_clip(str(bad), cfg)
    assert isinstance(b.frames, VideoFrames) is streamed and len(b.frames) == frames
    opts = read_options(cfg, str(good))
    _same_clip(read_clip(str(good), stream=streamed, **opts), b)


def test_read_clip_stream_limit(avis):
    _, bad = avis
    eager = read_clip(bad, long_side=64)  # no limit: as before, held whole
    assert isinstance(eager.frames, torch.Tensor) and eager.frames.shape[0] == N
    limited = read_clip(bad, long_side=64, stream_limit=64)
    assert isinstance(limited.frames, VideoFrames)
    _same_clip(eager, limited)
    assert isinstance(read_clip(bad, long_side=64, stream_limit=N).frames, torch.Tensor)
    with pytest.raises(InputError):
        read_clip(bad, stream_limit=-1)
    with pytest.raises(ArgumentTypeError):
        read_clip(bad, stream_limit=1.5)


# ----------------------------------------------------------------------------------- F2

def _tensors(n: int, t: int = 4) -> List[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return [torch.randint(0, 256, (t, 3, 8, 10), generator=g, dtype=torch.uint8)
            for _ in range(n)]


#: one clip's working bytes at io.long_side 80: 4 frames of 3 x 64 x 80
CLIP_BYTES = 4 * 3 * 64 * 80


@pytest.mark.parametrize("io, t", [({"long_side": 80}, 4),
                                   ({"long_side": 80, "stride": 2, "max_frames": 4}, 12),
                                   ({"long_side": 80, "stride": 3}, 12)])
def test_tensor_read_is_budgeted_in_working_bytes(io, t):
    """Clips of 8 x 10 px upscaled 8x: 3 clips to a budget of 3 clips' working bytes (the
    source bytes, 1/64 of that, let every clip in), after stride / frame cap."""
    cfg = load_config({"io": io})
    videos = _tensors(7, t)
    budget = 3 * CLIP_BYTES
    groups = []
    k = 0
    while k < len(videos):
        got = pipeline._read_tensors(videos, k, cfg, "cpu", budget)
        groups.append(sorted(got))
        assert sum(pipeline._frame_bytes(c) for c, _ in got.values()) <= budget
        for j, (clip, _) in got.items():
            alone = clip_from_tensor(videos[j], name=clip.name, **read_options(cfg, videos[j]))
            assert torch.equal(clip.frames, alone.frames)
        k = max(got, default=k) + 1
    assert groups == [[0, 1, 2], [3, 4, 5], []]


def test_tensor_read_at_native_size_unchanged():
    """Without a resize the working bytes are the source bytes: the groups stay as they were."""
    cfg = load_config({})  # io.long_side "auto": native pixels for tensors
    videos = _tensors(5)
    got = pipeline._read_tensors(videos, 0, cfg, "cpu", 2 * 4 * 3 * 8 * 10)
    assert sorted(got) == [0, 1]


def test_bad_tensor_does_not_break_the_budget():
    """A tensor too small to resize is budgeted at its source size; the batch read then fails
    and each clip is read alone (its own error), as before."""
    cfg = load_config({"io": {"long_side": 80}})
    videos = _tensors(1) + [torch.zeros(4, 3, 1, 1, dtype=torch.uint8)]
    assert pipeline._read_tensors(videos, 0, cfg, "cpu", 1 << 30) == {0: (None, None),
                                                                      1: (None, None)}


def test_score_clips_reads_what_it_batches(monkeypatch):
    """``score_clips`` (scoring stubbed out, as the auditor's repro): every read of tensors fits
    the budget in working bytes, and the batches are the reads."""
    reads, batches = [], []
    real = pipeline._read_tensors

    def read(*args):
        got = real(*args)
        reads.append(sum(pipeline._frame_bytes(c) for c, _ in got.values() if c is not None))
        return got

    def stub(batch, out, progress, return_exceptions=False):
        batches.append(len(batch))
        for k, it in batch:
            out[k] = it.res

    monkeypatch.setattr(pipeline, "_read_tensors", read)
    monkeypatch.setattr(pipeline, "_score_batch", stub)
    pipeline.score_clips(_tensors(7), preset="background", device="cpu",
                         batch_bytes=3 * CLIP_BYTES, config={"io": {"long_side": 80}})
    assert batches == [3, 3, 1]
    assert max(reads) <= 3 * CLIP_BYTES
