"""The gate stage of ``score_clip`` (paper Algorithm 1 A): which evidence decides, which pairs
the weight-free statistic reads, and which model (H or F) each evaluated pair is scored with.

Row layout (as in :mod:`geocon_torch.sections.background`): the rows of the statistics are
frame pairs x scales; ``evaluated`` names the finest-scale rows of the evaluated (adjacent)
pairs in temporal order, ``gate_rows`` the finest-scale rows of the wide gate pairs of
:func:`~geocon_torch.io.pairs.parallax_gate_pairs` (wide pairs, halves, quarters).

The U band is resolved by one rule, :func:`~.decision.resolve_u` (per pair) /
:func:`~.decision.resolve_u_clip` (one clip decision): F when GRIC prefers F or F's inlier
ratio beats H's by more than ``gate.u_margin``.

Which tier decides (:func:`decide_gates`, :func:`gate_source`): the widest tier with a valid
pair, unless it does not decide F and a narrower tier whose pairs share markedly more of the
scene does (:func:`narrower_f`). Parallax grows with the baseline, so the wide pairs are read
first; but a wide-pair H only says that what the two frames *share* fits one homography: on a
long translating shot the first and last frames may share one plane (the back wall), which a
homography explains whatever the camera did, while the narrower pairs see the parallax (F: its
lower confidence bound above the F band, which no rotation of a rigid scene produces).
"""
from __future__ import annotations

import statistics
from itertools import accumulate
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch

from .._tensor_utils import group_index, grouped_quantiles, to_device
from ..config import GateConfig, GeoConConfig
from ..errors import InputError
from ..geometry import fundamental_residuals, homography_residuals
from ..io.pairs import gate_pair_tiers
from ..types import Clip, Fit, concat_fits, pad_points
from .decision import CODE, GateDecision, resolve_u, resolve_u_clip
from .dust3r import gate_from_dust3r
from .parallax import (check_statistic, decide_on_host, gate_from_parallax, gate_keys,
                       parallax_statistics)
from .poses import gate_from_poses

GATE_METHODS = ("poses", "dust3r", "parallax")
Stats = Dict[str, torch.Tensor]


def resolve_gate_method(config: GeoConConfig, poses: Any) -> str:
    """``config.gate.method`` made concrete: "auto" is "poses" when ``poses`` are given, else
    "dust3r" when a DUSt3R checkpoint is configured, else "parallax" (weight-free).

    Raises:
        InputError: an unknown method, or "poses" without a pose log.
    """
    method = config.gate.method
    if method == "auto":
        if poses is not None:
            return "poses"
        return "dust3r" if config.gate.dust3r_checkpoint else "parallax"
    if method not in GATE_METHODS:
        raise InputError(f"gate.method must be auto, poses, dust3r or parallax, got {method!r}")
    if method == "poses" and poses is None:
        raise InputError("gate.method='poses' needs score_clip(..., poses=PATH_OR_TENSOR)")
    return method


def external_gate(method: str, clip: Clip, pairs: torch.Tensor, poses: Any,
                  config: GeoConConfig, device: Optional[torch.device] = None
                  ) -> Optional[GateDecision]:
    """The decision of a pose source (``method`` "poses" or "dust3r") for the evaluated
    ``pairs``; None for the weight-free "parallax" gate, which needs the fits first.

    Args:
        method: "poses", "dust3r" or "parallax" (:func:`resolve_gate_method`).
        clip: the clip (its ``frame_indices`` map positions to the pose log's frames).
        pairs: (P, 2) long evaluated frame pairs (clip positions).
        poses: the pose source for "poses" (:func:`~.poses.load_pose_log`); else unused.
        config: the config (its ``gate`` section).
        device: where DUSt3R runs (None: the default device).
    Returns:
        GateDecision of the pose source, or None for "parallax".
    """
    if method == "poses":
        return gate_from_poses(poses, pairs, clip.num_frames, config.gate,
                               frame_indices=clip.frame_indices)
    if method == "dust3r":
        return gate_from_dust3r(clip, pairs, config.gate, device)
    return None


