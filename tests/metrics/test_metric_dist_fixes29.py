"""Audit s29 (Metric classes under real gloo process groups), fixes F2 and F3.

F2: ``BackgroundConsistency``'s protocol key holds the device *type* of ``scoring_device``
only (cuda:0, cuda:1 and cuda are one protocol), and checkpoints written with the index in the
key (metadata settings, or an older ``protocol_key`` state) still load.
F3: ranks whose metrics have different settings raise the same ConfigError at the sync on
every rank (a ``min``-reduced copy of the key next to the ``max``-reduced one) instead of
pooling silently; the check adds the same collectives on every rank.
"""
from __future__ import annotations

import hashlib
import io
import json
import time
import warnings
from datetime import timedelta
from typing import Any, Dict

import pytest
import torch

from geocon_torch.errors import ConfigError
from geocon_torch.metrics import AdaDFRC, BackgroundConsistency

CFG = {"io": {"long_side": None}, "segment": {"method": "none"}}
# a hang detector: two spawned ranks import torch; a loaded 2-core machine needs > 45 s
TIMEOUT_S = 180


def _fg(seed: int, pairs: int = 4) -> tuple:
    """A (pairs, 2, 32, 32) flow and (pairs, 2, 32, 32) bool masks (two objects)."""
    g = torch.Generator().manual_seed(seed)
    flow = torch.randn(pairs, 2, 32, 32, generator=g) * 3
    masks = torch.zeros(pairs, 2, 32, 32, dtype=torch.bool)
    masks[:, 0, 2:20, 2:20] = True
    masks[:, 1, 12:30, 8:28] = True
    return flow, masks


def _checkpoint(metric: Any) -> Dict[str, Any]:
    """``metric``'s state_dict under ``persistent(True)``, through torch.save / torch.load."""
    metric.persistent(True)
    buf = io.BytesIO()
    torch.save(metric.state_dict(), buf)
    buf.seek(0)
    return torch.load(buf, weights_only=False)


def _legacy_key(settings: list) -> torch.Tensor:
    """The protocol key the code before the fix gave these settings (device with its index)."""
    text = json.dumps(settings, sort_keys=True, default=str)
    return torch.tensor(list(hashlib.sha256(text.encode()).digest()[:8]), dtype=torch.long)


# ---------------------------------------------------------------------------------------------
# F2: the CUDA index is no part of the protocol


def test_cuda_index_is_not_part_of_the_protocol_key():
    """Before: cuda:0, cuda:1 and cuda gave three keys; a checkpoint of one refused by another
    (ConfigError "'cuda:0' vs 'cuda:1'"), and so did merge_state."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        a = BackgroundConsistency(config=CFG, scoring_device="cuda:0")
        b = BackgroundConsistency(config=CFG, scoring_device="cuda:1")
        c = BackgroundConsistency(config=CFG, scoring_device=torch.device("cuda"))
        cpu = BackgroundConsistency(config=CFG, scoring_device="cpu")
    assert torch.equal(a.protocol_key, b.protocol_key) and torch.equal(a.protocol_key,
                                                                       c.protocol_key)
    assert not torch.equal(a.protocol_key, cpu.protocol_key)  # the type still counts
    a.num_clips += 3
    b.persistent(True)
    b.load_state_dict(_checkpoint(a))
    assert int(b.num_clips) == 3
    c.merge_state(a)
    assert int(c.num_clips) == 3 and torch.equal(c.protocol_key, a.protocol_key)
    with pytest.raises(ConfigError, match="another protocol"):
        cpu.persistent(True)
        cpu.load_state_dict(_checkpoint(a))


def test_checkpoints_with_the_cuda_index_in_their_key_still_load():
    """Checkpoints of the code before the fix record ``str(torch.device(...))`` ("cuda:0") in
    their settings and key: they load into a metric on another index (and merge), while
    another config or another device type is still refused. Before: refused (ConfigError)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        src = BackgroundConsistency(config=CFG, scoring_device="cuda:1")
        dst = BackgroundConsistency(config=CFG, scoring_device="cuda:1")
        cpu = BackgroundConsistency(config=CFG, scoring_device="cpu")
        other = BackgroundConsistency(config={**CFG, "io": {"long_side": 64}},
                                      scoring_device="cuda:1")
    own_key = dst.protocol_key.clone()
    src.num_clips += 2
    sd = _checkpoint(src)
    settings = [src.config.config_hash(), "cuda:0"]
    old_key = _legacy_key(settings)
    meta = sd._metadata[""]
    meta.update(protocol_key=bytes(old_key.tolist()).hex(),
                protocol=json.dumps(settings, sort_keys=True))
    dst.persistent(True)
    dst.load_state_dict(sd)  # metadata: key and settings with the index
    assert int(dst.num_clips) == 2 and torch.equal(dst.protocol_key, own_key)
    legacy = {k: v for k, v in sd.items()}
    legacy["protocol_key"] = old_key  # a checkpoint from before the key left the states
    fresh = BackgroundConsistency(config=CFG, scoring_device="cuda")
    fresh.persistent(True)
    fresh.load_state_dict(legacy)
    assert int(fresh.num_clips) == 2 and torch.equal(fresh.protocol_key, own_key)
    fresh.merge_state(legacy)  # a dict holding the old key merges, this metric keeps its key
    assert int(fresh.num_clips) == 4 and torch.equal(fresh.protocol_key, own_key)
    for refusing in (cpu, other):
        refusing.persistent(True)
        with pytest.raises(ConfigError, match="another protocol"):
            refusing.load_state_dict(sd)
        with pytest.raises(ConfigError, match="another protocol"):
            refusing.merge_state(legacy)


