"""What the turn-level estimators (``turn_return``, ``process``) read from a batch: which turns each episode has, and
each turn's step reward (the rubric's ``scope: step`` dimensions, weighted by the current weights)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlkit.plugin import RewardBatch, nan_weighted_sum

if TYPE_CHECKING:
    import torch


def turn_layout(batch: RewardBatch) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``exists`` ``bool [B, G, T]`` (an episode's turns; one turn each for single-turn rollouts) and the step
    rewards ``[B, G, T]`` in [0, 1] (NaN where no step dimension was scored), or None when the rubric has no step
    dimension."""
    import torch
    b, g, _ = batch.shape
    steps = batch.extras.get("step_scores")
    turns = batch.extras.get("num_turns")
    limit = steps.shape[2] if steps is not None else int(turns.max()) if turns is not None and turns.numel() else 1
    counts = turns if turns is not None else torch.ones((b, g), dtype=torch.long)
    exists = torch.arange(max(limit, 1)).view(1, 1, -1) < counts.view(b, g, 1)
    step_dims = batch.rubric.step_dimensions
    if steps is None or not step_dims:
        return exists, None
    weights = torch.zeros(batch.shape[2])
    weights[step_dims] = batch.weights[step_dims].float()
    return exists, torch.where(exists, nan_weighted_sum(steps.float(), weights), float("nan"))
