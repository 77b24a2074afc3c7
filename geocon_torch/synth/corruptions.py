"""Corruption injectors: the failure modes of generated video, with a severity knob in [0, 1].

All kinds take frames (T, 3, H, W) (uint8, or float in [0, 1]) and return the same dtype; severity
0 returns an exact copy. Geometric kinds resample with a backward displacement field
``out(p) = in(p + d_t(p))`` (bilinear ``grid_sample``); object masks, when given, are resampled
with the same field (nearest), so they stay consistent with the frames. Amplitudes scale with
the image size ``s = min(H, W)``:

* ``rubber_sheet``: smooth, time-varying displacement field (four random low-frequency
  sinusoids per axis, 0.5-2 cycles per image, drifting at 0.3-0.6 rad/frame), about 0.02 s px
  RMS per axis.
* ``background_slide``: one random rectangle (about a third of the frame) slides against the
  rest, offset ``0.06 W sin(0.25 t)`` along a random direction (peak speed 0.015 W px/frame).
* ``breathing``: radial scale oscillation about the centre whose strength falls off with radius
  (``d = -eps_t (p - c) exp(-|p - c|^2 / R^2)``, ``eps_t = 0.06 sin(2 pi t / 16)``, ``R = s / 2``):
  not a homography and unrelated to depth, so no rigid model explains it.
* ``nonrigid_object``: a travelling ripple inside each object mask (needs ``masks``), amplitude
  0.06 of the object's size, wavelength 0.7 of its size.
* ``flicker``: per-frame low-frequency gain (+-25 %) and mid-frequency "boiling" noise (+-8 %
  of full scale), independent per frame.

Each amplitude above is multiplied by ``severity``.
"""
from __future__ import annotations

import math
from typing import Optional, Tuple, Union

import torch
import torch.nn.functional as F

from ..errors import InputError, ShapeError
from .._tensor_utils import sample_at_pixels

CORRUPTIONS = ("rubber_sheet", "background_slide", "breathing", "nonrigid_object", "flicker")


def check_corruption(kind: Optional[str], severity: float) -> Optional[str]:
    """Validate a corruption name ("none"/None -> None) and a severity in [0, 1]."""
    if not isinstance(severity, (int, float)) or not 0.0 <= float(severity) <= 1.0:
        raise InputError(f"severity must be a number in [0, 1], got {severity!r}")
    if kind is None or str(kind).lower() in ("none", "clean", ""):
        return None
    if kind not in CORRUPTIONS:
        raise InputError(f"unknown corruption {kind!r}; use one of {CORRUPTIONS}")
    return kind


