"""The gate's view of a clip read from a tensor: like a file, the source is read again at the
view side (``gate.view_long_side``, capped by the source) whenever the working frames are
coarser or were upscaled, so the gate reads the same pixels by path and by tensor, at any
``io.long_side``; a clip at native pixels or a Clip built by hand keeps no reference."""
import copy
import pickle
from dataclasses import replace

import pytest
import torch

from geocon_torch import score_clip, score_clips
from geocon_torch.config import load_config
from geocon_torch.gate.view import gate_view_correspondences, reads_source
from geocon_torch.io import clip_from_tensor, clips_from_tensors, read_clip, write_image_folder
from geocon_torch.io.pairs import parallax_gate_pairs
from geocon_torch.io.reader import source_of
from geocon_torch.synth import render_scene
from geocon_torch.types import Clip

CFG = {"features": {"backend": "opencv-sift"}, "gate": {"method": "parallax"},
       "segment": {"method": "none"}}
FIELDS = ("x1", "x2", "mask", "scores", "pairs", "num_kp1", "num_kp2")
#: what differs between the routes whatever the view: where the frames came from
ROUTE_KEYS = {"content_hash", "timing_s", "io", "clip", "path"}


def _frames(size=(144, 192), seed=0, t=6):
    return render_scene("C3", num_frames=t, size=size, seed=seed).frames


def _cfg(side):
    return {**CFG, "io": {"long_side": side}}


def _numbers(d):
    """A result dict without the fields that name the route (frames' origin, timings)."""
    out = {k: v for k, v in d.items() if k not in ROUTE_KEYS}
    out["backends"] = {k: v for k, v in d["backends"].items() if k != "gate_view"}
    out["gate_view"] = {k: v for k, v in d["backends"]["gate_view"].items() if k != "source"}
    ev = d["gate"]["evidence"]  # the gate's evidence names the view's source too
    view = {k: v for k, v in ev["view"].items() if k != "source"}
    out["gate"] = dict(d["gate"], evidence=dict(ev, view=view))
    return out


@pytest.mark.parametrize("size,side", [((96, 128), 64), ((144, 192), 96), ((144, 192), 256)])
def test_gate_view_of_a_tensor_equals_the_files(tmp_path, size, side):
    """The gate pairs' matches of a lossless PNG folder and of the same frames as a tensor,
    at a working side below the source's (64, 96) and above it (256: upscaled): both read the
    native frames at the view side (the source's long side, < 512), so they are bit-identical
    although the working frames differ (cv2 INTER_AREA / INTER_LINEAR vs torch)."""
    x = _frames(size)
    folder = write_image_folder(tmp_path / "clip", x)
    cfg = load_config(_cfg(side))
    pairs = parallax_gate_pairs(int(x.shape[0]))
    by_file = read_clip(folder, long_side=side)
    by_tensor = read_clip(x, long_side=side)
    assert max(by_tensor.size) == side
    assert reads_source(by_file, cfg) and reads_source(by_tensor, cfg)
    cf, info_f = gate_view_correspondences(by_file, pairs, cfg, torch.device("cpu"))
    ct, info_t = gate_view_correspondences(by_tensor, pairs, cfg, torch.device("cpu"))
    for name in FIELDS:
        assert torch.equal(getattr(cf, name), getattr(ct, name)), name
    assert info_f["source"] == "file" and info_t == {**info_f, "source": "tensor"}
    assert info_t["long_side"] == max(size)


@pytest.mark.parametrize("size,side", [((96, 128), 64), ((144, 192), 256)])
def test_score_clip_of_a_tensor_equals_the_file_on_the_same_working_pixels(tmp_path, size,
                                                                         side):
    """score_clip(tensor) at a non-native io.long_side against the PNG folder's Clip given
    the tensor's working frames (so only the gate's view source differs: the file vs the
    tensor): every number is bit-identical (regime, gate, background block, score)."""
    x = _frames(size)
    folder = write_image_folder(tmp_path / "clip", x)
    by_tensor = read_clip(x, long_side=side)
    same_pixels = replace(read_clip(folder, long_side=side), frames=by_tensor.frames,
                          content_mask=by_tensor.content_mask)
    a = score_clip(x, config=_cfg(side), preset="background", device="cpu").to_dict()
    b = score_clip(same_pixels, config=_cfg(side), preset="background", device="cpu").to_dict()
    assert a["backends"]["gate_view"]["source"] == "tensor"
    assert b["backends"]["gate_view"]["source"] == "file"
    assert a["status"] == "ok" and a["regime"] is not None
    assert _numbers(a) == _numbers(b)


