"""A run's greedy answers to its held-out prompts at each held-out evaluation, ``<run dir>/heldout_samples.jsonl``:
appended by ``rlkit fit`` at the start, at every ``heldout_every`` evaluation and at the end; read by ``rlkit compare``
(the first evaluation is the run's start, the last its end) and by ``rlkit report`` (what the model said before and
after, on the dimensions that moved).

One JSON object per held-out prompt per evaluation, an evaluation's lines together in the split's order: ``step``
(0 for the start), ``prompt`` (text or chat messages, as in the record), ``reference`` (when the record has one),
``completion`` (the policy's greedy answer), ``reward`` and ``scores`` (``{dimension: raw score or null}``) as the
held-out table summed them, and ``record`` (the record's fields besides its prompt, as ``samples.jsonl`` keeps them:
what a check's ``field:`` reads, so the answers can be scored again under another rubric with `rlkit score`). A
run without a held-out split (``data.heldout_fraction=0``) answers its first training prompts instead, as its
start/end table does. A run resumed with ``ckpt_path=`` writes into a new folder; its file starts with the earlier
run's evaluations up to the checkpoint's step, so one file holds the whole run.

Runs of versions before this file kept the start and the end alone, as ``heldout/start.jsonl`` and
``heldout/end.jsonl`` (the same lines); they are still read.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import DataError, no_such
from rlkit.data.records import checked_json_lines, prompt_text

SAMPLES_FILE = "heldout_samples.jsonl"
OLD_DIR = "heldout"  # heldout/start.jsonl and heldout/end.jsonl of earlier versions
WHEN = ("start", "end")
PAIRS_PER_DIMENSION = 3  # before/after pairs `rlkit report` shows per dimension that moved


@dataclass(frozen=True)
class HeldoutEvaluation:
    """One held-out evaluation: its step and its answer lines."""

    step: int
    rows: list[dict[str, Any]]


def heldout_samples_path(run_dir: str | Path) -> Path:
    """Where a run keeps its held-out answers."""
    return Path(run_dir) / SAMPLES_FILE


def answer_rows(records: Sequence[dict[str, Any]], completions: Sequence[str], rewards: Sequence[float],
                scores: Sequence[Sequence[float]], dimensions: Sequence[str], step: int) -> list[dict[str, Any]]:
    """The file's lines for one evaluation: each record's prompt (and reference), its answer, reward and scores, and
    the record's other fields."""
    from rlkit.core.stats import json_number  # torch: only where a run writes, never where `rlkit compare` reads

    rows = []
    for record, completion, reward, row in zip(records, completions, rewards, scores, strict=True):
        line: dict[str, Any] = {"step": step, "prompt": record["prompt"]}
        if record.get("reference") is not None:
            line["reference"] = record["reference"]
        line.update(completion=completion, reward=json_number(float(reward)),
                    scores={name: json_number(float(v)) for name, v in zip(dimensions, row, strict=True)},
                    record={k: v for k, v in record.items() if k != "prompt"})
        rows.append(line)
    return rows


