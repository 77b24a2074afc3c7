"""The six grounded scene categories of paper sec. 5.2, rendered with exact geometry.

Every scene is a textured room (x in [-10, 10], y in [-5, 1.6] with the floor at y = 1.6, z in
[-8, 14]; world y points down as the camera's) with seeded props: boxes on the floor and upright
panels at several depths. The camera starts at the origin looking slightly down the +z axis.

========  ====================  ==========================================================
category  alias                 camera / content (``motion`` option)
========  ====================  ==========================================================
C1        static                locked-off camera, nothing moves
C2        rotation              pan | tilt | roll about the fixed camera centre
C3        translation           truck (lateral) | dolly (forward), parallax from props
C4        moving_object         static camera, 1-3 textured boxes translate and yaw
C5        complex               arc (circle about the scene centre) | orbit (about a prop)
C6        stress                truck past thin poles and wires, a low-texture wall,
                                a near occluding panel (``stress`` option: thin,
                                low_texture, occlusion or all)
========  ====================  ==========================================================
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch

from .._checks import check_integer
from .._version import __version__
from ..categories import CATEGORY_NAMES, EXPECTED_REGIME, canonical_category
from . import camera as cam
from .clip import SynthClip
from .corruptions import apply_corruption, check_corruption
from .raycast import Rects, render_chunks, screen_bounds
from .textures import make_texture, pack_atlas
from ..errors import InputError

MOTIONS = {"C1": ("static",), "C2": ("pan", "tilt", "roll"), "C3": ("truck", "dolly"),
           "C4": ("static",), "C5": ("arc", "orbit"), "C6": ("truck",)}
STRESS_KINDS = ("thin", "low_texture", "occlusion", "all")
FLOOR_Y = 1.6
ROOM = ((-10.0, 10.0), (-5.0, FLOOR_Y), (-8.0, 14.0))
MAX_TEXTURE_SIDE = 2048


@functools.lru_cache(maxsize=4)
def _cached_atlas(specs: Tuple[Tuple[int, int, int, str], ...]):
    """Atlas of the textures ``(h, w, seed, kind)`` (cached: re-rendering a scene is cheap)."""
    return pack_atlas([make_texture(*spec) for spec in specs])


@dataclass
class _Rect:
    origin: torch.Tensor  # (T, 3)
    u: torch.Tensor
    v: torch.Tensor
    object_id: int
    kind: str
    view_distance: float  # distance used to pick the texel density
    name: str
    facing: torch.Tensor  # (T, 3) normal of the visible side, zeros = two-sided


@dataclass
class SceneBuilder:
    """Collects rectangles and boxes (static or with per-frame rigid motion) for one clip."""

    num_frames: int
    seed: int
    rects: List[_Rect] = field(default_factory=list)
    objects: List[str] = field(default_factory=list)

    def _expand(self, x: Sequence[float] | torch.Tensor) -> torch.Tensor:
        x = torch.as_tensor(x, dtype=torch.float64)
        return x.expand(self.num_frames, 3) if x.ndim == 1 else x

    def rect(self, origin, u, v, *, kind: str = "rich", object_id: int = 0,
             view_distance: float = 6.0, name: str = "panel", facing=(0.0, 0.0, 0.0)) -> None:
        """Add a rectangle ``origin + a u + b v`` (each (3,) static or (T, 3) per frame);
        ``facing`` is the normal of its visible side (zeros: visible from both sides)."""
        self.rects.append(_Rect(self._expand(origin), self._expand(u), self._expand(v),
                                object_id, kind, view_distance, name, self._expand(facing)))

    def box(self, center, half: Sequence[float], *, rotation: Optional[torch.Tensor] = None,
            kind: str = "rich", object_id: int = 0, view_distance: float = 6.0,
            name: str = "box") -> None:
        """Add a box of half extents ``half`` centred at ``center`` ((3,) or (T, 3)), rotated by
        ``rotation`` ((3, 3) or (T, 3, 3), box frame to world), as six rectangles."""
        hx, hy, hz = (float(x) for x in half)
        c = self._expand(center)
        rot = torch.eye(3, dtype=torch.float64) if rotation is None else rotation
        rot = rot.to(torch.float64).expand(self.num_frames, 3, 3)
        faces = [  # (origin, u, v, outward normal) in box coordinates
            ((hx, -hy, -hz), (0, 0, 2 * hz), (0, 2 * hy, 0), (1, 0, 0)),
            ((-hx, -hy, -hz), (0, 0, 2 * hz), (0, 2 * hy, 0), (-1, 0, 0)),
            ((-hx, hy, -hz), (2 * hx, 0, 0), (0, 0, 2 * hz), (0, 1, 0)),
            ((-hx, -hy, -hz), (2 * hx, 0, 0), (0, 0, 2 * hz), (0, -1, 0)),
            ((-hx, -hy, hz), (2 * hx, 0, 0), (0, 2 * hy, 0), (0, 0, 1)),
            ((-hx, -hy, -hz), (2 * hx, 0, 0), (0, 2 * hy, 0), (0, 0, -1)),
        ]

        def world(vec, offset=None):
            out = (rot @ torch.tensor(vec, dtype=torch.float64)[:, None]).squeeze(-1)
            return out if offset is None else out + offset

        for i, (o, u, v, nrm) in enumerate(faces):
            self.rects.append(_Rect(world(o, c), world(u), world(v), object_id, kind,
                                    view_distance, f"{name}/face{i}", world(nrm)))

    def moving_object(self, name: str) -> int:
        """Register a moving object; returns its id (mask index + 1)."""
        self.objects.append(name)
        return len(self.objects)

    def room(self, wall_kinds: Optional[Dict[str, str]] = None) -> None:
        """The enclosing textured room (back, front, left, right walls, floor, ceiling)."""
        (x0, x1), (y0, y1), (z0, z1) = ROOM
        k = {"back": "rich", "front": "rich", "left": "rich", "right": "rich", "floor": "rich",
             "ceiling": "sparse"}
        k.update(wall_kinds or {})
        zm = 1.0  # the floor is split: fine texels ahead of the camera, coarser behind
        self.rect((x0, y0, z1), (x1 - x0, 0, 0), (0, y1 - y0, 0), kind=k["back"],
                  view_distance=z1, name="wall/back", facing=(0, 0, -1))
        self.rect((x0, y0, z0), (x1 - x0, 0, 0), (0, y1 - y0, 0), kind=k["front"],
                  view_distance=-z0, name="wall/front", facing=(0, 0, 1))
        self.rect((x0, y0, z0), (0, 0, z1 - z0), (0, y1 - y0, 0), kind=k["left"],
                  view_distance=-x0, name="wall/left", facing=(1, 0, 0))
        self.rect((x1, y0, z0), (0, 0, z1 - z0), (0, y1 - y0, 0), kind=k["right"],
                  view_distance=x1, name="wall/right", facing=(-1, 0, 0))
        self.rect((x0, y1, zm), (x1 - x0, 0, 0), (0, 0, z1 - zm), kind=k["floor"],
                  view_distance=5.0, name="floor", facing=(0, -1, 0))
        self.rect((x0, y1, z0), (x1 - x0, 0, 0), (0, 0, zm - z0), kind=k["floor"],
                  view_distance=8.0, name="floor/behind", facing=(0, -1, 0))
        self.rect((x0, y0, z0), (x1 - x0, 0, 0), (0, 0, z1 - z0), kind=k["ceiling"],
                  view_distance=8.0, name="ceiling", facing=(0, 1, 0))

    def build(self, K: torch.Tensor, size: Tuple[int, int], poses: torch.Tensor,
              texel_scale: float = 1.0):
        """Pack the textures and return ``(Rects, atlas, texel_density (R,))``.

        Texel density is ``texel_scale * f / view_distance`` texels per world unit (about one
        texel per pixel at the view distance). Rectangles that no frame of ``poses`` can see get
        an 8x8 placeholder texture instead of a full one.
        """
        rects = Rects(origin=torch.stack([r.origin for r in self.rects], 1),
                      u=torch.stack([r.u for r in self.rects], 1),
                      v=torch.stack([r.v for r in self.rects], 1),
                      object_id=torch.tensor([r.object_id for r in self.rects], dtype=torch.long),
                      texture=torch.arange(len(self.rects)),
                      facing=torch.stack([r.facing for r in self.rects], 1))
        seen = _seen_anywhere(K, size, poses, rects)
        specs, density = [], []
        for i, r in enumerate(self.rects):
            dens = texel_scale * float(K[0, 0]) / max(r.view_distance, 0.5)
            lu, lv = float(r.u[0].norm()), float(r.v[0].norm())
            dens *= min(1.0, MAX_TEXTURE_SIDE / max(lu * dens, lv * dens))
            w, h = max(8, int(round(lu * dens))), max(8, int(round(lv * dens)))
            if not seen[i]:
                w = h = 8
            specs.append((h, w, (self.seed * 1_000_003 + i * 7919) % 2**31, r.kind))
            density.append(math.sqrt((w / lu) * (h / lv)))
        return rects, _cached_atlas(tuple(specs)), torch.tensor(density, dtype=torch.float64)


def _seen_anywhere(K: torch.Tensor, size: Tuple[int, int], poses: torch.Tensor,
                   rects: Rects) -> List[bool]:
    """Whether each rectangle's clipped screen bounds overlap the image in some frame."""
    h, w = size
    kinv = torch.linalg.inv(K)
    lo = kinv @ torch.tensor([-0.5, -0.5, 1.0], dtype=torch.float64)
    hi = kinv @ torch.tensor([w - 0.5, h - 0.5, 1.0], dtype=torch.float64)
    box, vis = screen_bounds(poses, rects)
    over = ((box[..., 1] >= lo[0]) & (box[..., 0] <= hi[0]) & (box[..., 3] >= lo[1])
            & (box[..., 2] <= hi[1]) & vis)
    return over.any(0).tolist()


