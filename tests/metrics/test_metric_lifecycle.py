"""Metric classes over a long training run (audit s23 / metric_life): ``set_dtype`` with a DDP
sync, forward with a flow that requires grad, ``set_dtype`` on the int64 counts, forward's
accumulation against ``update``'s, the protocol key in checkpoints and merges, and half /
bfloat16 flow.

The epipolar analysis is replaced by fixed per-clip values (monkeypatched ``_epipolar_update``)
and AdaDFRC reads small random flows, so every default test is fast and compares exact
numbers."""
from __future__ import annotations

import copy
import io
import json
import warnings
from typing import Dict

import pytest
import torch
from torchmetrics import MetricCollection

import geocon_torch.metrics.epipolar as me
from geocon_torch.errors import ConfigError, ShapeError
from geocon_torch.metrics import AdaDFRC, BackgroundConsistency, EpipolarError
from geocon_torch.metrics import EpipolarInlierRate, FeatureMatchCoverage
from geocon_torch.metrics.functional import adadfrc
from geocon_torch.metrics.functional._common import ClipValues

NAN = float("nan")


def _fg(seed: int, pairs: int = 4, absent: int = 0) -> tuple:
    """AdaDFRC inputs: random flow (pairs, 2, 32, 32) * 3 px, masks (pairs, 2, 32, 32) of two
    overlapping squares; the first ``absent`` pairs hold no object (not applicable)."""
    g = torch.Generator().manual_seed(seed)
    flow = torch.randn(pairs, 2, 32, 32, generator=g) * 3
    masks = torch.zeros(pairs, 2, 32, 32, dtype=torch.bool)
    masks[absent:, 0, 2:20, 2:20] = True
    masks[absent:, 1, 12:30, 8:28] = True
    return flow, masks


