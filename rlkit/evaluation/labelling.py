"""Labelling files: completions from a run, waiting for a human's level on each rubric dimension.

Written by the ``label_sample`` monitor (every N steps of ``rlkit fit``, the run's own completions) and by ``rlkit
calibrate sample`` (a stratified set from a run's ``samples.jsonl``); filled in by ``rlkit label``; read by ``rlkit
calibrate`` as its labels file. One JSON object per line:

* ``prompt``, ``completion``, ``reference`` (optional): what is labelled; the prompt record's other fields (a
  ``match`` check's ``field:``) where ``rlkit calibrate sample`` found them, for the judge of ``rlkit calibrate``;
* ``step``: the training step that sampled the completion; ``window``: the first step of the step window it is
  reported under (the monitor's measurement step; a step bin for ``calibrate sample``);
* ``dimensions``: the rubric's dimensions as the labeller needs them: ``name``, ``description``, ``type``,
  ``range`` and ``anchors`` (level → text), so the file can be labelled without the rubric at hand;
* ``rubric``: the rubric's name, version and hash; ``judge`` and ``reward``: what the run's judge said (never shown
  to the labeller: it would anchor the human on the judge);
* ``labels``: ``{dimension: level or null}``, null until labelled; ``skipped``: dimensions the labeller passed on.

Several labellers (``rlkit label serve``, where each names themself) add, per line:

* ``labellers``: ``{name: {dimension: level or null}}``, each labeller's own answers (null: that labeller skipped);
* ``labelled_by``: ``{dimension: name}``, whose answer ``labels`` holds: the first labeller's (in answer order)
  that gave a level. A level in ``labels`` that no ``labelled_by`` names came from ``rlkit label`` (no name): it is
  kept as is, and counts as answered for everyone, so the terminal and the page can take turns on one file.

``rlkit calibrate`` compares ``labels`` with the judge, and the labellers with each other.

A **group line** (a ranking task: the completions of one prompt side by side) has ``completions`` (a list of at
least two texts) instead of ``completion``, the same ``prompt``, ``reference``, ``step``, ``window``, ``rubric`` and
``dimensions`` (shown as the criteria to rank by), and:

* ``ranking``: the order, best first, as tiers of indices into ``completions``: ``[[2], [0, 3], [1]]`` says
  completion 2 is best, 0 and 3 tie, 1 is worst; null until ranked. ``ranked_by``: the labeller's name;
* ``rankings``: ``{name: tiers or null}``, each labeller's own order (null: skipped), as ``labellers`` is.

``rlkit calibrate judge=ranking`` reads the rankings; the per-dimension calibration leaves group lines out.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import ConfigError
from rlkit.core.rubric import Rubric
from rlkit.data.records import checked_json_lines, prompt_text

LABELLING_DIR = "labelling"
LABELLER_NAME_LIMIT = 80  # characters of a labeller's name, on the page and in the terminal


def dimension_info(rubric: Rubric) -> list[dict[str, Any]]:
    """What a labeller needs of each dimension: range and anchor texts (levels as text keys, as JSON has them)."""
    return [{"name": d.name, "description": d.description, "type": d.type, "range": [d.low, d.high],
             "anchors": {f"{level:g}": anchor.text for level, anchor in sorted(d.anchors.items())}}
            for d in rubric.dimensions]


def _number(x: Any) -> float | None:
    if x is None:
        return None
    value = float(x)
    return None if math.isnan(value) else round(value, 6)


# the keys of a labelling line itself: a prompt record's field of the same name is not copied into it
LINE_KEYS = frozenset({"prompt", "completion", "completions", "step", "window", "rubric", "judge", "reward", "rewards",
                       "dimensions", "labels", "skipped", "labellers", "labelled_by", "ranking", "rankings",
                       "ranked_by"})


def labelling_line(*, prompt: Any, completion: str, rubric: Rubric, step: int, window: int,
                   judge: dict[str, Any] | None = None, reward: Any = None, reference: Any = None,
                   record: dict[str, Any] | None = None) -> dict[str, Any]:
    """One line of a labelling file, every label still null. ``record``: the prompt record's other fields
    (``reference``, a check's ``field:``), kept on the line for the judge of ``rlkit calibrate``."""
    line: dict[str, Any] = {"prompt": prompt if isinstance(prompt, str) else prompt_text(prompt),
                            "completion": completion}
    if reference is None and record:
        reference = record.get("reference")
    if reference is not None:
        line["reference"] = reference
    line.update({k: v for k, v in (record or {}).items() if k not in LINE_KEYS and k != "reference"})
    line.update({"step": int(step), "window": int(window), "rubric": rubric.identity(),
                 "judge": {k: _number(v) for k, v in (judge or {}).items()}, "reward": _number(reward),
                 "dimensions": dimension_info(rubric), "labels": {d.name: None for d in rubric.dimensions}})
    return line


def group_line(*, prompt: Any, completions: Sequence[str], rubric: Rubric, step: int, window: int,
               reference: Any = None, rewards: Sequence[Any] | None = None) -> dict[str, Any]:
    """One group line of a labelling file (a ranking task), not yet ranked; ``rewards``: the run's, never shown."""
    line: dict[str, Any] = {"prompt": prompt if isinstance(prompt, str) else prompt_text(prompt),
                            "completions": list(completions)}
    if reference is not None:
        line["reference"] = reference
    line.update({"step": int(step), "window": int(window), "rubric": rubric.identity(),
                 "rewards": [_number(r) for r in rewards] if rewards is not None else None,
                 "dimensions": dimension_info(rubric), "ranking": None})
    return line


def write_lines(path: Path, lines: Sequence[dict[str, Any]]) -> Path:
    """The whole file at once (atomic): a labeller's save never leaves half a file."""
    return atomic_write_text(path, "".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))


