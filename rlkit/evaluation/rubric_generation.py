"""``rlkit rubric generate``: per-prompt rubrics written by a judge model from each prompt's reference answer.

Rubrics as Rewards (Gunjal et al. 2025, arXiv:2507.17746): the model lists checkable criteria tagged Essential,
Important, Optional or Pitfall; each becomes a binary dimension weighted by its category
(``rlkit.core.rubric.CATEGORY_WEIGHTS``), a pitfall being a mistake whose weight is subtracted when a response
makes it (``rlkit_plugins.judges.per_record``). Every rubric is validated as any rubric is, written as YAML (one
file per prompt, diffable with ``rlkit rubric diff``), and versioned: regenerating a prompt whose criteria changed
bumps its version and adds a changelog entry storing the new content hash; unchanged criteria keep the file.

Nothing is written until every prompt has a valid rubric: an answer that cannot be read, even after
``retries`` reminders, is one error naming the data line and the problem.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import ConfigError, DataError, RubricError
from rlkit.core.rubric import CATEGORY_WEIGHTS, MAX_CRITERIA, MIN_CRITERIA, Rubric, load_rubric, rubric_from_dict
from rlkit.core.templates import render_file, template_hash
from rlkit.data.records import prompt_text
from rlkit.evaluation.reasking import ask_until_parsed

TEMPLATE = "rubric/generate.jinja"
RECORDS_NAME = "records.jsonl"
_CATEGORY_ALIASES = {"essential": "essential", "important": "important", "optional": "optional",
                     "pitfall": "pitfall", "pitfalls": "pitfall"}


@dataclass(frozen=True)
class GenerateOptions:
    output: Path
    min_criteria: int = MIN_CRITERIA
    max_criteria: int = MAX_CRITERIA
    retries: int = 1


@dataclass
class Generated:
    """What was written: one rubric file per distinct prompt, and the records naming them."""

    records_path: Path
    files: list[Path] = field(default_factory=list)
    new: int = 0
    changed: int = 0
    unchanged: int = 0


# --- reading the judge's answer ---------------------------------------------------------------------------------


def _json_part(text: str) -> Any:
    """The JSON of an answer, allowing a fenced block or words around one object or list."""
    fenced = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.DOTALL)
    body = fenced.group(1) if fenced else text
    starts = [i for i in (body.find("{"), body.find("[")) if i >= 0]
    if not starts:
        raise ValueError("no JSON object in the answer")
    start = min(starts)
    end = max(body.rfind("}"), body.rfind("]"))
    try:
        return json.loads(body[start:end + 1])
    except json.JSONDecodeError as exc:
        raise ValueError(f"invalid JSON ({exc.msg} at character {exc.pos})") from None


def parse_criteria(text: str | None, min_criteria: int = MIN_CRITERIA, max_criteria: int = MAX_CRITERIA, *,
                   require_positive: bool = True) -> list[tuple[str, str]]:
    """``[(criterion, category)]`` from a judge's answer; ValueError names what is wrong. ``require_positive=False``
    accepts pitfalls alone (criteria added to a rubric that already has something to get right)."""
    if not text or not text.strip():
        raise ValueError("empty answer")
    data = _json_part(text)
    items = data.get("criteria") if isinstance(data, dict) else data
    if not isinstance(items, list):
        raise ValueError('expected {"criteria": [{"criterion": ..., "category": ...}, ...]}')
    if not min_criteria <= len(items) <= max_criteria:
        raise ValueError(f"{len(items)} criteria; a rubric needs {min_criteria} to {max_criteria}")
    out: list[tuple[str, str]] = []
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            raise ValueError(f"criteria[{i}]: expected an object with criterion and category")
        criterion = next((item[k] for k in ("criterion", "description", "text") if isinstance(item.get(k), str)), "")
        if not criterion.strip():
            raise ValueError(f"criteria[{i}]: no criterion text")
        raw = item.get("category")
        category = _CATEGORY_ALIASES.get(re.sub(r"\s*criteri(a|on)$", "", str(raw).strip().lower()))
        if category is None:
            raise ValueError(f"criteria[{i}].category: {raw!r} is not one of essential, important, optional, pitfall")
        if any(criterion.strip() == c for c, _ in out):
            raise ValueError(f"criteria[{i}]: repeats an earlier criterion")
        out.append((criterion.strip(), category))
    if require_positive and all(category == "pitfall" for _, category in out):
        raise ValueError("every criterion is a pitfall; at least one must be something to get right")
    return out


# --- building and versioning a rubric ---------------------------------------------------------------------------


def rubric_id(record: dict[str, Any]) -> str:
    """A file-safe name per prompt: the record's ``id`` when it has one, else a hash of the prompt text."""
    rid = record.get("id")
    if isinstance(rid, str | int) and not isinstance(rid, bool):
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", str(rid)).strip("._")
        if safe:
            return safe
    return "p" + hashlib.sha256(prompt_text(record["prompt"]).encode("utf-8")).hexdigest()[:12]


