"""What every geocon_torch Metric class shares: the "no data" states and warning, and reads
synced under torch.distributed.

Convention (see :mod:`geocon_torch.metrics.functional._common`): a value no clip / sample
produced is NaN (never None, never 0); ``num_not_applicable`` and ``num_error`` count why
(``sum`` states); ``reasons`` keeps the first reason met on each rank (UTF-8 codes, a ``cat``
state, so it survives compute groups, ``merge_state`` and DDP sync); ``compute()`` warns with
the counts and that first reason whenever it returns a NaN.

``metric(batch)`` (torchmetrics' forward) accumulates exactly as ``metric.update(batch)``: the
running sums added with :func:`in_order_sum` stay bit for bit equal and ``reasons`` keeps one
entry (:meth:`GeoConMetric._reduce_states`).
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
from ..errors import ConfigError
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


def _key_hex(key: Tensor) -> str:
    """An (8,) ``protocol_key`` (bytes 0-255) as 16 hex digits (one host read)."""
    return bytes(int(b) for b in key.reshape(-1).tolist()).hex()


def _protocol_text(settings: Sequence[Any]) -> str:
    """The JSON text of a protocol's ``settings`` (what :func:`_protocol_digest` hashes)."""
    return json.dumps(list(settings), sort_keys=True, default=str)


def _protocol_digest(text: str) -> bytes:
    """The 8 bytes of a protocol key: the first bytes of the SHA-256 of its settings' text."""
    return hashlib.sha256(text.encode()).digest()[:8]


