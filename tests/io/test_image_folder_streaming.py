"""Image folders streamed like video files (security audit s20, L6): ``read_clip(folder,
stream=True)`` gives an :class:`ImageFrames` store that reads each image on demand, with the
eager read's frames, letterbox mask and metadata; the pipeline streams folders of more than
``io.stream_min_frames`` images, with bit-identical scores."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from helpers import REPO_ROOT

from geocon_torch import score_clip
from geocon_torch.config import GeoConConfig
from geocon_torch.errors import VideoReadError
from geocon_torch.io import content_hash, read_clip, write_image_folder
from geocon_torch.io.framestore import CACHE_FRAMES, ImageFrames, VideoFrames
from geocon_torch.pipeline import load_clip, streams_frames
from geocon_torch.synth import grounded_clip


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """14 PNGs of 160x120 px: a moving object on a textured background, letterboxed by 8 black
    rows at the top and the bottom."""
    frames = grounded_clip("C4", num_frames=14, size=(120, 160)).frames.clone()
    frames[:, :, :8] = 0
    frames[:, :, -8:] = 0
    return write_image_folder(tmp_path_factory.mktemp("seq") / "seq", frames, prefix="f_")


def _held_bytes(frames: ImageFrames) -> int:
    """Bytes of the tensors / arrays a store holds (its cache included)."""
    held = list(vars(frames).values()) + list(frames._cache.values())
    return sum(int(x.numel()) * x.element_size() if isinstance(x, torch.Tensor) else
               int(x.nbytes) for x in held if isinstance(x, (torch.Tensor, np.ndarray)))


@pytest.mark.parametrize("kw", [{}, {"stride": 3, "max_frames": 3},
                                {"indices": [10, 2, 2, 5, 13]}, {"motion_every": 4}])
def test_streamed_folder_equals_eager(folder, kw):
    eager = read_clip(folder, long_side=200, **kw)
    lazy = read_clip(folder, long_side=200, stream=True, **kw)
    assert isinstance(lazy.frames, ImageFrames) and isinstance(lazy.frames, VideoFrames)
    assert lazy.frames.shape == eager.frames.shape and lazy.frames.dtype == torch.uint8
    assert lazy.meta == eager.meta and lazy.meta["source"] == "images"
    assert torch.equal(lazy.content_mask, eager.content_mask)
    assert not bool(lazy.content_mask[:5].any()) and bool(lazy.content_mask[75].all())
    assert torch.equal(lazy.frame_indices, eager.frame_indices)
    assert (lazy.fps, lazy.scale, lazy.source_size) == (eager.fps, eager.scale, eager.source_size)
    assert torch.equal(lazy.frames[:], eager.frames)
    assert torch.equal(lazy.frames[1], eager.frames[1])
    idx = torch.tensor([2, 0, 0, 1])
    assert torch.equal(lazy.frames[idx], eager.frames[idx])
    assert torch.equal(lazy.frames.index_select(0, idx), eager.frames.index_select(0, idx))
    assert torch.equal(lazy.gray(), eager.gray())


def test_streamed_folder_motion_and_frozen(tmp_path):
    """The motion statistic (``meta["motion"]``: frozen or not) is the eager read's."""
    still = torch.randint(0, 256, (1, 3, 24, 32), dtype=torch.uint8,
                          generator=torch.Generator().manual_seed(0)).expand(6, -1, -1, -1)
    frozen = write_image_folder(tmp_path / "frozen", still)
    eager, lazy = (read_clip(frozen, long_side=64, stream=s, motion_every=2) for s in (False, True))
    assert isinstance(lazy.frames, ImageFrames) and torch.equal(lazy.frames[:], eager.frames)
    assert lazy.meta["motion"] == eager.meta["motion"]
    assert lazy.meta["motion"]["frozen"] is True and lazy.meta["motion"]["max_mad"] == 0.0
    assert lazy.meta["motion"]["pairs"] == 5 and lazy.meta["motion"]["sampled"]["pairs"] == 2


def test_image_frames_cache_pickle_and_hash(folder):
    lazy = read_clip(folder, long_side=None, stream=True)
    eager = read_clip(folder, long_side=None)
    store = lazy.frames
    assert store.reads == 0 and _held_bytes(store) == 0  # the first pass keeps no frame
    for start in range(0, 14, 4):  # chunks overlapping by one frame: that one is cached
        assert torch.equal(store[start:start + 5], eager.frames[start:start + 5])
    assert store.reads == 14
    store[0]
    assert store.reads == 14  # still cached (14 frames <= the cache's 16)
    assert _held_bytes(store) == 14 * 3 * 120 * 160 and CACHE_FRAMES == 16  # the cache only
    copy = pickle.loads(pickle.dumps(store))
    assert copy.reads == store.reads and len(copy._cache) == 0
    assert torch.equal(copy[:], eager.frames)
    assert content_hash(store) == content_hash(folder)
    assert repr(store).startswith("ImageFrames(seq, shape=(14, 3, 120, 160)")


