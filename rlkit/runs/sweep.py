"""Sweeps (`rlkit fit -m ...`): each job's W&B run named from its overrides and grouped by sweep, a per-job
``summary.json``, and a sweep summary table (``sweep_summary.md`` and ``.csv``) when the sweep ends."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from rlkit.core.atomic import atomic_write_text
from rlkit.runs.history import SUMMARY_FILE as JOB_SUMMARY

SWEEP_SUMMARY = "sweep_summary"  # .md and .csv in the sweep folder


def _hydra_job() -> Any:
    """The running Hydra config, or None outside a Hydra app (``rlkit calibrate``, tests composing configs)."""
    from hydra.core.hydra_config import HydraConfig

    return HydraConfig.get() if HydraConfig.initialized() else None


def sweep_identity() -> dict[str, str]:
    """W&B ``name`` and ``group`` for a job of a multirun: its overrides and its sweep folder; {} for a single run."""
    from hydra.types import RunMode

    hydra = _hydra_job()
    if hydra is None or hydra.mode != RunMode.MULTIRUN:
        return {}
    return {"name": hydra.job.override_dirname or f"job {hydra.job.num}", "group": str(hydra.sweep.dir)}


def _finite(value: Any) -> float | None:
    # JSON has no NaN: an unscored dimension is written as null
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def write_job_summary(run_dir: Path, summary: dict[str, Any], wall_time_s: float) -> Path:
    """``run_dir/summary.json``: the job's overrides, held-out rewards at the start and end, steps and wall time.

    ``wall_time_s`` is this invocation's; the file's ``wall_time_s`` is the run's across every invocation that trained
    it (the summary's ``earlier_wall_time_s``, as the checkpoint it resumed from saved them, added), beside
    ``wall_time_this_invocation_s`` and ``invocations``. What an earlier invocation spent after its last checkpoint
    is not counted (``rlkit.train.run_position.RunClock``). ``invocations`` is null where the checkpoint predates
    the count: the earlier invocations' time is then unknown and ``wall_time_s`` is this invocation's alone."""
    hydra = _hydra_job()
    invocations = summary.get("invocations", 1)
    data = {
        "job": int(hydra.job.num) if hydra is not None and hydra.job.get("num") is not None else None,
        "overrides": list(hydra.overrides.task) if hydra is not None else [],
        "dimensions": [key for key in summary["end"] if key != "reward"],
        "start": {k: _finite(v) for k, v in summary["start"].items()},
        "end": {k: _finite(v) for k, v in summary["end"].items()},
        "steps": int(summary["steps"]),
        "wall_time_s": round(wall_time_s + float(summary.get("earlier_wall_time_s") or 0.0), 3),
        "wall_time_this_invocation_s": round(wall_time_s, 3),
        "invocations": None if invocations is None else int(invocations),
        "policy_dir": str(summary["policy_dir"]),
        # what the figures mean less than they seem to: no held-out split, no warm start, no learning signal
        "warnings": [*(summary.get("caveats") or {}).values(), *(summary.get("signal") or [])],
        "interrupted": summary.get("interrupted"),  # Ctrl-C: the step it stopped after and the checkpoint there
    }
    return atomic_write_text(run_dir / JOB_SUMMARY, json.dumps(data, indent=2) + "\n")


def collect_job_summaries(sweep_dir: Path) -> list[dict[str, Any]]:
    """Every job's ``summary.json`` under ``sweep_dir``, in job order (a job that failed has none)."""
    rows = []
    for path in sorted(sweep_dir.glob(f"*/{JOB_SUMMARY}")):
        data = json.loads(path.read_text(encoding="utf-8"))
        data["dir"] = path.parent.name
        rows.append(data)
    return sorted(rows, key=lambda r: (r.get("job") is None, r.get("job") or 0, r["dir"]))


def shared_overrides(rows: list[dict[str, Any]]) -> list[str]:
    """The overrides every job has (the sweep's fixed settings); the rest tell the jobs apart."""
    if len(rows) < 2:
        return []
    common = set.intersection(*(set(row.get("overrides", [])) for row in rows))
    return [o for o in rows[0].get("overrides", []) if o in common]


def summary_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """Columns and rows: job, the overrides that differ between jobs, each dimension's final held-out score, the
    reward, steps and wall time."""
    shared = set(shared_overrides(rows))
    dimensions: list[str] = []
    for row in rows:
        dimensions += [d for d in row.get("dimensions", []) if d not in dimensions]
    columns = ["job", "overrides", *dimensions, "reward", "steps", "wall_time_s"]

    def fmt(value: Any) -> str:
        return "" if value is None else f"{value:.4f}"

    table = [[str(row["job"] if row.get("job") is not None else row["dir"]),
              " ".join(o for o in row.get("overrides", []) if o not in shared),
              *(fmt(row["end"].get(d)) for d in dimensions), fmt(row["end"].get("reward")), str(row["steps"]),
              f"{row['wall_time_s']:.1f}"] for row in rows]
    return columns, table


def write_sweep_summary(sweep_dir: Path, rows: list[dict[str, Any]]) -> tuple[Path, Path]:
    """``sweep_summary.md`` and ``sweep_summary.csv`` in the sweep folder."""
    columns, table = summary_table(rows)
    shared = shared_overrides(rows)
    md = [f"Every job: `{' '.join(shared)}`", ""] if shared else []
    md += ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    md += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in table]
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    writer.writerows(table)
    return (atomic_write_text(sweep_dir / f"{SWEEP_SUMMARY}.md", "\n".join(md) + "\n"),
            atomic_write_text(sweep_dir / f"{SWEEP_SUMMARY}.csv", buffer.getvalue()))


def print_sweep_summary(sweep_dir: Path, rows: list[dict[str, Any]], paths: tuple[Path, Path]) -> None:
    from rich.console import Console
    from rich.table import Table

    columns, table = summary_table(rows)
    view = Table(title=f"sweep {sweep_dir}: {len(rows)} jobs, final held-out scores")
    for column in columns:
        view.add_column(column, justify="left" if column in ("job", "overrides") else "right", overflow="fold")
    for row in table:
        view.add_row(*row)
    console = Console(highlight=False, width=None if Console().is_terminal else 160)
    console.print(view)
    shared = shared_overrides(rows)
    if shared:
        console.print(f"every job: {' '.join(shared)}", markup=False)
    console.print(f"wrote {paths[0]} and {paths[1]}", markup=False)


class SweepSummary(Callback):
    """Hydra callback (``hydra.callbacks`` in ``conf/config.yaml``): when a multirun ends, one row per job."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        rows = collect_job_summaries(sweep_dir)
        if not rows:  # every job failed, or a command that writes no job summary
            return
        print_sweep_summary(sweep_dir, rows, write_sweep_summary(sweep_dir, rows))