def criterion_dimension(name: str, criterion: str, category: str) -> dict[str, Any]:
    """One criterion as a rubric dimension: binary, weighted by its category, a pitfall's 1 meaning it is made."""
    pitfall = category == "pitfall"
    return {"name": name, "description": criterion, "type": "binary", "weight": CATEGORY_WEIGHTS[category],
            "category": category, "anchors": {0: "Does not make this mistake" if pitfall else "Not met",
                                              1: "Makes this mistake" if pitfall else "Met"}}


def criteria_rubric_data(name: str, criteria: Sequence[tuple[str, str]], prompt: str) -> dict[str, Any]:
    """A rubric mapping, without version or changelog: one binary dimension per criterion."""
    counts: dict[str, int] = {}
    dims = []
    for criterion, category in criteria:
        counts[category] = counts.get(category, 0) + 1
        dims.append(criterion_dimension(f"{category}_{counts[category]}", criterion, category))
    summary = " ".join(prompt.split())
    return {"name": name, "description": f"Criteria for: {summary[:200]}", "dimensions": dims}


def _next_version(version: str) -> str:
    head, _, last = version.rpartition(".")
    if last.isdigit():
        return f"{head}.{int(last) + 1}" if head else str(int(last) + 1)
    return f"{version}.1"


def versioned(data: dict[str, Any], path: Path, note: str) -> tuple[dict[str, Any], Rubric, str]:
    """``data`` with version and changelog continuing the file at ``path``: ``new``, ``changed`` or ``unchanged``."""
    previous = load_rubric(path, verify_changelog=False) if path.is_file() else None
    version = "1" if previous is None else previous.version
    probe = rubric_from_dict({**data, "version": version}, str(path), verify_changelog=False)
    if previous is not None and previous.content_hash == probe.content_hash:
        return {}, previous, "unchanged"
    if previous is not None:
        version = _next_version(previous.version)
        probe = rubric_from_dict({**data, "version": version}, str(path), verify_changelog=False)
    changelog = [entry.model_dump(exclude_none=True) for entry in previous.changelog] if previous else []
    changelog.append({"version": version, "date": datetime.date.today().isoformat(), "note": note,
                      "hash": probe.content_hash})
    full = {"name": data["name"], "version": version, "description": data["description"], "changelog": changelog,
            "dimensions": data["dimensions"]}
    rubric = rubric_from_dict(full, str(path))  # checks the stored hash as every later load will
    return full, rubric, "new" if previous is None else "changed"


# --- the command's work -----------------------------------------------------------------------------------------


def _chat(record: dict[str, Any], options: GenerateOptions) -> list[dict[str, str]]:
    text = render_file(TEMPLATE, "rubric generate", prompt=prompt_text(record["prompt"]),
                       reference=record["reference"], min_criteria=options.min_criteria,
                       max_criteria=options.max_criteria, weights=CATEGORY_WEIGHTS)
    return [{"role": "user", "content": text}]


def ask_for_criteria(backend: Any, chats: Sequence[list[dict[str, str]]], options: GenerateOptions, *,
                     require_positive: bool = True) -> list[list[tuple[str, str]] | str]:
    """Each chat's criteria, or the last problem with its answer after ``retries`` reminders. Also asks for the
    criteria of an evolving rubric (``rlkit.evaluation.rubric_evolution``: 0 to a few, pitfalls alone allowed)."""
    return ask_until_parsed(
        lambda batch, _: backend.complete(batch), chats,
        lambda _, text: parse_criteria(text, options.min_criteria, options.max_criteria,
                                       require_positive=require_positive),
        lambda _: ('Answer again with one JSON object {"criteria": [{"criterion": ..., "category": ...}, ...]} '
                   f"holding {options.min_criteria} to {options.max_criteria} criteria."), options.retries)


