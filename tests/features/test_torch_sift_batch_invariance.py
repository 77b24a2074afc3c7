"""torch-sift is batch-invariant: a frame's keypoints, scores and descriptors are the same, bit for
bit on the CPU, whatever other frames share its call or its chunk, and so is a clip's score with
``features.backend`` "torch-sift" alone or in a batch.

What made them differ: a one-frame chunk's small octaves went through conv2d's im2col GEMM, not
oneDNN; ``atan2`` / ``pow`` run one function on whole SIMD blocks and another on a tensor's tail;
and on CUDA the DoG stencil, the orientation smoothing and the descriptor pooling were GEMMs over
all the chunk's keypoints, whose kernel cuBLAS picks by shape (emulated here on the CPU)."""
from __future__ import annotations

import json

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from geocon_torch.features import sift_patch, torch_sift
from geocon_torch.features.sift_scale_space import DoGStack
from geocon_torch.features.torch_sift import TorchSIFT
from geocon_torch.pipeline import score_clip, score_clips
from geocon_torch.synth import grounded_clip

FIELDS = ("xy", "scores", "descriptors")
#: ops whose result for one entry may depend on the others: BLAS / cuBLAS GEMMs and convolutions
#: pick kernels by shape (conv2d's own choice on the CPU too; oneDNN called directly is exempt)
GEMMS = {"mm", "bmm", "addmm", "baddbmm", "mv", "addmv", "dot", "convolution"}
#: CPU ops whose SIMD body and scalar tail differ (pow with a fractional exponent only)
TAIL_DEPENDENT = {"atan2", "exp2", "pow"}


@pytest.fixture(scope="module")
def gray():
    """(6, 1, 64, 96) frames in [0, 1] from three categories."""
    frames = torch.cat([grounded_clip(c, num_frames=2, size=(64, 96), seed=k).frames
                        for k, c in enumerate(("C1", "C2", "C3"))])
    return frames.float().mean(1, keepdim=True) / 255.0


def _assert_same_frames(got, ref, rows):
    """Frames ``rows`` of ``got`` equal the frames of ``ref`` (their valid keypoints)."""
    for t, r in enumerate(rows):
        n = int(ref.mask[t].sum())
        assert int(got.mask[r].sum()) == n and n > 20, (r, n)
        for f in FIELDS:
            assert torch.equal(getattr(got, f)[r, :n], getattr(ref, f)[t, :n]), (f, r)
        for k in ("scale", "orientation"):
            assert torch.equal(got.extra[k][r, :n], ref.extra[k][t, :n]), (k, r)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_frames_alone_equal_frames_in_a_batch_and_in_any_chunking(gray, dtype, monkeypatch):
    """Frames 2, 3 alone, inside the 6-frame batch (one chunk) and in chunks of one frame."""
    ex = TorchSIFT(max_keypoints=300, device="cpu")
    x = gray.to(dtype)
    alone = ex.extract(x[2:4])
    batch = ex.extract(x)
    assert batch.xy.dtype == dtype
    _assert_same_frames(batch, alone, (2, 3))
    monkeypatch.setitem(torch_sift.CHUNK_SAMPLES, "cpu", 1.0)  # one frame per chunk
    assert torch_sift.chunk_frames(300, 64, 96, 32, torch.device("cpu")) == 1
    _assert_same_frames(ex.extract(x), batch, range(6))


def _integral(exponent) -> bool:
    """Whether a ``pow`` exponent is integral (or +-0.5: a square root)."""
    if isinstance(exponent, torch.Tensor):
        return not exponent.is_floating_point() or bool((exponent == exponent.round()).all())
    return float(exponent).is_integer() or abs(float(exponent)) == 0.5


class _ShapeDependentKernels(TorchDispatchMode):
    """Records the :data:`GEMMS` and :data:`TAIL_DEPENDENT` ops run, and emulates cuBLAS: a
    GEMM's output is scaled by ``1 + 2^-20 * (bit length of its row count mod 4)``."""

    def __init__(self) -> None:
        super().__init__()
        self.seen = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name == "pow" and _integral(args[1]):
            return out  # x^k, k integer (or a square root): exact or one function everywhere
        if name in TAIL_DEPENDENT:
            self.seen.add(name)
        if name in GEMMS:
            self.seen.add(name)
            rows = out.numel() // max(out.shape[-1], 1)
            out = out * (1.0 + 2.0 ** -20 * (rows.bit_length() % 4))
        return out


