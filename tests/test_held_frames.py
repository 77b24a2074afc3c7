"""Held frames (audit s27): a clip showing every frame twice (a 12 -> 24 fps conversion, a
generator that holds frames) must not score as perfect from its pairs of two identical frames.
The readers record the held positions (``meta["motion"]["held"]``), the protocol pairs drop the
pairs of two identical frames (``io.pairs.drop_held_pairs``), the result says so."""
from __future__ import annotations

from pathlib import Path

import av
import numpy as np
import pytest
import torch
from PIL import Image

from geocon_torch import score_clips
from geocon_torch.io import clips_from_tensor, read_clip
from geocon_torch.config import EpipolarConfig
from geocon_torch.epipolar.gvgc import gvgc_section_opencv, gvgc_sections_torch
from geocon_torch.io.pairs import (background_pairs, drop_held_pairs, foreground_pairs,
                                   gvgc_pairs, held_of, worldatlas_pairs)
from geocon_torch.io.sampling import held_positions
from geocon_torch.rewards import geometric_reward
from geocon_torch.sections.foreground import foreground_block
from geocon_torch.synth import render_scene
from geocon_torch.types import Clip

from helpers import write_ffv1

WARNING = ("16 of 32 frames repeat the previous frame (held frames): pairs of two identical "
           "frames are not scored")


@pytest.fixture(scope="module")
def bad() -> torch.Tensor:
    """The audit's reproducer: a corrupted C3 truck clip, (16, 3, 192, 256) uint8."""
    return render_scene("C3", motion="truck", num_frames=16, size=(192, 256), seed=0,
                        corruption="rubber_sheet", severity=0.6).frames


@pytest.fixture(scope="module")
def rows(bad):
    """score_clips of the clip and of the clip with every frame shown twice."""
    return [r.to_dict() for r in score_clips([bad, bad.repeat_interleave(2, dim=0)])]


def test_every_frame_twice_scores_as_the_clip(rows):
    clip, held = rows
    assert clip["background"]["ge_px"] == pytest.approx(0.3411, abs=1e-3)
    assert held["background"]["ge_px"] > 0.05  # not a perfect pair of identical frames
    assert held["background"]["ge_px"] == pytest.approx(clip["background"]["ge_px"], abs=0.05)
    assert held["score"] < 0.99
    assert held["score"] == pytest.approx(clip["score"], abs=0.05)


def test_held_frames_are_recorded_and_warned(rows):
    clip, held = rows
    assert held["motion"]["held_frames"] == 16 and held["motion"]["frozen"] is False
    assert held["warnings"] == [WARNING]
    assert "held_frames" not in clip["motion"] and clip["warnings"] == []


@pytest.mark.parametrize("kind,tol", [("background", 0.03), ("epipolar", 0.03)])
def test_rewards_of_every_frame_twice(bad, kind, tol):
    one = geometric_reward(bad[None], kind=kind)[0].item()
    two = geometric_reward(bad.repeat_interleave(2, dim=0)[None], kind=kind)[0].item()
    assert two == pytest.approx(one, abs=tol)
    assert two < 0.99 if kind == "background" else two < 0.9


def _repeat(frames: torch.Tensor, at) -> torch.Tensor:
    """``frames`` with each frame of ``at`` shown once more right after itself."""
    out = []
    for t in range(len(frames)):
        out.append(frames[t])
        if t in at:
            out.append(frames[t])
    return torch.stack(out)


@pytest.fixture(scope="module")
def small(bad) -> torch.Tensor:
    """10 frames of the clip, frames 2 and 5 repeated once: held positions 3 and 7."""
    return _repeat(bad[:10, :, :64, :96].contiguous(), {2, 5})


def test_repeated_frames_are_exactly_the_held_positions(small):
    clip = clips_from_tensor(small[None])[0]
    assert clip.meta["motion"]["held"] == [3, 7]
    pairs = background_pairs(clip.num_frames, 1, held_of(clip))
    assert pairs.tolist() == [[i, i + 1] for i in range(11) if i + 1 not in (3, 7)]


