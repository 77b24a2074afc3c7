"""Mutation round 15 of the code added for held frames, the content's long side, the content
margin per feature level and the numeric environment (version 0.2.4): closed-form checks of the
surviving mutants (held_of / drop_held_pairs edge cases, the per-pair still flags at an HDR
threshold, chunked consecutive pair sums, the readers' content box, the background stack's
content long side, the headline's rigidity side, level_margin, the merge's hint)."""
from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from helpers import _clip, fake_result

from geocon_torch import __version__, score_clip
from geocon_torch.bench import ResultStore, merge_stores
from geocon_torch.bench.merge import numeric_envs
from geocon_torch.config import FeatureConfig
from geocon_torch.errors import ShapeError
from geocon_torch.features import extract_correspondences
from geocon_torch.features.multiscale import level_margin
from geocon_torch.io import clips_from_tensor, read_clip
from geocon_torch.io.reader import clip_from_tensor
from geocon_torch.io.pairs import background_pairs, drop_held_pairs, foreground_pairs, held_of
from geocon_torch.io.sampling import FrameMotion, consecutive_pair_sums, pair_abs_diff_sums
from geocon_torch.measures.calibration import ge_bound_px
from geocon_torch.measures.headline import headline_terms
from geocon_torch.pipeline import held_warning, result_motion
from geocon_torch.sections.background import _content_size, _Stack
from geocon_torch.synth import render_scene


