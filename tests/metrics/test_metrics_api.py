"""The metrics API as one family: one tensor rule for every entry point, functional == class,
one "no data" convention, torchmetrics attributes / plots, and 2 gloo ranks == 1 process for
every public output of every class (this replaces the BackgroundConsistency-only 2-rank test
that lived in test_background_metric.py; its assertions are kept here)."""
from __future__ import annotations

import json
import math
import socket
import warnings

import pytest
import torch
from helpers import make_clips  # 4 panning clips (3, 3, 120, 160), last grey

from geocon_torch.errors import ClipTensorError, VideoReadError
from geocon_torch.io import read_clips
from geocon_torch.metrics import (
    AdaDFRC,
    BackgroundConsistency,
    BackgroundGeometricError,
    BackgroundInlierRatio,
    EpipolarError,
    EpipolarInlierRate,
    FeatureMatchCoverage,
)
from geocon_torch.metrics import functional as MF
from geocon_torch.pipeline import score_clips

CFG = {"io": {"long_side": None}, "features": {"mutual": True, "scales": [0.5, 1.0]},
       "segment": {"method": "none"}}
TRIO = (EpipolarError, EpipolarInlierRate, FeatureMatchCoverage)
FUNCTIONAL = (MF.epipolar_error, MF.epipolar_inlier_rate, MF.feature_match_coverage)

BAD = {
    "ndim": torch.zeros(2, 3, 32, 32, dtype=torch.uint8),
    "C=4": torch.zeros(1, 2, 4, 32, 32, dtype=torch.uint8),
    "int64": torch.zeros(1, 2, 3, 32, 32, dtype=torch.int64),
    "float>1": torch.full((1, 2, 3, 32, 32), 2.0),
    "float<0": torch.full((1, 2, 3, 32, 32), -0.5),
    "NaN": torch.full((1, 2, 3, 32, 32), float("nan")),
    "T=0": torch.zeros(1, 0, 3, 32, 32, dtype=torch.uint8),
    "H=1": torch.zeros(1, 2, 3, 1, 64, dtype=torch.uint8),  # was a VideoReadError deep inside
}


def _entry_points():
    """name -> callable(batch) for every class / function that takes videos."""
    out = {"read_clips": lambda v: read_clips(v, long_side=None),
           "background_consistency": lambda v: MF.background_consistency(v, config=CFG),
           "BackgroundConsistency": lambda v: BackgroundConsistency(config=CFG).update(v)}
    for cls, fn in zip(TRIO, FUNCTIONAL):
        out[cls.__name__] = lambda v, cls=cls: cls().update(v)
        out[fn.__name__] = fn
    return out


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_batches_rejected_the_same_way(case):
    batch = BAD[case]
    messages = set()
    for name, call in _entry_points().items():
        if case == "ndim" and name == "read_clips":
            continue  # read_clips also reads one (T, C, H, W) clip, by design
        with pytest.raises(ClipTensorError) as info:
            call(batch)
        messages.add(str(info.value))
    assert len(messages) == 1, messages  # one rule, one message
    msg = messages.pop()
    if case == "ndim":  # score_clips checks the batch layout itself (a VideoReadError)
        with pytest.raises(VideoReadError):
            score_clips(batch, config=CFG)
        return
    results = score_clips(batch, config=CFG)  # never raises for a bad clip: status error
    assert all(r.status == "error" and r.reason == f"ClipTensorError: {msg}" for r in results)


def test_good_batch_accepted_everywhere():
    batch = make_clips(n=2)[:, :2, :, :48, :64]  # (2, 2, 3, 48, 64)
    for name, call in _entry_points().items():
        call(batch)
        call(batch.float() / 255.0)
        call(list(batch))  # a list of (T, C, H, W) clips
    assert [r.status for r in score_clips(batch, config=CFG)] != ["error", "error"]


def test_functional_equals_class():
    videos = make_clips()
    bg = MF.background_consistency(videos, config=CFG)
    assert bg["status"].tolist() == [0, 0, 0, 1] and bg["ir"].dtype == torch.float64
    assert torch.isnan(bg["ir"][3]) and bg["ir"].shape == (4,)
    m = BackgroundConsistency(config=CFG)
    m.update(videos)
    out = m.compute()
    assert float(out["ir"]) == pytest.approx(float(bg["ir"][:3].median()))
    for cls, fn in zip(TRIO, FUNCTIONAL):
        vals, status = fn(videos, return_status=True)
        metric = cls()
        metric.update(videos)
        assert float(metric.compute()) == pytest.approx(float(vals[status == 0].mean()))
        assert int(metric.counts()["num_not_applicable"]) == int((status == 1).sum()) == 1
    score = MF.epipolar_error(videos, normalized=True)
    err = EpipolarError()
    err.update(videos)
    assert float(err.compute_score()) == pytest.approx(float(score[:3].mean()))


