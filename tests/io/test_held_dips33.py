"""Held frames through a lossy encode (timing audit s33 F2): a repeated frame that went through
MPEG-4 part 2 or strong H.264 / VP9 compression differs from its twin by codec noise (0.3-5.4
grey levels), above the exact still threshold (0.5), so the pairs of two copies were scored as
near-perfect pairs (a rubber-sheet clip with every frame twice, MPEG-4 AVI: score 0.845 against
0.681). A pair whose difference is a dip between the motion on both sides of it is held too
(``io.sampling.held_flags``): the same on every read path; slow pans, cameras that stop and the
grounded corruptions keep every pair."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import torch

from geocon_torch import score_clips
from geocon_torch.io import clips_from_tensor, read_clip
from geocon_torch.io.sampling import HELD_DIP_MAX_MAD, HELD_DIP_RATIO, held_flags
from geocon_torch.synth import render_scene

from helpers import write_ffv1


def test_held_flags_closed_form():
    # every frame twice, the copies 0.3-5.4 grey levels apart, the motion 17-18
    twice = [0.3, 18.0, 5.4, 17.6, 0.2, 18.1, 2.0, 17.9]
    still = [v <= 0.5 for v in twice]
    assert held_flags(twice, still) == [True, False, True, False, True, False, True, False]
    # a slow pan, a camera that stops, one that starts: no dip, nothing held
    assert held_flags([3.0] * 6, [False] * 6) == [False] * 6
    assert held_flags([20, 20, 20, 1.5, 1.5, 1.5], [False] * 6) == [False] * 6
    assert held_flags([1.5, 1.5, 20, 20, 20], [False] * 5) == [False] * 5
    # the ends have one side: only the exact rule holds them
    assert held_flags([1.0, 20.0, 20.0, 1.0], [False] * 4) == [False] * 4
    assert held_flags([0.4, 20.0, 20.0, 0.5], [True, False, False, True]) == \
        [True, False, False, True]


def test_held_flags_bounds_are_inclusive_and_the_cap_scales():
    side = 20.0
    at = HELD_DIP_RATIO * side
    seq = [side, side, at, side, side]
    assert held_flags(seq, [False] * 5)[2] is True
    assert held_flags([side, side, at * 1.001, side, side], [False] * 5)[2] is False
    # the smaller side decides: 0.35 * 10 = 3.5
    assert held_flags([30, 30, 3.5, 10, 10], [False] * 5)[2] is True
    assert held_flags([30, 30, 3.6, 10, 10], [False] * 5)[2] is False
    # a dip above the cap (8 grey levels) is motion, however fast its sides
    big = [100.0, 100.0, HELD_DIP_MAX_MAD, 100.0, 100.0]
    assert held_flags(big, [False] * 5)[2] is True
    big[2] = HELD_DIP_MAX_MAD + 0.01
    assert held_flags(big, [False] * 5)[2] is False
    assert held_flags(big, [False] * 5, scale=2.0)[2] is True  # HDR: the cap scales


def _noisy_twice(frames: torch.Tensor, amplitude: int, seed: int = 0) -> torch.Tensor:
    """Every frame twice, each copy with its own +-``amplitude`` grey levels of noise."""
    twice = frames.repeat_interleave(2, dim=0).to(torch.int16)
    g = torch.Generator().manual_seed(seed)
    noise = torch.randint(-amplitude, amplitude + 1, twice.shape, generator=g,
                          dtype=torch.int16)
    return (twice + noise).clamp(0, 255).to(torch.uint8)


@pytest.fixture(scope="module")
def bad() -> torch.Tensor:
    """A corrupted C3 truck, (10, 3, 96, 128) uint8."""
    return render_scene("C3", motion="truck", num_frames=10, size=(96, 128), seed=0,
                        corruption="rubber_sheet", severity=0.6).frames


def test_noisy_copies_are_held_on_every_read_path(bad, tmp_path: Path):
    dithered = _noisy_twice(bad, 3)  # copies ~1.5 grey levels apart, the motion ~20
    want = list(range(3, 18, 2))  # the interior copies: the first and last pairs have one side
    assert clips_from_tensor(dithered[None])[0].meta["motion"]["held"] == want
    rgb = dithered.permute(0, 2, 3, 1).numpy()
    frames = [av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")
              .reformat(format="bgr0") for f in rgb]
    video = write_ffv1(tmp_path / "dithered.mkv", frames, {})
    assert read_clip(video, long_side=None).meta["motion"]["held"] == want
    assert read_clip(video, long_side=None, stream=True).meta["motion"]["held"] == want
    # the distinct clip holds nothing
    assert "held" not in clips_from_tensor(bad[None])[0].meta["motion"]


def test_noisy_copies_score_as_the_clip(bad):
    clip, noisy = [r.to_dict() for r in score_clips([bad, _noisy_twice(bad, 3)],
                                                     preset="background", progress=False)]
    assert noisy["motion"]["held_frames"] == 8
    assert noisy["background"]["ge_px"] == pytest.approx(clip["background"]["ge_px"], abs=0.06)
    assert noisy["score"] == pytest.approx(clip["score"], abs=0.06)
