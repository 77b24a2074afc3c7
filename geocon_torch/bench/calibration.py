"""Grounded calibration of the report gate (``geocon calibrate``).

    grounded scenes (every category C1-C6 and camera motion, ``seeds`` layouts) -> clean clip
      + each background corruption (rubber_sheet, background_slide, breathing) at ``severities``
    -> score_clips(preset="background", calibration off)           (one row per clip)
    -> per gated regime H / F: the bounds of measures.calibration.REGIME_BOUNDS (IR lower,
       GE_norm upper, GE_fine_norm upper, GE_spread_norm upper; F also the gate's parallax
       magnitude lower) at the target false-pass rate on the corrupted clips of severity
       >= ``min_severity``  (measures.calibration)
    -> calibration.json (thresholds, rates, per-clip scores, provenance, content hash) and
       ROC-style curves per corruption (roc_<regime>.png, matplotlib when installed)

The rates are over clips the background section could score (status ok); unscored clips are
counted in ``rates[...]["unscored"]``. A regime without clean or corrupted clips gets the
thresholds fitted on both regimes pooled (``"pooled": true``, and ``"pooled_reason"``: the
counts per regime; a UserWarning says so too): a calibration of only static categories fits its
F bounds on H clips, which fail most translating clips.
"""
from __future__ import annotations

import dataclasses
import json
import math
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from .._version import __version__
from ..categories import EXPECTED_REGIME
from ..config import GeoConConfig, load_config
from ..errors import InputError, OptionalDependencyError
from ..io._atomic import atomic_output, atomic_write_text
from ..io.calibration import FORMAT, calibration_hash
from ..measures.calibration import (BOUNDS, REF_LONG_SIDE, REGIME_BOUNDS, BoundCheck,
                                    bound_checks, calibrated_pass, clip_statistics,
                                    reject_all_bound, relax_ir, roc_curve, select_bounds,
                                    spread_of)
from ..pipeline import score_clips
from ..synth import CORRUPTIONS, MOTIONS, apply_corruption, render_scene

#: every bound name of the gate (what ``plan.fixed_bounds`` may set)
_BOUND_KEYS = tuple(key for key, _, _ in BOUNDS)
#: the corruptions that break the static background (the background verdict's business)
BACKGROUND_CORRUPTIONS = ("rubber_sheet", "background_slide", "breathing")
GATE_RULE = ("IR >= ir_min and GE_norm <= ge_norm_max and GE_fine_norm <= ge_fine_norm_max "
             "and GE_spread_norm <= ge_spread_norm_max (GE_spread = GE_peak - GE_fine) and "
             "parallax_ref >= parallax_ref_min (the gate's parallax magnitude, reference px; "
             "bounds of thresholds[regime] that are present; "
             "X_norm = X_px * ref_long_side / long_side)")


@dataclass
class CalibrationPlan:
    """What to render and score.

    Attributes:
        frames: frames per clip; size: (H, W) px (the working resolution: clips are scored at
            their native size).
        seeds: scene / texture / corruption seeds.
        backend: features backend; device: where scoring runs.
        corruptions, severities: the corrupted variants of every clean clip.
        target_false_pass: allowed fraction of corrupted clips (severity >= min_severity)
            passing; min_severity: weaker corruptions are scored and plotted, not constrained.
        settings: further renders of every scene besides (size, frames, seeds): dicts with
            "size" [H, W] px, "frames", "seeds" and optionally "letterbox" (black rows added
            above and below the content, px; the corruption acts on the content only) and
            "rate" (multiplies the camera speed of every motion, default 1): the width of the
            calibration family (working sizes, clip lengths, letterboxing, camera speeds).
        fixed_bounds: threshold key -> value set rather than fitted (:func:`fit_regime`).
    """

    frames: int = 8
    size: Tuple[int, int] = (192, 256)
    seeds: Tuple[int, ...] = (0, 1)
    backend: str = "opencv-sift"
    device: str = "cpu"
    corruptions: Tuple[str, ...] = BACKGROUND_CORRUPTIONS
    severities: Tuple[float, ...] = (0.25, 0.5, 1.0)
    target_false_pass: float = 0.05
    min_severity: float = 0.5
    categories: Tuple[str, ...] = field(default_factory=lambda: tuple(MOTIONS))
    settings: Tuple[Dict[str, Any], ...] = ()
    fixed_bounds: Dict[str, float] = field(default_factory=dict)

    def all_settings(self) -> List[Dict[str, Any]]:
        """Every render setting: (size, frames, seeds) first, then ``settings`` (letterbox 0
        and rate 1 unless given)."""
        first = {"size": list(self.size), "frames": self.frames, "seeds": list(self.seeds)}
        return [dict({"letterbox": 0, "rate": 1.0}, **dict(st))
                for st in [first] + [dict(v) for v in self.settings]]

    def config(self) -> GeoConConfig:
        """The scoring config: the backend, calibration off (no circularity)."""
        return load_config({"features": {"backend": self.backend},
                            "background": {"calibration": None}})


