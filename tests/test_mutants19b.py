"""Mutation-testing gaps (session 31, helper m19b) in the memory fixes of session 30.

* io: ``Decoded.over_by`` (its slack boundary, a decode stopped early, a cut file),
  ``decode_selected(max_keep=)`` with a sink, ``decode_stable`` returning an overflowed decode
  as is, ``read_clip(stream_limit=0)``.
* Epipolar-DPO: the exact windows of ``dpo._windows`` (a window that fills
  ``WINDOW_PIXELS`` exactly, the documented 720p / 96 x 128 counts, at least ``workers + 1``
  frames) and windowed measurements equal to one window across clips of several sizes.
* synth: ``render_scene`` / ``render_planes`` against the one-pass renderers and the raycast
  primitives (rounding, supersampling, depth dtype, corrupted masks), a frame larger than the
  chunk budget.
"""
from __future__ import annotations

import struct
from pathlib import Path
from typing import List

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import clean_video, corrupt_middle, encode_rgb, moving_noise

from geocon_torch.io import read_clip
from geocon_torch.io.decode import DECODE_THREADS, decode_selected, decode_stable
from geocon_torch.io.framestore import VideoFrames
from geocon_torch.io.integrity import decode_report, decode_verdict
from geocon_torch.io.sampling import frame_selection

H, W = 32, 48


def _avi(path: Path, n: int, lie: int) -> Path:
    """An mpeg4 AVI of ``n`` 48x32 frames (a texture panning 2 px a frame) whose
    ``avih.dwTotalFrames`` and ``strh.dwLength`` announce ``lie`` frames."""
    base = np.random.default_rng(0).integers(0, 256, (H, W + 2 * n, 3), dtype=np.uint8)
    frames = [np.ascontiguousarray(base[:, 2 * t:2 * t + W]) for t in range(n)]
    encode_rgb(path, frames, codec="mpeg4")
    data = bytearray(path.read_bytes())
    for tag, off in ((b"avih", 16), (b"strh", 32)):
        struct.pack_into("<I", data, data.find(tag) + 8 + off, lie)
    path.write_bytes(bytes(data))
    return path


@pytest.fixture(scope="module")
def avi_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("avi19b")


# ------------------------------------------------------------------------------------ io

@pytest.mark.parametrize("lie, mismatch", [(12, 0), (11, 0), (10, 0), (9, 3), (4, 8)])
def test_under_count_beyond_the_slack_only(avi_dir, lie, mismatch):
    """12 frames decoded: a header that says 10 or 11 is within the container slack (2 frames,
    no mismatch, no warning); 9 is 3 frames short: container_count_mismatch 3."""
    path = _avi(avi_dir / f"n12_{lie}.avi", 12, lie)
    dec = decode_selected(path, frame_selection())
    assert dec.decoded == 12 and dec.complete and dec.announced == lie
    assert dec.over_by() == mismatch and dec.count_mismatch == mismatch
    clip = read_clip(path, long_side=W)
    assert clip.meta.get("container_count_mismatch", 0) == mismatch
    report = decode_report(clip.meta)
    assert report["lost_frames"] == 0 and not report["truncated"]
    _, warns = decode_verdict(report, 0.1)
    assert any(f"announces {lie} frames but 12" in w for w in warns) == bool(mismatch)


def test_under_count_recorded_when_decoding_stops_early(avi_dir):
    """20 frames announced as 5: a read capped at 10 frames stops early and still records the
    5 surplus frames it decoded; an eager decode stopped by max_keep 8 (9 frames decoded)
    records 4."""
    path = _avi(avi_dir / "n20_5.avi", 20, 5)
    clip = read_clip(path, long_side=W, max_frames=10)
    assert clip.meta["decode_complete"] is False and clip.meta["decoded_frames"] == 10
    assert clip.meta["container_count_mismatch"] == 5
    dec = decode_selected(path, frame_selection(), max_keep=8)
    assert dec.overflowed and not dec.complete and dec.decoded == 9
    assert dec.count_mismatch == 4


