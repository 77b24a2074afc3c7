"""Lens undistortion (``io.lens``): frames filmed through a lens with radial / tangential
distortion are resampled to the pinhole camera every fit of the package assumes.

The model is OpenCV's (``cv2.calibrateCamera``, ``cv2.undistort``): camera matrix
``K = [[fx, 0, cx], [0, fy, cy], [0, 0, 1]]`` in px (pixel centres at integer coordinates) and the
Brown-Conrady coefficients ``(k1, k2, p1, p2, k3)``. For each pixel ``(u, v)`` of the
undistorted frame, ``x = (u - cx) / fx``, ``y = (v - cy) / fy``, ``r2 = x^2 + y^2`` and

    x_d = x (1 + k1 r2 + k2 r2^2 + k3 r2^3) + 2 p1 x y + p2 (r2 + 2 x^2)
    y_d = y (1 + k1 r2 + k2 r2^2 + k3 r2^3) + p1 (r2 + 2 y^2) + 2 p2 x y

its value is the distorted frame's at ``(fx x_d + cx, fy y_d + cy)`` (bilinear; 0 outside the
frame): the closed-form forward model, no iteration, the output camera matrix equal to the
input one (``cv2.undistort(img, K, dist)`` with no new camera matrix). The frame keeps its
size; with barrel distortion (k1 < 0) every output pixel lies inside the source, with
pincushion (k1 > 0) the corners come out black, and the content mask leaves them out.

The intrinsics are stated in px of a frame size (``io.lens.width`` x ``height``, a
calibration's image size; default the source's); a clip decoded at another size of the same
aspect ratio gets them scaled with the resize's pixel-centre rule (``x' = (x + 0.5) s - 0.5``,
:mod:`geocon_torch.io.resize`), to the source and then to the working size.

Orientation: the frames are undistorted as displayed, after a video's display-rotation
metadata is applied (the reader turns them first), so the intrinsics are px of the displayed
frames (a portrait phone video: 1080 x 1920, not the coded 1920 x 1080). A calibration of the
coded (sensor) frames is turned with :func:`display_lens`; a stated aspect that fails the
check on a quarter-turned file gets an error naming the rotation and the turned values, and
``meta["lens"]["display_rotation"]`` records the rotation (degrees counterclockwise).

Checks when a map is built (:func:`camera_at`, :func:`check_fold`): the principal point lies
inside the frame the intrinsics are in (the source's when the size is left out: a calibration
copied without its size is refused), and the radial polynomial ``r_d(r) = r (1 + k1 r^2 + k2
r^4 + k3 r^6)`` increases out to the frame's corners (a fold would sample inner texture a second
time, mirrored; tangential terms are left out of this check: they are small where
calibrations are valid). A lens that leaves more than :data:`OUTSIDE_WARN` of the working frame
black (a lens stated for another camera or size) gives a UserWarning (:func:`lens_record`).

Where it applies: the reader (:func:`~geocon_torch.io.reader.read_clip` /
``clip_from_tensor`` / ``clips_from_tensor`` / ``tensor_frames`` with ``lens=``) undistorts
the working frames (eager, streamed and tensor clips alike) and maps the letterbox content
mask, found on the distorted frames, through the same map (:func:`undistort_mask`): the
re-reads of the gate's view and of the epipolar protocols go through the reader too. Given
object masks are mapped at their working size (:func:`undistort_clip_masks`). The clip's
``meta["lens"]`` (:func:`lens_record`) records what was done, and a result's ``io.lens``.

All torch: the sampling grid is built once per (lens, sizes, device) (a small LRU cache) and
frames go through ``grid_sample`` in chunks of :data:`~geocon_torch.io.resize.RESIZE_CHUNK_VALUES`
values on their own device (no host round trip, no OpenCV).
"""
from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Any, Dict, Mapping, Optional, Tuple, Union

import numpy as np
import torch
import torch.nn.functional as F

from ..config import LENS_COEFFICIENTS, LensConfig
from ..errors import ConfigError, ShapeError
from ..types import Clip
from .resize import RESIZE_CHUNK_VALUES, WorkingSize

