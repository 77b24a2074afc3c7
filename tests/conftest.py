"""Shared fixtures: the shared clip folder, devices and dtypes to parametrize over."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared clips not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    return torch.device(request.param)


@pytest.fixture(params=DTYPES, ids=["f32", "f64"])
def dtype(request) -> torch.dtype:
    return request.param


@pytest.fixture(autouse=True, scope="session")
def _one_intra_op_thread():
    """The suite runs torch on one intra-op thread: test tensors are small, and extra threads only
    fight over the 2 CI cores (kornia's many small ops ran ~10x slower that way). Results do not
    depend on the thread count. The previous setting is restored at the end."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