def test_under_count_recorded_in_a_cut_file(avi_dir):
    """A cut AVI whose header says 2 frames: the frames it decodes beyond 2 exist, so they are
    a container_count_mismatch even though the file shows a cut (truncated)."""
    full = _avi(avi_dir / "n20_2.avi", 20, 2).read_bytes()
    cut = avi_dir / "cut20_2.avi"
    cut.write_bytes(full[:int(len(full) * 0.8)])
    dec = decode_selected(cut, frame_selection())
    assert dec.decoded > 4 and dec.truncated
    assert dec.count_mismatch == dec.decoded - 2
    meta = read_clip(cut, long_side=W).meta
    assert meta["truncated"] and meta["container_count_mismatch"] == meta["decoded_frames"] - 2


def test_max_keep_does_not_apply_to_a_sink(avi_dir):
    """With a sink nothing is held: max_keep (even 0) is ignored, every frame goes to the
    sink."""
    path = _avi(avi_dir / "n20_5s.avi", 20, 5)
    got: List[np.ndarray] = []
    dec = decode_selected(path, frame_selection(), sink=got.append, max_keep=0)
    assert not dec.overflowed and dec.complete and dec.images == []
    assert len(got) == 20 and dec.indices == list(range(20))


def test_decode_stable_returns_an_overflowed_decode_as_is(tmp_path):
    """A damaged mp4 (40 frames, the middle bytes replaced by noise) decoded with max_keep 30:
    the decode overflows after the damage and is returned as is (one decode, on
    DECODE_THREADS), not decoded again on the damaged-stream thread count."""
    bad = corrupt_middle(clean_video(tmp_path / "c.mp4", moving_noise(40)), tmp_path / "b.mp4")
    starts: List[int] = []

    def start():
        starts.append(1)
        return None, None, None

    dec = decode_stable(bad, frame_selection(), start, max_keep=30)
    assert dec.overflowed and dec.damaged and dec.images == []
    assert len(starts) == 1 and dec.threads == DECODE_THREADS
    full = decode_stable(bad, frame_selection(), start)  # no limit: decoded again, as before
    assert not full.overflowed and len(starts) == 3 and full.threads != DECODE_THREADS


def test_stream_limit_zero_streams(avi_dir):
    """stream_limit 0 is valid (an integer >= 0): no frame is held, the clip is streamed, with
    the frames of the eager read."""
    path = _avi(avi_dir / "n12_4z.avi", 12, 4)
    eager = read_clip(path, long_side=W)
    streamed = read_clip(path, long_side=W, stream_limit=0)
    assert isinstance(eager.frames, torch.Tensor) and isinstance(streamed.frames, VideoFrames)
    assert torch.equal(streamed.frames.materialize(), eager.frames)
    assert streamed.meta["container_count_mismatch"] == 8


# --------------------------------------------------------------------------- Epipolar-DPO

def _last(lengths: List[int]) -> List[bool]:
    return [t == n - 1 for n in lengths for t in range(n)]


def test_windows_fill_window_pixels_exactly():
    """Frames of 2^20 px: eight fill WINDOW_PIXELS (2^23) exactly, so a window holds eight
    (the next starts at its last frame); the documented counts: 9 frames of 720p, 682 of
    96 x 128 a window."""
    from geocon_torch.epipolar import dpo

    assert dpo.WINDOW_PIXELS == 2 ** 23
    assert dpo._windows([2 ** 20] * 20, _last([20]), 2) == [(0, 8), (7, 15), (14, 20)]
    assert dpo._windows([2 ** 20 + 1] * 9, _last([9]), 2) == [(0, 7), (6, 9)]
    assert dpo._windows([1280 * 720] * 30, _last([30]), 3) == [(0, 9), (8, 17), (16, 25),
                                                                (24, 30)]
    assert dpo._windows([96 * 128] * 1400, _last([1400]), 3) == [(0, 682), (681, 1363),
                                                                  (1362, 1400)]


