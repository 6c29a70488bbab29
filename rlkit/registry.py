"""Deprecated alias of ``rlkit.core.registry``, kept for one minor release (removed in 0.3).

Plugins import from ``rlkit.plugin``, the one door whose names stay stable; host code from ``rlkit.core.registry``.
"""

import sys
import warnings

from rlkit.core import registry as _moved

warnings.warn("rlkit.registry moved to rlkit.core.registry; plugins import from rlkit.plugin. "
              "The alias goes in rlkit 0.3", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
