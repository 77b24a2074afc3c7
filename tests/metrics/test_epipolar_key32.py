"""The epipolar metrics' protocol key names every io setting that changes the pixels they
measure (mutation round 21: it named the frame choice only). Two EpipolarError metrics given
configs with another lens (or letterbox rule) had one key, so a MetricCollection grouped them
after a batch of equal states and one reported the other's number; merge_state / checkpoints
accepted each other's states. Default and frame-choice keys are those of earlier releases."""
from __future__ import annotations

import warnings

import torch
import torch.nn.functional as F
from torchmetrics import MetricCollection

from geocon_torch.config import GeoConConfig
from geocon_torch.metrics import EpipolarError
from geocon_torch.metrics.epipolar import _frame_choice

LENS = {"k1": -0.4, "k2": 0.1, "fx": 120.0, "fy": 120.0, "width": 160, "height": 120}


def _pan() -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    tex = F.avg_pool2d(torch.rand(1, 3, 140, 200, generator=g), 3, stride=1, padding=1)[0]
    tex = ((tex - tex.min()) / (tex.max() - tex.min()) * 255).to(torch.uint8)
    return torch.stack([tex[:, 6 + t:126 + t, 3 * t:3 * t + 160] for t in range(6)])[None]


def test_a_lens_gets_its_own_key_and_collection_group():
    plain, lens = GeoConConfig(), GeoConConfig().replace(io={"lens": LENS})
    a = EpipolarError(plain, implementation="opencv")
    b = EpipolarError(lens, implementation="opencv")
    assert not torch.equal(a.protocol_key, b.protocol_key)
    pan = _pan()
    a.update(pan)
    b.update(pan)
    alone = {"plain": float(a.compute()), "lens": float(b.compute())}
    assert abs(alone["lens"] - alone["plain"]) > 0.01
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the not_applicable batch's no-data warnings
        coll = MetricCollection({"plain": EpipolarError(plain, implementation="opencv"),
                                 "lens": EpipolarError(lens, implementation="opencv")})
        coll.update(torch.full_like(pan, 128))  # all not_applicable: equal states
        coll.update(pan)
        got = {k: float(v) for k, v in coll.compute().items()}
    assert got == alone


def test_keys_of_the_defaults_and_of_a_frame_choice_are_unchanged():
    assert _frame_choice(None) == [] and _frame_choice(GeoConConfig()) == []
    assert _frame_choice(GeoConConfig().replace(io={"lens": {"fx": 200.0}})) == []  # no distortion
    assert _frame_choice(GeoConConfig().replace(io={"stride": 2})) == [
        {"io.stride": 2, "io.max_frames": None}]
    bars = _frame_choice(GeoConConfig().replace(io={"letterbox_threshold": 0.1}))
    assert bars == [{"io.letterbox_threshold": 0.1}]
    (lens,) = _frame_choice(GeoConConfig().replace(io={"lens": LENS, "max_frames": 5}))
    assert lens["io.max_frames"] == 5 and lens["io.lens"]["k1"] == -0.4