#: the largest relative difference between the aspect ratio the lens is stated for and the
#: source's (1 %: a calibration of another video mode, e.g. 4:3 on a 16:9 crop, is refused)
ASPECT_TOLERANCE = 0.01
#: sampling grids kept (one per lens, working size and device)
GRID_CACHE = 8
#: the fraction of the working frame left black (its source outside the frame) above which
#: :func:`lens_record` warns: a lens stated for another camera or frame size
OUTSIDE_WARN = 0.1
#: px a principal point may lie past the frame's edge (-0.5 .. W - 0.5): float rounding of the
#: pixel-centre rescaling, e.g. the working-size lens :func:`clip_lens` reads back
_EDGE_SLACK = 1e-6


@dataclass(frozen=True)
class Lens:
    """A checked lens (:func:`as_lens`), hashable (the key of the grid cache).

    Attributes:
        fx, fy: focal lengths, px of the stated frame (> 0).
        cx, cy: principal point, px of the stated frame; None: its centre ((W - 1) / 2).
        size: (width, height) px the intrinsics are stated in; None: the source frames'.
        coefficients: (k1, k2, p1, p2, k3), not all 0.
    """

    fx: float
    fy: float
    cx: Optional[float]
    cy: Optional[float]
    size: Optional[Tuple[int, int]]
    coefficients: Tuple[float, float, float, float, float]


LensLike = Union[None, Lens, LensConfig, Mapping[str, Any]]


def as_lens(lens: LensLike) -> Optional[Lens]:
    """The :class:`Lens` of ``io.lens`` (a :class:`~geocon_torch.config.LensConfig`, a
    mapping of its keys, a Lens, or None), or None when there is nothing to undistort (no
    lens, or every coefficient 0: frames are then left bit-identical).

    Raises:
        ConfigError: a bad value (the config's field rules), a lens that distorts without
            ``fx``, or ``width`` without ``height``.
    """
    if lens is None:
        return None
    if isinstance(lens, Lens):
        _check_lens(lens)
        return lens if any(lens.coefficients) else None
    if isinstance(lens, Mapping):
        lens = LensConfig.from_dict(lens)
    if not isinstance(lens, LensConfig):
        raise ConfigError(f"io.lens must be a mapping of LensConfig fields, a LensConfig, a Lens "
                          f"or None, got {type(lens).__name__}")
    lens.check_complete()
    if not lens.distorts():
        return None
    size = None if lens.width is None else (int(lens.width), int(lens.height))
    fx = float(lens.fx)
    return Lens(fx=fx, fy=fx if lens.fy is None else float(lens.fy), cx=lens.cx, cy=lens.cy,
                size=size, coefficients=tuple(float(getattr(lens, k))
                                              for k in LENS_COEFFICIENTS))


def _check_lens(lens: Lens) -> None:
    """ConfigError unless a Lens built by hand has finite focal lengths > 0, finite
    coefficients (five of them) and a positive stated size."""
    numbers = [lens.fx, lens.fy] + [v for v in (lens.cx, lens.cy) if v is not None]
    ok = (len(lens.coefficients) == len(LENS_COEFFICIENTS) and lens.fx > 0 and lens.fy > 0
          and all(math.isfinite(float(v)) for v in numbers + list(lens.coefficients))
          and (lens.size is None or (len(lens.size) == 2 and min(lens.size) >= 2)))
    if not ok:
        raise ConfigError(f"a Lens needs finite focal lengths > 0, finite coefficients (k1, k2, "
                          f"p1, p2, k3) and a size of two ints >= 2 or None, got {lens!r}")


def quarter_turns(rotation: Any) -> int:
    """Quarter turns counterclockwise (0-3) the reader applied for a display rotation of
    ``rotation`` degrees counterclockwise (``meta["display_rotation"]``; None: 0): the
    multiple of 90 within 1 degree, else 0 (another angle is recorded, not applied), as
    :func:`~geocon_torch.io.frame_rgb.display_turns`."""
    angle = float(rotation or 0.0)
    turns = round(angle / 90.0)
    return int(turns) % 4 if abs(angle - 90.0 * turns) <= 1.0 else 0


