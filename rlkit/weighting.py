"""Deprecated alias of ``rlkit.reward.weighting``, kept for one minor release (removed in 0.3).

Plugins import from ``rlkit.plugin``, the one door whose names stay stable; host code from ``rlkit.reward.weighting``.
"""

import sys
import warnings

from rlkit.reward import weighting as _moved

warnings.warn("rlkit.weighting moved to rlkit.reward.weighting; plugins import from rlkit.plugin. "
              "The alias goes in rlkit 0.3", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