# ----------------------------------------------------------------------------------- props
def _uniform(gen: torch.Generator, lo: float, hi: float) -> float:
    return lo + (hi - lo) * float(torch.rand((), generator=gen, dtype=torch.float64))


def _props(b: SceneBuilder, gen: torch.Generator, *, z_range=(3.5, 11.0), x_range=(-4.5, 4.5),
           boxes: int = 4, panels: int = 3, keep_out: Sequence[Tuple[float, float, float]] = ()
           ) -> None:
    """Seeded static boxes on the floor and upright panels at several depths (kept out of the
    discs (x, z, radius) in ``keep_out``)."""
    placed: List[Tuple[float, float, float]] = list(keep_out)

    def spot(radius: float) -> Tuple[float, float]:
        for _ in range(200):
            x, z = _uniform(gen, *x_range), _uniform(gen, *z_range)
            if all((x - px) ** 2 + (z - pz) ** 2 > (radius + pr) ** 2 for px, pz, pr in placed):
                placed.append((x, z, radius))
                return x, z
        placed.append((x, z, radius))
        return x, z

    for i in range(boxes):
        hx, hy, hz = _uniform(gen, 0.3, 0.8), _uniform(gen, 0.3, 0.9), _uniform(gen, 0.3, 0.8)
        x, z = spot(math.hypot(hx, hz))
        yaw = cam.rotation((0, 1, 0), torch.tensor(_uniform(gen, -0.6, 0.6)))
        b.box((x, FLOOR_Y - hy, z), (hx, hy, hz), rotation=yaw, view_distance=z,
              name=f"prop_box{i}")
    for i in range(panels):
        w, h = _uniform(gen, 0.8, 2.0), _uniform(gen, 1.2, 3.0)
        x, z = spot(w / 2)
        ang = _uniform(gen, -0.5, 0.5)
        u = (w * math.cos(ang), 0.0, w * math.sin(ang))
        b.rect((x - u[0] / 2, FLOOR_Y - h, z - u[2] / 2), u, (0, h, 0), view_distance=z,
               name=f"prop_panel{i}")


