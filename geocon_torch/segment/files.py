"""Object masks from files: a PNG folder per object, or an .npz with (T, H, W) / (T, K, H, W).

Accepted sources (:func:`load_masks`):

* a tensor / array (T, H, W) or (T, K, H, W): bool or {0, 1} -> objects as given; an integer
  (T, H, W) label map with values > 1 -> one object per non-zero label;
* an ``.npz`` file: key ``masks`` (else the only array) with the same layouts;
* a folder: sub-folders (one per object, sorted by name) each holding one PNG per frame
  (non-zero = object), or PNGs directly (one label map per frame; each non-zero value an object:
  a palette PNG's index, as DAVIS / YouTube-VOS store them, or a colour image's colour).
  JPEG / WebP masks are read as binary (> 127): lossy compression scatters label values.

Masks are resized to the clip's working resolution with nearest-neighbour sampling (pixel
centres aligned) when they
have the clip's aspect ratio (within :data:`ASPECT_TOLERANCE`, 1 %); masks of another aspect
ratio (a 100 x 100 file for a 720 x 480 clip) are an :class:`~geocon_torch.errors.InputError`
naming both sizes, and are stretched only when asked (``resize=True``, the config's
``segment.resize_masks``). Float masks must be binary (0 / 1): NaN or soft values are an
InputError saying so. When the file covers the source video and the clip was subsampled,
``frame_indices`` picks the kept frames.

Masks files may come from elsewhere (a leaderboard manifest's ``masks_path``), so their size is
checked against the clip before it costs memory. A source holds at most
:data:`MAX_MASK_OBJECTS` (255) objects: a label map with more distinct labels is an
InputError naming the file and the count (it would expand to T x K x H x W bools). The frame
count, rank, aspect ratio and object count are checked before a label map is expanded, and an
``.npz`` is checked on its array's .npy header before any data is read: frames of more than
:data:`MASK_PIXELS_PER_SOURCE_PIXEL` (4) x the source video's pixels (``source_size``; without
it, of 8K UHD) are an InputError naming the file, the array and its shape. The array is then
read in chunks of :data:`MASK_CHUNK_BYTES`, each cut to the kept frames and resized (by
picking rows and columns, no float copy), so memory follows the clip's (T, K, H, W) at its
working size, not what the file declares.
"""
from __future__ import annotations

import math
from pathlib import Path
from typing import IO, Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from .._json import NpyHeader, open_npz, open_npz_member
from ..errors import InputError, ShapeError
from ..io.images import IMAGE_SUFFIXES, image_files, natural_order

MaskSource = Union[str, Path, np.ndarray, torch.Tensor]
#: mask images may also be TIFF (label maps are often 16-bit)
MASK_SUFFIXES = IMAGE_SUFFIXES | {".tif", ".tiff"}
#: masks whose aspect ratio (W / H) differs from the clip's by more than this (relative) are
#: an error unless resizing was asked for
ASPECT_TOLERANCE = 0.01
#: what a masks file that cannot be read should have been
MASKS_NPZ_HINT = "give an .npz written by np.savez with a 'masks' array, or a PNG folder"


#: lossy formats: a mask saved in one is read as binary (> 127), not as a label map
LOSSY_SUFFIXES = {".jpg", ".jpeg", ".webp"}
#: most objects a masks source may hold: the distinct non-zero labels of a label map, or the
#: K of a (T, K, H, W) array. 255 is every index of a palette PNG past the background 0 (DAVIS
#: and YouTube-VOS stay below it). A label map becomes (T, K, H, W) bools, so K is bounded: a
#: map with one label per pixel would make K = H x W. (``foreground.max_objects`` of them, the
#: largest, are scored.)
MAX_MASK_OBJECTS = 255
#: an .npz mask frame may declare at most this many pixels per pixel of the source video
#: (twice its width and height), checked on the array's .npy header before any data is read
MASK_PIXELS_PER_SOURCE_PIXEL = 4
#: the source frame assumed when :func:`load_masks` is not given the source video's size:
#: 8K UHD (7680 x 4320 px)
MASK_REFERENCE_PIXELS = 7680 * 4320
#: an .npz masks array is read in chunks of about this many bytes (at least one frame), each
#: cut to the kept frames and resized before the next is read: memory follows the clip
MASK_CHUNK_BYTES = 1 << 26
#: a mask frame's longest side (px) when masks are resized (float32 pixel coordinates are
#: exact below it)
MASK_MAX_SIDE = 1 << 24