def test_batch_file_and_folder_record_the_same_held(small, tmp_path: Path):
    rgb = small.permute(0, 2, 3, 1).numpy()
    frames = [av.VideoFrame.from_ndarray(np.ascontiguousarray(f), format="rgb24")
              .reformat(format="bgr0") for f in rgb]
    video = write_ffv1(tmp_path / "held.mkv", frames, {})
    folder = tmp_path / "frames"
    folder.mkdir()
    for t, f in enumerate(rgb):
        Image.fromarray(f).save(folder / f"{t:03d}.png")
    batch = clips_from_tensor(torch.stack([small, small.flip(0)]))
    assert batch[0].meta["motion"]["held"] == [3, 7]
    assert batch[1].meta["motion"]["held"] == [5, 9]  # reversed: pairs (6, 7), (2, 3)
    for source in (video, folder):
        got = read_clip(source, long_side=None)
        assert got.meta["motion"]["held"] == [3, 7], source
    streamed = read_clip(folder, long_side=None, stream=True)
    assert streamed.meta["motion"]["held"] == [3, 7]
    # explicit indices in any order: positions of the clip (a repeated index is not held)
    picked = read_clip(folder, long_side=None, indices=[4, 2, 3, 3, 7, 6])
    assert picked.meta["motion"]["held"] == [2, 5]
    assert clips_from_tensor(small[None], indices=[4, 2, 3, 3, 7, 6])[0].meta["motion"][
        "held"] == [2, 5]


def test_frozen_clip_keeps_its_behaviour(bad):
    still = bad[:1, :, :64, :96].expand(6, -1, -1, -1).contiguous()
    clip = clips_from_tensor(still[None])[0]
    assert clip.meta["motion"] == {"max_mad": 0.0, "pairs": 5, "frozen": True}
    assert held_of(clip) == []
    pairs = background_pairs(6, 1, [1, 2, 3, 4, 5])  # every pair would go: none is dropped
    assert pairs.tolist() == [[i, i + 1] for i in range(5)]
    row = score_clips([still], preset="background")[0].to_dict()
    assert row["motion"]["frozen"] is True and "held_frames" not in row["motion"]
    assert row["score"] is not None and row["warnings"] == []


def test_a_hand_made_clip_drops_nothing(small):
    read = clips_from_tensor(small[None])[0]
    clip = Clip(frames=read.frames, fps=24.0, content_mask=read.content_mask,
                frame_indices=read.frame_indices, source_size=read.source_size)
    assert held_of(clip) == [] and held_of(read) == [3, 7]
    assert background_pairs(clip.num_frames, 1, held_of(clip)).shape == (11, 2)


def test_drop_held_pairs_closed_form():
    adjacent = torch.tensor([[i, i + 1] for i in range(7)])
    got = drop_held_pairs(adjacent, [2, 3, 6], 8)
    assert isinstance(got, torch.Tensor) and got.tolist() == [[0, 1], [3, 4], [4, 5], [6, 7]]
    # strided (i, i + 2): dropped only when both positions between are held (2 and 3)
    strided = np.array([[i, i + 2] for i in range(6)])
    out = drop_held_pairs(strided, [2, 3, 6], 8)
    assert isinstance(out, np.ndarray) and out.tolist() == [[0, 2], [2, 4], [3, 5], [4, 6],
                                                             [5, 7]]
    # reversed pairs read as (min, max); gvgc rows (d, i, j) read their last two columns
    assert drop_held_pairs(np.array([[3, 2], [4, 3]]), [3], 5).tolist() == [[4, 3]]
    rows = np.array([[2, 0, 2], [2, 1, 3], [2, 2, 4]])
    assert drop_held_pairs(rows, [1, 2], 5).tolist() == [[2, 1, 3], [2, 2, 4]]
    # none held, nothing to drop, or every pair held (a frozen clip): the input itself
    assert drop_held_pairs(adjacent, [], 8) is adjacent
    assert drop_held_pairs(adjacent, None, 8) is adjacent
    assert drop_held_pairs(adjacent, list(range(1, 8)), 8) is adjacent
    assert drop_held_pairs(adjacent, [9, 0], 8) is adjacent  # outside 1..T-1: ignored