def _capped(rate: float, num_frames: int, total_max: float) -> float:
    """Per-frame rate, reduced so that (T - 1) * rate stays within ``total_max``."""
    if num_frames <= 1:
        return rate
    return math.copysign(min(abs(rate), total_max / (num_frames - 1)), rate)


_BASE_EYE, _BASE_TARGET = (0.0, 0.0, 0.0), (0.0, 0.5, 10.0)

PROMPTS = {
    ("C1", "static"): "Single static shot. The camera is locked down in a textured room with "
                      "boxes and panels at several depths. Nothing moves.",
    ("C2", "pan"): "Single static shot. The camera pans left in place inside a textured room "
                   "with boxes and panels at several depths. No translation. Background "
                   "absolutely fixed.",
    ("C2", "tilt"): "Single static shot. The camera tilts up in place inside a textured room. "
                    "No translation. Background absolutely fixed.",
    ("C2", "roll"): "Single static shot. The camera rolls anticlockwise in place inside a "
                    "textured room. No translation. Background absolutely fixed.",
    ("C3", "truck"): "Single static shot. The camera trucks right past boxes and panels at "
                     "several depths, revealing parallax (near vs far).",
    ("C3", "dolly"): "Single static shot. The camera dollies in towards boxes and panels at "
                     "several depths, creating true motion parallax.",
    ("C4", "static"): "Static camera. Textured boxes slide and turn across the floor in front "
                      "of a fixed room. Background must stay rigid.",
    ("C5", "arc"): "Single continuous shot. The camera arcs around the centre of a textured "
                   "room with boxes and panels at several depths.",
    ("C5", "orbit"): "Single continuous shot. The camera orbits around a textured box while "
                     "rising slightly, near and far objects in view.",
    ("C6", "truck"): "Single static shot. The camera trucks right past thin poles and wires, a "
                     "plain low-texture wall and a near panel that occludes the background.",
}