def test_image_frames_lru_cache(folder):
    store = read_clip(folder, long_side=None, stream=True).frames
    store.cache_frames = 3
    store[0:5]
    assert list(store._cache) == [2, 3, 4] and store.reads == 5
    store[2]  # a hit moves it to the end
    store[5]
    assert list(store._cache) == [4, 2, 5] and store.reads == 6
    store[3]
    assert store.reads == 7 and list(store._cache) == [2, 5, 3]


def test_image_changed_after_the_first_pass(tmp_path):
    frames = torch.randint(0, 256, (4, 3, 20, 30), dtype=torch.uint8)
    path = write_image_folder(tmp_path / "seq", frames)
    clip = read_clip(path, long_side=40, stream=True)
    cv2.imwrite(str(path / "00002.png"), np.zeros((10, 30, 3), np.uint8))
    with pytest.raises(VideoReadError, match=r"00002\.png: image size 30x10 differs from the "
                                             r"30x20 it had when .*seq was read"):
        clip.frames[2]
    assert clip.frames[1].shape == (3, 26, 40)


def test_streams_frames_counts_folder_images(folder, tmp_path):
    n = 14
    for limit, want in ((n - 1, True), (n, False), (None, False), (0, True)):
        cfg = GeoConConfig(io={"long_side": 64, "stream_min_frames": limit})
        assert streams_frames(str(folder), cfg) is want
        clip, _ = load_clip(folder, cfg)
        assert isinstance(clip.frames, ImageFrames) is want
        assert clip.num_frames == n
    cfg = GeoConConfig(io={"stream_min_frames": 4, "stride": 3})  # 5 frames kept
    assert streams_frames(folder, cfg) is True
    cfg = GeoConConfig(io={"stream_min_frames": 4, "stride": 3, "max_frames": 4})
    assert streams_frames(folder, cfg) is False
    cfg = GeoConConfig(io={"stream_min_frames": 0})
    assert streams_frames(folder / "f_00003.png", cfg) is False  # one image: one frame
    (tmp_path / "empty").mkdir()
    assert streams_frames(tmp_path / "empty", cfg) is False  # read_clip names the problem


def test_score_clip_folder_streamed_identical(folder):
    """The background preset on 8 of the 14 images: the same result, bit for bit (the geocon
    preset and the 3-photo hill folder were compared the same way when the store was added)."""
    def run(limit):
        cfg = {"io": {"long_side": None, "stream_min_frames": limit, "max_frames": 8}}
        streamed = isinstance(load_clip(folder, cfg)[0].frames, ImageFrames)
        assert streamed is (limit is not None)
        d = score_clip(str(folder), config=cfg, preset="background", device="cpu",
                       progress=False).to_dict()
        for key in ("timing_s", "config", "config_hash"):
            d.pop(key, None)
        return json.dumps(d, sort_keys=True, default=str)

    streamed, eager = run(0), run(None)
    assert json.loads(eager)["status"] == "ok"
    assert streamed == eager


_PEAK = r"""
import os, resource, sys
import cv2
from geocon_torch._memory import release_freed_memory
from geocon_torch.io import read_clip
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20
base = rss()
clip = read_clip(sys.argv[1], long_side=1024, stream=sys.argv[2] == "1")
for k in range(0, clip.num_frames, 8):  # in chunks, freed memory released as the stages do
    assert clip.frames[k:k + 8].shape[1:] == (3, 1024, 1024)
    release_freed_memory()
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0 - base)
"""


@pytest.mark.slow
def test_streamed_folder_peak_memory(tmp_path):
    """300 PNGs of 8x8 px read at 1024 px (3 MiB a frame) and read back in chunks of 8: the
    streamed read's peak RSS grows by less than 128 frames' worth (about 48 measured: the first
    pass's chunk of 16 frames for the letterbox mask and its copies; up to ~90 seen, the
    allocator's arenas), the eager one's by the whole stack (900 MiB)."""
    rng = np.random.default_rng(0)
    for i in range(300):
        cv2.imwrite(str(tmp_path / f"{i:05d}.png"), rng.integers(0, 255, (8, 8, 3), np.uint8))
    grown = {}
    for stream in ("1", "0"):
        out = subprocess.run([sys.executable, "-c", _PEAK, str(tmp_path), stream],
                             capture_output=True, text=True, check=True, cwd=REPO_ROOT,
                             env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
        grown[stream] = float(out.stdout.strip().splitlines()[-1])
    assert grown["1"] < 128 * 3 and grown["0"] > 280 * 3, grown
