"""Memory that does not grow with clip length (issue 16, item 2): streamed frames, features in
chunks of frames, object masks at their reduced size; every result identical to the one-shot
run."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers import REPO_ROOT

from geocon_torch import score_clip
from geocon_torch._memory import _malloc_trim, release_freed_memory
from geocon_torch.config import FeatureConfig
from geocon_torch.features import extract_correspondences
from geocon_torch.features.multiscale import pair_chunks
from geocon_torch.io import read_clip, write_video
from geocon_torch.io.framestore import VideoFrames
from geocon_torch.io.letterbox import ContentMaskAccumulator, detect_content_mask
from geocon_torch.io.pairs import background_pairs, parallax_gate_pairs
from geocon_torch.segment.background import (
    background_keep,
    background_keep_chunked,
    background_mask,
)
from geocon_torch.segment.motion import block_upsample
from geocon_torch.synth import grounded_clip
from geocon_torch.types import BlockMasks

ROOT = REPO_ROOT


@pytest.fixture(scope="module")
def movie(tmp_path_factory) -> Path:
    """A 14-frame 160x120 clip with a moving object on a static textured background, letterboxed
    by 8 black rows at the top and bottom."""
    frames = grounded_clip("C4", num_frames=14, size=(120, 160)).frames.clone()
    frames[:, :, :8] = 0
    frames[:, :, -8:] = 0
    return write_video(tmp_path_factory.mktemp("mem") / "clip.mp4", frames, fps=12)


def test_streamed_frames_equal_eager(movie):
    eager = read_clip(movie, long_side=200)
    lazy = read_clip(movie, long_side=200, stream=True)
    assert isinstance(lazy.frames, VideoFrames)
    assert lazy.frames.shape == eager.frames.shape and lazy.frames.dtype == torch.uint8
    assert lazy.num_frames == eager.num_frames and lazy.size == eager.size
    assert torch.equal(lazy.content_mask, eager.content_mask)
    assert not bool(lazy.content_mask[:5].any())  # the bars were found while streaming
    assert lazy.meta == eager.meta
    assert torch.equal(lazy.frames[3], eager.frames[3])
    assert torch.equal(lazy.frames[2:9], eager.frames[2:9])
    idx = torch.tensor([9, 1, 1, 13])
    assert torch.equal(lazy.frames[idx], eager.frames[idx])
    assert torch.equal(lazy.frames.index_select(0, idx), eager.frames.index_select(0, idx))
    assert torch.equal(lazy.gray(), eager.gray())
    assert torch.equal(lazy.frames.float(), eager.frames.float())  # whole-clip fallback


def test_streamed_sampling_and_sequential_decoding(movie):
    for kw in ({"stride": 3, "max_frames": 3}, {"indices": [10, 2, 2, 5]}):
        eager = read_clip(movie, long_side=None, **kw)
        lazy = read_clip(movie, long_side=None, stream=True, **kw)
        assert torch.equal(lazy.frames[:], eager.frames)
        assert torch.equal(lazy.frame_indices, eager.frame_indices)
    lazy = read_clip(movie, long_side=None, stream=True)
    for start in range(0, 14, 4):  # increasing chunks: one decoder, never re-opened
        lazy.frames[start:start + 5]  # overlapping by one frame: served from the cache
    assert lazy.frames.opens == 1
    lazy.frames[0]
    assert lazy.frames.opens == 1  # still cached
    lazy.frames.cache_frames = 0
    lazy.frames._cache.clear()
    lazy.frames[1]  # behind the decoder: re-opened
    assert lazy.frames.opens == 2


def test_content_mask_accumulator_matches_batch():
    g = torch.Generator().manual_seed(0)
    for trial in range(10):
        x = torch.randint(0, 256, (9, 3, 30, 40), generator=g, dtype=torch.uint8)
        top, left = trial % 5, (3 * trial) % 7
        x[:, :, :top] = torch.randint(0, 20, (9, 3, top, 40), generator=g, dtype=torch.uint8)
        x[..., :left] = torch.randint(0, 20, (9, 3, 30, left), generator=g, dtype=torch.uint8)
        acc = ContentMaskAccumulator(16.0 / 255.0)
        for s in range(0, 9, 4):
            acc.update(x[s:s + 4])
        assert torch.equal(acc.mask(), detect_content_mask(x))


def test_pair_chunks_bound_frames():
    pairs = torch.cat([background_pairs(40), parallax_gate_pairs(40)])
    chunks = pair_chunks(pairs, 6)
    assert sorted(torch.cat(chunks).tolist()) == list(range(pairs.shape[0]))
    assert all(torch.unique(pairs[c]).numel() <= 6 for c in chunks)
    assert len(pair_chunks(pairs, None)) == 1 and len(pair_chunks(pairs, 64)) == 1
    assert len(pair_chunks(torch.tensor([[0, 30]]), 2)) == 1


def test_chunked_features_identical(movie):
    clip = read_clip(movie, long_side=None, stream=True)
    pairs = torch.cat([background_pairs(14, 1), parallax_gate_pairs(14)])
    one = extract_correspondences(read_clip(movie, long_side=None), pairs,
                                  FeatureConfig(chunk_frames=None), device="cpu")
    many = extract_correspondences(clip, pairs, FeatureConfig(chunk_frames=3), device="cpu")
    assert sorted(one) == sorted(many)
    for s in one:
        for name in ("x1", "x2", "mask", "scores", "pairs", "num_kp1", "num_kp2"):
            assert torch.equal(getattr(one[s], name), getattr(many[s], name)), (s, name)


def test_block_masks_and_chunked_keep():
    g = torch.Generator().manual_seed(1)
    low = torch.rand(7, 3, 5, 6, generator=g) > 0.6
    content = torch.ones(18, 22, dtype=torch.bool)
    content[:2] = False
    full = block_upsample(low, 4)[..., :18, :22] & content.view(1, 1, 18, 22)
    lazy = BlockMasks(low, 4, (18, 22), content, chunk=3)
    assert lazy.shape == full.shape and torch.equal(lazy.full(), full)
    assert torch.equal(lazy[torch.tensor([5, 0])], full[[5, 0]])
    assert torch.equal(lazy[:-1].sum((-1, -2)), full[:-1].sum((-1, -2)))
    assert torch.equal(lazy.sum((0, 2, 3)), full.sum((0, 2, 3)))
    assert torch.equal(lazy[:, torch.tensor([2, 0])].full(), full[:, [2, 0]])
    # the union over objects is taken on the cells (no (T, K, H, W) masks), identical
    assert torch.equal(lazy.any(1), full.any(1)) and torch.equal(lazy.any(-3), full.any(1))
    assert torch.equal(lazy.any(1, keepdim=True), full.any(1, keepdim=True))
    assert torch.equal(lazy[2:5, torch.tensor([2])].any(1), full[2:5, [2]].any(1))
    assert torch.equal(lazy.any(0), full.any(0)) and bool(lazy.any()) == bool(full.any())
    assert int(full.any(1).sum()) > 0  # not trivially empty
    pairs = torch.tensor([[0, 1], [1, 2], [2, 5], [6, 0]])
    x1 = torch.rand(4, 20, 2, generator=g) * torch.tensor([21.0, 17.0])
    x2 = torch.rand(4, 20, 2, generator=g) * torch.tensor([21.0, 17.0])
    want = background_keep(background_mask(content, full, 2), x1, x2, pairs)
    assert torch.equal(background_keep_chunked(content, lazy, 2, x1, x2, pairs, chunk=2), want)
    assert torch.equal(background_keep_chunked(content, full, 2, x1, x2, pairs, chunk=3), want)


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


@pytest.mark.skipif(not sys.platform.startswith("linux") or _malloc_trim() is None,
                    reason="glibc malloc_trim only")
def test_release_freed_memory_returns_heap_to_the_os():
    """Small freed blocks stay in glibc's arenas (RSS does not fall on ``del``) until
    :func:`release_freed_memory`, which the pipeline calls between stages."""
    release_freed_memory()
    base = _rss_mb()
    blocks = [bytearray(4000) for _ in range(40000)]  # ~160 MB of small heap blocks
    pin = bytearray(4000)  # allocated last: the heap's top cannot shrink on its own
    grown = _rss_mb()
    del blocks
    kept = _rss_mb()
    assert grown - base > 100 and kept - base > 0.5 * (grown - base)  # retained by malloc
    assert release_freed_memory() is True
    assert _rss_mb() - base < 0.2 * (grown - base)
    del pin


@pytest.mark.parametrize("num_objects", [3, 8, 11])
def test_block_masks_packed_bits(num_objects):
    """Masks are stored as packed bits (one byte per cell for up to 8 objects) and expand to
    exactly the one-hot masks of the label map, also past one byte (11 objects)."""
    g = torch.Generator().manual_seed(num_objects)
    labels = torch.randint(0, num_objects + 1, (5, 6, 7), generator=g).to(torch.uint8)
    onehot = labels.unsqueeze(1) == torch.arange(1, num_objects + 1).view(1, -1, 1, 1)
    content = torch.ones(21, 27, dtype=torch.bool)
    content[:, :3] = False
    lazy = BlockMasks.from_labels(labels, num_objects, 4, (21, 27), content)
    eager = BlockMasks(onehot, 4, (21, 27), content)
    want = block_upsample(onehot, 4)[..., :21, :27] & content
    assert lazy.bits.dtype == torch.uint8 and lazy.bits.shape == (5, -(-num_objects // 8), 6, 7)
    assert torch.equal(lazy.bits, eager.bits) and torch.equal(lazy.low, onehot)
    assert lazy.shape == (5, num_objects, 21, 27) and torch.equal(lazy.full(), want)
    assert torch.equal(lazy[3], want[3]) and torch.equal(lazy[1:4].full(), want[1:4])
    ids = torch.tensor([num_objects - 1, 0])
    assert torch.equal(lazy[:, ids].full(), want[:, ids])
    assert torch.equal(lazy[2:, ids][torch.tensor([1, 0])], want[2:, ids][[1, 0]])
    assert torch.equal(lazy.sum((-1, -2)), want.sum((-1, -2)))
    assert torch.equal(lazy.to("cpu").full(), want)


def test_block_masks_without_objects():
    """A clip where no object was found (K = 0) gives empty masks through every accessor
    (the packed bits hold no byte per cell, which a ``reshape(-1, ...)`` cannot infer)."""
    content = torch.ones(9, 11, dtype=torch.bool)
    masks = [BlockMasks(torch.zeros(4, 0, 3, 3, dtype=torch.bool), 4, (9, 11), content),
             BlockMasks.from_labels(torch.zeros(4, 3, 3, dtype=torch.uint8), 0, 4, (9, 11),
                                    content)]
    for m in masks:
        assert m.shape == (4, 0, 9, 11) and m.full().shape == (4, 0, 9, 11)
        assert m[2].shape == (0, 9, 11) and m[torch.tensor([0, 3])].shape == (2, 0, 9, 11)
        assert m[1:3].full().shape == (2, 0, 9, 11)
        assert m.full(torch.tensor([[0, 1], [2, 3]])).shape == (2, 2, 0, 9, 11)
        assert not m.any(1).any() and m.any(1).shape == (4, 9, 11)
        assert m.sum((2, 3)).shape == (4, 0)


@pytest.mark.parametrize("preset", ["geocon", "background"])
def test_score_clip_chunked_identical(movie, preset):
    def run(video, chunk):
        cfg = {"io": {"long_side": 400, "stream_min_frames": 0},  # always stream a file
               "features": {"chunk_frames": chunk}}  # masks at 1/2
        d = score_clip(video, config=cfg, preset=preset, device="cpu", progress=False).to_dict()
        for key in ("timing_s", "config", "config_hash", "content_hash", "path"):
            d.pop(key, None)
        return json.dumps(d, sort_keys=True, default=str)

    streamed_chunked = run(movie, 3)  # a path: streamed frames, features 3 frames at a time
    eager_one_shot = run(read_clip(movie, long_side=400), None)
    assert streamed_chunked == eager_one_shot


def test_streaming_decision(movie, tmp_path):
    """Video files announcing more than io.stream_min_frames frames are streamed; tensors and
    short files are held in memory (image folders: tests/io/test_image_folder_streaming.py)."""
    from geocon_torch.config import GeoConConfig
    from geocon_torch.io.framestore import VideoFrames
    from geocon_torch.pipeline import load_clip, streams_frames

    n = read_clip(movie, long_side=None).num_frames
    for limit, want in ((n - 1, True), (n, False), (None, False), (0, True)):
        cfg = GeoConConfig(io={"long_side": 64, "stream_min_frames": limit})
        assert streams_frames(str(movie), cfg) is want
        clip, _ = load_clip(movie, cfg)
        assert isinstance(clip.frames, VideoFrames) is want
    cfg = GeoConConfig(io={"stream_min_frames": 0, "max_frames": 2})
    assert streams_frames(movie, cfg) is True
    assert not streams_frames(read_clip(movie, long_side=64).frames, cfg)


_PEAK = r"""
import resource, sys, torch
from geocon_torch import score_clip
score_clip(sys.argv[1], config={"io": {"long_side": 1024}}, preset=sys.argv[2], device="cpu",
           progress=False)
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0)
"""


@pytest.mark.slow
def test_peak_memory_does_not_grow_with_length(tmp_path):
    """Peak RSS of score_clip at 1024 px: 240 frames within 25 % (+150 MB) of 48 frames."""
    base = grounded_clip("C4", num_frames=48, size=(360, 480)).frames
    long = torch.cat([base, base.flip(0)] * 2 + [base] * 1)
    peaks = []
    for name, frames in (("short", base), ("long", long)):
        path = write_video(tmp_path / f"{name}.mp4", frames, fps=24)
        out = subprocess.run([sys.executable, "-c", _PEAK, str(path), "background"],
                             capture_output=True, text=True, check=True, cwd=ROOT,
                             env=dict(os.environ, PYTHONPATH=str(ROOT)))
        peaks.append(float(out.stdout.strip().splitlines()[-1]))
    assert peaks[1] <= peaks[0] * 1.25 + 150, peaks


def test_change_masks_chunked_identical(monkeypatch):
    import geocon_torch.segment.motion as motion

    g = torch.Generator().manual_seed(0)
    gray = torch.rand(11, 1, 30, 40, generator=g)
    hs = torch.eye(3).repeat(10, 1, 1) + torch.randn(10, 3, 3, generator=g) * 0.01
    valid = torch.rand(10, generator=g) > 0.2
    content = torch.ones(30, 40, dtype=torch.bool)
    content[:3] = False
    monkeypatch.setattr(motion, "_PAIR_CHUNK", 3)
    chunked = motion.change_masks(gray, hs, valid, content, 0.1)
    monkeypatch.setattr(motion, "_PAIR_CHUNK", 10 ** 6)
    assert torch.equal(chunked, motion.change_masks(gray, hs, valid, content, 0.1))


def test_fits_in_row_chunks_identical(monkeypatch):
    import geocon_torch.sections.fits as fits
    from geocon_torch.config import GeoConConfig

    g = torch.Generator().manual_seed(0)
    r, n = 9, 60
    x1 = torch.rand(r, n, 2, generator=g) * 300
    hom = torch.tensor([[1.01, 0.01, 3.0], [0.0, 0.99, -2.0], [0.0, 0.0, 1.0]])
    xh = torch.cat([x1, torch.ones(r, n, 1)], -1) @ hom.T
    x2 = xh[..., :2] / xh[..., 2:] + torch.randn(r, n, 2, generator=g) * 0.5
    x2[:, :10] += torch.rand(r, 10, 2, generator=g) * 50
    mask, scores = torch.rand(r, n, generator=g) > 0.1, torch.rand(r, n, generator=g)
    cfg = GeoConConfig()
    out = []
    for chunk in (4, 10 ** 6):
        monkeypatch.setattr(fits, "FIT_CHUNK_ROWS", chunk)
        out.append(fits.fit_both(x1, x2, mask, scores, cfg, rows=torch.arange(r) + 5)
                   + fits.fit_both(x1, x2, mask, scores, cfg))
    for a, b in zip(*out):
        for k in ("model", "inliers", "residuals", "valid", "num_inliers", "iterations", "cost"):
            assert torch.equal(getattr(a, k), getattr(b, k)), k


def test_connected_components_chunked_identical(monkeypatch):
    import geocon_torch.segment.motion as motion

    g = torch.Generator().manual_seed(3)
    mask = torch.rand(9, 21, 26, generator=g) > 0.6
    mask[4] = False  # an empty frame inside the volume
    monkeypatch.setattr(motion, "_LABEL_CHUNK", 10 ** 6)
    want = {f: motion.connected_components(mask, downsample=f) for f in (1, 4)}
    monkeypatch.setattr(motion, "_LABEL_CHUNK", 2)
    for f, one_shot in want.items():
        got = motion.connected_components(mask, downsample=f)
        assert got.dtype == torch.long and torch.equal(got, one_shot)
        small = motion.connected_components(mask, downsample=f, dtype=torch.int32)
        assert small.dtype == torch.int32 and torch.equal(small.long(), one_shot)
        k = int(got.max())
        frame_of = torch.arange(9).view(-1, 1, 1).expand_as(got)
        ref = torch.bincount((frame_of * (k + 1) + got).reshape(-1),
                             minlength=9 * (k + 1)).view(9, k + 1)[:, 1:]
        assert torch.equal(motion.per_frame_counts(got, k), ref)
        assert torch.equal(motion.per_frame_counts(small, k), ref)


def test_coherent_seeds_chunked_identical(monkeypatch):
    import geocon_torch.segment.motion as motion

    g = torch.Generator().manual_seed(5)
    labels = torch.randint(0, 12, (6, 20, 24), generator=g)
    pts = torch.rand(300, 2, generator=g) * torch.tensor([23.0, 19.0])
    frames = torch.randint(0, 6, (300,), generator=g)
    vec = torch.randn(300, 2, generator=g) * 5 + (labels[frames, pts[:, 1].round().long(),
                                                         pts[:, 0].round().long()] % 3).view(-1, 1)
    monkeypatch.setattr(motion, "_SEED_CHUNK", 10 ** 6)
    want = motion.coherent_seeds(labels, (pts, frames, vec), 11)
    monkeypatch.setattr(motion, "_SEED_CHUNK", 4)
    assert torch.equal(motion.coherent_seeds(labels, (pts, frames, vec), 11), want)
    assert want.sum() > 0


def test_auto_chunk_frames_by_device():
    from geocon_torch.features.multiscale import CHUNK_PIXELS, resolve_chunk_frames
    assert resolve_chunk_frames("auto", "cpu", (384, 640)) == 48
    assert resolve_chunk_frames(7, "cpu", (384, 640)) == 7
    assert resolve_chunk_frames(None, "cpu", (384, 640)) is None
    budget = CHUNK_PIXELS["default"]
    assert resolve_chunk_frames("auto", "meta", (384, 640)) == int(budget // (384 * 640))
    assert resolve_chunk_frames("auto", "meta", (4000, 4000)) == 48  # never below the CPU's


def test_cycle_collector_runs_only_after_large_clips(monkeypatch):
    """The finished background block runs gc.collect (~0.1 s) only on clips whose frames
    exceed pipeline.COLLECT_PIXELS; small clips (a leaderboard of short GIFs) skip it."""
    import gc

    from geocon_torch import pipeline
    from geocon_torch.synth import render_scene

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a, **k: calls.append(1) or 0)
    frames = render_scene("C1", num_frames=4, size=(64, 96), seed=0).frames
    score_clip(frames, preset="background")
    assert calls == []
    monkeypatch.setattr(pipeline, "COLLECT_PIXELS", 4 * 64 * 96 - 1)
    score_clip(frames, preset="background")
    assert len(calls) == 1


def _movers(t: int, size, seed: int):
    """(T, 1, H, W) gray noise background with three textured squares (moving right, left and
    down, 2-3 px per frame, apart), and seeds on their corners and centres (each in its own
    frame) with their motion; a few seeds are not valid."""
    h, w = size
    g = torch.Generator().manual_seed(seed)
    gray = torch.rand(1, 1, h, w, generator=g).expand(t, 1, h, w).clone() * 0.3
    pts, frames, vec = [], [], []
    for k in range(t):
        for (x, y, vx, vy, n) in ((4 + 2 * k, 4, 2, 0, 12), (w - 18 - 3 * k, h - 14, -3, 0, 12),
                                  (w - 14, 4 + 2 * k, 0, 2, 10)):
            gray[k, 0, y:y + n, x:x + n] = 0.8 + 0.2 * torch.rand(n, n, generator=g)
            for cx, cy in ((x + 2, y + 2), (x + n - 3, y + 2), (x + 2, y + n - 3),
                           (x + n - 3, y + n - 3), (x + n // 2, y + n // 2)):
                pts.append((float(cx), float(cy)))
                frames.append(k)
                vec.append((float(vx), float(vy)))
    m = len(pts)
    return gray, (torch.tensor(pts), torch.tensor(frames), torch.tensor(vec),
                  torch.arange(m) % 9 != 4)


@pytest.mark.parametrize("max_side, objects", [(320, [3, 3, 3]), (40, [3, 3, 2])])
def test_motion_segments_chunked_identical(monkeypatch, max_side, objects):
    """Issue 21 item 5: the per-frame maps of the motion segmentation go in chunks of frames
    (_MAP_BUDGET cells); a batch of clips (two sizes, one given pooled, chunks straddling the
    clips) gets bit-for-bit the masks and evidence of the one-chunk run, whatever the chunk."""
    import torch.nn.functional as F

    import geocon_torch.segment.motion as motion
    from geocon_torch.config import SegmentConfig

    cfg = SegmentConfig(motion_min_area=12, motion_min_frames=2, motion_min_seeds=3,
                        motion_seed_radius_px=2, motion_close_px=2)
    specs = [(9, (56, 72)), (6, (56, 72)), (7, (48, 64))]
    grays, seeds = zip(*[_movers(t, s, k) for k, (t, s) in enumerate(specs)])
    grays = list(grays)
    f = motion.segmentation_factor(specs[1][1], max_side)
    if f > 1:  # the second clip's frames given already pooled (pooled_gray)
        grays[1] = F.avg_pool2d(grays[1], f, ceil_mode=True)
    hs = [torch.eye(3, dtype=torch.float64).repeat(t - 1, 1, 1) for t, _ in specs]
    valid = [torch.ones(t - 1, dtype=torch.bool) for t, _ in specs]
    valid[0][4] = False  # an invalid pair inside a clip
    content = [torch.ones(s, dtype=torch.bool) for _, s in specs]
    content[0][:, :3] = False

    def run():
        return motion.motion_segments(grays, hs, valid, content, cfg, ["H", "H", "H"],
                                      seeds=seeds, max_side=max_side)

    monkeypatch.setattr(motion, "_MAP_BUDGET", 10 ** 9)
    want = run()
    # at half size two squares of the narrower clip merge into one component
    assert [ev["objects"] for _, ev in want] == objects
    for budget in (1, 4 * 56 * 72):  # one frame per chunk; 4 frames (2-3 of the small clips)
        monkeypatch.setattr(motion, "_MAP_BUDGET", budget)
        for (obj, ev), (ref, ref_ev) in zip(run(), want):
            assert ev == ref_ev
            if f > 1:
                assert torch.equal(obj.bits, ref.bits) and torch.equal(obj.ids, ref.ids)
            else:
                assert torch.equal(obj, ref)
