"""Scoring's temporary thread counts never stick: overlapping calls in several threads leave
torch's and OpenCV's thread counts at the user's values (audit s16 concurrency, finding 1).

Four places set torch's and / or OpenCV's thread count to 1 for a while (the SIFT frame pool,
Epipolar-DPO's ``one_torch_thread``, the OpenCV reference path's ``run_opencv``, and the
frozen-video measure of every decoded frame). Each saved the current value and put it back; when
two calls overlapped in different threads, the second saved the first's temporary 1 and put it
back last, so OpenCV (every thread) and torch (every thread started later) stayed at 1 thread
for good. The interleavings below are forced with events (no timing races): thread A enters,
a thread B started while A is inside enters too, A leaves first and B last."""
from __future__ import annotations

import os
import threading
from typing import Callable, Dict, List, Tuple

import numpy as np
import pytest
import torch

from geocon_torch.epipolar.dpo import one_torch_thread
from geocon_torch.io.sampling import (FrameMotion, SIZE_CHANGE_MAD, max_pair_sums, motion_record,
                                      pair_abs_diff_sums)

cv2 = pytest.importorskip("cv2")

#: the user's thread counts in these tests (neither the scoring's 1 nor this machine's default)
USER = 3
WAIT_S = 20.0


@pytest.fixture
def user_counts():
    """torch (this thread and new threads) and OpenCV at :data:`USER` threads; the suite's
    settings are put back afterwards."""
    before = torch.get_num_threads(), cv2.getNumThreads()
    torch.set_num_threads(USER)
    cv2.setNumThreads(USER)
    yield USER
    torch.set_num_threads(before[0])
    cv2.setNumThreads(before[1])


def _fresh_thread_torch() -> int:
    """torch's thread count in a thread started now (what a DataLoader thread would get)."""
    seen: List[int] = []
    worker = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    worker.start()
    worker.join()
    return seen[0]


def _overlap(call: Callable[[Callable[[], None]], None]) -> Dict[str, Tuple[int, int]]:
    """``call(body)`` in thread A and, while A's body waits, in a thread B started then; A
    leaves first, B last. Returns the (torch, cv2) counts each body saw (in the thread that ran
    it) and each caller thread's counts after its call."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen: Dict[str, Tuple[int, int]] = {}
    errors: List[BaseException] = []

    def counts() -> Tuple[int, int]:
        return torch.get_num_threads(), cv2.getNumThreads()

    def body_a() -> None:
        a_in.set()
        if not b_in.wait(WAIT_S):
            raise TimeoutError("B never entered")
        seen["a inside"] = counts()

    def body_b() -> None:
        b_in.set()
        if not a_out.wait(WAIT_S):
            raise TimeoutError("A never left")
        seen["b inside"] = counts()

    def caller(name: str, body: Callable[[], None], done: threading.Event) -> None:
        try:
            call(body)
            seen[f"{name} after"] = counts()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
            errors.append(exc)
        finally:
            done.set()

    a = threading.Thread(target=caller, args=("a", body_a, a_out))
    a.start()
    assert a_in.wait(WAIT_S)
    b = threading.Thread(target=caller, args=("b", body_b, threading.Event()))
    b.start()
    a.join(WAIT_S)
    b.join(WAIT_S)
    if errors:
        raise errors[0]
    return seen


def _sift_pool(body: Callable[[], None]) -> None:
    """``body`` as frame 0 of an OpenCV-SIFT pool map (frame 1 does nothing)."""
    from geocon_torch.features.opencv_sift import OpenCVSIFT

    OpenCVSIFT(workers=2).parallel_map(lambda k: body() if k == 0 else None, 2)


def test_overlapping_one_torch_thread_leaves_the_users_torch_threads(user_counts):
    def call(body):
        with one_torch_thread():
            body()

    seen = _overlap(call)
    assert seen["a inside"][0] == 1 and seen["b inside"][0] == 1  # as before the fix
    assert seen["a after"][0] == USER and seen["b after"][0] == USER
    assert torch.get_num_threads() == USER
    assert _fresh_thread_torch() == USER  # was 1 for good: B saved and put back A's 1


def test_overlapping_run_opencv_leaves_the_users_opencv_threads(user_counts):
    from geocon_torch.epipolar.opencv_path import run_opencv

    seen = _overlap(lambda body: run_opencv(body, 1, 0))
    assert seen["a inside"][1] == 1 and seen["b inside"][1] == 1
    assert cv2.getNumThreads() == USER  # was 1 for good
    assert torch.get_num_threads() == USER and _fresh_thread_torch() == USER


def test_overlapping_sift_pools_leave_both_counts(user_counts):
    seen = _overlap(_sift_pool)
    assert seen["a inside"] == (1, 1) and seen["b inside"] == (1, 1)  # the pool's workers
    assert seen["a after"] == (USER, 1)  # OpenCV's count is process-wide: B is still inside
    assert seen["b after"] == (USER, USER)
    assert (torch.get_num_threads(), cv2.getNumThreads()) == (USER, USER)
    assert _fresh_thread_torch() == USER


def test_overlap_keeps_a_threads_own_torch_count(user_counts):
    """A thread that set its own torch count before entering gets it back, while threads
    started afterwards get the process's."""
    from geocon_torch._thread_settings import thread_settings

    def call(body):
        torch.set_num_threads(2)  # this thread's own count (new threads then start at 2 too)
        with thread_settings(torch_threads=1):
            body()

    seen = _overlap(call)
    assert seen["a after"][0] == 2 and seen["b after"][0] == 2
    assert torch.get_num_threads() == USER
    assert _fresh_thread_torch() == 2  # the last value set by a user call, as torch does


