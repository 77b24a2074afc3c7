"""Lens undistortion input ``io.lens`` (audit s31 camera F1 / F4): a rigid pan filmed through a
mildly barrel-distorted lens was gated U -> F, failed ``pass_calibrated`` on the GE_H bound and
scored higher. With the lens given, every path that turns pixels into keypoints sees the
undistorted frames (OpenCV's model, checked against ``cv2.undistort``), the config hash of a
config without a lens is unchanged, and the pan comes back H and passing."""
from __future__ import annotations

import math
import warnings

import cv2
import numpy as np
import pytest
import torch

from geocon_torch import ConfigError, GeoConConfig, load_config, score_clip, score_clips
from geocon_torch.config import LensConfig
from geocon_torch.gate.view import _read_view
from geocon_torch.io import clip_from_tensor, read_clip, tensor_frames
from geocon_torch.io.integrity import decode_report
from geocon_torch.io.lens import (Lens, as_lens, camera_at, distorted_positions,
                                  undistort_clip_masks, undistort_frames, undistort_mask)
from geocon_torch.io.resize import working_size
from geocon_torch.sections.epipolar import native_tensor_clips
from geocon_torch.synth import render_scene

H, W = 192, 256
F_PX = 0.9 * W  # the renders' focal length, px of the 256 x 192 frame


