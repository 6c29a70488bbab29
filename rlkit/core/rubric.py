"""Rubrics: versioned sets of scoring dimensions, loaded from YAML and validated with clear errors."""

from __future__ import annotations

import hashlib
import json
import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlkit.core.digest import file_sha256
from rlkit.core.errors import RlkitError, RubricError, did_you_mean, no_such, yaml_syntax_error
from rlkit.core.package_files import package_dir

MAX_DIMENSIONS_BEFORE_WARNING = 7

# Per-prompt rubrics (Rubrics as Rewards, Gunjal et al. 2025, arXiv:2507.17746): each criterion is a yes/no check
# tagged with how much it matters. A pitfall describes a mistake; when the response makes it, its weight is subtracted.
# The categories are RaR's; these weights are the ones rlkit's issue 24 attributes to RaR (not yet checked against
# the paper's text: verify before quoting them as the paper's).
CriterionCategory = Literal["essential", "important", "optional", "pitfall"]
CATEGORY_WEIGHTS: dict[str, float] = {"essential": 1.0, "important": 0.7, "optional": 0.3, "pitfall": 0.8}
# How many criteria `rlkit rubric generate` asks a judge for (RaR's 7-20), and the most an evolving buffer holds. A
# per-prompt rubric written by hand may have any number (one or more): the bounds are on what a model writes.
MIN_CRITERIA, MAX_CRITERIA = 7, 20


class RubricWarning(UserWarning):
    """A rubric that is valid but probably unwise (e.g. too many dimensions to judge reliably)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Anchor(_Strict):
    """What a level of a dimension looks like, with examples that do and do not reach it."""

    text: str
    positive: list[str] = Field(default_factory=list)
    negative: list[str] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _from_text(cls, value: Any) -> Any:
        return {"text": value} if isinstance(value, str) else value


class Condition(_Strict):
    """The dimension counts only when ``dimension`` reaches ``min`` (in that dimension's range)."""

    dimension: str
    min: float


def _as_text(value: Any) -> Any:
    # YAML reads `version: 1.0` as a float and `date: 2026-11-29` as a date; a rubric keeps text.
    # (Quote versions such as "1.10" in YAML: as a float it would read back as 1.1.)
    return str(value) if isinstance(value, int | float) and not isinstance(value, bool) else value


class ChangelogEntry(_Strict):
    version: str
    date: str
    note: str
    hash: str | None = None

    _version_as_text = field_validator("version", mode="before")(_as_text)

    @field_validator("date", mode="before")
    @classmethod
    def _date_as_text(cls, value: Any) -> Any:
        # YAML turns 2026-11-29 into a date object; a rubric keeps it as written.
        return str(value) if value is not None else value


class Dimension(_Strict):
    name: str = Field(min_length=1)
    description: str = ""
    type: Literal["scale", "binary"] = "scale"
    range: tuple[float, float] | None = None
    anchors: dict[float, Anchor] = Field(default_factory=dict)
    weight: float = 1.0
    judge: str | None = None
    priority: int | None = None
    gate: float | None = None
    condition: Condition | None = None
    checks: list[dict[str, Any]] | None = None
    # set on the criteria of a per-prompt rubric (``rlkit rubric generate``); left out of the hash when unset
    category: CriterionCategory | None = None
    # `step`: scored on each policy turn of a multi-turn episode (step scores [B, G, T]; the episode's score is their
    # mean); `episode` (default): scored once on the episode. Left out of the hash when `episode`.
    scope: Literal["episode", "step"] = "episode"

    @model_validator(mode="before")
    @classmethod
    def _category_weight(cls, value: Any) -> Any:
        # a criterion's weight defaults to its category's (CATEGORY_WEIGHTS); a `weight:` written down wins
        if isinstance(value, dict) and "weight" not in value and value.get("category") in CATEGORY_WEIGHTS:
            return {**value, "weight": CATEGORY_WEIGHTS[value["category"]]}
        return value

    @field_validator("weight")
    @classmethod
    def _weight_non_negative(cls, value: float) -> float:
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"weight must be >= 0, got {value:g}")
        return value

    @model_validator(mode="after")
    def _check(self) -> Dimension:
        if self.type == "binary":
            if self.range is not None and tuple(self.range) != (0, 1):
                raise ValueError(f"a binary dimension has range [0, 1], got {list(self.range)}")
            object.__setattr__(self, "range", (0.0, 1.0))
        elif self.range is None:
            raise ValueError("a scale dimension needs range: [min, max]")
        lo, hi = self.range
        if not (math.isfinite(lo) and math.isfinite(hi)) or lo >= hi:
            raise ValueError(f"range must be [min, max] with min < max, got {list(self.range)}")
        outside = [level for level in self.anchors if not lo <= level <= hi]
        if outside:
            raise ValueError(f"anchors for levels {sorted(outside)} lie outside range [{lo:g}, {hi:g}]")
        if self.gate is not None and not lo <= self.gate <= hi:
            raise ValueError(f"gate {self.gate:g} lies outside range [{lo:g}, {hi:g}]")
        if self.category is not None and self.type != "binary":
            raise ValueError(f"a criterion ({self.category}) is a yes/no check: type must be binary")
        return self

    @property
    def low(self) -> float:
        assert self.range is not None
        return float(self.range[0])

    @property
    def high(self) -> float:
        assert self.range is not None
        return float(self.range[1])


