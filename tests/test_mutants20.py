"""Mutation round 20 (session 31 code): lens undistortion (``io.lens``: the OpenCV model, the
pixel-centre scaling, the grid_sample convention, the masks, the record) and its config
section (shorthands, cross checks, the hash rule), the thread-count guard's adoption of a
caller's change, the resize / uint8 chunking, the CLI table width and '-' outputs, and the
compile helpers. Every expected number is closed-form or OpenCV's on the same inputs."""
from __future__ import annotations

import io
import threading
from contextlib import contextmanager

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from geocon_torch import ConfigError, GeoConConfig, load_config
from geocon_torch.io import lens as lens_mod
from geocon_torch.io import reader, resize
from geocon_torch.io.lens import (Lens, as_lens, camera_at, clip_lens, distorted_positions,
                                  lens_record, undistort_frames, undistort_mask)
from geocon_torch.io.resize import working_size
from geocon_torch.types import Clip

cv2 = pytest.importorskip("cv2")

H, W = 48, 64
#: all five coefficients, fx != fy, an off-centre principal point (px of the 64 x 48 frame)
CAM = (52.0, 57.0, 33.25, 22.5)
COEF = (-0.21, 0.06, 0.011, -0.007, 0.03)
#: a pincushion lens: the corners' sources lie outside the frame
PIN = Lens(60.0, 60.0, None, None, None, (0.35, 0.0, 0.0, 0.0, 0.0))


