"""Shared builders for the test suite (one module; tests never import each other).

Real frames warped by known maps (features), damaged videos (io integrity), fake
results and an injectable counting scorer (bench / report / cli), synthetic rigid
objects (foreground / flow), small panning clips (metrics) and rigid poses (gate); the
repository paths the tests read.
"""
from __future__ import annotations

import hashlib
import json
import math
import shutil
import sys
import time
from fractions import Fraction
from pathlib import Path
from typing import Dict, Optional, Sequence

import av
import numpy as np
import pytest
import torch
import torch.nn.functional as F

from geocon_torch import __version__
from geocon_torch.flow.lk_dense import gaussian_blur
from geocon_torch.io.writer import write_video
from geocon_torch.types import Clip

#: the repository root and the shared clips beside the checkout
REPO_ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"
DUST3R_CHECKOUT = SHARED_DATA.parent / "third_party" / "dust3r"

# --- from features_helpers.py -------------------------------------------------

#: a moderate viewpoint change (rotation, shear, perspective) for a 320x240 frame
H_WARP = np.array([[0.95, 0.08, 12.0], [-0.06, 1.02, -6.0], [1e-4, -2e-4, 1.0]])


def hill_gray(shared_data: Path, size=(320, 240)) -> np.ndarray:
    """hill/1.JPG as uint8 gray at ``size`` (W, H)."""
    import cv2

    img = cv2.imread(str(shared_data / "real" / "hill" / "1.JPG"), cv2.IMREAD_GRAYSCALE)
    assert img is not None
    return cv2.resize(img, size, interpolation=cv2.INTER_AREA)


def warp_pair(img: np.ndarray, h: np.ndarray = H_WARP) -> np.ndarray:
    """(2, H, W) uint8: the image and its warp by ``h`` (x2 ~ h x1, bilinear)."""
    import cv2

    w = cv2.warpPerspective(img, h, (img.shape[1], img.shape[0]), flags=cv2.INTER_LINEAR)
    return np.stack([img, w])


def to_gray_tensor(frames: np.ndarray, dtype=torch.float32, device="cpu") -> torch.Tensor:
    """(T, H, W) uint8 -> (T, 1, H, W) float [0, 1]."""
    return (torch.from_numpy(frames).to(dtype) / 255.0)[:, None].to(device)


def to_clip(frames: np.ndarray, content_mask: np.ndarray | None = None) -> Clip:
    """(T, H, W) uint8 gray -> Clip with RGB = gray."""
    t, h, w = frames.shape
    rgb = torch.from_numpy(frames)[:, None].expand(t, 3, h, w).contiguous()
    mask = torch.ones(h, w, dtype=torch.bool) if content_mask is None else \
        torch.from_numpy(content_mask)
    return Clip(frames=rgb, fps=30.0, content_mask=mask, frame_indices=torch.arange(t),
                source_size=(h, w))


def transfer_errors(x1: torch.Tensor, x2: torch.Tensor, h: np.ndarray) -> np.ndarray:
    """|h x1 - x2| in px for (N, 2) point sets."""
    p = np.c_[x1.double().cpu().numpy(), np.ones(len(x1))] @ h.T
    return np.linalg.norm(p[:, :2] / p[:, 2:] - x2.double().cpu().numpy(), axis=1)


def letterbox(frames: np.ndarray, top: int, left: int) -> tuple:
    """Add black bars (top/bottom ``top`` rows, left/right ``left`` columns) to (T, H, W).
    Returns (frames, content mask (H', W') bool)."""
    t, h, w = frames.shape
    out = np.zeros((t, h + 2 * top, w + 2 * left), np.uint8)
    out[:, top:top + h, left:left + w] = frames
    mask = np.zeros(out.shape[1:], bool)
    mask[top:top + h, left:left + w] = True
    return out, mask


# --- from damaged_videos.py ---------------------------------------------------

T = 48


DROPPED = (10, 11, 12, 30)


def moving_noise(num_frames: int = T) -> torch.Tensor:
    """(T, 3, 64, 96) uint8 random texture translated by 2 px per frame."""
    g = torch.Generator().manual_seed(0)
    base = torch.randint(0, 256, (3, 64, 96), generator=g, dtype=torch.uint8)
    return torch.stack([torch.roll(base, shifts=2 * t, dims=2) for t in range(num_frames)])


def clean_video(path: Path, frames: torch.Tensor) -> Path:
    return write_video(path, frames, fps=24, faststart=True)