# --------------------------------------------------------------------------------- categories
def _scene_static(b, gen, t, o):
    b.room()
    _props(b, gen)
    return cam.look_at(_BASE_EYE, _BASE_TARGET).expand(t, 4, 4).clone()


def _scene_rotation(b, gen, t, o):
    b.room()
    _props(b, gen)
    base = cam.look_at(_BASE_EYE, _BASE_TARGET)
    motion = o["motion"]
    axis = {"pan": (0, 1, 0), "tilt": (1, 0, 0), "roll": (0, 0, 1)}[motion]
    default = {"pan": 0.4, "tilt": -0.3, "roll": 0.5}[motion]
    rate = _capped(float(o.get("rate", default)), t, 30.0)
    return cam.rotate_trajectory(base, t, axis, rate)


def _scene_translation(b, gen, t, o):
    b.room()
    motion = o["motion"]
    speed = _capped(float(o.get("speed", 0.06 if motion == "truck" else 0.12)), t, 4.0)
    end = speed * (t - 1)
    if motion == "truck":
        keep = [(x, 0.0, 0.8) for x in torch.linspace(0, end, 8).tolist()]
    else:
        keep = [(0.0, z, 0.9) for z in torch.linspace(0, end + 1.5, 12).tolist()]
    # a near layer (large parallax), a middle layer, then the far walls
    _props(b, gen, z_range=(2.2, 4.0), x_range=(-2.5, 2.5 + (end if motion == "truck" else 0)),
           boxes=2, panels=2, keep_out=keep)
    _props(b, gen, z_range=(5.5, 11.0), boxes=3, panels=2, keep_out=keep)
    base = cam.look_at(_BASE_EYE, _BASE_TARGET)
    direction = (1, 0, 0) if motion == "truck" else (0, 0, 1)
    return cam.translate_trajectory(base, t, direction, speed)