def is_group(line: dict[str, Any]) -> bool:
    """A group line (a ranking task) rather than one completion to label per dimension."""
    return "completions" in line and "completion" not in line


def tiers_problem(tiers: Any, n: int) -> str | None:
    """Why ``tiers`` is not an order of ``n`` completions (lists of indices, best first, each index once)."""
    if not isinstance(tiers, list) or not tiers or not all(isinstance(t, list) and t for t in tiers):
        return "must be a list of tiers, best first, each a non-empty list of completion indices"
    flat = [i for tier in tiers for i in tier]
    if not all(isinstance(i, int) and not isinstance(i, bool) for i in flat) or sorted(flat) != list(range(n)):
        return f"must hold each completion index 0..{n - 1} exactly once, got {json.dumps(tiers)}"
    return None


def _check_group(line: dict[str, Any]) -> str | None:
    texts = line.get("completions")
    if not isinstance(texts, list) or len(texts) < 2 or not all(isinstance(t, str) for t in texts):
        return '"completions": a group needs a list of at least two texts'
    for key, tiers in [("ranking", line.get("ranking")),
                       *((f"rankings.{name}", t) for name, t in (line.get("rankings") or {}).items())]:
        problem = tiers_problem(tiers, len(texts)) if tiers is not None else None
        if problem:
            return f'"{key}": {problem}'
    return None


def _check_line(line: Any) -> str | None:
    if not isinstance(line, dict):
        return "expected a JSON object"
    if is_group(line):
        group_problem = _check_group(line)
        if group_problem:
            return group_problem
    elif not isinstance(line.get("completion"), str):
        return 'needs "completion" (text), or "completions" (a group to rank)'
    dims = line.get("dimensions")
    if not isinstance(dims, list) or not dims or not all(
            isinstance(d, dict) and isinstance(d.get("name"), str) and isinstance(d.get("range"), list)
            and len(d["range"]) == 2 and all(isinstance(v, int | float) for v in d["range"]) for d in dims):
        return 'needs "dimensions": [{"name", "range": [low, high], "anchors"}, ...] (as `rlkit calibrate sample` ' \
               "and the label_sample monitor write them)"
    if is_group(line):
        return None
    labels = line.get("labels")
    if not isinstance(labels, dict):
        return 'needs "labels": {"<dimension>": level or null}'
    names = {d["name"]: d for d in dims}
    answers = [("labels", labels)]
    by = line.get("labellers") or {}
    if not isinstance(by, dict) or not all(isinstance(a, dict) for a in by.values()):
        return 'needs "labellers": {"<name>": {"<dimension>": level or null}}'
    answers += [(f"labellers.{name}", given) for name, given in by.items()]
    for where, given in answers:
        for key, value in given.items():
            problem = level_problem(names.get(key), value) if key in names else \
                f"not one of the line's dimensions ({', '.join(names)})"
            if problem:
                return f'"{where}.{key}": {problem}'
    return None


def level_problem(dim: dict[str, Any] | None, value: Any) -> str | None:
    """Why ``value`` is not a whole level of dimension ``dim`` (a line's ``dimensions`` entry); None (not labelled)
    passes."""
    if dim is None:
        return "no such dimension"
    low, high = dim["range"]
    if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                              or not low <= value <= high or value != int(value)):
        return f"{json.dumps(value)} is not a whole level in [{low:g}, {high:g}]"
    return None


def read_labelling(path: str | Path) -> list[dict[str, Any]]:
    """The lines of a labelling file; the first bad one is a ``DataError`` naming its line."""
    return checked_json_lines(path, _check_line, "the file holds no lines to label", "labelling file")


def pending(line: dict[str, Any]) -> list[dict[str, Any]]:
    """The line's dimensions still waiting for a level (neither labelled nor skipped); none for a group line, which
    is ranked on the page (``rlkit label serve``)."""
    if is_group(line):
        return []
    skipped = set(line.get("skipped") or [])
    labels = line.get("labels") or {}
    return [d for d in line["dimensions"] if labels.get(d["name"]) is None and d["name"] not in skipped]


def labelled(lines: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The lines with at least one level: only these are worth a judge's call in ``rlkit calibrate``."""
    return [line for line in lines if any(v is not None for v in (line.get("labels") or {}).values())]


def file_and_options(args: Sequence[str], allowed: Sequence[str], whole_numbers: Sequence[str], command: str,
                     usage: str) -> tuple[Path, dict[str, str]]:
    """``rlkit label`` and ``rlkit label serve``'s command line: one labelling file and ``key=value`` options among
    ``allowed``, those in ``whole_numbers`` digits only; anything else a ``ConfigError`` naming ``command key``."""
    files = [a for a in args if "=" not in a]
    if len(files) != 1:
        raise ConfigError(usage, command)
    options = dict(a.split("=", 1) for a in args if "=" in a)
    for key in options:
        if key not in allowed:
            raise ConfigError(f"unknown option; {usage}", f"{command} {key}")
    for key in whole_numbers:
        if key in options and not options[key].isdigit():
            raise ConfigError(f"must be a whole number >= 0, got {options[key]!r}", f"{command} {key}")
    return Path(files[0]), options
