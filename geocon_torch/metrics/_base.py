"""What every geocon_torch Metric class shares: the "no data" states and warning, and reads
synced under torch.distributed.

Convention (see :mod:`geocon_torch.metrics.functional._common`): a value no clip / sample
produced is NaN (never None, never 0); ``num_not_applicable`` and ``num_error`` count why
(``sum`` states); ``reasons`` keeps the first reason met on each rank (UTF-8 codes, a ``cat``
state, so it survives compute groups, ``merge_state`` and DDP sync); ``compute()`` warns with
the counts and that first reason whenever it returns a NaN.
"""
from __future__ import annotations

import hashlib
import json
from typing import Any, Callable, Dict, List, Optional, Sequence, TypeVar

import torch
from torch import Tensor
from torchmetrics import Metric
from torchmetrics.utilities.distributed import gather_all_tensors

from .._tensor_utils import to_device
from .functional._common import ERROR, NOT_APPLICABLE, encode_reason, first_reason, warn_no_data

T = TypeVar("T")


def _sequential_sum(total: Tensor, values: Tensor) -> Tensor:
    """``((total + v0) + v1) + ...``: N adds of the (N,) ``values`` (cast to ``total``'s dtype)
    to the 0-d ``total``, each rounded in that dtype (CPU tensors: N small ops)."""
    out = total.reshape(())
    for v in values.to(total.dtype).reshape(-1).unbind(0):
        out = out + v
    return out


def in_order_sum(total: Tensor, values: Tensor) -> Tensor:
    """``total`` (0-d) plus the (N,) ``values`` added one after the other, as N updates of one
    clip (or sample) each would add them, bit for bit on every device (``values.sum()`` rounds
    otherwise: a batch's state then differed from the clip-by-clip one in the last bit).

    On the CPU, a float64 (or integer) ``total``: one ``cumsum``, a sequential loop that
    accumulates in the state's dtype; other dtypes: :func:`_sequential_sum` (the CPU's float32 /
    half cumsum accumulates in float64 and rounds once). On another device the sum is taken on
    the host (:func:`_on_host`: CUDA's cumsum is a parallel, tree-shaped scan, and N one-element
    kernels would cost more than the two copies). Returns a 0-d tensor on ``total``'s device,
    of its dtype (an integer ``total`` on the CPU: int64, as ``cumsum`` gives)."""
    if total.device.type != "cpu":
        return _on_host(total, values)
    exact_cumsum = total.dtype == torch.float64 or not (total.dtype.is_floating_point
                                                         or total.dtype.is_complex)
    if exact_cumsum:
        return torch.cat([total.reshape(1), values.to(total.dtype)]).cumsum(0)[-1]
    return _sequential_sum(total, values)


def _on_host(total: Tensor, values: Tensor) -> Tensor:
    """:func:`in_order_sum` of device tensors taken on the CPU (one copy of ``total`` and one
    of ``values``: host reads, once per metric update) and sent back as a pinned copy."""
    host = in_order_sum(total.detach().cpu(), values.detach().cpu())
    return to_device(host, total.device)


def _device_only(fn: Callable[[Tensor], Tensor]) -> Callable[[Tensor], Tensor]:
    """``fn`` (what ``nn.Module.to`` / ``.cuda`` / ``.half`` ... apply to each tensor) without
    its dtype conversion: a tensor whose dtype ``fn`` would change (probed on a zero-length
    tensor of its dtype and device, so nothing is converted) only moves to the device ``fn``
    sends it to; any other tensor gets ``fn`` itself (device moves are unchanged)."""
    def apply(t: Tensor) -> Tensor:
        probe = fn(t.new_empty(0))
        return fn(t) if probe.dtype == t.dtype else t.to(device=probe.device)
    return apply


