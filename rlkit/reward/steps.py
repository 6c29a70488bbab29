"""Step scores: rubric dimensions with ``scope: step`` scored on each policy turn of a multi-turn episode.

The judge is asked once per turn index t with a rollout of one completion per episode: turn t's text, its record's
``prompt`` replaced by the conversation before that turn (so a model judge sees the context the policy saw), no
episode (an ``episode`` check does not apply to a step). The result is ``float32 [B, G, T, D]``: NaN where an episode
has no turn t and in every dimension that is not step-scoped. A step-scoped dimension's episode score is the mean of
its step scores, so aggregators, weights and monitors keep reading ``[B, G, D]``. Single-turn rollouts need no extra
call: their one step is the completion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlkit.core.rubric import Rubric
from rlkit.core.types import Rollout

if TYPE_CHECKING:
    import torch


def turn_rollout(rollout: Rollout, turn: int, turn_tokens: torch.Tensor | None = None) -> tuple[Rollout, torch.Tensor]:
    """A rollout of B*G one-completion groups holding each episode's policy turn ``turn`` ("" where it has none),
    each record's prompt the conversation before that turn; and which episodes have that turn, ``bool [B, G]``.
    ``turn_tokens`` ``[B, G, T]``: each turn's token count, for length checks in tokens."""
    import torch
    assert rollout.episodes is not None
    records, texts, exists = [], [], []
    for b, group in enumerate(rollout.episodes):
        for episode in group:
            has = turn < episode.num_turns
            exists.append(has)
            if has:
                at = [i for i, m in enumerate(episode.messages) if i >= episode.first_turn
                      and m.get("role") == "assistant"][turn]
                context = list(episode.messages[:at])
            else:
                context = list(episode.messages[:episode.first_turn])
            records.append({**rollout.records[b], "prompt": context})
            texts.append([episode.turns[turn] if has else ""])
    counts = None
    if turn_tokens is not None:
        counts = turn_tokens[..., turn].reshape(-1, 1) if turn < turn_tokens.shape[-1] else \
            torch.zeros((len(records), 1), dtype=turn_tokens.dtype)
    b, g = rollout.num_prompts, rollout.group_size
    return Rollout(records, texts, counts, step=turn + 1), torch.tensor(exists).view(b, g)


def turn_token_counts(turn_spans: list[list[tuple[int, int]]], b: int, g: int, num_turns: int) -> torch.Tensor:
    """``[B, G, T]`` policy tokens of each turn (0 where there is none) from a sampled batch's ``turn_spans``."""
    import torch
    out = torch.zeros((b * g, num_turns))
    for row, spans in enumerate(turn_spans):
        for t, (start, end) in enumerate(spans[:num_turns]):
            out[row, t] = end - start
    return out.view(b, g, num_turns)


def score_steps(score: Any, rollout: Rollout, rubric: Rubric, num_turns: int,
                turn_tokens: torch.Tensor | None = None) -> torch.Tensor:
    """``[B, G, T, D]`` step scores; ``score(turn_rollout) -> [B*G, 1, D]`` is the run's checked judge call."""
    import torch
    b, g, d = rollout.num_prompts, rollout.group_size, len(rubric.dimensions)
    steps = torch.full((b, g, num_turns, d), float("nan"))
    step_dims = rubric.step_dimensions
    if not step_dims or rollout.episodes is None:
        return steps
    for t in range(num_turns):
        turn, exists = turn_rollout(rollout, t, turn_tokens)
        if not exists.any():
            break
        raw = score(turn).reshape(b, g, d)
        for i in step_dims:
            steps[:, :, t, i] = torch.where(exists, raw[..., i], float("nan"))
    return steps


def with_step_means(raw: torch.Tensor, steps: torch.Tensor, rubric: Rubric) -> torch.Tensor:
    """``raw [B, G, D]`` with each step-scoped dimension replaced by the mean of its step scores (NaN where no step
    was scored)."""
    import torch
    out = raw.clone()
    for i in rubric.step_dimensions:
        column = steps[..., i]
        counted = (~torch.isnan(column)).sum(dim=-1)
        total = torch.nan_to_num(column, nan=0.0).sum(dim=-1)
        out[..., i] = torch.where(counted > 0, total / counted.clamp(min=1), float("nan")).to(out.dtype)
    return out


def single_turn_steps(raw: torch.Tensor, rubric: Rubric) -> torch.Tensor:
    """The step scores of single-turn completions: one step, the completion's own score (``[B, G, 1, D]``)."""
    import torch
    steps = torch.full((*raw.shape[:2], 1, raw.shape[-1]), float("nan"), dtype=raw.dtype)
    for i in rubric.step_dimensions:
        steps[:, :, 0, i] = raw[..., i]
    return steps
