"""Epipolar trio (WorldAtlas / GVGC), functional form: see :mod:`geocon_torch.epipolar`."""
from ...epipolar.section import (ConfigLike, clip_from_frames, epipolar_config,
                                 epipolar_section, epipolar_sections)

__all__ = ["epipolar_section", "epipolar_sections", "epipolar_config", "clip_from_frames",
           "ConfigLike"]
