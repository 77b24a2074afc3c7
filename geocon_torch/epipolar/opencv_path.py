"""OpenCV reference path of the WorldAtlas protocol (CPU, one pair at a time, parity reference).

Per stage and pair: ``cv2.SIFT_create(nfeatures)`` on the analysis-resolution grayscale frames,
``cv2.BFMatcher(NORM_L2).knnMatch(k=2)`` + Lowe ratio, ``cv2.findFundamentalMat`` with
``cv2.USAC_MAGSAC`` at ``epipolar.ransac.threshold_px`` (``confidence``, ``max_iterations`` as
maxIters); the LK stage uses ``cv2.goodFeaturesToTrack`` + ``cv2.calcOpticalFlowPyrLK`` with a
forward-backward check (``features.lk_tracks(backend="opencv")``, settings ``epipolar.tracking``)
and the patch-NCC guard (``cv2.remap`` patches, ``features.lk.zncc`` / ``protocol.tracking_guard``).
The Sampson distances are :func:`geocon_torch.geometry.sampson_distance` (px, not squared).
"""
from __future__ import annotations

import threading
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, TypeVar

import cv2
import numpy as np
import torch

from .._thread_settings import thread_settings
from ..config import RESIZE_INTERPOLATION_CHOICES, EpipolarConfig
from ..errors import InputError
from ..features import lk_tracks
from ..features.lk import ncc_offsets, zncc
from ..geometry import sampson_distance
from ..io.pairs import held_of
from ..types import Clip
from .protocol import (PairMeasurements, Stage, TrackingGuard, analysis_size, clip_info,
                       clip_pairs, distinct_correspondences, enough_matches, run_protocol,
                       tracking_guard)

T = TypeVar("T")

_INTERPOLATION = dict(zip(RESIZE_INTERPOLATION_CHOICES, (cv2.INTER_AREA, cv2.INTER_LINEAR)))


def interpolation_flag(name: str) -> int:
    """cv2 interpolation flag of ``EpipolarConfig.resize_interpolation``."""
    try:
        return _INTERPOLATION[name]
    except KeyError:
        raise InputError(f"resize_interpolation must be one of {RESIZE_INTERPOLATION_CHOICES}, "
                         f"got {name!r}") from None


def run_opencv(work: Callable[[], T], threads: int, seed: int) -> T:
    """``work()`` with cv2's thread count fixed and cv2's RNG seeded with ``seed`` (the FLANN
    matcher draws from it), for a deterministic run. The count is set by a
    :func:`~geocon_torch._thread_settings.thread_settings` block (process-wide while it runs;
    the user's count comes back when the last of several overlapping calls ends). cv2's RNG is per
    thread and Python cannot read it back, so ``work`` runs on a thread of its own (a daemon:
    Ctrl-C reaches the caller at once and never waits for it at exit): the caller's cv2 RNG
    stream goes on as if nothing had run (a training loop's OpenCV augmentations do not
    restart from one state at every metric update). An exception of ``work`` is re-raised in
    the caller as it was. ``work`` must not rely on the caller's torch thread-local state
    (grad mode, autocast): these paths compute in NumPy / OpenCV."""
    out: List[Any] = []

    def seeded() -> None:
        try:
            cv2.setRNGSeed(int(seed))
            out.append((True, work()))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            out.append((False, exc))

    with thread_settings(cv2_threads=max(int(threads), 1)):
        worker = threading.Thread(target=seeded, name="geocon-opencv", daemon=True)
        worker.start()
        worker.join()
    done, value = out[0]
    if not done:
        raise value
    return value


def clip_frame_rgb(clip: Clip, index: int) -> np.ndarray:
    """(H, W, 3) uint8 RGB numpy copy of one frame of the clip (any device)."""
    return clip.frames[index].permute(1, 2, 0).contiguous().cpu().numpy()


def analysis_gray(frame_rgb: np.ndarray, config: EpipolarConfig) -> np.ndarray:
    """RGB uint8 frame -> grayscale (cv2.COLOR_RGB2GRAY) -> width <= max_width (aspect kept)."""
    gray = cv2.cvtColor(frame_rgb, cv2.COLOR_RGB2GRAY)
    h, w = analysis_size(gray.shape[0], gray.shape[1], int(config.max_width))
    if (h, w) != gray.shape[:2]:
        gray = cv2.resize(gray, (w, h),
                          interpolation=interpolation_flag(config.resize_interpolation))
    return gray