#: render_scene's camera-speed option and its default per (category, motion) (the static
#: cameras of C1 / C4 have none)
_SPEED = {("C2", "pan"): ("rate", 0.4), ("C2", "tilt"): ("rate", -0.3),
          ("C2", "roll"): ("rate", 0.5), ("C3", "truck"): ("speed", 0.06),
          ("C3", "dolly"): ("speed", 0.12), ("C5", "arc"): ("rate", 1.0),
          ("C5", "orbit"): ("rate", 1.5), ("C6", "truck"): ("speed", 0.06)}


def _letterbox(frames: torch.Tensor, rows: int) -> torch.Tensor:
    """(T, 3, H + 2 rows, W): black bars of ``rows`` px above and below (T, 3, H, W) frames."""
    if rows <= 0:
        return frames
    return torch.nn.functional.pad(frames, (0, 0, int(rows), int(rows)))


def scene_clips(plan: CalibrationPlan) -> Iterator[Tuple[List[Dict[str, Any]], List[torch.Tensor]]]:
    """Per (setting, category, motion, seed): the clips' labels and (T, 3, H, W) uint8 frames,
    clean first, then every corruption x severity (rendered once, corrupted as
    ``render_scene`` does, then letterboxed)."""
    for st in plan.all_settings():
        for cat in plan.categories:
            for motion in MOTIONS[cat]:
                opts = {}
                if float(st["rate"]) != 1.0 and (cat, motion) in _SPEED:
                    name, default = _SPEED[(cat, motion)]
                    opts[name] = default * float(st["rate"])
                for seed in st["seeds"]:
                    clean = render_scene(cat, motion=motion, num_frames=int(st["frames"]),
                                         size=tuple(st["size"]), seed=int(seed), **opts).frames
                    labels = [{"category": cat, "motion": motion, "seed": int(seed),
                               "corruption": None, "severity": 0.0,
                               "size": list(st["size"]), "frames": int(st["frames"]),
                               "letterbox": int(st["letterbox"]), "rate": float(st["rate"])}]
                    frames = [clean]
                    for kind in plan.corruptions:
                        for sev in plan.severities:
                            labels.append(dict(labels[0], corruption=kind, severity=float(sev)))
                            frames.append(apply_corruption(clean, kind, float(sev),
                                                           seed=int(seed)))
                    yield labels, [_letterbox(f, int(st["letterbox"])) for f in frames]


def calibration_row(label: Dict[str, Any], res: Dict[str, Any]) -> Dict[str, Any]:
    """One clip's calibration row: its ``label`` and the background numbers of its result
    dict ``res`` (GE also in px of a ``REF_LONG_SIDE``-px frame: scaled by the background
    block's ``content_long_side``, letterbox / pillarbox bars left out, else the working size's
    long side).

    ``parallax_ref`` is the block's (recorded only when a calibration file is in use) or else
    the weight-free gate's ``magnitude_ref_px`` from ``res["gate"]["evidence"]`` (the same
    number): calibration clips are scored with the calibration off, and without it the
    parallax bound would be fitted and judged on no value at all (None reads as +inf)."""
    bg = res.get("background") or {}
    parallax = bg.get("parallax_ref")
    if parallax is None:
        parallax = (((res.get("gate") or {}).get("evidence") or {}).get("magnitude_ref_px"))
    size = res.get("working_size") or [0, 0]
    long_side = int(bg.get("content_long_side") or (max(size) if size else 0))  # bars left out

    def norm(v: Optional[float]) -> Optional[float]:
        return float(v) * REF_LONG_SIDE / long_side if v is not None and long_side else None

    return dict(label, status=res.get("status"), regime=res.get("regime"), ir=bg.get("ir"),
                ge_px=bg.get("ge_px"), ge_norm=norm(bg.get("ge_px")), long_side=long_side,
                ge_fine_px=bg.get("ge_fine_px"), ge_fine_norm=norm(bg.get("ge_fine_px")),
                ge_peak_px=bg.get("ge_peak_px"), ge_peak_norm=norm(bg.get("ge_peak_px")),
                ge_spread_norm=spread_of(norm(bg.get("ge_fine_px")), norm(bg.get("ge_peak_px"))),
                ir_h=bg.get("ir_h"), ge_h_px=bg.get("ge_h_px"), ge_h_norm=norm(bg.get("ge_h_px")),
                ir_f=bg.get("ir_f"), ge_f_px=bg.get("ge_f_px"),
                parallax_ref=None if parallax is None else float(parallax),
                **{"pass": bg.get("pass")})