def test_no_shape_dependent_kernel_and_emulated_cublas_leaves_frames_alone(gray):
    """Under GEMMs whose rounding depends on the row count, frames 1, 2 alone equal them in the
    batch; torch-sift runs no GEMM, convolution (but oneDNN's) or tail-dependent CPU op."""
    ex = TorchSIFT(max_keypoints=300, device="cpu")
    with _ShapeDependentKernels() as mode:
        alone = ex.extract(gray[1:3])
        batch = ex.extract(gray)
    assert mode.seen == set()
    _assert_same_frames(batch, alone, (1, 2))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_gradient_angles_do_not_depend_on_the_position_in_the_tensor(dtype):
    """magnitude_orientation of slices of 3000 gradients equals that of the whole (the CPU's
    atan2 differed in the last bit between SIMD blocks and the tail)."""
    g = torch.Generator().manual_seed(0)
    gx, gy = torch.randn(2, 3000, generator=g, dtype=torch.float64).to(dtype)
    gx[:10] = 0.0
    mag, ori = sift_patch.magnitude_orientation(gx, gy, 1e-8)
    for start in range(0, 40, 3):
        for n in (1, 7, 21, 45, 100, 1001):
            m, o = sift_patch.magnitude_orientation(gx[start:start + n].clone(),
                                                    gy[start:start + n].clone(), 1e-8)
            assert torch.equal(o, ori[start:start + n]) and torch.equal(m, mag[start:start + n])
    ref = torch.atan2(gy, gx + 1e-8) + 2 * torch.pi
    torch.testing.assert_close(ori, ref, rtol=0, atol=1e-6 if dtype == torch.float32 else 4e-15)


def test_patch_orientation_and_descriptor_rows_do_not_depend_on_the_other_rows(device, dtype):
    """sift_patch on 1 and 5 patches alone and among 400 others (float32 and float64; on CUDA
    too where there is one: no GEMM and no reduction whose split depends on the row count)."""
    g = torch.Generator().manual_seed(0)
    many = torch.rand(405, 1, 32, 32, generator=g, dtype=torch.float64).to(device, dtype)
    upright = many[:, :, :19, :19].contiguous()
    for fn, p in ((sift_patch.dominant_orientation, upright), (sift_patch.sift_descriptor, many)):
        full = fn(p)
        for sl in (slice(200, 201), slice(200, 205), slice(404, 405)):
            assert torch.equal(full[sl], fn(p[sl].clone())), (fn.__name__, sl)


def _stencil() -> torch.Tensor:
    """(27, 10) central-difference weights on a 3x3x3 neighbourhood (flattened [s, y, x]) giving
    v, dx, dy, ds, dxx, dyy, dss, dxy, dxs, dys: the GEMM the derivatives replace."""
    w = torch.zeros(3, 3, 3, 10, dtype=torch.float64)
    w[1, 1, 1, 0] = 1
    for col, (ds, dy, dx) in ((1, (0, 0, 1)), (2, (0, 1, 0)), (3, (1, 0, 0))):
        w[1 + ds, 1 + dy, 1 + dx, col] += 0.5
        w[1 - ds, 1 - dy, 1 - dx, col] -= 0.5
        w[1 + ds, 1 + dy, 1 + dx, col + 3] += 1
        w[1 - ds, 1 - dy, 1 - dx, col + 3] += 1
        w[1, 1, 1, col + 3] -= 2
    for col, (a, b) in ((7, (2, 1)), (8, (2, 0)), (9, (1, 0))):  # (x, y), (x, s), (y, s)
        for sa in (-1, 1):
            for sb in (-1, 1):
                idx = [1, 1, 1]
                idx[a] += sa
                idx[b] += sb
                w[idx[0], idx[1], idx[2], col] += 0.25 * sa * sb
    return w.reshape(27, 10)


