"""The host's reward arithmetic that every plugin relies on: checking judge output, normalising
scores to [0, 1] once, applying rubric conditions, and assembling the RewardBatch."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from rlkit.core.errors import JudgeError, PluginError
from rlkit.core.rubric import Rubric
from rlkit.core.types import RewardBatch, Rollout

if TYPE_CHECKING:
    import torch


def check_judge_output(raw: torch.Tensor, rollout: Rollout, rubric: Rubric, judge: str) -> torch.Tensor:
    """Return ``raw`` as float32 after checking shape and ranges; a broken judge is named."""
    import torch
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
    import torch
    low = torch.tensor([d.low for d in rubric.dimensions], dtype=raw.dtype, device=raw.device)
    high = torch.tensor([d.high for d in rubric.dimensions], dtype=raw.dtype, device=raw.device)
    return (raw - low) / (high - low)


def quantile_normalize(scores: torch.Tensor) -> torch.Tensor:
    """Each dimension replaced by its quantile within the batch: (average rank − 1)/(n − 1) over its scored
    entries, so dimensions with very different spreads (a format score stuck near 1, a noisy quality score)
    reach the aggregator on the same footing. NaN stays NaN; a dimension scored once or constant gets 0.5."""
    import torch
    out = torch.full_like(scores, float("nan"))
    flat, flat_out = scores.reshape(-1, scores.shape[-1]), out.view(-1, scores.shape[-1])
    for j in range(flat.shape[1]):
        col = flat[:, j]
        valid = ~torch.isnan(col)
        values = col[valid]
        n = values.numel()
        if n == 0:
            continue
        if n == 1:
            flat_out[valid, j] = 0.5
            continue
        # average rank of ties: (#less + (#equal + 1)/2), computed by comparison (n is at most B·G)
        less = (values.unsqueeze(1) > values.unsqueeze(0)).sum(dim=1).to(scores.dtype)
        equal = (values.unsqueeze(1) == values.unsqueeze(0)).sum(dim=1).to(scores.dtype)
        rank = less + (equal + 1) / 2
        q = (rank - 1) / (n - 1)
        flat_out[valid, j] = torch.where(equal == n, torch.full_like(q, 0.5), q)
    return out


SCORE_NORMALIZATIONS = ("range", "quantile")


def apply_conditions(raw: torch.Tensor, rubric: Rubric) -> torch.Tensor:
    """Mask (NaN) a conditional dimension wherever its condition is not met.

    A dimension with ``condition: {dimension: correctness, min: 1}`` only counts once the answer
    is correct; where the condition dimension is itself NaN the condition is unknown, so the
    conditional dimension does not count either.
    """
    import torch
    names = rubric.dimension_names
    out = raw.clone()
    for i, dim in enumerate(rubric.dimensions):
        if dim.condition is None:
            continue
        ref = raw[..., names.index(dim.condition.dimension)]
        met = ref >= dim.condition.min  # False for NaN
        out[..., i] = torch.where(met, raw[..., i], torch.full_like(raw[..., i], float("nan")))
    return out


def weighed_scores(raw: torch.Tensor, rubric: Rubric, scheduler: Any, step: int = 0,
                   normalization: str = "range") -> RewardBatch:
    """Judge scores → a RewardBatch without rewards yet: conditions applied and scores normalised here, once
    (``range``: each dimension's rubric range mapped to [0, 1]; ``quantile``: then each dimension's quantile within
    the batch), and the weight scheduler's weights set from the normalised scores."""
    import torch
    if normalization not in SCORE_NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {SCORE_NORMALIZATIONS}, got {normalization!r}")
    masked = apply_conditions(raw, rubric)
    scores = normalize_scores(masked, rubric)
    if normalization == "quantile":
        scores = quantile_normalize(scores)
    weights = torch.as_tensor(scheduler.weights(step, scores, rubric), dtype=torch.float32)
    return RewardBatch(rubric=rubric, raw_scores=masked, scores=scores, weights=weights)


def aggregated(batch: RewardBatch, aggregator: Any) -> torch.Tensor:
    """The aggregator's rewards ``[B, G]`` of ``batch``, checked for shape."""
    import torch
    rewards = aggregator.aggregate(batch)
    expected = batch.scores.shape[:2]
    if not isinstance(rewards, torch.Tensor) or rewards.shape != expected:
        got = tuple(rewards.shape) if isinstance(rewards, torch.Tensor) else type(rewards).__name__
        raise PluginError(f"returned rewards of shape {got}, expected {list(expected)}", "aggregator")
    return rewards.to(torch.float32)


def aggregate_rewards(raw: torch.Tensor, rubric: Rubric, scheduler: Any, aggregator: Any,
                      step: int = 0, normalization: str = "range") -> RewardBatch:
    """Judge scores → the RewardBatch every estimator and preference constructor receives
    (:func:`weighed_scores`, then the aggregator forms the reward ``[B, G]``)."""
    batch = weighed_scores(raw, rubric, scheduler, step, normalization)
    return batch.with_rewards(aggregated(batch, aggregator))


def with_group_confidence(batch: RewardBatch, confidence: torch.Tensor | None, judge: str) -> RewardBatch:
    """Attach a judge's per-group confidence ``[B]`` in [0, 1] (``batch.extras["group_confidence"]``)."""
    import torch
    if confidence is None:
        return batch
    b = batch.shape[0]
    confidence = torch.as_tensor(confidence, dtype=torch.float32).detach().cpu()
    if confidence.shape != (b,) or torch.isnan(confidence).any() or (confidence < 0).any() or (confidence > 1).any():
        raise JudgeError(f"group_confidence() must be [B] = [{b}] in [0, 1], got shape {tuple(confidence.shape)}",
                         f"judge {judge!r}")
    return replace(batch, extras={**batch.extras, "group_confidence": confidence})


def confidence_scaled(advantages: torch.Tensor, batch: RewardBatch) -> torch.Tensor:
    """Advantages ``[B, G]`` with each group's row scaled by the judge's confidence in that group's order
    (a ranking judge's agreement between repetitions), unchanged when the judge reports none."""
    confidence = batch.extras.get("group_confidence")
    if confidence is None:
        return advantages
    confidence = confidence.to(advantages.device, advantages.dtype)
    return advantages * confidence.view(-1, *[1] * (advantages.dim() - 1))  # [B, G] or per turn [B, G, T]


@dataclass
class HeldoutScoring:
    """How held-out completions are scored when the training judge cannot score one alone (a ranking
    judge places completions within their group): another judge on the user's rubric, its weighted sum."""

    judge: Any
    judge_name: str
    rubric: Rubric
    aggregator: Any
    scheduler: Any
