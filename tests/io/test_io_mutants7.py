"""Boundaries of the io rules that no other default test pins (mutation audit s22): the display
rotation's one-degree tolerance, a demux error, the damage look-ahead (only for a decoder that
reorders, over 16 + DECODE_THREADS frames), the frame store's indexing (negative, boolean masks,
a tuple key, float indices, close, an empty cache), the letterbox threshold's boundary, the
natural order of mixed-case names, hidden image files, a numbered sequence with two suffixes,
the motion of unordered tensor indices, and the folder digest of the pinned files. Closed-form
inputs: fake frames and containers, synthetic tensors, small PNG folders and one small mp4
built with PyAV."""
from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from types import SimpleNamespace

import av
import numpy as np
import pytest
import torch
from helpers import encode_rgb

from geocon_torch.errors import InputError, ShapeError, VideoReadError
from geocon_torch.io import decode, read_clip
from geocon_torch.io.decode import DAMAGED_DECODE_THREADS, DECODE_THREADS
from geocon_torch.io.frame_rgb import display_turns
from geocon_torch.io.framestore import VideoFrames
from geocon_torch.io.images import image_files
from geocon_torch.io.letterbox import ContentMaskAccumulator, detect_content_mask
from geocon_torch.io.resize import working_size
from geocon_torch.io.sampling import frame_selection

H, W, T = 16, 24, 8


# ------------------------------------------------------------------ display rotation

@pytest.mark.parametrize("angle,turns", [(91.0, 1), (89.0, 1), (-91.0, 3), (181.0, 2),
                                         (91.5, 0), (88.5, 0)])
def test_display_turns_tolerate_exactly_one_degree(angle, turns):
    """A quarter turn within 1 degree (inclusive) is applied; 1.5 degrees off is not."""
    assert display_turns(SimpleNamespace(rotation=angle)) == turns


# ------------------------------------------------------------------ fake decoder

def _fake_frame(k: int, corrupt: bool) -> SimpleNamespace:
    rgb = np.full((H, W, 3), k, np.uint8)
    return SimpleNamespace(pts=k, duration=1, height=H, width=W, rotation=0, is_corrupt=corrupt,
                           to_ndarray=lambda format="rgb24": rgb)


class _FakeVideo:
    """A container and its stream: ``n`` frames, frame ``corrupt_at`` flagged as concealed, a
    demux error after ``demux_fail_at`` packets."""

    def __init__(self, n: int, corrupt_at=None, b_frames=False, demux_fail_at=None):
        self.n, self.corrupt_at, self.demux_fail_at = n, corrupt_at, demux_fail_at
        self.stream = SimpleNamespace(
            frames=n, time_base=Fraction(1, 24), average_rate=Fraction(24), guessed_rate=None,
            base_rate=None, index=0, codec_context=SimpleNamespace(name="h264",
                                                                   has_b_frames=b_frames))
        self.streams = SimpleNamespace(video=[self.stream])

    def demux(self, stream):
        for k in range(self.n):
            if k == self.demux_fail_at:
                raise av.error.InvalidDataError(1094995529, "Invalid data")
            frame = _fake_frame(k, k == self.corrupt_at)
            yield SimpleNamespace(decode=lambda f=frame: [f])

    def close(self):
        pass


@pytest.fixture
def fake_open(monkeypatch):
    """Route decode.open_video to a _FakeVideo; returns (set the video, the thread counts)."""
    calls: list = []
    holder: dict = {}

    def open_video(path, threads=DECODE_THREADS):
        calls.append(int(threads))
        video = holder["video"]
        return video, video.stream

    monkeypatch.setattr(decode, "open_video", open_video)
    return holder, calls


def test_a_demux_error_is_recorded_and_truncates(fake_open):
    holder, _ = fake_open
    holder["video"] = _FakeVideo(10, demux_fail_at=4)
    dec = decode.decode_selected(Path("x.mp4"), frame_selection())
    assert dec.decoded == 4 and dec.complete
    assert len(dec.errors) == 1 and dec.errors[0].startswith("demux: ")
    meta = dec.metadata(Path("x.mp4"))
    assert meta["truncated"] is True and meta["num_decode_errors"] == 1