def test_nested_settings_restore_each_level(user_counts):
    from geocon_torch._thread_settings import thread_settings

    with thread_settings(torch_threads=1, cv2_threads=1):
        assert (torch.get_num_threads(), cv2.getNumThreads()) == (1, 1)
        with thread_settings(cv2_threads=2):
            assert (torch.get_num_threads(), cv2.getNumThreads()) == (1, 2)
            with thread_settings(torch_threads=1):
                assert (torch.get_num_threads(), cv2.getNumThreads()) == (1, 2)
            assert (torch.get_num_threads(), cv2.getNumThreads()) == (1, 2)
        assert (torch.get_num_threads(), cv2.getNumThreads()) == (1, 1)
        assert _fresh_thread_torch() == 1  # the pool workers' count, as before
    assert (torch.get_num_threads(), cv2.getNumThreads()) == (USER, USER)
    assert _fresh_thread_torch() == USER


def test_an_exception_inside_restores(user_counts):
    from geocon_torch._thread_settings import thread_settings

    with pytest.raises(ZeroDivisionError, match="division by zero"):
        with thread_settings(torch_threads=1, cv2_threads=1):
            with one_torch_thread():
                1 / 0
    assert (torch.get_num_threads(), cv2.getNumThreads()) == (USER, USER)
    assert _fresh_thread_torch() == USER
    seen = _overlap(_sift_pool)  # nothing left open: the next overlap restores too
    assert seen["b after"] == (USER, USER) and cv2.getNumThreads() == USER


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_child_forked_inside_another_threads_block_restores(user_counts):
    """A DataLoader-style fork while thread A's block is open: the child's next block puts the
    user's counts back (A's block never ends in the child)."""
    from geocon_torch._thread_settings import thread_settings

    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with thread_settings(torch_threads=1, cv2_threads=1):
            inside.set()
            leave.wait(WAIT_S)

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(WAIT_S)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report, then leave at once (no pytest teardown)
        try:
            with thread_settings(torch_threads=1, cv2_threads=1):
                pass
            os.write(write, f"{cv2.getNumThreads()} {_fresh_thread_torch()}".encode())
        finally:
            os._exit(0)
    os.close(write)
    got = os.read(read, 64).decode()
    os.close(read)
    os.waitpid(pid, 0)
    leave.set()
    holder.join(WAIT_S)
    assert got == f"{USER} {USER}"
    assert (cv2.getNumThreads(), _fresh_thread_torch()) == (USER, USER)


def test_a_change_the_caller_makes_meanwhile_is_kept(user_counts):
    """The caller sets other counts while another thread's block is open (sideeffects audit
    s30 F4): the last exit keeps them (it put the values from before the block back: OpenCV 3
    instead of 5, torch's new threads 3 instead of 4)."""
    from geocon_torch._thread_settings import thread_settings

    inside, leave = threading.Event(), threading.Event()

    def hold() -> None:
        with thread_settings(torch_threads=1, cv2_threads=1):
            inside.set()
            leave.wait(WAIT_S)
            with thread_settings(torch_threads=2, cv2_threads=2):  # nested: adopts it too
                pass

    holder = threading.Thread(target=hold)
    holder.start()
    assert inside.wait(WAIT_S)
    cv2.setNumThreads(USER + 2)
    torch.set_num_threads(USER + 1)
    leave.set()
    holder.join(WAIT_S)
    assert cv2.getNumThreads() == USER + 2
    assert (torch.get_num_threads(), _fresh_thread_torch()) == (USER + 1, USER + 1)
    with thread_settings(torch_threads=1, cv2_threads=1):  # later blocks keep the new values
        pass
    assert (cv2.getNumThreads(), _fresh_thread_torch()) == (USER + 2, USER + 1)


