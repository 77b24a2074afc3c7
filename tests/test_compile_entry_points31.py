"""Session-31 autograd audit, F1 and F5.

F1: the host-driven entry points (``geometric_reward``, ``score_clip(s)``, the functional
metrics, the Metric classes' ``update``) run eagerly inside ``torch.compile`` (a graph break
around them), so a compiled training step gets bitwise the eager rewards, never a batch of
neutral ones; a tracing failure is the call's, not a clip's (the per-clip isolation re-raises
it). F5: the non-binary float-mask message shows the bad values in full and how far they are
from 0 / 1, without a requires_grad warning.
"""
from __future__ import annotations

import warnings

import pytest
import torch
import torch._dynamo

from geocon_torch.errors import InputError
from geocon_torch.metrics import EpipolarInlierRate
from geocon_torch.metrics.functional import adadfrc, epipolar_error
from geocon_torch.rewards import geometric_reward
from geocon_torch.sections.isolation import batch_or_each
from geocon_torch.segment.files import check_float_masks
from geocon_torch.synth import grounded_clip


def _pair(num_frames: int) -> torch.Tensor:
    """(2, T, 3, 64, 96) uint8: a consistent clip and a rubber-sheet warped one."""
    clean = grounded_clip("C3", num_frames=num_frames, size=(64, 96)).frames
    warped = grounded_clip("C3", num_frames=num_frames, size=(64, 96),
                           corruption="rubber_sheet", severity=0.8).frames
    return torch.stack([clean, warped])


@pytest.fixture(scope="module")
def videos() -> torch.Tensor:
    return _pair(6)


@pytest.fixture(scope="module")
def dpo_videos() -> torch.Tensor:  # the DPO protocol samples every 15th frame: 32 frames
    return _pair(32)


def _compiled(fn, backend: str = "eager"):
    torch._dynamo.reset()
    return torch.compile(fn, backend=backend)


@pytest.mark.parametrize("kind, backend", [("epipolar", "eager"), ("epipolar", "aot_eager"),
                                           ("background", "eager"), ("epipolar-dpo", "eager")])
def test_compiled_reward_is_the_eager_reward(request, kind, backend):
    videos = request.getfixturevalue("dpo_videos" if kind == "epipolar-dpo" else "videos")
    eager, diag = geometric_reward(videos, kind=kind, seed=0)
    assert diag.status == ["ok", "ok"]
    box = {}

    def step(v):  # e.g. part of a compiled GRPO step
        r, d = geometric_reward(v, kind=kind, seed=0)
        box["diag"] = d
        return r * 1.0

    got = _compiled(step, backend)(videos)
    assert box["diag"].status == diag.status, [c.reason for c in box["diag"].clips]
    assert torch.equal(got, eager), (got, eager)


def test_compiled_functional_metric_and_metric_update(videos):
    eager = epipolar_error(videos)
    got = _compiled(lambda v: epipolar_error(v) + 0)(videos)
    assert torch.equal(got, eager), (got, eager)
    ref = EpipolarInlierRate()
    ref.update(videos)
    metric = EpipolarInlierRate()

    def update(v):
        metric.update(v)
        return v.sum()

    _compiled(update)(videos)
    assert torch.equal(metric.compute(), ref.compute())


def test_isolation_reraises_a_tracing_error():
    def ordinary(items):  # item 2 fails: its own error, the others keep their results
        if 2 in items:
            raise ValueError("bad clip")
        return items

    out = batch_or_each(ordinary, [0, 2])
    assert out[0] == 0 and isinstance(out[1], ValueError)

    def tracing(items):  # a torch.compile failure is the call's, never an item's
        if 1 in items:
            raise torch._dynamo.exc.TorchRuntimeError("x")
        return items

    for items in ([0, 1], [1]):  # the batched call and the retry; a batch of one
        with pytest.raises(torch._dynamo.exc.TorchRuntimeError):
            batch_or_each(tracing, items)


def test_reward_reraises_a_tracing_error_from_a_clip(videos, monkeypatch):
    import geocon_torch.sections.epipolar as sections_epipolar

    def boom(*args, **kwargs):
        raise torch._dynamo.exc.TorchRuntimeError("x")

    monkeypatch.setattr(sections_epipolar, "epipolar_sections", boom)
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError):
        geometric_reward(videos, kind="epipolar", seed=0)


def test_float_mask_message_shows_near_binary_values():
    soft = torch.rand(1, 1, 32, 32, generator=torch.Generator().manual_seed(0),
                      requires_grad=True)
    masks = (soft > 0.5).float() + soft - soft.detach()  # straight-through: 0 / 1 up to 1 ulp
    assert 0 < float((masks - masks.round()).abs().max().detach()) < 1e-7
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError) as got:
            check_float_masks(masks, "masks")
    msg = str(got.value)
    assert "found 127 value(s) in [0.99999994, 0.99999994]" in msg, msg
    assert "up to 6e-08 from 0 / 1" in msg and "m.round()" in msg, msg
    assert "threshold soft masks first (e.g. m > 0.5)" in msg
    flow = torch.zeros(1, 2, 32, 32)
    flow[:, 0] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(InputError, match="from 0 / 1"):
            adadfrc(flow, masks)
