"""Pillarbox / letterbox bars do not change the reference-pixel normalisations: the gate's
parallax scale, the calibrated GE bounds and the headline score's GE term divide by the long
side of the content (``background["content_long_side"]``), not of the barred frame."""
from __future__ import annotations

import math

import pytest
import torch

from geocon_torch import score_clips
from geocon_torch.measures.headline import headline_score, headline_terms
from geocon_torch.synth import render_scene

# pristine values (before the content long side), unchanged for clips whose long side the bars
# do not change: x (bar-free, portrait 320 x 180) and the top / bottom letterboxed 192 x 320
# clip in a 240 x 320 frame (its score moved from 0.9723911 with the content margin taken in
# each feature level's pixels: tests/features/test_content_margin_levels.py; the gate's view
# has no coarse level, so its parallax did not)
BAR_FREE = {"regime": "F", "magnitude": 3.1813037395477295, "score": 0.9784190448723437}
LETTERBOX = {"regime": "F", "magnitude": 7.225408554077148, "score": 0.9705550197821163}
#: the 192 x 256 (4:3) content of the pillarboxed clip, scored without bars
FOUR_THREE_MAGNITUDE = 8.669309616088867


@pytest.fixture(scope="module")
def scored():
    """Scored dicts of: x (bar-free portrait), y (x pillarboxed to 320 x 568), b (4:3 content
    with 32-px side bars, 256 -> 320 wide), lb (192 x 320 with 24-px top / bottom bars)."""
    x = render_scene("C3", motion="truck", num_frames=10, size=(320, 180), seed=0,
                     speed=0.006).frames
    y = torch.zeros(10, 3, 320, 568, dtype=torch.uint8)
    y[..., 194:374] = x
    wide = render_scene("C3", motion="truck", num_frames=10, size=(192, 320), seed=1,
                        speed=0.006).frames
    b = torch.zeros(10, 3, 192, 320, dtype=torch.uint8)
    b[..., 32:288] = wide[..., 32:288]
    lb = torch.zeros(10, 3, 240, 320, dtype=torch.uint8)
    lb[:, :, 24:216] = wide
    out = score_clips([x, y, b, lb], preset="background")
    return dict(zip(("x", "y", "b", "lb"), (r.to_dict() for r in out)))


def _magnitude(d):
    return d["gate"]["evidence"]["magnitude_ref_px"]


def test_pillarbox_keeps_regime_parallax_verdict_and_score(scored):
    x, y = scored["x"], scored["y"]
    assert y["regime"] == x["regime"]
    assert _magnitude(y) == pytest.approx(_magnitude(x), rel=0.1)
    assert y["background"]["pass_calibrated"] == x["background"]["pass_calibrated"]
    assert y["score"] == pytest.approx(x["score"], abs=0.01)
    assert y["background"]["content_long_side"] == 320  # the bars' 568 is not the content's
    # the calibrated bounds are at the content's resolution: those of the bar-free clip
    assert (y["background"]["calibration"]["thresholds"]
            == x["background"]["calibration"]["thresholds"])


def test_four_three_side_bars_keep_parallax(scored):
    b = scored["b"]
    assert b["background"]["content_long_side"] == 256
    assert _magnitude(b) == pytest.approx(FOUR_THREE_MAGNITUDE, rel=0.1)


@pytest.mark.parametrize("name, pinned", [("x", BAR_FREE), ("lb", LETTERBOX)])
def test_unchanged_when_bars_keep_the_long_side(scored, name, pinned):
    d = scored[name]
    assert d["regime"] == pinned["regime"]
    assert _magnitude(d) == pytest.approx(pinned["magnitude"], rel=1e-6)
    assert d["score"] == pytest.approx(pinned["score"], rel=1e-6)
    assert d["background"]["content_long_side"] == max(d["working_size"])


def _row(**bg):
    return {"status": "ok", "working_size": [240, 320],
            "background": dict({"status": "ok", "ge_px": 0.5}, **bg)}


def test_headline_reads_content_long_side_when_stored():
    old = _row()  # a stored row from before the key: the working long side, as before
    assert headline_terms(old)["ge"] == math.exp(-0.5 * 1024 / 320 / 3.5)
    assert headline_score(old) == math.exp(-0.5 * 1024 / 320 / 3.5)
    new = _row(content_long_side=256)
    assert headline_terms(new)["ge"] == math.exp(-0.5 * 1024 / 256 / 3.5)