def gate_block(method: Optional[str], ext_gate: Optional[GateDecision]) -> Dict[str, Any]:
    """The ``gate`` block of a clip that stops before the gate statistic: the external decision
    when there is one (it was made, so it is reported), else an empty decision of ``method``."""
    if ext_gate is not None:
        return ext_gate.to_dict()
    return GateDecision(method, None, {}, None).to_dict()


def gate_source(stats: Stats, evaluated: torch.Tensor, gate_rows: torch.Tensor,
                gate_pairs: Optional[torch.Tensor] = None, config: Optional[GateConfig] = None
                ) -> Tuple[Stats, Union[list, str, None]]:
    """The parallax statistics the weight-free gate reads: the valid rows of the widest tier of
    gate pairs that has one (wide pairs, then the halves, then the quarters:
    :func:`~geocon_torch.io.pairs.gate_pair_tiers`), else the ``evaluated`` rows. With the gate
    ``config``, a narrower tier that decides F on pairs sharing markedly more of the scene
    replaces a widest tier that does not (:func:`narrower_f`: the rule of
    :func:`decide_gates`; one-clip route, host reads).

    Args:
        stats: :func:`~.parallax.parallax_statistics`, each (R,) over all rows.
        evaluated: (P,) long rows of the evaluated pairs; gate_rows: (G,) long rows.
        gate_pairs: (G, 2) frame pairs of ``gate_rows`` (their tiers, and the evidence); None:
            one tier.
        config: the gate config (None: the widest valid tier, without the narrower-F rule).
    Returns:
        (statistics restricted to the rows used, the pairs used: a list of ``gate_pairs`` rows,
        None without ``gate_pairs``, or "evaluated pairs").
    """
    if gate_rows.numel():
        valid = stats["valid"][gate_rows]
        # the pairs and their tiers are host bookkeeping: one transfer of the pairs
        pair_rows = gate_pairs.tolist() if gate_pairs is not None else None
        tier_of = (gate_pair_tiers(pair_rows) if pair_rows is not None
                   else [0] * int(gate_rows.numel()))
        per_tier = torch.zeros(3, dtype=torch.long, device=valid.device).index_add_(
            0, to_device(tier_of, valid.device, torch.long), valid.long()
        ).tolist()  # valid rows per tier: one host transfer
        read = [t for t in range(3) if per_tier[t] > 0]
        if config is None:  # the widest valid tier only
            read = read[:1]
        rows_of = [[i for i, t in enumerate(tier_of) if t == tier] for tier in read]
        parts = [to_device(r, gate_rows.device, torch.long) for r in rows_of]
        subs = [{k: v[gate_rows[part]] for k, v in stats.items()} for part in parts]
        if subs:
            pick = 0
            if len(subs) > 1:  # F-inliers of every tier's valid rows: one host transfer
                flat = torch.cat([s["num_f_inliers"][s["valid"]].double() for s in subs]).tolist()
                ends = list(accumulate(per_tier[t] for t in read))
                support = [_median(flat[a:b]) for a, b in zip([0] + ends, ends)]
                pick = read.index(narrower_f(lambda i: gate_from_parallax(subs[i], config),
                                             read, support)[1])
            used = [pair_rows[i] for i in rows_of[pick]] if pair_rows is not None else None
            return subs[pick], used
    return {k: v[evaluated] for k, v in stats.items()}, "evaluated pairs"


