"""Batched ray casting of textured rectangles through a pinhole camera (torch ops only).

The scene is a set of R rectangles, each ``X = o + a u + b v`` with ``a, b`` in [0, 1] and ``u``
orthogonal to ``v``; a box is six of them. Rectangles may move: their ``o, u, v`` are given per
frame, (T, R, 3). Every pixel's ray is intersected with every rectangle in one batched
expression, the nearest hit wins, and ``(a, b)`` index that rectangle's texture in a mip-mapped
atlas (trilinear lookup; optional supersampling for antialiasing). Ray directions have camera
``z = 1``, so the hit parameter is the camera-frame depth.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Optional, Tuple

import torch
import torch.nn.functional as F

from .textures import TextureAtlas
from ..errors import InputError

MISS_COLOR = 0.5


@dataclass
class Rects:
    """R textured rectangles over T frames.

    Attributes:
        origin, u, v: (T, R, 3) float64 world corner and edge vectors (u orthogonal to v).
        object_id: (R,) long, 0 = static background, k >= 1 = moving object k (mask index k-1).
        texture: (R,) long index of each rectangle's texture in the atlas.
        facing: (T, R, 3) normal of the side a one-sided rectangle is seen from (box faces point
            out, room walls in), zeros for two-sided ones; only used to skip rectangles that
            cannot be visible (culling never changes the image of a closed box or room).
    """

    origin: torch.Tensor
    u: torch.Tensor
    v: torch.Tensor
    object_id: torch.Tensor
    texture: torch.Tensor
    facing: Optional[torch.Tensor] = None


EPS_DEPTH = 1e-4  # hits closer than this camera depth are ignored


def _dot3(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a . b`` over a last axis of size 3, broadcasting: ``(a0 b0 + a1 b1) + a2 b2`` in
    separate elementwise ops. A GEMM or a ``sum`` may group or fuse these differently with the
    shape around them (the tile size, the number of candidate rectangles), which would change
    a ray's hit by an ulp between two renders of the same pixel; this order is fixed."""
    return (a[..., 0] * b[..., 0] + a[..., 1] * b[..., 1]) + a[..., 2] * b[..., 2]


def _frame_params(poses: torch.Tensor, rects: Rects):
    """Per-frame, per-rectangle constants of the intersection, all float64:
    world-to-camera rotation (T, 3, 3), camera centre (T, 3), and (T, R, 12) =
    [unit normal, u / |u|^2, v / |v|^2, (o - C).n, (C - o).u/|u|^2, (C - o).v/|v|^2]."""
    rot = poses[:, :3, :3].to(torch.float64)
    center = -(rot.transpose(1, 2) @ poses[:, :3, 3:].to(torch.float64)).squeeze(-1)
    o, u, v = rects.origin.to(torch.float64), rects.u.to(torch.float64), rects.v.to(torch.float64)
    n = torch.linalg.cross(u, v)
    n = n / _dot3(n, n).sqrt().unsqueeze(-1)
    u_s = u / _dot3(u, u).unsqueeze(-1)
    v_s = v / _dot3(v, v).unsqueeze(-1)
    rel = center[:, None, :] - o
    scal = torch.stack([-_dot3(rel, n), _dot3(rel, u_s), _dot3(rel, v_s)], -1)
    return rot, center, torch.cat([n, u_s, v_s, scal], -1)