def sampson_stats(F: np.ndarray, p1: np.ndarray, p2: np.ndarray) -> Tuple[float, float]:
    """(median, mean) Sampson distance in px of the (N, 2) points under F (float64)."""
    d = sampson_distance(torch.from_numpy(np.asarray(F, np.float64))[None],
                         torch.from_numpy(p1.astype(np.float64))[None],
                         torch.from_numpy(p2.astype(np.float64))[None])[0].numpy()
    return float(np.median(d)), float(np.mean(d))


class _ClipState:
    """Grayscale frames and SIFT features of one clip, computed once and shared by stages."""

    def __init__(self, clip: Clip, pairs: np.ndarray, config: EpipolarConfig):
        self.config = config
        self.pairs = pairs
        self.gray: Dict[int, np.ndarray] = {
            int(i): analysis_gray(clip_frame_rgb(clip, int(i)), config) for i in np.unique(pairs)}
        self._sift: Dict[int, Tuple[list, Optional[np.ndarray]]] = {}

    def sift(self, index: int) -> Tuple[list, Optional[np.ndarray]]:
        if index not in self._sift:
            detector = cv2.SIFT_create(nfeatures=int(self.config.sift_features))
            kps, des = detector.detectAndCompute(self.gray[index], None)
            self._sift[index] = (list(kps or []), des)
        return self._sift[index]


def _match(state: _ClipState, i: int, j: int, ratio: float
           ) -> Tuple[int, int, np.ndarray, np.ndarray]:
    kp1, d1 = state.sift(i)
    kp2, d2 = state.sift(j)
    if d1 is None or d2 is None or len(kp1) == 0 or len(kp2) == 0:
        return len(kp1), len(kp2), np.zeros((0, 2), np.float32), np.zeros((0, 2), np.float32)
    p1, p2 = ratio_matches(kp1, d1, kp2, d2, ratio)
    return len(kp1), len(kp2), p1, p2


def ratio_matches(kp1, d1, kp2, d2, ratio: float, matcher=None) -> Tuple[np.ndarray, np.ndarray]:
    """OpenCV 2-NN matching with Lowe's ratio test (``d_1 < ratio d_2``, L2) of two frames'
    keypoints / descriptors -> matched positions (M, 2) float32 in frame i and in frame j."""
    matcher = matcher or cv2.BFMatcher(cv2.NORM_L2, crossCheck=False)
    knn = matcher.knnMatch(d1, d2, k=2)
    good = [m[0] for m in knn if len(m) == 2 and m[0].distance < ratio * m[1].distance]
    p1 = np.asarray([kp1[m.queryIdx].pt for m in good], np.float32).reshape(-1, 2)
    p2 = np.asarray([kp2[m.trainIdx].pt for m in good], np.float32).reshape(-1, 2)
    return p1, p2


def patch_ncc_opencv(gray_i: np.ndarray, gray_j: np.ndarray, x1: np.ndarray, x2: np.ndarray,
                     window: int) -> np.ndarray:
    """(N,) zero-mean NCC of the ``window``-square patches around x1 (N, 2) in frame i and x2 in
    frame j: bilinear ``cv2.remap`` samples (border replicated) of the float frames."""
    off = ncc_offsets(window)
    patches = []
    for img, pts in ((gray_i, x1), (gray_j, x2)):
        pts = np.asarray(pts, np.float32).reshape(-1, 2)
        if len(pts) == 0:
            return np.zeros(0)
        mx = pts[:, :1] + off[None, :, 0]
        my = pts[:, 1:] + off[None, :, 1]
        patches.append(cv2.remap(img.astype(np.float32), mx, my, cv2.INTER_LINEAR,
                                 borderMode=cv2.BORDER_REPLICATE))
    return zncc(torch.from_numpy(patches[0]), torch.from_numpy(patches[1])).numpy()


def _tracks(state: _ClipState, stage: Stage
            ) -> Tuple[List[Tuple[int, np.ndarray, np.ndarray]], TrackingGuard]:
    """Per pair: (corners in frame i, x1, x2) of the Shi-Tomasi + pyramidal LK tracks
    (``features.lk_tracks``, OpenCV backend) that pass the forward-backward check and the
    patch-NCC guard (``protocol.tracking_guard``), and the guard's per-pair report."""
    c = state.config
    used = sorted(state.gray)
    gray = torch.from_numpy(np.stack([state.gray[f] for f in used])[:, None]).float() / 255.0
    local = {f: k for k, f in enumerate(used)}
    pairs = torch.tensor([[local[i], local[j]] for i, j in state.pairs.tolist()],
                         dtype=torch.long).reshape(-1, 2)
    corr = lk_tracks(gray, pairs, **c.tracking.lk_kwargs(c.sift_features, "opencv"))
    ncc = torch.zeros(corr.mask.shape, dtype=torch.float64)
    for p, (i, j) in enumerate(pairs.tolist()):
        ncc[p] = torch.from_numpy(patch_ncc_opencv(gray[i, 0].numpy(), gray[j, 0].numpy(),
                                                   corr.x1[p].numpy(), corr.x2[p].numpy(),
                                                   int(c.tracking.ncc_window)))
    guard = tracking_guard(corr.mask, corr.scores, ncc, stage, c)
    out = [(int(corr.num_kp1[p]), corr.x1[p][guard.kept[p]].numpy().astype(np.float32),
            corr.x2[p][guard.kept[p]].numpy().astype(np.float32)) for p in range(len(pairs))]
    return out, guard


