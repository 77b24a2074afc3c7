"""``DispatchCounter.linalg`` (audit s16 CUDA finding 2): the linalg calls that read their error
codes back on CUDA (``torch.linalg.eigh`` / ``svd`` / ``inv`` / ``solve`` / ``cholesky``, a
device wait each) are counted apart from ``syncs``, and ``benchmarks/batching.py`` reports them
per path and B (``linalg`` / ``la``, ``<path>_linalg_syncs``) without changing ``syncs`` /
``all_syncs``."""
from __future__ import annotations

import sys

import torch
from helpers import REPO_ROOT

sys.path.insert(0, str(REPO_ROOT))
from benchmarks import batching  # noqa: E402
from benchmarks._dispatch_count import DispatchCounter  # noqa: E402


def _matrices():
    g = torch.Generator().manual_seed(0)
    a = torch.rand(4, 3, 3, generator=g, dtype=torch.float64) + 3 * torch.eye(3).double()
    return a, a @ a.mT


def test_each_checking_linalg_call_counts_once_and_not_as_a_sync():
    a, spd = _matrices()
    with DispatchCounter() as c:
        torch.linalg.eigh(spd)                              # _linalg_eigh: 1
        torch.linalg.svd(a)                                 # _linalg_svd: 1
        torch.linalg.inv(a)                                 # _linalg_check_errors: 1
        torch.linalg.solve(a, a)                            # _linalg_check_errors: 1
        torch.linalg.cholesky(spd)                          # _linalg_check_errors: 1
        torch.linalg.inv_ex(a, check_errors=True)           # checks in the op: 1
        torch.linalg.inv_ex(a)                              # no check: 0
        torch.linalg.solve_ex(a, a, check_errors=False)     # no check: 0
        torch.linalg.det(a)                                 # no check: 0
    assert (c.linalg, c.syncs) == (6, 0)
    assert dict(c.linalg_ops) == {"aten._linalg_eigh": 1, "aten._linalg_svd": 1,
                                  "aten._linalg_check_errors": 3, "aten.linalg_inv_ex": 1}
    s = c.summary()
    assert (s["linalg"], s["syncs"]) == (6, 0) and s["linalg_ops"] == dict(c.linalg_ops)


def test_batching_count_reports_linalg_apart_from_the_syncs():
    a, _ = _matrices()

    def fn(v: torch.Tensor) -> None:
        dev = torch.eye(3, device=v.device) * v.float().mean()  # device data only
        torch.linalg.eigh(dev)
        torch.linalg.svd(a)  # host data
        float(a.sum())

    r = batching.count(fn, torch.ones(2, 3))
    assert (r["linalg"], r["syncs"], r["all_syncs"], r["h2d"]) == (2, 1, 1, 0)
    assert r["linalg_ops"] == {"aten._linalg_eigh": 1, "aten._linalg_svd": 1}
    rows = {"background": {1: r, 8: dict(r, linalg=5)}}
    out = batching.result_counts(rows)
    assert out["background_linalg_syncs"] == {"1": 2, "8": 5}
    assert out["paths"]["background"]["8"]["linalg"] == 5
    assert set(out["paths"]["background"]["1"]) == set(batching.RESULT_KEYS)
    lines = batching.table(rows, [1, 8], {"background": 1.0})
    assert "  2 la" in lines[1] and "  5 la" in lines[1] and "   1+0   sy" in lines[1]
