"""Round-9 mutation tests: mask files (segment/files.py) and the SAM-2 adapter's plumbing
(segment/sam2.py, with a scripted stand-in predictor; no model is built)."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import geocon_torch.segment.files as files_mod
from geocon_torch.config import SegmentConfig
from geocon_torch.errors import CheckpointError, InputError, ShapeError
from geocon_torch.segment.files import load_masks
from geocon_torch.segment.sam2 import load_sam2_predictor, sam2_masks
from geocon_torch.types import Clip


def _png(path, arr):
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.asarray(arr, dtype=np.uint8)).save(path)


# ------------------------------------------------------------------ segment/files.py

def test_object_subfolders_read_0_1_pngs_as_objects_in_natural_order(tmp_path):
    """Sub-folder PNGs holding 0 / 1 (not 0 / 255) are objects (non-zero = object), and the
    sub-folders are objects in natural order ("2" before "10")."""
    a = np.zeros((4, 6), np.uint8)
    a[0, 0] = 1  # object "2": one pixel
    b = np.zeros((4, 6), np.uint8)
    b[1:3, 2:5] = 1  # object "10": six pixels
    for t in range(2):
        _png(tmp_path / "2" / f"{t}.png", a)
        _png(tmp_path / "10" / f"{t}.png", b)
    m = load_masks(tmp_path)
    assert m.shape == (2, 2, 4, 6) and m.dtype == torch.bool
    assert m[:, 0].sum((-1, -2)).tolist() == [1, 1]  # "2" first
    assert m[:, 1].sum((-1, -2)).tolist() == [6, 6]
    assert bool(m[0, 0, 0, 0]) and bool(m[1, 1, 2, 4])


def test_colour_label_objects_are_ordered_by_their_rgb_value(tmp_path):
    """A colour label PNG: one object per colour, in the order of the colour packed as
    (R << 32) | (G << 16) | B: pure blue (0, 0, 255) before pure red (255, 0, 0)."""
    img = np.zeros((4, 6, 3), np.uint8)
    img[0, :3] = (255, 0, 0)  # red: 3 px
    img[2:4, 4:6] = (0, 0, 255)  # blue: 4 px
    for t in range(2):
        _png(tmp_path / f"{t}.png", img)
    m = load_masks(tmp_path)
    assert m.shape == (2, 2, 4, 6)
    assert m[0, 0].sum().item() == 4 and bool(m[0, 0, 3, 5])  # blue
    assert m[0, 1].sum().item() == 3 and bool(m[0, 1, 0, 0])  # red


def test_mask_images_of_different_sizes_are_an_input_error(tmp_path):
    _png(tmp_path / "0.png", np.zeros((4, 6)))
    _png(tmp_path / "1.png", np.zeros((4, 6)))
    _png(tmp_path / "2.png", np.zeros((5, 6)))
    with pytest.raises(InputError, match="differ in size"):
        load_masks(tmp_path)


def test_an_integer_map_of_at_most_1_is_one_binary_object():
    """An integer (T, H, W) map whose maximum is <= 1 is binary: one object of its positive
    pixels, even when it is all zero (K = 1, empty) or holds negative values (not objects: a
    label map of labels -1 and 1 would make two)."""
    m = load_masks(np.zeros((3, 4, 5), np.int32))
    assert m.shape == (3, 1, 4, 5) and int(m.sum()) == 0
    m = load_masks(np.array([[[0, 1], [1, 1]]], np.int64))
    assert m.shape == (1, 1, 2, 2) and int(m.sum()) == 3
    m = load_masks(np.array([[[-1, 0], [1, 1]]], np.int16))
    assert m.shape == (1, 1, 2, 2) and m[0, 0].tolist() == [[False, False], [True, True]]


def test_an_npz_at_exactly_four_times_the_source_pixels_loads(tmp_path):
    """MASK_PIXELS_PER_SOURCE_PIXEL is inclusive: (4, 6) frames for a (2, 3) source load; one
    more column is refused from the header."""
    ok = tmp_path / "ok.npz"
    np.savez(ok, masks=np.ones((2, 4, 6), bool))
    m = load_masks(ok, source_size=(2, 3))
    assert m.shape == (2, 1, 4, 6) and int(m.sum()) == 48
    big = tmp_path / "big.npz"
    np.savez(big, masks=np.ones((2, 4, 7), bool))
    with pytest.raises(InputError, match="more than 4 x the 6 px"):
        load_masks(big, source_size=(2, 3))


def test_the_header_limit_counts_a_working_size_larger_than_the_source(tmp_path):
    """The limit is 4 x max(source pixels, working pixels): (8, 8) masks for a (2, 2) source
    load when the working size is (8, 8)."""
    f = tmp_path / "m.npz"
    np.savez(f, masks=np.ones((2, 8, 8), bool))
    m = load_masks(f, size=(8, 8), source_size=(2, 2), num_frames=2)
    assert m.shape == (2, 1, 8, 8) and int(m.sum()) == 128


def test_an_npz_with_several_arrays_and_no_masks_key_is_refused(tmp_path):
    f = tmp_path / "two.npz"
    np.savez(f, a=np.ones((2, 4, 4), bool), b=np.zeros((2, 4, 4), bool))
    with pytest.raises(InputError, match="no 'masks' array"):
        load_masks(f)
    one = tmp_path / "one.npz"
    np.savez(one, whatever=np.ones((2, 4, 4), bool))  # the only array: taken
    assert int(load_masks(one).sum()) == 32


def test_downsizing_picks_pixel_centres():
    """(4, 4) -> (2, 2) nearest with pixel centres aligned takes rows / columns 1 and 3 (not
    0 and 2)."""
    a = np.zeros((1, 4, 4), bool)
    a[0, 1, 1] = True
    a[0, 3, 3] = True
    m = load_masks(a, size=(2, 2))
    assert m[0, 0].tolist() == [[True, False], [False, True]]
    b = np.zeros((1, 4, 4), bool)
    b[0, 0, 0] = b[0, 2, 2] = True
    assert int(load_masks(b, size=(2, 2)).sum()) == 0


def test_negative_frame_indices_are_a_shape_error():
    with pytest.raises(ShapeError, match="masks have 3 frames but the clip has 2"):
        load_masks(np.ones((3, 4, 4), bool), num_frames=2, frame_indices=torch.tensor([-1, 0]))


def test_chunked_npz_reads_the_last_kept_frame(tmp_path, monkeypatch):
    """Read one plane per chunk, the last kept frame is a chunk's first plane: it is read
    (not left as uninitialised memory)."""
    monkeypatch.setattr(files_mod, "MASK_CHUNK_BYTES", 1)
    arr = np.zeros((4, 4, 6), bool)
    for t in range(4):
        arr[t, t, :t + 2] = True
    f = tmp_path / "m.npz"
    np.savez(f, masks=arr)
    m = load_masks(f, num_frames=2, frame_indices=torch.tensor([0, 2]))
    assert m.shape == (2, 1, 4, 6)
    assert torch.equal(m[:, 0], torch.from_numpy(arr[[0, 2]]))


# ------------------------------------------------------------------ segment/sam2.py

class _Pred:
    """A stand-in SAM-2 predictor: object ``oid`` covers column ``oid`` of every frame the
    forward pass visits (logit +1 there, ``zero`` elsewhere); the reverse pass gives logit
    ``reverse`` everywhere. Records the propagation calls."""

    device = torch.device("cpu")

    def __init__(self, t, h, w, zero=-1.0, reverse=-1.0):
        self.t, self.h, self.w, self.zero, self.reverse = t, h, w, zero, reverse
        self.objs, self.calls = [], []

    def init_state(self, video_path):
        return {}

    def add_new_points_or_box(self, state, frame_idx, obj_id, **kw):
        self.objs.append((obj_id, frame_idx))

    def propagate_in_video(self, state, start_frame_idx=None, reverse=False):
        self.calls.append((start_frame_idx, reverse))
        ids = list(dict.fromkeys(o for o, _ in self.objs))  # in the order first prompted
        start = min(f for _, f in self.objs) if start_frame_idx is None else start_frame_idx
        for f in (range(start, -1, -1) if reverse else range(start, self.t)):
            logits = torch.full((len(ids), 1, self.h, self.w), float(self.zero))
            if reverse:
                logits.fill_(float(self.reverse))
            else:
                for j, oid in enumerate(ids):
                    logits[j, 0, :, oid] = 1.0
            yield f, ids, logits


def _clip(t, h=4, w=8):
    return Clip(torch.zeros(t, 3, h, w, dtype=torch.uint8), 24.0,
                torch.ones(h, w, dtype=torch.bool), torch.arange(t), (h, w))


def test_sam2_masks_are_logits_strictly_above_zero():
    pred = _Pred(2, 4, 8, zero=0.0)
    m = sam2_masks(_clip(2), SegmentConfig(), predictor=pred,
                   prompts=[{"id": 3, "frame": 0, "box": [0, 0, 2, 2]}])
    assert m.shape == (2, 1, 4, 8)
    assert m.sum((-1, -2)).tolist() == [[4], [4]] and bool(m[:, 0, :, 3].all())


def test_sam2_channels_follow_sorted_ids_not_prompt_order():
    pred = _Pred(2, 4, 8)
    m = sam2_masks(_clip(2), SegmentConfig(), predictor=pred,
                   prompts=[{"id": 5, "frame": 0, "box": [0, 0, 2, 2]},
                            {"id": 2, "frame": 0, "box": [0, 0, 2, 2]}])
    assert bool(m[:, 0, :, 2].all()) and int(m[:, 0].sum()) == 8  # id 2
    assert bool(m[:, 1, :, 5].all()) and int(m[:, 1].sum()) == 8  # id 5


def test_sam2_an_object_prompted_at_frame_1_is_tracked_back_to_frame_0():
    pred = _Pred(3, 4, 8, reverse=1.0)
    m = sam2_masks(_clip(3), SegmentConfig(), predictor=pred,
                   prompts=[{"id": 1, "frame": 1, "box": [0, 0, 2, 2]}])
    assert pred.calls == [(None, False), (1, True)]
    assert m[:, 0].sum((-1, -2)).tolist() == [32, 4, 4]  # frame 0: the reverse pass


def test_sam2_the_reverse_pass_keeps_the_prompt_frame_and_after():
    """The backwards pass writes only frames before each object's first prompt: the prompt
    frame keeps the forward pass' mask."""
    pred = _Pred(4, 4, 8, reverse=-1.0)
    m = sam2_masks(_clip(4), SegmentConfig(), predictor=pred,
                   prompts=[{"id": 1, "frame": 2, "box": [0, 0, 2, 2]}])
    assert pred.calls == [(None, False), (2, True)]
    assert m[:, 0].sum((-1, -2)).tolist() == [0, 0, 4, 4]


