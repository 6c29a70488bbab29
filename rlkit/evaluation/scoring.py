"""``rlkit score``: judge prompt/completion records with the configured judge and aggregator.

A record's completion may be an episode (a conversation with tool results or a user's replies between the
assistant's turns, :mod:`rlkit.reward.episodes_io`): the judge sees it as the training loop shows it one, and a
rubric's step-scoped dimensions are scored on each of its turns."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlkit.config import CheckedConfig
from rlkit.core.atomic import atomic_write_text
from rlkit.core.errors import DataError, JudgeError
from rlkit.core.rubric import Rubric
from rlkit.core.stats import json_number, nan_mean_std
from rlkit.core.types import RewardBatch, Rollout
from rlkit.judging.members import judgement_of
from rlkit.judging.types import Judgement
from rlkit.reward.episodes_io import judged_rollout, judged_steps, num_turns, step_lists
from rlkit.reward.pipeline import aggregate_rewards, check_judge_output
from rlkit.reward.steps import with_step_means


@dataclass
class ScoreResult:
    """Per-completion raw scores ``[N, D]`` and rewards ``[N]`` in record order; ``details`` (rubrics with
    step-scoped dimensions, or episodes) what each completion's scored line adds: ``steps`` and ``episode``."""

    dimension_names: list[str]
    raw_scores: torch.Tensor
    rewards: torch.Tensor
    records: list[dict[str, Any]]
    details: list[dict[str, Any]] | None = None
    # the last batch's judgement's metrics (``judge/parse_failure_rate``: what an unscored dimension is quoted with)
    judge_metrics: dict[str, float] = field(default_factory=dict)


def _completions(record: dict[str, Any]) -> list[Any]:
    return record["completions"] if "completions" in record else [record["completion"]]


def _is_episode_record(record: dict[str, Any]) -> bool:
    """Whether a record's completions include an episode (messages; ``rlkit.evaluation.episode_records``)."""
    return any(isinstance(c, list) for c in _completions(record))


def _flatten(records: list[dict[str, Any]]) -> list[tuple[int, Any]]:
    return [(i, c) for i, record in enumerate(records) for c in _completions(record)]


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


def score_records(validated: CheckedConfig, batch_size: int = 64, *, retries: int = 0,
                  retry_backoff: float = 1.0, on_batch: Callable[[int], None] | None = None) -> ScoreResult:
    """Score every completion of every record.

    A judge that scores the rubric's dimensions sees each completion as its own group of one. A judge that
    scores completions against the others of their group (its own derived rubric: ``ranking``, ``grm``) sees
    each record's ``completions`` as one group, and the scores follow its derived rubric; a record with fewer
    than two completions is a ``DataError``. A judge call that fails transiently (``is_transient``) is asked
    again up to ``retries`` times, waiting ``retry_backoff`` seconds, doubled each time; ``on_batch(n)`` is called
    after each batch of n completions. A completion given as messages is an episode
    (:func:`rlkit.reward.episodes_io.judged_rollout`; a file's records get theirs from
    :func:`rlkit.evaluation.episode_records.with_episodes`), judged in batches apart from text completions; with
    step-scoped dimensions in the rubric, ``details`` holds each completion's step scores.
    """
    assert validated.records is not None
    records = validated.records
    grouped = validated.scored_rubric is not validated.rubric
    rubric = validated.scored_rubric  # what the scores follow
    judge, name = validated.plugins["judge"], validated.plugin_names["judge"]
    raw_parts, reward_parts, details = [], [], []
    metrics: dict[str, float] = {}
    batches = _record_groups(records, batch_size, name) if grouped else _single_groups(records, batch_size)
    for chunk, groups in batches:
        rollout = judged_rollout([records[i] for i in chunk], groups)
        said: list[Judgement] = []  # the rollout's judgement first, then its turns' (step-scoped dimensions)

        def judged(r: Rollout, where: tuple[int, int] = (chunk[0], chunk[-1]),
                   said: list[Judgement] = said) -> torch.Tensor:
            said.append(_judge_with_retries(judge, r, validated.rubric, retries, retry_backoff, where, name))
            return said[-1].scores

        batch, steps = judge_and_aggregate(validated, rollout, judged)
        raw_parts.append(batch.raw_scores.reshape(-1, batch.raw_scores.shape[-1]))
        reward_parts.append(batch.rewards.reshape(-1))
        whole = said[0]
        metrics = dict(whole.metrics)
        details.extend(_details(rollout, steps, rubric, None if steps is not None else whole.reasons,
                                whole.written_scores if steps is None else None))
        if on_batch is not None:
            on_batch(sum(len(g) for g in groups))
    kept = details if any(details) else None
    if not grouped:
        return ScoreResult(rubric.dimension_names, torch.cat(raw_parts), torch.cat(reward_parts), records, kept,
                           metrics)
    # judged in batches of equal group size: back to record order
    order = [i for chunk, _ in batches for i in chunk]
    starts, row = {}, 0
    for i in order:
        starts[i] = row
        row += len(records[i]["completions"])
    raw_all, reward_all = torch.cat(raw_parts), torch.cat(reward_parts)
    index = torch.tensor([starts[i] + k for i in range(len(records)) for k in range(len(records[i]["completions"]))],
                         dtype=torch.long)
    return ScoreResult(rubric.dimension_names, raw_all[index], reward_all[index], records,
                       None if kept is None else [kept[int(i)] for i in index], metrics)