def _scene_moving(b, gen, t, o):
    b.room()
    n_obj = int(o.get("num_objects", 1))
    if not 1 <= n_obj <= 3:
        raise InputError(f"num_objects must be 1, 2 or 3, got {n_obj}")
    _props(b, gen, z_range=(8.0, 12.0), x_range=(-5.0, 5.0), boxes=3, panels=2)
    frames = torch.arange(t, dtype=torch.float64)
    speed = float(o.get("speed", 0.05))
    yaw_rate = math.radians(float(o.get("yaw_rate", 1.5)))
    for k in range(n_obj):
        lane_z = (3.4, 4.8, 6.2)[k]
        hx, hy, hz = _uniform(gen, 0.35, 0.45), _uniform(gen, 0.35, 0.6), _uniform(gen, 0.3, 0.45)
        sign = 1.0 if k % 2 == 0 else -1.0
        x = sign * cam.triangle_wave(frames, 1.6, speed)
        center = torch.stack([x, torch.full_like(x, FLOOR_Y - hy - 0.02 * k),
                              torch.full_like(x, lane_z)], -1)
        rot = cam.rotation((0, 1, 0), sign * yaw_rate * frames + _uniform(gen, -0.5, 0.5))
        oid = b.moving_object(f"object{k + 1}")
        b.box(center, (hx, hy, hz), rotation=rot, object_id=oid, view_distance=lane_z,
              name=f"object{k + 1}")
    return cam.look_at((0.0, -0.3, 0.0), (0.0, 0.8, 6.0)).expand(t, 4, 4).clone()


def _scene_complex(b, gen, t, o):
    b.room()
    if o["motion"] == "arc":
        target, radius = (0.0, 0.3, 7.0), 7.0
        rate = _capped(float(o.get("rate", 1.0)), t, 40.0)
        _props(b, gen, z_range=(3.5, 11.0), keep_out=[(0.0, 0.0, 2.5)])
        return cam.orbit_trajectory(target, radius, t, -0.5 * rate * (t - 1), rate,
                                    height=-0.3)
    target, radius = (0.0, 1.0, 4.5), 4.5
    b.box((0.0, FLOOR_Y - 0.6, 4.5), (0.6, 0.6, 0.6), view_distance=4.5, name="orbit_target")
    rate = _capped(float(o.get("rate", 1.5)), t, 60.0)
    _props(b, gen, z_range=(6.0, 11.0), keep_out=[(0.0, 4.5, 1.2)])
    return cam.orbit_trajectory(target, radius, t, -0.5 * rate * (t - 1), rate, height=-1.0,
                                height_rate=_capped(-0.01, t, 0.5))


def _scene_stress(b, gen, t, o):
    stress = o.get("stress", "all")
    if stress not in STRESS_KINDS:
        raise InputError(f"stress must be one of {STRESS_KINDS}, got {stress!r}")
    low = stress in ("low_texture", "all")
    b.room({"back": "flat", "ceiling": "flat"} if low else None)
    speed = _capped(float(o.get("speed", 0.06)), t, 4.0)
    _props(b, gen, z_range=(5.0, 11.0), boxes=3, panels=2)
    if low:
        b.rect((-3.0, -1.5, 9.5), (3.5, 0, 0), (0, 3.0, 0), kind="flat", view_distance=9.5,
               name="flat_panel")
    if stress in ("thin", "all"):
        for i in range(6):
            x, z = _uniform(gen, -2.5, 3.5), _uniform(gen, 2.5, 8.0)
            r = _uniform(gen, 0.015, 0.04)
            b.box((x, FLOOR_Y - 2.5, z), (r, 2.5, r), view_distance=z, name=f"pole{i}")
        for i in range(3):
            y, z = _uniform(gen, -1.2, 0.6), _uniform(gen, 3.0, 7.0)
            b.box((0.5, y, z), (5.0, 0.01, 0.01), view_distance=z, name=f"wire{i}")
    if stress in ("occlusion", "all"):
        b.rect((-1.4, -0.6, 2.2), (0.9, 0, 0), (0, FLOOR_Y + 0.6, 0), view_distance=2.2,
               name="occluder")
    base = cam.look_at(_BASE_EYE, _BASE_TARGET)
    return cam.translate_trajectory(base, t, (1, 0, 0), speed)


_BUILDERS = {"C1": _scene_static, "C2": _scene_rotation, "C3": _scene_translation,
             "C4": _scene_moving, "C5": _scene_complex, "C6": _scene_stress}
_OPTIONS = {"motion", "rate", "speed", "num_objects", "yaw_rate", "stress", "supersample",
            "texel_scale", "fps", "device", "focal_scale"}


