"""OpenCV SIFT (CPU; the parity backend of the WorldAtlas / GVGC protocols).

``cv2.SIFT_create(nfeatures=max_keypoints)`` run per frame on the uint8 image
``round(gray * 255)`` with the content mask passed to OpenCV. Descriptors are OpenCV's raw
float SIFT vectors (``rootsift=True`` converts them to RootSIFT). OpenCV may return a few more
than ``nfeatures`` keypoints (one per extra orientation); the strongest ``max_keypoints`` are kept.

Frames are processed by a pool of ``workers`` threads (OpenCV releases the GIL; default
:func:`default_workers`: the usable CPUs shared by the local torchrun ranks), one SIFT object
per thread; each frame's result depends only on that frame,
and results are assembled in frame order, so the output is identical for any number of workers.
While the pool runs, OpenCV's and torch's own threading is set to 1 (``cv2.setNumThreads``,
``torch.set_num_threads``, through :func:`~geocon_torch._thread_settings.thread_settings`: the
user's counts come back when the last of several overlapping calls ends): frame-level parallelism
scales better than per-image threads, nested thread teams would oversubscribe the cores, and the
output is the same. Detections in flight hold at most :data:`SIFT_MEMORY_BYTES` together
(:data:`SIFT_BYTES_PER_PIXEL` a pixel each, over every pool of the process): on many cores a
pool of large frames runs fewer at once than it has workers. Meanwhile OpenCV runs on one thread
process-wide, and threads started elsewhere in the process take torch's count of 1.
:meth:`OpenCVSIFT.extract_many` converts each frame to uint8 inside its worker (one frame, several
scales at a time), so no float copy of a whole clip is ever materialised.

Scale-space bands (:meth:`OpenCVSIFT.extract_scale_space`): SIFT on an image shrunk by 2^m finds
(almost exactly) the keypoints that SIFT on the full image finds at octaves >= m - 1 (octave -1 is
OpenCV's doubled base image): the same Gaussian scale space, sampled from the other end. One
detection at the working resolution therefore gives every power-of-two scale: band m keeps the
keypoints of octaves >= m - 1 (the strongest ``max_keypoints`` of them, as ``nfeatures`` does on
the shrunk image), with descriptors from the same blurred octave images and positions already
in working pixels. Measured on shared clips at 640 and 1024 px, the bands hold 94-101 % as many
keypoints as separate detections on the shrunk images (75-100 % on others, e.g. box.mp4),
70-76 % of those keypoints have a band keypoint within one shrunk-image pixel (hill/1.JPG at
640x480), and the bands cost nothing beyond the one detection (separate detections at 1/2 and
1/4 add ~30 % to it).

Pixel convention: OpenCV builds its first octave by doubling the image (``cv2.resize``, pixel
centres aligned: doubled pixel u sits at x = u / 2 - 0.25) but reports ``pt = u / 2``, so its
positions are 0.25 px right of and below the true ones, at every octave. By default that offset
is removed (``pt - 0.25``) so every backend shares the pixel-centre-at-integer convention and
multi-scale positions map back exactly; ``centre_correction=False`` returns OpenCV's raw points.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Callable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

from .._thread_settings import thread_settings
from ..errors import InputError
from ..types import Keypoints
from .base import (DeviceLike, check_gray, full_precision, inside_mask, pad_keypoints,
                   register_extractor)


#: OpenCV SIFT positions are this many px right of / below the true ones (module docstring).
OPENCV_SIFT_OFFSET = 0.25

#: one frame's SIFT result: xy (n, 2), descriptors (n, 128) (uint8 or float32), response, size,
#: angle (n,), octave (n,) long (-1 = OpenCV's doubled base image)
FrameFeatures = Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor,
                      torch.Tensor]

#: keypoints detected per frame before the bands of :meth:`OpenCVSIFT.extract_scale_space` pick
#: their strongest ``max_keypoints``: this many times ``max_keypoints`` (bounds descriptor work)
SCALE_SPACE_DETECT_FACTOR = 4
#: per-frame point refinement: xy (n, 2) -> (new xy (n, 2), keep (n,) bool)
Refine = Callable[[torch.Tensor], Tuple[torch.Tensor, torch.Tensor]]
#: bytes OpenCV SIFT holds per pixel of the image it detects on (its doubled base image and
#: the Gaussian / DoG pyramids: +130 MB at 1024 x 576, +516 MB at 2048 x 1152, +2 GB at 4096 x
#: 2304, measured), rounded up
SIFT_BYTES_PER_PIXEL = 240
#: the most bytes the detections in flight may hold together, over every pool of the process
#: (:class:`DetectionBudget`): a frame pool of W workers would hold W x that (16 workers on one
#: 4K clip: ~33 GB); a frame over the whole budget runs alone
SIFT_MEMORY_BYTES = 2 * 2 ** 30


class DetectionBudget:
    """Bytes of concurrent SIFT detections: :meth:`hold` waits until its share fits, so the
    threads of any pool run at most as many detections at once as the budget holds (results do
    not depend on it: each frame's detection is independent)."""

    def __init__(self, total: int) -> None:
        self.total = int(total)
        self.used = 0
        self._cond = threading.Condition()

    @contextmanager
    def hold(self, nbytes: int) -> Iterator[None]:
        """Hold ``nbytes`` (at most the whole budget: a larger detection runs alone) while the
        block runs."""
        need = max(0, min(int(nbytes), self.total))
        with self._cond:
            self._cond.wait_for(lambda: self.used == 0 or self.used + need <= self.total)
            self.used += need
        try:
            yield
        finally:
            with self._cond:
                self.used -= need
                self._cond.notify_all()


#: the process-wide budget of the SIFT detections (:data:`SIFT_MEMORY_BYTES`)
DETECTION_BUDGET = DetectionBudget(SIFT_MEMORY_BYTES)


def to_uint8(gray: torch.Tensor) -> np.ndarray:
    """(T, 1, H, W) float [0, 1] -> (T, H, W) uint8 numpy (rounded, clipped)."""
    return (gray[:, 0].detach().to("cpu", torch.float32) * 255.0).round().clamp(0, 255) \
        .to(torch.uint8).numpy()


def _cv_mask(mask: Optional[torch.Tensor]) -> Optional[np.ndarray]:
    return None if mask is None else mask.detach().cpu().numpy().astype(np.uint8) * 255


def signed_octaves(packed: np.ndarray) -> np.ndarray:
    """OpenCV's packed ``KeyPoint.octave`` values (int array) -> the signed octave index (low
    byte; -1 = the doubled base image, 0 = the input resolution, o = shrunk by 2^o)."""
    low = packed.astype(np.int64) & 255
    return np.where(low >= 128, low - 256, low)


def octave_band(scale: float) -> Optional[int]:
    """Lowest octave of the scale-space band standing for detection at ``scale`` = 2^-m
    (m - 1), or None when ``scale`` is not a power of two in (0, 1]."""
    m = -np.log2(float(scale)) if scale > 0 else -1.0
    return int(round(m)) - 1 if m >= 0 and abs(m - round(m)) < 1e-9 else None


def default_workers() -> int:
    """Threads of the frame pool when none is given: the CPUs this process may run on
    (``os.sched_getaffinity``, else ``os.cpu_count()``) shared by the local ranks of a
    ``torchrun`` job (``LOCAL_WORLD_SIZE``), at least 1: N ranks on one node do not start N x
    CPUs threads that fight for the same cores."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    try:
        local_ranks = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
    except ValueError:
        local_ranks = 1
    return max(1, cpus // local_ranks)


@register_extractor("opencv-sift")
class OpenCVSIFT:
    """Per-frame OpenCV SIFT over a thread pool (OpenCV works on one image at a time).

    Args:
        max_keypoints: ``nfeatures`` of cv2.SIFT_create and the cap per frame.
        device: accepted for interface symmetry; computation is on the CPU and the result lives
            on the input's device.
        rootsift: convert descriptors to RootSIFT (default False: raw OpenCV, for parity).
        centre_correction: subtract OpenCV's +0.25 px position offset (default True).
        workers: threads running SIFT on different frames (None: :func:`default_workers`; 1: in the
            calling thread). Results do not depend on it.
        sift_options: extra keyword arguments of cv2.SIFT_create (contrastThreshold, ...).
    """

    name = "opencv-sift"
    descriptor_dim = 128

    def __init__(self, max_keypoints: int = 2000, device: DeviceLike = None, *,
                 rootsift: bool = False, centre_correction: bool = True,
                 workers: Optional[int] = None, **sift_options) -> None:
        import cv2

        self.max_keypoints = int(max_keypoints)
        self.device = torch.device("cpu")
        self.rootsift = rootsift
        self.offset = OPENCV_SIFT_OFFSET if centre_correction else 0.0
        self.workers = default_workers() if workers is None else int(workers)
        if self.workers < 1:
            raise InputError(f"workers must be >= 1, got {workers}")
        self._options = dict(sift_options)
        self._sift = cv2.SIFT_create(nfeatures=self.max_keypoints, **self._options)
        self._local = threading.local()

    def _thread_sift(self, nfeatures: Optional[int] = None):
        """One SIFT object per thread and ``nfeatures`` (OpenCV objects are not documented as
        thread-safe)."""
        nf = self.max_keypoints if nfeatures is None else int(nfeatures)
        if nf == self.max_keypoints and threading.current_thread() is threading.main_thread():
            return self._sift
        cache = getattr(self._local, "sift", None)
        if cache is None:
            cache = self._local.sift = {}
        if nf not in cache:
            import cv2

            cache[nf] = cv2.SIFT_create(nfeatures=nf, **self._options)
        return cache[nf]

    def detect(self, img: np.ndarray, cv_mask: Optional[np.ndarray] = None,
               nfeatures: Optional[int] = None) -> FrameFeatures:
        """SIFT of one (H, W) uint8 image; ``cv_mask`` (H, W) uint8 (255 = keep) or None;
        ``nfeatures`` overrides ``max_keypoints`` as OpenCV's cap (0 = none).

        Descriptors come back as uint8 when OpenCV's float values are integers in [0, 255]
        (they are: OpenCV saturates them to bytes), a lossless 4x smaller form; float32 else.
        """
        import cv2

        with DETECTION_BUDGET.hold(SIFT_BYTES_PER_PIXEL * int(img.size)):
            kp, des = self._thread_sift(nfeatures).detectAndCompute(img, cv_mask)
        if des is None or len(kp) == 0:
            return (torch.zeros(0, 2, dtype=torch.float64), torch.zeros(0, 128),
                    torch.zeros(0), torch.zeros(0), torch.zeros(0),
                    torch.zeros(0, dtype=torch.long))
        xy = torch.from_numpy(cv2.KeyPoint_convert(kp).astype(np.float64)).reshape(-1, 2)
        des = np.ascontiguousarray(des, dtype=np.float32)
        if self.rootsift:
            d = torch.from_numpy(des)
            d = torch.sqrt(d / d.sum(-1, keepdim=True).clamp_min(1e-12))
        else:
            small = des.astype(np.uint8)
            d = torch.from_numpy(small if np.array_equal(small, des) else des)
        # one Python pass over the keypoints (it holds the GIL the other workers wait for)
        attrs = np.array([(k.response, k.size, k.angle, k.octave) for k in kp], dtype=np.float64)
        octave = torch.from_numpy(signed_octaves(attrs[:, 3].astype(np.int64)))
        attrs = torch.from_numpy(attrs[:, :3].astype(np.float32))
        return xy - self.offset, d, attrs[:, 0], attrs[:, 1], attrs[:, 2], octave

    def _select(self, feats: FrameFeatures, mask: Optional[torch.Tensor], dtype: torch.dtype,
                refine: Optional[Refine], min_octave: Optional[int] = None) -> FrameFeatures:
        """One frame's :func:`compact_keypoints` (inside ``mask`` and, when given, of octaves
        >= ``min_octave``; strongest ``max_keypoints`` first, ties in OpenCV's order), then
        ``refine`` (new positions and a keep mask)."""
        xy, score = feats[0].to(dtype), feats[2].to(dtype)
        keep = inside_mask(xy, mask)
        if min_octave is not None:
            keep = keep & (feats[5] >= min_octave)
        idx = keep.nonzero()[:, 0]
        order = torch.sort(score[idx], descending=True, stable=True).indices
        idx = idx[order[: self.max_keypoints]]
        out = (xy[idx], feats[1][idx], score[idx], *(f[idx] for f in feats[3:]))
        if refine is not None:
            xy, keep = refine(out[0])
            idx = keep.nonzero()[:, 0]  # a filter: the strongest-first order is kept
            out = (xy[idx], *(f[idx] for f in out[1:]))
        return out

    def _map(self, fn: Callable[[int], object], n: int) -> List[object]:
        """``[fn(k) for k in range(n)]``, on the pool when it has more than one worker."""
        if self.workers == 1 or n <= 1:
            return [fn(k) for k in range(n)]
        # the pool replaces OpenCV's and torch's own per-image threads (frames are independent,
        # so this scales better, and nested thread teams would oversubscribe the cores): one
        # thread_settings block, which puts the user's counts back also when calls overlap in
        # several threads. Results do not depend on them.
        with thread_settings(torch_threads=1, cv2_threads=1):
            with ThreadPoolExecutor(max_workers=min(self.workers, n)) as pool:
                return list(pool.map(fn, range(n)))  # map keeps the frame order

    def parallel_map(self, fn: Callable[[int], object], n: int) -> List[object]:
        """``[fn(k) for k in range(n)]`` on this extractor's pool (same thread rules as the
        detection: OpenCV and torch at one thread per worker while it runs), for per-frame or
        per-pair work that follows the detection."""
        return self._map(fn, n)

    @torch.no_grad()
    def extract_many(self, num_frames: int,
                     images: Callable[[int], Sequence[np.ndarray]],
                     masks: Sequence[Optional[torch.Tensor]], device: DeviceLike = None,
                     dtype: torch.dtype = torch.float32,
                     refine: Optional[Sequence[Optional[Refine]]] = None) -> List[Keypoints]:
        """Keypoints of several image groups (e.g. scales), computed frame by frame.

        Args:
            num_frames: T.
            images: ``images(k)`` -> one (h_g, w_g) uint8 image per group g for frame k (called
                inside the worker, so only a few frames are ever converted at once).
            masks: per group an (h_g, w_g) bool content mask or None.
            device, dtype: of the returned Keypoints (default CPU, float32).
            refine: per group None or ``f(xy (n, 2)) -> (new xy (n, 2), keep (n,) bool)``
                applied per frame after the mask and the cap (e.g. mapping to another
                resolution and dropping points there); the order is kept.
        Returns:
            One Keypoints (T, N_g, ...) per group, as :meth:`extract` would give for that
            group's images (then ``refine`` and :func:`compact_keypoints` on its keep mask).
        """
        dev = torch.device("cpu") if device is None else torch.device(device)
        cv_masks = [_cv_mask(m) for m in masks]
        cpu_masks = [None if m is None else m.detach().to("cpu", torch.bool) for m in masks]
        refine = list(refine) if refine is not None else [None] * len(masks)

        def one(k: int) -> List[FrameFeatures]:
            return [self._select(self.detect(img, cm), m, dtype, r)
                    for img, cm, m, r in zip(images(k), cv_masks, cpu_masks, refine)]

        return self._assemble(self._map(one, num_frames), len(masks), dev, dtype)

    @torch.no_grad()
    def extract_scale_space(self, num_frames: int, image: Callable[[int], np.ndarray],
                            mask: Optional[torch.Tensor], min_octaves: Sequence[Optional[int]],
                            device: DeviceLike = None, dtype: torch.dtype = torch.float32,
                            band_masks: Optional[Sequence[Optional[torch.Tensor]]] = None
                            ) -> List[Keypoints]:
        """Scale-space bands of one detection per frame (module docstring).

        Args:
            num_frames: T.
            image: ``image(k)`` -> frame k as an (H, W) uint8 image (called inside the worker).
            mask: (H, W) bool content mask or None (where OpenCV detects).
            min_octaves: per band the lowest octave kept (None or -1: every keypoint); band
                2^-m is :func:`octave_band` (m - 1).
            device, dtype: of the returned Keypoints (default CPU, float32).
            band_masks: None (every band keeps the keypoints inside ``mask``) or per band an
                (H, W) bool mask (or None: ``mask``) its keypoints must lie inside, applied
                before the band's ``max_keypoints`` cap (e.g. the content mask eroded by a
                margin in the band's own pixels).
        Returns:
            One Keypoints (T, N_b, ...) per band, positions in ``image``'s pixels, the
            strongest ``max_keypoints`` of the band per frame; extras ``scale``,
            ``orientation`` and ``octave``.
        """
        dev = torch.device("cpu") if device is None else torch.device(device)
        cv_mask = _cv_mask(mask)
        cpu_mask = None if mask is None else mask.detach().to("cpu", torch.bool)
        if band_masks is None:
            band_masks = [None] * len(min_octaves)
        if len(band_masks) != len(min_octaves):
            raise InputError(f"extract_scale_space: {len(band_masks)} band masks for "
                             f"{len(min_octaves)} bands")
        selects = [cpu_mask if m is None else m.detach().to("cpu", torch.bool)
                   for m in band_masks]
        cap = SCALE_SPACE_DETECT_FACTOR * self.max_keypoints

        def one(k: int) -> List[FrameFeatures]:
            feats = self.detect(image(k), cv_mask, nfeatures=cap)
            return [self._select(feats, m, dtype, None, o) for m, o in zip(selects, min_octaves)]

        return self._assemble(self._map(one, num_frames), len(min_octaves), dev, dtype)

    def _assemble(self, per_frame: List[List[FrameFeatures]], groups: int, dev: torch.device,
                  dtype: torch.dtype) -> List[Keypoints]:
        """Per-frame, per-group features -> one padded Keypoints per group (one group alive at a
        time: its per-frame parts are dropped as it is padded)."""
        out = []
        for g in range(groups):
            feats = [f[g] for f in per_frame]
            for f in per_frame:
                f[g] = None
            cols = [list(v) for v in zip(*feats)] if feats else [[] for _ in range(6)]
            del feats
            xys, descs, scores, sizes, angles, octaves = cols
            out.append(pad_keypoints(xys, descs, scores, 128, dev, dtype,
                                     extras={"scale": sizes, "orientation": angles,
                                             "octave": octaves}))
        return out

    @torch.no_grad()
    def extract(self, gray: torch.Tensor, mask: Optional[torch.Tensor] = None) -> Keypoints:
        """Keypoints of ``gray (T, 1, H, W)``; ``mask (H, W)`` bool or None. Scores are OpenCV
        responses; extra ``scale`` (kp.size, px) and ``orientation`` (kp.angle, degrees)."""
        mask = check_gray(gray, mask)
        gray = full_precision(gray)
        return self.extract_many(int(gray.shape[0]),
                                 lambda k: [to_uint8(gray[k:k + 1])[0]], [mask],
                                 gray.device, gray.dtype)[0]
