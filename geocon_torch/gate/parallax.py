"""Weight-free translation gate: parallax the best homography cannot explain (no pose model).

Rotation about the optical centre (or a planar scene) moves every background point by one
homography; camera translation past a scene with depth adds *parallax* that no homography removes
but the epipolar geometry explains. From the two robust fits every pair gets anyway (H at tau_H,
F at tau_F on the same background correspondences), per pair, over the F-inliers (normalised
Sampson <= tau_F):

* ``parallax_magnitude`` (default): the ``q = 0.9`` quantile of the F-inliers' symmetric transfer
  error under the best H, in **reference pixels** (px x ``reference_long_side`` / working long
  side, 1024 by default): how far the 10 % most displaced background points sit from the
  homography, as a fraction of the image. Normalisation:

  - *resolution*: the error is measured in units of the working long side, so the same clip at
    256, 512 or 1024 px gives the same value (a fraction-over-a-pixel-threshold statistic grows
    with the resolution because parallax scales with it and keypoint noise does not);
  - *noise*: the same quantile of the F-inliers' pixel Sampson distances (reference px: the
    keypoint jitter of this backend at this resolution, heavy tails included); the H bound is
    ``max(magnitude_low, noise_k x noise)``; when it reaches half of ``magnitude_high`` the clip
    is noise-limited (a parallax of half the F threshold could hide in the noise) and cannot
    be called H;
  - *keypoint density*: a quantile does not depend on how many matches a backend returns, only
    its precision does: the order-statistic confidence bounds ``q -/+ ci_z sqrt(q (1 - q) / n)``
    (n = the pair's F-inliers) give ``parallax_magnitude_lo`` / ``_hi``; with few matches the
    interval is wide.

  The clip takes the median over the valid gate pairs of the value and of both bounds. H when the
  upper bound is <= the H bound, F when the lower bound is >= ``max(magnitude_high, H bound)``,
  otherwise **U** (the evidence cannot decide: the interval straddles the band, or the noise
  floor reaches the F threshold); ``evidence`` records the value, its interval, the effective
  band, sigma, the noise floor, the F-inlier counts and why. U is resolved downstream by GRIC
  (:func:`~.decision.resolve_u`).
* ``parallax_excess``: the fraction of F-inliers the best H misses by more than ``6 sigma``
  (symmetric transfer, working px; sigma >= 0.1 px). Not resolution invariant (see above);
* ``parallax_fraction``: the fraction of F-inliers that are H-outliers at tau_H (2 px);
* ``residual_parallax``: median symmetric transfer error of the F-inliers under H / tau_H;
* ``gric_delta``: (GRIC(H) - GRIC(F)) / n, Torr's geometric robust information criterion
  (r = 4, lambda1 = ln 4, lambda2 = ln 4n, lambda3 = 2; H: d = 2, k = 8 with e^2 = r_sym^2 / 2; F:
  d = 3, k = 7 with e^2 = Sampson^2); > 0 favours F. It helps settle the U band.

**One instrument** (:mod:`~geocon_torch.gate.view`): the gate pairs are matched by the gate's
own view, ``gate.view_backend`` (opencv-sift) at ``gate.view_long_side`` (512 px, or the
source's long side when smaller; re-read from the file when the working size is smaller), and
fitted in those pixels; so the statistic, its noise floor and its interval are the same
whatever ``features.backend`` and ``io.long_side`` score the clip, and the regime does not flip
with them. The reference-px normalisation above is what makes the view's size a free choice.

The pipeline evaluates the statistic on wide-baseline gate pairs (the near-first/last pairs, as
the paper's first/last DUSt3R gate; parallax grows with the baseline), pooled by their median.
``parallax_magnitude`` uses ``gate.magnitude_low`` / ``magnitude_high`` (3 / 16 reference px),
the fraction statistics ``gate.parallax_low`` / ``parallax_high`` (H if <= low, F if >= high,
otherwise U). Thresholds and the decision agreement across feature backends and working
resolutions are measured by ``benchmarks/gate_sweep.py`` (see benchmarks/README.md).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple, Union

import torch

from .._tensor_utils import constant_on, masked_median, quantile_of_sorted, sorted_valid
from ..config import GATE_STATISTIC_CHOICES, GateConfig
from ..geometry import fundamental_residuals, homography_residuals
from ..geometry._reduce import padded_sum
from ..types import Fit
from .decision import GateDecision, codes_to_names, hysteresis, resolve_u_clip
from ..errors import InputError

STATISTICS = GATE_STATISTIC_CHOICES  # the one list (config.gate.statistic)
_DEFAULT_GATE = GateConfig()

_PICK = torch.tensor([0, 0, 0, 1])  # rows of quantile_rows: mag at 3 quantiles, noise at q


def quantile_bounds(values: torch.Tensor, keep: torch.Tensor, q: float, z: float
                    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per-row quantile ``q`` of the kept values and its order-statistic confidence bounds.

    The bounds are the values at ranks ``n (q -/+ z sqrt(q (1 - q) / n))`` (normal approximation
    of the binomial count below the true quantile; clamped to the smallest / largest value), so
    fewer values give a wider interval.

    Args:
        values: (P, N); keep: (P, N) bool; q in (0, 1); z >= 0.
    Returns:
        (value, lower, upper), each (P,) (0 for a row with nothing kept).

    >>> v = torch.arange(100.).unsqueeze(0)
    >>> [round(float(t), 1) for t in quantile_bounds(v, v >= 0, 0.9, 1.645)]
    [89.1, 84.2, 94.0]
    """
    vals, n = sorted_valid(values, keep)
    half = z * torch.sqrt(q * (1.0 - q) / n.clamp_min(1).to(torch.float64))
    qs = torch.stack([torch.full_like(half, q), q - half, q + half])  # the 3 at once
    return tuple(quantile_of_sorted(vals.expand(3, *vals.shape), n.expand(3, *n.shape),
                                    qs).unbind(0))