def _mirrored(c: Optional[float], n: int) -> Optional[float]:
    """Pixel coordinate ``c`` of an n-px side read from the other end (None stays None)."""
    return None if c is None else n - 1 - c


def display_lens(lens: Lens, turns: int) -> Lens:
    """A calibration of the coded (sensor) frames, ``lens`` (with its ``size``, W x H px),
    as a calibration of the frames shown turned ``turns`` quarter turns counterclockwise
    (``np.rot90(frame, turns)``): for 1 (90 degrees) size (H, W), fx' = fy, fy' = fx,
    cx' = cy, cy' = W - 1 - cx, p1' = -p2, p2' = p1; for 3 (270 degrees) size (H, W),
    fx' = fy, fy' = fx, cx' = H - 1 - cy, cy' = cx, p1' = p2, p2' = -p1; for 2 (180 degrees)
    cx' = W - 1 - cx, cy' = H - 1 - cy, p1' = -p1, p2' = -p2 (k1, k2, k3 unchanged, a
    principal point None (the centre) stays None).

    Raises:
        ConfigError: ``lens.size`` is None (the coded size is needed).
    """
    if lens.size is None:
        raise ConfigError("display_lens needs the lens's stated size (io.lens.size)")
    turns = int(turns) % 4
    (w, h), (k1, k2, p1, p2, k3) = lens.size, lens.coefficients
    flip = _mirrored
    if turns == 0:
        return lens
    if turns == 2:
        return replace(lens, cx=flip(lens.cx, w), cy=flip(lens.cy, h),
                       coefficients=(k1, k2, -p1, -p2, k3))
    if turns == 1:
        cx, cy, p = lens.cy, flip(lens.cx, w), (-p2, p1)
    else:
        cx, cy, p = flip(lens.cy, h), lens.cx, (p2, -p1)
    return Lens(fx=lens.fy, fy=lens.fx, cx=cx, cy=cy, size=(h, w),
                coefficients=(k1, k2, p[0], p[1], k3))


def _turned_hint(lens: Lens, ws: WorkingSize, turns: int) -> str:
    """The sentence an io.lens error adds for a clip shown turned by ``turns`` quarter turns
    (odd: width and height swapped; "" otherwise): the coded size, the rotation, and the
    stated lens taken as one of the coded frames, turned (:func:`display_lens`)."""
    if turns % 2 == 0:
        return ""
    h_src, w_src = ws.source
    text = (f"; the file's coded frames are {h_src} x {w_src} px, turned {90 * turns} degrees "
            f"for display (display rotation), and io.lens is taken in display orientation "
            f"({w_src} x {h_src} px)")
    if lens.size is None:
        return text
    d = display_lens(lens, turns)
    k = {"fx": d.fx, "fy": d.fy, "cx": d.cx, "cy": d.cy, "p1": d.coefficients[2],
         "p2": d.coefficients[3]}
    values = ", ".join(f"{n} {v:g}" for n, v in k.items() if v is not None)
    rule = ("cx' = cy, cy' = W - 1 - cx, p1' = -p2, p2' = p1" if turns == 1 else
            "cx' = H - 1 - cy, cy' = cx, p1' = p2, p2' = -p1")
    return (f"{text}. If io.lens is a calibration of the coded frames (W x H), turn it: swap "
            f"width / height and fx / fy, {rule} (k1, k2, k3 unchanged): io.lens.size "
            f"[{d.size[0]}, {d.size[1]}], {values}")


