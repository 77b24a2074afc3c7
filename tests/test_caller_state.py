"""Scoring inside a training step: the caller's autocast does not change a number (it used to
turn the geometry into bfloat16 / float16: GE x5, no matches, ShapeErrors), and the OpenCV
paths leave the caller's cv2 RNG stream where it was (they reseeded it at every update)."""
from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from geocon_torch.geometry import ransac_homography
from geocon_torch.metrics import EpipolarError
from geocon_torch.metrics.functional import (background_consistency, epipolar_error,
                                             soft_background_consistency)
from geocon_torch.rewards import geometric_reward
from geocon_torch.synth import grounded_clip


@pytest.fixture(scope="module")
def videos() -> torch.Tensor:
    clips = [grounded_clip(c, num_frames=6, size=(96, 128), seed=0).frames for c in ("C2", "C3")]
    return torch.stack(clips)  # (2, 6, 3, 96, 128) uint8


def _points() -> tuple:
    """(2, 60, 2) float32 matches under one homography (made outside any autocast)."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.rand(2, 60, 2, generator=g, dtype=torch.float32) * 100
    H = torch.tensor([[1.02, 0.01, 3.0], [-0.01, 0.98, -2.0], [1e-4, 0.0, 1.0]])
    xh = torch.cat([x1, torch.ones(2, 60, 1)], -1) @ H.T
    return x1, xh[..., :2] / xh[..., 2:]


def _calls(videos: torch.Tensor, points: tuple) -> dict:
    x1, x2 = points
    bg = background_consistency(videos)
    return {"reward": geometric_reward(videos, kind="background")[0],
            "ir": bg["ir"], "ge": bg["ge_px"],
            "soft": soft_background_consistency(videos[:1].float() / 255),
            "epipolar": epipolar_error(videos),
            "H": ransac_homography(x1, x2, seed=0).model}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_caller_autocast_changes_no_number(videos, dtype):
    points = _points()
    plain = _calls(videos, points)
    with torch.autocast("cpu", dtype=dtype):
        cast = _calls(videos, points)
        assert torch.is_autocast_enabled("cpu")  # the caller's state is back afterwards
    for name, value in plain.items():
        assert cast[name].dtype == value.dtype, name
        assert torch.equal(cast[name].nan_to_num(-1.0), value.nan_to_num(-1.0)), name


def _draws(n: int = 3) -> list:
    a = np.zeros(n, np.float64)
    cv2.randu(a, 0.0, 1.0)
    return a.tolist()


def test_opencv_paths_leave_the_caller_cv2_rng_alone(videos):
    cv2.setRNGSeed(123)
    expected = [_draws(), _draws()]
    cv2.setRNGSeed(123)
    got = [_draws()]
    metric = EpipolarError()
    metric.update(videos)  # the CPU default: OpenCV reference path, seeded on its own thread
    got.append(_draws())
    assert got == expected
    cv2.setRNGSeed(999)  # and its numbers do not depend on the caller's cv2 RNG
    again = EpipolarError()
    again.update(videos)
    assert torch.equal(metric.compute(), again.compute())


def test_a_generator_channels_first_batch_gets_the_permute_hint(videos):
    from geocon_torch.errors import ClipTensorError

    with pytest.raises(ClipTensorError, match=r"channels-first.*permute\(0, 2, 1, 3, 4\)"):
        geometric_reward(videos.permute(0, 2, 1, 3, 4), kind="background")
