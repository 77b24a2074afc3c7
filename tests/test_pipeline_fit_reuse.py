"""The background section's fit reuse (``sections.fits``): the preliminary fits of the
motion-mask step stand in for the final fits of rows the background mask left unchanged, and
must equal fitting every row afresh; ``Fit.rows`` / ``Fit.assemble`` select and scatter rows."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.config import GeoConConfig
from geocon_torch.errors import ShapeError
from geocon_torch.geometry._synthetic import fundamental_pairs
from geocon_torch.sections.fits import fit_both, fit_reusing
from geocon_torch.types import Fit

FIELDS = ("model", "inliers", "residuals", "valid", "num_inliers", "iterations", "cost")


def _assert_same(got, ref):
    for g, r in zip(got, ref):
        assert g.kind == r.kind
        for f in FIELDS:
            assert torch.equal(getattr(g, f), getattr(r, f)), (g.kind, f)


def _scene():
    d = fundamental_pairs(9, 120, outlier_ratio=0.3, noise_px=0.5, seed=4)
    x1, x2 = d["x1"].float(), d["x2"].float()
    mask = torch.ones(9, 120, dtype=torch.bool)
    mask[0, 100:] = False  # rows of different widths, as scales are
    scores = torch.rand(9, 120, generator=torch.Generator().manual_seed(0))
    return x1, x2, mask, scores


def test_reused_rows_equal_a_fresh_fit_of_every_row():
    x1, x2, mask, scores = _scene()
    cfg = GeoConConfig()
    pre_rows = torch.tensor([6, 7, 8])  # the "finest" rows
    pre_mask = mask[pre_rows].clone()
    pre = fit_both(x1[pre_rows], x2[pre_rows], pre_mask, scores[pre_rows], cfg, rows=pre_rows)
    final = mask.clone()
    final[7, :15] = False  # the background mask removed matches of one finest row
    got = fit_reusing(x1, x2, final, scores, cfg, pre, pre_rows, pre_mask)
    _assert_same(got, fit_both(x1, x2, final, scores, cfg))
    # the reused rows really are the preliminary ones, and row 7 was fitted again
    assert torch.equal(got[1].inliers[6], pre[1].inliers[0])
    assert not bool(got[1].inliers[7, :15].any()) and bool(pre[1].inliers[1, :15].any())


def test_every_row_reused():
    x1, x2, mask, scores = _scene()
    cfg = GeoConConfig()
    rows = torch.arange(9)
    pre = fit_both(x1, x2, mask, scores, cfg, rows=rows)
    _assert_same(fit_reusing(x1, x2, mask, scores, cfg, pre, rows, mask.clone()),
                 fit_both(x1, x2, mask, scores, cfg))


def test_fit_rows_and_assemble_invert_each_other():
    x1, x2, mask, scores = _scene()
    fit_h, _ = fit_both(x1, x2, mask, scores, GeoConConfig())
    odd, even = torch.arange(1, 9, 2), torch.arange(0, 9, 2)
    back = Fit.assemble(9, [(odd, fit_h.rows(odd)), (even, fit_h.rows(even))])
    _assert_same([back], [fit_h])
    by_mask = fit_h.rows(torch.arange(9) % 2 == 1)
    _assert_same([by_mask], [fit_h.rows(odd)])
    assert by_mask.num_rows == 4 and by_mask.inliers.shape == (4, 120)
    with pytest.raises(ShapeError):
        Fit.assemble(3, [])