class Rubric(_Strict):
    """A named, versioned list of dimensions. ``source`` is the file it came from, if any."""

    name: str = Field(min_length=1)
    version: str
    description: str = ""
    changelog: list[ChangelogEntry] = Field(default_factory=list)
    dimensions: list[Dimension] = Field(min_length=1)
    # judge name -> its prompt template (a shipped name such as judge/rubric_scores.jinja, or a path
    # relative to this file): the template is part of the rubric, so its text enters the content hash.
    templates: dict[str, str] = Field(default_factory=dict)
    # a frame rubric: each record is scored against its own per-prompt rubric (its ``rubric`` field), and these
    # dimensions summarise that record's criteria (``rubric=per_record``)
    per_record: bool = False
    source: str | None = Field(default=None, exclude=True)

    _version_as_text = field_validator("version", mode="before")(_as_text)

    @model_validator(mode="after")
    def _check(self) -> Rubric:
        names = [d.name for d in self.dimensions]
        by_name = {d.name: d for d in self.dimensions}
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"duplicate dimension names: {', '.join(dupes)}")
        if all(d.weight == 0 for d in self.dimensions):
            raise ValueError("all dimension weights are 0; at least one must be positive")
        tagged = [d.category is not None for d in self.dimensions]
        if any(tagged) and not all(tagged):
            raise ValueError("either every dimension is a criterion with a category (a per-prompt rubric) or none is")
        if all(tagged) and all(d.category == "pitfall" for d in self.dimensions):
            raise ValueError("a per-prompt rubric needs at least one criterion that is not a pitfall")
        if self.per_record and any(tagged):
            raise ValueError("per_record marks a frame rubric: its dimensions summarise criteria, they are none")
        for d in self.dimensions:
            if d.condition is not None:
                if d.condition.dimension not in names:
                    raise ValueError(
                        f"dimension {d.name!r}: condition refers to unknown dimension "
                        f"{d.condition.dimension!r}"
                    )
                if d.condition.dimension == d.name:
                    raise ValueError(f"dimension {d.name!r}: condition refers to itself")
                ref = by_name[d.condition.dimension]
                if not ref.low < d.condition.min <= ref.high:
                    raise ValueError(
                        f"dimension {d.name!r}: condition min {d.condition.min:g} must lie in "
                        f"({ref.low:g}, {ref.high:g}] of {ref.name!r}, else it is always or never met"
                    )
        return self

    @property
    def step_dimensions(self) -> list[int]:
        """Indices of the dimensions scored per policy turn (``scope: step``)."""
        return [i for i, d in enumerate(self.dimensions) if d.scope == "step"]

    @property
    def dimension_names(self) -> list[str]:
        return [d.name for d in self.dimensions]

    def initial_weights(self) -> list[float]:
        return [d.weight for d in self.dimensions]

    def template_path(self, judge: str) -> Path | None:
        """The template this rubric names for ``judge`` (None: the judge's default)."""
        from rlkit.core.templates import template_path

        name = self.templates.get(judge)
        if name is None:
            return None
        if self.source is not None and not Path(name).is_absolute():
            beside = Path(self.source).parent / name
            if beside.is_file():
                return beside
        try:
            return template_path(name, where=f"{self.source or '<rubric>'}: templates.{judge}")
        except RlkitError as exc:
            raise RubricError(exc.message, exc.where) from None

    def canonical(self) -> dict[str, Any]:
        """The content that defines the rubric; the changelog describes it and is left out. Templates count
        by their text, so editing one changes the hash as editing an anchor would."""
        data = self.model_dump(mode="json", exclude={"changelog", "source", "templates"})
        # fields added later count only when set, so every rubric written before them keeps its hash
        if not data.get("per_record"):
            data.pop("per_record", None)
        for dim in data["dimensions"]:
            if dim.get("category") is None:
                dim.pop("category", None)
            if dim.get("scope") == "episode":
                dim.pop("scope", None)
        if self.templates:
            data["templates"] = {judge: file_sha256(path)
                                 for judge in sorted(self.templates) if (path := self.template_path(judge))}
        return data

    @property
    def content_hash(self) -> str:
        """sha256 of the canonical JSON form: same content, same hash, whatever the YAML layout."""
        text = json.dumps(self.canonical(), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    @property
    def short_hash(self) -> str:
        return self.content_hash[:12]

    @property
    def is_criteria_rubric(self) -> bool:
        """A per-prompt rubric: every dimension is a criterion tagged with a category."""
        return all(d.category is not None for d in self.dimensions)

    def identity(self) -> dict[str, str]:
        """What travels with every run and checkpoint."""
        return {"name": self.name, "version": self.version, "hash": self.content_hash}


def _owning_model(model: Any, loc: tuple[Any, ...]) -> Any:
    """The pydantic model that holds the field at ``loc`` (list indices and dict keys stepped through), or None."""
    import typing

    for part in loc:
        if isinstance(part, int) or not isinstance(model, type) or not issubclass(model, pydantic.BaseModel):
            continue
        field = model.model_fields.get(part)
        if field is None:
            return None
        inner = field.annotation
        while typing.get_origin(inner) is not None and not (isinstance(inner, type)
                                                             and issubclass(inner, pydantic.BaseModel)):
            models = [a for a in typing.get_args(inner) if isinstance(a, type) and issubclass(a, pydantic.BaseModel)]
            inner = models[0] if models else (typing.get_args(inner) or [None])[-1]
        model = inner
    return model if isinstance(model, type) and issubclass(model, pydantic.BaseModel) else None


def _field_path(loc: tuple[Any, ...], data: Any) -> str:
    """``dimensions[2](format).anchors`` from pydantic's ``('dimensions', 2, 'anchors')``."""
    parts: list[str] = []
    node = data
    for item in loc:
        if isinstance(item, int):
            label = f"[{item}]"
            if isinstance(node, list) and item < len(node):
                node = node[item]
                if isinstance(node, dict) and isinstance(node.get("name"), str):
                    label += f"({node['name']})"
            else:
                node = None
            parts.append(label)
        else:
            if item in ("function-after", "function-before") or str(item).startswith("function-"):
                continue
            parts.append(("." if parts else "") + str(item))
            node = node.get(item) if isinstance(node, dict) else None
    return "".join(parts)


def rubric_from_dict(data: Any, source: str = "<rubric>", *, verify_changelog: bool = True) -> Rubric:
    """Validate a parsed rubric; errors name ``source`` and the field."""
    if not isinstance(data, dict):
        raise RubricError(f"a rubric is a mapping with name, version and dimensions, got {type(data).__name__}",
                          source)
    if "source" in data:
        raise RubricError("unknown key (the source file is recorded by rlkit)", f"{source}: source")
    try:
        rubric = Rubric.model_validate({**data, "source": source})
    except pydantic.ValidationError as exc:
        err = exc.errors()[0]
        field = _field_path(tuple(err["loc"]), data)
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            owner = _owning_model(Rubric, tuple(err["loc"])[:-1])
            fields = list(owner.model_fields) if owner is not None else []
            msg = (f"unknown key; valid keys: {', '.join(f for f in fields if f != 'source')}"
                   f"{did_you_mean(err['loc'][-1], fields)}" if fields else "unknown key")
        elif err["type"] == "missing":
            msg = "required field is missing"
        where = f"{source}: {field}" if field else source
        raise RubricError(msg, where) from None
    for judge in rubric.templates:
        rubric.template_path(judge)  # a missing template fails here, naming the rubric file and field
    if verify_changelog:  # off only for tools that inspect a stale changelog (`rlkit rubric hash/diff`)
        check_changelog(rubric, source)
    criteria = rubric.is_criteria_rubric
    # criteria are single yes/no checks, not the judgement calls the warning is about
    if not criteria and len(rubric.dimensions) > MAX_DIMENSIONS_BEFORE_WARNING:
        warnings.warn(
            f"{source}: {len(rubric.dimensions)} dimensions; judges agree less as dimensions grow, "
            f"consider at most {MAX_DIMENSIONS_BEFORE_WARNING}",
            RubricWarning,
            stacklevel=2,
        )
    return rubric


# A scale with more whole levels than this (0-100) is read as continuous: only its two ends need an anchor.
MAX_ANCHORED_LEVELS = 11


def anchor_levels(dimension: Dimension) -> list[float]:
    """The levels of a dimension that each need an anchor: every whole number of a range with whole ends of at most
    ``MAX_ANCHORED_LEVELS`` levels ([1, 5]: 1 to 5; binary: 0 and 1), else the range's two ends."""
    low, high = dimension.low, dimension.high
    if low.is_integer() and high.is_integer() and high - low + 1 <= MAX_ANCHORED_LEVELS:
        return [float(level) for level in range(int(low), int(high) + 1)]
    return [low, high]


@dataclass(frozen=True)
class AnchorFinding:
    """One dimension's anchor gaps: its levels without anchor text, and whether none of its anchors has a negative
    example (what looks right but is not)."""

    index: int
    dimension: str
    missing_levels: tuple[float, ...]
    no_negative: bool
    range: tuple[float, float]

    def messages(self, source: str) -> list[str]:
        """One line per gap, naming the rubric file and the dimension as validation errors do."""
        where = f"{source}: dimensions[{self.index}]({self.dimension}).anchors"
        out = []
        if self.missing_levels:
            levels = ", ".join(f"{level:g}" for level in self.missing_levels)
            out.append(f"{where}: level{'s' * (len(self.missing_levels) > 1)} {levels} of range "
                       f"[{self.range[0]:g}, {self.range[1]:g}] {'have' if len(self.missing_levels) > 1 else 'has'} "
                       "no anchor text")
        if self.no_negative:
            out.append(f"{where}: no negative example (an anchor's `negative:` list: an answer that looks right but "
                       "is not)")
        return out


@dataclass(frozen=True)
class AnchorReport:
    """What :func:`anchor_report` found in a rubric; ``skipped`` says why a rubric was not checked."""

    source: str
    findings: tuple[AnchorFinding, ...] = ()
    skipped: str | None = None

    @property
    def unanchored_levels(self) -> int:
        return sum(len(f.missing_levels) for f in self.findings)

    @property
    def dimensions_without_negative(self) -> int:
        return sum(f.no_negative for f in self.findings)

    def messages(self) -> list[str]:
        return [line for finding in self.findings for line in finding.messages(self.source)]

    def summary(self) -> str:
        """``rubric anchors: N levels without anchors, M dimensions without a negative example``."""
        if self.skipped is not None:
            return f"rubric anchors: not checked ({self.skipped})"
        n, m = self.unanchored_levels, self.dimensions_without_negative
        return (f"rubric anchors: {n} level{'s' * (n != 1)} without anchors, {m} dimension{'s' * (m != 1)} without "
                "a negative example")


def anchor_report(rubric: Rubric) -> AnchorReport:
    """Dimensions that fall short of the rubric design note (§2.2, §6.1): every level of a dimension has anchor text,
    and its anchors show negative examples as well as positive ones. Warnings, never errors: such a rubric loads and
    trains, and its content hash is untouched. Per-prompt criteria (yes/no checks written from a reference) and
    ``per_record`` frames (dimensions computed from criteria) are not checked."""
    source = rubric.source or "<rubric>"
    if rubric.per_record:
        return AnchorReport(source, skipped="a per_record frame: its dimensions summarise each record's criteria")
    if rubric.is_criteria_rubric:
        return AnchorReport(source, skipped="a per-prompt rubric: each criterion is one yes/no check")
    findings = []
    for index, dim in enumerate(rubric.dimensions):
        anchored = [level for level, anchor in dim.anchors.items() if anchor.text.strip()]
        missing = tuple(level for level in anchor_levels(dim)
                        if not any(math.isclose(level, a, abs_tol=1e-9) for a in anchored))
        no_negative = not any(text.strip() for anchor in dim.anchors.values() for text in anchor.negative)
        if missing or no_negative:
            findings.append(AnchorFinding(index, dim.name, missing, no_negative, (dim.low, dim.high)))
    return AnchorReport(source, tuple(findings))


MIN_CHANGELOG_HASH_CHARS = 12  # the short hash rlkit prints everywhere; shorter prefixes could collide


def check_changelog(rubric: Rubric, source: str = "<rubric>") -> None:
    """The changelog entry for the rubric's ``version``, if it stores a ``hash``, must describe this content."""
    for index, entry in enumerate(rubric.changelog):
        if entry.hash is None:
            continue
        where = f"{source}: changelog[{index}].hash"
        if len(entry.hash) < MIN_CHANGELOG_HASH_CHARS or any(c not in "0123456789abcdef" for c in entry.hash):
            raise RubricError(f"expected the rubric's content hash (at least {MIN_CHANGELOG_HASH_CHARS} lowercase "
                              f"hex characters; `rlkit rubric hash {source}` prints it), got {entry.hash!r}", where)
    current = [entry for entry in rubric.changelog if entry.version == rubric.version and entry.hash is not None]
    actual = rubric.content_hash
    for entry in current:
        # a prefix is enough: people paste the 12-character short hash as often as the full one
        if not actual.startswith(entry.hash or ""):
            raise RubricError(
                f"content changed without a version bump (changelog entry for version {rubric.version} stores hash "
                f"{entry.hash}, content is {actual}): bump `version` and add a changelog entry", source)


def _renamed_folder_hint(path: Path) -> str:
    """Where a rubric now lives when ``path`` names the old ``conf/rubrics/`` folder (renamed ``conf/rubric_files/``
    in 0.1.0, beside the ``conf/rubric/`` group that picks one): a path copied from an older config says so."""
    moved = path.parent.parent / "rubric_files"
    if path.parent.name != "rubrics" or not moved.is_dir():
        return ""
    if not (moved / path.name).is_file():
        return f"; the rubrics/ folder was renamed rubric_files/ ({moved})"
    try:
        shipped = moved.resolve() == (package_dir("rlkit.conf", "rlkit.conf") / "rubric_files").resolve()
    except RlkitError:
        shipped = False
    new = f"pkg://rlkit.conf/rubric_files/{path.name}" if shipped else str(moved / path.name)
    return f"; the rubrics/ folder was renamed rubric_files/: use {new}"


def load_rubric(path: str | Path, *, verify_changelog: bool = True) -> Rubric:
    """Read and validate a rubric YAML file."""
    path = Path(path)
    if not path.is_file():
        raise RubricError(no_such(path, "rubric file") + _renamed_folder_hint(path), str(path))
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise RubricError(f"not UTF-8 text (byte {exc.start})", str(path)) from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise RubricError(*yaml_syntax_error(exc, path)) from None
    return rubric_from_dict(data, str(path), verify_changelog=verify_changelog)