def reference_scale(x1: torch.Tensor, mask: torch.Tensor,
                    long_side_px: Union[None, float, torch.Tensor],
                    reference_long_side: float) -> Union[float, torch.Tensor]:
    """Reference px per px: ``reference_long_side / long_side_px``, a float, or (P, 1) for a
    (P,) tensor of per-row long sides; without ``long_side_px`` the long side is taken as the
    extent of the matched points (the largest coordinate of any masked point of ``x1`` (P, N,
    2), a lower bound of the frame's)."""
    if isinstance(long_side_px, torch.Tensor):
        side = long_side_px.to(device=x1.device, dtype=x1.dtype).clamp_min(1.0)
        return (float(reference_long_side) / side).view(-1, 1)
    if long_side_px is None:
        pts = x1[mask]
        long_side_px = float(pts.abs().amax()) if pts.numel() else reference_long_side
    return float(reference_long_side) / max(float(long_side_px), 1.0)


def parallax_statistics(fit_h: Fit, fit_f: Fit, x1: torch.Tensor, x2: torch.Tensor,
                        mask: torch.Tensor, *, tau_h: float = 2.0, tau_f: float = 0.1,
                        min_inliers: int = 30, sigma_floor_px: float = 0.1,
                        excess_k: float = 6.0,
                        residuals: Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = None,
                        long_side_px: Union[None, float, torch.Tensor] = None,
                        gate: Optional[GateConfig] = None) -> Dict[str, torch.Tensor]:
    """Per-pair gate statistics from the H and F fits of the same correspondences.

    Args:
        fit_h, fit_f: fits of (P,) pairs (models in pixels).
        x1, x2: (P, N, 2) pixel points; mask: (P, N) bool background matches.
        tau_h: H-inlier threshold on the symmetric transfer error, px (paper 2 px); also the
            unit of ``residual_parallax``.
        tau_f: F-inlier threshold on the Hartley-normalised Sampson distance, unitless
            (paper 0.1).
        min_inliers: a pair needs at least this many F-inliers (a count) to be valid.
        sigma_floor_px: lower bound (px) of the noise sigma, the F-inliers' median pixel
            Sampson distance / 0.6745, that ``gric_delta`` and ``parallax_excess`` use.
        excess_k: an F-inlier counts towards ``parallax_excess`` when the best H misses it by
            more than ``excess_k`` x sigma (unitless multiplier).
        residuals: (symmetric transfer px, normalised Sampson, pixel Sampson) (P, N) of the two
            fits when already computed (``homography_residuals`` / ``fundamental_residuals``).
        long_side_px: the long side (px) of the frame the points are in, one for all rows or
            (P,) per row (the gate's view rows); None: estimated from the points
            (:func:`reference_scale`).
        gate: the quantile, reference long side and ``ci_z`` of ``parallax_magnitude``
            (None: the defaults).
    Returns:
        dict of (P,) tensors in the points' dtype unless noted, 0 where not ``valid``:
        ``parallax_magnitude`` (+ ``_lo`` / ``_hi`` bounds, reference px), ``noise_ref_px``
        (the same quantile of the F-inliers' pixel Sampson distances, reference px),
        ``num_f_inliers`` (long), ``parallax_excess`` and ``parallax_fraction`` (fractions of
        the F-inliers in [0, 1]), ``residual_parallax`` (median H error of the F-inliers /
        ``tau_h``), ``gric_delta`` ((GRIC(H) - GRIC(F)) / n, > 0 favours F), ``valid`` (bool:
        both fits valid and >= min_inliers F-inliers).
    """
    gate = gate or _DEFAULT_GATE
    if residuals is None:
        r_h = homography_residuals(fit_h, x1, x2)
        r_fn, r_fpx = fundamental_residuals(fit_f, x1, x2, mask)
    else:
        r_h, r_fn, r_fpx = residuals
    f_in = mask & (r_fn <= tau_f)
    h_in = mask & (r_h <= tau_h)
    n_f = f_in.sum(-1)
    valid = (n_f >= min_inliers) & fit_h.valid.to(x1.device) & fit_f.valid.to(x1.device)
    frac = (f_in & ~h_in).sum(-1).to(x1.dtype) / n_f.clamp_min(1).to(x1.dtype)
    med = _medians(r_h, r_fpx, f_in)
    resid = med[0] / tau_h
    sigma = (med[1] / 0.6745).clamp_min(sigma_floor_px)
    delta = _gric_delta(r_h, r_fpx, mask, sigma)
    # noise-relative parallax: F-inliers the best H misses by more than excess_k x sigma
    excess_thr = (excess_k * sigma).unsqueeze(-1)
    excess = ((f_in & (r_h > excess_thr)).sum(-1).to(x1.dtype)
              / n_f.clamp_min(1).to(x1.dtype))
    ref = reference_scale(x1, mask, long_side_px, gate.reference_long_side)
    mag, noise = _magnitudes(r_h * ref, r_fpx * ref, f_in, gate.magnitude_quantile, gate.ci_z)
    zero = torch.zeros_like(frac)
    out = {"parallax_excess": excess, "parallax_fraction": frac, "residual_parallax": resid,
           "gric_delta": delta, "parallax_magnitude": mag[0], "parallax_magnitude_lo": mag[1],
           "parallax_magnitude_hi": mag[2], "noise_ref_px": noise}
    out = {k: torch.where(valid, v, zero) for k, v in out.items()}
    out.update(valid=valid, num_f_inliers=n_f)
    return out