def screen_bounds(poses: torch.Tensor, rects: Rects) -> Tuple[torch.Tensor, torch.Tensor]:
    """Bounds of each rectangle's visible part in normalised image coordinates (x/z, y/z).

    The rectangle is clipped to the half-space ``z >= EPS_DEPTH`` in front of each camera and its
    corners and clip points projected. Returns ``(box (T, R, 4) = xmin, xmax, ymin, ymax,
    visible (T, R) bool)``; ``visible`` is False behind the camera or for a one-sided rectangle
    seen from its back (``Rects.facing``).
    """
    rot = poses[:, :3, :3].to(torch.float64)
    trans = poses[:, :3, 3].to(torch.float64)
    o, u, v = rects.origin.to(torch.float64), rects.u.to(torch.float64), rects.v.to(torch.float64)
    corners = torch.stack([o, o + u, o + u + v, o + v], dim=2)  # (T, R, 4, 3), polygon order
    cc = torch.einsum("tij,trkj->trki", rot, corners) + trans[:, None, None, :]
    nxt = cc.roll(-1, dims=2)
    z0, z1 = cc[..., 2] - EPS_DEPTH, nxt[..., 2] - EPS_DEPTH
    cross = (z0 * z1) < 0
    lam = (z0 / torch.where(cross, z0 - z1, torch.ones_like(z0))).unsqueeze(-1)
    clip = cc + lam * (nxt - cc)  # where an edge crosses the near plane
    pts = torch.cat([cc, clip], dim=2)  # (T, R, 8, 3)
    ok = torch.cat([z0 >= 0, cross], dim=2)
    z = pts[..., 2].clamp_min(EPS_DEPTH)
    px, py = pts[..., 0] / z, pts[..., 1] / z
    inf = torch.full_like(px, float("inf"))
    box = torch.stack([torch.where(ok, px, inf).amin(-1), torch.where(ok, px, -inf).amax(-1),
                       torch.where(ok, py, inf).amin(-1), torch.where(ok, py, -inf).amax(-1)],
                      -1)
    vis = ok.any(-1)
    if rects.facing is not None:
        center = -(rot.transpose(1, 2) @ poses[:, :3, 3:].to(torch.float64)).squeeze(-1)
        fac = rects.facing.to(torch.float64)
        side = ((center[:, None, :] - o) * fac).sum(-1)
        vis &= (side > 0) | (fac.abs().sum(-1) == 0)
    return box, vis


@dataclass
class Hits:
    """Nearest hits of a (T, H, W) ray grid: ``depth`` camera z (inf on a miss), ``rect`` index
    (-1 on a miss), texture coordinates ``a``, ``b`` in [0, 1] and ``cos`` = |cos| of the angle
    between ray and surface normal; all (T, H, W)."""

    depth: torch.Tensor
    rect: torch.Tensor
    a: torch.Tensor
    b: torch.Tensor
    cos: torch.Tensor


def pixel_rays(K: torch.Tensor, size: Tuple[int, int], supersample: int = 1,
               dtype: torch.dtype = torch.float32, device=None) -> torch.Tensor:
    """(H*s, W*s, 3) camera-frame ray directions with z = 1 for every (sub)pixel; pixel centres at
    integer coordinates, sub-samples at ``(i + 0.5) / s - 0.5`` offsets."""
    h, w = size
    s = int(supersample)
    xs = (torch.arange(w * s, dtype=torch.float64) + 0.5) / s - 0.5
    ys = (torch.arange(h * s, dtype=torch.float64) + 0.5) / s - 0.5
    gy, gx = torch.meshgrid(ys, xs, indexing="ij")
    pix = torch.stack([gx, gy, torch.ones_like(gx)], dim=-1)
    rays = pix @ torch.linalg.inv(K.to(torch.float64)).T
    return rays.to(device=device, dtype=dtype)


def _tile_rays(rays_cam: torch.Tensor, tile: int) -> Tuple[torch.Tensor, int, int]:
    """(H, W, 3) rays -> (nT, tile * tile, 3) grouped by tile (edge-replicated padding up to
    whole tiles), and the tile grid (nty, ntx)."""
    h, w, _ = rays_cam.shape
    ph, pw = -h % tile, -w % tile
    rays = rays_cam.permute(2, 0, 1)[None]
    rays = F.pad(rays, (0, pw, 0, ph), mode="replicate")[0].permute(1, 2, 0)
    nty, ntx = (h + ph) // tile, (w + pw) // tile
    rays = rays.reshape(nty, tile, ntx, tile, 3).permute(0, 2, 1, 3, 4).reshape(nty * ntx, -1, 3)
    return rays, nty, ntx


