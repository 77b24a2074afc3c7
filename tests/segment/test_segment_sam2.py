"""SAM-2 adapter: clear errors, and plumbing with a random-init model loaded back from tmp_path."""
import json
import re

import pytest
import torch

from geocon_torch.config import SegmentConfig
from geocon_torch.errors import (CheckpointError, ConfigError, GeoConError, InputError,
                                 OptionalDependencyError)
from geocon_torch.segment.sam2 import load_prompts, load_sam2_predictor, sam2_masks

TINY = "configs/sam2.1/sam2.1_hiera_t.yaml"


def _sam2_or_skip():
    try:
        from geocon_torch.segment.sam2 import _import_sam2

        return _import_sam2()
    except OptionalDependencyError as exc:
        pytest.skip(f"sam2 not installed: {exc}")


def _tiny_sam2_clip(tmp_path, num_frames: int):
    """(a random (num_frames, 3, 64, 96) Clip, a SegmentConfig whose checkpoint is a seeded
    random-init tiny SAM-2 saved to ``tmp_path``): the real loading code, no weights."""
    build = _sam2_or_skip()
    from geocon_torch.types import Clip

    torch.manual_seed(0)
    model = build(TINY, None, device="cpu", hydra_overrides_extra=["++model.image_size=256"])
    ckpt = tmp_path / "tiny_random.pt"
    torch.save({"model": model.state_dict()}, ckpt)
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 255, (num_frames, 3, 64, 96), dtype=torch.uint8, generator=g)
    clip = Clip(frames, 24.0, torch.ones(64, 96, dtype=torch.bool), torch.arange(num_frames),
                (64, 96))
    return clip, SegmentConfig(sam2_checkpoint=str(ckpt), sam2_config=TINY, sam2_image_size=256)


def test_prompt_validation(tmp_path):
    with pytest.raises(GeoConError, match="need prompts"):
        load_prompts(None)
    with pytest.raises(GeoConError, match="'box' or 'points'"):
        load_prompts([{"id": 1}])
    f = tmp_path / "p.json"
    f.write_text(json.dumps([{"id": 3, "box": [1, 2, 30, 40]}]))
    assert load_prompts(f) == [{"id": 3, "box": [1, 2, 30, 40]}]


def test_checkpoint_errors(tmp_path):
    _sam2_or_skip()
    with pytest.raises(CheckpointError, match="local checkpoint"):
        load_sam2_predictor(None, TINY)
    with pytest.raises(CheckpointError, match="not found"):
        load_sam2_predictor(str(tmp_path / "nope.pt"), TINY)
    bad = tmp_path / "bad.pt"
    torch.save({"model": {"not_a_weight": torch.zeros(1)}}, bad)
    with pytest.raises(CheckpointError, match="does not match"):
        load_sam2_predictor(str(bad), TINY, image_size=256)


BOX = [10, 10, 50, 40]


@pytest.mark.parametrize("content, phrase", [
    ({"id": 1, "frame": 0, "box": BOX}, "must be a JSON list of prompt objects, got an object"),
    ({"box": [1, 2, 3, 4]}, "must be a JSON list of prompt objects, got an object"),
    ([], "holds no prompt"),
    ([1, 2], "prompt 0 must be a JSON object with 'box' or 'points', got 1"),
    ([{"frame": 0, "box": [1, 2, 3]}], "prompt 0: 'box' must be 4 finite numbers"),
    ([{"frame": 0, "box": "1,2,3,4"}], "prompt 0: 'box' must be 4 finite numbers"),
    ([{"frame": 0, "box": [1, 2, 3, None]}], "prompt 0: 'box' must be 4 finite numbers"),
    ([{"frame": 0, "box": [1, 2, 3, 1e999]}], "prompt 0: 'box' must be 4 finite numbers"),
    ([{"id": "car", "frame": 0, "box": BOX}], "prompt 0: 'id' must be an integer, got 'car'"),
    ([{"id": True, "frame": 0, "box": BOX}], "prompt 0: 'id' must be an integer, got True"),
    ([{"frame": 1.5, "box": BOX}], "prompt 0: 'frame' must be an integer in [0, 6)"),
    ([{"frame": -1, "box": BOX}], "prompt 0: 'frame' must be an integer in [0, 6)"),
    ([{"frame": 6, "box": BOX}], "prompt 0: 'frame' must be an integer in [0, 6)"),
    ([{"points": [[1, 2], [3, 4]], "labels": [1]}],
     "prompt 0: 'labels' must be 2 values 0 / 1 (one per point)"),
    ([{"points": [[1, 2]], "labels": [2]}], "prompt 0: 'labels' must be 1 values 0 / 1"),
    ([{"points": [1, 2]}], "prompt 0: 'points' must be a non-empty list of [x, y] pairs"),
    ([{"points": []}], "prompt 0: 'points' must be a non-empty list of [x, y] pairs"),
    ([{"points": [[1, "a"]]}], "prompt 0: 'points' must be a non-empty list of [x, y] pairs"),
    ([{"frame": 0, "box": BOX}, {"frame": 0, "box": [1, 2, 3]}], "prompt 1: 'box'"),
    ([{"frame": 0, "id": 1}], "prompt 0 needs 'box' or 'points'"),
])
def test_malformed_prompt_files_are_input_errors_naming_the_setting(tmp_path, content, phrase):
    """Every malformed prompt file is an InputError naming the setting, the file, the prompt
    and what is wrong (were AttributeError / TypeError / ValueError / IndexError / a bare
    AssertionError or torch RuntimeError from inside SAM-2; "frame": -1 was accepted)."""
    f = tmp_path / "p.json"
    f.write_text(json.dumps(content))
    with pytest.raises(InputError, match=re.escape(phrase)) as info:
        load_prompts(f, num_frames=6)
    assert f"segment.sam2_prompts {f}" in str(info.value)


