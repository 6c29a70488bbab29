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


def member_record_fields(members: Iterable[tuple[Any, Rubric]]) -> list[RecordField]:
    """The record fields any of ``(judge, the rubric it is asked with)`` reads, each once: a field one member
    needs and a record lacks leaves that member's score of the dimension out of the composite's."""
    out: list[RecordField] = []
    for judge, rubric in members:
        fields = getattr(judge, "record_fields", None)
        for used in fields(rubric) if callable(fields) else []:
            if used not in out:
                out.append(used)
    return out


def member_model_folders(members: Iterable[Any]) -> list[Path]:
    """The local model folders the member judges ask (their ``model_folders()``), each once."""
    out: list[Path] = []
    for judge in members:
        folders = getattr(judge, "model_folders", None)
        for folder in folders() if callable(folders) else []:
            if folder not in out:
                out.append(folder)
    return out
