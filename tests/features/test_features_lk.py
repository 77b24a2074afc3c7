"""Shi-Tomasi + pyramidal LK tracks (torch and OpenCV paths) on shifted real frames."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import hill_gray, letterbox, to_gray_tensor  # noqa: F401

from geocon_torch.errors import GeoConError
from geocon_torch.features import lk_tracks, shi_tomasi

SHIFT = (0.37, -0.61)



def _shifted(img: np.ndarray, shift) -> np.ndarray:
    import cv2

    m = np.float32([[1, 0, shift[0]], [0, 1, shift[1]]])
    w = cv2.warpAffine(img.astype(np.float32), m, (img.shape[1], img.shape[0]),
                       flags=cv2.INTER_CUBIC, borderMode=cv2.BORDER_REFLECT)
    return np.stack([img.astype(np.float32), w])


def _interior(c, w, h, border=12):
    x1 = c.x1[0][c.mask[0]]
    keep = (x1[:, 0] > border) & (x1[:, 0] < w - border) & (x1[:, 1] > border) & \
        (x1[:, 1] < h - border)
    return x1[keep], c.x2[0][c.mask[0]][keep]


@pytest.mark.parametrize("backend", ["torch", "opencv"])
@pytest.mark.parametrize("shift", [SHIFT, (6.3, -4.45)])
def test_subpixel_translation_recovered(shared_data, backend, shift, dtype, device):
    if backend == "opencv" and device.type != "cpu":
        pytest.skip("the OpenCV path is the CPU reference")
    img = hill_gray(shared_data)
    gray = to_gray_tensor(_shifted(img, shift), dtype, device)
    c = lk_tracks(gray, torch.tensor([[0, 1]]), max_corners=400, backend=backend)
    assert c.x1.dtype == dtype and c.x1.device.type == device.type
    x1, x2 = _interior(c, 320, 240)
    assert len(x1) >= 200
    err = (x2 - x1 - torch.tensor(shift, dtype=dtype, device=device)).norm(dim=-1)
    assert float(err.median()) < 0.1
    assert int(c.num_kp1[0]) == 400


def test_torch_path_agrees_with_opencv(shared_data):
    img = hill_gray(shared_data)
    gray = to_gray_tensor(_shifted(img, (2.2, 1.3)))
    pairs = torch.tensor([[0, 1], [1, 0]])
    a = lk_tracks(gray, pairs, max_corners=300, backend="torch")
    b = lk_tracks(gray, pairs, max_corners=300, backend="opencv")
    for p in range(2):
        ta = {tuple(map(int, q)): r for q, r in zip(a.x1[p][a.mask[p]].tolist(),
                                                     a.x2[p][a.mask[p]].tolist())}
        tb = {tuple(map(int, q)): r for q, r in zip(b.x1[p][b.mask[p]].tolist(),
                                                     b.x2[p][b.mask[p]].tolist())}
        common = ta.keys() & tb.keys()
        assert len(common) >= 0.9 * max(len(ta), len(tb))
        diff = np.array([np.hypot(ta[k][0] - tb[k][0], ta[k][1] - tb[k][1]) for k in common])
        assert np.median(diff) < 0.05 and np.quantile(diff, 0.9) < 0.2


def test_corners_match_goodfeaturestotrack(shared_data):
    import cv2

    img = hill_gray(shared_data)
    xy, valid = shi_tomasi(to_gray_tensor(img[None]), 500, quality=0.001, min_distance=3, block=3)
    ref = cv2.goodFeaturesToTrack(img, 500, 0.001, 3, blockSize=3).reshape(-1, 2)
    ours = set(map(tuple, xy[0][valid[0]].long().tolist()))
    theirs = set(map(tuple, ref.astype(int).tolist()))
    assert len(ours) == len(theirs) == 500
    assert len(ours & theirs) >= 0.95 * 500
    # exact greedy minimum distance: no two accepted corners closer than 3 px
    pts = xy[0][valid[0]]
    d = torch.cdist(pts, pts) + torch.eye(len(pts)) * 1e9
    assert float(d.min()) >= 3.0


def test_batched_equals_per_pair(shared_data):
    img = hill_gray(shared_data, (160, 120))
    frames = np.concatenate([_shifted(img, (0.5, 0.25)), _shifted(img, (-1.5, 2.0))[1:]])
    gray = to_gray_tensor(frames)
    pairs = torch.tensor([[0, 1], [1, 2], [0, 2], [2, 0]])
    batched = lk_tracks(gray, pairs, max_corners=150, chunk=3)
    for p in range(len(pairs)):
        single = lk_tracks(gray, pairs[p:p + 1], max_corners=150)
        n = int(single.mask.sum())
        assert int(batched.mask[p].sum()) == n and n > 50
        torch.testing.assert_close(batched.x2[p, :n], single.x2[0, :n], atol=1e-4, rtol=0)


def test_forward_backward_check_rejects_unrelated_frames(shared_data):
    img = hill_gray(shared_data)
    other = np.ascontiguousarray(np.flipud(np.fliplr(img)))
    gray = to_gray_tensor(np.stack([img, other]).astype(np.float32))
    c = lk_tracks(gray, torch.tensor([[0, 1]]), max_corners=400)
    same = lk_tracks(to_gray_tensor(_shifted(img, SHIFT)), torch.tensor([[0, 1]]), max_corners=400)
    assert int(c.mask.sum()) < 0.3 * int(same.mask.sum())
    # kept tracks satisfy the threshold: score = 1 / (1 + fb) >= 1 / 2.5
    assert bool((same.scores[same.mask] >= 1 / 2.5 - 1e-6).all())


def test_letterbox_mask_and_errors(shared_data):
    img = hill_gray(shared_data, (160, 120))
    frames, mask = letterbox(_shifted(img, SHIFT).astype(np.uint8), top=20, left=10)
    m = torch.from_numpy(mask)
    for backend in ("torch", "opencv"):
        c = lk_tracks(to_gray_tensor(frames), torch.tensor([[0, 1]]), max_corners=200,
                      backend=backend, mask=m)
        x1 = c.x1[0][c.mask[0]].round().long()
        assert len(x1) > 30 and bool(m[x1[:, 1], x1[:, 0]].all())
    with pytest.raises(GeoConError):
        lk_tracks(to_gray_tensor(frames), torch.tensor([[0, 1]]), window=20)
    with pytest.raises(GeoConError):
        lk_tracks(to_gray_tensor(frames), torch.tensor([[0, 1]]), backend="cuda-magic")


def test_no_corner_on_the_outermost_pixels_as_opencv():
    """goodFeaturesToTrack scans rows / columns 1 .. size - 2; the torch corners also took the
    border (28 of 1663 on a grounded 240x320 frame), which inflated feature_match_coverage's
    denominator on the torch path. Now the same set as OpenCV."""
    import cv2

    from geocon_torch.synth import grounded_clip

    fr = grounded_clip("C3", num_frames=2, size=(240, 320)).frames[0]
    g8 = cv2.cvtColor(fr.permute(1, 2, 0).numpy().copy(), cv2.COLOR_RGB2GRAY)
    ref = cv2.goodFeaturesToTrack(g8, 2000, 0.001, 3, blockSize=3).reshape(-1, 2)
    xy, ok = shi_tomasi(torch.from_numpy(g8)[None, None].float() / 255, 2000, quality=0.001,
                        min_distance=3, block=3)
    pts = xy[0][ok[0]]
    assert not bool(((pts[:, 0] < 1) | (pts[:, 1] < 1) | (pts[:, 0] > 318)
                     | (pts[:, 1] > 238)).any())
    assert set(map(tuple, pts.long().tolist())) == set(map(tuple, ref.astype(int).tolist()))
