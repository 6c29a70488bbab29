"""Deprecated alias of ``rlkit.core.stats``, kept for one minor release (removed in 0.3).

Plugins import from ``rlkit.plugin``, the one door whose names stay stable; host code from ``rlkit.core.stats``.
"""

import sys
import warnings

from rlkit.core import stats as _moved

warnings.warn("rlkit.stats moved to rlkit.core.stats; plugins import from rlkit.plugin. "
              "The alias goes in rlkit 0.3", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