@dataclass
class Scene:
    """A built (not yet rendered) grounded scene: geometry, textures, camera path."""

    category: str
    motion: str
    options: Dict[str, Any]
    K: torch.Tensor  # (3, 3)
    poses: torch.Tensor  # (T, 4, 4) world-to-camera
    rects: Rects
    atlas: Any
    density: torch.Tensor  # (R,) texels per world unit
    objects: List[str]  # moving objects, id k = index + 1
    size: Tuple[int, int]

    @property
    def num_frames(self) -> int:
        return int(self.poses.shape[0])


def build_scene(category: str, *, num_frames: int = 48, size: Tuple[int, int] = (384, 640),
                seed: int = 0, **options: Any) -> Scene:
    """Lay out a category's scene and camera path (see :func:`render_scene` for arguments)."""
    cat = canonical_category(category)
    unknown = set(options) - _OPTIONS
    if unknown:
        raise InputError(f"unknown render_scene options {sorted(unknown)}; known: "
                         f"{sorted(_OPTIONS)}")
    t = check_integer(num_frames, "num_frames", 1)
    h, w = int(size[0]), int(size[1])
    if h < 8 or w < 8:
        raise InputError(f"size must be (H, W) with both >= 8, got {size}")
    motion = options.get("motion", MOTIONS[cat][0])
    if motion not in MOTIONS[cat]:
        raise InputError(f"motion for {cat} must be one of {MOTIONS[cat]}, got {motion!r}")
    opts = dict(options, motion=motion)
    K = cam.intrinsics((h, w), float(options.get("focal_scale", 0.9)))
    builder = SceneBuilder(t, int(seed))
    gen = torch.Generator().manual_seed(int(seed))
    poses = _BUILDERS[cat](builder, gen, t, opts)
    rects, atlas, density = builder.build(K, (h, w), poses, float(options.get("texel_scale", 1.0)))
    return Scene(cat, motion, opts, K, poses, rects, atlas, density, list(builder.objects),
                 (h, w))


