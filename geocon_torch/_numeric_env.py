"""The numeric environment a result was computed in: what decides its last bits besides the
input, the config and the seed.

Scores are bit-identical across thread counts, worker counts, chunk sizes, hash seeds, locales
and bench ranks, and across AVX2 and AVX-512 machines, but not across every CPU class or library
build: OpenCV's SIFT rounds its float32 blur differently without AVX2 (a score moves by ~1e-4),
and torch's kernels differ by their SIMD level. Every scored result records
:func:`numeric_env` as ``result["numeric_env"]``; ``geocon merge`` ignores it when it compares
two rows (equal numbers from two machines are the same row) and names both environments in a
conflict whose rows were computed in different ones.
"""
from __future__ import annotations

import platform
from functools import lru_cache
from typing import Dict

import torch


def _opencv() -> Dict[str, str]:
    """OpenCV's version and the SIMD extensions its dispatcher may use on this machine (the
    ``*`` entries of ``cv2.getCPUFeaturesLine()`` not marked unavailable with ``?``, e.g. by
    ``OPENCV_CPU_DISABLE``); {} without OpenCV."""
    try:
        import cv2  # lazy: the record is taken once per process
    except ImportError:
        return {}
    line = cv2.getCPUFeaturesLine() if hasattr(cv2, "getCPUFeaturesLine") else ""
    usable = [t[1:] for t in line.split() if t.startswith("*") and not t.endswith("?")]
    return {"opencv": str(cv2.__version__), "opencv_cpu": " ".join(usable)}


@lru_cache(maxsize=1)
def _record() -> Dict[str, str]:
    cpu = torch.backends.cpu.get_cpu_capability() if hasattr(torch.backends, "cpu") else ""
    return {"machine": platform.machine(), "torch": str(torch.__version__),
            "torch_cpu": str(cpu), **_opencv()}


def numeric_env() -> Dict[str, str]:
    """``{"machine", "torch", "torch_cpu", "opencv", "opencv_cpu"}``: the CPU architecture
    (``platform.machine()``), torch's version and CPU capability (its SIMD level, e.g. "AVX2",
    "AVX512", "DEFAULT"), OpenCV's version and the SIMD extensions its dispatcher uses (e.g.
    "SSE4.1 SSE4.2 AVX FP16 AVX2 AVX512-SKX"); taken once per process, a fresh dict per call."""
    return dict(_record())


__all__ = ["numeric_env"]
