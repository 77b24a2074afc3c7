"""What the reader turns its input into, pinned to closed-form numbers: float frames to uint8
(``round(x * 255)``), the motion statistic of gray (T, 1, H, W) clips (mean over the C * H * W
elements a frame has), BT.601 luma in RGB order for the letterbox test, and the default working
size of a file (1024 px long side, a tensor keeps its own)."""
from __future__ import annotations

import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.config import GeoConConfig
from geocon_torch.io import clip_from_tensor, detect_content_mask, tensor_frames
from geocon_torch.io.letterbox import peak_luminance
from geocon_torch.io.writer import write_video
from geocon_torch.pipeline import load_clip, working_long_side


def test_float_frames_round_to_the_nearest_grey_level():
    """Every grey level v plus 0.3 / 0.6 of a level (float32 in [0, 1]) maps to round(v + f)."""
    v = torch.arange(256, dtype=torch.float32)
    frac = torch.tensor([0.3, 0.6])
    levels = (v[:, None] + frac).clamp(max=255.0).reshape(-1)  # (512,) grey levels
    x = (levels / 255.0).view(1, 1, 16, 32).expand(2, 3, 16, 32).contiguous()
    want = levels.round().to(torch.uint8).view(16, 32)
    clip = clip_from_tensor(x)
    assert clip.frames.dtype == torch.uint8 and torch.equal(clip.frames[1, 2], want)
    assert int(want[0, 1]) == 1 and int(want.view(-1)[201]) == 101  # 0.6 -> 1, 100.6 -> 101
    assert torch.equal(tensor_frames(x[None])[0], clip.frames)
    probe = torch.full((2, 3, 8, 8), 100.6 / 255.0)  # the documented example
    assert (clip_from_tensor(probe).frames == 101).all()


@pytest.mark.parametrize("step, want", [(1, 1.0), (3, 3.0)])
def test_gray_clip_motion_is_the_mean_over_its_own_elements(step, want):
    """Frame 1 = frame 0 + step everywhere: max_mad = step grey levels for a gray clip, the same
    as its RGB expansion (mean over 1 * H * W, not 3 * H * W elements)."""
    x = torch.full((2, 1, 16, 16), 100, dtype=torch.uint8)
    x[1] += step
    gray = clip_from_tensor(x).meta["motion"]
    assert gray == {"max_mad": want, "pairs": 1, "frozen": False}
    rgb = clip_from_tensor(x.expand(-1, 3, -1, -1).contiguous()).meta["motion"]
    assert rgb == gray


def test_gray_clip_sampled_motion_and_frozen_verdict():
    """A gray clip moving by 1 level per frame only every other frame: mean |diff| 0 / 1 over
    the consecutive pairs (not frozen), 1 level over the sampled pairs (0, 2), (2, 4)."""
    x = torch.full((5, 1, 16, 16), 50, dtype=torch.uint8)
    x[2:4] += 1
    x[4] += 2
    m = clip_from_tensor(x, motion_every=2).meta["motion"]
    assert (m["max_mad"], m["pairs"], m["frozen"]) == (1.0, 4, False)
    assert m["sampled"] == {"max_mad": 1.0, "pairs": 2, "frozen": False, "every": 2}


def test_luma_weights_are_bt601_in_rgb_order():
    """Pure red (60, 0, 0) has luma 0.299 * 60 = 17.94 > 16 (content), pure blue (0, 0, 100)
    0.114 * 100 = 11.4 < 16 (a bar): the letterbox test reads R, G, B in that order."""
    red = torch.zeros((1, 3, 4, 4), dtype=torch.uint8)
    red[:, 0] = 60
    assert float(peak_luminance(red)[0, 0]) == pytest.approx(0.299 * 60 / 255, rel=1e-6)
    blue = torch.zeros((1, 3, 4, 4), dtype=torch.uint8)
    blue[:, 2] = 100
    assert float(peak_luminance(blue)[0, 0]) == pytest.approx(0.114 * 100 / 255, rel=1e-6)
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(40, 256, (3, 3, 40, 40), generator=g, dtype=torch.uint8)
    frames[:, :, :10] = 0
    frames[:, 0, :10] = 60  # top 10 rows saturated dark red: content
    assert detect_content_mask(frames).all()
    frames[:, :, :10] = 0
    frames[:, 2, :10] = 100  # top 10 rows saturated dark blue: a letterbox bar
    mask = detect_content_mask(frames)
    assert mask.shape == (40, 40) and not mask[:10].any() and mask[10:].all()


def test_a_file_is_read_at_1024_px_by_default(tmp_path):
    """``io.long_side = "auto"``: a 320x240 file is scored at 1024x768 (scale 3.2), the same
    frames as a tensor at their own 320x240."""
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (4, 3, 240, 320), generator=g, dtype=torch.uint8)
    path = write_video(tmp_path / "small.mp4", frames)
    assert working_long_side(GeoConConfig(), str(path)) == 1024
    assert working_long_side(GeoConConfig(), frames) is None
    clip, _ = load_clip(str(path), {"io": {"max_frames": 2}}, "cpu")
    assert tuple(clip.size) == (768, 1024) and clip.scale == pytest.approx(3.2)
    res = score_clip(str(path), preset="epipolar-dpo", device="cpu").to_dict()
    assert res["working_size"] == [768, 1024]
    assert res["scored_at"] == {"source_size": [240, 320], "scale": pytest.approx(3.2),
                                "long_side": "auto"}
    res = score_clip(frames, preset="epipolar-dpo", device="cpu").to_dict()
    assert res["working_size"] == [240, 320] and res["scored_at"]["scale"] == 1.0
