"""What a clip's result records when a number or a step is bad: NaN / inf become None (the JSON
has no NaN and ``to_json`` never raises), a failed optional section that decides the status says
which section failed, and a configuration error raised while a failed batch is retried clip by
clip is raised, never filed as one clip's error."""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from geocon_torch import score_clip
from geocon_torch.errors import ConfigError
from geocon_torch.result import ClipResult, jsonable
from geocon_torch.sections.isolation import batch_or_each


def test_nan_and_inf_become_none():
    res = ClipResult(clip="x", background={"ge_px": float("nan"), "ir": 0.5,
                                           "per_pair": [{"ge_px": float("inf")}]},
                     epipolar={"status": "ok", "epipolar_error": np.float32("nan")})
    d = res.to_dict()
    assert d["background"]["ge_px"] is None and d["background"]["ir"] == 0.5
    assert d["background"]["per_pair"] == [{"ge_px": None}]
    assert d["epipolar"]["epipolar_error"] is None
    assert json.loads(res.to_json())["background"]["ge_px"] is None
    assert jsonable(torch.tensor(float("inf"))) is None
    assert jsonable(torch.tensor([1.0, float("-inf"), float("nan")])) == [1.0, None, None]
    assert jsonable((math.nan, 2.5, {"a": np.float64("inf")})) == [None, 2.5, {"a": None}]


def test_failed_status_section_names_itself(monkeypatch):
    """Preset "worldatlas" takes its status from the epipolar block: when that section raises,
    the clip is an error whose reason starts with "epipolar section failed: "."""
    import geocon_torch.pipeline as pipeline

    def boom(*args, **kwargs):
        raise RuntimeError("matcher exploded")

    monkeypatch.setattr(pipeline, "epipolar_blocks", boom)
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 256, (4, 3, 48, 64), generator=g, dtype=torch.uint8)
    res = score_clip(frames, preset="worldatlas", device="cpu")
    assert res.status == "error" and res.epipolar["status"] == "error"
    assert res.reason == "epipolar section failed: RuntimeError: matcher exploded"


def test_config_error_on_the_per_item_retry_is_raised():
    """The batch fails with an item's error, the retry of item 2 alone raises a ConfigError
    (the call's fault): it propagates; an ordinary error of item 2 stays that item's."""
    def fn(items):
        if len(items) > 1:
            raise ValueError("batch failed")
        if items[0] == 2:
            raise ConfigError("io.long_side must be an int >= 2")
        return [items[0] * 10]

    with pytest.raises(ConfigError, match="io.long_side"):
        batch_or_each(fn, [1, 2], reraise=(ConfigError,))
    out = batch_or_each(fn, [1, 2])  # not a reraise type: item 2's own error
    assert out[0] == 10 and isinstance(out[1], ConfigError)
