"""Cross-clip batching (issue 21): a batch of clips is one tensor program, and a clip's result
is the same whether it is scored alone or in a batch (bit for bit on the CPU), whatever the
other clips are: other lengths and sizes, a textureless clip, an undecodable one."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from geocon_torch.config import GeoConConfig
from geocon_torch.geometry import ransac_fundamental, ransac_homography
from geocon_torch.geometry import ransac
from geocon_torch.geometry._synthetic import fundamental_pairs
from geocon_torch.pipeline import score_clip, score_clips
from geocon_torch.rewards import geometric_reward
from geocon_torch.sections.fits import ClipRows, fit_both, fit_clips
from geocon_torch.synth import grounded_clip

FIELDS = ("model", "inliers", "residuals", "valid", "num_inliers", "iterations", "cost")
CFG = {"io": {"long_side": None}, "features": {"backend": "opencv-sift"}}


def _json(result) -> str:
    out = result.to_dict()
    out.pop("timing_s", None)
    out.pop("clip", None)
    return json.dumps(out, sort_keys=True, default=str)


def _rows(seed: int, p: int, n: int):
    d = fundamental_pairs(p, n, outlier_ratio=0.3, noise_px=0.5, seed=seed)
    scores = torch.rand(p, n, generator=torch.Generator().manual_seed(seed))
    mask = torch.ones(p, n, dtype=torch.bool)
    mask[0, n // 2:] = False
    return d["x1"].float(), d["x2"].float(), mask, scores


def test_one_fit_call_over_clips_equals_each_clip_alone():
    cfg = GeoConConfig()
    parts = [ClipRows(*_rows(1, 3, 90)), ClipRows(*_rows(2, 5, 140)),
             ClipRows(*_rows(3, 2, 40), rows=torch.tensor([4, 1]))]
    got = fit_clips(parts, cfg)
    for part, fits in zip(parts, got):
        ref = fit_both(part.x1, part.x2, part.mask, part.scores, cfg, rows=part.rows)
        for g, r in zip(fits, ref):
            for f in FIELDS:
                assert torch.equal(getattr(g, f), getattr(r, f)), f
    assert got[2][0].inliers.shape == (2, 40) and got[1][1].inliers.shape == (5, 140)
    assert bool(got[1][0].valid.any()) and bool(got[1][1].valid.any())


@pytest.fixture(scope="module")
def batch():
    clips = [grounded_clip("C1", num_frames=6, size=(120, 160), seed=0).frames,
             grounded_clip("C5", num_frames=8, size=(144, 192), seed=1).frames,
             torch.full((5, 3, 96, 128), 128, dtype=torch.uint8),  # textureless
             "/nonexistent/clip.mp4",  # undecodable
             grounded_clip("C3", num_frames=7, size=(120, 160), seed=2).frames]
    return clips, score_clips(clips, config=CFG, device="cpu", preset="background")


def test_batch_results_equal_clips_scored_alone(batch):
    clips, results = batch
    assert [r.status for r in results] == ["ok", "ok", "not_applicable", "error", "ok"]
    assert "too little texture" in results[2].reason
    assert "no such file" in results[3].reason
    for k in (0, 1, 2, 4):
        alone = score_clip(clips[k], config=CFG, device="cpu", preset="background")
        assert _json(alone) == _json(results[k]), k
    assert _json(score_clips([clips[3]], config=CFG, device="cpu",
                             preset="background")[0]) == _json(results[3])


def test_batch_budget_splits_batches_without_changing_results(batch):
    clips, results = batch
    small = score_clips(clips, config=CFG, device="cpu", preset="background", batch_bytes=1)
    assert [_json(r) for r in small] == [_json(r) for r in results]


def test_grounded_clips_keep_their_regime(batch):
    _, results = batch
    assert results[0].regime == "H" and results[0].ir == 1.0
    assert results[1].background["valid_pairs"] > 0 and results[4].ir > 0.9


def _eq13_from_rows(rows, model):
    """(IR, GE, valid count) medians over the valid (scale, pair) entries of ``model`` ("H",
    "F", or None: each row's gated model) read from a result's own ``per_pair`` rows."""
    pick = [(r["model"] if model is None else model).lower() for r in rows]
    ok = np.array([r[f"valid_{k}"] for r, k in zip(rows, pick)], bool)
    ir = np.array([r[f"ir_{k}"] for r, k in zip(rows, pick)], float)[ok]
    ge = np.array([r[f"ge_{k}_px"] for r, k in zip(rows, pick)], float)[ok]
    return (float(np.median(ir)), float(np.median(ge)), int(ok.sum())) if ok.any() else \
        (None, None, 0)


def test_clip_ir_ge_are_the_medians_of_the_valid_per_pair_entries(batch):
    """Eq. 13 on scored clips: the clip IR / GE (gated model, and each model's) are the medians
    of the result's own per-pair entries over the *valid* (scale, pair) entries only (the
    invalid ones hold 0); GE_fine / GE_peak are the median / 90th percentile (linear) of the
    gated model's valid GE at the finest scale."""
    _, results = batch
    scored = [r.to_dict()["background"] for r in results if r.status == "ok"]
    assert len(scored) == 3
    some_invalid = spread = False
    for b in scored:
        rows = b["per_pair"]
        assert len(rows) == b["pairs"] * len(b["scales"])
        ir, ge, n = _eq13_from_rows(rows, None)
        assert n == b["valid_pairs"] > 0
        assert b["ir"] == pytest.approx(ir, rel=1e-6) and b["ge_px"] == pytest.approx(ge, rel=1e-6)
        for k in ("h", "f"):
            ir_k, ge_k, n_k = _eq13_from_rows(rows, k.upper())
            assert b[f"valid_pairs_{k}"] == n_k
            assert b[f"ir_{k}"] == pytest.approx(ir_k, rel=1e-6)
            assert b[f"ge_{k}_px"] == pytest.approx(ge_k, rel=1e-6)
        fine = [r for r in rows if r["scale"] == max(b["scales"])]
        fine_ge = np.array([r[f"ge_{r['model'].lower()}_px"] for r in fine
                            if r[f"valid_{r['model'].lower()}"]], float)
        assert b["ge_fine_px"] == pytest.approx(float(np.quantile(fine_ge, 0.5)), rel=1e-6)
        assert b["ge_peak_px"] == pytest.approx(float(np.quantile(fine_ge, 0.9)), rel=1e-6)
        some_invalid |= n < len(rows)
        spread |= float(np.quantile(fine_ge, 0.9)) > 1.01 * float(np.median(fine_ge))
    # the checks above can tell: invalid entries (medians over all would differ) and a
    # finest scale whose 90th percentile is not its median
    assert some_invalid and spread


class _Syncs(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.syncs = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.syncs += func is torch.ops.aten._local_scalar_dense.default
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("kind", ["H", "F"])
def test_ransac_syncs_once_per_round_on_an_accelerator_path(monkeypatch, kind):
    """The accelerator path (no optional syncs) gives the CPU path's fits bit for bit, and
    syncs once per round (its stop test) plus a fixed setup."""
    x1, x2, mask, scores = _rows(7, 6, 300)
    fit = ransac_homography if kind == "H" else ransac_fundamental
    ref = fit(x1, x2, mask, scores, seed=3)
    rounds = []
    real_round = ransac._run_round
    monkeypatch.setattr(ransac, "_run_round", lambda *a: rounds.append(1) or real_round(*a))
    monkeypatch.setattr(ransac, "_sync_free", lambda device: True)
    with _Syncs() as counter:
        got = fit(x1, x2, mask, scores, seed=3)
    for f in FIELDS:
        assert torch.equal(getattr(got, f), getattr(ref, f)), f
    assert len(rounds) >= 2 and counter.syncs <= len(rounds) + 1 + 4


def test_background_reward_of_a_batch_equals_each_clip_alone():
    """geometric_reward(kind="background") goes through the batched engine: a (B, T, C, H, W)
    batch gives every clip the reward it gets alone."""
    clips = torch.stack([grounded_clip(c, num_frames=5, size=(96, 128), seed=k).frames
                         for k, c in enumerate(("C2", "C3"))])
    cfg = {"features": {"backend": "opencv-sift"}}
    batch, info = geometric_reward(clips, kind="background", config=cfg)
    alone = torch.cat([geometric_reward(clips[k:k + 1], kind="background", config=cfg)[0]
                       for k in range(2)])
    assert torch.equal(batch, alone)
    assert info.status == ["ok", "ok"] and bool((batch > 0.5).all())


@pytest.fixture(scope="module")
def movers():
    """Clips with moving objects (C4: static camera, sliding boxes) of other sizes and lengths
    (two of one size, one segmented at half size), and a C3 clip (F: seeds only)."""
    specs = [("C4", 12, (192, 320), 3), ("C4", 9, (192, 320), 8), ("C4", 8, (200, 360), 5),
             ("C3", 6, (120, 160), 2), ("C4", 10, (160, 240), 7)]
    clips = [grounded_clip(c, num_frames=t, size=s, seed=k).frames for c, t, s, k in specs]
    return clips, score_clips(clips, config=CFG, device="cpu", preset="background")


def test_batched_motion_segmentation_equals_each_clip_alone(movers):
    """The motion masks of clips of several sizes and lengths are one batch; every clip's
    objects, evidence and numbers are those it gets alone."""
    clips, results = movers
    seg = [r.background["segment"] for r in results]
    assert [r.status for r in results] == ["ok"] * 5
    assert [s["method"] for s in seg] == ["motion"] * 5
    found = [k for k, s in enumerate(seg) if s["objects"] > 0]
    assert 0 in found and 2 in found, seg  # movers found in two sizes
    assert seg[2]["scale"] == 0.5 and seg[3]["pre_regime"] == "F" and "dense" in seg[3]
    for k in found:
        assert seg[k]["removed_matches"] > 0 and len(seg[k]["object_seeds"]) == seg[k]["objects"]
    for k, clip in enumerate(clips):
        alone = score_clip(clip, config=CFG, device="cpu", preset="background")
        assert _json(alone) == _json(results[k]), k


def _moving_box_masks(t: int, size, top_left, box=(40, 56), step=(2, 3)) -> torch.Tensor:
    """(T, 2, H, W) bool: object 0 a box sliding by ``step`` px a frame, object 1 a smaller
    box (so clips with other object counts share chunks)."""
    masks = torch.zeros(t, 2, *size, dtype=torch.bool)
    for f in range(t):
        y, x = top_left[0] + step[0] * f, top_left[1] + step[1] * f
        masks[f, 0, y:y + box[0], x:x + box[1]] = True
        masks[f, 1, y + 4:y + 20, x + 4:x + 20] = True
    return masks


def test_batched_foreground_equals_each_clip_alone(monkeypatch):
    """score_foregrounds over clips of other sizes, lengths and object counts (two of them
    share flow chunks: same crop size) gives every clip the block it gets alone; a clip with
    bad masks gets its own error, the others are unchanged."""
    from geocon_torch.io import clip_from_tensor
    from geocon_torch.sections import foreground as fg

    cfg = GeoConConfig().replace(foreground={"flow": "torch-lk"})
    specs = [(7, (120, 160), (34, 34), 2), (7, (120, 160), (36, 40), 1),
             (5, (96, 144), (10, 16), 2)]
    clips, masks = [], []
    for k, (t, size, tl, n_obj) in enumerate(specs):
        frames = grounded_clip("C4", num_frames=t, size=size, seed=k).frames
        clips.append(clip_from_tensor(frames, long_side=None))
        masks.append(_moving_box_masks(t, size, tl)[:, :n_obj])
    bad = torch.zeros(3, 1, 120, 160, dtype=torch.bool)  # 3 mask frames for a 7-frame clip
    calls = []
    real = fg.score_pairs
    monkeypatch.setattr(fg, "score_pairs", lambda *a, **kw: calls.append(a[0].shape[0])
                        or real(*a, **kw))
    got = fg.score_foregrounds(clips + [clips[0]], masks + [bad], cfg, "cpu")
    assert calls == [12, 4]  # the two 120x160 clips share one chunk; the third is alone
    assert isinstance(got[3], Exception) and "frame" in str(got[3])
    for k in range(3):
        alone = fg.foreground_block(clips[k], masks[k], cfg, "cpu")
        assert json.dumps(alone, sort_keys=True) == json.dumps(got[k], sort_keys=True), k
        assert alone["status"] == "ok" and len(alone["objects"]) == specs[k][3]
        assert all(o["adadfrc_mean"] is not None and o["adadfrc_mean"] >= 0
                   for o in alone["objects"])


@pytest.mark.slow
def test_geocon_and_all_presets_of_a_batch_equal_each_clip_alone():
    """score_clips(preset="geocon" / "all", epipolar on the torch path) of moving-object clips
    of other sizes and lengths: every clip's result is the one it gets alone."""
    specs = [("C4", 8, (192, 320), 3), ("C4", 7, (160, 240), 7), ("C1", 6, (120, 160), 0)]
    clips = [grounded_clip(c, num_frames=t, size=s, seed=k).frames for c, t, s, k in specs]
    cfg = dict(CFG, epipolar={"implementation": "torch", "features": "opencv-sift"})
    for preset in ("geocon", "all"):
        batch = score_clips(clips, config=cfg, device="cpu", preset=preset)
        assert [r.status for r in batch] == ["ok"] * 3
        assert batch[0].foreground["status"] == "ok"
        if preset == "all":
            assert batch[0].epipolar["implementation"] == "torch"
        for k, clip in enumerate(clips):
            alone = score_clip(clip, config=cfg, device="cpu", preset=preset)
            assert _json(alone) == _json(batch[k]), (preset, k)
