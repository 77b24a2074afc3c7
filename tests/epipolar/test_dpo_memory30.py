"""Memory of the Epipolar-DPO path (memory audit s30, F3 and F4).

F3: the byte matcher's nearest-two search (``dpo._nearest_two``) works in one (rows, N) int32
buffer per pair and writes its (N, 3) result in place; its output equals the former
implementation (a fresh GEMM output, distance tensor and result per block, then ``torch.cat``)
bit for bit, ties included.

F4: ``measure_dpo`` detects and matches in windows of consecutive frames (at most
``dpo.WINDOW_PIXELS`` pixels of frames each, at least one pair), so only a bounded number of
frames' gray images and keypoints are alive; every per-pair and per-clip number is the one the
whole batch gives at once.
"""
from __future__ import annotations

from typing import List, Tuple

import pytest
import torch

from geocon_torch.epipolar import dpo
from geocon_torch.epipolar.dpo import EpipolarDPOConfig, measure_dpo
from geocon_torch.rewards import geometric_reward
from geocon_torch.synth import render_scene
from geocon_torch.types import Keypoints

pytest.importorskip("cv2")


# --------------------------------------------------------------------- F3: the byte matcher
def former_nearest_two(codes: torch.Tensor, sq: torch.Tensor, i: int, j: int) -> torch.Tensor:
    """The implementation before the fix (audit s30 F3), kept as the reference."""
    n = int(codes.shape[1])
    rows = max(1, dpo.BLOCK_DISTANCES // max(n, 1))
    if not n:
        return codes.new_zeros(0, 3).long()
    out = []
    for r in range(0, n, rows):
        dist = torch.sub(sq[j], torch._int_mm(codes[i, r:r + rows], codes[j].T), alpha=2)
        first, idx = dist.min(1)
        dist.scatter_(1, idx[:, None], dpo.BYTE_PAD)
        out.append(torch.stack([first.long(), dist.amin(1).long(), idx], 1))
    return torch.cat(out)


def tied_codes(n: int, seed: int, unsigned: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """(2, n, 128) int8 codes and (2, n) int32 squared norms of two frames whose descriptors
    take few values (many equal distances) and repeat rows (equal nearest and second nearest);
    ``unsigned``: built from uint8 descriptors by ``byte_codes`` with some keypoints padded."""
    g = torch.Generator().manual_seed(seed)
    if unsigned:
        desc = torch.randint(0, 3, (2, n, 128), generator=g, dtype=torch.uint8) * 100
    else:
        desc = (torch.randint(-2, 3, (2, n, 128), generator=g) * 60).to(torch.int8)
    if n > 3:
        desc[:, 1::3] = desc[:, 0:n - 1:3][:, :desc[:, 1::3].shape[1]]  # repeated rows
    if not unsigned:
        codes = desc
        return codes, (codes.float() ** 2).sum(-1).to(torch.int32)
    mask = torch.ones(2, n, dtype=torch.bool)
    mask[1, n - n // 4:] = False  # frame 1 padded at the end
    kps = Keypoints(torch.zeros(2, n, 2), desc.masked_fill(~mask[..., None], 0),
                    torch.ones(2, n), mask)
    return dpo.byte_codes(kps)


@pytest.mark.parametrize("n", [1, 2, 5, 257, 3001])
@pytest.mark.parametrize("unsigned", [False, True])
def test_nearest_two_equals_the_former_implementation(n, unsigned, monkeypatch):
    """Bit-identical (values and indices, ties included) to the former implementation, both
    directions of the pair, with the default block (3001 rows: 4 blocks of 698 and one of 209)
    and with blocks of 7 rows and of one row."""
    codes, sq = tied_codes(n, n, unsigned)
    for block in (dpo.BLOCK_DISTANCES, 7 * n, 1):
        monkeypatch.setattr(dpo, "BLOCK_DISTANCES", block)
        for i, j in ((0, 1), (1, 0), (0, 0)):
            want = former_nearest_two(codes, sq, i, j)
            got = dpo._nearest_two(codes, sq, i, j)
            assert got.dtype == torch.long and torch.equal(got, want), (block, i, j)
            into = torch.full((n, 3), -5, dtype=torch.long)
            assert dpo._nearest_two(codes, sq, i, j, out=into) is into
            assert torch.equal(into, want), (block, i, j)
    assert dpo._nearest_two(codes[:, :0], sq[:, :0], 0, 1).shape == (0, 3)


def test_nearest_two_works_in_one_bounded_buffer(monkeypatch):
    """Every block's int8 GEMM of one pair writes into the same int32 buffer of at most
    ``BLOCK_DISTANCES`` entries (no fresh (rows, N) output per block: those made the allocator
    retain GBs, audit s30 F3), the last, shorter block into its first rows."""
    codes, sq = tied_codes(3001, 0, False)
    real = torch._int_mm
    calls: List[Tuple[int, int, Tuple[int, ...]]] = []

    def spy(a, b, *, out=None):
        assert out is not None, "a fresh GEMM output per block"
        calls.append((out.untyped_storage().data_ptr(), out.untyped_storage().nbytes(),
                      tuple(out.shape)))
        return real(a, b, out=out)

    monkeypatch.setattr(torch, "_int_mm", spy)
    want_rows = dpo.BLOCK_DISTANCES // 3001  # 698
    for _ in range(2):  # two pairs: one buffer each
        calls.clear()
        dpo._nearest_two(codes, sq, 0, 1)
        assert [c[2] for c in calls] == [(want_rows, 3001)] * 4 + [(3001 - 4 * want_rows, 3001)]
        assert len({c[0] for c in calls}) == 1
        assert calls[0][1] == want_rows * 3001 * 4 <= dpo.BLOCK_DISTANCES * 4
    calls.clear()
    dpo._nearest_two(codes[:, :5], sq[:, :5], 0, 1)  # fewer rows than a block: a (5, 5) buffer
    assert [c[2] for c in calls] == [(5, 5)] and calls[0][1] == 5 * 5 * 4


# ------------------------------------------------------------- F4: windows of frames
def covered_pairs(windows: List[Tuple[int, int]]) -> List[int]:
    """Left frames of the pairs each window matches (its frames but the last)."""
    return [g for s, e in windows for g in range(s, e - 1)]


@pytest.mark.parametrize("least", [1, 2, 3])
def test_windows_cover_every_pair_once(least, monkeypatch):
    """Every pair (g, g + 1) of a clip lies in exactly one window, a window crosses into the
    next clip only through whole pairs, holds at most WINDOW_PIXELS pixels unless it has only
    its least number of frames, and the next one starts at its last frame unless that ends
    its clip."""
    monkeypatch.setattr(dpo, "WINDOW_PIXELS", 10)
    lengths, px = [2, 7, 3, 2, 9], [1, 4, 2, 6, 3]  # per clip: frames, pixels per frame
    pixels = [p for n, p in zip(lengths, px) for _ in range(n)]
    last = [t == n - 1 for n in lengths for t in range(n)]
    windows = dpo._windows(pixels, last, least)
    pairs = [g for g in range(len(pixels) - 1) if not last[g]]
    assert sorted(g for g in covered_pairs(windows) if not last[g]) == pairs
    assert windows[0][0] == 0 and windows[-1][1] == len(pixels)
    for (s, e), (s2, _) in zip(windows, windows[1:]):
        assert s2 == (e if last[e - 1] else e - 1)
    for s, e in windows:
        assert e - s >= 2 and not last[s]
        assert sum(pixels[s:e]) <= 10 or e - s == max(least, 2)
    monkeypatch.setattr(dpo, "WINDOW_PIXELS", 10 ** 9)
    assert dpo._windows(pixels, last, least) == [(0, len(pixels))]


def long_clips() -> List[torch.Tensor]:
    """Clips of consecutive frames treated as sampled frames: a long one (28 frames, 27 pairs),
    a lone frame (no pair), a flat clip (no keypoints: pairs not applicable), a second scene of
    another size (9 frames)."""
    c3 = render_scene("C3", num_frames=28, size=(96, 128), seed=0).frames
    c5 = render_scene("C5", num_frames=9, size=(80, 112), seed=1).frames
    return [c3, c5[:1], torch.full((3, 3, 96, 128), 90, dtype=torch.uint8), c5]


def assert_same_measurement(got, want) -> None:
    for field in ("mean_epipolar_error", "mean_inlier_rate", "valid_pairs", "total_pairs",
                  "pair_clip", "pair_frames", "num_kp1", "num_kp2", "num_matches",
                  "epipolar_error", "inlier_rate", "valid", "reason"):
        a, b = getattr(got, field), getattr(want, field)
        assert a.dtype == b.dtype and torch.equal(a, b), field
    assert got.frames == want.frames and got.sizes == want.sizes


@pytest.mark.parametrize("workers", [1, 2])
def test_windowed_measurement_equals_one_window(workers, monkeypatch):
    """A long clip in a batch measured in windows of a few frames (each frame detected once,
    at most a window's frames detected at a time) gives every per-pair and per-clip number of
    the one-window measurement bit for bit, through the byte matcher and the float matcher."""
    clips = long_clips()
    cfg = EpipolarDPOConfig(workers=workers)
    one = measure_dpo(clips, cfg)
    assert int(one.valid_pairs[0]) == 27 and int(one.total_pairs[2]) == 2
    detected: List[Tuple[int, int]] = []  # per window: frames, pixels detected
    real = dpo._frame_features

    def spy(frames, sift):
        detected.append((sum(int(f.shape[0]) for f in frames),
                         sum(f[:, 0].numel() for f in frames)))
        return real(frames, sift)

    monkeypatch.setattr(dpo, "_frame_features", spy)
    for frames_per_window in (2, 3, 5):
        monkeypatch.setattr(dpo, "WINDOW_PIXELS", frames_per_window * 96 * 128)
        detected.clear()
        assert_same_measurement(measure_dpo(clips, cfg), one)
        least = max(workers + 1, 2)
        assert sum(n for n, _ in detected) == 28 + 3 + 9 and len(detected) >= 40 // 5
        assert max(px for _, px in detected) <= max(dpo.WINDOW_PIXELS, least * 96 * 128)
    monkeypatch.setattr(dpo, "BYTE_MATCH_DEVICES", set())  # the float matcher (CUDA path)
    assert_same_measurement(measure_dpo(clips, cfg), one)


def test_windowed_rewards_equal_one_window(monkeypatch):
    """geometric_reward (kind "epipolar-dpo", every frame sampled) of a batch of two long clips
    in windows of three frames: the rewards and diagnostics of one window, bit for bit."""
    videos = torch.stack([render_scene(c, num_frames=20, size=(64, 96), seed=2).frames
                          for c in ("C3", "C5")])
    config = {"epipolar_dpo": {"sampling_rate": 1, "workers": 2}}
    want, want_diag = geometric_reward(videos, kind="epipolar-dpo", config=config)
    assert want_diag.scored == [True, True]
    monkeypatch.setattr(dpo, "WINDOW_PIXELS", 3 * 64 * 96)
    got, diag = geometric_reward(videos, kind="epipolar-dpo", config=config)
    assert torch.equal(got, want) and diag.clips == want_diag.clips