def _quiet(fn):
    """``fn()`` without torchmetrics' / the package's no-data warnings."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


# ---------------------------------------------------------------------------------------------
# 1. set_dtype, then a 2-rank gloo sync with an empty or reason-less rank


def _set_dtype_worker(rank: int, init: str, out_path: str) -> None:
    """``ada64`` (set_dtype float64): a reason on rank 1 only, so rank 0's ``reasons`` is
    empty; ``ada32`` (set_dtype float32, torchmetrics' default dtype): rank 1 sees no batch,
    rank 0 appends float64 D values. Each rank writes its compute() outputs."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2)
    ada64, ada32 = AdaDFRC().set_dtype(torch.float64), AdaDFRC().set_dtype(torch.float32)
    ada64.update(*_fg(0, absent=0 if rank == 0 else 2))
    if rank == 0:
        ada32.update(*_fg(1))
    out = {name: {k: float(v) for k, v in m.compute().items()}
           for name, m in (("ada64", ada64), ("ada32", ada32))}
    out["ada64"]["first_reason"] = ada64.first_reason()
    with open(f"{out_path}.{rank}", "w") as fh:
        json.dump(out, fh)
    dist.barrier()
    dist.destroy_process_group()


def _sent_dtypes(metric) -> Dict[str, torch.dtype]:
    """The dtype of each tensor that ``metric``'s sync hands to all_gather (a recording
    stand-in for a 2-rank gather: every rank must send the same dtype, or gloo aborts)."""
    sent: Dict[str, torch.dtype] = {}

    def gather(t: torch.Tensor, group=None) -> list:
        sent[f"#{len(sent)}"] = t.dtype
        return [t, t]

    metric._sync_dist(gather)
    return sent


def test_set_dtype_states_send_one_dtype_whatever_a_rank_saw():
    """Fast check of finding 1 (no processes): a reason-less / batch-less rank sends its
    ``cat`` states in the dtypes a rank with a reason / values sends. Before: float64 vs
    float32 ``reasons`` (set_dtype float64), float32 vs float64 ``values`` (float32)."""
    for dtype in (torch.float64, torch.float32, torch.float16):
        quiet, seen = AdaDFRC().set_dtype(dtype), AdaDFRC().set_dtype(dtype)
        seen.update(*_fg(0, absent=2))  # values and a reason
        assert _sent_dtypes(quiet) == _sent_dtypes(seen), dtype
        assert seen.reasons[0].dtype == dtype and seen.values[0].dtype == dtype


@pytest.mark.slow
def test_set_dtype_then_a_two_rank_gloo_sync_with_an_empty_rank(tmp_path):
    """Before: gloo aborted the process (SIGABRT, "Received data size doesn't match"): the
    empty rank's stand-in had the recorded dtype, the other rank's entries their own. Now both
    ranks compute what one process computes from the same batches, in the requested dtype."""
    import torch.multiprocessing as mp

    out = tmp_path / "out"
    mp.spawn(_set_dtype_worker, args=(f"file://{tmp_path}/rdv", str(out)), nprocs=2,
             join=True)
    got = [json.loads((tmp_path / f"out.{r}").read_text()) for r in (0, 1)]
    assert got[0] == got[1]
    one64, one32 = AdaDFRC().set_dtype(torch.float64), AdaDFRC().set_dtype(torch.float32)
    one64.update(*_fg(0))
    one64.update(*_fg(0, absent=2))
    one32.update(*_fg(1))
    want64 = {k: float(v) for k, v in one64.compute().items()}
    want32 = {k: float(v) for k, v in one32.compute().items()}
    assert got[0]["ada64"]["num_samples"] == 12 and got[0]["ada64"]["num_not_applicable"] == 4
    assert got[0]["ada64"]["first_reason"] == one64.first_reason()
    assert got[0]["ada64"]["first_reason"].startswith("not_applicable: object absent")
    assert {k: v for k, v in got[0]["ada64"].items() if k != "first_reason"} == \
        pytest.approx(want64, rel=1e-12)
    assert got[0]["ada32"] == want32  # one rank's states: the same float32 numbers
    assert one32.values[0].dtype == torch.float32  # update appends in the requested dtype


# ---------------------------------------------------------------------------------------------
# 2. forward with a flow that requires grad


def test_adadfrc_forward_keeps_no_graph_in_its_states():
    """``metric(flow.requires_grad_(), masks)`` (torchmetrics runs forward's update with grad
    enabled). Before: ``values[-1]`` had a ``ToCopyBackward0`` grad_fn and deepcopy / clone /
    AveragedModel raised "Only Tensors created explicitly by the user (graph leaves)"."""
    from torch.optim.swa_utils import AveragedModel

    flow, masks = _fg(2)
    weight = torch.nn.Parameter(torch.tensor(1.0))
    metric = AdaDFRC()
    batch = metric(flow * weight, masks)  # a flow network's output
    assert not batch["pooled_adadfrc_mean"].requires_grad
    assert all(v.grad_fn is None and not v.requires_grad for v in metric.values)
    assert metric.sum_d.grad_fn is None
    copied, cloned = copy.deepcopy(metric), metric.clone()
    model = torch.nn.Module()
    model.metric, model.weight = metric, weight
    averaged = AveragedModel(model)
    reference = AdaDFRC()
    reference.update(flow, masks)
    want = reference.compute()
    for m in (metric, copied, cloned, averaged.module.metric):
        got = m.compute()
        assert all(torch.equal(got[k], want[k]) for k in want)
    assert int(want["num_samples"]) == 8


# ---------------------------------------------------------------------------------------------
# 3. set_dtype leaves the int64 counts and the protocol key alone


@pytest.mark.parametrize("dtype,start", [(torch.float16, 3000), (torch.bfloat16, 300)])
def test_set_dtype_converts_only_the_float_states(dtype, start):
    """A count past 2048 (float16) / 256 (bfloat16) loses increments in that dtype (spacing 2
    there): before, ``start`` + 7 samples read ``start`` + 8; now the counts stay int64."""
    metric = AdaDFRC()
    key = metric.protocol_key.clone()
    metric.count += start
    metric.set_dtype(dtype)
    assert metric.sum_d.dtype == dtype and metric._cat_dtypes["values"] == dtype
    for name in ("count", "num_not_applicable", "num_error", "protocol_key"):
        assert getattr(metric, name).dtype == torch.int64, name
    assert torch.equal(metric.protocol_key, key)
    flow, masks = _fg(3, pairs=4)
    metric.update(flow, masks[:, :1])  # 4 samples
    metric.update(flow[:3], masks[:3, :1])  # 3 samples
    out = _quiet(metric.compute)
    assert out["num_samples"].dtype == torch.int64 and int(out["num_samples"]) == start + 7
    assert metric.values[-1].dtype == dtype
    bg = BackgroundConsistency(config={"io": {"long_side": None}}).set_dtype(dtype)
    assert [getattr(bg, n).dtype for n in ("num_clips", "num_ok", "num_pass", "num_error")] \
        == [torch.int64] * 4


# ---------------------------------------------------------------------------------------------
# 4. forward accumulates as update does


def _epi_batch(k: int) -> ClipValues:
    """Batch ``k``: 5 clips of random float64 epipolar values, 4 ok and the last one
    not_applicable (reason "flat k")."""
    g = torch.Generator().manual_seed(100 + k)
    err = torch.rand(5, generator=g, dtype=torch.float64) * 3
    err[-1] = NAN
    vals = {"epipolar_error": err, "epipolar_error_score": (1 - err / 5).clamp(0, 1),
            "epipolar_inlier_rate": torch.rand(5, generator=g, dtype=torch.float64),
            "feature_match_coverage": torch.rand(5, generator=g, dtype=torch.float64)}
    return ClipValues(vals, torch.tensor([0, 0, 0, 0, 1]), ["", "", "", "", f"flat {k}"])


@pytest.fixture
def fake_epipolar(monkeypatch):
    """``_epipolar_update(videos=k, ...)`` gives :func:`_epi_batch` ``(k)``."""
    monkeypatch.setattr(me, "_epipolar_update", lambda videos, *a, **k: (_epi_batch(videos), []))


def _states(metric) -> Dict[str, object]:
    return {k: getattr(metric, k) for k in metric._defaults}


def _same_states(a: Dict[str, object], b: Dict[str, object]) -> bool:
    def same(x, y) -> bool:
        if isinstance(x, list):
            return len(x) == len(y) and all(same(u, v) for u, v in zip(x, y))
        return x.dtype == y.dtype and torch.equal(x, y)
    return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)