def _flow_batch(p: int = 3):
    g = torch.Generator().manual_seed(0)
    flow = torch.randn(p, 2, 32, 32, generator=g)
    masks = torch.zeros(p, 2, 32, 32, dtype=torch.bool)
    masks[:, 0, 4:28, 4:28] = True
    masks[1:, 1, 2:20, 10:30] = True  # object 1 absent in pair 0: one not-applicable slot
    return flow, masks


def test_adadfrc_functional_and_no_data():
    flow, masks = _flow_batch()
    d, valid = MF.adadfrc(flow, masks)
    m = AdaDFRC()
    m.update(flow, masks)
    out = m.compute()
    assert int(out["num_samples"]) == int(valid.sum()) == 5
    assert int(out["num_not_applicable"]) == 1 and int(out["num_error"]) == 0
    torch.testing.assert_close(out["pooled_adadfrc_mean"], d[valid].double().mean())
    assert bool(d[~valid].isnan().all())  # no data is NaN, never 0
    bad = AdaDFRC()
    bad.update(torch.full_like(flow, float("nan")), masks)  # NaN flow: counted error
    with pytest.warns(UserWarning, match="NaN / inf flow"):
        got = bad.compute()
    assert math.isnan(float(got["pooled_adadfrc_mean"])) and int(got["num_error"]) == 5


@pytest.mark.parametrize("cls", [BackgroundConsistency, BackgroundInlierRatio,
                                 BackgroundGeometricError, *TRIO])
def test_no_data_is_nan_with_counted_reason(cls):
    grey = torch.full((1, 3, 3, 64, 64), 128, dtype=torch.uint8)
    metric = cls(config=CFG) if cls.__name__.startswith("Background") else cls()
    metric.update(grey)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = metric.compute()
    value = out["ir"] if isinstance(out, dict) else out
    assert value is not None and torch.isnan(value)
    text = " ".join(str(w.message) for w in caught)
    assert "no applicable clip" in text and "First reason: not_applicable: " in text
    assert int(metric.num_not_applicable) == 1 and int(metric.num_error) == 0


def test_torchmetrics_attributes_and_plots(tmp_path):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    bounds = {BackgroundConsistency: (0.0, 1.0), BackgroundInlierRatio: (0.0, 1.0),
              BackgroundGeometricError: (0.0, None), AdaDFRC: (0.0, None),
              EpipolarError: (0.0, None), EpipolarInlierRate: (0.0, 1.0),
              FeatureMatchCoverage: (0.0, 1.0)}
    for cls, (lo, hi) in bounds.items():
        assert (cls.plot_lower_bound, cls.plot_upper_bound) == (lo, hi), cls
        assert cls.is_differentiable is False and cls.full_state_update is False
        metric = cls()
        annotated = {k for c in type(metric).__mro__ for k in getattr(c, "__annotations__", {})}
        assert set(metric._defaults) <= annotated, (cls, set(metric._defaults) - annotated)
    assert [c.higher_is_better for c in (BackgroundInlierRatio, BackgroundGeometricError,
                                         AdaDFRC, *TRIO)] == [True, False, False, False, True,
                                                              True]
    flow, masks = _flow_batch()
    ada = AdaDFRC()
    ada.update(flow, masks)
    fig, _ = ada.plot()
    fig.savefig(tmp_path / "ada.png")
    rate = EpipolarInlierRate()
    fig, _ = rate.plot([torch.tensor(0.5, dtype=torch.float64), torch.tensor(0.7)])
    fig.savefig(tmp_path / "rate.png")
    bg = BackgroundConsistency()
    fig, _ = bg.plot({"ir": torch.tensor(0.9), "ir_h": torch.tensor(0.9),
                      "ir_f": torch.tensor(0.95), "pass_rate": torch.tensor(1.0),
                      "ge_px": torch.tensor(0.3)})
    fig.savefig(tmp_path / "bg.png")


# ------------------------------------------------------------------ 2 gloo ranks == 1 process

