"""Saving one answer to a labelling file that others may be writing too (``rlkit label``, pages of ``rlkit label
serve``, several labellers at once).

Every save takes the file's lock (``.<name>.lock`` beside it, ``flock``), reads the file again, changes the one line
and replaces the file atomically: a writer that read the file before another's save never writes the old lines back,
so no answer is lost, and a reader sees the old file or the new one, never a part. The format is
``rlkit.evaluation.labelling``'s.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rlkit.core.errors import DataError
from rlkit.evaluation.labelling import is_group, level_problem, read_labelling, tiers_problem, write_lines


class AnswerError(DataError):
    """An answer that cannot be saved: a level outside its range, an unknown line or dimension (HTTP 422)."""


class StaleLineError(DataError):
    """The line the answer was given for is no longer the file's line at that number (HTTP 409)."""


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """Hold the labelling file's lock: one writer at a time, across processes."""
    lock = path.with_name(f".{path.name}.lock")
    with lock.open("a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def line_key(line: dict[str, Any]) -> str:
    """A short hash of what the line asks about: an answer names it, so a file replaced under a page is noticed."""
    what = line["completions"] if is_group(line) else line["completion"]
    return hashlib.sha256(json.dumps([line.get("prompt"), what], ensure_ascii=False).encode()).hexdigest()[:16]


def _settle(answers: dict[str, dict[str, Any]], labels: dict[str, Any], by: dict[str, str], key: str) -> None:
    """``labels[key]``: the first named answer that is not a skip, unless it came from the terminal (no name)."""
    if labels.get(key) is not None and key not in by:
        return
    first = next(((name, given[key]) for name, given in answers.items() if given.get(key) is not None), None)
    labels[key] = None if first is None else first[1]
    if first is None:
        by.pop(key, None)
    else:
        by[key] = first[0]


def apply_label(line: dict[str, Any], dimension: str, level: int | None, labeller: str | None) -> None:
    """Record ``labeller``'s level (None: a skip) for ``dimension`` on a completion line."""
    dims = {d["name"]: d for d in line["dimensions"]}
    if is_group(line):
        raise AnswerError("is a group to rank, not a completion to label", "line")
    if dimension not in dims:
        raise AnswerError(f"{dimension!r} is not one of the line's dimensions ({', '.join(dims)})", "dimension")
    problem = level_problem(dims[dimension], level)
    if problem:
        raise AnswerError(f"{problem} (dimension {dimension})", "level")
    if labeller is None:  # the terminal tool: the anonymous answer, as it always wrote it
        if level is None:
            line["skipped"] = [*(s for s in line.get("skipped") or [] if s != dimension), dimension]
        else:
            line["labels"][dimension] = int(level)
        return
    answers = line.setdefault("labellers", {})
    answers.setdefault(labeller, {})[dimension] = None if level is None else int(level)
    _settle(answers, line["labels"], line.setdefault("labelled_by", {}), dimension)
    if not line["labelled_by"]:
        del line["labelled_by"]


def apply_ranking(line: dict[str, Any], tiers: list[list[int]] | None, labeller: str) -> None:
    """Record ``labeller``'s order (tiers of completion indices, best first; None: a skip) on a group line."""
    if not is_group(line):
        raise AnswerError("is one completion to label, not a group to rank", "line")
    problem = tiers_problem(tiers, len(line["completions"])) if tiers is not None else None
    if problem:
        raise AnswerError(problem, "order")
    rankings = line.setdefault("rankings", {})
    rankings[labeller] = tiers
    first = next(((name, order) for name, order in rankings.items() if order is not None), None)
    line["ranking"], line["ranked_by"] = (None, None) if first is None else (first[1], first[0])
    if first is None:
        del line["ranked_by"]


def update_line(path: Path, number: int, key: str | None, apply: Callable[[dict[str, Any]], None], *,
                read: Callable[[Path], list[dict[str, Any]]], keyed: Callable[[dict[str, Any]], str],
                noun: str, replaced: str) -> dict[str, Any]:
    """Under the file's lock: ``read`` the file, ``apply(line)`` to its ``noun`` ``number`` (1-based), write it back;
    the line. A ``key`` that is not ``keyed(line)`` means the file was ``replaced`` under the page."""
    with file_lock(path):
        lines = read(path)
        if not 1 <= number <= len(lines):
            raise AnswerError(f"no {noun} {number}; the file has {len(lines)}", noun)
        line = lines[number - 1]
        if key is not None and keyed(line) != key:
            raise StaleLineError(f"{noun} changed since the page read it (was the file {replaced}?); reload the page",
                                 f"{path}:{number}")
        apply(line)
        write_lines(path, lines)
        return line


def save_answer(path: Path, number: int, key: str | None, apply: Any) -> dict[str, Any]:
    """Under the file's lock: read the labelling file, ``apply(line)`` to line ``number`` (1-based), write it back;
    the line."""
    return update_line(path, number, key, apply, read=read_labelling, keyed=line_key, noun="line",
                       replaced="replaced")


def answered(line: dict[str, Any], labeller: str | None) -> dict[str, Any]:
    """What ``labeller`` has answered on a completion line: ``{dimension: level or None (skipped)}``; the terminal's
    anonymous answers count for every labeller."""
    given = dict((line.get("labellers") or {}).get(labeller) or {}) if labeller else {}
    by = line.get("labelled_by") or {}
    for name, level in (line.get("labels") or {}).items():
        if level is not None and name not in by:
            given[name] = level
    for name in line.get("skipped") or []:
        given.setdefault(name, None)
    return given


def progress(lines: list[dict[str, Any]], labeller: str | None) -> dict[str, Any]:
    """``labeller``'s progress: completion lines done / total (all dimensions answered), per dimension, and groups."""
    singles = [line for line in lines if not is_group(line)]
    groups = [line for line in lines if is_group(line)]
    per_dimension: dict[str, list[int]] = {}
    done = 0
    for line in singles:
        given = answered(line, labeller)
        for dim in line["dimensions"]:
            counts = per_dimension.setdefault(dim["name"], [0, 0])
            counts[0] += dim["name"] in given
            counts[1] += 1
        done += all(d["name"] in given for d in line["dimensions"])
    ranked = sum(1 for line in groups if labeller in (line.get("rankings") or {}))
    return {"done": done, "total": len(singles),
            "dimensions": {name: {"done": c[0], "total": c[1]} for name, c in per_dimension.items()},
            "groups": {"done": ranked, "total": len(groups)}}
