"""Blind comparison files (``rlkit compare``): two sets of answers to the same prompts, paired by prompt, each pair
shown left and right in a seeded random order, with people's preferences.

Two files, side by side:

* the **comparison file** (JSONL), what the page and the labellers see: one line per prompt with ``item`` (a short
  hash of the prompt), ``prompt``, ``reference`` (when the answers carry one), ``left`` and ``right`` (the two
  answers), ``dimensions`` (rubric dimensions to prefer on too, possibly none) and ``preferences``: ``{labeller:
  {"overall" or a dimension: "left" | "right" | "tie" | null (skipped)}}``. It says nothing of which run wrote
  which answer, so it can be handed to a labeller as it is;
* the **key** (``<file stem>.key.json``), read only by the report: the two sides (``A`` and ``B``: what was
  compared, as given, and the answer file read), the seed, and per item whether A's answer is on the left.

Which side is left is drawn per item from ``Random(f"{seed}/{item}")``: random across items, the same every time the
file is built from the same answers and seed. Prompts that only one side answered are counted and named, and left
out; prompts both answered word for word alike are left out too (a tie by construction, not worth a labeller's time)
and counted in the key.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import DataError, no_such
from rlkit.data.records import checked_json_lines, prompt_text
from rlkit.evaluation.labelling import write_lines
from rlkit.evaluation.labelling_answers import AnswerError, update_line
from rlkit.runs.heldout_answers import WHEN, read_answers, read_heldout_answers

CHOICES = ("left", "right", "tie")
OVERALL = "overall"


# --- what is compared ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Side:
    """One side of a comparison: ``spec`` as given (``RUN``, ``RUN@start``, ``RUN@end`` or an answers file)."""

    spec: str
    path: Path
    when: str | None  # a run's start or end; None for an answers file

    @property
    def label(self) -> str:
        return f"{self.path} ({self.when})" if self.when else str(self.path)


def parse_side(spec: str) -> Side:
    """``RUN`` (its final answers), ``RUN@start``, ``RUN@end``, or a JSONL file of ``{prompt, completion}`` lines."""
    whole = Path(spec)
    if whole.exists():  # a path that holds an @ itself
        return Side(spec, whole, None if whole.is_file() else "end")
    path, at, when = spec.rpartition("@") if "@" in spec else (spec, "", "")
    if at and when not in WHEN:
        raise DataError(f"after @ comes start or end (the run's answers before or after training), got {when!r}",
                        spec)
    if not at and whole.suffix == ".jsonl":
        raise DataError(no_such(whole, "answers file"), spec)
    return Side(spec, Path(path), when or "end")


def read_side(side: Side) -> list[dict[str, Any]]:
    """The side's answer lines."""
    if side.when is None:
        return read_answers(side.path)
    return read_heldout_answers(side.path, side.when)


def prompt_id(prompt: Any) -> str:
    """A short hash of the prompt's text: the item's name, the same in every file built from the same prompts."""
    return hashlib.sha256(prompt_text(prompt).strip().encode("utf-8")).hexdigest()[:12]


@dataclass
class Pairing:
    """The items of a comparison, its key, and what was left out."""

    lines: list[dict[str, Any]]
    key: dict[str, Any]
    only_a: list[str] = field(default_factory=list)  # prompts (text) only A answered
    only_b: list[str] = field(default_factory=list)
    identical: int = 0
    repeated: int = 0  # prompts a side answered more than once, differently (the first answer kept)


def _by_prompt(rows: Sequence[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], int]:
    """Each prompt's first answer, and how many prompts were answered again differently (a task may repeat a
    prompt; greedy answers to it are the same and say nothing new)."""
    out: dict[str, dict[str, Any]] = {}
    differ: set[str] = set()
    for row in rows:
        first = out.setdefault(prompt_id(row["prompt"]), row)
        if first["completion"] != row["completion"]:
            differ.add(prompt_id(row["prompt"]))
    return out, len(differ)


def pair_answers(a: Side, a_rows: Sequence[dict[str, Any]], b: Side, b_rows: Sequence[dict[str, Any]], seed: int,
                 dimensions: Sequence[str] = ()) -> Pairing:
    """Pair the two sides' answers by prompt (A's order) and draw each item's left/right; a ``DataError`` when no
    prompt is answered by both with different answers."""
    by_a, repeated_a = _by_prompt(a_rows)
    by_b, repeated_b = _by_prompt(b_rows)
    lines, a_left, identical = [], {}, 0
    for item, row in by_a.items():
        other = by_b.get(item)
        if other is None:
            continue
        if row["completion"] == other["completion"]:
            identical += 1
            continue
        left_is_a = random.Random(f"{seed}/{item}").random() < 0.5
        line: dict[str, Any] = {"item": item, "prompt": row["prompt"]}
        reference = row.get("reference", other.get("reference"))
        if reference is not None:
            line["reference"] = reference
        first, second = (row, other) if left_is_a else (other, row)
        line.update(left=first["completion"], right=second["completion"], dimensions=list(dimensions),
                    preferences={})
        lines.append(line)
        a_left[item] = left_is_a
    only_a = [prompt_text(r["prompt"]) for i, r in by_a.items() if i not in by_b]
    only_b = [prompt_text(r["prompt"]) for i, r in by_b.items() if i not in by_a]
    if not lines:
        why = "none of them differ" if identical else "no prompt is answered by both"
        raise DataError(f"nothing to compare with {b.spec}: {why} ({len(by_a)} and {len(by_b)} prompts)", a.spec)
    key = {"A": a.label, "B": b.label, "sources": {"A": a.spec, "B": b.spec}, "seed": seed,
           "dimensions": list(dimensions), "identical": identical, "only_a": len(only_a), "only_b": len(only_b),
           "a_left": a_left}
    return Pairing(lines, key, only_a, only_b, identical, repeated_a + repeated_b)


