"""Working resolution (geocon_torch.io.resize) and content masks (geocon_torch.io.letterbox)."""
import cv2
import numpy as np
import pytest
import torch

from geocon_torch.errors import ShapeError, VideoReadError
from geocon_torch.io import detect_content_mask, read_clip, working_size, write_video
from geocon_torch.io.resize import resize_frames, resize_image


@pytest.mark.parametrize("hw, long_side, expect", [
    ((1080, 1920), 1024, (576, 1024)),
    ((2160, 3840), 1024, (576, 1024)),
    ((480, 720), 1024, (682, 1024)),   # 682.67 -> nearest even 682
    ((272, 640), 1024, (436, 1024)),   # 435.2 -> 436
    ((240, 320), 1024, (768, 1024)),   # enlarged
    ((1024, 768), 512, (512, 384)),    # portrait
    ((241, 321), None, (240, 320)),    # native: odd sides cropped by one px
    ((240, 320), None, (240, 320)),
])
def test_working_size(hw, long_side, expect):
    ws = working_size(*hw, long_side)
    assert ws.size == expect and ws.source == hw
    assert ws.size[0] % 2 == 0 and ws.size[1] % 2 == 0
    assert ws.crop == (long_side is None)
    # a crop drops an odd last row / column: no scaling (the pixels are the source's)
    assert ws.scale == pytest.approx(1.0 if ws.crop else max(expect) / max(hw))
    assert ws.scale_xy == ((1.0, 1.0) if ws.crop else (expect[1] / hw[1], expect[0] / hw[0]))


def test_working_size_no_upscale_and_errors():
    assert working_size(240, 320, 1024, upscale=False).size == (240, 320)
    assert working_size(2160, 3840, 1024, upscale=False).size == (576, 1024)
    with pytest.raises(VideoReadError, match="too small"):
        working_size(1, 64, 1024)
    with pytest.raises(VideoReadError, match="long_side"):
        working_size(64, 64, 0)


def test_resize_keeps_pixel_convention():
    """A ramp I(x) = 4 x halved: working pixel u covers source pixels 2u and 2u + 1, centred at
    x = 2u + 0.5, so it must read exactly 4 (2u + 0.5) = 8u + 2 on interior columns (a corner-
    aligned or shifted resize is off by >= 1 grey level there)."""
    x = np.arange(64, dtype=np.float64)
    ramp = np.broadcast_to((4 * x)[None, :, None], (16, 64, 3)).astype(np.uint8)
    ws = working_size(16, 64, 32)
    expect = 8 * np.arange(32) + 2
    area = resize_image(np.ascontiguousarray(ramp), ws)
    assert area.shape == (8, 32, 3)
    assert np.array_equal(area[4, 2:-2, 0], expect[2:-2])
    t = torch.from_numpy(np.ascontiguousarray(ramp)).permute(2, 0, 1)[None]
    lin = resize_frames(t, ws)[0, 0, 4].double().numpy()
    assert np.array_equal(lin[2:-2], expect[2:-2])
    # same as OpenCV INTER_AREA on the same input
    ref = cv2.resize(np.ascontiguousarray(ramp), (32, 8), interpolation=cv2.INTER_AREA)
    assert np.array_equal(area, ref)


def test_resize_image_other_size_frame():
    """A stream that changes resolution: later frames still come out at the working size."""
    ws = working_size(241, 321, None)  # native: crop to 240 x 320
    first = np.full((241, 321, 3), 7, np.uint8)
    other = np.full((120, 160, 3), 9, np.uint8)
    assert resize_image(first, ws).shape == (240, 320, 3)
    out = resize_image(other, ws)
    assert out.shape == (240, 320, 3) and (out == 9).all()


def _letterboxed(t=4, h=120, w=160, top=12, bottom=12, left=20, right=20, seed=0):
    g = torch.Generator().manual_seed(seed)
    frames = torch.zeros(t, 3, h, w, dtype=torch.uint8)
    body = torch.randint(40, 255, (t, 3, h - top - bottom, w - left - right), generator=g)
    frames[:, :, top:h - bottom, left:w - right] = body.to(torch.uint8)
    return frames


def test_content_mask_excludes_bars(device):
    frames = _letterboxed().to(device)
    mask = detect_content_mask(frames)
    assert mask.shape == (120, 160) and mask.dtype == torch.bool and mask.device == device
    truth = torch.zeros(120, 160, dtype=torch.bool, device=device)
    truth[12:108, 20:140] = True
    assert mask.equal(truth)


def test_content_mask_uses_max_over_time():
    frames = _letterboxed(top=30, bottom=30, left=0, right=0)
    frames[2, :, 0:30] = 200  # the "bar" lights up in one frame: it is picture, not a bar
    mask = detect_content_mask(frames)
    assert mask[:90].all() and not mask[90:].any()


def test_content_mask_ignores_thin_bars_and_dark_clips():
    frames = _letterboxed(top=1, bottom=2, left=2, right=0)  # < 2 % of the side
    assert detect_content_mask(frames, min_fraction=0.02).all()
    assert not detect_content_mask(frames, min_fraction=0.0)[0].any()
    dark = torch.full((3, 3, 40, 60), 5, dtype=torch.uint8)
    assert detect_content_mask(dark).all()  # nothing to separate: all content


