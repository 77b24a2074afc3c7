"""Batched Lowe-ratio matching: closed-form cases, OpenCV BFMatcher parity, batch == loop."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.errors import ShapeError
from geocon_torch.features import match_descriptors, ratio_match
from geocon_torch.types import Keypoints




def _random_kps(t=4, n=60, d=16, seed=0, dtype=torch.float32, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(n, d, generator=g, dtype=torch.float64)
    desc = base[None] + 0.35 * torch.randn(t, n, d, generator=g, dtype=torch.float64)
    perm = torch.stack([torch.randperm(n, generator=g) for _ in range(t)])
    desc = torch.stack([desc[i, perm[i]] for i in range(t)])
    xy = torch.rand(t, n, 2, generator=g, dtype=torch.float64) * 100
    mask = torch.rand(t, n, generator=g) > 0.15
    desc = desc.masked_fill(~mask[..., None], 0)
    xy = xy.masked_fill(~mask[..., None], 0)
    kps = Keypoints(xy=xy.to(device, dtype), descriptors=desc.to(device, dtype),
                    scores=torch.ones(t, n, dtype=dtype, device=device), mask=mask.to(device))
    return kps


def test_closed_form_ratio_and_scores(device, dtype):
    # frame 0: two points; frame 1: three points on a line
    d0 = torch.tensor([[[0.0, 0.0], [10.0, 0.0]]])
    d1 = torch.tensor([[[1.0, 0.0], [4.0, 0.0], [10.5, 0.0]]])
    desc = torch.zeros(2, 3, 2)
    desc[0, :2], desc[1] = d0[0], d1[0]
    mask = torch.tensor([[True, True, False], [True, True, True]])
    xy = torch.arange(12.0).reshape(2, 3, 2)
    kps = Keypoints(xy.to(device, dtype), desc.to(device, dtype),
                    torch.ones(2, 3, device=device, dtype=dtype), mask.to(device))
    c = match_descriptors(kps, torch.tensor([[0, 1]]), ratio=0.75)
    # point 0: d = 1 and 4 -> ratio 0.25 (kept); point 1: d = 0.5 and 6 -> ratio 1/12 (kept)
    assert c.mask.tolist() == [[True, True]]
    torch.testing.assert_close(c.scores[0], torch.tensor([0.75, 1 - 1 / 12], device=device,
                                                         dtype=dtype))
    torch.testing.assert_close(c.x2[0], xy[1, [0, 2]].to(device, dtype))
    assert c.num_kp1.tolist() == [2] and c.num_kp2.tolist() == [3]
    c = match_descriptors(kps, torch.tensor([[0, 1]]), ratio=0.2)
    assert c.mask[0].tolist() == [True]  # only the 1/12 ratio survives
    torch.testing.assert_close(c.x1[0, 0], xy[0, 1].to(device, dtype))


def test_batched_equals_per_pair(device, dtype):
    kps = _random_kps(dtype=dtype, device=device)
    pairs = torch.tensor([[0, 1], [1, 2], [2, 3], [3, 0], [0, 2]])
    for mutual in (False, True):
        batched = match_descriptors(kps, pairs, mutual=mutual, chunk=2)
        for p, pair in enumerate(pairs):
            single = match_descriptors(kps, pair[None], mutual=mutual)
            n = int(single.mask.sum())
            assert int(batched.mask[p].sum()) == n and n > 10
            torch.testing.assert_close(batched.x1[p, :n], single.x1[0, :n])
            torch.testing.assert_close(batched.x2[p, :n], single.x2[0, :n])
            torch.testing.assert_close(batched.scores[p, :n], single.scores[0, :n])
            assert not bool(batched.mask[p, n:].any())


def test_matches_opencv_bfmatcher_ratio_test():
    import cv2

    kps = _random_kps(t=2, n=80, d=32, seed=3)
    for mutual in (False, True):
        c = match_descriptors(kps, torch.tensor([[0, 1]]), ratio=0.75, mutual=mutual)
        m0 = kps.mask[0].numpy()
        m1 = kps.mask[1].numpy()
        d0 = kps.descriptors[0].numpy()[m0]
        d1 = kps.descriptors[1].numpy()[m1]
        bf = cv2.BFMatcher(cv2.NORM_L2, crossCheck=False)
        good = [(a.queryIdx, a.trainIdx) for a, b in bf.knnMatch(d0, d1, k=2)
                if a.distance < 0.75 * b.distance]
        if mutual:
            back = {m.queryIdx: m.trainIdx for m in bf.match(d1, d0)}
            good = [(q, t) for q, t in good if back[t] == q]
        x0 = kps.xy[0].numpy()[m0]
        x1 = kps.xy[1].numpy()[m1]
        ref = sorted((tuple(x0[q]), tuple(x1[t])) for q, t in good)
        ours = sorted((tuple(a), tuple(b)) for a, b in zip(c.x1[0][c.mask[0]].numpy(),
                                                          c.x2[0][c.mask[0]].numpy()))
        assert len(ref) > 10 and ours == ref


def test_mutual_is_a_subset_and_padding_is_zero():
    kps = _random_kps()
    pairs = torch.tensor([[0, 1], [2, 3]])
    a = match_descriptors(kps, pairs)
    b = match_descriptors(kps, pairs, mutual=True)
    for p in range(2):
        sa = set(map(tuple, a.x1[p][a.mask[p]].tolist()))
        sb = set(map(tuple, b.x1[p][b.mask[p]].tolist()))
        assert sb <= sa and len(sb) > 10  # measured 37 and 40 mutual matches
    assert float(a.x1[~a.mask].abs().sum()) == 0 and float(a.scores[~a.mask].abs().sum()) == 0


def test_fewer_than_two_candidates_and_duplicates_give_no_match():
    desc = torch.zeros(2, 2, 4)
    desc[0, 0] = torch.tensor([1.0, 0, 0, 0])
    desc[1, 0] = torch.tensor([1.0, 0, 0, 0])
    mask = torch.tensor([[True, False], [True, False]])
    kps = Keypoints(torch.zeros(2, 2, 2), desc, torch.ones(2, 2), mask)
    assert int(match_descriptors(kps, torch.tensor([[0, 1]])).mask.sum()) == 0
    _, ratios, ok = ratio_match(desc[:1], torch.ones(1, 2, dtype=torch.bool),
                                torch.ones(1, 2, 4), torch.ones(1, 2, dtype=torch.bool))
    assert not bool(ok.any()) and bool((ratios == 1).all())  # exact ties: ratio 1, rejected


def test_bad_pairs_raise():
    kps = _random_kps(t=2)
    with pytest.raises(ShapeError):
        match_descriptors(kps, torch.tensor([[0, 2]]))
    with pytest.raises(ShapeError):
        match_descriptors(kps, torch.tensor([0, 1]))
    empty = match_descriptors(kps, torch.zeros(0, 2, dtype=torch.long))
    assert empty.x1.shape[0] == 0


def test_half_precision_byte_descriptors_still_match():
    """SIFT's byte-valued descriptors in float16: |d|^2 (~2.6e5) overflows float16, so the
    distances are computed in float32; the matches equal float32's (there were none)."""
    gen = torch.Generator().manual_seed(0)
    d1 = torch.randint(0, 160, (1, 50, 128), generator=gen).float()
    d2 = d1[:, torch.randperm(50, generator=gen)] + torch.randint(0, 3, (1, 50, 128),
                                                                     generator=gen)
    m = torch.ones(1, 50, dtype=torch.bool)
    ref = ratio_match(d1, m, d2, m, ratio=0.8)
    got = ratio_match(d1.half(), m, d2.half(), m, ratio=0.8)
    assert int(ref[2].sum()) > 40
    assert torch.equal(got[0], ref[0]) and torch.equal(got[2], ref[2])


