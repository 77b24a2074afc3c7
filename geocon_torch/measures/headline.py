"""The headline score of a clip: one number in [0, 1], higher is better (``result["score"]``).

The paper's IR / GE barely rank real against generated video (IR_F is ~1.000 on most clips
because tau_F is loose, and the clip GE pools coarse scales), so the headline folds the numbers
that do, each mapped to a term in [0, 1] (1 = a perfectly consistent rigid clip) whose meaning
does not depend on the working size or the features backend:

* ``match``: the WorldAtlas ``feature_match_coverage`` (share of keypoints with a verified
  match in the next frame). Generated video whose texture "boils" from frame to frame matches
  little of itself; a rigid scene matches most of what it shows. Read at the epipolar
  protocol's own analysis size (the source's, capped at 640 px), never the working size.
* ``inliers``: the WorldAtlas ``epipolar_inlier_rate`` at 1 px (Sampson, analysis size):
  the share of those matches that one fundamental matrix explains to a pixel.
* ``ge``: ``exp(-GE_norm / ge_scale)`` of the gated model's clip GE (eq. 13) in px of a
  1024-px frame (``GE_norm = ge_px * 1024 / long_side``, the calibrated gate's resolution
  rule: a corruption's displacement scales with the frame; ``long_side`` = the background
  block's ``content_long_side``, the content's long side without letterbox / pillarbox bars,
  or the working long side in a row stored before that key); ``ge_scale`` = 3.5 px, the paper's
  report bound. A clip whose background block found too few valid pairs (not_applicable: no
  pair had ``min_inliers`` matches within tau_H of one model, typically video that does not
  match itself from frame to frame) has no GE; its ``ge`` term takes GE = tau_H (the largest
  residual an inlier may have, ``background.tau_h`` px at the working size, normalised the same
  way): no pair was that consistent. A background block that found nothing to fit (too little
  texture even for the tracks fallback, object masks that leave too little background, frames
  too small) and a clip without a background block have no ``ge`` term: no evidence either
  way. A clip scored on its pairs with ``min_inliers`` matches though most have fewer (a fade
  to black, frames that stop matching: ``textured_pairs`` in its block) has its ``ge`` term
  multiplied by the share of its frame pairs that matched (:func:`textured_share`): the other
  pairs are evidence too.
* ``rigidity`` (only where objects move, the foreground block scored them and the clip has
  another term): ``exp(-max(sqrt(D_norm) - rigid_floor, 0) / ge_scale)`` with ``D_norm`` the
  largest ``adadfrc_mean`` of the objects (AdaDFRC-W2, px^2; the least rigid object) in px^2
  of a 1024-px frame (scaled by the same long side as ``ge``) and ``rigid_floor`` =
  :data:`RIGID_FLOOR_PX` (1.5 px of a 1024-px frame): what the flow reads on rigid movers.
  The floor is a share of the frame, not working px: a rigid mover's AdaDFRC grows with the
  working size like a deformation does (grounded C4, exact masks, torch-lk: 0.048 / 0.154 /
  0.611 px^2 at long side 256 / 512 / 1024, sqrt(D_norm) 0.87 / 0.78 / 0.78 px), so without
  the floor the same rigid clip got 0.771 / 0.881 / 0.851 (s28 fgseg F7) and a clip whose
  rigid mover was detected scored below the same clip with the mover missed. Of 15 rigid
  clips on a static camera scored at 256 / 512 / 1024 (sqrt(D_norm) 0.4-2.0 px) 12 get 1 at
  every size, and one that stops, one at the frame edge and two movers get 0.88-1; a 1.5-px
  ripple (5.3 px) and the ``nonrigid_object`` corruption (2.0-2.4 / 3.7-4.6 / 7.1-8.8 px at
  severity 0.25 / 0.5 / 1) keep their order, their terms agreeing to 0.022 across working
  sizes. Any object that deforms beyond the floor lowers the term; so does a rigid mover the
  flow loses (fast, or on a panning camera).
  Rigidity says how the objects move, not whether the scene holds together, so it folds only
  next to a scene term (``match``, ``inliers`` or ``ge``): a clip whose background block has
  no ``ge`` term (given masks that leave too little background, :data:`MASKED_AWAY`; gate
  undecided) and no epipolar block has no score, never one from its objects alone.

``score`` = the weighted geometric mean of the terms present (:data:`WEIGHTS`: ``inliers`` 2,
``rigidity`` 0.25, the others 1), so each term pulls the score down in proportion to its log
and the score is monotone in every term. Every term lies in [0, 1] and so does the score. Each term
is read from its own block when that block
is ok (a clip whose background is not_applicable can still have ``match`` and ``inliers``); a
clip with no ok block to read, only ``rigidity`` to fold, or an error, has no score (None),
never a silent 0. Which
terms a score used is recorded next to it (``score_terms``); two scores compare best when they
folded the same terms: the "all" preset has all of them, "geocon" / "background" only ``ge`` and
``rigidity``, "worldatlas" only ``match`` and ``inliers``; "gvgc" (its block reports the
original's keys, not WorldAtlas') and "epipolar-dpo" none, so their clips have no score.
"""
from __future__ import annotations

