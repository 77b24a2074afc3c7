"""Frames of a video file or of a folder of images read on demand, so a clip's memory does not
grow with its length.

:class:`VideoFrames` stands in for ``Clip.frames`` (T, 3, h, w) uint8 of a file-backed clip
(``read_clip(path, stream=True)``, what ``score_clip`` uses): it has the tensor API the stages
use (``shape``, ``dtype``, ``device``, ``ndim``, ``len``, ``[int]``, ``[slice]``, ``[index
tensor / list]``, ``index_select(0, idx)``) and decodes the requested frames through ONE
persistent sequential PyAV decoder: increasing requests continue forward, a request behind the
decoder re-opens the file and decodes from the start (no seeking: frame numbers are decode
order, as in :func:`~geocon_torch.io.decode.decode_selected`), on the decoder thread count of
the pass that read the clip (a damaged stream's pixels depend on it). The last ``cache_frames``
converted frames are kept, so chunks that overlap by a few frames (pairs ``(i, i + s)`` split at
a chunk edge) do not re-open. Frames are resized exactly as the eager reader does
(:func:`~geocon_torch.io.resize.resize_image`), so every value is bit-identical to
``read_clip(path).frames`` (with a ``lens``, undistorted as the eager read's, on the store's
device). Any other tensor attribute (``.float()``, ``.permute``, ...)
materialises the whole clip once for that call (rare paths such as SAM-2 and audits).

:class:`ImageFrames` is the same store for a folder of images (a VideoFrames whose ``path`` is
the folder): a requested frame is its file, read with
:func:`~geocon_torch.io.images.read_image` and resized as the eager reader does (the same cache;
image files are random access, so nothing is re-opened).
"""
from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any, Iterator, List, Optional, Sequence, Tuple, Union

import numpy as np
import torch

from ..errors import GeoConError, ShapeError, VideoReadError
from .decode import DECODE_THREADS, display_rgb, iter_frames, open_video
from .images import read_image
from .lens import Lens, undistort_frames
from .resize import WorkingSize, resize_image

#: Converted frames kept after they were returned (overlaps between consecutive chunks).
CACHE_FRAMES = 16
Index = Union[int, slice, Sequence[int], np.ndarray, torch.Tensor]


class FrameIndexError(ShapeError, IndexError):
    """A frame position past the end of the clip (an IndexError: iteration stops there)."""


class NoAttributeError(GeoConError, AttributeError):
    """A private attribute a lazy store does not have (an AttributeError, for ``hasattr``)."""