def corrupt_middle(clean: Path, path: Path) -> Path:
    """A copy of ``clean`` with the sixth of its bytes after the middle replaced by noise."""
    data = bytearray(clean.read_bytes())
    n = len(data)
    data[n // 2:n // 2 + n // 6] = np.random.default_rng(0).integers(
        0, 256, n // 6, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(data))
    return path


def truncate_tail(clean: Path, path: Path, keep: float = 0.7) -> Path:
    """The first ``keep`` of ``clean``'s bytes (the moov atom is in front: it still opens)."""
    data = clean.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])
    return path


def encode_rgb(path: Path, frames: Sequence, codec: str = "libx264", rate: int = 24,
               rotation: Optional[int] = None) -> Path:
    """``frames`` ((H, W, 3) uint8 arrays) encoded into ``path`` as yuv420p at ``rate`` fps
    (``rotation``: a display matrix on the stream, degrees)."""
    with av.open(str(path), "w") as c:
        s = c.add_stream(codec, rate=rate)
        s.height, s.width = frames[0].shape[:2]
        s.pix_fmt = "yuv420p"
        if rotation is not None:
            s.set_display_rotation(rotation)
        for a in frames:
            for packet in s.encode(av.VideoFrame.from_ndarray(a, format="rgb24")):
                c.mux(packet)
        for packet in s.encode():
            c.mux(packet)
    return path


def stream_copy_trim(full: Path, out: Path, rate: int = 24, keyframe: int = 20,
                     start: int = 25) -> Path:
    """``full`` (an mp4 with a keyframe at frame ``keyframe``) stream-copied from that keyframe
    and shown from frame ``start`` (``ffmpeg -ss`` with ``-c copy``): frames ``keyframe`` ..
    ``start - 1`` become edit-list preroll."""
    with av.open(str(full)) as ic, av.open(str(out), "w",
                                           options={"movflags": "faststart"}) as oc:
        ist = ic.streams.video[0]
        tick = int(1 / (rate * ist.time_base))
        packets = [p for p in ic.demux(ist) if p.size]
        first = next(k for k, p in enumerate(packets)
                     if p.is_keyframe and p.pts == keyframe * tick)
        ost = oc.add_stream_from_template(ist)
        for p in packets[first:]:
            p.stream, p.pts, p.dts = ost, p.pts - start * tick, p.dts - start * tick
            oc.mux(p)
    return out


def drop_frames(path: Path, frames: torch.Tensor, dropped: Sequence[int] = DROPPED) -> Path:
    """An mp4 of ``frames`` without the ``dropped`` ones, timestamps kept (pts = frame index):
    the container announces only the frames it holds, the gaps show in the timestamps."""
    with av.open(str(path), "w") as container:
        stream = container.add_stream("libx264", rate=24)
        stream.width, stream.height, stream.pix_fmt = frames.shape[-1], frames.shape[-2], \
            "yuv420p"
        stream.codec_context.time_base = Fraction(1, 24)
        for t in range(frames.shape[0]):
            if t in dropped:
                continue
            frame = av.VideoFrame.from_ndarray(frames[t].permute(1, 2, 0).numpy(), format="rgb24")
            frame.pts = t
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


# --- from test_bench_fakes.py -------------------------------------------------

def fake_result(clip: str, *, ir: float = 0.98, ge: float = 1.0, regime: str = "H",
                prompt_category: Optional[str] = None, behaviour: Optional[str] = None,
                statistic: float = 0.02,
                objects: Sequence[float] = (), epipolar=(0.5, 0.8, 0.6), status: str = "ok",
                config_hash: str = "cfg", per_pair: Optional[list] = None,
                path: Optional[str] = None, score: Optional[float] = None) -> dict:
    ok = status == "ok"
    per_pair = per_pair if per_pair is not None else [
        {"pair": [t, t + 1], "ir": ir, "ge_px": ge, "valid": True, "num_matches": 100}
        for t in range(4)]
    return {
        "schema_version": "3.0", "clip": clip, "path": path, "content_hash": None,
        "status": status, "reason": None if ok else f"fake {status}",
        "regime": regime if ok else None, "score": score if ok else None,
        "gate": {"method": "poses", "statistic": statistic,
                 "thresholds": {"low": 0.03, "high": 0.05, "tau": 0.04},
                 "decision": regime, "evidence": {"t_inf": statistic}},
        "background": ({"ir": ir, "ge_px": ge, "ir_h": ir, "ge_h_px": ge, "ir_f": ir,
                        "ge_f_px": ge * 0.9, "valid_pairs": len(per_pair), "pairs": len(per_pair),
                        "pass": bool(ir >= 0.97 and ge <= 3.5), "per_pair": per_pair,
                        "status": "ok", "reason": None} if ok else None),
        "foreground": {"objects": [{"id": i, "frames": 8, "adadfrc_mean": float(v) * 0.8,
                                    "adap90": float(v)} for i, v in enumerate(objects)],
                       "status": "ok" if objects else "not_applicable",
                       "reason": None if objects else "no objects"},
        "epipolar": ({"epipolar_error": epipolar[0], "epipolar_error_score": 1 - epipolar[0] / 5,
                      "epipolar_inlier_rate": epipolar[1], "feature_match_coverage": epipolar[2],
                      "pairs": 4, "valid_pairs": 4, "fallback_used": False, "status": "ok",
                      "reason": None, "implementation": "torch"} if ok else None),
        "behaviour": behaviour, "prompt_category": prompt_category,
        "config": {"preset": "geocon"}, "config_hash": config_hash,
        "version": __version__, "backends": {"features": "fake", "flow": "fake", "masks": "none",
                                         "gate": "poses"},
        "timing_s": {"total": 0.01},
    }


