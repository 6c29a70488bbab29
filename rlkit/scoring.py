"""``rlkit score``: judge prompt/completion records with the configured judge and aggregator."""

from __future__ import annotations

import json
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlkit.config import ValidatedConfig
from rlkit.errors import ConfigError
from rlkit.rewards import aggregate_rewards, check_judge_output
from rlkit.stats import nan_mean_std
from rlkit.types import Rollout


@dataclass
class ScoreResult:
    """Per-completion raw scores ``[N, D]`` and rewards ``[N]`` in record order."""

    dimension_names: list[str]
    raw_scores: torch.Tensor
    rewards: torch.Tensor
    records: list[dict[str, Any]]


def _flatten(records: list[dict[str, Any]]) -> list[tuple[int, str]]:
    pairs = []
    for i, record in enumerate(records):
        completions = record["completions"] if "completions" in record else [record["completion"]]
        pairs.extend((i, c) for c in completions)
    return pairs


def score_records(validated: ValidatedConfig, batch_size: int = 64) -> ScoreResult:
    """Score every completion of every record; each completion is its own group of one."""
    assert validated.records is not None
    rubric = validated.rubric
    if validated.reward_rubric is not rubric:
        # scores per completion on the rubric's dimensions are what score and calibrate write and compare
        raise ConfigError(f"judge={validated.plugin_names['judge']} scores completions against the others of their "
                          f"group ({', '.join(validated.reward_rubric.dimension_names)}), not the rubric's dimensions "
                          "one by one; score and calibrate need a judge that does (rule, llm, hybrid, ensemble)",
                          "judge")
    judge = validated.plugins["judge"]
    aggregator = validated.plugins["aggregator"]
    scheduler = validated.plugins["weight_scheduler"]
    pairs = _flatten(validated.records)
    raw_parts, reward_parts = [], []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start:start + batch_size]
        rollout = Rollout(records=[validated.records[i] for i, _ in chunk], completions=[[c] for _, c in chunk])
        raw = check_judge_output(judge.score(rollout, rubric), rollout, rubric, validated.plugin_names["judge"])
        batch = aggregate_rewards(raw, rubric, scheduler, aggregator,
                                  normalization=validated.cfg.get("score_normalization", "range"))
        raw_parts.append(batch.raw_scores[:, 0])
        reward_parts.append(batch.rewards[:, 0])
    return ScoreResult(rubric.dimension_names, torch.cat(raw_parts), torch.cat(reward_parts), validated.records)


def _finite_or_none(x: float) -> float | None:
    return None if x != x else round(x, 6)


def write_scored_jsonl(result: ScoreResult, path: Path, rubric_identity: dict[str, str]) -> int:
    """Write record + scores + reward per completion; atomic, so a failure leaves no partial file."""
    lines = []
    row = 0
    for record in result.records:
        completions = record["completions"] if "completions" in record else [record["completion"]]
        for completion in completions:
            scores = {n: _finite_or_none(float(v)) for n, v in zip(result.dimension_names,
                                                                   result.raw_scores[row].tolist(), strict=True)}
            out = {k: v for k, v in record.items() if k != "completions"}
            out.update(completion=completion, scores=scores, reward=_finite_or_none(float(result.rewards[row])),
                       rubric=rubric_identity)
            lines.append(json.dumps(out, ensure_ascii=False))
            row += 1
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write("\n".join(lines) + "\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return len(lines)


def dimension_table(result: ScoreResult) -> list[dict[str, Any]]:
    """Per-dimension mean/std/min/max and how many completions were not scored."""
    rows = []
    columns = [(n, result.raw_scores[:, i]) for i, n in enumerate(result.dimension_names)]
    for name, col in [*columns, ("reward", result.rewards)]:
        mean, std, count = nan_mean_std(col, dim=0)
        valid = col[~torch.isnan(col)]
        rows.append({
            "name": name,
            "mean": float(mean),
            "std": float(std),
            "min": float(valid.min()) if valid.numel() else float("nan"),
            "max": float(valid.max()) if valid.numel() else float("nan"),
            "scored": int(count),
            "unscored": int(col.numel() - count),
        })
    return rows
