"""Seeded procedural textures rich in SIFT-detectable structure, packed into one mip-mapped atlas.

A texture is (3, h, w) float32 RGB in [0, 1]: multi-octave value noise in a random colour pair,
overlaid (dead-leaves style) with anti-aliased discs (blobs), rotated rectangles (corners) and
texel-aligned 2x2 checkers (X-corners) in the surface's palette at random brightness, then softly
shaded. Kinds: ``"rich"`` (default), ``"sparse"`` (few shapes) and ``"flat"`` (one colour with
faint noise: a low-texture region). Everything is drawn from a ``torch.Generator``: the same seed
gives the same texels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import cv2
import numpy as np
import torch
import torch.nn.functional as F
from ..errors import InputError

TEXTURE_KINDS = ("rich", "sparse", "flat")


def _rand(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.rand(shape, generator=gen, dtype=torch.float32)  # whatever the default dtype


def value_noise(h: int, w: int, gen: torch.Generator, coarsest: int = 96,
                finest: int = 3) -> torch.Tensor:
    """(h, w) multi-octave value noise in about [-1, 1], built coarse to fine: a random lattice
    with ``coarsest``-texel cells, then per octave a 2x bicubic upsampling plus a new lattice of
    half the cell size (amplitude falling as cell ** 0.7), down to ``finest``-texel cells; the
    last level is upsampled to (h, w). Costs about one full-resolution bicubic pass."""
    cell = float(coarsest)
    acc = (_rand(gen, 1, 1, max(2, math.ceil(h / cell) + 2), max(2, math.ceil(w / cell) + 2))
           * 2 - 1) * cell ** 0.7
    total = cell ** 0.7
    while cell / 2 >= finest:
        cell /= 2
        acc = F.interpolate(acc, scale_factor=2, mode="bicubic", align_corners=False)
        acc = acc + (_rand(gen, *acc.shape) * 2 - 1) * cell ** 0.7
        total += cell ** 0.7
    up = F.interpolate(acc, scale_factor=cell, mode="bicubic", align_corners=False)
    return up[0, 0, :h, :w] / total * 2.0


def make_texture(h: int, w: int, seed: int, kind: str = "rich") -> torch.Tensor:
    """(3, h, w) float32 texture in [0, 1] (see module doc).

    "rich" is a dead-leaves image: overlapping shapes with power-law radii (density ~ r^-3,
    3 to 40 texels) and random colours cover the noise background about twice,
    so every neighbourhood is a distinct arrangement of edges, corners and blobs (repetitive
    patterns would make ambiguous matches). "sparse" scatters a few shapes on the noise.
    """
    if kind not in TEXTURE_KINDS:
        raise InputError(f"texture kind must be one of {TEXTURE_KINDS}, got {kind!r}")
    gen = torch.Generator().manual_seed(int(seed))
    base = _rand(gen, 3) * 0.6 + 0.2
    if kind == "flat":
        noise = value_noise(h, w, gen, coarsest=64, finest=32)
        return (base[:, None, None] + 0.015 * noise).clamp(0, 1)
    other = _rand(gen, 3) * 0.6 + 0.2
    noise = value_noise(h, w, gen)
    mix = (0.5 + 0.6 * noise).clamp(0, 1)
    tex = base[:, None, None] * (1 - mix) + other[:, None, None] * mix
    r_min, r_max = 3.0, 40.0
    mean_area = 2 * math.pi * math.log(r_max / r_min) / (r_min ** -2 - r_max ** -2)
    cover = 2.0 if kind == "rich" else 0.15
    n_shapes = int(h * w * cover / mean_area) + 1
    p = _rand(gen, n_shapes, 8).numpy().astype(np.float64)
    radii = (r_min ** -2 - p[:, 3] * (r_min ** -2 - r_max ** -2)) ** -0.5
    # each surface has its own three-colour palette; shapes vary its brightness widely (the
    # luminance variety is what makes neighbourhoods distinct for SIFT)
    palette = torch.stack([base, other, _rand(gen, 3) * 0.8 + 0.1])
    pick = torch.randint(0, 3, (n_shapes,), generator=gen)
    gain = 0.25 + 1.5 * _rand(gen, n_shapes, 1)
    tint = 0.85 + 0.3 * _rand(gen, n_shapes, 3)
    colors = ((palette[pick] * gain * tint).clamp(0, 1) * 255).round().numpy().tolist()
    img = np.ascontiguousarray((tex.permute(1, 2, 0).numpy() * 255).round().astype(np.uint8))
    sub = 16  # cv2 fixed-point shift 4: sub-texel shape positions
    cx, cy = p[:, 1] * (w + 2 * radii) - radii, p[:, 2] * (h + 2 * radii) - radii
    centers = np.round(np.stack([cx, cy], -1) * sub).astype(np.int64).tolist()
    rad_fixed = np.round(radii * sub).astype(np.int64).tolist()
    # rotated rectangles: corners of all of them at once, (n, 4, 2) fixed-point
    rx, ry, ang = radii * (0.4 + p[:, 4]), radii * (0.4 + p[:, 5]), p[:, 6] * math.pi
    sx, sy = np.array([-1, 1, 1, -1.0]), np.array([-1, -1, 1, 1.0])
    dx, dy = rx[:, None] * sx, ry[:, None] * sy
    c, s_ = np.cos(ang)[:, None], np.sin(ang)[:, None]
    quads = np.round(np.stack([cx[:, None] + c * dx - s_ * dy, cy[:, None] + s_ * dx + c * dy],
                              -1) * sub).astype(np.int32)
    squares = np.maximum(3, (radii * 0.6).astype(np.int64)).tolist()
    for i, kind_u in enumerate(p[:, 0].tolist()):
        if kind_u < 0.4:  # disc: a blob
            cv2.circle(img, centers[i], rad_fixed[i], colors[i], -1, cv2.LINE_AA, 4)
        elif kind_u < 0.85:  # rotated rectangle: corners
            cv2.fillPoly(img, [quads[i]], colors[i], cv2.LINE_AA, 4)
        else:  # 2x2 checker aligned to the texel grid: one crisp X-corner
            sq = squares[i]
            x0, y0 = max(0, centers[i][0] // sub), max(0, centers[i][1] // sub)
            img[y0:y0 + sq, x0 + sq:x0 + 2 * sq] = colors[i]
            img[y0 + sq:y0 + 2 * sq, x0:x0 + sq] = colors[i]
    out = torch.from_numpy(img).permute(2, 0, 1).float() / 255.0
    shading = 0.9 + 0.2 * (0.5 + 0.5 * value_noise(h, w, gen, coarsest=48, finest=6))
    return (out * shading).clamp(0, 1)


@dataclass
class TextureAtlas:
    """Textures packed into one image with a mip pyramid, for one-call bilinear lookup.

    Attributes:
        levels: list of (1, 3, Ha / 2^l, Wa / 2^l) float32 atlases (level 0 = full resolution).
        regions: (R, 4) float64 (x0, y0, w, h) in level-0 texels of each texture.
    """

    levels: List[torch.Tensor]
    regions: torch.Tensor

    def to(self, device: torch.device, dtype: torch.dtype) -> "TextureAtlas":
        return TextureAtlas([lv.to(device=device, dtype=dtype) for lv in self.levels],
                            self.regions.to(device=device))


def pack_atlas(textures: Sequence[torch.Tensor], num_levels: int = 4, pad: int = 8) -> TextureAtlas:
    """Shelf-pack textures (each (3, h, w)) into a mip-mapped :class:`TextureAtlas`.

    Every region starts at a multiple of ``2^(num_levels-1)`` texels with ``pad`` texels of
    edge-replicated border, so bilinear and coarser-level lookups do not bleed between textures.
    """
    align = 2 ** (num_levels - 1)
    pad = int(math.ceil(pad / align) * align)
    sizes = [(int(t.shape[1]), int(t.shape[2])) for t in textures]
    width = max(1024, max(w for _, w in sizes) + 2 * pad)
    width = int(math.ceil(width / align) * align)
    order = sorted(range(len(textures)), key=lambda i: -sizes[i][0])
    placed: List[Tuple[int, int]] = [(0, 0)] * len(textures)
    x = y = shelf = 0
    for i in order:
        h, w = sizes[i]
        cell_w = int(math.ceil((w + 2 * pad) / align) * align)
        cell_h = int(math.ceil((h + 2 * pad) / align) * align)
        if x + cell_w > width:
            x, y, shelf = 0, y + shelf, 0
        placed[i] = (x + pad, y + pad)
        x += cell_w
        shelf = max(shelf, cell_h)
    height = int(math.ceil((y + shelf) / align) * align)
    atlas = torch.zeros(3, height, width)
    for tex, (px, py), (h, w) in zip(textures, placed, sizes):
        padded = F.pad(tex[None], (pad, pad, pad, pad), mode="replicate")[0]
        atlas[:, py - pad:py + h + pad, px - pad:px + w + pad] = padded
    levels = [atlas[None]]
    for _ in range(num_levels - 1):
        levels.append(F.avg_pool2d(levels[-1], 2))
    regions = torch.tensor([[px, py, w, h] for (px, py), (h, w) in zip(placed, sizes)],
                           dtype=torch.float64)
    return TextureAtlas(levels, regions)