def _render_arrays(scene: Scene, chunk_frames: Optional[int] = None
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Ray-cast ``scene`` a chunk of frames at a time (:func:`~geocon_torch.synth.raycast.
    render_chunks`) into preallocated outputs, so that only one chunk's float images, hits and
    ids are alive at a time.

    Args:
        scene: a built scene (:func:`build_scene`); its ``supersample`` and ``device`` options
            apply.
        chunk_frames: frames per chunk, or None for the ray budget.
    Returns:
        frames (T, 3, H, W) uint8 RGB, masks (T, K, H, W) bool (K moving objects), depth
        (T, H, W) float32 camera z of each pixel centre's hit (inf on a miss).
    """
    device = torch.device(scene.options.get("device", "cpu"))
    t_n, (h, w), k_obj = scene.num_frames, scene.size, len(scene.objects)
    frames = masks = depth = ids = None
    for t0, rgb, obj, dep in render_chunks(
            scene.K, scene.poses, scene.size, scene.rects, scene.atlas, scene.density,
            supersample=int(scene.options.get("supersample", 1)), device=device,
            chunk_frames=chunk_frames):
        if frames is None:  # allocated on the renderer's device
            frames = torch.empty((t_n, 3, h, w), dtype=torch.uint8, device=rgb.device)
            masks = torch.empty((t_n, k_obj, h, w), dtype=torch.bool, device=obj.device)
            depth = torch.empty((t_n, h, w), dtype=dep.dtype, device=dep.device)
            ids = torch.arange(1, k_obj + 1, device=obj.device).view(1, k_obj, 1, 1)
        t1 = t0 + rgb.shape[0]
        frames[t0:t1] = (rgb * 255).round().to(torch.uint8)
        masks[t0:t1] = obj.unsqueeze(1) == ids
        depth[t0:t1] = dep
        del rgb, obj, dep
    return frames, masks, depth


def render_scene(category: str, *, num_frames: int = 48, size: Tuple[int, int] = (384, 640),
                 seed: int = 0, corruption: Optional[str] = None, severity: float = 0.0,
                 chunk_frames: Optional[int] = None, **options: Any) -> SynthClip:
    """Render one grounded clip with exact ground truth.

    Args:
        category: "C1".."C6" or an alias (static, rotation, translation, moving_object, complex,
            stress).
        num_frames: T, an integer >= 1 (2.5 is refused, never truncated).
        size: (H, W) in pixels (even values if the clip is to be saved as mp4).
        seed: scene layout, textures and corruption noise; same seed -> identical frames.
        corruption: None or one of :data:`geocon_torch.synth.corruptions.CORRUPTIONS`.
        severity: corruption strength in [0, 1] (0 = identity).
        chunk_frames: frames ray-cast at a time, an integer >= 1, or None (default): as many
            as :data:`~geocon_torch.synth.raycast.CHUNK_RAYS` rays allow (8 frames of 640x384
            without supersampling). Memory is bounded by a chunk plus the outputs (7 bytes per
            pixel and frame, more with objects or a corruption); the clip is the same, bit for
            bit, for any value.
        **options: ``motion`` (C2: pan|tilt|roll, C3: truck|dolly, C5: arc|orbit), ``rate``
            (deg/frame), ``speed`` (world units/frame), ``num_objects`` (C4, 1-3), ``yaw_rate``
            (C4, deg/frame), ``stress`` (C6: thin|low_texture|occlusion|all), ``supersample``
            (int, default 1), ``texel_scale`` (texels per pixel at the view distance, default
            1.0), ``focal_scale`` (f / W, default 0.9), ``fps`` (default 24), ``device``.
    Returns:
        :class:`geocon_torch.synth.SynthClip`: frames (T, 3, H, W) uint8 RGB, masks
        (T, K, H, W) bool, intrinsics (3, 3) float64, poses (T, 4, 4) float64 world-to-camera,
        true_homographies (T-1, 3, 3) float64 or None.
    Raises:
        ArgumentTypeError, InputError: ``num_frames`` or ``chunk_frames`` not an integer
            >= 1; InputError: an unknown category, motion, option or corruption, a side below
            8 px.
    """
    corruption = check_corruption(corruption, severity)
    if chunk_frames is not None:
        chunk_frames = check_integer(chunk_frames, "chunk_frames", 1)
    scene = build_scene(category, num_frames=num_frames, size=size, seed=seed, **options)
    cat, motion, K, poses = scene.category, scene.motion, scene.K, scene.poses
    frames, masks, depth = _render_arrays(scene, chunk_frames)
    k_obj = len(scene.objects)
    if corruption is not None and severity > 0:  # on the whole clip (noise fields span time)
        frames, new_masks = apply_corruption(frames, corruption, severity, seed=int(seed),
                                             masks=masks if k_obj else None, return_masks=True)
        masks = new_masks if new_masks is not None else masks
    rel = cam.relative_pose(poses[:-1], poses[1:])
    true_h = None
    if EXPECTED_REGIME[cat] == "H" and scene.num_frames > 1:
        true_h = cam.rotation_homography(K, rel)
    fps = float(options.get("fps", 24.0))
    sev_tag = f"_{corruption}{float(severity):.2f}" if corruption else ""
    n_obj = int(options.get("num_objects", 1))  # C4 with 2-3 objects is another clip (its id)
    sev_tag = (f"_{n_obj}obj" if cat == "C4" and n_obj != 1 else "") + sev_tag
    meta = {
        "prompt": PROMPTS[(cat, motion)],
        "motion": motion,
        "category_name": CATEGORY_NAMES[cat],
        "expected_regime": EXPECTED_REGIME[cat],
        "objects": list(scene.objects),
        "options": {k: (str(v) if k == "device" else v) for k, v in scene.options.items()},
        "generator": f"geocon-synth {__version__}",
    }
    return SynthClip(frames=frames, masks=masks, intrinsics=K, poses=poses,
                     true_homographies=true_h, category=cat, corruption=corruption,
                     severity=float(severity) if corruption else 0.0, meta=meta, fps=fps,
                     seed=int(seed), clip_id=f"{cat}_{motion}{sev_tag}_seed{int(seed)}",
                     depth=depth)
