"""torchmetrics classes of the epipolar trio: same values as epipolar_section, one analysis per
batch, compute groups, merging two instances, float vs uint8 input, no applicable clip."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torchmetrics import MetricCollection

import geocon_torch.metrics.epipolar as epi_metrics
import geocon_torch.metrics.functional.epipolar as epi_functional
from geocon_torch.config import EpipolarConfig
from geocon_torch.sections.epipolar import clip_from_frames, epipolar_section
from geocon_torch.metrics.epipolar import (EpipolarError, EpipolarInlierRate,
                                           FeatureMatchCoverage, epipolar_collection)


@pytest.fixture(scope="module")
def batches(shared_data):
    """Two (B=2, T=4, 3, 240, 320) uint8 batches of realshort; the second batch holds one
    uniform grey clip (not_applicable)."""
    from geocon_torch.io import read_clip

    frames = read_clip(shared_data / "real/realshort.mp4", long_side=None, max_frames=16).frames
    grey = torch.full_like(frames[:4], 90)
    return torch.stack([frames[0:4], frames[4:8]]), torch.stack([frames[8:12], grey])


def _expected(batch_list, key):
    vals = []
    for batch in batch_list:
        for video in batch:
            s = epipolar_section(clip_from_frames(video), EpipolarConfig(), implementation="opencv")
            if s["status"] == "ok":
                vals.append(s[key])
    return float(np.mean(vals))


def test_values_equal_epipolar_section(batches):
    b1, b2 = batches
    err, rate, cov = EpipolarError(), EpipolarInlierRate(), FeatureMatchCoverage()
    for m in (err, rate, cov):
        m.update(b1)
        m.update(b2)
    assert err.compute().item() == pytest.approx(_expected(batches, "epipolar_error"))
    assert rate.compute().item() == pytest.approx(_expected(batches, "epipolar_inlier_rate"))
    assert cov.compute().item() == pytest.approx(_expected(batches, "feature_match_coverage"))
    assert err.compute_score().item() == pytest.approx(
        _expected(batches, "epipolar_error_score"))
    assert int(err.num_clips) == 4 and err.num_not_applicable == 1
    assert err.last_sections[1]["status"] == "not_applicable"
    assert (EpipolarError.higher_is_better, EpipolarInlierRate.higher_is_better,
            FeatureMatchCoverage.higher_is_better) == (False, True, True)
    assert not EpipolarError.is_differentiable and not EpipolarError.full_state_update


def test_one_analysis_per_batch(batches, monkeypatch):
    """No module-level cache: separate objects analyse a batch each; a MetricCollection shares
    one analysis through its compute group (from the first update with epipolar_collection)."""
    calls = []
    real = epi_functional.epipolar_sections

    def counting(clips, *a, **kw):
        calls.append(len(clips))
        return real(clips, *a, **kw)

    monkeypatch.setattr(epi_functional, "epipolar_sections", counting)
    assert not hasattr(epi_metrics, "_CACHE")
    metrics = [EpipolarError(), EpipolarInlierRate(), FeatureMatchCoverage()]
    for m in metrics:  # separate instances: each analyses the batch
        m.update(batches[0])
    assert calls == [2, 2, 2]
    calls.clear()
    coll = MetricCollection([EpipolarError(), EpipolarInlierRate(), FeatureMatchCoverage()])
    coll.update(batches[1])  # first update: every metric (torchmetrics finds the groups)
    coll.update(batches[0])  # states equal -> one group -> one analysis
    assert calls == [2, 2, 2, 2]
    assert len(coll.compute_groups) == 1
    out = coll.compute()
    calls.clear()
    declared = epipolar_collection()
    declared.update(batches[1])
    declared.update(batches[0])
    assert calls == [2, 2]  # group declared up front: one analysis per update
    ref = MetricCollection([EpipolarError(), EpipolarInlierRate(), FeatureMatchCoverage()],
                           compute_groups=False)
    ref.update(batches[1])
    ref.update(batches[0])
    got = declared.compute()
    for k, v in ref.compute().items():
        assert out[k].item() == pytest.approx(v.item())
        assert got[k].item() == pytest.approx(v.item())


def test_merge_state_across_two_instances(batches):
    a, b, whole = EpipolarInlierRate(), EpipolarInlierRate(), EpipolarInlierRate()
    a.update(batches[0])
    b.update(batches[1])
    whole.update(batches[0])
    whole.update(batches[1])
    a.merge_state(b)
    assert a.compute().item() == pytest.approx(whole.compute().item())
    assert int(a.num_clips) == 4 and int(a.num_ok) == 3


def test_float_input_equals_uint8(batches):
    u8, f = FeatureMatchCoverage(), FeatureMatchCoverage()
    u8.update(batches[0])
    f.update(batches[0].float() / 255.0)
    assert f.compute().item() == pytest.approx(u8.compute().item())


def test_no_applicable_clip_warns_and_returns_nan():
    m = EpipolarError()
    m.update(torch.full((1, 3, 3, 64, 64), 128, dtype=torch.uint8))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = m.compute()
    assert torch.isnan(value) and any("no applicable clip" in str(w.message) for w in caught)
    with pytest.raises(Exception, match="B, T, C, H, W"):
        m.update(torch.zeros(3, 3, 64, 64, dtype=torch.uint8))


def _dist_worker(rank, world, port, batch, out):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    m = EpipolarInlierRate()
    m.update(batch[rank::world])
    local = float(m.rate_sum / m.num_ok)
    out[rank] = (m.compute().item(), int(m.num_clips), local)  # compute() syncs, then unsyncs
    dist.destroy_process_group()


@pytest.mark.slow
def test_distributed_sync_two_gloo_ranks(batches):
    import socket

    import torch.multiprocessing as mp

    batch = torch.cat(batches)  # 4 clips, one not_applicable
    single = EpipolarInlierRate()
    single.update(batch)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    out = mp.Manager().dict()
    mp.spawn(_dist_worker, args=(2, port, batch, out), nprocs=2, join=True)
    for rank in range(2):
        assert out[rank][0] == pytest.approx(single.compute().item())
        assert out[rank][1] == 2  # each rank analysed its own 2 clips
    assert out[0][2] != pytest.approx(out[1][2])  # the ranks' local values differ


@pytest.mark.parametrize("implementation", ["opencv", "torch"])
def test_empty_batch_and_tiny_clip(batches, implementation):
    """B = 0 gives empty values (no error); a clip of 8 x 12 px in a list batch is its own
    not_applicable (the torch LK pyramid stops where a level would be smaller than its blur)
    and the clip beside it keeps the value it gets alone."""
    empty = torch.zeros(0, 4, 3, 32, 32, dtype=torch.uint8)
    vals, status = epi_functional.epipolar_error(empty, implementation=implementation,
                                                      return_status=True)
    assert vals.shape == (0,) and status.shape == (0,)
    m = EpipolarError(implementation=implementation)
    m.update(empty)
    assert int(m.num_clips) == 0
    ok = batches[0][0]
    tiny = (torch.rand(4, 3, 8, 12, generator=torch.Generator().manual_seed(0)) * 255
            ).to(torch.uint8)
    alone = epi_functional.epipolar_error([ok], implementation=implementation)
    vals, status = epi_functional.epipolar_error([ok, tiny], implementation=implementation,
                                                      return_status=True)
    assert torch.equal(vals[:1], alone) and bool(torch.isfinite(alone).all())
    assert torch.isnan(vals[1]) and status.tolist() == [0, 1]


def test_a_batch_update_equals_clip_by_clip_updates_bit_for_bit(monkeypatch):
    """The running sums add a batch's clips one after the other, as clip-by-clip updates do:
    with these six values ``values.sum()`` rounds the last bit differently (a batch of real
    clips showed it), so the states and compute() differed between the two."""
    from geocon_torch.metrics.functional._common import ClipValues
    from geocon_torch.metrics.functional.epipolar import EPIPOLAR_FIELDS

    vals = torch.tensor([0.7486882683183439, 0.3417558526082366, 0.538225008554474,
                         0.46636541886786753, 0.8634864607582904, 0.041059375136441645],
                        dtype=torch.float64)
    assert vals.sum() != sum(vals.tolist())  # the case: one-shot and in-order sums differ

    def fake_update(videos, *a, **kw):
        k = torch.as_tensor(videos)
        got = {key: vals[k] for key in EPIPOLAR_FIELDS.values()}
        return ClipValues(got, torch.zeros(len(k), dtype=torch.long), [""] * len(k)), []

    monkeypatch.setattr(epi_metrics, "_epipolar_update", fake_update)
    batch, alone = EpipolarInlierRate(), EpipolarInlierRate()
    batch.update(list(range(6)))
    for k in range(6):
        alone.update([k])
    assert batch.rate_sum.item() == alone.rate_sum.item() == sum(vals.tolist())
    assert batch.compute().item() == alone.compute().item()
