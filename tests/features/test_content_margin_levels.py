"""The content margin (``features.content_margin_px``) holds at every feature level in that
level's own pixels: at scale s the content mask is eroded by ``content_margin_px / s`` working
pixels (a keypoint's support grows as 1 / s), so keypoints whose support straddles a static
letterbox / pillarbox edge do not survive at the coarse levels. Before, the mask was eroded
once at the working resolution (1 level pixel at scale 1/4), and a pillarboxed grounded pan
had about twice the bar-free clip's median GE_H at scale 1/4 (0.271 vs 0.129 px).
A clip without bars (content mask all True) is unchanged at every scale (values pinned from
the code before the change)."""
from __future__ import annotations

import statistics

import pytest
import torch

from geocon_torch import score_clips
from geocon_torch.config import FeatureConfig
from geocon_torch.features import extract_correspondences
from geocon_torch.io.reader import clip_from_tensor
from geocon_torch.synth import render_scene

#: side bars of the pillarboxed clip: content columns [BAR, BAR + 320) of a 432-px-wide frame
BAR, WIDE = 56, 432
PAIRS = torch.tensor([[0, 1], [1, 2], [2, 3]])
MODES = [("opencv-sift", "scale_space"), ("opencv-sift", "pyramid"),
         ("torch-sift", "pyramid"), ("lk-tracks", "pyramid")]
#: bar-free clip, max_keypoints 500: per mode and scale (matches, sum of the x1 coordinates),
#: pinned from the code before the per-level margin
BAR_FREE = {
    ("opencv-sift", "scale_space"): {0.25: (183, 44446.445583343506),
                                     0.5: (763, 191340.7205438614),
                                     1.0: (1172, 289497.9250719547)},
    ("opencv-sift", "pyramid"): {0.25: (202, 51960.76310348511),
                                 0.5: (826, 214668.41367006302),
                                 1.0: (1172, 289497.92504382133)},
    ("torch-sift", "pyramid"): {0.25: (158, 37780.24748325348),
                                0.5: (738, 182152.2509675026),
                                1.0: (1194, 300004.44972753525)},
    ("lk-tracks", "pyramid"): {0.25: (380, 92920.0), 0.5: (1342, 333870.0),
                               1.0: (1492, 379253.0)},
}


def _pan(num_frames: int):
    """(bar-free (T, 3, 180, 320), pillarboxed (T, 3, 180, 432)) uint8 frames of a grounded
    C2 pan."""
    x = render_scene("C2", motion="pan", num_frames=num_frames, size=(180, 320), seed=0).frames
    y = torch.zeros(num_frames, 3, 180, WIDE, dtype=torch.uint8)
    y[..., BAR:BAR + 320] = x
    return x, y


@pytest.fixture(scope="module")
def short_pan():
    return _pan(4)


@pytest.mark.parametrize("backend, mode", MODES)
def test_kept_points_lie_the_margin_in_level_pixels_off_the_bars(short_pan, backend, mode):
    """Every match at scale s lies >= content_margin_px pixels of that level inside the
    content: at level pixel x_s = (x + 0.5) s - 0.5 the bar edge is at BAR s - 0.5, so
    x >= BAR - 0.5 + m / s (and the same from the right bar)."""
    clip = clip_from_tensor(short_pan[1])
    assert clip.content_mask[:, BAR:BAR + 320].all() and not clip.content_mask[:, :BAR].any()
    cfg = FeatureConfig(backend=backend, scale_mode=mode, max_keypoints=500)
    m = cfg.content_margin_px
    res = extract_correspondences(clip, PAIRS, cfg, device="cpu")
    assert sorted(res) == [0.25, 0.5, 1.0]
    for s, c in res.items():
        x = torch.cat([c.x1[c.mask], c.x2[c.mask]])[:, 0]
        assert x.numel() > 50, s
        lo, hi = BAR - 0.5 + m / s, BAR + 320 - 0.5 - m / s
        assert float(x.min()) >= lo - 1e-3 and float(x.max()) <= hi + 1e-3, (s, lo, hi)


@pytest.mark.parametrize("backend, mode", MODES)
def test_bar_free_clip_unchanged(short_pan, backend, mode):
    clip = clip_from_tensor(short_pan[0])
    assert clip.content_mask.all()
    cfg = FeatureConfig(backend=backend, scale_mode=mode, max_keypoints=500)
    res = extract_correspondences(clip, PAIRS, cfg, device="cpu")
    got = {s: (int(c.mask.sum()), float(c.x1[c.mask].double().sum())) for s, c in res.items()}
    want = BAR_FREE[(backend, mode)]
    assert sorted(got) == sorted(want)
    for s, (n, total) in want.items():
        assert got[s][0] == n, s
        assert got[s][1] == pytest.approx(total, rel=1e-9, abs=0), s


def _per_scale(result) -> dict:
    """scale -> (median GE_H px, median matches) over the background block's per-pair rows."""
    rows = result.to_dict()["background"]["per_pair"]
    out = {}
    for s in sorted({r["scale"] for r in rows}):
        rs = [r for r in rows if r["scale"] == s]
        out[s] = (statistics.median(r["ge_h_px"] for r in rs if r["ge_h_px"] == r["ge_h_px"]),
                  statistics.median(r["matches"] for r in rs))
    return out


def test_bars_do_not_raise_the_coarse_ge():
    """The audit's clip: a 10-frame grounded C2 pan, 320 x 180 (portrait) content, bar-free
    and pillarboxed into a 320 x 568 black frame. The barred clip's median GE_H per scale stays
    within 1.5x the bar-free clip's, with no more matches at scale 1/4 than it. Measured (px,
    scale 1/4, 1/2, 1; matches at 1/4): bar-free 0.129 / 0.082 / 0.078, 38; barred before
    0.271 / 0.130 / 0.095, 45 (ratio 2.1 at 1/4); barred now 0.173 / 0.100 / 0.095, 37."""
    x = render_scene("C2", motion="pan", num_frames=10, size=(320, 180), seed=0).frames
    y = torch.zeros(10, 3, 320, 568, dtype=torch.uint8)
    y[..., 194:374] = x
    free, barred = (_per_scale(r) for r in score_clips([x, y], preset="background",
                                                        device="cpu"))
    assert sorted(free) == sorted(barred) == [0.25, 0.5, 1.0]
    for s in free:
        assert barred[s][0] < 1.5 * free[s][0], (s, free[s], barred[s])
    assert barred[0.25][1] <= free[0.25][1], (free, barred)