def test_windows_least_frames_and_clip_ends(monkeypatch):
    """With every frame over the budget a window holds max(min_frames, 2) frames; a window
    ending a clip is followed by one starting at the next clip's first frame."""
    from geocon_torch.epipolar import dpo

    monkeypatch.setattr(dpo, "WINDOW_PIXELS", 1)
    assert dpo._windows([10] * 10, _last([10]), 4) == [(0, 4), (3, 7), (6, 10)]
    assert dpo._windows([10] * 10, _last([5, 5]), 1) == [
        (0, 2), (1, 3), (2, 4), (3, 5), (5, 7), (6, 8), (7, 9), (8, 10)]
    assert dpo._windows([10] * 10, _last([5, 5]), 3) == [(0, 3), (2, 5), (5, 8), (7, 10)]
    monkeypatch.setattr(dpo, "WINDOW_PIXELS", 25)  # two frames and a half
    assert dpo._windows([10] * 7, _last([3, 4]), 2) == [(0, 2), (1, 3), (3, 5), (4, 6),
                                                        (5, 7)]


def _dpo_clips() -> list:
    """Clips of three sizes: 7 frames of 64x96, 2 of 48x80, 1 lone frame, 5 of 56x72."""
    from geocon_torch.synth import render_scene

    a = render_scene("C3", num_frames=7, size=(64, 96), seed=4).frames
    b = render_scene("C2", num_frames=3, size=(48, 80), seed=5).frames
    c = render_scene("C5", num_frames=5, size=(56, 72), seed=6).frames
    return [a, b[:2], b[2:], c]


