"""Memory at a small working size (audit s22 F6): at ``io.long_side`` <= 320 px the motion
segmentation runs at the working size (factor 1). It held the clip's gray frames as one
(T, 1, H, W) float32 tensor and returned the objects as (T, K, H, W) bool masks (K bytes a
pixel, built through a (T, 1, H, W) int64 compare), so the peak grew ~1.9 MB a frame at
320 x 240 (800 frames: 2.4 GB, above the 1024-px figure). The gray frames are now computed per
chunk of frames and the objects kept as packed bits (one byte a pixel for up to 8 objects), as
at larger working sizes; every result is unchanged."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any, List, Tuple

import pytest
import torch
from helpers import REPO_ROOT, identity_fits

from geocon_torch.config import GeoConConfig
from geocon_torch.io import write_video
from geocon_torch.synth import grounded_clip
from geocon_torch.types import BlockMasks, Clip, Fit

_SIZE = (96, 128)  # (h, w) working px: segmented at the working size (factor 1)
#: two patches of matches moving against a static background: (x0, y0) px and motion (dx, dy)
_MOVERS = (((10.0, 10.0), (6.0, 0.0)), ((90.0, 55.0), (0.0, 6.0)))


def _movers_clip(t: int = 6, n: int = 64) -> Tuple[Clip, torch.Tensor, torch.Tensor,
                                                  torch.Tensor, torch.Tensor, Tuple[Fit, Fit]]:
    """A static noise clip of ``_SIZE`` (no photometric change), its adjacent pairs with
    identity H fits and per pair ``n`` matches: 16 in each 20 x 20 px patch of ``_MOVERS``
    displaced by its motion, the rest exact background matches."""
    h, w = _SIZE
    g = torch.Generator().manual_seed(0)
    frame = (torch.rand(h, w, generator=g) * 255).round().to(torch.uint8).expand(3, h, w)
    clip = Clip(frames=frame.expand(t, 3, h, w).clone(), fps=10.0,
                content_mask=torch.ones(h, w, dtype=torch.bool), frame_indices=torch.arange(t),
                source_size=_SIZE, scale=1.0)
    pairs = torch.tensor([(k, k + 1) for k in range(t - 1)])
    p = pairs.shape[0]
    x1 = torch.stack([torch.rand(p, n, generator=g) * (w - 1),
                      torch.rand(p, n, generator=g) * (h - 1)], -1)
    x2 = x1.clone()
    for j, (origin, motion) in enumerate(_MOVERS):
        pts = torch.tensor(origin) + torch.rand(p, 16, 2, generator=g) * 20
        x1[:, 16 * j:16 * (j + 1)] = pts
        x2[:, 16 * j:16 * (j + 1)] = pts + torch.tensor(motion)
    mask = torch.ones(p, n, dtype=torch.bool)
    return clip, pairs, x1, x2, mask, identity_fits(mask)


def _held_bytes(x: Any) -> int:
    """Bytes of pixel data ``x`` holds: a tensor's storage, a BlockMasks' packed bits, 0 for
    anything that computes its frames on demand."""
    if isinstance(x, BlockMasks):
        return int(x.bits.numel()) * int(x.bits.element_size())
    if isinstance(x, torch.Tensor):
        return int(x.untyped_storage().nbytes())
    return 0


def test_objects_at_working_size_are_packed_bits():
    """Two movers segmented at the working size: the objects take one byte a pixel (8 objects
    a byte), not K bytes, and are the two patches (disjoint; their seed discs, closed)."""
    from geocon_torch.segment.seeds import motion_masks

    clip, pairs, x1, x2, mask, fits = _movers_clip()
    masks, ev = motion_masks(clip, pairs, x1, x2, mask, fits, GeoConConfig(), "H")
    t, (h, w) = clip.num_frames, _SIZE
    assert ev["objects"] == 2 and ev["object_seeds"] == [160, 160]
    assert tuple(masks.shape) == (t, 2, h, w)
    assert _held_bytes(masks) == t * h * w  # before: t * 2 * h * w (one bool per object)
    area = masks.sum((2, 3))
    assert area.tolist() == [[1193, 1051], [1322, 1206], [1489, 1213], [1273, 1388],
                             [1485, 1325], [1091, 1106]]
    dense = masks[0:t].full() if isinstance(masks, BlockMasks) else masks
    assert not bool((dense[:, 0] & dense[:, 1]).any())
    for k, ((x0, y0), _) in enumerate(_MOVERS):  # each object covers its own patch
        assert bool(dense[:, k, int(y0) + 10, int(x0) + 10].all())


def test_segmentation_holds_no_float_copy_of_the_clip(monkeypatch):
    """The gray frames the segmentation is given hold no (T, 1, H, W) float copy of the clip:
    they are computed per chunk of frames, bit-identical to the clip's luminance."""
    import geocon_torch.segment.seeds as seeds

    given: List[Any] = []
    real = seeds.segment_joined

    def spy(grays, *args, **kw):
        given.extend(grays)
        return real(grays, *args, **kw)

    monkeypatch.setattr(seeds, "segment_joined", spy)
    clip, pairs, x1, x2, mask, fits = _movers_clip(t=9)
    _, ev = seeds.motion_masks(clip, pairs, x1, x2, mask, fits, GeoConConfig(), "H")
    assert ev["objects"] == 2 and len(given) == 1
    gray = given[0]
    t, (h, w) = clip.num_frames, _SIZE
    assert tuple(gray.shape) == (t, 1, h, w)
    assert _held_bytes(gray) < t * h * w * 4  # before: exactly t * h * w * 4 bytes
    assert torch.equal(gray[2:7], clip.gray()[2:7])