def test_valid_prompts_pass_unchanged(tmp_path):
    prompts = [{"id": 2, "frame": 5, "points": [[1, 2.5], [3, 4]], "labels": [1, 0]},
               {"frame": 0, "box": [0.5, 1, 30, 40]}, {"box": (1, 2, 3, 4), "id": 7}]
    assert load_prompts(prompts, num_frames=6) == prompts
    f = tmp_path / "p.json"
    f.write_text(json.dumps(prompts[:2]))
    assert load_prompts(f, num_frames=6) == prompts[:2]
    with pytest.raises(InputError, match=re.escape("prompts: prompt 0: 'frame' must be an "
                                                   "integer >= 0, got -1")):
        load_prompts([{"frame": -1, "box": BOX}])  # no frame count: only the lower bound


def test_prompt_frames_are_checked_against_the_clip_before_sam2_runs():
    """A prompt frame outside the clip (negative was accepted silently, past the end an
    IndexError from SAM-2) is an InputError before the predictor sees any prompt."""
    from geocon_torch.types import Clip

    clip = Clip(torch.zeros(4, 3, 16, 24, dtype=torch.uint8), 24.0,
                torch.ones(16, 24, dtype=torch.bool), torch.arange(4), (16, 24))
    for frame in (-1, 4):
        pred = _ScriptedPredictor(4, 16, 24)
        with pytest.raises(InputError, match=re.escape(
                f"prompts: prompt 0: 'frame' must be an integer in [0, 4) (the clip's frames), "
                f"got {frame}")):
            sam2_masks(clip, SegmentConfig(), predictor=pred,
                       prompts=[{"id": 1, "frame": frame, "box": [1, 1, 5, 5]}])
        assert pred.objs == []


def test_bad_config_and_unreadable_checkpoints_are_geocon_errors(tmp_path):
    """A config SAM-2 cannot compose is a ConfigError naming segment.sam2_config (was hydra's
    MissingConfigException); an unreadable checkpoint a CheckpointError naming the file (was
    pickle's UnpicklingError, quoting torch's advice to load it unsafely)."""
    _sam2_or_skip()
    ckpt = tmp_path / "empty.pt"
    torch.save({"model": {}}, ckpt)
    other = tmp_path / "other.yaml"
    other.write_text("a: 1\n")
    for config in ("configs/nope.yaml", str(tmp_path / "nope" / "sam2.yaml"), str(other)):
        with pytest.raises(ConfigError, match=re.escape(f"segment.sam2_config {config!r}")):
            load_sam2_predictor(str(ckpt), config)
    garbage = tmp_path / "garbage.pt"
    garbage.write_bytes(b"x" * 16)
    with pytest.raises(CheckpointError, match="not a torch checkpoint") as info:
        load_sam2_predictor(str(garbage), TINY)
    assert str(garbage) in str(info.value) and "False" not in str(info.value)
    nomodel = tmp_path / "nomodel.pt"
    torch.save({"weights": {}}, nomodel)
    with pytest.raises(CheckpointError, match=re.escape(f"SAM-2 checkpoint {nomodel} holds no "
                                                        "'model' state dict")):
        load_sam2_predictor(str(nomodel), TINY)


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_random_init_tiny_model_plumbing(tmp_path):
    clip, cfg = _tiny_sam2_clip(tmp_path, 2)
    masks = sam2_masks(clip, cfg, prompts=[{"id": 1, "frame": 0, "box": [10, 10, 50, 40]},
                                           {"id": 2, "frame": 0, "points": [[70, 30]]}])
    assert masks.shape == (2, 2, 64, 96) and masks.dtype == torch.bool
    # a second clip with the same checkpoint reuses the loaded predictor, with the same result
    import geocon_torch.segment.sam2 as sam2_mod

    loads = []
    real = sam2_mod.load_sam2_predictor
    sam2_mod.load_sam2_predictor = lambda *a, **k: loads.append(1) or real(*a, **k)
    try:
        again = sam2_masks(clip, cfg, prompts=[{"id": 1, "frame": 0, "box": [10, 10, 50, 40]},
                                               {"id": 2, "frame": 0, "points": [[70, 30]]}])
    finally:
        sam2_mod.load_sam2_predictor = real
    assert loads == [] and torch.equal(again, masks)


