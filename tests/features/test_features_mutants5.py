"""Boundaries of matching, keypoint compaction and the multiscale stage that no other default
test pins (mutation audit s20): duplicate nearest neighbours, padded keypoints with leftover
descriptors, ratios of small distances, the per-frame cap and order of compact_keypoints, the
pair chunks, the antialiased shrink, the content margin and the remap of tracks. Closed-form
descriptors and small synthetic frames."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from geocon_torch.config import FeatureConfig
from geocon_torch.errors import ShapeError
from geocon_torch.features import extract_correspondences, get_extractor, match_descriptors
from geocon_torch.features import multiscale
from geocon_torch.features.base import compact_keypoints
from geocon_torch.types import Correspondences, Keypoints


def _kps(desc_i, desc_j, mask_i=None, mask_j=None):
    """Keypoints of two frames (descriptors padded to one width N); xy of keypoint k of frame f
    is (10 f + k, 0)."""
    n = max(len(desc_i), len(desc_j))
    d = len(desc_i[0])
    desc = torch.zeros(2, n, d)
    desc[0, :len(desc_i)] = torch.tensor(desc_i, dtype=torch.float32)
    desc[1, :len(desc_j)] = torch.tensor(desc_j, dtype=torch.float32)
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[0, :len(desc_i)] = torch.tensor(mask_i or [True] * len(desc_i))
    mask[1, :len(desc_j)] = torch.tensor(mask_j or [True] * len(desc_j))
    xy = torch.zeros(2, n, 2)
    xy[0, :, 0] = torch.arange(n, dtype=torch.float32)
    xy[1, :, 0] = 10 + torch.arange(n, dtype=torch.float32)
    return Keypoints(xy, desc, torch.ones(2, n), mask)


PAIR = torch.tensor([[0, 1]])


def test_two_exact_duplicates_of_the_query_are_ambiguous():
    """Both nearest neighbours at distance 0: ratio 1 (rejected), not 0 / tiny = 0."""
    kps = _kps([[0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0], [5.0, 0.0]])
    for mutual in (False, True):
        assert int(match_descriptors(kps, PAIR, mutual=mutual).mask.sum()) == 0


def test_padded_keypoint_of_frame_i_with_a_leftover_descriptor_is_no_back_neighbour():
    """Frame i: keypoint 0 at [0, 0], a padded slot holding [1, 0]; frame j: [1, 0], [10, 0].
    The mutual check ignores the padded slot: keypoint 0 matches keypoint 0 of frame j."""
    kps = _kps([[0.0, 0.0], [1.0, 0.0]], [[1.0, 0.0], [10.0, 0.0]], mask_i=[True, False])
    c = match_descriptors(kps, PAIR, mutual=True)
    assert c.mask.tolist() == [[True]] and c.x2[0, 0].tolist() == [10.0, 0.0]
    assert c.scores[0, 0].item() == pytest.approx(0.9)


def test_padded_keypoint_of_frame_j_with_a_leftover_descriptor_is_no_neighbour():
    """Frame j's padded slot holds [0.1, 0], nearer the query than any valid keypoint: the
    match still goes to keypoint 0 of frame j (ratio 1 / 10)."""
    kps = _kps([[0.0, 0.0]], [[1.0, 0.0], [10.0, 0.0], [0.1, 0.0]],
               mask_j=[True, True, False])
    c = match_descriptors(kps, PAIR)
    assert c.mask.tolist() == [[True]] and c.x2[0, 0].tolist() == [10.0, 0.0]
    assert c.scores[0, 0].item() == pytest.approx(0.9)


def test_ratio_of_distances_below_one():
    """Distances 0.1 and 0.4: ratio 0.25, score 0.75 (the floor on the second distance only
    guards a division by zero)."""
    kps = _kps([[0.0, 0.0]], [[0.1, 0.0], [0.4, 0.0]])
    c = match_descriptors(kps, PAIR)
    assert c.mask.tolist() == [[True]]
    assert c.scores[0, 0].item() == pytest.approx(0.75, abs=1e-6)


# ------------------------------------------------------------------ compact_keypoints

def _four():
    xy = torch.tensor([[[0.0, 0], [1, 0], [2, 0], [3, 0]], [[5.0, 0], [6, 0], [7, 0], [8, 0]]])
    desc = xy[..., :1] + 100
    scores = torch.tensor([[1.0, 4.0, 2.0, 3.0], [2.0, 1.0, 0.0, 0.0]])
    mask = torch.tensor([[True, True, False, True], [True, True, False, False]])
    return Keypoints(xy, desc, scores, mask)


def test_compact_keeps_the_strongest_valid_keypoints_first_and_caps_them():
    out = compact_keypoints(_four(), max_keypoints=2)
    assert out.xy[..., 0].tolist() == [[1.0, 3.0], [5.0, 6.0]]
    assert out.scores.tolist() == [[4.0, 3.0], [2.0, 1.0]]
    out = compact_keypoints(_four())
    assert out.scores.tolist() == [[4.0, 3.0, 1.0], [2.0, 1.0, 0.0]]
    assert out.mask.tolist() == [[True, True, True], [True, True, False]]


def test_compact_keep_never_revives_an_invalid_keypoint_and_zeroes_padding():
    keep = torch.tensor([[True, False, True, True], [False, True, True, True]])
    out = compact_keypoints(_four(), keep)
    assert out.mask.tolist() == [[True, True], [True, False]]
    assert out.xy[..., 0].tolist() == [[3.0, 0.0], [6.0, 0.0]]
    assert out.descriptors[..., 0].tolist() == [[103.0, 100.0], [106.0, 0.0]]


def test_gray_frames_beyond_the_resampling_overshoot_are_refused():
    sift = get_extractor("opencv-sift", max_keypoints=10, device="cpu")
    gray = torch.full((1, 1, 32, 32), 0.5)
    gray[0, 0, 0, 0] = 1.3
    with pytest.raises(ShapeError, match=r"must lie in \[0, 1\]"):
        sift.extract(gray)


# ------------------------------------------------------------------ multiscale

def test_pair_chunks_hold_up_to_chunk_frames_frames():
    pairs = torch.tensor([[0, 1], [2, 3], [4, 5]])
    chunks = multiscale.pair_chunks(pairs, 4)
    assert [c.tolist() for c in chunks] == [[0, 1], [2]]


def test_auto_chunk_frames_on_an_accelerator_fit_its_pixel_budget():
    """4e7 px of 384 x 640 frames: 162 frames in a chunk (at least the CPU's 48)."""
    assert multiscale.resolve_chunk_frames("auto", "meta", (384, 640)) == 162
    assert multiscale.resolve_chunk_frames("auto", "meta", (2160, 3840)) == 48
    assert multiscale.resolve_chunk_frames("auto", "cpu", (384, 640)) == 48


def test_shrinking_is_antialiased():
    """Columns of period 4 with one lit: a 4x shrink averages them (0.25), a plain bilinear
    sample falls between two dark columns (0)."""
    g = torch.zeros(1, 1, 64, 64)
    g[..., ::4] = 1.0
    out = multiscale.rescale_gray(g, (16, 16))
    want = F.interpolate(g, size=(16, 16), mode="bilinear", align_corners=False, antialias=True)
    assert torch.equal(out, want) and out.mean().item() == pytest.approx(0.25, abs=0.01)


def test_remap_drops_tracks_that_land_outside_the_content_in_either_frame():
    mask = torch.ones(20, 20, dtype=torch.bool)
    mask[:, 15:] = False
    x1 = torch.tensor([[[2.0, 2.0], [3.0, 3.0], [17.0, 4.0]]])
    x2 = torch.tensor([[[2.0, 2.0], [17.0, 3.0], [4.0, 4.0]]])
    c = Correspondences(x1, x2, torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 3),
                        PAIR, torch.tensor([3]), torch.tensor([3]))
    out = multiscale._remap(c, 1.0, 1.0, PAIR, mask)
    assert out.mask.tolist() == [[True]] and out.x1[0, 0].tolist() == [2.0, 2.0]


