"""Masks files from elsewhere (a leaderboard manifest's masks_path): a label map with very many
labels, or a small .npz declaring a big array, is that clip's InputError / ShapeError, raised
before the masks are expanded or the array is read (audit s20 M2, M3)."""
import io
import tracemalloc
import zipfile

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from geocon_torch.errors import InputError, ShapeError
from geocon_torch.segment import files
from geocon_torch.segment.files import load_masks


def _npz_declaring(path, shape, dtype="bool", data=b"\0" * 64, key="masks", fortran=False):
    """An .npz whose member ``key`` has a .npy header declaring ``shape`` / ``dtype`` followed
    by only ``data``: what a reader takes from the header alone, without the (many GB of)
    data a real bomb would inflate to."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {
        "descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": fortran,
        "shape": tuple(shape)})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(f"{key}.npy", head.getvalue() + data)
    return path


def _labels(t, h, w, k, seed=0):
    """(t, h, w) int32 label map with labels 1..k, each a random rectangle."""
    g = np.random.default_rng(seed)
    lab = np.zeros((t, h, w), np.int32)
    for j in range(1, k + 1):
        y, x = g.integers(0, h - 2), g.integers(0, w - 2)
        lab[:, y:y + g.integers(2, h // 3 + 3), x:x + g.integers(2, w // 3 + 3)] = j
    return lab


@pytest.mark.parametrize("as_file", [True, False])
def test_a_label_map_with_more_labels_than_max_objects_is_refused(tmp_path, as_file):
    """M2: one label per pixel would expand to T x (H W) x H x W bools."""
    lab = np.arange(1, 2 * 40 * 40 + 1, dtype=np.int32).reshape(2, 40, 40)
    src = tmp_path / "labels.npz"
    np.savez_compressed(src, masks=lab)
    with pytest.raises(InputError) as exc:
        load_masks(src if as_file else lab, num_frames=2, size=(40, 40))
    assert "the label map has 3200 distinct labels" in str(exc.value)
    assert f"more than {files.MAX_MASK_OBJECTS}" in str(exc.value)
    assert (str(src) in str(exc.value)) == as_file


def test_max_objects_labels_load_and_one_more_is_refused(tmp_path):
    lab = np.arange(256, dtype=np.int32).reshape(1, 16, 16)  # 0 (background) + 255 labels
    masks = load_masks(lab, num_frames=1, size=(16, 16))
    assert files.MAX_MASK_OBJECTS == 255 and tuple(masks.shape) == (1, 255, 16, 16)
    assert masks.sum(dim=(0, 2, 3)).tolist() == [1] * 255  # one pixel per object
    with pytest.raises(InputError, match="the label map has 256 distinct labels"):
        load_masks(lab + 1, num_frames=1, size=(16, 16))
    with pytest.raises(InputError, match=r"shape \(1, 256, 4, 4\) hold 256 objects"):
        load_masks(np.zeros((1, 256, 4, 4), bool), num_frames=1, size=(4, 4))


def test_a_label_map_counted_in_chunks_reports_what_it_read(tmp_path, monkeypatch):
    """Read in chunks, a label map stops at the first chunk that passes the bound."""
    monkeypatch.setattr(files, "MASK_CHUNK_BYTES", 40 * 40 * 4, raising=False)
    lab = np.arange(1, 3 * 40 * 40 + 1, dtype=np.int32).reshape(3, 40, 40)
    np.savez(tmp_path / "m.npz", masks=lab)
    with pytest.raises(InputError, match="the label map has at least 1600 distinct labels"):
        load_masks(tmp_path / "m.npz", num_frames=3, size=(40, 40))


@pytest.mark.parametrize("shape, kw, phrase", [
    # 2 frames of 30000 x 40000 px: more than 4 x 8K UHD per frame
    ((2, 30000, 40000), {}, r"declares shape \(2, 30000, 40000\): frames of 40000 x 30000 "
                            r"px, more than 4 x the 33177600 px \(132710400 px\)"),
    # given the source video's size: at most 4 x its pixels
    ((2, 200, 260), {"source_size": (30, 40)}, r"declares shape \(2, 200, 260\): frames of "
                                               r"260 x 200 px, more than 4 x the 1200 px of "
                                               r"the source video \(4800 px\)"),
])
def test_an_npz_declaring_frames_larger_than_the_source_is_refused_from_its_header(
        tmp_path, shape, kw, phrase):
    """M3: the header is read (and refused) before any data; the file holds 64 bytes of it."""
    src = _npz_declaring(tmp_path / "bomb.npz", shape)
    with pytest.raises(InputError, match=phrase) as exc:
        load_masks(src, num_frames=2, size=(30, 40), **kw)
    assert str(exc.value).startswith(f"{src}: mask array 'masks' declares shape")


@pytest.mark.parametrize("shape, kw, error, phrase", [
    ((5, 300, 400), {}, ShapeError, "masks have 5 frames but the clip has 3"),
    ((1, 180, 180), {}, ShapeError, "masks have 1 frames but the clip has 3"),  # audit's M2
    ((5, 300, 400), {"frame_indices": torch.tensor([0, 2, 5])}, ShapeError,
     "masks have 5 frames but the clip has 3"),
    ((3, 300, 300), {}, InputError, r"masks are 300 x 300 px \(aspect 1\.000\)"),
    ((3, 300), {}, ShapeError, r"must be \(T, H, W\) or \(T, K, H, W\), got \(3, 300\)"),
    ((3, 300, 0), {}, ShapeError, r"mask frames are empty, shape \(3, 300, 0\)"),
    ((3, 256, 30, 40), {}, InputError, r"shape \(3, 256, 30, 40\) hold 256 objects"),
])
def test_the_layout_is_checked_on_the_header_before_the_data_is_read(tmp_path, shape, kw,
                                                                     error, phrase):
    """Frame count, rank, aspect and object count come from the .npy header: the data (cut
    short here) is never read."""
    src = _npz_declaring(tmp_path / "m.npz", shape, dtype="<i4")
    with pytest.raises(error, match=phrase):
        load_masks(src, num_frames=3, size=(30, 40), **kw)


def test_reading_an_npz_takes_memory_of_the_clip_not_of_the_file(tmp_path, monkeypatch):
    """40 frames of 500 x 500 (10 MB of bool), 4 kept and resized to 50 x 50: the chunked
    read holds about one chunk (here 1 MB) at a time, not the whole array."""
    monkeypatch.setattr(files, "MASK_CHUNK_BYTES", 1 << 20, raising=False)
    arr = np.zeros((40, 500, 500), bool)
    arr[10, 100:300, 200:400] = True
    np.savez_compressed(tmp_path / "m.npz", masks=arr)
    tracemalloc.start()
    try:
        masks = load_masks(tmp_path / "m.npz", num_frames=4, size=(50, 50),
                           frame_indices=torch.tensor([0, 10, 20, 30]))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert tuple(masks.shape) == (4, 1, 50, 50)
    assert masks.sum(dim=(1, 2, 3)).tolist() == [0, 400, 0, 0]
    assert peak < 4e6, f"{peak / 1e6:.1f} MB traced"  # before: the whole 10 MB array


def _one_read(arr, **kw):
    """What the in-memory path (one piece) gives for ``arr``."""
    return load_masks(torch.from_numpy(np.ascontiguousarray(arr)), **kw)


@pytest.mark.parametrize("layout", ["labels", "late_label", "binary_int", "uint16", "bool",
                                    "4d_uint8", "4d_float", "fortran", "big_endian"])
def test_an_npz_read_in_chunks_equals_one_read(tmp_path, monkeypatch, layout):
    """Chunks of 3 frames: kept frames picked across chunks, labels counted over all of them
    (a label only in a frame the clip drops still makes its (empty) object), resized alike.
    A Fortran-order array is read whole (up to a chunk, or the size of its kept frames)."""
    chunk = 3 * 48 * 64 * 8 if layout != "fortran" else 10 * 48 * 64 * 4
    monkeypatch.setattr(files, "MASK_CHUNK_BYTES", chunk, raising=False)
    arr = _labels(10, 48, 64, 4)
    if layout == "late_label":
        arr[9, :4, :4] = 9  # only in frame 9, which the clip drops
    elif layout == "binary_int":
        arr = (arr > 0).astype(np.int64) - (arr == 2)  # values -1, 0, 1: binary
    elif layout == "uint16":
        arr = arr.astype(np.uint16) * 1000
    elif layout == "bool":
        arr = arr > 0
    elif layout in ("4d_uint8", "4d_float"):
        arr = np.stack([arr == j for j in (1, 2, 3)], 1).astype(
            np.uint8 if layout == "4d_uint8" else np.float32)
    elif layout == "fortran":
        arr = np.asfortranarray(arr)
    elif layout == "big_endian":
        arr = arr.astype(">i4")
    np.savez(tmp_path / "m.npz", masks=arr)
    kw = {"num_frames": 4, "size": (36, 48), "frame_indices": torch.tensor([0, 3, 4, 8])}
    got = load_masks(tmp_path / "m.npz", **kw)
    want = _one_read(arr.astype(arr.dtype.newbyteorder("=")), **kw)
    assert got.dtype == torch.bool and torch.equal(got, want)
    k = {"labels": 4, "late_label": 5, "binary_int": 1, "uint16": 4, "bool": 1,
         "4d_uint8": 3, "4d_float": 3, "fortran": 4, "big_endian": 4}[layout]
    assert tuple(got.shape) == (4, k, 36, 48)
    if layout == "late_label":
        assert int(got[:, 4].sum()) == 0 and int(got[:, :4].sum()) > 0


def test_a_fortran_order_npz_with_more_frames_than_kept_past_a_chunk_is_refused(tmp_path,
                                                                                monkeypatch):
    monkeypatch.setattr(files, "MASK_CHUNK_BYTES", 1 << 10, raising=False)
    arr = np.asfortranarray(np.zeros((10, 24, 32), bool))
    np.savez(tmp_path / "m.npz", masks=arr)
    idx = torch.tensor([0, 9])
    with pytest.raises(InputError, match="stored in Fortran order and holds more frames"):
        load_masks(tmp_path / "m.npz", num_frames=2, size=(24, 32), frame_indices=idx)
    got = load_masks(tmp_path / "m.npz", num_frames=10, size=(24, 32))  # all frames kept
    assert tuple(got.shape) == (10, 1, 24, 32) and not bool(got.any())


def test_a_nan_in_a_frame_the_clip_drops_is_still_an_error(tmp_path, monkeypatch):
    monkeypatch.setattr(files, "MASK_CHUNK_BYTES", 2 * 24 * 32 * 4, raising=False)
    arr = np.zeros((8, 24, 32), np.float32)
    arr[7, 0, 0] = np.nan
    np.savez(tmp_path / "m.npz", masks=arr)
    with pytest.raises(InputError, match="float masks hold 1 NaN value"):
        load_masks(tmp_path / "m.npz", num_frames=2, size=(24, 32),
                   frame_indices=torch.tensor([0, 1]))


@pytest.mark.parametrize("shape_in, size", [((7, 9), (12, 16)), ((37, 49), (24, 32)),
                                            ((240, 320), (36, 48)), ((100, 133), (300, 400)),
                                            ((480, 854), (144, 256)), ((5, 1000), (3, 700))])
def test_resizing_by_gathering_equals_the_float_interpolation(shape_in, size):
    """Masks are resized by picking rows and columns (no float copy of the whole stack):
    bit-identical to F.interpolate(masks.float(), mode="nearest-exact") > 0.5."""
    g = torch.Generator().manual_seed(sum(shape_in))
    arr = torch.rand((3, 2) + shape_in, generator=g) > 0.6
    got = load_masks(arr, num_frames=3, size=size, resize=True)
    want = F.interpolate(arr.reshape(6, 1, *shape_in).float(), size=size,
                         mode="nearest-exact").reshape(3, 2, *size) > 0.5
    assert torch.equal(got, want)


def test_damaged_or_foreign_npz_members_are_input_errors(tmp_path):
    np.savez(tmp_path / "crc.npz", masks=np.ones((2, 24, 32), np.uint8))
    raw = bytearray((tmp_path / "crc.npz").read_bytes())
    raw[raw.index(b"\x01" * 16) + 100] = 7  # one data byte: a CRC mismatch
    (tmp_path / "crc.npz").write_bytes(bytes(raw))
    with pytest.raises(InputError, match=r"member 'masks.npy' is damaged \(Bad CRC-32"):
        load_masks(tmp_path / "crc.npz", num_frames=2, size=(24, 32))
    with zipfile.ZipFile(tmp_path / "txt.npz", "w") as z:
        z.writestr("notes.txt", "not an array")
    with pytest.raises(InputError, match="member 'notes.txt' is not a readable NumPy .npy"):
        load_masks(tmp_path / "txt.npz", num_frames=2, size=(24, 32))
    src = _npz_declaring(tmp_path / "short.npz", (2, 24, 32), data=b"\0" * 100)
    with pytest.raises(InputError, match=r"ends before the data of its shape \(2, 24, 32\)"):
        load_masks(src, num_frames=2, size=(24, 32))


def test_score_clip_bounds_mask_frames_by_the_clips_source_size(tmp_path):
    """The pipeline passes the clip's source size: a masks .npz declaring frames of more than 4 x
    a 64 x 96 source's pixels is refused, naming the source's pixels (not 8K UHD's)."""
    from geocon_torch import score_clip

    frames = torch.randint(0, 255, (8, 3, 64, 96), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    src = _npz_declaring(tmp_path / "big.npz", (8, 192, 288))  # 9 x the source's pixels
    with pytest.raises(InputError, match=r"more than 4 x the 6144 px of the source video "
                                         r"\(24576 px\)"):
        score_clip(frames, masks=src, config={"io": {"long_side": None}},
                   preset="background", progress=False)
