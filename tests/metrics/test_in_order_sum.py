"""``in_order_sum`` adds its values one after the other, as clip-by-clip updates would, bit for
bit, on every device. It was one ``cumsum``: on CUDA a parallel (tree-shaped) scan, and on the
CPU a float32 cumsum accumulates in float64 and rounds once, so neither matched N float32
updates. The sequential branch (every device but the CPU) is tested on CPU tensors."""
import pytest
import torch
from conftest import DEVICES

from geocon_torch.metrics import _base
from geocon_torch.metrics._base import in_order_sum


def one_by_one(total, values):
    """What N updates of one value each store: ``t = t + v`` in ``total``'s dtype."""
    t = total
    for v in values.to(total.dtype):
        t = t + v
    return t


def cases(dtype, device="cpu"):
    """(total, values) pairs: mixed signs and magnitudes (about 1e-4 .. 1e4), 0 to 300 values,
    20 draws of each size."""
    g = torch.Generator().manual_seed(7)
    for n in (0, 1, 2, 3, 6, 37, 300):
        for _ in range(20):
            scale = torch.exp(torch.randn(n, generator=g, dtype=torch.float64) * 3)
            values = (torch.randn(n, generator=g, dtype=torch.float64) * scale).to(dtype)
            total = torch.randn((), generator=g, dtype=torch.float64).to(dtype)
            yield total.to(device), values.to(device)


def test_the_cases_tell_in_order_from_other_orders_and_float64_accumulation():
    """Summed another way (all at once, or in float64 rounded once: a CPU float32 cumsum) the
    cases give other last bits: the tests below can see a non-sequential sum."""
    for dtype in (torch.float32, torch.float64):
        all_at_once = [not torch.equal((t + v.sum()), one_by_one(t, v)) for t, v in cases(dtype)]
        assert sum(all_at_once) >= 40
    in_float64 = [not torch.equal((t.double() + v.double().sum()).float(), one_by_one(t, v))
                  for t, v in cases(torch.float32)]
    assert sum(in_float64) >= 40


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_in_order_sum_is_the_one_by_one_sum_bit_for_bit(dtype, device):
    for total, values in cases(dtype, device):
        got, want = in_order_sum(total, values), one_by_one(total, values)
        assert got.shape == () and got.dtype == dtype and got.device == total.device
        assert torch.equal(got, want), (values.numel(), got.item(), want.item())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_sequential_branch_is_the_one_by_one_sum_bit_for_bit(dtype):
    for total, values in cases(dtype):
        got = _base._sequential_sum(total, values)
        assert got.shape == () and got.dtype == dtype
        assert torch.equal(got, one_by_one(total, values))
    total, values = torch.tensor(0.5, dtype=torch.float64), torch.tensor([0.1, 0.2, 0.3])
    got = _base._sequential_sum(total, values)  # float32 values into a float64 total
    assert torch.equal(got, one_by_one(total, values)) and got.dtype == torch.float64
    assert got.item() == 0.5 + 0.10000000149011612 + 0.20000000298023224 + 0.30000001192092896


def test_the_cpu_keeps_its_float64_cumsum_and_other_devices_add_in_order(monkeypatch):
    """The float64 states of the metrics keep the CPU's one-kernel cumsum (sequential, so
    unchanged numbers); other devices (here "meta") sum on the host, in order."""
    seen = []
    sequential = _base._sequential_sum
    monkeypatch.setattr(_base, "_sequential_sum",
                        lambda t, v: seen.append(t.device.type) or sequential(t, v))
    values = torch.tensor([0.7486882683183439, 0.3417558526082366, 0.538225008554474,
                           0.46636541886786753, 0.8634864607582904, 0.041059375136441645],
                          dtype=torch.float64)
    got = in_order_sum(torch.tensor(0.0, dtype=torch.float64), values)
    assert seen == [] and got.item() == sum(values.tolist()) != values.sum().item()
    in_order_sum(torch.tensor(0.0, dtype=torch.float32), values.float())
    assert seen == ["cpu"]  # a float32 cumsum on the CPU would accumulate in float64
    hosted = []
    monkeypatch.setattr(_base, "_on_host", lambda t, v: hosted.append(t.device.type) or t)
    in_order_sum(torch.zeros((), device="meta", dtype=torch.float64),
                 torch.zeros(5, device="meta"))
    assert seen == ["cpu"] and hosted == ["meta"]


def test_the_host_route_is_the_one_by_one_sum_bit_for_bit():
    """_on_host (the route of device tensors) gives the sequential sum, on the total's device
    and dtype."""
    gen = torch.Generator().manual_seed(5)
    for dtype in (torch.float64, torch.float32):
        for n in (0, 1, 7, 300):
            total = torch.rand((), generator=gen, dtype=torch.float64).to(dtype)
            values = torch.rand(n, generator=gen, dtype=torch.float64).to(dtype) * 1e3
            got = _base._on_host(total, values)
            assert torch.equal(got, one_by_one(total, values)) and got.dtype == dtype
