"""Half-precision videos (bfloat16 / float16: what video generators usually decode to) get
rewards and soft scores in float32, never in their own 8- / 11-bit precision: in bfloat16 a
clean clip (reward 0.98453) and a corrupted one (0.98326) both rounded to 0.984375, and the
preference between them was lost. float64 stays float64, float32 and uint8 give float32.

Most tests replace the scorer by fixed per-clip rewards (only the output dtype is under test);
one scores a small clean and corrupted clip end to end (~1 s)."""
from __future__ import annotations

import pytest
import torch

import geocon_torch.rewards as rw
from geocon_torch.metrics.functional import soft_background_consistency
from geocon_torch.rewards import ClipReward, geometric_reward

#: the audit's rewards of a clean and a breathing-corrupted C2 pan (float64 diagnostics)
CLEAN, CORRUPTED = 0.984528017084206, 0.9832574228284279

EXPECTED_DTYPE = {torch.uint8: torch.float32, torch.bfloat16: torch.float32,
                  torch.float16: torch.float32, torch.float32: torch.float32,
                  torch.float64: torch.float64}


def _videos(dtype: torch.dtype) -> torch.Tensor:
    """(2, 3, 3, 24, 32) random clips (not frozen) of ``dtype`` (uint8 levels, else [0, 1])."""
    g = torch.Generator().manual_seed(0)
    v = torch.randint(0, 256, (2, 3, 3, 24, 32), generator=g, dtype=torch.uint8)
    return v if dtype == torch.uint8 else (v.double() / 255).to(dtype)


@pytest.fixture
def fixed_rewards(monkeypatch):
    """kind "background" gives the rewards CLEAN, CORRUPTED (no scoring)."""
    def fake(videos, cfg, neutral):
        return [ClipReward(v, "ok", None, 2, 2) for v in (CLEAN, CORRUPTED)]

    monkeypatch.setattr(rw, "_background_rewards", fake)


@pytest.mark.parametrize("dtype", list(EXPECTED_DTYPE), ids=str)
def test_reward_dtype_is_at_least_float32(fixed_rewards, dtype):
    rewards, diag = geometric_reward(_videos(dtype), kind="background")
    want = EXPECTED_DTYPE[dtype]
    assert rewards.dtype == want
    assert rewards.tolist() == torch.tensor([CLEAN, CORRUPTED], dtype=want).tolist()
    assert diag.clips[0].reward == CLEAN


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_half_precision_videos_keep_the_preference(fixed_rewards, dtype):
    """bfloat16 rewards tied (0.984375 twice): float32 keeps clean above corrupted, by the
    float32 difference of the two rewards."""
    rewards, _ = geometric_reward(_videos(dtype), kind="background")
    assert float(rewards[0] - rewards[1]) == pytest.approx(CLEAN - CORRUPTED, rel=1e-4)


def test_bf16_clean_and_corrupted_pan_do_not_tie():
    """End to end (the audit's p11, smaller): float32 rewards of the bfloat16 videos, equal to
    the float64 diagnostics rounded to float32, clean above corrupted."""
    from geocon_torch.synth import render_scene

    clips = [render_scene("C2", motion="pan", num_frames=4, size=(96, 160), seed=0,
                          **extra).frames[:4]
             for extra in ({}, {"corruption": "breathing", "severity": 0.05})]
    videos = (torch.stack([torch.as_tensor(c) for c in clips]).float() / 255).bfloat16()
    rewards, diag = geometric_reward(videos, kind="background")
    exact = [c.reward for c in diag.clips]
    assert diag.status == ["ok", "ok"] and rewards.dtype == torch.float32
    assert rewards.tolist() == torch.tensor(exact, dtype=torch.float32).tolist()
    assert exact[0] > exact[1] and float(rewards[0]) > float(rewards[1])


def _frames(dtype: torch.dtype, requires_grad: bool = False) -> torch.Tensor:
    """(2, 3, 1, 28, 28) smooth random frames in [0, 1] of ``dtype``."""
    g = torch.Generator().manual_seed(1)
    x = torch.nn.functional.avg_pool2d(torch.rand(6, 1, 32, 32, generator=g), 5, 1)
    x = x.reshape(2, 3, 1, 28, 28).to(dtype)
    return x.requires_grad_(requires_grad)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_soft_score_of_half_frames_is_float32_and_grads_reach_them(dtype):
    """Half frames are scored in float32 (exactly the score of ``frames.float()``), the score
    is float32, and its gradient reaches the half-precision input in its dtype."""
    x = _frames(dtype, requires_grad=True)
    score = soft_background_consistency(x, model="homography")
    ref = soft_background_consistency(x.detach().float(), model="homography")
    assert score.dtype == torch.float32 and torch.equal(score, ref)
    assert bool(((score > 0.1) & (score <= 1)).all())
    score.sum().backward()
    assert x.grad is not None and x.grad.dtype == dtype
    assert bool(torch.isfinite(x.grad.float()).all()) and float(x.grad.float().abs().sum()) > 0
    assert soft_background_consistency(x[:0].detach()).dtype == torch.float32  # B = 0 too


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_soft_score_keeps_float32_and_float64(dtype):
    x = _frames(dtype)
    score = soft_background_consistency(x, model="homography")
    assert score.dtype == dtype and soft_background_consistency(x[:0]).dtype == dtype