def preliminary_regime(fits: Tuple[Fit, Fit], x1: torch.Tensor, x2: torch.Tensor,
                       mask: torch.Tensor, num_evaluated: int, ext_gate: Optional[GateDecision],
                       config: GeoConConfig,
                       long_side_px: Union[None, float, torch.Tensor] = None,
                       gate_pairs: Optional[torch.Tensor] = None
                       ) -> Optional[str]:
    """The regime the motion-mask seeds are taken under, before any object is removed: an
    external H / F decision, else the weight-free gate on the preliminary ``fits`` (U resolved by
    GRIC); None when no pair has enough inliers to decide (:func:`preliminary_regimes` of one
    clip).

    Args:
        fits: (H fit, F fit) of the R rows of ``x1`` / ``x2`` (R, N, 2) px / ``mask`` (R, N): the
            ``num_evaluated`` evaluated pairs first, then the gate pairs.
        long_side_px: the long side (px) of the rows' frames for the resolution
            normalisation, one or (R,) per row (None: estimated from the points).
        gate_pairs: (G, 2) frame pairs of the gate rows (their tiers; None: one tier).
        x1, x2, mask, num_evaluated: as in ``fits``.
        ext_gate: the external gate's decision or None (an H / F decision wins).
        config: the config (``gate`` and ``background`` thresholds).
    Returns:
        "H" | "F" | None.
    """
    return preliminary_regimes([fits], [x1], [x2], [mask], [num_evaluated], [ext_gate], config,
                               long_side_px=[long_side_px], gate_pairs=[gate_pairs])[0][0]


def preliminary_regimes(fits: Sequence[Tuple[Fit, Fit]], x1: Sequence[torch.Tensor],
                        x2: Sequence[torch.Tensor], mask: Sequence[torch.Tensor],
                        num_evaluated: Sequence[int],
                        ext_gates: Sequence[Optional[GateDecision]], config: GeoConConfig,
                        long_side_px: Optional[Sequence[Union[None, float, torch.Tensor]]] = None,
                        gate_pairs: Optional[Sequence[Any]] = None,
                        merged: Optional[Tuple[Fit, Fit]] = None
                        ) -> Tuple[List[Optional[str]], List[Optional[torch.Tensor]]]:
    """:func:`preliminary_regime` of B clips as one batch: the rows of every clip an external
    H / F decision does not settle, zero-padded along the point axis to the widest clip
    (:func:`~geocon_torch.types.pad_points`), get each model's residuals and
    :func:`~.parallax.parallax_statistics` at once (padding invariant), then
    :func:`decide_gates` decides every clip with one host transfer; U is resolved by GRIC
    (``evidence["u_resolved"]``). A clip's regime is the same alone or in a batch (bit for bit
    on the CPU).

    Args:
        fits: per clip, (H fit, F fit) of its R_b rows (its own width N_b).
        x1, x2: per clip (R_b, N_b, 2) px; mask: per clip (R_b, N_b) bool. A clip's rows are its
            ``num_evaluated[b]`` evaluated pairs first, then its gate pairs.
        ext_gates: per clip, the external gate's decision or None (H / F wins).
        long_side_px: per clip, the long side (px) of the rows' frames: a float, an (R_b,)
            tensor or None (estimated from the clip's points, one host read); None: all None.
        gate_pairs: per clip, (G_b, 2) frame pairs of the gate rows, a tensor or a host list
            of pairs (their tiers; None: one tier); None: all None.
        merged: the fits of the rows of all B clips, clip after clip, point axis padded to the
            widest clip (:class:`~geocon_torch.sections.fits.MergedFits`: no copies); None:
            stacked here from ``fits``.
        config: the config (``gate`` and ``background`` thresholds).
    Returns:
        (regime per clip: "H" | "F" | None, residuals per clip: the (P_b, N_b) residuals of its
        regime's model on its evaluated rows, normalised Sampson under F, else symmetric
        transfer px (:func:`~geocon_torch.segment.seeds.outlier_seeds`), None where not
        computed).
    """
    b = len(fits)
    sides = list(long_side_px) if long_side_px is not None else [None] * b
    gps = list(gate_pairs) if gate_pairs is not None else [None] * b
    regimes: List[Optional[str]] = [e.decision if e is not None and e.decision in ("H", "F")
                                    else None for e in ext_gates]
    residuals: List[Optional[torch.Tensor]] = [None] * b
    todo = [k for k in range(b) if regimes[k] is None]
    if not todo:
        return regimes, residuals
    sel = list(range(b)) if merged is not None else todo  # merged: every clip's rows are there
    xs1, xs2, m = (pad_points([t[k] for k in sel]) for t in (x1, x2, mask))
    n = int(xs1.shape[1])
    fit_h, fit_f = merged if merged is not None else (
        concat_fits([fits[k][i] for k in sel], n) for i in range(2))
    sizes = [int(x1[k].shape[0]) for k in sel]
    starts = [sum(sizes[:i]) for i in range(len(sel))]
    side = torch.cat([_row_sides(sides[k], x1[k], mask[k], config) for k in sel])
    bc = config.background
    r_h = homography_residuals(fit_h, xs1, xs2)
    r_f = fundamental_residuals(fit_f, xs1, xs2, m)
    stats = parallax_statistics(fit_h, fit_f, xs1, xs2, m, tau_h=bc.tau_h, tau_f=bc.tau_f,
                                min_inliers=bc.min_inliers, residuals=(r_h, *r_f),
                                long_side_px=side, gate=config.gate)
    rows = []
    for k, a, r in zip(sel, starts, sizes):
        p = int(num_evaluated[k])
        gp = ([[0, 1]] * (r - p) if gps[k] is None  # None: one tier (equal spans)
              else gps[k].reshape(-1, 2).tolist() if isinstance(gps[k], torch.Tensor)
              else [list(q) for q in gps[k]])
        rows.append(GateRows(list(range(a, a + p)), list(range(a + p, a + r)), gp))
    cfg = config.replace(gate={"per_pair": False}) if config.gate.per_pair else config
    for k, a, (gate, _) in zip(sel, starts, decide_gates(stats, rows, cfg)):
        if regimes[k] is None:
            regimes[k] = (gate.decision if gate.decision != "U"
                          else gate.evidence.get("u_resolved"))
        p, w = int(num_evaluated[k]), int(x1[k].shape[1])
        residuals[k] = (r_f[0] if regimes[k] == "F" else r_h)[a:a + p, :w]
    return regimes, residuals