def parallax_gate(statistic: float, low: float, high: float = 16.0,
                  configured=(3.0, 16.0)) -> dict:
    """A result's ``gate`` block: the weight-free gate decided H on ``parallax_magnitude`` =
    ``statistic`` ref px within the band (``low``, ``high``), configured as ``configured``."""
    return {"method": "flow", "statistic": statistic, "decision": "H",
            "thresholds": {"low": low, "high": high},
            "evidence": {"statistic_name": "parallax_magnitude",
                         "configured_band_ref_px": list(configured)}}


def v2_result(clip: str, **kw) -> dict:
    """A schema-2.0 result: the generator of its clip under ``model`` (the JSONL metadata of
    2.x) and the epipolar block's implementation under ``path``."""
    res = fake_result(clip, **kw)
    res["schema_version"] = "2.0"
    if res["epipolar"] is not None:
        res["epipolar"]["path"] = res["epipolar"].pop("implementation")
    return res


def _unit(s: str) -> float:
    return int(hashlib.sha256(s.encode()).hexdigest()[:8], 16) / 0xFFFFFFFF


class CountingScorer:
    """Injectable score_fn: deterministic fake numbers per clip_id, call counting, failures.

    Args:
        log: file that gets one line per call (survives a killed process).
        fail_on: clip_ids whose scoring raises RuntimeError.
        sleep_s: seconds to sleep inside each call (gives a test time to kill the process).
    """

    def __init__(self, log: Optional[Path] = None, fail_on: Sequence[str] = (),
                 sleep_s: float = 0.0):
        self.log = Path(log) if log else None
        self.fail_on = set(fail_on)
        self.sleep_s = sleep_s
        self.calls: list = []

    def __call__(self, entry, config, device):
        self.calls.append(entry.clip_id)
        if self.log is not None:
            with self.log.open("a") as fh:
                fh.write(entry.clip_id + "\n")
        if self.sleep_s:
            time.sleep(self.sleep_s)
        if entry.clip_id in self.fail_on:
            raise RuntimeError(f"boom on {entry.clip_id}")
        u = _unit(entry.clip_id)
        return fake_result(entry.clip_id, ir=0.9 + 0.1 * u, ge=0.5 + 2 * u,
                           regime="F" if u > 0.5 else "H",
                           prompt_category=entry.prompt_category,
                           statistic=0.1 * u, objects=[10 * u], path=entry.path,
                           config_hash=config.config_hash())


class PruningScorer(CountingScorer):
    """A CountingScorer that, when asked for clip ``at``, deletes the clip row of ``victim``
    from the SQLite store ``db`` (a concurrent ``geocon prune`` standing in), leaving that clip
    of the manifest without any stored row at the end of the run."""

    def __init__(self, db: Path, at: str, victim: str, **kw):
        super().__init__(**kw)
        self.db, self.at, self.victim = db, at, victim

    def __call__(self, entry, config, device):
        if entry.clip_id == self.at:
            from geocon_torch.bench import ResultStore
            with ResultStore(self.db) as other:
                other._write([("DELETE FROM clips WHERE clip_id = ?", (self.victim,))])
        return super().__call__(entry, config, device)


