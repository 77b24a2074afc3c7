"""Round-9 mutation tests: the stage containers of geocon_torch.types (Clip, Fit,
Correspondences, the packed BlockMasks, RowLayout) and the streamed frame store
(io/framestore.py, on an image folder)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from geocon_torch.errors import ShapeError, VideoReadError
from geocon_torch.io.framestore import ImageFrames, VideoFrames
from geocon_torch.io.resize import working_size
from geocon_torch.types import (BlockMasks, Clip, Correspondences, Fit, RowLayout,
                                concat_correspondences, empty_rows, labels_to_mask_bits,
                                pack_mask_bits, unpack_mask_bits)


def _corr(p, n, val=1.0):
    return Correspondences(torch.full((p, n, 2), val), torch.full((p, n, 2), val),
                           torch.ones(p, n, dtype=torch.bool), torch.full((p, n), val),
                           torch.zeros(p, 2, dtype=torch.long), torch.full((p,), 7),
                           torch.full((p,), 9))


def _fit(p, n, v):
    return Fit("H", torch.full((p, 3, 3), float(v)), torch.ones(p, n, dtype=torch.bool),
               torch.full((p, n), float(v)), torch.ones(p, dtype=torch.bool),
               torch.full((p,), int(v)), torch.full((p,), int(v)), torch.full((p,), float(v)))


def test_subclip_keeps_the_source_index_of_each_position():
    clip = Clip(torch.arange(4, dtype=torch.uint8).view(4, 1, 1, 1).expand(4, 3, 2, 2).clone(),
                12.0, torch.ones(2, 2, dtype=torch.bool), torch.tensor([10, 20, 30, 40]), (2, 2))
    sub = clip.subclip(torch.tensor([2, 0]))
    assert sub.frame_indices.tolist() == [30, 10]
    assert sub.frames[:, 0, 0, 0].tolist() == [2, 0]


def test_fit_assemble_later_parts_win_where_rows_repeat():
    fit = Fit.assemble(3, [(torch.tensor([0, 1]), _fit(2, 4, 1)),
                           (torch.tensor([1, 2]), _fit(2, 4, 2))])
    assert fit.cost.tolist() == [1.0, 2.0, 2.0]
    assert fit.num_inliers.tolist() == [1, 2, 2]


def test_concat_correspondences_pads_to_the_width_asked():
    out = concat_correspondences([_corr(1, 2), _corr(2, 3)], width=5)
    assert out.x1.shape == (3, 5, 2) and out.mask.sum(-1).tolist() == [2, 3, 3]
    assert float(out.x1[0, 2:].abs().sum()) == 0.0


def test_concat_of_one_part_is_a_copy():
    c = _corr(1, 2)
    out = concat_correspondences([c])
    out.x1.zero_()
    assert float(c.x1.sum()) == 4.0


def test_empty_rows_have_no_keypoints_and_keep_the_pairs():
    like = _corr(2, 3)
    like.pairs = torch.tensor([[0, 1], [1, 2]])
    e = empty_rows(like)
    assert e.x1.shape == (2, 0, 2) and e.pairs.tolist() == [[0, 1], [1, 2]]
    assert e.num_kp1.tolist() == [0, 0] and e.num_kp2.tolist() == [0, 0]


def test_packed_bits_of_objects_sharing_a_byte_keep_each_other():
    low = torch.zeros(1, 3, 1, 2, dtype=torch.bool)
    low[0, 0, 0, 0] = low[0, 1, 0, 0] = low[0, 2, 0, 1] = True
    bits = pack_mask_bits(low)
    assert bits.shape == (1, 1, 1, 2) and bits[0, 0, 0].tolist() == [3, 4]
    assert torch.equal(unpack_mask_bits(bits, torch.arange(3)), low)


def test_label_nine_is_object_eight_in_the_second_byte_only():
    labels = torch.tensor([[[9, 8, 1, 0]]])
    bits = labels_to_mask_bits(labels, 9)
    assert bits.shape == (1, 2, 1, 4)
    assert bits[0, 0, 0].tolist() == [0, 128, 1, 0] and bits[0, 1, 0].tolist() == [1, 0, 0, 0]


def _block(t=2, k=2):
    low = torch.zeros(t, k, 2, 2, dtype=torch.bool)
    low[:, 0, 0, 0] = True  # object 0: top-left cell
    low[:, 1] = True  # object 1: every cell
    content = torch.ones(3, 4, dtype=torch.bool)
    content[:, 0] = False  # a pillarbox column
    return BlockMasks(low, 2, (3, 4), content, chunk=1), low


def test_block_masks_expand_cells_inside_the_content_mask():
    bm, _ = _block()
    full = bm.full()
    assert full.shape == (2, 2, 3, 4)
    assert full[0, 0].tolist() == [[False, True, False, False], [False, True, False, False],
                                   [False, False, False, False]]
    assert int(full[0, 1].sum()) == 9  # 12 pixels less the 3 of the bar


def test_block_masks_sum_over_every_dim_is_exact():
    bm, _ = _block()
    assert bm.sum((0, 1, 2, 3)).item() == 2 * (2 + 9)
    assert bm.sum((-1, -2)).tolist() == [[2, 9], [2, 9]]
    assert bm.sum((1, 2, 3)).tolist() == [11, 11]


def test_block_masks_to_bool_stays_lazy_and_object_index_drops_the_axis():
    bm, _ = _block()
    assert isinstance(bm.to(torch.bool), BlockMasks) and isinstance(bm.to("cpu"), BlockMasks)
    assert bm.to(torch.uint8).dtype == torch.uint8 and bm.to(torch.uint8).shape == (2, 2, 3, 4)
    one = bm[:, 1]
    assert isinstance(one, torch.Tensor) and one.shape == (2, 3, 4) and int(one.sum()) == 18
    sel = bm[:, [1]]
    assert isinstance(sel, BlockMasks) and sel.shape == (2, 1, 3, 4)


def test_row_layout_pads_each_row_with_zeros_not_the_next_row():
    lay = RowLayout([(2, 2)], [([(0, 0, 2)], 3)], "cpu")
    (out,) = lay.gather([torch.tensor([[1.0, 2.0], [3.0, 4.0]])])
    assert out.tolist() == [[1.0, 2.0, 0.0], [3.0, 4.0, 0.0]]


# ------------------------------------------------------------------ io/framestore.py

def _folder(tmp_path, t=4, h=4, w=6):
    files = []
    for i in range(t):
        f = tmp_path / f"{i}.png"
        Image.fromarray(np.full((h, w, 3), 10 * (i + 1), np.uint8)).save(f)
        files.append(f)
    return files


def _store(tmp_path, **kw):
    files = _folder(tmp_path)
    return ImageFrames(tmp_path, files, list(range(4)), working_size(4, 6, None), **kw)


def test_image_store_keeps_cache_frames_frames(tmp_path):
    s = _store(tmp_path, cache_frames=2)
    s[[0, 1]]
    assert s.reads == 2 and list(s._cache) == [0, 1]
    assert int(s[0][0, 0, 0]) == 10 and s.reads == 2  # still cached
    s[2]
    assert list(s._cache) == [0, 2] and s.reads == 3


def test_image_store_index_minus_t_is_the_first_frame(tmp_path):
    s = _store(tmp_path)
    assert int(s[-4][0, 0, 0]) == 10 and int(s[-1][0, 0, 0]) == 40
    with pytest.raises(ShapeError, match="frame -5 out of range"):
        s[-5]


def test_image_store_bool_masks_select_frames(tmp_path):
    s = _store(tmp_path)
    sel = s[torch.tensor([False, True, False, True])]
    assert sel[:, 0, 0, 0].tolist() == [20, 40]
    sel = s[np.array([True, False, False, True])]
    assert sel[:, 0, 0, 0].tolist() == [10, 40]


def test_image_store_refuses_a_file_whose_size_changed(tmp_path):
    s = _store(tmp_path)
    Image.fromarray(np.zeros((5, 6, 3), np.uint8)).save(tmp_path / "2.png")
    with pytest.raises(VideoReadError, match="image size 6x5 differs from the 6x4"):
        s[2]


def test_video_store_reads_frames_in_order_on_one_decoder(tmp_path):
    """Frames asked one after the other (no cache) continue the open decoder: one open; a
    frame behind it re-opens the file."""
    av = pytest.importorskip("av")
    path = tmp_path / "v.mp4"
    with av.open(str(path), "w") as c:
        st = c.add_stream("libx264", rate=24)
        st.height, st.width, st.pix_fmt = 16, 24, "yuv420p"
        for i in range(4):
            img = np.full((16, 24, 3), 40 * (i + 1), np.uint8)
            for packet in st.encode(av.VideoFrame.from_ndarray(img, format="rgb24")):
                c.mux(packet)
        for packet in st.encode():
            c.mux(packet)
    s = VideoFrames(path, [0, 1, 2, 3], working_size(16, 24, None), cache_frames=0)
    means = [float(s[i].float().mean()) for i in range(4)]
    assert s.opens == 1
    assert means == sorted(means) and means[3] - means[0] > 100
    s[1]
    assert s.opens == 2
