"""Per-pair and per-clip measure math (tensors in, tensors out), used by the stage sections.

* :mod:`.background`: IR / GE per pair (paper eqs. 7-12), clip summaries (eq. 13), the report
  gate, the per-pair H / F choice, the threshold sensitivity scan and the post-hoc behaviour.
* :mod:`.foreground`: AdaDFRC-W2 per (pair, object) (eqs. 14-15) and its summaries (eq. 17).

The public torchmetrics-style functions (videos or flow in, per-clip tensors out) are in
:mod:`geocon_torch.metrics.functional`; they and the Metric classes call into these modules.
"""
