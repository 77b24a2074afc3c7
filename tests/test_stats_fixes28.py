"""Statistics audit s28 (F1-F4): a fixed-bound calibration that rejects every clean clip, an
infeasible false-pass target in ``select_bounds``, a reward margin equal to ``min_margin`` up to
round-off, and kept +inf / NaN in the masked quantiles (padding invariance)."""
from __future__ import annotations

import itertools
import math
import re
from typing import List, Sequence, Tuple

import numpy as np
import pytest
import torch

from geocon_torch._tensor_utils import (group_index, grouped_quantiles, masked_median,
                                        masked_quantile, quantile_of_sorted, sorted_valid)
from geocon_torch.bench.calibration import evaluate, fit_regime
from geocon_torch.bench.preferences import choose_pair
from geocon_torch.errors import InputError
from geocon_torch.gate.parallax import quantile_bounds
from geocon_torch.measures.calibration import REGIME_BOUNDS, select_bounds
from geocon_torch.rewards import ClipReward


# ------------------------------------------------------------------ F1: fit_regime, fixed bounds

def _rows(parallax, corruption, **extra):
    return [dict({"status": "ok", "regime": "F", "ir": 1.0, "ge_px": 0.02, "ge_norm": 0.08,
                  "long_side": 256, "ge_fine_norm": 0.08, "ge_peak_norm": 0.1,
                  "ge_spread_norm": 0.02, "parallax_ref": p, "corruption": corruption,
                  "severity": 1.0 if corruption else 0.0}, **extra) for p in parallax]


@pytest.mark.parametrize("bad_parallax", [(30.0, 5.0), (5.0,)])
def test_fixed_bounds_that_reject_every_clean_clip_give_a_finite_reject_all_gate(bad_parallax):
    """Every clean clip below a fixed parallax bound: it was a KeyError('ir_min') (one corrupted
    clip above the bound) or "no scored clips to calibrate on" (none above). Now the fixed bound
    is kept, every free bound is finite and beyond every clip's value, the rates are the
    written gate's (0 / 0) and the reject-all warning names the fixed bounds."""
    clean = _rows([10.0, 12.0], None)
    bad = _rows(bad_parallax, "background_slide")
    with pytest.warns(UserWarning, match=r"no F bounds pass a clean clip.*fixed bounds"):
        th = fit_regime(clean, bad, "F", 0.05, fixed={"parallax_ref_min": 16.0})
    assert [k for k, _, _ in REGIME_BOUNDS["F"]] == [k for k in th if k.endswith(("_min",
                                                                                   "_max"))]
    assert th["parallax_ref_min"] == 16.0
    assert (th["true_pass"], th["false_pass"]) == (0.0, 0.0)
    assert (th["n_clean"], th["n_corrupted"]) == (2, len(bad))
    for key, stat, low in REGIME_BOUNDS["F"][:4]:  # the free bounds reject every clip
        assert math.isfinite(th[key])
        for r in clean + bad:
            assert (r[stat] < th[key]) if low else (r[stat] > th[key]), (key, r[stat])
    ev = evaluate(clean + bad, {"F": th})
    assert (ev["true_pass"], ev["false_pass"]) == (0.0, 0.0)


def test_a_reject_all_fixed_gate_counts_a_corrupted_clip_no_bound_can_reject():
    """A corrupted clip that passes the fixed bounds and has no value of the free statistics
    (parallax missing: it meets every parallax bound) is counted in the false-pass rate."""
    clean = _rows([10.0, 12.0], None)
    bad = _rows([None, 30.0], "breathing", ge_px=0.0125, ge_norm=0.05, ge_fine_norm=0.05)
    with pytest.warns(UserWarning, match="no F bounds pass a clean clip"):
        th = fit_regime(clean, bad, "F", 0.05,
                        fixed={"ir_min": 0.5, "ge_norm_max": 0.06, "ge_fine_norm_max": 1.0,
                               "ge_spread_norm_max": 1.0})
    assert "parallax_ref_min" in th and math.isfinite(th["parallax_ref_min"])
    assert th["parallax_ref_min"] > 30.0 and th["ir_min"] == 0.5
    assert (th["true_pass"], th["false_pass"]) == (0.0, 0.5)
    ev = evaluate(clean + bad, {"F": th})
    assert (ev["true_pass"], ev["false_pass"]) == (0.0, 0.5)


