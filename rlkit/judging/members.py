"""Building the judges that composite judges (``hybrid``, ``ensemble``, ``cascade``) combine."""

from __future__ import annotations

from typing import Any

from rlkit.errors import ConfigError


def member_judge(registry: Any, name: str, params: dict[str, Any], where: str, parent: str,
                 params_where: str | None = None) -> Any:
    """A judge to combine per dimension; one that derives its own rubric (``scored_rubric``, such as
    ``ranking``) has no per-dimension scores to combine and is refused, naming the field."""
    if name == parent:
        raise ConfigError(f"a {parent} judge cannot contain itself", where)
    judge = registry.create("judge", name, dict(params or {}), where=params_where or f"{where}.params")
    if callable(getattr(judge, "scored_rubric", None)):
        raise ConfigError(f"judge {name!r} scores groups on a rubric of its own, not the rubric's dimensions; "
                          f"a {parent} judge combines per-dimension judges", where)
    return judge
