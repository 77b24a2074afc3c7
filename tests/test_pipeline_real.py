"""score_clip on the shared real clips, bad input, not_applicable paths and section isolation."""
import torch
import pytest

from geocon_torch import GeoConConfig, score_clip, score_clips
from geocon_torch.errors import InputError, VideoReadError
from geocon_torch.io import clip_from_tensor

CFG = {"features": {"mutual": True}}


def test_hill_three_frames_is_one_homography(shared_data):
    d = score_clip(shared_data / "real" / "hill", config={**CFG, "io": {"long_side": 400}},
                   preset="background").to_dict()
    assert d["status"] == "ok" and d["regime"] == "H" and d["gate"]["decision"] == "H"
    assert d["background"]["ir"] >= 0.97 and d["background"]["pairs"] == 2
    assert d["gate"]["evidence"]["gate_pairs"] == [[0, 2]]


def test_realshort_needs_f(shared_data):
    # At the default working resolution (long side 1024) the parallax of this handheld clip is
    # clear (parallax_excess ~0.30 > 0.27); at 320 px it sinks to the noise floor (~0.12-0.17).
    d = score_clip(shared_data / "real" / "realshort.mp4", config={**CFG, "io": {"stride": 2}},
                   preset="background").to_dict()
    assert d["status"] == "ok" and d["regime"] == "F"
    assert d["background"]["ir"] == d["background"]["ir_f"]


def test_uniform_and_single_frame_clips_are_not_applicable():
    grey = torch.full((4, 3, 64, 96), 128, dtype=torch.uint8)
    d = score_clip(grey, config=CFG, preset="background").to_dict()
    assert d["status"] == "not_applicable" and "too little texture" in d["reason"]
    assert d["background"].get("ir") is None  # never IR = 0
    one = score_clip(torch.randint(0, 255, (1, 3, 64, 96), dtype=torch.uint8),
                     preset="background").to_dict()
    assert one["status"] == "not_applicable" and "no frame pairs" in one["reason"]


@pytest.mark.parametrize("size", [8, 64])  # frames too small for any scale / no texture
def test_external_gate_is_kept_on_early_exits(size):
    """A pose-log decision is made before the features: a clip that stops later still reports
    it (and its backend) instead of an empty gate block."""
    frames = torch.full((3, 3, size, size), 128, dtype=torch.uint8)
    d = score_clip(frames, poses=torch.eye(4), config={"io": {"long_side": None}},
                   preset="background", device="cpu").to_dict()
    assert d["status"] == "not_applicable" and d["regime"] is None
    assert d["gate"]["method"] == "poses" and d["gate"]["decision"] == "H"
    assert d["gate"]["statistic"] == 0.0 and d["backends"]["gate"] == "poses"


def test_bad_input_raises_or_becomes_error(tmp_path):
    missing = tmp_path / "missing.mp4"
    with pytest.raises(VideoReadError):
        score_clip(missing)
    empty = tmp_path / "empty.mp4"
    empty.write_bytes(b"")
    grey = torch.full((3, 3, 48, 64), 100, dtype=torch.uint8)
    out = score_clips([missing, grey, empty], config=CFG, preset="background")
    assert [r.status for r in out] == ["error", "not_applicable", "error"]
    assert "VideoReadError" in out[0].reason and out[0].to_dict()["clip"] == "missing"


def test_failing_section_is_isolated(monkeypatch):
    import geocon_torch.pipeline as pipeline

    def boom(*a, **k):
        raise RuntimeError("flow exploded")

    monkeypatch.setattr(pipeline, "score_foregrounds", boom)
    g = torch.Generator().manual_seed(0)
    frames = torch.randint(0, 255, (3, 3, 64, 96), dtype=torch.uint8, generator=g)
    d = score_clip(frames, config=CFG, preset="geocon").to_dict()
    assert d["foreground"]["status"] == "error" and "flow exploded" in d["foreground"]["reason"]
    assert d["status"] in ("ok", "not_applicable")


def test_worldatlas_preset_reads_its_frames_at_source_resolution(shared_data):
    """score_clip's epipolar block equals the protocol run on the source-resolution clip (the
    working resolution, here an upscale to 1024, must not leak into the 640-px analysis)."""
    from geocon_torch.epipolar import decode_plan
    from geocon_torch.sections.epipolar import epipolar_section
    from geocon_torch.io import read_clip

    path = shared_data / "aigc" / "cogvideox" / "1.mp4"  # 720x480: upscaled by long_side 1024
    got = score_clip(path, preset="worldatlas").to_dict()
    assert got["working_size"] == [682, 1024]
    indices, pairs = decode_plan(49, GeoConConfig().epipolar)
    native = read_clip(path, long_side=None, indices=indices.tolist())
    want = epipolar_section(native, GeoConConfig().epipolar, pairs=pairs)
    assert got["status"] == "ok" and got["epipolar"]["status"] == "ok"
    for key in ("epipolar_error", "epipolar_inlier_rate", "feature_match_coverage", "valid_pairs"):
        assert got["epipolar"][key] == want[key]
    assert got["epipolar"]["analysis_size"] == want["analysis_size"]


def test_sources_that_are_not_videos_get_a_clear_error():
    """A source that is neither a path, a tensor nor a Clip: score_clip raises the reader's
    VideoReadError naming its type (not a TypeError from pathlib), and in a batch it is that
    clip's error result while the others are scored."""
    for bad in (123, None, ["a.mp4", "b.mp4"]):
        with pytest.raises(VideoReadError, match=f"cannot read a {type(bad).__name__}"):
            score_clip(bad, preset="background", device="cpu")
    frames = torch.zeros(3, 3, 32, 32, dtype=torch.uint8)
    res = [r.to_dict() for r in score_clips([frames, 7], preset="background", device="cpu")]
    assert res[0]["status"] == "not_applicable"
    assert res[1]["status"] == "error" and "cannot read a int" in res[1]["reason"]


def test_score_clips_wants_a_list_of_clips(tmp_path):
    """One path, Path, Clip or a non-sequence given to score_clips is an InputError that says
    to use score_clip or a list (a str used to be scored character by character)."""
    frames = torch.zeros(3, 3, 32, 32, dtype=torch.uint8)
    for bad in (str(tmp_path / "ok.mp4"), tmp_path / "ok.mp4", 5,
                clip_from_tensor(frames)):
        with pytest.raises(InputError, match="score_clips takes a list of clips"):
            score_clips(bad, preset="background", device="cpu")
    assert len(score_clips((frames,), preset="background", device="cpu")) == 1


def test_score_clips_names_tensors_by_position():
    """Tensors in score_clips are clip0, clip1, ... whether they are scored or fail (scored
    ones used to be "tensor", failed ones "clip1")."""
    ok = torch.zeros(3, 3, 32, 32, dtype=torch.uint8)
    bad = torch.zeros(3, 3, 1, 32, dtype=torch.uint8)  # too small to read
    res = score_clips([ok, bad, ok], preset="background", device="cpu")
    assert [r.clip for r in res] == ["clip0", "clip1", "clip2"]
    assert res[1].status == "error" and res[0].status == res[2].status == "not_applicable"
