"""score_clip's fit reuse: the preliminary fits of the motion-mask step stand in for the final
fits of rows the background mask left unchanged, and must equal fitting every row afresh."""
from __future__ import annotations

import torch

from geocon_torch.config import GeoConConfig
from geocon_torch.geometry._synthetic import fundamental_pairs
from geocon_torch.pipeline import _fit_both, _fit_reusing

FIELDS = ("model", "inliers", "residuals", "valid", "num_inliers", "iterations", "score")


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
    pre = _fit_both(x1[pre_rows], x2[pre_rows], pre_mask, scores[pre_rows], cfg, rows=pre_rows)
    final = mask.clone()
    final[7, :15] = False  # the background mask removed matches of one finest row
    got = _fit_reusing(x1, x2, final, scores, cfg, pre, pre_rows, pre_mask)
    _assert_same(got, _fit_both(x1, x2, final, scores, cfg))
    # the reused rows really are the preliminary ones, and row 7 was fitted again
    assert torch.equal(got[1].inliers[6], pre[1].inliers[0])
    assert not bool(got[1].inliers[7, :15].any()) and bool(pre[1].inliers[1, :15].any())


def test_every_row_reused():
    x1, x2, mask, scores = _scene()
    cfg = GeoConConfig()
    rows = torch.arange(9)
    pre = _fit_both(x1, x2, mask, scores, cfg, rows=rows)
    _assert_same(_fit_reusing(x1, x2, mask, scores, cfg, pre, rows, mask.clone()),
                 _fit_both(x1, x2, mask, scores, cfg))
