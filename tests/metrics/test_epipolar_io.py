"""The epipolar functional metrics and Metric classes given a GeoConConfig (or its dict) read the
frames its ``io`` section keeps (stride, frame cap) as score_clip(preset="worldatlas") does, bit
for bit; an EpipolarConfig or None keeps reading every frame."""
from __future__ import annotations

import pytest
import torch

from geocon_torch import GeoConConfig, score_clips
from geocon_torch.config import EpipolarConfig
from geocon_torch.metrics import EpipolarError, EpipolarInlierRate, epipolar_collection
from geocon_torch.metrics.functional import (epipolar_error, epipolar_inlier_rate,
                                             feature_match_coverage)
from geocon_torch.synth import render_scene

pytest.importorskip("cv2")

FUNCTIONS = {"epipolar_error": epipolar_error, "epipolar_inlier_rate": epipolar_inlier_rate,
             "feature_match_coverage": feature_match_coverage}


@pytest.fixture(scope="module")
def videos() -> torch.Tensor:
    """(2, 8, 3, 144, 192) uint8: two moving scenes."""
    return torch.stack([render_scene("C3", num_frames=8, size=(144, 192), seed=0).frames,
                        render_scene("C2", num_frames=8, size=(144, 192), seed=1).frames])


def _blocks(videos, config):
    return [r.to_dict()["epipolar"] for r in score_clips(videos, config=config,
                                                          preset="worldatlas", progress=False)]


@pytest.mark.parametrize("implementation,io", [
    ("torch", {"stride": 2}), ("torch", {"max_frames": 4}),
    ("opencv", {"stride": 2, "max_frames": 3}), ("torch", {"long_side": 128, "stride": 3})])
@pytest.mark.parametrize("as_dict", [False, True], ids=["GeoConConfig", "dict"])
def test_functional_values_equal_score_clip_under_io(videos, implementation, io, as_dict):
    """Per clip, each functional's value equals score_clips' epipolar block bit for bit (and the
    status is ok), for a GeoConConfig and for its dict."""
    data = {"epipolar": {"implementation": implementation}, "io": io}
    config = data if as_dict else GeoConConfig.from_dict(data)
    blocks = _blocks(videos, data)
    for key, fn in FUNCTIONS.items():
        values, status = fn(videos, config, implementation=implementation, return_status=True)
        assert values.tolist() == [b[key] for b in blocks] and status.tolist() == [0, 0]
    score = epipolar_error(list(videos), config, implementation=implementation, normalized=True)
    assert score.tolist() == [b["epipolar_error_score"] for b in blocks]


def test_metric_classes_and_collection_apply_io(videos):
    """The Metric classes and epipolar_collection read the frames ``io`` keeps: compute() of one
    clip equals its score_clip value; the reading settings enter the protocol key."""
    config = GeoConConfig.from_dict({"epipolar": {"implementation": "torch"},
                                     "io": {"stride": 2}})
    block = _blocks(videos[:1], config)[0]
    rate = EpipolarInlierRate(config, implementation="torch")
    rate.update(videos[:1])
    trio = epipolar_collection(config, implementation="torch")
    trio.update(videos[:1])
    got = trio.compute()
    assert rate.compute().item() == block["epipolar_inlier_rate"] == got["EpipolarInlierRate"]
    assert got["EpipolarError"].item() == block["epipolar_error"]
    assert got["FeatureMatchCoverage"].item() == block["feature_match_coverage"]
    assert rate.last_sections[0]["pairs"] == block["pairs"] == 3
    every = EpipolarInlierRate(config.epipolar, implementation="torch")
    assert not torch.equal(rate.protocol_key, every.protocol_key)
    same = EpipolarError(GeoConConfig.from_dict({"epipolar": {"implementation": "torch"}}),
                         implementation="torch")
    assert torch.equal(same.protocol_key, every.protocol_key)


def test_epipolar_config_and_default_io_read_every_frame(videos):
    """An EpipolarConfig or None reads every frame (the io section is the GeoConConfig's); a
    GeoConConfig with the default io gives the same values bit for bit."""
    epi = EpipolarConfig(implementation="torch")
    every = epipolar_error(videos, epi, implementation="torch")
    assert torch.equal(every, epipolar_error(videos, None, implementation="torch"))
    geo = GeoConConfig().replace(epipolar={"implementation": "torch"})
    assert torch.equal(every, epipolar_error(videos, geo, implementation="torch"))
    strided = epipolar_error(videos, geo.replace(io={"stride": 2}), implementation="torch")
    assert not torch.equal(every, strided)