def test_worldatlas_pairs_drop_before_the_cap():
    held = list(range(1, 32, 2))  # every frame twice: 32 frames
    got = worldatlas_pairs(32, 1, 8, held)
    assert (got[:, 0] % 2 == 1).all() and len(got) == 8
    assert got.tolist() == [[2 * k + 1, 2 * k + 2] for k in (0, 2, 4, 6, 8, 10, 12, 14)]
    assert worldatlas_pairs(16, 1, 8).tolist() == [[k, k + 1] for k in (0, 2, 4, 6, 8, 10, 12,
                                                                         14)]


def test_held_positions_closed_form():
    assert held_positions([True, False, True]) == [1, 3]
    # chain 0, 2, 5 (pairs 0-2 still, 2-5 moving); the clip 5, 2, 0, 0 (a repeat: not held)
    assert held_positions([True, False], [0, 2, 5], [5, 2, 0, 0]) == [2]


# --- GVGC and foreground pairs (audit s27, second part) ---------------------------------------

SMALL_GVGC = {"gvgc": {"size": [48, 64], "intervals": [20, 10], "min_frames": 31,
                       "sift_features": 500, "matcher": "bf"}}


def test_gvgc_pairs_drop_a_frozen_stretch():
    full = gvgc_pairs(71)
    assert full.shape == (66, 3)
    assert gvgc_pairs(71, held=[]).tolist() == full.tolist()
    # frames 24..40 one still image (held 25..40): only (24, 34) and (30, 40) of d = 10 show
    # two identical frames (every other row spans a moving position)
    got = gvgc_pairs(71, held=list(range(25, 41)))
    assert got.tolist() == [r for r in full.tolist() if r not in ([10, 24, 34], [10, 30, 40])]
    # every frame twice: a 10-frame gap always spans a moving frame, nothing is dropped
    assert gvgc_pairs(71, held=list(range(1, 71, 2))).tolist() == full.tolist()
    # held positions past the protocol's frames (0..70) are ignored
    assert gvgc_pairs(71, held=list(range(71, 90))).tolist() == full.tolist()


@pytest.fixture(scope="module")
def gvgc_clips(bad):
    """A 31-frame C3 truck clip (48x64) and the same clip with frames 11..22 replaced by
    frame 10 (held positions 11..22), read as a batch."""
    frames = render_scene("C3", motion="truck", num_frames=31, size=(48, 64), seed=0).frames
    frozen = frames.clone()
    frozen[11:23] = frames[10]
    return clips_from_tensor(torch.stack([frames, frozen]))


@pytest.mark.parametrize("implementation", ["opencv", "torch"])
def test_gvgc_section_leaves_out_identical_frames(gvgc_clips, implementation):
    moving, frozen = gvgc_clips
    assert held_of(moving) == [] and held_of(frozen) == list(range(11, 23))
    cfg = EpipolarConfig(**SMALL_GVGC)
    if implementation == "opencv":
        both = [gvgc_section_opencv(c, cfg) for c in gvgc_clips]
        alone = gvgc_section_opencv(moving, cfg)
    else:
        cpu = torch.device("cpu")
        both = gvgc_sections_torch(gvgc_clips, cfg, cpu, "opencv-sift")
        alone = gvgc_sections_torch([moving], cfg, cpu, "opencv-sift")[0]
    pairs = lambda s: [(r["interval"], r["left_index"], r["right_index"])  # noqa: E731
                       for r in s["per_pair"]]
    assert len(pairs(both[0])) == both[0]["pairs"] == 22
    # (10, 10, 20) and (10, 12, 22) are two copies of frame 10: not scored
    assert pairs(both[1]) == [p for p in pairs(both[0]) if p not in ((10, 10, 20), (10, 12, 22))]
    assert both[1]["pairs"] == 20
    assert both[0] == alone  # the clip without held frames: unchanged by its batch


@pytest.fixture(scope="module")
def c4_twice():
    """A grounded C4 clip (one moving object, its ground-truth masks, 7 frames at 96x128) with
    a non-rigid corruption, read as is and with every frame shown twice."""
    s = render_scene("C4", num_frames=7, size=(96, 128), seed=0, corruption="nonrigid_object",
                     severity=0.6)
    once = clips_from_tensor(s.frames[None])[0]
    twice = clips_from_tensor(s.frames.repeat_interleave(2, dim=0)[None])[0]
    return once, s.masks, twice, s.masks.repeat_interleave(2, dim=0)