class _ScriptedPredictor:
    """A stand-in for SAM-2's video predictor: every object's logits are +1 on the frames the
    propagation visits (so a frame it never visits stays empty); records the calls."""

    def __init__(self, num_frames: int, h: int, w: int) -> None:
        self.t, self.h, self.w, self.calls, self.objs = num_frames, h, w, [], []

    def init_state(self, video_path: str) -> dict:
        return {}

    def add_new_points_or_box(self, state, frame_idx, obj_id, **kw) -> None:
        self.objs.append((obj_id, frame_idx))

    device = torch.device("cpu")

    def propagate_in_video(self, state, start_frame_idx=None, reverse=False):
        self.calls.append((start_frame_idx, reverse))
        self.autocast = torch.is_autocast_enabled("cpu")
        ids = sorted({o for o, _ in self.objs})
        start = min(f for _, f in self.objs) if start_frame_idx is None else start_frame_idx
        frames = range(start, -1, -1) if reverse else range(start, self.t)
        for f in frames:
            yield f, ids, torch.ones(len(ids), 1, self.h, self.w)


def test_objects_prompted_late_are_tracked_backwards_too():
    """An object first prompted at frame 2 has masks on frames 0-1 as well (SAM-2's default
    propagation only runs forwards from the earliest prompt, leaving them empty)."""
    from geocon_torch.types import Clip

    frames = torch.zeros(4, 3, 16, 24, dtype=torch.uint8)
    clip = Clip(frames, 24.0, torch.ones(16, 24, dtype=torch.bool), torch.arange(4), (16, 24))
    pred = _ScriptedPredictor(4, 16, 24)
    masks = sam2_masks(clip, SegmentConfig(), predictor=pred,
                       prompts=[{"id": 1, "frame": 2, "box": [1, 1, 5, 5]}])
    assert masks.shape == (4, 1, 16, 24) and bool(masks.all())
    assert pred.calls == [(None, False), (2, True)]
    assert pred.autocast  # SAM-2 runs under bfloat16 autocast, as it is meant to
    pred0 = _ScriptedPredictor(4, 16, 24)
    sam2_masks(clip, SegmentConfig(), predictor=pred0,
               prompts=[{"id": 1, "frame": 0, "box": [1, 1, 5, 5]}])
    assert pred0.calls == [(None, False)]  # nothing before frame 0: one pass


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_objects_prompted_on_different_frames_run(tmp_path):
    """A random-init tiny SAM-2 through the real code: an object prompted at frame 2 beside one
    at frame 0 (without bfloat16 autocast SAM-2's bfloat16 memory bank met a float32 layer:
    "mat1 and mat2 must have the same dtype"), tracked backwards to frames 0-1."""
    clip, cfg = _tiny_sam2_clip(tmp_path, 3)
    masks = sam2_masks(clip, cfg, prompts=[{"id": 1, "frame": 0, "box": [10, 10, 50, 40]},
                                           {"id": 2, "frame": 2, "points": [[70, 30]]}])
    assert masks.shape == (3, 2, 64, 96) and masks.dtype == torch.bool


@pytest.fixture(scope="module")
def tiny_sam2(tmp_path_factory):
    """A seeded random-init tiny SAM-2 checkpoint (as :func:`_tiny_sam2_clip`), shared."""
    return _tiny_sam2_clip(tmp_path_factory.mktemp("sam2"), 2)[1]


