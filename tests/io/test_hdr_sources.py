"""HDR and colour-tagged video sources (audit s26 F2 / F3): every file is read as SDR code values
(8-bit RGB, no tone mapping); a video's ``io`` block records ``color`` (pixel format, bit depth,
transfer, primaries, matrix, range) so an SDR and an HDR row can be told apart, a PQ / HLG
source is scored with a warning, and the frozen-video rule scales its threshold by the
transfer's code-value slope (a moving HDR10 clip is not called frozen). SDR clips keep their
numbers. The clips are written here: lossless ffv1, yuv444p10le, 8 frames of 160x120."""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest

from geocon_torch import score_clip
from geocon_torch.io.integrity import decode_report, decode_verdict
from geocon_torch.io.reader import read_clip
from geocon_torch.io.sampling import FROZEN_MAX_MAD, HDR_MOTION_SLOPE, frozen_max_mad
from geocon_torch.rewards import FROZEN_REASON, reward_from_result
from geocon_torch.synth import render_scene
from helpers import write_ffv1, yuv_frame

av = pytest.importorskip("av")
cv2 = pytest.importorskip("cv2")

H, W, T = 120, 160, 8
#: BT.709 -> BT.2020 primaries (linear RGB, BT.2087)
M709_TO_2020 = np.array([[0.6274, 0.3293, 0.0433], [0.0691, 0.9195, 0.0114],
                         [0.0164, 0.0880, 0.8956]])
#: name -> (transfer, primaries, matrix codes, (Kr, Kb) of the matrix)
TAGS = {"sdr": (1, 1, 1, (0.2126, 0.0722)), "pq": (16, 9, 9, (0.2627, 0.0593)),
        "hlg": (18, 9, 9, (0.2627, 0.0593))}
WARNING = ("source read as SDR code values without tone mapping: geometry scores are "
           "comparable, motion statistics are compressed")


def pq_signal(nits: np.ndarray) -> np.ndarray:
    """SMPTE ST 2084 inverse EOTF: cd/m2 -> PQ signal in [0, 1]."""
    m1, m2 = 2610 / 16384, 2523 / 4096 * 128
    c1, c2, c3 = 3424 / 4096, 2413 / 4096 * 32, 2392 / 4096 * 32
    y = np.clip(np.asarray(nits, np.float64) / 10000.0, 0, 1) ** m1
    return ((c1 + c2 * y) / (1 + c3 * y)) ** m2


def hlg_signal(e: np.ndarray) -> np.ndarray:
    """ARIB STD-B67 OETF: scene light in [0, 1] -> HLG signal in [0, 1]."""
    a = 0.17883277
    b, c = 1 - 4 * a, 0.5 - a * np.log(4 * a)
    e = np.clip(np.asarray(e, np.float64), 0, 1)
    return np.where(e <= 1 / 12, np.sqrt(3 * e), a * np.log(np.maximum(12 * e - b, 1e-12)) + c)


def encode(kind: str, sdr01: np.ndarray) -> np.ndarray:
    """SDR R'G'B' (..., 3) in [0, 1] -> the signal of ``kind``, placed as BT.2408 does: SDR
    white at 203 cd/m2 in PQ, at 75 % in HLG (BT.1886 gamma 2.4, BT.2020 primaries)."""
    if kind == "sdr":
        return sdr01
    lin = (sdr01 ** 2.4) @ M709_TO_2020.T
    return pq_signal(203.0 * lin) if kind == "pq" else hlg_signal(0.2647 * lin)


def write_clip(path: Path, frames01: List[np.ndarray], kind: str) -> Path:
    """Lossless ffv1 yuv444p10le limited range with the colour tags of ``kind``."""
    trc, pri, spc, (kr, kb) = TAGS[kind]
    tags = {"colorspace": spc, "color_primaries": pri, "color_trc": trc, "color_range": 1}
    frames = []
    for rgb in frames01:
        y = kr * rgb[..., 0] + (1 - kr - kb) * rgb[..., 1] + kb * rgb[..., 2]
        ycc = np.stack([64 + 876 * y, 512 + 448 * (rgb[..., 2] - y) / (1 - kb),
                        512 + 448 * (rgb[..., 0] - y) / (1 - kr)])
        codes = np.clip(np.rint(ycc), 0, 1023).astype("<u2")
        frames.append(yuv_frame(list(codes), "yuv444p10le", tags))
    return write_ffv1(path, frames, tags)


def pan(step: float) -> List[np.ndarray]:
    """T SDR frames (H, W, 3) in [0, 1]: the grounded C2 texture panned ``step`` px per frame."""
    base = render_scene("C2", num_frames=1, size=(H, W), seed=0).frames[0]
    base = base.permute(1, 2, 0).numpy().astype(np.float32)
    out = []
    for k in range(T):
        m = np.float32([[1, 0, step * k], [0, 1, 0]])
        moved = cv2.warpAffine(base, m, (W, H), flags=cv2.INTER_LANCZOS4,
                               borderMode=cv2.BORDER_REFLECT)
        out.append(np.clip(moved, 0, 255).astype(np.float64) / 255.0)
    return out


