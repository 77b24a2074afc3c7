"""AdaDFRC torchmetrics class: equals the functional code; states merge like a distributed
sum / cat."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch.metrics.foreground import AdaDFRC
from geocon_torch.measures.foreground import adadfrc


def _batch(seed: int, p: int = 4):
    gen = torch.Generator().manual_seed(seed)
    h, w = 48, 64
    ys, xs = torch.meshgrid(torch.arange(h).float(), torch.arange(w).float(), indexing="ij")
    amp = torch.rand(p, 1, 1, 1, generator=gen) * 2
    flow = torch.stack([torch.sin(ys / 4.0), torch.cos(xs / 5.0)])[None] * amp
    flow = flow + 0.1 * torch.randn(p, 2, h, w, generator=gen)
    masks = torch.zeros(p, 2, h, w, dtype=torch.bool)
    masks[:, 0, 5:30, 8:40] = True
    masks[:, 1, 20:44, 30:60] = True
    masks[::3, 1] = False  # some pairs lack object 1 (invalid samples are skipped)
    rel = torch.rand(p, h, w, generator=gen)
    return flow, masks, rel


def test_metric_equals_functional():
    flow, masks, rel = _batch(0)
    metric = AdaDFRC(percentile=0.9)
    metric.update(flow, masks, rel)
    out = metric.compute()
    d, valid = adadfrc(flow, masks, rel)
    vals = d[valid].double()
    assert int(out["num_samples"]) == int(valid.sum()) == 6
    torch.testing.assert_close(out["pooled_adadfrc_mean"], vals.mean())
    torch.testing.assert_close(out["pooled_adadfrc_quantile"], torch.quantile(vals, 0.9))
    assert AdaDFRC.higher_is_better is False and AdaDFRC.is_differentiable is False
    assert AdaDFRC.full_state_update is False


def test_merged_halves_equal_one_pass():
    flows, masks, rels = zip(*[_batch(s) for s in (1, 2, 3)])
    one = AdaDFRC(score="wmse")
    for f, m, r in zip(flows, masks, rels):
        one.update(f, m, r)
    a, b = AdaDFRC(), AdaDFRC()
    a.update(flows[0], masks[0], rels[0])
    b.update(flows[1], masks[1], rels[1])
    b.update(flows[2], masks[2], rels[2])
    a.merge_state(b)
    got, want = a.compute(), one.compute()
    for key in want:
        torch.testing.assert_close(got[key], want[key])
    # the declared reductions are what torch.distributed applies
    assert a._reductions["sum_d"].__name__.endswith("sum")
    assert a._reductions["values"].__name__.endswith("cat")


def test_empty_metric_is_nan_not_zero():
    metric = AdaDFRC()
    flow, masks, _ = _batch(4)
    tiny = torch.zeros_like(masks)
    tiny[:, :, :5, :5] = True  # 25 px objects < min_pixels: no valid sample
    metric.update(flow, tiny)
    with pytest.warns(UserWarning, match="min_pixels=64"):  # "no data": NaN + a warning
        out = metric.compute()
    assert int(out["num_samples"]) == 0 and int(out["num_not_applicable"]) == 8
    assert math.isnan(float(out["pooled_adadfrc_mean"]))
    assert math.isnan(float(out["pooled_adadfrc_quantile"]))
    metric.reset()
    metric.update(flow, masks)
    assert int(metric.compute()["num_samples"]) == 6


def test_thin_object_reason_names_the_fit_not_min_pixels():
    """A 100-px object one pixel wide has enough pixels but its grid cells lie on one line: it
    is not applicable because no affine map can be fitted, and the reason says so."""
    flow = torch.zeros(1, 2, 32, 128)
    masks = torch.zeros(1, 1, 32, 128, dtype=torch.bool)
    masks[0, 0, 5, :100] = True
    metric = AdaDFRC()
    metric.update(flow, masks)
    with pytest.warns(UserWarning):
        out = metric.compute()
    assert int(out["num_samples"]) == 0 and int(out["num_not_applicable"]) == 1
    assert "affine fit" in metric.first_reason()


def test_bad_arguments():
    with pytest.raises(ValueError):
        AdaDFRC(score="l2")
    with pytest.raises(ValueError):
        AdaDFRC(percentile=1.5)
