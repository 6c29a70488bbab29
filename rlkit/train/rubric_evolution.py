"""``rubric.evolve``: the Lightning callback that runs a round of evolving criteria every ``every`` training steps
(``rlkit.evaluation.rubric_evolution``), hands the training loop each record's current rubric, writes every version
and its diff to ``run_dir/rubrics/``, logs the round, and keeps the buffer in checkpoints.

What the run directory holds (``<id>`` is a prompt's rubric id, the record's ``id`` or a hash of its prompt)::

    rubrics/buffer.json                       the buffer now: active and retired criteria, versions, per prompt
    rubrics/versions.jsonl                    one line per new version: step, prompt, version, hash, added, retired
    rubrics/malformed.jsonl                   answers that could not be used (skipped and counted)
    rubrics/<id>/<version>.yaml               every version of the prompt's rubric, its own first
    rubrics/<id>/<old>..<new>.diff.json/.txt  what changed between consecutive versions
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import lightning as L
import yaml

from rlkit.config.schemas import RubricEvolveConfig
from rlkit.core.atomic import append_lines, atomic_write_text
from rlkit.core.errors import ConfigError
from rlkit.core.rubric import Rubric
from rlkit.core.rubric_diff import render_diff
from rlkit.core.types import Rollout
from rlkit.evaluation.rubric_evolution import EvolveRound, RubricBuffer, RubricVersion, diff_json, dumps_line

RUBRICS_DIR = "rubrics"
BUFFER_FILE = "buffer.json"
VERSIONS_FILE = "versions.jsonl"
MALFORMED_FILE = "malformed.jsonl"
VERSION_COLUMNS = ["step", "rubric_id", "version", "hash", "added", "retired", "diff"]


def _file_safe(version: str) -> str:
    return version.replace("/", "_")


def _level(key: Any) -> float | int:
    value = float(key)
    return int(value) if value.is_integer() else value


def _rubric_yaml(data: dict[str, Any]) -> str:
    """A rubric mapping as YAML, anchor levels as numbers (a JSON dump made them text) as `rlkit rubric generate`
    writes them."""
    plain = json.loads(json.dumps(data))
    for dim in plain.get("dimensions", []):
        if isinstance(dim.get("anchors"), dict):
            dim["anchors"] = {_level(k): v for k, v in dim["anchors"].items()}
    return yaml.safe_dump(plain, sort_keys=False, allow_unicode=True, width=100)


def diff_text(version: RubricVersion) -> str:
    """The diff as ``rlkit rubric diff`` prints it, as plain text."""
    from rich.console import Console

    console = Console(record=True, width=120, file=io.StringIO())  # recorded, not shown
    console.print(render_diff(version.diff, f"{version.rubric_id} v{version.old.version}",
                              f"{version.rubric_id} v{version.new.version}"))
    # the diff names dimensions; a criterion is its text
    lines = [f"+ {c.name} [{c.category}] {c.text}" for c in version.added]
    lines += [f"- {c.name} [{c.category}, retired: {c.retired_because}] {c.text}" for c in version.retired]
    return console.export_text() + "".join(line + "\n" for line in lines)


class RubricEvolution(L.Callback):
    """Every ``options.every`` steps, after the step's update and before its checkpoint is written: one round of new
    and retired criteria for the step's prompts, asked of ``judge.backend`` and scored with ``judge.score``."""

    def __init__(self, options: RubricEvolveConfig, judge: Any, run_dir: Path) -> None:
        self.options = options
        self.judge = judge
        self.dir = Path(run_dir) / RUBRICS_DIR
        self.buffer = RubricBuffer(options)

    @property
    def state_key(self) -> str:
        return "RubricEvolution"

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if trainer.world_size > 1:
            raise ConfigError("evolving criteria run on one process for now: each process would grow its own "
                              "buffer from its own prompts", "rubric.evolve.every")
        # the judge asks each training record's current rubric; held-out and golden-set scores keep the records' own
        pl_module.rewards.record_rubrics = self.buffer.overlay

    def _score(self, record: dict[str, Any], completions: Any, rubric: Rubric) -> Any:
        return self.judge.score(Rollout(records=[record], completions=[list(completions)]), rubric)[0]

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        snapshot = getattr(pl_module, "last_rollout", None)
        if snapshot is None or (snapshot.step + 1) % self.options.every:
            return
        done = self.buffer.evolve(snapshot.step, snapshot.records, snapshot.completions, snapshot.rewards.cpu(),
                                  self.judge.backend.get(), self._score)
        self.write(done)
        log = getattr(pl_module, "log_step_metrics", None)
        if callable(log):
            log(done.metrics(self.buffer))
        rows = [[v.step, v.rubric_id, v.new.version, v.new.short_hash, len(v.added), len(v.retired), diff_text(v)]
                for v in done.versions]
        for logger in trainer.loggers if rows else []:
            if hasattr(logger, "log_table"):  # W&B: the round's diffs beside the metrics
                logger.log_table(key="rubric_versions", columns=VERSION_COLUMNS, data=rows, step=trainer.global_step)

    def write(self, done: EvolveRound) -> None:
        """The round's versions, diffs and unusable answers, then the buffer, under ``run_dir/rubrics/``."""
        self.dir.mkdir(parents=True, exist_ok=True)
        for v in done.versions:
            folder = self.dir / v.rubric_id
            folder.mkdir(exist_ok=True)
            first = folder / f"{_file_safe(v.old.version)}.yaml"
            if not first.exists() and "+evolve." not in v.old.version:
                # the record's own rubric, so the folder holds the whole chain of versions
                atomic_write_text(first, _rubric_yaml(v.old.model_dump(mode="json", exclude_none=True)))
            atomic_write_text(folder / f"{_file_safe(v.new.version)}.yaml", _rubric_yaml(v.data))
            stem = f"{_file_safe(v.old.version)}..{_file_safe(v.new.version)}.diff"
            atomic_write_text(folder / f"{stem}.json", json.dumps(diff_json(v.diff), indent=1, default=str) + "\n")
            atomic_write_text(folder / f"{stem}.txt", diff_text(v))
        append_lines(self.dir / VERSIONS_FILE, [dumps_line(v.row()) for v in done.versions])
        append_lines(self.dir / MALFORMED_FILE, [dumps_line(row) for row in done.malformed])
        self.write_buffer()

    def write_buffer(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.dir / BUFFER_FILE, json.dumps(self.buffer.state_dict(), indent=1) + "\n")

    def state_dict(self) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict()}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state_dict.get("buffer", {}))
        self.write_buffer()  # a resumed run's directory shows the buffer it continues from


def rubric_evolution_callbacks(validated: Any, run_dir: Path) -> list[L.Callback]:
    """``[RubricEvolution]`` when ``rubric.evolve.every > 0`` (``rlkit validate`` checked judge and rubric), else []."""
    evolve = getattr(validated, "evolve", None)
    if evolve is None or not evolve.every:
        return []
    return [RubricEvolution(evolve, validated.plugins["judge"], run_dir)]