def _fundamental(p1: np.ndarray, p2: np.ndarray, rc: Any) -> Tuple[Any, Any]:
    """``cv2.findFundamentalMat`` with USAC_MAGSAC (the reference's estimator) at
    ``rc.threshold_px`` / ``confidence`` / ``max_iterations``; where it raises (OpenCV 5.1's
    USAC asserts ``!model.empty()`` on near-still pairs: 1098 matches moving 0.02 px), the
    same fit with FM_RANSAC, so an estimator failure is not taken for a pair without data
    (it sent such clips down the fallback chain). Raises cv2.error when both fail."""
    args = dict(ransacReprojThreshold=float(rc.threshold_px), confidence=float(rc.confidence),
                maxIters=int(rc.max_iterations))
    try:
        return cv2.findFundamentalMat(p1, p2, method=cv2.USAC_MAGSAC, **args)
    except cv2.error:
        return cv2.findFundamentalMat(p1, p2, method=cv2.FM_RANSAC, **args)


def _measure_clip(state: _ClipState, stage: Stage) -> PairMeasurements:
    c = state.config
    P = len(state.pairs)
    kp_l, kp_r, matches, inliers, d_matches, d_inliers = (np.zeros(P, np.int64)
                                                          for _ in range(6))
    fitted = np.zeros(P, bool)
    med, mean = np.zeros(P), np.zeros(P)
    notes: List[Optional[str]] = [None] * P
    extra: Dict[str, np.ndarray] = {}
    tracks = None
    if not stage.uses_descriptors:
        tracks, guard = _tracks(state, stage)
        extra, notes = guard.extra, list(guard.notes)
    for p, (i, j) in enumerate(state.pairs.tolist()):
        if tracks is None:
            kp_l[p], kp_r[p], p1, p2 = _match(state, i, j, float(stage.ratio))
        else:
            corners, p1, p2 = tracks[p]
            kp_l[p] = kp_r[p] = corners  # coverage counts against detected corners
        matches[p] = len(p1)
        d_matches[p] = distinct_correspondences(p1, p2)
        if not enough_matches(matches[p], stage):
            continue
        try:
            F, mask = _fundamental(p1, p2, c.ransac)
        except cv2.error as exc:
            notes[p] = f"fundamental matrix estimation error: {str(exc).strip()[:200]}"
            continue
        if F is None or mask is None or F.shape[0] < 3:
            continue
        F = F[:3, :3]
        inl = mask.reshape(-1).astype(bool)
        fitted[p] = True
        inliers[p] = int(inl.sum())
        d_inliers[p] = distinct_correspondences(p1[inl], p2[inl])
        if inliers[p] > 0:
            med[p], mean[p] = sampson_stats(F, p1[inl], p2[inl])
    return PairMeasurements(state.pairs, kp_l, kp_r, matches, fitted, inliers, med, mean,
                            notes, extra, d_matches, d_inliers)


def opencv_sections(clips: Sequence[Clip], config: EpipolarConfig,
                    explicit: Optional[Sequence] = None) -> List[Dict]:
    """WorldAtlas sections of several clips through the OpenCV reference path; ``explicit``:
    optional per-clip (P, 2) pairs replacing the protocol's pair selection."""
    pairs = [clip_pairs(c.num_frames, config, None if explicit is None else explicit[k],
                        held_of(c)) for k, c in enumerate(clips)]
    infos = [clip_info(clip, pr, config, implementation="opencv", features="opencv-sift")
             for clip, pr in zip(clips, pairs)]
    def work() -> List[Dict]:
        states = {k: _ClipState(c, p, config) for k, (c, p) in enumerate(zip(clips, pairs))
                  if len(p)}

        def measure(stage: Stage, ids: Sequence[int]) -> List[PairMeasurements]:
            return [_measure_clip(states[k], stage) for k in ids]

        return run_protocol(measure, pairs, config, infos)

    return run_opencv(work, config.opencv_threads, config.seed)