def _medians(a: torch.Tensor, b: torch.Tensor, keep: torch.Tensor) -> Tuple[torch.Tensor, ...]:
    """The masked medians (P,) of ``a`` and ``b`` (P, N) over ``keep`` (P, N): both series
    sorted and interpolated at once (values equal to two :func:`masked_median` calls)."""
    if a.dtype != b.dtype:
        return masked_median(a, keep)[0], masked_median(b, keep)[0]
    return masked_median(torch.stack([a, b]), keep.expand(2, *keep.shape))[0].unbind(0)


def _magnitudes(mag: torch.Tensor, noise: torch.Tensor, keep: torch.Tensor, q: float, z: float
                ) -> Tuple[Tuple[torch.Tensor, ...], torch.Tensor]:
    """``quantile_bounds(mag, keep, q, z)`` and ``quantile_bounds(noise, keep, q, 0)[0]``
    ((P, N) values, (P, N) bool ``keep``) with one sort and one interpolation for the four
    quantiles (the same values)."""
    if mag.dtype != noise.dtype:
        return quantile_bounds(mag, keep, q, z), quantile_bounds(noise, keep, q, 0.0)[0]
    vals, n = sorted_valid(torch.stack([mag, noise]), keep.expand(2, *keep.shape))
    half = z * torch.sqrt(q * (1.0 - q) / n[0].clamp_min(1).to(torch.float64))
    at = torch.full_like(half, q)
    pick = constant_on(_PICK, vals.device)  # mag at 3 quantiles, noise at q
    out = quantile_of_sorted(vals.index_select(0, pick), n.index_select(0, pick),
                             torch.stack([at, q - half, q + half, at])).unbind(0)
    return out[:3], out[3]


