"""Temporary torch / OpenCV thread counts that are safe to overlap across threads.

Some scoring steps run with fewer threads: the OpenCV-SIFT frame pool (torch and OpenCV at 1
thread: the pool replaces their per-image threads), Epipolar-DPO (torch at 1 thread beside the
pool) and the OpenCV reference path (``epipolar.opencv_threads``). The counts are process
settings, so a plain "save, set, put back" breaks when two calls overlap in different threads:
the second saves the first's temporary value and puts it back last, and the process keeps it
for good. :func:`thread_settings` is one guard for all of them, under a lock: the first entry
of the process records the user's values and the last exit puts them back; an entry made while
another is open never takes a temporary value for the user's. A count the caller changes
while a block is open (OpenCV's, or torch's count for new threads) is taken as the user's new
value and is what the last exit puts back (a change to the block's own value cannot be told
from the block's and is not kept).

What the settings are (torch with OpenMP, the CPU builds' default; OpenCV's pthreads / TBB):

* ``cv2.setNumThreads`` is process-wide: every thread's OpenCV calls use it.
* ``torch.set_num_threads(n)`` sets the calling thread's count and the count every *new* thread
  takes on its first torch op (and keeps for life); threads that already ran torch ops keep
  their own. So the guard sets and puts back the count in each thread that enters it (that
  thread's own count from before, or the process's when the thread started inside another
  thread's block and so began at the temporary count), and keeps the new-thread count at the
  temporary value while any block is open (the SIFT pool's workers start inside one) and at the
  user's value once none is.

What cannot be avoided: while a block is open, OpenCV runs at its count in every thread, and a
thread that starts then and never enters a block keeps the temporary torch count. A process
forked while another thread's block is open starts with the temporary counts; its next block
puts back the user's values recorded in the parent. Nothing numeric depends on any of these
counts.
"""
from __future__ import annotations

import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Dict, Iterator, List, Optional, Set, TypeVar

import torch

from .errors import InputError

T = TypeVar("T")


@dataclass(eq=False)
class _Entry:
    """One open :func:`thread_settings` block: its thread and the counts it asked for."""

    thread: int
    torch_threads: Optional[int]
    cv2_threads: Optional[int]


_LOCK = threading.Lock()
#: the open blocks of every thread, in the order they were entered
_OPEN: List[_Entry] = []
#: the user's values, recorded by the first entry while no block of that kind was open:
#: "torch" (the count new threads take) and "cv2"
_USER: Dict[str, int] = {}
#: kinds whose recorded user value stands while no block of that kind is open: in a forked child
#: whose other threads' blocks were dropped, the process still holds their temporary values
_INHERITED: Set[str] = set()
#: the value the guard itself last wrote, per kind: "torch" (the count new threads take) and
#: "cv2"; a different value found later was written by the caller and becomes the user's
_SET: Dict[str, int] = {}
#: per thread: ``restore``, its own torch count from before its outermost torch block
_LOCAL = threading.local()


def _in_new_thread(fn: Callable[[], T]) -> T:
    """``fn()`` run on a short-lived thread of its own (torch's count for new threads is read
    and written there without touching the calling thread's own count)."""
    out: List[T] = []
    worker = threading.Thread(target=lambda: out.append(fn()), name="geocon-thread-settings")
    worker.start()
    worker.join()
    return out[0]


def _check(name: str, value: Optional[int]) -> Optional[int]:
    """``value`` (None or an integer >= 1); InputError naming ``name`` otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be an integer >= 1 (or None: leave the count as it is), "
                         f"got {value!r}")
    return value


def _adopt_caller_change(kind: str, current: int) -> None:
    """While a block of ``kind`` is open: ``current``, the count found now, is the user's new
    value when it is not the one the guard last wrote (the caller set it meanwhile)."""
    if kind in _SET and current != _SET[kind]:
        _USER[kind] = current


def _set_new_threads(count: int) -> None:
    """Record ``count`` as the torch count for new threads that the guard wrote."""
    _SET["torch"] = count


def _record_torch(thread: int) -> None:
    """Before a torch block of ``thread`` opens: the user's count for new threads (when no
    torch block is open, or the caller's change while one is) and this thread's own count
    (at its outermost torch block)."""
    opened = [e for e in _OPEN if e.torch_threads is not None]
    if not opened and "torch" not in _INHERITED:
        _USER["torch"] = _in_new_thread(torch.get_num_threads)
    elif opened:
        _adopt_caller_change("torch", _in_new_thread(torch.get_num_threads))
    if not any(e.thread == thread for e in opened):
        mine = torch.get_num_threads()
        # a thread whose first torch op ran inside another thread's block began at that
        # block's count: that is not its user's value
        polluted = mine in [e.torch_threads for e in opened]
        _LOCAL.restore = _USER["torch"] if polluted else mine


def _record_cv2() -> None:
    """Before a cv2 block opens: the user's OpenCV count (when no cv2 block is open)."""
    import cv2  # lazy: OpenCV is needed only by the paths that ask for a count

    if not any(e.cv2_threads is not None for e in _OPEN) and "cv2" not in _INHERITED:
        _USER["cv2"] = cv2.getNumThreads()
    elif any(e.cv2_threads is not None for e in _OPEN):
        _adopt_caller_change("cv2", cv2.getNumThreads())