def test_score_clips_batch_equals_score_clip_at_a_working_size():
    """A (B, T, C, H, W) batch through score_clips (merged feature stage) gives each clip
    score_clip's numbers, the gate view read from the clip's own row of the batch."""
    x = torch.stack([_frames((96, 128), seed=s) for s in (0, 1)])
    got = score_clips(x, config=_cfg(64), preset="background", device="cpu")
    for k in range(2):
        one = score_clip(x[k], config=_cfg(64), preset="background", device="cpu").to_dict()
        d = got[k].to_dict()
        assert d["backends"]["gate_view"]["source"] == "tensor"
        assert _numbers(d) == _numbers(one)


def test_native_tensors_and_hand_made_clips_keep_no_reference():
    """At native pixels (a tensor's "auto" working size) the working frames are the source's:
    no reference is kept and the view reads them; a Clip built by hand has no source either
    (its view reads its working frames, as before)."""
    x = _frames((96, 128))
    native = read_clip(x, long_side=None)
    assert source_of(native) is None and "source_tensor" not in native.meta
    hand = Clip(frames=x[:, :, :, :64].contiguous(), fps=24.0,
                content_mask=torch.ones(96, 64, dtype=torch.bool),
                frame_indices=torch.arange(6), source_size=(192, 128))
    cfg = load_config(_cfg(64))
    assert source_of(hand) is None and not reads_source(hand, cfg)
    _, info = gate_view_correspondences(hand, parallax_gate_pairs(6), cfg, torch.device("cpu"))
    assert info["source"] == "working frames"
    d = score_clip(x, config=CFG, preset="background", device="cpu").to_dict()
    assert d["backends"]["gate_view"]["source"] == "working frames"


def test_the_reference_is_the_callers_tensor_and_is_never_copied_or_pickled():
    """A resampled tensor clip refers to the caller's tensor (a view of a batch's row, no
    copy), compares equal to the clip read alone, is shared by copies and is dropped by
    pickling (a DataLoader worker's clip then reads its working frames, as a Clip by hand)."""
    batch = torch.stack([_frames((96, 128), seed=s) for s in (0, 1)])
    (c0, c1) = clips_from_tensors(list(batch.unbind(0)), long_side=64)
    alone = clip_from_tensor(batch[1], long_side=64)
    assert source_of(c1).data_ptr() == batch[1].data_ptr() == source_of(alone).data_ptr()
    assert c1.meta == alone.meta and c0.meta != c1.meta
    assert source_of(c1.subclip(torch.tensor([0, 2]))) is source_of(c1)
    assert source_of(copy.deepcopy(c1)) is source_of(c1)
    sent = pickle.loads(pickle.dumps(c1))
    assert source_of(sent) is None and torch.equal(sent.frames, c1.frames)
    assert len(repr(c1.meta["source_tensor"])) < 80  # no values dumped
    grad = batch.float().div(255).requires_grad_()
    assert not source_of(read_clip(grad[0], long_side=64)).requires_grad


def test_working_and_view_pixels_follow_the_pixel_centre_convention():
    """At view / working = 1/2, working pixels 0 and 1 make view pixel 0, whose centre is at
    working x = 0.5: working (0.5, 2.5) -> view (0, 1); at 3/2 working pixel 1 -> view 1.75;
    view_to_working is the exact inverse (the object masks are read where the view matched)."""
    from geocon_torch.gate.view import view_to_working, working_to_view

    xy = torch.tensor([[0.5, 2.5], [10.5, 0.5]], dtype=torch.float64)
    assert working_to_view(xy, (0.5, 0.5)).tolist() == [[0.0, 1.0], [5.0, 0.0]]
    assert working_to_view(torch.tensor([[1.0, 1.0]]), (1.5, 0.5)).tolist() == [[1.75, 0.25]]
    for s in ((0.5, 0.5), (1.5, 0.75), (2.0, 2.0)):
        torch.testing.assert_close(view_to_working(working_to_view(xy, s), s), xy, rtol=0,
                                   atol=1e-12)