import math
from typing import Any, Dict, Mapping, Optional

#: px of a 1024-px frame: the paper's report bound on GE (eq. 13), here the e-folding scale of
#: the ``ge`` and ``rigidity`` terms
GE_SCALE_PX = 3.5
REF_LONG_SIDE = 1024.0
#: weight of each term in the geometric mean: the 1-px inlier rate counts twice (on FETV's
#: human ratings it is the single number that ranks like people best), object rigidity a
#: quarter (people and animals deform for real: at weight 1 it cost FETV's real-above-generated
#: accuracy 0.87 -> 0.76; benchmarks/README.md)
WEIGHTS = {"match": 1.0, "inliers": 2.0, "ge": 1.0, "rigidity": 0.25}
#: background.tau_h (px) where the result does not record its config
DEFAULT_TAU_H = 2.0
#: how the reason of a background block that matched but found too few valid pairs starts (the
#: one not_applicable background whose ``ge`` term is GE = tau_H)
FEW_VALID_PAIRS = "too few valid pairs"
#: how the reason of a background block whose given (or motion) masks removed so many matches
#: that fewer than ``min_inliers`` per pair are left starts (the clip had enough before the
#: masks: not "too little texture"; no lk-tracks fallback); such a block has no ``ge`` term
MASKED_AWAY = "object masks leave too little background"
#: px of a 1024-px frame: the rigid floor of the ``rigidity`` term (module docstring), the
#: sqrt(AdaDFRC_norm) of rigid movers under torch-lk (0.4-1.3 px on grounded and rendered
#: scenes at working long side 256 / 512 / 1024) with a margin
RIGID_FLOOR_PX = 1.5
#: the fold, as the result and the docs state it
FOLD = ("weighted geometric mean of match = epipolar.feature_match_coverage (weight 1), "
        "inliers = epipolar.epipolar_inlier_rate at 1 px (2), ge = exp(-GE_norm / 3.5 px) (1; "
        "GE = tau_H without valid pairs), rigidity = "
        "exp(-max(sqrt(AdaDFRC_norm) - 1.5 px, 0) / 3.5 px) (0.25; only next to another "
        "term); px of a 1024-px frame")


def _num(block: Any, key: str) -> Optional[float]:
    v = block.get(key) if isinstance(block, Mapping) else None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(float(v)):
        return None
    return float(v)


def _long_side(result: Mapping[str, Any]) -> Optional[float]:
    size = result.get("working_size") or (result.get("extra") or {}).get("working_size")
    if isinstance(size, (list, tuple)) and size:
        return float(max(size))
    return None


