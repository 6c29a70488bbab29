"""Deprecated alias of ``rlkit.core.rubric``, kept for one minor release (removed in 0.3).

Plugins import from ``rlkit.plugin``, the one door whose names stay stable; host code from ``rlkit.core.rubric``.
"""

import sys
import warnings

from rlkit.core import rubric as _moved

warnings.warn("rlkit.rubric moved to rlkit.core.rubric; plugins import from rlkit.plugin. "
              "The alias goes in rlkit 0.3", DeprecationWarning, stacklevel=2)
sys.modules[__name__] = _moved
