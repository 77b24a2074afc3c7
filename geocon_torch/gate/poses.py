"""Translation gate from pose logs (paper eq. 5, sec. 4.2 and 6.2-6.4).

Pose convention: a *relative* pose of a pair (i, j) is the 4x4 rigid transform ``T_ij = [R t; 0 1]``
mapping camera-i coordinates to camera-j coordinates (what DUSt3R's first/last pair gives, in its
unit-scale scene normalisation). ``t_inf = max(|t_x|, |t_y|, |t_z|)``; the clip gate uses the
first/last pose (Algorithm 1 A): ``t_inf <= hysteresis_low`` -> H, ``>= hysteresis_high`` -> F, in
between U (both models are fitted, the better supported is used). ``tau_t`` (eq. 5, 0.04) is
recorded with the binary verdict ``t_inf > tau_t`` for comparison with the paper's tables.

Accepted pose logs (:func:`load_pose_log`):

* JSON: a 4x4 nested list (the first/last relative pose); ``{"relative_pose": 4x4}``;
  ``{"poses": [4x4 | null, ...], "pairs": [[i, j], ...]}`` (relative poses per pair; ``pairs``
  optional = the video's adjacent frame pairs (0, 1), (1, 2), ... in order, composed for wider
  pairs such as those of a strided clip; ``null`` = missing); ``{"absolute_poses": [4x4, ...]}``
  (per-frame world-to-camera poses; relative poses are derived as ``A_j A_i^-1``). A ``geocon
  synth`` / ``demo`` ground-truth JSON (``"generator": "geocon-synth"``) is read as per-frame
  poses: its ``poses`` are world-to-camera poses (files written since also carry them as
  ``absolute_poses``).
* ``.npz`` with the same keys (``relative_pose`` (4, 4), ``poses`` (P, 4, 4) + optional
  ``pairs`` (P, 2) and ``valid`` (P,), ``absolute_poses`` (T, 4, 4)); NaN entries mean missing.
* tensors / arrays: (4, 4) first/last pose or (P, 4, 4) per-pair poses. Tensors on any device
  (also inside lists and mappings, also ones that require grad) are read as host data.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Tuple, Union

import numpy as np
import torch

from .._json import not_a_file, npz_header, open_npz, read_json_file
from ..categories import SYNTH_GENERATOR
from ..config import GateConfig
from ..errors import InputError, ShapeError
from .decision import CODE, GateDecision, codes_to_names, hysteresis, threshold_decision

PoseSource = Union[str, Path, dict, list, np.ndarray, torch.Tensor, "PoseLog"]
#: what a pose .npz that cannot be read should have been
POSES_NPZ_HINT = ("give an .npz written by np.savez with a 'relative_pose', 'poses' or "
                  "'absolute_poses' array, or a JSON pose log")
#: most entries (poses, pairs, flags: its first axis) an array of a pose .npz may declare
MAX_POSE_LOG_ENTRIES = 10 ** 6
#: most bytes the arrays of a pose .npz may declare together: three float64 (10^6, 4, 4) pose
#: arrays (384 MB). Both bounds are checked on the .npy headers before any array is read: a
#: small compressed file can declare many GB.
MAX_POSE_NPZ_BYTES = 3 * MAX_POSE_LOG_ENTRIES * 4 * 4 * 8


@dataclass
class PoseLog:
    """Poses read from a log.

    Attributes:
        relative: (P, 4, 4) float64 relative poses (camera i -> camera j); all zeros where
            missing (as read by :func:`load_pose_log`: no NaN / inf entry is kept).
        present: (P,) bool, False where a pose is missing (DUSt3R failure, a NaN / inf entry,
            null, ``valid`` False).
        pairs: (P, 2) long frame pairs of ``relative`` or None (= adjacent pairs in order, or, for
            a single pose, the first/last pair).
        absolute: (T, 4, 4) float64 world-to-camera poses when the log gives them, else None.
        source: where the log came from (path or "tensor").
    """

    relative: torch.Tensor
    present: torch.Tensor
    pairs: Optional[torch.Tensor] = None
    absolute: Optional[torch.Tensor] = None
    source: str = "tensor"

    def for_pairs(self, pairs: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """Relative poses (P, 4, 4) and presence (P,) for the frame ``pairs`` (P, 2), the
        log's (the video's) frame numbers. A log of poses without ``pairs`` lists the adjacent
        pairs (0, 1), (1, 2), ...: a wider pair (i, j) composes the poses of i..j-1; a pair
        past the log's end is missing."""
        pairs = pairs.to("cpu", torch.long)
        if self.absolute is not None:
            a = self.absolute
            if int(pairs.max()) >= a.shape[0]:
                raise InputError(f"pose log {self.source} has {a.shape[0]} poses, pairs need "
                                  f"frame {int(pairs.max())}")
            rel = a[pairs[:, 1]] @ torch.linalg.inv(a[pairs[:, 0]])
            present = torch.isfinite(rel).flatten(1).all(1)
            return _zero_missing(rel, present), present
        if self.pairs is None and self.relative.shape[0] == 1:  # the first/last pose
            if pairs.shape[0] != 1:
                raise InputError(
                    f"pose log {self.source} holds one pose (the first/last pair) but the "
                    f"clip has {pairs.shape[0]} pairs; give one pose per adjacent frame pair "
                    f"or a 'pairs' field")
            return self.relative, self.present
        if self.pairs is None:
            return compose_chains(self.relative, self.present, pairs)
        key = {tuple(p): k for k, p in enumerate(self.pairs.tolist())}
        idx = torch.tensor([key.get(tuple(p), -1) for p in pairs.tolist()], dtype=torch.long)
        rel = self.relative[idx.clamp_min(0)]
        present = self.present[idx.clamp_min(0)] & (idx >= 0)
        return torch.where(present.view(-1, 1, 1), rel, torch.zeros_like(rel)), present

    def first_last(self, last: int, first: int = 0) -> Tuple[torch.Tensor, bool]:
        """The relative pose (4, 4) of frames (``first``, ``last``) (the log's frame numbers)
        and whether it is present.

        A single logged pose is taken as the first/last pose; a log without ``pairs`` composes
        its adjacent poses (:meth:`for_pairs`); a log with ``pairs`` but without this one
        composes adjacent relative poses when the log lists the adjacent pairs between them.
        """
        if self.absolute is None and self.pairs is None and self.relative.shape[0] == 1:
            return self.relative[0], bool(self.present[0])
        rel, present = self.for_pairs(torch.tensor([[first, last]]))
        if bool(present[0]) or self.absolute is not None or self.pairs is None:
            return rel[0], bool(present[0])
        steps, ok = self.for_pairs(torch.stack([torch.arange(first, last),
                                                torch.arange(first + 1, last + 1)], 1))
        rel, present = compose_chains(steps, ok, torch.tensor([[0, last - first]]))
        return rel[0], bool(present[0])