def test_every_bound_fixed_measures_the_fixed_gate():
    """Nothing left to fit (every bound of the regime fixed) used to raise IndexError."""
    clean = _rows([70.0, 12.0], None)
    bad = _rows([30.0, 5.0], "breathing")
    fixed = {"ir_min": 0.5, "ge_norm_max": 1.0, "ge_fine_norm_max": 1.0,
             "ge_spread_norm_max": 1.0, "parallax_ref_min": 16.0}
    th = fit_regime(clean, bad, "F", 0.05, fixed=fixed)
    assert {k: th[k] for k in fixed} == fixed
    assert (th["true_pass"], th["false_pass"]) == (0.5, 0.5)


# ------------------------------------------------------------------ F2: select_bounds

def _rate(x: np.ndarray, bounds: Sequence[float], lower: Sequence[bool]) -> float:
    if x.shape[0] == 0:
        return 0.0
    ok = np.ones(x.shape[0], bool)
    for d, low in enumerate(lower):
        ok &= (x[:, d] >= bounds[d]) if low else (x[:, d] <= bounds[d])
    return float(ok.mean())


def test_an_infeasible_target_falls_back_on_bounds_that_meet_it():
    """A corrupted clip above every clean clip (lower bound) or below (upper bound): the
    candidate that rejected every clean clip still let it through, nothing met a target of 0
    and argmax took the first candidate (false-pass 1.0). The reject-all candidate now rejects
    the corrupted clips too."""
    clean = torch.tensor([[0.5], [0.6]], dtype=torch.float64)
    bounds, tp, fp = select_bounds(clean, torch.tensor([[2.0]], dtype=torch.float64), [True],
                                   target_false_pass=0.0)
    assert (tp, fp) == (0.0, 0.0) and bounds[0] > 2.0 and math.isfinite(bounds[0])
    bounds, tp, fp = select_bounds(clean, torch.tensor([[-3.0]], dtype=torch.float64),
                                   [False], target_false_pass=0.0)
    assert (tp, fp) == (0.0, 0.0) and -math.inf < bounds[0] < -3.0


def test_select_bounds_meets_the_target_and_is_optimal_on_random_cases():
    """Brute force over every combination of the documented candidates (the clean values and,
    per statistic, a bound beyond every clip): the result meets the target, its rates are those
    of the returned (moved) bounds, and its true-pass rate is the best feasible one."""
    rng = np.random.default_rng(28)
    infeasible_before = 0
    for _ in range(200):
        d_all, nc, nb = int(rng.integers(1, 4)), int(rng.integers(1, 8)), int(rng.integers(0, 9))
        lower = [bool(rng.random() < 0.5) for _ in range(d_all)]
        clean = np.round(rng.normal(size=(nc, d_all)), 1)
        bad = np.round(2 * rng.normal(size=(nb, d_all)) + np.where(lower, -0.7, 0.7), 1)
        target = float(rng.choice([0.0, 0.05, 0.2, 0.5]))
        every = np.concatenate([clean, bad])
        old = [np.append(np.unique(clean[:, d]), clean[:, d].max() + 1 if low
                         else clean[:, d].min() - 1) for d, low in enumerate(lower)]
        infeasible_before += all(_rate(bad, c, lower) > target + 1e-12
                                 for c in itertools.product(*old))
        cands = [np.append(np.unique(clean[:, d]), every[:, d].max() + 1 if low
                           else every[:, d].min() - 1) for d, low in enumerate(lower)]
        best = max(_rate(clean, c, lower) for c in itertools.product(*cands)
                   if _rate(bad, c, lower) <= target + 1e-12)
        bounds, tp, fp = select_bounds(torch.tensor(clean), torch.tensor(bad), lower, target)
        assert fp <= target + 1e-12
        assert (tp, fp) == (_rate(clean, bounds, lower), _rate(bad, bounds, lower))
        assert tp == best
    assert infeasible_before >= 10  # the cases that used to break the target are in the draw