def judge_and_aggregate(validated: CheckedConfig, rollout: Rollout,
                        judge: Callable[[Rollout], torch.Tensor]) -> tuple[RewardBatch, torch.Tensor | None]:
    """``judge(rollout)``'s scores aggregated, and with step-scoped dimensions in the rubric the step scores
    ``[B, G, T, D]`` (each dimension's episode score the mean of its steps), as the training loop forms them."""
    raw = judge(rollout)
    scored, name = validated.scored_rubric, validated.plugin_names["judge"]
    steps = None
    if scored.step_dimensions:
        checked = check_judge_output(raw, rollout, scored, name)
        steps = judged_steps(lambda turn: check_judge_output(judge(turn), turn, scored, name), rollout, checked,
                             scored)
    return aggregate_judged(validated, rollout, raw, steps), steps


def _details(rollout: Rollout, steps: torch.Tensor | None, rubric: Rubric,
             reasons: list[list[dict[str, str]]] | None = None,
             written: torch.Tensor | None = None) -> list[dict[str, Any]]:
    """Per completion, in rollout order: its step scores, its episode's turns and counts, the judge's reasons and,
    scoring by expected level, the levels it wrote (``written``, ``[B, G, D]``), where there are."""
    out = []
    for b, group in enumerate(num_turns(rollout)):
        for g, turns in enumerate(group):
            detail: dict[str, Any] = {}
            if reasons is not None and reasons[b][g]:
                detail["reasons"] = reasons[b][g]
            if written is not None:
                detail["written"] = [float(v) for v in written[b, g]]
            if steps is not None:
                detail["steps"] = step_lists(steps[b, g], turns, rubric)
            if rollout.episodes is not None:
                detail["episode"] = {"turns": turns, **rollout.episodes[b][g].info}
            out.append(detail)
    return out


def aggregate_judged(validated: CheckedConfig, rollout: Rollout, raw: torch.Tensor,
                     steps: torch.Tensor | None = None) -> RewardBatch:
    """A judge's raw scores for ``rollout`` checked against the rubric they follow (step-scoped dimensions: the
    mean of ``steps``), then weighted and aggregated as the config says: what ``rlkit score`` does per batch and
    ``rlkit serve`` per request."""
    scored = validated.scored_rubric
    checked = check_judge_output(raw, rollout, scored, validated.plugin_names["judge"])
    if steps is not None:
        checked = with_step_means(checked, steps.to(checked.device), scored)
    return aggregate_rewards(checked, scored, validated.plugins["weight_scheduler"], validated.plugins["aggregator"],
                             normalization=validated.run.score_normalization)


def _single_groups(records: list[dict[str, Any]], batch_size: int) -> list[tuple[list[int], list[list[Any]]]]:
    """Batches of up to ``batch_size`` completions, each a group of one; episode records and the others are never
    in one batch, so a text completion is judged as one whatever its neighbours are."""
    out: list[tuple[list[int], list[list[Any]]]] = []
    kind = None
    for i, completion in _flatten(records):
        this = _is_episode_record(records[i])
        if not out or len(out[-1][0]) == batch_size or this != kind:
            out.append(([], []))
            kind = this
        out[-1][0].append(i)
        out[-1][1].append([completion])
    return out


def _record_groups(records: list[dict[str, Any]], batch_size: int,
                   judge: str) -> list[tuple[list[int], list[list[Any]]]]:
    """Batches of whole records of one group size each (a rollout's groups are all the same size), episode
    records apart from the others."""
    by_size: dict[tuple[int, bool], list[int]] = {}
    for i, record in enumerate(records):
        completions = record.get("completions")
        if not isinstance(completions, list) or len(completions) < 2:
            raise DataError(f"judge {judge} ranks a record's completions against each other: give each record a "
                            f"\"completions\" list of at least 2", f"record {i + 1}")
        by_size.setdefault((len(completions), _is_episode_record(record)), []).append(i)
    out = []
    for (size, _), indices in sorted(by_size.items()):
        per_batch = max(1, batch_size // size)
        for s in range(0, len(indices), per_batch):
            chunk = indices[s:s + per_batch]
            out.append((chunk, [list(records[i]["completions"]) for i in chunk]))
    return out


def _judge_with_retries(judge: Any, rollout: Rollout, rubric: Any, retries: int, backoff: float,
                        records: tuple[int, int], name: str) -> Judgement:
    for attempt in range(retries + 1):
        try:
            return judgement_of(judge, rollout, rubric)
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


def scored_lines(result: ScoreResult, rubric_identity: dict[str, str]) -> list[str]:
    """One JSON line per completion: the record (one completion; an episode as its conversation), its scores,
    reward, rank within the record, and where there are ``steps`` (each step-scoped dimension's score per turn) and
    ``episode`` (its turns and the counts inferred from it)."""
    lines = []
    row = 0
    for record in result.records:
        completions = _completions(record)
        rewards = result.rewards[row:row + len(completions)].tolist()
        for completion, reward, rank in zip(completions, rewards, completion_ranks(rewards), strict=True):
            scores = {n: json_number(float(v)) for n, v in zip(result.dimension_names,
                                                                   result.raw_scores[row].tolist(), strict=True)}
            out = {k: v for k, v in record.items() if k != "completions"}
            out.update(completion=completion, scores=scores, reward=json_number(float(reward)), rank=rank,
                       rubric=rubric_identity)
            detail = result.details[row] if result.details is not None else {}
            if "steps" in detail:
                out["steps"] = {n: [None if v is None else json_number(v) for v in values]
                                for n, values in detail["steps"].items()}
            if "episode" in detail:
                out["episode"] = detail["episode"]
            if "reasons" in detail:
                out["reasons"] = detail["reasons"]
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
