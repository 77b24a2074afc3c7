"""Decoded frames to RGB: the one conversion of a PyAV frame to (H, W, 3) uint8 RGB in display
orientation, composited over black where it is transparent. libswscale runs its exact C code
(:data:`RGB_SWS_FLAGS`), so the pixels do not depend on the CPU's SIMD kernels. Used by the video
decoder (:mod:`.decode`) and by the image reader for images PyAV decodes (:mod:`.images`)."""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from ..errors import VideoReadError

#: libswscale flags of every conversion of a decoded frame to RGB (:func:`frame_to_ndarray`):
#: SWS_BILINEAR | SWS_FULL_CHR_H_INT | SWS_ACCURATE_RND | SWS_BITEXACT. PyAV's default
#: (SWS_BILINEAR alone) let the CPU decide the pixels: the SIMD yuv2rgb kernels (x86 SSSE3 /
#: AVX2, ARM NEON) round otherwise than the C code, so one H.264 clip scored 0.9074 on an AVX2
#: machine and 0.9102 without SIMD under one content hash + config hash (audit s26 F1); and
#: that fast path darkened 4:2:0 / 4:2:2 sources by 0.7 levels of 255 on average, 1.7 for
#: 10-bit (F4). ACCURATE_RND | BITEXACT run the C code on every CPU (the flags FFmpeg's own
#: tests use for checksums shared by all architectures); FULL_CHR_H_INT converts at full
#: chroma resolution, which removes the darkening (within 0.51 levels of the closed-form BT.601
#: / 709 conversion on flat colours). Bilinear chroma, not the nearest sample (SWS_POINT, 25 %
#: cheaper): that one doubles the error of an H.264 round trip of a smooth colour texture
#: (mean |error| 3.4 levels vs 1.8; PyAV's default gave 2.5). Cost: 1.7 ms per 640x480 frame
#: and 11 ms per 1080p frame on one core (PyAV's default: 0.15 / 0.8). RGB, paletted and 4:4:4
#: sources convert as with PyAV's default, bit for bit. A plain int: PyAV's Interpolation enum
#: has no flag members in older versions, which pass an int through.
RGB_SWS_FLAGS = 0x2 | 0x2000 | 0x40000 | 0x80000


def over_black(rgb: np.ndarray, alpha: np.ndarray, top: int = 255) -> Tuple[np.ndarray, int]:
    """``rgb`` composited over black, as a player shows it on a black background, and the
    number of pixels that are not opaque.

    Args:
        rgb: (H, W, 3) uint8.
        alpha: (H, W) uint8 or uint16 opacity, ``top`` = opaque.
        top: the opaque value (255, or 65535 for 16-bit alpha).

    Returns:
        ((H, W, 3) uint8 ``round(rgb * alpha / top)``, exact in integers: no pixel value lies
        half-way because ``top`` is odd; pixels with ``alpha < top``).
    """
    a = alpha.astype(np.uint32)[..., None]
    out = (rgb.astype(np.uint32) * a + top // 2) // top
    return out.astype(np.uint8), int(np.count_nonzero(alpha < top))


def display_turns(frame) -> int:
    """Quarter turns counterclockwise (0-3) that show ``frame`` as a player does: the rotation of
    its display matrix (FFmpeg's ``av_display_rotation_get``, PyAV's ``VideoFrame.rotation``,
    degrees counterclockwise) when it is a multiple of 90 degrees (within 1 degree); 0 for a
    frame without one, another angle (recorded, not applied: :attr:`Decoded.rotation`) or a
    frame that is not PyAV's (an animated WebP's)."""
    angle = float(getattr(frame, "rotation", 0) or 0)
    turns = round(angle / 90.0)
    return int(turns) % 4 if abs(angle - 90.0 * turns) <= 1.0 else 0


#: pixel format name -> whether it has an alpha component (filled on first sight)
_ALPHA_FORMATS: Dict[str, bool] = {"rgb24": False, "yuv420p": False, "rgba": True}


def _has_alpha(frame) -> bool:
    """Whether ``frame`` may hold transparent pixels: its pixel format has an alpha component,
    or it is paletted (pal8) with a palette entry that is not opaque. A format flag looked up
    per frame (the palette, 256 entries, is read only for a paletted frame). A frame object
    without a ``format`` (a stand-in with ``to_ndarray`` alone) is taken as opaque."""
    fmt = getattr(frame, "format", None)
    if fmt is None:
        return False
    name = fmt.name
    alpha = _ALPHA_FORMATS.get(name)
    if alpha is None:
        import av

        alpha = any(c.is_alpha for c in av.VideoFormat(name).components)
        _ALPHA_FORMATS[name] = alpha
    if alpha or not getattr(fmt, "has_palette", False) or len(frame.planes) < 2:
        return alpha
    palette = np.frombuffer(bytes(frame.planes[1]), dtype=np.uint8)[:1024]
    return bool((palette.reshape(-1, 4)[:, 3] < 255).any())  # BGRA entries (native uint32)


def frame_to_ndarray(frame, fmt: str) -> np.ndarray:
    """``frame`` converted to the pixel format ``fmt`` (e.g. "rgb24": (H, W, 3) uint8; "rgba":
    (H, W, 4) uint8) as a numpy array, by libswscale with :data:`RGB_SWS_FLAGS`: the same array
    on every CPU. A frame that is not PyAV's (an animated WebP's, a stand-in) converts itself.

    Raises VideoReadError when the installed PyAV takes no swscale flags (an old version whose
    Interpolation enum refuses an int)."""
    import av

    if not isinstance(frame, av.VideoFrame):
        return frame.to_ndarray(format=fmt)
    try:
        return frame.to_ndarray(format=fmt, interpolation=RGB_SWS_FLAGS)
    except (KeyError, TypeError, ValueError) as exc:
        raise VideoReadError(f"PyAV {av.__version__} cannot convert frames with the swscale flags "
                             f"{RGB_SWS_FLAGS:#x} that make the RGB the same on every CPU "
                             f"({exc!r}); install a newer av") from exc


def composite_rgb(frame) -> Tuple[np.ndarray, int]:
    """(H, W, 3) uint8 RGB of a decoded frame in display orientation (:func:`display_turns`
    applied; H, W are the displayed height and width) and the number of its pixels that are
    not opaque: a frame with transparency (:func:`_has_alpha`: rgba / argb / bgra / yuva...,
    a gif's bgra, pal8 with a transparent palette entry) is composited over black
    (:func:`over_black`, what a player shows on a black background), as the image
    readers do; an opaque format is converted to rgb24 alone (count 0). Converted by
    :func:`frame_to_ndarray` (the same pixels on every CPU)."""
    if _has_alpha(frame):
        rgba = frame_to_ndarray(frame, "rgba")
        rgb, partial = over_black(rgba[..., :3], rgba[..., 3])
    else:
        rgb, partial = frame_to_ndarray(frame, "rgb24"), 0
    turns = display_turns(frame)
    return (np.ascontiguousarray(np.rot90(rgb, turns)) if turns else rgb), partial
