"""Keypoints, descriptor matching, LK tracks and multi-scale correspondences.

Backends (``get_extractor(name, *, max_keypoints=2000, device=None, checkpoint=None)``; every one
returns padded :class:`~geocon_torch.types.Keypoints` ``xy (T, N, 2)`` px, ``descriptors
(T, N, D)``, ``scores (T, N)``, ``mask (T, N)``):

* ``torch-sift`` (default on CUDA): batched SIFT in torch with a fixed number of ops and two
  host syncs per call whatever the number of frames (``topk`` instead of ``nonzero``, fixed-step
  refinement, RootSIFT descriptors), no weights;
* ``kornia-sift``: kornia's scale-space SIFT, RootSIFT descriptors, batched over frames (chunks
  bound memory; its op and sync counts grow with the frames), no weights;
* ``opencv-sift`` (default on CPU; the parity backend of the WorldAtlas / GVGC protocols):
  ``cv2.SIFT_create(nfeatures=max_keypoints)`` per frame;
* ``disk``: kornia DISK from a local checkpoint only;
* ``lk-tracks``: :func:`lk_tracks`, Shi-Tomasi corners + pyramidal Lucas-Kanade with a
  forward-backward check, in torch (batched over pairs and points) or OpenCV;
* ``loftr`` / ``lightglue``: :func:`get_matcher`, learned pair matchers from a local checkpoint.

A learned backend without a usable local file raises :class:`~geocon_torch.errors.CheckpointError`;
nothing is ever downloaded.

Small frames: frames whose shorter side is below ``features.base.MIN_SIDE`` (16 px, the size
below which the multi-scale stage skips a scale) hold no keypoint. Every extractor returns
empty, valid Keypoints for them -- ``xy (T, 0, 2)``, ``descriptors (T, 0, D)`` with the
backend's width D, ``scores`` / ``mask (T, 0)`` -- without running its detector (a shape check,
no host sync), and :func:`lk_tracks` / :func:`shi_tomasi` return no tracks / corners; bad
shapes are still a ShapeError. Frames of at least 16 px are detected on as always.

Matching: :func:`match_descriptors` (Lowe ratio 0.75, optional mutual check) runs all pairs as
batched matmuls of exact squared L2 distances (chunked) and returns
:class:`~geocon_torch.types.Correspondences` with ``scores = 1 - ratio`` (higher is better;
PROSAC ordering).

Multi-scale: :func:`extract_correspondences(clip, pairs, config)` gives matches at scales
{1/4, 1/2, 1} of the working resolution in working-resolution pixels, either by detecting again
on shrunk frames (``scale_mode="pyramid"``, ``x = (x_s + 0.5) / s - 0.5``) or, for opencv-sift,
from the octave bands of one detection (``"scale_space"``, the ``auto`` choice); keypoints on
letterbox bars are dropped.

Conventions: pixels (x, y) with pixel centres at integers, at the clip's working resolution;
for a pair (i, j), x1 is in frame i and x2 in frame j.
"""
from .base import FeatureExtractor, available_extractors, compact_keypoints, get_extractor, \
    register_extractor
from .kornia_sift import KorniaSIFT
from .learned import DiskExtractor, LightGlueMatcher, LoFTRMatcher, get_matcher, load_checkpoint
from .lk import lk_tracks, min_eigenvalue_map, shi_tomasi
from .matching import match_descriptors, ratio_match
from .multiscale import extract_correspondences, to_working_pixels
from .opencv_sift import OpenCVSIFT
from .torch_sift import TorchSIFT

__all__ = [
    "FeatureExtractor", "get_extractor", "available_extractors", "register_extractor",
    "compact_keypoints", "KorniaSIFT", "TorchSIFT", "OpenCVSIFT", "DiskExtractor", "LoFTRMatcher",
    "LightGlueMatcher", "get_matcher", "load_checkpoint", "lk_tracks", "shi_tomasi",
    "min_eigenvalue_map", "match_descriptors", "ratio_match", "extract_correspondences",
    "to_working_pixels",
]