def camera_at(lens: Lens, ws: WorkingSize, rotation: Any = None
              ) -> Tuple[float, float, float, float]:
    """(fx, fy, cx, cy) px of the working frames of ``ws``: the stated intrinsics scaled to the
    source size (``ws.source``), then to the working size (``ws.scale_xy``), both with the
    pixel-centre rule ``c' = (c + 0.5) s - 0.5``. ``rotation``: the clip's display rotation
    (degrees counterclockwise, ``meta["display_rotation"]``), only for the errors' wording.

    Raises:
        ConfigError: the source's aspect ratio differs from the stated frame's by more than
            :data:`ASPECT_TOLERANCE`, or the principal point lies outside the frame the
            intrinsics are in (-0.5 .. W - 0.5; the source frame when ``lens.size`` is None).
    """
    h_src, w_src = ws.source
    w_lens, h_lens = lens.size if lens.size is not None else (w_src, h_src)
    ax, ay = w_src / w_lens, h_src / h_lens
    turns = quarter_turns(rotation)
    if abs(ax / ay - 1.0) > ASPECT_TOLERANCE:
        raise ConfigError(f"io.lens is stated for {w_lens} x {h_lens} px frames (aspect "
                          f"{w_lens / h_lens:.4g}) but the clip's source frames are {w_src} x "
                          f"{h_src} px (aspect {w_src / h_src:.4g}): give the calibration of "
                          f"this video mode (io.lens.width / height and its intrinsics)"
                          f"{_turned_hint(lens, ws, turns)}")
    for name, value, side in (("cx", lens.cx, w_lens), ("cy", lens.cy, h_lens)):
        if value is not None and not -0.5 - _EDGE_SLACK <= value <= side - 0.5 + _EDGE_SLACK:
            frame = (f"{w_lens} x {h_lens} px frame of io.lens.size" if lens.size is not None
                     else f"{w_lens} x {h_lens} px source frame the intrinsics are taken in "
                          f"(io.lens.size left out)")
            raise ConfigError(f"io.lens.{name} = {value:g} lies outside the {frame}, -0.5 .. "
                              f"{side - 0.5:g}: give io.lens.size, the calibration's image "
                              f"size, so the intrinsics are scaled to this clip"
                              f"{_turned_hint(lens, ws, turns)}")
    cx = (w_lens - 1) / 2.0 if lens.cx is None else float(lens.cx)
    cy = (h_lens - 1) / 2.0 if lens.cy is None else float(lens.cy)
    sx, sy = ws.scale_xy
    fx, fy = lens.fx * ax * sx, lens.fy * ay * sy
    cx = (cx + 0.5) * ax * sx - 0.5  # stated -> source -> working, pixel centres kept
    cy = (cy + 0.5) * ay * sy - 0.5
    return fx, fy, cx, cy


def distorted_positions(camera: Tuple[float, float, float, float],
                        coefficients: Tuple[float, ...], size: Tuple[int, int]
                        ) -> torch.Tensor:
    """Where each pixel of an undistorted (h, w) frame lies in the distorted one.

    Args:
        camera: (fx, fy, cx, cy) px (the same for both frames).
        coefficients: (k1, k2, p1, p2, k3).
        size: (h, w) px.
    Returns:
        (h, w, 2) float64 on the CPU: (x, y) px of the distorted frame, pixel centres at
        integers (OpenCV's ``initUndistortRectifyMap`` with ``R = I``, ``newCameraMatrix = K``).
    """
    fx, fy, cx, cy = camera
    k1, k2, p1, p2, k3 = coefficients
    h, w = size
    v, u = torch.meshgrid(torch.arange(h, dtype=torch.float64),
                          torch.arange(w, dtype=torch.float64), indexing="ij")
    x, y = (u - cx) / fx, (v - cy) / fy
    r2 = x * x + y * y
    radial = 1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))
    xd = x * radial + 2.0 * p1 * x * y + p2 * (r2 + 2.0 * x * x)
    yd = y * radial + p1 * (r2 + 2.0 * y * y) + 2.0 * p2 * x * y
    return torch.stack([fx * xd + cx, fy * yd + cy], -1)


@dataclass(frozen=True)
class _Map:
    """One undistortion map on one device: ``grid`` (1, h, w, 2) float32 for ``grid_sample``
    (``align_corners=True``: -1 / 1 are the centres of the first / last pixel), ``inside``
    (h, w) bool (the bilinear footprint lies in the frame), ``nearest`` (h * w,) long (the
    distorted pixel nearest each output pixel, row-major), ``outside_fraction`` (of the output
    pixels not ``inside``) and ``camera`` (fx, fy, cx, cy) px."""

    grid: torch.Tensor
    inside: torch.Tensor
    nearest: torch.Tensor
    outside_fraction: float
    camera: Tuple[float, float, float, float]


