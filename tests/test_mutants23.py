"""Mutation round 23: descriptor matching (brute-force / OpenCV oracles), forward-backward
consistency (closed-form flows), clip ids and file keys (hashlib), video probing (synthetic
videos) and the numeric-environment record (a stubbed OpenCV)."""
from __future__ import annotations

import hashlib
import math
import platform
import sys
import types
from pathlib import Path

import av
import numpy as np
import pytest
import torch
from helpers import stream_copy_trim

from geocon_torch import _numeric_env
from geocon_torch.bench.ids import derive_clip_ids, file_key
from geocon_torch.errors import InputError, ShapeError
from geocon_torch.features import match_descriptors, ratio_match
from geocon_torch.features.matching import _chunk_size
from geocon_torch.flow.consistency import forward_backward_error, forward_backward_reliability
from geocon_torch.io import probe_video
from geocon_torch.io.writer import write_video
from geocon_torch.types import Keypoints

# --- matching -----------------------------------------------------------------------------


def _ref_match(d1, m1, d2, m2, ratio, mutual):
    """Brute-force 2-NN ratio matching of one pair (float64, OpenCV conventions): the first
    index wins ties; a non-finite descriptor is padding; ratio 1 when the second is 0. Also
    the keypoints whose mutual check meets a double tie (an earlier keypoint i' of frame i as
    close to j, whose own nearest neighbour is another j' at the same distance): OpenCV's
    crossCheck rejects i there, ratio_match keeps it (reported in round 23), not compared."""
    d1, d2 = np.asarray(d1, np.float64), np.asarray(d2, np.float64)
    v1 = np.asarray(m1) & np.isfinite((d1 * d1).sum(-1))
    v2 = np.asarray(m2) & np.isfinite((d2 * d2).sum(-1))
    n1 = len(d1)
    nn, rat, ok = np.zeros(n1, np.int64), np.ones(n1), np.zeros(n1, bool)
    amb = np.zeros(n1, bool)
    cols = np.flatnonzero(v2)
    if len(cols) < 2:
        return nn, rat, ok, amb
    rows = np.flatnonzero(v1)
    sq = ((d1[:, None, :] - d2[None, :, :]) ** 2).sum(-1)
    for i in rows:
        dist = sq[i, cols]
        k = int(np.argmin(dist))
        first = math.sqrt(dist[k])
        second = math.sqrt(np.min(np.delete(dist, k)))
        r = first / second if second > 0 else 1.0
        if not r < ratio:
            continue
        j = int(cols[k])
        back = int(rows[np.argmin(sq[rows, j])])
        if mutual and back != i:
            amb[i] = sq[back, j] == sq[i, j] and int(cols[np.argmin(sq[back, cols])]) != j
            continue
        nn[i], rat[i], ok[i] = j, r, True
    return nn, rat, ok, amb


def _int_sets(seed, p=7, n1=9, n2=8, d=3, high=3):
    """Small-integer float64 descriptors (exact distances, many ties and duplicates), padded
    rows with non-zero descriptors, frames with 0 / 1 / 2 valid keypoints."""
    g = torch.Generator().manual_seed(seed)
    d1 = torch.randint(0, high, (p, n1, d), generator=g).double()
    d2 = torch.randint(0, high, (p, n2, d), generator=g).double()
    m1 = torch.rand(p, n1, generator=g) > 0.25
    m2 = torch.rand(p, n2, generator=g) > 0.25
    m2[0] = False
    m2[1] = False
    m2[1, 3] = True  # one valid neighbour: no ratio
    m2[2] = False
    m2[2, [2, 5]] = True  # exactly two
    m1[3] = False
    return d1, m1, d2, m2