def _read_mask_image(path: Path) -> np.ndarray:
    """One mask image as an (H, W) integer array: a palette PNG (DAVIS, YouTube-VOS) as its
    indices; a colour image as one value per colour (R, G, B packed into one int64, 8 or 16 bit
    each; black 0; alpha ignored: an opaque alpha channel would be the whole frame); a grey one
    as it is (8 / 16 bit); a lossy one (JPEG, WebP) as 0 / 1 (> 127): compression scatters the
    values of a label map."""
    import cv2

    if path.suffix.lower() in LOSSY_SUFFIXES:
        return (_decode(path, cv2.IMREAD_GRAYSCALE) > 127).astype(np.uint8)
    if path.suffix.lower() == ".png":
        from PIL import Image

        try:
            with Image.open(path) as im:
                if im.mode in ("P", "PA"):
                    return np.array(im.getchannel(0) if im.mode == "PA" else im)
        except OSError:
            raise InputError(f"mask image could not be read: {path}") from None
    img = _decode(path, cv2.IMREAD_UNCHANGED)
    if img.ndim == 3:
        c = img[..., :3].astype(np.int64) if img.shape[-1] >= 3 else img[..., :1].astype(np.int64)
        img = c[..., 0] if c.shape[-1] == 1 else (c[..., 2] << 32) | (c[..., 1] << 16) | c[..., 0]
    return img


def _decode(path: Path, flags: int) -> np.ndarray:
    """OpenCV's decoding of the file's bytes (not ``cv2.imread(str(path))``, which crashes on a
    file name that is not UTF-8); InputError when it cannot be read or decoded."""
    import cv2

    try:
        img = cv2.imdecode(np.fromfile(path, dtype=np.uint8), flags)
    except OSError:
        img = None
    if img is None:
        raise InputError(f"mask image could not be read: {path}")
    return img


def _read_png_stack(files: Sequence[Path]) -> np.ndarray:
    frames = [_read_mask_image(f) for f in files]
    if len({fr.shape for fr in frames}) > 1:
        raise InputError(f"mask images in {files[0].parent} differ in size")
    if len({fr.dtype for fr in frames}) > 1:
        frames = [fr.astype(np.int64) for fr in frames]
    return np.stack(frames)


def _images(folder: Path):
    """Mask images of ``folder`` in natural order (``2.png`` before ``10.png``), as the frames
    of an image-folder video are listed."""
    return image_files(folder, MASK_SUFFIXES)


def _read_folder(folder: Path) -> np.ndarray:
    subdirs = natural_order(p for p in folder.iterdir() if p.is_dir())
    if subdirs:
        stacks = []
        for d in subdirs:
            files = _images(d)
            if not files:
                raise InputError(f"mask folder {d} holds no images")
            stacks.append(_read_png_stack(files) > 0)
        if len({s.shape for s in stacks}) > 1:
            raise InputError(f"object mask folders in {folder} differ in frame count or size")
        return np.stack(stacks, 1)  # (T, K, H, W)
    files = _images(folder)
    if not files:
        raise InputError(f"mask folder {folder} holds no images or object sub-folders")
    return _read_png_stack(files)  # (T, H, W) label maps