def test_epipolar_forward_accumulates_bit_for_bit_as_update(fake_epipolar):
    """Eight batches through ``metric(k)`` and through ``update(k)``. Before: forward's running
    sums were global + batch sum (``rate_sum`` ...642 vs ...643 in the audit) and ``reasons``
    grew by one entry per batch (8 here); now every state is bit for bit update's."""
    for cls in (EpipolarError, EpipolarInlierRate, FeatureMatchCoverage):
        fwd, upd = cls(), cls()
        for k in range(8):
            batch_value = _quiet(lambda: fwd(k))
            upd.update(k)
            fresh = cls()
            fresh.update(k)
            assert torch.equal(batch_value, _quiet(fresh.compute))  # forward's batch value
        assert len(fwd.reasons) == 1 and fwd.first_reason() == "not_applicable: flat 0"
        assert _same_states(_states(fwd), _states(upd)), cls.__name__
        assert torch.equal(fwd.compute(), upd.compute())
    coll_f = MetricCollection([EpipolarError(), EpipolarInlierRate(), FeatureMatchCoverage()])
    coll_u = coll_f.clone()
    for k in range(8):
        _quiet(lambda: coll_f(k))
        coll_u.update(k)
    got, want = coll_f.compute(), coll_u.compute()
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_adadfrc_forward_accumulates_bit_for_bit_as_update():
    """Six AdaDFRC batches of float64 flow (two with absent objects). Before: ``sum_d`` was
    global + in-order batch sum under forward (it differed in the last bits from the second
    batch on) and ``reasons`` held 2 entries; now every state is update's, bit for bit."""
    fwd, upd = AdaDFRC(), AdaDFRC()
    for k in range(6):
        flow, masks = _fg(10 + k, pairs=6, absent=2 if k in (1, 3) else 0)
        _quiet(lambda: fwd(flow.double(), masks))
        upd.update(flow.double(), masks)
    assert _same_states(_states(fwd), _states(upd))
    assert len(fwd.reasons) == 1 and int(fwd.count) == 64  # 6 x 12 slots, 8 absent
    got, want = fwd.compute(), upd.compute()
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_merge_state_after_forward_still_adds_both_metrics(fake_epipolar):
    """The in-order re-add is forward's only: ``merge_state`` keeps one reason per instance
    and sums both metrics (after a forward, whose terms it must not reuse)."""
    a, b = EpipolarError(), EpipolarError()
    _quiet(lambda: a(0))
    b.update(1)
    a.merge_state(b)
    assert int(a.num_clips) == 10 and len(a.reasons) == 2
    ok = _epi_batch(0).status == 0
    want = sum(float(_epi_batch(k).values["epipolar_error"][ok].sum()) for k in (0, 1))
    assert float(a.epipolar_error_sum_px) == pytest.approx(want, rel=1e-15)


