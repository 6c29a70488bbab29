"""``grpo``: group-normalised advantages, (r - mean_group) / (std + eps).

Follows TRL's GRPOTrainer (``scale_rewards`` in {group, batch, none}; the std is Bessel-corrected
as ``torch.std``; eps = 1e-4) and DeepSeekMath's GRPO (arXiv 2402.03300, §4.1.2). NaN rewards are
left out of the statistics and get advantage 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from rlkit.plugin import RewardBatch, hookimpl, nan_mean_std

if TYPE_CHECKING:
    import torch

ScaleRewards = Literal["group", "batch", "none"]


def group_normalized_advantages(rewards: torch.Tensor, scale_rewards: ScaleRewards = "group",
                                eps: float = 1e-4) -> torch.Tensor:
    """``rewards [B, G]`` (NaN = unscored) → advantages ``[B, G]`` with no NaN.

    ``group`` divides by each group's std, ``batch`` by the std of all rewards in the batch
    (the mean stays per group, as in TRL), ``none`` only centres (Dr. GRPO, arXiv 2503.20783).
    """
    import torch
    if rewards.ndim != 2:
        raise ValueError(f"rewards must be [B, G], got {tuple(rewards.shape)}")
    mean, group_std, _ = nan_mean_std(rewards, dim=1, keepdim=True)
    centred = rewards - mean
    if scale_rewards == "group":
        adv = centred / (group_std + eps)
    elif scale_rewards == "batch":
        _, batch_std, _ = nan_mean_std(rewards.reshape(-1), dim=0)
        adv = centred / (batch_std + eps)
    elif scale_rewards == "none":
        adv = centred
    else:
        raise ValueError(f"scale_rewards must be group, batch or none, got {scale_rewards!r}")
    return torch.nan_to_num(adv, nan=0.0)


class GroupNormalizedAdvantage:
    """GRPO's estimator over the aggregated reward."""

    zero_mean_groups = True
    group_relative = True  # compares completions within their group; `rlkit validate` asks for num_generations >= 2

    @dataclass
    class Params:
        scale_rewards: ScaleRewards = "group"
        eps: float = 1e-4

    def __init__(self, params: Params) -> None:
        self.params = params

    def advantages(self, batch: RewardBatch) -> torch.Tensor:
        if batch.rewards is None:
            raise ValueError("grpo needs aggregated rewards in the batch")
        return group_normalized_advantages(batch.rewards, self.params.scale_rewards, self.params.eps)


@hookimpl
def rlkit_register_advantage_estimators(register):
    register("grpo", GroupNormalizedAdvantage)