class _MaskSink:
    """Builds the (T', K, h, w) bool masks of a (T, H, W) / (T, K, H, W) masks array fed to it
    in order as (n, H, W) planes (plane ``p`` is frame ``p // K``, object ``p % K``), in one
    piece or chunk by chunk: keeps the planes of the kept frames, resized to (h, w) as soon as
    they arrive, and the label statistics of *every* plane (so a label map read in chunks
    gives what one read of the whole array gave). The (T', K, h, w) expansion of a label map
    happens last, at the working size, after its labels were counted.

    Args:
        shape: the array's shape. dtype: its torch dtype. keep: (T',) long, the frames kept
            (None: all). size: (h, w) to resize to (None: as given). device: where the
            planes come and the masks go. where: the source in messages.
    """

    def __init__(self, shape: Tuple[int, ...], dtype: torch.dtype, keep: Optional[torch.Tensor],
                 size: Optional[Tuple[int, int]], device: torch.device, where: str) -> None:
        self.where, self.k = where, (shape[1] if len(shape) == 4 else 1)
        self.total = shape[0] * self.k
        frames = torch.arange(shape[0]) if keep is None else keep.to("cpu", torch.long)
        rows = (frames.view(-1, 1) * self.k + torch.arange(self.k)).view(-1)
        self.last = int(rows.max()) if rows.numel() else -1
        self.rows, self.every = rows.to(device), keep is None  # every: all planes, in order
        self.shape = (frames.numel(),) + ((self.k,) if len(shape) == 4 else ())
        h, w = (int(v) for v in (size if size is not None else shape[-2:]))
        self.index = None if (h, w) == tuple(shape[-2:]) else (
            _nearest_index(shape[-2], h, device), _nearest_index(shape[-1], w, device))
        wide = dtype in (torch.uint16, torch.uint32)  # torch has no reductions on them
        self.labels_of = len(shape) == 3 and dtype != torch.bool  # a (T, H, W) label map?
        self.float = dtype.is_floating_point
        self.out_dtype = (torch.int64 if wide else dtype) if self.labels_of else torch.bool
        self.out_shape, self.device = (rows.numel(), h, w), device
        self.out: Optional[torch.Tensor] = None  # (T' K, h, w), made by the first chunk
        self.max: Optional[torch.Tensor] = None
        self.labels: Optional[torch.Tensor] = torch.empty(0, dtype=self.out_dtype,
                                                          device=device)
        self.count = 0  # distinct non-zero values (exact while labels is kept)

    def _empty(self) -> torch.Tensor:
        return torch.empty(self.out_shape, dtype=self.out_dtype, device=self.device)

    def needs(self, start: int) -> bool:
        """Whether planes from ``start`` on still matter (kept frames, labels, float checks)."""
        return start <= self.last or self.labels_of or self.float

    def feed(self, planes: torch.Tensor, start: int) -> None:
        """Take planes ``start``, ``start + 1``, ... (n, H, W) of the array."""
        if self.float:
            check_float_masks(planes, self.where)
        end = start + planes.shape[0]
        if self.labels_of:
            if planes.dtype in (torch.uint16, torch.uint32):
                planes = planes.to(torch.int64)
            self._count(planes, end == self.total)
        whole = start == 0 and end == self.total  # the whole array at once: no selection
        if whole:
            dst, rows = None, (None if self.every else self.rows)
        else:
            dst = (self.rows >= start) & (self.rows < end)
            rows = self.rows[dst] - start
            if rows.numel() == 0:
                return
        part = planes if rows is None else planes.index_select(0, rows)
        if self.index is not None:
            part = part.index_select(1, self.index[0]).index_select(2, self.index[1])
        part = part if self.labels_of or part.dtype == torch.bool else part > 0
        if dst is None:
            self.out = part
        else:
            self.out = self._empty() if self.out is None else self.out
            self.out[dst] = part

    def _count(self, planes: torch.Tensor, done: bool) -> None:
        """Fold the planes' maximum and distinct non-zero values into the statistics;
        InputError as soon as a label map (maximum > 1) has more than MAX_MASK_OBJECTS
        (``done``: these are the array's last planes, so the count is the whole array's)."""
        top = planes.max()
        self.max = top if self.max is None else torch.maximum(self.max, top)
        exact = done and self.labels is not None
        if self.labels is not None:
            vals = torch.unique(planes)
            self.labels = torch.unique(torch.cat([self.labels, vals[vals != 0]]))
            self.count = int(self.labels.numel())
            if self.count > MAX_MASK_OBJECTS:  # only the count matters now
                self.labels = None
        if self.labels is None and int(self.max) > 1:
            raise InputError(
                f"{self.where}: the label map has {'' if exact else 'at least '}{self.count} "
                f"distinct labels (one object per non-zero value), more than "
                f"{MAX_MASK_OBJECTS}; give binary masks (bool or 0 / 1) or a label map of at "
                f"most {MAX_MASK_OBJECTS} objects")

    def result(self) -> torch.Tensor:
        """(T', K, h, w) bool masks: objects as given, one per label of a label map."""
        out = self._empty() if self.out is None else self.out
        out = out.reshape(*self.shape, *out.shape[-2:])
        if not self.labels_of:
            return out if out.ndim == 4 else out.unsqueeze(1)
        if int(self.max) <= 1:  # binary (T, H, W): one object
            return (out > 0).unsqueeze(1)
        assert self.labels is not None  # _count raised otherwise
        return out.unsqueeze(1) == self.labels.view(1, -1, 1, 1)


