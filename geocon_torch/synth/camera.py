"""Pinhole cameras and exact pose trajectories for the grounded scenes.

Conventions (OpenCV): camera x right, y down, z forward; the world uses the same axes (y down,
so the floor is at ``y = +floor_y``). A pose is the 4x4 *world-to-camera* matrix ``[R | t]``
(``X_cam = R X_world + t``); the camera centre is ``C = -R^T t``. Pixel centres sit at integer
coordinates, ``x ~ K X_cam``. All poses are float64.
"""
from __future__ import annotations

import math
from typing import Sequence, Tuple

import torch

_F64 = torch.float64


def intrinsics(size: Tuple[int, int], focal_scale: float = 0.9) -> torch.Tensor:
    """Pinhole intrinsics K for an image of ``size``.

    ``fx = fy = focal_scale * W`` px (0.9 W = 58 deg horizontal field of view), principal point
    at the image centre ``((W - 1) / 2, (H - 1) / 2)`` in integer-centred pixel coordinates.

    Args:
        size: (H, W) in px.
        focal_scale: focal length / image width (unitless).
    Returns:
        (3, 3) float64 K, px, on the CPU.
    """
    h, w = int(size[0]), int(size[1])
    f = focal_scale * w
    return torch.tensor([[f, 0.0, (w - 1) / 2.0], [0.0, f, (h - 1) / 2.0], [0.0, 0.0, 1.0]],
                        dtype=_F64)


def rotation(axis: Sequence[float], angle: torch.Tensor) -> torch.Tensor:
    """Rodrigues rotations (..., 3, 3) about the fixed ``axis`` (normalised) by ``angle`` (...,)
    radians (right-handed)."""
    angle = torch.as_tensor(angle, dtype=_F64)
    k = torch.as_tensor(axis, dtype=_F64)
    k = k / k.norm()
    kx = torch.tensor([[0.0, -k[2], k[1]], [k[2], 0.0, -k[0]], [-k[1], k[0], 0.0]], dtype=_F64)
    s, c = angle.sin()[..., None, None], angle.cos()[..., None, None]
    eye = torch.eye(3, dtype=_F64)
    return eye + s * kx + (1 - c) * (kx @ kx)


def look_at(eye: Sequence[float], target: Sequence[float],
            up: Sequence[float] = (0.0, -1.0, 0.0)) -> torch.Tensor:
    """World-to-camera pose of a camera at ``eye`` looking at ``target``.

    Args:
        eye: (3,) camera centre, world units.
        target: (3,) the point the optical axis (+z) goes through, world units.
        up: (3,) the world's up direction (default -y: the world's y points down, as the
            camera's).
    Returns:
        (4, 4) float64 ``[R | t]`` (``X_cam = R X_world + t``) on the CPU.
    """
    return look_at_batch(torch.as_tensor([eye], dtype=_F64),
                         torch.as_tensor([target], dtype=_F64), up)[0]


def look_at_batch(eye: torch.Tensor, target: torch.Tensor,
                  up: Sequence[float] = (0.0, -1.0, 0.0)) -> torch.Tensor:
    """(T, 4, 4) world-to-camera poses for eyes (T, 3) looking at targets (T, 3)."""
    eye, target = eye.to(_F64), target.to(_F64)
    z = target - eye
    z = z / z.norm(dim=-1, keepdim=True)
    upv = torch.as_tensor(up, dtype=_F64).expand_as(z)
    x = torch.linalg.cross(z, upv)
    x = x / x.norm(dim=-1, keepdim=True)  # camera right
    y = torch.linalg.cross(z, x)  # camera down
    rot = torch.stack([x, y, z], dim=-2)
    return make_pose(rot, -(rot @ eye.unsqueeze(-1)).squeeze(-1))


def make_pose(rot: torch.Tensor, trans: torch.Tensor) -> torch.Tensor:
    """(..., 4, 4) from rotations (..., 3, 3) and translations (..., 3)."""
    pose = torch.zeros(rot.shape[:-2] + (4, 4), dtype=_F64)
    pose[..., :3, :3] = rot
    pose[..., :3, 3] = trans
    pose[..., 3, 3] = 1.0
    return pose


def camera_centers(poses: torch.Tensor) -> torch.Tensor:
    """(T, 3) camera centres ``C = -R^T t`` of world-to-camera poses (T, 4, 4)."""
    rot, trans = poses[..., :3, :3], poses[..., :3, 3:]
    return -(rot.transpose(-1, -2) @ trans).squeeze(-1)


def relative_pose(pose_i: torch.Tensor, pose_j: torch.Tensor) -> torch.Tensor:
    """(..., 4, 4) camera-i-to-camera-j transform ``P_j P_i^-1`` of world-to-camera poses."""
    return pose_j @ torch.linalg.inv(pose_i)


