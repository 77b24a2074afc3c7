"""A lens that blacks out much of the frame is in the result's ``warnings`` (left alone in
s31: it was only a Python UserWarning, which a leaderboard run or a log of JSON results never
shows). The same text is the UserWarning and the result's line; a mild lens adds none."""
from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.io.integrity import decode_verdict
from geocon_torch.io.lens import OUTSIDE_WARN, lens_warning
from geocon_torch.synth import render_scene


def _pan() -> torch.Tensor:
    return render_scene("C2", motion="pan", rate=1.0, num_frames=6, size=(192, 256),
                        seed=0).frames


def test_a_lens_that_blacks_out_a_third_of_the_frame_is_a_result_warning():
    with pytest.warns(UserWarning, match=r"io.lens leaves 34 % of the 256 x 192 working"):
        r = score_clip(_pan(), preset="background", device="cpu",
                       config={"io": {"lens": {"fx": 120.0, "k1": 0.3}}}).to_dict()
    lines = [w for w in r["warnings"] if w.startswith("io.lens")]
    assert len(lines) == 1, r["warnings"]
    assert lines[0].startswith("io.lens leaves 34 % of the working frame black")
    assert "k1 = 0.3, camera fx 120 fy 120 cx 127.5 cy 95.5 px" in lines[0]
    assert 0.335 < r["io"]["lens"]["outside_fraction"] < 0.345


def test_a_mild_lens_adds_no_result_warning():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        r = score_clip(_pan(), preset="background", device="cpu",
                       config={"io": {"lens": {"fx": 230.4, "k1": -0.3}}}).to_dict()
    assert not [w for w in r["warnings"] if "io.lens" in w]
    assert r["io"]["lens"]["undistorted"] is True


def test_lens_warning_threshold_and_decode_verdict():
    rec = {"undistorted": True, "coefficients": [0.3, 0.0, 0.0, 1e-3, 0.0],
           "camera_px": [120.0, 121.0, 127.5, 95.5], "outside_fraction": OUTSIDE_WARN}
    assert lens_warning(rec) is None  # at the bound: no warning (more than 10 % warns)
    above = dict(rec, outside_fraction=np.nextafter(OUTSIDE_WARN, 1.0))
    text = lens_warning(above, (640, 480))
    assert text.startswith("io.lens leaves 10 % of the 640 x 480 working frame black")
    assert "k1 = 0.3, p2 = 0.001, camera fx 120 fy 121" in text
    assert lens_warning(dict(above, undistorted=False)) is None
    block = {"lost_frames": 0, "lost_fraction": 0.0, "decoded_frames": 8, "first_errors": [],
             "decode_errors": 0, "timestamp_gaps": 0, "lens": above}
    assert decode_verdict(block, 0.1) == (None, [lens_warning(above)])
    assert decode_verdict(dict(block, lens=rec), 0.1) == (None, [])