def score_plan(plan: CalibrationPlan,
               progress: Optional[Callable[[str], None]] = None) -> List[Dict[str, Any]]:
    """Render and score every clip of ``plan`` (preset background, one batch per scene);
    returns one row per clip (:func:`calibration_row`)."""
    cfg, rows = plan.config(), []
    for labels, frames in scene_clips(plan):
        results = score_clips(frames, config=cfg, device=plan.device, preset="background")
        rows.extend(calibration_row(lb, r.to_dict()) for lb, r in zip(labels, results))
        if progress is not None:
            l0 = labels[0]
            progress(f"{l0['category']} {l0['motion']} seed {l0['seed']} "
                     f"{l0['size'][1]}x{l0['size'][0]}x{l0['frames']} lb {l0['letterbox']} "
                     f"rate {l0['rate']:g}: {len(labels)} clips")
    return rows


def _scored(rows: Sequence[Dict[str, Any]]) -> List[Dict[str, Any]]:
    """The rows a fit can use: ok, gated H or F, with IR and GE. Rows whose IR or GE is not a
    finite number (NaN moved bounds and broke the written JSON) are left out with a warning
    naming them."""
    out = [r for r in rows if r.get("status") == "ok" and r.get("ir") is not None
           and r.get("ge_norm") is not None and r.get("regime") in ("H", "F")]
    finite = [math.isfinite(float(r["ir"])) and math.isfinite(float(r["ge_norm"])) for r in out]
    bad = [r for r, f in zip(out, finite) if not f]
    if bad:
        names = ", ".join(str(r.get("clip", "?")) for r in bad[:5])
        warnings.warn(f"calibration: {len(bad)} row(s) with a non-finite IR or GE left out "
                      f"({names}{', ...' if len(bad) > 5 else ''})", stacklevel=3)
    return [r for r, f in zip(out, finite) if f]


def _stat(row: Dict[str, Any], name: str) -> float:
    """A row's statistic for a bound: GE_peak falls back to the clip GE, a missing GE_H (no valid
    H pair) or parallax (another gate method) is +inf (as
    :func:`~geocon_torch.measures.calibration.calibrated_pass` reads them)."""
    v = row.get(name)
    if v is None and name in ("ge_fine_norm", "ge_peak_norm"):
        v = row.get("ge_norm")
    if v is None and name == "ge_spread_norm":
        v = spread_of(row.get("ge_fine_norm"), row.get("ge_peak_norm"))
    return float("inf") if v is None else float(v)


def _matrix(rows: Sequence[Dict[str, Any]], names: Sequence[str]) -> torch.Tensor:
    """(N, D) float64 statistics ``names`` of ``rows``."""
    return torch.tensor([[_stat(r, n) for n in names] for r in rows],
                        dtype=torch.float64).view(len(rows), len(names))


def _vectors(rows: Sequence[Dict[str, Any]]) -> Tuple[torch.Tensor, torch.Tensor]:
    m = _matrix(rows, ("ir", "ge_norm"))
    return m[:, 0], m[:, 1]


def _split(rows: Sequence[Dict[str, Any]], min_severity: float
           ) -> Tuple[List[Dict[str, Any]], List[Dict[str, Any]]]:
    """(clean rows, corrupted rows of severity >= min_severity)."""
    clean = [r for r in rows if r["corruption"] is None]
    bad = [r for r in rows if r["corruption"] is not None and r["severity"] >= min_severity]
    return clean, bad


def _meets(m: torch.Tensor, spec: Sequence[Tuple[str, str, bool]],
           bounds: Dict[str, float]) -> torch.Tensor:
    """(N,) bool: the rows of ``m`` (N, D) (statistics of ``spec`` in its order) that meet
    every bound of ``bounds`` (threshold key -> value; a key not in it is no bound)."""
    ok = torch.ones(m.shape[0], dtype=torch.bool)
    for d, (key, _, low) in enumerate(spec):
        if key in bounds:
            ok &= (m[:, d] >= bounds[key]) if low else (m[:, d] <= bounds[key])
    return ok


