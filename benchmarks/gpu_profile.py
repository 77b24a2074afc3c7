"""Where a GPU's time goes in the background metric on the CUDA default path (issue 21 item 4).

1. frames/s of ``BackgroundConsistency.update`` on B = 8 grounded clips x 16 frames at 640x384
   for each torch-sift variant, in the same run: the code before this benchmark (kornia's patch
   modules, TF32 convolutions in the pyramid), the default, the depthwise blur layout, the
   ``max_pool3d`` extrema filter, both, and cuDNN autotuning; the fastest is named;
2. the fastest at B = 32 x 16 at 640x384, B = 8 x 16 at 320x192 and at 1280x768 (peak memory);
3. torch-sift keypoints on the device against the CPU's on the same frames, with and without
   TF32 in the pyramid (fraction within 0.01 px / 0.5 px);
4. one profiled batch: the section's stage functions and torch-sift's steps labelled with
   ``record_function`` (CPU ms, device ms per label), the top kernels and the shapes of the
   costliest ops.

Usage: ``python benchmarks/gpu_profile.py [--device cuda] [--quick]`` (``--quick``: B = 2 clips x
4 frames at 160x96, two variants, no shape sweep; what ``--device cpu --quick`` runs in CI-sized
time). The last line is ``RESULT {json}``: ``variants``, ``best``, the shape sweep,
``vs_cpu_tf32_*`` and ``stages``.
"""
import argparse
import contextlib
import functools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import torch
from torch.profiler import profile, ProfilerActivity, record_function
from benchmarks.batching import grounded_batch, runner
import geocon_torch.sections.background as bg
import geocon_torch.features.sift_scale_space as sss
from geocon_torch.features import torch_sift

ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
ap.add_argument("--quick", action="store_true", help="B=2 x 4 frames at 160x96, two variants")
args = ap.parse_args()
dev = args.device
cuda = dev.startswith("cuda")
dtype_key = torch.device(dev).type
cfg = {"features": {"backend": "torch-sift"}, "epipolar": {"features": "torch-sift"}}
fn = runner("background", cfg)
sync = torch.cuda.synchronize if cuda else (lambda: None)
out = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name() if cuda else "cpu"}

import kornia.feature as KF
ORIG = (torch_sift.dominant_orientation, torch_sift.sift_descriptor)
@contextlib.contextmanager
def variant(blur="conv", extrema="shift", tf32=False, kornia_patch=False, bench=False):
    saved = (dict(sss.BLUR_LAYOUT), dict(sss.EXTREMA_FILTER), sss.PYRAMID_TF32,
             torch.backends.cudnn.benchmark)
    sss.BLUR_LAYOUT[dtype_key], sss.EXTREMA_FILTER[dtype_key] = blur, extrema
    sss.PYRAMID_TF32 = tf32
    torch.backends.cudnn.benchmark = bench
    if kornia_patch:
        ko = KF.PatchDominantGradientOrientation(19).to(dev)
        kd = KF.SIFTDescriptor(32, rootsift=True).to(dev)
        torch_sift.dominant_orientation = lambda p: ko(p)
        torch_sift.sift_descriptor = lambda p, rs: kd(p)
    try:
        yield
    finally:
        torch_sift.dominant_orientation, torch_sift.sift_descriptor = ORIG
        sss.BLUR_LAYOUT.clear(); sss.BLUR_LAYOUT.update(saved[0])
        sss.EXTREMA_FILTER.clear(); sss.EXTREMA_FILTER.update(saved[1])
        sss.PYRAMID_TF32, torch.backends.cudnn.benchmark = saved[2], saved[3]