def _gric_delta(r_h: torch.Tensor, r_fpx: torch.Tensor, mask: torch.Tensor,
                sigma: torch.Tensor) -> torch.Tensor:
    """(GRIC(H) - GRIC(F)) / n (Torr 1998), (P,): residuals (P, N) px, sigma (P,) px."""
    n = mask.sum(-1).clamp_min(1).to(r_h.dtype)
    s2 = (sigma * sigma).unsqueeze(-1)
    r_dim, lam3 = 4.0, 2.0

    def gric(e2: torch.Tensor, d: int, k: int) -> torch.Tensor:
        rho = torch.clamp(e2 / s2, max=lam3 * (r_dim - d))
        rho = padded_sum(torch.where(mask, rho, torch.zeros_like(rho)))  # padding-invariant
        return rho + math.log(r_dim) * d * n + torch.log(r_dim * n) * k

    return (gric(r_h * r_h / 2, 2, 8) - gric(r_fpx * r_fpx, 3, 7)) / n


_MAGNITUDE_KEYS = ("parallax_magnitude", "parallax_magnitude_lo", "parallax_magnitude_hi",
                   "noise_ref_px")


def _on_host(stats: Dict[str, torch.Tensor], valid: torch.Tensor, name: str
             ) -> Tuple[Dict[str, float], list, list, list]:
    """The medians over the ``valid`` rows of every statistic the gate reads, the statistic
    ``name`` per row, the validity and F-inlier count per row: one host transfer."""
    keys = gate_keys(stats, name)
    meds = [masked_median(stats[k], valid)[0].double().reshape(1) for k in keys]
    n = int(valid.numel())
    counts = stats.get("num_f_inliers", torch.zeros_like(valid, dtype=torch.long))
    host = torch.cat(meds + [stats[name].double().reshape(-1), valid.double().reshape(-1),
                             counts.double().reshape(-1)]).tolist()
    k = len(keys)
    return (dict(zip(keys, host[:k])), host[k:k + n],
            [v > 0 for v in host[k + n:k + 2 * n]], [int(c) for c in host[k + 2 * n:]])


def gate_from_parallax(stats: Dict[str, torch.Tensor], cfg: GateConfig) -> GateDecision:
    """Clip (and optionally per-pair) decision from :func:`parallax_statistics` of the finest
    scale's pairs (in temporal order). The U band is resolved by GRIC in ``evidence``. The
    statistics reach the host once (:func:`_on_host`).

    Args:
        stats: :func:`parallax_statistics` output, (P,) tensors per key (``valid`` bool).
        cfg: the gate config: ``statistic`` (the key decided on), its H / F bounds
            (``parallax_low`` / ``parallax_high``, or the ``magnitude_*`` band in reference px)
            and ``per_pair`` (hysteresis per pair).
    Returns:
        GateDecision of method "parallax": ``statistic`` the median over the valid pairs (None
        when no pair is valid, decision None then), ``per_pair`` a list of P codes ("H", "F",
        "U" or None for an invalid pair) when ``cfg.per_pair``.
    Raises:
        InputError: an unknown ``cfg.statistic``.
    """
    name = check_statistic(cfg)
    valid = stats["valid"]
    gate = decide_on_host(*_on_host(stats, valid, name), cfg)
    if cfg.per_pair:
        low, high = gate.thresholds["low"], gate.thresholds["high"]
        gate.per_pair = codes_to_names(hysteresis(stats[name], low, high, present=valid))
    return gate


def check_statistic(cfg: GateConfig) -> str:
    """``cfg.statistic``, checked against :data:`STATISTICS`."""
    if cfg.statistic not in STATISTICS:
        raise InputError(f"gate.statistic must be one of {STATISTICS}, got {cfg.statistic!r}")
    return cfg.statistic


def gate_keys(stats: Dict[str, torch.Tensor], name: str) -> List[str]:
    """The statistics whose medians the gate reads: every known one present, ``name``,
    ``gric_delta`` and the magnitude keys (in this order, each once)."""
    return list(dict.fromkeys([k for k in STATISTICS if k in stats] + [name, "gric_delta"]
                              + [k for k in _MAGNITUDE_KEYS if k in stats]))


def decide_on_host(med: Dict[str, float], values: list, ok: list, counts: list,
                   cfg: GateConfig) -> GateDecision:
    """The clip decision of :func:`gate_from_parallax` from numbers already on the host: the
    medians ``med`` over the valid rows of :func:`gate_keys`, and per row the statistic
    ``values``, validity ``ok`` and F-inlier ``counts`` (no per-pair decision)."""
    name = cfg.statistic
    any_valid = any(ok)
    evidence: Dict[str, object] = {
        "statistic_name": name, "valid_pairs": sum(ok),
        "pair_statistic": [v if good else None for v, good in zip(values, ok)],
    }
    for other in STATISTICS:
        if any_valid and other in med:
            evidence[f"median_{other}"] = med[other]
    if name == "parallax_magnitude":
        low, high = _band(med["noise_ref_px"] if any_valid else 0.0, cfg)
    else:
        low, high = cfg.parallax_low, cfg.parallax_high
    thresholds = {"low": low, "high": high}
    if not any_valid:
        evidence["why"] = "no pair with enough F-inliers to measure parallax"
        return GateDecision("parallax", None, thresholds, None, None, evidence)
    clip_s = med[name]
    if name == "parallax_magnitude":
        decision = _magnitude_decision(med, [c for c, good in zip(counts, ok) if good], cfg,
                                       evidence)
    else:
        # threshold_decision's rule on the host (H wins where s equals both bounds)
        decision = "H" if clip_s <= low else "F" if clip_s >= high else "U"
    evidence["u_resolved"] = resolve_u_clip(med["gric_delta"])
    return GateDecision("parallax", clip_s, thresholds, decision, None, evidence)