def fit_regime(clean: Sequence[Dict[str, Any]], bad: Sequence[Dict[str, Any]], regime: str,
               target_false_pass: float = 0.05,
               fixed: Optional[Dict[str, float]] = None) -> Dict[str, Any]:
    """One regime's bounds (:data:`~geocon_torch.measures.calibration.REGIME_BOUNDS`) fitted on
    clean / corrupted rows, with their rates and counts (the IR bound relaxed as in
    :func:`~geocon_torch.measures.calibration.relax_ir`).

    ``fixed`` (threshold key -> value) sets bounds instead of fitting them: the clips they fail
    fail, the other bounds are fitted on the clips they let through, at the false-pass budget
    the fixed bounds leave (the rates count every clip). Where the fixed bounds fail every clean
    clip, the other bounds are set beyond every clip's finite value
    (:func:`~geocon_torch.measures.calibration.reject_all_bound`), a gate that passes no clean
    clip (with a warning, as every fit that passes none); with every bound fixed, the rates are
    the fixed gate's."""
    spec = REGIME_BOUNDS[regime]
    fixed = {k: float(v) for k, v in (fixed or {}).items() if k in {key for key, _, _ in spec}}
    free_dims = [d for d, (key, _, _) in enumerate(spec) if key not in fixed]
    free = [spec[d] for d in free_dims]
    c_all, b_all = _matrix(clean, [n for _, n, _ in spec]), _matrix(bad, [n for _, n, _ in spec])
    keep_c, keep_b = _meets(c_all, spec, fixed), _meets(b_all, spec, fixed)
    c, b = c_all[keep_c][:, free_dims], b_all[keep_b][:, free_dims]
    n_c, n_b = max(len(clean), 1), max(len(bad), 1)
    out: Dict[str, Any] = {}
    if clean and not bool(keep_c.any()):  # the fixed bounds fail every clean clip
        every = torch.cat([c_all, b_all])
        for d, (key, _, low) in zip(free_dims, free):
            bound = reject_all_bound(every[:, d], low)
            if bound is not None:  # no finite value: no bound (a missing value meets any)
                out[key] = bound
        tp, fp = 0.0, float(_meets(b_all, spec, dict(out, **fixed)).sum()) / n_b
    elif not free:  # nothing to fit: the fixed gate's rates
        tp, fp = float(keep_c.sum()) / n_c, float(keep_b.sum()) / n_b
    else:
        # the same number of corrupted clips may pass among those the fixed bounds let through
        target = min(1.0, float(target_false_pass) * n_b / max(int(keep_b.sum()), 1))
        bounds, tp, fp = select_bounds(c, b, [low for _, _, low in free], target)
        tp, fp = tp * int(keep_c.sum()) / n_c, fp * int(keep_b.sum()) / n_b
        # a bound on a statistic no clip has (GE_H of clips without valid H pairs) is no bound
        out = {key: v for (key, _, _), v in zip(free, bounds) if math.isfinite(v)}
        if "ir_min" in out:
            out["ir_min"] = relax_ir(out["ir_min"], torch.cat([c_all[:, 0], b_all[:, 0]]))
    out.update(fixed)  # a fixed bound is set, not fitted (nor relaxed)
    out = {key: out[key] for key, _, _ in spec if key in out}  # BOUNDS order
    out.update(false_pass=fp, true_pass=tp, n_clean=len(clean), n_corrupted=len(bad))
    if clean and tp == 0.0:
        why = (f"the fixed bounds {', '.join(f'{k} = {v:g}' for k, v in fixed.items())} fail "
               f"all its {len(clean)} clean clips" if not bool(keep_c.any()) else
               f"the statistics do not separate its {len(clean)} clean from its {len(bad)} "
               f"corrupted clips")
        warnings.warn(f"calibration: no {regime} bounds pass a clean clip at false-pass <= "
                      f"{target_false_pass:g} ({why}): this gate fails every {regime} clip",
                      stacklevel=2)
    return out


def fit_thresholds(rows: Sequence[Dict[str, Any]], target_false_pass: float = 0.05,
                   min_severity: float = 0.5, fixed: Optional[Dict[str, float]] = None
                   ) -> Dict[str, Dict[str, Any]]:
    """{"H": {...}, "F": {...}}: each regime's bounds (:func:`fit_regime`, plus "pooled") from the
    scored rows of that gated regime (both regimes' rows pooled when one side is empty: then
    also "pooled_reason", the counts per regime, and a UserWarning with it)."""
    scored = _scored(rows)
    clean_all, bad_all = _split(scored, min_severity)
    if not clean_all or not bad_all:
        raise InputError(f"calibration needs scored clean and corrupted clips, got "
                         f"{len(clean_all)} clean and {len(bad_all)} corrupted")
    out: Dict[str, Dict[str, Any]] = {}
    for regime in ("H", "F"):
        clean = [r for r in clean_all if r["regime"] == regime]
        bad = [r for r in bad_all if r["regime"] == regime]
        pooled = not clean or not bad
        c, b = (clean_all, bad_all) if pooled else (clean, bad)
        out[regime] = dict(fit_regime(c, b, regime, target_false_pass, fixed), pooled=pooled)
        if pooled:  # recorded only then: the files of two-regime calibrations keep their bytes
            out[regime]["pooled_reason"] = _pooled_reason(regime, clean_all, bad_all)
            warnings.warn(f"calibration: {out[regime]['pooled_reason']}", stacklevel=2)
    return out


