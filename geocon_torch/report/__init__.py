"""Audit reports: ``build_report(results, out_dir)`` writes one static HTML page plus PNGs
(matplotlib, Agg backend); ``audit_card`` renders one clip; ``pair_evidence`` re-derives one
scored pair (matches, inliers, models) exactly as it was scored. See the README section
"Statistics and audit reports"."""
from .audit import audit_card, gate_rationale, timeline_series
from .evidence import PairEvidence, pair_evidence
from .html import build_report

__all__ = ["build_report", "audit_card", "pair_evidence", "PairEvidence", "gate_rationale",
           "timeline_series"]