class GeoConMetric(Metric):
    """Base class: ``num_not_applicable`` / ``num_error`` / ``reasons`` states and helpers.

    A module conversion never changes the states' dtypes: ``model.to(torch.bfloat16)`` (what
    Lightning ``precision="bf16-true"`` / ``"16-true"`` and DeepSpeed do to a module tree),
    ``.half()``, ``.type(...)`` only move them between devices, so the float64 sums and
    per-clip values (and ``compute()``) stay float64. ``set_dtype`` (torchmetrics' explicit
    request) still converts them.
    """

    is_differentiable = False
    full_state_update = False

    num_not_applicable: Tensor
    num_error: Tensor
    reasons: List[Tensor]
    protocol_key: Tensor

    def _add_protocol_state(self, *settings: Any) -> None:
        """A constant state ``protocol_key`` (8,) int64 (the bytes 0-255 of a hash of
        ``settings``: what changes the states' numbers). torchmetrics' ``MetricCollection``
        puts metrics whose states are equal after their first update into one compute group
        and then updates only one of them: right for classes that share one analysis (the
        epipolar trio, the background family), wrong for two metrics scored with different
        settings (e.g. working sizes), which would share numbers after a batch in which every
        clip was not_applicable. Their keys differ, so they are never grouped. ``max``-reduced:
        every rank holds the same key; not persistent (no checkpoint change)."""
        text = json.dumps(list(settings), sort_keys=True, default=str)
        digest = hashlib.sha256(text.encode()).digest()[:8]
        self.add_state("protocol_key", default=torch.tensor(list(digest), dtype=torch.long),
                       dist_reduce_fx="max")

    def _add_no_data_states(self) -> None:
        for name in ("num_not_applicable", "num_error"):
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self._add_cat_state("reasons", torch.float32)  # encode_reason's codes

    def _add_cat_state(self, name: str, dtype: torch.dtype) -> None:
        """A ``cat`` list state ``name`` whose entries are 1-D tensors of ``dtype``. Its dtype
        is recorded: a rank that saw no batch gathers a zero-length tensor of it under DDP
        (:meth:`_sync_dist`)."""
        self.add_state(name, default=[], dist_reduce_fx="cat")
        self._cat_dtypes = {**getattr(self, "_cat_dtypes", {}), name: dtype}

    def _apply(self, fn: Callable[[Tensor], Tensor], exclude_state: Sequence[str] = "") -> Any:
        """torchmetrics' ``_apply`` (states, defaults, cached results, device) with the dtype
        conversion taken out (:func:`_device_only`) unless it comes from ``set_dtype``.
        torchmetrics 1.9 guards ``.half()`` / ``.float()`` / ``.type()`` by the name of ``fn``
        only, so ``Module.to(dtype)`` cast the float64 sums (Lightning-AI/torchmetrics#2314):
        AdaDFRC's pooled mean came out 0.64 instead of 2.29 in bfloat16."""
        if self._dtype_convert:  # set_dtype: convert, and record the cat states' new dtype
            self._cat_dtypes = {name: fn(torch.zeros(0, dtype=dtype)).dtype
                                for name, dtype in getattr(self, "_cat_dtypes", {}).items()}
            return super()._apply(fn, exclude_state)
        dtype = self._dtype
        out = super()._apply(_device_only(fn), exclude_state)
        self._dtype = dtype  # torchmetrics sets it from a float32 probe of fn
        return out

    def _sync_dist(self, dist_sync_fn: Callable = gather_all_tensors,
                   process_group: Optional[Any] = None) -> None:
        """torchmetrics' sync, with each empty ``cat`` state given a zero-length tensor of its
        entries' dtype first: torchmetrics stands in the metric's dtype (float32), and a rank
        that saw no batch then gathers float32 against another rank's float64 values, which
        aborts the process (gloo: "Received data size doesn't match expected size")."""
        for name, dtype in getattr(self, "_cat_dtypes", {}).items():
            if isinstance(getattr(self, name), list) and not getattr(self, name):
                setattr(self, name, [torch.zeros(0, dtype=dtype, device=self.device)])
        super()._sync_dist(dist_sync_fn, process_group)

    def _record(self, num_not_applicable: int, num_error: int, reason: Optional[str]) -> None:
        """Add the batch's counts; keep its reason when this rank has none yet."""
        self.num_not_applicable += num_not_applicable
        self.num_error += num_error
        if reason and not len(self.reasons):
            self.reasons.append(encode_reason(reason, self.num_error.device))

    def _record_clips(self, status: Tensor, reason: Optional[str]) -> None:
        self._record(int((status == NOT_APPLICABLE).sum()), int((status == ERROR).sum()), reason)

    def first_reason(self) -> Optional[str]:
        """The first not_applicable / error reason (synced: call it on every rank)."""
        return self._synced(lambda: first_reason(self.reasons))

    _unit = "clip"

    def _warn_nan(self, out: Dict[str, Tensor], names: Sequence[str],
                  counts: Dict[str, Tensor]) -> None:
        """The one "no data" warning, when any of ``names`` in ``out`` is NaN (inside compute:
        the states are already synced)."""
        missing = [n for n in names if bool(torch.isnan(out[n]))]
        if missing:
            warn_no_data(type(self).__name__, missing, {k: int(v) for k, v in counts.items()},
                         first_reason(self.reasons), self._unit)

    def _synced(self, fn: Callable[[], T]) -> T:
        """Run ``fn`` on states synced over the process group, as ``compute()`` does (a
        collective under DDP: call it on every rank); plain call when already synced."""
        if self._is_synced:
            return fn()
        with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=self._to_sync,
                               should_unsync=self._should_unsync):
            return fn()

    def _plot_subset(self, val: Any, keys: Sequence[str], ax: Any = None) -> Any:
        """Plot the ``keys`` of a dict output (or of a list of them) with torchmetrics'
        ``_plot`` (bounds: ``plot_lower_bound`` / ``plot_upper_bound``)."""
        val = val if val is not None else self.compute()
        if isinstance(val, dict):
            val = {k: val[k] for k in keys}
        elif isinstance(val, (list, tuple)):
            val = [{k: v[k] for k in keys} for v in val]
        return self._plot(val, ax)
