"""The foreground on the motion masks' cores and on pre-shifted fast movers (audit s28 F1, F5).

F1: the motion segmentation's masks are seed squares that reach ~8 px into the static
background, so a rigid mover scored 2.77 px^2 on them (0.137 on its exact masks): the
foreground now scores each motion object's core (eroded by ``core_erosion_px``), never given
masks. F5: torch-lk lost small fast movers (5.9 / 8.4 px^2 at 14 / 20 px/frame on exact masks):
a (pair, object) whose mask centroid moves more than PRESHIFT_MIN_PX flow px is scored on
frame t+1 read shifted by that displacement."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

from geocon_torch import score_clip
from geocon_torch._morphology import erode_mask
from geocon_torch.config import GeoConConfig
from geocon_torch.pipeline import _core_erosion
from geocon_torch.sections import foreground as fg
from geocon_torch.sections.foreground import core_masks, foreground_block, score_foregrounds
from geocon_torch.types import BlockMasks, Clip

CFG = {"foreground": {"flow": "torch-lk"}}


def _texture(h: int, w: int, g: torch.Generator) -> torch.Tensor:
    t = F.avg_pool2d(F.avg_pool2d(torch.rand(1, 3, h, w, generator=g), 5, 1, 2), 3, 1, 1)[0]
    return (t - t.amin()) / (t.amax() - t.amin()) * 255


def _scene(movers, num_frames: int = 3, size=(192, 256), seed: int = 0):
    """A static textured background with rigid textured boxes; ``movers``: (w, h, x0, y0, vx,
    vy) each, integer px / frame. Returns a Clip and the exact masks (T, K, H, W) bool."""
    g = torch.Generator().manual_seed(seed)
    h, w = size
    frames = _texture(h, w, g).expand(num_frames, 3, h, w).clone()
    masks = torch.zeros(num_frames, len(movers), h, w, dtype=torch.bool)
    for k, (ow, oh, x0, y0, vx, vy) in enumerate(movers):
        obj = _texture(oh, ow, g)
        for t in range(num_frames):
            x, y = x0 + vx * t, y0 + vy * t
            frames[t, :, y:y + oh, x:x + ow] = obj
            masks[t, k, y:y + oh, x:x + ow] = True
    u8 = frames.round().to(torch.uint8)
    return Clip(frames=u8, fps=24.0, content_mask=torch.ones(h, w, dtype=torch.bool),
                frame_indices=torch.arange(num_frames), source_size=(h, w), name="c"), masks


# --- F1: motion-mask cores ----------------------------------------------------------------

def test_rigid_mover_on_motion_masks_scores_its_core():
    """The audit's r1 scene (40x32 box at (5, 1) px/frame), default pipeline: the motion masks'
    AdaDFRC was 2.765 px^2 (exact masks 0.137); scored on the cores it is 0.176."""
    clip, masks = _scene([(40, 32, 50, 70, 5, 1)], num_frames=8)
    cfg = {"io": {"long_side": None}, **CFG}
    d = score_clip(clip.frames, config=cfg, device="cpu").to_dict()
    block = d["foreground"]
    assert d["background"]["segment"]["objects"] == 1
    assert block["core"]["erosion_px"] == 5 and block["core"]["lost_pairs"] == {}
    (obj,) = block["objects"]
    assert obj["frames"] == 7 and "reason" not in obj
    assert obj["adadfrc_mean"] < 0.3, obj
    exact = foreground_block(clip, masks, cfg)["objects"][0]["adadfrc_mean"]
    assert obj["adadfrc_mean"] < 3 * exact


def test_only_motion_masks_are_eroded():
    cfg = GeoConConfig()
    job = lambda method: SimpleNamespace(cfg=cfg, res=SimpleNamespace(  # noqa: E731
        backends={"masks": method}))
    assert _core_erosion(job("motion")) == fg.core_erosion_px(cfg.segment) == 5
    assert [_core_erosion(job(m)) for m in ("files", "sam2", "none", None)] == [0, 0, 0, 0]
    off = cfg.replace(segment={"motion_seed_radius_px": 0})
    assert fg.core_erosion_px(off.segment) == 0


def test_given_masks_are_scored_as_given():
    clip, masks = _scene([(40, 32, 50, 70, 3, 1)])
    plain = foreground_block(clip, masks, CFG)
    assert "core" not in plain and "preshift" not in plain
    assert foreground_block(clip, masks, CFG, core_erosion=0) == plain
    cored = foreground_block(clip, masks, CFG, core_erosion=5)
    assert cored["core"] == {"erosion_px": 5, "lost_pairs": {}}
    assert cored["objects"][0]["adadfrc_mean"] != plain["objects"][0]["adadfrc_mean"]


def test_core_that_vanishes_is_not_scored_with_a_reason():
    """A thin object (6 px tall: 720 px, enough for min_object_pixels) has no core after a
    5-px erosion: it is not scored and says why; the other object is scored as without it."""
    clip, masks = _scene([(120, 6, 20, 20, 2, 0), (40, 32, 60, 100, 2, 1)])
    block = foreground_block(clip, masks, CFG, core_erosion=5)
    assert block["status"] == "ok"
    assert block["core"] == {"erosion_px": 5, "lost_pairs": {"0": 2}}
    thin, box = block["objects"]
    assert thin["frames"] == 0 and thin["adadfrc_mean"] is None
    assert "core" in thin["reason"] and "not scored" in thin["reason"]
    assert box["frames"] == 2 and "reason" not in box
    alone = foreground_block(clip, masks[:, 1:], CFG, core_erosion=5)
    assert alone["objects"][0]["frames"] == 2
    only = foreground_block(clip, masks[:, :1], CFG, core_erosion=5)
    assert only["status"] == "not_applicable" and only["objects"] == []
    assert "eroded by 5 px" in only["reason"]


def test_core_masks_of_lazy_masks_stay_lazy():
    g = torch.Generator().manual_seed(3)
    low = torch.rand(5, 3, 20, 24, generator=g) > 0.2
    content = torch.ones(40, 47, dtype=torch.bool)
    content[:, :3] = False
    lazy = BlockMasks(low, 2, (40, 47), content)[:, torch.tensor([0, 2])]
    core, applied = core_masks(lazy, 5)
    assert isinstance(core, BlockMasks) and applied == 4  # round(5 / 2) = 2 cells of 2 px
    want = BlockMasks(erode_mask(low[:, [0, 2]], 2), 2, (40, 47), content).full()
    assert torch.equal(core.full(), want)
    assert core_masks(lazy, 0)[0] is lazy
    dense = lazy.full()
    assert torch.equal(core_masks(dense, 3)[0], erode_mask(dense, 3))


# --- F5: pre-shifted fast movers ------------------------------------------------------------

@pytest.mark.parametrize("speed", [14, 20])
def test_fast_small_mover_is_preshifted(speed):
    """40x32 rigid box on its exact masks: 5.943 / 8.408 px^2 at 14 / 20 px/frame before."""
    clip, masks = _scene([(40, 32, 30, 70, speed, 0)])
    block = foreground_block(clip, masks, CFG)
    assert block["preshift"] == {"min_px": fg.PRESHIFT_MIN_PX, "pairs": {"0": 2}}
    assert block["objects"][0]["adadfrc_mean"] < 0.1, block["objects"][0]


def test_slow_mover_is_not_preshifted():
    clip, masks = _scene([(40, 32, 30, 70, 2, 0)])
    block = foreground_block(clip, masks, CFG)
    assert "preshift" not in block
    assert block["objects"][0]["adadfrc_mean"] < 0.05


def test_preshift_leaves_the_other_objects_bit_identical(monkeypatch):
    """One fast and one slow object in a clip: only the fast one's rows are shifted; the slow
    one's numbers are those of the unshifted flow, bit for bit."""
    clip, masks = _scene([(40, 32, 20, 30, 16, 2), (40, 32, 60, 120, 2, -1)], num_frames=4)
    block = foreground_block(clip, masks, CFG)
    monkeypatch.setattr(fg, "PRESHIFT_MIN_PX", float("inf"))
    plain = foreground_block(clip, masks, CFG)
    assert "preshift" not in plain and block["preshift"]["pairs"] == {"0": 3}
    assert block["objects"][1] == plain["objects"][1]
    assert block["objects"][0]["adadfrc_mean"] < 0.2 < plain["objects"][0]["adadfrc_mean"]
    assert {k: v for k, v in block.items() if k not in ("objects", "preshift")} == \
        {k: v for k, v in plain.items() if k != "objects"}


