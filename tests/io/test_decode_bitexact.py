"""Decoded RGB does not depend on the CPU (audit s26 F1) and 4:2:0 sources are not darkened (F4).

libswscale picks a SIMD kernel by the CPU's flags: without ACCURATE_RND | BITEXACT the x86
SSSE3 / AVX2 (or ARM NEON) yuv2rgb rounds otherwise than the C code. ``av_force_cpu_flags(0)``,
called on the libavutil PyAV loaded, makes this process run the C code that a CPU without those
kernels runs; the reader must give the same arrays both ways. Clips are made here with PyAV."""
from __future__ import annotations

import contextlib
import ctypes
import glob
from pathlib import Path
from typing import Dict, Iterator, Optional

import numpy as np
import pytest
import torch

from geocon_torch.io import read_clip
from geocon_torch.io.writer import write_video
from geocon_torch.synth import grounded_clip
from helpers import write_ffv1, yuv_frame

av = pytest.importorskip("av")

#: BT.709 Kr, Kb
_KR, _KB = 0.2126, 0.0722
_BT709_TV = {"colorspace": 1, "color_range": 1}  # AVCOL_SPC_BT709, AVCOL_RANGE_MPEG


def _libavutil() -> Optional[ctypes.CDLL]:
    """The libavutil this process loaded for PyAV (its mapped file on Linux, else the copy in a
    PyAV wheel), None when it cannot be found."""
    maps = Path("/proc/self/maps")
    paths = []
    if maps.exists():
        paths = sorted({line.split()[-1] for line in maps.read_text().splitlines()
                        if "libavutil" in line and line.split()[-1].startswith("/")})
    root = Path(av.__file__).parent
    paths += glob.glob(str(root.parent / "av.libs" / "libavutil*"))
    paths += glob.glob(str(root / ".dylibs" / "libavutil*"))
    for path in paths:
        with contextlib.suppress(OSError):
            lib = ctypes.CDLL(path)
            if hasattr(lib, "av_force_cpu_flags"):
                return lib
    return None


@contextlib.contextmanager
def _plain_c() -> Iterator[None]:
    """Run FFmpeg's plain C code (no SIMD kernel) inside the block; CPU detection restored
    after it, also on failure."""
    lib = _libavutil()
    if lib is None:
        pytest.skip("the libavutil PyAV loaded cannot be found (av_force_cpu_flags)")
    lib.av_force_cpu_flags(0)
    try:
        yield
    finally:
        lib.av_force_cpu_flags(-1)


def _yuv_frame(codes: np.ndarray, pix_fmt: str) -> "av.VideoFrame":
    """A frame of ``pix_fmt`` (yuv420p / yuv422p / yuv420p10le) from (H, W, 3) integer Y'CbCr
    codes, chroma subsampled by taking the top-left sample, tagged BT.709 limited range."""
    sub_y = 2 if "420" in pix_fmt else 1
    dtype = np.uint16 if "10" in pix_fmt else np.uint8
    planes = [p.astype(dtype) for p in
              (codes[..., 0], codes[::sub_y, ::2, 1], codes[::sub_y, ::2, 2])]
    return yuv_frame(planes, pix_fmt, _BT709_TV)


def _random_codes(h: int, w: int, bits: int, seed: int) -> np.ndarray:
    """(H, W, 3) random limited-range Y'CbCr codes of ``bits`` bits."""
    rng = np.random.default_rng(seed)
    s = 2 ** (bits - 8)
    return np.stack([rng.integers(16 * s, 236 * s, (h, w)), rng.integers(16 * s, 241 * s, (h, w)),
                     rng.integers(16 * s, 241 * s, (h, w))], -1)


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Dict[str, Path]:
    """Small clips whose default swscale path has a SIMD kernel on x86 (8-bit 4:2:0 / 4:2:2)
    and a 10-bit one, at a width that is (160) and one that is not (162) a multiple of 16, and
    an H.264 mp4 of a textured scene (what generators write)."""
    root = tmp_path_factory.mktemp("bitexact")
    out = {}
    for pix_fmt, w in (("yuv420p", 160), ("yuv420p", 162), ("yuv422p", 162),
                       ("yuv420p10le", 162)):
        bits = 10 if "10" in pix_fmt else 8
        frames = [_yuv_frame(_random_codes(48, w, bits, seed), pix_fmt) for seed in (0, 1)]
        out[f"{pix_fmt}_{w}"] = write_ffv1(root / f"{pix_fmt}_{w}.mkv", frames, _BT709_TV)
    scene = grounded_clip("C3", num_frames=3, motion="truck", size=(96, 160), seed=0)
    out["h264"] = write_video(root / "truck.mp4", scene.frames)
    return out


