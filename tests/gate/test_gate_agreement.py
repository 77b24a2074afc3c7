"""The weight-free gate's ``parallax_magnitude``: normalised for resolution and keypoint density,
an explicit U band with its evidence, and decisions that agree across backends and sizes."""
import importlib.util
from types import SimpleNamespace

import pytest
import torch
from helpers import REPO_ROOT

from geocon_torch import score_clip
from geocon_torch.config import GateConfig, load_config
from geocon_torch.gate.parallax import gate_from_parallax, parallax_statistics, quantile_bounds
from geocon_torch.gate.select import gate_source
from geocon_torch.gate.view import view_long_side
from geocon_torch.io import read_clip, write_image_folder
from geocon_torch.io.pairs import gate_pair_tiers, parallax_gate_pairs
from geocon_torch.synth import EXPECTED_REGIME, render_scene

CFG = GateConfig()  # statistic parallax_magnitude, band [3, 16] reference px


def _stats(r_h_ref, sampson_ref, long_side, n_pairs=3):
    """parallax_statistics of (n_pairs, N) residuals given in reference px (1024 long side),
    converted to the working px of ``long_side``."""
    r_h = torch.as_tensor(r_h_ref, dtype=torch.float64).expand(n_pairs, -1) * long_side / 1024
    r_fpx = torch.as_tensor(sampson_ref, dtype=torch.float64).expand(n_pairs, -1) * long_side / 1024
    mask = torch.ones_like(r_h, dtype=torch.bool)
    fit = SimpleNamespace(valid=torch.ones(n_pairs, dtype=torch.bool))
    x = torch.zeros(*r_h.shape, 2, dtype=torch.float64)
    return parallax_statistics(fit, fit, x, x, mask, residuals=(r_h, torch.zeros_like(r_h), r_fpx),
                               long_side_px=long_side, gate=CFG)


def test_quantile_bounds_closed_form():
    v = torch.arange(1000, dtype=torch.float64).unsqueeze(0)
    q, lo, hi = quantile_bounds(v, v >= 0, 0.9, 1.645)
    half = 1.645 * (0.09 / 1000) ** 0.5 * 999
    assert float(q) == pytest.approx(0.9 * 999)
    assert float(lo) == pytest.approx(0.9 * 999 - half) and float(hi) == pytest.approx(
        0.9 * 999 + half)
    # fewer values -> a wider interval (density enters the confidence, not the value)
    q_small, lo_s, hi_s = quantile_bounds(v[:, ::10], v[:, ::10] >= 0, 0.9, 1.645)
    assert float(hi_s - lo_s) > 2.5 * float(hi - lo)


@pytest.mark.parametrize("long_side", [256, 512, 1024])
def test_magnitude_is_resolution_invariant(long_side):
    """The same parallax (in units of the long side) gives the same value at any size."""
    r_h = torch.linspace(0.0, 40.0, 401)  # reference px: q90 = 36
    st = _stats(r_h, torch.full((401,), 0.2), long_side)
    assert st["parallax_magnitude"].tolist() == pytest.approx([36.0] * 3)
    assert st["noise_ref_px"].tolist() == pytest.approx([0.2] * 3)
    gate = gate_from_parallax(st, CFG)
    assert gate.decision == "F" and gate.statistic == pytest.approx(36.0)


def test_u_band_near_threshold_records_evidence():
    """A parallax quantile near the F threshold (its interval straddles it) is U, with the
    statistic, its interval, the band and the counts in the evidence."""
    r_h = torch.linspace(0.0, 17.5, 200)  # q90 ~ 15.7 reference px, interval ~[15.1, 16.4]
    gate = gate_from_parallax(_stats(r_h, torch.full((200,), 0.2), 512), CFG)
    ev = gate.evidence
    assert gate.decision == "U" and gate.method == "parallax"
    lo, hi = ev["magnitude_ci_ref_px"]
    assert lo < 16.0 < hi and ev["band_ref_px"] == [3.0, 16.0]
    assert ev["f_inliers_per_pair"] == [200, 200, 200] and "not clear of the band" in ev["why_u"]
    assert gate.thresholds == {"low": 3.0, "high": 16.0}
    assert ev["u_resolved"] in ("H", "F")  # resolved downstream by GRIC (resolve_u)


