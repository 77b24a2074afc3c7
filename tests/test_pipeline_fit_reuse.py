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


def test_reused_rows_equal_a_fresh_fit_of_every_row():
    d = fundamental_pairs(9, 120, outlier_ratio=0.3, noise_px=0.5, seed=4)
    x1, x2 = d["x1"].float(), d["x2"].float()
    mask = torch.ones(9, 120, dtype=torch.bool)
    mask[0, 100:] = False  # rows of different widths, as scales are
    scores = torch.rand(9, 120, generator=torch.Generator().manual_seed(0))
    cfg = GeoConConfig()
    pre = _fit_both(x1, x2, mask, scores, cfg)
    final = mask.clone()
    final[7, :15] = False  # the background mask removed matches of two rows
    final[2, 50:60] = False
    got = _fit_reusing(x1, x2, final, scores, cfg, pre, mask)
    _assert_same(got, _fit_both(x1, x2, final, scores, cfg))
    # the untouched rows really are the preliminary ones, rows 2 and 7 were fitted again
    assert torch.equal(got[1].inliers[6], pre[1].inliers[6])
    assert not bool(got[1].inliers[7, :15].any()) and bool(pre[1].inliers[7, :15].any())
    # nothing changed: the preliminary fits are the result
    _assert_same(_fit_reusing(x1, x2, mask, scores, cfg, pre, mask), pre)