@pytest.mark.parametrize("b_frames,corrupt_at,ahead", [
    (True, 3 + 16 + DECODE_THREADS - 1, True),   # the last frame looked at
    (True, 3 + 16 + DECODE_THREADS, False),      # one past the look-ahead
    (False, 4, False),                           # no reordering: no look-ahead at all
])
def test_damage_ahead_only_for_a_reordering_decoder_over_20_frames(fake_open, b_frames,
                                                                   corrupt_at, ahead):
    """Frames 0..2 kept (a cap of 3): the decode stops at frame 2 and, for a decoder that
    reorders (B-frames), looks at frames 3..22 (H.264's 16 reordered frames + the 4 decoder
    threads) for damage; a stream without B-frames is not looked past (nothing decoded before
    the cap depends on later frames), so it keeps its threaded decode."""
    holder, calls = fake_open
    holder["video"] = _FakeVideo(40, corrupt_at=corrupt_at, b_frames=b_frames)
    dec = decode.decode_selected(Path("x.mp4"), frame_selection(max_frames=3))
    assert dec.indices == [0, 1, 2] and not dec.complete
    assert dec.damage_ahead is ahead and dec.num_concealed == 0
    calls.clear()
    stable = decode.decode_stable(Path("x.mp4"), frame_selection(max_frames=3),
                                  lambda: (None, None, None))
    assert calls == ([DECODE_THREADS, DAMAGED_DECODE_THREADS] if ahead else [DECODE_THREADS])
    assert stable.threads == (DAMAGED_DECODE_THREADS if ahead else DECODE_THREADS)
    assert stable.metadata(Path("x.mp4"))["decode_threads"] == stable.threads


# ------------------------------------------------------------------ the frame store

@pytest.fixture(scope="module")
def movie(tmp_path_factory) -> Path:
    """T frames of H x W noise, a different picture each, mpeg4 (no B-frames) at 24 fps."""
    rng = np.random.default_rng(7)
    frames = [rng.integers(0, 256, (H, W, 3), dtype=np.uint8) for _ in range(T)]
    return encode_rgb(tmp_path_factory.mktemp("m7") / "clip.mp4", frames, "mpeg4")


@pytest.fixture(scope="module")
def eager_and_lazy(movie):
    eager = read_clip(movie, long_side=None).frames
    lazy = read_clip(movie, long_side=None, stream=True).frames
    assert isinstance(lazy, VideoFrames) and lazy.shape == eager.shape
    return eager, lazy


def test_store_index_minus_t_is_the_first_frame(eager_and_lazy):
    eager, lazy = eager_and_lazy
    assert torch.equal(lazy[-T], eager[0]) and torch.equal(lazy[-1], eager[T - 1])
    with pytest.raises(IndexError):
        lazy[-T - 1]


def test_store_boolean_masks_select_frames(eager_and_lazy):
    """A bool tensor / array is a mask over the frames, not the indices 0 / 1."""
    eager, lazy = eager_and_lazy
    mask = torch.zeros(T, dtype=torch.bool)
    mask[[2, 5, 6]] = True
    assert torch.equal(lazy[mask], eager[[2, 5, 6]])
    assert torch.equal(lazy[mask.numpy()], eager[[2, 5, 6]])
    assert torch.equal(lazy.index_select(0, mask.nonzero().reshape(-1)), eager[[2, 5, 6]])


def test_store_tuple_key_indexes_each_selected_frame(eager_and_lazy):
    """``frames[[i, j], c]`` is channel c of frames i and j (as a tensor indexes)."""
    eager, lazy = eager_and_lazy
    assert torch.equal(lazy[[1, 3], 0], eager[[1, 3], 0])
    assert torch.equal(lazy[2:4, 1, :4], eager[2:4, 1, :4])
    assert torch.equal(lazy[3, 2], eager[3, 2])