def _tile_candidates(poses: torch.Tensor, rects: Rects, rays: torch.Tensor) -> torch.Tensor:
    """(T * nT, R) bool: which rectangles' screen bounds overlap each (frame, tile) item."""
    box, vis = screen_bounds(poses, rects)
    r64 = rays.to(torch.float64)
    ext = torch.stack([r64[..., 0].amin(1), r64[..., 0].amax(1),
                       r64[..., 1].amin(1), r64[..., 1].amax(1)], -1)  # (nT, 4)
    m = 1e-6
    cand = (vis[:, None, :]
            & (box[:, None, :, 1] >= ext[None, :, None, 0] - m)
            & (box[:, None, :, 0] <= ext[None, :, None, 1] + m)
            & (box[:, None, :, 3] >= ext[None, :, None, 2] - m)
            & (box[:, None, :, 2] <= ext[None, :, None, 3] + m))  # (T, nT, R)
    return cand.reshape(-1, cand.shape[-1])


def _nearest_hits(rays: torch.Tensor, rot: torch.Tensor, prm: torch.Tensor, idx: torch.Tensor
                  ) -> Tuple[torch.Tensor, ...]:
    """Nearest hit among S candidate rectangles of n items of P rays each.

    Args:
        rays: (n, P, 3) camera-frame directions; rot: (n, 3, 3) world-to-camera rotations.
        prm: (n, S, 12) rectangle constants (:func:`_frame_params`; padded slots NaN at 9).
        idx: (n, S) rectangle index of each slot.

    Returns:
        depth (inf on a miss), rect (-1 on a miss), a, b, cos; each (n, P).
    """
    d = _dot3(rays.unsqueeze(-2), rot.transpose(-1, -2).unsqueeze(1))  # (n, P, 3): R^T d_cam
    # d.n | d.u_s | d.v_s of every slot, (n, P, 3S), summed in _dot3's order over contiguous
    # component planes (a batched GEMM rounded differently with the tile and candidate count)
    comp = prm[..., :9].unflatten(-1, (3, 3)).permute(0, 3, 2, 1).flatten(2).unsqueeze(2)
    dc = d.permute(0, 2, 1).unsqueeze(-1)  # (n, 3, P, 1); comp (n, 3, 1, 3S)
    proj = dc[:, 0] * comp[:, 0]
    proj += dc[:, 1] * comp[:, 1]
    proj += dc[:, 2] * comp[:, 2]
    dn, du, dv = proj.split(prm.shape[1], dim=-1)
    a0, b0 = prm[:, None, :, 10], prm[:, None, :, 11]
    t = prm[:, None, :, 9] / dn
    # a0 + t du as a product then a sum (a fused multiply-add may round differently)
    a = torch.mul(t, du).add_(a0).sub_(0.5).abs_()
    b = torch.mul(t, dv).add_(b0).sub_(0.5).abs_()
    hit = torch.maximum(a, b, out=a).le_(0.5).logical_and_(t > EPS_DEPTH)
    dep, j = t.masked_fill_(~hit.bool(), float("inf")).min(-1)  # (n, P)
    g = j.unsqueeze(-1)
    miss = torch.isinf(dep)
    dep0 = torch.where(miss, torch.zeros_like(dep), dep)
    n_pix = rays.shape[1]
    pick = lambda x: x.expand(-1, n_pix, -1).gather(-1, g).squeeze(-1)  # noqa: E731
    rect = torch.where(miss, torch.full_like(j, -1), idx.gather(-1, j))
    return (dep, rect, pick(a0) + dep0 * du.gather(-1, g).squeeze(-1),
            pick(b0) + dep0 * dv.gather(-1, g).squeeze(-1),
            dn.gather(-1, g).squeeze(-1).abs() / _dot3(d, d).sqrt())


