"""RowLayout (the one-gather cut / pad / stack of rows of several sources) and the batched
tensor reads (clips_from_tensors, tensor_frames) and keypoint padding (pad_keypoints): equal to
the per-part Python loops they replace."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.errors import ShapeError
from geocon_torch.features.base import pad_keypoints
from geocon_torch.io import clip_from_tensor, clips_from_tensor, clips_from_tensors, tensor_frames
from geocon_torch.types import Fit, RowLayout, concat_fits, pad_fit, pad_points


def _reference(sources, runs, n):
    rows = []
    for i, first, count in runs:
        if i < 0:
            tail = tuple(sources[0].shape[2:])
            rows.append(sources[0].new_zeros((count, n) + tail))
            continue
        part = sources[i][first:first + count, :n]
        rows.append(pad_points([part], n, copy=True))
    return torch.cat(rows)


@pytest.mark.parametrize("tail", [(), (2,)])
def test_row_layout_equals_cut_pad_and_concat(tail):
    g = torch.Generator().manual_seed(0)
    shapes = [(5, 7), (3, 0), (4, 11)]
    sources = [torch.randn((m, w) + tail, generator=g) for m, w in shapes]
    outputs = [([(0, 1, 3), (-1, 0, 2), (2, 0, 4)], 9),   # wider than source 0: padded
               ([(2, 1, 2), (1, 0, 3)], 5),               # narrower than source 2: cut
               ([(1, 0, 3)], 0)]                           # no points at all
    lay = RowLayout(shapes, outputs, "cpu")
    got = lay.gather(sources)
    for out, (runs, n) in zip(got, outputs):
        ref = _reference(sources, runs, n)
        assert out.shape == ref.shape and torch.equal(out, ref)
        assert out.is_contiguous()
    assert [tuple(t.shape[:2]) for t in got] == [(9, 9), (5, 5), (3, 0)]
    # the row of every gathered element: output rows counted over all outputs
    assert lay.row.tolist()[:9] == [0] * 9 and lay.row.tolist()[-5:] == [13] * 5
    masks = lay.gather([s[..., 0] > 0 if tail else s > 0 for s in sources])
    assert masks[0].dtype == torch.bool and not bool(masks[0][3:5].any())
    with pytest.raises(ShapeError):
        lay.flat(sources[:2])


def test_concat_fits_equals_assembled_rows():
    g = torch.Generator().manual_seed(1)

    def fit(r, n):
        return Fit("F", torch.randn(r, 3, 3, generator=g), torch.rand(r, n, generator=g) > 0.5,
                   torch.rand(r, n, generator=g), torch.ones(r, dtype=torch.bool),
                   torch.arange(r), torch.full((r,), 3), torch.rand(r, generator=g))

    parts = [fit(2, 4), fit(3, 6)]
    got = concat_fits(parts, 6)
    ref = Fit.assemble(5, [(torch.arange(0, 2), pad_fit(parts[0], 6)),
                          (torch.arange(2, 5), parts[1])])
    assert torch.equal(got.inliers[:2, 4:], torch.zeros(2, 2, dtype=torch.bool))
    for name in ("model", "inliers", "residuals", "valid", "num_inliers", "iterations", "cost"):
        assert torch.equal(getattr(got, name), getattr(ref, name))
    assert torch.equal(got.residuals[2:], parts[1].residuals)
    assert torch.equal(got.inliers[:2, :4], parts[0].inliers)


def test_clips_from_tensors_equal_each_clip_read_alone():
    g = torch.Generator().manual_seed(2)
    boxed = torch.randint(0, 256, (4, 3, 40, 64), dtype=torch.uint8, generator=g)
    boxed[:, :, :6] = 0  # a letterbox: 6 dark rows at the top and the bottom (2 of 20 after the
    # resize to 20 x 32: the third one blends with the content)
    boxed[:, :, -6:] = 0
    videos = [torch.randint(0, 256, (4, 3, 40, 64), dtype=torch.uint8, generator=g), boxed,
              torch.rand(3, 1, 30, 48, generator=g), boxed.clone()]
    got = clips_from_tensors(videos, names=["a", "b", "c", "d"], long_side=32)
    for v, clip, name in zip(videos, got, "abcd"):
        ref = clip_from_tensor(v, name=name, long_side=32)
        assert torch.equal(clip.frames, ref.frames)
        assert torch.equal(clip.content_mask, ref.content_mask)
        assert torch.equal(clip.frame_indices, ref.frame_indices)
        assert clip.meta == ref.meta and clip.name == name and clip.fps == ref.fps
    assert int(got[1].content_mask.sum()) == 16 * 32 and bool(got[0].content_mask.all())
    with pytest.raises(ShapeError):
        clips_from_tensors([videos[0], torch.zeros(2, 4, 3, 8, 8, dtype=torch.uint8)])


def test_tensor_frames_equal_the_clips_frames():
    """io.tensor_frames: the frames clips_from_tensor gives each clip, as one batch (uint8,
    float, gray, an odd side, explicit indices)."""
    g = torch.Generator().manual_seed(3)
    for videos, kw in ((torch.randint(0, 256, (3, 5, 3, 21, 30), dtype=torch.uint8,
                                      generator=g), {}),
                       (torch.rand(2, 6, 1, 20, 33, generator=g), {"indices": [0, 2, 5]}),
                       (torch.rand(2, 4, 3, 40, 64, generator=g), {"long_side": 32})):
        got = tensor_frames(videos, **kw)
        clips = clips_from_tensor(videos, **kw)
        assert got.dtype == torch.uint8 and got.shape[0] == len(clips)
        for b, clip in enumerate(clips):
            assert torch.equal(got[b], clip.frames)
    assert tuple(tensor_frames(videos, long_side=32).shape) == (2, 4, 3, 20, 32)


def test_pad_keypoints_equals_the_per_frame_copy():
    """pad_keypoints scatters every field in one op: equal to copying frame by frame (empty
    frames, float or byte descriptors, extras, dtype casts)."""
    g = torch.Generator().manual_seed(4)
    counts = [3, 0, 5, 1]
    xys = [torch.randn(c, 2, dtype=torch.float64, generator=g) for c in counts]
    descs = [torch.randint(0, 256, (c, 8), generator=g).to(torch.uint8) for c in counts]
    descs[1] = torch.zeros(0, 8)  # an empty frame as float
    scores = [torch.rand(c, generator=g) for c in counts]
    extras = {"octave": [torch.randint(-1, 4, (c,), generator=g) for c in counts]}
    kps = pad_keypoints(xys, descs, scores, 8, torch.device("cpu"), torch.float32, extras,
                        desc_dtype=torch.uint8)
    assert kps.xy.shape == (4, 5, 2) and kps.descriptors.dtype == torch.uint8
    assert kps.mask.sum(1).tolist() == counts
    for i, c in enumerate(counts):
        assert torch.equal(kps.xy[i, :c], xys[i].float()) and not kps.xy[i, c:].any()
        assert torch.equal(kps.descriptors[i, :c], descs[i].to(torch.uint8))
        assert torch.equal(kps.scores[i, :c], scores[i])
        assert torch.equal(kps.extra["octave"][i, :c], extras["octave"][i].float())
        assert not kps.descriptors[i, c:].any() and not kps.extra["octave"][i, c:].any()
    empty = pad_keypoints([], [], [], 8, torch.device("cpu"))
    assert empty.xy.shape == (0, 0, 2) and empty.mask.shape == (0, 0)
