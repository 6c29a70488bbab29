"""The host's reward arithmetic that every plugin relies on: checking judge output, normalising
scores to [0, 1] once, applying rubric conditions, and assembling the RewardBatch."""

from __future__ import annotations

from typing import Any

import torch

from rlkit.errors import JudgeError, PluginError
from rlkit.rubric import Rubric
from rlkit.types import RewardBatch, Rollout


def check_judge_output(raw: torch.Tensor, rollout: Rollout, rubric: Rubric, judge: str) -> torch.Tensor:
    """Return ``raw`` as float32 after checking shape and ranges; a broken judge is named."""
    expected = (rollout.num_prompts, rollout.group_size, len(rubric.dimensions))
    if not isinstance(raw, torch.Tensor) or tuple(raw.shape) != expected:
        got = tuple(raw.shape) if isinstance(raw, torch.Tensor) else type(raw).__name__
        raise JudgeError(f"returned scores of shape {got}, expected [B, G, D] = {list(expected)}",
                         f"judge {judge!r}")
    raw = raw.detach().to(torch.float32)
    for i, dim in enumerate(rubric.dimensions):
        col = raw[..., i]
        finite = col[~torch.isnan(col)]
        if torch.isinf(finite).any() or ((finite < dim.low) | (finite > dim.high)).any():
            bad = finite[torch.isinf(finite) | (finite < dim.low) | (finite > dim.high)][0].item()
            raise JudgeError(
                f"scored dimension {dim.name!r} as {bad:g}, outside its range [{dim.low:g}, {dim.high:g}]",
                f"judge {judge!r}",
            )
    return raw


def normalize_scores(raw: torch.Tensor, rubric: Rubric) -> torch.Tensor:
    """Map each dimension from its rubric range to [0, 1]; NaN stays NaN."""
    low = torch.tensor([d.low for d in rubric.dimensions], dtype=raw.dtype, device=raw.device)
    high = torch.tensor([d.high for d in rubric.dimensions], dtype=raw.dtype, device=raw.device)
    return (raw - low) / (high - low)


def apply_conditions(raw: torch.Tensor, rubric: Rubric) -> torch.Tensor:
    """Mask (NaN) a conditional dimension wherever its condition is not met.

    A dimension with ``condition: {dimension: correctness, min: 1}`` only counts once the answer
    is correct; where the condition dimension is itself NaN the condition is unknown, so the
    conditional dimension does not count either.
    """
    names = rubric.dimension_names
    out = raw.clone()
    for i, dim in enumerate(rubric.dimensions):
        if dim.condition is None:
            continue
        ref = raw[..., names.index(dim.condition.dimension)]
        met = ref >= dim.condition.min  # False for NaN
        out[..., i] = torch.where(met, raw[..., i], torch.full_like(raw[..., i], float("nan")))
    return out


def aggregate_rewards(raw: torch.Tensor, rubric: Rubric, scheduler: Any, aggregator: Any,
                      step: int = 0) -> RewardBatch:
    """Judge scores → the RewardBatch every estimator and preference constructor receives.

    Conditions are applied and scores normalised here, once; the weight scheduler then sets the
    weights from the normalised scores, and the aggregator forms the reward ``[B, G]``.
    """
    masked = apply_conditions(raw, rubric)
    scores = normalize_scores(masked, rubric)
    weights = torch.as_tensor(scheduler.weights(step, scores, rubric), dtype=torch.float32)
    batch = RewardBatch(rubric=rubric, raw_scores=masked, scores=scores, weights=weights)
    rewards = aggregator.aggregate(batch)
    if not isinstance(rewards, torch.Tensor) or rewards.shape != scores.shape[:2]:
        got = tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
        raise PluginError(f"returned rewards of shape {got}, expected {list(scores.shape[:2])}", "aggregator")
    return batch.with_rewards(rewards.to(torch.float32))
