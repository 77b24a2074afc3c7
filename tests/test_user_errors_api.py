"""User mistakes in the Python API are refused once, with the message the CLI or the clip path
gives (errors audit s19: E1, E3, E5, E11, E12).

* E1: a missing or malformed masks source is the clip's error whatever its texture (it was a
  ``not_applicable`` reason of the lk-tracks fallback on a low-texture clip).
* E3: gray frames given to ``extract`` / ``lk_tracks`` as 0..255 floats are refused with the
  clip path's hint; the package's own calls (frames in [0, 1] by construction) skip that host
  read.
* E5: a bad ``device`` is one InputError of the call (score_clip, score_clips, get_extractor,
  BackgroundConsistency), never N error rows.
* E11 / E12: a batch given to score_clip, a list given to geometric_reward, a channels-last
  batch, a bad ``batch_bytes`` and a str / bool ``neutral``.
"""
from __future__ import annotations

from typing import Any, Dict, List

import pytest
import torch
import torch.nn.functional as F

from geocon_torch import geometric_reward, score_clip, score_clips
from geocon_torch._checks import check_device
from geocon_torch.commands._common import check_device as cli_check_device
from geocon_torch.errors import ArgumentTypeError, ClipTensorError, InputError, ShapeError
from geocon_torch.features import base as features_base
from geocon_torch.features import get_extractor, lk_tracks
from geocon_torch.io.reader import check_clip_tensor
from geocon_torch.metrics import BackgroundConsistency
from geocon_torch.rewards import check_neutral
from geocon_torch.synth import grounded_clip

CPU = {"device": "cpu", "progress": False}
NATIVE = {"io": {"long_side": None}}


def low_texture_clip(t: int = 4, h: int = 96, w: int = 128) -> torch.Tensor:
    """(t, 3, h, w) uint8: a smooth bicubic blob field panning 1 px per frame (SIFT finds a
    handful of matches: too little texture for the scoring backend)."""
    g = torch.Generator().manual_seed(0)
    base = F.interpolate(torch.rand(1, 1, 6, 8, generator=g), size=(h + t, w + t),
                         mode="bicubic", align_corners=False)[0, 0].clamp(0, 1)
    frames = torch.stack([base[k:k + h, k:k + w] for k in range(t)])
    return (frames * 255).round().to(torch.uint8)[:, None].expand(t, 3, h, w).contiguous()


def textured_gray(t: int = 2, size: int = 64) -> torch.Tensor:
    """(t, 1, size, size) float32 in [0, 1]: smoothed noise, each frame shifted by 1 px."""
    g = torch.Generator().manual_seed(1)
    img = F.avg_pool2d(torch.rand(1, 1, size + t, size + t, generator=g), 3, 1, 1)[0, 0]
    return torch.stack([img[k:k + size, k:k + size] for k in range(t)])[:, None].contiguous()


def numbers(res: Any) -> Dict[str, Any]:
    return {k: res.background.get(k) for k in ("ir", "ge_px", "ir_h", "ir_f", "pairs")}


# --- E1: masks / poses sources are read before the texture check ---------------------------

def test_low_texture_clip_without_masks_is_scored_by_the_fallback():
    res = score_clip(low_texture_clip(), preset="background", **CPU)
    assert res.status == "ok" and res.background["pairs"] == 3
    assert res.background["fallback"]["from_reason"].startswith("too little texture")
    assert res.background["fallback"]["backend"] == "lk-tracks"


@pytest.mark.parametrize("masks", ["/nope_masks.npz",
                                   torch.ones(4, 36, 128, dtype=torch.bool)],  # wrong aspect
                         ids=["missing", "wrong-aspect"])
def test_bad_masks_on_a_low_texture_clip_raise(masks):
    """Was: not_applicable, "too little texture ...; lk-tracks fallback: InputError: ..."."""
    with pytest.raises(InputError, match="mask source not found|aspect"):
        score_clip(low_texture_clip(), masks=masks, preset="background", **CPU)