def test_store_refuses_float_indices(eager_and_lazy):
    _, lazy = eager_and_lazy
    with pytest.raises(ShapeError, match="frame indices must be integers"):
        lazy[torch.tensor([1.0, 2.0])]


def test_store_reads_again_after_close(movie, eager_and_lazy):
    """close() drops the decoder and its position: frames read afterwards are still right."""
    eager, _ = eager_and_lazy
    lazy = read_clip(movie, long_side=None, stream=True).frames
    lazy.cache_frames = 0
    assert torch.equal(lazy[4], eager[4])
    lazy.close()
    assert torch.equal(lazy[2], eager[2]) and torch.equal(lazy[5], eager[5])
    assert lazy.opens == 2


def test_a_store_without_cache_keeps_no_frame(movie, eager_and_lazy):
    eager, _ = eager_and_lazy
    store = VideoFrames(movie, list(range(T)), working_size(H, W, None), cache_frames=0)
    assert torch.equal(store[1:4], eager[1:4]) and len(store._cache) == 0


# ------------------------------------------------------------------ letterbox threshold

def test_a_gray_line_exactly_at_the_threshold_is_content():
    """Gray rows of 16 (luminance 16/255: not below 16/255) are picture, not a bar, in the
    batch and in the streamed detection; rows of 15 are a bar."""
    frames = torch.full((3, 1, 50, 20), 120, dtype=torch.uint8)
    frames[:, :, :5] = 16
    assert bool(detect_content_mask(frames).all())
    acc = ContentMaskAccumulator()
    acc.update(frames)
    assert bool(acc.mask().all())
    frames[:, :, :5] = 15
    assert not bool(detect_content_mask(frames)[:5].any())


def test_a_threshold_of_one_is_allowed():
    """threshold is in [0, 1] inclusive: at 1.0 every line is below it (all dark: all content)."""
    frames = torch.full((2, 3, 10, 10), 200, dtype=torch.uint8)
    assert bool(detect_content_mask(frames, threshold=1.0).all())
    ContentMaskAccumulator(1.0)


# ------------------------------------------------------------------ image folders

def _png(folder: Path, name: str, value: int) -> None:
    import cv2
    folder.mkdir(exist_ok=True)
    cv2.imwrite(str(folder / name), np.full((8, 10, 3), value, np.uint8))


def test_natural_order_ignores_case(tmp_path):
    """``a1.png``, ``B2.png``, ``c3.png``: natural order compares names case-insensitively."""
    for name in ["c3.png", "B2.png", "a1.png"]:
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in image_files(tmp_path)] == ["a1.png", "B2.png", "c3.png"]


def test_hidden_image_files_are_skipped(tmp_path):
    """A ``._0002.png`` (macOS metadata) or ``.thumb.png`` beside the frames is not a frame."""
    folder = tmp_path / "seq"
    for k in range(3):
        _png(folder, f"{k:04d}.png", 40 * k)
    (folder / "._0001.png").write_bytes(b"\0\5\26\7 not a png")
    _png(folder, ".thumb.png", 255)
    assert [p.name for p in image_files(folder)] == ["0000.png", "0001.png", "0002.png"]
    clip = read_clip(folder, long_side=None)
    assert clip.num_frames == 3 and clip.meta["files"] == ["0000.png", "0001.png", "0002.png"]


def test_numbered_files_with_two_suffixes_are_no_sequence(tmp_path):
    """``f1.png``, ``f2.png``, ``f3.png``, ``f5.jpg``: not one numbered family (two suffixes),
    so no frame is counted lost before ``f5.jpg``."""
    folder = tmp_path / "mixed"
    for k, name in enumerate(["f1.png", "f2.png", "f3.png", "f5.jpg"]):
        _png(folder, name, 50 * k)
    meta = read_clip(folder, long_side=None).meta
    assert (meta["timestamp_gaps"], meta["timestamp_missing_frames"]) == (0, 0)


# ------------------------------------------------------------------ motion of tensors