def _pooled_reason(regime: str, clean: Sequence[Dict[str, Any]],
                   bad: Sequence[Dict[str, Any]]) -> str:
    """Why ``regime``'s bounds were fitted on both regimes' ``clean`` / ``bad`` rows: the
    counts per gated regime, and the categories that would give it clips of its own."""
    def counts(rows: Sequence[Dict[str, Any]]) -> str:
        return ", ".join(f"{sum(r['regime'] == g for r in rows)} {g}" for g in ("H", "F"))

    other = "F" if regime == "H" else "H"
    kind = "clean" if not any(r["regime"] == regime for r in clean) else "corrupted"
    every = clean if kind == "clean" else bad  # (scored rows: all gated the other regime)
    cats = ", ".join(c for c, g in EXPECTED_REGIME.items() if g == regime)
    risk = (f"may fail most {regime} clips (its true-pass rate counts {other} clips)"
            if kind == "clean" else f"no corrupted {regime} clip tested them (its false-pass "
            f"rate counts {other} clips)")
    return (f"no {kind} {regime} clips ({len(every)} {kind}, all gated {other}; clean: "
            f"{counts(clean)}; corrupted: {counts(bad)}): the {regime} bounds are "
            f"fitted on both regimes' clips pooled and {risk}; add clips of the categories of "
            f"regime {regime} ({cats})")


def verdict(row: Dict[str, Any], thresholds: Dict[str, Dict[str, float]],
            ref_long_side: float = REF_LONG_SIDE) -> Optional[bool]:
    """The calibrated verdict of a calibration row (None when not scored)."""
    if row.get("status") != "ok":
        return None
    return calibrated_pass(row.get("ir"), row.get("ge_px"), row.get("long_side") or 1,
                           row.get("regime"), thresholds, ref_long_side,
                           ge_fine_px=row.get("ge_fine_px"), ge_peak_px=row.get("ge_peak_px"),
                           ge_h_px=row.get("ge_h_px"), parallax_ref=row.get("parallax_ref"))


def row_checks(row: Dict[str, Any], thresholds: Dict[str, Dict[str, float]],
               ref_long_side: float = REF_LONG_SIDE) -> List[BoundCheck]:
    """Every bound of the row's regime checked on a calibration row (values in px of a
    ``ref_long_side``-px frame, as the thresholds; :func:`~geocon_torch.measures.calibration.
    bound_checks`, what ``geocon explain`` lists); [] when the row is not scored or its regime
    has no thresholds."""
    th = thresholds.get(str(row.get("regime")))
    if (row.get("status") != "ok" or th is None or row.get("ir") is None
            or row.get("ge_px") is None):
        return []
    stats = clip_statistics(row["ir"], row["ge_px"],
                            float(ref_long_side) / float(row.get("long_side") or 1),
                            ge_fine_px=row.get("ge_fine_px"), ge_peak_px=row.get("ge_peak_px"),
                            ge_h_px=row.get("ge_h_px"), parallax_ref=row.get("parallax_ref"))
    return bound_checks(stats, th)


def evaluate(rows: Sequence[Dict[str, Any]], thresholds: Dict[str, Dict[str, float]],
             min_severity: float = 0.5, ref_long_side: float = REF_LONG_SIDE
             ) -> Dict[str, Any]:
    """Rates of the calibrated gate on ``rows``: "true_pass" on clean clips, "false_pass" on
    corrupted ones (severity >= min_severity) overall and per corruption, with counts and the
    unscored clips; also the paper gate's rates ("paper_*")."""
    clean, bad = _split(rows, min_severity)
    out: Dict[str, Any] = {}
    groups = [("clean", clean), ("corrupted", bad)] + [
        (kind, [r for r in bad if r["corruption"] == kind])
        for kind in sorted({r["corruption"] for r in bad})]
    for name, group in groups:
        cal = [verdict(r, thresholds, ref_long_side) for r in group]
        paper = [r.get("pass") if r.get("status") == "ok" else None for r in group]
        known, pknown = [v for v in cal if v is not None], [v for v in paper if v is not None]
        out[name] = {"n": len(known), "unscored": len(group) - len(known),
                     "pass_rate": (sum(known) / len(known)) if known else None,
                     "paper_pass_rate": (sum(pknown) / len(pknown)) if pknown else None}
    out["true_pass"] = out["clean"]["pass_rate"]
    out["false_pass"] = out["corrupted"]["pass_rate"]
    return out


