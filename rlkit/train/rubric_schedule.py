"""``rubric.schedule``: the Lightning callback that hands the reward pipeline the current stage of a staged rubric
(:mod:`rlkit.reward.rubric_schedule`), feeds it each step's saturated shares, logs the stage every step and writes
every stage change as a rubric version, and keeps the stage in checkpoints.

What the run directory holds::

    rubrics/schedule.jsonl                       one line per stage entered: step, stage, version, hash, added, shares
    rubrics/<name>/<version>.yaml                each stage's rubric (the inactive dimensions at weight 0)
    rubrics/<name>/<old>..<new>.diff.txt         what changed between consecutive stages, as `rlkit rubric diff` says
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import lightning as L
import yaml

from rlkit.config.schemas import RubricScheduleConfig
from rlkit.core.atomic import append_lines, atomic_write_text
from rlkit.core.errors import ConfigError
from rlkit.core.rubric import Rubric
from rlkit.core.rubric_diff import diff_rubrics, render_diff
from rlkit.reward.diagnostics import saturation_share
from rlkit.reward.pipeline import normalize_scores
from rlkit.reward.rubric_schedule import WHERE, StageChange, StagedRubric

RUBRICS_DIR = "rubrics"
SCHEDULE_FILE = "schedule.jsonl"
VERSION_COLUMNS = ["step", "stage", "version", "hash", "added", "diff"]


def _file_safe(version: str) -> str:
    return version.replace("/", "_")


def _diff_text(old: Rubric, new: Rubric) -> str:
    from rich.console import Console

    console = Console(record=True, width=120, file=io.StringIO())  # recorded, not shown
    # a stage is not a release of the rubric: no changelog entry to remind anyone of
    diff = replace(diff_rubrics(old, new), new_entry_exists=True, new_entry_hash=new.content_hash)
    console.print(render_diff(diff, f"{old.name} v{old.version}", f"{new.name} v{new.version}"))
    return console.export_text()


class RubricSchedule(L.Callback):
    """After each step's update and before its checkpoint is written: the step's saturated share per dimension
    (``rewards/<d>/saturated_groups``, from the step's scores) to the schedule; a stage change from the next step."""

    def __init__(self, options: RubricScheduleConfig, rubric: Rubric, run_dir: Path) -> None:
        self.staged = StagedRubric(rubric, [list(s) for s in options.stages], options.min_share, options.window)
        self.dir = Path(run_dir) / RUBRICS_DIR

    @property
    def state_key(self) -> str:
        return "RubricSchedule"

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.world_size > 1:
            raise ConfigError("a rubric schedule runs on one process for now: each process would read its own "
                              "groups' saturation", WHERE)
        pl_module.rewards.schedule = self.staged

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # the stage the run starts in (a resumed one: the checkpoint's), so the folder always has its rubric
        current = self.staged.current
        self._write_rubric(current)
        if not (self.dir / SCHEDULE_FILE).exists():
            append_lines(self.dir / SCHEDULE_FILE, [json.dumps({
                "step": self.staged.started, "stage": self.staged.stage, "version": current.version,
                "hash": current.content_hash, "added": self.staged.active, "saturated_shares": {}})])

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        snapshot = getattr(pl_module, "last_rollout", None)
        if snapshot is None:
            return
        rubric = self.staged.rubric
        # what StepMetrics logs as rewards/<d>/saturated_groups: the step's normalised scores, conditions applied
        shares = saturation_share(normalize_scores(snapshot.raw_scores.float(), rubric))
        metrics = self.staged.metrics()  # the stage this step trained in
        change = self.staged.observe(snapshot.step, dict(zip(rubric.dimension_names, shares.tolist(), strict=True)))
        if change is not None:
            metrics["rubric/stage_changed"] = 1.0
            self.write(change)
            if trainer.is_global_zero:
                print(f"rubric.schedule: step {change.step}: {', '.join(change.shares)} saturated "
                      f"({', '.join(f'{v:.0%}' for v in change.shares.values())} of groups over the last "
                      f"{self.staged.window} steps); stage {change.new} adds {', '.join(change.added)} "
                      f"(rubric {change.rubric.name} v{change.rubric.version})", flush=True)
            rows = [[change.step, change.new, change.rubric.version, change.rubric.short_hash,
                     ", ".join(change.added), self._diff_of(change)]]
            for logger in trainer.loggers:
                if hasattr(logger, "log_table"):  # W&B: the change's diff beside the metrics
                    logger.log_table(key="rubric_versions", columns=VERSION_COLUMNS, data=rows,
                                     step=trainer.global_step)
        log = getattr(pl_module, "log_step_metrics", None)
        if callable(log):
            log(metrics)

    def _old_rubric(self, change: StageChange) -> Rubric:
        from rlkit.reward.rubric_schedule import stage_rubric

        return stage_rubric(self.staged.rubric, [n for s in self.staged.stages[:change.old] for n in s], change.old)

    def _diff_of(self, change: StageChange) -> str:
        return _diff_text(self._old_rubric(change), change.rubric)

    def _write_rubric(self, rubric: Rubric) -> Path:
        folder = self.dir / rubric.name
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{_file_safe(rubric.version)}.yaml"
        data = json.loads(json.dumps(rubric.model_dump(mode="json", exclude_none=True)))
        for dim in data.get("dimensions", []):  # anchor levels as numbers, as a rubric file writes them
            if isinstance(dim.get("anchors"), dict):
                dim["anchors"] = {(int(float(k)) if float(k).is_integer() else float(k)): v
                                  for k, v in dim["anchors"].items()}
        data.pop("changelog", None)  # the stage is not a release of the rubric: its hash is in schedule.jsonl
        atomic_write_text(path, yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=100))
        return path

    def write(self, change: StageChange) -> None:
        """The new stage's rubric, its diff from the last stage, and its line in ``schedule.jsonl``."""
        self._write_rubric(change.rubric)
        old = self._old_rubric(change)
        stem = f"{_file_safe(old.version)}..{_file_safe(change.rubric.version)}.diff.txt"
        atomic_write_text(self.dir / change.rubric.name / stem, self._diff_of(change))
        append_lines(self.dir / SCHEDULE_FILE, [json.dumps(change.row(), ensure_ascii=False)])

    def state_dict(self) -> dict[str, Any]:
        return self.staged.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.staged.load_state_dict(state_dict)


def rubric_schedule_callbacks(validated: Any, run_dir: Path) -> list[L.Callback]:
    """``[RubricSchedule]`` when ``rubric.schedule.stages`` is set (``rlkit validate`` checked it), else []."""
    schedule = validated.schedule
    if schedule is None or not schedule.stages:
        return []
    return [RubricSchedule(schedule, validated.rubric, run_dir)]
