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
"""
from __future__ import annotations

from pathlib import Path
from typing import Optional, Sequence, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from .._json import open_npz
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


def _labels_to_objects(arr: torch.Tensor) -> torch.Tensor:
    """(T, H, W) -> (T, K, H, W) bool: binary -> 1 object, label map -> one per label
    (unsigned 16 / 32-bit label maps, e.g. 16-bit PNG / TIFF, are widened first: torch has
    no reductions on them)."""
    if arr.dtype in (torch.uint16, torch.uint32):
        arr = arr.to(torch.int64)
    if arr.dtype == torch.bool or int(arr.max()) <= 1:
        return (arr > 0).unsqueeze(1)
    labels = torch.unique(arr)
    labels = labels[labels != 0]
    return arr.unsqueeze(1) == labels.view(1, -1, 1, 1)


def check_float_masks(arr: torch.Tensor, where: str) -> None:
    """InputError unless a floating-point mask array is finite and binary (values 0 / 1)."""
    if not arr.is_floating_point() or arr.numel() == 0:
        return
    nan = torch.isnan(arr)
    if bool(nan.any()):
        raise InputError(f"{where}: float masks hold {int(nan.sum())} NaN value(s) of "
                         f"{arr.numel()}; give bool or 0 / 1 masks (e.g. np.nan_to_num(m) > 0.5)")
    binary = (arr == 0) | (arr == 1)
    if not bool(binary.all()):
        bad = arr[~binary]
        raise InputError(f"{where}: float masks must be binary (0 / 1), found {bad.numel()} "
                         f"value(s) in [{float(bad.min()):g}, {float(bad.max()):g}] (e.g. "
                         f"{float(bad[0]):g}); threshold soft masks first (e.g. m > 0.5)")


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


def load_masks(source: MaskSource, *, num_frames: Optional[int] = None,
               size: Optional[Tuple[int, int]] = None,
               frame_indices: Optional[torch.Tensor] = None,
               device: Optional[torch.device] = None, resize: bool = False) -> torch.Tensor:
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
    Returns:
        (T, K, H, W) bool masks (T = ``num_frames`` when given, (H, W) = ``size`` when given;
        K may be 0).
    Raises:
        InputError: unreadable source, NaN / non-binary float masks, another aspect ratio.
        ShapeError: wrong rank or frame count.
    """
    if isinstance(source, (str, Path)):
        path = Path(source)
        if path.is_dir():
            arr = torch.from_numpy(_read_folder(path))
        elif path.is_file() and path.suffix.lower() == ".npz":
            with open_npz(path, "masks", MASKS_NPZ_HINT) as z:
                key = "masks" if "masks" in z.files else (z.files[0] if len(z.files) == 1 else None)
                if key is None:
                    raise InputError(f"{path}: no 'masks' array (found {z.files})")
                try:
                    raw = z[key]
                except ValueError as exc:  # an object array (needs pickle: never loaded)
                    raise InputError(f"{path}: mask array '{key}' cannot be read ({exc})") from None
                if raw.dtype.kind not in "biuf":
                    raise InputError(f"{path}: mask array '{key}' must be bool, integer labels or "
                                     f"0 / 1 floats, got dtype {raw.dtype}")
                arr = torch.from_numpy(np.ascontiguousarray(raw))
        elif path.exists():  # a video, an image, a .npy: not a masks source
            raise InputError(f"{path} is not a masks source: give a folder of PNGs or an .npz")
        else:
            raise InputError(f"mask source not found: {path}")
    elif isinstance(source, (np.ndarray, torch.Tensor)):
        arr = torch.as_tensor(source)
    else:
        raise InputError(f"masks must be a path, an array or a tensor, got {type(source).__name__}")
    where = f"masks {source}" if isinstance(source, (str, Path)) else "masks"
    check_float_masks(arr, where)
    if arr.ndim in (3, 4) and arr.shape[0] == 0:
        raise ShapeError(f"{where} have 0 frames")
    if arr.ndim == 3:
        masks = _labels_to_objects(arr)
    elif arr.ndim == 4:
        masks = arr > 0 if arr.dtype != torch.bool else arr
    else:
        raise ShapeError(f"masks must be (T, H, W) or (T, K, H, W), got {tuple(arr.shape)}")
    if num_frames is not None and masks.shape[0] != num_frames:
        idx = None if frame_indices is None else frame_indices.to("cpu", torch.long)
        if idx is None or idx.numel() != num_frames or int(idx.max()) >= masks.shape[0]:
            raise ShapeError(f"masks have {masks.shape[0]} frames but the clip has {num_frames}")
        masks = masks[idx.to(masks.device)]
    if size is not None and tuple(masks.shape[-2:]) != tuple(size):
        if not resize:
            check_aspect(tuple(masks.shape[-2:]), tuple(size), where)
        t, k = masks.shape[:2]
        if k:
            masks = F.interpolate(masks.reshape(t * k, 1, *masks.shape[-2:]).float(),
                                  size=tuple(size), mode="nearest-exact").reshape(t, k, *size) > 0.5
        else:
            masks = torch.zeros(t, 0, *size, dtype=torch.bool)
    return masks.to(device) if device is not None else masks
