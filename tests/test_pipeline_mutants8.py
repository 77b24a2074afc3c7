"""Pipeline behaviour pinned by mutation testing round 8: which files and folders are read with
frames decoded on demand (the io.stream_min_frames boundary, io.stride rounded up), the
``motion`` record of a clip (its Epipolar-DPO sampling only when read at that rate, never for
a Clip input), the config a result is recorded under (every machine-dependent "auto" pinned,
whichever the caller set) and the path of a clip that could not be read."""
from __future__ import annotations

import pytest
import torch

import geocon_torch.pipeline as pipeline
from geocon_torch.config import GeoConConfig
from geocon_torch.io import read_clip
from geocon_torch.pipeline import (pinned_config, result_motion, score_clip, score_clips,
                                   streams_frames)


def _folder(tmp_path, n):
    """A folder of ``n`` image files (never decoded: streams_frames only counts them)."""
    for k in range(n):
        (tmp_path / f"frame{k:03d}.png").write_bytes(b"")
    return tmp_path


def _io(**io):
    return GeoConConfig().replace(io=io)


def test_stream_min_frames_is_a_strict_bound(tmp_path):
    """A folder streams when it holds *more* than io.stream_min_frames frames: 5 files stream
    under a limit of 4, not under 5; null never streams."""
    folder = _folder(tmp_path, 5)
    assert streams_frames(folder, _io(stream_min_frames=4)) is True
    assert streams_frames(folder, _io(stream_min_frames=5)) is False
    assert streams_frames(str(folder), _io(stream_min_frames=None)) is False


def test_stride_rounds_the_frame_count_up_and_max_frames_caps_it(tmp_path):
    """io.stride 2 over 5 files reads frames 0, 2, 4: 3 frames (ceil, not 5 // 2 = 2), so a
    limit of 2 streams; io.max_frames 2 caps them back under it."""
    folder = _folder(tmp_path, 5)
    assert streams_frames(folder, _io(stride=2, stream_min_frames=2)) is True
    assert streams_frames(folder, _io(stride=2, stream_min_frames=3)) is False
    assert streams_frames(folder, _io(stride=2, max_frames=2, stream_min_frames=2)) is False


def test_result_motion_keeps_the_sampled_record_only_at_the_asked_rate():
    """motion["epipolar_dpo"] is the reader's sampled record when it was measured at the
    section's rate, absent at another rate or without the section."""
    sampled = {"every": 10, "max_mad": 3.0, "pairs": 2, "frozen": False}
    meta = {"motion": {"max_mad": 4.0, "pairs": 5, "frozen": False, "sampled": sampled}}
    assert result_motion(meta, 10) == {"max_mad": 4.0, "pairs": 5, "frozen": False,
                                       "epipolar_dpo": sampled}
    assert result_motion(meta, 15) == {"max_mad": 4.0, "pairs": 5, "frozen": False}
    assert result_motion(meta, None) == {"max_mad": 4.0, "pairs": 5, "frozen": False}
    assert result_motion({}, 10) is None


def test_a_clip_input_records_no_sampled_motion(monkeypatch):
    """A Clip read at the Epipolar-DPO rate and scored with that preset records the motion of
    its frames but no motion["epipolar_dpo"]: the section samples a Clip by its own positions.
    A tensor scored the same way records it."""
    monkeypatch.setattr(pipeline, "epipolar_dpo_block",
                        lambda *a, **k: {"status": "ok", "value": 1.0})
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 255, (16, 3, 24, 32), dtype=torch.uint8, generator=g)
    clip = read_clip(frames, long_side=None, motion_every=15)
    assert clip.meta["motion"]["sampled"]["every"] == 15
    got = score_clip(clip, preset="epipolar-dpo", device="cpu").to_dict()
    assert got["status"] == "ok" and set(got["motion"]) == {"max_mad", "pairs", "frozen"}
    tensor = score_clip(frames, preset="epipolar-dpo", device="cpu").to_dict()
    assert tensor["motion"]["epipolar_dpo"]["every"] == 15


def test_every_auto_is_pinned_when_only_some_are_set():
    """A config that names its features backend but leaves epipolar.implementation and
    foreground.flow on "auto" still records the CPU's choices for those: one hash, one meaning
    (leaving them "auto" would key a CPU row and a GPU row, other numbers, the same)."""
    cfg = pinned_config({"features": {"backend": "opencv-sift"}}, "cpu")
    assert cfg.features.backend == "opencv-sift"
    assert cfg.epipolar.implementation == "opencv"
    assert cfg.foreground.flow in ("torch-lk", "raft_small")
    both = pinned_config({"features": {"backend": "opencv-sift"},
                          "epipolar": {"implementation": "opencv"}}, "cpu")
    assert both.foreground.flow == cfg.foreground.flow and both.config_hash() == cfg.config_hash()