def test_half_precision_frames_keep_full_precision_coordinates_and_byte_descriptors_match():
    """bfloat16 frames gave bfloat16 keypoints (up to 0.5 px off at x >= 512); byte (uint8)
    SIFT descriptors, which pad_keypoints offers, made the matcher overflow (a RuntimeError).
    Now float32 coordinates and the same matches as float32 descriptors."""
    from geocon_torch.features import get_extractor, match_descriptors
    from geocon_torch.synth import render_scene
    from geocon_torch.types import Keypoints

    frames = render_scene("C2", num_frames=2, size=(240, 640), seed=0).frames
    gray = (frames.float().mean(1, keepdim=True) / 255.0)
    sift = get_extractor("opencv-sift", max_keypoints=300, device="cpu")
    ref = sift.extract(gray)
    for backend in ("opencv-sift", "torch-sift"):
        half = get_extractor(backend, max_keypoints=300, device="cpu").extract(
            gray.to(torch.bfloat16))
        xy = half.xy[half.mask]
        assert half.xy.dtype == half.scores.dtype == torch.float32, backend
        # not rounded to bfloat16's 8 mantissa bits (2 px steps at x >= 512)
        assert float((xy != xy.to(torch.bfloat16).float()).float().mean()) > 0.5, backend
    pairs = torch.tensor([[0, 1]])
    byte = Keypoints(xy=ref.xy, descriptors=ref.descriptors.to(torch.uint8), scores=ref.scores,
                     mask=ref.mask)
    a, b = match_descriptors(ref, pairs), match_descriptors(byte, pairs)
    assert int(a.mask.sum()) > 50 and torch.equal(a.mask, b.mask)


