"""The background fits, the epipolar block's reading and the foreground block, pinned by
constructed inputs (mutation audit s24, round 9): per-row RANSAC seeds with a non-zero
``ransac.seed``, chunked and reused fits, the epipolar implementation choice, the frames the
epipolar block re-reads under a stride, the source frame numbers of each pair, and the
foreground's batching by flow scale, object order, counts and reasons (closed-form D via a
stub AdaDFRC)."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.config import EpipolarConfig, ForegroundConfig, load_config
from geocon_torch.io import read_clip
from geocon_torch.sections import epipolar as se, fits, foreground as fg
from geocon_torch.types import Clip

# ------------------------------------------------------------------ background fits


def _rows(r: int = 4, n: int = 80):
    """r rows of n matches: a homography plus 45% uniform outliers and 0.3 px noise."""
    g = torch.Generator().manual_seed(0)
    x1 = torch.rand(r, n, 2, generator=g, dtype=torch.float64) * 200
    H = torch.tensor([[1.02, 0.01, 3.0], [-0.01, 0.98, -2.0], [1e-4, 0, 1]],
                     dtype=torch.float64)
    xh = torch.cat([x1, torch.ones(r, n, 1, dtype=torch.float64)], -1) @ H.T
    x2 = xh[..., :2] / xh[..., 2:]
    out = torch.rand(r, n, generator=g) < 0.45
    x2 = torch.where(out[..., None], torch.rand(r, n, 2, generator=g, dtype=torch.float64) * 200,
                     x2)
    x2 = x2 + torch.randn(r, n, 2, generator=g, dtype=torch.float64) * 0.3
    return x1, x2, torch.ones(r, n, dtype=torch.bool), torch.rand(r, n, generator=g,
                                                                     dtype=torch.float64)


def _cfg(seed: int):
    return load_config({"ransac": {"seed": seed, "max_iterations": 6,
                                   "local_optimization": False}})


def _same(a, b) -> bool:
    return all(torch.equal(getattr(a, k), getattr(b, k))
               for k in ("model", "inliers", "valid", "num_inliers"))


def _sub(fit, rows):
    return fit.rows(torch.as_tensor(rows))


def test_row_seeds_add_the_configured_seed():
    """Row p draws the stream ``ransac.seed + p``: with seed 7, rows 2, 3 fitted alone (their
    positions given) equal rows 2, 3 of the full fit, and differ from the seed-0 fit."""
    x1, x2, mask, sc = _rows()
    full = fits.fit_both(x1, x2, mask, sc, _cfg(7))
    part = fits.fit_both(x1[2:], x2[2:], mask[2:], sc[2:], _cfg(7), rows=torch.tensor([2, 3]))
    zero = fits.fit_both(x1, x2, mask, sc, _cfg(0))
    for m in range(2):
        assert _same(part[m], _sub(full[m], [2, 3]))
    assert full[0].num_inliers.tolist() != zero[0].num_inliers.tolist()


def test_homography_inliers_use_tau_h_in_px():
    """50 exact homography matches and 10 moved 0.8 px: all 60 are H inliers at the default
    ``tau_h`` = 2 px, 50 at 0.5 px (tau_f, 0.1 normalised units, is the F fit's alone)."""
    g = torch.Generator().manual_seed(1)
    x1 = torch.rand(1, 60, 2, generator=g, dtype=torch.float64) * 200
    H = torch.tensor([[1.02, 0.01, 3.0], [-0.01, 0.98, -2.0], [1e-4, 0, 1]],
                     dtype=torch.float64)
    xh = torch.cat([x1, torch.ones(1, 60, 1, dtype=torch.float64)], -1) @ H.T
    x2 = xh[..., :2] / xh[..., 2:]
    x2[0, 50:, 0] += 0.8
    mask = torch.ones(1, 60, dtype=torch.bool)
    sc = torch.linspace(1, 0.5, 60, dtype=torch.float64)[None]
    h, f = fits.fit_both(x1, x2, mask, sc, load_config(None))
    assert h.num_inliers.tolist() == [60] and f.num_inliers.tolist() == [60]
    h, _ = fits.fit_both(x1, x2, mask, sc, load_config({"background": {"tau_h": 0.5}}))
    assert h.num_inliers.tolist() == [50]


def test_chunked_fits_keep_each_rows_seed(monkeypatch):
    """Rows fitted in chunks (FIT_CHUNK_ROWS lowered to 2) equal the one-call fit, with and
    without given row positions."""
    x1, x2, mask, sc = _rows(5)
    whole = fits.fit_both(x1, x2, mask, sc, _cfg(3))
    monkeypatch.setattr(fits, "FIT_CHUNK_ROWS", 2)
    chunked = fits.fit_both(x1, x2, mask, sc, _cfg(3))
    part = fits.fit_both(x1[1:], x2[1:], mask[1:], sc[1:], _cfg(3),
                         rows=torch.tensor([1, 2, 3, 4]))
    for m in range(2):
        assert _same(chunked[m], whole[m])
        assert _same(part[m], _sub(whole[m], [1, 2, 3, 4]))


def test_refitted_rows_draw_their_given_row_ids():
    """fit_reusing with ``row_ids``: a kept row keeps its preliminary fit, a changed row is
    refitted with the seed of its id, so the result equals fit_both(rows=row_ids)."""
    x1, x2, mask, sc = _rows()
    ids = torch.tensor([5, 6, 7, 8])
    cfg = _cfg(1)
    want = fits.fit_both(x1, x2, mask, sc, cfg, rows=ids)
    pre_mask = mask[:2].clone()
    pre_mask[1, :10] = False  # row 1 changed since the preliminary fit
    pre = fits.fit_both(x1[:2], x2[:2], pre_mask, sc[:2], cfg, rows=ids[:2])
    got = fits.fit_reusing(x1, x2, mask, sc, cfg, pre, torch.tensor([0, 1]), pre_mask,
                           row_ids=ids)
    for m in range(2):
        assert _same(got[m], want[m])


def test_merged_clips_reuse_their_own_preliminary_fits():
    """Two clips fitted in one call, both with preliminary fits of all their rows on unchanged
    masks: each keeps its own fits (its preliminary rows offset by its first row), equal to
    the clip fitted alone."""
    a, b = _rows(3), tuple(t[1:] for t in _rows(4))
    cfg = _cfg(2)
    parts, alone = [], []
    for x1, x2, mask, sc in (a, b):
        own = fits.fit_both(x1, x2, mask, sc, cfg)
        alone.append(own)
        parts.append(fits.ClipRows(x1, x2, mask, sc, pre=own,
                                   pre_rows=torch.arange(x1.shape[0]), pre_mask=mask.clone()))
    got = fits.fit_clips(parts, cfg)
    for k in range(2):
        for m in range(2):
            assert _same(got[k][m], alone[k][m])


# ------------------------------------------------------------------ epipolar block reading


def test_auto_implementation_reads_the_config_then_the_device():
    torch_cfg, auto = EpipolarConfig(implementation="torch"), EpipolarConfig()
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert se.resolve_implementation("auto", torch_cfg, cpu) == "torch"
    assert se.resolve_implementation(None, torch_cfg, cpu) == "torch"
    assert se.resolve_implementation("opencv", torch_cfg, cuda) == "opencv"
    assert se.resolve_implementation("auto", auto, cuda) == "torch"
    assert se.resolve_implementation(None, auto, cpu) == "opencv"
    assert se.resolve_implementation(None, auto, None) == "opencv"


def _numbered(t: int = 12, h: int = 32, w: int = 48) -> torch.Tensor:
    """(T, 3, H, W) uint8 frames, frame k filled with 10 k."""
    return (torch.arange(t, dtype=torch.uint8) * 10)[:, None, None, None].expand(
        t, 3, h, w).contiguous()


def test_gvgc_reads_frames_from_exactly_min_frames():
    cfg = load_config(None)
    pos, pairs = se.protocol_positions(71, cfg, "gvgc")
    assert pos.tolist() == list(range(71)) and pairs is None
    assert se.protocol_positions(70, cfg, "gvgc")[0].tolist() == []


def test_native_epipolar_frames_follow_the_stride():
    """Stride 2: the working clip holds source frames 0, 2, ..., 10; the epipolar block
    re-reads the protocol's positions at those source frames (values 10 x source)."""
    video = _numbered()
    cfg = load_config({"io": {"stride": 2}})
    clip = read_clip(video, long_side=None, stride=2)
    assert clip.frame_indices.tolist() == [0, 2, 4, 6, 8, 10]
    pos, _ = se.protocol_positions(clip.num_frames, cfg, "worldatlas")
    src = (2 * pos).tolist()
    native, _ = se._native_clip(video, clip, cfg, "worldatlas", torch.device("cpu"))
    assert native.frame_indices.tolist() == src
    assert native.frames[:, 0, 0, 0].tolist() == [10 * s for s in src]
    opts = {"stride": 2, "max_frames": None, "letterbox_threshold": 0,
            "letterbox_min_fraction": 0.0}
    (tclip, _), = se.native_tensor_clips(video[None], cfg, opts)
    assert tclip.frames[:, 0, 0, 0].tolist() == [10 * s for s in src]


def test_a_clip_too_short_for_a_pair_is_not_reread():
    """One frame: no pair, so nothing is re-read (an empty read would fail); the block is
    not_applicable with the protocol's reason."""
    video = _numbered(1)
    clip = read_clip(video, long_side=None)
    got = se.epipolar_blocks([video], [clip], load_config(None), "worldatlas",
                             torch.device("cpu"))[0]
    assert isinstance(got, dict) and got["status"] == "not_applicable"
    assert got["reason"].startswith("clip has 1 frame(s)")


def test_pairs_report_the_source_frame_of_each_side():
    clip = Clip(frames=torch.zeros(4, 3, 8, 8, dtype=torch.uint8), fps=24.0,
                content_mask=torch.ones(8, 8, dtype=torch.bool),
                frame_indices=torch.tensor([0, 3, 6, 9]), source_size=(8, 8))
    section = {"per_pair": [{"left_index": 1, "right_index": 3},
                            {"left_index": 0, "right_index": 2}]}
    se._add_source_frames(clip, [0, 3, 6, 9], section)
    assert [(r["left_frame"], r["right_frame"]) for r in section["per_pair"]] == [(3, 9),
                                                                               (0, 6)]


# ------------------------------------------------------------------ foreground block


@pytest.fixture()
def stub_adadfrc(monkeypatch):
    """AdaDFRC replaced by D = 1 per object (valid where the mask has >= min_pixels px)."""
    def fake(flow, masks, rel, *, grid, score, min_pixels):
        px = masks.sum((-1, -2))
        return torch.ones(px.shape, dtype=torch.float64, device=flow.device), px >= min_pixels

    monkeypatch.setattr(fg, "adadfrc", fake)


def _clip(h: int, w: int, t: int = 2, seed: int = 0) -> Clip:
    g = torch.Generator().manual_seed(seed)
    fr = (torch.rand(t, 3, h, w, generator=g) * 255).to(torch.uint8)
    return Clip(frames=fr, fps=24.0, content_mask=torch.ones(h, w, dtype=torch.bool),
                frame_indices=torch.arange(t), source_size=(h, w), name="c")


CFG = dict(flow="torch-lk", scales=(1.0,), occlusion_weighting=False, min_object_pixels=16)


def test_clips_of_one_crop_size_but_other_flow_scales_are_not_batched(stub_adadfrc):
    """A 96x128 clip (flow scale 64/128) and a 192x256 clip (64/256) whose flow crops are both
    96x128: each keeps its own flow scale in a batch, D = 1 / c^2 = 4 and 16 as alone."""
    a, b = _clip(96, 128), _clip(192, 256, seed=1)
    ma = torch.zeros(2, 1, 96, 128, dtype=torch.bool)
    ma[0, 0, 30:66, 30:98] = True  # crop clamped to the whole frame
    mb = torch.zeros(2, 1, 192, 256, dtype=torch.bool)
    mb[0, 0, 80:112, 100:164] = True  # 32 x 64 + 32 px margins: 96 x 128
    cfg = ForegroundConfig(max_flow_side=64, **CFG)
    both = fg.score_foregrounds([a, b], [ma, mb], cfg)
    assert [r["flow_scale"] for r in both] == [0.5, 0.25]
    assert [r["objects"][0]["adadfrc_mean"] for r in both] == [4.0, 16.0]


def test_an_object_never_scored_has_no_score_and_the_block_is_ok(stub_adadfrc):
    masks = torch.zeros(3, 2, 96, 128, dtype=torch.bool)
    masks[:2, 0, 20:60, 30:70] = True  # object 0: frames 0, 1
    masks[:2, 1, 5:8, 5:8] = True  # object 1: 9 px < 16 everywhere
    res = fg.foreground_block(_clip(96, 128, 3), masks, ForegroundConfig(**CFG))
    assert res["status"] == "ok" and res["reason"] is None
    o0, o1 = res["objects"]
    assert (o0["frames"], o0["adadfrc_mean"], o0["per_pair"]) == (2, 1.0, [1.0, 1.0])
    assert (o1["frames"], o1["adadfrc_mean"], o1["adap90"]) == (0, None, None)
    assert o1["per_pair"] == [None, None]


def test_occupied_lines_are_rows_then_columns():
    masks = torch.zeros(2, 1, 4, 6, dtype=torch.bool)
    masks[0, 0, 1, 5] = True
    occ = fg.occupied_lines(masks, torch.tensor([0]), 1)
    assert occ.tolist() == [False, True, False, False] + [False] * 5 + [True]


def test_capped_objects_are_listed_by_index(stub_adadfrc):
    """max_objects 2 of 3 objects (areas 100, 400, 900 px): objects 1 and 2 are scored, listed
    in index order; one object and no pair skipped."""
    masks = torch.zeros(2, 3, 96, 128, dtype=torch.bool)
    masks[0, 0, 0:10, 0:10] = True
    masks[0, 1, 20:40, 20:40] = True
    masks[0, 2, 50:80, 60:90] = True
    res = fg.foreground_block(_clip(96, 128), masks, ForegroundConfig(max_objects=2, **CFG))
    assert [o["id"] for o in res["objects"]] == [1, 2]
    assert res["skipped"] == {"objects": 1, "pairs": 0}


def test_skipped_pairs_count_what_max_pairs_cut(stub_adadfrc):
    masks = torch.zeros(6, 1, 32, 48, dtype=torch.bool)
    masks[:, 0, 8:24, 8:24] = True  # present in the 5 pairs
    res = fg.foreground_block(_clip(32, 48, 6), masks, ForegroundConfig(max_pairs=2, **CFG))
    assert res["skipped"] == {"objects": 0, "pairs": 3}
    assert res["objects"][0]["frames"] == 2


def test_masks_without_objects_say_so():
    res = fg.foreground_block(_clip(32, 48), torch.zeros(2, 0, 32, 48, dtype=torch.bool),
                              ForegroundConfig(**CFG))
    assert res["status"] == "not_applicable"
    assert res["reason"] == "no moving object in the clip"