def test_bad_counts_are_refused():
    from geocon_torch._thread_settings import thread_settings
    from geocon_torch.errors import InputError

    with pytest.raises(InputError, match="torch_threads must be an integer >= 1"):
        with thread_settings(torch_threads=0):
            pass


# ---- the frozen-video measure: no thread toggle, the same numbers ----------------------------

def _feed(frames: List[np.ndarray], kept: List[int], every=None) -> dict:
    motion = FrameMotion(every)
    for i, image in enumerate(frames):
        if i in kept or motion.wants(i):
            motion.add(i, image, kept=i in kept)
    return motion.record()


def _reference(frames: List[np.ndarray]) -> dict:
    """The tensor path's record (:func:`max_pair_sums`) of frames of one size."""
    if len(frames) < 2:
        return motion_record(None, 0, frames[0].size)
    clip = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2)[None]  # (1, n, 3, H, W)
    return motion_record(float(max_pair_sums(clip)[0]), len(frames) - 1, frames[0].size)


def _frames(seed: int, n: int, shape=(24, 32, 3), step: int = 255) -> List[np.ndarray]:
    """n uint8 RGB frames: a random first frame, then changes of at most ``step`` levels."""
    rng = np.random.default_rng(seed)
    out = [rng.integers(0, 256, shape, dtype=np.uint8)]
    for _ in range(n - 1):
        change = rng.integers(-step, step + 1, shape)
        out.append(np.clip(out[-1].astype(np.int64) + change, 0, 255).astype(np.uint8))
    return out


def test_frame_motion_leaves_torch_threads_alone(user_counts, monkeypatch):
    calls: List[int] = []
    monkeypatch.setattr(torch, "set_num_threads", calls.append)
    record = _feed(_frames(0, 4), kept=[0, 1, 2, 3], every=2)
    assert calls == []  # was [1, 3] per frame fed
    assert torch.get_num_threads() == USER
    assert record["pairs"] == 3 and record["sampled"]["pairs"] == 1


@pytest.mark.parametrize("seed, n, step", [(0, 6, 255), (1, 5, 3), (2, 7, 1), (3, 2, 0)])
def test_frame_motion_records_match_the_tensor_path(seed, n, step):
    frames = _frames(seed, n, step=step)
    assert _feed(frames, kept=list(range(n))) == _reference(frames)
    kept, sampled = list(range(0, n, 3)), list(range(0, n, 2))
    last = kept[-1]
    got = _feed(frames, kept=kept, every=2)
    want = dict(_reference([frames[i] for i in kept]),
                sampled=dict(_reference([frames[i] for i in sampled if i <= last]), every=2))
    assert got == want


def test_frame_motion_stills_and_size_changes():
    still = _frames(4, 1) * 3
    noisy = [still[0], np.clip(still[0].astype(np.int16) + 1, 0, 255).astype(np.uint8)]
    assert _feed(still, kept=[0, 1, 2]) == {"max_mad": 0.0, "pairs": 2, "frozen": True}
    assert _feed(noisy, kept=[0, 1]) == _reference(noisy)
    grown = still[:2] + _frames(5, 1, shape=(30, 32, 3))
    assert _feed(grown, kept=[0, 1, 2]) == {"max_mad": SIZE_CHANGE_MAD, "pairs": 2,
                                            "frozen": False}


def test_frame_motion_sums_are_exact_at_1080p():
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (1080, 1920, 3), dtype=np.uint8)
    for b in (rng.integers(0, 256, a.shape, dtype=np.uint8), 255 - a, a[:, ::-1]):
        want = float(pair_abs_diff_sums(torch.from_numpy(np.ascontiguousarray(b)).reshape(1080, -1),
                                        torch.from_numpy(a).reshape(1080, -1), frame_dims=2))
        got = _feed([a, b], kept=[0, 1])
        assert got["max_mad"] == want / a.size and got["pairs"] == 1