def _zero_missing(rel: torch.Tensor, present: torch.Tensor) -> torch.Tensor:
    """``rel`` (P, 4, 4) with every pose that is not ``present`` (P,) all zeros (a pose with
    one NaN / inf entry is missing as a whole: none of its entries is kept)."""
    return torch.where(present.view(-1, 1, 1), rel, torch.zeros_like(rel))


def compose_chains(steps: torch.Tensor, present: torch.Tensor, pairs: torch.Tensor
                   ) -> Tuple[torch.Tensor, torch.Tensor]:
    """Relative poses of frame ``pairs`` (P, 2) long, (i, j) with i < j, composed from adjacent
    poses ``steps`` (N, 4, 4) (``steps[k]``: frame k -> k + 1) with presence (N,): (P, 4, 4)
    ``steps[j-1] @ ... @ steps[i]`` (zeros where missing) and (P,) bool, False when a step is
    missing or the pair is not i < j <= N. One matrix product per step of the longest chain
    (host data, not a hot path)."""
    n = int(steps.shape[0])
    i, j = pairs[:, 0], pairs[:, 1]
    ok = (i >= 0) & (j > i) & (j <= n)
    span = torch.where(ok, j - i, torch.zeros_like(i))
    out = torch.eye(4, dtype=steps.dtype).expand(pairs.shape[0], 4, 4).clone()
    for s in range(int(span.max()) if span.numel() else 0):
        k = (i + s).clamp(0, max(n - 1, 0))
        step = s < span
        out = torch.where(step.view(-1, 1, 1), steps[k] @ out, out)
        ok = ok & (~step | present[k])
    return torch.where(ok.view(-1, 1, 1), out, torch.zeros_like(out)), ok


#: largest |R R^T - I| entry of a logged rotation block (float32 round trips stay far below)
RIGID_TOLERANCE = 1e-3


