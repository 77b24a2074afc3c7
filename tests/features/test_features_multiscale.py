"""extract_correspondences: scales {1/4, 1/2, 1}, working-resolution pixels, letterbox bars."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import (
    H_WARP,
    hill_gray,
    letterbox,
    to_clip,
    transfer_errors,  # noqa: F401
    warp_pair,
)

from geocon_torch.config import FeatureConfig
from geocon_torch.errors import GeoConError
from geocon_torch.features import extract_correspondences, get_extractor, to_working_pixels
from geocon_torch.features.multiscale import erode_mask, rescale_gray, scaled_size

BLOBS = [(60.3, 50.7), (200.6, 70.2), (120.1, 180.5), (260.8, 150.4)]



def _blob_image(h=240, w=320, sigma=6.0):
    yy, xx = np.mgrid[0:h, 0:w]
    img = sum(np.exp(-((xx - x0) ** 2 + (yy - y0) ** 2) / (2 * sigma ** 2)) for x0, y0 in BLOBS)
    return (img / img.max() * 200 + 20).round().astype(np.uint8)


def test_to_working_pixels_closed_form():
    xy = torch.tensor([[[0.0, 0.0], [9.5, 3.0]]], dtype=torch.float64)
    out = to_working_pixels(xy, 0.25, 0.5)
    # x = (x_s + 0.5) / s - 0.5
    torch.testing.assert_close(out, torch.tensor([[[1.5, 0.5], [39.5, 6.5]]], dtype=torch.float64))
    # the centre of the frame maps to the centre at every scale
    h, w = 240, 320
    for s in (0.25, 0.5):
        hs, ws = scaled_size(h, w, s)
        c = to_working_pixels(torch.tensor([[(ws - 1) / 2, (hs - 1) / 2]]), ws / w, hs / h)
        torch.testing.assert_close(c, torch.tensor([[(w - 1) / 2, (h - 1) / 2]]))


@pytest.mark.parametrize("backend", ["opencv-sift", "kornia-sift"])
def test_blob_centres_map_back_exactly_from_every_scale(backend):
    """Isotropic blobs at known sub-pixel centres: detected at 1/4, 1/2 and 1 and mapped back,
    they land within 0.2 px (a wrong pixel-centre convention would be 1.5 px off at 1/4)."""
    gray = torch.from_numpy(_blob_image()).float()[None, None] / 255
    ex = get_extractor(backend, max_keypoints=50)
    for s in (1.0, 0.5, 0.25):
        g = rescale_gray(gray, scaled_size(240, 320, s))
        k = ex.extract(g)
        xy = to_working_pixels(k.xy[0][k.mask[0]], g.shape[-1] / 320, g.shape[-2] / 240)
        d = torch.cdist(torch.tensor(BLOBS), xy).min(1).values
        assert float(d.max()) < 0.2, (s, d)


@pytest.mark.parametrize("backend", ["opencv-sift", "kornia-sift"])
def test_multiscale_matches_in_working_pixels(shared_data, backend):
    clip = to_clip(warp_pair(hill_gray(shared_data)))
    cfg = FeatureConfig(backend=backend, max_keypoints=1000)
    res = extract_correspondences(clip, torch.tensor([[0, 1]]), cfg, device="cpu")
    assert sorted(res) == [0.25, 0.5, 1.0]
    counts = []
    for s, c in res.items():
        m = c.mask[0]
        counts.append(int(m.sum()))
        err = transfer_errors(c.x1[0][m], c.x2[0][m], H_WARP)
        assert (err < 2.0).mean() >= 0.9, s
        assert c.pairs.tolist() == [[0, 1]]
    assert counts[0] >= 15 and counts[0] < counts[1] < counts[2]


def test_letterboxed_clip_has_no_matches_on_bars(shared_data):
    frames, mask = letterbox(warp_pair(hill_gray(shared_data, (240, 180))), top=24, left=16)
    clip = to_clip(frames, mask)
    cfg = FeatureConfig(backend="opencv-sift", max_keypoints=800)
    res = extract_correspondences(clip, torch.tensor([[0, 1]]), cfg, scales=(0.5, 1.0))
    inner = erode_mask(torch.from_numpy(mask), cfg.content_margin_px)
    for c in res.values():
        for x in (c.x1[0][c.mask[0]], c.x2[0][c.mask[0]]):
            assert len(x) > 20
            ix, iy = x[:, 0].round().long(), x[:, 1].round().long()
            assert bool(inner[iy, ix].all())


def test_lk_backend_and_unused_frames(shared_data):
    import cv2

    img = hill_gray(shared_data, (160, 120)).astype(np.float32)
    m = np.float32([[1, 0, 2.0], [0, 1, -1.0]])
    shifted = cv2.warpAffine(img, m, (160, 120), flags=cv2.INTER_CUBIC,
                             borderMode=cv2.BORDER_REFLECT)
    noise = np.random.default_rng(0).integers(0, 255, img.shape).astype(np.uint8)
    frames = np.stack([img.round().astype(np.uint8), noise, shifted.round().astype(np.uint8)])
    clip = to_clip(frames)
    cfg = FeatureConfig(backend="lk-tracks", max_keypoints=300)
    res = extract_correspondences(clip, torch.tensor([[0, 2]]), cfg, scales=(0.5, 1.0))
    for s, c in res.items():
        d = (c.x2 - c.x1)[0][c.mask[0]]
        assert len(d) > 40
        med = d.median(0).values
        assert abs(float(med[0]) - 2.0) < 0.1 and abs(float(med[1]) + 1.0) < 0.1, s


def test_bad_scales_raise(shared_data):
    clip = to_clip(warp_pair(hill_gray(shared_data, (64, 48))))
    with pytest.raises(GeoConError):
        extract_correspondences(clip, torch.tensor([[0, 1]]), FeatureConfig(), scales=(0.0,))
    with pytest.raises(GeoConError):
        extract_correspondences(clip, torch.tensor([[0, 1]]), FeatureConfig(), scales=(2.0,))
    # a scale too small to detect anything is left out, not an error
    res = extract_correspondences(clip, torch.tensor([[0, 1]]),
                                  FeatureConfig(backend="opencv-sift"), scales=(0.25, 1.0))
    assert list(res) == [1.0]


@pytest.mark.parametrize("backend", ["opencv-sift", "kornia-sift", "lk-tracks"])
def test_one_frame_clip_without_pairs_gives_empty_batches(backend):
    frames = np.random.default_rng(0).integers(0, 255, (1, 64, 64)).astype(np.uint8)
    res = extract_correspondences(to_clip(frames), torch.zeros(0, 2, dtype=torch.long),
                                  FeatureConfig(backend=backend))
    assert sorted(res) == [0.25, 0.5, 1.0]
    for c in res.values():
        assert c.x1.shape == (0, 0, 2) and c.mask.shape == (0, 0) and c.pairs.shape == (0, 2)


def test_octave_bands_closed_form():
    from geocon_torch.features.opencv_sift import octave_band, signed_octaves

    assert [octave_band(s) for s in (1.0, 0.5, 0.25, 0.125)] == [-1, 0, 1, 2]
    assert octave_band(0.75) is None and octave_band(0.3) is None
    # OpenCV packs octave (low byte, signed), layer (second byte) and more into KeyPoint.octave
    packed = np.array([0x00FF, 0x02FF, 0x0100, 0x0201, 0x10302])
    assert signed_octaves(packed).tolist() == [-1, -1, 0, 1, 2]


def test_scale_space_bands_stand_for_detection_on_shrunk_frames(shared_data):
    """One working-resolution detection split into octave bands finds about as many keypoints as
    detecting again on the frames shrunk by 2 and 4 (measured 94 % / 95 %), mostly the same
    ones (76 % / 70 % of the shrunk-image keypoints have a band keypoint within one shrunk
    pixel), with positions already in working pixels."""
    from geocon_torch.features.opencv_sift import OpenCVSIFT

    img = hill_gray(shared_data, (640, 480))
    ex = OpenCVSIFT(2000)
    bands = ex.extract_scale_space(1, lambda k: img, None, [-1, 0, 1])
    gray = torch.from_numpy(img).float()[None, None] / 255
    for s, band in zip((1.0, 0.5, 0.25), bands):
        size = scaled_size(480, 640, s)
        k = ex.extract(rescale_gray(gray, size))
        xy = to_working_pixels(k.xy[0][k.mask[0]], size[1] / 640, size[0] / 480)
        bxy = band.xy[0][band.mask[0]]
        assert 0.85 * len(xy) <= len(bxy) <= 1.15 * len(xy), s
        near = torch.cdist(xy.double(), bxy.double()).min(1).values < 1.0 / s
        assert float(near.double().mean()) >= (0.99 if s == 1.0 else 0.6), s
        octaves = band.extra["octave"][0][band.mask[0]]
        assert bool((octaves >= {1.0: -1, 0.5: 0, 0.25: 1}[s]).all())


@pytest.mark.parametrize("mode", ["pyramid", "scale_space"])
def test_both_scale_modes_match_in_working_pixels(shared_data, mode):
    clip = to_clip(warp_pair(hill_gray(shared_data)))
    cfg = FeatureConfig(backend="opencv-sift", max_keypoints=1000, scale_mode=mode)
    res = extract_correspondences(clip, torch.tensor([[0, 1]]), cfg, device="cpu")
    counts = []
    for s, c in res.items():
        m = c.mask[0]
        counts.append(int(m.sum()))
        err = transfer_errors(c.x1[0][m], c.x2[0][m], H_WARP)
        assert (err < 2.0).mean() >= 0.9, (mode, s)
    assert counts[0] >= 15 and counts[0] < counts[1] < counts[2]


def test_scale_mode_errors_and_fallback(shared_data):
    clip = to_clip(warp_pair(hill_gray(shared_data, (160, 120))))
    pair = torch.tensor([[0, 1]])
    with pytest.raises(GeoConError, match="scale_mode"):
        extract_correspondences(clip, pair, FeatureConfig(scale_mode="octaves"))
    with pytest.raises(GeoConError, match="power-of-two"):
        extract_correspondences(clip, pair, FeatureConfig(backend="kornia-sift",
                                                          scale_mode="scale_space"))
    with pytest.raises(GeoConError, match="power-of-two"):
        extract_correspondences(clip, pair, FeatureConfig(backend="opencv-sift",
                                                          scale_mode="scale_space"),
                                scales=(0.75, 1.0))
    # auto falls back to the pyramid where bands do not apply (a 0.75 scale)
    res = extract_correspondences(clip, pair, FeatureConfig(backend="opencv-sift"),
                                  scales=(0.75, 1.0))
    assert sorted(res) == [0.75, 1.0] and int(res[0.75].mask.sum()) > 10


def test_resolve_scale_mode():
    from geocon_torch.features.multiscale import resolve_scale_mode

    assert resolve_scale_mode("auto", "opencv-sift", (0.25, 0.5, 1.0)) == "scale_space"
    assert resolve_scale_mode("auto", "opencv-sift", (0.75, 1.0)) == "pyramid"
    assert resolve_scale_mode("auto", "kornia-sift", (0.25, 0.5, 1.0)) == "pyramid"
    assert resolve_scale_mode("pyramid", "opencv-sift", (0.5, 1.0)) == "pyramid"
    with pytest.raises(GeoConError, match="power-of-two"):
        resolve_scale_mode("scale_space", "lk-tracks", (0.5, 1.0))


def test_scaled_size_rounds_to_the_nearest_pixel():
    """(round(H s), round(W s)), at least 1: 255 x 333 at 1/4 is 64 x 83 (63.75, 83.25), 15 x
    6 at 1/2 is 8 x 3 (7.5 rounds to even, 3), never 0."""
    from geocon_torch.features.multiscale import scaled_size

    assert scaled_size(255, 333, 0.25) == (64, 83)
    assert scaled_size(90, 161, 0.5) == (45, 80)  # 80.5 -> 80 (round half to even)
    assert scaled_size(15, 6, 0.5) == (8, 3)
    assert scaled_size(3, 1, 0.1) == (1, 1)


def test_scaled_content_mask_samples_pixel_centres():
    """The content mask at a scale reads the working pixel under each scaled pixel's centre
    (nearest-exact): 6 -> 4 columns read columns floor((i + 0.5) 1.5) = 0, 2, 3, 5, so a
    content strip in the last working column stays content in the last scaled one."""
    from geocon_torch.features.multiscale import _scaled_mask

    for col, want in ((5, [3]), (1, []), (2, [1]), (0, [0])):
        m = torch.zeros(6, 6, dtype=torch.bool)
        m[:, col] = True
        got = _scaled_mask(m, (4, 4))
        assert got.any(0).nonzero().flatten().tolist() == want, col
        assert torch.equal(got, got[:1].expand(4, 4))  # rows: the same rule