def fold_radius(coefficients: Tuple[float, ...]) -> float:
    """The smallest normalised radius r > 0 at which the radial model ``r_d(r) = r (1 + k1 r^2
    + k2 r^4 + k3 r^6)`` stops increasing (``d r_d / d r = 1 + 3 k1 r^2 + 5 k2 r^4 + 7 k3
    r^6`` reaches 0); ``inf`` when it increases for every r. ``coefficients``: (k1, k2, p1,
    p2, k3) (p1, p2 not used)."""
    k1, k2, _, _, k3 = (float(v) for v in coefficients)
    roots = np.roots([7.0 * k3, 5.0 * k2, 3.0 * k1, 1.0])  # in s = r^2 (leading zeros dropped)
    s = [r.real for r in roots if abs(r.imag) <= 1e-9 * max(1.0, abs(r)) and r.real > 0]
    return math.sqrt(min(s)) if s else math.inf


def check_fold(coefficients: Tuple[float, ...], camera: Tuple[float, float, float, float],
               size: Tuple[int, int]) -> None:
    """ConfigError when the radial model folds over inside an (h, w) frame with ``camera``
    (fx, fy, cx, cy) px: :func:`fold_radius` at or below the normalised radius of the frame's
    farthest corner (the radius is convex in (u, v): its largest value over the frame is at a
    corner). The corners are the frame's edges (-0.5, w - 0.5), whose normalised coordinates
    the pixel-centre rescaling keeps: the verdict is the same at every working size of a clip.
    Past a fold, output pixels sample inner texture a second time (mirrored) and the frame
    would count them as content. Tangential terms (p1, p2) are not part of the check."""
    fx, fy, cx, cy = camera
    h, w = size
    corner = max(math.hypot((u - cx) / fx, (v - cy) / fy) for u in (-0.5, w - 0.5)
                 for v in (-0.5, h - 0.5))
    fold = fold_radius(coefficients)
    if fold <= corner:
        k = ", ".join(f"{n} = {v:g}" for n, v in zip(("k1", "k2", "k3"), (
            coefficients[0], coefficients[1], coefficients[4])) if v != 0.0)
        raise ConfigError(f"io.lens distortion folds over inside the frame: r_d stops increasing "
                          f"at r = {fold:.3f} (normalised), the frame's corners reach r = "
                          f"{corner:.3f}; the coefficients do not describe this camera at this "
                          f"size ({k}; a fit valid only near the centre, or a lens stated for "
                          f"another camera or size)")


@lru_cache(maxsize=GRID_CACHE)
def _map(lens: Lens, ws: WorkingSize, device: str) -> _Map:
    """The undistortion map of ``lens`` for the working frames of ``ws`` on ``device`` (built
    on the CPU in float64, copied once); ConfigError from :func:`camera_at` and
    :func:`check_fold`."""
    camera = camera_at(lens, ws)
    h, w = ws.size
    check_fold(lens.coefficients, camera, (h, w))
    pos = distorted_positions(camera, lens.coefficients, (h, w))  # (h, w, 2) px
    x, y = pos[..., 0], pos[..., 1]
    inside = (x >= 0) & (x <= w - 1) & (y >= 0) & (y <= h - 1)
    nearest = (y.round().clamp(0, h - 1) * w + x.round().clamp(0, w - 1)).long().reshape(-1)
    scale = torch.tensor([2.0 / (w - 1), 2.0 / (h - 1)], dtype=torch.float64)
    grid = (pos * scale - 1.0).float().unsqueeze(0)
    dev = torch.device(device)
    return _Map(grid.to(dev), inside.to(dev), nearest.to(dev),
                1.0 - float(inside.double().mean()), camera)


