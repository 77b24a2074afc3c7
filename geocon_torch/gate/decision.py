"""Gate decisions: the H / F / U verdict with its evidence, and the per-pair hysteresis rule.

Decision codes: ``"H"`` (rotation / planar: fit a homography), ``"F"`` (translation with parallax:
fit a fundamental matrix), ``"U"`` (inside the hysteresis band: both models are fitted and the
better-supported one is used downstream), ``None`` (no decision: the pair / clip is excluded,
e.g. a missing pose under ``missing_pose="present_only"``).
"""
from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import torch

from ..errors import InputError

# integer codes used by the batched rules
CODE = {"H": 0, "F": 1, "U": 2, None: -1}
NAME = {v: k for k, v in CODE.items()}


@dataclass
class GateDecision:
    """One clip's gate verdict.

    Attributes:
        method: "poses" | "dust3r" | "parallax".
        statistic: the number the thresholds were applied to (t_inf for poses, the parallax
            statistic otherwise); None when it could not be computed.
        thresholds: the thresholds used, e.g. {"low": 0.03, "high": 0.05, "tau": 0.04}.
        decision: "H" | "F" | "U" | None.
        per_pair: per-pair decisions (list of "H" | "F" | "U" | None) when the per-pair gate ran.
        evidence: everything else an auditor needs (per-pair statistics, missing poses, ...).
    """

    method: Optional[str]
    statistic: Optional[float]
    thresholds: Dict[str, float]
    decision: Optional[str]
    per_pair: Optional[List[Optional[str]]] = None
    evidence: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> Dict[str, Any]:
        return {"method": self.method, "statistic": self.statistic,
                "thresholds": dict(self.thresholds), "decision": self.decision,
                "per_pair": self.per_pair, "evidence": self.evidence}


def _check_band(low: Any, high: Any) -> None:
    """InputError when the host numbers ``low`` > ``high`` (GateConfig refuses such a band);
    tensor thresholds are not read (no host sync)."""
    if isinstance(low, numbers.Real) and isinstance(high, numbers.Real) and low > high:
        raise InputError(f"gate thresholds need low <= high, got low {low!r} > high {high!r}")


def threshold_decision(statistic: torch.Tensor, low: float, high: float,
                       present: Optional[torch.Tensor] = None) -> torch.Tensor:
    """Three-way rule, batched: H if s <= low, F if s >= high, else U (H where s equals both:
    a band collapsed to low = high = tau is the paper's binary eq. 5, H iff s <= tau).

    Args:
        statistic: (P,) translation / parallax evidence (the unit of ``low`` / ``high``:
            t_inf in the pose log's units, or the parallax statistic).
        low: H bound; s <= low is H.
        high: F bound (>= ``low``); s >= high is F (H wins where s equals both).
        present: (P,) bool; False entries get code -1 (no decision).
    Returns:
        (P,) long codes (0 H, 1 F, 2 U, -1 none).
    Raises:
        InputError: ``low`` > ``high``.
    """
    _check_band(low, high)
    code = torch.full(statistic.shape, CODE["U"], dtype=torch.long, device=statistic.device)
    code = torch.where(statistic >= high, torch.full_like(code, CODE["F"]), code)
    code = torch.where(statistic <= low, torch.full_like(code, CODE["H"]), code)
    if present is not None:
        code = torch.where(present, code, torch.full_like(code, CODE[None]))
    return code


def hysteresis(statistic: torch.Tensor, low: float, high: float,
               present: Optional[torch.Tensor] = None, initial: str = "U") -> torch.Tensor:
    """Per-pair gate with hysteresis (paper sec. 4.2), vectorised over the pair sequence.

    gamma_t = H if s_t <= low, F if s_t >= high, otherwise gamma_{t-1} (``initial`` before the first
    decided pair, "U" by default = both fitted). Pairs with ``present`` False get code -1 and do
    not change the carried state.

    Args:
        statistic: (P,) evidence of the pairs in temporal order.
        low: H bound (s <= low is H).
        high: F bound (s >= high is F), >= ``low``.
        present: (P,) bool or None.
        initial: the state before the first decided pair: "H", "F", "U" or None (no decision).
    Returns:
        (P,) long codes (0 H, 1 F, 2 U, -1 none).
    Raises:
        InputError: an unknown ``initial``, or ``low`` > ``high``.
    """
    if initial not in CODE:
        raise InputError(f"initial must be one of 'H', 'F', 'U' or None, got {initial!r}")
    p = statistic.shape[0]
    ok = torch.ones(p, dtype=torch.bool, device=statistic.device) if present is None else present
    raw = threshold_decision(statistic, low, high)
    decided = ok & (raw != CODE["U"])
    idx = torch.arange(p, device=statistic.device)
    last = torch.where(decided, idx, torch.full_like(idx, -1)).cummax(0).values
    carried = raw.gather(0, last.clamp_min(0))
    out = torch.where(last >= 0, carried, torch.full_like(raw, CODE[initial]))
    return torch.where(ok, out, torch.full_like(out, CODE[None]))


def codes_to_names(codes: torch.Tensor) -> List[Optional[str]]:
    return [NAME[int(c)] for c in codes.tolist()]


def resolve_u(per_pair_codes: torch.Tensor, gric_delta: torch.Tensor,
              support_margin: Optional[torch.Tensor] = None, u_margin: float = 0.05
              ) -> torch.Tensor:
    """The one U-resolution rule, batched: (P,) bool use-F per pair.

    F for code F; for code U, F when GRIC prefers it (``gric_delta`` > 0) or the F support
    exceeds the H support by more than ``u_margin`` (``support_margin`` = IR_F - IR_H, None: not
    considered); H otherwise (codes H and none included).

    Args:
        per_pair_codes: (P,) long decision codes (:data:`CODE`).
        gric_delta: (P,) (GRIC(H) - GRIC(F)) / n, > 0 favours F.
        support_margin: (P,) IR_F - IR_H or None.
        u_margin: F also wins a U pair whose ``support_margin`` exceeds this (inlier-ratio
            units, in [0, 1]).
    Returns:
        (P,) bool, True where the pair uses F.

    >>> resolve_u(torch.tensor([0, 1, 2, 2]), torch.tensor([1.0, -1.0, 0.5, -0.5])).tolist()
    [False, True, True, False]
    """
    u_f = prefers_f(gric_delta, support_margin, u_margin)
    return (per_pair_codes == CODE["F"]) | ((per_pair_codes == CODE["U"]) & u_f)


def prefers_f(gric_delta: Any, support_margin: Any = None, u_margin: float = 0.05) -> Any:
    """The U band's rule on tensors (elementwise) or host floats: GRIC prefers F
    (``gric_delta`` > 0) or F's support beats H's by more than ``u_margin``."""
    u_f = gric_delta > 0
    if support_margin is not None:
        u_f = u_f | (support_margin > u_margin)
    return u_f


def resolve_u_clip(gric_delta: float, support_margin: Optional[float] = None,
                   u_margin: float = 0.05) -> str:
    """:func:`resolve_u` of one clip-level U decision, on the host: ``"F"`` or ``"H"``.

    >>> resolve_u_clip(-0.2), resolve_u_clip(-0.2, support_margin=0.1)
    ('H', 'F')
    """
    return "F" if prefers_f(float(gric_delta), None if support_margin is None
                            else float(support_margin), u_margin) else "H"