def test_a_clip_that_cannot_be_read_keeps_its_path(tmp_path):
    """score_clips' error row of an unreadable file records the file's path (and its stem as
    the clip name); a tensor's error row has no path."""
    missing = tmp_path / "gone.mp4"
    bad = torch.zeros(3, 3, 1, 32, dtype=torch.uint8)  # too small to read
    got = score_clips([missing, str(missing), bad], preset="background", device="cpu")
    assert [r.status for r in got] == ["error"] * 3
    assert [r.to_dict()["path"] for r in got] == [str(missing), str(missing), None]
    assert [r.clip for r in got] == ["gone", "gone", "clip2"]


def test_a_clip_failing_in_the_batch_background_records_the_batch_config(monkeypatch):
    """The error row of a clip whose batched background step raised is recorded under the
    config (and hash) its batch was scored with, like every other row of the call."""
    pytest.importorskip("cv2")
    from geocon_torch.features import opencv_sift
    from geocon_torch.synth import grounded_clip

    detect = opencv_sift.OpenCVSIFT.detect

    def bad_detect(self, img, *args, **kwargs):
        if (img[:4, :4] == 201).all():
            raise RuntimeError("odd frame")
        return detect(self, img, *args, **kwargs)

    monkeypatch.setattr(opencv_sift.OpenCVSIFT, "detect", bad_detect)
    good = grounded_clip("C3", num_frames=4, size=(64, 96), seed=0).frames
    odd = good.clone()
    odd[:, :, :12, :12] = 201
    cfg = {"io": {"long_side": None}, "features": {"backend": "opencv-sift"}}
    got = score_clips([good, odd], config=cfg, preset="background", device="cpu")
    assert [r.status for r in got] == ["ok", "error"] and got[1].reason == "RuntimeError: odd frame"
    assert got[1].config == got[0].config and got[1].config_hash == got[0].config_hash
    assert got[1].clip == "clip1"


def test_optional_blocks_are_absent_unless_scored():
    """to_dict() writes the foreground / epipolar / epipolar_dpo blocks only when the preset
    scored them (a background row has no such keys, not null ones)."""
    from geocon_torch.result import ClipResult

    d = ClipResult(clip="x").to_dict()
    assert not {"foreground", "epipolar", "epipolar_dpo"} & set(d)
    d = ClipResult(clip="x", foreground={"status": "ok"}, epipolar_dpo={"status": "ok"}).to_dict()
    assert d["foreground"] == {"status": "ok"} and d["epipolar_dpo"] == {"status": "ok"}
    assert "epipolar" not in d


def test_a_result_status_outside_the_schema_is_refused():
    """ClipResult (and so from_dict of a stored row) accepts only ok / not_applicable / error."""
    from geocon_torch.errors import InputError
    from geocon_torch.result import ClipResult

    for bad in ("done", "OK", None):
        with pytest.raises(InputError, match="status must be one of"):
            ClipResult(clip="x", status=bad)
        with pytest.raises(InputError, match="status must be one of"):
            ClipResult.from_dict({"schema_version": "3.0", "clip": "x", "status": bad})
    assert ClipResult(clip="x", status="not_applicable").status == "not_applicable"


class _Eval:
    """A pickle payload calling eval (refused by a weights_only load; never run)."""

    def __reduce__(self):
        return (eval, ("1 + 1",))


def test_a_refused_global_is_named_without_torchs_unpickler_prefix(tmp_path):
    """A checkpoint whose pickle needs a global the safe load refuses: the CheckpointError is
    the file, "a safe (weights_only) load refuses it: " and torch's reason itself, without
    torch's "Weights only load failed." / "WeightsUnpickler error:" wording around it."""
    from geocon_torch.checkpoints import load_weights_only
    from geocon_torch.errors import CheckpointError

    path = tmp_path / "eval.pt"
    torch.save({"model": _Eval()}, path)
    with pytest.raises(CheckpointError) as info:
        load_weights_only(path, "X")
    assert str(info.value) == (f"X checkpoint {path} could not be read: a safe (weights_only) "
                               f"load refuses it: Unsupported global: GLOBAL eval was not an "
                               f"allowed global by default.")
