"""The held-out prompts' greedy answers of a run, before and after training: ``<run dir>/heldout/start.jsonl`` and
``<run dir>/heldout/end.jsonl``, written by ``rlkit fit`` after each of its two held-out evaluations and read by
``rlkit compare``.

One JSON object per held-out prompt, in the split's order: ``step`` (0 for the start, the last trained step for the
end), ``prompt`` (text or chat messages, as in the record), ``reference`` (when the record has one), ``completion``
(the policy's greedy answer), ``reward`` and ``scores`` (``{dimension: raw score or null}``) as the held-out table
summed them. A run without a held-out split (``data.heldout_fraction=0``) answers its first training prompts instead,
as its start/end table does.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import DataError
from rlkit.data.records import checked_json_lines

HELDOUT_DIR = "heldout"
WHEN = ("start", "end")


def heldout_answers_path(run_dir: str | Path, when: str) -> Path:
    """Where a run keeps its ``when`` (``start`` or ``end``) held-out answers."""
    return Path(run_dir) / HELDOUT_DIR / f"{when}.jsonl"


def write_heldout_answers(run_dir: str | Path, when: str, rows: Sequence[dict[str, Any]]) -> Path:
    """The whole file at once (atomic): a run stopped while writing leaves the old file or none."""
    text = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
    return atomic_write_text(heldout_answers_path(run_dir, when), text)


def answer_rows(records: Sequence[dict[str, Any]], completions: Sequence[str], rewards: Sequence[float],
                scores: Sequence[Sequence[float]], dimensions: Sequence[str], step: int) -> list[dict[str, Any]]:
    """The file's lines for one evaluation: each record's prompt (and reference), its answer, reward and scores."""
    from rlkit.core.stats import json_number  # torch: only where a run writes, never where `rlkit compare` reads

    rows = []
    for record, completion, reward, row in zip(records, completions, rewards, scores, strict=True):
        line: dict[str, Any] = {"step": step, "prompt": record["prompt"]}
        if record.get("reference") is not None:
            line["reference"] = record["reference"]
        line.update(completion=completion, reward=json_number(float(reward)),
                    scores={name: json_number(float(v)) for name, v in zip(dimensions, row, strict=True)})
        rows.append(line)
    return rows


def _problem(row: Any) -> str | None:
    if not isinstance(row, dict):
        return "an answer line must be a JSON object"
    prompt = row.get("prompt")
    if not (isinstance(prompt, str) and prompt.strip()) and not (isinstance(prompt, list) and prompt):
        return 'missing "prompt" (text or chat messages)'
    if not isinstance(row.get("completion"), str):
        return 'missing "completion" (a string)'
    return None


def read_answers(path: str | Path) -> list[dict[str, Any]]:
    """The answer lines of one file (``prompt`` and ``completion`` each); a bad line is a ``DataError`` naming it."""
    return checked_json_lines(path, _problem, "the file holds no answers")


def read_heldout_answers(run_dir: str | Path, when: str) -> list[dict[str, Any]]:
    """A run's ``when`` held-out answers; a ``DataError`` naming the run or the file when there are none."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise DataError("no such run directory", str(run_dir))
    path = heldout_answers_path(run_dir, when)
    if not path.is_file():
        raise DataError(f"no held-out answers ({HELDOUT_DIR}/{when}.jsonl): `rlkit fit` writes them from this "
                        "version on; a run of an older version, or one stopped before its first evaluation, has "
                        "none", str(run_dir))
    return read_answers(path)