def _assert_like_ref(d1, m1, d2, m2, ratio, mutual, chunk):
    nn, r, ok = ratio_match(d1, m1, d2, m2, ratio=ratio, mutual=mutual, chunk=chunk)
    for p in range(d1.shape[0]):
        enn, er, eok, amb = _ref_match(d1[p], m1[p], d2[p], m2[p], ratio, mutual)
        same = ~amb
        assert ok[p].numpy()[same].tolist() == eok[same].tolist(), (p, ratio, mutual, chunk)
        assert nn[p].numpy()[same].tolist() == enn[same].tolist(), (p, ratio, mutual, chunk)
        np.testing.assert_array_equal(r[p].numpy()[same], er[same])
    return ok


@pytest.mark.parametrize("mutual", [False, True])
def test_ratio_match_equals_brute_force_with_ties_padding_and_chunks(mutual):
    total = 0
    for seed in range(6):
        d1, m1, d2, m2 = _int_sets(seed)
        for ratio in (0.5, 0.75, 0.9, 1.0):
            for chunk in (None, 1, 2, 3, 5):
                total += int(_assert_like_ref(d1, m1, d2, m2, ratio, mutual, chunk).sum())
    assert total > 200  # the cases match something (not a vacuous agreement on nothing)


def test_ratio_match_two_candidates_and_one_valid_candidate():
    # frame j with N2 = 2: distances 1 and 3 -> ratio 1/3 kept; one valid of two: no match
    d1 = torch.tensor([[[0.0, 0.0]], [[0.0, 0.0]]])
    d2 = torch.tensor([[[1.0, 0.0], [3.0, 0.0]], [[1.0, 0.0], [3.0, 0.0]]])
    m1 = torch.ones(2, 1, dtype=torch.bool)
    m2 = torch.tensor([[True, True], [True, False]])
    nn, r, ok = ratio_match(d1, m1, d2, m2, ratio=0.75)
    assert ok.tolist() == [[True], [False]]
    assert nn.tolist() == [[0], [0]]
    torch.testing.assert_close(r, torch.tensor([[1 / 3], [1.0]]))


def test_ratio_match_unmatched_entries_are_zero_index_and_unit_ratio():
    # keypoint 0 has ratio 0.8 (> 0.75: rejected), its nearest neighbour is index 1
    d1 = torch.tensor([[[0.0], [10.0]]], dtype=torch.float64)
    d2 = torch.tensor([[[5.0], [4.0], [10.0]]], dtype=torch.float64)
    m = torch.ones(1, 2, dtype=torch.bool)
    nn, r, ok = ratio_match(d1, m, d2, torch.ones(1, 3, dtype=torch.bool), ratio=0.75)
    assert ok.tolist() == [[False, True]]
    assert nn.tolist() == [[0, 2]]
    assert r.dtype == torch.float64
    assert r.tolist() == [[1.0, 0.0]]


def test_ratio_at_the_threshold_is_rejected_exactly():
    # distances 3 and 4: ratio 0.75 exactly, not < 0.75 (OpenCV's d1 < ratio * d2)
    d1 = torch.zeros(1, 1, 2)
    d2 = torch.tensor([[[3.0, 0.0], [0.0, 4.0]]])
    m1, m2 = torch.ones(1, 1, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool)
    assert not ratio_match(d1, m1, d2, m2, ratio=0.75)[2].any()
    nn, r, ok = ratio_match(d1, m1, d2, m2, ratio=0.7500001)
    assert ok.tolist() == [[True]] and r.tolist() == [[0.75]]


def test_exact_copies_match_despite_negative_rounded_squared_distances():
    """|a|^2 + |a|^2 - 2 a.a rounds below 0 for about half of these float32 copies: the
    distance is clamped to 0 (ratio ~0, a match), not a NaN square root (no match)."""
    g = torch.Generator().manual_seed(0)
    d1 = torch.randn(1, 64, 32, generator=g) * 10
    d2 = torch.cat([d1, torch.randn(1, 64, 32, generator=g) * 10 + 50], 1)
    m1, m2 = torch.ones(1, 64, dtype=torch.bool), torch.ones(1, 128, dtype=torch.bool)
    for mutual in (False, True):
        nn, r, ok = ratio_match(d1, m1, d2, m2, ratio=0.75, mutual=mutual)
        assert ok.all() and nn[0].tolist() == list(range(64))
        assert float(r.max()) < 1e-2 and bool(torch.isfinite(r).all())