def test_a_target_no_bound_can_meet_is_an_error():
    """A corrupted clip without a value of any statistic (+inf for a lower bound: it meets
    every bound) passes every gate: a target below its share cannot be met."""
    clean = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    bad = torch.tensor([[math.inf, -math.inf], [0.2, 0.4]], dtype=torch.float64)
    with pytest.raises(InputError, match=r"1 of the 2 corrupted clips"):
        select_bounds(clean, bad, (True, False), 0.4)
    bounds, tp, fp = select_bounds(clean, bad, (True, False), 0.5)  # its share: allowed
    assert (tp, fp) == (1.0, 0.5)


# ------------------------------------------------------------------ F3: choose_pair margin

def _ok(v: float) -> ClipReward:
    return ClipReward(v, "ok", None, 4, 4)


@pytest.mark.parametrize("lo, hi, min_margin", [(0.5, 0.6, 0.1), (0.8, 0.9, 0.1),
                                                (0.1, 0.3, 0.2), (0.9, 1.0, 0.1)])
def test_a_margin_equal_to_the_minimum_up_to_round_off_is_a_pair(lo, hi, min_margin):
    assert hi - lo < min_margin  # by an ulp or two: 0.6 - 0.5 = 0.09999999999999998
    rec = choose_pair("a prompt", [("a", _ok(lo)), ("b", _ok(hi))], "epipolar",
                      min_margin=min_margin)
    assert rec["status"] == "pair" and (rec["chosen"], rec["rejected"]) == ("b", "a")


@pytest.mark.parametrize("hi", [0.599999, 0.6 - 1e-10, 0.6 - 2e-15])
def test_a_margin_below_the_minimum_prints_numbers_that_differ(hi):
    rec = choose_pair("a prompt", [("a", _ok(0.5)), ("b", _ok(hi))], "epipolar",
                      min_margin=0.1)
    assert rec["status"] == "skipped", rec
    got = re.fullmatch(r"margin (\S+) is below the minimum (\S+)", rec["reason"])
    assert got is not None, rec["reason"]
    assert got.group(1) != got.group(2) and float(got.group(1)) < float(got.group(2))


# ------------------------------------------------------------------ F4: masked quantiles

