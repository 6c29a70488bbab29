"""``rlkit data prepare``: prompt records cleaned for training, with a report of what was removed and why.

In order: read (JSONL, or a local Hugging Face ``datasets`` directory), scrub PII (``rlkit.text.pii``), drop
near-duplicates (``rlkit.text.dedup``), sample a difficulty mix. The functions here print nothing; the CLI wires them.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pydantic

from rlkit.core.errors import DataError
from rlkit.data.files import Reject, read_jsonl_records
from rlkit.data.hf_datasets import load_dataset_dir
from rlkit.data.records import _prompt_problem, prompt_text
from rlkit.text.dedup import DedupMethod, EmbeddingSimilarity, near_duplicates
from rlkit.text.pii import KINDS, scrub_value

MAX_EXAMPLES = 5  # duplicates listed in the report with the record they duplicate
MAX_EXAMPLE_CHARS = 200


def parse_mix(text: str) -> dict[str, float]:
    """``"easy:3,medium:5,hard:2"`` as ``{"easy": 3.0, ...}``; weights are relative, positive and finite."""
    mix: dict[str, float] = {}
    for part in text.split(","):
        level, sep, weight = part.strip().rpartition(":")
        if not sep or not level.strip():
            raise ValueError(f"expected level:weight pairs separated by commas (easy:3,medium:5,hard:2), got {part!r}")
        level = level.strip()
        try:
            value = float(weight)
        except ValueError:
            raise ValueError(f"weight of {level!r} must be a number, got {weight!r}") from None
        if not (value > 0 and math.isfinite(value)):
            raise ValueError(f"weight of {level!r} must be a positive number, got {weight!r}")
        if level in mix:
            raise ValueError(f"level {level!r} is given twice")
        mix[level] = value
    return mix


class PrepareOptions(pydantic.BaseModel):
    """``rlkit data prepare`` arguments (see ``DATA_USAGE`` in ``rlkit/cli.py``)."""

    model_config = pydantic.ConfigDict(extra="forbid", populate_by_name=True)

    input: Path = pydantic.Field(alias="in")
    out: Path
    text_field: str = "prompt"
    dedup: DedupMethod = "embedding"
    dedup_threshold: float = pydantic.Field(default=0.92, gt=0, le=1)
    embedding_model: str | None = None
    pii: bool = True
    mix: dict[str, float] | None = None
    mix_field: str = "difficulty"
    size: int | None = pydantic.Field(default=None, ge=1)
    seed: int = 0
    split: str | None = None

    @pydantic.field_validator("mix", mode="before")
    @classmethod
    def _mix(cls, value: Any) -> Any:
        return parse_mix(value) if isinstance(value, str) else value


@dataclass
class SourceRecord:
    """A record and where it came from: a JSONL line (from 1) or a dataset row (from 0)."""

    position: int
    record: dict[str, Any]


def _parser(text_field: str):
    def parse(value: Any, position: int) -> SourceRecord | str:
        if not isinstance(value, dict):
            return f"a record must be a JSON object, got {type(value).__name__}"
        if text_field not in value:
            return f'missing "{text_field}"'
        return _prompt_problem(value[text_field], text_field) or SourceRecord(position, value)

    return parse


def _read_dataset(path: Path, text_field: str, split: str | None) -> tuple[list[SourceRecord], list[Reject]]:
    data = load_dataset_dir(path, split, split_hint="choose one with split=NAME")
    parse = _parser(text_field)
    records: list[SourceRecord] = []
    rejects: list[Reject] = []
    for row_no, row in enumerate(data):
        try:
            raw = json.dumps(row, ensure_ascii=False)
        except (TypeError, ValueError) as exc:  # images, bytes: the output is JSONL
            rejects.append(Reject(row_no, f"not JSON-serialisable ({exc})", repr(row)[:MAX_EXAMPLE_CHARS], "row"))
            continue
        parsed = parse(row, row_no)
        if isinstance(parsed, str):
            rejects.append(Reject(row_no, parsed, raw, "row"))
        else:
            records.append(parsed)
    return records, rejects


def read_source(path: Path, text_field: str = "prompt",
                split: str | None = None) -> tuple[list[SourceRecord], list[Reject]]:
    """Good records and bad lines (or rows) of a JSONL file or a ``save_to_disk`` directory."""
    if path.is_dir():
        return _read_dataset(path, text_field, split)
    if split is not None and path.is_file():
        raise DataError(f"split={split} applies to a datasets directory, not a file", str(path))
    if not path.exists():
        raise DataError("no such data file or datasets directory", str(path))
    return read_jsonl_records(path, _parser(text_field))


def allocate(shares: dict[str, float], size: int) -> dict[str, int]:
    """``size`` split in proportion to ``shares`` by largest remainders (ties go to the level listed first)."""
    total = sum(shares.values())
    exact = {level: size * weight / total for level, weight in shares.items()}
    counts = {level: math.floor(x) for level, x in exact.items()}
    order = sorted(shares, key=lambda level: -(exact[level] - counts[level]))  # stable: listed order breaks ties
    for level in order[:size - sum(counts.values())]:
        counts[level] += 1
    return counts


def largest_size(shares: dict[str, float], available: dict[str, int]) -> int:
    """The largest total whose allocation at ``shares`` fits in ``available`` for every level."""
    total = sum(shares.values())
    size = math.floor(min(available[level] * total / weight for level, weight in shares.items())) + len(shares)
    while size > 0 and any(n > available[level] for level, n in allocate(shares, size).items()):
        size -= 1
    return size


@dataclass
class MixResult:
    """Which records the difficulty mix sampled, and the report's ``mix`` section."""

    keep: list[int]
    report: dict[str, Any] = field(default_factory=dict)
    removed: Counter[str] = field(default_factory=Counter)


