"""The motion segmentation's homography inverses (audit s16 CUDA finding 2): ``inv_ex`` without
its error check (``torch.linalg.inv`` reads the error codes back on CUDA: a host sync per call),
the same numbers as ``torch.linalg.inv`` for invertible homographies, and a homography that
cannot be inverted counts as an invalid pair (it raised torch's ``LinAlgError`` before)."""
from __future__ import annotations

import sys

import torch
from helpers import REPO_ROOT

from geocon_torch.config import SegmentConfig
from geocon_torch.segment import motion

sys.path.insert(0, str(REPO_ROOT))
from benchmarks._dispatch_count import DispatchCounter  # noqa: E402


def _scene(t: int = 6, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    gray = torch.rand(t, 1, 30, 40, generator=g)
    hs = (torch.eye(3, dtype=torch.float64).repeat(t - 1, 1, 1)
          + torch.randn(t - 1, 3, 3, generator=g, dtype=torch.float64) * 0.01)
    hs[:, :2, 2] += torch.randn(t - 1, 2, generator=g, dtype=torch.float64) * 2  # shifts (px)
    valid = torch.tensor([True, True, False, True, True][:t - 1])
    return gray, hs, valid, torch.ones(30, 40, dtype=torch.bool)


def test_pair_inverses_equal_linalg_inv_and_do_not_sync():
    _, hs, valid, _ = _scene()
    old = torch.linalg.inv(torch.where(valid.view(-1, 1, 1), hs, torch.eye(3, dtype=hs.dtype)))
    with DispatchCounter() as c:
        Hd, Hinv, usable = motion._pair_homographies(hs, valid, torch.device("cpu"))
    assert (c.linalg, c.syncs) == (0, 0)
    assert torch.equal(Hinv, old) and torch.equal(Hd, hs) and torch.equal(usable, valid)


def test_change_masks_do_not_sync_on_the_inverse():
    gray, hs, valid, content = _scene()
    with DispatchCounter() as c:
        motion.change_masks(gray, hs, valid, content, 0.1)
    assert c.linalg == 0 and dict(c.linalg_ops) == {}


def test_singular_homography_counts_as_an_invalid_pair():
    """An all-zero (valid) homography and one of rank 2: torch.linalg.inv raised LinAlgError;
    now their pairs give the change masks of the same pairs marked invalid."""
    gray, hs, valid, content = _scene()
    hs[0] = 0.0
    hs[3] = torch.tensor([[1.0, 2.0, 3.0], [2.0, 4.0, 6.0], [1.0, 0.0, 1.0]], dtype=hs.dtype)
    got = motion.change_masks(gray, hs, valid, content, 0.1)
    dropped = valid.clone()
    dropped[[0, 3]] = False
    want = motion.change_masks(gray, hs, dropped, content, 0.1)
    assert torch.equal(got, want)
    assert int(want.sum()) > 0 and int(got[1:3].sum()) > 0


def _moving_square(t: int = 5, size=(96, 128)):
    """Noise background, a bright 30 px square moving 6 px per frame, seeds on its corners."""
    h, w = size
    g = torch.Generator().manual_seed(2)
    gray = torch.rand(1, 1, h, w, generator=g).expand(t, 1, h, w).clone() * 0.3
    pts, frames = [], []
    for k in range(t):
        x = 20 + 6 * k
        gray[k, 0, 30:60, x:x + 30] = 0.9 + 0.05 * torch.rand(30, 30, generator=g)
        for cx, cy in ((x + 3, 33), (x + 26, 33), (x + 3, 56), (x + 26, 56), (x + 15, 45)):
            pts.append((float(cx), float(cy)))
            frames.append(k)
    pts = torch.tensor(pts)
    return gray, (pts, torch.tensor(frames), torch.tensor([6.0, 0.0]).expand(len(pts), 2))


def test_downscaled_segmentation_keeps_its_results_without_linalg_syncs():
    """At a segmentation factor f = 3 the homographies are rescaled by S H S^-1 (S from a
    pinned copy, S^-1 by inv_ex): no linalg sync, and the objects equal those computed with
    torch.linalg.inv for every inverse."""
    gray, seeds = _moving_square()
    hs = torch.eye(3, dtype=torch.float64).repeat(4, 1, 1)
    hs[:, :2, 2] = 1e-3  # a tiny background shift: S H S^-1 is not H
    cfg = SegmentConfig(motion_min_area=20, motion_min_frames=2, motion_min_seeds=3)
    args = (gray, hs, torch.ones(4, dtype=torch.bool), torch.ones(96, 128, dtype=torch.bool),
            cfg, "H")
    assert motion.segmentation_factor((96, 128), 45) == 3
    with DispatchCounter() as c:
        obj, ev = motion.motion_segment(*args, seeds=seeds, max_side=45)
    assert c.linalg == 0
    real_inv = torch.linalg.inv_ex
    try:  # the old torch.linalg.inv for every inverse
        torch.linalg.inv_ex = lambda a, check_errors=False: torch.return_types.linalg_inv_ex(
            (torch.linalg.inv(a), torch.zeros(a.shape[:-2], dtype=torch.int32)))
        ref, ev_ref = motion.motion_segment(*args, seeds=seeds, max_side=45)
    finally:
        torch.linalg.inv_ex = real_inv
    assert ev == ev_ref and ev["objects"] == 1
    assert torch.equal(obj.full(), ref.full()) and int(obj.full().sum()) > 0
