"""The data types that flow between stages (see DESIGN.md: one type per arrow).

Conventions, everywhere in the package:

* points are pixel ``(x, y)`` at the clip's *working* resolution unless a name says ``_norm``;
* ``x2^T F x1 = 0`` and ``x2 ~ H x1`` for a frame pair ``(i, j)`` with ``x1`` in frame i;
* variable counts are padding plus a boolean validity mask; padded entries hold finite values
  (zeros) so they never produce NaN, and every consumer must honour the mask.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F

from ._tensor_utils import to_device
from ._checks import retired_name
from .errors import GeoConError, ShapeError


@dataclass
class Clip:
    """A decoded clip at working resolution.

    Attributes:
        frames: (T, 3, H, W) uint8 RGB frames: a tensor, or for a streamed video file
            (``read_clip(path, stream=True)``, what ``score_clip`` reads) a
            :class:`~geocon_torch.io.framestore.VideoFrames` store with the same indexing API
            (``shape``, ``dtype``, ``device``, ``len``, ``[int | slice | index tensor]``,
            ``index_select``) that decodes the requested frames on demand.
        fps: frames per second of the source (after striding: source fps / stride).
        content_mask: (H, W) bool, False on letterbox / pillarbox bars.
        frame_indices: (T,) long, index of each kept frame in the source video.
        source_size: (H, W) of the source frames before resizing.
        scale: working / source **long side** (the two axes differ slightly after the sides
            are rounded to even: ``meta["scale_xy"]`` holds the exact (sx, sy)).
        name: a short identifier (file stem or "tensor").
        meta: free-form metadata (path, container frame count, codec, ...).
    """

    frames: Any  # torch.Tensor or io.framestore.VideoFrames (same indexing API)
    fps: float
    content_mask: torch.Tensor
    frame_indices: torch.Tensor
    source_size: Tuple[int, int]
    scale: float = 1.0
    name: str = "clip"
    meta: Dict[str, Any] = field(default_factory=dict)

    @property
    def num_frames(self) -> int:
        return int(self.frames.shape[0])

    @property
    def size(self) -> Tuple[int, int]:
        """(H, W) at working resolution."""
        return int(self.frames.shape[-2]), int(self.frames.shape[-1])

    def subclip(self, positions: torch.Tensor) -> "Clip":
        """The frames at ``positions`` (F,) long as an in-memory Clip (frames a (F, 3, H, W)
        tensor; content mask, fps, scale, name and meta shared): what a chunked stage works
        on. Its frame ``k`` is this clip's frame ``positions[k]``."""
        pos = positions.to(device=self.frames.device, dtype=torch.long)
        frames = self.frames[pos]
        return Clip(frames=frames, fps=self.fps, content_mask=self.content_mask,
                    frame_indices=self.frame_indices[pos.to(self.frame_indices.device)],
                    source_size=self.source_size, scale=self.scale, name=self.name,
                    meta=self.meta)

    def gray(self, dtype: torch.dtype = torch.float32,
             indices: Optional[torch.Tensor] = None, chunk: Optional[int] = None
             ) -> torch.Tensor:
        """(T', 1, H, W) luminance in [0, 1] (ITU-R BT.601 weights, as OpenCV's RGB2GRAY).

        ``indices`` (T',) selects frames (all when None). Frames are converted ``chunk`` at a time
        (None: as many as :data:`GRAY_CHUNK_PIXELS` pixels hold, at least one) so the peak
        extra memory is one chunk of float frames, not a float copy of the clip.
        """
        frames = self.frames if indices is None else self.frames[
            to_device(indices, self.frames.device)]
        t, _, h, w = frames.shape
        if chunk is None:
            chunk = max(1, GRAY_CHUNK_PIXELS // max(1, int(h) * int(w)))
        out = torch.empty((t, 1, h, w), dtype=dtype, device=frames.device)
        for start in range(0, t, chunk):  # a streamed store decodes one chunk at a time
            f = frames[start:start + chunk].to(dtype)
            torch.div(f[:, 0:1] * 0.299 + f[:, 1:2] * 0.587 + f[:, 2:3] * 0.114, 255.0,
                      out=out[start:start + chunk])
        return out


#: pixels of the frames :meth:`Clip.gray` converts at a time (its float temporaries: a few
#: times 4 bytes per pixel)
GRAY_CHUNK_PIXELS = 1 << 23


@dataclass
class Keypoints:
    """Padded keypoints of T frames.

    Attributes:
        xy: (T, N, 2) float pixel coordinates (x, y).
        descriptors: (T, N, D) float descriptors (zeros where padded).
        scores: (T, N) float detector response (higher is stronger).
        mask: (T, N) bool validity.
        extra: backend-specific tensors (scale, orientation, ...), each (T, N, ...).
    """

    xy: torch.Tensor
    descriptors: torch.Tensor
    scores: torch.Tensor
    mask: torch.Tensor
    extra: Dict[str, torch.Tensor] = field(default_factory=dict)

    @property
    def counts(self) -> torch.Tensor:
        """(T,) long number of valid keypoints per frame."""
        return self.mask.sum(-1)


@dataclass
class Correspondences:
    """Padded matches of P frame pairs.

    Attributes:
        x1: (P, N, 2) points in the first frame of each pair (pixels).
        x2: (P, N, 2) matching points in the second frame (pixels).
        mask: (P, N) bool validity.
        scores: (P, N) float match quality, higher is better (1 - Lowe ratio for descriptor
            matches); used for PROSAC ordering.
        pairs: (P, 2) long frame indices (i, j) into the clip.
        num_kp1: (P,) long keypoints detected in frame i (for coverage).
        num_kp2: (P,) long keypoints detected in frame j.
    """

    x1: torch.Tensor
    x2: torch.Tensor
    mask: torch.Tensor
    scores: torch.Tensor
    pairs: torch.Tensor
    num_kp1: torch.Tensor
    num_kp2: torch.Tensor

    @property
    def num_pairs(self) -> int:
        return int(self.x1.shape[0])

    @property
    def num_matches(self) -> torch.Tensor:
        """(P,) long number of valid matches per pair."""
        return self.mask.sum(-1)

    def to(self, device: Any = None, dtype: Optional[torch.dtype] = None) -> "Correspondences":
        f = lambda t: t.to(device=device, dtype=dtype or t.dtype)  # noqa: E731
        return Correspondences(f(self.x1), f(self.x2), self.mask.to(device), f(self.scores),
                               self.pairs.to(device), self.num_kp1.to(device),
                               self.num_kp2.to(device))


@dataclass
class Fit:
    """A robust fit of one model per pair.

    Attributes:
        kind: "H" (homography, x2 ~ H x1) or "F" (fundamental, x2^T F x1 = 0).
        model: (P, 3, 3) in pixel coordinates (identity / zeros where invalid).
        inliers: (P, N) bool, the final inlier set (always within the input mask).
        residuals: (P, N) the residual the inlier test used (the ``residual`` the fit was asked
            for, e.g. symmetric transfer px for H, normalised Sampson for F); 0 where padded.
        valid: (P,) bool, False where the pair could not be fitted.
        num_inliers: (P,) long.
        iterations: (P,) long hypotheses drawn before stopping.
        cost: (P,) MSAC (or RANSAC) cost of the final model, lower is better (``score`` is its
            retired name: still readable, with a DeprecationWarning; docs/GLOSSARY.md).
    """

    kind: str
    model: torch.Tensor
    inliers: torch.Tensor
    residuals: torch.Tensor
    valid: torch.Tensor
    num_inliers: torch.Tensor
    iterations: torch.Tensor
    cost: torch.Tensor

    @property
    def score(self) -> torch.Tensor:
        """Retired name of :attr:`cost` (a cost, lower is better; docs/GLOSSARY.md)."""
        retired_name("Fit.score", "Fit.cost")
        return self.cost

    @property
    def num_rows(self) -> int:
        """P, the number of fitted rows (pairs, or pairs x scales)."""
        return int(self.model.shape[0])

    def rows(self, idx: torch.Tensor) -> "Fit":
        """The fits of the rows ``idx``: (P',) long row numbers or a (P,) bool row mask.

        >>> fit = Fit("H", torch.eye(3).repeat(4, 1, 1), torch.ones(4, 5, dtype=torch.bool),
        ...           torch.zeros(4, 5), torch.ones(4, dtype=torch.bool),
        ...           torch.full((4,), 5), torch.ones(4, dtype=torch.long), torch.zeros(4))
        >>> fit.rows(torch.tensor([3, 1])).num_rows
        2
        """
        return Fit(self.kind, *(getattr(self, k)[idx] for k in _FIT_TENSORS))

    @classmethod
    def assemble(cls, num_rows: int, parts: Sequence[Tuple[torch.Tensor, "Fit"]]) -> "Fit":
        """One Fit of ``num_rows`` rows from ``(rows, fit of those rows)`` parts: row
        ``rows[k]`` of the result is row ``k`` of that part's fit. The parts must cover every
        row (an uncovered row would hold zeros); later parts win where rows repeat. Every part
        has the same kind, and the same N (inlier / residual width) as the first one.
        """
        if not parts:
            raise ShapeError("Fit.assemble needs at least one (rows, fit) part")
        first = parts[0][1]
        out = []
        for name in _FIT_TENSORS:
            ref = getattr(first, name)
            t = ref.new_zeros((int(num_rows),) + tuple(ref.shape[1:]))
            for rows, fit in parts:
                t[rows] = getattr(fit, name)
            out.append(t)
        return cls(first.kind, *out)


_FIT_TENSORS = ("model", "inliers", "residuals", "valid", "num_inliers", "iterations", "cost")


def concat_correspondences(parts: Sequence[Correspondences], width: int = 0) -> Correspondences:
    """Concatenate Correspondences along P, zero-padding N to max(largest part, ``width``).

    Used to send the pairs of several scales or clips through one batched fit.
    """
    n = max([int(c.x1.shape[1]) for c in parts] + [int(width)])

    return Correspondences(
        x1=pad_points([c.x1 for c in parts], n, copy=True),
        x2=pad_points([c.x2 for c in parts], n, copy=True),
        mask=pad_points([c.mask for c in parts], n, copy=True),
        scores=pad_points([c.scores for c in parts], n, copy=True),
        pairs=torch.cat([c.pairs for c in parts]),
        num_kp1=torch.cat([c.num_kp1 for c in parts]),
        num_kp2=torch.cat([c.num_kp2 for c in parts]))


def empty_rows(like: Correspondences) -> Correspondences:
    """Rows with no matches (N = 0) for the pairs of ``like``: placeholders that keep a stacked
    row layout (e.g. the gate pairs at the scales the gate does not read)."""
    p, dev = like.num_pairs, like.x1.device
    return Correspondences(like.x1.new_zeros(p, 0, 2), like.x2.new_zeros(p, 0, 2),
                           torch.zeros(p, 0, dtype=torch.bool, device=dev),
                           like.scores.new_zeros(p, 0), like.pairs,
                           torch.zeros_like(like.num_kp1), torch.zeros_like(like.num_kp2))


class _NoAttribute(GeoConError, AttributeError):
    """A private attribute :class:`BlockMasks` does not have (an AttributeError)."""


def pack_mask_bits(low: torch.Tensor) -> torch.Tensor:
    """(T, K, h, w) bool -> (T, ceil(K/8), h, w) uint8: bit b of byte j is channel 8j + b."""
    t, k, h, w = low.shape
    out = torch.zeros(t, -(-k // 8), h, w, dtype=torch.uint8, device=low.device)
    for c in range(k):  # K small (objects): one pass per channel, no (T, 8, ...) temporary
        out[:, c // 8] |= low[:, c].to(torch.uint8) << (c % 8)
    return out


def labels_to_mask_bits(labels: torch.Tensor, num_objects: int, chunk: int = 64
                        ) -> torch.Tensor:
    """Disjoint objects as a label map (T, h, w) int (0: none, k in 1..K: object k-1) ->
    the packed bits (T, ceil(K/8), h, w) uint8 of :func:`pack_mask_bits` (no one-hot; int16
    temporaries of ``chunk`` frames)."""
    t, h, w = labels.shape
    out = torch.zeros(t, -(-int(num_objects) // 8), h, w, dtype=torch.uint8,
                      device=labels.device)
    one = torch.ones((), dtype=torch.uint8, device=labels.device)
    for a in range(0, t, chunk):
        lab = labels[a:a + chunk].to(torch.int16)
        for j in range(out.shape[1]):
            rel = lab - (8 * j + 1)  # bit position of the label within byte j
            inside = (rel >= 0) & (rel < 8)
            shift = rel.clamp(0, 7).to(torch.uint8)
            out[a:a + chunk, j] = torch.where(inside, one.bitwise_left_shift(shift), 0)
    return out


def unpack_mask_bits(bits: torch.Tensor, channels: torch.Tensor) -> torch.Tensor:
    """(T, B, h, w) uint8 packed bits -> (T, len(channels), h, w) bool of those channels."""
    byte = bits.index_select(1, channels // 8)
    shift = (channels % 8).to(torch.uint8).view(1, -1, 1, 1)
    return (byte.bitwise_right_shift(shift) & 1).bool()


class BlockMasks:
    """(T, K, H, W) bool object masks kept at a reduced resolution and expanded on demand.

    Working pixel (y, x) of object k in frame t is ``low[t, k, y // f, x // f] & content[y, x]``
    (every cell of ``low`` (T, K, ceil(H/f), ceil(W/f)) repeated as an f x f block, cropped to
    (H, W)): what the motion segmentation computes at <= 320 px. ``low`` itself is stored as
    packed bits (8 objects per byte, :func:`pack_mask_bits`; motion segmentation writes them
    straight from its label map, :meth:`from_labels`), so a clip's masks cost ``T * h * w``
    bytes for up to 8 objects. Full-resolution masks exist only for the frames asked for
    (``masks[t]``, ``masks[index tensor]``, ``full(frames)``), so their memory does not grow
    with the clip. Slices along frames (``masks[a:b]``) and object selections
    (``masks[:, ids]``) stay lazy; ``sum`` over both spatial dims is exact and chunked; any
    other tensor use materialises the masks (bit-identical to the eager ones).
    """

    dtype = torch.bool
    ndim = 4

    def __init__(self, low: torch.Tensor, factor: int, size: Tuple[int, int],
                 content: torch.Tensor, chunk: int = 16) -> None:
        self._set(pack_mask_bits(low.bool()), torch.arange(int(low.shape[1]), device=low.device),
                  factor, size, content, chunk)

    @classmethod
    def from_labels(cls, labels: torch.Tensor, num_objects: int, factor: int,
                    size: Tuple[int, int], content: torch.Tensor, chunk: int = 16
                    ) -> "BlockMasks":
        """Disjoint objects from a (T, h, w) int label map (0: none, k: object k-1)."""
        out = cls.__new__(cls)
        out._set(labels_to_mask_bits(labels, num_objects),
                 torch.arange(int(num_objects), device=labels.device), factor, size, content,
                 chunk)
        return out

    def _set(self, bits: torch.Tensor, ids: torch.Tensor, factor: int, size: Tuple[int, int],
             content: torch.Tensor, chunk: int) -> None:
        self.bits, self.ids = bits, ids.to(bits.device)
        self.factor, self.size = int(factor), (int(size[0]), int(size[1]))
        self.content, self.chunk = content.bool().to(bits.device), max(1, int(chunk))

    @property
    def low(self) -> torch.Tensor:
        """(T, K, h, w) bool masks at the reduced resolution (unpacked on each access)."""
        return unpack_mask_bits(self.bits, self.ids)

    @property
    def shape(self) -> torch.Size:
        return torch.Size((int(self.bits.shape[0]), int(self.ids.numel())) + self.size)

    @property
    def device(self) -> torch.device:
        return self.bits.device

    def __len__(self) -> int:
        return int(self.bits.shape[0])

    def _like(self, bits: torch.Tensor, ids: Optional[torch.Tensor] = None) -> "BlockMasks":
        out = BlockMasks.__new__(BlockMasks)
        out._set(bits, self.ids if ids is None else ids, self.factor, self.size, self.content,
                 self.chunk)
        return out

    def full(self, frames: Any = None) -> torch.Tensor:
        """(T', K, H, W) bool masks of the frames ``frames`` (all when None)."""
        bits = self.bits if frames is None else self.bits[frames]
        lead = bits.shape[:-3]  # () for one frame, (T',) or more for index tensors
        low = unpack_mask_bits(bits.reshape(math.prod(lead), *self.bits.shape[1:]), self.ids)
        return self._expand(low.reshape(*bits.shape[:-3], *low.shape[1:]))

    def _expand(self, low: torch.Tensor) -> torch.Tensor:
        """(..., h, w) bool cells -> (..., H, W) working pixels (f x f blocks, cropped, inside
        the content mask)."""
        *lead, h, w = low.shape
        f, (hh, ww) = self.factor, self.size
        up = low[..., :, None, :, None].expand(*lead, h, f, w, f).reshape(*lead, h * f, w * f)
        return up[..., :hh, :ww] & self.content.view(*([1] * (up.ndim - 2)), hh, ww)

    def any(self, dim: Any = None, keepdim: bool = False) -> torch.Tensor:
        """``Tensor.any``; over the object axis (``dim`` 1) the (T, H, W) union is taken on
        the reduced cells before they are expanded (identical: the expansion is a per-pixel
        copy of a cell, masked by the content), so no (T, K, H, W) masks are built."""
        if dim is None or int(dim) % 4 != 1:
            return self.full().any() if dim is None else self.full().any(dim, keepdim)
        low = unpack_mask_bits(self.bits, self.ids).any(1, keepdim=keepdim)
        return self._expand(low)

    def materialize(self) -> torch.Tensor:
        return self.full()

    def __getitem__(self, key: Any) -> Any:
        rest: Tuple = ()
        if isinstance(key, tuple):
            key, rest = key[0], key[1:]
        if isinstance(key, slice) and len(rest) <= 1:
            out = self._like(self.bits[key])
            return out._like(out.bits, self.ids[rest[0]].reshape(-1)) if rest and not \
                isinstance(rest[0], int) else (out.full()[(slice(None),) + rest] if rest else out)
        out = self.full(key)
        return out[(slice(None),) * (out.ndim - 3) + rest] if rest else out

    def to(self, device: Any = None, dtype: Optional[torch.dtype] = None, **kw: Any) -> Any:
        if isinstance(device, torch.dtype):
            device, dtype = None, device
        if dtype not in (None, torch.bool):
            return self.full().to(device=device, dtype=dtype, **kw)
        if device is None:
            return self
        out = BlockMasks.__new__(BlockMasks)
        out._set(self.bits.to(device), self.ids.to(device), self.factor, self.size,
                 self.content.to(device), self.chunk)
        return out

    def bool(self) -> "BlockMasks":
        return self

    def cpu(self) -> "BlockMasks":
        return self.to("cpu")

    def sum(self, dim: Any = None, **kw: Any) -> torch.Tensor:
        """Exact pixel counts; over both spatial dims computed ``chunk`` frames at a time."""
        dims = (dim,) if isinstance(dim, int) else tuple(dim or ())
        norm = {d % 4 for d in dims}
        if not {2, 3} <= norm or kw:
            return self.full().sum(dim, **kw) if dim is not None else self.full().sum(**kw)
        per = torch.cat([self.full(slice(s, s + self.chunk)).sum((-1, -2))
                         for s in range(0, len(self), self.chunk)]) if len(self) else \
            torch.zeros(tuple(self.shape[:2]), dtype=torch.long, device=self.device)
        left = sorted(norm - {2, 3}, reverse=True)
        for d in left:
            per = per.sum(d)
        return per

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise _NoAttribute(name)
        return getattr(self.full(), name)  # any other tensor use: the full masks

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: Any = (), kwargs: Any = None):
        conv = lambda a: a.full() if isinstance(a, BlockMasks) else a  # noqa: E731
        args = tuple(conv(a) for a in args)
        kwargs = {k: conv(v) for k, v in (kwargs or {}).items()}
        return func(*args, **kwargs)

    def __array__(self, dtype: Any = None) -> Any:
        return self.full().cpu().numpy() if dtype is None else \
            self.full().cpu().numpy().astype(dtype)

    def __and__(self, other: Any) -> torch.Tensor:
        return self.full() & other

    def __or__(self, other: Any) -> torch.Tensor:
        return self.full() | other

    def __invert__(self) -> torch.Tensor:
        return ~self.full()

    def __eq__(self, other: Any) -> Any:
        return self.full() == other

    __hash__ = None  # type: ignore[assignment]


def pad_rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """(R, N, ...) zero-padded to (R, n, ...) along the point axis."""
    extra = n - int(t.shape[1])
    if extra == 0:
        return t
    return F.pad(t, (0, 0) * (t.ndim - 2) + (0, extra))  # one op (constant_pad_nd)


def pad_fit(fit: Fit, n: int) -> Fit:
    """``fit`` with ``inliers`` / ``residuals`` zero-padded to ``n`` points."""
    out = Fit(fit.kind, *(getattr(fit, k) for k in _FIT_TENSORS))
    out.inliers, out.residuals = pad_rows(fit.inliers, n), pad_rows(fit.residuals, n)
    return out


def pad_points(tensors: Sequence[torch.Tensor], n: Optional[int] = None,
               copy: bool = False) -> torch.Tensor:
    """(R_k, N_k, ...) tensors concatenated along rows, each zero-padded to ``n`` points (None:
    the widest); a single tensor of width ``n`` is returned as it is (``copy``: as a copy)."""
    n = max(int(t.shape[1]) for t in tensors) if n is None else n
    if len(tensors) == 1 and int(tensors[0].shape[1]) == n and not copy:
        return tensors[0]
    return torch.cat([pad_rows(t, n) for t in tensors])


def concat_fits(fits: Sequence[Fit], n: Optional[int] = None) -> Fit:
    """The fits of several row blocks (one kind) as one Fit: rows concatenated, ``inliers`` /
    ``residuals`` zero-padded to ``n`` points (None: the widest, :func:`pad_points`); a single
    fit of width ``n`` is returned as it is."""
    n = max(int(f.inliers.shape[1]) for f in fits) if n is None else n
    if len(fits) == 1 and int(fits[0].inliers.shape[1]) == n:
        return fits[0]
    return Fit(fits[0].kind, *(pad_points([getattr(f, k) for f in fits], n)
                               if k in ("inliers", "residuals")
                               else torch.cat([getattr(f, k) for f in fits]) for k in _FIT_TENSORS))


#: a run of rows of one output of :class:`RowLayout`: (source index, first row, row count); a
#: source index of -1 gives rows of zeros
RowRun = Tuple[int, int, int]


class RowLayout:
    """Rows of several (M_i, W_i, ...) source tensors rearranged into B outputs (R_k, N_k, ...)
    with one gather per tensor, whatever B: how the rows of several clips, scales and pair sets
    are cut, padded and stacked without a Python loop of tensor ops over them.

    Output ``k`` is its ``runs`` (:data:`RowRun`) one after the other, every row zero-padded
    (or cut) to the output's width ``N_k``; a run of source ``-1`` is rows of zeros. The index
    is built once (a fixed number of ops) and serves every tensor of the same row layout
    (x1, x2, mask, scores of Correspondences). Host work only in ``__init__`` besides one
    host-to-device copy of the (3, R) row table.

    Args:
        src_shapes: (M_i, W_i) rows and width of every source.
        outputs: per output, (runs, N_k).
        device: where the sources (and the index) live.

    >>> lay = RowLayout([(2, 3), (1, 1)], [([(0, 1, 1), (1, 0, 1)], 2), ([(-1, 0, 1)], 1)], "cpu")
    >>> a, b = lay.gather([torch.arange(6.).view(2, 3), torch.full((1, 1), 9.)])
    >>> a.tolist(), b.tolist()
    ([[3.0, 4.0], [9.0, 0.0]], [[0.0]])
    """

    def __init__(self, src_shapes: Sequence[Tuple[int, int]],
                 outputs: Sequence[Tuple[Sequence[RowRun], int]], device: Any) -> None:
        offs, at = [], 0
        for m, w in src_shapes:
            offs.append(at)
            at += int(m) * int(w)
        self.num_sources, zero = len(src_shapes), at  # the zero slot after the sources
        starts: List[int] = []  # per output row: source start, source width, output start
        widths: List[int] = []
        out_at: List[int] = []
        self.shapes: List[Tuple[int, int]] = []
        pos = 0
        for runs, n in outputs:
            rows = 0
            for i, first, count in runs:
                w = int(src_shapes[i][1]) if i >= 0 else 0
                for r in range(int(first), int(first) + int(count)):
                    starts.append(offs[i] + r * w if i >= 0 else zero)
                    widths.append(w)
                    out_at.append(pos)
                    pos += int(n)
                rows += int(count)
            self.shapes.append((rows, int(n)))
        self.length, self.zero = pos, zero
        table = to_device([starts, widths, out_at], device, torch.long)
        idx = torch.arange(pos, device=table.device)
        #: (L,) long: the output row (over all outputs) of every gathered element
        self.row = torch.bucketize(idx, table[2], right=True) - 1
        col = idx - table[2].index_select(0, self.row)
        src = table[0].index_select(0, self.row) + col
        self.index = torch.where(col < table[1].index_select(0, self.row), src,
                                 torch.full_like(src, zero))

    def flat(self, sources: Sequence[torch.Tensor]) -> torch.Tensor:
        """(L, ...) every output's elements, output after output (sources (M_i, W_i, ...))."""
        if len(sources) != self.num_sources:
            raise ShapeError(f"RowLayout has {self.num_sources} sources, got {len(sources)}")
        tail = tuple(sources[0].shape[2:])
        buf = torch.cat([s.reshape((-1,) + tail) for s in sources]
                        + [sources[0].new_zeros((1,) + tail)])
        return buf.index_select(0, self.index)

    def split(self, flat: torch.Tensor) -> List[torch.Tensor]:
        """(L, ...) -> B outputs (R_k, N_k, ...) (views of ``flat``, each contiguous)."""
        tail = tuple(flat.shape[1:])
        parts = flat.split([r * n for r, n in self.shapes])
        return [p.view((r, n) + tail) for p, (r, n) in zip(parts, self.shapes)]

    def gather(self, sources: Sequence[torch.Tensor]) -> List[torch.Tensor]:
        """:meth:`split` of :meth:`flat`: B outputs (R_k, N_k, ...)."""
        return self.split(self.flat(sources))
