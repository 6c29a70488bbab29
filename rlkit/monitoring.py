"""Deprecated alias, kept for one minor release (removed in 0.3): what a monitor reads and raises is in
``rlkit.reward.monitor_view``, the host that runs monitors in ``rlkit.train.monitoring``.

Plugins import ``Alert``, ``MonitorView``, ``BaselineDrift``, ``due`` and ``make_view`` from ``rlkit.plugin``.
"""

import warnings

from rlkit.config.validate import validate_monitors
from rlkit.reward.monitor_view import *  # noqa: F403
from rlkit.reward.monitor_view import __all__ as _view_names
from rlkit.train.monitoring import *  # noqa: F403
from rlkit.train.monitoring import __all__ as _host_names

warnings.warn("rlkit.monitoring moved to rlkit.reward.monitor_view (the view, alerts) and rlkit.train.monitoring "
              "(the host); plugins import from rlkit.plugin. The alias goes in rlkit 0.3", DeprecationWarning,
              stacklevel=2)

__all__ = [*_view_names, *_host_names, "validate_monitors"]