# ---------------------------------------------------------------------------------------------
# F3: different settings on different ranks raise at the sync (2 real gloo ranks)


def _rank_worker(rank: int, init: str, out_dir: str) -> None:
    """Each scenario's outcome on this rank, as JSON in ``out_dir/rank{rank}.json``."""
    import torch.distributed as dist

    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    dist.init_process_group("gloo", init_method=init, rank=rank, world_size=2,
                            timeout=timedelta(seconds=30))
    out: Dict[str, Any] = {}
    # a per-rank config slip: grid 8 on rank 0, grid 4 on rank 1
    mixed = AdaDFRC(grid=8, percentile=0.9) if rank == 0 else AdaDFRC(grid=4, percentile=0.5)
    mixed.update(*_fg(1))
    for name, call in (("compute", mixed.compute), ("first_reason", mixed.first_reason)):
        try:
            value = call()
            out[name] = {"error": None, "value": str(value)}
        except ConfigError as exc:
            out[name] = {"error": str(exc)}
    out["local_count_after"] = int(mixed.count)
    out["synced_after"] = bool(mixed._is_synced)
    # the group still works afterwards: matching settings sync as one process
    same = AdaDFRC(grid=8)
    same.update(*_fg(rank + 2))
    out["same_num_samples"] = int(same.compute()["num_samples"])
    # F2 + F3: each rank scores on its own CUDA index (a legitimate DDP job): no error, and
    # the synced key is every rank's own key
    bg = BackgroundConsistency(config=CFG, scoring_device=f"cuda:{rank}")
    try:
        synced_key = bg._synced(lambda: bg.protocol_key.clone())
        out["bg_key_kept"] = bool(torch.equal(synced_key, bg.protocol_key))
        out["bg_error"] = None
    except ConfigError as exc:
        out["bg_key_kept"], out["bg_error"] = None, str(exc)
    with open(f"{out_dir}/rank{rank}.json", "w") as fh:
        json.dump(out, fh)
    dist.barrier()
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory) -> Dict[int, Dict[str, Any]]:
    """Run :func:`_rank_worker` on 2 gloo ranks (file rendezvous), killed after TIMEOUT_S."""
    import torch.multiprocessing as mp

    tmp = tmp_path_factory.mktemp("dist29")
    ctx = mp.start_processes(_rank_worker, args=(f"file://{tmp}/rdv", str(tmp)), nprocs=2,
                             join=False, start_method="spawn")
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not ctx.join(timeout=1):
            if time.monotonic() > deadline:
                pytest.fail(f"2 gloo ranks did not finish in {TIMEOUT_S} s (a hang)")
    finally:
        for proc in ctx.processes:
            if proc.is_alive():
                proc.kill()
    return {r: json.loads((tmp / f"rank{r}.json").read_text()) for r in (0, 1)}


def test_ranks_with_different_settings_raise_the_same_config_error(two_ranks):
    """Before: no error; both ranks pooled the D values of grid 8 and grid 4 (16 samples) and
    returned different "synced" quantiles. Now every synced read raises one ConfigError, the
    same text on both ranks, naming the settings that differ; the states stay local."""
    for name in ("compute", "first_reason"):
        errors = [two_ranks[r][name].get("error") for r in (0, 1)]
        assert errors[0] is not None, two_ranks[0][name]
        assert errors[0] == errors[1]
        assert "different settings" in errors[0] and "(rank 1's vs rank 0's)" in errors[0]
        assert "[0]: 4 vs 8" in errors[0]  # grid, as a path into the settings list
    for r in (0, 1):
        assert two_ranks[r]["local_count_after"] == 8  # 4 pairs x 2 objects: its own
        assert two_ranks[r]["synced_after"] is False
        assert two_ranks[r]["same_num_samples"] == 16


def test_ranks_on_their_own_cuda_index_share_one_protocol(two_ranks):
    """Before: cuda:0 / cuda:1 gave two keys, max-reduced into one that matched neither rank."""
    for r in (0, 1):
        assert two_ranks[r]["bg_error"] is None, two_ranks[r]["bg_error"]
        assert two_ranks[r]["bg_key_kept"] is True