def _lines(rows: Sequence[dict[str, Any]]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def append_heldout_samples(run_dir: str | Path, rows: Sequence[dict[str, Any]]) -> bool:
    """Add one evaluation's lines (all of one step) to the run's file; whether they were written. An evaluation at a
    step the file holds already is not written again: the end's, at the step of the last ``heldout_every`` one, and a
    resumed run's start, after the earlier run's: the same weights answer the same. The whole file is rewritten
    atomically, so a run stopped while writing leaves every earlier evaluation whole."""
    if not rows:
        return False
    path = heldout_samples_path(run_dir)
    old = path.read_text(encoding="utf-8") if path.is_file() else ""
    if old and rows[0]["step"] in {e.step for e in read_heldout_samples(path)}:
        return False
    atomic_write_text(path, old + _lines(rows))
    return True


def carry_heldout_samples(checkpoint: str | Path, run_dir: str | Path, step: int) -> list[int]:
    """Start ``run_dir``'s file with the evaluations of the run that saved ``checkpoint`` (its folder holds
    ``checkpoints/``), up to the checkpoint's ``step``: later ones were of training the resumed run does again. The
    steps carried; none when that run kept no file (an older version, or a checkpoint moved out of its run)."""
    checkpoint = Path(checkpoint)
    earlier = checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent
    source = heldout_samples_path(earlier)
    if not source.is_file():
        return []
    kept = [e for e in read_heldout_samples(source) if e.step <= step]
    if kept or source.resolve() == heldout_samples_path(run_dir).resolve():
        atomic_write_text(heldout_samples_path(run_dir), _lines([row for e in kept for row in e.rows]))
    return [e.step for e in kept]


def _problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return "an answer line must be a JSON object"
    prompt = row.get("prompt")
    if not (isinstance(prompt, str) and prompt.strip()) and not (isinstance(prompt, list) and prompt):
        return 'missing "prompt" (text or chat messages)'
    if not isinstance(row.get("completion"), str):
        return 'missing "completion" (a string)'
    return None


def _sample_problem(row: Any) -> str | None:
    if isinstance(row, dict) and (not isinstance(row.get("step"), int) or isinstance(row.get("step"), bool)):
        return 'missing "step" (the evaluation\'s training step, an integer)'
    return _problem(row)


def read_answers(path: str | Path) -> list[dict[str, Any]]:
    """The answer lines of one file (``prompt`` and ``completion`` each); a bad line is a ``DataError`` naming it."""
    return checked_json_lines(path, _problem, "the file holds no answers")


def read_heldout_samples(path: str | Path) -> list[HeldoutEvaluation]:
    """The evaluations of a ``heldout_samples.jsonl`` in step order (a later evaluation of a step replaces an
    earlier one); a bad line is a ``DataError`` naming it."""
    rows = checked_json_lines(path, _sample_problem, "the file holds no answers")
    by_step: dict[int, list[dict[str, Any]]] = {}
    previous = None
    for row in rows:
        if row["step"] != previous:  # an evaluation's lines are together: a new step starts a new one
            by_step[row["step"]] = []
            previous = row["step"]
        by_step[row["step"]].append(row)
    return [HeldoutEvaluation(step, by_step[step]) for step in sorted(by_step)]


def run_evaluations(run_dir: str | Path) -> list[HeldoutEvaluation]:
    """A run's held-out evaluations in step order: its ``heldout_samples.jsonl``, else (a run of an older version)
    its start and end files; none when the run kept no answers."""
    path = heldout_samples_path(run_dir)
    if path.is_file():
        return read_heldout_samples(path)
    found = []
    for when in WHEN:
        old = Path(run_dir) / OLD_DIR / f"{when}.jsonl"
        if old.is_file():
            rows = read_answers(old)
            found.append(HeldoutEvaluation(rows[0].get("step", 0) if isinstance(rows[0].get("step"), int) else 0,
                                           rows))
    return found


def read_heldout_answers(run_dir: str | Path, when: str) -> list[dict[str, Any]]:
    """A run's ``when`` (``start``: its first evaluation, ``end``: its last) held-out answers; a ``DataError`` naming
    the run or the file when there are none."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataError(no_such(run_dir, "run directory", directory=True), str(run_dir))
    evaluations = run_evaluations(run_dir)
    if not evaluations:
        raise DataError(f"no held-out answers ({SAMPLES_FILE}): `rlkit fit` writes them from this version on; a run "
                        "of an older version, or one stopped before its first evaluation, has none", str(run_dir))
    if when == "end" and len(evaluations) == 1:
        raise DataError(f"{SAMPLES_FILE} holds only the evaluation at step {evaluations[0].step} (the run stopped "
                        "before another): nothing after training to compare", str(heldout_samples_path(run_dir)))
    return evaluations[0 if when == "start" else -1].rows


# --- before and after, for the run report -----------------------------------------------------------------------


@dataclass(frozen=True)
class BeforeAfter:
    """One held-out prompt's answers at the first and the last evaluation, picked for ``dimension``."""

    dimension: str
    prompt: Any
    before: dict[str, Any]  # the answer line
    after: dict[str, Any]


def _score(row: dict[str, Any], dimension: str) -> float | None:
    value = (row.get("scores") or {}).get(dimension)
    return float(value) if isinstance(value, (int, float)) and not math.isnan(float(value)) else None


def dimension_means(rows: Sequence[dict[str, Any]], dimensions: Sequence[str]) -> dict[str, float | None]:
    """Each dimension's mean over the lines that scored it (None where none did)."""
    out: dict[str, float | None] = {}
    for name in dimensions:
        scored = [s for s in (_score(r, name) for r in rows) if s is not None]
        out[name] = sum(scored) / len(scored) if scored else None
    return out


def before_after(first: Sequence[dict[str, Any]], last: Sequence[dict[str, Any]],
                 per_dimension: int = PAIRS_PER_DIMENSION) -> list[BeforeAfter]:
    """For each dimension whose mean moved from ``first`` to ``last``, the ``per_dimension`` prompts whose score on
    it moved most the same way (in split order among equals); a dimension that did not move gets none."""
    names = list(dict.fromkeys(name for row in [*first, *last] for name in row.get("scores") or {}))
    before_means, after_means = dimension_means(first, names), dimension_means(last, names)
    after_by_prompt: dict[str, dict[str, Any]] = {}
    for row in last:
        after_by_prompt.setdefault(prompt_text(row["prompt"]), row)
    pairs, seen = [], set()
    for row in first:
        key = prompt_text(row["prompt"])
        if key not in seen and key in after_by_prompt:
            seen.add(key)
            pairs.append((row, after_by_prompt[key]))
    out = []
    for name in names:
        a, b = before_means[name], after_means[name]
        if a is None or b is None or math.isclose(a, b, abs_tol=1e-9):
            continue
        sign = 1.0 if b > a else -1.0
        moved = []
        for i, (before, after) in enumerate(pairs):
            x, y = _score(before, name), _score(after, name)
            if x is not None and y is not None and sign * (y - x) > 0:
                moved.append((-sign * (y - x), i, before, after))
        out += [BeforeAfter(name, before["prompt"], before, after)
                for _, _, before, after in sorted(moved, key=lambda m: m[:2])[:per_dimension]]
    return out