def _sift_like(seed=0, p=1, n=50, d=128):
    """Byte-valued descriptors of two frames whose keypoints match after a permutation."""
    gen = torch.Generator().manual_seed(seed)
    d1 = torch.randint(0, 160, (p, n, d), generator=gen).float()
    d2 = d1[:, torch.randperm(n, generator=gen)] + torch.randint(0, 3, (p, n, d), generator=gen)
    return d1, d2, torch.ones(p, n, dtype=torch.bool)


def test_byte_descriptors_give_float32_ratios_and_scores():
    """uint8 descriptors: the ratios were written into a uint8 buffer (all 0, scores all 1).
    Closed form: frame 0 at x = 0, 10; frame 1 at x = 1, 4, 12 -> ratios 1/4 and 2/6."""
    desc = torch.tensor([[[0, 0], [10, 0], [0, 0]], [[1, 0], [4, 0], [12, 0]]], dtype=torch.uint8)
    mask = torch.tensor([[True, True, False], [True, True, True]])
    kps = Keypoints(torch.arange(12.0).reshape(2, 3, 2), desc, torch.ones(2, 3), mask)
    c = match_descriptors(kps, torch.tensor([[0, 1]]), ratio=0.75)
    assert c.scores.dtype == torch.float32 and c.mask.tolist() == [[True, True]]
    torch.testing.assert_close(c.scores[0], torch.tensor([0.75, 2 / 3]))
    d1, d2, m = _sift_like()
    ref = ratio_match(d1, m, d2, m, ratio=0.8)
    got = ratio_match(d1.byte(), m, d2.byte(), m, ratio=0.8)
    assert got[1].dtype == torch.float32 and int(got[2].sum()) > 40
    assert all(torch.equal(a, b) for a, b in zip(got, ref))  # same float32 arithmetic
    assert float(got[1][got[2]].max()) < 0.1  # near-duplicates: small ratios, not 0


def test_ratio_match_rejects_bad_arguments():
    a = torch.rand(2, 10, 8)
    m = torch.ones(2, 10, dtype=torch.bool)
    cases = [((a, m, a[..., :4], m), "d2"), ((a, m.float(), a, m), "m1"),
             ((a, m, a, m.float()), "m2"), ((a[0], m[0], a[0], m[0]), "d1"),
             ((a, m, a[:1], m[:1]), "d2"), ((a, m[:, :5], a, m), "m1"),
             ((a, m, a, m[:, :5]), "m2"), ((a, m, a.double(), m), "d2"),
             ((a, m, a.to(torch.complex64), m), "d2")]
    for args, name in cases:
        with pytest.raises(ShapeError, match=rf"^{name} must"):
            ratio_match(*args)


