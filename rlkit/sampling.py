"""Deprecated alias of ``rlkit.lm.sampling``, kept for one minor release (removed in 0.3).

Plugins import from ``rlkit.plugin``, the one door whose names stay stable; host code from ``rlkit.lm.sampling``.
"""

import sys
import warnings

from rlkit.lm import sampling as _moved

warnings.warn("rlkit.sampling moved to rlkit.lm.sampling; plugins import from rlkit.plugin. "
              "The alias goes in rlkit 0.3", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