def test_content_mask_batched_and_gray():
    a, b = _letterboxed(top=12, bottom=12, left=0, right=0), _letterboxed(top=0, bottom=0)
    masks = detect_content_mask(torch.stack([a, b]))
    assert masks.shape == (2, 120, 160)
    assert masks[0].equal(detect_content_mask(a)) and masks[1].equal(detect_content_mask(b))
    gray = detect_content_mask(a[:, :1])
    assert gray[:12].sum() == 0 and gray[12:108].all()
    with pytest.raises(ShapeError):
        detect_content_mask(a.float())
    with pytest.raises(ShapeError):
        detect_content_mask(a, threshold=16)


def test_letterboxed_mp4_content_mask(tmp_path):
    """A letterboxed + pillarboxed clip through H.264 and a resize: the mask excludes the bars
    (true bars 32 rows top / bottom, 48 columns left / right at 240x320; halved by long_side)."""
    g = torch.Generator().manual_seed(1)
    base = torch.randn(6, 3, 22, 28, generator=g)
    body = torch.nn.functional.interpolate(base, size=(176, 224), mode="bicubic")
    body = ((body - body.min()) / (body.max() - body.min()) * 180 + 60).to(torch.uint8)
    frames = torch.zeros(6, 3, 240, 320, dtype=torch.uint8)
    frames[:, :, 32:208, 48:272] = body
    path = write_video(tmp_path / "boxed.mp4", frames, fps=10)
    native = read_clip(path, long_side=None)
    rows = native.content_mask.any(1).nonzero().squeeze(1)
    cols = native.content_mask.any(0).nonzero().squeeze(1)
    assert abs(rows.min().item() - 32) <= 1 and abs(rows.max().item() - 207) <= 1
    assert abs(cols.min().item() - 48) <= 1 and abs(cols.max().item() - 271) <= 1
    half = read_clip(path, long_side=160)
    assert half.size == (120, 160) and half.content_mask.shape == (120, 160)
    assert not half.content_mask[:15].any() and not half.content_mask[105:].any()
    assert not half.content_mask[:, :23].any() and not half.content_mask[:, 137:].any()
    assert half.content_mask[17:103, 25:135].all()
    assert half.meta["content_fraction"] == pytest.approx((88 * 112) / (120 * 160), abs=0.05)


def test_dark_lines_equal_the_peak_luminance_definition():
    """The uint8-bound shortcut gives exactly ``peak_luminance(...).amax(-1 / -2) < threshold``,
    including lines that sit exactly at the threshold and colours whose channels peak apart."""
    from geocon_torch.io.letterbox import dark_lines, peak_luminance

    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 30, (2, 4, 3, 24, 32), generator=g, dtype=torch.uint8)
    frames[0, :, :, :3] = 0  # true bars
    frames[0, :, :, 5] = 16  # gray exactly at 16/255
    frames[1, 0, 0, 7] = 60  # red in one frame, green in another: channel maxima apart
    frames[1, 2, 1, 7] = 20
    frames[1, :, :, :, 30:] = torch.tensor([15, 17, 16], dtype=torch.uint8).view(3, 1, 1)
    for thr in (16 / 255, 20 / 255, 0.1):
        rows, cols = dark_lines(frames, thr)
        peak = peak_luminance(frames)
        assert torch.equal(rows, peak.amax(-1) < thr) and torch.equal(cols, peak.amax(-2) < thr)
    rows, cols = dark_lines(frames[0, :, :1], 16 / 255)  # one gray channel
    peak = peak_luminance(frames[0, :, :1])
    assert torch.equal(rows, peak.amax(-1) < 16 / 255)


def test_batch_content_fractions_equal_each_clip_alone():
    """clips_from_tensor computes the clips' content fractions in one go: the same numbers as
    each clip read alone (letterboxed, pillarboxed, full frame)."""
    from geocon_torch.io import clip_from_tensor, clips_from_tensor

    g = torch.Generator().manual_seed(3)
    x = torch.randint(60, 240, (3, 4, 3, 60, 80), generator=g, dtype=torch.uint8)
    x[0, :, :, :10] = 0
    x[0, :, :, 50:] = 0
    x[1, :, :, :, :16] = 0
    batch = clips_from_tensor(x)
    alone = [clip_from_tensor(x[k]).meta["content_fraction"] for k in range(3)]
    assert [c.meta["content_fraction"] for c in batch] == alone
    assert alone == pytest.approx([40 / 60, 64 / 80, 1.0], abs=1e-6)


def test_bars_exactly_min_fraction_thick_are_bars():
    """A bar as thick as min_fraction of its side (2 of 100 rows, 3 of 150 columns at 0.02) is
    a bar on every side: "thinner than min_fraction" is ignored, not "as thin as"."""
    frames = _letterboxed(h=100, w=150, top=2, bottom=2, left=3, right=3)
    truth = torch.zeros(100, 150, dtype=torch.bool)
    truth[2:98, 3:147] = True
    assert detect_content_mask(frames, min_fraction=0.02).equal(truth)
    for top, left in ((2, 0), (0, 3)):  # one side at a time
        frames = _letterboxed(h=100, w=150, top=top, bottom=0, left=left, right=0)
        truth = torch.zeros(100, 150, dtype=torch.bool)
        truth[top:, left:] = True
        assert detect_content_mask(frames, min_fraction=0.02).equal(truth), (top, left)