def _row_sides(long_side_px: Union[None, float, torch.Tensor], x1: torch.Tensor,
               mask: torch.Tensor, config: GeoConConfig) -> torch.Tensor:
    """(R,) long side (px) of each row of one clip (``x1`` (R, N, 2), ``mask`` (R, N)) in
    ``x1``'s dtype: the given tensor or float, else the extent of the clip's masked points
    (:func:`~.parallax.reference_scale`; the reference long side when there are none)."""
    r = int(x1.shape[0])
    if isinstance(long_side_px, torch.Tensor):
        side = long_side_px.to(device=x1.device, dtype=x1.dtype)
        return side if side.dim() == 1 else side.reshape(-1).expand(r)
    if long_side_px is None:
        pts = x1[mask]
        long_side_px = (float(pts.abs().amax()) if pts.numel()
                        else float(config.gate.reference_long_side))
    return x1.new_full((r,), float(long_side_px))


@dataclass
class GateRows:
    """Where one clip's gate reads in the rows of a batch (host lists: no device read).

    Attributes:
        evaluated: rows of the evaluated pairs at the finest scale, in temporal order.
        gate_rows: rows of the wide gate pairs at the finest scale (may be empty).
        gate_pairs: the (G, 2) frame pairs of ``gate_rows``.
        ext: the external gate's decision (poses / DUSt3R), or None (weight-free gate).
        support: the rows of the clip's IR support margin (IR_F - IR_H, which settles a U
            decision): its gate rows when it has some, else its evaluated rows.
    """

    evaluated: List[int]
    gate_rows: List[int]
    gate_pairs: List[List[int]]
    ext: Optional[GateDecision] = None
    support: List[int] = field(default_factory=list)

    def sources(self) -> List[List[int]]:
        """The four row sets the gate may read: the gate pairs' tiers 0, 1, 2
        (:func:`~geocon_torch.io.pairs.gate_pair_tiers`), then the evaluated rows."""
        tiers = gate_pair_tiers(self.gate_pairs)
        return [[r for r, t in zip(self.gate_rows, tiers) if t == k] for k in range(3)] + [
            list(self.evaluated)]