def _restore_torch(thread: int) -> None:
    """After a torch block of ``thread`` closed: this thread's count (its enclosing block's,
    or its own from before) and the count new threads take (the last open block's, or the
    user's once no torch block is open; a count the caller set meanwhile is the user's)."""
    _adopt_caller_change("torch", _in_new_thread(torch.get_num_threads))
    counts = [e.torch_threads for e in _OPEN if e.torch_threads is not None]
    own = [e.torch_threads for e in _OPEN if e.torch_threads is not None and e.thread == thread]
    target = own[-1] if own else _LOCAL.restore
    torch.set_num_threads(target)  # sets the count of new threads too
    new_threads = counts[-1] if counts else _USER["torch"]
    if not counts:
        _INHERITED.discard("torch")
    if new_threads != target:
        _in_new_thread(lambda: torch.set_num_threads(new_threads))
    _set_new_threads(new_threads)


def _restore_cv2() -> None:
    """After a cv2 block closed: OpenCV's count of the last open block, or the user's once no
    cv2 block is open; a count the caller set meanwhile is the user's)."""
    import cv2

    _adopt_caller_change("cv2", cv2.getNumThreads())
    counts = [e.cv2_threads for e in _OPEN if e.cv2_threads is not None]
    _SET["cv2"] = counts[-1] if counts else _USER["cv2"]
    cv2.setNumThreads(_SET["cv2"])
    if not counts:
        _INHERITED.discard("cv2")


@contextmanager
def thread_settings(torch_threads: Optional[int] = None,
                    cv2_threads: Optional[int] = None) -> Iterator[None]:
    """Run the block with torch at ``torch_threads`` threads in this thread (and in threads
    started inside it) and OpenCV at ``cv2_threads`` (process-wide); None leaves that count
    alone. Nested and overlapping blocks (any threads) put back the user's values when the last
    one ends (module docstring), also after an exception. Also usable as a decorator.

    Raises:
        InputError: a count that is not an integer >= 1.
    """
    torch_threads = _check("torch_threads", torch_threads)
    cv2_threads = _check("cv2_threads", cv2_threads)
    entry = _Entry(threading.get_ident(), torch_threads, cv2_threads)
    with _LOCK:
        if torch_threads is not None:  # every read before any write: a failure changes nothing
            _record_torch(entry.thread)
        if cv2_threads is not None:
            _record_cv2()
        _OPEN.append(entry)
        if torch_threads is not None:
            torch.set_num_threads(torch_threads)  # this thread's and new threads' count
            _set_new_threads(torch_threads)
        if cv2_threads is not None:
            import cv2

            cv2.setNumThreads(cv2_threads)
            _SET["cv2"] = cv2_threads
    try:
        yield
    finally:
        with _LOCK:
            _OPEN.remove(entry)
            if torch_threads is not None:
                _restore_torch(entry.thread)
            if cv2_threads is not None:
                _restore_cv2()


def _after_fork_in_child() -> None:
    """A forked child has only the forking thread: a fresh lock, and only its open blocks
    (the other threads' blocks never end there). Where that drops every block of a kind, the
    child's next block of that kind puts back the user's values recorded in the parent (nothing
    is set here: OpenCV's and torch's thread pools are not safe to resize in a fork handler)."""
    global _LOCK
    _LOCK = threading.Lock()
    mine = [e for e in _OPEN if e.thread == threading.get_ident()]
    for kind in ("torch", "cv2"):
        field = f"{kind}_threads"
        if (any(getattr(e, field) is not None for e in _OPEN)
                and not any(getattr(e, field) is not None for e in mine)):
            _INHERITED.add(kind)
    _OPEN[:] = mine


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


__all__ = ["thread_settings"]