def _roc_vectors(rows: Sequence[Dict[str, Any]], regime: str, others: Dict[str, float]
                 ) -> Tuple[torch.Tensor, torch.Tensor]:
    """(IR, GE_norm) of ``rows`` with IR set to -1 where a clip fails one of the ``others``
    bounds (any GE bound then leaves it failing)."""
    ir, ge = _vectors(rows)
    ok = torch.tensor([bool(verdict(r, {regime: others})) for r in rows], dtype=torch.bool)
    return torch.where(ok, ir, torch.full_like(ir, -1.0)), ge


def roc_curves(rows: Sequence[Dict[str, Any]], thresholds: Dict[str, Dict[str, float]],
               min_severity: float = 0.5) -> Dict[str, Dict[str, Any]]:
    """{regime: {corruption: ROC curve}} of the GE bound at the regime's other bounds
    (:func:`~geocon_torch.measures.calibration.roc_curve`; a clip failing a bound other than
    ``ge_norm_max`` never passes), corrupted clips of severity >= min_severity of that
    corruption against the clean clips."""
    scored = _scored(rows)
    out: Dict[str, Dict[str, Any]] = {}
    for regime, th in thresholds.items():
        clean = [r for r in scored if r["regime"] == regime and r["corruption"] is None]
        bad = [r for r in scored if r["regime"] == regime and r["corruption"] is not None
               and r["severity"] >= min_severity]
        others = dict(th, ge_norm_max=float("inf"))
        ir_c, ge_c = _roc_vectors(clean, regime, others)
        out[regime] = {}
        for kind in sorted({r["corruption"] for r in bad}):
            ir_b, ge_b = _roc_vectors([r for r in bad if r["corruption"] == kind], regime,
                                      others)
            out[regime][kind] = roc_curve(ge_c, ge_b, ir_c, ir_b, th["ir_min"])
    return out


def calibration_document(plan: CalibrationPlan, rows: List[Dict[str, Any]],
                         scored_by: Optional[str] = None) -> Dict[str, Any]:
    """The calibration file's content (with its ``content_hash``).

    ``scored_by``: the geocon_torch version that scored ``rows`` (a refit's source document's
    ``version``); None: this one. ``version`` names the version of the scores, so a refit of
    another version's scores keeps it and adds ``refit_by`` (the running version)."""
    th = fit_thresholds(rows, plan.target_false_pass, plan.min_severity, plan.fixed_bounds)
    plan_d = asdict(plan)
    doc: Dict[str, Any] = {
        "format": FORMAT, "gate": GATE_RULE, "ref_long_side": REF_LONG_SIDE,
        "backend": plan.backend, "working_size": list(plan.size),
        "long_side": int(max(plan.size)), "frames": plan.frames,
        "seeds": sorted({int(v) for st in plan.all_settings() for v in st["seeds"]}),
        "categories": {c: list(MOTIONS[c]) for c in plan.categories},
        "corruptions": list(plan.corruptions), "severities": list(plan.severities),
        "target_false_pass": plan.target_false_pass, "min_severity": plan.min_severity,
        "thresholds": th, "rates": evaluate(rows, th, plan.min_severity),
        "score_config_hash": plan.config().config_hash(), "version": __version__,
        "plan": {k: (list(v) if isinstance(v, tuple) else v) for k, v in plan_d.items()},
        "settings": plan.all_settings(),
        "clips": rows,
    }
    if scored_by is not None and scored_by != __version__:
        doc.update(version=scored_by, refit_by=__version__)
    doc["content_hash"] = calibration_hash(doc)
    return doc


def plot_roc(curves: Dict[str, Dict[str, Any]], thresholds: Dict[str, Dict[str, Any]],
             outdir: Path) -> List[Path]:
    """roc_<regime>.png per regime (false-pass vs true-pass, one curve per corruption, the
    chosen operating point marked); [] when matplotlib is missing. Each PNG is written
    atomically (complete or as before; an OSError of the write names the PNG)."""
    try:
        from ..report.plots import _plt  # lazy: optional plotting dependency
        plt = _plt()  # figures without pyplot: the caller's backend is left alone
    except OptionalDependencyError:
        return []
    paths = []
    for regime, by_kind in curves.items():
        fig, ax = plt.subplots(figsize=(4.5, 4))
        for kind, c in by_kind.items():
            ax.step(c["false_pass"], c["true_pass"], where="post", label=kind)
        th = thresholds[regime]
        ax.plot([th["false_pass"]], [th["true_pass"]], "ko",
                label=f"chosen: IR>={th['ir_min']:.3f}, GE_norm<={th['ge_norm_max']:.3g}px")
        ax.set_xlabel("false-pass rate (corrupted clips)")
        ax.set_ylabel("true-pass rate (clean clips)")
        ax.set_title(f"calibrated report gate, regime {regime}")
        ax.set_xlim(-0.02, 1.02)
        ax.set_ylim(-0.02, 1.02)
        ax.legend(fontsize=7, loc="lower right")
        path = outdir / f"roc_{regime}.png"
        try:  # atomically: a failed write leaves the previous plot and its error names path
            fig.tight_layout()
            with atomic_output(path) as tmp:
                fig.savefig(tmp, dpi=100)
        finally:
            plt.close(fig)
        paths.append(path)
    return paths


