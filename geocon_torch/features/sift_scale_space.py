"""Fixed-size DoG scale-space detection for a batch of frames (no data-dependent shapes).

The Gaussian pyramid of Lowe's SIFT (the frame doubled, camera sigma 0.5 -> 1.0, six Gaussian
images per octave at sigma 1.6 * 2^(i/3) octave px, three DoG intervals; the next octave
decimates level 3), then per octave: 3x3x3 DoG extrema above a pre-threshold and the ``k``
strongest per frame by ``topk`` (never ``nonzero``); the candidates of all octaves are then
refined together (the DoG octaves flattened into one buffer, one gather per step) in a fixed
number of quadratic steps (OpenCV's rule: move to the neighbour while an offset exceeds 0.5),
with OpenCV's contrast and edge (principal curvature ratio) tests. Every step is a fixed
sequence of batched tensor ops whose count depends on the frame size (octaves), not on the
number of frames or detections.

A frame's detections do not depend on the other frames of the call (bit for bit on the CPU):
the derivatives and the refinement are elementwise expressions in a fixed order (no GEMM over
the candidates, no reduction, no ``pow``: the CPU rounds a tensor's SIMD tail differently), and
the CPU's blur always runs oneDNN (:func:`_conv`). On CUDA the blur is cuDNN's, whose algorithm
is chosen by shape (batch size included).

Conventions: a pixel of octave ``o`` is ``0.5 * 2**o`` original px (octave 0 is the doubled
frame, its pixel 2i is original pixel i); positions are original px with pixel centres at
integers; ``sigma`` is the detection scale in original px.
"""
from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass
from typing import List, Tuple

import torch
import torch.nn.functional as F

from .._precision import cudnn_conv_tf32
from .._tensor_utils import constant_on, to_device

INTERVALS = 3  # DoG intervals per octave (Lowe, OpenCV)
SIGMA0 = 1.6
BORDER = 5  # octave px kept clear of extrema (OpenCV's SIFT_IMG_BORDER)
REFINE_STEPS = 5  # OpenCV's SIFT_MAX_INTERP_STEPS
MIN_OCTAVE_SIDE = 2 * BORDER + 3
#: how the separable Gaussian runs, per device type: "conv" (a (B, 1, H, W) image batch through
#: a 1-channel convolution) or "depthwise" (the frames as the channels of one image, a grouped
#: convolution: cuDNN's depthwise kernels); both compute the same sums
BLUR_LAYOUT = {"cpu": "conv", "default": "conv"}
#: how the 3x3x3 extrema filter runs, per device type: "shift" (maxima of shifted slices, a
#: fixed handful of ops, fastest on the CPU) or "pool" (one ``max_pool3d`` per sign)
EXTREMA_FILTER = {"cpu": "shift", "default": "shift"}
#: let cuDNN run the pyramid's float32 convolutions in TF32 (its default): a 10-bit mantissa
#: leaves ~1e-3 relative error in the blurred levels, the size of the DoG itself at low
#: contrast, so the pyramid turns it off (False) and matches the CPU to float32 rounding
PYRAMID_TF32 = False


@dataclass
class Detections:
    """Per-frame candidates of one or all octaves, (B, K) each.

    Attributes:
        xy: (B, K, 2) original px; sigma: (B, K) original px; response: (B, K) |refined DoG|;
        octave, level: (B, K) long (Gaussian level 1..3 of the detection); oct_xy: (B, K, 2)
        position in octave px; valid: (B, K) bool.
    """

    xy: torch.Tensor
    sigma: torch.Tensor
    response: torch.Tensor
    octave: torch.Tensor
    level: torch.Tensor
    oct_xy: torch.Tensor
    valid: torch.Tensor

    def take(self, idx: torch.Tensor) -> "Detections":
        """Entries ``idx (B, K')`` of every field."""
        def g(t: torch.Tensor) -> torch.Tensor:
            return t.gather(1, idx if t.ndim == 2 else idx[..., None].expand(-1, -1, t.shape[-1]))

        return Detections(*(g(getattr(self, f)) for f in self.__dataclass_fields__))