# ---------------------------------------------------------------------------------------------
# 5. the protocol key: not in checkpoints, checked on load and merge


def _saved(metric) -> bytes:
    buf = io.BytesIO()
    torch.save(metric.state_dict(), buf)
    return buf.getvalue()


def _loaded(blob: bytes):
    return torch.load(io.BytesIO(blob), weights_only=True)


def test_protocol_key_stays_out_of_checkpoints_and_guards_loading():
    """Before: ``persistent(True)`` saved ``protocol_key``, and a grid=8 metric loaded a grid=4
    checkpoint silently (and took its key). Now the key lives in the checkpoint's metadata
    and another protocol is a ConfigError naming both; the same protocol loads bit for bit."""
    flow, masks = _fg(4)
    grid4 = AdaDFRC(grid=4)
    grid4.persistent(True)
    grid4.update(flow, masks)
    blob = _saved(grid4)
    assert sorted(_loaded(blob)) == ["count", "num_error", "num_not_applicable", "reasons",
                                     "sum_d", "values"]
    grid8 = AdaDFRC(grid=8)
    key8 = grid8.protocol_key.clone()
    with pytest.raises(ConfigError, match=r"state_dict was scored under another protocol \(key "
                       r"6a691482ae8d4a75\) than this metric \(key 092a6e900f000bcc\): settings "
                       r"differ \(theirs vs this metric's\) at \[0\]: 4 vs 8; "):
        grid8.load_state_dict(_loaded(blob))
    assert int(grid8.count) == 0 and torch.equal(grid8.protocol_key, key8)  # nothing loaded
    same = AdaDFRC(grid=4)
    same.load_state_dict(_loaded(blob))
    got, want = _quiet(same.compute), grid4.compute()
    assert all(torch.equal(got[k], want[k]) for k in want) and int(got["num_samples"]) == 8
    # a checkpoint without metadata or key (a plain dict, older files) still loads
    plain = AdaDFRC(grid=8)
    plain.load_state_dict(dict(_loaded(blob)))
    assert int(plain.count) == 8 and torch.equal(plain.protocol_key, key8)


def test_a_collection_checkpoint_names_the_member_of_another_protocol():
    """Inside a MetricCollection (prefix ``ada.``) the metadata is per member."""
    src = MetricCollection({"ada": AdaDFRC(grid=4)})
    src.persistent(True)
    src.update(*_fg(4))
    blob = _saved(src)
    with pytest.raises(ConfigError, match=r"the state_dict \(at 'ada'\) was scored under"):
        MetricCollection({"ada": AdaDFRC(grid=8)}).load_state_dict(_loaded(blob))
    back = MetricCollection({"ada": AdaDFRC(grid=4)})
    back.load_state_dict(_loaded(blob))
    assert int(back["ada"].count) == 8