def generate_rubrics(records: Sequence[dict[str, Any]], lines: Sequence[int], data_path: Path, backend: Any,
                     options: GenerateOptions, *, max_tokens: int | None = None) -> Generated:
    """Ask ``backend`` for every distinct prompt's criteria; write the rubric files and ``records.jsonl``."""
    for record, line in zip(records, lines, strict=True):
        reference = record.get("reference")
        if not isinstance(reference, str) or not reference.strip():
            raise DataError('needs a "reference" answer (text) to write its criteria from', f"{data_path}:{line}")
    ids = [rubric_id(r) for r in records]
    first: dict[str, int] = {}
    for i, rid in enumerate(ids):
        first.setdefault(rid, i)
    asked = sorted(first.values())
    answers = ask_for_criteria(backend, [_chat(records[i], options) for i in asked], options)
    for i, answer in zip(asked, answers, strict=True):
        if isinstance(answer, str):
            hint = (f"; answers may be cut short at judge.params.backend.params.max_tokens={max_tokens}"
                    if max_tokens is not None and max_tokens < 1024 else "")
            raise DataError(f"the judge's rubric cannot be used: {answer}{hint}", f"{data_path}:{lines[i]}")
    identity = getattr(backend, "identity", dict)()
    note = (f"generated by {identity.get('model', identity.get('backend', 'the judge'))} from the reference "
            f"(template {template_hash(TEMPLATE)[:12]})")
    written: dict[str, tuple[dict[str, Any], Rubric, str, Path]] = {}
    for i, answer in zip(asked, answers, strict=True):
        assert not isinstance(answer, str)
        path = options.output / f"{ids[i]}.yaml"
        data = criteria_rubric_data(ids[i], answer, prompt_text(records[i]["prompt"]))
        try:
            full, rubric, status = versioned(data, path, note)
        except RubricError as exc:
            raise DataError(f"the judge's rubric is invalid: {exc.message}", f"{data_path}:{lines[i]}") from None
        written[ids[i]] = (full, rubric, status, path)
    result = Generated(records_path=options.output / RECORDS_NAME)
    options.output.mkdir(parents=True, exist_ok=True)
    for full, _, status, path in written.values():  # every rubric is valid: only now is anything written
        if status != "unchanged":
            atomic_write_text(path, yaml.safe_dump(full, sort_keys=False, allow_unicode=True, width=100))
        setattr(result, status, getattr(result, status) + 1)
        result.files.append(path)
    out_lines = [json.dumps({**record, "rubric": str(written[rid][3]), "rubric_hash": written[rid][1].content_hash},
                            ensure_ascii=False) for record, rid in zip(records, ids, strict=True)]
    atomic_write_text(result.records_path, "\n".join(out_lines) + "\n")
    return result


def generate_options(args: dict[str, str]) -> GenerateOptions:
    """``generate.*`` arguments of the command (not part of the run's config schema)."""
    known = {"output", "min_criteria", "max_criteria", "retries"}
    for key in args:
        if key not in known:
            raise ConfigError(f"unknown option; valid: {', '.join(f'generate.{k}' for k in sorted(known))}",
                              f"generate.{key}")
    ints: dict[str, int] = {}
    for key in ("min_criteria", "max_criteria", "retries"):
        if key in args:
            try:
                ints[key] = int(args[key])
            except ValueError:
                raise ConfigError(f"must be a whole number, got {args[key]!r}", f"generate.{key}") from None
    options = GenerateOptions(output=Path(args.get("output", "rubrics")).expanduser(), **ints)
    if not MIN_CRITERIA <= options.min_criteria <= options.max_criteria <= MAX_CRITERIA:
        raise ConfigError(f"need {MIN_CRITERIA} <= min_criteria <= max_criteria <= {MAX_CRITERIA}, got "
                          f"{options.min_criteria} and {options.max_criteria}", "generate")
    if options.retries < 0:
        raise ConfigError("must be >= 0", "generate.retries")
    return options
