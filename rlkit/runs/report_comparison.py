"""Several runs side by side (``rlkit report RUN_A RUN_B ...``): each run's golden-set results per rubric version, first
→ last evaluation, and its held-out split's start → end, in ``report_comparison.md``."""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import DataError, no_such
from rlkit.core.markdown import md_cell, md_number
from rlkit.runs.history import SUMMARY_FILE, read_result_rows

GOLDEN_RESULTS_FILE = "eval/results.jsonl"  # written by the golden-set callback (eval.every > 0); may be absent
COMPARISON_NAME = "report_comparison.md"


@dataclass
class GoldenColumn:
    """One run's golden-set evaluations under one rubric version: its first and last evaluated step."""

    rubric: dict[str, Any]
    judge: str
    prompts: str
    prompts_hash: str
    steps: list[int]
    first: dict[str, float | None]  # dimension (rubric, reward, reference metric) -> mean
    last: dict[str, float | None]
    kinds: dict[str, str]           # dimension -> rubric | reward | reference


def read_golden_results(path: Path) -> list[dict[str, Any]]:
    """The golden-set rows of a run (``eval/results.jsonl``); none when it never evaluated one."""
    return read_result_rows(path, ("rubric", "dimension"), "a golden-set result row")


def rubric_label(rubric: dict[str, Any]) -> str:
    """``name vVERSION (hash12)``, as the golden-set tables name a rubric version."""
    return f"{rubric.get('name', '?')} v{rubric.get('version', '?')} ({str(rubric.get('hash', '?'))[:12]})"


def golden_columns(run_dir: Path) -> list[GoldenColumn]:
    """A run's golden-set results, one column per rubric version it was evaluated under (in file order)."""
    by_rubric: dict[str, list[dict[str, Any]]] = {}
    for row in read_golden_results(run_dir / GOLDEN_RESULTS_FILE):
        by_rubric.setdefault(rubric_label(row["rubric"]), []).append(row)
    columns = []
    for rows in by_rubric.values():
        steps = sorted({r["step"] for r in rows if isinstance(r.get("step"), int)})
        # rows without a step (`rlkit eval` on a folder) sort first; a later row of the same step and dimension wins
        at: dict[Any, dict[str, Any]] = {}
        for r in rows:
            at.setdefault(r.get("step"), {})[r["dimension"]] = r
        order = ([None] if None in at else []) + steps
        first, last = at[order[0]], at[order[-1]]
        columns.append(GoldenColumn(
            rows[-1]["rubric"], str(rows[-1].get("judge", "?")), str(rows[-1].get("prompts", "?")),
            str(rows[-1].get("prompts_hash", "?")), steps,
            {d: r.get("mean") for d, r in first.items()}, {d: r.get("mean") for d, r in last.items()},
            {d: str(r.get("kind", "rubric")) for step_rows in at.values() for d, r in step_rows.items()}))
    return columns


def comparison_table(runs: Sequence[tuple[str, list[GoldenColumn]]]) -> tuple[list[str], list[list[Any]]]:
    """Rows: each run's rubric (name, version, hash), judge, golden set, evaluated steps, then every dimension's
    golden mean at the first → last evaluation; one column per (run, rubric version). A run that evaluated no golden
    set gets a column of dashes."""
    cols: list[tuple[str, GoldenColumn | None]] = []
    for name, found in runs:
        cols += [(name, c) for c in found] or [(name, None)]
    names: dict[str, str] = {}  # dimension -> kind, rubric dimensions first, then the reward, then reference metrics
    for _, c in cols:
        for dim, kind in (c.kinds if c else {}).items():
            names.setdefault(dim, kind)
    rank = {"rubric": 0, "reward": 1, "reference": 2}
    dims = sorted(names, key=lambda d: rank.get(names[d], 0))  # stable: logging order within a kind

    def cell(c: GoldenColumn | None, dim: str) -> str:
        if c is None or (c.first.get(dim) is None and c.last.get(dim) is None):
            return "—"
        if len(c.steps) <= 1:
            return md_number(c.last.get(dim))
        return f"{md_number(c.first.get(dim))} → {md_number(c.last.get(dim))}"

    header = ["", *(name for name, _ in cols)]
    rows: list[list[Any]] = [
        ["rubric", *(rubric_label(c.rubric) if c else "no golden-set evaluation" for _, c in cols)],
        ["judge", *(c.judge if c else "—" for _, c in cols)],
        ["golden set", *(f"{Path(c.prompts).name} ({c.prompts_hash[:12]})" if c else "—" for _, c in cols)],
        ["steps evaluated", *((f"{c.steps[0]} → {c.steps[-1]} ({len(c.steps)})" if c.steps else "—") if c else "—"
                              for _, c in cols)],
    ]
    rows += [[f"{dim} ({names[dim]})", *(cell(c, dim) for _, c in cols)] for dim in dims]
    return header, rows