def test_preshift_is_the_same_alone_or_in_a_batch():
    """Two clips of one crop size share flow chunks (pre-shifted rows and plain ones mixed, one
    pair per chunk or all together): every block equals the clip's block alone."""
    a, ma = _scene([(40, 32, 20, 30, 16, 2), (40, 32, 60, 120, 2, -1)], num_frames=4)
    b, mb = _scene([(40, 32, 20, 30, 16, 2), (40, 32, 60, 120, 2, -1)], num_frames=4, seed=5)
    c, mc = _scene([(40, 32, 30, 70, 2, 0)], seed=2)
    for pairs in (1, 8):
        cfg = {"foreground": {"flow": "torch-lk", "batch_pairs": pairs}}
        alone = [foreground_block(k, m, cfg) for k, m in ((a, ma), (b, mb), (c, mc))]
        together = score_foregrounds([a, b, c], [ma, mb, mc], cfg)
        assert together == alone


def test_a_centroid_jump_that_does_not_fit_is_not_used(monkeypatch):
    """A mask that covers other parts of its object from frame to frame (as motion masks do)
    moves its centroid far more than the object: frame t+1 read that far fits worse, so the
    pair is scored unshifted, as without the pre-shift."""
    clip, masks = _scene([(60, 40, 40, 60, 2, 1)])
    masks[1, 0, :, 72:] = False  # frame 1: only the left half (centroid 13 px to the left)
    fast = fg._fast_movers(fg.mask_moments(masks), masks[:-1].sum((-1, -2)) >= 64,
                           torch.tensor([0, 1]), 1.0)
    assert fast is not None and fast[2].tolist() == [[-13, 1], [17, 1]]
    fits = fg.shift_fits_better(clip, masks, torch.tensor([0, 1]), fast[1], fast[2], 1)
    assert fits.tolist() == [False, False]
    right = fg.shift_fits_better(clip, masks, torch.tensor([0]), torch.tensor([0]),
                                 torch.tensor([[2, 1]]), 1)
    assert right.tolist() == [True]
    block = foreground_block(clip, masks, CFG)
    monkeypatch.setattr(fg, "PRESHIFT_MIN_PX", float("inf"))
    assert "preshift" not in block and block == foreground_block(clip, masks, CFG)