def test_dog_derivatives_are_the_stencil_and_per_sample(device, dtype):
    """The explicit differences equal the (27, 10) stencil GEMM to rounding, and 3 positions
    alone give the bits they give among 3000."""
    g = torch.Generator().manual_seed(1)
    h, w = 20, 24
    flat = torch.rand(2 * 5 * h * w, generator=g, dtype=torch.float64)
    stack = DoGStack(flat.to(device, dtype), *(torch.tensor([i], device=device)
                                               for i in (0, h, w)))
    n = 3000
    b, s = torch.randint(0, 2, (n,), generator=g), torch.randint(1, 4, (n,), generator=g)
    y, x = torch.randint(1, h - 1, (n,), generator=g), torch.randint(1, w - 1, (n,), generator=g)
    o = torch.zeros(n, dtype=torch.long)
    args = [t.to(device) for t in (o, b, s, y, x)]
    v, grad, hess = (t.cpu() for t in stack.derivatives(args[0], stack.neighbours(args[0]),
                                                        *args[1:]))
    few = [t[:3] for t in args]
    part = stack.derivatives(few[0], stack.neighbours(few[0]), *few[1:])
    for f, p in zip((v, grad, hess), part):
        assert torch.equal(f[:3], p.cpu())
    ar = torch.arange(-1, 2)
    nb = ((b[:, None, None, None] * 5 + s[:, None, None, None] + ar[:, None, None]) * h
          + y[:, None, None, None] + ar[:, None]) * w + x[:, None, None, None] + ar
    d = flat[nb.reshape(n, 27)] @ _stencil()
    ref_hess = d[:, [4, 7, 8, 7, 5, 9, 8, 9, 6]].reshape(n, 3, 3)
    tol = 1e-6 if dtype == torch.float32 else 1e-15
    for got, ref in ((v, d[:, 0]), (grad, d[:, 1:4]), (hess, ref_hess)):
        torch.testing.assert_close(got.double(), ref, rtol=0, atol=tol)


def _json(result) -> str:
    out = result.to_dict()
    out.pop("timing_s", None)
    out.pop("clip", None)
    return json.dumps(out, sort_keys=True, default=str)


def test_score_clips_with_torch_sift_equals_each_clip_alone(monkeypatch):
    """Two 4-frame clips scored together in feature chunks of 3 frames (3 + 3 + 2; alone 3 + 1,
    as the audit's 15 + 1) and each alone: the same result dicts."""
    cfg = {"io": {"long_side": None}, "features": {"backend": "torch-sift"}}
    clips = [grounded_clip("C2", num_frames=4, size=(64, 96), seed=3).frames,
             grounded_clip("C4", num_frames=4, size=(64, 96), seed=4).frames]
    monkeypatch.setitem(torch_sift.CHUNK_SAMPLES, "cpu", 3 * (4 * 2000 * 32 * 32 + 40 * 64 * 96))
    assert torch_sift.chunk_frames(2000, 64, 96, 32, torch.device("cpu")) == 3
    both = score_clips(clips, config=cfg, device="cpu", preset="background")
    assert [r.status for r in both] == ["ok", "ok"]
    for clip, res in zip(clips, both):
        assert _json(score_clip(clip, config=cfg, device="cpu", preset="background")) == \
            _json(res)


def test_atan2_quadrants_and_zero_over_zero():
    """Every quadrant and axis as torch.atan2, and 0 / 0 gives 0 (not NaN, which would become a
    histogram bin index)."""
    from geocon_torch.features.sift_patch import _atan2

    y = torch.tensor([0.0, 0.0, 1.0, -1.0, 1.0, -1.0, 0.0, -0.0, 2.0, -3.0])
    x = torch.tensor([0.0, 1.0, 0.0, 0.0, -1.0, -1.0, -1.0, -1.0, 5.0, 0.5])
    assert torch.allclose(_atan2(y, x), torch.atan2(y, x), atol=1e-7, rtol=0)
    assert float(_atan2(y, x)[0]) == 0.0
