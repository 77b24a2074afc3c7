"""Bounded per-clip cost (issue 14, item 4).

A smooth background warp (rubber sheet, breathing) must not turn into moving objects (each
would cost a foreground track), while a real mover is still found; and the helpers of the cost
and thread figures of ``benchmarks/pipeline.py`` (``worst_over_median``, ``user_over_system``)
compute what they say."""
from __future__ import annotations

import importlib.util
import sys

import pytest
import torch
from helpers import REPO_ROOT

from geocon_torch import score_clip
from geocon_torch.synth import grounded_clip

ROOT = REPO_ROOT


def _segment(clip) -> dict:
    d = score_clip(clip.frames, config={"io": {"long_side": 320}}, preset="background",
                   progress=False).to_dict()
    return d["background"]["segment"]


@pytest.mark.parametrize("corruption", ["rubber_sheet", "breathing"])
def test_smooth_background_warp_is_not_split_into_objects(corruption):
    seg = _segment(grounded_clip("C2", corruption=corruption, severity=0.6))
    assert seg["method"] == "motion"
    assert seg["objects"] <= 1, seg


def test_a_real_mover_is_still_found():
    seg = _segment(grounded_clip("C4", num_objects=2))
    assert 1 <= seg["objects"] <= 3, seg


def _bench():
    spec = importlib.util.spec_from_file_location("bench_pipeline",
                                                  ROOT / "benchmarks" / "pipeline.py")
    mod = importlib.util.module_from_spec(spec)
    path = list(sys.path)
    try:
        spec.loader.exec_module(mod)
    finally:
        sys.path[:] = path  # the script prepends the repo root
    return mod


def test_fit_frames_crops_to_the_aspect_and_resizes():
    bench = _bench()
    frames = torch.zeros(5, 3, 240, 320, dtype=torch.uint8)
    frames[..., :, 150:170] = 255  # a bright band at the centre column
    out = bench.fit_frames(frames, (96, 160), 8)  # 5:3 from 4:3: rows cropped, frames looped
    assert out.shape == (8, 3, 96, 160) and out.dtype == torch.uint8
    assert out[0, 0, :, 80].float().mean() > 200 and out[0, 0, :, 10].max() == 0
    assert torch.equal(out[5], out[0])


def test_usage_since_reports_user_over_system():
    bench = _bench()
    u0 = {"user_s": 0.0, "system_s": 0.0, "minor_faults": 0}
    u = bench.usage_since(u0)
    assert set(u) == {"user_s", "system_s", "user_over_system", "minor_faults"}
    assert u["user_over_system"] == pytest.approx(u["user_s"] / max(u["system_s"], 1e-3),
                                                  rel=1e-2, abs=0.02)
