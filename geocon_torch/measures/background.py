"""Background consistency: Inlier Ratio (IR) and Geometric Error (GE), paper eqs. 7-13.

Per pair (eq. 12), on background correspondences ``C_bg`` (the ``mask``; a match with a NaN / inf
coordinate is never in it, as the robust fits drop it):

* H (eqs. 7-8): residual = symmetric transfer error in px, inliers ``r <= tau_H`` (2 px),
  ``GE_H`` = median symmetric transfer error of the inliers (px);
* F (eqs. 9-11): inliers by the Sampson distance in each pair's Hartley-normalised coordinates
  ``<= tau_F`` (0.1, unitless), ``GE_F`` = median *pixel* Sampson distance (eq. 11) of the inliers;
* ``IR = |inliers| / |C_bg|``; a pair with fewer than ``min_inliers`` (30) inliers, or whose fit
  failed, is invalid and excluded from aggregation.

Per clip (eq. 13): IR and GE are medians over the valid pairs *and* scales (all (scale, pair)
entries pooled). Report gate: ``IR >= 0.97`` and ``GE <= 3.5 px`` -> pass. Pixels are at the clip's
working resolution. Invalid entries hold 0 with ``valid`` False (never NaN).

Every function is batched over the leading pair dimension P (scales concatenated along P).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Optional, Sequence, Tuple, Union

import torch

from .._checks import check_mask, check_points
from .._tensor_utils import constant_on, masked_median
from ..geometry import (fundamental_residuals, homography_residuals, symmetric_transfer_error)
from ..geometry.normalization import finite_mask
from ..errors import ShapeError
from ..result import BEHAVIOURS
from ..types import Fit




@dataclass
class PairMetrics:
    """Per-pair IR / GE of one model family.

    Attributes (all (P,)):
        ir: inlier ratio in [0, 1] (0 where invalid).
        ge: median residual of the inliers (px; 0 where invalid).
        num_inliers: long; num_matches: long (|C_bg|).
        valid: bool, fit succeeded and num_inliers >= min_inliers.
    """

    ir: torch.Tensor
    ge: torch.Tensor
    num_inliers: torch.Tensor
    num_matches: torch.Tensor
    valid: torch.Tensor

#: Rz(90 deg), the W of E = U W V^T
_W90 = torch.tensor([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])


def pair_metrics(residuals: torch.Tensor, mask: torch.Tensor, tau: float, *,
                 ge_residuals: Optional[torch.Tensor] = None,
                 fit_valid: Optional[torch.Tensor] = None, min_inliers: int = 30) -> PairMetrics:
    """Eq. 12 for any residual family.

    Args:
        residuals: (P, N) residual of the inlier test (compared with ``tau``).
        mask: (P, N) bool background correspondences ``C_bg``.
        tau: inlier threshold (same unit as ``residuals``).
        ge_residuals: (P, N) residual whose inlier median is GE (defaults to ``residuals``; for
            F this is the pixel Sampson distance while the test uses the normalised one).
        fit_valid: (P,) bool, False where the robust fit failed.
        min_inliers: pairs with fewer inliers are invalid.

    Raises:
        ShapeError: ``residuals`` is not a (P, N) tensor, or ``mask`` not (P, N);
            InputError: a non-bool ``mask`` with values other than 0 / 1.
    """
    if not isinstance(residuals, torch.Tensor) or residuals.ndim != 2:
        got = (tuple(residuals.shape) if isinstance(residuals, torch.Tensor)
               else type(residuals).__name__)
        raise ShapeError(f"residuals must have shape (P, N), got {got}")
    mask = check_mask(mask, residuals.unsqueeze(-1), "mask")
    inl = mask & (residuals <= tau)
    n_in = inl.sum(-1)
    n = mask.sum(-1)
    valid = n_in >= min_inliers
    if fit_valid is not None:
        valid = valid & fit_valid.to(device=residuals.device, dtype=torch.bool)
    ge, _ = masked_median(residuals if ge_residuals is None else ge_residuals, inl)
    ir = n_in.to(residuals.dtype) / n.clamp_min(1).to(residuals.dtype)
    zero = torch.zeros_like(ir)
    return PairMetrics(torch.where(valid, ir, zero), torch.where(valid, ge, zero), n_in, n, valid)


def homography_pair_metrics(fit: Fit, x1: torch.Tensor, x2: torch.Tensor,
                            mask: Optional[torch.Tensor] = None, *, tau_h: float = 2.0,
                            min_inliers: int = 30,
                            residuals: Optional[torch.Tensor] = None) -> PairMetrics:
    """IR_H / GE_H (eqs. 7-8) of the fitted homographies ``fit.model`` (P, 3, 3), x2 ~ H x1.

    Residuals are recomputed from the model (symmetric transfer error, px) so that the same
    function serves any threshold (sensitivity scans); ``residuals`` passes in
    :func:`homography_residuals` already computed.
    """
    check_points(x1, "x1")
    r = homography_residuals(fit, x1, x2) if residuals is None else residuals
    return pair_metrics(r, finite_mask(mask, x1, x2), tau_h, fit_valid=fit.valid,
                        min_inliers=min_inliers)


def fundamental_pair_metrics(fit: Fit, x1: torch.Tensor, x2: torch.Tensor,
                             mask: Optional[torch.Tensor] = None, *, tau_f: float = 0.1,
                             min_inliers: int = 30,
                             residuals: Optional[Tuple[torch.Tensor, torch.Tensor]] = None
                             ) -> PairMetrics:
    """IR_F / GE_F (eqs. 9-11) of the fitted fundamental matrices (P, 3, 3), x2^T F x1 = 0.

    Inliers: Sampson distance in Hartley-normalised coordinates (normalisation over ``mask``)
    ``<= tau_f``; GE: median pixel Sampson distance (eq. 11) of those inliers. ``residuals``
    passes in :func:`fundamental_residuals` (same ``mask``) already computed.
    """
    check_points(x1, "x1")
    mask = finite_mask(mask, x1, x2)
    r_norm, r_px = fundamental_residuals(fit, x1, x2, mask) if residuals is None else residuals
    return pair_metrics(r_norm, mask, tau_f, ge_residuals=r_px, fit_valid=fit.valid,
                        min_inliers=min_inliers)


def clip_summary(ir: torch.Tensor, ge: torch.Tensor, valid: torch.Tensor) -> Dict[str, object]:
    """Eq. 13: medians over valid entries of (P,) (or any shape: scales x pairs pooled).

    Returns {"ir", "ge_px", "valid_pairs"} with None values when nothing is valid.
    """
    v = valid.reshape(-1)
    n = int(v.sum())
    if n == 0:
        return {"ir": None, "ge_px": None, "valid_pairs": 0}
    m_ir, _ = masked_median(ir.reshape(-1), v)
    m_ge, _ = masked_median(ge.reshape(-1), v)
    return {"ir": float(m_ir), "ge_px": float(m_ge), "valid_pairs": n}


def background_pass(ir: Optional[float], ge_px: Optional[float], report_ir: float = 0.97,
                    report_ge_px: float = 3.5) -> Optional[bool]:
    """Report gate: IR >= report_ir and GE <= report_ge_px (None when not computable)."""
    if ir is None or ge_px is None:
        return None
    return bool(ir >= report_ir and ge_px <= report_ge_px)


def best_of_both(summary_h: Dict[str, object], summary_f: Dict[str, object]
                 ) -> Dict[str, Optional[float]]:
    """Paper sec. 6.8, for analysis: IR_best = max(IR_H, IR_F) and GE_best = min(GE_H, GE_F),
    each over the clip summaries ({"ir", "ge_px", ...}, None when a model has no valid pair)
    that have a value; the two may come from different models. None when neither has one."""
    def pick(key: str, best: type) -> Optional[float]:
        values = [float(v) for v in (summary_h.get(key), summary_f.get(key)) if v is not None]
        return best(values) if values else None
    return {"ir": pick("ir", max), "ge_px": pick("ge_px", min)}


def choose_model_per_pair(h: PairMetrics, f: PairMetrics, use_f: torch.Tensor) -> PairMetrics:
    """Per-pair choice between the H and F metrics (``use_f`` (P,) bool)."""
    pick = lambda a, b: torch.where(use_f, b, a)  # noqa: E731
    return PairMetrics(pick(h.ir, f.ir), pick(h.ge, f.ge), pick(h.num_inliers, f.num_inliers),
                       pick(h.num_matches, f.num_matches), pick(h.valid, f.valid))


def sensitivity_scan(fit_h: Fit, fit_f: Fit, x1: torch.Tensor, x2: torch.Tensor,
                     mask: torch.Tensor, taus_h: Sequence[float], taus_f: Sequence[float], *,
                     min_inliers: int = 30) -> Dict[str, list]:
    """Threshold-score sensitivity (sec. 3.3/4.4): clip IR/GE over a (tau_H, tau_F) grid.

    The fitted models are kept fixed and re-thresholded (one batched evaluation per family, the
    grid broadcast over a leading dimension G). Returns {"tau_h": [...], "ir_h": [...],
    "ge_h_px": [...], "valid_h": [...], "tau_f": [...], "ir_f": [...], "ge_f_px": [...],
    "valid_f": [...]} with one entry per threshold (None where no pair is valid).
    """
    mask = finite_mask(mask, x1, x2)
    r_h = symmetric_transfer_error(fit_h.model.to(x1.dtype), x1, x2)
    r_fn, r_fpx = fundamental_residuals(fit_f, x1, x2, mask)
    out: Dict[str, list] = {}
    for fam, r, ge_r, taus, valid_fit in (("h", r_h, r_h, taus_h, fit_h.valid),
                                          ("f", r_fn, r_fpx, taus_f, fit_f.valid)):
        g = len(taus)
        t = torch.tensor(list(taus), dtype=r.dtype, device=r.device).view(g, 1, 1)
        inl = mask.unsqueeze(0) & (r.unsqueeze(0) <= t)  # (G, P, N)
        n_in = inl.sum(-1)
        valid = (n_in >= min_inliers) & valid_fit.to(r.device).unsqueeze(0)
        ir = n_in.to(r.dtype) / mask.sum(-1).clamp_min(1).to(r.dtype).unsqueeze(0)
        ge, _ = masked_median(ge_r.unsqueeze(0).expand_as(inl), inl)
        cm_ir, ok = masked_median(ir, valid)
        cm_ge, _ = masked_median(ge, valid)
        out[f"tau_{fam}"] = [float(v) for v in taus]
        out[f"ir_{fam}"] = [float(v) if o else None for v, o in zip(cm_ir.tolist(), ok.tolist())]
        key = "ge_h_px" if fam == "h" else "ge_f_px"
        out[key] = [float(v) if o else None for v, o in zip(cm_ge.tolist(), ok.tolist())]
        out[f"valid_{fam}"] = valid.sum(-1).tolist()
    return out


def median_motion_px(x1: torch.Tensor, x2: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """(P,) median displacement ``|x2 - x1|`` (px) of the masked matches (0 where empty)."""
    return masked_median((x2 - x1).norm(dim=-1), mask)[0]


def rotation_from_fundamental(F: torch.Tensor, size_hw: Union[Sequence[int], torch.Tensor],
                              focal_factor: float = 1.0) -> torch.Tensor:
    """(P,) inter-frame rotation angle (degrees) implied by pixel F (P, 3, 3).

    Assumes a pinhole camera with focal length ``focal_factor * max(H, W)`` and the principal
    point at the image centre; ``E = K^T F K`` is decomposed (``E = U diag(1,1,0) V^T``) into its
    two rotation candidates ``U W V^T`` / ``U W^T V^T`` and the one closer to identity is taken
    (inter-frame rotations are small). A wrong focal length keeps a pure translation at 0 deg
    (``D [t]_x D`` stays skew-symmetric), so the angle separates translation from
    rotation + translation. Used only for the post-hoc behaviour. ``size_hw``: (H, W) px of
    every row's frames, or a (P, 2) tensor of each row's own (rows of clips of several sizes).
    A row whose F (or E) is all zeros (the model of a failed fit) or holds a NaN / inf gets
    NaN; the other rows keep their angles, bit for bit (no host sync).

    Raises:
        ShapeError: ``size_hw`` has neither 1 nor P rows.
    """
    hw = torch.as_tensor(size_hw, dtype=F.dtype, device=F.device).reshape(-1, 2)
    if hw.shape[0] not in (1, F.shape[0]):
        raise ShapeError(f"F has {F.shape[0]} rows (P, 3, 3) = {tuple(F.shape)} but size_hw has "
                         f"{hw.shape[0]} (H, W) rows; pass one (H, W) or one per row of F")
    h, w = hw[:, 0], hw[:, 1]
    f = focal_factor * torch.maximum(h, w)
    zero, one = torch.zeros_like(f), torch.ones_like(f)
    K = torch.stack([f, zero, w / 2.0, zero, f, h / 2.0, zero, zero, one], -1).view(-1, 3, 3)
    E = K.transpose(-1, -2) @ F @ K
    size = E.abs().amax((-2, -1))
    # the SVD of a non-finite matrix raises for the whole batch: those rows are decomposed as
    # zeros (a finite row passes unchanged) and their angle is made NaN below
    U, _, Vh = torch.linalg.svd(E.nan_to_num(0.0, 0.0, 0.0))
    # det of an orthogonal factor is +-1: its sign (as the former where(det < 0, -1, 1))
    U = U * torch.linalg.det(U).sign().view(-1, 1, 1)
    Vh = Vh * torch.linalg.det(Vh).sign().view(-1, 1, 1)
    W = constant_on(_W90, F.device, F.dtype)
    angles = []
    for Wk in (W, W.T):
        R = U @ Wk @ Vh
        tr = R.diagonal(dim1=-2, dim2=-1).sum(-1)
        angles.append(torch.arccos(((tr - 1) / 2).clamp(-1.0, 1.0)))
    # size / size: exactly 1 where E is finite and nonzero, NaN where it is 0, inf or NaN
    return torch.minimum(*angles) * (180.0 / math.pi) * (size / size)


def classify_behaviour(regime: Optional[str], passed: Optional[bool], motion_px: Optional[float],
               rotation_deg: Optional[float], has_objects: bool, *, static_px: float = 0.5,
               rotation_thr_deg: float = 0.1) -> Optional[str]:
    """Post-hoc behaviour (Algorithm 1 E; the paper's "categories", result field ``behaviour``)
    from the gate and the report gates.

    * background fails the report gates (IR < 0.97 or GE > 3.5 px) -> "Stress";
    * H regime: median background motion < ``static_px`` per pair -> "StaticCam+MovingObjs" when
      moving objects were found, else "Static"; otherwise "Rotation-dominant";
    * F regime: inter-frame rotation (from F, :func:`rotation_from_fundamental`) >=
      ``rotation_thr_deg`` -> "Complex" (rotation + translation), else "Translation-dominant".

    Returns None when the background could not be scored.
    """
    if regime is None or passed is None:
        return None
    if not passed:
        return "Stress"
    if regime == "H":
        if motion_px is not None and motion_px < static_px:
            return "StaticCam+MovingObjs" if has_objects else "Static"
        return "Rotation-dominant"
    if rotation_deg is not None and rotation_deg >= rotation_thr_deg:
        return "Complex"
    return "Translation-dominant"


__all__ = ["PairMetrics", "pair_metrics", "homography_pair_metrics", "fundamental_pair_metrics",
           "clip_summary", "background_pass", "best_of_both", "choose_model_per_pair",
           "sensitivity_scan", "median_motion_px", "rotation_from_fundamental",
           "classify_behaviour", "BEHAVIOURS"]
