"""torchmetrics classes (state + sync); the math is shared with :mod:`.functional`.

Every class follows one "no data" convention: a value no clip (or sample) produced is NaN, never
None or 0; ``num_not_applicable`` / ``num_error`` count why; ``compute()`` warns with the first
reason. A malformed video batch raises ClipTensorError in ``update`` (the io tensor rule). Every
returned value is synced under torch.distributed.
"""
from .epipolar import (EpipolarError, EpipolarInlierRate, FeatureMatchCoverage,  # noqa: F401
                       epipolar_collection)
from .foreground import AdaDFRC  # noqa: F401
from .background import (BackgroundConsistency, BackgroundGeometricError,  # noqa: F401
                         BackgroundInlierRatio)

__all__ = ["BackgroundConsistency", "BackgroundInlierRatio", "BackgroundGeometricError",
           "AdaDFRC", "EpipolarError", "EpipolarInlierRate", "FeatureMatchCoverage",
           "epipolar_collection"]
