"""Checking the judges that composite judges (``hybrid``, ``ensemble``, ``cascade``) combine.

The members themselves are ``PluginRef`` params, built by the host against the run's registry; this only
refuses the ones a composite cannot combine.
"""

from __future__ import annotations

from typing import Any

from rlkit.core.errors import ConfigError


def check_member_judge(ref: Any, parent: str) -> Any:
    """The member judge of ``ref`` (a built ``PluginRef``); a composite that names its own kind, or a member
    that derives its own rubric (``scored_rubric``, such as ``ranking``) and so has no per-dimension scores to
    combine, is refused, naming the field."""
    if ref.name == parent:
        raise ConfigError(f"a {parent} judge cannot contain itself", ref.where)
    if callable(getattr(ref.plugin, "scored_rubric", None)):
        raise ConfigError(f"judge {ref.name!r} scores groups on a rubric of its own, not the rubric's dimensions; "
                          f"a {parent} judge combines per-dimension judges", ref.where)
    return ref.plugin