@pytest.fixture(scope="module")
def clips(tmp_path_factory) -> Dict[str, Path]:
    """The same slow pan (0.07 px / frame: 0.96 grey levels in SDR) as SDR, PQ and HLG, and a
    still PQ clip."""
    folder = tmp_path_factory.mktemp("hdr")
    moving, still = pan(0.07), pan(0.0)
    out = {k: write_clip(folder / f"{k}.mkv", [encode(k, f) for f in moving], k) for k in TAGS}
    out["pq_still"] = write_clip(folder / "pq_still.mkv", [encode("pq", f) for f in still], "pq")
    return out


def _io(path: Path):
    clip = read_clip(str(path), long_side=None)
    block = decode_report(clip.meta)
    return clip, block, decode_verdict(block, 0.1)


@pytest.mark.parametrize("kind, transfer, label", [("pq", "smpte2084", "HDR (PQ)"),
                                                   ("hlg", "arib-std-b67", "HDR (HLG)")])
def test_hdr_source_records_color_and_warns(clips, kind, transfer, label):
    _, block, (reason, warnings) = _io(clips[kind])
    assert block["color"] == {"pix_fmt": "yuv444p10le", "bits": 10, "transfer": transfer,
                              "primaries": "bt2020", "matrix": "bt2020nc", "range": "tv"}
    assert reason is None
    assert warnings == [f"{label} {WARNING} (transfer {transfer})"]


def test_sdr_source_records_color_without_warning_and_keeps_its_motion(clips):
    clip, block, (reason, warnings) = _io(clips["sdr"])
    assert block["color"] == {"pix_fmt": "yuv444p10le", "bits": 10, "transfer": "bt709",
                              "primaries": "bt709", "matrix": "bt709", "range": "tv"}
    assert reason is None and warnings == []
    # the numbers before io.color existed
    assert clip.meta["motion"] == {"max_mad": 0.9610590277777777, "pairs": 7, "frozen": False}
    assert {k: block[k] for k in ("decoded_frames", "lost_frames", "truncated")} == {
        "decoded_frames": 8, "lost_frames": 0, "truncated": False}


def test_io_blocks_of_sdr_and_hdr_encodes_differ_only_in_color(clips):
    sdr, pq = _io(clips["sdr"])[1], _io(clips["pq"])[1]
    assert sdr != pq
    assert {k: v for k, v in sdr.items() if k != "color"} == {
        k: v for k, v in pq.items() if k != "color"}


def test_hdr_motion_slopes_are_the_transfer_slopes_at_reference_white():
    """HDR_MOTION_SLOPE = d(signal) / d(SDR signal) at SDR white placed as BT.2408 does."""
    h = 1e-6
    for kind, transfer in (("pq", "smpte2084"), ("hlg", "arib-std-b67")):
        one = np.array([[1.0, 1.0, 1.0]])
        slope = float((encode(kind, one)[0, 0] - encode(kind, one - h)[0, 0]) / h)
        assert slope == pytest.approx(HDR_MOTION_SLOPE[transfer], abs=1e-3)
        assert frozen_max_mad(transfer) == FROZEN_MAX_MAD * HDR_MOTION_SLOPE[transfer]
    assert frozen_max_mad("bt709") == frozen_max_mad(None) == frozen_max_mad("linear") == 0.5


def test_moving_pq_clip_is_not_frozen_and_a_still_one_is(clips):
    moving = read_clip(str(clips["pq"]), long_side=None).meta["motion"]
    still = read_clip(str(clips["pq_still"]), long_side=None).meta["motion"]
    # under 0.5 grey levels (frozen for SDR) but over 0.5 * 0.251 (the PQ threshold)
    assert moving == {"max_mad": pytest.approx(0.42575, abs=1e-4), "pairs": 7, "frozen": False}
    assert still == {"max_mad": 0.0, "pairs": 7, "frozen": True}
    streamed = read_clip(str(clips["pq"]), long_side=None, stream=True).meta["motion"]
    assert streamed == moving


def test_scored_pq_pan_gets_a_reward_and_the_sdr_one_is_unchanged(clips):
    """audit p5_frozen: the same 0.07 px / frame pan, SDR and HDR10."""
    rows = {k: score_clip(str(clips[k]), preset="background",
                          config={"io": {"long_side": None}}).to_dict() for k in ("sdr", "pq")}
    for row in rows.values():
        assert row["status"] == "ok" and row["motion"]["frozen"] is False
    pq = reward_from_result(rows["pq"], "background")
    assert pq.status == "ok" and pq.reason != FROZEN_REASON and pq.reward > 0.9
    assert rows["pq"]["warnings"] == [f"HDR (PQ) {WARNING} (transfer smpte2084)"]
    sdr = reward_from_result(rows["sdr"], "background")
    assert rows["sdr"]["warnings"] == [] and sdr.status == "ok" and sdr.reward > 0.9
    assert rows["sdr"]["motion"] == {"max_mad": 0.9610590277777777, "pairs": 7, "frozen": False}
