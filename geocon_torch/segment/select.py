"""Which mask provider the background block uses (``config.segment.method``)."""
from __future__ import annotations

from typing import Any

from ..config import GeoConConfig
from ..errors import InputError

MASK_METHODS = ("files", "sam2", "motion", "none")


def masks_method(config: GeoConConfig, masks: Any) -> str:
    """The concrete provider: "files" whenever ``masks`` are given; "auto" is "sam2" when a
    SAM-2 checkpoint is configured, else the weight-free "motion" segmentation.

    Raises:
        InputError: an unknown method, or "files" without ``masks``.

    >>> from geocon_torch.config import GeoConConfig
    >>> masks_method(GeoConConfig(), None), masks_method(GeoConConfig(), "masks.npz")
    ('motion', 'files')
    """
    method = config.segment.method
    if masks is not None:
        return "files"
    if method == "auto":
        return "sam2" if config.segment.sam2_checkpoint else "motion"
    if method not in MASK_METHODS:
        raise InputError(f"segment.method must be auto, files, sam2, motion or none, "
                         f"got {method!r}")
    if method == "files":
        raise InputError("segment.method='files' needs score_clip(..., masks=PATH_OR_TENSOR)")
    return method