@pytest.mark.parametrize("workers", [1, 3])
def test_windowed_dpo_equals_one_window_across_sizes(workers, monkeypatch):
    """Windows of 1 px (each window its least frames: workers + 1, at least 2), of exactly
    two 64x96 frames and of 2.5 of them: every per-pair number equals the one-window
    measurement, and each window detects the frames it adds (the first workers + 1)."""
    from geocon_torch.epipolar import dpo

    clips = _dpo_clips()
    cfg = dpo.EpipolarDPOConfig(workers=workers)
    one = dpo.measure_dpo(clips, cfg)
    assert int(one.total_pairs.sum()) == 6 + 1 + 0 + 4
    detected: List[int] = []
    real = dpo._frame_features

    def spy(frames, sift):
        detected.append(sum(int(f.shape[0]) for f in frames))
        return real(frames, sift)

    monkeypatch.setattr(dpo, "_frame_features", spy)
    for px in (1, 2 * 64 * 96, 5 * 64 * 96 // 2):
        monkeypatch.setattr(dpo, "WINDOW_PIXELS", px)
        detected.clear()
        got = dpo.measure_dpo(clips, cfg)
        for field in ("num_kp1", "num_kp2", "num_matches", "epipolar_error", "inlier_rate",
                      "valid", "reason", "pair_clip", "pair_frames", "mean_epipolar_error",
                      "mean_inlier_rate", "valid_pairs", "total_pairs"):
            a, b = getattr(got, field), getattr(one, field)
            assert a.dtype == b.dtype and torch.equal(a, b), (px, field)
        assert sum(detected) == 7 + 2 + 5  # the lone frame is in no pair: not detected
        if px == 1:
            assert detected[0] == max(workers + 1, 2)
    monkeypatch.setattr(dpo, "WINDOW_PIXELS", 1)
    detected.clear()
    dpo.measure_dpo([clips[0]], cfg)  # 7 frames in windows of workers + 1 (at least 2) frames
    assert detected == {1: [2, 1, 1, 1, 1, 1], 3: [4, 3]}[workers]


# ---------------------------------------------------------------------------------- synth

SYN = (24, 40)


def _reference_scene(cat: str, ss: int, **opts) -> tuple:
    """(frames uint8, masks, depth) of ``build_scene`` straight from the raycast primitives:
    pixel-centre hits decide ids and depth; colours are shaded at ``ss`` x the size (focal
    ``ss`` x K's) and box-filtered, clamped to [0, 1] and rounded to uint8."""
    from geocon_torch.synth.raycast import intersect, pixel_rays, shade
    from geocon_torch.synth.scenes import build_scene

    sc = build_scene(cat, num_frames=3, size=SYN, seed=7, supersample=ss, **opts)
    atlas = sc.atlas.to(torch.device("cpu"), torch.float32)
    centre = intersect(pixel_rays(sc.K, SYN, 1), sc.poses, sc.rects)
    hits = centre if ss == 1 else intersect(pixel_rays(sc.K, SYN, ss), sc.poses, sc.rects)
    rgb = shade(hits, sc.rects, atlas, sc.density, float(sc.K[0, 0]) * ss)
    rgb = F.avg_pool2d(rgb, ss) if ss > 1 else rgb
    frames = (rgb.clamp(0, 1) * 255).round().to(torch.uint8)
    obj = torch.where(centre.rect >= 0, sc.rects.object_id[centre.rect.clamp_min(0)], 0)
    ids = torch.arange(1, len(sc.objects) + 1).view(1, -1, 1, 1)
    return frames, obj.unsqueeze(1) == ids, centre.depth


@pytest.mark.parametrize("cat, ss, opts", [("C4", 1, {"num_objects": 2}), ("C4", 2, {}),
                                           ("C3", 3, {"motion": "truck"}),
                                           ("C6", 2, {"stress": "occlusion"})])
def test_scene_equals_the_raycast_primitives(cat, ss, opts):
    """render_scene (in chunks of one and two frames) gives the primitives' frames, masks and
    float32 depth, bit for bit."""
    from geocon_torch.synth import render_scene

    frames, masks, depth = _reference_scene(cat, ss, **opts)
    assert masks.any() or cat != "C4"
    for chunk in (1, 2):
        clip = render_scene(cat, num_frames=3, size=SYN, seed=7, supersample=ss,
                            chunk_frames=chunk, **opts)
        assert torch.equal(clip.frames, frames)
        assert clip.masks.dtype == torch.bool and torch.equal(clip.masks, masks)
        assert clip.depth.dtype == torch.float32 and torch.equal(clip.depth, depth)


@pytest.mark.parametrize("kind", ["rubber_sheet", "nonrigid_object"])
def test_corrupted_scene_masks_follow_the_frames(kind):
    """A corruption is applied to the whole rendered clip, masks included: the frames and masks
    of apply_corruption on the clean clip (rubber_sheet resamples the masks)."""
    from geocon_torch.synth import apply_corruption, render_scene

    clean = render_scene("C4", num_frames=3, size=SYN, seed=8, chunk_frames=1)
    want_f, want_m = apply_corruption(clean.frames, kind, 0.8, seed=8, masks=clean.masks,
                                      return_masks=True)
    got = render_scene("C4", num_frames=3, size=SYN, seed=8, chunk_frames=2, corruption=kind,
                       severity=0.8)
    assert torch.equal(got.frames, want_f) and torch.equal(got.masks, want_m)
    assert (not torch.equal(want_m, clean.masks)) == (kind == "rubber_sheet")


def test_planes_clip_is_the_rounded_frames():
    """render_planes' uint8 frames are round(255 x render_planes_frames), at supersample 1 and
    2, in chunks of one frame."""
    from geocon_torch.synth.planes import build_planes, render_planes, render_planes_frames

    for ss in (1, 2):
        scene = build_planes("pan", num_frames=3, size=SYN, seed=9)
        rgb = render_planes_frames(scene, ss, chunk_frames=3)
        assert rgb.dtype == torch.float32 and rgb.shape == (3, 3) + SYN
        clip = render_planes("pan", num_frames=3, size=SYN, seed=9, supersample=ss,
                             chunk_frames=1)
        assert torch.equal(clip.frames, (rgb * 255).round().to(torch.uint8))
        assert ((rgb * 255) % 1 > 0.5).any()  # some values round up


def test_frames_larger_than_the_chunk_budget(monkeypatch):
    """A frame over the chunk budget renders one frame a chunk (planes and scenes)."""
    from geocon_torch.synth import planes, raycast, render_scene

    whole = planes.render_planes("truck", num_frames=3, size=SYN, seed=1, chunk_frames=3)
    scene = render_scene("C2", num_frames=3, size=SYN, seed=1, chunk_frames=3)
    monkeypatch.setattr(planes, "CHUNK_PIXELS", 7)
    monkeypatch.setattr(raycast, "CHUNK_RAYS", 7)
    assert torch.equal(planes.render_planes("truck", num_frames=3, size=SYN, seed=1).frames,
                       whole.frames)
    assert torch.equal(render_scene("C2", num_frames=3, size=SYN, seed=1).frames, scene.frames)


def test_object_ids_do_not_depend_on_the_rectangle_order():
    """raycast.render of a C4 scene whose rectangles are reversed (a moving object's face is
    rectangle 0): the same object ids and depth as in the built order."""
    from geocon_torch.synth.raycast import Rects, render
    from geocon_torch.synth.scenes import build_scene

    sc = build_scene("C4", num_frames=2, size=SYN, seed=7)
    r = sc.rects
    perm = torch.arange(r.object_id.shape[0] - 1, -1, -1)
    assert int(r.object_id[perm[0]]) == 1  # the last rectangle built is object 1's
    rev = Rects(r.origin[:, perm], r.u[:, perm], r.v[:, perm], r.object_id[perm],
                r.texture[perm], None if r.facing is None else r.facing[:, perm])
    _, obj, depth = render(sc.K, sc.poses, SYN, r, sc.atlas, sc.density)
    _, obj_rev, depth_rev = render(sc.K, sc.poses, SYN, rev, sc.atlas, sc.density[perm])
    assert (obj == 1).any() and torch.equal(obj_rev, obj) and torch.equal(depth_rev, depth)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_render_chunks_equal_one_render(dtype):
    """raycast.render_chunks (chunks of 2 of 5 frames, supersample 2) yields render's rgb, ids
    and depth of its frames, in the asked dtype, bit for bit."""
    from geocon_torch.synth.raycast import render, render_chunks
    from geocon_torch.synth.scenes import build_scene

    sc = build_scene("C5", num_frames=5, size=SYN, seed=2)
    args = (sc.K, sc.poses, SYN, sc.rects, sc.atlas, sc.density)
    rgb, obj, depth = render(*args, supersample=2, dtype=dtype)
    starts = []
    for t0, c_rgb, c_obj, c_depth in render_chunks(*args, supersample=2, dtype=dtype,
                                                   chunk_frames=2):
        starts.append(t0)
        t1 = t0 + c_rgb.shape[0]
        assert c_rgb.dtype == dtype and c_depth.dtype == dtype
        assert torch.equal(c_rgb, rgb[t0:t1]) and torch.equal(c_obj, obj[t0:t1])
        assert torch.equal(c_depth, depth[t0:t1])
    assert starts == [0, 2, 4]


@pytest.mark.parametrize("stream", [False, True])
def test_num_source_frames_never_below_the_frames_decoded(avi_dir, stream):
    """A header announcing 5 of 20 frames, read in part: num_source_frames said 5 while 10 (or
    16) frames were decoded (mutation round 19b's real bug); now at least the decoded count."""
    path = _avi(avi_dir / "n20_5.avi", 20, 5)
    meta = read_clip(path, long_side=48, max_frames=10, stream=stream).meta
    assert (meta["decoded_frames"], meta["num_source_frames"]) == (10, 10)
    meta = read_clip(path, long_side=48, indices=[0, 15], stream=stream).meta
    assert (meta["decoded_frames"], meta["num_source_frames"]) == (16, 16)
    whole = read_clip(path, long_side=48).meta  # complete: the decoded count, as before
    assert (whole["decoded_frames"], whole["num_source_frames"]) == (20, 20)