def _nearest_index(n_in: int, n_out: int, device: torch.device) -> torch.Tensor:
    """(n_out,) long: the row (column) of a length-``n_in`` axis that each output row takes
    in a nearest-neighbour resize to ``n_out``, pixel centres aligned: exactly what
    ``F.interpolate(mode="nearest-exact")`` of float32 masks picks on ``device`` (it is asked,
    on the axis' float32 coordinates, which are exact below 2^24), so gathering those rows
    and columns of bool / label masks equals resizing them as float."""
    src = torch.arange(n_in, dtype=torch.float32, device=device).view(1, 1, n_in, 1)
    return F.interpolate(src, size=(n_out, 1), mode="nearest-exact").view(-1).long()


def check_float_masks(arr: torch.Tensor, where: str) -> None:
    """InputError unless a floating-point mask array is finite and binary (values 0 / 1); the
    message shows the bad values in full and how far they are from 0 / 1 (a straight-through
    ``hard + soft - soft.detach()`` mask is off by an ulp: round it)."""
    if not arr.is_floating_point() or arr.numel() == 0:
        return
    nan = torch.isnan(arr)
    if bool(nan.any()):
        raise InputError(f"{where}: float masks hold {int(nan.sum())} NaN value(s) of "
                         f"{arr.numel()}; give bool or 0 / 1 masks (e.g. np.nan_to_num(m) > 0.5)")
    binary = (arr == 0) | (arr == 1)
    if not bool(binary.all()):
        bad = arr.detach()[~binary]  # a straight-through mask may require grad
        far = float(torch.minimum(bad.abs(), (bad - 1).abs()).max())
        # the shortest text that reads back as the value in its dtype: 0.99999994, not 1
        shown = torch.stack([bad.min(), bad.max(), bad[0]])
        shown = shown.float() if shown.dtype == torch.bfloat16 else shown  # no NumPy bf16
        lo, hi, first = (str(v) for v in shown.cpu().numpy())
        raise InputError(f"{where}: float masks must be binary (0 / 1), found {bad.numel()} "
                         f"value(s) in [{lo}, {hi}] (e.g. {first}), up to {far:.2g} from 0 / 1; "
                         f"round near-binary masks (e.g. m.round()) or threshold soft masks "
                         f"first (e.g. m > 0.5)")


def check_aspect(mask_size: Tuple[int, int], size: Tuple[int, int], where: str) -> None:
    """InputError when masks of (H, W) ``mask_size`` do not have the aspect ratio of the clip's
    (H, W) ``size`` (within :data:`ASPECT_TOLERANCE`)."""
    (hm, wm), (h, w) = (int(v) for v in mask_size), (int(v) for v in size)
    am, ac = wm / max(hm, 1), w / max(h, 1)
    if abs(am / ac - 1.0) > ASPECT_TOLERANCE:
        raise InputError(
            f"{where}: masks are {wm} x {hm} px (aspect {am:.3f}) but the clip's frames are "
            f"{w} x {h} px (aspect {ac:.3f}), more than {100 * ASPECT_TOLERANCE:g} % apart; "
            f"masks must cover the same picture as the video. Give masks of the video's size, "
            f"or set segment.resize_masks = true to stretch them")