def test_foreground_pairs_leave_out_held_before_the_cap():
    present = torch.ones(13, 1, dtype=torch.bool)  # 14 frames, every frame twice
    held = list(range(1, 14, 2))
    assert foreground_pairs(present, None, held).tolist() == [1, 3, 5, 7, 9, 11]
    assert foreground_pairs(present, 3, held).tolist() == [1, 5, 11]  # 6 left, then 3
    assert foreground_pairs(present, 3).tolist() == [0, 6, 12]  # no held list: as before
    # every candidate held (the object only in pairs of two identical frames): all kept
    only = torch.zeros(13, 1, dtype=torch.bool)
    only[[0, 2]] = True
    assert foreground_pairs(only, None, held).tolist() == [0, 2]


def test_foreground_of_every_frame_twice_scores_as_the_clip(c4_twice):
    once, masks, twice, masks2 = c4_twice
    cfg = {"foreground": {"flow": "torch-lk"}}
    a = foreground_block(once, masks, cfg)["objects"][0]
    held = foreground_block(twice, masks2, cfg)
    b = held["objects"][0]
    assert a["adadfrc_mean"] > 0.3  # the non-rigid object's residual, px^2
    # before: 6 of its 12 pairs were two identical frames scoring 0.0 (mean about halved)
    assert b["frames"] == a["frames"] == 6 and held["skipped"]["pairs"] == 0
    assert b["adadfrc_mean"] == pytest.approx(a["adadfrc_mean"], rel=1e-6)
    assert b["adap90"] == pytest.approx(a["adap90"], rel=1e-6)
    assert [v for v in b["per_pair"] if v is not None] == pytest.approx(
        [v for v in a["per_pair"] if v is not None], rel=1e-6)


def test_score_clips_gvgc_of_a_frozen_stretch(gvgc_clips):
    moving, frozen = (c.frames for c in gvgc_clips)
    cfg = {"epipolar": SMALL_GVGC}
    one, held = (r.to_dict()["epipolar"] for r in score_clips([moving, frozen], preset="gvgc",
                                                              config=cfg))
    assert (one["pairs"], held["pairs"]) == (22, 20)
    spans = [(r["left_index"], r["right_index"]) for r in held["per_pair"]]
    assert (10, 20) not in spans and (12, 22) not in spans
    # before: both were two copies of frame 10 (mean error 9e-15 px: a perfect pair), which
    # pulled the frozen clip's mean error from 0.263 to 0.239 px (the moving clip: 0.292 px)
    assert one["mean_error"] == pytest.approx(0.2922, abs=2e-3)
    assert held["mean_error"] == pytest.approx(0.2631, abs=2e-3)


def test_score_clips_foreground_of_every_frame_twice(c4_twice):
    once, masks, twice, masks2 = c4_twice
    rows = [r.to_dict() for r in score_clips([once.frames, twice.frames], masks=[masks, masks2],
                                             config={"foreground": {"flow": "torch-lk"}})]
    a, b = (r["foreground"]["objects"][0] for r in rows)
    assert b["frames"] == a["frames"] == 6
    assert b["adadfrc_mean"] == pytest.approx(a["adadfrc_mean"], rel=1e-6)
    # before: 0.2204 px^2 over 12 pairs (6 of them two identical frames) and a headline score
    # of 0.797 against the clip's 0.729
    assert rows[1]["score"] == pytest.approx(rows[0]["score"], abs=1e-6)


def test_pair_evidence_of_a_clip_with_held_frames(small, tmp_path: Path):
    """``report.evidence.pair_evidence`` re-derives the pairs a stored row was scored on: with
    held frames, the pairs without the identical ones (pair 3 is (4, 5), not (3, 4))."""
    from geocon_torch import score_clip
    from geocon_torch.report.evidence import pair_evidence

    folder = tmp_path / "frames"
    folder.mkdir()
    for t, f in enumerate(small.permute(0, 2, 3, 1).numpy()):
        Image.fromarray(f).save(folder / f"{t:03d}.png")
    res = score_clip(str(folder), preset="background", config={"io": {"long_side": None}},
                     progress=False).to_dict()
    assert res["motion"]["held_frames"] == 2 and res["background"]["pairs"] == 9
    for k, pair in ((2, (3, 4)), (3, (4, 5)), (8, (10, 11))):
        assert pair_evidence(res, k).pair == pair