def test_motion_of_unordered_tensor_indices_follows_source_order():
    """Frames of 0, 10, 20 grey levels read as indices [0, 2, 1]: the distinct frames kept, in
    source order, move 10 levels a pair (not 20, the jump of the clip order)."""
    x = torch.stack([torch.full((3, 6, 8), 10 * k, dtype=torch.uint8) for k in range(3)])
    m = read_clip(x, indices=[0, 2, 1], long_side=None).meta["motion"]
    assert m == {"max_mad": 10.0, "pairs": 2, "frozen": False}
    m = read_clip(x, indices=[2, 2, 0], long_side=None).meta["motion"]
    assert m == {"max_mad": 20.0, "pairs": 1, "frozen": False}


def test_motion_every_zero_is_an_input_error():
    with pytest.raises(InputError, match="motion_every must be None or an integer >= 1"):
        read_clip(torch.zeros(3, 3, 8, 8, dtype=torch.uint8), motion_every=0)
    with pytest.raises(InputError, match="motion_every"):
        read_clip(torch.zeros(3, 3, 8, 8, dtype=torch.uint8), motion_every=True)


def test_sampled_motion_reaches_the_last_kept_frame_on_the_grid():
    """Frames 0..4 kept, every 2: sampled pairs (0, 2) and (2, 4): the second moves 30."""
    x = torch.zeros(5, 3, 6, 8, dtype=torch.uint8)
    x[4] = 30
    m = read_clip(x, long_side=None, motion_every=2).meta["motion"]
    assert m["sampled"] == {"max_mad": 30.0, "pairs": 2, "frozen": False, "every": 2}


# ------------------------------------------------------------------ pinned files

def test_folder_digest_delimits_each_file_by_its_size(tmp_path):
    """{a: "", b: "Q"} and {a: "b\\0Q"} stream the same names and bytes; the sizes tell them
    apart."""
    from geocon_torch.io.pinned_files import file_digest

    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    (one / "a").write_bytes(b"")
    (one / "b").write_bytes(b"Q")
    (two / "a").write_bytes(b"b\0Q")
    assert file_digest(one) != file_digest(two)


def test_folder_digest_does_not_follow_the_listing_order(tmp_path, monkeypatch):
    """The files of a folder are hashed in name order, whatever order the file system lists
    them in."""
    import os

    from geocon_torch.io import pinned_files

    for name in ("a", "b", "c"):
        (tmp_path / name).write_bytes(name.encode() * 3)
    walk = os.walk
    digests = []
    for reverse in (False, True):
        def listed(root, followlinks=False, reverse=reverse):
            for d, sub, names in walk(root, followlinks=followlinks):
                yield d, sub, sorted(names, reverse=reverse)

        monkeypatch.setattr(os, "walk", listed)  # file_digest lives in checkpoints now
        pinned_files._cache.clear()
        digests.append(pinned_files.file_digest(tmp_path))
    assert digests[0] == digests[1] is not None


# ------------------------------------------------------------------ sampling arguments

@pytest.mark.parametrize("kwargs", [dict(stride=True), dict(max_frames=True),
                                    dict(indices=[True, 2]), dict(stride=np.bool_(True))])
def test_booleans_are_not_frame_counts_or_indices(kwargs):
    """``True`` is no stride, frame cap or index (it would read as 1)."""
    with pytest.raises(VideoReadError, match="integer"):
        frame_selection(**kwargs)


# ------------------------------------------------------------------ resize

def test_a_frame_of_the_working_area_but_turned_is_resized_bilinearly():
    """A stream of 40x20 frames read at long side 80 (80x40, enlarged) meets a 40x80 frame (as
    many pixels as the working frame): it is not shrunk, so bilinear, not area averaging."""
    import cv2

    from geocon_torch.io.resize import resize_image

    ws = working_size(20, 40, 80)
    img = np.random.default_rng(0).integers(0, 256, (80, 40, 3), dtype=np.uint8)
    want = cv2.resize(img, (80, 40), interpolation=cv2.INTER_LINEAR)
    assert np.array_equal(resize_image(img, ws), want)