def _outputs(videos: torch.Tensor, flow: torch.Tensor, masks: torch.Tensor) -> dict:
    """Every public output of every class after updating with these clips / pairs."""
    out = {}
    bg = BackgroundConsistency(config=CFG)
    bg.update(videos)
    out.update({f"bg.{k}": float(v) for k, v in bg.compute().items()})
    out["bg.first_reason"] = bg.first_reason()
    for cls in (BackgroundInlierRatio, BackgroundGeometricError):  # same states: no re-scoring
        m = cls(config=CFG)
        m.merge_state({k: getattr(bg, k) for k in bg._defaults})
        out[cls.__name__] = float(m.compute())
    for cls in TRIO:
        m = cls()
        m.update(videos)
        out[cls.__name__] = float(m.compute())
        out.update({f"{cls.__name__}.{k}": int(v) for k, v in m.counts().items()})
        out[f"{cls.__name__}.first_reason"] = m.first_reason()
        if cls is EpipolarError:
            out["EpipolarError.score"] = float(m.compute_score())
    ada = AdaDFRC()
    ada.update(flow, masks)
    out.update({f"ada.{k}": float(v) for k, v in ada.compute().items()})
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out_path: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    videos = make_clips()[[0, 3, 1, 2]]  # the grey clip (reason) on rank 1 only
    flow, masks = _flow_batch(4)
    out = _outputs(videos[rank::world], flow[rank::world], masks[rank::world])
    if rank == 0:
        with open(out_path, "w") as fh:
            json.dump(out, fh)
    dist.barrier()
    dist.destroy_process_group()


def test_two_gloo_ranks_equal_one_process_for_every_output(tmp_path):
    import torch.multiprocessing as mp

    path = tmp_path / "rank0.json"
    mp.spawn(_worker, args=(2, _free_port(), str(path)), nprocs=2, join=True)
    got = json.loads(path.read_text())
    flow, masks = _flow_batch(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = _outputs(make_clips()[[0, 3, 1, 2]], flow, masks)
    assert set(got) == set(want)
    for key, value in want.items():
        if isinstance(value, float):
            assert got[key] == pytest.approx(value, nan_ok=True), key
        else:
            assert got[key] == value, key
    assert got["EpipolarError.num_clips"] == 4 and got["bg.num_clips"] == 4
    assert got["bg.num_ok"] == 3 and got["BackgroundInlierRatio"] == got["bg.ir"]
    assert got["ada.num_samples"] == 7 and got["bg.first_reason"].startswith("not_applicable")


def _empty_rank_worker(rank: int, port: int, out_path: str) -> None:
    """Rank 1 never updates (a short validation set, drop_last): compute() is still a
    collective, with float64 ``cat`` states on rank 0 and none on rank 1."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=2)
    bg, ada = BackgroundConsistency(config=CFG), AdaDFRC()
    if rank == 0:
        flow, masks = _flow_batch(4)
        bg.update(make_clips()[:2])
        ada.update(flow, masks)
    out = {f"bg.{k}": float(v) for k, v in bg.compute().items()}
    out.update({f"ada.{k}": float(v) for k, v in ada.compute().items()})
    with open(f"{out_path}.{rank}", "w") as fh:
        json.dump(out, fh)
    dist.barrier()
    dist.destroy_process_group()


def test_a_rank_without_batches_syncs():
    """torchmetrics stands in a float32 empty tensor for an empty ``cat`` state; gathered
    against another rank's float64 values, gloo aborted the process (SIGABRT). Both ranks now
    compute what one process computes from the same batches."""
    import torch.multiprocessing as mp

    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/out"
        mp.spawn(_empty_rank_worker, args=(_free_port(), path), nprocs=2, join=True)
        got = [json.loads(open(f"{path}.{r}").read()) for r in (0, 1)]
    flow, masks = _flow_batch(4)
    bg, ada = BackgroundConsistency(config=CFG), AdaDFRC()
    bg.update(make_clips()[:2])
    ada.update(flow, masks)
    want = {f"bg.{k}": float(v) for k, v in bg.compute().items()}
    want.update({f"ada.{k}": float(v) for k, v in ada.compute().items()})
    assert got[0] == got[1] == pytest.approx(want)
    assert want["bg.num_clips"] == 2 and want["ada.num_samples"] == 7


def test_bad_settings_fail_at_construction():
    """A bad implementation / grid is an InputError when the metric is built, not at its first
    update."""
    from geocon_torch.errors import InputError
    from geocon_torch.metrics import AdaDFRC, EpipolarError

    with pytest.raises(InputError, match="implementation must be one of"):
        EpipolarError(implementation="cuda")
    with pytest.raises(InputError, match="grid must be >= 2"):
        AdaDFRC(grid=1)
