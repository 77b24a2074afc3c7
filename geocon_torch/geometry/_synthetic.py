"""Synthetic correspondences with known geometry (for tests and benchmarks/ransac.py).

Homography pairs: a plane seen by two pinhole cameras (``H = K (R - t n^T / d) K^-1``).
Fundamental pairs: random 3-D points and two camera poses (``F = K^-T [t]_x R K^-1``).
Inliers get Gaussian pixel noise; outliers are replaced by uniform points in image 2.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import torch


def _skew(v: np.ndarray) -> np.ndarray:
    return np.array([[0, -v[2], v[1]], [v[2], 0, -v[0]], [-v[1], v[0], 0]])


def _rotation(rng: np.random.Generator, max_angle: float) -> np.ndarray:
    axis = rng.normal(size=3)
    k = _skew(axis / np.linalg.norm(axis))
    ang = rng.uniform(-max_angle, max_angle)
    return np.eye(3) + np.sin(ang) * k + (1 - np.cos(ang)) * (k @ k)


def _setup(P: int, N: int, seed: int, size: Tuple[int, int]):
    """RNG, intrinsics, their inverse and uniform image-1 points (P, N, 2)."""
    rng = np.random.default_rng(seed)
    K = intrinsics(size)
    h, w = size
    return rng, K, np.linalg.inv(K), rng.uniform([0, 0], [w, h], (P, N, 2))


def intrinsics(size: Tuple[int, int] = (720, 1024), focal: float = 900.0) -> np.ndarray:
    h, w = size
    return np.array([[focal, 0, w / 2.0], [0, focal, h / 2.0], [0, 0, 1.0]])


def _finish(x1, x2, model, outlier_ratio, noise_px, size, rng, dtype, device):
    P, N = x1.shape[:2]
    h, w = size
    x1c, x2c = x1.copy(), x2.copy()
    x1 = x1 + rng.normal(0, noise_px, x1.shape)
    x2 = x2 + rng.normal(0, noise_px, x2.shape)
    n_out = int(round(outlier_ratio * N))
    inl = np.ones((P, N), dtype=bool)
    for p in range(P):
        o = rng.choice(N, n_out, replace=False)
        inl[p, o] = False
        x2[p, o] = rng.uniform([0, 0], [w, h], (n_out, 2))
    t = lambda a: torch.as_tensor(a, dtype=dtype, device=device)  # noqa: E731
    return {"x1": t(x1), "x2": t(x2), "model": t(model), "x1_clean": t(x1c), "x2_clean": t(x2c),
            "inliers": torch.as_tensor(inl, device=device)}


def homography_pairs(P: int, N: int, *, outlier_ratio: float = 0.3, noise_px: float = 0.5,
                     seed: int = 0, size: Tuple[int, int] = (720, 1024),
                     dtype: torch.dtype = torch.float64, device=None) -> Dict[str, torch.Tensor]:
    """P pairs of N matches of a plane under camera rotation + translation.

    Returns dict: x1, x2 (P, N, 2) px; model (P, 3, 3) true H (x2 ~ H x1, H[2,2] = 1);
    x1_clean, x2_clean (P, N, 2) the noise-free true correspondences (held-out checks);
    inliers (P, N) bool true inliers.
    """
    rng, K, Ki, x1 = _setup(P, N, seed, size)
    x2 = np.empty_like(x1)
    Hs = np.empty((P, 3, 3))
    for p in range(P):
        R = _rotation(rng, 0.08)
        t = rng.normal(0, 0.15, 3)
        nrm = np.array([rng.normal(0, 0.2), rng.normal(0, 0.2), 1.0])
        nrm /= np.linalg.norm(nrm)
        d = rng.uniform(3, 8)
        H = K @ (R - np.outer(t, nrm) / d) @ Ki
        H /= H[2, 2]
        xh = np.c_[x1[p], np.ones(N)] @ H.T
        x2[p] = xh[:, :2] / xh[:, 2:]
        Hs[p] = H
    return _finish(x1, x2, Hs, outlier_ratio, noise_px, size, rng, dtype, device)


def fundamental_pairs(P: int, N: int, *, outlier_ratio: float = 0.3, noise_px: float = 0.5,
                      seed: int = 0, size: Tuple[int, int] = (720, 1024),
                      dtype: torch.dtype = torch.float64, device=None
                      ) -> Dict[str, torch.Tensor]:
    """P pairs of N matches of random 3-D points (depth 4-16) seen from two poses.

    Returns dict: x1, x2 (P, N, 2) px; model (P, 3, 3) true F (x2^T F x1 = 0, unit norm);
    x1_clean, x2_clean (P, N, 2) noise-free true correspondences; inliers (P, N) bool.
    """
    rng, K, Ki, x1 = _setup(P, N, seed, size)
    x2 = np.empty_like(x1)
    Fs = np.empty((P, 3, 3))
    for p in range(P):
        depth = rng.uniform(4, 16, N)
        X = (np.c_[x1[p], np.ones(N)] @ Ki.T) * depth[:, None]
        R = _rotation(rng, 0.1)
        t = rng.normal(0, 1, 3)
        t = t / np.linalg.norm(t) * rng.uniform(0.5, 1.5)
        Xc = X @ R.T + t
        xh = Xc @ K.T
        x2[p] = xh[:, :2] / xh[:, 2:]
        F = Ki.T @ _skew(t) @ R @ Ki
        Fs[p] = F / np.linalg.norm(F)
    return _finish(x1, x2, Fs, outlier_ratio, noise_px, size, rng, dtype, device)
