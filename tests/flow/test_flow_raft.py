"""RAFT plumbing: random-init torchvision weights saved to tmp_path and loaded back through
get_flow (never a download)."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.errors import CheckpointError
from geocon_torch.flow import RaftFlow, get_flow
from geocon_torch.flow.raft import cached_checkpoint

of = pytest.importorskip("torchvision.models.optical_flow")


def test_raft_small_from_checkpoint_odd_size(small_ckpt):
    est = get_flow("raft_small", checkpoint=str(small_ckpt), num_flow_updates=2)
    assert isinstance(est, RaftFlow) and est.name == "raft_small"
    gen = torch.Generator().manual_seed(0)
    a = torch.rand(2, 3, 100, 130, generator=gen)
    b = torch.rand(2, 3, 100, 130, generator=gen)
    flow = est(a, b)
    assert flow.shape == (2, 2, 100, 130) and flow.dtype == torch.float32
    assert torch.isfinite(flow).all()
    # grey input and float64 go through the same path
    g = est(a[:, :1].double(), b[:, :1].double())
    assert g.shape == (2, 2, 100, 130) and g.dtype == torch.float64
    # the loaded weights are the saved ones (a nested {"state_dict": ...} file works too)
    saved = torch.load(small_ckpt, weights_only=True)
    for k, v in est.model.state_dict().items():
        torch.testing.assert_close(v, saved[k])
    nested = small_ckpt.parent / "nested.pth"
    torch.save({"state_dict": saved}, nested)
    again = get_flow("raft_small", checkpoint=nested, num_flow_updates=2)
    torch.testing.assert_close(again(a, b), flow)


def test_missing_or_wrong_checkpoint_raises(tmp_path, small_ckpt, monkeypatch):
    with pytest.raises(CheckpointError):
        get_flow("raft_small", checkpoint=str(tmp_path / "nope.pth"))
    with pytest.raises(CheckpointError):
        get_flow("raft_large", checkpoint=str(small_ckpt))  # other architecture
    junk = tmp_path / "junk.pth"
    junk.write_bytes(b"not a checkpoint")
    with pytest.raises(CheckpointError):
        get_flow("raft_small", checkpoint=str(junk))
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))
    assert cached_checkpoint("raft_small") is None
    with pytest.raises(CheckpointError):
        get_flow("raft_small")  # no path and nothing in the hub cache: no download
    assert get_flow("auto").name == "torch-lk"


def test_hub_cache_is_used(tmp_path, small_ckpt, monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path))
    name = of.Raft_Small_Weights.DEFAULT.url.rsplit("/", 1)[-1]
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / name).write_bytes(small_ckpt.read_bytes())
    assert cached_checkpoint("raft_small") == tmp_path / "checkpoints" / name
    est = get_flow("auto", num_flow_updates=1)
    assert est.name == "raft_small" and est.checkpoint.endswith(name)