def test_mutual_ratio_one_equals_opencv_cross_check_across_chunks():
    cv2 = pytest.importorskip("cv2")
    g = torch.Generator().manual_seed(3)
    d1 = torch.randn(5, 40, 8, generator=g)
    d2 = d1[torch.tensor([1, 2, 3, 4, 0])] + 0.6 * torch.randn(5, 40, 8, generator=g)
    m = torch.ones(5, 40, dtype=torch.bool)
    nn, _, ok = ratio_match(d1, m, d2, m, ratio=1.0, mutual=True, chunk=2)
    bf = cv2.BFMatcher(cv2.NORM_L2, crossCheck=True)
    for p in range(5):
        want = {(x.queryIdx, x.trainIdx) for x in bf.match(d1[p].numpy(), d2[p].numpy())}
        got = {(i, int(nn[p, i])) for i in range(40) if ok[p, i]}
        assert got == want and len(got) > 10, p


def test_negative_or_too_large_pair_index_is_a_shape_error():
    kps = Keypoints(torch.rand(3, 4, 2), torch.rand(3, 4, 2), torch.ones(3, 4),
                    torch.ones(3, 4, dtype=torch.bool))
    for bad in ([[0, -1]], [[-1, 2]], [[0, 3]]):
        with pytest.raises(ShapeError):
            match_descriptors(kps, torch.tensor(bad))


def test_chunk_size_follows_the_distance_budget():
    assert _chunk_size(100, 100, torch.device("cpu")) == 400  # 4e6 / 1e4
    assert _chunk_size(100, 100, torch.device("meta")) == 50000  # 5e8 / 1e4
    assert _chunk_size(3000, 3000, torch.device("cpu")) == 1  # over the budget: one pair
    assert _chunk_size(0, 5, torch.device("cpu")) == 4000000


def test_match_descriptors_packs_like_brute_force():
    """Frames with different valid counts (num_kp1 / num_kp2 differ), a pair list crossing a
    chunk of 2: the packed x1 / x2 / scores equal the brute-force matches in keypoint order,
    zero padding after them, width = the largest match count."""
    g = torch.Generator().manual_seed(12)
    t, n = 5, 10
    desc = torch.randint(0, 4, (t, n, 3), generator=g).double()
    mask = torch.rand(t, n, generator=g) > 0.3
    mask[4, 6:] = False
    xy = torch.rand(t, n, 2, generator=g, dtype=torch.float64) * 50 + 1
    kps = Keypoints(xy, desc, torch.ones(t, n, dtype=torch.float64), mask)
    pairs = torch.tensor([[0, 1], [4, 2], [3, 4], [2, 0], [1, 3]])
    for mutual in (False, True):
        c = match_descriptors(kps, pairs, ratio=0.8, mutual=mutual, chunk=2)
        assert c.num_kp1.tolist() == mask.sum(1)[pairs[:, 0]].tolist()
        assert c.num_kp2.tolist() == mask.sum(1)[pairs[:, 1]].tolist()
        counts = []
        for p, (i, j) in enumerate(pairs.tolist()):
            nn, r, ok, amb = _ref_match(desc[i], mask[i], desc[j], mask[j], 0.8, mutual)
            assert not amb.any()
            k = int(ok.sum())
            counts.append(k)
            assert c.mask[p].tolist() == [True] * k + [False] * (c.mask.shape[1] - k)
            assert c.x1[p, :k].tolist() == xy[i][ok].tolist()
            assert c.x2[p, :k].tolist() == xy[j][nn[ok]].tolist()
            np.testing.assert_array_equal(c.scores[p, :k].numpy(), 1.0 - r[ok])
            assert not c.x1[p, k:].any() and not c.x2[p, k:].any()
            assert not c.scores[p, k:].any()
        assert c.mask.shape[1] == max(counts) and min(counts) < max(counts)


