import numpy as np
import pytest
import torch

from geocon_torch._tensor_utils import (constant_on, masked_mean, masked_median,
                                        masked_quantile, to_device)


@pytest.mark.parametrize("q", [0.0, 0.25, 0.5, 0.9, 1.0])
def test_masked_quantile_matches_numpy(q, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 11, generator=g, dtype=dtype)
    m = torch.rand(6, 11, generator=g) > 0.4
    m[0] = False
    got, ok = masked_quantile(x, m, q, fill=-1.0)
    assert not ok[0] and got[0] == -1.0
    for i in range(1, 6):
        if m[i].any():
            assert got[i].item() == pytest.approx(np.quantile(x[i][m[i]].numpy(), q), abs=1e-6)


def test_masked_median_and_mean_dim0():
    x = torch.tensor([[1.0, 5.0], [3.0, 7.0], [100.0, 9.0]])
    m = torch.tensor([[True, True], [True, True], [False, True]])
    med, ok = masked_median(x, m, dim=0)
    assert med.tolist() == [2.0, 7.0] and ok.all()
    mean, _ = masked_mean(x, m, dim=0)
    assert mean.tolist() == [2.0, 7.0]
    empty, ok = masked_mean(x, torch.zeros_like(m), dim=0)
    assert empty.tolist() == [0.0, 0.0] and not ok.any()


def test_masked_quantile_of_zero_length_rows():
    got, ok = masked_quantile(torch.zeros(3, 0), torch.zeros(3, 0, dtype=torch.bool), 0.5, fill=7.0)
    assert got.tolist() == [7.0, 7.0, 7.0] and not ok.any()


def test_sample_at_pixels_matches_cv2_remap_with_replicated_border(dtype):
    import cv2

    from geocon_torch._tensor_utils import sample_at_pixels

    g = torch.Generator().manual_seed(1)
    img = torch.rand(1, 1, 9, 13, generator=g, dtype=dtype)
    xy = torch.rand(1, 5, 7, 2, generator=g, dtype=dtype) * torch.tensor([16.0, 12.0],
                                                                           dtype=dtype) - 1.5
    got = sample_at_pixels(img, xy)[0, 0]
    want = cv2.remap(img[0, 0].float().numpy(), xy[0, ..., 0].float().numpy(),
                     xy[0, ..., 1].float().numpy(), cv2.INTER_LINEAR,
                     borderMode=cv2.BORDER_REPLICATE)
    assert np.allclose(got.float().numpy(), want, atol=2e-2)  # remap uses 5-bit weights
    assert torch.allclose(sample_at_pixels(img, torch.tensor([[[[4.0, 3.0]]]], dtype=dtype)),
                          img[..., 3:4, 4:5])  # integer positions hit pixel centres exactly


def test_mask_at_pixels_nearest_pixel_frames_and_bounds():
    from geocon_torch._tensor_utils import mask_at_pixels

    mask = torch.zeros(2, 4, 5, dtype=torch.bool)
    mask[0, 1, 2] = True
    mask[1, 3, 4] = True
    xy = torch.tensor([[[2.4, 0.6], [4.0, 3.0], [-0.6, 0.0], [2.0, 1.0]]])
    assert mask_at_pixels(mask[0], xy).tolist() == [[True, False, False, True]]
    frames = torch.tensor([[0, 1, 1, 1]])
    assert mask_at_pixels(mask, xy, frames).tolist() == [[True, True, False, False]]
    assert mask_at_pixels(mask[0], torch.tensor([[5.5, 1.0]])).tolist() == [False]  # outside


def test_finite_equals_isfinite():
    from geocon_torch._tensor_utils import finite

    for dt in (torch.float16, torch.float32, torch.float64):
        info = torch.finfo(dt)
        x = torch.tensor([0.0, -0.0, 1.5, -2.0, info.max, -info.max, info.tiny, info.eps,
                          float("inf"), float("-inf"), float("nan")], dtype=dt)
        assert finite(x).tolist() == [True] * 8 + [False] * 3
        y = torch.randn(4, 5, dtype=dt)
        y[1, 2], y[3, 0] = float("nan"), float("inf")
        assert torch.equal(finite(y), torch.isfinite(y))


def test_to_device_values_dtype_and_device(device):
    for data in ([[1, 2], [3, 4]], np.array([[1, 2], [3, 4]]), torch.tensor([[1, 2], [3, 4]])):
        t = to_device(data, device)
        assert t.device == device and t.dtype == torch.long and t.tolist() == [[1, 2], [3, 4]]
    f = to_device([0.1, 0.2], device, torch.float64)
    assert f.dtype == torch.float64 and f.tolist() == [0.1, 0.2]  # no float32 round trip
    assert to_device([True, False], device, torch.bool).tolist() == [True, False]
    const = torch.tensor([1.5, -2.0])
    c = constant_on(const, device, torch.float64)
    assert c.device == device and c.dtype == torch.float64 and c.tolist() == [1.5, -2.0]
    assert constant_on(const, device, torch.float64) is c  # copied once per device and dtype
