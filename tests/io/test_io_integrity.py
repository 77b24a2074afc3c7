"""Partial decodes are never silent: files damaged in the test (corrupted middle, cut tail,
dropped frames) report what they lost in the ``io`` block, and the verdict follows
``io.max_lost_fraction``."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import (
    DROPPED,
    T,
    clean_video,
    corrupt_middle,
    drop_frames,
    moving_noise,
    truncate_tail,
)

from geocon_torch.io import read_clip
from geocon_torch.io.integrity import decode_report, decode_verdict


@pytest.fixture(scope="module")
def frames() -> torch.Tensor:
    return moving_noise()


@pytest.fixture(scope="module")
def clean(frames, tmp_path_factory) -> Path:
    return clean_video(tmp_path_factory.mktemp("dec") / "clean.mp4", frames)


def _report(path: Path) -> dict:
    return decode_report(read_clip(path, long_side=None).meta)


def test_clean_file_loses_nothing(clean):
    r = _report(clean)
    assert (r["announced_frames"], r["decoded_frames"], r["lost_frames"]) == (T, T, 0)
    assert r["decode_errors"] == 0 and r["timestamp_gaps"] == 0 and not r["truncated"]
    assert decode_verdict(r, 0.1) == (None, [])


def test_corrupted_middle_is_an_error(clean, tmp_path):
    r = _report(corrupt_middle(clean, tmp_path / "mid.mp4"))
    assert r["decode_errors"] > 0 and r["truncated"]
    assert r["lost_frames"] == T - r["decoded_frames"] > 0
    assert r["first_errors"] and "decode" in r["first_errors"][0]
    reason, warnings = decode_verdict(r, 0.1)
    assert reason is not None and f"{r['lost_frames']} of {T} frames" in reason
    assert "io.max_lost_fraction" in reason and warnings == []


def test_truncated_tail_counts_the_missing_frames(clean, tmp_path):
    r = _report(truncate_tail(clean, tmp_path / "tail.mp4"))
    assert r["announced_frames"] == T and 0 < r["decoded_frames"] < T
    assert r["lost_frames"] == T - r["decoded_frames"] and r["truncated"]
    assert r["lost_fraction"] == pytest.approx(r["lost_frames"] / T)
    reason, _ = decode_verdict(r, 0.1)
    assert reason is not None
    # a looser limit scores it, with a warning that says what was lost
    reason, warnings = decode_verdict(r, 0.9)
    assert reason is None and len(warnings) == 1 and f"{r['lost_frames']} of {T}" in warnings[0]


def test_dropped_frames_show_in_timestamps(frames, tmp_path):
    r = _report(drop_frames(tmp_path / "drop.mp4", frames))
    # the container announces and decodes the 44 frames it holds: only timestamps show the loss
    assert r["announced_frames"] == r["decoded_frames"] == T - len(DROPPED)
    assert r["timestamp_gaps"] == 2 and r["lost_frames"] == len(DROPPED)
    reason, warnings = decode_verdict(r, 0.1)  # 4 of 48 = 8 % < 10 %: scored, with a warning
    assert reason is None and "4 of 48 frames (8 %)" in warnings[0]
    reason, _ = decode_verdict(r, 0.05)
    assert reason is not None


def test_tensor_and_image_sources_report_no_loss():
    r = decode_report(read_clip(torch.zeros(3, 3, 16, 16, dtype=torch.uint8)).meta)
    assert r["source"] == "tensor" and r["lost_frames"] == 0 and r["decoded_frames"] == 3


@pytest.mark.parametrize("opts", [{"stride": 2}, {"max_frames": 4}, {}])
def test_image_folder_frames_skipped_by_stride_or_cap_are_not_lost(tmp_path, opts):
    """A PNG folder read with a stride or a frame cap skips files on purpose: no loss (was
    "3 of 6 frames (50 %) lost while decoding", an error for the clip)."""
    import cv2

    for i in range(6):
        cv2.imwrite(str(tmp_path / f"{i}.png"), (moving_noise()[i % T].permute(1, 2, 0)).numpy())
    clip = read_clip(tmp_path, **opts)
    r = decode_report(clip.meta)
    assert clip.num_frames == {"stride": 3, "max_frames": 4}.get(next(iter(opts), ""), 6)
    assert r["lost_frames"] == 0 and r["decoded_frames"] == 6
    assert decode_verdict(r, 0.1) == (None, [])