@pytest.mark.parametrize("mutual", [False, True])
@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 1e30])
def test_non_finite_descriptor_is_confined_to_its_keypoint(mutual, bad):
    """One NaN / inf descriptor (or one whose squared norm overflows) in frame j made every
    distance row NaN, so the whole pair had no match. Now that keypoint never matches and is
    never a neighbour: the result equals masking it out, bit for bit."""
    d1, d2, m = _sift_like(p=2)
    for side in (0, 1):  # a bad keypoint in frame i, then in frame j
        dn = [d1.clone(), d2.clone()]
        dn[side][1, 3, 5] = bad
        masks = [m.clone(), m.clone()]
        masks[side][1, 3] = False
        ref = ratio_match(d1, masks[0], d2, masks[1], ratio=0.8, mutual=mutual)
        got = ratio_match(dn[0], m, dn[1], m, ratio=0.8, mutual=mutual)
        assert int(got[2][1].sum()) > 40
        assert all(torch.equal(a, b) for a, b in zip(got, ref)), side
    desc = torch.cat([d1, d2])
    desc[1, 3, 0] = float("nan")
    kps = Keypoints(torch.rand(4, 50, 2), desc, torch.ones(4, 50), torch.ones(4, 50).bool())
    c = match_descriptors(kps, torch.tensor([[0, 2], [1, 3]]), ratio=0.8, mutual=mutual)
    assert int(c.mask[1].sum()) > 40 and bool(torch.isfinite(c.scores).all())


def test_ratio_exactly_at_the_threshold_is_rejected():
    """OpenCV's convention ``d1 < ratio * d2`` (strict): nearest 3, second 4 (exact in floats)
    gives ratio 0.75, rejected at ratio 0.75 and kept at 0.76 with score 0.25."""
    desc = torch.zeros(2, 2, 2)
    desc[1] = torch.tensor([[3.0, 0.0], [0.0, 4.0]])  # frame 1: distances 3 and 4 from 0
    kps = Keypoints(torch.arange(8.0).reshape(2, 2, 2), desc, torch.ones(2, 2),
                    torch.tensor([[True, False], [True, True]]))
    for ratio, want in ((0.75, []), (0.76, [0.25])):
        c = match_descriptors(kps, torch.tensor([[0, 1]]), ratio=ratio)
        assert c.scores[c.mask].tolist() == pytest.approx(want), ratio


def test_mutual_check_keeps_only_the_first_of_tied_back_neighbours():
    """Keypoints 0 and 1 of frame 0 share a descriptor, so both have keypoint 0 of frame 1 as
    nearest neighbour at the same distance; the mutual check keeps the first of them (argmin's
    tie rule, as OpenCV's BFMatcher), without it both match."""
    desc = torch.tensor([[[0.0, 0.0], [0.0, 0.0], [10.0, 0.0]],
                         [[1.0, 0.0], [5.0, 0.0], [10.5, 0.0]]])
    xy = torch.arange(12.0).reshape(2, 3, 2)
    kps = Keypoints(xy, desc, torch.ones(2, 3), torch.ones(2, 3, dtype=torch.bool))
    plain = match_descriptors(kps, torch.tensor([[0, 1]]))
    assert plain.x1[0][plain.mask[0]].tolist() == xy[0].tolist()
    mutual = match_descriptors(kps, torch.tensor([[0, 1]]), mutual=True)
    assert mutual.x1[0][mutual.mask[0]].tolist() == xy[0, [0, 2]].tolist()
    assert mutual.x2[0][mutual.mask[0]].tolist() == xy[1, [0, 2]].tolist()