def test_missing_masks_on_frames_too_small_for_features_raise():
    """A clip stopped before any match ("frames too small for any feature scale") reads its
    masks first too."""
    tiny = low_texture_clip(h=12, w=12)
    assert score_clip(tiny, preset="background", **CPU).reason == \
        "frames too small for any feature scale"
    with pytest.raises(InputError, match="mask source not found"):
        score_clip(tiny, masks="/nope_masks.npz", preset="background", **CPU)


def test_missing_poses_on_a_low_texture_clip_raise():
    with pytest.raises(InputError, match="pose log not found"):
        score_clip(low_texture_clip(), poses="/nope_poses.json", preset="background", **CPU)


def test_score_clips_bad_masks_is_that_clips_error_row_only():
    good = grounded_clip("C2", num_frames=6, size=(96, 128), seed=0).frames
    alone = score_clip(good, config=NATIVE, preset="background", **CPU)
    rows = score_clips([low_texture_clip(), good], masks=["/nope_masks.npz", None],
                       config=NATIVE, preset="background", device="cpu")
    assert rows[0].status == "error" and rows[0].reason.startswith(
        "InputError: mask source not found")
    assert rows[1].status == "ok" and numbers(rows[1]) == numbers(alone)


def test_valid_masks_on_a_low_texture_clip_score_as_before():
    """Masks read up front give the same block as masks read by the segmentation stage
    (regions that remove nothing: the result equals the one without masks)."""
    clip = low_texture_clip()
    none = torch.zeros(4, 96, 128, dtype=torch.bool)
    res = score_clip(clip, masks=none, preset="background", **CPU)
    ref = score_clip(clip, preset="background", **CPU)
    assert res.status == "ok" and res.backends["masks"] == "files"
    assert numbers(res) == numbers(ref)


# --- E3: 0..255 gray frames refused on the public calls only --------------------------------

@pytest.mark.parametrize("backend", ["opencv-sift", "torch-sift"])
def test_extract_refuses_0_255_floats(backend):
    gray = textured_gray()
    ex = get_extractor(backend, device="cpu", max_keypoints=300)
    counts = ex.extract(gray).mask.sum(1).tolist()
    assert min(counts) >= 20  # [0, 1] frames: the same call finds keypoints
    with pytest.raises(ShapeError, match=r"looks like 0\.\.255: pass x / 255 or uint8"):
        ex.extract(gray * 255)
    with pytest.raises(ShapeError, match=r"gray frames must lie in \[0, 1\]"):
        ex.extract(gray[:, :, :8, :8] * 255)  # below MIN_SIDE: refused before "no keypoints"


@pytest.mark.parametrize("lo, hi, hint", [
    (0.0, 1.002, r"just outside: .*pass x\.clamp\(0, 1\)"),  # not "x / 255": half contrast
    (-0.002, 1.0, r"just outside: .*pass x\.clamp\(0, 1\)"),  # not "(x + 1) / 2"
    (0.0, 255.0, r"looks like 0\.\.255: pass x / 255 or uint8"),
    (-1.0, 1.0, r"looks like \[-1, 1\]: pass \(x \+ 1\) / 2"),
])
def test_clip_range_hint_follows_the_size_of_the_excess(lo, hi, hint):
    clip = torch.full((2, 3, 8, 8), 0.5)
    clip[0, 0, 0, 0], clip[1, 0, 0, 0] = lo, hi
    with pytest.raises(ClipTensorError, match=rf"in \[0, 1\]; got values in \[.*\] \({hint}"):
        check_clip_tensor(clip)
    if hi <= 1.05 and lo >= -0.05:
        check_clip_tensor(clip.clamp(0, 1))  # the advice given is enough


def test_a_range_that_fits_no_usual_mistake_gets_no_hint():
    clip = torch.full((2, 3, 8, 8), 0.5)
    clip[0, 0, 0, 0], clip[1, 0, 0, 0] = -0.5, 3.0
    with pytest.raises(ClipTensorError, match=r"got values in \[-0\.5, 3\]$"):
        check_clip_tensor(clip)