@functools.lru_cache(maxsize=16)
def _kernels(dtype: torch.dtype, device: torch.device) -> List[torch.Tensor]:
    """1-D Gaussian kernels of the initial blur and the five incremental blurs."""
    with torch.inference_mode(False):  # cached: usable by autograd even if built inside one
        k = 2.0 ** (1.0 / INTERVALS)
        sigmas = [math.sqrt(SIGMA0 ** 2 - 1.0)]
        sigmas += [SIGMA0 * k ** i * math.sqrt(k * k - 1.0) for i in range(INTERVALS + 2)]
        out = []
        for s in sigmas:
            r = int(4.0 * s + 0.5)
            x = torch.arange(-r, r + 1, dtype=torch.float64)
            g = torch.exp(-0.5 * (x / s) ** 2)
            out.append(to_device(g / g.sum(), device, dtype))
    return out


def _per_device(table: dict, device: torch.device) -> str:
    return table.get(device.type, table["default"])


def _conv(x: torch.Tensor, weight: torch.Tensor, groups: int = 1) -> torch.Tensor:
    """``F.conv2d(x, weight, groups=groups)`` (no padding), on the CPU in float32 always through
    oneDNN: ``conv2d`` picks its own im2col GEMM instead for a single small image (its
    ``use_mkldnn`` rule: batch 1 and at most 20 480 samples), which rounds differently, so a
    one-frame chunk's small octaves differed from the same frame's in a larger chunk; oneDNN
    gives a frame the same sums whatever the batch (``tests/features/
    test_torch_sift_batch_invariance.py``), and it is what ``conv2d`` runs for any larger one."""
    if (x.device.type == "cpu" and x.dtype == torch.float32 and torch.backends.mkldnn.enabled
            and torch.backends.mkldnn.is_available()):
        return torch.ops.aten.mkldnn_convolution(x, weight.contiguous(), None, [0, 0], [1, 1],
                                                 [1, 1], groups)
    return F.conv2d(x, weight, groups=groups)


def _blur(x: torch.Tensor, kernel: torch.Tensor) -> torch.Tensor:
    """Separable Gaussian of ``x (B, 1, H, W)``, reflected borders (replicated when too small);
    :data:`BLUR_LAYOUT` picks the convolution layout."""
    r = kernel.numel() // 2
    mode = "reflect" if min(x.shape[-2:]) > r else "replicate"
    b = x.shape[0]
    if _per_device(BLUR_LAYOUT, x.device) == "depthwise" and b > 1:
        x = x.reshape(1, b, *x.shape[-2:])
        kx, ky = kernel.view(1, 1, 1, -1).expand(b, 1, 1, -1), kernel.view(1, 1, -1, 1).expand(
            b, 1, -1, 1)
        x = _conv(F.pad(x, (r, r, 0, 0), mode=mode), kx, groups=b)
        return _conv(F.pad(x, (0, 0, r, r), mode=mode), ky, groups=b).reshape(b, 1,
                                                                              *x.shape[-2:])
    x = _conv(F.pad(x, (r, r, 0, 0), mode=mode), kernel.view(1, 1, 1, -1))
    return _conv(F.pad(x, (0, 0, r, r), mode=mode), kernel.view(1, 1, -1, 1))


def _cudnn_tf32(allowed: bool) -> contextlib.AbstractContextManager:
    """cuDNN's float32 convolutions in TF32 (``allowed``) or full float32 inside the block, the
    caller's settings restored exactly after it (:func:`.._precision.cudnn_conv_tf32`). Kept
    although scoring's entry points already run in full float32: the pyramid is also reached
    from a bare ``TorchSIFT`` call, and ``PYRAMID_TF32 = True`` must still turn TF32 on."""
    return cudnn_conv_tf32(allowed)


def gaussian_pyramid(gray: torch.Tensor) -> List[torch.Tensor]:
    """Gaussian octaves of ``gray (B, 1, H, W)``: a list of (B, 6, H_o, W_o), octave 0 at twice
    the frame size; octaves stop before a side would drop below ``MIN_OCTAVE_SIDE`` (cuDNN's
    TF32 as :data:`PYRAMID_TF32` says)."""
    with _cudnn_tf32(PYRAMID_TF32):
        return _octaves(gray)