# --- forward-backward consistency ---------------------------------------------------------


def _linear_flows(dtype_bw=torch.float64):
    """fw = (2, 1) everywhere on 4 x 8; bw_x = 0.25 x - 2, bw_y = -0.5 (linear: bilinear
    sampling is exact). Round trip at x: (0.25 x + 0.5, 0.5); x + 2 <= 7 and y + 1 <= 3
    inside."""
    h, w = 4, 8
    fw = torch.empty(1, 2, h, w, dtype=torch.float64)
    fw[:, 0], fw[:, 1] = 2.0, 1.0
    xs = torch.arange(w, dtype=torch.float64).expand(h, w)
    bw = torch.stack([0.25 * xs - 2.0, torch.full((h, w), -0.5, dtype=torch.float64)])[None]
    inside = torch.zeros(1, h, w, dtype=torch.bool)
    inside[:, :3, :6] = True
    err = torch.sqrt((0.25 * xs + 0.5) ** 2 + 0.25)[None]
    return fw, bw.to(dtype_bw), inside, err


def test_forward_backward_error_closed_form():
    fw, bw, inside, err = _linear_flows()
    got, got_inside = forward_backward_error(fw, bw)
    assert got_inside.tolist() == inside.tolist()
    assert got.dtype == torch.float64
    torch.testing.assert_close(got[inside], err[inside])


def test_forward_backward_error_casts_the_backward_flow():
    fw, bw, inside, err = _linear_flows(torch.float32)  # values exact in float32
    got, got_inside = forward_backward_error(fw, bw)
    assert got.dtype == torch.float64 and got_inside.tolist() == inside.tolist()
    torch.testing.assert_close(got[inside], err[inside])
    # float32 forward, float64 backward: the error is float32 (flow_fw's dtype), computed on
    # the backward flow cast first (the same bits as a float32 backward flow)
    g = torch.Generator().manual_seed(0)
    fw32 = torch.rand(2, 2, 6, 7, generator=g) * 3 - 1.5
    bw64 = torch.rand(2, 2, 6, 7, generator=g, dtype=torch.float64) * 3 - 1.5
    got32, _ = forward_backward_error(fw32, bw64)
    assert got32.dtype == torch.float32
    assert torch.equal(got32, forward_backward_error(fw32, bw64.float())[0])


def test_forward_backward_reliability_ramp_closed_form():
    fw, bw, inside, err = _linear_flows()
    for thr in (0.75, 1.0):
        want = torch.where(inside, (2.0 - err / thr).clamp(0.0, 1.0), torch.zeros_like(err))
        got = forward_backward_reliability(fw, bw, threshold_px=thr)
        torch.testing.assert_close(got, want)
        assert 0.0 < float(got[0, 0, 3]) < 1.0  # on the ramp (e = 1.25 + ...)
        assert float(got[0, 0, 0]) == 1.0 and float(got[0, 0, 6]) == 0.0


def test_forward_backward_bad_inputs():
    fw, bw, _, _ = _linear_flows()
    with pytest.raises(InputError):
        forward_backward_reliability(fw, bw, threshold_px=0.0)
    bad = [(fw, torch.zeros(1, 2, 4, 9, dtype=torch.float64)),
           (torch.zeros(1, 2, 0, 5), torch.zeros(1, 2, 0, 5)),
           (torch.zeros(1, 2, 5, 0), torch.zeros(1, 2, 5, 0)),
           (torch.zeros(1, 3, 4, 8), torch.zeros(1, 3, 4, 8)),
           (torch.zeros(1, 2, 4, 8, dtype=torch.long), torch.zeros(1, 2, 4, 8))]
    for a, b in bad:
        with pytest.raises(ShapeError):
            forward_backward_error(a, b)


# --- clip ids and file keys ---------------------------------------------------------------


def _sha8(*parts):
    text = "\x00".join(parts)
    return hashlib.sha1(text.encode("utf-8", "surrogatepass")).hexdigest()[:8]


