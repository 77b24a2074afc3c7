"""Every scored result records the numeric environment that decides its last bits
(``result["numeric_env"]``: CPU architecture, torch and OpenCV versions and SIMD levels), and
``geocon merge`` reads it: rows equal but for it are the same row, rows that differ and were
computed in different environments say so in the conflict (determinism audit F1: OpenCV's SIFT
without AVX2 moved a score by ~1e-4 under the same content and config hashes)."""
from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import cv2
import torch
from helpers import _clip, fake_result

from geocon_torch import score_clip
from geocon_torch._numeric_env import numeric_env
from geocon_torch.bench import ResultStore, merge_stores

AVX2 = {"machine": "x86_64", "torch": "2.14.1", "torch_cpu": "AVX2", "opencv": "5.1.0",
        "opencv_cpu": "SSE4.1 SSE4.2 AVX FP16 AVX2"}
SSE4 = dict(AVX2, torch_cpu="DEFAULT", opencv_cpu="SSE4.1 SSE4.2")


def test_the_record_names_this_machine_and_these_builds():
    env = numeric_env()
    assert env["machine"] == platform.machine() and env["torch"] == torch.__version__
    assert env["torch_cpu"] == torch.backends.cpu.get_cpu_capability()
    assert env["opencv"] == cv2.__version__
    line = cv2.getCPUFeaturesLine().split()
    assert env["opencv_cpu"].split() == [t[1:] for t in line if t[0] == "*" and t[-1] != "?"]
    env["machine"] = "changed"  # a fresh dict per call
    assert numeric_env()["machine"] == platform.machine()


def test_opencv_without_avx2_is_another_environment():
    """OPENCV_CPU_DISABLE=AVX2 (what a CPU without AVX2 runs) leaves AVX2 out of the record."""
    if "AVX2" not in numeric_env()["opencv_cpu"].split():
        return  # nothing to disable on this CPU: the record already says so
    code = "from geocon_torch._numeric_env import numeric_env; print(numeric_env()['opencv_cpu'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=dict(os.environ, OPENCV_CPU_DISABLE="AVX2"), timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = out.stdout.split()
    assert "AVX2" not in got and set(got) < set(numeric_env()["opencv_cpu"].split())


def test_a_scored_result_records_it():
    frames = torch.randint(0, 255, (3, 3, 64, 96), dtype=torch.uint8)
    res = score_clip(frames, preset="background", progress=False).to_dict()
    assert res["numeric_env"] == numeric_env()
    assert json.loads(json.dumps(res))["numeric_env"] == numeric_env()


def _shard(path: Path, env: dict, ge: float) -> Path:
    result = dict(fake_result("x", ge=ge), numeric_env=env)
    with ResultStore(path) as s:
        s.put(_clip("x"), "h", "cfg", result)
    return path


def test_merge_ignores_the_environment_of_equal_rows_and_names_it_in_a_conflict(tmp_path):
    out = str(tmp_path / "out.sqlite")
    assert merge_stores(out, [_shard(tmp_path / "a.sqlite", AVX2, 1.0)]).results_added == 1
    same = merge_stores(out, [_shard(tmp_path / "b.sqlite", SSE4, 1.0)])
    assert (same.results_same, same.conflicts) == (1, [])
    moved = merge_stores(out, [_shard(tmp_path / "c.sqlite", SSE4, 1.0001)])
    (conflict,) = moved.conflicts
    assert conflict["numeric_env"] == [AVX2, SSE4]
    assert "numeric environments" in conflict["hint"]
    assert "numeric_env" not in conflict["differences"]
    assert conflict["differences"]["background.ge_px"] == [1.0, 1.0001]
    twin = merge_stores(out, [_shard(tmp_path / "d.sqlite", AVX2, 1.0001)])
    (conflict,) = twin.conflicts  # the same environment: no environment named, no hint
    assert "numeric_env" not in conflict and "hint" not in conflict
