"""torchmetrics BackgroundConsistency: values, counts (its 2-gloo-rank test: test_metrics_api)."""
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
    with pytest.warns(UserWarning, match="no applicable clip gave ir"):  # "no data": NaN + warning
        empty = BackgroundConsistency(config=CFG).compute()
    assert torch.isnan(empty["ir"]) and int(empty["num_clips"]) == 0


# The 2-gloo-rank test of this class (every output equal to one process) lives in
# tests/test_metrics_api.py, together with the other classes' (one spawn for all).