def test_file_key_closed_form():
    assert file_key("a/b-c", "h1") == "a_b-c_" + _sha8("a/b-c", "h1")
    assert file_key("a/b-c") == "a_b-c_" + _sha8("a/b-c")
    assert file_key("ab", "c") != file_key("a", "bc") != file_key("abc")
    assert file_key("a", "bc").endswith(_sha8("a", "bc"))
    assert file_key("/x y/") == "x_y_" + _sha8("/x y/")  # outer underscores stripped
    assert file_key("a" * 60) == "a" * 48 + "_" + _sha8("a" * 60)
    assert file_key("a" * 60, max_len=10) == "a" * 10 + "_" + _sha8("a" * 60)
    assert file_key("///") == "clip_" + _sha8("///")
    lone = "\udcff"  # a lone surrogate (a file name in another encoding)
    assert file_key(lone) == "clip_" + _sha8(lone)
    assert file_key(lone) != file_key("\udcfe") != file_key("?")


def test_derive_ids_both_stems_get_their_folder():
    assert derive_clip_ids(["/r/cogvideox/3.mp4", "/r/sora/3.mp4", "/r/x/4.mp4"]) == \
        ["cogvideox/3", "sora/3", "4"]


def test_derive_ids_extension_retry_and_taken_ids():
    assert derive_clip_ids(["/r/x/a.mp4", "/r/x/a.webm"]) == ["a.mp4", "a.webm"]
    assert derive_clip_ids(["/r/x/a.mp4", "/r/x/a.webm"], taken=["a.mp4"]) == \
        ["x/a.mp4", "a.webm"]
    assert derive_clip_ids(["/r/x/a.mp4"], taken=["a"]) == ["x/a"]
    with pytest.raises(InputError, match="clip_id 'x.mp4'"):
        derive_clip_ids(["/x.mp4"], taken=["x", "x.mp4"])
    with pytest.raises(InputError, match="no path suffix tells apart"):
        derive_clip_ids(["/r/a.mp4", "/r/b/../a.mp4"])


def test_derive_ids_fold_dotdot_and_expand_home(monkeypatch):
    assert derive_clip_ids(["/r/b/x/../y.mp4", "/r/c/y.mp4"]) == ["b/y", "c/y"]
    monkeypatch.setenv("HOME", "/h/z")
    assert derive_clip_ids(["~/x.mp4", "/h/y/x.mp4"]) == ["z/x", "y/x"]


# --- video probing ------------------------------------------------------------------------


def _encode(path: Path, n: int, h: int = 48, w: int = 64, gop: int = 20) -> Path:
    """``n`` frames of h x w moving noise, mpeg4 at 24 fps, a keyframe every ``gop``."""
    base = np.random.default_rng(0).integers(0, 256, (h, w + 2 * n, 3), dtype=np.uint8)
    with av.open(str(path), "w") as c:
        s = c.add_stream("mpeg4", rate=24)
        s.height, s.width, s.pix_fmt = h, w, "yuv420p"
        s.codec_context.gop_size = gop
        for t in range(n):
            a = np.ascontiguousarray(base[:, 2 * t:2 * t + w])
            for packet in s.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


def test_probe_fields_of_a_plain_and_a_stream_copy_trimmed_mp4(tmp_path):
    """40 frames of 48 x 64 at 24 fps; the trim shows 15 frames and announces 20 (5 edit-list
    preroll): an exact probe counts 15 decoded, a trusting one the container's 20."""
    full = _encode(tmp_path / "full.mp4", 40)
    trim = stream_copy_trim(full, tmp_path / "trim.mp4")
    for path, decoded, announced in ((full, 40, 40), (trim, 15, 20)):
        for exact in (True, False):
            info = probe_video(path, exact=exact)
            assert (info.height, info.width, info.codec, info.fps) == (48, 64, "mpeg4", 24.0)
            assert info.container_frames == announced and info.truncated is False
            assert info.duration_s == pytest.approx(decoded / 24, abs=0.01)
            assert (info.num_frames, info.counted) == \
                ((decoded, "decoded") if exact else (announced, "container"))
            assert info.path == str(path)


