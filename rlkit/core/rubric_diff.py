"""What changed between two versions of a rubric: dimensions added, removed and changed, field by field."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from itertools import zip_longest
from typing import Any

from rlkit.core.rubric import Dimension, Rubric

# Compared in this order; `anchors` is compared level by level below.
DIMENSION_FIELDS = ("description", "type", "range", "weight", "gate", "priority", "judge", "condition", "checks")
ANCHOR_FIELDS = ("text", "positive", "negative")


@dataclass(frozen=True)
class FieldChange:
    """One field that differs; ``old``/``new`` is None where the field (or anchor level) is absent."""

    field: str
    old: Any
    new: Any


@dataclass(frozen=True)
class DimensionChange:
    """A dimension present in both rubrics whose definition differs."""

    name: str
    changes: list[FieldChange]


@dataclass(frozen=True)
class RubricDiff:
    """The difference between rubric ``a`` (old) and ``b`` (new)."""

    old_version: str
    new_version: str
    old_hash: str
    new_hash: str
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[DimensionChange] = field(default_factory=list)
    rubric_changes: list[FieldChange] = field(default_factory=list)  # name, description, templates, order
    new_entry_hash: str | None = None  # what the new rubric's changelog stores for its version
    new_entry_exists: bool = False

    @property
    def same_content(self) -> bool:
        return self.old_hash == self.new_hash

    @property
    def text_only(self) -> bool:
        """Whether the rubrics differ, and only in the texts of their dimensions (anchors, their examples, the
        descriptions): what a model judge reads and a judge that scores by checks alone, the rule judge, never does."""
        return bool(self.changed) and not (self.added or self.removed or self.rubric_changes) and all(
            change.field.startswith(("anchors[", "description")) for dim in self.changed for change in dim.changes)

    @property
    def unbumped(self) -> bool:
        """Content changed but the version did not: what a changelog hash would have caught."""
        return not self.same_content and self.old_version == self.new_version

    def notes(self) -> list[str]:
        """Advice on versioning: a missing bump, a changelog entry to add or a hash to paste."""
        notes = []
        if self.unbumped:
            notes.append(f"content changed without a version bump (both are version {self.new_version}): bump "
                         "`version` and add a changelog entry")
        if not self.new_entry_exists:
            notes.append(f"the new rubric's changelog has no entry for version {self.new_version}; add one with "
                         f"`hash: {self.new_hash}`")
        elif self.new_entry_hash is not None and not self.new_hash.startswith(self.new_entry_hash):
            notes.append(f"the new rubric's changelog entry for version {self.new_version} stores hash "
                         f"{self.new_entry_hash}, but its content is {self.new_hash}: it will not load until the "
                         "entry stores the new hash (under a new version, if the old one was released)")
        elif self.new_entry_hash is None:
            notes.append(f"add `hash: {self.new_hash}` to the changelog entry for version {self.new_version}, so "
                         "a later edit without a version bump is caught")
        return notes


def _fmt(value: Any) -> Any:
    # tuples (range) and pydantic models (condition) compare and print best as plain JSON-like values
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return list(value) if isinstance(value, tuple) else value


def _anchor_changes(a: Dimension, b: Dimension) -> list[FieldChange]:
    changes = []
    for level in sorted(set(a.anchors) | set(b.anchors)):
        label = f"anchors[{level:g}]"
        old, new = a.anchors.get(level), b.anchors.get(level)
        if old is None or new is None:
            changes.append(FieldChange(label, old and old.text, new and new.text))
            continue
        changes += [FieldChange(f"{label}.{name}", getattr(old, name), getattr(new, name))
                    for name in ANCHOR_FIELDS if getattr(old, name) != getattr(new, name)]
    return changes


def _item_changes(name: str, old: list[Any], new: list[Any]) -> list[FieldChange]:
    # item by item: a check added to a long list is shown whole instead of cut off inside the list's repr
    return [FieldChange(f"{name}[{i}]", o, n) for i, (o, n) in enumerate(zip_longest(old, new)) if o != n]


def diff_dimension(a: Dimension, b: Dimension) -> list[FieldChange]:
    """The fields of one dimension that differ, checks item by item and anchors level by level."""
    changes = []
    for name in DIMENSION_FIELDS:
        old, new = _fmt(getattr(a, name)), _fmt(getattr(b, name))
        if old == new:
            continue
        if name == "checks" and isinstance(old, list) and isinstance(new, list):
            changes += _item_changes(name, old, new)
        else:
            changes.append(FieldChange(name, old, new))
    return changes + _anchor_changes(a, b)


def diff_rubrics(a: Rubric, b: Rubric) -> RubricDiff:
    """Compare rubric ``a`` (old) with ``b`` (new); dimensions are matched by name."""
    old = {d.name: d for d in a.dimensions}
    new = {d.name: d for d in b.dimensions}
    changed = [DimensionChange(name, changes) for name in b.dimension_names if name in old
               if (changes := diff_dimension(old[name], new[name]))]
    rubric_changes = [FieldChange(name, getattr(a, name), getattr(b, name))
                      for name in ("name", "description") if getattr(a, name) != getattr(b, name)]
    ca, cb = a.canonical().get("templates", {}), b.canonical().get("templates", {})
    if ca != cb or a.templates != b.templates:
        rubric_changes.append(FieldChange("templates", dict(a.templates), dict(b.templates)))
    common_a = [n for n in a.dimension_names if n in new]
    common_b = [n for n in b.dimension_names if n in old]
    if common_a != common_b:  # order matters: scores, weights and lexicographic priorities follow it
        rubric_changes.append(FieldChange("dimension order", common_a, common_b))
    entries = [e for e in b.changelog if e.version == b.version]
    return RubricDiff(
        old_version=a.version, new_version=b.version, old_hash=a.content_hash, new_hash=b.content_hash,
        added=[n for n in b.dimension_names if n not in old], removed=[n for n in a.dimension_names if n not in new],
        changed=changed, rubric_changes=rubric_changes,
        new_entry_hash=next((e.hash for e in entries if e.hash is not None), None), new_entry_exists=bool(entries))


def _show(value: Any) -> str:
    if value is None:
        return "—"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= 160 else text[:157] + "..."


def render_diff(diff: RubricDiff, old_label: str, new_label: str) -> Any:
    """A rich renderable: version and hash lines, then one row per change."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    # each hash on a line of its own, whole, so it can be copied into a changelog
    lines = [Text(f"{sign} {label}  version {version}\n    hash {digest}")
             for sign, label, version, digest in (("---", old_label, diff.old_version, diff.old_hash),
                                                  ("+++", new_label, diff.new_version, diff.new_hash))]
    if diff.same_content:
        lines.append(Text("same content (the changelog and YAML layout do not count)"))
    table = Table(show_edge=False)
    for column in ("dimension", "change", "old", "new"):
        table.add_column(column, overflow="fold")
    for change in diff.rubric_changes:
        table.add_row("(rubric)", change.field, _show(change.old), _show(change.new))
    for name in diff.added:
        table.add_row(name, "added", "", "")
    for name in diff.removed:
        table.add_row(name, "removed", "", "")
    for dim in diff.changed:
        for change in dim.changes:
            table.add_row(dim.name, change.field, _show(change.old), _show(change.new))
    parts: list[Any] = [*lines]
    if table.row_count:
        parts.append(table)
    parts += [Text(f"note: {note}") for note in diff.notes()]
    return Group(*parts)
