"""torchmetrics BackgroundConsistency: values, counts, and the same result under 2 gloo ranks."""
import json
import socket

import pytest
import torch
import torch.nn.functional as F

from geocon_torch.metrics.background import (BackgroundConsistency, BackgroundGeometricError,
                                             BackgroundInlierRatio)

CFG = {"io": {"long_side": None}, "features": {"mutual": True, "scales": [0.5, 1.0]},
       "segment": {"method": "none"}}


def make_clips(seed: int = 0, n: int = 4):
    """n clips (3, 3, 120, 160) uint8: a smooth random texture shifted by whole pixels per frame
    (pure translation of a plane: one homography per pair); clip 3 is a flat grey clip."""
    g = torch.Generator().manual_seed(seed)
    clips = []
    for k in range(n):
        tex = torch.rand(1, 3, 200, 240, generator=g)
        tex = F.avg_pool2d(tex, 5, stride=1, padding=2)
        tex = ((tex - tex.amin()) / (tex.amax() - tex.amin()) * 255).to(torch.uint8)[0]
        frames = torch.stack([tex[:, 20 + 2 * t * (k + 1): 140 + 2 * t * (k + 1), 30:190]
                              for t in range(3)])
        clips.append(frames if k != n - 1 else torch.full_like(frames, 128))
    return torch.stack(clips)


def test_metric_values_and_counts():
    videos = make_clips()
    m = BackgroundConsistency(config=CFG)
    m.update(videos[:2])
    m.update(list(videos[2:]))
    out = m.compute()
    assert int(out["num_clips"]) == 4 and int(out["num_ok"]) == 3
    assert int(out["num_not_applicable"]) == 1 and int(out["num_error"]) == 0
    assert float(out["ir"]) >= 0.97 and float(out["ge_px"]) < 1.0
    assert float(out["pass_rate"]) == 1.0
    ir = BackgroundInlierRatio(config=CFG)
    ge = BackgroundGeometricError(config=CFG)
    ir.update(videos)
    ge.update(videos)
    assert float(ir.compute()) == pytest.approx(float(out["ir"]))
    assert float(ge.compute()) == pytest.approx(float(out["ge_px"]))
    empty = BackgroundConsistency(config=CFG).compute()
    assert empty["ir"] is None and int(empty["num_clips"]) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out_path: str) -> None:
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    videos = make_clips()
    m = BackgroundConsistency(config=CFG)
    m.update(videos[rank::world])  # uneven per-rank content, gathered by the cat states
    out = m.compute()
    if rank == 0:
        with open(out_path, "w") as fh:
            json.dump({k: None if v is None else float(v) for k, v in out.items()}, fh)
    dist.barrier()
    dist.destroy_process_group()


def test_two_gloo_ranks_equal_one_process(tmp_path):
    import torch.multiprocessing as mp

    path = tmp_path / "rank0.json"
    mp.spawn(_worker, args=(2, _free_port(), str(path)), nprocs=2, join=True)
    got = json.loads(path.read_text())
    m = BackgroundConsistency(config=CFG)
    m.update(make_clips())
    want = {k: None if v is None else float(v) for k, v in m.compute().items()}
    assert got == pytest.approx(want)
    assert got["num_clips"] == 4 and got["num_ok"] == 3