def _texture(h: int = H, w: int = W, seed: int = 0) -> np.ndarray:
    """(h, w, 3) uint8: smooth random texture (bilinear kernels agree on it)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, (h // 8, w // 8, 3), dtype=np.uint8)
    return cv2.GaussianBlur(cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC), (0, 0), 1.0)


def _chw(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(image).permute(2, 0, 1).contiguous()


# (stated size or None, fx, fy, cx, cy, coefficients)
CASES = [(None, 230.0, 230.0, 127.5, 95.5, (-0.3, 0.1, 0.0, 0.0, 0.0)),
         (None, 200.0, 210.0, 130.0, 90.0, (-0.2, 0.05, 0.01, -0.005, 0.02)),
         (None, 230.0, 230.0, 127.5, 95.5, (0.15, 0.0, 0.0, 0.0, 0.0)),
         ((512, 384), 460.0, 470.0, 259.0, 187.0, (-0.25, 0.04, -0.004, 0.006, 0.0))]


@pytest.mark.parametrize("case", CASES, ids=["barrel", "tangential", "pincushion", "scaled"])
def test_undistort_frames_matches_cv2_undistort(case):
    size, fx, fy, cx, cy, k = case
    image = _texture()
    if size is not None:  # the intrinsics of a 2x frame, scaled with the pixel-centre rule
        s = W / size[0]
        K = np.array([[fx * s, 0, (cx + 0.5) * s - 0.5], [0, fy * s, (cy + 0.5) * s - 0.5],
                      [0, 0, 1]])
    else:
        K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]])
    ref = cv2.undistort(image, K, np.array(k))
    lens = Lens(fx, fy, cx, cy, size, tuple(float(v) for v in k))
    got = undistort_frames(_chw(image)[None].expand(3, -1, -1, -1).contiguous(), lens)
    assert got.shape == (3, 3, H, W) and got.dtype == torch.uint8
    assert torch.equal(got[0], got[2])  # per frame, whatever the batch
    diff = np.abs(got[0].permute(1, 2, 0).numpy().astype(int) - ref.astype(int)).max(-1)
    # interior: the pixels whose source lies 1 px or more inside the frame (every pixel but
    # the black corners of the pincushion lens and their edge)
    pos = distorted_positions(camera_at(as_lens(lens), working_size(H, W, None)),
                              lens.coefficients, (H, W)).numpy()
    inner = ((pos[..., 0] >= 1) & (pos[..., 0] <= W - 2) & (pos[..., 1] >= 1)
             & (pos[..., 1] <= H - 2))
    assert inner.mean() > 0.85 and diff[inner].max() <= 1, diff[inner].max()
    assert (diff <= 1).mean() >= 0.99  # the edge of the black corners too (0 outside, as cv2)


def test_pincushion_corners_are_black_and_out_of_the_content_mask():
    x = torch.from_numpy(np.full((2, H, W, 3), 200, np.uint8)).permute(0, 3, 1, 2)
    lens = {"fx": 200.0, "k1": 0.3}
    clip = read_clip(x.contiguous(), long_side=None, lens=lens)
    assert clip.frames[:, :, 0, 0].eq(0).all() and clip.frames[:, :, H // 2, W // 2].eq(200).all()
    mask = clip.content_mask
    assert not mask[0, 0] and not mask[-1, -1]
    assert mask[H // 2, W // 2] and 0.5 < clip.meta["content_fraction"] < 1.0
    # every pixel kept by the mask has its full bilinear footprint inside the source frame
    assert clip.frames[0, 0][mask].min() == 200
    rec = clip.meta["lens"]
    assert rec["undistorted"] and rec["outside_fraction"] > 0 and rec["coefficients"][0] == 0.3
    assert decode_report(clip.meta)["lens"] == rec
    assert "lens" not in decode_report(read_clip(x.contiguous(), long_side=None).meta)


def test_zero_distortion_is_no_lens_and_frames_stay_bit_identical():
    x = _chw(_texture())[None].repeat(3, 1, 1, 1)
    assert as_lens(None) is None and as_lens({"fx": 300.0, "cx": 10.0}) is None
    assert as_lens(LensConfig()) is None
    assert undistort_frames(x, {"fx": 300.0}) is x
    plain, zero = read_clip(x, long_side=128), read_clip(x, long_side=128, lens={"fx": 300.0})
    assert torch.equal(plain.frames, zero.frames) and "lens" not in zero.meta
    assert torch.equal(plain.content_mask, zero.content_mask)


def test_config_validation_and_hash():
    base = GeoConConfig()
    presets = ("geocon", "background", "worldatlas", "gvgc", "epipolar-dpo", "all")
    off = [load_config({"io": {"lens": None}, "preset": p}) for p in presets]
    assert [c.config_hash() for c in off] == [GeoConConfig(preset=p).config_hash()
                                              for p in presets]
    assert base.config_hash() == "6b6bcba0c376cac8"  # as pinned in test_configcal_fixes30
    assert "lens" not in base.protocol_dict()["io"] and base.to_dict()["io"]["lens"]["k1"] == 0
    lens = {"fx": F_PX, "width": W, "height": H, "distortion": [-0.1]}
    cfg = load_config({"io": {"lens": lens}})
    assert cfg.io.lens.k1 == -0.1 and cfg.io.lens.k2 == 0.0 and cfg.io.lens.fx == F_PX
    assert cfg.config_hash() != base.config_hash()
    assert load_config(cfg.to_dict()).config_hash() == cfg.config_hash()
    other = load_config({"io": {"lens": dict(lens, distortion=[-0.1, 0.01])}})
    assert other.config_hash() != cfg.config_hash()
    assert load_config({"io": {"lens": {"size": [W, H], "fx": F_PX, "k1": -0.1}}}) == cfg
    bad = [({"fx": float("nan"), "k1": -0.1}, r"^io.lens.fx must be a positive number or null"),
           ({"fx": 0, "k1": -0.1}, r"^io.lens.fx must be a positive number"),
           ({"fx": 100, "fy": -1.0}, r"^io.lens.fy must be a positive number"),
           ({"fx": 100, "k1": float("inf")}, r"^io.lens.k1 must be a number"),
           ({"fx": 100, "distortion": [0.1] * 6}, r"^io.lens.distortion must be a list of 1 to 5"),
           ({"fx": 100, "distortion": []}, r"^io.lens.distortion must be a list of 1 to 5"),
           ({"fx": 100, "distortion": 0.1}, r"^io.lens.distortion must be a list"),
           ({"fx": 100, "size": [W]}, r"^io.lens.size must be a list of 2 ints"),
           ({"fx": 100, "distortion": [0.1], "k1": 0.2}, "are both given"),
           ({"fx": 100, "k4": 0.1}, r"unknown config key config.io.lens.k4"),
           ({"k1": -0.1}, r"^io.lens sets distortion \(k1 = -0.1\) but no focal length"),
           ({"fx": 100, "k1": -0.1, "width": W}, r"^io.lens.width and io.lens.height go together"),
           ({"fx": 100, "cx": 300.0, "width": W, "height": H}, r"^io.lens.cx must lie inside")]
    for value, message in bad:
        with pytest.raises(ConfigError, match=message):
            load_config({"io": {"lens": value}})
    with pytest.raises(ConfigError, match="io.lens must be a mapping"):
        load_config({"io": {"lens": [1.0]}})
    with pytest.raises(ConfigError, match="no focal length"):  # the reader checks it too
        read_clip(torch.zeros(2, 3, 8, 8, dtype=torch.uint8), lens={"k1": 0.1})


def test_intrinsics_follow_the_working_size_and_refuse_another_aspect():
    lens = as_lens({"fx": 1000.0, "cx": 959.5, "cy": 539.5, "width": 1920, "height": 1080,
                    "k1": -0.1})
    fx, fy, cx, cy = camera_at(lens, working_size(720, 1280, 640))  # 1280x720 -> 640x360
    assert (fx, fy, cx, cy) == pytest.approx((1000 / 3, 1000 / 3, 319.5, 179.5))
    with pytest.raises(ConfigError, match="stated for 1920 x 1080 px frames"):
        camera_at(lens, working_size(480, 640, None))


def test_streamed_eager_folder_and_tensor_reads_agree(tmp_path):
    frames = [_texture(seed=s) for s in range(4)]
    for k, image in enumerate(frames):
        cv2.imwrite(str(tmp_path / f"{k:03d}.png"), image[..., ::-1])
    x = torch.stack([_chw(f) for f in frames])
    lens = {"fx": 220.0, "k1": -0.2, "p1": 0.003}
    eager = read_clip(tmp_path, long_side=None, lens=lens)
    streamed = read_clip(tmp_path, long_side=None, lens=lens, stream=True)
    tensor = read_clip(x, long_side=None, lens=lens)
    assert torch.equal(eager.frames, streamed.frames[:]) and torch.equal(eager.frames,
                                                                         tensor.frames)
    assert torch.equal(eager.content_mask, streamed.content_mask)
    assert torch.equal(eager.content_mask, tensor.content_mask)
    assert eager.meta["lens"] == streamed.meta["lens"] == tensor.meta["lens"]
    assert torch.equal(tensor_frames(x[None], lens=lens)[0], tensor.frames)
    assert not torch.equal(eager.frames, read_clip(tmp_path, long_side=None).frames)


def test_gate_view_epipolar_natives_and_given_masks_see_the_lens():
    x = torch.stack([_chw(_texture(seed=s)) for s in range(4)])
    cfg = load_config({"io": {"lens": {"fx": 220.0, "k1": -0.2}}})
    clip = clip_from_tensor(x, long_side=128, lens=cfg.io.lens)  # resampled: a TensorSource
    view, _, origin = _read_view(clip, torch.tensor([[0, 3]]), 256, cfg)
    assert origin == "tensor" and view.meta["lens"]["camera_px"][0] == pytest.approx(220.0)
    assert torch.equal(view.frames, read_clip(x[[0, 3]], long_side=None, lens=cfg.io.lens).frames)
    opts = {"long_side": None, "stride": 1, "max_frames": None,
            "letterbox_threshold": 16 / 255, "letterbox_min_fraction": 0.02}
    (native, _), = native_tensor_clips(x[None], cfg, opts)
    assert native.meta["lens"]["undistorted"]
    assert clip.size == (96, 128)
    masks = torch.zeros(4, 1, 96, 128, dtype=torch.bool)
    masks[:, :, :8] = True  # the top rows: barrel undistortion pulls them towards the centre
    moved = undistort_clip_masks(masks, clip)
    assert torch.equal(moved, undistort_mask(masks, cfg.io.lens, working_size(H, W, 128)))
    assert not torch.equal(moved, masks) and moved[:, :, :6, 64].all()
    assert not moved[:, :, 7, 64].any()
    plain = clip_from_tensor(x, long_side=128)
    assert undistort_clip_masks(masks, plain) is masks


def _distorted_pan(k1: float, frames: int = 10, rate: float = 3.2) -> torch.Tensor:
    """The audit's pan (C2, 1.5x wider render, the 256 x 192 renders' focal length) seen through
    a Brown lens (k1, OpenCV's units): each distorted pixel samples the render at its
    undistorted position (the forward model inverted by fixed-point iteration)."""
    wide = render_scene("C2", motion="pan", rate=rate, num_frames=frames, size=(288, 384),
                        seed=0, focal_scale=F_PX / 384).frames.permute(0, 2, 3, 1).numpy()
    ys, xs = np.mgrid[0:H, 0:W].astype(np.float64)
    xd, yd = (xs - (W - 1) / 2) / F_PX, (ys - (H - 1) / 2) / F_PX
    x, y = xd.copy(), yd.copy()
    for _ in range(50):
        x, y = xd / (1 + k1 * (x * x + y * y)), yd / (1 + k1 * (x * x + y * y))
    assert np.abs(x * (1 + k1 * (x * x + y * y)) - xd).max() < 1e-9
    mx, my = (x * F_PX + 191.5).astype(np.float32), (y * F_PX + 143.5).astype(np.float32)
    out = np.stack([cv2.remap(f, mx, my, cv2.INTER_LINEAR) for f in wide])
    return torch.from_numpy(out).permute(0, 3, 1, 2).contiguous()


def test_distorted_pan_comes_back_h_and_passing_with_the_lens():
    """10 frames of a 3.2 deg/frame pan (28.8 deg), k1 = -0.1 (OpenCV's units; -0.048 at the
    half diagonal): without the lens U -> F, "Complex", pass_calibrated False (GE_H) and a
    higher score than the clean pan; with it H, Rotation-dominant, passing."""
    k1 = -0.1
    x = _distorted_pan(k1)
    lens = {"fx": F_PX, "width": W, "height": H, "distortion": [k1]}
    raw = score_clip(x, preset="background", device="cpu").to_dict()
    fixed = score_clip(x, preset="background", config={"io": {"lens": lens}},
                       device="cpu").to_dict()
    assert (raw["regime"], raw["background"]["pass_calibrated"]) == ("F", False)
    assert (fixed["regime"], fixed["background"]["pass_calibrated"]) == ("H", True)
    assert fixed["behaviour"] == "Rotation-dominant" and fixed["status"] == "ok"
    assert fixed["score"] < raw["score"]  # the misgating no longer pays
    assert fixed["io"]["lens"]["camera_px"] == pytest.approx([F_PX, F_PX, 127.5, 95.5])
    assert fixed["config"]["io"]["lens"]["k1"] == k1
    assert math.isclose(fixed["io"]["lens"]["outside_fraction"], 0.0)  # barrel: no black


# ---------------------------------------------------------------- lens-use audit s31 (F1-F5)

BASE_HASH = "6b6bcba0c376cac8"  # a config without a lens (test_config_validation_and_hash)


def test_a_lens_that_does_not_distort_keeps_the_hash_of_no_lens():
    """F2: intrinsics with every coefficient 0 leave the frames bit-identical and so keep the
    hash of a config without a lens; the values given stay in ``to_dict`` (round trip)."""
    for lens in ({"fx": 1450.0}, {"fx": 1450.0, "distortion": [0, 0, 0, 0, 0]},
                 {"size": [1920, 1080], "fx": 1450.0, "cx": 959.5, "cy": 539.5, "k1": 0.0},
                 {"k1": -0.0, "fy": 3.0}):
        cfg = load_config({"io": {"lens": lens}})
        assert cfg.config_hash() == BASE_HASH, lens
        assert "lens" not in cfg.protocol_dict()["io"]
        back = load_config(cfg.to_dict())
        assert back == cfg and back.config_hash() == BASE_HASH
    kept = load_config({"io": {"lens": {"fx": 1450.0, "size": [1920, 1080]}}}).to_dict()
    assert kept["io"]["lens"]["fx"] == 1450.0 and kept["io"]["lens"]["width"] == 1920
    for p in ("background", "all"):  # with a preset too
        cfg = load_config({"io": {"lens": {"fx": 1450.0}}, "preset": p})
        assert cfg.config_hash() == GeoConConfig(preset=p).config_hash()
    bent = load_config({"io": {"lens": {"fx": 1450.0, "p2": 1e-4}}})
    assert bent.config_hash() != BASE_HASH and "lens" in bent.protocol_dict()["io"]


def _gray(n: int = 2) -> torch.Tensor:
    return _chw(_texture())[None].repeat(n, 1, 1, 1)


def test_a_principal_point_outside_the_source_frame_is_refused():
    """F1: with io.lens.size left out the intrinsics are px of the source frame; a principal
    point outside it (a 1920 x 1080 calibration without its size) is a ConfigError naming the
    sizes, and the clip an error row."""
    x = _gray()
    lens = {"fx": 1450.0, "cx": 959.5, "cy": 539.5, "k1": -0.1}
    with pytest.raises(ConfigError, match=r"io.lens.cx = 959.5 lies outside the 256 x 192 px "
                                          r"source frame .*give io.lens.size"):
        read_clip(x, long_side=None, lens=lens)
    with pytest.raises(ConfigError, match=r"io.lens.cy = -3 lies outside the 256 x 192 px"):
        read_clip(x, long_side=128, lens={"fx": 200.0, "cy": -3.0, "k1": -0.1})
    with pytest.raises(ConfigError, match="lies outside"):  # a Lens built by hand too
        camera_at(Lens(200.0, 200.0, 300.0, None, None, (-0.1, 0, 0, 0, 0)),
                  working_size(H, W, None))
    edge = camera_at(Lens(200.0, 200.0, -0.5, H - 0.5, None, (-0.1, 0, 0, 0, 0)),
                     working_size(H, W, 128))
    assert edge[2] == pytest.approx(-0.5) and edge[3] == pytest.approx(96 - 0.5)
    with pytest.raises(ConfigError, match="lies outside"):  # one clip: raised, as the aspect
        score_clip(_gray(3), preset="background", device="cpu", config={"io": {"lens": lens}})
    ok, r = score_clips([_gray(3), _gray(3)[..., :144, :]], preset="background", device="cpu",
                        config={"io": {"lens": {"fx": 200.0, "cy": 160.0, "k1": -0.1}}})
    assert r.status == "error" and "cy = 160 lies outside the 256 x 144 px source" in r.reason
    assert ok.status != "error"  # 256 x 192: cy 160 lies inside


def test_a_lens_that_blacks_out_much_of_the_frame_warns():
    """F1: more than 10 % of the undistorted frame outside the source (a lens stated for
    another camera or size) is a UserWarning naming the fraction and the lens."""
    x = _gray()
    with pytest.warns(UserWarning, match=r"io.lens leaves 34 % of the 256 x 192 working frame "
                                         r"black .*k1 = 0.3"):
        clip = read_clip(x, long_side=None, lens={"fx": 120.0, "k1": 0.3})
    assert 0.335 < clip.meta["lens"]["outside_fraction"] < 0.345
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a mild lens: no warning
        read_clip(x, long_side=None, lens={"fx": 230.4, "k1": 0.15})
        read_clip(x, long_side=None, lens={"fx": 230.4, "k1": -0.3})


def test_a_polynomial_that_folds_over_inside_the_frame_is_refused():
    """F4: r_d(r) = r (1 + k1 r^2 + k2 r^4 + k3 r^6) must increase out to the frame's corners
    (else the corners show a mirrored copy of inner texture)."""
    x = _gray()
    corner = math.hypot(128.0, 96.0)  # the frame's edge corners, at every working size
    for fx, k1 in ((0.5 * W, -0.35), (0.9 * W, -0.9)):
        fold = math.sqrt(1 / (3 * -k1))
        msg = (rf"io.lens distortion folds over inside the frame: r_d stops increasing at r = "
               rf"{fold:.3f} \(normalised\), the frame's corners reach r = {corner / fx:.3f}")
        with pytest.raises(ConfigError, match=msg):
            read_clip(x, long_side=None, lens={"fx": fx, "k1": k1})
        with pytest.raises(ConfigError, match=msg):  # the same numbers at any working size
            read_clip(x, long_side=64, lens={"fx": fx, "k1": k1})
    # the same k1 with a k2 that keeps r_d increasing, and a fold beyond the corners: accepted
    read_clip(x, long_side=None, lens={"fx": 0.5 * W, "k1": -0.35, "k2": 0.1})
    read_clip(x, long_side=None, lens={"fx": 0.9 * W, "k1": -0.45})  # fold at r 0.86 > 0.694
    with pytest.raises(ConfigError, match="folds over"):  # k3 alone: 1 - 7 * 0.5 r^6
        read_clip(x, long_side=None, lens={"fx": 0.5 * W, "k3": -0.5})
    r, = score_clips([_gray(3)], preset="background", device="cpu",
                     config={"io": {"lens": {"fx": 0.5 * W, "k1": -0.35}}})
    assert r.status == "error" and "folds over inside the frame" in r.reason


@pytest.mark.parametrize("turns", [1, 2, 3])
def test_display_lens_is_the_coded_lens_turned(turns):
    """F3: the mapping the rotation error states (90 / 270 degrees counterclockwise; 180) turns a
    calibration of the coded frames into that of the displayed ones: undistorting the turned
    frames with it gives the turned undistorted frames."""
    from geocon_torch.io.lens import display_lens

    coded = Lens(220.0, 235.0, 120.0, 101.0, (W, H), (-0.2, 0.04, 0.006, -0.004, 0.01))
    shown = display_lens(coded, turns)
    if turns % 2:
        assert shown.size == (H, W) and (shown.fx, shown.fy) == (235.0, 220.0)
    x = _chw(_texture())[None]
    want = torch.rot90(undistort_frames(x, coded), turns, (-2, -1))
    got = undistort_frames(torch.rot90(x, turns, (-2, -1)).contiguous(), shown)
    assert (got.int() - want.int()).abs().max() <= 1


def test_rotated_video_lens_error_names_the_rotation_and_the_record_its_orientation(tmp_path):
    """F3: the lens applies to the frames as displayed; a calibration of the coded (sensor)
    orientation of a portrait file is refused with the rotation and the turned values named,
    and ``meta["lens"]`` records the display rotation."""
    from helpers import encode_rgb

    img = _texture(360, 640)
    p = encode_rgb(tmp_path / "portrait.mp4", [img] * 3, rotation=90)
    lens = {"size": [1920, 1080], "fx": 1450.0, "cx": 970.0, "cy": 530.0,
            "distortion": [-0.1, 0.02, 0.001, -0.002]}
    with pytest.raises(ConfigError) as err:
        read_clip(str(p), long_side=None, lens=lens)
    text = str(err.value)
    assert "turned 90 degrees for display" in text and "360 x 640" in text
    assert ("io.lens.size [1080, 1920], fx 1450, fy 1450, cx 530, cy 949, p1 0.002, p2 0.001"
            in text), text
    turned = {"size": [1080, 1920], "fx": 1450.0, "cx": 530.0, "cy": 949.0,
              "distortion": [-0.1, 0.02, 0.002, 0.001]}
    clip = read_clip(str(p), long_side=None, lens=turned)
    assert clip.meta["lens"]["display_rotation"] == 90
    tensor = read_clip(_gray(), long_side=None, lens={"fx": 230.4, "k1": -0.1})
    assert tensor.meta["lens"]["display_rotation"] == 0


def test_explain_and_card_say_the_frames_were_undistorted(tmp_path):
    """F5: a person reading ``geocon explain`` or the audit card learns of the lens."""
    from geocon_torch.report import audit_card
    from geocon_torch.report.explain import explain_result

    lens = {"fx": F_PX, "k1": -0.1}
    r = score_clip(_distorted_pan(-0.1, frames=4), preset="background", device="cpu",
                   config={"io": {"lens": lens}}).to_dict()
    text = explain_result(r, evidence=False)
    line = [s for s in text.splitlines() if "undistorted" in s]
    assert len(line) == 1 and "k1 -0.1" in line[0] and "fx 230.4" in line[0], text
    card = audit_card({"clip_id": "x", "result": r}, tmp_path, draw=False)
    assert "frames undistorted" in card
    plain = score_clip(_distorted_pan(-0.1, frames=4), preset="background",
                       device="cpu").to_dict()
    assert "undistorted" not in explain_result(plain, evidence=False)
    assert "undistorted" not in audit_card({"clip_id": "x", "result": plain}, tmp_path,
                                           draw=False)
