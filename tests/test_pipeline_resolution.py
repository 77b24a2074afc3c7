"""Which resolution a clip is scored at (issue 13 item 1): tensors at their own size unless the
config asks for a working size; files at the paper's 1024 px; recorded in every result."""
from __future__ import annotations

import torch

from geocon_torch import score_clip
from geocon_torch.config import GeoConConfig
from geocon_torch.io.writer import write_video
from geocon_torch.pipeline import FILE_LONG_SIDE, load_clip, working_long_side
from geocon_torch.synth import grounded_clip


def _frames() -> torch.Tensor:
    return grounded_clip("C2", num_frames=4, size=(120, 160), seed=0).frames


def test_tensors_native_files_1024_by_default(tmp_path):
    frames = _frames()
    cfg = GeoConConfig()
    assert cfg.io.long_side == "auto" and working_long_side(cfg, frames) is None
    clip, _ = load_clip(frames, cfg)
    assert clip.size == (120, 160) and clip.scale == 1.0
    path = write_video(tmp_path / "c.mp4", frames, fps=8)
    assert working_long_side(cfg, str(path)) == FILE_LONG_SIDE
    clip, _ = load_clip(path, cfg)
    assert max(clip.size) == FILE_LONG_SIDE


def test_an_explicit_working_size_applies_to_tensors_too():
    frames = _frames()
    for side, want in ((80, (60, 80)), (None, (120, 160))):
        cfg = GeoConConfig(io={"long_side": side})
        clip, _ = load_clip(frames, cfg)
        assert clip.size == want and working_long_side(cfg, frames) == side


def test_resolution_recorded_in_the_result():
    res = score_clip(_frames(), preset="background", config={"io": {"long_side": 80}}).to_dict()
    assert res["working_size"] == [60, 80]
    assert res["scored_at"] == {"source_size": [120, 160], "scale": 0.5, "long_side": 80}
    res = score_clip(_frames(), preset="background").to_dict()
    assert res["working_size"] == [120, 160] and res["scored_at"]["long_side"] == "auto"
