"""The SIFT frame pool's memory (cost audit s33 F2): OpenCV SIFT holds ~220 bytes per pixel of
a detection, so a pool of W workers held W x that (2048 x 1152 frames: 1.4 / 2.1 / 3.2 / 5.4 GB
at 1 / 2 / 4 / 8 workers). Detections in flight now share one process-wide byte budget
(``features.opencv_sift.DETECTION_BUDGET``); results do not depend on it."""
from __future__ import annotations

import threading
import time

import pytest
import torch

from geocon_torch.features import opencv_sift
from geocon_torch.features.opencv_sift import DetectionBudget, OpenCVSIFT

pytest.importorskip("cv2")


def _run(budget: DetectionBudget, sizes) -> int:
    """The most bytes held at once by threads holding ``sizes`` for 20 ms each."""
    peak, lock = [0], threading.Lock()

    def work(n: int) -> None:
        with budget.hold(n):
            with lock:
                peak[0] = max(peak[0], budget.used)
            time.sleep(0.02)

    threads = [threading.Thread(target=work, args=(n,)) for n in sizes]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert budget.used == 0
    return peak[0]


def test_the_budget_bounds_what_runs_at_once():
    assert _run(DetectionBudget(100), [40] * 8) == 80  # two at a time
    assert _run(DetectionBudget(100), [30] * 6) == 90  # three
    # a detection over the whole budget runs alone (counted as the whole budget)
    assert _run(DetectionBudget(100), [250, 250]) == 100
    assert _run(DetectionBudget(10 ** 9), [40] * 8) == 320  # all at once


def test_detections_are_the_same_under_any_budget(monkeypatch):
    g = torch.Generator().manual_seed(0)
    frames = (torch.rand(6, 96, 128, generator=g) * 255).round().to(torch.uint8).numpy()
    sift = OpenCVSIFT(max_keypoints=300, workers=3)
    free = sift.extract_many(6, lambda k: [frames[k]], [None])[0]
    tight = DetectionBudget(opencv_sift.SIFT_BYTES_PER_PIXEL * 96 * 128)  # one at a time
    monkeypatch.setattr(opencv_sift, "DETECTION_BUDGET", tight)
    held = []
    real = tight.hold

    def spy(n):
        held.append(n)
        return real(n)

    monkeypatch.setattr(tight, "hold", spy)
    one = sift.extract_many(6, lambda k: [frames[k]], [None])[0]
    assert held == [opencv_sift.SIFT_BYTES_PER_PIXEL * 96 * 128] * 6 and tight.used == 0
    assert torch.equal(one.xy, free.xy) and torch.equal(one.descriptors, free.descriptors)
    assert torch.equal(one.mask, free.mask) and int(free.mask.sum()) > 100