def _band(noise: float, cfg: GateConfig) -> Tuple[float, float]:
    low = max(float(cfg.magnitude_low), float(cfg.noise_k) * noise)
    return low, max(float(cfg.magnitude_high), low)


def magnitude_band(stats: Dict[str, torch.Tensor], valid: torch.Tensor, cfg: GateConfig
                   ) -> Tuple[float, float]:
    """The effective (H bound, F bound) of ``parallax_magnitude`` in reference px:
    ``low = max(magnitude_low, noise_k x noise)`` (noise: median ``noise_ref_px`` of the valid
    rows), ``high = max(magnitude_high, low)``."""
    noise = float(masked_median(stats["noise_ref_px"], valid)[0]) if bool(valid.any()) else 0.0
    return _band(noise, cfg)


def magnitude_decision(stats: Dict[str, torch.Tensor], valid: torch.Tensor, cfg: GateConfig,
                       evidence: Dict[str, object]) -> str:
    """H / F / U of ``parallax_magnitude`` with its confidence interval (clip value and bounds:
    medians over the ``valid`` rows); writes the interval, band, noise and counts to
    ``evidence``. H: upper bound <= H bound; F: lower bound >= F bound (and the noise floor is
    under the F threshold); otherwise U with ``why``."""
    med = {k: float(masked_median(stats[k], valid)[0]) for k in _MAGNITUDE_KEYS}
    return _magnitude_decision(med, stats["num_f_inliers"][valid].tolist(), cfg, evidence)


def noise_limited(low: float, magnitude_high: float) -> bool:
    """Whether a ``parallax_magnitude`` band cannot decide H: its H bound ``low`` (ref px,
    ``max(magnitude_low, noise_k x noise)``) reaches half the configured F threshold
    ``magnitude_high`` (ref px), so a parallax of half the F threshold could hide in the noise
    (:func:`_magnitude_decision` then returns U or F, never H). The report reads it from the
    stored ``band_ref_px`` / ``configured_band_ref_px``."""
    return float(low) >= 0.5 * float(magnitude_high)


def _magnitude_decision(med: Dict[str, float], counts: list, cfg: GateConfig,
                        evidence: Dict[str, object]) -> str:
    """:func:`magnitude_decision` from the medians ``med`` and the valid rows' F-inlier
    ``counts`` already on the host."""
    q, q_lo, q_hi, noise = (med[k] for k in _MAGNITUDE_KEYS)
    low, high = _band(noise, cfg)
    evidence.update(magnitude_ref_px=q, magnitude_ci_ref_px=[q_lo, q_hi], band_ref_px=[low, high],
                    configured_band_ref_px=[float(cfg.magnitude_low), float(cfg.magnitude_high)],
                    noise_ref_px=noise, noise_floor_ref_px=float(cfg.noise_k) * noise,
                    quantile=float(cfg.magnitude_quantile), ci_z=float(cfg.ci_z),
                    reference_long_side=float(cfg.reference_long_side),
                    f_inliers_per_pair=[int(c) for c in counts])
    noisy = noise_limited(low, cfg.magnitude_high)  # half the F threshold could hide in it
    if q_hi <= low and not noisy:
        return "H"
    if q_lo >= high:
        return "F"
    evidence["why_u"] = (
        f"noise floor {cfg.noise_k:g} x {noise:.2f} ref px reaches half the F threshold "
        f"{cfg.magnitude_high:g}: H cannot be told from a small parallax" if noisy else
        f"parallax {q:.2f} ref px, {cfg.ci_z:g}-sigma interval [{q_lo:.2f}, {q_hi:.2f}] not "
        f"clear of the band [{low:.2f}, {high:.2f}] (F-inliers per pair {min(counts)}-"
        f"{max(counts)})")
    return "U"
