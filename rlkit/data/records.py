"""Prompt records: JSONL files checked line by line, and the built-in synthetic task."""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from rlkit.core.errors import DataError

MAX_REPORTED_LINES = 10


def _prompt_problem(prompt: Any, field: str = "prompt") -> str | None:
    """Why ``prompt`` (the record's ``field``) is not non-empty text or chat messages; None when it is."""
    if isinstance(prompt, str):
        return None if prompt.strip() else f'"{field}" is empty'
    if isinstance(prompt, list) and prompt and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
        for m in prompt
    ):
        return None
    return f'"{field}" must be text or a list of chat messages {{role, content}}'


def _completion_problem(record: dict[str, Any]) -> str | None:
    if "completions" in record:
        comps = record["completions"]
        if not isinstance(comps, list) or not comps or not all(isinstance(c, str) for c in comps):
            return '"completions" must be a non-empty list of strings'
        return None
    if "completion" not in record:
        return 'missing "completion" (or "completions")'
    if not isinstance(record["completion"], str):
        return '"completion" must be a string'
    return None


def read_jsonl(path: str | Path, *, need_completions: bool = False) -> list[dict[str, Any]]:
    """Read prompt records; every bad line is reported with file and line number, none skipped.

    A record is a JSON object with ``prompt`` (text or chat messages) and any other fields
    (``reference`` for match checks). With ``need_completions`` each record also carries
    ``completion`` or ``completions``.
    """
    path = Path(path)
    if not path.is_file():
        raise DataError("no such data file", str(path))
    problems: list[tuple[int, str]] = []
    records: list[dict[str, Any]] = []
    with path.open("rb") as fh:
        for line_no, raw in enumerate(fh, start=1):
            try:
                # Some editors start a UTF-8 file with a byte-order mark; it is not part of the JSON.
                text = raw.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                problems.append((line_no, f"not UTF-8 (byte {exc.start})"))
                continue
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as exc:
                problems.append((line_no, f"invalid JSON ({exc.msg} at column {exc.colno})"))
                continue
            if not isinstance(record, dict):
                problems.append((line_no, f"a record must be a JSON object, got {type(record).__name__}"))
                continue
            if "prompt" not in record:
                problems.append((line_no, 'missing "prompt"'))
                continue
            problem = _prompt_problem(record["prompt"]) or (
                _completion_problem(record) if need_completions else None
            )
            if problem:
                problems.append((line_no, problem))
                continue
            records.append(record)
    if problems:
        shown = "; ".join(f"line {n}: {p}" for n, p in problems[:MAX_REPORTED_LINES])
        more = f"; and {len(problems) - MAX_REPORTED_LINES} more" if len(problems) > MAX_REPORTED_LINES else ""
        if len(problems) == 1:
            raise DataError(problems[0][1], f"{path}:{problems[0][0]}")
        raise DataError(f"{len(problems)} bad lines: {shown}{more}", str(path))
    if not records:
        raise DataError("the file holds no records", str(path))
    return records


def prompt_text(prompt: str | Sequence[dict[str, str]]) -> str:
    """Plain text of a prompt, for display and for judges that read the prompt."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m['role']}: {m['content']}" for m in prompt)


def arithmetic_task(num_prompts: int, seed: int, max_operand: int = 20) -> list[dict[str, Any]]:
    """The default synthetic task: small sums with a numeric ``reference`` a rule judge can check."""
    rng = random.Random(seed)
    records = []
    for i in range(num_prompts):
        a, b = rng.randint(0, max_operand), rng.randint(0, max_operand)
        records.append({"id": f"arith-{i}", "prompt": f"{a}+{b}=", "reference": str(a + b)})
    return records


SYNTHETIC_TASKS = {"arithmetic": arithmetic_task}


def disjoint_task_records(task: str, count: int, seed: int, exclude: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """``count`` draws of the synthetic ``task`` under ``seed`` whose prompts are none of ``exclude``'s: demonstrations
    a warm start may learn from without seeing a run's training or held-out prompts."""
    taken = {json.dumps(r["prompt"], sort_keys=True) for r in exclude}
    return [r for r in SYNTHETIC_TASKS[task](count, seed) if json.dumps(r["prompt"], sort_keys=True) not in taken]
