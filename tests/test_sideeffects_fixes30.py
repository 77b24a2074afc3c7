"""Side effects on the caller's process (sideeffects audit of session 30): the report's figures
leave matplotlib's backend alone, and a float64 default dtype changes no number."""
from pathlib import Path

import pytest
import torch

from geocon_torch.geometry.residuals import symmetric_transfer_error
from geocon_torch.synth import render_scene
from geocon_torch.synth import scenes


@pytest.fixture
def float64_default():
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(old)


def test_report_figures_keep_the_callers_backend_and_open_no_pyplot_figure(tmp_path: Path):
    matplotlib = pytest.importorskip("matplotlib")
    import matplotlib.pyplot as plt

    from geocon_torch.report import plots

    before, open_figures = matplotlib.get_backend(), plt.get_fignums()
    matplotlib.use("svg")
    try:
        out = plots.timeline([0, 1, 2], [1.0, 0.9, None], [0.1, 0.3, None], [True, True, False],
                             tmp_path / "t.png", title="x")
        assert out.stat().st_size > 2_000 and out.read_bytes()[:4] == b"\x89PNG"
        assert matplotlib.get_backend() == "svg" and plt.get_fignums() == open_figures
    finally:
        matplotlib.use(before)


def test_residuals_of_float32_points_stay_float32_under_a_float64_default(float64_default):
    H = torch.eye(3, dtype=torch.float32)[None]
    H[0, 2, :2] = torch.tensor([1e-3, 0.0])  # a point on the line at infinity: w -> tiny
    x1 = torch.tensor([[[0.0, 0.0], [-1000.0, 5.0], [3.0, 4.0]]], dtype=torch.float32)
    x2 = x1 + 0.5
    got = symmetric_transfer_error(H, x1, x2)
    torch.set_default_dtype(torch.float32)
    want = symmetric_transfer_error(H, x1, x2)
    assert got.dtype == torch.float32 and torch.equal(got, want)


def test_synthetic_textures_do_not_depend_on_the_default_dtype(float64_default):
    scenes._cached_atlas.cache_clear()
    got = render_scene("C4", num_frames=2, size=(48, 64), seed=1).frames
    scenes._cached_atlas.cache_clear()
    torch.set_default_dtype(torch.float32)
    want = render_scene("C4", num_frames=2, size=(48, 64), seed=1).frames
    assert torch.equal(got, want)