def test_clear_h_few_matches_u_and_noise_limited_u():
    quiet = torch.linspace(0.0, 2.0, 400)  # q90 1.8 ref px, far under the band
    assert gate_from_parallax(_stats(quiet, torch.full((400,), 0.2), 256), CFG).decision == "H"
    # same distribution from only 30 matches with one large value near the top: the interval
    # reaches above the H bound -> U (too few matches to call it)
    few = torch.cat([torch.linspace(0.0, 2.0, 27), torch.tensor([2.5, 6.0, 9.0])])
    g_few = gate_from_parallax(_stats(few, torch.full((30,), 0.2), 256), CFG)
    assert g_few.decision == "U" and g_few.evidence["magnitude_ci_ref_px"][1] > 3.0
    # a noise floor (4.5 x 2 ref px) above half the F threshold: H cannot be told from a
    # parallax of 8 ref px, although the quantile (9) is under the noise bound
    noisy = gate_from_parallax(_stats(quiet * 5, torch.full((400,), 2.0), 256), CFG)
    assert noisy.decision == "U" and "noise floor" in noisy.evidence["why_u"]
    assert noisy.thresholds["low"] == pytest.approx(9.0)


def _decisions(cat, opts, settings):
    out = {}
    for s in sorted({s for _, s in settings}):
        frames = render_scene(cat, num_frames=5, size=(s * 3 // 4, s), seed=0, **opts).frames
        for b in [b for b, s2 in settings if s2 == s]:
            cfg = {"features": {"backend": b}, "gate": {"method": "parallax"},
                   "io": {"long_side": s}}
            d = score_clip(frames, config=cfg, preset="background", device="cpu").to_dict()
            out[(b, s)] = d["gate"]["decision"]
    return out


@pytest.mark.parametrize("cat,opts", [("C2", {"motion": "pan"}), ("C3", {"motion": "truck"})])
def test_backends_and_sizes_agree_on_grounded_clips(cat, opts):
    """opencv-sift at 256 and 512 px, kornia-sift and torch-sift (the CUDA default, whose gate
    view is torch-sift too) at 256 px (both axes, kept fast): one decision, the category's
    regime."""
    dec = _decisions(cat, opts, [("opencv-sift", 256), ("opencv-sift", 512), ("kornia-sift", 256),
                                 ("torch-sift", 256)])
    assert set(dec.values()) == {EXPECTED_REGIME[cat]}, dec


def _sweep_module():
    path = REPO_ROOT / "benchmarks" / "gate_sweep.py"
    spec = importlib.util.spec_from_file_location("gate_sweep", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.mark.slow
def test_agreement_rate_over_grounded_clips():
    """benchmarks/gate_sweep.py agreement mode: >= 95 % of the grounded clips (every category,
    two seeds, 8 frames) get one decision across opencv-sift / kornia-sift and 256 / 512 /
    1024 px, and every grounded clip gets its category's regime."""
    sweep = _sweep_module()
    args = SimpleNamespace(backends="opencv-sift,kornia-sift", sizes="256,512,1024",
                           learned_sizes=None, seeds=2, frames=8, real=False, real_frames=8,
                           scenes=6, statistic=None, device="cpu")
    out = sweep.agreement(args)
    assert out["agreement"]["overall"] >= 0.95, out["disagreeing"]
    assert out["grounded_all_correct"] >= 0.95


def test_realshort_gate_does_not_flip_with_the_backend(shared_data):
    """The issue's case: realshort (16 frames, 256 px) was H with opencv-sift and F with
    kornia-sift. The gate now reads its own view (opencv-sift at the source's 320 px), so both
    backends get the same gate rows: the same U decision with the same evidence (parallax ~5-7
    reference px within the noise floor) and the same regime (F: the clip is a handheld
    translation, ../shared/data/README.md)."""
    out = {}
    for b in ("opencv-sift", "kornia-sift"):
        cfg = {"features": {"backend": b}, "gate": {"method": "parallax"},
               "io": {"long_side": 256, "max_frames": 16}}
        out[b] = score_clip(shared_data / "real" / "realshort.mp4", config=cfg,
                            preset="background", device="cpu").to_dict()
    gates = [r["gate"] for r in out.values()]
    assert {g["decision"] for g in gates} == {"U"}, gates
    assert {r["regime"] for r in out.values()} == {"F"}
    a, b = (g["evidence"]["magnitude_ci_ref_px"] for g in gates)
    assert a == pytest.approx(b, rel=1e-6)
    for r in out.values():
        view = r["backends"]["gate_view"]
        assert (view["backend"], view["long_side"], view["source"]) == ("opencv-sift", 320, "file")
        g = r["gate"]
        lo, hi = g["evidence"]["magnitude_ci_ref_px"]
        assert lo < g["thresholds"]["high"]  # not F; not H: above the H bound or noise-limited
        assert hi > g["thresholds"]["low"] or "noise floor" in g["evidence"]["why_u"]


def test_gate_view_reads_the_same_pixels_at_any_working_size(tmp_path):
    """A 480x360 file scored at io.long_side 192, 256 and 384: the gate reads it at its view
    side (opencv-sift at 320 px). Below the view side the gate frames are re-read from the file,
    so the gate rows, their fits (in view px) and the statistic are identical; above it the
    working frames are shrunk to the view side (a resampling apart, the same value); working
    frames upscaled from the file (640 px) are not shrunk back: the file is read at the view
    side, the same pixels as at 192 / 256."""
    frames = render_scene("C3", num_frames=6, size=(360, 480), seed=0, motion="truck").frames
    folder = write_image_folder(tmp_path / "clip", frames)
    res = {}
    for view, side in (("opencv-sift", 192), ("opencv-sift", 256), ("opencv-sift", 384),
                       ("opencv-sift", 640), ("same", 192)):
        cfg = {"gate": {"method": "parallax", "view_long_side": 320, "view_backend": view},
               "io": {"long_side": side}, "features": {"backend": "opencv-sift"},
               "segment": {"method": "none"}}
        res[(view, side)] = score_clip(folder, config=cfg, preset="background",
                                       device="cpu").to_dict()
    ev = {k: r["gate"]["evidence"] for k, r in res.items()}
    a, b, c = (ev[("opencv-sift", s)] for s in (192, 256, 384))
    assert a["magnitude_ref_px"] == pytest.approx(b["magnitude_ref_px"], rel=1e-4)
    assert a["magnitude_ci_ref_px"] == pytest.approx(b["magnitude_ci_ref_px"], rel=1e-4)
    assert a["noise_ref_px"] == pytest.approx(b["noise_ref_px"], rel=1e-4)
    assert c["magnitude_ref_px"] == pytest.approx(a["magnitude_ref_px"], rel=0.05)
    up = ev[("opencv-sift", 640)]
    for key in ("magnitude_ref_px", "magnitude_ci_ref_px", "noise_ref_px"):
        assert up[key] == pytest.approx(a[key], rel=1e-4), key
    assert {r["gate"]["decision"] for k, r in res.items()} == {"F"}
    for side in (192, 640):
        view = res[("opencv-sift", side)]["backends"]["gate_view"]
        assert (view["long_side"], view["source"]) == (320, "file")
    view = res[("opencv-sift", 384)]["backends"]["gate_view"]
    assert (view["backend"], view["long_side"], view["source"]) == ("opencv-sift", 320,
                                                                    "working frames")
    assert view["scale_xy"] == pytest.approx([320 / 384, 240 / 288])
    assert res[("same", 192)]["backends"]["gate_view"]["source"] == "scoring"
    assert "view" not in ev[("same", 192)]


def test_image_pair_gate_reads_its_view_at_any_working_size(tmp_path):
    """A two-image folder (T = 2) has one gate pair, (0, 1), read through the gate's view: at
    io.long_side 192 and 640 (a 480-px source) the view reads the files at its 320-px side, so
    the gate statistic is the same; before, a pair had no gate pair and the gate read the
    evaluated pair at the working size (a regime that could change with it)."""
    assert parallax_gate_pairs(2).tolist() == [[0, 1]]
    assert gate_pair_tiers(parallax_gate_pairs(2)).tolist() == [0]
    assert parallax_gate_pairs(1).shape == (0, 2)
    assert parallax_gate_pairs(2, "adjacent").shape == (0, 2)
    frames = render_scene("C3", num_frames=6, size=(360, 480), seed=0, motion="truck").frames
    folder = write_image_folder(tmp_path / "pair", frames[[0, 5]])
    ev, views = {}, {}
    for side in (192, 640):
        cfg = {"gate": {"method": "parallax", "view_long_side": 320},
               "io": {"long_side": side}, "features": {"backend": "opencv-sift"},
               "segment": {"method": "none"}}
        d = score_clip(folder, config=cfg, preset="background", device="cpu").to_dict()
        ev[side], views[side] = d["gate"]["evidence"], d["backends"]["gate_view"]
        assert d["gate"]["decision"] == "F"
        assert ev[side]["gate_pairs"] == [[0, 1]]
        assert (views[side]["long_side"], views[side]["source"]) == (320, "file")
    for key in ("magnitude_ref_px", "magnitude_ci_ref_px", "noise_ref_px"):
        assert ev[640][key] == pytest.approx(ev[192][key], rel=1e-4), key


def test_gate_view_of_a_tensor_is_capped_by_its_pixels():
    """A tensor has nothing finer than its own pixels: the view side is min(view_long_side,
    the source side); above the working side the view reads the tensor again at that side, as
    it does a file."""
    frames = render_scene("C1", num_frames=4, size=(120, 160), seed=0).frames
    clip = read_clip(frames, long_side=None)
    cfg = load_config({"gate": {"view_long_side": 512}})
    assert view_long_side(clip, cfg) == 160
    assert view_long_side(clip, cfg.replace(gate={"view_backend": "same"})) == 160
    d = score_clip(frames, config={"io": {"long_side": 128}, "gate": {"method": "parallax"}},
                   preset="background", device="cpu").to_dict()
    view = d["backends"]["gate_view"]
    assert (view["long_side"], view["source"], view["scale_xy"]) == (160, "tensor",
                                                                     [1.25, 1.25])


def test_gate_pair_tiers_and_fallback_order():
    """Wide pairs, then the halves, then the quarters; the gate reads the widest tier with a
    valid pair (a cut or a fast pan empties the wide ones), else the evaluated pairs."""
    gp = parallax_gate_pairs(9)
    assert gp.tolist() == [[0, 8], [0, 7], [0, 6], [1, 8], [1, 7], [2, 8], [0, 4], [4, 8],
                           [0, 2], [2, 4], [4, 6], [6, 8]]
    assert gate_pair_tiers(gp).tolist() == [0] * 6 + [1] * 2 + [2] * 4
    assert gate_pair_tiers(parallax_gate_pairs(4)).tolist() == [0, 1, 1]  # no quarters
    rows = torch.arange(15)  # 3 evaluated rows, then the 12 gate rows
    stats = {"valid": torch.zeros(15, dtype=torch.bool), "v": rows.double()}
    stats["valid"][[12, 13]] = True  # two quarters valid
    src, used = gate_source(stats, rows[:3], rows[3:], gp)
    assert src["v"].tolist() == [11.0, 12.0, 13.0, 14.0] and used == gp[8:].tolist()
    stats["valid"][4] = True  # a wide pair is valid: only the wide tier is read
    src, used = gate_source(stats, rows[:3], rows[3:], gp)
    assert src["v"].tolist() == [3.0, 4.0, 5.0, 6.0, 7.0, 8.0] and used == gp[:6].tolist()
    stats["valid"][:] = False
    stats["valid"][0] = True
    assert gate_source(stats, rows[:3], rows[3:], gp)[1] == "evaluated pairs"


def test_gric_delta_and_parallax_excess_closed_form():
    """Torr's GRIC (r = 4, lambda1 = ln 4, lambda2 = ln 4n, lambda3 = 2; H: d = 2, k = 8, e^2 =
    r_sym^2 / 2; F: d = 3, k = 7, e^2 = Sampson^2) and the 6-sigma parallax excess, with sigma =
    median pixel Sampson / 0.6745 = 1 px, recomputed in numpy from the residuals."""
    import numpy as np

    n = 101
    r_h = np.linspace(0.0, 10.0, n)  # symmetric transfer px
    r_f = np.full(n, 0.6745) * np.linspace(0.5, 1.5, n)  # pixel Sampson px: median 0.6745
    st = _stats(r_h, r_f, 1024, n_pairs=1)
    sigma = np.median(r_f) / 0.6745
    assert sigma == pytest.approx(1.0)

    def gric(e2, d, k):
        return (np.minimum(e2 / sigma ** 2, 2.0 * (4 - d)).sum() + np.log(4) * d * n
                + np.log(4 * n) * k)

    delta = (gric(r_h ** 2 / 2, 2, 8) - gric(r_f ** 2, 3, 7)) / n
    assert float(st["gric_delta"][0]) == pytest.approx(delta, rel=1e-12)
    assert float(st["parallax_excess"][0]) == pytest.approx(np.mean(r_h > 6 * sigma))
    assert float(st["parallax_excess"][0]) == pytest.approx(40 / 101)
    assert float(st["residual_parallax"][0]) == pytest.approx(np.median(r_h) / 2.0)