def test_lk_tracks_refuses_0_255_floats():
    gray = textured_gray()
    pairs = torch.tensor([[0, 1]])
    assert int(lk_tracks(gray, pairs, max_corners=100).mask.sum()) >= 50
    with pytest.raises(ShapeError, match=r"values in \[42\.68, 216\.2\] \(looks like 0\.\.255"):
        lk_tracks(gray * 255, pairs, max_corners=100)
    with pytest.raises(ShapeError, match="looks like \\[-1, 1\\]"):
        lk_tracks(gray * 2 - 1, pairs, max_corners=100)
    # a resampling overshoot (a cubic warp of a photo reaches ~1.07) is no mistake
    assert int(lk_tracks(gray * 1.2 - 0.1, pairs, max_corners=100).mask.sum()) >= 50


def test_the_package_own_calls_skip_the_range_read(monkeypatch):
    """score_clip (every section: SIFT, LK tracks, the epipolar engines) never calls the range
    test: no host sync added on the scoring path; a direct call pays exactly one."""
    calls: List[str] = []
    real = features_base.check_unit_range

    def counting(x: torch.Tensor, *args: Any) -> None:
        calls.append(str(tuple(x.shape)))
        real(x, *args)

    monkeypatch.setattr(features_base, "check_unit_range", counting)
    frames = grounded_clip("C2", num_frames=17, size=(64, 96), seed=0).frames
    for preset, impl in (("all", "opencv"), ("worldatlas", "torch"), ("epipolar-dpo", "auto")):
        cfg = {"io": {"long_side": None}, "epipolar": {"implementation": impl}}
        res = score_clip(frames, config=cfg, preset=preset, **CPU)
        assert res.status == "ok" and calls == [], (preset, res.reason)
    rewards, _ = geometric_reward(frames[None], kind="epipolar")
    assert float(rewards[0]) > 0.5 and calls == []
    get_extractor("torch-sift", device="cpu").extract(textured_gray())
    assert calls == ["(2, 1, 64, 64)"]
    lk_tracks(textured_gray(), torch.tensor([[0, 1]]), max_corners=50)
    assert len(calls) == 2


# --- E5: device checked once per call -------------------------------------------------------

def test_device_that_is_no_torch_device_raises_once():
    frames = grounded_clip("C1", num_frames=4, size=(64, 64)).frames
    msg = r"device 'gpu' is not a torch device \(use cpu, cuda, cuda:N or mps\)"
    with pytest.raises(InputError, match=msg):
        score_clip(frames, preset="background", device="gpu")
    with pytest.raises(InputError, match=msg):  # raised, not two error rows; nothing read
        score_clips(["/nope/a.mp4", "/nope/b.mp4"], preset="background", device="gpu")
    with pytest.raises(InputError, match=msg):
        get_extractor("opencv-sift", device="gpu")
    with pytest.raises(InputError, match="scoring_device 'gpu' is not a torch device"):
        BackgroundConsistency(scoring_device="gpu")
    with pytest.raises(InputError, match="--device 'gpu' is not a torch device"):
        cli_check_device("gpu")  # the CLI's wording is the same check's


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_cuda_without_a_gpu_raises_once():
    frames = grounded_clip("C1", num_frames=4, size=(64, 64)).frames
    msg = r"device cuda: no CUDA GPU is available on this machine .*; use device='cpu'"
    with pytest.raises(InputError, match=msg):
        score_clip(frames, preset="background", device="cuda")
    with pytest.raises(InputError, match=msg):
        score_clips([frames, frames], preset="background", device="cuda")
    metric = BackgroundConsistency(scoring_device="cuda")  # may be named (its protocol key)
    with pytest.raises(InputError, match=msg):  # not two error rows
        metric.update(torch.stack([frames, frames]))
    assert int(metric.num_clips) == 0
    with pytest.raises(InputError, match="use --device cpu"):
        cli_check_device("cuda")


def test_check_device_accepts_what_exists():
    assert check_device(None) is None and check_device("AUTO") is None
    assert check_device("cpu") == "cpu"
    assert check_device(torch.device("cpu")) == torch.device("cpu")
    with pytest.raises(InputError, match="is not a torch device"):
        check_device(1.5)
    frames = grounded_clip("C1", num_frames=4, size=(64, 64)).frames
    res = score_clip(frames, config=NATIVE, preset="background", device="auto", progress=False)
    ref = score_clip(frames, config=NATIVE, preset="background", device=None, progress=False)
    assert res.status == "ok" and numbers(res) == numbers(ref)


