"""``rlkit calibrate sample <run dir> groups=20``: groups of a run's completions to rank, drawn from ``samples.jsonl``.

A group is the completions the run logged for one prompt at one step (at least two distinct ones): what a ranking
judge saw side by side. Groups are drawn round-robin over ``step_bins`` bins of the logged steps (each a step window,
named by its first step), seeded (``seed``), and written atomically as group lines of the labelling format
(``rlkit.evaluation.labelling``), by default to ``<run dir>/labelling/ranking_set.jsonl``, to be ranked on the page of
``rlkit label serve`` and read by ``rlkit calibrate judge=ranking``.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlkit.core.errors import DataError, no_such
from rlkit.core.rubric import Rubric
from rlkit.evaluation.calibration_sample import (
    RECORD_KEY,
    SAMPLES_FILE,
    attach_records,
    read_samples,
    run_rubric,
    saved_config,
    whole_number_options,
)
from rlkit.evaluation.labelling import LABELLING_DIR, group_line, write_lines

SET_NAME = "ranking_set.jsonl"


@dataclass(frozen=True)
class GroupOptions:
    groups: int
    seed: int = 0
    step_bins: int = 4
    output: Path | None = None
    rubric: str | None = None


def group_options(args: dict[str, str]) -> GroupOptions:
    """``groups=``, ``seed=``, ``step_bins=``, ``output=``, ``rubric=`` of the command line."""
    ints = whole_number_options(args, ("groups", "seed", "step_bins"), ("output", "rubric"),
                                "unknown option with groups=")
    output = Path(args["output"]).expanduser() if args.get("output") else None
    return GroupOptions(**ints, output=output, rubric=args.get("rubric"))


def draw_groups(rows: list[dict[str, Any]], rubric: Rubric, options: GroupOptions) -> list[dict[str, Any]]:
    """Up to ``options.groups`` group lines, round-robin over the step bins (see the module docstring)."""
    rng = random.Random(options.seed)
    by_prompt: dict[tuple[int, str], dict[str, dict[str, Any]]] = {}
    for row in rows:  # a completion logged twice is one completion of its group
        key = (row["step"], json.dumps(row["prompt"], sort_keys=True))
        by_prompt.setdefault(key, {}).setdefault(row["completion"], row)
    groups = {key: list(members.values()) for key, members in by_prompt.items() if len(members) >= 2}
    steps = sorted({step for step, _ in groups})
    bins = min(options.step_bins, len(steps)) or 1
    step_bin = {step: i * bins // len(steps) for i, step in enumerate(steps)}
    first_step: dict[int, int] = {}
    for step in steps:
        first_step.setdefault(step_bin[step], step)
    pools: dict[int, list[tuple[int, str]]] = {}
    for key in sorted(groups):
        pools.setdefault(step_bin[key[0]], []).append(key)
    for pool in pools.values():
        rng.shuffle(pool)
    picked: list[tuple[int, tuple[int, str]]] = []
    while len(picked) < options.groups and any(pools.values()):
        for b in sorted(pools):
            if pools[b] and len(picked) < options.groups:
                picked.append((first_step[b], pools[b].pop()))
    lines = []
    for window, key in sorted(picked):
        members = groups[key]
        lines.append(group_line(prompt=members[0]["prompt"], completions=[r["completion"] for r in members],
                                rubric=rubric, step=key[0], window=window, rewards=[r.get("reward") for r in members],
                                reference=(members[0].get(RECORD_KEY) or {}).get("reference")))
    return lines


def build_ranking_set(run_dir: Path, options: GroupOptions) -> tuple[Path, list[dict[str, Any]]]:
    """Read the run's samples and rubric, draw the groups, write them; return where and what."""
    if not run_dir.is_dir():
        raise DataError(no_such(run_dir, "run directory", directory=True), str(run_dir))
    rubric = run_rubric(run_dir, options.rubric)
    rows = read_samples(run_dir / SAMPLES_FILE, rubric)
    attach_records(rows, saved_config(run_dir))  # the reference a labeller and a ranking judge read
    lines = draw_groups(rows, rubric, options)
    if not lines:
        raise DataError("no prompt has two distinct completions logged at one step: nothing to rank (raise "
                        "run.log_samples.rows to log every completion of a group)", str(run_dir / SAMPLES_FILE))
    path = options.output or run_dir / LABELLING_DIR / SET_NAME
    write_lines(path, lines)
    return path, lines