def write_clips(folder: Path, n: int, *, generator: str = "m", prefix: str = "c") -> list:
    """n small distinct files standing in for videos + manifest rows pointing at them."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(n):
        p = folder / f"{prefix}{i}.mp4"
        p.write_bytes(f"fake video {prefix}{i}".encode())
        rows.append({"clip_id": f"{prefix}{i}", "path": str(p), "generator": generator,
                     "category": f"C{i % 6 + 1}", "seed": i // 6, "prompt": f"p{i % 6}"})
    return rows


def write_jsonl(path: Path, rows) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def bad_rows_manifest(folder: Path, n: int) -> Path:
    """``folder/m.jsonl``: ``n`` good clips, a missing file ("gone") and the bytes of c0 under a
    second id ("dup")."""
    rows = write_clips(folder / "clips", n)
    rows.append({"clip_id": "gone", "path": "clips/nope.mp4", "generator": "m"})
    shutil.copy(folder / "clips" / "c0.mp4", folder / "clips" / "dup.mp4")
    rows.append({"clip_id": "dup", "path": "clips/dup.mp4", "generator": "m2"})
    return write_jsonl(folder / "m.jsonl", rows)


def bad_input_corpus(folder: Path) -> list:
    """Manifest rows (generator "m", category C2) of small real clips in ``folder``: a good one
    (6 frames of 128 x 96), a missing and a zero-byte file, a truncated and a text file
    ("videos" that do not decode), one frame, flat / noise / tiny clips and a cut."""
    from geocon_torch.synth import render_scene

    folder.mkdir(parents=True, exist_ok=True)
    rot = render_scene("C2", num_frames=6, size=(96, 128), seed=0).frames
    trans = render_scene("C3", num_frames=6, size=(96, 128), seed=1).frames
    g = torch.Generator().manual_seed(0)
    clips = {
        "good": rot,
        "one_frame": rot[:1],
        "grey": torch.full((6, 3, 96, 128), 128, dtype=torch.uint8),
        "noise": torch.randint(0, 256, (6, 3, 96, 128), generator=g, dtype=torch.uint8),
        "tiny16": rot[:, :, 40:56, 50:66].contiguous(),
        "cuts": torch.cat([rot[:3], trans[3:]]),
    }
    for name, frames in clips.items():
        write_video(folder / f"{name}.mp4", frames, fps=8)
    data = (folder / "good.mp4").read_bytes()
    (folder / "truncated.mp4").write_bytes(data[: len(data) * 2 // 5])
    (folder / "zero.mp4").write_bytes(b"")
    (folder / "text.mp4").write_text("this is not a video\n" * 20)
    names = ["good", "missing", "zero", "truncated", "text", "one_frame", "grey", "noise",
             "tiny16", "cuts"]
    return [{"clip_id": n, "path": str(folder / f"{n}.mp4"), "generator": "m", "category": "C2",
             "seed": i} for i, n in enumerate(names)]


# --- from test_foreground_scenes.py -------------------------------------------

def _texture(gen: torch.Generator, shape, sigma: float, dtype) -> torch.Tensor:
    t = gaussian_blur(torch.rand((1,) + tuple(shape), generator=gen, dtype=dtype), sigma)
    lo = t.amin(dim=(-1, -2), keepdim=True)
    hi = t.amax(dim=(-1, -2), keepdim=True)
    return (t - lo) / (hi - lo)


def _sample(tex: torch.Tensor, x: torch.Tensor, y: torch.Tensor, extent) -> torch.Tensor:
    """Bilinear sample of ``tex`` (1, C, h, w) spanning [0, extent_x] x [0, extent_y] at (x, y)."""
    grid = torch.stack([2 * x / extent[0] - 1, 2 * y / extent[1] - 1], -1).reshape(1, -1, 1, 2)
    out = F.grid_sample(tex, grid, mode="bilinear", padding_mode="reflection",
                        align_corners=False)
    return out.reshape(tex.shape[1], *x.shape)


def render_object_pair(size=(96, 128), radius=30.0, center=None, angle_deg=0.0, scale=1.0,
                       shift=(0.0, 0.0), ripple_px=0.0, ripple_wavelength=0.5, seed=0,
                       supersample=4, texture_sigma=1.2, dtype=torch.float64):
    """Frames t, t+1 of a textured disc over a static textured background.

    Object coordinates ``u`` (px, disc centre 0): frame t shows ``c + u``; frame t+1 shows
    ``G(u) = c + shift + s R (u + r(u))`` with ``r(u) = ripple_px (sin(2 pi u_y / L),
    sin(2 pi u_x / L))`` and ``L = ripple_wavelength * 2 * radius`` (the ripple scales with the
    object). Returns frames (2, 3, H, W) in [0, 1], mask at t (H, W) bool and the true forward
    flow at t (2, H, W) px (0 on the background).
    """
    gen = torch.Generator().manual_seed(seed)
    h, w = size
    ss = supersample
    c = torch.tensor(center if center is not None else (w / 2.0, h / 2.0), dtype=dtype)
    bg = _texture(gen, (3, h, w), texture_sigma, dtype)  # one texel per px, sampled bilinearly
    r_obj = float(radius)
    n = int(math.ceil(2 * r_obj * 1.2))
    obj = _texture(gen, (3, n, n), texture_sigma, dtype)
    off = n / 2.0
    ys = (torch.arange(h * ss, dtype=dtype) + 0.5) / ss - 0.5
    xs = (torch.arange(w * ss, dtype=dtype) + 0.5) / ss - 0.5
    yy, xx = torch.meshgrid(ys, xs, indexing="ij")
    bgv = _sample(bg, xx + 0.5, yy + 0.5, (w, h))
    a = math.radians(angle_deg)
    rot = scale * torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]],
                               dtype=dtype)
    length = ripple_wavelength * 2 * r_obj
    t = torch.tensor(shift, dtype=dtype)

    def ripple(u):
        return ripple_px * torch.stack([torch.sin(2 * math.pi * u[..., 1] / length),
                                        torch.sin(2 * math.pi * u[..., 0] / length)], -1)

    pts = torch.stack([xx, yy], -1)
    frames = []
    mask = None
    for k in range(2):
        if k == 0:
            u = pts - c
        else:  # invert G by fixed-point iteration (ripple gradient < 1)
            v = (pts - c - t) @ torch.linalg.inv(rot).T
            u = v.clone()
            for _ in range(30):
                u = v - ripple(u)
        inside = u.pow(2).sum(-1) < r_obj * r_obj
        img = torch.where(inside, _sample(obj, u[..., 0] + off, u[..., 1] + off, (n, n)), bgv)
        frames.append(F.avg_pool2d(img[None], ss)[0])
        if k == 0:
            mask = F.avg_pool2d(inside[None, None].to(dtype), ss)[0, 0] >= 0.5
    py, px = torch.meshgrid(torch.arange(h, dtype=dtype), torch.arange(w, dtype=dtype),
                            indexing="ij")
    p = torch.stack([px, py], -1)
    u = p - c
    g = c + t + (u + ripple(u)) @ rot.T
    flow = torch.where(mask[..., None], g - p, torch.zeros_like(p)).permute(2, 0, 1)
    return torch.stack(frames), mask, flow


def make_clip(frames: torch.Tensor, name: str = "synthetic") -> Clip:
    """A Clip from (T, 3, H, W) float [0, 1] frames."""
    u8 = (frames.clamp(0, 1) * 255).round().to(torch.uint8)
    t, _, h, w = u8.shape
    return Clip(frames=u8, fps=24.0, content_mask=torch.ones(h, w, dtype=torch.bool),
                frame_indices=torch.arange(t), source_size=(h, w), name=name)


# --- from test_background_metric.py -------------------------------------------

def make_clips(seed: int = 0, n: int = 4):
    """n clips (3, 3, 120, 160) uint8: a smooth random texture shifted by whole pixels per frame
    (pure translation of a plane: one homography per pair); clip 3 is a flat grey clip."""
    g = torch.Generator().manual_seed(seed)
    clips = []
    for k in range(n):
        tex = torch.rand(1, 3, 200, 240, generator=g)
        tex = F.avg_pool2d(tex, 5, stride=1, padding=2)
        tex = ((tex - tex.amin()) / (tex.amax() - tex.amin()) * 255).to(torch.uint8)[0]
        frames = torch.stack([tex[:, 20 + 2 * t * (k + 1): 140 + 2 * t * (k + 1), 30:190]
                              for t in range(3)])
        clips.append(frames if k != n - 1 else torch.full_like(frames, 128))
    return torch.stack(clips)


# --- from test_bench_runner.py ------------------------------------------------

def _torchrun() -> str:
    exe = Path(sys.executable).with_name("torchrun")
    if not exe.exists():
        pytest.skip("torchrun not installed beside the interpreter")
    return str(exe)


# --- from test_bench_migration.py ---------------------------------------------

def _v1(clip: str, category, **kw) -> dict:
    """A schema-1.0 result: one ``category`` field, no behaviour / prompt_category."""
    res = fake_result(clip, **kw)
    res.pop("behaviour")
    res.pop("prompt_category")
    res.update({"schema_version": "1.0", "category": category})
    return res


def _v1_rows() -> list:
    c4 = _v1("c4", "C4", statistic=0.01, objects=[3.0])
    c4.update({"model": "m", "seed": 1, "prompt": "a car"})
    stress = _v1("stress", "Stress", statistic=0.2, ir=0.6, ge=6.0)
    stress.update({"model": "m", "seed": 2})
    return [c4, stress]


# the format-1 schema, as geocon_torch wrote it before the prompt_category rename
_FORMAT_1 = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE results (content_hash TEXT NOT NULL, config_hash TEXT NOT NULL,
    status TEXT NOT NULL, reason TEXT, schema_version TEXT, version TEXT,
    result_json TEXT NOT NULL, created_at REAL NOT NULL, PRIMARY KEY (content_hash, config_hash));
CREATE TABLE clips (clip_id TEXT NOT NULL, config_hash TEXT NOT NULL, content_hash TEXT NOT NULL,
    model TEXT, model_version TEXT, category TEXT, prompt TEXT, seed INTEGER, scene TEXT,
    path TEXT, entry_json TEXT, updated_at REAL NOT NULL, PRIMARY KEY (clip_id, config_hash));
CREATE INDEX clips_by_result ON clips (content_hash, config_hash);
CREATE VIEW leaderboard AS
    SELECT c.clip_id, c.model, c.model_version, c.category, c.prompt, c.seed, c.scene, c.path,
           c.entry_json, r.status, r.reason, r.content_hash, r.config_hash, r.schema_version,
           r.version, r.result_json
    FROM clips c JOIN results r
      ON r.content_hash = c.content_hash AND r.config_hash = c.config_hash;
INSERT INTO meta VALUES ('store_format', '1');
"""


