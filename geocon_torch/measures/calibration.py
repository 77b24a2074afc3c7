"""Calibrated report gate: threshold math (no I/O).

The paper's report gate (IR >= 0.97 and GE <= 3.5 px) barely ranks: on real and generated clips
IR under F is ~1.000 (tau_F is loose), and 3.5 px is far above the GE of a rubber-sheet warp
(~0.5 px at 256 px). The calibrated gate keeps the paper's form, an IR lower bound and a GE
upper bound, per gated regime r in {H, F}, and adds three bounds (where the calibration file
has them), all chosen on grounded scenes (:mod:`geocon_torch.bench.calibration`) at a target
false-pass rate on corrupted clips::

    pass_calibrated = IR >= ir_min[r]  and  GE_norm <= ge_norm_max[r]
                      and  GE_fine_norm <= ge_fine_norm_max[r]        (finest scale)
                      and  GE_spread_norm <= ge_spread_norm_max[r]    (worst pairs - typical)
                      and  parallax_ref >= parallax_ref_min[r]       (F only: parallax seen)
    X_norm = X_px * ref_long_side / long_side     (ref_long_side = 1024, the paper's)

* ``GE_fine`` / ``GE_peak`` (:func:`peak_ge`): the median / 90th percentile of the gated
  model's per-pair GE over the valid pairs at the finest scale. The clip GE (eq. 13) pools the
  coarse scales, whose GE is in working-resolution px (keypoint noise 2-4x the finest's) and
  dilutes a sub-pixel corruption; a corruption whose strength varies over time (a sliding
  region, breathing) lifts a few pairs well above the median: ``GE_spread = GE_peak - GE_fine``
  (:func:`spread_of`). The spread, not the peak itself, is bounded: a clean pan has a high but
  even GE (peak ~ fine), a static camera with a sliding background region a low median and a few
  high pairs (grounded scenes at 256 px: clean spread <= 0.07 px @1024 under H, slides >= 0.37).
  Files with the older ``ge_peak_norm_max`` bound are still applied as written.
* ``parallax_ref`` (F regime): the gate's ``parallax_magnitude``
  (:mod:`geocon_torch.gate.parallax`: the 90th percentile of the F-inliers' transfer error under
  the best homography on the wide-baseline gate pairs, reference px, measured by the gate's own
  view), the clip value the gate decided on. A radial warp about the frame centre (breathing)
  on a static or rotating camera moves every point along a line through one epipole, so F fits
  it and GRIC can call the clip F; but the parallax it leaves is small (3.5-20 reference px at
  severity 0.5-1 on grounded static / rotating scenes, against 53-174 for their translating
  clips and the gate's own F threshold of 16). A background slide on such a camera is a second
  rigid layer (30-62 reference px at severity 0.5-1, GE as low as a clean clip's): a bound fitted
  above them (72.8 in a measured refit) rejects those too, at the cost of clean clips with less
  parallax (benchmarks/README.md, "Issue 22 item 1"; the shipped files still carry the older
  ``ge_h_norm_min``). A clip gated F without the parallax that F needs carries
  no evidence of a rigid 3-D scene and fails. The statistic is a quantile of unthresholded
  errors in units of the frame (no inlier cap: the same clip gives the same value at any
  working size and with any scoring backend); it replaces ``GE_H_norm >= ge_h_norm_min`` (the
  median of the H-inliers' errors, capped by tau_H = 2 working px, so it shrinks in reference
  px as the working size grows: clean parallax clips fell below the bound at 512-1024 px).
  Files with ``ge_h_norm_min`` are still applied as written. A clip without the statistic
  (another gate method) meets the bound.

Resolution rule: every GE statistic is in pixels of a ``ref_long_side``-px frame. A corruption's
displacement scales with the frame (every injector's amplitude is a fraction of the image size),
so the corrupted clips' normalised GE is about the same at any working resolution and the
false-pass rate chosen at one resolution transfers to the others; clean clips' GE is keypoint
localisation noise (a fraction of a pixel at any size), so their normalised GE shrinks as the
resolution grows and the true-pass rate measured at a small calibration size is a lower bound
for larger ones. The parallax bound reads a statistic that is already in reference px. IR_F is
unitless (tau_F in Hartley-normalised units) and IR_H uses tau_H in px: a
corruption puts more H residuals over tau_H at larger sizes (lower IR_H, a stricter gate).

Selection (:func:`select_bounds`; :func:`select_thresholds` is its (IR, GE) case): every
combination of candidate bounds (each statistic's values on the clean clips, plus one beyond
every clean clip's value) is tried (a (K_1, ..., K_D, N) boolean grid, built one candidate of
the first statistic at a time); the combination with the highest true-pass rate on clean clips
among those whose false-pass rate on corrupted clips is <= the target is kept (ties: lower
false-pass, then the loosest bounds: each sits on the last clean value that lets no further
corrupted clip through, the widest margin for clean clips the calibration did not see), and each
bound is then moved half way to the next observed value beyond it (no calibration clip changes
side; the bound sits in the middle of the gap). Where no combination meets the target (a
corrupted clip lies beyond every clean one), the candidate beyond the clean clips is replaced by
one beyond every clip's value, clean or corrupted (bounds that reject every clip with finite
statistics: false-pass 0 unless a corrupted clip lacks every statistic, which no bound can
reject: an error), and the selection is run again. Where no clip lies below the IR bound (IR
carried no information), it is relaxed to ``ir_floor`` (the paper's 0.97) when that is lower.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

import torch

from .._checks import check_same_shape
from .._tensor_utils import masked_quantile
from ..errors import InputError

#: GE thresholds are stored in px of a frame with this long side (the paper's working size)
REF_LONG_SIDE = 1024


def normalised_ge(ge_px: torch.Tensor, long_side: torch.Tensor,
                  ref_long_side: float = REF_LONG_SIDE) -> torch.Tensor:
    """GE in px of a ``ref_long_side``-px frame: ``ge_px * ref_long_side / long_side`` (same
    shape as the broadcast inputs; px at the working resolution in, reference px out)."""
    return ge_px * (float(ref_long_side) / long_side.to(ge_px.dtype))


@dataclass
class Thresholds:
    """One regime's calibrated gate and how it did on the calibration clips.

    Attributes:
        ir_min: IR lower bound (inclusive); ge_norm_max: GE upper bound (inclusive), px at
            :data:`REF_LONG_SIDE`.
        false_pass: fraction of corrupted clips that pass; true_pass: of clean clips.
        n_clean, n_corrupted: clips the rates are measured on.
    """

    ir_min: float
    ge_norm_max: float
    false_pass: float
    true_pass: float
    n_clean: int
    n_corrupted: int

    def to_dict(self) -> Dict[str, float]:
        return dict(vars(self))


#: the gate's bounds: (threshold key, row statistic, True for a lower bound); both regimes use
#: the first four, F also the fifth (:data:`REGIME_BOUNDS`)
BOUNDS = (("ir_min", "ir", True), ("ge_norm_max", "ge_norm", False),
          ("ge_fine_norm_max", "ge_fine_norm", False),
          ("ge_spread_norm_max", "ge_spread_norm", False),
          ("parallax_ref_min", "parallax_ref", True), ("ge_h_norm_min", "ge_h_norm", True),
          ("ge_peak_norm_max", "ge_peak_norm", False))
#: the bounds a calibration fits per gated regime (``ge_h_norm_min`` and ``ge_peak_norm_max``
#: are still applied when an older file has them)
REGIME_BOUNDS = {"H": BOUNDS[:4], "F": BOUNDS[:5]}
#: percentile of the finest-scale per-pair GE that ``GE_peak`` reads
PEAK_QUANTILE = 0.9


def peak_ge(ge: torch.Tensor, valid: torch.Tensor, q: float = PEAK_QUANTILE) -> Optional[float]:
    """``GE_peak``: the ``q`` quantile (linear interpolation) of the per-pair GE ``ge`` (P,) px
    over the ``valid`` (P,) bool pairs; None when none is valid."""
    value, nonempty = masked_quantile(ge.double(), valid.to(torch.bool), float(q))
    return float(value) if bool(nonempty) else None


def spread_of(ge_fine: Optional[float], ge_peak: Optional[float]) -> float:
    """``GE_spread = GE_peak - GE_fine`` (>= 0; 0 when either is missing): how far the worst
    pairs sit above the typical one, in the unit of the inputs."""
    if ge_fine is None or ge_peak is None:
        return 0.0
    return max(float(ge_peak) - float(ge_fine), 0.0)


def _candidates(values: torch.Tensor, lower: bool,
                reject: Optional[torch.Tensor] = None) -> torch.Tensor:
    """(K,) candidate bounds: the unique finite values of ``values`` (N,), plus one that
    excludes every finite value of ``reject`` (M,) (default: ``values``; a lower bound 1 above
    their largest, an upper one 1 below their smallest). A missing statistic (+inf for a lower
    bound, -inf for an upper one) meets every bound in the gate, so it is never a candidate: an
    infinite bound would be dropped when written and then let through the clips it was chosen
    to reject (the one candidate where nothing is finite: a bound every value meets)."""
    u = torch.unique(values[torch.isfinite(values)])
    if reject is not None:
        r = reject[torch.isfinite(reject)]
        if r.numel() == 0:
            return _candidates(values, lower)
        beyond = (r.max() + 1.0) if lower else (r.min() - 1.0)
        if u.numel() == 0:  # no clean value: no bound, or one that rejects every clip
            u = torch.full((1,), -math.inf if lower else math.inf, dtype=values.dtype)
        return torch.cat([u, beyond.view(1)])
    if u.numel() == 0:  # nothing to bound: a bound every value meets (dropped when written)
        return torch.full((1,), -math.inf if lower else math.inf, dtype=values.dtype)
    beyond = (u[0] - 1.0) if not lower else (u[-1] + 1.0)
    return torch.cat([u, beyond.view(1)])


def reject_all_bound(values: torch.Tensor, lower: bool) -> Optional[float]:
    """A finite bound that every finite value of ``values`` (N,) fails: 1 above the largest
    for a lower bound (``value >= bound``), 1 below the smallest for an upper one, in the unit
    of ``values``; None when none is finite (a missing statistic meets every bound)."""
    r = values[torch.isfinite(values)]
    if r.numel() == 0:
        return None
    return float(r.max() + 1.0) if lower else float(r.min() - 1.0)


def _halfway(bound: float, values: torch.Tensor, lower: bool) -> float:
    """``bound`` moved half way towards the nearest observed value beyond it (lower bounds go
    down, upper bounds up); unchanged when none lies beyond."""
    beyond = values[values < bound] if lower else values[values > bound]
    if beyond.numel() == 0:
        return float(bound)
    nxt = float(beyond.max()) if lower else float(beyond.min())
    return 0.5 * (float(bound) + nxt)


def _pass_grid(cands: Sequence[torch.Tensor], x: torch.Tensor, lower: Sequence[bool]
               ) -> torch.Tensor:
    """(K_1, ..., K_D) fraction of the N clips x (N, D) that meet every bound of each
    combination of candidates (``cands[d]`` (K_d,), ``lower[d]``: x >= bound, else x <= bound);
    0 when N = 0."""
    d_all = len(cands)
    shape = [int(c.numel()) for c in cands]
    if x.shape[0] == 0:
        return torch.zeros(shape, dtype=torch.float64)
    # per-statistic pass masks (K_d, N), combined one candidate of the first statistic at a
    # time: memory K_2 * ... * K_D * N booleans
    n = int(x.shape[0])
    masks = [(x[:, d].view(1, n) >= c.view(-1, 1)) if low else (x[:, d].view(1, n) <= c.view(-1, 1))
             for d, (c, low) in enumerate(zip(cands, lower))]
    rest = torch.ones(shape[1:] + [n], dtype=torch.bool)
    for d in range(1, d_all):
        rest = rest & masks[d].view([shape[d] if i == d else 1 for i in range(1, d_all)] + [n])
    out = torch.stack([(rest & m).sum(-1) for m in masks[0]])
    return out.double() / n


def gate_rates(ir_min: torch.Tensor, ge_max: torch.Tensor, ir: torch.Tensor,
               ge: torch.Tensor) -> torch.Tensor:
    """(A, B) fraction of the N clips (ir, ge: (N,)) that pass ``IR >= ir_min[a]`` and
    ``GE <= ge_max[b]`` (ir_min (A,), ge_max (B,)); 0 when N = 0. ShapeError when ``ir`` and
    ``ge`` differ in shape."""
    check_same_shape([ir, ge], ["ir", "ge"])
    return _pass_grid([ir_min.double(), ge_max.double()],
                      torch.stack([ir.double(), ge.double()], -1), (True, False))


def _best(cands: Sequence[torch.Tensor], clean: torch.Tensor, bad: torch.Tensor,
          lower: Sequence[bool], target_false_pass: float
          ) -> Tuple[Tuple[int, ...], torch.Tensor, torch.Tensor, bool]:
    """The best combination of candidates ``cands[d]`` (K_d,) on ``clean`` (Nc, D) / ``bad``
    (Nb, D) (:func:`select_bounds`): (its index, the (K_1, ..., K_D) true- and false-pass
    grids, whether it meets ``target_false_pass``; where none does, index 0)."""
    tp, fp = _pass_grid(cands, clean, lower), _pass_grid(cands, bad, lower)
    # lexicographic: feasible, true-pass high, false-pass low, then the loosest bounds (the
    # widest margin for clean clips the calibration did not see: a bound moves out to the last
    # clean value that lets no further corrupted clip through; the half-way move then centres
    # it in the gap to the next clip)
    score = tp * 1e8 - fp * 1e4
    for d, (c, low) in enumerate(zip(cands, lower)):
        rank = torch.argsort(torch.argsort(c)).double() / c.numel()  # in [0, 1)
        score = score + ((-rank if low else rank) * 0.1 ** (d + 1)).view(
            [-1 if i == d else 1 for i in range(len(cands))])
    feasible = fp <= float(target_false_pass) + 1e-12
    score = torch.where(feasible, score, torch.full_like(score, -float("inf")))
    idx = torch.unravel_index(torch.argmax(score), score.shape)
    return tuple(int(i) for i in idx), tp, fp, bool(feasible[idx])


def select_bounds(clean: torch.Tensor, bad: torch.Tensor, lower: Sequence[bool],
                  target_false_pass: float = 0.05) -> Tuple[List[float], float, float]:
    """The bounds (one per statistic) with the best true-pass rate at a false-pass rate <=
    ``target_false_pass`` (see the module docstring), each moved half way into its gap.

    The candidates are each statistic's finite values on the clean clips and one beyond them
    all; where no combination of those meets the target (a corrupted clip lies beyond every
    clean one), the last is replaced by one beyond every clip's finite value, clean or
    corrupted, and the best combination of those is taken (bounds that reject every clip
    always meet the target, unless corrupted clips without a finite value of any statistic
    pass them).

    Args:
        clean, bad: (Nc, D) and (Nb, D) statistics of clean and corrupted clips (the grid
            holds ~Nc^D combinations: keep D <= 5 and Nc small); a missing statistic is +inf
            for a lower bound, -inf for an upper one (it meets every bound).
        lower: D flags, True where the statistic must be >= its bound, else <=.
        target_false_pass: largest allowed fraction of corrupted clips passing, in [0, 1].
    Returns:
        (bounds (D floats), true-pass rate, false-pass rate <= ``target_false_pass``); the
        rates are measured before the half-way move, which changes no clip's side.
    Raises:
        InputError: no clips, a target outside [0, 1], or a target below the share of
            corrupted clips that every bound lets through.
    """
    if not 0.0 <= float(target_false_pass) <= 1.0:
        raise InputError(f"target_false_pass must be in [0, 1], got {target_false_pass!r}")
    clean, bad = clean.double(), bad.double()
    every = torch.cat([clean, bad])
    if every.shape[0] == 0:
        raise InputError("no scored clips to calibrate on")
    # an optimal bound sits on a clean clip's value (tightening it to the extreme accepted clean
    # clip keeps the true-pass rate and cannot raise the false-pass rate): K_d <= Nc + 1
    cands = [_candidates(clean[:, d], lower=low) for d, low in enumerate(lower)]
    idx, tp, fp, ok = _best(cands, clean, bad, lower, target_false_pass)
    if not ok:  # a corrupted clip beyond every clean one: bounds beyond every clip too
        cands = [_candidates(clean[:, d], low, every[:, d]) for d, low in enumerate(lower)]
        idx, tp, fp, ok = _best(cands, clean, bad, lower, target_false_pass)
    if not ok:
        stuck = round(float(_pass_grid([c[-1:] for c in cands], bad, lower).min())
                      * bad.shape[0])
        raise InputError(f"no bounds keep the false-pass rate <= {target_false_pass:g}: "
                         f"{stuck} of the {bad.shape[0]} corrupted clips pass every bound "
                         f"(no finite value of any statistic: a missing statistic meets every "
                         f"bound)")
    bounds = []
    for d, (c, low) in enumerate(zip(cands, lower)):
        b, v = float(c[idx[d]]), every[:, d]
        met = b <= float(v.max()) if low else b >= float(v.min())  # some clip meets it
        bounds.append(_halfway(b, v, low) if met else b)
    return bounds, float(tp[idx]), float(fp[idx])


def select_thresholds(ir_clean: torch.Tensor, ge_clean: torch.Tensor, ir_bad: torch.Tensor,
                      ge_bad: torch.Tensor, target_false_pass: float = 0.05, *,
                      ir_floor: float = 0.97) -> Thresholds:
    """The (IR lower, GE upper) bound pair with the best true-pass rate at a false-pass rate
    <= ``target_false_pass`` (:func:`select_bounds` with D = 2).

    Args:
        ir_clean, ge_clean: (Nc,) IR and GE of clean clips (GE in any one unit, e.g. GE_norm).
        ir_bad, ge_bad: (Nb,) the same of corrupted clips.
        target_false_pass: largest allowed fraction of corrupted clips passing, in [0, 1].
        ir_floor: the IR bound where no calibration clip lies below the chosen one (IR carried
            no information there; IR_F is ~1.000 on most clips): min(chosen, ir_floor), by
            default the paper's 0.97.
    Returns:
        :class:`Thresholds` (rates measured on these clips).
    Raises:
        ShapeError: ``ir_clean`` / ``ge_clean`` (or ``ir_bad`` / ``ge_bad``) differ in shape.
        InputError: no clean clip (see also :func:`select_bounds`).
    """
    check_same_shape([ir_clean, ge_clean], ["ir_clean", "ge_clean"])
    check_same_shape([ir_bad, ge_bad], ["ir_bad", "ge_bad"])
    if ir_clean.numel() == 0:  # bounds that pass no clip: a gate that fails everything
        raise InputError(f"no clean clip to calibrate on ({ir_bad.numel()} corrupted): the "
                         f"bounds are placed on the clean clips' values")
    clean = torch.stack([ir_clean.double(), ge_clean.double()], -1)
    bad = torch.stack([ir_bad.double(), ge_bad.double()], -1)
    (ir_min, ge_max), tp, fp = select_bounds(clean, bad, (True, False), target_false_pass)
    ir_min = relax_ir(ir_min, torch.cat([clean[:, 0], bad[:, 0]]), ir_floor)
    return Thresholds(ir_min, ge_max, fp, tp, int(ir_clean.numel()), int(ir_bad.numel()))


def relax_ir(ir_min: float, ir_all: torch.Tensor, ir_floor: float = 0.97) -> float:
    """``min(ir_min, ir_floor)`` where no clip of ``ir_all`` (N,) lies below ``ir_min`` (IR
    carried no information), else ``ir_min``."""
    if ir_all.numel() and not bool((ir_all < ir_min).any()):
        return min(float(ir_min), float(ir_floor))
    return float(ir_min)


def roc_curve(ge_clean: torch.Tensor, ge_bad: torch.Tensor, ir_clean: torch.Tensor,
              ir_bad: torch.Tensor, ir_min: float) -> Dict[str, list]:
    """ROC-style curve of the GE bound at a fixed IR bound: for every candidate GE threshold
    (ascending), the false-pass rate on the corrupted clips and the true-pass rate on the clean
    ones. Returns {"ge_thresholds", "false_pass", "true_pass"} (lists of equal length).
    ShapeError when ``ge_clean`` / ``ir_clean`` (or ``ge_bad`` / ``ir_bad``) differ in shape."""
    check_same_shape([ge_clean, ir_clean], ["ge_clean", "ir_clean"])
    check_same_shape([ge_bad, ir_bad], ["ge_bad", "ir_bad"])
    b = _candidates(torch.cat([ge_clean, ge_bad]).double(), lower=False).sort().values
    a = torch.tensor([float(ir_min)], dtype=torch.float64)
    tp = gate_rates(a, b, ir_clean.double(), ge_clean.double())[0]
    fp = gate_rates(a, b, ir_bad.double(), ge_bad.double())[0]
    return {"ge_thresholds": b.tolist(), "false_pass": fp.tolist(), "true_pass": tp.tolist()}


#: why each bound is in the gate (what a clean rigid clip does that a corruption does not)
BOUND_WHY = {
    "ir_min": "rigid scenes put nearly every match on one model; a warp leaves outliers",
    "ge_norm_max": "the clip GE (eq. 13): a rigid clip's residual is keypoint noise",
    "ge_fine_norm_max": "finest scale alone: coarse scales dilute a sub-pixel corruption",
    "ge_spread_norm_max": "worst pairs - typical pair: a corruption that varies in time",
    "parallax_ref_min": "F only: camera translation past depth leaves parallax no homography "
                        "explains (reference px); a radial warp leaves little",
    "ge_h_norm_min": "F only: median H-inlier residual (older files; capped by tau_H)",
    "ge_peak_norm_max": "90th percentile of the finest-scale pair GE (older files)",
}
#: the statistic's name as a person reads it, and its unit
STAT_LABEL = {"ir": ("IR", ""), "ge_norm": ("GE", "px"), "ge_fine_norm": ("GE_fine", "px"),
              "ge_spread_norm": ("GE_spread", "px"), "ge_h_norm": ("GE_H", "px"),
              "parallax_ref": ("parallax", "ref px"),
              "ge_peak_norm": ("GE_peak", "px")}


@dataclass(frozen=True)
class BoundCheck:
    """One bound of the calibrated gate on one clip.

    Attributes:
        key: threshold key (``ge_norm_max`` ...); statistic: the row statistic it bounds.
        value, threshold: the clip's statistic and the bound, in one unit (px of the frame the
            caller chose, or unitless for IR); inf where a statistic is absent (no valid H pair).
        lower: True for ``value >= threshold``, else ``value <= threshold``.
        passed: whether the clip meets it.
    """

    key: str
    statistic: str
    value: float
    threshold: float
    lower: bool
    passed: bool

    def describe(self) -> str:
        """``"GE_fine 0.41 px > 0.35 px: FAILS"``-style text, 4 significant digits or as many
        more as it takes to tell the value from the threshold (and an IR from 1): never
        "IR 0.9992 < 0.9992: FAILS" (:func:`digits_apart`; a failed bound is always shown
        apart, a met one with at most 8 digits)."""
        name, unit = STAT_LABEL.get(self.statistic, (self.statistic, ""))
        sym = (">=" if self.lower else "<=") if self.passed else ("<" if self.lower else ">")
        u = f" {unit}" if unit else ""
        near = (1.0,) if self.statistic == "ir" else ()  # an IR of 0.99996 is not "1"
        d = digits_apart((self.value, self.threshold) + near,
                         max_digits=8 if self.passed else 17)
        return (f"{name} {self.value:.{d}g}{u} {sym} {self.threshold:.{d}g}{u}: "
                f"{'ok' if self.passed else 'FAILS'}")


def digits_apart(values: Sequence[float], digits: int = 4, max_digits: int = 8,
                 style: str = "g") -> int:
    """The fewest significant digits, from ``digits`` up to ``max_digits``, at which the
    distinct values of ``values`` print differently with ``f"{v:.{d}g}"`` (e.g. 0.999155 and
    0.999158 need 6; a value and 1.0 tell a fraction that rounds to 1 from 1); ``digits``
    when they already differ or all are equal. ``style="f"``: decimals (``f"{v:.{d}f}"``)
    instead of significant digits."""
    distinct = sorted({float(v) for v in values if math.isfinite(float(v))})  # inf: "inf"
    d = int(digits)
    while d < max_digits and len({f"{v:.{d}{style}}" for v in distinct}) < len(distinct):
        d += 1
    return d


def fmt_apart(value: float, *others: float, digits: int = 4, max_digits: int = 8) -> str:
    """``value`` with :func:`digits_apart` significant digits against ``others`` (e.g. an IR
    against 1.0: ``0.99996`` instead of ``1``)."""
    return f"{value:.{digits_apart((value,) + others, digits, max_digits)}g}"


def clip_statistics(ir: float, ge_px: float, scale: float = 1.0, *,
                    ge_fine_px: Optional[float] = None, ge_peak_px: Optional[float] = None,
                    ge_h_px: Optional[float] = None,
                    parallax_ref: Optional[float] = None) -> Dict[str, float]:
    """The gate's row statistics of one clip (keys: :data:`STAT_LABEL`), every GE multiplied
    by ``scale`` (``ref_long_side / long_side`` for normalised px, 1 for working px); the gate's
    ``parallax_ref`` is already in reference px and kept as is. An absent fine / peak GE takes
    the clip GE; an absent GE_H (no valid H pair) or parallax (another gate method) is +inf."""
    fine = float(ge_px if ge_fine_px is None else ge_fine_px) * scale
    peak = float(ge_px if ge_peak_px is None else ge_peak_px) * scale
    return {"ir": float(ir), "ge_norm": float(ge_px) * scale, "ge_fine_norm": fine,
            "ge_peak_norm": peak,  # the spread needs both (0 otherwise, as calibration rows)
            "ge_spread_norm": spread_of(None if ge_fine_px is None else fine,
                                        None if ge_peak_px is None else peak),
            "ge_h_norm": float("inf") if ge_h_px is None else float(ge_h_px) * scale,
            "parallax_ref": float("inf") if parallax_ref is None else float(parallax_ref)}


_BOUND_TOLERANCE = 1e-9  # relative: round-off of the px <-> reference px conversions


def bound_checks(stats: Mapping[str, float], th: Mapping[str, float]) -> List[BoundCheck]:
    """Every bound of ``th`` (threshold key -> value; an absent key is no bound) checked on
    ``stats`` (:func:`clip_statistics`), in :data:`BOUNDS` order. Bounds are inclusive up to
    a relative 1e-9: a GE equal to the bound in working px (:func:`ge_bound_px`, what results
    record) meets it although its normalisation rounds it a few ulps beyond."""
    out = []
    for key, name, low in BOUNDS:
        if key in th and th[key] is not None:
            v, b = float(stats[name]), float(th[key])
            slack = _BOUND_TOLERANCE * abs(b)
            out.append(BoundCheck(key, name, v, b, low,
                                  (v >= b - slack) if low else (v <= b + slack)))
    return out


def calibrated_pass(ir: Optional[float], ge_px: Optional[float], long_side: int,
                    regime: Optional[str], thresholds: Mapping[str, Mapping[str, float]],
                    ref_long_side: float = REF_LONG_SIDE, *, ge_fine_px: Optional[float] = None,
                    ge_peak_px: Optional[float] = None, ge_h_px: Optional[float] = None,
                    parallax_ref: Optional[float] = None) -> Optional[bool]:
    """The calibrated verdict of one clip (None when IR / GE / the regime's thresholds are
    missing): every :func:`bound_checks` entry met.

    Args:
        ir, ge_px: the clip's IR and GE (px at the working resolution, long side
            ``long_side`` px) of the gated model.
        regime: "H" / "F"; thresholds[regime] holds "ir_min", "ge_norm_max" and optionally
            "ge_fine_norm_max", "ge_spread_norm_max", "parallax_ref_min" (or an older file's
            "ge_h_norm_min" / "ge_peak_norm_max"; px at ``ref_long_side``; an absent key is no
            bound).
        ge_fine_px, ge_peak_px: :func:`peak_ge` at q = 0.5 and 0.9 of the gated model (px;
            None: the clip GE stands in).
        ge_h_px: the clip's GE_H (px; None: no valid H pair, which meets ``ge_h_norm_min``).
        parallax_ref: the gate's parallax magnitude (reference px; None: not measured, which
            meets ``parallax_ref_min``).
    """
    th = thresholds.get(str(regime)) if regime is not None else None
    if ir is None or ge_px is None or th is None:
        return None
    stats = clip_statistics(ir, ge_px, float(ref_long_side) / float(long_side),
                            ge_fine_px=ge_fine_px, ge_peak_px=ge_peak_px, ge_h_px=ge_h_px,
                            parallax_ref=parallax_ref)
    return all(c.passed for c in bound_checks(stats, th))


def ge_bound_px(ge_norm_max: float, long_side: int,
                ref_long_side: float = REF_LONG_SIDE) -> float:
    """The GE bound in px at a working resolution of long side ``long_side`` px."""
    return float(ge_norm_max) * float(long_side) / float(ref_long_side)


def pass_rates(passed: Sequence[Optional[bool]]) -> Optional[float]:
    """Fraction of True among the non-None verdicts (None when there are none)."""
    known = [bool(p) for p in passed if p is not None]
    return (sum(known) / len(known)) if known else None


__all__ = ["REF_LONG_SIDE", "BOUNDS", "REGIME_BOUNDS", "PEAK_QUANTILE", "Thresholds",
           "BOUND_WHY", "STAT_LABEL", "BoundCheck", "digits_apart", "fmt_apart",
           "clip_statistics", "bound_checks",
           "normalised_ge", "peak_ge", "spread_of", "gate_rates", "select_bounds",
           "reject_all_bound",
           "select_thresholds",
           "relax_ir", "roc_curve", "calibrated_pass", "ge_bound_px", "pass_rates"]