def run_calibration(plan: CalibrationPlan, outdir: Path,
                    progress: Optional[Callable[[str], None]] = None,
                    rows: Optional[List[Dict[str, Any]]] = None,
                    scored_by: Optional[str] = None) -> Dict[str, Any]:
    """Score the plan (or take its already scored ``rows``, scored by geocon_torch
    ``scored_by``: :func:`calibration_document`), write OUTDIR/calibration.json and
    the ROC plots; returns the document (plus "plots": the written plot paths, not part of the
    file). calibration.json, roc.json and the roc_*.png plots are each written atomically
    (complete or as before)."""
    outdir = Path(outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    rows = score_plan(plan, progress) if rows is None else list(rows)
    doc = calibration_document(plan, rows, scored_by)
    atomic_write_text(outdir / "calibration.json", json.dumps(doc, indent=1, allow_nan=False))
    curves = roc_curves(rows, doc["thresholds"], plan.min_severity)
    atomic_write_text(outdir / "roc.json", json.dumps(curves, allow_nan=False))
    plots = plot_roc(curves, doc["thresholds"], outdir)
    return dict(doc, plots=[str(p) for p in plots])


def refit_plan(doc: Dict[str, Any], target_false_pass: float, min_severity: float
               ) -> Tuple[CalibrationPlan, List[Dict[str, Any]]]:
    """The plan of an earlier calibration document ``doc`` with a new target false-pass rate
    and minimum severity, and its scored clips: refitting the bounds needs no rescoring. The
    scores depend on the plan's clips and scoring config, which ``score_config_hash`` records
    (another one is refused), and on the geocon_torch version that scored them (``doc``'s
    ``version``, :func:`scores_version`): a release may move them, so clips scored by another
    version keep their numbers in a refit (pass the version on to :func:`run_calibration`,
    whose document then records it) where scoring the plan again would give this version's.

    Raises:
        InputError: ``doc`` is not a calibration document of this format with its plan (every
            field of :class:`CalibrationPlan` it records known and of the right type, the
            required ones present: :data:`PLAN_REQUIRED`) and clips.
    """
    need = ("--refit needs a calibration.json written by geocon calibrate (with its 'plan' "
            "and scored 'clips')")
    if not isinstance(doc, dict):
        raise InputError(f"{need}; this file holds a JSON {type(doc).__name__}, not a "
                         f"calibration")
    if doc.get("format", FORMAT) != FORMAT:
        raise InputError(f"--refit: the file has format {doc['format']!r}, this geocon_torch "
                         f"reads {FORMAT!r} (written by a newer geocon_torch, or not a "
                         f"calibration)")
    plan_d, rows = doc.get("plan"), doc.get("clips")
    if not isinstance(plan_d, dict) or not isinstance(rows, list) or not rows:
        raise InputError(need)
    problem = _plan_problem(plan_d) or _rows_problem(rows)
    if problem:
        raise InputError(f"--refit: {problem} (the file must be a calibration.json written by "
                         f"geocon calibrate)")
    fields = {k: (tuple(v) if isinstance(v, list) else v) for k, v in plan_d.items()}
    plan = CalibrationPlan(**dict(fields, target_false_pass=float(target_false_pass),
                                  min_severity=float(min_severity)))
    if doc.get("score_config_hash") not in (None, plan.config().config_hash()):
        raise InputError("--refit: the clips were scored with another scoring config "
                         f"({doc.get('score_config_hash')}); score them again")
    return plan, rows


#: the plan fields a calibration document must record (the others have defaults that do
#: not change the clips: older files lack ``settings`` / ``fixed_bounds``; the target and the
#: minimum severity are the refit's)
PLAN_REQUIRED = ("frames", "size", "seeds", "backend", "corruptions", "severities",
                 "categories")


def _is_int(v: Any, low: int = 0) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= low


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _ints(v: Any, n: Optional[int] = None, low: int = 0) -> bool:
    """``v`` is a non-empty list of ints >= ``low`` (of ``n`` items when given)."""
    return (isinstance(v, list) and bool(v) and (n is None or len(v) == n)
            and all(_is_int(x, low) for x in v))


def _strs(v: Any, allowed: Optional[Sequence[str]] = None) -> bool:
    return (isinstance(v, list) and bool(v) and all(isinstance(x, str) for x in v)
            and (allowed is None or all(x in allowed for x in v)))


def _setting_problem(st: Any) -> Optional[str]:
    """What is wrong with one recorded render setting (None: nothing)."""
    if not isinstance(st, dict):
        return f"a setting must be a JSON object, got {st!r}"
    unknown = sorted(set(st) - {"size", "frames", "seeds", "letterbox", "rate"})
    if unknown or not {"size", "frames", "seeds"} <= set(st):
        return f"a setting needs 'size', 'frames', 'seeds' (and 'letterbox', 'rate'), got {st!r}"
    if not (_ints(st["size"], 2, 1) and _is_int(st["frames"], 2) and _ints(st["seeds"])
            and _is_int(st.get("letterbox", 0)) and _is_num(st.get("rate", 1.0))
            and st.get("rate", 1.0) > 0):
        return (f"a setting needs size [H, W] ints >= 1, frames an int >= 2, seeds ints >= 0, "
                f"letterbox an int >= 0 and rate a finite number > 0, got {st!r}")
    return None


def _plan_problem(plan: Dict[str, Any]) -> Optional[str]:
    """What is wrong with a calibration document's ``plan`` (None: a plan this version reads):
    unknown or missing fields, or a field of the wrong type."""
    known = {f.name for f in dataclasses.fields(CalibrationPlan)}
    unknown = sorted(set(plan) - known)
    if unknown:
        return (f"plan field(s) {', '.join(map(repr, unknown))} unknown to this geocon_torch "
                f"(written by a newer geocon_torch?)")
    missing = [k for k in PLAN_REQUIRED if k not in plan]
    if missing:
        return f"the plan lacks {', '.join(map(repr, missing))}"
    checks = {
        "frames": (_is_int(plan["frames"], 2), "an int >= 2"),
        "size": (_ints(plan["size"], 2, 1), "[H, W], two ints >= 1"),
        "seeds": (_ints(plan["seeds"]), "a non-empty list of ints >= 0"),
        "backend": (isinstance(plan["backend"], str), "a features backend name"),
        "device": (isinstance(plan.get("device", "cpu"), str), "a torch device name"),
        "corruptions": (_strs(plan["corruptions"], CORRUPTIONS), f"a list of {CORRUPTIONS}"),
        "severities": (isinstance(plan["severities"], list) and bool(plan["severities"])
                       and all(_is_num(v) for v in plan["severities"]),
                       "a non-empty list of finite numbers"),
        "categories": (_strs(plan["categories"], tuple(MOTIONS)), f"a list of {tuple(MOTIONS)}"),
        "settings": (isinstance(plan.get("settings", []), list), "a list of settings"),
        "fixed_bounds": (isinstance(plan.get("fixed_bounds", {}), dict)
                         and all(k in _BOUND_KEYS and _is_num(v)
                                 for k, v in plan.get("fixed_bounds", {}).items()),
                         f"an object from bound names ({', '.join(_BOUND_KEYS)}) to finite "
                         f"numbers"),
    }
    for key, (ok, want) in checks.items():
        if not ok:
            return f"plan.{key} must be {want}, got {plan.get(key)!r}"
    for st in plan.get("settings", []):
        problem = _setting_problem(st)
        if problem:
            return f"plan.settings: {problem}"
    return None


def _rows_problem(rows: List[Any]) -> Optional[str]:
    """What is wrong with a document's ``clips`` (None: every one a row the fit reads)."""
    for k, r in enumerate(rows):
        if not (isinstance(r, dict) and "corruption" in r and _is_num(r.get("severity"))):
            return f"clips[{k}] is not a scored clip (a 'corruption' and a 'severity')"
    return None


def scores_version(doc: Dict[str, Any]) -> str:
    """The geocon_torch version that scored the clips of calibration document ``doc`` (its
    ``version``; "unknown" when it records none)."""
    version = doc.get("version")
    return str(version) if version else "unknown"


__all__ = ["BACKGROUND_CORRUPTIONS", "GATE_RULE", "CalibrationPlan", "scene_clips", "score_plan",
           "calibration_row", "fit_regime", "fit_thresholds", "verdict", "row_checks", "evaluate",
           "roc_curves", "calibration_document", "plot_roc", "refit_plan", "scores_version",
           "run_calibration"]