def format_1_rows():
    """(results rows, clips rows) of a format-1 store, as value tuples."""
    results, clips = [], []
    for i, res in enumerate(_v1_rows()):
        results.append((f"h{i}", "cfg", "ok", None, "1.0", "0.1.0", json.dumps(res), 0.0))
        clips.append((res["clip"], "cfg", f"h{i}", "m", None, "C4" if i == 0 else None,
                      "a car", i, f"s{i}", None, "{}", 0.0))
    return results, clips


# the format-2 schema, as geocon_torch wrote it before the generator rename (result schema 2.0)
_FORMAT_2 = (_FORMAT_1.replace("category TEXT", "prompt_category TEXT")
             .replace("c.category", "c.prompt_category")
             .replace("'store_format', '1'", "'store_format', '2'"))


def format_2_rows():
    """(results rows, clips rows) of a format-2 store: schema-2.0 results (``epipolar.path``),
    the generator in ``clips.model`` / ``model_version``."""
    results, clips = [], []
    for i, (cid, cat) in enumerate((("c1", "C1"), ("c3", "C3"))):
        res = v2_result(cid, prompt_category=cat, ir=0.9 + 0.05 * i)
        results.append((f"h{i}", "cfg", "ok", None, "2.0", "0.1.0", json.dumps(res), 0.0))
        clips.append((cid, "cfg", f"h{i}", f"gen{i}", f"v{i}", cat, "a car", i, f"s{i}",
                      f"/videos/{cid}.mp4", "{}", 0.0))
    return results, clips


