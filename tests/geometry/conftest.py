"""Geometry tests run torch single-threaded: their tensors are small, and intra-op threads only
add scheduling overhead (badly so on a shared CPU). The previous setting is restored after."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _single_thread():
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)
