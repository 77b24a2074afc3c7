"""Audit reports: ``build_report(results, out_dir)`` writes one static HTML page plus PNGs
(matplotlib, Agg backend); ``audit_card`` renders one clip. See the README section
"Statistics and audit reports"."""
from .audit import audit_card, derive_matches, gate_rationale, timeline_series
from .html import build_report

__all__ = ["build_report", "audit_card", "derive_matches", "gate_rationale", "timeline_series"]
