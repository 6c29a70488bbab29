"""Lightning callbacks of ``rlkit fit`` that read the module's state and write it out; they decide nothing."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch

from rlkit.core.atomic import append_lines
from rlkit.core.rubric import Rubric
from rlkit.data.records import prompt_text
from rlkit.lm.sampling import render_prompt

RECORD_KEY = "record"  # in a samples.jsonl row: the prompt record's fields besides its prompt


@dataclass
class RolloutSnapshot:
    """What one training step sampled and how it was scored (shapes ``[B][G]``, ``[B, G, D]``, ``[B, G]``)."""

    step: int
    records: list[dict[str, Any]]
    completions: list[list[str]]
    raw_scores: torch.Tensor
    rewards: torch.Tensor
    advantages: torch.Tensor
    episodes: list[list[Any]] | None = None  # multi-turn rollouts: each completion's whole episode
    step_scores: torch.Tensor | None = None  # [B, G, T, D] raw step scores (rubrics with `scope: step` dimensions)
    reasons: list[list[dict[str, str]]] | None = None  # [B][G] the judge's one-line reason per dimension
    rubric_version: str | None = None  # the rubric stage's version the step was rewarded by (rubric.schedule)


def conversation_text(messages: Any) -> str:
    """An episode after its prompt, one ``role: content`` line per turn (tool results named by their tool)."""
    lines = []
    for m in messages:
        role = m.get("role")
        lines.append(f"{role}" + (f"[{m['name']}]" if role == "tool" and m.get("name") else "") +
                     f": {m.get('content')}")
    return "\n".join(lines)


def _number(value: float) -> float | None:
    return None if math.isnan(value) else round(value, 6)


def sampled(snapshot: RolloutSnapshot, limit: int) -> list[tuple[int, int]]:
    """(prompt, completion) indices of the logged rows: the first completion of every prompt, then the second, …"""
    b, g = snapshot.rewards.shape
    return [(i, j) for j in range(g) for i in range(b)][:limit]


def sample_rows(snapshot: RolloutSnapshot, rubric: Rubric, limit: int,
                render: Callable[[Any], str] | None = None) -> tuple[list[str], list[list[Any]]]:
    """Columns and up to ``limit`` rows: the first completion of every prompt, then the second, … ``render`` shows a
    prompt as the policy saw it (chat messages through its template); without it chat messages are ``role: content``
    lines."""
    columns = ["step", "prompt", "completion", "reward", "advantage", *rubric.dimension_names]
    if snapshot.episodes is not None:
        columns.insert(3, "episode")
    step_dims = [i for i, d in enumerate(rubric.dimensions) if d.scope == "step"] \
        if snapshot.step_scores is not None else []
    columns += [f"{rubric.dimensions[i].name}/steps" for i in step_dims]
    if snapshot.reasons is not None:
        columns.append("reasons")
    rows = []
    for i, j in sampled(snapshot, limit):
        prompt = snapshot.records[i]["prompt"]
        shown = render(prompt) if render is not None else prompt if isinstance(prompt, str) else prompt_text(prompt)
        row = [snapshot.step, shown,
               snapshot.completions[i][j], _number(float(snapshot.rewards[i, j])),
               _number(float(snapshot.advantages[i, j])), *(_number(float(v)) for v in snapshot.raw_scores[i, j])]
        if snapshot.episodes is not None:
            episode = snapshot.episodes[i][j]
            row.insert(3, conversation_text(episode.messages[episode.first_turn:]))
        for k in step_dims:  # each turn's score in turn order, space-separated (a W&B cell holds text)
            row.append(" ".join(f"{float(v):g}" for v in snapshot.step_scores[i, j, :, k]
                                if not math.isnan(float(v))))
        if snapshot.reasons is not None:  # one text cell: "correctness: 12 is not 7; brevity: short"
            row.append("; ".join(f"{name}: {why}" for name, why in snapshot.reasons[i][j].items()))
        rows.append(row)
    return columns, rows


class SampleLogger(L.Callback):
    """Every ``every`` steps: sample prompts, completions and per-dimension scores to ``samples.jsonl``
    in the run directory (each row with its prompt record's other fields under ``record``), and as a ``samples``
    table to every logger that takes tables (W&B)."""

    def __init__(self, every: int, limit: int, path: Path, rubric: Rubric) -> None:
        self.every, self.limit, self.path, self.rubric = every, limit, path, rubric

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        snapshot: RolloutSnapshot | None = getattr(pl_module, "last_rollout", None)
        if self.every <= 0 or snapshot is None or snapshot.step % self.every != 0 or not trainer.is_global_zero:
            return
        tokenizer = pl_module.tokenizer
        columns, rows = sample_rows(snapshot, self.rubric, self.limit, lambda p: render_prompt(p, tokenizer))
        lines = []
        for row, (i, _) in zip(rows, sampled(snapshot, self.limit), strict=True):
            line = dict(zip(columns, row, strict=True))
            # the record's other fields (``reference``, a check's ``field:``), which a judge reads: `rlkit
            # calibrate sample` carries them into the labelling file so `rlkit calibrate` can score its lines
            line[RECORD_KEY] = {k: v for k, v in snapshot.records[i].items() if k != "prompt"}
            if snapshot.rubric_version is not None:
                line["rubric_version"] = snapshot.rubric_version
            lines.append(json.dumps(line, ensure_ascii=False, default=str))
        append_lines(self.path, lines)  # the step's rows whole or none: a full disk is one line, not half a row
        for logger in trainer.loggers:
            if hasattr(logger, "log_table"):
                logger.log_table(key="samples", columns=columns, data=rows, step=trainer.global_step)