def _grounded(num_frames: int) -> torch.Tensor:
    from geocon_torch.synth import grounded_clip

    return grounded_clip("C1", num_frames=num_frames, size=(96, 128)).frames


def _sam2_config(seg: SegmentConfig, **changes) -> dict:
    return {"segment": {"method": "sam2", "sam2_checkpoint": seg.sam2_checkpoint,
                        "sam2_config": seg.sam2_config, "sam2_image_size": 256, **changes}}


def test_unusable_sam2_raises_before_any_clip_is_read(tmp_path, tiny_sam2):
    """SAM-2 masks that cannot be set up (missing checkpoint, no prompts, no model config, a
    malformed prompt file) raise from score_clips / score_clip / geometric_reward before any
    clip is read (was: every clip an "error" row, every reward the neutral 0.0)."""
    from geocon_torch import geometric_reward, score_clip, score_clips

    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps([{"frame": 0, "box": BOX}]))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"frame": 0, "box": [1, 2, 3]}]))
    cases = [(_sam2_config(tiny_sam2, sam2_checkpoint=str(tmp_path / "none.pt"),
                           sam2_prompts=str(prompts)),
              CheckpointError, f"SAM-2 masks checkpoint not found: {tmp_path / 'none.pt'}"),
             (_sam2_config(tiny_sam2), ConfigError, "SAM-2 masks need prompts: set "
                                                    "config.segment.sam2_prompts"),
             (_sam2_config(tiny_sam2, sam2_config=None, sam2_prompts=str(prompts)), ConfigError,
              "SAM-2 needs its model config: set config.segment.sam2_config"),
             (_sam2_config(tiny_sam2, sam2_prompts=str(bad)), InputError,
              f"segment.sam2_prompts {bad}: prompt 0: 'box' must be 4 finite numbers")]
    videos = torch.stack([_grounded(2), _grounded(2)])
    for cfg, kind, phrase in cases:
        with pytest.raises(kind, match=re.escape(phrase)):  # a missing file is never read
            score_clips([str(tmp_path / "missing.mp4"), videos[0]], config=cfg)
        with pytest.raises(kind, match=re.escape(phrase)):
            score_clip(str(tmp_path / "missing.mp4"), config=cfg)
        with pytest.raises(kind, match=re.escape(phrase)):
            geometric_reward(videos, kind="background", config=cfg)
    # masks given for every clip: SAM-2 never runs, nothing to build
    cfg = _sam2_config(tiny_sam2, sam2_checkpoint=str(tmp_path / "none.pt"))
    masks = torch.zeros(2, 1, 96, 128, dtype=torch.bool)
    got = score_clips(list(videos), masks=[masks, masks], config=cfg, preset="background",
                      device="cpu")
    assert [r.backends["masks"] for r in got] == ["files", "files"]


@pytest.mark.filterwarnings("ignore::UserWarning")
def test_a_prompt_frame_outside_a_clip_is_that_clips_error(tmp_path, tiny_sam2, monkeypatch):
    """The prompt file is checked once for the run, its frames per clip: a prompt on frame 2
    fails the 2-frame clip only; the 3-frame clip gets its SAM-2 masks. The predictor is built
    once (the preflight and the masks stage share the cache)."""
    import geocon_torch.segment.sam2 as sam2_mod
    from geocon_torch import score_clips
    from geocon_torch.checkpoints import _MODEL_CACHE

    prompts = tmp_path / "p.json"
    prompts.write_text(json.dumps([{"id": 1, "frame": 2, "box": [20, 20, 60, 60]}]))
    loads = []
    real = sam2_mod.load_sam2_predictor
    monkeypatch.setattr(sam2_mod, "load_sam2_predictor",
                        lambda *a, **k: loads.append(1) or real(*a, **k))
    _MODEL_CACHE.pop("sam2", None)
    cfg = {**_sam2_config(tiny_sam2, sam2_prompts=str(prompts)), "features": {"fallback": None}}
    short, full = score_clips([_grounded(2), _grounded(3)], preset="background", device="cpu",
                              config=cfg)
    assert short.status == "error" and short.reason == (
        f"InputError: segment.sam2_prompts {prompts}: prompt 0: 'frame' must be an integer in "
        f"[0, 2) (the clip's frames), got 2")
    assert full.backends["masks"] == "sam2" and full.background["segment"]["objects"] == 1
    assert loads == [1]