# --- from test_bench_store.py -------------------------------------------------

def _clip(cid, generator="m", prompt_category="C1"):
    return {"clip_id": cid, "generator": generator, "prompt_category": prompt_category, "seed": 1,
            "scene": cid}


def pose(t, angle_deg=0.0) -> np.ndarray:
    """(4, 4) rigid pose: rotation of ``angle_deg`` about the y axis, translation ``t``."""
    a = math.radians(angle_deg)
    T = np.eye(4)
    T[:3, :3] = [[math.cos(a), 0, math.sin(a)], [0, 1, 0], [-math.sin(a), 0, math.cos(a)]]
    T[:3, 3] = t
    return T


def adjacent(n) -> torch.Tensor:
    """(n - 1, 2) long adjacent frame pairs (0, 1), (1, 2), ..."""
    return torch.stack([torch.arange(n - 1), torch.arange(1, n)], 1)


def identity_fits(mask: torch.Tensor) -> tuple:
    """(H fit, F fit) of P rows, every match an inlier with zero residual: H the identity, F a
    fixed skew matrix (what seed / segmentation tests put under the matches of a static
    background). mask: (P, N) bool."""
    from geocon_torch.types import Fit
    p, n = mask.shape
    valid = torch.ones(p, dtype=torch.bool)

    def fit(kind: str, model: torch.Tensor) -> Fit:
        return Fit(kind, model.expand(p, 3, 3).clone(), mask.clone(), torch.zeros(p, n), valid,
                   mask.sum(1), torch.ones(p, dtype=torch.long), torch.zeros(p))

    skew = torch.tensor([[0.0, -1.0, 0.2], [1.0, 0.0, -0.3], [-0.2, 0.3, 0.0]])
    return fit("H", torch.eye(3)), fit("F", skew)