def _texture(t: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    """(t, 3, h, w) uint8 frames of independent bright noise (every pair moving)."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(60, 250, (t, 3, h, w), generator=g, dtype=torch.uint8)


# --- io.pairs -----------------------------------------------------------------------------------

def test_held_of_reads_a_meta_dict_as_a_clip():
    meta = {"motion": {"max_mad": 3.0, "pairs": 5, "frozen": False, "held": [3, 5]}}
    assert held_of(meta) == [3, 5]
    assert held_of(SimpleNamespace(meta=meta)) == [3, 5]
    assert held_of({"motion": {"held": None}}) == [] and held_of({}) == []


def test_drop_held_pairs_keeps_a_pair_of_one_frame():
    # (2, 2) shows one frame twice but is the caller's own pair: kept; (1, 2) spans held 2 only
    pairs = np.array([[2, 2], [1, 2], [3, 4]])
    assert drop_held_pairs(pairs, [2], 5).tolist() == [[2, 2], [3, 4]]


def test_held_last_position_drops_the_last_pair():
    # background pairs: the held position T - 1 drops (T - 2, T - 1)
    assert background_pairs(6, 1, [5]).tolist() == [[i, i + 1] for i in range(4)]
    # foreground pairs: present rows are pairs (t, t + 1) of T = 5 frames; held 4 drops t = 3
    present = torch.ones(4, 1, dtype=torch.bool)
    assert foreground_pairs(present, None, [4]).tolist() == [0, 1, 2]
    assert foreground_pairs(present, None, [2]).tolist() == [0, 2, 3]


# --- io.sampling --------------------------------------------------------------------------------

def test_consecutive_pair_sums_over_several_chunks():
    frames = _texture(6, 4, 5)[None]  # (1, 6, 3, 4, 5): 60 elements a frame
    want = pair_abs_diff_sums(frames[:, 1:], frames[:, :-1])
    for chunk in (60, 130, 10 ** 6):  # one pair a chunk, two pairs a chunk, one chunk
        got = consecutive_pair_sums(frames, chunk=chunk)
        assert got.shape == (1, 5) and got.dtype == torch.float64
        assert torch.equal(got, want), chunk
    ref = (frames[:, 1:].double() - frames[:, :-1].double()).abs().sum((2, 3, 4))
    assert torch.equal(want, ref)
    with pytest.raises(ShapeError):
        consecutive_pair_sums(frames[:, :1])


def test_tensor_held_threshold_is_half_a_grey_level():
    """Pairs of mean absolute difference 0.75, 0.5 and ~100: only the 0.5 one is still."""
    f0 = _texture(1, 8, 8, seed=5)[0]
    step = (torch.arange(3 * 64).reshape(3, 8, 8) % 4).to(torch.uint8)
    f1 = f0 + (step != 0).to(torch.uint8)  # 3 of 4 values + 1: 0.75
    f2 = f1 + (step % 2 == 0).to(torch.uint8)  # half of them + 1: 0.5
    frames = torch.stack([f0, f1, f2, _texture(1, 8, 8, seed=6)[0]])
    motion = clips_from_tensor(frames[None], long_side=None)[0].meta["motion"]
    assert motion["held"] == [2] and motion["frozen"] is False


def test_frame_motion_held_flags_follow_the_hdr_threshold():
    """Frames of mean absolute differences 4, 2, 24: at an HDR threshold of 3 grey levels the
    second pair is still (held position 2); at the SDR 0.5 none is (2 is no dip: above 0.35 of
    its smaller side, 4: ``io.sampling.held_flags``)."""
    motion = FrameMotion()
    for i, v in enumerate((0, 4, 6, 30)):
        motion.add(i, np.full((4, 5, 3), v, np.uint8), True)
    hdr = motion.record(3.0, held=True)
    assert hdr == {"max_mad": 24.0, "pairs": 3, "frozen": False, "held": [2]}
    assert motion.record(held=True) == {"max_mad": 24.0, "pairs": 3, "frozen": False}
    # explicit clip order 6, 4, 0 (source frames 2, 1, 0): frame 1 against 2 is still
    assert motion.record(3.0, order=[2, 1, 0], held=True)["held"] == [1]


# --- io.reader: content box and the one host copy -----------------------------------------------

def _pillarboxed(t: int = 4, h: int = 40, w: int = 64, left: int = 8, right: int = 56):
    frames = torch.zeros(t, 3, h, w, dtype=torch.uint8)
    frames[..., left:right] = _texture(t, h, right - left)
    return frames


def test_tensor_content_box_of_pillarbox_and_letterbox():
    side = _pillarboxed()
    top = torch.zeros(4, 3, 48, 64, dtype=torch.uint8)
    top[:, :, 6:40] = _texture(4, 34, 64, seed=1)
    got = clips_from_tensor(torch.stack([side, side]), long_side=None)
    assert [c.meta["content_box"] for c in got] == [[8, 0, 56, 40]] * 2
    assert clips_from_tensor(top[None], long_side=None)[0].meta["content_box"] == [0, 6, 64, 40]
    plain = clips_from_tensor(_texture(3, 40, 64)[None], long_side=None)[0]
    assert plain.meta["content_box"] == [0, 0, 64, 40]


def test_folder_content_box_and_motion_max(tmp_path):
    from PIL import Image
    frames = _pillarboxed(left=10, right=50)
    frames[3] = frames[2]  # the last pair still: held 3, the largest pair sum comes first
    for t, f in enumerate(frames.permute(0, 2, 3, 1).numpy()):
        Image.fromarray(f).save(tmp_path / f"{t:03d}.png")
    clip = read_clip(tmp_path, long_side=None)
    assert clip.meta["content_box"] == [10, 0, 50, 40]
    tensor = clips_from_tensor(frames[None], long_side=None)[0]
    assert tensor.meta["content_box"] == [10, 0, 50, 40]
    sums = consecutive_pair_sums(frames[None])[0]
    for c in (clip, tensor):
        assert c.meta["motion"]["held"] == [3]
        assert c.meta["motion"]["max_mad"] == pytest.approx(float(sums.max()) / frames[0].numel())


def test_motion_indices_record_the_frames_read():
    frames = _texture(5, 32, 48)
    frames[1] = frames[0]  # source frame 1 repeats 0: held position 1 of the motion order
    clip = clips_from_tensor(frames[None], indices=[0, 4], motion_indices=[0, 1, 2, 3, 4],
                             long_side=None)[0]
    assert clip.num_frames == 2
    assert clip.meta["motion"]["pairs"] == 4 and clip.meta["motion"]["held"] == [1]


# --- sections.background / measures.headline: the content's long side ----------------------------

def test_content_size_of_the_recorded_box():
    def clip(box):
        return SimpleNamespace(size=(40, 64), meta={"content_box": box})
    assert _content_size(clip([8, 0, 56, 40])) == (48, 40)  # pillarbox: from the top row
    assert _content_size(clip([0, 6, 64, 34])) == (64, 28)  # letterbox: from the first column
    assert _content_size(clip([0, 0, 64, 40])) is None  # the whole frame
    assert _content_size(clip([0, 0, 40, 64])) is None  # not inside a 64 x 40 frame
    assert _content_size(SimpleNamespace(size=(40, 64), meta={})) is None


def _stack(scale_xy, content):
    """A background stack of one scale, one evaluated and one gate pair (no points), a working
    long side of 320 px and a gate view of long side 160 px (scale ``scale_xy``)."""
    z = torch.zeros(4, 1, 2)
    return _Stack([1.0], torch.tensor([[0, 1], [0, 2]]), 1, z, z,
                  torch.zeros(2, 1, dtype=torch.bool), torch.zeros(2, 1), 320,
                  {"long_side": 160, "scale_xy": list(scale_xy)}, content=content)


def test_stack_long_sides_with_content_and_a_gate_view():
    stack = _stack((0.5, 0.25), (200, 160))
    assert stack.content_long_side == 200
    # evaluated row: the content's 200 working px; gate row: max(200 * 0.5, 160 * 0.25) view px
    assert stack.long_side_list() == [200.0, 100.0]
    tall = _stack((0.25, 0.5), (120, 200))
    assert tall.content_long_side == 200 and tall.long_side_list() == [200.0, 100.0]
    plain = _stack((0.5, 0.5), None)  # no bars: the working side and the view's own side
    assert plain.content_long_side == 320 and plain.long_side_list() == [320.0, 160.0]


def test_headline_rigidity_reads_the_content_long_side():
    fg = {"status": "ok", "objects": [{"adadfrc_mean": 4.0}]}
    row = {"working_size": [240, 320], "foreground": fg,
           "background": {"status": "ok", "ge_px": 0.5, "content_long_side": 256}}
    terms = headline_terms(row)
    assert terms["rigidity"] == pytest.approx(math.exp(-(2.0 * 1024 / 256 - 1.5) / 3.5),
                                              rel=1e-12)
    assert terms["ge"] == pytest.approx(math.exp(-0.5 * 1024 / 256 / 3.5), rel=1e-12)
    old = headline_terms(dict(row, background={"status": "ok", "ge_px": 0.5}))
    assert old["rigidity"] == pytest.approx(math.exp(-(2.0 * 1024 / 320 - 1.5) / 3.5),
                                            rel=1e-12)
    zero = headline_terms(dict(row, background={"status": "ok", "ge_px": 0.5,
                                                "content_long_side": 0}))
    assert zero == old  # no content side recorded: the working long side


def test_calibration_bounds_at_the_content_long_side():
    g = torch.Generator().manual_seed(3)
    tex = F.avg_pool2d(torch.rand(1, 3, 140, 160, generator=g), 5, stride=1, padding=2)
    tex = ((tex - tex.amin()) / (tex.amax() - tex.amin()) * 255).to(torch.uint8)[0]
    frames = torch.zeros(4, 3, 96, 192, dtype=torch.uint8)
    for t in range(4):  # a translating texture between 48-px side bars
        frames[t, :, :, 48:144] = tex[:, 8:104, 4 + 3 * t:100 + 3 * t]
    # scored, and not_applicable (fewer valid pairs than a minimum of 100)
    for config in (None, {"background": {"min_valid_pairs": 100}}):
        res = score_clip(frames, preset="background", config=config, progress=False)
        bg = res.to_dict()["background"]
        assert bg["content_long_side"] == 96
        assert bg["status"] == ("ok" if config is None else "not_applicable")
        th = (bg.get("calibration") or {}).get("thresholds")
        if th is None:
            pytest.skip("no calibrated bounds for this clip's features backend")
        # the bound is the regime's normalised GE at the content's long side, not the 192
        want = ge_bound_px(th["ge_norm_max"], 96, bg["calibration"]["ref_long_side"])
        assert th["ge_px"] == pytest.approx(want, rel=1e-9)


def test_score_clip_leaves_out_the_held_pair():
    frames = _texture(5, 48, 64, seed=4)
    frames = torch.cat([frames[:3], frames[2:3], frames[3:]])  # frame 2 twice: held 3
    res = score_clip(frames, preset="background", progress=False).to_dict()
    assert res["motion"]["held_frames"] == 1
    assert held_warning(1, 6) in res["warnings"]
    assert res["background"]["pairs"] == 4  # 5 adjacent pairs less (2, 3) of one frame


# --- features.multiscale ------------------------------------------------------------------------

def test_level_margin_closed_form():
    assert [level_margin(4, s) for s in (1.0, 0.5, 0.25)] == [4, 8, 16]
    assert level_margin(3, 1 / 3) == 9 and level_margin(5, 0.7) == 8 and level_margin(0, 0.25) == 0


# --- pipeline -----------------------------------------------------------------------------------

def test_result_motion_counts_the_held_frames():
    meta = {"motion": {"max_mad": 9.0, "pairs": 7, "frozen": False, "held": [2, 5, 6]}}
    assert result_motion(meta, None) == {"max_mad": 9.0, "pairs": 7, "frozen": False,
                                         "held_frames": 3}
    assert "held_frames" not in result_motion({"motion": dict(meta["motion"], held=[])}, None)
    assert held_warning(3, 8) == ("3 of 8 frames repeat the previous frame (held frames): pairs "
                                  "of two identical frames are not scored")


# --- bench.merge: the version hint comes first ---------------------------------------------------

def test_numeric_envs_only_of_two_recorded_environments():
    a = json.dumps({"numeric_env": {"machine": "x86_64", "torch_cpu": "AVX2"}})
    b = json.dumps({"numeric_env": {"machine": "x86_64", "torch_cpu": "DEFAULT"}})
    assert numeric_envs(a, b) == [json.loads(a)["numeric_env"], json.loads(b)["numeric_env"]]
    assert numeric_envs(a, a) is None
    assert numeric_envs(a, "{}") is None and numeric_envs("{}", b) is None


def _shard(path, env: dict, ge: float, version: str):
    result = dict(fake_result("x", ge=ge), numeric_env=env, version=version)
    with ResultStore(path) as s:
        s.put(_clip("x"), "h", "cfg", result)
    return str(path)


def test_merge_conflict_of_two_versions_and_environments_names_the_versions(tmp_path):
    avx2 = {"machine": "x86_64", "torch": "2", "torch_cpu": "AVX2"}
    sse4 = dict(avx2, torch_cpu="DEFAULT")
    out = str(tmp_path / "out.sqlite")
    merge_stores(out, [_shard(tmp_path / "a.sqlite", avx2, 1.0, __version__)])
    got = merge_stores(out, [_shard(tmp_path / "b.sqlite", sse4, 1.5, "0.0.1")])
    (conflict,) = got.conflicts
    assert conflict["numeric_env"] == [avx2, sse4]
    assert conflict["hint"].startswith("rows of different geocon_torch versions")
    assert "--rescore-versions" in conflict["hint"]


def test_opencv_pyramid_levels_keep_their_own_margin():
    """opencv-sift pyramid on a pillarboxed pan (content columns 32..191): each level keeps
    the points ``level_margin`` of its own scale inside the bars, so the finer levels keep
    points closer to a bar than the coarsest level's 16 px (its margin of 4 level px)."""
    x = render_scene("C2", motion="pan", num_frames=3, size=(120, 160), seed=0).frames
    y = torch.zeros(3, 3, 120, 224, dtype=torch.uint8)
    y[..., 32:192] = x
    clip = clip_from_tensor(y)
    cfg = FeatureConfig(backend="opencv-sift", scale_mode="pyramid", max_keypoints=500)
    m = cfg.content_margin_px
    res = extract_correspondences(clip, torch.tensor([[0, 1], [1, 2]]), cfg, device="cpu")
    assert sorted(res) == [0.25, 0.5, 1.0]
    coarse = level_margin(m, 0.25)
    for s, c in res.items():
        xs = torch.cat([c.x1[c.mask], c.x2[c.mask]])[:, 0]
        lo, hi = 32 - 0.5 + level_margin(m, s), 192 - 0.5 - level_margin(m, s)
        assert float(xs.min()) >= lo - 1e-3 and float(xs.max()) <= hi + 1e-3, s
        near = int(((xs < 32 - 0.5 + coarse) | (xs > 192 - 0.5 - coarse)).sum())
        assert (near > 10) == (s > 0.25), (s, near)