def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bitwise equal values, NaN where NaN."""
    return bool(torch.equal(torch.isnan(a), torch.isnan(b))
                and torch.equal(torch.nan_to_num(a, nan=0.0), torch.nan_to_num(b, nan=0.0)))


def _reference_sorted_valid(x: torch.Tensor, mask: torch.Tensor
                            ) -> Tuple[torch.Tensor, torch.Tensor]:
    """The sorted_valid the audit found (the dtype's largest value as the fill)."""
    big = torch.finfo(x.dtype).max if x.is_floating_point() else torch.iinfo(x.dtype).max
    return torch.where(mask, x, torch.full_like(x, big)).sort(-1).values, mask.sum(-1)


def _rows_with(kept: List[float], pad: int, dtype: torch.dtype
               ) -> Tuple[torch.Tensor, torch.Tensor]:
    x = torch.tensor([kept + [7.0] * pad], dtype=dtype)  # padding value: any
    keep = torch.tensor([[True] * len(kept) + [False] * pad])
    return x, keep


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_a_kept_inf_or_nan_gives_the_same_quantiles_with_and_without_padding(dtype):
    inf, nan = math.inf, math.nan
    for kept in ([1.0, inf, 5.0], [1.0, inf, inf], [1.0, nan, 5.0], [inf], [nan, inf, -inf, 2.0],
                 [3.0, nan, nan, 1.0, inf]):
        x0, k0 = _rows_with(kept, 0, dtype)
        for pad in (1, 3, 17):
            x, k = _rows_with(kept, pad, dtype)
            for q in (0.0, 0.1, 0.5, 0.9, 1.0):
                assert _same(masked_quantile(x, k, q)[0], masked_quantile(x0, k0, q)[0]), \
                    (kept, pad, q)
                for interp in ("linear", "lower"):
                    got = quantile_of_sorted(*sorted_valid(x, k), q, interpolation=interp)
                    want = quantile_of_sorted(*sorted_valid(x0, k0), q, interpolation=interp)
                    assert _same(got, want), (kept, pad, q, interp)
            assert _same(masked_median(x, k)[0], masked_median(x0, k0)[0]), (kept, pad)
            for got, want in zip(quantile_bounds(x, k, 0.9, 1.645),
                                 quantile_bounds(x0, k0, 0.9, 1.645)):
                assert _same(got, want), (kept, pad)
    # a kept inf is the largest kept value, not the dtype's largest finite one (linear
    # interpolation between two infs is NaN, as numpy.quantile and torch.quantile)
    x, k = _rows_with([1.0, inf, 5.0], 2, dtype)
    assert masked_quantile(x, k, 0.9)[0].item() == inf
    x, k = _rows_with([1.0, inf, inf], 2, dtype)
    assert quantile_of_sorted(*sorted_valid(x, k), 0.5, interpolation="lower").item() == inf
    # grouped: a group with padding slots and the same values without
    vals = torch.tensor([[1.0, inf, 5.0, 2.0]], dtype=dtype)
    valid = torch.tensor([True, True, True, False])
    idx, member = group_index([[0, 1, 2], [0, 1, 2, 3]])
    q, n = grouped_quantiles(vals, valid, idx, member, qs=(0.5, 0.9))
    want = [quantile_of_sorted(*sorted_valid(vals[:, :3], valid[None, :3]), qq).item()
            for qq in (0.5, 0.9)]
    assert n.tolist() == [[3, 3]] and q[:, 0, 0].tolist() == q[:, 0, 1].tolist() == want
    assert want == [5.0, inf]


def test_finite_masked_quantiles_are_bit_identical_to_the_dtype_max_fill():
    """The fill only changes what lies past the kept entries: on finite values (ties, signed
    zeros, empty rows) every quantile is bit-for-bit the previous one, and a kept +inf no longer
    sorts after the fill."""
    g = torch.Generator().manual_seed(28)
    for dtype, bits in ((torch.float64, torch.int64), (torch.float32, torch.int32),
                        (torch.float16, torch.int16)):
        x = torch.randn(64, 41, generator=g).to(dtype)
        x[:, ::7] = 0.0
        x[::3, ::5] = -0.0
        x[1::4] = x[1::4].round()  # ties
        keep = torch.rand(64, 41, generator=g) < 0.6
        keep[5] = False  # an empty row
        new, n_new = sorted_valid(x, keep)
        old, n_old = _reference_sorted_valid(x, keep)
        assert torch.equal(n_new, n_old)
        for q in (0.0, 0.1, 0.25, 0.5, 0.9, 1.0):
            for interp in ("linear", "lower"):
                a = quantile_of_sorted(new, n_new, q, fill=-1.0, interpolation=interp)
                b = quantile_of_sorted(old, n_old, q, fill=-1.0, interpolation=interp)
                assert torch.equal(a.view(bits), b.view(bits)), (dtype, q, interp)
    integers = torch.randint(-5, 5, (8, 9), generator=g)
    keep = torch.rand(8, 9, generator=g) < 0.5
    assert torch.equal(sorted_valid(integers, keep)[0], _reference_sorted_valid(integers, keep)[0])
    x, k = _rows_with([1.0, math.inf], 1, torch.float64)
    assert sorted_valid(x, k)[0][0, :2].tolist() == [1.0, math.inf]