# --- E11: batches and lists given to the wrong call -----------------------------------------

def test_score_clip_on_a_batch_points_to_score_clips():
    batch = grounded_clip("C1", num_frames=4, size=(64, 64)).frames[None]
    with pytest.raises(ClipTensorError, match=r"got a batch \(1, 4, 3, 64, 64\): use "
                                              r"score_clips for a batch \(or video\[0\]\)"):
        score_clip(batch, preset="background", **CPU)


def test_geometric_reward_on_a_list_says_stack():
    v = grounded_clip("C1", num_frames=4, size=(64, 64)).frames
    with pytest.raises(ClipTensorError, match=r"must be a \(B, T, C, H, W\) tensor, got a list "
                                              r"of 2: stack the clips"):
        geometric_reward([v, v], kind="background")


def test_channels_last_batch_hint_names_the_batch_permute():
    """One rule, one message for a clip and a batch (tests/metrics/test_metrics_api.py): the
    channels-last hint names the batch's permute and the clip's, as the channels-first one."""
    v = grounded_clip("C1", num_frames=4, size=(64, 64)).frames
    bthwc = torch.stack([v, v]).permute(0, 1, 3, 4, 2)  # (2, 4, 64, 64, 3)
    msg = ("a clip tensor must be (T, C, H, W) with C in {1, 3}, got (4, 64, 64, 3) (looks "
           "channels-last: a (B, T, H, W, C) batch needs .permute(0, 1, 4, 2, 3), a "
           "(T, H, W, C) clip .permute(0, 3, 1, 2))")
    for call in (lambda: BackgroundConsistency().update(bthwc),
                 lambda: geometric_reward(bthwc, kind="background"),
                 lambda: score_clip(bthwc[0], preset="background", **CPU)):
        with pytest.raises(ClipTensorError) as info:
            call()
        assert str(info.value) == msg
    rows = score_clips(bthwc, preset="background", device="cpu")  # each clip's error row
    assert [(r.status, r.reason) for r in rows] == [("error", f"ClipTensorError: {msg}")] * 2
    fixed = score_clips(bthwc.permute(0, 1, 4, 2, 3), config=NATIVE, preset="background",
                        device="cpu")  # the hint's permute is the fix
    assert [r.status for r in fixed] == ["ok", "ok"]


# --- E12: batch_bytes and neutral -----------------------------------------------------------

@pytest.mark.parametrize("value,error", [(0, InputError), (-1, InputError),
                                         ("1", ArgumentTypeError), (1.5, ArgumentTypeError)])
def test_score_clips_refuses_a_bad_batch_bytes(value, error):
    v = grounded_clip("C1", num_frames=4, size=(64, 64)).frames
    with pytest.raises(error, match="batch_bytes must be an integer >= 1"):
        score_clips([v], preset="background", device="cpu", batch_bytes=value)


def test_score_clips_batch_bytes_one_scores_each_clip_alone():
    vs = [grounded_clip(c, num_frames=4, size=(64, 64), seed=0).frames for c in ("C1", "C2")]
    one = score_clips(vs, config=NATIVE, preset="background", device="cpu", batch_bytes=1)
    ref = score_clips(vs, config=NATIVE, preset="background", device="cpu", batch_bytes=None)
    assert [numbers(r) for r in one] == [numbers(r) for r in ref]
    assert [r.status for r in one] == ["ok", "ok"]


@pytest.mark.parametrize("neutral", ["0", "0.5", True, False, b"0"])
def test_neutral_refuses_str_and_bool(neutral):
    with pytest.raises(ArgumentTypeError, match="neutral must be a finite number, got"):
        check_neutral(neutral)
    assert check_neutral(0) == 0.0 and check_neutral(-1) == -1.0


def test_geometric_reward_refuses_a_str_neutral():
    v = grounded_clip("C1", num_frames=4, size=(64, 64)).frames
    with pytest.raises(ArgumentTypeError, match="neutral must be a finite number, got str '0'"):
        geometric_reward(v[None], kind="background", neutral="0")
