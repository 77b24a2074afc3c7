"""Progress of one clip on stderr: stage names, frame / pair counts and stage times.

``score_clip(..., progress=None)`` shows it when stderr is a terminal (``True`` forces it on,
``False`` off; the CLI's ``--no-progress`` passes ``False``). A :class:`Progress` is also the
stage timer every section receives (``timer(stage)`` is a context manager adding the stage's
wall time to ``times``), so a stage is announced and timed in one place::

    geocon vtest_120: read 120 frames (640 x 360) in 1.2 s
    geocon vtest_120: features 120 frames, 121 pairs ...
    geocon vtest_120: features done in 8.4 s
    geocon vtest_120: foreground 64/119 pairs

Every stage's end also hands the heap memory its temporaries freed back to the OS
(:func:`~geocon_torch._memory.release_freed_memory`), so the process's RSS follows the live
tensors from stage to stage instead of the largest stage's high-water mark.
"""
from __future__ import annotations

import sys
import time
from contextlib import contextmanager
from typing import Dict, Iterator, Optional, TextIO

from .._memory import release_freed_memory


def progress_enabled(progress: Optional[bool], stream: Optional[TextIO] = None) -> bool:
    """``progress`` itself when given, else whether ``stream`` (default stderr) is a terminal."""
    if progress is not None:
        return bool(progress)
    stream = stream if stream is not None else sys.stderr
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced stream
        return False


class Progress:
    """Stage timer with optional progress lines on ``stream`` (stderr by default).

    Args:
        name: the clip's name (prefix of every line).
        enabled: write lines (see :func:`progress_enabled`); the times are kept either way.
        stream: where lines go (None: ``sys.stderr`` at the time of writing).
    """

    def __init__(self, name: str = "", enabled: bool = False,
                 stream: Optional[TextIO] = None) -> None:
        self.name, self.enabled, self.stream = name, bool(enabled), stream
        self.times: Dict[str, float] = {}
        self.notes: Dict[str, str] = {}

    def say(self, text: str) -> None:
        """One line ``geocon <clip>: <text>`` (when enabled)."""
        if self.enabled:
            out = self.stream if self.stream is not None else sys.stderr
            print(f"geocon {self.name}: {text}", file=out, flush=True)

    def note(self, stage: str, what: str) -> None:
        """Say what the stage ``stage`` will work on (e.g. "120 frames, 121 pairs") when it
        starts; stages without a note are announced by name only."""
        self.notes[stage] = what

    def count(self, stage: str, done: int, total: int, unit: str) -> None:
        """``<stage> done/total unit`` (e.g. ``foreground 64/119 pairs``)."""
        self.say(f"{stage} {done}/{total} {unit}")

    @contextmanager
    def __call__(self, stage: str) -> Iterator[None]:
        extra = self.notes.pop(stage, None)
        self.say(f"{stage} {extra} ..." if extra else f"{stage} ...")
        t0 = time.perf_counter()
        try:
            yield
        finally:
            dt = time.perf_counter() - t0
            self.times[stage] = self.times.get(stage, 0.0) + dt
            release_freed_memory()  # the stage's temporaries are freed: RSS follows them
            self.say(f"{stage} done in {dt:.1f} s")