def decide_gates(stats: Stats, clips: Sequence[GateRows], config: GeoConConfig,
                 support: Optional[Tuple[torch.Tensor, ...]] = None
                 ) -> List[Tuple[GateDecision, float]]:
    """:func:`decide_gate` of every clip of a batch from the statistics of all their rows at
    once: the medians of every source a clip may read (:meth:`GateRows.sources`) in one
    batched order-statistic call, and one host transfer; the decisions are then taken on the
    host. The weight-free gate reads the widest tier with a valid row, else the evaluated
    rows (:func:`gate_source`), unless that tier does not decide F and a narrower tier whose
    pairs share markedly more of the scene does (:func:`narrower_f`: then the narrower tier's
    decision, with ``wider_tier`` and ``why_f`` in its evidence); its evidence gets
    ``gate_pairs``, ``gric_delta`` (median over the rows read) and ``u_resolved``. A per-pair
    gate (``gate.per_pair``, opt-in) adds each clip's hysteresis over its evaluated rows.

    Args:
        stats: :func:`~.parallax.parallax_statistics` of R rows, each (R,).
        clips: where each clip's rows are (:class:`GateRows`).
        support: (ir_h, valid_h, ir_f, valid_f), each (R,): the per-row IR of both models.
    Returns:
        per clip (decision, support margin: the median IR_F - the median IR_H over the valid
        ``support`` rows of each model, 0.0 when either has none or ``support`` is None).
    """
    if not clips:
        return []
    name = check_statistic(config.gate)
    keys = gate_keys(stats, name)
    sources = [c.sources() for c in clips]
    index, member = group_index([rows for src in sources for rows in src], stats["valid"].device)
    meds, counts = grouped_quantiles(torch.stack([stats[k] for k in keys]), stats["valid"],
                                     index, member)
    r = int(stats["valid"].numel())
    row_counts = stats.get("num_f_inliers", torch.zeros_like(stats["valid"], dtype=torch.long))
    parts = [meds[0].double().reshape(-1), counts[0].double(), stats[name].double().reshape(-1),
             stats["valid"].double().reshape(-1), row_counts.double().reshape(-1)]
    b = len(clips)
    if support is not None:
        s_idx, s_member = group_index([c.support for c in clips], index.device)
        s_med, s_n = grouped_quantiles(torch.stack([support[0], support[2]]),
                                       torch.stack([support[1], support[3]]), s_idx, s_member)
        parts += [s_med[0].double().reshape(-1), s_n.double().reshape(-1)]
    host = torch.cat(parts).tolist()  # the one host transfer
    k, g = len(keys), int(index.shape[0])
    med_of = lambda j: {key: host[i * g + j] for i, key in enumerate(keys)}  # noqa: E731
    n_valid, rows_host = host[k * g:k * g + g], host[k * g + g:]
    values, ok, row_n = rows_host[:r], [v > 0 for v in rows_host[r:2 * r]], rows_host[2 * r:3 * r]
    margins = [0.0] * b
    if support is not None:
        sm, sn = rows_host[3 * r:3 * r + 2 * b], rows_host[3 * r + 2 * b:]
        margins = [sm[b + c] - sm[c] if sn[c] > 0 and sn[b + c] > 0 else 0.0 for c in range(b)]

    def tier_gate(c: int, t: int) -> GateDecision:  # the decision of clip c's source t
        rows = sources[c][t]
        gate = decide_on_host(med_of(4 * c + t), [values[i] for i in rows],
                              [ok[i] for i in rows], [int(row_n[i]) for i in rows], config.gate)
        gate.evidence["gate_pairs"] = ([clips[c].gate_pairs[clips[c].gate_rows.index(i)]
                                        for i in rows] if t < 3 else "evaluated pairs")
        return gate

    out = []
    for c, (clip, src) in enumerate(zip(clips, sources)):
        tiers = [t for t in range(3) if src[t] and n_valid[4 * c + t] > 0] or [3]
        pick = tiers[0]
        if clip.ext is not None:
            gate = clip.ext
        else:
            support = [_median([row_n[i] for i in src[t] if ok[i]]) for t in tiers]
            gate, pick = narrower_f(lambda i: tier_gate(c, tiers[i]), tiers, support)
            if config.gate.per_pair:  # per-pair hysteresis on the evaluated (adjacent) pairs
                ev = torch.tensor(clip.evaluated, dtype=torch.long, device=index.device)
                gate.per_pair = gate_from_parallax({key: v[ev] for key, v in stats.items()},
                                                   config.gate).per_pair
        gric = med_of(4 * c + pick)["gric_delta"]  # 0.0 (fill) when no row is valid
        gate.evidence.setdefault("u_resolved", resolve_u_clip(gric))
        gate.evidence["gric_delta"] = gric
        out.append((gate, margins[c]))
    return out


