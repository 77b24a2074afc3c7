"""Frame selection and pair lists (geocon_torch.io.sampling)."""
import numpy as np
import pytest
import torch

from geocon_torch.errors import ShapeError, VideoReadError
from geocon_torch.io import frame_selection, make_pairs, spread_evenly
from geocon_torch.io.sampling import check_indices_in_range


def test_adjacent_pairs():
    p = make_pairs(5)
    assert p.dtype == torch.long and p.shape == (4, 2)
    assert p.tolist() == [[0, 1], [1, 2], [2, 3], [3, 4]]
    assert make_pairs(5, "adjacent").equal(make_pairs(5, 1))


def test_stride_pairs():
    assert make_pairs(6, 2).tolist() == [[0, 2], [1, 3], [2, 4], [3, 5]]
    assert make_pairs(6, 5).tolist() == [[0, 5]]
    assert make_pairs(6, 6).shape == (0, 2)


@pytest.mark.parametrize("num_frames", [0, 1])
def test_short_clips_have_no_pairs(num_frames):
    assert make_pairs(num_frames).shape == (0, 2)
    assert make_pairs(num_frames, 3, max_pairs=8).shape == (0, 2)


def test_explicit_pairs_kept_in_order():
    spec = [(4, 0), (1, 3), (2, 3)]
    assert make_pairs(5, spec).tolist() == [[4, 0], [1, 3], [2, 3]]
    assert make_pairs(5, torch.tensor(spec)).tolist() == [[4, 0], [1, 3], [2, 3]]
    assert make_pairs(5, np.array(spec)).tolist() == [[4, 0], [1, 3], [2, 3]]
    assert make_pairs(5, []).shape == (0, 2)


def test_max_pairs_spread_evenly():
    # 49 frames, adjacent -> 48 candidate pairs; 8 kept at round(linspace(0, 47, 8))
    p = make_pairs(49, max_pairs=8)
    expect = np.rint(np.linspace(0, 47, 8)).astype(int)
    assert p[:, 0].tolist() == expect.tolist() == [0, 7, 13, 20, 27, 34, 40, 47]
    assert (p[:, 1] - p[:, 0]).eq(1).all()
    # stride 3: candidates (i, i + 3), i = 0..45
    p3 = make_pairs(49, 3, max_pairs=4)
    assert p3.tolist() == [[0, 3], [15, 18], [30, 33], [45, 48]]
    # fewer candidates than max_pairs: all of them
    assert make_pairs(5, max_pairs=8).equal(make_pairs(5))
    assert make_pairs(10, max_pairs=1).tolist() == [[0, 1]]


def test_spread_evenly_positions():
    assert spread_evenly(10, 4).tolist() == [0, 3, 6, 9]
    assert spread_evenly(3, None).tolist() == [0, 1, 2]
    for n in range(2, 60):
        for k in range(2, n):
            pos = spread_evenly(n, k)
            assert len(np.unique(pos)) == k and pos[0] == 0 and pos[-1] == n - 1


@pytest.mark.parametrize("kwargs, match", [
    (dict(num_frames=5, mode="bogus"), "adjacent"),
    (dict(num_frames=5, mode=0), ">= 1"),
    (dict(num_frames=5, mode=[(0, 5)]), "outside 0..4"),
    (dict(num_frames=5, mode=[(-1, 2)]), "outside"),
    (dict(num_frames=5, mode=[(2, 2)]), "two different frames"),
    (dict(num_frames=5, mode=[(0, 1, 2)]), r"\(P, 2\)"),
    (dict(num_frames=5, mode=[(0.5, 1.0)]), "integers"),
    (dict(num_frames=5, max_pairs=0), "max_pairs"),
    (dict(num_frames=-1), "num_frames"),
])
def test_make_pairs_errors(kwargs, match):
    with pytest.raises(ShapeError, match=match):
        make_pairs(**kwargs)


