"""Mutation round 17 of the foreground's motion-mask cores and torch-lk pre-shift (commit d63fbcf).

Each test pins a number or a decision the existing tests left free: the core erosion's rounding
(config and lazy cells), the mask moments and centroid displacements, the pre-shift's threshold
(either axis, in flow px, rounded), which (pair, object) rows are flowed and where their scores
land, the shift added back to each scale's flow, the blurred fit check, the per-clip erosion of a
batch and the reason of an object whose core is lost in some pairs only. Small synthetic scenes
with exact masks; most tests call the functions directly."""
from __future__ import annotations

import io
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from helpers import make_clip

from geocon_torch._morphology import erode_mask
from geocon_torch.config import GeoConConfig
from geocon_torch.pipeline import _core_erosion
from geocon_torch.sections import foreground as fg
from geocon_torch.sections.progress import Progress
from geocon_torch.types import BlockMasks

CFG = {"foreground": {"flow": "torch-lk"}}


def _texture(h: int, w: int, g: torch.Generator, pool: int = 5):
    t = torch.rand(1, 3, h, w, generator=g)
    if pool > 1:
        t = F.avg_pool2d(t, pool, 1, pool // 2)
    return ((t - t.amin()) / (t.amax() - t.amin()))[0]


def _scene(movers, num_frames: int = 3, size=(128, 192), seed: int = 0, pool: int = 5):
    """Static textured background with rigid textured boxes; ``movers``: (w, h, x0, y0, vx, vy)
    each (integer px / frame). Returns the clip and its exact masks (T, K, H, W) bool."""
    g = torch.Generator().manual_seed(seed)
    h, w = size
    frames = _texture(h, w, g, pool).expand(num_frames, 3, h, w).clone()
    masks = torch.zeros(num_frames, len(movers), h, w, dtype=torch.bool)
    for k, (ow, oh, x0, y0, vx, vy) in enumerate(movers):
        obj = _texture(oh, ow, g, pool)
        for t in range(num_frames):
            x, y = x0 + vx * t, y0 + vy * t
            frames[t, :, y:y + oh, x:x + ow] = obj
            masks[t, k, y:y + oh, x:x + ow] = True
    return make_clip(frames), masks


def _moments(centroids, count: float = 100.0):
    """(T, K, 3) moments of masks of ``count`` px whose centroids are ``centroids`` (T, K, 2);
    a centroid of None: an empty mask."""
    out = torch.zeros(len(centroids), len(centroids[0]), 3, dtype=torch.float64)
    for t, row in enumerate(centroids):
        for k, c in enumerate(row):
            if c is not None:
                out[t, k] = torch.tensor([count, count * c[0], count * c[1]])
    return out


# --- the core erosion ----------------------------------------------------------------------

def test_core_erosion_rounds_five_eighths_of_the_seed_radius():
    """round(0.625 r): 8 -> 5, 6 -> 4 (3.75), 3 -> 2 (1.875), 1 -> 1 (0.625), 0 -> 0; the
    pipeline passes it for the configured radius, not the default's 5."""
    radii = {8: 5, 6: 4, 3: 2, 1: 1, 0: 0}
    got = {r: fg.core_erosion_px(SimpleNamespace(motion_seed_radius_px=r)) for r in radii}
    assert got == radii
    cfg = GeoConConfig().replace(segment={"motion_seed_radius_px": 6})
    job = SimpleNamespace(cfg=cfg, res=SimpleNamespace(backends={"masks": "motion"}))
    assert _core_erosion(job) == 4


@pytest.mark.parametrize("erosion, factor, cells", [(3, 2, 2), (1, 4, 1), (7, 2, 4)])
def test_lazy_core_erodes_rounded_cells_at_least_one(erosion, factor, cells):
    """Lazy masks erode max(1, round(e / f)) cells of f px: 3 px on 2-px cells is 2 cells (4 px),
    1 px on 4-px cells still 1 cell (4 px), 7 px on 2-px cells 4 cells (round(3.5) = 4)."""
    g = torch.Generator().manual_seed(1)
    low = torch.zeros(3, 2, 16, 18, dtype=torch.bool)
    low[:, :, 2:14, 3:16] = torch.rand(3, 2, 12, 13, generator=g) > 0.05
    size = (16 * factor, 18 * factor)
    content = torch.ones(size, dtype=torch.bool)
    lazy = BlockMasks(low, factor, size, content)
    core, applied = fg.core_masks(lazy, erosion)
    assert applied == cells * factor
    want = BlockMasks(erode_mask(low, cells), factor, size, content).full()
    assert torch.equal(core.full(), want)
    assert int(want.sum()) < int(lazy.full().sum())


# --- moments and fast movers ---------------------------------------------------------------

@pytest.mark.parametrize("num_frames, step", [(17, 16), (5, 4), (5, 2)])
def test_mask_moments_are_counts_and_coordinate_sums_of_every_frame(num_frames, step):
    """Object 0 is a w x h box at (x0, y0) moving (2, 1) px / frame: count w h, sum of x
    h (w x0 + w (w - 1) / 2), sum of y w (h y0 + h (h - 1) / 2); object 1 is empty in the
    last frame (the frame a chunk boundary would drop)."""
    h, w = 40, 64
    masks = torch.zeros(num_frames, 2, h, w, dtype=torch.bool)
    bw, bh = 9, 5
    for t in range(num_frames):
        x0, y0 = 3 + 2 * t, 1 + t
        masks[t, 0, y0:y0 + bh, x0:x0 + bw] = True
        if t < num_frames - 1:
            masks[t, 1, 30, 60] = True
    got = fg.mask_moments(masks, step=step)
    assert got.shape == (num_frames, 2, 3) and got.dtype == torch.float64
    for t in range(num_frames):
        x0, y0 = 3 + 2 * t, 1 + t
        want = [bw * bh, bh * (bw * x0 + bw * (bw - 1) / 2), bw * (bh * y0 + bh * (bh - 1) / 2)]
        assert got[t, 0].tolist() == want
    assert got[:-1, 1].tolist() == [[1.0, 60.0, 30.0]] * (num_frames - 1)
    assert got[-1, 1].tolist() == [0.0, 0.0, 0.0]


def test_plan_moments_append_the_dilated_masks_presence_of_frame_t():
    """The tail is the dilated masks' presence (>= min_pixels, 64 exactly counts) at frame t of
    each pair (t, t+1), not at frame t+1."""
    dilated = torch.zeros(3, 1, 32, 32, dtype=torch.bool)
    dilated[0, 0, :8, :8] = True  # exactly 64 px
    dilated[2, 0, :10, :10] = True
    core = fg.core_masks(dilated, 1)[0]
    plan = fg._Plan(None, core, torch.arange(1), {}, None, dilated)
    got = fg._plan_moments(plan, 64)
    assert got.shape == (3 * 1 * 3 + 2,)
    assert got[-2:].tolist() == [1.0, 0.0]
    assert got[:9].tolist() == fg.mask_moments(core).flatten().tolist()


def test_fast_movers_threshold_is_strict_on_either_axis_in_flow_px():
    """Centroid steps of (6, 0), (-6.5, 0), (0, 7) and (0.5, -9.4) working px: 6 is not more than
    PRESHIFT_MIN_PX = 6, the others are (either axis, either sign); displacements are rounded."""
    assert fg.PRESHIFT_MIN_PX == 6.0
    mom = _moments([[(20, 20), (50, 20), (80, 20), (110, 20.2)],
                    [(26, 20), (43.5, 20), (80, 27), (110.5, 10.8)]])
    pres = torch.ones(1, 4, dtype=torch.bool)
    m_idx, k_idx, shift = fg._fast_movers(mom, pres, torch.tensor([0]), 1.0)
    assert m_idx.tolist() == [0, 0, 0] and k_idx.tolist() == [1, 2, 3]
    assert shift.tolist() == [[-6, 0], [0, 7], [0, -9]]  # -6.5 rounds half to even
    # at half the flow resolution 7 working px are 3.5 flow px (not fast), 9.4 are 4.7
    assert fg._fast_movers(mom, pres, torch.tensor([0]), 0.5) is None
    wide = _moments([[(20, 20)], [(35, 20)]])
    assert fg._fast_movers(wide, torch.ones(1, 1, dtype=torch.bool), torch.tensor([0]),
                           0.5)[2].tolist() == [[15, 0]]


def test_fast_movers_round_the_displacement():
    mom = _moments([[(20.0, 30.0)], [(27.6, 21.7)], [(20.0, 30.0)]])
    got = fg._fast_movers(mom, torch.ones(2, 1, dtype=torch.bool), torch.tensor([0, 1]), 1.0)
    assert got[0].tolist() == [0, 1] and got[1].tolist() == [0, 0]
    assert got[2].tolist() == [[8, -8], [-8, 8]]


def test_fast_movers_need_the_object_scored_and_both_masks_present():
    """A pair whose object is not scored (too few px) or whose frame t+1 mask is empty (its
    centroid unknown, not at the origin) has no pre-shift."""
    mom = _moments([[(60, 40), (60, 40)], [(80, 40), None]])
    both = torch.ones(1, 2, dtype=torch.bool)
    got = fg._fast_movers(mom, both, torch.tensor([0]), 1.0)
    assert got[1].tolist() == [0] and got[2].tolist() == [[20, 0]]
    assert fg._fast_movers(mom, torch.tensor([[False, True]]), torch.tensor([0]), 1.0) is None
    # the scored pairs select their rows of pres: pair 1 (fast, scored) of pairs (1,)
    mom3 = _moments([[(60, 40)], [(60, 40)], [(80, 40)]])
    pres3 = torch.tensor([[False], [True]])
    assert fg._fast_movers(mom3, pres3, torch.tensor([1]), 1.0)[0].tolist() == [0]
    assert fg._fast_movers(mom3, torch.tensor([[True], [False]]), torch.tensor([0, 1]),
                           1.0) is None


# --- the fit check ---------------------------------------------------------------------------

def _noise_pair(seed: int, dx: int, size=(96, 160)):
    """Frames 0, 1 of a 40x24 box of i.i.d. noise moving dx px over an i.i.d. noise background,
    and the exact masks (2, 1, H, W)."""
    return _scene([(40, 24, 30, 36, dx, 0)], num_frames=2, size=size, seed=seed, pool=1)


def test_shift_fit_check_blurs_fine_texture_before_comparing():
    """On a texture with no spatial correlation a 2-px and a 17-px residual differ by chance
    alone unblurred; blurred by 3 px the smaller residual wins in every seed."""
    for seed in range(10):
        for true_dx in (17, 2):
            clip, masks = _noise_pair(seed, true_dx)
            fits = fg.shift_fits_better(clip, masks, torch.tensor([0]), torch.tensor([0]),
                                        torch.tensor([[15, 0]]), 1)
            assert fits.tolist() == [true_dx == 17], (seed, true_dx)


def test_shift_fit_check_reads_the_candidates_own_object():
    """Object 1 moves 12 px, object 0 stays: the 12-px shift fits object 1's pixels and not
    object 0's (each candidate is judged on its own mask)."""
    clip, masks = _scene([(40, 30, 20, 20, 0, 0), (40, 30, 40, 80, 12, 0)], num_frames=2)
    fits = fg.shift_fits_better(clip, masks, torch.tensor([0, 0]), torch.tensor([1, 0]),
                                torch.tensor([[12, 0], [12, 0]]), 1)
    assert fits.tolist() == [True, False]


def test_shift_fit_check_keeps_a_tie_unshifted():
    """A flat frame: both differences are 0, so the shift does not fit better."""
    frames = torch.full((2, 3, 48, 64), 0.5)
    masks = torch.zeros(2, 1, 48, 64, dtype=torch.bool)
    masks[:, 0, 10:30, 10:40] = True
    fits = fg.shift_fits_better(make_clip(frames), masks, torch.tensor([0]), torch.tensor([0]),
                                torch.tensor([[9, 0]]), 1)
    assert fits.tolist() == [False]


# --- rows of a track with pre-shifted movers ---------------------------------------------------

def test_preshift_rows_of_subsampled_pairs():
    """Scored pairs (1, 3); object 0 is fast in pair 3, where no other object is scored: pair 1
    is flowed once for both objects, pair 3 once, shifted, for object 0 only (its frame t is
    3, not the index 1 of pair 3 among the scored pairs); a shift that does not fit is not
    used."""
    pairs = torch.tensor([1, 3])
    pres = torch.tensor([[False, False], [True, True], [False, False], [True, False]])
    fast = (torch.tensor([1]), torch.tensor([0]), torch.tensor([[9, -2]]))
    rows, shift, own, n = fg._preshift_rows(pairs, pres, fast, torch.tensor([True]).numpy())
    assert rows.tolist() == [1, 3]
    assert shift.tolist() == [[0, 0], [9, -2]]
    assert own.tolist() == [[True, True], [True, False]]
    assert n.tolist() == [1, 0]
    assert fg._preshift_rows(pairs, pres, fast, torch.tensor([False]).numpy()) is None


def test_track_rows_only_for_torch_lk():
    """RAFT (no pyramid reach) never pre-shifts: its track keeps one row per pair; torch-lk's
    track adds one shifted row per fast (pair, object) and a base row for the slow object."""
    clip, masks = _scene([(40, 32, 20, 20, 14, 0), (40, 32, 60, 80, 1, 0)])
    for flow, want in (("raft_small", None), ("torch-lk", [0, 1, 0, 1])):
        cfg = fg._foreground_config({"foreground": {"flow": flow}})
        track = fg._plan_tracks([fg._plan(clip, masks, cfg, None)], cfg, None)[0]
        assert isinstance(track, fg._Track)
        if want is None:
            assert track.shift is None and track.own is None and "preshift" not in track.out
            assert track.pairs.tolist() == [0, 1]
            continue
        assert track.pairs.tolist() == want
        assert track.shift.tolist() == [[0, 0], [0, 0], [14, 0], [14, 0]]
        assert track.own.tolist() == [[False, True]] * 2 + [[True, False]] * 2
        assert track.out["preshift"] == {"min_px": 6.0, "pairs": {"0": 2}}


def test_chunk_inputs_of_shifted_rows():
    """A pre-shifted row reads frame t+1 moved by the object's 14 px (on the object it equals
    frame t exactly: rigid whole-px motion) and carries that object's mask only."""
    clip, masks = _scene([(40, 32, 20, 20, 14, 0), (40, 32, 60, 80, 1, 0)])
    cfg = fg._foreground_config(CFG)
    track = fg._plan_tracks([fg._plan(clip, masks, cfg, None)], cfg, None)[0]
    f1, f2, m, shift = fg._chunk_inputs([track], [(0, 0, 4)], 2)
    ys, xs = track.box
    crop = masks[..., ys, xs]
    assert shift.tolist() == [[0, 0], [0, 0], [14, 0], [14, 0]]
    assert not m[:2, 0].any() and torch.equal(m[:2, 1], crop[:2, 1])  # base rows: slow one
    assert torch.equal(m[2:, 0], crop[:2, 0]) and not m[2:, 1].any()  # shifted: fast one
    frames = clip.frames.float() / 255.0
    assert torch.equal(f2[:2], frames[1:3][..., ys, xs])
    for r in (2, 3):
        on = m[r, 0]
        assert torch.equal(f2[r][:, on], f1[r][:, on])
        assert not torch.equal(f2[r - 2][:, on], f1[r][:, on])


def test_shifted_crop_reads_each_row_its_own_shift_with_borders_repeated():
    frames = torch.arange(2 * 6 * 8, dtype=torch.float32).view(2, 1, 6, 8)
    box = (slice(1, 4), slice(2, 6))
    got = fg._shifted_crop(frames, box, torch.tensor([[1, -1], [3, 4]]))
    assert torch.equal(got[0, 0], frames[0, 0, 0:3, 3:7])
    ys = torch.tensor([5, 5, 5])  # rows 5, 6, 7: beyond row 5 repeat it
    xs = torch.tensor([5, 6, 7, 7])  # columns 5 .. 8: column 8 repeats 7
    assert torch.equal(got[1, 0], frames[1, 0][ys[:, None], xs[None, :]])


def test_shift_is_added_back_in_each_scales_flow_px(monkeypatch):
    """With a zero-flow estimator the flow the fit reads is the row's shift in that scale's px:
    (8, -6) working px of a 37x50 crop at scale 0.5 (18x25 px) are (4, -6 x 18 / 37); an
    unshifted row reads 0."""
    seen = []
    real = fg.adadfrc

    def spy(flow, masks, rel, **kw):
        seen.append(flow.clone())
        return real(flow, masks, rel, **kw)

    monkeypatch.setattr(fg, "adadfrc", spy)
    cfg = fg._foreground_config({"foreground": {"scales": [0.5, 1.0],
                                                "occlusion_weighting": False}})

    def zero(a, b):
        return torch.zeros(a.shape[0], 2, *a.shape[-2:])

    frames = torch.rand(2, 3, 37, 50, generator=torch.Generator().manual_seed(0))
    masks = torch.ones(2, 1, 37, 50, dtype=torch.bool)
    fg.score_pairs(frames, frames, masks, zero, cfg, shift=torch.tensor([[0, 0], [8, -6]]))
    assert [tuple(f.shape) for f in seen] == [(2, 2, 18, 25), (2, 2, 37, 50)]
    for flow, (rx, ry) in zip(seen, ((25 / 50, 18 / 37), (1.0, 1.0))):
        assert not flow[0].any()
        assert torch.allclose(flow[1, 0], torch.full((), 8 * rx))
        assert torch.allclose(flow[1, 1], torch.full((), -6 * ry))


def test_put_owned_writes_each_rows_objects_at_its_frame():
    """Rows (D, valid, D_s x 2, valid_s x 2) of frames (1, 3, 1) into a (4, 2) track: each
    (row, object) that ``own`` marks lands at (frame t of the row, object); nothing else."""
    n_s = 2
    rows = torch.arange(6 * 3 * 2, dtype=torch.float64).view(6, 3, 2) + 1
    rows[1], rows[4:] = 1.0, 1.0  # validities
    own = torch.tensor([[True, False], [True, True], [False, True]])
    out = (torch.zeros(4, 2, dtype=torch.float64), torch.zeros(4, 2, dtype=torch.bool),
           torch.zeros(n_s, 4, 2, dtype=torch.float64), torch.zeros(n_s, 4, 2, dtype=torch.bool))
    fg._put_owned(out, rows, torch.tensor([1, 3, 1]), own, n_s)
    d_all, v_all, ds_all, vs_all = out
    want = torch.zeros(4, 2, dtype=torch.float64)
    want[1, 0], want[3, 0], want[3, 1], want[1, 1] = rows[0, 0, 0], rows[0, 1, 0], \
        rows[0, 1, 1], rows[0, 2, 1]
    assert torch.equal(d_all, want)
    assert v_all.tolist() == [[False, False], [True, True], [False, False], [True, True]]
    for s in range(n_s):
        assert ds_all[s, 1].tolist() == [rows[2 + s, 0, 0].item(), rows[2 + s, 2, 1].item()]
        assert ds_all[s, 3].tolist() == rows[2 + s, 1].tolist()
        assert not ds_all[s, 0].any() and not ds_all[s, 2].any()
        assert torch.equal(vs_all[s], v_all)


def test_preshifted_object_keeps_its_per_scale_scores():
    """The pre-shifted rows fill the per-scale scores too: every scale of the fast mover has a
    number (0.25 / 0.5 / 1.0), each below 0.5 px^2 on a rigid box (0.12 / 0.18 / 0.03; 1.49 /
    5.64 / 7.42 unshifted)."""
    clip, masks = _scene([(40, 32, 20, 20, 14, 0)])
    block = fg.foreground_block(clip, masks, CFG)
    assert block["preshift"]["pairs"] == {"0": 2}
    (obj,) = block["objects"]
    assert obj["frames"] == 2 and set(obj["per_scale"]) == {"0.25", "0.5", "1.0"}
    assert all(v is not None and 0 <= v < 0.5 for v in obj["per_scale"].values()), obj


# --- erosion per clip and the lost-core reason ---------------------------------------------------

def test_each_clip_of_a_batch_gets_its_own_erosion():
    a, ma = _scene([(40, 32, 30, 40, 3, 1)], seed=1)
    b, mb = _scene([(40, 32, 50, 30, 2, 2)], seed=2)
    together = fg.score_foregrounds([a, b], [ma, mb], CFG, core_erosion=[0, 5])
    assert together == [fg.foreground_block(a, ma, CFG),
                        fg.foreground_block(b, mb, CFG, core_erosion=5)]
    assert "core" not in together[0] and together[1]["core"]["erosion_px"] == 5


def test_object_scored_in_some_pairs_has_no_lost_core_reason():
    """The box's mask is a 6-px stripe in frame 1 (its core vanishes: pair 1 lost) and a box in
    frames 0, 2, 3: pairs 0 and 2 are scored, so it gets no reason; the count says 1 lost."""
    clip, masks = _scene([(40, 32, 30, 40, 2, 1)], num_frames=4)
    masks[1] = False
    masks[1, 0, 50:56, 20:140] = True
    block = fg.foreground_block(clip, masks, CFG, core_erosion=5)
    assert block["core"] == {"erosion_px": 5, "lost_pairs": {"0": 1}}
    (obj,) = block["objects"]
    assert obj["frames"] == 2 and obj["per_pair"][1] is None
    assert "reason" not in obj


def test_progress_counts_flow_rows_when_objects_are_pre_shifted():
    """A fast mover beside a static object is flowed on extra (pair, object) rows: the progress
    line counts those rows as rows (was "foreground 4/4 pairs" for 2 pairs)."""
    clip, masks = _scene([(40, 32, 20, 40, 14, 0), (30, 30, 140, 60, 0, 0)])
    out = io.StringIO()
    fg.foreground_block(clip, masks, CFG, progress=Progress("c", True, out))
    lines = [ln for ln in out.getvalue().splitlines() if "foreground " in ln]
    assert lines and lines[-1].endswith("foreground 4/4 flow rows"), lines
    clip, masks = _scene([(40, 32, 20, 40, 2, 0)])
    out = io.StringIO()
    fg.foreground_block(clip, masks, CFG, progress=Progress("c", True, out))
    assert out.getvalue().splitlines()[-1].endswith("foreground 2/2 pairs"), out.getvalue()
