"""Checking the judges that composite judges (``hybrid``, ``ensemble``, ``cascade``) combine.

The members themselves are ``PluginRef`` params, built by the host against the run's registry; this only
refuses the ones a composite cannot combine.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import ConfigError

if TYPE_CHECKING:
    from rlkit.core.rubric import Rubric
    from rlkit.core.types import RecordField


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


def _optional(judge: Any, method: str, *args: Any) -> list[Any]:
    """What ``judge.<method>(*args)`` gives, or nothing for a judge without that optional method."""
    found = getattr(judge, method, None)
    return found(*args) if callable(found) else []


def _each_once(lists: Iterable[list[Any]]) -> list[Any]:
    out: list[Any] = []
    for items in lists:
        for item in items:
            if item not in out:
                out.append(item)
    return out


def member_record_fields(members: Iterable[tuple[Any, Rubric]]) -> list[RecordField]:
    """The record fields any of ``(judge, the rubric it is asked with)`` reads, each once: a field one member
    needs and a record lacks leaves that member's score of the dimension out of the composite's."""
    return _each_once(_optional(judge, "record_fields", rubric) for judge, rubric in members)


def member_model_folders(members: Iterable[Any]) -> list[Path]:
    """The local model folders the member judges ask (their ``model_folders()``), each once."""
    return _each_once(_optional(judge, "model_folders") for judge in members)