def test_probe_webm_has_no_container_count(tmp_path):
    frames = torch.randint(0, 256, (6, 3, 32, 48), dtype=torch.uint8,
                           generator=torch.Generator().manual_seed(0))
    path = write_video(tmp_path / "c.webm", frames, fps=12, codec="libvpx")
    for exact in (True, False):
        info = probe_video(path, exact=exact)
        assert info.container_frames is None and info.num_frames == 6
        assert (info.height, info.width, info.counted) == (32, 48, "decoded")
        assert info.fps == pytest.approx(12.0)


def test_probe_image_folder(tmp_path):
    cv2 = pytest.importorskip("cv2")
    for k in range(3):
        cv2.imwrite(str(tmp_path / f"{k:03d}.png"), np.full((30, 40, 3), 40 * k, np.uint8))
    info = probe_video(tmp_path)
    assert (info.num_frames, info.height, info.width) == (3, 30, 40)
    assert (info.fps, info.codec, info.counted, info.container_frames) == \
        (None, "images", "files", None)


@pytest.mark.parametrize("size", [(0, 64), (48, 0), (0, 0)])
def test_trusting_probe_without_a_frame_size_is_an_error(tmp_path, monkeypatch, size):
    """A stream that announces frames but reports a zero height or width (and no first frame
    to read the displayed size from) is unreadable, not a 0-pixel video."""
    from geocon_torch.errors import VideoReadError
    from geocon_torch.io import probe as probe_mod

    ctx = types.SimpleNamespace(name="h264", height=size[0], width=size[1])
    stream = types.SimpleNamespace(frames=10, codec_context=ctx, average_rate=24,
                                   guessed_rate=None, base_rate=None)
    container = types.SimpleNamespace(duration=None, close=lambda: None)
    monkeypatch.setattr(probe_mod, "open_video", lambda path: (container, stream))
    monkeypatch.setattr(probe_mod, "iter_frames", lambda *a: iter(()))
    path = tmp_path / "v.mp4"
    path.write_bytes(b"x")
    with pytest.raises(VideoReadError, match="no frame size"):
        probe_video(path, exact=False)


# --- numeric environment ------------------------------------------------------------------


def _stub_cv2(monkeypatch, line=None):
    cv2 = types.ModuleType("cv2")
    cv2.__version__ = "9.8.7"
    if line is not None:
        cv2.getCPUFeaturesLine = lambda: line
    monkeypatch.setitem(sys.modules, "cv2", cv2)


def test_opencv_record_keeps_the_usable_dispatched_extensions(monkeypatch):
    _stub_cv2(monkeypatch, "SSE SSE2 SSE3 *SSE4.1 *AVX2? *FP16 AVX512-SKX? *AVX512-SKX")
    assert _numeric_env._opencv() == {"opencv": "9.8.7", "opencv_cpu": "SSE4.1 FP16 AVX512-SKX"}
    _stub_cv2(monkeypatch)  # an old OpenCV without the features line
    assert _numeric_env._opencv() == {"opencv": "9.8.7", "opencv_cpu": ""}
    monkeypatch.setitem(sys.modules, "cv2", None)  # no OpenCV at all: import fails
    assert _numeric_env._opencv() == {}


def test_numeric_env_is_taken_once_and_copied(monkeypatch):
    first = _numeric_env.numeric_env()
    assert first["machine"] == platform.machine() and first["torch"] == torch.__version__
    assert first["torch_cpu"] == str(torch.backends.cpu.get_cpu_capability())
    if sys.modules.get("cv2") is not None:
        assert first["opencv"] == sys.modules["cv2"].__version__
    first["torch"] = "changed"
    monkeypatch.setattr(platform, "machine", lambda: "changed-machine")
    again = _numeric_env.numeric_env()
    assert again["torch"] == torch.__version__ and again["machine"] != "changed-machine"
