"""Masked reductions over padded batches (NaN-free: empty rows give ``fill`` and a False flag),
lookups at pixel coordinates, and host data moved to the device without a stream sync."""
from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch

DeviceLike = Union[None, str, torch.device]


def to_device(data: Any, device: DeviceLike, dtype: Optional[torch.dtype] = None
              ) -> torch.Tensor:
    """Host data (Python numbers / lists, a NumPy array or a tensor) as a tensor on ``device``
    (None: where it is) in ``dtype`` (None: its own) without a host sync: on CUDA the host copy
    is pinned and sent with ``non_blocking=True``. A plain ``torch.tensor(data, device=cuda)``
    or ``cpu_tensor.to(cuda)`` copies from pageable memory, which waits for the stream to drain
    exactly like a host read; the pinned copy is queued behind the kernels already launched."""
    t = data if isinstance(data, torch.Tensor) else torch.as_tensor(data, dtype=dtype)
    if dtype is not None and t.dtype != dtype:
        t = t.to(dtype)
    dev = t.device if device is None else torch.device(device)
    if t.device.type != "cpu":  # already device data: a plain (ordered, safe) move
        return t.to(dev)
    if dev.type == "cuda":
        t = t.pin_memory()
    return t.to(dev, non_blocking=True)


_CONSTANTS: Dict[Tuple[int, torch.device, Optional[torch.dtype]],
                 Tuple[torch.Tensor, torch.Tensor]] = {}


def constant_on(t: torch.Tensor, device: DeviceLike, dtype: Optional[torch.dtype] = None
                ) -> torch.Tensor:
    """A module-level constant ``t`` (a host tensor that lives as long as its module) on
    ``device`` in ``dtype``, copied once per process and device, not once per call (built
    outside inference mode, so autograd can use it later even if the first call ran inside)."""
    dev = torch.device(device) if device is not None else t.device
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    key = (id(t), dev, dtype)
    hit = _CONSTANTS.get(key)
    if hit is None or hit[0] is not t:
        with torch.inference_mode(False):
            hit = (t, to_device(t, dev, dtype))
        _CONSTANTS[key] = hit
    return hit[1]


def finite(x: torch.Tensor) -> torch.Tensor:
    """``torch.isfinite(x)`` of a floating tensor in two elementwise ops: ``x - x == 0`` (only
    inf - inf and NaN give NaN), where ``torch.isfinite`` dispatches four (abs, ne, eq, mul)."""
    return (x - x) == 0


#: elements of one chunk of :func:`spatial_counts` (its int64 temporary: 32 MiB)
COUNT_CHUNK_ELEMENTS = 2 ** 22


