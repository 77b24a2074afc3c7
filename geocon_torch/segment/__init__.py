"""Mask-first background separation (paper sec. 4.3, Algorithm 1 B).

Object masks come from one of three providers (``config.segment.method``):

* ``files`` — what the user gives ``score_clip(..., masks=...)``: a PNG folder per object, a
  folder of label PNGs, an ``.npz`` with (T, H, W) or (T, K, H, W), or a tensor
  (:func:`load_masks`);
* ``sam2`` — the optional SAM-2 adapter (sam2 package + local checkpoint + config, box / point
  prompts; :mod:`geocon_torch.segment.sam2`);
* ``motion`` — the weight-free default (``auto`` without SAM-2 checkpoint): matches that violate
  the dominant background motion are seeds, dense photometric residuals after warping by the
  background homography give the shapes, space-time connected components group and track them,
  and a component is an object only when its seeds move coherently (a rigid mover does, scattered
  mismatches and non-rigid warps do not) (:func:`motion_segment`; seeded from the background
  fits by :func:`motion_masks`).

The background is ``content mask \\ dilate(U_k objects, safety_margin_px)``; only matches with
both endpoints in their frame's background are fitted (:func:`background_mask`,
:func:`background_keep`).
"""
from .background import background_keep, background_mask, dilate, sample_mask
from .files import load_masks
from .motion import connected_components, motion_segment
from .seeds import motion_masks
from .select import masks_method

__all__ = ["load_masks", "background_mask", "background_keep", "dilate", "sample_mask",
           "motion_segment", "connected_components", "motion_masks", "masks_method"]