def _check_layout(shape: Tuple[int, ...], where: str, num_frames: Optional[int],
                  frame_indices: Optional[torch.Tensor], size: Optional[Tuple[int, int]],
                  resize: bool) -> Optional[torch.Tensor]:
    """The frames (T',) long of a masks array of ``shape`` that the clip keeps (None: all),
    after checking its layout against the clip before anything is expanded (or read).

    Raises:
        ShapeError: not (T, H, W) / (T, K, H, W), no frame or an empty frame, a frame count
            that is neither the clip's nor covers ``frame_indices``. InputError: more than
            MAX_MASK_OBJECTS objects, another aspect ratio (unless ``resize``).
    """
    if len(shape) in (3, 4) and shape[0] == 0:
        raise ShapeError(f"{where} have 0 frames")
    if len(shape) not in (3, 4):
        raise ShapeError(f"masks must be (T, H, W) or (T, K, H, W), got {shape}")
    if 0 in shape[-2:]:
        raise ShapeError(f"{where}: mask frames are empty, shape {shape}")
    if len(shape) == 4 and shape[1] > MAX_MASK_OBJECTS:
        raise InputError(f"{where}: masks of shape {shape} hold {shape[1]} objects, more "
                         f"than {MAX_MASK_OBJECTS}")
    keep = None
    if num_frames is not None and shape[0] != num_frames:
        idx = None if frame_indices is None else frame_indices.to("cpu", torch.long)
        if idx is None or idx.numel() != num_frames or int(idx.max()) >= shape[0] \
                or int(idx.min()) < 0:
            raise ShapeError(f"masks have {shape[0]} frames but the clip has {num_frames}")
        keep = idx
    if size is not None and tuple(shape[-2:]) != tuple(size):
        if not resize:
            check_aspect(tuple(shape[-2:]), tuple(size), where)
        if max(shape[-2:]) > MASK_MAX_SIDE:
            raise ShapeError(f"{where}: mask frames of shape {shape} are too large to resize "
                             f"(a side over {MASK_MAX_SIDE} px)")
    return keep


def _check_npz_header(head: NpyHeader, path: Path, key: str,
                      size: Optional[Tuple[int, int]],
                      source_size: Optional[Tuple[int, int]]) -> None:
    """InputError (naming the file, the array and its shape) unless the .npy header of a
    masks array declares a mask dtype and frames of at most MASK_PIXELS_PER_SOURCE_PIXEL x the
    source's pixels (MASK_REFERENCE_PIXELS when ``source_size`` is not given; at least the
    working ``size``)."""
    if head.dtype.hasobject:
        raise InputError(f"{path}: mask array '{key}' cannot be read (an object array, which "
                         f"needs pickle: never loaded)")
    if head.dtype.kind not in "biuf" or head.dtype.itemsize > 8:
        raise InputError(f"{path}: mask array '{key}' must be bool, integer labels or 0 / 1 "
                         f"floats, got dtype {head.dtype}")
    src = MASK_REFERENCE_PIXELS if source_size is None else math.prod(source_size)
    limit = MASK_PIXELS_PER_SOURCE_PIXEL * max(src, math.prod(size) if size else 0)
    if len(head.shape) >= 2 and math.prod(head.shape[-2:]) > limit:
        (h, w), of = head.shape[-2:], "" if source_size is None else " of the source video"
        raise InputError(f"{path}: mask array '{key}' declares shape {head.shape}: frames of "
                         f"{w} x {h} px, more than {MASK_PIXELS_PER_SOURCE_PIXEL} x the "
                         f"{src} px{of} ({limit} px)")


def _read_exactly(stream: IO[bytes], buf: np.ndarray) -> bool:
    """Fill ``buf`` (1-D, contiguous) from ``stream`` in pieces of at most 1 MiB (a zip
    member's ``readinto`` reads through a temporary bytes object of the size asked);
    False when the stream ends first."""
    view = memoryview(buf.view(np.uint8))
    for at in range(0, len(view), 1 << 20):
        piece = view[at:at + (1 << 20)]
        if stream.readinto(piece) != len(piece):
            return False
    return True