def _smooth(n: int, h: int = H, w: int = W, seed: int = 0) -> torch.Tensor:
    """(n, 3, h, w) uint8 smooth random frames."""
    g = torch.Generator().manual_seed(seed)
    small = torch.rand(n, 3, h // 8, w // 8, generator=g)
    big = F.interpolate(small, size=(h, w), mode="bicubic", align_corners=False)
    return (big.clamp(0, 1) * 255).round().to(torch.uint8)


def _bilinear_zero(img: np.ndarray, pos: np.ndarray) -> np.ndarray:
    """(C, h, w) float64 bilinear samples of ``img`` (C, H, W) at ``pos`` (h, w, 2) px, pixel
    centres at integers, 0 outside the frame (the four taps weighted, missing ones 0)."""
    c, hh, ww = img.shape
    x, y = pos[..., 0], pos[..., 1]
    x0, y0 = np.floor(x).astype(int), np.floor(y).astype(int)
    fx, fy = x - x0, y - y0
    out = np.zeros((c,) + x.shape)
    for dx, dy, wgt in ((0, 0, (1 - fx) * (1 - fy)), (1, 0, fx * (1 - fy)),
                        (0, 1, (1 - fx) * fy), (1, 1, fx * fy)):
        xi, yi = x0 + dx, y0 + dy
        ok = (xi >= 0) & (xi < ww) & (yi >= 0) & (yi < hh)
        vals = img[:, yi.clip(0, hh - 1), xi.clip(0, ww - 1)]
        out += np.where(ok, wgt, 0.0) * vals
    return out


# ------------------------------------------------------------------ the model and the map

def test_distorted_positions_are_opencvs_undistort_map():
    fx, fy, cx, cy = CAM
    K = np.array([[fx, 0, cx], [0, fy, cy], [0, 0, 1]])
    mx, my = cv2.initUndistortRectifyMap(K, np.array(COEF), None, K, (W, H), cv2.CV_32FC1)
    pos = distorted_positions(CAM, COEF, (H, W))
    assert pos.shape == (H, W, 2) and pos.dtype == torch.float64
    assert np.abs(pos[..., 0].numpy() - mx).max() < 2e-3
    assert np.abs(pos[..., 1].numpy() - my).max() < 2e-3
    # one pixel by hand: (u, v) = (0, 0)
    x, y = (0 - cx) / fx, (0 - cy) / fy
    r2 = x * x + y * y
    k1, k2, p1, p2, k3 = COEF
    rad = 1 + k1 * r2 + k2 * r2 ** 2 + k3 * r2 ** 3
    xd = x * rad + 2 * p1 * x * y + p2 * (r2 + 2 * x * x)
    yd = y * rad + p1 * (r2 + 2 * y * y) + 2 * p2 * x * y
    assert pos[0, 0].tolist() == pytest.approx([fx * xd + cx, fy * yd + cy], abs=1e-9)


def test_undistort_frames_is_the_rounded_zero_padded_bilinear_of_the_map(monkeypatch):
    frames = _smooth(5)
    lens = Lens(*CAM, None, (0.3, 0.02, 0.004, -0.003, 0.0))  # pincushion: black corners
    pos = distorted_positions(CAM, lens.coefficients, (H, W)).numpy()
    ref = np.stack([_bilinear_zero(f.double().numpy(), pos) for f in frames])
    expect = np.clip(np.round(ref), 0, 255)
    budget = 2 * 3 * H * W  # two frames a grid_sample call
    monkeypatch.setattr(lens_mod, "RESIZE_CHUNK_VALUES", budget)
    calls = []
    real = F.grid_sample

    def spy(x, grid, *args, **kwargs):
        calls.append(x.shape[0])
        return real(x, grid, *args, **kwargs)

    monkeypatch.setattr(lens_mod.F, "grid_sample", spy)
    got = undistort_frames(frames, lens).numpy().astype(float)
    assert calls == [2, 2, 1]
    diff = np.abs(got - expect)
    assert diff.max() <= 1 and (diff == 0).mean() > 0.99, (diff.max(), (diff == 0).mean())
    outside = (pos[..., 0] < -1) | (pos[..., 0] > W) | (pos[..., 1] < -1) | (pos[..., 1] > H)
    assert outside.any() and (got[:, :, outside] == 0).all()


def test_undistort_mask_is_nearest_through_the_map_and_inside_the_frame():
    g = torch.Generator().manual_seed(3)
    mask = torch.rand(2, 3, H, W, generator=g) > 0.4
    lens = Lens(*CAM, None, (0.3, 0.02, 0.004, -0.003, 0.0))
    pos = distorted_positions(CAM, lens.coefficients, (H, W)).numpy()
    x, y = pos[..., 0], pos[..., 1]
    inside = (x >= 0) & (x <= W - 1) & (y >= 0) & (y <= H - 1)
    xi = np.clip(np.round(x), 0, W - 1).astype(int)
    yi = np.clip(np.round(y), 0, H - 1).astype(int)
    expect = mask.numpy()[..., yi, xi] & inside
    got = undistort_mask(mask, lens)
    assert got.dtype == torch.bool and got.shape == mask.shape
    assert np.array_equal(got.numpy(), expect)
    assert 0 < (~inside).sum() < inside.sum()


def test_as_lens_keeps_each_value_and_refuses_a_bad_hand_built_lens():
    assert as_lens(Lens(100.0, 100.0, None, None, None, (0.0,) * 5)) is None
    got = as_lens({"fx": 100.0, "fy": 130.0, "k1": 0.1, "width": 200, "height": 100})
    assert (got.fx, got.fy, got.size) == (100.0, 130.0, (200, 100))
    assert as_lens({"fx": 100.0, "k3": 0.02}).coefficients == (0.0, 0.0, 0.0, 0.0, 0.02)
    assert as_lens({"fx": 100.0, "p2": 0.01}) is not None
    for bad in (Lens(0.0, 100.0, None, None, None, (0.1, 0, 0, 0, 0)),
                Lens(100.0, 100.0, None, None, None, (0.1, 0, 0, 0)),
                Lens(100.0, 100.0, float("nan"), None, None, (0.1, 0, 0, 0, 0))):
        with pytest.raises(ConfigError, match="a Lens needs"):
            as_lens(bad)


def test_camera_at_scales_each_axis_by_its_own_factor_and_the_default_centre():
    # stated 200 x 100, source 201 x 100 (aspect 0.5 % off: accepted), kept as is (crop)
    lens = as_lens({"fx": 100.0, "fy": 120.0, "k1": -0.1, "width": 200, "height": 100})
    ws = working_size(100, 201, None)
    sx, sy = ws.scale_xy
    ax = 201 / 200
    assert camera_at(lens, ws) == pytest.approx((100 * ax * sx, 120 * sy,
                                                 (99.5 + 0.5) * ax * sx - 0.5,
                                                 (49.5 + 0.5) * sy - 0.5), abs=1e-12)
    # a resize whose even rounding makes sx != sy
    ws = working_size(100, 150, 64)
    sx, sy = ws.scale_xy
    assert sx != sy
    lens = as_lens({"fx": 90.0, "fy": 80.0, "cx": 70.0, "cy": 52.0, "k1": -0.1})
    assert camera_at(lens, ws) == pytest.approx((90 * sx, 80 * sy, 70.5 * sx - 0.5,
                                                 52.5 * sy - 0.5), abs=1e-12)
    with pytest.raises(ConfigError, match="stated for 200 x 100 px frames"):  # 1.5 % off
        camera_at(as_lens({"fx": 100.0, "k1": -0.1, "width": 200, "height": 100}),
                  working_size(100, 203, None))


def test_lens_record_values_and_clip_lens_reads_only_an_undistorted_record():
    ws = working_size(H, W, None)
    lens = {"fx": 60.0, "k1": 0.35, "width": 2 * W, "height": 2 * H, "cx": 2 * W / 2 - 0.5}
    rec = lens_record(lens, ws)
    cam = camera_at(as_lens(lens), ws)
    pos = distorted_positions(cam, (0.35, 0.0, 0.0, 0.0, 0.0), (H, W)).numpy()
    inside = ((pos[..., 0] >= 0) & (pos[..., 0] <= W - 1) & (pos[..., 1] >= 0)
              & (pos[..., 1] <= H - 1))
    assert rec["stated_size"] == [2 * W, 2 * H] and rec["coefficients"][0] == 0.35
    assert rec["camera_px"] == pytest.approx([30.0, 30.0, (W - 1) / 2, (H - 1) / 2])
    assert rec["outside_fraction"] == round(1.0 - inside.mean(), 6)
    assert rec["outside_fraction"] != round(rec["outside_fraction"], 2)
    frames = torch.zeros(2, 3, H, W, dtype=torch.uint8)
    clip = Clip(frames=frames, fps=30.0, content_mask=torch.ones(H, W, dtype=torch.bool),
                frame_indices=torch.arange(2), source_size=(H, W), meta={"lens": rec})
    assert clip_lens(clip).size == (W, H)
    off = Clip(frames=frames, fps=30.0, content_mask=torch.ones(H, W, dtype=torch.bool),
               frame_indices=torch.arange(2), source_size=(H, W),
               meta={"lens": dict(rec, undistorted=False)})
    assert clip_lens(off) is None


# ------------------------------------------------------------------ the config section

def test_lens_config_shorthands_and_cross_checks():
    five = load_config({"io": {"lens": {"fx": 100, "distortion": [-0.1, 0.02, 0.001, 0.002,
                                                                    0.003]}}})
    assert tuple(getattr(five.io.lens, k) for k in ("k1", "k2", "p1", "p2", "k3")) == \
        (-0.1, 0.02, 0.001, 0.002, 0.003)
    same = load_config({"io": {"lens": {"fx": 100, "distortion": [-0.1], "k1": -0.1}}})
    assert same.io.lens.k1 == -0.1
    with pytest.raises(ConfigError, match="are both given"):  # the missing k2 is 0
        load_config({"io": {"lens": {"fx": 100, "distortion": [-0.1], "k2": 0.2}}})
    ok = load_config({"io": {"lens": {"fx": 100, "k1": 0.1, "size": [W, H], "cx": W - 0.75,
                                      "cy": H - 0.5}}})
    assert ok.io.lens.cx == W - 0.75
    for lens, message in (({"cx": -0.6, "width": W, "height": H}, "io.lens.cx must lie"),
                          ({"cy": 60.0, "width": 100, "height": 50}, "io.lens.cy must lie"),
                          ({"fx": 100, "k1": 0.1, "height": H}, "go together"),
                          ({"p1": 0.01}, r"distortion \(p1 = 0.01\) but no focal length"),
                          ({"k3": 0.01}, r"distortion \(k3 = 0.01\) but no focal length")):
        with pytest.raises(ConfigError, match=message):
            load_config({"io": {"lens": lens}})
    with pytest.raises(ConfigError, match="no focal length"):  # a GeoConConfig is checked too
        load_config(GeoConConfig(io={"lens": {"k1": 0.1}}))


def test_a_lens_enters_the_hash_only_once_it_distorts():
    """The lens changes numbers only when a coefficient is not 0 (lensuse audit s31 F2): an
    fx alone keeps the hash of a config without a lens; k3 alone is a lens."""
    base = GeoConConfig().config_hash()
    assert load_config({"io": {"lens": {}}}).config_hash() == base
    fx_only = load_config({"io": {"lens": {"fx": 300.0}}})
    assert fx_only.config_hash() == base and "lens" not in fx_only.protocol_dict()["io"]
    k3 = load_config({"io": {"lens": {"fx": 300.0, "k3": 0.01}}})
    assert k3.config_hash() != base and k3.protocol_dict()["io"]["lens"]["k3"] == 0.01


# ------------------------------------------------------------------ chunking

def test_a_budget_below_one_frame_still_goes_one_frame_at_a_time(monkeypatch):
    x = torch.rand(1, 3, 3, 20, 30, generator=torch.Generator().manual_seed(5))
    expect = (x * 255.0).round().clamp(0, 255).to(torch.uint8)
    monkeypatch.setattr(reader, "RESIZE_CHUNK_VALUES", 10)
    assert torch.equal(reader._to_uint8(x), expect)
    frames = expect[0]
    whole = resize.resize_frames(frames, working_size(20, 30, 60, True))
    monkeypatch.setattr(resize, "RESIZE_CHUNK_VALUES", 10)
    assert torch.equal(resize.resize_frames(frames, working_size(20, 30, 60, True)), whole)
    assert whole.shape == (3, 3, 40, 60)


# ------------------------------------------------------------------ the CLI table and '-'

def _table(reason: str, out, width=None) -> list:
    from geocon_torch.commands import _common

    _common.print_table([_common.summary_row({"clip": "c", "status": "error",
                                              "reason": reason})], out=out, width=width)
    return out.getvalue().splitlines()


REASON = " ".join(["ab"] * 60)


def test_table_width_rules(monkeypatch):
    from geocon_torch.commands import _common

    monkeypatch.setenv("COLUMNS", "0")
    assert len(_table(REASON, io.StringIO())) == 3  # not a number > 0: a pipe, no limit
    monkeypatch.setenv("COLUMNS", "abc")
    assert len(_table(REASON, io.StringIO())) == 3
    lead = _table(REASON, io.StringIO())[0].index("reason")  # where the reason column starts
    # a 40-character column holds 13 words "ab" (38 characters), a 41-character one 14
    monkeypatch.setenv("COLUMNS", str(lead + 41))
    lines = _table(REASON, io.StringIO())
    assert len(lines) == 2 + 5 and max(len(x) for x in lines[2:]) == lead + 38
    monkeypatch.setenv("COLUMNS", "300")
    assert _table(REASON, io.StringIO(), width=lead + 41) == lines  # an explicit width wins

    class Tty(io.StringIO):
        def isatty(self):
            return True

        def fileno(self):
            raise io.UnsupportedOperation("fileno")

    monkeypatch.delenv("COLUMNS")
    assert _common._table_width(Tty()) == 120
    assert _common._table_width(io.StringIO()) is None


def test_csv_to_a_text_only_stdout_and_the_run_config_filter(tmp_path, monkeypatch, capsys):
    from geocon_torch.bench import ResultStore
    from geocon_torch.cli import main
    from geocon_torch.commands import bench

    from helpers import fake_result

    path = tmp_path / "r.sqlite"
    with ResultStore(path) as s:
        s.put({"clip_id": "a", "generator": "m"}, "ha", "cfg", fake_result("a"))
        s.put({"clip_id": "b", "generator": "m"}, "hb", "other", fake_result("b"))
        s.export_csv(tmp_path / "cfg.csv", "cfg")
        s.export_csv(tmp_path / "all.csv", None)
    buf = io.StringIO()
    monkeypatch.setattr("sys.stdout", buf)
    with ResultStore(path) as s:
        bench._csv_to_stdout(s, None)
    assert buf.getvalue() == (tmp_path / "all.csv").read_bytes().decode()
    monkeypatch.undo()

    class Pinned:
        def config_hash(self):
            return "cfg"

    monkeypatch.setattr(bench, "pinned_config", lambda cfg, device: Pinned())
    monkeypatch.chdir(tmp_path)
    capsys.readouterr()
    assert main(["bench", "--db", "r.sqlite", "--export-csv", "-"]) == 0
    out, _ = capsys.readouterr()
    assert out == (tmp_path / "cfg.csv").read_bytes().decode()
    assert main(["bench", "--db", "r.sqlite", "--export-csv", "t.csv"]) == 0
    out, err = capsys.readouterr()
    assert "wrote t.csv" in out and "wrote" not in err


# ------------------------------------------------------------------ thread counts

@contextmanager
def _another_threads_block():
    """The caller at 3 torch / 3 OpenCV threads while another thread holds a
    ``thread_settings(1, 1)`` block open; yields ``end()``, which closes that block (the
    caller's counts are put back afterwards)."""
    from geocon_torch._thread_settings import thread_settings

    before = torch.get_num_threads(), cv2.getNumThreads()
    inside, leave = threading.Event(), threading.Event()

    def hold():
        with thread_settings(torch_threads=1, cv2_threads=1):
            inside.set()
            leave.wait(20)

    holder = threading.Thread(target=hold)
    try:
        torch.set_num_threads(3)
        cv2.setNumThreads(3)
        holder.start()
        assert inside.wait(20)

        def end():
            leave.set()
            holder.join(20)

        yield end
    finally:
        leave.set()
        torch.set_num_threads(before[0])
        cv2.setNumThreads(before[1])


def _fresh_thread_torch() -> int:
    """torch's thread count in a thread started now."""
    seen = []
    worker = threading.Thread(target=lambda: seen.append(torch.get_num_threads()))
    worker.start()
    worker.join()
    return seen[0]


def test_a_caller_change_while_a_block_is_open_is_the_users_new_value():
    from geocon_torch._thread_settings import thread_settings

    with _another_threads_block() as end:
        cv2.setNumThreads(6)
        with thread_settings(torch_threads=2, cv2_threads=2):  # adopts 6 on entry
            assert cv2.getNumThreads() == 2
        assert cv2.getNumThreads() == 1  # the holder's block is still open
        end()
        assert cv2.getNumThreads() == 6


# ------------------------------------------------------------------ compile helpers

def test_compile_failure_tells_dynamo_errors_from_a_clips(monkeypatch):
    from geocon_torch._precision import compile_failure

    dynamo_exc = pytest.importorskip("torch._dynamo.exc")
    assert compile_failure(dynamo_exc.TorchRuntimeError("x"))
    assert not compile_failure(ValueError("a clip's own error"))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert compile_failure(ValueError("raised while Dynamo traces"))


def test_eager_entry_takes_the_trampoline_once_dynamo_is_loaded(monkeypatch):
    from geocon_torch import _precision

    pytest.importorskip("torch._dynamo")
    calls = []

    def spy(fn, *args, **kwargs):
        calls.append(fn.__name__)
        return fn(*args, **kwargs)

    def add_one(x, *, by=1):
        """Adds."""
        return x + by

    monkeypatch.setattr(_precision, "_run_eagerly", spy)
    entry = _precision.eager_entry(add_one)
    assert entry(1, by=2) == 3 and calls == ["add_one"]
    assert entry.__name__ == "add_one" and entry.__doc__ == "Adds."


def test_a_caller_change_is_kept_by_the_exit_alone():
    """No block enters after the caller's change: the holder's exit itself adopts it."""
    with _another_threads_block() as end:
        cv2.setNumThreads(6)
        torch.set_num_threads(5)  # this thread's and new threads' count
        end()
        assert (cv2.getNumThreads(), _fresh_thread_torch()) == (6, 5)


def test_nested_blocks_go_back_to_the_last_open_blocks_counts():
    from geocon_torch._thread_settings import thread_settings

    before = torch.get_num_threads(), cv2.getNumThreads()
    try:
        with thread_settings(torch_threads=1, cv2_threads=1):
            with thread_settings(torch_threads=2, cv2_threads=2):
                with thread_settings(torch_threads=3, cv2_threads=3):
                    pass
                assert (cv2.getNumThreads(), torch.get_num_threads(),
                        _fresh_thread_torch()) == (2, 2, 2)
        assert (torch.get_num_threads(), cv2.getNumThreads()) == before
    finally:
        torch.set_num_threads(before[0])
        cv2.setNumThreads(before[1])