def _noise(shape: Tuple[int, int, int], cell: float, gen: torch.Generator,
           dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """(T, H, W) smooth noise in about [-1, 1] with lattice spacing ``cell`` px."""
    t, h, w = shape
    gh, gw = max(2, int(math.ceil(h / cell)) + 2), max(2, int(math.ceil(w / cell)) + 2)
    lat = (torch.rand((t, 1, gh, gw), generator=gen, dtype=torch.float64) * 2 - 1)
    up = F.interpolate(lat, size=(int(gh * cell), int(gw * cell)), mode="bicubic",
                       align_corners=False)[:, 0, :h, :w]
    return up.to(device=device, dtype=dtype)


def _pixel_grid(h: int, w: int, dtype, device) -> torch.Tensor:
    ys, xs = torch.meshgrid(torch.arange(h, dtype=dtype, device=device),
                            torch.arange(w, dtype=dtype, device=device), indexing="ij")
    return torch.stack([xs, ys], -1)  # (H, W, 2) pixel (x, y)


def _warp(img: torch.Tensor, disp: torch.Tensor, mode: str = "bilinear") -> torch.Tensor:
    """Backward-warp (T, C, H, W) float by displacement (T, H, W, 2) px: out(p) = in(p + d(p))."""
    _, _, h, w = img.shape
    return sample_at_pixels(img, _pixel_grid(h, w, disp.dtype, disp.device) + disp, mode)


def _rubber_sheet(t, h, w, severity, gen, dtype, device):
    s = min(h, w)
    p = _pixel_grid(h, w, dtype, device)
    tt = torch.arange(t, dtype=dtype, device=device).view(t, 1, 1)
    disp = torch.zeros(t, h, w, 2, dtype=dtype, device=device)
    prm = torch.rand((2, 4, 5), generator=gen, dtype=torch.float64).to(dtype=dtype, device=device)
    for axis in range(2):
        for k in range(4):
            fx, fy, ph, om, sg = prm[axis, k]
            fx, fy = (0.5 + 1.5 * fx) * torch.sign(sg - 0.5), 0.5 + 1.5 * fy
            arg = 2 * math.pi * (fx * p[..., 0] / w + fy * p[..., 1] / h) + 2 * math.pi * ph
            disp[..., axis] += torch.sin(arg + (0.3 + 0.3 * om) * tt) / 2
    return disp * (severity * 0.03 * s)


def _background_slide(t, h, w, severity, gen, dtype, device):
    r = torch.rand(5, generator=gen, dtype=torch.float64).tolist()
    rw, rh = int(w * (0.3 + 0.15 * r[0])), int(h * (0.4 + 0.2 * r[1]))
    x0, y0 = int((w - rw) * r[2]), int((h - rh) * r[3])
    ang = 2 * math.pi * r[4]
    amp = severity * 0.06 * w * torch.sin(0.25 * torch.arange(t, dtype=dtype, device=device))
    disp = torch.zeros(t, h, w, 2, dtype=dtype, device=device)
    disp[:, y0:y0 + rh, x0:x0 + rw, 0] = (amp * math.cos(ang)).view(t, 1, 1)
    disp[:, y0:y0 + rh, x0:x0 + rw, 1] = (amp * math.sin(ang)).view(t, 1, 1)
    return disp


def _breathing(t, h, w, severity, gen, dtype, device):
    rel = _pixel_grid(h, w, dtype, device) - torch.tensor([(w - 1) / 2, (h - 1) / 2],
                                                          dtype=dtype, device=device)
    radius = min(h, w) / 2
    falloff = torch.exp(-(rel * rel).sum(-1, keepdim=True) / radius ** 2)
    phase = float(torch.rand((), generator=gen, dtype=torch.float64)) * 2 * math.pi
    eps = severity * 0.06 * torch.sin(
        2 * math.pi * torch.arange(t, dtype=dtype, device=device) / 16 + phase)
    return -eps.view(t, 1, 1, 1) * rel * falloff


def _nonrigid(masks, severity, gen, dtype, device):
    t, k, h, w = masks.shape
    m = masks.to(dtype)
    area = m.sum((-1, -2)).clamp_min(1)  # (T, K)
    size = area.sqrt()
    p = _pixel_grid(h, w, dtype, device)
    cen = (m.unsqueeze(-1) * p).sum((2, 3)) / area.unsqueeze(-1)  # (T, K, 2)
    ang = torch.rand(k, generator=gen, dtype=torch.float64).to(dtype=dtype, device=device) * 6.283
    dirv = torch.stack([ang.cos(), ang.sin()], -1)  # (K, 2) wave direction
    perp = torch.stack([-ang.sin(), ang.cos()], -1)
    lam = (0.7 * size).clamp_min(8)[..., None, None]  # (T, K, 1, 1)
    along = ((p[None, None] - cen[:, :, None, None]) * dirv[None, :, None, None]).sum(-1)
    tt = torch.arange(t, dtype=dtype, device=device).view(t, 1, 1, 1)
    wave = torch.sin(2 * math.pi * along / lam + 0.8 * tt)
    amp = (severity * 0.06 * size)[..., None, None]
    soft = F.avg_pool2d(m, 5, stride=1, padding=2, count_include_pad=False)  # feathered mask
    disp = (soft * amp * wave).unsqueeze(-1) * perp[None, :, None, None]
    return disp.sum(1)  # (T, H, W, 2)


def _flicker(frames, severity, gen):
    t, _, h, w = frames.shape
    s = min(h, w)
    gain = 1 + severity * 0.25 * _noise((t, h, w), s / 4, gen, frames.dtype, frames.device)
    boil = severity * 0.08 * _noise((t, h, w), 6.0, gen, frames.dtype, frames.device)
    return (frames * gain.unsqueeze(1) + boil.unsqueeze(1)).clamp(0, 1)


def apply_corruption(frames: torch.Tensor, kind: str, severity: float, *, seed: int = 0,
                     masks: Optional[torch.Tensor] = None, return_masks: bool = False
                     ) -> Union[torch.Tensor, Tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """Corrupt a clip (see the module doc for each kind).

    Args:
        frames: (T, 3, H, W) uint8 or float in [0, 1], any device.
        kind: one of :data:`CORRUPTIONS`.
        severity: in [0, 1]; 0 is the identity (an exact copy).
        seed: seeds the random field (same seed -> same corruption).
        masks: (T, K, H, W) bool object masks; required by ``nonrigid_object``; geometric kinds
            resample them with the same field.
        return_masks: also return the (resampled) masks (None when none were given).
    Returns:
        corrupted frames in the input dtype, or ``(frames, masks)`` with ``return_masks``.
    """
    kind = check_corruption(kind, severity)
    if kind is None:
        raise InputError("apply_corruption needs a corruption kind, got None")
    if not isinstance(frames, torch.Tensor) or frames.ndim != 4 or frames.shape[1] != 3:
        got = tuple(frames.shape) if isinstance(frames, torch.Tensor) else type(frames).__name__
        raise ShapeError(f"frames must be (T, 3, H, W), got {got}")
    t, _, h, w = frames.shape
    if masks is not None:
        if (not isinstance(masks, torch.Tensor) or masks.ndim != 4
                or masks.shape[0] != t or tuple(masks.shape[2:]) != (h, w)):
            got = tuple(masks.shape) if isinstance(masks, torch.Tensor) else type(masks).__name__
            raise ShapeError(f"masks must be (T, K, H, W) = ({t}, K, {h}, {w}), got {got}")
        masks = masks.to(device=frames.device, dtype=torch.bool)
    if kind == "nonrigid_object" and (masks is None or masks.shape[1] == 0
                                      or not bool(masks.any())):
        raise InputError("nonrigid_object needs non-empty object masks (T, K, H, W)")
    if float(severity) == 0.0:
        out = frames.clone()
        return (out, None if masks is None else masks.clone()) if return_masks else out
    is_uint8 = frames.dtype == torch.uint8
    work = frames.to(torch.float32) / 255.0 if is_uint8 else frames
    dtype, device = work.dtype, work.device
    gen = torch.Generator().manual_seed(int(seed) * 7 + CORRUPTIONS.index(kind))
    sev = float(severity)
    new_masks = None if masks is None else masks.clone()  # never the caller's own tensor
    if kind == "flicker":
        out = _flicker(work, sev, gen)
    else:
        if kind == "rubber_sheet":
            disp = _rubber_sheet(t, h, w, sev, gen, dtype, device)
        elif kind == "background_slide":
            disp = _background_slide(t, h, w, sev, gen, dtype, device)
        elif kind == "breathing":
            disp = _breathing(t, h, w, sev, gen, dtype, device)
        else:
            disp = _nonrigid(masks, sev, gen, dtype, device)
        out = _warp(work, disp).clamp(0, 1)
        if masks is not None and masks.shape[1] > 0:
            new_masks = _warp(masks.to(dtype), disp, mode="nearest") > 0.5
    out = (out * 255).round().to(torch.uint8) if is_uint8 else out
    return (out, new_masks) if return_masks else out