def fps(b, t, size, repeats):
    v = grounded_batch(b, t, size, dev)
    fn(v); sync()
    best = 1e9
    for _ in range(repeats):
        sync(); t0 = time.perf_counter(); fn(v); sync(); best = min(best, time.perf_counter() - t0)
    r = {"seconds": round(best, 4), "frames_per_s": round(b * t / best, 1)}
    if cuda:
        r["max_mem_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        torch.cuda.reset_peak_memory_stats()
    return r

VARIANTS = {"before(kornia patch, tf32 conv)": dict(kornia_patch=True, tf32=True),
            "default": {}, "depthwise": dict(blur="depthwise"), "pool": dict(extrema="pool"),
            "depthwise+pool": dict(blur="depthwise", extrema="pool"),
            "default+cudnn.benchmark": dict(bench=True)}
if args.quick:
    VARIANTS = {"default": {}, "depthwise": dict(blur="depthwise")}
size0 = (96, 160) if args.quick else (384, 640)
b0, t0_ = (2, 4) if args.quick else (8, 16)
out["variants"] = {}
for name, kw in VARIANTS.items():
    with variant(**kw):
        out["variants"][name] = fps(b0, t0_, size0, 1 if args.quick else 2)
    print(f"B{b0}xT{t0_}x{size0}: {name:<34} {out['variants'][name]}", flush=True)
best = max((n for n in VARIANTS if not n.startswith("before")),
           key=lambda n: out["variants"][n]["frames_per_s"])
out["best"] = best
ref = next((n for n in VARIANTS if n.startswith("before")), "default")  # the same run's reference
out["ratio_vs_reference"] = {n: round(v["frames_per_s"] / out["variants"][ref]["frames_per_s"], 3)
                             for n, v in out["variants"].items()}
print(f"best variant: {best}; frames/s ratio vs {ref}: {out['ratio_vs_reference']}", flush=True)
with variant(**VARIANTS[best]):
    sweep = [(32, 16, (384, 640)), (8, 16, (192, 320)), (8, 16, (768, 1280))]
    for b, t, size in ([] if args.quick else sweep):
        key = f"B{b}xT{t}x{size[0]}x{size[1]}"
        out[key] = fps(b, t, size, 2)
        print(key, out[key], flush=True)

# GPU keypoints vs the CPU's on the same frames, with and without TF32 in the pyramid
if cuda and not args.quick:
    gray = grounded_batch(1, 8, (384, 640), "cpu")[0].float().mean(1, keepdim=True) / 255
    ref = torch_sift.TorchSIFT(2000, device="cpu").extract(gray)
    for tf32 in (False, True):
        with variant(tf32=tf32):
            k = torch_sift.TorchSIFT(2000, device=dev).extract(gray.to(dev))
        k = type(k)(**{f: getattr(k, f) for f in ("xy", "descriptors", "scores", "mask")}, extra={})
        d = torch.cdist(k.xy.cpu().double(), ref.xy.double())  # (T, N, N)
        d = d.masked_fill(~(k.mask.cpu()[:, :, None] & ref.mask[:, None, :]), 1e9).amin(2)
        valid = k.mask.cpu()
        r = {"gpu_kps": int(valid.sum()), "cpu_kps": int(ref.mask.sum()),
             "within_0.01px": round(float((d[valid] < 0.01).double().mean()), 4),
             "within_0.5px": round(float((d[valid] < 0.5).double().mean()), 4)}
        out[f"vs_cpu_tf32_{tf32}"] = r
        print("GPU vs CPU keypoints, pyramid TF32", tf32, r, flush=True)

def label(obj, attr, name):
    f = getattr(obj, attr)
    @functools.wraps(f)
    def g(*a, **k):
        with record_function("fn:" + name):
            return f(*a, **k)
    setattr(obj, attr, g)
for attr in ("_open", "_match_all", "fit_merged", "_segment_all", "_score_all", "_fall_back",
             "gate_view_correspondences"):
    if hasattr(bg, attr):
        label(bg, attr, "bg." + attr)
label(torch_sift.TorchSIFT, "_chunk", "torch_sift_chunk")
for attr, name in (("gaussian_pyramid", "pyramid"), ("detect", "dog_detect"),
                   ("dominant_orientation", "orientation"), ("sift_descriptor", "descriptor"),
                   ("atlas_patches", "atlas_patches")):
    label(torch_sift, attr, name)
v = grounded_batch(b0, t0_, size0, dev)
acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
with variant(**VARIANTS[best]):
    with profile(activities=acts, record_shapes=True) as prof:
        fn(v); sync()
ka = prof.key_averages()
rows = [(e.key, e.count, e.cpu_time_total / 1e3, getattr(e, "device_time_total", 0) / 1e3)
        for e in ka if e.key.startswith("fn:")]
print(f"{'label':<34}{'calls':>6}{'cpu ms':>10}{'device ms':>11}")
for k, c, cpu_ms, d_ms in sorted(rows, key=lambda r: -r[2]):
    print(f"{k:<34}{c:>6}{cpu_ms:>10.1f}{d_ms:>11.1f}")
out["stages"] = {k: {"calls": c, "cpu_ms": round(cpu_ms, 1), "device_ms": round(d_ms, 1)}
                 for k, c, cpu_ms, d_ms in rows}
sort = "cuda_time_total" if cuda else "cpu_time_total"
print(ka.table(sort_by=sort, row_limit=30, max_name_column_width=70))
print(ka.table(sort_by="self_cpu_time_total", row_limit=12, max_name_column_width=60))
shp = prof.key_averages(group_by_input_shape=True)
print(shp.table(sort_by=sort, row_limit=25, max_name_column_width=40, max_shapes_column_width=70))
print("RESULT " + json.dumps(out))
