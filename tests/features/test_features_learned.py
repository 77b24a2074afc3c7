"""Learned backends load only from local checkpoints: random-init kornia models are saved to
tmp_path and loaded back through the real loaders. DISK and LoFTR outputs equal the in-memory
model's; for LightGlue the loaded weights equal the saved ones and the adapter runs end to end
(its SIFT scale / orientation inputs are not checked against a reference here)."""
from __future__ import annotations

import pytest
import torch

from geocon_torch.errors import CheckpointError
from geocon_torch.features import get_extractor, get_matcher
from geocon_torch.features.learned import _merge_cfg

from helpers import TINY_LIGHTGLUE, TINY_LOFTR, shifted_texture_frames

KF = pytest.importorskip("kornia.feature")


@pytest.mark.parametrize("make", [
    lambda: get_extractor("disk"),
    lambda: get_matcher("loftr"),
    lambda: get_matcher("lightglue"),
])
def test_no_checkpoint_is_a_clear_error(make):
    with pytest.raises(CheckpointError, match="local checkpoint"):
        make()


def test_missing_garbage_and_mismatched_checkpoints(tmp_path):
    with pytest.raises(CheckpointError, match="not found"):
        get_extractor("disk", checkpoint=str(tmp_path / "nope.pth"))
    bad = tmp_path / "bad.pth"
    bad.write_bytes(b"not a torch file")
    with pytest.raises(CheckpointError, match="could not be read"):
        get_extractor("disk", checkpoint=str(bad))
    wrong = tmp_path / "wrong.pth"
    torch.save({"extractor": {"unet.weight": torch.zeros(3)}}, wrong)
    with pytest.raises(CheckpointError, match="does not fit"):
        get_extractor("disk", checkpoint=str(wrong))


def test_checkpoints_with_odd_keys_or_configs_are_checkpoint_errors(tmp_path):
    """Integer keys, a conf LightGlue cannot take, a LoFTR config of the wrong types: each was
    a raw AttributeError / TypeError / ValueError from inside torch or kornia."""
    cases = [
        ("disk", {"extractor": {0: torch.zeros(3)}}, "does not fit"),
        ("lightglue", {"state_dict": {0: torch.zeros(3)}}, "string keys"),
        ("lightglue", {"conf": {"descriptor_dim": "x"}, "state_dict": {}}, "cannot build"),
        ("loftr", {"config": {"resnetfpn": {"initial_dim": "x"}}, "state_dict": {}},
         "cannot build"),
    ]
    for k, (backend, data, msg) in enumerate(cases):
        path = tmp_path / f"{k}.pth"
        torch.save(data, path)
        make = get_extractor if backend == "disk" else get_matcher
        with pytest.raises(CheckpointError, match=msg):
            make(backend, checkpoint=str(path), device="cpu")


def test_disk_roundtrip(tmp_path):
    torch.manual_seed(0)
    model = KF.DISK().eval()
    path = tmp_path / "disk.pth"
    torch.save({"extractor": model.state_dict()}, path)
    ex = get_extractor("disk", checkpoint=str(path), max_keypoints=64, device="cpu")
    gray = shifted_texture_frames(2)
    kps = ex.extract(gray)
    with torch.no_grad():
        ref = model(gray.expand(-1, 3, -1, -1), n=64, pad_if_not_divisible=True)
    for t in range(2):
        n = int(kps.mask[t].sum())
        assert n == ref[t].keypoints.shape[0] > 0
        got = {tuple(p) for p in kps.xy[t, :n].tolist()}
        assert got == {tuple(p) for p in ref[t].keypoints.tolist()}
    # a 16-px side (a coarse scale of a small clip) is padded to 32 (its U-Net pooled it to
    # 1 px: an InstanceNorm error); keypoints stay on the frame
    small = ex.extract(shifted_texture_frames(2, h=16, w=16))
    xy = small.xy[small.mask]
    assert bool(((xy >= -0.5) & (xy <= 15.5)).all())
    norms = kps.descriptors[kps.mask].norm(dim=-1)
    torch.testing.assert_close(norms, torch.ones_like(norms))


def test_loftr_roundtrip(tmp_path):
    from kornia.feature.loftr.loftr import default_cfg

    torch.manual_seed(0)
    model = KF.LoFTR(pretrained=None, config=_merge_cfg(default_cfg, TINY_LOFTR)).eval()
    path = tmp_path / "loftr.ckpt"
    torch.save({"state_dict": model.state_dict(), "config": TINY_LOFTR}, path)
    matcher = get_matcher("loftr", checkpoint=str(path), device="cpu")
    gray = shifted_texture_frames(3)
    pairs = torch.tensor([[0, 1], [1, 2]])
    c = matcher.match(gray, pairs)
    with torch.no_grad():
        ref = model({"image0": gray[[0, 1]], "image1": gray[[1, 2]]})
    for p in range(2):
        sel = ref["batch_indexes"] == p
        n = int(sel.sum())
        assert n > 0 and int(c.mask[p].sum()) == n
        torch.testing.assert_close(c.x1[p, :n], ref["keypoints0"][sel])
        torch.testing.assert_close(c.x2[p, :n], ref["keypoints1"][sel])


def test_lightglue_roundtrip_on_kornia_sift(tmp_path):
    torch.manual_seed(0)
    conf = {k: v for k, v in KF.LightGlue.features["sift"].items() if k != "weights"}
    model = KF.LightGlue(None, **{**conf, **TINY_LIGHTGLUE}).eval()
    path = tmp_path / "lightglue.pth"
    torch.save({"conf": TINY_LIGHTGLUE, "state_dict": model.state_dict()}, path)
    matcher = get_matcher("lightglue", checkpoint=str(path), device="cpu", max_keypoints=64)
    loaded = matcher.model.state_dict()
    for k, v in model.state_dict().items():
        torch.testing.assert_close(loaded[k], v)
    gray = torch.nn.functional.interpolate(shifted_texture_frames(2, 48, 64), scale_factor=2,
                                           mode="bilinear")
    c = matcher.match(gray, torch.tensor([[0, 1]]))
    assert int(c.num_kp1[0]) > 0 and int(c.mask.sum()) > 0
    assert bool((c.scores[c.mask] >= 0).all())
