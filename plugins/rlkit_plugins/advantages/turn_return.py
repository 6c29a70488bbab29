"""``turn_return``: per-turn advantages from discounted returns, for multi-turn episodes.

Each policy turn t of an episode with n turns gets the reward r_t = ``step_coef`` · (its step reward, the rubric's
``scope: step`` dimensions; 0 where none was scored), plus the episode's reward on its last turn, and the return
R_t = Σ_{k≥t} γ^{k−t} r_k. With no step dimensions that is γ^(n−1−t) · R, the per-step reward of OpenEnv's
``ExponentialDiscountingTrajectoryRubric`` (``openenv.core.rubrics.trajectory``; γ = 0.99 there too). The returns of
turn t are normalised across the group's episodes that reached turn t, as GRPO normalises rewards
(``group_normalized_advantages``). The result is ``[B, G, T]``; the loop gives each turn's tokens its advantage. A
single-turn batch gets ``[B, G]``, exactly ``advantage=grpo``'s.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from rlkit.plugin import ConfigError, RewardBatch, hookimpl
from rlkit_plugins.advantages.grpo import ScaleRewards, group_normalized_advantages
from rlkit_plugins.advantages.turns import turn_layout

if TYPE_CHECKING:
    import torch


def discounted_returns(rewards: torch.Tensor, exists: torch.Tensor, gamma: float) -> torch.Tensor:
    """``[B, G, T]`` returns R_t = Σ_{k≥t, k exists} γ^{k−t} r_k; NaN where the turn does not exist or a reward it
    adds up is NaN."""
    import torch
    out = torch.full_like(rewards, float("nan"))
    running = torch.zeros(rewards.shape[:2], dtype=rewards.dtype)
    for t in range(rewards.shape[2] - 1, -1, -1):
        here = exists[..., t]
        running = torch.where(here, rewards[..., t] + gamma * running, running)
        out[..., t] = torch.where(here, running, float("nan"))
    return out


def turn_rewards(batch: RewardBatch, step_coef: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Each turn's reward ``[B, G, T]`` (step reward × ``step_coef``, the episode's reward added on its last turn) and
    ``exists``."""
    import torch
    assert batch.rewards is not None
    exists, step = turn_layout(batch)
    rewards = torch.zeros(exists.shape, dtype=torch.float32)
    if step is not None:
        rewards = step_coef * torch.nan_to_num(step.float(), nan=0.0)
    last = exists.sum(dim=-1, keepdim=True) - 1  # index of each episode's last turn
    on_last = torch.arange(exists.shape[2]).view(1, 1, -1) == last
    rewards = rewards + torch.where(on_last, batch.rewards.float().unsqueeze(-1), torch.zeros_like(rewards))
    return torch.where(exists, rewards, torch.zeros_like(rewards)), exists


class DiscountedTurnReturn:
    """Group-normalised discounted returns per turn (GRPO over returns-to-go)."""

    group_relative = True
    per_turn = True  # may return [B, G, T]: one advantage per policy turn

    @dataclass
    class Params:
        gamma: float = 0.99
        step_coef: float = 1.0
        scale_rewards: ScaleRewards = "group"
        eps: float = 1e-4

    def __init__(self, params: Params) -> None:
        if not 0.0 <= params.gamma <= 1.0:
            raise ConfigError(f"must lie in [0, 1], got {params.gamma}", "advantage.params.gamma")
        self.params = params

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        import torch
        if batch.rewards is None:
            raise ValueError("turn_return needs aggregated rewards in the batch")
        p = self.params
        rewards, exists = turn_rewards(batch, p.step_coef)
        if exists.shape[2] == 1 and "step_scores" not in batch.extras:
            return group_normalized_advantages(batch.rewards, p.scale_rewards, p.eps)  # single turn: GRPO
        returns = discounted_returns(rewards, exists, p.gamma)
        returns = torch.where(torch.isnan(batch.rewards).unsqueeze(-1), float("nan"), returns)
        columns = [group_normalized_advantages(returns[..., t], p.scale_rewards, p.eps)
                   for t in range(returns.shape[2])]
        return torch.where(exists, torch.stack(columns, dim=-1), 0.0)


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("turn_return", DiscountedTurnReturn)