def sample_mix(levels: list[Any], mix: dict[str, float] | None, size: int | None, seed: int,
               mix_field: str = "difficulty") -> MixResult:
    """Indices sampled without replacement to hit ``mix`` (level -> weight) at ``size`` records, seeded.

    ``levels[i]`` is record i's value of the mix field (None when it has none; compared as text). Without a
    ``size`` the largest one the available counts allow. A level short of its target gives all it has and the
    others keep their targets, so fewer than ``size`` are written; the realised shares and a warning say so.
    Without a ``mix`` but with a ``size``, a uniform sample. Kept indices come back in input order.
    """
    rng = random.Random(seed)
    if mix is None:
        if size is None or size >= len(levels):
            warnings = [f"size={size} but only {len(levels)} records remain; all are kept"] if size else []
            return MixResult(list(range(len(levels))), {"size_requested": size, "warnings": warnings})
        keep = sorted(rng.sample(range(len(levels)), size))
        return MixResult(keep, {"size_requested": size, "warnings": []}, Counter(not_sampled=len(levels) - size))
    by_level: dict[str, list[int]] = {level: [] for level in mix}
    other: Counter[str] = Counter()
    missing = 0
    for i, value in enumerate(levels):
        if value is None:
            missing += 1
        elif str(value) in by_level:
            by_level[str(value)].append(i)
        else:
            other[str(value)] += 1
    available = {level: len(indices) for level, indices in by_level.items()}
    warnings = [f"no record has a {mix_field!r} field; name the difficulty field with mix_field="] \
        if levels and missing == len(levels) else []
    if size is None:
        present = {level: w for level, w in mix.items() if available[level]}
        for level in mix.keys() - present.keys():
            warnings.append(f"level {level!r} has no records; the other levels keep their shares relative to "
                            f"each other")
        targets = allocate(present, largest_size(present, available)) if present else {}
        targets = {level: targets.get(level, 0) for level in mix}
    else:
        targets = allocate(mix, size)
    keep: list[int] = []
    total_weight = sum(mix.values())
    rows: dict[str, dict[str, Any]] = {}
    for level, indices in by_level.items():
        sampled = min(targets[level], len(indices))
        if sampled < targets[level]:
            warnings.append(f"level {level!r}: {targets[level]} wanted, {len(indices)} available; took all of "
                            f"them, the other levels keep their targets")
        keep += rng.sample(indices, sampled)
        rows[level] = {"available": len(indices), "requested_share": round(mix[level] / total_weight, 6),
                       "target": targets[level], "sampled": sampled}
    for row in rows.values():
        row["realised_share"] = round(row["sampled"] / len(keep), 6) if keep else None
    report = {"field": mix_field, "size_requested": size, "size": len(keep), "seed": seed, "levels": rows,
              "missing_field": missing, "other_levels": dict(sorted(other.items())), "warnings": warnings}
    removed = Counter({"missing_mix_field": missing, "level_not_in_mix": sum(other.values()),
                       "not_sampled": sum(available.values()) - len(keep)})
    return MixResult(sorted(keep), report, removed)


@dataclass
class Prepared:
    """The records to write, and the JSON-ready report."""

    records: list[dict[str, Any]]
    report: dict[str, Any]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else prompt_text(value)


def prepare(records: list[SourceRecord], rejects: list[Reject], options: PrepareOptions) -> Prepared:
    """Scrub, de-duplicate and sample ``records``; the report says what was removed at each step and why."""
    unit = "row" if options.input.is_dir() else "line"
    pii_counts: Counter[str] = Counter({kind: 0 for kind in KINDS})
    changed = 0
    if options.pii:
        for source in records:
            before = sum(pii_counts.values())
            source.record = scrub_value(source.record, pii_counts)[0]
            changed += sum(pii_counts.values()) > before
    texts = [_text(source.record[options.text_field]) for source in records]
    method = EmbeddingSimilarity(options.embedding_model) if options.dedup == "embedding" and len(texts) > 1 \
        else options.dedup
    duplicates = near_duplicates(texts, method, options.dedup_threshold)
    examples = [{unit: records[d.index].position, f"kept_{unit}": records[d.kept_index].position,
                 "similarity": round(d.similarity, 4), "text": texts[d.index][:MAX_EXAMPLE_CHARS],
                 "kept_text": texts[d.kept_index][:MAX_EXAMPLE_CHARS]} for d in duplicates[:MAX_EXAMPLES]]
    dropped = {d.index for d in duplicates}
    unique = [source for i, source in enumerate(records) if i not in dropped]
    mixed = sample_mix([source.record.get(options.mix_field) for source in unique], options.mix, options.size,
                       options.seed, options.mix_field)
    out = [unique[i].record for i in mixed.keep]
    report: dict[str, Any] = {
        "input": str(options.input),
        "output": str(options.out),
        "records_read": len(records) + len(rejects),  # so that read - sum(removed) = written
        "pii": {"enabled": options.pii, "replacements": dict(pii_counts), "records_changed": changed},
        "dedup": {"method": options.dedup, "threshold": options.dedup_threshold, "text_field": options.text_field,
                  "removed": len(duplicates), "examples": examples},
        "mix": mixed.report if options.mix is not None or options.size is not None else None,
        "removed": {"rejected": len(rejects), "duplicate": len(duplicates),
                    **{k: mixed.removed[k] for k in ("missing_mix_field", "level_not_in_mix", "not_sampled")}},
        "records_written": len(out),
    }
    return Prepared(out, report)
