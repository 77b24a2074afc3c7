"""Weight-free dense flow (torch-lk): end-point error on grounded scenes and exact warps."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import render_object_pair

from geocon_torch.errors import GeoConError, ShapeError
from geocon_torch.flow import DenseLKFlow, get_flow
from geocon_torch.flow.lk_dense import median_filter, warp


def _homography_flow(H: torch.Tensor, h: int, w: int) -> torch.Tensor:
    """(P, 3, 3) with x_{t+1} ~ H x_t -> (P, 2, h, w) forward flow in px."""
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64),
                            torch.arange(w, dtype=torch.float64), indexing="ij")
    p = torch.stack([xs, ys, torch.ones_like(xs)], -1).reshape(-1, 3)
    q = torch.einsum("pij,nj->pni", H.double(), p)
    q = q[..., :2] / q[..., 2:]
    return (q - p[None, :, :2]).reshape(-1, h, w, 2).permute(0, 3, 1, 2)


def test_epe_on_grounded_rotation_scenes():
    """C2 (pure camera rotation): the true flow is x -> H x, H = K R K^-1."""
    synth = pytest.importorskip("geocon_torch.synth")
    frames, flows = [], []
    for motion in ("pan", "roll"):
        sc = synth.render_scene("C2", num_frames=3, size=(96, 128), seed=0, motion=motion,
                                supersample=3)
        f = sc.frames.float() / 255.0
        frames.append((f[:-1], f[1:]))
        flows.append(_homography_flow(sc.true_homographies, 96, 128))
    a = torch.cat([f[0] for f in frames])
    b = torch.cat([f[1] for f in frames])
    truth = torch.cat(flows)
    assert truth.norm(dim=1).mean() > 0.3  # the camera does move
    est = get_flow("torch-lk")
    epe = (est(a, b).double() - truth).norm(dim=1)
    assert epe.mean() < 0.5, epe.mean((1, 2))
    assert epe.mean((1, 2)).max() < 0.5


def _similarity_pair(img: torch.Tensor, angle: float, scale: float, tx: float, ty: float,
                     ss: int = 3):
    """Frames of ``img`` (1, 3, H*ss, W*ss) before / after x' = c + s R (x - c) + t, rendered
    at 1/ss resolution by area averaging, with the exact forward flow (2, H, W)."""
    hh, ww = img.shape[-2:]
    h, w = hh // ss, ww // ss
    c = torch.tensor([w / 2.0, h / 2.0], dtype=torch.float64)
    a = math.radians(angle)
    m = scale * torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                             dtype=torch.float64)
    t = torch.tensor([tx, ty], dtype=torch.float64)
    sub = (torch.arange(hh, dtype=torch.float64) + 0.5) / ss - 0.5
    subx = (torch.arange(ww, dtype=torch.float64) + 0.5) / ss - 0.5
    yy, xx = torch.meshgrid(sub, subx, indexing="ij")
    pts = torch.stack([xx, yy], -1)
    src = (pts - c - t) @ torch.linalg.inv(m).T + c  # where each hi-res sample comes from
    back = ((src - pts) * ss).permute(2, 0, 1)[None]
    second, _ = warp(img, back.to(img.dtype))
    f1, f2 = F.avg_pool2d(img, ss), F.avg_pool2d(second, ss)
    ys, xs = torch.meshgrid(torch.arange(h, dtype=torch.float64),
                            torch.arange(w, dtype=torch.float64), indexing="ij")
    p = torch.stack([xs, ys], -1)
    flow = ((p - c) @ m.T + c + t - p).permute(2, 0, 1)
    q = p + flow.permute(1, 2, 0)
    inside = (q[..., 0] > 2) & (q[..., 0] < w - 3) & (q[..., 1] > 2) & (q[..., 1] < h - 3)
    return f1[0], f2[0], flow, inside


def test_epe_on_exact_warps_of_a_real_image(shared_data):
    cv2 = pytest.importorskip("cv2")
    path = shared_data / "real" / "hill" / "1.JPG"
    if not path.is_file():
        pytest.skip(f"{path} not found")
    img = cv2.cvtColor(cv2.imread(str(path)), cv2.COLOR_BGR2RGB)
    img = cv2.resize(img, (384, 288), interpolation=cv2.INTER_AREA)
    x = torch.from_numpy(img).permute(2, 0, 1).float().div(255)[None]
    cases = [(0.0, 1.0, 2.3, -1.7), (3.0, 1.03, 4.0, 2.0), (-4.0, 0.97, -5.0, 3.0)]
    pairs = [_similarity_pair(x, *c) for c in cases]
    a = torch.stack([p[0] for p in pairs])
    b = torch.stack([p[1] for p in pairs])
    out = DenseLKFlow()(a, b).double()
    # flow is only defined where there is texture: score pixels whose local grey std (7x7)
    # exceeds 0.03 (the rock face; the flat sky and grass are excluded)
    grey = a[:1].mean(1, keepdim=True)
    mean = F.avg_pool2d(grey, 7, 1, 3, count_include_pad=False)
    var = F.avg_pool2d(grey ** 2, 7, 1, 3, count_include_pad=False) - mean ** 2
    textured = var.clamp_min(0).sqrt()[0, 0] > 0.03
    assert 0.3 < textured.float().mean() < 0.9
    for (f1, f2, flow, inside), est, case in zip(pairs, out, cases):
        epe = (est - flow).norm(dim=0)[inside & textured]
        assert epe.mean() < 0.5, (case, float(epe.mean()))
        assert epe.median() < 0.25, (case, float(epe.median()))


def test_epe_on_moving_object_scene():
    frames, mask, flow = render_object_pair(angle_deg=4.0, scale=1.04, shift=(2.5, -1.5), seed=3)
    f = frames.float()
    est = DenseLKFlow()(f[:1], f[1:])[0].double()
    epe = (est - flow).norm(dim=0)
    assert epe.mean() < 0.5
    assert epe[mask].median() < 0.25


def test_batch_equals_single_and_dtypes():
    frames, _, _ = render_object_pair(shift=(1.5, 0.5), seed=4, size=(48, 64), radius=15)
    f = frames.float()
    other, _, _ = render_object_pair(angle_deg=5.0, seed=5, size=(48, 64), radius=15)
    o = other.float()
    a, b = torch.stack([f[0], o[0]]), torch.stack([f[1], o[1]])
    est = DenseLKFlow()
    both = est(a, b)
    assert both.shape == (2, 2, 48, 64) and both.dtype == torch.float32
    torch.testing.assert_close(both[1:], est(a[1:], b[1:]), atol=1e-4, rtol=0)
    f64 = est(a.double(), b.double())
    assert f64.dtype == torch.float64
    torch.testing.assert_close(f64.float(), both, atol=2e-2, rtol=0)
    u8 = est((a * 255).round().to(torch.uint8), (b * 255).round().to(torch.uint8))
    assert u8.dtype == torch.float32
    torch.testing.assert_close(u8, both, atol=0.05, rtol=0)  # measured max 0.014 px
    same = est(a, a)
    assert same.abs().max() < 1e-4  # float32 resampling noise only


def test_median_filter_is_exact():
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(2, 3, 17, 19, generator=gen, dtype=torch.float64)
    for size in (3, 5):
        r = size // 2
        ref = F.pad(x, (r, r, r, r), mode="replicate").unfold(2, size, 1).unfold(3, size, 1)
        ref = ref.reshape(2, 3, 17, 19, -1).median(-1).values
        torch.testing.assert_close(median_filter(x, size), ref, rtol=0, atol=0)


def test_bad_inputs_and_names():
    est = get_flow("torch-lk")
    assert est.name == "torch-lk"
    with pytest.raises(ShapeError):
        est(torch.zeros(2, 2, 8, 8), torch.zeros(2, 2, 8, 8))
    with pytest.raises(ShapeError):
        est(torch.zeros(2, 3, 8, 8), torch.zeros(2, 3, 8, 9))
    with pytest.raises(GeoConError):
        get_flow("farneback")
    assert est(torch.zeros(0, 3, 8, 8), torch.zeros(0, 3, 8, 8)).shape == (0, 2, 8, 8)


def test_empty_frames_are_a_shape_error_and_nan_pixels_give_nan_flow():
    est = DenseLKFlow()
    for shape in ((1, 1, 0, 0), (2, 3, 0, 8), (1, 3, 8, 0), (0, 1, 0, 0)):
        with pytest.raises(ShapeError, match=r"img1 must have H, W >= 1 .*got \("):
            est(torch.zeros(shape), torch.zeros(shape))
    with pytest.raises(ShapeError, match=r"img2 must have H, W >= 1"):
        est(torch.zeros(1, 1, 8, 8), torch.zeros(1, 1, 8, 0))
    # documented: non-finite pixels are not checked (no host sync); they give non-finite flow
    # for their pair only, and the other pairs of the batch are untouched
    gen = torch.Generator().manual_seed(0)
    img = torch.rand(2, 1, 32, 32, generator=gen)
    nan = img.clone()
    nan[0, 0, 3, 3] = float("nan")
    flow = est(nan, img)
    assert not flow[0].isfinite().all()
    assert torch.equal(flow[1:], est(img[1:], img[1:]))
    # documented: float16 / bfloat16 / uint8 inputs give float32 flow
    for dtype in (torch.float16, torch.bfloat16):
        assert est(img.to(dtype), img.to(dtype)).dtype == torch.float32


def test_to_gray_checks_channels_and_dtype():
    from geocon_torch.flow.base import to_gray
    x = torch.tensor([0.5, 0.25, 1.0], dtype=torch.float64).view(1, 3, 1, 1).expand(2, 3, 2, 3)
    got = to_gray(x)
    assert got.shape == (2, 1, 2, 3) and got.dtype == torch.float64
    torch.testing.assert_close(got, torch.full((2, 1, 2, 3), 0.299 * 0.5 + 0.587 * 0.25 + 0.114,
                                               dtype=torch.float64), rtol=0, atol=1e-15)
    one = torch.rand(1, 1, 4, 4)
    assert to_gray(one) is one
    with pytest.raises(ShapeError, match=r"img must have shape \(P, 3, H, W\) or \(P, 1, H, W\), "
                                         r"got \(1, 2, 4, 4\)"):
        to_gray(torch.ones(1, 2, 4, 4))
    with pytest.raises(ShapeError, match=r"img must have shape .*got \(3, 4, 4\)"):
        to_gray(torch.ones(3, 4, 4))
    with pytest.raises(ShapeError, match=r"img must be a float tensor in \[0, 1\], got "
                                         r"torch.int64"):
        to_gray(torch.ones(1, 3, 4, 4, dtype=torch.long))
    with pytest.raises(ShapeError, match=r"got torch.uint8"):
        to_gray(torch.ones(1, 1, 4, 4, dtype=torch.uint8))