def _check_rigid(t: torch.Tensor, where: str) -> None:
    """InputError unless every finite pose (P, 4, 4) is a rigid transform: an orthonormal
    rotation block with determinant +1 and the bottom row (0, 0, 0, 1). A scaled, sheared or
    zeroed rotation would give a translation of another scale (or none) to the gate."""
    ok = torch.isfinite(t).flatten(1).all(1)
    r, bottom = t[ok, :3, :3], t[ok, 3]
    eye = torch.eye(3, dtype=t.dtype)
    bad = ((r @ r.transpose(-1, -2) - eye).abs().flatten(1).amax(1) > RIGID_TOLERANCE) \
        | (torch.linalg.det(r) <= 0) \
        | ((bottom - torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=t.dtype)).abs().amax(1) > 1e-6)
    if bool(bad.any()):  # a pose log is host data: these reads cost no device sync
        k = int(torch.arange(t.shape[0])[ok][bad][0])
        raise InputError(f"{where}: pose {k} is not a rigid transform (its rotation block must "
                         f"be orthonormal with determinant +1, its last row 0 0 0 1)")


def _on_host(value: Any) -> Any:
    """``value`` with every torch tensor in it (itself, or inside lists / tuples, nested)
    detached and on the CPU, ready for ``np.asarray``: pose logs are host data, and numpy
    reads neither CUDA tensors nor tensors that require grad. Other values are unchanged."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()
    if isinstance(value, (list, tuple)):
        return type(value)(_on_host(v) for v in value)
    return value


def _as_pose_tensor(value: Any, where: str) -> torch.Tensor:
    """(P, 4, 4) float64 poses from a (4, 4) / (P, 4, 4) / (P, 3, 4) array, tensor (any
    device) or list (of lists, arrays, tensors; None = missing -> NaN); InputError for text or
    ragged entries, ShapeError for other shapes, InputError for a non-rigid pose."""
    value = _on_host(value)
    try:
        arr = np.asarray([np.full((4, 4), np.nan) if v is None else v for v in value]
                         if isinstance(value, list) and value and (value[0] is None or
                                                                   np.ndim(value[0]) == 2)
                         else value, dtype=np.float64)
    except (TypeError, ValueError) as exc:  # strings, ragged rows
        raise InputError(f"{where}: poses must be numbers in (4, 4) matrices ({exc})") from None
    t = torch.from_numpy(np.ascontiguousarray(arr))
    if t.ndim == 2:
        t = t.unsqueeze(0)
    if t.ndim != 3 or t.shape[-2:] not in ((4, 4), (3, 4)):
        raise ShapeError(f"{where}: poses must be (4, 4) or (P, 4, 4), got {tuple(t.shape)}")
    if t.shape[-2] == 3:
        bottom = torch.tensor([0.0, 0.0, 0.0, 1.0], dtype=t.dtype).expand(t.shape[0], 1, 4)
        t = torch.cat([t, bottom], 1)
    _check_rigid(t, where)
    return t


def _from_mapping(data: Any, source: str) -> PoseLog:
    get = (lambda k: data[k] if k in data else None)
    absolute = ("absolute_poses", "world_to_camera")
    if get("generator") == SYNTH_GENERATOR:  # a synth ground truth: its poses are per frame
        absolute += ("poses",)
    for key in absolute:
        if get(key) is not None:
            a = _as_pose_tensor(get(key), f"{source}:{key}")
            return PoseLog(torch.zeros(0, 4, 4, dtype=torch.float64),
                           torch.zeros(0, dtype=torch.bool), None, a, source)
    for key in ("relative_pose", "pose", "first_last", "poses"):
        if get(key) is None:
            continue
        rel = _as_pose_tensor(get(key), f"{source}:{key}")
        present = torch.isfinite(rel).flatten(1).all(1)
        if get("valid") is not None:
            valid = torch.as_tensor(np.asarray(_on_host(get("valid"))), dtype=torch.bool).view(-1)
            if valid.numel() != rel.shape[0]:
                raise ShapeError(f"{source}: 'valid' has {valid.numel()} entries for "
                                 f"{rel.shape[0]} poses")
            present &= valid
        pairs = get("pairs")
        if pairs is not None:
            pairs = torch.as_tensor(np.asarray(_on_host(pairs)), dtype=torch.long)
        if pairs is not None and (pairs.ndim != 2 or pairs.shape != (rel.shape[0], 2)):
            raise ShapeError(f"{source}: 'pairs' must be ({rel.shape[0]}, 2), "
                             f"got {tuple(pairs.shape)}")
        return PoseLog(_zero_missing(rel, present), present, pairs, None, source)
    raise InputError(f"pose log {source} has none of the keys relative_pose, pose, poses, "
                      f"absolute_poses (found {sorted(data)})")


def _pose_log(rel: torch.Tensor, source: str = "tensor") -> PoseLog:
    """PoseLog of poses ``rel`` (P, 4, 4) float64: a pose with a NaN / inf entry is missing."""
    present = torch.isfinite(rel).flatten(1).all(1)
    return PoseLog(_zero_missing(rel, present), present, source=source)


def _check_npz_sizes(archive: Any, path: Path) -> None:
    """InputError (naming the file, the array and its shape) unless every array of the pose
    .npz ``archive`` declares at most :data:`MAX_POSE_LOG_ENTRIES` entries and all together
    at most :data:`MAX_POSE_NPZ_BYTES`; only the .npy headers are read."""
    total = 0
    for key in archive.files:
        head = npz_header(archive, key, f"pose log {path}")
        if head.dtype.hasobject:
            raise InputError(f"pose log {path}: holds an object array, which is never loaded "
                             f"(it needs pickle); {POSES_NPZ_HINT}")
        if head.shape and head.shape[0] > MAX_POSE_LOG_ENTRIES:
            raise InputError(f"pose log {path}: array '{key}' declares shape {head.shape}, more "
                             f"than {MAX_POSE_LOG_ENTRIES} entries (poses, pairs, flags)")
        total += head.nbytes
        if total > MAX_POSE_NPZ_BYTES:
            raise InputError(f"pose log {path}: array '{key}' declares shape {head.shape} "
                             f"({head.dtype}): its arrays declare more than "
                             f"{MAX_POSE_NPZ_BYTES / 1e6:g} MB together, more than a pose log "
                             f"of {MAX_POSE_LOG_ENTRIES} poses holds")


def load_pose_log(source: PoseSource) -> PoseLog:
    """Read a pose log (JSON, .npz, a mapping, a list or a tensor); see the module docstring.

    An .npz is checked on its arrays' .npy headers before any is read (at most
    :data:`MAX_POSE_LOG_ENTRIES` entries each, :data:`MAX_POSE_NPZ_BYTES` together).
    """
    if isinstance(source, PoseLog):
        return source
    if isinstance(source, (torch.Tensor, np.ndarray)):
        rel = _as_pose_tensor(torch.as_tensor(_on_host(source)).double().numpy(), "poses")
        return _pose_log(rel)
    if isinstance(source, dict):
        return _from_mapping(source, "dict")
    if isinstance(source, list):
        rel = _as_pose_tensor(source, "list")
        return _pose_log(rel)
    path = Path(source)
    if not path.is_file():
        raise InputError(not_a_file(path, "pose log", "a JSON or .npz pose file"))
    if path.suffix.lower() == ".npz":
        with open_npz(path, "pose log", POSES_NPZ_HINT) as z:
            _check_npz_sizes(z, path)
            try:
                arrays = {k: z[k] for k in z.files}
            except ValueError as exc:  # data cut short (object arrays are refused above)
                raise InputError(f"pose log {path}: an array cannot be read ({exc}); "
                                 f"{POSES_NPZ_HINT}") from None
        return _from_mapping(arrays, str(path))
    data = read_json_file(path, "pose log")
    if isinstance(data, list):
        rel = _as_pose_tensor(data, str(path))
        return _pose_log(rel, str(path))
    return _from_mapping(data, str(path))


def translation_inf(relative: torch.Tensor) -> torch.Tensor:
    """``||t||_inf`` (eq. 5): the largest absolute translation entry of relative poses.

    Args:
        relative: (..., 4, 4) relative poses ``[R t; 0 1]`` (camera i -> camera j).
    Returns:
        (...) ``max(|t_x|, |t_y|, |t_z|)``, ``relative``'s dtype, in the poses' translation
        unit (DUSt3R: its unit-scale scene normalisation; a pose log: whatever it uses).
    """
    return relative[..., :3, 3].abs().amax(-1)


def _thresholds(cfg: GateConfig) -> dict:
    return {"tau_t": cfg.tau_t, "low": cfg.hysteresis_low, "high": cfg.hysteresis_high}


def gate_from_poses(poses: PoseSource, pairs: torch.Tensor, num_frames: int, cfg: GateConfig,
                    method: str = "poses", frame_indices: Optional[torch.Tensor] = None
                    ) -> GateDecision:
    """The translation gate from a pose log.

    Args:
        poses: any pose source accepted by :func:`load_pose_log`.
        pairs: (P, 2) frame pairs the clip is evaluated on (for the per-pair gate), clip
            positions.
        num_frames: T (the first/last pair is (0, T-1)).
        frame_indices: (T,) the clip's source frame numbers (``Clip.frame_indices``): the log's
            frames are the video's, so with a stride or a frame cap positions are mapped to
            them (None: positions are frame numbers).
        cfg: ``tau_t``, ``hysteresis_low/high``, ``missing_pose`` ("fail_to_F": a missing pose is
            F; "present_only": excluded, decision None), ``per_pair``. With ``per_pair`` a
            missing first/last pose is replaced by the majority of the decided pairs (the
            evidence's ``why`` says so); without decided pairs ``missing_pose`` applies.
        method: the name recorded as the decision's ``method`` ("poses", or "dust3r" when the
            poses come from DUSt3R).
    Returns:
        GateDecision: ``statistic`` = t_inf of the first/last pose (None when missing),
        ``decision`` "H" | "F" | "U" | None, ``per_pair`` (list of P codes) with
        ``cfg.per_pair``, and the evidence (``t_inf``, ``eq5_decision``, ``pair_t_inf``, ...).
    Raises:
        InputError: an unknown ``cfg.missing_pose``, an unreadable pose log, or pairs past the
            log's frames.
    """
    if cfg.missing_pose not in ("fail_to_F", "present_only"):
        raise InputError(f"gate.missing_pose must be fail_to_F or present_only, "
                          f"got {cfg.missing_pose!r}")
    log = load_pose_log(poses)
    fail_to_f = cfg.missing_pose == "fail_to_F"
    if frame_indices is not None:  # clip positions -> the video's frame numbers
        src = frame_indices.to("cpu", torch.long)
        pairs = src[pairs.to("cpu", torch.long)]
        pose, present = log.first_last(int(src[-1]), int(src[0]))
    else:
        pose, present = log.first_last(num_frames - 1)
    t_inf = float(translation_inf(pose)) if present else None
    evidence: dict = {"source": log.source, "missing_pose": cfg.missing_pose,
                      "first_last_present": present, "t_inf": t_inf}
    if present:
        code = int(threshold_decision(torch.tensor([t_inf]), cfg.hysteresis_low,
                                      cfg.hysteresis_high)[0])
        decision = codes_to_names(torch.tensor([code]))[0]
        evidence["eq5_decision"] = "F" if t_inf > cfg.tau_t else "H"
        evidence["margin"] = (cfg.hysteresis_low - t_inf if decision == "H" else
                              t_inf - cfg.hysteresis_high if decision == "F" else 0.0)
    else:
        decision = "F" if fail_to_f else None
        evidence["why"] = ("first/last pose missing: treated as F (fail_to_F)" if fail_to_f else
                           "first/last pose missing: clip excluded (present_only)")
    per_pair = None
    if cfg.per_pair:
        rel, pp = log.for_pairs(pairs)
        t = translation_inf(rel)
        if fail_to_f:
            t = torch.where(pp, t, torch.full_like(t, float("inf")))
            codes = hysteresis(t, cfg.hysteresis_low, cfg.hysteresis_high)
        else:
            codes = hysteresis(t, cfg.hysteresis_low, cfg.hysteresis_high, present=pp)
        per_pair = codes_to_names(codes)
        evidence["pair_t_inf"] = [float(v) if ok else None
                                  for v, ok in zip(t.tolist(), pp.tolist())]
        evidence["pairs_missing"] = int((~pp).sum())
        votes = Counter(d for d in per_pair if d is not None)
        if not present and votes:  # the decided pairs stand in for the missing pose
            decision = votes.most_common(1)[0][0]
            evidence["why"] = (f"first/last pose missing: the per-pair majority decides "
                               f"({decision}: {votes[decision]} of {sum(votes.values())} "
                               f"decided pairs)")
    return GateDecision(method, t_inf, _thresholds(cfg), decision, per_pair, evidence)


__all__ = ["PoseLog", "compose_chains", "load_pose_log", "translation_inf", "gate_from_poses",
           "CODE"]
