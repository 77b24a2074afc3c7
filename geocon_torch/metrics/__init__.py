"""torchmetrics classes (state + sync); the math lives in ``metrics.functional``."""
from .epipolar import EpipolarError, EpipolarInlierRate, FeatureMatchCoverage  # noqa: F401
from .foreground import AdaDFRC  # noqa: F401
from .background import (BackgroundConsistency, BackgroundGeometricError,  # noqa: F401
                         BackgroundInlierRatio)
