"""Shared fixtures: the shared clip folder, devices and dtypes to parametrize over, and the
PostgreSQL fixtures of tests/pg_server.py (a throw-away server per session, a fresh database on
it, the same test on SQLite and PostgreSQL, a private server to stop and start)."""
from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
import torch
from helpers import DUST3R_CHECKOUT, SHARED_DATA  # noqa: F401 (tests import SHARED_DATA from here)
from pg_server import any_db, own_pg_server, pg_server, pg_url  # noqa: F401 - fixtures

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
DTYPES = [torch.float32, torch.float64]


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """``../shared/data`` beside the checkout; tests that need it skip when it is absent."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared clips not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture(scope="session")
def dust3r_checkout() -> Path:
    """``../shared/third_party/dust3r`` (DUSt3R + CroCo code, no weights), put on ``sys.path``
    as ``config.gate.dust3r_path`` would; tests that need it skip when it is absent or when the
    ``dust3r`` extra (roma, huggingface_hub) is not installed."""
    if not (DUST3R_CHECKOUT / "dust3r").is_dir():
        pytest.skip(f"DUSt3R checkout not found at {DUST3R_CHECKOUT}")
    for module in ("roma", "huggingface_hub"):
        pytest.importorskip(module, reason=f"{module} missing: pip install -e '.[dust3r]'")
    from geocon_torch.gate.dust3r import import_dust3r

    import_dust3r(str(DUST3R_CHECKOUT))
    return DUST3R_CHECKOUT


@pytest.fixture(scope="module")
def small_ckpt(tmp_path_factory) -> Path:
    """A random-init torchvision RAFT-small checkpoint (seed 0) in a folder of its own, read
    back through the real loaders (never a download); skips without torchvision's flow models."""
    of = pytest.importorskip("torchvision.models.optical_flow")
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("raft") / "raft_small_random.pth"
    torch.save(of.raft_small(weights=None).state_dict(), path)
    return path


@pytest.fixture(params=DEVICES)
def device(request) -> torch.device:
    """The device under test, with its index ("cuda" -> "cuda:0"): tensors report an indexed
    device, and ``tensor.device == torch.device("cuda")`` is False."""
    dev = torch.device(request.param)
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


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


@pytest.fixture(autouse=True, scope="session")
def _temporary_files_under_pytest(tmp_path_factory):
    """Temporary folders that code under test leaves for its user (the notebook's audit card,
    torchrun's ``torchelastic_*`` run folders, ``tempfile`` in subprocesses) go under pytest's
    own base folder, which pytest prunes, instead of piling up in /tmp run after run."""
    before, folder = os.environ.get("TMPDIR"), tmp_path_factory.mktemp("tmpdir")
    os.environ["TMPDIR"], tempfile.tempdir = str(folder), None
    yield
    if before is None:
        os.environ.pop("TMPDIR", None)
    else:
        os.environ["TMPDIR"] = before
    tempfile.tempdir = None