# tiny random-init learned models (loaded through the real code from a saved state dict)
TINY_LOFTR = {"resnetfpn": {"initial_dim": 32, "block_dims": [32, 48, 64]},
              "coarse": {"d_model": 64, "d_ffn": 64, "nhead": 2, "layer_names": ["self", "cross"]},
              "fine": {"d_model": 32, "d_ffn": 32, "nhead": 2},
              "match_coarse": {"thr": 0.0}}
TINY_LIGHTGLUE = {"n_layers": 2, "descriptor_dim": 64, "num_heads": 2, "filter_threshold": 0.0}


def shifted_texture_frames(t: int = 3, h: int = 64, w: int = 80, seed: int = 0) -> torch.Tensor:
    """(t, 1, h, w) float frames of a smooth random texture, frame i shifted by (i, i) px."""
    g = torch.Generator().manual_seed(seed)
    base = F.avg_pool2d(torch.rand(1, 1, h + 8, w + 8, generator=g), 3, 1)
    return torch.stack([base[0, :, i:i + h, i:i + w] for i in range(t)])


# --- tagged Y'CbCr clips (test_decode_bitexact.py, test_hdr_sources.py) -----------

def yuv_frame(planes: Sequence[np.ndarray], pix_fmt: str, tags: Dict[str, int]) -> av.VideoFrame:
    """A frame of ``pix_fmt`` from its planes (each (h, w) integer codes at the plane's own
    size: uint8, or uint16 for > 8 bits) with the colour tags ``tags`` (frame attribute ->
    code, e.g. ``{"colorspace": 1, "color_range": 1}``)."""
    frame = av.VideoFrame(planes[0].shape[1], planes[0].shape[0], pix_fmt)
    for plane, data in zip(frame.planes, planes):
        data = np.ascontiguousarray(data)
        row = data.shape[1] * data.itemsize
        buf = np.zeros((data.shape[0], plane.line_size), np.uint8)
        buf[:, :row] = data.view(np.uint8).reshape(data.shape[0], row)
        plane.update(buf.tobytes())
    for key, value in tags.items():
        setattr(frame, key, value)
    return frame


def write_ffv1(path: Path, frames: Sequence[av.VideoFrame], tags: Dict[str, int]) -> Path:
    """Encode ``frames`` (one pixel format) losslessly (ffv1 in Matroska, 24 fps), the stream
    tagged with ``tags`` as :func:`yuv_frame` tags a frame."""
    with av.open(str(path), "w") as out:
        stream = out.add_stream("ffv1", rate=24)
        stream.width, stream.height = frames[0].width, frames[0].height
        stream.pix_fmt = frames[0].format.name
        for key, value in tags.items():
            setattr(stream.codec_context, key, value)
        for i, frame in enumerate(frames):
            frame.pts = i
            for packet in stream.encode(frame):
                out.mux(packet)
        for packet in stream.encode():
            out.mux(packet)
    return path


def toy_calibration_rows(regimes: str = "HF", **extra) -> list:
    """Toy calibration rows: 10 clean clips (GE 0.01-0.05 px at 256 px) and per clip corrupted
    rubber sheets at severity 0.25 / 0.5 / 1.0 (GE 0.03, 0.2-0.4, 0.5 px), gated ``regimes``
    in turn; ``extra`` fields go into every row; ``ge_norm`` = 4 ``ge_px`` (1024 px)."""
    rows = []
    for k in range(10):
        base = dict({"category": "C1", "motion": "static", "seed": k, "status": "ok",
                     "regime": regimes[k % len(regimes)], "ir": 1.0, "long_side": 256,
                     "pass": True}, **extra)
        rows.append(dict(base, corruption=None, severity=0.0, ge_px=0.01 + 0.01 * (k % 5)))
        for sev, ge in ((0.25, 0.03), (0.5, 0.2 + 0.05 * (k % 5)), (1.0, 0.5)):
            rows.append(dict(base, corruption="rubber_sheet", severity=sev, ge_px=ge))
    for r in rows:
        r["ge_norm"] = r["ge_px"] * 4
    return rows