def _settings_diff(theirs: Optional[str], ours: str, shown: int = 6, cut: int = 200,
                   names: Sequence[str] = ("theirs", "this metric's")) -> str:
    """Both protocols' settings (the JSON texts of :meth:`GeoConMetric._add_protocol_state`),
    for a ConfigError: the differing entries (at most ``shown``, as paths into the settings
    list: ``[0].gvgc.ratio``) when both are known, and ``ours`` (cut at ``cut`` characters).
    ``names``: what the message calls the two sides."""
    mine = ours if len(ours) <= cut else ours[:cut] + " ..."
    if theirs is None:
        return f"their settings are not recorded; {names[1]} are {mine}"

    def leaves(value: Any, path: str = "") -> Dict[str, Any]:
        if isinstance(value, (dict, list)):
            items = value.items() if isinstance(value, dict) else enumerate(value)
            fmt = ".{}" if isinstance(value, dict) else "[{}]"
            return {k: v for key, item in items
                    for k, v in leaves(item, path + fmt.format(key)).items()}
        return {path: value}

    a, b = leaves(json.loads(theirs)), leaves(json.loads(ours))
    diff = [f"{k}: {a.get(k, '(none)')!r} vs {b.get(k, '(none)')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k, ...) != b.get(k, ...)]
    more = f" (+{len(diff) - shown} more)" if len(diff) > shown else ""
    return (f"settings differ ({names[0]} vs {names[1]}) at {', '.join(diff[:shown])}{more}; "
            f"{names[1]} are {mine}")


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
    protocol_key_min: Tensor

    def _add_protocol_state(self, *settings: Any) -> None:
        """A constant state ``protocol_key`` (8,) int64 (the bytes 0-255 of a hash of
        ``settings``: what changes the states' numbers). torchmetrics' ``MetricCollection``
        puts metrics whose states are equal after their first update into one compute group
        and then updates only one of them: right for classes that share one analysis (the
        epipolar trio, the background family), wrong for two metrics scored with different
        settings (e.g. working sizes), which would share numbers after a batch in which every
        clip was not_applicable. Their keys differ, so they are never grouped. ``max``-reduced,
        with a ``min``-reduced copy ``protocol_key_min``: under DDP both are equal only when
        every rank holds the same key, else the sync raises ConfigError on every rank
        (:meth:`_sync_dist`). Neither is persistent, even under ``persistent(True)`` (no
        checkpoint key: :meth:`persistent`). A checkpoint records the key in its metadata
        instead (:meth:`state_dict`), and states of another protocol are refused
        (:meth:`_check_protocol`)."""
        text = _protocol_text(settings)
        digest = list(_protocol_digest(text))
        self._protocol = text  # the settings, to name them in a ConfigError
        self.add_state("protocol_key", default=torch.tensor(digest, dtype=torch.long),
                       dist_reduce_fx="max")
        self.add_state("protocol_key_min", default=torch.tensor(digest, dtype=torch.long),
                       dist_reduce_fx="min")

    def _add_no_data_states(self) -> None:
        for name in ("num_not_applicable", "num_error"):
            self.add_state(name, default=torch.tensor(0, dtype=torch.long), dist_reduce_fx="sum")
        self._add_cat_state("reasons", torch.float32)  # encode_reason's codes

    def _add_cat_state(self, name: str, dtype: torch.dtype) -> None:
        """A ``cat`` list state ``name`` whose entries are 1-D tensors of ``dtype``. Its dtype
        is recorded (``set_dtype`` changes the record): :meth:`_append` adds entries in it, and
        a rank that saw no batch gathers a zero-length tensor of it under DDP
        (:meth:`_sync_dist`)."""
        self.add_state(name, default=[], dist_reduce_fx="cat")
        self._cat_dtypes = {**getattr(self, "_cat_dtypes", {}), name: dtype}

    def _append(self, name: str, value: Tensor) -> None:
        """Append the 1-D ``value`` to the ``cat`` state ``name`` in its recorded dtype (no copy
        when it already has it)."""
        getattr(self, name).append(value.to(self._cat_dtypes[name]))

    def _add_in_order(self, name: str, values: Tensor) -> None:
        """State ``name`` (0-d) plus the (N,) ``values`` one after the other
        (:func:`in_order_sum`). The prior state, the values and the new state are kept (the
        last batch only), so that forward's merge of a batch state re-adds the values in order
        (:meth:`_reduce_states`)."""
        prior = getattr(self, name)
        total = in_order_sum(prior, values)
        setattr(self, name, total)
        self._in_order_terms = {**getattr(self, "_in_order_terms", {}),
                                name: (prior, values.detach(), total)}

    def _apply(self, fn: Callable[[Tensor], Tensor], exclude_state: Sequence[str] = "") -> Any:
        """torchmetrics' ``_apply`` (states, defaults, cached results, device) with the dtype
        conversion taken out (:func:`_device_only`) unless it comes from ``set_dtype``.
        torchmetrics 1.9 guards ``.half()`` / ``.float()`` / ``.type()`` by the name of ``fn``
        only, so ``Module.to(dtype)`` cast the float64 sums (Lightning-AI/torchmetrics#2314):
        AdaDFRC's pooled mean came out 0.64 instead of 2.29 in bfloat16. ``set_dtype``
        converts the floating states only: the int64 counts and ``protocol_key`` stay exact."""
        if self._dtype_convert:  # set_dtype: convert, and record the cat states' new dtype
            def floats_only(t: Tensor) -> Tensor:
                return fn(t) if t.is_floating_point() else t
            self._cat_dtypes = {name: floats_only(torch.zeros(0, dtype=dtype)).dtype
                                for name, dtype in getattr(self, "_cat_dtypes", {}).items()}
            return super()._apply(floats_only, exclude_state)
        dtype = self._dtype
        out = super()._apply(_device_only(fn), exclude_state)
        self._dtype = dtype  # torchmetrics sets it from a float32 probe of fn
        return out

    def _sync_dist(self, dist_sync_fn: Callable = gather_all_tensors,
                   process_group: Optional[Any] = None) -> None:
        """torchmetrics' sync, with every ``cat`` state's entries in its recorded dtype first
        and an empty one given a zero-length tensor of it: torchmetrics stands in the metric's
        dtype (float32), and a rank that saw no batch then gathered float32 against another
        rank's float64 values, which aborts the process (gloo: "Received data size doesn't
        match expected size"); so did entries of another dtype than the record (a merged
        state, or entries from before a ``set_dtype``).

        Then the protocol check: ranks whose metrics were built with different settings (a
        per-rank config) hold different keys, so the ``max`` and ``min`` reductions differ
        (every rank sees the same reduced keys). Every rank then gathers the settings' texts
        (one more gather, on every rank alike), puts its local states back and raises the same
        ConfigError; before, the states of both protocols were pooled silently."""
        for name, dtype in getattr(self, "_cat_dtypes", {}).items():
            state = getattr(self, name)
            if isinstance(state, list):
                setattr(self, name, [v.to(dtype) for v in state] if state else
                        [torch.zeros(0, dtype=dtype, device=self.device)])
        super()._sync_dist(dist_sync_fn, process_group)
        if "protocol_key_min" in self._defaults and not torch.equal(self.protocol_key,
                                                                     self.protocol_key_min):
            self._refuse_mixed_protocols(dist_sync_fn, process_group)

    def _refuse_mixed_protocols(self, dist_sync_fn: Callable,
                                process_group: Optional[Any]) -> None:
        """Raise the ConfigError of :meth:`_sync_dist` (one text on every rank: each rank's
        settings compared with rank 0's), after the local states are restored from
        torchmetrics' pre-sync cache (the metric is left unsynced)."""
        mine = torch.tensor(list(self._protocol.encode()), dtype=torch.uint8,
                            device=self.protocol_key.device)
        try:
            texts: Optional[List[str]] = [
                bytes(t.reshape(-1).tolist()).decode(errors="replace")
                for t in dist_sync_fn(mine, group=process_group or self.process_group)]
        except Exception:  # a custom dist_sync_fn that cannot gather bytes: name no settings
            texts = None
        keys = f"{_key_hex(self.protocol_key_min)} ... {_key_hex(self.protocol_key)}"
        for attr, value in (getattr(self, "_cache", None) or {}).items():
            setattr(self, attr, value)
        if texts:
            differ = "; ".join(_settings_diff(t, texts[0], names=(f"rank {r}'s", "rank 0's"))
                               for r, t in enumerate(texts) if t != texts[0])
        else:
            differ = "the ranks' settings could not be gathered"
        raise ConfigError(
            f"{type(self).__name__}: the ranks of the process group hold metrics of different "
            f"settings (protocol keys {keys} after the sync's min / max reduction): {differ}. "
            f"States of different settings cannot be pooled: build the metric with the same "
            f"settings on every rank")

    def _forward_reduce_state_update(self, *args: Any, **kwargs: Any) -> Any:
        """torchmetrics' forward (one update of the batch on reset states, then
        :meth:`_reduce_states` with the global states), marked as such for
        :meth:`_reduce_states`."""
        self._merging_batch = True
        try:
            return super()._forward_reduce_state_update(*args, **kwargs)
        finally:
            self._merging_batch = False

    def _reduce_states(self, incoming_state: Dict[str, Any]) -> None:
        """torchmetrics' reduction (``merge_state`` and forward's merge of the batch state into
        ``incoming_state``, the global one), except in forward: each :func:`in_order_sum`
        state becomes the global state plus the batch's values in order (not global + batch
        sum, which rounds differently), and ``reasons`` keeps the global entry when there is
        one. ``metric(x)`` then leaves the states ``update(x)`` leaves, bit for bit."""
        forward = getattr(self, "_merging_batch", False)
        redo = {name: terms for name, terms in getattr(self, "_in_order_terms", {}).items()
                if forward and getattr(self, name) is terms[2]}  # the state is prior + values
        super()._reduce_states(incoming_state)
        for name, (prior, values, _) in redo.items():
            setattr(self, name, in_order_sum(incoming_state[name] + prior, values))
        if forward and "reasons" in self._defaults and len(incoming_state["reasons"]):
            self.reasons = incoming_state["reasons"]

    def persistent(self, mode: bool = False) -> None:
        """torchmetrics' switch of the states saved in ``state_dict``; ``protocol_key`` (and
        ``protocol_key_min``) is never saved (a constant of the settings: the checkpoint's
        metadata records it)."""
        super().persistent(mode)
        for name in ("protocol_key", "protocol_key_min"):
            if name in self._persistent:
                self._persistent[name] = False

    def state_dict(self, destination: Any = None,  # type: ignore[override]
                   prefix: str = "", keep_vars: bool = False) -> Dict[str, Any]:
        """torchmetrics' ``state_dict``; when it holds states (``persistent(True)``), its
        metadata (kept by ``torch.save``) records ``protocol_key`` (hex) and the settings,
        which :meth:`_load_from_state_dict` checks."""
        out = super().state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        metadata = getattr(out, "_metadata", None)
        saved = any(prefix + name in out for name in self._defaults)
        if saved and metadata is not None and hasattr(self, "protocol_key"):
            metadata.setdefault(prefix[:-1], {}).update(
                protocol_key=_key_hex(self.protocol_key), protocol=self._protocol)
        return out

    def _load_from_state_dict(self, state_dict: Dict[str, Any], prefix: str,
                              local_metadata: Dict[str, Any], *args: Any, **kwargs: Any) -> None:
        """Load the states, after a check of the protocol they were scored with: the key in
        the metadata (:meth:`state_dict`) or a ``protocol_key`` state (a checkpoint written
        before it left the checkpoints). Raises ConfigError when it differs from this
        metric's (nothing is loaded then); a checkpoint without either loads as before."""
        if hasattr(self, "protocol_key"):
            saved = state_dict.pop(prefix + "protocol_key", None)
            state_dict.pop(prefix + "protocol_key_min", None)
            if saved is None and any(prefix + name in state_dict for name in self._defaults):
                saved = local_metadata.get("protocol_key")
            if saved is not None:
                where = f" (at {prefix[:-1]!r})" if prefix else ""
                self._check_protocol(saved, local_metadata.get("protocol"),
                                     f"the state_dict{where}")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args, **kwargs)

    def merge_state(self, incoming_state: Any) -> None:
        """torchmetrics' ``merge_state``, refused (ConfigError) for states of another protocol
        (``protocol_key``); a dict without ``protocol_key`` (a ``state_dict``: the key is not
        saved) merges as this metric's protocol. This metric keeps its own key (an accepted
        older key of the same protocol, :meth:`_same_legacy_protocol`, is not merged in)."""
        if isinstance(incoming_state, dict):
            self._check_protocol(incoming_state.get("protocol_key", self.protocol_key), None,
                                 "the incoming state")
        elif isinstance(incoming_state, type(self)):
            self._check_protocol(incoming_state.protocol_key, incoming_state._protocol,
                                 f"the incoming {type(incoming_state).__name__}")
            incoming_state = incoming_state.metric_state
        if isinstance(incoming_state, dict) and "protocol_key" in self._defaults:
            incoming_state = {**incoming_state, "protocol_key": self.protocol_key,
                              "protocol_key_min": self.protocol_key_min}
        super().merge_state(incoming_state)

    def _check_protocol(self, key: Any, settings: Optional[str], source: str) -> None:
        """ConfigError unless ``key`` (an (8,) tensor or its hex string) is this metric's
        ``protocol_key``: states scored with other settings must not be pooled with these."""
        theirs = key if isinstance(key, str) else _key_hex(key)
        ours = _key_hex(self.protocol_key)
        if theirs != ours and not self._same_legacy_protocol(theirs, settings):
            raise ConfigError(
                f"{type(self).__name__}: {source} was scored under another protocol (key "
                f"{theirs}) than this metric (key {ours}): "
                f"{_settings_diff(settings, self._protocol)}. States of different settings "
                f"cannot be pooled: build the metric with the settings of those states, or "
                f"leave them out")

    def _same_legacy_protocol(self, key: str, settings: Optional[str]) -> bool:
        """Whether ``key`` (16 hex digits), with its recorded ``settings`` text (None: not
        recorded), is this metric's protocol as an older version keyed it. None here; a
        class whose key changed form overrides it (BackgroundConsistency: the CUDA index)."""
        return False

    def _record(self, num_not_applicable: int, num_error: int, reason: Optional[str]) -> None:
        """Add the batch's counts; keep its reason when this rank has none yet."""
        self.num_not_applicable += num_not_applicable
        self.num_error += num_error
        if reason and not len(self.reasons):
            self._append("reasons", encode_reason(reason, self.num_error.device))

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