def render_comparison(runs: Sequence[tuple[str, list[GoldenColumn]]], run_dirs: Sequence[Path]) -> str:
    """The comparison markdown: the table, and what does and does not compare across its columns."""
    columns = [c for _, found in runs for c in found]
    header, rows = comparison_table(runs)
    lines = ["# Golden-set results by run and rubric version", "",
             "Greedy completions on the golden set (`eval.every`, `eval/results.jsonl` of each run), mean at the "
             "run's first → last evaluation. Rubric dimensions and `reward` are scored under each run's own rubric "
             "version, so they compare across runs only where the version is the same; reference metrics "
             "(`exact_match`, `numeric_match`, ...) do not depend on the rubric and always compare.", "",
             "Runs: " + ", ".join(f"`{md_cell(d)}`" for d in run_dirs), ""]
    if len({c.prompts_hash for c in columns}) > 1:
        lines += ["**The runs were evaluated on different golden sets** (see the hashes): their numbers do not "
                  "compare.", ""]
    if len({rubric_label(c.rubric) for c in columns}) > 1:
        lines += ["The runs were judged under different rubric versions (compare them with "
                  "`rlkit rubric diff OLD.yaml NEW.yaml`).", ""]
    lines += ["| " + " | ".join(md_cell(h) for h in header) + " |", "|---|" + "--:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(md_cell(v) for v in row) + " |" for row in rows]
    header, rows = heldout_table([(label, d) for (label, _), d in zip(runs, run_dirs, strict=True)])
    lines += ["", "## Held-out split and the run", "",
              "Each run's `summary.json`: its held-out split's mean at the start → the end (the run's own split and "
              "rubric: numbers compare across runs only where both are the same), steps, wall time, and what the "
              "run warned its figures mean less than they seem to.", "",
              "| " + " | ".join(md_cell(h) for h in header) + " |", "|---|" + "--:|" * (len(header) - 1)]
    lines += ["| " + " | ".join(md_cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def heldout_table(runs: Sequence[tuple[str, Path]]) -> tuple[list[str], list[list[str]]]:
    """Rows (held-out reward and dimensions start → end, steps, wall time, warnings, interrupted) by run, read from
    each run's ``summary.json``; a run without one gets a column of dashes."""
    summaries = []
    for _, run_dir in runs:
        try:
            summaries.append(json.loads((run_dir / SUMMARY_FILE).read_text(encoding="utf-8")))
        except (OSError, ValueError):
            summaries.append({})
    names = ["reward"] + [d for s in summaries for d in s.get("dimensions") or [] if d != "reward"]
    names = list(dict.fromkeys(names))

    def moved(summary: dict[str, Any], name: str) -> str:
        start, end = (summary.get("start") or {}).get(name), (summary.get("end") or {}).get(name)
        return "—" if start is None or end is None else f"{start:.3f} → {end:.3f}"

    rows = [[f"held-out {name}", *(moved(s, name) for s in summaries)] for name in names]
    rows.append(["steps", *(str(s.get("steps", "—")) for s in summaries)])
    rows.append(["wall time", *("—" if s.get("wall_time_s") is None else f"{s['wall_time_s']:.0f} s"
                                for s in summaries)])
    rows.append(["warnings", *("; ".join(s.get("warnings") or []) or ("none" if s else "—") for s in summaries)])
    rows.append(["interrupted", *(("—" if not s else "no") if not s.get("interrupted")
                                  else f"after step {s['interrupted'].get('step')}" for s in summaries)])
    return ["", *(label for label, _ in runs)], rows


def default_comparison_path(run_dirs: Sequence[Path]) -> Path:
    """``report_comparison.md`` in the runs' deepest common folder."""
    return Path(os.path.commonpath([str(d.resolve()) for d in run_dirs])) / COMPARISON_NAME


def write_comparison(run_dirs: Sequence[str | Path], output: str | Path | None = None) -> Path:
    """Write the golden-set comparison of several runs (default: :func:`default_comparison_path`); its path."""
    dirs = [Path(d) for d in run_dirs]
    for d in dirs:
        if not d.is_dir():
            raise DataError(no_such(d, "run directory", directory=True), str(d))
    names = [d.name for d in dirs]
    # two runs of the same name in different folders: name them by their last two path parts
    labels = ["/".join(d.resolve().parts[-2:]) if names.count(d.name) > 1 else d.name for d in dirs]
    runs = [(label, golden_columns(d)) for label, d in zip(labels, dirs, strict=True)]
    path = Path(output) if output is not None else default_comparison_path(dirs)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, render_comparison(runs, dirs))
    return path
