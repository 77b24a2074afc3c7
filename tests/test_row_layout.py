"""RowLayout (the one-gather cut / pad / stack of rows of several sources) and the batched
tensor reads (clips_from_tensors): equal to the per-part Python loops they replace."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.errors import ShapeError
from geocon_torch.io import clip_from_tensor, clips_from_tensors
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