def _median(values: Sequence[float]) -> float:
    """The median of host numbers (0.0 for none)."""
    return float(statistics.median(values)) if values else 0.0


TIER_NAMES = ("wide pairs", "halves", "quarters", "evaluated pairs")
#: a narrower tier's F overrules the widest tier only when the widest tier's pairs share at most
#: this fraction of its matched scene (median F-inliers per pair, widest / narrower): measured on
#: grounded and held-out clips, long translating shots whose wide pairs see one plane have
#: ratios 0.10-0.71, non-rigid corruptions (breathing, rubber sheet, flicker, background slide)
#: whose wide pairs see the same scene as the narrower ones 0.91-1.42; 0.8 sits in the gap
OVERLAP_RATIO = 0.8


def narrower_f(decide: Callable[[int], GateDecision], tiers: Sequence[int],
               support: Sequence[float]) -> Tuple[GateDecision, int]:
    """The clip's weight-free decision from its valid tiers, widest first (host only): the
    widest tier's decision, unless it is not F and a narrower gate tier decides F on pairs that
    share markedly more of the scene (the widest tier's median F-inliers per pair at most
    :data:`OVERLAP_RATIO` of the narrower tier's); then the widest such tier's decision, its
    evidence with the wider tier's verdict (``wider_tier``: its pairs, decision, magnitude
    evidence, the F-inlier ratio) and ``why_f``.

    Why: parallax grows with the baseline, so the widest pairs are read first; but an H of the
    wide pairs only says that the part of the scene both frames share fits one homography. On a
    long translating shot the first and last frames can share one plane (the back wall) while
    the narrower pairs, sharing more, see the parallax: F measured above the F band, which no
    rotation of a rigid scene produces. When the wide pairs share about as much as the narrower
    ones, the same scene fits one homography at the longer baseline, so the narrower F comes
    from non-rigid motion (a corruption), not from translation: the widest tier decides, as
    does a narrower H or U (less baseline, less parallax). A clip that meets neither keeps the
    widest tier's decision and evidence unchanged.

    Args:
        decide: ``decide(i)`` -> the decision of ``tiers[i]`` (narrower ones only when needed).
        tiers: the clip's valid tiers, widest first (0 wide pairs, 1 halves, 2 quarters; 3 the
            evaluated pairs, a fallback: never read as a narrower tier).
        support: per valid tier, the median F-inlier count of its valid pairs.
    Returns:
        (the decision, the tier it was read from).
    """
    wide = decide(0)
    if wide.decision == "F":
        return wide, tiers[0]
    for i in range(1, len(tiers)):
        ratio = support[0] / max(support[i], 1.0)
        if tiers[i] == 3 or ratio > OVERLAP_RATIO:
            continue
        gate = decide(i)
        if gate.decision != "F":
            continue
        ev = wide.evidence
        gate.evidence["wider_tier"] = dict(
            {"tier": TIER_NAMES[tiers[0]], "gate_pairs": ev.get("gate_pairs"),
             "decision": wide.decision, "statistic": wide.statistic},
            **{k: ev[k] for k in ("magnitude_ref_px", "magnitude_ci_ref_px",
                                  "f_inliers_per_pair", "why_u") if k in ev},
            f_inlier_ratio=ratio)
        gate.evidence["why_f"] = (
            f"the {TIER_NAMES[tiers[i]]} show parallax above the F band; the "
            f"{TIER_NAMES[tiers[0]]} ({wide.decision}) share {ratio:.2f} of their F-inliers "
            f"(<= {OVERLAP_RATIO:g}): what they see may be one plane")
        return gate, tiers[i]
    return wide, tiers[0]