def _ge_side(bg: Mapping[str, Any], side: float) -> float:
    """The long side (px) GE is normalised by: the block's ``content_long_side`` (letterbox /
    pillarbox bars left out), or ``side`` (the working long side) for a row stored before it."""
    content = _num(bg, "content_long_side")
    return content if content is not None and content > 0 else side


def _tau_h(result: Mapping[str, Any], bg: Mapping[str, Any]) -> Optional[float]:
    """tau_H (px) standing in for the GE of a background block that was fitted on some pairs
    but found too few valid ones (reason :data:`FEW_VALID_PAIRS`); None for any other block."""
    if (bg.get("status") != "not_applicable" or not _num(bg, "pairs")
            or not str(bg.get("reason") or "").startswith(FEW_VALID_PAIRS)):
        return None
    tau = _num(((result.get("config") or {}).get("background") or {}), "tau_h")
    return DEFAULT_TAU_H if tau is None else tau


def textured_share(bg: Mapping[str, Any]) -> float:
    """The share of a background block's frame pairs with ``min_inliers`` matches when it was
    scored on them though most have fewer (``textured_pairs`` / ``pairs``), else 1.0 (every
    other block: its numbers as they were)."""
    textured, pairs = _num(bg, "textured_pairs"), _num(bg, "pairs")
    if textured is None or not pairs:
        return 1.0
    return min(max(textured / pairs, 0.0), 1.0)


def headline_terms(result: Mapping[str, Any]) -> Dict[str, float]:
    """The terms (name -> value in [0, 1]) that ``result`` (a ``ClipResult.to_dict()``) has
    (module docstring); {} when none can be read, and when ``rigidity`` would be the only one."""
    out: Dict[str, float] = {}
    ep = result.get("epipolar")
    if isinstance(ep, Mapping) and ep.get("status") == "ok":
        cov, inl = _num(ep, "feature_match_coverage"), _num(ep, "epipolar_inlier_rate")
        if cov is not None:
            out["match"] = min(max(cov, 0.0), 1.0)
        if inl is not None:
            out["inliers"] = min(max(inl, 0.0), 1.0)
    bg, side = result.get("background"), _long_side(result)
    if isinstance(bg, Mapping) and side:
        ge = _num(bg, "ge_px") if bg.get("status") == "ok" else _tau_h(result, bg)
        if ge is not None:
            out["ge"] = math.exp(-max(ge, 0.0) * REF_LONG_SIDE / _ge_side(bg, side)
                                 / GE_SCALE_PX) * textured_share(bg)
    fg = result.get("foreground")
    if isinstance(fg, Mapping) and fg.get("status") == "ok" and side and out:
        d = [_num(o, "adadfrc_mean") for o in fg.get("objects") or [] if isinstance(o, Mapping)]
        d = [v for v in d if v is not None]
        if d:
            px = math.sqrt(max(max(d), 0.0)) * REF_LONG_SIDE / _ge_side(bg or {}, side)
            out["rigidity"] = math.exp(-max(px - RIGID_FLOOR_PX, 0.0) / GE_SCALE_PX)
    return out


def fold_terms(terms: Mapping[str, float]) -> Optional[float]:
    """The weighted geometric mean of ``terms`` (:data:`WEIGHTS`; None when empty); a zero
    term gives 0."""
    if not terms:
        return None
    total = sum(WEIGHTS[k] for k in terms)
    if any(v <= 0.0 for v in terms.values()):
        return 0.0
    return math.exp(sum(WEIGHTS[k] * math.log(v) for k, v in terms.items()) / total)


def headline_score(result: Mapping[str, Any]) -> Optional[float]:
    """``result["score"]``: :func:`fold_terms` of :func:`headline_terms`, or None when the
    clip is an error or has no term (no block that could score it)."""
    if result.get("status") == "error":
        return None
    return fold_terms(headline_terms(result))


__all__ = ["GE_SCALE_PX", "WEIGHTS", "FOLD", "FEW_VALID_PAIRS", "MASKED_AWAY", "RIGID_FLOOR_PX",
           "headline_terms", "fold_terms", "headline_score", "textured_share"]