def spatial_counts(masks: Any, max_elements: int = COUNT_CHUNK_ELEMENTS) -> torch.Tensor:
    """True pixels of each (H, W) mask of ``masks`` (..., H, W) bool, exact: (...) int64 on the
    masks' device. A bool sum over dims first converts its input to int64 (8 bytes a pixel: 255
    objects x 32 frames x 256 x 256 took 4 GB over 0.5 GB of masks), so dense masks are summed
    ``max_elements`` pixels of whole masks at a time; a lazy mask type (``BlockMasks``) sums
    with its own chunks."""
    if not isinstance(masks, torch.Tensor):
        return masks.sum((-1, -2))
    lead, hw = tuple(masks.shape[:-2]), int(masks.shape[-1]) * int(masks.shape[-2])
    flat = masks.reshape(-1, hw)
    rows = max(1, int(max_elements) // max(1, hw))
    if flat.shape[0] <= rows:
        return flat.sum(-1).view(lead)
    return torch.cat([flat[s:s + rows].sum(-1)
                      for s in range(0, int(flat.shape[0]), rows)]).view(lead)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int = -1,
                fill: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Mean of ``x`` over ``dim`` where ``mask`` is True.

    Args:
        x: (..., N) values; mask: same shape, bool.
    Returns:
        (mean, nonempty): mean has ``dim`` reduced (``fill`` where no entry is valid), nonempty is
        the bool flag of rows with at least one valid entry.
    """
    m = mask.to(x.dtype)
    count = m.sum(dim)
    total = torch.where(mask, x, torch.zeros_like(x)).sum(dim)
    nonempty = count > 0
    mean = torch.where(nonempty, total / count.clamp_min(1), torch.full_like(total, fill))
    return mean, nonempty


def sorted_valid(x: torch.Tensor, mask: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """The valid (``mask`` True) entries of every row of ``x`` (..., N) in ascending order,
    first, and their count (...,) long.

    The invalid entries follow them as NaN (floating dtypes; the dtype's largest value for
    integers): ``torch.sort`` puts NaN after +inf, so the first ``count`` entries are the kept
    values sorted as ``torch.sort`` sorts them alone (a kept +inf or NaN included, NaN last),
    whatever the padding, and so is every quantile of them (:func:`quantile_of_sorted`).
    """
    big = float("nan") if x.is_floating_point() else torch.iinfo(x.dtype).max
    return torch.where(mask, x, torch.full_like(x, big)).sort(-1).values, mask.sum(-1)


def quantile_of_sorted(vals: torch.Tensor, n: torch.Tensor, q: Union[float, torch.Tensor],
                       fill: float = 0.0, interpolation: str = "linear") -> torch.Tensor:
    """Quantile ``q`` (a float, or a (...,) tensor: one per row; clamped to [0, 1]) of the first
    ``n`` entries of each row of :func:`sorted_valid`'s ``vals`` (..., N), numpy's default
    linear interpolation (``interpolation="lower"``: the lower of the two neighbours, as
    ``torch.median`` at q = 0.5); ``fill`` for rows with ``n == 0``."""
    if vals.shape[-1] == 0:
        return torch.full(vals.shape[:-1], fill, dtype=vals.dtype, device=vals.device)
    if isinstance(q, torch.Tensor):
        q = q.to(dtype=torch.float64, device=vals.device).clamp(0.0, 1.0)
    else:  # a Python float stays one: no host-to-device copy
        q = min(max(float(q), 0.0), 1.0)
    pos = (n.clamp_min(1) - 1).to(torch.float64) * q
    # a float fill as a scalar (no full_like op); an integer tensor keeps its dtype
    fill_v = fill if vals.is_floating_point() else torch.tensor(fill, dtype=vals.dtype)
    if interpolation == "lower":
        v_lo = vals.gather(-1, pos.floor().long().unsqueeze(-1)).squeeze(-1)
        return torch.where(n > 0, v_lo, fill_v)
    lo = pos.floor()  # both neighbours in one gather
    v_lo, v_hi = vals.gather(-1, torch.stack([lo, pos.ceil()], -1).long()).unbind(-1)
    frac = (pos - lo).to(vals.dtype) if vals.is_floating_point() else 0
    return torch.where(n > 0, v_lo + (v_hi - v_lo) * frac, fill_v)


def masked_quantile(x: torch.Tensor, mask: torch.Tensor, q: float, dim: int = -1,
                    fill: float = 0.0) -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantile ``q`` in [0, 1] of the valid entries of ``x`` along ``dim`` (numpy's default
    linear interpolation). Rows with no valid entry give ``fill``.
    Returns (value, nonempty) as :func:`masked_mean`.
    """
    vals, n = sorted_valid(x.movedim(dim, -1), mask.movedim(dim, -1))
    return quantile_of_sorted(vals, n, q, fill), n > 0


def masked_median(x: torch.Tensor, mask: torch.Tensor, dim: int = -1, fill: float = 0.0
                  ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Median of valid entries along ``dim`` (mean of the two middle values for even counts,
    as ``numpy.median``). Returns (median, nonempty)."""
    return masked_quantile(x, mask, 0.5, dim=dim, fill=fill)


def group_index(groups: Sequence[Sequence[int]], device: Union[None, str, torch.device] = None
                ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(G, L) long row numbers of G groups of rows given on the host (padded with row 0 to the
    largest group, L >= 1) and the (G, L) bool membership mask: one host-to-device copy each,
    no sync. Feeds :func:`grouped_quantiles`.

    >>> idx, member = group_index([[4, 2], [], [7]])
    >>> idx.tolist(), member.tolist()
    ([[4, 2], [0, 0], [7, 0]], [[True, True], [False, False], [True, False]])
    """
    width = max([len(g) for g in groups] + [1])
    idx = [list(g) + [0] * (width - len(g)) for g in groups]
    member = [[True] * len(g) + [False] * (width - len(g)) for g in groups]
    return (to_device(idx, device, torch.long).reshape(len(groups), width),
            to_device(member, device, torch.bool).reshape(len(groups), width))


def grouped_quantiles(values: torch.Tensor, valid: torch.Tensor, index: torch.Tensor,
                      member: torch.Tensor, qs: Sequence[float] = (0.5,),
                      interpolation: str = "linear") -> Tuple[torch.Tensor, torch.Tensor]:
    """Quantiles of the valid entries of row groups, for K series at once (numpy's linear
    interpolation, the order statistics of :func:`masked_quantile` over each group's rows).

    Args:
        values: (K, R) K series over R rows; valid: (K, R) or (R,) bool.
        index, member: (G, L) of :func:`group_index` (rows of every group).
        qs: Q quantiles in [0, 1]; interpolation: as :func:`quantile_of_sorted`.
    Returns:
        (quantiles (Q, K, G): 0 for a group with no valid row, counts (K, G) long of valid rows).
    """
    vals = values[:, index]  # (K, G, L)
    ok = valid.expand_as(values)[:, index] & member
    srt, n = sorted_valid(vals, ok)
    return torch.stack([quantile_of_sorted(srt, n, float(q), interpolation=interpolation)
                        for q in qs]), n


def sample_at_pixels(img: torch.Tensor, xy: torch.Tensor, mode: str = "bilinear") -> torch.Tensor:
    """Sample ``img`` (N, C, H, W) at pixel positions ``xy`` (N, Ho, Wo, 2) given as (x, y) with
    pixel centres at integers; positions past the border take the border value (as
    ``cv2.remap(..., BORDER_REPLICATE)``). Returns (N, C, Ho, Wo) in ``img``'s dtype (the
    normalising factors reach ``xy``'s device as a pinned copy: no stream sync on CUDA)."""
    h, w = img.shape[-2:]
    scale = to_device([2.0 / max(w - 1, 1), 2.0 / max(h - 1, 1)], xy.device, xy.dtype)
    return torch.nn.functional.grid_sample(img, (xy * scale - 1.0).to(img.dtype), mode=mode,
                                           padding_mode="border", align_corners=True)


def sample_patches(img: torch.Tensor, centres: torch.Tensor, offsets: torch.Tensor
                   ) -> torch.Tensor:
    """Bilinear samples of ``img (B, C, H, W)`` at ``centres (B, N, 2)`` px + ``offsets (K, 2)``
    px -> (B, C, N, K); pixel centres at integers, the border replicated (as ``cv2.remap(...,
    BORDER_REPLICATE)``)."""
    return sample_at_pixels(img, centres[:, :, None, :] + offsets.to(centres))


def mask_at_pixels(mask: torch.Tensor, xy: torch.Tensor,
                   frames: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Nearest-pixel lookup of a bool mask at points: True where the pixel nearest to ``xy``
    (..., 2) (pixel centres at integers) is inside the image and True in the mask.

    ``mask`` is (H, W), or (T, H, W) with ``frames`` (long, broadcastable to ``xy[..., 0]``)
    giving each point's frame. Returns (...) bool on ``xy``'s device.
    """
    h, w = mask.shape[-2:]
    ix = xy[..., 0].round().long()
    iy = xy[..., 1].round().long()
    inside = (ix >= 0) & (ix < w) & (iy >= 0) & (iy < h)
    flat = iy.clamp(0, h - 1) * w + ix.clamp(0, w - 1)
    if frames is not None:
        flat = flat + frames.to(xy.device).long() * (h * w)
    return mask.to(xy.device).reshape(-1)[flat] & inside
