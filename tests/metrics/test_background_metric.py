"""torchmetrics BackgroundConsistency: values, counts (its 2-gloo-rank test: test_metrics_api)."""
import pytest
import torch
from helpers import make_clips

from geocon_torch.metrics.background import (
    BackgroundConsistency,
    BackgroundGeometricError,
    BackgroundInlierRatio,
)

CFG = {"io": {"long_side": None}, "features": {"mutual": True, "scales": [0.5, 1.0]},
       "segment": {"method": "none"}}




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
# tests/metrics/test_metrics_api.py, together with the other classes' (one spawn for all).