def _read_npz_masks(path: Path, where: str, layout: dict,
                    source_size: Optional[Tuple[int, int]]) -> torch.Tensor:
    """(T', K, h, w) bool masks of the masks array of the .npz ``path``: its .npy header is
    checked first (:func:`_check_npz_header`, :func:`_check_layout`), then the array is read
    in MASK_CHUNK_BYTES chunks, each cut to the kept frames and resized (:class:`_MaskSink`),
    so memory follows the clip, not what the file declares."""
    with open_npz(path, "masks", MASKS_NPZ_HINT) as z:
        key = "masks" if "masks" in z.files else (z.files[0] if len(z.files) == 1 else None)
        if key is None:
            raise InputError(f"{path}: no 'masks' array (found {z.files})")
        with open_npz_member(z, key, where) as (head, stream):
            _check_npz_header(head, path, key, layout["size"], source_size)
            keep = _check_layout(head.shape, where, **layout)
            dtype = head.dtype.newbyteorder("=")
            sink = _MaskSink(head.shape, torch.from_numpy(np.empty(0, dtype)).dtype, keep,
                             layout["size"], torch.device("cpu"), where)
            plane = head.shape[-2:]
            total = math.prod(head.shape[:-2])
            if head.fortran_order:  # frames are not contiguous: one read of the whole array
                per = total
                kept = sink.rows.numel() * math.prod(plane) * dtype.itemsize
                if head.nbytes > max(MASK_CHUNK_BYTES, kept):
                    raise InputError(f"{where}: mask array '{key}' of shape {head.shape} is "
                                     f"stored in Fortran order and holds more frames than "
                                     f"the clip keeps; save it in C order "
                                     f"(np.ascontiguousarray)")
            else:
                per = max(1, MASK_CHUNK_BYTES // (math.prod(plane) * dtype.itemsize))
            for start in range(0, total, per):
                if not sink.needs(start):
                    break
                n = min(per, total - start)
                buf = np.empty(n * math.prod(plane), head.dtype)
                if not _read_exactly(stream, buf):
                    raise InputError(f"{where}: mask array '{key}' ends before the data of "
                                     f"its shape {head.shape}")
                buf = buf.astype(dtype, copy=False)
                if head.fortran_order:
                    buf = np.ascontiguousarray(buf.reshape(head.shape[::-1]).T)
                sink.feed(torch.from_numpy(buf.reshape(n, *plane)), start)
    return sink.result()


def load_masks(source: MaskSource, *, num_frames: Optional[int] = None,
               size: Optional[Tuple[int, int]] = None,
               frame_indices: Optional[torch.Tensor] = None,
               device: Optional[torch.device] = None, resize: bool = False,
               source_size: Optional[Tuple[int, int]] = None) -> torch.Tensor:
    """Object masks (T, K, H, W) bool from a tensor, an .npz file or a PNG folder.

    Args:
        source: see the module docstring.
        num_frames: the clip's T; masks covering more frames are subsampled with
            ``frame_indices`` (source frame of each clip frame).
        size: (H, W) working resolution to resize to (nearest neighbour, pixel centres
            aligned: OpenCV's INTER_NEAREST_EXACT).
        device: where the returned masks live (None: the CPU, or a tensor source's device).
        resize: stretch masks whose aspect ratio differs from ``size``'s by more than 1 %
            (default: that is an InputError).
        source_size: (H, W) of the source video (``Clip.source_size``): an .npz's frames may
            have at most MASK_PIXELS_PER_SOURCE_PIXEL x its pixels (None: of 8K UHD).
    Returns:
        (T, K, H, W) bool masks (T = ``num_frames`` when given, (H, W) = ``size`` when given;
        K may be 0, at most MAX_MASK_OBJECTS).
    Raises:
        InputError: unreadable source, NaN / non-binary float masks, another aspect ratio,
            more than MAX_MASK_OBJECTS objects, an .npz array declaring frames too large.
        ShapeError: wrong rank or frame count.
    """
    where = f"masks {source}" if isinstance(source, (str, Path)) else "masks"
    layout = {"num_frames": num_frames, "frame_indices": frame_indices, "size": size,
              "resize": resize}
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_file() and path.suffix.lower() == ".npz":
            masks = _read_npz_masks(path, where, layout, source_size)
            return masks.to(device) if device is not None else masks
        if path.is_dir():
            arr = torch.from_numpy(_read_folder(path))
        elif path.exists():  # a video, an image, a .npy: not a masks source
            raise InputError(f"{path} is not a masks source: give a folder of PNGs or an .npz")
        else:
            raise InputError(f"mask source not found: {path}")
    elif isinstance(source, (np.ndarray, torch.Tensor)):
        arr = torch.as_tensor(source)
    else:
        raise InputError(f"masks must be a path, an array or a tensor, got {type(source).__name__}")
    keep = _check_layout(tuple(arr.shape), where, **layout)
    sink = _MaskSink(tuple(arr.shape), arr.dtype, keep, size, arr.device, where)
    sink.feed(arr.reshape(-1, *arr.shape[-2:]), 0)
    masks = sink.result()
    return masks.to(device) if device is not None else masks
