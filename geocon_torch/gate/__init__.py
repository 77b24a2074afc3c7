"""Translation gate (paper sec. 3.2, 4.2, 6.2-6.4; Algorithm 1 A): H, F or U, with its evidence.

Three sources of translation evidence, chosen by ``config.gate.method``:

* ``"poses"`` — a pose log (JSON / .npz of 4x4 relative poses, e.g. exported from DUSt3R):
  ``t_inf = ||t||_inf`` of the first/last pose; ``<= 0.03`` -> H, ``>= 0.05`` -> F, in between U
  (both models fitted, the better supported one is used); ``tau_t = 0.04`` (eq. 5) is recorded too.
  A missing pose is F (``missing_pose="fail_to_F"``, the paper's default) or excludes the clip /
  pair (``"present_only"``). See :mod:`geocon_torch.gate.poses`.
* ``"dust3r"`` — live DUSt3R on the first/last frames (optional; a local dust3r checkout and a
  local checkpoint). See :mod:`geocon_torch.gate.dust3r`.
* ``"parallax"`` — the weight-free default: how far the epipolar-consistent background matches
  sit from the best homography (90th percentile, in reference px = px x 1024 / working long side,
  so resolution-invariant), with an order-statistic confidence interval (so the number of
  matches a backend returns sets the precision, not the value) and a noise floor; U with its
  evidence when the interval is not clear of the band. See :mod:`geocon_torch.gate.parallax`.

``"auto"`` uses the poses when ``score_clip(..., poses=...)`` gets them, DUSt3R when a checkpoint
is configured, else the parallax statistic. ``per_pair=True`` adds a per-pair decision with
hysteresis (sec. 4.2: inside the band the previous pair's decision is kept).

:mod:`.select` holds the gate stage of ``score_clip``: which source, the gate pairs the parallax
statistic reads, and the regime per pair; the U band is resolved by one rule,
:func:`~.decision.resolve_u` (``resolve_u_clip`` for a clip-level decision).
"""
from .decision import GateDecision, hysteresis, resolve_u, resolve_u_clip, threshold_decision
from .parallax import STATISTICS, gate_from_parallax, parallax_statistics
from .poses import PoseLog, gate_from_poses, load_pose_log, translation_inf
from .select import (decide_gate, external_gate, gate_block, gate_source, pair_models,
                     preliminary_regime, preliminary_regimes, resolve_gate_method)

__all__ = ["GateDecision", "hysteresis", "threshold_decision", "PoseLog", "load_pose_log",
           "translation_inf", "gate_from_poses", "parallax_statistics", "gate_from_parallax",
           "resolve_u", "resolve_u_clip", "STATISTICS", "resolve_gate_method", "external_gate",
           "gate_block", "gate_source", "preliminary_regime", "preliminary_regimes", "decide_gate",
           "pair_models"]