def dimension_names(rows: Sequence[dict[str, Any]]) -> list[str]:
    """The rubric dimensions a run scored its answers on (``scores``' keys), in order."""
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row.get("scores") or {}))
    return list(names)


# --- the two files ------------------------------------------------------------------------------------------------


def key_path(path: str | Path) -> Path:
    """The key beside comparison file ``path``: ``<stem>.key.json``."""
    path = Path(path)
    return path.with_name(f"{path.stem}.key.json")


def write_comparison(path: Path, pairing: Pairing) -> None:
    """The key first, then the file (each atomic): a comparison file never exists without its key."""
    atomic_write_text(key_path(path), json.dumps(pairing.key, indent=2, ensure_ascii=False) + "\n")
    write_lines(path, pairing.lines)


def _line_problem(line: Any) -> str | None:
    if not isinstance(line, dict):
        return "a comparison line must be a JSON object"
    for name in ("item", "left", "right"):
        if not isinstance(line.get(name), str):
            return f'missing "{name}" (a string)'
    if "prompt" not in line:
        return 'missing "prompt"'
    dims = line.get("dimensions", [])
    if not isinstance(dims, list) or not all(isinstance(d, str) and d != OVERALL for d in dims):
        return f'"dimensions" must be a list of dimension names (not "{OVERALL}")'
    given = line.get("preferences", {})
    if not isinstance(given, dict):
        return '"preferences" must be an object {labeller: {what: left, right, tie or null}}'
    for name, answers in given.items():
        if not isinstance(answers, dict):
            return f'"preferences"."{name}" must be an object {{what: left, right, tie or null}}'
        for what, choice in answers.items():
            if what != OVERALL and what not in dims:
                return f'"preferences"."{name}": {what!r} is neither "{OVERALL}" nor one of the line\'s dimensions'
            if choice is not None and choice not in CHOICES:
                return f'"preferences"."{name}"."{what}": {choice!r} is not left, right, tie or null'
    return None


def read_comparison(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a comparison file; the first bad one is a ``DataError`` naming its line."""
    return checked_json_lines(path, _line_problem, "the file holds no items to compare", "comparison file")


def read_key(path: str | Path, lines: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The key of comparison file ``path``, checked to name a side for every item."""
    where = key_path(path)
    if not where.is_file():
        raise DataError(f"no key for {Path(path).name}: `rlkit compare` writes it beside the file; without it "
                        "nobody knows which run wrote which answer", str(where))
    try:
        key = json.loads(where.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"not a JSON key file ({exc})", str(where)) from None
    if not isinstance(key, dict) or not isinstance(key.get("a_left"), dict) or not {"A", "B"} <= set(key):
        raise DataError('a key holds "A", "B" and "a_left" {item: true or false}', str(where))
    missing = [line["item"] for line in lines if not isinstance(key["a_left"].get(line["item"]), bool)]
    if missing:
        raise DataError(f"no side for item {missing[0]} ({len(missing)} items): the key belongs to another file",
                        str(where))
    return key


def line_key(line: dict[str, Any]) -> str:
    """A short hash of what the line shows: an answer names it, so a file replaced under a page is noticed."""
    shown = [line.get("prompt"), line["left"], line["right"]]
    return hashlib.sha256(json.dumps(shown, ensure_ascii=False).encode()).hexdigest()[:16]


def apply_preference(line: dict[str, Any], labeller: str, what: str, choice: str | None) -> None:
    """Record ``labeller``'s ``choice`` (None: a skip) on ``what`` (``overall`` or one of the line's dimensions)."""
    if what != OVERALL and what not in line.get("dimensions", []):
        raise AnswerError(f"{what!r} is neither {OVERALL!r} nor one of the item's dimensions "
                          f"({', '.join(line.get('dimensions', [])) or 'none'})", "dimension")
    if choice is not None and choice not in CHOICES:
        raise AnswerError(f"{choice!r} is not left, right or tie (null: skip)", "choice")
    line.setdefault("preferences", {}).setdefault(labeller, {})[what] = choice


def save_preference(path: Path, number: int, key: str | None, apply: Callable[[dict[str, Any]], None]
                    ) -> dict[str, Any]:
    """Under the file's lock: read the comparison file, ``apply(line)`` to item ``number`` (1-based), write it back;
    the line."""
    return update_line(path, number, key, apply, read=read_comparison, keyed=line_key, noun="item",
                       replaced="rebuilt")


def progress(lines: Sequence[dict[str, Any]], labeller: str) -> dict[str, int]:
    """How many items ``labeller`` has given an overall answer (a skip included), of all."""
    done = sum(OVERALL in (line.get("preferences") or {}).get(labeller, {}) for line in lines)
    return {"done": done, "total": len(lines)}
