"""A second, independent renderer: textured planes at several depths (a held-out scene family).

The grounded scenes (:mod:`~geocon_torch.synth.scenes`) are rooms of boxes and panels, ray-cast
with dead-leaves textures; the report gate is calibrated on them. This module renders a family
the calibration never sees, with its own geometry, textures and compositing, so that the
calibrated gate can be validated on clips it was not fitted to (``benchmarks/
calibration_heldout.py``):

* **scene**: a far backdrop plane (covers the view throughout the motion) and ``num_planes``
  smaller rectangles at depths spread over ``depth_range`` (world units; the camera starts at the
  origin looking down +z), each turned by up to 25 deg about its own x and y axes;
* **textures**: :func:`spectral_texture`, coloured 1/f^beta noise (FFT-shaped Gaussian noise,
  partly posterised into plateaus with soft contours): no discs, rectangles or checkers as in
  :mod:`~geocon_torch.synth.textures`;
* **compositing**: every plane is drawn through its exact plane-to-image homography
  ``G = K [R | t] [w U, h V, O]`` (plane coordinates (s, t) in [0, 1]^2 to pixels): each pixel
  takes ``(s, t) ~ G^-1 x`` and the plane's camera depth there; the nearest plane in front of the
  camera wins (a per-pixel z-test, which is painter's order for planes that do not interpenetrate).
  ``supersample`` renders at that factor and box-filters down (pixel centres stay exact);
* **motions** (:data:`PLANE_MOTIONS`, with the regime they should be gated as): ``pan`` and
  ``roll`` rotate about the camera centre (H: every plane moves by ``K R K^-1``); ``truck``,
  ``arc`` (orbit about the middle depth, camera turning to keep it centred) and ``dolly``
  translate (F: parallax between the planes). ``speed`` scales every motion.

The corruptions of :func:`~geocon_torch.synth.corruptions.apply_corruption` apply unchanged
(``render_planes(..., corruption="breathing", severity=0.5)``). Everything is float64 until the
final uint8 frames and drawn from ``torch.Generator(seed)``: the same arguments give the same
frames.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import torch
import torch.nn.functional as F

from .._checks import check_integer
from ..errors import InputError
from . import camera as cam
from .clip import SynthClip
from .corruptions import apply_corruption, check_corruption

_F64 = torch.float64

#: motion -> the regime a correct gate assigns (rotation about the centre: H; translation: F)
PLANE_MOTIONS = {"pan": "H", "roll": "H", "truck": "F", "arc": "F", "dolly": "F"}
#: the SynthClip category of each regime (grounded-scene codes: C2 rotation, C3 translation)
_CATEGORY = {"H": "C2", "F": "C3"}


def spectral_texture(h: int, w: int, gen: torch.Generator, beta: float = 2.0,
                     levels: int = 5) -> torch.Tensor:
    """(3, h, w) float32 RGB in [0, 1]: coloured 1/f^beta noise.

    Three Gaussian noise fields are shaped in the Fourier domain (float32) to a power spectrum ~
    f^-beta
    (scale-free blobs from a few texels to the whole texture) and normalised to zero mean and
    unit deviation; the luminance is half the first field posterised into ``levels`` plateaus
    with soft contours (corners and edges) and half the field itself; the other two fields tint
    it between two random palette colours.
    """
    if h < 8 or w < 8:
        raise InputError(f"texture must be at least 8x8 texels, got {h}x{w}")
    noise = torch.randn((3, h, w), generator=gen, dtype=torch.float32)
    fy = torch.fft.fftfreq(h, dtype=torch.float32).view(-1, 1)
    fx = torch.fft.rfftfreq(w, dtype=torch.float32).view(1, -1)
    radius = (fx * fx + fy * fy).sqrt().clamp_min(1.0 / max(h, w))
    field = torch.fft.irfft2(torch.fft.rfft2(noise) * radius ** (-0.5 * beta), s=(h, w))
    field = (field - field.mean((1, 2), keepdim=True)) / field.std(dim=(1, 2), keepdim=True)
    x = (field[0] * 0.9 + 2.5) * (levels / 5.0)  # about [0, levels]
    frac = x - x.floor()
    poster = (x.floor() + torch.sigmoid((frac - 0.5) * 24.0)).clamp(0, levels) / levels
    lum = (0.5 * poster + 0.5 * torch.sigmoid(field[0] * 1.2)).clamp(0, 1)
    palette = torch.rand((2, 3), generator=gen, dtype=torch.float32) * 0.8 + 0.2
    tint = torch.sigmoid(field[1:3]).unsqueeze(1)  # (2, 1, h, w)
    colour = palette[0].view(3, 1, 1) * tint[0] + palette[1].view(3, 1, 1) * tint[1]
    rgb = 0.12 + 0.8 * lum * colour / colour.amax(0, keepdim=True).clamp_min(1e-6)
    return rgb.clamp(0, 1).float()


@dataclass
class PlaneScene:
    """Planes and camera of one clip.

    Attributes:
        origins, axis_u, axis_v: (K, 3) world corner and unit edge directions of each plane.
        extent: (K, 2) edge lengths (world units) along ``axis_u`` / ``axis_v``.
        textures: K tensors (3, h_k, w_k) float32.
        K: (3, 3) intrinsics; poses: (T, 4, 4) world-to-camera; size: (H, W) px.
        motion: one of :data:`PLANE_MOTIONS`.
    """

    origins: torch.Tensor
    axis_u: torch.Tensor
    axis_v: torch.Tensor
    extent: torch.Tensor
    textures: list
    K: torch.Tensor
    poses: torch.Tensor
    size: tuple[int, int]
    motion: str

    def plane_to_image(self, K: torch.Tensor | None = None) -> torch.Tensor:
        """(T, K_planes, 3, 3) ``G = K [R | t] [w U, h V, O]``: plane coordinates (s, t, 1),
        s, t in [0, 1], to homogeneous pixels (third row: camera depth of the point)."""
        kk = self.K if K is None else K
        basis = torch.stack([self.axis_u * self.extent[:, :1], self.axis_v * self.extent[:, 1:],
                             self.origins], -1)  # (K, 3, 3) world columns
        rot, trans = self.poses[:, None, :3, :3], self.poses[:, None, :3, 3:]
        cam_basis = rot @ basis[None] + torch.cat(
            [torch.zeros_like(trans).expand(-1, -1, 3, 2), trans], -1)
        return kk @ cam_basis

    def plane_homographies(self, i: int, j: int) -> torch.Tensor:
        """(K_planes, 3, 3) exact homographies ``x_j ~ H_k x_i`` of every plane between frames
        i and j (normalised so H[2, 2] = 1)."""
        g = self.plane_to_image()
        h = g[j] @ torch.linalg.inv(g[i])
        return h / h[:, 2:3, 2:3]


def _turn(angles: torch.Tensor) -> torch.Tensor:
    """(K, 3, 3) rotations about x by angles[:, 0] then y by angles[:, 1] (radians)."""
    rx = cam.rotation((1.0, 0.0, 0.0), angles[:, 0])
    ry = cam.rotation((0.0, 1.0, 0.0), angles[:, 1])
    return ry @ rx


def _poses(motion: str, num_frames: int, speed: float, mid: float) -> torch.Tensor:
    """(T, 4, 4) world-to-camera poses of ``motion`` starting at the origin looking down +z."""
    base = cam.make_pose(torch.eye(3, dtype=_F64), torch.zeros(3, dtype=_F64))
    if motion == "pan":
        return cam.rotate_trajectory(base, num_frames, (0.0, 1.0, 0.0), 0.45 * speed)
    if motion == "roll":
        return cam.rotate_trajectory(base, num_frames, (0.15, 0.25, 1.0), 0.8 * speed)
    if motion == "truck":
        return cam.translate_trajectory(base, num_frames, (1.0, 0.08, 0.0), 0.012 * mid * speed)
    if motion == "dolly":
        return cam.translate_trajectory(base, num_frames, (0.05, 0.0, 1.0), 0.012 * mid * speed)
    # arc: orbit about the middle depth, the camera turned towards it
    rate = 0.7 * speed
    return cam.orbit_trajectory((0.0, 0.0, mid), mid, num_frames, -0.5 * rate * num_frames,
                                rate)


def build_planes(motion: str = "truck", *, num_frames: int = 24,
                 size: tuple[int, int] = (384, 640), seed: int = 0, num_planes: int = 3,
                 depth_range: tuple[float, float] = (2.0, 10.0), speed: float = 1.0,
                 focal_scale: float = 0.85, texel_density: float = 1.0) -> PlaneScene:
    """The planes, textures and camera path of one clip (see the module doc).

    Args:
        motion: a key of :data:`PLANE_MOTIONS`.
        num_frames: T >= 1; size: (H, W) px.
        seed: layout, turns and textures.
        num_planes: foreground rectangles in front of the backdrop (0-6).
        depth_range: (near, far) world units, 0 < near < far: the backdrop sits at far, the
            rectangles in between.
        speed: multiplies the motion's rate (pan 0.45 deg / frame, roll 0.8, truck and dolly
            1.2 % of the middle depth per frame, arc 0.7 deg / frame of orbit).
        focal_scale: f / W.
        texel_density: texels per pixel of the plane at its depth in frame 0.
    """
    if motion not in PLANE_MOTIONS:
        raise InputError(f"unknown plane motion {motion!r}; use one of {tuple(PLANE_MOTIONS)}")
    near, far = float(depth_range[0]), float(depth_range[1])
    if not 0 < near < far:
        raise InputError(f"depth_range must be 0 < near < far, got {depth_range!r}")
    if not 0 <= int(num_planes) <= 6 or int(num_frames) < 1:
        raise InputError(f"num_planes must be in 0..6 and num_frames >= 1, got {num_planes}, "
                         f"{num_frames}")
    h, w = int(size[0]), int(size[1])
    gen = torch.Generator().manual_seed(int(seed) * 9973 + 17)
    kk = cam.intrinsics((h, w), focal_scale)
    f = float(kk[0, 0])
    n = int(num_planes)
    r = torch.rand((max(n, 1), 6), generator=gen, dtype=_F64)[:n]
    # depths spread over [near, 0.8 far] in log space (one plane per stratum), positions within
    # the middle of the view, sizes 30-55 % of the view at that depth
    strata = (torch.arange(n, dtype=_F64) + 0.2 + 0.6 * r[:, 0]) / max(n, 1)
    depth = near * (0.8 * far / near) ** strata
    half_x, half_y = 0.5 * w / f, 0.5 * h / f  # view half-extents per unit depth
    side = (0.3 + 0.25 * r[:, 1]) * 2 * half_x * depth
    centre = torch.stack([(r[:, 2] - 0.5) * 1.2 * half_x * depth,
                          (r[:, 3] - 0.5) * 1.2 * half_y * depth, depth], -1)
    turn = _turn(torch.stack([(r[:, 4] - 0.5), (r[:, 5] - 0.5)], -1) * math.radians(50))
    aspect = 0.6 + 0.4 * torch.rand(n, generator=gen, dtype=_F64)
    ext = torch.stack([side, side * aspect], -1)
    # the backdrop: fronto-parallel at far, 3x the view (covers every motion's sweep)
    back_ext = torch.tensor([[6 * half_x * far, 6 * half_y * far + 2 * half_x * far]],
                            dtype=_F64)
    u = torch.cat([torch.tensor([[1.0, 0.0, 0.0]], dtype=_F64), turn[:, :, 0]])
    v = torch.cat([torch.tensor([[0.0, 1.0, 0.0]], dtype=_F64), turn[:, :, 1]])
    extent = torch.cat([back_ext, ext])
    centres = torch.cat([torch.tensor([[0.0, 0.0, far]], dtype=_F64), centre])
    origins = centres - 0.5 * (u * extent[:, :1] + v * extent[:, 1:])
    mid = math.sqrt(near * far)
    poses = _poses(motion, int(num_frames), float(speed), mid)
    # textures: texel_density texels per px at the plane's depth in frame 0 (at most 2048)
    z = centres[:, 2].clamp_min(near)
    texels = (extent * (f / z)[:, None] * float(texel_density)).clamp(16, 2048)
    textures = [spectral_texture(int(th), int(tw), gen) for tw, th in texels.round().tolist()]
    return PlaneScene(origins, u, v, extent, textures, kk, poses, (h, w), motion)


#: supersampled pixels rendered per chunk of frames when ``chunk_frames`` is None: a pixel
#: takes ~125 bytes of float64 / float32 working memory, so a chunk stays near 250 MB (two
#: frames of 640x384 at supersample 2) whatever the clip's length
CHUNK_PIXELS = 1 << 21


def _plane_pass(scene: PlaneScene, g: torch.Tensor, g_inv: torch.Tensor, ss: int
                ) -> torch.Tensor:
    """(n, 3, H, W) float32 RGB of the n frames whose plane-to-image maps (at ``ss`` x the
    size) are ``g`` / ``g_inv`` (n, K_planes, 3, 3); see :func:`render_planes_frames`."""
    h, w = scene.size
    hs, ws = h * ss, w * ss
    t_n = g.shape[0]
    xs = torch.arange(ws, dtype=_F64).view(1, 1, ws)
    ys = torch.arange(hs, dtype=_F64).view(1, hs, 1)
    best = torch.full((t_n, hs, ws), float("inf"), dtype=_F64)
    out = torch.zeros(t_n, 3, hs, ws, dtype=torch.float32)
    for k, tex in enumerate(scene.textures):  # a handful of planes: one batched pass each
        gi = g_inv[:, k].reshape(t_n, 9, 1, 1)
        # (s, t, 1) ~ G^-1 x, per pixel, as broadcast products (T, hs, ws)
        den = gi[:, 6] * xs + gi[:, 7] * ys + gi[:, 8]
        s_ = (gi[:, 0] * xs + gi[:, 1] * ys + gi[:, 2]) / den
        t_ = (gi[:, 3] * xs + gi[:, 4] * ys + gi[:, 5]) / den
        gz = g[:, k, 2].reshape(t_n, 3, 1, 1)
        depth = gz[:, 0] * s_ + gz[:, 1] * t_ + gz[:, 2]  # camera z of the hit
        inside = ((s_ >= 0) & (s_ <= 1) & (t_ >= 0) & (t_ <= 1) & (depth > 1e-6)
                  & (depth < best))
        st = torch.stack([s_, t_], -1)
        grid = (st * 2 - 1).float()
        rgb = F.grid_sample(tex.unsqueeze(0), grid.view(1, t_n * hs, ws, 2), mode="bilinear",
                            padding_mode="border", align_corners=True)
        rgb = rgb.view(3, t_n, hs, ws).transpose(0, 1)
        sel = inside.unsqueeze(1)
        out = torch.where(sel, rgb, out)
        best = torch.where(inside, depth, best)
    return F.avg_pool2d(out, ss) if ss > 1 else out


def _plane_chunks(scene: PlaneScene, supersample: int, chunk_frames: int | None
                  ) -> Iterator[tuple[int, torch.Tensor]]:
    """``(t0, rgb (n, 3, H, W) float32)`` per chunk of frames ``t0 .. t0 + n - 1``: the plane
    maps of all frames are computed once, each chunk composites its own frames only."""
    ss = max(1, int(supersample))
    h, w = scene.size
    # high-resolution intrinsics: low-res pixel centre i sits at ss * i + (ss - 1) / 2
    up = torch.tensor([[ss, 0.0, (ss - 1) / 2.0], [0.0, ss, (ss - 1) / 2.0], [0.0, 0.0, 1.0]],
                      dtype=_F64)
    g = scene.plane_to_image(up @ scene.K)  # (T, Kp, 3, 3)
    g_inv = torch.linalg.inv(g)
    t_n = g.shape[0]
    if chunk_frames is None:
        chunk_frames = CHUNK_PIXELS // (h * w * ss * ss)
    step = max(1, min(int(chunk_frames), t_n))
    for t0 in range(0, t_n, step):
        yield t0, _plane_pass(scene, g[t0:t0 + step], g_inv[t0:t0 + step], ss)


def render_planes_frames(scene: PlaneScene, supersample: int = 2,
                         chunk_frames: int | None = None) -> torch.Tensor:
    """(T, 3, H, W) float32 RGB in [0, 1] of ``scene`` (per-pixel nearest plane in front of the
    camera; pixels that see no plane are black), rendered at ``supersample`` x the size and
    box-filtered down, ``chunk_frames`` frames at a time (None: :data:`CHUNK_PIXELS`
    supersampled pixels a chunk, at least one frame; any value gives the same frames, bit for
    bit); InputError for ``chunk_frames`` < 1."""
    chunk_frames = _check_chunk(chunk_frames)
    h, w = scene.size
    out = torch.empty(scene.poses.shape[0], 3, h, w, dtype=torch.float32)
    for t0, rgb in _plane_chunks(scene, supersample, chunk_frames):
        out[t0:t0 + rgb.shape[0]] = rgb
    return out


def _check_chunk(chunk_frames: int | None) -> int | None:
    """``chunk_frames`` as an int >= 1, or None (ArgumentTypeError / InputError otherwise)."""
    return None if chunk_frames is None else check_integer(chunk_frames, "chunk_frames", 1)


def render_planes(motion: str = "truck", *, num_frames: int = 24,
                  size: tuple[int, int] = (384, 640), seed: int = 0,
                  corruption: str | None = None, severity: float = 0.0,
                  supersample: int = 2, chunk_frames: int | None = None,
                  **options) -> SynthClip:
    """One held-out clip of textured planes with exact ground truth.

    Args:
        motion, num_frames, size, seed, options (num_planes, depth_range, speed, focal_scale,
            texel_density): see :func:`build_planes`.
        corruption, severity: as :func:`~geocon_torch.synth.render_scene` (applied to the
            rendered frames with ``seed``).
        supersample: render factor before the box filter (1 = none).
        chunk_frames: frames rendered at a time (an integer >= 1; None: a budget of
            :data:`CHUNK_PIXELS` supersampled pixels, two frames of 640x384 at supersample 2);
            any value gives the same clip, bit for bit.
    Returns:
        :class:`~geocon_torch.synth.SynthClip`: frames (T, 3, H, W) uint8, no masks, poses,
        intrinsics, ``true_homographies`` (T-1, 3, 3) for the rotation motions (None for the
        translating ones), ``category`` C2 (H) / C3 (F), ``meta`` with ``generator: planes``,
        the motion, the options and ``expected_regime``.
    """
    corruption = check_corruption(corruption, severity)
    chunk_frames = _check_chunk(chunk_frames)
    scene = build_planes(motion, num_frames=num_frames, size=size, seed=seed, **options)
    h, w = scene.size
    frames = torch.empty(scene.poses.shape[0], 3, h, w, dtype=torch.uint8)
    for t0, rgb in _plane_chunks(scene, supersample, chunk_frames):  # uint8 chunk by chunk
        frames[t0:t0 + rgb.shape[0]] = (rgb * 255).round().to(torch.uint8)
    if corruption is not None and severity > 0:
        frames = apply_corruption(frames, corruption, severity, seed=int(seed))
    regime = PLANE_MOTIONS[motion]
    true_h = None
    if regime == "H" and scene.poses.shape[0] > 1:
        true_h = cam.rotation_homography(scene.K, cam.relative_pose(scene.poses[:-1],
                                                                     scene.poses[1:]))
    tag = f"_{corruption}{float(severity):.2f}" if corruption else ""
    meta = {"generator": "planes", "motion": motion, "expected_regime": regime,
            "options": {k: (list(v) if isinstance(v, tuple) else v) for k, v in options.items()},
            "prompt": f"textured planes, camera {motion}"}
    return SynthClip(frames=frames, masks=torch.zeros(frames.shape[0], 0, h, w, dtype=torch.bool),
                     intrinsics=scene.K, poses=scene.poses, true_homographies=true_h,
                     category=_CATEGORY[regime], corruption=corruption,
                     severity=float(severity) if corruption else 0.0, meta=meta, seed=int(seed),
                     clip_id=f"planes_{motion}_seed{int(seed)}{tag}")


__all__ = [
    "PLANE_MOTIONS",
    "PlaneScene",
    "build_planes",
    "render_planes",
    "render_planes_frames",
    "spectral_texture",
]