def test_sam2_an_object_prompted_twice_starts_at_its_earliest_prompt():
    """Id 1 prompted on frames 2 and 0: its first prompt is frame 0, so no reverse pass
    rewrites frames 0-1."""
    pred = _Pred(3, 4, 8, reverse=-1.0)
    m = sam2_masks(_clip(3), SegmentConfig(), predictor=pred,
                   prompts=[{"id": 1, "frame": 2, "box": [0, 0, 2, 2]},
                            {"id": 1, "frame": 0, "points": [[1, 1]]}])
    assert pred.calls == [(None, False)]
    assert m.shape == (3, 1, 4, 8) and m[:, 0].sum((-1, -2)).tolist() == [4, 4, 4]


def test_a_checkpoint_without_a_model_entry_is_refused_before_building(tmp_path):
    pytest.importorskip("sam2")
    ck = tmp_path / "bare.pt"
    torch.save({"weight": torch.zeros(1)}, ck)
    with pytest.raises(CheckpointError, match="holds no 'model' state dict"):
        load_sam2_predictor(str(ck), "configs/sam2.1/sam2.1_hiera_t.yaml")


def test_a_config_target_must_be_a_class_not_a_function_of_sam2():
    """A ``_target_`` naming a sam2 *function* (hydra would call it with the config's values)
    is refused like any non-class; a sam2 model class passes."""
    pytest.importorskip("sam2")
    pytest.importorskip("hydra")
    from geocon_torch.segment.sam2 import _target_problem

    assert _target_problem("sam2.modeling.sam2_utils.get_1d_sine_pe") == (
        "not a class of the sam2 package (it is the function "
        "sam2.modeling.sam2_utils.get_1d_sine_pe)")
    assert _target_problem("sam2.modeling.sam2_utils.MLP") is None
