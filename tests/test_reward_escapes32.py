"""What a training loop can filter degenerate clips on (reward-hacking audit s32, F1 / F4):
the "background" kind's ``raw`` carries ``behaviour``, ``max_mad`` and ``parallax_ref``. A
static textured border over frames of pure noise gets a top reward (every match lies on the
still border: documented in README *The escapes that remain*); its ``raw`` says "Static" with
a frame difference far above the frozen threshold, which an honest moving clip never shows."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from geocon_torch import score_clips
from geocon_torch.measures.headline import headline_terms, textured_share
from geocon_torch.rewards import geometric_reward, reward_from_result
from geocon_torch.synth import grounded_clip

T, H, W = 8, 120, 160


def _border_over_noise() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    tex = F.avg_pool2d(torch.rand(1, 3, H, W, generator=g) * 255, 3, 1, 1)[0]
    tex = (tex - tex.mean()) / tex.std() * 50 + 128
    frames = torch.rand(T, 3, H, W, generator=g) * 255
    border = torch.zeros(H, W, dtype=torch.bool)
    border[:20] = border[-20:] = True
    border[:, :20] = border[:, -20:] = True
    frames[:, :, border] = tex[:, border]
    return frames.round().clamp(0, 255).to(torch.uint8)


def test_background_raw_flags_a_static_border_over_noise():
    honest = grounded_clip("C3", num_frames=T, size=(H, W)).frames
    rewards, diag = geometric_reward(torch.stack([honest, _border_over_noise()]), "background",
                                     seed=0)
    fair, border = diag.clips
    assert fair.status == border.status == "ok"
    assert float(rewards[1]) > 0.99  # the escape: a top reward for no geometry at all
    assert border.raw["behaviour"] == "Static" and border.raw["max_mad"] > 40.0
    assert border.raw["parallax_ref"] < 0.5  # 0.13 reference px
    assert fair.raw["behaviour"] != "Static" and fair.raw["max_mad"] > 10.0
    assert fair.raw["parallax_ref"] > 10.0  # 75 reference px
    assert set(fair.raw) == {"ir", "ge_px", "regime", "behaviour", "max_mad", "parallax_ref"}


def test_a_clip_scored_on_some_of_its_pairs_is_paid_for_those_only():
    """A clip whose second half is noise is scored on its textured pairs (eq. 12, 0.2.7); its
    background reward and headline ``ge`` term are multiplied by the share of frame pairs that
    matched (7 of 15 here), so it no longer reaches the honest clip's top value; a clip
    textured everywhere has no ``textured_pairs`` and keeps its fold bit for bit."""
    honest = grounded_clip("C3", num_frames=16, size=(H, W)).frames
    half = honest.clone()
    g = torch.Generator().manual_seed(0)
    half[8:] = (torch.rand(8, 3, H, W, generator=g) * 255).to(torch.uint8)
    config = {"io": {"long_side": None}}
    rows = [r.to_dict() for r in score_clips([honest, half], preset="background",
                                             config=config, device="cpu")]
    fair, cut = rows
    assert "textured_pairs" not in fair["background"] and textured_share(fair["background"]) == 1
    bg = cut["background"]
    assert cut["status"] == "ok" and (bg["textured_pairs"], bg["pairs"]) == (7, 15)
    fold = bg["ir"] * math.exp(-bg["ge_px"] / 3.5)
    got = reward_from_result(cut, "background")
    assert got.reward == pytest.approx(fold * 7 / 15, rel=1e-12) and got.reward < 0.5
    assert reward_from_result(fair, "background").reward == pytest.approx(
        fair["background"]["ir"] * math.exp(-fair["background"]["ge_px"] / 3.5), rel=1e-15)
    ge = math.exp(-bg["ge_px"] * 1024 / bg["content_long_side"] / 3.5)
    assert headline_terms(cut)["ge"] == pytest.approx(ge * 7 / 15, rel=1e-12)
    rewards, diag = geometric_reward(torch.stack([honest, half]), "background", seed=0)
    assert diag.clips[1].reward == pytest.approx(got.reward, rel=1e-12)
    assert float(rewards[1]) == pytest.approx(got.reward, rel=1e-6)  # float32