@pytest.mark.parametrize("name", ["yuv420p_160", "yuv420p_162", "yuv422p_162",
                                  "yuv420p10le_162", "h264"])
def test_decoded_rgb_is_the_same_without_simd(clips, name):
    """read_clip gives the same arrays with the CPU's SIMD kernels and with FFmpeg's plain C
    code (streamed reads too: every conversion goes through one function)."""
    path = str(clips[name])
    default = read_clip(path, long_side=None).frames
    with _plain_c():
        plain = read_clip(path, long_side=None).frames
        streamed = read_clip(path, long_side=None, stream=True).frames.materialize()
    diff = (default.int() - plain.int()).abs()
    assert int(diff.max()) == 0, (f"{name}: {int((diff > 0).sum())} samples differ by up to "
                                  f"{int(diff.max())} levels between SIMD and plain C")
    assert bool((streamed == default).all())


def _closed_form(codes: np.ndarray, bits: int) -> np.ndarray:
    """(H, W, 3) R'G'B' in levels of 255 of limited-range BT.709 Y'CbCr codes (not rounded)."""
    s = 2 ** (bits - 8)
    y = (codes[..., 0] - 16 * s) / (219 * s)
    cb = (codes[..., 1] - 128 * s) / (224 * s)
    cr = (codes[..., 2] - 128 * s) / (224 * s)
    r, b = y + 2 * (1 - _KR) * cr, y + 2 * (1 - _KB) * cb
    g = (y - _KR * r - _KB * b) / (1 - _KR - _KB)
    return np.clip(np.stack([r, g, b], -1) * 255.0, 0, 255)


def _levels_image(bits: int) -> np.ndarray:
    """(64, 240, 3) codes: a luma ramp over the limited range with neutral chroma (rows 0-31)
    and flat 8x8 colour patches (rows 32-63), chroma constant within each patch."""
    s = 2 ** (bits - 8)
    codes = np.zeros((64, 240, 3), np.int64)
    codes[:32, :, 0] = np.linspace(16 * s, 235 * s, 240).round()
    codes[:32, :, 1:] = 128 * s
    rng = np.random.default_rng(7)
    patches = np.stack([rng.integers(60 * s, 200 * s, (4, 30)),
                        rng.integers(90 * s, 166 * s, (4, 30)),
                        rng.integers(90 * s, 166 * s, (4, 30))], -1)
    codes[32:] = np.repeat(np.repeat(patches, 8, 0), 8, 1)
    return codes


@pytest.mark.parametrize("pix_fmt", ["yuv420p", "yuv420p10le"])
def test_420_levels_match_the_closed_form(tmp_path, pix_fmt):
    """A 4:2:0 source reads within rounding of the closed-form BT.709 conversion: no darkening
    (the fast path gave -0.7 levels mean for 8-bit, -1.7 for 10-bit). Compared away from the
    patch edges, where chroma is interpolated between patches."""
    bits = 10 if "10" in pix_fmt else 8
    codes = _levels_image(bits)
    path = write_ffv1(tmp_path / f"levels_{pix_fmt}.mkv", [_yuv_frame(codes, pix_fmt)], _BT709_TV)
    got = read_clip(str(path), long_side=None).frames[0].permute(1, 2, 0).numpy().astype(float)
    keep = np.zeros(codes.shape[:2], bool)
    keep[:30] = True
    rows, cols = np.mgrid[:64, :240]
    keep |= (rows >= 34) & (rows % 8 >= 2) & (rows % 8 <= 5) & (cols % 8 >= 2) & (cols % 8 <= 5)
    err = (got - _closed_form(codes, bits))[keep]
    assert abs(err.mean()) < 0.5 and np.abs(err).max() < 1.0, (
        f"{pix_fmt}: mean error {err.mean():+.3f}, max |error| {np.abs(err).max():.2f} levels")


def test_chroma_is_interpolated_not_repeated(tmp_path):
    """The chroma of a smooth colour texture survives an H.264 round trip (the project's own
    writer, crf 0) within 2 levels mean |error|: bilinear chroma at full resolution gives 1.86;
    PyAV's default gave 2.52 (darkened), the nearest chroma sample (SWS_POINT) 3.66."""
    g = torch.Generator().manual_seed(0)
    base = torch.nn.functional.interpolate(torch.randn(1, 3, 12, 17, generator=g),
                                           size=(96, 136), mode="bicubic")
    big = ((base - base.min()) / (base.max() - base.min()) * 200 + 30).to(torch.uint8)[0]
    frames = torch.stack([big[:, :, 2 * k:2 * k + 128] for k in range(3)])
    path = write_video(tmp_path / "smooth.mp4", frames, crf=0)
    err = (read_clip(str(path), long_side=None).frames.float() - frames.float()).abs().mean()
    assert float(err) < 2.0, f"mean |error| {float(err):.3f} levels"