def decide_gate(stats: Stats, evaluated: torch.Tensor, gate_rows: torch.Tensor,
                gate_pairs: torch.Tensor, ext_gate: Optional[GateDecision],
                config: GeoConConfig) -> GateDecision:
    """The clip's gate: the external decision, or the weight-free statistic on the gate pairs
    (with per-pair hysteresis on the ``evaluated`` rows when ``gate.per_pair``). Its evidence
    gets ``gric_delta`` (median over the rows the statistic read) and ``u_resolved``
    (:func:`decide_gates` of one clip).

    Args:
        stats: (R,) parallax statistics of every row; evaluated (P,), gate_rows (G,) long rows;
            gate_pairs: (G, 2) frame pairs of ``gate_rows``.
        ext_gate: the external gate's decision (taken as is) or None.
        config: the config (its ``gate`` section).
    Returns:
        GateDecision of the clip (``per_pair`` over the evaluated rows with ``gate.per_pair``).
    """
    rows = GateRows(evaluated.tolist(), gate_rows.tolist(),
                    gate_pairs.reshape(-1, 2).tolist(), ext_gate)
    return decide_gates(stats, [rows], config)[0][0]


def clip_regime(gate: GateDecision, config: GeoConConfig, clip_support_margin: float) -> str:
    """The regime of a clip gate's decision (host only): H or F as decided; U resolved with the
    clip's ``gric_delta`` evidence and ``clip_support_margin`` (both written to the evidence)."""
    regime = gate.decision
    if regime == "U":  # both fitted: the better-supported model wins
        regime = resolve_u_clip(gate.evidence["gric_delta"], clip_support_margin,
                                config.gate.u_margin)
        gate.evidence["u_resolved"] = regime
        gate.evidence["u_support_margin"] = clip_support_margin
    return regime


def pair_models(gate: GateDecision, config: GeoConConfig, gric_delta: torch.Tensor,
                support_margin: torch.Tensor, clip_support_margin: float, num_scales: int
                ) -> Tuple[str, torch.Tensor, torch.Tensor]:
    """The regime and the model of every evaluated row (pairs x scales) for a decided ``gate``.

    Per-pair gate: each pair's code, U resolved per pair; the clip regime is F when at least
    half the pairs use F. Clip gate: one model for all; a U decision is resolved with the
    clip's ``gric_delta`` evidence and ``clip_support_margin`` (written to the evidence).

    Args:
        gate: the clip's decided gate (``per_pair`` codes when the per-pair gate ran).
        config: the config (``gate.per_pair``, ``gate.u_margin``).
        gric_delta, support_margin: (P,) per evaluated pair at the finest scale (IR_F - IR_H).
        clip_support_margin: clip IR_F - IR_H (0 when either is missing).
        num_scales: S; the rows are S blocks of the P pairs, coarsest first.
    Returns:
        (regime "H" | "F", use_f (S*P,) bool, present (S*P,) bool: False for a pair the gate
        excluded).
    """
    dev = gric_delta.device
    if config.gate.per_pair and gate.per_pair is not None:
        codes = torch.tensor([CODE[d] for d in gate.per_pair], device=dev)
        use_f_pair = resolve_u(codes, gric_delta, support_margin, config.gate.u_margin)
        decided = codes != CODE[None]  # a pair the gate excluded votes for neither model
        n, f_votes = torch.stack([decided.sum(), (use_f_pair & decided).sum()]).tolist()
        regime = "F" if n and 2 * f_votes >= n else "H"
        return regime, use_f_pair.repeat(num_scales), decided.repeat(num_scales)
    regime = clip_regime(gate, config, clip_support_margin)
    use_f = torch.full((num_scales * int(gric_delta.numel()),), regime == "F",
                       dtype=torch.bool, device=dev)
    return regime, use_f, torch.ones_like(use_f)