def rotation_homography(K: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
    """``H = K R_rel K^-1`` (x_j ~ H x_i) of relative poses without translation (pure rotation
    about the camera centre), normalised so ``H[2, 2] = 1``.

    Args:
        K: (3, 3) intrinsics, px.
        rel: (..., 4, 4) relative poses camera i -> camera j (only the rotation block is read).
    Returns:
        (..., 3, 3) homographies in pixels, in the dtype ``K`` and ``rel`` share.
    """
    h = K @ rel[..., :3, :3] @ torch.linalg.inv(K)
    return h / h[..., 2:3, 2:3]


#: scene units (the rooms are ~10 units deep): a relative translation at most this long is a
#: camera that did not move
STILL_TRANSLATION = 1e-9


def fundamental_from_pose(K: torch.Tensor, rel: torch.Tensor) -> torch.Tensor:
    """``F = K^-T [t]_x R K^-1`` with ``x_j^T F x_i = 0``, scaled to unit Frobenius norm (zeros
    if the centre did not move: ``|t| <= STILL_TRANSLATION``, the round-off of inverting a
    pose, whose direction would otherwise set an arbitrary epipole).

    Args:
        K: (3, 3) intrinsics, px.
        rel: (..., 4, 4) relative poses camera i -> camera j (translation in scene units).
    Returns:
        (..., 3, 3) pixel-domain fundamental matrices in the dtype ``K`` and ``rel`` share
        (CPU tensors).
    """
    rot, t = rel[..., :3, :3], rel[..., :3, 3]
    t = torch.where(t.norm(dim=-1, keepdim=True) > STILL_TRANSLATION, t, torch.zeros_like(t))
    tx = torch.zeros(rel.shape[:-2] + (3, 3), dtype=rel.dtype)
    tx[..., 0, 1], tx[..., 0, 2] = -t[..., 2], t[..., 1]
    tx[..., 1, 0], tx[..., 1, 2] = t[..., 2], -t[..., 0]
    tx[..., 2, 0], tx[..., 2, 1] = -t[..., 1], t[..., 0]
    kinv = torch.linalg.inv(K)
    f = kinv.transpose(-1, -2) @ tx @ rot @ kinv
    norm = f.flatten(-2).norm(dim=-1)[..., None, None]
    return torch.where(norm > 0, f / norm.clamp_min(1e-300), f)


def project(K: torch.Tensor, poses: torch.Tensor, points: torch.Tensor
            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Project world points with world-to-camera poses.

    Args:
        K: (3, 3) intrinsics, px.
        poses: (T, 4, 4) world-to-camera poses.
        points: (N, 3) world points.
    Returns:
        (pixels (T, N, 2) float64 (x, y), camera depths (T, N) float64: z in the camera frame,
        <= 0 means behind the camera).
    """
    pts = points.to(_F64)
    cam = poses[:, None, :3, :3].to(_F64) @ pts[None, :, :, None] + poses[:, None, :3, 3:]
    cam = cam.squeeze(-1)
    pix = (K.to(_F64) @ cam.unsqueeze(-1)).squeeze(-1)
    z = cam[..., 2]
    return pix[..., :2] / pix[..., 2:3], z


# ---------------------------------------------------------------------------------- trajectories
def _frames(num_frames: int) -> torch.Tensor:
    return torch.arange(num_frames, dtype=_F64)


def rotate_trajectory(base: torch.Tensor, num_frames: int, axis: Sequence[float],
                      rate_deg: float) -> torch.Tensor:
    """(T, 4, 4) poses rotating about the camera centre of ``base`` (4, 4): frame t is rotated by
    ``t * rate_deg`` degrees about ``axis`` given in the camera frame (y = pan, x = tilt, z = roll).
    The camera centre stays fixed, so adjacent frames are related by ``K R_rel K^-1``."""
    ang = _frames(num_frames) * math.radians(rate_deg)
    rot = rotation(axis, ang) @ base[:3, :3]
    center = camera_centers(base[None])[0]
    return make_pose(rot, -(rot @ center))


def translate_trajectory(base: torch.Tensor, num_frames: int, direction_cam: Sequence[float],
                         speed: float) -> torch.Tensor:
    """(T, 4, 4) poses translating the camera centre of ``base`` by ``speed`` world units per frame
    along ``direction_cam`` (camera frame: x = truck right, z = dolly in); orientation fixed."""
    rot = base[:3, :3]
    d = torch.as_tensor(direction_cam, dtype=_F64)
    d = rot.T @ (d / d.norm())  # world direction
    centers = camera_centers(base[None]) + _frames(num_frames)[:, None] * speed * d
    rots = rot.expand(num_frames, 3, 3)
    return make_pose(rots, -(rots @ centers.unsqueeze(-1)).squeeze(-1))


def orbit_trajectory(target: Sequence[float], radius: float, num_frames: int, start_deg: float,
                     rate_deg: float, height: float = 0.0, height_rate: float = 0.0
                     ) -> torch.Tensor:
    """(T, 4, 4) look-at poses on a horizontal circle of ``radius`` about ``target`` (world y is
    down): azimuth ``start_deg + t * rate_deg`` (0 = camera at -z of the target), camera height
    ``target_y + height + t * height_rate``. Rotation and translation together (arc / orbit)."""
    tgt = torch.as_tensor(target, dtype=_F64)
    az = torch.deg2rad(start_deg + _frames(num_frames) * rate_deg)
    eye = torch.stack([tgt[0] + radius * az.sin(),
                       tgt[1] + height + _frames(num_frames) * height_rate,
                       tgt[2] - radius * az.cos()], dim=-1)
    return look_at_batch(eye, tgt.expand(num_frames, 3))


def triangle_wave(t: torch.Tensor, amplitude: float, speed: float) -> torch.Tensor:
    """Ping-pong position in [-amplitude, amplitude] moving at ``speed`` per unit of t, starting
    at -amplitude (constant speed, reverses at the ends)."""
    if amplitude <= 0:
        return torch.zeros_like(t)
    period = 4 * amplitude
    s = torch.remainder(t * speed, period)
    return torch.where(s < 2 * amplitude, s - amplitude, 3 * amplitude - s)
