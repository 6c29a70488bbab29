"""The run's metric history, ``run_dir/metrics.jsonl``: one JSON line per step whatever the logger (``none`` too),
so ``rlkit report`` can plot a run that logged nowhere else."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rlkit.core.atomic import append_lines
from rlkit.core.errors import DataError
from rlkit.data.records import json_lines

METRICS_FILE = "metrics.jsonl"
SUMMARY_FILE = "summary.json"  # what `rlkit fit` writes when it ends (rlkit.runs.sweep.write_job_summary)


def _json_number(value: Any) -> float | None:
    x = float(value)
    return None if math.isnan(x) or math.isinf(x) else x


class MetricsHistory:
    """Appends ``{"step": int, "metrics": {name: float | null}}`` lines; each line is flushed and the file closed
    at once, so a killed run keeps every step it logged."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def append(self, step: int, metrics: Mapping[str, float]) -> None:
        """One line for ``step``; NaN and infinities become null (JSON has no literal for them)."""
        line = json.dumps({"step": int(step), "metrics": {k: _json_number(v) for k, v in metrics.items()}})
        append_lines(self.path, [line])


def read_history(path: str | Path) -> list[tuple[int, dict[str, float]]]:
    """``(step, metrics)`` in step order, the lines of one step merged (a later value wins: a resumed run's).

    A truncated last line (a run killed mid-write) is skipped; any other bad line is a ``DataError`` naming it."""
    path = Path(path)
    if not path.is_file():
        raise DataError("no metric history; it is written by rlkit fit (is this a run directory?)", str(path))
    lines = path.read_text(encoding="utf-8").splitlines()
    by_step: dict[int, dict[str, float]] = {}
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            if n == len(lines):
                break
            raise DataError(f"invalid JSON ({exc.msg} at column {exc.colno})", f"{path}:{n}") from None
        if not isinstance(row, dict) or not isinstance(row.get("step"), int) or not isinstance(row.get("metrics"),
                                                                                               dict):
            raise DataError('expected {"step": <int>, "metrics": {...}}', f"{path}:{n}")
        by_step.setdefault(row["step"], {}).update(
            {k: math.nan if v is None else float(v) for k, v in row["metrics"].items()})
    if not by_step:
        raise DataError("the metric history is empty (the run logged no step)", str(path))
    return sorted(by_step.items())


def read_result_rows(path: Path, required: Sequence[str], what: str) -> list[dict[str, Any]]:
    """The rows of a JSONL results file (none if it does not exist): each a JSON object with the ``required`` keys
    and a ``rubric`` object; a bad line is a ``DataError`` naming ``file:line`` and ``what`` a row should be."""
    if not path.is_file():
        return []
    rows = []
    for n, row in json_lines(path):
        if not isinstance(row, dict) or not set(required) <= set(row) or not isinstance(row.get("rubric"), dict):
            raise DataError(f"not {what} (needs {', '.join(required)})", f"{path}:{n}")
        rows.append(row)
    return rows
