"""Scoring computes in the dtypes it was written for, whatever autocast its caller has on.

A training step usually runs under ``torch.autocast``; left on, it would turn the geometry's
matrix products into bfloat16 / float16 (the background GE x5 under bfloat16, no matches at all
under float16) and break the float32 / float64 checks of the solvers. Every public entry point
that scores (``score_clip`` / ``score_clips``, ``geometric_reward``, the functional metrics and
the Metric classes' ``update``, the robust estimators) runs with autocast off on the device
types where the caller had it on; inside, parts that choose a lower precision on purpose (SAM-2
under bfloat16) turn it on again themselves. Autograd is unaffected.
"""
from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable, TypeVar

import torch

#: device types whose autocast state is turned off around scoring
AUTOCAST_DEVICES = ("cpu", "cuda")
F = TypeVar("F", bound=Callable[..., Any])


def autocast_enabled(device_type: str) -> bool:
    """Whether autocast is on for ``device_type`` ("cpu" / "cuda"), on every torch the package
    supports (``torch.is_autocast_enabled(device_type)`` exists from torch 2.4)."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4: one flag per device type
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return bool(torch.is_autocast_enabled())


def autocast_off(fn: F) -> F:
    """``fn`` run with ``torch.autocast(device_type, enabled=False)`` for each device type of
    :data:`AUTOCAST_DEVICES` whose autocast is on (nothing entered when none is: the common
    case costs two flag reads)."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        on = [d for d in AUTOCAST_DEVICES if autocast_enabled(d)]
        if not on:
            return fn(*args, **kwargs)
        with contextlib.ExitStack() as stack:
            for device_type in on:
                stack.enter_context(torch.autocast(device_type, enabled=False))
            return fn(*args, **kwargs)

    return wrapper  # type: ignore[return-value]


__all__ = ["AUTOCAST_DEVICES", "autocast_enabled", "autocast_off"]
