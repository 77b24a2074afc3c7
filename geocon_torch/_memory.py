"""Give freed heap memory back to the operating system between pipeline stages.

glibc's allocator keeps memory freed by large short-lived temporaries (feature chunks, flow
pyramids, segmentation maps) in its arenas, so a process's resident size (RSS) stays near the
high-water mark of earlier stages although the tensors are gone: on an 800-frame 1024-px clip
the RSS before the foreground block was 1.7 GB with 0.37 GB of live tensors, and 0.94 GB after
``malloc_trim(0)``. :func:`release_freed_memory` calls it where a stage ends; it changes no
value, costs milliseconds, and does nothing on platforms without glibc.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import gc
import sys
from typing import Callable, Optional


@functools.lru_cache(maxsize=1)
def _malloc_trim() -> Optional[Callable[[int], int]]:
    """glibc's ``malloc_trim`` (None where there is no glibc: macOS, Windows, musl)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return None
    trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_freed_memory(collect: bool = False) -> bool:
    """Return the allocator's free pages to the OS; True when something was released.

    ``collect``: run Python's cycle collector first (tensors held only by reference cycles,
    e.g. a finished stage's dataclasses, are freed then rather than at some later
    allocation); costs tens of milliseconds, so it is meant for the ends of whole blocks."""
    if collect:
        gc.collect()
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