def _boxed_clip(top=16, h=96, w=128):
    """Two frames of a blurred random texture shifted 2 px, black bars of ``top`` rows."""
    from geocon_torch.io import read_clip

    g = torch.Generator().manual_seed(0)
    base = torch.rand(1, 1, h // 4, (w + 8) // 4, generator=g)
    tex = F.interpolate(base, size=(h, w + 8), mode="bicubic", align_corners=False)[0, 0]
    tex = ((tex - tex.min()) / (tex.max() - tex.min()) * 200 + 40).to(torch.uint8)
    frames = torch.stack([tex[:, 2 * k:2 * k + w] for k in range(2)])[:, None].repeat(1, 3, 1, 1)
    frames[:, :, :top] = 0
    frames[:, :, h - top:] = 0
    return read_clip(frames, long_side=None)


def test_content_margin_keeps_keypoints_off_the_bar_edges():
    """Bars of 16 rows top and bottom; the bright texture ends at the bars (strong edges): with
    no margin, matches lie within 4 px of a bar; with content_margin_px = 4 none do."""
    clip = _boxed_clip()
    assert clip.content_mask[16:80].all() and not clip.content_mask[:16].any()

    def rows(margin):
        cfg = FeatureConfig(backend="opencv-sift", scales=(1.0,), content_margin_px=margin)
        c = extract_correspondences(clip, PAIR, cfg, device="cpu")[1.0]
        y = torch.cat([c.x1[c.mask][:, 1], c.x2[c.mask][:, 1]]).round()
        assert y.numel() > 10
        return y

    near = lambda y: ((y < 20) | (y > 75)).sum().item()  # noqa: E731
    assert near(rows(0)) > 0
    y = rows(4)
    assert near(y) == 0 and y.min() >= 20 and y.max() <= 75


def test_ncc_guard_keeps_a_track_exactly_at_the_minimum():
    """Identical frames, x2 = x1: every patch NCC is exactly 1, so ``min_ncc = 1`` keeps all
    tracks (the guard is ``ncc >= min_ncc``)."""
    from geocon_torch.config import LKConfig

    g = torch.rand(1, 1, 40, 40, generator=torch.Generator().manual_seed(0)).repeat(2, 1, 1, 1)
    x = torch.tensor([[[10.0, 12.0], [20.5, 25.0], [30.0, 15.0]]])
    c = Correspondences(x, x.clone(), torch.ones(1, 3, dtype=torch.bool), torch.ones(1, 3),
                        PAIR, torch.tensor([3]), torch.tensor([3]))
    out = multiscale._ncc_guard(c, g, PAIR, LKConfig(min_ncc=1.0))
    assert out.mask.tolist() == [[True, True, True]] and out.scores.tolist() == [[1.0] * 3]
    out = multiscale._ncc_guard(c, g, PAIR, LKConfig(min_ncc=-1.0))
    assert out is c


def test_pyramid_points_map_back_with_each_axis_own_factor(monkeypatch):
    """242 x 320 (a 243-row tensor loses its odd row) at scale 1/4 is 60 x 80: points found
    there map back with the x factor 80/320 and the y factor 60/242 (not the two swapped)."""
    g = torch.rand(1, 1, 243 // 6, 320 // 6, generator=torch.Generator().manual_seed(1))
    tex = F.interpolate(g, size=(243, 320), mode="bicubic", align_corners=False)
    tex = ((tex - tex.min()) / (tex.max() - tex.min()) * 215 + 20).to(torch.uint8)
    from geocon_torch.io import read_clip

    clip = read_clip(tex.repeat(2, 3, 1, 1), long_side=None)
    assert clip.size == (242, 320) and multiscale.scaled_size(242, 320, 0.25) == (60, 80)
    seen = set()
    real = multiscale.to_working_pixels

    def spy(xy, sx, sy):
        seen.add((sx, sy))
        return real(xy, sx, sy)

    monkeypatch.setattr(multiscale, "to_working_pixels", spy)
    for backend in ("opencv-sift", "torch-sift"):
        seen.clear()
        cfg = FeatureConfig(backend=backend, scales=(0.25,), scale_mode="pyramid")
        c = extract_correspondences(clip, PAIR, cfg, device="cpu")[0.25]
        assert int(c.mask.sum()) > 10 and seen == {(80 / 320, 60 / 242)}, backend