class VideoFrames:
    """(T, 3, h, w) uint8 RGB frames of a video file at working resolution, decoded on demand.

    Args:
        path: the video file (already read once by ``read_clip``: it decodes).
        source_indices: (T,) source frame index of each clip position (decode order; any order,
            repeats allowed, as ``Clip.frame_indices``).
        size: the working size (source size, output size, resize rule).
        device: where returned frames live (default CPU).
        cache_frames: converted frames kept for repeated requests.
        threads: decoder threads: those of the pass that read the clip (``Decoded.threads``;
            a damaged stream decodes to other pixels on another count).
        lens: the checked lens (``io.lens``, :func:`~geocon_torch.io.lens.as_lens`) the frames
            are undistorted with on ``device`` as they are returned (the cache holds them as
            decoded); None: as decoded.
    """

    dtype = torch.uint8
    ndim = 4

    def __init__(self, path: Union[str, Path], source_indices: Sequence[int], size: WorkingSize,
                 device: Union[None, str, torch.device] = None,
                 cache_frames: int = CACHE_FRAMES, threads: int = DECODE_THREADS,
                 lens: Optional[Lens] = None) -> None:
        self.path = Path(path)
        self.lens = lens
        self.threads = int(threads)
        self.source = [int(i) for i in source_indices]
        self.size = size
        self.device = torch.device(device) if device is not None else torch.device("cpu")
        self.cache_frames = max(0, int(cache_frames))
        self.shape = torch.Size((len(self.source), 3) + tuple(size.size))
        self._cache: "OrderedDict[int, torch.Tensor]" = OrderedDict()
        self._container = None
        self._frames: Optional[Iterator] = None
        self._next = 0  # source index of the next frame the decoder yields
        self.opens = 0  # how many times the file was (re-)opened (diagnostic)

    # ------------------------------------------------------------------ tensor-like API
    def __len__(self) -> int:
        return int(self.shape[0])

    def __repr__(self) -> str:
        return (f"{type(self).__name__}({self.path.name}, shape={tuple(self.shape)}, "
                f"device={self.device})")

    def __getitem__(self, key: Any) -> torch.Tensor:
        """``[int]`` -> (3, h, w); ``[slice]`` / ``[index tensor or list]`` -> (n, 3, h, w);
        a tuple key indexes the selected frames further (``[i, 0]``)."""
        rest: Tuple = ()
        if isinstance(key, tuple):
            key, rest = key[0], key[1:]
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            out = self.gather([self._position(int(key))])[0]
        else:
            out = self.gather(self._positions(key))
        return out[(slice(None),) * (out.ndim - 3) + rest] if rest else out

    def index_select(self, dim: int, index: torch.Tensor) -> torch.Tensor:
        """``torch.index_select`` along dim 0 (the frames)."""
        if int(dim) != 0:
            return self.materialize().index_select(dim, index)
        return self.gather(self._positions(index))

    def to(self, *args: Any, **kwargs: Any) -> torch.Tensor:
        """The whole clip as a tensor (``materialize()``) converted by ``Tensor.to``."""
        return self.materialize().to(*args, **kwargs)

    def materialize(self) -> torch.Tensor:
        """Every frame, (T, 3, h, w) uint8 on ``device`` (one sequential pass)."""
        return self.gather(list(range(len(self))))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise NoAttributeError(name)
        return getattr(self.materialize(), name)  # rare whole-clip paths (SAM-2, audits)

    # ------------------------------------------------------------------ decoding
    def gather(self, positions: Sequence[int]) -> torch.Tensor:
        """Frames at clip ``positions`` (in that order, repeats allowed): (n, 3, h, w) uint8.

        Decodes the distinct source frames in increasing order (one forward run of the decoder;
        it re-opens the file first only when the smallest one lies behind it and is not cached).
        """
        h, w = self.size.size
        out = torch.empty((len(positions), 3, h, w), dtype=torch.uint8)
        wanted = sorted({self.source[p] for p in positions})
        got = {src: self._frame(src) for src in wanted}
        for k, p in enumerate(positions):
            out[k] = got[self.source[p]]
        out = out.to(self.device) if self.device.type != "cpu" else out
        return out if self.lens is None else undistort_frames(out, self.lens, self.size)

    def close(self) -> None:
        """Close the decoder (it re-opens on the next request)."""
        if self._container is not None:
            self._container.close()
        self._container, self._frames, self._next = None, None, 0

    def __del__(self) -> None:  # pragma: no cover - best effort
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __getstate__(self) -> dict:  # picklable (workers): without the open decoder
        state = dict(self.__dict__)
        state.update(_container=None, _frames=None, _next=0, _cache=OrderedDict())
        return state

    def _frame(self, src: int) -> torch.Tensor:
        """Source frame ``src`` as (3, h, w) uint8 on the CPU (cached, else decoded)."""
        if src in self._cache:
            self._cache.move_to_end(src)
            return self._cache[src]
        return self._remember(src, self._decode(src))

    def _decode(self, src: int) -> torch.Tensor:
        """Source frame ``src`` decoded and resized: (3, h, w) uint8 on the CPU (the sequential
        decoder goes on, or re-opens the file when ``src`` lies behind it)."""
        if self._frames is None or src < self._next:
            self._reopen()
        for frame in self._frames:
            i = self._next
            self._next += 1
            if i == src:
                rgb = resize_image(display_rgb(frame), self.size)
                return torch.from_numpy(rgb).permute(2, 0, 1)
        raise VideoReadError(f"{self.path}: frame {src} did not decode on a later pass (the "
                             f"decoder stopped after {self._next} frames)")

    def _remember(self, src: int, frame: torch.Tensor) -> torch.Tensor:
        if self.cache_frames:
            self._cache[src] = frame
            while len(self._cache) > self.cache_frames:
                self._cache.popitem(last=False)
        return frame

    def _reopen(self) -> None:
        self.close()
        self._container, stream = open_video(self.path, self.threads)
        self._frames = iter_frames(self._container, stream, [])
        self.opens += 1

    def _position(self, p: int) -> int:
        n = len(self)
        if not -n <= p < n:
            raise FrameIndexError(f"frame {p} out of range for a clip of {n} frames")
        return p % n

    def _positions(self, key: Any) -> List[int]:
        """Clip positions selected by a slice, an index list / array / tensor or a bool mask."""
        if isinstance(key, slice):
            return list(range(len(self)))[key]
        if isinstance(key, torch.Tensor):
            key = key.detach().cpu()
            if key.dtype == torch.bool:
                key = key.nonzero().reshape(-1)
            elif key.is_floating_point():
                raise ShapeError(f"frame indices must be integers, got {key.dtype}")
            key = key.reshape(-1).tolist()
        elif isinstance(key, np.ndarray):
            key = (key.nonzero()[0] if key.dtype == bool else key.reshape(-1)).tolist()
        try:
            return [self._position(int(p)) for p in key]
        except TypeError as exc:
            raise ShapeError(f"cannot index frames with {type(key).__name__}") from exc


class ImageFrames(VideoFrames):
    """(T, 3, h, w) uint8 RGB frames of a folder of images at working resolution, each read from
    its file on demand: the API and cache of :class:`VideoFrames` (``path`` is the folder, so
    ``content_hash(frames)`` is the folder's), no decoder to keep open.

    Args:
        folder: the folder (already read once by ``read_clip``).
        files: its image files in frame order (:func:`~geocon_torch.io.images.list_images`).
        source_indices: (T,) file index of each clip position (any order, repeats allowed, as
            ``Clip.frame_indices``).
        size: the working size (source size, output size, resize rule); a file whose size is
            not ``size.source`` any more raises VideoReadError.
        device: where returned frames live (default CPU).
        cache_frames: converted frames kept for repeated requests.
        lens: as in :class:`VideoFrames`.
    """

    def __init__(self, folder: Union[str, Path], files: Sequence[Union[str, Path]],
                 source_indices: Sequence[int], size: WorkingSize,
                 device: Union[None, str, torch.device] = None,
                 cache_frames: int = CACHE_FRAMES, lens: Optional[Lens] = None) -> None:
        super().__init__(folder, source_indices, size, device, cache_frames, lens=lens)
        self.files = [Path(f) for f in files]
        self.reads = 0  # image files read (diagnostic)

    def _decode(self, src: int) -> torch.Tensor:
        """Image file ``src`` read and resized: (3, h, w) uint8 on the CPU."""
        rgb = read_image(self.files[src])
        self.reads += 1
        if rgb.shape[:2] != tuple(self.size.source):
            raise VideoReadError(
                f"{self.files[src]}: image size {rgb.shape[1]}x{rgb.shape[0]} differs from the "
                f"{self.size.source[1]}x{self.size.source[0]} it had when {self.path} was read "
                f"(the file changed since)")
        return torch.from_numpy(resize_image(rgb, self.size)).permute(2, 0, 1)