def smooth_colour_noise(h: int, w: int, g: torch.Generator) -> torch.Tensor:
    """(3, h, w) float smooth colour noise in [0, 255] (a box-blurred uniform draw from
    ``g``, stretched to the full range): a texture SIFT and the change masks see."""
    t = F.avg_pool2d(F.avg_pool2d(torch.rand(1, 3, h, w, generator=g), 5, 1, 2), 3, 1, 1)[0]
    return (t - t.amin()) / (t.amax() - t.amin()) * 255


def low_contrast(frames: torch.Tensor, factor: float = 0.1) -> torch.Tensor:
    """(T, 3, H, W) uint8 with the contrast around the clip's mean scaled by ``factor``."""
    x = frames.float()
    m = x.mean()
    return ((x - m) * factor + m).round().clamp(0, 255).to(torch.uint8)


def break_backend(monkeypatch, backend: str = "lk-tracks") -> str:
    """Make the background section's feature stage raise a CheckpointError for ``backend`` (as
    a backend without its checkpoint would), every other backend as it is; the message."""
    from geocon_torch.errors import CheckpointError  # lazy: only these tests need it
    from geocon_torch.sections import background as bg  # lazy: only these tests need it

    real = bg.extract_correspondences
    message = f"the {backend!r} backend needs a local checkpoint"

    def broken(clip, pairs, features, **kw):
        if features.backend == backend:
            raise CheckpointError(message)
        return real(clip, pairs, features, **kw)

    monkeypatch.setattr(bg, "extract_correspondences", broken)
    return message


def release_scorer(version: str, errors: Sequence[str] = (), calls: Optional[list] = None):
    """A ``run_manifest`` score_fn whose fake results record the release ``version``;
    ``errors`` clip ids come back as that release's error rows (a refusal it stored, not an
    exception of this run); ``calls`` (a list) collects the clip ids scored."""
    def score(entry, cfg, dev):
        if calls is not None:
            calls.append(entry.clip_id)
        status = "error" if entry.clip_id in errors else "ok"
        res = fake_result(entry.clip_id, status=status, config_hash=cfg.config_hash())
        res["version"] = version
        return res
    return score


def fade_after(frames: torch.Tensor, textured: int = 5, flat: int = 6) -> torch.Tensor:
    """The first ``textured`` frames of ``frames`` (T, 3, H, W) uint8, then ``flat`` flat grey
    ones (levels 40, 50, ...): a clip whose median pair has no match, its first pairs many."""
    grey = torch.stack([torch.full_like(frames[0], 40 + 10 * k) for k in range(flat)])
    return torch.cat([frames[:textured], grey])


def score_background(frames: torch.Tensor, config=None, **kw) -> dict:
    """``score_clip(frames, preset="background", device="cpu", config=config, **kw)`` as a
    dict."""
    from geocon_torch import score_clip  # lazy: helpers is imported by every test module
    return score_clip(frames, preset="background", device="cpu", config=config, **kw).to_dict()


def stored_gate(decision: str, value: float, band, noise: float, **ev) -> dict:
    """A parallax_magnitude gate block as the pipeline stores it (decision, statistic ``value``
    ref px, the adapted ``band`` (low, high) ref px, the noise ref px; ``ev``: more evidence)."""
    evidence = {"statistic_name": "parallax_magnitude", "band_ref_px": list(band),
                "configured_band_ref_px": [3.0, 16.0], "noise_ref_px": noise,
                "noise_floor_ref_px": 4.5 * noise, "magnitude_ref_px": value,
                "magnitude_ci_ref_px": [value - 1.0, value + 2.0]}
    evidence.update(ev)
    return {"method": "parallax", "statistic": value, "decision": decision, "per_pair": None,
            "thresholds": {"low": band[0], "high": band[1]}, "evidence": evidence}


def cli_error_line(capsys, argv) -> str:
    """The one stderr line of ``geocon ARGV``, which must end with exit status 2 and no
    traceback."""
    from geocon_torch.cli import main

    rc = main(argv)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert rc == 2 and "Traceback" not in err, err
    assert len(lines) == 1, err
    return lines[0]
