"""benchmarks/gpu_check.sh: the one-command CUDA check (issue 14, item 5).

The default suite checks the script's structure (bash syntax, argument errors, every benchmark it
runs accepts ``--quick`` and ``--device``); the slow test runs ``--device cpu --quick`` end to end
and checks the JSON it writes (about 1.5 min on 2 cores)."""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import runpy
import subprocess
import sys

import pytest
import torch
from helpers import REPO_ROOT

ROOT = REPO_ROOT
SCRIPT = ROOT / "benchmarks" / "gpu_check.sh"
#: the benchmarks the script runs; pipeline.py is called with whatever flags its --help lists
BENCHMARKS = ("ransac", "features", "pipeline", "foreground", "reward", "learned_accuracy",
              "gate_sweep", "batching", "gpu_profile")
#: RESULT keys every benchmark's quick CPU run must report
EXPECTED = {
    "ransac": {"h_ratio_vs_opencv", "f_ratio_vs_opencv", "h_pairs_per_s", "f_pairs_per_s"},
    "features": {"opencv_sift_fps_320x192", "kornia_sift_fps_320x192", "kornia_vs_opencv_320x192",
                 "lk_torch_vs_opencv_320x192", "skipped"},
    "pipeline": {"fps", "opencv_fps", "ratio_vs_opencv", "worst_over_median", "worst_clip",
                 "user_over_system"},
    "foreground": {"object_pairs_per_s", "flow_pairs_per_s"},
    "reward": {"ratio_vs_reference", "videos_per_s", "reference_videos_per_s"},
    "learned_accuracy": {"backends", "skipped"},
    "gate_sweep": {"statistic", "rule_accuracy"},
    "batching": {"paths", "ops_growth", "targets_met", "frames_per_s"},
    "gpu_profile": {"variants", "best", "ratio_vs_reference", "stages"},
}
LEARNED = ("xfeat", "xfeat-lighterglue", "aliked-lightglue", "disk-lightglue")
#: benchmarks/*.py that are not device benchmarks (the script does not run them)
NOT_DEVICE = ("calibrate_default",  # regenerates the shipped calibration (CPU, ~30 min)
              "calibration_heldout",  # the calibration on a held-out family (CPU, ~30 min)
              "_dispatch_count",  # the op / sync counters batching.py imports
              "leaderboard",  # store / scheduling throughput (CPU, PostgreSQL server)
              "human_ratings", "score_curves")  # external rated data; CPU accuracy curves


def run_script(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout)


def test_script_syntax_and_benchmark_list():
    assert subprocess.run(["bash", "-n", str(SCRIPT)]).returncode == 0
    run = set(re.findall(r"benchmarks/(\w+)\.py", SCRIPT.read_text()))
    assert run == set(BENCHMARKS)
    on_disk = {p.stem for p in (ROOT / "benchmarks").glob("*.py")} - set(NOT_DEVICE)
    assert on_disk <= run, f"benchmarks not run by gpu_check.sh: {on_disk - run}"


def test_bad_arguments_exit_2():
    assert run_script("--bogus").returncode == 2
    res = run_script("--device", "tpu")
    assert res.returncode == 2 and "--device must be cpu or cuda" in res.stderr
    assert run_script("--help").returncode == 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU message")
def test_cuda_without_gpu_says_so(tmp_path):
    res = run_script("--out", str(tmp_path / "x.json"))
    assert res.returncode == 2 and "no CUDA device" in res.stderr


FAKE_PYTHON = """#!/usr/bin/env bash
# stands in for python: canned pytest / benchmark output, foreground.py fails; the rest is real
case "$*" in
  *benchmarks/foreground.py*) echo boom >&2; exit 1 ;;
  *benchmarks/pipeline.py*--help*) echo "usage: pipeline.py [--device DEVICE] [--quick]" ;;
  *benchmarks/*.py*) name="$(sed -E 's#.*benchmarks/([a-z_]+)[.]py.*#\\1#' <<< "$*")"
                     echo "some table"
                     echo "RESULT {\\"name\\": \\"$name\\", \\"args\\": \\"$*\\"}" ;;
  "-m pytest"*) echo "3 skipped, 10 deselected in 0.5s" ;;
  *) exec REAL "$@" ;;
esac
"""


def test_collects_results_and_fails_on_a_failed_benchmark(tmp_path):
    """With a stand-in python (no real benchmark runs): every RESULT line lands in the JSON, the
    flags reach each benchmark (pipeline.py: those its --help lists), a failing benchmark makes
    the script exit 1 and is listed under ``failed``."""
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON.replace("REAL", sys.executable))
    fake.chmod(0o755)
    out = tmp_path / "o" / "gpu_check.json"
    res = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--quick", "--out", str(out)],
                         cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={**os.environ, "PYTHON": str(fake)})
    assert res.returncode == 1, res.stdout + res.stderr
    report = json.loads(out.read_text())
    assert report["failed"] == ["foreground"] and not report["ok"]
    assert report["steps"]["foreground"]["error"] == "exit status 1"
    assert report["steps"]["tests"]["ok"] and report["steps"]["tests"]["skipped"] == 3
    for name in BENCHMARKS:
        if name != "foreground":
            result = report["steps"][name]["result"]
            assert result["name"] == name and "--device cpu --quick" in result["args"], result
    assert "FAILED" in res.stdout and (out.parent / "gpu_check_logs" / "ransac.log").is_file()


@pytest.mark.parametrize("name", BENCHMARKS)
def test_benchmark_accepts_quick_and_device(name, monkeypatch):
    """``--help`` of every benchmark (run in-process: argparse exits before any work) lists
    ``--quick`` and ``--device``."""
    path = ROOT / "benchmarks" / f"{name}.py"
    monkeypatch.setattr(sys, "argv", [str(path), "--help"])
    monkeypatch.setattr(sys, "path", list(sys.path))  # some scripts prepend to sys.path
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(path), run_name="__main__")
    assert exit_info.value.code == 0
    assert "--quick" in out.getvalue() and "--device" in out.getvalue()


@pytest.mark.slow
def test_quick_cpu_run_writes_every_result(tmp_path):
    out = tmp_path / "gpu_check.json"
    res = run_script("--device", "cpu", "--quick", "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "gpu_check summary" in res.stdout
    report = json.loads(out.read_text())
    assert report["ok"] and report["failed"] == [] and report["device"] == "cpu"
    assert report["quick"] is True and report["wall_s"] < 270
    steps = report["steps"]
    assert set(steps) == {"tests", *BENCHMARKS}
    assert steps["tests"]["ok"] and steps["tests"].get("failed", 0) == 0
    for name in BENCHMARKS:
        result = steps[name]["result"]
        assert steps[name]["ok"] and steps[name]["rc"] == 0, name
        assert EXPECTED[name] <= set(result), (name, EXPECTED[name] - set(result))
    features, accuracy = steps["features"]["result"], steps["learned_accuracy"]["result"]
    for backend in LEARNED:  # each learned backend is timed or skipped with its reason
        stem = backend.replace("-", "_")
        assert (f"{stem}_vs_opencv_320x192" in features) != (backend in features["skipped"])
        assert (backend in accuracy["backends"]) != (backend in accuracy["skipped"])