def intersect(rays_cam: torch.Tensor, poses: torch.Tensor, rects: Rects, tile: int = 16,
              max_elements: int = 2_000_000) -> Hits:
    """Nearest rectangle hit of every ray in every frame.

    The image is cut into ``tile`` x ``tile`` pixel tiles; each tile tests only the rectangles
    whose clipped screen bounds (:func:`screen_bounds`) overlap it. (frame, tile) items are
    bucketed by candidate count (padded to a power of two) and each bucket is tested in one
    batched expression. Culling is conservative and every ray-rectangle test is elementwise
    (:func:`_dot3`): the result equals testing every rectangle, bit for bit, for any tile size.

    Args:
        rays_cam: (H, W, 3) camera-frame directions (z = 1); their dtype/device run the math.
        poses: (T, 4, 4) world-to-camera.
        rects: the scene (origin/u/v (T, R, 3)).
        tile: tile side in pixels.
        max_elements: items go in chunks of about this many ray-rectangle tests.
    Returns:
        :class:`Hits` with (T, H, W) fields.
    """
    dt, dev = rays_cam.dtype, rays_cam.device
    h, w, _ = rays_cam.shape
    rot, _, params = _frame_params(poses, rects)
    rays, nty, ntx = _tile_rays(rays_cam, tile)
    cand = _tile_candidates(poses, rects, rays)  # one work item per (frame, tile)
    n_tiles, n_pix = rays.shape[:2]
    counts = cand.sum(-1)
    order = torch.sort(cand.to(torch.int8), dim=-1, descending=True, stable=True).indices
    item_frame = torch.arange(rects.origin.shape[0]).repeat_interleave(n_tiles).to(dev)
    item_tile = torch.arange(n_tiles).repeat(rects.origin.shape[0]).to(dev)
    rays, rot_t, params = rays.to(dt), rot.to(device=dev, dtype=dt), params.to(device=dev, dtype=dt)
    fields = [torch.full((cand.shape[0], n_pix), float("inf"), dtype=dt, device=dev),
              torch.full((cand.shape[0], n_pix), -1, dtype=torch.long, device=dev)]
    fields += [torch.zeros(cand.shape[0], n_pix, dtype=dt, device=dev) for _ in range(3)]
    # items bucketed by candidate count (padded to a power of two) so padding stays small
    bucket = torch.where(counts > 0, torch.ceil(torch.log2(counts.clamp_min(1).double())), -1.0)
    for level in torch.unique(bucket).tolist():
        if level < 0:
            continue  # no candidate: the rays miss everything
        s = min(int(2 ** level), cand.shape[1])
        items = (bucket == level).nonzero().squeeze(1)
        step = max(1, max_elements // (n_pix * s))
        for c0 in range(0, items.numel(), step):
            it = items[c0:c0 + step]
            itd = it.to(dev)
            fr = item_frame[itd]
            idx = order[it, :s].to(dev)  # (n, S) candidate rectangles
            prm = params[fr[:, None], idx]  # (n, S, 12)
            prm[..., 9].masked_fill_(~cand[it].gather(-1, order[it, :s]).to(dev), float("nan"))
            hits = _nearest_hits(rays[item_tile[itd]], rot_t[fr], prm, idx)
            for dst, src in zip(fields, hits):
                dst[itd] = src

    def untile(x: torch.Tensor) -> torch.Tensor:
        x = x.reshape(-1, nty, ntx, tile, tile).permute(0, 1, 3, 2, 4)
        return x.reshape(-1, nty * tile, ntx * tile)[:, :h, :w]

    return Hits(*[untile(f) for f in fields])


def shade(hits: Hits, rects: Rects, atlas: TextureAtlas, texel_density: torch.Tensor,
          focal: float) -> torch.Tensor:
    """(T, 3, H, W) colours of the hits: trilinear mip lookup of each rectangle's texture.

    ``texel_density`` (R,) texels per world unit on each rectangle; the mip level is
    ``log2(density * depth / (focal * sqrt(cos)))`` (``depth`` the camera z, ``focal`` in px at
    the ray grid's resolution: a pixel spans ``depth / focal`` world units across the ray, the
    ray's length ``depth * |d|`` and its angular width ``1 / (focal * |d|)`` cancelling |d|),
    clamped to the pyramid.
    """
    t, h, w = hits.depth.shape
    lv0 = atlas.levels[0]
    dt, dev = lv0.dtype, lv0.device
    rect = hits.rect.reshape(-1)
    table = torch.cat([atlas.regions.to(device=dev, dtype=dt)[rects.texture.to(dev)],
                       texel_density.to(device=dev, dtype=dt)[:, None]], 1)
    table = table.index_select(0, rect.clamp_min(0))  # (N, 5): x0, y0, w, h, density
    a = hits.a.reshape(-1).to(dt).clamp(0, 1)
    b = hits.b.reshape(-1).to(dt).clamp(0, 1)
    wa, ha = lv0.shape[-1], lv0.shape[-2]
    grid = torch.stack([2 * (table[:, 0] + a * table[:, 2]) / wa - 1,
                        2 * (table[:, 1] + b * table[:, 3]) / ha - 1], dim=-1)
    depth = hits.depth.reshape(-1).to(dt).clamp_max(1e6)
    cos = hits.cos.reshape(-1).to(dt).clamp_min(1e-3)
    level = (table[:, 4] * depth / (focal * cos.sqrt())).clamp_min(1e-6).log2()
    level = level.clamp(0, len(atlas.levels) - 1)
    color = torch.zeros(3, rect.numel(), dtype=dt, device=dev)
    grid = grid.view(1, 1, -1, 2)
    for li, lv in enumerate(atlas.levels):
        weight = (1 - (level - li).abs()).clamp_min(0)
        if not bool((weight > 0).any()):
            continue
        smp = F.grid_sample(lv, grid, mode="bilinear", padding_mode="border",
                            align_corners=False)[0, :, 0]  # (3, N)
        color.addcmul_(smp, weight)
    color = color.T
    color = torch.where(rect[:, None] >= 0, color, torch.full_like(color, MISS_COLOR))
    return color.reshape(t, h, w, 3).permute(0, 3, 1, 2)


#: rays (pixels x supersample^2) rendered per chunk of frames when ``chunk_frames`` is None:
#: a frame of 640x384 pixel-centre rays takes ~30-40 MB of working memory, so a chunk of 2^21
#: rays (8 such frames) stays near 300 MB whatever the clip's length
CHUNK_RAYS = 1 << 21


def frames_per_chunk(num_frames: int, rays_per_frame: int, chunk_frames: Optional[int]) -> int:
    """Frames rendered at a time: ``chunk_frames`` if given, else as many frames as
    :data:`CHUNK_RAYS` rays allow (``rays_per_frame`` each, at least one frame); at most
    ``num_frames``."""
    if chunk_frames is None:
        chunk_frames = max(1, CHUNK_RAYS // max(1, int(rays_per_frame)))
    return max(1, min(int(chunk_frames), int(num_frames)))


def _rect_frames(rects: Rects, t0: int, t1: int) -> Rects:
    """The rectangles of frames ``t0 .. t1 - 1`` (per-frame fields sliced, the rest shared)."""
    facing = None if rects.facing is None else rects.facing[t0:t1]
    return Rects(rects.origin[t0:t1], rects.u[t0:t1], rects.v[t0:t1], rects.object_id,
                 rects.texture, facing)


def _ray_grids(K: torch.Tensor, size: Tuple[int, int], supersample: int, dtype: torch.dtype,
               device: Optional[torch.device]) -> Tuple[torch.Tensor, Optional[torch.Tensor]]:
    """The pixel-centre rays (H, W, 3) and, with ``supersample`` s > 1, the (H s, W s, 3)
    sub-pixel rays (else None); InputError for s < 1."""
    s = int(supersample)
    if s < 1:
        raise InputError(f"supersample must be >= 1, got {supersample}")
    fine = None if s == 1 else pixel_rays(K, size, s, dtype, device)
    return pixel_rays(K, size, 1, dtype, device), fine


def _render_frames(rays: torch.Tensor, fine: Optional[torch.Tensor], poses: torch.Tensor,
                   rects: Rects, atlas: TextureAtlas, texel_density: torch.Tensor, focal: float
                   ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`render` of the frames of ``poses`` / ``rects`` with prepared ray grids
    (:func:`_ray_grids`) and an atlas already on the rays' device and dtype."""
    centre = intersect(rays, poses, rects)
    if fine is None:
        rgb = shade(centre, rects, atlas, texel_density, focal)
    else:
        s = fine.shape[0] // rays.shape[0]
        hits = intersect(fine, poses, rects)
        rgb = F.avg_pool2d(shade(hits, rects, atlas, texel_density, focal * s), s)
        del hits
    obj = rects.object_id.to(centre.rect.device)[centre.rect.clamp_min(0)]
    obj = torch.where(centre.rect >= 0, obj, torch.zeros_like(obj))
    return rgb.clamp(0, 1), obj, centre.depth


def render_chunks(K: torch.Tensor, poses: torch.Tensor, size: Tuple[int, int], rects: Rects,
                  atlas: TextureAtlas, texel_density: torch.Tensor, *, supersample: int = 1,
                  dtype: torch.dtype = torch.float32, device: Optional[torch.device] = None,
                  chunk_frames: Optional[int] = None
                  ) -> Iterator[Tuple[int, torch.Tensor, torch.Tensor, torch.Tensor]]:
    """:func:`render` ``chunk_frames`` frames at a time (None: :func:`frames_per_chunk`'s
    budget of :data:`CHUNK_RAYS` rays), so that the working memory is bounded by a chunk.

    The ray grids and the atlas are shared; each chunk intersects and shades its own frames
    only. A pixel's colour, id and depth depend only on its own frame's pose and rectangles and
    every step is elementwise per pixel, so the chunks equal one render of all frames, bit for
    bit.

    Yields:
        ``(t0, rgb, obj, depth)`` for the chunk of frames ``t0 .. t0 + n - 1``: rgb (n, 3, H, W)
        float in [0, 1], obj (n, H, W) long, depth (n, H, W) camera z (see :func:`render`).
    """
    rays, fine = _ray_grids(K, size, supersample, dtype, device)
    atlas = atlas.to(device or torch.device("cpu"), dtype)
    t_n, s = int(poses.shape[0]), int(supersample)
    step = frames_per_chunk(t_n, size[0] * size[1] * s * s, chunk_frames)
    for t0 in range(0, t_n, step):
        t1 = min(t0 + step, t_n)
        yield (t0, *_render_frames(rays, fine, poses[t0:t1], _rect_frames(rects, t0, t1),
                                   atlas, texel_density, float(K[0, 0])))


def render(K: torch.Tensor, poses: torch.Tensor, size: Tuple[int, int], rects: Rects,
           atlas: TextureAtlas, texel_density: torch.Tensor, *, supersample: int = 1,
           dtype: torch.dtype = torch.float32, device: Optional[torch.device] = None
           ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Render T frames in one pass (:func:`render_chunks` renders them a chunk at a time).

    Returns:
        rgb (T, 3, H, W) float in [0, 1]; object ids (T, H, W) long (0 background or miss, k >= 1
        moving object k), decided by each pixel-centre ray (so masks are exact); depth (T, H, W)
        camera z of the pixel-centre hit (inf on a miss).
    """
    rays, fine = _ray_grids(K, size, supersample, dtype, device)
    atlas = atlas.to(device or torch.device("cpu"), dtype)
    return _render_frames(rays, fine, poses, rects, atlas, texel_density, float(K[0, 0]))
