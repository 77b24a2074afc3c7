"""benchmarks/_dispatch_count.py: the op / sync / OpenCV counters of benchmarks/batching.py count
known sequences exactly."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))
from benchmarks import batching  # noqa: E402
from benchmarks._dispatch_count import (DispatchCounter, HostToDeviceCounter,  # noqa: E402
                                        OpenCVCounter)
from geocon_torch._tensor_utils import constant_on, to_device  # noqa: E402

_CONST = torch.tensor([1.0, 2.0, 3.0])  # a module constant, as the toolkit keeps them


def test_item_is_one_op_and_one_sync():
    x = torch.arange(6.0)
    with DispatchCounter() as c:
        x.sum().item()
    assert (c.ops, c.syncs, c.scalar) == (2, 1, 1)
    assert c.by_op == {"aten.sum": 1, "aten._local_scalar_dense": 1}


def test_each_kind_of_sync_is_counted():
    x = torch.arange(6.0)
    with DispatchCounter() as c:
        y = x * 2                # 1 op, no sync
        bool(y.max() > 3)        # max, gt, _local_scalar_dense: 3 ops, 1 scalar sync
        x[x > 2]                 # gt + boolean-mask index: 2 ops, 1 data-dependent sync
        torch.nonzero(x)         # 1 op, 1 data-dependent sync
        x.tolist()               # no op, 1 transfer
        x.cpu()                  # no op, 1 transfer
    assert (c.scalar, c.data_dependent, c.transfer, c.syncs) == (1, 2, 2, 5)
    assert c.ops == 7
    # the wrapped Tensor methods are restored on exit
    with DispatchCounter() as d:
        pass
    x.tolist()
    assert d.transfer == 0


def test_topk_and_integer_index_do_not_sync():
    x = torch.rand(4, 10, generator=torch.Generator().manual_seed(0))
    with DispatchCounter() as c:
        idx = x.topk(3, dim=1).indices
        x.gather(1, idx)
        x[:, torch.tensor([0, 2])]
    assert c.syncs == 0 and c.ops >= 3


def test_host_to_device_copies_are_found_on_the_cpu():
    """What a CUDA run would copy from pageable host memory, each copy with its code line."""
    dev = torch.device("cpu")  # the device the code computes on (CUDA in a real run)
    video = torch.rand(4, 3)
    with HostToDeviceCounter() as c:
        HostToDeviceCounter.device(video)
        a = torch.tensor([1.0, 2.0, 3.0], device=dev)   # Python data to the device: 1
        b = _CONST.to(dev)                               # a module constant moved: 1
        host = torch.arange(3.0) * 2                     # computed on the host: 0
        _ = video[:, :3] + host                          # a host tensor mixed in: 1
        _ = video * torch.tensor(2.0)                    # a 0-dim host scalar: 0
        _ = torch.zeros(3, device=dev) + a + b           # device factories: 0
        _ = to_device([4.0, 5.0, 6.0], dev)              # pinned, non-blocking on CUDA: 0
        _ = constant_on(_CONST, dev) + a                 # one pinned copy per process: 0
        _ = video.to(torch.float64)                      # a dtype cast, not a move: 0
    assert c.copies == 3
    assert sum(c.sites.values()) == 3 and all(k.startswith("outside") for k in c.sites)
    with HostToDeviceCounter() as d:
        _ = constant_on(_CONST, dev) + torch.ones(3, device=dev)
        _ = _CONST * 2                                   # host arithmetic stays uncounted
    assert d.copies == 0
    assert constant_on(_CONST, dev) is constant_on(_CONST, dev)  # one copy per process


def test_host_to_device_tracker_leaves_op_counts_exact():
    """Nested with DispatchCounter: transfers counted once, its own aliases reported."""
    x = torch.arange(6.0)
    with HostToDeviceCounter() as h, DispatchCounter() as c:
        HostToDeviceCounter.device(x)
        y = (x * 2).to("cpu")  # a no-op move on the CPU: the tracker aliases it (1 view)
        y.tolist()
    assert (c.transfer, h.aliases) == (1, 1)
    assert c.ops - h.aliases == 1  # the mul


def test_opencv_calls_and_object_methods_are_counted():
    cv2 = pytest.importorskip("cv2")
    img = np.zeros((16, 16), np.uint8)
    with OpenCVCounter() as cv:
        cv2.resize(img, (8, 8))
        sift = cv2.SIFT_create(10)       # factory: 1 call, the object is proxied
        sift.detectAndCompute(img, None)  # method: 1 call
        try:
            cv2.resize(None, (0, 0))
        except cv2.error:                # exception classes stay usable
            pass
    assert cv.calls == 4
    assert cv.by_name["resize"] == 2 and cv.by_name["SIFT_create.detectAndCompute"] == 1
    assert cv2.resize is not None and type(cv2.resize).__name__ == "builtin_function_or_method"


@pytest.mark.slow
def test_batching_quick_run_counts_the_cuda_default_path():
    """benchmarks/batching.py --quick: B = 1 and 2 tiny grounded clips through the background
    metric on the CUDA default path (torch-sift, its own gate view): no OpenCV call, and the
    RESULT holds ops / syncs per B and the growth."""
    res = batching.main(["--quick"])
    assert res["backend"] == "torch-sift"
    bg = res["paths"]["background"]
    assert set(bg) == {"1", "2"} and all(bg[b]["opencv"] == 0 for b in bg)
    assert bg["2"]["ops"] > bg["1"]["ops"] > 0
    assert res["ops_growth"]["background"] == pytest.approx(bg["2"]["ops"] / bg["1"]["ops"],
                                                            abs=1e-3)


@pytest.mark.parametrize("frames", [12, 16])
def test_epipolar_dpo_reward_cost_does_not_grow_per_clip(frames):
    """reward-epipolar-dpo counted as batching.py counts it (the CUDA default path): 12 frames
    (one sampled frame, no pair) and 16 frames (one pair per clip); eight clips cost at most
    1.5x the ops of one and the same host syncs, and no SIFT runs without a pair."""
    import cv2

    from geocon_torch.epipolar.torch_path import GRAY_OPENCV_MAJOR

    if frames == 16 and int(cv2.__version__.split(".")[0]) != GRAY_OPENCV_MAJOR:
        pytest.skip(f"OpenCV {cv2.__version__}: the frames go to gray one by one (the fallback "
                    f"of epipolar.dpo.gray_images for OpenCV != {GRAY_OPENCV_MAJOR}), one host "
                    f"read each")
    config = {"features": {"backend": "torch-sift"}, "epipolar": {"features": "torch-sift"}}
    fn = batching.runner("reward-epipolar-dpo", config)
    counts = {}
    with batching.cuda_budgets(True):
        for b in (1, 8):
            videos = batching.grounded_batch(b, frames, (96, 128), "cpu")
            with DispatchCounter() as ops, OpenCVCounter() as cv:
                fn(videos)
            counts[b] = (ops.ops, ops.syncs, cv.by_name["SIFT_create.detectAndCompute"])
    assert counts[8][0] <= 1.5 * counts[1][0] and counts[8][1] == counts[1][1]
    assert [counts[b][2] for b in (1, 8)] == ([0, 0] if frames == 12 else [2, 16])


def test_foreground_planning_reads_the_host_twice_per_batch():
    """The foreground's pairs and flow crops of a batch of clips: the objects' presence of all
    clips in one host read, the crops' occupied lines in a second one (a copy and its NumPy
    view: the counter's three transfers), whatever the number of clips; each clip's track
    (pairs, crop) equals the one it gets alone."""
    from geocon_torch.config import ForegroundConfig
    from geocon_torch.io import read_clip
    from geocon_torch.sections.foreground import _plan, _plan_tracks, crop_margin

    cfg = ForegroundConfig()
    plans = []
    for k in range(3):
        frames = torch.zeros(5 + k, 3, 48, 64, dtype=torch.uint8)
        c = read_clip(frames, long_side=None)
        masks = torch.zeros(5 + k, 2, 48, 64, dtype=torch.bool)
        masks[1:, 0, 10 + k:30, 5:25 + 3 * k] = True  # object 0 from frame 1 on
        masks[0, 1, 30:40, 40:60] = True  # object 1 in frame 0 only
        plans.append(_plan(c, masks, cfg, None))
    counts = {}
    for n in (1, 3):
        with DispatchCounter() as cnt:
            tracks = _plan_tracks(plans[:n], cfg, None)
        counts[n] = cnt.transfer
    assert counts == {1: 3, 3: 3}
    for p, tr in zip(plans, tracks):
        alone = _plan_tracks([p], cfg, None)[0]
        assert tr.pairs.tolist() == alone.pairs.tolist() == list(range(int(p.masks.shape[0]) - 1))
        m = p.masks[tr.pairs].any(0).any(0)  # (H, W): every mask pixel of the scored frames
        ys, xs = m.any(1).nonzero()[:, 0], m.any(0).nonzero()[:, 0]
        r = crop_margin(p.clip.size)
        expected = (slice(max(0, int(ys[0]) - r), min(48, int(ys[-1]) + 1 + r)),
                    slice(max(0, int(xs[0]) - r), min(64, int(xs[-1]) + 1 + r)))
        assert tr.box == alone.box == expected