def test_an_old_checkpoint_with_a_protocol_key_state_is_checked():
    """A checkpoint written while ``persistent(True)`` still saved the key: the key of another
    protocol is refused, the own one loads (and is not overwritten)."""
    grid4, grid8 = AdaDFRC(grid=4), AdaDFRC(grid=8)
    grid4.update(*_fg(5))
    old = {k: getattr(grid4, k) for k in grid4._defaults}
    with pytest.raises(ConfigError, match="key 6a691482ae8d4a75.*their settings are not "
                       "recorded; this metric's are \\[8, "):
        grid8.load_state_dict(dict(old))
    back = AdaDFRC(grid=4)
    back.load_state_dict(dict(old))
    assert int(back.count) == 8 and torch.equal(back.protocol_key, grid4.protocol_key)


def test_a_model_with_a_non_persistent_metric_of_other_settings_loads():
    """Default ``persistent(False)``: no metric state in the model's checkpoint, so nothing to
    check (resuming after a metric setting changed keeps working)."""
    model4, model8 = torch.nn.Module(), torch.nn.Module()
    model4.metric, model8.metric = AdaDFRC(grid=4), AdaDFRC(grid=8)
    model4.lin, model8.lin = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    model8.load_state_dict(_loaded(_saved(model4)))
    assert torch.equal(model8.lin.weight, model4.lin.weight)


def test_merge_state_refuses_another_protocol(fake_epipolar):
    """Before: the keys were max-merged into one of neither metric. Now ConfigError, nothing
    merged; a state_dict (no key) merges as the metric's own protocol."""
    a, b = AdaDFRC(grid=4), AdaDFRC(grid=8)
    a.update(*_fg(6))
    b.update(*_fg(7))
    with pytest.raises(ConfigError, match=r"incoming AdaDFRC .* at \[0\]: 8 vs 4; "):
        a.merge_state(b)
    assert int(a.count) == 8
    with pytest.raises(ConfigError, match="the incoming state"):
        a.merge_state({k: getattr(b, k) for k in b._defaults})
    c = AdaDFRC(grid=4)
    c.persistent(True)
    c.update(*_fg(7))
    a.merge_state(c.state_dict())
    assert int(a.count) == 16
    e1, e2 = EpipolarError(), EpipolarError(features="kornia-sift")
    e1.update(0)
    e2.update(1)
    with pytest.raises(ConfigError, match="EpipolarError: the incoming EpipolarError .* at "
                                          "\\[2\\]: 'kornia-sift' vs None"):
        e1.merge_state(e2)


# ---------------------------------------------------------------------------------------------
# 6. half / bfloat16 flow


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_flow_is_scored_as_its_float32_copy(dtype):
    """Before: ShapeError "flow must be float32 or float64, got torch.float16". Now the half
    flow (and reliability) is upcast: results equal those of its float32 copy, bit for bit."""
    flow, masks = _fg(8)
    half = flow.to(dtype)
    rel = torch.rand(4, 32, 32, generator=torch.Generator().manual_seed(9))
    d_half, v_half = adadfrc(half, masks, rel.to(dtype))
    d_ref, v_ref = adadfrc(half.float(), masks, rel.to(dtype).float())
    assert d_half.dtype == torch.float32 and torch.equal(v_half, v_ref)
    assert torch.equal(d_half.nan_to_num(-1.0), d_ref.nan_to_num(-1.0)) and bool(v_ref.all())
    m_half, m_ref = AdaDFRC(), AdaDFRC()
    m_half.update(half, masks)
    m_ref.update(half.float(), masks)
    got, want = m_half.compute(), m_ref.compute()
    assert all(torch.equal(got[k], want[k]) for k in want) and int(got["num_samples"]) == 8
    with pytest.raises(ShapeError, match="flow must be a float tensor .* got torch.int32"):
        adadfrc(flow.to(torch.int32), masks)