@pytest.mark.parametrize("factor", [1, 2, 3])
def test_gray_chunks_equal_the_whole_clip(factor):
    """Any slice of the chunked gray frames equals the same frames of the clip's pooled gray
    (every frame on its own: the chunking changes no bit), at the working size or pooled."""
    from geocon_torch.segment.motion import ClipGray, pooled_gray

    g = torch.Generator().manual_seed(1)
    frames = (torch.rand(7, 3, 25, 34, generator=g) * 255).round().to(torch.uint8)
    clip = Clip(frames=frames, fps=10.0, content_mask=torch.ones(25, 34, dtype=torch.bool),
                frame_indices=torch.arange(7), source_size=(25, 34))
    whole = pooled_gray(clip, factor)
    lazy = ClipGray(clip, factor, torch.device("cpu"))
    assert tuple(lazy.shape) == tuple(whole.shape)
    for a, b in ((0, 7), (0, 1), (2, 5), (6, 7)):
        assert torch.equal(lazy[a:b], whole[a:b]), (factor, a, b)


def test_background_lookups_take_the_rows_of_one_chunk_at_a_time(monkeypatch):
    """The matches outside the objects are looked up one chunk of frames at a time with only
    the rows whose pair touches the chunk (not every row of the clip per chunk: temporaries
    that grew with the clip), with the same result for dense and packed masks."""
    import geocon_torch.segment.background as sb
    from geocon_torch.segment.background import background_keep_chunked
    g = torch.Generator().manual_seed(2)
    t, h, w, n = 40, 30, 40, 25
    content = torch.ones(h, w, dtype=torch.bool)
    content[:2] = False
    lazy = BlockMasks(torch.rand(t, 2, 8, 10, generator=g) > 0.93, 4, (h, w), content)
    host = [[k, k + 1] for k in range(t - 1)] + [[0, 39], [5, 30], [17, 18], [33, 2]]
    pairs = torch.tensor(host)
    x1 = torch.rand(len(host), n, 2, generator=g) * torch.tensor([w + 4.0, h + 4.0]) - 2
    x2 = torch.rand(len(host), n, 2, generator=g) * torch.tensor([w + 4.0, h + 4.0]) - 2
    want = background_keep_chunked(content, lazy.full(), 2, x1, x2, pairs)
    assert int(want.sum()) == 264  # of 43 x 25 matches
    rows: List[int] = []
    lookup = sb.mask_at_pixels

    def spy(mask, points, frames):
        rows.append(int(points.shape[0]))
        return lookup(mask, points, frames)

    monkeypatch.setattr(sb, "mask_at_pixels", spy)
    for objects in (lazy, lazy.full()):
        rows.clear()
        got = background_keep_chunked(content, objects, 2, x1, x2, pairs, 16, host)
        assert torch.equal(got, want)
        assert rows == [19, 19, 10]  # of 43 rows: frames 0-15, 16-31, 32-39
    rows.clear()  # without the host pairs: every row in every chunk
    assert torch.equal(background_keep_chunked(content, lazy, 2, x1, x2, pairs, 16), want)
    assert rows == [43, 43, 43]
    # no chunk touched by any row (frames past the pairs): nothing looked up, all kept
    rows.clear()
    assert bool(background_keep_chunked(content, lazy[:4], 2, x1[:0], x2[:0], pairs[:0], 2,
                                        []).shape == (0, n)) and rows == []


_PEAK = r"""
import sys
import geocon_torch.sections.fits as fits
from geocon_torch import score_clip
fits.FIT_CHUNK_ROWS = 64  # identical fits; both lengths then fill whole fit chunks
# at most 500 keypoints a frame (a real 320 x 240 clip finds ~470 matches a pair): the
# matches, which do grow with the clip, stay a small part of the growth measured
res = score_clip(sys.argv[1], config={"io": {"long_side": 320},
                                      "features": {"max_keypoints": 500}},
                 preset="background", device="cpu", progress=False)
assert res.status == "ok", res.reason
with open("/proc/self/status") as f:
    print([int(l.split()[1]) / 1024.0 for l in f if l.startswith("VmHWM:")][0])
print(res.background["segment"]["objects"])
"""


@pytest.mark.slow
def test_peak_memory_at_320_px_does_not_hold_the_clip(tmp_path: Path):
    """Peak RSS (VmHWM of a fresh process) of score_clip at io.long_side 320 on a 320 x 240
    clip with a moving object (streamed: more than io.stream_min_frames frames): 320 frames
    need less than 1 MB a frame more than 80 (measured 0.4-0.55 MB: the matches, their
    seeds, the bool motion map, the packed masks and the allocator's share; before the fix
    1.4-1.7 MB: the float gray clip and the (T, K, H, W) bool objects came on top)."""
    base = grounded_clip("C4", num_frames=40, size=(240, 320)).frames
    lengths = (80, 320)
    peaks, objects = [], []
    for n in lengths:
        reps = -(-n // (2 * base.shape[0]))
        frames = torch.cat([base, base.flip(0)] * reps)[:n]
        path = write_video(tmp_path / f"clip{n}.mp4", frames, fps=24)
        out = subprocess.run([sys.executable, "-c", _PEAK, str(path)], capture_output=True,
                             text=True, check=True, cwd=REPO_ROOT,
                             env=dict(os.environ, PYTHONPATH=str(REPO_ROOT)))
        lines = out.stdout.strip().splitlines()
        peaks.append(float(lines[-2]))
        objects.append(int(lines[-1]))
    assert min(objects) >= 1, objects  # the masks path is exercised
    per_frame = (peaks[1] - peaks[0]) / (lengths[1] - lengths[0])
    assert per_frame < 1.0, (peaks, per_frame)
