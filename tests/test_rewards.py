"""geocon_torch.rewards.geometric_reward on grounded scenes: clean beats rubber-sheet-corrupted
for every kind, unscoreable clips get the neutral value and a status, device / dtype follow the
input, repeated calls are identical."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch.epipolar.dpo import EpipolarDPOConfig
from geocon_torch.errors import ClipTensorError, InputError
from geocon_torch.rewards import NEUTRAL_REWARD, geometric_reward
from geocon_torch.synth import render_scene
from geocon_torch.synth.corruptions import apply_corruption

pytest.importorskip("cv2")


@pytest.fixture(scope="module")
def batch() -> torch.Tensor:
    """(4, 16, 3, 180, 240) uint8: a clean translating scene (C3), its rubber-sheet versions at
    severity 0.3 and 0.6, and a textureless clip."""
    clean = render_scene("C3", num_frames=16, size=(180, 240), seed=0).frames
    bad = [apply_corruption(clean, "rubber_sheet", s, seed=0) for s in (0.3, 0.6)]
    return torch.stack([clean, *bad, torch.full_like(clean, 128)])


#: the grounded clip packs its whole camera path into 16 frames, so frames 15 apart are far
#: apart; the ranking test samples every 5th frame (3 pairs) instead
EVERY_5TH = {"epipolar_dpo": {"sampling_rate": 5}}


def check_bad_clip(rewards: torch.Tensor, diag, b: int = 3) -> None:
    assert float(rewards[b]) == NEUTRAL_REWARD
    assert diag.clips[b].status == "not_applicable" and diag.clips[b].reason
    assert not diag.scored[b]


def test_epipolar_dpo_reward(batch):
    rewards, diag = geometric_reward(batch, kind="epipolar-dpo")  # the reference protocol
    assert rewards.shape == (4,) and rewards.dtype == torch.float32
    assert rewards.device == batch.device and torch.isfinite(rewards).all()
    assert diag.scored == [True, True, True, False] and diag.kind == "epipolar-dpo"
    check_bad_clip(rewards, diag)
    assert diag.clips[0].valid_pairs == 1 and diag.clips[0].total_pairs == 1
    ranked, diag5 = geometric_reward(batch, kind="epipolar-dpo", config=EVERY_5TH)
    assert float(ranked[0]) > float(ranked[1]) > float(ranked[2]) > 0.0
    check_bad_clip(ranked, diag5)
    for c in diag.clips[:3] + diag5.clips[:3]:  # the documented fold, strictly decreasing in the error
        assert c.reward == pytest.approx(math.exp(-c.raw["mean_epipolar_error"] / 5.0), rel=1e-6)
    again, _ = geometric_reward(batch, kind="epipolar-dpo")
    assert torch.equal(rewards, again)


def test_float_input_dtype_and_config(batch):
    videos = batch[:2].double() / 255.0
    rewards, diag = geometric_reward(videos, kind="epipolar-dpo")
    assert rewards.dtype == torch.float64
    ref, _ = geometric_reward(batch[:2], kind="epipolar-dpo")
    assert torch.allclose(rewards, ref.double(), rtol=0, atol=1e-6)
    # a sampling rate every 5th frame: more pairs, via a mapping or the dataclass
    r5, d5 = geometric_reward(batch[:1], kind="epipolar-dpo",
                              config={"epipolar_dpo": {"sampling_rate": 5}})
    r5b, _ = geometric_reward(batch[:1], kind="epipolar-dpo",
                              config=EpipolarDPOConfig(sampling_rate=5))
    assert d5.clips[0].total_pairs == 3 and torch.equal(r5, r5b)


def test_too_short_clip_is_neutral(batch):
    rewards, diag = geometric_reward(batch[:, :10], kind="epipolar-dpo", neutral=-1.0)
    assert rewards.tolist() == [-1.0] * 4
    assert diag.clips[0].total_pairs == 0 and "fewer than two" in diag.clips[0].reason


def test_bad_arguments(batch):
    with pytest.raises(InputError):
        geometric_reward(batch, kind="nope")
    with pytest.raises(ClipTensorError):
        geometric_reward(batch[0], kind="epipolar-dpo")  # not a batch
    for bad in (float("nan"), float("inf"), "low"):  # a reward is never NaN
        with pytest.raises(InputError, match="neutral must be a finite number"):
            geometric_reward(batch, kind="epipolar", neutral=bad)


@pytest.mark.parametrize("kind", ["epipolar", "background", "epipolar-dpo"])
def test_empty_batch_gives_no_reward(kind):
    """B = 0 (a loader's last, empty shard): an empty reward tensor, no error."""
    rewards, diag = geometric_reward(torch.zeros(0, 4, 3, 32, 32, dtype=torch.uint8), kind)
    assert rewards.shape == (0,) and rewards.dtype == torch.float32 and diag.clips == []


def test_tiny_clip_in_an_epipolar_batch_is_its_own_not_applicable(batch):
    """A clip of 8 x 12 px (too small for the LK pyramid's levels) is not_applicable with a
    reason; the clip beside it keeps the reward it gets alone."""
    tiny = torch.zeros(1, 4, 3, 8, 12, dtype=torch.uint8)
    tiny[..., ::2, ::3] = 255
    alone, _ = geometric_reward(batch[:1], "epipolar")
    r_tiny, d_tiny = geometric_reward(tiny, "epipolar")
    assert r_tiny.tolist() == [0.0] and d_tiny.clips[0].status == "not_applicable"
    assert d_tiny.clips[0].reason
    assert alone[0] > 0.5


@pytest.mark.parametrize("kind", ["epipolar", "background"])
def test_other_kinds_rank_clean_first(batch, kind):
    videos = batch[:, :6].contiguous()  # these kinds use every frame: 6 are enough
    rewards, diag = geometric_reward(videos, kind=kind, seed=3)
    assert rewards.shape == (4,) and torch.isfinite(rewards).all()
    assert float(rewards[0]) > float(rewards[1]) and float(rewards[0]) > float(rewards[2])
    assert 0.0 <= float(rewards.min()) and float(rewards.max()) <= 1.0
    check_bad_clip(rewards, diag)
    # valid of total pairs: frame pairs (epipolar), (frame pair, scale) entries (background)
    per = 3 if kind == "background" else 1  # the background scales {1/4, 1/2, 1}
    assert diag.clips[0].total_pairs == 5 * per
    assert 0 < diag.clips[0].valid_pairs <= diag.clips[0].total_pairs
    again, _ = geometric_reward(videos, kind=kind, seed=3)
    assert torch.equal(rewards, again)


def test_seed_none_keeps_the_config_seeds(batch):
    """``seed`` left out keeps the config's ``ransac.seed`` / ``epipolar.seed`` (it used to
    reset them to 0 silently); given, it sets both; a non-integer is an ArgumentTypeError."""
    from geocon_torch.errors import ArgumentTypeError

    videos = batch[:1, :6].contiguous()
    config = {"ransac": {"seed": 7}, "epipolar": {"seed": 7}}
    r_cfg, d_cfg = geometric_reward(videos, kind="background", config=config)
    r_arg, d_arg = geometric_reward(videos, kind="background", seed=7)
    r_zero, d_zero = geometric_reward(videos, kind="background", config=config, seed=0)
    _, d_default = geometric_reward(videos, kind="background")
    assert d_cfg.config_hash == d_arg.config_hash and torch.equal(r_cfg, r_arg)
    assert d_zero.config_hash == d_default.config_hash != d_cfg.config_hash
    with pytest.raises(ArgumentTypeError, match="seed must be an integer"):
        geometric_reward(videos, kind="background", seed=1.5)


@pytest.mark.parametrize("kind,io", [("epipolar", {"max_frames": 4}),
                                     ("epipolar", {"stride": 3}),
                                     ("epipolar-dpo", {"max_frames": 11, "stride": 1})])
def test_epipolar_kinds_read_the_frames_score_clip_reads(batch, kind, io):
    """``io.max_frames`` / ``io.stride`` select the frames of every kind, as in ``score_clip``
    of the kind's preset: the same pairs, the same value, the same config hash (the "epipolar"
    kind scores with the torch implementation, which ``score_clip`` is given here too)."""
    from geocon_torch import score_clip
    from geocon_torch.rewards import reward_from_result

    config = {"io": io, "epipolar_dpo": {"sampling_rate": 5}}
    if kind == "epipolar":
        config["epipolar"] = {"implementation": "torch"}
    rewards, diag = geometric_reward(batch[:1], kind=kind, config=config)
    res = score_clip(batch[0], preset=diag.preset, config=config, progress=False).to_dict()
    want = reward_from_result(res, kind)
    assert diag.config_hash == res["config_hash"]
    got = diag.clips[0]
    assert (got.status, got.valid_pairs, got.total_pairs) == (want.status, want.valid_pairs,
                                                              want.total_pairs)
    assert got.reward == pytest.approx(want.reward, abs=1e-6)
    full, diag_full = geometric_reward(batch[:1], kind=kind,
                                       config={**config, "io": {}})
    assert diag_full.clips[0].total_pairs > got.total_pairs


#: frames per clip of each kind in the frozen-video tests ("epipolar-dpo" reads frames 0 and 15)
FROZEN_FRAMES = {"epipolar-dpo": 16, "epipolar": 6, "background": 6}


@pytest.mark.parametrize("kind", ["epipolar-dpo", "epipolar", "background"])
def test_frozen_video_gets_the_neutral_reward(batch, kind):
    """A still video (one frame repeated) scores 1.0 geometrically (nothing moves, nothing is
    inconsistent): it gets the neutral reward, status not_applicable and a reason; the moving
    clip beside it keeps, bit for bit, the reward and diagnostics it gets alone."""
    t = FROZEN_FRAMES[kind]
    frozen, moving = batch[0, :1].repeat(t, 1, 1, 1), batch[0, :t]
    rewards, diag = geometric_reward(torch.stack([frozen, moving]), kind, seed=3, neutral=-1.0)
    alone, d_alone = geometric_reward(moving[None].contiguous(), kind, seed=3, neutral=-1.0)
    assert float(rewards[0]) == -1.0 and diag.status[0] == "not_applicable"
    assert "frozen video: no frame differs from the previous one" in diag.clips[0].reason
    assert not diag.scored[0] and diag.scored[1]
    assert torch.equal(rewards[1:], alone) and diag.clips[1] == d_alone.clips[0]
    r0, d0 = geometric_reward(frozen[None].contiguous(), kind, seed=3)  # the default neutral
    assert r0.tolist() == [NEUTRAL_REWARD] and d0.status == ["not_applicable"]


def test_frozen_float_video_and_the_frames_epipolar_dpo_reads(batch):
    """Float input is tested in grey levels too; "epipolar-dpo" reads frames 0, 15, ...: a clip
    whose frame 15 repeats frame 0 is frozen for it (the frames between do not count), one whose
    frames 1..14 repeat frame 0 but frame 15 moves is not."""
    clean = batch[0]
    ends_alike = clean.clone()
    ends_alike[15] = clean[0]
    still_then_moves = clean.clone()
    still_then_moves[1:15] = clean[0]
    videos = torch.stack([clean[:1].repeat(16, 1, 1, 1), ends_alike, still_then_moves])
    rewards, diag = geometric_reward(videos.float() / 255.0, "epipolar-dpo")
    assert diag.status == ["not_applicable", "not_applicable", "ok"]
    assert rewards.tolist()[:2] == [0.0, 0.0] and "frozen video" in diag.clips[1].reason


def test_frozen_tolerance_is_half_a_grey_level():
    """``frozen_clips``: every consecutive pair of the frames read (0, step, 2 step, ...) within
    a mean absolute difference of 0.5 grey levels (of 255) over pixels and channels; a clip of
    one frame read is never frozen (the scorer says why it cannot score it)."""
    from geocon_torch.rewards import FROZEN_MAX_MAD, frozen_clips

    assert FROZEN_MAX_MAD == 0.5
    videos = torch.zeros(3, 3, 1, 2, 2, dtype=torch.uint8)  # 4 px per frame
    videos[0, 1, 0, 0, :2] = 1  # mean |diff| 2 / 4 = 0.5 on both pairs: frozen
    videos[1, 2, 0, 0, :2] = 1  # pair (1, 2): 2 / 4 ...
    videos[1, 2, 0, 1, 0] = 1  # ... + 1 / 4 = 0.75 grey levels: moves
    videos[2, 2] = 200  # frame 2 differs a lot, frames 0 and 1 alike
    assert frozen_clips(videos).tolist() == [True, False, False]
    assert frozen_clips(videos, count=2).tolist() == [True, True, True]  # frames 0, 1 only
    assert frozen_clips(videos, step=2).tolist() == [True, False, False]  # frames 0, 2
    assert frozen_clips(videos.double() / 255.0).tolist() == [True, False, False]
    assert frozen_clips(videos, count=1).tolist() == [False, False, False]
    assert frozen_clips(videos[:0]).shape == (0,)
