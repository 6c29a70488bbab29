"""Checking the judges that composite judges (``hybrid``, ``ensemble``, ``cascade``) combine.

The members themselves are ``PluginRef`` params, built by the host against the run's registry; this only
refuses the ones a composite cannot combine.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def member_scope_caveats(members: Iterable[tuple[Any, Rubric]], records: Sequence[dict[str, Any]]) -> list[str]:
    """Each member's ``scope_caveats(records, rubric)`` (why its scores on these records may mean little), each once."""
    return _each_once(_optional(judge, "scope_caveats", records, rubric) for judge, rubric in members)


def member_model_folders(members: Iterable[Any]) -> list[Path]:
    """The local model folders the member judges ask (their ``model_folders()``), each once."""
    return _each_once(_optional(judge, "model_folders") for judge in members)


Reasons = list[list[dict[str, str]]]  # [B][G] dimension -> the judge's one-line reason


def close_judges(judges: Iterable[Any]) -> None:
    """Close each judge that can be closed (a model judge stops the engine its backend runs): a composite's
    ``close``."""
    for judge in judges:
        close = getattr(judge, "close", None)
        if callable(close):
            close()


def last_reasons(judge: Any) -> Reasons | None:
    """A judge's reasons for its last ``score`` call (its optional ``reasons()``), or None."""
    found = getattr(judge, "reasons", None)
    return found() if callable(found) else None


def merge_reasons(parts: Iterable[tuple[str, Reasons | None, Sequence[int] | None]],
                  group_sizes: Sequence[int]) -> Reasons | None:
    """The member judges' reasons as the composite's, per completion: ``parts`` are ``(label, a member's reasons,
    the composite's groups they are of)`` (``None``: every group, in order). A dimension one member gave a reason
    for keeps it as given; one that several did shows each, labelled (``"llm: 12 is not 7; rule_llm: no digits"``).
    None when no member gave any."""
    said: dict[tuple[int, int, str], list[tuple[str, str]]] = {}
    for label, reasons, groups in parts:
        if reasons is None:
            continue
        for b, group in zip(range(len(group_sizes)) if groups is None else groups, reasons, strict=True):
            for j, by_dimension in enumerate(group):
                for dimension, why in by_dimension.items():
                    said.setdefault((b, j, dimension), []).append((label, why))
    if not said:
        return None
    merged: Reasons = [[{} for _ in range(size)] for size in group_sizes]
    for (b, j, dimension), whys in said.items():
        merged[b][j][dimension] = whys[0][1] if len(whys) == 1 else "; ".join(f"{label}: {why}" for label, why in whys)
    return merged