def _octaves(gray: torch.Tensor) -> List[torch.Tensor]:
    h, w = gray.shape[-2:]
    x = F.interpolate(gray, size=(2 * h - 1, 2 * w - 1), mode="bilinear", align_corners=True)
    x = F.pad(x, (0, 1, 0, 1), mode="replicate")
    ks = _kernels(gray.dtype, gray.device)
    first = _blur(x, ks[0])
    octaves = []
    while True:
        levels = [first]
        for k in ks[1:]:
            levels.append(_blur(levels[-1], k))
        octaves.append(torch.cat(levels, 1))
        hh, ww = first.shape[-2:]
        if min(hh // 2, ww // 2) < MIN_OCTAVE_SIDE:
            return octaves
        first = levels[INTERVALS][..., : 2 * (hh // 2): 2, : 2 * (ww // 2): 2]


def _max3x3(x: torch.Tensor) -> torch.Tensor:
    """3x3 maximum filter of ``x (..., H, W)`` (borders replicated) by shifted maxima: faster
    than ``max_pool2d`` on the CPU, and a fixed handful of ops."""
    p = F.pad(x, (1, 1, 1, 1), mode="replicate")
    r = torch.maximum(torch.maximum(p[..., :-2], p[..., 1:-1]), p[..., 2:])
    return torch.maximum(torch.maximum(r[..., :-2, :], r[..., 1:-1, :]), r[..., 2:, :])


def _extrema_scores(dog: torch.Tensor, threshold: float) -> torch.Tensor:
    """(B, 3, H, W) |DoG| at 3x3x3 extrema of levels 1..3 above ``threshold`` (0 elsewhere)."""
    _, _, h, w = dog.shape
    top = INTERVALS + 1
    if _per_device(EXTREMA_FILTER, dog.device) == "pool":  # -inf padding: the same maxima
        mx = F.max_pool3d(dog[:, None], 3, 1, 1)[:, 0, 1:top]
        mn = -F.max_pool3d(-dog[:, None], 3, 1, 1)[:, 0, 1:top]
    else:
        mx, mn = _max3x3(dog), -_max3x3(-dog)
        mx = torch.maximum(torch.maximum(mx[:, :top - 1], mx[:, 1:top]), mx[:, 2:top + 1])
        mn = torch.minimum(torch.minimum(mn[:, :top - 1], mn[:, 1:top]), mn[:, 2:top + 1])
    inner = dog[:, 1:top]
    ext = (inner == mx) | (inner == mn)
    ext &= inner.abs() > threshold
    ys = torch.arange(h, device=dog.device)
    xs = torch.arange(w, device=dog.device)
    inside = ((ys >= BORDER) & (ys < h - BORDER))[:, None] & ((xs >= BORDER) & (xs < w - BORDER))
    return torch.where(ext & inside, inner.abs(), torch.zeros_like(inner))


#: the 19 samples of the 3x3x3 neighbourhood the DoG derivatives use, as (ds, dy, dx): the
#: centre, the +1 and the -1 neighbours along x, y, s (a row of three each), then the (+, +),
#: (-, -), (+, -) and (-, +) corners of the axis pairs (x, y), (x, s), (y, s) (a row each)
_SAMPLES = torch.tensor([[0, 0, 0],
                         [0, 0, 1], [0, 1, 0], [1, 0, 0],
                         [0, 0, -1], [0, -1, 0], [-1, 0, 0],
                         [0, 1, 1], [1, 0, 1], [1, 1, 0],
                         [0, -1, -1], [-1, 0, -1], [-1, -1, 0],
                         [0, -1, 1], [-1, 0, 1], [-1, 1, 0],
                         [0, 1, -1], [1, 0, -1], [1, -1, 0]])
_DS, _DY, _DX = (_SAMPLES[:, i].contiguous() for i in range(3))
_HESS = torch.tensor([0, 3, 4, 3, 1, 5, 4, 5, 2])  # (3, 3) of (dxx, dyy, dss, dxy, dxs, dys)
# adjugate of a 3x3 matrix (flattened row-major): cof = a[P] * a[Q] - a[R] * a[S]
_P, _Q = torch.tensor([4, 2, 1, 5, 0, 2, 3, 1, 0]), torch.tensor([8, 7, 5, 6, 8, 3, 7, 6, 4])
_R, _S = torch.tensor([5, 1, 2, 3, 2, 0, 4, 0, 1]), torch.tensor([7, 8, 4, 8, 6, 5, 6, 7, 3])


def _sum3(t: torch.Tensor) -> torch.Tensor:
    """``(t0 + t1) + t2`` over the last axis (size 3) of ``t``: elementwise adds in a fixed order,
    so an entry's sum never depends on the tensor's other rows (a reduction kernel's strategy
    may, on CUDA, with the number of rows)."""
    t0, t1, t2 = t.unbind(-1)
    return (t0 + t1) + t2


@dataclass
class DoGStack:
    """The DoG octaves of a batch flattened into one buffer (for one gather over all octaves).

    Attributes:
        flat: (sum_o B * 5 * H_o * W_o,) values; base, height, width: (O,) long per octave.
    """

    flat: torch.Tensor
    base: torch.Tensor
    height: torch.Tensor
    width: torch.Tensor

    def neighbours(self, o: torch.Tensor) -> torch.Tensor:
        """(..., 19) flat offsets in octave ``o`` of the neighbourhood samples the derivatives
        use (:data:`_SAMPLES`)."""
        h, w = self.height[o][..., None], self.width[o][..., None]
        dev = h.device
        return (constant_on(_DS, dev) * (h * w) + constant_on(_DY, dev) * w
                + constant_on(_DX, dev))

    def derivatives(self, o: torch.Tensor, off: torch.Tensor, b: torch.Tensor, s: torch.Tensor,
                    y: torch.Tensor, x: torch.Tensor
                    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Value (...), gradient (..., 3) and Hessian (..., 3, 3) (order x, y, s) at integer
        positions of octave ``o`` (``off``: :meth:`neighbours` of ``o``): central differences,
        each an elementwise expression of the samples in a fixed order (no GEMM: a GEMM's
        rounding depends on how many rows share the call, i.e. on the other frames)."""
        h, w = self.height[o], self.width[o]
        centre = self.base[o] + ((b * 5 + s) * h + y) * w + x
        v = self.flat[centre[..., None] + off]  # (..., 19)
        c = v[..., 0]
        plus, minus, pp, mm, pm, mp = v[..., 1:].unflatten(-1, (6, 3)).unbind(-2)
        grad = 0.5 * (plus - minus)
        diag = (plus + minus) - 2.0 * c[..., None]  # dxx, dyy, dss
        mixed = 0.25 * ((pp + mm) - (pm + mp))  # dxy, dxs, dys
        hess = torch.cat([diag, mixed], -1).index_select(-1, constant_on(_HESS, v.device))
        return c, grad, hess.unflatten(-1, (3, 3))


def _solve3(hess: torch.Tensor, g: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """(-H^-1 g (..., 3), ok (...)) by the adjugate (no LAPACK call, no host sync, no GEMM: fixed
    elementwise sums); ok False where H is singular."""
    a = hess.flatten(-2)
    dev = a.device
    p, q, r, s = (constant_on(c, dev) for c in (_P, _Q, _R, _S))
    cof = a.index_select(-1, p) * a.index_select(-1, q) - a.index_select(-1, r) * a.index_select(
        -1, s)
    det = _sum3(a[..., :3] * cof[..., 0::3])
    ok = det.abs() > 1e-12
    safe = torch.where(ok, det, torch.ones_like(det))
    return -_sum3(cof.unflatten(-1, (3, 3)) * g[..., None, :]) / safe[..., None], ok


def octave_candidates(gauss: torch.Tensor, k: int, threshold: float
                      ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                                 torch.Tensor]:
    """DoG ``(B, 5, H, W)`` of one octave and its ``k`` strongest extrema per frame as
    (score, s, y, x) (B, k) each (score 0: no extremum, position clamped inside)."""
    b, _, h, w = gauss.shape
    dog = gauss[:, 1:] - gauss[:, :-1]
    score = _extrema_scores(dog, threshold).reshape(b, -1)
    top, idx = score.topk(min(k, score.shape[1]), dim=1)
    s = torch.div(idx, h * w, rounding_mode="floor") + 1
    y = torch.div(idx % (h * w), w, rounding_mode="floor").clamp(BORDER, h - 1 - BORDER)
    x = (idx % w).clamp(BORDER, w - 1 - BORDER)
    return dog, top, s, y, x


def _first_of_equal(key: torch.Tensor) -> torch.Tensor:
    """(B, N) bool: True where ``key[b, n]`` differs from every earlier key of row b (one
    stable sort, no host sync)."""
    sk, order = torch.sort(key, dim=1, stable=True)
    repeat = torch.zeros_like(sk, dtype=torch.bool)
    repeat[:, 1:] = sk[:, 1:] == sk[:, :-1]
    return ~torch.zeros_like(repeat).scatter_(1, order, repeat)


def detect(octaves: List[torch.Tensor], k: int, threshold: float, contrast: float,
           edge_ratio: float) -> Detections:
    """The ``k`` strongest extrema per frame of every octave (B, O * k), refined together."""
    parts = [octave_candidates(g, k, threshold) for g in octaves]
    dev = octaves[0].device
    sizes = [p[0].numel() for p in parts]
    stack = DoGStack(torch.cat([p[0].reshape(-1) for p in parts]),
                     *to_device([[sum(sizes[:i]) for i in range(len(sizes))],
                                 [g.shape[-2] for g in octaves], [g.shape[-1] for g in octaves]],
                                dev).unbind(0))
    top, s, y, x = (torch.cat([p[i] for p in parts], 1) for i in range(1, 5))
    o = torch.cat([torch.full_like(p[1], i, dtype=torch.long) for i, p in enumerate(parts)], 1)
    bi = torch.arange(top.shape[0], device=dev)[:, None].expand_as(o)
    xmax, ymax = stack.width[o] - 1 - BORDER, stack.height[o] - 1 - BORDER
    off_n = stack.neighbours(o)
    done = torch.zeros_like(top, dtype=torch.bool)
    for _ in range(REFINE_STEPS):  # fixed count: a converged point stops moving
        _, g, hess = stack.derivatives(o, off_n, bi, s, y, x)
        off, ok = _solve3(hess, g)
        done = done | (ok & (off.abs() < 0.5).all(-1))
        step = torch.where(done[..., None], torch.zeros_like(off), off.round()).long()
        x = torch.minimum((x + step[..., 0]).clamp_min(BORDER), xmax)
        y = torch.minimum((y + step[..., 1]).clamp_min(BORDER), ymax)
        s = (s + step[..., 2]).clamp(1, INTERVALS)
    v, g, hess = stack.derivatives(o, off_n, bi, s, y, x)
    off, ok = _solve3(hess, g)
    ok = ok & done & (off.abs() < 1.0).all(-1)
    off = torch.where(ok[..., None], off.clamp(-0.5, 0.5), torch.zeros_like(off))
    resp = (v + 0.5 * _sum3(g * off)).abs()
    tr = hess[..., 0, 0] + hess[..., 1, 1]
    det = hess[..., 0, 0] * hess[..., 1, 1] - hess[..., 0, 1] ** 2
    ok = ok & (top > 0) & (resp >= contrast) & (det > 0) & \
        (tr * tr * edge_ratio < (edge_ratio + 1) ** 2 * det)
    # candidates refined onto the same sample are one keypoint (OpenCV drops the copies): a
    # copy in frame j ties the true match's nearest neighbour (ratio 1), losing the match
    cell = ((o * (INTERVALS + 2) + s) * stack.height.max() + y) * stack.width.max() + x
    ok = ok & _first_of_equal(torch.where(ok, cell, -1 - torch.arange(
        cell.shape[1], device=dev).expand_as(cell)))
    pix = 0.5 * torch.pow(2.0, o.to(off.dtype))
    oct_xy = torch.stack([x + off[..., 0], y + off[..., 1]], -1)
    # 2^e as exp(e ln 2): the CPU's pow / exp2 run one function on whole SIMD blocks and another
    # on a tensor's tail, so an entry's value depended on its position (on the other frames)
    sigma = SIGMA0 * torch.exp((s.to(off.dtype) + off[..., 2]) * (math.log(2.0) / INTERVALS)) * pix
    return Detections(xy=oct_xy * pix[..., None], sigma=sigma,
                      response=torch.where(ok, resp, torch.full_like(resp, -1.0)), octave=o,
                      level=s, oct_xy=oct_xy, valid=ok)


__all__ = ["Detections", "gaussian_pyramid", "detect", "INTERVALS"]