def test_frame_selection_stride_and_cap():
    sel = frame_selection(stride=3, max_frames=4)
    assert sel.resolve(100).tolist() == [0, 3, 6, 9]
    assert sel.resolve(7).tolist() == [0, 3, 6]
    assert sel.fps(30.0) == 10.0
    kept = [i for i in range(20) if sel.keeps(i, len([j for j in range(i) if j % 3 == 0]))]
    assert kept == [0, 3, 6, 9]
    assert sel.finished(9, 4) and not sel.finished(6, 3)


def test_frame_selection_indices():
    sel = frame_selection(indices=[5, 1, 5])
    assert sel.resolve(6).tolist() == [5, 1, 5]
    assert sel.fps(30.0) == 30.0
    assert sel.finished(5, 2) and not sel.finished(4, 1)
    assert frame_selection(indices=torch.tensor([2, 0])).indices == (2, 0)
    with pytest.raises(VideoReadError, match=r"\[5\] are out of range: the clip has 5 frames"):
        sel.resolve(5)



def test_out_of_range_message_names_the_path_and_a_short_decode():
    """With a path, the message starts with it; a container that announced more frames than
    decoded (a truncated file) is said to have decoded fewer."""
    with pytest.raises(VideoReadError, match=r"^clip\.mp4: frame indices \[5\] are out of range"):
        frame_selection(indices=[5]).resolve(5, "clip.mp4")
    with pytest.raises(VideoReadError, match=r"the clip has 6 frames \(valid 0\.\.5\); the file "
                                             r"announces 30 frames but only 6 decode$"):
        check_indices_in_range([0, 25], 6, "cut.mp4", announced=30)
    with pytest.raises(VideoReadError, match=r"\(valid 0\.\.5\)$"):  # no claim when it matches
        check_indices_in_range([25], 6, "cut.mp4", announced=6)

@pytest.mark.parametrize("kwargs, match", [
    (dict(stride=0), "stride"),
    (dict(stride=1.5), "stride"),
    (dict(max_frames=0), "max_frames"),
    (dict(indices=[]), "empty"),
    (dict(indices=[-1, 2]), ">= 0"),
    (dict(indices=[1.5]), "integers"),
    (dict(indices=[1], stride=2), "cannot be combined"),
    (dict(indices=[1], max_frames=3), "cannot be combined"),
])
def test_frame_selection_errors(kwargs, match):
    with pytest.raises(VideoReadError, match=match):
        frame_selection(**kwargs)


def test_frame_motion_records_the_largest_pair_and_any_moving_pair_unfreezes():
    """FrameMotion closed form on (4, 5, 3) uint8 frames: a +10 step then a repeat gives
    max_mad 10 over 2 pairs, not frozen (one moving pair is enough, wherever it is); a clip
    whose only change is half the values +1 (MAD 0.5 = FROZEN_MAX_MAD) is frozen; a pair of
    different sizes counts as moving (max_mad 255)."""
    from geocon_torch.io.sampling import FROZEN_MAX_MAD, SIZE_CHANGE_MAD, FrameMotion

    base = np.zeros((4, 5, 3), np.uint8)
    half = base.copy()
    half.reshape(-1)[::2] = 1  # 30 of 60 values + 1
    cases = [([base, base + 10, base + 10], 10.0, False),
             ([base, base + 10, base + 10, base + 10], 10.0, False),
             ([base, half, half], FROZEN_MAX_MAD, True),
             ([base, np.zeros((6, 5, 3), np.uint8)], SIZE_CHANGE_MAD, False),
             ([base, np.zeros((6, 5, 3), np.uint8), np.zeros((6, 5, 3), np.uint8)],
              SIZE_CHANGE_MAD, False)]
    for frames, mad, frozen in cases:
        motion = FrameMotion()
        for i, f in enumerate(frames):
            motion.add(i, f, kept=True)
        assert motion.record() == {"max_mad": mad, "pairs": len(frames) - 1, "frozen": frozen}
