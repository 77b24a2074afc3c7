"""The built distributions (packaging audit s23): the wheel holds exactly the package's tracked
files and the shipped calibrations (the calibrated verdict reads them), the sdist every tracked
file a test run needs, and the build prints no setuptools warning about package data."""
from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import tarfile
import zipfile

import pytest
from helpers import REPO_ROOT

from geocon_torch import __version__

#: tracked files that stay out of the sdist (CI scripts, VCS settings)
NOT_SHIPPED = {".ci/run", ".gitignore"}


def _tracked() -> list:
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        pytest.skip("not a git checkout: the tracked files are unknown")
    out = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True,
                         check=True).stdout.decode()
    return [p for p in out.split("\0") if p and (REPO_ROOT / p).is_file()]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """(tracked files, sdist members, wheel members, wheel path, build log) of a build from a
    copy of the tracked files (the checkout itself gets no build folders)."""
    files = _tracked()
    if not any(importlib.util.find_spec(m) for m in ("setuptools.command.bdist_wheel", "wheel")):
        pytest.skip("setuptools < 70.1 without the wheel package: no wheel can be built here")
    src = tmp_path_factory.mktemp("src")
    for rel in files:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, src / rel)
    dist = src / "dist"
    logs = [subprocess.run(cmd, cwd=src, capture_output=True, text=True, check=True)
            for cmd in ([sys.executable, "setup.py", "sdist", "-d", str(dist)],
                        [sys.executable, "-m", "pip", "wheel", "-v", "--no-deps",
                         "--no-build-isolation", "-w", str(dist), "."])]
    sdist = dist / f"geocon_torch-{__version__}.tar.gz"
    wheel = dist / f"geocon_torch-{__version__}-py3-none-any.whl"
    with tarfile.open(sdist) as tf:
        prefix = f"geocon_torch-{__version__}/"
        in_sdist = {m.name[len(prefix):] for m in tf.getmembers() if m.isfile()}
    with zipfile.ZipFile(wheel) as zf:
        in_wheel = set(zf.namelist())
    return files, in_sdist, in_wheel, wheel, "".join(r.stdout + r.stderr for r in logs)


def test_the_wheel_holds_the_package_and_its_calibrations(built):
    files, _, in_wheel, wheel, _ = built
    package = {p for p in files if p.startswith("geocon_torch/")}
    assert {p for p in in_wheel if not p.startswith("geocon_torch-")} == package
    calibrations = sorted(p for p in package if p.startswith("geocon_torch/data/calibration/"))
    assert calibrations == ["geocon_torch/data/calibration/kornia-sift.json",
                            "geocon_torch/data/calibration/opencv-sift.json"]
    with zipfile.ZipFile(wheel) as zf:
        for rel in calibrations:
            assert zf.read(rel) == (REPO_ROOT / rel).read_bytes()


def test_the_sdist_holds_every_tracked_file_a_test_run_reads(built):
    files, in_sdist, _, _, _ = built
    generated = {p for p in in_sdist if p == "PKG-INFO" or p == "setup.cfg"
                 or p.startswith("geocon_torch.egg-info/")}
    assert in_sdist - generated == set(files) - NOT_SHIPPED
    assert {"tests/conftest.py", "tests/helpers.py", "pytest.ini"} <= in_sdist


def test_the_build_prints_no_package_data_warning(built):
    log = built[4]
    assert "would be ignored" not in log and "SetuptoolsDeprecationWarning" not in log, log
