"""``process``: the episode's GRPO advantage plus a process-supervision term on each turn.

Each turn's step reward (the rubric's ``scope: step`` dimensions, weighted) is normalised over every scored turn of
the group's episodes, (s − mean) / (std + eps), as process supervision normalises step rewards across a group
(DeepSeekMath, arXiv 2402.03300 §4.1.3); that turn's tokens get the episode's group-normalised advantage plus
``step_coef`` times it. Turns without a step score, and rubrics without step dimensions, add nothing, so a
single-turn batch reduces exactly to ``advantage=grpo``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import RewardBatch, hookimpl, nan_mean_std
from rlkit_plugins.advantages.grpo import ScaleRewards, group_normalized_advantages
from rlkit_plugins.advantages.turns import turn_layout

if TYPE_CHECKING:
    import torch


def normalized_step_rewards(step: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """``[B, G, T]`` step rewards normalised over each group's scored turns; 0 where unscored or without contrast."""
    import torch
    b = step.shape[0]
    flat = step.reshape(b, -1)
    mean, std, n = nan_mean_std(flat, dim=1, keepdim=True)
    out = (flat - mean) / (std + eps)
    out = torch.where((n > 1) & (std > 0), out, torch.zeros_like(out))
    return torch.nan_to_num(out, nan=0.0).view_as(step)


class ProcessSupervisedAdvantage:
    """Episode advantage (GRPO) + ``step_coef`` × the group-normalised step reward, per turn."""

    group_relative = True
    per_turn = True

    @dataclass
    class Params:
        step_coef: float = 1.0
        scale_rewards: ScaleRewards = "group"
        eps: float = 1e-4

    def __init__(self, params: Params) -> None:
        self.params = params

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        import torch
        if batch.rewards is None:
            raise ValueError("process needs aggregated rewards in the batch")
        p = self.params
        episode = group_normalized_advantages(batch.rewards, p.scale_rewards, p.eps)
        exists, step = turn_layout(batch)
        if step is None and exists.shape[2] == 1:
            return episode
        bonus = torch.zeros(exists.shape) if step is None else normalized_step_rewards(step.float(), p.eps)
        unscored = torch.isnan(batch.rewards).unsqueeze(-1)
        out = episode.unsqueeze(-1) + p.step_coef * bonus
        return torch.where(exists & ~unscored, out, 0.0)


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("process", ProcessSupervisedAdvantage)
