"""``rlkit score``: judge prompt/completion records with the configured judge and aggregator."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlkit.config import ValidatedConfig
from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import DataError, JudgeError
from rlkit.core.stats import nan_mean_std
from rlkit.core.types import RewardBatch, Rollout
from rlkit.reward.pipeline import aggregate_rewards, check_judge_output


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


def is_transient(exc: BaseException) -> bool:
    """Whether a judge failure is worth asking again: time-outs, dropped connections, httpx transport errors,
    or any exception a plugin marks with ``exc.transient = True``."""
    if getattr(exc, "transient", False) is True or isinstance(exc, TimeoutError | ConnectionError):
        return True
    httpx = sys.modules.get("httpx")  # only a judge that talks HTTP has imported it; never import it here
    return httpx is not None and isinstance(exc, httpx.TransportError)


class JudgeRetriesExhausted(JudgeError):
    """A judge batch kept failing for a transient reason after every retry; ``first``/``last`` are record indices."""

    def __init__(self, message: str, first: int, last: int, attempts: int, cause: BaseException) -> None:
        super().__init__(message)
        self.first, self.last, self.attempts, self.cause = first, last, attempts, cause


def score_records(validated: ValidatedConfig, batch_size: int = 64, *, retries: int = 0,
                  retry_backoff: float = 1.0, on_batch: Callable[[int], None] | None = None) -> ScoreResult:
    """Score every completion of every record.

    A judge that scores the rubric's dimensions sees each completion as its own group of one. A judge that
    scores completions against the others of their group (its own derived rubric: ``ranking``, ``grm``) sees
    each record's ``completions`` as one group, and the scores follow its derived rubric; a record with fewer
    than two completions is a ``DataError``. A judge call that fails transiently (``is_transient``) is asked
    again up to ``retries`` times, waiting ``retry_backoff`` seconds, doubled each time; ``on_batch(n)`` is called
    after each batch of n completions.
    """
    assert validated.records is not None
    records = validated.records
    grouped = validated.reward_rubric is not validated.rubric
    rubric = validated.reward_rubric  # what the scores follow
    judge, name = validated.plugins["judge"], validated.plugin_names["judge"]
    raw_parts, reward_parts = [], []
    for chunk, groups in (_record_groups(records, batch_size, name) if grouped else _single_groups(records,
                                                                                                   batch_size)):
        rollout = Rollout(records=[records[i] for i in chunk], completions=groups)
        scores = _judge_with_retries(judge, rollout, validated.rubric, retries, retry_backoff, (chunk[0], chunk[-1]),
                                     name)
        batch = aggregate_judged(validated, rollout, scores)
        raw_parts.append(batch.raw_scores.reshape(-1, batch.raw_scores.shape[-1]))
        reward_parts.append(batch.rewards.reshape(-1))
        if on_batch is not None:
            on_batch(sum(len(g) for g in groups))
    if not grouped:
        return ScoreResult(rubric.dimension_names, torch.cat(raw_parts), torch.cat(reward_parts), records)
    # judged in batches of equal group size: back to record order
    order = [i for chunk, _ in _record_groups(records, batch_size, name) for i in chunk]
    starts, row = {}, 0
    for i in order:
        starts[i] = row
        row += len(records[i]["completions"])
    raw_all, reward_all = torch.cat(raw_parts), torch.cat(reward_parts)
    index = torch.tensor([starts[i] + k for i in range(len(records)) for k in range(len(records[i]["completions"]))],
                         dtype=torch.long)
    return ScoreResult(rubric.dimension_names, raw_all[index], reward_all[index], records)


def aggregate_judged(validated: ValidatedConfig, rollout: Rollout, raw: torch.Tensor) -> RewardBatch:
    """A judge's raw scores for ``rollout`` checked against the rubric they follow, then weighted and aggregated
    as the config says: what ``rlkit score`` does per batch and ``rlkit serve`` per request."""
    scored = validated.reward_rubric
    checked = check_judge_output(raw, rollout, scored, validated.plugin_names["judge"])
    return aggregate_rewards(checked, scored, validated.plugins["weight_scheduler"], validated.plugins["aggregator"],
                             normalization=validated.cfg.get("score_normalization", "range"))


def _single_groups(records: list[dict[str, Any]], batch_size: int) -> list[tuple[list[int], list[list[str]]]]:
    pairs = _flatten(records)
    return [([i for i, _ in pairs[s:s + batch_size]], [[c] for _, c in pairs[s:s + batch_size]])
            for s in range(0, len(pairs), batch_size)]


def _record_groups(records: list[dict[str, Any]], batch_size: int,
                   judge: str) -> list[tuple[list[int], list[list[str]]]]:
    """Batches of whole records of one group size each (a rollout's groups are all the same size)."""
    by_size: dict[int, list[int]] = {}
    for i, record in enumerate(records):
        completions = record.get("completions")
        if not isinstance(completions, list) or len(completions) < 2:
            raise DataError(f"judge {judge} ranks a record's completions against each other: give each record a "
                            f"\"completions\" list of at least 2", f"record {i + 1}")
        by_size.setdefault(len(completions), []).append(i)
    out = []
    for size, indices in sorted(by_size.items()):
        per_batch = max(1, batch_size // size)
        for s in range(0, len(indices), per_batch):
            chunk = indices[s:s + per_batch]
            out.append((chunk, [list(records[i]["completions"]) for i in chunk]))
    return out


def _judge_with_retries(judge: Any, rollout: Rollout, rubric: Any, retries: int, backoff: float,
                        records: tuple[int, int], name: str) -> torch.Tensor:
    for attempt in range(retries + 1):
        try:
            return judge.score(rollout, rubric)
        except Exception as exc:
            if not is_transient(exc):
                raise
            if attempt == retries:
                first, last = records
                raise JudgeRetriesExhausted(
                    f"judge {name} failed {attempt + 1} times on records {first + 1}-{last + 1}: "
                    f"{type(exc).__name__}: {exc}", first, last, attempt + 1, exc) from exc
            time.sleep(backoff * 2 ** attempt)
    raise AssertionError("unreachable")


def completion_ranks(rewards: list[float]) -> list[int | None]:
    """Rank of each completion of one record by reward: 1 = best, ties share the best rank, NaN -> None."""
    valid = [r for r in rewards if r == r]
    return [None if r != r else 1 + sum(v > r for v in valid) for r in rewards]


def _finite_or_none(x: float) -> float | None:
    return None if x != x else round(x, 6)


def scored_lines(result: ScoreResult, rubric_identity: dict[str, str]) -> list[str]:
    """One JSON line per completion: the record (one completion), its scores, reward, rank within the record."""
    lines = []
    row = 0
    for record in result.records:
        completions = record["completions"] if "completions" in record else [record["completion"]]
        rewards = result.rewards[row:row + len(completions)].tolist()
        for completion, reward, rank in zip(completions, rewards, completion_ranks(rewards), strict=True):
            scores = {n: _finite_or_none(float(v)) for n, v in zip(result.dimension_names,
                                                                   result.raw_scores[row].tolist(), strict=True)}
            out = {k: v for k, v in record.items() if k != "completions"}
            out.update(completion=completion, scores=scores, reward=_finite_or_none(float(reward)), rank=rank,
                       rubric=rubric_identity)
            lines.append(json.dumps(out, ensure_ascii=False))
            row += 1
    return lines


def write_scored_jsonl(result: ScoreResult, path: Path, rubric_identity: dict[str, str]) -> int:
    """Write record + scores + reward + rank per completion; atomic, so a failure leaves no partial file."""
    lines = scored_lines(result, rubric_identity)
    atomic_write_text(path, "".join(line + "\n" for line in lines))
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