def _frames_size(frames: torch.Tensor, ws: Optional[WorkingSize]) -> WorkingSize:
    """``ws``, or the frames themselves as the source when None; ShapeError when the frames'
    (h, w) is not ``ws.size``."""
    h, w = int(frames.shape[-2]), int(frames.shape[-1])
    if ws is None:
        return WorkingSize((h, w), (h, w), True)
    if tuple(ws.size) != (h, w):
        raise ShapeError(f"frames of {w} x {h} px do not have the working size "
                         f"{ws.size[1]} x {ws.size[0]}")
    return ws


def undistort_frames(frames: torch.Tensor, lens: LensLike,
                     size: Optional[WorkingSize] = None) -> torch.Tensor:
    """Undistorted frames (bilinear, 0 where the source lies outside the frame).

    Args:
        frames: (N, C, h, w) uint8 on any device (a leading batch dimension is allowed:
            (..., C, h, w)).
        lens: ``io.lens`` (:func:`as_lens`); None or all coefficients 0: ``frames`` returned
            as they are.
        size: how the frames were made from the source (:class:`WorkingSize`: the intrinsics
            are scaled to ``size.source`` then to ``size.size``); None: the frames are the
            source (the intrinsics scaled from the stated size to (w, h)).
    Returns:
        (N, C, h, w) uint8 on the frames' device (a new tensor), ``round(bilinear)``; in
        chunks of :data:`~geocon_torch.io.resize.RESIZE_CHUNK_VALUES` values (bounded float
        copies), the grid built once per (lens, size, device).
    Raises:
        ConfigError: a bad lens, or one stated for another aspect ratio
            (:func:`camera_at`). ShapeError: not uint8 or not (..., C, h, w).
    """
    lens = as_lens(lens)
    if lens is None:
        return frames
    if frames.dtype != torch.uint8 or frames.ndim < 3:
        raise ShapeError(f"undistort_frames takes (N, C, H, W) uint8 frames, got "
                         f"{tuple(frames.shape)} {frames.dtype}")
    m = _map(lens, _frames_size(frames, size), str(frames.device))
    lead, (c, h, w) = frames.shape[:-3], frames.shape[-3:]
    flat = frames.reshape(-1, c, h, w)
    out = torch.empty_like(flat)
    per = max(1, RESIZE_CHUNK_VALUES // max(1, c * h * w))
    for start in range(0, flat.shape[0], per):
        chunk = flat[start:start + per].float()
        grid = m.grid.expand(chunk.shape[0], -1, -1, -1)
        res = F.grid_sample(chunk, grid, mode="bilinear", padding_mode="zeros",
                            align_corners=True)
        out[start:start + per] = res.round_().clamp_(0, 255).to(torch.uint8)
    return out.reshape(*lead, c, h, w)


def undistort_mask(mask: torch.Tensor, lens: LensLike,
                   size: Optional[WorkingSize] = None) -> torch.Tensor:
    """A (..., h, w) bool mask of the distorted frames (letterbox content, object masks) on the
    undistorted ones: nearest-neighbour through the same map, False where the output pixel's
    source lies outside the frame (the black corners of a pincushion lens). ``lens`` and
    ``size`` as in :func:`undistort_frames`; returns (..., h, w) bool on the mask's device
    (``mask`` itself when there is nothing to undistort)."""
    lens = as_lens(lens)
    if lens is None:
        return mask
    m = _map(lens, _frames_size(mask, size), str(mask.device))
    h, w = mask.shape[-2:]
    got = mask.reshape(*mask.shape[:-2], h * w).index_select(-1, m.nearest)
    return got.reshape(mask.shape).bool() & m.inside


def lens_record(lens: LensLike, size: WorkingSize, device: Union[str, torch.device] = "cpu",
                rotation: Any = None) -> Optional[Dict[str, Any]]:
    """``meta["lens"]`` of a clip undistorted with ``lens`` at ``size`` (None: nothing was
    undistorted): ``undistorted`` True, ``model`` "opencv" (Brown-Conrady k1, k2, p1, p2, k3),
    ``coefficients`` [k1, k2, p1, p2, k3], ``stated_size`` [width, height] (None: the source
    size), ``camera_px`` [fx, fy, cx, cy] at the working size, ``outside_fraction`` (of
    the working pixels whose source lies outside the frame: black, out of the content mask)
    and ``display_rotation`` (degrees counterclockwise the frames were turned for display
    before the lens applied: 0, 90, 180 or 270; ``rotation`` is the clip's
    ``meta["display_rotation"]``). JSON values; what :func:`undistort_clip_masks` reads back.

    Raises:
        ConfigError: as :func:`camera_at` (its message names a quarter-turn ``rotation``) and
            :func:`check_fold`.
    Warns:
        UserWarning: more than :data:`OUTSIDE_WARN` of the working frame is black.
    """
    lens = as_lens(lens)
    if lens is None:
        return None
    camera_at(lens, size, rotation)  # the errors' wording with the rotation (cheap, no map)
    m = _map(lens, size, str(torch.device(device)))
    h, w = size.size
    record = {"undistorted": True, "model": "opencv", "coefficients": list(lens.coefficients),
              "stated_size": None if lens.size is None else list(lens.size),
              "camera_px": [float(v) for v in m.camera],
              "outside_fraction": round(m.outside_fraction, 6),
              "display_rotation": 90 * quarter_turns(rotation)}
    text = lens_warning(record, (w, h), m.outside_fraction)
    if text is not None:
        warnings.warn(text, UserWarning, stacklevel=2)
    return record


def lens_warning(record: Mapping[str, Any], size: Optional[Tuple[int, int]] = None,
                 outside: Optional[float] = None) -> Optional[str]:
    """The warning for a :func:`lens_record` ``record`` that leaves more than
    :data:`OUTSIDE_WARN` of the working frame black (a lens stated for another camera or frame
    size), else None. ``size`` (width, height) of the working frame (None: not named);
    ``outside`` the unrounded fraction (None: the record's). The same text is a UserWarning
    when the clip is read and a line of the result's ``warnings``."""
    frac = float(record.get("outside_fraction") or 0.0) if outside is None else outside
    if not record.get("undistorted") or frac <= OUTSIDE_WARN:
        return None
    k = ", ".join(f"{n} = {v:g}" for n, v in zip(LENS_COEFFICIENTS, record["coefficients"])
                  if v != 0.0)
    cam = " ".join(f"{n} {v:.4g}" for n, v in zip(("fx", "fy", "cx", "cy"),
                                                   record["camera_px"]))
    of = "the" if size is None else f"the {size[0]} x {size[1]}"
    return (f"io.lens leaves {100 * frac:.0f} % of {of} working frame black (its source lies "
            f"outside the frame; left out of the content mask): {k}, camera {cam} px at the "
            f"working size. A lens stated for another camera or frame size? (io.lens.size is "
            f"the calibration's image size)")


def clip_lens(clip: Clip) -> Optional[Lens]:
    """The lens a clip's frames were undistorted with, at its working size (from
    ``meta["lens"]``, :func:`lens_record`), or None when they were not."""
    record = clip.meta.get("lens") if isinstance(clip.meta, dict) else None
    if not isinstance(record, dict) or not record.get("undistorted"):
        return None
    fx, fy, cx, cy = (float(v) for v in record["camera_px"])
    h, w = clip.size
    return Lens(fx=fx, fy=fy, cx=cx, cy=cy, size=(w, h),
                coefficients=tuple(float(v) for v in record["coefficients"]))


def undistort_clip_masks(masks: torch.Tensor, clip: Clip) -> torch.Tensor:
    """Object masks given for ``clip``'s source frames, at its working size, (T, K, h, w)
    bool, mapped onto its undistorted frames (:func:`undistort_mask`); ``masks`` as they are
    when the clip was not undistorted."""
    lens = clip_lens(clip)
    if lens is None or masks.numel() == 0:
        return masks
    return undistort_mask(masks, lens)


__all__ = ["Lens", "LensLike", "as_lens", "camera_at", "distorted_positions", "undistort_frames",
           "undistort_mask", "lens_record", "lens_warning", "clip_lens", "undistort_clip_masks",
           "display_lens", "quarter_turns", "fold_radius", "check_fold", "OUTSIDE_WARN"]
